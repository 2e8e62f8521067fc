//! Building a [`Plan`] from a merged [`PlanInput`]: defaults, checked settings, the
//! server, worker, limits and probes.

use super::*;

/// Defaults, documented in docs/ and `--help`.
pub(crate) const DEFAULT_RUNS: u32 = 5;
pub(crate) const DEFAULT_INTERVAL: &str = "100ms";
pub(crate) const DEFAULT_GRACE_MS: u64 = 3000;

/// Environment the plan builder needs from the machine.
pub struct PlanContext<'a> {
    pub locator: &'a LibraryLocator,
    pub distro: Distro,
    /// The PATH to look commands up in.
    pub path_var: String,
    pub workdir: PathBuf,
    /// Online CPUs, to check `--cpuset`.
    pub online_cpus: u32,
}

/// What building a plan produced: the plan, and notes for the user (skipped variants).
#[derive(Debug)]
pub struct BuiltPlan {
    pub plan: Plan,
    pub notes: Vec<String>,
}

/// Validates the input and resolves variants and the command.
pub fn build_plan(mut input: PlanInput, ctx: &PlanContext) -> Result<BuiltPlan, PlanError> {
    let mut notes = Vec::new();
    if input.command.is_empty() {
        return Err(PlanError::NoCommand);
    }
    let program = resolve_program(&input.command[0], &ctx.path_var, &ctx.workdir)?;
    let limits = build_limits(&input, ctx)?;
    let url_given = input.server.url.is_some();
    input.route_to_worker(url_given);
    let server = build_server(&input.server, ctx, &mut notes)?;

    let runs = input.runs.unwrap_or(DEFAULT_RUNS);
    if runs == 0 {
        return Err(PlanError::BadValue {
            flag: "--runs",
            value: "0".into(),
            reason:
                "at least one measured run per variant is needed (5 or more for useful intervals)"
                    .into(),
        });
    }
    let runs = settings::count("--runs", runs, settings::RUNS)?;
    let warmup = settings::count("--warmup", input.warmup.unwrap_or(0), settings::WARMUP)?;
    let interval_text = input.interval.as_deref().unwrap_or(DEFAULT_INTERVAL);
    let interval = settings::duration("--interval", interval_text, settings::INTERVAL)?;
    let timeout = input
        .timeout
        .as_deref()
        .map(|t| settings::duration("--timeout", t, settings::TIMEOUT))
        .transpose()?;
    if let Some(seed) = input.seed {
        settings::count("--seed", seed, settings::SEED)?;
    }
    let worker = build_worker(&input.worker, server.is_some(), timeout, ctx)?;

    let probes = build_probes(&input, &mut notes)?;
    let custom = custom_variants(&input.custom, ctx)?;
    let baseline_given = input.baseline.is_some();
    let baseline = input
        .baseline
        .unwrap_or_else(|| DEFAULT_BASELINE.to_string());
    let chosen = choose_variants(
        input.variants.as_deref(),
        &custom,
        &baseline,
        baseline_given,
        ctx,
        &mut notes,
    )?;

    notes.extend(preloads_over_linked(&chosen, &program));
    notes.extend(knob_notes(
        &chosen,
        &program,
        &limits,
        ctx.online_cpus,
        crate::linux::thp::host_mode().as_ref(),
    ));

    let seed = input.seed.unwrap_or_else(random_seed);
    let plan = Plan {
        command: input.command,
        program,
        workdir: ctx.workdir.clone(),
        variants: chosen,
        baseline,
        runs,
        warmup,
        interval_ms: interval.as_millis() as u64,
        timeout_ms: timeout.map(|d| d.as_millis() as u64),
        grace_ms: DEFAULT_GRACE_MS,
        seed,
        limits,
        server,
        probes,
        worker,
    };
    plan.check()?;
    Ok(BuiltPlan { plan, notes })
}

/// A note for each variant that preloads a library into a program built with an
/// allocator of its own (`DT_NEEDED` of the executable): which one answers `malloc`.
pub(super) fn preloads_over_linked(variants: &[Variant], plan_program: &Path) -> Vec<String> {
    use crate::linux::allocator::{linked_allocators, preload_over_linked};
    let mut notes = Vec::new();
    for v in variants {
        let Some(pre) = &v.preload else { continue };
        let program = v.program.as_ref().map_or(plan_program, |p| p.path());
        let Ok(facts) = crate::linux::elf::inspect_elf(program) else {
            continue;
        };
        let linked = linked_allocators(&facts, &[], &mut |_| Vec::new());
        if let Some(n) = preload_over_linked(&pre.display().to_string(), &linked) {
            notes.push(format!(
                "variant '{}' preloads into {}, which links an allocator itself; {n}",
                v.name,
                program.display()
            ));
        }
    }
    notes
}

