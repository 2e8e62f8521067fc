//! What the probes inside the workload saw: the allocator's own counters (live and held
//! bytes) and the runtime's (Ruby's GC and YJIT, the JVM's Native Memory Tracking), beside
//! the kernel's figures of the same run. Stored with the run; absent figures stay absent.

use serde::{Deserialize, Serialize};

/// The allocator probe's name, in records (`absent[].probe`) and messages.
pub(crate) const ALLOCATOR_PROBE: &str = "allocator";

/// The inside view of one run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct InsideView {
    /// The allocator probe's figures, when it was on and answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<AllocatorView>,
    /// One entry per runtime probe that answered (`ruby`, `jvm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<RuntimeView>,
    /// Probes that were on but have no data, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<Absence>,
    /// The require probe's tree, when it was on and a Ruby process wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires: Option<RequireTree>,
    /// The CPU probe's samples, when it was on and attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuView>,
    /// A trimming variant's trims (`trim:DURATION`), as the probe library made them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trim: Option<TrimView>,
    /// Transparent huge pages in the run: the host's mode and the share of the workload's
    /// memory in huge pages (kernel figures, recorded for every run, probes or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp: Option<ThpView>,
    /// The workload's CPython, when a process of the run was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonView>,
}

/// A CPython process of the run: its interpreter and its allocator setting.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PythonView {
    /// The executable (`/usr/bin/python3.11`).
    pub executable: String,
    /// `PYTHONMALLOC` in its environment (absent: unset, pymalloc on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pythonmalloc: Option<String>,
}

impl PythonView {
    /// pymalloc serves small objects (up to 512 bytes) from arenas of its own, apart from
    /// `malloc`: unless `PYTHONMALLOC` names `malloc` (or 3.13's `mimalloc`).
    pub fn pymalloc(&self) -> bool {
        !self
            .pythonmalloc
            .as_deref()
            .is_some_and(|v| v.starts_with("malloc") || v.starts_with("mimalloc"))
    }

    /// `PYTHONMALLOC=malloc`, or `pymalloc on (PYTHONMALLOC unset)`.
    pub fn setting(&self) -> String {
        match &self.pythonmalloc {
            Some(v) => format!("PYTHONMALLOC={v}"),
            None => "pymalloc on (PYTHONMALLOC unset)".into(),
        }
    }
}

/// What a trimming variant's `malloc_trim(0)` calls did, summed over the run's processes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrimView {
    /// The schedule: one call every this many milliseconds in each process.
    pub interval_ms: u64,
    /// Processes whose trimming thread ran on glibc.
    pub processes: u32,
    /// Calls made.
    pub trims: u64,
    /// Calls where glibc said it released memory.
    pub released: u64,
    /// Resident bytes that fell across the calls (`/proc/self/statm` just before and after
    /// each; other threads' work meanwhile included), summed over the calls.
    pub returned_bytes: u64,
    /// The most one call returned.
    pub largest_bytes: u64,
    /// CPU time the trimming threads spent inside `malloc_trim`, summed.
    pub cpu_seconds: f64,
    /// The longest call, wall time (the program's threads wait on the arena locks).
    pub longest_seconds: f64,
    /// Each call: when (seconds since the workload started) and what it returned; at most
    /// [`TrimView::SERIES_MAX`] (beyond, every other one is dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<TrimPoint>,
}

impl TrimView {
    pub const SERIES_MAX: usize = 512;
}

/// One `malloc_trim(0)` call.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TrimPoint {
    pub t_seconds: f64,
    pub returned_bytes: u64,
    pub cpu_seconds: f64,
}

/// Transparent huge pages in one run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ThpView {
    /// The host's `enabled` and `defrag` settings when the run ended (absent when the
    /// kernel has no THP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::linux::thp::ThpMode>,
    /// The most anonymous memory in huge pages (`AnonHugePages`, summed over the tree) at a
    /// PSS read (`smaps_rollup`) or at the `smaps` read nearest the peak, and the tree's RSS
    /// at that read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_anon_huge_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_at_peak_anon_huge_bytes: Option<u64>,
    /// PSS reads made.
    pub reads: u32,
}

