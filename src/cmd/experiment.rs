//! Shared by the commands that run experiments: the plan context, isolation, the checks of
//! output paths, and running an experiment then presenting it (with the runs that failed).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cli::OutputArgs;
use memtrial::analysis::recommend::recommend;
use memtrial::analysis::{analyse, any_failed};
use memtrial::linux::cgroup;
use memtrial::linux::safe_file;
use memtrial::plan::catalog::{Distro, LibraryLocator};
use memtrial::plan::PlanContext;
use memtrial::record::{Experiment, RunStatus};
use memtrial::report::printer::OutputTarget;
use memtrial::report::{self, escape, ExportType, Grouping, Report};
use memtrial::runner::{run_experiment, RunLog, Start};
use memtrial::store::Store;
use memtrial::trial::Isolation;
use memtrial::units::format_bytes;

use super::ui::{stop_flag, Outcome, Progress, Ui};

pub(crate) fn plan_context(locator: &LibraryLocator) -> Result<PlanContext<'_>> {
    Ok(PlanContext {
        locator,
        distro: Distro::detect(),
        path_var: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        workdir: std::env::current_dir().context("cannot read the current directory")?,
        online_cpus: memtrial::linux::host::online_cpus(),
    })
}

/// The plan from its inputs, resolved and checked once here; its notes are said (and
/// kept, for the experiment's record).
pub(crate) fn resolve_plan(
    input: memtrial::plan::PlanInput,
    ui: &Ui,
) -> Result<memtrial::plan::BuiltPlan> {
    let locator = LibraryLocator::new();
    let ctx = plan_context(&locator)?;
    let built = memtrial::plan::build_plan(input, &ctx)?;
    for n in &built.notes {
        ui.note(&format!("note: {n}"));
    }
    Ok(built)
}

/// Makes room in the open-file limit for a load's connections (exit 2 when they cannot fit).
pub(crate) fn fit_fd_limit(connections: usize, threads: usize, ui: &Ui) -> Result<()> {
    let note = memtrial::load::ensure_fd_limit(connections, threads)
        .map_err(|e| anyhow::anyhow!("--connections {connections}: {e}"))?;
    if let Some(n) = note {
        ui.note(&format!("note: {n}"));
    }
    Ok(())
}

/// Decides where runs are isolated: a fresh cgroup per run as root, else none — and
/// then limits cannot be honoured, which is an error, never a silent no-op.
pub(crate) fn isolation(limits: &memtrial::plan::Limits, ui: &Ui) -> Result<Isolation> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let found = if root {
        cgroup::detect()
            .map_err(|e| format!("no usable cgroup: {e}"))
            .and_then(cgroup::ready_for_root)
    } else {
        cgroup::claim_delegated().map_err(|why| {
            format!(
                "not running as root, and {why}; {}",
                cgroup::HOW_TO_DELEGATE
            )
        })
    };
    let reason = match found {
        Ok(h) => {
            for p in cgroup::clean_stale(&h) {
                ui.note(&format!(
                    "note: removed a cgroup left by an earlier memtrial that died: {}",
                    p.display()
                ));
            }
            return Ok(Isolation::Cgroup(h));
        }
        Err(reason) => reason,
    };
    if limits.any() {
        bail!("--memory-limit, --cpus, --cpuset and --pids-limit need a cgroup, and there is none: {reason}");
    }
    ui.note(&format!(
        "note: runs are not isolated in cgroups: without one, memtrial cannot apply limits, see OOM kills, measure the whole tree's cgroup peak and CPU throttling, or kill a run's whole tree at once (it stops the workload's process group and the descendants it has seen); {reason}"
    ));
    Ok(Isolation::None { reason })
}

/// Checks an output path can be written before hours of runs, not after.
pub(super) fn check_output(path: &Option<PathBuf>, flag: &str) -> Result<()> {
    if let Some(p) = path {
        OutputTarget::from_path(p).check(flag)?;
    }
    Ok(())
}

/// The report files asked for, with the format of each.
pub(crate) fn outputs(o: &OutputArgs) -> Vec<(ExportType, OutputTarget)> {
    [
        (ExportType::Json, &o.json),
        (ExportType::Csv, &o.csv),
        (ExportType::SamplesCsv, &o.samples_csv),
        (ExportType::Markdown, &o.markdown),
        (ExportType::Html, &o.html),
    ]
    .into_iter()
    .filter_map(|(t, p)| Some((t, OutputTarget::from_path(p.as_deref()?))))
    .collect()
}

