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
    /// The memtrial that wrote it (`memtrial 0.1.0`), when the record says.
    pub(super) generator: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct RecordJson {
    pub(super) experiment: ExperimentJson,
    pub(super) baseline: String,
    pub(super) variants: Vec<VariantJson>,
    #[serde(default)]
    pub(super) notes: Vec<String>,
    #[serde(default)]
    pub(super) generator: Option<String>,
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
    // Its runs are read from their text, one at a time (see `typed_run`).
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

/// The embedded schema of `version`, compiled three ways: the whole record (checked with
/// its runs left out), one run (checked with its samples left out), one sample. Compiled
/// once per process and version.
pub(super) struct Validators {
    record: jsonschema::Validator,
    run: jsonschema::Validator,
    sample: jsonschema::Validator,
}

pub(super) fn validators(version: u32) -> Result<&'static Validators, ImportError> {
    static COMPILED: [std::sync::OnceLock<Result<Validators, String>>; SCHEMAS.len()] =
        [const { std::sync::OnceLock::new() }; SCHEMAS.len()];
    let at = SCHEMAS
        .iter()
        .position(|(v, _)| *v == version)
        .ok_or_else(|| ImportError::Schema {
            version,
            reason: "not embedded".into(),
        })?;
    COMPILED[at]
        .get_or_init(|| compile(SCHEMAS[at].1))
        .as_ref()
        .map_err(|reason| ImportError::Schema {
            version,
            reason: reason.clone(),
        })
}

fn compile(text: &str) -> Result<Validators, String> {
    let full: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    // One definition of the schema as a schema of its own: the same `$defs`, a `$ref` to it.
    let part = |def: &str| {
        let mut m = serde_json::Map::new();
        for k in ["$schema", "$id", "$defs"] {
            if let Some(v) = full.get(k) {
                m.insert(k.to_string(), v.clone());
            }
        }
        m.insert("$ref".into(), Value::String(format!("#/$defs/{def}")));
        Value::Object(m)
    };
    let build = |s: &Value| jsonschema::validator_for(s).map_err(|e| e.to_string());
    Ok(Validators {
        record: build(&full)?,
        run: build(&part("run"))?,
        sample: build(&part("sample"))?,
    })
}

pub(super) fn pointer_text(p: &str) -> String {
    if p.is_empty() {
        "the top level".to_string()
    } else {
        p.to_string()
    }
}

