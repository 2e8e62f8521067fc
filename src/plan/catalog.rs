//! The built-in variant catalog and where each allocator library lives.

use std::path::{Path, PathBuf};
use std::process::Command;

/// An allocator shipped as a shared library that can be preloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LibAllocator {
    Jemalloc,
    Tcmalloc,
    Mimalloc,
}

impl LibAllocator {
    pub(crate) const ALL: [LibAllocator; 3] = [
        LibAllocator::Jemalloc,
        LibAllocator::Tcmalloc,
        LibAllocator::Mimalloc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LibAllocator::Jemalloc => "jemalloc",
            LibAllocator::Tcmalloc => "tcmalloc",
            LibAllocator::Mimalloc => "mimalloc",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Shared-object names to look for, most preferred first.
    pub(crate) fn sonames(self) -> &'static [&'static str] {
        match self {
            LibAllocator::Jemalloc => &["libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"],
            LibAllocator::Tcmalloc => &[
                "libtcmalloc_minimal.so.4",
                "libtcmalloc.so.4",
                "libtcmalloc_minimal.so.9",
                "libtcmalloc.so.9",
                "libtcmalloc_minimal.so",
                "libtcmalloc.so",
            ],
            LibAllocator::Mimalloc => &["libmimalloc.so.2", "libmimalloc.so.3", "libmimalloc.so"],
        }
    }

    /// The package that provides the library, per distribution family.
    pub fn install_hint(self, distro: Distro) -> String {
        let pkg = match (self, distro) {
            (LibAllocator::Jemalloc, Distro::Debian) => "libjemalloc2",
            (LibAllocator::Tcmalloc, Distro::Debian) => "libtcmalloc-minimal4",
            (LibAllocator::Mimalloc, Distro::Debian) => "libmimalloc2.0",
            (LibAllocator::Jemalloc, _) => "jemalloc",
            (LibAllocator::Tcmalloc, Distro::Fedora) => "gperftools-libs",
            (LibAllocator::Tcmalloc, _) => "gperftools",
            (LibAllocator::Mimalloc, _) => "mimalloc",
        };
        match distro {
            Distro::Debian => format!("apt-get install -y {pkg}"),
            Distro::Fedora => format!("dnf install -y {pkg}"),
            Distro::Alpine => format!("apk add {pkg}"),
            Distro::Other => format!("install your distribution's {pkg} package"),
        }
    }
}

/// A distribution family, for install hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distro {
    Debian,
    Fedora,
    Alpine,
    Other,
}

impl Distro {
    /// Reads `/etc/os-release` (`ID` and `ID_LIKE`).
    pub fn detect() -> Distro {
        let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        Self::from_os_release(&text)
    }

    pub(crate) fn from_os_release(text: &str) -> Distro {
        let mut ids = String::new();
        for line in text.lines() {
            if let Some(v) = line
                .strip_prefix("ID=")
                .or_else(|| line.strip_prefix("ID_LIKE="))
            {
                ids.push(' ');
                ids.push_str(v.trim_matches('"'));
            }
        }
        let has = |w: &str| ids.split_whitespace().any(|x| x == w);
        if has("debian") || has("ubuntu") {
            Distro::Debian
        } else if has("fedora") || has("rhel") || has("centos") {
            Distro::Fedora
        } else if has("alpine") {
            Distro::Alpine
        } else {
            Distro::Other
        }
    }
}

/// What a catalog variant does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    /// glibc malloc, unchanged.
    Glibc,
    /// glibc malloc with `MALLOC_ARENA_MAX=n`.
    ArenaMax(u32),
    /// A preloaded allocator library.
    Preload(LibAllocator),
    /// Knobs (and perhaps a preload), as the words of a variant spec: built like a custom
    /// variant of that spec.
    Knobs(&'static str),
}

/// One entry of the built-in catalog.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    pub name: &'static str,
    pub kind: CatalogKind,
    pub description: &'static str,
    /// What it needs on the machine.
    pub needs: &'static str,
    /// Run when no variants are named (the knobs run only when named).
    pub by_default: bool,
}

