//! Who answers `malloc`, judged from an ELF file on disk.
//!
//! The facts gathered here let a caller decide, before or after a run,
//! whether an `LD_PRELOAD`ed allocator can possibly be the one answering
//! `malloc` for a program:
//!
//! * a [`Linkage::Static`] executable never runs the dynamic loader, so
//!   `LD_PRELOAD` is ignored entirely;
//! * an executable that [defines `malloc`](ElfFacts::defines_malloc) in its
//!   dynamic symbol table comes first in the symbol lookup scope, so its
//!   `malloc` wins over any preloaded library (which is still mapped, but
//!   unused for `malloc`);
//! * a [bundled allocator](ElfFacts::bundled_allocator) (e.g. a Rust program
//!   using `tikv-jemallocator`) may serve the program's own allocations even
//!   when `malloc` itself is glibc's or the preloaded one;
//! * a [set-user/group-ID](ElfFacts::setuid_or_setgid) executable runs in
//!   secure-execution mode, where `ld.so` ignores `LD_PRELOAD` entries that
//!   contain a slash and preloads only set-user-ID libraries from the
//!   standard directories; glibc may also ignore malloc tunables such as
//!   `MALLOC_ARENA_MAX` there.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use goblin::elf::section_header::SHN_UNDEF;
use goblin::elf::sym::{Sym, Symtab, STB_GLOBAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;
use goblin::strtab::Strtab;

/// Largest file [`inspect_elf`] will read (2 GiB).
pub(crate) const MAX_ELF_SIZE: u64 = 2 * 1024 * 1024 * 1024;

/// Path reported in errors from [`inspect_elf_bytes`].
#[cfg(test)]
const MEMORY_PATH: &str = "<memory>";

/// How the program gets to its libraries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Linkage {
    /// No `PT_INTERP`: the kernel starts the file directly and no dynamic
    /// loader runs, so `LD_PRELOAD` has no effect. This covers `gcc -static`
    /// and `gcc -static-pie` executables. Note that shared libraries have no
    /// `PT_INTERP` either and so are reported as `Static` too; this
    /// classification is meant for executables.
    Static,
    /// `PT_INTERP` names the dynamic loader, e.g. `/lib64/ld-linux-x86-64.so.2`.
    Dynamic { interpreter: String },
}

/// A malloc implementation recognised by its exported symbols or file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BundledAllocator {
    /// jemalloc: `mallctl`, `je_malloc`, `je_mallctl`, `_rjem_malloc`, …
    Jemalloc,
    /// gperftools tcmalloc: `tc_malloc`, `MallocExtension_*`.
    Tcmalloc,
    /// mimalloc: `mi_malloc`, `mi_version`.
    Mimalloc,
}

/// What an ELF file says about its `malloc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ElfFacts {
    pub linkage: Linkage,
    /// The file defines a global or weak function named `malloc` in
    /// `.dynsym`. For a file without `PT_INTERP` and without `DT_NEEDED`
    /// (a static or static-pie executable) a definition in `.symtab` counts
    /// too, of any binding, since such a program's calls were bound at link
    /// time; a stripped static executable therefore reports `false` even
    /// though its `malloc` is necessarily its own.
    pub defines_malloc: bool,
    /// Signatures of an allocator linked into this file, from defined
    /// function symbols in `.dynsym` and (if present) `.symtab`.
    pub bundled_allocator: Option<BundledAllocator>,
    /// The set-user-ID or set-group-ID mode bit is set on the file. Always
    /// `false` from [`inspect_elf_bytes`].
    pub setuid_or_setgid: bool,
    /// The libraries the file names in `DT_NEEDED`, in order (`libjemalloc.so.2`, …).
    pub needed: Vec<String>,
    /// The file carries a `.go.buildinfo` section: a Go program.
    pub go_buildinfo: bool,
}

/// Error returned by [`inspect_elf`] and [`inspect_elf_bytes`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ElfError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not an ELF file", path.display())]
    NotElf { path: PathBuf },
    #[error("{} is {size} bytes, more than the {limit}-byte limit", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("cannot parse ELF file {}: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
}

