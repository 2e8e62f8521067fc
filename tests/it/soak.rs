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
    // Remedies a soak can take (issue 38, item 12: soak has no --probe-interval).
    assert!(!text(&out).contains("--probe-interval"), "{}", text(&out));
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
    // Two resumes at once (two shells): one takes the soak, the other is refused, naming
    // who has it. Before, both ran it: twice the servers, windows stored twice.
    let resumes: Vec<std::process::Child> = (0..2)
        .map(|_| {
            soak(dir.path())
                .arg("--resume")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = resumes
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let ran: Vec<&Output> = outs.iter().filter(|o| o.status.code() == Some(0)).collect();
    let refused: Vec<&Output> = outs.iter().filter(|o| o.status.code() == Some(2)).collect();
    assert_eq!(
        (ran.len(), refused.len()),
        (1, 1),
        "{}\n{}",
        text(&outs[0]),
        text(&outs[1])
    );
    let no = String::from_utf8_lossy(&refused[0].stderr);
    assert!(
        no.contains("soak 1 is running in another memtrial (PID "),
        "{}",
        text(refused[0])
    );
    let err: String = outs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(
        err.contains("removed a cgroup left by an earlier memtrial"),
        "{err}"
    );
    assert!(no_process_matching(&marker));
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "done");
    let gaps = doc["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "one resume ran: {doc:#}");
    // No window stored twice: at most one per window of the soak's 30 s, per variant.
    for v in ["glibc", "arena2"] {
        let windows = variant(&doc, v)["windows"].as_u64().unwrap();
        assert!(
            windows <= 8,
            "{v}: {windows} windows of 4 s in 30 s: {doc:#}"
        );
    }
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

/// Both servers crash 3 s in: memtrial once soaked the dead instances for the whole
/// duration, said "every instance fell behind … lower --rate" every window, counted one
/// error per reconnect attempt and exited 0. A dead instance is down: an event, its load
/// stopped, its windows left out; with every instance down the soak ends at once, failed,
/// naming which died and when, and exits 1.
#[test]
fn a_soak_whose_servers_all_die_ends_failed_naming_them() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-die-{}", std::process::id());
    let started = Instant::now();
    let mut c = server_soak(dir.path(), "glibc,arena2", "10");
    c.args([
        "--duration",
        "1m",
        "--window",
        "3s",
        "--interval",
        "500ms",
        "--",
    ])
    .args([
        "python3",
        &server(),
        "{port}",
        "crash-after-30",
        "0",
        &marker,
    ]);
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a soak of dead servers went on: {}",
        text(&out)
    );
    assert!(no_process_matching(&marker));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("fell behind"), "{stdout}");
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let reason = doc["stop_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("every instance is down: ")
            && reason.contains("glibc at ")
            && reason.contains("arena2 at ")
            && reason.contains("exited with code 3"),
        "{reason}"
    );
    for v in ["glibc", "arena2"] {
        let s = variant(&doc, v);
        let down = &s["down"][0];
        assert_eq!(down["why"], "exited with code 3", "{s:#}");
        let t = down["t"].as_f64().unwrap();
        assert!((2.0..15.0).contains(&t), "{s:#}");
        // Errors count requests that were due, not reconnect attempts.
        let errors = s["errors"].as_u64().unwrap();
        assert!(errors <= 30, "{v}: {errors} errors: {s:#}");
    }
    assert!(
        stdout.contains("soak 1: failed — every instance is down"),
        "{stdout}"
    );
}

