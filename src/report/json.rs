//! The JSON record of an experiment (`--json FILE`). Versioned: `schema_version`
//! changes when a name changes meaning or disappears; the JSON Schema lives in
//! `docs/schema/experiment-v4.schema.json` (v2 added the probes inside the
//! workload: `experiment.probes`, each run's `inside`, each summary's `why`; v3 what
//! `memtrial import` needs: the plan's fingerprint, the whole plan, the hosts and each
//! run's host; v4 what each figure rests on: each summary's `evidence`, a batch run's
//! null `trend`, the recommendation's `speed_figure`, the experiment's `sharing`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::recommend::Recommendation;
use crate::analysis::{Analysis, Estimate, Ratio, VariantSummary};
use crate::linux::cgroup::{CgroupFigures, Limits};
use crate::linux::host::HostInfo;
use crate::record::{Experiment, RunRecord, TreeSample};

pub const JSON_SCHEMA_VERSION: u32 = 4;

/// The JSON Schemas of the versions `memtrial import` reads, by version.
pub const SCHEMAS: [(u32, &str); 3] = [
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
struct Doc<'a> {
    schema_version: u32,
    generator: String,
    experiment: ExperimentJson<'a>,
    baseline: &'a str,
    variants: Vec<VariantJson<'a>>,
    recommendation: Recommendation,
    /// How the runs' processes coexisted (a shim's start-up helpers are not sharing).
    sharing: crate::analysis::Sharing,
    notes: &'a [String],
    /// `report --by host --json`: each host's summaries, against the baseline on that host.
    #[serde(skip_serializing_if = "Option::is_none")]
    by_host: Option<Vec<HostGroupJson>>,
}

#[derive(Serialize)]
struct HostGroupJson {
    /// An index into `experiment.hosts`.
    host: usize,
    label: String,
    runs: usize,
    variants: Vec<HostVariantJson>,
}

#[derive(Serialize)]
struct HostVariantJson {
    name: String,
    summary: serde_json::Value,
}

#[derive(Serialize)]
struct ExperimentJson<'a> {
    id: i64,
    command: &'a [String],
    started_at: &'a str,
    finished_at: Option<&'a str>,
    status: &'static str,
    seed: u64,
    runs_per_variant: u32,
    warmup_runs_per_variant: u32,
    interval_ms: u64,
    timeout_ms: Option<u64>,
    limits: &'a Limits,
    server: Option<&'a crate::plan::ServerPlan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<&'a crate::plan::WorkerPlan>,
    probes: &'a crate::plan::ProbePlan,
    host: &'a HostInfo,
    /// The plan's fingerprint: records with the same one join one experiment on import.
    fingerprint: String,
    /// The whole plan as stored.
    plan: &'a crate::plan::Plan,
    /// Every host a run ran on; each run's `host` indexes this list.
    hosts: Vec<&'a HostInfo>,
}

#[derive(Serialize)]
struct VariantJson<'a> {
    name: &'a str,
    env: BTreeMap<&'a str, &'a str>,
    preload: Option<String>,
    preload_spec: Option<&'a str>,
    origin: crate::plan::VariantOrigin,
    /// The executable the variant runs instead of the plan's program (null: the plan's).
    program: Option<String>,
    /// The whole command the variant runs instead of the plan's (null: the plan's).
    command: Option<&'a [String]>,
    runs: Vec<RunJson<'a>>,
    summary: SummaryJson<'a>,
}

#[derive(Serialize)]
struct RunJson<'a> {
    block: u32,
    warmup: bool,
    started_at: &'a str,
    status: &'static str,
    exit_code: Option<i32>,
    signal: Option<i32>,
    verified: bool,
    verification: &'static str,
    verification_detail: &'a str,
    allocator_detected: &'a str,
    wall_seconds: f64,
    cpu_user_seconds: f64,
    cpu_sys_seconds: f64,
    peak_rss_bytes: u64,
    peak_rss_source: &'static str,
    mean_rss_bytes: u64,
    final_rss_bytes: u64,
    peak_pss_bytes: Option<u64>,
    peak_uss_bytes: Option<u64>,
    peak_vsz_bytes: u64,
    threads_peak: u64,
    minor_faults: u64,
    major_faults: u64,
    processes_seen: u32,
    message: Option<&'a str>,
    stdout_path: String,
    stderr_path: String,
    cgroup: Option<&'a CgroupFigures>,
    requests: Option<u64>,
    throughput_rps: Option<f64>,
    errors: Option<&'a crate::record::load::ErrorCounts>,
    latency_p50_ms: Option<f64>,
    latency_p90_ms: Option<f64>,
    latency_p95_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    latency_max_ms: Option<f64>,
    load: Option<&'a crate::record::LoadFigures>,
    /// A worker's or service's driven phase and its driver's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    driver: Option<&'a crate::record::DriverFigures>,
    /// What the probes inside the workload saw (allocator, runtimes); absent when none ran.
    #[serde(skip_serializing_if = "crate::record::InsideView::is_empty")]
    inside: &'a crate::record::InsideView,
    samples: Vec<SampleJson>,
    /// The run's host: an index into `experiment.hosts` (left out of a run's identity).
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<usize>,
}

