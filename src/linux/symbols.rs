//! Where glibc's allocator code lies in libc: the address ranges of `malloc.c`'s functions,
//! to tell a CPU sample in `_int_malloc` from one in `memcpy`.
//!
//! libc's own dynamic symbols name only the entry points (`malloc`, `free`, …); the work is
//! in static functions (`_int_malloc`, `_int_free`, `malloc_consolidate`, `sysmalloc`)
//! that only the full symbol table names. Distributions ship it apart, found by the
//! library's build ID: `/usr/lib/debug/.build-id/xx/yyyy.debug` (Debian's and Ubuntu's
//! `libc6-dbg`, Fedora's `glibc-debuginfo`). Its `FILE` symbol `malloc.c` is followed by
//! that file's local functions; with the entry points, they are the allocator.

use std::path::PathBuf;

use goblin::elf::program_header::PT_LOAD;
use goblin::elf::sym::{STB_LOCAL, STT_FILE, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;

/// glibc's allocator entry points (from its `malloc.c`), as they appear in the symbol table
/// (version suffixes removed).
const ENTRY_POINTS: &[&str] = &[
    "malloc",
    "free",
    "cfree",
    "calloc",
    "realloc",
    "memalign",
    "aligned_alloc",
    "posix_memalign",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
    "malloc_trim",
    "mallopt",
    "mallinfo",
    "mallinfo2",
    "malloc_stats",
    "malloc_info",
    "__libc_malloc",
    "__libc_free",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
    "__libc_mallopt",
    "__libc_mallinfo",
    "__libc_mallinfo2",
    "__posix_memalign",
    "__malloc_arena_thread_freeres",
];

/// The largest span glibc's `malloc.c` compiles to (about 24 KiB on 2.36): a span beyond
/// it is taken as symbols gone astray, and only the functions themselves count.
const MAX_SPAN: u64 = 1 << 20;

/// A library's loadable segments, to turn a file offset into the address its symbols use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segments(Vec<(u64, u64, u64)>);

impl Segments {
    /// The loadable segments of an ELF file.
    pub(crate) fn of(elf: &Elf) -> Segments {
        Segments(
            elf.program_headers
                .iter()
                .filter(|p| p.p_type == PT_LOAD)
                .map(|p| (p.p_offset, p.p_vaddr, p.p_filesz))
                .collect(),
        )
    }

    /// The symbol address of the byte at `offset` in the file, if a segment maps it.
    pub fn address_of(&self, offset: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|(off, _, len)| offset >= *off && offset < off + len)
            .map(|(off, vaddr, _)| offset - off + vaddr)
    }
}

/// glibc's allocator in one libc: its code ranges, in symbol addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MallocCode {
    pub segments: Segments,
    pub ranges: Vec<(u64, u64)>,
    /// The file the symbols came from.
    pub symbols_from: PathBuf,
}

impl MallocCode {
    /// Is the byte at `offset` of libc's file allocator code?
    pub fn contains_offset(&self, offset: u64) -> bool {
        self.segments
            .address_of(offset)
            .is_some_and(|a| self.ranges.iter().any(|(lo, hi)| a >= *lo && a < *hi))
    }
}

/// The build ID of an ELF file's `NT_GNU_BUILD_ID` note, in hex.
pub fn build_id(elf: &Elf, bytes: &[u8]) -> Option<String> {
    elf.iter_note_headers(bytes)?
        .flatten()
        .find(|n| n.n_type == goblin::elf::note::NT_GNU_BUILD_ID && n.name == "GNU")
        .map(|n| n.desc.iter().map(|b| format!("{b:02x}")).collect())
}

/// Where full symbol tables are looked up: `MEMTRIAL_DEBUG_DIR` when set (a debuginfod
/// cache laid out the same way, or a copy of another machine's), else the distributions'
/// `/usr/lib/debug`.
pub const DEBUG_DIR_ENV: &str = "MEMTRIAL_DEBUG_DIR";

