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
//!
//! The data model lives in `model`, reading another process's files (and saying
//! which right was missing) in `access`, and the small facts read on the way
//! (runtime, age, cgroup limits) in `facts`; this file gathers them.

pub mod advice;
pub mod arenas;
pub use crate::linux::container;
pub use crate::linux::regions as classify;
mod access;
mod facts;
#[cfg(test)]
mod fixture;
pub mod glibc;
mod model;
pub mod procs;
pub mod render;

pub(crate) use access::*;
use facts::*;
pub use model::*;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::analysis::trend::{self, TrendRules};
use crate::linux::host;
use crate::linux::maps::{self, Mapping};
use crate::linux::proc::{self, ProcError};

pub use advice::{Advice, AdviceKind};
pub use classify::{Group, Kind};
pub use container::Container;

impl From<ProcError> for InspectError {
    fn from(e: ProcError) -> Self {
        match e {
            ProcError::Gone { pid } => InspectError::NotFound { pid },
            e => InspectError::Proc(e),
        }
    }
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

/// Inspects `pid` once.
pub(crate) fn gather(pid: i32) -> Result<Inspection, InspectError> {
    let (stat, status_text, status) = first_look(pid)?;
    let mut p = Partial {
        pid,
        missing: Vec::new(),
        denied: Vec::new(),
        gone: false,
    };
    let ticks = proc::clock_ticks_per_second() as f64;
    let age_seconds = age_of(stat.starttime_ticks as f64 / ticks);
    let exe_link = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string());
    let cmdline = cmdline_of(&mut p, pid);
    let rollup = p.take("/proc/PID/smaps_rollup", proc::read_smaps_rollup(pid));
    let memory = memory_of(&status, rollup.as_ref());
    let smaps = read_smaps(&mut p, pid);
    let maps: Vec<Mapping> = smaps.iter().map(|(m, _)| m.clone()).collect();
    let env = p
        .take("/proc/PID/environ", proc::read_environ(pid))
        .unwrap_or_default();

    // Allocator.
    let exe_facts = exe_facts_of(&mut p, pid, exe_link.as_deref());
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
    let container = container_of(&mut p, &status_text, online_cpus);
    last_look(&mut p, stat.starttime_ticks);

    let runtimes = runtime_hints(&libs, exe_link.as_deref(), &cmdline, exe_facts.as_ref());
    let thp = crate::linux::thp::host_mode().map(|host| ThpSeen {
        host,
        enabled_for_process: status.thp_enabled,
        anon_huge_bytes: rollup.as_ref().map(|r| r.anon_huge),
    });
    let trimmable = trimmable_of(&mut p, allocator.as_ref(), &maps, &heap_ranges);
    let jemalloc_arenas = allocator
        .as_ref()
        .filter(|a| a.name.starts_with("jemalloc"))
        .map(|_| {
            let visible = container.as_ref().and_then(|c| c.cpus_allowed_count);
            crate::linux::allocator::jemalloc_arenas(
                probe_arenas(pid, &env, &status),
                &env,
                visible.unwrap_or(online_cpus),
            )
        });
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
        thp,
        trimmable,
        jemalloc_arenas,
        trimmed: None,
    };
    ins.advice = advice::advise(&ins);
    Ok(ins)
}

/// Seconds since a process started `started` seconds after boot (`None` without
/// `/proc/uptime`).
fn age_of(started: f64) -> Option<f64> {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map(|up| (up - started).max(0.0))
}

