//! One scrape's reads: which processes match, their cheap figures (`stat`, `status`,
//! `cgroup`, the probe's report) every scrape, their costly figures (`smaps_rollup`, the
//! maps, the arena headers through `/proc/PID/mem`, the executable's ELF) within a time
//! budget, cached between scrapes per process (PID plus start time).
//!
//! A process that cannot be read — permission refused, gone mid-read — is counted by
//! reason and shown with what could be read; it never fails the scrape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use regex::Regex;

use super::figures::{
    AllocatorLabel, ArenaFigures, ExporterFigures, ProbeFigures, ProcessFigures, Snapshot,
    Unreadable,
};
use super::reader::{Kept, Reader, Shape};
use crate::inspect::arenas;
use crate::linux::allocator::{detect_allocator, linked_allocators, needed_of_file};
use crate::linux::container;
use crate::linux::elf;
use crate::linux::maps;
use crate::linux::proc::{self, ProcError};
use crate::linux::safe_file;

/// What the collector needs to know, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Matched against `comm` and against the command line (arguments joined by spaces).
    pub matcher: Regex,
    pub per_process: bool,
    /// Time per scrape for costly reads.
    pub budget: Duration,
    /// A cached costly figure older than this is read again (when the budget allows).
    pub max_age: Duration,
    /// Where the probe's reports are looked for inside each process's root filesystem
    /// (`--probe-dir`, an absolute path of plain names): memtrial's own configuration,
    /// never a path a process named.
    pub probe_dir: PathBuf,
}

/// The costly figures of one process, as last read.
#[derive(Debug, Clone)]
struct Costly {
    at: Instant,
    pss_bytes: Option<u64>,
    uss_bytes: Option<u64>,
    arenas: Option<ArenaFigures>,
    /// Why part of it could not be read, if so.
    problem: Option<Unreadable>,
}

/// What is kept of one process between scrapes.
#[derive(Debug, Default)]
struct Cached {
    /// Field 22 of `stat`: a PID reused by another process starts afresh.
    start: u64,
    /// The name: a process that execs another program (same PID and start time, a new
    /// name) starts afresh too.
    comm: String,
    /// The initial environment (it never changes); `None` until read.
    env: Option<Vec<(String, String)>>,
    /// The allocator (from the maps and the executable), read once.
    allocator: Option<AllocatorLabel>,
    costly: Option<Costly>,
    /// Whether its `stat`, `status` and `cgroup` are kept open (within the descriptor
    /// budget), and those descriptors.
    keep: bool,
    stat: Kept,
    status: Kept,
    cgroup: Kept,
}

/// Reasons one process could not be read at this scrape.
#[derive(Debug, Default)]
struct Problems(BTreeSet<Unreadable>);

impl Problems {
    fn note(&mut self, e: &ProcError) {
        self.0.insert(reason(e));
    }
}

fn reason(e: &ProcError) -> Unreadable {
    match e {
        ProcError::Gone { .. } => Unreadable::Vanished,
        ProcError::PermissionDenied { .. } => Unreadable::PermissionDenied,
        ProcError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            Unreadable::PermissionDenied
        }
        _ => Unreadable::Error,
    }
}

fn io_reason(e: &std::io::Error) -> Unreadable {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => Unreadable::Vanished,
        Some(libc::EACCES) | Some(libc::EPERM) => Unreadable::PermissionDenied,
        _ => Unreadable::Error,
    }
}

/// The collector: settings, the cache and the running counters.
pub struct Collector {
    settings: Settings,
    /// The exporter's own PID: it and its descendants are never matched, whatever the
    /// regex (its own command line holds the regex).
    myself: i32,
    online_cpus: u32,
    page: u64,
    cache: HashMap<i32, Cached>,
    figures: ExporterFigures,
    /// The buffer every `/proc` read of a scrape goes through.
    reader: Reader,
    /// The `status` of the process being read (kept: its buffer is reused).
    status_text: String,
    /// How many processes may have their `stat`, `status` and `cgroup` kept open.
    keep_processes: usize,
}

/// A matched process at this scrape, before its costly reads.
struct Matched {
    pid: i32,
    comm: String,
    start: u64,
}

