//! The store's SQL schema and the steps that bring an older database up to it.

use rusqlite::{params, Connection};

use crate::linux::host::HostInfo;
use crate::plan::Plan;

use super::soak::V11_STEP;
use super::*;

pub(super) const SCHEMA: &str = r#"
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
    program_json TEXT,
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
    load_json TEXT,
    inside_json TEXT,
    driver_json TEXT,
    peak_uss_bytes INTEGER
);
CREATE INDEX runs_by_experiment ON runs(experiment_id, seq);
CREATE TABLE samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    t_seconds REAL NOT NULL,
    rss_bytes INTEGER NOT NULL,
    vsz_bytes INTEGER NOT NULL,
    threads INTEGER NOT NULL,
    pss_bytes INTEGER,
    processes INTEGER NOT NULL,
    uss_bytes INTEGER
);
CREATE INDEX samples_by_run ON samples(run_id);
CREATE TABLE events (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
"#;

/// Schema 8: the hosts runs ran on (each run references one), each experiment's plan
/// fingerprint (imports join by it), each run's identity (an import adds a run once).
/// A fresh database is [`SCHEMA`] followed by this step, as a migrated one is.
pub(super) const V8_STEP: &str = r#"
CREATE TABLE hosts (
    id INTEGER PRIMARY KEY,
    identity TEXT NOT NULL UNIQUE,
    hostname TEXT NOT NULL,
    cpus INTEGER NOT NULL,
    memory_bytes INTEGER NOT NULL,
    kernel TEXT NOT NULL,
    glibc TEXT NOT NULL,
    cpu_quota_us INTEGER,
    cpu_period_us INTEGER,
    memory_limit_bytes INTEGER,
    cpuset TEXT,
    host_json TEXT NOT NULL
);
ALTER TABLE experiments ADD COLUMN fingerprint TEXT;
CREATE INDEX experiments_by_fingerprint ON experiments(fingerprint);
ALTER TABLE runs ADD COLUMN host_id INTEGER REFERENCES hosts(id);
ALTER TABLE runs ADD COLUMN identity TEXT;
CREATE UNIQUE INDEX runs_by_identity ON runs(identity);
"#;

/// Schema 9: where each experiment came from (`origin`: made here by `run`, or made by
/// `import` from another host's record), which process runs it (`owner_*`: PID, start
/// time, boot: a SIGKILLed owner is seen gone), and the run slots claimed by running
/// memtrials (`slot_claims`: two resumes never run the same slot). Experiments of a v8
/// store that an import touched count as imported: resuming one asks for confirmation,
/// and their runs' output paths (possibly another machine's, named by a record) are
/// blanked, since memtrial opens only files it made.
/// v10: where a run's resident memory was, by kind of mapping (a JSON object).
pub(super) const V10_STEP: &str = " ALTER TABLE runs ADD COLUMN regions_json TEXT;";

/// The steps from each version to the next, by the version they lead to: a database at
/// version N takes every step to a version above N, in order.
const STEPS: &[(i64, &str)] = &[
    // v2: the kernel's cgroup figures per run.
    (2, " ALTER TABLE runs ADD COLUMN cgroup_json TEXT;"),
    // v3: a server trial's load figures.
    (3, " ALTER TABLE runs ADD COLUMN load_json TEXT;"),
    // v4: the inside view (allocator and runtime probes).
    (4, " ALTER TABLE runs ADD COLUMN inside_json TEXT;"),
    // v5: a worker's driven phase and its driver's figures.
    (5, " ALTER TABLE runs ADD COLUMN driver_json TEXT;"),
    // v6: the tree's peak USS (a column of its own beside peak_pss_bytes: a figure, not a
    // probe's view).
    (6, " ALTER TABLE runs ADD COLUMN peak_uss_bytes INTEGER;"),
    (6, " ALTER TABLE samples ADD COLUMN uss_bytes INTEGER;"),
    // v7: a variant's own program or command.
    (7, " ALTER TABLE variants ADD COLUMN program_json TEXT;"),
    // v8: hosts, fingerprints, run identities.
    (8, V8_STEP),
    // v9: origins, owners, slot claims.
    (9, V9_STEP),
    // v10: regions.
    (10, V10_STEP),
    // v11: soaks.
    (11, V11_STEP),
];
// A new version needs its step here.
const _: () = assert!(STEPS[STEPS.len() - 1].0 == SCHEMA_VERSION);

pub(super) const V9_STEP: &str = r#"
ALTER TABLE experiments ADD COLUMN origin TEXT NOT NULL DEFAULT 'local';
ALTER TABLE experiments ADD COLUMN owner_pid INTEGER;
ALTER TABLE experiments ADD COLUMN owner_start INTEGER;
ALTER TABLE experiments ADD COLUMN owner_boot TEXT;
CREATE TABLE slot_claims (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    seq INTEGER NOT NULL,
    owner_pid INTEGER NOT NULL,
    owner_start INTEGER NOT NULL,
    owner_boot TEXT NOT NULL,
    PRIMARY KEY (experiment_id, seq)
);
UPDATE experiments SET origin = 'imported'
    WHERE id IN (SELECT experiment_id FROM events WHERE kind = 'imported');
UPDATE runs SET stdout_path = '', stderr_path = ''
    WHERE experiment_id IN (SELECT id FROM experiments WHERE origin = 'imported');
"#;

/// Fills what schema 8 added for experiments stored before it: each experiment's
/// fingerprint and host, its runs' host. A plan or host that does not read is left as it
/// is (the experiment then reads as corrupt, as it did before).
pub(super) fn backfill_v8(conn: &Connection) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare("SELECT id, plan_json, host_json FROM experiments")?;
    let rows: Vec<(i64, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, plan_json, host_json) in rows {
        if let Ok(plan) = serde_json::from_str::<Plan>(&plan_json) {
            conn.execute(
                "UPDATE experiments SET fingerprint = ?2 WHERE id = ?1",
                params![id, plan.fingerprint()],
            )?;
        }
        if let Ok(host) = serde_json::from_str::<HostInfo>(&host_json) {
            let h = host_id(conn, &host)?;
            conn.execute(
                "UPDATE runs SET host_id = ?2 WHERE experiment_id = ?1 AND host_id IS NULL",
                params![id, h],
            )?;
        }
    }
    Ok(())
}

