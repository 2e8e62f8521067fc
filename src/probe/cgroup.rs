//! The run's cgroup, read on the run's clock: anonymous and page-cache peaks while it
//! runs; at the end the kernel's own peak, OOM kills, throttling, CPU and pids-limit hits.

use super::{Probe, RunEnd, Tick, TickKind};
use crate::linux::cgroup::CgroupReader;
use crate::record::RunRecord;

pub struct CgroupProbe {
    reader: CgroupReader,
}

impl CgroupProbe {
    pub fn new(reader: CgroupReader) -> CgroupProbe {
        CgroupProbe { reader }
    }
}

impl Probe for CgroupProbe {
    fn name(&self) -> &'static str {
        "cgroup"
    }

    fn observe(&mut self, tick: &Tick) {
        if tick.kind == TickKind::Sample {
            self.reader.sample();
        }
    }

    fn finish(mut self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        record.cgroup = Some(self.reader.figures());
    }
}