impl Collector {
    pub fn new(settings: Settings) -> Collector {
        let figures = ExporterFigures {
            budget_seconds: settings.budget.as_secs_f64(),
            max_age_seconds: settings.max_age.as_secs_f64(),
            ..ExporterFigures::default()
        };
        Collector {
            settings,
            myself: std::process::id() as i32,
            online_cpus: crate::linux::host::online_cpus(),
            page: proc::page_size(),
            cache: HashMap::new(),
            figures,
            reader: Reader::default(),
            status_text: String::new(),
            keep_processes: keep_budget(),
        }
    }

    /// One scrape: every matched process's figures.
    pub fn scrape(&mut self) -> Snapshot {
        let began = Instant::now();
        let matched = self.matching();
        // Forget processes that are gone, no longer match, or exec'd another program.
        let live: HashMap<i32, (u64, &str)> = matched
            .iter()
            .map(|m| (m.pid, (m.start, m.comm.as_str())))
            .collect();
        self.cache.retain(|pid, c| {
            live.get(pid)
                .is_some_and(|(s, comm)| *s == c.start && *comm == c.comm)
        });
        self.refresh_costly(&matched, began);
        let mut processes = Vec::with_capacity(matched.len());
        let mut unreadable: BTreeMap<Unreadable, u64> = BTreeMap::new();
        let mut cgroups: HashMap<String, container::Container> = HashMap::new();
        for m in &matched {
            let mut problems = Problems::default();
            if let Some(p) = self.cheap(m, &mut cgroups, &mut problems) {
                processes.push(p);
            }
            for r in problems.0 {
                *unreadable.entry(r).or_default() += 1;
            }
        }
        // Who else each memory cgroup holds: a group's cgroup figures are its own only
        // where the cgroup holds nothing but the group's processes.
        let mut cgroup_members = BTreeMap::new();
        for (text, cont) in &cgroups {
            if let Some(m) = &cont.memory {
                if !cgroup_members.contains_key(&m.path) {
                    if let Some(found) = container::memory_members(text) {
                        cgroup_members.insert(m.path.clone(), found);
                    }
                }
            }
        }
        self.figures.scrapes += 1;
        self.figures.collect_seconds = began.elapsed().as_secs_f64();
        Snapshot {
            processes,
            unreadable,
            exporter: self.figures.clone(),
            per_process: self.settings.per_process,
            cgroup_members,
        }
    }

    /// The processes whose `comm` or command line the regex matches (no kernel threads,
    /// no zombies, never the exporter itself nor its descendants).
    fn matching(&mut self) -> Vec<Matched> {
        let Ok(pids) = proc::list_pids() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut parents: HashMap<i32, i32> = HashMap::with_capacity(pids.len());
        let mut wrappers: std::collections::HashSet<i32> = std::collections::HashSet::new();
        for pid in pids {
            let read = match self.cache.get_mut(&pid) {
                Some(c) => self.reader.kept(
                    &mut c.stat,
                    c.keep,
                    pid,
                    "stat",
                    Shape::OnePiece,
                    KERNEL_MAX,
                ),
                None => self.reader.proc(pid, "stat", Shape::OnePiece, KERNEL_MAX),
            };
            let stat = match read {
                Ok(b) if !b.is_empty() => proc::parse_stat(&String::from_utf8_lossy(b)),
                _ => continue, // gone before it could be named: it was never matched
            };
            let Ok(stat) = stat else { continue };
            parents.insert(pid, stat.ppid);
            // Kernel threads are kthreadd (PID 2) and its children.
            if stat.state == 'Z' || stat.pid == 2 || stat.ppid == 2 {
                continue;
            }
            let by_name = self.settings.matcher.is_match(&stat.comm);
            // Matched by its command line alone, and that line holds the exporter's own
            // `--match` text: if it is also an ancestor of the exporter, it is a wrapper
            // that started it (`timeout … memtrial exporter …`, `sh -c '…'`).
            let mut holds_match = false;
            let hit = by_name
                || self
                    .reader
                    .proc(pid, "cmdline", Shape::Pieces, OUTSIDE_MAX)
                    .is_ok_and(|b| {
                        let line = String::from_utf8_lossy(b).replace('\0', " ");
                        let hit = self.settings.matcher.is_match(line.trim_end());
                        holds_match = hit && line.contains(self.settings.matcher.as_str());
                        hit
                    });
            if hit {
                if holds_match {
                    wrappers.insert(pid);
                }
                out.push(Matched {
                    pid,
                    comm: stat.comm,
                    start: stat.starttime_ticks,
                });
            }
        }
        let ancestors = ancestors_of(self.myself, &parents);
        // Neither the exporter's own children nor a wrapper that started it.
        let own = |pid: i32| {
            descends_from(pid, self.myself, &parents)
                || (wrappers.contains(&pid) && ancestors.contains(&pid))
        };
        out.retain(|m| !own(m.pid));
        out
    }