/// Where the workload's CPU time went, from timer samples of all its threads (perf's
/// `cpu-clock`): how many landed in the allocator's code.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuView {
    /// Samples per second of each thread's CPU time.
    pub rate_hz: u64,
    /// Whether samples in the kernel were taken (else user space only).
    pub kernel_included: bool,
    /// The workload's samples (memtrial's spawner left out).
    pub samples: u64,
    /// Of them, in the allocator's code: its library's, or glibc's `malloc.c`.
    pub allocator: u64,
    /// In the kernel (system calls, page faults, …).
    pub kernel: u64,
    /// In a process that ended before its mappings were read, or outside any mapping.
    pub unattributed: u64,
    /// Samples the kernel dropped (a ring full between two reads).
    pub lost: u64,
    /// Where the samples landed, by object (`libc.so.6 (malloc.c)`, `libjemalloc.so.2`,
    /// `ruby`, `[kernel]`, …), most first, at most [`CpuView::PLACES`].
    pub places: Vec<CpuPlace>,
    /// How glibc's allocator code was found, or why it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Seconds memtrial's sampling thread spent reading and attributing the samples (the
    /// kernel's cost of taking them is the benchmark's to measure).
    pub own_seconds: f64,
}

impl CpuView {
    /// Places kept per run.
    pub const PLACES: usize = 16;

    /// The allocator's share of the attributed samples, if there are any.
    pub fn allocator_share(&self) -> Option<f64> {
        let attributed = self.samples.saturating_sub(self.unattributed);
        (attributed > 0).then(|| self.allocator as f64 / attributed as f64)
    }
}

/// Samples in one object.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuPlace {
    pub name: String,
    pub samples: u64,
    /// Part of the allocator.
    pub allocator: bool,
}

/// What each require of a Ruby process loaded: one node per file loaded, depth-first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RequireTree {
    /// Processes that wrote a tree; this is the one whose top-level requires grew most.
    pub processes: u32,
    /// `RUBY_VERSION`.
    pub ruby: String,
    /// The objects the probe allocates itself per require it wraps (measured in the
    /// process), already taken out of every node's count.
    pub own_objects: u64,
    pub nodes: Vec<RequireNode>,
}

impl RequireTree {
    /// The resident bytes the top-level requires added, summed.
    pub fn top_growth_bytes(&self) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.depth == 0)
            .map(|n| n.rss_after_bytes.saturating_sub(n.rss_before_bytes))
            .sum()
    }
}

/// One file a require loaded.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RequireNode {
    /// 0 for a require of the program's own; each nested require one deeper.
    pub depth: u32,
    /// As required (`rails/all`, or the resolved path of a `require_relative`).
    pub name: String,
    /// The file loaded.
    pub path: String,
    /// The gem the file belongs to (`ruby`: the standard library; empty: none found).
    pub gem: String,
    /// The process's resident bytes (`/proc/self/statm`) just before the require and just
    /// after it returned: what it and its own requires added.
    pub rss_before_bytes: u64,
    pub rss_after_bytes: u64,
    /// Objects allocated while it loaded (`GC.stat` total_allocated_objects), its own
    /// requires' included, the probe's own taken out.
    pub objects: u64,
    pub seconds: f64,
    /// Files that required it again after it was loaded (derailed's "also required by").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
}

impl InsideView {
    pub fn is_empty(&self) -> bool {
        self.allocator.is_none()
            && self.runtimes.is_empty()
            && self.absent.is_empty()
            && self.requires.is_none()
            && self.cpu.is_none()
            && self.trim.is_none()
            && self.thp.is_none()
            && self.python.is_none()
    }

    /// The runtime view of that name (`ruby`, `jvm`).
    pub fn runtime(&self, name: &str) -> Option<&RuntimeView> {
        self.runtimes.iter().find(|r| r.runtime == name)
    }

    /// Why the named probe has no data, if it was on and has none.
    pub fn absence(&self, probe: &str) -> Option<&str> {
        self.absent
            .iter()
            .find(|a| a.probe == probe)
            .map(|a| a.reason.as_str())
    }
}

/// A probe that was on and has no data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Absence {
    pub probe: String,
    pub reason: String,
}

