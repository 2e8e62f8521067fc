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
pub use soak::SoakTake;
use write::{host_id, insert_experiment, insert_run, Made};

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    #[error("database {} is a directory: give --db a file's path, e.g. --db {}", path.display(), path.join("memtrial.db").display())]
    Directory { path: PathBuf },
    #[error("database {} is not a regular file (a device, a pipe or a socket): memtrial keeps its store in a file of its own; give --db a file's path, e.g. --db memtrial.db", path.display())]
    NotAFile { path: PathBuf },
    #[error("{} is not an SQLite database (it begins with {began}): memtrial leaves it untouched; give --db a memtrial database, or the path of a new file", path.display())]
    NotSqlite { path: PathBuf, began: String },
    #[error("{} is another program's SQLite database ({what}), not memtrial's: memtrial leaves it untouched; give --db a memtrial database, or the path of a new file", path.display())]
    Foreign { path: PathBuf, what: String },
}

/// SQLite's `application_id` of a memtrial database ("memt"): set in every database
/// memtrial makes or upgrades, so that a file is told memtrial's (or not) before anything
/// is written to it.
pub(crate) const APPLICATION_ID: i32 = 0x6d65_6d74;

/// What a database file holds, read before anything is written to it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Holds {
    /// No table yet (a new or empty file).
    Nothing,
    /// memtrial's, at this schema version.
    Memtrial(i64),
    /// Another program's: what tells it.
    Foreign(String),
}

/// The tables every memtrial database has had since schema 1, with columns only memtrial's
/// has: how a database made before [`APPLICATION_ID`] is told memtrial's.
const OWN_TABLES: [(&str, &[&str]); 3] = [
    (
        "experiments",
        &["command_json", "plan_json", "host_json", "runs_planned"],
    ),
    (
        "runs",
        &["experiment_id", "peak_rss_bytes", "peak_rss_source"],
    ),
    ("samples", &["run_id", "rss_bytes", "vsz_bytes"]),
];

