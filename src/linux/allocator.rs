//! Which allocator answers `malloc` in a process, and how it got there: one home for
//! `run`'s verification and `inspect`.

use std::fmt;

use crate::linux::elf::{self, BundledAllocator, Linkage};

/// An allocator memtrial can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocatorName {
    Glibc,
    Jemalloc,
    Tcmalloc,
    Mimalloc,
    /// The executable defines `malloc` itself and it is none memtrial knows.
    Custom,
}

impl AllocatorName {
    pub fn as_str(self) -> &'static str {
        match self {
            AllocatorName::Glibc => "glibc",
            AllocatorName::Jemalloc => "jemalloc",
            AllocatorName::Tcmalloc => "tcmalloc",
            AllocatorName::Mimalloc => "mimalloc",
            AllocatorName::Custom => "custom",
        }
    }
}

impl From<BundledAllocator> for AllocatorName {
    fn from(b: BundledAllocator) -> Self {
        match b {
            BundledAllocator::Jemalloc => AllocatorName::Jemalloc,
            BundledAllocator::Tcmalloc => AllocatorName::Tcmalloc,
            BundledAllocator::Mimalloc => AllocatorName::Mimalloc,
        }
    }
}

/// How the allocator got into the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// glibc's own malloc in a dynamically linked program.
    Libc,
    /// A shared library that is mapped (preloaded or linked as a dependency).
    SharedLibrary,
    /// Several allocator libraries are mapped at once: all of them, the first answers.
    Several(Vec<AllocatorName>),
    /// Linked into the executable, which defines `malloc`.
    InExecutable,
    /// A statically linked executable (`LD_PRELOAD` cannot reach it).
    Static,
}

/// The allocator of a process, with how it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub name: AllocatorName,
    pub how: How,
}

impl fmt::Display for Detected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name.as_str();
        match (&self.how, self.name) {
            (How::Static, _) => write!(f, "{name} (static executable)"),
            (How::InExecutable, AllocatorName::Custom) => {
                f.write_str("custom (the executable defines malloc)")
            }
            (How::InExecutable, _) => write!(f, "{name} (linked into the executable)"),
            (How::Several(all), _) => {
                let names: Vec<&str> = all.iter().map(|a| a.as_str()).collect();
                write!(f, "{} (several allocators mapped)", names.join("+"))
            }
            (How::Libc | How::SharedLibrary, _) => f.write_str(name),
        }
    }
}

/// The allocator that answers `malloc` in a process, from its mapped libraries and its
/// executable's ELF facts.
pub fn detect_allocator(libs: &[String], exe: Option<&elf::ElfFacts>) -> Detected {
    if let Some(f) = exe {
        // Static first: a static executable's .symtab always defines malloc (glibc's
        // own, linked in), so `defines_malloc` cannot tell a custom one apart there.
        if let Linkage::Static = f.linkage {
            return Detected {
                name: f.bundled_allocator.map_or(AllocatorName::Glibc, Into::into),
                how: How::Static,
            };
        }
        if f.defines_malloc {
            return Detected {
                name: f
                    .bundled_allocator
                    .map_or(AllocatorName::Custom, Into::into),
                how: How::InExecutable,
            };
        }
    }
    let mut found: Vec<AllocatorName> = Vec::new();
    for l in libs {
        if let Some(b) = elf::allocator_of_library(l) {
            let n = AllocatorName::from(b);
            if !found.contains(&n) {
                found.push(n);
            }
        }
    }
    match found.as_slice() {
        [] => Detected {
            name: AllocatorName::Glibc,
            how: How::Libc,
        },
        [one] => Detected {
            name: *one,
            how: How::SharedLibrary,
        },
        [first, ..] => Detected {
            name: *first,
            how: How::Several(found.clone()),
        },
    }
}

#[cfg(test)]
mod detect_tests {
    use super::*;

    #[test]
    fn static_executable_defining_malloc_is_static_glibc() {
        let f = elf::ElfFacts {
            linkage: Linkage::Static,
            defines_malloc: true,
            bundled_allocator: None,
            setuid_or_setgid: false,
        };
        assert_eq!(
            detect_allocator(&[], Some(&f)).to_string(),
            "glibc (static executable)"
        );
        let dynamic = elf::ElfFacts {
            linkage: Linkage::Dynamic {
                interpreter: "/lib64/ld-linux-x86-64.so.2".into(),
            },
            ..f
        };
        assert_eq!(
            detect_allocator(&[], Some(&dynamic)).to_string(),
            "custom (the executable defines malloc)"
        );
    }
}
