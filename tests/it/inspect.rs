//! `memtrial inspect` on live processes: arenas, allocators, quotas, maps, trees.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use memtrial::inspect::{
    Access, Allocator, Host, MappingTotals, Memory, Process, Sample, WatchEnd,
};

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

/// The document's parts whose types read back (`memtrial::inspect`'s model); the rest
/// (arenas, advice, mappings, cgroup, glibc, tree, trend) are written by types of other
/// modules and stay JSON.
fn memory(v: &Value) -> Memory {
    typed_part(v)
}

fn host(v: &Value) -> Host {
    typed_part(&v["host"])
}

fn allocator(v: &Value) -> Allocator {
    typed_part(&v["allocator"])
}

fn process(v: &Value) -> Process {
    typed_part(&v["process"])
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
    read_back(&v);
    v
}

/// Every part of an inspection whose type reads back does, unchanged (see [`typed_part`]).
fn read_back(v: &Value) {
    let _ = (memory(v), host(v), process(v));
    if !v["allocator"].is_null() {
        let _ = allocator(v);
    }
    if !v["access"].is_null() {
        let _: Access = typed_part(&v["access"]);
    }
    if !v["mapping_totals"].is_null() {
        let _: MappingTotals = typed_part(&v["mapping_totals"]);
    }
    if !v["watch"].is_null() {
        let _: WatchEnd = typed_part(&v["watch"]["end"]);
        let _: Vec<Sample> = typed_part(&v["watch"]["samples"]);
    }
}

#[test]
fn inspect_counts_the_arenas_malloc_info_reports() {
    if !need_c_compiler() {
        return;
    }
    // 20 threads on this machine: glibc's default limit (8 x online CPUs) applies.
    let p = live(&fixture("arenas"), &["20", "20"], &[]);
    let v = inspect_json(p.pid(), &[]);
    let told = p.value("arenas");
    let cpus = host(&v).online_cpus;
    assert_eq!(allocator(&v).name, "glibc");
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
        8 * u64::from(cpus)
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
    let m = memory(&v);
    for (k, n) in [
        ("rss_bytes", Some(m.rss_bytes)),
        ("pss_bytes", m.pss_bytes),
        ("uss_bytes", m.uss_bytes),
        ("vsz_bytes", Some(m.vsz_bytes)),
        ("peak_rss_bytes", Some(m.peak_rss_bytes)),
    ] {
        assert!(n.unwrap() > 0, "{k}");
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
            "{told} arenas on {cpus} CPUs: {}",
            v["advice"]
        );
    }
}

#[test]
fn inspect_sees_malloc_arena_max() {
    if !need_c_compiler() {
        return;
    }
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
    if !(need_c_compiler() && need_allocators(&["jemalloc", "tcmalloc", "mimalloc"])) {
        return;
    }
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
        let a = allocator(&v);
        assert_eq!(a.name, name, "{a:?}");
        assert_eq!(a.ld_preload.as_deref(), Some(lib));
        assert!(a.preload_ignored.is_none(), "{a:?}");
        assert!(
            a.evidence.iter().any(|e| {
                // The loader maps the file the symlink points to.
                e.starts_with(lib) && e.ends_with(" is mapped")
            }),
            "{a:?}"
        );
        assert!(
            v["glibc_arenas"].is_null(),
            "{name}: no glibc arenas to count"
        );
    }
}

