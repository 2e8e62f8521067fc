//! "Where is the memory?": each variant's resident bytes by kind of mapping, from the
//! `smaps` read nearest each run's peak, against the baseline by kind, and the next
//! experiment a finding suggests (printed, never run).

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::stats::median;
use crate::analysis::Analysis;
use crate::linux::regions::Kind;
use crate::record::{Experiment, RunRecord};
use crate::units::format_bytes;

/// The heading of the lines, in every format.
pub(crate) const REGIONS_HEADING: &str = "where is the memory? (resident bytes by kind of mapping, from /proc/PID/smaps read at each 5% rise of RSS past the last read; medians over runs read within 10% of their peak)";

/// A read counts for a run's peak when the tree's RSS then was at least this share of the
/// run's peak RSS.
pub(crate) const NEAR_PEAK: f64 = 0.9;

/// The smallest `--yjit-exec-mem-size` suggested, in MiB: room for an application's code
/// to grow past what one run made.
const MIN_EXEC_MIB: f64 = 16.0;

/// A kind is named when it holds at least this share of the resident bytes.
const SHOWN_SHARE: f64 = 0.01;

fn mib(b: f64) -> String {
    format_bytes(b)
}

fn signed(b: f64) -> String {
    if b < 0.0 {
        format!("-{}", format_bytes(-b))
    } else {
        format!("+{}", format_bytes(b))
    }
}

/// A variant's medians by kind over its runs read near their peak.
struct Where {
    by_kind: BTreeMap<Kind, f64>,
    total: f64,
    arena_heaps: f64,
    thread_stacks: f64,
    largest_exec: Option<(f64, f64)>,
    near: usize,
    read: usize,
}

fn near_peak(r: &RunRecord) -> bool {
    r.regions
        .as_ref()
        .is_some_and(|g| g.rss_at_read() as f64 >= NEAR_PEAK * r.peak_rss_bytes as f64)
}

fn where_of(runs: &[&RunRecord]) -> Option<Where> {
    let read: Vec<&RunRecord> = runs
        .iter()
        .copied()
        .filter(|r| r.regions.is_some())
        .collect();
    let near: Vec<&RunRecord> = read.iter().copied().filter(|r| near_peak(r)).collect();
    let regions: Vec<&crate::linux::regions::Regions> = near
        .iter()
        .filter_map(|r| r.regions.as_ref().map(|g| &g.regions))
        .collect();
    if regions.is_empty() {
        return None;
    }
    let kinds: BTreeSet<Kind> = regions
        .iter()
        .flat_map(|g| g.by_kind.keys().copied())
        .collect();
    let med = |f: &dyn Fn(&crate::linux::regions::Regions) -> f64| {
        median(&regions.iter().map(|g| f(g)).collect::<Vec<_>>())
    };
    let by_kind = kinds
        .into_iter()
        .map(|k| (k, med(&|g| g.by_kind.get(&k).copied().unwrap_or(0) as f64)))
        .collect();
    let exec: Vec<(f64, f64)> = regions
        .iter()
        .filter_map(|g| g.largest_exec_anon)
        .map(|x| (x.size_bytes as f64, x.rss_bytes as f64))
        .collect();
    Some(Where {
        by_kind,
        total: med(&|g| g.rss_bytes as f64),
        arena_heaps: med(&|g| g.arena_heaps as f64),
        thread_stacks: med(&|g| g.thread_stacks as f64),
        largest_exec: (!exec.is_empty()).then(|| {
            (
                median(&exec.iter().map(|x| x.0).collect::<Vec<_>>()),
                median(&exec.iter().map(|x| x.1).collect::<Vec<_>>()),
            )
        }),
        near: near.len(),
        read: read.len(),
    })
}

