//! Command-line definitions (clap) only. Nothing here outlives parsing: the
//! app turns these into a [`crate::plan::PlanInput`] and plain settings.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Server- and worker-trial flags: declared once, with the plan file's `[server]` and
/// `[worker]` keys, in [`memtrial::plan`].
pub use memtrial::plan::{LimitsInput, ServerInput as ServerArgs, WorkerInput as WorkerArgs};

#[derive(Debug, Parser)]
#[command(
    name = "memtrial",
    version,
    about = "Run a workload under every allocator variant and compare memory, time and CPU with evidence",
    after_help = "Exit codes: 0 all measured runs ok · 1 some runs failed, timed out or their variant \
did not take effect · 2 usage or internal error · 3 gate: a regression · 4 gate: undecided · \
5 gate: the expected recommendation changed · 130 interrupted (completed runs are kept)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The SQLite database holding experiments.
    #[arg(
        long,
        global = true,
        default_value = "memtrial.db",
        value_name = "FILE"
    )]
    pub db: PathBuf,
    /// Print nothing but errors (and the final table unless --json -).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Colour in the terminal output.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command under every variant, repeated, and compare.
    Run(Box<RunArgs>),
    /// Show the variant catalog: what is available here, where, how to install the rest.
    Variants,
    /// List the experiments in the store.
    List,
    /// Show a stored experiment again (the latest by default).
    Report(ReportArgs),
    /// Add experiment records written by `memtrial run --json FILE` on other machines or
    /// pods: a record of the same plan (fingerprint) joins its experiment, each run with
    /// its host; all files are imported or none.
    Import(ImportArgs),
    /// What to run with, and how to apply it (the latest experiment by default).
    Recommend(RecommendArgs),
    /// Built-in reference workloads.
    #[command(subcommand)]
    Workload(WorkloadCommand),
    /// Run the fragmentation workload under every available variant and show the table.
    Demo(DemoArgs),
    /// Diagnose a running process: memory by kind, allocator with evidence, glibc arenas
    /// against their limit, cgroup limits, advice; --watch for a leak-or-plateau verdict.
    Inspect(InspectArgs),
    /// HTTP load only, like wrk: closed loop, or --rate for an open loop without
    /// coordinated omission; from one URL, a targets file or a replayed access log.
    Load(LoadArgs),
    /// Serve Prometheus metrics for the processes matching a regex: RSS, PSS, USS, swap,
    /// threads, allocator, glibc arenas against their limit, CPU quota, the arena pitfall.
    Exporter(ExporterArgs),
    /// Write the allocator probe library (libmemtrial-probe.so) to a file, to preload into
    /// processes memtrial does not start, such as a Deployment's, for the exporter to read;
    /// prints its path, size and SHA-256.
    ProbeLibrary(ProbeLibraryArgs),
    /// Judge the fleet from Prometheus: a baseline and variant groups (label selectors), or
    /// one selector before and after a moment; memory per pod and time block, each group's
    /// median, ratios to the baseline with intervals, and a verdict.
    Judge(JudgeArgs),
    /// A memory gate for CI: run the variants (two builds: --variant 'main=program:…'
    /// --variant 'pr=program:…'; the first is the baseline unless --baseline names another)
    /// interleaved, or gate against a stored record (--against), and fail when a figure is
    /// worse than the baseline beyond a tolerance with 95% confidence (--fail-if 'peak_rss >
    /// +5%'); a Markdown summary, JUnit XML. Exit 3: a regression; 4: undecided; 5: the
    /// expected recommendation changed. `memtrial run`'s flags apply (not --resume or
    /// --in-container).
    Gate(Box<GateArgs>),
    /// Every variant of a server side by side for hours: each instance in its own cgroup
    /// with the same limits, all sent the same requests at the same moments; memory,
    /// latency and errors per time window as ratios to the baseline with intervals;
    /// resumable, and stopped by --until-decided when the evidence is in.
    Soak(Box<SoakArgs>),
    /// The plan as a Kubernetes Indexed Job, one pod per run under the production pod's
    /// limits (YAML on standard output); `kube collect NAME` gathers the pods' records.
    Kube(KubeArgs),
}

/// `memtrial kube PLAN --image IMG --cpu N --memory SIZE` or `memtrial kube collect NAME`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct KubeArgs {
    #[command(subcommand)]
    pub command: Option<KubeCommand>,
    /// The TOML plan file (it must name its variants and set no limits).
    #[arg(value_name = "PLAN", required = true)]
    pub plan: Option<PathBuf>,
    /// The application's image: the pods run the plan's command in it.
    #[arg(long, value_name = "IMAGE", required = true)]
    pub image: Option<String>,
    /// CPUs of the production pod, its request and limit (e.g. 8, 0.5, 500m; 10m to 4096).
    #[arg(long, value_name = "N", required = true)]
    pub cpu: Option<String>,
    /// Memory of the production pod, its request and limit (e.g. 8Gi, 512Mi; binary units,
    /// 8G = 8Gi; 4Mi to 64Ti).
    #[arg(long, value_name = "SIZE", required = true)]
    pub memory: Option<String>,
    /// Pods running at once, 1 to 10000 (each on whatever node the scheduler picks).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub parallelism: u32,
    /// The Job's name (a DNS-1123 label) [default: memtrial-<the plan file's stem>].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The image the init container copies memtrial and the allocator libraries from
    /// (built from docker/Dockerfile) [default: memtrial/memtrial:<this version>].
    #[arg(long, value_name = "IMAGE")]
    pub memtrial_image: Option<String>,
    /// When the node pulls both images [default: Kubernetes' own: Always for an untagged
    /// or :latest image, else IfNotPresent]. `Never` for images imported on the nodes
    /// without a registry.
    #[arg(long, value_name = "POLICY")]
    pub image_pull_policy: Option<PullPolicyArg>,
}

