//! One variant's instance of the workload in a soak: started in its own run cgroup with
//! the soak's limits, on its own port, with the allocator probe in its bounded mode;
//! sampled on the soak's clock; stopped with the rest at the end.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::backend::{Backend, Exit, ExitKind, Launch, LaunchSpec, RunHandle, Waited};
use crate::linux::cgroup::CgroupReader;
use crate::linux::proc;
use crate::load::LoadSpec;
use crate::plan::{substitute, Plan, ProbeKind, Variant};
use crate::probe::{append_env, Membership};
use crate::trial::logcap::Capped;
use crate::trial::server;

/// Where `{variant}` in the command, the URL or a variant's setting becomes the variant's
/// name: each instance's own state (a database, a directory).
pub const VARIANT_PLACEHOLDER: &str = "{variant}";

/// The probe's report file of each process is kept under this size: a soak runs for hours.
const PROBE_MAX_BYTES: u64 = 64 * 1024;

/// The extensions of an instance's logs beside its stem: its own output and its driver's.
const INSTANCE_LOGS: [&str; 4] = ["stdout", "stderr", "driver.stdout", "driver.stderr"];

/// A running instance.
pub(crate) struct Instance {
    pub variant: String,
    /// The load this instance gets (its own address; the soak's source and rate); none
    /// for a worker, which its driver feeds.
    pub load: Option<LoadSpec>,
    /// A worker's driver (`--driver`), one per instance, for the whole soak.
    driver: Option<crate::backend::helper::Helper>,
    /// How the driver ended, once it did.
    pub driver_ended: Option<String>,
    /// The driver's end has been told (as an event).
    pub driver_said: bool,
    run: Box<dyn RunHandle>,
    reader: Option<CgroupReader>,
    procs_file: Option<PathBuf>,
    probe_dir: Option<PathBuf>,
    /// The last PSS read, kept until the next is due.
    pss: Option<f64>,
    /// Why the instance is gone, once it is.
    pub down: Option<String>,
    exit: Option<Exit>,
    /// Its logs' bound, rewritten as head and tail when the instance goes.
    _logs: Capped,
}

/// One sample of an instance's memory.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub rss: Option<f64>,
    pub working_set: Option<f64>,
    pub pss: Option<f64>,
    pub live: Option<f64>,
    pub held: Option<f64>,
}

/// Everything an instance's start needs besides its variant.
pub(crate) struct StartSpec<'a> {
    pub plan: &'a Plan,
    pub backend: &'a dyn Backend,
    /// The run cgroup's name (see `linux::cgroup::run_group_name`).
    pub group: String,
    /// Where the instance's logs and probe reports go.
    pub dir: &'a Path,
    /// Which start of the soak this is (the log files carry it).
    pub segment: u32,
    /// The requests (a server soak).
    pub source: Option<crate::load::Source>,
    pub interrupted: &'a dyn Fn() -> bool,
}

fn fill(text: &str, port: u16, variant: &str) -> String {
    substitute(text, port).replace(VARIANT_PLACEHOLDER, variant)
}

