//! One run of one variant, end to end: launch → verify → sample → wait → stop → [`RunRecord`].

pub mod server;
pub mod verify;

use crate::record::{LoadFigures, PeakSource, RunRecord, RunStatus, TreeSample, Verification};

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::linux::cgroup::{self, CgroupError, Hierarchy, RunCgroup};
use crate::plan::{Plan, Variant};
use crate::probe::{Membership, TreeProbe};
use verify::Verifier;

/// Errors that stop memtrial itself (not the workload: a workload's failure is a record).
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    #[error("cannot create {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot set up the run's cgroup: {0}")]
    Cgroup(#[from] CgroupError),
    #[error("cannot find a free port on 127.0.0.1 for the server: {source}")]
    Port { source: std::io::Error },
}

/// Where runs are isolated.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// Each run in a fresh cgroup of this hierarchy.
    Cgroup(Hierarchy),
    /// No cgroup could be had: the reason, said to the user.
    None { reason: String },
}

/// What one trial is.
pub struct TrialSpec<'a> {
    pub plan: &'a Plan,
    pub variant: &'a Variant,
    pub isolation: &'a Isolation,
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

/// Exit information from `wait4`.
struct Exit {
    status: i32,
    rusage: libc::rusage,
    at: Instant,
}

fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

fn tv_seconds(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

/// Runs one trial. `stop` is set by a signal handler when memtrial is interrupted.
pub fn run_trial(
    spec: &TrialSpec,
    stop: &AtomicBool,
    on_sample: &mut dyn FnMut(Live),
) -> Result<RunRecord, TrialError> {
    become_subreaper();
    let plan = spec.plan;
    let stdout_path = spec.log_stem.with_extension("stdout");
    let stderr_path = spec.log_stem.with_extension("stderr");
    let open = |p: &Path| {
        File::create(p).map_err(|source| TrialError::Log {
            path: p.to_path_buf(),
            source,
        })
    };
    let out = open(&stdout_path)?;
    let err = open(&stderr_path)?;
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();

    // A server trial gets a free port, put wherever the plan says `{port}`.
    let port = match &plan.server {
        Some(_) => Some(server::free_port().map_err(|source| TrialError::Port { source })?),
        None => None,
    };
    let sub = |text: &str| match port {
        Some(p) => crate::plan::substitute(text, p),
        None => text.to_string(),
    };
    let mut cmd = Command::new(&plan.program);
    cmd.arg0(&plan.command[0])
        .args(plan.command[1..].iter().map(|a| sub(a)))
        .current_dir(&plan.workdir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let inherited = std::env::var("LD_PRELOAD").ok();
    for (k, v) in spec.variant.workload_env(inherited.as_deref()) {
        cmd.env(k, sub(&v));
    }

    let mut record = RunRecord {
        variant: spec.variant.name.clone(),
        block: spec.block,
        warmup: spec.warmup,
        started_at,
        status: RunStatus::Failed,
        exit_code: None,
        signal: None,
        wall_seconds: 0.0,
        cpu_user_seconds: 0.0,
        cpu_sys_seconds: 0.0,
        peak_rss_bytes: 0,
        peak_rss_source: PeakSource::Wait4Maxrss,
        mean_rss_bytes: 0,
        final_rss_bytes: 0,
        peak_pss_bytes: None,
        peak_vsz_bytes: 0,
        threads_peak: 0,
        minor_faults: 0,
        major_faults: 0,
        processes_seen: 0,
        allocator_detected: "unknown".into(),
        verification: Verification::Unverified,
        verification_detail: String::new(),
        message: None,
        stdout_path: stdout_path.clone(),
        stderr_path: stderr_path.clone(),
        cgroup: None,
        load: None,
        samples: Vec::new(),
    };

    let mut cgroup = match spec.isolation {
        Isolation::Cgroup(h) => {
            let name = format!("{}-{}", std::process::id(), spec.seq);
            let cg = RunCgroup::create(h, &name, &plan.limits)?;
            let fds = cg.open_procs_files()?;
            // SAFETY: the hook only calls write(2) on descriptors opened beforehand.
            unsafe {
                cmd.pre_exec(move || cgroup::join_self(&fds));
            }
            Some(cg)
        }
        Isolation::None { .. } => None,
    };
    let membership = match &cgroup {
        Some(cg) => Membership::Cgroup(cg.main_dir().to_path_buf()),
        None => Membership::DescendantsOf(std::process::id() as i32),
    };

    let t0 = Instant::now();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            record.message = Some(format!("could not start {}: {e}", plan.program.display()));
            return Ok(record);
        }
    };
    let pid = child.id() as i32;
    // The child is reaped by wait4 below, never by std.
    drop(child);

    let (tx, rx) = mpsc::channel::<Exit>();
    let waiter = std::thread::Builder::new()
        .name("memtrial-wait4".into())
        .spawn(move || loop {
            let mut status = 0;
            // SAFETY: rusage is plain data; wait4 fills it.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointers to locals.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
            if r == pid {
                let _ = tx.send(Exit {
                    status,
                    rusage: ru,
                    at: Instant::now(),
                });
                return;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return;
            }
        })
        .expect("spawning a thread");

    // The server's driver: readiness, load, cool-down, on its own thread.
    let halt = Arc::new(AtomicBool::new(false));
    let root_gone = Arc::new(AtomicBool::new(false));
    let driver = match (&plan.server, port, spec.load_source) {
        (Some(sp), Some(port), Some(source)) => {
            let (sp, source) = (sp.clone(), source.clone());
            let (halt, root_gone) = (Arc::clone(&halt), Arc::clone(&root_gone));
            Some(
                std::thread::Builder::new()
                    .name("memtrial-driver".into())
                    .spawn(move || drive(&sp, port, source, t0, &halt, &root_gone))
                    .expect("spawning a thread"),
            )
        }
        _ => None,
    };

    let mut probe = TreeProbe::new(membership);
    let mut verifier = Verifier::new(spec.variant);
    let interval = plan.interval();
    // Early checks catch short-lived processes once the loader has mapped the preload.
    let early = [1u64, 3, 10, 30].map(Duration::from_millis);
    let mut early_i = 0;
    let mut next_sample = Duration::ZERO;
    let mut exit: Option<Exit> = None;
    let mut ended_by: Option<RunStatus> = None;
    let mut seen = std::collections::HashSet::new();

    loop {
        let now = t0.elapsed();
        if now >= next_sample {
            let s = probe.sample(now.as_secs_f64());
            if let Some(cg) = cgroup.as_mut() {
                cg.sample();
            }
            verifier.check(probe.members());
            seen.extend(probe.members().map(|m| (m.pid, m.starttime_ticks)));
            on_sample(Live {
                elapsed: now,
                rss_bytes: s.rss_bytes,
            });
            if s.processes > 0 {
                record.samples.push(s);
            }
            while next_sample <= now {
                next_sample += interval;
            }
        } else if early_i < early.len() && now >= early[early_i] {
            probe.refresh();
            verifier.check(probe.members());
            early_i += 1;
        }
        if ended_by.is_none() {
            if stop.load(Ordering::SeqCst) {
                ended_by = Some(RunStatus::Interrupted);
            } else if driver.as_ref().is_some_and(|d| d.is_finished()) {
                // Load and cool-down are over (or the server never got ready): stop it.
                ended_by = Some(RunStatus::Ok);
            } else if plan.timeout().is_some_and(|t| now >= t) {
                ended_by = Some(RunStatus::Timeout);
                record.message = Some(format!(
                    "timed out after {}",
                    humantime::format_duration(plan.timeout().unwrap_or_default())
                ));
            }
            if ended_by.is_some() {
                halt.store(true, Ordering::SeqCst);
                terminate_tree(&mut probe, pid, plan.grace(), &rx, &mut exit);
            }
        }
        if exit.is_some() {
            break;
        }
        let mut wake = next_sample;
        if early_i < early.len() {
            wake = wake.min(early[early_i]);
        }
        let wait = wake
            .saturating_sub(t0.elapsed())
            .min(Duration::from_millis(50));
        match rx.recv_timeout(wait) {
            Ok(e) => exit = Some(e),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = waiter.join();
    root_gone.store(true, Ordering::SeqCst);
    halt.store(true, Ordering::SeqCst);
    let driven = driver.map(|d| {
        d.join()
            .unwrap_or(Driven::Failed("the load driver panicked".into()))
    });

    // The workload's root exited: anything it left behind is part of the run and goes too.
    probe.refresh();
    verifier.check(probe.members());
    let leftovers = probe.members().count();
    if leftovers > 0 {
        kill_members(&probe, pid, libc::SIGTERM);
        let deadline = Instant::now() + plan.grace();
        while Instant::now() < deadline {
            reap_orphans(&probe, pid);
            probe.refresh();
            if probe.members().all(|m| m.state == 'Z') {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_members(&probe, pid, libc::SIGKILL);
        if let Some(cg) = &cgroup {
            cg.kill_all(Duration::from_secs(2));
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            reap_orphans(&probe, pid);
            probe.refresh();
            if probe.members().next().is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    // Figures.
    if let Some(e) = &exit {
        record.wall_seconds = (e.at - t0).as_secs_f64();
        let ru = &e.rusage;
        record.cpu_user_seconds = tv_seconds(ru.ru_utime);
        record.cpu_sys_seconds = tv_seconds(ru.ru_stime);
        record.minor_faults = ru.ru_minflt as u64;
        record.major_faults = ru.ru_majflt as u64;
        let maxrss = ru.ru_maxrss as u64 * 1024;
        let (peak, source) = choose_peak(maxrss, probe.max_hwm(), &record.samples);
        record.peak_rss_bytes = peak;
        record.peak_rss_source = source;
        let st = e.status;
        if libc::WIFEXITED(st) {
            record.exit_code = Some(libc::WEXITSTATUS(st));
        } else if libc::WIFSIGNALED(st) {
            record.signal = Some(libc::WTERMSIG(st));
        }
    } else {
        record.wall_seconds = t0.elapsed().as_secs_f64();
        record.message = Some("lost track of the workload's exit".into());
    }
    if let Some(cg) = cgroup.as_mut() {
        // Anything still in the group (a process that escaped the signals) goes now.
        cg.kill_all(Duration::from_secs(2));
        record.cgroup = Some(cg.figures());
    }
    drop(cgroup);
    record.processes_seen = seen.len() as u32;
    record.mean_rss_bytes = time_weighted_mean(&record.samples);
    record.final_rss_bytes = record.samples.last().map_or(0, |s| s.rss_bytes);
    record.peak_pss_bytes = record.samples.iter().filter_map(|s| s.pss_bytes).max();
    record.peak_vsz_bytes = record
        .samples
        .iter()
        .map(|s| s.vsz_bytes)
        .max()
        .unwrap_or(0);
    record.threads_peak = record.samples.iter().map(|s| s.threads).max().unwrap_or(0);
    let (verification, detail, allocator) = verifier.finish();
    record.verification = verification;
    record.verification_detail = detail;
    record.allocator_detected = allocator;

    let oom_kills = record.cgroup.as_ref().map_or(0, |c| c.oom_kills);
    // A server run is ended by memtrial once its load and cool-down are done: the
    // driver's outcome, not the server's exit status, says whether it went well.
    let mut server_failure: Option<String> = None;
    let mut server_done = false;
    if let Some(d) = driven {
        let exited = exit_phrase(record.exit_code, record.signal);
        match d {
            Driven::Done(done) => {
                record.load = Some(done.figures(&record.samples));
                server_done = true;
            }
            Driven::NotReady(server::NotReady::TimedOut { last }) => {
                let limit = plan.server.as_ref().map_or(0, |s| s.ready_timeout_ms);
                server_failure = Some(format!(
                    "the server never became ready within {} (last: {last})",
                    humantime::format_duration(Duration::from_millis(limit))
                ));
            }
            Driven::NotReady(server::NotReady::Exited) => {
                server_failure = Some(format!("the server exited before it was ready ({exited})"));
            }
            Driven::NotReady(server::NotReady::Interrupted) => {}
            Driven::Interrupted { at } => {
                if ended_by.is_none() {
                    server_failure = Some(format!(
                        "the server exited during the load, {at:.1} s into the run ({exited})"
                    ));
                }
            }
            Driven::Failed(m) => server_failure = Some(m),
        }
    }
    let ours = ended_by == Some(RunStatus::Ok);
    record.status = match ended_by {
        Some(RunStatus::Interrupted) => RunStatus::Interrupted,
        _ if oom_kills > 0 => {
            record.message = Some(format!(
                "OOM-killed: the kernel killed {oom_kills} process(es) at the memory limit"
            ));
            RunStatus::OomKilled
        }
        Some(RunStatus::Timeout) => RunStatus::Timeout,
        _ if server_failure.is_some() => {
            record.message = server_failure;
            RunStatus::Failed
        }
        _ if verification == Verification::NotEffective => RunStatus::VariantNotEffective,
        _ if server_done || ours => RunStatus::Ok,
        _ if record.exit_code == Some(0) => RunStatus::Ok,
        _ => RunStatus::Failed,
    };
    if record.status == RunStatus::Failed && record.message.is_none() {
        record.message = Some(match (record.exit_code, record.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (_, Some(s)) => format!("killed by signal {s} ({})", signal_name(s)),
            _ => "failed".into(),
        });
    }
    Ok(record)
}

/// The run's peak RSS and where it came from. Kernel high-water marks first:
/// `wait4`'s `ru_maxrss` (final, for the root and the children it reaped), else a
/// `VmHWM` read while a process lived (orphans, or when it is clearly larger — the
/// two differ by the kernel's approximate per-CPU RSS counters, so within 1% the
/// `wait4` figure stands). A tree of several processes at once can exceed any single
/// process's mark; then the largest sampled sum over samples with two or more
/// processes is the figure.
pub fn choose_peak(maxrss: u64, hwm: u64, samples: &[TreeSample]) -> (u64, PeakSource) {
    let (kernel, ksrc) = if hwm > maxrss + maxrss / 100 {
        (hwm, PeakSource::VmHwm)
    } else {
        (maxrss, PeakSource::Wait4Maxrss)
    };
    let tree = samples
        .iter()
        .filter(|s| s.processes >= 2)
        .map(|s| s.rss_bytes)
        .max()
        .unwrap_or(0);
    if tree > kernel {
        (tree, PeakSource::SampledTreeSum)
    } else {
        (kernel, ksrc)
    }
}

fn exit_phrase(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exit code {c}"),
        (_, Some(s)) => format!("killed by {}", signal_name(s)),
        _ => "no exit status".into(),
    }
}

/// What the server's driver saw.
enum Driven {
    NotReady(server::NotReady),
    /// The load was stopped before its end (the server died, or memtrial was stopped).
    Interrupted {
        at: f64,
    },
    Done(Box<DriveDone>),
    Failed(String),
}

struct DriveDone {
    ready_seconds: f64,
    load_start: f64,
    load_end: f64,
    cooldown_end: f64,
    result: crate::load::LoadResult,
}

impl DriveDone {
    fn figures(&self, samples: &[TreeSample]) -> LoadFigures {
        let rss_at = |t: f64| {
            samples
                .iter()
                .rev()
                .find(|s| s.t_seconds <= t)
                .map(|s| s.rss_bytes)
        };
        LoadFigures::new(
            &self.result,
            self.ready_seconds,
            self.load_start,
            self.load_end,
            self.cooldown_end,
            rss_at(self.load_end),
            rss_at(self.cooldown_end),
        )
    }
}

/// Readiness, then the load (warm-up and measured), then the cool-down.
fn drive(
    sp: &crate::plan::ServerPlan,
    port: u16,
    source: crate::load::Source,
    t0: Instant,
    halt: &AtomicBool,
    root_gone: &AtomicBool,
) -> Driven {
    let url = match crate::load::parse_url(&crate::plan::substitute(&sp.url, port)) {
        Ok(u) => u,
        Err(e) => return Driven::Failed(e),
    };
    let addr = match url.socket_addr() {
        Ok(a) => a,
        Err(e) => return Driven::Failed(e),
    };
    let path = sp
        .ready_path
        .clone()
        .unwrap_or_else(|| url.path_and_query.clone());
    let ready = match server::wait_ready(
        addr,
        &url.host_header(),
        &path,
        Duration::from_millis(sp.ready_timeout_ms),
        &mut || !root_gone.load(Ordering::SeqCst),
        &|| halt.load(Ordering::SeqCst),
    ) {
        Ok(r) => r,
        Err(e) => return Driven::NotReady(e),
    };
    let spec = match server::load_spec(sp, port, source) {
        Ok(s) => s,
        Err(e) => return Driven::Failed(e),
    };
    let load_start = t0.elapsed().as_secs_f64();
    let result = match crate::load::run(&spec, t0, halt) {
        Ok(r) => r,
        Err(e) => return Driven::Failed(format!("load generator: {e}")),
    };
    let load_end = t0.elapsed().as_secs_f64();
    if result.stopped_early {
        return Driven::Interrupted { at: load_end };
    }
    let cool = Instant::now() + Duration::from_millis(sp.cooldown_ms);
    while Instant::now() < cool {
        if halt.load(Ordering::SeqCst) {
            return Driven::Interrupted {
                at: t0.elapsed().as_secs_f64(),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Driven::Done(Box::new(DriveDone {
        ready_seconds: ready.after.as_secs_f64(),
        load_start,
        load_end,
        cooldown_end: t0.elapsed().as_secs_f64(),
        result,
    }))
}

/// SIGTERM to the whole tree, a grace period, then SIGKILL; waits for the root's exit.
fn terminate_tree(
    probe: &mut TreeProbe,
    root: i32,
    grace: Duration,
    rx: &mpsc::Receiver<Exit>,
    exit: &mut Option<Exit>,
) {
    probe.refresh();
    kill_members(probe, root, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(e) = rx.recv_timeout(Duration::from_millis(20)) {
            *exit = Some(e);
            return;
        }
    }
    probe.refresh();
    kill_members(probe, root, libc::SIGKILL);
    if let Ok(e) = rx.recv_timeout(Duration::from_secs(5)) {
        *exit = Some(e);
    }
}

fn kill_members(probe: &TreeProbe, root: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions. The process group first, then
    // every known member (daemons leave the group with setsid).
    unsafe {
        libc::kill(-root, sig);
        for m in probe.members() {
            libc::kill(m.pid, sig);
        }
    }
}

/// Reaps exited orphans of the workload that were reparented to memtrial.
fn reap_orphans(probe: &TreeProbe, root: i32) {
    let me = std::process::id() as i32;
    for m in probe.members() {
        if m.pid != root && m.ppid == me {
            let mut st = 0;
            // SAFETY: WNOHANG on a specific child of ours.
            unsafe {
                libc::waitpid(m.pid, &mut st, libc::WNOHANG);
            }
        }
    }
}

/// The time-weighted mean of RSS over the samples (trapezoids).
pub fn time_weighted_mean(samples: &[TreeSample]) -> u64 {
    match samples {
        [] => 0,
        [one] => one.rss_bytes,
        _ => {
            let mut area = 0.0;
            for w in samples.windows(2) {
                let dt = w[1].t_seconds - w[0].t_seconds;
                area += dt * (w[0].rss_bytes as f64 + w[1].rss_bytes as f64) / 2.0;
            }
            let span = samples[samples.len() - 1].t_seconds - samples[0].t_seconds;
            if span > 0.0 {
                (area / span).round() as u64
            } else {
                samples[0].rss_bytes
            }
        }
    }
}

/// A signal's name, e.g. `SIGKILL`.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, rss: u64) -> TreeSample {
        TreeSample {
            t_seconds: t,
            rss_bytes: rss,
            vsz_bytes: 0,
            threads: 1,
            pss_bytes: None,
            processes: 1,
        }
    }

    #[test]
    fn mean_is_time_weighted() {
        assert_eq!(time_weighted_mean(&[]), 0);
        assert_eq!(time_weighted_mean(&[s(0.0, 10)]), 10);
        // 0..1 s at 100, then a jump to 300 held 3 s: trapezoid areas 200 + 900 = 1100 over 4 s.
        let v = [s(0.0, 100), s(1.0, 100), s(1.0, 300), s(4.0, 300)];
        assert_eq!(time_weighted_mean(&v), 250);
    }

    #[test]
    fn peak_prefers_kernel_marks() {
        let single = [s(0.0, 90), s(0.1, 101)];
        assert_eq!(
            choose_peak(100, 100, &single),
            (100, PeakSource::Wait4Maxrss)
        );
        // VmHWM within 1% of ru_maxrss: counter noise, wait4 stands.
        assert_eq!(
            choose_peak(1000, 1005, &single),
            (1000, PeakSource::Wait4Maxrss)
        );
        // An orphan's VmHWM clearly above what wait4 saw.
        assert_eq!(choose_peak(100, 300, &single), (300, PeakSource::VmHwm));
        let mut two = s(0.2, 500);
        two.processes = 2;
        assert_eq!(
            choose_peak(300, 300, &[two]),
            (500, PeakSource::SampledTreeSum)
        );
    }

    #[test]
    fn status_names_round_trip() {
        for st in [
            RunStatus::Ok,
            RunStatus::Failed,
            RunStatus::Timeout,
            RunStatus::VariantNotEffective,
            RunStatus::Interrupted,
        ] {
            assert_eq!(RunStatus::parse(st.as_str()), Some(st));
        }
        assert_eq!(
            PeakSource::parse(PeakSource::SampledTreeSum.as_str()),
            Some(PeakSource::SampledTreeSum)
        );
    }
}
