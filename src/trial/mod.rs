//! One run of one variant: prepare → launch through a backend → sample every probe on
//! one clock while the driver drives → stop the whole tree → collect → decide the status.
//! Orchestration only; the parts live in [`crate::backend`], [`crate::probe`],
//! [`drive`] and [`status`].

pub mod clock;
pub mod drive;
mod isolation;
pub mod logcap;
pub mod server;
pub mod status;
pub(crate) mod thrash;
pub mod worker;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::backend::{Backend, BackendError, Exit, Launch, LaunchSpec, RunHandle, Waited};
use crate::plan::{Plan, ProbeKind, Variant};
use crate::probe::{
    AllocatorProbe, Probe, ProbeSet, PssProbe, RunEnd, TickKind, TreeProbe, Verifier,
};
use crate::record::{RunRecord, RunStatus};
use drive::Driver;
use status::{EndedBy, Facts};

pub use crate::backend::local::Isolation;
pub use isolation::choose_isolation;

/// Errors that stop memtrial itself (not the workload: a workload's failure is a record).
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    #[error("cannot create {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("cannot find a free port on 127.0.0.1 for the server: {source}")]
    Port { source: std::io::Error },
    #[error("cannot start the load driver's thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot start the --driver command with /bin/sh: {0}")]
    Driver(std::io::Error),
    #[error("cannot start the --before command with /bin/sh: {0}")]
    Before(std::io::Error),
}

/// The extensions of a run's logs beside its `log_stem`: the workload's, its `--before`
/// hook's and its `--driver`'s output.
const LOGS: [&str; 6] = [
    "stdout",
    "stderr",
    "before.stdout",
    "before.stderr",
    "driver.stdout",
    "driver.stderr",
];

/// What one trial is.
pub(crate) struct TrialSpec<'a> {
    pub plan: &'a Plan,
    pub variant: &'a Variant,
    /// Position in the schedule, part of the cgroup's name.
    pub seq: u32,
    pub block: u32,
    pub warmup: bool,
    /// Files `<log_stem>.stdout` and `<log_stem>.stderr` receive the workload's output.
    pub log_stem: PathBuf,
    /// The requests of a server trial, read once per experiment.
    pub load_source: Option<&'a crate::load::Source>,
}

/// A live view for progress displays.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    pub elapsed: Duration,
    pub rss_bytes: u64,
}

/// The probes every run gets: PSS, the regions and the variant's verification (the tree sampler and
/// the backend's own probes are added by the trial), then the plan's probes inside the
/// workload, which report into `<log_stem>.probe/` — the allocator probe only when
/// `allocator` (see [`ended_before_allocator_sample`]).
pub(crate) fn default_probes(
    plan: &Plan,
    variant: &Variant,
    log_stem: &Path,
    allocator: bool,
) -> Vec<Box<dyn Probe>> {
    let mut probes: Vec<Box<dyn Probe>> = vec![
        Box::new(PssProbe::new()),
        Box::new(crate::probe::RegionsProbe::new()),
        Box::new(Verifier::for_run(plan, variant)),
    ];
    let dir = log_stem.with_extension("probe");
    for kind in &plan.probes.kinds {
        match kind {
            ProbeKind::Allocator if !allocator => {}
            ProbeKind::Allocator => probes.push(Box::new(AllocatorProbe::new(
                dir.join("allocator"),
                plan.probes.interval_ms,
            ))),
            ProbeKind::Ruby => probes.push(Box::new(crate::probe::RubyProbe::new(
                dir.join("ruby"),
                plan.probes.interval_ms,
            ))),
            ProbeKind::Jvm => probes.push(Box::new(crate::probe::JvmProbe::new(
                plan.probes.interval_ms,
            ))),
            ProbeKind::Require => probes.push(Box::new(crate::probe::RequireProbe::new(
                dir.join("require"),
            ))),
            ProbeKind::Cpu => probes.push(Box::new(crate::probe::CpuProbe::new())),
        }
    }
    // A trimming variant's trims, after the verifier: their account completes its verdict.
    if let Some(ms) = variant.knobs.trim_ms {
        probes.push(Box::new(crate::probe::TrimProbe::new(dir.join("trim"), ms)));
    }
    probes
}