/// Where a distribution keeps the full symbols of a file with build ID `id`
/// (`<debug dir>/.build-id/xx/yyyy.debug`).
pub fn debug_file(id: &str) -> Option<PathBuf> {
    if id.len() < 3 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let dir = std::env::var_os(DEBUG_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/usr/lib/debug"), PathBuf::from);
    let p = dir
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    p.is_file().then_some(p)
}

/// glibc's allocator code in the libc whose bytes are `libc` (read from `path`, named in
/// messages), from its full symbol table; the error says what is missing.
pub fn glibc_malloc_code(libc: &[u8], path: &str) -> Result<MallocCode, String> {
    let elf = Elf::parse(libc).map_err(|e| format!("{path} is not an ELF file: {e}"))?;
    let segments = Segments::of(&elf);
    // The library's own table first (an unstripped libc), then the separate one.
    if let Some(ranges) = malloc_ranges(&elf) {
        return Ok(MallocCode {
            segments,
            ranges,
            symbols_from: PathBuf::from(path),
        });
    }
    let missing = || {
        format!(
            "{path} has only its exported symbols and its full symbol table is not installed \
             (Debian and Ubuntu: apt-get install libc6-dbg; Fedora: dnf debuginfo-install \
             glibc): without it, glibc's internal allocator functions (_int_malloc, _int_free) \
             cannot be told from the rest of libc"
        )
    };
    let id = build_id(&elf, libc).ok_or_else(missing)?;
    let debug = debug_file(&id).ok_or_else(missing)?;
    // A system file (often a link into /usr/lib/debug), read within a limit.
    let mut bytes = Vec::new();
    std::fs::File::open(&debug)
        .and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, 256 << 20), &mut bytes)
        })
        .map_err(|e| format!("{}: {e}", debug.display()))?;
    let dbg = Elf::parse(&bytes).map_err(|e| format!("{}: {e}", debug.display()))?;
    let ranges = malloc_ranges(&dbg).ok_or_else(|| {
        format!(
            "{} (the symbols of {path}) names no malloc.c functions",
            debug.display()
        )
    })?;
    Ok(MallocCode {
        segments,
        ranges,
        symbols_from: debug,
    })
}

/// `malloc.c`'s functions in a full symbol table: the local functions that follow its
/// `FILE` symbol and the entry points, as one span when they lie together (the static
/// functions in between count), else each on its own. `None` without a `malloc.c`.
fn malloc_ranges(elf: &Elf) -> Option<Vec<(u64, u64)>> {
    let mut file: Option<&str> = None;
    let mut seen_file = false;
    let mut funcs: Vec<(u64, u64)> = Vec::new();
    for sym in elf.syms.iter() {
        let name = elf.strtab.get_at(sym.st_name).unwrap_or("");
        if sym.st_type() == STT_FILE {
            file = Some(name);
            seen_file |= name == "malloc.c";
            continue;
        }
        let func = matches!(sym.st_type(), STT_FUNC | STT_GNU_IFUNC);
        if !func || sym.st_value == 0 || sym.st_size == 0 {
            continue;
        }
        let bare = name.split('@').next().unwrap_or(name);
        let in_malloc_c = sym.st_bind() == STB_LOCAL && file == Some("malloc.c");
        if in_malloc_c || ENTRY_POINTS.contains(&bare) {
            funcs.push((sym.st_value, sym.st_value + sym.st_size));
        }
    }
    if !seen_file || funcs.is_empty() {
        return None;
    }
    let lo = funcs.iter().map(|f| f.0).min()?;
    let hi = funcs.iter().map(|f| f.1).max()?;
    if hi - lo <= MAX_SPAN {
        return Some(vec![(lo, hi)]);
    }
    funcs.sort_unstable();
    funcs.dedup();
    Some(funcs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libc this machine runs: with libc6-dbg installed (the test set-up installs it),
    /// `_int_malloc` lies in the allocator's code and `memcpy`'s entry does not.
    #[test]
    fn this_machines_libc_has_its_allocator_code_found() {
        let path = "/lib/x86_64-linux-gnu/libc.so.6";
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        let elf = Elf::parse(&bytes).unwrap();
        let id = build_id(&elf, &bytes).expect("libc has a build ID");
        if debug_file(&id).is_none() {
            let e = glibc_malloc_code(&bytes, path).unwrap_err();
            assert!(e.contains("libc6-dbg"), "{e}");
            return;
        }
        let code = glibc_malloc_code(&bytes, path).unwrap();
        let span: u64 = code.ranges.iter().map(|(a, b)| b - a).sum();
        assert!((4 << 10..MAX_SPAN).contains(&span), "{span}");
        let dbg = std::fs::read(&code.symbols_from).unwrap();
        let delf = Elf::parse(&dbg).unwrap();
        let addr = |want: &str| {
            delf.syms
                .iter()
                .find(|s| {
                    let name = delf.strtab.get_at(s.st_name).unwrap_or("");
                    name.split('@').next() == Some(want) && s.st_value != 0
                })
                .map(|s| s.st_value)
                .unwrap_or_else(|| panic!("no {want}"))
        };
        let inside = |a: u64| code.ranges.iter().any(|(lo, hi)| a >= *lo && a < *hi);
        for f in ["_int_malloc", "_int_free", "malloc", "free", "calloc"] {
            assert!(inside(addr(f)), "{f} not in {:x?}", code.ranges);
        }
        for f in ["memcpy", "printf", "pthread_create", "qsort"] {
            assert!(!inside(addr(f)), "{f} in {:x?}", code.ranges);
        }
    }

    #[test]
    fn offsets_map_to_addresses_through_their_segment() {
        let s = Segments(vec![(0, 0, 0x1000), (0x1000, 0x2000, 0x500)]);
        assert_eq!(s.address_of(0x10), Some(0x10));
        assert_eq!(s.address_of(0x1010), Some(0x2010));
        assert_eq!(s.address_of(0x1600), None);
    }
}
