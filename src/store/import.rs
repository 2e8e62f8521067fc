//! `memtrial import`: experiment records written by `memtrial run --json FILE` on other
//! machines (or pods), added to this store with their hosts.
//!
//! Every record is read, checked against its JSON Schema and turned into typed data
//! before anything is written; then all of them go in one transaction, so an error in
//! any file leaves the store as it was. A record whose plan fingerprint equals a stored
//! experiment's joins it; otherwise it becomes a new experiment. Each run has an identity
//! (its JSON object and its host, hashed): a run already stored is not added again.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rusqlite::params;
use serde::Deserialize;
use serde_json::Value;

use super::{host_id, insert_experiment, insert_run, now, Store, StoreError};
use crate::linux::cgroup::{CgroupFigures, Limits};
use crate::linux::host::HostInfo;
use crate::plan::{
    Plan, ProbePlan, ServerPlan, Variant, VariantOrigin, VariantProgram, WorkerPlan,
    DEFAULT_GRACE_MS,
};
use crate::record::{
    DriverFigures, ExperimentStatus, InsideView, LoadFigures, PeakSource, RunRecord, RunStatus,
    TreeSample, Verification,
};
use crate::report::json::{JSON_SCHEMA_VERSION, SCHEMAS};

/// The oldest record version import reads.
pub const OLDEST_VERSION: u64 = 2;

