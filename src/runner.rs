//! Runs a whole experiment: schedule → trials → store, reporting progress to an observer.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::Backend;
use crate::linux::host::HostInfo;
use crate::linux::safe_file;
use crate::plan::Plan;
use crate::record::{Experiment, ExperimentStatus, RunRecord, RunStatus};
use crate::schedule::{schedule, Slot};
use crate::store::{Claim, Store, StoreError};
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
    /// `--until-decided` looked at the runs so far.
    Looked {
        /// Measured runs per variant looked at.
        runs: u32,
        /// Why each open question is open.
        open: &'a [String],
        /// Questions answered at this look but not yet with the same answer at the last
        /// `consecutive` looks.
        unconfirmed: &'a [String],
        /// Every question decided: no more runs.
        decided: bool,
        /// The runs in the schedule once a block is added; `None` when none is (decided,
        /// or the cap `max_runs` reached).
        next_total: Option<usize>,
        max_runs: u32,
    },
}

/// `--until-decided`: the sequential rule, and what a look at the runs so far finds.
pub struct UntilDecided<'j> {
    pub rule: crate::analysis::decide::Rule,
    /// Looks at an experiment holding only its first blocks of measured runs.
    pub judge: &'j mut dyn FnMut(&Experiment) -> crate::analysis::decide::Look,
}

/// How the experiment ended.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub experiment: i64,
    pub interrupted: bool,
}

/// Where the workload's output of an experiment goes: `<db-stem>-logs/exp-<id>/` beside the database.
pub(crate) fn log_dir_for(db: &Path, experiment: i64) -> PathBuf {
    crate::store::logs_root(db).join(format!("exp-{experiment}"))
}

/// The stem of run `seq`'s files in `log_dir`: `<n>-<variant>`, numbered as the progress
/// counts the run (`[  3/9]` writes `003-…`: `seq + 1`), to which `.stdout`, `.stderr` and
/// `.probe` are given.
pub(crate) fn log_stem(log_dir: &Path, seq: u32, variant: &str) -> PathBuf {
    log_dir.join(format!("{:03}-{variant}", u64::from(seq) + 1))
}

/// The stem earlier releases gave run `seq` (numbered from 0), so their logs stay found.
fn legacy_log_stem(log_dir: &Path, seq: u32, variant: &str) -> PathBuf {
    log_dir.join(format!("{seq:03}-{variant}"))
}

/// Where the standard error of a stored run is, as far as memtrial itself knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunLog {
    /// A file this memtrial wrote: run `seq` of the experiment, under the log directory
    /// beside the database (found from that knowledge, not from the record).
    Own(PathBuf),
    /// The record names a file this memtrial did not write here (an imported run, or a
    /// database moved away from its logs): never opened.
    Elsewhere { host: String, path: PathBuf },
}

/// Which of the two run `i` of `exp` (stored in `db`) has: its own log when the record's
/// `stderr_path` is exactly the file the runner writes for that run of that experiment
/// beside `db`, else the record's path, to be named and not read.
pub fn stderr_log(db: &Path, exp: &Experiment, i: usize) -> Option<RunLog> {
    let r = exp.runs.get(i)?;
    let seq = *exp.seqs.get(i)?;
    let elsewhere = || RunLog::Elsewhere {
        host: exp.host_of(i).hostname.clone(),
        path: r.stderr_path.clone(),
    };
    // A name that is not one plain file name cannot be one of the runner's logs.
    let plain = !r.variant.is_empty()
        && !r.variant.contains('/')
        && !r.variant.contains('\0')
        && r.variant != "."
        && r.variant != "..";
    if !plain {
        return Some(elsewhere());
    }
    let dir = log_dir_for(db, exp.id);
    let dir = lexical(&std::path::absolute(&dir).unwrap_or(dir));
    let recorded = lexical(&r.stderr_path);
    let real = std::fs::canonicalize(&dir).ok();
    for stem in [log_stem, legacy_log_stem] {
        let own = stem(&dir, seq, &r.variant).with_extension("stderr");
        // The same database reached another way (`../x.db`, a linked directory) names the
        // same file: compared as text only, the record's path is never resolved or opened.
        let same = recorded == own
            || real.as_ref().is_some_and(|real| {
                recorded == stem(real, seq, &r.variant).with_extension("stderr")
            });
        if same && own.starts_with(&dir) {
            return Some(RunLog::Own(own));
        }
    }
    Some(elsewhere())
}

