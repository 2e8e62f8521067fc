//! The allocator probe and the leak-or-fragmentation verdict (issue 10): real allocators,
//! real C fixtures and a real server under load; and an old database upgraded in place.

use std::path::Path;

use serde_json::Value;

use crate::common::*;
use memtrial::record::{AllocatorPoint, AllocatorView};

const MIB: f64 = 1048576.0;

/// The allocator view of a variant's first run in the record.
fn allocator_of(doc: &Value, variant: &str) -> AllocatorView {
    first_run(doc, variant)
        .inside
        .allocator
        .unwrap_or_else(|| panic!("{variant}: no allocator view"))
}

/// Its point at the peak.
fn at_peak(a: &AllocatorView) -> &AllocatorPoint {
    a.at_peak
        .as_ref()
        .unwrap_or_else(|| panic!("no point at the peak: {a:?}"))
}

fn live_fixture_run(variants: &str, args: &[&str]) -> Run {
    let live = fixture("live").display().to_string();
    run_json(
        1,
        variants,
        &["--probe-interval", "100ms"],
        &[&[live.as_str()], args].concat(),
    )
}

#[test]
fn each_allocator_reports_the_live_bytes_the_program_holds() {
    if !need_c_compiler() || !need_allocators(&["jemalloc", "tcmalloc", "mimalloc"]) {
        return;
    }
    // 64 MiB in 4096-byte blocks, plus the 128 KiB array of pointers to them.
    let r = live_fixture_run("glibc,jemalloc,tcmalloc,mimalloc", &["64", "2"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let expected = 64.0 * MIB + 128.0 * 1024.0;
    for v in ["glibc", "jemalloc", "tcmalloc"] {
        let run = first_run(&doc, v);
        assert_eq!(run.status, RunStatus::Ok, "{v}: {}", r.explain());
        let a = allocator_of(&doc, v);
        assert_eq!(a.answered, v, "{v}: {a:?}");
        assert!(a.disagreement.is_none(), "{v}: {a:?}");
        let live = at_peak(&a).live_bytes.expect("live bytes") as f64;
        assert!(
            (live / expected - 1.0).abs() < 0.02,
            "{v}: live {live} vs {expected} (more than 2% apart)"
        );
        let held = at_peak(&a).held_bytes.expect("held bytes") as f64;
        assert!(held >= live * 0.99, "{v}: held {held} < live {live}");
        let ratio = median(&doc, v, "held_over_live")
            .as_f64()
            .expect("held/live in the summary");
        assert!(
            ratio < 1.1,
            "{v}: held/live {ratio} for a heap with no holes"
        );
    }
    // mimalloc offers no live figure: absent, not estimated; its committed bytes are there.
    let m = allocator_of(&doc, "mimalloc");
    assert_eq!(m.answered, "mimalloc");
    assert!(at_peak(&m).live_bytes.is_none(), "{m:?}");
    assert!(at_peak(&m).held_bytes.unwrap() as f64 >= 64.0 * MIB);
    assert!(
        r.stdout().contains("it offers no live-bytes figure"),
        "{}",
        r.stdout()
    );
}

#[test]
fn a_forked_child_is_probed_too() {
    if !need_c_compiler() || !need_allocators(&["jemalloc"]) {
        return;
    }
    // The parent holds 16 MiB; the child inherits them and adds 32 MiB: 16 + 48 live.
    let r = live_fixture_run("glibc,jemalloc", &["16", "2", "fork", "32"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    for v in ["glibc", "jemalloc"] {
        let a = allocator_of(&doc, v);
        assert_eq!(a.processes, 2, "{v}: {a:?}");
        let live = at_peak(&a).live_bytes.unwrap() as f64;
        let expected = 64.0 * MIB + 2.0 * 32.0 * 1024.0 + 64.0 * 1024.0;
        assert!(
            (live / expected - 1.0).abs() < 0.02,
            "{v}: live {live} vs {expected}"
        );
    }
}

#[test]
fn a_batch_job_gets_its_state_at_the_peak_not_a_leak_verdict() {
    if !need_c_compiler() {
        return;
    }
    // 64 MiB allocated, every other block freed: the heap stays, half of it live.
    let r = live_fixture_run("glibc", &["frag", "64", "2"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let why = why(&doc, "glibc");
    assert_eq!(why["verdict"], "at_peak", "{why}");
    // Held over live at the RSS peak is retention at the moment chosen there: RSS holds its
    // peak both before the frees (64 MiB live, 1×) and after (32 MiB live, 2×), and the
    // moment of the most held and then the most live is taken, so that held/live never
    // overstates what the allocator kept (issue 36): between 1× and the 2× the job made.
    let ratio = median(&doc, "glibc", "held_over_live").as_f64().unwrap();
    assert!(
        (0.95..2.2).contains(&ratio),
        "held/live {ratio}, made 1.0 then 2.0"
    );
    // The highest of the probe's samples: a lower bound, a sample may miss the very top.
    // Beside a busy suite the workload's probe thread can wait for a CPU for a second
    // (seen: 116 samples spanning 56% of a 2.36 s run); the product then shows no peak of
    // live bytes and says why, by design (evidence rules), rather than a figure from a
    // part of the run. That stated absence is the allowance; a figure, when shown, holds.
    match median(&doc, "glibc", "peak_live_bytes").as_f64() {
        Some(floor) => assert!(
            (0.85 * 64.0 * MIB..=64.0 * MIB * 1.02).contains(&floor),
            "the program's peak of live bytes {floor}, made 64 MiB"
        ),
        None => {
            let reason = summary(&doc, "glibc")["evidence"]["peak_live_bytes"]["absent"]["reason"]
                .as_str()
                .unwrap_or("");
            assert!(
                reason.contains("allocator samples cover"),
                "no peak of live bytes and no stated reason: {}",
                summary(&doc, "glibc")["evidence"]
            );
        }
    }
    assert!(
        r.stdout().contains("at its RSS peak:") && r.stdout().contains("held by the allocator"),
        "{}",
        r.stdout()
    );
    assert!(!r.stdout().contains("leak:"), "{}", r.stdout());
}

fn server_py() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/servers/server.py")
        .display()
        .to_string()
}

/// `server.py` in `mode` (with its arguments) under `duration` of load, the allocator
/// probe reporting every `probe_interval`.
fn loaded_server(mode: &[&str], probe_interval: &str, duration: &str) -> Run {
    let script = server_py();
    run_json(
        1,
        "glibc",
        &[
            "--probe-interval",
            probe_interval,
            "--url",
            "http://127.0.0.1:{port}/hello",
            "--duration",
            duration,
            "--cooldown",
            "200ms",
            "--connections",
            "4",
            "--ready-timeout",
            "20s",
        ],
        &[&["python3", script.as_str(), "{port}"], mode].concat(),
    )
}

#[test]
#[ignore = "measures: the probe's CPU budget decides how many samples fall late in the window; runs alone in the second pass of scripts/test.sh"]
fn a_fragmented_heap_under_steady_load_is_fragmentation_not_a_leak() {
    if !need_python3() {
        return;
    }
    // 20 MiB under 15 s of load, sampled every 250 ms: glibc's mallinfo2 walks every free
    // chunk (about 0.35 ms for these 2,600). The dense start-up sampling spends most of the
    // probe's burst (30 ms), after which its budget (0.15% of a core) allows a few samples
    // a second: enough in the later half of the window, where the slope is fitted. With
    // 40 MiB beside the other tests of the suite only two of 85 fell there, and on a machine
    // loaded by parallel builds none after the first 0.2 s: "too short" was the right
    // verdict then, so this test runs alone and keeps its samples cheap.
    // How many samples the budget leaves for the later half varies with how expensive the
    // server's heap is to walk at that moment (seen: 1 of 3 runs starved in a row on this
    // 2-core machine): a run whose budget ran out is "too short", never a leak, and the
    // test tries again, at most three times. With 5 s of load (2026-11-28, a quiet machine)
    // every try starved: the budget grows with the run's length (about 4 samples a second
    // at ~0.35 ms each once the burst is spent), and the later half of 5 s got 0-1 of the
    // 3 needed; 15 s leaves it tens. In CI (2026-11-28) 15 s still starved 3 tries in a
    // row (2-3 in the later half): the probe's watch between samples (statm, the wake,
    // ~0.1% of a core) counted in the samples' 0.15%. It no longer does: 14-17 samples in
    // the later 7 s of this server's load, against 5-6 before (the two shims side by side).
    let mut tries = Vec::new();
    let doc = loop {
        let r = loaded_server(&["fragment", "20"], "250ms", "15s");
        assert_eq!(r.code(), 0, "{}", r.explain());
        let doc = r.json();
        let verdict = why(&doc, "glibc").clone();
        assert_ne!(verdict["verdict"], "leak", "{verdict}");
        if verdict["verdict"] == "fragmentation" || tries.len() == 2 {
            break doc;
        }
        assert_eq!(verdict["verdict"], "too_short", "{verdict}");
        tries.push(verdict);
    };
    let why = why(&doc, "glibc");
    assert_eq!(why["verdict"], "fragmentation", "{why}; before: {tries:?}");
    let sentence = why["sentence"].as_str().unwrap();
    // The fixture freed every other buffer of 20 MiB: the allocator holds about twice live.
    let ratio: f64 = sentence
        .split('(')
        .nth(1)
        .and_then(|s| s.split('×').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {sentence:?}"));
    assert!((1.6..2.3).contains(&ratio), "held/live {ratio}: {sentence}");
    assert!(sentence.contains("unused"), "{sentence}");
}

#[test]
fn a_server_that_keeps_memory_for_three_seconds_is_too_short_to_call_a_leak() {
    if !need_python3() {
        return;
    }
    // Live bytes grow over 3 s of load, which cannot be told from warm-up: "too short",
    // with how much longer to run, never a leak.
    let r = loaded_server(&["leak"], "100ms", "3s");
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let why = why(&doc, "glibc");
    assert_eq!(why["verdict"], "too_short", "{why}");
    let sentence = why["sentence"].as_str().unwrap();
    assert!(sentence.contains("live bytes grew"), "{why}");
    assert!(sentence.contains("run 2 more minutes"), "{why}");
    assert!(!r.stdout().contains("leak:"), "{}", r.stdout());
}

#[test]
#[ignore = "measures: 4-6 min of load; runs alone in the second pass of scripts/test.sh"]
fn a_server_that_keeps_memory_per_request_is_a_leak() {
    // The live bytes of this Python server stay correlated over 6-8 s (its GC's cycles:
    // 6 s on this machine, 8 s in CI on 2026-11-28), a block is three times that, and a
    // leak verdict needs 6 blocks in the later half of the steady window: 130 s gave 3 here
    // and 250 s gave 5 in CI ("too short to tell: … run 1 more minute"), which is the rule
    // working, not a leak missed. So the test does what that sentence asks a user to do:
    // a run that is too short to tell is run again for as much longer as it says, at most
    // twice, and must then be called a leak. Never anything but a leak or too short.
    if !need_python3() {
        return;
    }
    let script = server_py();
    let mut seconds = 280u64;
    let mut tries = Vec::new();
    let why = loop {
        let duration = format!("{seconds}s");
        let r = run_with(
            1,
            "glibc",
            &[
                "--probe-interval",
                "500ms",
                "--json",
                "out.json",
                "--url",
                "http://127.0.0.1:{port}/hello",
                "--duration",
                &duration,
                "--cooldown",
                "200ms",
                "--connections",
                "2",
                "--rate",
                "50",
                "--ready-timeout",
                "20s",
            ],
            &["python3", &script, "{port}", "leak"],
        );
        assert_eq!(r.code(), 0, "{}", r.explain());
        let doc = r.json();
        let why = variant(&doc, "glibc")["summary"]["why"].clone();
        if why["verdict"] == "leak" || tries.len() == 2 {
            break why;
        }
        assert_eq!(why["verdict"], "too_short", "{why}; before: {tries:?}");
        let sentence = why["sentence"].as_str().unwrap_or_default();
        seconds += more_seconds(sentence).unwrap_or_else(|| panic!("no 'run N more' in {why}"));
        tries.push(why);
    };
    assert_eq!(why["verdict"], "leak", "{why}; before: {tries:?}");
    assert!(
        why["sentence"]
            .as_str()
            .unwrap()
            .contains("live bytes grow"),
        "{why}"
    );
}

/// The seconds a "too short" sentence asks for: "run 1 more minute", "run at least 3 more
/// minutes".
fn more_seconds(sentence: &str) -> Option<u64> {
    let rest = sentence.split("run ").last()?;
    let rest = rest.strip_prefix("at least ").unwrap_or(rest);
    let minutes: u64 = rest.split(' ').next()?.parse().ok()?;
    rest.contains(" more minute").then_some(minutes * 60)
}

#[test]
fn no_probes_means_the_kernels_counters_only() {
    if !need_c_compiler() {
        return;
    }
    let live = fixture("live").display().to_string();
    let r = run_with(
        1,
        "glibc",
        &["--no-probes", "--json", "out.json"],
        &[&live, "4", "1"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    assert_eq!(doc["experiment"]["probes"]["kinds"], serde_json::json!([]));
    // No probe ran inside the workload: the record's `inside` holds only what the kernel
    // told (transparent huge pages), no allocator or runtime view.
    let inside = &first_run_json(&doc, "glibc")["inside"];
    assert!(
        inside
            .as_object()
            .is_none_or(|o| o.keys().all(|k| k == "thp")),
        "{inside}"
    );
    assert!(!r.stdout().contains("live at peak"), "{}", r.stdout());
    assert!(
        r.stdout()
            .contains("no allocator figures: the allocator probe was off"),
        "{}",
        r.stdout()
    );
}

#[test]
fn a_static_program_has_no_probe_data_and_the_report_says_why() {
    if !need_c_compiler() {
        return;
    }
    let prog = fixture("alloc_loop_static").display().to_string();
    let r = run_json(1, "glibc", &[], &[&prog, "300"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    let absent = &run.inside.absent[0];
    assert_eq!(absent.probe, "allocator", "{absent:?}");
    assert!(absent.reason.contains("statically linked"), "{absent:?}");
}

#[test]
fn a_database_from_the_previous_release_opens_reports_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/db/v3.db"),
        &db,
    )
    .unwrap();
    // The stored experiments ran in /tmp/v3: here, in a directory of this test's own, so
    // that what a killed earlier run (or anyone) left at /tmp/v3 cannot skip the check below.
    let workdir = dir.path().join("v3");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE experiments SET plan_json = replace(plan_json, '\"workdir\":\"/tmp/v3\"', ?1)",
            [format!(
                "\"workdir\":{}",
                serde_json::json!(workdir.display().to_string())
            )],
        )
        .unwrap();
    let db_arg = db.display().to_string();
    let run = |args: &[&str]| {
        let mut a: Vec<&str> = args.to_vec();
        a.extend_from_slice(&["--db", &db_arg]);
        std::process::Command::new(memtrial())
            .args(&a)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let list = run(&["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{list:?}");
    assert!(
        text.contains("complete") && text.contains("interrupted"),
        "{text}"
    );
    // The finished experiment reports as before, in the new schema.
    let json = dir.path().join("one.json");
    let rep = run(&["report", "1", "--json", &json.display().to_string()]);
    assert!(rep.status.success(), "{rep:?}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_schema(&doc, "experiment-v4.schema.json");
    assert_eq!(doc["variants"].as_array().unwrap().len(), 2);
    assert_eq!(first_run(&doc, "glibc").status, RunStatus::Ok);
    // An experiment stored before probes existed resumes without them: its runs stay alike.
    assert_eq!(doc["experiment"]["probes"]["kinds"], serde_json::json!([]));
    // Resuming where the stored experiment's directory is missing is refused up front,
    // naming it (before, every resumed run failed with "could not start memtrial's
    // spawner: No such file or directory").
    let refused = run(&["run", "--resume", "2", "--quiet"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}, which does not exist", workdir.display())),
        "{err}"
    );
    std::fs::create_dir_all(&workdir).unwrap();
    let resumed = run(&["run", "--resume", "2", "--quiet"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let list = run(&["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        !text.contains("interrupted") && text.contains("6/6"),
        "after --resume: {text}"
    );
    let json2 = dir.path().join("two.json");
    assert!(
        run(&["report", "2", "--json", &json2.display().to_string()])
            .status
            .success()
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json2).unwrap()).unwrap();
    for v in doc["variants"].as_array().unwrap() {
        for r in v["runs"].as_array().unwrap() {
            let inside = &r["inside"];
            assert!(
                inside
                    .as_object()
                    .is_none_or(|o| o.keys().all(|k| k == "thp")),
                "a resumed old plan got probes: {r}"
            );
        }
    }
}

/// Foreign files: a database deleted, its logs left beside the new one. The new database's
/// first experiment is `exp-1` again, and so is its first run's report directory, which
/// still holds the old run's reports (one file per process). The new run's figures are its
/// own: `/bin/true` ends before the probe's first sample and has no allocator view, as in a
/// clean directory — not the old run's processes (the two of its Python program, with
/// whatever else that started).
#[test]
fn a_deleted_databases_reports_are_not_read_as_the_new_runs() {
    if !need_python3() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |json: &str, cmd: &[&str]| {
        let out = std::process::Command::new(memtrial())
            .args([
                "run",
                "--runs",
                "1",
                "--variants",
                "glibc",
                "--json",
                json,
                "--",
            ])
            .args(cmd)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(json)).unwrap()).unwrap();
        first_run(&doc, "glibc")
    };
    let reports = dir
        .path()
        .join("memtrial-logs/exp-1/001-glibc.probe/allocator");
    let numbered = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&reports)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.parse::<i32>().is_ok())
            .collect();
        v.sort();
        v
    };
    let old = run(
        "old.json",
        &[
            "python3",
            "-c",
            "import os, time\nos.fork()\nx = [bytearray(1000) for _ in range(20000)]\ntime.sleep(1.2)",
        ],
    );
    let old_view = old.inside.allocator.expect("the old run's allocator view");
    assert!(old_view.processes >= 2, "{old_view:?}");
    assert_eq!(
        numbered().len(),
        old_view.processes as usize,
        "the old run's reports: {:?}",
        numbered()
    );
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("memtrial.db")
        {
            std::fs::remove_file(p).unwrap();
        }
    }
    let new = run("new.json", &["/bin/true"]);
    assert!(numbered().is_empty(), "left: {:?}", numbered());
    assert!(
        new.inside
            .allocator
            .as_ref()
            .is_none_or(|a| a.processes == 0),
        "{:?}",
        new.inside.allocator
    );
}
