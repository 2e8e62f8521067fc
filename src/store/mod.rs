//! The SQLite store: experiments, variants, runs, samples and events.
//! Each run is committed as soon as it ends, so a crash loses at most the run in flight.
//! [`import`] adds the records of other machines, all files in one transaction.

mod claims;
pub mod import;
mod read;
mod schema;
mod soak;
mod write;

use claims::set_owner;
pub use claims::{Claim, Origin, Owner};
use write::{host_id, insert_experiment, insert_run, Made};

use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// The schema version this build writes (SQLite `user_version`).
pub(crate) const SCHEMA_VERSION: i64 = 11;

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

/// SQLite's message without the repetitions: the extended message when there is one
/// (it already says what the code means), else the code's description.
pub(super) fn sqlite_message(e: &rusqlite::Error) -> String {
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
pub(super) fn sqlite_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |error| StoreError::Sqlite {
        path: path.to_path_buf(),
        error,
    }
}

/// A write transaction that takes the write lock at its start (`BEGIN IMMEDIATE`),
/// waiting up to the busy timeout for it. A deferred one takes it at its first write, and
/// SQLite answers a reader that wants to write while another writes with "database is
/// locked" at once, whatever the timeout. Every write transaction of the store is one.
pub(super) fn immediate(conn: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

/// How long a writer waits for another's write lock before giving up.
pub(super) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Where the logs of a database's experiments and soaks go: `<db-stem>-logs/` beside it.
pub fn logs_root(db: &Path) -> PathBuf {
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "memtrial".into());
    let parent = db.parent().filter(|p| !p.as_os_str().is_empty());
    parent
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(format!("{stem}-logs"))
}

pub(super) fn now() -> String {
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

    pub(super) fn err(&self, error: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            error,
        }
    }

    pub(super) fn corrupt(&self, what: &'static str, reason: impl ToString) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what,
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::schema::{SCHEMA, V8_STEP};
    use super::*;
    use crate::linux::host::HostInfo;
    use crate::record::{
        ExperimentStatus, PeakSource, RunRecord, RunStatus, TreeSample, Verification,
    };
    use rusqlite::params;

    use crate::record::fixture::plan;

    fn run() -> RunRecord {
        crate::record::fixture::with_optional_parts(RunRecord {
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
            cgroup: None,
            load: None,
            inside: Default::default(),
            regions: None,
            driver: None,
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
        })
    }

    /// A database as an older build left it: `schema` at `PRAGMA user_version = version`.
    fn old_database(path: &Path, schema: &str, version: i64) -> Connection {
        let c = Connection::open(path).unwrap();
        c.execute_batch(&format!("{schema} PRAGMA user_version = {version};"))
            .unwrap();
        c
    }

    /// An experiment row as builds before schema 8 wrote it (no fingerprint); its id.
    fn insert_old_experiment(c: &Connection, host: &HostInfo) -> i64 {
        c.execute(
            "INSERT INTO experiments (created_at, status, command_json, plan_json, host_json, runs_planned)
             VALUES ('2026-01-01T00:00:00Z', 'complete', '[]', ?1, ?2, 1)",
            params![
                serde_json::to_string(&plan()).unwrap(),
                serde_json::to_string(host).unwrap()
            ],
        )
        .unwrap();
        c.last_insert_rowid()
    }

    /// A run row with only the columns a v4 build wrote.
    fn insert_old_run(c: &Connection, experiment: i64, seq: i64, status: &str, paths: [&str; 2]) {
        c.execute(
            "INSERT INTO runs (experiment_id, seq, variant, block, warmup, started_at, status,
                wall_seconds, cpu_user_seconds, cpu_sys_seconds, peak_rss_bytes, peak_rss_source,
                mean_rss_bytes, final_rss_bytes, peak_pss_bytes, peak_vsz_bytes, threads_peak,
                minor_faults, major_faults, processes_seen, allocator_detected, verification,
                verification_detail, stdout_path, stderr_path)
             VALUES (?1, ?2, 'glibc', 0, 0, 'now', ?3, 1.0, 0.5, 0.1, 100, 'wait4_maxrss',
                50, 40, 90, 200, 1, 0, 0, 1, 'glibc', 'nothing_to_verify', '', ?4, ?5)",
            params![experiment, seq, status, paths[0], paths[1]],
        )
        .unwrap();
    }

    /// The store is at the current schema version.
    fn assert_current(s: &Store) {
        let version: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    /// A new experiment's run goes in and comes back whole.
    fn takes_a_new_run(s: &mut Store) {
        let id = s
            .create_experiment(&plan(), &HostInfo::detect(), 1)
            .unwrap();
        s.add_run(id, 0, &run(), &HostInfo::detect()).unwrap();
        assert_eq!(s.load(id).unwrap().runs, vec![run()]);
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
        let v1 = SCHEMA
            .replace(
                ",\n    cgroup_json TEXT,\n    load_json TEXT,\n    inside_json TEXT,\n    driver_json TEXT,\n    peak_uss_bytes INTEGER",
                "",
            )
            .replace(",\n    uss_bytes INTEGER", "")
            .replace(",\n    program_json TEXT", "");
        assert_ne!(v1, SCHEMA);
        old_database(&path, &v1, 1);
        takes_a_new_run(&mut Store::open(&path).unwrap());
    }

    /// A v4 database (before driver figures and peak USS) gains the columns; its runs read
    /// back without them.
    #[test]
    fn v4_database_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.db");
        let v4 = SCHEMA
            .replace(",\n    peak_uss_bytes INTEGER", "")
            .replace(",\n    driver_json TEXT", "")
            .replace(",\n    uss_bytes INTEGER", "")
            .replace(",\n    program_json TEXT", "");
        assert_ne!(v4, SCHEMA);
        // A run written by a v4 build: no peak_uss_bytes column.
        let c = old_database(&path, &v4, 4);
        let old_id = insert_old_experiment(&c, &HostInfo::detect());
        insert_old_run(&c, old_id, 0, "ok", ["", ""]);
        drop(c);
        let mut s = Store::open(&path).unwrap();
        assert_current(&s);
        let old = s.load(old_id).unwrap();
        assert_eq!(old.runs[0].peak_pss_bytes, Some(90));
        assert_eq!(old.runs[0].peak_uss_bytes, None);
        takes_a_new_run(&mut s);
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
        let c = old_database(&path, SCHEMA, 7);
        let id = insert_old_experiment(&c, &host);
        insert_old_run(&c, id, 0, "ok", ["", ""]);
        drop(c);
        let mut s = Store::open(&path).unwrap();
        assert_current(&s);
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
    fn v8_database_is_migrated_to_the_current_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v8.db");
        {
            let c = old_database(&path, &format!("{SCHEMA} {V8_STEP}"), 8);
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
            insert_old_run(&c, 2, 9, "failed", ["/proc/self/environ", "/etc/shadow"]);
        }
        let mut s = Store::open(&path).unwrap();
        assert_current(&s);
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
        let shuffled = SCHEMA.replace(
            "    variant TEXT NOT NULL,\n    block INTEGER NOT NULL,",
            "    block INTEGER NOT NULL,\n    variant TEXT NOT NULL,",
        );
        assert_ne!(shuffled, SCHEMA);
        old_database(&path, &shuffled, 7);
        takes_a_new_run(&mut Store::open(&path).unwrap());
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
