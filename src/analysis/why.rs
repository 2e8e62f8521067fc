//! Leak or fragmentation? The verdict on one run, from the allocator's live and held bytes
//! beside the kernel's RSS.
//!
//! Judged on the steady part of a run only: a server's load phase (later: a worker's
//! driven phase). A batch job has no steady part: it gets its state at its RSS peak
//! instead ("N live vs M held vs R resident"), never a leak verdict.
//!
//! On the steady window each series gets [`trend`](super::trend::trend) (a least-squares
//! slope over its last half with a 95% interval):
//! - **leak**: live bytes keep growing;
//! - **fragmentation / retention**: live bytes are flat while the allocator's held bytes
//!   or RSS grow, or held bytes stay at least [`FRAGMENTED`] × live;
//! - **plateau**: all flat;
//! - **too short**: the window holds too few allocator samples, with what would do.
//!
//! Without allocator figures (probe off, static program, an allocator that offers no live
//! bytes) the verdict falls back to the RSS trend and says that it is weaker.

use serde::Serialize;

use super::trend::{trend, Cycles, Trend, TrendRules, Undecided};
use crate::record::{AllocatorPoint, RunRecord};
use crate::units::format_bytes;

/// Held bytes at least this many times the live bytes count as fragmentation/retention.
pub(crate) const FRAGMENTED: f64 = 1.25;

/// The shortest steady phase on which live growth is called a leak: shorter, a process
/// still warming up (caches filling, a JIT compiling, pools growing to their size) cannot
/// be told from one that leaks (25 s of a Ruby worker warming up grew 187 MiB/min).
pub(crate) const MIN_LEAK_STEADY_SECONDS: f64 = 120.0;

/// Why the allocator's figures at its sampled peak cannot stand for the run's peak (see
/// `analysis::evidence`): too few samples, or none at the peak (a 0.5 s job sampled every
/// second showed 1.2 KiB live beside a 217 MiB RSS peak).
fn at_peak_absent(r: &RunRecord) -> Option<String> {
    match super::evidence::allocator_at_peak(r)?.standing {
        crate::record::evidence::Standing::Absent { reason, remedy } => {
            Some(format!("{reason}; {remedy} would give them"))
        }
        crate::record::evidence::Standing::Stands => None,
    }
}

/// The verdict on one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub(crate) enum Why {
    /// Live bytes grow over the steady window.
    Leak {
        live_slope_bytes_per_min: f64,
        ci: (f64, f64),
        live_bytes: f64,
        held_over_live: Option<f64>,
        window_seconds: f64,
    },
    /// Live bytes are flat; held bytes or RSS grow, or held stays well above live.
    Fragmentation {
        live_bytes: f64,
        held_bytes: f64,
        held_over_live: f64,
        unused_bytes: f64,
        /// Held bytes or RSS still grow (retention that gets worse), not just stay high.
        growing: bool,
        rss_bytes: f64,
        window_seconds: f64,
    },
    /// Live, held and RSS all flat.
    Plateau {
        live_bytes: f64,
        held_bytes: Option<f64>,
        rss_bytes: f64,
        window_seconds: f64,
    },
    /// Too few allocator samples in the steady window, or a window too short to tell
    /// growth from warm-up.
    TooShort {
        samples: usize,
        seconds: f64,
        need_samples: usize,
        need_seconds: f64,
        /// Live bytes grew over the short window (it may be warm-up), in bytes per minute.
        #[serde(skip_serializing_if = "Option::is_none")]
        grew_bytes_per_min: Option<f64>,
        /// Enough samples in all, but only this many in the later half of the window.
        #[serde(skip_serializing_if = "Option::is_none")]
        late_samples: Option<usize>,
        /// The live bytes' own cycles (a GC sawtooth) leave too few blocks in the window.
        #[serde(skip_serializing_if = "Option::is_none")]
        cycles: Option<Cycles>,
        /// Enough blocks, but the interval neither shows material growth nor rules it out.
        #[serde(skip_serializing_if = "Option::is_none")]
        undecided: Option<Undecided>,
    },
    /// Live bytes grow under this variant while they stay flat under others on the same
    /// traffic: the program's live data is the same under every allocator, so this
    /// allocator's count (or a cycle of the program's its window cut unevenly) is the
    /// suspect, never called a leak.
    AllocatorDeparts {
        /// The variants (groups) whose live bytes stay flat on the same traffic.
        flat_under: Vec<String>,
        /// Why this allocator's count can depart.
        cause: String,
        /// The verdict its own series gave.
        was: Box<Why>,
    },
    /// A batch job: its state at the RSS peak.
    AtPeak {
        live_bytes: Option<u64>,
        held_bytes: Option<u64>,
        rss_bytes: u64,
        /// Why live/held are missing, when they are.
        #[serde(skip_serializing_if = "Option::is_none")]
        missing: Option<String>,
    },
    /// No allocator figures in a steady window: the RSS trend, which cannot tell a leak
    /// from fragmentation.
    RssOnly { trend: Trend, reason: String },
}