impl Store {
    /// Brings the database up to [`SCHEMA_VERSION`] (a new one: the whole schema) and
    /// marks it memtrial's ([`APPLICATION_ID`]). Only for a database [`holds`] has found
    /// memtrial's or empty. The version is read again under the write lock (`BEGIN
    /// IMMEDIATE`), so memtrials opening one new or old database at once create or migrate
    /// it once: the others wait, then find it done.
    pub(super) fn migrate(&self) -> Result<(), StoreError> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| self.err(e))?;
        let read_version = || -> Result<i64, StoreError> {
            self.conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| self.err(e))
        };
        let version = read_version()?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: version,
            });
        }
        let marked = || -> Result<bool, StoreError> {
            self.conn
                .query_row("PRAGMA application_id", [], |r| r.get::<_, i32>(0))
                .map(|a| a == APPLICATION_ID)
                .map_err(|e| self.err(e))
        };
        if version == SCHEMA_VERSION && marked()? {
            return Ok(());
        }
        self.conn
            .execute_batch("BEGIN IMMEDIATE;")
            .map_err(|e| self.err(e))?;
        // An error leaves the transaction open: dropping the connection rolls it back.
        // Another memtrial may have made or upgraded it meanwhile: what it holds is read
        // again under the lock.
        match holds(&self.conn).map_err(|e| self.err(e))? {
            Holds::Foreign(what) => {
                return Err(StoreError::Foreign {
                    path: self.path.clone(),
                    what,
                })
            }
            Holds::Nothing | Holds::Memtrial(_) => {}
        }
        let version = read_version()?;
        let mark = format!("PRAGMA application_id = {APPLICATION_ID};");
        if version == SCHEMA_VERSION {
            self.conn
                .execute_batch(&format!("{mark} COMMIT;"))
                .map_err(|e| self.err(e))?;
            return Ok(());
        }
        if version == 0 {
            let batch = format!(
                "{SCHEMA} {V8_STEP} {V9_STEP} {V10_STEP} {V11_STEP} {mark} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            );
            self.conn.execute_batch(&batch).map_err(|e| self.err(e))?;
            return Ok(());
        }
        let steps: String = STEPS
            .iter()
            .filter(|(to, _)| version < *to)
            .map(|(_, sql)| *sql)
            .collect();
        if version < SCHEMA_VERSION {
            self.conn.execute_batch(&steps).map_err(|e| self.err(e))?;
            if version < 8 {
                backfill_v8(&self.conn).map_err(|e| self.err(e))?;
            }
        }
        self.conn
            .execute_batch(&format!(
                "{mark} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}
