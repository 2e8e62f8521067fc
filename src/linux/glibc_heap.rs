//! How much `malloc_trim(0)` could give back from a running glibc process now, without
//! trimming it: a walk over its heaps' chunks from the outside.
//!
//! `malloc_trim(0)` (glibc's `mtrim`) merges each arena's fast chunks, then gives back with
//! `MADV_DONTNEED` every whole page inside each free chunk in its bins (from the first page
//! boundary after the chunk's first 48 bytes), and shrinks the main heap's top to nothing
//! (`systrim` with no pad). So what it returns is the *resident* pages of those ranges. This
//! walk reads the chunk headers (`/proc/PID/mem`, ptrace-read permission) of the main heap
//! (`[heap]`) and of every arena heap, takes a chunk as free when the next chunk's
//! `PREV_INUSE` bit is clear, and counts the resident pages of its trimmable range
//! (`/proc/PID/pagemap`'s present bit). Chunks in fast bins and thread caches look in use
//! from outside (trim merges the first, keeps the second): the figure is a lower bound of
//! what a trim returns. The process runs on meanwhile: a header that makes no sense ends
//! that heap's walk, and the result says so.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::maps::Mapping;

/// What a trim could give back now.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Trimmable {
    /// Resident bytes inside free chunks' whole pages, and at the main heap's top.
    pub bytes: u64,
    /// Of them, at the main heap's top.
    pub top_bytes: u64,
    /// Free chunks seen (outside fast bins and thread caches) and their bytes.
    pub free_chunks: u64,
    pub free_bytes: u64,
    /// Heaps walked (the main heap included) and chunks read.
    pub heaps: u32,
    pub chunks: u64,
    /// Every heap was walked to its end.
    pub complete: bool,
}

/// glibc's `sizeof(struct malloc_chunk)` (what a free chunk keeps before its first page)
/// and the smallest chunk, on 64-bit.
const CHUNK_HEAD: u64 = 48;
const MIN_CHUNK: u64 = 32;
/// `sizeof(heap_info)` and `sizeof(struct malloc_state)` (glibc 2.26+, x86-64).
const HEAP_INFO: u64 = 32;
const MALLOC_STATE: u64 = 2200;

/// Most chunk headers read per heap: a walk stops there (and says it is partial).
const MAX_CHUNKS: u64 = 20_000_000;

/// A window of another process's memory, read 64 KiB at a time.
struct Window<'a> {
    mem: &'a File,
    start: u64,
    buf: Vec<u8>,
}

impl Window<'_> {
    fn word(&mut self, addr: u64) -> Option<u64> {
        if addr < self.start || addr + 8 > self.start + self.buf.len() as u64 {
            self.buf.resize(64 << 10, 0);
            let n = read_some(self.mem, &mut self.buf, addr)?;
            self.buf.truncate(n);
            self.start = addr;
            if n < 8 {
                return None;
            }
        }
        let at = (addr - self.start) as usize;
        Some(u64::from_le_bytes(self.buf[at..at + 8].try_into().ok()?))
    }
}

