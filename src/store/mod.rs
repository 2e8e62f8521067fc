//! The SQLite store: experiments, variants, runs, samples and events.
//! Each run is committed as soon as it ends, so a crash loses at most the run in flight.
//! [`import`] adds the records of other machines, all files in one transaction.

pub mod import;

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};

use crate::linux::host::HostInfo;
use crate::plan::Plan;
use crate::record::{
    Experiment, ExperimentStatus, ExperimentSummary, PeakSource, RunRecord, RunStatus, TreeSample,
    Verification,
};

/// The schema version this build writes (SQLite `user_version`).
pub const SCHEMA_VERSION: i64 = 9;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite's own message, once (its error is kept, not chained: SQLite repeats its
    /// text in each layer of its error).
    #[error("database {}: {}", path.display(), sqlite_message(error))]
    Sqlite {
        path: PathBuf,
        error: rusqlite::Error,
    },
    #[error("database {}: the directory {} does not exist (create it, or pass another --db)", path.display(), dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("database {} has schema version {found}, newer than this memtrial understands ({SCHEMA_VERSION}); upgrade memtrial or use another --db", path.display())]
    NewerSchema { path: PathBuf, found: i64 },
    #[error("no database at {}: run `memtrial run …` or `memtrial demo` first, or pass --db", path.display())]
    Missing { path: PathBuf },
    #[error("experiment {id} is not in {}; `memtrial list` shows the stored ones", path.display())]
    NoSuchExperiment { path: PathBuf, id: i64 },
    #[error("{} holds no experiments yet; run `memtrial run …` or `memtrial demo` first", path.display())]
    Empty { path: PathBuf },
    #[error("database {}: stored {what} is corrupt: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
    #[error("database {}: the run cannot be stored: its record does not serialise ({reason})", path.display())]
    Unwritable { path: PathBuf, reason: String },
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
const V8_STEP: &str = r#"
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
const V9_STEP: &str = r#"
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

/// Where an experiment came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Made by `memtrial run` with this store.
    Local,
    /// Made by `memtrial import` from another host's record: its plan is data, never a
    /// command to run here unconfirmed.
    Imported,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Local => "local",
            Origin::Imported => "imported",
        }
    }
    fn parse(s: &str) -> Option<Origin> {
        match s {
            "local" => Some(Origin::Local),
            "imported" => Some(Origin::Imported),
            _ => None,
        }
    }
}

/// A process that runs an experiment or holds a slot: PID, start time (clock ticks since
/// boot, field 22 of `/proc/PID/stat`) and the boot's id — one process for good, as the
/// cgroup names do it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: i64,
    pub start: i64,
    pub boot: String,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Owner {
    /// This process.
    pub fn me() -> Owner {
        static ME: std::sync::OnceLock<Owner> = std::sync::OnceLock::new();
        ME.get_or_init(|| {
            let pid = std::process::id() as i32;
            Owner {
                pid: i64::from(pid),
                start: crate::linux::proc::read_stat(pid)
                    .ok()
                    .and_then(|s| i64::try_from(s.starttime_ticks).ok())
                    .unwrap_or(0),
                boot: boot_id(),
            }
        })
        .clone()
    }

    /// Still running: the same boot, a live PID with the recorded start time. An owner
    /// of another boot (this machine restarted since) is gone.
    pub fn alive(&self) -> bool {
        if self.boot != Owner::me().boot || self.boot.is_empty() {
            return false;
        }
        let Ok(pid) = i32::try_from(self.pid) else {
            return false;
        };
        match crate::linux::proc::read_stat(pid) {
            Ok(st) => i64::try_from(st.starttime_ticks).ok() == Some(self.start),
            Err(_) => false,
        }
    }
}

/// What a claim of a run slot found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The slot is this process's to run now.
    Taken,
    /// A run of the slot is already stored.
    Done,
    /// Another live memtrial runs it.
    Busy,
}

/// The host's row (added if new); its id.
fn host_id(tx: &Connection, h: &HostInfo) -> rusqlite::Result<i64> {
    let identity = h.identity();
    let limits = h.container.clone().unwrap_or_default();
    tx.execute(
        "INSERT OR IGNORE INTO hosts (identity, hostname, cpus, memory_bytes, kernel, glibc,
            cpu_quota_us, cpu_period_us, memory_limit_bytes, cpuset, host_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            identity,
            h.hostname,
            h.cpus,
            h.memory_bytes as i64,
            h.kernel,
            h.glibc,
            limits.cpu_quota_us.map(|v| v as i64),
            limits.cpu_period_us.map(|v| v as i64),
            limits.memory_limit_bytes.map(|v| v as i64),
            limits.cpuset,
            serde_json::to_string(h).unwrap_or_default(),
        ],
    )?;
    tx.query_row(
        "SELECT id FROM hosts WHERE identity = ?1",
        [&identity],
        |r| r.get(0),
    )
}

/// Records this process as the one running `experiment`.
fn set_owner(tx: &Connection, experiment: i64) -> rusqlite::Result<()> {
    let me = Owner::me();
    tx.execute(
        "UPDATE experiments SET owner_pid = ?2, owner_start = ?3, owner_boot = ?4 WHERE id = ?1",
        params![experiment, me.pid, me.start, me.boot],
    )?;
    Ok(())
}

