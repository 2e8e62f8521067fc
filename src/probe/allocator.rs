//! The allocator probe: memtrial's own small library (`probe-shim/shim.c`, built by the
//! build and embedded) is preloaded into the workload's processes after the variant's
//! allocator. Each process appends one line per interval to `<dir>/<pid>` with the active
//! allocator's own counters; this probe reads the new lines on the run's clock and sums
//! the latest line of every live process into one series of live vs held bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{append_env, Probe, RunEnd, Tick, TickKind};
use crate::record::{Absence, AllocatorPoint, AllocatorView, RunRecord};

/// The probe's name, in records and messages.
pub const NAME: &str = "allocator";

#[cfg(memtrial_probe_shim)]
const SHIM: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libmemtrial-probe.so"
)));
#[cfg(not(memtrial_probe_shim))]
const SHIM: Option<&[u8]> = None;

/// Where the embedded library is written for the loader: once per memtrial process.
pub fn shim_path() -> Result<PathBuf, String> {
    static PATH: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let bytes = SHIM.ok_or_else(|| {
            "this memtrial was built without a C compiler, so it has no allocator probe \
             (install gcc and libc6-dev and rebuild)"
                .to_string()
        })?;
        super::files::install("libmemtrial-probe", "so", bytes)
    })
    .clone()
}

/// One process's latest report.
#[derive(Debug, Default)]
struct ProcessFile {
    /// Bytes of the file consumed so far (whole lines only).
    offset: u64,
    allocator: String,
    library: String,
    latest: Option<Line>,
    /// A line arrived since the last point was taken.
    fresh: bool,
    /// The latest line is the one written at exit.
    exited: bool,
    /// The next figures line is the one written at exit (after `# exit`).
    exit_next: bool,
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
}

/// Parses one figures line (`<ns> <live> <held> … <thread cache>`, tab-separated, `-`
/// for a figure the allocator does not offer). `None` for anything malformed.
fn parse_line(line: &str) -> Option<Line> {
    let mut f = line.split('\t');
    f.next()?.parse::<u64>().ok()?;
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
    };
    f.next().is_none().then_some(line)
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
    }
}

/// Reads the probe library's reports of one run.
pub struct AllocatorProbe {
    dir: PathBuf,
    interval_ms: u64,
    /// Why the probe cannot run (no library), decided before launch.
    unavailable: Option<String>,
    files: BTreeMap<i32, ProcessFile>,
    series: Vec<AllocatorPoint>,
    /// Parallel to `series`: the point holds only samples written at exit.
    at_exit: Vec<bool>,
    /// Pids in the run at the last sample.
    last_members: BTreeSet<i32>,
}

impl AllocatorProbe {
    /// A probe whose processes report into `dir` (created here) every `interval_ms`.
    pub fn new(dir: PathBuf, interval_ms: u64) -> AllocatorProbe {
        let unavailable = std::fs::create_dir_all(&dir)
            .err()
            .map(|e| format!("cannot create {}: {e}", dir.display()));
        AllocatorProbe {
            dir,
            interval_ms,
            unavailable,
            files: BTreeMap::new(),
            series: Vec::new(),
            at_exit: Vec::new(),
            last_members: BTreeSet::new(),
        }
    }

    /// Reads every report file's new whole lines.
    fn read_new(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let state = self.files.entry(pid).or_default();
            read_file(&e.path(), state);
        }
    }

    /// A point from the latest lines of the processes in `pids`, if any of them reported
    /// since the last point.
    fn point(&mut self, t_seconds: f64, pids: &BTreeSet<i32>) -> Option<(AllocatorPoint, bool)> {
        let chosen: Vec<&mut ProcessFile> = self
            .files
            .iter_mut()
            .filter(|(pid, _)| pids.contains(pid))
            .map(|(_, f)| f)
            .collect();
        if !chosen.iter().any(|f| f.fresh) {
            return None;
        }
        let mut lines = Vec::new();
        let mut all_exited = true;
        for f in chosen {
            f.fresh = false;
            lines.extend(f.latest);
            all_exited &= f.exited;
        }
        Some((sum(&lines, t_seconds), all_exited))
    }

    fn push(&mut self, (p, exited): (AllocatorPoint, bool)) {
        self.series.push(p);
        self.at_exit.push(exited);
    }

    fn view(&self, record: &RunRecord) -> Result<AllocatorView, String> {
        let reporting: Vec<&ProcessFile> = self
            .files
            .values()
            .filter(|f| !f.allocator.is_empty())
            .collect();
        if reporting.is_empty() {
            return Err(why_no_reports(record));
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
        })
    }
}

/// The point where the allocator held the most and, of those, where live was highest;
/// where it offers no held figure, where live was highest. Samples written at exit count
/// only when there is nothing else: by then the program has freed what it frees, while an
/// allocator that keeps what it got still holds its peak.
fn at_peak(series: &[AllocatorPoint], at_exit: &[bool]) -> Option<AllocatorPoint> {
    let key = |p: &AllocatorPoint| (p.held_bytes.is_some(), p.held_bytes, p.live_bytes);
    let running = series
        .iter()
        .zip(at_exit.iter().chain(std::iter::repeat(&false)))
        .filter(|(_, exited)| !**exited)
        .map(|(p, _)| p)
        .max_by_key(|p| key(p));
    running
        .or_else(|| series.iter().max_by_key(|p| key(p)))
        .cloned()
}

