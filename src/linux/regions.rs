//! What each mapping of a process holds, grouped by kind, from `/proc/PID/smaps`.
//!
//! Kinds are decided from the mapping line alone (plus the set of glibc heaps: found by
//! `inspect` from their headers, or by [`heaps_from_maps`] from the mappings' shape):
//!
//! * `[heap]` is the brk heap, glibc's main arena;
//! * glibc malloc heaps (64 MiB-aligned, found by their headers) are the other arenas,
//!   reserved `---p` tail included;
//! * a thread stack is recognised by a **heuristic**: an anonymous `rw-p` mapping with
//!   an anonymous `---p` guard of at most [`MAX_GUARD`] directly below it (glibc and
//!   most runtimes put the guard there). A `mmap`ped buffer that happens to follow a
//!   `PROT_NONE` region is miscounted as a stack; `/proc/PID/task/*/stat`'s
//!   `kstkesp` is no help (it is 0 unless the thread is being core-dumped);
//! * shared memory: anonymous `s` mappings (`/dev/zero`), `/dev/shm/*`, `/memfd:*`,
//!   `/SYSV*`; a shared mapping of an ordinary file (e.g. glibc's `r--s`
//!   `gconv-modules.cache`) is file data, like `pmap` counts it;
//! * file code: file-backed with `x`; file data: any other file-backed mapping;
//! * executable anonymous memory is JIT code (YJIT's executable region, the JVM's code
//!   cache, V8's): a runtime's own, never malloc's;
//! * everything else anonymous (including `mmap`ped malloc chunks above the mmap
//!   threshold and other allocators' memory) is "other anonymous".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::linux::maps::{self, Mapping};

/// Largest `---p` region below a mapping that still counts as a stack guard.
pub(crate) const MAX_GUARD: u64 = 1 << 20;

/// What a mapping holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The brk `[heap]`: glibc's main arena (or another allocator's brk use).
    MainHeap,
    /// glibc malloc heaps of the non-main arenas.
    MallocArenas,
    /// Thread stacks (heuristic: anonymous with a guard page below).
    ThreadStacks,
    /// The main thread's `[stack]`.
    MainStack,
    /// Other anonymous memory: large malloc chunks, other allocators, runtimes' heaps.
    OtherAnon,
    /// Executable anonymous memory: JIT code (YJIT, the JVM's code cache).
    ExecAnon,
    /// Executable file mappings (program and library code).
    FileCode,
    /// Other file mappings (read-only data, relocated data, mapped files).
    FileData,
    /// Shared memory (`s` mappings, `/dev/shm`, memfd, SysV).
    Shmem,
    /// Kernel pseudo mappings (`[vdso]`, `[vvar]`, `[vsyscall]`).
    Kernel,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::MainHeap => "main heap [heap]",
            Kind::MallocArenas => "malloc arenas",
            Kind::ThreadStacks => "thread stacks",
            Kind::MainStack => "main stack",
            Kind::OtherAnon => "other anonymous",
            Kind::ExecAnon => "executable anonymous (JIT code)",
            Kind::FileCode => "file code",
            Kind::FileData => "file data",
            Kind::Shmem => "shared memory",
            Kind::Kernel => "kernel [vdso] etc.",
        }
    }

    pub(crate) const ALL: [Kind; 10] = [
        Kind::MainHeap,
        Kind::MallocArenas,
        Kind::ThreadStacks,
        Kind::MainStack,
        Kind::OtherAnon,
        Kind::ExecAnon,
        Kind::FileCode,
        Kind::FileData,
        Kind::Shmem,
        Kind::Kernel,
    ];
}

/// Per-mapping figures of `/proc/PID/smaps` (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapStats {
    pub rss: u64,
    pub pss: u64,
    pub private: u64,
    pub swap: u64,
    /// Anonymous memory in transparent huge pages (`AnonHugePages`).
    pub anon_huge: u64,
    /// The range was marked `madvise(MADV_HUGEPAGE)` (`hg` in `VmFlags`).
    pub huge_advised: bool,
}

