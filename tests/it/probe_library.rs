//! The allocator probe in production: `memtrial probe-library` writes the embedded library,
//! a program preloads it with a bounded file (`MEMTRIAL_PROBE_MAX_BYTES`), and
//! `memtrial exporter --probe-dir` serves its figures; the file stays under its bound and
//! is removed when the program exits. Real processes, loopback only.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::exporter::{http_get, series, start_probe_exporter, wait_for, Killed};

/// `memtrial probe-library --out OUT`: its output, exit code and standard error.
fn probe_library(out: &Path) -> (i32, String, String) {
    let o = Command::new(memtrial())
        .args(["probe-library", "--out"])
        .arg(out)
        .output()
        .expect("run memtrial");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Writes the library into `dir`; returns its path, checked against what was printed.
fn written_library(dir: &Path) -> PathBuf {
    let lib = dir.join("libmemtrial-probe.so");
    let (code, stdout, stderr) = probe_library(&lib);
    assert_eq!(code, 0, "{stderr}");
    // "wrote PATH: N bytes, SHA-256 HEX"
    let rest = stdout
        .trim_end()
        .strip_prefix(&format!("wrote {}: ", lib.display()))
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"));
    let (bytes, hash) = rest.split_once(" bytes, SHA-256 ").expect("size and hash");
    let meta = std::fs::metadata(&lib).unwrap();
    assert_eq!(meta.len().to_string(), bytes);
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    // The hash printed is the file's, by another program's reckoning.
    let sum = Command::new("sha256sum").arg(&lib).output().unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert_eq!(sum.split_whitespace().next(), Some(hash), "{sum}");
    assert_eq!(hash.len(), 64);
    // Nothing beside it: the temporary file was renamed.
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
    lib
}

/// The fixture `live` under the name `program` (its comm, unique to the test): a link, not
/// a copy — a copy is open for writing while other tests fork, and a child that inherited
/// that descriptor makes its exec fail (ETXTBSY) until the child's own exec.
fn named_fixture(program: &Path) {
    std::os::unix::fs::symlink(fixture("live"), program).unwrap();
}

#[test]
fn a_program_preloading_the_written_library_is_served_and_its_file_stays_bounded() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let libdir = dir.path().join("lib");
    std::fs::create_dir(&libdir).unwrap();
    let lib = written_library(&libdir);
    let probe_dir = dir.path().join("probe");
    std::fs::create_dir(&probe_dir).unwrap();
    let name = format!("mtb{}", std::process::id());
    let program = dir.path().join(&name);
    named_fixture(&program);
    const BOUND: u64 = 4096;
    // 16 MiB live in 4096-byte blocks for 4 s, then a normal exit. At one line every
    // 10 ms the file passes 4 KiB in under a second.
    let mut child = Killed(
        Command::new(&program)
            .args(["16", "4"])
            .env("LD_PRELOAD", &lib)
            .env("MEMTRIAL_PROBE_DIR", &probe_dir)
            .env("MEMTRIAL_PROBE_INTERVAL_MS", "10")
            .env("MEMTRIAL_PROBE_MAX_BYTES", BOUND.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let file = probe_dir.join(child.pid().to_string());
    // The file's size, watched from the start until the program has exited: never past
    // the bound, and restarted (it shrinks) rather than left to stop growing.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut largest, mut last, mut restarts) = (0, 0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(m) = std::fs::metadata(&file) {
                    largest = largest.max(m.len());
                    if m.len() < last {
                        restarts += 1;
                    }
                    last = m.len();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            (largest, restarts)
        })
    };
    let exporter = start_probe_exporter(&name, &probe_dir);
    let g = format!("{{group=\"{name}\"}}");
    let mut text = String::new();
    let expected = 16.0 * 1048576.0;
    // The program may still be allocating at the first scrapes.
    let live = wait_for("the probe's live bytes", 3, || {
        text = http_get(exporter.addr, "/metrics").ok()?.1;
        series(&text, &format!("memtrial_group_allocator_live_bytes{g}")).filter(|v| *v >= expected)
    });
    assert!(
        (live / expected - 1.0).abs() < 0.02,
        "live {live} vs {expected}:\n{text}"
    );
    let held = series(&text, &format!("memtrial_group_allocator_held_bytes{g}")).unwrap();
    assert!(held >= live, "held {held} < live {live}");
    assert_eq!(
        series(&text, &format!("memtrial_group_probed_processes{g}")),
        Some(1.0)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the program did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (largest, restarts) = watcher.join().unwrap();
    assert!(status.success(), "{status}");
    assert!(largest <= BOUND, "the file reached {largest} bytes");
    assert!(
        largest > BOUND / 2,
        "the file never filled: {largest} bytes"
    );
    assert!(restarts >= 1, "the file was never restarted");
    // Removed at the normal exit, and nothing else left.
    assert!(!file.exists(), "{} is still there", file.display());
    assert_eq!(std::fs::read_dir(&probe_dir).unwrap().count(), 0);
    drop(exporter);
}