/// The inside probes: the allocator probe unless `--no-probes`, plus each `--probe`.
pub(super) fn build_probes(
    input: &PlanInput,
    notes: &mut Vec<String>,
) -> Result<ProbePlan, PlanError> {
    let mut kinds = Vec::new();
    // Its thread per process counts against a pids limit: a workload that fits the limit in
    // production could hit it here. On under a limit only when asked for by name.
    if !input.no_probes && input.limits.pids_limit.is_none() {
        kinds.push(ProbeKind::Allocator);
    } else if !input.no_probes
        && !input
            .probes
            .iter()
            .flatten()
            .any(|p| p.trim() == ProbeKind::Allocator.as_str())
    {
        notes.push(
            "the allocator probe is off under --pids-limit: its thread in every process would \
             count against the limit (add --probe allocator to turn it on anyway)"
                .into(),
        );
    }
    for name in input.probes.iter().flatten() {
        let kind = ProbeKind::parse(name.trim()).ok_or_else(|| PlanError::BadValue {
            flag: "--probe",
            value: name.clone(),
            reason: format!(
                "there is no such probe; known probes: {}",
                ProbeKind::ALL.map(ProbeKind::as_str).join(", ")
            ),
        })?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if input.no_probes && !kinds.is_empty() && input.probes.as_ref().is_some_and(|p| !p.is_empty())
    {
        return Err(PlanError::BadValue {
            flag: "--no-probes",
            value: String::new(),
            reason: "cannot be combined with --probe; give one or the other".into(),
        });
    }
    kinds.sort();
    let interval = match &input.probe_interval {
        Some(t) => settings::duration("--probe-interval", t, settings::PROBE_INTERVAL)?,
        None => Duration::from_millis(DEFAULT_PROBE_INTERVAL_MS),
    };
    let require_cut_off_bytes = match &input.require_cut_off {
        None => None,
        Some(_) if !kinds.contains(&ProbeKind::Require) => {
            return Err(PlanError::BadValue {
                flag: "--require-cut-off",
                value: input.require_cut_off.clone().unwrap_or_default(),
                reason: "prunes the require probe's trees: add --probe require".into(),
            })
        }
        Some(t) => Some(
            crate::units::parse_size(t).map_err(|why| PlanError::BadValue {
                flag: "--require-cut-off",
                value: t.clone(),
                reason: why,
            })?,
        ),
    };
    Ok(ProbePlan {
        kinds,
        interval_ms: interval.as_millis() as u64,
        require_cut_off_bytes,
    })
}

/// Server-trial defaults.
pub(crate) const DEFAULT_COOLDOWN: &str = "10s";
pub(crate) const DEFAULT_READY_TIMEOUT: &str = "30s";

/// A server trial's `--url`, checked as it will be with a port: on this machine; a note
/// when it has no `{port}`.
fn server_url(given: Option<&str>, notes: &mut Vec<String>) -> Result<String, PlanError> {
    let bad = |flag: &'static str, value: String, reason: String| PlanError::BadValue {
        flag,
        value,
        reason,
    };
    let Some(url) = given else {
        return Err(bad(
            "--url",
            String::new(),
            "a server trial needs --url http://127.0.0.1:{port}/PATH (the server's address; {port} is replaced by a free port per run)".into(),
        ));
    };
    // Check the URL as it will be with a port.
    let parsed = crate::load::parse_url(&substitute(url, 8080))
        .map_err(|e| bad("--url", url.to_string(), e))?;
    let loopback = parsed.host == "localhost"
        || parsed
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(bad(
            "--url",
            url.to_string(),
            "memtrial starts the server on this machine: use 127.0.0.1 (or localhost) with {port}"
                .into(),
        ));
    }
    if !url.contains(PORT_PLACEHOLDER) {
        notes.push(format!(
            "--url {url} has no {{port}}: every run uses the same port, so a server left over from an earlier run would be measured instead"
        ));
    }
    Ok(url.to_string())
}

