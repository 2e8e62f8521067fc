//! `memtrial soak`: variants side by side on one stream of requests, measured in windows,
//! decided, killed and resumed, interrupted, and refused on bad input. Real servers
//! (tests/fixtures/servers/server.py) on 127.0.0.1, real cgroups.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::*;

/// What a soak test needs: root with cgroups, and Python for the server.
fn ready() -> bool {
    need_python3()
        && need_root("a soak puts each instance in a cgroup of its own")
        && need_cgroups().is_some()
}

fn server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/servers/server.py")
        .display()
        .to_string()
}

fn soak(dir: &Path) -> Command {
    let mut c = Command::new(memtrial());
    c.arg("soak").current_dir(dir).env("NO_COLOR", "1");
    c
}

/// `memtrial soak --variants VARIANTS --url http://127.0.0.1:{port}/ --rate RATE` in `dir`:
/// the server soak most tests run.
fn server_soak(dir: &Path, variants: &str, rate: &str) -> Command {
    let mut c = soak(dir);
    c.args([
        "--variants",
        variants,
        "--url",
        "http://127.0.0.1:{port}/",
        "--rate",
        rate,
    ]);
    c
}

/// The end of a soak's command line: windows of `window` sampled every 500 ms, then the
/// test server named by `marker`.
fn then_server<'c>(c: &'c mut Command, window: &str, marker: &str) -> &'c mut Command {
    c.args(["--window", window, "--interval", "500ms", "--"])
        .args(server_cmd(marker))
}