/// Errors parsing smaps.
#[derive(Debug, thiserror::Error)]
pub enum SmapsError {
    #[error("/proc/PID/smaps: {0}")]
    Maps(#[from] maps::MapsError),
    #[error("/proc/PID/smaps line {line}: figure before any mapping")]
    Orphan { line: usize },
}

/// Parses `/proc/PID/smaps`: each mapping line with its figures.
pub fn parse_smaps(text: &str) -> Result<Vec<(Mapping, MapStats)>, SmapsError> {
    let mut out: Vec<(Mapping, MapStats)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let first = line.split_ascii_whitespace().next().unwrap_or("");
        if first.is_empty() {
            continue;
        }
        if let Some(key) = first.strip_suffix(':') {
            let Some((_, stats)) = out.last_mut() else {
                return Err(SmapsError::Orphan { line: i + 1 });
            };
            if key == "VmFlags" {
                stats.huge_advised = line[first.len()..]
                    .split_ascii_whitespace()
                    .any(|f| f == "hg");
                continue;
            }
            let mut rest = line[first.len()..].split_ascii_whitespace();
            let (Some(n), Some("kB")) = (rest.next(), rest.next()) else {
                continue; // VmFlags, THPeligible, ProtectionKey: not sizes
            };
            let Ok(kb) = n.parse::<u64>() else { continue };
            let b = kb * 1024;
            match key {
                "Rss" => stats.rss = b,
                "Pss" => stats.pss = b,
                "Private_Clean" | "Private_Dirty" | "Private_Hugetlb" => stats.private += b,
                "Swap" => stats.swap = b,
                "AnonHugePages" => stats.anon_huge = b,
                _ => {}
            }
        } else {
            let mut m = maps::parse_maps(line).map_err(|e| match e {
                maps::MapsError::Malformed { reason, .. } => maps::MapsError::Malformed {
                    line: i + 1,
                    reason,
                },
            })?;
            if let Some(m) = m.pop() {
                out.push((m, MapStats::default()));
            }
        }
    }
    Ok(out)
}

/// Totals for one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Group {
    pub kind: Option<Kind>,
    /// The kind in words, as the text shows it.
    pub label: &'static str,
    pub mappings: u64,
    /// Address space (what `pmap` calls Kbytes), reserved parts included.
    pub size_bytes: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    /// Private (unshared) resident bytes: this kind's share of USS.
    pub uss_bytes: u64,
    pub swap_bytes: u64,
    /// The largest mappings of this kind (at most [`LARGEST`]), by RSS then size: the
    /// pmap-like detail.
    pub largest: Vec<MapEntry>,
}

/// How many mappings of each kind [`Group::largest`] keeps.
pub(crate) const LARGEST: usize = 5;

/// One mapping, as `pmap -x` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapEntry {
    pub start: u64,
    pub size_bytes: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub swap_bytes: u64,
    pub perms: String,
    /// The path or pseudo-name (`[heap]`); `None` for anonymous memory.
    pub path: Option<String>,
}

fn is_anon(m: &Mapping) -> bool {
    m.path.is_none() && m.inode == 0
}

fn is_guard(m: &Mapping) -> bool {
    is_anon(m) && m.perms == "---p" && m.end - m.start <= MAX_GUARD
}

/// The kind of each mapping. `heaps` are `[start, end)` ranges of glibc malloc heaps
/// (reserved tails included); a mapping overlapping one is an arena mapping.
pub fn classify(maps: &[Mapping], heaps: &[(u64, u64)]) -> Vec<Kind> {
    let in_heap = |m: &Mapping| heaps.iter().any(|&(s, e)| m.start < e && s < m.end);
    maps.iter()
        .enumerate()
        .map(|(i, m)| {
            let path = m.path.as_deref();
            match path {
                Some("[heap]") => return Kind::MainHeap,
                Some("[stack]") => return Kind::MainStack,
                Some("[vdso]" | "[vvar]" | "[vsyscall]" | "[vvar_vclock]") => return Kind::Kernel,
                _ => {}
            }
            let shm_path = |p: &str| {
                p.starts_with("/dev/shm/")
                    || p.starts_with("/memfd:")
                    || p.starts_with("/SYSV")
                    || p.starts_with("[anon_shmem")
                    || p.starts_with("/dev/zero")
            };
            let shared = (m.perms.ends_with('s') && (m.inode == 0 || path.is_none_or(shm_path)))
                || path.is_some_and(|p| {
                    p.starts_with("/dev/shm/")
                        || p.starts_with("/memfd:")
                        || p.starts_with("/SYSV")
                        || p.starts_with("[anon_shmem")
                });
            if shared {
                return Kind::Shmem;
            }
            if is_anon(m) || path.is_some_and(|p| p.starts_with("[anon")) {
                if in_heap(m) {
                    return Kind::MallocArenas;
                }
                if m.perms.contains('x') {
                    return Kind::ExecAnon;
                }
                let guard_below = i > 0 && {
                    let prev = &maps[i - 1];
                    prev.end == m.start && is_guard(prev) && !in_heap(prev)
                };
                if m.perms == "rw-p" && guard_below {
                    return Kind::ThreadStacks;
                }
                // The guard itself belongs to the stack above it.
                if is_guard(m) && !in_heap(m) {
                    if let Some(next) = maps.get(i + 1) {
                        if next.start == m.end
                            && is_anon(next)
                            && next.perms == "rw-p"
                            && !in_heap(next)
                        {
                            return Kind::ThreadStacks;
                        }
                    }
                }
                return Kind::OtherAnon;
            }
            if m.perms.contains('x') {
                Kind::FileCode
            } else {
                Kind::FileData
            }
        })
        .collect()
}