fn detail(k: Kind, w: &Where) -> String {
    match k {
        Kind::MallocArenas => format!(" ({:.0} heaps)", w.arena_heaps),
        Kind::ThreadStacks => format!(" ({:.0} stacks)", w.thread_stacks),
        Kind::ExecAnon => w
            .largest_exec
            .map(|(size, rss)| {
                format!(
                    " (largest region {} mapped, {} resident)",
                    mib(size),
                    mib(rss)
                )
            })
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// Per variant: where its resident bytes were at the peak; against the baseline, by kind;
/// then the next experiment a finding suggests.
pub(crate) fn region_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    let runs_of = |name: &str| -> Vec<&RunRecord> {
        e.runs
            .iter()
            .filter(|r| r.variant == name && r.counts())
            .collect()
    };
    let wheres: BTreeMap<&str, Where> = a
        .variants
        .iter()
        .filter_map(|s| Some((s.name.as_str(), where_of(&runs_of(&s.name))?)))
        .collect();
    for s in &a.variants {
        out.extend(where_line(
            &s.name,
            wheres.get(s.name.as_str()),
            &runs_of(&s.name),
        ));
    }
    // The run cgroups' working sets, one line for all variants.
    let ws: Vec<String> = a
        .variants
        .iter()
        .filter_map(|s| {
            let ws: Vec<f64> = runs_of(&s.name)
                .iter()
                .filter_map(|r| r.cgroup.as_ref()?.working_set_peak_bytes)
                .map(|b| b as f64)
                .collect();
            (!ws.is_empty()).then(|| format!("{} {}", s.name, mib(median(&ws))))
        })
        .collect();
    if !ws.is_empty() {
        out.push(format!(
            "the run cgroup's working set at its sampled peak (usage less inactive page cache, what the kubelet evicts on; medians): {}",
            ws.join(", ")
        ));
    }
    out.extend(jvm_lines(e, a));
    out.extend(next_for_arenas(e, a, &wheres));
    let base = &e.plan.baseline;
    if let Some(b) = wheres.get(base.as_str()) {
        for s in a.variants.iter().filter(|s| s.name != *base) {
            if let Some(w) = wheres.get(s.name.as_str()) {
                out.extend(against_baseline(e, &s.name, w, base, b));
            }
        }
    }
    out
}

/// A variant's line: where its resident bytes were at its peak, by kind; or, read but
/// never near a peak, how near the nearest read came.
fn where_line(name: &str, w: Option<&Where>, runs: &[&RunRecord]) -> Option<String> {
    let Some(w) = w else {
        let (at, peak) = runs
            .iter()
            .filter_map(|r| Some((r.regions.as_ref()?.rss_at_read(), r.peak_rss_bytes)))
            .max_by(|x, y| {
                (x.0 as f64 / x.1.max(1) as f64).total_cmp(&(y.0 as f64 / y.1.max(1) as f64))
            })?;
        return Some(format!(
            "{name}: no read near a peak (the nearest at {} of a {} peak): smaps is read at each 5% rise of RSS while one read costs under 50 ms of CPU, and within a CPU budget beyond that, so a run that stays near its peak longer gets one",
            mib(at as f64),
            mib(peak as f64)
        ));
    };
    let mut kinds: Vec<(&Kind, &f64)> = w
        .by_kind
        .iter()
        .filter(|(_, b)| **b >= SHOWN_SHARE * w.total && **b > 0.0)
        .collect();
    kinds.sort_by(|x, y| y.1.total_cmp(x.1));
    let parts: Vec<String> = kinds
        .iter()
        .map(|(k, b)| format!("{} {}{}", k.label(), mib(**b), detail(**k, w)))
        .collect();
    Some(format!(
        "{name}: {} resident: {} ({} of {} runs read within 10% of their peak)",
        mib(w.total),
        parts.join(", "),
        w.near,
        w.read
    ))
}

/// Variant `name`'s resident bytes at its peak (`w`) against the baseline's (`b`): in all
/// and by the kinds that differ by a MiB and 5% of the difference or more; then the next
/// experiment a YJIT finding suggests.
fn against_baseline(e: &Experiment, name: &str, w: &Where, base: &str, b: &Where) -> Vec<String> {
    let mut out = Vec::new();
    let diff = w.total - b.total;
    let kinds: BTreeSet<Kind> = w.by_kind.keys().chain(b.by_kind.keys()).copied().collect();
    let mut diffs: Vec<(Kind, f64)> = kinds
        .into_iter()
        .map(|k| {
            let get = |x: &Where| x.by_kind.get(&k).copied().unwrap_or(0.0);
            (k, get(w) - get(b))
        })
        .filter(|(_, d)| d.abs() >= (1u64 << 20) as f64 && d.abs() >= 0.05 * diff.abs())
        .collect();
    diffs.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    let parts: Vec<String> = diffs
        .iter()
        .map(|(k, d)| format!("{} {}", k.label(), signed(*d)))
        .collect();
    out.push(format!(
        "{name} against {base}: {} resident{}",
        signed(diff),
        if parts.is_empty() {
            String::new()
        } else {
            format!(": {}", parts.join(", "))
        }
    ));
    if let Some(next) = next_for_yjit(e, name, w, diff, &diffs) {
        out.push(next);
    }
    out
}

/// The glibc-arenas finding: a variant on glibc malloc with its default arena limit whose
/// arena heaps hold a quarter or more of its resident bytes, in an experiment that tries no
/// arena limit, gets `MALLOC_ARENA_MAX=2` to try (the catalog's `arena2`).
fn next_for_arenas(e: &Experiment, a: &Analysis, wheres: &BTreeMap<&str, Where>) -> Vec<String> {
    let limited = |v: &crate::plan::Variant| {
        v.env.iter().any(|(k, val)| {
            k == "MALLOC_ARENA_MAX" || (k == "GLIBC_TUNABLES" && val.contains("arena_max"))
        })
    };
    if e.plan.variants.iter().any(limited) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for s in &a.variants {
        let Some(w) = wheres.get(s.name.as_str()) else {
            continue;
        };
        let Some(v) = e.plan.variants.iter().find(|v| v.name == s.name) else {
            continue;
        };
        let arenas = w.by_kind.get(&Kind::MallocArenas).copied().unwrap_or(0.0);
        if v.preload.is_some()
            || s.allocator_detected.as_deref() != Some("glibc")
            || w.arena_heaps < 4.0
            || arenas < 0.25 * w.total
        {
            continue;
        }
        out.push(format!(
            "next: in {}, glibc's arena heaps hold {} of {} resident ({:.0} heaps): fewer arenas pack the same data into fewer heaps: memtrial run --variants {},arena2 … (arena2 is MALLOC_ARENA_MAX=2)",
            s.name,
            mib(arenas),
            mib(w.total),
            w.arena_heaps,
            s.name
        ));
    }
    out
}

/// The YJIT finding: a variant that turns YJIT on and whose extra memory is mostly the
/// executable region gets a variant with a smaller region to try, sized from the code YJIT
/// made where the Ruby probe saw it.
fn next_for_yjit(
    e: &Experiment,
    name: &str,
    w: &Where,
    diff: f64,
    diffs: &[(Kind, f64)],
) -> Option<String> {
    let variant = e.plan.variants.iter().find(|v| v.name == name)?;
    let rubyopt = variant
        .env
        .iter()
        .find(|(k, _)| k == "RUBYOPT")
        .map(|(_, v)| v.as_str())?;
    if !rubyopt.split_whitespace().any(|o| o == "--yjit") || rubyopt.contains("exec-mem-size") {
        return None;
    }
    let exec = diffs.iter().find(|(k, _)| *k == Kind::ExecAnon)?.1;
    if exec < (16u64 << 20) as f64 || exec < 0.5 * diff {
        return None;
    }
    // The code YJIT made, as the Ruby probe saw it: `code_region_size` (Ruby 3.2 on), or
    // `inline_code_size` + `outlined_code_size` (3.1); the largest over the runs.
    let code = e
        .runs
        .iter()
        .filter(|r| r.variant == name && r.counts())
        .filter_map(|r| {
            let ruby = r.inside.runtime("ruby")?;
            let max = |n: &str| ruby.figure(n).map(|f| f.max);
            max("code_region_size")
                .or_else(|| Some(max("inline_code_size")? + max("outlined_code_size")?))
        })
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    let (size, why) = match code {
        Some(c) => {
            let mib4 = (4.0 * c / (1u64 << 20) as f64).ceil().max(MIN_EXEC_MIB) as u64;
            let size = mib4.next_power_of_two();
            (
                size,
                format!(
                    "4× the {} of code YJIT made, at least {MIN_EXEC_MIB} MiB, rounded up to a power of two",
                    mib(c)
                ),
            )
        }
        None => (
            32,
            "a guess: run with --probe ruby to size it from the code YJIT makes".to_string(),
        ),
    };
    let region = w
        .largest_exec
        .map(|(s, r)| format!("{} mapped, {} resident", mib(s), mib(r)))
        .unwrap_or_default();
    Some(format!(
        "next: YJIT's executable region ({region}) is most of {name}'s extra memory; a smaller one caps it ({why}): memtrial run --variant '{name}{size}=RUBYOPT=\"{rubyopt} --yjit-exec-mem-size={size}\"' …"
    ))
}

/// The JVM's regions named: per variant whose runs the JVM probe read, NMT's reservations
/// found in the JVM's mappings (the Java heap and class space by their exact size, the code
/// cache as the executable stretch, thread stacks by their shape), medians of each run's
/// last read.
fn jvm_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    for s in &a.variants {
        let views: Vec<&crate::record::RuntimeView> = e
            .runs
            .iter()
            .filter(|r| r.variant == s.name && r.counts())
            .filter_map(|r| r.inside.runtime("jvm"))
            .collect();
        if views.is_empty() {
            continue;
        }
        let last = |n: &str| {
            let v: Vec<f64> = views
                .iter()
                .filter_map(|j| j.figure(n).map(|f| f.last))
                .collect();
            (!v.is_empty()).then(|| median(&v))
        };
        let nmt = |n: &str, what: &str| {
            last(n)
                .map(|c| format!(" (NMT {what} {})", mib(c)))
                .unwrap_or_default()
        };
        let mut parts = Vec::new();
        for (key, label) in [("java_heap", "Java heap"), ("class_space", "class space")] {
            let reserved_key = if key == "class_space" { "class" } else { key };
            let Some(reserved) = last(&format!("mmap_reserved.{reserved_key}")) else {
                continue;
            };
            parts.push(match last(&format!("resident.{key}")) {
                Some(rss) => format!(
                    "{label} {} reserved, {} resident{}",
                    mib(reserved),
                    mib(rss),
                    nmt(&format!("committed.{reserved_key}"), "committed")
                ),
                None => format!(
                    "{label} {} reserved: not found in the mappings (no stretch of that size with boundaries of its own)",
                    mib(reserved)
                ),
            });
        }
        if let (Some(mapped), Some(rss)) = (last("mapped.code_cache"), last("resident.code_cache"))
        {
            parts.push(format!(
                "code cache {} from its first executable mapping to its last, {} resident{}",
                mib(mapped),
                mib(rss),
                nmt("committed.code", "Code committed")
            ));
        }
        if let (Some(n), Some(rss)) = (last("thread_stacks_mapped"), last("resident.thread_stacks"))
        {
            parts.push(format!(
                "{n:.0} thread stacks, {} resident{}",
                mib(rss),
                match (last("threads"), last("thread_stacks_committed")) {
                    (Some(t), Some(c)) =>
                        format!(" (NMT: {t:.0} threads, {} of stack committed)", mib(c)),
                    (Some(t), None) => format!(" (NMT: {t:.0} threads)"),
                    _ => String::new(),
                }
            ));
        }
        if parts.is_empty() {
            continue;
        }
        out.push(format!(
            "{}: the JVM's regions (NMT's reservations found in its mappings; medians of each run's last read): {}",
            s.name,
            parts.join("; ")
        ));
    }
    out
}
