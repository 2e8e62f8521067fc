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
    /// A shared library that is mapped and that neither the executable nor the libraries
    /// it needs name in `DT_NEEDED`: preloaded (or opened at run time).
    SharedLibrary,
    /// A shared library the executable, or a library it needs, names in `DT_NEEDED`: the
    /// program is built with it (`-ljemalloc`, Fullstaq Ruby, `ruby --with-jemalloc`).
    Linked,
    /// Several allocator libraries are mapped at once: all of them, the first answers.
    Several(Vec<AllocatorName>),
    /// Linked into the executable, which defines `malloc`.
    InExecutable,
    /// A statically linked executable (`LD_PRELOAD` cannot reach it).
    Static,
}

/// The allocator of a process, with how it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Detected {
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
            (How::Linked, _) => write!(f, "{name} (linked)"),
            (How::Libc | How::SharedLibrary, _) => f.write_str(name),
        }
    }
}

/// An allocator library a program is built with: named in `DT_NEEDED` of the executable
/// or of a library the executable needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkedAllocator {
    pub name: AllocatorName,
    /// The library's name as `DT_NEEDED` gives it (`libjemalloc.so.2`).
    pub library: String,
    /// Who needs it: `None` for the executable, else the library's name (`libruby.so.3.1`).
    pub via: Option<String>,
}

impl fmt::Display for LinkedAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.via {
            None => write!(f, "{}, DT_NEEDED of the executable", self.library),
            Some(v) => write!(
                f,
                "{}, DT_NEEDED of {v}, which the executable needs",
                self.library
            ),
        }
    }
}

/// Libraries every program needs that never bring an allocator: not worth parsing.
fn is_system_runtime(name: &str) -> bool {
    [
        "libc.so",
        "ld-linux",
        "libm.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "libgcc_s.so",
        "libstdc++.so",
        "libz.so",
        "libcrypt.so",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// The allocator libraries a program is built with: the executable's `DT_NEEDED`, and one
/// level down, the `DT_NEEDED` of each library it needs (found among `libs`, the mapped
/// libraries, by file name; read through `needed_of`). A library that is only preloaded
/// is in neither.
pub(crate) fn linked_allocators(
    exe: &elf::ElfFacts,
    libs: &[String],
    needed_of: &mut dyn FnMut(&str) -> Vec<String>,
) -> Vec<LinkedAllocator> {
    let mut out: Vec<LinkedAllocator> = Vec::new();
    let mut add = |library: &str, via: Option<&str>| {
        if let Some(b) = elf::allocator_of_library(library) {
            let name = AllocatorName::from(b);
            if !out.iter().any(|l| l.name == name) {
                out.push(LinkedAllocator {
                    name,
                    library: library.to_string(),
                    via: via.map(String::from),
                });
            }
        }
    };
    for n in &exe.needed {
        add(n, None);
    }
    for n in &exe.needed {
        if elf::allocator_of_library(n).is_some() || is_system_runtime(n) {
            continue;
        }
        let Some(path) = libs.iter().find(|l| file_name(l) == n.as_str()) else {
            continue;
        };
        for m in needed_of(path) {
            add(&m, Some(n));
        }
    }
    out
}

fn file_name(p: &str) -> &str {
    let p = p.strip_suffix(" (deleted)").unwrap_or(p);
    p.rsplit('/').next().unwrap_or(p)
}

/// The `DT_NEEDED` names of a library on disk; empty when it cannot be read.
pub(crate) fn needed_of_file(path: &str) -> Vec<String> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    elf::inspect_elf(std::path::Path::new(path))
        .map(|f| f.needed)
        .unwrap_or_default()
}

/// The allocator that answers `malloc` in a process, from its mapped libraries, its
/// executable's ELF facts and the allocators it is built with ([`linked_allocators`]).
pub(crate) fn detect_allocator(
    libs: &[String],
    exe: Option<&elf::ElfFacts>,
    linked: &[LinkedAllocator],
) -> Detected {
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
    let is_linked = |n: &AllocatorName| linked.iter().any(|l| l.name == *n);
    let mut found: Vec<AllocatorName> = Vec::new();
    for l in libs {
        if let Some(b) = elf::allocator_of_library(l) {
            let n = AllocatorName::from(b);
            if !found.contains(&n) {
                found.push(n);
            }
        }
    }
    // A preloaded library comes before the program's own in symbol lookup: it answers.
    found.sort_by_key(is_linked);
    match found.as_slice() {
        [] => Detected {
            name: AllocatorName::Glibc,
            how: How::Libc,
        },
        [one] => Detected {
            name: *one,
            how: if is_linked(one) {
                How::Linked
            } else {
                How::SharedLibrary
            },
        },
        [first, ..] => Detected {
            name: *first,
            how: How::Several(found.clone()),
        },
    }
}

/// What preloading `preloaded` into a program built with `linked` does, when it is
/// worth a word: `None` when the program links no allocator.
pub(crate) fn preload_over_linked(preloaded: &str, linked: &[LinkedAllocator]) -> Option<String> {
    let first = linked.first()?;
    let pre_name = file_name(preloaded);
    let pre = elf::allocator_of_library(pre_name).map(AllocatorName::from);
    let built = format!(
        "the program is built with {} ({first})",
        first.name.as_str()
    );
    Some(match pre {
        Some(p) if p == first.name => format!(
            "{built}: preloading {pre_name} adds nothing, {} answers malloc either way",
            p.as_str()
        ),
        Some(p) => format!(
            "{built}: the preloaded {} comes first in symbol lookup and answers malloc; {} stays mapped",
            p.as_str(),
            first.name.as_str()
        ),
        None => format!(
            "{built}: the preloaded {pre_name} comes first in symbol lookup; if it defines malloc, it answers"
        ),
    })
}

/// jemalloc's arenas in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JemallocArenas {
    pub count: u64,
    /// How the count is known.
    pub source: JemallocArenasSource,
}