/// The built-in variants, in display order. The first is the default baseline.
pub const CATALOG: [CatalogEntry; 10] = [
    CatalogEntry {
        name: "glibc",
        kind: CatalogKind::Glibc,
        description: "glibc malloc as it is (default baseline)",
        needs: "nothing",
        by_default: true,
    },
    CatalogEntry {
        name: "arena1",
        kind: CatalogKind::ArenaMax(1),
        description: "glibc malloc with MALLOC_ARENA_MAX=1",
        needs: "glibc",
        by_default: true,
    },
    CatalogEntry {
        name: "arena2",
        kind: CatalogKind::ArenaMax(2),
        description: "glibc malloc with MALLOC_ARENA_MAX=2",
        needs: "glibc",
        by_default: true,
    },
    CatalogEntry {
        name: "jemalloc",
        kind: CatalogKind::Preload(LibAllocator::Jemalloc),
        description: "jemalloc by LD_PRELOAD",
        needs: "libjemalloc",
        by_default: true,
    },
    CatalogEntry {
        name: "tcmalloc",
        kind: CatalogKind::Preload(LibAllocator::Tcmalloc),
        description: "gperftools tcmalloc by LD_PRELOAD",
        needs: "libtcmalloc",
        by_default: true,
    },
    CatalogEntry {
        name: "mimalloc",
        kind: CatalogKind::Preload(LibAllocator::Mimalloc),
        description: "mimalloc by LD_PRELOAD",
        needs: "libmimalloc",
        by_default: true,
    },
    CatalogEntry {
        name: "nothp",
        kind: CatalogKind::Knobs("thp:off"),
        description: "glibc malloc, THP off for the process (thp:off)",
        needs: "a kernel with THP; 5.0+ to verify",
        by_default: false,
    },
    CatalogEntry {
        name: "glibc-thp",
        kind: CatalogKind::Knobs("thp:heap"),
        description: "glibc malloc, huge pages for its heaps (thp:heap)",
        needs: "glibc 2.35+, THP madvise; libc6-dbg to verify",
        by_default: false,
    },
    CatalogEntry {
        name: "jemalloc-thp",
        kind: CatalogKind::Knobs("preload:jemalloc thp:heap"),
        description: "jemalloc, huge pages for its heap (thp:heap)",
        needs: "libjemalloc 5.1+, THP madvise or always",
        by_default: false,
    },
    CatalogEntry {
        name: "trim",
        kind: CatalogKind::Knobs("trim:1s"),
        description: "glibc malloc, malloc_trim(0) every second (trim:1s)",
        needs: "glibc malloc, a dynamic program",
        by_default: false,
    },
];

pub(crate) fn catalog_entry(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.name == name)
}

pub(crate) fn catalog_names() -> Vec<&'static str> {
    CATALOG.iter().map(|e| e.name).collect()
}

/// Finds allocator libraries: the dynamic linker cache first, then the usual
/// Debian/Ubuntu, Fedora and Alpine directories.
#[derive(Debug, Clone, Default)]
pub struct LibraryLocator {
    /// soname → path, from `ldconfig -p`.
    cache: Vec<(String, PathBuf)>,
    /// Directories searched after the cache.
    dirs: Vec<PathBuf>,
    /// A directory searched before the cache.
    first: Option<PathBuf>,
}

const SEARCH_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
];

impl LibraryLocator {
    /// Reads the linker cache (`ldconfig -p`); works without it too.
    pub fn new() -> Self {
        let output = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
            .iter()
            .find_map(|p| Command::new(p).arg("-p").output().ok());
        let cache = match output {
            Some(out) if out.status.success() => {
                parse_ldconfig_cache(&String::from_utf8_lossy(&out.stdout))
            }
            _ => Vec::new(),
        };
        LibraryLocator {
            cache,
            dirs: SEARCH_DIRS.iter().map(PathBuf::from).collect(),
            first: None,
        }
    }

    /// A locator that looks only in `dirs` (no linker cache): for tests.
    pub fn in_dirs(dirs: Vec<PathBuf>) -> Self {
        LibraryLocator {
            cache: Vec::new(),
            dirs,
            first: None,
        }
    }

    /// Looks in `dir` before anywhere else (`MEMTRIAL_LIB_DIR` in a pod: the catalog's
    /// libraries copied there by `memtrial kube`'s init container).
    pub fn preferring(mut self, dir: PathBuf) -> Self {
        self.first = Some(dir);
        self
    }

