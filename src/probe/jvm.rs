//! The JVM probe: the JVM's own Native Memory Tracking (NMT), beside the kernel's figures.
//!
//! Before launch, `-XX:NativeMemoryTracking=summary` is appended to the workload's
//! `JAVA_TOOL_OPTIONS`, so every JVM of the run tracks its native memory by category. On
//! the run's clock the probe finds the run's JVMs (an executable named `java`, or
//! `libjvm.so` mapped) and reads each with `jcmd <pid> VM.native_memory summary`.
//!
//! Cost and budget: jcmd is a JVM of its own (about 0.15 s of CPU and 40 MiB for a
//! moment). It never blocks the run's clock: it is memtrial's child, started on a sample
//! and collected on later ones, killed after [`TIMEOUT`]. At most one read is in flight per
//! JVM and [`MAX_IN_FLIGHT`] in all, a JVM is read at most every max(probe interval,
//! [`MIN_GAP`]), and jcmd runs at a lower priority with memtrial's environment (without
//! `JAVA_TOOL_OPTIONS`), outside the run's cgroup and hidden from its process tree, so
//! that it is not part of the run's figures. The CPU it used is measured and stated in the
//! view's note.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tree::Helpers;
use super::{append_env, Member, Probe, RunEnd, Tick, TickKind};
use crate::record::{Absence, FigureUnit, RunRecord, RuntimeFigure, RuntimeSeries, RuntimeView};

/// The probe's name, in records and messages.
pub const NAME: &str = "jvm";
/// What the workload's JVMs are given.
pub const NMT_OPTION: &str = "-XX:NativeMemoryTracking=summary";
/// The shortest time between two reads of one JVM.
pub const MIN_GAP: Duration = Duration::from_secs(5);
/// A jcmd that has not exited by then is killed.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// jcmd processes running at once, over all the run's JVMs.
pub const MAX_IN_FLIGHT: usize = 2;
/// How often a process found not to be a JVM is looked at again (a launcher that loads
/// `libjvm.so` itself does so after it started).
const RECHECK: Duration = Duration::from_secs(5);
/// How long a JVM may not catch SIGQUIT (it is starting up) before that is its failure.
const STARTUP_GRACE: Duration = Duration::from_secs(2);
/// Reads that fail in a row before a JVM is left alone.
const MAX_FAILURES: u32 = 3;
/// The most of jcmd's output kept.
const OUTPUT_CAP: usize = 1 << 20;
/// jcmd's JVM: a small heap's collector and the quick compiler, which cut its CPU by a
/// third; its own attach timeout below ours, so that it says why before it is killed.
const JCMD_JVM_OPTIONS: [&str; 3] = [
    "-J-XX:+UseSerialGC",
    "-J-XX:TieredStopAtLevel=1",
    "-J-Dsun.tools.attach.attachTimeout=5000",
];
/// What to install when there is no jcmd.
const JDK_PACKAGE: &str = "openjdk-17-jdk-headless";

// ───────────────────────────── the summary ─────────────────────────────

/// NMT's summary of one JVM, in bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub reserved: u64,
    pub committed: u64,
    /// `malloc:` under `Total:` (JDK 17 and later).
    pub malloc: Option<u64>,
    pub categories: Vec<Category>,
}

/// One category (`Java Heap`, `Thread`, `Other`, …).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Category {
    pub name: String,
    pub reserved: u64,
    pub committed: u64,
    pub malloc: Option<u64>,
    /// `(thread #N)`, in the `Thread` category.
    pub threads: Option<u64>,
    /// `(stack: reserved=…, committed=…)`, in the `Thread` category.
    pub stack_committed: Option<u64>,
}

/// Why jcmd's output is no summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummaryError {
    /// The JVM runs without NMT.
    NotEnabled,
    /// Anything else: jcmd's own words (its first line that says something).
    Other(String),
}

/// A size NMT printed right after `key` (`reserved=123KB`, `malloc: 4KB`), in bytes.
fn size_after(line: &str, key: &str) -> Option<u64> {
    let rest = line[line.find(key)? + key.len()..].trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = rest[..digits].parse().ok()?;
    let unit: String = rest[digits..]
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    let scale: u64 = match unit.as_str() {
        "B" | "" => 1,
        "KB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        _ => return None,
    };
    Some(n.saturating_mul(scale))
}