/// Reads one record: JSON, its version, its schema, then typed data. The record is split
/// where its bulk is ([`split`]): everything but the runs is checked against the schema as
/// one tree, each run and then each of its samples as it is read, so that no tree of the
/// whole record (about ten times its text) is ever made; what is held is the text and the
/// typed runs (about half the text).
pub(super) fn parse(source: &str, text: &str) -> Result<Parsed, ImportError> {
    if text.len() as u64 > MAX_RECORD_BYTES {
        return Err(ImportError::TooLarge {
            source_name: source.to_string(),
        });
    }
    let doc = super::split::record(text).map_err(|e| ImportError::NotJson {
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
    let Some(obj) = doc.skeleton.as_object() else {
        return Err(not_a_record("the top level is not an object"));
    };
    let reads = format!("this memtrial reads versions {OLDEST_VERSION} to {JSON_SCHEMA_VERSION}");
    let version = match obj.get("schema_version") {
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| {
            not_a_record(&format!(
                "schema_version {n} is not a version (versions are whole numbers; {reads})"
            ))
        })?,
        Some(other) => {
            return Err(not_a_record(&format!(
                "schema_version {other} is not a number ({reads})"
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
    // version is 2..=JSON_SCHEMA_VERSION here, so it fits.
    let v = validators(version as u32)?;
    if let Some(e) = v.record.iter_errors(&doc.skeleton).next() {
        return Err(invalid(
            source,
            version,
            e.instance_path.to_string(),
            e.to_string(),
        ));
    }
    let record: RecordJson = serde_json::from_value(doc.skeleton)
        .map_err(|e| invalid(source, version, String::new(), e.to_string()))?;
    typed(source, version, record, (&doc.runs, v))
}

/// A record that does not match its schema (or the types it implies) at `pointer`.
fn invalid(source: &str, version: u64, pointer: String, reason: String) -> ImportError {
    ImportError::Invalid {
        source_name: source.to_string(),
        version,
        pointer: pointer_text(&pointer),
        reason,
    }
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
                knobs: Default::default(),
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

/// The record's plan: its own (v3 on), or made from a v2 record's fields; a remark when
/// its recorded fingerprint is not the plan's here.
fn record_plan(
    source: &str,
    version: u64,
    rec: &RecordJson,
    remarks: &mut Vec<String>,
) -> Result<Plan, ImportError> {
    let plan = match &rec.experiment.plan {
        Some(p) => serde_json::from_value::<Plan>(p.clone()).map_err(|e| ImportError::Invalid {
            source_name: source.to_string(),
            version,
            pointer: "/experiment/plan".into(),
            reason: e.to_string(),
        })?,
        None => plan_from_v2(rec, remarks),
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
    Ok(plan)
}

pub(super) fn typed(
    source: &str,
    version: u64,
    rec: RecordJson,
    (texts, validators): (&[Vec<&serde_json::value::RawValue>], &Validators),
) -> Result<Parsed, ImportError> {
    let inconsistent = |reason: String| ImportError::Inconsistent {
        source_name: source.to_string(),
        reason,
    };
    let mut remarks = Vec::new();
    let plan = record_plan(source, version, &rec, &mut remarks)?;
    let fingerprint = plan.fingerprint();
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
    for (vi, v) in rec.variants.iter().enumerate() {
        for (ri, raw) in texts.get(vi).into_iter().flatten().enumerate() {
            let pointer = format!("/variants/{vi}/runs/{ri}");
            runs.push(typed_run(
                source,
                version,
                (raw, &pointer),
                (v, &fingerprint),
                &hosts,
                validators,
            )?);
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
        generator: rec.generator,
    })
}

/// One run of a record from its text: checked against the run's schema (its samples each
/// against the sample's, as they are read), its identities hashed as it is read, typed,
/// each number within the store's types.
fn typed_run(
    source: &str,
    version: u64,
    (raw, pointer): (&serde_json::value::RawValue, &str),
    (variant, fingerprint): (&VariantJson, &str),
    hosts: &[HostInfo],
    v: &Validators,
) -> Result<(RunRecord, Identities, usize), ImportError> {
    use serde::Deserialize as _;
    let at = |path: String| format!("{pointer}{path}");
    let first_error = |validator: &jsonschema::Validator, value: &Value, prefix: &str| {
        validator.iter_errors(value).next().map(|e| {
            invalid(
                source,
                version,
                format!("{prefix}{}", e.instance_path),
                e.to_string(),
            )
        })
    };
    let (mut fields, samples_text) = match super::split::run(raw) {
        Ok(parts) => parts,
        Err(whole) => {
            return Err(first_error(&v.run, &whole, pointer).unwrap_or_else(|| {
                invalid(source, version, at(String::new()), "not a run".into())
            }))
        }
    };
    // The run without its samples against the run's schema (they are checked one by one).
    let had_samples = samples_text.is_some();
    if had_samples {
        fields.insert("samples".into(), Value::Array(Vec::new()));
    }
    let value = Value::Object(fields);
    if let Some(e) = first_error(&v.run, &value, pointer) {
        return Err(e);
    }
    let Value::Object(mut fields) = value else {
        unreachable!("made an object above");
    };
    fields.remove("samples");
    let h = fields
        .get("host")
        .and_then(Value::as_u64)
        .and_then(|h| usize::try_from(h).ok())
        .unwrap_or(0);
    let Some(host) = hosts.get(h) else {
        return Err(ImportError::Inconsistent {
            source_name: source.to_string(),
            reason: format!(
                "{pointer}/host is {h}, but experiment.hosts has {} host(s)",
                hosts.len()
            ),
        });
    };
    let mut hasher = BodyHasher::start(&fields);
    let mut samples = Vec::new();
    if let Some(text) = samples_text {
        super::split::each_sample(text, &mut |k, s: Value| {
            let prefix = format!("{pointer}/samples/{k}");
            if let Some(e) = first_error(&v.sample, &s, &prefix) {
                return Err(e);
            }
            hasher.sample(&s);
            let typed = crate::record::TreeSample::deserialize(&s)
                .map_err(|e| invalid(source, version, prefix.clone(), e.to_string()))?;
            samples.push(typed);
            Ok(())
        })
        .map_err(|e| {
            e.unwrap_or_else(|| {
                invalid(
                    source,
                    version,
                    at("/samples".into()),
                    "not an array".into(),
                )
            })
        })?;
    }
    samples.shrink_to_fit();
    let identity = Identities::of(fingerprint, &variant.name, hasher.finish(host));
    fields.insert("samples".into(), Value::Array(Vec::new()));
    let mut r: RunIn = serde_json::from_value(Value::Object(fields))
        .map_err(|e| invalid(source, version, pointer.to_string(), e.to_string()))?;
    r.samples = samples;
    let record = wire::record_of(&variant.name, r).map_err(|reason| ImportError::Inconsistent {
        source_name: source.to_string(),
        reason: format!("{pointer}: {reason}"),
    })?;
    check_run(&record, pointer).map_err(|(pointer, value, why)| ImportError::OutOfRange {
        source_name: source.to_string(),
        pointer,
        value,
        why,
    })?;
    Ok((record, identity, h))
}