/// Why the variant's next run should go without the allocator probe, when `record` (run
/// `index` of the schedule) ended before the probe's first sample in a process was due
/// ([`crate::probe::allocator::FIRST_SAMPLE_MS`] after it started). In such a run the probe
/// gives nothing, while its sampling thread is not free: `pthread_create` makes pages
/// resident that a small single-threaded program never touches (a window of libc's
/// read-only data, the thread's stack and TCB; about 90 KiB, a tenth of `/bin/true`'s
/// peak). So the variant's next run goes without it, and the one after that again as long
/// as runs stay this short; a run that lasts long enough brings it back.
pub(crate) fn ended_before_allocator_sample(
    plan: &Plan,
    record: &RunRecord,
    index: usize,
) -> Option<String> {
    let first_ms = crate::probe::allocator::FIRST_SAMPLE_MS;
    let ms = record.wall_seconds * 1000.0;
    (plan.probes.kinds.contains(&ProbeKind::Allocator)
        && record.inside.allocator.is_none()
        && ms < first_ms as f64)
        .then(|| {
            format!(
                "left out of this run: the variant's previous run (run {index}) ended in {ms:.0} ms, \
                 before the probe's first sample ({first_ms} ms after a process starts): in \
                 runs that short it adds only its thread's own pages to the peak"
            )
        })
}

/// Runs one trial. `stop` is set by a signal handler when memtrial is interrupted.
pub(crate) fn run_trial(
    spec: &TrialSpec,
    backend: &dyn Backend,
    probes: Vec<Box<dyn Probe>>,
    stop: &AtomicBool,
    on_sample: &mut dyn FnMut(Live),
) -> Result<RunRecord, TrialError> {
    let plan = spec.plan;
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let mut record = RunRecord::skeleton(&spec.variant.name, spec.block, spec.warmup, started_at);
    let mut probes = probes;
    let (launch, port) = prepare(spec, &mut record, &mut probes)?;
    // Each of the run's logs keeps its first and last halves of --log-limit (on disk while
    // it runs, and rewritten with what was left out said between them when it ends).
    let logs = logcap::Capped::watch(
        LOGS.iter()
            .map(|ext| spec.log_stem.with_extension(ext))
            .collect(),
    );
    // The processes memtrial starts for this run (hook, driver, jcmd): never the workload's.
    let helpers = crate::probe::Helpers::default();
    if let Some(before) = plan.worker.as_ref().and_then(|w| w.before.as_ref()) {
        if let Some(end) = run_before(spec, before, port, stop, backend, &helpers)? {
            (record.status, record.message) = end;
            return Ok(record);
        }
    }
    let mut run = match backend.launch(launch)? {
        Launch::Started(run) => run,
        Launch::NotStarted(why) => {
            record.message = Some(why);
            return Ok(record);
        }
    };
    let t0 = run.started();
    let mut probes = ProbeSet::new(
        TreeProbe::new(run.membership())
            .hiding(run.spawner())
            .with_helpers(helpers.clone()),
        probes.into_iter().chain(run.probes()).collect(),
    );
    let mut env = helper_env(spec, port);
    env.push(("MEMTRIAL_PID".into(), run.pid().to_string()));
    let driver = Driver::start(
        plan,
        drive::DriverStart {
            port,
            source: spec.load_source,
            env,
            log_stem: &spec.log_stem,
            backend,
            group_name: crate::linux::cgroup::helper_group_name(spec.seq, "driver"),
            helpers,
        },
        t0,
    )?;
    let mut late = clock::Lateness::since(t0);
    let (exit, ended_by) = watch(
        run.as_mut(),
        &mut probes,
        &driver,
        plan,
        stop,
        &mut late,
        on_sample,
    );
    driver.root_gone();
    clear_leftovers(run.as_mut(), &mut probes, plan.grace());
    let end = RunEnd {
        maxrss_bytes: exit.map(|e| e.usage.maxrss_bytes),
        t_seconds: t0.elapsed().as_secs_f64(),
    };
    probes.finish(&end, &mut record);
    explain_refused_preload(spec.variant, &mut record);
    // OOM kills counted outside a cgroup of the run's own (a container's), read before
    // the handle goes.
    let oom_outside = run.oom_kills();
    // The run's cgroup goes with the handle, after the probes read it.
    drop(run);
    drop(logs);
    record.wall_seconds = exit.map_or(t0.elapsed(), |e| e.at - t0).as_secs_f64();
    if let Some(e) = exit {
        record_exit(&mut record, &e);
    }
    let exit_kind = exit.map(|e| e.kind);
    let done = driver.finish(ended_by, exit_kind, &record.samples);
    record.load = done.load;
    record.driver = done.driver;
    let facts = Facts {
        ended_by,
        exit: exit_kind,
        oom_kills: 0, // the larger of the two counts, in settle()
        verification: record.verification,
        driver: done.outcome,
    };
    let disturbed = match (late.note(), done.disturbed) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    settle(&mut record, facts, oom_outside, disturbed);
    Ok(record)
}

