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
    /// `--memory-limit`, `--cpus`, `--cpuset`, `--pids-limit` (or the plan's keys).
    pub limits: LimitsInput,
    pub server: ServerInput,
    /// Worker-trial settings (`--before`, `--driver`; `--duration` without `--url`).
    pub worker: WorkerInput,
    /// `--probe NAME` (repeatable; the allocator probe is on unless `--no-probes`).
    pub probes: Option<Vec<String>>,
    /// `--no-probes`: kernel counters only.
    pub no_probes: bool,
    pub probe_interval: Option<String>,
    /// `--require-cut-off SIZE`: the require trees' cut-off in the reports.
    pub require_cut_off: Option<String>,
}

/// A run's limits as given, like a container's: the flags of `run` and `soak` (each soak
/// instance gets its own) declared once here, and the plan file's top-level keys of the
/// same names. Checked against their ranges once, in the plan's build.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitsInput {
    /// Memory limit per run (a soak: per instance), like a container's (e.g. 512M, 2G; 4M
    /// to 64T); no swap escape.
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<String>,
    /// CPU quota per run (a soak: the same for each instance) in CPUs (e.g. 1, 0.5; 0.01 to
    /// 4096): the program still sees every host CPU, as under `docker --cpus` or a
    /// Kubernetes CPU limit.
    #[arg(long, value_name = "N")]
    pub cpus: Option<String>,
    /// CPUs the program may run on and sees (e.g. 0, 0-1,3; online CPUs only); a soak's
    /// instances all get the same set.
    #[arg(long, value_name = "LIST")]
    pub cpuset: Option<String>,
    /// Most processes and threads a run (a soak: an instance) may have at once, memtrial's
    /// spawner included, 2 to 4194304.
    #[arg(long, value_name = "N")]
    pub pids_limit: Option<u64>,
}

impl LimitsInput {
    /// Each limit given here, else the other's (flags over the plan file).
    pub(super) fn or(self, o: LimitsInput) -> LimitsInput {
        let LimitsInput {
            memory_limit,
            cpus,
            cpuset,
            pids_limit,
        } = self;
        LimitsInput {
            memory_limit: memory_limit.or(o.memory_limit),
            cpus: cpus.or(o.cpus),
            cpuset: cpuset.or(o.cpuset),
            pids_limit: pids_limit.or(o.pids_limit),
        }
    }

    /// The limits given, as (flag, plan key, value), in the flags' order.
    pub fn given(&self) -> Vec<(&'static str, &'static str, String)> {
        let LimitsInput {
            memory_limit,
            cpus,
            cpuset,
            pids_limit,
        } = self;
        [
            ("--memory-limit", "memory_limit", memory_limit.clone()),
            ("--cpus", "cpus", cpus.clone()),
            ("--cpuset", "cpuset", cpuset.clone()),
            (
                "--pids-limit",
                "pids_limit",
                pids_limit.map(|p| p.to_string()),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, key, v)| Some((flag, key, v?)))
        .collect()
    }
}

/// Server-trial settings as given: the `run` flags and the plan file's `[server]` keys,
/// declared once here (a flag and its key cannot drift apart).
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Server trials")]
pub struct ServerInput {
    /// The server's URL; `{port}` (here, in the command and in the environment) becomes a
    /// free port per run, e.g. 'http://127.0.0.1:{port}/items'.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Path probed until the server answers [default: the URL's path].
    #[arg(long, value_name = "PATH")]
    pub ready: Option<String>,
    /// How long the server may take to answer, up to 1h [default: 30s].
    #[arg(long, value_name = "DURATION")]
    pub ready_timeout: Option<String>,
    /// Load before the measurement, excluded from every figure, up to 1 day [default: 0s].
    #[arg(long, value_name = "DURATION")]
    pub warmup_duration: Option<String>,
    /// With --url: the measured load, up to 1 day [default: 30s]. Without: how long a
    /// service runs before it is stopped (an ok run), or the longest a --driver drives,
    /// up to 7 days.
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Time after the load to see how much memory the server gives back, up to 1 day
    /// [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub cooldown: Option<String>,
    /// Keep-alive connections, 1 to 100000 (within the open-file limit) [default: 16].
    #[arg(long, value_name = "N")]
    pub connections: Option<usize>,
    /// Load-generator threads, 1 to 1024 and at most --connections [default: half the
    /// CPUs, at least 1].
    #[arg(long, value_name = "N")]
    pub load_threads: Option<usize>,
    /// Open loop: requests per second on a fixed schedule (latency from the intended send
    /// time), 0.001 to 10000000; without it, a closed loop.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// A request without a complete response after this long is a timeout, up to 1h
    /// [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// Requests from a file: one `METHOD URL` or `URL` per line.
    #[arg(long, value_name = "FILE")]
    pub targets: Option<PathBuf>,
    /// Replay the paths of an nginx/Apache combined access log.
    #[arg(long, value_name = "LOG")]
    pub replay: Option<PathBuf>,
    /// Replay at the log's own pace times this factor, 0.001 to 1000000 (without it: as
    /// fast as possible).
    #[arg(long, value_name = "X", requires = "replay")]
    pub speed: Option<f64>,
    /// Methods replayed from the log [default: GET,HEAD].
    #[arg(long, value_delimiter = ',', value_name = "LIST", requires = "replay")]
    pub methods: Option<Vec<String>>,
}