/// The count after `#` in `(thread #69)`.
fn count_after_hash(line: &str) -> Option<u64> {
    let rest = &line[line.find('#')? + 1..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().ok()
}

/// jcmd's first line that says something (not the `<pid>:` it echoes, not a stack frame).
pub fn first_words(text: &str) -> String {
    let echo = |l: &str| {
        l.strip_suffix(':')
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
    };
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !(l.is_empty() || l.starts_with("at ") || echo(l)))
        .unwrap_or("no output");
    line.chars().take(300).collect()
}

/// Parses `jcmd <pid> VM.native_memory summary` (any scale NMT prints). Never panics.
pub fn parse_summary(text: &str) -> Result<Summary, SummaryError> {
    if text.contains("Native memory tracking is not enabled") {
        return Err(SummaryError::NotEnabled);
    }
    let mut total: Option<Summary> = None;
    let mut in_total = false;
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix("Total:") {
            let (Some(reserved), Some(committed)) = (
                size_after(rest, "reserved="),
                size_after(rest, "committed="),
            ) else {
                continue;
            };
            total = Some(Summary {
                reserved,
                committed,
                ..Summary::default()
            });
            in_total = true;
            continue;
        }
        let Some(s) = total.as_mut() else { continue };
        if let Some(rest) = line.strip_prefix('-') {
            in_total = false;
            let Some(open) = rest.find('(') else { continue };
            let (Some(reserved), Some(committed)) = (
                size_after(&rest[open..], "reserved="),
                size_after(&rest[open..], "committed="),
            ) else {
                continue;
            };
            s.categories.push(Category {
                name: rest[..open].trim().to_string(),
                reserved,
                committed,
                ..Category::default()
            });
        } else if in_total {
            if line.starts_with("malloc:") {
                s.malloc = size_after(line, "malloc:");
            }
        } else if let Some(c) = s.categories.last_mut() {
            if line.starts_with("(thread #") || line.starts_with("(threads #") {
                c.threads = count_after_hash(line);
            } else if line.starts_with("(stack:") {
                c.stack_committed = size_after(line, "committed=");
            } else if line.starts_with("(malloc=") {
                c.malloc = size_after(line, "malloc=");
            }
        }
    }
    total.ok_or_else(|| SummaryError::Other(first_words(text)))
}

/// A category's figure name: `committed.java_heap`, `committed.nmt`, …
pub fn category_key(name: &str) -> String {
    if name == "Native Memory Tracking" {
        return "committed.nmt".into();
    }
    let mut key = String::from("committed.");
    let mut gap = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !key.ends_with('.') {
                key.push('_');
            }
            gap = false;
            key.push(c.to_ascii_lowercase());
        } else {
            gap = true;
        }
    }
    key
}

/// One figure of one read.
type Figure = (String, FigureUnit, u64);

/// The figures of one read; `rss` is the JVM's RSS when it was read, if known.
pub fn figures(s: &Summary, rss: Option<u64>) -> Vec<Figure> {
    use FigureUnit::{Bytes, Count};
    let mut out: Vec<Figure> = vec![
        ("committed_total".into(), Bytes, s.committed),
        ("reserved_total".into(), Bytes, s.reserved),
    ];
    let category_malloc = s.categories.iter().filter_map(|c| c.malloc);
    let malloc = s.malloc.or_else(|| {
        let mut any = category_malloc.clone().peekable();
        any.peek().is_some().then(|| any.sum())
    });
    if let Some(m) = malloc {
        out.push(("malloc_total".into(), Bytes, m));
    }
    if let Some(rss) = rss {
        out.push(("rss".into(), Bytes, rss));
        out.push((
            "rss_outside_nmt".into(),
            Bytes,
            rss.saturating_sub(s.committed),
        ));
    }
    if let Some(n) = s.categories.iter().find_map(|c| c.threads) {
        out.push(("threads".into(), Count, n));
    }
    if let Some(b) = s.categories.iter().find_map(|c| c.stack_committed) {
        out.push(("thread_stacks_committed".into(), Bytes, b));
    }
    for c in &s.categories {
        out.push((category_key(&c.name), Bytes, c.committed));
    }
    out
}

// ───────────────────────────── finding JVMs and jcmd ─────────────────────────────

/// Whether `pid` runs a JVM: its executable is `java`, or it maps `libjvm.so`. With
/// the executable's path (as the process sees it) when it is one.
fn jvm_exe(pid: i32) -> Option<Option<PathBuf>> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let name = exe
        .as_ref()
        .and_then(|e| e.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    if name
        .as_deref()
        .map(|n| n.strip_suffix(" (deleted)").unwrap_or(n))
        == Some("java")
    {
        return Some(exe);
    }
    let maps = crate::linux::proc::read_maps_text(pid).ok()?;
    maps.lines()
        .any(|l| l.ends_with("/libjvm.so"))
        .then_some(exe)
}

