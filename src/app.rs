//! The command-line edge: turns parsed flags into plans, runs them, prints.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{
    Cli, ColorChoice, Command, DemoArgs, ExporterArgs, FragmentArgs, GroupBy, ImportArgs,
    InspectArgs, OutputArgs, ReportArgs, RunArgs, WorkloadCommand,
};
use memtrial::analysis::recommend::recommend;
use memtrial::analysis::{analyse, any_failed};
use memtrial::linux::cgroup;
use memtrial::linux::host::HostInfo;
use memtrial::linux::safe_file;
use memtrial::plan::catalog::{CatalogKind, Distro, LibraryLocator, CATALOG};
use memtrial::plan::{build_plan, read_plan_file, PlanContext, PlanInput};
use memtrial::record::{Experiment, RunStatus};
use memtrial::report::printer::{ColorMode, OutputTarget, Printer};
use memtrial::report::{self, escape, ExportType, Grouping, Report};
use memtrial::runner::{run_experiment, Event, RunLog, Start};
use memtrial::store::Store;
use memtrial::trial::Isolation;
use memtrial::units::{format_bytes, format_seconds, parse_size};
use memtrial::workload::fragment::{self, FragmentConfig};

/// How the process should exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    RunsFailed,
    Interrupted,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::RunsFailed => 1,
            Outcome::Interrupted => 130,
        }
    }
}

/// Everything a user sees goes through the one printer.
pub(crate) type Ui = Printer;

fn printer(cli: &Cli) -> Ui {
    Printer::stdio(
        cli.quiet,
        match cli.color {
            ColorChoice::Auto => ColorMode::Auto,
            ColorChoice::Always => ColorMode::Always,
            ColorChoice::Never => ColorMode::Never,
        },
    )
}

/// A flag set by SIGINT, SIGTERM, SIGHUP and SIGQUIT: memtrial then stops what it runs, cleans
/// up, keeps what it measured, and exits with 130.
pub(crate) fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install signal handlers")?;
    }
    Ok(stop)
}

pub fn dispatch(cli: Cli) -> Result<Outcome> {
    let ui = printer(&cli);
    match &cli.command {
        Command::Run(args) => run_cmd(&cli.db, args, &ui),
        Command::Demo(args) => demo_cmd(&cli.db, args, &ui),
        Command::Variants => variants_cmd(&ui),
        Command::List => list_cmd(&cli.db, &ui),
        Command::Report(args) => report_cmd(&cli.db, args, &ui),
        Command::Import(args) => import_cmd(&cli.db, args, &ui),
        Command::Recommend(args) => recommend_cmd(&cli.db, args.id, &ui),
        Command::Workload(WorkloadCommand::Fragment(args)) => fragment_cmd(args, &ui),
        Command::Inspect(args) => inspect_cmd(args, &ui),
        Command::Load(args) => load_cmd(args, &ui),
        Command::Exporter(args) => exporter_cmd(args, &ui),
        Command::Kube(args) => crate::app_kube::kube_cmd(&cli.db, args, &ui),
    }
}

pub(crate) fn plan_context(locator: &LibraryLocator) -> Result<PlanContext<'_>> {
    Ok(PlanContext {
        locator,
        distro: Distro::detect(),
        path_var: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        workdir: std::env::current_dir().context("cannot read the current directory")?,
        online_cpus: memtrial::linux::host::online_cpus(),
    })
}

