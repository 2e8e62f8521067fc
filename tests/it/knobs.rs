//! The knobs (issue 40) on real processes: transparent huge pages off for the process and on
//! for the heap, glibc's tunables, trimming, jemalloc's arenas under a CPU quota, CPython's
//! pymalloc beside a preload. Each test checks that the knob took effect inside the process
//! (as memtrial verified it) and that the figure it moves moved. The fixture is
//! `tests/fixtures/c/knobs.c`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;
use crate::exporter::{http_get, series, start_exporter, Killed};

fn s(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// Huge pages go only where a program asks for them here: the knobs' effect is then seen.
fn need_thp_madvise() -> bool {
    need_c_compiler()
        && require(
            "transparent huge pages in madvise mode",
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
            || memtrial::linux::thp::host_mode().is_some_and(|m| m.enabled == "madvise"),
        )
}

/// glibc's full symbol table: what its tunables are verified with.
fn need_libc_symbols() -> bool {
    need_file("/usr/lib/debug/.build-id", "libc6-dbg")
}

fn run_of<'a>(doc: &'a Value, name: &str) -> &'a Value {
    first_run_json(doc, name)
}

fn anon_huge(run: &Value) -> u64 {
    run["inside"]["thp"]["peak_anon_huge_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no AnonHugePages in {}", run["inside"]))
}

