//! The allocator probe: memtrial's own small library (`probe-shim/shim.c`, built by the
//! build and embedded) is preloaded into the workload's processes after the variant's
//! allocator. Each process appends one line per interval to `<dir>/<pid>` with the active
//! allocator's own counters; this probe reads the new lines on the run's clock and sums
//! the latest line of every live process into one series of live vs held bytes. Every line
//! is a point at the moment it was written (the library's clock is the run's): the library
//! samples densely at the start and at each new high of resident memory, between memtrial's
//! ticks, and those are the samples that bracket a short run's peak.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::reports::{ProcessReports, ReportDir};
use super::{append_env, Probe, RunEnd, Tick, TickKind};
use crate::record::{Absence, AllocatorPoint, AllocatorView, RunRecord};

/// The probe's name, in records and messages.
pub const NAME: &str = crate::record::inside::ALLOCATOR_PROBE;

/// The probe library built from probe-shim/shim.c by build.rs (which fails without a C
/// compiler).
const SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmemtrial-probe.so"));

/// Which probe library runs inside the workload, for the experiment's notes: its size and
/// the start of its SHA-256, so records of two memtrial builds can be told apart — or,
/// when it could not be written where the loader reads it, that it is in no workload, and
/// why (each run's record says so too).
pub fn library_note() -> String {
    match shim_path() {
        Ok(_) => format!(
            "allocator probe: memtrial's embedded libmemtrial-probe.so ({} KiB, SHA-256 {})",
            SHIM.len().div_ceil(1024),
            &crate::units::sha256_hex(SHIM)[..16]
        ),
        Err(e) => format!("allocator probe: in no workload: {e}"),
    }
}

/// The embedded library as [`write_library`] wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenLibrary {
    /// Where, absolute.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: usize,
    /// Its SHA-256, hex: the one [`library_note`] records (there, its first 16 digits).
    pub sha256: String,
}

/// Writes the embedded library to `path` (whole or not at all, mode 0644), for a user who
/// preloads it into processes memtrial does not start (`memtrial probe-library`).
pub fn write_library(path: &std::path::Path) -> Result<WrittenLibrary, super::files::WriteError> {
    let path = super::files::write_atomic(path, SHIM, 0o644)?;
    Ok(WrittenLibrary {
        path,
        bytes: SHIM.len(),
        sha256: crate::units::sha256_hex(SHIM),
    })
}

/// Where the embedded library is written for the loader: once per memtrial process.
pub(crate) fn shim_path() -> Result<PathBuf, String> {
    static PATH: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| super::files::install("libmemtrial-probe", "so", SHIM))
        .clone()
}

/// One process's latest report.
#[derive(Debug, Default)]
struct ProcessFile {
    allocator: String,
    library: String,
    latest: Option<Line>,
    /// The latest line is the one written at exit.
    exited: bool,
    /// The next figures line is the one written at exit (after `# exit`).
    exit_next: bool,
    /// Figures lines not yet made points of the series, in the order written.
    pending: Vec<Timed>,
}

/// One figures line with the moment it was written.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Timed {
    /// `CLOCK_MONOTONIC`, nanoseconds.
    ns: u64,
    line: Line,
    /// Written at exit.
    exited: bool,
}

/// At most this many lines of one process wait to become points; beyond it (a writer far
/// faster than the library's schedule) the newest replaces the last waiting one.
const MAX_PENDING: usize = 4096;

impl ProcessReports for ProcessFile {
    fn line(&mut self, line: &str) -> bool {
        if line == "# exit" {
            self.exit_next = true;
        } else if let Some((allocator, library)) = parse_header(line) {
            self.allocator = allocator;
            self.library = library;
            self.exit_next = false;
        } else if let Some((ns, l)) =
            parse_timed(line).filter(|(_, l)| Line { rss: None, ..*l } != Line::default())
        {
            // A line with no figure at all (an allocator not yet initialised) says nothing.
            self.latest = Some(l);
            self.exited = std::mem::take(&mut self.exit_next);
            let t = Timed {
                ns,
                line: l,
                exited: self.exited,
            };
            if self.pending.len() >= MAX_PENDING {
                self.pending.pop();
            }
            self.pending.push(t);
            return true;
        }
        false
    }
}

