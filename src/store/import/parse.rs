//! A record file to typed data: its JSON Schema checked, the versions before the current
//! one read into the same types, every number within the store's types.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use crate::linux::cgroup::Limits;
use crate::linux::host::HostInfo;
use crate::plan::{
    Plan, ProbePlan, ServerPlan, Variant, VariantOrigin, VariantProgram, WorkerPlan,
    DEFAULT_GRACE_MS,
};
use crate::record::wire::{self, RunIn, JSON_SCHEMA_VERSION, SCHEMAS};
use crate::record::{ExperimentStatus, RunRecord};

use super::*;

/// A record read, validated and typed, before anything is written.
pub(super) struct Parsed {
    pub(super) source: String,
    pub(super) plan: Plan,
    pub(super) status: ExperimentStatus,
    pub(super) created_at: String,
    pub(super) finished_at: Option<String>,
    pub(super) host: HostInfo,
    pub(super) hosts: Vec<HostInfo>,
    pub(super) notes: Vec<String>,
    /// Each run: its record, its identities, its host (an index into `hosts`).
    pub(super) runs: Vec<(RunRecord, Identities, usize)>,
    pub(super) remarks: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct RecordJson {
    pub(super) experiment: ExperimentJson,
    pub(super) baseline: String,
    pub(super) variants: Vec<VariantJson>,
    #[serde(default)]
    pub(super) notes: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct ExperimentJson {
    pub(super) command: Vec<String>,
    pub(super) started_at: String,
    #[serde(default)]
    pub(super) finished_at: Option<String>,
    pub(super) status: String,
    pub(super) seed: u64,
    pub(super) runs_per_variant: u32,
    pub(super) warmup_runs_per_variant: u32,
    pub(super) interval_ms: u64,
    #[serde(default)]
    pub(super) timeout_ms: Option<u64>,
    #[serde(default)]
    pub(super) limits: Limits,
    #[serde(default)]
    pub(super) server: Option<ServerPlan>,
    #[serde(default)]
    pub(super) worker: Option<WorkerPlan>,
    #[serde(default)]
    pub(super) probes: ProbePlan,
    pub(super) host: HostInfo,
    #[serde(default)]
    pub(super) fingerprint: Option<String>,
    #[serde(default)]
    pub(super) plan: Option<Value>,
    #[serde(default)]
    pub(super) hosts: Vec<HostInfo>,
}

#[derive(Deserialize)]
pub(super) struct VariantJson {
    pub(super) name: String,
    pub(super) env: BTreeMap<String, String>,
    pub(super) preload: Option<String>,
    #[serde(default)]
    pub(super) preload_spec: Option<String>,
    #[serde(default)]
    pub(super) origin: Option<VariantOrigin>,
    #[serde(default)]
    pub(super) program: Option<String>,
    #[serde(default)]
    pub(super) command: Option<Vec<String>>,
    pub(super) runs: Vec<Value>,
}

/// What is wrong with a value: its JSON pointer, the value, why.
type Refusal = (String, String, String);

/// The largest number a store column holds (SQLite's signed 64-bit integer).
pub(super) const STORE_MAX: u64 = i64::MAX as u64;

pub(super) fn fits(pointer: &str, field: &str, v: u64) -> Result<(), Refusal> {
    if v > STORE_MAX {
        return Err((
            format!("{pointer}/{field}"),
            v.to_string(),
            format!("beyond what the store holds (at most {STORE_MAX})"),
        ));
    }
    Ok(())
}

pub(super) fn fits_opt(pointer: &str, field: &str, v: Option<u64>) -> Result<(), Refusal> {
    v.map_or(Ok(()), |v| fits(pointer, field, v))
}

/// A duration in seconds: finite and not negative.
pub(super) fn seconds(pointer: &str, field: &str, v: f64) -> Result<(), Refusal> {
    if !v.is_finite() || v < 0.0 {
        return Err((
            format!("{pointer}/{field}"),
            v.to_string(),
            "not a duration (it must be a finite number of seconds, 0 or more)".into(),
        ));
    }
    Ok(())
}

/// Every number of a run within the store's types, every duration a duration.
pub(super) fn check_run(r: &RunRecord, at: &str) -> Result<(), Refusal> {
    for (field, v) in [
        ("peak_rss_bytes", r.peak_rss_bytes),
        ("mean_rss_bytes", r.mean_rss_bytes),
        ("final_rss_bytes", r.final_rss_bytes),
        ("peak_vsz_bytes", r.peak_vsz_bytes),
        ("threads_peak", r.threads_peak),
        ("minor_faults", r.minor_faults),
        ("major_faults", r.major_faults),
    ] {
        fits(at, field, v)?;
    }
    fits_opt(at, "peak_pss_bytes", r.peak_pss_bytes)?;
    fits_opt(at, "peak_uss_bytes", r.peak_uss_bytes)?;
    for (field, v) in [
        ("wall_seconds", r.wall_seconds),
        ("cpu_user_seconds", r.cpu_user_seconds),
        ("cpu_sys_seconds", r.cpu_sys_seconds),
    ] {
        seconds(at, field, v)?;
    }
    for (i, s) in r.samples.iter().enumerate() {
        let at = format!("{at}/samples/{i}");
        seconds(&at, "t_seconds", s.t_seconds)?;
        fits(&at, "rss_bytes", s.rss_bytes)?;
        fits(&at, "vsz_bytes", s.vsz_bytes)?;
        fits(&at, "threads", s.threads)?;
        fits_opt(&at, "pss_bytes", s.pss_bytes)?;
        fits_opt(&at, "uss_bytes", s.uss_bytes)?;
    }
    Ok(())
}

/// A host's numbers within the store's types.
pub(super) fn check_host(h: &HostInfo, at: &str) -> Result<(), Refusal> {
    fits(at, "memory_bytes", h.memory_bytes)?;
    if let Some(c) = &h.container {
        let at = format!("{at}/container");
        fits_opt(&at, "cpu_quota_us", c.cpu_quota_us)?;
        fits_opt(&at, "cpu_period_us", c.cpu_period_us)?;
        fits_opt(&at, "memory_limit_bytes", c.memory_limit_bytes)?;
    }
    Ok(())
}

/// A plan this memtrial could have made: its baseline one of its variants, variant names
/// unique, no empty environment key, repetitions within their documented ranges.
pub(super) fn check_plan(plan: &Plan, has_plan: bool) -> Result<(), Refusal> {
    use crate::plan::settings::{RUNS, WARMUP};
    let at = if has_plan {
        "/experiment/plan"
    } else {
        "/experiment"
    };
    // The rule every plan is held to (`Plan::fault`), named by its place in the record.
    if let Some(f) = plan.fault() {
        let vat = if has_plan { "/experiment/plan" } else { "" };
        let pointer = match f.variant {
            Some(i) => format!("{vat}/variants/{i}/{}", f.field),
            None => format!("{vat}/{}", f.field),
        };
        return Err((pointer, f.value, f.error.to_string()));
    }
    let runs_at = if has_plan { "runs" } else { "runs_per_variant" };
    if !(RUNS.0..=RUNS.1).contains(&plan.runs) {
        return Err((
            format!("{at}/{runs_at}"),
            plan.runs.to_string(),
            format!("outside {} to {} runs per variant", RUNS.0, RUNS.1),
        ));
    }
    let warmup_at = if has_plan {
        "warmup"
    } else {
        "warmup_runs_per_variant"
    };
    if !(WARMUP.0..=WARMUP.1).contains(&plan.warmup) {
        return Err((
            format!("{at}/{warmup_at}"),
            plan.warmup.to_string(),
            format!(
                "outside {} to {} warm-up runs per variant",
                WARMUP.0, WARMUP.1
            ),
        ));
    }
    Ok(())
}

/// The embedded schema of `version`, compiled.
pub(super) fn validator(version: u32) -> Result<jsonschema::Validator, ImportError> {
    let text = SCHEMAS
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, t)| *t)
        .ok_or_else(|| ImportError::Schema {
            version,
            reason: "not embedded".into(),
        })?;
    let schema: Value = serde_json::from_str(text).map_err(|e| ImportError::Schema {
        version,
        reason: e.to_string(),
    })?;
    jsonschema::validator_for(&schema).map_err(|e| ImportError::Schema {
        version,
        reason: e.to_string(),
    })
}