fn read_some(f: &File, buf: &mut [u8], at: u64) -> Option<usize> {
    loop {
        match f.read_at(buf, at) {
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Resident pages of `[lo, hi)` from `/proc/PID/pagemap` (bit 63: present).
fn resident(pagemap: &File, lo: u64, hi: u64, page: u64) -> u64 {
    let mut n = 0;
    let mut p = lo / page;
    let last = hi / page;
    let mut buf = vec![0u8; 8 * 4096];
    while p < last {
        let count = ((last - p) as usize).min(4096);
        let Some(got) = read_some(pagemap, &mut buf[..count * 8], p * 8) else {
            break;
        };
        for e in buf[..got].chunks_exact(8) {
            if u64::from_le_bytes(e.try_into().unwrap_or([0; 8])) >> 63 == 1 {
                n += 1;
            }
        }
        if got < count * 8 {
            break;
        }
        p += count as u64;
    }
    n * page
}

/// Walks the chunks in `[first, end)`; `main` heaps get their top counted.
fn walk(
    w: &mut Window,
    pagemap: &File,
    first: u64,
    end: u64,
    main: bool,
    page: u64,
    t: &mut Trimmable,
) -> bool {
    let mut p = first;
    let mut chunks = 0;
    while p + MIN_CHUNK <= end {
        let Some(field) = w.word(p + 8) else {
            return false;
        };
        let size = field & !7;
        if size < MIN_CHUNK || size % 16 != 0 || p + size > end {
            return false;
        }
        chunks += 1;
        t.chunks += 1;
        if chunks > MAX_CHUNKS {
            return false;
        }
        let next = p + size;
        if next + MIN_CHUNK > end {
            // The top chunk: the main heap's shrinks to its minimum.
            if main && size > MIN_CHUNK + 1 {
                let extra = (size - MIN_CHUNK - 1) / page * page;
                if extra > 0 {
                    let r = resident(pagemap, next - extra, next, page);
                    t.top_bytes += r;
                    t.bytes += r;
                }
            }
            return true;
        }
        let Some(next_field) = w.word(next + 8) else {
            return false;
        };
        if next_field & 1 == 0 {
            t.free_chunks += 1;
            t.free_bytes += size;
            let lo = (p + CHUNK_HEAD).div_ceil(page) * page;
            if p + size > lo {
                let len = (p + size - lo) / page * page;
                if len > 0 {
                    t.bytes += resident(pagemap, lo, lo + len, page);
                }
            }
        }
        p = next;
    }
    true
}

/// What a trim could give back from process `pid` now: its main heap (`[heap]` of
/// `maps`) and its arena heaps (`arena_heaps`: their starts, as found from their headers).
pub fn trimmable(
    pid: i32,
    maps: &[Mapping],
    arena_heaps: &[u64],
    page: u64,
) -> Result<Trimmable, String> {
    let open = |f: &str| {
        File::open(format!("/proc/{pid}/{f}")).map_err(|e| format!("/proc/{pid}/{f}: {e}"))
    };
    let mem = open("mem")?;
    let pagemap = open("pagemap")?;
    let mut w = Window {
        mem: &mem,
        start: 0,
        buf: Vec::new(),
    };
    let mut t = Trimmable {
        complete: true,
        ..Default::default()
    };
    if let Some(h) = maps.iter().find(|m| m.path.as_deref() == Some("[heap]")) {
        t.heaps += 1;
        t.complete &= walk(&mut w, &pagemap, h.start, h.end, true, page, &mut t);
    }
    for &start in arena_heaps {
        // heap_info: ar_ptr, prev, size (bytes in use), mprotect_size.
        let (Some(ar_ptr), Some(size)) = (w.word(start), w.word(start + 16)) else {
            t.complete = false;
            continue;
        };
        // An arena's first heap holds the arena itself after the header.
        let mut first = start + HEAP_INFO;
        if ar_ptr == start + HEAP_INFO {
            first += MALLOC_STATE;
        }
        // Chunks are placed so that their memory (16 bytes in) is 16-aligned.
        first = (first + 16).div_ceil(16) * 16 - 16;
        t.heaps += 1;
        t.complete &= walk(&mut w, &pagemap, first, start + size, false, page, &mut t);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test process's own heaps, walked from the outside: the walk reaches the end of
    /// the main heap and counts nothing impossible.
    #[test]
    fn this_process_is_walked_to_the_end() {
        // Free chunks of whole pages between live blocks.
        let keep: Vec<Vec<u8>> = (0..64)
            .map(|i| {
                let v = vec![1u8; 40_000];
                if i % 2 == 0 {
                    v
                } else {
                    Vec::new()
                }
            })
            .collect();
        let pid = std::process::id() as i32;
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let maps = crate::linux::maps::parse_maps(&text).unwrap();
        let t = trimmable(pid, &maps, &[], crate::linux::proc::page_size()).unwrap();
        assert_eq!(
            t.heaps,
            u32::from(maps.iter().any(|m| m.path.as_deref() == Some("[heap]")))
        );
        assert!(t.bytes <= t.free_bytes + t.top_bytes + (1 << 20), "{t:?}");
        drop(keep);
    }
}
