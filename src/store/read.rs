//! Reading: the list of experiments, one experiment with its runs and samples, by id or
//! fingerprint. Columns are read by name.

use std::path::PathBuf;

use crate::linux::host::HostInfo;
use crate::plan::Plan;
use crate::record::{
    Experiment, ExperimentStatus, ExperimentSummary, PeakSource, RunRecord, RunStatus, TreeSample,
    Verification,
};

use super::*;

impl Store {
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
    pub(super) fn get<T: rusqlite::types::FromSql>(
        &self,
        row: &rusqlite::Row<'_>,
        column: &str,
    ) -> Result<T, StoreError> {
        row.get(column).map_err(|e| self.err(e))
    }

    /// A stored name parsed by `parse`; an unknown one is corruption, not a default.
    pub(super) fn parsed<T>(
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
    pub(super) fn json<T: serde::de::DeserializeOwned>(
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
    pub(super) fn unsigned(
        &self,
        row: &rusqlite::Row<'_>,
        column: &str,
    ) -> Result<u64, StoreError> {
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

    pub(super) fn run_record(&self, r: &rusqlite::Row<'_>) -> Result<RunRecord, StoreError> {
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
            regions: self.json(r, "regions_json", "regions")?,
            samples: Vec::new(),
        })
    }

    pub(super) fn sample(&self, r: &rusqlite::Row<'_>) -> Result<TreeSample, StoreError> {
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
                    driver_json, peak_uss_bytes, host_id, regions_json
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
    pub(super) fn run_hosts(
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
    #[cfg(test)]
    pub(crate) fn find_by_fingerprint(&self, fingerprint: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row(
                "SELECT max(id) FROM experiments WHERE fingerprint = ?1",
                [fingerprint],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }
}
