//! `memtrial run`: variants verified on real allocators, peaks, trees, failures, plans, the demo.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

#[test]
fn every_builtin_variant_is_verified_on_the_fragment_workload() {
    if !need_allocators(&["jemalloc", "tcmalloc", "mimalloc"]) {
        return;
    }
    let mut args = vec![
        "run", "--runs", "1", "--seed", "1", "--json", "out.json", "--",
    ];
    let cmd = fragment_cmd();
    args.extend(cmd.iter().map(String::as_str));
    let r = memtrial_in_tmp(&args);
    assert_eq!(
        r.code(),
        0,
        "stdout:\n{}\nstderr:\n{}",
        r.stdout(),
        r.stderr()
    );
    let doc = r.json();
    let names = variant_names(&doc);
    assert_eq!(
        names,
        ["glibc", "arena1", "arena2", "jemalloc", "tcmalloc", "mimalloc"],
        "scripts/setup.sh installs every allocator"
    );
    for (name, alloc, verification) in [
        ("glibc", "glibc", Verification::NothingToVerify),
        ("arena1", "glibc", Verification::Verified),
        ("arena2", "glibc", Verification::Verified),
        ("jemalloc", "jemalloc", Verification::Verified),
        ("tcmalloc", "tcmalloc", Verification::Verified),
        ("mimalloc", "mimalloc", Verification::Verified),
    ] {
        let run = first_run(&doc, name);
        assert_eq!(run.status, RunStatus::Ok, "{name}: {run:?}");
        assert!(run.verification.ok(), "{name}");
        assert_eq!(
            run.verification, verification,
            "{name}: {}",
            run.verification_detail
        );
        assert_eq!(run.allocator_detected, alloc, "{name}");
        assert!(run.peak_rss_bytes > 10 << 20, "{name}: {run:?}");
        assert!(run.threads_peak >= 5, "{name}: 4 workers + main");
        assert!(run.samples.len() >= 3, "{name}: sampled every 100 ms");
        assert!(run.wall_seconds >= 0.6);
        assert!(run.cpu_user_seconds > 0.0);
    }
    let env = &variant(&doc, "arena2")["env"];
    assert_eq!(env["MALLOC_ARENA_MAX"], "2");
    assert!(variant(&doc, "jemalloc")["preload"]
        .as_str()
        .unwrap()
        .contains("libjemalloc"));
    // The table names every variant, with ratios against the baseline.
    let table = r.stdout();
    for n in names {
        assert!(table.contains(n), "{table}");
    }
    assert!(table.contains("baseline") && table.contains('×'), "{table}");
}

#[test]
fn static_program_under_jemalloc_is_not_effective() {
    if !(need_c_compiler() && need_allocators(&["jemalloc"])) {
        return;
    }
    let prog = fixture("alloc_loop_static");
    let r = run_json(1, "glibc,jemalloc", &[], &[prog.to_str().unwrap(), "400"]);
    assert_eq!(
        r.code(),
        1,
        "a run whose variant did not take effect fails the experiment\n{}",
        r.stderr()
    );
    let doc = r.json();
    let je = first_run(&doc, "jemalloc");
    assert_eq!(je.status, RunStatus::VariantNotEffective, "{je:?}");
    assert!(!je.verification.ok());
    assert!(
        je.verification_detail.contains("statically linked"),
        "{je:?}"
    );
    assert_eq!(first_run(&doc, "glibc").status, RunStatus::Ok);
    assert!(
        r.stdout().contains("variant_not_effective"),
        "{}",
        r.stdout()
    );
}

