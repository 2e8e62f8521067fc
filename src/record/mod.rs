//! What a run and an experiment are, as stored: the neutral data that the trial
//! produces and the store, analysis and reports read. No OS access and no logic
//! beyond small accessors live here.

pub mod evidence;
#[cfg(test)]
pub(crate) mod fixture;
pub mod inside;
pub mod load;
pub mod soak;
pub mod wire;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::linux::cgroup::CgroupFigures;
use crate::linux::host::HostInfo;
use crate::plan::Plan;
pub use inside::{
    Absence, AllocatorPoint, AllocatorView, ArenaHoles, CpuPlace, CpuView, FigureUnit, HoleClass,
    HolePart, Holes, InsideView, PythonView, RequireNode, RequireTree, RuntimeFigure,
    RuntimeSeries, RuntimeView, ThpView, TrimPoint, TrimView,
};
pub use load::LoadFigures;

/// One point of a run's memory time series: sums over the process tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeSample {
    /// Seconds since the workload was started.
    pub t_seconds: f64,
    pub rss_bytes: u64,
    pub vsz_bytes: u64,
    pub threads: u64,
    /// Summed PSS, where it was read at this sample (see [`PssBudget`]).
    pub pss_bytes: Option<u64>,
    /// Summed USS (`Private_Clean` + `Private_Dirty`), read with PSS.
    #[serde(default)]
    pub uss_bytes: Option<u64>,
    pub processes: u32,
}

/// The outcome of verification for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verification {
    /// Every checked process carried the variant.
    Verified,
    /// The variant changes nothing that could be checked (the unchanged baseline).
    NothingToVerify,
    /// At least one process did not carry the variant.
    NotEffective,
    /// No process lived long enough to be checked.
    Unverified,
    /// The variant was set (its environment, its preload) but a knob of it cannot be
    /// verified inside the process (say, glibc's settings without its full symbol table):
    /// never reported as verified.
    SetNotVerifiable,
}

impl Verification {
    pub fn as_str(self) -> &'static str {
        match self {
            Verification::Verified => "verified",
            Verification::NothingToVerify => "nothing_to_verify",
            Verification::NotEffective => "not_effective",
            Verification::Unverified => "unverified",
            Verification::SetNotVerifiable => "set_not_verifiable",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Verification::Verified,
            Verification::NothingToVerify,
            Verification::NotEffective,
            Verification::Unverified,
            Verification::SetNotVerifiable,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }

