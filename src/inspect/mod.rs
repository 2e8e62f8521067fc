//! `memtrial inspect PID`: a live diagnosis of one running process.
//!
//! [`gather`] reads what the process is (executable, command line, age, threads,
//! runtime), what it holds (RSS/PSS/USS/swap/peak and a breakdown by kind of
//! mapping), which allocator answers its `malloc` and why we think so, its glibc
//! arenas against their limit, and its cgroup limits, into an [`Inspection`]: plain
//! data, serialisable as JSON ([`SCHEMA_VERSION`]). [`advice::advise`] turns it into
//! advice, each item with the evidence that triggered it; [`render`] draws one screen.
//! [`watch`] samples RSS over time for the leak-or-plateau verdict of
//! [`crate::analysis::trend`].
//!
//! A process may exit at any moment. Exiting before the first read is an error;
//! exiting later gives a partial inspection (`complete: false`) that says what is missing.

pub mod advice;
pub mod arenas;
pub mod classify;
pub use crate::linux::container;
#[cfg(test)]
mod fixture;
pub mod glibc;
pub mod procs;
pub mod render;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::analysis::trend::{self, Trend, TrendRules};
use crate::linux::allocator::{detect_allocator, linked_allocators, needed_of_file};
use crate::linux::elf::{self, Linkage};
use crate::linux::host;
use crate::linux::maps::{self, Mapping};
use crate::linux::proc::{self, ProcError};

pub use advice::{Advice, AdviceKind};
pub use classify::{Group, Kind};
pub use container::Container;

/// Version of the JSON document; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

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
}

impl From<ProcError> for InspectError {
    fn from(e: ProcError) -> Self {
        match e {
            ProcError::Gone { pid } => InspectError::NotFound { pid },
            e => InspectError::Proc(e),
        }
    }
}

/// A runtime recognised in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeHint {
    pub runtime: Runtime,
    pub evidence: String,
}

/// What the process is.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    pub fn is_glibc(&self) -> bool {
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    pub online_cpus: u32,
    pub memory_bytes: u64,
}

/// One sample of a watch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

/// Collects "missing" notes; remembers that the process is gone.
struct Partial {
    pid: i32,
    missing: Vec<String>,
    /// Files refused for lack of permission.
    denied: Vec<String>,
    gone: bool,
}

impl Partial {
    fn take<T>(&mut self, what: &str, r: Result<T, ProcError>) -> Option<T> {
        if self.gone {
            return None;
        }
        match r {
            Ok(v) => Some(v),
            Err(ProcError::Gone { .. }) => {
                self.gone = true;
                self.missing.push(format!(
                    "process {} exited while {what} was being read; later sections are missing",
                    self.pid
                ));
                None
            }
            Err(ProcError::PermissionDenied { .. }) => {
                // What to do about it is said once, in the access hint.
                self.denied.push(what.to_string());
                self.missing.push(format!("{what}: permission denied"));
                None
            }
            Err(e) => {
                self.missing.push(format!("{what}: {e}"));
                None
            }
        }
    }
}