pub(super) fn pointer_text(p: &str) -> String {
    if p.is_empty() {
        "the top level".to_string()
    } else {
        p.to_string()
    }
}

/// Reads one record: JSON, its version, its schema, then typed data. The text is dropped
/// once parsed and the document consumed as it is typed, so that a record is held about
/// once at a time, not as several copies.
pub(super) fn parse(source: &str, text: String) -> Result<Parsed, ImportError> {
    if text.len() as u64 > MAX_RECORD_BYTES {
        return Err(ImportError::TooLarge {
            source_name: source.to_string(),
        });
    }
    let doc: Result<Value, _> = serde_json::from_str(&text);
    drop(text);
    let doc: Value = doc.map_err(|e| ImportError::NotJson {
        source_name: source.to_string(),
        line: e.line(),
        column: e.column(),
        reason: e
            .to_string()
            .split(" at line ")
            .next()
            .unwrap_or("")
            .to_string(),
    })?;
    let not_a_record = |reason: &str| ImportError::NotARecord {
        source_name: source.to_string(),
        reason: reason.to_string(),
    };
    let Some(obj) = doc.as_object() else {
        return Err(not_a_record("the top level is not an object"));
    };
    let version = match obj.get("schema_version") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| not_a_record(&format!("schema_version {n} is not a whole number")))?,
        Some(other) => {
            return Err(not_a_record(&format!(
                "schema_version {other} is not a number"
            )))
        }
        None => {
            return Err(not_a_record(
                "it has no schema_version (write it with `memtrial run --json FILE`)",
            ))
        }
    };
    if version > u64::from(JSON_SCHEMA_VERSION) {
        return Err(ImportError::Newer {
            source_name: source.to_string(),
            found: version,
        });
    }
    if version < OLDEST_VERSION {
        return Err(ImportError::Older {
            source_name: source.to_string(),
            found: version,
        });
    }
    let invalid = |pointer: String, reason: String| ImportError::Invalid {
        source_name: source.to_string(),
        version,
        pointer: pointer_text(&pointer),
        reason,
    };
    // version is 2..=JSON_SCHEMA_VERSION here, so it fits.
    let v = validator(version as u32)?;
    if let Some(e) = v.iter_errors(&doc).next() {
        return Err(invalid(e.instance_path.to_string(), e.to_string()));
    }
    let record: RecordJson =
        serde_json::from_value(doc).map_err(|e| invalid(String::new(), e.to_string()))?;
    typed(source, version, record)
}

