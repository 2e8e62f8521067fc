//! Where a run's resident memory is, by kind of mapping: every live process's `smaps`
//! read on a thread of its own at new highs of the tree's RSS, and the read that found the
//! most resident bytes kept.
//!
//! A full `smaps` walks the page tables and prints every mapping (a 600 MiB process of 16
//! glibc arenas: ~15 ms of CPU), so it is read:
//! - at each **rung**: the tree's RSS [`RUNG`] (5%, and 1 MiB) past every read asked for so
//!   far, whatever the budget says, while a read costs under [`RUNG_MAX_COST`]. The last
//!   read then lies within 5% of the highest RSS sampled, however the run grows — until it
//!   ends, in steps, or to a plateau. Their cost is bounded by the growth, not the run's
//!   length: a read's cost grows with the memory it walks, so the rungs of a run that grows
//!   to its peak cost about 21 reads at the peak (1 + 1/1.05 + 1/1.05² …);
//! - at the **top** of a step: 2% past the last read where growth pauses (the sample is no
//!   higher than the one before), within [`REGIONS_CPU_FRACTION`] of a core plus a burst
//!   at the start;
//! - every [`PERIOD`] between highs within half that budget, and no more often than the
//!   last read's cost allows at [`PERIODIC_CPU_FRACTION`] of a core, so that every read,
//!   kept as a series, shows the kinds over the whole run (a process of 1000 threads, whose
//!   read costs ~18 ms, is read about every 36 s while it holds still, not every 5 s).
//!
//! Costs are the reading thread's CPU time: on a busy machine a read's wall time is many
//! times its CPU time (a 15 ms read took 100–500 ms here while 16 threads faulted pages in),
//! and a budget of wall time starved the reads near the peak.

use std::time::{Duration, Instant};

use super::background::Background;
use super::budget::CpuBudget;
use super::{Probe, RunEnd, Tick, TickKind};
use crate::linux::maps::Mapping;
use crate::linux::proc::{self, ProcError};
use crate::linux::regions::{parse_smaps, MapStats, Regions};
use crate::record::{RegionsPoint, RegionsRead, RunRecord};

/// Share of one core the `smaps` reads may use over a run (plus the start's burst).
pub(crate) const REGIONS_CPU_FRACTION: f64 = 0.005;

/// CPU time the reads may take at the start of a run on top of the fraction.
pub(crate) const REGIONS_START_BURST: Duration = Duration::from_millis(40);

/// Growth of the tree's RSS past every read so far that makes a rung: a read whatever the
/// budget says (and at least [`STEP_MIN`]).
pub(crate) const RUNG: f64 = 0.05;
/// Growth past the last read that makes a pause at the top of a step worth a read, within
/// the budget (and at least [`STEP_MIN`]).
pub(crate) const TOP: f64 = 0.02;
const STEP_MIN: u64 = 1 << 20;

/// A read dearer than this (CPU time) takes its rungs within the budget too.
pub(crate) const RUNG_MAX_COST: Duration = Duration::from_millis(50);

/// Between new highs, a read at most this often (within the budget): the kinds over time.
pub(crate) const PERIOD: f64 = 5.0;

/// Share of one core the reads between highs may take, judged by the last read's cost: a
/// process holding still costs memtrial no more than this for its series (0.05%: below the
/// ~0.08% a sampler's bare wake-up costs at 100 ms on this kind of machine).
pub(crate) const PERIODIC_CPU_FRACTION: f64 = 0.0005;

/// Seconds from one read between highs to the next after a read of `last_cost`.
fn periodic_gap(last_cost: Duration) -> f64 {
    PERIOD.max(last_cost.as_secs_f64() / PERIODIC_CPU_FRACTION)
}

/// The most reads kept in a run's series: beyond, every other one is dropped (the read
/// with the most resident bytes is kept apart).
pub const SERIES_MAX: usize = 240;

struct Request {
    t_seconds: f64,
    /// When it was asked for: the read's own moment is `t_seconds` plus the wait for the
    /// reading thread (on a busy machine, up to hundreds of milliseconds).
    asked: Instant,
    tree_rss_bytes: u64,
    pids: Vec<i32>,
}

struct Reading {
    request: Request,
    started: Instant,
    cost: Duration,
    /// `None` when a live process's `smaps` could not be read or parsed.
    regions: Option<Read>,
}

/// Reads and classifies `smaps` for a request (on the probe's own thread); its cost is the
/// thread's CPU time.
fn reading(request: Request) -> Reading {
    let started = Instant::now();
    let cpu = proc::thread_cpu();
    let regions = read(&request.pids);
    Reading {
        request,
        started,
        cost: proc::thread_cpu().saturating_sub(cpu),
        regions,
    }
}