/// A file as memtrial sees it, for a path as the process `pid` sees it.
fn through_root(pid: i32, path: &Path) -> PathBuf {
    Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path))
}

/// `JAVA_VERSION` of the JDK the executable belongs to (its `release` file).
fn version_of(pid: i32, exe: &Path) -> Option<String> {
    let home = exe.parent()?.parent()?;
    let text = [home.join("release"), home.join("../release")]
        .iter()
        .find_map(|p| std::fs::read_to_string(through_root(pid, p)).ok())?;
    parse_release(&text)
}

/// `JAVA_VERSION="17.0.15"` of a JDK's `release` file.
pub fn parse_release(text: &str) -> Option<String> {
    let v = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("JAVA_VERSION="))?
        .trim()
        .trim_matches('"');
    (!v.is_empty()).then(|| v.chars().take(64).collect())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where jcmd is: `$JAVA_HOME/bin`, then beside the JVM's own executable, then `PATH`.
fn find_jcmd(pid: i32, exe: Option<&Path>) -> Option<PathBuf> {
    let home = std::env::var_os("JAVA_HOME").map(|h| PathBuf::from(h).join("bin/jcmd"));
    let beside = exe.and_then(Path::parent).map(|d| d.join("jcmd"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    home.into_iter()
        .chain(
            beside
                .iter()
                .flat_map(|b| [b.clone(), through_root(pid, b)]),
        )
        .chain(std::env::split_paths(&path).map(|d| d.join("jcmd")))
        .find(|p| is_executable(p))
}

/// Whether the hex mask `SigCgt:` of `/proc/PID/status` has SIGQUIT.
pub fn catches_sigquit(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << (libc::SIGQUIT - 1)) != 0)
}

/// Whether jcmd may attach: it sends SIGQUIT unless the JVM's attach socket exists, and a
/// JVM that does not catch SIGQUIT (not yet, or `-Xrs`) dies of it.
fn attach_safe(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    if catches_sigquit(&status) == Some(true) {
        return true;
    }
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("");
    !nspid.is_empty() && through_root(pid, Path::new(&format!("/tmp/.java_pid{nspid}"))).exists()
}

// ───────────────────────────── one read in flight ─────────────────────────────

/// One jcmd, started and not yet collected.
struct InFlight {
    /// Owns the pipes; reaped with `wait4`, never by std.
    child: Child,
    pid: i32,
    /// Where it is hidden from the run's processes until reaped.
    helpers: Helpers,
    out: Vec<u8>,
    err: Vec<u8>,
    started: Instant,
    killed: bool,
    reaped: bool,
}

/// A finished jcmd.
struct Finished {
    ok: bool,
    killed: bool,
    out: String,
    err: String,
    cpu: Duration,
}

fn set_nonblocking(fd: i32) {
    // SAFETY: fcntl on a pipe descriptor we own; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// Reads what is there without waiting (the pipes are non-blocking).
fn drain(r: &mut impl Read, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

impl InFlight {
    fn start(jcmd: &Path, pid: i32, helpers: &Helpers) -> std::io::Result<InFlight> {
        let mut cmd = Command::new(jcmd);
        cmd.args(JCMD_JVM_OPTIONS)
            .arg(pid.to_string())
            .args(["VM.native_memory", "summary"])
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("_JAVA_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setpriority is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::setpriority(libc::PRIO_PROCESS, 0, 10);
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let jpid = child.id() as i32;
        helpers.hide(jpid);
        for fd in [
            child.stdout.as_ref().map(|o| o.as_raw_fd()),
            child.stderr.as_ref().map(|e| e.as_raw_fd()),
        ]
        .into_iter()
        .flatten()
        {
            set_nonblocking(fd);
        }
        Ok(InFlight {
            child,
            pid: jpid,
            helpers: helpers.clone(),
            out: Vec::new(),
            err: Vec::new(),
            started: Instant::now(),
            killed: false,
            reaped: false,
        })
    }

    fn drain(&mut self) {
        if let Some(o) = self.child.stdout.as_mut() {
            drain(o, &mut self.out);
        }
        if let Some(e) = self.child.stderr.as_mut() {
            drain(e, &mut self.err);
        }
    }

    /// Collects jcmd if it exited (killing it once it is late); never waits.
    fn poll(&mut self) -> Option<Finished> {
        self.drain();
        let mut status = 0;
        // SAFETY: rusage is plain data that wait4 fills; WNOHANG on our own child.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == 0 {
            if !self.killed && self.started.elapsed() > TIMEOUT {
                // SAFETY: our child, not reaped yet, so the PID is still its.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
                self.killed = true;
            }
            return None;
        }
        self.reaped = true;
        self.helpers.unhide(self.pid);
        self.drain();
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Some(Finished {
            ok: r == self.pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            killed: self.killed,
            out: String::from_utf8_lossy(&self.out).into_owned(),
            err: String::from_utf8_lossy(&self.err).into_owned(),
            cpu: if r == self.pid {
                tv(ru.ru_utime) + tv(ru.ru_stime)
            } else {
                Duration::ZERO
            },
        })
    }
}

impl Drop for InFlight {
    /// A read still running when the run ends is killed and reaped (quick after SIGKILL).
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        let mut status = 0;
        // SAFETY: our child, not reaped yet; kill then a blocking wait4 of that PID only.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::wait4(self.pid, &mut status, 0, std::ptr::null_mut());
        }
        self.helpers.unhide(self.pid);
    }
}