/// One report line of the library: figures in bytes (arenas: a count).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Line {
    live: Option<u64>,
    held: Option<u64>,
    free: Option<u64>,
    resident: Option<u64>,
    mapped: Option<u64>,
    retained: Option<u64>,
    metadata: Option<u64>,
    arenas: Option<u64>,
    thread_cache: Option<u64>,
    /// The process's resident bytes when the sample was taken (a trailing field that
    /// libraries of older releases do not write).
    rss: Option<u64>,
}

/// Parses one figures line (`<ns> <live> <held> … <thread cache> [<rss>]`, tab-separated,
/// `-` for a figure the allocator does not offer). `None` for anything malformed.
#[cfg(test)]
fn parse_line(line: &str) -> Option<Line> {
    parse_timed(line).map(|(_, l)| l)
}

/// A figures line with the moment it was written (`CLOCK_MONOTONIC` ns).
fn parse_timed(line: &str) -> Option<(u64, Line)> {
    let mut f = line.split('\t');
    let ns = f.next()?.parse::<u64>().ok()?;
    let mut v = || -> Option<Option<u64>> {
        match f.next()? {
            "-" => Some(None),
            s => s.parse().ok().map(Some),
        }
    };
    let line = Line {
        live: v()?,
        held: v()?,
        free: v()?,
        resident: v()?,
        mapped: v()?,
        retained: v()?,
        metadata: v()?,
        arenas: v()?,
        thread_cache: v()?,
        rss: None,
    };
    let rss = match f.next() {
        None => None,
        Some("-") => None,
        Some(s) => Some(s.parse().ok()?),
    };
    f.next().is_none().then_some((ns, Line { rss, ..line }))
}

/// Parses a header (`# memtrial-probe 1 <pid> <allocator> <library…>`).
fn parse_header(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("# memtrial-probe 1 ")?;
    let mut parts = rest.splitn(3, ' ');
    parts.next()?.parse::<u32>().ok()?;
    Some((parts.next()?.to_string(), parts.next()?.to_string()))
}

/// Sums figures that every process offers; a figure any process lacks is absent.
fn sum(lines: &[Line], t_seconds: f64) -> AllocatorPoint {
    fn add(lines: &[Line], get: impl Fn(&Line) -> Option<u64>) -> Option<u64> {
        lines
            .iter()
            .map(get)
            .try_fold(0u64, |acc, v| v.map(|v| acc.saturating_add(v)))
            .filter(|_| !lines.is_empty())
    }
    AllocatorPoint {
        t_seconds,
        live_bytes: add(lines, |l| l.live),
        held_bytes: add(lines, |l| l.held),
        free_bytes: add(lines, |l| l.free),
        resident_bytes: add(lines, |l| l.resident),
        mapped_bytes: add(lines, |l| l.mapped),
        retained_bytes: add(lines, |l| l.retained),
        metadata_bytes: add(lines, |l| l.metadata),
        arenas: add(lines, |l| l.arenas),
        thread_cache_bytes: add(lines, |l| l.thread_cache),
        rss_bytes: add(lines, |l| l.rss),
    }
}

/// Reads the probe library's reports of one run.
pub struct AllocatorProbe {
    /// The processes' reports; the error says why the probe cannot run (no library, no
    /// directory), decided before launch.
    reports: Result<ReportDir<ProcessFile>, String>,
    interval_ms: u64,
    series: Vec<AllocatorPoint>,
    /// Parallel to `series`: the point holds only samples written at exit.
    at_exit: Vec<bool>,
    /// The latest line of each process in the run (and whether it was written at exit).
    current: BTreeMap<i32, (Line, bool)>,
    /// The run's start on `CLOCK_MONOTONIC`, in ns (learnt at the first tick).
    start_ns: Option<i128>,
    /// Processes in the run at any tick since the files were last read.
    members_since: BTreeSet<i32>,
    /// The next tick (seconds) at which the files are read.
    next_read: f64,
}

/// After the run's first second the report files are read at most this often: every line
/// carries the moment it was written, so reading later loses nothing, and a directory
/// listing plus a read per process at every tick was a tenth of memtrial's cost of
/// sampling a 1000-thread process.
pub(crate) const READ_EVERY_SECONDS: f64 = 0.5;

