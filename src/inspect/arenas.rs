//! How many glibc malloc arenas a process has, and its limit.
//!
//! glibc's non-main arenas live in *heaps*: 64 MiB-aligned, 64 MiB reservations whose
//! used part is read-write and the rest `---p`. Every heap starts with a `heap_info`
//! header whose first word (`ar_ptr`) points to the heap's arena; an arena's first
//! heap holds the arena itself right after the header, later heaps point back to it.
//! So the number of arenas is the number of **distinct** `ar_ptr` values (counting
//! heaps overcounts an arena that grew more than one), plus the main arena, which
//! always exists (it lives in libc's data and allocates from the brk `[heap]`).
//!
//! The headers are read from `/proc/PID/mem` (ptrace-read permission needed). Where
//! that is refused, the count falls back to the number of heap-shaped mappings and is
//! labelled an estimate ([`Method::Estimate`]): an upper bound.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use serde::Serialize;

use crate::linux::maps::Mapping;

pub(crate) use crate::linux::regions::HEAP_MAX;

/// How the arena count was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Distinct `ar_ptr` values of the heap headers read from `/proc/PID/mem`, plus
    /// main. Serialised as `exact`.
    #[serde(rename = "exact")]
    HeapHeaders,
    /// `/proc/PID/mem` unreadable: heap-shaped mappings plus main (an upper bound).
    Estimate,
}

/// The first words of a `heap_info` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeapHeader {
    pub ar_ptr: u64,
    pub prev: u64,
    pub size: u64,
    pub mprotect_size: u64,
}

/// One glibc heap found in a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heap {
    pub start: u64,
    pub header: HeapHeader,
}

/// The arena count and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArenaCount {
    pub method: Method,
    /// Arenas, the main one included.
    pub arenas: u64,
    /// Non-main heaps found (≥ arenas − 1).
    pub heaps: u64,
    /// `[start, start + 64 MiB)` of every heap, for the maps classifier.
    pub heap_ranges: Vec<(u64, u64)>,
}

/// Reads memory of another process.
pub(crate) trait MemReader {
    /// The four header words at `addr`.
    fn header(&mut self, addr: u64) -> io::Result<HeapHeader>;
}

/// `/proc/PID/mem`.
pub(crate) struct ProcMem(File);

impl ProcMem {
    pub fn open(pid: i32) -> io::Result<ProcMem> {
        File::open(format!("/proc/{pid}/mem")).map(ProcMem)
    }
}

impl MemReader for ProcMem {
    fn header(&mut self, addr: u64) -> io::Result<HeapHeader> {
        let mut b = [0u8; 32];
        self.0.read_exact_at(&mut b, addr)?;
        let w = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_ne_bytes(x)
        };
        Ok(HeapHeader {
            ar_ptr: w(0),
            prev: w(1),
            size: w(2),
            mprotect_size: w(3),
        })
    }
}

fn is_anon_rw(m: &Mapping) -> bool {
    m.path.is_none() && m.inode == 0 && m.perms == "rw-p"
}

/// Every 64 MiB-aligned address inside an anonymous `rw-p` mapping: where a heap
/// header can be. (Adjacent anonymous mappings may have been merged by the kernel,
/// so a heap need not start a mapping.)
pub(crate) fn header_addresses(maps: &[Mapping]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for m in maps.iter().filter(|m| is_anon_rw(m)) {
        let mut a = m.start.div_ceil(HEAP_MAX) * HEAP_MAX;
        // A header needs its 32 bytes inside the readable part.
        while a.saturating_add(32) <= m.end {
            out.push((a, m.end));
            a += HEAP_MAX;
        }
    }
    out
}

/// A header that can be a glibc heap's: sizes within 64 MiB and the readable part,
/// `prev` null or another heap start, `ar_ptr` non-null.
pub(crate) fn plausible(start: u64, rw_end: u64, h: &HeapHeader, page: u64) -> bool {
    h.ar_ptr != 0
        && h.size >= page
        && h.size <= HEAP_MAX
        && h.size % page == 0
        && h.mprotect_size <= HEAP_MAX
        && start + h.size <= rw_end
        && (h.prev == 0 || (h.prev % HEAP_MAX == 0 && h.prev != start))
}

