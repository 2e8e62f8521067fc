//! Leak or plateau? A verdict on a memory time series.
//!
//! Pure: the input is a slice of `(t_seconds, bytes)` samples (any clock, any
//! origin, increasing `t`), the output a [`Trend`] with the figures behind it and a
//! sentence for people. Used by `memtrial inspect --watch`; usable on a trial's
//! stored samples.
//!
//! Method: an ordinary least-squares line through the *last half* of the window (by
//! time), so start-up growth that has since levelled off does not read as a leak.
//! The slope's 95% confidence interval is `b ± t(0.975, n−2) · se(b)`. A leak needs
//! both: an interval entirely above zero *and* growth over that half that matters
//! (at least [`TrendRules::min_growth_fraction`] of the level and
//! [`TrendRules::min_growth_bytes`]). RSS moves in pages and allocators keep some
//! slack, so a statistically "significant" drift of a few pages is not a leak.

use serde::Serialize;

use crate::units::format_bytes;

/// When a series is long enough, and how much growth counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrendRules {
    /// Fewest samples over the whole window (the last half then holds about half).
    pub min_samples: usize,
    /// Shortest window, in seconds.
    pub min_seconds: f64,
    /// Growth over the fitted half, as a fraction of the level, below which no leak is called.
    pub min_growth_fraction: f64,
    /// Growth over the fitted half, in bytes, below which no leak is called.
    pub min_growth_bytes: f64,
    /// Half-width of the band around the level that counts as "flat", as a fraction.
    pub plateau_band_fraction: f64,
}

impl Default for TrendRules {
    fn default() -> Self {
        TrendRules {
            min_samples: 8,
            min_seconds: 2.0,
            min_growth_fraction: 0.01,
            min_growth_bytes: 256.0 * 1024.0,
            plateau_band_fraction: 0.02,
        }
    }
}

/// The verdict on a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Trend {
    /// Still growing over the last half of the window.
    Leak {
        slope_bytes_per_min: f64,
        /// 95% confidence interval of the slope, bytes per minute.
        ci: (f64, f64),
        /// Mean over the fitted half.
        level_bytes: f64,
        /// Samples and seconds in the fitted half.
        fitted_samples: usize,
        fitted_seconds: f64,
    },
    /// Falling over the last half of the window (memory being returned).
    Shrinking {
        slope_bytes_per_min: f64,
        ci: (f64, f64),
        level_bytes: f64,
        fitted_samples: usize,
        fitted_seconds: f64,
    },
    /// No growth that matters over the last half of the window.
    Plateau {
        /// Mean over the fitted half.
        level_bytes: f64,
        /// Seconds from the first sample after which every sample stayed within
        /// the band around the level.
        since_seconds: f64,
        slope_bytes_per_min: f64,
        ci: (f64, f64),
        fitted_samples: usize,
        fitted_seconds: f64,
    },
    /// Too few samples or too short a window to say.
    TooShort {
        samples: usize,
        seconds: f64,
        need_samples: usize,
        need_seconds: f64,
        /// Enough samples in all, but only this many in the later half of the window,
        /// where the slope is fitted (it needs [`MIN_FITTED_SAMPLES`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        late_samples: Option<usize>,
    },
}

/// The fewest samples in the later half of a window that a slope is fitted on.
pub(crate) const MIN_FITTED_SAMPLES: usize = 3;

/// ", but only N of them in the later half …" where that is why a series is too short.
pub(crate) fn late_clause(late_samples: Option<usize>) -> String {
    late_samples.map_or_else(String::new, |n| {
        format!(
            ", but only {n} of them in the later half, where the slope is fitted (it needs {MIN_FITTED_SAMPLES})"
        )
    })
}

