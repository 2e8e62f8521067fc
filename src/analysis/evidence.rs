//! The rule each kind of figure must meet before it is shown, and the evidence of one
//! figure in one run (docs/methodology.md, "What each figure rests on").
//!
//! - Kernel marks and counters (peak RSS from `wait4`/`VmHWM`, the cgroup's peak, CPU and
//!   wall time) and the load generator's counts are exact: they always stand.
//! - A whole-run figure from the sampled series (mean RSS, final RSS) needs at least
//!   [`MIN_SERIES_SAMPLES`] samples spanning at least [`MIN_SERIES_SHARE`] of the run.
//! - A peak from PSS reads (peak PSS, peak USS) needs at least [`MIN_PSS_SAMPLES`] reads,
//!   one of them at the memory peak: taken at a sample whose tree RSS reaches
//!   [`AT_PEAK_FRACTION`] of the largest sampled tree RSS (reads only during a shim's
//!   start-up do not).
//! - The allocator's figures at the peak (live, held, held/live) need at least
//!   [`MIN_AT_PEAK_SAMPLES`] allocator samples at the run's memory peak — the tree's RSS
//!   on both sides of each reaches [`AT_PEAK_FRACTION`] of the run's peak, and none in
//!   the run's last [`END_SHARE`] (teardown) — and they come from the one of those where
//!   the allocator held the most.
//!
//! A figure below its rule is absent — with the reason and what would give it — and never
//! enters a median, a ratio, a verdict, a Pareto front or a recommendation.

use super::Figure;
use crate::record::evidence::{Coverage, Evidence, Moment, Source, Standing};
use crate::record::{PeakSource, RunRecord, TreeSample};

/// Fewest tree samples for a whole-run figure (mean or final RSS).
pub(crate) const MIN_SERIES_SAMPLES: usize = 4;
/// Smallest share of the run the samples of a whole-run figure must span.
pub(crate) const MIN_SERIES_SHARE: f64 = 0.75;
/// Fewest PSS reads for peak PSS or USS.
pub(crate) const MIN_PSS_SAMPLES: usize = 2;
/// Fewest allocator samples for its figures at the peak.
pub(crate) const MIN_ALLOCATOR_SAMPLES: usize = 2;
/// The tree's RSS around the allocator's sample must reach this share of the run's peak
/// for that sample to stand for the peak.
pub(crate) const AT_PEAK_FRACTION: f64 = 0.9;
/// The shortest `--interval` and `--probe-interval`, milliseconds.
const SHORTEST_INTERVAL_MS: u64 = 10;

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// Samples a suggested interval aims at over the run: well above every rule.
const SUGGESTED_SAMPLES: f64 = 25.0;

/// The interval that would give about [`SUGGESTED_SAMPLES`] samples over a run of `wall`
/// seconds; `None` when even the shortest interval cannot give `need`.
fn interval_for(wall: f64, need: usize) -> Option<u64> {
    let ms = (wall * 1000.0 / SUGGESTED_SAMPLES).floor() as u64;
    if ms >= SHORTEST_INTERVAL_MS {
        Some(ms)
    } else {
        (wall * 1000.0 / SHORTEST_INTERVAL_MS as f64 >= need as f64).then_some(SHORTEST_INTERVAL_MS)
    }
}

fn remedy(flag: &str, wall: f64, need: usize) -> String {
    match interval_for(wall, need) {
        Some(ms) => format!("{flag} {ms}ms"),
        None => format!(
            "a run of at least {} ({} at the shortest {flag}, {SHORTEST_INTERVAL_MS}ms)",
            crate::units::format_seconds(need as f64 * SHORTEST_INTERVAL_MS as f64 / 1000.0),
            plural(need, "sample")
        ),
    }
}

fn span(ts: &[f64]) -> f64 {
    match (ts.first(), ts.last()) {
        (Some(a), Some(b)) => (b - a).max(0.0),
        _ => 0.0,
    }
}