    /// Reads the costly figures of the processes whose cache is missing or older than
    /// `--max-age`, the oldest first, while the scrape's budget lasts.
    fn refresh_costly(&mut self, matched: &[Matched], began: Instant) {
        let now = Instant::now();
        let mut due: Vec<(Option<Instant>, &Matched)> = Vec::new();
        for m in matched {
            let keep = self.cache.len() < self.keep_processes;
            let c = self.cache.entry(m.pid).or_insert_with(|| Cached {
                start: m.start,
                comm: m.comm.clone(),
                keep,
                ..Cached::default()
            });
            // An allocator not yet known although the maps were read: the loader had not
            // mapped the libraries yet (just after exec); read again.
            let unsettled =
                c.allocator.is_none() && c.costly.as_ref().is_some_and(|k| k.problem.is_none());
            match &c.costly {
                Some(k) if !unsettled && now.duration_since(k.at) < self.settings.max_age => {
                    self.figures.cached_reads += 1;
                }
                k => due.push((k.as_ref().map(|k| k.at), m)),
            }
        }
        // Never read first, then the oldest.
        due.sort_by_key(|(at, _)| *at);
        for (_, m) in due {
            if began.elapsed() >= self.settings.budget {
                self.figures.deferred_reads += 1;
                continue;
            }
            self.figures.costly_reads += 1;
            let online = self.online_cpus;
            let page = self.page;
            if let Some(c) = self.cache.get_mut(&m.pid) {
                read_costly(&mut self.reader, m.pid, c, online, page);
            }
        }
    }

    /// The cheap figures of one process (every scrape), with its cached costly ones.
    fn cheap(
        &mut self,
        m: &Matched,
        cgroups: &mut HashMap<String, container::Container>,
        problems: &mut Problems,
    ) -> Option<ProcessFigures> {
        let c = self.cache.entry(m.pid).or_default();
        let status = read_status(&mut self.reader, c, m.pid, &mut self.status_text, problems)?;
        if c.env.is_none() {
            match read_environ(&mut self.reader, m.pid) {
                // Empty: mid-execve, or a process that cleared it; try again next time.
                Ok(env) if env.is_empty() => {}
                Ok(env) => c.env = Some(env),
                Err(e) => {
                    problems.0.insert(io_reason(&e));
                }
            }
        }
        if let Some(r) = c.costly.as_ref().and_then(|k| k.problem) {
            problems.0.insert(r);
        }
        let probe = match c.env.as_deref() {
            Some(env) => {
                probe_of(m.pid, env, &status, &self.settings.probe_dir).unwrap_or_else(|r| {
                    problems.0.insert(r);
                    None
                })
            }
            None => None,
        };
        let cont = match self.reader.kept(
            &mut c.cgroup,
            c.keep,
            m.pid,
            "cgroup",
            Shape::OnePiece,
            KERNEL_MAX,
        ) {
            Ok(b) => {
                let text = String::from_utf8_lossy(b);
                let key = text.as_ref();
                if !cgroups.contains_key(key) {
                    let cont =
                        container::read_container(m.pid, key, &self.status_text, self.online_cpus);
                    cgroups.insert(key.to_string(), cont);
                }
                cgroups.get(key)
            }
            Err(e) => {
                problems.0.insert(io_reason(&e));
                None
            }
        };
        let costly = c.costly.as_ref();
        let visible_cpus = cont.map_or(self.online_cpus, |c| c.visible_cpus);
        let jemalloc_arenas = c.allocator.filter(|a| a.name == "jemalloc").map(|_| {
            super::figures::jemalloc_arenas(
                probe.as_ref(),
                c.env.as_deref().unwrap_or(&[]),
                visible_cpus,
            )
        });
        Some(ProcessFigures {
            pid: m.pid,
            group: m.comm.clone(),
            rss_bytes: status.vm_rss,
            swap_bytes: status.vm_swap,
            threads: status.threads,
            pss_bytes: costly.and_then(|k| k.pss_bytes),
            uss_bytes: costly.and_then(|k| k.uss_bytes),
            costly_age_seconds: costly.map(|k| k.at.elapsed().as_secs_f64()),
            allocator: c.allocator,
            arenas: costly.and_then(|k| k.arenas),
            cpu_quota_cpus: cont.and_then(|c| c.cpu_quota_cpus),
            visible_cpus,
            memory_limit_bytes: cont.and_then(|c| c.memory_limit_bytes),
            cgroup_working_set: cont
                .and_then(|c| c.memory.as_ref())
                .and_then(|m| Some((m.path.clone(), m.working_set_bytes?))),
            probe,
            jemalloc_arenas,
        })
    }
}

