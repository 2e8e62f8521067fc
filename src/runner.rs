//! Runs a whole experiment: schedule → trials → store, reporting progress to an observer.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::Backend;
use crate::linux::host::HostInfo;
use crate::plan::Plan;
use crate::record::{ExperimentStatus, RunRecord, RunStatus};
use crate::schedule::{schedule, Slot};
use crate::store::{Store, StoreError};
use crate::trial::{default_probes, run_trial, Live, TrialError, TrialSpec};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Trial(#[from] TrialError),
    #[error("cannot read the requests: {0}")]
    Source(String),
    #[error("the plan's schedule has {total} slot(s) (0 to {last}); there is no slot {seq}", last = total.saturating_sub(1))]
    NoSlot { seq: u32, total: usize },
    #[error("cannot create the log directory {path}: {source}")]
    LogDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the observer is told.
pub enum Event<'a> {
    Started {
        experiment: i64,
        total: usize,
        log_dir: &'a Path,
    },
    TrialStart {
        slot: Slot,
        /// 1-based position in the experiment's schedule (a resumed experiment goes on
        /// counting where it stopped); the run's log files carry the same number.
        index: usize,
        /// Runs in the experiment's schedule.
        total: usize,
        variant: &'a str,
    },
    Sample {
        slot: Slot,
        live: Live,
    },
    TrialEnd {
        slot: Slot,
        index: usize,
        total: usize,
        record: &'a RunRecord,
    },
}

/// How the experiment ended.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub experiment: i64,
    pub interrupted: bool,
}

/// Where the workload's output of an experiment goes: `<db-stem>-logs/exp-<id>/` beside the database.
pub fn log_dir_for(db: &Path, experiment: i64) -> PathBuf {
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "memtrial".into());
    let parent = db.parent().filter(|p| !p.as_os_str().is_empty());
    parent
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(format!("{stem}-logs"))
        .join(format!("exp-{experiment}"))
}

/// Which experiment to run: a new one, or the rest of a stored one.
pub enum Start<'a> {
    New {
        host: &'a HostInfo,
        notes: &'a [String],
    },
    /// Resume on `host`: the slots whose runs are already stored are skipped.
    Resume {
        experiment: i64,
        done: &'a [u32],
        host: &'a HostInfo,
    },
    /// A new experiment that runs only the slot `seq` of the plan's schedule (in-container
    /// mode: each pod of a Kubernetes Job runs one slot).
    Slot {
        host: &'a HostInfo,
        notes: &'a [String],
        seq: u32,
    },
}

/// Runs every trial of the plan, committing each run as it ends. Stops early,
/// marking the experiment interrupted, when `stop` is set.
pub fn run_experiment(
    store: &mut Store,
    plan: &Plan,
    start: Start,
    backend: &dyn Backend,
    stop: &AtomicBool,
    observer: &mut dyn FnMut(Event),
) -> Result<Outcome, RunError> {
    let all = schedule(plan.variants.len(), plan.warmup, plan.runs, plan.seed);
    let planned = all.len();
    let (experiment, slots, host) = match start {
        Start::New { host, notes } => {
            let id = store.create_experiment(plan, host, all.len())?;
            for n in notes {
                store.add_event(id, "note", n)?;
            }
            (id, all, host)
        }
        Start::Slot { host, notes, seq } => {
            let total = all.len();
            let Some(slot) = all.into_iter().find(|s| s.seq == seq) else {
                return Err(RunError::NoSlot { seq, total });
            };
            let id = store.create_experiment(plan, host, 1)?;
            for n in notes {
                store.add_event(id, "note", n)?;
            }
            (id, vec![slot], host)
        }
        Start::Resume {
            experiment,
            done,
            host,
        } => {
            let rest: Vec<Slot> = all.into_iter().filter(|s| !done.contains(&s.seq)).collect();
            store.add_event(
                experiment,
                "resumed",
                &format!("resumed: {} run(s) left", rest.len()),
            )?;
            (experiment, rest, host)
        }
    };
    match run_slots(
        store, plan, experiment, host, slots, planned, backend, stop, observer,
    ) {
        Ok(interrupted) => finish(store, experiment, interrupted),
        Err(e) => {
            // Nothing stays `running` for ever: the experiment ends interrupted, with the
            // reason, and `run --resume` can finish it once the cause is fixed.
            let _ = store.add_event(experiment, "error", &format!("stopped by an error: {e}"));
            let _ = store.finish_experiment(experiment, ExperimentStatus::Interrupted);
            Err(e)
        }
    }
}

