//! What the user asked for, before validation, and how a plan file and flags merge.

use super::*;

/// What the user asked for, before validation: CLI flags and plan file alike.
/// `None` means "not given here".
#[derive(Debug, Clone, Default)]
pub struct PlanInput {
    pub command: Vec<String>,
    /// Catalog or custom variant names to run.
    pub variants: Option<Vec<String>>,
    /// Custom variants, `NAME=SPEC`.
    pub custom: Vec<String>,
    pub baseline: Option<String>,
    pub runs: Option<u32>,
    pub warmup: Option<u32>,
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub seed: Option<u64>,
    pub memory_limit: Option<String>,
    pub cpus: Option<String>,
    pub cpuset: Option<String>,
    pub pids_limit: Option<u64>,
    pub server: ServerInput,
    /// Worker-trial settings (`--before`, `--driver`; `--duration` without `--url`).
    pub worker: WorkerInput,
    /// `--probe NAME` (repeatable; the allocator probe is on unless `--no-probes`).
    pub probes: Option<Vec<String>>,
    /// `--no-probes`: kernel counters only.
    pub no_probes: bool,
    pub probe_interval: Option<String>,
}

/// Server-trial settings as given.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerInput {
    pub url: Option<String>,
    pub ready: Option<String>,
    pub ready_timeout: Option<String>,
    pub warmup_duration: Option<String>,
    pub duration: Option<String>,
    pub cooldown: Option<String>,
    pub connections: Option<usize>,
    pub load_threads: Option<usize>,
    pub rate: Option<f64>,
    pub request_timeout: Option<String>,
    pub targets: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    pub speed: Option<f64>,
    pub methods: Option<Vec<String>>,
}

/// Worker-trial settings as given (the plan file's `[worker]` section).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerInput {
    pub before: Option<String>,
    pub driver: Option<String>,
    /// A service's run time (or the driven phase's bound); `--duration` without `--url`.
    pub duration: Option<String>,
    /// How long the workload is still sampled after the driver is done; `--cooldown`
    /// without `--url`.
    pub cooldown: Option<String>,
}

impl WorkerInput {
    pub(super) fn or(self, o: WorkerInput) -> WorkerInput {
        let WorkerInput {
            before,
            driver,
            duration,
            cooldown,
        } = self;
        WorkerInput {
            before: before.or(o.before),
            driver: driver.or(o.driver),
            duration: duration.or(o.duration),
            cooldown: cooldown.or(o.cooldown),
        }
    }
}

impl ServerInput {
    pub(super) fn or(self, o: ServerInput) -> ServerInput {
        let ServerInput {
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
        } = self;
        ServerInput {
            url: url.or(o.url),
            ready: ready.or(o.ready),
            ready_timeout: ready_timeout.or(o.ready_timeout),
            warmup_duration: warmup_duration.or(o.warmup_duration),
            duration: duration.or(o.duration),
            cooldown: cooldown.or(o.cooldown),
            connections: connections.or(o.connections),
            load_threads: load_threads.or(o.load_threads),
            rate: rate.or(o.rate),
            request_timeout: request_timeout.or(o.request_timeout),
            targets: targets.or(o.targets),
            replay: replay.or(o.replay),
            speed: speed.or(o.speed),
            methods: methods.or(o.methods),
        }
    }

    /// True when any server-trial setting is given: then the trial is a server trial
    /// (and needs a URL), so that no server setting is silently ignored.
    pub(super) fn given(&self) -> bool {
        let ServerInput {
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
        } = self;
        url.is_some()
            || ready.is_some()
            || ready_timeout.is_some()
            || warmup_duration.is_some()
            || duration.is_some()
            || cooldown.is_some()
            || connections.is_some()
            || load_threads.is_some()
            || rate.is_some()
            || request_timeout.is_some()
            || targets.is_some()
            || replay.is_some()
            || speed.is_some()
            || methods.is_some()
    }
}

impl PlanInput {
    /// Fills what this input leaves open from `other` (a plan file); flags win.
    /// Both sides are taken apart completely, so a new setting cannot be dropped here.
    pub fn or(self, other: PlanInput) -> PlanInput {
        let PlanInput {
            command,
            variants,
            custom,
            baseline,
            runs,
            warmup,
            interval,
            timeout,
            seed,
            memory_limit,
            cpus,
            cpuset,
            pids_limit,
            server,
            worker,
            probes,
            no_probes,
            probe_interval,
        } = self;
        let PlanInput {
            command: file_command,
            variants: file_variants,
            custom: file_custom,
            baseline: file_baseline,
            runs: file_runs,
            warmup: file_warmup,
            interval: file_interval,
            timeout: file_timeout,
            seed: file_seed,
            memory_limit: file_memory_limit,
            cpus: file_cpus,
            cpuset: file_cpuset,
            pids_limit: file_pids_limit,
            server: file_server,
            worker: file_worker,
            probes: file_probes,
            no_probes: file_no_probes,
            probe_interval: file_probe_interval,
        } = other;
        let mut all_custom = file_custom;
        all_custom.extend(custom);
        // `--duration` on the command line without a URL anywhere is the service's
        // duration: it wins over the file's `[worker] duration` as any flag does.
        let flag_duration = server.duration.clone();
        let file_server_duration = file_server.duration.clone();
        let server = server.or(file_server);
        let mut worker = worker.or(file_worker);
        let server = if server.url.is_none() && flag_duration.is_some() {
            worker.duration = flag_duration;
            ServerInput {
                duration: file_server_duration,
                ..server
            }
        } else {
            server
        };
        PlanInput {
            command: if command.is_empty() {
                file_command
            } else {
                command
            },
            variants: variants.or(file_variants),
            custom: all_custom,
            baseline: baseline.or(file_baseline),
            runs: runs.or(file_runs),
            warmup: warmup.or(file_warmup),
            interval: interval.or(file_interval),
            timeout: timeout.or(file_timeout),
            seed: seed.or(file_seed),
            memory_limit: memory_limit.or(file_memory_limit),
            cpus: cpus.or(file_cpus),
            cpuset: cpuset.or(file_cpuset),
            pids_limit: pids_limit.or(file_pids_limit),
            server,
            worker,
            // `--no-probes` on the command line wins over the file's list.
            no_probes: no_probes || (file_no_probes && probes.is_none()),
            probes: if no_probes {
                probes
            } else {
                probes.or(file_probes)
            },
            probe_interval: probe_interval.or(file_probe_interval),
        }
    }
}