/// A container's `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PullPolicyArg {
    /// Pull whenever a pod starts.
    #[value(name = "Always", alias = "always")]
    Always,
    /// Pull only when the node does not have the image.
    #[value(name = "IfNotPresent", alias = "if-not-present")]
    IfNotPresent,
    /// Never pull: the image must be on the node.
    #[value(name = "Never", alias = "never")]
    Never,
}

#[derive(Debug, Subcommand)]
pub enum KubeCommand {
    /// Gather each index's record from the Job's pods through kubectl, into --out, and
    /// say which indexes are missing or failed.
    Collect(CollectArgs),
}

#[derive(Debug, Args)]
pub struct CollectArgs {
    /// The Job's name, as `memtrial kube` rendered it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The namespace of the Job [default: kubectl's current one].
    #[arg(long, short = 'n', value_name = "NS")]
    pub namespace: Option<String>,
    /// The kubectl to run (its context and credentials are used as they are).
    #[arg(long, value_name = "PATH", default_value = "kubectl")]
    pub kubectl: PathBuf,
    /// Where the records go, one NAME-INDEX.json per index [default: NAME-records].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// First wait up to DURATION (e.g. 30m, 24h) for every index to finish, asking every
    /// 2 s; a pod that cannot start (its image cannot be pulled, its container not made)
    /// ends the wait at once, named with Kubernetes' reason [default: collect now].
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Write the full record as JSON to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per run to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write every memory sample of every run as CSV to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub samples_csv: Option<PathBuf>,
    /// Write a self-contained HTML report with charts to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write a Markdown summary (for a pull request) to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Print every section on the terminal (what each figure rests on, leak or
    /// fragmentation per variant, where the memory is, the allocator's free memory, what
    /// to try next), not only the answer.
    #[arg(long)]
    pub detail: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Measured runs per variant, 1 to 10000 [default: 5].
    #[arg(long, short = 'n', value_name = "N")]
    pub runs: Option<u32>,
    /// Warm-up runs per variant, run first and discarded, 0 to 10000 [default: 0].
    #[arg(long, value_name = "N")]
    pub warmup: Option<u32>,
    /// Comma-separated variants to run [default: the built-in allocator and arena variants
    /// installed here; the knobs nothp, glibc-thp, jemalloc-thp and trim run when named;
    /// none with --variant].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub variants: Option<Vec<String>>,
    /// A custom variant NAME=SPEC: space-separated KEY=VALUE settings, preload:LIB (a catalog
    /// allocator or a path to a .so), and one program:PATH (another program, same arguments)
    /// or command:'…' (another command). Repeatable.
    #[arg(long = "variant", value_name = "NAME=SPEC")]
    pub custom: Vec<String>,
    /// The variant ratios are computed against [default: glibc].
    #[arg(long, value_name = "NAME")]
    pub baseline: Option<String>,
    /// A TOML plan file; flags given here override it.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Sampling interval for the memory time series, 10ms to 1h [default: 100ms].
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// Stop a run that takes longer than this (e.g. 30s, 5m; at most 7 days) and record it
    /// as a timeout.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Seed for the run order, 0 to 2^53-1 (recorded; random by default).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub limits: LimitsInput,
    /// Turn on a probe inside the workload: allocator (on by default), ruby (GC.stat and
    /// YJIT through RUBYOPT), jvm (Native Memory Tracking through JAVA_TOOL_OPTIONS and
    /// jcmd), require (what each Ruby require adds, through RUBYOPT), cpu (the allocator's
    /// share of the CPU, from perf samples; root, or user space only with
    /// kernel.perf_event_paranoid ≤ 2). Repeatable or comma-separated.
    #[arg(
        long = "probe",
        value_delimiter = ',',
        value_name = "NAME",
        conflicts_with = "no_probes"
    )]
    pub probes: Option<Vec<String>>,
    /// No probes inside the workload: the kernel's counters only.
    #[arg(long)]
    pub no_probes: bool,
    /// How often the probes inside the workload report, 10ms to 1h [default: 1s].
    #[arg(long, value_name = "DURATION")]
    pub probe_interval: Option<String>,
    /// With --probe require: leave out of the reports' require trees what added less than
    /// SIZE (e.g. 1MiB; the JSON record keeps every require) [default: 0.3MiB].
    #[arg(long, value_name = "SIZE")]
    pub require_cut_off: Option<String>,
    /// Keep adding a block of runs (every variant once more, shuffled) until every
    /// variant is decided — its memory ratio's 95% interval clear of the pick's threshold
    /// at each of the last 2 looks — or --max-runs is reached; --runs is the least.
    #[arg(long, conflicts_with = "in_container")]
    pub until_decided: bool,
    /// With --until-decided: the most measured runs per variant, 3 to 10000 [default: 30].
    #[arg(long, value_name = "N", requires = "until_decided")]
    pub max_runs: Option<u32>,
    /// Keep at most SIZE of each run's output (its stdout, its stderr, and a --before
    /// hook's or --driver's): the first and last halves, with a line between saying how much
    /// was left out (e.g. 16M; at least 64K; 0 keeps everything) [default: 64M].
    #[arg(long, value_name = "SIZE", value_parser = memtrial::trial::logcap::parse_limit)]
    pub log_limit: Option<u64>,
    /// Finish an interrupted experiment (the latest, or ID): runs only what is missing,
    /// with the same plan and seed.
    /// Every other flag of `run` but --confirm-command, --log-limit and the output flags
    /// (where its reports go) is refused with it, by name.
    #[arg(long, value_name = "ID", num_args = 0..=1)]
    pub resume: Option<Option<i64>>,
    /// With --resume ID of an experiment made on another host (imported): runs its command
    /// here. Repeat the command exactly as the refusal shows it, as one argument.
    #[arg(long, value_name = "COMMAND", requires = "resume")]
    pub confirm_command: Option<String>,
    /// Run one slot of the plan's schedule inside the container memtrial is in (a
    /// Kubernetes pod, see `memtrial kube`): no cgroup is made, the container's own limits
    /// are the run's and are recorded, and the JSON record is printed on standard output as
    /// one line `memtrial-record: {…}`. Needs --index and a fixed seed; refuses limit flags.
    #[arg(long, requires = "index")]
    pub in_container: bool,
    /// With --in-container: the slot to run, from 0, in the plan's seeded schedule (warm-up
    /// slots included, first), e.g. $JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "N", requires = "in_container")]
    pub index: Option<u32>,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The workload command and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `memtrial gate`: `memtrial run`'s flags, then the gate's own.