/// The root's exit into the record: its code or signal, CPU time and page faults.
fn record_exit(record: &mut RunRecord, e: &Exit) {
    (record.exit_code, record.signal) = match e.kind {
        crate::backend::ExitKind::Code(c) => (Some(c), None),
        crate::backend::ExitKind::Signal(s) => (None, Some(s)),
    };
    record.cpu_user_seconds = e.usage.user_seconds;
    record.cpu_sys_seconds = e.usage.sys_seconds;
    record.minor_faults = e.usage.minor_faults;
    record.major_faults = e.usage.major_faults;
}

/// The run's status and message from `facts` and the OOM kills counted in the run's
/// cgroup or, larger, `oom_outside` (a container's count, said in the message), with the
/// sampler's lateness `late` added.
fn settle(
    record: &mut RunRecord,
    mut facts: Facts,
    oom_outside: Option<(u64, String)>,
    late: Option<String>,
) {
    let in_cgroup = record.cgroup.as_ref().map_or(0, |c| c.oom_kills);
    facts.oom_kills = in_cgroup.max(oom_outside.as_ref().map_or(0, |(n, _)| *n));
    let (status, mut message) = status::decide(&facts);
    if let (RunStatus::OomKilled, Some((n, counted_by))) = (status, &oom_outside) {
        if *n > in_cgroup {
            message = message.map(|m| format!("{m} (counted by {counted_by})"));
        }
    }
    record.status = status;
    record.message = match (message, late) {
        (Some(m), Some(n)) => Some(format!("{m}; {n}")),
        (m, n) => m.or(n),
    };
}

/// The environment naming the run for hooks and drivers, on top of memtrial's own.
fn helper_env(spec: &TrialSpec, port: Option<u16>) -> Vec<(String, String)> {
    let mut env = vec![
        ("MEMTRIAL_VARIANT".to_string(), spec.variant.name.clone()),
        ("MEMTRIAL_RUN".to_string(), spec.seq.to_string()),
    ];
    if let Some(p) = port {
        env.push(("MEMTRIAL_PORT".into(), p.to_string()));
    }
    env
}