/// `PF_KTHREAD` in the flags of `/proc/PID/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether the process is a kernel thread: `Kthread: 1` in its status (kernel 6.8+),
/// else `PF_KTHREAD` in the flags of its stat (field 9).
fn is_kernel_thread(stat_text: &str, status_text: &str) -> bool {
    if let Some(v) = status_text.lines().find_map(|l| l.strip_prefix("Kthread:")) {
        return v.trim() == "1";
    }
    stat_text
        .rfind(')')
        .and_then(|close| stat_text[close + 1..].split_ascii_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// memtrial's effective UID.
fn our_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { ::libc::geteuid() }
}

/// The real UID of a process, from the `Uid:` line of its status.
fn owner_uid(status_text: &str) -> Option<u32> {
    status_text
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Whether memtrial holds `CAP_SYS_PTRACE` (bit 19 of `CapEff` in its status).
fn has_ptrace_capability() -> Option<bool> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = text.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    // CAP_SYS_PTRACE is capability 19 (linux/capability.h).
    Some(caps & (1 << 19) != 0)
}

/// What to do when files of `pid` are refused.
pub fn access_hint(pid: i32, our: u32, owner: Option<u32>) -> String {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    access_hint_for(pid, our, owner, has_ptrace_capability(), yama)
}

/// [`access_hint`] from what it depends on: memtrial's UID, the owner's, whether
/// memtrial holds `CAP_SYS_PTRACE`, and Yama's `ptrace_scope`.
pub fn access_hint_for(
    pid: i32,
    our: u32,
    owner: Option<u32>,
    ptrace_cap: Option<bool>,
    yama: Option<u32>,
) -> String {
    const NEED: &str = "smaps, smaps_rollup, environ, exe and mem need ptrace-read access to the process (PTRACE_MODE_READ)";
    let yama_note = match yama {
        Some(n) if n >= 1 => format!(
            "; kernel.yama.ptrace_scope={n} also restricts ptrace-read access{}",
            match n {
                1 => " to ancestors (or CAP_SYS_PTRACE)",
                2 => " to CAP_SYS_PTRACE",
                _ => " entirely (scope 3: not even root may attach)",
            }
        ),
        _ => String::new(),
    };
    if our == 0 {
        // Root was refused: telling root to run as root helps nobody.
        let why = match ptrace_cap {
            Some(false) => "memtrial runs as root but without CAP_SYS_PTRACE (containers drop it; grant it, e.g. `docker run --cap-add SYS_PTRACE`)".to_string(),
            _ => format!(
                "memtrial already runs as root{}, so the refusal comes from a security policy around it — a sandbox memtrial runs in (Landlock, a container), Yama, AppArmor or SELinux{}: run memtrial outside that sandbox, or in the same one as the process",
                if ptrace_cap == Some(true) { " with CAP_SYS_PTRACE" } else { "" },
                if pid == 1 { "; PID 1 (the init of the machine, VM or container) is often outside a sandbox's reach" } else { "" }
            ),
        };
        return format!("{NEED}: {why}{yama_note}");
    }
    let who = match owner {
        Some(o) if o != our => format!(
            "PID {pid} belongs to UID {o} and memtrial runs as UID {our}: run memtrial as UID {o} or as root"
        ),
        _ => "run memtrial as root".to_string(),
    };
    format!("{NEED}: {who} (or grant CAP_SYS_PTRACE){yama_note}")
}

const SETTINGS_PREFIXES: [&str; 12] = [
    "MALLOC_",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
    "TCMALLOC_",
    "MIMALLOC_",
    "PYTHONMALLOC",
    "RUBY_YJIT",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "GOGC",
    "GOMEMLIMIT",
    "NODE_OPTIONS",
];

/// Inspects `pid` once.
pub fn gather(pid: i32) -> Result<Inspection, InspectError> {
    let (stat, status_text, status) = first_look(pid)?;
    let mut p = Partial {
        pid,
        missing: Vec::new(),
        denied: Vec::new(),
        gone: false,
    };
    let ticks = proc::clock_ticks_per_second() as f64;
    let age_seconds = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map(|up| (up - stat.starttime_ticks as f64 / ticks).max(0.0));
    let exe_link = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string());
    let cmdline: Vec<String> = p
        .take("/proc/PID/cmdline", proc::read_proc_file(pid, "cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let rollup = p.take("/proc/PID/smaps_rollup", proc::read_smaps_rollup(pid));
    let memory = memory_of(&status, rollup.as_ref());
    let smaps = read_smaps(&mut p, pid);
    let maps: Vec<Mapping> = smaps.iter().map(|(m, _)| m.clone()).collect();
    let env = p
        .take("/proc/PID/environ", proc::read_environ(pid))
        .unwrap_or_default();

    // Allocator.
    let exe_facts = if p.gone {
        None
    } else {
        exe_elf_facts(pid, exe_link.as_deref())
            .map_err(|e| {
                if e.contains("Permission denied") {
                    p.denied.push("/proc/PID/exe".into());
                }
                p.missing.push(format!("executable: {e}"))
            })
            .ok()
    };
    let libs = maps::mapped_libraries(&maps);
    let allocator = (!maps.is_empty()).then(|| allocator_facts(&libs, exe_facts.as_ref(), &env));

    let online_cpus = host::online_cpus();
    let (arenas, heap_ranges) = glibc_arenas(&mut p, allocator.as_ref(), &maps, &env, &status);
    let kinds = classify::classify(&maps, &heap_ranges);
    let mappings = classify::group(&smaps, &kinds);
    let mapping_totals = (!smaps.is_empty()).then(|| totals(&mappings, rollup.as_ref()));
    let thread_stacks = (!maps.is_empty()).then(|| classify::thread_stack_count(&maps, &kinds));
    let glibc_version = if p.gone {
        None
    } else {
        glibc::detect(pid, &libs)
    };

    // Container.
    let container = p
        .take("/proc/PID/cgroup", proc::read_proc_file(pid, "cgroup"))
        .map(|b| {
            container::read_container(pid, &String::from_utf8_lossy(&b), &status_text, online_cpus)
        });
    if let Some(c) = &container {
        p.missing
            .extend(c.notes.iter().map(|n| format!("cgroup: {n}")));
    }
    last_look(&mut p, stat.starttime_ticks);

    let runtimes = runtime_hints(&libs, exe_link.as_deref(), &cmdline, exe_facts.as_ref());
    let access = access_of(&p, &status_text);
    let mut ins = Inspection {
        schema_version: SCHEMA_VERSION,
        pid,
        complete: p.missing.is_empty(),
        missing: p.missing,
        access,
        threads: status.threads,
        process: Process {
            comm: stat.comm,
            exe: exe_link,
            cmdline,
            state: status.state,
            ppid: stat.ppid,
            threads: status.threads,
            age_seconds,
            cpu_seconds: (stat.utime_ticks + stat.stime_ticks) as f64 / ticks,
            runtimes,
        },
        memory,
        mappings,
        mapping_totals,
        thread_stacks,
        allocator,
        glibc: glibc_version,
        glibc_arenas: arenas,
        cgroup: container,
        host: host_of(online_cpus),
        tree: None,
        advice: Vec::new(),
        watch: None,
    };
    ins.advice = advice::advise(&ins);
    Ok(ins)
}

/// What could not be read for lack of rights, and what would help.
fn access_of(p: &Partial, status_text: &str) -> Option<Access> {
    (!p.denied.is_empty()).then(|| {
        let owner = owner_uid(status_text);
        Access {
            our_uid: our_uid(),
            owner_uid: owner,
            denied: p.denied.clone(),
            hint: access_hint(p.pid, our_uid(), owner),
        }
    })
}

/// The host's CPUs and memory.
fn host_of(online_cpus: u32) -> Host {
    Host {
        online_cpus,
        memory_bytes: std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| host::parse_meminfo_total(&t))
            .unwrap_or(0),
    }
}

/// The process as it is first seen: its stat and status, or why it cannot be inspected
/// (not found, a zombie, a kernel thread).
fn first_look(pid: i32) -> Result<(proc::Stat, String, proc::Status), InspectError> {
    if pid <= 0 {
        return Err(InspectError::NotFound { pid });
    }
    let stat = proc::read_stat(pid)?;
    let status_text =
        proc::read_proc_file(pid, "status").map(|b| String::from_utf8_lossy(&b).into_owned())?;
    let status = proc::parse_status(&status_text)?;
    if stat.state == 'Z' || status.state == 'Z' {
        return Err(InspectError::Zombie {
            pid,
            comm: stat.comm,
            ppid: stat.ppid,
        });
    }
    let stat_text = proc::read_proc_file(pid, "stat")
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if is_kernel_thread(&stat_text, &status_text) {
        return Err(InspectError::KernelThread {
            pid,
            comm: stat.comm,
        });
    }
    Ok((stat, status_text, status))
}

/// The process's memory from its status and `smaps_rollup`.
fn memory_of(status: &proc::Status, rollup: Option<&proc::SmapsRollup>) -> Memory {
    Memory {
        rss_bytes: status.vm_rss,
        rss_anon_bytes: status.rss_anon,
        rss_file_bytes: status.rss_file,
        rss_shmem_bytes: status.rss_shmem,
        pss_bytes: rollup.map(|r| r.pss),
        uss_bytes: rollup.map(|r| r.uss),
        swap_bytes: status.vm_swap,
        peak_rss_bytes: status.vm_hwm,
        vsz_bytes: status.vm_size,
    }
}

/// The process's mappings with their figures (`smaps`); an empty file means it is gone.
fn read_smaps(p: &mut Partial, pid: i32) -> Vec<(Mapping, classify::MapStats)> {
    let smaps_text = p
        .take("/proc/PID/smaps", proc::read_proc_file(pid, "smaps"))
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    if smaps_text.as_deref() == Some("") && !p.gone {
        // An empty smaps: the address space is already torn down.
        p.gone = true;
        p.missing.push(format!(
            "process {pid} exited before its mappings could be read"
        ));
    }
    match smaps_text.as_deref().map(classify::parse_smaps) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            p.missing.push(e.to_string());
            Vec::new()
        }
        None => Vec::new(),
    }
}