/// Totals per kind, in [`Kind::ALL`] order, kinds without mappings left out.
pub fn group(smaps: &[(Mapping, MapStats)], kinds: &[Kind]) -> Vec<Group> {
    Kind::ALL
        .iter()
        .filter_map(|&k| {
            let mut g = Group {
                kind: Some(k),
                label: k.label(),
                ..Group::default()
            };
            for ((m, s), _) in smaps.iter().zip(kinds).filter(|(_, kk)| **kk == k) {
                g.mappings += 1;
                g.size_bytes += m.end - m.start;
                g.rss_bytes += s.rss;
                g.pss_bytes += s.pss;
                g.uss_bytes += s.private;
                g.swap_bytes += s.swap;
                g.largest.push(MapEntry {
                    start: m.start,
                    size_bytes: m.end - m.start,
                    rss_bytes: s.rss,
                    pss_bytes: s.pss,
                    swap_bytes: s.swap,
                    perms: m.perms.clone(),
                    path: m.path.clone(),
                });
            }
            g.largest.sort_by(|a, b| {
                (b.rss_bytes, b.size_bytes, a.start).cmp(&(a.rss_bytes, a.size_bytes, b.start))
            });
            g.largest.truncate(LARGEST);
            (g.mappings > 0).then_some(g)
        })
        .collect()
}

/// `HEAP_MAX_SIZE` on 64-bit glibc: `2 * DEFAULT_MMAP_THRESHOLD_MAX` = 64 MiB.
pub(crate) const HEAP_MAX: u64 = 64 << 20;

/// glibc malloc heaps found from the mappings' shape alone (no memory read): a 64
/// MiB-aligned anonymous `rw-p` mapping followed by its `---p` reserve up to 64 MiB, or a
/// whole 64 MiB that no `---p` reserve continues (a whole heap has none left; a runtime's
/// larger reservation with its first 64 MiB committed — the JVM's Java heap of `-Xmx128m`
/// grown to 64 MiB — does). An upper bound: another allocator's aligned mapping can look
/// the same.
pub fn heaps_from_maps(maps: &[Mapping]) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        if !(is_anon(m) && m.perms == "rw-p") || m.start % HEAP_MAX != 0 {
            continue;
        }
        let len = m.end - m.start;
        let next_reserve = maps
            .get(i + 1)
            .filter(|n| n.start == m.end && n.path.is_none() && n.perms == "---p");
        let reserve_follows = next_reserve.is_some_and(|n| n.end == m.start + HEAP_MAX);
        if (len == HEAP_MAX && next_reserve.is_none()) || (len < HEAP_MAX && reserve_follows) {
            ranges.push((m.start, m.start + HEAP_MAX));
        }
    }
    ranges
}

