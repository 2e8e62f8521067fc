//! Shared by the commands that run experiments: the plan context, isolation, the checks of
//! output paths, and running an experiment then presenting it (with the runs that failed).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cli::OutputArgs;
use memtrial::analysis::recommend::recommend;
use memtrial::analysis::{analyse, any_failed};
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

/// Where runs are isolated (`trial::choose_isolation`), its notes said once.
pub(crate) fn isolation(limits: &memtrial::plan::Limits, ui: &Ui) -> Result<Isolation> {
    let (isolation, notes) =
        memtrial::trial::choose_isolation(limits).map_err(anyhow::Error::msg)?;
    for n in notes {
        ui.note(&format!("note: {n}"));
    }
    Ok(isolation)
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

/// Prints the table (pooled, or one per host), writes JSON/CSV, shows the output of
/// failed runs.
pub(super) fn present(
    db: &Path,
    exp: &Experiment,
    output: &OutputArgs,
    grouping: Grouping,
    ui: &Ui,
) -> Result<Outcome> {
    let exp = &memtrial::runner::with_loader_complaints(db, exp);
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
                let tail = memtrial::runner::read_own_log(&path, safe_file::End::Tail)
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
