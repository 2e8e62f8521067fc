//! Facts read from the executable and the environment: which allocator is in use and how,
//! the runtime (Go, JVM, Ruby, Python …) and its memory settings.

use crate::linux::allocator::{detect_allocator, linked_allocators, needed_of_file};
use crate::linux::elf::{self, Linkage};

use super::*;

pub(super) const SETTINGS_PREFIXES: [&str; 12] = [
    "MALLOC_",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
    "TCMALLOC_",
    "MIMALLOC_",
    "PYTHONMALLOC",
    "RUBY_YJIT",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "GOGC",
    "GOMEMLIMIT",
    "NODE_OPTIONS",
];
/// What the executable says (its allocator, whether it is a Go program), read once.
pub(super) fn exe_elf_facts(pid: i32, link_target: Option<&str>) -> Result<elf::ElfFacts, String> {
    let path = crate::linux::proc::exe_file(pid, link_target);
    elf::inspect_elf(&path).map_err(|e| e.to_string())
}
pub(super) fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}
pub(super) fn allocator_facts(
    libs: &[String],
    f: Option<&elf::ElfFacts>,
    env: &[(String, String)],
) -> Allocator {
    let linked = f.map_or_else(Vec::new, |f| {
        linked_allocators(f, libs, &mut |p| needed_of_file(p))
    });
    let name = detect_allocator(libs, f, &linked).to_string();
    let mut evidence = Vec::new();
    if let Some(f) = f {
        match &f.linkage {
            Linkage::Static => evidence.push(
                "the executable is statically linked (no PT_INTERP): the dynamic loader never runs"
                    .into(),
            ),
            Linkage::Dynamic { interpreter } => {
                evidence.push(format!("dynamically linked (interpreter {interpreter})"))
            }
        }
        if f.defines_malloc {
            evidence.push("the executable defines malloc itself".into());
        }
        if let Some(b) = f.bundled_allocator {
            evidence.push(format!("allocator symbols in the executable: {b:?}").to_lowercase());
        }
    }
    let alloc_libs: Vec<&String> = libs
        .iter()
        .filter(|l| elf::allocator_of_library(l).is_some())
        .collect();
    for l in &alloc_libs {
        evidence.push(format!("{} is mapped", l));
    }
    if alloc_libs.is_empty() {
        if let Some(libc) = libs.iter().find(|l| glibc::is_libc(l)) {
            evidence.push(format!(
                "no other allocator library is mapped; malloc comes from glibc's {libc}"
            ));
        }
    }
    let ld_preload = env
        .iter()
        .find(|(k, _)| k == "LD_PRELOAD")
        .map(|(_, v)| v.clone());
    for l in &linked {
        evidence.push(format!(
            "the program is built with {}: {l}",
            l.name.as_str()
        ));
    }
    if let Some(pre) = &ld_preload {
        evidence.push(format!("LD_PRELOAD={pre} in the initial environment"));
        let over = pre
            .split([' ', ':'])
            .filter(|s| elf::allocator_of_library(s).is_some())
            .find_map(|s| crate::linux::allocator::preload_over_linked(s, &linked));
        evidence.extend(over);
    }
    let preload_alloc = ld_preload.as_deref().and_then(|pre| {
        pre.split([' ', ':'])
            .filter(|s| !s.is_empty())
            .find_map(elf::allocator_of_library)
    });
    let preload_ignored = match (preload_alloc, f) {
        (Some(_), Some(f)) if f.linkage == Linkage::Static => Some(
            "LD_PRELOAD names an allocator, but a static executable ignores LD_PRELOAD".to_string(),
        ),
        (Some(_), Some(f)) if f.defines_malloc => Some(
            "LD_PRELOAD names an allocator, but the executable's own malloc comes first in symbol lookup"
                .to_string(),
        ),
        (Some(b), _) if !libs.iter().any(|l| elf::allocator_of_library(l) == Some(b)) => Some(
            "LD_PRELOAD names an allocator that is not mapped (setuid program, or a wrong path?)"
                .to_string(),
        ),
        _ => None,
    };
    let settings = env
        .iter()
        .filter(|(k, _)| SETTINGS_PREFIXES.iter().any(|p| k.starts_with(p)))
        .cloned()
        .collect();
    Allocator {
        name,
        evidence,
        linkage: f.map(|f| match f.linkage {
            Linkage::Static => "static".into(),
            Linkage::Dynamic { .. } => "dynamic".into(),
        }),
        defines_malloc: f.map(|f| f.defines_malloc),
        ld_preload,
        preload_ignored,
        settings,
    }
}
pub(super) fn runtime_hints(
    libs: &[String],
    exe: Option<&str>,
    cmdline: &[String],
    facts: Option<&elf::ElfFacts>,
) -> Vec<RuntimeHint> {
    let mut out: Vec<RuntimeHint> = Vec::new();
    let mut add = |runtime: Runtime, evidence: String| {
        if !out.iter().any(|h| h.runtime == runtime) {
            out.push(RuntimeHint { runtime, evidence });
        }
    };
    for l in libs {
        let n = file_name(l);
        let rt = if n.starts_with("libruby") {
            Some(Runtime::Ruby)
        } else if n.starts_with("libpython") {
            Some(Runtime::Python)
        } else if n == "libjvm.so" {
            Some(Runtime::Jvm)
        } else if n.starts_with("libnode.so") {
            Some(Runtime::Node)
        } else if n.starts_with("libperl.so") {
            Some(Runtime::Perl)
        } else {
            None
        };
        if let Some(rt) = rt {
            add(rt, format!("{n} is mapped"));
        }
    }
    let exe_name = exe
        .map(|e| file_name(e.strip_suffix(" (deleted)").unwrap_or(e)).to_string())
        .or_else(|| cmdline.first().map(|c| file_name(c).to_string()));
    if let Some(n) = exe_name {
        let rt = if n.starts_with("ruby") {
            Some(Runtime::Ruby)
        } else if n.starts_with("python") {
            Some(Runtime::Python)
        } else if n == "java" {
            Some(Runtime::Jvm)
        } else if n == "node" || n == "nodejs" {
            Some(Runtime::Node)
        } else if n == "beam.smp" {
            Some(Runtime::Erlang)
        } else if n.starts_with("perl") {
            Some(Runtime::Perl)
        } else {
            None
        };
        if let Some(rt) = rt {
            add(rt, format!("executable {n}"));
        }
    }
    if facts.is_some_and(|f| f.go_buildinfo) {
        add(
            Runtime::Go,
            "the executable has a .go.buildinfo section (Go's heap does not use malloc)".into(),
        );
    }
    out
}