/// Runs the slots in order; whether an interrupt stopped them.
#[allow(clippy::too_many_arguments)]
fn run_slots(
    store: &mut Store,
    plan: &Plan,
    experiment: i64,
    host: &HostInfo,
    slots: Vec<Slot>,
    planned: usize,
    backend: &dyn Backend,
    stop: &AtomicBool,
    observer: &mut dyn FnMut(Event),
) -> Result<bool, RunError> {
    let total = slots.len();
    // A server trial's requests are read once, the same for every variant and run.
    let load_source = match &plan.server {
        Some(sp) => Some(sp.read_requests().map_err(RunError::Source)?.0),
        None => None,
    };
    // Absolute, so the paths stored with each run hold from any directory.
    let log_dir = log_dir_for(store.path(), experiment);
    let log_dir = std::path::absolute(&log_dir).unwrap_or(log_dir);
    std::fs::create_dir_all(&log_dir).map_err(|source| RunError::LogDir {
        path: log_dir.clone(),
        source,
    })?;
    observer(Event::Started {
        experiment,
        total,
        log_dir: &log_dir,
    });
    let mut interrupted = false;
    for slot in slots {
        // Counted as the progress counts it, and the log files named the same: run 3 of 9
        // writes `003-<variant>.stdout`.
        let index = slot.seq as usize + 1;
        if stop.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let variant = &plan.variants[slot.variant];
        observer(Event::TrialStart {
            slot,
            index,
            total: planned,
            variant: &variant.name,
        });
        let spec = TrialSpec {
            plan,
            variant,
            seq: slot.seq,
            block: slot.block,
            warmup: slot.warmup,
            log_stem: log_dir.join(format!("{index:03}-{}", variant.name)),
            load_source: load_source.as_ref(),
        };
        let probes = default_probes(plan, variant, &spec.log_stem);
        let record = run_trial(&spec, backend, probes, stop, &mut |live| {
            observer(Event::Sample { slot, live })
        })?;
        store.add_run(experiment, slot.seq, &record, host)?;
        observer(Event::TrialEnd {
            slot,
            index,
            total: planned,
            record: &record,
        });
        if record.status == RunStatus::Interrupted {
            interrupted = true;
            break;
        }
    }
    Ok(interrupted)
}

/// Marks the experiment complete or interrupted.
fn finish(store: &mut Store, experiment: i64, interrupted: bool) -> Result<Outcome, RunError> {
    if interrupted {
        store.add_event(
            experiment,
            "interrupted",
            "interrupted: completed runs are kept; the run in flight is recorded as interrupted",
        )?;
    }
    store.finish_experiment(
        experiment,
        if interrupted {
            ExperimentStatus::Interrupted
        } else {
            ExperimentStatus::Complete
        },
    )?;
    Ok(Outcome {
        experiment,
        interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{FakeBackend, Script};

    /// An error that stops memtrial mid-experiment once left it `running` for ever.
    #[test]
    fn an_experiment_stopped_by_an_error_ends_interrupted_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("t.db")).unwrap();
        let mut plan = crate::report::fixture::experiment().plan;
        plan.server = None;
        let backend = FakeBackend::new(Script {
            launch_error: Some("cannot write pids.max".into()),
            ..Script::default()
        });
        let host = HostInfo::detect();
        let stop = AtomicBool::new(false);
        let r = run_experiment(
            &mut store,
            &plan,
            Start::New {
                host: &host,
                notes: &[],
            },
            &backend,
            &stop,
            &mut |_| {},
        );
        assert!(r.is_err());
        let exp = store.load(1).unwrap();
        assert_eq!(exp.status, ExperimentStatus::Interrupted);
        assert!(
            exp.notes
                .iter()
                .any(|n| n.contains("cannot write pids.max")),
            "{:?}",
            exp.notes
        );
    }

    /// In-container mode: a new experiment holding exactly the one slot asked for.
    #[test]
    fn a_slot_start_runs_that_slot_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("t.db")).unwrap();
        let mut plan = crate::report::fixture::experiment().plan;
        plan.server = None;
        let all = schedule(plan.variants.len(), plan.warmup, plan.runs, plan.seed);
        assert!(all.len() > 2);
        let want = all[2];
        let backend = FakeBackend::new(Script::default());
        let host = HostInfo::detect();
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        let out = run_experiment(
            &mut store,
            &plan,
            Start::Slot {
                host: &host,
                notes: &["in-container: slot 2".to_string()],
                seq: 2,
            },
            &backend,
            &stop,
            &mut |ev| {
                if let Event::TrialStart { slot, .. } = ev {
                    seen.push(slot);
                }
            },
        )
        .unwrap();
        assert_eq!(seen, [want]);
        let exp = store.load(out.experiment).unwrap();
        assert_eq!(exp.seqs, [2]);
        assert_eq!(exp.runs.len(), 1);
        assert_eq!(exp.runs[0].variant, plan.variants[want.variant].name);
        assert!(exp.notes.iter().any(|n| n.contains("in-container: slot 2")));
        // A slot past the schedule's end is an error naming the range, and no experiment.
        let past = all.len() as u32;
        let e = run_experiment(
            &mut store,
            &plan,
            Start::Slot {
                host: &host,
                notes: &[],
                seq: past,
            },
            &backend,
            &stop,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(matches!(e, RunError::NoSlot { seq, total } if seq == past && total == all.len()));
        assert_eq!(store.latest_id().unwrap(), out.experiment);
    }

    #[test]
    fn log_dir_beside_the_database() {
        assert_eq!(
            log_dir_for(Path::new("memtrial.db"), 3),
            PathBuf::from("./memtrial-logs/exp-3")
        );
        assert_eq!(
            log_dir_for(Path::new("/data/x/trial.sqlite"), 12),
            PathBuf::from("/data/x/trial-logs/exp-12")
        );
    }
}