/// A sampled figure: stands when enough samples span enough of the run.
fn sampled(
    r: &RunRecord,
    moment: Moment,
    ts: &[f64],
    need: usize,
    share: f64,
    what: &str,
    flag: &str,
) -> Evidence {
    let coverage = Coverage {
        samples: ts.len(),
        span_seconds: span(ts),
        run_seconds: r.wall_seconds,
        brackets_peak: None,
    };
    let standing = if ts.len() < need {
        Standing::Absent {
            reason: format!(
                "{} in a {} run (needs {need})",
                plural(ts.len(), what),
                crate::units::format_seconds(r.wall_seconds)
            ),
            remedy: remedy(flag, r.wall_seconds, need),
        }
    } else if coverage.share() < share {
        Standing::Absent {
            reason: format!(
                "{} cover {:.0}% of the {} run (needs {:.0}%)",
                plural(ts.len(), what),
                coverage.share() * 100.0,
                crate::units::format_seconds(r.wall_seconds),
                share * 100.0
            ),
            remedy: remedy(flag, r.wall_seconds, need),
        }
    } else {
        Standing::Stands
    };
    Evidence {
        source: Source::SampledSeries,
        moment,
        coverage: Some(coverage),
        standing,
    }
}

/// The run's memory peak as the evidence rules compare against: the larger of the
/// sampled tree sum and, for a run of one process at a time, the kernel's mark.
fn reference_peak(r: &RunRecord) -> f64 {
    let sampled = r.samples.iter().map(|s| s.rss_bytes).max().unwrap_or(0);
    let kernel = if r.processes_at_once() <= 1 {
        r.peak_rss_bytes
    } else {
        0
    };
    sampled.max(kernel) as f64
}

/// The tree's RSS around moment `t`: the lower of the samples either side of it (both
/// must be near the peak for the moment to be at it).
fn rss_around(samples: &[TreeSample], t: f64) -> Option<u64> {
    let after = samples.iter().position(|s| s.t_seconds >= t)?;
    let at = samples.get(after)?;
    if at.t_seconds == t || after == 0 {
        return Some(at.rss_bytes);
    }
    let before = samples.get(after - 1)?;
    Some(before.rss_bytes.min(at.rss_bytes))
}

/// The last stretch of a run, in which a sample cannot be told from the program's
/// teardown (freeing everything while RSS, not yet trimmed, still shows the peak): the
/// last [`END_SHARE`] of the run, or after the last memory sample.
fn in_teardown(r: &RunRecord, t: f64) -> bool {
    let last = r.samples.last().map_or(0.0, |s| s.t_seconds);
    t > last || t >= r.wall_seconds * (1.0 - END_SHARE)
}

/// Share of the run at its end in which an allocator sample does not stand for the peak.
pub(crate) const END_SHARE: f64 = 0.05;

/// The resident bytes at allocator sample `p`. In a run of one process at a time the probe
/// read the process's own as it took the sample: that says where the sample lies, in the
/// run's last stretch too (mimalloc's RSS peaked in the last 3% of the demo's job). Without
/// it (several processes, a record of an older release), the tree's on both sides of it
/// ([`rss_around`]), and never in the run's teardown, where RSS not yet trimmed cannot be
/// told from the peak.
fn rss_at(r: &RunRecord, p: &crate::record::AllocatorPoint) -> Option<u64> {
    let around = || rss_around(&r.samples, p.t_seconds);
    match p.rss_bytes.filter(|_| r.processes_at_once() <= 1) {
        Some(own) => Some(own.max(around().unwrap_or(0))),
        None if in_teardown(r, p.t_seconds) => None,
        None => around(),
    }
}

/// Whether allocator sample `p` lies at the run's memory peak: the resident bytes at it
/// ([`rss_at`]) reach [`AT_PEAK_FRACTION`] of the peak.
fn at_the_peak(r: &RunRecord, p: &crate::record::AllocatorPoint, reference: f64) -> bool {
    reference > 0.0 && rss_at(r, p).is_some_and(|rss| rss as f64 >= AT_PEAK_FRACTION * reference)
}