impl AllocatorProbe {
    /// A probe whose processes report into `dir` (created here) every `interval_ms`.
    pub fn new(dir: PathBuf, interval_ms: u64) -> AllocatorProbe {
        // The holes' directory: the library writes its accounts of free memory only where
        // it exists.
        let reports = ReportDir::create(dir).and_then(|r| {
            super::reports::fresh_dir(&r.dir().join(super::holes::DIR))?;
            Ok(r)
        });
        AllocatorProbe {
            reports,
            interval_ms,
            series: Vec::new(),
            at_exit: Vec::new(),
            current: BTreeMap::new(),
            start_ns: None,
            members_since: BTreeSet::new(),
            next_read: 0.0,
        }
    }

    /// Makes every waiting line of the processes in `pids` a point at the moment it was
    /// written (no later than now, when it was read), on the run's clock from `start_ns`
    /// (the first one given is kept); lines of other processes are history and dropped.
    fn points(&mut self, start_ns: i128, pids: &BTreeSet<i32>) {
        let Ok(reports) = self.reports.as_mut() else {
            return;
        };
        let start = *self.start_ns.get_or_insert(start_ns);
        let read_at = super::seconds_since(start);
        self.current.retain(|pid, _| pids.contains(pid));
        let mut events: Vec<(i32, Timed)> = Vec::new();
        for (pid, state) in reports.each_mut() {
            let waiting = std::mem::take(&mut state.pending);
            if pids.contains(&pid) {
                events.extend(waiting.into_iter().map(|t| (pid, t)));
            }
        }
        reports.sampled(pids.clone());
        let _ = reports.take_point(pids);
        events.sort_by_key(|(pid, t)| (t.ns, *pid));
        let mut last_t = self.series.last().map_or(0.0, |p| p.t_seconds);
        for (pid, t) in events {
            self.current.insert(pid, (t.line, t.exited));
            let at = ((t.ns as i128 - start) as f64 / 1e9).clamp(last_t, read_at.max(last_t));
            last_t = at;
            let lines: Vec<Line> = self.current.values().map(|(l, _)| *l).collect();
            self.at_exit.push(self.current.values().all(|(_, e)| *e));
            self.series.push(sum(&lines, at));
        }
    }

    fn view(
        &self,
        reports: &ReportDir<ProcessFile>,
        record: &RunRecord,
        end: &RunEnd,
        pids: &BTreeSet<i32>,
    ) -> Result<AllocatorView, String> {
        let reporting: Vec<&ProcessFile> = reports
            .states()
            .filter(|f| !f.allocator.is_empty())
            .collect();
        if reporting.is_empty() {
            return Err(why_no_reports(record, end.t_seconds));
        }
        let mut answered: Vec<&str> = reporting.iter().map(|f| f.allocator.as_str()).collect();
        answered.sort_unstable();
        answered.dedup();
        let mut libraries: Vec<&str> = reporting.iter().map(|f| f.library.as_str()).collect();
        libraries.sort_unstable();
        libraries.dedup();
        let answered = answered.join("+");
        let detected = record
            .allocator_detected
            .split_whitespace()
            .next()
            .unwrap_or("");
        let disagreement = (!detected.is_empty()
            && detected != "unknown"
            && !answered.split('+').any(|a| a == detected))
        .then(|| {
            format!(
                "the probe found {answered} answering malloc, verification found {}",
                record.allocator_detected
            )
        });
        let at_peak = at_peak(&self.series, &self.at_exit);
        Ok(AllocatorView {
            answered,
            library: libraries.join(" "),
            processes: reporting.len() as u32,
            interval_ms: self.interval_ms,
            disagreement,
            at_peak,
            peak_live_bytes: self.series.iter().filter_map(|p| p.live_bytes).max(),
            peak_held_bytes: self.series.iter().filter_map(|p| p.held_bytes).max(),
            series: self.series.clone(),
            holes: self.start_ns.and_then(|start| {
                let accounts = super::holes::read_dir(&reports.dir().join(super::holes::DIR), pids);
                super::holes::sum(&accounts, start)
            }),
        })
    }
}

/// The point where the allocator held the most and, of those, where live was highest
/// (`AllocatorPoint::most_held`). Samples written at exit count only when there is nothing
/// else: by then the program has freed what it frees, while an allocator that keeps what it
/// got still holds its peak.
fn at_peak(series: &[AllocatorPoint], at_exit: &[bool]) -> Option<AllocatorPoint> {
    let running = series
        .iter()
        .zip(at_exit.iter().chain(std::iter::repeat(&false)))
        .filter(|(_, exited)| !**exited)
        .map(|(p, _)| p);
    AllocatorPoint::most_held(running)
        .or_else(|| AllocatorPoint::most_held(series))
        .cloned()
}