#[test]
fn program_defining_malloc_ignores_the_preload() {
    if !(need_c_compiler() && need_allocators(&["jemalloc"])) {
        return;
    }
    let prog = fixture("own_malloc");
    let r = run_json(1, "glibc,jemalloc", &[], &[prog.to_str().unwrap(), "400"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let doc = r.json();
    let je = first_run(&doc, "jemalloc");
    assert_eq!(je.status, RunStatus::VariantNotEffective);
    assert!(je.verification_detail.contains("defines malloc"), "{je:?}");
    assert_eq!(
        je.allocator_detected,
        "custom (the executable defines malloc)"
    );
}

#[test]
fn environment_reset_by_the_program_is_not_effective() {
    if !need_c_compiler() {
        return;
    }
    let prog = fixture("alloc_loop_dyn");
    let r = run_with(
        1,
        "arena2",
        &["--baseline", "arena2", "--json", "out.json"],
        &["env", "-i", prog.to_str().unwrap(), "400"],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let run = first_run(&r.json(), "arena2");
    assert_eq!(run.status, RunStatus::VariantNotEffective, "{run:?}");
    assert!(
        run.verification_detail.contains("MALLOC_ARENA_MAX"),
        "{run:?}"
    );
}

#[test]
fn peak_rss_agrees_with_the_kernels_rusage() {
    if !need_python3() {
        return;
    }
    // A parent whose only child is memtrial: its RUSAGE_CHILDREN ru_maxrss is the largest
    // ru_maxrss of any process in that tree, i.e. the workload's.
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "import resource, subprocess, sys\n\
         r = subprocess.run([{:?}, 'run', '--runs', '1', '--variants', 'glibc', '--json', 'out.json', '--', {:?}, 'workload', 'fragment', '--threads', '4', '--seconds', '0.8'], stdout=subprocess.DEVNULL)\n\
         print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n\
         sys.exit(r.returncode)\n",
        memtrial().display().to_string(),
        memtrial().display().to_string()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kernel: u64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    let run = first_run(&doc, "glibc");
    let peak = run.peak_rss_bytes;
    assert_eq!(run.peak_rss_source, PeakSource::Wait4Maxrss, "{run:?}");
    assert_eq!(
        peak, kernel,
        "memtrial's peak RSS is the kernel's ru_maxrss for the same run"
    );
    // And the workload's own VmHWM, read just before it exited, agrees within a page or so.
    let stdout = std::fs::read_to_string(&run.stdout_path).unwrap();
    let own: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let hwm = own["vm_hwm_bytes"].as_u64().unwrap();
    assert!(
        peak.abs_diff(hwm) <= peak / 100,
        "peak {peak} vs VmHWM {hwm}"
    );
}

#[test]
fn a_process_tree_is_summed() {
    if !need_python3() {
        return;
    }
    // Each child holds its 30 MB for 2 s: long enough to overlap even when one interpreter
    // starts a second late on a loaded machine (0.8 s did not, once, under the full suite).
    let r = run_json(
        1,
        "glibc",
        &[],
        &[
            "sh",
            "-c",
            "python3 -c 'import time; x=bytearray(30_000_000); time.sleep(2)' & \
         python3 -c 'import time; x=bytearray(30_000_000); time.sleep(2)'; wait",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert!(run.processes_seen >= 3, "{run:?}");
    let max_sample = run.samples.iter().map(|s| s.rss_bytes).max().unwrap();
    assert!(
        max_sample > 60_000_000,
        "two 30 MB children at once: {max_sample}"
    );
    assert_eq!(run.peak_rss_source, PeakSource::SampledTreeSum);
    assert!(run.peak_rss_bytes >= max_sample);
}

#[test]
fn failed_command_is_recorded_and_its_stderr_shown() {
    let r = run_json(
        2,
        "glibc",
        &[],
        &["sh", "-c", "echo boom-from-the-workload >&2; exit 3"],
    );
    assert_eq!(r.code(), 1);
    assert!(
        r.stderr().contains("boom-from-the-workload"),
        "{}",
        r.stderr()
    );
    assert!(r.stderr().contains("exited with code 3"), "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.exit_code, Some(3));
    assert_eq!(summary(&doc, "glibc")["runs_ok"], 0);
    assert_eq!(summary(&doc, "glibc")["statuses"]["failed"], 2);
}

#[test]
fn timeout_stops_the_whole_tree() {
    let start = Instant::now();
    let r = run_with(
        1,
        "glibc",
        &["--timeout", "1s", "--json", "out.json"],
        &["sh", "-c", "sleep 41.25 & sleep 41.25; wait"],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!(first_run(&r.json(), "glibc").status, RunStatus::Timeout);
    assert!(no_process_matching("sleep 41.25"), "the tree is gone");
}

#[test]
fn a_daemon_ignoring_sigterm_is_not_left_behind() {
    // The workload double-forks a child that leaves the process group and ignores SIGTERM,
    // then exits at once.
    let r = run_json(
        1,
        "glibc",
        &[],
        &[
            "sh",
            "-c",
            "(trap '' TERM; exec setsid sleep 42.75) & sleep 0.3; exit 0",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        no_process_matching("sleep 42.75"),
        "the orphaned daemon was killed"
    );
    let run = first_run(&r.json(), "glibc");
    assert!(run.processes_seen >= 2, "{run:?}");
}

#[test]
fn plan_file_with_custom_variant() {
    if !need_allocators(&["jemalloc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = format!(
        "command = [{:?}, \"workload\", \"fragment\", \"--threads\", \"2\", \"--seconds\", \"0.4\"]\n\
         runs = 2\nvariants = [\"glibc\", \"je-narrow\"]\nseed = 5\n\n\
         [[variant]]\nname = \"je-narrow\"\npreload = \"jemalloc\"\nenv = {{ MALLOC_CONF = \"narenas:1\" }}\n",
        memtrial().display().to_string()
    );
    std::fs::write(dir.path().join("trial.toml"), plan).unwrap();
    let out = Command::new(memtrial())
        .args(["run", "--plan", "trial.toml", "--json", "out.json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    validate_schema(&doc, "experiment-v4.schema.json");
    assert_eq!(doc["experiment"]["seed"], 5);
    let je = variant(&doc, "je-narrow");
    assert_eq!(je["env"]["MALLOC_CONF"], "narenas:1");
    let runs = typed_runs(&doc, "je-narrow");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].verification, Verification::Verified);
    assert_eq!(runs[0].allocator_detected, "jemalloc");
    let ratio = ratio(&doc, "je-narrow", "peak_rss_bytes");
    assert!(ratio["value"].as_f64().unwrap() > 0.0);
    assert_eq!(
        ratio["significant"], false,
        "2 runs are too few to call anything significant"
    );
}

#[test]
fn list_and_report_read_the_store_again() {
    let r = run_with(1, "glibc,arena2", &[], &["true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let run_in = |args: &[&str]| {
        Command::new(memtrial())
            .args(args)
            .current_dir(r.dir.path())
            .output()
            .unwrap()
    };
    let list = run_in(&["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("glibc,arena2") && text.contains("complete"),
        "{text}"
    );
    let csv = run_in(&["report", "1", "--csv", "-"]);
    let text = String::from_utf8_lossy(&csv.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header + 2 runs: {text}");
    assert!(lines[0].starts_with("experiment_id,variant,"));
    let json = run_in(&["report", "--json", "-"]);
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap();
    validate_schema(&doc, "experiment-v4.schema.json");
    let missing = run_in(&["report", "99"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("experiment 99 is not in"));
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hi").unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        "runs = 3\nvariants = [\"glibc\",\n  oops]\n",
    )
    .unwrap();
    {
        let c = rusqlite::Connection::open(dir.path().join("future.db")).unwrap();
        // memtrial's own mark ("memt"), from a memtrial newer than this one.
        c.execute_batch("PRAGMA application_id = 1835363700; PRAGMA user_version = 42;")
            .unwrap();
    }
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--variants", "glibc,jemaloc", "--", "true"],
            "unknown variant 'jemaloc'; known variants: glibc, arena1, arena2, jemalloc",
        ),
        (
            &[
                "run",
                "--variant",
                "x=preload:/no/such/lib.so",
                "--",
                "true",
            ],
            "preload library '/no/such/lib.so' cannot be read",
        ),
        (
            &["run", "--variant", "x=preload:hoard", "--", "true"],
            "neither a known allocator",
        ),
        (
            &["run", "--variant", "nospec", "--", "true"],
            "bad variant definition 'nospec'",
        ),
        (
            &["run", "--", "no-such-command-zz"],
            "command 'no-such-command-zz' not found in PATH",
        ),
        (
            &["run", "--", "./notes.txt"],
            "'./notes.txt' is not an executable file",
        ),
        (&["run"], "no command to run"),
        (
            &["run", "--runs", "0", "--", "true"],
            "--runs 0: at least one",
        ),
        (
            &["run", "--interval", "often", "--", "true"],
            "--interval often: 'often' is not a duration",
        ),
        (
            &["run", "--timeout", "5 parsecs", "--", "true"],
            "--timeout 5 parsecs",
        ),
        (
            &["run", "--plan", "bad.toml"],
            "plan file bad.toml: line 3, column 3",
        ),
        (
            &["run", "--plan", "missing.toml"],
            "plan file missing.toml: cannot read it",
        ),
        (
            &["run", "--json", "nodir/out.json", "--", "true"],
            "the directory nodir does not exist",
        ),
        (
            &["--db", "future.db", "run", "--", "true"],
            "schema version 42, newer than this memtrial understands",
        ),
        (&["--db", "none.db", "report"], "no database at none.db"),
        (&["workload", "fragment", "--threads", "0"], "--threads 0"),
        (
            &["workload", "fragment", "--max-size", "12 parsecs"],
            "--max-size 12 parsecs",
        ),
        (
            &["workload", "fragment", "--survivors", "2"],
            "--survivors 2",
        ),
    ];
    for (args, expect) in cases {
        let out = Command::new(memtrial())
            .args(*args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expect),
            "{args:?}: expected '{expect}' in:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("memtrial.db").exists(), "nothing was run");
}

#[test]
fn sigint_keeps_completed_runs_and_leaves_nothing_behind() {
    stop_signal_keeps_runs_and_leaves_nothing(libc::SIGINT, "43.5");
}

#[test]
fn variants_shows_where_each_library_is() {
    if !need_allocators(&["jemalloc"]) {
        return;
    }
    let r = memtrial_in_tmp(&["variants"]);
    assert_eq!(r.code(), 0);
    let t = r.stdout();
    for n in [
        "glibc", "arena1", "arena2", "jemalloc", "tcmalloc", "mimalloc",
    ] {
        assert!(t.contains(n), "{t}");
    }
    assert!(
        t.contains("libjemalloc.so.2") && t.contains("MALLOC_ARENA_MAX=2"),
        "{t}"
    );
}

/// The demo's claim: on this machine, glibc's default has the largest footprint and the
/// differences are significant. Runs the real demo (5 runs per variant).
#[test]
#[ignore = "measures: runs alone in the second pass of scripts/test.sh (cargo test -- --ignored)"]
fn demo_shows_glibc_with_the_largest_footprint() {
    if !need_allocators(&["jemalloc", "tcmalloc", "mimalloc"]) {
        return;
    }
    // 5 runs rather than the demo's default 3: with 3, one outlying run among ~25%
    // differences can widen an interval across 1; with 5 the median is sturdier.
    let r = memtrial_in_tmp(&["demo", "--runs", "5", "--json", "out.json"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let median = |name: &str, fig: &str| median(&doc, name, fig).as_f64().unwrap();
    for fig in ["peak_rss_bytes", "mean_rss_bytes"] {
        let glibc = median("glibc", fig);
        for name in variant_names(&doc) {
            if name == "glibc" {
                continue;
            }
            // MALLOC_ARENA_MAX=2 is the noisy one on this workload (its peak ranged
            // 581-926 MB over runs, see docs/workload.md): it may tie with glibc, and its
            // median may even land a little above (mean RSS 1.07× in one full-suite run
            // here), but it is never *significantly* above: the ratio's 95% interval
            // reaches down to 1. Every other variant stays strictly below glibc.
            if name == "arena2" {
                let ratio = ratio(&doc, name, fig);
                let low = ratio["ci95"][0].as_f64();
                assert!(
                    low.is_some_and(|l| l <= 1.0),
                    "{fig}: arena2 significantly above glibc: {ratio}"
                );
                continue;
            }
            assert!(
                median(name, fig) < glibc,
                "{fig}: {name} {} vs glibc {glibc}",
                median(name, fig)
            );
        }
    }
    let je = ratio(&doc, "jemalloc", "peak_rss_bytes");
    assert_eq!(je["significant"], true, "{je}");
    assert!(je["value"].as_f64().unwrap() < 1.0);
}

// ───────────── cgroup sandbox (issue 3): real cgroups, skipped with a reason without them ─────────────

#[test]
fn a_batch_gets_no_trend_verdict_only_its_state_at_the_peak() {
    if !need_python3() {
        return;
    }
    // A batch has no steady phase: growing or flat, its RSS trend is not judged (the JSON
    // has `trend: null`, never a leak); its report line is its state at its peak (a leak
    // verdict needs steady load: tests/it/inside.rs).
    let cases = [
        "import time\nl = []\nend = time.monotonic() + 5\nwhile time.monotonic() < end:\n    l.append(b'x' * 1_500_000); time.sleep(0.05)\n",
        "import time\nx = bytearray(100_000_000)\ntime.sleep(3)\n",
    ];
    for code in cases {
        let r = run_json(1, "glibc", &[], &["python3", "-c", code]);
        assert_eq!(r.code(), 0, "{}", r.stderr());
        let doc = r.json();
        let trend = trend(&doc, "glibc");
        assert!(trend.is_null(), "{trend}");
        assert_eq!(why(&doc, "glibc")["verdict"], "at_peak");
        assert!(r.stdout().contains("at its RSS peak:"), "{}", r.stdout());
    }
}

/// The record says what memtrial started the workload through and put inside it: the
/// embedded spawner (how it was linked, its size and hash) and, when the allocator probe
/// runs, the probe library; both change a small program's figures.
#[test]
fn the_record_names_its_spawner_and_probe_library() {
    let notes = |extra: &[&str]| -> Vec<String> {
        let r = run_json(1, "glibc", extra, &["/bin/true"]);
        assert_eq!(r.code(), 0, "{}", r.explain());
        r.json()["notes"]
            .as_array()
            .expect("notes")
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let probed = notes(&[]);
    let spawner = probed
        .iter()
        .find(|n| n.starts_with("spawner: "))
        .unwrap_or_else(|| panic!("no spawner note in {probed:?}"));
    assert!(
        spawner.starts_with("spawner: memtrial's embedded C spawner (static, ")
            || spawner.starts_with("spawner: memtrial's embedded C spawner (dynamic, "),
        "{spawner}"
    );
    assert!(spawner.contains("SHA-256 "), "{spawner}");
    assert!(
        probed
            .iter()
            .any(|n| n.starts_with("allocator probe: memtrial's embedded libmemtrial-probe.so (")),
        "{probed:?}"
    );
    let bare = notes(&["--no-probes"]);
    assert!(bare.iter().any(|n| n == spawner), "{bare:?}");
    assert!(
        !bare.iter().any(|n| n.starts_with("allocator probe: ")),
        "{bare:?}"
    );
}

/// memtrial's own cost, said in the experiment's notes, agrees with what the kernel tells
/// about it: its peak RSS with `ru_maxrss` as `maxrss_of` (a small static parent, so the
/// harness's image is not inherited) reaps it, its CPU with wait4's account of that parent
/// (memtrial and the `sleep`s it waited for, whose CPU is small beside memtrial's).
#[test]
fn memtrials_own_cost_is_in_the_notes_and_agrees_with_wait4() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("maxrss");
    let bin = memtrial();
    // Waited for below with wait4, which std's Child cannot do (it has no rusage).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(fixture("maxrss_of"))
        .arg(&out_file)
        .arg(&bin)
        .args([
            "run",
            "--runs",
            "2",
            "--variants",
            "glibc",
            "--json",
            "out.json",
            "--quiet",
            "--",
            "sleep",
            "0.3",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: libc::rusage is plain data; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a rusage for wait4 to fill; the pid is our own child, waited once.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as i32);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let reaped = std::fs::read_to_string(&out_file).unwrap();
    let mut words = reaped.split_whitespace();
    assert_eq!(words.next(), Some("0"), "memtrial's exit: {reaped}");
    let maxrss_kib: f64 = words.next().unwrap().parse().unwrap();
    let doc = json_in(dir.path());
    let note = doc["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|n| n.starts_with("memtrial's own cost"))
        .unwrap_or_else(|| panic!("no own-cost note in {}", doc["notes"]))
        .to_string();
    assert!(note.contains("over these 2 run(s)"), "{note}");
    let bytes = |word: &str| -> f64 {
        let after = note.split(word).nth(1).unwrap().trim_start();
        let mut it = after.split_whitespace();
        let n: f64 = it.next().unwrap().parse().unwrap();
        let unit = it.next().unwrap();
        n * match unit {
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            u => panic!("unit {u} in {note}"),
        }
    };
    let said_peak = bytes("peak RSS");
    let kernel_peak = maxrss_kib * 1024.0;
    // Said to three figures (0.5%); memtrial grows a little after the note (the report).
    assert!(
        said_peak <= kernel_peak * 1.005 && said_peak >= 0.5 * kernel_peak,
        "note says {said_peak} B, wait4 {kernel_peak} B: {note}"
    );
    let cpu_said: f64 = {
        let after = note.split("): ").nth(1).unwrap();
        let mut it = after.split_whitespace();
        let n: f64 = it.next().unwrap().parse().unwrap();
        n * if it.next().unwrap() == "ms" {
            1e-3
        } else {
            1.0
        }
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let kernel_cpu = secs(ru.ru_utime) + secs(ru.ru_stime);
    assert!(
        cpu_said <= kernel_cpu + 0.01,
        "note says {cpu_said} s CPU, wait4 {kernel_cpu} s: {note}"
    );
}

/// A run that prints 20 MB keeps 1 MiB of it with `--log-limit 1M`: its first and last
/// halves in whole lines, with the bytes left out said between them; and while it ran, its
/// file never held much more than the limit on disk (the workload reads its own file's
/// allocated blocks before it exits, after the watcher's next look).
#[test]
fn a_run_that_prints_too_much_keeps_its_head_and_tail() {
    let script = "seq 1 3000000; sleep 1; stat -L -c '%b %B' /proc/self/fd/1 >&2";
    let r = run_with(
        1,
        "glibc",
        &["--log-limit", "1M", "--no-probes"],
        &["sh", "-c", script],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let logs = r.dir.path().join("memtrial-logs/exp-1");
    let file = |ext: &str| {
        std::fs::read_dir(&logs)
            .expect("the run's logs")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == ext))
            .unwrap_or_else(|| panic!("no .{ext} in {}", logs.display()))
    };
    let text = std::fs::read_to_string(file("stdout")).expect("stdout");
    assert!(text.starts_with("1\n2\n3\n"), "{}", &text[..20]);
    assert!(text.ends_with("2999999\n3000000\n"));
    assert!(text.len() <= (1 << 20) + 200, "{} bytes kept", text.len());
    let said = text
        .lines()
        .find(|l| l.starts_with("[memtrial: "))
        .expect("the line saying what was left out");
    assert!(said.contains("--log-limit 1.0 MiB"), "{said}");
    // What was left out is exactly the lines between the last number of the head and the
    // first of the tail.
    let (head, tail) = text.split_once(&format!("\n{said}\n")).expect("one line");
    let last: u64 = head.lines().last().unwrap().parse().unwrap();
    let first: u64 = tail.lines().next().unwrap().parse().unwrap();
    let missing: usize = (last + 1..first).map(|n| n.to_string().len() + 1).sum();
    assert!(
        said.contains(&format!("({missing} bytes)")),
        "{said}: {last} .. {first}"
    );
    // On disk at the end of the run: at most the limit and its slack (128 KiB), a
    // filesystem's rounding aside.
    let err = std::fs::read_to_string(file("stderr")).expect("stderr");
    let mut f = err.split_whitespace().map(|w| w.parse::<u64>().unwrap());
    let on_disk = f.next().unwrap() * f.next().unwrap();
    assert!(
        on_disk <= (1 << 20) + (128 << 10) + (64 << 10),
        "{on_disk} bytes on disk while the run went on: {err}"
    );
}

/// A disk filled by a run's own output: the error names the run logs beside the database,
/// what they take, and `--log-limit` (a 4 MiB tmpfs, a run printing 20 MB with no bound).
#[test]
fn a_full_disk_names_the_run_logs_and_the_bound() {
    if !need_root("mounts a 4 MiB tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&mnt)
        .status()
        .expect("mount");
    assert!(mounted.success(), "mount a tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let out = Command::new(memtrial())
        .args(["run", "--runs", "1", "--variants", "glibc", "--no-probes"])
        .args(["--log-limit", "0", "--", "sh", "-c", "seq 1 3000000"])
        .current_dir(&mnt)
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("database or disk is full")
            && err.contains("the run logs beside the database, ./memtrial-logs, take ")
            && err.contains(" MiB on disk")
            && err.contains("all of its output: --log-limit 0")
            && err.contains("lower --log-limit"),
        "{err}"
    );
}

/// The probe library cannot be written where the loader would read it (TMPDIR names no
/// directory): each run says why it has no allocator figures, and the experiment's notes
/// no longer say the embedded probe was in the workloads.
#[test]
fn a_probe_that_cannot_be_written_is_not_said_to_be_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-dir");
    let args = run_json_args(1, "glibc", &[], &["/bin/sleep", "0.1"]);
    let out = Command::new(memtrial())
        .args(&args)
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("TMPDIR", &missing)
        .output()
        .expect("run memtrial");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    let notes = doc["notes"].to_string();
    let why = format!("cannot create {}/memtrial-", missing.display());
    assert!(
        notes.contains("allocator probe: in no workload: ") && notes.contains(&why),
        "{notes}"
    );
    assert!(!notes.contains("embedded libmemtrial-probe.so"), "{notes}");
    let absent = doc["variants"][0]["runs"][0]["inside"]["absent"].to_string();
    assert!(
        absent.contains("allocator") && absent.contains(&why),
        "{absent}"
    );
}
