//! glibc malloc's own settings inside a running process: what its tunables became.
//!
//! `GLIBC_TUNABLES` is read by the dynamic loader and handed to malloc when it initialises;
//! a tunable glibc does not know, or a value outside its range, is dropped without a word.
//! What malloc took lives in its `mp_` (`struct malloc_par`: trim and mmap thresholds, top
//! pad, arena limits, tcache sizes, the huge-page size it madvises with) and in a few other
//! statics (`narenas`, `global_max_fast`, `perturb_byte`, `__malloc_initialized`). They are
//! local symbols: only libc's full symbol table names them, shipped apart by build ID
//! (`libc6-dbg`, see [`super::symbols`]). With it, the values are read from the process's
//! memory (`/proc/PID/mem`, ptrace-read permission): glibc's own view, not the environment.
//!
//! `mp_`'s layout changed once: glibc 2.35 added the huge-page fields (136 bytes on
//! x86-64); 2.26 to 2.34 have 112. The symbol's size says which; any other size is a layout
//! memtrial does not know, and nothing is read.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use goblin::elf::Elf;

use super::maps::{self, Mapping};
use super::symbols::{build_id, debug_file, Segments};

/// What glibc's malloc runs with in one process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MallocParams {
    pub trim_threshold: u64,
    pub top_pad: u64,
    pub mmap_threshold: u64,
    pub arena_test: u64,
    /// 0: no limit set (glibc then allows 8 × CPUs once `arena_test` arenas exist).
    pub arena_max: u64,
    /// The huge-page size malloc madvises its heaps with (`glibc.malloc.hugetlb=1`; 0:
    /// none). Absent before glibc 2.35.
    pub thp_pagesize: Option<u64>,
    /// The hugetlbfs page size it maps with (`hugetlb=2` or a size; 0: none).
    pub hp_pagesize: Option<u64>,
    pub mmap_max: u64,
    /// The mmap threshold no longer moves with the blocks freed (a threshold was set).
    pub fixed_thresholds: bool,
    pub tcache_bins: u64,
    pub tcache_max_bytes: u64,
    pub tcache_count: u64,
    pub tcache_unsorted_limit: u64,
    /// Arenas made so far, the main one included.
    pub arenas: Option<u64>,
    pub max_fast: Option<u64>,
    pub perturb: Option<u64>,
}

/// Why glibc's settings could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// No glibc mapped (yet): a static program, another libc, or the loader not done.
    NoGlibc,
    /// malloc has not initialised yet: its settings are still the built-in defaults.
    NotYet,
    /// The process ended.
    Gone,
    /// Cannot be read here, and why (no full symbol table, an unknown layout, permission).
    Unreadable(String),
}

/// Where the settings lie in one libc.
#[derive(Debug)]
pub struct Layout {
    segments: Segments,
    mp: u64,
    with_huge_pages: bool,
    initialized: Option<u64>,
    narenas: Option<u64>,
    max_fast: Option<u64>,
    perturb: Option<u64>,
    /// The file the symbols came from.
    pub symbols_from: PathBuf,
}

/// `sizeof(struct malloc_par)` on x86-64: glibc 2.35 on, and 2.26 to 2.34.
const MP_SIZE_HUGE: u64 = 136;
const MP_SIZE_PLAIN: u64 = 112;

/// The layout of the libc at `path` (read as the process sees it: a container's own file
/// through `/proc/PID/root`), from its full symbol table.
pub fn layout_of(path: &Path) -> Result<Layout, String> {
    let bytes = read_limited(path, 64 << 20)?;
    let elf =
        Elf::parse(&bytes).map_err(|e| format!("{} is not an ELF file: {e}", path.display()))?;
    let segments = Segments::of(&elf);
    let missing = || {
        format!(
            "{} has only its exported symbols and its full symbol table is not installed \
             (Debian and Ubuntu: apt-get install libc6-dbg; Fedora: dnf debuginfo-install \
             glibc): glibc's malloc settings are local symbols",
            path.display()
        )
    };
    let id = build_id(&elf, &bytes).ok_or_else(missing)?;
    let debug = debug_file(&id).ok_or_else(missing)?;
    let dbg_bytes = read_limited(&debug, 256 << 20)?;
    let dbg = Elf::parse(&dbg_bytes).map_err(|e| format!("{}: {e}", debug.display()))?;
    let mut mp = None;
    let mut found: HashMap<&str, u64> = HashMap::new();
    for sym in dbg.syms.iter() {
        let name = dbg.strtab.get_at(sym.st_name).unwrap_or("");
        if sym.st_value == 0 {
            continue;
        }
        match name {
            "mp_" => mp = Some((sym.st_value, sym.st_size)),
            "__malloc_initialized" | "narenas" | "global_max_fast" | "perturb_byte" => {
                found.insert(name, sym.st_value);
            }
            _ => {}
        }
    }
    let (mp, size) = mp.ok_or_else(|| format!("{} names no mp_", debug.display()))?;
    let with_huge_pages = match size {
        MP_SIZE_HUGE => true,
        MP_SIZE_PLAIN => false,
        other => {
            return Err(format!(
                "glibc's malloc_par in {} has {other} bytes, a layout memtrial does not know \
                 ({MP_SIZE_PLAIN} or {MP_SIZE_HUGE} on x86-64)",
                path.display()
            ))
        }
    };
    Ok(Layout {
        segments,
        mp,
        with_huge_pages,
        initialized: found.get("__malloc_initialized").copied(),
        narenas: found.get("narenas").copied(),
        max_fast: found.get("global_max_fast").copied(),
        perturb: found.get("perturb_byte").copied(),
        symbols_from: debug,
    })
}

fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit).read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes)
}

/// Layouts by libc file identity (device, inode, mtime): each libc is read once.
fn cached_layout(pid: i32, lib: &str) -> Result<Arc<Layout>, String> {
    use std::os::unix::fs::MetadataExt;
    type Cache = Mutex<HashMap<(u64, u64, i64), Result<Arc<Layout>, String>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let in_root = PathBuf::from(format!("/proc/{pid}/root{lib}"));
    let path = if in_root.exists() {
        in_root
    } else {
        PathBuf::from(lib)
    };
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let key = (meta.dev(), meta.ino(), meta.mtime());
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(l) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return l;
    }
    // Messages name the library as the process maps it.
    let shown = format!("/proc/{pid}/root");
    let l = layout_of(&path)
        .map(Arc::new)
        .map_err(|e| e.replace(&shown, ""));
    if let Ok(mut c) = cache.lock() {
        c.insert(key, l.clone());
    }
    l
}

/// Is this mapped file the C library?
fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "libc.so.6" || (name.starts_with("libc-") && name.ends_with(".so"))
}

/// glibc malloc's settings in process `pid`, read from its memory.
pub fn read(pid: i32) -> Result<MallocParams, Unread> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|_| Unread::Gone)?;
    if text.is_empty() {
        return Err(Unread::Gone);
    }
    let mappings = maps::parse_maps(&text).map_err(|e| Unread::Unreadable(e.to_string()))?;
    let Some(m) = mappings
        .iter()
        .find(|m| m.path.as_deref().is_some_and(is_libc))
    else {
        return Err(Unread::NoGlibc);
    };
    let lib = m.path.clone().unwrap_or_default();
    let layout = cached_layout(pid, &lib).map_err(Unread::Unreadable)?;
    read_with(pid, m, &layout)
}

/// The load bias of the library mapped at `m`: what its symbol addresses are offset by.
fn bias(m: &Mapping, layout: &Layout) -> Option<u64> {
    let vaddr = layout.segments.address_of(m.offset)?;
    m.start.checked_sub(vaddr)
}

fn read_with(pid: i32, m: &Mapping, layout: &Layout) -> Result<MallocParams, Unread> {
    let bias = bias(m, layout)
        .ok_or_else(|| Unread::Unreadable("libc's mapping does not match its segments".into()))?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unread::Gone,
        _ => Unread::Unreadable(format!(
            "/proc/{pid}/mem: {e} (reading another process's memory needs root or \
             CAP_SYS_PTRACE)"
        )),
    })?;
    let read_at = |addr: u64, buf: &mut [u8]| {
        mem.read_exact_at(buf, bias + addr).map_err(|e| {
            if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                Unread::Unreadable(format!("/proc/{pid}/mem: {e}"))
            } else {
                Unread::Gone
            }
        })
    };
    if let Some(at) = layout.initialized {
        let mut b = [0u8; 1];
        read_at(at, &mut b)?;
        if b[0] == 0 {
            return Err(Unread::NotYet);
        }
    }
    let size = if layout.with_huge_pages {
        MP_SIZE_HUGE
    } else {
        MP_SIZE_PLAIN
    };
    let mut mp = vec![0u8; size as usize];
    read_at(layout.mp, &mut mp)?;
    let mut p = parse_mp(&mp, layout.with_huge_pages);
    let word = |at: Option<u64>, width: usize| -> Result<Option<u64>, Unread> {
        let Some(at) = at else { return Ok(None) };
        let mut b = [0u8; 8];
        read_at(at, &mut b[..width])?;
        Ok(Some(u64::from_le_bytes(b)))
    };
    p.arenas = word(layout.narenas, 8)?;
    p.max_fast = word(layout.max_fast, 8)?;
    p.perturb = word(layout.perturb, 4)?;
    Ok(p)
}

