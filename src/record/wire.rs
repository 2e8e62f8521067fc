//! The record's wire format: a run as the JSON record writes it (`report --json`, the
//! `memtrial-record:` line of an in-container run) and as the store hashes it into the
//! run's identity. Owned here, beside the record, so that neither the store nor the
//! reports own the format the other depends on; `report::json` adds the analysis around
//! these runs, and `store::import` reads every version listed in [`SCHEMAS`].

use serde::Serialize;

use super::{RunRecord, TreeSample};
use crate::linux::cgroup::CgroupFigures;

pub(crate) const JSON_SCHEMA_VERSION: u32 = 4;

/// The JSON Schemas of the versions `memtrial import` reads, by version.
pub(crate) const SCHEMAS: [(u32, &str); 3] = [
    (
        2,
        include_str!("../../docs/schema/experiment-v2.schema.json"),
    ),
    (
        3,
        include_str!("../../docs/schema/experiment-v3.schema.json"),
    ),
    (
        4,
        include_str!("../../docs/schema/experiment-v4.schema.json"),
    ),
];

#[derive(Serialize)]
pub struct RunJson<'a> {
    pub block: u32,
    pub warmup: bool,
    pub started_at: &'a str,
    pub status: &'static str,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub verified: bool,
    pub verification: &'static str,
    pub verification_detail: &'a str,
    pub allocator_detected: &'a str,
    pub wall_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_sys_seconds: f64,
    pub peak_rss_bytes: u64,
    pub peak_rss_source: &'static str,
    pub mean_rss_bytes: u64,
    pub final_rss_bytes: u64,
    pub peak_pss_bytes: Option<u64>,
    pub peak_uss_bytes: Option<u64>,
    pub peak_vsz_bytes: u64,
    pub threads_peak: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub processes_seen: u32,
    pub message: Option<&'a str>,
    pub stdout_path: String,
    pub stderr_path: String,
    pub cgroup: Option<&'a CgroupFigures>,
    pub requests: Option<u64>,
    pub throughput_rps: Option<f64>,
    pub errors: Option<&'a crate::record::load::ErrorCounts>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p90_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub latency_max_ms: Option<f64>,
    pub load: Option<&'a crate::record::LoadFigures>,
    /// A worker's or service's driven phase and its driver's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<&'a crate::record::DriverFigures>,
    /// What the probes inside the workload saw (allocator, runtimes); absent when none ran.
    #[serde(skip_serializing_if = "crate::record::InsideView::is_empty")]
    pub inside: &'a crate::record::InsideView,
    pub samples: Vec<SampleJson>,
    /// The run's host: an index into `experiment.hosts` (left out of a run's identity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<usize>,
}

#[derive(Serialize)]
pub struct SampleJson {
    pub t_seconds: f64,
    pub rss_bytes: u64,
    pub vsz_bytes: u64,
    pub threads: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uss_bytes: Option<u64>,
    pub processes: u32,
}

pub fn sample(s: &TreeSample) -> SampleJson {
    SampleJson {
        t_seconds: (s.t_seconds * 1000.0).round() / 1000.0,
        rss_bytes: s.rss_bytes,
        vsz_bytes: s.vsz_bytes,
        threads: s.threads,
        pss_bytes: s.pss_bytes,
        uss_bytes: s.uss_bytes,
        processes: s.processes,
    }
}

/// A run in the current version's form, without its host.
pub fn run(r: &RunRecord) -> RunJson<'_> {
    RunJson {
        block: r.block,
        warmup: r.warmup,
        started_at: &r.started_at,
        status: r.status.as_str(),
        exit_code: r.exit_code,
        signal: r.signal,
        verified: r.verification.ok(),
        verification: r.verification.as_str(),
        verification_detail: &r.verification_detail,
        allocator_detected: &r.allocator_detected,
        wall_seconds: r.wall_seconds,
        cpu_user_seconds: r.cpu_user_seconds,
        cpu_sys_seconds: r.cpu_sys_seconds,
        peak_rss_bytes: r.peak_rss_bytes,
        peak_rss_source: r.peak_rss_source.as_str(),
        mean_rss_bytes: r.mean_rss_bytes,
        final_rss_bytes: r.final_rss_bytes,
        peak_pss_bytes: r.peak_pss_bytes,
        peak_uss_bytes: r.peak_uss_bytes,
        peak_vsz_bytes: r.peak_vsz_bytes,
        threads_peak: r.threads_peak,
        minor_faults: r.minor_faults,
        major_faults: r.major_faults,
        processes_seen: r.processes_seen,
        message: r.message.as_deref(),
        stdout_path: r.stdout_path.display().to_string(),
        stderr_path: r.stderr_path.display().to_string(),
        cgroup: r.cgroup.as_ref(),
        requests: r.load.as_ref().map(|l| l.requests),
        throughput_rps: r.load.as_ref().map(|l| l.throughput_rps),
        errors: r.load.as_ref().map(|l| &l.errors),
        latency_p50_ms: r.load.as_ref().map(|l| l.latency_p50_ms),
        latency_p90_ms: r.load.as_ref().map(|l| l.latency_p90_ms),
        latency_p95_ms: r.load.as_ref().map(|l| l.latency_p95_ms),
        latency_p99_ms: r.load.as_ref().map(|l| l.latency_p99_ms),
        latency_max_ms: r.load.as_ref().map(|l| l.latency_max_ms),
        load: r.load.as_ref(),
        driver: r.driver.as_ref(),
        inside: &r.inside,
        samples: r.samples.iter().map(sample).collect(),
        host: None,
    }
}

/// A run as the JSON record has it, without its host: what its identity is made of. An
/// error is returned, never a placeholder (an identity made of `null` would make every
/// such run the same run).
pub(crate) fn run_value(r: &RunRecord) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_value(run(r))
}