/// `host`, or the experiment's own host when that is this machine recorded before its
/// cgroup limits were (an experiment of an older memtrial, resumed here): one host, not two.
fn same_host_as_recorded(
    tx: &Connection,
    experiment: i64,
    host: &HostInfo,
) -> rusqlite::Result<HostInfo> {
    let own: Option<String> = tx
        .query_row(
            "SELECT host_json FROM experiments WHERE id = ?1",
            [experiment],
            |r| r.get(0),
        )
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    let own: Option<HostInfo> = own.and_then(|j| serde_json::from_str(&j).ok());
    let without_limits = HostInfo {
        container: None,
        ..host.clone()
    };
    Ok(match own {
        Some(own) if own.container.is_none() && own == without_limits => own,
        _ => host.clone(),
    })
}

/// How a new experiment row comes to be: its status and times, and where it came from.
struct Made<'a> {
    status: ExperimentStatus,
    created_at: &'a str,
    finished_at: Option<&'a str>,
    origin: Origin,
}

/// Inserts an experiment and its variants; its id.
fn insert_experiment(
    tx: &Connection,
    plan: &Plan,
    host: &HostInfo,
    runs_planned: usize,
    made: Made<'_>,
) -> rusqlite::Result<i64> {
    let Made {
        status,
        created_at,
        finished_at,
        origin,
    } = made;
    let json = |v: Result<String, serde_json::Error>| {
        v.map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
    };
    let plan_json = json(serde_json::to_string(plan))?;
    let host_json = json(serde_json::to_string(host))?;
    let command_json = json(serde_json::to_string(&plan.command))?;
    tx.execute(
        "INSERT INTO experiments (created_at, finished_at, status, command_json, plan_json, host_json,
            runs_planned, fingerprint, origin)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            created_at,
            finished_at,
            status.as_str(),
            command_json,
            plan_json,
            host_json,
            runs_planned as i64,
            plan.fingerprint(),
            origin.as_str(),
        ],
    )?;
    let id = tx.last_insert_rowid();
    host_id(tx, host)?;
    for (i, v) in plan.variants.iter().enumerate() {
        let env_json = serde_json::to_string(&v.env).unwrap_or_else(|_| "[]".into());
        tx.execute(
            "INSERT INTO variants (experiment_id, idx, name, env_json, preload, preload_spec, origin, program_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
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
                },
                v.program
                    .as_ref()
                    .and_then(|p| serde_json::to_string(p).ok()),
            ],
        )?;
    }
    Ok(id)
}

/// Inserts one run with its samples; its row id.
fn insert_run(
    tx: &Connection,
    experiment: i64,
    seq: u32,
    r: &RunRecord,
    host: i64,
    identity: &str,
) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO runs (experiment_id, seq, variant, block, warmup, started_at, status, exit_code,
            signal, wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
            mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
            minor_faults, major_faults, processes_seen, allocator_detected, verification,
            verification_detail, message, stdout_path, stderr_path, cgroup_json, load_json, inside_json,
            driver_json, peak_uss_bytes, host_id, identity)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35)",
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
            (!r.inside.is_empty())
                .then(|| serde_json::to_string(&r.inside).ok())
                .flatten(),
            r.driver.as_ref().and_then(|d| serde_json::to_string(d).ok()),
            r.peak_uss_bytes.map(|v| v as i64),
            host,
            identity,
        ],
    )?;
    let run_id = tx.last_insert_rowid();
    let mut stmt = tx.prepare(
        "INSERT INTO samples (run_id, t_seconds, rss_bytes, vsz_bytes, threads, pss_bytes, processes, uss_bytes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for s in &r.samples {
        stmt.execute(params![
            run_id,
            s.t_seconds,
            s.rss_bytes as i64,
            s.vsz_bytes as i64,
            s.threads as i64,
            s.pss_bytes.map(|v| v as i64),
            s.processes,
            s.uss_bytes.map(|v| v as i64)
        ])?;
    }
    Ok(run_id)
}

/// Fills what schema 8 added for experiments stored before it: each experiment's
/// fingerprint and host, its runs' host. A plan or host that does not read is left as it
/// is (the experiment then reads as corrupt, as it did before).
fn backfill_v8(conn: &Connection) -> rusqlite::Result<()> {
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

/// SQLite's message without the repetitions: the extended message when there is one
/// (it already says what the code means), else the code's description.
fn sqlite_message(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(code, Some(msg)) => {
            // SQLite appends the path to "unable to open database file"; the path is
            // already said.
            let msg = msg.split(": /").next().unwrap_or(msg);
            if msg.is_empty() {
                code.to_string()
            } else {
                msg.to_string()
            }
        }
        rusqlite::Error::SqliteFailure(code, None) => code.to_string(),
        e => e.to_string(),
    }
}

/// Wraps a SQLite error with the database's path.
fn sqlite_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |error| StoreError::Sqlite {
        path: path.to_path_buf(),
        error,
    }
}