/// The file at `path`, opened as a regular file of at most [`MAX_ELF_SIZE`], and its metadata.
fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), ElfError> {
    let io_err = |source| ElfError::Io {
        path: path.to_path_buf(),
        source,
    };
    // The path may come from another process (its maps, its executable's link, resolved
    // in our mount namespace): never block on a FIFO, never take a terminal, and read
    // only a regular file.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io_err)?
    };
    // Mode bits and contents come from the same open file.
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(io_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a directory, a FIFO, a device or a socket)",
        )));
    }
    let too_large = |size| ElfError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit: MAX_ELF_SIZE,
    };
    if meta.len() > MAX_ELF_SIZE {
        return Err(too_large(meta.len()));
    }
    Ok((file, meta))
}

/// Inspect the ELF file at `path` (symlinks such as `/proc/PID/exe` are
/// followed). Files larger than [`MAX_ELF_SIZE`] are refused.
pub(crate) fn inspect_elf(path: &Path) -> Result<ElfFacts, ElfError> {
    let (file, meta) = open_regular(path)?;
    let bytes = read_sparse(&file, meta.len(), path)?;
    let mut facts = inspect(&bytes, path)?;
    facts.setuid_or_setgid = meta.permissions().mode() & 0o6000 != 0;
    Ok(facts)
}

/// The parts of an ELF file the parser reads, at their offsets in a buffer of the file's
/// length whose other bytes stay zero (untouched zero pages cost no memory): the headers,
/// every section but code, data and debug information (`SHT_PROGBITS`) and those that take
/// no room in the file, and the interpreter's and the dynamic segment's bytes; a file
/// without section headers has its loaded segments read whole.
///
/// Read, never mapped: the file may belong to another user (a library a watched process
/// maps, an executable's path in our mount namespace), who could truncate it while a
/// mapping is read — the kernel then kills the reader with SIGBUS, the exporter among them.
/// A file that shrinks while it is read is an error here.
fn read_sparse(file: &std::fs::File, len: u64, path: &Path) -> Result<Vec<u8>, ElfError> {
    use goblin::container::{Container, Ctx};
    use goblin::elf::program_header::{ProgramHeader, PT_DYNAMIC, PT_INTERP, PT_LOAD};
    use goblin::elf::section_header::{SectionHeader, SHT_NOBITS, SHT_PROGBITS};
    use std::os::unix::fs::FileExt;

    let parse_err = |reason: String| ElfError::Parse {
        path: path.to_path_buf(),
        reason,
    };
    let len = usize::try_from(len).map_err(|_| parse_err("larger than memory".into()))?;
    let mut buf = vec![0u8; len];
    let fill = |buf: &mut [u8], offset: u64, size: u64| -> Result<(), ElfError> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(len);
        let end = start
            .saturating_add(usize::try_from(size).unwrap_or(usize::MAX))
            .min(len);
        if start < end {
            file.read_exact_at(&mut buf[start..end], start as u64)
                .map_err(|e| ElfError::Io {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(
                        e.kind(),
                        format!("the file changed while it was read ({e})"),
                    ),
                })?;
        }
        Ok(())
    };
    fill(&mut buf, 0, 64)?;
    if !buf.starts_with(b"\x7fELF") {
        return Ok(buf);
    }
    let header = Elf::parse_header(&buf).map_err(|e| parse_err(e.to_string()))?;
    let container =
        if header.e_ident[goblin::elf::header::EI_CLASS] == goblin::elf::header::ELFCLASS64 {
            Container::Big
        } else {
            Container::Little
        };
    let endian = header.endianness().map_err(|e| parse_err(e.to_string()))?;
    let ctx = Ctx::new(container, endian);
    let ph_size = u64::from(header.e_phnum) * u64::from(header.e_phentsize);
    let sh_size = u64::from(header.e_shnum) * u64::from(header.e_shentsize);
    fill(&mut buf, header.e_phoff, ph_size)?;
    fill(&mut buf, header.e_shoff, sh_size)?;
    let programs =
        ProgramHeader::parse(&buf, header.e_phoff as usize, header.e_phnum as usize, ctx)
            .map_err(|e| parse_err(e.to_string()))?;
    let sections =
        SectionHeader::parse(&buf, header.e_shoff as usize, header.e_shnum as usize, ctx)
            .unwrap_or_default();
    let mut ranges: Vec<(u64, u64)> = programs
        .iter()
        .filter(|p| {
            p.p_type == PT_INTERP
                || p.p_type == PT_DYNAMIC
                || (sections.is_empty() && p.p_type == PT_LOAD)
        })
        .map(|p| (p.p_offset, p.p_filesz))
        .collect();
    ranges.extend(
        sections
            .iter()
            .filter(|s| s.sh_type != SHT_PROGBITS && s.sh_type != SHT_NOBITS)
            .map(|s| (s.sh_offset, s.sh_size)),
    );
    for (offset, size) in ranges {
        fill(&mut buf, offset, size)?;
    }
    Ok(buf)
}