impl Why {
    /// The live and held bytes the verdict states, if it states them.
    pub(crate) fn live_and_held(&self) -> (Option<f64>, Option<f64>) {
        match self {
            Why::Leak { live_bytes, .. } => (Some(*live_bytes), None),
            Why::Fragmentation {
                live_bytes,
                held_bytes,
                ..
            } => (Some(*live_bytes), Some(*held_bytes)),
            Why::Plateau {
                live_bytes,
                held_bytes,
                ..
            } => (Some(*live_bytes), *held_bytes),
            Why::AtPeak {
                live_bytes,
                held_bytes,
                ..
            } => (live_bytes.map(|v| v as f64), held_bytes.map(|v| v as f64)),
            Why::AllocatorDeparts { was, .. } => was.live_and_held(),
            Why::TooShort { .. } | Why::RssOnly { .. } => (None, None),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Why::Leak { .. } => "leak",
            Why::Fragmentation { .. } => "fragmentation",
            Why::Plateau { .. } => "plateau",
            Why::TooShort { .. } => "too_short",
            Why::AllocatorDeparts { .. } => ALLOCATOR_DEPARTS,
            Why::AtPeak { .. } => "at_peak",
            Why::RssOnly { .. } => "rss_only",
        }
    }

    /// One line for people, with the figures it rests on.
    pub fn sentence(&self) -> String {
        self.sentence_for(Judged::Run)
    }

    /// The verdict in words, its remedies in the terms of where it was judged (the flags of
    /// `run`, of `soak`, or of a fleet's exporter).
    pub fn sentence_for(&self, judged: Judged) -> String {
        let b = format_bytes;
        match self {
            Why::Leak {
                live_slope_bytes_per_min,
                ci,
                live_bytes,
                held_over_live,
                window_seconds,
            } => format!(
                "leak: live bytes grow {}/min [{}, {}] over {window_seconds:.0} s of steady load, at about {}{}",
                b(*live_slope_bytes_per_min),
                signed(ci.0),
                signed(ci.1),
                b(*live_bytes),
                held_over_live
                    .map(|r| format!("; the allocator holds {r:.2}× live"))
                    .unwrap_or_default()
            ),
            Why::Fragmentation {
                live_bytes,
                held_bytes,
                held_over_live,
                unused_bytes,
                growing,
                rss_bytes,
                ..
            } => format!(
                "{}: live bytes flat at {}, the allocator holds {} ({held_over_live:.2}× live, {} unused){}; RSS {}",
                if *growing { "fragmentation, growing" } else { "fragmentation/retention, not a leak" },
                b(*live_bytes),
                b(*held_bytes),
                b(*unused_bytes),
                if *growing { " and still growing" } else { "" },
                b(*rss_bytes)
            ),
            Why::Plateau {
                live_bytes,
                held_bytes,
                rss_bytes,
                ..
            } => format!(
                "plateau: live {}{}, RSS {}, all flat",
                b(*live_bytes),
                held_bytes
                    .map(|h| format!(", held {} ({:.2}× live)", b(h), h / live_bytes.max(1.0)))
                    .unwrap_or_default(),
                b(*rss_bytes)
            ),
            Why::TooShort { .. } => self.too_short_sentence(judged),
            Why::AllocatorDeparts {
                flat_under,
                cause,
                was,
            } => departs_sentence(flat_under, cause, &was.sentence_for(judged)),
            Why::AtPeak {
                live_bytes,
                held_bytes,
                rss_bytes,
                missing,
            } => at_peak_sentence(
                live_bytes.map(|v| v as f64),
                held_bytes.map(|v| v as f64),
                live_bytes
                    .zip(*held_bytes)
                    .map(|(l, h)| h as f64 / l.max(1) as f64),
                *rss_bytes as f64,
                missing.as_deref(),
            ),
            Why::RssOnly { trend, reason } => format!(
                "{} (RSS only, which cannot tell a leak from fragmentation: {reason})",
                super::trend_phrase(trend)
            ),
        }
    }

