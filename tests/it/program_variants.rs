//! Program variants (`program:PATH`, `command:'…'`) and allocators linked in rather than
//! preloaded: one C program built plain and with `-ljemalloc` (tests/fixtures/c/twobuilds.c).

use std::path::PathBuf;

use crate::common::*;

/// The jemalloc-linked build, or `None` (skipped with the reason) when it cannot be built.
fn linked_build() -> Option<PathBuf> {
    if !need_c_compiler()
        || !need_allocators(&["jemalloc"])
        || !need_file(
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so",
            "libjemalloc-dev",
        )
    {
        return None;
    }
    Some(fixture("twobuilds_jemalloc"))
}

fn s(p: &std::path::Path) -> String {
    p.display().to_string()
}

#[test]
fn a_program_linked_with_jemalloc_shows_jemalloc_linked() {
    let Some(linked) = linked_build() else { return };
    let r = run_json(1, "glibc", &[], &[&s(&linked), "200"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.allocator_detected, "jemalloc (linked)", "{run:?}");
    // The terminal table's allocator column says the same.
    assert!(r.stdout().contains("jemalloc (linked)"), "{}", r.stdout());
}

#[test]
fn two_builds_compared_as_program_variants_are_each_verified() {
    let Some(linked) = linked_build() else { return };
    let plain = fixture("twobuilds_plain");
    let r = run_json(
        1,
        "plain,je",
        &[
            "--variant",
            &format!("plain=program:{}", s(&plain)),
            "--variant",
            &format!("je=program:{}", s(&linked)),
            "--baseline",
            "plain",
        ],
        &[&s(&plain), "300"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    for (name, exe, alloc) in [
        ("plain", &plain, "glibc"),
        ("je", &linked, "jemalloc (linked)"),
    ] {
        let v = variant(&doc, name);
        assert_eq!(v["program"], s(exe), "{v}");
        assert_eq!(v["command"], serde_json::Value::Null);
        let run = first_run(&doc, name);
        assert_eq!(run.status, RunStatus::Ok, "{name}: {run:?}");
        assert_eq!(run.verification, Verification::Verified, "{name}: {run:?}");
        let detail = &run.verification_detail;
        assert!(
            detail.contains(&format!("runs {}", s(exe))),
            "{name}: {detail}"
        );
        assert_eq!(run.allocator_detected, alloc, "{name}: {run:?}");
    }
}

#[test]
fn a_process_started_by_name_that_runs_another_program_is_not_effective() {
    // The variant runs dash in place of bash; the script starts `bash` again by name,
    // which PATH resolves to the system's bash: that process is not the variant's program.
    // dash has no --version: look for the files.
    if !need_file("/bin/dash", "dash") || !need_file("/bin/bash", "bash") {
        return;
    }
    let dash = std::fs::canonicalize("/bin/dash").unwrap();
    let r = run_json(
        1,
        "d",
        &[
            "--no-probes",
            "--variant",
            &format!("d=program:{}", s(&dash)),
            "--baseline",
            "d",
        ],
        &["bash", "-c", "sleep 0.3; bash -c 'sleep 0.3; true'"],
    );
    let doc = r.json();
    let run = first_run(&doc, "d");
    assert_eq!(
        run.status,
        RunStatus::VariantNotEffective,
        "{}",
        r.explain()
    );
    let detail = &run.verification_detail;
    assert!(
        detail.contains("started as 'bash', runs /usr/bin/bash")
            && detail.contains(&format!("not the variant's program {}", s(&dash))),
        "{detail}"
    );
}

#[test]
fn a_command_variant_runs_its_own_command_with_its_settings() {
    let r = run_json(
        1,
        "c",
        &[
            "--no-probes",
            "--variant",
            "c=command:'sh -c \"echo \\$WHO > who.txt; sleep 0.2\"' WHO=variant",
            "--baseline",
            "c",
        ],
        &["true"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let v = variant(&doc, "c");
    assert_eq!(
        v["command"],
        serde_json::json!(["sh", "-c", "echo $WHO > who.txt; sleep 0.2"])
    );
    let run = first_run(&doc, "c");
    assert_eq!(run.verification, Verification::Verified, "{run:?}");
    let detail = &run.verification_detail;
    assert!(
        detail.contains("runs ") && detail.contains("WHO=variant in environ"),
        "{detail}"
    );
    let who = std::fs::read_to_string(r.dir.path().join("who.txt")).unwrap();
    assert_eq!(who.trim(), "variant");
}

#[test]
fn bad_program_variants_exit_2_naming_the_variant() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.txt");
    std::fs::write(&data, "not a program").unwrap();
    for (spec, want) in [
        (
            "x=program:/nonexistent/ruby".to_string(),
            "variant 'x': program:/nonexistent/ruby does not exist".to_string(),
        ),
        (
            format!("x=program:{}", s(&data)),
            format!(
                "variant 'x': program:{} is not an executable file",
                s(&data)
            ),
        ),
        (
            "x=program:/bin/sh command:true".to_string(),
            "variant 'x': program:/bin/sh and command:true replace the program twice".into(),
        ),
        (
            "x=command:no-such-program-anywhere".to_string(),
            "command:no-such-program-anywhere is not found in PATH".into(),
        ),
    ] {
        let r = memtrial_in_tmp(&["run", "--variant", &spec, "--", "true"]);
        assert_eq!(r.code(), 2, "{spec}: {}", r.stderr());
        assert!(r.stderr().contains(&want), "{spec}: {}", r.stderr());
    }
    // The same from a plan file.
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        "command = \"true\"\n[[variant]]\nname = \"y\"\nprogram = \"/nonexistent/python\"\n",
    )
    .unwrap();
    let r = memtrial_in_tmp(&["run", "--plan", &s(&plan)]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr()
            .contains("variant 'y': program:/nonexistent/python does not exist"),
        "{}",
        r.stderr()
    );
}

#[test]
fn preloading_jemalloc_into_a_program_linked_with_it_is_flagged() {
    let Some(linked) = linked_build() else { return };
    let r = run_with(
        1,
        "jemalloc",
        &["--baseline", "jemalloc", "--json", "out.json"],
        &[&s(&linked), "200"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    // A plan note before the runs...
    assert!(
        r.stderr().contains("variant 'jemalloc' preloads into")
            && r.stderr()
                .contains("adds nothing, jemalloc answers malloc either way"),
        "{}",
        r.stderr()
    );
    // ...and the run's verification says it too.
    let doc = r.json();
    let run = first_run(&doc, "jemalloc");
    assert_eq!(run.verification, Verification::Verified, "{run:?}");
    let detail = &run.verification_detail;
    assert!(
        detail.contains("note: the program is built with jemalloc (libjemalloc.so.2, DT_NEEDED of the executable)"),
        "{detail}"
    );
    assert_eq!(run.allocator_detected, "jemalloc (linked)");
}

#[test]
fn inspect_names_a_linked_allocator() {
    let Some(linked) = linked_build() else { return };
    let mut child = std::process::Command::new(&linked)
        .arg("3000")
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = memtrial_in_tmp(&["inspect", &child.id().to_string()]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = r.stdout();
    assert!(out.contains("Allocator jemalloc (linked)"), "{out}");
    assert!(
        out.contains(
            "the program is built with jemalloc: libjemalloc.so.2, DT_NEEDED of the executable"
        ),
        "{out}"
    );
}
