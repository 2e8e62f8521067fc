//! NMT's summary (`jcmd PID VM.native_memory summary`) read into categories and figures.

use crate::record::FigureUnit;

/// NMT's summary of one JVM, in bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub reserved: u64,
    pub committed: u64,
    /// `malloc:` under `Total:` (JDK 17 and later).
    pub malloc: Option<u64>,
    pub categories: Vec<Category>,
}

/// One category (`Java Heap`, `Thread`, `Other`, …).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Category {
    pub name: String,
    pub reserved: u64,
    pub committed: u64,
    pub malloc: Option<u64>,
    /// `(thread #N)`, in the `Thread` category.
    pub threads: Option<u64>,
    /// `(stack: reserved=…, committed=…)`, in the `Thread` category.
    pub stack_committed: Option<u64>,
    /// The stacks' reserved bytes, in the `Thread` category.
    pub stack_reserved: Option<u64>,
    /// `(mmap: reserved=…)`: the address space the category reserved with mmap (the Java
    /// heap's, the class space's, the code cache's), which its mappings occupy.
    pub mmap_reserved: Option<u64>,
}

/// Why jcmd's output is no summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummaryError {
    /// The JVM runs without NMT.
    NotEnabled,
    /// Anything else: jcmd's own words (its first line that says something).
    Other(String),
}

/// A size NMT printed right after `key` (`reserved=123KB`, `malloc: 4KB`), in bytes.
pub(super) fn size_after(line: &str, key: &str) -> Option<u64> {
    let rest = line[line.find(key)? + key.len()..].trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = rest[..digits].parse().ok()?;
    let unit: String = rest[digits..]
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    let scale: u64 = match unit.as_str() {
        "B" | "" => 1,
        "KB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        _ => return None,
    };
    Some(n.saturating_mul(scale))
}

/// The count after `#` in `(thread #69)`.
pub(super) fn count_after_hash(line: &str) -> Option<u64> {
    let rest = &line[line.find('#')? + 1..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().ok()
}

/// jcmd's first line that says something (not the `<pid>:` it echoes, not a stack frame).
pub(crate) fn first_words(text: &str) -> String {
    let echo = |l: &str| {
        l.strip_suffix(':')
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
    };
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !(l.is_empty() || l.starts_with("at ") || echo(l)))
        .unwrap_or("no output");
    line.chars().take(300).collect()
}

/// Parses `jcmd <pid> VM.native_memory summary` (any scale NMT prints). Never panics.
pub(crate) fn parse_summary(text: &str) -> Result<Summary, SummaryError> {
    if text.contains("Native memory tracking is not enabled") {
        return Err(SummaryError::NotEnabled);
    }
    let mut total: Option<Summary> = None;
    let mut in_total = false;
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix("Total:") {
            let (Some(reserved), Some(committed)) = (
                size_after(rest, "reserved="),
                size_after(rest, "committed="),
            ) else {
                continue;
            };
            total = Some(Summary {
                reserved,
                committed,
                ..Summary::default()
            });
            in_total = true;
            continue;
        }
        let Some(s) = total.as_mut() else { continue };
        if let Some(rest) = line.strip_prefix('-') {
            in_total = false;
            let Some(open) = rest.find('(') else { continue };
            let (Some(reserved), Some(committed)) = (
                size_after(&rest[open..], "reserved="),
                size_after(&rest[open..], "committed="),
            ) else {
                continue;
            };
            s.categories.push(Category {
                name: rest[..open].trim().to_string(),
                reserved,
                committed,
                ..Category::default()
            });
        } else if in_total {
            if line.starts_with("malloc:") {
                s.malloc = size_after(line, "malloc:");
            }
        } else if let Some(c) = s.categories.last_mut() {
            if line.starts_with("(thread #") || line.starts_with("(threads #") {
                c.threads = count_after_hash(line);
            } else if line.starts_with("(stack:") {
                c.stack_committed = size_after(line, "committed=");
                c.stack_reserved = size_after(line, "reserved=");
            } else if line.starts_with("(mmap:") {
                c.mmap_reserved = size_after(line, "reserved=");
            } else if line.starts_with("(malloc=") {
                c.malloc = size_after(line, "malloc=");
            }
        }
    }
    total.ok_or_else(|| SummaryError::Other(first_words(text)))
}

