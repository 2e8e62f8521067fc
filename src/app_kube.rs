//! The command-line edge of the Kubernetes flow: `memtrial run --in-container` (one slot
//! of a plan in the container memtrial is in), `memtrial kube` (the Job) and
//! `memtrial kube collect` (the records back from the pods' logs).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::app::{self, Outcome, Ui};
use crate::cli::RunArgs;
use memtrial::backend::container::{own_limits, ContainerBackend};
use memtrial::linux::host::HostInfo;
use memtrial::plan::build_plan;
use memtrial::plan::catalog::LibraryLocator;
use memtrial::record::RunStatus;
use memtrial::report::{ExportType, Report};
use memtrial::runner::{run_experiment, Start};
use memtrial::schedule::schedule;
use memtrial::store::Store;

/// Where a run's limits would come from, refused in a container.
const LIMIT_FLAGS: [(&str, &str); 4] = [
    ("--memory-limit", "memory_limit"),
    ("--cpus", "cpus"),
    ("--cpuset", "cpuset"),
    ("--pids-limit", "pids_limit"),
];

/// The limit flags and plan keys given, as (flag, plan key, value).
fn limits_given(input: &memtrial::plan::PlanInput) -> Vec<(&'static str, &'static str, String)> {
    let values = [
        input.memory_limit.clone(),
        input.cpus.clone(),
        input.cpuset.clone(),
        input.pids_limit.map(|p| p.to_string()),
    ];
    LIMIT_FLAGS
        .iter()
        .zip(values)
        .filter_map(|((flag, key), v)| Some((*flag, *key, v?)))
        .collect()
}

/// `memtrial run --in-container --index N`: runs slot N of the plan's schedule here,
/// under the container's own limits, and prints the record as one `memtrial-record:` line.
pub fn in_container_cmd(db: &Path, args: &RunArgs, index: u32, ui: &Ui) -> Result<Outcome> {
    app::check_outputs(&args.output)?;
    let input = app::run_input(args)?;
    // A limit given as a flag is named as a flag; one from the plan file by its key.
    let flags = memtrial::plan::PlanInput {
        memory_limit: args.memory_limit.clone(),
        cpus: args.cpus.clone(),
        cpuset: args.cpuset.clone(),
        pids_limit: args.pids_limit,
        ..Default::default()
    };
    if let Some((flag, _, value)) = limits_given(&flags).first() {
        bail!(
            "{flag} {value}: not with --in-container: the container's own limits are the run's \
             limits (set them in the pod's resources.limits, or with `memtrial kube --cpu/--memory`); \
             drop {flag}"
        );
    }
    if let Some((_, key, value)) = limits_given(&input).first() {
        bail!(
            "the plan sets {key} = {value:?}: not with --in-container: the container's own \
             limits are the run's limits (set them in the pod's resources.limits, or with \
             `memtrial kube --cpu/--memory`); remove {key} from the plan"
        );
    }
    if input.seed.is_none() {
        bail!(
            "--in-container needs a fixed seed: every pod of a Job must compute the same \
             schedule to know what slot --index {index} is (set seed = N in the plan, or --seed N)"
        );
    }
    let container = own_limits();
    let mut locator = LibraryLocator::new();
    if let Some(dir) = std::env::var_os(memtrial::kube::LIB_DIR_ENV) {
        locator = locator.preferring(dir.into());
    }
    let ctx = app::plan_context(&locator)?;
    let built = build_plan(input, &ctx)?;
    let mut plan = built.plan;
    plan.limits = container.limits.clone();
    let slots = schedule(plan.variants.len(), plan.warmup, plan.runs, plan.seed);
    let Some(slot) = slots.get(index as usize).copied() else {
        bail!(
            "--index {index}: the plan's schedule has {} slots (0 to {}): {} variant(s) × ({} \
             warm-up + {} measured) run(s); give an index in that range",
            slots.len(),
            slots.len().saturating_sub(1),
            plan.variants.len(),
            plan.warmup,
            plan.runs
        );
    };
    if let Some(s) = &plan.server {
        app::fit_fd_limit(s.connections, s.threads, ui)?;
    }
    let mut notes = built.notes.clone();
    for n in &notes {
        ui.note(&format!("note: {n}"));
    }
    let variant = &plan.variants[slot.variant];
    notes.push(format!(
        "in-container: slot {index} of {} (variant {}, block {}{}); no cgroup made: the \
         container's limits are the run's ({}; {} visible CPUs)",
        slots.len(),
        variant.name,
        slot.block,
        if slot.warmup { ", warm-up" } else { "" },
        describe_limits(&plan.limits),
        container.visible_cpus,
    ));
    if !container.sources.is_empty() {
        notes.push(format!(
            "in-container: limits read from {}",
            container.sources.join("; ")
        ));
    }
    for p in &container.problems {
        notes.push(format!("in-container: could not read a limit: {p}"));
    }
    if let Some(node) = std::env::var(memtrial::kube::NODE_ENV)
        .ok()
        .filter(|n| !n.is_empty())
    {
        notes.push(format!("in-container: node {node}"));
    }
    for n in &notes[built.notes.len()..] {
        ui.note(&format!("note: {n}"));
    }
    let mut store = Store::open(db)?;
    let host = HostInfo::detect();
    let stop = app::stop_flag()?;
    let progress = app::Progress::new(&plan, ui);
    let outcome = run_experiment(
        &mut store,
        &plan,
        Start::Slot {
            host: &host,
            notes: &notes,
            seq: index,
        },
        &ContainerBackend::new(plan.limits.clone()),
        &stop,
        &mut |ev| progress.event(ev),
    )?;
    progress.finish();
    let exp = store.load(outcome.experiment)?;
    let analysis = memtrial::analysis::analyse(&exp);
    let rec = memtrial::analysis::recommend::recommend(&analysis);
    let report = Report {
        experiment: &exp,
        analysis: &analysis,
        recommendation: &rec,
    };
    // One run is no comparison: no table; the run's line was shown, and a failed run's
    // stderr is. Standard output carries the record.
    app::show_failures(&exp, ui);
    for (format, target) in app::outputs(&args.output) {
        ui.write_output(&target, &format.serialize(&report)?, format.flag())?;
    }
    let json = ExportType::Json.serialize(&report)?;
    let line = memtrial::kube::record_line(&json).context("cannot make the record line")?;
    ui.result(&line)?;
    if outcome.interrupted || exp.runs.iter().any(|r| r.status == RunStatus::Interrupted) {
        return Ok(Outcome::Interrupted);
    }
    // A run that failed, was OOM-killed or timed out is a result, recorded as such: the
    // pod succeeds so that the Job does not run the slot again.
    Ok(Outcome::Ok)
}

fn describe_limits(l: &memtrial::plan::Limits) -> String {
    let mut parts = Vec::new();
    match l.memory_max {
        Some(m) => parts.push(format!("memory {m} bytes")),
        None => parts.push("no memory limit".into()),
    }
    match l.cpus {
        Some(c) => parts.push(format!("{c} CPUs of quota")),
        None => parts.push("no CPU quota".into()),
    }
    if let Some(s) = &l.cpuset {
        parts.push(format!("cpuset {s}"));
    }
    if let Some(p) = l.pids_max {
        parts.push(format!("{p} pids"));
    }
    parts.join(", ")
}
