//! Integration tests: the real binary, real allocators, real processes.
//! Every test works in its own temporary directory and database.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

fn memtrial() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memtrial"))
}

struct Run {
    out: Output,
    dir: tempfile::TempDir,
}

impl Run {
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// stderr plus each run's status and verification detail, for failure messages.
    fn explain(&self) -> String {
        let mut out = self.stderr();
        if let Ok(text) = std::fs::read_to_string(self.dir.path().join("out.json")) {
            if let Ok(doc) = serde_json::from_str::<Value>(&text) {
                for v in doc["variants"].as_array().into_iter().flatten() {
                    for r in v["runs"].as_array().into_iter().flatten() {
                        out.push_str(&format!(
                            "\n{}: {} {} | {}",
                            v["name"], r["status"], r["verification_detail"], r["message"]
                        ));
                    }
                }
            }
        }
        out
    }

    fn json(&self) -> Value {
        let p = self.dir.path().join("out.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
            panic!(
                "no JSON at {}: {e}\nstderr:\n{}",
                p.display(),
                self.stderr()
            )
        });
        let v: Value = serde_json::from_str(&text).expect("valid JSON");
        validate_schema(&v, "experiment-v1.schema.json");
        v
    }
}

/// Runs memtrial in a fresh directory with its own database.
fn memtrial_in_tmp(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(memtrial())
        .args(args)
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial");
    Run { out, dir }
}

/// The JSON Schema `docs/schema/NAME`.
fn schema(name: &str) -> Value {
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/schema")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap()
}

/// Validates `v` against the schema `docs/schema/NAME`.
fn validate_schema(v: &Value, name: &str) {
    validate_with(v, &schema(name));
}

fn validate_with(v: &Value, schema: &Value) {
    let validator = jsonschema::validator_for(schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "JSON does not match its schema:\n{}",
        errors.join("\n")
    );
}

/// The C fixtures (static, dynamic, own-malloc programs), built once.
fn fixture(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-fixtures");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/c/build.sh");
        let r = Command::new("sh")
            .arg(&script)
            .arg(&out)
            .output()
            .expect("run build.sh");
        assert!(
            r.status.success(),
            "build.sh failed: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        out
    });
    let p = dir.join(name);
    assert!(
        p.exists(),
        "fixture {name} was not built (is libc6-dev installed? run scripts/setup.sh)"
    );
    p
}

fn variant<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("variant {name} missing"))
}

fn first_run<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &variant(doc, name)["runs"][0]
}

fn no_process_matching(pattern: &str) -> bool {
    let out = Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .expect("pgrep");
    out.stdout.is_empty()
}

const FRAGMENT_SHORT: [&str; 6] = ["--threads", "4", "--seconds", "0.6", "--seed", "7"];

fn fragment_cmd() -> Vec<String> {
    let mut v = vec![
        memtrial().display().to_string(),
        "workload".into(),
        "fragment".into(),
    ];
    v.extend(FRAGMENT_SHORT.iter().map(|s| s.to_string()));
    v
}

#[test]
fn every_builtin_variant_is_verified_on_the_fragment_workload() {
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
    let names: Vec<&str> = doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["glibc", "arena1", "arena2", "jemalloc", "tcmalloc", "mimalloc"],
        "scripts/setup.sh installs every allocator"
    );
    for (name, alloc, verification) in [
        ("glibc", "glibc", "nothing_to_verify"),
        ("arena1", "glibc", "verified"),
        ("arena2", "glibc", "verified"),
        ("jemalloc", "jemalloc", "verified"),
        ("tcmalloc", "tcmalloc", "verified"),
        ("mimalloc", "mimalloc", "verified"),
    ] {
        let run = first_run(&doc, name);
        assert_eq!(run["status"], "ok", "{name}: {run}");
        assert_eq!(run["verified"], true, "{name}");
        assert_eq!(
            run["verification"], verification,
            "{name}: {}",
            run["verification_detail"]
        );
        assert_eq!(run["allocator_detected"], alloc, "{name}");
        assert!(
            run["peak_rss_bytes"].as_u64().unwrap() > 10 << 20,
            "{name}: {run}"
        );
        assert!(
            run["threads_peak"].as_u64().unwrap() >= 5,
            "{name}: 4 workers + main"
        );
        assert!(
            run["samples"].as_array().unwrap().len() >= 3,
            "{name}: sampled every 100 ms"
        );
        assert!(run["wall_seconds"].as_f64().unwrap() >= 0.6);
        assert!(run["cpu_user_seconds"].as_f64().unwrap() > 0.0);
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
    let prog = fixture("alloc_loop_static");
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc,jemalloc",
        "--json",
        "out.json",
        "--",
        prog.to_str().unwrap(),
        "400",
    ]);
    assert_eq!(
        r.code(),
        1,
        "a run whose variant did not take effect fails the experiment\n{}",
        r.stderr()
    );
    let doc = r.json();
    let je = first_run(&doc, "jemalloc");
    assert_eq!(je["status"], "variant_not_effective", "{je}");
    assert_eq!(je["verified"], false);
    assert!(
        je["verification_detail"]
            .as_str()
            .unwrap()
            .contains("statically linked"),
        "{je}"
    );
    assert_eq!(first_run(&doc, "glibc")["status"], "ok");
    assert!(
        r.stdout().contains("variant_not_effective"),
        "{}",
        r.stdout()
    );
}

#[test]
fn program_defining_malloc_ignores_the_preload() {
    let prog = fixture("own_malloc");
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc,jemalloc",
        "--json",
        "out.json",
        "--",
        prog.to_str().unwrap(),
        "400",
    ]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let doc = r.json();
    let je = first_run(&doc, "jemalloc");
    assert_eq!(je["status"], "variant_not_effective");
    assert!(
        je["verification_detail"]
            .as_str()
            .unwrap()
            .contains("defines malloc"),
        "{je}"
    );
    assert_eq!(
        je["allocator_detected"],
        "custom (the executable defines malloc)"
    );
}

#[test]
fn environment_reset_by_the_program_is_not_effective() {
    let prog = fixture("alloc_loop_dyn");
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "arena2",
        "--baseline",
        "arena2",
        "--json",
        "out.json",
        "--",
        "env",
        "-i",
        prog.to_str().unwrap(),
        "400",
    ]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let run = first_run(&r.json(), "arena2").clone();
    assert_eq!(run["status"], "variant_not_effective", "{run}");
    assert!(
        run["verification_detail"]
            .as_str()
            .unwrap()
            .contains("MALLOC_ARENA_MAX"),
        "{run}"
    );
}

#[test]
fn peak_rss_agrees_with_the_kernels_rusage() {
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
    let peak = run["peak_rss_bytes"].as_u64().unwrap();
    assert_eq!(run["peak_rss_source"], "wait4_maxrss", "{run}");
    assert_eq!(
        peak, kernel,
        "memtrial's peak RSS is the kernel's ru_maxrss for the same run"
    );
    // And the workload's own VmHWM, read just before it exited, agrees within a page or so.
    let stdout = std::fs::read_to_string(run["stdout_path"].as_str().unwrap()).unwrap();
    let own: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let hwm = own["vm_hwm_bytes"].as_u64().unwrap();
    assert!(
        peak.abs_diff(hwm) <= peak / 100,
        "peak {peak} vs VmHWM {hwm}"
    );
}

#[test]
fn a_process_tree_is_summed() {
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--json",
        "out.json",
        "--",
        "sh",
        "-c",
        "python3 -c 'import time; x=bytearray(30_000_000); time.sleep(0.8)' & \
         python3 -c 'import time; x=bytearray(30_000_000); time.sleep(0.8)'; wait",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert!(run["processes_seen"].as_u64().unwrap() >= 3, "{run}");
    let max_sample = run["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rss_bytes"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        max_sample > 60_000_000,
        "two 30 MB children at once: {max_sample}"
    );
    assert_eq!(run["peak_rss_source"], "sampled_tree_sum");
    assert!(run["peak_rss_bytes"].as_u64().unwrap() >= max_sample);
}

