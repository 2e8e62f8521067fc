//! Probes: everything that observes a run on its clock and contributes figures at its end.
//!
//! The run's clock ticks; at each tick the [`TreeProbe`] finds the run's processes and sums
//! their memory, then every other probe observes the same tick with those processes. When
//! the run is over each probe writes its figures (and series) into the [`RunRecord`].
//! A probe states its cost and keeps within it; none of them may stop the run.
//!
//! Kernel side: [`TreeProbe`] (tree sums and peaks), [`PssProbe`] (PSS within a CPU budget),
//! [`CgroupProbe`] (the run's cgroup), [`Verifier`] (did the variant take effect).
//! Inside view: [`AllocatorProbe`] (the active allocator's own counters, through a library
//! preloaded into the workload); [`RubyProbe`] (Ruby's `GC.stat` and YJIT sizes, through a
//! script loaded by `RUBYOPT`); runtime probes follow the same shape: they instrument the
//! workload's environment before launch, read what it reports on the clock, and write an
//! [`crate::record::InsideView`] entry at the end.

pub mod allocator;
mod background;
pub(crate) mod budget;
pub mod cgroup;
pub mod cpu;
pub mod files;
mod holes;
pub mod jvm;
mod knobs;
pub mod pss;
pub mod regions;
pub mod reports;
pub mod requires;
pub mod ruby;
pub mod tree;
pub mod trim;
pub mod verify;

use std::time::Duration;

use crate::record::RunRecord;

pub use allocator::AllocatorProbe;
pub use cgroup::CgroupProbe;
pub use cpu::CpuProbe;
pub use jvm::JvmProbe;
pub use pss::PssProbe;
pub use regions::RegionsProbe;
pub use requires::RequireProbe;
pub use ruby::RubyProbe;
pub use tree::{Helpers, Member, Membership, TreeProbe};
pub use trim::TrimProbe;
pub use verify::Verifier;

/// Why a tick happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickKind {
    /// A sample on the plan's interval: every probe records.
    Sample,
    /// An early look shortly after the start (1, 3, 10, 30 ms) or after the root exited:
    /// membership is fresh, but nothing is recorded as a sample.
    Look,
}

/// One tick of the run's clock, with the processes in the run at that moment.
#[derive(Debug)]
pub struct Tick<'a> {
    /// Seconds since the workload was started.
    pub t_seconds: f64,
    /// The workload's start on `CLOCK_MONOTONIC` (ns), read as the tick began: where lines
    /// the processes stamp themselves fall on the run's clock. Not `now - t_seconds` later
    /// in a probe: the probes before it in the tick may have taken long on a busy machine
    /// (0.4 s beside two busy loops), and every line read then was stamped that much early.
    pub start_ns: i128,
    pub kind: TickKind,
    pub members: &'a [Member],
}

/// Seconds from `start_ns` (on `CLOCK_MONOTONIC`) to now.
pub(crate) fn seconds_since(start_ns: i128) -> f64 {
    (allocator::monotonic_ns() - start_ns) as f64 / 1e9
}

/// `start_ns` of a tick at `t_seconds` on the run's clock, taken now.
pub(crate) fn start_ns_of(t_seconds: f64) -> i128 {
    allocator::monotonic_ns() - (t_seconds * 1e9) as i128
}

/// The end of a run, as the backend saw it: what probes may need for their figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunEnd {
    /// The kernel's `ru_maxrss` of the root and the children it reaped, in bytes, if the
    /// root's exit was seen.
    pub maxrss_bytes: Option<u64>,
    /// Seconds from the start to the end of the run (the last processes gone).
    pub t_seconds: f64,
}

/// Observes a run over time; contributes figures when it ends.
pub trait Probe: Send {
    /// Called on every tick of the run's clock, in order.
    fn observe(&mut self, tick: &Tick);
    /// Writes this probe's figures into the record.
    fn finish(self: Box<Self>, end: &RunEnd, record: &mut RunRecord);
    /// Before launch: adds what this probe needs to the workload's environment (a
    /// preload, `RUBYOPT`, `JAVA_TOOL_OPTIONS`). `env` is what the workload gets on top of
    /// memtrial's own environment; [`append_env`] extends a value.
    fn instrument(&mut self, _env: &mut Vec<(String, String)>) {}
    /// Before launch, after every probe has instrumented: the environment the workload gets.
    fn launching(&mut self, _env: &[(String, String)]) {}
    /// Before launch: what to do with the spawner's PID while it waits to fork the workload
    /// (attach something the workload then inherits from its first instruction). A probe
    /// whose closure is never called (a backend without a spawner) has nothing attached.
    fn at_gate(&mut self) -> Option<Box<dyn FnOnce(i32)>> {
        None
    }
    /// The run's helper processes: a probe that starts a process of its own (the JVM
    /// probe's `jcmd`) hides it there, so that the tree sampler leaves it out.
    fn share_helpers(&mut self, _helpers: &Helpers) {}
}

/// Appends `value` to the environment variable `key` of the workload, separated by `sep`:
/// after the variant's own value if it sets one, else after the value memtrial inherited.
pub(crate) fn append_env(env: &mut Vec<(String, String)>, key: &str, value: &str, sep: char) {
    let old = match env.iter().position(|(k, _)| k == key) {
        Some(i) => Some(env.remove(i).1),
        None => std::env::var(key).ok(),
    };
    let new = match old.filter(|o| !o.trim().is_empty()) {
        Some(o) => format!("{o}{sep}{value}"),
        None => value.to_string(),
    };
    env.push((key.to_string(), new));
}

/// The probes of one run: the tree sampler first (it finds the processes), then the rest.
pub(crate) struct ProbeSet {
    tree: TreeProbe,
    others: Vec<Box<dyn Probe>>,
    members: Vec<Member>,
}

impl ProbeSet {
    pub fn new(tree: TreeProbe, mut others: Vec<Box<dyn Probe>>) -> ProbeSet {
        for p in &mut others {
            p.share_helpers(tree.helpers());
        }
        ProbeSet {
            tree,
            others,
            members: Vec::new(),
        }
    }

    /// One tick: refresh membership, sample, let every probe observe. Returns the tree's
    /// RSS sum at a [`TickKind::Sample`].
    pub(crate) fn tick(&mut self, elapsed: Duration, kind: TickKind) -> Option<u64> {
        let t_seconds = elapsed.as_secs_f64();
        let start_ns = start_ns_of(t_seconds);
        let rss = match kind {
            TickKind::Sample => Some(self.tree.sample(t_seconds)),
            TickKind::Look => {
                self.tree.refresh();
                None
            }
        };
        self.members.clear();
        self.members.extend(self.tree.members().cloned());
        let tick = Tick {
            t_seconds,
            start_ns,
            kind,
            members: &self.members,
        };
        for p in &mut self.others {
            p.observe(&tick);
        }
        rss
    }

    /// The processes in the run at the last tick.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Re-reads which processes are in the run (no sample, no observers).
    pub(crate) fn refresh(&mut self) -> &[Member] {
        self.tree.refresh();
        self.members.clear();
        self.members.extend(self.tree.members().cloned());
        &self.members
    }

    /// Every probe writes its figures; the tree sampler first, so that the others can
    /// attach to its samples.
    pub fn finish(self, end: &RunEnd, record: &mut RunRecord) {
        Box::new(self.tree).finish(end, record);
        for p in self.others {
            p.finish(end, record);
        }
        pss::thp_with_regions(record);
    }
}