/// `pid`'s `status`, read through `c`'s kept descriptor into `text`, and parsed; `None`
/// (said in `problems`) when the process is gone or the file could not be read.
fn read_status(
    reader: &mut Reader,
    c: &mut Cached,
    pid: i32,
    text: &mut String,
    problems: &mut Problems,
) -> Option<proc::Status> {
    match reader.kept(
        &mut c.status,
        c.keep,
        pid,
        "status",
        Shape::OnePiece,
        KERNEL_MAX,
    ) {
        Ok(b) if !b.is_empty() => {
            text.clear();
            text.push_str(&String::from_utf8_lossy(b));
        }
        Ok(_) => {
            problems.0.insert(Unreadable::Vanished);
            return None;
        }
        Err(e) => {
            problems.0.insert(io_reason(&e));
            return None;
        }
    }
    proc::parse_status(text).map_err(|e| problems.note(&e)).ok()
}

/// The most read of a watched process's `cmdline` and `environ`, whose size the process
/// chooses: a command line is matched on its first MiB, an environment read up to 1 MiB.
const OUTSIDE_MAX: usize = 1 << 20;

/// The most read of a file the kernel sizes (`stat`, `status`, `cgroup`, `smaps_rollup`:
/// a few KiB), should one ever be longer.
const KERNEL_MAX: usize = 1 << 20;

/// Descriptors kept open per process: its `stat`, `status` and `cgroup`.
const KEPT_PER_PROCESS: usize = 3;

/// Descriptors left for everything else: the HTTP server's connections (up to 128
/// waiting for their head, 16 queued, 2 being answered), the files a scrape opens and
/// closes, the ELF files read once per process.
const RESERVED_FDS: u64 = 256;

/// How many processes may have their files kept open: what the soft limit on open files
/// (`RLIMIT_NOFILE`, often 1024) leaves beyond [`RESERVED_FDS`]. The processes beyond it
/// are read by path, as every file was before.
fn keep_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and has no other effect.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    let soft = lim.rlim_cur.min(1 << 20);
    (soft.saturating_sub(RESERVED_FDS) as usize) / KEPT_PER_PROCESS
}

/// The initial environment of a watched process, at most [`OUTSIDE_MAX`] bytes of it.
/// Cut there, its last entry (partial) is dropped.
fn read_environ(reader: &mut Reader, pid: i32) -> std::io::Result<Vec<(String, String)>> {
    let mut b = reader.proc(pid, "environ", Shape::Pieces, OUTSIDE_MAX)?;
    if b.len() >= OUTSIDE_MAX {
        let whole = b.iter().rposition(|c| *c == 0).map_or(0, |i| i + 1);
        b = &b[..whole];
    }
    Ok(proc::parse_environ(b))
}

