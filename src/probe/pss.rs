//! PSS of the run's processes (`smaps_rollup`), read on a thread of its own within a CPU
//! budget and attached to the tree sample taken at the tick it arrived.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Probe, RunEnd, Tick, TickKind};
use crate::linux::proc::{self, ProcError};
use crate::record::RunRecord;

/// Share of one core that PSS reads (`smaps_rollup`) may use.
pub const PSS_CPU_FRACTION: f64 = 0.002;

/// Keeps the cost of reading `smaps_rollup` (it walks page tables: ~30 ms for a
/// 2 GiB process) within a fraction of one core.
#[derive(Debug, Clone)]
pub struct PssBudget {
    /// Fraction of one core PSS reads may use, e.g. 0.005.
    pub cpu_fraction: f64,
    next_allowed: Option<Instant>,
}

impl PssBudget {
    pub fn new(cpu_fraction: f64) -> Self {
        PssBudget {
            cpu_fraction,
            next_allowed: None,
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.next_allowed.is_none_or(|t| now >= t)
    }

    fn spent(&mut self, now: Instant, cost: Duration) {
        let wait = cost.as_secs_f64() / self.cpu_fraction;
        self.next_allowed = Some(now + Duration::from_secs_f64(wait));
    }
}

/// The sum of PSS over some processes, read by [`PssReader`].
struct PssResult {
    started: Instant,
    cost: Duration,
    /// `None` when a process's `smaps_rollup` could not be read (not when it exited).
    pss: Option<u64>,
}

/// Reads `smaps_rollup` on its own thread, one request at a time.
struct PssReader {
    tx: Option<std::sync::mpsc::Sender<Vec<i32>>>,
    rx: std::sync::mpsc::Receiver<PssResult>,
    busy: bool,
}

impl PssReader {
    fn new() -> PssReader {
        let (tx, work) = std::sync::mpsc::channel::<Vec<i32>>();
        let (done, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("memtrial-pss".into())
            .spawn(move || {
                while let Ok(pids) = work.recv() {
                    let started = Instant::now();
                    let mut sum = Some(0u64);
                    for pid in pids {
                        match proc::read_smaps_rollup(pid) {
                            Ok(r) => sum = sum.map(|x| x + r.pss),
                            Err(ProcError::Gone { .. }) => {}
                            Err(_) => sum = None,
                        }
                    }
                    let r = PssResult {
                        started,
                        cost: started.elapsed(),
                        pss: sum,
                    };
                    if done.send(r).is_err() {
                        return;
                    }
                }
            });
        PssReader {
            // Without the thread, PSS is simply never read.
            tx: spawned.ok().map(|_| tx),
            rx,
            busy: false,
        }
    }

    fn request(&mut self, pids: Vec<i32>) {
        if let Some(tx) = &self.tx {
            self.busy = tx.send(pids).is_ok();
        }
    }

    fn poll(&mut self) -> Option<PssResult> {
        let r = self.rx.try_recv().ok()?;
        self.busy = false;
        Some(r)
    }
}

/// Sums PSS over the run's live processes at most as often as its budget allows; each
/// sum is attached to the tree sample of the tick at which it arrived.
pub struct PssProbe {
    budget: PssBudget,
    reader: PssReader,
    /// Tick time (seconds) → the PSS sum that arrived then (`None`: unreadable).
    readings: BTreeMap<u64, Option<u64>>,
    pub reads: u64,
    pub time: Duration,
}

impl PssProbe {
    pub fn new() -> PssProbe {
        PssProbe {
            budget: PssBudget::new(PSS_CPU_FRACTION),
            reader: PssReader::new(),
            readings: BTreeMap::new(),
            reads: 0,
            time: Duration::ZERO,
        }
    }
}

impl Default for PssProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe for PssProbe {
    fn name(&self) -> &'static str {
        "pss"
    }

    fn observe(&mut self, tick: &Tick) {
        if tick.kind != TickKind::Sample {
            return;
        }
        let now = Instant::now();
        if let Some(r) = self.reader.poll() {
            self.reads += 1;
            self.time += r.cost;
            self.budget.spent(r.started, r.cost);
            self.readings.insert(tick.t_seconds.to_bits(), r.pss);
        }
        let live: Vec<i32> = tick
            .members
            .iter()
            .filter(|m| m.state != 'Z')
            .map(|m| m.pid)
            .collect();
        if !live.is_empty() && self.budget.due(now) && !self.reader.busy {
            self.reader.request(live);
        }
    }

    fn finish(self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        for s in &mut record.samples {
            if let Some(p) = self.readings.get(&s.t_seconds.to_bits()) {
                s.pss_bytes = *p;
            }
        }
        record.peak_pss_bytes = record.samples.iter().filter_map(|s| s.pss_bytes).max();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{Membership, ProbeSet, TreeProbe};
    use std::process::Command;

    #[test]
    fn pss_budget_spaces_reads() {
        let mut b = PssBudget::new(0.01);
        let now = Instant::now();
        assert!(b.due(now));
        b.spent(now, Duration::from_millis(10));
        assert!(!b.due(now + Duration::from_millis(500)));
        assert!(b.due(now + Duration::from_millis(1001)));
    }

    #[test]
    fn pss_arrives_with_a_later_sample() {
        let mut child = Command::new("sleep").arg("2").spawn().unwrap();
        let tree = TreeProbe::new(Membership::DescendantsOf(std::process::id() as i32));
        let mut set = ProbeSet::new(tree, vec![Box::new(PssProbe::new())]);
        set.tick(Duration::ZERO, TickKind::Sample);
        std::thread::sleep(Duration::from_millis(100));
        set.tick(Duration::from_millis(100), TickKind::Sample);
        let _ = child.kill();
        let _ = child.wait();
        let mut record = crate::record::RunRecord::skeleton("v", 0, false, "now".into());
        set.finish(&RunEnd::default(), &mut record);
        assert!(record.samples.len() >= 2);
        assert!(record.samples[0].pss_bytes.is_none());
        assert!(
            record.samples[1].pss_bytes.is_some_and(|p| p > 0),
            "PSS arrives with the next sample: {:?}",
            record.samples
        );
        assert_eq!(record.peak_pss_bytes, record.samples[1].pss_bytes);
    }
}