#[derive(Debug, Args)]
pub struct GateArgs {
    #[command(flatten)]
    pub gate: GateFlags,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct GateFlags {
    /// Fail when a figure is worse than the baseline's by more than a tolerance, with 95%
    /// confidence: FIGURE > +N% (or +N in its unit: +20MiB, +0.5s, +10ms) where higher is
    /// worse, FIGURE < -N% where lower is (throughput). FIGURE: peak_rss, mean_rss,
    /// peak_pss, wall, cpu, p50, p95, p99, throughput, … any key of the record, or a
    /// driver's figure. Repeatable.
    #[arg(long = "fail-if", value_name = "EXPR")]
    pub fail_if: Vec<String>,
    /// What an undecided criterion (its interval straddles the tolerance) does: fail
    /// (exit 4) or pass (exit 0, still said).
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = UndecidedPolicy::Fail)]
    pub undecided: UndecidedPolicy,
    /// Gate against a stored record of the old build (`memtrial run --json FILE`): its
    /// baseline's runs are the baseline, the variants run here are judged against them.
    /// Refused when the record's host differs from this one (see --across-hosts).
    #[arg(long, value_name = "FILE")]
    pub against: Option<PathBuf>,
    /// With --against: gate even though the record ran on another machine (its facts
    /// differ: host, CPUs, kernel, glibc, limits, memtrial, allocator libraries); the
    /// differences are said in every output.
    #[arg(long, requires = "against")]
    pub across_hosts: bool,
    /// Write the Markdown summary to FILE ('-' for standard output) [default: appended to
    /// $GITHUB_STEP_SUMMARY when it is set].
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Write JUnit XML to FILE: one test case per gated figure and variant.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write the gate's verdicts as JSON to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub gate_json: Option<PathBuf>,
    /// Fail (exit 5) unless memtrial's recommendation on these runs is NAME (a pick of
    /// it; or, for the baseline, keeping it); an undecided recommendation fails too.
    #[arg(long, value_name = "NAME")]
    pub expect_recommendation: Option<String>,
}

/// What an undecided criterion does to a gate's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UndecidedPolicy {
    Fail,
    Pass,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Experiment id (see `memtrial list`) [default: the latest]; with --soak or
    /// --follow, the soak's id.
    pub id: Option<i64>,
    /// Show a soak (the latest by default) instead of an experiment.
    #[arg(long, conflicts_with = "by")]
    pub soak: bool,
    /// Show the soak's table again every window until it ends (--html rewrites its page
    /// too, which reloads itself in the browser); implies --soak.
    #[arg(long, conflicts_with = "by")]
    pub follow: bool,
    /// Compare within each host: one table per host, each variant against the baseline
    /// on the same host, and what differs between the hosts.
    #[arg(long, value_enum, value_name = "FACTOR")]
    pub by: Option<GroupBy>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What a report is split by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupBy {
    /// The machine (or `MEMTRIAL_HOST`) each run ran on.
    Host,
}