/// The ancestors of `pid` by the parents seen in this listing (a bounded walk).
fn ancestors_of(pid: i32, parents: &HashMap<i32, i32>) -> std::collections::HashSet<i32> {
    let mut out = std::collections::HashSet::new();
    let mut cur = pid;
    for _ in 0..parents.len().min(1 << 16) + 1 {
        match parents.get(&cur) {
            Some(&p) if p > 0 && p != cur && out.insert(p) => cur = p,
            _ => break,
        }
    }
    out
}

/// Whether `pid` is `ancestor` or one of its descendants, by the parents seen in this
/// listing (a bounded walk: a cycle or a chain of any length ends it).
fn descends_from(pid: i32, ancestor: i32, parents: &HashMap<i32, i32>) -> bool {
    let mut cur = pid;
    for _ in 0..parents.len().min(1 << 16) + 1 {
        if cur == ancestor {
            return true;
        }
        match parents.get(&cur) {
            Some(&p) if p > 0 && p != cur => cur = p,
            _ => return false,
        }
    }
    false
}

/// The costly reads of one process into its cache entry: `smaps_rollup`, the maps, the
/// allocator (once), the arenas of a glibc process. The maps are read while the allocator
/// is unknown and, for a glibc process, for its arenas; where `/proc/PID/mem` opens, only
/// their anonymous read-write lines, the only places a heap header can be, are parsed.
fn read_costly(reader: &mut Reader, pid: i32, c: &mut Cached, online_cpus: u32, page: u64) {
    let mut problem = None;
    let rollup = match reader.proc(pid, "smaps_rollup", Shape::OnePiece, KERNEL_MAX) {
        // A zombie has no address space to report.
        Ok([]) => {
            problem.get_or_insert(Unreadable::Vanished);
            None
        }
        Ok(b) => proc::parse_smaps_rollup(&String::from_utf8_lossy(b))
            .map_err(|e| problem.get_or_insert(reason(&e)))
            .ok(),
        Err(e) => {
            problem.get_or_insert(io_reason(&e));
            None
        }
    };
    let known = c.allocator;
    if known.is_some_and(|a| !a.is_glibc()) {
        // Neither the allocator nor arenas to read from the maps.
        c.costly = Some(Costly {
            at: Instant::now(),
            pss_bytes: rollup.as_ref().map(|r| r.pss),
            uss_bytes: rollup.as_ref().map(|r| r.uss),
            arenas: None,
            problem,
        });
        return;
    }
    // Opened before the maps are read: where it opens, the maps are wanted only for the
    // heap headers' addresses.
    let mem = known.map(|_| arenas::ProcMem::open(pid));
    let maps = match reader.proc(pid, "maps", Shape::Pieces, usize::MAX) {
        // A zombie or a kernel thread has no mappings.
        Ok([]) => None,
        Ok(b) => {
            let text = String::from_utf8_lossy(b);
            match mem {
                Some(Ok(_)) => anon_rw(&text),
                _ => maps::parse_maps(&text).ok(),
            }
        }
        Err(e) => {
            problem.get_or_insert(io_reason(&e));
            None
        }
    };
    if c.allocator.is_none() {
        if let Some(maps) = &maps {
            c.allocator = allocator_of(pid, maps);
        }
    }
    if c.env.is_none() {
        c.env = read_environ(reader, pid).ok().filter(|e| !e.is_empty());
    }
    let arenas = match (&maps, c.allocator) {
        (Some(maps), Some(a)) if a.is_glibc() => {
            let mem = mem.unwrap_or_else(|| arenas::ProcMem::open(pid));
            let count = match mem {
                Ok(mut mem) => arenas::count_from_headers(maps, &mut mem, page),
                Err(e) => {
                    problem.get_or_insert(io_reason(&e));
                    arenas::estimate(maps)
                }
            };
            let env = c.env.as_deref().unwrap_or_default();
            Some(ArenaFigures {
                count: count.arenas,
                exact: count.method == arenas::Method::HeapHeaders,
                limit: arenas::arena_limit(env, online_cpus).limit,
            })
        }
        _ => None,
    };
    c.costly = Some(Costly {
        at: Instant::now(),
        pss_bytes: rollup.as_ref().map(|r| r.pss),
        uss_bytes: rollup.as_ref().map(|r| r.uss),
        arenas,
        problem,
    });
}