/// Runs `--before` to its end. `Some` (status, message) when the run ends here: the hook
/// failed, timed out, or memtrial was interrupted meanwhile.
fn run_before(
    spec: &TrialSpec,
    command: &str,
    port: Option<u16>,
    stop: &AtomicBool,
    backend: &dyn Backend,
    helpers: &crate::probe::Helpers,
) -> Result<Option<(crate::record::RunStatus, Option<String>)>, TrialError> {
    use crate::backend::helper;
    use crate::record::RunStatus;
    let plan = spec.plan;
    let timeout = Duration::from_millis(
        plan.worker
            .as_ref()
            .map_or(crate::plan::DEFAULT_BEFORE_TIMEOUT_MS, |w| {
                w.before_timeout_ms
            }),
    );
    let command = match port {
        Some(p) => crate::plan::substitute_quoted(command, p),
        None => command.to_string(),
    };
    let out_path = spec.log_stem.with_extension("before.stdout");
    let err_path = spec.log_stem.with_extension("before.stderr");
    let open = |p: &Path| {
        File::create(p).map_err(|source| TrialError::Log {
            path: p.to_path_buf(),
            source,
        })
    };
    let hook = helper::Helper::start(
        &command,
        &helper_env(spec, port),
        &plan.workdir,
        Some(open(&out_path)?),
        open(&err_path)?,
        backend.helper_cgroup(&crate::linux::cgroup::helper_group_name(spec.seq, "before"))?,
        helpers,
    )
    .map_err(TrialError::Before)?;
    let (exit, _took) = helper::run_to_end(hook, timeout, &|| stop.load(Ordering::SeqCst));
    if stop.load(Ordering::SeqCst) {
        return Ok(Some((RunStatus::Interrupted, None)));
    }
    let said = || {
        let h = helper::head(&err_path, 2048);
        if h.is_empty() {
            "nothing on its stderr".to_string()
        } else {
            h
        }
    };
    Ok(match exit {
        Some(s) if s.success() => None,
        Some(s) => Some((
            RunStatus::Failed,
            Some(format!(
                "--before failed ({}): {}",
                helper::exit_words(s),
                said()
            )),
        )),
        None => Some((
            RunStatus::Failed,
            Some(format!(
                "--before did not finish within {} and was stopped: {}",
                humantime::format_duration(timeout),
                said()
            )),
        )),
    })
}

/// A preload the loader refused is explained by its own words from the run's stderr.
fn explain_refused_preload(variant: &Variant, record: &mut RunRecord) {
    let Some(pre) = &variant.preload else { return };
    let stderr = crate::probe::verify::head_of(&record.stderr_path, 64 * 1024);
    let pre = pre.display().to_string();
    if let Some(d) =
        crate::probe::verify::explain_not_mapped(&record.verification_detail, &stderr, &pre)
    {
        record.verification_detail = d;
    }
}

/// The run's log files and the command to launch, with a server's `{port}` filled in.
fn prepare(
    spec: &TrialSpec,
    record: &mut RunRecord,
    probes: &mut [Box<dyn Probe>],
) -> Result<(LaunchSpec, Option<u16>), TrialError> {
    let plan = spec.plan;
    record.stdout_path = spec.log_stem.with_extension("stdout");
    record.stderr_path = spec.log_stem.with_extension("stderr");
    let open = |p: &Path| {
        File::create(p).map_err(|source| TrialError::Log {
            path: p.to_path_buf(),
            source,
        })
    };
    // A server trial gets a free port, put wherever the plan says `{port}`; so does any
    // run whose command, hook or driver asks for one.
    let wants_port = plan.server.is_some()
        || plan.worker.as_ref().is_some_and(|w| w.wants_port())
        || plan
            .command
            .iter()
            .any(|a| a.contains(crate::plan::PORT_PLACEHOLDER));
    let port = match wants_port {
        true => Some(server::free_port().map_err(|source| TrialError::Port { source })?),
        false => None,
    };
    let sub = |text: &str| match port {
        Some(p) => crate::plan::substitute(text, p),
        None => text.to_string(),
    };
    let inherited = std::env::var("LD_PRELOAD").ok();
    let mut env: Vec<(String, String)> = spec
        .variant
        .workload_env(inherited.as_deref())
        .into_iter()
        .map(|(k, v)| (k, sub(&v)))
        .collect();
    for p in probes.iter_mut() {
        p.instrument(&mut env);
    }
    for p in probes.iter_mut() {
        p.launching(&env);
    }
    // The variant's own program or command, if it has one; argv[0] as given.
    let (program, argv) = plan.launch_argv(spec.variant, &sub);
    let launch = LaunchSpec {
        program,
        argv,
        env,
        workdir: plan.workdir.clone(),
        stdout: open(&record.stdout_path)?,
        stderr: open(&record.stderr_path)?,
        limits: plan.limits.clone(),
        name: crate::linux::cgroup::run_group_name(spec.seq),
        at_gate: at_gate(probes),
        thp_off: spec.variant.knobs.thp_off,
    };
    Ok((launch, port))
}