/// The plan a v2 record implies: what it lacks is filled in and said.
pub(super) fn plan_from_v2(rec: &RecordJson, remarks: &mut Vec<String>) -> Plan {
    let e = &rec.experiment;
    remarks.push(format!(
        "a schema v2 record: the plan's working directory, grace period ({DEFAULT_GRACE_MS} ms taken) and resolved program (its command's first word taken) are not in it, nor the limits of the cgroup memtrial ran in"
    ));
    Plan {
        command: e.command.clone(),
        program: PathBuf::from(e.command.first().cloned().unwrap_or_default()),
        workdir: PathBuf::new(),
        variants: rec
            .variants
            .iter()
            .map(|v| Variant {
                name: v.name.clone(),
                env: v.env.iter().map(|(k, x)| (k.clone(), x.clone())).collect(),
                preload: v.preload.as_ref().map(PathBuf::from),
                preload_spec: v.preload_spec.clone(),
                origin: v.origin.unwrap_or(VariantOrigin::Custom),
                program: match (&v.command, &v.program) {
                    (Some(argv), p) => Some(VariantProgram::Command {
                        argv: argv.clone(),
                        path: PathBuf::from(p.clone().unwrap_or_default()),
                    }),
                    (None, Some(p)) => Some(VariantProgram::Program {
                        spec: p.clone(),
                        path: PathBuf::from(p),
                    }),
                    (None, None) => None,
                },
            })
            .collect(),
        baseline: rec.baseline.clone(),
        runs: e.runs_per_variant,
        warmup: e.warmup_runs_per_variant,
        interval_ms: e.interval_ms,
        timeout_ms: e.timeout_ms,
        grace_ms: DEFAULT_GRACE_MS,
        seed: e.seed,
        limits: e.limits.clone(),
        server: e.server.clone(),
        probes: e.probes.clone(),
        worker: e.worker.clone(),
    }
}

