//! What to run: workload, variants, repetitions. Built from CLI flags and/or a
//! TOML plan file, validated once, then plain data.

pub mod catalog;
pub mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::linux::cgroup::Limits;
pub use crate::load::source::RequestSource;
use catalog::{catalog_entry, catalog_names, CatalogKind, Distro, LibAllocator, LibraryLocator};

/// Errors building a plan. Each names the flag or setting, the value and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("unknown variant '{name}'; known variants: {known}. Define your own with --variant NAME=SPEC")]
    UnknownVariant { name: String, known: String },
    #[error(
        "variant '{variant}' needs {lib}, which is not installed here; install it with: {hint}"
    )]
    LibraryMissing {
        variant: String,
        lib: &'static str,
        hint: String,
    },
    #[error("variant '{variant}': preload library '{path}' {reason}")]
    BadPreloadPath {
        variant: String,
        path: String,
        reason: String,
    },
    #[error("bad variant definition '{spec}': {reason}. Expected NAME=SPEC where SPEC is space-separated KEY=VALUE settings, preload:LIB and/or one program:PATH or command:'…', e.g. 'je=preload:jemalloc MALLOC_CONF=narenas:2'")]
    BadVariantSpec { spec: String, reason: String },
    #[error("variant '{variant}' sets {key} twice; give each environment key once (in its spec or its env table), or runs would not get what the variant says")]
    DuplicateEnvKey { variant: String, key: String },
    #[error("variant '{variant}': environment key {key:?} {reason}")]
    BadEnvKey {
        variant: String,
        key: String,
        reason: &'static str,
    },
    #[error("variant '{variant}': {what} {reason}")]
    BadVariantProgram {
        variant: String,
        what: String,
        reason: String,
    },
    #[error("variant name '{name}' is used twice")]
    DuplicateVariant { name: String },
    #[error("variant name {name}: {VARIANT_NAME_RULE}")]
    BadVariantName { name: String },
    #[error("the baseline {baseline} is not one of the plan's variants ({variants})")]
    BaselineNotAVariant { baseline: String, variants: String },
    #[error("plan file {path}: {size}; memtrial reads plans of at most {MAX_PLAN_BYTES} bytes (1 MiB): a plan is settings, not data — put large inputs in files the plan names")]
    PlanTooBig { path: PathBuf, size: String },
    #[error("no command to run: give it after '--' (memtrial run -- ./job --flag) or as `command` in the plan file")]
    NoCommand,
    #[error("command '{command}' not found in PATH ({path})")]
    CommandNotFound { command: String, path: String },
    #[error("command '{command}' is not an executable file")]
    NotExecutable { command: String },
    #[error("{flag} {value}: {reason}")]
    BadValue {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("plan file {path}: {message}")]
    PlanFile { path: PathBuf, message: String },
}

/// One variant of the workload's environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    /// Environment settings given to the workload only.
    pub env: Vec<(String, String)>,
    /// A library to preload (`LD_PRELOAD`), resolved to a path.
    pub preload: Option<PathBuf>,
    /// How the preload was asked for (catalog name or path), for display.
    pub preload_spec: Option<String>,
    pub origin: VariantOrigin,
    /// Another program or command to run instead of the plan's. Absent from plans stored
    /// before variants could replace the program (which keeps their fingerprint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<VariantProgram>,
}

/// What a variant runs instead of the plan's program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VariantProgram {
    /// `program:PATH`: the plan's command with its program exec'd from `path` (argv[0]'s
    /// text stays the user's).
    Program {
        /// As given, for display.
        spec: String,
        path: PathBuf,
    },
    /// `command:'…'`: the whole command replaced; `path` is its resolved program.
    Command { argv: Vec<String>, path: PathBuf },
}

impl VariantProgram {
    /// The executable exec'd.
    pub fn path(&self) -> &Path {
        match self {
            VariantProgram::Program { path, .. } | VariantProgram::Command { path, .. } => path,
        }
    }

    /// `program:PATH` or `command:'…'`, as a SPEC word.
    pub fn describe(&self) -> String {
        match self {
            VariantProgram::Program { spec, .. } => format!("program:{spec}"),
            VariantProgram::Command { argv, .. } => {
                format!("command:{}", shell_words::quote(&shell_words::join(argv)))
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VariantOrigin {
    Catalog,
    Custom,
}

impl Variant {
    /// The environment the workload gets on top of memtrial's own: the settings and `LD_PRELOAD`.
    /// An existing `LD_PRELOAD` of the user is kept after the variant's library.
    pub fn workload_env(&self, inherited_preload: Option<&str>) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        if let Some(p) = &self.preload {
            let mut value = p.display().to_string();
            if let Some(old) = inherited_preload.filter(|s| !s.is_empty()) {
                value.push(' ');
                value.push_str(old);
            }
            env.retain(|(k, _)| k != "LD_PRELOAD");
            env.push(("LD_PRELOAD".to_string(), value));
        }
        env
    }

    /// A one-line description: `MALLOC_ARENA_MAX=2`, `preload jemalloc`, or `unchanged`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(p) = &self.program {
            parts.push(p.describe());
        }
        if let Some(p) = &self.preload_spec {
            parts.push(format!("preload:{p}"));
        }
        parts.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        if parts.is_empty() {
            "unchanged".to_string()
        } else {
            parts.join(" ")
        }
    }
}

/// A validated plan: plain data, stored with the experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The command as the user gave it.
    pub command: Vec<String>,
    /// The resolved program path.
    pub program: PathBuf,
    /// The directory the workload runs in.
    pub workdir: PathBuf,
    pub variants: Vec<Variant>,
    pub baseline: String,
    pub runs: u32,
    pub warmup: u32,
    pub interval_ms: u64,
    pub timeout_ms: Option<u64>,
    /// How long a workload gets between SIGTERM and SIGKILL.
    pub grace_ms: u64,
    pub seed: u64,
    /// Container-like limits applied to every run, identically for every variant.
    #[serde(default)]
    pub limits: Limits,
    /// A server trial: the command is a server put under HTTP load.
    #[serde(default)]
    pub server: Option<ServerPlan>,
    /// The probes inside the workload. A plan stored before probes existed has none, so
    /// that resuming it keeps its runs alike.
    #[serde(default)]
    pub probes: ProbePlan,
    /// A worker trial or a service run for a while: a `--before` hook, a `--driver`
    /// beside the workload, a `--duration`. None for a plain batch command.
    #[serde(default)]
    pub worker: Option<WorkerPlan>,
}

/// What happens around each run besides the workload: the trial layer's `drive` module runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerPlan {
    /// `--before CMD`: run by `/bin/sh -c` before each run's workload starts.
    pub before: Option<String>,
    /// The longest `--before` may take (the run's `--timeout`, or a default).
    pub before_timeout_ms: u64,
    /// `--driver CMD`: run by `/bin/sh -c` beside the workload; its exit ends the run.
    pub driver: Option<String>,
    /// `--duration`: without a driver, how long the service runs before it is stopped;
    /// with one, the longest the driven phase may last.
    pub duration_ms: Option<u64>,
    /// `--cooldown` with a driver: the workload is still sampled this long after the driver
    /// is done, then stopped (does memory come back once the queue is drained?).
    #[serde(default)]
    pub cooldown_ms: u64,
}

impl WorkerPlan {
    /// True when any of the helper commands or `text` asks for a `{port}`.
    pub fn wants_port(&self) -> bool {
        [&self.before, &self.driver]
            .into_iter()
            .flatten()
            .any(|c| c.contains(PORT_PLACEHOLDER))
    }
}

/// A probe that runs inside the workload's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// memtrial's preloaded library reading the active allocator's own counters.
    Allocator,
    /// Ruby's `GC.stat` and YJIT's code sizes, through `RUBYOPT`.
    Ruby,
    /// The JVM's Native Memory Tracking, through `JAVA_TOOL_OPTIONS` and `jcmd`.
    Jvm,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [ProbeKind::Allocator, ProbeKind::Ruby, ProbeKind::Jvm];

    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Allocator => "allocator",
            ProbeKind::Ruby => "ruby",
            ProbeKind::Jvm => "jvm",
        }
    }

    pub fn parse(s: &str) -> Option<ProbeKind> {
        ProbeKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Which probes run inside the workload, and how often they report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbePlan {
    pub kinds: Vec<ProbeKind>,
    pub interval_ms: u64,
}

impl Default for ProbePlan {
    /// No probes: what a plan stored before probes existed means.
    fn default() -> ProbePlan {
        ProbePlan {
            kinds: Vec::new(),
            interval_ms: DEFAULT_PROBE_INTERVAL_MS,
        }
    }
}

impl ProbePlan {
    pub fn has(&self, kind: ProbeKind) -> bool {
        self.kinds.contains(&kind)
    }
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }
}