/// A write transaction that takes the write lock at its start (`BEGIN IMMEDIATE`),
/// waiting up to the busy timeout for it. A deferred one takes it at its first write, and
/// SQLite answers a reader that wants to write while another writes with "database is
/// locked" at once, whatever the timeout. Every write transaction of the store is one.
fn immediate(conn: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

/// How long a writer waits for another's write lock before giving up.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl Store {
    /// Opens (creating if needed) the database for writing.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(StoreError::NoDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                });
            }
        }
        let conn = Connection::open(path).map_err(sqlite_err(path))?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing database; a missing file is an error, not a new database.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(StoreError::NoDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                });
            }
        }
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

    fn err(&self, error: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            error,
        }
    }

    fn corrupt(&self, what: &'static str, reason: impl ToString) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what,
            reason: reason.to_string(),
        }
    }

    /// Brings the schema up to [`SCHEMA_VERSION`]. The version is read under the write
    /// lock (`BEGIN IMMEDIATE`), so memtrials opening one new or old database at once
    /// create or migrate it once: the others wait, then find it done.
    fn migrate(&self) -> Result<(), StoreError> {
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
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        self.conn
            .execute_batch("BEGIN IMMEDIATE;")
            .map_err(|e| self.err(e))?;
        // An error leaves the transaction open: dropping the connection rolls it back.
        let version = read_version()?;
        if version == 0 {
            let batch = format!(
                "{SCHEMA} {V8_STEP} {V9_STEP} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            );
            self.conn.execute_batch(&batch).map_err(|e| self.err(e))?;
            return Ok(());
        }
        // v2: the kernel's cgroup figures per run; v3: a server trial's load figures;
        // v4: the inside view (allocator and runtime probes); v5: a worker's driven
        // phase and its driver's figures; v6: the tree's peak USS (a column of its own
        // beside peak_pss_bytes: a figure, not a probe's view); v7: a variant's own
        // program or command; v8: hosts, fingerprints, run identities (see V8_STEP);
        // v9: origins, owners, slot claims (see V9_STEP).
        let mut steps = String::new();
        if version < 2 {
            steps.push_str(" ALTER TABLE runs ADD COLUMN cgroup_json TEXT;");
        }
        if version < 3 {
            steps.push_str(" ALTER TABLE runs ADD COLUMN load_json TEXT;");
        }
        if version < 4 {
            steps.push_str(" ALTER TABLE runs ADD COLUMN inside_json TEXT;");
        }
        if version < 5 {
            steps.push_str(" ALTER TABLE runs ADD COLUMN driver_json TEXT;");
        }
        if version < 6 {
            steps.push_str(" ALTER TABLE runs ADD COLUMN peak_uss_bytes INTEGER;");
            steps.push_str(" ALTER TABLE samples ADD COLUMN uss_bytes INTEGER;");
        }
        if version < 7 {
            steps.push_str(" ALTER TABLE variants ADD COLUMN program_json TEXT;");
        }
        if version < 8 {
            steps.push_str(V8_STEP);
        }
        if version < 9 {
            steps.push_str(V9_STEP);
        }
        if version < SCHEMA_VERSION {
            self.conn.execute_batch(&steps).map_err(|e| self.err(e))?;
            if version < 8 {
                backfill_v8(&self.conn).map_err(|e| self.err(e))?;
            }
        }
        self.conn
            .execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Records a new experiment; returns its id.
    pub fn create_experiment(
        &mut self,
        plan: &Plan,
        host: &HostInfo,
        runs_planned: usize,
    ) -> Result<i64, StoreError> {
        let err = sqlite_err(&self.path);
        let tx = immediate(&mut self.conn).map_err(err)?;
        let id = insert_experiment(
            &tx,
            plan,
            host,
            runs_planned,
            Made {
                status: ExperimentStatus::Running,
                created_at: &now(),
                finished_at: None,
                origin: Origin::Local,
            },
        )
        .map_err(err)?;
        set_owner(&tx, id).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// Stores one finished run on `host` with its samples, in one transaction.
    pub fn add_run(
        &mut self,
        experiment: i64,
        seq: u32,
        r: &RunRecord,
        host: &HostInfo,
    ) -> Result<i64, StoreError> {
        let err = sqlite_err(&self.path);
        let tx = immediate(&mut self.conn).map_err(err)?;
        let host = &same_host_as_recorded(&tx, experiment, host).map_err(err)?;
        let value = crate::record::wire::run_value(r).map_err(|e| StoreError::Unwritable {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let identity = import::run_identity(&value, host);
        let h = host_id(&tx, host).map_err(err)?;
        let run_id = insert_run(&tx, experiment, seq, r, h, &identity).map_err(err)?;
        // The slot is stored: its claim ends with it.
        tx.execute(
            "DELETE FROM slot_claims WHERE experiment_id = ?1 AND seq = ?2",
            params![experiment, seq],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(run_id)
    }

    /// Claims the run slot `seq` of `experiment` for this process, atomically: a slot
    /// whose run is stored (not interrupted) is [`Claim::Done`]; one claimed by another
    /// live memtrial is [`Claim::Busy`]; otherwise its interrupted run, if any, is deleted
    /// and the slot is this process's until its run is stored.
    pub fn claim_slot(&mut self, experiment: i64, seq: u32) -> Result<Claim, StoreError> {
        let err = sqlite_err(&self.path);
        let me = Owner::me();
        let tx = immediate(&mut self.conn).map_err(err)?;
        let done: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE experiment_id = ?1 AND seq = ?2
                    AND status != 'interrupted')",
                params![experiment, seq],
                |r| r.get(0),
            )
            .map_err(err)?;
        if done {
            return Ok(Claim::Done);
        }
        let holder: Option<Owner> = tx
            .query_row(
                "SELECT owner_pid, owner_start, owner_boot FROM slot_claims
                 WHERE experiment_id = ?1 AND seq = ?2",
                params![experiment, seq],
                |r| {
                    Ok(Some(Owner {
                        pid: r.get(0)?,
                        start: r.get(1)?,
                        boot: r.get(2)?,
                    }))
                },
            )
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(err)?;
        if let Some(h) = holder {
            if h != me && h.alive() {
                return Ok(Claim::Busy);
            }
        }
        tx.execute(
            "DELETE FROM samples WHERE run_id IN (SELECT id FROM runs
                WHERE experiment_id = ?1 AND seq = ?2 AND status = 'interrupted')",
            params![experiment, seq],
        )
        .map_err(err)?;
        tx.execute(
            "DELETE FROM runs WHERE experiment_id = ?1 AND seq = ?2 AND status = 'interrupted'",
            params![experiment, seq],
        )
        .map_err(err)?;
        tx.execute(
            "INSERT OR REPLACE INTO slot_claims (experiment_id, seq, owner_pid, owner_start, owner_boot)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![experiment, seq, me.pid, me.start, me.boot],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(Claim::Taken)
    }

    /// Of `seqs`, the slots with no stored run yet (an interrupted one does not count).
    pub fn missing_slots(&self, experiment: i64, seqs: &[u32]) -> Result<Vec<u32>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT DISTINCT seq FROM runs WHERE experiment_id = ?1 AND status != 'interrupted'",
            )
            .map_err(|e| self.err(e))?;
        let done: std::collections::HashSet<u32> = stmt
            .query_map([experiment], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e))?;
        Ok(seqs.iter().copied().filter(|s| !done.contains(s)).collect())
    }

    /// Whether a memtrial other than this one still runs `experiment`: its owner, or a
    /// holder of one of its slots, is alive.
    pub fn run_elsewhere(&self, experiment: i64) -> Result<bool, StoreError> {
        let me = Owner::me();
        Ok(self
            .holders(experiment)?
            .into_iter()
            .any(|o| o != me && o.alive()))
    }

    /// Whether any memtrial (this one included) still runs `experiment`. An experiment
    /// stored before owners were recorded counts as running, as it was shown before.
    fn still_running(&self, experiment: i64) -> Result<bool, StoreError> {
        let owners = self.holders(experiment)?;
        Ok(owners.is_empty() || owners.iter().any(Owner::alive))
    }

    /// The experiment's owner and the holders of its slot claims.
    fn holders(&self, experiment: i64) -> Result<Vec<Owner>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT owner_pid, owner_start, owner_boot FROM experiments
                    WHERE id = ?1 AND owner_pid IS NOT NULL
                 UNION
                 SELECT owner_pid, owner_start, owner_boot FROM slot_claims WHERE experiment_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let owners = stmt
            .query_map([experiment], |r| {
                Ok(Owner {
                    pid: r.get(0)?,
                    start: r.get::<_, Option<i64>>(1)?.unwrap_or(0),
                    boot: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(owners)
    }

    /// Where the experiment came from.
    pub fn origin(&self, experiment: i64) -> Result<Origin, StoreError> {
        let text: String = self
            .conn
            .query_row(
                "SELECT origin FROM experiments WHERE id = ?1",
                [experiment],
                |r| r.get(0),
            )
            .map_err(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => StoreError::NoSuchExperiment {
                    path: self.path.clone(),
                    id: experiment,
                },
                e => self.err(e),
            })?;
        Origin::parse(&text)
            .ok_or_else(|| self.corrupt("experiment origin", format!("unknown value {text:?}")))
    }

    /// The newest experiment made by `memtrial run` with this store on the host named
    /// `hostname`: what `run --resume` without an id resumes. Imported experiments never are.
    pub fn latest_local_id(&self, hostname: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row(
                "SELECT max(id) FROM experiments WHERE origin = 'local'
                    AND json_extract(host_json, '$.hostname') = ?1",
                [hostname],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// Deletes the runs recorded as interrupted (and their samples), before a resume
    /// runs their slots again. Returns how many were deleted.
    pub fn delete_interrupted(&mut self, experiment: i64) -> Result<usize, StoreError> {
        let err = sqlite_err(&self.path);
        let tx = immediate(&mut self.conn).map_err(err)?;
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
        set_owner(&tx, experiment).map_err(err)?;
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

    /// One column of a row, by name.
    fn get<T: rusqlite::types::FromSql>(
        &self,
        row: &rusqlite::Row<'_>,
        column: &str,
    ) -> Result<T, StoreError> {
        row.get(column).map_err(|e| self.err(e))
    }

    /// A stored name parsed by `parse`; an unknown one is corruption, not a default.
    fn parsed<T>(
        &self,
        row: &rusqlite::Row<'_>,
        column: &str,
        what: &'static str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<T, StoreError> {
        let text: String = self.get(row, column)?;
        parse(&text).ok_or_else(|| self.corrupt(what, format!("unknown value {text:?}")))
    }

    /// A column holding JSON (or NULL).
    fn json<T: serde::de::DeserializeOwned>(
        &self,
        row: &rusqlite::Row<'_>,
        column: &str,
        what: &'static str,
    ) -> Result<Option<T>, StoreError> {
        match self.get::<Option<String>>(row, column)? {
            Some(j) => Ok(Some(
                serde_json::from_str(&j).map_err(|e| self.corrupt(what, e))?,
            )),
            None => Ok(None),
        }
    }

    /// A count or size stored as SQLite's signed integer.
    fn unsigned(&self, row: &rusqlite::Row<'_>, column: &str) -> Result<u64, StoreError> {
        let v: i64 = self.get(row, column)?;
        u64::try_from(v).map_err(|_| self.corrupt("figure", format!("{column} = {v}")))
    }

    pub fn list(&self) -> Result<Vec<ExperimentSummary>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT e.id, e.created_at, e.status, e.command_json, e.runs_planned,
                        (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id) AS runs_done,
                        (SELECT count(DISTINCT host_id) FROM runs r WHERE r.experiment_id = e.id) AS hosts,
                        (SELECT group_concat(name, ',') FROM (SELECT name FROM variants v
                            WHERE v.experiment_id = e.id ORDER BY idx)) AS variant_names
                 FROM experiments e ORDER BY e.id",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let command_json: String = self.get(r, "command_json")?;
            let variants: Option<String> = self.get(r, "variant_names")?;
            let id: i64 = self.get(r, "id")?;
            let mut status =
                self.parsed(r, "status", "experiment status", ExperimentStatus::parse)?;
            // A memtrial killed (SIGKILL, a crash, a reboot) could not mark its experiment:
            // "running" with no live owner and no live slot holder is interrupted.
            if status == ExperimentStatus::Running && !self.still_running(id)? {
                status = ExperimentStatus::Interrupted;
            }
            out.push(ExperimentSummary {
                id,
                created_at: self.get(r, "created_at")?,
                status,
                command: serde_json::from_str(&command_json)
                    .map_err(|e| self.corrupt("command", e))?,
                variants: variants
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
                runs_done: self.get(r, "runs_done")?,
                runs_planned: self.get(r, "runs_planned")?,
                hosts: self.get(r, "hosts")?,
            });
        }
        Ok(out)
    }

    fn run_record(&self, r: &rusqlite::Row<'_>) -> Result<RunRecord, StoreError> {
        Ok(RunRecord {
            variant: self.get(r, "variant")?,
            block: self.get(r, "block")?,
            warmup: self.get(r, "warmup")?,
            started_at: self.get(r, "started_at")?,
            status: self.parsed(r, "status", "run status", RunStatus::parse)?,
            exit_code: self.get(r, "exit_code")?,
            signal: self.get(r, "signal")?,
            wall_seconds: self.get(r, "wall_seconds")?,
            cpu_user_seconds: self.get(r, "cpu_user_seconds")?,
            cpu_sys_seconds: self.get(r, "cpu_sys_seconds")?,
            peak_rss_bytes: self.unsigned(r, "peak_rss_bytes")?,
            peak_rss_source: self.parsed(r, "peak_rss_source", "peak source", PeakSource::parse)?,
            mean_rss_bytes: self.unsigned(r, "mean_rss_bytes")?,
            final_rss_bytes: self.unsigned(r, "final_rss_bytes")?,
            peak_pss_bytes: match self.get::<Option<i64>>(r, "peak_pss_bytes")? {
                Some(_) => Some(self.unsigned(r, "peak_pss_bytes")?),
                None => None,
            },
            peak_uss_bytes: match self.get::<Option<i64>>(r, "peak_uss_bytes")? {
                Some(_) => Some(self.unsigned(r, "peak_uss_bytes")?),
                None => None,
            },
            peak_vsz_bytes: self.unsigned(r, "peak_vsz_bytes")?,
            threads_peak: self.unsigned(r, "threads_peak")?,
            minor_faults: self.unsigned(r, "minor_faults")?,
            major_faults: self.unsigned(r, "major_faults")?,
            processes_seen: self.get(r, "processes_seen")?,
            allocator_detected: self.get(r, "allocator_detected")?,
            verification: self.parsed(r, "verification", "verification", Verification::parse)?,
            verification_detail: self.get(r, "verification_detail")?,
            message: self.get(r, "message")?,
            stdout_path: PathBuf::from(self.get::<String>(r, "stdout_path")?),
            stderr_path: PathBuf::from(self.get::<String>(r, "stderr_path")?),
            cgroup: self.json(r, "cgroup_json", "cgroup figures")?,
            load: self.json(r, "load_json", "load figures")?,
            inside: self
                .json(r, "inside_json", "inside view")?
                .unwrap_or_default(),
            driver: self.json(r, "driver_json", "driver figures")?,
            samples: Vec::new(),
        })
    }

    fn sample(&self, r: &rusqlite::Row<'_>) -> Result<TreeSample, StoreError> {
        Ok(TreeSample {
            t_seconds: self.get(r, "t_seconds")?,
            rss_bytes: self.unsigned(r, "rss_bytes")?,
            vsz_bytes: self.unsigned(r, "vsz_bytes")?,
            threads: self.unsigned(r, "threads")?,
            pss_bytes: match self.get::<Option<i64>>(r, "pss_bytes")? {
                Some(_) => Some(self.unsigned(r, "pss_bytes")?),
                None => None,
            },
            uss_bytes: match self.get::<Option<i64>>(r, "uss_bytes")? {
                Some(_) => Some(self.unsigned(r, "uss_bytes")?),
                None => None,
            },
            processes: self.get(r, "processes")?,
        })
    }

    /// Loads one experiment with every run and sample.
    pub fn load(&self, id: i64) -> Result<Experiment, StoreError> {
        let mut estmt = self
            .conn
            .prepare(
                "SELECT created_at, finished_at, status, plan_json, host_json FROM experiments WHERE id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let mut erows = estmt.query([id]).map_err(|e| self.err(e))?;
        let Some(row) = erows.next().map_err(|e| self.err(e))? else {
            return Err(StoreError::NoSuchExperiment {
                path: self.path.clone(),
                id,
            });
        };
        let created_at: String = self.get(row, "created_at")?;
        let finished_at: Option<String> = self.get(row, "finished_at")?;
        let status = self.parsed(row, "status", "experiment status", ExperimentStatus::parse)?;
        let plan: Plan = self
            .json(row, "plan_json", "plan")?
            .ok_or_else(|| self.corrupt("plan", "missing"))?;
        let host: HostInfo = self
            .json(row, "host_json", "host")?
            .ok_or_else(|| self.corrupt("host", "missing"))?;
        drop(erows);
        drop(estmt);

        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, seq, variant, block, warmup, started_at, status, exit_code, signal,
                    wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
                    mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
                    minor_faults, major_faults, processes_seen, allocator_detected, verification,
                    verification_detail, message, stdout_path, stderr_path, cgroup_json, load_json, inside_json,
                    driver_json, peak_uss_bytes, host_id
                 FROM runs WHERE experiment_id = ?1 ORDER BY seq, id",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([id]).map_err(|e| self.err(e))?;
        let mut runs: Vec<(i64, RunRecord)> = Vec::new();
        let mut seqs: Vec<u32> = Vec::new();
        let mut host_ids: Vec<Option<i64>> = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let record = self.run_record(r)?;
            seqs.push(self.get(r, "seq")?);
            host_ids.push(self.get(r, "host_id")?);
            runs.push((self.get(r, "id")?, record));
        }
        drop(rows);
        drop(stmt);
        let (hosts, run_hosts) = self.run_hosts(&host, &host_ids)?;
        let mut sstmt = self
            .conn
            .prepare(
                "SELECT t_seconds, rss_bytes, vsz_bytes, threads, pss_bytes, processes, uss_bytes
                 FROM samples WHERE run_id = ?1 ORDER BY t_seconds, rowid",
            )
            .map_err(|e| self.err(e))?;
        for (run_id, record) in runs.iter_mut() {
            let mut srows = sstmt.query([*run_id]).map_err(|e| self.err(e))?;
            while let Some(r) = srows.next().map_err(|e| self.err(e))? {
                record.samples.push(self.sample(r)?);
            }
        }
        let mut nstmt = self
            .conn
            .prepare("SELECT message FROM events WHERE experiment_id = ?1 ORDER BY rowid")
            .map_err(|e| self.err(e))?;
        let mut nrows = nstmt.query([id]).map_err(|e| self.err(e))?;
        let mut notes = Vec::new();
        while let Some(r) = nrows.next().map_err(|e| self.err(e))? {
            notes.push(self.get(r, "message")?);
        }
        Ok(Experiment {
            id,
            seqs,
            created_at,
            finished_at,
            status,
            plan,
            host,
            runs: runs.into_iter().map(|(_, r)| r).collect(),
            notes,
            hosts,
            run_hosts,
        })
    }

    /// The distinct hosts of the runs (in the order of their ids; a run without one ran
    /// on the experiment's own host) and each run's index among them.
    fn run_hosts(
        &self,
        own: &HostInfo,
        ids: &[Option<i64>],
    ) -> Result<(Vec<HostInfo>, Vec<usize>), StoreError> {
        let mut distinct: Vec<Option<i64>> = ids.to_vec();
        distinct.sort();
        distinct.dedup();
        let mut hosts = Vec::new();
        let mut keys = Vec::new();
        for id in distinct {
            let h = match id {
                Some(id) => {
                    let json: String = self
                        .conn
                        .query_row("SELECT host_json FROM hosts WHERE id = ?1", [id], |r| {
                            r.get(0)
                        })
                        .map_err(|e| self.err(e))?;
                    serde_json::from_str(&json).map_err(|e| self.corrupt("host", e))?
                }
                None => own.clone(),
            };
            keys.push(id);
            hosts.push(h);
        }
        if hosts.is_empty() {
            hosts.push(own.clone());
        }
        let run_hosts = ids
            .iter()
            .map(|id| keys.iter().position(|k| k == id).unwrap_or(0))
            .collect();
        Ok((hosts, run_hosts))
    }

    /// The newest experiment with this plan fingerprint.
    pub fn find_by_fingerprint(&self, fingerprint: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row(
                "SELECT max(id) FROM experiments WHERE fingerprint = ?1",
                [fingerprint],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
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
                program: None,
            }],
            baseline: "glibc".into(),
            runs: 1,
            warmup: 0,
            interval_ms: 100,
            timeout_ms: None,
            grace_ms: 3000,
            limits: Default::default(),
            server: None,
            probes: Default::default(),
            worker: None,
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
            peak_uss_bytes: Some(1 << 28),
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
            inside: Default::default(),
            driver: Some(crate::record::DriverFigures {
                driven_start_seconds: 0.01,
                ready_seconds: Some(0.5),
                driven_end_seconds: 2.0,
                figures: [(
                    "jobs_per_second".to_string(),
                    crate::record::DriverFigure {
                        value: 812.5,
                        unit: Some("jobs/s".into()),
                    },
                )]
                .into(),
                ignored: vec!["memtrial-figure x: bad".into()],
            }),
            samples: vec![
                TreeSample {
                    t_seconds: 0.0,
                    rss_bytes: 100,
                    vsz_bytes: 200,
                    threads: 1,
                    pss_bytes: Some(90),
                    uss_bytes: Some(80),
                    processes: 1,
                },
                TreeSample {
                    t_seconds: 0.1,
                    rss_bytes: 150,
                    vsz_bytes: 300,
                    threads: 20,
                    pss_bytes: None,
                    uss_bytes: None,
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
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
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
            let v1 = SCHEMA
                .replace(
                    ",\n    cgroup_json TEXT,\n    load_json TEXT,\n    inside_json TEXT,\n    driver_json TEXT,\n    peak_uss_bytes INTEGER",
                    "",
                )
                .replace(",\n    uss_bytes INTEGER", "")
                .replace(",\n    program_json TEXT", "");
            assert_ne!(v1, SCHEMA);
            c.execute_batch(&format!("{v1} PRAGMA user_version = 1;"))
                .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
        assert_eq!(s.load(id).unwrap().runs, vec![run()]);
    }

    /// A v4 database (before driver figures and peak USS) gains the columns; its runs read
    /// back without them.
    #[test]
    fn v4_database_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.db");
        {
            let c = Connection::open(&path).unwrap();
            let v4 = SCHEMA
                .replace(",\n    peak_uss_bytes INTEGER", "")
                .replace(",\n    driver_json TEXT", "")
                .replace(",\n    uss_bytes INTEGER", "")
                .replace(",\n    program_json TEXT", "");
            assert_ne!(v4, SCHEMA);
            c.execute_batch(&format!("{v4} PRAGMA user_version = 4;"))
                .unwrap();
        }
        let old_id;
        {
            // A run written by a v4 build: no peak_uss_bytes column.
            let c = Connection::open(&path).unwrap();
            c.execute(
                "INSERT INTO experiments (created_at, status, command_json, plan_json, host_json, runs_planned)
                 VALUES ('2026-01-01T00:00:00Z', 'complete', '[]', ?1, ?2, 1)",
                params![
                    serde_json::to_string(&plan()).unwrap(),
                    serde_json::to_string(&HostInfo::detect()).unwrap()
                ],
            )
            .unwrap();
            old_id = c.last_insert_rowid();
            c.execute(
                "INSERT INTO runs (experiment_id, seq, variant, block, warmup, started_at, status,
                    wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
                    mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
                    minor_faults, major_faults, processes_seen, allocator_detected, verification,
                    verification_detail, stdout_path, stderr_path)
                 VALUES (?1, 0, 'glibc', 0, 0, 'now', 'ok', 1.0, 0.5, 0.1, 100, 'wait4_maxrss',
                    50, 40, 90, 200, 1, 0, 0, 1, 'glibc', 'nothing_to_verify', '', '', '')",
                [old_id],
            )
            .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let version: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let old = s.load(old_id).unwrap();
        assert_eq!(old.runs[0].peak_pss_bytes, Some(90));
        assert_eq!(old.runs[0].peak_uss_bytes, None);
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
        assert_eq!(s.load(id).unwrap().runs, vec![run()]);
    }

    /// A v7 database gains hosts, fingerprints and run identities: its experiments get
    /// their plan's fingerprint, their runs the experiment's host.
    #[test]
    fn v7_database_is_migrated_to_8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v7.db");
        // Recorded by an older memtrial: no cgroup limits.
        let host = HostInfo {
            container: None,
            ..HostInfo::detect()
        };
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(&format!("{SCHEMA} PRAGMA user_version = 7;"))
                .unwrap();
            c.execute(
                "INSERT INTO experiments (created_at, status, command_json, plan_json, host_json, runs_planned)
                 VALUES ('2026-01-01T00:00:00Z', 'complete', '[]', ?1, ?2, 1)",
                params![
                    serde_json::to_string(&plan()).unwrap(),
                    serde_json::to_string(&host).unwrap()
                ],
            )
            .unwrap();
            c.execute(
                "INSERT INTO runs (experiment_id, seq, variant, block, warmup, started_at, status,
                    wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
                    mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
                    minor_faults, major_faults, processes_seen, allocator_detected, verification,
                    verification_detail, stdout_path, stderr_path)
                 VALUES (1, 0, 'glibc', 0, 0, 'now', 'ok', 1.0, 0.5, 0.1, 100, 'wait4_maxrss',
                    50, 40, 90, 200, 1, 0, 0, 1, 'glibc', 'nothing_to_verify', '', '', '')",
                [],
            )
            .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let version: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(
            s.find_by_fingerprint(&plan().fingerprint()).unwrap(),
            Some(1)
        );
        let old = s.load(1).unwrap();
        assert_eq!(old.hosts, vec![host.clone()]);
        assert_eq!(old.run_hosts, vec![0]);
        assert_eq!(s.list().unwrap()[0].hosts, 1);
        // The same machine, now with its cgroup limits recorded, is still the same host.
        let mut limited = host.clone();
        limited.container = Some(crate::linux::host::HostLimits::default());
        let mut second = run();
        second.started_at = "later".into();
        s.add_run(1, 2, &second, &limited).unwrap();
        assert_eq!(s.load(1).unwrap().hosts, vec![host.clone()]);
        // A run from another host joins it as a second host.
        let mut other = host.clone();
        other.hostname = "node-b".into();
        s.add_run(1, 1, &run(), &other).unwrap();
        let e = s.load(1).unwrap();
        assert_eq!(e.hosts, vec![host, other]);
        assert_eq!(e.run_hosts, vec![0, 1, 0]);
        assert!(e.several_hosts());
    }

    /// A v8 database gains origins, owners and slot claims: its experiments are local,
    /// except those an import touched (resumed only when confirmed); they list, load and
    /// take new runs as before.
    #[test]
    fn v8_database_is_migrated_to_9() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v8.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(&format!("{SCHEMA} {V8_STEP} PRAGMA user_version = 8;"))
                .unwrap();
            for _ in 0..2 {
                c.execute(
                    "INSERT INTO experiments (created_at, status, command_json, plan_json, host_json,
                        runs_planned, fingerprint)
                     VALUES ('2026-01-01T00:00:00Z', 'running', '[\"true\"]', ?1, ?2, 2, 'f')",
                    params![
                        serde_json::to_string(&plan()).unwrap(),
                        serde_json::to_string(&HostInfo::detect()).unwrap()
                    ],
                )
                .unwrap();
            }
            c.execute(
                "INSERT INTO events (experiment_id, at, kind, message)
                 VALUES (2, 'now', 'imported', 'imported from x.json')",
                [],
            )
            .unwrap();
            c.execute(
                "INSERT INTO runs (experiment_id, seq, variant, block, warmup, started_at, status,
                    wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
                    mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
                    minor_faults, major_faults, processes_seen, allocator_detected, verification,
                    verification_detail, stdout_path, stderr_path)
                 VALUES (2, 9, 'glibc', 0, 0, 'now', 'failed', 1.0, 0.5, 0.1, 100, 'wait4_maxrss',
                    50, 40, 90, 200, 1, 0, 0, 1, 'glibc', 'nothing_to_verify', '',
                    '/proc/self/environ', '/etc/shadow')",
                [],
            )
            .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let version: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 9);
        assert_eq!(s.origin(1).unwrap(), Origin::Local);
        assert_eq!(s.origin(2).unwrap(), Origin::Imported);
        let host = HostInfo::detect();
        assert_eq!(s.latest_local_id(&host.hostname).unwrap(), Some(1));
        // No owner was recorded: still listed as running, as before.
        assert!(s
            .list()
            .unwrap()
            .iter()
            .all(|e| e.status == ExperimentStatus::Running));
        assert_eq!(s.claim_slot(1, 0).unwrap(), Claim::Taken);
        s.add_run(1, 0, &run(), &host).unwrap();
        assert_eq!(s.claim_slot(1, 0).unwrap(), Claim::Done);
        assert_eq!(s.missing_slots(1, &[0, 1]).unwrap(), vec![1]);
        assert_eq!(s.load(1).unwrap().runs, vec![run()]);
        // The imported run keeps no path a record named.
        let imported = s.load(2).unwrap();
        assert_eq!(imported.runs[0].stderr_path, PathBuf::new());
        assert_eq!(imported.runs[0].stdout_path, PathBuf::new());
        // Opening it again changes nothing.
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.origin(2).unwrap(), Origin::Imported);
    }

    /// A slot held by a live memtrial is busy; one held by a process that is gone is free.
    #[test]
    fn slot_claims_respect_live_holders_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("m.db")).unwrap();
        let host = HostInfo::detect();
        let id = s.create_experiment(&plan(), &host, 3).unwrap();
        // PID 1 is alive, with its own start time.
        let init = crate::linux::proc::read_stat(1).unwrap().starttime_ticks as i64;
        let me = Owner::me();
        for (seq, pid, start) in [(0, 1, init), (1, 1, init + 1), (2, i64::from(i32::MAX), 5)] {
            s.conn
                .execute(
                    "INSERT INTO slot_claims VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, seq, pid, start, me.boot],
                )
                .unwrap();
        }
        assert_eq!(s.claim_slot(id, 0).unwrap(), Claim::Busy);
        assert_eq!(s.claim_slot(id, 1).unwrap(), Claim::Taken);
        assert_eq!(s.claim_slot(id, 2).unwrap(), Claim::Taken);
        // Its own claim again: still its own.
        assert_eq!(s.claim_slot(id, 2).unwrap(), Claim::Taken);
        assert!(s.run_elsewhere(id).unwrap());
    }

    /// A running experiment whose owner is gone (SIGKILL) lists as interrupted.
    #[test]
    fn an_experiment_whose_owner_is_gone_lists_as_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("m.db")).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        assert_eq!(s.list().unwrap()[0].status, ExperimentStatus::Running);
        s.conn
            .execute(
                "UPDATE experiments SET owner_pid = ?2 WHERE id = ?1",
                params![id, i64::from(i32::MAX)],
            )
            .unwrap();
        assert_eq!(s.list().unwrap()[0].status, ExperimentStatus::Interrupted);
    }

    #[test]
    fn interrupted_runs_are_deleted_for_a_resume() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("m.db")).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 2)
            .unwrap();
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
        let mut r = run();
        r.status = RunStatus::Interrupted;
        s.add_run(id, 1, &r, &HostInfo::detect()).unwrap();
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

    #[test]
    fn unknown_stored_status_is_an_error_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let mut s = Store::open(&path).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
        s.conn
            .execute("UPDATE experiments SET status = 'paused'", [])
            .unwrap();
        let e = s.load(id).unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::Corrupt {
                    what: "experiment status",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("\"paused\""), "{e}");
        assert!(s.list().is_err());
        s.conn
            .execute("UPDATE experiments SET status = 'complete'", [])
            .unwrap();
        s.conn
            .execute("UPDATE runs SET status = 'exploded'", [])
            .unwrap();
        let e = s.load(id).unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::Corrupt {
                    what: "run status",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// Rows are read by column name: a database whose columns sit in another order
    /// (as an older schema migrated by ALTER TABLE would have them) reads the same.
    #[test]
    fn columns_are_read_by_name_not_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        {
            let c = Connection::open(&path).unwrap();
            let shuffled = SCHEMA.replace(
                "    variant TEXT NOT NULL,\n    block INTEGER NOT NULL,",
                "    block INTEGER NOT NULL,\n    variant TEXT NOT NULL,",
            );
            assert_ne!(shuffled, SCHEMA);
            c.execute_batch(&format!("{shuffled} PRAGMA user_version = 7;"))
                .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
        assert_eq!(s.load(id).unwrap().runs, vec![run()]);
    }

    #[test]
    fn database_in_a_missing_directory_says_so_once() {
        let path = Path::new("/nonexistent-memtrial-dir/sub/x.db");
        for e in [
            Store::open(path).err().unwrap(),
            Store::open_existing(path).err().unwrap(),
        ] {
            let text = e.to_string();
            assert!(
                text.contains("the directory /nonexistent-memtrial-dir/sub does not exist"),
                "{text}"
            );
            assert_eq!(text.matches("x.db").count(), 1, "{text}");
        }
    }

    #[test]
    fn sqlite_errors_are_told_once() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the database file should be: SQLite cannot open it.
        let path = dir.path().join("db");
        std::fs::create_dir(&path).unwrap();
        let e = Store::open(&path).err().unwrap();
        let text = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(text.matches("unable to open").count(), 1, "{text}");
        assert_eq!(text.matches("db").count(), 1, "{text}");
    }
}