// ───────────────────────────── the probe ─────────────────────────────

/// Why a JVM has no read, most telling first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Failure {
    NoJcmd,
    NotEnabled,
    Spawn(String),
    /// SIGQUIT not caught and no attach socket (`-Xrs`): jcmd would kill it.
    Unsafe,
    Refused(String),
    TimedOut,
    /// The JVM exited before jcmd answered.
    Gone,
}

impl Failure {
    /// No further attempt on this JVM.
    fn permanent(&self) -> bool {
        matches!(
            self,
            Failure::NoJcmd | Failure::NotEnabled | Failure::Spawn(_) | Failure::Gone
        )
    }

    fn explain(&self, exe: Option<&Path>) -> String {
        match self {
            Failure::NoJcmd => format!(
                "jcmd was not found ($JAVA_HOME/bin, beside {}, PATH): install a JDK, \
                 e.g. apt-get install {JDK_PACKAGE} (a JRE has no jcmd)",
                exe.map_or("the JVM".into(), |e| e.display().to_string())
            ),
            Failure::NotEnabled => format!(
                "the JVM ran without Native Memory Tracking: its command line or its launcher \
                 overrode JAVA_TOOL_OPTIONS={NMT_OPTION}"
            ),
            Failure::Spawn(e) => format!("jcmd could not be started: {e}"),
            Failure::Unsafe => "the JVM does not catch SIGQUIT (-Xrs?) and has no attach \
                 socket: jcmd would have killed it, so it was not read"
                .into(),
            Failure::Refused(words) => format!("jcmd could not attach to the JVM: {words}"),
            Failure::TimedOut => format!(
                "jcmd did not answer within {} s and was killed",
                TIMEOUT.as_secs()
            ),
            Failure::Gone => "the JVM lived too briefly: it exited before jcmd answered".into(),
        }
    }
}

/// One JVM of the run.
struct Jvm {
    first_seen: Instant,
    exe: Option<PathBuf>,
    version: Option<String>,
    jcmd: Option<PathBuf>,
    last_start: Option<Instant>,
    in_flight: Option<InFlight>,
    latest: Option<Vec<Figure>>,
    fresh: bool,
    reads: u32,
    failures_in_a_row: u32,
    failure: Option<Failure>,
    done: bool,
}

/// Reads the run's JVMs' Native Memory Tracking with jcmd.
pub struct JvmProbe {
    gap: Duration,
    /// Keyed by (pid, start time).
    jvms: BTreeMap<(i32, u64), Jvm>,
    /// Processes found not to be JVMs: (exec generation, when).
    not_jvm: HashMap<(i32, u64), (u32, Instant)>,
    /// Figure names in the order they first appeared, with their unit.
    names: Vec<(String, FigureUnit)>,
    points: Vec<(f64, HashMap<String, u64>)>,
    cpu: Duration,
    reads_ok: u32,
    reads_failed: u32,
    /// The run's helper processes, where its jcmd reads are hidden.
    helpers: Helpers,
}

impl JvmProbe {
    /// A probe that reads each JVM at most every max(`interval_ms`, [`MIN_GAP`]).
    pub fn new(interval_ms: u64) -> JvmProbe {
        JvmProbe {
            gap: Duration::from_millis(interval_ms).max(MIN_GAP),
            jvms: BTreeMap::new(),
            not_jvm: HashMap::new(),
            names: Vec::new(),
            points: Vec::new(),
            cpu: Duration::ZERO,
            reads_ok: 0,
            reads_failed: 0,
            helpers: Helpers::default(),
        }
    }