pub(super) fn build_server(
    s: &ServerInput,
    ctx: &PlanContext,
    notes: &mut Vec<String>,
) -> Result<Option<ServerPlan>, PlanError> {
    if !s.given() {
        return Ok(None);
    }
    let bad = |flag: &'static str, value: String, reason: String| PlanError::BadValue {
        flag,
        value,
        reason,
    };
    let url = server_url(s.url.as_deref(), notes)?;
    let load = settings::resolve_load(
        &s.load_input(),
        settings::LoadCommand::ServerTrial,
        ctx.online_cpus,
    )?;
    let ms = |d: Duration| d.as_millis() as u64;
    let source = match (&s.targets, &s.replay) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "--targets",
                String::new(),
                "give --targets or --replay, not both".into(),
            ))
        }
        (Some(p), None) => RequestSource::Targets {
            path: ctx.workdir.join(p),
        },
        (None, Some(p)) => RequestSource::Replay {
            path: ctx.workdir.join(p),
            speed: load.speed,
            methods: s.methods.clone().unwrap_or_else(settings::default_methods),
        },
        (None, None) => RequestSource::Url,
    };
    let plan = ServerPlan {
        url,
        ready_path: s.ready.clone(),
        ready_timeout_ms: ms(settings::duration(
            "--ready-timeout",
            s.ready_timeout.as_deref().unwrap_or(DEFAULT_READY_TIMEOUT),
            settings::READY_TIMEOUT,
        )?),
        warmup_ms: ms(load.warmup),
        duration_ms: ms(load.duration),
        cooldown_ms: ms(settings::duration(
            "--cooldown",
            s.cooldown.as_deref().unwrap_or(DEFAULT_COOLDOWN),
            settings::COOLDOWN,
        )?),
        connections: load.connections,
        threads: load.threads,
        rate: load.rate,
        request_timeout_ms: ms(load.request_timeout),
        source,
    };
    // Read the request source once now, so a bad file fails before any run.
    let (_, source_notes) = plan.read_requests().map_err(|m| {
        let (flag, value) = match &plan.source {
            RequestSource::Targets { path } => ("--targets", path.display().to_string()),
            RequestSource::Replay { path, .. } => ("--replay", path.display().to_string()),
            RequestSource::Url => ("--url", plan.url.clone()),
        };
        PlanError::BadValue {
            flag,
            value,
            reason: m,
        }
    })?;
    notes.extend(source_notes);
    Ok(Some(plan))
}

/// `--before`'s bound when the run has no `--timeout`.
pub(crate) const DEFAULT_BEFORE_TIMEOUT_MS: u64 = 10 * 60 * 1000;

pub(super) fn build_worker(
    w: &WorkerInput,
    server: bool,
    timeout: Option<Duration>,
    ctx: &PlanContext,
) -> Result<Option<WorkerPlan>, PlanError> {
    let WorkerInput {
        before,
        driver,
        duration,
        cooldown,
    } = w;
    if before.is_none() && driver.is_none() && duration.is_none() && cooldown.is_none() {
        return Ok(None);
    }
    let bad = |flag: &'static str, value: &str, reason: &str| PlanError::BadValue {
        flag,
        value: shell_words::quote(value).into_owned(),
        reason: reason.to_string(),
    };
    let before = before
        .as_deref()
        .map(|c| helper_command("--before", c, ctx))
        .transpose()?;
    let driver = driver
        .as_deref()
        .map(|c| helper_command("--driver", c, ctx))
        .transpose()?;
    if server {
        if let Some(d) = &driver {
            return Err(bad(
                "--driver",
                d,
                "cannot be combined with --url: a server trial is driven by memtrial's HTTP load; drop --url to drive the workload with your command, or drop --driver",
            ));
        }
        if let Some(d) = duration {
            return Err(bad(
                "--duration",
                d,
                "[worker] duration cannot be combined with --url: a server trial's --duration is its load's (give it in [server])",
            ));
        }
    }
    let duration = duration
        .as_deref()
        .map(|d| settings::duration("--duration", d, settings::SERVICE_DURATION))
        .transpose()?;
    if let (Some(d), Some(t)) = (duration, timeout) {
        if d >= t {
            return Err(PlanError::BadValue {
                flag: "--duration",
                value: humantime::format_duration(d).to_string(),
                reason: format!(
                    "is not shorter than --timeout {}: every run would time out; raise --timeout or shorten --duration",
                    humantime::format_duration(t)
                ),
            });
        }
    }
    if let (Some(c), None) = (cooldown, &driver) {
        return Err(bad(
            "--cooldown",
            c,
            "is a cool-down after a server's load or a worker's --driver: give --url or --driver, or drop --cooldown",
        ));
    }
    let cooldown = cooldown
        .as_deref()
        .map(|c| settings::duration("--cooldown", c, settings::COOLDOWN))
        .transpose()?;
    let ms = |d: Duration| d.as_millis() as u64;
    Ok(Some(WorkerPlan {
        before,
        before_timeout_ms: timeout.map_or(DEFAULT_BEFORE_TIMEOUT_MS, ms),
        driver,
        duration_ms: duration.map(ms),
        cooldown_ms: cooldown.map_or(0, ms),
    }))
}

/// Words a shell runs itself (or that start shell syntax): not looked up in PATH.
pub(super) const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "{", "(", "alias", "break", "case", "cd", "command", "continue", "echo",
    "eval", "exec", "exit", "export", "false", "for", "if", "printf", "pwd", "read", "return",
    "set", "shift", "test", "times", "trap", "true", "type", "ulimit", "umask", "unset", "until",
    "wait", "while",
];