/// Counts arenas from heap headers. A heap counts only when its `ar_ptr` lies inside
/// a plausible heap (its own for an arena's first heap).
pub(crate) fn count_from_headers(
    maps: &[Mapping],
    mem: &mut dyn MemReader,
    page: u64,
) -> ArenaCount {
    let mut heaps: Vec<Heap> = Vec::new();
    for (addr, rw_end) in header_addresses(maps) {
        let Ok(h) = mem.header(addr) else { continue };
        if plausible(addr, rw_end, &h, page) {
            heaps.push(Heap {
                start: addr,
                header: h,
            });
        }
    }
    let inside_a_heap = |p: u64| heaps.iter().any(|h| p >= h.start && p < h.start + HEAP_MAX);
    let heaps: Vec<Heap> = heaps
        .iter()
        .copied()
        .filter(|h| inside_a_heap(h.header.ar_ptr))
        .collect();
    let mut arenas: Vec<u64> = heaps.iter().map(|h| h.header.ar_ptr).collect();
    arenas.sort_unstable();
    arenas.dedup();
    ArenaCount {
        method: Method::HeapHeaders,
        arenas: arenas.len() as u64 + 1,
        heaps: heaps.len() as u64,
        heap_ranges: heaps
            .iter()
            .map(|h| (h.start, h.start + HEAP_MAX))
            .collect(),
    }
}

/// Without memory access: mappings shaped like a heap (64 MiB-aligned anonymous `rw-p`
/// followed by its `---p` reserve, or a whole 64 MiB), plus main. An upper bound.
pub(crate) fn estimate(maps: &[Mapping]) -> ArenaCount {
    let ranges = crate::linux::regions::heaps_from_maps(maps);
    ArenaCount {
        method: Method::Estimate,
        arenas: ranges.len() as u64 + 1,
        heaps: ranges.len() as u64,
        heap_ranges: ranges,
    }
}

/// Where the arena limit comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum LimitSource {
    /// `MALLOC_ARENA_MAX` in the initial environment.
    MallocArenaMax,
    /// `glibc.malloc.arena_max` in `GLIBC_TUNABLES`.
    GlibcTunables,
    /// glibc's default: 8 × online CPUs on 64-bit (cgroup CPU quotas are not read).
    Default { online_cpus: u32 },
}

/// The arena limit glibc applies to a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ArenaLimit {
    pub limit: u64,
    #[serde(flatten)]
    pub source: LimitSource,
}

