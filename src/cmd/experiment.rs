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
use memtrial::report::{self, escape, ExportType, Grouping, Layout, Report};
use memtrial::runner::{run_experiment_until, RunLog, Start, UntilDecided};
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
    let preloads: Vec<PathBuf> = plan
        .variants
        .iter()
        .filter_map(|v| v.preload.clone())
        .collect();
    if !preloads.is_empty() {
        let facts = memtrial::linux::allocator::library_facts(&preloads);
        notes.push(memtrial::linux::allocator::library_facts_note(&facts));
    }
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

/// What a new experiment here needs before its first run.
pub(crate) struct Prepared {
    pub(crate) plan: memtrial::plan::Plan,
    pub(crate) host: memtrial::linux::host::HostInfo,
    pub(crate) isolation: Isolation,
    /// The plan's, isolation's, tools' and probes' notes, kept with the experiment.
    pub(crate) notes: Vec<String>,
}

/// The plan from its inputs, room for a load's connections, the probes' preflight, this
/// host, where runs are isolated, and the notes to keep.
pub(crate) fn prepare(input: memtrial::plan::PlanInput, ui: &Ui) -> Result<Prepared> {
    let memtrial::plan::BuiltPlan {
        plan,
        notes: plan_notes,
    } = resolve_plan(input, ui)?;
    if let Some(s) = &plan.server {
        fit_fd_limit(s.connections, s.threads, ui)?;
    }
    let probe_notes = probe_preflight(&plan)?;
    let host = memtrial::linux::host::HostInfo::detect();
    let isolation = isolation(&plan.limits, ui)?;
    let mut notes = plan_notes;
    notes.push(isolation_note(&isolation, &plan.limits));
    notes.extend(tool_notes(&plan, ui));
    notes.extend(probe_notes);
    Ok(Prepared {
        plan,
        host,
        isolation,
        notes,
    })
}

/// An experiment run here, read back from the store.
pub(crate) struct Ran {
    pub(crate) exp: Experiment,
    pub(crate) interrupted: bool,
}

/// Runs an experiment here (with `--until-decided`, block by block until decided), with
/// the progress shown, and reads it back.
pub(crate) fn run_here(
    store: &mut Store,
    plan: &memtrial::plan::Plan,
    start: Start,
    isolation: &Isolation,
    ui: &Ui,
    until: Option<UntilDecided>,
) -> Result<Ran> {
    let stop = stop_flag()?;
    let progress = Progress::new(plan, ui);
    let outcome = run_experiment_until(
        store,
        plan,
        start,
        &memtrial::backend::local::LocalBackend {
            isolation: isolation.clone(),
        },
        &stop,
        &mut |ev| progress.event(ev),
        until,
    )?;
    progress.finish();
    Ok(Ran {
        exp: store.load(outcome.experiment)?,
        interrupted: outcome.interrupted,
    })
}

/// Says what an interrupt kept.
pub(crate) fn interrupted_note(db: &Path, exp: &Experiment, ui: &Ui) {
    ui.note(&format!(
        "interrupted: {} completed run(s) are kept in {} (experiment {}).",
        exp.runs
            .iter()
            .filter(|r| r.status != RunStatus::Interrupted)
            .count(),
        db.display(),
        exp.id
    ));
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn run_and_present(
    db: &Path,
    store: &mut Store,
    plan: &memtrial::plan::Plan,
    start: Start,
    isolation: &Isolation,
    output: &OutputArgs,
    ui: &Ui,
    until: Option<UntilDecided>,
) -> Result<Outcome> {
    let ran = run_here(store, plan, start, isolation, ui, until)?;
    let result = match present(db, &ran.exp, output, Grouping::Pooled, ui) {
        Err(e) if e.is::<Unwritten>() => {
            let flags = e.downcast_ref::<Unwritten>().map_or(String::new(), |u| {
                u.0.iter()
                    .map(|(flag, _)| format!(" {flag} FILE"))
                    .collect()
            });
            // The outputs were checked before the runs; one failed all the same (a disk
            // that filled): the runs are safe, and how to write them again is said once.
            let db_flag = if db == Path::new("memtrial.db") {
                String::new()
            } else {
                format!(" --db {}", escape::shell_word(&db.display().to_string()))
            };
            bail!(
                "{e}; the runs are stored in {} (experiment {}): write them again with \
                 `memtrial report {}{db_flag}{flags}`",
                db.display(),
                ran.exp.id,
                ran.exp.id
            );
        }
        r => r?,
    };
    if ran.interrupted {
        interrupted_note(db, &ran.exp, ui);
        return Ok(Outcome::Interrupted);
    }
    Ok(result)
}

/// Outputs that could not be written, each said once.
#[derive(Debug)]
pub(super) struct Unwritten(Vec<(&'static str, String)>);

impl std::fmt::Display for Unwritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let said: Vec<&str> = self.0.iter().map(|(_, e)| e.as_str()).collect();
        f.write_str(&said.join("; "))
    }
}

impl std::error::Error for Unwritten {}

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
    let layout = if output.detail {
        Layout::Detail
    } else {
        Layout::Answer
    };
    let terminal = ExportType::Table {
        color: ui.color(),
        layout,
    };
    let mut table = match grouping {
        Grouping::Pooled => {
            if let Some(w) = report::hosts::pooled_warning(exp) {
                ui.note(&w);
            }
            String::from_utf8_lossy(&terminal.serialize(&report)?).into_owned()
        }
        Grouping::ByHost => {
            String::from_utf8_lossy(&report::hosts::serialize(terminal, &report)?).into_owned()
        }
    };
    if layout == Layout::Answer && grouping == Grouping::Pooled {
        table.push_str(&more_line(db, exp.id, &outputs));
        table.push('\n');
    }
    let stdout_taken = outputs.iter().any(|(_, t)| t.is_stdout());
    ui.human(&table, stdout_taken)?;
    show_failures(db, exp, ui);
    let mut unwritten = Vec::new();
    for (format, target) in &outputs {
        let bytes = match grouping {
            Grouping::Pooled => format.serialize(&report)?,
            Grouping::ByHost => report::hosts::serialize(*format, &report)?,
        };
        // Each output is tried: one that fails does not keep the others from being written.
        if let Err(e) = ui.write_output(target, &bytes, format.flag()) {
            unwritten.push((format.flag(), e.to_string()));
        }
    }
    if !unwritten.is_empty() {
        return Err(Unwritten(unwritten).into());
    }
    Ok(if any_failed(exp) {
        Outcome::RunsFailed
    } else {
        Outcome::Ok
    })
}

/// Where the rest of the report is: `report --detail` (naming the database when it is not
/// the default) and the HTML report being written, or how to have one.
fn more_line(db: &Path, id: i64, outputs: &[(ExportType, OutputTarget)]) -> String {
    let db =
        (db != Path::new("memtrial.db")).then(|| escape::shell_word(&db.display().to_string()));
    let html = outputs.iter().find_map(|(t, target)| match (t, target) {
        (ExportType::Html, OutputTarget::File(p)) => {
            Some(escape::terminal(&p.display().to_string()))
        }
        _ => None,
    });
    report::answer::more_line(id, db.as_deref(), html.as_deref())
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