/// `memtrial soak --variants … --url … --rate R --duration 6h -- COMMAND` or
/// `memtrial soak --resume [ID]`. `--duration` is the server settings' own flag (one
/// argument, read as the soak's length), its help said for a soak.
#[derive(Debug, Args)]
#[command(mut_arg("duration", |a| a.help(
    "How long the soak runs (e.g. 6h, 90m; 10s to 7 days); with --until-decided, use --max-duration"
).help_heading(None::<&str>)))]
// A soak refuses the server settings' warm-up and cool-down (`check_feed`): not shown.
#[command(mut_arg("warmup_duration", |a| a.hide(true)))]
#[command(mut_arg("cooldown", |a| a.hide(true)))]
pub struct SoakArgs {
    /// Comma-separated variants, each one instance [default: the built-in allocator and
    /// arena variants installed here; the knobs nothp, glibc-thp, jemalloc-thp and trim run
    /// when named; none with --variant].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub variants: Option<Vec<String>>,
    /// A custom variant NAME=SPEC, as for `memtrial run`. Repeatable.
    #[arg(long = "variant", value_name = "NAME=SPEC")]
    pub custom: Vec<String>,
    /// The variant ratios are computed against [default: glibc].
    #[arg(long, value_name = "NAME")]
    pub baseline: Option<String>,
    /// Stop as soon as every variant is decided: the 95% interval of its memory ratio to
    /// the baseline wholly outside (a difference) or wholly inside (none that matters)
    /// 1 ± --margin after each of the last --consecutive windows. Needs --max-duration.
    #[arg(long, requires = "max_duration")]
    pub until_decided: bool,
    /// With --until-decided: the longest the soak may run (10s to 7 days).
    #[arg(
        long,
        value_name = "DURATION",
        requires = "until_decided",
        conflicts_with = "duration"
    )]
    pub max_duration: Option<String>,
    /// With --until-decided: the margin around 1, 0.005 to 0.5 [default: 0.05].
    #[arg(long, value_name = "FRACTION", requires = "until_decided")]
    pub margin: Option<f64>,
    /// With --until-decided: windows in a row the decision must hold, 1 to 100 [default: 3].
    #[arg(long, value_name = "N", requires = "until_decided")]
    pub consecutive: Option<u32>,
    /// The comparison's time window (e.g. 10m; 2s to 1 day) [default: 10m].
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// Windows after each start marked warm-up and left out, 0 to 1000 [default: 1].
    #[arg(long, value_name = "N")]
    pub warmup_windows: Option<u32>,
    /// How often each instance's memory is sampled (200ms to 1m) [default: 1s].
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    #[command(flatten)]
    pub limits: LimitsInput,
    /// No allocator probe inside the instances: no live/held bytes, no leak-or-fragmentation verdict.
    #[arg(long)]
    pub no_probes: bool,
    /// Keep at most SIZE of each instance's output (its stdout, its stderr, and a --before
    /// hook's or --driver's): the first and last halves, with a line between saying how much
    /// was left out (e.g. 16M; at least 64K; 0 keeps everything) [default: 64M].
    #[arg(long, value_name = "SIZE", value_parser = memtrial::trial::logcap::parse_limit)]
    pub log_limit: Option<u64>,
    /// Carry on an interrupted soak, or one whose memtrial died (the latest, or ID): its
    /// instances start again and the time between is recorded as a gap.
    /// Every other flag but --json, --html and --log-limit is refused with it, by name.
    #[arg(long, value_name = "ID", num_args = 0..=1)]
    pub resume: Option<Option<i64>>,
    /// Write the soak's summary as JSON to FILE ('-' for standard output) at its end.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML page with the charts to FILE (rewritten every window).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
    /// A worker soak: `--driver` runs once per instance, beside it, for the whole soak
    /// (it feeds that instance: {port}, {variant}, MEMTRIAL_VARIANT, MEMTRIAL_PORT and
    /// MEMTRIAL_PID name it); `--before` runs before each instance starts.
    #[command(flatten)]
    pub worker: WorkerArgs,
    /// The server or worker command; `{port}` becomes each instance's port and `{variant}`
    /// its variant's name.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// JSON records written by `memtrial run --json FILE` (the versions this memtrial
    /// reads: see the help), e.g. node-a.json node-b.json.
    #[arg(required = true, value_name = "FILE", help = {
        let (oldest, newest) = memtrial::store::import::versions_read();
        format!("JSON records written by `memtrial run --json FILE` or `memtrial report --json FILE` (schema_version {oldest} to {newest}), e.g. node-a.json node-b.json")
    })]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecommendArgs {
    /// Experiment id (see `memtrial list`) [default: the latest].
    pub id: Option<i64>,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadCommand {
    /// Many threads allocating mixed sizes, keeping survivors, freeing across threads:
    /// the pattern behind Sidekiq-style malloc fragmentation.
    Fragment(FragmentArgs),
    /// An HTTP/1.1 keep-alive cache server on 127.0.0.1 whose glibc heap fragments slowly
    /// (over minutes) across its handler threads' arenas: a fixture for long soaks.
    CacheServer(CacheServerArgs),
}

#[derive(Debug, Args, Clone)]
pub struct CacheServerArgs {
    /// Port on 127.0.0.1, 0 to 65535 (0: any free port, printed at start).
    #[arg(long)]
    pub port: u64,
    /// Handler threads, 1 to 1024 [default: 16].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// The cache's budget: live bytes plateau here (e.g. 96M), 1M to 64G [default: 64M].
    #[arg(long, value_name = "SIZE")]
    pub cache_size: Option<String>,
    /// Smallest cache entry, 1 byte to 1G [default: 64].
    #[arg(long, value_name = "SIZE")]
    pub min_size: Option<String>,
    /// Largest cache entry, 1 byte to 1G [default: 32K].
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Requests after which the hot spot of large entries moves on by one handler thread,
    /// 1 to 10^12 [default: 30000].
    #[arg(long, value_name = "N")]
    pub drift: Option<u64>,
    /// Seed of the size pattern.
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Debug, Args, Clone)]
pub struct FragmentArgs {
    /// Worker threads, 1 to 1024.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Run for this long (e.g. 3s; at most 1 day); exclusive with --iterations.
    #[arg(long, value_name = "DURATION", conflicts_with = "iterations")]
    pub seconds: Option<String>,
    /// Allocations per thread, 1 to 10^12; exclusive with --seconds.
    #[arg(long, value_name = "N")]
    pub iterations: Option<u64>,
    /// Smallest object (e.g. 16, 1K), 1 byte to 1G.
    #[arg(long, value_name = "SIZE")]
    pub min_size: Option<String>,
    /// Largest object (e.g. 16K, 1M), 1 byte to 1G.
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Fraction of objects kept alive until the end (0 to 1).
    #[arg(long, value_name = "FRACTION")]
    pub survivors: Option<f64>,
    /// Short-lived objects each thread keeps in its working set, 1 to 10000000.
    #[arg(long, value_name = "N")]
    pub live: Option<usize>,
    /// Seed of the allocation pattern.
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Runs per variant, 1 to 10000.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub runs: u32,
    /// Where the demo's HTML report goes.
    #[arg(long, default_value = "memtrial-demo.html", value_name = "FILE")]
    pub report: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The process to inspect (not with --top).
    #[arg(required_unless_present = "top", conflicts_with = "top")]
    pub pid: Option<i32>,
    /// The pmap-like breakdown by kind (size, RSS, PSS, USS, swap) with totals checked
    /// against pmap's and smaps_rollup's.
    #[arg(long)]
    pub maps: bool,
    /// Also sum RSS, PSS, USS, swap and threads over the process and its descendants.
    #[arg(long)]
    pub tree: bool,
    /// The N largest processes of the machine (1 to 100000), each with its allocator and arenas.
    #[arg(long, value_name = "N", conflicts_with_all = ["watch", "maps", "tree"])]
    pub top: Option<usize>,
    /// What --top ranks by.
    #[arg(long, value_enum, default_value = "rss", requires = "top")]
    pub by: RankByArg,
    /// Write the inspection as JSON to FILE ('-' or no value: standard output, instead of the text).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Also sample RSS for this long (e.g. 30s, 5m; at most 7 days) and judge leak or plateau.
    #[arg(long, value_name = "DURATION")]
    pub watch: Option<String>,
    /// Sampling interval for --watch, 10ms to 1h.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        requires = "watch"
    )]
    pub interval: String,
    /// Ask memtrial's probe library in the process (preloaded with MEMTRIAL_TRIM_DIR) to call
    /// malloc_trim(0) now, and say what it gave back and cost. Without it nothing is trimmed:
    /// the screen says what a trim could give back.
    #[arg(long, conflicts_with = "top")]
    pub trim: bool,
}

