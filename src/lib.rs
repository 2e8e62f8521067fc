//! memtrial: run a workload under every allocator variant, isolated and repeated,
//! measured from the kernel's own counters, and compare.
//!
//! Data flows Plan → Schedule → Trial → RunRecord → Store → Analysis → Report;
//! see `docs/` and the design notes.

pub mod analysis;
pub mod backend;
pub mod escape;
pub mod exporter;
pub mod inspect;
pub mod judge;
pub mod kube;
pub mod linux;
pub mod load;
pub mod plan;
pub mod probe;
pub mod record;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod soak;
pub mod store;
#[cfg(test)]
mod testing;
pub mod trial;
pub mod units;
pub mod workload;