/// `CLOCK_MONOTONIC` now, in ns: the clock the library stamps its lines with (and the one
/// `Instant` reads on Linux).
pub(crate) fn monotonic_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// The latest report of one process, as the exporter shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LatestReport {
    /// The allocator the probe found answering `malloc` (`glibc`, `jemalloc`, …).
    pub allocator: String,
    /// Bytes the program has allocated and not freed (allocator's own counter).
    pub live_bytes: Option<u64>,
    /// Bytes the allocator holds from the OS for it.
    pub held_bytes: Option<u64>,
    /// Its arenas (jemalloc's `arenas.narenas`), where it counts them.
    pub arenas: Option<u64>,
}

/// At most this much of a report file's end is read: the latest lines are there.
const TAIL: u64 = 8192;

/// The latest report in one process's file (`<MEMTRIAL_PROBE_DIR>/<pid>`): its header
/// (the file's first line) and its last whole figures line, read from the file's end
/// only, so a file that grew for days costs two small reads. `None` when the file holds
/// no figures yet.
pub(crate) fn latest_report(path: &std::path::Path) -> std::io::Result<Option<LatestReport>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let mut head = [0u8; 1024];
    let n = f.read(&mut head)?;
    let len = f.metadata()?.len();
    let from = len.saturating_sub(TAIL);
    f.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::with_capacity(TAIL as usize);
    f.take(TAIL).read_to_end(&mut tail)?;
    Ok(latest_of(&head[..n], &tail, from > 0))
}

/// The latest report from a file's first bytes and its last bytes (`cut`: the tail starts
/// mid-file, so its first line may be partial). Whole lines only.
pub(crate) fn latest_of(head: &[u8], tail: &[u8], cut: bool) -> Option<LatestReport> {
    let mut state = ProcessFile::default();
    if let Some(end) = head.iter().position(|b| *b == b'\n') {
        state.line(&String::from_utf8_lossy(&head[..end]));
    }
    let whole = match tail.iter().rposition(|b| *b == b'\n') {
        Some(end) => &tail[..end],
        None => return None,
    };
    let mut lines = whole.split(|b| *b == b'\n');
    if cut {
        lines.next();
    }
    for l in lines {
        state.line(&String::from_utf8_lossy(l));
    }
    let latest = state.latest?;
    Some(LatestReport {
        allocator: if state.allocator.is_empty() {
            "unknown".into()
        } else {
            state.allocator
        },
        live_bytes: latest.live,
        held_bytes: latest.held,
        arenas: latest.arenas,
    })
}

/// The library's first sample in a process is due this long after the process started
/// (`FIRST_NS` in probe-shim/shim.c).
pub(crate) const FIRST_SAMPLE_MS: u64 = 10;

/// A run this short may have ended before any process's first sample was due.
const SHORT_RUN_SECONDS: f64 = 0.05;

/// Why no process reported: the kernel-side facts of the run say which case it is.
fn why_no_reports(record: &RunRecord, run_seconds: f64) -> String {
    if record.allocator_detected.contains("static") {
        "the program is statically linked: the loader preloads nothing into it".into()
    } else if run_seconds < SHORT_RUN_SECONDS {
        format!(
            "the run took {:.0} ms: the probe's first sample is due {} ms after a process \
             starts",
            run_seconds * 1000.0,
            FIRST_SAMPLE_MS
        )
    } else if record.processes_seen == 0 {
        "no process of the run lived long enough to be seen".into()
    } else {
        "no process loaded the probe library (a statically linked program, a setuid one, \
         or one that resets LD_PRELOAD)"
            .into()
    }
}

impl Probe for AllocatorProbe {
    fn instrument(&mut self, env: &mut Vec<(String, String)>) {
        let Ok(reports) = &self.reports else {
            return;
        };
        let dir = reports.dir().display().to_string();
        match shim_path() {
            Ok(lib) => {
                append_env(env, "LD_PRELOAD", &lib.display().to_string(), ' ');
                env.push(("MEMTRIAL_PROBE_DIR".into(), dir));
                env.push((
                    "MEMTRIAL_PROBE_INTERVAL_MS".into(),
                    self.interval_ms.to_string(),
                ));
                // A run reads each file whole, exit sample included: never the bounded
                // production mode, though memtrial's own environment asks for it.
                env.push(("MEMTRIAL_PROBE_MAX_BYTES".into(), String::new()));
            }
            Err(why) => self.reports = Err(why),
        }
    }