/// The anonymous read-write private mappings of a maps text (no path, inode 0, `rw-p`):
/// the only ones [`arenas::count_from_headers`] looks in. `None` when one of them is
/// malformed, as [`maps::parse_maps`] refuses the whole text then.
fn anon_rw(text: &str) -> Option<Vec<maps::Mapping>> {
    let mut out = Vec::new();
    for line in text.lines() {
        // address perms offset dev inode [path]
        let mut f = line.split_ascii_whitespace();
        if f.nth(1) != Some("rw-p") || f.nth(2) != Some("0") || f.next().is_some() {
            continue;
        }
        out.extend(maps::parse_maps(line).ok()?);
    }
    Some(out)
}

/// The allocator answering `malloc`, from the mapped libraries and the executable;
/// `None` while a dynamically linked program's loader has not mapped libc yet (just after
/// `execve`: the preloaded and needed libraries are not all there, so it would read as
/// glibc).
fn allocator_of(pid: i32, maps: &[maps::Mapping]) -> Option<AllocatorLabel> {
    let libs = maps::mapped_libraries(maps);
    let link = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string());
    let exe = elf::inspect_elf(&proc::exe_file(pid, link.as_deref())).ok();
    let dynamic = exe
        .as_ref()
        .is_none_or(|f| matches!(f.linkage, elf::Linkage::Dynamic { .. }));
    if dynamic && !libs.iter().any(|l| crate::inspect::glibc::is_libc(l)) {
        return None;
    }
    let linked = exe.as_ref().map_or_else(Vec::new, |f| {
        linked_allocators(f, &libs, &mut |p| needed_of_file(p))
    });
    Some(AllocatorLabel::from(&detect_allocator(
        &libs,
        exe.as_ref(),
        &linked,
    )))
}

/// The probe's latest report, when the process carries memtrial's allocator probe and
/// reports where the exporter looks: its environment's `MEMTRIAL_PROBE_DIR` is the
/// exporter's own `--probe-dir` (compared as data, never opened), and the file is
/// `<probe dir>/<its PID in its own namespace>` inside its root filesystem
/// (`/proc/PID/root`, so that a process in a container is found too), opened by
/// [`safe_file::open_beneath`] — no symbolic link followed, a regular file of the
/// process's uid or root only, never blocking — and read in two bounded reads.
///
/// A file that is there but refused (a FIFO, a device, a link, another user's) is
/// [`Unreadable::ProbeRefused`]; one not there (yet) is simply no report.
fn probe_of(
    pid: i32,
    env: &[(String, String)],
    status: &proc::Status,
    probe_dir: &Path,
) -> Result<Option<ProbeFigures>, Unreadable> {
    let Some(says) = env
        .iter()
        .find(|(k, _)| k == "MEMTRIAL_PROBE_DIR")
        .map(|(_, v)| v)
    else {
        return Ok(None);
    };
    if Path::new(says) != probe_dir {
        return Ok(None);
    }
    let Ok(rel) = probe_dir.strip_prefix("/") else {
        return Ok(None);
    };
    let rel = rel.join(status.ns_pid.unwrap_or(pid).to_string());
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let file = match safe_file::open_beneath(&root, &rel, &status.uids) {
        Ok(f) => f,
        Err(
            safe_file::SafeFileError::NotPlain { .. }
            | safe_file::SafeFileError::NotRegular { .. }
            | safe_file::SafeFileError::Owner { .. },
        ) => return Err(Unreadable::ProbeRefused),
        // Not there (yet), or the process's root not ours to read: no report.
        Err(_) => return Ok(None),
    };
    let Ok((head, tail, cut)) = safe_file::read_head_and_tail(&file, PROBE_HEAD, PROBE_TAIL) else {
        return Ok(None);
    };
    Ok(
        crate::probe::allocator::latest_of(&head, &tail, cut).map(|report| ProbeFigures {
            live_bytes: report.live_bytes,
            held_bytes: report.held_bytes,
            arenas: report.arenas,
        }),
    )
}

