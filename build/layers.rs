//! The library's layering, checked at every build: a module may use only modules of lower
//! layers (ARCHITECTURE.md, "Layers"). A wrong-way import (say `linux` using `report`)
//! fails the build with the file and the rule, as an import cycle would fail between
//! crates. Test code (`#[cfg(test)] mod …`, inline or in its own file) may use anything.
//! Read as text: `crate::name` and `crate::{a, b::c}` paths outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first. A module of layer N may use modules of layers below N only.
pub const LAYERS: &[&[&str]] = &[
    // Pure helpers: units and durations, escaping, the schedule's order, the built-in
    // workloads.
    &["units", "escape", "schedule", "workload"],
    // The load generator, and the OS-facing readers (/proc, cgroups, ELF, the host).
    &["load", "linux"],
    // What to run.
    &["plan"],
    // What a run measured, as stored and exchanged.
    &["record"],
    // Observing a run; storing records; analysing them.
    &["probe", "store", "analysis"],
    // Starting and reaping workloads; rendering analyses.
    &["backend", "report"],
    // One trial; live diagnosis of a process; the Kubernetes Job.
    &["trial", "inspect", "kube", "judge"],
    // A whole experiment; the fleet exporter; a soak of every variant side by side.
    &["runner", "exporter", "soak"],
];

/// Crate-root files that are not modules of a layer.
const ROOTS: &[&str] = &["lib", "main", "testing"];

/// Every wrong-way import under `src/`, as messages; empty when the layering holds.
pub fn violations(src: &Path) -> Vec<String> {
    let layer: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (*n, i)))
        .collect();
    let mut out = Vec::new();
    for file in lib_files(src) {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let top = top_module(rel);
        if ROOTS.contains(&top.as_str()) || is_binary(&top) {
            continue;
        }
        let Some(&mine) = layer.get(top.as_str()) else {
            out.push(format!(
                "src/{}: module `{top}` has no layer: add it to LAYERS in build/layers.rs \
                 and to ARCHITECTURE.md",
                rel.display()
            ));
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for used in uses(&without_tests(&text)) {
            if used == top {
                continue;
            }
            match layer.get(used.as_str()) {
                Some(&theirs) if theirs >= mine => out.push(format!(
                    "src/{}: `{top}` (layer {mine}) uses `crate::{used}` (layer {theirs}): a \
                     module may use only lower layers (build/layers.rs, ARCHITECTURE.md)",
                    rel.display()
                )),
                _ => {}
            }
        }
    }
    out
}

/// The binary's own modules (`cli`, `cmd`): on top of everything, not part of the library.
fn is_binary(top: &str) -> bool {
    top == "cli" || top == "cmd"
}

fn top_module(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().to_string());
    first
        .unwrap_or_default()
        .trim_end_matches(".rs")
        .to_string()
}

/// The `.rs` files under `src`, less the files of test-only modules (`#[cfg(test)] mod x;`).
fn lib_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut test_only = BTreeSet::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let dir = match f.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs") | Some("lib.rs") | Some("main.rs") => f.parent().map(Path::to_path_buf),
            _ => Some(f.with_extension("")),
        };
        let Some(dir) = dir else { continue };
        let mut lines = text.lines().map(str::trim);
        while let Some(l) = lines.next() {
            if l == "#[cfg(test)]" {
                if let Some(name) = lines.next().and_then(declared_file_module) {
                    test_only.insert(dir.join(format!("{name}.rs")));
                    test_only.insert(dir.join(name).join("mod.rs"));
                }
            }
        }
    }
    files.retain(|f| !test_only.contains(f));
    files.sort();
    files
}

/// `name` of a line `mod name;` or `pub(crate) mod name;`.
fn declared_file_module(line: &str) -> Option<&str> {
    let rest = line.split("mod ").nth(1)?;
    let name = rest.strip_suffix(';')?;
    (name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(name)
}

/// The text before the first `#[cfg(test)]` that opens an inline module, without comments.
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{'))
        {
            break;
        }
        let code = match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The crate-level modules a text names through `crate::`.
fn uses(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `memtrial_crate::` or the like
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            found.insert(first_segment(&item));
        } else {
            found.insert(first_segment(rest));
        }
    }
    found.remove("");
    found
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}
