//! Who runs which slot of an experiment: owners (a process on a boot of a host), claims on
//! slots, and what is left to run or resume.

use rusqlite::{params, Connection};

use super::*;

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
    pub(super) fn parse(s: &str) -> Option<Origin> {
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

pub(super) fn boot_id() -> String {
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

/// Records this process as the one running `experiment`.
pub(super) fn set_owner(tx: &Connection, experiment: i64) -> rusqlite::Result<()> {
    let me = Owner::me();
    tx.execute(
        "UPDATE experiments SET owner_pid = ?2, owner_start = ?3, owner_boot = ?4 WHERE id = ?1",
        params![experiment, me.pid, me.start, me.boot],
    )?;
    Ok(())
}

impl Store {
    /// Claims the run slot `seq` of `experiment` for this process, atomically: a slot
    /// whose run is stored (not interrupted) is [`Claim::Done`]; one claimed by another
    /// live memtrial is [`Claim::Busy`]; otherwise its interrupted run, if any, is deleted
    /// and the slot is this process's until its run is stored.
    pub(crate) fn claim_slot(&mut self, experiment: i64, seq: u32) -> Result<Claim, StoreError> {
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
    pub(crate) fn missing_slots(
        &self,
        experiment: i64,
        seqs: &[u32],
    ) -> Result<Vec<u32>, StoreError> {
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
    pub(crate) fn run_elsewhere(&self, experiment: i64) -> Result<bool, StoreError> {
        let me = Owner::me();
        Ok(self
            .holders(experiment)?
            .into_iter()
            .any(|o| o != me && o.alive()))
    }

    /// Whether any memtrial (this one included) still runs `experiment`. An experiment
    /// stored before owners were recorded counts as running, as it was shown before.
    pub(super) fn still_running(&self, experiment: i64) -> Result<bool, StoreError> {
        let owners = self.holders(experiment)?;
        Ok(owners.is_empty() || owners.iter().any(Owner::alive))
    }

    /// The experiment's owner and the holders of its slot claims.
    pub(super) fn holders(&self, experiment: i64) -> Result<Vec<Owner>, StoreError> {
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
}
