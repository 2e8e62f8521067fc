//! The soak's tables: its head, segments, windows, tiered memory series and events. Each
//! window is committed as it closes, points as they are sampled (in one transaction per
//! sampling round), so a memtrial killed mid-soak loses at most the window in flight.

use rusqlite::{params, Connection, OptionalExtension};

use super::claims::Owner;
use super::{immediate, now, Store, StoreError};
use crate::record::soak::{
    SoakEvent, SoakHead, SoakPoint, SoakSettings, SoakStatus, SoakWindow, WindowFigures, TIERS,
};

/// Schema 11: soaks.
pub(super) const V11_STEP: &str = "
CREATE TABLE soaks (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    status TEXT NOT NULL,
    settings_json TEXT NOT NULL,
    started_unix REAL NOT NULL,
    stop_reason TEXT,
    owner_pid INTEGER,
    owner_start INTEGER,
    owner_boot TEXT
);
CREATE TABLE soak_segments (
    soak_id INTEGER NOT NULL REFERENCES soaks(id),
    seg INTEGER NOT NULL,
    from_t REAL NOT NULL,
    to_t REAL NOT NULL,
    PRIMARY KEY (soak_id, seg)
);
CREATE TABLE soak_windows (
    soak_id INTEGER NOT NULL REFERENCES soaks(id),
    variant TEXT NOT NULL,
    idx INTEGER NOT NULL,
    seg INTEGER NOT NULL,
    from_t REAL NOT NULL,
    to_t REAL NOT NULL,
    warm INTEGER NOT NULL,
    figures_json TEXT NOT NULL,
    latency BLOB,
    PRIMARY KEY (soak_id, variant, idx, seg)
);
CREATE TABLE soak_points (
    soak_id INTEGER NOT NULL REFERENCES soaks(id),
    variant TEXT NOT NULL,
    tier INTEGER NOT NULL,
    t REAL NOT NULL,
    n INTEGER NOT NULL,
    rss REAL,
    working_set REAL,
    pss REAL,
    live REAL,
    held REAL
);
CREATE INDEX soak_points_by_time ON soak_points(soak_id, tier, t);
CREATE TABLE soak_events (
    soak_id INTEGER NOT NULL REFERENCES soaks(id),
    t REAL NOT NULL,
    variant TEXT,
    text TEXT NOT NULL
);
";

/// What [`Store::take_soak`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SoakTake {
    /// This process runs the soak now; the index of the segment it opened.
    Taken { segment: u32 },
    /// Another memtrial that still runs has it.
    Busy(Owner),
    /// It is done (why it stopped).
    Done(String),
    /// There is no such soak.
    Missing,
}

fn serialise<T: serde::Serialize>(store: &Store, v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Unwritable {
        path: store.path.clone(),
        reason: e.to_string(),
    })
}

impl Store {
    /// Stores a new soak, owned by this process, and its first segment; returns its id.
    pub fn create_soak(
        &mut self,
        settings: &SoakSettings,
        started_unix: f64,
    ) -> Result<i64, StoreError> {
        let json = serialise(self, settings)?;
        let me = Owner::me();
        let path = self.path.clone();
        let tx = immediate(&mut self.conn).map_err(|e| sql(&path, e))?;
        tx.execute(
            "INSERT INTO soaks (created_at, status, settings_json, started_unix, owner_pid, owner_start, owner_boot) VALUES (?1, 'running', ?2, ?3, ?4, ?5, ?6)",
            params![now(), json, started_unix, me.pid, me.start, me.boot],
        )
        .map_err(|e| sql(&path, e))?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(|e| sql(&path, e))?;
        Ok(id)
    }

    /// Takes soak `soak` for this process, atomically (one write transaction, as a run
    /// slot is claimed): a soak another live memtrial runs is [`SoakTake::Busy`], a done one
    /// [`SoakTake::Done`]; otherwise this process becomes its owner and opens its next
    /// segment at `from_t`. Two memtrials resuming one soak at once: one takes it, the
    /// other is told who has it.
    pub fn take_soak(&mut self, soak: i64, from_t: f64) -> Result<SoakTake, StoreError> {
        let me = Owner::me();
        let path = self.path.clone();
        let tx = immediate(&mut self.conn).map_err(|e| sql(&path, e))?;
        let row = tx
            .query_row(
                "SELECT status, stop_reason, owner_pid, owner_start, owner_boot FROM soaks WHERE id = ?1",
                params![soak],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| sql(&path, e))?;
        let Some((status, reason, pid, start, boot)) = row else {
            return Ok(SoakTake::Missing);
        };
        if status == SoakStatus::Done.as_str() {
            return Ok(SoakTake::Done(reason.unwrap_or_default()));
        }
        if let (Some(pid), Some(start), Some(boot)) = (pid, start, boot) {
            let owner = Owner { pid, start, boot };
            if status == SoakStatus::Running.as_str() && owner != me && owner.alive() {
                return Ok(SoakTake::Busy(owner));
            }
        }
        tx.execute(
            "UPDATE soaks SET status = 'running', stop_reason = NULL, owner_pid = ?2, owner_start = ?3, owner_boot = ?4 WHERE id = ?1",
            params![soak, me.pid, me.start, me.boot],
        )
        .map_err(|e| sql(&path, e))?;
        let segment: u32 = tx
            .query_row(
                "SELECT coalesce(max(seg) + 1, 0) FROM soak_segments WHERE soak_id = ?1",
                params![soak],
                |r| r.get(0),
            )
            .map_err(|e| sql(&path, e))?;
        tx.execute(
            "INSERT INTO soak_segments (soak_id, seg, from_t, to_t) VALUES (?1, ?2, ?3, ?3)",
            params![soak, segment, from_t],
        )
        .map_err(|e| sql(&path, e))?;
        tx.commit().map_err(|e| sql(&path, e))?;
        Ok(SoakTake::Taken { segment })
    }