/// Where some processes' resident memory is, by kind, summed from their `smaps`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regions {
    /// Resident bytes by kind; kinds with nothing resident left out.
    pub by_kind: BTreeMap<Kind, u64>,
    /// Every mapping's `Rss` summed: what the kinds add up to.
    pub rss_bytes: u64,
    /// glibc malloc heaps (of the non-main arenas), from the mappings' shape.
    pub arena_heaps: u64,
    /// Thread stacks by the heuristic, and the bytes of them resident.
    pub thread_stacks: u64,
    /// The largest executable anonymous region (JIT code), if any.
    #[serde(default)]
    pub largest_exec_anon: Option<Region>,
    /// Resident bytes of file mappings per file, largest first (at most [`FILES`]).
    #[serde(default)]
    pub files: Vec<FileRss>,
    /// Of the resident bytes, those in transparent huge pages (`AnonHugePages`), by kind;
    /// kinds with none left out (absent from reads made before it was recorded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub anon_huge_by_kind: BTreeMap<Kind, u64>,
}

impl Regions {
    /// Resident bytes in transparent huge pages, every kind summed.
    pub fn anon_huge_bytes(&self) -> u64 {
        self.anon_huge_by_kind.values().sum()
    }
}

/// One mapping's extent and resident bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub size_bytes: u64,
    pub rss_bytes: u64,
}

/// The resident bytes of one mapped file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRss {
    pub path: String,
    pub rss_bytes: u64,
}

/// How many files [`Regions::files`] keeps.
pub const FILES: usize = 8;

impl Regions {
    /// Adds one process's mappings.
    pub fn add_process(&mut self, smaps: &[(Mapping, MapStats)]) {
        let maps: Vec<Mapping> = smaps.iter().map(|(m, _)| m.clone()).collect();
        let heaps = heaps_from_maps(&maps);
        let kinds = classify(&maps, &heaps);
        self.arena_heaps += heaps.len() as u64;
        self.thread_stacks += thread_stack_count(&maps, &kinds);
        for ((m, s), k) in smaps.iter().zip(&kinds) {
            self.rss_bytes += s.rss;
            if s.rss > 0 {
                *self.by_kind.entry(*k).or_default() += s.rss;
            }
            if s.anon_huge > 0 {
                *self.anon_huge_by_kind.entry(*k).or_default() += s.anon_huge;
            }
            if *k == Kind::ExecAnon {
                let r = Region {
                    size_bytes: m.end - m.start,
                    rss_bytes: s.rss,
                };
                if self
                    .largest_exec_anon
                    .is_none_or(|l| (r.rss_bytes, r.size_bytes) > (l.rss_bytes, l.size_bytes))
                {
                    self.largest_exec_anon = Some(r);
                }
            }
            if matches!(k, Kind::FileCode | Kind::FileData) && s.rss > 0 {
                if let Some(p) = &m.path {
                    match self.files.iter_mut().find(|f| f.path == *p) {
                        Some(f) => f.rss_bytes += s.rss,
                        None => self.files.push(FileRss {
                            path: p.clone(),
                            rss_bytes: s.rss,
                        }),
                    }
                }
            }
        }
    }

    /// After the last process: the files ranked, the largest [`FILES`] kept.
    pub fn finish(&mut self) {
        self.files
            .sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.path.cmp(&b.path)));
        self.files.truncate(FILES);
    }
}

/// A runtime's reservation found among the mappings: its resident bytes and how many
/// mappings it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub size_bytes: u64,
    pub rss_bytes: u64,
    pub mappings: u32,
}

/// One process's mappings read for what a runtime reserved: its glibc heaps found once, and
/// the runs of address-adjacent private mappings, anonymous or of files (what a runtime
/// reserves in one piece and commits part by part — or maps a file into: the JVM maps its
/// archived heap regions from `classes.jsa` into the Java heap's top). glibc's arena heaps
/// (64 MiB each, often side by side) are no runtime's reservation and are left out of the
/// runs: two of them would be a stretch of any size a runtime reserves in 64 MiB multiples.
pub struct Stretches<'a> {
    smaps: &'a [(Mapping, MapStats)],
    maps: Vec<Mapping>,
    heaps: Vec<(u64, u64)>,
    runs: Vec<std::ops::Range<usize>>,
}

