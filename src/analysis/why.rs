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

use super::trend::{trend, Trend, TrendRules};
use crate::record::{AllocatorPoint, RunRecord};
use crate::units::format_bytes;

/// Held bytes at least this many times the live bytes count as fragmentation/retention.
pub(crate) const FRAGMENTED: f64 = 1.25;

/// The unused bytes (held − live) must be at least this share of the peak RSS for the
/// report to headline fragmentation: a heap far smaller than the footprint is no story.
pub(crate) const MATERIAL_SHARE: f64 = 0.05;

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
            Why::TooShort { .. } | Why::RssOnly { .. } => (None, None),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Why::Leak { .. } => "leak",
            Why::Fragmentation { .. } => "fragmentation",
            Why::Plateau { .. } => "plateau",
            Why::TooShort { .. } => "too_short",
            Why::AtPeak { .. } => "at_peak",
            Why::RssOnly { .. } => "rss_only",
        }
    }

    /// One line for people, with the figures it rests on.
    pub fn sentence(&self) -> String {
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
            } => format!(
                "too short to judge: {samples} allocator samples over {seconds:.1} s of steady load{} (need {need_samples} over {need_seconds:.0} s: a longer --duration or a shorter --probe-interval)",
                super::trend::late_clause(*late_samples)
            ),
            Why::AtPeak {
                live_bytes,
                held_bytes,
                rss_bytes,
                missing,
            } => match (live_bytes, held_bytes) {
                (Some(l), Some(h)) => format!(
                    "at its peak: {} live vs {} held by the allocator ({:.2}×) vs {} resident",
                    b(*l as f64),
                    b(*h as f64),
                    *h as f64 / (*l).max(1) as f64,
                    b(*rss_bytes as f64)
                ),
                (None, Some(h)) => format!(
                    "at its peak: {} held by the allocator (it offers no live-bytes figure) vs {} resident",
                    b(*h as f64),
                    b(*rss_bytes as f64)
                ),
                _ => format!(
                    "at its peak: {} resident{}",
                    b(*rss_bytes as f64),
                    missing
                        .as_ref()
                        .map(|m| format!(" (no allocator figures: {m})"))
                        .unwrap_or_default()
                ),
            },
            Why::RssOnly { trend, reason } => format!(
                "{} (RSS only, which cannot tell a leak from fragmentation: {reason})",
                super::trend_phrase(trend)
            ),
        }
    }
}

/// "1 more minute", "3 more minutes" (for "run N more minutes"): rounded up.
pub(crate) fn more_minutes(seconds: f64) -> String {
    let m = (seconds.max(0.0) / 60.0).ceil().max(1.0) as u64;
    if m == 1 {
        "1 more minute".into()
    } else {
        format!("{m} more minutes")
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
    let rules = TrendRules::default();
    let live_trend = trend(live, &rules);
    let level = mean(live);
    let held_level = held.map(mean);
    let ratio = held_level.map(|h| h / level.max(1.0));
    match live_trend {
        Trend::TooShort {
            samples,
            seconds,
            need_samples,
            need_seconds,
            late_samples,
        } => Why::TooShort {
            samples,
            seconds,
            need_samples,
            need_seconds,
            grew_bytes_per_min: None,
            late_samples,
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
            let grows = |s: &[(f64, f64)]| matches!(trend(s, &rules), Trend::Leak { .. });
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
            why.sentence().contains("100 MiB live vs 200 MiB held"),
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
