//! What an inspection finds: the process, its memory, allocator, arenas, host and access,
//! the watch's samples; the JSON `inspect --json` prints.

use serde::{Deserialize, Serialize};

use crate::analysis::trend::Trend;
use crate::linux::proc::ProcError;

pub use advice::Advice;
pub use classify::Group;
pub use container::Container;

use super::*;

// `Deserialize` is derived where a type and all its fields round-trip by themselves (the
// integration tests read `inspect --json` through them, tests/it/inspect.rs); the others
// hold types of other modules (arenas, advice, classify, the trend) and are written only.

/// Version of the JSON document; bumped on any incompatible change.
pub(crate) const SCHEMA_VERSION: u32 = 1;
/// Errors of `inspect`.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("no process with PID {pid}")]
    NotFound { pid: i32 },
    #[error("process {pid} ({comm}) is a zombie: it has exited and its parent (PID {ppid}) has not reaped it; there is no memory left to inspect")]
    Zombie { pid: i32, comm: String, ppid: i32 },
    #[error("PID {pid} ({comm}) is a kernel thread: it has no user memory, no executable and no allocator to inspect")]
    KernelThread { pid: i32, comm: String },
    #[error(transparent)]
    Proc(ProcError),
    #[error("--trim: {0}")]
    Trim(String),
}
/// A runtime recognised in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    Ruby,
    Python,
    Jvm,
    Node,
    Go,
    Erlang,
    Perl,
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeHint {
    pub runtime: Runtime,
    pub evidence: String,
}
/// What the process is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Process {
    pub comm: String,
    /// Target of `/proc/PID/exe` (`None` when not readable).
    pub exe: Option<String>,
    pub cmdline: Vec<String>,
    pub state: char,
    pub ppid: i32,
    pub threads: u64,
    pub age_seconds: Option<f64>,
    pub cpu_seconds: f64,
    pub runtimes: Vec<RuntimeHint>,
}
/// What the process holds (bytes). Flattened into the top of the JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// `VmRSS` of `/proc/PID/status`.
    pub rss_bytes: u64,
    pub rss_anon_bytes: u64,
    pub rss_file_bytes: u64,
    pub rss_shmem_bytes: u64,
    /// From `smaps_rollup`; `None` when not readable.
    pub pss_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    pub swap_bytes: u64,
    /// `VmHWM`: the kernel's high-water mark of RSS.
    pub peak_rss_bytes: u64,
    /// `VmSize`: the address space, what `pmap` totals.
    pub vsz_bytes: u64,
}
/// Which allocator answers `malloc`, and why we think so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocator {
    /// As [`detect_allocator`] names it: `glibc`, `jemalloc`, `glibc (static executable)`, …
    pub name: String,
    pub evidence: Vec<String>,
    /// `static` or `dynamic`; `None` when the executable could not be read.
    pub linkage: Option<String>,
    pub defines_malloc: Option<bool>,
    pub ld_preload: Option<String>,
    /// Why `LD_PRELOAD` names an allocator that does not answer `malloc`.
    pub preload_ignored: Option<String>,
    /// Allocator and runtime settings in the initial environment.
    pub settings: Vec<(String, String)>,
}
impl Allocator {
    /// glibc malloc answers (dynamic or static).
    pub(crate) fn is_glibc(&self) -> bool {
        self.name.starts_with("glibc")
    }
}
/// glibc arenas: how many, found how, against which limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Arenas {
    /// Arenas, the main one included.
    pub count: u64,
    /// `exact` (distinct heap headers) or `estimate` (heap-shaped mappings, an upper bound).
    pub method: arenas::Method,
    /// Non-main heaps found.
    pub heaps: u64,
    /// The most arenas glibc creates in this process.
    pub limit: u64,
    pub limit_source: arenas::LimitSource,
    pub threads: u64,
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub online_cpus: u32,
    pub memory_bytes: u64,
}
/// One sample of a watch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_seconds: f64,
    pub rss_bytes: u64,
    /// `None` where `smaps_rollup` was not readable.
    pub pss_bytes: Option<u64>,
    pub threads: u64,
    /// glibc arenas (`None` unless glibc malloc answers and the count could be taken).
    pub arenas: Option<u64>,
}
/// Why a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchEnd {
    Completed,
    ProcessExited,
    Interrupted,
}
/// An RSS time series and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Watch {
    pub interval_seconds: f64,
    pub requested_seconds: f64,
    pub end: WatchEnd,
    pub samples: Vec<Sample>,
    pub trend: Trend,
}
/// Totals over all mappings, beside the kernel's own totals, so the breakdown can
/// be checked: `size_bytes` is what `pmap -x` totals (virtual), `rollup_rss_bytes`
/// what `smaps_rollup` says is resident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingTotals {
    pub mappings: u64,
    pub size_bytes: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub uss_bytes: u64,
    pub swap_bytes: u64,
    /// `Rss` of `/proc/PID/smaps_rollup` (`None`: unreadable).
    pub rollup_rss_bytes: Option<u64>,
    /// `Pss` of `/proc/PID/smaps_rollup`.
    pub rollup_pss_bytes: Option<u64>,
}
/// Why some files of the process could not be read, and what would allow it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// memtrial's effective UID.
    pub our_uid: u32,
    /// The process's real UID (`None`: unknown).
    pub owner_uid: Option<u32>,
    /// The files refused (`smaps`, `environ`, `exe`, `mem`, …).
    pub denied: Vec<String>,
    /// What to do about it.
    pub hint: String,
}
/// Everything `inspect` found. Plain data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    pub schema_version: u32,
    pub pid: i32,
    /// False when the process exited (or a file was unreadable) part-way.
    pub complete: bool,
    /// What could not be read, and why.
    pub missing: Vec<String>,
    /// Set when files were refused for lack of permission.
    pub access: Option<Access>,
    pub threads: u64,
    #[serde(flatten)]
    pub memory: Memory,
    pub process: Process,
    /// Size/RSS/PSS/USS/swap by kind of mapping (see [`classify`]).
    pub mappings: Vec<Group>,
    pub mapping_totals: Option<MappingTotals>,
    /// Thread stacks recognised in the maps (heuristic; see [`classify`]).
    pub thread_stacks: Option<u64>,
    pub allocator: Option<Allocator>,
    /// The glibc the process runs (from its mapped libc), `None` when not found.
    pub glibc: Option<glibc::GlibcVersion>,
    /// `None` unless glibc malloc answers.
    pub glibc_arenas: Option<Arenas>,
    pub cgroup: Option<Container>,
    pub host: Host,
    /// Sums over the process and its descendants (`--tree`).
    pub tree: Option<procs::Tree>,
    pub advice: Vec<Advice>,
    pub watch: Option<Watch>,
    /// Transparent huge pages: the host's mode, whether the process may use them, and its
    /// memory in them (`None`: the kernel has no THP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp: Option<ThpSeen>,
    /// glibc processes: what `malloc_trim(0)` could give back now, from a walk over its
    /// heaps (nothing is trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trimmable: Option<crate::linux::glibc_heap::Trimmable>,
    /// jemalloc processes: its arenas and where the count comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jemalloc_arenas: Option<crate::linux::allocator::JemallocArenas>,
    /// `--trim`: what the `malloc_trim(0)` memtrial's probe library made when asked did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trimmed: Option<Trimmed>,
}

/// One `malloc_trim(0)` call asked of a process (`inspect --trim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Trimmed {
    /// Its resident bytes just before and just after the call.
    pub resident_before_bytes: u64,
    pub resident_after_bytes: u64,
    /// CPU time inside `malloc_trim`, and the call's wall time, in ns.
    pub cpu_ns: u64,
    pub wall_ns: u64,
    /// glibc said it released memory.
    pub released: bool,
}

/// Transparent huge pages in one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThpSeen {
    /// The host's `enabled` and `defrag`.
    pub host: crate::linux::thp::ThpMode,
    /// `THP_enabled` of its status (`false`: turned off for it with `prctl`).
    pub enabled_for_process: Option<bool>,
    /// `AnonHugePages` of its `smaps_rollup`.
    pub anon_huge_bytes: Option<u64>,
}
