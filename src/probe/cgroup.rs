//! The run's cgroup, read on the run's clock: anonymous and page-cache peaks while it
//! runs; at the end the kernel's own peak, OOM kills, throttling, CPU and pids-limit hits.

use super::{Probe, RunEnd, Tick, TickKind};
use crate::linux::cgroup::CgroupReader;
use crate::record::RunRecord;

/// After the run's first second the group's `memory.stat` (60 µs a read on a busy
/// machine, the dearest read of a tick) is sampled at most this often; the group's own
/// peak is the kernel's mark, read at the end.
pub(crate) const STAT_EVERY_SECONDS: f64 = 0.5;

pub struct CgroupProbe {
    reader: CgroupReader,
    /// The next tick (seconds) at which `memory.stat` is read.
    next: f64,
}

impl CgroupProbe {
    pub fn new(reader: CgroupReader) -> CgroupProbe {
        CgroupProbe { reader, next: 0.0 }
    }
}

impl Probe for CgroupProbe {
    fn observe(&mut self, tick: &Tick) {
        if tick.kind == TickKind::Sample && tick.t_seconds >= self.next {
            self.reader.sample();
            if tick.t_seconds >= 1.0 {
                self.next = tick.t_seconds + STAT_EVERY_SECONDS;
            }
        }
    }

    fn finish(mut self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        record.cgroup = Some(self.reader.figures());
    }
}