/// What one read found.
struct Read {
    regions: Regions,
    processes: u32,
    /// The processes' `VmRSS`, each read just before and just after its `smaps`.
    status_rss_bytes: u64,
    status_rss_after_bytes: u64,
}

/// The regions of `pids` summed; processes that exited in the meantime are left out, any
/// other failure gives `None` (a partial sum would mislead).
fn read(pids: &[i32]) -> Option<Read> {
    let mut r = Read {
        regions: Regions::default(),
        processes: 0,
        status_rss_bytes: 0,
        status_rss_after_bytes: 0,
    };
    for &pid in pids {
        let vm_rss = match proc::read_status(pid) {
            Ok(s) => s.vm_rss,
            Err(ProcError::Gone { .. }) => continue,
            Err(_) => return None,
        };
        let text = match proc::read_proc_file(pid, "smaps") {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(ProcError::Gone { .. }) => continue,
            Err(_) => return None,
        };
        if text.is_empty() {
            continue; // exiting: its address space is gone
        }
        // After: a process that exited since counts as it was before.
        let after = proc::read_status(pid).map_or(vm_rss, |s| s.vm_rss);
        r.regions
            .add_process(&without_repeats(parse_smaps(&text).ok()?));
        r.status_rss_bytes += vm_rss;
        r.status_rss_after_bytes += after;
        r.processes += 1;
    }
    r.regions.finish();
    (r.processes > 0).then_some(r)
}

/// `smaps` comes a page of text at a time, and the kernel lets go of the process's memory
/// map between pages, then goes on from the mapping it stopped at: where that mapping has
/// since merged with the one before it (an arena's read-write part grown into its reserved
/// tail, a heap grown into its neighbour), the merged mapping is printed again from its
/// start, over what was already printed (seen: a 253 MiB process read as 502 MiB while it
/// grew). Mappings come in address order, so an overlap is such a repeat: the later print,
/// the newer state, is kept.
fn without_repeats(smaps: Vec<(Mapping, MapStats)>) -> Vec<(Mapping, MapStats)> {
    let mut out: Vec<(Mapping, MapStats)> = Vec::with_capacity(smaps.len());
    for (m, s) in smaps {
        while out.last().is_some_and(|(p, _)| p.end > m.start) {
            out.pop();
        }
        out.push((m, s));
    }
    out
}

/// Keeps the `smaps` read with the most resident bytes (see the module's doc).
pub struct RegionsProbe {
    budget: CpuBudget,
    reader: Background<Request, Reading>,
    /// The tree's RSS when the last read was asked for.
    asked_at_rss: u64,
    /// The tree's RSS at the sample before.
    prev_rss: u64,
    best: Option<RegionsRead>,
    series: Vec<RegionsPoint>,
    /// When the last read was asked for (seconds since the start).
    asked_at_t: f64,
    /// The read in flight is a rung's (its cost stays out of the budget).
    rung_in_flight: bool,
    /// The CPU time of the last read.
    last_cost: Duration,
    reads: u32,
    /// CPU time of every read, and of the reads within the budget.
    time: Duration,
    budgeted: Duration,
}

impl RegionsProbe {
    pub fn new() -> RegionsProbe {
        RegionsProbe {
            budget: CpuBudget::new(REGIONS_CPU_FRACTION, REGIONS_START_BURST),
            reader: Background::new("memtrial-regions", reading),
            asked_at_rss: 0,
            prev_rss: 0,
            best: None,
            series: Vec::new(),
            asked_at_t: 0.0,
            rung_in_flight: false,
            last_cost: Duration::ZERO,
            reads: 0,
            time: Duration::ZERO,
            budgeted: Duration::ZERO,
        }
    }