/// Starts `variant`'s instance: its `--before` hook first, then the server or worker;
/// a server must answer HTTP, a worker's process must be running; then its variant is
/// verified and a worker's driver started. Fails saying why.
pub(crate) fn start(spec: &StartSpec, variant: &Variant) -> Result<Instance, String> {
    let plan = spec.plan;
    let port = server::free_port().map_err(|e| format!("no free port on 127.0.0.1: {e}"))?;
    let name = &variant.name;
    let sub = |s: &str| fill(s, port, name);
    let naming = vec![
        ("MEMTRIAL_PORT".to_string(), port.to_string()),
        ("MEMTRIAL_VARIANT".to_string(), name.clone()),
    ];
    let stem = spec.dir.join(format!("{name}.{}", spec.segment));
    let file = |ext: &str| stem.with_extension(format!("{}.{ext}", spec.segment));
    let open = |ext: &str| {
        let p = file(ext);
        File::create(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    if let Some(before) = plan.worker.as_ref().and_then(|w| w.before.as_ref()) {
        run_before(spec, &sub(before), &naming, &open)?;
    }
    // Each keeps its first and last halves of --log-limit, however long the soak.
    let logs = Capped::watch(INSTANCE_LOGS.map(&file).to_vec());
    let (env, probe_dir) = instance_env(plan, variant, &sub, &naming, &file)?;
    let (program, argv) = plan.launch_argv(variant, &sub);
    let launch = LaunchSpec {
        program,
        argv,
        env,
        workdir: plan.workdir.clone(),
        stdout: open("stdout")?,
        stderr: open("stderr")?,
        limits: plan.limits.clone(),
        name: spec.group.clone(),
        at_gate: None,
        thp_off: variant.knobs.thp_off,
    };
    let mut run = match spec.backend.launch(launch).map_err(|e| e.to_string())? {
        Launch::Started(run) => run,
        Launch::NotStarted(why) => return Err(format!("{name}: {why}")),
    };
    let fail = |run: &mut Box<dyn RunHandle>, what: String| {
        stop_run(run.as_mut(), &[], &mut None, Duration::from_secs(2));
        let said = crate::backend::helper::head(&file("stderr"), 1024);
        let said = if said.is_empty() {
            String::new()
        } else {
            format!("; its stderr: {said}")
        };
        Err(format!("the {name} instance {what}{said}"))
    };
    let mut load = None;
    match (&plan.server, &spec.source) {
        (Some(server_plan), Some(source)) => {
            let l = server::load_spec(server_plan, port, source.clone())?;
            let url = crate::load::parse_url(&sub(&server_plan.url))?;
            if let Err(what) = wait_until_ready(&mut run, server_plan, &l, &url, spec.interrupted) {
                return fail(&mut run, what);
            }
            load = Some(l);
        }
        _ => {
            // A worker: running once its command has replaced the spawner (the variant's
            // settings are then in its environment), within a few seconds.
            let until = Instant::now() + WORKER_START;
            while verify(run.pid(), variant, &sub).is_err() && Instant::now() < until {
                if let Waited::Exited(e) = run.wait_exit(Duration::from_millis(50)) {
                    return fail(&mut run, format!("exited at once ({})", exit_words(&e)));
                }
            }
        }
    }
    if let Err(why) = verify(run.pid(), variant, &sub) {
        return fail(&mut run, format!("did not take its variant: {why}"));
    }
    let driver = match start_driver(spec, run.pid(), &naming, &sub, &open) {
        Ok(d) => d,
        Err(what) => return fail(&mut run, what),
    };
    let (reader, procs_file) = match run.membership() {
        Membership::Cgroup(dir) => (run.cgroup_reader(), Some(dir.join("cgroup.procs"))),
        _ => (None, None),
    };
    Ok(Instance {
        variant: name.clone(),
        load,
        driver,
        driver_ended: None,
        driver_said: false,
        run,
        reader,
        procs_file,
        probe_dir,
        pss: None,
        down: None,
        exit: None,
        _logs: logs,
    })
}

/// The worker's `--driver`, started in a cgroup of its own beside the instance's process
/// `pid`; `None` without one. `Err` says what failed.
fn start_driver(
    spec: &StartSpec,
    pid: i32,
    naming: &[(String, String)],
    sub: &dyn Fn(&str) -> String,
    open: &dyn Fn(&str) -> Result<File, String>,
) -> Result<Option<crate::backend::helper::Helper>, String> {
    let Some(d) = spec.plan.worker.as_ref().and_then(|w| w.driver.as_ref()) else {
        return Ok(None);
    };
    let mut env = naming.to_vec();
    env.push(("MEMTRIAL_PID".into(), pid.to_string()));
    let group = spec
        .backend
        .helper_cgroup(&format!("{}-driver", spec.group))
        .map_err(|e| format!("could not make its --driver's cgroup: {e}"))?;
    crate::backend::helper::Helper::start(
        &sub(d),
        &env,
        &spec.plan.workdir,
        Some(open("driver.stdout")?),
        open("driver.stderr")?,
        group,
        &crate::probe::Helpers::default(),
    )
    .map(Some)
    .map_err(|e| format!("could not start its --driver: {e}"))
}

/// Waits until the instance's server answers its ready path; `Err` says what it did
/// instead (exited, did not answer in time, or the soak was interrupted).
fn wait_until_ready(
    run: &mut Box<dyn RunHandle>,
    server_plan: &crate::plan::ServerPlan,
    l: &crate::load::LoadSpec,
    url: &crate::load::HttpUrl,
    interrupted: &dyn Fn() -> bool,
) -> Result<(), String> {
    let ready_path = server_plan
        .ready_path
        .clone()
        .unwrap_or_else(|| url.path_and_query.clone());
    let mut exited = None;
    let ready = server::wait_ready(
        l.addr,
        &url.host_header(),
        &ready_path,
        Duration::from_millis(server_plan.ready_timeout_ms),
        &mut || match run.wait_exit(Duration::ZERO) {
            Waited::Exited(e) => {
                exited = Some(e);
                false
            }
            Waited::Running => true,
            Waited::Lost => false,
        },
        interrupted,
    );
    ready.map(|_| ()).map_err(|why| match why {
        server::NotReady::Exited => format!(
            "exited before it answered{}",
            exited
                .map(|e| format!(" ({})", exit_words(&e)))
                .unwrap_or_default()
        ),
        server::NotReady::TimedOut { last } => format!(
            "did not answer {ready_path} within {} (last: {last})",
            humantime::format_duration(Duration::from_millis(server_plan.ready_timeout_ms))
        ),
        server::NotReady::Interrupted => "was interrupted while starting".into(),
    })
}

/// A process's environment, in order.
type Env = Vec<(String, String)>;

/// An instance's environment: the variant's settings (placeholders filled), its naming
/// (`MEMTRIAL_PORT`, `MEMTRIAL_VARIANT`), and the allocator probe in its bounded mode when
/// the plan has it, with the directory its reports go to.
fn instance_env(
    plan: &Plan,
    variant: &Variant,
    sub: &dyn Fn(&str) -> String,
    naming: &[(String, String)],
    file: &dyn Fn(&str) -> PathBuf,
) -> Result<(Env, Option<PathBuf>), String> {
    let inherited = std::env::var("LD_PRELOAD").ok();
    let mut env: Env = variant
        .workload_env(inherited.as_deref())
        .into_iter()
        .map(|(k, v)| (k, sub(&v)))
        .collect();
    env.extend(naming.iter().cloned());
    if !plan.probes.kinds.contains(&ProbeKind::Allocator) {
        return Ok((env, None));
    }
    let dir = file("probe");
    crate::probe::reports::fresh_dir(&dir)?;
    let lib = crate::probe::allocator::shim_path()?;
    append_env(&mut env, "LD_PRELOAD", &lib.display().to_string(), ' ');
    env.push(("MEMTRIAL_PROBE_DIR".into(), dir.display().to_string()));
    env.push((
        "MEMTRIAL_PROBE_INTERVAL_MS".into(),
        plan.probes.interval_ms.max(1000).to_string(),
    ));
    env.push((
        "MEMTRIAL_PROBE_MAX_BYTES".into(),
        PROBE_MAX_BYTES.to_string(),
    ));
    Ok((env, Some(dir)))
}

/// How long a worker's command may take to replace the spawner.
const WORKER_START: Duration = Duration::from_secs(5);

/// Runs the instance's `--before` hook to its end (at most 10 minutes); its failure is the
/// soak's.
fn run_before(
    spec: &StartSpec,
    command: &str,
    env: &[(String, String)],
    open: &dyn Fn(&str) -> Result<File, String>,
) -> Result<(), String> {
    use crate::backend::helper;
    let group = spec
        .backend
        .helper_cgroup(&format!("{}-before", spec.group))
        .map_err(|e| e.to_string())?;
    let h = helper::Helper::start(
        command,
        env,
        &spec.plan.workdir,
        Some(open("before.stdout")?),
        open("before.stderr")?,
        group,
        &crate::probe::Helpers::default(),
    )
    .map_err(|e| format!("--before could not start: {e}"))?;
    let timeout = Duration::from_millis(
        spec.plan
            .worker
            .as_ref()
            .map_or(crate::plan::DEFAULT_BEFORE_TIMEOUT_MS, |w| {
                w.before_timeout_ms
            }),
    );
    match helper::run_to_end(h, timeout, spec.interrupted) {
        (Some(s), _) if s.success() => Ok(()),
        (Some(s), _) => Err(format!("--before failed ({})", helper::exit_words(s))),
        (None, _) => Err(format!(
            "--before did not finish within {} (or memtrial was interrupted)",
            humantime::format_duration(timeout)
        )),
    }
}

/// Checks that the variant took effect in the instance's root process: its settings are
/// in the process's environment, its preloaded library is mapped. A soak compares
/// variants for hours: one that silently runs as another would waste them all.
fn verify(pid: i32, variant: &Variant, sub: &dyn Fn(&str) -> String) -> Result<(), String> {
    let env = proc::read_environ(pid).map_err(|e| format!("cannot read its environment: {e}"))?;
    for (k, v) in &variant.settings() {
        let want = sub(v);
        match env.iter().find(|(ek, _)| ek == k) {
            Some((_, got)) if *got == want => {}
            Some((_, got)) => return Err(format!("{k} is {got:?} in the server, not {want:?}")),
            None => {
                return Err(format!(
                    "{k} is not in the server's environment (a wrapper script that resets it?)"
                ))
            }
        }
    }
    if let Some(lib) = &variant.preload {
        let maps =
            proc::read_maps_text(pid).map_err(|e| format!("cannot read its mappings: {e}"))?;
        let real = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.clone());
        let named = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        let names: Vec<String> = [named(lib), named(&real)].into_iter().flatten().collect();
        if !maps
            .lines()
            .any(|l| names.iter().any(|n| l.ends_with(&format!("/{n}"))))
        {
            return Err(format!(
                "{} is not mapped into the server (the loader refused it, or the command is a wrapper that drops LD_PRELOAD; see its stderr)",
                lib.display()
            ));
        }
    }
    Ok(())
}

/// `exited with code 3`, `killed by SIGKILL`.
fn exit_words(e: &Exit) -> String {
    match e.kind {
        ExitKind::Code(c) => format!("exited with code {c}"),
        ExitKind::Signal(s) => format!("killed by {}", proc::signal_name(s)),
    }
}

/// SIGTERM to the run's process group and `pids`, `grace` to exit, then the cgroup's kill.
fn stop_run(run: &mut dyn RunHandle, pids: &[i32], exit: &mut Option<Exit>, grace: Duration) {
    run.signal(libc::SIGTERM, pids);
    let deadline = Instant::now() + grace;
    while exit.is_none() && Instant::now() < deadline {
        match run.wait_exit(Duration::from_millis(50)) {
            Waited::Exited(e) => *exit = Some(e),
            Waited::Running => {}
            Waited::Lost => break,
        }
    }
    run.kill_rest(Duration::from_secs(5));
}

impl Instance {
    /// The instance's processes now (the spawner left out).
    fn pids(&self) -> Vec<i32> {
        let spawner = self.run.spawner();
        let Some(f) = &self.procs_file else {
            return vec![self.run.pid()];
        };
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<i32>().ok())
            .filter(|p| Some(*p) != spawner)
            .collect()
    }

    /// Samples the instance's memory; PSS only when `pss_due` (else the last one stands).
    /// Notices the instance's end: `down` says why, once.
    pub fn sample(&mut self, pss_due: bool) -> Sample {
        if self.down.is_none() {
            if let Waited::Exited(e) = self.run.wait_exit(Duration::ZERO) {
                self.exit = Some(e);
                let oom = self.reader.as_mut().map_or(0, |r| r.figures().oom_kills);
                self.down = Some(match oom {
                    0 => exit_words(&e),
                    n => format!("{} after {n} OOM kill(s)", exit_words(&e)),
                });
            }
        }
        if self.driver_ended.is_none() {
            if let Some(s) = self.driver.as_mut().and_then(|d| d.exited()) {
                self.driver_ended = Some(format!(
                    "its --driver ended ({})",
                    crate::backend::helper::exit_words(s)
                ));
            }
        }
        let pids = self.pids();
        if pids.is_empty() {
            return Sample::default();
        }
        let mut s = Sample::default();
        let mut rss = 0u64;
        let mut any = false;
        for &p in &pids {
            if let Ok(st) = proc::read_status(p) {
                rss += st.vm_rss;
                any = true;
            }
        }
        s.rss = any.then_some(rss as f64);
        if pss_due {
            let mut pss = 0u64;
            let mut any = false;
            for &p in &pids {
                if let Ok(r) = proc::read_smaps_rollup(p) {
                    pss += r.pss;
                    any = true;
                }
            }
            self.pss = any.then_some(pss as f64);
        }
        // Only a fresh read: a value carried over would put one moment's PSS into the
        // means of later windows.
        s.pss = if pss_due { self.pss } else { None };
        if let Some(r) = self.reader.as_mut() {
            r.sample();
            s.working_set = r.working_set_now().map(|v| v as f64);
        }
        if let Some(dir) = &self.probe_dir {
            let (mut live, mut held, mut any_live, mut any_held) = (0u64, 0u64, false, false);
            for &p in &pids {
                if let Ok(Some(rep)) =
                    crate::probe::allocator::latest_report(&dir.join(p.to_string()))
                {
                    if let Some(l) = rep.live_bytes {
                        live += l;
                        any_live = true;
                    }
                    if let Some(h) = rep.held_bytes {
                        held += h;
                        any_held = true;
                    }
                }
            }
            s.live = any_live.then_some(live as f64);
            s.held = any_held.then_some(held as f64);
        }
        s
    }

    /// The CPU time of the instance's cgroup so far.
    pub fn cpu_seconds(&mut self) -> Option<f64> {
        self.reader.as_mut().and_then(|r| r.figures().cpu_seconds)
    }

    /// Stops the instance: SIGTERM to its processes, `grace` to go, then the cgroup's kill.
    pub fn stop(mut self, grace: Duration) {
        if let Some(mut d) = self.driver.take() {
            d.stop(grace);
        }
        let pids = self.pids();
        stop_run(self.run.as_mut(), &pids, &mut self.exit, grace);
    }
}
