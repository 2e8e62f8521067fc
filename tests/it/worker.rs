//! Worker trials (issue 11): `--before`, `--driver` beside the workload, a service under
//! `--duration`, and a real Sidekiq on a real redis.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn a_service_runs_for_its_duration_and_is_stopped_ok() {
    let mark = "memtrial-worker-duration-4711";
    let t = Instant::now();
    let r = run_with(
        1,
        "glibc,arena2",
        &["--duration", "1s", "--json", "out.json"],
        &["sh", "-c", &format!("exec sleep 1000 # {mark}")],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    assert!(t.elapsed() < Duration::from_secs(20));
    let doc = r.json();
    for v in ["glibc", "arena2"] {
        let run = first_run(&doc, v);
        assert_eq!(run.status, RunStatus::Ok, "{}", r.explain());
        let wall = run.wall_seconds;
        assert!((0.9..3.0).contains(&wall), "wall {wall}");
        assert_eq!(run.driver.map(|d| d.driven_end_seconds), Some(1.0));
    }
    assert_eq!(doc["experiment"]["worker"]["duration_ms"], 1000);
    assert!(no_process_matching(mark), "the service outlived its run");
    // Exiting by itself before the duration is ok, and said.
    let r = run_with(
        1,
        "glibc",
        &["--duration", "30s", "--json", "out.json"],
        &["sleep", "0.2"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let run = first_run(&r.json(), "glibc");
    assert_eq!(run.status, RunStatus::Ok);
    assert!(
        run.message.as_deref().unwrap().contains("exited by itself"),
        "{run:?}"
    );
}

#[test]
fn a_driver_ends_the_run_and_its_figures_are_summarised() {
    let mark = "memtrial-worker-driven-4712";
    let r = run_json(2, "glibc,arena2", &["--markdown", "out.md", "--csv", "out.csv", "--html", "out.html", "--driver", "sleep 0.5; echo memtrial-figure jobs 100 jobs; echo \"v=$MEMTRIAL_VARIANT pid=$MEMTRIAL_PID port={port}\""], &["sh", "-c", &format!("exec sleep 1000 # {mark}")]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    for v in ["glibc", "arena2"] {
        for run in typed_runs(&doc, v) {
            assert_eq!(run.status, RunStatus::Ok, "{}", r.explain());
            assert!(run.wall_seconds < 5.0);
            assert_eq!(driver_of(&run).figures["jobs"].value, 100.0);
            // The driver saw the run named in its environment.
            let out = run.stdout_path.with_extension("driver.stdout");
            let text = std::fs::read_to_string(&out).unwrap();
            assert!(text.contains(&format!("v={v} pid=")), "{text}");
            assert!(
                !text.contains("port={port}") && !text.contains("pid= "),
                "{text}"
            );
        }
        let s = &summary(&doc, v)["driver_figures"]["jobs"];
        assert_eq!(s["median"], 100.0, "{s}");
        assert_eq!(s["n"], 2);
        assert_eq!(s["unit"], "jobs");
    }
    assert_eq!(
        summary(&doc, "arena2")["driver_figures"]["jobs"]["ratio_to_baseline"]["value"],
        1.0
    );
    assert!(r.stdout().contains("jobs"), "{}", r.stdout());
    let md = std::fs::read_to_string(r.dir.path().join("out.md")).unwrap();
    assert!(md.contains("| jobs |") && md.contains("100 jobs"), "{md}");
    let html = std::fs::read_to_string(r.dir.path().join("out.html")).unwrap();
    assert!(
        html.contains("<th>jobs</th>") && html.contains("100 jobs"),
        "driver figures in the HTML figures table"
    );
    let csv = std::fs::read_to_string(r.dir.path().join("out.csv")).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(",driver_jobs"),
        "{csv}"
    );
    assert!(no_process_matching(mark), "the workload outlived its run");
}

#[test]
fn after_the_driver_the_workload_cools_down_before_it_is_stopped() {
    let mark = "memtrial-worker-cooldown-5190";
    let r = run_json(
        1,
        "glibc",
        &["--driver", "sleep 0.5", "--cooldown", "1500ms"],
        &["sh", "-c", &format!("exec sleep 1000 # {mark}")],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(doc["experiment"]["worker"]["cooldown_ms"], 1500);
    let driven_end = driver_of(&run).driven_end_seconds;
    let wall = run.wall_seconds;
    // Sampled through the cool-down, then stopped: the run lasts the driver plus 1.5 s.
    assert!(
        wall >= driven_end + 1.4 && wall < driven_end + 4.0,
        "driven phase ended at {driven_end:.2} s, the run at {wall:.2} s"
    );
    let last_sample = run.samples.last().unwrap().t_seconds;
    assert!(
        last_sample >= driven_end + 1.3,
        "{last_sample} vs {driven_end}"
    );
    assert!(no_process_matching(mark), "the workload outlived its run");
    // Without a driver or a URL a cool-down means nothing: refused, naming the flag.
    let bad = memtrial_in_tmp(&["run", "--cooldown", "1s", "--", "true"]);
    assert_eq!(bad.code(), 2, "{}", bad.stderr());
    assert!(bad.stderr().contains("--cooldown"), "{}", bad.stderr());
}

#[test]
fn failing_hooks_and_drivers_fail_the_run_with_their_words() {
    let one = |extra: &[&str], cmd: &[&str]| {
        let r = run_json(1, "glibc", extra, cmd);
        assert_eq!(r.code(), 1, "{}", r.explain());
        let run = first_run(&r.json(), "glibc");
        assert_eq!(run.status, RunStatus::Failed, "{run:?}");
        run.message.unwrap()
    };
    let m = one(&["--before", "echo queue is gone >&2; exit 3"], &["true"]);
    assert!(
        m.contains("--before failed (exit code 3): queue is gone"),
        "{m}"
    );
    let m = one(
        &["--driver", "echo cannot enqueue >&2; exit 4"],
        &["sleep", "100"],
    );
    assert!(
        m.contains("--driver failed (exit code 4): cannot enqueue"),
        "{m}"
    );
    let m = one(
        &["--driver", "sleep 100 # memtrial-worker-driver-4713"],
        &["sleep", "0.3"],
    );
    assert!(
        m.contains("the workload exited while the --driver was still running"),
        "{m}"
    );
    assert!(
        no_process_matching("memtrial-worker-driver-4713"),
        "the driver outlived its run"
    );
    // --timeout bounds the driver too, and takes its group with it.
    let r = run_json(
        1,
        "glibc",
        &[
            "--timeout",
            "1s",
            "--driver",
            "sh -c 'sleep 100 # memtrial-worker-driver-4714'; true",
        ],
        &["sleep", "100"],
    );
    assert_eq!(r.code(), 1, "{}", r.explain());
    assert_eq!(first_run(&r.json(), "glibc").status, RunStatus::Timeout);
    assert!(
        no_process_matching("memtrial-worker-driver-4714"),
        "the driver outlived its run"
    );
}

#[test]
fn bad_worker_input_exits_2_naming_the_flag() {
    for (args, expect) in [
        (vec!["--before", ""], "--before '': an empty command"),
        (
            vec!["--driver", "no-such-driver-xyz 10"],
            "--driver 'no-such-driver-xyz 10'",
        ),
        (
            vec!["--driver", "true", "--url", "http://127.0.0.1:{port}/"],
            "cannot be combined with --url",
        ),
        (vec!["--duration", "0s"], "--duration 0s"),
        (
            vec!["--duration", "1m", "--timeout", "10s"],
            "every run would time out",
        ),
    ] {
        let r = run_with(1, "glibc", &args, &["true"]);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.stderr());
        assert!(r.stderr().contains(expect), "{args:?}: {}", r.stderr());
    }
    // A plan file's [worker] section refuses what it does not know, naming it.
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, "command = \"true\"\n[worker]\nbefor = \"true\"\n").unwrap();
    let r = memtrial_in_tmp(&["run", "--plan", plan.to_str().unwrap()]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("befor") && r.stderr().contains("line 3"),
        "{}",
        r.stderr()
    );
}

// ───────────── a real queue worker: Sidekiq on redis ─────────────

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start_redis(port: u16) -> Redis {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let redis = Redis(child);
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "redis did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    redis
}

#[test]
fn sidekiq_under_three_variants_with_jobs_per_second() {
    if !need_program("redis-server", "redis-server")
        || !require(
            "sidekiq",
            "install with: apt-get install ruby-sidekiq",
            || Command::new("sidekiq").arg("--help").output().is_ok(),
        )
        || !need_allocators(&["jemalloc"])
    {
        return;
    }
    let port = free_port();
    let _redis = start_redis(port);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sidekiq");
    let dir = tempfile::tempdir().unwrap();
    for f in ["worker.rb", "enqueue_and_wait.rb"] {
        std::fs::copy(example.join(f), dir.path().join(f)).unwrap();
    }
    let before = format!("redis-cli -p {port} flushdb");
    let out = Command::new(memtrial())
        .args([
            "run",
            "--runs",
            "1",
            "--variants",
            "glibc,arena2,jemalloc",
            "--timeout",
            "50s",
            "--json",
            "out.json",
            "--before",
            &before,
            "--driver",
            "ruby enqueue_and_wait.rb 1500 40",
            "--",
            "sidekiq",
            "-c",
            "5",
            "-r",
            "./worker.rb",
        ])
        .current_dir(dir.path())
        .env("REDIS_URL", format!("redis://127.0.0.1:{port}"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial");
    let r = Run { out, dir };
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    for v in ["glibc", "arena2", "jemalloc"] {
        let run = first_run(&doc, v);
        assert_eq!(run.status, RunStatus::Ok, "{}", r.explain());
        let d = driver_of(&run);
        assert_eq!(d.figures["jobs"].value, 1500.0, "{run:?}");
        assert!(d.figures["jobs_per_second"].value > 0.0);
        // The driver said when Sidekiq was up: the steady phase starts there.
        assert!(d.ready_seconds.unwrap() >= d.driven_start_seconds);
        assert!(run.peak_rss_bytes > 10 << 20);
        let s = &summary(&doc, v)["driver_figures"]["jobs_per_second"];
        assert!(s["median"].as_f64().unwrap() > 0.0, "{s}");
        eprintln!(
            "sidekiq {v}: peak RSS {} MiB, {:.0} jobs/s",
            run.peak_rss_bytes >> 20,
            s["median"].as_f64().unwrap()
        );
    }
    assert_eq!(first_run(&doc, "jemalloc").allocator_detected, "jemalloc");
    assert!(
        no_process_matching("sidekiq 6"),
        "Sidekiq outlived its runs"
    );
}