/// A category's figure name: `committed.java_heap`, `committed.nmt`, …
pub(crate) fn category_key(name: &str) -> String {
    if name == "Native Memory Tracking" {
        return "committed.nmt".into();
    }
    let mut key = String::from("committed.");
    let mut gap = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !key.ends_with('.') {
                key.push('_');
            }
            gap = false;
            key.push(c.to_ascii_lowercase());
        } else {
            gap = true;
        }
    }
    key
}

/// One figure of one read.
pub(super) type Figure = (String, FigureUnit, u64);

/// The figures of one read; `rss` is the JVM's RSS when it was read, if known.
pub fn figures(s: &Summary, rss: Option<u64>) -> Vec<Figure> {
    use FigureUnit::{Bytes, Count};
    let mut out: Vec<Figure> = vec![
        ("committed_total".into(), Bytes, s.committed),
        ("reserved_total".into(), Bytes, s.reserved),
    ];
    let category_malloc = s.categories.iter().filter_map(|c| c.malloc);
    let malloc = s.malloc.or_else(|| {
        let mut any = category_malloc.clone().peekable();
        any.peek().is_some().then(|| any.sum())
    });
    if let Some(m) = malloc {
        out.push(("malloc_total".into(), Bytes, m));
    }
    if let Some(rss) = rss {
        out.push(("rss".into(), Bytes, rss));
        out.push((
            "rss_outside_nmt".into(),
            Bytes,
            rss.saturating_sub(s.committed),
        ));
    }
    if let Some(n) = s.categories.iter().find_map(|c| c.threads) {
        out.push(("threads".into(), Count, n));
    }
    if let Some(b) = s.categories.iter().find_map(|c| c.stack_committed) {
        out.push(("thread_stacks_committed".into(), Bytes, b));
    }
    if let Some(b) = s.categories.iter().find_map(|c| c.stack_reserved) {
        out.push(("thread_stacks_reserved".into(), Bytes, b));
    }
    for c in &s.categories {
        out.push((category_key(&c.name), Bytes, c.committed));
    }
    // The reservations the mappings can be matched to (`mmap_reserved.java_heap`, …).
    for c in &s.categories {
        if let Some(r) = c.mmap_reserved.filter(|r| *r > 0) {
            let key = category_key(&c.name).replacen("committed.", "mmap_reserved.", 1);
            out.push((key, Bytes, r));
        }
    }
    out
}

/// NMT's reservations matched to the JVM's mappings (`/proc/PID/smaps` read right after the
/// summary): the Java heap's and the class space's resident bytes (the one stretch of
/// adjacent private mappings of exactly the size NMT says each reserved), the code cache's
/// (the executable stretch) and the thread stacks' (by the mappings' shape).
pub fn mapped_figures(
    s: &Summary,
    smaps: &[(crate::linux::maps::Mapping, crate::linux::regions::MapStats)],
) -> Vec<Figure> {
    use FigureUnit::{Bytes, Count};
    let stretches = crate::linux::regions::Stretches::of(smaps);
    let mut out: Vec<Figure> = Vec::new();
    for (category, key) in [("Java Heap", "java_heap"), ("Class", "class_space")] {
        let reserved = s
            .categories
            .iter()
            .find(|c| c.name == category)
            .and_then(|c| c.mmap_reserved);
        if let Some(f) = reserved.and_then(|r| stretches.reservation(r)) {
            out.push((format!("resident.{key}"), Bytes, f.rss_bytes));
        }
    }
    // The code cache: from its first executable mapping to its last (NMT's Code total
    // holds more than the code heap's reservation, so its size finds nothing).
    if let Some(code) = stretches.exec() {
        out.push(("resident.code_cache".into(), Bytes, code.rss_bytes));
        out.push(("mapped.code_cache".into(), Bytes, code.size_bytes));
    }
    let (stacks, rss) = stretches.thread_stacks();
    out.push(("thread_stacks_mapped".into(), Count, stacks));
    out.push(("resident.thread_stacks".into(), Bytes, rss));
    out
}