    /// True when the run's figures can be trusted to be the variant's.
    pub fn ok(self) -> bool {
        matches!(self, Verification::Verified | Verification::NothingToVerify)
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Ok,
    Failed,
    Timeout,
    VariantNotEffective,
    Interrupted,
    /// The kernel's OOM killer killed a process of the run (cgroup memory limit).
    OomKilled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::Timeout => "timeout",
            RunStatus::VariantNotEffective => "variant_not_effective",
            RunStatus::Interrupted => "interrupted",
            RunStatus::OomKilled => "oom_killed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            RunStatus::Ok,
            RunStatus::Failed,
            RunStatus::Timeout,
            RunStatus::VariantNotEffective,
            RunStatus::Interrupted,
            RunStatus::OomKilled,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// Where the peak RSS figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSource {
    /// `wait4` rusage `ru_maxrss`: the kernel's high-water mark of the largest single
    /// process among the workload and the descendants it waited for.
    Wait4Maxrss,
    /// `VmHWM` of `/proc/PID/status`: a kernel high-water mark read while the process lived.
    VmHwm,
    /// The sum of RSS over the process tree at the highest sample (several processes).
    SampledTreeSum,
}

impl PeakSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PeakSource::Wait4Maxrss => "wait4_maxrss",
            PeakSource::VmHwm => "vmhwm",
            PeakSource::SampledTreeSum => "sampled_tree_sum",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            PeakSource::Wait4Maxrss,
            PeakSource::VmHwm,
            PeakSource::SampledTreeSum,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// Everything measured about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub variant: String,
    /// Which block of the schedule (warm-up runs have their own blocks).
    pub block: u32,
    pub warmup: bool,
    pub started_at: String,
    pub status: RunStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub wall_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_sys_seconds: f64,
    pub peak_rss_bytes: u64,
    pub peak_rss_source: PeakSource,
    pub mean_rss_bytes: u64,
    pub final_rss_bytes: u64,
    /// The highest PSS sum over the tree (shared pages divided among the processes that
    /// map them), among the samples at which PSS was read.
    pub peak_pss_bytes: Option<u64>,
    /// The highest USS sum over the tree (`Private_Clean` + `Private_Dirty`: pages no other
    /// process maps), read with PSS.
    #[serde(default)]
    pub peak_uss_bytes: Option<u64>,
    pub peak_vsz_bytes: u64,
    pub threads_peak: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub processes_seen: u32,
    pub allocator_detected: String,
    pub verification: Verification,
    pub verification_detail: String,
    /// Why a run failed, in memtrial's words (exec errors, timeouts), if it did.
    pub message: Option<String>,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// The kernel's figures for the run's cgroup, when it ran in one.
    pub cgroup: Option<CgroupFigures>,
    /// A server trial's load figures.
    pub load: Option<LoadFigures>,
    /// What the probes inside the workload saw (allocator, runtimes).
    #[serde(default)]
    pub inside: InsideView,
    /// A worker or service run's driven phase and the figures its driver reported.
    #[serde(default)]
    pub driver: Option<DriverFigures>,
    /// Where the resident memory was, by kind of mapping, from the `smaps` read nearest the
    /// run's peak.
    #[serde(default)]
    pub regions: Option<RegionsRead>,
    pub samples: Vec<TreeSample>,
}

/// The run's resident memory by kind of mapping (`smaps` of every live process, read at a
/// new high of the tree's RSS within a CPU budget): the read with the most resident bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionsRead {
    /// When it was asked for, seconds since the workload started.
    pub t_seconds: f64,
    /// The tree's sampled RSS when the read was asked for.
    pub tree_rss_bytes: u64,
    /// The processes' `VmRSS`, each read just before its `smaps`: what the kinds, which
    /// sum to every mapping's `Rss`, are checked against.
    #[serde(default)]
    pub status_rss_bytes: u64,
    /// The same just after each `smaps`: while memory moves, the kinds lie between the two.
    #[serde(default)]
    pub status_rss_after_bytes: u64,
    /// Processes read.
    pub processes: u32,
    /// Reads made during the run, and the CPU time they took in all (records of older
    /// releases: their wall time).
    pub reads: u32,
    pub read_seconds: f64,
    #[serde(flatten)]
    pub regions: crate::linux::regions::Regions,
    /// Every read of the run by kind, in time order (at most
    /// [`crate::probe::regions::SERIES_MAX`]: beyond, every other one is dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<RegionsPoint>,
}

impl RegionsRead {
    /// The tree's resident bytes when it was read: the sample that asked for it, or the
    /// processes' `VmRSS` just before their `smaps` where that is higher (the read came
    /// after the tick that asked for it).
    pub fn rss_at_read(&self) -> u64 {
        self.tree_rss_bytes.max(self.status_rss_bytes)
    }
}

/// One `smaps` read: resident bytes by kind at a moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionsPoint {
    /// Seconds since the workload started.
    pub t_seconds: f64,
    /// Resident bytes by kind (the kinds with none left out).
    pub by_kind: std::collections::BTreeMap<crate::linux::regions::Kind, u64>,
}

/// The driven phase of a worker trial (`--driver`) or a service run for `--duration`, on
/// the run's clock, and the figures the driver printed (`memtrial-figure NAME VALUE [UNIT]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverFigures {
    /// When the driver started (or the service's run began), seconds since the workload started.
    pub driven_start_seconds: f64,
    /// When the driver printed `memtrial-ready` (the workload's start-up is over), if it did.
    #[serde(default)]
    pub ready_seconds: Option<f64>,
    /// When the driven phase ended: the driver's exit, or the end of `--duration`.
    pub driven_end_seconds: f64,
    /// The driver's figures by name (the last line for a name counts).
    #[serde(default)]
    pub figures: std::collections::BTreeMap<String, DriverFigure>,
    /// Lines that looked like figures but were not, with why (the first few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
}