impl<'a> Stretches<'a> {
    pub fn of(smaps: &'a [(Mapping, MapStats)]) -> Stretches<'a> {
        let maps: Vec<Mapping> = smaps.iter().map(|(m, _)| m.clone()).collect();
        let heaps = heaps_from_maps(&maps);
        let private = |m: &Mapping| {
            m.perms.ends_with('p')
                && m.path.as_deref().is_none_or(|p| !p.starts_with('['))
                && !heaps.iter().any(|(lo, hi)| m.start >= *lo && m.end <= *hi)
        };
        let mut runs = Vec::new();
        let mut i = 0;
        while i < maps.len() {
            if !private(&maps[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i + 1 < maps.len() && private(&maps[i + 1]) && maps[i + 1].start == maps[i].end {
                i += 1;
            }
            runs.push(start..i + 1);
            i += 1;
        }
        Stretches {
            smaps,
            maps,
            heaps,
            runs,
        }
    }

    fn found(&self, lo: usize, hi: usize, size_bytes: u64) -> Found {
        Found {
            size_bytes,
            rss_bytes: self.smaps[lo..=hi].iter().map(|(_, s)| s.rss).sum(),
            mappings: (hi + 1 - lo) as u32,
        }
    }

    /// The one stretch of a run, beginning and ending at mapping boundaries, of exactly
    /// `reserved` bytes (a runtime reserves its heap in one piece: the JVM's Java heap and
    /// class space); `None` when there is none, or more than one (then the size does not
    /// tell which).
    pub fn reservation(&self, reserved: u64) -> Option<Found> {
        if reserved == 0 {
            return None;
        }
        let len = |i: usize| self.maps[i].end - self.maps[i].start;
        let mut found: Vec<Found> = Vec::new();
        for run in &self.runs {
            // Spans only grow with the end: a sliding window.
            let (mut lo, mut span) = (run.start, 0u64);
            for hi in run.clone() {
                span += len(hi);
                while span > reserved && lo <= hi {
                    span -= len(lo);
                    lo += 1;
                }
                if span == reserved {
                    found.push(self.found(lo, hi, reserved));
                }
            }
        }
        (found.len() == 1).then(|| found[0])
    }

    /// The executable stretch of anonymous memory with the most resident bytes: from the
    /// first executable anonymous mapping of a run to its last (a JIT's code region: the
    /// JVM's segmented code cache, YJIT's region), the reserved parts between included.
    pub fn exec(&self) -> Option<Found> {
        self.runs
            .iter()
            .filter_map(|run| {
                let mut exec = run
                    .clone()
                    .filter(|i| is_anon(&self.maps[*i]) && self.maps[*i].perms.contains('x'));
                let first = exec.next()?;
                let last = exec.next_back().unwrap_or(first);
                let size = self.maps[last].end - self.maps[first].start;
                Some(self.found(first, last, size))
            })
            .max_by_key(|f| (f.rss_bytes, f.size_bytes))
    }

    /// Thread stacks by the heuristic: how many, and their resident bytes.
    pub fn thread_stacks(&self) -> (u64, u64) {
        let kinds = classify(&self.maps, &self.heaps);
        let rss = self
            .smaps
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| **k == Kind::ThreadStacks)
            .map(|((_, s), _)| s.rss)
            .sum();
        (thread_stack_count(&self.maps, &kinds), rss)
    }
}

/// Number of thread stacks found by the heuristic (the `rw-p` parts).
pub(crate) fn thread_stack_count(maps: &[Mapping], kinds: &[Kind]) -> u64 {
    maps.iter()
        .zip(kinds)
        .filter(|(m, k)| **k == Kind::ThreadStacks && m.perms == "rw-p")
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = include_str!("../../tests/fixtures/inspect/arenas20.smaps");
    const MAPS: &str = include_str!("../../tests/fixtures/inspect/arenas20.maps");

    /// The heaps of the capture (from its heap headers: 15 heaps of 64 MiB).
    fn heaps_of_capture(maps: &[Mapping]) -> Vec<(u64, u64)> {
        maps.iter()
            .filter(|m| is_anon(m) && m.perms == "rw-p" && m.start % (64 << 20) == 0)
            .filter(|m| m.end - m.start < 64 << 20)
            .map(|m| (m.start, m.start + (64 << 20)))
            .collect()
    }

    #[test]
    fn reservations_are_found_by_exact_size_at_mapping_boundaries() {
        let m = |start: u64, end: u64, perms: &str, rss: u64| {
            (
                Mapping {
                    start,
                    end,
                    perms: perms.into(),
                    offset: 0,
                    dev: "00:00".into(),
                    inode: 0,
                    path: None,
                },
                MapStats {
                    rss,
                    ..Default::default()
                },
            )
        };
        const M: u64 = 1 << 20;
        // A heap of 128 MiB (32 committed, 96 reserved) right below a 1 GiB class space
        // (1 committed), all adjacent; then a code cache of two executable segments.
        let smaps = vec![
            m(0, 32 * M, "rw-p", 30 * M),
            m(32 * M, 128 * M, "---p", 0),
            m(128 * M, 129 * M, "rw-p", M / 2),
            m(129 * M, 1152 * M, "---p", 0),
            m(2000 * M, 2002 * M, "rwxp", M),
            m(2002 * M, 2100 * M, "---p", 0),
            m(2100 * M, 2102 * M, "rwxp", 2 * M),
            m(2102 * M, 2240 * M, "---p", 0),
        ];
        let st = Stretches::of(&smaps);
        let heap = st.reservation(128 * M).unwrap();
        assert_eq!((heap.rss_bytes, heap.mappings), (30 * M, 2));
        let class = st.reservation(1024 * M).unwrap();
        assert_eq!((class.rss_bytes, class.mappings), (M / 2, 2));
        assert_eq!(st.reservation(3 * M), None, "no such stretch");
        assert_eq!(st.reservation(0), None);
        let code = st.exec().unwrap();
        assert_eq!(
            (code.size_bytes, code.rss_bytes, code.mappings),
            (102 * M, 3 * M, 3)
        );
        // Two stretches of the same size: the size does not tell which.
        let twice = vec![m(M, 65 * M, "rw-p", 1), m(101 * M, 165 * M, "rw-p", 1)];
        assert_eq!(Stretches::of(&twice).reservation(64 * M), None);
        // Two glibc arena heaps side by side are no runtime's 128 MiB reservation.
        let arenas = vec![
            m(64 * M, 128 * M, "rw-p", 1),
            m(128 * M, 192 * M, "rw-p", 1),
        ];
        assert_eq!(Stretches::of(&arenas).reservation(128 * M), None);
        // The JVM's Java heap of -Xmx128m at 0xf8000000 (64 MiB-aligned) grown to 64 MiB
        // committed, as a loaded machine showed it: its reserve continues it, so it is no
        // glibc heap, and the whole 128 MiB is found.
        let java = vec![
            m(3968 * M, 4032 * M, "rw-p", 40 * M),
            m(4032 * M, 4094 * M, "---p", 0),
            m(4094 * M, 4096 * M, "rw-p", M),
        ];
        let st = Stretches::of(&java);
        assert!(st.heaps.is_empty(), "{:?}", st.heaps);
        let heap = st.reservation(128 * M).unwrap();
        assert_eq!((heap.rss_bytes, heap.mappings), (41 * M, 3));
    }

    #[test]
    fn smaps_parses_every_mapping_of_a_capture() {
        let s = parse_smaps(SMAPS).unwrap();
        let m = maps::parse_maps(MAPS).unwrap();
        assert_eq!(s.len(), m.len());
        assert_eq!(s[0].0, m[0]);
        assert_eq!(
            s[0].1,
            MapStats {
                rss: 4096,
                pss: 4096,
                private: 4096,
                swap: 0,
                anon_huge: 0,
                huge_advised: false,
            }
        );
        let heap = s
            .iter()
            .find(|(m, _)| m.path.as_deref() == Some("[heap]"))
            .unwrap();
        assert!(heap.1.rss > 0);
    }

    #[test]
    fn capture_of_20_threads_with_16_arenas() {
        let s = parse_smaps(SMAPS).unwrap();
        let maps: Vec<Mapping> = s.iter().map(|(m, _)| m.clone()).collect();
        let heaps = heaps_of_capture(&maps);
        assert_eq!(heaps.len(), 15);
        let kinds = classify(&maps, &heaps);
        // 20 worker threads, each with a guard page below its stack.
        assert_eq!(thread_stack_count(&maps, &kinds), 20);
        let groups = group(&s, &kinds);
        let g = |k: Kind| groups.iter().find(|g| g.kind == Some(k)).cloned().unwrap();
        // 15 heaps: rw part + reserved tail each.
        assert_eq!(g(Kind::MallocArenas).mappings, 30);
        assert_eq!(g(Kind::MallocArenas).size_bytes, 15 * (64 << 20));
        assert_eq!(g(Kind::ThreadStacks).mappings, 40);
        assert_eq!(g(Kind::MainHeap).mappings, 1);
        assert_eq!(g(Kind::MainStack).mappings, 1);
        assert!(g(Kind::FileCode).rss_bytes > 0);
        let total_rss: u64 = groups.iter().map(|g| g.rss_bytes).sum();
        let direct: u64 = s.iter().map(|(_, st)| st.rss).sum();
        assert_eq!(
            total_rss, direct,
            "every mapping lands in exactly one group"
        );
    }

    #[test]
    fn stack_after_a_heap_tail_is_not_a_stack_by_the_tail() {
        // A heap's reserved tail (large ---p) directly below an anonymous rw-p mapping.
        let maps = maps::parse_maps(concat!(
            "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n",
            "7f0000021000-7f0004000000 ---p 00000000 00:00 0 \n",
            "7f0004000000-7f0004100000 rw-p 00000000 00:00 0 \n",
            "7f0005000000-7f0005001000 ---p 00000000 00:00 0 \n",
            "7f0005001000-7f0005801000 rw-p 00000000 00:00 0 \n",
            "7f0006000000-7f0006001000 rw-s 00000000 00:01 5 /dev/zero (deleted)\n",
            "7f0007000000-7f0007001000 rw-p 00000000 00:01 7 /memfd:pool (deleted)\n",
            "7f0008000000-7f0008001000 r-xp 00000000 fe:00 9 /usr/lib/libx.so\n",
            "7f0008001000-7f0008002000 rw-p 00001000 fe:00 9 /usr/lib/libx.so\n",
            "7f0009000000-7f0009007000 r--s 00000000 fe:00 11 /usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache\n",
            "7f000a000000-7f000a001000 rw-s 00000000 00:01 12 /dev/shm/pool\n",
        ))
        .unwrap();
        let kinds = classify(&maps, &[(0x7f0000000000, 0x7f0004000000)]);
        assert_eq!(
            kinds,
            vec![
                Kind::MallocArenas,
                Kind::MallocArenas,
                Kind::OtherAnon,
                Kind::ThreadStacks,
                Kind::ThreadStacks,
                Kind::Shmem,
                Kind::Shmem,
                Kind::FileCode,
                Kind::FileData,
                Kind::FileData,
                Kind::Shmem,
            ]
        );
        // Without knowing the heap, its rw part is just anonymous memory.
        let kinds = classify(&maps, &[]);
        assert_eq!(kinds[0], Kind::OtherAnon);
        assert_eq!(kinds[2], Kind::OtherAnon, "a 64 MiB ---p is no guard");
    }

    #[test]
    fn huge_pages_and_their_advice_are_read_per_mapping() {
        let text = "7f4b3aff1000-7f4b3eff2000 rw-p 00000000 00:00 0 \n\
                    Rss:               65000 kB\n\
                    AnonHugePages:     63488 kB\n\
                    THPeligible:    1\n\
                    VmFlags: rd wr mr mw me ac hg \n\
                    7f4b40000000-7f4b40001000 rw-p 00000000 00:00 0 \n\
                    Rss:                   4 kB\n\
                    AnonHugePages:         0 kB\n\
                    VmFlags: rd wr mr mw me ac \n";
        let s = parse_smaps(text).unwrap();
        assert_eq!(s[0].1.anon_huge, 63488 * 1024);
        assert!(s[0].1.huge_advised);
        assert!(!s[1].1.huge_advised);
        let mut r = Regions::default();
        r.add_process(&s);
        assert_eq!(r.anon_huge_bytes(), 63488 * 1024);
        assert_eq!(
            r.anon_huge_by_kind.get(&Kind::OtherAnon),
            Some(&(63488 * 1024))
        );
    }

    #[test]
    fn figures_before_a_mapping_are_an_error() {
        assert!(parse_smaps("Rss: 4 kB\n").is_err());
        assert!(parse_smaps("zz-1 rw-p 0 00:00 0\n").is_err());
        assert!(parse_smaps("").unwrap().is_empty());
    }
}