/// A restarted file still gives the exporter the latest figures at every scrape but
/// (at most) the moment of the restart: here, over 2 s of 10 ms restarts (a line every
/// 10 ms against the smallest bound), most scrapes see live bytes.
#[test]
fn the_exporter_reads_a_file_restarted_under_it() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lib = written_library(dir.path());
    let probe_dir = dir.path().join("probe");
    std::fs::create_dir(&probe_dir).unwrap();
    let name = format!("mtr{}", std::process::id());
    let program = dir.path().join(&name);
    named_fixture(&program);
    let child = Killed(
        Command::new(&program)
            .args(["4", "30"])
            .env("LD_PRELOAD", &lib)
            .env("MEMTRIAL_PROBE_DIR", &probe_dir)
            .env("MEMTRIAL_PROBE_INTERVAL_MS", "10")
            // Below the least: 4096.
            .env("MEMTRIAL_PROBE_MAX_BYTES", "1")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let exporter = start_probe_exporter(&name, &probe_dir);
    let g = format!("memtrial_group_allocator_live_bytes{{group=\"{name}\"}}");
    wait_for("the probe's live bytes", 3, || {
        series(&http_get(exporter.addr, "/metrics").ok()?.1, &g).filter(|v| *v >= 4.0 * 1048576.0)
    });
    let file = probe_dir.join(child.pid().to_string());
    let (mut scrapes, mut seen, mut largest) = (0, 0, 0);
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let (_, text) = http_get(exporter.addr, "/metrics").unwrap();
        scrapes += 1;
        if series(&text, &g).is_some_and(|v| v >= 4.0 * 1048576.0) {
            seen += 1;
        }
        largest = largest.max(std::fs::metadata(&file).map_or(0, |m| m.len()));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(largest <= 4096, "the file reached {largest} bytes");
    assert!(
        seen * 10 >= scrapes * 9,
        "live bytes in {seen} of {scrapes} scrapes"
    );
    // Killed, not exited: the file stays (bounded) until the PID is reused.
    drop(child);
    assert!(file.exists());
}

#[test]
fn probe_library_bad_out_is_refused_with_the_flag_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/libmemtrial-probe.so");
    let (code, _, stderr) = probe_library(&missing);
    assert_eq!(code, 2, "{stderr}");
    let parent = missing.parent().unwrap().display().to_string();
    for want in [
        format!("--out {}", missing.display()),
        format!("the directory {parent} does not exist"),
        format!("mkdir -p {parent}"),
    ] {
        assert!(stderr.contains(&want), "expected '{want}' in:\n{stderr}");
    }
    let (code, _, stderr) = probe_library(dir.path());
    assert_eq!(code, 2, "{stderr}");
    for want in [
        format!("--out {}", dir.path().display()),
        "is a directory; name the file to write in it".to_string(),
        format!("{}/libmemtrial-probe.so", dir.path().display()),
    ] {
        assert!(stderr.contains(&want), "expected '{want}' in:\n{stderr}");
    }
    // A file where a directory should be.
    let file = dir.path().join("f");
    std::fs::write(&file, "x").unwrap();
    let (code, _, stderr) = probe_library(&file.join("lib.so"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is not a directory"), "{stderr}");
    // Nothing was written anywhere.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // No --out: clap's usage error.
    let o = Command::new(memtrial())
        .arg("probe-library")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--out <PATH>"));
}

/// A directory the user may not write in: refused with the directory named and what to do.
#[test]
fn probe_library_without_permission_says_so() {
    if !(need_root("to run memtrial as nobody") && need_program("setpriv", "util-linux")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("memtrial");
    std::fs::copy(memtrial(), &bin).unwrap();
    let root_only = dir.path().join("root-only");
    std::fs::create_dir(&root_only).unwrap();
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = root_only.join("libmemtrial-probe.so");
    // A copy nobody may run (the build's may be out of its reach); its exec is tried again
    // while another test's child still holds the copy's descriptor (ETXTBSY).
    let mut tries = 0;
    let o = loop {
        let o = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(&bin)
            .args(["probe-library", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        tries += 1;
        if tries == 20 || !String::from_utf8_lossy(&o.stderr).contains("Text file busy") {
            break o;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    for want in [
        format!("--out {}", out.display()),
        format!("no permission to write in {}", root_only.display()),
        "choose a directory you may write to".to_string(),
    ] {
        assert!(stderr.contains(&want), "expected '{want}' in:\n{stderr}");
    }
    assert_eq!(std::fs::read_dir(&root_only).unwrap().count(), 0);
}

/// `memtrial run` reads each process's file whole, exit sample included: a
/// `MEMTRIAL_PROBE_MAX_BYTES` in memtrial's own environment never reaches its workload.
#[test]
fn memtrial_run_keeps_its_files_whole_whatever_its_environment_says() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(memtrial())
        .args([
            "run",
            "--runs",
            "1",
            "--variants",
            "glibc",
            "--probe-interval",
            "10ms",
            "--json",
            "out.json",
            "--",
        ])
        .arg(fixture("live"))
        .args(["4", "2"])
        .env("MEMTRIAL_PROBE_MAX_BYTES", "4096")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let probe_dir = crate::exporter_trust::run_probe_dir(dir.path()).expect("the run's probe dir");
    let files: Vec<PathBuf> = std::fs::read_dir(&probe_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.contains("\n# exit\n"), "no exit sample:\n{text}");
    assert!(text.len() > 4096, "{} bytes: bounded", text.len());
    assert_eq!(text.matches("# memtrial-probe 1 ").count(), 1, "restarted");
}