/// `struct malloc_par` as glibc lays it out on x86-64 (see the module's doc).
fn parse_mp(b: &[u8], with_huge_pages: bool) -> MallocParams {
    let q = |o: usize| {
        b.get(o..o + 8)
            .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    };
    let i = |o: usize| {
        b.get(o..o + 4)
            .map_or(0, |s| i32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
            .max(0) as u64
    };
    // After the five sizes: the huge-page fields (2.35+), then four ints, two sizes, a
    // pointer and the four tcache sizes.
    let (thp, hp, ints): (Option<u64>, Option<u64>, usize) = if with_huge_pages {
        (Some(q(40)), Some(q(48)), 60)
    } else {
        (None, None, 40)
    };
    let tcache = (ints + 16).next_multiple_of(8) + 24;
    MallocParams {
        trim_threshold: q(0),
        top_pad: q(8),
        mmap_threshold: q(16),
        arena_test: q(24),
        arena_max: q(32),
        thp_pagesize: thp,
        hp_pagesize: hp,
        mmap_max: i(ints + 4),
        fixed_thresholds: i(ints + 12) != 0,
        tcache_bins: q(tcache),
        tcache_max_bytes: q(tcache + 8),
        tcache_count: q(tcache + 16),
        tcache_unsorted_limit: q(tcache + 24),
        arenas: None,
        max_fast: None,
        perturb: None,
    }
}

/// What glibc made of one tunable, against what it was set to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunableCheck {
    /// glibc runs with it: what was read.
    Took(String),
    /// glibc runs with something else: what, and why that may be.
    Differs(String),
    /// This tunable leaves nothing memtrial can read.
    NotReadable(String),
}

/// `MIN_CHUNK_SIZE / 2`, `SIZE_SZ` and `MALLOC_ALIGN_MASK` on x86-64, for `mxfast`.
const MAX_FAST_FLOOR: u64 = 16;
const MAX_FAST_LIMIT: u64 = 160;