    /// A too-short verdict in words: what grew, or what a verdict needs and how to get it.
    fn too_short_sentence(&self, judged: Judged) -> String {
        let b = format_bytes;
        match self {
            Why::TooShort {
                samples,
                seconds,
                need_samples,
                need_seconds,
                grew_bytes_per_min: Some(g),
                ..
            } => format!(
                "too short: live bytes grew {}/min over {seconds:.0} s of steady load ({samples} allocator samples), which cannot be told from warm-up; a leak verdict needs {need_seconds:.0} s (and {need_samples} samples): run {}",
                b(*g),
                more_minutes(need_seconds - seconds)
            ),
            Why::TooShort {
                samples,
                seconds,
                need_samples,
                need_seconds,
                grew_bytes_per_min: None,
                late_samples,
                cycles,
                undecided,
            } => match super::trend::cannot_tell_clause(
                "live bytes",
                cycles.as_ref(),
                undecided.as_ref(),
                *seconds,
                *need_seconds,
            ) {
                Some(clause) => format!(
                    "too short to tell: over {seconds:.0} s of steady load ({samples} allocator samples): {clause}"
                ),
                None => format!(
                    "too short to judge: {samples} allocator samples over {seconds:.1} s of steady load{} (need {need_samples} over {need_seconds:.0} s: {})",
                    super::trend::late_clause(*late_samples),
                    match judged {
                        Judged::Run => "a longer --duration or a shorter --probe-interval",
                        Judged::Soak => "a longer --duration: a soak's probe reports every second",
                        Judged::Fleet => "a longer window (--since), or a shorter MEMTRIAL_PROBE_INTERVAL_MS in the workload",
                    }
                ),
            },
            _ => unreachable!("too_short_sentence of {self:?}"),
        }
    }
}

/// Where a verdict was judged, for the remedies its words name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// A trial's run (`memtrial run`).
    Run,
    /// A soak's window of an instance (`memtrial soak`: no --probe-interval).
    Soak,
    /// A fleet's pod from the exporter's series (`memtrial judge`).
    Fleet,
}

/// A batch job's state at its RSS peak in words: live and held bytes then, held over live
/// (`ratio`: for a variant, the median of its runs' ratios, as its table shows) and the
/// resident bytes. Held over live at that moment is what the allocator kept after the
/// program freed memory — retention then — and never the size of fragmentation: the
/// program's own peak of live bytes (the floor) may have come at another moment.
pub(crate) fn at_peak_sentence(
    live: Option<f64>,
    held: Option<f64>,
    ratio: Option<f64>,
    rss: f64,
    missing: Option<&str>,
) -> String {
    let b = format_bytes;
    match (live, held) {
        (Some(l), Some(h)) => {
            let q = ratio.unwrap_or(h / l.max(1.0));
            format!(
                "at its RSS peak: {} live, {} held by the allocator (held/live {q:.2}×{}) vs {} resident",
                b(l),
                b(h),
                if q >= FRAGMENTED {
                    ": kept after the program freed it, retention at that moment"
                } else {
                    ""
                },
                b(rss)
            )
        }
        (None, Some(h)) => format!(
            "at its RSS peak: {} held by the allocator (it offers no live-bytes figure) vs {} resident",
            b(h),
            b(rss)
        ),
        _ => format!(
            "at its RSS peak: {} resident{}",
            b(rss),
            missing
                .map(|m| format!(" (no allocator figures: {m})"))
                .unwrap_or_default()
        ),
    }
}

pub(crate) use super::trend::more_minutes;

/// The verdict's name where live growth is the allocator's count, not the program's.
pub(crate) const ALLOCATOR_DEPARTS: &str = "allocator_departs";

