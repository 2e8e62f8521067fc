//! `memtrial run` (here) and `memtrial demo`: flags and plan file to a plan, then run it.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::cli::{DemoArgs, OutputArgs, RunArgs};
use memtrial::analysis::decide::{Rule, DEFAULT_CONSECUTIVE};
use memtrial::plan::{read_plan_file, PlanInput};
use memtrial::runner::{Start, UntilDecided};
use memtrial::store::Store;

use super::experiment::{check_outputs, prepare, run_and_present, Prepared};
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
        until_decided: _, // how many runs, decided as they come: see `until_rule`
        max_runs: _,
        log_limit: _,       // where the output goes, not what runs: set in `run_cmd`
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
    let rule = until_rule(args)?;
    let mut judge = |e: &memtrial::record::Experiment| {
        memtrial::analysis::recommend::look(&memtrial::analysis::analyse(e))
    };
    let until = rule.map(|rule| UntilDecided {
        rule,
        judge: &mut judge,
    });
    execute(db, run_input(args)?, &args.output, ui, until)
}

/// The most runs per variant `--until-decided` takes by default.
pub(crate) const DEFAULT_MAX_RUNS: u32 = 30;

/// `--until-decided`'s rule from the flags (its cap checked here), or none.
pub(crate) fn until_rule(args: &RunArgs) -> Result<Option<Rule>> {
    if !args.until_decided {
        return Ok(None);
    }
    let max_runs = args.max_runs.unwrap_or(DEFAULT_MAX_RUNS);
    let (least, most) = memtrial::plan::settings::MAX_RUNS;
    if !(least..=most).contains(&max_runs) {
        bail!("--max-runs {max_runs}: out of range ({least} to {most}): with fewer than 3 runs of each, nothing is decided");
    }
    if let Some(runs) = args.runs.filter(|r| *r > max_runs) {
        bail!("--max-runs {max_runs} is below --runs {runs}: --runs is the least --until-decided runs, --max-runs the most");
    }
    Ok(Some(Rule {
        consecutive: DEFAULT_CONSECUTIVE,
        max_runs,
    }))
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
        detail: args.output.detail,
    };
    output.html.get_or_insert_with(|| args.report.clone());
    execute(db, input, &output, ui, None)
}

fn execute(
    db: &Path,
    input: PlanInput,
    output: &OutputArgs,
    ui: &Ui,
    until: Option<UntilDecided>,
) -> Result<Outcome> {
    check_outputs(output)?;
    let Prepared {
        plan,
        host,
        isolation,
        notes,
    } = prepare(input, ui)?;
    let mut store = Store::open(db)?;
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
        until,
    )
}