/// Checks tunable `name` (`trim_threshold`, without `glibc.malloc.`) set to `value` against
/// the settings read.
pub fn check_tunable(name: &str, value: u64, p: &MallocParams) -> TunableCheck {
    let eq = |field: &str, got: u64, want: u64, why_not: &str| {
        if got == want {
            TunableCheck::Took(format!("glibc's {field} is {got}"))
        } else {
            TunableCheck::Differs(format!("glibc's {field} is {got}, not {want}{why_not}"))
        }
    };
    match name {
        "trim_threshold" => eq("trim_threshold", p.trim_threshold, value, ""),
        "top_pad" => eq("top_pad", p.top_pad, value, ""),
        "mmap_threshold" => eq(
            "mmap_threshold",
            p.mmap_threshold,
            value,
            " (glibc refuses a threshold above half its heap size, 32 MiB)",
        ),
        "mmap_max" => eq("mmap_max", p.mmap_max, value, ""),
        "arena_max" => eq("arena_max", p.arena_max, value, ""),
        "arena_test" => eq("arena_test", p.arena_test, value, ""),
        "tcache_count" => eq(
            "tcache_count",
            p.tcache_count,
            value,
            " (glibc takes at most 65535, 127 before 2.30)",
        ),
        "tcache_max" => eq(
            "tcache_max_bytes",
            p.tcache_max_bytes,
            value,
            " (glibc takes at most 1032 on 64-bit)",
        ),
        "tcache_unsorted_limit" => eq("tcache_unsorted_limit", p.tcache_unsorted_limit, value, ""),
        "hugetlb" => match (p.thp_pagesize, p.hp_pagesize) {
            (Some(thp), Some(hp)) => match value {
                0 if thp == 0 && hp == 0 => {
                    TunableCheck::Took("glibc madvises no huge pages".into())
                }
                0 => TunableCheck::Differs(format!(
                    "glibc's huge-page sizes are {thp} (THP) and {hp} (hugetlbfs), not 0"
                )),
                1 if thp > 0 => TunableCheck::Took(format!(
                    "glibc madvises its heaps with huge pages of {thp} bytes (thp_pagesize)"
                )),
                1 => TunableCheck::Differs(
                    "glibc's thp_pagesize is 0: glibc madvises huge pages only when the \
                     host's THP mode is madvise"
                        .into(),
                ),
                _ if hp > 0 => TunableCheck::Took(format!(
                    "glibc maps its heaps with hugetlbfs pages of {hp} bytes"
                )),
                _ => TunableCheck::Differs(
                    "glibc's hp_pagesize is 0: no hugetlbfs pages of that size are available"
                        .into(),
                ),
            },
            _ => TunableCheck::Differs(
                "this glibc has no huge-page setting (glibc.malloc.hugetlb is 2.35's)".into(),
            ),
        },
        "mxfast" => match p.max_fast {
            Some(got) => {
                let want = if value <= 8 {
                    MAX_FAST_FLOOR
                } else {
                    (value + 8) & !15
                };
                if value > MAX_FAST_LIMIT {
                    TunableCheck::Differs(format!(
                        "glibc's global_max_fast is {got}: it takes at most {MAX_FAST_LIMIT}"
                    ))
                } else {
                    eq("global_max_fast", got, want, "")
                }
            }
            None => TunableCheck::NotReadable("glibc's global_max_fast is not named".into()),
        },
        "perturb" => match p.perturb {
            Some(got) => eq("perturb_byte", got & 0xffff_ffff, value & 0xffff_ffff, ""),
            None => TunableCheck::NotReadable("glibc's perturb_byte is not named".into()),
        },
        other => TunableCheck::NotReadable(format!(
            "glibc.malloc.{other} leaves nothing memtrial can read"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mp_` of a glibc 2.36 process started with
    /// `GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072:glibc.malloc.hugetlb=1:glibc.malloc.tcache_count=3`,
    /// as read from its memory.
    fn captured() -> Vec<u8> {
        let mut b = vec![0u8; 136];
        let mut q = |o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        q(0, 131072);
        q(8, 131072);
        q(16, 131072);
        q(24, 8);
        q(32, 0);
        q(40, 2 << 20);
        q(48, 0);
        q(104, 64);
        q(112, 1032);
        q(120, 3);
        q(128, 0);
        b[64..68].copy_from_slice(&65536i32.to_le_bytes());
        b[72..76].copy_from_slice(&1i32.to_le_bytes());
        b
    }

    #[test]
    fn the_236_layout_is_read_field_by_field() {
        let p = parse_mp(&captured(), true);
        assert_eq!(p.trim_threshold, 131072);
        assert_eq!(p.thp_pagesize, Some(2 << 20));
        assert_eq!(p.mmap_max, 65536);
        assert!(p.fixed_thresholds);
        assert_eq!(
            (p.tcache_bins, p.tcache_max_bytes, p.tcache_count),
            (64, 1032, 3)
        );
        assert_eq!(
            check_tunable("trim_threshold", 131072, &p),
            TunableCheck::Took("glibc's trim_threshold is 131072".into())
        );
        assert!(matches!(
            check_tunable("tcache_count", 3, &p),
            TunableCheck::Took(_)
        ));
        assert!(matches!(
            check_tunable("hugetlb", 1, &p),
            TunableCheck::Took(_)
        ));
        let TunableCheck::Differs(why) = check_tunable("tcache_max", 4096, &p) else {
            panic!()
        };
        assert!(
            why.contains("1032, not 4096") && why.contains("at most 1032"),
            "{why}"
        );
        assert!(matches!(
            check_tunable("mxfast", 64, &p),
            TunableCheck::NotReadable(_)
        ));
        let none = MallocParams {
            max_fast: Some(64),
            ..Default::default()
        };
        assert!(matches!(
            check_tunable("mxfast", 64, &none),
            TunableCheck::Took(_)
        ));
        assert!(matches!(
            check_tunable("mxfast", 200, &none),
            TunableCheck::Differs(_)
        ));
        assert!(matches!(
            check_tunable("hugetlb", 1, &none),
            TunableCheck::Differs(_)
        ));
    }

    #[test]
    fn the_pre_235_layout_has_no_huge_page_fields() {
        let mut b = vec![0u8; 112];
        b[0..8].copy_from_slice(&4096u64.to_le_bytes());
        b[44..48].copy_from_slice(&7i32.to_le_bytes());
        b[80..88].copy_from_slice(&64u64.to_le_bytes());
        b[96..104].copy_from_slice(&5u64.to_le_bytes());
        let p = parse_mp(&b, false);
        assert_eq!(p.trim_threshold, 4096);
        assert_eq!(p.mmap_max, 7);
        assert_eq!(p.thp_pagesize, None);
        assert_eq!((p.tcache_bins, p.tcache_count), (64, 5));
    }

    /// This process's own glibc, read through its memory: the defaults, unless the test
    /// run set tunables.
    #[test]
    fn this_process_reads_its_own_settings() {
        let me = std::process::id() as i32;
        match read(me) {
            Ok(p) => {
                assert!(p.tcache_count > 0 && p.mmap_threshold >= 128 << 10, "{p:?}");
                assert!(p.arenas.unwrap_or(1) >= 1);
            }
            Err(Unread::Unreadable(why)) => {
                assert!(why.contains("libc6-dbg") || why.contains("mem"), "{why}")
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}
