//! The command-line edge of the Kubernetes flow: `memtrial run --in-container` (one slot
//! of a plan in the container memtrial is in), `memtrial kube` (the Job) and
//! `memtrial kube collect` (the records back from the pods' logs).

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::experiment::{check_outputs, fit_fd_limit, outputs, plan_context, show_failures};
use super::report::import_files;
use super::run::run_input;
use super::ui::{stop_flag, Outcome, Progress, Ui};
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

/// `memtrial run --in-container --index N`: runs slot N of the plan's schedule here,
/// under the container's own limits, and prints the record as one `memtrial-record:` line.
pub fn in_container_cmd(db: &Path, args: &RunArgs, index: u32, ui: &Ui) -> Result<Outcome> {
    check_outputs(&args.output)?;
    let input = run_input(args)?;
    refuse_what_the_container_decides(args, &input, index)?;
    let container = own_limits();
    let mut locator = LibraryLocator::new();
    if let Some(dir) = std::env::var_os(memtrial::kube::LIB_DIR_ENV) {
        locator = locator.preferring(dir.into());
    }
    let mut ctx = plan_context(&locator)?;
    // The Job's copy of memtrial is not on the image's PATH: its directory comes last on
    // the PATH the plan's command is looked up in, so that `memtrial workload …` runs it.
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        ctx.path_var = format!("{}:{}", ctx.path_var, dir.display());
    }
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
        fit_fd_limit(s.connections, s.threads, ui)?;
    }
    let mut notes = built.notes.clone();
    for n in &notes {
        ui.note(&format!("note: {n}"));
    }
    notes.extend(slot_notes(&plan, slot, index, slots.len(), &container));
    notes.extend(super::experiment::tool_notes(&plan, ui));
    notes.extend(super::experiment::probe_preflight(&plan)?);
    for n in &notes[built.notes.len()..] {
        ui.note(&format!("note: {n}"));
    }
    let mut store = Store::open(db)?;
    let host = HostInfo::detect();
    let stop = stop_flag()?;
    let progress = Progress::new(&plan, ui);
    let outcome = run_experiment(
        &mut store,
        &plan,
        Start::Slot {
            host: &host,
            notes: &notes,
            seq: index,
        },
        &ContainerBackend::new(plan.limits.clone(), container.oom.clone()),
        &stop,
        &mut |ev| progress.event(ev),
    )?;
    progress.finish();
    let exp = store.load(outcome.experiment)?;
    print_record(db, &exp, &args.output, ui)?;
    if outcome.interrupted || exp.runs.iter().any(|r| r.status == RunStatus::Interrupted) {
        return Ok(Outcome::Interrupted);
    }
    // A run that failed, was OOM-killed or timed out is a result, recorded as such: the
    // pod succeeds so that the Job does not run the slot again.
    Ok(Outcome::Ok)
}