/// Inspect an ELF image held in memory. `setuid_or_setgid` is `false`.
#[cfg(test)]
pub(crate) fn inspect_elf_bytes(bytes: &[u8]) -> Result<ElfFacts, ElfError> {
    inspect(bytes, Path::new(MEMORY_PATH))
}

/// Classify a shared library path by its file name: `libjemalloc*.so*` →
/// jemalloc, `libtcmalloc*.so*` → tcmalloc (including `_minimal` and
/// `_debug` variants), `libmimalloc*.so*` → mimalloc. A trailing
/// `" (deleted)"` from `/proc/PID/maps` is ignored.
pub(crate) fn allocator_of_library(path: &str) -> Option<BundledAllocator> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let name = path.rsplit('/').next().unwrap_or(path);
    let known = [
        ("libjemalloc", BundledAllocator::Jemalloc),
        ("libtcmalloc", BundledAllocator::Tcmalloc),
        ("libmimalloc", BundledAllocator::Mimalloc),
    ];
    known.into_iter().find_map(|(prefix, alloc)| {
        let rest = name.strip_prefix(prefix)?;
        has_so_component(rest).then_some(alloc)
    })
}

/// `.so` at the end or followed by `.` (`.so`, `.so.2`, `.so.4.5.10`).
fn has_so_component(s: &str) -> bool {
    s.match_indices(".so").any(|(pos, m)| {
        let after = &s[pos + m.len()..];
        after.is_empty() || after.starts_with('.')
    })
}

