//! `memtrial import`: experiment records written by `memtrial run --json FILE` on other
//! machines (or pods), added to this store with their hosts.
//!
//! Every record is read, checked against its JSON Schema and turned into typed data
//! before anything is written; then all of them go in one transaction, so an error in
//! any file leaves the store as it was. A record whose plan fingerprint equals a stored
//! experiment's joins it; otherwise it becomes a new experiment. Each run has an identity
//! (its JSON object, its host, its variant and its plan's fingerprint, hashed): a run
//! already stored is not added again, and runs of other variants or plans are never taken
//! for it.
//!
//! Memory: a record is read whole (at most [`MAX_RECORD_BYTES`]), then split where its bulk
//! is and checked and typed a run and a sample at a time, never held as a JSON tree; an
//! import holds about twice the largest record's size at its peak (its text and its typed
//! runs), plus what the schemas take compiled (a few MiB).

mod identity;
mod parse;
mod split;

pub(crate) use identity::run_identity;
use identity::*;
use parse::*;

use rusqlite::params;

use super::{host_id, insert_experiment, insert_run, now, Store, StoreError};
use crate::record::wire::JSON_SCHEMA_VERSION;

/// The largest record file `memtrial import` reads (64 MiB): a record of a thousand runs
/// of an hour each, sampled every second, is about half of it. A larger input is refused
/// before it is parsed, so an import's memory stays bounded.
pub(crate) const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Reads one record file, at most [`MAX_RECORD_BYTES`]: a larger file (or an endless one,
/// such as `/dev/zero`) is refused naming the limit, having read one byte past it.
pub(crate) fn read_record(path: &std::path::Path) -> Result<(String, String), ImportError> {
    use std::io::Read;
    let source_name = path.display().to_string();
    let unreadable = |e: std::io::Error| ImportError::Unreadable {
        source_name: source_name.clone(),
        reason: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(ImportError::TooLarge { source_name });
    }
    let text = String::from_utf8(bytes).map_err(|e| ImportError::NotText {
        source_name: source_name.clone(),
        byte: e.utf8_error().valid_up_to(),
    })?;
    Ok((source_name, text))
}

/// The oldest record version import reads.
pub(crate) const OLDEST_VERSION: u64 = 2;

/// The record versions import reads, oldest and newest (for help texts).
pub fn versions_read() -> (u64, u64) {
    (OLDEST_VERSION, u64::from(JSON_SCHEMA_VERSION))
}

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
    #[error("{source_name}: not JSON: not UTF-8 text (at byte {byte}); give a file written by `memtrial run --json FILE` or `memtrial report --json FILE`")]
    NotText { source_name: String, byte: usize },
    #[error("{source_name}: larger than the {} MiB a record may be (`memtrial import` reads at most {MAX_RECORD_BYTES} bytes per file); a record this large is not one `memtrial run --json FILE` writes — split the experiment or import its records one per pod", MAX_RECORD_BYTES >> 20)]
    TooLarge { source_name: String },
    #[error(
        "cannot read {source_name}: {reason} (give files written by `memtrial run --json FILE`)"
    )]
    Unreadable { source_name: String, reason: String },
    #[error("{source_name}: {pointer} is {value}, {why}; import records as `memtrial run --json FILE` wrote them")]
    OutOfRange {
        source_name: String,
        /// The JSON pointer of the offending value.
        pointer: String,
        value: String,
        why: String,
    },
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
    import_parsed(store, parsed)
}

/// Records read and checked, not yet written: see [`read_files`] and [`import_records`].
pub struct Records(Vec<Parsed>);

/// Reads the record files at `paths`, each (at most [`MAX_RECORD_BYTES`]) read, checked and
/// typed in turn, its text dropped before the next is read. Nothing is written.
pub fn read_files(paths: &[std::path::PathBuf]) -> Result<Records, ImportError> {
    if paths.is_empty() {
        return Err(ImportError::Nothing);
    }
    let mut parsed = Vec::with_capacity(paths.len());
    for p in paths {
        let (name, text) = read_record(p)?;
        parsed.push(parse(&name, &text)?);
    }
    Ok(Records(parsed))
}