#[test]
fn failed_command_is_recorded_and_its_stderr_shown() {
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "2",
        "--variants",
        "glibc",
        "--json",
        "out.json",
        "--",
        "sh",
        "-c",
        "echo boom-from-the-workload >&2; exit 3",
    ]);
    assert_eq!(r.code(), 1);
    assert!(
        r.stderr().contains("boom-from-the-workload"),
        "{}",
        r.stderr()
    );
    assert!(r.stderr().contains("exited with code 3"), "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["exit_code"], 3);
    assert_eq!(variant(&doc, "glibc")["summary"]["runs_ok"], 0);
    assert_eq!(variant(&doc, "glibc")["summary"]["statuses"]["failed"], 2);
}

#[test]
fn timeout_stops_the_whole_tree() {
    let start = Instant::now();
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--timeout",
        "1s",
        "--json",
        "out.json",
        "--",
        "sh",
        "-c",
        "sleep 41.25 & sleep 41.25; wait",
    ]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(start.elapsed() < Duration::from_secs(15));
    let run = first_run(&r.json(), "glibc").clone();
    assert_eq!(run["status"], "timeout");
    assert!(no_process_matching("sleep 41.25"), "the tree is gone");
}

#[test]
fn a_daemon_ignoring_sigterm_is_not_left_behind() {
    // The workload double-forks a child that leaves the process group and ignores SIGTERM,
    // then exits at once.
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--json",
        "out.json",
        "--",
        "sh",
        "-c",
        "(trap '' TERM; exec setsid sleep 42.75) & sleep 0.3; exit 0",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        no_process_matching("sleep 42.75"),
        "the orphaned daemon was killed"
    );
    let run = first_run(&r.json(), "glibc").clone();
    assert!(run["processes_seen"].as_u64().unwrap() >= 2, "{run}");
}

#[test]
fn plan_file_with_custom_variant() {
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
    validate_schema(&doc, "experiment-v1.schema.json");
    assert_eq!(doc["experiment"]["seed"], 5);
    let je = variant(&doc, "je-narrow");
    assert_eq!(je["env"]["MALLOC_CONF"], "narenas:1");
    assert_eq!(je["runs"].as_array().unwrap().len(), 2);
    assert_eq!(je["runs"][0]["verification"], "verified");
    assert_eq!(je["runs"][0]["allocator_detected"], "jemalloc");
    let ratio = &je["summary"]["ratio_to_baseline"]["peak_rss_bytes"];
    assert!(ratio["value"].as_f64().unwrap() > 0.0);
    assert_eq!(
        ratio["significant"], false,
        "2 runs are too few to call anything significant"
    );
}

