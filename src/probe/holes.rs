//! The shape of the allocator's free memory ("the holes"): the accounts the probe library
//! writes to `<dir>/holes/<pid>` (see probe-shim/shim.c), read at the end of a run and
//! summed over its processes.
//!
//! glibc's account is `malloc_info`'s XML: per arena, the free chunks of each bin (size
//! range, total bytes, count), the fast bins' and the rest's totals (the rest counting the
//! top chunk, which no bin holds) and the bytes the arena has from the system. jemalloc's is
//! its small size classes (region size, regions per slab, regions in use, slabs) and its
//! page counts; tcmalloc's its free lists by kind.

use std::collections::BTreeMap;
use std::path::Path;

use crate::record::{ArenaHoles, HoleClass, HolePart, Holes};

/// The holes directory inside a probe directory: the library writes accounts only when it
/// exists, so a deployment that does not make it pays nothing.
pub(crate) const DIR: &str = "holes";

/// The upper bounds of the size classes free blocks are counted in (the last class holds
/// everything larger).
const CLASS_BOUNDS: [u64; 7] = [64, 256, 1024, 4096, 16384, 128 << 10, 1 << 20];

/// One process's account.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Account {
    pub allocator: String,
    /// `CLOCK_MONOTONIC` ns when it was taken.
    pub ns: u64,
    pub rss_bytes: u64,
    pub holes: Holes,
}

/// Free blocks of a mean size into the class table.
fn add_class(classes: &mut BTreeMap<Option<u64>, (u64, u64)>, mean: u64, bytes: u64, n: u64) {
    let bound = CLASS_BOUNDS.iter().copied().find(|b| mean <= *b);
    let c = classes.entry(bound).or_default();
    c.0 += bytes;
    c.1 += n;
}

fn classes_of(map: BTreeMap<Option<u64>, (u64, u64)>) -> Vec<HoleClass> {
    // `None` (the largest) sorts first in a BTreeMap: put it last.
    let (mut sized, largest): (Vec<_>, Vec<_>) = map.into_iter().partition(|(b, _)| b.is_some());
    sized.extend(largest);
    sized
        .into_iter()
        .filter(|(_, (bytes, _))| *bytes > 0)
        .map(|(up_to_bytes, (bytes, blocks))| HoleClass {
            from_bytes: match up_to_bytes {
                Some(up) => CLASS_BOUNDS
                    .iter()
                    .rev()
                    .find(|b| **b < up)
                    .map_or(0, |b| b + 1),
                None => CLASS_BOUNDS[CLASS_BOUNDS.len() - 1] + 1,
            },
            up_to_bytes,
            bytes,
            blocks,
        })
        .collect()
}

/// The value of `name="…"` in one XML element line, as a number.
fn attr(line: &str, name: &str) -> Option<u64> {
    let key = format!(" {name}=\"");
    let at = line.find(&key)? + key.len();
    let rest = &line[at..];
    rest[..rest.find('"')?].parse().ok()
}