/// One figure a driver reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverFigure {
    pub value: f64,
    #[serde(default)]
    pub unit: Option<String>,
}

impl DriverFigures {
    /// The steady phase: from the end of start-up (`memtrial-ready`, else the driver's
    /// start) to the driven phase's end.
    pub fn steady(&self) -> Option<(f64, f64)> {
        let start = self.ready_seconds.unwrap_or(self.driven_start_seconds);
        (self.driven_end_seconds > start).then_some((start, self.driven_end_seconds))
    }
}

impl RunRecord {
    /// A run before anything is known of it: failed, unverified, no figures.
    pub(crate) fn skeleton(
        variant: &str,
        block: u32,
        warmup: bool,
        started_at: String,
    ) -> RunRecord {
        RunRecord {
            variant: variant.to_string(),
            block,
            warmup,
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
            peak_uss_bytes: None,
            peak_vsz_bytes: 0,
            threads_peak: 0,
            minor_faults: 0,
            major_faults: 0,
            processes_seen: 0,
            allocator_detected: "unknown".into(),
            verification: Verification::Unverified,
            verification_detail: String::new(),
            message: None,
            stdout_path: PathBuf::new(),
            stderr_path: PathBuf::new(),
            cgroup: None,
            load: None,
            inside: InsideView::default(),
            driver: None,
            regions: None,
            samples: Vec::new(),
        }
    }

    /// The figures of this run count in the statistics.
    pub fn counts(&self) -> bool {
        !self.warmup && self.status == RunStatus::Ok
    }

    /// The most processes the run had alive at one sample.
    pub fn processes_at_once(&self) -> u32 {
        self.samples.iter().map(|s| s.processes).max().unwrap_or(0)
    }
}

/// How an experiment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExperimentStatus {
    Running,
    Complete,
    Interrupted,
}

impl ExperimentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentStatus::Running => "running",
            ExperimentStatus::Complete => "complete",
            ExperimentStatus::Interrupted => "interrupted",
        }
    }
    /// The status named `s`; `None` for a name this build does not know.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(ExperimentStatus::Running),
            "complete" => Some(ExperimentStatus::Complete),
            "interrupted" => Some(ExperimentStatus::Interrupted),
            _ => None,
        }
    }
}

/// One line of `memtrial list`.
#[derive(Debug, Clone)]
pub struct ExperimentSummary {
    pub id: i64,
    pub created_at: String,
    pub status: ExperimentStatus,
    pub command: Vec<String>,
    pub variants: Vec<String>,
    pub runs_done: i64,
    pub runs_planned: i64,
    /// How many hosts its runs ran on.
    pub hosts: i64,
}

/// A stored experiment with all its runs (samples included).
#[derive(Debug, Clone)]
pub struct Experiment {
    pub id: i64,
    /// The schedule position of each run, parallel to `runs`.
    pub seqs: Vec<u32>,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub status: ExperimentStatus,
    pub plan: Plan,
    /// The host the experiment was created on (an imported one: the record's).
    pub host: HostInfo,
    pub runs: Vec<RunRecord>,
    pub notes: Vec<String>,
    /// The hosts the runs ran on, in the order they were first stored.
    pub hosts: Vec<HostInfo>,
    /// Each run's host, an index into `hosts`, parallel to `runs`.
    pub run_hosts: Vec<usize>,
}

impl Experiment {
    /// The host run `i` ran on.
    pub fn host_of(&self, i: usize) -> &HostInfo {
        self.run_hosts
            .get(i)
            .and_then(|h| self.hosts.get(*h))
            .unwrap_or(&self.host)
    }

    /// Runs from more than one host.
    pub(crate) fn several_hosts(&self) -> bool {
        self.hosts.len() > 1
    }
}