/// A record file read and checked as `import` reads it, held in memory and not stored
/// (`memtrial gate --against FILE`): the experiment, and the memtrial that wrote it.
pub fn read_experiment(
    path: &std::path::Path,
) -> Result<(crate::record::Experiment, Option<String>), ImportError> {
    let (name, text) = read_record(path)?;
    let p = parse(&name, &text)?;
    let n = p.runs.len();
    let (runs, run_hosts): (Vec<_>, Vec<_>) = p.runs.into_iter().map(|(r, _, h)| (r, h)).unzip();
    Ok((
        crate::record::Experiment {
            id: 0,
            seqs: (0..n as u32).collect(),
            created_at: p.created_at,
            finished_at: p.finished_at,
            status: p.status,
            plan: p.plan,
            host: p.host,
            runs,
            notes: p.notes,
            hosts: p.hosts,
            run_hosts,
        },
        p.generator,
    ))
}

/// Imports records read by [`read_files`]: all of them or none, in one transaction.
pub fn import_records(
    store: &mut Store,
    records: Records,
) -> Result<Vec<FileOutcome>, ImportError> {
    import_parsed(store, records.0)
}

/// Writes parsed records in one transaction.
fn import_parsed(store: &mut Store, parsed: Vec<Parsed>) -> Result<Vec<FileOutcome>, ImportError> {
    let path = store.path.clone();
    let err = super::sqlite_err(&path);
    let tx = super::immediate(&mut store.conn).map_err(err)?;
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
        super::Made {
            status: p.status,
            created_at: &p.created_at,
            finished_at: p.finished_at.as_deref(),
            origin: super::Origin::Imported,
        },
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
    let fingerprint = p.plan.fingerprint();
    for (record, identity, h) in &p.runs {
        // Stored before schema 12, a run was identified by its body's hash alone: such a
        // run is this one only within the same plan and variant.
        let present: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE identity IN (?1, ?2))
                 OR EXISTS (SELECT 1 FROM runs
                     WHERE identity IN (?3, ?4) AND variant = ?5
                       AND experiment_id IN (SELECT id FROM experiments WHERE fingerprint = ?6))",
            params![
                &identity.stored,
                &identity.as_given,
                &identity.old_stored,
                &identity.old_as_given,
                &record.variant,
                &fingerprint
            ],
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
        insert_run(tx, experiment, seq, record, *hid, &identity.stored)?;
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
    use serde_json::Value;

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
        v.as_object_mut().unwrap().remove("floor");
        v["recommendation"]
            .as_object_mut()
            .unwrap()
            .remove("speed_figure");
        for var in v["variants"].as_array_mut().unwrap() {
            let s = var["summary"].as_object_mut().unwrap();
            s.remove("evidence");
            s.remove("live_departure");
            s.remove("floor_departure");
            s.remove("peak_live_bytes");
            s.remove("peak_over_floor");
            if let Some(w) = s.get_mut("why").and_then(Value::as_object_mut) {
                w.remove("live_bytes");
                w.remove("held_bytes");
            }
            for run in var["runs"].as_array_mut().unwrap() {
                if let Some(a) = run["inside"]["allocator"].as_object_mut() {
                    a.remove("holes");
                    for key in ["series", "at_peak"] {
                        match a.get_mut(key) {
                            Some(Value::Array(points)) => points
                                .iter_mut()
                                .filter_map(Value::as_object_mut)
                                .for_each(|p| drop(p.remove("rss_bytes"))),
                            Some(Value::Object(p)) => drop(p.remove("rss_bytes")),
                            _ => {}
                        }
                    }
                }
                if let Some(i) = run["inside"].as_object_mut() {
                    i.remove("requires");
                    i.remove("cpu");
                }
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
            ("{\"schema_version\": 2.5}", "schema_version 2.5 is not a version"),
            (
                "{\"schema_version\": -1}",
                "schema_version -1 is not a version (versions are whole numbers; this memtrial reads versions 2 to 4)",
            ),
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

    fn refusal(s: &mut Store, v: &Value) -> String {
        let e = import(s, &one("r.json", v.to_string())).unwrap_err();
        assert!(s.list().unwrap().is_empty(), "{e}");
        e.to_string()
    }

    /// Issue 19 item 7: a size of 2^64-1 imported, then every report of the experiment
    /// failed on "stored figure is corrupt: -1". Numbers beyond the store's types, and
    /// durations that are none, are refused naming the field and the record.
    #[test]
    fn numbers_outside_the_store_are_refused_by_name() {
        let (_d, mut s) = store();
        let good: Value = serde_json::from_str(&record(&fixture::experiment())).unwrap();
        let cases: [(&str, Value, &str); 6] = [
            (
                "/variants/0/runs/1/peak_rss_bytes",
                u64::MAX.into(),
                "18446744073709551615",
            ),
            (
                "/variants/1/runs/0/minor_faults",
                (1u64 << 63).into(),
                "beyond what the store holds",
            ),
            ("/variants/0/runs/0/wall_seconds", (-1.0).into(), "-1"),
            (
                "/variants/0/runs/0/samples/0/rss_bytes",
                u64::MAX.into(),
                "at most 9223372036854775807",
            ),
            (
                "/variants/0/runs/0/samples/0/t_seconds",
                (-0.5).into(),
                "-0.5",
            ),
            (
                "/experiment/hosts/0/memory_bytes",
                u64::MAX.into(),
                "beyond what the store holds",
            ),
        ];
        for (pointer, value, want) in cases {
            let mut v = good.clone();
            let Some(slot) = v.pointer_mut(pointer) else {
                panic!("no {pointer} in the fixture's record");
            };
            *slot = value;
            let text = refusal(&mut s, &v);
            assert!(text.starts_with("r.json: "), "{text}");
            assert!(text.contains(pointer), "{pointer}: {text}");
            assert!(text.contains(want), "{pointer}: {text}");
        }
        // The largest stored number imports and reads back.
        let mut v = good.clone();
        v["variants"][0]["runs"][1]["peak_rss_bytes"] = (i64::MAX as u64).into();
        let out = import(&mut s, &one("max.json", v.to_string())).unwrap();
        let e = s.load(out[0].experiment).unwrap();
        assert!(e.runs.iter().any(|r| r.peak_rss_bytes == i64::MAX as u64));
    }

    /// A plan memtrial could not have made: a baseline that is no variant, two variants of
    /// one name, an empty environment key, absurd repetitions.
    #[test]
    fn impossible_plans_are_refused_by_name() {
        let (_d, mut s) = store();
        let good: Value = serde_json::from_str(&record(&fixture::experiment())).unwrap();
        let mut baseline = good.clone();
        baseline["experiment"]["plan"]["baseline"] = "nope".into();
        let text = refusal(&mut s, &baseline);
        assert!(
            text.contains("/experiment/plan/baseline is \"nope\""),
            "{text}"
        );
        assert!(text.contains("not one of the plan's variants"), "{text}");
        let mut dup = good.clone();
        let first = dup["experiment"]["plan"]["variants"][0]["name"].clone();
        dup["experiment"]["plan"]["variants"][1]["name"] = first;
        let text = refusal(&mut s, &dup);
        assert!(text.contains("/experiment/plan/variants/1/name"), "{text}");
        assert!(text.contains("used twice"), "{text}");
        let mut env = good.clone();
        env["experiment"]["plan"]["variants"][1]["env"] = serde_json::json!([["", "1"]]);
        let text = refusal(&mut s, &env);
        assert!(text.contains("/experiment/plan/variants/1/env"), "{text}");
        // The name rule of `run --plan` and `kube` (issue 19's YAML injection) holds here too.
        let mut name = good.clone();
        name["experiment"]["plan"]["variants"][1]["name"] = "x\n---\nkind: Pod".into();
        let text = refusal(&mut s, &name);
        assert!(text.contains("/experiment/plan/variants/1/name"), "{text}");
        let mut runs = good.clone();
        runs["experiment"]["plan"]["runs"] = 4_000_000_000u64.into();
        let text = refusal(&mut s, &runs);
        assert!(
            text.contains("/experiment/plan/runs is 4000000000"),
            "{text}"
        );
        // The v2 form names the record's own fields.
        let mut v2: Value = serde_json::from_str(&as_v2(&good.to_string())).unwrap();
        v2["baseline"] = "nope".into();
        let text = refusal(&mut s, &v2);
        assert!(text.contains("/baseline is \"nope\""), "{text}");
    }

    /// A record's output paths are another machine's: they are not stored, so nothing here
    /// ever opens them (a report reads the tail of a failed run's output).
    #[test]
    fn output_paths_of_a_record_are_not_kept() {
        let (_d, mut s) = store();
        let mut v: Value = serde_json::from_str(&record(&fixture::experiment())).unwrap();
        v["variants"][0]["runs"][0]["stderr_path"] = "/etc/shadow".into();
        v["variants"][0]["runs"][0]["stdout_path"] = "/proc/self/environ".into();
        let out = import(&mut s, &one("p.json", v.to_string())).unwrap();
        let e = s.load(out[0].experiment).unwrap();
        assert!(e
            .runs
            .iter()
            .all(|r| r.stdout_path.as_os_str().is_empty() && r.stderr_path.as_os_str().is_empty()));
        // The same record again is the same runs; so is the record this store writes of
        // them (blank paths), imported back.
        let again = import(&mut s, &one("p.json", v.to_string())).unwrap();
        assert_eq!(again[0].new_runs, 0);
        let back = import(&mut s, &one("back.json", record(&e))).unwrap();
        assert_eq!((back[0].new_runs, back[0].present_runs), (0, e.runs.len()));
    }

    /// A record larger than the limit is refused naming it, before it is parsed.
    #[test]
    fn an_oversized_record_is_refused_naming_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_RECORD_BYTES + 1).unwrap();
        let e = read_files(std::slice::from_ref(&path)).err().unwrap();
        assert!(matches!(e, ImportError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("64 MiB"), "{e}");
        let e = read_files(&["/dev/zero".into()]).err().unwrap();
        assert!(matches!(e, ImportError::TooLarge { .. }), "{e}");
        // At the limit it is read (and then is not JSON).
        std::fs::File::create(&path)
            .unwrap()
            .set_len(MAX_RECORD_BYTES)
            .unwrap();
        let e = read_files(std::slice::from_ref(&path)).err().unwrap();
        assert!(matches!(e, ImportError::NotJson { .. }), "{e}");
        std::fs::write(&path, b"{\"a\": \"\xff\"}").unwrap();
        let e = read_files(&[path]).err().unwrap();
        assert!(matches!(e, ImportError::NotText { byte: 7, .. }), "{e}");
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
        let id = |v: &Value, h: &crate::linux::host::HostInfo| run_identity(v, h, "f", "glibc");
        assert_eq!(id(&a, &h), id(&b, &h));
        let mut with_host = a.clone();
        with_host["host"] = 3.into();
        assert_eq!(id(&a, &h), id(&with_host, &h));
        let mut other = h.clone();
        other.hostname = "node-b".into();
        assert_ne!(id(&a, &h), id(&a, &other));
        // A report that adds ld.so's complaint to the detail exports the same run.
        let mut explained = a.clone();
        explained["verification_detail"] = "jemalloc not mapped: file too short".into();
        assert_eq!(id(&a, &h), id(&explained, &h));
        let mut changed = a.clone();
        changed["peak_rss_bytes"] = 1.into();
        assert_ne!(id(&a, &h), id(&changed, &h));
        // Another variant's or another plan's run is another run, however equal.
        assert_ne!(id(&a, &h), run_identity(&a, &h, "f", "arena2"));
        assert_ne!(id(&a, &h), run_identity(&a, &h, "g", "glibc"));
    }

    /// A run's body hashed as it is read (fields, then samples one at a time) is the hash
    /// of its whole JSON object, with its paths as given and blank.
    #[test]
    fn a_body_hashed_as_it_is_read_is_the_body_hashed_whole() {
        let e = fixture::two_host_experiment();
        for r in e.runs.iter().take(6) {
            let mut whole = crate::record::wire::run_value(r).unwrap();
            whole["stdout_path"] = "/x/1.stdout".into();
            whole["host"] = 1.into();
            let Value::Object(mut fields) = whole.clone() else {
                unreachable!()
            };
            let Some(Value::Array(samples)) = fields.remove("samples") else {
                unreachable!()
            };
            assert!(!samples.is_empty());
            let mut hasher = BodyHasher::start(&fields);
            for s in &samples {
                hasher.sample(s);
            }
            let (given, blank) = hasher.finish(&e.host);
            assert_eq!(given, body_hash(&whole, &e.host));
            let mut blanked = whole.clone();
            blanked["stdout_path"] = "".into();
            blanked["stderr_path"] = "".into();
            assert_eq!(blank, body_hash(&blanked, &e.host));
        }
    }

    /// Issue 38, item 6: runs equal in every figure but of another variant, or of another
    /// plan, are other runs (before: "2 new run(s), 2 already present", and a record of
    /// another plan with the same runs imported nothing); runs stored under the identity
    /// of before are still found present within their plan and variant.
    #[test]
    fn equal_runs_of_other_variants_or_plans_are_other_runs() {
        let (_d, mut s) = store();
        let mut v: Value = serde_json::from_str(&record(&fixture::experiment())).unwrap();
        let runs = v["variants"][0]["runs"].clone();
        for var in v["variants"].as_array_mut().unwrap() {
            var["runs"] = runs.clone();
        }
        let n = runs.as_array().unwrap().len() * v["variants"].as_array().unwrap().len();
        let out = import(&mut s, &one("same.json", v.to_string())).unwrap();
        assert_eq!((out[0].new_runs, out[0].present_runs), (n, 0));
        let mut other = v.clone();
        for at in ["/experiment/plan/command", "/experiment/command"] {
            let c = other.pointer_mut(at).unwrap().as_array_mut().unwrap();
            c.push("--another".into());
        }
        let out = import(&mut s, &one("other.json", other.to_string())).unwrap();
        assert!(out[0].created);
        assert_eq!((out[0].new_runs, out[0].present_runs), (n, 0));
        // Again: all present.
        let out = import(&mut s, &one("same.json", v.to_string())).unwrap();
        assert_eq!((out[0].new_runs, out[0].present_runs), (0, n));
        // A store whose runs carry the identities of before (a body hash alone) finds them
        // present again.
        let (_d2, mut old) = store();
        let plain = record(&fixture::experiment());
        let n = import(&mut old, &one("plain.json", plain.clone())).unwrap()[0].new_runs;
        let p = parse("plain.json", &plain).unwrap();
        for (record, ids, _) in &p.runs {
            let changed = old
                .conn
                .execute(
                    "UPDATE runs SET identity = ?2 WHERE identity = ?1 AND variant = ?3",
                    rusqlite::params![ids.stored, ids.old_stored, record.variant],
                )
                .unwrap();
            assert_eq!(changed, 1);
        }
        let again = import(&mut old, &one("plain.json", plain)).unwrap();
        assert_eq!((again[0].new_runs, again[0].present_runs), (0, n));
    }
}