/// `path` with `.` dropped and `..` taken back textually (for comparing two spellings of
/// one path, never for opening).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
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
    run_experiment_until(store, plan, start, backend, stop, observer, None)
}

/// [`run_experiment`], then — for a new experiment with `until` — a block of runs at a
/// time until the sequential rule has decided every question or the cap is reached (the
/// stored plan's runs grow with each block, so `run --resume` finishes an interrupted one).
pub fn run_experiment_until(
    store: &mut Store,
    plan: &Plan,
    start: Start,
    backend: &dyn Backend,
    stop: &AtomicBool,
    observer: &mut dyn FnMut(Event),
    until: Option<UntilDecided>,
) -> Result<Outcome, RunError> {
    let new = matches!(start, Start::New { .. });
    let all = schedule(plan.variants.len(), plan.warmup, plan.runs, plan.seed);
    let planned = all.len();
    let (experiment, slots, host, expected) = match start {
        Start::New { host, notes } => {
            let id = store.create_experiment(plan, host, all.len())?;
            for n in notes {
                store.add_event(id, "note", n)?;
            }
            let expected = all.iter().map(|s| s.seq).collect();
            (id, all, host, expected)
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
            (id, vec![slot], host, vec![seq])
        }
        Start::Resume {
            experiment,
            done,
            host,
        } => {
            let rest: Vec<Slot> = all
                .iter()
                .filter(|s| !done.contains(&s.seq))
                .copied()
                .collect();
            store.add_event(
                experiment,
                "resumed",
                &format!("resumed: {} run(s) left", rest.len()),
            )?;
            let expected = all_seqs(&all);
            (experiment, rest, host, expected)
        }
    };
    let ran = run_slots(
        store, plan, experiment, host, slots, planned, backend, stop, observer,
    )
    .and_then(|interrupted| match until {
        Some(u) if new && !interrupted => {
            more_blocks(store, plan, experiment, host, backend, stop, observer, u)
        }
        _ => Ok((interrupted, expected)),
    });
    match ran {
        Ok((interrupted, expected)) => finish(store, experiment, &expected, interrupted),
        Err(e) => {
            // Nothing stays `running` for ever: the experiment ends interrupted, with the
            // reason, and `run --resume` can finish it once the cause is fixed.
            let _ = store.add_event(experiment, "error", &format!("stopped by an error: {e}"));
            let _ = store.finish_experiment(experiment, ExperimentStatus::Interrupted);
            Err(e)
        }
    }
}

/// The experiment with only its first `blocks` measured blocks (and the warm-up runs).
fn first_blocks(e: &Experiment, warmup: u32, blocks: u32) -> Experiment {
    fn kept<T: Clone>(v: &[T], keep: &[bool]) -> Vec<T> {
        v.iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(x, _)| x.clone())
            .collect()
    }
    let keep: Vec<bool> = e.runs.iter().map(|r| r.block < warmup + blocks).collect();
    Experiment {
        runs: kept(&e.runs, &keep),
        seqs: kept(&e.seqs, &keep),
        run_hosts: kept(&e.run_hosts, &keep),
        ..e.clone()
    }
}

