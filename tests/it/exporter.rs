//! `memtrial exporter` on the real OS: a real Prometheus scraping it, the arena pitfall in
//! a real cgroup with a CPU quota, bad input, no permission, and the exposition and the
//! alert rules checked by `promtool`. Loopback only; every process started is stopped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A child process killed and reaped when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Killed {
    pub(crate) fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A plain HTTP/1.0 GET on loopback: (status, body).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// The C fixture `arenas` copied under `name`: its comm is `name`, unique to this test, so
/// that other tests' fixtures on the machine never join its group.
fn named_arenas(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(fixture("arenas"), &p).expect("copy the fixture");
    p
}

/// Starts `program THREADS SECONDS` with `env` (and without any inherited arena
/// settings), waits for its "ready"; returns it and its printed `arenas N`.
fn start_arenas(program: &Path, threads: u32, env: &[(&str, &str)]) -> (Killed, u64) {
    let mut child = Command::new(program)
        .args([threads.to_string().as_str(), "120"])
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("GLIBC_TUNABLES")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fixture");
    let out = child.stdout.take().expect("stdout");
    let child = Killed(child);
    let mut arenas = None;
    for line in BufReader::new(out).lines() {
        let line = line.expect("fixture output");
        if let Some(n) = line.strip_prefix("arenas ") {
            arenas = n.trim().parse().ok();
        }
        if line == "ready" {
            break;
        }
    }
    (child, arenas.expect("the fixture printed its arena count"))
}

/// `memtrial exporter` on a free loopback port, ready to serve.
pub(crate) struct Exporter {
    pub(crate) child: Killed,
    pub(crate) addr: SocketAddr,
}

/// The exporter leads a process group of its own (with its wrapper, when a test starts it
/// under one): the whole group goes, so a wrapper's child is not left running after SIGKILL
/// of the wrapper.
impl Drop for Exporter {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the group this test started; no memory is shared.
        unsafe {
            libc::kill(-(self.child.0.id() as i32), libc::SIGKILL);
        }
    }
}