/// The words of [`Why::AllocatorDeparts`], shared with a run's summary (which keeps the
/// median run's sentence, not its verdict).
pub(crate) fn departs_sentence(flat_under: &[String], cause: &str, was: &str) -> String {
    format!(
        "not a leak: live bytes grow here but stay flat under {} on the same traffic; the program's live data is the same under every allocator, so the suspect is this allocator's count ({cause}) or a cycle of the program's that this window cut unevenly; was: {was}",
        list(flat_under)
    )
}

/// Why an allocator's live figure can depart from another's on the same program;
/// `higher`: this allocator counts more. `allocator` is its name as detected, or a
/// variant's name (`jemalloc`, `arena2`).
pub(crate) fn departure_cause(allocator: &str, higher: bool) -> &'static str {
    match (allocator, higher) {
        (a, true) if a.contains("jemalloc") => {
            "jemalloc's stats.allocated counts regions cached in its thread caches (stats.arenas.<i>.tcache_bytes) as allocated, and rounds each block up to its size class"
        }
        (a, true) if a.contains("mimalloc") => {
            "mimalloc counts whole blocks of its size classes, and freed blocks not yet collected from other threads' pages"
        }
        (a, true) if a.contains("tcmalloc") => {
            "tcmalloc counts each block at its size class"
        }
        (a, true) if a.contains("glibc") || a.contains("arena") => {
            "glibc's mallinfo2 counts chunks parked in its per-thread caches (tcache) as in use, and each chunk with its header"
        }
        (_, true) => "this allocator counts block headers, size-class rounding or its caches as allocated",
        (_, false) => {
            "the baseline's allocator counts more per block (glibc counts each chunk with its header and alignment) or holds the program's frees in caches it counts as in use"
        }
    }
}

impl Why {
    /// Whether the verdict says live bytes grow (`Some(true)`: a leak), stay flat
    /// (`Some(false)`: plateau, fragmentation), or could not be judged (`None`).
    pub(crate) fn live_grows(&self) -> Option<bool> {
        match self {
            Why::Leak { .. } => Some(true),
            Why::Fragmentation { .. } | Why::Plateau { .. } => Some(false),
            _ => None,
        }
    }
}

/// The rule across variants on the same traffic: the program's live bytes are the
/// program's, so a variant whose live bytes grow while another's stay flat is not called
/// a leak. For each of `moves` (a variant's name and [`Why::live_grows`]) that grows, the
/// others that stay flat; `None` where it does not grow or none stays flat. A variant
/// whose live bytes could not be judged neither confirms nor refutes.
pub(crate) fn flat_beside(moves: &[(&str, Option<bool>)]) -> Vec<Option<Vec<String>>> {
    moves
        .iter()
        .enumerate()
        .map(|(i, (_, m))| {
            if *m != Some(true) {
                return None;
            }
            let flat: Vec<String> = moves
                .iter()
                .enumerate()
                .filter(|(j, (_, o))| *j != i && *o == Some(false))
                .map(|(_, (n, _))| n.to_string())
                .collect();
            (!flat.is_empty()).then_some(flat)
        })
        .collect()
}

/// [`flat_beside`] applied to verdicts of variants on the same traffic (`(name, verdict)`):
/// each leak beside a flat variant becomes [`Why::AllocatorDeparts`]. A soak's variants.
pub(crate) fn across_variants(whys: &mut [(&str, &mut Option<Why>)]) {
    let moves: Vec<(&str, Option<bool>)> = whys
        .iter()
        .map(|(n, w)| (*n, w.as_ref().and_then(Why::live_grows)))
        .collect();
    let flats = flat_beside(&moves);
    for ((name, why), flat) in whys.iter_mut().zip(flats) {
        let Some(flat_under) = flat else { continue };
        if let Some(was) = why.take() {
            **why = Some(Why::AllocatorDeparts {
                flat_under,
                cause: departure_cause(name, true).to_string(),
                was: Box::new(was),
            });
        }
    }
}

