//! Where a run's resident memory is, by kind of mapping: every live process's `smaps`
//! read on a thread of its own at new highs of the tree's RSS, within a CPU budget, and
//! the read that found the most resident bytes kept.
//!
//! A full `smaps` costs more than `smaps_rollup` (every mapping is printed: a process with
//! 2,000 mappings takes tens of milliseconds), so it is read only when the tree's RSS has
//! grown past the last read by [`NEW_HIGH`] and its growth has paused (the sample is no
//! higher than the one before: where a peak is) or it has doubled since (a run that grows
//! until it ends), and while the reads so far stay within [`REGIONS_CPU_FRACTION`] of a core
//! plus a burst at the start. Between highs it is also read every [`PERIOD`] within the
//! same budget, so that every read, kept as a series, shows the kinds over the whole run.

use std::time::{Duration, Instant};

use super::background::Background;
use super::pss::PssBudget;
use super::{Probe, RunEnd, Tick, TickKind};
use crate::linux::proc::{self, ProcError};
use crate::linux::regions::{parse_smaps, Regions};
use crate::record::{RegionsPoint, RegionsRead, RunRecord};

/// Share of one core the `smaps` reads may use over a run (plus the start's burst).
pub(crate) const REGIONS_CPU_FRACTION: f64 = 0.005;

/// CPU time the reads may take at the start of a run on top of the fraction.
pub(crate) const REGIONS_START_BURST: Duration = Duration::from_millis(40);

/// Growth of the tree's RSS since the last read that makes a new high worth a read:
/// 10%, and at least 1 MiB.
pub(crate) const NEW_HIGH: f64 = 0.10;
const NEW_HIGH_MIN: u64 = 1 << 20;

/// Between new highs, a read at most this often (within the budget): the kinds over time.
pub(crate) const PERIOD: f64 = 5.0;

/// The most reads kept in a run's series: beyond, every other one is dropped (the read
/// with the most resident bytes is kept apart).
pub const SERIES_MAX: usize = 240;

struct Request {
    t_seconds: f64,
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

/// Reads and classifies `smaps` for a request (on the probe's own thread).
fn reading(request: Request) -> Reading {
    let started = Instant::now();
    let regions = read(&request.pids);
    Reading {
        request,
        started,
        cost: started.elapsed(),
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
        r.regions.add_process(&parse_smaps(&text).ok()?);
        r.status_rss_bytes += vm_rss;
        r.status_rss_after_bytes += after;
        r.processes += 1;
    }
    r.regions.finish();
    (r.processes > 0).then_some(r)
}

/// Keeps the `smaps` read with the most resident bytes (see the module's doc).
pub struct RegionsProbe {
    budget: PssBudget,
    reader: Background<Request, Reading>,
    /// The tree's RSS when the last read was asked for.
    asked_at_rss: u64,
    /// The tree's RSS at the sample before.
    prev_rss: u64,
    best: Option<RegionsRead>,
    series: Vec<RegionsPoint>,
    /// When the last read was asked for (seconds since the start).
    asked_at_t: f64,
    reads: u32,
    time: Duration,
}

impl RegionsProbe {
    pub fn new() -> RegionsProbe {
        let mut budget = PssBudget::new(REGIONS_CPU_FRACTION);
        budget.burst = REGIONS_START_BURST;
        RegionsProbe {
            budget,
            reader: Background::new("memtrial-regions", reading),
            asked_at_rss: 0,
            prev_rss: 0,
            best: None,
            series: Vec::new(),
            asked_at_t: 0.0,
            reads: 0,
            time: Duration::ZERO,
        }
    }

    fn take(&mut self, r: Reading) {
        self.reads += 1;
        self.time += r.cost;
        self.budget.spent(r.started, r.cost);
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
        self.series.push(RegionsPoint {
            t_seconds: r.request.t_seconds,
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
            t_seconds: r.request.t_seconds,
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
        let threshold = self
            .asked_at_rss
            .saturating_add(((self.asked_at_rss as f64 * NEW_HIGH) as u64).max(NEW_HIGH_MIN));
        let paused = rss <= self.prev_rss;
        self.prev_rss = rss;
        let high = self.asked_at_rss == 0
            || (rss >= threshold && (paused || rss >= self.asked_at_rss.saturating_mul(2)));
        // A read between highs only while the reads so far used under half the budget: the
        // other half stays for the peak.
        let periodic = tick.t_seconds >= self.asked_at_t + PERIOD
            && self.time.as_secs_f64() < 0.5 * REGIONS_CPU_FRACTION * tick.t_seconds;
        let due = high || periodic;
        if live.is_empty() || !due || self.reader.busy() || !self.budget.due(Instant::now()) {
            return;
        }
        let request = Request {
            t_seconds: tick.t_seconds,
            tree_rss_bytes: rss,
            pids: live.iter().map(|m| m.pid).collect(),
        };
        if self.reader.request(request) {
            // A periodic read leaves the last high where it was: the pause at the peak
            // still gets its read.
            if high {
                self.asked_at_rss = rss;
            }
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
}