/// Reads the whole new lines of one report file into `state`.
fn read_file(path: &Path, state: &mut ProcessFile) {
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    if f.seek(SeekFrom::Start(state.offset)).is_err() {
        return;
    }
    let mut buf = Vec::new();
    // Bounded: a misbehaving writer cannot make memtrial read without end.
    if f.take(4 << 20).read_to_end(&mut buf).is_err() {
        return;
    }
    let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
        return;
    };
    state.offset += end as u64 + 1;
    for line in String::from_utf8_lossy(&buf[..end]).lines() {
        if line == "# exit" {
            state.exit_next = true;
        } else if let Some((allocator, library)) = parse_header(line) {
            state.allocator = allocator;
            state.library = library;
            state.exit_next = false;
        } else if let Some(l) = parse_line(line).filter(|l| *l != Line::default()) {
            // A line with no figure at all (an allocator not yet initialised) says nothing.
            state.latest = Some(l);
            state.fresh = true;
            state.exited = std::mem::take(&mut state.exit_next);
        }
    }
}

/// Why no process reported: the kernel-side facts of the run say which case it is.
fn why_no_reports(record: &RunRecord) -> String {
    if record.allocator_detected.contains("static") {
        "the program is statically linked: the loader preloads nothing into it".into()
    } else if record.processes_seen == 0 {
        "no process of the run lived long enough to be seen".into()
    } else {
        "no process loaded the probe library (a statically linked program, a setuid one, \
         or one that resets LD_PRELOAD)"
            .into()
    }
}

impl Probe for AllocatorProbe {
    fn name(&self) -> &'static str {
        NAME
    }

    fn instrument(&mut self, env: &mut Vec<(String, String)>) {
        if self.unavailable.is_some() {
            return;
        }
        match shim_path() {
            Ok(lib) => {
                append_env(env, "LD_PRELOAD", &lib.display().to_string(), ' ');
                env.push(("MEMTRIAL_PROBE_DIR".into(), self.dir.display().to_string()));
                env.push((
                    "MEMTRIAL_PROBE_INTERVAL_MS".into(),
                    self.interval_ms.to_string(),
                ));
            }
            Err(why) => self.unavailable = Some(why),
        }
    }

    fn observe(&mut self, tick: &Tick) {
        if tick.kind != TickKind::Sample || self.unavailable.is_some() {
            return;
        }
        self.read_new();
        let pids: BTreeSet<i32> = tick.members.iter().map(|m| m.pid).collect();
        if let Some(p) = self.point(tick.t_seconds, &pids) {
            self.push(p);
        }
        // Reports of processes no longer in the run are history, not the present.
        for (pid, f) in self.files.iter_mut() {
            if !pids.contains(pid) {
                f.fresh = false;
            }
        }
        self.last_members = pids;
    }

    fn finish(mut self: Box<Self>, end: &RunEnd, record: &mut RunRecord) {
        if let Some(reason) = self.unavailable.take() {
            record.inside.absent.push(Absence {
                probe: NAME.into(),
                reason,
            });
            return;
        }
        // The last reports (a batch job's exit) come from the processes of the last
        // sample and any that reported since.
        self.read_new();
        let mut pids = std::mem::take(&mut self.last_members);
        pids.extend(self.files.iter().filter(|(_, f)| f.fresh).map(|(p, _)| *p));
        if let Some(p) = self.point(end.t_seconds, &pids) {
            self.push(p);
        }
        match self.view(record) {
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
    fn lines_parse_with_absent_figures() {
        let l = parse_line("123\t100\t200\t-\t-\t0\t-\t-\t-\t-").unwrap();
        assert_eq!(l.live, Some(100));
        assert_eq!(l.held, Some(200));
        assert_eq!(l.free, None);
        assert_eq!(l.mapped, Some(0));
        assert!(parse_line("123\t100").is_none());
        assert!(parse_line("x\t1\t2\t3\t4\t5\t6\t7\t8\t9").is_none());
        assert!(parse_line("1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10").is_none());
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
        let live_only = [p(0.1, 1, None), p(0.2, 9, None), p(0.3, 4, None)];
        assert_eq!(at_peak(&live_only, &[]).unwrap().t_seconds, 0.2);
        assert!(at_peak(&[], &[]).is_none());
    }

    #[test]
    fn partial_lines_wait_for_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("7");
        std::fs::write(
            &path,
            "# memtrial-probe 1 7 glibc /lib/libc.so.6\n1\t10\t20\t-\t-\t-\t-\t-\t-\t-\n2\t30",
        )
        .unwrap();
        let mut st = ProcessFile::default();
        read_file(&path, &mut st);
        assert_eq!(st.allocator, "glibc");
        assert_eq!(st.latest.unwrap().live, Some(10));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"\t40\t-\t-\t-\t-\t-\t-\t-\n").unwrap();
        read_file(&path, &mut st);
        assert_eq!(st.latest.unwrap().live, Some(30));
        assert_eq!(st.latest.unwrap().held, Some(40));
        assert!(!st.exited);
        std::io::Write::write_all(&mut f, b"# exit\n3\t1\t40\t-\t-\t-\t-\t-\t-\t-\n").unwrap();
        read_file(&path, &mut st);
        assert!(st.exited);
    }
}
