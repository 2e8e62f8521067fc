//! What the user sees: one printer (`--quiet`), escaping of what came from the input,
//! and messages that name the real cause (issue 13 items 9 and 10).

use std::process::Command;

use crate::common::{is_root, memtrial, memtrial_in_tmp, require, run_with};

#[test]
fn list_shows_control_characters_escaped() {
    // `sh -c true NAME`: NAME is only $0, but it is part of the stored command.
    let r = memtrial_in_tmp(&[
        "--quiet",
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--",
        "/bin/sh",
        "-c",
        "true",
        "evil\u{202E}txt.exe\x1b[2J",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let table = r.stdout();
    assert!(
        !table.contains('\x1b') && !table.contains('\u{202E}'),
        "{table}"
    );
    assert!(table.contains("\\u202e"), "{table}");
    let out = Command::new(memtrial())
        .arg("list")
        .current_dir(r.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        !text.contains('\x1b') && !text.contains('\u{202E}'),
        "{text}"
    );
    assert!(text.contains("$'evil\\u202etxt.exe\\x1b[2J'"), "{text}");
}

#[test]
fn error_message_shows_control_characters_escaped() {
    let r = memtrial_in_tmp(&["run", "--", "/no/such/prog\x1b]0;owned\x07\u{202E}"]);
    assert_eq!(r.code(), 2);
    let e = r.stderr();
    assert!(e.starts_with("memtrial: error: "), "{e}");
    assert!(
        !e.contains('\x1b') && !e.contains('\x07') && !e.contains('\u{202E}'),
        "{e:?}"
    );
    assert!(e.contains("\\x1b]0;owned\\x07\\u{202e}"), "{e}");
}

#[test]
fn database_in_a_missing_directory_is_named_once() {
    for cmd in [&["list"][..], &["run", "--", "/bin/true"][..]] {
        let mut args = vec!["--db", "/nonexistent-memtrial/dir/x.db"];
        args.extend_from_slice(cmd);
        let r = memtrial_in_tmp(&args);
        assert_eq!(r.code(), 2);
        let e = r.stderr();
        assert!(
            e.contains("the directory /nonexistent-memtrial/dir does not exist"),
            "{e}"
        );
        assert_eq!(e.matches("x.db").count(), 1, "said once: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn inspect_kernel_thread_says_kernel_thread_not_exited() {
    let comm = std::fs::read_to_string("/proc/2/comm").unwrap_or_default();
    let kthreadd = || comm.trim() == "kthreadd";
    if !require("PID 2 to be kthreadd", "a host PID namespace", kthreadd) {
        return;
    }
    let r = memtrial_in_tmp(&["inspect", "2"]);
    assert_eq!(r.code(), 2, "{}", r.stdout());
    let e = r.stderr();
    assert!(e.contains("PID 2 (kthreadd) is a kernel thread"), "{e}");
    assert!(!e.contains("exited"), "{e}");
}

#[test]
fn inspect_as_root_is_not_told_to_run_as_root() {
    if !require("root", "run the tests as root", is_root) {
        return;
    }
    let r = memtrial_in_tmp(&["inspect", "1"]);
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert!(!all.contains("run memtrial as root"), "{all}");
    assert!(
        !all.contains("run as the process's owner or as root"),
        "{all}"
    );
    if all.contains("refused") {
        // Root was refused: the hint names what is left (capability or policy).
        assert!(
            all.contains("CAP_SYS_PTRACE") || all.contains("security policy"),
            "{all}"
        );
    }
}

#[test]
fn preload_that_is_not_elf_quotes_the_loader_not_setuid() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libnot-elf.so");
    std::fs::write(&fake, "this is text, not a shared object\n".repeat(8)).unwrap();
    let variant = format!("x=preload:{}", fake.display());
    let r = run_with(1, "glibc", &["--variant", &variant], &["/bin/sleep", "0.5"]);
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert_eq!(r.code(), 1, "{all}");
    assert!(
        all.contains("the loader refused it: ld.so: object")
            && all.contains("cannot be preloaded (invalid ELF header)"),
        "{all}"
    );
    assert!(!all.contains("setuid"), "{all}");
}

/// Issue 38, item 12: an output that cannot be written is refused before any run (a
/// directory, a device that takes no data, a /proc file), its OS error said once; one that
/// fails only at the end (a file /proc cannot create) says once that the runs are stored
/// and how to write them again (before: every case failed after the whole experiment, the
/// OS error twice, and no word of the stored runs).
#[test]
fn outputs_are_checked_before_the_runs_and_a_late_failure_says_the_runs_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--runs", "1", "--variants", "glibc", "--quiet"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "/bin/sh", "-c", "echo x >> ran"]);
        Command::new(memtrial())
            .args(&args)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    for (flag, path, says) in [
        (
            "--html",
            "out",
            "--html out: is a directory; give a file's path, e.g. --html out/report.html",
        ),
        (
            "--json",
            "/dev/full",
            "--json /dev/full: cannot write: No space left on device",
        ),
        (
            "--csv",
            "/proc/version",
            "--csv /proc/version: cannot write",
        ),
    ] {
        let o = run(&[flag, path]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {path}: {e}");
        assert!(e.contains(says), "{flag} {path}: {e}");
        assert!(e.matches("os error").count() <= 1, "said twice: {e}");
        assert!(
            !dir.path().join("ran").exists(),
            "{flag} {path}: the workload ran"
        );
    }
    let o = run(&[
        "--json",
        "/proc/memtrial-no-such-file.json",
        "--csv",
        "runs.csv",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(dir.path().join("ran").exists());
    assert_eq!(e.matches("os error").count(), 1, "said once: {e}");
    assert!(
        e.contains("the runs are stored in memtrial.db (experiment 1): write them again with `memtrial report 1 --json FILE`"),
        "{e}"
    );
    // The other output was written all the same, and the runs are there to write again.
    assert!(dir.path().join("runs.csv").exists());
    let o = Command::new(memtrial())
        .args(["report", "1", "--json", "again.json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