/// glibc's arenas counted from heap headers (or estimated from the maps when
/// `/proc/PID/mem` cannot be read), with the heaps' address ranges.
fn glibc_arenas(
    p: &mut Partial,
    allocator: Option<&Allocator>,
    maps: &[Mapping],
    env: &[(String, String)],
    status: &proc::Status,
) -> (Option<Arenas>, Vec<(u64, u64)>) {
    let pid = p.pid;
    let online_cpus = host::online_cpus();
    let mut heap_ranges = Vec::new();
    let arenas = match allocator {
        Some(a) if a.is_glibc() && !p.gone => {
            let count = match arenas::ProcMem::open(pid) {
                Ok(mut mem) => arenas::count_from_headers(maps, &mut mem, proc::page_size()),
                Err(e) => {
                    if e.kind() == io::ErrorKind::PermissionDenied {
                        p.denied.push("/proc/PID/mem".into());
                    }
                    p.missing.push(format!(
                        "/proc/{pid}/mem: {e}; arena count estimated from the maps (counts heaps, an upper bound)"
                    ));
                    arenas::estimate(maps)
                }
            };
            heap_ranges = count.heap_ranges.clone();
            let limit = arenas::arena_limit(env, online_cpus);
            Some(Arenas {
                count: count.arenas,
                method: count.method,
                heaps: count.heaps,
                limit: limit.limit,
                limit_source: limit.source,
                threads: status.threads,
            })
        }
        _ => None,
    };
    (arenas, heap_ranges)
}