/// The process's arguments, from `/proc/PID/cmdline` (empty when unreadable).
fn cmdline_of(p: &mut Partial, pid: i32) -> Vec<String> {
    p.take("/proc/PID/cmdline", proc::read_proc_file(pid, "cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What the executable's ELF says (static allocator, build); `None` once the process is
/// gone, or when it cannot be read (said in `missing`, and in `denied` for permission).
fn exe_facts_of(
    p: &mut Partial,
    pid: i32,
    exe_link: Option<&str>,
) -> Option<crate::linux::elf::ElfFacts> {
    if p.gone {
        return None;
    }
    exe_elf_facts(pid, exe_link)
        .map_err(|e| {
            if e.contains("Permission denied") {
                p.denied.push("/proc/PID/exe".into());
            }
            p.missing.push(format!("executable: {e}"))
        })
        .ok()
}

/// The process's container (cgroup, limits, CPUs it may use); its notes go to `missing`.
fn container_of(p: &mut Partial, status_text: &str, online_cpus: u32) -> Option<Container> {
    let pid = p.pid;
    let container = p
        .take("/proc/PID/cgroup", proc::read_proc_file(pid, "cgroup"))
        .map(|b| {
            container::read_container(pid, &String::from_utf8_lossy(&b), status_text, online_cpus)
        });
    if let Some(c) = &container {
        p.missing
            .extend(c.notes.iter().map(|n| format!("cgroup: {n}")));
    }
    container
}

/// What `malloc_trim(0)` could give back from a glibc process now (a walk over its heaps
/// through `/proc/PID/mem` and `pagemap`); `None` for another allocator, or when the walk
/// cannot be made (said in `missing`).
fn trimmable_of(
    p: &mut Partial,
    allocator: Option<&Allocator>,
    maps: &[Mapping],
    heap_ranges: &[(u64, u64)],
) -> Option<crate::linux::glibc_heap::Trimmable> {
    if p.gone || !allocator.is_some_and(|a| a.is_glibc()) {
        return None;
    }
    let starts: Vec<u64> = heap_ranges.iter().map(|(s, _)| *s).collect();
    match crate::linux::glibc_heap::trimmable(p.pid, maps, &starts, proc::page_size()) {
        Ok(t) => Some(t),
        Err(e) => {
            p.missing.push(format!("what a trim could return: {e}"));
            None
        }
    }
}

/// Asks memtrial's probe library in process `pid` to call `malloc_trim(0)` now: the library
/// must be preloaded with `MEMTRIAL_TRIM_DIR` (its trimming thread then looks for a request
/// once a second); memtrial never trims a process from outside. Makes
/// `<dir>/<pid>.request` beneath the process's root (no link followed, a directory of the
/// process's owner or root) and waits for the call's line in `<dir>/<pid>`: a request not
/// taken within 5 s is removed again.
/// The probe library's account of its trims, `account` below the process's `root`
/// (owned by one of `owners`): its header line, then the calls' lines of its last 64 KiB.
/// Empty while there is none.
fn trim_account(root: &std::path::Path, account: &std::path::Path, owners: &[u32]) -> Vec<String> {
    crate::linux::safe_file::open_beneath(root, account, owners)
        .ok()
        .and_then(|f| crate::linux::safe_file::read_head_and_tail(&f, 1024, 64 << 10).ok())
        .map(|(head, tail, cut)| {
            // The header from the head; the calls from the tail (its first line partial
            // when the file is longer than the tail).
            let head = String::from_utf8_lossy(&head);
            let mut out: Vec<String> = head.lines().take(1).map(String::from).collect();
            let tail = String::from_utf8_lossy(&tail);
            out.extend(
                tail.lines()
                    .skip(usize::from(cut))
                    .filter(|l| !l.starts_with('#'))
                    .map(String::from),
            );
            out
        })
        .unwrap_or_default()
}

fn ask_trim(pid: i32) -> Result<Trimmed, String> {
    let status = proc::read_status(pid).map_err(|e| e.to_string())?;
    let env = proc::read_environ(pid).map_err(|e| e.to_string())?;
    let Some(dir) = env
        .iter()
        .find(|(k, _)| k == "MEMTRIAL_TRIM_DIR")
        .map(|(_, v)| v.clone())
        .filter(|d| !d.is_empty())
    else {
        return Err(format!(
            "process {pid} does not carry memtrial's probe library with MEMTRIAL_TRIM_DIR; \
             memtrial never trims a process from outside: start it with \
             LD_PRELOAD=<memtrial probe-library --out …> MEMTRIAL_TRIM_DIR=DIR (its thread \
             trims when asked), or measure trimming as a variant: memtrial run --variant \
             'trim10s=trim:10s' …"
        ));
    };
    let rel = std::path::Path::new(&dir)
        .strip_prefix("/")
        .map_err(|_| format!("MEMTRIAL_TRIM_DIR={dir} is not an absolute path"))?
        .to_path_buf();
    let own = status.ns_pid.unwrap_or(pid).to_string();
    let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
    let account = rel.join(&own);
    let lines = || trim_account(&root, &account, &status.uids);
    let before = lines();
    if let Some(h) = before
        .first()
        .filter(|h| h.starts_with("# memtrial-trim 1 "))
    {
        if h.split(' ').nth(4).is_none_or(|a| a != "glibc") {
            return Err(format!(
                "malloc_trim is glibc's, and the probe library found another allocator answering malloc ({h})"
            ));
        }
    }
    let calls = |ls: &[String]| ls.iter().filter(|l| !l.starts_with('#')).count();
    let seen = calls(&before);
    let request = crate::linux::safe_file::create_new_beneath(
        &root,
        &rel.join(format!("{own}.request")),
        &status.uids,
    )
    .map_err(|e| format!("cannot ask: {e}"))?;
    // The library looks once a second: a request still there after 5 s is not heard (and is
    // taken back, so that nothing trims later); one taken is a call under way, which may
    // take long on a large heap (up to 2 minutes are waited for its line).
    let asked = std::time::Instant::now();
    let mut taken: Option<std::time::Instant> = None;
    loop {
        let now = lines();
        if calls(&now) > seen {
            let last = now
                .iter()
                .rfind(|l| !l.starts_with('#'))
                .cloned()
                .unwrap_or_default();
            let (before, after, cpu_ns, wall_ns, released) =
                crate::probe::trim::parse_trim_line(&last)
                    .ok_or_else(|| format!("the probe library wrote {last:?}"))?;
            return Ok(Trimmed {
                resident_before_bytes: before,
                resident_after_bytes: after,
                cpu_ns,
                wall_ns,
                released,
            });
        }
        if taken.is_none() && !request.exists() {
            taken = Some(std::time::Instant::now());
        }
        match taken {
            None if asked.elapsed() > Duration::from_secs(5) => {
                let _ = request.remove();
                return Err(format!(
                    "no answer within 5 s: the probe library in process {pid} did not take the request (is its \
                     trimming thread running? it needs MEMTRIAL_TRIM_DIR={dir} when the process starts); \
                     the request was taken back, nothing was trimmed"
                ));
            }
            Some(t) if t.elapsed() > Duration::from_secs(120) => {
                return Err(format!(
                    "the probe library in process {pid} took the request but wrote no call's line \
                     in {dir}/{own} within 2 minutes"
                ));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// jemalloc's own arena count from memtrial's probe in the process, where it is preloaded:
/// the latest line of `<MEMTRIAL_PROBE_DIR>/<its PID in its namespace>`, read through its
/// root as a regular file of its owner (never a link or a FIFO).
fn probe_arenas(pid: i32, env: &[(String, String)], status: &proc::Status) -> Option<u64> {
    let dir = env
        .iter()
        .find(|(k, _)| k == "MEMTRIAL_PROBE_DIR")
        .map(|(_, v)| v.as_str())?;
    let rel = std::path::Path::new(dir)
        .strip_prefix("/")
        .ok()?
        .join(status.ns_pid.unwrap_or(pid).to_string());
    let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
    let file = crate::linux::safe_file::open_beneath(&root, &rel, &status.uids).ok()?;
    let (head, tail, cut) = crate::linux::safe_file::read_head_and_tail(&file, 1024, 8192).ok()?;
    crate::probe::allocator::latest_of(&head, &tail, cut)?.arenas
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

/// The glibc arena count of `pid` now (heap headers, or the estimate when
/// `/proc/PID/mem` is refused); `None` when the maps are unreadable.
pub(crate) fn arenas_now(pid: i32) -> Option<u64> {
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
    /// Ask memtrial's probe library in the process to call `malloc_trim(0)` now.
    pub trim: bool,
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
    if opts.trim {
        note(&format!(
            "asking PID {}'s probe library to call malloc_trim(0)…",
            opts.pid
        ));
        ins.trimmed = Some(ask_trim(opts.pid).map_err(InspectError::Trim)?);
    }
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