/// `thp:off` (prctl at spawn), glibc's `hugetlb=1` and jemalloc's `thp:always`, each
/// verified inside the process; a sparse 32 MiB block is ~32 MiB resident with huge pages
/// and a few hundred KiB without.
#[test]
fn huge_pages_off_and_on_are_verified_and_move_rss() {
    if !(need_thp_madvise() && need_libc_symbols() && need_allocators(&["jemalloc"])) {
        return;
    }
    let knobs = s(&fixture("knobs"));
    let r = run_json(
        1,
        "glibc,glibc-thp,nothp,jemalloc-thp,both",
        &["--variant", "both=thp:off tunable:hugetlb=1"],
        &[&knobs, "sparse", "32", "600"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let detail = |n: &str| {
        run_of(&doc, n)["verification_detail"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    for n in ["glibc-thp", "nothp", "jemalloc-thp", "both"] {
        assert_eq!(
            run_of(&doc, n)["verification"],
            "verified",
            "{n}: {}",
            r.explain()
        );
    }
    assert!(
        detail("nothp").contains("THP_enabled: 0"),
        "{}",
        detail("nothp")
    );
    assert!(
        detail("glibc-thp").contains("thp_pagesize") && detail("glibc-thp").contains("madvised"),
        "{}",
        detail("glibc-thp")
    );
    assert!(
        detail("jemalloc-thp").contains("madvised"),
        "{}",
        detail("jemalloc-thp")
    );
    assert!(
        detail("both").contains("THP_enabled: 0"),
        "{}",
        detail("both")
    );
    const MIB: u64 = 1 << 20;
    let peak = |n: &str| run_of(&doc, n)["peak_rss_bytes"].as_u64().unwrap();
    // The figure the knobs move: resident memory, and its share in huge pages.
    for n in ["glibc-thp", "jemalloc-thp"] {
        assert!(peak(n) > 24 * MIB, "{n}: peak {}", peak(n));
        assert!(
            anon_huge(run_of(&doc, n)) >= 16 * MIB,
            "{n}: {}",
            run_of(&doc, n)["inside"]
        );
    }
    for n in ["glibc", "nothp", "both"] {
        assert!(peak(n) < 8 * MIB, "{n}: peak {}", peak(n));
        assert_eq!(anon_huge(run_of(&doc, n)), 0, "{n}");
    }
    let host = &run_of(&doc, "glibc")["inside"]["thp"]["host"];
    assert_eq!(host["enabled"], "madvise", "{host}");
    // The regions near the peak carry the huge pages by kind.
    if let Some(by) = run_of(&doc, "glibc-thp")["regions"]["anon_huge_by_kind"].as_object() {
        assert!(
            by.values().filter_map(Value::as_u64).sum::<u64>() >= 16 * MIB,
            "{by:?}"
        );
    }
    let out = r.stdout();
    assert!(
        out.contains("transparent huge pages (host: enabled madvise"),
        "{out}"
    );
}

/// Tunables are merged into one GLIBC_TUNABLES and read back from glibc itself; a value
/// glibc refuses makes the run not effective, saying what glibc runs with; without the
/// symbols they are set, not verifiable. `mmap_threshold` below the fixture's blocks moves
/// them into mappings of their own, which their free returns: the resident memory falls.
#[test]
fn tunables_are_verified_inside_glibc_and_move_what_they_govern() {
    if !(need_c_compiler() && need_libc_symbols()) {
        return;
    }
    let knobs = s(&fixture("knobs"));
    let r = run_json(
        1,
        "glibc,mm,refused",
        &[
            "--variant",
            "mm=tunable:mmap_threshold=4000 tunable:trim_threshold=64K tunable:tcache_count=0",
            "--variant",
            "refused=tunable:tcache_max=4096",
        ],
        &[&knobs, "trim", "64", "800"],
    );
    assert_eq!(
        r.code(),
        1,
        "a not-effective run fails the experiment: {}",
        r.explain()
    );
    let doc = r.json();
    let mm = run_of(&doc, "mm");
    assert_eq!(mm["verification"], "verified", "{}", r.explain());
    let d = mm["verification_detail"].as_str().unwrap();
    assert!(
        d.contains("glibc.malloc.mmap_threshold=4000:glibc.malloc.trim_threshold=65536:glibc.malloc.tcache_count=0 in environ")
            && d.contains("glibc's mmap_threshold is 4000")
            && d.contains("glibc's trim_threshold is 65536")
            && d.contains("glibc's tcache_count is 0"),
        "{d}"
    );
    let refused = run_of(&doc, "refused");
    assert_eq!(refused["status"], "variant_not_effective", "{refused}");
    assert!(
        refused["verification_detail"]
            .as_str()
            .unwrap()
            .contains("tcache_max_bytes is 1032, not 4096"),
        "{refused}"
    );
    let last = |n: &str| run_of(&doc, n)["final_rss_bytes"].as_u64().unwrap();
    assert!(
        last("mm") * 3 < last("glibc"),
        "mmap_threshold moves the freed blocks out: {} vs {}",
        last("mm"),
        last("glibc")
    );
    // Without glibc's symbols: set, not verifiable — never verified.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(memtrial())
        .args([
            "run",
            "--runs",
            "1",
            "--variant",
            "tt=tunable:trim_threshold=64K",
            "--variants",
            "tt",
            "--json",
            "out.json",
            "--",
            &knobs,
            "sparse",
            "1",
            "200",
        ])
        .current_dir(dir.path())
        .env("MEMTRIAL_DEBUG_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json_in(dir.path());
    let tt = run_of(&doc, "tt");
    assert_eq!(tt["verification"], "set_not_verifiable", "{tt}");
    assert!(
        tt["verification_detail"]
            .as_str()
            .unwrap()
            .contains("libc6-dbg"),
        "{tt}"
    );
}

/// `trim:` calls malloc_trim(0) from the probe library's own thread: the pages freed
/// between live blocks go back, the calls and their CPU are counted, and the report says so.
#[test]
fn trimming_returns_freed_pages_and_counts_its_cost() {
    if !need_c_compiler() {
        return;
    }
    let knobs = s(&fixture("knobs"));
    let r = run_json(
        1,
        "glibc,trim",
        &["--variant", "t300=trim:300ms"],
        &[&knobs, "trim", "100", "1500"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    for n in ["trim", "t300"] {
        let run = run_of(&doc, n);
        assert_eq!(run["verification"], "verified", "{n}: {}", r.explain());
        assert!(
            run["verification_detail"]
                .as_str()
                .unwrap()
                .contains("call(s) of malloc_trim(0)"),
            "{run}"
        );
        let t = &run["inside"]["trim"];
        assert!(t["trims"].as_u64().unwrap() >= 1, "{t}");
        assert!(t["returned_bytes"].as_u64().unwrap() > 60 << 20, "{t}");
        assert!(t["cpu_seconds"].as_f64().unwrap() > 0.0, "{t}");
        let last = run["final_rss_bytes"].as_u64().unwrap();
        let base = run_of(&doc, "glibc")["final_rss_bytes"].as_u64().unwrap();
        assert!(last * 3 < base, "{n}: final RSS {last} vs glibc's {base}");
    }
    assert!(
        run_of(&doc, "t300")["inside"]["trim"]["trims"]
            .as_u64()
            .unwrap()
            >= 3,
        "{}",
        run_of(&doc, "t300")["inside"]["trim"]
    );
    let out = r.stdout();
    assert!(out.contains("t300: malloc_trim(0) every 300ms:"), "{out}");
    // A schedule longer than the run: set, not verifiable.
    let r = run_json(
        1,
        "slow",
        &["--variant", "slow=trim:1h"],
        &[&knobs, "sparse", "1", "200"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    assert_eq!(
        run_of(&doc, "slow")["verification"],
        "set_not_verifiable",
        "{}",
        r.explain()
    );
}

/// `inspect` says what a trim could return from a live glibc process, and trims nothing:
/// the process's resident memory is the same after.
#[test]
fn inspect_says_what_a_trim_could_return_without_trimming() {
    if !need_c_compiler() {
        return;
    }
    let mut child = Command::new(fixture("knobs"))
        .args(["trim", "100", "30000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let child = Killed(child);
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    assert!(line.starts_with("kept "), "{line}");
    let rss = |pid: i32| crate::exporter::status_field(pid, "VmRSS");
    let before = rss(child.pid());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("i.json");
    let o = Command::new(memtrial())
        .args(["inspect", &child.pid().to_string(), "--json", &s(&json)])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ins: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = &ins["trimmable"];
    assert!(t["bytes"].as_u64().unwrap() > 80 << 20, "{t}");
    // 31 of each 32 blocks freed and merged: 800 free chunks of 124 KiB.
    assert!(t["free_chunks"].as_u64().unwrap() >= 500, "{t}");
    let after = rss(child.pid());
    assert!(
        after + (2 << 10) >= before,
        "nothing trimmed: {before} kB then {after} kB"
    );
    let text = Command::new(memtrial())
        .args(["inspect", &child.pid().to_string()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("malloc_trim(0) could give back"), "{text}");
    assert!(text.contains("nothing was trimmed"), "{text}");
    drop(child);
}

/// `inspect --trim` asks the probe library preloaded with `MEMTRIAL_TRIM_DIR` for one
/// `malloc_trim(0)` and says what it returned; a process without it is refused, untouched.
#[test]
fn inspect_trim_asks_the_probe_library_and_says_what_it_returned() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libmemtrial-probe.so");
    let o = Command::new(memtrial())
        .args(["probe-library", "--out", &s(&lib)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trim_dir = dir.path().join("trim");
    std::fs::create_dir(&trim_dir).unwrap();
    let start = |env: &[(&str, String)]| {
        let mut c = Command::new(fixture("knobs"))
            .args(["trim", "100", "30000"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = c.stdout.take().unwrap();
        let c = Killed(c);
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).unwrap();
        c
    };
    let p = start(&[("LD_PRELOAD", s(&lib)), ("MEMTRIAL_TRIM_DIR", s(&trim_dir))]);
    let json = dir.path().join("i.json");
    let o = Command::new(memtrial())
        .args([
            "inspect",
            &p.pid().to_string(),
            "--trim",
            "--json",
            &s(&json),
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ins: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = &ins["trimmed"];
    let returned =
        t["resident_before_bytes"].as_u64().unwrap() - t["resident_after_bytes"].as_u64().unwrap();
    assert!(returned > 80 << 20, "{t}");
    let estimate = ins["trimmable"]["bytes"].as_u64().unwrap();
    assert!(
        estimate as f64 > 0.8 * returned as f64 && (estimate as f64) < 1.2 * returned as f64,
        "the estimate read before ({estimate}) is what the call returned ({returned})"
    );
    assert!(crate::exporter::status_field(p.pid(), "VmRSS") < 40 << 10);
    drop(p);
    let plain = start(&[]);
    let o = Command::new(memtrial())
        .args(["inspect", &plain.pid().to_string(), "--trim"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("never trims a process from outside"), "{err}");
    assert!(crate::exporter::status_field(plain.pid(), "VmRSS") > 90 << 10);
    drop(plain);
    // MEMTRIAL_TRIM_DIR without the library: nobody takes the request, which is taken back.
    let deaf = start(&[("MEMTRIAL_TRIM_DIR", s(&trim_dir))]);
    let o = Command::new(memtrial())
        .args(["inspect", &deaf.pid().to_string(), "--trim"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("did not take the request"), "{err}");
    assert!(
        !trim_dir.join(format!("{}.request", deaf.pid())).exists(),
        "the request is taken back"
    );
    assert!(crate::exporter::status_field(deaf.pid(), "VmRSS") > 90 << 10);
}

/// jemalloc under a CPU quota of half a CPU: its default arenas (4 per CPU it sees) are the
/// pitfall, said by the run's notes, by `inspect` and by the exporter, each with
/// `MALLOC_CONF=narenas:4`; with `narenas:4` set there is none.
#[test]
fn jemalloc_arenas_sized_for_the_host_are_flagged_under_a_quota() {
    let online = memtrial::linux::host::online_cpus();
    if !(need_c_compiler()
        && need_allocators(&["jemalloc"])
        && need_root("it makes a cgroup with a CPU quota")
        && require(
            "2 or more online CPUs",
            "jemalloc's 4 arenas per CPU reach twice a half CPU's only then",
            || online >= 2,
        ))
    {
        return;
    }
    // The run's notes, before any run.
    let knobs = s(&fixture("knobs"));
    let r = run_with(
        1,
        "jemalloc",
        &["--cpus", "0.5"],
        &[&knobs, "sparse", "1", "100"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let said = r.stderr();
    assert!(
        said.contains(&format!("jemalloc will make {} arenas", 4 * online))
            && said.contains("MALLOC_CONF=narenas:4"),
        "{said}"
    );
    let mut group = None;
    if !require(
        "a cpu cgroup controller (v1 or v2)",
        "this machine's cgroup layout decides it",
        || {
            group = QuotaGroup::create("knobs", 50_000);
            group.is_some()
        },
    ) {
        return;
    }
    let group = group.expect("created");
    let dir = tempfile::tempdir().unwrap();
    let id = std::process::id();
    let start = |name: &str, env: &[(&str, &str)]| {
        let p = dir.path().join(name);
        std::fs::copy(fixture("knobs"), &p).unwrap();
        let mut c = Command::new(&p)
            .args(["sparse", "1", "60000"])
            .env("LD_PRELOAD", JEMALLOC)
            .env_remove("MALLOC_CONF")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = c.stdout.take().unwrap();
        let c = Killed(c);
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).unwrap();
        group.add(c.pid());
        c
    };
    let (dflt, sized) = (format!("kjd{id}"), format!("kjs{id}"));
    let d = start(&dflt, &[]);
    let n = start(&sized, &[("MALLOC_CONF", "narenas:4")]);
    let exporter = start_exporter(&memtrial(), &["--match", &format!("^kj[ds]{id}$")], &[]);
    let (code, text) = http_get(exporter.addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{text}");
    let get = |metric: &str, g: &str| series(&text, &format!("{metric}{{group=\"{g}\"}}"));
    assert_eq!(
        get("memtrial_group_jemalloc_arenas", &dflt),
        Some(f64::from(4 * online)),
        "{text}"
    );
    assert_eq!(
        get("memtrial_group_arena_pitfall", &dflt),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        get("memtrial_group_jemalloc_arenas", &sized),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        get("memtrial_group_arena_pitfall", &sized),
        Some(0.0),
        "{text}"
    );
    drop(exporter);
    let o = Command::new(memtrial())
        .args(["inspect", &d.pid().to_string()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains(&format!("{} jemalloc arenas", 4 * online))
            && text.contains("set MALLOC_CONF=narenas:4"),
        "{text}"
    );
    drop((d, n));
    drop(group);
}

/// CPython with a preloaded jemalloc and pymalloc on: said, with PYTHONMALLOC=malloc to try;
/// with it, the small objects reach jemalloc (its live bytes grow), and the recommendation
/// names the combination it measured.
#[test]
fn cpython_beside_a_preload_is_told_apart() {
    if !(need_python3() && need_allocators(&["jemalloc"])) {
        return;
    }
    let script = "import time\nx = [(i, str(i)) for i in range(300000)]\ntime.sleep(0.5)\n";
    let r = run_json(
        1,
        "glibc,jemalloc,je-pyoff",
        &["--variant", "je-pyoff=preload:jemalloc PYTHONMALLOC=malloc"],
        &["python3", "-c", script],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let said = r.stderr();
    assert!(said.contains("the workload is CPython"), "{said}");
    let doc = r.json();
    let py = |n: &str| run_of(&doc, n)["inside"]["python"].clone();
    assert!(
        py("jemalloc")["executable"]
            .as_str()
            .unwrap()
            .contains("python3"),
        "{}",
        py("jemalloc")
    );
    assert!(
        py("jemalloc").get("pythonmalloc").is_none(),
        "{}",
        py("jemalloc")
    );
    assert_eq!(py("je-pyoff")["pythonmalloc"], "malloc");
    let live = |n: &str| {
        run_of(&doc, n)["inside"]["allocator"]["peak_live_bytes"]
            .as_u64()
            .unwrap_or(0)
    };
    assert!(
        live("je-pyoff") > 2 * live("jemalloc"),
        "PYTHONMALLOC=malloc hands the small objects to jemalloc: {} vs {}",
        live("je-pyoff"),
        live("jemalloc")
    );
    let out = r.stdout();
    assert!(
        out.contains("pymalloc serves objects up to 512 bytes"),
        "{out}"
    );
}

/// `memtrial variants` lists the knobs with what each needs; a bad knob is refused naming it.
#[test]
fn variants_lists_the_knobs_and_bad_knobs_are_refused() {
    let r = memtrial_in_tmp(&["variants"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = r.stdout();
    for n in [
        "nothp",
        "glibc-thp",
        "jemalloc-thp",
        "trim",
        "needs",
        "glibc 2.35+",
    ] {
        assert!(out.contains(n), "{n} in:\n{out}");
    }
    let r = run_with(1, "glibc", &["--variant", "x=tunable:nope=1"], &["true"]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("glibc has no malloc tunable 'nope'"),
        "{}",
        r.stderr()
    );
    let r = run_with(
        1,
        "glibc",
        &["--variant", "x=preload:jemalloc trim:1s"],
        &["true"],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(r.stderr().contains("preloads jemalloc"), "{}", r.stderr());
}