pub(crate) fn check_outputs(o: &OutputArgs) -> Result<()> {
    let outputs = outputs(o);
    for (t, target) in &outputs {
        target.check(t.flag())?;
    }
    if outputs
        .iter()
        .any(|(t, target)| *t == ExportType::Html && target.is_stdout())
    {
        bail!("--html -: write the HTML report to a file (it is meant to be opened in a browser)");
    }
    if outputs.iter().filter(|(_, t)| t.is_stdout()).count() > 1 {
        bail!("only one of --json, --csv, --samples-csv and --markdown can write to standard output ('-')");
    }
    Ok(())
}

/// What this memtrial starts workloads through and puts inside them, kept in the
/// experiment's notes (both change a small program's figures); the fallback spawner, which
/// can add memtrial's start-up pages to a small program's peak, is also said now.
/// Refuses a probe that cannot work here, before anything runs; else its note.
pub(crate) fn probe_preflight(plan: &memtrial::plan::Plan) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if plan.probes.kinds.contains(&memtrial::plan::ProbeKind::Cpu) {
        match memtrial::probe::cpu::preflight() {
            Ok(n) => notes.push(n),
            Err(e) => bail!("--probe cpu: {e}"),
        }
    }
    Ok(notes)
}

pub(super) fn tool_notes(plan: &memtrial::plan::Plan, ui: &Ui) -> Vec<String> {
    let (spawner, fallback) = memtrial::backend::spawn::spawner_note();
    if fallback {
        ui.note(&format!("warning: {spawner}"));
    }
    let mut notes = vec![spawner];
    if plan
        .probes
        .kinds
        .contains(&memtrial::plan::ProbeKind::Allocator)
    {
        notes.push(memtrial::probe::allocator::library_note());
    }
    notes
}

pub(super) fn isolation_note(isolation: &Isolation, limits: &memtrial::plan::Limits) -> String {
    match isolation {
        Isolation::Cgroup(h) => {
            let mut l = Vec::new();
            if let Some(m) = limits.memory_max {
                l.push(format!("memory {}", format_bytes(m as f64)));
            }
            if let Some(c) = limits.cpus {
                l.push(format!("{c} CPUs of quota"));
            }
            if let Some(s) = &limits.cpuset {
                l.push(format!("cpuset {s}"));
            }
            if let Some(p) = limits.pids_max {
                l.push(format!("{p} pids"));
            }
            let limits = if l.is_empty() {
                "no limits".to_string()
            } else {
                l.join(", ")
            };
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            let delegated = if uid == 0 {
                String::new()
            } else {
                format!(" (delegated to uid {uid})")
            };
            let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            let missing = h
                .missing_figures(&kernel)
                .map(|m| format!("; {m}"))
                .unwrap_or_default();
            format!(
                "isolation: a fresh {}{delegated} per run; {limits}{missing}",
                h.describe()
            )
        }
        Isolation::None { reason } => format!("isolation: none ({reason})"),
    }
}

pub(crate) fn run_and_present(
    db: &Path,
    store: &mut Store,
    plan: &memtrial::plan::Plan,
    start: Start,
    isolation: &Isolation,
    output: &OutputArgs,
    ui: &Ui,
) -> Result<Outcome> {
    let stop = stop_flag()?;
    let progress = Progress::new(plan, ui);
    let outcome = run_experiment(
        store,
        plan,
        start,
        &memtrial::backend::local::LocalBackend {
            isolation: isolation.clone(),
        },
        &stop,
        &mut |ev| progress.event(ev),
    )?;
    progress.finish();
    let exp = store.load(outcome.experiment)?;
    let result = present(db, &exp, output, Grouping::Pooled, ui)?;
    if outcome.interrupted {
        ui.note(&format!(
            "interrupted: {} completed run(s) are kept in {} (experiment {}).",
            exp.runs
                .iter()
                .filter(|r| r.status != RunStatus::Interrupted)
                .count(),
            db.display(),
            exp.id
        ));
        return Ok(Outcome::Interrupted);
    }
    Ok(result)
}

/// How much of a run's own log a report reads: the head (where the loader complains) and
/// the tail shown for a failed run.
const LOG_HEAD_BYTES: u64 = 64 * 1024;

const LOG_TAIL_BYTES: u64 = 8192;

/// Bytes of run `i`'s standard error when it is a log this memtrial wrote beside `db`
/// (found from the run's place in the experiment, never from the record's path), read
/// through the one safe way; `None` for any other run, or a log that cannot be read so.
fn own_log(db: &Path, exp: &Experiment, i: usize, end: safe_file::End) -> Option<Vec<u8>> {
    let limit = match end {
        safe_file::End::Head => LOG_HEAD_BYTES,
        safe_file::End::Tail => LOG_TAIL_BYTES,
    };
    match memtrial::runner::stderr_log(db, exp, i)? {
        RunLog::Own(path) => read_own(&path, limit, end).ok(),
        RunLog::Elsewhere { .. } => None,
    }
}