/// The sums over every mapping, beside the kernel's own `smaps_rollup`.
fn totals(mappings: &[Group], rollup: Option<&proc::SmapsRollup>) -> MappingTotals {
    let sum = |f: fn(&Group) -> u64| mappings.iter().map(f).sum::<u64>();
    MappingTotals {
        mappings: sum(|g| g.mappings),
        size_bytes: sum(|g| g.size_bytes),
        rss_bytes: sum(|g| g.rss_bytes),
        pss_bytes: sum(|g| g.pss_bytes),
        uss_bytes: sum(|g| g.uss_bytes),
        swap_bytes: sum(|g| g.swap_bytes),
        rollup_rss_bytes: rollup.map(|r| r.rss),
        rollup_pss_bytes: rollup.map(|r| r.pss),
    }
}

/// A last look: did the process outlive the reads?
fn last_look(p: &mut Partial, started: u64) {
    if p.gone {
        return;
    }
    let pid = p.pid;
    match proc::read_stat(pid) {
        Ok(s) if s.starttime_ticks == started && s.state != 'Z' => {}
        _ => {
            p.gone = true;
            p.missing.push(format!(
                "process {pid} exited during the inspection; figures are from before"
            ));
        }
    }
}

/// What the executable says, plus whether it is a Go program.
struct ExeFacts {
    elf: elf::ElfFacts,
    go: bool,
}

fn exe_elf_facts(pid: i32, link_target: Option<&str>) -> Result<ExeFacts, String> {
    let path = crate::linux::proc::exe_file(pid, link_target);
    let facts = elf::inspect_elf(&path).map_err(|e| e.to_string())?;
    Ok(ExeFacts {
        go: is_go_program(&path),
        elf: facts,
    })
}

