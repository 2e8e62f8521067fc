//! Server trials: real servers (python, puma) started, loaded and compared.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

// ───────────── server trials (issue 4): real servers on 127.0.0.1 ─────────────

fn server_py() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/servers/server.py")
        .display()
        .to_string()
}

/// `memtrial run` of the test server in MODE with quick load settings, plus extra flags.
fn server_trial(mode: &str, extra: &[&str]) -> Run {
    let script = server_py();
    let mut args = vec!["--url", "http://127.0.0.1:{port}/hello"];
    // Quick defaults, unless the test sets the flag itself.
    for (flag, value) in [
        ("--duration", "1s"),
        ("--cooldown", "500ms"),
        ("--connections", "4"),
        ("--ready-timeout", "10s"),
    ] {
        if !extra.contains(&flag) {
            args.extend_from_slice(&[flag, value]);
        }
    }
    args.extend_from_slice(extra);
    run_json(1, "glibc", &args, &["python3", &script, "{port}", mode])
}

#[test]
fn server_trial_gives_herokus_table() {
    if !need_python3() {
        return;
    }
    let script = server_py();
    let r = run_json(
        1,
        "glibc,arena2",
        &[
            "--url",
            "http://127.0.0.1:{port}/hello",
            "--duration",
            "2s",
            "--cooldown",
            "1s",
            "--connections",
            "4",
        ],
        &["python3", &script, "{port}", "ok"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    assert_eq!(doc["experiment"]["server"]["connections"], 4);
    for v in ["glibc", "arena2"] {
        let run = first_run(&doc, v);
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        let load = load_of(&run);
        assert!(load.requests > 50, "{v}: {}", load.requests);
        assert!(load.throughput_rps > 25.0);
        assert!(load.latency_p50_ms > 0.0);
        assert!(load.latency_p99_ms >= load.latency_p50_ms);
        assert_eq!(load.errors.status_5xx, 0);
        let ready = load.ready_seconds;
        let start = load.load_start_seconds;
        let end = load.load_end_seconds;
        let cool = load.cooldown_end_seconds;
        assert!(
            ready <= start && start < end && end < cool,
            "phases in order: {load:?}"
        );
        assert!((cool - end) >= 0.9, "a cool-down of 1 s");
        let seconds = &load.per_second;
        assert!(!seconds.is_empty());
        assert!(
            seconds.iter().all(|s| s.t_seconds >= start - 0.01),
            "one clock"
        );
        assert!(load.rss_after_cooldown_bytes.unwrap() > 0);
        // The memory samples run through the whole load on the same clock.
        assert!(run.samples.iter().any(|s| s.t_seconds > end));
    }
    let summary = summary(&doc, "arena2");
    assert!(summary["latency_p95_ms"]["median"].as_f64().unwrap() > 0.0);
    assert!(
        summary["ratio_to_baseline"]["latency_p95_ms"]["value"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(summary["ratio_to_baseline"]["throughput_rps"].is_object());
    let table = r.stdout();
    assert!(
        table.contains("throughput") && table.contains("p95 latency"),
        "{table}"
    );
}

/// The generator's schedule, against a server that keeps up: memtrial's own cache-server
/// (tens of µs a request), not the Python fixture, which beside the suite and two busy
/// loops answered 82.5 of 100 req/s - a slow server, not a late generator.
#[test]
fn server_trial_open_loop_holds_its_rate() {
    let bin = memtrial().display().to_string();
    let r = run_json(
        1,
        "glibc",
        &[
            "--url",
            "http://127.0.0.1:{port}/hello",
            "--rate",
            "100",
            "--duration",
            "2s",
            "--cooldown",
            "500ms",
            "--connections",
            "4",
            "--ready-timeout",
            "10s",
        ],
        &[
            &bin,
            "workload",
            "cache-server",
            "--port",
            "{port}",
            "--threads",
            "2",
            "--cache-size",
            "8M",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let run = first_run(&r.json(), "glibc");
    assert_eq!(load_of(&run).target_rate, Some(100.0));
    let achieved = load_of(&run).throughput_rps;
    // 15%: 200 requests are due; those due in the window's last moments may complete
    // after it, and on a loaded machine the generator's and the server's threads wait for
    // a CPU (tens of ms, far from the 0.3 s of 30 late requests). Beside a busy suite a
    // sibling test's 20 threads have held both CPUs from memtrial's load thread for
    // 0.55 s (perf sched: runnable, not run) and the rate fell to 67.5: then the run must
    // say its load generator was stalled, which is the product's answer to that machine.
    let disturbed = run
        .message
        .as_deref()
        .is_some_and(|m| m.contains("disturbed: memtrial's load generator did not run for"));
    assert!(
        (85.0..=115.0).contains(&achieved) || disturbed,
        "achieved {achieved} req/s of 100 and no stated stall: {:?}\n{}",
        load_of(&run),
        r.explain()
    );
}

#[test]
fn server_that_never_gets_ready_is_a_failed_run() {
    if !need_python3() {
        return;
    }
    let start = Instant::now();
    let r = server_trial("never-ready", &["--ready-timeout", "1500ms"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(start.elapsed() < Duration::from_secs(20));
    let run = first_run(&r.json(), "glibc");
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.message
            .as_deref()
            .unwrap()
            .contains("never became ready within 1s 500ms"),
        "{run:?}"
    );
    assert!(no_process_matching("never-ready"));
}

#[test]
fn server_that_crashes_mid_load_is_a_failed_run_with_its_output() {
    if !need_python3() {
        return;
    }
    let r = server_trial("crash-after-40", &["--duration", "3s"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc");
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.message
            .as_deref()
            .unwrap()
            .contains("exited during the load"),
        "{run:?}"
    );
    assert!(
        r.stderr().contains("crashing on purpose"),
        "the server's last words: {}",
        r.stderr()
    );
}

#[test]
fn server_answering_500s_counts_them_apart() {
    if !need_python3() {
        return;
    }
    let r = server_trial("errors", &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc");
    let load = load_of(&run);
    assert!(load.requests > 0);
    assert_eq!(
        load.errors.status_5xx, load.requests,
        "every response a 5xx: {run:?}"
    );
    assert_eq!(load.errors.connect, 0);
}

#[test]
fn server_ignoring_sigterm_is_killed_and_leaves_nothing() {
    if !need_python3() {
        return;
    }
    let r = server_trial("ignore-term", &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc");
    assert_eq!(run.status, RunStatus::Ok);
    assert_eq!(
        run.signal,
        Some(9),
        "SIGKILL after the grace period: {run:?}"
    );
    assert!(no_process_matching("ignore-term"));
}

#[test]
fn server_trial_replays_a_log_with_malformed_lines() {
    if !need_python3() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = "127.0.0.1 - - [22/Nov/2026:10:00:00 +0000] \"GET /a HTTP/1.1\" 200 5 \"-\" \"ua\"\n\
               this line is not a log entry\n\
               127.0.0.1 - - [22/Nov/2026:10:00:01 +0000] \"POST /b HTTP/1.1\" 200 5 \"-\" \"ua\"\n\
               127.0.0.1 - - [22/Nov/2026:10:00:01 +0000] \"GET /c?x=1 HTTP/1.1\" 200 5 \"-\" \"ua\"\n";
    let log_path = dir.path().join("access.log");
    std::fs::write(&log_path, log).unwrap();
    let r = server_trial("ok", &["--replay", log_path.to_str().unwrap()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let notes: Vec<&str> = doc["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("replaying 2 request(s)")
            && n.contains("1 skipped for their method")
            && n.contains("1 unparseable line(s)")),
        "{notes:?}"
    );
    assert!(load_of(&first_run(&doc, "glibc")).requests > 0);
}

#[test]
fn server_trial_bad_input_names_the_flag() {
    for (args, expect) in [
        (vec!["--url", "http://example.com:{port}/"], "use 127.0.0.1"),
        (
            vec!["--url", "https://127.0.0.1:{port}/"],
            "https is not supported",
        ),
        // (`--duration` alone is a service's duration now, and `--cooldown` a driver's: see
        // tests/it/worker.rs.)
        (vec!["--ready", "/health"], "a server trial needs --url"),
        (vec!["--cooldown", "5s"], "give --url or --driver"),
        (
            vec!["--url", "http://127.0.0.1:{port}/", "--connections", "0"],
            "--connections 0",
        ),
        (
            vec!["--url", "http://127.0.0.1:{port}/", "--rate=-3"],
            "--rate -3",
        ),
        (
            vec![
                "--url",
                "http://127.0.0.1:{port}/",
                "--replay",
                "/no/such.log",
            ],
            "cannot read it",
        ),
    ] {
        let mut all = vec!["run"];
        all.extend(args.iter().copied());
        all.extend(["--", "true"]);
        let r = memtrial_in_tmp(&all);
        assert_eq!(r.code(), 2, "{all:?}: {}", r.stderr());
        assert!(
            r.stderr().contains(expect),
            "{all:?}: expected {expect} in {}",
            r.stderr()
        );
    }
}

#[test]
fn puma_with_a_rack_app_under_load() {
    if !(need_program("puma", "puma ruby-rack") && need_allocators(&["jemalloc"])) {
        return;
    }
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/puma-rack/config.ru");
    let r = run_json(
        1,
        "glibc,jemalloc",
        &[
            "--url",
            "http://127.0.0.1:{port}/items",
            "--duration",
            "2s",
            "--cooldown",
            "1s",
            "--connections",
            "8",
            "--ready-timeout",
            "30s",
        ],
        &[
            "puma",
            "-t",
            "2:2",
            "-b",
            "tcp://127.0.0.1:{port}",
            app.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    for v in ["glibc", "jemalloc"] {
        let run = first_run(&doc, v);
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        assert!(load_of(&run).requests > 20, "{v}: {run:?}");
        assert_eq!(load_of(&run).errors.status_5xx, 0);
    }
    let je = first_run(&doc, "jemalloc");
    assert_eq!(je.allocator_detected, "jemalloc");
    assert!(je.verification.ok());
}