/// The allocator's own view of its memory, summed over the run's probed processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorView {
    /// The allocator that answered (`glibc`, `jemalloc`, `tcmalloc`, `mimalloc`); several
    /// joined by `+` when processes differ.
    pub answered: String,
    /// The library that defines `malloc` in the probed processes, as the loader says.
    pub library: String,
    /// How many processes reported.
    pub processes: u32,
    /// The probe's interval.
    pub interval_ms: u64,
    /// Set when the allocator that answered is not the one the run's verification found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disagreement: Option<String>,
    /// The allocator's figures at its own peak: the sample where it held the most (where
    /// it offers no held figure, where live was highest). The RSS peak is the same moment
    /// seen from the kernel, up to one probe interval.
    pub at_peak: Option<AllocatorPoint>,
    /// The highest live bytes over the run.
    pub peak_live_bytes: Option<u64>,
    /// The highest held bytes over the run.
    pub peak_held_bytes: Option<u64>,
    pub series: Vec<AllocatorPoint>,
    /// The shape of the allocator's free memory at the processes' highest resident memory
    /// the probe reached (absent when the allocator offers none, or no process wrote one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holes: Option<Holes>,
}

/// The shape of the allocator's free memory ("the holes"), summed over the run's processes
/// from each one's latest account: written by the probe library at a new high of the
/// process's resident memory where its growth paused, so the latest is the one nearest the
/// process's peak that the probe's CPU budget allowed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Holes {
    /// The allocator that gave the account (`glibc`, `jemalloc`, `tcmalloc`).
    pub allocator: String,
    /// How many processes wrote one.
    pub processes: u32,
    /// Seconds since the workload started, of the latest account.
    pub t_seconds: f64,
    /// The processes' resident bytes (`/proc/self/statm`) when their accounts were taken,
    /// summed: how near the peak the accounts are.
    pub resident_bytes: u64,
    /// Bytes in free blocks the allocator hands out again but keeps resident between live
    /// ones: glibc's free chunks in its bins (not the top of a heap), jemalloc's free
    /// regions in slabs of its small size classes. Absent where the allocator tells no such
    /// figure by size (tcmalloc: see `parts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// How many free blocks `free_bytes` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_blocks: Option<u64>,
    /// `free_bytes` by block size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<HoleClass>,
    /// The allocator's other free memory, by its own names: glibc's free tops of heaps;
    /// jemalloc's dirty, muzzy and retained pages; tcmalloc's free lists and page heap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<HolePart>,
    /// glibc: one entry per arena of every process (main arenas first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arenas: Vec<ArenaHoles>,
}

/// Free blocks of one size class.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HoleClass {
    /// Blocks of at least this many bytes…
    pub from_bytes: u64,
    /// …and up to this many; `None`: no upper bound.
    pub up_to_bytes: Option<u64>,
    pub bytes: u64,
    pub blocks: u64,
}

/// Free memory of one kind the allocator names.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HolePart {
    /// `top of heaps`, `dirty pages`, `muzzy pages`, `retained`, `central free lists`, …
    pub name: String,
    pub bytes: u64,
    /// The bytes are resident (false: address space returned to the system, such as
    /// jemalloc's retained or tcmalloc's unmapped pages).
    pub resident: bool,
}

/// One glibc arena in one process.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ArenaHoles {
    /// The main arena (the brk heap), else a thread arena made of 64 MiB heaps.
    pub main: bool,
    /// Bytes the arena has from the system.
    pub system_bytes: u64,
    /// Bytes in its free chunks (bins and fast bins).
    pub free_bytes: u64,
    /// Bytes free at the top of its heap (given back only by trimming).
    pub top_bytes: u64,
}

/// The allocator's figures at one moment, summed over processes; `None` where the
/// allocator does not offer the figure (never estimated).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AllocatorPoint {
    /// Seconds since the workload was started.
    pub t_seconds: f64,
    /// Bytes the program has allocated and not freed.
    pub live_bytes: Option<u64>,
    /// Bytes the allocator holds from the system for the program's blocks (live + free
    /// inside its heaps).
    pub held_bytes: Option<u64>,
    /// Bytes free inside the allocator's heaps (held, not live).
    pub free_bytes: Option<u64>,
    /// Resident bytes as the allocator counts them (jemalloc, mimalloc).
    pub resident_bytes: Option<u64>,
    pub mapped_bytes: Option<u64>,
    /// Mapped but returned to the system (jemalloc `retained`, tcmalloc unmapped).
    pub retained_bytes: Option<u64>,
    pub metadata_bytes: Option<u64>,
    pub arenas: Option<u64>,
    pub thread_cache_bytes: Option<u64>,
    /// The processes' resident bytes (`/proc/self/statm`) as the probe read them when it
    /// took the sample, summed: where the sample lies against the run's peak. Absent in
    /// records of older releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