/// glibc's `malloc_info` XML into holes: free chunks by class (bins and fast bins), the free
/// tops of the heaps, one entry per arena.
fn parse_glibc(xml: &str) -> Holes {
    let mut h = Holes::default();
    let mut classes = BTreeMap::new();
    // Inside a <heap>: (chunks' bytes, fast total, rest total, system bytes).
    let mut heap: Option<(u64, u64, u64, u64, bool)> = None;
    let (mut free, mut blocks) = (0u64, 0u64);
    for line in xml.lines().map(str::trim) {
        if line.starts_with("<heap ") {
            heap = Some((0, 0, 0, 0, attr(line, "nr") == Some(0)));
        } else if line == "</heap>" {
            if let Some((chunks, fast, rest, system, main)) = heap.take() {
                h.arenas.push(ArenaHoles {
                    main,
                    system_bytes: system,
                    free_bytes: chunks,
                    // The rest counts the top chunk, which no bin holds.
                    top_bytes: (fast + rest).saturating_sub(chunks),
                });
            }
        } else if let Some(cur) = heap.as_mut() {
            if line.starts_with("<size ") || line.starts_with("<unsorted ") {
                let (Some(total), Some(count)) = (attr(line, "total"), attr(line, "count")) else {
                    continue;
                };
                if count == 0 {
                    continue;
                }
                cur.0 += total;
                free += total;
                blocks += count;
                add_class(&mut classes, total / count, total, count);
            } else if line.starts_with("<total type=\"fast\"") {
                cur.1 = attr(line, "size").unwrap_or(0);
            } else if line.starts_with("<total type=\"rest\"") {
                cur.2 = attr(line, "size").unwrap_or(0);
            } else if line.starts_with("<system type=\"current\"") {
                cur.3 = attr(line, "size").unwrap_or(0);
            }
        }
    }
    let top: u64 = h.arenas.iter().map(|a| a.top_bytes).sum();
    if !h.arenas.is_empty() {
        h.free_bytes = Some(free);
        h.free_blocks = Some(blocks);
        h.parts.push(HolePart {
            name: "top of heaps".into(),
            bytes: top,
            resident: true,
        });
    }
    h.classes = classes_of(classes);
    h
}

/// jemalloc's small size classes and page counts into holes.
fn parse_jemalloc(lines: &[(&str, Vec<u64>)]) -> Holes {
    let mut h = Holes::default();
    let one = |k: &str| {
        lines
            .iter()
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| v.first().copied())
    };
    let page = one("page").unwrap_or(4096);
    let mut classes = BTreeMap::new();
    let (mut free, mut blocks, mut seen) = (0u64, 0u64, false);
    for (_, v) in lines.iter().filter(|(n, _)| *n == "bin") {
        let [size, nregs, curregs, curslabs] = v[..] else {
            continue;
        };
        seen = true;
        let n = curslabs.saturating_mul(nregs).saturating_sub(curregs);
        if n > 0 {
            free = free.saturating_add(n.saturating_mul(size));
            blocks += n;
            add_class(&mut classes, size, n.saturating_mul(size), n);
        }
    }
    if seen {
        h.free_bytes = Some(free);
        h.free_blocks = Some(blocks);
    }
    h.classes = classes_of(classes);
    for (key, name, resident) in [
        ("dirty_pages", "dirty pages", true),
        ("muzzy_pages", "muzzy pages", false),
    ] {
        if let Some(n) = one(key) {
            h.parts.push(HolePart {
                name: name.into(),
                bytes: n * page,
                resident,
            });
        }
    }
    if let Some(b) = one("retained") {
        h.parts.push(HolePart {
            name: "retained".into(),
            bytes: b,
            resident: false,
        });
    }
    h
}

/// tcmalloc's free lists by kind into holes.
fn parse_tcmalloc(lines: &[(&str, Vec<u64>)]) -> Holes {
    let mut h = Holes::default();
    for (key, name, resident) in [
        ("central", "central free lists", true),
        ("transfer", "transfer caches", true),
        ("thread", "thread caches", true),
        ("pageheap_free", "page heap free", true),
        ("unmapped", "unmapped", false),
    ] {
        if let Some(b) = lines
            .iter()
            .find(|(n, _)| *n == key)
            .and_then(|(_, v)| v.first().copied())
        {
            h.parts.push(HolePart {
                name: name.into(),
                bytes: b,
                resident,
            });
        }
    }
    h
}