    /// New JVMs among the members.
    fn discover(&mut self, members: &[Member], now: Instant) {
        for m in members.iter().filter(|m| m.state != 'Z') {
            let key = (m.pid, m.starttime_ticks);
            if self.jvms.contains_key(&key) {
                continue;
            }
            if let Some((gen, when)) = self.not_jvm.get(&key) {
                if *gen == m.exec_generation && now.duration_since(*when) < RECHECK {
                    continue;
                }
            }
            match jvm_exe(m.pid) {
                Some(exe) => {
                    self.not_jvm.remove(&key);
                    let version = exe.as_deref().and_then(|e| version_of(m.pid, e));
                    let jcmd = find_jcmd(m.pid, exe.as_deref());
                    self.jvms.insert(
                        key,
                        Jvm {
                            first_seen: now,
                            exe,
                            version,
                            jcmd,
                            last_start: None,
                            in_flight: None,
                            latest: None,
                            fresh: false,
                            reads: 0,
                            failures_in_a_row: 0,
                            failure: None,
                            done: false,
                        },
                    );
                }
                None => {
                    self.not_jvm.insert(key, (m.exec_generation, now));
                }
            }
        }
    }

    /// Collects the reads that finished.
    fn collect(&mut self, members: &[Member]) {
        for (key, jvm) in self.jvms.iter_mut() {
            let Some(done) = jvm.in_flight.as_mut().and_then(InFlight::poll) else {
                continue;
            };
            jvm.in_flight = None;
            self.cpu += done.cpu;
            let alive = members
                .iter()
                .find(|m| (m.pid, m.starttime_ticks) == *key && m.state != 'Z');
            let result = match parse_summary(&done.out) {
                Ok(s) if done.ok => Ok(s),
                Err(SummaryError::NotEnabled) => Err(Failure::NotEnabled),
                _ if alive.is_none() => Err(Failure::Gone),
                _ if done.killed => Err(Failure::TimedOut),
                Ok(_) => Err(Failure::Refused(first_words(&done.err))),
                Err(SummaryError::Other(_)) => Err(Failure::Refused(first_words(&format!(
                    "{}\n{}",
                    done.out, done.err
                )))),
            };
            match result {
                Ok(s) => {
                    self.reads_ok += 1;
                    jvm.reads += 1;
                    jvm.failures_in_a_row = 0;
                    jvm.latest = Some(figures(&s, alive.map(|m| m.rss_bytes)));
                    jvm.fresh = true;
                }
                Err(f) => {
                    self.reads_failed += 1;
                    jvm.failures_in_a_row += 1;
                    jvm.done = f.permanent() || jvm.failures_in_a_row >= MAX_FAILURES;
                    jvm.failure = Some(f);
                }
            }
        }
    }

    /// Starts the reads that are due, within the budget.
    fn start_reads(&mut self, members: &[Member], now: Instant) {
        let mut running = self.jvms.values().filter(|j| j.in_flight.is_some()).count();
        for (key, jvm) in self.jvms.iter_mut() {
            if running >= MAX_IN_FLIGHT {
                break;
            }
            let present = members
                .iter()
                .any(|m| (m.pid, m.starttime_ticks) == *key && m.state != 'Z');
            let due = jvm
                .last_start
                .is_none_or(|t| now.duration_since(t) >= self.gap);
            if !present || jvm.done || jvm.in_flight.is_some() || !due {
                continue;
            }
            let Some(jcmd) = jvm.jcmd.clone() else {
                jvm.failure = Some(Failure::NoJcmd);
                jvm.done = true;
                continue;
            };
            if !attach_safe(key.0) {
                // Not yet (a JVM starting up), or never (-Xrs): looked at again next sample.
                if now.duration_since(jvm.first_seen) >= STARTUP_GRACE {
                    jvm.failure.get_or_insert(Failure::Unsafe);
                }
                continue;
            }
            jvm.last_start = Some(now);
            match InFlight::start(&jcmd, key.0, &self.helpers) {
                Ok(f) => {
                    jvm.in_flight = Some(f);
                    running += 1;
                }
                Err(e) => {
                    jvm.failure = Some(Failure::Spawn(format!("{}: {e}", jcmd.display())));
                    jvm.done = true;
                }
            }
        }
    }