/// A hook's or driver's shell command, checked: not empty, parseable, and its program
/// found (when its first word is a plain program name).
pub(super) fn helper_command(
    flag: &'static str,
    cmd: &str,
    ctx: &PlanContext,
) -> Result<String, PlanError> {
    let bad = |reason: String| PlanError::BadValue {
        flag,
        value: shell_words::quote(cmd).into_owned(),
        reason,
    };
    if cmd.trim().is_empty() {
        return Err(bad(format!(
            "an empty command; give a shell command, e.g. {flag} 'redis-cli -p 6390 flushdb'"
        )));
    }
    if cmd.contains('\0') {
        return Err(bad("contains a NUL byte, which no command can hold".into()));
    }
    let words = shell_words::split(cmd).map_err(|e| {
        bad(format!(
            "cannot be read as a shell command ({e}); check its quotes"
        ))
    })?;
    let Some(first) = words.first() else {
        return Err(bad("has no command in it".into()));
    };
    let plain = !first.is_empty()
        && !first.contains('=')
        && !first.contains(PORT_PLACEHOLDER)
        && !first.chars().any(|c| "$`;&|<>(){}*?[]~!#".contains(c));
    if plain && !SHELL_WORDS.contains(&first.as_str()) {
        resolve_program(first, &ctx.path_var, &ctx.workdir).map_err(|e| {
            bad(format!(
                "{e}; install it or give its path (the command runs with /bin/sh -c in {})",
                ctx.workdir.display()
            ))
        })?;
    }
    Ok(cmd.to_string())
}

/// Smallest memory limit accepted: below this the kernel OOM-kills most programs at start.
pub(crate) const MIN_MEMORY_LIMIT: u64 = settings::MEMORY_LIMIT.0;

pub(super) fn build_limits(input: &PlanInput, ctx: &PlanContext) -> Result<Limits, PlanError> {
    let mut l = Limits::default();
    if let Some(m) = &input.limits.memory_limit {
        let bytes = crate::units::parse_size(m).map_err(|reason| PlanError::BadValue {
            flag: "--memory-limit",
            value: m.clone(),
            reason,
        })?;
        if bytes < MIN_MEMORY_LIMIT {
            return Err(PlanError::BadValue {
                flag: "--memory-limit",
                value: m.clone(),
                reason: "at least 4M (the program could not even start below that)".into(),
            });
        }
        if bytes > settings::MEMORY_LIMIT.1 {
            return Err(PlanError::BadValue {
                flag: "--memory-limit",
                value: m.clone(),
                reason: "must be from 4M to 64T".into(),
            });
        }
        l.memory_max = Some(bytes);
    }
    if let Some(c) = &input.limits.cpus {
        let cpus: f64 = c.trim().parse().map_err(|_| PlanError::BadValue {
            flag: "--cpus",
            value: c.clone(),
            reason: "not a number of CPUs (e.g. 1, 0.5, 8)".into(),
        })?;
        if !(settings::CPUS.0..=settings::CPUS.1).contains(&cpus) {
            return Err(PlanError::BadValue {
                flag: "--cpus",
                value: c.clone(),
                reason: "must be between 0.01 and 4096".into(),
            });
        }
        l.cpus = Some(cpus);
    }
    if let Some(s) = &input.limits.cpuset {
        let cpus =
            crate::linux::cgroup::parse_cpu_list(s).map_err(|reason| PlanError::BadValue {
                flag: "--cpuset",
                value: s.clone(),
                reason,
            })?;
        let online = ctx.online_cpus;
        if let Some(bad) = cpus.iter().find(|c| **c >= online) {
            return Err(PlanError::BadValue {
                flag: "--cpuset",
                value: s.clone(),
                reason: format!(
                    "CPU {bad} does not exist here (online CPUs: 0-{})",
                    online.saturating_sub(1)
                ),
            });
        }
        l.cpuset = Some(s.trim().to_string());
    }
    if let Some(p) = input.limits.pids_limit {
        if p < settings::PIDS_LIMIT.0 {
            return Err(PlanError::BadValue {
                flag: "--pids-limit",
                value: p.to_string(),
                reason: format!(
                    "at least {}: memtrial's spawner, which starts the workload inside the \
                     run's cgroup, is one process there and the workload another",
                    settings::PIDS_LIMIT.0
                ),
            });
        }
        l.pids_max = Some(settings::count("--pids-limit", p, settings::PIDS_LIMIT)?);
    }
    Ok(l)
}

pub(super) fn random_seed() -> u64 {
    use rand::RngCore;
    rand::thread_rng().next_u64() >> 11 // fits a JSON number and SQLite integer exactly
}