/// A Go executable carries a `.go.buildinfo` section.
fn is_go_program(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    // SAFETY: read-only private mapping of an executable that is running (ETXTBSY).
    let Ok(bytes) = (unsafe { memmap2::Mmap::map(&f) }) else {
        return false;
    };
    let Ok(e) = goblin::elf::Elf::parse(&bytes) else {
        return false;
    };
    e.section_headers
        .iter()
        .any(|s| e.shdr_strtab.get_at(s.sh_name) == Some(".go.buildinfo"))
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn allocator_facts(libs: &[String], exe: Option<&ExeFacts>, env: &[(String, String)]) -> Allocator {
    let f = exe.map(|e| &e.elf);
    let linked = f.map_or_else(Vec::new, |f| {
        linked_allocators(f, libs, &mut |p| needed_of_file(p))
    });
    let name = detect_allocator(libs, f, &linked).to_string();
    let mut evidence = Vec::new();
    if let Some(f) = f {
        match &f.linkage {
            Linkage::Static => evidence.push(
                "the executable is statically linked (no PT_INTERP): the dynamic loader never runs"
                    .into(),
            ),
            Linkage::Dynamic { interpreter } => {
                evidence.push(format!("dynamically linked (interpreter {interpreter})"))
            }
        }
        if f.defines_malloc {
            evidence.push("the executable defines malloc itself".into());
        }
        if let Some(b) = f.bundled_allocator {
            evidence.push(format!("allocator symbols in the executable: {b:?}").to_lowercase());
        }
    }
    let alloc_libs: Vec<&String> = libs
        .iter()
        .filter(|l| elf::allocator_of_library(l).is_some())
        .collect();
    for l in &alloc_libs {
        evidence.push(format!("{} is mapped", l));
    }
    if alloc_libs.is_empty() {
        if let Some(libc) = libs.iter().find(|l| glibc::is_libc(l)) {
            evidence.push(format!(
                "no other allocator library is mapped; malloc comes from glibc's {libc}"
            ));
        }
    }
    let ld_preload = env
        .iter()
        .find(|(k, _)| k == "LD_PRELOAD")
        .map(|(_, v)| v.clone());
    for l in &linked {
        evidence.push(format!(
            "the program is built with {}: {l}",
            l.name.as_str()
        ));
    }
    if let Some(pre) = &ld_preload {
        evidence.push(format!("LD_PRELOAD={pre} in the initial environment"));
        let over = pre
            .split([' ', ':'])
            .filter(|s| elf::allocator_of_library(s).is_some())
            .find_map(|s| crate::linux::allocator::preload_over_linked(s, &linked));
        evidence.extend(over);
    }
    let preload_alloc = ld_preload.as_deref().and_then(|pre| {
        pre.split([' ', ':'])
            .filter(|s| !s.is_empty())
            .find_map(elf::allocator_of_library)
    });
    let preload_ignored = match (preload_alloc, f) {
        (Some(_), Some(f)) if f.linkage == Linkage::Static => Some(
            "LD_PRELOAD names an allocator, but a static executable ignores LD_PRELOAD".to_string(),
        ),
        (Some(_), Some(f)) if f.defines_malloc => Some(
            "LD_PRELOAD names an allocator, but the executable's own malloc comes first in symbol lookup"
                .to_string(),
        ),
        (Some(b), _) if !libs.iter().any(|l| elf::allocator_of_library(l) == Some(b)) => Some(
            "LD_PRELOAD names an allocator that is not mapped (setuid program, or a wrong path?)"
                .to_string(),
        ),
        _ => None,
    };
    let settings = env
        .iter()
        .filter(|(k, _)| SETTINGS_PREFIXES.iter().any(|p| k.starts_with(p)))
        .cloned()
        .collect();
    Allocator {
        name,
        evidence,
        linkage: f.map(|f| match f.linkage {
            Linkage::Static => "static".into(),
            Linkage::Dynamic { .. } => "dynamic".into(),
        }),
        defines_malloc: f.map(|f| f.defines_malloc),
        ld_preload,
        preload_ignored,
        settings,
    }
}

fn runtime_hints(
    libs: &[String],
    exe: Option<&str>,
    cmdline: &[String],
    facts: Option<&ExeFacts>,
) -> Vec<RuntimeHint> {
    let mut out: Vec<RuntimeHint> = Vec::new();
    let mut add = |runtime: Runtime, evidence: String| {
        if !out.iter().any(|h| h.runtime == runtime) {
            out.push(RuntimeHint { runtime, evidence });
        }
    };
    for l in libs {
        let n = file_name(l);
        let rt = if n.starts_with("libruby") {
            Some(Runtime::Ruby)
        } else if n.starts_with("libpython") {
            Some(Runtime::Python)
        } else if n == "libjvm.so" {
            Some(Runtime::Jvm)
        } else if n.starts_with("libnode.so") {
            Some(Runtime::Node)
        } else if n.starts_with("libperl.so") {
            Some(Runtime::Perl)
        } else {
            None
        };
        if let Some(rt) = rt {
            add(rt, format!("{n} is mapped"));
        }
    }
    let exe_name = exe
        .map(|e| file_name(e.strip_suffix(" (deleted)").unwrap_or(e)).to_string())
        .or_else(|| cmdline.first().map(|c| file_name(c).to_string()));
    if let Some(n) = exe_name {
        let rt = if n.starts_with("ruby") {
            Some(Runtime::Ruby)
        } else if n.starts_with("python") {
            Some(Runtime::Python)
        } else if n == "java" {
            Some(Runtime::Jvm)
        } else if n == "node" || n == "nodejs" {
            Some(Runtime::Node)
        } else if n == "beam.smp" {
            Some(Runtime::Erlang)
        } else if n.starts_with("perl") {
            Some(Runtime::Perl)
        } else {
            None
        };
        if let Some(rt) = rt {
            add(rt, format!("executable {n}"));
        }
    }
    if facts.is_some_and(|f| f.go) {
        add(
            Runtime::Go,
            "the executable has a .go.buildinfo section (Go's heap does not use malloc)".into(),
        );
    }
    out
}

/// The glibc arena count of `pid` now (heap headers, or the estimate when
/// `/proc/PID/mem` is refused); `None` when the maps are unreadable.
pub fn arenas_now(pid: i32) -> Option<u64> {
    let maps = maps::parse_maps(&proc::read_maps_text(pid).ok()?).ok()?;
    if maps.is_empty() {
        return None;
    }
    let c = match arenas::ProcMem::open(pid) {
        Ok(mut mem) => arenas::count_from_headers(&maps, &mut mem, proc::page_size()),
        Err(_) => arenas::estimate(&maps),
    };
    Some(c.arenas)
}

/// Samples RSS, PSS, threads (and glibc arenas when `count_arenas`) of `pid` every
/// `interval` for `duration` (or until it exits or `stop` is set), then judges the
/// RSS series. `on_sample` sees each sample as it comes.
pub fn watch(
    pid: i32,
    duration: Duration,
    interval: Duration,
    count_arenas: bool,
    stop: &AtomicBool,
    on_sample: &mut dyn FnMut(&Sample),
) -> Watch {
    let start = Instant::now();
    let starttime = proc::read_stat(pid).ok().map(|s| s.starttime_ticks);
    let mut samples = Vec::new();
    let mut next = start;
    let end = loop {
        if stop.load(Ordering::Relaxed) {
            break WatchEnd::Interrupted;
        }
        let same = proc::read_stat(pid)
            .ok()
            .filter(|s| Some(s.starttime_ticks) == starttime && s.state != 'Z');
        let status = same.and_then(|_| proc::read_status(pid).ok());
        let Some(status) = status else {
            break WatchEnd::ProcessExited;
        };
        let t_seconds = start.elapsed().as_secs_f64();
        let pss_bytes = proc::read_smaps_rollup(pid).ok().map(|r| r.pss);
        let arenas = if count_arenas { arenas_now(pid) } else { None };
        let s = Sample {
            t_seconds,
            rss_bytes: status.vm_rss,
            pss_bytes,
            threads: status.threads,
            arenas,
        };
        on_sample(&s);
        samples.push(s);
        if start.elapsed() >= duration {
            break WatchEnd::Completed;
        }
        next += interval;
        // Sleep in small steps so an interrupt is honoured quickly.
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
        }
    };
    let series: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (s.t_seconds, s.rss_bytes as f64))
        .collect();
    let rules = TrendRules {
        min_seconds: TrendRules::default()
            .min_seconds
            .max(interval.as_secs_f64() * 4.0),
        ..TrendRules::default()
    };
    Watch {
        interval_seconds: interval.as_secs_f64(),
        requested_seconds: duration.as_secs_f64(),
        end,
        samples,
        trend: trend::trend(&series, &rules),
    }
}