/// The server command with a marker that names this test's processes.
fn server_cmd(marker: &str) -> Vec<String> {
    ["python3", &server(), "{port}", "ok", "0", marker]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn summary(dir: &Path) -> Value {
    let out = Command::new(memtrial())
        .args(["report", "--soak", "--json", "-"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the soak's JSON")
}

fn variant<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no variant {name} in {doc:#}"))
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn variants_run_side_by_side_on_the_same_requests_and_nothing_is_left() {
    if !ready() || !need_allocators(&["jemalloc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-side-{}", std::process::id());
    let out = then_server(
        server_soak(dir.path(), "glibc,arena2,jemalloc", "40").args([
            "--duration",
            "16s",
            "--html",
            "soak.html",
        ]),
        "4s",
        &marker,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        no_process_matching(&marker),
        "an instance outlived its soak"
    );
    let doc = summary(dir.path());
    assert_eq!(doc["schema"], "memtrial-soak/1");
    assert_eq!(doc["status"], "done");
    // One stream fanned out: every instance completed the same requests (within what
    // was in flight at the end) and nearly all that were due.
    let counts: Vec<u64> = ["glibc", "arena2", "jemalloc"]
        .iter()
        .map(|v| variant(&doc, v)["requests"].as_u64().unwrap())
        .collect();
    let (lo, hi) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    assert!(lo > 400 && hi - lo <= 4, "{counts:?}");
    let due = variant(&doc, "glibc")["due"].as_u64().unwrap();
    assert!(lo as f64 >= 0.97 * due as f64, "{lo} of {due} due");
    for v in ["glibc", "arena2", "jemalloc"] {
        let s = variant(&doc, v);
        assert!(s["windows_counted"].as_u64().unwrap() >= 2, "{s:#}");
        assert_eq!(s["errors"], 0, "{s:#}");
        assert!(s["rss"]["variant"].as_f64().unwrap() > 5e6, "{s:#}");
        assert!(s["p95_ms"]["variant"].as_f64().unwrap() > 0.0, "{s:#}");
    }
    // The jemalloc instance ran with jemalloc mapped and the allocator probe reporting.
    let logs = dir.path().join("memtrial-logs/soak-1");
    assert!(logs.join("jemalloc.0.stderr").exists());
    let html = std::fs::read_to_string(dir.path().join("soak.html")).unwrap();
    assert!(
        html.contains("<svg") && html.contains("Recommendation"),
        "{html:.300}"
    );
}

#[test]
fn until_decided_stops_a_soak_with_a_planted_difference() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-decide-{}", std::process::id());
    let started = Instant::now();
    let out = then_server(
        server_soak(dir.path(), "glibc", "20").args([
            "--variant",
            "fat=SERVER_BALLAST_MIB=48",
            "--until-decided",
            "--max-duration",
            "3m",
            "--json",
            "s.json",
        ]),
        "4s",
        &marker,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        started.elapsed() < Duration::from_secs(150),
        "the rule did not stop it"
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    let reason = doc["stop_reason"].as_str().unwrap();
    assert!(reason.starts_with("decided at"), "{reason}");
    let fat = variant(&doc, "fat");
    assert_eq!(fat["standing"], "differs", "{fat:#}");
    let lo = fat["rss"]["ci"][0].as_f64().unwrap();
    assert!(lo > 1.05, "{fat:#}");
    assert!(
        doc["recommendation"]
            .as_str()
            .unwrap()
            .starts_with("keep glibc"),
        "{doc:#}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("decided at"));
    assert!(no_process_matching(&marker));
}

#[test]
fn a_killed_soak_leaves_nothing_after_the_next_start_and_resumes_with_its_gap() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-kill-{}", std::process::id());
    let mut child = then_server(
        server_soak(dir.path(), "glibc,arena2", "20").args(["--duration", "30s"]),
        "4s",
        &marker,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_secs(10));
    child.kill().unwrap();
    child.wait().unwrap();
    // SIGKILL gives memtrial no chance to stop its instances: they run on, in their groups.
    assert!(
        !no_process_matching(&marker),
        "the instances should outlive a SIGKILLed memtrial"
    );
    let before = summary(dir.path());
    assert_eq!(before["status"], "running");
    let out = soak(dir.path()).arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("removed a cgroup left by an earlier memtrial"),
        "{err}"
    );
    assert!(no_process_matching(&marker));
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "done");
    let gaps = doc["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{doc:#}");
    let (a, b) = (gaps[0][0].as_f64().unwrap(), gaps[0][1].as_f64().unwrap());
    assert!(a > 5.0 && b > a, "{gaps:?}");
    assert!(
        doc["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["text"].as_str().unwrap().starts_with("resumed")),
        "{doc:#}"
    );
    // Both starts measured: windows before the kill and after the resume.
    assert!(
        variant(&doc, "arena2")["windows"].as_u64().unwrap() >= 5,
        "{doc:#}"
    );
    // A finished soak is not resumed again.
    let again = soak(dir.path()).arg("--resume").output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is done"),
        "{}",
        text(&again)
    );
}

#[test]
fn sigint_ends_a_soak_cleanly_with_what_it_has() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-int-{}", std::process::id());
    let child = then_server(
        server_soak(dir.path(), "glibc,arena2", "20").args(["--duration", "10m"]),
        "3s",
        &marker,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    // The live view beside it: the table again every window, and its page, until the
    // soak ends; then the final table, and it ends by itself.
    let follow = Command::new(memtrial())
        .args(["report", "--follow", "--html", "live.html"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(7));
    let page = std::fs::read_to_string(dir.path().join("live.html")).unwrap();
    assert!(page.contains("http-equiv=\"refresh\""), "{page:.400}");
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    let followed = follow.wait_with_output().unwrap();
    assert_eq!(followed.status.code(), Some(0), "{}", text(&followed));
    let shown = String::from_utf8_lossy(&followed.stdout);
    assert!(shown.matches("soak 1: running").count() >= 2, "{shown}");
    assert!(shown.contains("soak 1: interrupted"), "{shown}");
    let page = std::fs::read_to_string(dir.path().join("live.html")).unwrap();
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "the final page reloads no more"
    );
    assert!(no_process_matching(&marker));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("soak 1: interrupted"), "{stdout}");
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "interrupted");
    assert!(
        variant(&doc, "arena2")["windows_counted"].as_u64().unwrap() >= 2,
        "{doc:#}"
    );
}

#[test]
fn a_rate_the_machine_cannot_drive_is_said() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-rate-{}", std::process::id());
    let out = then_server(
        server_soak(dir.path(), "glibc,arena2", "100000").args([
            "--connections",
            "2",
            "--duration",
            "12s",
        ]),
        "5s",
        &marker,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("every instance fell behind the schedule"),
        "{stdout}"
    );
    assert!(stdout.contains("lower --rate"), "{stdout}");
}

