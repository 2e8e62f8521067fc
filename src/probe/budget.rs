//! One budget of CPU time for the probes that pace their own reads (the tree's search for
//! members, PSS, the regions' smaps reads, the JVM's smaps reads): a read is due while the
//! CPU time spent is at most `burst + fraction × time since the first read`. CPU time, not
//! wall time: on a busy machine a read's wall time is mostly its wait for a CPU, and counted
//! as cost one preempted read spent a whole burst (the tree's search once never found the
//! workers puma's master forked in a 3 s run; a 5 s run of four processes got one PSS read).

use std::time::{Duration, Instant};

/// CPU time allowed at once at the start plus a share of one core after it.
#[derive(Debug, Clone)]
pub(crate) struct CpuBudget {
    /// Fraction of one core the reads may use, e.g. 0.005.
    pub fraction: f64,
    /// CPU time allowed at once at the start.
    pub burst: Duration,
    started: Option<Instant>,
    spent: Duration,
}

impl CpuBudget {
    pub(crate) fn new(fraction: f64, burst: Duration) -> Self {
        CpuBudget {
            fraction,
            burst,
            started: None,
            spent: Duration::ZERO,
        }
    }

    /// Whether a read is within the budget at `now` (the first always is).
    pub(crate) fn due(&self, now: Instant) -> bool {
        let Some(start) = self.started else {
            return true;
        };
        let allowed = self.burst.as_secs_f64()
            + self.fraction * now.saturating_duration_since(start).as_secs_f64();
        self.spent.as_secs_f64() <= allowed
    }

    /// Counts `cost` (CPU time) of a read begun at `started`; the first one starts the
    /// budget's clock.
    pub(crate) fn spent(&mut self, started: Instant, cost: Duration) {
        self.started.get_or_insert(started);
        self.spent += cost;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_reads_spaced_by_their_cost() {
        let mut b = CpuBudget::new(0.01, Duration::from_millis(20));
        let now = Instant::now();
        assert!(b.due(now));
        // The start's burst (20 ms): two reads of 10 ms at once.
        b.spent(now, Duration::from_millis(10));
        assert!(b.due(now));
        b.spent(now, Duration::from_millis(10));
        assert!(b.due(now));
        b.spent(now, Duration::from_millis(10));
        // 30 ms spent: 1% of a core earns the next 10 ms in a second.
        assert!(!b.due(now + Duration::from_millis(500)));
        assert!(b.due(now + Duration::from_millis(1001)));
        b.spent(now, Duration::from_millis(10));
        assert!(!b.due(now + Duration::from_millis(1500)));
        assert!(b.due(now + Duration::from_millis(2001)));
    }

    #[test]
    fn the_search_for_members_is_paced_by_its_cost() {
        use crate::probe::tree::{SCAN_BURST, SCAN_CPU_FRACTION};
        // The tree's budget: 0.03% of a core after a 5 ms burst.
        let mut b = CpuBudget::new(SCAN_CPU_FRACTION, SCAN_BURST);
        let now = Instant::now();
        assert!(b.due(now), "the first search is always allowed");
        // A search of 0.57 ms (cgroup.procs of 1000 threads) after the burst is spent.
        b.spent(now, SCAN_BURST + Duration::from_micros(570));
        assert!(!b.due(now + Duration::from_millis(100)));
        assert!(!b.due(now + Duration::from_secs(1)));
        assert!(b.due(now + Duration::from_millis(1901)));
        // Searches of 20 µs fit at every 100 ms tick.
        let mut b = CpuBudget::new(SCAN_CPU_FRACTION, SCAN_BURST);
        b.spent(now, Duration::from_micros(20 * 10));
        assert!(b.due(now + Duration::from_secs(1)));
    }
}