/// "a", "a and b", "a, b and c".
fn list(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn signed(v: f64) -> String {
    if v < 0.0 {
        format!("-{}", format_bytes(-v))
    } else {
        format_bytes(v)
    }
}

/// The steady window of a run, if it has one: a server's load phase, or a worker's or
/// service's driven phase (from the end of its start-up, when the driver said so).
pub(crate) fn steady_window(r: &RunRecord) -> Option<(f64, f64)> {
    if let Some(d) = &r.driver {
        return d.steady();
    }
    let l = r.load.as_ref()?;
    (l.load_end_seconds > l.load_start_seconds)
        .then_some((l.load_start_seconds, l.load_end_seconds))
}

fn series(
    points: &[AllocatorPoint],
    (a, b): (f64, f64),
    get: impl Fn(&AllocatorPoint) -> Option<u64>,
) -> Option<Vec<(f64, f64)>> {
    points
        .iter()
        .filter(|p| p.t_seconds >= a && p.t_seconds <= b)
        .map(|p| get(p).map(|v| (p.t_seconds, v as f64)))
        .collect()
}

fn mean(xs: &[(f64, f64)]) -> f64 {
    xs.iter().map(|p| p.1).sum::<f64>() / xs.len().max(1) as f64
}

/// Why no allocator figures are at hand for this run.
fn missing_reason(r: &RunRecord) -> String {
    if let Some(reason) = r.inside.absence(crate::record::inside::ALLOCATOR_PROBE) {
        return reason.to_string();
    }
    match &r.inside.allocator {
        Some(a) if a.series.iter().all(|p| p.live_bytes.is_none()) => {
            format!("{} offers no live-bytes figure", a.answered)
        }
        Some(_) => "no allocator sample in the window".into(),
        None => "the allocator probe was off".into(),
    }
}

/// The verdict on one run.
pub(crate) fn run_why(r: &RunRecord) -> Why {
    let rules = TrendRules::default();
    let Some(window) = steady_window(r) else {
        if let Some(reason) = at_peak_absent(r) {
            return Why::AtPeak {
                live_bytes: None,
                held_bytes: None,
                rss_bytes: r.peak_rss_bytes,
                missing: Some(reason),
            };
        }
        let at = super::evidence::at_peak_point(r);
        let live = at.and_then(|p| p.live_bytes);
        let held = at.and_then(|p| p.held_bytes);
        return Why::AtPeak {
            live_bytes: live,
            held_bytes: held,
            rss_bytes: r.peak_rss_bytes,
            missing: (live.is_none()).then(|| missing_reason(r)),
        };
    };
    let rss: Vec<(f64, f64)> = r
        .samples
        .iter()
        .filter(|s| s.t_seconds >= window.0 && s.t_seconds <= window.1)
        .map(|s| (s.t_seconds, s.rss_bytes as f64))
        .collect();
    let points = r
        .inside
        .allocator
        .as_ref()
        .map_or(&[][..], |a| &a.series[..]);
    let live = series(points, window, |p| p.live_bytes).filter(|s| !s.is_empty());
    let Some(live) = live else {
        return Why::RssOnly {
            trend: trend(&rss, &rules),
            reason: missing_reason(r),
        };
    };
    let held = series(points, window, |p| p.held_bytes).filter(|s| s.len() == live.len());
    steady_why(&live, held.as_deref(), &rss, window.1 - window.0)
}

/// The verdict on a steady window from its series (`(t_seconds, bytes)`): the allocator's
/// live bytes, its held bytes (sampled with them, when it offers them) and the resident
/// memory beside them. Shared by a local run and a fleet's pods (`judge`).
pub(crate) fn steady_why(
    live: &[(f64, f64)],
    held: Option<&[(f64, f64)]>,
    rss: &[(f64, f64)],
    window_seconds: f64,
) -> Why {
    let level = mean(live);
    let held_level = held.map(mean);
    let ratio = held_level.map(|h| h / level.max(1.0));
    // Growth of live bytes is material against the footprint: the resident memory and
    // what the allocator holds, not only the live bytes themselves.
    let rules = TrendRules {
        reference_bytes: mean(rss).max(held_level.unwrap_or(0.0)),
        ..TrendRules::default()
    };
    let live_trend = trend(live, &rules);
    match live_trend {
        Trend::TooShort {
            samples,
            seconds,
            need_samples,
            need_seconds,
            late_samples,
            cycles,
            undecided,
        } => Why::TooShort {
            samples,
            seconds,
            need_samples,
            need_seconds,
            grew_bytes_per_min: None,
            late_samples,
            cycles,
            undecided,
        },
        Trend::Leak {
            slope_bytes_per_min,
            ..
        } if window_seconds < MIN_LEAK_STEADY_SECONDS => Why::TooShort {
            samples: live.len(),
            seconds: window_seconds,
            need_samples: rules.min_samples,
            need_seconds: MIN_LEAK_STEADY_SECONDS,
            grew_bytes_per_min: Some(slope_bytes_per_min),
            late_samples: None,
            cycles: None,
            undecided: None,
        },
        Trend::Leak {
            slope_bytes_per_min,
            ci,
            level_bytes,
            ..
        } => Why::Leak {
            live_slope_bytes_per_min: slope_bytes_per_min,
            ci,
            live_bytes: level_bytes,
            held_over_live: ratio,
            window_seconds,
        },
        _ => {
            let grows =
                |s: &[(f64, f64)]| matches!(trend(s, &TrendRules::default()), Trend::Leak { .. });
            let growing = held.is_some_and(grows) || grows(rss);
            let rss_bytes = mean(rss);
            match (held_level, ratio) {
                (Some(h), Some(q)) if growing || q >= FRAGMENTED => Why::Fragmentation {
                    live_bytes: level,
                    held_bytes: h,
                    held_over_live: q,
                    unused_bytes: (h - level).max(0.0),
                    growing,
                    rss_bytes,
                    window_seconds,
                },
                _ => Why::Plateau {
                    live_bytes: level,
                    held_bytes: held_level,
                    rss_bytes,
                    window_seconds,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{AllocatorView, LoadFigures, TreeSample};

    fn run(points: Vec<(f64, u64, u64)>, rss: impl Fn(f64) -> u64, load: bool) -> RunRecord {
        let mut r = RunRecord::skeleton("v", 0, false, String::new());
        r.peak_rss_bytes = 300 << 20;
        r.samples = (0..=200)
            .map(|i| {
                let t = i as f64 * 0.1;
                TreeSample {
                    t_seconds: t,
                    rss_bytes: rss(t),
                    vsz_bytes: 0,
                    threads: 1,
                    pss_bytes: None,
                    uss_bytes: None,
                    processes: 1,
                }
            })
            .collect();
        let series: Vec<AllocatorPoint> = points
            .into_iter()
            .map(|(t, live, held)| AllocatorPoint {
                t_seconds: t,
                live_bytes: Some(live),
                held_bytes: Some(held),
                ..Default::default()
            })
            .collect();
        r.inside.allocator = Some(AllocatorView {
            answered: "glibc".into(),
            library: "libc.so.6".into(),
            processes: 1,
            interval_ms: 250,
            disagreement: None,
            at_peak: series.last().cloned(),
            peak_live_bytes: None,
            peak_held_bytes: None,
            series,
            holes: None,
        });
        if load {
            let mut l: LoadFigures = serde_json::from_value(serde_json::json!({
                "requests": 1, "throughput_rps": 1.0,
                "errors": {"connect": 0, "timeout": 0, "status_4xx": 0, "status_5xx": 0, "other": 0},
                "latency_mean_ms": 1.0, "latency_p50_ms": 1.0, "latency_p90_ms": 1.0,
                "latency_p95_ms": 1.0, "latency_p99_ms": 1.0, "latency_p999_ms": 1.0,
                "latency_max_ms": 1.0, "latency_quantiles": [], "per_second": [],
                "target_rate": null, "client_cpu_seconds": 0.0, "client_saturated": false,
                "ready_seconds": 1.0, "load_start_seconds": 2.0, "load_end_seconds": 18.0,
                "cooldown_end_seconds": 18.0
            }))
            .expect("load figures");
            l.load_start_seconds = 2.0;
            r.load = Some(l);
        }
        r
    }

    const MB: u64 = 1 << 20;

    #[test]
    fn growing_live_bytes_are_a_leak() {
        // 150 s of steady load, sampled every second, live growing 2 MiB/s throughout.
        let pts = (0..160).map(|i| {
            let t = i as f64;
            (
                t,
                50 * MB + (t * 2.0 * MB as f64) as u64,
                60 * MB + (t * 2.0 * MB as f64) as u64,
            )
        });
        let mut w = run(
            pts.collect(),
            |t| (100.0 * MB as f64 + t * 2e6) as u64,
            true,
        );
        if let Some(l) = w.load.as_mut() {
            l.load_end_seconds = 155.0;
        }
        let why = run_why(&w);
        assert_eq!(why.name(), "leak", "{}", why.sentence());
        assert!(why.sentence().contains("/min"));
    }

    #[test]
    fn growth_over_a_steady_phase_shorter_than_the_minimum_is_too_short_not_a_leak() {
        // 16 s of load: growth that may be warm-up (a Ruby worker filling its caches).
        let pts = (0..80).map(|i| {
            let t = i as f64 * 0.25;
            (
                t,
                50 * MB + (t * 2.0 * MB as f64) as u64,
                60 * MB + (t * 2.0 * MB as f64) as u64,
            )
        });
        let w = run(
            pts.collect(),
            |t| (100.0 * MB as f64 + t * 2e6) as u64,
            true,
        );
        let why = run_why(&w);
        assert_eq!(why.name(), "too_short", "{}", why.sentence());
        let s = why.sentence();
        assert!(s.contains("needs 120 s"), "{s}");
        assert!(s.contains("run 2 more minutes"), "{s}");
    }

    #[test]
    fn flat_live_with_held_twice_live_is_fragmentation() {
        let pts = (0..80).map(|i| (i as f64 * 0.25, 100 * MB + (i % 3) * 4096, 200 * MB));
        let w = run(pts.collect(), |_| 210 * MB, true);
        match run_why(&w) {
            Why::Fragmentation {
                held_over_live,
                growing,
                ..
            } => {
                assert!((held_over_live - 2.0).abs() < 0.01, "{held_over_live}");
                assert!(!growing);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rss_growing_over_flat_live_is_growing_fragmentation() {
        let pts = (0..80).map(|i| (i as f64 * 0.25, 100 * MB, 110 * MB));
        let w = run(
            pts.collect(),
            |t| (150.0 * MB as f64 + t * 4e6) as u64,
            true,
        );
        match run_why(&w) {
            Why::Fragmentation { growing, .. } => assert!(growing),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_step_then_flat_is_a_plateau() {
        let pts = (0..80).map(|i| {
            let t = i as f64 * 0.25;
            let live = if t < 4.0 { 50 * MB } else { 80 * MB };
            (t, live, live + MB)
        });
        let w = run(
            pts.collect(),
            |t| if t < 4.0 { 60 * MB } else { 90 * MB },
            true,
        );
        assert_eq!(run_why(&w).name(), "plateau", "{}", run_why(&w).sentence());
    }

    #[test]
    fn few_samples_are_too_short_and_say_what_would_do() {
        let pts = (0..4).map(|i| (2.0 + i as f64 * 4.0, 10 * MB, 12 * MB));
        let w = run(pts.collect(), |_| 20 * MB, true);
        let why = run_why(&w);
        assert_eq!(why.name(), "too_short");
        assert!(why.sentence().contains("--probe-interval"));
        // A soak has no --probe-interval, a fleet neither: each is told what it has.
        let soak = why.sentence_for(Judged::Soak);
        assert!(
            !soak.contains("--probe-interval") && soak.contains("--duration"),
            "{soak}"
        );
        let fleet = why.sentence_for(Judged::Fleet);
        assert!(
            !fleet.contains("--probe-interval") && fleet.contains("--since"),
            "{fleet}"
        );
    }

    #[test]
    fn a_batch_job_gets_its_state_at_the_peak() {
        let mut w = run(
            vec![
                (0.0, MB, 2 * MB),
                (1.0, 100 * MB, 200 * MB),
                (2.0, 100 * MB, 200 * MB),
            ],
            |_| 210 * MB,
            false,
        );
        w.wall_seconds = 3.0;
        w.peak_rss_bytes = 210 * MB;
        let why = run_why(&w);
        assert_eq!(why.name(), "at_peak");
        assert!(
            why.sentence()
                .contains("at its RSS peak: 100 MiB live, 200 MiB held by the allocator (held/live 2.00×: kept after the program freed it"),
            "{}",
            why.sentence()
        );
    }

    #[test]
    fn a_batch_job_shorter_than_two_probe_intervals_gets_no_allocator_figures() {
        let mut w = run(vec![(0.0, 1200, 132 * 1024)], |_| 217 * MB, false);
        w.wall_seconds = 0.55;
        if let Some(a) = w.inside.allocator.as_mut() {
            a.interval_ms = 1000;
        }
        let why = run_why(&w);
        match &why {
            Why::AtPeak {
                live_bytes: None,
                held_bytes: None,
                missing: Some(m),
                ..
            } => assert!(m.contains("--probe-interval 22ms"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Samples between start and exit, one at the peak: the figures stand.
        w.wall_seconds = 2.5;
        w.peak_rss_bytes = 217 * MB;
        if let Some(a) = w.inside.allocator.as_mut() {
            a.series.push(AllocatorPoint {
                t_seconds: 1.0,
                live_bytes: Some(1300),
                held_bytes: Some(132 * 1024),
                ..Default::default()
            });
        }
        assert!(matches!(
            run_why(&w),
            Why::AtPeak {
                live_bytes: Some(1300),
                ..
            }
        ));
    }

    /// `(t, bytes)` every second for `seconds`, from `f(t)`.
    fn every_second(seconds: usize, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..seconds).map(|i| (i as f64, f(i as f64))).collect()
    }

    #[test]
    fn live_growth_is_material_against_the_footprint_not_only_live() {
        // Live 8 MiB growing 0.5 MiB over the later half of 200 s: 6% of live, but 0.25%
        // of a 200 MiB process — not a leak, whatever its interval.
        let live = every_second(200, |t| 8.0 * MB as f64 + 5_000.0 * t);
        let rss = every_second(200, |_| 200.0 * MB as f64);
        let why = steady_why(&live, None, &rss, 200.0);
        assert_ne!(why.name(), "leak", "{}", why.sentence());
        // The same growth beside a 20 MiB process is one.
        let rss = every_second(200, |_| 20.0 * MB as f64);
        assert_eq!(steady_why(&live, None, &rss, 200.0).name(), "leak");
    }

    #[test]
    fn a_leak_beside_flat_variants_on_the_same_traffic_is_the_allocators_count() {
        let rss = every_second(200, |_| 120.0 * MB as f64);
        let grows = steady_why(
            &every_second(200, |t| 38.0 * MB as f64 + 60_000.0 * t),
            None,
            &rss,
            200.0,
        );
        let flat = steady_why(&every_second(200, |_| 38.0 * MB as f64), None, &rss, 200.0);
        assert_eq!((grows.name(), flat.name()), ("leak", "plateau"));
        let (mut a, mut b, mut c) = (Some(grows.clone()), Some(flat.clone()), None);
        let mut whys = vec![("glibc", &mut a), ("arena1", &mut b), ("arena2", &mut c)];
        across_variants(&mut whys);
        let w = a.unwrap();
        assert_eq!(w.name(), "allocator_departs");
        // arena2 had no verdict: it neither confirms nor refutes.
        assert!(
            w.sentence().starts_with(
                "not a leak: live bytes grow here but stay flat under arena1 on the same traffic"
            ),
            "{}",
            w.sentence()
        );
        assert!(w.sentence().contains("mallinfo2"), "{}", w.sentence());
        assert_eq!(w.live_and_held(), grows.live_and_held());
        assert_eq!(b.unwrap().name(), "plateau");
        // Growing everywhere: the program's, a leak.
        let (mut a, mut b) = (Some(grows.clone()), Some(grows.clone()));
        across_variants(&mut [("glibc", &mut a), ("jemalloc", &mut b)]);
        assert_eq!((a.unwrap().name(), b.unwrap().name()), ("leak", "leak"));
    }

    #[test]
    fn without_allocator_figures_the_rss_verdict_says_it_is_weaker() {
        let mut w = run(vec![], |t| (100.0 * MB as f64 + t * 4e6) as u64, true);
        w.inside = Default::default();
        let why = run_why(&w);
        assert_eq!(why.name(), "rss_only");
        assert!(why
            .sentence()
            .contains("cannot tell a leak from fragmentation"));
    }
}