    /// One sampling round: every variant's point at tier 0, and the segment's end moved
    /// to `t`; older points are thinned into coarser tiers (see [`TIERS`]) when `compact`.
    pub fn add_soak_points(
        &mut self,
        soak: i64,
        seg: u32,
        t: f64,
        points: &[(String, SoakPoint)],
        compact: bool,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = immediate(&mut self.conn).map_err(|e| sql(&path, e))?;
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO soak_points (soak_id, variant, tier, t, n, rss, working_set, pss, live, held) VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
                .map_err(|e| sql(&path, e))?;
            for (v, p) in points {
                ins.execute(params![
                    soak,
                    v,
                    p.t,
                    p.n,
                    p.rss,
                    p.working_set,
                    p.pss,
                    p.live,
                    p.held
                ])
                .map_err(|e| sql(&path, e))?;
            }
        }
        tx.execute(
            "UPDATE soak_segments SET to_t = max(to_t, ?3) WHERE soak_id = ?1 AND seg = ?2",
            params![soak, seg, t],
        )
        .map_err(|e| sql(&path, e))?;
        if compact {
            compact_points(&tx, soak, t).map_err(|e| sql(&path, e))?;
        }
        tx.commit().map_err(|e| sql(&path, e))
    }

    /// Commits one closed window of each variant.
    pub fn add_soak_windows(
        &mut self,
        soak: i64,
        windows: &[SoakWindow],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(windows.len());
        for w in windows {
            rows.push((w, serialise(self, &w.figures)?));
        }
        let path = self.path.clone();
        let tx = immediate(&mut self.conn).map_err(|e| sql(&path, e))?;
        for (w, json) in rows {
            tx.execute(
                "INSERT OR REPLACE INTO soak_windows (soak_id, variant, idx, seg, from_t, to_t, warm, figures_json, latency) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![soak, w.variant, w.index, w.segment, w.from_t, w.to_t, w.warm, json, w.latency],
            )
            .map_err(|e| sql(&path, e))?;
        }
        tx.commit().map_err(|e| sql(&path, e))
    }

    pub fn add_soak_event(&mut self, soak: i64, e: &SoakEvent) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO soak_events (soak_id, t, variant, text) VALUES (?1, ?2, ?3, ?4)",
                params![soak, e.t, e.variant, e.text],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Ends the soak with its status and why; the owner is cleared.
    pub fn end_soak(
        &mut self,
        soak: i64,
        status: SoakStatus,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE soaks SET status = ?2, stop_reason = ?3, owner_pid = NULL, owner_start = NULL, owner_boot = NULL WHERE id = ?1",
                params![soak, status.as_str(), reason],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The latest soak's id, or None when there is none.
    pub fn latest_soak(&self) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row("SELECT max(id) FROM soaks", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    pub fn soak_head(&self, soak: i64) -> Result<Option<SoakHead>, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT created_at, status, settings_json, started_unix, stop_reason, owner_pid, owner_start, owner_boot FROM soaks WHERE id = ?1",
                params![soak],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, f64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                        r.get::<_, Option<String>>(7)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((created_at, status, json, started_unix, stop_reason, pid, start, boot)) = row
        else {
            return Ok(None);
        };
        let status = SoakStatus::parse(&status)
            .ok_or_else(|| self.corrupt("soak status", format!("unknown status {status:?}")))?;
        let settings: SoakSettings =
            serde_json::from_str(&json).map_err(|e| self.corrupt("soak settings", e))?;
        let owner_alive = match (pid, start, boot) {
            (Some(pid), Some(start), Some(boot)) => Owner { pid, start, boot }.alive(),
            _ => false,
        };
        Ok(Some(SoakHead {
            id: soak,
            created_at,
            status,
            settings,
            started_unix,
            stop_reason,
            owner_alive,
            owner_pid: pid.filter(|_| owner_alive),
        }))
    }

    pub fn soak_segments(
        &self,
        soak: i64,
    ) -> Result<Vec<crate::record::soak::Segment>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT seg, from_t, to_t FROM soak_segments WHERE soak_id = ?1 ORDER BY seg")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![soak], |r| {
                Ok(crate::record::soak::Segment {
                    index: r.get(0)?,
                    from_t: r.get(1)?,
                    to_t: r.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(rows)
    }

    /// Every stored window, in time order then variant.
    pub fn soak_windows(&self, soak: i64) -> Result<Vec<SoakWindow>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT variant, idx, seg, from_t, to_t, warm, figures_json, latency FROM soak_windows WHERE soak_id = ?1 ORDER BY from_t, variant")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![soak], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, u32>(2)?,
                    r.get::<_, f64>(3)?,
                    r.get::<_, f64>(4)?,
                    r.get::<_, bool>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<Vec<u8>>>(7)?,
                ))
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        rows.into_iter()
            .map(
                |(variant, index, segment, from_t, to_t, warm, json, latency)| {
                    let figures: WindowFigures =
                        serde_json::from_str(&json).map_err(|e| self.corrupt("soak window", e))?;
                    Ok(SoakWindow {
                        variant,
                        index,
                        segment,
                        from_t,
                        to_t,
                        warm,
                        figures,
                        latency,
                    })
                },
            )
            .collect()
    }

    /// One variant's memory series, every tier merged, in time order.
    pub fn soak_points(&self, soak: i64, variant: &str) -> Result<Vec<SoakPoint>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT t, n, rss, working_set, pss, live, held FROM soak_points WHERE soak_id = ?1 AND variant = ?2 ORDER BY t")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![soak, variant], |r| {
                Ok(SoakPoint {
                    t: r.get(0)?,
                    n: r.get(1)?,
                    rss: r.get(2)?,
                    working_set: r.get(3)?,
                    pss: r.get(4)?,
                    live: r.get(5)?,
                    held: r.get(6)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(rows)
    }

    /// How many points each tier holds (for the storage figures and tests).
    pub fn soak_point_counts(&self, soak: i64) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT tier, count(*) FROM soak_points WHERE soak_id = ?1 GROUP BY tier ORDER BY tier")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![soak], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(rows)
    }

    pub fn soak_events(&self, soak: i64) -> Result<Vec<SoakEvent>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT t, variant, text FROM soak_events WHERE soak_id = ?1 ORDER BY t")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![soak], |r| {
                Ok(SoakEvent {
                    t: r.get(0)?,
                    variant: r.get(1)?,
                    text: r.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(rows)
    }
}