/// The limit from a process's initial environment and the host's online CPUs.
/// `GLIBC_TUNABLES` is read first; a zero or unparsable value is ignored, as glibc does.
pub(crate) fn arena_limit(env: &[(String, String)], online_cpus: u32) -> ArenaLimit {
    let get = |k: &str| env.iter().find(|(ek, _)| ek == k).map(|(_, v)| v.as_str());
    let tunable = get("GLIBC_TUNABLES").and_then(|t| {
        t.split(':')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == "glibc.malloc.arena_max")
            .filter_map(|(_, v)| v.parse::<u64>().ok())
            .rfind(|n| *n > 0)
    });
    if let Some(n) = tunable {
        return ArenaLimit {
            limit: n,
            source: LimitSource::GlibcTunables,
        };
    }
    if let Some(n) = get("MALLOC_ARENA_MAX")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
    {
        return ArenaLimit {
            limit: n,
            source: LimitSource::MallocArenaMax,
        };
    }
    ArenaLimit {
        limit: 8 * u64::from(online_cpus.max(1)),
        source: LimitSource::Default { online_cpus },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::maps::parse_maps;
    use std::collections::HashMap;

    const MAPS: &str = include_str!("../../tests/fixtures/inspect/arenas20.maps");

    /// Memory served from a table; anything else is unreadable.
    struct FakeMem(HashMap<u64, HeapHeader>);

    impl MemReader for FakeMem {
        fn header(&mut self, addr: u64) -> io::Result<HeapHeader> {
            self.0
                .get(&addr)
                .copied()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EIO))
        }
    }

    fn first_heap(start: u64, size: u64) -> HeapHeader {
        HeapHeader {
            ar_ptr: start + 0x30,
            prev: 0,
            size,
            mprotect_size: size,
        }
    }

    /// The headers read from the captured process (glibc 2.36; `malloc_info` said 16).
    fn captured_headers() -> FakeMem {
        let starts = [
            0x7fbf90000000u64,
            0x7fbf94000000,
            0x7fbf98000000,
            0x7fbf9c000000,
            0x7fbfa0000000,
            0x7fbfa4000000,
            0x7fbfa8000000,
            0x7fbfac000000,
            0x7fbfb4000000,
            0x7fbfbc000000,
            0x7fbfc4000000,
            0x7fbfc8000000,
            0x7fbfcc000000,
            0x7fbfd0000000,
            0x7fbfd4000000,
        ];
        let mut t = HashMap::new();
        for s in starts {
            let size = if [
                0x7fbf9c000000,
                0x7fbfa0000000,
                0x7fbfa4000000,
                0x7fbfac000000,
            ]
            .contains(&s)
            {
                0x1fc000
            } else {
                0xfe000
            };
            t.insert(s, first_heap(s, size));
        }
        FakeMem(t)
    }

    #[test]
    fn captured_process_has_16_arenas() {
        let maps = parse_maps(MAPS).unwrap();
        let c = count_from_headers(&maps, &mut captured_headers(), 4096);
        assert_eq!(c.method, Method::HeapHeaders);
        assert_eq!(c.arenas, 16);
        assert_eq!(c.heaps, 15);
        let e = estimate(&maps);
        assert_eq!(e.method, Method::Estimate);
        assert_eq!(e.arenas, 16);
    }

    #[test]
    fn an_arena_with_two_heaps_counts_once() {
        let a = 0x7f0000000000u64;
        let b = 0x7f0004000000u64;
        let maps = parse_maps(concat!(
            "7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n",
            "7f0004000000-7f0004021000 rw-p 00000000 00:00 0 \n",
            "7f0004021000-7f0008000000 ---p 00000000 00:00 0 \n",
        ))
        .unwrap();
        let mut t = HashMap::new();
        t.insert(a, first_heap(a, HEAP_MAX));
        t.insert(
            b,
            HeapHeader {
                ar_ptr: a + 0x30,
                prev: a,
                size: 0x21000,
                mprotect_size: 0x21000,
            },
        );
        let c = count_from_headers(&maps, &mut FakeMem(t), 4096);
        assert_eq!((c.arenas, c.heaps), (2, 2));
        // The estimate counts heaps, so it says 3: an upper bound.
        assert_eq!(estimate(&maps).arenas, 3);
    }

    #[test]
    fn implausible_headers_are_not_heaps() {
        let a = 0x7f0000000000u64;
        let maps = parse_maps("7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n").unwrap();
        for h in [
            HeapHeader {
                ar_ptr: 0,
                prev: 0,
                size: 0x21000,
                mprotect_size: 0x21000,
            },
            HeapHeader {
                ar_ptr: a + 0x30,
                prev: 0,
                size: 0x21001,
                mprotect_size: 0x21000,
            },
            HeapHeader {
                ar_ptr: a + 0x30,
                prev: 0,
                size: HEAP_MAX * 2,
                mprotect_size: 0,
            },
            HeapHeader {
                ar_ptr: a + 0x30,
                prev: 0x1234,
                size: 0x21000,
                mprotect_size: 0x21000,
            },
            // Points nowhere near a heap: e.g. a jemalloc extent's first word.
            HeapHeader {
                ar_ptr: 0x5555_0000_0000,
                prev: 0,
                size: 0x21000,
                mprotect_size: 0x21000,
            },
        ] {
            let mut t = HashMap::new();
            t.insert(a, h);
            let c = count_from_headers(&maps, &mut FakeMem(t), 4096);
            assert_eq!(c.arenas, 1, "{h:?}");
        }
    }

    #[test]
    fn merged_mapping_still_finds_the_header() {
        // A thread stack ending at the boundary merged with the heap after it.
        let a = 0x7f0004000000u64;
        let maps = parse_maps("7f0003800000-7f0004021000 rw-p 00000000 00:00 0 \n").unwrap();
        assert_eq!(header_addresses(&maps), vec![(a, 0x7f0004021000)]);
        let mut t = HashMap::new();
        t.insert(a, first_heap(a, 0x21000));
        assert_eq!(count_from_headers(&maps, &mut FakeMem(t), 4096).arenas, 2);
    }

    #[test]
    fn limits() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            arena_limit(&env(&[]), 2),
            ArenaLimit {
                limit: 16,
                source: LimitSource::Default { online_cpus: 2 }
            }
        );
        assert_eq!(arena_limit(&env(&[("MALLOC_ARENA_MAX", "2")]), 2).limit, 2);
        assert_eq!(
            arena_limit(&env(&[("MALLOC_ARENA_MAX", "0")]), 4).source,
            LimitSource::Default { online_cpus: 4 }
        );
        let t = arena_limit(
            &env(&[(
                "GLIBC_TUNABLES",
                "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=3",
            )]),
            2,
        );
        assert_eq!(
            t,
            ArenaLimit {
                limit: 3,
                source: LimitSource::GlibcTunables
            }
        );
        let json = serde_json::to_value(arena_limit(&env(&[]), 2)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"limit": 16, "source": "default", "online_cpus": 2})
        );
    }
}