/// The inside probes' default interval.
pub const DEFAULT_PROBE_INTERVAL_MS: u64 = 1000;

/// How a server is loaded in each run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerPlan {
    /// The URL, with `{port}` for the run's port.
    pub url: String,
    /// The path probed for readiness (default: the URL's path).
    pub ready_path: Option<String>,
    pub ready_timeout_ms: u64,
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub cooldown_ms: u64,
    pub connections: usize,
    pub threads: usize,
    /// Open loop at this many requests per second; closed loop when None.
    pub rate: Option<f64>,
    pub request_timeout_ms: u64,
    pub source: RequestSource,
}

/// The placeholder replaced by the run's port in the command, environment and URLs.
pub const PORT_PLACEHOLDER: &str = "{port}";

/// Replaces every `{port}` with the port.
pub fn substitute(text: &str, port: u16) -> String {
    text.replace(PORT_PLACEHOLDER, &port.to_string())
}

/// Replaces every `{port}` in a shell command with the port, shell-quoted.
pub fn substitute_quoted(command: &str, port: u16) -> String {
    command.replace(PORT_PLACEHOLDER, &shell_words::quote(&port.to_string()))
}

impl ServerPlan {
    /// Reads the plan's request source: the requests, and notes for the user (counts,
    /// unparseable log lines). Errors name the file and line.
    pub fn read_requests(&self) -> Result<(crate::load::Source, Vec<String>), String> {
        let url = crate::load::parse_url(&substitute(&self.url, 8080))?;
        crate::load::source::read_source(&self.source, &url.path_and_query)
    }
}

impl Plan {
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms)
    }
    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// What a variant's runs exec: the program's path and the argv (argv[0] as given, the
    /// rest before `{port}` is filled in).
    pub fn launch_command(&self, v: &Variant) -> (PathBuf, Vec<String>) {
        match &v.program {
            None => (self.program.clone(), self.command.clone()),
            Some(VariantProgram::Program { path, .. }) => (path.clone(), self.command.clone()),
            Some(VariantProgram::Command { argv, path }) => (path.clone(), argv.clone()),
        }
    }
}

/// What makes runs comparable, in a fixed order: the plan's fingerprint is the hash of
/// its JSON. Not the seed, run counts, sampling, timeouts, paths resolved on one machine
/// (program, workdir, a catalog library's location) or the host.
#[derive(Serialize)]
struct Comparable<'a> {
    /// Bumped when what is hashed changes.
    fingerprint_version: u32,
    command: &'a [String],
    variants: Vec<ComparableVariant<'a>>,
    limits: &'a Limits,
    server: Option<&'a ServerPlan>,
    worker: Option<&'a WorkerPlan>,
    probes: &'a ProbePlan,
}

#[derive(Serialize)]
struct ComparableVariant<'a> {
    name: &'a str,
    /// Sorted: the order settings were given in does not matter (each key is set once).
    env: Vec<&'a (String, String)>,
    /// As asked for (`jemalloc`, a path): a catalog library lives elsewhere on another distro.
    preload: Option<String>,
    /// `program:SPEC` or the replacing command's words.
    program: Option<String>,
    command: Option<&'a [String]>,
}

impl Plan {
    /// A stable hex hash of what makes runs comparable (see [`Comparable`]): records of
    /// the same plan from several machines share it, and join one experiment on import.
    pub fn fingerprint(&self) -> String {
        let c = Comparable {
            fingerprint_version: 1,
            command: &self.command,
            variants: self
                .variants
                .iter()
                .map(|v| ComparableVariant {
                    name: &v.name,
                    env: {
                        let mut env: Vec<&(String, String)> = v.env.iter().collect();
                        env.sort();
                        env
                    },
                    preload: v
                        .preload_spec
                        .clone()
                        .or_else(|| v.preload.as_ref().map(|p| p.display().to_string())),
                    program: match &v.program {
                        Some(VariantProgram::Program { spec, .. }) => Some(spec.clone()),
                        _ => None,
                    },
                    command: match &v.program {
                        Some(VariantProgram::Command { argv, .. }) => Some(argv),
                        _ => None,
                    },
                })
                .collect(),
            limits: &self.limits,
            server: self.server.as_ref(),
            worker: self.worker.as_ref(),
            probes: &self.probes,
        };
        let json = serde_json::to_string(&c).unwrap_or_default();
        crate::units::sha256_hex(json.as_bytes())
    }
}

impl Plan {
    /// The rules every plan keeps, however it was made (built here, or read back from a
    /// record on import): at least one variant; each name by [`VARIANT_NAME_RULE`] and
    /// once; the baseline one of them; each environment key a valid name, once, and no
    /// value with a NUL byte.
    pub fn check(&self) -> Result<(), PlanError> {
        let mut seen: Vec<&str> = Vec::new();
        for v in &self.variants {
            if !valid_name(&v.name) {
                return Err(PlanError::BadVariantName {
                    name: shown_name(&v.name),
                });
            }
            if seen.contains(&v.name.as_str()) {
                return Err(PlanError::DuplicateVariant {
                    name: v.name.clone(),
                });
            }
            seen.push(&v.name);
            let mut keys: Vec<&str> = Vec::new();
            for (k, val) in &v.env {
                let reason = env_key_problem(k).or_else(|| {
                    val.contains('\0').then_some(
                        "has a value containing a NUL byte (an environment cannot hold one)",
                    )
                });
                if let Some(reason) = reason {
                    return Err(PlanError::BadEnvKey {
                        variant: v.name.clone(),
                        key: k.clone(),
                        reason,
                    });
                }
                if keys.contains(&k.as_str()) {
                    return Err(PlanError::DuplicateEnvKey {
                        variant: v.name.clone(),
                        key: k.clone(),
                    });
                }
                keys.push(k);
            }
        }
        if !seen.contains(&self.baseline.as_str()) {
            return Err(PlanError::BaselineNotAVariant {
                baseline: shown_name(&self.baseline),
                variants: if seen.is_empty() {
                    "it has none".into()
                } else {
                    seen.join(", ")
                },
            });
        }
        Ok(())
    }
}

/// The most bytes of a plan file memtrial reads (a ConfigMap holds at most 1 MiB too).
pub const MAX_PLAN_BYTES: usize = 1 << 20;