fn sql(path: &std::path::Path, error: rusqlite::Error) -> StoreError {
    StoreError::Sqlite {
        path: path.to_path_buf(),
        error,
    }
}

/// Thins the soak's series as it ages: the points of tier `k` older than that tier keeps
/// them become one point of tier `k + 1` per bucket of the next tier's width (the means
/// of their figures, weighted by how many samples each stands for). Only whole buckets
/// move, so a bucket is never split between two tiers.
pub(super) fn compact_points(conn: &Connection, soak: i64, now_t: f64) -> rusqlite::Result<()> {
    for k in 0..TIERS.len() - 1 {
        let keep = TIERS[k].keep_seconds;
        let bucket = TIERS[k + 1].bucket_seconds;
        let cutoff = ((now_t - keep) / bucket).floor() * bucket;
        if cutoff <= 0.0 {
            continue;
        }
        let mean = |c: &str| {
            format!("sum({c} * n) / nullif(sum(CASE WHEN {c} IS NULL THEN 0 ELSE n END), 0)")
        };
        conn.execute(
            &format!(
                "INSERT INTO soak_points (soak_id, variant, tier, t, n, rss, working_set, pss, live, held)
                 SELECT soak_id, variant, ?3, sum(t * n) / sum(n), sum(n), {}, {}, {}, {}, {}
                 FROM soak_points WHERE soak_id = ?1 AND tier = ?2 AND t < ?4
                 GROUP BY variant, CAST(t / ?5 AS INTEGER)",
                mean("rss"),
                mean("working_set"),
                mean("pss"),
                mean("live"),
                mean("held")
            ),
            params![soak, k as u32, (k + 1) as u32, cutoff, bucket],
        )?;
        conn.execute(
            "DELETE FROM soak_points WHERE soak_id = ?1 AND tier = ?2 AND t < ?3",
            params![soak, k as u32, cutoff],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SoakSettings {
        SoakSettings {
            plan: crate::record::fixture::plan(),
            window_seconds: 600.0,
            warmup_windows: 1,
            duration_seconds: 86400.0,
            until_decided: None,
            sample_seconds: 1.0,
            pss_seconds: 10.0,
        }
    }

    /// A soak whose owner still runs (here PID 1, this boot) is not taken by another
    /// memtrial; once its owner is gone (another start time: a reused PID) it is, with the
    /// next segment; a done soak never.
    #[test]
    fn a_soak_is_taken_by_one_memtrial_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let id = store.create_soak(&settings(), 0.0).unwrap();
        assert_eq!(
            store.take_soak(id, 0.0).unwrap(),
            SoakTake::Taken { segment: 0 }
        );
        let init = crate::linux::proc::read_stat(1).unwrap().starttime_ticks as i64;
        let other = Owner {
            pid: 1,
            start: init,
            boot: Owner::me().boot,
        };
        let own = |store: &Store, start: i64| {
            store
                .conn
                .execute(
                    "UPDATE soaks SET owner_pid = 1, owner_start = ?2, owner_boot = ?3 WHERE id = ?1",
                    params![id, start, other.boot],
                )
                .unwrap();
        };
        own(&store, init);
        assert_eq!(
            store.take_soak(id, 5.0).unwrap(),
            SoakTake::Busy(other.clone())
        );
        own(&store, init + 1);
        assert_eq!(
            store.take_soak(id, 9.0).unwrap(),
            SoakTake::Taken { segment: 1 }
        );
        assert_eq!(store.soak_segments(id).unwrap().len(), 2);
        store
            .end_soak(id, SoakStatus::Done, "ran its duration")
            .unwrap();
        assert_eq!(
            store.take_soak(id, 20.0).unwrap(),
            SoakTake::Done("ran its duration".into())
        );
        assert_eq!(store.take_soak(id + 1, 0.0).unwrap(), SoakTake::Missing);
    }

    /// A day of five variants sampled every second, on a synthetic clock, compacted as the
    /// soak compacts (once a minute): the tiers hold what they promise and the database
    /// stays far under 30 MB.
    #[test]
    fn a_day_of_five_variants_stays_small_and_keeps_its_shape() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("soak.db");
        let mut store = Store::open(&db).unwrap();
        // A day of commits at a disk's pace would take minutes, and a journal file made and
        // removed per commit half a minute: durability is not tested here.
        store
            .conn
            .execute_batch("PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY;")
            .unwrap();
        let id = store.create_soak(&settings(), 0.0).unwrap();
        assert_eq!(
            store.take_soak(id, 0.0).unwrap(),
            SoakTake::Taken { segment: 0 }
        );
        let variants: Vec<String> = (0..5).map(|i| format!("v{i}")).collect();
        let day = 86_400u32;
        for s in 1..=day {
            let t = f64::from(s);
            let points: Vec<(String, SoakPoint)> = variants
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let rss = 1e8 * (i as f64 + 1.0) + t * 100.0;
                    (
                        v.clone(),
                        SoakPoint {
                            t,
                            n: 1,
                            rss: Some(rss),
                            working_set: Some(rss * 0.9),
                            pss: (s % 10 == 0).then_some(rss * 0.8),
                            live: Some(5e7),
                            held: Some(6e7),
                        },
                    )
                })
                .collect();
            store
                .add_soak_points(id, 0, t, &points, s % 60 == 0)
                .unwrap();
        }
        let counts = store.soak_point_counts(id).unwrap();
        // Tier 0: the last 10 minutes (within one compaction interval of it); tier 1:
        // 10-second means over 6 hours; tier 2: minute means for the rest.
        let get = |k: u32| counts.iter().find(|c| c.0 == k).map_or(0, |c| c.1);
        assert!((600 * 5..=660 * 5).contains(&get(0)), "{counts:?}");
        assert!((2100 * 5..=2170 * 5).contains(&get(1)), "{counts:?}");
        assert!((1070 * 5..=1085 * 5).contains(&get(2)), "{counts:?}");
        // Means stay means: a linear series thinned keeps its line, PSS (sampled a tenth
        // of the time) is the mean of its own samples, not diluted by the absent ones.
        let pts = store.soak_points(id, "v1").unwrap();
        assert!(pts.windows(2).all(|w| w[0].t < w[1].t));
        for p in &pts {
            let want = 2e8 + p.t * 100.0;
            assert!((p.rss.unwrap() - want).abs() < 1.0, "{p:?}");
            if p.n > 1 {
                let pss = p.pss.unwrap();
                assert!((pss / (want * 0.8) - 1.0).abs() < 2e-3, "{p:?}");
            }
        }
        let total: u64 = pts.iter().map(|p| u64::from(p.n)).sum();
        assert_eq!(total, u64::from(day));
        drop(store);
        let size = std::fs::metadata(&db).unwrap().len();
        assert!(size < 30 * 1024 * 1024, "{size} bytes");
    }
}