impl Trend {
    /// One sentence saying what the verdict is and what it rests on.
    pub fn sentence(&self) -> String {
        let per_min = |b: f64| format!("{}/min", signed_bytes(b));
        match self {
            Trend::Leak {
                slope_bytes_per_min,
                ci,
                level_bytes,
                fitted_samples,
                fitted_seconds,
            } => format!(
                "growing: {} (95% CI {} to {}) at about {}, fitted on the last {fitted_samples} samples ({fitted_seconds:.1} s); a leak, or a cache still filling up",
                per_min(*slope_bytes_per_min),
                per_min(ci.0),
                per_min(ci.1),
                format_bytes(*level_bytes)
            ),
            Trend::Shrinking {
                slope_bytes_per_min,
                ci,
                level_bytes,
                fitted_samples,
                fitted_seconds,
            } => format!(
                "shrinking: {} (95% CI {} to {}) at about {}, fitted on the last {fitted_samples} samples ({fitted_seconds:.1} s)",
                per_min(*slope_bytes_per_min),
                per_min(ci.0),
                per_min(ci.1),
                format_bytes(*level_bytes)
            ),
            Trend::Plateau {
                level_bytes,
                since_seconds,
                slope_bytes_per_min,
                ci,
                fitted_samples,
                ..
            } => format!(
                "plateau at {} since {since_seconds:.1} s into the watch (slope {}, 95% CI {} to {}, over the last {fitted_samples} samples)",
                format_bytes(*level_bytes),
                per_min(*slope_bytes_per_min),
                per_min(ci.0),
                per_min(ci.1)
            ),
            Trend::TooShort {
                samples,
                seconds,
                need_samples,
                need_seconds,
                late_samples,
            } => format!(
                "too short to judge: {samples} samples over {seconds:.1} s{} (need at least {need_samples} samples over {need_seconds:.1} s)",
                late_clause(*late_samples)
            ),
        }
    }

    /// The short name used in JSON (`verdict`).
    pub fn name(&self) -> &'static str {
        match self {
            Trend::Leak { .. } => "leak",
            Trend::Shrinking { .. } => "shrinking",
            Trend::Plateau { .. } => "plateau",
            Trend::TooShort { .. } => "too_short",
        }
    }
}

fn signed_bytes(b: f64) -> String {
    if b < 0.0 {
        format!("-{}", format_bytes(-b))
    } else {
        format!("+{}", format_bytes(b))
    }
}

/// Slope and its 95% confidence interval by least squares, in units of y per unit of x.
/// `None` with fewer than 3 points or when every x is the same.
pub(crate) fn ols_slope_ci95(points: &[(f64, f64)]) -> Option<(f64, (f64, f64))> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 || !sxx.is_finite() {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    let a = my - b * mx;
    let ssr: f64 = points.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
    let df = n - 2;
    let se = (ssr / df as f64 / sxx).sqrt();
    let half = t975(df) * se;
    Some((b, (b - half, b + half)))
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom.
pub(crate) fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            // Cornish–Fisher expansion around the normal quantile; error < 1e-3 for df > 30.
            let z = 1.959_964_f64;
            let d = df as f64;
            z + (z.powi(3) + z) / (4.0 * d)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * d * d)
        }
    }
}

