//! Integration tests: the real binary, real allocators, real processes, one binary with
//! a file per area. Every test works in its own temporary directory and database.

mod bad_input;
mod cgroup_v2;
mod common;
mod cpu;
mod evidence;
mod exporter;
mod exporter_trust;
mod forking;
mod import;
mod inside;
mod inspect;
mod judge;
mod jvm_probe;
mod kube;
mod kube_trust;
mod layers;
mod load;
mod nobody;
mod output;
mod probe_library;
mod procs;
mod program_variants;
mod props;
mod regions;
mod reports;
mod requires;
mod ruby_probe;
mod run;
mod sampling;
mod sandbox;
mod server;
mod store_trust;
mod trust;
mod trust_report;
mod worker;
