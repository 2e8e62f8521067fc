//! Built-in reference workloads, run as `memtrial workload …` in a child process
//! so that the variant's environment (e.g. `LD_PRELOAD`) applies to them alone.

pub mod cache_server;
pub mod fragment;