/// `--until-decided` after the planned runs: looks at the last `consecutive` block
/// counts (from 3 runs on: with fewer nothing is significant), and while a question is undecided
/// and the cap allows, stores the plan with one more block and runs it. Whether an
/// interrupt stopped it, and every slot of the final schedule.
#[allow(clippy::too_many_arguments)]
fn more_blocks(
    store: &mut Store,
    plan: &Plan,
    experiment: i64,
    host: &HostInfo,
    backend: &dyn Backend,
    stop: &AtomicBool,
    observer: &mut dyn FnMut(Event),
    until: UntilDecided,
) -> Result<(bool, Vec<u32>), RunError> {
    use crate::analysis::decide::Looks;
    let UntilDecided { rule, judge } = until;
    let mut plan = plan.clone();
    let mut looks = Looks::default();
    let first = crate::analysis::MIN_RUNS_FOR_SIGNIFICANCE as u32;
    loop {
        let all = schedule(plan.variants.len(), plan.warmup, plan.runs, plan.seed);
        let exp = store.load(experiment)?;
        for n in first..=plan.runs {
            if n as usize + rule.consecutive > plan.runs as usize && !looks.has(n) {
                looks.add(n, judge(&first_blocks(&exp, plan.warmup, n)));
            }
        }
        let undecided = looks.undecided(&rule);
        // Nothing to decide (one variant, or a baseline whose runs failed) is decided.
        let nothing = looks.last().is_some_and(|(_, l)| l.standings.is_empty());
        let decided = nothing || undecided.as_ref().is_some_and(|u| u.is_empty());
        let more = !decided && plan.runs < rule.max_runs && !stop.load(Ordering::SeqCst);
        let next_total = more.then(|| plan.variants.len() * (plan.warmup + plan.runs + 1) as usize);
        let open: Vec<String> = looks
            .last()
            .map(|(_, l)| l.open.clone())
            .unwrap_or_default();
        let last_keys: Vec<String> = looks
            .last()
            .map(|(_, l)| l.standings.keys().cloned().collect())
            .unwrap_or_default();
        let unconfirmed: Vec<String> = undecided
            .unwrap_or(last_keys)
            .into_iter()
            .filter(|k| !open.iter().any(|o| o.starts_with(&format!("{k}:"))))
            .collect();
        observer(Event::Looked {
            runs: plan.runs,
            open: &open,
            unconfirmed: &unconfirmed,
            decided,
            next_total,
            max_runs: rule.max_runs,
        });
        if !more {
            return Ok((stop.load(Ordering::SeqCst), all_seqs(&all)));
        }
        plan.runs += 1;
        let all = schedule(plan.variants.len(), plan.warmup, plan.runs, plan.seed);
        store.extend_experiment(experiment, &plan, all.len())?;
        let block = plan.warmup + plan.runs - 1;
        let slots: Vec<Slot> = all.iter().filter(|s| s.block == block).copied().collect();
        let interrupted = run_slots(
            store,
            &plan,
            experiment,
            host,
            slots,
            all.len(),
            backend,
            stop,
            &mut |ev| {
                // Said once, when the experiment started.
                if !matches!(ev, Event::Started { .. }) {
                    observer(ev)
                }
            },
        )?;
        if interrupted {
            return Ok((true, all_seqs(&all)));
        }
    }
}

fn all_seqs(all: &[Slot]) -> Vec<u32> {
    all.iter().map(|s| s.seq).collect()
}

