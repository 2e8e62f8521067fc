//! The plan as plain data (variants, workload, limits, probes, server and worker
//! settings) and its fingerprint.

use super::*;

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
    /// Huge pages, glibc tunables, trimming (`thp:`, `tunable:`, `trim:`). Absent from plans
    /// stored before variants had knobs (which keeps their fingerprint).
    #[serde(default, skip_serializing_if = "Knobs::is_empty")]
    pub knobs: Knobs,
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
    pub(crate) fn workload_env(&self, inherited_preload: Option<&str>) -> Vec<(String, String)> {
        let mut env = self.settings();
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

    /// The environment settings the workload gets from this variant (no `LD_PRELOAD`): its
    /// own, with its knobs' merged in (tunables into `GLIBC_TUNABLES`, jemalloc's
    /// `thp:always` into `MALLOC_CONF`). What a production deployment sets too.
    pub fn settings(&self) -> Vec<(String, String)> {
        self.knobs.merged_env(&self.env)
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
        parts.extend(self.knobs.words());
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
    pub(crate) fn wants_port(&self) -> bool {
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
    /// What each Ruby `require` adds (RSS and objects), through `RUBYOPT`.
    Require,
    /// Where the CPU time goes (the allocator's share), from perf's `cpu-clock` samples.
    Cpu,
}

impl ProbeKind {
    pub(crate) const ALL: [ProbeKind; 5] = [
        ProbeKind::Allocator,
        ProbeKind::Ruby,
        ProbeKind::Jvm,
        ProbeKind::Require,
        ProbeKind::Cpu,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Allocator => "allocator",
            ProbeKind::Ruby => "ruby",
            ProbeKind::Jvm => "jvm",
            ProbeKind::Require => "require",
            ProbeKind::Cpu => "cpu",
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
    /// `--require-cut-off`: the require trees leave out what added less (bytes); absent:
    /// the reports' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_cut_off_bytes: Option<u64>,
}

impl Default for ProbePlan {
    /// No probes: what a plan stored before probes existed means.
    fn default() -> ProbePlan {
        ProbePlan {
            kinds: Vec::new(),
            interval_ms: DEFAULT_PROBE_INTERVAL_MS,
            require_cut_off_bytes: None,
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
pub(crate) const DEFAULT_PROBE_INTERVAL_MS: u64 = 1000;

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
pub(crate) fn substitute(text: &str, port: u16) -> String {
    text.replace(PORT_PLACEHOLDER, &port.to_string())
}

/// Replaces every `{port}` in a shell command with the port, shell-quoted.
pub(crate) fn substitute_quoted(command: &str, port: u16) -> String {
    command.replace(PORT_PLACEHOLDER, &shell_words::quote(&port.to_string()))
}

impl ServerPlan {
    /// Reads the plan's request source: the requests, and notes for the user (counts,
    /// unparseable log lines). Errors name the file and line.
    pub(crate) fn read_requests(&self) -> Result<(crate::load::Source, Vec<String>), String> {
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
    /// The program and argv to launch for `v`, `fill` applied to every argument after
    /// argv[0] (which stays as given): `{port}` and the like.
    pub(crate) fn launch_argv(
        &self,
        v: &Variant,
        fill: &dyn Fn(&str) -> String,
    ) -> (PathBuf, Vec<String>) {
        let (program, command) = self.launch_command(v);
        let argv = command
            .iter()
            .enumerate()
            .map(|(i, a)| if i == 0 { a.clone() } else { fill(a) })
            .collect();
        (program, argv)
    }

    pub(crate) fn launch_command(&self, v: &Variant) -> (PathBuf, Vec<String>) {
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
    /// Absent without knobs, so that plans without them keep their fingerprint.
    #[serde(skip_serializing_if = "Knobs::is_empty")]
    knobs: &'a Knobs,
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
                    knobs: &v.knobs,
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