    /// The path of the allocator library, if installed.
    pub fn locate(&self, lib: LibAllocator) -> Option<PathBuf> {
        if let Some(dir) = &self.first {
            if let Some(p) = lib
                .sonames()
                .iter()
                .map(|s| dir.join(s))
                .find(|p| p.exists())
            {
                return Some(p);
            }
        }
        for soname in lib.sonames() {
            if let Some((_, p)) = self
                .cache
                .iter()
                .find(|(n, p)| n == soname && is_native_lib(p))
            {
                if p.exists() {
                    return Some(prefer_usr(p));
                }
            }
            for dir in &self.dirs {
                let p = dir.join(soname);
                if p.exists() {
                    return Some(p);
                }
            }
        }
        None
    }
}

/// On merged-/usr systems the linker cache names `/lib/...`; the `/usr/lib/...` name of the
/// same file is the one that also holds in containers without the `/lib` symlink.
fn prefer_usr(p: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    if let Ok(rest) = p.strip_prefix("/lib") {
        let usr = Path::new("/usr/lib").join(rest);
        if let (Ok(a), Ok(b)) = (std::fs::metadata(p), std::fs::metadata(&usr)) {
            if a.ino() == b.ino() && a.dev() == b.dev() {
                return usr;
            }
        }
    }
    p.to_path_buf()
}

fn is_native_lib(p: &Path) -> bool {
    // ldconfig -p also lists 32-bit libraries (libc6,x32 or i386 dirs); prefer the native ones.
    let s = p.to_string_lossy();
    !(s.contains("/lib32/") || s.contains("/libx32/") || s.contains("i386-linux-gnu"))
}

/// Parses `ldconfig -p` output lines such as
/// `\tlibjemalloc.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libjemalloc.so.2`.
pub(crate) fn parse_ldconfig_cache(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter_map(|line| {
            let (left, path) = line.split_once("=>")?;
            let soname = left.split_whitespace().next()?;
            Some((soname.to_string(), PathBuf::from(path.trim())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preferred_directory_is_searched_first() {
        let first = tempfile::tempdir().unwrap();
        let later = tempfile::tempdir().unwrap();
        std::fs::write(later.path().join("libjemalloc.so.2"), b"").unwrap();
        let l = LibraryLocator::in_dirs(vec![later.path().to_path_buf()]);
        assert_eq!(
            l.locate(LibAllocator::Jemalloc),
            Some(later.path().join("libjemalloc.so.2"))
        );
        // A library the preferred directory lacks is still found elsewhere.
        let l = l.preferring(first.path().to_path_buf());
        assert_eq!(
            l.locate(LibAllocator::Jemalloc),
            Some(later.path().join("libjemalloc.so.2"))
        );
        std::fs::write(first.path().join("libjemalloc.so.2"), b"").unwrap();
        assert_eq!(
            l.locate(LibAllocator::Jemalloc),
            Some(first.path().join("libjemalloc.so.2"))
        );
        assert_eq!(l.locate(LibAllocator::Mimalloc), None);
    }

    #[test]
    fn parses_ldconfig_lines() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibjemalloc.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libjemalloc.so.2\n\
            \tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n";
        let v = parse_ldconfig_cache(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].0, "libjemalloc.so.2");
        assert_eq!(
            v[0].1,
            PathBuf::from("/lib/x86_64-linux-gnu/libjemalloc.so.2")
        );
    }

    #[test]
    fn distro_from_os_release() {
        assert_eq!(
            Distro::from_os_release("ID=debian\nVERSION_ID=\"12\"\n"),
            Distro::Debian
        );
        assert_eq!(
            Distro::from_os_release("ID=ubuntu\nID_LIKE=debian\n"),
            Distro::Debian
        );
        assert_eq!(
            Distro::from_os_release("ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n"),
            Distro::Fedora
        );
        assert_eq!(Distro::from_os_release("ID=alpine\n"), Distro::Alpine);
        assert_eq!(Distro::from_os_release(""), Distro::Other);
    }

    #[test]
    fn install_hints_name_the_package() {
        assert_eq!(
            LibAllocator::Jemalloc.install_hint(Distro::Debian),
            "apt-get install -y libjemalloc2"
        );
        assert!(LibAllocator::Mimalloc
            .install_hint(Distro::Alpine)
            .contains("mimalloc"));
    }

    #[test]
    fn catalog_baseline_first() {
        assert_eq!(CATALOG[0].name, "glibc");
        assert!(catalog_entry("arena2").is_some());
        assert!(catalog_entry("nope").is_none());
    }
}