/// Runs the slots in order; whether an interrupt stopped them. Each slot is claimed in
/// the store first: a slot another memtrial runs or has stored (two resumes at once) is
/// skipped, so no slot runs twice.
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
    let own_start = (crate::linux::proc::self_usage(), std::time::Instant::now());
    let mut ran = 0usize;
    let mut interrupted = false;
    // Variants whose last run ended before the allocator probe's first sample: their next
    // run goes without it (see trial::ended_before_allocator_sample), with this reason.
    let mut allocator_left_out: std::collections::HashMap<usize, String> = Default::default();
    for slot in slots {
        // Counted as the progress counts it, and the log files named the same: run 3 of 9
        // writes `003-<variant>.stdout`.
        let index = slot.seq as usize + 1;
        if stop.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        match store.claim_slot(experiment, slot.seq)? {
            Claim::Taken => {}
            Claim::Done | Claim::Busy => continue,
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
            log_stem: log_stem(&log_dir, slot.seq, &variant.name),
            load_source: load_source.as_ref(),
        };
        let left_out = allocator_left_out.get(&slot.variant).cloned();
        let probes = default_probes(plan, variant, &spec.log_stem, left_out.is_none());
        let mut record = run_trial(&spec, backend, probes, stop, &mut |live| {
            observer(Event::Sample { slot, live })
        })?;
        if let Some(reason) = left_out {
            record.inside.absent.push(crate::record::Absence {
                probe: crate::record::inside::ALLOCATOR_PROBE.into(),
                reason,
            });
        }
        match crate::trial::ended_before_allocator_sample(plan, &record, index) {
            Some(why) => allocator_left_out.insert(slot.variant, why),
            None => allocator_left_out.remove(&slot.variant),
        };
        store.add_run(experiment, slot.seq, &record, host)?;
        ran += 1;
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
    if ran > 0 {
        if let (Some(before), Some(after)) = (own_start.0, crate::linux::proc::self_usage()) {
            let note = own_cost_note(before, after, own_start.1.elapsed().as_secs_f64(), ran);
            store.add_event(experiment, "note", &note)?;
        }
    }
    Ok(interrupted)
}

/// What memtrial itself cost while it ran `runs` run(s) over `wall` seconds: its CPU
/// (every thread of it: sampling, probes, load, storing; not the workload, its child)
/// and its peak RSS, as the kernel counts them for it.
fn own_cost_note(
    before: crate::linux::proc::SelfUsage,
    after: crate::linux::proc::SelfUsage,
    wall: f64,
    runs: usize,
) -> String {
    let cpu = (after.cpu_seconds - before.cpu_seconds).max(0.0);
    let share = if wall > 0.0 {
        format!(" ({:.2}% of one core)", 100.0 * cpu / wall)
    } else {
        String::new()
    };
    format!(
        "memtrial's own cost over these {runs} run(s) ({}): {} CPU{share}, peak RSS {} since it started (getrusage and VmHWM of memtrial itself: its threads, not the workload)",
        crate::units::format_seconds(wall),
        crate::units::format_seconds(cpu),
        crate::units::format_bytes(after.max_rss_bytes as f64),
    )
}