#[test]
fn inspect_static_program_ignores_the_preload() {
    if !(need_c_compiler() && need_allocators(&["jemalloc"])) {
        return;
    }
    let p = live(
        &fixture("alloc_loop_static"),
        &["5000"],
        &[("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")],
    );
    let v = inspect_json(p.pid(), &[]);
    let a = allocator(&v);
    assert_eq!(a.name, "glibc (static executable)");
    assert_eq!(a.linkage.as_deref(), Some("static"));
    assert!(a.preload_ignored.unwrap().contains("static"));
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
    if !(need_c_compiler() && need_allocators(&["tcmalloc"])) {
        return;
    }
    let p = live(
        &fixture("own_malloc"),
        &["5000"],
        &[(
            "LD_PRELOAD",
            "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        )],
    );
    let v = inspect_json(p.pid(), &[]);
    let a = allocator(&v);
    assert_eq!(a.name, "custom (the executable defines malloc)");
    assert_eq!(a.defines_malloc, Some(true));
    assert!(a.preload_ignored.unwrap().contains("own malloc"));
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
    if !(need_c_compiler()
        && need_allocators(&["jemalloc"])
        && need_root("it makes a cgroup")
        && require(
            &format!("a cgroup v1 cpu hierarchy at {}", base.display()),
            "this machine's cgroup layout decides it",
            || base.join("cpu.cfs_quota_us").exists(),
        ))
    {
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
    let cpus = host(&v).online_cpus;
    let cpu = &v["cgroup"]["cpu"];
    assert_eq!(v["cgroup"]["cpu_quota_cpus"], 0.5);
    assert_eq!(v["cgroup"]["visible_cpus"], cpus);
    assert_eq!(cpu["version"], "v1");
    assert_eq!(
        cpu["path"],
        format!("/memtrial-test-{}", std::process::id())
    );
    assert_eq!(cpu["quota"]["quota_us"], 50000);
    assert_eq!(cpu["quota"]["cpus"], 0.5);
    // 0.5 CPU is below any online CPU count: glibc's default limit ignores it.
    assert!(cpus >= 1);
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
            v["glibc_arenas"]["count"], v["glibc_arenas"]["limit"], cpus
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
    if !need_c_compiler() {
        return;
    }
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
    if !need_c_compiler() {
        return;
    }
    let p = live(&fixture("alloc_loop_dyn"), &["1200"], &[]);
    let v = inspect_json(p.pid(), &["--watch", "6s", "--interval", "100ms"]);
    let w = &v["watch"];
    assert_eq!(typed_part::<WatchEnd>(&w["end"]), WatchEnd::ProcessExited);
    let n = typed_part::<Vec<Sample>>(&w["samples"]).len();
    assert!((5..=20).contains(&n), "{n} samples in about 1.2 s");
    assert_eq!(v["complete"], false);
    assert!(w["trend"]["verdict"].is_string());
}

#[test]
fn inspect_watch_tells_growth_from_a_plateau() {
    if !(need_python3() && need_c_compiler()) {
        return;
    }
    // Flat: the arenas fixture sleeps after allocating.
    let flat = live(&fixture("arenas"), &["2", "20"], &[]);
    let v = inspect_json(flat.pid(), &["--watch", "2.5s", "--interval", "100ms"]);
    assert_eq!(
        v["watch"]["trend"]["verdict"], "plateau",
        "{}",
        v["watch"]["trend"]
    );
    assert_eq!(
        typed_part::<WatchEnd>(&v["watch"]["end"]),
        WatchEnd::Completed
    );
    // Every sample has RSS, PSS, threads and (glibc) arenas.
    for smp in typed_part::<Vec<Sample>>(&v["watch"]["samples"]) {
        assert!(smp.pss_bytes.unwrap() > 0, "{smp:?}");
        assert_eq!(smp.threads, 3, "{smp:?}");
        assert_eq!(smp.arenas, v["glibc_arenas"]["count"].as_u64(), "{smp:?}");
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
    if !need_c_compiler() {
        return;
    }
    // A process that allocated and now sleeps: its address space holds still.
    let p = live(&fixture("arenas"), &["6", "20"], &[]);
    let v = inspect_json(p.pid(), &["--maps"]);
    let t: MappingTotals = typed_part(&v["mapping_totals"]);
    let (pmap_size, pmap_rss) = pmap_total(p.pid());
    assert_eq!(t.size_bytes, pmap_size, "size vs pmap");
    assert_eq!(t.rss_bytes, pmap_rss, "RSS vs pmap");
    assert_eq!(Some(t.rss_bytes), t.rollup_rss_bytes, "RSS vs smaps_rollup");
    assert_eq!(t.rss_bytes, rollup_rss(p.pid()));
    // PSS per mapping is rounded down to kB; the rollup sums before rounding.
    let (sum, roll) = (t.pss_bytes, t.rollup_pss_bytes.unwrap());
    assert!(sum <= roll && roll - sum <= 1024 * t.mappings);
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
    if !need_c_compiler() {
        return;
    }
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
    if !(need_c_compiler()
        && need_root("it inspects a root process as nobody")
        && need_file("/usr/bin/setpriv", "util-linux"))
    {
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
    read_back(&v);
    assert_eq!(v["complete"], false);
    let a: Access = typed_part(&v["access"]);
    assert_eq!(a.our_uid, 65534);
    assert_eq!(a.owner_uid, Some(0));
    let denied = &a.denied;
    assert!(denied.iter().any(|d| d == "/proc/PID/smaps"), "{denied:?}");
    let hint = &a.hint;
    assert!(
        hint.contains("ptrace-read") && hint.contains("as root") && hint.contains("UID 0"),
        "{hint}"
    );
    // What status gives stays: RSS and threads.
    assert!(memory(&v).rss_bytes > 0);
    assert_eq!(v["threads"], 3);
    let out = run(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Access "), "{text}");
    assert!(text.contains("Allocator unknown"), "{text}");
}

/// A Ruby with YJIT on: inspect names its executable region and suggests a smaller one to
/// measure; the same Ruby without YJIT gets no such advice.
#[test]
fn inspect_suggests_a_smaller_yjit_region_for_a_ruby_with_yjit() {
    if !need_program("ruby", "ruby") {
        return;
    }
    let ruby = Path::new("/usr/bin/ruby");
    let script = "puts 'ready'; $stdout.flush; sleep 30";
    let on = live(ruby, &["--yjit", "-e", script], &[]);
    let v = inspect_json(on.child.id() as i32, &[]);
    let jit: Vec<&Value> = v["advice"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "jit_region")
        .collect();
    assert_eq!(jit.len(), 1, "{:#}", v["advice"]);
    let message = jit[0]["message"].as_str().unwrap();
    assert!(
        message.contains("--yjit-exec-mem-size=32")
            && message.contains("-- /usr/bin/ruby -e 'puts"),
        "{message}"
    );
    assert!(
        jit[0]["evidence"][0]
            .as_str()
            .unwrap()
            .contains("one executable anonymous mapping of 256 MiB"),
        "{:#}",
        jit[0]
    );
    let off = live(ruby, &["-e", script], &[]);
    let v = inspect_json(off.child.id() as i32, &[]);
    assert!(
        v["advice"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["kind"] != "jit_region"),
        "{:#}",
        v["advice"]
    );
}