/// Reads a run's own log `<dir>/<db-stem>-logs/exp-ID/<file>` from the database's
/// directory down, no link followed on the way (the log directories included).
fn read_own(
    path: &Path,
    limit: u64,
    end: safe_file::End,
) -> Result<Vec<u8>, safe_file::SafeFileError> {
    match path.ancestors().nth(3) {
        Some(root) => {
            let rel = path.strip_prefix(root).unwrap_or(path);
            safe_file::read_bounded_beneath(root, rel, limit, end)
        }
        None => safe_file::read_bounded(path, limit, end),
    }
}

/// The first bytes of a run's standard error: where the loader complains, before the
/// program runs.
/// Runs stored before the loader's complaint was recorded with the verdict get it now
/// (from this memtrial's own logs only).
fn with_loader_complaints(db: &Path, exp: &Experiment) -> Experiment {
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
            memtrial::probe::verify::explain_not_mapped(&r.verification_detail, &stderr, pre)
        {
            r.verification_detail = d;
        }
    }
    out
}

/// Prints the table (pooled, or one per host), writes JSON/CSV, shows the output of
/// failed runs.
pub(super) fn present(
    db: &Path,
    exp: &Experiment,
    output: &OutputArgs,
    grouping: Grouping,
    ui: &Ui,
) -> Result<Outcome> {
    let exp = &with_loader_complaints(db, exp);
    let analysis = analyse(exp);
    let rec = recommend(&analysis);
    let report = Report {
        experiment: exp,
        analysis: &analysis,
        recommendation: &rec,
    };
    let outputs = outputs(output);
    let table = match grouping {
        Grouping::Pooled => {
            if let Some(w) = report::hosts::pooled_warning(exp) {
                ui.note(&w);
            }
            ExportType::Table { color: ui.color() }.serialize(&report)?
        }
        Grouping::ByHost => {
            report::hosts::serialize(ExportType::Table { color: ui.color() }, &report)?
        }
    };
    let stdout_taken = outputs.iter().any(|(_, t)| t.is_stdout());
    ui.human(&String::from_utf8_lossy(&table), stdout_taken)?;
    show_failures(db, exp, ui);
    for (format, target) in &outputs {
        let bytes = match grouping {
            Grouping::Pooled => format.serialize(&report)?,
            Grouping::ByHost => report::hosts::serialize(*format, &report)?,
        };
        ui.write_output(target, &bytes, format.flag())?;
    }
    Ok(if any_failed(exp) {
        Outcome::RunsFailed
    } else {
        Outcome::Ok
    })
}

/// For each variant, the last lines of the first failed run's stderr: read from this
/// memtrial's own log of the run; a run whose log is elsewhere (another host's) is named.
pub(crate) fn show_failures(db: &Path, exp: &Experiment, ui: &Ui) {
    let mut shown = std::collections::HashSet::new();
    for (i, r) in exp.runs.iter().enumerate() {
        if r.warmup || !matches!(r.status, RunStatus::Failed | RunStatus::Timeout) {
            continue;
        }
        if !shown.insert(r.variant.clone()) {
            continue;
        }
        let mut text = format!(
            "\n{} run failed: {}",
            escape::terminal(&r.variant),
            escape::terminal(r.message.as_deref().unwrap_or("failed"))
        );
        match memtrial::runner::stderr_log(db, exp, i) {
            Some(RunLog::Own(path)) => {
                let tail = read_own(&path, LOG_TAIL_BYTES, safe_file::End::Tail)
                    .map(|b| last_lines(&b, 10));
                let shown_path = escape::terminal(&path.display().to_string());
                match tail {
                    Ok(lines) if !lines.is_empty() => {
                        text.push_str(&format!("\n  last lines of {shown_path}:"));
                        for l in lines {
                            text.push_str(&format!("\n  | {}", escape::terminal(&l)));
                        }
                    }
                    Ok(_) => text.push_str(&format!("\n  (no output on stderr: {shown_path})")),
                    Err(e) => text.push_str(&format!(
                        "\n  (its stderr is not shown: {})",
                        escape::terminal(&e.to_string())
                    )),
                }
            }
            Some(RunLog::Elsewhere { host, path }) => text.push_str(&format!(
                "\n  (its stderr stays on host {}: {}; not read here)",
                escape::terminal(if host.is_empty() { "unknown" } else { &host }),
                escape::terminal(&path.display().to_string())
            )),
            None => {}
        }
        ui.note(&text);
    }
}

/// The last `n` lines of `bytes` (invalid UTF-8 replaced).
fn last_lines(bytes: &[u8], n: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}
