//! `memtrial run` (here) and `memtrial demo`: flags and plan file to a plan, then run it.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{DemoArgs, OutputArgs, RunArgs};
use memtrial::linux::host::HostInfo;
use memtrial::plan::{read_plan_file, PlanInput};
use memtrial::runner::Start;
use memtrial::store::Store;

use super::experiment::{
    check_outputs, fit_fd_limit, isolation, isolation_note, resolve_plan, run_and_present,
    tool_notes,
};
use super::ui::{Outcome, Ui};

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
        limits,
        probes,
        no_probes,
        probe_interval,
        require_cut_off,
        resume: _,          // handled before: a resumed experiment keeps its stored plan
        confirm_command: _, // only with --resume
        in_container: _,    // handled before: where the run happens, not what runs
        index: _,
        server,
        worker,
        output: _, // where reports go, not what runs
        command,
    } = args;
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
        limits: limits.clone(),
        // The same type as the plan file's `[server]` table: declared once.
        server: server.clone(),
        // `--duration`/`--cooldown` stay with the server settings here (the worker's own
        // are plan keys only, never set by clap): without a URL anywhere (flags or plan
        // file) the plan makes them the service's duration and the driver's cool-down.
        worker: worker.clone(),
        probes: probes.clone(),
        no_probes: *no_probes,
        probe_interval: probe_interval.clone(),
        require_cut_off: require_cut_off.clone(),
    };
    Ok(match plan {
        Some(path) => flags.or(read_plan_file(path)?),
        None => flags,
    })
}

pub(super) fn run_cmd(db: &Path, args: &RunArgs, ui: &Ui) -> Result<Outcome> {
    execute(db, run_input(args)?, &args.output, ui)
}

pub(super) fn demo_cmd(db: &Path, args: &DemoArgs, ui: &Ui) -> Result<Outcome> {
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

fn execute(db: &Path, input: PlanInput, output: &OutputArgs, ui: &Ui) -> Result<Outcome> {
    check_outputs(output)?;
    let memtrial::plan::BuiltPlan {
        plan,
        notes: plan_notes,
    } = resolve_plan(input, ui)?;
    if let Some(s) = &plan.server {
        fit_fd_limit(s.connections, s.threads, ui)?;
    }
    let probe_notes = super::experiment::probe_preflight(&plan)?;
    let mut store = Store::open(db)?;
    let host = HostInfo::detect();
    let isolation = isolation(&plan.limits, ui)?;
    let mut notes = plan_notes;
    notes.push(isolation_note(&isolation, &plan.limits));
    notes.extend(tool_notes(&plan, ui));
    notes.extend(probe_notes);
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