/// What the probes attach to the spawner before it forks the workload, all in one.
fn at_gate(probes: &mut [Box<dyn Probe>]) -> Option<crate::backend::AtGate> {
    let each: Vec<Box<dyn FnOnce(i32)>> = probes.iter_mut().filter_map(|p| p.at_gate()).collect();
    (!each.is_empty()).then(|| {
        crate::backend::AtGate(Box::new(move |pid| {
            for f in each {
                f(pid);
            }
        }))
    })
}

/// The run's clock: samples densely at the start and backing off to the plan's interval
/// ([`sample_gap`]), with early looks at 1, 3, 10 and 30 ms so that short-lived processes
/// are verified, until the root exits. Ends the run
/// itself on an interrupt, when the driver is done, or at the timeout.
fn watch(
    run: &mut dyn RunHandle,
    probes: &mut ProbeSet,
    driver: &Driver,
    plan: &Plan,
    stop: &AtomicBool,
    late: &mut clock::Lateness,
    on_sample: &mut dyn FnMut(Live),
) -> (Option<Exit>, Option<EndedBy>) {
    let t0 = run.started();
    let early = [1u64, 3, 10, 30].map(Duration::from_millis);
    let (mut early_i, mut next_sample) = (0, Duration::ZERO);
    let mut gap = Duration::ZERO;
    let mut ended_by = None;
    let thrash = run
        .memory_group()
        .and_then(|(dir, v)| thrash::ThrashWatch::new(&dir, v))
        .map(|w| thrash::ThrashGuard::start(w, t0, run.pid()));
    let stuck = || {
        thrash
            .as_ref()
            .and_then(|g| g.stuck())
            .map(EndedBy::Thrashing)
    };
    loop {
        late.look(t0);
        let now = t0.elapsed();
        if now >= next_sample {
            let rss_bytes = probes.tick(now, TickKind::Sample).unwrap_or(0);
            on_sample(Live {
                elapsed: now,
                rss_bytes,
            });
            if let Some(g) = &thrash {
                g.members(probes.members().iter().map(|m| m.pid));
            }
            while next_sample <= now {
                gap = sample_gap(gap, now, plan.interval());
                next_sample += gap;
            }
        } else if early_i < early.len() && now >= early[early_i] {
            probes.tick(now, TickKind::Look);
            early_i += 1;
        }
        if ended_by.is_none() {
            ended_by = if stop.load(Ordering::SeqCst) {
                Some(EndedBy::Interrupt)
            } else if driver.finished() {
                Some(EndedBy::Driver)
            } else if let Some(t) = stuck() {
                Some(t)
            } else {
                match plan.timeout().filter(|t| now >= *t) {
                    // The workload ended while memtrial was late (stopped or starved): its
                    // own end, not memtrial's lateness, says whether it outran the timeout.
                    Some(t) if run.root_ended() => {
                        if let Waited::Exited(e) = run.wait_exit(Duration::from_secs(5)) {
                            let over = e.at.saturating_duration_since(t0) >= t;
                            if over {
                                driver.halt();
                            }
                            return (Some(e), over.then_some(EndedBy::Timeout(t)));
                        }
                        Some(EndedBy::Timeout(t))
                    }
                    t => t.map(EndedBy::Timeout),
                }
            };
            if ended_by.is_some() {
                driver.halt();
                return (stop_tree(run, probes, plan.grace(), late), ended_by);
            }
        }
        let mut wake = next_sample;
        if early_i < early.len() {
            wake = wake.min(early[early_i]);
        }
        if let Some(t) = plan.timeout() {
            wake = wake.min(t);
        }
        let wait = wake
            .saturating_sub(t0.elapsed())
            .min(if driver.may_finish() {
                POLL_DRIVEN
            } else {
                POLL_BATCH
            });
        late.waiting(t0, wait);
        let waited = run.wait_exit(wait);
        late.look(t0);
        match waited {
            // The guard's kill, when it found the run stuck, is the end it reports.
            Waited::Exited(e) => return (Some(e), ended_by.or_else(stuck)),
            Waited::Running => {}
            Waited::Lost => return (None, ended_by),
        }
    }
}