/// The probe file's header is its first line, within its first KiB; the latest figures
/// are in its last 8 KiB, however long the file grew.
const PROBE_HEAD: usize = 1024;
const PROBE_TAIL: usize = 8192;

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(re: &str) -> Settings {
        Settings {
            matcher: Regex::new(re).unwrap(),
            per_process: false,
            budget: Duration::from_millis(500),
            max_age: Duration::from_secs(30),
            probe_dir: PathBuf::from("/run/memtrial/probe"),
        }
    }

    #[test]
    fn reasons_of_proc_errors() {
        assert_eq!(reason(&ProcError::Gone { pid: 1 }), Unreadable::Vanished);
        assert_eq!(
            reason(&ProcError::PermissionDenied {
                path: "/proc/1/mem".into()
            }),
            Unreadable::PermissionDenied
        );
        assert_eq!(
            io_reason(&std::io::Error::from_raw_os_error(libc::ESRCH)),
            Unreadable::Vanished
        );
        assert_eq!(
            io_reason(&std::io::Error::from_raw_os_error(libc::EIO)),
            Unreadable::Error
        );
    }

    /// The readers on this test process (a collector that is not this process: the
    /// exporter never matches itself), with every figure read.
    #[test]
    fn scrape_finds_this_process_and_caches_its_costly_figures() {
        let me = std::process::id() as i32;
        let comm = proc::read_stat(me).unwrap().comm;
        let mut c = Collector::new(settings(&format!("^{}$", regex::escape(&comm))));
        c.myself = -1;
        let s = c.scrape();
        let p = s
            .processes
            .iter()
            .find(|p| p.pid == me)
            .expect("this process matches");
        assert_eq!(p.group, comm);
        assert!(p.rss_bytes > 0 && p.threads >= 1);
        assert!(p.pss_bytes.is_some(), "own smaps_rollup is readable");
        assert_eq!(p.allocator.map(|a| a.name), Some("glibc"));
        assert!(p.arenas.is_some_and(|a| a.count >= 1 && a.exact));
        assert_eq!(s.exporter.scrapes, 1);
        let read = s.exporter.costly_reads;
        assert!(read >= 1);
        // The second scrape serves the cached costly figures.
        let s = c.scrape();
        assert_eq!(s.exporter.costly_reads, read);
        assert!(s.exporter.cached_reads >= 1);
        assert_eq!(s.exporter.scrapes, 2);
    }

    #[test]
    fn a_spent_budget_defers_costly_reads() {
        let me = std::process::id() as i32;
        let comm = proc::read_stat(me).unwrap().comm;
        let mut st = settings(&format!("^{}$", regex::escape(&comm)));
        st.budget = Duration::ZERO;
        let mut c = Collector::new(st);
        c.myself = -1;
        let s = c.scrape();
        let p = s.processes.iter().find(|p| p.pid == me).unwrap();
        assert_eq!(p.pss_bytes, None);
        assert_eq!(s.exporter.costly_reads, 0);
        assert!(s.exporter.deferred_reads >= 1);
    }

    /// The exporter's own process and its children are never exported, though the
    /// regex matches them.
    #[test]
    fn the_collector_never_matches_itself_nor_its_children() {
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let kid = child.id() as i32;
        let comm = proc::read_stat(me).unwrap().comm;
        let mut c = Collector::new(settings(&format!("^({}|sleep)$", regex::escape(&comm))));
        let s = c.scrape();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            !s.processes.iter().any(|p| p.pid == me || p.pid == kid),
            "{:?}",
            s.processes.iter().map(|p| p.pid).collect::<Vec<_>>()
        );
    }

    /// The anonymous read-write lines are exactly the mappings the heap-header count looks
    /// in, on captured maps and on this process's own.
    #[test]
    fn anon_rw_lines_are_the_mappings_headers_are_looked_for_in() {
        let own = std::fs::read_to_string("/proc/self/maps").unwrap();
        for text in [
            include_str!("../../tests/fixtures/maps/cat_plain.txt"),
            include_str!("../../tests/fixtures/maps/cat_jemalloc.txt"),
            include_str!("../../tests/fixtures/maps/spaces_deleted_tcmalloc.txt"),
            include_str!("../../tests/fixtures/maps/static.txt"),
            own.as_str(),
        ] {
            let all = maps::parse_maps(text).unwrap();
            let light = anon_rw(text).unwrap();
            assert_eq!(
                arenas::header_addresses(&light),
                arenas::header_addresses(&all)
            );
            let want: Vec<_> = all
                .into_iter()
                .filter(|m| m.path.is_none() && m.inode == 0 && m.perms == "rw-p")
                .collect();
            assert_eq!(light, want);
        }
        // A malformed candidate line refuses the whole text, as parse_maps does.
        assert_eq!(anon_rw("zz-10 rw-p 00000000 00:00 0\n"), None);
    }

    #[test]
    fn descent_is_a_bounded_walk() {
        let parents: HashMap<i32, i32> = [(10, 5), (5, 1), (1, 0), (7, 8), (8, 7)].into();
        assert!(descends_from(10, 5, &parents));
        assert!(descends_from(5, 5, &parents));
        assert!(!descends_from(5, 10, &parents));
        assert!(!descends_from(7, 3, &parents), "a cycle ends the walk");
        assert!(!descends_from(99, 3, &parents));
        assert_eq!(ancestors_of(10, &parents), [5, 1].into());
        assert_eq!(
            ancestors_of(7, &parents),
            [8, 7].into(),
            "a cycle ends the walk"
        );
        assert!(ancestors_of(99, &parents).is_empty());
    }

    #[test]
    fn nothing_matches_nothing() {
        let mut c = Collector::new(settings("^no-such-process-name-here-x$"));
        let s = c.scrape();
        // This test's own command line does not contain it either.
        assert!(s.processes.is_empty());
    }

    /// A probe file of any content and size — random bytes, lines with huge or negative
    /// numbers, no newline at all, up to 64 KiB — is read in at most 1 + 8 KiB and parsed
    /// or ignored, never a panic.
    #[test]
    fn probe_files_of_hostile_content_are_read_bounded() {
        use proptest::prelude::*;
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: geteuid takes nothing and cannot fail.
        let me = unsafe { libc::geteuid() };
        let line = prop_oneof![
            Just("# memtrial-probe 1 1 glibc /lib/libc.so.6".to_string()),
            Just("# exit".to_string()),
            proptest::collection::vec(
                prop_oneof![
                    any::<u64>().prop_map(|n| n.to_string()),
                    Just("18446744073709551616".to_string()),
                    Just("-1".to_string()),
                    Just("-".to_string()),
                    "\\PC{0,20}",
                ],
                0..14
            )
            .prop_map(|f| f.join("\t")),
            "[^\n]{0,5000}",
        ];
        let content = prop_oneof![
            proptest::collection::vec(line, 0..400).prop_map(|l| l.join("\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..(64 << 10)),
        ];
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 48,
            ..Default::default()
        });
        runner
            .run(&content, |bytes| {
                std::fs::write(dir.path().join("1"), &bytes).unwrap();
                let f = safe_file::open_beneath(dir.path(), Path::new("1"), &[me]).unwrap();
                let (head, tail, cut) =
                    safe_file::read_head_and_tail(&f, PROBE_HEAD, PROBE_TAIL).unwrap();
                prop_assert!(head.len() <= PROBE_HEAD && tail.len() <= PROBE_TAIL);
                prop_assert_eq!(cut, bytes.len() > PROBE_TAIL);
                let _ = crate::probe::allocator::latest_of(&head, &tail, cut);
                Ok(())
            })
            .unwrap();
    }

    /// A probe file that claims a terabyte (sparse) costs the same two small reads.
    #[test]
    fn a_huge_probe_file_is_read_in_two_small_reads() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join("1")).unwrap();
        f.set_len(1 << 40).unwrap();
        // SAFETY: geteuid takes nothing and cannot fail.
        let me = unsafe { libc::geteuid() };
        let f = safe_file::open_beneath(dir.path(), Path::new("1"), &[me]).unwrap();
        let (head, tail, cut) = safe_file::read_head_and_tail(&f, PROBE_HEAD, PROBE_TAIL).unwrap();
        assert_eq!(
            (head.len(), tail.len(), cut),
            (PROBE_HEAD, PROBE_TAIL, true)
        );
        assert_eq!(crate::probe::allocator::latest_of(&head, &tail, cut), None);
    }
}