/// Where a jemalloc process's arena count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JemallocArenasSource {
    /// jemalloc's own `arenas.narenas`, from memtrial's probe in the process.
    Probe,
    /// `narenas:N` in its `MALLOC_CONF`.
    Setting,
    /// jemalloc's default: 4 per CPU it sees (its affinity mask).
    Default,
}

impl JemallocArenasSource {
    pub fn as_str(self) -> &'static str {
        match self {
            JemallocArenasSource::Probe => "probe",
            JemallocArenasSource::Setting => "setting",
            JemallocArenasSource::Default => "default",
        }
    }
}

/// The arenas of a jemalloc process: the count memtrial's probe read in it (`probe`), else
/// its `MALLOC_CONF`'s `narenas`, else jemalloc's default for the CPUs it sees.
pub(crate) fn jemalloc_arenas(
    probe: Option<u64>,
    env: &[(String, String)],
    visible_cpus: u32,
) -> JemallocArenas {
    if let Some(n) = probe {
        return JemallocArenas {
            count: n,
            source: JemallocArenasSource::Probe,
        };
    }
    let set = env
        .iter()
        .filter(|(k, _)| k == "MALLOC_CONF" || k == "JE_MALLOC_CONF")
        .flat_map(|(_, v)| v.split(','))
        .filter_map(|o| o.strip_prefix("narenas:")?.parse::<u64>().ok())
        .next_back();
    match set {
        Some(n) => JemallocArenas {
            count: n,
            source: JemallocArenasSource::Setting,
        },
        None => JemallocArenas {
            count: 4 * u64::from(visible_cpus.max(1)),
            source: JemallocArenasSource::Default,
        },
    }
}

/// The arenas jemalloc would make if it sized them for a CPU quota of `quota` CPUs: its
/// own rule (4 per CPU) on the quota rounded up, at least 4.
pub(crate) fn jemalloc_arenas_for(quota: f64) -> u64 {
    if !quota.is_finite() || quota <= 0.0 {
        return 4;
    }
    4 * (quota.ceil() as u64).max(1)
}

/// jemalloc's arena pitfall: `narenas` (4 per CPU it sees: the host's, or the affinity
/// mask's) at least twice what the CPUs the process may use warrant ([`jemalloc_arenas_for`]
/// the quota, or the cpuset's CPUs). Without a quota or cpuset below the CPUs it sees,
/// there is none.
pub(crate) fn jemalloc_arena_pitfall(narenas: u64, usable_cpus: Option<f64>) -> Option<u64> {
    let q = usable_cpus.filter(|q| q.is_finite() && *q > 0.0)?;
    let warranted = jemalloc_arenas_for(q);
    (narenas >= 2 * warranted).then_some(warranted)
}

/// The start of the experiment note that names each preloaded allocator library by its
/// content ([`library_facts_note`]); `memtrial gate --against` compares two hosts' notes.
pub const LIBRARY_FACTS: &str = "allocator libraries (by content, to compare hosts): ";

/// The largest library file hashed (a shared library is a few MiB at most).
const MAX_LIBRARY_BYTES: u64 = 256 << 20;

/// Each library's path and `sha256:` of its content (the first 16 hex digits); a file
/// that cannot be read is named with why.
pub fn library_facts(paths: &[std::path::PathBuf]) -> Vec<(String, String)> {
    use std::io::Read;
    let mut out: Vec<(String, String)> = Vec::new();
    for p in paths {
        let shown = p.display().to_string();
        if out.iter().any(|(q, _)| *q == shown) {
            continue;
        }
        let mut bytes = Vec::new();
        let read =
            std::fs::File::open(p).and_then(|f| f.take(MAX_LIBRARY_BYTES).read_to_end(&mut bytes));
        let fact = match read {
            Ok(_) => format!("sha256:{}", &crate::units::sha256_hex(&bytes)[..16]),
            Err(e) => format!("unreadable ({e})"),
        };
        out.push((shown, fact));
    }
    out
}