/// The text of a plan file, read up to [`MAX_PLAN_BYTES`] (`/dev/zero` or a huge file is
/// refused with the limit, after reading at most one byte more).
pub fn read_plan_text(path: &Path) -> Result<String, PlanError> {
    use std::io::Read;
    let err = |message: String| PlanError::PlanFile {
        path: path.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    let mut bytes = Vec::new();
    (&file)
        .take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(format!("cannot read it: {e}")))?;
    if bytes.len() > MAX_PLAN_BYTES {
        let size = match file.metadata() {
            Ok(m) if m.is_file() => format!("it has {} bytes", m.len()),
            _ => format!("it holds more than {MAX_PLAN_BYTES} bytes"),
        };
        return Err(PlanError::PlanTooBig {
            path: path.to_path_buf(),
            size,
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        err(format!(
            "it is not UTF-8 text (byte {} is not); a plan is a TOML file",
            e.utf8_error().valid_up_to()
        ))
    })
}

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
    fn or(self, o: WorkerInput) -> WorkerInput {
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
    fn or(self, o: ServerInput) -> ServerInput {
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
    fn given(&self) -> bool {
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

/// The TOML plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    command: Option<CommandField>,
    variants: Option<Vec<String>>,
    #[serde(default)]
    variant: Vec<VariantFile>,
    baseline: Option<String>,
    runs: Option<u32>,
    warmup: Option<u32>,
    interval: Option<String>,
    timeout: Option<String>,
    seed: Option<u64>,
    memory_limit: Option<String>,
    cpus: Option<TomlNumber>,
    cpuset: Option<String>,
    pids_limit: Option<u64>,
    #[serde(default)]
    server: ServerInput,
    #[serde(default)]
    worker: WorkerInput,
    /// `probes = ["allocator", "ruby"]`; `[]` for kernel counters only.
    probes: Option<Vec<String>>,
    probe_interval: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "cpus must be a number (2, 0.5) or a string (\"2\", \"0.5\")"
)]
enum TomlNumber {
    Int(i64),
    Float(f64),
    Text(String),
}

impl TomlNumber {
    fn text(&self) -> String {
        match self {
            TomlNumber::Int(i) => i.to_string(),
            TomlNumber::Float(f) => f.to_string(),
            TomlNumber::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "command must be a string (split like a shell would) or an array of strings"
)]
enum CommandField {
    Line(String),
    Argv(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: String,
    spec: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    preload: Option<String>,
    program: Option<String>,
    command: Option<CommandField>,
}

/// Reads a TOML plan file into a [`PlanInput`]. Syntax errors name the line and column.
pub fn read_plan_file(path: &Path) -> Result<PlanInput, PlanError> {
    let text = read_plan_text(path)?;
    parse_plan_text(&text).map_err(|message| PlanError::PlanFile {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses plan-file text. The error is a message naming line and column.
pub fn parse_plan_text(text: &str) -> Result<PlanInput, String> {
    let file: PlanFile = toml::from_str(text).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
        let mut msg = e.message().trim().to_string();
        if msg.is_empty() {
            // The parser names no reason for a character it does not take: say which.
            let at = e.span().and_then(|s| text.get(s.start..)?.chars().next());
            msg = match at {
                Some(c) if c.is_control() => format!(
                    "the control character U+{:04X} is not allowed in TOML (not even in a \
                     comment); remove it, or write it as \\u{:04X} inside a quoted string",
                    c as u32, c as u32
                ),
                Some(c) => format!("{:?} is not valid TOML here", c),
                None => "the plan ends where TOML expects more".into(),
            };
        }
        if line > 0 {
            format!("line {line}, column {col}: {msg}")
        } else {
            msg
        }
    })?;
    let command = match file.command {
        None => Vec::new(),
        Some(CommandField::Argv(v)) => v,
        Some(CommandField::Line(s)) => {
            shell_words::split(&s).map_err(|e| format!("command: {e}"))?
        }
    };
    let mut custom = Vec::new();
    for v in file.variant {
        if !valid_name(&v.name) {
            return Err(format!(
                "[[variant]] name {}: {VARIANT_NAME_RULE}",
                shown_name(&v.name)
            ));
        }
        let mut parts: Vec<String> = Vec::new();
        if let Some(p) = v.program {
            parts.push(shell_words::quote(&format!("program:{p}")).into_owned());
        }
        if let Some(c) = v.command {
            let line = match c {
                CommandField::Line(s) => s,
                CommandField::Argv(argv) => shell_words::join(argv),
            };
            parts.push(shell_words::quote(&format!("command:{line}")).into_owned());
        }
        if let Some(p) = v.preload {
            parts.push(shell_words::quote(&format!("preload:{p}")).into_owned());
        }
        for (k, val) in v.env {
            if let Some(reason) = env_key_problem(&k).or_else(|| {
                val.contains('\0')
                    .then_some("has a value containing a NUL byte (an environment cannot hold one)")
            }) {
                return Err(PlanError::BadEnvKey {
                    variant: v.name,
                    key: k,
                    reason,
                }
                .to_string());
            }
            parts.push(shell_words::quote(&format!("{k}={val}")).into_owned());
        }
        if let Some(s) = v.spec {
            parts.push(s);
        }
        custom.push(format!("{}={}", v.name, parts.join(" ")));
    }
    Ok(PlanInput {
        command,
        variants: file.variants,
        custom,
        baseline: file.baseline,
        runs: file.runs,
        warmup: file.warmup,
        interval: file.interval,
        timeout: file.timeout,
        seed: file.seed,
        memory_limit: file.memory_limit,
        cpus: file.cpus.map(|c| c.text()),
        cpuset: file.cpuset,
        pids_limit: file.pids_limit,
        server: file.server,
        worker: file.worker,
        no_probes: file.probes.as_ref().is_some_and(|p| p.is_empty()),
        probes: file.probes,
        probe_interval: file.probe_interval,
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

/// Defaults, documented in docs/ and `--help`.
pub const DEFAULT_RUNS: u32 = 5;
pub const DEFAULT_INTERVAL: &str = "100ms";
pub const DEFAULT_GRACE_MS: u64 = 3000;
pub const MIN_INTERVAL_MS: u64 = settings::INTERVAL.min.as_millis() as u64;

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
pub fn build_plan(input: PlanInput, ctx: &PlanContext) -> Result<BuiltPlan, PlanError> {
    let mut notes = Vec::new();
    if input.command.is_empty() {
        return Err(PlanError::NoCommand);
    }
    let program = resolve_program(&input.command[0], &ctx.path_var, &ctx.workdir)?;
    let limits = build_limits(&input, ctx)?;
    let (server_input, worker_input) = route_duration(&input.server, &input.worker);
    let server = build_server(&server_input, ctx, &mut notes)?;

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
    let worker = build_worker(&worker_input, server.is_some(), timeout, ctx)?;

    let probes = build_probes(&input, &mut notes)?;
    let custom = custom_variants(&input.custom, ctx)?;
    let baseline_given = input.baseline.is_some();
    let baseline = input.baseline.unwrap_or_else(|| "glibc".to_string());
    let mut chosen = choose_variants(input.variants.as_deref(), &custom, ctx, &mut notes)?;
    add_baseline(
        &mut chosen,
        &baseline,
        baseline_given,
        &custom,
        ctx,
        &mut notes,
    )?;

    notes.extend(preloads_over_linked(&chosen, &program));

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
fn preloads_over_linked(variants: &[Variant], plan_program: &Path) -> Vec<String> {
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
fn build_probes(input: &PlanInput, notes: &mut Vec<String>) -> Result<ProbePlan, PlanError> {
    let mut kinds = Vec::new();
    // Its thread per process counts against a pids limit: a workload that fits the limit in
    // production could hit it here. On under a limit only when asked for by name.
    if !input.no_probes && input.pids_limit.is_none() {
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
    Ok(ProbePlan {
        kinds,
        interval_ms: interval.as_millis() as u64,
    })
}

/// The variants defined by `--variant NAME=SPEC` (or the plan), checked for clashes.
/// The names of custom variants (`NAME=SPEC`, as flags and plan files give them), checked
/// before anything is resolved: each follows [`VARIANT_NAME_RULE`], none is a catalog
/// variant's name, none comes twice. `run` and `kube` both check names here.
pub fn custom_variant_names(specs: &[String]) -> Result<Vec<&str>, PlanError> {
    let mut names: Vec<&str> = Vec::new();
    for spec in specs {
        // A spec without '=' is refused by its parser, with what it lacks.
        let Some((name, _)) = spec.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if !valid_name(name) {
            return Err(PlanError::BadVariantName {
                name: shown_name(name),
            });
        }
        if catalog_entry(name).is_some() || names.contains(&name) {
            return Err(PlanError::DuplicateVariant {
                name: name.to_string(),
            });
        }
        names.push(name);
    }
    Ok(names)
}

fn custom_variants(specs: &[String], ctx: &PlanContext) -> Result<Vec<Variant>, PlanError> {
    custom_variant_names(specs)?;
    let mut custom: Vec<Variant> = Vec::new();
    for spec in specs {
        let v = parse_custom_variant(spec, ctx)?;
        if catalog_entry(&v.name).is_some() || custom.iter().any(|c| c.name == v.name) {
            return Err(PlanError::DuplicateVariant { name: v.name });
        }
        custom.push(v);
    }
    Ok(custom)
}

/// Every variant memtrial knows here, catalog and custom, for messages.
fn known_variants(custom: &[Variant]) -> String {
    let mut names: Vec<String> = catalog_names().iter().map(|s| s.to_string()).collect();
    names.extend(custom.iter().map(|c| c.name.clone()));
    names.join(", ")
}

/// The variants to run: those named by `--variants` (custom ones always included), or
/// the custom ones, or every catalog variant installed here (noting the others).
fn choose_variants(
    names: Option<&[String]>,
    custom: &[Variant],
    ctx: &PlanContext,
    notes: &mut Vec<String>,
) -> Result<Vec<Variant>, PlanError> {
    let mut chosen: Vec<Variant> = Vec::new();
    let add = |v: Variant, chosen: &mut Vec<Variant>| -> Result<(), PlanError> {
        if chosen.iter().any(|c| c.name == v.name) {
            return Err(PlanError::DuplicateVariant { name: v.name });
        }
        chosen.push(v);
        Ok(())
    };
    match names {
        Some(names) => {
            for name in names {
                let name = name.trim();
                if name.is_empty() {
                    continue;
                }
                if let Some(c) = custom.iter().find(|c| c.name == name) {
                    add(c.clone(), &mut chosen)?;
                } else if catalog_entry(name).is_some() {
                    add(
                        catalog_variant(name, ctx, true)?.expect("required"),
                        &mut chosen,
                    )?;
                } else {
                    return Err(PlanError::UnknownVariant {
                        name: name.to_string(),
                        known: known_variants(custom),
                    });
                }
            }
            // Custom variants are always run: they were defined for a reason.
            for c in custom {
                if !chosen.iter().any(|v| v.name == c.name) {
                    chosen.push(c.clone());
                }
            }
        }
        None if !custom.is_empty() => {
            // The baseline plus the custom variants.
            chosen.extend(custom.iter().cloned());
        }
        None => {
            for entry in catalog::CATALOG.iter() {
                match catalog_variant(entry.name, ctx, false)? {
                    Some(v) => chosen.push(v),
                    None => {
                        if let CatalogKind::Preload(lib) = entry.kind {
                            notes.push(format!(
                                "skipping {}: not installed here ({})",
                                entry.name,
                                lib.install_hint(ctx.distro)
                            ));
                        }
                    }
                }
            }
        }
    }
    if chosen.is_empty() {
        return Err(PlanError::BadValue {
            flag: "--variants",
            value: names.map(|n| n.join(",")).unwrap_or_default(),
            reason: format!(
                "no variants selected; known variants: {}",
                known_variants(custom)
            ),
        });
    }
    Ok(chosen)
}

/// The baseline runs first among the variants: added when it was not chosen (and said
/// so when the user named it).
fn add_baseline(
    chosen: &mut Vec<Variant>,
    baseline: &str,
    given: bool,
    custom: &[Variant],
    ctx: &PlanContext,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
    if chosen.iter().any(|v| v.name == baseline) {
        return Ok(());
    }
    let base = if let Some(c) = custom.iter().find(|c| c.name == baseline) {
        c.clone()
    } else if catalog_entry(baseline).is_some() {
        catalog_variant(baseline, ctx, true)?.expect("required")
    } else {
        return Err(PlanError::UnknownVariant {
            name: baseline.to_string(),
            known: known_variants(custom),
        });
    };
    if given {
        notes.push(format!("added the baseline '{baseline}' to the variants"));
    }
    chosen.insert(0, base);
    Ok(())
}

/// Server-trial defaults.
pub const DEFAULT_COOLDOWN: &str = "10s";
pub const DEFAULT_READY_TIMEOUT: &str = "30s";

fn build_server(
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
    let Some(url) = &s.url else {
        return Err(bad(
            "--url",
            String::new(),
            "a server trial needs --url http://127.0.0.1:{port}/PATH (the server's address; {port} is replaced by a free port per run)".into(),
        ));
    };
    // Check the URL as it will be with a port.
    let parsed =
        crate::load::parse_url(&substitute(url, 8080)).map_err(|e| bad("--url", url.clone(), e))?;
    let loopback = parsed.host == "localhost"
        || parsed
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(bad(
            "--url",
            url.clone(),
            "memtrial starts the server on this machine: use 127.0.0.1 (or localhost) with {port}"
                .into(),
        ));
    }
    if !url.contains(PORT_PLACEHOLDER) {
        notes.push(format!(
            "--url {url} has no {{port}}: every run uses the same port, so a server left over from an earlier run would be measured instead"
        ));
    }
    let load = settings::resolve_load(
        &settings::LoadInput {
            duration: s.duration.clone(),
            warmup_duration: s.warmup_duration.clone(),
            connections: s.connections,
            threads: s.load_threads,
            rate: s.rate,
            request_timeout: s.request_timeout.clone(),
            speed: s.speed,
        },
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
            methods: s
                .methods
                .clone()
                .unwrap_or_else(|| vec!["GET".into(), "HEAD".into()]),
        },
        (None, None) => RequestSource::Url,
    };
    let plan = ServerPlan {
        url: url.clone(),
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
pub const DEFAULT_BEFORE_TIMEOUT_MS: u64 = 10 * 60 * 1000;

/// `--duration` without a URL anywhere is the service's (or the driven phase's) duration.
fn route_duration(s: &ServerInput, w: &WorkerInput) -> (ServerInput, WorkerInput) {
    let (mut s, mut w) = (s.clone(), w.clone());
    if s.url.is_none() && w.duration.is_none() {
        w.duration = s.duration.take();
    }
    // A driver's cool-down: `--cooldown` without `--url`.
    if s.url.is_none() && w.cooldown.is_none() {
        w.cooldown = s.cooldown.take();
    }
    (s, w)
}

fn build_worker(
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
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "{", "(", "alias", "break", "case", "cd", "command", "continue", "echo",
    "eval", "exec", "exit", "export", "false", "for", "if", "printf", "pwd", "read", "return",
    "set", "shift", "test", "times", "trap", "true", "type", "ulimit", "umask", "unset", "until",
    "wait", "while",
];

/// A hook's or driver's shell command, checked: not empty, parseable, and its program
/// found (when its first word is a plain program name).
fn helper_command(flag: &'static str, cmd: &str, ctx: &PlanContext) -> Result<String, PlanError> {
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
pub const MIN_MEMORY_LIMIT: u64 = settings::MEMORY_LIMIT.0;

fn build_limits(input: &PlanInput, ctx: &PlanContext) -> Result<Limits, PlanError> {
    let mut l = Limits::default();
    if let Some(m) = &input.memory_limit {
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
    if let Some(c) = &input.cpus {
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
    if let Some(s) = &input.cpuset {
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
    if let Some(p) = input.pids_limit {
        if p == 0 {
            return Err(PlanError::BadValue {
                flag: "--pids-limit",
                value: "0".into(),
                reason: "at least 1 (the workload itself is a process)".into(),
            });
        }
        l.pids_max = Some(settings::count("--pids-limit", p, settings::PIDS_LIMIT)?);
    }
    Ok(l)
}

fn random_seed() -> u64 {
    use rand::RngCore;
    rand::thread_rng().next_u64() >> 11 // fits a JSON number and SQLite integer exactly
}

/// A catalog variant; `Ok(None)` when its library is missing and it was not required.
fn catalog_variant(
    name: &str,
    ctx: &PlanContext,
    required: bool,
) -> Result<Option<Variant>, PlanError> {
    let entry = catalog_entry(name).ok_or_else(|| PlanError::UnknownVariant {
        name: name.to_string(),
        known: catalog_names().join(", "),
    })?;
    let (env, preload, preload_spec) = match entry.kind {
        CatalogKind::Glibc => (vec![], None, None),
        CatalogKind::ArenaMax(n) => (
            vec![("MALLOC_ARENA_MAX".to_string(), n.to_string())],
            None,
            None,
        ),
        CatalogKind::Preload(lib) => match ctx.locator.locate(lib) {
            Some(p) => (vec![], Some(p), Some(lib.name().to_string())),
            None if required => {
                return Err(PlanError::LibraryMissing {
                    variant: name.to_string(),
                    lib: lib.name(),
                    hint: lib.install_hint(ctx.distro),
                })
            }
            None => return Ok(None),
        },
    };
    Ok(Some(Variant {
        name: name.to_string(),
        env,
        preload,
        preload_spec,
        origin: VariantOrigin::Catalog,
        program: None,
    }))
}

/// The one rule for a variant's name, wherever it comes from (`--variant NAME=SPEC`, a
/// plan's `[[variant]]`, hence `memtrial kube`): 1 to 64 ASCII letters, digits, '-', '_'
/// or '.'. A name is written into environments, YAML, reports and file names; nothing
/// else can end a line, a comment or a document there.
pub const VARIANT_NAME_RULE: &str = "a variant's name is 1 to 64 letters, digits, '-', '_' or '.'";

/// Whether `name` follows [`VARIANT_NAME_RULE`].
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A name from outside for a message: escaped like Rust's `{:?}` (every control and line
/// break visible) and cut to 80 characters, so the message stays one readable line.
pub fn shown_name(name: &str) -> String {
    let cut: String = name.chars().take(80).collect();
    if cut.len() < name.len() {
        format!("{cut:?}… ({} bytes)", name.len())
    } else {
        format!("{cut:?}")
    }
}

/// Why `key` cannot be an environment variable's name, if it cannot: empty, or holding
/// `=` or a NUL byte (the kernel's `NAME=VALUE` strings could not say where it ends).
pub fn env_key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("is empty")
    } else if key.contains('=') {
        Some("contains '=' (the environment would read it as a different key and value)")
    } else if key.contains('\0') {
        Some("contains a NUL byte (an environment cannot hold one)")
    } else {
        None
    }
}

/// Parses `NAME=SPEC`: SPEC holds `KEY=VALUE` settings and/or `preload:LIB`,
/// split like a shell would (quotes keep spaces inside a value).
pub fn parse_custom_variant(spec: &str, ctx: &PlanContext) -> Result<Variant, PlanError> {
    let bad = |reason: &str| PlanError::BadVariantSpec {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    let (name, rest) = spec
        .split_once('=')
        .ok_or_else(|| bad("no '=' after the name"))?;
    let name = name.trim();
    if !valid_name(name) {
        return Err(bad(VARIANT_NAME_RULE));
    }
    let words = shell_words::split(rest).map_err(|e| bad(&e.to_string()))?;
    if words.is_empty() {
        return Err(bad("the spec is empty"));
    }
    let mut env = Vec::new();
    let mut preload = None;
    let mut preload_spec = None;
    let mut program: Option<VariantProgram> = None;
    for w in words {
        if let Some(p) = w.strip_prefix("program:") {
            program = Some(variant_program(
                name,
                program,
                VariantProgram::Program {
                    spec: p.to_string(),
                    path: resolve_variant_program(name, "program:", p, ctx)?,
                },
            )?);
        } else if let Some(c) = w.strip_prefix("command:") {
            let argv = shell_words::split(c).map_err(|e| PlanError::BadVariantProgram {
                variant: name.to_string(),
                what: format!("command:{c}"),
                reason: format!("cannot be split like a shell would: {e}"),
            })?;
            let Some(first) = argv.first() else {
                return Err(PlanError::BadVariantProgram {
                    variant: name.to_string(),
                    what: "command:".into(),
                    reason: "is empty; give the whole command, e.g. command:'ruby --yjit job.rb'"
                        .into(),
                });
            };
            let path = resolve_variant_program(name, "command:", first, ctx)?;
            program = Some(variant_program(
                name,
                program,
                VariantProgram::Command { argv, path },
            )?);
        } else if let Some(lib) = w.strip_prefix("preload:") {
            if preload.is_some() {
                return Err(bad("more than one preload: (use one library per variant)"));
            }
            let path = resolve_preload(name, lib, ctx)?;
            preload = Some(path);
            preload_spec = Some(lib.to_string());
        } else if let Some((k, v)) = w.split_once('=') {
            let bad_key = |reason| PlanError::BadEnvKey {
                variant: name.to_string(),
                key: k.to_string(),
                reason,
            };
            if let Some(reason) = env_key_problem(k) {
                return Err(bad_key(reason));
            }
            if v.contains('\0') {
                return Err(bad_key(
                    "has a value containing a NUL byte (an environment cannot hold one)",
                ));
            }
            if env.iter().any(|(seen, _): &(String, String)| seen == k) {
                return Err(PlanError::DuplicateEnvKey {
                    variant: name.to_string(),
                    key: k.to_string(),
                });
            }
            if k == "LD_PRELOAD" {
                return Err(bad(
                    "use preload:LIB instead of LD_PRELOAD=…, so memtrial can verify it",
                ));
            }
            env.push((k.to_string(), v.to_string()));
        } else {
            return Err(bad(&format!(
                "'{w}' is neither KEY=VALUE, preload:LIB, program:PATH nor command:'…'"
            )));
        }
    }
    Ok(Variant {
        name: name.to_string(),
        env,
        preload,
        preload_spec,
        origin: VariantOrigin::Custom,
        program,
    })
}

/// One `program:` or `command:` per variant.
fn variant_program(
    variant: &str,
    before: Option<VariantProgram>,
    new: VariantProgram,
) -> Result<VariantProgram, PlanError> {
    match before {
        None => Ok(new),
        Some(old) => Err(PlanError::BadVariantProgram {
            variant: variant.to_string(),
            what: format!("{} and {}", old.describe(), new.describe()),
            reason: "replace the program twice; give one: program:PATH runs another program \
                     with the command's arguments, command:'…' replaces the whole command"
                .into(),
        }),
    }
}

/// The executable a `program:` or `command:` names, found and checked as the command's own.
fn resolve_variant_program(
    variant: &str,
    key: &str,
    program: &str,
    ctx: &PlanContext,
) -> Result<PathBuf, PlanError> {
    let bad = |reason: String| PlanError::BadVariantProgram {
        variant: variant.to_string(),
        what: format!("{key}{program}"),
        reason,
    };
    if program.is_empty() {
        return Err(bad(
            "names no program; give a path, e.g. program:/opt/ruby/bin/ruby".into(),
        ));
    }
    match resolve_program(program, &ctx.path_var, &ctx.workdir) {
        Ok(p) => Ok(p),
        Err(PlanError::NotExecutable { .. }) => Err(bad(
            "is not an executable file (a directory, or no x permission: chmod +x it?)".into(),
        )),
        Err(PlanError::CommandNotFound { .. }) if program.contains('/') => Err(bad(
            "does not exist; give the path of an executable file".into(),
        )),
        Err(PlanError::CommandNotFound { path, .. }) => Err(bad(format!(
            "is not found in PATH ({path}); give its full path"
        ))),
        Err(e) => Err(e),
    }
}

fn resolve_preload(variant: &str, lib: &str, ctx: &PlanContext) -> Result<PathBuf, PlanError> {
    if let Some(a) = LibAllocator::from_name(lib) {
        return ctx
            .locator
            .locate(a)
            .ok_or_else(|| PlanError::LibraryMissing {
                variant: variant.to_string(),
                lib: a.name(),
                hint: a.install_hint(ctx.distro),
            });
    }
    let bad = |reason: String| PlanError::BadPreloadPath {
        variant: variant.to_string(),
        path: lib.to_string(),
        reason,
    };
    if !lib.contains('/') {
        return Err(bad(format!(
            "is neither a known allocator ({}) nor a path to a .so file",
            LibAllocator::ALL.map(|a| a.name()).join(", ")
        )));
    }
    let path = ctx.workdir.join(lib);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(bad("is not a file".into())),
        Err(e) => return Err(bad(format!("cannot be read: {e}"))),
    }
    // The dynamic loader wants an absolute path to be sure which file it maps.
    let full = std::fs::canonicalize(&path).map_err(|e| bad(format!("cannot be resolved: {e}")))?;
    if full
        .to_string_lossy()
        .contains(|c: char| c.is_whitespace() || c == ':')
    {
        return Err(bad(format!(
            "resolves to '{}': LD_PRELOAD splits on spaces and colons, so the loader would ignore it; use a path without them (a symlink will do)",
            full.display()
        )));
    }
    Ok(full)
}

/// Finds the program like `execvp` would, and checks it can be executed.
pub fn resolve_program(cmd: &str, path_var: &str, workdir: &Path) -> Result<PathBuf, PlanError> {
    use std::os::unix::fs::PermissionsExt;
    let check = |p: &Path| -> Option<bool> {
        let m = std::fs::metadata(p).ok()?;
        Some(m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        let p = workdir.join(cmd);
        return match check(&p) {
            Some(true) => Ok(p),
            Some(false) => Err(PlanError::NotExecutable {
                command: cmd.to_string(),
            }),
            None => Err(PlanError::CommandNotFound {
                command: cmd.to_string(),
                path: "as a path it does not exist".into(),
            }),
        };
    }
    let mut non_exec = None;
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(cmd);
        match check(&p) {
            Some(true) => return Ok(p),
            Some(false) => non_exec = Some(p),
            None => {}
        }
    }
    match non_exec {
        Some(_) => Err(PlanError::NotExecutable {
            command: cmd.to_string(),
        }),
        None => Err(PlanError::CommandNotFound {
            command: cmd.to_string(),
            path: format!("PATH={path_var}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_keeps_the_plan_rules() {
        let p = crate::report::fixture::experiment().plan;
        assert!(p.check().is_ok());
        let broken = |edit: &dyn Fn(&mut Plan)| {
            let mut q = p.clone();
            edit(&mut q);
            q.check().unwrap_err().to_string()
        };
        let e = broken(&|q| q.baseline = "tcmalloc".into());
        assert!(
            e.contains("baseline \"tcmalloc\" is not one of") && e.contains("glibc, arena2"),
            "{e}"
        );
        let e = broken(&|q| q.variants[1].name = "glibc".into());
        assert!(e.contains("'glibc' is used twice"), "{e}");
        let e = broken(&|q| q.variants[1].env.push((String::new(), "1".into())));
        assert!(e.contains("\"\" is empty"), "{e}");
        let e = broken(&|q| {
            q.variants[1]
                .env
                .push(("MALLOC_ARENA_MAX".into(), "3".into()))
        });
        assert!(e.contains("sets MALLOC_ARENA_MAX twice"), "{e}");
        let e = broken(&|q| q.variants[1].env[0].1 = "a\0b".into());
        assert!(e.contains("NUL"), "{e}");
        let e = broken(&|q| q.variants[1].name = "a\n---\nkind: Pod".into());
        assert!(e.contains("1 to 64 letters") && !e.contains('\n'), "{e}");
        let e = broken(&|q| q.variants.clear());
        assert!(e.contains("it has none"), "{e}");
    }

    #[test]
    fn plan_files_are_read_within_their_limit() {
        let e = read_plan_text(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("more than 1048576 bytes") && e.contains("at most 1048576"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, vec![b'#'; MAX_PLAN_BYTES + 10]).unwrap();
        let e = read_plan_text(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("it has {} bytes", MAX_PLAN_BYTES + 10)),
            "{e}"
        );
        std::fs::write(&p, b"command = \"\xff\"").unwrap();
        assert!(read_plan_text(&p)
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
        std::fs::write(&p, vec![b'#'; MAX_PLAN_BYTES]).unwrap();
        assert_eq!(read_plan_text(&p).unwrap().len(), MAX_PLAN_BYTES);
    }

    #[test]
    fn fingerprint_is_stable_and_ignores_what_does_not_make_runs_differ() {
        let p = crate::report::fixture::experiment().plan;
        let f = p.fingerprint();
        assert_eq!(f.len(), 64);
        assert!(f.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(p.clone().fingerprint(), f);
        let mut q = p.clone();
        q.seed = 1;
        q.runs = 50;
        q.warmup = 2;
        q.interval_ms = 250;
        q.timeout_ms = Some(1000);
        q.grace_ms = 1;
        q.baseline = "arena2".into();
        q.workdir = "/elsewhere".into();
        q.program = "/opt/ruby/bin/ruby".into();
        q.variants[2].preload = Some("/usr/lib64/libjemalloc.so.2".into());
        assert_eq!(q.fingerprint(), f);
        // The order settings were given in does not matter either.
        let mut r = p.clone();
        r.variants[1].env = vec![("A".into(), "1".into()), ("B".into(), "2".into())];
        let mut r2 = r.clone();
        r2.variants[1].env.reverse();
        assert_eq!(r.fingerprint(), r2.fingerprint());
    }

    #[test]
    fn fingerprint_changes_with_what_runs() {
        let p = crate::report::fixture::experiment().plan;
        let f = p.fingerprint();
        let changed = |edit: &dyn Fn(&mut Plan)| {
            let mut q = p.clone();
            edit(&mut q);
            q.fingerprint()
        };
        assert_ne!(
            changed(&|q| q.variants[1].env[0].1 = "4".into()),
            f,
            "a variant's environment"
        );
        assert_ne!(changed(&|q| q.variants[1].name = "a2".into()), f);
        assert_ne!(
            changed(&|q| q.variants[2].preload_spec = Some("tcmalloc".into())),
            f
        );
        assert_ne!(changed(&|q| q.command.push("--fast".into())), f);
        assert_ne!(changed(&|q| q.limits.memory_max = Some(1 << 30)), f);
        assert_ne!(changed(&|q| q.probes.kinds.push(ProbeKind::Ruby)), f);
        assert_ne!(
            changed(&|q| q.variants[0].program = Some(VariantProgram::Program {
                spec: "ruby3.3".into(),
                path: "/usr/bin/ruby3.3".into()
            })),
            f
        );
        assert_ne!(changed(&|q| q.variants.pop().map(|_| ()).unwrap_or(())), f);
    }

    fn ctx() -> (LibraryLocator, PathBuf) {
        (LibraryLocator::in_dirs(vec![]), std::env::temp_dir())
    }

    fn input(cmd: &[&str]) -> PlanInput {
        PlanInput {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn build(i: PlanInput) -> Result<BuiltPlan, PlanError> {
        let (loc, wd) = ctx();
        build_plan(
            i,
            &PlanContext {
                locator: &loc,
                distro: Distro::Debian,
                path_var: "/usr/bin:/bin".into(),
                workdir: wd,
                online_cpus: 2,
            },
        )
    }

    #[test]
    fn default_set_without_libraries_is_glibc_and_arenas() {
        let b = build(input(&["true"])).unwrap();
        let names: Vec<_> = b.plan.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["glibc", "arena1", "arena2"]);
        assert_eq!(b.plan.baseline, "glibc");
        assert_eq!(b.plan.runs, DEFAULT_RUNS);
        assert_eq!(
            b.notes.len(),
            3,
            "one note per missing library: {:?}",
            b.notes
        );
        assert!(b.notes[0].contains("apt-get install -y libjemalloc2"));
    }

    #[test]
    fn requested_missing_library_names_the_package() {
        let mut i = input(&["true"]);
        i.variants = Some(vec!["glibc".into(), "jemalloc".into()]);
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("libjemalloc2"), "{e}");
    }

    #[test]
    fn unknown_variant_lists_known() {
        let mut i = input(&["true"]);
        i.variants = Some(vec!["jemaloc".into()]);
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("jemaloc") && e.contains("arena2"), "{e}");
    }

    #[test]
    fn custom_variants_with_quotes_and_baseline() {
        let mut i = input(&["true"]);
        i.custom = vec![
            "yjit=RUBYOPT=--yjit".into(),
            "w='RUBYOPT=-W0 --yjit' X=1".into(),
        ];
        let b = build(i).unwrap();
        let names: Vec<_> = b.plan.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["glibc", "yjit", "w"]);
        assert_eq!(
            b.plan.variants[2].env,
            vec![
                ("RUBYOPT".to_string(), "-W0 --yjit".to_string()),
                ("X".to_string(), "1".to_string())
            ]
        );
    }

    #[test]
    fn bad_specs() {
        for spec in [
            "noequals",
            "=X=1",
            "a=",
            "a=justaword",
            "a=preload:nosuchalloc",
            "a=LD_PRELOAD=/x.so",
        ] {
            let mut i = input(&["true"]);
            i.custom = vec![spec.into()];
            assert!(build(i).is_err(), "{spec} should be rejected");
        }
    }

    #[test]
    fn duplicate_and_malformed_env_keys_are_refused() {
        for (spec, expect) in [
            ("x=A=1 A=2", "variant 'x' sets A twice"),
            ("x=A=1 'B=2' A=3", "variant 'x' sets A twice"),
            ("x='=1'", "variant 'x': environment key \"\" is empty"),
            ("x='A=\0'", "NUL"),
        ] {
            let mut i = input(&["true"]);
            i.custom = vec![spec.into()];
            let e = build(i).unwrap_err().to_string();
            assert!(e.contains(expect), "{spec}: {e}");
        }
        let plan =
            "command = \"true\"\n[[variant]]\nname = \"x\"\nspec = \"A=1\"\nenv = { A = \"2\" }\n";
        let e = build(parse_plan_text(plan).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("variant 'x' sets A twice"), "{e}");
        let plan = "command = \"true\"\n[[variant]]\nname = \"y\"\nenv = { \"A=B\" = \"1\" }\n";
        let e = parse_plan_text(plan).unwrap_err();
        assert!(
            e.contains("variant 'y'") && e.contains("\"A=B\" contains '='"),
            "{e}"
        );
        let plan = "command = \"true\"\n[[variant]]\nname = \"z\"\nenv = { \"\" = \"1\" }\n";
        assert!(parse_plan_text(plan).unwrap_err().contains("is empty"));
    }

    #[test]
    fn numbers_out_of_range_name_the_flag_and_range() {
        type Case = (fn(&mut PlanInput), &'static str);
        let cases: [Case; 9] = [
            (|i| i.interval = Some("1e300".into()), "--interval 1e300"),
            (|i| i.timeout = Some("1e300".into()), "--timeout 1e300"),
            (|i| i.interval = Some("2h".into()), "from 10ms to 1h"),
            (
                |i| i.warmup = Some(4_294_967_294),
                "--warmup 4294967294: must be from 0 to 10000",
            ),
            (
                |i| i.runs = Some(4_294_967_295),
                "--runs 4294967295: must be from 1 to 10000",
            ),
            (
                |i| i.pids_limit = Some(u64::MAX),
                "--pids-limit 18446744073709551615: must be from 1 to 4194304",
            ),
            (|i| i.seed = Some(u64::MAX), "--seed"),
            (
                |i| i.memory_limit = Some("1000T".into()),
                "--memory-limit 1000T: must be from 4M to 64T",
            ),
            (
                |i| {
                    i.server.url = Some("http://127.0.0.1:{port}/".into());
                    i.server.duration = Some("1e18".into());
                },
                "--duration 1e18: must be from 1ms to 1day",
            ),
        ];
        for (set, expect) in cases {
            let mut i = input(&["true"]);
            set(&mut i);
            let e = build(i).unwrap_err().to_string();
            assert!(e.contains(expect), "{expect}: {e}");
        }
    }

    #[test]
    fn a_server_setting_without_url_is_not_ignored() {
        let mut i = input(&["true"]);
        i.server.load_threads = Some(2);
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("a server trial needs --url"), "{e}");
    }

    #[test]
    fn preload_path_with_a_space_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("my lib.so");
        std::fs::write(&lib, b"").unwrap();
        let mut i = input(&["true"]);
        i.custom = vec![format!("x=preload:'{}'", lib.display())];
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("LD_PRELOAD splits on spaces"), "{e}");
    }

    #[test]
    fn runs_zero_and_bad_durations() {
        let mut i = input(&["true"]);
        i.runs = Some(0);
        assert!(build(i).unwrap_err().to_string().contains("--runs"));
        let mut i = input(&["true"]);
        i.interval = Some("soon".into());
        assert!(build(i)
            .unwrap_err()
            .to_string()
            .contains("--interval soon"));
        let mut i = input(&["true"]);
        i.interval = Some("1ms".into());
        assert!(build(i).is_err());
        let mut i = input(&["true"]);
        i.timeout = Some("0s".into());
        assert!(build(i).is_err());
    }

    #[test]
    fn limits_are_validated() {
        let mut i = input(&["true"]);
        i.memory_limit = Some("512M".into());
        i.cpus = Some("1.5".into());
        i.cpuset = Some("0-1".into());
        i.pids_limit = Some(64);
        let l = build(i).unwrap().plan.limits;
        assert_eq!(l.memory_max, Some(512 << 20));
        assert_eq!(l.cpus, Some(1.5));
        assert_eq!(l.cpuset.as_deref(), Some("0-1"));
        assert_eq!(l.pids_max, Some(64));
        for (field, value, expect) in [
            ("mem", "1K", "--memory-limit 1K"),
            ("mem", "lots", "--memory-limit lots"),
            ("cpus", "0", "--cpus 0"),
            ("cpus", "two", "--cpus two"),
            ("cpuset", "5", "CPU 5 does not exist"),
            ("cpuset", "1-0", "--cpuset 1-0"),
        ] {
            let mut i = input(&["true"]);
            match field {
                "mem" => i.memory_limit = Some(value.into()),
                "cpus" => i.cpus = Some(value.into()),
                _ => i.cpuset = Some(value.into()),
            }
            let e = build(i).unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
        }
    }

    #[test]
    fn command_lookup() {
        assert!(matches!(
            build(input(&["no-such-command-xyz"])),
            Err(PlanError::CommandNotFound { .. })
        ));
        assert!(matches!(
            build(input(&["/etc/passwd"])),
            Err(PlanError::NotExecutable { .. })
        ));
        assert!(matches!(
            build(PlanInput::default()),
            Err(PlanError::NoCommand)
        ));
    }

    #[test]
    fn plan_file_parses_and_flags_win() {
        let text = r#"
command = "ruby job.rb --n 'two words'"
runs = 3
variants = ["glibc", "arena2", "yjit"]
timeout = "5m"

[[variant]]
name = "yjit"
env = { RUBYOPT = "--yjit" }
"#;
        let file = parse_plan_text(text).unwrap();
        assert_eq!(file.command, ["ruby", "job.rb", "--n", "two words"]);
        assert_eq!(file.custom.len(), 1);
        let (name, spec) = file.custom[0].split_once('=').unwrap();
        assert_eq!(name, "yjit");
        assert_eq!(shell_words::split(spec).unwrap(), ["RUBYOPT=--yjit"]);
        let flags = PlanInput {
            runs: Some(7),
            ..Default::default()
        };
        let merged = flags.or(file);
        assert_eq!(merged.runs, Some(7));
        assert_eq!(merged.timeout.as_deref(), Some("5m"));
    }

    #[test]
    fn plan_file_server_section() {
        let text = "command = \"true --port {port}\"\n[server]\nurl = \"http://127.0.0.1:{port}/x\"\nduration = \"5s\"\nrate = 50.0\nconnections = 8\n";
        let file = parse_plan_text(text).unwrap();
        let b = build(file).map(|b| b.plan.server).unwrap().unwrap();
        assert_eq!(b.url, "http://127.0.0.1:{port}/x");
        assert_eq!(b.duration_ms, 5000);
        assert_eq!(b.rate, Some(50.0));
        assert_eq!(b.connections, 8);
        assert_eq!(b.cooldown_ms, 10_000);
        assert_eq!(b.source, RequestSource::Url);
        let e = parse_plan_text("[server]\nurll = \"x\"\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("urll"), "{e}");
    }

    #[test]
    fn worker_settings_and_the_two_meanings_of_duration() {
        // Without a URL, --duration is the service's.
        let mut i = input(&["true"]);
        i.server.duration = Some("2s".into());
        let p = build(i).unwrap().plan;
        assert!(p.server.is_none());
        assert_eq!(p.worker.unwrap().duration_ms, Some(2000));
        // With one, the load's.
        let mut i = input(&["true"]);
        i.server.url = Some("http://127.0.0.1:{port}/".into());
        i.server.duration = Some("2s".into());
        let p = build(i).unwrap().plan;
        assert_eq!(p.server.unwrap().duration_ms, 2000);
        assert!(p.worker.is_none());
        // A plan file's [worker] section; a --duration flag wins over it.
        let file =
            parse_plan_text("command = \"true\"\n[worker]\nbefore = \"true\"\ndriver = \"sleep 1\"\nduration = \"10m\"\n")
                .unwrap();
        let mut flags = PlanInput::default();
        flags.server.duration = Some("3s".into());
        let w = build(flags.or(file)).unwrap().plan.worker.unwrap();
        assert_eq!(w.before.as_deref(), Some("true"));
        assert_eq!(w.driver.as_deref(), Some("sleep 1"));
        assert_eq!(w.duration_ms, Some(3000));
        assert_eq!(w.before_timeout_ms, DEFAULT_BEFORE_TIMEOUT_MS);
        let e = parse_plan_text("[worker]\ndriverr = \"x\"\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("driverr"), "{e}");
    }

    #[test]
    fn bad_worker_settings_name_the_flag() {
        let with = |f: &dyn Fn(&mut PlanInput)| {
            let mut i = input(&["true"]);
            f(&mut i);
            build(i).unwrap_err().to_string()
        };
        let e = with(&|i| i.worker.before = Some("  ".into()));
        assert!(e.starts_with("--before '  ': an empty command"), "{e}");
        let e = with(&|i| i.worker.driver = Some("no-such-program-xyz --go".into()));
        assert!(
            e.starts_with("--driver 'no-such-program-xyz --go'") && e.contains("not found"),
            "{e}"
        );
        let e = with(&|i| i.worker.driver = Some("echo 'unclosed".into()));
        assert!(e.contains("quotes"), "{e}");
        let e = with(&|i| {
            i.worker.driver = Some("sleep 1".into());
            i.server.url = Some("http://127.0.0.1:{port}/".into());
        });
        assert!(
            e.contains("--driver") && e.contains("cannot be combined with --url"),
            "{e}"
        );
        let e = with(&|i| i.server.duration = Some("0s".into()));
        assert!(e.starts_with("--duration 0s"), "{e}");
        let e = with(&|i| {
            i.server.duration = Some("1m".into());
            i.timeout = Some("30s".into());
        });
        assert!(e.contains("--timeout"), "{e}");
        // Shell syntax and builtins are the shell's business.
        for ok in [
            "cd /tmp && true",
            "X=1 true",
            "for i in 1; do :; done",
            "$HOME/x",
        ] {
            let mut i = input(&["true"]);
            i.worker.before = Some(ok.into());
            assert!(build(i).is_ok(), "{ok}");
        }
    }

    #[test]
    fn plan_file_errors_name_line_and_column() {
        let e = parse_plan_text("runs = 3\nvariants = [\"a\",\n  oops]\n").unwrap_err();
        assert!(e.starts_with("line 3, column 3"), "{e}");
        let e = parse_plan_text("runz = 3\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("runz"), "{e}");
    }

    #[test]
    fn probes_default_to_the_allocator_and_step_aside_under_a_pids_limit() {
        let mut notes = Vec::new();
        let p = build_probes(&PlanInput::default(), &mut notes).unwrap();
        assert_eq!(p.kinds, vec![ProbeKind::Allocator]);
        assert_eq!(p.interval_ms, 1000);
        let limited = PlanInput {
            pids_limit: Some(24),
            ..Default::default()
        };
        assert!(build_probes(&limited, &mut notes).unwrap().kinds.is_empty());
        assert!(notes[0].contains("--probe allocator"), "{notes:?}");
        let asked = PlanInput {
            pids_limit: Some(24),
            probes: Some(vec!["allocator".into(), "ruby".into()]),
            ..Default::default()
        };
        let p = build_probes(&asked, &mut notes).unwrap();
        assert_eq!(p.kinds, vec![ProbeKind::Allocator, ProbeKind::Ruby]);
        let none = PlanInput {
            no_probes: true,
            ..Default::default()
        };
        assert!(build_probes(&none, &mut notes).unwrap().kinds.is_empty());
        let bad = PlanInput {
            probes: Some(vec!["perl".into()]),
            ..Default::default()
        };
        let e = build_probes(&bad, &mut notes).unwrap_err().to_string();
        assert!(
            e.contains("--probe perl") && e.contains("allocator, ruby, jvm"),
            "{e}"
        );
        let fast = PlanInput {
            probe_interval: Some("5ms".into()),
            ..Default::default()
        };
        let e = build_probes(&fast, &mut notes).unwrap_err().to_string();
        assert!(e.contains("--probe-interval"), "{e}");
    }

    #[test]
    fn plan_files_name_their_probes() {
        let i = parse_plan_text(
            "command = \"true\"\nprobes = [\"ruby\"]\nprobe_interval = \"250ms\"\n",
        )
        .unwrap();
        assert_eq!(i.probes, Some(vec!["ruby".to_string()]));
        assert_eq!(i.probe_interval.as_deref(), Some("250ms"));
        let off = parse_plan_text("command = \"true\"\nprobes = []\n").unwrap();
        assert!(off.no_probes);
    }

    #[test]
    fn workload_env_adds_preload_first() {
        let v = Variant {
            name: "je".into(),
            env: vec![("A".into(), "1".into())],
            preload: Some(PathBuf::from("/lib/libjemalloc.so.2")),
            preload_spec: Some("jemalloc".into()),
            origin: VariantOrigin::Catalog,
            program: None,
        };
        let env = v.workload_env(Some("/other.so"));
        assert_eq!(env[1].1, "/lib/libjemalloc.so.2 /other.so");
        assert_eq!(v.describe(), "preload:jemalloc A=1");
    }

    fn parse(spec: &str) -> Result<Variant, PlanError> {
        let (loc, wd) = ctx();
        parse_custom_variant(
            spec,
            &PlanContext {
                locator: &loc,
                distro: Distro::Debian,
                path_var: "/usr/bin:/bin".into(),
                workdir: wd,
                online_cpus: 2,
            },
        )
    }

    #[test]
    fn a_variant_may_replace_the_program_with_settings_beside() {
        let v = parse("other=program:/bin/sh 'RUBYOPT=--yjit -W0'").unwrap();
        assert_eq!(v.program.as_ref().unwrap().path(), Path::new("/bin/sh"));
        assert_eq!(v.env, vec![("RUBYOPT".into(), "--yjit -W0".into())]);
        assert_eq!(v.describe(), "program:/bin/sh RUBYOPT=--yjit -W0");
        // Looked up in PATH like the command itself.
        let v = parse("p=program:sh").unwrap();
        assert!(v.program.unwrap().path().ends_with("sh"));
    }

    #[test]
    fn a_variant_may_replace_the_whole_command() {
        let v = parse(r#"c=command:'sh -c "sleep 1"' A=1"#).unwrap();
        match &v.program {
            Some(VariantProgram::Command { argv, path }) => {
                assert_eq!(argv, &["sh", "-c", "sleep 1"]);
                assert!(path.ends_with("sh"));
            }
            other => panic!("{other:?}"),
        }
        assert!(v.describe().starts_with("command:") && v.describe().ends_with(" A=1"));
        // What describe() shows parses back to the same variant.
        let again = parse(&format!("c={}", v.describe())).unwrap();
        assert_eq!(again, v);
        let plan = build(input(&["true"])).unwrap().plan;
        let (prog, argv) = plan.launch_command(&v);
        assert!(prog.ends_with("sh"));
        assert_eq!(argv, ["sh", "-c", "sleep 1"]);
    }

    #[test]
    fn bad_program_variants_name_the_variant_and_why() {
        let e = parse("x=program:/nonexistent/ruby")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("variant 'x': program:/nonexistent/ruby does not exist"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("not-a-program");
        std::fs::write(&plain, "data").unwrap();
        let e = parse(&format!("x=program:{}", plain.display()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not an executable file"), "{e}");
        let e = parse("x=program:/bin/sh command:true")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("program:/bin/sh and command:true replace the program twice"),
            "{e}"
        );
        let e = parse("x=command:").unwrap_err().to_string();
        assert!(e.contains("command: is empty"), "{e}");
        let e = parse(r#"x=command:'a "b'"#).unwrap_err().to_string();
        assert!(e.contains("cannot be split"), "{e}");
        let e = parse("x=program:no-such-program-here")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not found in PATH"), "{e}");
    }

    #[test]
    fn plan_files_give_program_and_command() {
        let text = r#"command = "true"
[[variant]]
name = "a"
program = "/bin/sh"
[variant.env]
X = "1"
[[variant]]
name = "b"
command = ["sh", "-c", "echo 'hi there'"]
"#;
        let i = parse_plan_text(text).unwrap();
        let a = parse(&i.custom[0]).unwrap();
        assert_eq!(a.program.unwrap().path(), Path::new("/bin/sh"));
        assert_eq!(a.env, vec![("X".into(), "1".into())]);
        let b = parse(&i.custom[1]).unwrap();
        match b.program {
            Some(VariantProgram::Command { argv, .. }) => {
                assert_eq!(argv, ["sh", "-c", "echo 'hi there'"])
            }
            other => panic!("{other:?}"),
        }
        let e =
            parse_plan_text("command = \"true\"\n[[variant]]\nname = \"a\"\nprograms = \"x\"\n")
                .unwrap_err();
        assert!(e.contains("programs"), "{e}");
    }

    #[test]
    fn a_stored_plan_without_programs_reads_and_writes_the_same() {
        let v = parse("a=X=1").unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert!(!json.contains("program"), "{json}");
        let back: Variant = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
        let p = parse("p=program:/bin/sh").unwrap();
        let back: Variant = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
