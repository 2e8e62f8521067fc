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

mod find;
mod jcmd;
mod summary;

use find::*;
use jcmd::*;
#[cfg(test)]
use summary::category_key;
use summary::Figure;
pub use summary::{figures, mapped_figures, Category, Summary, SummaryError};
pub(crate) use summary::{first_words, parse_summary};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::probe::budget::CpuBudget;
use crate::probe::tree::Helpers;
use crate::probe::{append_env, Member, Probe, RunEnd, Tick, TickKind};
use crate::record::{Absence, FigureUnit, RunRecord, RuntimeFigure, RuntimeSeries, RuntimeView};

/// The probe's name, in records and messages.
pub const NAME: &str = "jvm";
/// What the workload's JVMs are given.
pub(crate) const NMT_OPTION: &str = "-XX:NativeMemoryTracking=summary";
/// The shortest time between two reads of one JVM.
pub(crate) const MIN_GAP: Duration = Duration::from_secs(5);
/// A jcmd that has not exited by then is killed.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
/// jcmd processes running at once, over all the run's JVMs.
pub(crate) const MAX_IN_FLIGHT: usize = 2;
/// How often a process found not to be a JVM is looked at again (a launcher that loads
/// `libjvm.so` itself does so after it started).
const RECHECK: Duration = Duration::from_secs(5);
/// How long a JVM may not catch SIGQUIT (it is starting up) before that is its failure.
const STARTUP_GRACE: Duration = Duration::from_secs(2);
/// Reads that fail in a row before a JVM is left alone.
const MAX_FAILURES: u32 = 3;
/// Share of one core the smaps reads after NMT's summaries may use, and the CPU time they
/// may take at once at the start.
const SMAPS_CPU_FRACTION: f64 = 0.005;
const SMAPS_BURST: Duration = Duration::from_millis(40);
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
    /// The budget of reading the JVMs' smaps after their summaries, the CPU time they took
    /// and how many were read.
    smaps_budget: CpuBudget,
    smaps_cpu: Duration,
    smaps_reads: u32,
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
            smaps_budget: CpuBudget::new(SMAPS_CPU_FRACTION, SMAPS_BURST),
            smaps_cpu: Duration::ZERO,
            smaps_reads: 0,
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
                    let mut f = figures(&s, alive.map(|m| m.rss_bytes));
                    // The mappings NMT's reservations occupy, read right after it, within
                    // their budget of CPU time (a JVM of many GiB takes milliseconds a
                    // read; counted in wall time, a busy machine's wait for a CPU spent it).
                    let started = Instant::now();
                    if self.smaps_budget.due(started) {
                        let cpu = crate::linux::proc::thread_cpu();
                        if let Some(smaps) =
                            std::fs::read_to_string(format!("/proc/{}/smaps", key.0))
                                .ok()
                                .and_then(|t| crate::linux::regions::parse_smaps(&t).ok())
                        {
                            f.extend(mapped_figures(&s, &smaps));
                        }
                        let cost = crate::linux::proc::thread_cpu().saturating_sub(cpu);
                        self.smaps_budget.spent(started, cost);
                        self.smaps_cpu += cost;
                        self.smaps_reads += 1;
                    }
                    jvm.latest = Some(f);
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
             outside the run's processes. After each read the JVM's /proc/PID/smaps is read \
             within 0.5% of a core in CPU time plus a 40 ms burst ({:.1} ms of CPU a read) to find the mappings NMT's \
             reservations occupy: the Java heap \
             and class space by their exact reserved size, the code cache as the executable \
             stretch, thread stacks by their shape (resident.*).",
            self.gap.as_secs(),
            self.reads_ok,
            view.processes,
            self.reads_failed,
            self.cpu.as_secs_f64(),
            per_read,
            self.smaps_cpu.as_secs_f64() * 1000.0 / f64::from(self.smaps_reads.max(1)),
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

    const JDK17: &str = include_str!("../../../tests/fixtures/jvm/nmt-summary-jdk17.txt");

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
        assert_eq!(thread.stack_reserved, Some(70656 * 1024));
        let heap = s.categories.iter().find(|c| c.name == "Java Heap").unwrap();
        assert_eq!(heap.mmap_reserved, Some(6_172_672 * 1024));
        let f = figures(&s, None);
        let get = |n: &str| f.iter().find(|x| x.0 == n).map(|x| x.2);
        assert_eq!(get("mmap_reserved.java_heap"), Some(6_172_672 * 1024));
        assert_eq!(get("mmap_reserved.code"), Some(247_688 * 1024));
        assert_eq!(get("thread_stacks_reserved"), Some(70656 * 1024));
        assert_eq!(get("mmap_reserved.compiler"), None, "no mmap line");
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