/// The one place flags meet the plan file: every field of the parsed arguments is taken
/// apart by name (no `..`), so a new flag cannot be dropped on the way to the plan.
/// Defaults and validation follow once, in [`build_plan`].
pub(crate) fn run_input(args: &RunArgs) -> Result<PlanInput> {
    let RunArgs {
        runs,
        warmup,
        variants,
        custom,
        baseline,
        plan,
        interval,
        timeout,
        seed,
        memory_limit,
        cpus,
        cpuset,
        pids_limit,
        probes,
        no_probes,
        probe_interval,
        resume: _,          // handled before: a resumed experiment keeps its stored plan
        confirm_command: _, // only with --resume
        in_container: _,    // handled before: where the run happens, not what runs
        index: _,
        server,
        worker,
        output: _, // where reports go, not what runs
        command,
    } = args;
    let crate::cli::WorkerArgs {
        before,
        driver,
        // Plan keys only (`[worker]`): the flags are `--duration`/`--cooldown` below.
        duration: _,
        cooldown: _,
    } = worker;
    let crate::cli::ServerArgs {
        url,
        ready,
        ready_timeout,
        warmup_duration,
        duration,
        cooldown,
        connections,
        load_threads,
        rate,
        request_timeout,
        targets,
        replay,
        speed,
        methods,
    } = server;
    let flags = PlanInput {
        command: command.clone(),
        variants: variants.clone(),
        custom: custom.clone(),
        baseline: baseline.clone(),
        runs: *runs,
        warmup: *warmup,
        interval: interval.clone(),
        timeout: timeout.clone(),
        seed: *seed,
        memory_limit: memory_limit.clone(),
        cpus: cpus.clone(),
        cpuset: cpuset.clone(),
        pids_limit: *pids_limit,
        server: memtrial::plan::ServerInput {
            url: url.clone(),
            ready: ready.clone(),
            ready_timeout: ready_timeout.clone(),
            warmup_duration: warmup_duration.clone(),
            duration: duration.clone(),
            cooldown: cooldown.clone(),
            connections: *connections,
            load_threads: *load_threads,
            rate: *rate,
            request_timeout: request_timeout.clone(),
            targets: targets.clone(),
            replay: replay.clone(),
            speed: *speed,
            methods: methods.clone(),
        },
        // `--duration` stays with the server settings here: without a URL anywhere
        // (flags or plan file) the plan makes it the service's duration.
        worker: memtrial::plan::WorkerInput {
            before: before.clone(),
            driver: driver.clone(),
            duration: None,
            // Likewise `--cooldown`: with a driver and no URL it is the driver's cool-down.
            cooldown: None,
        },
        probes: probes.clone(),
        no_probes: *no_probes,
        probe_interval: probe_interval.clone(),
    };
    Ok(match plan {
        Some(path) => flags.or(read_plan_file(path)?),
        None => flags,
    })
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

fn run_cmd(db: &Path, args: &RunArgs, ui: &Ui) -> Result<Outcome> {
    if let Some(id) = args.resume {
        return crate::app_resume::resume(
            db,
            id,
            args.confirm_command.as_deref(),
            &args.output,
            ui,
        );
    }
    match placement(args) {
        Placement::InContainer { index } => crate::app_kube::in_container_cmd(db, args, index, ui),
        Placement::Local => execute(db, run_input(args)?, &args.output, ui),
    }
}

/// Where `memtrial run` runs: here, each run in a cgroup of its own, or one slot inside
/// the container memtrial is in.
enum Placement {
    Local,
    InContainer { index: u32 },
}

fn placement(args: &RunArgs) -> Placement {
    match (args.in_container, args.index) {
        // clap requires --index with --in-container.
        (true, Some(index)) => Placement::InContainer { index },
        _ => Placement::Local,
    }
}

/// Decides where runs are isolated: a fresh cgroup per run as root, else none — and
/// then limits cannot be honoured, which is an error, never a silent no-op.
pub(crate) fn isolation(limits: &memtrial::plan::Limits, ui: &Ui) -> Result<Isolation> {
    let root = unsafe { libc::geteuid() } == 0;
    let reason = if !root {
        "not running as root: memtrial creates a cgroup per run only as root (a delegated cgroup v2 subtree for other users is not supported yet)".to_string()
    } else {
        match cgroup::detect() {
            Ok(h) => {
                for p in cgroup::clean_stale(&h) {
                    ui.note(&format!(
                        "note: removed a cgroup left by an earlier memtrial that died: {}",
                        p.display()
                    ));
                }
                return Ok(Isolation::Cgroup(h));
            }
            Err(e) => format!("no usable cgroup: {e}"),
        }
    };
    if limits.any() {
        bail!("--memory-limit, --cpus, --cpuset and --pids-limit need a cgroup, and there is none: {reason}");
    }
    ui.note(&format!(
        "note: runs are not isolated in cgroups ({reason}); the tree's cgroup peak, OOM kills and CPU throttling are not measured"
    ));
    Ok(Isolation::None { reason })
}

fn demo_cmd(db: &Path, args: &DemoArgs, ui: &Ui) -> Result<Outcome> {
    let exe = std::env::current_exe().context("cannot find memtrial's own executable")?;
    let input = PlanInput {
        command: vec![
            exe.display().to_string(),
            "workload".into(),
            "fragment".into(),
        ],
        runs: Some(args.runs),
        // A run of a few seconds: the allocator probe reports four times a second.
        probe_interval: Some("250ms".into()),
        ..Default::default()
    };
    ui.note("memtrial demo: the built-in fragmentation workload (`memtrial workload fragment`) under every available variant.");
    let mut output = OutputArgs {
        json: args.output.json.clone(),
        csv: args.output.csv.clone(),
        samples_csv: args.output.samples_csv.clone(),
        html: args.output.html.clone(),
        markdown: args.output.markdown.clone(),
    };
    output.html.get_or_insert_with(|| args.report.clone());
    let outcome = execute(db, input, &output, ui)?;
    if let Some(p) = &output.html {
        let shown = std::path::absolute(p).unwrap_or_else(|_| p.clone());
        ui.note(&format!("HTML report with charts: {}", shown.display()));
    }
    Ok(outcome)
}

/// Checks an output path can be written before hours of runs, not after.
fn check_output(path: &Option<PathBuf>, flag: &str) -> Result<()> {
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

fn execute(db: &Path, input: PlanInput, output: &OutputArgs, ui: &Ui) -> Result<Outcome> {
    check_outputs(output)?;
    let locator = LibraryLocator::new();
    let ctx = plan_context(&locator)?;
    let built = build_plan(input, &ctx)?;
    for n in &built.notes {
        ui.note(&format!("note: {n}"));
    }
    let plan = built.plan;
    if let Some(s) = &plan.server {
        fit_fd_limit(s.connections, s.threads, ui)?;
    }
    let mut store = Store::open(db)?;
    let host = HostInfo::detect();
    let isolation = isolation(&plan.limits, ui)?;
    let mut notes = built.notes.clone();
    notes.push(isolation_note(&isolation, &plan.limits));
    run_and_present(
        db,
        &mut store,
        &plan,
        Start::New {
            host: &host,
            notes: &notes,
        },
        &isolation,
        output,
        ui,
    )
}

fn isolation_note(isolation: &Isolation, limits: &memtrial::plan::Limits) -> String {
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
            format!("isolation: a fresh {} per run; {limits}", h.describe())
        }
        Isolation::None { reason } => format!("isolation: none ({reason})"),
    }
}