/// Marks the experiment complete or interrupted. Complete only when every slot of its
/// schedule has its run; while another memtrial still runs some, it stays running (that
/// one finishes it); slots left by a memtrial that is gone make it interrupted.
fn finish(
    store: &mut Store,
    experiment: i64,
    expected: &[u32],
    interrupted: bool,
) -> Result<Outcome, RunError> {
    if !interrupted && !store.missing_slots(experiment, expected)?.is_empty() {
        if store.run_elsewhere(experiment)? {
            return Ok(Outcome {
                experiment,
                interrupted: false,
            });
        }
        store.add_event(
            experiment,
            "interrupted",
            "interrupted: slots claimed by a memtrial that is gone are missing; `run --resume` runs them",
        )?;
        store.finish_experiment(experiment, ExperimentStatus::Interrupted)?;
        return Ok(Outcome {
            experiment,
            interrupted: true,
        });
    }
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

/// How much of a run's own log a report reads: the head (where the loader complains) and
/// the tail shown for a failed run.
const LOG_HEAD_BYTES: u64 = 64 * 1024;

const LOG_TAIL_BYTES: u64 = 8192;

/// Bytes of run `i`'s standard error when it is a log this memtrial wrote beside `db`
/// (found from the run's place in the experiment, never from the record's path), read
/// through the one safe way; `None` for any other run, or a log that cannot be read so.
fn own_log(db: &Path, exp: &Experiment, i: usize, end: safe_file::End) -> Option<Vec<u8>> {
    match stderr_log(db, exp, i)? {
        RunLog::Own(path) => read_own_log(&path, end).ok(),
        RunLog::Elsewhere { .. } => None,
    }
}

/// Reads a run's own log `<dir>/<db-stem>-logs/exp-ID/<file>` from the database's
/// directory down, no link followed on the way (the log directories included): its head
/// (`LOG_HEAD_BYTES`) or its tail (`LOG_TAIL_BYTES`).
pub fn read_own_log(path: &Path, end: safe_file::End) -> Result<Vec<u8>, safe_file::SafeFileError> {
    let limit = match end {
        safe_file::End::Head => LOG_HEAD_BYTES,
        safe_file::End::Tail => LOG_TAIL_BYTES,
    };
    match path.ancestors().nth(3) {
        Some(root) => {
            let rel = path.strip_prefix(root).unwrap_or(path);
            safe_file::read_bounded_beneath(root, rel, limit, end)
        }
        None => safe_file::read_bounded(path, limit, end),
    }
}

/// The experiment as a report shows it: a run whose variant did not take effect, stored
/// before ld.so's complaint was recorded with the verdict, gets it now from the head of
/// its standard error (where the loader complains, before the program runs), read from
/// this memtrial's own logs only.
pub fn with_loader_complaints(db: &Path, exp: &Experiment) -> Experiment {
    let mut out = exp.clone();
    let preloads: std::collections::HashMap<String, String> = exp
        .plan
        .variants
        .iter()
        .filter_map(|v| Some((v.name.clone(), v.preload.as_ref()?.display().to_string())))
        .collect();
    for (i, r) in out.runs.iter_mut().enumerate() {
        if r.status != RunStatus::VariantNotEffective {
            continue;
        }
        let Some(pre) = preloads.get(&r.variant) else {
            continue;
        };
        let Some(head) = own_log(db, exp, i, safe_file::End::Head) else {
            continue;
        };
        let stderr = String::from_utf8_lossy(&head);
        if let Some(d) =
            crate::probe::verify::explain_not_mapped(&r.verification_detail, &stderr, pre)
        {
            r.verification_detail = d;
        }
    }
    out
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

    /// A run's log is its own only when the record names exactly the file the runner
    /// writes for that run beside the database; anything else is named, never opened.
    #[test]
    fn a_runs_own_log_is_found_from_its_place_not_its_record() {
        let mut e = crate::report::fixture::experiment();
        let db = Path::new("/data/x/trial.db");
        let own = |seq: u32, v: &str| {
            log_stem(Path::new("/data/x/trial-logs/exp-7"), seq, v).with_extension("stderr")
        };
        e.runs[0].stderr_path = own(0, "glibc");
        e.runs[1].stderr_path = "/proc/self/environ".into();
        e.runs[2].stderr_path = own(0, "glibc"); // another run's file
        e.runs[3].variant = "../x".into();
        e.runs[3].stderr_path = own(3, "../x");
        assert_eq!(stderr_log(db, &e, 0), Some(RunLog::Own(own(0, "glibc"))));
        for i in 1..=3 {
            assert_eq!(
                stderr_log(db, &e, i),
                Some(RunLog::Elsewhere {
                    host: "build-1".into(),
                    path: e.runs[i].stderr_path.clone()
                }),
                "run {i}"
            );
        }
        assert_eq!(stderr_log(db, &e, 99), None);
        // The database reached through `..`: the same files.
        let around = Path::new("/data/y/../x/./trial.db");
        assert_eq!(
            stderr_log(around, &e, 0),
            Some(RunLog::Own(own(0, "glibc")))
        );
        e.runs[0].stderr_path = "/data/x/trial-logs/exp-7/../exp-7/001-glibc.stderr".into();
        assert_eq!(stderr_log(db, &e, 0), Some(RunLog::Own(own(0, "glibc"))));
        // A run of an earlier release, whose files were numbered from 0.
        let legacy = PathBuf::from("/data/x/trial-logs/exp-7/000-glibc.stderr");
        e.runs[0].stderr_path = legacy.clone();
        assert_eq!(stderr_log(db, &e, 0), Some(RunLog::Own(legacy)));
    }
}
