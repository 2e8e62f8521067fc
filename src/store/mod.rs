//! The SQLite store: experiments, variants, runs, samples and events.
//! Each run is committed as soon as it ends, so a crash loses at most the run in flight.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use crate::linux::host::HostInfo;
use crate::plan::Plan;
use crate::record::{
    Experiment, ExperimentStatus, ExperimentSummary, PeakSource, RunRecord, RunStatus, TreeSample,
    Verification,
};

/// The schema version this build writes (SQLite `user_version`).
pub const SCHEMA_VERSION: i64 = 3;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database {path} has schema version {found}, newer than this memtrial understands ({SCHEMA_VERSION}); upgrade memtrial or use another --db")]
    NewerSchema { path: PathBuf, found: i64 },
    #[error("no database at {path}: run `memtrial run …` or `memtrial demo` first, or pass --db")]
    Missing { path: PathBuf },
    #[error("experiment {id} is not in {path}; `memtrial list` shows the stored ones")]
    NoSuchExperiment { path: PathBuf, id: i64 },
    #[error("{path} holds no experiments yet; run `memtrial run …` or `memtrial demo` first")]
    Empty { path: PathBuf },
    #[error("database {path}: stored {what} is corrupt: {reason}")]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = r#"
CREATE TABLE experiments (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    command_json TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    host_json TEXT NOT NULL,
    runs_planned INTEGER NOT NULL
);
CREATE TABLE variants (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    env_json TEXT NOT NULL,
    preload TEXT,
    preload_spec TEXT,
    origin TEXT NOT NULL,
    PRIMARY KEY (experiment_id, idx)
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    seq INTEGER NOT NULL,
    variant TEXT NOT NULL,
    block INTEGER NOT NULL,
    warmup INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    wall_seconds REAL NOT NULL,
    cpu_user_seconds REAL NOT NULL,
    cpu_sys_seconds REAL NOT NULL,
    peak_rss_bytes INTEGER NOT NULL,
    peak_rss_source TEXT NOT NULL,
    mean_rss_bytes INTEGER NOT NULL,
    final_rss_bytes INTEGER NOT NULL,
    peak_pss_bytes INTEGER,
    peak_vsz_bytes INTEGER NOT NULL,
    threads_peak INTEGER NOT NULL,
    minor_faults INTEGER NOT NULL,
    major_faults INTEGER NOT NULL,
    processes_seen INTEGER NOT NULL,
    allocator_detected TEXT NOT NULL,
    verification TEXT NOT NULL,
    verification_detail TEXT NOT NULL,
    message TEXT,
    stdout_path TEXT NOT NULL,
    stderr_path TEXT NOT NULL,
    cgroup_json TEXT,
    load_json TEXT
);
CREATE INDEX runs_by_experiment ON runs(experiment_id, seq);
CREATE TABLE samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    t_seconds REAL NOT NULL,
    rss_bytes INTEGER NOT NULL,
    vsz_bytes INTEGER NOT NULL,
    threads INTEGER NOT NULL,
    pss_bytes INTEGER,
    processes INTEGER NOT NULL
);
CREATE INDEX samples_by_run ON samples(run_id);
CREATE TABLE events (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
"#;

/// Wraps a SQLite error with the database's path.
fn sqlite_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl Store {
    /// Opens (creating if needed) the database for writing.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing database; a missing file is an error, not a new database.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        if !path.exists() {
            return Err(StoreError::Missing {
                path: path.to_path_buf(),
            });
        }
        Self::open(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, what: &'static str, reason: impl ToString) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what,
            reason: reason.to_string(),
        }
    }

    fn migrate(&self) -> Result<(), StoreError> {
        self.conn
            .busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| self.err(e))?;
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: version,
            });
        }
        if version == 0 {
            let batch = format!("BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;");
            self.conn.execute_batch(&batch).map_err(|e| self.err(e))?;
        } else {
            // v2: the kernel's cgroup figures per run; v3: a server trial's load figures.
            let mut steps = String::from("BEGIN;");
            if version < 2 {
                steps.push_str(" ALTER TABLE runs ADD COLUMN cgroup_json TEXT;");
            }
            if version < 3 {
                steps.push_str(" ALTER TABLE runs ADD COLUMN load_json TEXT;");
            }
            steps.push_str(&format!(" PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"));
            if version < SCHEMA_VERSION {
                self.conn.execute_batch(&steps).map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    /// Records a new experiment; returns its id.
    pub fn create_experiment(
        &mut self,
        plan: &Plan,
        host: &HostInfo,
        runs_planned: usize,
    ) -> Result<i64, StoreError> {
        let plan_json = serde_json::to_string(plan).map_err(|e| self.corrupt("plan", e))?;
        let host_json = serde_json::to_string(host).map_err(|e| self.corrupt("host", e))?;
        let command_json =
            serde_json::to_string(&plan.command).map_err(|e| self.corrupt("command", e))?;
        let err = sqlite_err(&self.path);
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO experiments (created_at, status, command_json, plan_json, host_json, runs_planned)
             VALUES (?1, 'running', ?2, ?3, ?4, ?5)",
            params![now(), command_json, plan_json, host_json, runs_planned as i64],
        )
        .map_err(err)?;
        let id = tx.last_insert_rowid();
        for (i, v) in plan.variants.iter().enumerate() {
            let env_json = serde_json::to_string(&v.env).unwrap_or_else(|_| "[]".into());
            tx.execute(
                "INSERT INTO variants (experiment_id, idx, name, env_json, preload, preload_spec, origin)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id,
                    i as i64,
                    v.name,
                    env_json,
                    v.preload.as_ref().map(|p| p.display().to_string()),
                    v.preload_spec,
                    match v.origin {
                        crate::plan::VariantOrigin::Catalog => "catalog",
                        crate::plan::VariantOrigin::Custom => "custom",
                    }
                ],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// Stores one finished run with its samples, in one transaction.
    pub fn add_run(&mut self, experiment: i64, seq: u32, r: &RunRecord) -> Result<i64, StoreError> {
        let err = sqlite_err(&self.path);
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO runs (experiment_id, seq, variant, block, warmup, started_at, status, exit_code,
                signal, wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
                mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
                minor_faults, major_faults, processes_seen, allocator_detected, verification,
                verification_detail, message, stdout_path, stderr_path, cgroup_json, load_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)",
            params![
                experiment,
                seq,
                r.variant,
                r.block,
                r.warmup,
                r.started_at,
                r.status.as_str(),
                r.exit_code,
                r.signal,
                r.wall_seconds,
                r.cpu_user_seconds,
                r.cpu_sys_seconds,
                r.peak_rss_bytes as i64,
                r.peak_rss_source.as_str(),
                r.mean_rss_bytes as i64,
                r.final_rss_bytes as i64,
                r.peak_pss_bytes.map(|v| v as i64),
                r.peak_vsz_bytes as i64,
                r.threads_peak as i64,
                r.minor_faults as i64,
                r.major_faults as i64,
                r.processes_seen,
                r.allocator_detected,
                r.verification.as_str(),
                r.verification_detail,
                r.message,
                r.stdout_path.display().to_string(),
                r.stderr_path.display().to_string(),
                r.cgroup.as_ref().and_then(|c| serde_json::to_string(c).ok()),
                r.load.as_ref().and_then(|l| serde_json::to_string(l).ok()),
            ],
        )
        .map_err(err)?;
        let run_id = tx.last_insert_rowid();
        {
            let mut stmt = tx
                .prepare(
                    "INSERT INTO samples (run_id, t_seconds, rss_bytes, vsz_bytes, threads, pss_bytes, processes)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(err)?;
            for s in &r.samples {
                stmt.execute(params![
                    run_id,
                    s.t_seconds,
                    s.rss_bytes as i64,
                    s.vsz_bytes as i64,
                    s.threads as i64,
                    s.pss_bytes.map(|v| v as i64),
                    s.processes
                ])
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(run_id)
    }

    /// Deletes the runs recorded as interrupted (and their samples), before a resume
    /// runs their slots again. Returns how many were deleted.
    pub fn delete_interrupted(&mut self, experiment: i64) -> Result<usize, StoreError> {
        let err = sqlite_err(&self.path);
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "DELETE FROM samples WHERE run_id IN
                (SELECT id FROM runs WHERE experiment_id = ?1 AND status = 'interrupted')",
            [experiment],
        )
        .map_err(err)?;
        let n = tx
            .execute(
                "DELETE FROM runs WHERE experiment_id = ?1 AND status = 'interrupted'",
                [experiment],
            )
            .map_err(err)?;
        tx.execute(
            "UPDATE experiments SET status = 'running', finished_at = NULL WHERE id = ?1",
            [experiment],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(n)
    }

    pub fn add_event(&self, experiment: i64, kind: &str, message: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO events (experiment_id, at, kind, message) VALUES (?1, ?2, ?3, ?4)",
                params![experiment, now(), kind, message],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn finish_experiment(
        &self,
        experiment: i64,
        status: ExperimentStatus,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE experiments SET status = ?2, finished_at = ?3 WHERE id = ?1",
                params![experiment, status.as_str(), now()],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The newest experiment's id.
    pub fn latest_id(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("SELECT max(id) FROM experiments", [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .map_err(|e| self.err(e))?
            .ok_or_else(|| StoreError::Empty {
                path: self.path.clone(),
            })
    }

    pub fn list(&self) -> Result<Vec<ExperimentSummary>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT e.id, e.created_at, e.status, e.command_json, e.runs_planned,
                        (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id),
                        (SELECT group_concat(name, ',') FROM (SELECT name FROM variants v
                            WHERE v.experiment_id = e.id ORDER BY idx))
                 FROM experiments e ORDER BY e.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, created_at, status, command_json, planned, done, variants) =
                row.map_err(|e| self.err(e))?;
            out.push(ExperimentSummary {
                id,
                created_at,
                status: ExperimentStatus::parse(&status),
                command: serde_json::from_str(&command_json)
                    .map_err(|e| self.corrupt("command", e))?,
                variants: variants
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
                runs_done: done,
                runs_planned: planned,
            });
        }
        Ok(out)
    }

    /// Loads one experiment with every run and sample.
    pub fn load(&self, id: i64) -> Result<Experiment, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT created_at, finished_at, status, plan_json, host_json FROM experiments WHERE id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or_else(|| StoreError::NoSuchExperiment {
                path: self.path.clone(),
                id,
            })?;
        let (created_at, finished_at, status, plan_json, host_json) = row;
        let plan: Plan = serde_json::from_str(&plan_json).map_err(|e| self.corrupt("plan", e))?;
        let host: HostInfo =
            serde_json::from_str(&host_json).map_err(|e| self.corrupt("host", e))?;

        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, variant, block, warmup, started_at, status, exit_code, signal, wall_seconds,
                    cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source, mean_rss_bytes,
                    final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak, minor_faults,
                    major_faults, processes_seen, allocator_detected, verification,
                    verification_detail, message, stdout_path, stderr_path, cgroup_json, seq, load_json
                 FROM runs WHERE experiment_id = ?1 ORDER BY seq, id",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([id]).map_err(|e| self.err(e))?;
        let mut runs: Vec<(i64, RunRecord)> = Vec::new();
        let mut seqs: Vec<u32> = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let get_err = |e| self.err(e);
            let status: String = r.get(5).map_err(get_err)?;
            let source: String = r.get(12).map_err(get_err)?;
            let verification: String = r.get(22).map_err(get_err)?;
            let record = RunRecord {
                variant: r.get(1).map_err(get_err)?,
                block: r.get(2).map_err(get_err)?,
                warmup: r.get(3).map_err(get_err)?,
                started_at: r.get(4).map_err(get_err)?,
                status: RunStatus::parse(&status)
                    .ok_or_else(|| self.corrupt("run status", &status))?,
                exit_code: r.get(6).map_err(get_err)?,
                signal: r.get(7).map_err(get_err)?,
                wall_seconds: r.get(8).map_err(get_err)?,
                cpu_user_seconds: r.get(9).map_err(get_err)?,
                cpu_sys_seconds: r.get(10).map_err(get_err)?,
                peak_rss_bytes: r.get::<_, i64>(11).map_err(get_err)? as u64,
                peak_rss_source: PeakSource::parse(&source)
                    .ok_or_else(|| self.corrupt("peak source", &source))?,
                mean_rss_bytes: r.get::<_, i64>(13).map_err(get_err)? as u64,
                final_rss_bytes: r.get::<_, i64>(14).map_err(get_err)? as u64,
                peak_pss_bytes: r
                    .get::<_, Option<i64>>(15)
                    .map_err(get_err)?
                    .map(|v| v as u64),
                peak_vsz_bytes: r.get::<_, i64>(16).map_err(get_err)? as u64,
                threads_peak: r.get::<_, i64>(17).map_err(get_err)? as u64,
                minor_faults: r.get::<_, i64>(18).map_err(get_err)? as u64,
                major_faults: r.get::<_, i64>(19).map_err(get_err)? as u64,
                processes_seen: r.get(20).map_err(get_err)?,
                allocator_detected: r.get(21).map_err(get_err)?,
                verification: Verification::parse(&verification)
                    .ok_or_else(|| self.corrupt("verification", &verification))?,
                verification_detail: r.get(23).map_err(get_err)?,
                message: r.get(24).map_err(get_err)?,
                stdout_path: PathBuf::from(r.get::<_, String>(25).map_err(get_err)?),
                stderr_path: PathBuf::from(r.get::<_, String>(26).map_err(get_err)?),
                cgroup: match r.get::<_, Option<String>>(27).map_err(get_err)? {
                    Some(j) => Some(
                        serde_json::from_str(&j).map_err(|e| self.corrupt("cgroup figures", e))?,
                    ),
                    None => None,
                },
                load: match r.get::<_, Option<String>>(29).map_err(get_err)? {
                    Some(j) => Some(
                        serde_json::from_str(&j).map_err(|e| self.corrupt("load figures", e))?,
                    ),
                    None => None,
                },
                samples: Vec::new(),
            };
            seqs.push(r.get::<_, u32>(28).map_err(get_err)?);
            runs.push((r.get(0).map_err(get_err)?, record));
        }
        drop(rows);
        drop(stmt);
        let mut sstmt = self
            .conn
            .prepare(
                "SELECT t_seconds, rss_bytes, vsz_bytes, threads, pss_bytes, processes
                 FROM samples WHERE run_id = ?1 ORDER BY t_seconds, rowid",
            )
            .map_err(|e| self.err(e))?;
        for (run_id, record) in runs.iter_mut() {
            let samples = sstmt
                .query_map([*run_id], |r| {
                    Ok(TreeSample {
                        t_seconds: r.get(0)?,
                        rss_bytes: r.get::<_, i64>(1)? as u64,
                        vsz_bytes: r.get::<_, i64>(2)? as u64,
                        threads: r.get::<_, i64>(3)? as u64,
                        pss_bytes: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
                        processes: r.get(5)?,
                    })
                })
                .map_err(|e| self.err(e))?;
            for s in samples {
                record.samples.push(s.map_err(|e| self.err(e))?);
            }
        }
        let mut estmt = self
            .conn
            .prepare("SELECT message FROM events WHERE experiment_id = ?1 ORDER BY rowid")
            .map_err(|e| self.err(e))?;
        let notes = estmt
            .query_map([id], |r| r.get::<_, String>(0))
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        Ok(Experiment {
            id,
            seqs,
            created_at,
            finished_at,
            status: ExperimentStatus::parse(&status),
            plan,
            host,
            runs: runs.into_iter().map(|(_, r)| r).collect(),
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Variant, VariantOrigin};

    fn plan() -> Plan {
        Plan {
            command: vec!["true".into()],
            program: "/bin/true".into(),
            workdir: "/".into(),
            variants: vec![Variant {
                name: "glibc".into(),
                env: vec![],
                preload: None,
                preload_spec: None,
                origin: VariantOrigin::Catalog,
            }],
            baseline: "glibc".into(),
            runs: 1,
            warmup: 0,
            interval_ms: 100,
            timeout_ms: None,
            grace_ms: 3000,
            limits: Default::default(),
            server: None,
            seed: 9,
        }
    }

    fn run() -> RunRecord {
        RunRecord {
            variant: "glibc".into(),
            block: 0,
            warmup: false,
            started_at: "2026-01-01T00:00:00Z".into(),
            status: RunStatus::Ok,
            exit_code: Some(0),
            signal: None,
            wall_seconds: 1.5,
            cpu_user_seconds: 1.0,
            cpu_sys_seconds: 0.25,
            peak_rss_bytes: 1 << 30,
            peak_rss_source: PeakSource::Wait4Maxrss,
            mean_rss_bytes: 1 << 29,
            final_rss_bytes: 1 << 28,
            peak_pss_bytes: Some(1 << 29),
            peak_vsz_bytes: 1 << 32,
            threads_peak: 20,
            minor_faults: 1000,
            major_faults: 0,
            processes_seen: 1,
            allocator_detected: "glibc".into(),
            verification: Verification::NothingToVerify,
            verification_detail: "unchanged environment".into(),
            message: None,
            stdout_path: "/tmp/a.stdout".into(),
            stderr_path: "/tmp/a.stderr".into(),
            cgroup: Some(crate::linux::cgroup::CgroupFigures {
                peak_bytes: Some(1 << 30),
                oom_kills: 1,
                ..Default::default()
            }),
            load: None,
            samples: vec![
                TreeSample {
                    t_seconds: 0.0,
                    rss_bytes: 100,
                    vsz_bytes: 200,
                    threads: 1,
                    pss_bytes: Some(90),
                    processes: 1,
                },
                TreeSample {
                    t_seconds: 0.1,
                    rss_bytes: 150,
                    vsz_bytes: 300,
                    threads: 20,
                    pss_bytes: None,
                    processes: 1,
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let mut s = Store::open(&path).unwrap();
        let host = HostInfo::detect();
        let id = s.create_experiment(&plan(), &host, 1).unwrap();
        s.add_run(id, 0, &run()).unwrap();
        s.add_event(id, "note", "hello").unwrap();
        s.finish_experiment(id, ExperimentStatus::Complete).unwrap();
        drop(s);
        let s = Store::open_existing(&path).unwrap();
        assert_eq!(s.latest_id().unwrap(), id);
        let e = s.load(id).unwrap();
        assert_eq!(e.plan, plan());
        assert_eq!(e.host, host);
        assert_eq!(e.runs, vec![run()]);
        assert_eq!(e.seqs, vec![0]);
        assert_eq!(e.notes, ["hello"]);
        assert_eq!(e.status, ExperimentStatus::Complete);
        let l = s.list().unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].variants, ["glibc"]);
        assert_eq!(l[0].runs_done, 1);
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("PRAGMA user_version = 99;").unwrap();
        }
        let e = Store::open(&path).err().unwrap();
        assert!(
            matches!(e, StoreError::NewerSchema { found: 99, .. }),
            "{e}"
        );
    }

    #[test]
    fn v1_database_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let c = Connection::open(&path).unwrap();
            let v1 = SCHEMA.replace(",\n    cgroup_json TEXT,\n    load_json TEXT", "");
            c.execute_batch(&format!("{v1} PRAGMA user_version = 1;"))
                .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        s.add_run(id, 0, &run()).unwrap();
        assert_eq!(s.load(id).unwrap().runs, vec![run()]);
    }

    #[test]
    fn interrupted_runs_are_deleted_for_a_resume() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("m.db")).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 2)
            .unwrap();
        s.add_run(id, 0, &run()).unwrap();
        let mut r = run();
        r.status = RunStatus::Interrupted;
        s.add_run(id, 1, &r).unwrap();
        s.finish_experiment(id, ExperimentStatus::Interrupted)
            .unwrap();
        assert_eq!(s.delete_interrupted(id).unwrap(), 1);
        let e = s.load(id).unwrap();
        assert_eq!(e.runs.len(), 1);
        assert_eq!(e.status, ExperimentStatus::Running);
    }

    #[test]
    fn missing_and_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("none.db");
        assert!(matches!(
            Store::open_existing(&path),
            Err(StoreError::Missing { .. })
        ));
        let s = Store::open(&path).unwrap();
        assert!(matches!(s.latest_id(), Err(StoreError::Empty { .. })));
        assert!(matches!(
            s.load(3),
            Err(StoreError::NoSuchExperiment { .. })
        ));
    }
}