/// What the database on `conn` holds (only reads).
pub(super) fn holds(conn: &Connection) -> rusqlite::Result<Holds> {
    let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if app == APPLICATION_ID {
        return Ok(Holds::Memtrial(version));
    }
    if app != 0 {
        return Ok(Holds::Foreign(format!("its application_id is {app:#x}")));
    }
    if tables.is_empty() && version == 0 {
        return Ok(Holds::Nothing);
    }
    let mut own = version > 0;
    for (table, columns) in OWN_TABLES {
        if !own {
            break;
        }
        let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
        let have: Vec<String> = stmt
            .query_map([table], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        own = columns.iter().all(|c| have.iter().any(|h| h == c));
    }
    if own {
        return Ok(Holds::Memtrial(version));
    }
    let mut shown: Vec<String> = tables
        .iter()
        .take(5)
        .map(|t| crate::escape::terminal(t))
        .collect();
    if tables.len() > 5 {
        shown.push(format!("… {} tables in all", tables.len()));
    }
    Ok(Holds::Foreign(if shown.is_empty() {
        format!("its user_version is {version}")
    } else {
        format!("tables {}", shown.join(", "))
    }))
}

/// How a database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// For writing, made when missing (`run`, `import`, `soak`).
    Write,
    /// For writing, an existing one (`run --resume`).
    WriteExisting,
    /// For reading only (`list`, `report`, `recommend`): nothing is written, no journal
    /// made, an older schema upgraded in a copy in memory, never in the file.
    Read,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// SQLite's message without the repetitions: the extended message when there is one
/// (it already says what the code means), else the code's description.
pub(super) fn sqlite_message(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(code, _)
            if code.code == rusqlite::ErrorCode::NotADatabase =>
        {
            "file is not a database: it is damaged, or not an SQLite database this memtrial \
             reads; memtrial leaves it untouched: give --db a memtrial database, or the path \
             of a new file"
                .to_string()
        }
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

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// A non-empty file that does not start as an SQLite database does is refused before
/// SQLite opens it (its answer, "file is not a database", names neither file nor remedy).
fn check_header(path: &Path) -> Result<(), StoreError> {
    use std::io::Read;
    let mut head = Vec::with_capacity(32);
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(32).read_to_end(&mut head);
    }
    if head.starts_with(SQLITE_MAGIC) {
        return Ok(());
    }
    let n = head.len();
    let began = String::from_utf8_lossy(&head[..n]).into_owned();
    Err(StoreError::NotSqlite {
        path: path.to_path_buf(),
        began: crate::escape::terminal(&format!("{began:?}")),
    })
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
    /// Opens (creating if needed) the database for writing. A file that is not memtrial's
    /// database is refused untouched.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_as(path, Opening::Write)
    }

    /// Opens an existing database for writing; a missing file is an error, not a new
    /// database.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        Self::open_as(path, Opening::WriteExisting)
    }

    /// Opens an existing database for reading only: the file is never written (no
    /// schema step, no journal); a database of an older memtrial is upgraded in a copy in
    /// memory, and the next command that writes upgrades the file.
    pub fn open_read(path: &Path) -> Result<Store, StoreError> {
        Self::open_as(path, Opening::Read)
    }

    fn open_as(path: &Path, how: Opening) -> Result<Store, StoreError> {
        let p = || path.to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(StoreError::NoDirectory {
                    path: p(),
                    dir: dir.to_path_buf(),
                });
            }
        }
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(StoreError::Directory { path: p() }),
            Ok(m) if !m.is_file() => return Err(StoreError::NotAFile { path: p() }),
            Ok(m) if m.len() > 0 => check_header(path)?,
            Ok(_) => {}
            Err(_) if how == Opening::Write => {}
            Err(_) => return Err(StoreError::Missing { path: p() }),
        }
        let flags = match how {
            Opening::Read => {
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            }
            Opening::Write | Opening::WriteExisting => {
                rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                    | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            }
        };
        let conn = Connection::open_with_flags(path, flags).map_err(sqlite_err(path))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_err(path))?;
        // One snapshot: read piecemeal, the marks could be from before another memtrial's
        // commit of a new database's schema and the tables from after it.
        let held = conn.unchecked_transaction().and_then(|tx| {
            let held = holds(&tx)?;
            tx.commit()?;
            Ok(held)
        });
        let version = match held.map_err(sqlite_err(path))? {
            Holds::Foreign(what) => return Err(StoreError::Foreign { path: p(), what }),
            Holds::Nothing => 0,
            Holds::Memtrial(v) => v,
        };
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: p(),
                found: version,
            });
        }
        let conn = match how {
            Opening::Read if version < SCHEMA_VERSION => {
                let mut copy = Connection::open_in_memory().map_err(sqlite_err(path))?;
                rusqlite::backup::Backup::new(&conn, &mut copy)
                    .and_then(|b| b.run_to_completion(256, Duration::ZERO, None))
                    .map_err(sqlite_err(path))?;
                copy
            }
            _ => conn,
        };
        let store = Store { conn, path: p() };
        if how != Opening::Read || version < SCHEMA_VERSION {
            store.migrate()?;
        }
        Ok(store)
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

    /// Memtrials that open one new database at once: one makes the schema, the others
    /// find it memtrial's. What a database holds is read in one snapshot: read piecemeal,
    /// an opener saw the marks from before another's commit and the tables from after it,
    /// and refused the database as another program's (1 of 4 concurrent runs, in CI).
    #[test]
    fn memtrials_opening_one_new_database_at_once_all_find_it_theirs() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..150 {
            let path = dir.path().join(format!("shared-{i}.db"));
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        Store::open(&path).map(|_| ()).map_err(|e| e.to_string())
                    })
                })
                .collect();
            for o in openers {
                o.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("database {i}: {e}"));
            }
        }
    }

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
            c.execute_batch(&format!(
                "PRAGMA user_version = 99; PRAGMA application_id = {APPLICATION_ID};"
            ))
            .unwrap();
        }
        for e in [
            Store::open(&path).err().unwrap(),
            Store::open_read(&path).err().unwrap(),
        ] {
            assert!(
                matches!(e, StoreError::NewerSchema { found: 99, .. }),
                "{e}"
            );
        }
        // Without memtrial's mark, a version alone does not make a file memtrial's.
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("PRAGMA user_version = 99;")
            .unwrap();
        let e = Store::open(&other).err().unwrap();
        assert!(matches!(e, StoreError::Foreign { .. }), "{e}");
    }

    /// Another program's database, an empty file, a file that is not SQLite, a directory
    /// and a device: only what memtrial can own is opened, and a refused file is left as it
    /// was, byte for byte.
    #[test]
    fn only_memtrial_databases_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app.db");
        Connection::open(&app)
            .unwrap()
            .execute_batch(
                "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE users (id INTEGER);
                 PRAGMA user_version = 3;",
            )
            .unwrap();
        let before = std::fs::read(&app).unwrap();
        for e in [
            Store::open(&app).err().unwrap(),
            Store::open_existing(&app).err().unwrap(),
            Store::open_read(&app).err().unwrap(),
        ] {
            let text = e.to_string();
            assert!(matches!(e, StoreError::Foreign { .. }), "{text}");
            assert!(text.contains("tables runs, users"), "{text}");
            assert_eq!(text.lines().count(), 1, "{text}");
        }
        assert_eq!(std::fs::read(&app).unwrap(), before);
        let json = dir.path().join("r.json");
        std::fs::write(&json, "{\"schema_version\": 4}").unwrap();
        let e = Store::open_read(&json).err().unwrap();
        assert!(
            e.to_string().contains(
                "is not an SQLite database (it begins with \"{\\\"schema_version\\\": 4}\")"
            ),
            "{e}"
        );
        let e = Store::open(dir.path()).err().unwrap();
        assert!(matches!(e, StoreError::Directory { .. }), "{e}");
        let e = Store::open(Path::new("/dev/null")).err().unwrap();
        assert!(matches!(e, StoreError::NotAFile { .. }), "{e}");
        // An empty file is a new database.
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, "").unwrap();
        takes_a_new_run(&mut Store::open(&empty).unwrap());
        assert_current(&Store::open_read(&empty).unwrap());
    }

    /// A read of an older memtrial database leaves the file as it was and still reads it.
    #[test]
    fn reading_an_older_database_leaves_it_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v7.db");
        let c = old_database(&path, SCHEMA, 7);
        let id = insert_old_experiment(&c, &HostInfo::detect());
        insert_old_run(&c, id, 0, "ok", ["", ""]);
        drop(c);
        let before = std::fs::read(&path).unwrap();
        let s = Store::open_read(&path).unwrap();
        assert_current(&s);
        assert_eq!(s.list().unwrap().len(), 1);
        assert_eq!(s.load(id).unwrap().runs.len(), 1);
        drop(s);
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(!dir.path().join("v7.db-journal").exists());
        // A command that writes upgrades it and marks it memtrial's.
        let s = Store::open(&path).unwrap();
        let app: i32 = s
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .unwrap();
        assert_eq!(app, APPLICATION_ID);
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
        // SQLite's header and then garbage: SQLite cannot read it.
        let path = dir.path().join("db");
        let mut bytes = SQLITE_MAGIC.to_vec();
        bytes.extend([0xffu8; 4080]);
        std::fs::write(&path, bytes).unwrap();
        let e = Store::open(&path).err().unwrap();
        let text = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(text.matches("not a database").count(), 1, "{text}");
        assert_eq!(text.matches("/db").count(), 1, "{text}");
        assert!(text.contains("memtrial leaves it untouched"), "{text}");
    }
}
