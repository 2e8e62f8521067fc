//! The record's wire format: a run as the JSON record writes it (`report --json`, the
//! `memtrial-record:` line of an in-container run) and as the store hashes it into the
//! run's identity. Owned here, beside the record, so that neither the store nor the
//! reports own the format the other depends on; `report::json` adds the analysis around
//! these runs, and `store::import` reads every version listed in [`SCHEMAS`] through
//! [`RunIn`] and [`record_of`]: both directions of a run's form live here, and a unit test
//! holds them to each other (a field written but not read back fails it).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{
    DriverFigures, InsideView, LoadFigures, PeakSource, RunRecord, RunStatus, TreeSample,
    Verification,
};
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
    /// Where the resident memory was, by kind of mapping, near the run's peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regions: Option<&'a crate::record::RegionsRead>,
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
        regions: r.regions.as_ref(),
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

/// A run as any version of the record has it ([`SCHEMAS`]): what import reads. Fields
/// later versions added default when absent; [`record_of`] makes it a [`RunRecord`].
#[derive(Deserialize)]
pub struct RunIn {
    #[serde(default)]
    pub block: u32,
    pub warmup: bool,
    #[serde(default)]
    pub started_at: String,
    pub status: String,
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    pub verified: bool,
    #[serde(default)]
    pub verification: Option<String>,
    #[serde(default)]
    pub verification_detail: String,
    pub allocator_detected: String,
    pub wall_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_sys_seconds: f64,
    pub peak_rss_bytes: u64,
    pub peak_rss_source: String,
    pub mean_rss_bytes: u64,
    pub final_rss_bytes: u64,
    pub peak_pss_bytes: Option<u64>,
    #[serde(default)]
    pub peak_uss_bytes: Option<u64>,
    pub peak_vsz_bytes: u64,
    pub threads_peak: u64,
    #[serde(default)]
    pub minor_faults: u64,
    #[serde(default)]
    pub major_faults: u64,
    #[serde(default)]
    pub processes_seen: u32,
    #[serde(default)]
    pub message: Option<String>,
    // stdout_path and stderr_path are another machine's paths: not read (see run_record).
    #[serde(default)]
    pub cgroup: Option<CgroupFigures>,
    #[serde(default)]
    pub load: Option<LoadFigures>,
    #[serde(default)]
    pub driver: Option<DriverFigures>,
    #[serde(default)]
    pub regions: Option<crate::record::RegionsRead>,
    #[serde(default)]
    pub inside: InsideView,
    pub samples: Vec<TreeSample>,
    #[serde(default)]
    pub host: Option<usize>,
}

pub fn record_of(variant: &str, r: RunIn) -> Result<RunRecord, String> {
    let status =
        RunStatus::parse(&r.status).ok_or_else(|| format!("unknown status {:?}", r.status))?;
    let verification = match r.verification.as_deref() {
        Some(v) => Verification::parse(v).ok_or_else(|| format!("unknown verification {v:?}"))?,
        None if r.verified => Verification::Verified,
        None => Verification::Unverified,
    };
    let peak_rss_source = PeakSource::parse(&r.peak_rss_source)
        .ok_or_else(|| format!("unknown peak_rss_source {:?}", r.peak_rss_source))?;
    Ok(RunRecord {
        variant: variant.to_string(),
        block: r.block,
        warmup: r.warmup,
        started_at: r.started_at,
        status,
        exit_code: r.exit_code,
        signal: r.signal,
        wall_seconds: r.wall_seconds,
        cpu_user_seconds: r.cpu_user_seconds,
        cpu_sys_seconds: r.cpu_sys_seconds,
        peak_rss_bytes: r.peak_rss_bytes,
        peak_rss_source,
        mean_rss_bytes: r.mean_rss_bytes,
        final_rss_bytes: r.final_rss_bytes,
        peak_pss_bytes: r.peak_pss_bytes,
        peak_uss_bytes: r.peak_uss_bytes,
        peak_vsz_bytes: r.peak_vsz_bytes,
        threads_peak: r.threads_peak,
        minor_faults: r.minor_faults,
        major_faults: r.major_faults,
        processes_seen: r.processes_seen,
        allocator_detected: r.allocator_detected,
        verification,
        verification_detail: r.verification_detail,
        message: r.message,
        // Paths of another machine: memtrial opens only files it made, never a path from
        // a record (a report shows the tail of a failed run's output).
        stdout_path: PathBuf::new(),
        stderr_path: PathBuf::new(),
        cgroup: r.cgroup,
        load: r.load,
        inside: r.inside,
        driver: r.driver,
        regions: r.regions,
        samples: r.samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both directions of the format agree: every run of the report fixtures (load figures,
    /// a driver, the allocator's and runtimes' views, PSS samples, failures) written as the
    /// record writes it and read back as import reads it is the same run, but for the paths
    /// of the machine that wrote it, which import never takes, and sample times, which the
    /// record keeps to the millisecond.
    #[test]
    fn a_run_written_and_read_back_is_the_same_run() {
        let mut checked = 0;
        let mut runs: Vec<RunRecord> = [
            crate::report::fixture::experiment(),
            crate::report::fixture::two_host_experiment(),
        ]
        .into_iter()
        .flat_map(|e| e.runs)
        .collect();
        // And one run with every optional part: a server's load, a driver, the cgroup's
        // figures, its regions, a signal.
        let mut full = crate::record::fixture::with_optional_parts(runs[0].clone());
        full.signal = Some(9);
        full.message = Some("killed by SIGKILL".into());
        full.load = Some(crate::record::LoadFigures {
            requests: 1200,
            throughput_rps: 400.0,
            errors: crate::record::load::ErrorCounts {
                timeout: 2,
                status_5xx: 1,
                ..Default::default()
            },
            latency_mean_ms: 3.5,
            latency_p50_ms: 3.0,
            latency_p90_ms: 5.0,
            latency_p95_ms: 6.0,
            latency_p99_ms: 9.0,
            latency_p999_ms: 12.0,
            latency_max_ms: 15.0,
            latency_quantiles: vec![(0.5, 3.0), (1.0, 15.0)],
            per_second: vec![crate::record::load::LoadSecond {
                t_seconds: 1.0,
                requests: 400,
                throughput_rps: 400.0,
                errors: 1,
                p50_ms: 3.0,
                p99_ms: 9.0,
            }],
            target_rate: Some(400.0),
            client_cpu_seconds: 0.2,
            client_saturated: false,
            ready_seconds: 0.5,
            load_start_seconds: 0.6,
            load_end_seconds: 3.6,
            cooldown_end_seconds: 4.6,
            rss_at_load_end_bytes: Some(1 << 29),
            rss_after_cooldown_bytes: Some(1 << 28),
        });
        runs.push(full);
        {
            for r in &runs {
                let value = serde_json::to_value(run(r)).unwrap();
                let back: RunIn = serde_json::from_value(value).unwrap();
                let back = record_of(&r.variant, back).unwrap();
                let mut want = r.clone();
                want.stdout_path = PathBuf::new();
                want.stderr_path = PathBuf::new();
                // The record keeps sample times to the millisecond.
                for s in &mut want.samples {
                    s.t_seconds = sample(s).t_seconds;
                }
                if back != want {
                    let (a, b) = (format!("{back:#?}"), format!("{want:#?}"));
                    let diff: Vec<String> = a
                        .lines()
                        .zip(b.lines())
                        .filter(|(x, y)| x != y)
                        .map(|(x, y)| format!("read back {x} / written {y}"))
                        .collect();
                    panic!("run {checked} differs:\n{}", diff.join("\n"));
                }
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked} runs");
    }
}