    /// A point when a read arrived: the latest figures of every JVM still in the run and
    /// of those that answered since the last point.
    fn point(&mut self, t_seconds: f64, members: &[Member]) {
        if !self.jvms.values().any(|j| j.fresh) {
            return;
        }
        let mut sums: HashMap<String, u64> = HashMap::new();
        for (key, jvm) in self.jvms.iter_mut() {
            let present = members
                .iter()
                .any(|m| (m.pid, m.starttime_ticks) == *key && m.state != 'Z');
            if !(present || jvm.fresh) {
                continue;
            }
            jvm.fresh = false;
            for (name, unit, v) in jvm.latest.iter().flatten() {
                if !self.names.iter().any(|(n, _)| n == name) {
                    self.names.push((name.clone(), *unit));
                }
                let s = sums.entry(name.clone()).or_insert(0);
                *s = s.saturating_add(*v);
            }
        }
        self.points.push((t_seconds, sums));
    }

    /// The figures and series, from the points.
    fn view(&self) -> RuntimeView {
        let mut figures = Vec::new();
        let mut series = Vec::new();
        for (name, unit) in &self.names {
            let points: Vec<[f64; 2]> = self
                .points
                .iter()
                .filter_map(|(t, p)| p.get(name).map(|v| [*t, *v as f64]))
                .collect();
            let (Some(last), Some(max)) = (
                points.last().map(|p| p[1]),
                points.iter().map(|p| p[1]).reduce(f64::max),
            ) else {
                continue;
            };
            figures.push(RuntimeFigure {
                name: name.clone(),
                unit: *unit,
                last,
                max,
            });
            series.push(RuntimeSeries {
                name: name.clone(),
                unit: *unit,
                points,
            });
        }
        let mut versions: Vec<&str> = self
            .jvms
            .values()
            .filter(|j| j.reads > 0)
            .filter_map(|j| j.version.as_deref())
            .collect();
        versions.sort_unstable();
        versions.dedup();
        let view = RuntimeView {
            runtime: NAME.into(),
            version: (!versions.is_empty()).then(|| versions.join("+")),
            processes: self.jvms.values().filter(|j| j.reads > 0).count() as u32,
            figures,
            series,
            note: None,
        };
        RuntimeView {
            note: Some(self.note(&view)),
            ..view
        }
    }

    /// What the reader should know: the probe's cost, NMT's own, and what NMT cannot see.
    fn note(&self, view: &RuntimeView) -> String {
        let reads = self.reads_ok + self.reads_failed;
        let per_read = self.cpu.as_secs_f64() * 1000.0 / f64::from(reads.max(1));
        let mut note = format!(
            "Native Memory Tracking (summary), read with jcmd at most every {} s per JVM: \
             {} read(s) of {} JVM(s), {} failed; jcmd used {:.2} s of CPU ({:.0} ms a read), \
             outside the run's processes.",
            self.gap.as_secs(),
            self.reads_ok,
            view.processes,
            self.reads_failed,
            self.cpu.as_secs_f64(),
            per_read,
        );
        let unread: Vec<String> = self
            .jvms
            .values()
            .filter(|j| j.reads == 0)
            .filter_map(|j| j.failure.as_ref().map(|f| f.explain(j.exe.as_deref())))
            .collect();
        if !unread.is_empty() {
            note.push_str(&format!(
                " {} JVM(s) not read: {}.",
                unread.len(),
                unread.join("; ")
            ));
        }
        if let Some(f) = view.figure("committed.nmt") {
            note.push_str(&format!(
                " NMT costs memory itself: {:.0} KiB of its own (committed.nmt) plus a header \
                 on every malloc'd block (about 0.2 MiB of RSS on a small JDK 17 JVM).",
                f.max / 1024.0
            ));
        } else {
            note.push_str(
                " NMT costs memory itself: its tables and a header on every malloc'd block.",
            );
        }
        note.push_str(
            " NMT does not see what native (JNI) code or other libraries malloc: \
             rss_outside_nmt (RSS minus NMT's committed total) holds that, with the JVM's own \
             code and the allocator's free pages; committed pages never touched make it low.",
        );
        note
    }

    /// Why no JVM was read.
    fn absence(&self) -> String {
        if self.jvms.is_empty() {
            return "no JVM ran in this run (no process ran an executable named java or \
                    mapped libjvm.so)"
                .into();
        }
        let worst = self
            .jvms
            .values()
            .filter_map(|j| j.failure.as_ref().map(|f| (f, j.exe.as_deref())))
            .min_by(|a, b| a.0.cmp(b.0));
        match worst {
            Some((f, exe)) => f.explain(exe),
            None => format!(
                "the JVM lived too briefly to be read ({} JVM(s) seen; reads start at the \
                 first sample and jcmd needs a few tenths of a second)",
                self.jvms.len()
            ),
        }
    }
}