    fn observe(&mut self, tick: &Tick) {
        if tick.kind != TickKind::Sample {
            return;
        }
        self.members_since
            .extend(tick.members.iter().map(|m| m.pid));
        if tick.t_seconds < self.next_read {
            return;
        }
        if tick.t_seconds >= 1.0 {
            self.next_read = tick.t_seconds + READ_EVERY_SECONDS;
        }
        if let Ok(reports) = self.reports.as_mut() {
            reports.read_new();
        }
        // The lines of every process that was in the run since the last read; then only
        // the processes in it now stay current.
        let since = std::mem::take(&mut self.members_since);
        self.points(tick.start_ns, &since);
        let now: BTreeSet<i32> = tick.members.iter().map(|m| m.pid).collect();
        self.current.retain(|pid, _| now.contains(pid));
        if let Ok(reports) = self.reports.as_mut() {
            reports.sampled(now);
        }
    }

    fn finish(mut self: Box<Self>, end: &RunEnd, record: &mut RunRecord) {
        let Some(mut pids) = super::reports::end_of_run(&mut self.reports, NAME, record) else {
            return;
        };
        pids.append(&mut self.members_since);
        self.points(super::start_ns_of(end.t_seconds), &pids);
        let view = match &self.reports {
            Ok(reports) => self.view(reports, record, end, &pids),
            Err(reason) => Err(reason.clone()),
        };
        match view {
            Ok(v) => record.inside.allocator = Some(v),
            Err(reason) => record.inside.absent.push(Absence {
                probe: NAME.into(),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_report_takes_the_header_and_the_last_whole_line() {
        let file = "# memtrial-probe 1 42 jemalloc /usr/lib/libjemalloc.so.2\n\
                    1\t100\t200\t-\t-\t-\t-\t-\t-\t-\n\
                    2\t150\t300\t-\t-\t-\t-\t-\t-\t-\n\
                    3\t99";
        let r = latest_of(file.as_bytes(), file.as_bytes(), false).unwrap();
        assert_eq!(r.allocator, "jemalloc");
        assert_eq!((r.live_bytes, r.held_bytes), (Some(150), Some(300)));
        // A tail cut mid-line skips the partial first line.
        let tail = &file.as_bytes()[70..];
        let r = latest_of(file.as_bytes(), tail, true).unwrap();
        assert_eq!((r.live_bytes, r.held_bytes), (Some(150), Some(300)));
        // A header only, or nothing whole: no report.
        let header = "# memtrial-probe 1 42 glibc -\n";
        assert!(latest_of(header.as_bytes(), header.as_bytes(), false).is_none());
        assert!(latest_of(b"", b"1\t2", false).is_none());
    }

    proptest::proptest! {
        #[test]
        fn latest_of_never_panics(
            head in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            cut in proptest::bool::ANY,
        ) {
            let _ = latest_of(&head, &tail, cut);
        }

        #[test]
        fn latest_of_text_never_panics(text in "[#0-9\t\n -]{0,200}|\\PC{0,120}") {
            let _ = latest_of(text.as_bytes(), text.as_bytes(), true);
        }
    }

    #[test]
    fn a_bounded_file_restarted_still_gives_its_latest_line() {
        let header = "# memtrial-probe 1 7 glibc /lib/x86_64-linux-gnu/libc.so.6\n";
        let old =
            format!("{header}1\t10\t20\t-\t-\t-\t-\t-\t-\t-\n2\t11\t21\t-\t-\t-\t-\t-\t-\t-\n");
        let new = format!("{header}3\t12\t22\t-\t-\t-\t-\t-\t-\t-\n");
        // Read whole after the restart, or the header read before it and the tail after.
        for head in [&new, &old] {
            let r = latest_of(head.as_bytes(), new.as_bytes(), false).unwrap();
            assert_eq!(r.allocator, "glibc");
            assert_eq!((r.live_bytes, r.held_bytes), (Some(12), Some(22)));
        }
        // Read between the truncation and the write: nothing, for that moment only.
        assert!(latest_of(b"", b"", false).is_none());
        assert!(latest_of(old.as_bytes(), b"", false).is_none());
    }

    #[test]
    fn latest_report_reads_a_real_file_from_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("7");
        let mut text = String::from("# memtrial-probe 1 7 glibc -\n");
        for i in 0..2000u64 {
            text.push_str(&format!(
                "{i}\t{}\t{}\t-\t-\t-\t-\t-\t1\t-\n",
                i * 10,
                i * 20
            ));
        }
        std::fs::write(&p, &text).unwrap();
        let r = latest_report(&p).unwrap().unwrap();
        assert_eq!(r.allocator, "glibc");
        assert_eq!((r.live_bytes, r.held_bytes), (Some(19990), Some(39980)));
        assert!(latest_report(&dir.path().join("8")).is_err());
    }

    #[test]
    fn a_flood_of_lines_waits_in_bounded_memory_and_odd_clocks_stay_in_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut probe = AllocatorProbe::new(dir.path().join("a"), 1000);
        let mut text = String::from("# memtrial-probe 1 7 glibc -\n");
        for i in 0..(MAX_PENDING as u64 + 500) {
            text.push_str(&format!("{}\t{i}\t{i}\t-\t-\t-\t-\t-\t-\t-\n", 1 + i));
        }
        // A clock far in the future and one at zero: both land within the run.
        text.push_str(
            "18446744073709551000\t5\t5\t-\t-\t-\t-\t-\t-\t-\n0\t6\t6\t-\t-\t-\t-\t-\t-\t-\n",
        );
        std::fs::write(dir.path().join("a").join("7"), text).unwrap();
        if let Ok(r) = probe.reports.as_mut() {
            r.read_new();
            assert!(r.states().all(|f| f.pending.len() <= MAX_PENDING));
        }
        let start = super::super::start_ns_of(2.5);
        probe.points(start, &[7].into());
        let read_at = super::super::seconds_since(start);
        assert!(!probe.series.is_empty() && probe.series.len() <= MAX_PENDING);
        assert!(probe
            .series
            .iter()
            .all(|p| (0.0..=read_at).contains(&p.t_seconds)));
        assert!(probe
            .series
            .windows(2)
            .all(|w| w[0].t_seconds <= w[1].t_seconds));
    }

    /// A tick that reads the files long after it began (the probes before it took 0.4 s on
    /// a busy machine) places each line at the moment it was written, not at the tick's.
    #[test]
    fn lines_read_late_keep_the_moments_they_were_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut probe = AllocatorProbe::new(dir.path().join("a"), 1000);
        // The tick began at 1.0 s on the run's clock; it is 2.0 s now.
        let start = super::super::start_ns_of(2.0);
        let mut text = String::from("# memtrial-probe 1 7 glibc -\n");
        for ms in [1200, 1300, 1900] {
            let ns = start + ms * 1_000_000;
            text.push_str(&format!("{ns}\t{ms}\t{ms}\t-\t-\t-\t-\t-\t-\t-\n"));
        }
        std::fs::write(dir.path().join("a").join("7"), text).unwrap();
        if let Ok(r) = probe.reports.as_mut() {
            r.read_new();
        }
        probe.points(start, &[7].into());
        let at: Vec<f64> = probe.series.iter().map(|p| p.t_seconds).collect();
        assert_eq!(at.len(), 3, "{at:?}");
        for (t, want) in at.iter().zip([1.2, 1.3, 1.9]) {
            assert!((t - want).abs() < 1e-6, "{at:?}");
        }
    }

    #[test]
    fn a_run_shorter_than_the_first_sample_says_so() {
        let mut r = RunRecord::skeleton("v", 0, false, "now".into());
        r.processes_seen = 1;
        assert!(why_no_reports(&r, 0.002).contains("first sample is due 10 ms"));
        assert!(why_no_reports(&r, 2.0).contains("no process loaded the probe library"));
        r.allocator_detected = "static".into();
        assert!(why_no_reports(&r, 0.002).contains("statically linked"));
    }

    #[test]
    fn lines_parse_with_absent_figures() {
        let l = parse_line("123\t100\t200\t-\t-\t0\t-\t-\t-\t-").unwrap();
        assert_eq!(l.live, Some(100));
        assert_eq!(l.held, Some(200));
        assert_eq!(l.free, None);
        assert_eq!(l.mapped, Some(0));
        assert!(parse_line("123\t100").is_none());
        assert!(parse_line("x\t1\t2\t3\t4\t5\t6\t7\t8\t9").is_none());
        // The resident bytes at the sample, a trailing field older libraries do not write.
        assert_eq!(l.rss, None);
        let l = parse_line("1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10").unwrap();
        assert_eq!((l.thread_cache, l.rss), (Some(9), Some(10)));
        assert_eq!(
            parse_line("1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t-").unwrap().rss,
            None
        );
        assert!(parse_line("1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11").is_none());
        assert!(parse_line("1\t1\t2\t3\t4\t5\t6\t7\t8\t9\tx").is_none());
        assert!(parse_line("1\t-1\t2\t3\t4\t5\t6\t7\t8\t9").is_none());
    }

    #[test]
    fn headers_keep_a_library_path_with_spaces() {
        assert_eq!(
            parse_header("# memtrial-probe 1 42 jemalloc /opt/my libs/libjemalloc.so.2"),
            Some(("jemalloc".into(), "/opt/my libs/libjemalloc.so.2".into()))
        );
        assert_eq!(parse_header("# memtrial-probe 2 42 x y"), None);
    }

    #[test]
    fn a_figure_one_process_lacks_is_absent_from_the_sum() {
        let a = Line {
            live: Some(10),
            held: Some(20),
            ..Default::default()
        };
        let b = Line {
            live: Some(5),
            held: None,
            ..Default::default()
        };
        let p = sum(&[a, b], 1.0);
        assert_eq!(p.live_bytes, Some(15));
        assert_eq!(p.held_bytes, None);
        assert_eq!(sum(&[], 1.0).live_bytes, None);
    }

    #[test]
    fn the_peak_is_where_the_allocator_held_most() {
        let p = |t: f64, live: u64, held: Option<u64>| AllocatorPoint {
            t_seconds: t,
            live_bytes: Some(live),
            held_bytes: held,
            ..Default::default()
        };
        let s = [
            p(0.1, 1, Some(5)),
            p(0.2, 50, Some(90)),
            p(0.3, 40, Some(90)),
            p(0.4, 60, Some(70)),
            p(0.5, 1, Some(95)),
        ];
        // The exit sample holds the most, but the program had freed everything by then.
        let exits = [false, false, false, false, true];
        assert_eq!(at_peak(&s, &exits).unwrap().t_seconds, 0.2);
        // Held peaks at 90 twice: live was highest (50) at 0.2.
        assert_eq!(at_peak(&s[..4], &exits[..4]).unwrap().t_seconds, 0.2);
        // Only an exit sample: it is all there is.
        assert_eq!(at_peak(&s[4..], &exits[4..]).unwrap().t_seconds, 0.5);
        // glibc keeps what it got: held 1% higher a moment later, after live fell by a
        // fifth, is still the peak's held; live at the peak is the higher one.
        let flat = [p(0.1, 80, Some(1000)), p(0.2, 64, Some(1010))];
        assert_eq!(at_peak(&flat, &[]).unwrap().t_seconds, 0.1);
        // Held 3% below the most is not the peak, whatever live was.
        let lower = [p(0.1, 90, Some(970)), p(0.2, 50, Some(1000))];
        assert_eq!(at_peak(&lower, &[]).unwrap().t_seconds, 0.2);
        let live_only = [p(0.1, 1, None), p(0.2, 9, None), p(0.3, 4, None)];
        assert_eq!(at_peak(&live_only, &[]).unwrap().t_seconds, 0.2);
        assert!(at_peak(&[], &[]).is_none());
    }

    #[test]
    fn headers_exit_marks_and_empty_lines_are_told_apart() {
        let mut st = ProcessFile::default();
        assert!(!st.line("# memtrial-probe 1 7 glibc /lib/libc.so.6"));
        assert_eq!(st.allocator, "glibc");
        assert!(st.line("1\t10\t20\t-\t-\t-\t-\t-\t-\t-"));
        assert!(!st.exited);
        assert!(!st.line("2\t-\t-\t-\t-\t-\t-\t-\t-\t-"), "no figure at all");
        assert_eq!(st.latest.unwrap().live, Some(10));
        assert!(!st.line("# exit"));
        assert!(st.line("3\t1\t40\t-\t-\t-\t-\t-\t-\t-"));
        assert!(st.exited);
        assert_eq!(st.latest.unwrap().held, Some(40));
    }
}