/// The allocator's figures at the run's memory peak: among the allocator samples that lie
/// at the peak, the one where it held the most (and, of those, where live was highest).
/// The one computation behind "live at peak", "held at peak", held/live and the batch
/// verdict's "at its peak" sentence; `None` when no sample meets the rule.
pub(crate) fn at_peak_point(r: &RunRecord) -> Option<&crate::record::AllocatorPoint> {
    let a = r.inside.allocator.as_ref()?;
    if a.series.len() < MIN_ALLOCATOR_SAMPLES {
        return None;
    }
    let reference = reference_peak(r);
    let at: Vec<&crate::record::AllocatorPoint> = a
        .series
        .iter()
        .filter(|p| at_the_peak(r, p, reference))
        .collect();
    // One sample on the plateau cannot tell the peak of live bytes from a moment after
    // the program freed them (RSS, not yet trimmed, still shows the peak).
    if at.len() < MIN_AT_PEAK_SAMPLES {
        return None;
    }
    crate::record::AllocatorPoint::most_held(at)
}

/// Fewest allocator samples at the memory peak for its figures there to stand.
pub(crate) const MIN_AT_PEAK_SAMPLES: usize = 2;

/// The evidence of the allocator's figures at the peak in one run; `None` without the
/// allocator probe's figures.
pub(crate) fn allocator_at_peak(r: &RunRecord) -> Option<Evidence> {
    let a = r.inside.allocator.as_ref()?;
    let ts: Vec<f64> = a.series.iter().map(|p| p.t_seconds).collect();
    let reference = reference_peak(r);
    let chosen = at_peak_point(r);
    let coverage = Coverage {
        samples: ts.len(),
        span_seconds: span(&ts),
        run_seconds: r.wall_seconds,
        brackets_peak: Some(chosen.is_some()),
    };
    let flag = "--probe-interval";
    let remedy = remedy(flag, r.wall_seconds, MIN_ALLOCATOR_SAMPLES + 1);
    let standing = if chosen.is_some() {
        Standing::Stands
    } else if ts.len() < MIN_ALLOCATOR_SAMPLES {
        Standing::Absent {
            reason: format!(
                "{} in a {} run",
                plural(ts.len(), "allocator sample"),
                crate::units::format_seconds(r.wall_seconds)
            ),
            remedy,
        }
    } else if a.series.iter().any(|p| at_the_peak(r, p, reference)) {
        Standing::Absent {
            reason: format!(
                "1 of {} in a {} run lies at the memory peak (needs {MIN_AT_PEAK_SAMPLES}: one cannot tell the peak of live bytes from a moment after they were freed, while RSS still shows the peak)",
                plural(ts.len(), "allocator sample"),
                crate::units::format_seconds(r.wall_seconds)
            ),
            remedy,
        }
    } else {
        // The sample nearest the peak in RSS terms, to say how far off it was.
        let best = a
            .series
            .iter()
            .filter_map(|p| Some((p.t_seconds, rss_at(r, p)?)))
            .max_by_key(|(_, rss)| *rss);
        let nearest = match best {
            Some((t, rss)) => format!(
                "the nearest, at {t:.2} s, saw RSS at {} of a {} peak",
                crate::units::format_bytes(rss as f64),
                crate::units::format_bytes(reference)
            ),
            None => {
                "the others came as the run ended, when a program frees what it held".to_string()
            }
        };
        Standing::Absent {
            reason: format!(
                "none of {} in a {} run lies at the memory peak ({nearest})",
                plural(ts.len(), "allocator sample"),
                crate::units::format_seconds(r.wall_seconds)
            ),
            remedy,
        }
    };
    Some(Evidence {
        source: Source::AllocatorProbe,
        moment: Moment::Peak,
        coverage: Some(coverage),
        standing,
    })
}