fn inspect(bytes: &[u8], path: &Path) -> Result<ElfFacts, ElfError> {
    if !bytes.starts_with(b"\x7fELF") {
        return Err(ElfError::NotElf {
            path: path.to_path_buf(),
        });
    }
    let elf = Elf::parse(bytes).map_err(|e| ElfError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;

    let linkage = match elf.interpreter {
        Some(interp) => Linkage::Dynamic {
            interpreter: interp.to_owned(),
        },
        None => Linkage::Static,
    };

    // A static (or static-pie) executable: no loader, no needed libraries.
    // Shared libraries also lack PT_INTERP, but they have DT_NEEDED (except
    // ld.so itself), and a hidden malloc in their .symtab must not count.
    let static_executable = linkage == Linkage::Static && elf.libraries.is_empty();

    let mut defines_malloc = defined_functions(&elf.dynsyms, &elf.dynstrtab)
        .any(|(sym, name)| name == "malloc" && is_global_or_weak(&sym));
    if !defines_malloc && static_executable {
        defines_malloc =
            defined_functions(&elf.syms, &elf.strtab).any(|(_, name)| name == "malloc");
    }

    let bundled_allocator = defined_functions(&elf.dynsyms, &elf.dynstrtab)
        .chain(defined_functions(&elf.syms, &elf.strtab))
        .filter_map(|(_, name)| allocator_signature(name))
        .min_by_key(|alloc| *alloc as u8);

    Ok(ElfFacts {
        linkage,
        defines_malloc,
        bundled_allocator,
        setuid_or_setgid: false,
        needed: elf.libraries.iter().map(|l| l.to_string()).collect(),
        go_buildinfo: elf
            .section_headers
            .iter()
            .any(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(".go.buildinfo")),
    })
}

fn is_global_or_weak(sym: &Sym) -> bool {
    matches!(sym.st_bind(), STB_GLOBAL | STB_WEAK)
}

/// Defined (`st_shndx != SHN_UNDEF`) function symbols with their names.
/// Symbols whose name offset is out of range are skipped.
fn defined_functions<'a>(
    syms: &'a Symtab<'a>,
    strtab: &'a Strtab<'a>,
) -> impl Iterator<Item = (Sym, &'a str)> + 'a {
    syms.iter().filter_map(move |sym| {
        let is_func = matches!(sym.st_type(), STT_FUNC | STT_GNU_IFUNC);
        if !is_func || sym.st_shndx == SHN_UNDEF as usize {
            return None;
        }
        let name = strtab.get_at(sym.st_name)?;
        Some((sym, name))
    })
}

/// Which allocator, if any, a defined function name is a signature of.
fn allocator_signature(name: &str) -> Option<BundledAllocator> {
    match name {
        // Debian's libjemalloc exports unprefixed mallctl*; builds with
        // --with-jemalloc-prefix=je_ and tikv-jemalloc-sys (_rjem_) prefix.
        "mallctl" | "mallctlnametomib" | "mallctlbymib" | "je_malloc" | "je_mallctl"
        | "_rjem_malloc" | "_rjem_mallctl" => Some(BundledAllocator::Jemalloc),
        "tc_malloc" | "tc_free" => Some(BundledAllocator::Tcmalloc),
        n if n.starts_with("MallocExtension_") => Some(BundledAllocator::Tcmalloc),
        "mi_malloc" | "mi_version" => Some(BundledAllocator::Mimalloc),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The facts from the parts read equal the facts from the whole file, for every
    /// executable and shared library of this machine's system directories (up to 400 files
    /// under 64 MiB): reading only headers, tables and symbols loses nothing the parser uses.
    #[test]
    fn reading_the_parts_gives_the_facts_of_the_whole_file() {
        let mut files = Vec::new();
        for dir in ["/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/sbin"] {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            names.sort();
            files.extend(names.into_iter().filter(|p| {
                std::fs::symlink_metadata(p)
                    .is_ok_and(|m| m.is_file() && m.len() < 64 << 20 && m.len() > 64)
            }));
        }
        let mut compared = 0;
        for p in files {
            let Ok(whole) = std::fs::read(&p) else {
                continue;
            };
            if !whole.starts_with(b"\x7fELF") {
                continue;
            }
            let from_whole = inspect(&whole, &p).map_err(|e| e.to_string());
            let from_parts = inspect_elf(&p)
                .map(|mut f| {
                    f.setuid_or_setgid = false;
                    f
                })
                .map_err(|e| e.to_string());
            assert_eq!(from_parts, from_whole, "{}", p.display());
            compared += 1;
            if compared == 400 {
                break;
            }
        }
        assert!(compared >= 50, "only {compared} ELF files compared");
    }

    /// A file cut short while it is read is an error, not a SIGBUS: memtrial reads another
    /// user's file, which that user may truncate at any moment (a mapping of it would kill
    /// the reader, the exporter among them).
    #[test]
    fn a_file_truncated_while_read_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("ls");
        std::fs::copy("/bin/ls", &copy).unwrap();
        let file = std::fs::File::open(&copy).unwrap();
        let len = file.metadata().unwrap().len();
        // The size was taken; the owner cuts the file before the parts are read.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&copy)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let err = read_sparse(&file, len, &copy).unwrap_err();
        assert!(
            err.to_string().contains("changed while it was read"),
            "{err}"
        );
    }
    use std::process::Command;
    use std::sync::OnceLock;

    /// A path another process named (its maps, its executable's link, read in our mount
    /// namespace) may be a FIFO or a device: refused at once, never a blocked open.
    #[test]
    fn a_fifo_or_a_device_is_not_read() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libjemalloc.so.2");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(inspect_elf(&fifo).map(|_| ()).map_err(|e| e.to_string()));
        });
        // A liveness bound, not a speed claim: before, the open never returned.
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("inspect_elf returned");
        assert!(r.unwrap_err().contains("not a regular file"));
        let e = inspect_elf(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

    /// Build the C fixtures once per test process; `None` (with a printed
    /// reason) when gcc is not available.
    fn fixtures() -> Option<&'static Path> {
        static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
        DIR.get_or_init(|| {
            let gcc = || Command::new("gcc").arg("--version").output().is_ok();
            if !crate::testing::require(
                "gcc to build the C fixtures",
                "apt-get install -y gcc",
                gcc,
            ) {
                return None;
            }
            // Next to the test binary (target/debug/deps), so nothing leaks into /tmp.
            let exe = std::env::current_exe().expect("current_exe");
            let out = exe
                .parent()
                .expect("test binary has a parent dir")
                .join("memtrial-c-fixtures");
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/c/build.sh");
            let result = Command::new("sh")
                .arg(&script)
                .arg(&out)
                .output()
                .expect("run build.sh");
            assert!(
                result.status.success(),
                "build.sh failed: {}",
                String::from_utf8_lossy(&result.stderr)
            );
            Some(out)
        })
        .as_deref()
    }

    /// A built fixture, or `None` with a printed reason.
    fn fixture(name: &str) -> Option<PathBuf> {
        let path = fixtures()?.join(name);
        let what = format!("the C fixture {name}");
        crate::testing::require(&what, "see tests/fixtures/c/build.sh's output", || {
            path.exists()
        })
        .then_some(path)
    }

    fn system_file(path: &str) -> Option<PathBuf> {
        let path = PathBuf::from(path);
        let what = path.display().to_string();
        crate::testing::require(&what, "scripts/setup-tests.sh installs it", || {
            path.exists()
        })
        .then_some(path)
    }

    fn facts(path: &Path) -> ElfFacts {
        inspect_elf(path).unwrap_or_else(|e| panic!("{e}"))
    }

    fn dynamic_ld() -> Linkage {
        Linkage::Dynamic {
            interpreter: "/lib64/ld-linux-x86-64.so.2".into(),
        }
    }

    /// A program with a `.go.buildinfo` section is a Go program, read from its parts;
    /// `ls` is not.
    #[test]
    fn a_go_buildinfo_section_marks_a_go_program() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("go.c");
        std::fs::write(
            &src,
            "__attribute__((section(\".go.buildinfo\"), used)) static const char info[32] = \"\\xff Go buildinf:\";\nint main(void) { return 0; }\n",
        )
        .unwrap();
        let exe = dir.path().join("go");
        let built = Command::new("gcc")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if !crate::testing::require("gcc", "scripts/setup.sh installs it", || built) {
            return;
        }
        assert!(facts(&exe).go_buildinfo);
        assert!(!facts(Path::new("/bin/ls")).go_buildinfo);
    }

    #[test]
    fn dynamic_fixture() {
        let Some(path) = fixture("alloc_loop_dyn") else {
            return;
        };
        let f = facts(&path);
        assert_eq!(f.linkage, dynamic_ld());
        assert!(!f.defines_malloc);
        assert_eq!(f.bundled_allocator, None);
        assert!(!f.setuid_or_setgid);
    }

    #[test]
    fn static_fixture() {
        let Some(path) = fixture("alloc_loop_static") else {
            return;
        };
        let f = facts(&path);
        assert_eq!(f.linkage, Linkage::Static);
        // Not stripped: glibc's malloc is in .symtab.
        assert!(f.defines_malloc);
        assert_eq!(f.bundled_allocator, None);
    }

    #[test]
    fn static_pie_fixture() {
        let Some(path) = fixture("alloc_loop_static_pie") else {
            return;
        };
        let f = facts(&path);
        // ET_DYN with PT_DYNAMIC but no PT_INTERP.
        assert_eq!(f.linkage, Linkage::Static);
        // malloc is a LOCAL symbol in a static-pie's .symtab; still counts.
        assert!(f.defines_malloc);
    }

    #[test]
    fn stripped_static_fixture_cannot_show_malloc() {
        let Some(path) = fixture("alloc_loop_static") else {
            return;
        };
        let stripped = path.with_file_name("alloc_loop_static_stripped");
        let ok = Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !crate::testing::require("strip", "apt-get install -y binutils", || ok) {
            return;
        }
        let f = facts(&stripped);
        assert_eq!(f.linkage, Linkage::Static);
        assert!(!f.defines_malloc);
    }

    #[test]
    fn own_malloc_fixture() {
        let Some(path) = fixture("own_malloc") else {
            return;
        };
        let f = facts(&path);
        assert_eq!(f.linkage, dynamic_ld());
        assert!(f.defines_malloc);
        assert_eq!(f.bundled_allocator, None);
    }

    #[test]
    fn setuid_bit_is_reported() {
        let Some(path) = fixture("alloc_loop_dyn") else {
            return;
        };
        let copy = path.with_file_name("alloc_loop_setuid");
        std::fs::copy(&path, &copy).expect("copy");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        assert!(facts(&copy).setuid_or_setgid);
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o2755)).expect("chmod");
        assert!(facts(&copy).setuid_or_setgid);
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(!facts(&copy).setuid_or_setgid);
    }

    #[test]
    fn system_allocator_libraries() {
        for (file, alloc) in [
            ("libjemalloc.so.2", BundledAllocator::Jemalloc),
            ("libtcmalloc_minimal.so.4", BundledAllocator::Tcmalloc),
            ("libmimalloc.so.2", BundledAllocator::Mimalloc),
        ] {
            let Some(path) = system_file(&format!("{LIBDIR}/{file}")) else {
                continue;
            };
            let f = facts(&path);
            assert_eq!(f.bundled_allocator, Some(alloc), "{file}");
            assert!(f.defines_malloc, "{file}");
            assert_eq!(
                f.linkage,
                Linkage::Static,
                "{file}: libraries have no PT_INTERP"
            );
            assert_eq!(allocator_of_library(&path.to_string_lossy()), Some(alloc));
        }
    }

    #[test]
    fn libc_defines_malloc_but_is_no_bundled_allocator() {
        let Some(path) = system_file(&format!("{LIBDIR}/libc.so.6")) else {
            return;
        };
        let f = facts(&path);
        assert!(f.defines_malloc);
        assert_eq!(f.bundled_allocator, None);
    }

    #[test]
    fn bin_ls() {
        let Some(path) = system_file("/bin/ls") else {
            return;
        };
        let f = facts(&path);
        assert_eq!(f.linkage, dynamic_ld());
        assert!(!f.defines_malloc);
        assert_eq!(f.bundled_allocator, None);
    }

    #[test]
    fn proc_self_exe_is_followed() {
        // The test binary itself: dynamically linked Rust, glibc malloc.
        let f = facts(Path::new("/proc/self/exe"));
        assert!(matches!(f.linkage, Linkage::Dynamic { .. }));
        assert!(!f.defines_malloc);
    }

    #[test]
    fn library_names() {
        use BundledAllocator::*;
        let cases = [
            ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", Some(Jemalloc)),
            ("/opt/lib/libjemalloc.so", Some(Jemalloc)),
            ("libtcmalloc_minimal.so.4.5.10", Some(Tcmalloc)),
            ("/usr/lib/libtcmalloc_minimal_debug.so.4", Some(Tcmalloc)),
            ("/usr/lib/libtcmalloc.so.4", Some(Tcmalloc)),
            (
                "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2.0",
                Some(Mimalloc),
            ),
            ("/tmp/pre/libmimalloc-secure.so.2 (deleted)", Some(Mimalloc)),
            ("/usr/lib/x86_64-linux-gnu/libc.so.6", None),
            ("/usr/lib/libjemalloc.a", None),
            ("/home/libjemalloc.so.2/libc.so.6", None),
            ("/usr/lib/mylibjemalloc.so", None),
            ("", None),
        ];
        for (path, want) in cases {
            assert_eq!(allocator_of_library(path), want, "{path}");
        }
    }

    #[test]
    fn signatures() {
        assert_eq!(
            allocator_signature("_rjem_malloc"),
            Some(BundledAllocator::Jemalloc)
        );
        assert_eq!(
            allocator_signature("je_mallctl"),
            Some(BundledAllocator::Jemalloc)
        );
        assert_eq!(
            allocator_signature("MallocExtension_GetNumericProperty"),
            Some(BundledAllocator::Tcmalloc)
        );
        assert_eq!(
            allocator_signature("mi_version"),
            Some(BundledAllocator::Mimalloc)
        );
        assert_eq!(allocator_signature("malloc"), None);
        assert_eq!(allocator_signature("mi_malloc_aligned"), None);
    }

    #[test]
    fn not_elf() {
        for bytes in [&b""[..], b"\x7fEL", b"#!/bin/sh\necho hi\n", &[0u8; 4096]] {
            assert!(
                matches!(inspect_elf_bytes(bytes), Err(ElfError::NotElf { .. })),
                "{bytes:?}"
            );
        }
        let err = inspect_elf(Path::new("/etc/passwd")).expect_err("text file");
        assert!(matches!(err, ElfError::NotElf { ref path } if path == Path::new("/etc/passwd")));
    }

    #[test]
    fn missing_file_is_io_error() {
        let err = inspect_elf(Path::new("/nonexistent/elfwork")).expect_err("missing");
        assert!(matches!(err, ElfError::Io { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/elfwork"), "{err}");
        let err = inspect_elf(Path::new("/tmp")).expect_err("directory");
        assert!(matches!(err, ElfError::Io { .. }), "{err}");
    }

    /// Deterministic xorshift so the garbage tests need no extra crate.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn garbage_with_elf_magic_does_not_panic() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for len in [4usize, 5, 16, 52, 63, 64, 65, 200, 4096, 65536] {
            for _ in 0..50 {
                let mut bytes: Vec<u8> = (0..len).map(|_| xorshift(&mut state) as u8).collect();
                bytes[..4].copy_from_slice(b"\x7fELF");
                // Result is irrelevant; it must return rather than panic.
                let _ = inspect_elf_bytes(&bytes);
            }
        }
    }

    #[test]
    fn truncated_and_corrupted_real_elf_does_not_panic() {
        let Some(path) = system_file("/bin/ls") else {
            return;
        };
        let bytes = std::fs::read(&path).expect("read /bin/ls");
        // Every prefix length of the headers region, then coarser steps.
        let mut cuts: Vec<usize> = (0..2048).collect();
        cuts.extend((2048..bytes.len()).step_by(509));
        for cut in cuts {
            let r = inspect_elf_bytes(&bytes[..cut]);
            if cut < 4 {
                assert!(matches!(r, Err(ElfError::NotElf { .. })));
            }
        }
        // /bin/ls keeps its section header table at the very end of the file:
        // losing its last byte must be reported, not ignored.
        let r = inspect_elf_bytes(&bytes[..bytes.len() - 1]);
        assert!(matches!(r, Err(ElfError::Parse { .. })), "{r:?}");

        // Random single-byte corruptions of the first 4 KiB.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..3000 {
            let mut copy = bytes.clone();
            let i = 4 + (xorshift(&mut state) as usize) % 4092;
            copy[i] = xorshift(&mut state) as u8;
            let _ = inspect_elf_bytes(&copy);
        }
    }

    #[test]
    fn truncated_file_on_disk_is_parse_error() {
        let Some(path) = system_file("/bin/ls") else {
            return;
        };
        let bytes = std::fs::read(&path).expect("read");
        let dir = std::env::temp_dir().join(format!("elfwork-trunc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let cut = dir.join("ls_cut");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
        let err = inspect_elf(&cut).expect_err("truncated");
        assert!(
            matches!(err, ElfError::Parse { ref path, .. } if *path == cut),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