/// The verdict on `series` (`(t_seconds, bytes)`, increasing `t`).
pub fn trend(series: &[(f64, f64)], rules: &TrendRules) -> Trend {
    let samples = series.len();
    let seconds = match (series.first(), series.last()) {
        (Some(a), Some(b)) => (b.0 - a.0).max(0.0),
        _ => 0.0,
    };
    let too_short = Trend::TooShort {
        samples,
        seconds,
        need_samples: rules.min_samples,
        need_seconds: rules.min_seconds,
        late_samples: None,
    };
    if samples < rules.min_samples.max(6) || seconds < rules.min_seconds {
        return too_short;
    }
    let t0 = series[0].0;
    let mid = t0 + seconds / 2.0;
    let fitted: Vec<(f64, f64)> = series.iter().copied().filter(|p| p.0 >= mid).collect();
    // Samples bunched at the start (dense start-up sampling, then a probe held to its CPU
    // budget) leave too few where the slope is fitted: say so rather than "too few".
    let late_short = || match too_short.clone() {
        Trend::TooShort {
            samples,
            seconds,
            need_samples,
            need_seconds,
            ..
        } => Trend::TooShort {
            samples,
            seconds,
            need_samples,
            need_seconds,
            late_samples: Some(fitted.len()),
        },
        other => other,
    };
    if fitted.len() < MIN_FITTED_SAMPLES {
        return late_short();
    }
    let Some((b, ci)) = ols_slope_ci95(&fitted) else {
        return too_short;
    };
    let level = fitted.iter().map(|p| p.1).sum::<f64>() / fitted.len() as f64;
    let fitted_seconds = fitted.last().map_or(0.0, |l| l.0) - fitted[0].0;
    let growth = b * fitted_seconds;
    let matters =
        growth.abs() >= (rules.min_growth_fraction * level.abs()).max(rules.min_growth_bytes);
    let per_min = |x: f64| x * 60.0;
    let fitted_samples = fitted.len();
    if ci.0 > 0.0 && matters {
        return Trend::Leak {
            slope_bytes_per_min: per_min(b),
            ci: (per_min(ci.0), per_min(ci.1)),
            level_bytes: level,
            fitted_samples,
            fitted_seconds,
        };
    }
    if ci.1 < 0.0 && matters {
        return Trend::Shrinking {
            slope_bytes_per_min: per_min(b),
            ci: (per_min(ci.0), per_min(ci.1)),
            level_bytes: level,
            fitted_samples,
            fitted_seconds,
        };
    }
    let band = (rules.plateau_band_fraction * level.abs()).max(rules.min_growth_bytes);
    let mut since = series[samples - 1].0;
    for p in series.iter().rev() {
        if (p.1 - level).abs() > band {
            break;
        }
        since = p.0;
    }
    Trend::Plateau {
        level_bytes: level,
        since_seconds: since - t0,
        slope_bytes_per_min: per_min(b),
        ci: (per_min(ci.0), per_min(ci.1)),
        fitted_samples,
        fitted_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const MIB: f64 = 1048576.0;

    /// `n` samples every `dt` seconds of `f(t)` plus uniform noise of ±`noise` bytes.
    fn series(n: usize, dt: f64, noise: f64, seed: u64, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let t = 100.0 + i as f64 * dt; // any origin
                let e = if noise > 0.0 {
                    rng.gen_range(-noise..noise)
                } else {
                    0.0
                };
                (t, f(t - 100.0) + e)
            })
            .collect()
    }

    #[test]
    fn steady_growth_is_a_leak_with_the_right_slope() {
        // 100 MiB + 1 MiB per second = 60 MiB/min, noise ±256 KiB.
        let s = series(60, 0.5, 0.25 * MIB, 1, |t| 100.0 * MIB + MIB * t);
        match trend(&s, &TrendRules::default()) {
            Trend::Leak {
                slope_bytes_per_min,
                ci,
                ..
            } => {
                assert!(
                    (slope_bytes_per_min / MIB - 60.0).abs() < 3.0,
                    "{slope_bytes_per_min}"
                );
                assert!(ci.0 < slope_bytes_per_min && slope_bytes_per_min < ci.1);
                assert!(ci.0 > 0.0);
                assert!(ci.0 / MIB > 50.0 && ci.1 / MIB < 70.0, "{ci:?}");
            }
            other => panic!("expected a leak, got {other:?}"),
        }
    }

    #[test]
    fn growth_then_flat_is_a_plateau_since_the_knee() {
        // Grows for 10 s to 200 MiB, then flat for 20 s (noise ±0.5 MiB).
        let s = series(61, 0.5, 0.5 * MIB, 2, |t| {
            100.0 * MIB + 10.0 * MIB * t.min(10.0)
        });
        match trend(&s, &TrendRules::default()) {
            Trend::Plateau {
                level_bytes,
                since_seconds,
                ..
            } => {
                assert!((level_bytes / MIB - 200.0).abs() < 1.0, "{level_bytes}");
                // The band is ±2% (4 MiB): the series enters it at 9.6 s.
                assert!((9.0..=10.5).contains(&since_seconds), "{since_seconds}");
            }
            other => panic!("expected a plateau, got {other:?}"),
        }
    }

    #[test]
    fn flat_noisy_series_is_a_plateau_from_the_start() {
        let s = series(40, 0.25, 2.0 * MIB, 3, |_| 500.0 * MIB);
        match trend(&s, &TrendRules::default()) {
            Trend::Plateau {
                since_seconds, ci, ..
            } => {
                assert_eq!(since_seconds, 0.0);
                assert!(ci.0 < ci.1);
            }
            other => panic!("expected a plateau, got {other:?}"),
        }
    }

    #[test]
    fn a_tiny_significant_drift_is_not_a_leak() {
        // 4 KiB per second on 1 GiB without noise: significant, but 0.01% over the window.
        let s = series(40, 0.5, 0.0, 4, |t| 1024.0 * MIB + 4096.0 * t);
        assert_eq!(trend(&s, &TrendRules::default()).name(), "plateau");
    }

    #[test]
    fn falling_series_is_shrinking() {
        let s = series(40, 0.5, 0.1 * MIB, 5, |t| 300.0 * MIB - 2.0 * MIB * t);
        match trend(&s, &TrendRules::default()) {
            Trend::Shrinking {
                slope_bytes_per_min,
                ci,
                ..
            } => {
                assert!((slope_bytes_per_min / MIB + 120.0).abs() < 5.0);
                assert!(ci.1 < 0.0);
            }
            other => panic!("expected shrinking, got {other:?}"),
        }
    }

    #[test]
    fn samples_bunched_at_the_start_are_too_short_and_say_why() {
        // 40 samples in the first 0.4 s, then two near the end of a 3 s window: enough in
        // all, too few in the later half where the slope is fitted.
        let mut s: Vec<(f64, f64)> = (0..40).map(|i| (i as f64 * 0.01, 1e6)).collect();
        s.push((2.5, 1e6));
        s.push((3.0, 1e6));
        let t = trend(&s, &TrendRules::default());
        assert_eq!(t.name(), "too_short");
        match &t {
            Trend::TooShort { late_samples, .. } => assert_eq!(*late_samples, Some(2)),
            other => panic!("{other:?}"),
        }
        let sentence = t.sentence();
        assert!(
            sentence.contains("only 2 of them in the later half"),
            "{sentence}"
        );
    }

    #[test]
    fn short_series_are_too_short() {
        let few = series(5, 1.0, 0.0, 6, |t| MIB * t);
        assert_eq!(trend(&few, &TrendRules::default()).name(), "too_short");
        let brief = series(20, 0.05, 0.0, 7, |t| MIB * t); // 0.95 s
        match trend(&brief, &TrendRules::default()) {
            Trend::TooShort {
                samples, seconds, ..
            } => {
                assert_eq!(samples, 20);
                assert!((seconds - 0.95).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(trend(&[], &TrendRules::default()).name(), "too_short");
    }

    #[test]
    fn slope_ci_matches_a_hand_computation() {
        // y = 2x + e with e = +1, -1, +1, -1, 0 at x = 0..5:
        // b = Sxy/Sxx = 18/10 = 1.8... computed below with exact sums.
        let pts = [(0.0, 1.0), (1.0, 1.0), (2.0, 5.0), (3.0, 5.0), (4.0, 8.0)];
        let (b, (lo, hi)) = ols_slope_ci95(&pts).unwrap();
        // mx = 2, my = 4; Sxx = 10; Sxy = (-2)(-3)+(-1)(-3)+0+1*1+2*4 = 18.
        assert!((b - 1.8).abs() < 1e-12);
        // a = 4 - 3.6 = 0.4; residuals: .6, -1.2, 1.0, -0.8, .4 → SSR = 3.6; se = sqrt(3.6/3/10).
        let se = (3.6f64 / 3.0 / 10.0).sqrt();
        assert!((hi - b - 3.182 * se).abs() < 1e-9);
        assert!((b - lo - 3.182 * se).abs() < 1e-9);
        assert!(ols_slope_ci95(&pts[..2]).is_none());
        assert!(ols_slope_ci95(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]).is_none());
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(30), 2.042);
        assert!((t975(40) - 2.021).abs() < 2e-3, "{}", t975(40));
        assert!((t975(120) - 1.980).abs() < 2e-3, "{}", t975(120));
        assert!(t975(0).is_infinite());
    }

    #[test]
    fn sentences_name_the_evidence() {
        let s = series(60, 0.5, 0.0, 8, |t| 100.0 * MIB + MIB * t);
        let v = trend(&s, &TrendRules::default());
        let text = v.sentence();
        assert!(text.starts_with("growing: +60.0 MiB/min"), "{text}");
        assert!(text.contains("95% CI"), "{text}");
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["verdict"], "leak");
        assert!(json["ci"].as_array().unwrap().len() == 2);
    }
}