/// The evidence of peak PSS (and USS, read with it) in one run: enough reads, one of them
/// at the memory peak.
fn pss_at_peak(r: &RunRecord) -> Evidence {
    let reads: Vec<&TreeSample> = r.samples.iter().filter(|s| s.pss_bytes.is_some()).collect();
    let ts: Vec<f64> = reads.iter().map(|s| s.t_seconds).collect();
    let peak = r.samples.iter().map(|s| s.rss_bytes).max().unwrap_or(0) as f64;
    let best = reads.iter().map(|s| s.rss_bytes).max().unwrap_or(0) as f64;
    let at_peak = peak > 0.0 && best >= AT_PEAK_FRACTION * peak;
    let coverage = Coverage {
        samples: ts.len(),
        span_seconds: span(&ts),
        run_seconds: r.wall_seconds,
        brackets_peak: Some(at_peak),
    };
    let budget = "PSS reads are spaced by their CPU budget (0.2% of a core)";
    let standing = if ts.len() < MIN_PSS_SAMPLES {
        Standing::Absent {
            reason: format!(
                "{} in a {} run (needs {MIN_PSS_SAMPLES})",
                plural(ts.len(), "PSS read"),
                crate::units::format_seconds(r.wall_seconds)
            ),
            remedy: format!("a longer run ({budget})"),
        }
    } else if !at_peak {
        Standing::Absent {
            reason: format!(
                "none of {} lies at the memory peak (the tree's RSS at them reached {} of a {} peak)",
                plural(ts.len(), "PSS read"),
                crate::units::format_bytes(best),
                crate::units::format_bytes(peak)
            ),
            remedy: format!("a run that stays near its peak longer ({budget})"),
        }
    } else {
        Standing::Stands
    };
    Evidence {
        source: Source::SampledSeries,
        moment: Moment::Peak,
        coverage: Some(coverage),
        standing,
    }
}

/// The evidence of figure `f` in run `r`; `None` where the run has no such figure.
pub fn of(f: Figure, r: &RunRecord) -> Option<Evidence> {
    match f {
        Figure::PeakOverFloor => return None,
        Figure::PeakLiveBytes => return peak_live(r),
        _ => {}
    }
    if f.explains() {
        // Present when the allocator offers the figure at all, standing or not.
        let a = r.inside.allocator.as_ref()?;
        let offers = |g: fn(&crate::record::AllocatorPoint) -> Option<u64>| {
            a.series.iter().any(|p| g(p).is_some())
        };
        let offered = match f {
            Figure::LiveAtPeakBytes => offers(|p| p.live_bytes),
            Figure::HeldAtPeakBytes => offers(|p| p.held_bytes),
            _ => offers(|p| p.live_bytes) && offers(|p| p.held_bytes),
        };
        return offered.then(|| allocator_at_peak(r)).flatten();
    }
    f.of(r)?;
    let tree_ts: Vec<f64> = r.samples.iter().map(|s| s.t_seconds).collect();
    Some(match f {
        Figure::PeakRssBytes => match r.peak_rss_source {
            PeakSource::Wait4Maxrss | PeakSource::VmHwm => Evidence::exact(Source::KernelMark),
            // The largest sampled sum, chosen only when above every kernel mark: it stands
            // as the lower bound it is, with its samples.
            PeakSource::SampledTreeSum => Evidence {
                source: Source::SampledSeries,
                moment: Moment::Peak,
                coverage: Some(Coverage {
                    samples: tree_ts.len(),
                    span_seconds: span(&tree_ts),
                    run_seconds: r.wall_seconds,
                    brackets_peak: None,
                }),
                standing: Standing::Stands,
            },
        },
        Figure::MeanRssBytes | Figure::FinalRssBytes => sampled(
            r,
            Moment::WholeRun,
            &tree_ts,
            MIN_SERIES_SAMPLES,
            MIN_SERIES_SHARE,
            "memory sample",
            "--interval",
        ),
        Figure::PeakPssBytes | Figure::PeakUssBytes => pss_at_peak(r),
        Figure::PeakVszBytes | Figure::ThreadsPeak => Evidence {
            source: Source::SampledSeries,
            moment: Moment::Peak,
            coverage: Some(Coverage {
                samples: tree_ts.len(),
                span_seconds: span(&tree_ts),
                run_seconds: r.wall_seconds,
                brackets_peak: None,
            }),
            standing: Standing::Stands,
        },
        Figure::CgroupPeakBytes | Figure::CgroupAnonPeakBytes => {
            Evidence::exact(Source::KernelMark)
        }
        Figure::WallSeconds
        | Figure::CpuSeconds
        | Figure::CpuUserSeconds
        | Figure::CpuSysSeconds
        | Figure::ThrottledSeconds => Evidence::exact(Source::KernelCounter),
        Figure::Requests
        | Figure::ThroughputRps
        | Figure::LatencyP50Ms
        | Figure::LatencyP90Ms
        | Figure::LatencyP95Ms
        | Figure::LatencyP99Ms
        | Figure::LatencyMaxMs
        | Figure::Errors => Evidence::exact(Source::Driver),
        Figure::LiveAtPeakBytes | Figure::HeldAtPeakBytes | Figure::HeldOverLive => {
            allocator_at_peak(r)?
        }
        Figure::PeakLiveBytes => peak_live(r)?,
        Figure::PeakOverFloor => return None,
    })
}