/// The note recording [`library_facts`]: `LIBRARY_FACTS` then `PATH = FACT` joined by `; `.
pub fn library_facts_note(facts: &[(String, String)]) -> String {
    let list: Vec<String> = facts.iter().map(|(p, f)| format!("{p} = {f}")).collect();
    format!("{LIBRARY_FACTS}{}", list.join("; "))
}

/// The libraries named by a [`library_facts_note`] among `notes`, path to fact.
pub fn library_facts_of(notes: &[String]) -> std::collections::BTreeMap<String, String> {
    notes
        .iter()
        .filter_map(|n| n.strip_prefix(LIBRARY_FACTS))
        .flat_map(|rest| rest.split("; "))
        .filter_map(|item| {
            let (p, f) = item.rsplit_once(" = ")?;
            Some((p.to_string(), f.to_string()))
        })
        .collect()
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
            needed: vec![],
            go_buildinfo: false,
        };
        assert_eq!(
            detect_allocator(&[], Some(&f), &[]).to_string(),
            "glibc (static executable)"
        );
        let dynamic = elf::ElfFacts {
            linkage: Linkage::Dynamic {
                interpreter: "/lib64/ld-linux-x86-64.so.2".into(),
            },
            ..f
        };
        assert_eq!(
            detect_allocator(&[], Some(&dynamic), &[]).to_string(),
            "custom (the executable defines malloc)"
        );
    }

    fn dynamic(needed: &[&str]) -> elf::ElfFacts {
        elf::ElfFacts {
            linkage: Linkage::Dynamic {
                interpreter: "/lib64/ld-linux-x86-64.so.2".into(),
            },
            defines_malloc: false,
            bundled_allocator: None,
            setuid_or_setgid: false,
            needed: needed.iter().map(|s| s.to_string()).collect(),
            go_buildinfo: false,
        }
    }

    /// Mapped libraries of `cc -ljemalloc` and of a Ruby whose libruby needs jemalloc,
    /// as /proc/PID/maps lists them.
    const JE: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    const LIBRUBY: &str = "/opt/ruby/lib/libruby.so.3.3";

    #[test]
    fn an_allocator_the_executable_needs_is_linked() {
        let exe = dynamic(&["libjemalloc.so.2", "libc.so.6"]);
        let libs = vec![JE.to_string(), LIBC.to_string()];
        let linked = linked_allocators(&exe, &libs, &mut |_| panic!("nothing to read"));
        assert_eq!(linked.len(), 1);
        assert_eq!(
            linked[0].to_string(),
            "libjemalloc.so.2, DT_NEEDED of the executable"
        );
        let d = detect_allocator(&libs, Some(&exe), &linked);
        assert_eq!(d.how, How::Linked);
        assert_eq!(d.to_string(), "jemalloc (linked)");
        // The same library, preloaded into a plain program: not linked.
        let plain = dynamic(&["libc.so.6"]);
        let linked = linked_allocators(&plain, &libs, &mut |_| vec![]);
        assert!(linked.is_empty());
        assert_eq!(
            detect_allocator(&libs, Some(&plain), &linked).to_string(),
            "jemalloc"
        );
    }

    #[test]
    fn an_allocator_a_needed_library_needs_is_linked() {
        let exe = dynamic(&["libruby.so.3.3", "libc.so.6"]);
        let libs = vec![LIBRUBY.to_string(), JE.to_string(), LIBC.to_string()];
        let mut asked = Vec::new();
        let linked = linked_allocators(&exe, &libs, &mut |p| {
            asked.push(p.to_string());
            vec!["libjemalloc.so.2".into(), "libc.so.6".into()]
        });
        assert_eq!(asked, vec![LIBRUBY.to_string()], "libc is not read");
        assert_eq!(
            linked[0].to_string(),
            "libjemalloc.so.2, DT_NEEDED of libruby.so.3.3, which the executable needs"
        );
        assert_eq!(
            detect_allocator(&libs, Some(&exe), &linked).to_string(),
            "jemalloc (linked)"
        );
    }

    #[test]
    fn a_preload_over_a_linked_allocator_answers_and_is_named() {
        let exe = dynamic(&["libjemalloc.so.2", "libc.so.6"]);
        let tc = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";
        let libs = vec![JE.to_string(), tc.to_string(), LIBC.to_string()];
        let linked = linked_allocators(&exe, &libs, &mut |_| vec![]);
        let d = detect_allocator(&libs, Some(&exe), &linked);
        assert_eq!(d.name, AllocatorName::Tcmalloc, "the preload answers");
        assert_eq!(
            d.to_string(),
            "tcmalloc+jemalloc (several allocators mapped)"
        );
        let note = preload_over_linked(tc, &linked).unwrap();
        assert!(
            note.contains("the preloaded tcmalloc comes first"),
            "{note}"
        );
        let same = preload_over_linked(JE, &linked).unwrap();
        assert!(
            same.contains("adds nothing, jemalloc answers malloc either way"),
            "{same}"
        );
        assert_eq!(preload_over_linked(JE, &[]), None);
    }
}
