//! Shared helpers: the binary, a temporary working directory per test, schemas, fixtures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

pub use memtrial::record::{PeakSource, RunRecord, RunStatus, Verification};
use serde_json::Value;

pub fn memtrial() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memtrial"))
}

pub struct Run {
    pub out: Output,
    pub dir: tempfile::TempDir,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// stderr plus each run's status and verification detail, for failure messages.
    pub fn explain(&self) -> String {
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

    /// The JSON document the command wrote to `name` in its directory.
    pub fn json_file(&self, name: &str) -> Value {
        let p = self.dir.path().join(name);
        if !p.exists() {
            panic!("no {}\nstderr:\n{}", p.display(), self.stderr());
        }
        read_json(&p)
    }

    pub fn json(&self) -> Value {
        if !self.dir.path().join("out.json").exists() {
            panic!("no out.json\nstderr:\n{}", self.stderr());
        }
        json_in(self.dir.path())
    }
}

/// The experiment's JSON record a run wrote to `DIR/out.json`, checked against its schema.
pub fn json_in(dir: &Path) -> Value {
    let v = read_json(&dir.join("out.json"));
    validate_schema(&v, "experiment-v4.schema.json");
    v
}

/// A JSON document a command wrote.
fn read_json(p: &Path) -> Value {
    let text =
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("no JSON at {}: {e}", p.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

/// Runs memtrial in a fresh directory with its own database.
pub fn memtrial_in_tmp(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(memtrial())
        .args(args)
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial");
    Run { out, dir }
}

/// `memtrial run --runs RUNS --variants VARIANTS MORE… -- COMMAND…` in a fresh directory:
/// the form most tests run, written once.
pub fn run_with(runs: u32, variants: &str, more: &[&str], command: &[&str]) -> Run {
    let args = run_args(runs, variants, more, command);
    memtrial_in_tmp(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The arguments of [`run_with`], for tests that start memtrial their own way (as another
/// user, under a watchdog, to stop it midway). With `--detail`: tests read every section
/// of the report (the default, one screen, has tests of its own in reports.rs).
pub fn run_args(runs: u32, variants: &str, more: &[&str], command: &[&str]) -> Vec<String> {
    let runs = runs.to_string();
    let mut args = vec!["run", "--detail", "--runs", &runs, "--variants", variants];
    args.extend_from_slice(more);
    args.push("--");
    args.extend_from_slice(command);
    args.into_iter().map(String::from).collect()
}

/// The arguments of [`run_json`]: [`run_args`] that write the record to `out.json` (read
/// back by [`json_in`]).
pub fn run_json_args(runs: u32, variants: &str, more: &[&str], command: &[&str]) -> Vec<String> {
    run_args(
        runs,
        variants,
        &[&["--json", "out.json"], more].concat(),
        command,
    )
}

/// [`run_with`] that also writes the JSON record to `out.json` (read back by [`Run::json`]).
pub fn run_json(runs: u32, variants: &str, more: &[&str], command: &[&str]) -> Run {
    let args = run_json_args(runs, variants, more, command);
    memtrial_in_tmp(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The JSON Schema `docs/schema/NAME`.
pub fn schema(name: &str) -> Value {
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/schema")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap()
}

/// Validates `v` against the schema `docs/schema/NAME`.
pub fn validate_schema(v: &Value, name: &str) {
    validate_with(v, &schema(name));
}

pub fn validate_with(v: &Value, schema: &Value) {
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
pub fn fixture(name: &str) -> PathBuf {
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

pub fn variant<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("variant {name} missing"))
}

/// A variant's runs as the record's own types, read as `memtrial import` reads them
/// (`record::wire`): a renamed or retyped field breaks the build, not a string lookup.
/// Unlike import, which never takes another machine's paths, these runs ran here: their
/// output's paths are kept.
pub fn typed_runs(doc: &Value, name: &str) -> Vec<RunRecord> {
    variant(doc, name)["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|v| typed(name, v))
        .collect()
}

/// One run's JSON as a [`RunRecord`] of variant `name` (see [`typed_runs`]).
pub fn typed(name: &str, v: &Value) -> RunRecord {
    let r: memtrial::record::wire::RunIn = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("a run of {name} as the record's type: {e}\n{v}"));
    let mut run = memtrial::record::wire::record_of(name, r).unwrap_or_else(|e| panic!("{e}"));
    let path = |key: &str| PathBuf::from(v[key].as_str().unwrap_or_else(|| panic!("{key}: {v}")));
    run.stdout_path = path("stdout_path");
    run.stderr_path = path("stderr_path");
    run
}

/// Run `i` of variant `name`, typed.
pub fn typed_run(doc: &Value, name: &str, i: usize) -> RunRecord {
    typed(name, &variant(doc, name)["runs"][i])
}

/// The first run of variant `name`, typed.
pub fn first_run(doc: &Value, name: &str) -> RunRecord {
    typed_run(doc, name, 0)
}

/// A run's driven phase and its driver's figures (a worker or a service run).
pub fn driver_of(run: &RunRecord) -> &memtrial::record::DriverFigures {
    run.driver
        .as_ref()
        .unwrap_or_else(|| panic!("no driver figures: {run:?}"))
}

/// A server run's load figures.
pub fn load_of(run: &RunRecord) -> &memtrial::record::LoadFigures {
    run.load
        .as_ref()
        .unwrap_or_else(|| panic!("no load figures: {run:?}"))
}

/// A run's cgroup figures (it ran in a cgroup of memtrial's).
pub fn cgroup_of(run: &RunRecord) -> &memtrial::linux::cgroup::CgroupFigures {
    run.cgroup
        .as_ref()
        .unwrap_or_else(|| panic!("no cgroup figures: {run:?}"))
}

/// The first run of variant `name` as the JSON has it: for tests of the record's shape.
pub fn first_run_json<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &variant(doc, name)["runs"][0]
}

/// Every run of the document, typed, with its variant's name.
pub fn all_runs(doc: &Value) -> Vec<RunRecord> {
    doc["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .flat_map(|v| typed_runs(doc, v["name"].as_str().expect("name")))
        .collect()
}

/// The names of the document's variants, in its order.
pub fn variant_names(doc: &Value) -> Vec<&str> {
    doc["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .map(|v| v["name"].as_str().expect("name"))
        .collect()
}

/// A part of a JSON document read as memtrial's own type `T` (such as `inspect --json`'s
/// parts, `memtrial::inspect::Memory`): the read must succeed and give back the same JSON,
/// every field `T` writes present in `v` with the same value, so a field renamed on either
/// side fails here (and a test naming it fails to build).
pub fn typed_part<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> T {
    let what = std::any::type_name::<T>();
    let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v}"));
    match serde_json::to_value(&t).expect("serializes") {
        Value::Object(back) => {
            for (k, x) in &back {
                assert_eq!(v.get(k), Some(x), "{what}.{k} read back differs:\n{v}");
            }
        }
        back => assert_eq!(&back, v, "{what} read back differs"),
    }
    t
}

// ───────────── experiment-level figures (the report's analysis: left as JSON) ─────────────

/// Variant `name`'s summary (medians, ratios, verdicts): the report's analysis, whose
/// types borrow from the experiment and so are read as JSON.
pub fn summary<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &variant(doc, name)["summary"]
}

/// The median of figure `fig` of variant `name` (`null` when it has none).
pub fn median<'a>(doc: &'a Value, name: &str, fig: &str) -> &'a Value {
    &summary(doc, name)[fig]["median"]
}

/// Variant `name`'s ratio to the baseline for figure `fig` (`value`, `ci95`, `significant`).
pub fn ratio<'a>(doc: &'a Value, name: &str, fig: &str) -> &'a Value {
    &summary(doc, name)["ratio_to_baseline"][fig]
}

/// Variant `name`'s leak-or-fragmentation verdict (`verdict`, `sentence`, …).
pub fn why<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &summary(doc, name)["why"]
}

/// Variant `name`'s leak-or-plateau trend.
pub fn trend<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &summary(doc, name)["trend"]
}

pub fn no_process_matching(pattern: &str) -> bool {
    let out = Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .expect("pgrep");
    out.stdout.is_empty()
}

pub const FRAGMENT_SHORT: [&str; 6] = ["--threads", "4", "--seconds", "0.6", "--seed", "7"];

pub fn fragment_cmd() -> Vec<String> {
    let mut v = vec![
        memtrial().display().to_string(),
        "workload".into(),
        "fragment".into(),
    ];
    v.extend(FRAGMENT_SHORT.iter().map(|s| s.to_string()));
    v
}

// ───────────── requirements: skip with a reason, or fail under MEMTRIAL_TEST_STRICT=1 ─────────────

#[path = "../../src/testing.rs"]
mod testing;
pub use testing::require;

/// Reading an SVG chart back: its lines in the units of its time axis.
#[path = "../../src/report/svg_check.rs"]
pub mod svg_check;

fn runs(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A program on PATH (answers `--version`), from a Debian package.
pub fn need_program(cmd: &str, package: &str) -> bool {
    require(
        cmd,
        &format!("install with: apt-get install {package}"),
        || runs(cmd),
    )
}

/// A file a package installs, such as an allocator library.
pub fn need_file(path: &str, package: &str) -> bool {
    require(
        path,
        &format!("install with: apt-get install {package}"),
        || Path::new(path).exists(),
    )
}

pub fn need_python3() -> bool {
    need_program("python3", "python3")
}

/// The C fixtures are built with gcc against libc6-dev (static and dynamic).
pub fn need_c_compiler() -> bool {
    need_program("gcc", "gcc libc6-dev")
        && need_file("/usr/lib/x86_64-linux-gnu/libc.a", "libc6-dev")
}

pub const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
pub const TCMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";
pub const MIMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2";

/// The allocator libraries the named variants preload.
pub fn need_allocators(names: &[&str]) -> bool {
    names.iter().all(|n| match *n {
        "jemalloc" => need_file(JEMALLOC, "libjemalloc2"),
        "tcmalloc" => need_file(TCMALLOC, "libtcmalloc-minimal4"),
        "mimalloc" => need_file(MIMALLOC, "libmimalloc2.0"),
        _ => true,
    })
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn need_root(why: &str) -> bool {
    require(&format!("root ({why})"), "run the tests as root", is_root)
}

/// The cgroup layout memtrial would use, or `None` when the machine gives none (not
/// root, or no cgroup file system): skipped with the reason, or a failure when strict.
pub fn need_cgroups() -> Option<memtrial::linux::cgroup::Hierarchy> {
    if !need_root("memtrial makes a cgroup per run only as root") {
        return None;
    }
    let mut found = None;
    require(
        "a cgroup file system",
        "mount cgroup v1 or v2 under /sys/fs/cgroup",
        || {
            found = memtrial::linux::cgroup::detect().ok();
            found.is_some()
        },
    );
    found
}

/// memtrial stopped by `sig` mid-run (a `sleep SECONDS` workload): exit 130, the workload
/// gone, the experiment and the run in flight recorded as interrupted.
pub fn stop_signal_keeps_runs_and_leaves_nothing(sig: i32, seconds: &str) {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("sleep {seconds}");
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
        ])
        .arg(&marker)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: sending a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(no_process_matching(&marker));
    let report = Command::new(memtrial())
        .args(["report", "--json", "-"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&report.stdout).unwrap();
    validate_schema(&doc, "experiment-v4.schema.json");
    assert_eq!(doc["experiment"]["status"], "interrupted");
    assert_eq!(first_run(&doc, "glibc").status, RunStatus::Interrupted);
}

/// Removes the cgroups in `dir` that an earlier run of the suite made and could not remove
/// because it was killed: those `owner` reads a test process's PID from, when that process
/// is gone. Their processes are killed first; each removal is said on stderr.
pub fn remove_groups_of_killed_runs(dir: &Path, owner: impl Fn(&str) -> Option<u32>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
    {
        let Some(pid) = owner(&e.file_name().to_string_lossy()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let group = e.path();
        let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
        for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&group).is_ok() || !group.exists() {
                eprintln!(
                    "removed cgroup {}, left by a killed run of the suite",
                    group.display()
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The PID in a name `<prefix><pid>`.
pub fn pid_after(prefix: &str) -> impl Fn(&str) -> Option<u32> + '_ {
    move |name| name.strip_prefix(prefix)?.parse().ok()
}

// ───────────── several hosts on this machine (import) ─────────────

/// A `cpu` cgroup of the tests' own, with a CPU quota; when dropped, the processes still in
/// it go back to its parent and it is removed with what memtrial made inside it.
pub struct QuotaGroup {
    pub dir: PathBuf,
    /// Where its processes go back to.
    parent_procs: PathBuf,
}

impl QuotaGroup {
    /// `/sys/fs/cgroup/cpu/memtrial-it-<name>-<pid>` with `cpu.cfs_quota_us` = `quota_us`
    /// (period 100 ms); `None` (skipped, or a failure when strict) without root or a v1
    /// cpu hierarchy.
    pub fn new(name: &str, quota_us: u64) -> Option<QuotaGroup> {
        if !need_root("a cgroup with a CPU quota for the second host") {
            return None;
        }
        let root = Path::new("/sys/fs/cgroup/cpu");
        if !require(
            "a cgroup v1 cpu hierarchy",
            "mount the v1 cpu controller at /sys/fs/cgroup/cpu",
            || root.join("cpu.cfs_quota_us").exists(),
        ) {
            return None;
        }
        let g = QuotaGroup::create(name, quota_us).expect("create the test cgroup");
        assert!(
            g.parent_procs.starts_with(root),
            "a v1 group: {}",
            g.dir.display()
        );
        Some(g)
    }

    /// `memtrial-it-<name>-<pid>` with `quota_us` per 100 ms, in the v1 cpu hierarchy if
    /// there is one, else at the top of a v2 hierarchy with the cpu controller; `None`
    /// when neither is there or the group cannot be made.
    pub fn create(name: &str, quota_us: u64) -> Option<QuotaGroup> {
        let prefix = format!("memtrial-it-{name}-");
        let name = format!("{prefix}{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        if v1.join("cpu.cfs_quota_us").exists() {
            remove_groups_of_killed_runs(v1, pid_after(&prefix));
            let g = QuotaGroup {
                dir: v1.join(name),
                parent_procs: v1.join("cgroup.procs"),
            };
            std::fs::create_dir_all(&g.dir).ok()?;
            std::fs::write(g.dir.join("cpu.cfs_period_us"), "100000").ok()?;
            std::fs::write(g.dir.join("cpu.cfs_quota_us"), quota_us.to_string()).ok()?;
            return Some(g);
        }
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            return None;
        }
        let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+cpu");
        remove_groups_of_killed_runs(v2, pid_after(&prefix));
        let g = QuotaGroup {
            dir: v2.join(name),
            parent_procs: v2.join("cgroup.procs"),
        };
        std::fs::create_dir_all(&g.dir).ok()?;
        std::fs::write(g.dir.join("cpu.max"), format!("{quota_us} 100000")).ok()?;
        Some(g)
    }

    /// Moves process `pid` into the group.
    pub fn add(&self, pid: i32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).expect("move into cgroup");
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(&self.parent_procs, pid);
            }
        }
        // Deepest groups first: memtrial's own groups live inside this one.
        let mut dirs = Vec::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// `memtrial ARGS` in `dir`, as another machine: in a UTS namespace whose hostname is
/// `hostname`, inside `group` (its CPU quota is the host's own limit).
pub fn memtrial_as_host(dir: &Path, hostname: &str, group: &QuotaGroup, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(
            "echo $$ > \"$0/cgroup.procs\" && exec unshare --uts sh -c 'hostname \"$0\" && exec \"$@\"' \"$@\"",
        )
        .arg(&group.dir)
        .arg(hostname)
        .arg(memtrial())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("MEMTRIAL_HOST")
        .output()
        .expect("run memtrial in a UTS namespace")
}