impl Probe for JvmProbe {
    fn name(&self) -> &'static str {
        NAME
    }

    fn share_helpers(&mut self, helpers: &Helpers) {
        self.helpers = helpers.clone();
    }

    fn instrument(&mut self, env: &mut Vec<(String, String)>) {
        append_env(env, "JAVA_TOOL_OPTIONS", NMT_OPTION, ' ');
    }

    fn observe(&mut self, tick: &Tick) {
        if tick.kind != TickKind::Sample {
            return;
        }
        let now = Instant::now();
        self.collect(tick.members);
        self.point(tick.t_seconds, tick.members);
        self.discover(tick.members, now);
        self.start_reads(tick.members, now);
    }

    fn finish(mut self: Box<Self>, end: &RunEnd, record: &mut RunRecord) {
        // A read that finished since the last sample still counts; the rest are stopped.
        self.collect(&[]);
        self.point(end.t_seconds, &[]);
        for jvm in self.jvms.values_mut() {
            if jvm.in_flight.take().is_some() && jvm.reads == 0 {
                jvm.failure.get_or_insert(Failure::Gone);
            }
        }
        if self.points.is_empty() {
            record.inside.absent.push(Absence {
                probe: NAME.into(),
                reason: self.absence(),
            });
        } else {
            record.inside.runtimes.push(self.view());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JDK17: &str = include_str!("../../tests/fixtures/jvm/nmt-summary-jdk17.txt");

    #[test]
    fn parses_a_jdk17_summary() {
        let s = parse_summary(JDK17).unwrap();
        assert_eq!(s.reserved, 7_958_433 * 1024);
        assert_eq!(s.committed, 545_969 * 1024);
        assert_eq!(s.malloc, Some(74_841 * 1024));
        let names: Vec<&str> = s.categories.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names[..4], ["Java Heap", "Class", "Thread", "Code"]);
        assert!(names.contains(&"Native Memory Tracking"));
        assert!(names.contains(&"Object Monitors"));
        let thread = s.categories.iter().find(|c| c.name == "Thread").unwrap();
        assert_eq!(thread.threads, Some(69));
        assert_eq!(thread.stack_committed, Some(6000 * 1024));
        assert_eq!(thread.malloc, Some(118 * 1024));
        assert_eq!(thread.committed, 6197 * 1024);
        // Class's Metadata lines are not categories of their own.
        let class = s.categories.iter().find(|c| c.name == "Class").unwrap();
        assert_eq!(
            (class.reserved, class.committed),
            (1_048_678 * 1024, 230 * 1024)
        );
    }

    #[test]
    fn figures_of_a_jdk17_summary() {
        let s = parse_summary(JDK17).unwrap();
        let f = figures(&s, Some(111_604 * 1024));
        let get = |n: &str| f.iter().find(|x| x.0 == n).map(|x| x.2);
        assert_eq!(get("committed_total"), Some(545_969 * 1024));
        assert_eq!(get("reserved_total"), Some(7_958_433 * 1024));
        assert_eq!(get("malloc_total"), Some(74_841 * 1024));
        assert_eq!(get("threads"), Some(69));
        assert_eq!(get("thread_stacks_committed"), Some(6000 * 1024));
        assert_eq!(get("committed.java_heap"), Some(397_312 * 1024));
        assert_eq!(get("committed.other"), Some(65_536 * 1024));
        assert_eq!(get("committed.nmt"), Some(107 * 1024));
        assert_eq!(get("committed.arena_chunk"), Some(2127 * 1024));
        assert_eq!(get("committed.shared_class_space"), Some(12_060 * 1024));
        // Committed is not resident: the heap is committed and mostly untouched here.
        assert_eq!(get("rss_outside_nmt"), Some(0));
        let units: Vec<FigureUnit> = f.iter().filter(|x| x.0 == "threads").map(|x| x.1).collect();
        assert_eq!(units, [FigureUnit::Count]);
        assert!(figures(&s, None).iter().all(|x| !x.0.starts_with("rss")));
    }

    #[test]
    fn older_summaries_sum_their_categories_malloc() {
        // JDK 11: no malloc line under Total, MB scale.
        let text = "123:\n\nNative Memory Tracking:\n\nTotal: reserved=100MB, committed=10MB\n\n\
            -                 Java Heap (reserved=64MB, committed=4MB)\n\
            \x20                           (mmap: reserved=64MB, committed=4MB)\n\n\
            -                    Thread (reserved=20MB, committed=2MB)\n\
            \x20                           (thread #12)\n\
            \x20                           (stack: reserved=19MB, committed=1MB)\n\
            \x20                           (malloc=1MB #40)\n\n\
            -                     Other (reserved=3MB, committed=3MB)\n\
            \x20                           (malloc=3MB #2)\n";
        let s = parse_summary(text).unwrap();
        assert_eq!(s.committed, 10 << 20);
        assert_eq!(s.malloc, None);
        let f = figures(&s, Some(15 << 20));
        let get = |n: &str| f.iter().find(|x| x.0 == n).map(|x| x.2);
        assert_eq!(get("malloc_total"), Some(4 << 20));
        assert_eq!(get("threads"), Some(12));
        assert_eq!(get("rss_outside_nmt"), Some(5 << 20));
    }

    #[test]
    fn failures_are_told_apart_and_nothing_panics() {
        assert_eq!(
            parse_summary("30278:\nNative memory tracking is not enabled\n"),
            Err(SummaryError::NotEnabled)
        );
        let refused = "999999:\njava.io.IOException: No such process\n\tat jdk.attach/sun.tools.attach.VirtualMachineImpl.sendQuitTo(Native Method)\n";
        assert_eq!(
            parse_summary(refused),
            Err(SummaryError::Other(
                "java.io.IOException: No such process".into()
            ))
        );
        for text in [
            "",
            "Total:",
            "Total: reserved=KB, committed=1KB",
            "Total: reserved=99999999999999999999KB, committed=1KB",
            "Total: reserved=1TB, committed=1KB",
            "- Java Heap (reserved=1KB",
            "Total: reserved=1KB, committed=1KB\n- (\n-\n(thread #\n(stack:\n(malloc=",
            "Total: reserved=1KB, committed=1KB\n-  é (reserved=5KB, committed=ü",
        ] {
            let _ = parse_summary(text);
        }
        let s = parse_summary("Total: reserved=1KB, committed=1KB\n- X (reserved=18446744073709551615GB, committed=1B)").unwrap();
        assert_eq!(s.categories[0].reserved, u64::MAX);
        assert_eq!(first_words(""), "no output");
    }

    #[test]
    fn category_names_become_snake_case_keys() {
        assert_eq!(category_key("Java Heap"), "committed.java_heap");
        assert_eq!(category_key("Native Memory Tracking"), "committed.nmt");
        assert_eq!(category_key("Arena Chunk"), "committed.arena_chunk");
        assert_eq!(category_key("GC"), "committed.gc");
        assert_eq!(
            category_key(" Shared class space "),
            "committed.shared_class_space"
        );
    }

    #[test]
    fn sigquit_and_release_files() {
        assert_eq!(
            catches_sigquit("Name:\tjava\nSigCgt:\t2000000181005cce\n"),
            Some(true)
        );
        assert_eq!(catches_sigquit("SigCgt:\t0000000000000000\n"), Some(false));
        assert_eq!(catches_sigquit("SigCgt:\tzz\n"), None);
        assert_eq!(
            parse_release("IMPLEMENTOR=\"Debian\"\nJAVA_VERSION=\"17.0.15\"\n"),
            Some("17.0.15".into())
        );
        assert_eq!(parse_release("JAVA_VERSION=\"\"\n"), None);
    }

    #[test]
    fn instrument_appends_to_java_tool_options() {
        let mut p = JvmProbe::new(1000);
        let mut env = vec![("JAVA_TOOL_OPTIONS".to_string(), "-Xmx64m".to_string())];
        p.instrument(&mut env);
        assert_eq!(
            env,
            [(
                "JAVA_TOOL_OPTIONS".to_string(),
                format!("-Xmx64m {NMT_OPTION}")
            )]
        );
        assert_eq!(JvmProbe::new(20_000).gap, Duration::from_secs(20));
        assert_eq!(JvmProbe::new(100).gap, MIN_GAP);
    }

    #[test]
    fn a_run_without_jvm_says_so() {
        let p = Box::new(JvmProbe::new(1000));
        let mut record = RunRecord::skeleton("glibc", 0, false, String::new());
        p.finish(&RunEnd::default(), &mut record);
        assert!(record
            .inside
            .absence(NAME)
            .unwrap()
            .starts_with("no JVM ran"));
    }
}