/// One account file's text; `None` when it is not a whole account (no header, no end).
pub(crate) fn parse(text: &str) -> Option<Account> {
    let mut lines = text.lines();
    let head = lines.next()?.strip_prefix("# memtrial-holes 1 ")?;
    let allocator = head.split(' ').nth(1)?.to_string();
    if !text.ends_with("# end\n") {
        return None;
    }
    let mut fields: Vec<(&str, Vec<u64>)> = Vec::new();
    let mut xml = String::new();
    let mut in_xml = false;
    for line in lines {
        if line == "# end" {
            break;
        }
        if in_xml {
            xml.push_str(line);
            xml.push('\n');
        } else if line == "xml" {
            in_xml = true;
        } else {
            let mut parts = line.split('\t');
            let key = parts.next().unwrap_or("");
            // "-" is a figure the allocator did not give: the line says nothing.
            let values: Option<Vec<u64>> = parts.map(|v| v.parse().ok()).collect();
            if let Some(values) = values.filter(|v| !v.is_empty()) {
                fields.push((key, values));
            }
        }
    }
    let one = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| v[0]);
    let holes = match allocator.as_str() {
        "glibc" => parse_glibc(&xml),
        "jemalloc" => parse_jemalloc(&fields),
        "tcmalloc" => parse_tcmalloc(&fields),
        _ => return None,
    };
    Some(Account {
        allocator,
        ns: one("ns")?,
        rss_bytes: one("rss")?,
        holes,
    })
}

/// Sums the accounts of a run's processes (`start_ns`: the run's start on the same clock).
pub(crate) fn sum(accounts: &[Account], start_ns: i128) -> Option<Holes> {
    let first = accounts.first()?;
    let mut allocators: Vec<&str> = accounts.iter().map(|a| a.allocator.as_str()).collect();
    allocators.sort_unstable();
    allocators.dedup();
    let latest = accounts.iter().map(|a| a.ns).max().unwrap_or(first.ns);
    let all = |f: &dyn Fn(&Holes) -> Option<u64>| {
        accounts
            .iter()
            .map(|a| f(&a.holes))
            .try_fold(0u64, |acc, v| v.map(|v| acc + v))
    };
    let mut classes = BTreeMap::new();
    let mut parts: Vec<HolePart> = Vec::new();
    for a in accounts {
        for c in &a.holes.classes {
            let e = classes.entry(c.up_to_bytes).or_insert((0, 0));
            e.0 += c.bytes;
            e.1 += c.blocks;
        }
        for p in &a.holes.parts {
            match parts.iter_mut().find(|q| q.name == p.name) {
                Some(q) => q.bytes += p.bytes,
                None => parts.push(p.clone()),
            }
        }
    }
    Some(Holes {
        allocator: allocators.join("+"),
        processes: accounts.len() as u32,
        t_seconds: ((latest as i128 - start_ns) as f64 / 1e9).max(0.0),
        resident_bytes: accounts.iter().map(|a| a.rss_bytes).sum(),
        free_bytes: all(&|h| h.free_bytes),
        free_blocks: all(&|h| h.free_blocks),
        classes: classes_of(classes),
        parts,
        arenas: accounts
            .iter()
            .flat_map(|a| a.holes.arenas.clone())
            .collect(),
    })
}