/// The evidence of the run's peak of live bytes (the highest the allocator's samples saw):
/// a lower bound of the program's own, standing when the samples span the run as a
/// whole-run figure's must ([`MIN_SERIES_SAMPLES`] over [`MIN_SERIES_SHARE`] of it).
fn peak_live(r: &RunRecord) -> Option<Evidence> {
    let a = r.inside.allocator.as_ref()?;
    let ts: Vec<f64> = a
        .series
        .iter()
        .filter(|p| p.live_bytes.is_some())
        .map(|p| p.t_seconds)
        .collect();
    a.peak_live_bytes?;
    let e = sampled(
        r,
        Moment::Peak,
        &ts,
        MIN_SERIES_SAMPLES,
        MIN_SERIES_SHARE,
        "allocator sample",
        "--probe-interval",
    );
    Some(Evidence {
        source: Source::AllocatorProbe,
        ..e
    })
}

/// Whether figure `f` of run `r` meets its rule.
pub fn stands(f: Figure, r: &RunRecord) -> bool {
    of(f, r).is_some_and(|e| e.standing.stands())
}

/// How long several processes coexisted, as a share of the run: a forking server shares
/// for most of its run; a shim, a wrapper or `sh -c` only during start-up.
pub(crate) fn sharing_share(r: &RunRecord) -> f64 {
    let s = &r.samples;
    if s.len() < 2 || r.wall_seconds <= 0.0 {
        return 0.0;
    }
    let mut multi = 0.0;
    for w in s.windows(2) {
        if w[0].processes >= 2 {
            multi += (w[1].t_seconds - w[0].t_seconds).max(0.0);
        }
    }
    let total = (s[s.len() - 1].t_seconds - s[0].t_seconds).max(0.0);
    if total <= 0.0 {
        return 0.0;
    }
    (multi / total).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{AllocatorPoint, AllocatorView};

    const MB: u64 = 1 << 20;

    /// A memory sample: seconds, RSS, processes, PSS.
    type Point = (f64, u64, u32, Option<u64>);

    fn run(wall: f64, samples: &[(f64, u64, u32, Option<u64>)]) -> RunRecord {
        let mut r = RunRecord::skeleton("v", 0, false, String::new());
        r.status = crate::record::RunStatus::Ok;
        r.wall_seconds = wall;
        r.samples = samples
            .iter()
            .map(|&(t, rss, processes, pss)| TreeSample {
                t_seconds: t,
                rss_bytes: rss,
                vsz_bytes: 0,
                threads: 1,
                pss_bytes: pss,
                uss_bytes: pss,
                processes,
            })
            .collect();
        r.peak_rss_bytes = r.samples.iter().map(|s| s.rss_bytes).max().unwrap_or(0);
        r.peak_pss_bytes = r.samples.iter().filter_map(|s| s.pss_bytes).max();
        r.peak_uss_bytes = r.peak_pss_bytes;
        r.mean_rss_bytes = 1;
        r.final_rss_bytes = 1;
        r
    }

    fn with_allocator(mut r: RunRecord, points: &[(f64, u64, u64)], at: usize) -> RunRecord {
        let series: Vec<AllocatorPoint> = points
            .iter()
            .map(|&(t, live, held)| AllocatorPoint {
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
            interval_ms: 1000,
            disagreement: None,
            at_peak: series.get(at).cloned(),
            peak_live_bytes: None,
            peak_held_bytes: None,
            series,
            holes: None,
        });
        r
    }

    #[test]
    fn a_mean_over_one_sample_of_a_short_run_is_absent_with_what_would_give_it() {
        // A 42 ms run sampled once at its start: its "mean" is the start, not the run.
        let r = run(0.042, &[(0.0, 306 << 10, 1, None)]);
        let e = of(Figure::MeanRssBytes, &r).unwrap();
        match &e.standing {
            Standing::Absent { reason, remedy } => {
                assert_eq!(reason, "1 memory sample in a 42 ms run (needs 4)");
                // Four samples fit in 42 ms only at the shortest interval.
                assert_eq!(remedy, "--interval 10ms");
            }
            other => panic!("{other:?}"),
        }
        // The kernel's peak of the same run stands.
        assert!(stands(Figure::PeakRssBytes, &r));
    }

    #[test]
    fn a_mean_over_samples_spanning_the_run_stands() {
        let pts: Vec<(f64, u64, u32, Option<u64>)> = (0..10)
            .map(|i| (i as f64 * 0.1, 10 * MB, 1, None))
            .collect();
        let r = run(0.95, &pts);
        assert!(stands(Figure::MeanRssBytes, &r));
        // Samples only over the first third: the mean does not cover the run.
        let r = run(3.0, &pts);
        let e = of(Figure::MeanRssBytes, &r).unwrap();
        assert!(!e.standing.stands(), "{e:?}");
        assert!(
            matches!(&e.standing, Standing::Absent { remedy, .. } if remedy == "--interval 120ms")
        );
    }

    #[test]
    fn allocator_figures_from_the_start_of_a_run_do_not_stand_for_its_peak() {
        // The 1 s, 8-thread job: the allocator sampled at 0 s and at exit, RSS peaked between.
        let pts: Vec<(f64, u64, u32, Option<u64>)> = (0..10)
            .map(|i| {
                let t = i as f64 * 0.1;
                (
                    t,
                    if (0.3..0.8).contains(&t) {
                        200 * MB
                    } else {
                        2 * MB
                    },
                    1,
                    None,
                )
            })
            .collect();
        let r = with_allocator(
            run(0.99, &pts),
            &[(0.0, 1500, 132 << 10), (0.98, 1400, 120 << 10)],
            0,
        );
        let e = allocator_at_peak(&r).unwrap();
        assert_eq!(e.coverage.as_ref().unwrap().brackets_peak, Some(false));
        match &e.standing {
            Standing::Absent { reason, remedy } => {
                assert!(
                    reason.contains(
                        "none of 2 allocator samples in a 990 ms run lies at the memory peak"
                    ),
                    "{reason}"
                );
                assert_eq!(remedy, "--probe-interval 39ms");
            }
            other => panic!("{other:?}"),
        }
        assert!(!stands(Figure::HeldOverLive, &r));
        // One sample on the plateau (it might come after the frees): not enough.
        let r = with_allocator(
            run(0.99, &pts),
            &[
                (0.0, 1500, 132 << 10),
                (0.5, 150 * MB, 190 * MB),
                (0.98, 1400, 120 << 10),
            ],
            1,
        );
        assert!(!stands(Figure::LiveAtPeakBytes, &r));
        let e = allocator_at_peak(&r).unwrap();
        assert!(
            matches!(&e.standing, Standing::Absent { reason, .. } if reason.starts_with("1 of 3 allocator samples in a 990 ms run lies at the memory peak (needs 2")),
            "{e:?}"
        );
        // Two: the one where the allocator held the most (then live was highest) stands.
        let r = with_allocator(
            run(0.99, &pts),
            &[
                (0.0, 1500, 132 << 10),
                (0.4, 150 * MB, 190 * MB),
                (0.6, 3000, 190 * MB),
                (0.98, 1400, 120 << 10),
            ],
            1,
        );
        assert!(stands(Figure::LiveAtPeakBytes, &r));
        assert_eq!(Figure::LiveAtPeakBytes.of(&r), Some((150 * MB) as f64));
        // A sample as the run ends, RSS not yet trimmed while everything is freed: it
        // cannot be told from teardown.
        let mut late = pts.clone();
        late.iter_mut()
            .filter(|p| p.0 >= 0.3)
            .for_each(|p| p.1 = 200 * MB);
        let r = with_allocator(
            run(0.99, &late),
            &[(0.0, 1500, 132 << 10), (0.97, 38 * MB, 130 * MB)],
            1,
        );
        let e = allocator_at_peak(&r).unwrap();
        assert!(
            matches!(&e.standing, Standing::Absent { reason, .. } if reason.contains("the nearest, at 0.00 s")),
            "{e:?}"
        );
    }

    #[test]
    fn a_shim_shares_only_at_start_up() {
        // Two processes for the first 0.4 s of a 4 s run, PSS read twice then.
        let mut pts = vec![
            (0.0, MB, 2, Some(MB)),
            (0.2, MB, 3, Some(MB)),
            (0.4, 2 * MB, 1, None),
        ];
        pts.extend((1..10).map(|i| (0.4 + i as f64 * 0.4, 100 * MB, 1, None)));
        let r = run(4.0, &pts);
        assert!(sharing_share(&r) < 0.2, "{}", sharing_share(&r));
        assert!(!stands(Figure::PeakPssBytes, &r));
        // A forking server: three processes throughout, PSS read across.
        let pts: Vec<(f64, u64, u32, Option<u64>)> = (0..20)
            .map(|i| (i as f64 * 0.2, 30 * MB, 3, (i % 4 == 0).then_some(20 * MB)))
            .collect();
        let r = run(4.0, &pts);
        assert!(sharing_share(&r) > 0.9);
        assert!(stands(Figure::PeakPssBytes, &r));
    }

    #[test]
    fn odd_runs_get_evidence_without_panicking() {
        // Imported or damaged records: no samples, one, time going backwards, a zero,
        // negative or non-finite wall time, allocator samples outside the run.
        let walls = [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-9, 1e12];
        let shapes: Vec<Vec<Point>> = vec![
            vec![],
            vec![(0.0, 0, 0, None)],
            vec![
                (5.0, MB, 3, Some(MB)),
                (1.0, 2 * MB, 1, None),
                (3.0, 0, 2, Some(0)),
            ],
            vec![
                (f64::NAN, MB, 1, Some(MB)),
                (f64::INFINITY, u64::MAX, u32::MAX, Some(u64::MAX)),
            ],
        ];
        for wall in walls {
            for shape in &shapes {
                let base = run(wall, shape);
                let odd = with_allocator(
                    base.clone(),
                    &[(-3.0, u64::MAX, 0), (f64::NAN, 0, u64::MAX), (1e9, 1, 1)],
                    1,
                );
                for r in [&base, &odd] {
                    for f in Figure::ALL {
                        let _ = of(f, r);
                    }
                    let _ = sharing_share(r);
                    let _ = at_peak_point(r);
                    let mut glibc = r.clone();
                    glibc.variant = "glibc".into();
                    let e = crate::record::Experiment {
                        runs: vec![glibc.clone(), glibc.clone(), glibc],
                        ..crate::report::fixture::experiment()
                    };
                    let a = crate::analysis::analyse(&e);
                    let _ = crate::report::evidence_lines(&a);
                }
            }
        }
    }
}