/// Between samples the clock sleeps until the next one is due (the root's exit wakes it at
/// once), but at most this long while a driver may end the run (its end is noticed within
/// it)…
const POLL_DRIVEN: Duration = Duration::from_millis(50);
/// …or this long for a batch command, whose run only an interrupt or the timeout ends
/// otherwise (the timeout is a due time of its own; an interrupt is noticed within this).
/// Each wake-up of memtrial costs it CPU: at the default interval this halves them.
const POLL_BATCH: Duration = Duration::from_millis(250);

/// Samples are [`DENSE_GAP`] apart for the run's first [`DENSE_FOR`] (a short run gets its
/// shape and its peak without flags), then each gap is half again as long as the last, up
/// to the plan's interval (never above it: a denser plan stays as dense).
pub(crate) const DENSE_GAP: Duration = Duration::from_millis(10);
/// See [`DENSE_GAP`].
pub(crate) const DENSE_FOR: Duration = Duration::from_secs(1);

/// The gap after `last` at `elapsed` into the run, for a plan interval of `interval`.
pub(crate) fn sample_gap(last: Duration, elapsed: Duration, interval: Duration) -> Duration {
    if elapsed < DENSE_FOR || last.is_zero() {
        return DENSE_GAP.min(interval);
    }
    (last + last / 2).min(interval)
}

fn pids(members: &[crate::probe::Member]) -> Vec<i32> {
    members.iter().map(|m| m.pid).collect()
}

/// SIGTERM to the whole tree, a grace period, then SIGKILL; waits for the root's exit.
fn stop_tree(
    run: &mut dyn RunHandle,
    probes: &mut ProbeSet,
    grace: Duration,
    late: &mut clock::Lateness,
) -> Option<Exit> {
    let t0 = run.started();
    for (sig, wait) in [
        (libc::SIGTERM, grace),
        (libc::SIGKILL, Duration::from_secs(5)),
    ] {
        let targets = pids(probes.refresh());
        run.signal(sig, &targets);
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            // memtrial late here makes the run longer than its stop meant.
            late.waiting(t0, Duration::from_millis(20));
            let waited = run.wait_exit(Duration::from_millis(20));
            late.look(t0);
            match waited {
                Waited::Exited(e) => return Some(e),
                Waited::Lost => return None,
                Waited::Running => {}
            }
        }
    }
    None
}

/// The root has exited: whatever it left behind is part of the run and goes too
/// (SIGTERM, the grace period, SIGKILL, then the backend's own kill).
fn clear_leftovers(run: &mut dyn RunHandle, probes: &mut ProbeSet, grace: Duration) {
    probes.tick(run.started().elapsed(), TickKind::Look);
    if !probes.members().is_empty() {
        let targets = pids(probes.members());
        run.signal(libc::SIGTERM, &targets);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            run.reap(&pids(probes.members()));
            if probes.refresh().iter().all(|m| m.state == 'Z') {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let targets = pids(probes.refresh());
        run.signal(libc::SIGKILL, &targets);
        run.kill_rest(Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            run.reap(&pids(probes.members()));
            if probes.refresh().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Anything still in the group (a process that escaped the signals) goes now.
    run.kill_rest(Duration::from_secs(2));
}

#[cfg(test)]
mod tests;