pub(super) fn typed(
    source: &str,
    version: u64,
    mut rec: RecordJson,
) -> Result<Parsed, ImportError> {
    let inconsistent = |reason: String| ImportError::Inconsistent {
        source_name: source.to_string(),
        reason,
    };
    let mut remarks = Vec::new();
    let plan = match &rec.experiment.plan {
        Some(p) => serde_json::from_value::<Plan>(p.clone()).map_err(|e| ImportError::Invalid {
            source_name: source.to_string(),
            version,
            pointer: "/experiment/plan".into(),
            reason: e.to_string(),
        })?,
        None => plan_from_v2(&rec, &mut remarks),
    };
    let fingerprint = plan.fingerprint();
    if let Some(f) = rec
        .experiment
        .fingerprint
        .as_ref()
        .filter(|f| **f != fingerprint)
    {
        remarks.push(format!(
            "its recorded fingerprint {} differs from the plan's here, {} (written by another memtrial version?); joined by the plan's",
            short(f),
            short(&fingerprint)
        ));
    }
    let status = ExperimentStatus::parse(&rec.experiment.status).ok_or_else(|| {
        inconsistent(format!(
            "unknown experiment status {:?}",
            rec.experiment.status
        ))
    })?;
    let hosts = if rec.experiment.hosts.is_empty() {
        vec![rec.experiment.host.clone()]
    } else {
        rec.experiment.hosts.clone()
    };
    check_plan(&plan, rec.experiment.plan.is_some()).map_err(|(pointer, value, why)| {
        ImportError::OutOfRange {
            source_name: source.to_string(),
            pointer,
            value,
            why,
        }
    })?;
    for v in &rec.variants {
        if plan.variant(&v.name).is_none() {
            return Err(inconsistent(format!(
                "variant {:?} is not in its plan",
                v.name
            )));
        }
    }
    for (i, h) in hosts.iter().enumerate() {
        let at = if rec.experiment.hosts.is_empty() {
            "/experiment/host".to_string()
        } else {
            format!("/experiment/hosts/{i}")
        };
        check_host(h, &at).map_err(|(pointer, value, why)| ImportError::OutOfRange {
            source_name: source.to_string(),
            pointer,
            value,
            why,
        })?;
    }
    let mut runs = Vec::new();
    for (vi, v) in rec.variants.iter_mut().enumerate() {
        let values = std::mem::take(&mut v.runs);
        for (ri, value) in values.into_iter().enumerate() {
            let pointer = format!("/variants/{vi}/runs/{ri}");
            let identity_host = value
                .get("host")
                .and_then(Value::as_u64)
                .and_then(|h| usize::try_from(h).ok())
                .unwrap_or(0);
            let identity = hosts.get(identity_host).map(|h| Identities {
                stored: identity_of(&value, h, Paths::Blank),
                as_given: identity_of(&value, h, Paths::AsGiven),
            });
            let r: RunIn = serde_json::from_value(value).map_err(|e| ImportError::Invalid {
                source_name: source.to_string(),
                version,
                pointer: pointer.clone(),
                reason: e.to_string(),
            })?;
            let h = r.host.unwrap_or(0);
            let (Some(identity), true) = (identity, h < hosts.len()) else {
                return Err(inconsistent(format!(
                    "{pointer}/host is {h}, but experiment.hosts has {} host(s)",
                    hosts.len()
                )));
            };
            let record = wire::record_of(&v.name, r)
                .map_err(|reason| inconsistent(format!("{pointer}: {reason}")))?;
            check_run(&record, &pointer).map_err(|(pointer, value, why)| {
                ImportError::OutOfRange {
                    source_name: source.to_string(),
                    pointer,
                    value,
                    why,
                }
            })?;
            runs.push((record, identity, h));
        }
    }
    Ok(Parsed {
        source: source.to_string(),
        plan,
        status,
        created_at: rec.experiment.started_at,
        finished_at: rec.experiment.finished_at,
        host: rec.experiment.host,
        hosts,
        notes: rec.notes,
        runs,
        remarks,
    })
}
