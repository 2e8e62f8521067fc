//! Writing: an experiment with its plan and host, each run as it ends, events, the end.

use rusqlite::{params, Connection};

use crate::linux::host::HostInfo;
use crate::plan::Plan;
use crate::record::{ExperimentStatus, RunRecord};

use super::*;

/// The host's row (added if new); its id.
pub(super) fn host_id(tx: &Connection, h: &HostInfo) -> rusqlite::Result<i64> {
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

/// `host`, or the experiment's own host when that is this machine recorded before its
/// cgroup limits were (an experiment of an older memtrial, resumed here): one host, not two.
pub(super) fn same_host_as_recorded(
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
pub(super) struct Made<'a> {
    pub(super) status: ExperimentStatus,
    pub(super) created_at: &'a str,
    pub(super) finished_at: Option<&'a str>,
    pub(super) origin: Origin,
}

/// Inserts an experiment and its variants; its id.
pub(super) fn insert_experiment(
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
pub(super) fn insert_run(
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
            driver_json, peak_uss_bytes, host_id, identity, regions_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36)",
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
            r.regions.as_ref().and_then(|g| serde_json::to_string(g).ok()),
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

impl Store {
    /// Records a new experiment; returns its id.
    pub(crate) fn create_experiment(
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
    pub(crate) fn add_run(
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
        let fingerprint: Option<String> = tx
            .query_row(
                "SELECT fingerprint FROM experiments WHERE id = ?1",
                [experiment],
                |r| r.get(0),
            )
            .map_err(err)?;
        let identity = import::run_identity(
            &value,
            host,
            fingerprint.as_deref().unwrap_or(""),
            &r.variant,
        );
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

    pub(crate) fn add_event(
        &self,
        experiment: i64,
        kind: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO events (experiment_id, at, kind, message) VALUES (?1, ?2, ?3, ?4)",
                params![experiment, now(), kind, message],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Stores `plan` (the experiment's own, with more measured runs per variant) and the
    /// runs its schedule now plans: `--until-decided` adding a block. The fingerprint does
    /// not change (the number of runs is not part of it).
    pub(crate) fn extend_experiment(
        &mut self,
        experiment: i64,
        plan: &Plan,
        runs_planned: usize,
    ) -> Result<(), StoreError> {
        let plan_json = serde_json::to_string(plan).map_err(|e| StoreError::Unwritable {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        self.conn
            .execute(
                "UPDATE experiments SET plan_json = ?2, runs_planned = ?3 WHERE id = ?1",
                params![experiment, plan_json, runs_planned as i64],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub(crate) fn finish_experiment(
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
}