/// Worker-trial settings as given: the `run` flags and the plan file's `[worker]` keys.
/// A worker trial: hooks and a driver around the workload (a queue worker, a consumer).
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Worker trials")]
pub struct WorkerInput {
    /// Run CMD with /bin/sh -c before each run's workload starts (reset a queue, load
    /// fixtures), outside the variant and the run's cgroup; a non-zero exit fails the run.
    /// Bounded by --timeout [default: 10m]. {port} and MEMTRIAL_VARIANT, MEMTRIAL_RUN,
    /// MEMTRIAL_PORT name the run.
    #[arg(long, value_name = "CMD")]
    pub before: Option<String>,
    /// Run CMD with /bin/sh -c beside the workload once it has started; its exit 0 stops
    /// the workload and the run is ok, a non-zero exit fails it. It may print
    /// `memtrial-figure NAME VALUE [UNIT]` lines (reported per variant) and
    /// `memtrial-ready` (start-up over). Gets MEMTRIAL_PID too. Not with --url. Without
    /// --url, --duration is the longest the driven phase lasts; without --driver, it is
    /// how long a service runs before it is stopped (an ok run).
    #[arg(long, value_name = "CMD")]
    pub driver: Option<String>,
    /// A service's run time (or the driven phase's bound): the plan's `[worker] duration`;
    /// on the command line it is `--duration` without `--url` (see the server settings).
    #[arg(skip)]
    pub duration: Option<String>,
    /// How long the workload is still sampled after the driver is done: the plan's
    /// `[worker] cooldown`; on the command line `--cooldown` without `--url`.
    #[arg(skip)]
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

    /// The load settings among these, for [`settings::resolve_load`] (the rules
    /// `memtrial load` shares).
    pub(crate) fn load_input(&self) -> settings::LoadInput {
        settings::LoadInput {
            duration: self.duration.clone(),
            warmup_duration: self.warmup_duration.clone(),
            connections: self.connections,
            threads: self.load_threads,
            rate: self.rate,
            request_timeout: self.request_timeout.clone(),
            speed: self.speed,
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
    /// The one rule for `duration` and `cooldown` without a URL anywhere (`url_given`
    /// false): `--duration`/`--cooldown` (or a plan's `[server]` keys) are then the
    /// service's run time (or the driven phase's bound) and the driver's cool-down, the
    /// worker's settings, unless the worker's own were given beside them.
    pub(crate) fn route_to_worker(&mut self, url_given: bool) {
        if url_given {
            return;
        }
        let (s, w) = (&mut self.server, &mut self.worker);
        if w.duration.is_none() {
            w.duration = s.duration.take();
        }
        if w.cooldown.is_none() {
            w.cooldown = s.cooldown.take();
        }
    }

    /// Fills what this input leaves open from `other` (a plan file); flags win.
    /// Both sides are taken apart completely, so a new setting cannot be dropped here.
    pub fn or(mut self, mut other: PlanInput) -> PlanInput {
        // Each side's `duration`/`cooldown` goes where it belongs before they meet, so a
        // flag wins over the file's key for the same thing as any flag does.
        let url_anywhere = self.server.url.is_some() || other.server.url.is_some();
        self.route_to_worker(url_anywhere);
        other.route_to_worker(url_anywhere);
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
            limits,
            server,
            worker,
            probes,
            no_probes,
            probe_interval,
            require_cut_off,
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
            limits: file_limits,
            server: file_server,
            worker: file_worker,
            probes: file_probes,
            no_probes: file_no_probes,
            probe_interval: file_probe_interval,
            require_cut_off: file_require_cut_off,
        } = other;
        let mut all_custom = file_custom;
        all_custom.extend(custom);
        let server = server.or(file_server);
        let worker = worker.or(file_worker);
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
            limits: limits.or(file_limits),
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
            require_cut_off: require_cut_off.or(file_require_cut_off),
        }
    }
}