/// What the container decides is not the user's to set in-container: limits (as flags or
/// plan keys) are refused; the seed must be fixed so every pod computes the same schedule.
fn refuse_what_the_container_decides(
    args: &RunArgs,
    input: &memtrial::plan::PlanInput,
    index: u32,
) -> Result<()> {
    // A limit given as a flag is named as a flag; one from the plan file by its key.
    if let Some((flag, _, value)) = args.limits.given().first() {
        bail!(
            "{flag} {value}: not with --in-container: the container's own limits are the run's \
             limits (set them in the pod's resources.limits, or with `memtrial kube --cpu/--memory`); \
             drop {flag}"
        );
    }
    if let Some((_, key, value)) = input.limits.given().first() {
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
    Ok(())
}

/// What the record notes about this pod: which slot, the container's limits and where
/// they were read, what could not be read, and the node.
fn slot_notes(
    plan: &memtrial::plan::Plan,
    slot: memtrial::schedule::Slot,
    index: u32,
    slots: usize,
    container: &memtrial::backend::container::ContainerLimits,
) -> Vec<String> {
    let variant = &plan.variants[slot.variant];
    let mut notes = vec![format!(
        "in-container: slot {index} of {} (variant {}, block {}{}); no cgroup made: the \
         container's limits are the run's ({}; {} visible CPUs)",
        slots,
        variant.name,
        slot.block,
        if slot.warmup { ", warm-up" } else { "" },
        describe_limits(&plan.limits),
        container.visible_cpus,
    )];
    if !container.sources.is_empty() {
        notes.push(format!(
            "in-container: limits read from {}",
            container.sources.join("; ")
        ));
    }
    for p in &container.problems {
        notes.push(format!("in-container: could not read a limit: {p}"));
    }
    match container.oom.as_ref().map(|c| (c, c.read())) {
        Some((_, Some(_))) => {}
        Some((c, None)) => notes.push(format!(
            "in-container: {} has no OOM-kill count: a workload killed at the memory limit \
             is recorded as killed by SIGKILL",
            c.file.display()
        )),
        None => notes.push(
            "in-container: no memory cgroup found: a workload killed at the memory limit is \
             recorded as killed by SIGKILL"
                .into(),
        ),
    }
    if let Some(node) = std::env::var(memtrial::kube::NODE_ENV)
        .ok()
        .filter(|n| !n.is_empty())
    {
        notes.push(format!("in-container: node {node}"));
    }
    notes
}

/// Writes the asked-for outputs and prints the record as one `memtrial-record:` line on
/// standard output (one run is no comparison: no table; a failed run's stderr is shown).
fn print_record(
    db: &Path,
    exp: &memtrial::record::Experiment,
    output: &crate::cli::OutputArgs,
    ui: &Ui,
) -> Result<()> {
    let analysis = memtrial::analysis::analyse(exp);
    let rec = memtrial::analysis::recommend::recommend(&analysis);
    let report = Report {
        experiment: exp,
        analysis: &analysis,
        recommendation: &rec,
    };
    // One run is no comparison: no table; the run's line was shown, and a failed run's
    // stderr is. Standard output carries the record.
    show_failures(db, exp, ui);
    for (format, target) in outputs(output) {
        ui.write_output(&target, &format.serialize(&report)?, format.flag())?;
    }
    let json = ExportType::Json.serialize(&report)?;
    let line = memtrial::kube::record_line(&json).context("cannot make the record line")?;
    ui.result(&line)?;
    Ok(())
}

fn describe_limits(l: &memtrial::plan::Limits) -> String {
    let mut parts = Vec::new();
    match l.memory_max {
        Some(m) => parts.push(format!(
            "memory {}",
            memtrial::units::format_bytes(m as f64)
        )),
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

/// `memtrial kube …`: renders the Job, or collects its records.
pub fn kube_cmd(db: &Path, args: &crate::cli::KubeArgs, ui: &Ui) -> Result<Outcome> {
    let crate::cli::KubeArgs {
        command,
        plan,
        image,
        cpu,
        memory,
        parallelism,
        name,
        memtrial_image,
        image_pull_policy,
    } = args;
    if let Some(crate::cli::KubeCommand::Collect(c)) = command {
        return collect_cmd(db, c, ui);
    }
    // clap requires these without a subcommand.
    let (Some(plan), Some(image), Some(cpu), Some(memory)) = (plan, image, cpu, memory) else {
        bail!("memtrial kube needs PLAN, --image, --cpu and --memory (see memtrial kube --help)");
    };
    use memtrial::kube::render::{self, KubeJob};
    let text = memtrial::plan::read_plan_text(plan).context(
        "memtrial kube carries the plan in a ConfigMap, which Kubernetes limits to 1 MiB",
    )?;
    let input = memtrial::plan::parse_plan_text(&text)
        .map_err(|m| anyhow::anyhow!("plan {}: {m}", plan.display()))?;
    if let Some((_, key, value)) = input.limits.given().first() {
        bail!(
            "plan {}: it sets {key} = {value:?}: under memtrial kube the pod's --cpu and --memory \
             are the limits (each pod records its container's); remove {key} from the plan",
            plan.display()
        );
    }
    let (variants, slots) =
        render::plan_slots(&input).map_err(|e| anyhow::anyhow!("plan {}: {e}", plan.display()))?;
    let name = job_name(name.as_deref(), plan)?;
    let (least, most) = memtrial::plan::settings::KUBE_PARALLELISM;
    if !(least..=most).contains(parallelism) {
        bail!("--parallelism {parallelism}: must be from {least} to {most}");
    }
    let seed = job_seed(input.seed, ui)?;
    if input.warmup.is_some_and(|w| w > 0) {
        ui.note("note: the plan has warm-up runs: each is a slot of its own, in a pod of its own, and warms only that pod (and its node's page cache)");
    }
    let job = KubeJob {
        name,
        plan_text: text,
        variants,
        slots,
        seed,
        image: image.clone(),
        memtrial_image: memtrial_image
            .clone()
            .unwrap_or_else(render::default_memtrial_image),
        cpu: render::cpu_quantity(cpu)?,
        memory: render::memory_quantity(memory)?,
        parallelism: *parallelism,
        pull_policy: image_pull_policy.map(|p| match p {
            crate::cli::PullPolicyArg::Always => render::PullPolicy::Always,
            crate::cli::PullPolicyArg::IfNotPresent => render::PullPolicy::IfNotPresent,
            crate::cli::PullPolicyArg::Never => render::PullPolicy::Never,
        }),
    };
    if job.image.trim().is_empty() || job.memtrial_image.trim().is_empty() {
        bail!("--image and --memtrial-image must name an image");
    }
    ui.result(&render::render(&job)?)?;
    Ok(Outcome::Ok)
}

/// The Job's name: --name, or `memtrial-` and the plan file's name; refused when it is not
/// a DNS-1123 label, or too long for the names Kubernetes makes of it.
fn job_name(given: Option<&str>, plan: &Path) -> Result<String> {
    let name = match given {
        Some(n) => n.to_string(),
        None => format!(
            "memtrial-{}",
            plan.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    };
    if let Err(why) = memtrial::kube::dns1123_label(&name) {
        let flag = if given.is_some() {
            "--name"
        } else {
            "the Job's name (from the plan file's name; give --name)"
        };
        bail!("{flag} {name:?}: not a DNS-1123 label: {why}");
    }
    // The Job's pods are named NAME-INDEX-XXXXX; the ConfigMap NAME-plan.
    if name.len() > 52 {
        bail!(
            "--name {name:?}: {} characters; at most 52, so that the ConfigMap ({name}-plan) and \
             the pods' names (NAME-INDEX-XXXXX) stay within Kubernetes' 63",
            name.len()
        );
    }
    Ok(name)
}

/// The seed every pod is given: the plan's, checked, or one chosen now (and said), so that
/// all pods compute the same schedule.
fn job_seed(in_plan: Option<u64>, ui: &Ui) -> Result<memtrial::kube::render::Seed> {
    use memtrial::kube::render::Seed;
    Ok(match in_plan {
        Some(s) => {
            memtrial::plan::settings::count("seed", s, memtrial::plan::settings::SEED)?;
            Seed::InPlan(s)
        }
        None => {
            let s = rand::random::<u64>() & ((1 << 53) - 1);
            ui.note(&format!(
                "note: the plan sets no seed: every pod gets --seed {s}, so that all compute the same schedule"
            ));
            Seed::Chosen(s)
        }
    })
}

/// `memtrial kube collect NAME`: every index's record into --out, then the hand-over to
/// the import. Exit 0 when every index was collected and imported, 1 otherwise (each index
/// not collected, and why, is said).
fn collect_cmd(db: &Path, args: &crate::cli::CollectArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::kube::collect::{collect, IndexOutcome, KubectlProgram};
    let crate::cli::CollectArgs {
        name,
        namespace,
        kubectl,
        out,
        wait,
    } = args;
    if let Err(why) = memtrial::kube::dns1123_label(name) {
        bail!("NAME {name:?}: not a Job's name: {why}");
    }
    if let Some(ns) = namespace {
        if let Err(why) = memtrial::kube::dns1123_label(ns) {
            bail!("--namespace {ns:?}: not a namespace's name: {why}");
        }
    }
    let out = out
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(format!("{name}-records")));
    let k = KubectlProgram {
        program: kubectl.clone(),
        namespace: namespace.clone(),
    };
    if let Some(w) = wait {
        let limit = memtrial::plan::settings::duration(
            "--wait",
            w,
            memtrial::plan::settings::KUBE_COLLECT_WAIT,
        )?;
        wait_for_job(&k, name, limit, ui)?;
    }
    let c = collect(&k, name, &out)?;
    let mut missing = Vec::new();
    for (index, o) in &c.indexes {
        let line = index_line(*index, o);
        if !matches!(o, IndexOutcome::Collected { .. }) {
            missing.push(*index);
        }
        ui.note(&line);
    }
    let files = c.files();
    ui.note(&format!(
        "collected {} of {} record(s) of Job {name} into {}",
        files.len(),
        c.completions,
        out.display()
    ));
    if !missing.is_empty() {
        ui.note(&format!(
            "not collected: index(es) {} (see `kubectl describe job {name}` and `kubectl logs` of their pods; run collect again when they are done)",
            missing
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let imported = hand_over(db, &files, ui)?;
    Ok(if c.complete() && imported {
        Outcome::Ok
    } else {
        Outcome::RunsFailed
    })
}

/// One line of `collect`'s report: what became of an index of the Job.
fn index_line(index: u32, o: &memtrial::kube::collect::IndexOutcome) -> String {
    use memtrial::kube::collect::IndexOutcome;
    use memtrial::report::escape::terminal as one_line;
    match o {
        IndexOutcome::Collected {
            pod,
            file,
            run_status,
        } => format!(
            "index {index}: {} (pod {pod}) → {}",
            one_line(run_status),
            file.display()
        ),
        IndexOutcome::NoRecord { pod, why } => {
            format!("index {index}: NO RECORD: pod {pod} succeeded but {why}")
        }
        IndexOutcome::Refused { pod, why } => format!(
            "index {index}: REFUSED: the record of pod {}: {}",
            one_line(pod),
            one_line(why)
        ),
        IndexOutcome::LogFailed { pod, said } => format!(
            "index {index}: NO LOG: kubectl could not give the log of pod {pod}: {}",
            one_line(said)
        ),
        IndexOutcome::Failed { pods } => format!(
            "index {index}: FAILED: {}",
            pods.iter()
                .map(|(p, r)| format!(
                    "{} ({})",
                    one_line(p),
                    one_line(r.as_deref().unwrap_or("no reason given"))
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        IndexOutcome::Unfinished {
            pod,
            phase,
            waiting,
        } => match waiting {
            Some(w) => format!(
                "index {index}: {}: pod {} is {phase:?}: {}",
                if w.stuck {
                    "CANNOT START"
                } else {
                    "NOT FINISHED"
                },
                one_line(pod),
                one_line(&w.said)
            ),
            None => format!(
                "index {index}: NOT FINISHED: pod {} is {phase:?}",
                one_line(pod)
            ),
        },
        IndexOutcome::Missing => format!("index {index}: MISSING: no pod of this index"),
    }
}

/// Waits up to `limit` for the Job's indexes to finish, saying where they stand whenever
/// that changes; a pod that cannot start, or a Job the controller gave up on, ends the
/// wait at once (collect then names them).
fn wait_for_job(
    k: &memtrial::kube::collect::KubectlProgram,
    name: &str,
    limit: std::time::Duration,
    ui: &Ui,
) -> Result<()> {
    use memtrial::report::escape::terminal as one_line;
    let until = std::time::Instant::now() + limit;
    let stop = stop_flag()?;
    let mut said = String::new();
    loop {
        let state = memtrial::kube::collect::job_state(k, name)?;
        let p = state.progress();
        let now = format!(
            "Job {name}: {} of {} succeeded, {} failed, {} running, {} pending, {} not started{}",
            p.succeeded,
            state.completions,
            p.failed,
            p.running,
            p.pending,
            p.missing,
            if p.stuck.is_empty() {
                String::new()
            } else {
                format!(", {} cannot start", p.stuck.len())
            }
        );
        if now != said {
            ui.note(&now);
            said = now;
        }
        if let Some(why) = &state.failed {
            ui.note(&format!(
                "the Job controller gave up on Job {name}: {}",
                one_line(why)
            ));
            return Ok(());
        }
        if let Some((index, pod, why)) = p.stuck.first() {
            ui.note(&format!(
                "stopped waiting: index {index}'s pod {} cannot start: {} (fix the Job and apply it again)",
                one_line(pod),
                one_line(why)
            ));
            return Ok(());
        }
        if p.settled() {
            return Ok(());
        }
        if std::time::Instant::now() >= until {
            ui.note(&format!(
                "stopped waiting after {} (--wait): collecting what finished",
                humantime::format_duration(limit)
            ));
            return Ok(());
        }
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            bail!("interrupted while waiting for Job {name}");
        }
        std::thread::sleep(
            std::time::Duration::from_secs(2).min(until - std::time::Instant::now()),
        );
    }
}

/// The collected records go to the import (schema check, joining by plan fingerprint, each
/// run once), each on its own: one the import refuses is named with why, and the others
/// are imported. What is collected now is imported now; a later collect adds the rest.
/// True when every file was imported.
fn hand_over(db: &Path, files: &[std::path::PathBuf], ui: &Ui) -> Result<bool> {
    let mut all = true;
    for f in files {
        if let Err(e) = import_files(db, std::slice::from_ref(f), ui) {
            all = false;
            ui.note(&format!(
                "NOT IMPORTED: {}: {}",
                f.display(),
                memtrial::report::escape::terminal(&format!("{e:#}"))
            ));
        }
    }
    Ok(all)
}
