//! Where the CPU goes, per variant, from the CPU probe's samples: the allocator's share of
//! the workload's CPU with an interval, its CPU seconds (the share of the run's user and
//! system time), where the rest went, and each variant against the baseline.

use std::collections::BTreeMap;

use crate::analysis::stats::{median, median_ci95};
use crate::analysis::Analysis;
use crate::record::{CpuView, Experiment, RunRecord};

/// The heading of the lines, in every format.
pub(crate) fn cpu_heading(e: &Experiment) -> String {
    let rate = e
        .runs
        .iter()
        .find_map(|r| r.inside.cpu.as_ref())
        .map_or(crate::probe::cpu::RATE_HZ, |c| c.rate_hz);
    format!(
        "where does the CPU go? (perf's cpu-clock samples of every thread of the workload at {rate} \
         Hz; the allocator is its library's code, or glibc's malloc.c; medians over runs, with \
         95% intervals)"
    )
}

/// Places named per variant.
const PLACES: usize = 4;

/// With fewer runs than this, the interval is the samples' (binomial) only.
const RUNS_FOR_BOOTSTRAP: usize = 3;

struct Variant<'a> {
    name: &'a str,
    runs: Vec<&'a CpuView>,
    shares: Vec<f64>,
    /// The allocator's CPU seconds per run: its share of the run's user and system time.
    seconds: Vec<f64>,
}

fn variants<'a>(e: &'a Experiment, a: &'a Analysis) -> Vec<Variant<'a>> {
    a.variants
        .iter()
        .filter_map(|s| {
            let runs: Vec<(&RunRecord, &CpuView)> = e
                .runs
                .iter()
                .filter(|r| r.variant == s.name && r.counts())
                .filter_map(|r| Some((r, r.inside.cpu.as_ref()?)))
                .filter(|(_, c)| c.allocator_share().is_some())
                .collect();
            (!runs.is_empty()).then(|| Variant {
                name: &s.name,
                shares: runs
                    .iter()
                    .filter_map(|(_, c)| c.allocator_share())
                    .collect(),
                seconds: runs
                    .iter()
                    .filter_map(|(r, c)| {
                        Some(c.allocator_share()? * (r.cpu_user_seconds + r.cpu_sys_seconds))
                    })
                    .collect(),
                runs: runs.into_iter().map(|(_, c)| c).collect(),
            })
        })
        .collect()
}

/// The Wilson score interval of `k` in `n` at 95%.
fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let d = 1.0 + z * z / n;
    let c = (p + z * z / (2.0 * n)) / d;
    let h = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / d;
    ((c - h).max(0.0), (c + h).min(1.0))
}

/// The share's median and interval, and how the interval was had.
fn share_interval(v: &Variant) -> (f64, (f64, f64), &'static str) {
    if v.shares.len() >= RUNS_FOR_BOOTSTRAP {
        let (lo, hi) = median_ci95(&v.shares, 0xc0ffee);
        (median(&v.shares), (lo, hi), "over runs")
    } else {
        let k: u64 = v.runs.iter().map(|c| c.allocator).sum();
        let n: u64 = v.runs.iter().map(|c| c.samples - c.unattributed).sum();
        (
            k as f64 / n.max(1) as f64,
            wilson(k, n),
            "the samples' error only: run 3 or more for one over runs",
        )
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// One line per variant, then one per variant against the baseline, then the notes.
pub(crate) fn cpu_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let vs = variants(e, a);
    let mut out = Vec::new();
    for v in &vs {
        let (share, (lo, hi), how) = share_interval(v);
        let samples: u64 = v.runs.iter().map(|c| c.samples).sum();
        let mut places: BTreeMap<&str, (u64, bool)> = BTreeMap::new();
        for c in &v.runs {
            for p in &c.places {
                let e = places.entry(&p.name).or_insert((0, p.allocator));
                e.0 += p.samples;
            }
        }
        let mut places: Vec<(&str, u64, bool)> =
            places.into_iter().map(|(n, (s, al))| (n, s, al)).collect();
        places.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
        let named = |allocator: bool| {
            places
                .iter()
                .filter(|p| p.2 == allocator)
                .take(PLACES)
                .map(|(n, s, _)| format!("{n} {}", pct(*s as f64 / samples.max(1) as f64)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (inside, rest) = (named(true), named(false));
        out.push(format!(
            "{}: {} of the CPU in the allocator [{}, {}] ({how}){}, about {:.2} s of CPU; the rest: {}; {} samples in {} run(s)",
            v.name,
            pct(share),
            pct(lo),
            pct(hi),
            if inside.is_empty() { String::new() } else { format!(": {inside}") },
            median(&v.seconds),
            if rest.is_empty() { "nothing".into() } else { rest },
            samples,
            v.runs.len()
        ));
    }
    if let Some(b) = vs.iter().find(|v| v.name == e.plan.baseline) {
        for v in vs.iter().filter(|v| v.name != b.name) {
            let (s, bs) = (median(&v.shares), median(&b.shares));
            let (t, bt) = (median(&v.seconds), median(&b.seconds));
            out.push(format!(
                "{} against {}: the allocator's share {} vs {} ({:+.1} points); its CPU {:.2} s vs {:.2} s{}",
                v.name,
                b.name,
                pct(s),
                pct(bs),
                100.0 * (s - bs),
                t,
                bt,
                if bt > 0.0 { format!(" ({:.2}×)", t / bt) } else { String::new() }
            ));
        }
    }
    let mut notes: Vec<String> = Vec::new();
    for v in &vs {
        let lost: u64 = v.runs.iter().map(|c| c.lost).sum();
        let unattributed: u64 = v.runs.iter().map(|c| c.unattributed).sum();
        if lost + unattributed > 0 {
            notes.push(format!(
                "{}: {unattributed} sample(s) of processes gone before their mappings were read \
                 and {lost} lost by the kernel, left out of the shares",
                v.name
            ));
        }
        for c in &v.runs {
            if let Some(n) = &c.note {
                if !notes.contains(n) {
                    notes.push(n.clone());
                }
            }
        }
    }
    if vs.iter().any(|v| v.runs.iter().any(|c| !c.kernel_included)) {
        notes.push(
            "some runs were sampled in user space only (the kernel refused kernel samples): \
             their shares leave system time out"
                .into(),
        );
    }
    if !vs.is_empty() {
        notes.push(
            "samples are attributed by the instruction they hit: the allocator's own calls into \
             libc (locks, memset) and its system calls and page faults count under libc and the \
             kernel"
                .into(),
        );
    }
    out.extend(notes.into_iter().map(|n| format!("note: {n}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_brackets_the_share() {
        let (lo, hi) = wilson(97, 198);
        assert!(
            lo < 0.49 && hi > 0.49 && lo > 0.40 && hi < 0.58,
            "{lo} {hi}"
        );
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson(0, 100);
        assert_eq!(lo, 0.0);
        assert!(hi > 0.0 && hi < 0.05);
    }
}