/// The whole accounts in a run's holes directory, for the processes in `pids`.
pub(crate) fn read_dir(dir: &Path, pids: &std::collections::BTreeSet<i32>) -> Vec<Account> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if !pids.contains(&pid) {
            continue;
        }
        // An account is a few KiB (glibc: ~100 bytes per non-empty bin per arena); a
        // larger file is not one the library wrote.
        use crate::linux::safe_file::{read_bounded, End};
        let Ok(bytes) = read_bounded(&e.path(), 4 << 20, End::Head) else {
            continue;
        };
        out.extend(parse(&String::from_utf8_lossy(&bytes)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GLIBC: &str = "# memtrial-holes 1 7 glibc\nns\t1000000000\nrss\t137195520\nxml\n\
<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n\
  <size from=\"97\" to=\"112\" total=\"1600\" count=\"16\"/>\n\
  <unsorted from=\"161\" to=\"417\" total=\"30000\" count=\"100\"/>\n\
  <size from=\"2049\" to=\"8000\" total=\"20000\" count=\"4\"/>\n\
</sizes>\n<total type=\"fast\" count=\"16\" size=\"1600\"/>\n\
<total type=\"rest\" count=\"105\" size=\"150000\"/>\n\
<system type=\"current\" size=\"24465408\"/>\n<system type=\"max\" size=\"24465408\"/>\n\
</heap>\n<heap nr=\"1\">\n<sizes>\n</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n\
<total type=\"rest\" count=\"1\" size=\"131952\"/>\n<system type=\"current\" size=\"135168\"/>\n\
</heap>\n<total type=\"fast\" count=\"16\" size=\"1600\"/>\n\
<total type=\"mmap\" count=\"1\" size=\"1601536\"/>\n<system type=\"current\" size=\"24600576\"/>\n\
</malloc>\n# end\n";

    #[test]
    fn glibc_free_chunks_by_class_tops_and_arenas() {
        let a = parse(GLIBC).unwrap();
        assert_eq!((a.ns, a.rss_bytes), (1_000_000_000, 137195520));
        let h = &a.holes;
        assert_eq!(h.free_bytes, Some(51600));
        assert_eq!(h.free_blocks, Some(120));
        assert_eq!(h.arenas.len(), 2);
        assert!(h.arenas[0].main && !h.arenas[1].main);
        // The rest (150000) and the fast bins (1600) less the chunks in bins: the top.
        assert_eq!(h.arenas[0].top_bytes, 151600 - 51600);
        assert_eq!(h.arenas[1].top_bytes, 131952);
        assert_eq!(h.parts[0].bytes, 100000 + 131952);
        let class = |b: Option<u64>| h.classes.iter().find(|c| c.up_to_bytes == b).cloned();
        assert_eq!(class(Some(256)).unwrap().bytes, 1600);
        assert_eq!(class(Some(256)).unwrap().from_bytes, 65);
        assert_eq!(
            class(Some(1024)).unwrap().bytes,
            30000,
            "unsorted: a mean of 300"
        );
        assert_eq!(class(Some(64)), None, "no free block that small");
        assert_eq!(class(Some(16384)).unwrap().blocks, 4);
    }

    #[test]
    fn jemalloc_free_regions_and_pages() {
        let text = "# memtrial-holes 1 9 jemalloc\nns\t5\nrss\t100\npage\t4096\n\
                    dirty_pages\t10\nmuzzy_pages\t-\nretained\t8192\n\
                    bin\t8\t512\t0\t0\nbin\t256\t16\t57252\t7144\n# end\n";
        let h = parse(text).unwrap().holes;
        assert_eq!(h.free_blocks, Some(7144 * 16 - 57252));
        assert_eq!(h.free_bytes, Some((7144 * 16 - 57252) * 256));
        let names: Vec<&str> = h.parts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["dirty pages", "retained"], "muzzy was not given");
        assert_eq!(h.parts[0].bytes, 40960);
        assert!(!h.parts[1].resident);
    }

    #[test]
    fn partial_and_foreign_files_are_no_account() {
        assert!(parse(&GLIBC[..GLIBC.len() - 3]).is_none());
        assert!(parse("# memtrial-holes 1 7 mimalloc\nns\t1\nrss\t1\n# end\n").is_none());
        assert!(
            parse("# memtrial-holes 1 7 glibc\nrss\t1\n# end\n").is_none(),
            "no ns"
        );
        assert!(parse("").is_none());
    }

    #[test]
    fn accounts_sum_over_processes() {
        let a = parse(GLIBC).unwrap();
        let mut b = a.clone();
        b.ns = 3_000_000_000;
        let h = sum(&[a, b], 1_000_000_000).unwrap();
        assert_eq!(h.processes, 2);
        assert_eq!(h.t_seconds, 2.0);
        assert_eq!(h.free_bytes, Some(2 * 51600));
        assert_eq!(h.arenas.len(), 4);
        assert_eq!(h.parts.len(), 1);
        assert!(sum(&[], 0).is_none());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(text in "(# memtrial-holes 1 7 (glibc|jemalloc|tcmalloc)\n)?([a-z_]{0,8}(\t[0-9-]{0,4}){0,5}\n|<[a-z]{0,6}( [a-z]{1,5}=\"[0-9]{0,3}\"){0,4}/?>\n|xml\n){0,20}(# end\n)?") {
            let _ = parse(&text);
        }
    }
}