/// `memtrial load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The server: http://HOST[:PORT]/PATH (plain HTTP/1.1; https is not supported).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Measured time (e.g. 10s, 2m; at most 1 day), after the warm-up [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Load before the measurement, excluded from every figure (e.g. 5s; at most 1 day)
    /// [default: 0s].
    #[arg(long, value_name = "DURATION")]
    pub warmup_duration: Option<String>,
    /// Keep-alive connections (the most requests in flight), 1 to 100000 and within the
    /// open-file limit [default: 64].
    #[arg(long, short = 'c', value_name = "N")]
    pub connections: Option<usize>,
    /// Load threads, each with its own event loop, 1 to 1024 [default: half the CPUs, at
    /// least 1, at most --connections].
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,
    /// Open loop: this many requests per second in total (0.001 to 10000000), on a fixed
    /// schedule; latency counts from the intended send time.
    #[arg(long, value_name = "PER_SECOND", conflicts_with = "speed")]
    pub rate: Option<f64>,
    /// A targets file: one `URL` or `METHOD URL` per line, optional header lines and
    /// `@FILE` bodies (see docs/load.md); sent round-robin.
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub targets: Option<PathBuf>,
    /// Replay an nginx/Apache access log (common or combined format).
    #[arg(long, value_name = "LOG")]
    pub replay: Option<PathBuf>,
    /// Replay at the log's own pace sped up by X (e.g. 4; 0.001 to 1000000); without it,
    /// as fast as --connections (or --rate) allow.
    #[arg(long, value_name = "X", requires = "replay")]
    pub speed: Option<f64>,
    /// Methods replayed from the log [default: GET,HEAD].
    #[arg(long, value_delimiter = ',', value_name = "LIST", requires = "replay")]
    pub methods: Option<Vec<String>>,
    /// A request without a complete response after this long counts as a timeout (at most
    /// 1h) [default: 5s].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Write the result as JSON to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `memtrial judge`.
