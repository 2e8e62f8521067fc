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
use crate::linux::cgroup::Limits;
use crate::linux::host::HostInfo;
use crate::record::wire::{run, RunJson};
use crate::record::Experiment;

pub(crate) use crate::record::wire::JSON_SCHEMA_VERSION;
#[cfg(test)]
pub(crate) use crate::record::wire::SCHEMAS;

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
    /// The program's floor: the most it was seen to have live, what each variant's peak is
    /// judged against (`peak_over_floor` in each summary).
    #[serde(skip_serializing_if = "Option::is_none")]
    floor: Option<&'a crate::analysis::floor::Floor>,
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
    /// Where this variant's peak of live bytes departs from the program's floor beyond
    /// allocators' accounting.
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_departure: Option<&'a str>,
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
        floor_departure: s.floor_departure.as_deref(),
    }
}

/// `--json`: the versioned record.
pub(crate) struct JsonExporter;

impl<'a> super::Exporter<super::Report<'a>> for JsonExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        let mut b = serde_json::to_vec_pretty(&doc(r.experiment, r.analysis))?;
        b.push(b'\n');
        Ok(b)
    }
}

/// `report --by host --json`: the record with each host's summaries (`by_host`).
pub(crate) fn render_by_host(e: &Experiment) -> Result<Vec<u8>, serde_json::Error> {
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
        floor: a.floor.as_ref(),
        notes: &e.notes,
        by_host: None,
    }
}