#[test]
fn list_and_report_read_the_store_again() {
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc,arena2",
        "--",
        "true",
    ]);
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
    validate_schema(&doc, "experiment-v1.schema.json");
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
        c.execute_batch("PRAGMA user_version = 42;").unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(memtrial())
        .args([
            "run",
            "--runs",
            "3",
            "--variants",
            "glibc",
            "--",
            "sh",
            "-c",
            "sleep 43.5",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: sending a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(no_process_matching("sleep 43.5"));
    let list = Command::new(memtrial())
        .args(["report", "--json", "-"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&list.stdout).unwrap();
    validate_schema(&doc, "experiment-v1.schema.json");
    assert_eq!(doc["experiment"]["status"], "interrupted");
    assert_eq!(first_run(&doc, "glibc")["status"], "interrupted");
}

#[test]
fn variants_shows_where_each_library_is() {
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
    // 5 runs rather than the demo's default 3: with 3, one outlying run among ~25%
    // differences can widen an interval across 1; with 5 the median is sturdier.
    let r = memtrial_in_tmp(&["demo", "--runs", "5", "--json", "out.json"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let median = |name: &str, fig: &str| {
        variant(&doc, name)["summary"][fig]["median"]
            .as_f64()
            .unwrap()
    };
    for fig in ["peak_rss_bytes", "mean_rss_bytes"] {
        let glibc = median("glibc", fig);
        for v in doc["variants"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            if name == "glibc" {
                continue;
            }
            // MALLOC_ARENA_MAX=2 is the noisy one on this workload (its peak ranged
            // 581-926 MB over runs, see docs/workload.md): it may tie with glibc, never beat it
            // by more than noise. Every other variant stays strictly below glibc.
            let limit = if name == "arena2" {
                glibc * 1.05
            } else {
                glibc
            };
            assert!(
                median(name, fig) < limit,
                "{fig}: {name} {} vs glibc {glibc}",
                median(name, fig)
            );
        }
    }
    let je = &variant(&doc, "jemalloc")["summary"]["ratio_to_baseline"]["peak_rss_bytes"];
    assert_eq!(je["significant"], true, "{je}");
    assert!(je["value"].as_f64().unwrap() < 1.0);
}

// ───────────── cgroup sandbox (issue 3): real cgroups, skipped with a reason without them ─────────────

/// The cgroup layout memtrial would use, or `None` (with the reason printed) when the
/// machine gives none: not root, or no cgroup file system.
fn cgroups() -> Option<memtrial::linux::cgroup::Hierarchy> {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: cgroup tests need root");
        return None;
    }
    match memtrial::linux::cgroup::detect() {
        Ok(h) => Some(h),
        Err(e) => {
            eprintln!("skipping: no cgroups here: {e}");
            None
        }
    }
}

fn cgroup_bases(h: &memtrial::linux::cgroup::Hierarchy) -> Vec<PathBuf> {
    match h {
        memtrial::linux::cgroup::Hierarchy::V2 { base, .. } => vec![base.clone()],
        memtrial::linux::cgroup::Hierarchy::V1 { bases } => bases.values().cloned().collect(),
    }
}

/// No run cgroup whose memtrial has exited is left behind.
fn assert_no_orphan_cgroups(h: &memtrial::linux::cgroup::Hierarchy) {
    for base in cgroup_bases(h) {
        let Ok(rd) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in rd.flatten().filter(|e| e.path().is_dir()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let owner: i32 = name
                .split('-')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            let alive = std::fs::read_to_string(format!("/proc/{owner}/comm"))
                .map(|c| c.trim() == "memtrial")
                .unwrap_or(false);
            assert!(alive, "cgroup {} outlived its memtrial", e.path().display());
        }
    }
}

fn arena_line(run: &Value) -> std::collections::HashMap<String, i64> {
    let out = std::fs::read_to_string(run["stdout_path"].as_str().unwrap()).unwrap();
    out.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

#[test]
fn over_the_memory_limit_is_oom_killed() {
    let Some(h) = cgroups() else { return };
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "2",
        "--variants",
        "glibc",
        "--memory-limit",
        "64M",
        "--json",
        "out.json",
        "--",
        "python3",
        "-c",
        "x = bytearray(400_000_000)",
    ]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run["status"], "oom_killed", "{run}");
    assert!(run["cgroup"]["oom_kills"].as_u64().unwrap() >= 1);
    assert_eq!(doc["experiment"]["limits"]["memory_max"], 64 << 20);
    assert_eq!(
        variant(&doc, "glibc")["summary"]["statuses"]["oom_killed"],
        2
    );
    assert!(
        r.stdout().contains("OOM kills: 2 of 2 runs"),
        "{}",
        r.stdout()
    );
    assert_no_orphan_cgroups(&h);
}

#[test]
fn a_cpu_quota_throttles_but_glibc_still_sees_every_cpu() {
    let Some(h) = cgroups() else { return };
    let prog = fixture("arena_count");
    let cpus = memtrial::linux::host::online_cpus() as i64;
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--cpus",
        "0.5",
        "--json",
        "out.json",
        "--",
        prog.to_str().unwrap(),
        "40",
        "300",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert!(run["cgroup"]["nr_throttled"].as_u64().unwrap() > 0, "{run}");
    assert!(run["cgroup"]["throttled_seconds"].as_f64().unwrap() > 0.0);
    let seen = arena_line(run);
    assert_eq!(seen["online"], cpus, "a quota hides no CPU");
    assert_eq!(seen["affinity"], cpus);
    // 40 threads allocating at once: glibc stops at 8 arenas per visible CPU.
    assert_eq!(seen["arenas"], (8 * cpus).min(41), "{seen:?}");
    assert_no_orphan_cgroups(&h);
}

#[test]
fn a_cpuset_is_what_the_program_sees() {
    let Some(_) = cgroups() else { return };
    let prog = fixture("arena_count");
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--cpuset",
        "0",
        "--json",
        "out.json",
        "--",
        prog.to_str().unwrap(),
        "2",
        "50",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let seen = arena_line(first_run(&r.json(), "glibc"));
    assert_eq!(seen["affinity"], 1, "{seen:?}");
}

#[test]
fn a_fork_bomb_is_stopped_by_the_pids_limit() {
    let Some(h) = cgroups() else { return };
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--pids-limit",
        "24",
        "--timeout",
        "3s",
        "--json",
        "out.json",
        "--",
        "sh",
        "-c",
        "bomb_marker_44=1; f() { f & f; }; f",
    ]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    // The shell dies of a failed fork, or the timeout stops what is left: either way, stopped.
    assert!(
        run["status"] == "failed" || run["status"] == "timeout",
        "{run}"
    );
    let most = run["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["processes"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(most <= 24, "at most 24 processes at once, saw {most}");
    assert!(
        run["cgroup"]["pids_limit_hits"].as_u64().unwrap() > 0,
        "forks were refused: {run}"
    );
    assert!(no_process_matching("bomb_marker_44"), "the bomb is gone");
    assert_no_orphan_cgroups(&h);
}

#[test]
fn the_cgroup_peak_covers_the_whole_tree() {
    let Some(_) = cgroups() else { return };
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--json",
        "out.json",
        "--",
        "sh",
        "-c",
        "python3 -c 'import time; x=bytearray(40_000_000); time.sleep(0.6)' & \
         python3 -c 'import time; x=bytearray(40_000_000); time.sleep(0.6)'; wait",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    let cg_peak = run["cgroup"]["peak_bytes"].as_u64().unwrap();
    let anon = run["cgroup"]["anon_peak_bytes"].as_u64().unwrap();
    assert!(
        anon >= 80_000_000,
        "both children's anonymous memory at once: {anon}"
    );
    assert!(cg_peak >= anon);
    // At least the largest single process's kernel high-water mark.
    assert!(
        cg_peak >= run["peak_rss_bytes"].as_u64().unwrap().min(anon),
        "{run}"
    );
    let summary = &variant(&doc, "glibc")["summary"];
    assert!(summary["cgroup_peak_bytes"]["median"].as_f64().unwrap() > 80e6);
}

#[test]
fn sigint_then_resume_completes_the_experiment() {
    let Some(h) = cgroups() else { return };
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(memtrial())
        .args([
            "run",
            "--runs",
            "2",
            "--variants",
            "glibc,arena2",
            "--seed",
            "3",
            "--",
            "sh",
            "-c",
            "sleep 0.8; echo resume_marker_45",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(no_process_matching("resume_marker_45"));
    assert_no_orphan_cgroups(&h);
    let resumed = Command::new(memtrial())
        .args(["run", "--resume", "--json", "out.json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("resuming experiment 1"), "{stderr}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    validate_schema(&doc, "experiment-v1.schema.json");
    assert_eq!(doc["experiment"]["status"], "complete");
    assert_eq!(doc["experiment"]["seed"], 3);
    for v in ["glibc", "arena2"] {
        let runs = variant(&doc, v)["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{v}: {runs:?}");
        assert!(runs.iter().all(|r| r["status"] == "ok"), "{v}");
    }
    let again = Command::new(memtrial())
        .args(["run", "--resume"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is complete; nothing to resume"));
}

#[test]
fn stale_cgroups_of_a_killed_memtrial_are_cleaned() {
    let Some(h) = cgroups() else { return };
    // A group named for a PID that is not a running memtrial, as a SIGKILLed memtrial leaves.
    let stale: Vec<PathBuf> = cgroup_bases(&h)
        .iter()
        .map(|b| b.join("999999999-0"))
        .collect();
    for d in &stale {
        std::fs::create_dir_all(d).unwrap();
    }
    let r = memtrial_in_tmp(&["run", "--runs", "1", "--variants", "glibc", "--", "true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    // Another memtrial starting at the same moment (tests run in parallel) may be the one
    // that cleans it and says so; either way it must be gone.
    for d in &stale {
        assert!(!d.exists(), "{} was cleaned", d.display());
    }
}

// ───────────── reports people look at (issue 5) ─────────────

#[test]
fn html_report_renders_in_headless_chromium() {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        panic!("chromium is not installed: run scripts/setup.sh");
    };
    let mut args = vec![
        "run",
        "--runs",
        "3",
        "--variants",
        "glibc,jemalloc",
        "--seed",
        "2",
        "--html",
        "r.html",
        "--markdown",
        "r.md",
        "--samples-csv",
        "s.csv",
        "--",
    ];
    let cmd = fragment_cmd();
    args.extend(cmd.iter().map(String::as_str));
    let r = memtrial_in_tmp(&args);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let html = r.dir.path().join("r.html");
    let text = std::fs::read_to_string(&html).unwrap();
    for fetch in ["src=\"http", "href=\"http", "url(http", "<script", "<link"] {
        assert!(
            !text.contains(fetch),
            "nothing is fetched at view time: found {fetch}"
        );
    }
    let profile = r.dir.path().join("chromium-profile");
    let browse = |extra: &[&str]| {
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(format!("file://{}", html.display()))
            .output()
            .unwrap()
    };
    let dom = browse(&["--dump-dom"]);
    assert!(dom.status.success());
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(!log.contains("CONSOLE"), "console messages: {log}");
    assert!(dom_text.matches("<svg").count() >= 3, "charts in the page");
    assert!(dom_text.contains("Verdict") && dom_text.contains("jemalloc"));
    let png = r.dir.path().join("shot.png");
    let shot = browse(&[
        "--hide-scrollbars",
        "--window-size=1150,1400",
        &format!("--screenshot={}", png.display()),
    ]);
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    assert!(
        std::fs::metadata(&png).unwrap().len() > 20_000,
        "a real picture"
    );
    // The Markdown and the samples CSV are there too.
    let md = std::fs::read_to_string(r.dir.path().join("r.md")).unwrap();
    assert!(
        md.contains("| variant | runs ok |") && md.contains("| jemalloc | 3/3 |"),
        "{md}"
    );
    let csv = std::fs::read_to_string(r.dir.path().join("s.csv")).unwrap();
    assert!(csv.lines().count() > 6 * 5, "every sample of 6 runs");
    assert!(
        r.stdout().contains("Use ")
            || r.stdout().contains("No recommendation")
            || r.stdout().contains("Keep the baseline")
    );
}

#[test]
fn recommend_says_what_to_do_and_how() {
    let mut args = vec![
        "run",
        "--runs",
        "3",
        "--variants",
        "glibc,tcmalloc",
        "--seed",
        "4",
        "--",
    ];
    let cmd = fragment_cmd();
    args.extend(cmd.iter().map(String::as_str));
    let r = memtrial_in_tmp(&args);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = Command::new(memtrial())
        .args(["recommend"])
        .current_dir(r.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("Pareto front"), "{text}");
    if text.contains("Use tcmalloc") {
        assert!(
            text.contains("ENV LD_PRELOAD=") && text.contains("libtcmalloc-minimal4"),
            "{text}"
        );
        assert!(text.contains("- name: LD_PRELOAD"), "{text}");
    } else {
        assert!(
            text.contains("No recommendation") || text.contains("Keep the baseline"),
            "{text}"
        );
    }
}
// ---------------------------------------------------------------------------
// memtrial inspect (issue 6): live processes, compared with their own reports.
// ---------------------------------------------------------------------------

/// A fixture process, killed and reaped when dropped.
struct Live {
    child: std::process::Child,
    /// Lines printed before "ready".
    lines: Vec<String>,
}

impl Live {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    /// The value after `key ` in the fixture's output.
    fn value(&self, key: &str) -> u64 {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no '{key}' in {:?}", self.lines))
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program args` with `env`, waits for its "ready" line.
fn live(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Live {
    use std::io::BufRead;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn fixture");
    let out = child.stdout.take().expect("stdout");
    let mut lines = Vec::new();
    let mut ready = false;
    for line in std::io::BufReader::new(out).lines() {
        let line = line.expect("fixture output");
        if line == "ready" {
            ready = true;
            break;
        }
        lines.push(line);
    }
    let live = Live { child, lines };
    assert!(
        ready,
        "{} ended before printing ready: {:?}",
        program.display(),
        live.lines
    );
    live
}

fn inspect_json(pid: i32, extra: &[&str]) -> Value {
    let pid = pid.to_string();
    let mut args = vec!["inspect", pid.as_str(), "--json"];
    args.extend_from_slice(extra);
    let r = memtrial_in_tmp(&args);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let v: Value = serde_json::from_str(&r.stdout()).expect("inspect --json is JSON");
    assert_eq!(v["schema_version"], 1);
    validate_schema(&v, "inspect-v1.schema.json");
    v
}

#[test]
fn inspect_counts_the_arenas_malloc_info_reports() {
    // 20 threads on this machine: glibc's default limit (8 x online CPUs) applies.
    let p = live(&fixture("arenas"), &["20", "20"], &[]);
    let v = inspect_json(p.pid(), &[]);
    let told = p.value("arenas");
    assert_eq!(v["allocator"]["name"], "glibc");
    assert_eq!(v["glibc_arenas"]["method"], "exact");
    assert_eq!(
        v["glibc_arenas"]["count"].as_u64().unwrap(),
        told,
        "malloc_info said {told}"
    );
    assert_eq!(v["glibc_arenas"]["threads"], 21);
    assert_eq!(v["threads"], 21);
    assert_eq!(v["glibc_arenas"]["limit_source"]["source"], "default");
    assert_eq!(
        v["glibc_arenas"]["limit"].as_u64().unwrap(),
        8 * v["host"]["online_cpus"].as_u64().unwrap()
    );
    assert_eq!(v["thread_stacks"], 20, "one stack per worker thread");
    // The process's own glibc, read from its mapped libc.so.6: the same as ours here.
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let ours = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    assert_eq!(v["glibc"]["version"], ours.to_str().unwrap());
    assert_eq!(v["glibc"]["source"], "banner");
    let kinds: Vec<&str> = v["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["kind"].as_str().unwrap())
        .collect();
    for k in ["main_heap", "malloc_arenas", "thread_stacks", "file_code"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    for k in [
        "rss_bytes",
        "pss_bytes",
        "uss_bytes",
        "vsz_bytes",
        "peak_rss_bytes",
    ] {
        assert!(v[k].as_u64().unwrap() > 0, "{k}");
    }
    // The text names the count and where it came from, and evidence lines are whole.
    let r = memtrial_in_tmp(&["inspect", &p.pid().to_string()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let text = r.stdout();
    assert!(text.contains(&format!("{told} glibc arenas")), "{text}");
    assert!(
        text.contains("no other allocator library is mapped; malloc comes from glibc's /"),
        "{text}"
    );
    assert!(
        text.contains(&format!("glibc {}", ours.to_str().unwrap())),
        "{text}"
    );
    if told > 4 {
        assert!(
            v["advice"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["kind"] == "many_arenas" || a["kind"] == "arena_limit_above_cpu_quota"),
            "{told} arenas on {} CPUs: {}",
            v["host"]["online_cpus"],
            v["advice"]
        );
    }
}

#[test]
fn inspect_sees_malloc_arena_max() {
    let p = live(
        &fixture("arenas"),
        &["8", "20"],
        &[("MALLOC_ARENA_MAX", "2")],
    );
    let v = inspect_json(p.pid(), &[]);
    assert_eq!(p.value("arenas"), 2);
    assert_eq!(v["glibc_arenas"]["count"], 2);
    assert_eq!(v["glibc_arenas"]["limit"], 2);
    assert_eq!(
        v["glibc_arenas"]["limit_source"]["source"],
        "malloc_arena_max"
    );
    assert!(
        v["advice"].as_array().unwrap().is_empty(),
        "{}",
        v["advice"]
    );
}

#[test]
fn inspect_names_preloaded_allocators() {
    for (name, lib) in [
        ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
        (
            "tcmalloc",
            "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        ),
        ("mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"),
    ] {
        assert!(Path::new(lib).exists(), "scripts/setup.sh installs {lib}");
        let p = live(
            &fixture("alloc_loop_dyn"),
            &["5000"],
            &[("LD_PRELOAD", lib)],
        );
        let v = inspect_json(p.pid(), &[]);
        let a = &v["allocator"];
        assert_eq!(a["name"], name, "{a}");
        assert_eq!(a["ld_preload"], lib);
        assert!(a["preload_ignored"].is_null(), "{a}");
        assert!(
            a["evidence"].as_array().unwrap().iter().any(|e| {
                let e = e.as_str().unwrap();
                // The loader maps the file the symlink points to.
                e.starts_with(lib) && e.ends_with(" is mapped")
            }),
            "{a}"
        );
        assert!(
            v["glibc_arenas"].is_null(),
            "{name}: no glibc arenas to count"
        );
    }
}

#[test]
fn inspect_static_program_ignores_the_preload() {
    let p = live(
        &fixture("alloc_loop_static"),
        &["5000"],
        &[("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")],
    );
    let v = inspect_json(p.pid(), &[]);
    assert_eq!(v["allocator"]["name"], "glibc (static executable)");
    assert_eq!(v["allocator"]["linkage"], "static");
    assert!(v["allocator"]["preload_ignored"]
        .as_str()
        .unwrap()
        .contains("static"));
    assert!(v["advice"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["kind"] == "preload_ignored"));
    // A static glibc still has arenas; single-threaded, only the main one.
    assert_eq!(v["glibc_arenas"]["count"], 1);
    // No libc.so.6 mapped and no banner in a static executable: said, not guessed.
    assert!(v["glibc"].is_null());
}

#[test]
fn inspect_program_with_its_own_malloc() {
    let p = live(
        &fixture("own_malloc"),
        &["5000"],
        &[(
            "LD_PRELOAD",
            "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        )],
    );
    let v = inspect_json(p.pid(), &[]);
    assert_eq!(
        v["allocator"]["name"],
        "custom (the executable defines malloc)"
    );
    assert_eq!(v["allocator"]["defines_malloc"], true);
    assert!(v["allocator"]["preload_ignored"]
        .as_str()
        .unwrap()
        .contains("own malloc"));
    assert!(v["glibc_arenas"].is_null());
}

/// A v1 cpu cgroup created for a test, the process moved out and the group removed on drop.
struct CpuGroup {
    dir: PathBuf,
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let root = Path::new("/sys/fs/cgroup/cpu/cgroup.procs");
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(root, pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn inspect_reports_a_cpu_quota_below_the_visible_cpus() {
    let base = Path::new("/sys/fs/cgroup/cpu");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !base.join("cpu.cfs_quota_us").exists() {
        eprintln!(
            "skipped: needs root and a cgroup v1 cpu hierarchy at {}",
            base.display()
        );
        return;
    }
    let group = CpuGroup {
        dir: base.join(format!("memtrial-test-{}", std::process::id())),
    };
    std::fs::create_dir(&group.dir).expect("mkdir cgroup");
    std::fs::write(group.dir.join("cpu.cfs_period_us"), "100000").unwrap();
    std::fs::write(group.dir.join("cpu.cfs_quota_us"), "50000").unwrap();
    let p = live(&fixture("arenas"), &["4", "20"], &[]);
    std::fs::write(group.dir.join("cgroup.procs"), p.pid().to_string()).expect("move into cgroup");
    let v = inspect_json(p.pid(), &[]);
    let cpu = &v["cgroup"]["cpu"];
    assert_eq!(v["cgroup"]["cpu_quota_cpus"], 0.5);
    assert_eq!(v["cgroup"]["visible_cpus"], v["host"]["online_cpus"]);
    assert_eq!(cpu["version"], "v1");
    assert_eq!(
        cpu["path"],
        format!("/memtrial-test-{}", std::process::id())
    );
    assert_eq!(cpu["quota"]["quota_us"], 50000);
    assert_eq!(cpu["quota"]["cpus"], 0.5);
    // 0.5 CPU is below any online CPU count: glibc's default limit ignores it.
    assert!(v["host"]["online_cpus"].as_u64().unwrap() >= 1);
    let advice = v["advice"].as_array().unwrap();
    let a = advice
        .iter()
        .find(|a| a["kind"] == "arena_limit_above_cpu_quota")
        .unwrap_or_else(|| panic!("no quota advice: {advice:?}"));
    assert!(
        a["evidence"][0].as_str().unwrap().contains("= 0.50 CPU"),
        "{a}"
    );
    let msg = a["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "{} arenas for 5 threads; glibc allows {} here because {} CPUs are visible but the quota is 0.5 → set MALLOC_ARENA_MAX=2 or preload jemalloc",
            v["glibc_arenas"]["count"], v["glibc_arenas"]["limit"], v["host"]["online_cpus"]
        )),
        "{msg}"
    );
    assert!(
        a["evidence"].as_array().unwrap().iter().any(|e| e
            .as_str()
            .unwrap()
            .starts_with("jemalloc's default is 4 arenas per CPU")),
        "{a}"
    );
    drop(p);
    let dir = group.dir.clone();
    drop(group);
    assert!(!dir.exists(), "{} removed", dir.display());
}

#[test]
fn inspect_of_a_missing_or_vanishing_process_fails_cleanly() {
    let r = memtrial_in_tmp(&["inspect", "2147483647"]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains("no process with PID 2147483647"),
        "{}",
        r.stderr()
    );

    // Inspect again and again while the process exits: every answer is a full or
    // partial inspection or a clear error, never a crash.
    let p = live(&fixture("alloc_loop_dyn"), &["300"], &[]);
    let pid = p.pid().to_string();
    let start = Instant::now();
    let mut outcomes = (0, 0);
    while start.elapsed() < Duration::from_secs(3) {
        let r = memtrial_in_tmp(&["inspect", &pid, "--json"]);
        match r.code() {
            0 => {
                let v: Value = serde_json::from_str(&r.stdout()).expect("JSON even when partial");
                if v["complete"] == false {
                    assert!(!v["missing"].as_array().unwrap().is_empty());
                }
                outcomes.0 += 1;
            }
            2 => {
                let e = r.stderr();
                assert!(
                    e.contains("no process with PID") || e.contains("zombie"),
                    "{e}"
                );
                outcomes.1 += 1;
                if outcomes.1 >= 3 {
                    break;
                }
            }
            c => panic!("exit {c}:\n{}", r.stderr()),
        }
    }
    assert!(outcomes.0 >= 1, "inspected while alive at least once");
    assert!(outcomes.1 >= 1, "the exit was seen");
    drop(p);
}

#[test]
fn inspect_watch_on_a_process_that_exits() {
    let p = live(&fixture("alloc_loop_dyn"), &["1200"], &[]);
    let v = inspect_json(p.pid(), &["--watch", "6s", "--interval", "100ms"]);
    let w = &v["watch"];
    assert_eq!(w["end"], "process_exited");
    let n = w["samples"].as_array().unwrap().len();
    assert!((5..=20).contains(&n), "{n} samples in about 1.2 s");
    assert_eq!(v["complete"], false);
    assert!(w["trend"]["verdict"].is_string());
}

#[test]
fn inspect_watch_tells_growth_from_a_plateau() {
    // Flat: the arenas fixture sleeps after allocating.
    let flat = live(&fixture("arenas"), &["2", "20"], &[]);
    let v = inspect_json(flat.pid(), &["--watch", "2.5s", "--interval", "100ms"]);
    assert_eq!(
        v["watch"]["trend"]["verdict"], "plateau",
        "{}",
        v["watch"]["trend"]
    );
    assert_eq!(v["watch"]["end"], "completed");
    // Every sample has RSS, PSS, threads and (glibc) arenas.
    for smp in v["watch"]["samples"].as_array().unwrap() {
        assert!(smp["pss_bytes"].as_u64().unwrap() > 0, "{smp}");
        assert_eq!(smp["threads"], 3, "{smp}");
        assert_eq!(smp["arenas"], v["glibc_arenas"]["count"], "{smp}");
    }
    // Growing: 1 MiB of touched memory every 50 ms.
    let grow = live(
        Path::new("python3"),
        &[
            "-c",
            "import time\nprint('ready', flush=True)\na=[]\nwhile True:\n  a.append(b'x'*(1<<20)); time.sleep(0.05)",
        ],
        &[],
    );
    let v = inspect_json(grow.pid(), &["--watch", "2.5s", "--interval", "100ms"]);
    let t = &v["watch"]["trend"];
    assert_eq!(t["verdict"], "leak", "{t}");
    let slope = t["slope_bytes_per_min"].as_f64().unwrap() / 1048576.0;
    assert!(
        (300.0..=1500.0).contains(&slope),
        "about 1200 MiB/min: {slope}"
    );
    assert!(v["advice"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["kind"] == "growing"));
}

#[test]
fn runs_get_a_leak_or_plateau_verdict() {
    let cases = [
        ("leak", "import time\nl = []\nend = time.monotonic() + 5\nwhile time.monotonic() < end:\n    l.append(b'x' * 1_500_000); time.sleep(0.05)\n"),
        ("plateau", "import time\nx = bytearray(100_000_000)\ntime.sleep(3)\n"),
    ];
    for (want, code) in cases {
        let r = memtrial_in_tmp(&[
            "run",
            "--runs",
            "1",
            "--variants",
            "glibc",
            "--json",
            "out.json",
            "--",
            "python3",
            "-c",
            code,
        ]);
        assert_eq!(r.code(), 0, "{}", r.stderr());
        let doc = r.json();
        let trend = &variant(&doc, "glibc")["summary"]["trend"];
        let series: Vec<String> = first_run(&doc, "glibc")["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                format!(
                    "{:.1}s {}MB",
                    s["t_seconds"],
                    s["rss_bytes"].as_u64().unwrap() >> 20
                )
            })
            .collect();
        assert_eq!(trend["verdict"], want, "{trend} {series:?}");
        let word = if want == "leak" {
            "grows"
        } else {
            "plateaus at"
        };
        assert!(r.stdout().contains(word), "{}", r.stdout());
    }
}

// ==== memtrial load: HTTP load generation against real servers on 127.0.0.1 ============

mod load_servers {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// How a test server answers.
    #[derive(Clone, Copy)]
    pub enum Behaviour {
        /// 200 with Content-Length, keep-alive.
        Ok,
        /// 200 with a chunked body, then a 200 with `Connection: close`, alternately.
        ChunkedThenClose,
        /// 500 for everything.
        Error500,
        /// Waits this long before answering 200.
        Slow(Duration),
    }

    /// A request as the server saw it: (method, target, body).
    pub type Seen = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

    /// Starts a server on an ephemeral port; returns the port and what it received.
    pub fn start(b: Behaviour) -> (u16, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let s = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || serve(conn, b, s));
            }
        });
        (port, seen)
    }

    fn serve(conn: TcpStream, b: Behaviour, seen: Seen) {
        let _ = conn.set_nodelay(true);
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        let mut n = 0u64;
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or("").to_string();
            let target = parts.next().unwrap_or("").to_string();
            let mut length = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                if h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            {
                let mut s = seen.lock().unwrap();
                if s.len() < 100_000 {
                    s.push((method, target, body));
                }
            }
            n += 1;
            let (resp, close): (&[u8], bool) = match b {
                Behaviour::Ok => (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false),
                Behaviour::ChunkedThenClose if n % 2 == 1 => (
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                    false,
                ),
                Behaviour::ChunkedThenClose => (
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye",
                    true,
                ),
                Behaviour::Error500 => (
                    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops",
                    false,
                ),
                Behaviour::Slow(d) => {
                    std::thread::sleep(d);
                    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
                }
            };
            if w.write_all(resp).is_err() || close {
                return;
            }
        }
    }
}

use load_servers::Behaviour;

/// Runs `memtrial load` with `--json out.json`.
fn load(port: u16, path: &str, extra: &[&str]) -> Run {
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut args = vec!["load", "--url", &url, "--json", "out.json"];
    args.extend_from_slice(extra);
    memtrial_in_tmp(&args)
}

fn load_json(r: &Run) -> Value {
    let p = r.dir.path().join("out.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("no JSON: {e}\nstderr:\n{}", r.stderr()));
    serde_json::from_str::<Value>(&text).expect("valid JSON")["result"].clone()
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not a count in {v}"))
}

#[test]
fn load_closed_loop_keepalive_server() {
    let (port, seen) = load_servers::start(Behaviour::Ok);
    let r = load(
        port,
        "/hello?x=1",
        &[
            "--duration",
            "1s",
            "--warmup-duration",
            "300ms",
            "-c",
            "4",
            "-t",
            "2",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let j = load_json(&r);
    let n = u(&j, &["requests"]);
    assert!(n > 200, "{n} requests: {j}");
    for kind in ["connect", "timeout", "status_4xx", "status_5xx", "other"] {
        assert_eq!(u(&j, &["errors", kind]), 0, "{kind}: {j}");
    }
    assert!(j["latency_p50_ms"].as_f64().unwrap() > 0.0);
    assert!(j["latency_p99_ms"].as_f64() >= j["latency_p50_ms"].as_f64());
    let per_second = j["per_second"].as_array().unwrap();
    assert_eq!(per_second.len(), 1, "{j}");
    assert_eq!(u(&per_second[0], &["requests"]), n);
    // t is on the caller's clock: the second starts after the 300 ms warm-up.
    let t = per_second[0]["t_seconds"].as_f64().unwrap();
    assert!((0.29..0.5).contains(&t), "{t}");
    assert_eq!(j["target_rate"], Value::Null);
    // Warm-up requests went to the server but are not counted (the test server records
    // at most 100 000 requests: a quiet machine can send more than that in 1.3 s).
    let recorded = seen.lock().unwrap().len() as u64;
    assert!(
        recorded > n || recorded == 100_000,
        "server saw {recorded}, counted {n}"
    );
    assert_eq!(seen.lock().unwrap()[0].1, "/hello?x=1");
    let out = r.stdout();
    assert!(out.contains("requests") && out.contains("p99.9"), "{out}");
}

#[test]
fn load_chunked_and_connection_close_responses() {
    let (port, _) = load_servers::start(Behaviour::ChunkedThenClose);
    let r = load(port, "/", &["--duration", "1s", "-c", "4"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let j = load_json(&r);
    assert!(u(&j, &["requests"]) > 50, "{j}");
    assert_eq!(u(&j, &["errors", "other"]), 0, "{j}");
    assert_eq!(u(&j, &["errors", "connect"]), 0, "{j}");
}

#[test]
fn load_http_500s_are_counted_apart() {
    let (port, _) = load_servers::start(Behaviour::Error500);
    let r = load(port, "/", &["--duration", "1s", "-c", "2"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let j = load_json(&r);
    let n = u(&j, &["requests"]);
    assert!(n > 20, "{j}");
    assert_eq!(u(&j, &["errors", "status_5xx"]), n, "{j}");
    assert_eq!(u(&j, &["errors", "status_4xx"]), 0, "{j}");
    assert!(
        r.stdout().contains(&format!("http 5xx {}", n)) || n >= 1000,
        "{}",
        r.stdout()
    );
}

#[test]
fn load_slow_server_times_out() {
    let (port, _) = load_servers::start(Behaviour::Slow(Duration::from_secs(3)));
    let r = load(
        port,
        "/",
        &["--duration", "1s", "-c", "2", "--timeout", "200ms"],
    );
    assert_eq!(
        r.code(),
        1,
        "no response at all is a failure: {}",
        r.stderr()
    );
    let j = load_json(&r);
    assert_eq!(u(&j, &["requests"]), 0);
    let t = u(&j, &["errors", "timeout"]);
    assert!(
        (4..=14).contains(&t),
        "two connections, 200 ms each, 1 s: {t}"
    );
}

#[test]
fn load_connect_errors_when_nothing_listens() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = load(port, "/", &["--duration", "500ms", "-c", "2"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let j = load_json(&r);
    assert!(u(&j, &["errors", "connect"]) > 2, "{j}");
    // A backoff keeps a dead server from turning into a busy loop.
    assert!(u(&j, &["errors", "connect"]) < 200, "{j}");
    assert!(
        r.stderr().contains("no response was received"),
        "{}",
        r.stderr()
    );
}

#[test]
fn load_open_loop_holds_the_rate() {
    let (port, _) = load_servers::start(Behaviour::Ok);
    let r = load(
        port,
        "/",
        &[
            "--duration",
            "2s",
            "-c",
            "4",
            "--rate",
            "200",
            "--warmup-duration",
            "200ms",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let j = load_json(&r);
    let n = u(&j, &["requests"]);
    assert!((370..=430).contains(&n), "200/s for 2 s: {n}");
    assert_eq!(j["target_rate"].as_f64(), Some(200.0));
    let achieved = j["achieved_rate"].as_f64().unwrap();
    assert!((185.0..=215.0).contains(&achieved), "{achieved}");
    assert_eq!(j["per_second"].as_array().unwrap().len(), 2);
}

#[test]
fn load_open_loop_latency_counts_from_the_intended_send_time() {
    // One connection, 100 ms per response: capacity 10/s, asked 40/s. A closed loop
    // would report ~100 ms; requests wait for their turn, and that waiting is latency.
    let (port, _) = load_servers::start(Behaviour::Slow(Duration::from_millis(100)));
    let r = load(port, "/", &["--duration", "2s", "-c", "1", "--rate", "40"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let j = load_json(&r);
    let p50 = j["latency_p50_ms"].as_f64().unwrap();
    let max = j["latency_max_ms"].as_f64().unwrap();
    assert!(p50 > 300.0, "p50 {p50} ms must include the queueing: {j}");
    assert!(max > 1000.0, "max {max} ms: {j}");
    let achieved = j["achieved_rate"].as_f64().unwrap();
    assert!(achieved < 12.0, "{achieved}");
    assert!(r.stdout().contains("could not keep up"), "{}", r.stdout());
}

#[test]
fn load_replays_a_log_with_malformed_lines_in_order() {
    let (port, seen) = load_servers::start(Behaviour::Ok);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(
        &log,
        r#"127.0.0.1 - - [12/Mar/2024:10:00:00 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl"
127.0.0.1 - - [12/Mar/2024:10:00:00 +0000] "POST /login HTTP/1.1" 302 0 "-" "curl"
garbage line
127.0.0.1 - - [12/Mar/2024:10:00:01 +0000] "-" 400 0 "-" "-"
127.0.0.1 - - [12/Mar/2024:10:00:01 +0000] "HEAD /b?q=1 HTTP/1.1" 200 0 "-" "curl"
127.0.0.1 - - [12/Mar/2024:10:00:02 +0000] "GET /c HTTP/1.1" 200 5 "-" "curl"
"#,
    )
    .unwrap();
    let log_arg = log.to_str().unwrap();
    // At 10x the log lasts 0.3 s and starts over: about 3 rounds in 1 s.
    let r = load(
        port,
        "/",
        &[
            "--duration",
            "1s",
            "-c",
            "1",
            "--replay",
            log_arg,
            "--speed",
            "10",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let err = r.stderr();
    assert!(err.contains("replaying 3 request(s)"), "{err}");
    assert!(err.contains("2 unparseable line(s)"), "{err}");
    assert!(err.contains("1 skipped for their method"), "{err}");
    let seen: Vec<(String, String)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(m, t, _)| (m.clone(), t.clone()))
        .collect();
    assert!((6..=15).contains(&seen.len()), "{seen:?}");
    let expected = [("GET", "/a"), ("HEAD", "/b?q=1"), ("GET", "/c")];
    for (i, (m, t)) in seen.iter().enumerate() {
        assert_eq!((m.as_str(), t.as_str()), expected[i % 3], "{seen:?}");
    }
    // --methods opts other methods in.
    let (port, seen) = load_servers::start(Behaviour::Ok);
    let r = load(
        port,
        "/",
        &[
            "--duration",
            "300ms",
            "-c",
            "1",
            "--replay",
            log_arg,
            "--methods",
            "get,post",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|(m, t, _)| m == "POST" && t == "/login"));
    assert!(!seen.lock().unwrap().iter().any(|(m, _, _)| m == "HEAD"));
}

#[test]
fn load_targets_file_round_robin_with_headers_and_body() {
    let (port, seen) = load_servers::start(Behaviour::Ok);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("body.json"), "{\"n\":1}").unwrap();
    let targets = dir.path().join("targets.txt");
    std::fs::write(
        &targets,
        "# two requests\n/first\nPOST http://example.com:1/second?x=2\nContent-Type: application/json\n@body.json\n",
    )
    .unwrap();
    let r = load(
        port,
        "/",
        &[
            "--duration",
            "500ms",
            "-c",
            "1",
            "--targets",
            targets.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let seen = seen.lock().unwrap();
    assert!(seen.len() > 4);
    for (i, (m, t, body)) in seen.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!((m.as_str(), t.as_str()), ("GET", "/first"));
        } else {
            assert_eq!((m.as_str(), t.as_str()), ("POST", "/second?x=2"));
            assert_eq!(body, b"{\"n\":1}");
        }
    }
}

#[test]
fn load_against_python_http_server() {
    // HTTP/1.0 responses, one per connection: framing by Content-Length, then close.
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hello").unwrap();
    let mut child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            ready.elapsed() < Duration::from_secs(10),
            "python never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = load(port, "/index.html", &["--duration", "1s", "-c", "2"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let j = load_json(&r);
    assert!(u(&j, &["requests"]) > 10, "{j}");
    assert_eq!(u(&j, &["errors", "other"]), 0, "{j}");
}

#[test]
fn load_bad_input_names_the_flag() {
    let cases: [(&[&str], &str); 8] = [
        (&["--url", "https://127.0.0.1/"], "https is not supported"),
        (
            &["--url", "127.0.0.1:80"],
            "--url: '127.0.0.1:80' is not a URL",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "-c", "2", "-t", "3"],
            "--threads 3",
        ),
        (&["--url", "http://127.0.0.1:1/", "--rate", "0"], "--rate 0"),
        (
            &["--url", "http://127.0.0.1:1/", "--duration", "soon"],
            "--duration",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--targets", "missing.txt"],
            "--targets missing.txt",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--speed", "2"],
            "--replay",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--connections", "0"],
            "--connections 0",
        ),
    ];
    for (args, needle) in cases {
        let mut a = vec!["load"];
        a.extend_from_slice(args);
        let r = memtrial_in_tmp(&a);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.stderr());
        assert!(r.stderr().contains(needle), "{args:?}: {}", r.stderr());
    }
}

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
    let mut args = vec![
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--json",
        "out.json",
        "--url",
        "http://127.0.0.1:{port}/hello",
    ];
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
    args.extend_from_slice(&["--", "python3", &script, "{port}", mode]);
    memtrial_in_tmp(&args)
}

#[test]
fn server_trial_gives_herokus_table() {
    let script = server_py();
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc,arena2",
        "--json",
        "out.json",
        "--url",
        "http://127.0.0.1:{port}/hello",
        "--duration",
        "2s",
        "--cooldown",
        "1s",
        "--connections",
        "4",
        "--",
        "python3",
        &script,
        "{port}",
        "ok",
    ]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    assert_eq!(doc["experiment"]["server"]["connections"], 4);
    for v in ["glibc", "arena2"] {
        let run = first_run(&doc, v);
        assert_eq!(run["status"], "ok", "{run}");
        assert!(
            run["requests"].as_u64().unwrap() > 50,
            "{v}: {}",
            run["requests"]
        );
        assert!(run["throughput_rps"].as_f64().unwrap() > 25.0);
        assert!(run["latency_p50_ms"].as_f64().unwrap() > 0.0);
        assert!(run["latency_p99_ms"].as_f64().unwrap() >= run["latency_p50_ms"].as_f64().unwrap());
        assert_eq!(run["errors"]["status_5xx"], 0);
        let load = &run["load"];
        let ready = load["ready_seconds"].as_f64().unwrap();
        let start = load["load_start_seconds"].as_f64().unwrap();
        let end = load["load_end_seconds"].as_f64().unwrap();
        let cool = load["cooldown_end_seconds"].as_f64().unwrap();
        assert!(
            ready <= start && start < end && end < cool,
            "phases in order: {load}"
        );
        assert!((cool - end) >= 0.9, "a cool-down of 1 s");
        let seconds = load["per_second"].as_array().unwrap();
        assert!(!seconds.is_empty());
        assert!(
            seconds
                .iter()
                .all(|s| s["t_seconds"].as_f64().unwrap() >= start - 0.01),
            "one clock"
        );
        assert!(load["rss_after_cooldown_bytes"].as_u64().unwrap() > 0);
        // The memory samples run through the whole load on the same clock.
        let samples = run["samples"].as_array().unwrap();
        assert!(samples
            .iter()
            .any(|s| s["t_seconds"].as_f64().unwrap() > end));
    }
    let summary = &variant(&doc, "arena2")["summary"];
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

#[test]
fn server_trial_open_loop_holds_its_rate() {
    let r = server_trial("ok", &["--rate", "100", "--duration", "2s"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc").clone();
    assert_eq!(run["load"]["target_rate"], 100.0);
    let achieved = run["throughput_rps"].as_f64().unwrap();
    assert!(
        (85.0..=115.0).contains(&achieved),
        "achieved {achieved} req/s of 100"
    );
}

#[test]
fn server_that_never_gets_ready_is_a_failed_run() {
    let start = Instant::now();
    let r = server_trial("never-ready", &["--ready-timeout", "1500ms"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(start.elapsed() < Duration::from_secs(20));
    let run = first_run(&r.json(), "glibc").clone();
    assert_eq!(run["status"], "failed");
    assert!(
        run["message"]
            .as_str()
            .unwrap()
            .contains("never became ready within 1s 500ms"),
        "{run}"
    );
    assert!(no_process_matching("never-ready"));
}

#[test]
fn server_that_crashes_mid_load_is_a_failed_run_with_its_output() {
    let r = server_trial("crash-after-40", &["--duration", "3s"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc").clone();
    assert_eq!(run["status"], "failed");
    assert!(
        run["message"]
            .as_str()
            .unwrap()
            .contains("exited during the load"),
        "{run}"
    );
    assert!(
        r.stderr().contains("crashing on purpose"),
        "the server's last words: {}",
        r.stderr()
    );
}

#[test]
fn server_answering_500s_counts_them_apart() {
    let r = server_trial("errors", &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc").clone();
    let requests = run["requests"].as_u64().unwrap();
    assert!(requests > 0);
    assert_eq!(
        run["errors"]["status_5xx"], requests,
        "every response a 5xx: {run}"
    );
    assert_eq!(run["errors"]["connect"], 0);
}

#[test]
fn server_ignoring_sigterm_is_killed_and_leaves_nothing() {
    let r = server_trial("ignore-term", &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let run = first_run(&r.json(), "glibc").clone();
    assert_eq!(run["status"], "ok");
    assert_eq!(run["signal"], 9, "SIGKILL after the grace period: {run}");
    assert!(no_process_matching("ignore-term"));
}

#[test]
fn server_trial_replays_a_log_with_malformed_lines() {
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
    assert!(first_run(&doc, "glibc")["requests"].as_u64().unwrap() > 0);
}

#[test]
fn server_trial_bad_input_names_the_flag() {
    for (args, expect) in [
        (vec!["--url", "http://example.com:{port}/"], "use 127.0.0.1"),
        (
            vec!["--url", "https://127.0.0.1:{port}/"],
            "https is not supported",
        ),
        (vec!["--duration", "5s"], "a server trial needs --url"),
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
    if Command::new("puma").arg("--version").output().is_err() {
        panic!("puma is not installed: run scripts/setup.sh");
    }
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/puma-rack/config.ru");
    let r = memtrial_in_tmp(&[
        "run",
        "--runs",
        "1",
        "--variants",
        "glibc,jemalloc",
        "--json",
        "out.json",
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
        "--",
        "puma",
        "-t",
        "2:2",
        "-b",
        "tcp://127.0.0.1:{port}",
        app.to_str().unwrap(),
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    for v in ["glibc", "jemalloc"] {
        let run = first_run(&doc, v);
        assert_eq!(run["status"], "ok", "{run}");
        assert!(run["requests"].as_u64().unwrap() > 20, "{v}: {run}");
        assert_eq!(run["errors"]["status_5xx"], 0);
    }
    assert_eq!(
        first_run(&doc, "jemalloc")["allocator_detected"],
        "jemalloc"
    );
    assert_eq!(first_run(&doc, "jemalloc")["verified"], true);
}

/// `pmap -x PID`'s total line: (Kbytes, RSS) in bytes.
fn pmap_total(pid: i32) -> (u64, u64) {
    let out = Command::new("pmap")
        .args(["-x", &pid.to_string()])
        .output()
        .expect("pmap (procps)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("total kB"))
        .unwrap_or_else(|| panic!("no total in pmap output:\n{text}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0] * 1024, n[1] * 1024)
}

fn rollup_rss(pid: i32) -> u64 {
    let t = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let kb: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("Rss:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

#[test]
fn inspect_maps_totals_agree_with_pmap_and_smaps_rollup() {
    // A process that allocated and now sleeps: its address space holds still.
    let p = live(&fixture("arenas"), &["6", "20"], &[]);
    let v = inspect_json(p.pid(), &["--maps"]);
    let t = &v["mapping_totals"];
    let (pmap_size, pmap_rss) = pmap_total(p.pid());
    assert_eq!(t["size_bytes"].as_u64().unwrap(), pmap_size, "size vs pmap");
    assert_eq!(t["rss_bytes"].as_u64().unwrap(), pmap_rss, "RSS vs pmap");
    assert_eq!(t["rss_bytes"], t["rollup_rss_bytes"], "RSS vs smaps_rollup");
    assert_eq!(t["rss_bytes"].as_u64().unwrap(), rollup_rss(p.pid()));
    // PSS per mapping is rounded down to kB; the rollup sums before rounding.
    let (sum, roll) = (
        t["pss_bytes"].as_u64().unwrap(),
        t["rollup_pss_bytes"].as_u64().unwrap(),
    );
    assert!(sum <= roll && roll - sum <= 1024 * t["mappings"].as_u64().unwrap());
    let groups = v["mappings"].as_array().unwrap();
    let by_kind: u64 = groups
        .iter()
        .map(|g| g["size_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(by_kind, pmap_size, "the kinds add up");
    for g in groups {
        assert!(g["pss_bytes"].is_u64(), "{g}");
    }
    // The text shows the PSS column and both totals.
    let r = memtrial_in_tmp(&["inspect", &p.pid().to_string(), "--maps"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let text = r.stdout();
    assert!(text.contains("  kind ") && text.contains(" PSS "), "{text}");
    assert!(
        text.contains(&format!(
            "size total {} kB = pmap's total",
            pmap_size / 1024
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "resident total {} kB; smaps_rollup Rss {} kB",
            pmap_rss / 1024,
            pmap_rss / 1024
        )),
        "{text}"
    );
    assert!(text.contains("malloc arenas"), "{text}");
}

#[test]
fn inspect_tree_sums_the_children() {
    let p = live(
        Path::new("sh"),
        &["-c", "sleep 30 & sleep 30 & echo ready; wait"],
        &[],
    );
    // The children may take a moment to exist.
    let mut v = inspect_json(p.pid(), &["--tree"]);
    for _ in 0..50 {
        if v["tree"]["processes"] == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        v = inspect_json(p.pid(), &["--tree"]);
    }
    let t = &v["tree"];
    assert_eq!(t["processes"], 3, "{t}");
    assert_eq!(t["threads"], 3);
    let members = t["members"].as_array().unwrap();
    assert_eq!(members[0]["pid"], p.pid());
    let sum = |k: &str| -> u64 { members.iter().map(|m| m[k].as_u64().unwrap()).sum() };
    assert_eq!(t["pss_bytes"].as_u64().unwrap(), sum("pss_bytes"));
    assert_eq!(t["rss_bytes"].as_u64().unwrap(), sum("rss_bytes"));
    assert!(
        t["pss_bytes"].as_u64().unwrap() < t["rss_bytes"].as_u64().unwrap(),
        "shared pages: summed PSS is below summed RSS"
    );
    let r = memtrial_in_tmp(&["inspect", &p.pid().to_string(), "--tree"]);
    assert!(r.stdout().contains("Tree    3 processes"), "{}", r.stdout());
}

#[test]
fn inspect_top_lists_the_largest_processes_with_their_allocators() {
    // Big enough to rank near the top of a test machine: 20 threads, ~20 MiB each... of
    // glibc heaps; ranked among all processes, so ask for many.
    let p = live(&fixture("arenas"), &["8", "20"], &[]);
    let r = memtrial_in_tmp(&["inspect", "--top", "500", "--json"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let v: Value = serde_json::from_str(&r.stdout()).unwrap();
    let full = schema("inspect-v1.schema.json");
    let mut top_schema = full["$defs"]["top"].clone();
    top_schema["$defs"] = full["$defs"].clone();
    validate_with(&v, &top_schema);
    assert_eq!(v["ranked_by"], "rss");
    let procs = v["processes"].as_array().unwrap();
    let rss: Vec<u64> = procs
        .iter()
        .map(|p| p["rss_bytes"].as_u64().unwrap())
        .collect();
    assert!(
        rss.windows(2).all(|w| w[0] >= w[1]),
        "sorted by RSS: {rss:?}"
    );
    let me = procs
        .iter()
        .find(|e| e["pid"] == p.pid())
        .unwrap_or_else(|| panic!("fixture {} not listed", p.pid()));
    assert_eq!(me["allocator"], "glibc");
    assert_eq!(me["threads"], 9);
    assert_eq!(me["glibc_arenas"].as_u64().unwrap(), p.value("arenas"));
    assert_eq!(me["arenas_method"], "exact");
    // Text, ranked by PSS, a few lines.
    let r = memtrial_in_tmp(&["inspect", "--top", "3", "--by", "pss"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(r.stdout().contains("3 largest of"), "{}", r.stdout());
    assert!(r.stdout().contains("ranked by PSS"), "{}", r.stdout());
    // Processes come and go during a scan: many scans, never a failure.
    let churn = live(
        Path::new("sh"),
        &["-c", "echo ready; while :; do /bin/true; done"],
        &[],
    );
    for _ in 0..5 {
        let r = memtrial_in_tmp(&["inspect", "--top", "200"]);
        assert_eq!(r.code(), 0, "{}", r.stderr());
    }
    drop(churn);
}

#[test]
fn inspect_without_ptrace_rights_says_what_is_needed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv to inspect a root process as nobody");
        return;
    }
    let p = live(&fixture("arenas"), &["2", "20"], &[]);
    // A copy of the binary that nobody may run.
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("memtrial");
    std::fs::copy(memtrial(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |extra: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(["inspect", &p.pid().to_string()])
            .args(extra)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .output()
            .expect("setpriv")
    };
    let out = run(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    validate_schema(&v, "inspect-v1.schema.json");
    assert_eq!(v["complete"], false);
    let a = &v["access"];
    assert_eq!(a["our_uid"], 65534);
    assert_eq!(a["owner_uid"], 0);
    let denied: Vec<&str> = a["denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(denied.contains(&"/proc/PID/smaps"), "{denied:?}");
    let hint = a["hint"].as_str().unwrap();
    assert!(
        hint.contains("ptrace-read") && hint.contains("as root") && hint.contains("UID 0"),
        "{hint}"
    );
    // What status gives stays: RSS and threads.
    assert!(v["rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["threads"], 3);
    let out = run(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Access "), "{text}");
    assert!(text.contains("Allocator unknown"), "{text}");
}