#[derive(Serialize)]
struct SampleJson {
    t_seconds: f64,
    rss_bytes: u64,
    vsz_bytes: u64,
    threads: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uss_bytes: Option<u64>,
    processes: u32,
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    runs_total: usize,
    runs_ok: usize,
    runs_unverified: usize,
    statuses: &'a BTreeMap<String, usize>,
    allocator_detected: Option<&'a str>,
    #[serde(flatten)]
    figures: BTreeMap<&'static str, &'a Estimate>,
    ratio_to_baseline: BTreeMap<&'static str, &'a Ratio>,
    trend: Option<&'a crate::analysis::TrendSummary>,
    why: Option<&'a crate::analysis::WhySummary>,
    /// A worker's driver figures by name; absent when its driver reported none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    driver_figures: &'a BTreeMap<String, crate::analysis::DriverEstimate>,
    /// What each figure rests on; a figure below its rule is here with why, and not above.
    evidence: BTreeMap<&'static str, &'a crate::analysis::FigureEvidence>,
    #[serde(skip_serializing_if = "Option::is_none")]
    live_departure: Option<&'a str>,
}

fn sample(s: &TreeSample) -> SampleJson {
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

fn run(r: &RunRecord) -> RunJson<'_> {
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

/// A run as the JSON record has it, without its host: what its identity is made of.
pub fn run_value(r: &RunRecord) -> serde_json::Value {
    serde_json::to_value(run(r)).unwrap_or(serde_json::Value::Null)
}

fn summary(s: &VariantSummary) -> SummaryJson<'_> {
    SummaryJson {
        runs_total: s.runs_total,
        runs_ok: s.runs_ok,
        runs_unverified: s.runs_unverified,
        statuses: &s.statuses,
        allocator_detected: s.allocator_detected.as_deref(),
        figures: s.figures.iter().map(|(f, e)| (f.key(), e)).collect(),
        ratio_to_baseline: s
            .ratio_to_baseline
            .iter()
            .map(|(f, r)| (f.key(), r))
            .collect(),
        trend: s.trend.as_ref(),
        why: s.why.as_ref(),
        driver_figures: &s.driver_figures,
        evidence: s.evidence.iter().map(|(f, e)| (f.key(), e)).collect(),
        live_departure: s.live_departure.as_deref(),
    }
}

/// `--json`: the versioned record.
pub struct JsonExporter;

impl<'a> super::Exporter<super::Report<'a>> for JsonExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        let mut b = serde_json::to_vec_pretty(&doc(r.experiment, r.analysis))?;
        b.push(b'\n');
        Ok(b)
    }
}

/// `report --by host --json`: the record with each host's summaries (`by_host`).
pub fn render_by_host(e: &Experiment) -> Result<Vec<u8>, serde_json::Error> {
    let a = crate::analysis::analyse(e);
    let groups = crate::analysis::hosts::by_host(e);
    let mut by_host = Vec::new();
    for (i, g) in groups.groups.iter().enumerate() {
        let mut variants = Vec::new();
        for v in &g.analysis.variants {
            variants.push(HostVariantJson {
                name: v.name.clone(),
                summary: serde_json::to_value(summary(v))?,
            });
        }
        by_host.push(HostGroupJson {
            host: i,
            label: g.label.clone(),
            runs: g.experiment.runs.len(),
            variants,
        });
    }
    let mut d = doc(e, &a);
    d.by_host = Some(by_host);
    let mut b = serde_json::to_vec_pretty(&d)?;
    b.push(b'\n');
    Ok(b)
}

/// Renders the experiment as pretty JSON.
pub fn render(e: &Experiment, a: &Analysis) -> String {
    let mut s = serde_json::to_string_pretty(&doc(e, a))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

fn doc<'a>(e: &'a Experiment, a: &'a Analysis) -> Doc<'a> {
    let variants = e
        .plan
        .variants
        .iter()
        .filter_map(|v| {
            let s = a.variants.iter().find(|s| s.name == v.name)?;
            Some(VariantJson {
                name: &v.name,
                env: v
                    .env
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect(),
                preload: v.preload.as_ref().map(|p| p.display().to_string()),
                preload_spec: v.preload_spec.as_deref(),
                origin: v.origin,
                program: v.program.as_ref().map(|p| p.path().display().to_string()),
                command: match &v.program {
                    Some(crate::plan::VariantProgram::Command { argv, .. }) => Some(argv),
                    _ => None,
                },
                runs: e
                    .runs
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.variant == v.name)
                    .map(|(i, r)| RunJson {
                        host: Some(e.run_hosts.get(i).copied().unwrap_or(0)),
                        ..run(r)
                    })
                    .collect(),
                summary: summary(s),
            })
        })
        .collect();
    Doc {
        schema_version: JSON_SCHEMA_VERSION,
        generator: format!("memtrial {}", env!("CARGO_PKG_VERSION")),
        experiment: ExperimentJson {
            id: e.id,
            command: &e.plan.command,
            started_at: &e.created_at,
            finished_at: e.finished_at.as_deref(),
            status: e.status.as_str(),
            seed: e.plan.seed,
            runs_per_variant: e.plan.runs,
            warmup_runs_per_variant: e.plan.warmup,
            interval_ms: e.plan.interval_ms,
            timeout_ms: e.plan.timeout_ms,
            limits: &e.plan.limits,
            server: e.plan.server.as_ref(),
            worker: e.plan.worker.as_ref(),
            probes: &e.plan.probes,
            host: &e.host,
            fingerprint: e.plan.fingerprint(),
            plan: &e.plan,
            hosts: if e.hosts.is_empty() {
                vec![&e.host]
            } else {
                e.hosts.iter().collect()
            },
        },
        baseline: &a.baseline,
        variants,
        recommendation: crate::analysis::recommend::recommend(a),
        sharing: a.sharing,
        notes: &e.notes,
        by_host: None,
    }
}