/// What a user sees while an experiment runs: notes, and a progress bar on a terminal.
pub(crate) struct Progress<'a> {
    plan: &'a memtrial::plan::Plan,
    ui: &'a Ui,
    bar: Option<ProgressBar>,
}

impl<'a> Progress<'a> {
    pub(crate) fn new(plan: &'a memtrial::plan::Plan, ui: &'a Ui) -> Self {
        let bar = ui.live_progress().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template("{spinner} [{bar:24}] {pos}/{len} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress { plan, ui, bar }
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    pub(crate) fn event(&self, ev: Event) {
        let (plan, ui, bar) = (self.plan, self.ui, &self.bar);
        match ev {
            Event::Started {
                experiment,
                total,
                log_dir,
            } => {
                let variants_line = plan
                    .variants
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                ui.note(&format!(
                    "experiment {experiment}: {total} runs ({} variants: {variants_line}; {} measured + {} warm-up each), seed {}, output of each run in {}",
                    plan.variants.len(),
                    plan.runs,
                    plan.warmup,
                    plan.seed,
                    log_dir.display()
                ));
                if let Some(b) = bar {
                    b.set_length(total as u64);
                }
            }
            Event::TrialStart { variant, slot, .. } => {
                if let Some(b) = bar {
                    b.set_message(format!(
                        "{}{} starting",
                        escape::terminal(variant),
                        if slot.warmup { " (warm-up)" } else { "" }
                    ));
                }
            }
            Event::Sample { slot, live } => {
                if let Some(b) = bar {
                    let v = escape::terminal(&plan.variants[slot.variant].name);
                    b.set_message(format!(
                        "{v}{} · {} · RSS {}",
                        if slot.warmup { " (warm-up)" } else { "" },
                        format_seconds(live.elapsed.as_secs_f64()),
                        format_bytes(live.rss_bytes as f64)
                    ));
                }
            }
            Event::TrialEnd {
                index,
                total,
                record,
                ..
            } => self.trial_end(index, total, record),
        }
    }

    /// One line per finished run: above the bar when it did not go well, else a note.
    fn trial_end(&self, index: usize, total: usize, record: &memtrial::record::RunRecord) {
        let line = format!(
            "[{:>3}/{total}] {:<12} {:<8} {:>9}  peak RSS {:>9}  {}{}",
            index,
            record.variant,
            record.status.as_str(),
            format_seconds(record.wall_seconds),
            format_bytes(record.peak_rss_bytes as f64),
            record.verification.as_str(),
            if record.warmup { " (warm-up)" } else { "" },
        );
        // An ok run's message says what else is true of it (memtrial was disturbed).
        let said = record
            .message
            .as_ref()
            .filter(|_| record.status == RunStatus::Ok);
        let line = match said {
            Some(m) => format!("{line} — {m}"),
            None => line,
        };
        match &self.bar {
            Some(b) => {
                b.inc(1);
                if record.status != RunStatus::Ok || said.is_some() {
                    // The bar prints above itself; the line is escaped as a note is.
                    b.println(escape::terminal(&line));
                }
            }
            None => self.ui.note(&line),
        }
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
fn present(
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

fn report_cmd(db: &Path, args: &ReportArgs, ui: &Ui) -> Result<Outcome> {
    let ReportArgs { id, by, output } = args;
    check_outputs(output)?;
    let store = Store::open_existing(db)?;
    let id = match id {
        Some(id) => *id,
        None => store.latest_id()?,
    };
    let exp = store.load(id)?;
    let grouping = match by {
        None => Grouping::Pooled,
        Some(GroupBy::Host) => Grouping::ByHost,
    };
    present(db, &exp, output, grouping, ui)?;
    Ok(Outcome::Ok)
}

/// `memtrial import FILE…`: every record, or none, into the store.
fn import_cmd(db: &Path, args: &ImportArgs, ui: &Ui) -> Result<Outcome> {
    let ImportArgs { files } = args;
    import_files(db, files, ui)
}

/// Imports the records in `files` into `db` in one transaction (all or none) and says what
/// each joined or created: `memtrial import`, and `memtrial kube collect` (one file a call).
pub(crate) fn import_files(db: &Path, files: &[PathBuf], ui: &Ui) -> Result<Outcome> {
    let nothing = || format!("nothing was imported into {}", db.display());
    let records = memtrial::store::import::read_files(files).with_context(nothing)?;
    let mut store = Store::open(db)?;
    let outcomes =
        memtrial::store::import::import_records(&mut store, records).with_context(nothing)?;
    let mut text = String::new();
    for o in &outcomes {
        text.push_str(&format!(
            "{}: {} experiment {} (plan {}): {} new run(s), {} already present{}\n",
            escape::terminal(&o.source),
            if o.created { "new" } else { "joined" },
            o.experiment,
            memtrial::store::import::short(&o.fingerprint),
            o.new_runs,
            o.present_runs,
            if o.hosts.is_empty() {
                String::new()
            } else {
                // Hostnames come from the record: each on its line, whatever it holds.
                let hosts: Vec<String> = o.hosts.iter().map(|h| escape::terminal(h)).collect();
                format!("; host {}", hosts.join(", "))
            }
        ));
        for n in &o.notes {
            text.push_str(&format!("  note: {}\n", escape::terminal(n)));
        }
    }
    let mut ids: Vec<i64> = outcomes.iter().map(|o| o.experiment).collect();
    ids.dedup();
    if let [id] = ids[..] {
        text.push_str(&format!(
            "see it with: memtrial report --by host {id}{}\n",
            if db == Path::new("memtrial.db") {
                String::new()
            } else {
                format!(" --db {}", escape::shell_word(&db.display().to_string()))
            }
        ));
    }
    ui.result(&escape::terminal_lines(&text))?;
    Ok(Outcome::Ok)
}

fn recommend_cmd(db: &Path, id: Option<i64>, ui: &Ui) -> Result<Outcome> {
    use memtrial::report::Exporter;
    let store = Store::open_existing(db)?;
    let id = match id {
        Some(id) => id,
        None => store.latest_id()?,
    };
    let exp = store.load(id)?;
    if let Some(w) = report::hosts::pooled_warning(&exp) {
        ui.note(&w);
    }
    let analysis = analyse(&exp);
    let rec = recommend(&analysis);
    let text = report::text::RecommendationExporter.serialize(&Report {
        experiment: &exp,
        analysis: &analysis,
        recommendation: &rec,
    })?;
    ui.result(&String::from_utf8_lossy(&text))?;
    Ok(Outcome::Ok)
}

fn list_cmd(db: &Path, ui: &Ui) -> Result<Outcome> {
    let store = Store::open_existing(db)?;
    let list = store.list()?;
    ui.result(&report::text::experiment_list(db, &list))?;
    Ok(Outcome::Ok)
}

fn variants_cmd(ui: &Ui) -> Result<Outcome> {
    let locator = LibraryLocator::new();
    let distro = Distro::detect();
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    if !ui.color() {
        t.force_no_tty();
    }
    t.set_header(["variant", "available", "how", "what"]);
    for e in CATALOG.iter() {
        let (available, how) = match e.kind {
            CatalogKind::Glibc => ("yes".to_string(), "unchanged environment".to_string()),
            CatalogKind::ArenaMax(n) => ("yes".to_string(), format!("MALLOC_ARENA_MAX={n}")),
            CatalogKind::Preload(lib) => match locator.locate(lib) {
                Some(p) => ("yes".to_string(), format!("LD_PRELOAD={}", p.display())),
                None => (
                    "no".to_string(),
                    format!("install: {}", lib.install_hint(distro)),
                ),
            },
        };
        t.add_row([
            e.name.to_string(),
            available,
            how,
            e.description.to_string(),
        ]);
    }
    ui.result(&format!("{t}\nCustom variants: --variant 'NAME=KEY=VALUE … preload:LIB' (LIB: jemalloc, tcmalloc, mimalloc or a path to a .so).\n"))?;
    Ok(Outcome::Ok)
}

fn fragment_cmd(args: &FragmentArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::plan::settings::{self as ranges, count};
    let mut cfg = FragmentConfig::default();
    if let Some(t) = args.threads {
        cfg.threads = count("--threads", t, ranges::FRAGMENT_THREADS)?;
    }
    if let Some(s) = &args.seconds {
        cfg.duration = Some(ranges::duration("--seconds", s, ranges::FRAGMENT_SECONDS)?);
        cfg.iterations = None;
    }
    if let Some(n) = args.iterations {
        cfg.iterations = Some(count("--iterations", n, ranges::FRAGMENT_ITERATIONS)?);
        cfg.duration = None;
    }
    let size = |flag: &'static str, s: &str| -> Result<usize> {
        let bytes = parse_size(s).map_err(|e| anyhow::anyhow!("{flag} {s}: {e}"))?;
        if !(ranges::FRAGMENT_SIZE.0..=ranges::FRAGMENT_SIZE.1).contains(&bytes) {
            bail!("{flag} {s}: must be from 1 byte to 1G");
        }
        Ok(bytes as usize)
    };
    if let Some(s) = &args.min_size {
        cfg.min_size = size("--min-size", s)?;
    }
    if let Some(s) = &args.max_size {
        cfg.max_size = size("--max-size", s)?;
    }
    if cfg.min_size == 0 || cfg.min_size > cfg.max_size {
        bail!(
            "--min-size {} / --max-size {}: need 1 <= min-size <= max-size",
            cfg.min_size,
            cfg.max_size
        );
    }
    if cfg.max_size > 1 << 30 {
        bail!("--max-size {}: at most 1G per object", cfg.max_size);
    }
    if let Some(f) = args.survivors {
        if !(0.0..=1.0).contains(&f) {
            bail!("--survivors {f}: must be a fraction between 0 and 1");
        }
        cfg.survivor_fraction = f;
    }
    if let Some(n) = args.live {
        cfg.live_objects = count("--live", n, ranges::FRAGMENT_LIVE)?;
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    let summary = fragment::run(&cfg);
    let status = memtrial::linux::proc::read_status(std::process::id() as i32).ok();
    let line = serde_json::json!({
        "workload": "fragment",
        "threads": summary.threads,
        "allocations": summary.allocations,
        "bytes_allocated": summary.bytes_allocated,
        "survivors": summary.survivors,
        "survivor_bytes": summary.survivor_bytes,
        "cross_thread_frees": summary.cross_thread_frees,
        "elapsed_seconds": summary.elapsed.as_secs_f64(),
        "vm_hwm_bytes": status.as_ref().map(|s| s.vm_hwm),
        "vm_rss_bytes": status.as_ref().map(|s| s.vm_rss),
    });
    ui.result(&format!("{line}\n"))?;
    Ok(Outcome::Ok)
}

fn inspect_cmd(args: &InspectArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::inspect::render::{live_line, InspectExport, View};
    use memtrial::plan::settings::{self as ranges, count};
    use memtrial::report::Exporter;
    let watch = args
        .watch
        .as_deref()
        .map(|w| ranges::duration("--watch", w, ranges::INSPECT_WATCH))
        .transpose()?;
    let interval = ranges::duration("--interval", &args.interval, ranges::INSPECT_INTERVAL)?;
    if let Some(n) = args.top {
        count("--top", n, ranges::INSPECT_TOP)?;
    }
    let json = args.json.as_deref().map(OutputTarget::from_path);
    if let Some(t) = &json {
        t.check("--json")?;
    }
    let stdout_taken = json.as_ref().is_some_and(OutputTarget::is_stdout);
    let text = InspectExport::Text {
        view: if args.maps { View::Maps } else { View::Screen },
        color: ui.color(),
    };
    let stop = stop_flag()?;
    if let Some(n) = args.top {
        let by = match args.by {
            crate::cli::RankByArg::Rss => memtrial::inspect::procs::RankBy::Rss,
            crate::cli::RankByArg::Pss => memtrial::inspect::procs::RankBy::Pss,
        };
        let top = memtrial::inspect::run_top(n, by)?;
        // `--json` on standard output: only the JSON, nothing for people beside it.
        if !stdout_taken {
            ui.human(&String::from_utf8_lossy(&text.serialize(&top)?), false)?;
        }
        if let Some(t) = &json {
            ui.write_output(t, &InspectExport::Json.serialize(&top)?, "--json")?;
        }
        return Ok(Outcome::Ok);
    }
    let Some(pid) = args.pid else {
        bail!("give a PID, or --top N");
    };
    let opts = memtrial::inspect::Options {
        pid,
        watch,
        interval,
        tree: args.tree,
    };
    let ins = memtrial::inspect::run(
        &opts,
        &mut |m| ui.note(m),
        &mut |s| ui.live(Some(&live_line(s))),
        &stop,
    )?;
    if opts.watch.is_some() {
        ui.live(None);
    }
    if !stdout_taken {
        ui.human(&String::from_utf8_lossy(&text.serialize(&ins)?), false)?;
    }
    if let Some(t) = &json {
        ui.write_output(t, &InspectExport::Json.serialize(&ins)?, "--json")?;
    }
    Ok(Outcome::Ok)
}

// ---- memtrial exporter --------------------------------------------------------

/// Validates every flag (exit 2 with the flag, the value and what to do), binds the
/// address, then serves until SIGINT or SIGTERM, which end it with exit 0.
fn exporter_cmd(args: &ExporterArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::exporter::{self, Collector, Settings};
    use memtrial::plan::settings as ranges;
    let ExporterArgs {
        listen,
        matcher,
        per_process,
        budget,
        max_age,
        probe_dir,
    } = args;
    let addr = exporter::parse_listen(listen)?;
    let matcher = exporter::parse_match(matcher)?;
    let probe_dir = exporter::parse_probe_dir(probe_dir)?;
    let budget = ranges::duration("--budget", budget, ranges::EXPORTER_BUDGET)?;
    let max_age = ranges::duration("--max-age", max_age, ranges::EXPORTER_MAX_AGE)?;
    let listener = exporter::bind(addr, listen)?;
    let stop = stop_flag()?;
    let shown = listener.local_addr().map_or(addr, |a| a);
    ui.note(&format!(
        "serving http://{shown}/metrics for processes matching {} (stop with Ctrl-C)",
        matcher.as_str()
    ));
    let collector = Collector::new(Settings {
        matcher,
        per_process: *per_process,
        budget,
        max_age,
        probe_dir,
    });
    exporter::serve(listener, collector, &stop)?;
    Ok(Outcome::Ok)
}

// ---- memtrial load -------------------------------------------------------------

/// Builds a load from the flags; every error names its flag, value and reason. The
/// numbers go through the same rules and defaults as a server trial's
/// ([`memtrial::plan::settings::resolve_load`]).
fn load_spec(args: &crate::cli::LoadArgs, ui: &Ui) -> Result<memtrial::load::LoadSpec> {
    use memtrial::load::{self, Mode};
    use memtrial::plan::settings::{resolve_load, LoadCommand, LoadInput};
    let crate::cli::LoadArgs {
        url: url_text,
        duration,
        warmup_duration,
        connections,
        threads,
        rate,
        targets,
        replay,
        speed,
        methods,
        timeout,
        json: _, // where the result goes
    } = args;
    let url = load::parse_url(url_text).map_err(|e| anyhow::anyhow!("--url: {e}"))?;
    let addr = url
        .socket_addr()
        .map_err(|e| anyhow::anyhow!("--url {url_text}: {e}"))?;
    let settings = resolve_load(
        &LoadInput {
            duration: duration.clone(),
            warmup_duration: warmup_duration.clone(),
            connections: *connections,
            threads: *threads,
            rate: *rate,
            request_timeout: timeout.clone(),
            speed: *speed,
        },
        LoadCommand::Load,
        memtrial::linux::host::online_cpus(),
    )?;
    let mode = match settings.rate {
        Some(r) => Mode::Open {
            rate_per_sec: r,
            connections: settings.connections,
        },
        None => Mode::Closed {
            connections: settings.connections,
        },
    };
    fit_fd_limit(settings.connections, settings.threads, ui)?;
    let (kind, flag) = match (targets, replay) {
        (Some(path), _) => (
            memtrial::load::source::RequestSource::Targets { path: path.clone() },
            format!("--targets {}", path.display()),
        ),
        (None, Some(path)) => (
            memtrial::load::source::RequestSource::Replay {
                path: path.clone(),
                speed: settings.speed,
                methods: methods
                    .clone()
                    .unwrap_or_else(memtrial::plan::settings::default_methods),
            },
            format!("--replay {}", path.display()),
        ),
        (None, None) => (
            memtrial::load::source::RequestSource::Url,
            format!("--url {url_text}"),
        ),
    };
    let (source, notes) = memtrial::load::source::read_source(&kind, &url.path_and_query)
        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
    for n in notes {
        ui.note(&n);
    }
    Ok(memtrial::load::LoadSpec {
        addr,
        host_header: url.host_header(),
        source,
        mode,
        threads: settings.threads,
        duration: settings.duration,
        warmup: settings.warmup,
        timeout: settings.request_timeout,
    })
}

fn load_cmd(args: &crate::cli::LoadArgs, ui: &Ui) -> Result<Outcome> {
    use std::sync::atomic::Ordering;
    if let Some(p) = &args.json {
        check_output(&Some(p.clone()), "--json")?;
    }
    let spec = load_spec(args, ui)?;
    let stop = stop_flag()?;
    let pacing = match spec.mode {
        memtrial::load::Mode::Open { rate_per_sec, .. } => {
            format!("open loop at {rate_per_sec} req/s")
        }
        memtrial::load::Mode::Closed { .. } => match &spec.source {
            memtrial::load::Source::Replay { speed: Some(s), .. } => format!("log's pace ×{s}"),
            _ => "closed loop".to_string(),
        },
    };
    let header = format!(
        "memtrial load: {} for {}{}, {} connection(s) on {} thread(s), {pacing}",
        args.url,
        format_seconds(spec.duration.as_secs_f64()),
        if spec.warmup.is_zero() {
            String::new()
        } else {
            format!(
                " after {} warm-up",
                format_seconds(spec.warmup.as_secs_f64())
            )
        },
        spec.mode.connections(),
        spec.threads,
    );
    ui.note(&format!("{header} …"));
    let t0 = std::time::Instant::now();
    let result = memtrial::load::run(&spec, t0, &stop)?;
    let text = memtrial::load::summary::render(&header, &result);
    let json = args.json.as_deref().map(OutputTarget::from_path);
    ui.human(&text, json.as_ref().is_some_and(OutputTarget::is_stdout))?;
    if let Some(target) = &json {
        let doc = serde_json::json!({
            "url": args.url,
            "threads": spec.threads,
            "connections": spec.mode.connections(),
            "duration_seconds": spec.duration.as_secs_f64(),
            "warmup_seconds": spec.warmup.as_secs_f64(),
            "timeout_seconds": spec.timeout.as_secs_f64(),
            "result": result,
        });
        let mut s = serde_json::to_vec_pretty(&doc)?;
        s.push(b'\n');
        ui.write_output(target, &s, "--json")?;
    }
    if stop.load(Ordering::Relaxed) {
        return Ok(Outcome::Interrupted);
    }
    Ok(if result.requests == 0 {
        ui.note("memtrial: no response was received");
        Outcome::RunsFailed
    } else {
        Outcome::Ok
    })
}