pub(crate) fn start_exporter(program: &Path, args: &[&str], wrap: &[&str]) -> Exporter {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.args(["exporter", "--listen", &addr.to_string()])
        .args(args)
        .current_dir("/")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let child = Killed(cmd.spawn().expect("start the exporter"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(addr, "/").is_err() {
        assert!(Instant::now() < deadline, "the exporter did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    Exporter { child, addr }
}

/// The exporter for the processes named exactly `name`, reading the allocator probe's
/// reports in `probe_dir`.
pub(crate) fn start_probe_exporter(name: &str, probe_dir: &Path) -> Exporter {
    start_exporter(
        &memtrial(),
        &[
            "--match",
            &format!("^{name}$"),
            "--probe-dir",
            &probe_dir.display().to_string(),
        ],
        &[],
    )
}

/// The value of one series (`name{labels}` exactly as exposed) in an exposition.
pub(crate) fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

pub(crate) fn status_field(pid: i32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in status"))
}

pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query to Prometheus: the value of its only sample, once there is one.
pub(crate) fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let (code, body) = http_get(prom, &format!("/api/v1/query?query={}", urlencode(q))).ok()?;
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// Debian's Prometheus on a free loopback port, scraping `target` every second, its data
/// and log (`prometheus.log`) in `dir`.
pub(crate) fn start_prometheus(dir: &Path, target: SocketAddr) -> (Killed, SocketAddr) {
    start_prometheus_with(
        dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: memtrial\n    static_configs:\n      - targets: ['{target}']\n"
        ),
        &[],
    )
}

/// Debian's Prometheus on a free loopback port with `config`, its data (`data/`) and log
/// (`prometheus.log`) in `dir`, and `more` flags.
pub(crate) fn start_prometheus_with(
    dir: &Path,
    config: &str,
    more: &[&str],
) -> (Killed, SocketAddr) {
    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let prom = Killed(
        Command::new("/usr/bin/prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .args(more)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    (prom, prom_addr)
}

/// A command's success, or its output in the failure.
fn assert_ran(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> Option<f64>) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {secs}s");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Prometheus 2 scraping the exporter every second: the series exist and equal what
/// `/proc` says of a glibc program with `MALLOC_ARENA_MAX=2` and 4 threads.
#[test]
fn prometheus_scrapes_the_exporter_and_the_figures_match_proc() {
    if !(need_c_compiler() && need_file("/usr/bin/prometheus", "prometheus")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("mtp{}", std::process::id());
    let (fixture, malloc_info_arenas) = start_arenas(
        &named_arenas(dir.path(), &name),
        4,
        &[("MALLOC_ARENA_MAX", "2")],
    );
    let pid = fixture.pid();
    let exporter = start_exporter(&memtrial(), &["--match", &format!("^{name}$")], &[]);
    let (_prom, prom_addr) = start_prometheus(dir.path(), exporter.addr);
    let g = format!("{{group=\"{name}\"}}");
    let threads = wait_for("scraped series in Prometheus", 60, || {
        query(prom_addr, &format!("memtrial_group_threads{g}"))
    });
    let prom_log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap();
    assert_eq!(
        query(prom_addr, "up{job=\"memtrial\"}"),
        Some(1.0),
        "{}",
        prom_log()
    );
    assert_eq!(threads as u64, status_field(pid, "Threads"));
    assert_eq!(threads, 5.0, "4 workers and main");
    assert_eq!(
        query(prom_addr, &format!("memtrial_group_processes{g}")),
        Some(1.0)
    );
    // RSS moves a little: within 5% of what /proc says now.
    let rss = query(prom_addr, &format!("memtrial_group_resident_bytes{g}")).unwrap();
    let proc_rss = (status_field(pid, "VmRSS") * 1024) as f64;
    assert!(
        (rss - proc_rss).abs() <= proc_rss * 0.05,
        "Prometheus {rss}, /proc {proc_rss}"
    );
    let pss = query(prom_addr, &format!("memtrial_group_proportional_bytes{g}")).unwrap();
    assert!(pss > 0.0 && pss <= rss * 1.05, "PSS {pss}, RSS {rss}");
    // Arenas: counted from the heap headers, equal to malloc_info's, at the limit of 2.
    let arenas = query(prom_addr, &format!("memtrial_group_glibc_arenas{g}")).unwrap();
    assert_eq!(arenas as u64, malloc_info_arenas);
    assert_eq!(arenas, 2.0);
    assert_eq!(
        query(prom_addr, &format!("memtrial_group_glibc_arena_limit{g}")),
        Some(2.0)
    );
    assert_eq!(
        query(
            prom_addr,
            &format!("memtrial_group_glibc_arenas_estimated_processes{g}")
        ),
        Some(0.0),
        "counted from the heap headers"
    );
    assert_eq!(
        query(
            prom_addr,
            &format!(
                "memtrial_group_allocator_info{{group=\"{name}\",allocator=\"glibc\",how=\"default\"}}"
            )
        ),
        Some(1.0)
    );
    assert_eq!(
        query(
            prom_addr,
            &format!(
                "memtrial_group_allocator_processes{{group=\"{name}\",allocator=\"glibc\",how=\"default\"}}"
            )
        ),
        Some(1.0)
    );
    assert_eq!(
        query(prom_addr, &format!("memtrial_group_arena_pitfall{g}")),
        Some(0.0)
    );
    // The working set of the fixture's memory cgroup (the tests' own, shared with other
    // tests): present, and holding at least the fixture's own resident pages.
    let ws = query(
        prom_addr,
        &format!("memtrial_group_cgroup_working_set_bytes{g}"),
    )
    .expect("the cgroup working set is scraped");
    assert!(
        ws >= proc_rss * 0.95,
        "working set {ws}, the fixture's RSS {proc_rss}"
    );
    drop(exporter);
}

/// Under a CPU quota of half a CPU, glibc's default limit (8 × online CPUs, 16 here)
/// is the pitfall; `MALLOC_ARENA_MAX=2` is not.
#[test]
fn arena_pitfall_fires_under_a_quota_for_the_default_limit_only() {
    let online = memtrial::linux::host::online_cpus();
    if !(need_c_compiler()
        && need_root("it makes a cgroup with a CPU quota")
        && require(
            "2 or more online CPUs",
            "glibc's default limit of 8 per CPU reaches 2 × 8 × ceil(0.5) only then",
            || online >= 2,
        ))
    {
        return;
    }
    let mut group = None;
    if !require(
        "a cpu cgroup controller (v1 or v2)",
        "this machine's cgroup layout decides it",
        || {
            group = QuotaGroup::create("exporter", 50_000);
            group.is_some()
        },
    ) {
        return;
    }
    let group = group.expect("created");
    let dir = tempfile::tempdir().unwrap();
    let id = std::process::id();
    let (default, dname) = (format!("mtd{id}"), format!("mtd{id}"));
    let capped = format!("mtm{id}");
    let (d, _) = start_arenas(&named_arenas(dir.path(), &default), 4, &[]);
    let (m, _) = start_arenas(
        &named_arenas(dir.path(), &capped),
        4,
        &[("MALLOC_ARENA_MAX", "2")],
    );
    group.add(d.pid());
    group.add(m.pid());
    let exporter = start_exporter(
        &memtrial(),
        &["--match", &format!("^mt[dm]{id}$"), "--per-process"],
        &[],
    );
    let (code, text) = http_get(exporter.addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{text}");
    let get = |metric: &str, g: &str| {
        series(&text, &format!("{metric}{{group=\"{g}\"}}"))
            .unwrap_or_else(|| panic!("no {metric} for {g} in:\n{text}"))
    };
    assert_eq!(get("memtrial_group_cpu_quota_cpus", &dname), 0.5);
    assert_eq!(
        get("memtrial_group_visible_cpus", &dname),
        f64::from(online)
    );
    assert_eq!(
        get("memtrial_group_glibc_arena_limit", &dname),
        f64::from(8 * online)
    );
    assert_eq!(get("memtrial_group_arena_pitfall", &dname), 1.0);
    assert_eq!(get("memtrial_group_glibc_arena_limit", &capped), 2.0);
    assert_eq!(get("memtrial_group_cpu_quota_cpus", &capped), 0.5);
    assert_eq!(get("memtrial_group_arena_pitfall", &capped), 0.0);
    // The per-process series say the same, labelled with the PID.
    let per = format!(
        "memtrial_process_arena_pitfall{{group=\"{dname}\",pid=\"{}\"}}",
        d.pid()
    );
    assert_eq!(series(&text, &per), Some(1.0), "{text}");
    drop(exporter);
    drop((d, m));
    let gone = group.dir.clone();
    drop(group);
    assert!(!gone.exists(), "{} removed", gone.display());
}

/// Runs the exporter with `args`; it must refuse with exit 2 and every `expect` in stderr.
pub(crate) fn refused(args: &[&str], expect: &[&str]) {
    let mut child = Command::new(memtrial())
        .arg("exporter")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running: it should have been refused");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "{args:?}: expected '{e}' in:\n{stderr}");
    }
}

#[test]
fn exporter_bad_input_is_refused_with_the_flag_named() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    refused(
        &["--listen", &addr, "--match", "x"],
        &[
            &format!("--listen {addr}: the address is in use"),
            "choose another port",
        ],
    );
    refused(
        &["--listen", "127.0.0.1:0", "--match", "puma("],
        &[
            "--match puma(: not a regular expression",
            "unclosed group",
            "e.g. 'puma|sidekiq|java'",
        ],
    );
    for bad in ["localhost", "127.0.0.1", "127.0.0.1:70000", "nowhere:80"] {
        refused(
            &["--listen", bad, "--match", "x"],
            &[
                &format!("--listen {bad}: not an address and port"),
                "IP:PORT",
            ],
        );
    }
    refused(
        &["--listen", "127.0.0.1:0", "--match", "x", "--budget", "0s"],
        &["--budget 0s: must be"],
    );
    refused(
        &[
            "--listen",
            "127.0.0.1:0",
            "--match",
            "x",
            "--max-age",
            "1e300",
        ],
        &["--max-age 1e300: must be"],
    );
    drop(taken);
}

/// As `nobody` against root's process: the scrape succeeds, what `status` gives is there,
/// and the refused reads are counted, not fatal.
#[test]
fn exporter_without_ptrace_rights_counts_unreadable_processes() {
    if !(need_c_compiler()
        && need_root("it scrapes a root process as nobody")
        && need_file("/usr/bin/setpriv", "util-linux"))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let name = format!("mtn{}", std::process::id());
    let (p, _) = start_arenas(&named_arenas(dir.path(), &name), 2, &[]);
    let bin = dir.path().join("memtrial");
    std::fs::copy(memtrial(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exporter = start_exporter(
        &bin,
        &["--match", &format!("^{name}$")],
        &[
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ],
    );
    let uid = status_field(exporter.child.pid(), "Uid");
    assert_eq!(uid, 65534, "the exporter runs as nobody");
    let (code, text) = http_get(exporter.addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{text}");
    let g = format!("{{group=\"{name}\"}}");
    assert_eq!(
        series(&text, &format!("memtrial_group_threads{g}")),
        Some(status_field(p.pid(), "Threads") as f64),
        "{text}"
    );
    assert!(series(&text, &format!("memtrial_group_resident_bytes{g}")).unwrap() > 0.0);
    assert_eq!(
        series(
            &text,
            "memtrial_unreadable_processes{reason=\"permission_denied\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // Nothing read from smaps_rollup: no PSS sum, and the coverage says so.
    assert_eq!(
        series(&text, &format!("memtrial_group_proportional_bytes{g}")),
        None
    );
    assert_eq!(
        series(&text, &format!("memtrial_group_pss_processes{g}")),
        Some(0.0)
    );
}

/// `promtool check metrics` on a live exposition, `promtool check rules` on the recording
/// and alert rules in docs/kube, and `promtool test rules` on their unit tests.
#[test]
fn promtool_accepts_the_exposition_and_the_alert_rules() {
    if !(need_c_compiler() && need_file("/usr/bin/promtool", "prometheus")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("mtc{}", std::process::id());
    let (_p, _) = start_arenas(&named_arenas(dir.path(), &name), 2, &[]);
    let exporter = start_exporter(
        &memtrial(),
        &["--match", &format!("^{name}$"), "--per-process"],
        &[],
    );
    let (code, text) = http_get(exporter.addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(text.contains(&format!("memtrial_group_threads{{group=\"{name}\"}} 3")));
    let mut check = Command::new("/usr/bin/promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Asked without OpenMetrics in `Accept`, the exporter writes the classic text format
    // promtool reads: every family has its help text, a counter's under its `_total`
    // name. Nothing to report, and success.
    assert!(
        said.trim().is_empty() && out.status.success(),
        "promtool ({:?}): {said}\nexposition:\n{text}",
        out.status.code()
    );
    assert!(
        text.contains("# HELP memtrial_exporter_scrapes_total "),
        "{text}"
    );
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kube/exporter-alerts.yaml");
    let out = Command::new("/usr/bin/promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert_ran(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SUCCESS: 5 rules found"), "{said}");
    // The rules' own unit tests: the recording rules' values and when each alert fires
    // (and when it must not yet), on series of the exporter's shape.
    let out = Command::new("/usr/bin/promtool")
        .args(["test", "rules", "exporter-alerts.test.yaml"])
        .current_dir(rules.parent().unwrap())
        .output()
        .unwrap();
    assert_ran(&out);
}

/// A workload of `memtrial run` carries the allocator probe: the exporter reads its
/// report (live and held bytes, the allocator's own counters) and names its allocator
/// (jemalloc, preloaded).
#[test]
fn exporter_reads_the_probe_of_a_memtrial_run() {
    if !(need_c_compiler() && need_allocators(&["jemalloc"])) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("mtl{}", std::process::id());
    let program = dir.path().join(&name);
    std::fs::copy(fixture("live"), &program).unwrap();
    // 48 MiB live in 4096-byte blocks, held for 60 s.
    let run = Killed(
        Command::new(memtrial())
            .args([
                "run",
                "--runs",
                "1",
                "--warmup",
                "0",
                "--variants",
                "jemalloc",
                // Else the glibc baseline runs first.
                "--baseline",
                "jemalloc",
                "--probe-interval",
                "100ms",
                "--",
            ])
            .arg(&program)
            .args(["48", "60"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The exporter looks only in its own --probe-dir: here, the run's probe directory.
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe_dir = loop {
        if let Some(d) = crate::exporter_trust::run_probe_dir(dir.path()) {
            break d;
        }
        assert!(Instant::now() < deadline, "no probe directory of the run");
        std::thread::sleep(Duration::from_millis(100));
    };
    let exporter = start_probe_exporter(&name, &probe_dir);
    let g = format!("{{group=\"{name}\"}}");
    let mut text = String::new();
    let live = wait_for("the probe's live bytes", 30, || {
        text = http_get(exporter.addr, "/metrics").ok()?.1;
        series(&text, &format!("memtrial_group_allocator_live_bytes{g}"))
            .filter(|v| *v >= 48.0 * 1048576.0)
    });
    // The process may first be seen mid-exec, before the loader mapped jemalloc: the
    // allocator is read again until it is known, never cached as glibc.
    let expected = 48.0 * 1048576.0 + 96.0 * 1024.0;
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
    assert_eq!(
        series(
            &text,
            &format!(
                "memtrial_group_allocator_info{{group=\"{name}\",allocator=\"jemalloc\",how=\"preloaded\"}}"
            )
        ),
        Some(1.0),
        "{text}"
    );
    // jemalloc has no glibc arenas.
    assert_eq!(
        series(&text, &format!("memtrial_group_glibc_arenas{g}")),
        None
    );
    drop(exporter);
    // SIGINT: memtrial stops the run and removes its workload.
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(run.pid(), libc::SIGINT);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut run = run;
    while run.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "memtrial run did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(no_process_matching(&name), "the workload is gone");
}

/// SIGTERM and SIGINT stop the exporter at once with exit 0; other paths are a 404.
#[test]
fn exporter_stops_gracefully_on_sigterm_and_sigint() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut e = start_exporter(&memtrial(), &["--match", "^no-such-process-x$"], &[]);
        let (code, body) = http_get(e.addr, "/metrics").unwrap();
        assert_eq!(code, 200);
        assert!(body.contains("memtrial_exporter_scrapes_total 1"), "{body}");
        assert_eq!(http_get(e.addr, "/nothing").unwrap().0, 404);
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(e.child.pid(), sig);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(s) = e.child.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "signal {sig}: still running");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "signal {sig}");
        assert!(TcpListener::bind(e.addr).is_ok(), "the port is free again");
    }
}

/// A process that execs another program keeps its PID and start time: its cached figures
/// (allocator, environment, arenas) are those of the old program and are dropped when
/// its name changes.
#[test]
fn a_process_that_execs_is_read_afresh() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("mte{}", std::process::id());
    let program = named_arenas(dir.path(), &name);
    let exporter = start_exporter(&memtrial(), &["--match", &name], &[]);
    // sh matches by its command line first; then it becomes the fixture.
    let script = format!("read go; exec '{}' 3 120", program.display());
    let mut child = Command::new("/bin/sh")
        .args(["-c", &script])
        .env("MALLOC_ARENA_MAX", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut go = child.stdin.take().unwrap();
    let out = child.stdout.take().unwrap();
    let sh = Killed(child);
    let before = wait_for("the shell's group", 10, || {
        let (_, text) = http_get(exporter.addr, "/metrics").ok()?;
        series(&text, "memtrial_group_glibc_arenas{group=\"sh\"}")
    });
    assert_eq!(before, 1.0, "the shell has only the main arena");
    writeln!(go, "go").unwrap();
    let mut arenas = None;
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("arenas ") {
            arenas = n.trim().parse::<f64>().ok();
        }
        if line == "ready" {
            break;
        }
    }
    let arenas = arenas.expect("the fixture printed its arena count");
    assert_eq!(arenas, 3.0, "3 threads, MALLOC_ARENA_MAX=3");
    let (_, text) = http_get(exporter.addr, "/metrics").unwrap();
    let g = format!("{{group=\"{name}\"}}");
    assert_eq!(
        series(&text, &format!("memtrial_group_glibc_arenas{g}")),
        Some(arenas),
        "{text}"
    );
    assert_eq!(
        series(&text, &format!("memtrial_group_threads{g}")),
        Some(4.0)
    );
    assert_eq!(
        series(&text, "memtrial_group_processes{group=\"sh\"}"),
        None
    );
    drop(sh);
}

/// Issue 38, item 13: the wrapper that started the exporter (`timeout … memtrial exporter
/// --match X`) holds the regex in its command line, but is not exported; a process that
/// matches by its own command line still is.
#[test]
fn the_wrapper_that_started_the_exporter_is_not_exported() {
    let marker = format!("mtwrap{}", std::process::id());
    let exporter = start_exporter(&memtrial(), &["--match", &marker], &["timeout", "60"]);
    let script = format!("read go # {marker}");
    let mut child = Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let _go = child.stdin.take();
    let sh = Killed(child);
    wait_for("the shell's group", 10, || {
        let (_, text) = http_get(exporter.addr, "/metrics").ok()?;
        series(&text, "memtrial_group_processes{group=\"sh\"}")
    });
    let (_, text) = http_get(exporter.addr, "/metrics").unwrap();
    assert_eq!(
        series(&text, "memtrial_group_processes{group=\"sh\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        series(&text, "memtrial_group_processes{group=\"timeout\"}"),
        None,
        "the wrapper was exported: {text}"
    );
    drop(sh);
}
