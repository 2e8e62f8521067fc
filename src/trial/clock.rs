//! memtrial's own lateness on a run's clock. The run's figures come from clocks memtrial
//! does not hold (the spawner's reap time, the kernel's high-water marks), but its
//! sampling, its driver's phases and the moment it acts on a timeout come from memtrial
//! itself: when memtrial was stopped (SIGSTOP) or starved of CPU, the run says so.

use std::time::{Duration, Instant};

/// A look of the run's loop later than planned by more than this marks the run.
pub(crate) const LATE_BEYOND: Duration = Duration::from_secs(1);

/// The looks of a run's loop that came late.
#[derive(Debug, Default)]
pub(crate) struct Lateness {
    /// When the previous look planned to wake, at the latest.
    due: Option<Instant>,
    /// The longest delay and when (s into the run) it ended.
    longest: Option<(Duration, f64)>,
    total: Duration,
    times: u32,
}

impl Lateness {
    /// The run's clock started at `t0`: its first look is due then (the launch between
    /// counts as memtrial's work).
    pub(crate) fn since(t0: Instant) -> Lateness {
        Lateness {
            due: Some(t0),
            ..Lateness::default()
        }
    }

    /// memtrial looks at the run now (`t0`: the run's zero), after a wait or between two
    /// steps of its own work.
    pub fn look(&mut self, t0: Instant) {
        self.check(t0);
        self.due = Some(Instant::now());
    }

    /// memtrial waits up to `wait` from now.
    pub fn waiting(&mut self, t0: Instant, wait: Duration) {
        self.check(t0);
        self.due = Some(Instant::now() + wait);
    }

    fn check(&mut self, t0: Instant) {
        let now = Instant::now();
        let Some(due) = self.due else { return };
        let late = now.saturating_duration_since(due);
        if late > LATE_BEYOND {
            self.times += 1;
            self.total += late;
            let at = now.saturating_duration_since(t0).as_secs_f64();
            if self.longest.is_none_or(|(d, _)| late > d) {
                self.longest = Some((late, at));
            }
        }
    }

    /// What the run's record says about it, when memtrial was late.
    pub fn note(&self) -> Option<String> {
        let (d, at) = self.longest?;
        let more = match self.times {
            1 => String::new(),
            n => format!(" ({n} times, {:.1} s in all)", self.total.as_secs_f64()),
        };
        Some(format!(
            "disturbed: memtrial itself did not run for {:.1} s until {at:.1} s into the run{more} (stopped or starved of CPU); its samples have a gap there and its driver's phase times may be late; the wall time, CPU and peak are the workload's own",
            d.as_secs_f64()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_look_later_than_the_margin_marks_the_run() {
        let t0 = Instant::now();
        let mut l = Lateness::default();
        l.look(t0);
        l.waiting(t0, Duration::from_millis(50));
        l.look(t0);
        assert_eq!(l.note(), None);
        // A wait that was due long ago: memtrial did not run meanwhile.
        l.due = Instant::now().checked_sub(Duration::from_secs(3));
        l.look(t0);
        let note = l.note().expect("late");
        assert!(
            note.starts_with("disturbed: memtrial itself did not run for 3."),
            "{note}"
        );
    }
}