#[test]
fn bad_soak_input_is_refused_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| soak(dir.path()).args(args).output().unwrap();
    let refused = |o: &Output, words: &[&str]| {
        assert_eq!(o.status.code(), Some(2), "{}", text(o));
        let err = String::from_utf8_lossy(&o.stderr);
        for w in words {
            assert!(err.contains(w), "{w:?} not in: {err}");
        }
    };
    let srv = server();
    let base = [
        "--variants",
        "glibc,arena2",
        "--url",
        "http://127.0.0.1:{port}/",
        "--duration",
        "1m",
        "--window",
        "10s",
    ];
    // Several instances, one port: refused before anything starts.
    let mut a: Vec<&str> = base.to_vec();
    a.extend(["--rate", "10", "--", "python3", &srv, "8080", "ok"]);
    refused(&run(&a), &["{port}", "port of its own"]);
    // No open loop: the same requests at the same moments need a rate or a replay speed.
    let mut a: Vec<&str> = base.to_vec();
    a.extend(["--", "python3", &srv, "{port}", "ok"]);
    refused(&run(&a), &["--rate"]);
    // A window out of range, and one longer than the soak.
    let mut a: Vec<&str> = base[..6].to_vec();
    a.extend([
        "--rate", "10", "--window", "500ms", "--", "python3", &srv, "{port}",
    ]);
    refused(&run(&a), &["--window", "500ms"]);
    let mut a: Vec<&str> = base[..6].to_vec();
    a.extend([
        "--rate", "10", "--window", "2m", "--", "python3", &srv, "{port}",
    ]);
    refused(&run(&a), &["shorter than one window"]);
    // A replay log none of whose lines parse names the first bad line.
    std::fs::write(
        dir.path().join("bad.log"),
        "this is not a log line\nnor this\n",
    )
    .unwrap();
    let mut a: Vec<&str> = base.to_vec();
    a.extend([
        "--replay", "bad.log", "--speed", "1", "--", "python3", &srv, "{port}",
    ]);
    refused(&run(&a), &["bad.log", "line 1"]);
    // Nothing to resume.
    refused(&run(&["--resume"]), &["--resume", "no soak"]);
}

#[test]
fn a_worker_soak_runs_one_driver_per_instance() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-worker-{}", std::process::id());
    // The driver feeds its own instance (found by MEMTRIAL_PORT) until the soak stops it.
    std::fs::write(
        dir.path().join("drive.py"),
        "import os, time, urllib.request\n\
         port = os.environ['MEMTRIAL_PORT']\n\
         print('driving', os.environ['MEMTRIAL_VARIANT'], os.environ['MEMTRIAL_PID'], flush=True)\n\
         while True:\n\
         \x20   try:\n\
         \x20       urllib.request.urlopen('http://127.0.0.1:%s/' % port).read()\n\
         \x20   except OSError:\n\
         \x20       pass\n\
         \x20   time.sleep(0.05)\n",
    )
    .unwrap();
    let out = then_server(
        soak(dir.path()).args([
            "--variants",
            "glibc",
            "--variant",
            "fat=SERVER_BALLAST_MIB=32",
            "--driver",
            "python3 drive.py {variant}",
            "--before",
            "echo reset {variant}",
            "--duration",
            "16s",
            "--json",
            "s.json",
        ]),
        "4s",
        &marker,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(no_process_matching(&marker) && no_process_matching("drive.py"));
    let logs = dir.path().join("memtrial-logs/soak-1");
    for v in ["glibc", "fat"] {
        let said = std::fs::read_to_string(logs.join(format!("{v}.0.driver.stdout"))).unwrap();
        assert!(said.starts_with(&format!("driving {v} ")), "{said}");
        let before = std::fs::read_to_string(logs.join(format!("{v}.0.before.stdout"))).unwrap();
        assert_eq!(before, format!("reset {v}\n"));
    }
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    let fat = variant(&doc, "fat");
    assert!(fat["rss"]["ci"][0].as_f64().unwrap() > 1.5, "{fat:#}");
    assert!(fat["pss"]["ratio"].as_f64().unwrap() > 1.5, "{fat:#}");
    assert!(
        doc["events"].as_array().unwrap().is_empty(),
        "the drivers ran to the end: {doc:#}"
    );
}