    fn take(&mut self, r: Reading) {
        self.reads += 1;
        self.time += r.cost;
        self.last_cost = r.cost;
        // A rung's read comes on top of the budget.
        let rung = std::mem::take(&mut self.rung_in_flight);
        self.budget
            .spent(r.started, if rung { Duration::ZERO } else { r.cost });
        if !rung {
            self.budgeted += r.cost;
        }
        let Some(read) = r.regions else {
            return;
        };
        if self.series.len() >= SERIES_MAX {
            let mut i = 0;
            self.series.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
        let t_seconds = r.request.t_seconds
            + r.started
                .saturating_duration_since(r.request.asked)
                .as_secs_f64();
        self.series.push(RegionsPoint {
            t_seconds,
            by_kind: read.regions.by_kind.clone(),
        });
        if self
            .best
            .as_ref()
            .is_some_and(|b| b.regions.rss_bytes >= read.regions.rss_bytes)
        {
            return;
        }
        let regions = read.regions;
        self.best = Some(RegionsRead {
            t_seconds,
            tree_rss_bytes: r.request.tree_rss_bytes,
            status_rss_bytes: read.status_rss_bytes,
            status_rss_after_bytes: read.status_rss_after_bytes,
            processes: read.processes,
            reads: 0,
            read_seconds: 0.0,
            regions,
            series: Vec::new(),
        });
    }
}

impl Default for RegionsProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe for RegionsProbe {
    fn observe(&mut self, tick: &Tick) {
        if tick.kind != TickKind::Sample {
            return;
        }
        if let Some(r) = self.reader.poll() {
            self.take(r);
        }
        let live: Vec<&super::Member> = tick.members.iter().filter(|m| m.state != 'Z').collect();
        let rss: u64 = live.iter().map(|m| m.rss_bytes).sum();
        let past = |share: f64| {
            self.asked_at_rss
                .saturating_add(((self.asked_at_rss as f64 * share) as u64).max(STEP_MIN))
        };
        let paused = rss <= self.prev_rss;
        self.prev_rss = rss;
        let rung = self.asked_at_rss == 0 || (rss >= past(RUNG) && self.last_cost <= RUNG_MAX_COST);
        let top = rss >= past(TOP) && paused;
        // A read between highs only while the reads within the budget used under half of
        // it: the other half stays for the tops.
        let periodic = tick.t_seconds >= self.asked_at_t + periodic_gap(self.last_cost)
            && self.budgeted.as_secs_f64() < 0.5 * REGIONS_CPU_FRACTION * tick.t_seconds;
        let budgeted = (top || periodic) && self.budget.due(Instant::now());
        if live.is_empty() || !(rung || budgeted) || self.reader.busy() {
            return;
        }
        let high = rung || top;
        let request = Request {
            t_seconds: tick.t_seconds,
            asked: Instant::now(),
            tree_rss_bytes: rss,
            pids: live.iter().map(|m| m.pid).collect(),
        };
        if self.reader.request(request) {
            // A periodic read leaves the last high where it was: the pause at the peak
            // still gets its read.
            if high {
                self.asked_at_rss = self.asked_at_rss.max(rss);
            }
            self.rung_in_flight = rung;
            self.asked_at_t = tick.t_seconds;
        }
    }

    fn finish(mut self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        // A read still in flight is waited for briefly: it may be the one nearest the peak.
        if let Some(r) = self.reader.wait(Duration::from_millis(500)) {
            self.take(r);
        }
        let series = std::mem::take(&mut self.series);
        record.regions = self.best.take().map(|b| RegionsRead {
            reads: self.reads,
            read_seconds: self.time.as_secs_f64(),
            series,
            ..b
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::regions::Kind;

    /// This test process read as a run's only member: the kinds sum to the `smaps` total,
    /// which lies near the process's own RSS, and its 4 threads' stacks are found.
    /// A cheap read keeps the 5 s period; a dear one stretches it to hold 0.05% of a core.
    #[test]
    fn reads_between_highs_are_paced_by_their_cost() {
        assert_eq!(periodic_gap(Duration::from_millis(1)), PERIOD);
        assert_eq!(periodic_gap(Duration::ZERO), PERIOD);
        let gap = periodic_gap(Duration::from_millis(18));
        assert!((gap - 36.0).abs() < 1e-9, "{gap}");
    }

    #[test]
    fn a_live_process_is_read_by_kind() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();
        let r = read(&[std::process::id() as i32]).expect("own smaps");
        let (regions, n) = (r.regions, r.processes);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(n, 1);
        assert_eq!(regions.by_kind.values().sum::<u64>(), regions.rss_bytes);
        assert!(regions.thread_stacks >= 4, "{regions:?}");
        assert!(regions.by_kind.contains_key(&Kind::FileCode), "{regions:?}");
        assert!(!regions.files.is_empty() && regions.files.len() <= 8);
        // A process that does not exist is left out, not a failure.
        assert!(read(&[i32::MAX]).is_none());
    }

    /// A mapping printed again after it merged with its neighbour between two pages of
    /// `smaps` counts once, as its later print says.
    #[test]
    fn a_mapping_printed_twice_counts_once() {
        let text = "\
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n\
Rss:                1024 kB\n\
7f0000100000-7f0004000000 ---p 00000000 00:00 0 \n\
Rss:                   0 kB\n\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 \n\
Rss:                2048 kB\n\
7f0000200000-7f0004000000 ---p 00000000 00:00 0 \n\
Rss:                   0 kB\n\
7f1000000000-7f1000001000 r--p 00000000 00:00 0 \n\
Rss:                   4 kB\n";
        let maps = without_repeats(parse_smaps(text).unwrap());
        assert_eq!(maps.len(), 3, "{maps:?}");
        assert_eq!(
            maps.iter().map(|(_, s)| s.rss).sum::<u64>(),
            (2048 + 4) << 10
        );
    }
}