/// How `memtrial inspect` was asked to run. What it shows and where is the caller's
/// ([`render::InspectExport`] and the printer); this is what to gather.
#[derive(Debug, Clone)]
pub struct Options {
    pub pid: i32,
    pub watch: Option<Duration>,
    pub interval: Duration,
    /// Sum over the process and its descendants.
    pub tree: bool,
}

/// Runs `memtrial inspect --top N`: the processes holding the most memory.
pub fn run_top(n: usize, by: procs::RankBy) -> Result<procs::Top, InspectError> {
    procs::top(n, by)
}

/// Runs `memtrial inspect`: gathers, optionally watches (each sample is handed to
/// `on_sample`; a progress line to `note`), and returns the inspection.
pub fn run(
    opts: &Options,
    note: &mut dyn FnMut(&str),
    on_sample: &mut dyn FnMut(&Sample),
    stop: &AtomicBool,
) -> Result<Inspection, InspectError> {
    let mut ins = gather(opts.pid)?;
    if opts.tree {
        match procs::tree(opts.pid) {
            Ok(t) => ins.tree = Some(t),
            Err(e) => {
                ins.complete = false;
                ins.missing.push(format!("--tree: {e}"));
            }
        }
    }
    if let Some(d) = opts.watch {
        note(&format!(
            "watching PID {} every {} for {} (Ctrl-C ends early)…",
            opts.pid,
            crate::units::format_seconds(opts.interval.as_secs_f64()),
            crate::units::format_seconds(d.as_secs_f64())
        ));
        let count_arenas = ins.glibc_arenas.is_some();
        let w = watch(opts.pid, d, opts.interval, count_arenas, stop, on_sample);
        if w.end == WatchEnd::ProcessExited {
            ins.complete = false;
            ins.missing.push(format!(
                "process {} exited {:.1} s into the watch",
                opts.pid,
                w.samples.last().map_or(0.0, |s| s.t_seconds)
            ));
        }
        ins.watch = Some(w);
        ins.advice = advice::advise(&ins);
    }
    Ok(ins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_kernel_thread_is_named_not_exited() {
        // Captured on kernel 6.18: kthreadd (PID 2), and a user process.
        let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";
        let user = "4242 (sleep) S 1 4242 4242 0 -1 4194304 97 0 0 0 0 0 0 0 20 0 1 0 300 5578752 224 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert!(is_kernel_thread(kthreadd, "Name:\tkthreadd\n"));
        assert!(!is_kernel_thread(user, "Name:\tsleep\n"));
        assert!(is_kernel_thread(user, "Name:\tx\nKthread:\t1\n"));
        assert!(!is_kernel_thread(kthreadd, "Name:\tx\nKthread:\t0\n"));
        assert!(!is_kernel_thread("", ""));
    }

    #[test]
    fn inspect_as_root_is_not_told_to_run_as_root() {
        for cap in [Some(true), Some(false), None] {
            let h = access_hint_for(1, 0, Some(0), cap, None);
            assert!(!h.contains("run memtrial as root"), "{h}");
            assert!(!h.contains("or as root"), "{h}");
        }
        let h = access_hint_for(1, 0, Some(0), Some(false), None);
        assert!(h.contains("without CAP_SYS_PTRACE"), "{h}");
        let h = access_hint_for(1, 0, Some(0), Some(true), Some(3));
        assert!(h.contains("security policy") && h.contains("PID 1"), "{h}");
        assert!(h.contains("scope 3"), "{h}");
        // Another user is still told whose rights are needed.
        let h = access_hint_for(7, 1000, Some(0), Some(false), None);
        assert!(h.contains("run memtrial as UID 0 or as root"), "{h}");
    }
}