/// One variant's server dies (after 20 requests), the other lives: the soak goes on for
/// its duration with the live one (no "every instance fell behind"), says which died and
/// when, and exits 1. Its requests come from a replayed log with one line dated 9999,
/// which once held back every later line (~8,000 years): skipped, and said as an event.
#[test]
fn a_soak_with_one_dead_instance_goes_on_and_says_which() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("soak-one-{}", std::process::id());
    let log: String = (0..50)
        .map(|i| {
            let year = if i == 7 { 9999 } else { 2024 };
            format!(
                "127.0.0.1 - - [12/Mar/{year}:10:{:02}:{:02} +0000] \"GET / HTTP/1.1\" 200 5\n",
                i / 60,
                i % 60
            )
        })
        .collect();
    std::fs::write(dir.path().join("access.log"), log).unwrap();
    let script = format!(
        "exec python3 {} $MEMTRIAL_PORT ${{SERVER_MODE:-ok}} 0 {marker}",
        server()
    );
    let out = soak(dir.path())
        .args([
            "--variants",
            "glibc",
            "--variant",
            "crashy=SERVER_MODE=crash-after-20",
        ])
        .args([
            "--url",
            "http://127.0.0.1:{port}/",
            "--replay",
            "access.log",
        ])
        .args(["--speed", "5", "--duration", "15s", "--window", "3s"])
        .args(["--interval", "500ms", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(no_process_matching(&marker));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("fell behind"), "{stdout}");
    assert!(stdout.contains("down: crashy at "), "{stdout}");
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "done", "{doc:#}");
    let crashy = variant(&doc, "crashy");
    assert_eq!(crashy["down"][0]["why"], "exited with code 3", "{crashy:#}");
    // Nothing is due to it once it is down: its due requests are those it completed or
    // failed, give or take what fell due before memtrial saw it go (a sample, 500 ms: ~3
    // requests at this pace). It once counted the whole schedule's: 19 of 72 due.
    let n = |k: &str| {
        crashy[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {crashy:#}"))
    };
    assert!(
        n("due") <= n("requests") + n("errors") + 5,
        "{} of {} due, {} errors: {crashy:#}",
        n("requests"),
        n("due"),
        n("errors")
    );
    let glibc = variant(&doc, "glibc");
    assert!(glibc.get("down").is_none(), "{glibc:#}");
    // The live instance got its requests: the replay did not stall at the 9999 line.
    let (done, due) = (
        glibc["requests"].as_u64().unwrap(),
        glibc["due"].as_u64().unwrap(),
    );
    assert!(
        due >= 60 && done as f64 >= 0.9 * due as f64,
        "{done} of {due}: {glibc:#}"
    );
    assert!(
        doc["events"].as_array().unwrap().iter().any(|e| {
            let t = e["text"].as_str().unwrap();
            t.contains("1 line(s) dated in the future skipped") && t.contains("line 8")
        }),
        "{doc:#}"
    );
}

/// The server exits at once: memtrial exits 2 saying why, and the stored soak is failed
/// with that reason (it stayed "running" with a dead owner: "soak 1: running — running").
#[test]
fn a_soak_whose_start_fails_is_stored_as_failed() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = server_soak(dir.path(), "glibc,arena2", "10")
        .args(["--duration", "1m", "--window", "3s", "--"])
        .args(["sh", "-c", "echo boom >&2; exit 3", "{port}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exited before it answered"), "{err}");
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let reason = doc["stop_reason"].as_str().unwrap();
    assert!(
        reason.contains("the glibc instance exited before it answered (exited with code 3)")
            && reason.contains("boom"),
        "{reason}"
    );
    let shown = Command::new(memtrial())
        .args(["report", "--soak"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.starts_with("soak 1: failed — the glibc instance"),
        "{shown}"
    );
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

/// Issue 36: a Ruby app whose live bytes are a GC sawtooth and nothing else
/// (tests/fixtures/servers/gc_sawtooth.ru keeps nothing between requests; each process
/// writes how often its Ruby collected as it exits) under puma,
/// soaked side by side for 4 minutes under glibc, arena2 and jemalloc, is never called a
/// leak in any variant; where 4 minutes cannot tell, each says how much longer would.
/// (Heroku's method on a Rails app once gave glibc "leak: live bytes grow 3.5 MiB/min" from
/// a line through 3.5 minutes of this sawtooth while the other variants were flat.)
#[test]
#[ignore = "measures: a 4-minute soak of three puma instances; runs alone in the second pass of scripts/test.sh"]
fn a_ruby_gc_sawtooth_is_never_called_a_leak() {
    if !ready() || !need_program("puma", "puma ruby-rack") || !need_allocators(&["jemalloc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let counts = tempfile::tempdir().unwrap();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/gc_sawtooth.ru");
    let out = server_soak(dir.path(), "glibc,arena2,jemalloc", "40")
        .env("GC_SAWTOOTH_OUT", counts.path())
        .args(["--duration", "4m", "--window", "10s", "--"])
        .args(["puma", "-t", "8:8", "-b", "tcp://127.0.0.1:{port}"])
        .arg(&app)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let doc = summary(dir.path());
    assert_eq!(doc["status"], "done", "{doc:#}");
    // The sawtooth was real: each instance's Ruby collected again and again (at 40 pages
    // of 256 KiB a second against a malloc limit of 16 to 32 MiB, every few seconds).
    for v in ["glibc", "arena2", "jemalloc"] {
        let gcs: Vec<u64> = std::fs::read_dir(counts.path())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&format!("{v}.")))
            })
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap();
                text.split_whitespace().next().unwrap().parse().unwrap()
            })
            .collect();
        assert!(
            gcs.len() == 1 && gcs[0] >= 20,
            "{v}: collections per process {gcs:?}"
        );
    }
    let mut too_short = 0;
    for v in ["glibc", "arena2", "jemalloc"] {
        let s = variant(&doc, v);
        assert_eq!(s["errors"], 0, "{s:#}");
        let why = &s["why"];
        let verdict = why["verdict"].as_str().unwrap_or("");
        assert!(
            !verdict.is_empty() && verdict != "leak",
            "{v}: {why:#}\n{}",
            text(&out)
        );
        // The allocator probe followed the instance through the soak: a verdict from its
        // samples, or its figures (glibc's heap under 8 threads may well be fragmented:
        // held 4.7× live in one run, a verdict this test accepts).
        if verdict == "too_short" {
            too_short += 1;
            assert!(why["samples"].as_u64().unwrap_or(0) >= 100, "{v}: {why:#}");
            // More than it had (the steady window is the soak less its warm-up window).
            assert!(
                why["need_seconds"].as_f64().unwrap() > why["seconds"].as_f64().unwrap(),
                "{v}: {why:#}"
            );
        } else {
            assert!(
                why["live_bytes"].as_f64().unwrap_or(0.0) > 0.0,
                "{v}: {why:#}"
            );
        }
    }
    let printed = text(&out);
    assert!(!printed.contains(": leak: "), "{printed}");
    assert!(
        too_short == 0 || printed.contains("more minute"),
        "{printed}"
    );
}