/// Held within 1/this (2%) of the most held is held at the peak (see
/// `AllocatorPoint::most_held`).
const HELD_TIE: u64 = 50;

impl AllocatorPoint {
    /// Of `points`, the one where the allocator held the most and, of those, where live was
    /// highest; where none offers a held figure, where live was highest. "Held the most" is
    /// within 1/`HELD_TIE` (2%) of the most held: an allocator that keeps what it got
    /// (glibc) holds a flat held after its peak while live falls, and a sample a few KiB
    /// above the peak's held after the program had freed a fifth of its live bytes is not
    /// the peak (beside two busy loops: live there 63.2 MB, at the peak 81.3 MB). 2% is the
    /// probe's own step between highs (shim.c's HIGH_STEP).
    pub(crate) fn most_held<'a>(
        points: impl IntoIterator<Item = &'a AllocatorPoint>,
    ) -> Option<&'a AllocatorPoint> {
        let points: Vec<&AllocatorPoint> = points.into_iter().collect();
        let most = points.iter().filter_map(|p| p.held_bytes).max();
        points
            .into_iter()
            .filter(|p| match (most, p.held_bytes) {
                (None, _) => true,
                (Some(most), Some(held)) => held >= most - most / HELD_TIE,
                (Some(_), None) => false,
            })
            .max_by_key(|p| (p.live_bytes, p.held_bytes))
    }

    /// Held over live: 1.0 holds nothing unused; 2.0 holds as much unused as live.
    pub fn fragmentation(&self) -> Option<f64> {
        match (self.held_bytes, self.live_bytes) {
            (Some(h), Some(l)) if l > 0 => Some(h as f64 / l as f64),
            _ => None,
        }
    }

    /// Bytes held and not live.
    #[cfg(test)]
    pub(crate) fn unused_bytes(&self) -> Option<u64> {
        match (self.held_bytes, self.live_bytes) {
            (Some(h), Some(l)) => Some(h.saturating_sub(l)),
            _ => None,
        }
    }
}

/// What a figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureUnit {
    Bytes,
    Count,
}

/// A runtime's own view (Ruby `GC.stat` and YJIT, JVM Native Memory Tracking).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeView {
    /// `ruby` or `jvm`.
    pub runtime: String,
    /// The runtime's version, as it reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How many processes reported.
    pub processes: u32,
    /// Figures summed over processes: the last value and the highest.
    pub figures: Vec<RuntimeFigure>,
    /// The same figures over time (summed over processes at each sample).
    pub series: Vec<RuntimeSeries>,
    /// What the reader should know (e.g. NMT's own cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl RuntimeView {
    pub fn figure(&self, name: &str) -> Option<&RuntimeFigure> {
        self.figures.iter().find(|f| f.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeFigure {
    /// The runtime's own name for it (`heap_live_slots`, `inline_code_size`,
    /// `committed.Thread`, …).
    pub name: String,
    pub unit: FigureUnit,
    pub last: f64,
    pub max: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeSeries {
    pub name: String,
    pub unit: FigureUnit,
    /// `[seconds since start, value]`.
    pub points: Vec<[f64; 2]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragmentation_is_held_over_live() {
        let p = AllocatorPoint {
            live_bytes: Some(100),
            held_bytes: Some(250),
            ..Default::default()
        };
        assert_eq!(p.fragmentation(), Some(2.5));
        assert_eq!(p.unused_bytes(), Some(150));
        let none = AllocatorPoint {
            held_bytes: Some(250),
            ..Default::default()
        };
        assert_eq!(none.fragmentation(), None);
    }

    #[test]
    fn empty_view_round_trips_as_an_empty_object() {
        let v = InsideView::default();
        assert_eq!(serde_json::to_string(&v).unwrap(), "{}");
        let back: InsideView = serde_json::from_str("{}").unwrap();
        assert!(back.is_empty());
    }
}