#[derive(Debug, Args)]
pub struct JudgeArgs {
    /// The Prometheus server: http://HOST:PORT.
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// The baseline group's label matchers, e.g. 'deployment="web",variant="glibc"'.
    #[arg(long, value_name = "SELECTOR", required_unless_present = "selector")]
    pub baseline: Option<String>,
    /// A group to compare with the baseline: NAME=SELECTOR. Repeatable.
    #[arg(long = "variant", value_name = "NAME=SELECTOR", requires = "baseline")]
    pub variants: Vec<String>,
    /// One group judged before and after a moment (with --before and --after).
    #[arg(long, value_name = "SELECTOR", conflicts_with_all = ["baseline", "variants"], requires = "before")]
    pub selector: Option<String>,
    /// With --selector: the moment and the window before it, TIME/DURATION
    /// (2026-11-01T00:00:00Z/7d).
    #[arg(long, value_name = "TIME/DURATION", requires = "selector")]
    pub before: Option<String>,
    /// With --before: the window after the moment [default: as long as the one before].
    #[arg(long, value_name = "DURATION", requires = "before")]
    pub after: Option<String>,
    /// With --before: compare the windows block by block at the same hours of the week
    /// (both windows whole weeks long, the one after as long as the one before).
    #[arg(long, value_name = "HOW", value_parser = ["hour-of-week"], requires = "before")]
    pub align: Option<String>,
    /// The window judged, ending at --until: 1s to 400d.
    #[arg(long, default_value = "24h", value_name = "DURATION")]
    pub since: String,
    /// The window's end (RFC 3339) [default: now].
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// The memory metric [default: the first of container_memory_working_set_bytes,
    /// memtrial_process_resident_bytes, memtrial_group_cgroup_working_set_bytes,
    /// memtrial_group_resident_bytes, process_resident_memory_bytes with the baseline's
    /// series].
    #[arg(long, value_name = "NAME")]
    pub metric: Option<String>,
    /// A latency histogram's _bucket series, with matchers of its own
    /// ('http_request_duration_seconds_bucket{route="/items"}'): each group's p50, p95 and
    /// throughput per block, against the baseline's.
    #[arg(long, value_name = "HISTOGRAM")]
    pub latency: Option<String>,
    /// The time block per pod [default: 1h for windows of 12h or more, else a twelfth].
    #[arg(long, value_name = "DURATION")]
    pub block: Option<String>,
    /// Left out at the start of a pod that started in the window [default: one block].
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,
    /// Also write the judgement as JSON to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the judgement as one self-contained HTML file (table, verdicts, a chart of
    /// each group's memory per block) to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// `memtrial exporter`.
#[derive(Debug, Args)]
pub struct ExporterArgs {
    /// Where to serve /metrics: IP:PORT (0.0.0.0:9464 for every interface).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "IP:PORT")]
    pub listen: String,
    /// The processes to export: a regex (Rust syntax) matched against the process name
    /// (comm) and the command line; one group per distinct comm.
    #[arg(long = "match", value_name = "REGEX")]
    pub matcher: String,
    /// Also one series per process, labelled with its PID (high cardinality: PIDs churn).
    #[arg(long)]
    pub per_process: bool,
    /// Time per scrape for the costly reads (smaps_rollup, maps, arena headers), 1ms to 60s.
    #[arg(long, default_value = "200ms", value_name = "DURATION")]
    pub budget: String,
    /// Read a process's costly figures again once they are this old (0s to 1 day);
    /// until then the cached ones are served.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub max_age: String,
    /// Where the allocator probe's reports are looked for, inside each process's root
    /// filesystem: a process is read when its MEMTRIAL_PROBE_DIR is this directory.
    #[arg(long, default_value = "/run/memtrial/probe", value_name = "DIR")]
    pub probe_dir: String,
}

/// `memtrial probe-library`.
#[derive(Debug, Args)]
pub struct ProbeLibraryArgs {
    /// The file to write (e.g. /opt/memtrial/libmemtrial-probe.so), in an existing
    /// directory: replaced whole (a temporary file renamed over it), mode 0644.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

/// What `inspect --top` ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RankByArg {
    /// Resident set size (cheap; shared pages count in every process).
    Rss,
    /// Proportional set size (reads every process's smaps_rollup).
    Pss,
}

/// Help text and parsing cannot drift: every range a flag's help states ("1 to 10000",
/// "10ms to 1h", "at most 7 days", "at least 64K") is the range its checks apply — the
/// constants of `memtrial::plan::settings` (and `--log-limit`'s) that the flag's check uses.
#[cfg(test)]
mod help_states_what_is_checked {
    use super::Cli;
    use clap::CommandFactory;
    use memtrial::plan::settings as s;
    use memtrial::units::{parse_duration, parse_size, DurationRange};