/// Why records were not imported. Each names the file; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("no records to import: give one or more files written by `memtrial run --json FILE`")]
    Nothing,
    #[error("{source_name}: not JSON: {reason} (line {line}, column {column}); give a file written by `memtrial run --json FILE` or `memtrial report --json FILE`")]
    NotJson {
        source_name: String,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("{source_name}: not a memtrial experiment record: {reason}")]
    NotARecord { source_name: String, reason: String },
    #[error("{source_name}: schema_version {found} is newer than this memtrial reads (versions {OLDEST_VERSION} to {JSON_SCHEMA_VERSION}); upgrade memtrial (the one that wrote it is newer) and import again")]
    Newer { source_name: String, found: u64 },
    #[error("{source_name}: schema_version {found} is older than this memtrial reads (versions {OLDEST_VERSION} to {JSON_SCHEMA_VERSION}); write it again with `memtrial report --json FILE` from a newer memtrial")]
    Older { source_name: String, found: u64 },
    #[error("{source_name}: does not match the experiment record schema (version {version}) at {pointer}: {reason}; import records as `memtrial run --json FILE` wrote them")]
    Invalid {
        source_name: String,
        version: u64,
        /// The JSON pointer of the offending value (`/variants/0/runs/1/peak_rss_bytes`).
        pointer: String,
        reason: String,
    },
    #[error("{source_name}: {reason}; import records as `memtrial run --json FILE` wrote them")]
    Inconsistent { source_name: String, reason: String },
    #[error("the embedded JSON Schema of version {version} does not compile: {reason}")]
    Schema { version: u32, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What became of one imported record.
#[derive(Debug, Clone, PartialEq)]
pub struct FileOutcome {
    /// The source's name as given (a file path).
    pub source: String,
    pub experiment: i64,
    /// A new experiment (no stored one had its fingerprint) rather than a joined one.
    pub created: bool,
    pub fingerprint: String,
    pub new_runs: usize,
    pub present_runs: usize,
    /// The hostnames of its runs.
    pub hosts: Vec<String>,
    /// What the record lacked and how it was filled in, and other remarks.
    pub notes: Vec<String>,
}

/// A record read, validated and typed, before anything is written.
struct Parsed {
    source: String,
    plan: Plan,
    status: ExperimentStatus,
    created_at: String,
    finished_at: Option<String>,
    host: HostInfo,
    hosts: Vec<HostInfo>,
    notes: Vec<String>,
    /// Each run: its record, its identity, its host (an index into `hosts`).
    runs: Vec<(RunRecord, String, usize)>,
    remarks: Vec<String>,
}

#[derive(Deserialize)]
struct RecordJson {
    experiment: ExperimentJson,
    baseline: String,
    variants: Vec<VariantJson>,
    #[serde(default)]
    notes: Vec<String>,
}

#[derive(Deserialize)]
struct ExperimentJson {
    command: Vec<String>,
    started_at: String,
    #[serde(default)]
    finished_at: Option<String>,
    status: String,
    seed: u64,
    runs_per_variant: u32,
    warmup_runs_per_variant: u32,
    interval_ms: u64,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    server: Option<ServerPlan>,
    #[serde(default)]
    worker: Option<WorkerPlan>,
    #[serde(default)]
    probes: ProbePlan,
    host: HostInfo,
    #[serde(default)]
    fingerprint: Option<String>,
    #[serde(default)]
    plan: Option<Value>,
    #[serde(default)]
    hosts: Vec<HostInfo>,
}

#[derive(Deserialize)]
struct VariantJson {
    name: String,
    env: BTreeMap<String, String>,
    preload: Option<String>,
    #[serde(default)]
    preload_spec: Option<String>,
    #[serde(default)]
    origin: Option<VariantOrigin>,
    #[serde(default)]
    program: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
    runs: Vec<Value>,
}

#[derive(Deserialize)]
struct RunJson {
    #[serde(default)]
    block: u32,
    warmup: bool,
    #[serde(default)]
    started_at: String,
    status: String,
    exit_code: Option<i32>,
    #[serde(default)]
    signal: Option<i32>,
    verified: bool,
    #[serde(default)]
    verification: Option<String>,
    #[serde(default)]
    verification_detail: String,
    allocator_detected: String,
    wall_seconds: f64,
    cpu_user_seconds: f64,
    cpu_sys_seconds: f64,
    peak_rss_bytes: u64,
    peak_rss_source: String,
    mean_rss_bytes: u64,
    final_rss_bytes: u64,
    peak_pss_bytes: Option<u64>,
    #[serde(default)]
    peak_uss_bytes: Option<u64>,
    peak_vsz_bytes: u64,
    threads_peak: u64,
    #[serde(default)]
    minor_faults: u64,
    #[serde(default)]
    major_faults: u64,
    #[serde(default)]
    processes_seen: u32,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    stdout_path: String,
    #[serde(default)]
    stderr_path: String,
    #[serde(default)]
    cgroup: Option<CgroupFigures>,
    #[serde(default)]
    load: Option<LoadFigures>,
    #[serde(default)]
    driver: Option<DriverFigures>,
    #[serde(default)]
    inside: InsideView,
    samples: Vec<TreeSample>,
    #[serde(default)]
    host: Option<usize>,
}

/// `v` with every object's keys in order, as text: the same value always reads the same.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        Value::String(k.clone()),
                        canonical(m.get(k).unwrap_or(&Value::Null))
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// A run's identity: the hash of its JSON object (without its `host` index, and without
/// `verification_detail`, which a report may enrich with ld.so's complaint when it shows
/// the run) and its host's identity. The same run read from the same record twice, or
/// from a record written again later, has the same one.
pub fn run_identity(run: &Value, host: &HostInfo) -> String {
    let mut run = run.clone();
    if let Value::Object(m) = &mut run {
        m.remove("host");
        m.remove("verification_detail");
    }
    let text = format!("{}\n{}", canonical(&run), host.identity());
    crate::units::sha256_hex(text.as_bytes())
}

/// The embedded schema of `version`, compiled.
fn validator(version: u32) -> Result<jsonschema::Validator, ImportError> {
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

fn pointer_text(p: &str) -> String {
    if p.is_empty() {
        "the top level".to_string()
    } else {
        p.to_string()
    }
}

/// Reads one record: JSON, its version, its schema, then typed data.
fn parse(source: &str, text: &str) -> Result<Parsed, ImportError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| ImportError::NotJson {
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
        serde_json::from_value(doc.clone()).map_err(|e| invalid(String::new(), e.to_string()))?;
    typed(source, version, record)
}

/// The plan a v2 record implies: what it lacks is filled in and said.
fn plan_from_v2(rec: &RecordJson, remarks: &mut Vec<String>) -> Plan {
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

fn typed(source: &str, version: u64, rec: RecordJson) -> Result<Parsed, ImportError> {
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
    for v in &rec.variants {
        if plan.variant(&v.name).is_none() {
            return Err(inconsistent(format!(
                "variant {:?} is not in its plan",
                v.name
            )));
        }
    }
    let mut runs = Vec::new();
    for (vi, v) in rec.variants.iter().enumerate() {
        for (ri, value) in v.runs.iter().enumerate() {
            let pointer = format!("/variants/{vi}/runs/{ri}");
            let r: RunJson =
                serde_json::from_value(value.clone()).map_err(|e| ImportError::Invalid {
                    source_name: source.to_string(),
                    version,
                    pointer: pointer.clone(),
                    reason: e.to_string(),
                })?;
            let h = r.host.unwrap_or(0);
            let Some(host) = hosts.get(h) else {
                return Err(inconsistent(format!(
                    "{pointer}/host is {h}, but experiment.hosts has {} host(s)",
                    hosts.len()
                )));
            };
            let identity = run_identity(value, host);
            let record = run_record(&v.name, r)
                .map_err(|reason| inconsistent(format!("{pointer}: {reason}")))?;
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

fn run_record(variant: &str, r: RunJson) -> Result<RunRecord, String> {
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
        stdout_path: PathBuf::from(r.stdout_path),
        stderr_path: PathBuf::from(r.stderr_path),
        cgroup: r.cgroup,
        load: r.load,
        inside: r.inside,
        driver: r.driver,
        samples: r.samples,
    })
}

/// The first 12 hex digits of a fingerprint, as shown to users.
pub fn short(fingerprint: &str) -> &str {
    fingerprint.get(..12).unwrap_or(fingerprint)
}

/// Imports records, each a (source name, JSON text) pair: all of them or none. Every
/// record is read and validated first; then one transaction joins each to the stored
/// experiment with its plan fingerprint (or creates one) and adds the runs not already
/// stored, with their hosts.
pub fn import(
    store: &mut Store,
    records: &[(String, String)],
) -> Result<Vec<FileOutcome>, ImportError> {
    if records.is_empty() {
        return Err(ImportError::Nothing);
    }
    let parsed: Vec<Parsed> = records
        .iter()
        .map(|(name, text)| parse(name, text))
        .collect::<Result<_, _>>()?;
    let path = store.path.clone();
    let err = super::sqlite_err(&path);
    let tx = store.conn.transaction().map_err(err)?;
    let out = parsed
        .into_iter()
        .map(|p| import_one(&tx, p))
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(out)
}

/// Adds one parsed record inside the import's transaction: joins the stored experiment of
/// its plan fingerprint (or creates it), adds the runs not stored yet, and says so.
fn import_one(tx: &rusqlite::Transaction<'_>, p: Parsed) -> rusqlite::Result<FileOutcome> {
    let fingerprint = p.plan.fingerprint();
    let (experiment, created) = experiment_for(tx, &p, &fingerprint)?;
    let added = add_runs(tx, experiment, &p)?;
    // Joined runs are runs of the plan too: `list` shows done over planned.
    tx.execute(
        "UPDATE experiments SET runs_planned = max(runs_planned,
            (SELECT count(*) FROM runs WHERE experiment_id = ?1)) WHERE id = ?1",
        [experiment],
    )?;
    if created || added.new_runs > 0 {
        event(
            tx,
            experiment,
            "imported",
            &format!(
                "imported from {}: {} new run(s), {} already present{}",
                p.source,
                added.new_runs,
                added.present_runs,
                if added.hosts.is_empty() {
                    String::new()
                } else {
                    format!(" (host {})", added.hosts.join(", "))
                }
            ),
        )?;
    }
    Ok(FileOutcome {
        source: p.source,
        experiment,
        created,
        fingerprint,
        new_runs: added.new_runs,
        present_runs: added.present_runs,
        hosts: added.hosts,
        notes: p.remarks,
    })
}

fn event(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    kind: &str,
    message: &str,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO events (experiment_id, at, kind, message) VALUES (?1, ?2, ?3, ?4)",
        params![id, now(), kind, message],
    )?;
    Ok(())
}

/// The newest stored experiment of this plan fingerprint, or a new one made from the
/// record (with its notes); whether it was made.
fn experiment_for(
    tx: &rusqlite::Transaction<'_>,
    p: &Parsed,
    fingerprint: &str,
) -> rusqlite::Result<(i64, bool)> {
    let existing: Option<i64> = tx.query_row(
        "SELECT max(id) FROM experiments WHERE fingerprint = ?1",
        [fingerprint],
        |r| r.get(0),
    )?;
    if let Some(id) = existing {
        return Ok((id, false));
    }
    let planned = (p.plan.runs as usize + p.plan.warmup as usize) * p.plan.variants.len();
    let id = insert_experiment(
        tx,
        &p.plan,
        &p.host,
        planned,
        p.status,
        &p.created_at,
        p.finished_at.as_deref(),
    )?;
    for n in &p.notes {
        event(tx, id, "note", n)?;
    }
    Ok((id, true))
}

/// What adding a record's runs did.
struct Added {
    new_runs: usize,
    present_runs: usize,
    /// The hostnames of the record's runs, in order of first appearance.
    hosts: Vec<String>,
}

/// Adds the record's runs not stored yet (by identity), each with its host.
fn add_runs(
    tx: &rusqlite::Transaction<'_>,
    experiment: i64,
    p: &Parsed,
) -> rusqlite::Result<Added> {
    let host_ids: Vec<i64> = p
        .hosts
        .iter()
        .map(|h| host_id(tx, h))
        .collect::<rusqlite::Result<_>>()?;
    // Imported runs are numbered after every slot of the stored schedule, so that a
    // `run --resume` of a joined experiment never takes one of them for its own slot.
    let mut seq: u32 = tx.query_row(
        "SELECT max(coalesce(max(r.seq) + 1, 0), e.runs_planned)
         FROM experiments e LEFT JOIN runs r ON r.experiment_id = e.id
         WHERE e.id = ?1",
        [experiment],
        |r| r.get(0),
    )?;
    let mut added = Added {
        new_runs: 0,
        present_runs: 0,
        hosts: Vec::new(),
    };
    for (record, identity, h) in &p.runs {
        let present: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE identity = ?1)",
            [identity],
            |r| r.get(0),
        )?;
        if let Some(host) = p.hosts.get(*h) {
            if !added.hosts.contains(&host.hostname) {
                added.hosts.push(host.hostname.clone());
            }
        }
        if present {
            added.present_runs += 1;
            continue;
        }
        let Some(hid) = host_ids.get(*h) else {
            continue;
        };
        insert_run(tx, experiment, seq, record, *hid, identity)?;
        seq = seq.saturating_add(1);
        added.new_runs += 1;
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::report::fixture;

    fn record(e: &crate::record::Experiment) -> String {
        crate::report::json::render(e, &analyse(e))
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("m.db")).unwrap();
        (dir, s)
    }

    fn one(name: &str, text: String) -> Vec<(String, String)> {
        vec![(name.to_string(), text)]
    }

    /// The v4 record as a v3 one: what v4 added (each figure's evidence) taken out.
    fn as_v3(text: &str) -> String {
        let mut v: Value = serde_json::from_str(text).unwrap();
        v["schema_version"] = 3.into();
        v.as_object_mut().unwrap().remove("sharing");
        v["recommendation"]
            .as_object_mut()
            .unwrap()
            .remove("speed_figure");
        for var in v["variants"].as_array_mut().unwrap() {
            let s = var["summary"].as_object_mut().unwrap();
            s.remove("evidence");
            s.remove("live_departure");
            if let Some(w) = s.get_mut("why").and_then(Value::as_object_mut) {
                w.remove("live_bytes");
                w.remove("held_bytes");
            }
        }
        v.to_string()
    }

    #[test]
    fn a_v3_record_still_imports() {
        let (_d, mut s) = store();
        let e = fixture::experiment();
        let out = import(&mut s, &one("v3.json", as_v3(&record(&e)))).unwrap();
        assert_eq!(out[0].new_runs, 9);
    }

    /// The v3 record as a v2 one: what v3 added taken out.
    fn as_v2(text: &str) -> String {
        let mut v: Value = serde_json::from_str(&as_v3(text)).unwrap();
        v["schema_version"] = 2.into();
        let e = v["experiment"].as_object_mut().unwrap();
        for k in ["fingerprint", "plan", "hosts"] {
            e.remove(k);
        }
        e["host"].as_object_mut().unwrap().remove("container");
        for var in v["variants"].as_array_mut().unwrap() {
            for r in var["runs"].as_array_mut().unwrap() {
                r.as_object_mut().unwrap().remove("host");
            }
        }
        v.to_string()
    }

    #[test]
    fn a_two_host_record_imports_with_its_hosts_and_only_once() {
        let (_d, mut s) = store();
        let e = fixture::two_host_experiment();
        let out = import(&mut s, &one("both.json", record(&e))).unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0].created);
        assert_eq!((out[0].new_runs, out[0].present_runs), (18, 0));
        assert_eq!(out[0].hosts, ["node-a", "node-b"]);
        assert_eq!(out[0].fingerprint, e.plan.fingerprint());
        let got = s.load(out[0].experiment).unwrap();
        assert_eq!(got.plan, e.plan);
        assert_eq!(got.hosts, e.hosts);
        // Every run with its host, whatever order the record listed them in.
        let keyed = |x: &crate::record::Experiment| {
            let mut k: Vec<(String, u32, u64, String)> = (0..x.runs.len())
                .map(|i| {
                    let r = &x.runs[i];
                    let h = x.host_of(i).hostname.clone();
                    (r.variant.clone(), r.block, r.wall_seconds.to_bits(), h)
                })
                .collect();
            k.sort();
            k
        };
        assert_eq!(got.runs.len(), 18);
        assert_eq!(keyed(&got), keyed(&e));
        assert!(got
            .notes
            .iter()
            .any(|n| n.contains("imported from both.json")));

        let again = import(&mut s, &one("both.json", record(&e))).unwrap();
        assert!(!again[0].created);
        assert_eq!(again[0].experiment, out[0].experiment);
        assert_eq!((again[0].new_runs, again[0].present_runs), (0, 18));
        assert_eq!(s.load(out[0].experiment).unwrap().runs.len(), 18);
        assert_eq!(s.list().unwrap().len(), 1);
        assert_eq!(s.list().unwrap()[0].hosts, 2);
    }

    #[test]
    fn a_record_of_a_stored_plan_joins_its_experiment() {
        let (_d, mut s) = store();
        let e = fixture::experiment();
        let local = s.create_experiment(&e.plan, &e.host, 9).unwrap();
        let mut other = fixture::experiment();
        other.plan.seed = 99;
        other.plan.runs = 7;
        other.host.hostname = "node-b".into();
        other.hosts = vec![other.host.clone()];
        let out = import(&mut s, &one("b.json", record(&other))).unwrap();
        assert_eq!(out[0].experiment, local);
        assert!(!out[0].created);
        let got = s.load(local).unwrap();
        assert_eq!(got.hosts.len(), 1);
        assert_eq!(got.hosts[0].hostname, "node-b");
        // Numbered after the stored schedule's 9 slots: a resume never takes them for its own.
        assert!(
            !got.seqs.is_empty() && got.seqs.iter().all(|&q| q >= 9),
            "{:?}",
            got.seqs
        );
        // Another variant definition is another plan.
        let mut changed = fixture::experiment();
        changed.plan.variants[1].env = vec![("MALLOC_ARENA_MAX".into(), "4".into())];
        let out = import(&mut s, &one("c.json", record(&changed))).unwrap();
        assert!(out[0].created);
        assert_ne!(out[0].experiment, local);
    }

    /// A pod that ran one variant of the plan: its record lists every variant, with runs
    /// for one; the pods' records join one experiment.
    #[test]
    fn records_with_runs_for_one_variant_each_join() {
        let (_d, mut s) = store();
        let e = fixture::experiment();
        let only = |name: &str, host: &str| {
            let mut x = fixture::experiment();
            x.runs.retain(|r| r.variant == name);
            x.seqs = (0..x.runs.len() as u32).collect();
            x.run_hosts = vec![0; x.runs.len()];
            x.host.hostname = host.into();
            x.hosts = vec![x.host.clone()];
            record(&x)
        };
        let out = import(
            &mut s,
            &[
                ("glibc.json".into(), only("glibc", "job-glibc")),
                ("arena2.json".into(), only("arena2", "job-arena2")),
            ],
        )
        .unwrap();
        assert_eq!(out[0].experiment, out[1].experiment);
        assert_eq!((out[0].new_runs, out[1].new_runs), (3, 3));
        let got = s.load(out[0].experiment).unwrap();
        assert_eq!(got.plan.variants, e.plan.variants);
        assert_eq!(got.hosts.len(), 2);
        assert_eq!(got.runs.len(), 6);
    }

    #[test]
    fn a_newer_record_is_refused_and_nothing_is_written() {
        let (_d, mut s) = store();
        let mut v: Value = serde_json::from_str(&record(&fixture::experiment())).unwrap();
        v["schema_version"] = 99.into();
        let e = import(&mut s, &one("new.json", v.to_string())).unwrap_err();
        assert!(matches!(e, ImportError::Newer { found: 99, .. }), "{e}");
        let text = e.to_string();
        assert!(text.starts_with("new.json: schema_version 99"), "{text}");
        assert!(text.contains("versions 2 to 4") && text.contains("upgrade memtrial"));
        assert!(s.list().unwrap().is_empty());
    }

    #[test]
    fn a_schema_violation_names_the_pointer_and_stops_every_file() {
        let (_d, mut s) = store();
        let good = record(&fixture::experiment());
        let mut v: Value = serde_json::from_str(&good).unwrap();
        v["variants"][0]["runs"][1]["peak_rss_bytes"] = "x".into();
        let e = import(
            &mut s,
            &[
                ("good.json".to_string(), good),
                ("bad.json".to_string(), v.to_string()),
            ],
        )
        .unwrap_err();
        match &e {
            ImportError::Invalid {
                source_name,
                pointer,
                ..
            } => {
                assert_eq!(source_name, "bad.json");
                assert_eq!(pointer, "/variants/0/runs/1/peak_rss_bytes");
            }
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains("\"x\""), "{e}");
        assert!(s.list().unwrap().is_empty());
    }

    #[test]
    fn broken_inputs_are_errors_not_panics() {
        let (_d, mut s) = store();
        let cases = [
            ("", "not JSON"),
            ("{\"schema_version\": 3,", "not JSON"),
            ("[1, 2]", "not a memtrial experiment record"),
            ("{}", "no schema_version"),
            ("{\"schema_version\": \"3\"}", "not a number"),
            ("{\"schema_version\": 1}", "older than this memtrial reads"),
            ("{\"schema_version\": 2.5}", "not a whole number"),
            ("{\"schema_version\": 3}", "at the top level"),
        ];
        for (text, want) in cases {
            let e = import(&mut s, &one("f.json", text.to_string())).unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with("f.json: "), "{msg}");
            assert!(msg.contains(want), "{text:?}: {msg}");
        }
        assert!(matches!(import(&mut s, &[]), Err(ImportError::Nothing)));
        // A run whose host is not in the list.
        let mut v: Value = serde_json::from_str(&record(&fixture::two_host_experiment())).unwrap();
        v["variants"][0]["runs"][0]["host"] = 5.into();
        let e = import(&mut s, &one("h.json", v.to_string())).unwrap_err();
        assert!(
            e.to_string().contains("/variants/0/runs/0/host is 5"),
            "{e}"
        );
        assert!(s.list().unwrap().is_empty());
    }

    #[test]
    fn a_v2_record_imports_and_says_what_it_lacks() {
        let (_d, mut s) = store();
        let e = fixture::experiment();
        let v2 = as_v2(&record(&e));
        let out = import(&mut s, &one("old.json", v2.clone())).unwrap();
        assert_eq!(out[0].new_runs, 9);
        assert!(
            out[0].notes[0].contains("a schema v2 record"),
            "{:?}",
            out[0].notes
        );
        let got = s.load(out[0].experiment).unwrap();
        assert_eq!(got.plan.variants, e.plan.variants);
        assert_eq!(got.plan.fingerprint(), e.plan.fingerprint());
        assert_eq!(got.runs.len(), 9);
        assert_eq!(got.hosts[0].hostname, "build-1");
        // The same v2 record again adds nothing; the v3 record of the same plan joins.
        let again = import(&mut s, &one("old.json", v2)).unwrap();
        assert_eq!((again[0].new_runs, again[0].present_runs), (0, 9));
        let v3 = import(&mut s, &one("new.json", record(&e))).unwrap();
        assert_eq!(v3[0].experiment, out[0].experiment);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any byte of a valid record changed, or the record cut anywhere: an error or an
        /// import, never a panic; and an error writes nothing.
        #[test]
        fn damaged_records_never_panic(at in 0usize..100_000, byte in 0u8..128, cut in proptest::bool::ANY) {
            let good = record(&fixture::two_host_experiment());
            let mut bytes = good.into_bytes();
            let at = at % bytes.len();
            if cut {
                bytes.truncate(at);
            } else {
                bytes[at] = byte;
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let (_d, mut s) = store();
            if import(&mut s, &one("x.json", text)).is_err() {
                proptest::prop_assert!(s.list().unwrap().is_empty());
            }
        }
    }

    #[test]
    fn canonical_text_does_not_depend_on_key_order() {
        let a: Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": "q"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": "q", "b": [1, {"x": 1, "y": 2}]}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a), r#"{"a":"q","b":[1,{"x":1,"y":2}]}"#);
        let h = fixture::experiment().host;
        assert_eq!(run_identity(&a, &h), run_identity(&b, &h));
        let mut with_host = a.clone();
        with_host["host"] = 3.into();
        assert_eq!(run_identity(&a, &h), run_identity(&with_host, &h));
        let mut other = h.clone();
        other.hostname = "node-b".into();
        assert_ne!(run_identity(&a, &h), run_identity(&a, &other));
        // A report that adds ld.so's complaint to the detail exports the same run.
        let mut explained = a.clone();
        explained["verification_detail"] = "jemalloc not mapped: file too short".into();
        assert_eq!(run_identity(&a, &h), run_identity(&explained, &h));
        let mut changed = a.clone();
        changed["peak_rss_bytes"] = 1.into();
        assert_ne!(run_identity(&a, &h), run_identity(&changed, &h));
    }
}