    /// Every (command path, flag, help) of the command line.
    fn flags(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String, String)>) {
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            let help = a
                .get_long_help()
                .or(a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            out.push((path.to_string(), long.to_string(), help));
        }
        for sub in cmd.get_subcommands() {
            let p = format!("{path} {}", sub.get_name()).trim().to_string();
            flags(sub, &p, out);
        }
    }

    /// What a flag's check accepts, in the units its bounds are read in.
    #[derive(Debug, Clone, Copy)]
    enum Range {
        Time(DurationRange),
        Number(f64, f64),
        Bytes(u64, u64),
        /// CPUs, bounds read as CPUs or millicores (`10m`).
        Cpus(f64, f64),
        AtLeastBytes(u64),
    }

    fn n<T: Into<f64>>((a, b): (T, T)) -> Range {
        Range::Number(a.into(), b.into())
    }

    fn ranges() -> Vec<(&'static [&'static str], &'static str, Range)> {
        use Range::*;
        const RUN: &[&str] = &["run", "gate"];
        const LIMITS: &[&str] = &["run", "gate", "soak"];
        const LOAD: &[&str] = &["run", "gate", "soak", "load"];
        const FRAGMENT: &[&str] = &["workload fragment"];
        const CACHE: &[&str] = &["workload cache-server"];
        let wide = |(a, b): (usize, usize)| Number(a as f64, b as f64);
        let big = |(a, b): (u64, u64)| Number(a as f64, b as f64);
        vec![
            (&["run", "gate", "demo"], "runs", n(s::RUNS)),
            (RUN, "warmup", n(s::WARMUP)),
            (RUN, "interval", Time(s::INTERVAL)),
            (RUN, "timeout", Time(s::TIMEOUT)),
            (RUN, "seed", big(s::SEED)),
            (RUN, "probe-interval", Time(s::PROBE_INTERVAL)),
            (RUN, "max-runs", n(s::MAX_RUNS)),
            (
                LIMITS,
                "memory-limit",
                Bytes(s::MEMORY_LIMIT.0, s::MEMORY_LIMIT.1),
            ),
            (LIMITS, "cpus", n(s::CPUS)),
            (LIMITS, "pids-limit", big(s::PIDS_LIMIT)),
            (
                LIMITS,
                "log-limit",
                AtLeastBytes(memtrial::trial::logcap::LEAST_LIMIT),
            ),
            (LOAD, "connections", wide(s::CONNECTIONS)),
            (LIMITS, "load-threads", wide(s::LOAD_THREADS)),
            (&["load"], "threads", wide(s::LOAD_THREADS)),
            (LOAD, "rate", n(s::RATE)),
            (LOAD, "speed", n(s::SPEED)),
            (&["load"], "duration", Time(s::LOAD_DURATION)),
            (&["load"], "warmup-duration", Time(s::LOAD_WARMUP)),
            (&["load"], "timeout", Time(s::REQUEST_TIMEOUT)),
            (FRAGMENT, "threads", wide(s::FRAGMENT_THREADS)),
            (FRAGMENT, "seconds", Time(s::FRAGMENT_SECONDS)),
            (FRAGMENT, "iterations", big(s::FRAGMENT_ITERATIONS)),
            (FRAGMENT, "survivors", n(s::FRAGMENT_SURVIVORS)),
            (FRAGMENT, "live", wide(s::FRAGMENT_LIVE)),
            (
                &["workload fragment", "workload cache-server"],
                "min-size",
                Bytes(s::FRAGMENT_SIZE.0, s::FRAGMENT_SIZE.1),
            ),
            (
                &["workload fragment", "workload cache-server"],
                "max-size",
                Bytes(s::FRAGMENT_SIZE.0, s::FRAGMENT_SIZE.1),
            ),
            (CACHE, "port", big(s::CACHE_SERVER_PORT)),
            (CACHE, "threads", wide(s::CACHE_SERVER_THREADS)),
            (
                CACHE,
                "cache-size",
                Bytes(s::CACHE_SERVER_CACHE.0, s::CACHE_SERVER_CACHE.1),
            ),
            (CACHE, "drift", big(s::CACHE_SERVER_DRIFT)),
            (&["inspect"], "top", wide(s::INSPECT_TOP)),
            (&["inspect"], "watch", Time(s::INSPECT_WATCH)),
            (&["inspect"], "interval", Time(s::INSPECT_INTERVAL)),
            (&["exporter"], "budget", Time(s::EXPORTER_BUDGET)),
            (&["exporter"], "max-age", Time(s::EXPORTER_MAX_AGE)),
            (&["judge"], "since", Time(s::JUDGE_WINDOW)),
            (&["soak"], "duration", Time(s::SOAK_DURATION)),
            (&["soak"], "max-duration", Time(s::SOAK_DURATION)),
            (&["soak"], "margin", n(s::SOAK_MARGIN)),
            (&["soak"], "consecutive", n(s::SOAK_CONSECUTIVE)),
            (&["soak"], "window", Time(s::SOAK_WINDOW)),
            (&["soak"], "warmup-windows", n(s::SOAK_WARMUP_WINDOWS)),
            (&["soak"], "interval", Time(s::SOAK_INTERVAL)),
            (&["kube"], "cpu", Cpus(s::CPUS.0, s::CPUS.1)),
            (
                &["kube"],
                "memory",
                Bytes(s::MEMORY_LIMIT.0, s::MEMORY_LIMIT.1),
            ),
            (&["kube"], "parallelism", n(s::KUBE_PARALLELISM)),
        ]
    }

    /// A bound as the help writes it: "10^12", "2^53-1", "0.001", "10m" (millicores).
    fn number(text: &str, millicores: bool) -> Option<f64> {
        if let Some((base, rest)) = text.split_once('^') {
            let (exp, minus) = rest.split_once('-').unwrap_or((rest, "0"));
            let v = base.parse::<f64>().ok()?.powf(exp.parse().ok()?);
            return Some(v - minus.parse::<f64>().ok()?);
        }
        match text.strip_suffix('m') {
            Some(milli) if millicores => Some(milli.parse::<f64>().ok()? / 1000.0),
            _ => text.parse().ok(),
        }
    }

    /// Whether the bound `text` (`lo` for the lower one) is what `range` applies.
    fn agrees(range: Range, text: &str, lo: bool) -> bool {
        let text = text.trim_end_matches(" bytes").trim_end_matches(" byte");
        match range {
            Range::Time(r) => {
                let want = if lo { r.min } else { r.max };
                parse_duration(text).is_ok_and(|d| d == want)
            }
            Range::Number(a, b) | Range::Cpus(a, b) => {
                let want = if lo { a } else { b };
                let millicores = matches!(range, Range::Cpus(..));
                number(text, millicores).is_some_and(|v| (v - want).abs() <= want.abs() * 1e-12)
            }
            Range::Bytes(a, b) => parse_size(text).is_ok_and(|v| v == if lo { a } else { b }),
            Range::AtLeastBytes(a) => lo && parse_size(text).is_ok_and(|v| v == a),
        }
    }

    #[test]
    fn every_range_a_help_states_is_the_one_checked() {
        let mut all = Vec::new();
        flags(&Cli::command(), "", &mut all);
        let bound = r"\d[^\s,;()\[\]]*(?: bytes?| days?)?";
        let re = regex::Regex::new(&format!(
            r"(?:(?P<lo>{bound}) to (?P<hi>{bound})|at most (?P<most>{bound})|at least (?P<least>{bound}))"
        ))
        .unwrap();
        // A stated default ("[default: half the CPUs, at least 1]") is not a range.
        let defaults = regex::Regex::new(r"\[default:[^\]]*\]").unwrap();
        let table = ranges();
        let mut wrong = Vec::new();
        let mut checked = 0;
        for (path, flag, help) in &all {
            let help = help.replace('\n', " ");
            let help = defaults.replace_all(&help, "");
            for c in re.captures_iter(&help) {
                let said = c.get(0).unwrap().as_str();
                let Some((_, _, range)) = table
                    .iter()
                    .find(|(paths, f, _)| f == flag && paths.contains(&path.as_str()))
                else {
                    wrong.push(format!(
                        "`{path} --{flag}` says \"{said}\": add the range its check applies to this test's table"
                    ));
                    continue;
                };
                let bounds = [
                    ("lo", true),
                    ("hi", false),
                    ("least", true),
                    ("most", false),
                ];
                for (name, lo) in bounds {
                    if let Some(b) = c.name(name) {
                        checked += 1;
                        if !agrees(*range, b.as_str(), lo) {
                            wrong.push(format!(
                                "`{path} --{flag}` says \"{said}\" but its check applies {range:?}"
                            ));
                        }
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // The pattern still finds what the help states (about 80 bounds today).
        assert!(checked >= 60, "only {checked} bounds found in the help");
    }

    /// The test itself: a help that drifted from its check is caught.
    #[test]
    fn a_drifted_bound_is_caught() {
        let r = Range::Time(s::SOAK_DURATION);
        assert!(agrees(r, "10s", true) && agrees(r, "7 days", false));
        assert!(!agrees(r, "1m", true));
        assert!(agrees(Range::Cpus(0.01, 4096.0), "10m", true));
        assert!(agrees(n((0u32, 10_000)), "10^4", false));
        assert!(!agrees(n((1u32, 10_000)), "1000", false));
    }
}
