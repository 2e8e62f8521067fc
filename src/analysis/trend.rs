//! Leak or plateau? A verdict on a memory time series.
//!
//! Pure: the input is a slice of `(t_seconds, bytes)` samples (any clock, any
//! origin, increasing `t`), the output a [`Trend`] with the figures behind it and a
//! sentence for people. Used by a run's and a soak's leak-or-fragmentation verdict, by
//! `judge` on a fleet's pods and by `memtrial inspect --watch`: one rule everywhere.
//!
//! Method (docs/methodology.md, "A trend through the program's own cycles"):
//! - The slope is judged on the *later half* of the window (by time), so start-up growth
//!   that has since levelled off does not read as a leak.
//! - Samples of a memory series are not independent: a GC sawtooth, a cache filled and
//!   flushed, a pool that grows and shrinks. A straight line through 200 one-second
//!   samples of such a cycle, each taken as independent, gets an interval far too narrow,
//!   and a slope that depends on where the window cut the cycles. So the later half is put
//!   on a regular grid (the median step of its samples), and the autocorrelation of its
//!   residuals about a quadratic gives a **block length**: one cycle where the series has
//!   one (the first peak of the autocorrelation after it falls below zero), else three times
//!   its integrated autocorrelation time, or one grid step when the samples show no
//!   correlation. The slope and its 95% interval come from the means of whole blocks laid
//!   back from the window's end, each block one observation (Student's t with blocks − 2
//!   degrees of freedom). A block length needs [`MIN_BLOCKS`] blocks in the later half (3
//!   where the samples show no correlation); fewer is "too short to tell", with how long
//!   would do. A cycle longer than that is seen by its drops over the whole window (a fall
//!   of a quarter of the later half's range within three samples): growth (or a fall)
//!   between drops is a cycle's edge until the later half holds [`MIN_BLOCKS`] cycles, and
//!   then each cycle is a block where the blocks were shorter.
//! - **Material growth**: at least [`TrendRules::min_growth_fraction`] of the larger of the
//!   series' level and [`TrendRules::reference_bytes`] (the process's RSS and the
//!   allocator's held bytes, for live bytes), and at least
//!   [`TrendRules::min_growth_bytes`], over the later half. RSS moves in pages and
//!   allocators keep some slack: a statistically "significant" drift of a few pages is no
//!   leak.
//! - **Verdicts**: growing when the interval lies above zero and the growth is material;
//!   shrinking, its mirror; a plateau when even the interval's upper end grows less than
//!   material over the half; otherwise too short to tell, with the minutes that would
//!   likely tell (the interval narrows as the window's length to the power 1.5).

use serde::Serialize;

use crate::units::format_bytes;

/// When a series is long enough, and how much growth counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrendRules {
    /// Fewest samples over the whole window (the last half then holds about half).
    pub min_samples: usize,
    /// Shortest window, in seconds.
    pub min_seconds: f64,
    /// Growth over the fitted half, as a fraction of the level (or of
    /// [`TrendRules::reference_bytes`] when larger), below which no growth is called.
    pub min_growth_fraction: f64,
    /// Growth over the fitted half, in bytes, below which no growth is called.
    pub min_growth_bytes: f64,
    /// Half-width of the band around the level that counts as "flat", as a fraction.
    pub plateau_band_fraction: f64,
    /// The footprint growth is material against besides the series' own level: for the
    /// allocator's live bytes, the larger of the mean RSS and the mean held bytes; 0 for
    /// a series judged on its own.
    pub reference_bytes: f64,
}

impl Default for TrendRules {
    fn default() -> Self {
        TrendRules {
            min_samples: 8,
            min_seconds: 2.0,
            min_growth_fraction: 0.01,
            min_growth_bytes: 256.0 * 1024.0,
            plateau_band_fraction: 0.02,
            reference_bytes: 0.0,
        }
    }
}

impl TrendRules {
    /// The growth over the fitted half that is material for a series at `level`.
    pub(crate) fn material_bytes(&self, level: f64) -> f64 {
        (self.min_growth_fraction * level.abs().max(self.reference_bytes))
            .max(self.min_growth_bytes)
    }
}

/// Blocks in the fitted half a slope needs when its samples are correlated (the block
/// length is itself estimated from them).
pub const MIN_BLOCKS: usize = 6;

/// Blocks a slope needs when its samples show no correlation (each sample its own block).
const MIN_INDEPENDENT_BLOCKS: usize = 3;

/// Fewest grid steps on which an autocorrelation is estimated; fewer are taken as
/// independent (a correlation cannot be seen in them).
const MIN_ACF_STEPS: usize = 12;

/// Most grid steps the fitted half is put on (a long watch at a fine interval).
const MAX_GRID_STEPS: usize = 4096;

/// What a block of the slope's interval is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockBasis {
    /// The samples show no correlation: each grid step (about one sample) is a block.
    Samples,
    /// One cycle of the series (a GC sawtooth, a cache filled and flushed).
    Cycle,
    /// Three times the series' integrated autocorrelation time (correlated, not cyclic).
    Correlation,
    /// No blocks: too few fit, or the series wanders, and its slope outruns the most its own
    /// swing about its line could make of a flat series (see [`envelope`]); the interval is
    /// the slopes that swing allows, not a 95% one.
    Envelope,
}

/// The blocks a slope's interval was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Blocks {
    /// Blocks with samples in the fitted half (its observations).
    pub count: usize,
    /// The length of one block.
    pub seconds: f64,
    pub basis: BlockBasis,
}

impl Blocks {
    /// "over 12 blocks of one cycle (25 s)", for sentences.
    fn phrase(&self) -> String {
        match self.basis {
            BlockBasis::Samples => format!("{} samples taken as independent", self.count),
            BlockBasis::Cycle => format!(
                "{} blocks of one cycle of the series ({})",
                self.count,
                seconds_text(self.seconds)
            ),
            BlockBasis::Correlation => format!(
                "{} blocks of {} (three times its autocorrelation time)",
                self.count,
                seconds_text(self.seconds)
            ),
            BlockBasis::Envelope => format!(
                "{} samples whose rise outruns their own swing about the line, over the later half and the whole window",
                self.count
            ),
        }
    }

    /// What the interval beside the slope is: "95% CI", or the slopes the series' own
    /// swing allows.
    fn interval_name(&self) -> &'static str {
        match self.basis {
            BlockBasis::Envelope => "its swing allows",
            _ => "95% CI",
        }
    }
}

/// Why a long enough series could not be told: its own cycles or correlation leave too
/// few blocks in the fitted half.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cycles {
    /// The block length the series needs; `None`: it wanders over longer than the fitted
    /// half can show (no cycle and no decorrelation within half of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_seconds: Option<f64>,
    /// Blocks of that length in the fitted half.
    pub blocks: usize,
    pub basis: BlockBasis,
}

/// Enough blocks, but the interval neither shows material growth nor rules it out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Undecided {
    pub slope_bytes_per_min: f64,
    pub ci: (f64, f64),
    /// The growth over the fitted half that would be material.
    pub material_bytes: f64,
    pub blocks: Blocks,
}

/// The verdict on a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Trend {
    /// Still growing over the last half of the window, by a material amount.
    Leak {
        slope_bytes_per_min: f64,
        /// 95% confidence interval of the slope, bytes per minute.
        ci: (f64, f64),
        /// Mean over the fitted half.
        level_bytes: f64,
        /// Samples and seconds in the fitted half.
        fitted_samples: usize,
        fitted_seconds: f64,
        blocks: Blocks,
        /// The growth over the fitted half that counts as material.
        material_bytes: f64,
    },
    /// Falling over the last half of the window (memory being returned).
    Shrinking {
        slope_bytes_per_min: f64,
        ci: (f64, f64),
        level_bytes: f64,
        fitted_samples: usize,
        fitted_seconds: f64,
        blocks: Blocks,
        material_bytes: f64,
    },
    /// No material growth over the last half of the window: even the interval's upper
    /// end grows less than material.
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
        blocks: Blocks,
        material_bytes: f64,
    },
    /// Too few samples, too short a window for the series' own cycles, or an interval
    /// that cannot tell yet: with how long would do.
    TooShort {
        samples: usize,
        seconds: f64,
        need_samples: usize,
        /// The window that would likely tell.
        need_seconds: f64,
        /// Enough samples in all, but only this many in the later half of the window,
        /// where the slope is fitted (it needs [`MIN_FITTED_SAMPLES`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        late_samples: Option<usize>,
        /// The series' own cycles (or correlation) leave too few blocks.
        #[serde(skip_serializing_if = "Option::is_none")]
        cycles: Option<Cycles>,
        /// Enough blocks, an interval that cannot tell.
        #[serde(skip_serializing_if = "Option::is_none")]
        undecided: Option<Undecided>,
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

/// "1 more minute", "3 more minutes" (for "run N more minutes"): rounded up.
pub(crate) fn more_minutes(seconds: f64) -> String {
    let m = (seconds.max(0.0) / 60.0).ceil().max(1.0) as u64;
    if m == 1 {
        "1 more minute".into()
    } else {
        format!("{m} more minutes")
    }
}

/// "25 s", "3.5 min": a block's or a cycle's length.
fn seconds_text(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}

/// Why a series that is long enough in samples could not be told, and what would tell:
/// "the series moves in cycles of about 25 s …: run 3 more minutes". `None` for a series
/// short in samples.
pub(crate) fn cannot_tell_clause(
    subject: &str,
    cycles: Option<&Cycles>,
    undecided: Option<&Undecided>,
    seconds: f64,
    need_seconds: f64,
) -> Option<String> {
    let more = more_minutes(need_seconds - seconds);
    let per_min = |b: f64| format!("{}/min", signed_bytes(b));
    if let Some(u) = undecided {
        return Some(format!(
            "{subject} have a slope of {} (95% CI {} to {}) over {}: neither material growth ({} over the later half) nor its absence can be told yet: run {more}",
            per_min(u.slope_bytes_per_min),
            per_min(u.ci.0),
            per_min(u.ci.1),
            u.blocks.phrase(),
            format_bytes(u.material_bytes)
        ));
    }
    let c = cycles?;
    Some(match (c.block_seconds, c.basis) {
        (Some(b), BlockBasis::Cycle) => format!(
            "{subject} move in cycles of about {} (a GC's or a cache's own rhythm), {} of them in the later half of {}; telling growth from them takes {MIN_BLOCKS}: run {more}",
            seconds_text(b),
            c.blocks,
            seconds_text(seconds)
        ),
        (Some(b), _) => format!(
            "{subject} stay correlated over about {} (a block is three times that), {} such blocks in the later half of {}; telling growth takes {MIN_BLOCKS}: run {more}",
            seconds_text(b / 3.0),
            c.blocks,
            seconds_text(seconds)
        ),
        (None, _) => format!(
            "{subject} wander over longer than half the later half of {} shows (no cycle, no decorrelation), so they cannot be taken as independent: run at least {more}",
            seconds_text(seconds)
        ),
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
                blocks,
                ..
            } => format!(
                "growing: {} ({} {} to {}) at about {}, fitted on the last {fitted_samples} samples ({fitted_seconds:.1} s, {}); a leak, or a cache still filling up",
                per_min(*slope_bytes_per_min),
                blocks.interval_name(),
                per_min(ci.0),
                per_min(ci.1),
                format_bytes(*level_bytes),
                blocks.phrase()
            ),
            Trend::Shrinking {
                slope_bytes_per_min,
                ci,
                level_bytes,
                fitted_samples,
                fitted_seconds,
                blocks,
                ..
            } => format!(
                "shrinking: {} ({} {} to {}) at about {}, fitted on the last {fitted_samples} samples ({fitted_seconds:.1} s)",
                per_min(*slope_bytes_per_min),
                blocks.interval_name(),
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
                cycles,
                undecided,
            } => match cannot_tell_clause(
                "the samples",
                cycles.as_ref(),
                undecided.as_ref(),
                *seconds,
                *need_seconds,
            ) {
                Some(clause) => format!("too short to tell: {clause}"),
                None => format!(
                    "too short to judge: {samples} samples over {seconds:.1} s{} (need at least {need_samples} samples over {need_seconds:.1} s)",
                    late_clause(*late_samples)
                ),
            },
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

/// The fitted half on a regular grid: the mean of the samples in each step, empty steps
/// filled in linearly between their neighbours (only the autocorrelation reads it).
struct Grid {
    step: f64,
    values: Vec<f64>,
}

fn grid(points: &[(f64, f64)]) -> Option<Grid> {
    let (first, last) = (points.first()?, points.last()?);
    let span = last.0 - first.0;
    if span.is_nan() || span <= 0.0 {
        return None;
    }
    let mut dts: Vec<f64> = points
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .filter(|d| *d > 0.0)
        .collect();
    if dts.is_empty() {
        return None;
    }
    dts.sort_by(f64::total_cmp);
    let step = dts[dts.len() / 2].max(span / MAX_GRID_STEPS as f64);
    let steps = ((span / step).floor() as usize + 1).min(MAX_GRID_STEPS + 1);
    let mut sum = vec![0.0; steps];
    let mut n = vec![0u32; steps];
    for p in points {
        let i = (((p.0 - first.0) / step).floor() as usize).min(steps - 1);
        sum[i] += p.1;
        n[i] += 1;
    }
    let known: Vec<(usize, f64)> = (0..steps)
        .filter(|&i| n[i] > 0)
        .map(|i| (i, sum[i] / f64::from(n[i])))
        .collect();
    let mut values = vec![known.first()?.1; steps];
    for w in known.windows(2) {
        let ((i, a), (j, b)) = (w[0], w[1]);
        for (k, v) in values.iter_mut().enumerate().take(j + 1).skip(i) {
            *v = a + (b - a) * (k - i) as f64 / (j - i) as f64;
        }
    }
    Some(Grid { step, values })
}

/// A regular series less its least-squares quadratic: what is left once a gently curved
/// trend is taken out (cycles and noise).
fn quadratic_residuals(v: &[f64]) -> Vec<f64> {
    let n = v.len() as f64;
    let c = (n - 1.0) / 2.0;
    let x: Vec<f64> = (0..v.len()).map(|i| i as f64 - c).collect();
    let mean_x2 = x.iter().map(|x| x * x).sum::<f64>() / n;
    // On a grid symmetric about its centre, 1, x and x² − mean(x²) are orthogonal.
    let p2: Vec<f64> = x.iter().map(|x| x * x - mean_x2).collect();
    let mean = v.iter().sum::<f64>() / n;
    let proj = |p: &[f64]| {
        let pp: f64 = p.iter().map(|a| a * a).sum();
        if pp > 0.0 {
            p.iter().zip(v).map(|(a, y)| a * y).sum::<f64>() / pp
        } else {
            0.0
        }
    };
    let (b1, b2) = (proj(&x), proj(&p2));
    v.iter()
        .enumerate()
        .map(|(i, y)| y - mean - b1 * x[i] - b2 * p2[i])
        .collect()
}

/// How the fitted half's samples are correlated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Correlation {
    /// No correlation to be seen: each grid step its own block.
    Independent,
    /// Blocks of this many grid steps.
    Blocks { steps: usize, basis: BlockBasis },
    /// Correlated over longer than half the fitted half shows: no block length can be told.
    Wanders,
}

/// The block length a regular series needs, from the autocorrelation of its residuals
/// about a quadratic: a cycle's length where the autocorrelation, having fallen below
/// zero, peaks again (above 0.2 and its noise, 2/√n); else three times the integrated
/// autocorrelation time up to its first zero (twice leaves neighbouring blocks correlated
/// enough to call 5–7% of flat AR(1) series with φ = 0.9 a leak; three times, 1–4%);
/// none where the first lag shows no correlation.
fn correlation(values: &[f64]) -> Correlation {
    let n = values.len();
    if n < MIN_ACF_STEPS {
        return Correlation::Independent;
    }
    let r = quadratic_residuals(values);
    let c0: f64 = r.iter().map(|x| x * x).sum();
    let scale = values.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1.0);
    if c0 <= (scale * 1e-9).powi(2) * n as f64 {
        return Correlation::Independent;
    }
    let half = n / 2;
    let acf: Vec<f64> = (0..=half)
        .map(|k| {
            r[..n - k]
                .iter()
                .zip(&r[k..])
                .map(|(a, b)| a * b)
                .sum::<f64>()
                / c0
        })
        .collect();
    let noise = 2.0 / (n as f64).sqrt();
    if acf[1] < noise {
        return Correlation::Independent;
    }
    let Some(k0) = (1..=half).find(|&k| acf[k] <= 0.0) else {
        return Correlation::Wanders;
    };
    let peak = noise.max(0.2);
    if let Some(p) =
        (k0 + 1..half).find(|&k| acf[k] > peak && acf[k] >= acf[k - 1] && acf[k] >= acf[k + 1])
    {
        return Correlation::Blocks {
            steps: p,
            basis: BlockBasis::Cycle,
        };
    }
    if acf[half] > peak && acf[half] >= acf[half - 1] {
        // Rising again at the end of what can be seen: a cycle longer than that.
        return Correlation::Wanders;
    }
    let tau = 1.0 + 2.0 * acf[1..k0].iter().sum::<f64>();
    Correlation::Blocks {
        steps: ((3.0 * tau).ceil() as usize).max(2),
        basis: BlockBasis::Correlation,
    }
}

/// The least-squares slope through `points` (bytes/s) and the most that a deviation as large
/// as their own swing could move it: a flat series whose samples stray anywhere within a
/// band as wide as the residuals' range R (largest less smallest, about the fitted line) has
/// a fitted slope within ±R·Σ|t−t̄|/Σ(t−t̄)², whatever the straying's correlation. A slope
/// beyond that is a rise no such swing explains. `None` with fewer than
/// [`MIN_FITTED_SAMPLES`] points or one instant.
fn envelope(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    if points.len() < MIN_FITTED_SAMPLES {
        return None;
    }
    let n = points.len() as f64;
    let tm = points.iter().map(|p| p.0).sum::<f64>() / n;
    let vm = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - tm).powi(2)).sum();
    if sxx.is_nan() || sxx <= 0.0 {
        return None;
    }
    let b = points.iter().map(|p| (p.0 - tm) * (p.1 - vm)).sum::<f64>() / sxx;
    let (lo, hi) = points
        .iter()
        .map(|p| p.1 - vm - b * (p.0 - tm))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(r), hi.max(r))
        });
    let spread: f64 = points.iter().map(|p| (p.0 - tm).abs()).sum();
    Some((b, (hi - lo) * spread / sxx))
}

/// Where the later half `fitted` holds too few blocks, or the series wanders: growth (or a
/// fall) that outruns the series' own swing (an [`envelope`]) over the later half and over
/// the whole window, of one sign, material, and for growth with no drop in the window (a
/// drop is a cycle, told by step 6's rule), is growth (or a fall). Blocks cannot be told on such a window,
/// but 24 MiB of steady growth in 2.5 s, sampled with ±1 MiB of jitter from its beat against
/// the sampling, is not "too short to tell" (`memtrial inspect --watch 2.5s`). Flat random
/// walks of 25 samples give such a verdict about 7 times in 1000, of 200 samples 1 in 2000.
fn envelope_verdict(w: &Window, series: &[(f64, f64)], fitted: &[(f64, f64)]) -> Option<Trend> {
    let (b, bound) = envelope(fitted)?;
    let (whole, whole_bound) = envelope(series)?;
    let level = fitted.iter().map(|p| p.1).sum::<f64>() / fitted.len() as f64;
    let growth = b * w.fitted_seconds;
    let material = growth.abs() >= w.rules.material_bytes(level);
    // A drop is a cycle's fall, and growth between drops its climb (step 6). A steady
    // fall is all drops by that rule: it is not asked of one.
    let grows =
        b - bound > 0.0 && whole - whole_bound > 0.0 && drop_cycle(series, fitted).is_none();
    let falls = b + bound < 0.0 && whole + whole_bound < 0.0;
    if !material || !(grows || falls) {
        return None;
    }
    let blocks = Blocks {
        count: fitted.len(),
        seconds: w.fitted_seconds,
        basis: BlockBasis::Envelope,
    };
    Some(moving(w, fitted, blocks, b, (b - bound, b + bound)))
}

/// The means of `count` blocks of `len` seconds laid back from the last sample, as
/// `(mean t, mean value)` of the samples in each; blocks without samples left out.
fn block_means(fitted: &[(f64, f64)], len: f64, count: usize) -> Vec<(f64, f64)> {
    let Some(&(end, _)) = fitted.last() else {
        return Vec::new();
    };
    let start = end - count as f64 * len;
    let mut acc = vec![(0.0, 0.0, 0u32); count];
    for p in fitted.iter().filter(|p| p.0 >= start) {
        let j = (((end - p.0) / len).floor() as usize).min(count - 1);
        acc[j].0 += p.0;
        acc[j].1 += p.1;
        acc[j].2 += 1;
    }
    acc.into_iter()
        .rev()
        .filter(|a| a.2 > 0)
        .map(|(t, v, n)| (t / f64::from(n), v / f64::from(n)))
        .collect()
}

/// The fitted half's length at which the interval would likely tell (growth, none, or
/// shrinking), from the slope `b` and the half-width `half` of its interval now, over
/// `span` seconds: the half-width shrinks as the span to the power 1.5 (as many more
/// blocks, each as long).
fn span_to_tell(b: f64, half: f64, span: f64, material: f64) -> f64 {
    let mut t = span;
    for _ in 0..64 {
        t *= 1.15;
        let h = half * (span / t).powf(1.5);
        let grows = b - h > 0.0 && b * t >= material;
        let flat = (b + h) * t < material;
        let shrinks = b + h < 0.0 && -b * t >= material;
        if grows || flat || shrinks {
            break;
        }
    }
    t
}

/// The cycle a series' drops imply, if it has any: a drop is a fall of more than a quarter
/// of the later half's range (`fitted`) within three samples (a GC's sweep, a cache
/// flushed, memory given back). The later half's range, not the window's: a warm-up's
/// climb in the earlier half would hide the cycles of the level it climbed to. With
/// several drops, the mean time between them; with one, the longer of the stretches before
/// and after it (the next lies beyond the window). Growth between drops is a cycle's rising
/// edge, not a leak, until the window holds enough of them.
fn drop_cycle(series: &[(f64, f64)], fitted: &[(f64, f64)]) -> Option<f64> {
    let (lo, hi) = fitted
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    let range = hi - lo;
    if range.is_nan() || range <= 0.0 {
        return None;
    }
    let mut drops = Vec::new();
    let mut i = 0;
    while i + 1 < series.len() {
        let next = &series[i + 1..series.len().min(i + 4)];
        let low = next.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        if series[i].1 - low > range / 4.0 {
            drops.push(series[i + 1].0);
            i += 3;
        } else {
            i += 1;
        }
    }
    let (first, last) = (drops.first()?, drops.last()?);
    let (t0, t1) = (series[0].0, series[series.len() - 1].0);
    Some(if drops.len() >= 2 {
        (last - first) / (drops.len() - 1) as f64
    } else {
        (first - t0).max(t1 - first)
    })
}

/// Whole cycles of `cycle` seconds in `span` seconds. A cycle is a mean of times between
/// drops: a span short of a whole one by a microsecond holds it (else "run 1 more minute"
/// for a window 0.4 ms short of six cycles).
fn whole_cycles(span: f64, cycle: f64) -> usize {
    (span / cycle + 1e-6).floor() as usize
}

/// A window's size, what every "too short" verdict on it says beside what it needs.
struct Window<'a> {
    rules: &'a TrendRules,
    samples: usize,
    seconds: f64,
    /// The later half's span, where the slope is fitted (0 until it is known).
    fitted_seconds: f64,
}

impl Window<'_> {
    fn short(
        &self,
        need_seconds: f64,
        late_samples: Option<usize>,
        cycles: Option<Cycles>,
        undecided: Option<Undecided>,
    ) -> Trend {
        Trend::TooShort {
            samples: self.samples,
            seconds: self.seconds,
            need_samples: self.rules.min_samples,
            need_seconds,
            late_samples,
            cycles,
            undecided,
        }
    }

    /// The whole window that gives the later half `span` seconds.
    fn grow_to(&self, span: f64) -> f64 {
        self.seconds + 2.0 * (span - self.fitted_seconds).max(0.0)
    }
}

/// How the later half is cut into blocks whose means the slope is fitted to.
struct BlockPlan {
    seconds: f64,
    count: usize,
    basis: BlockBasis,
    /// Blocks the fit needs.
    need: usize,
    /// The cycle the series' drops imply, if any.
    cycle: Option<f64>,
}

/// The blocks of the later half `fitted` (on grid `g`, `fitted_seconds` long): a sample
/// each when they are independent, else three autocorrelation times, or one cycle when the
/// series' drops show a longer one that the later half holds enough of. `None`: the series
/// wanders over longer than the later half can show.
fn block_plan(
    series: &[(f64, f64)],
    fitted: &[(f64, f64)],
    g: &Grid,
    fitted_seconds: f64,
) -> Option<BlockPlan> {
    let (seconds, count, basis, need) = match correlation(&g.values) {
        Correlation::Independent => (
            g.step,
            (fitted_seconds / g.step).floor() as usize + 1,
            BlockBasis::Samples,
            MIN_INDEPENDENT_BLOCKS,
        ),
        Correlation::Blocks { steps, basis } => {
            let len = steps as f64 * g.step;
            let count = (fitted_seconds / len).floor() as usize;
            (len, count, basis, MIN_BLOCKS)
        }
        Correlation::Wanders => return None,
    };
    // A cycle seen by its drops that is longer than these blocks: their means would follow
    // it (one block on a sawtooth's climb, the next on its fall) and read its phase as
    // growth or decline. With enough whole cycles in the later half, each cycle is a block.
    let cycle = drop_cycle(series, fitted);
    let plan = match cycle {
        Some(c) if c > seconds && whole_cycles(fitted_seconds, c) >= MIN_BLOCKS => BlockPlan {
            seconds: c,
            count: whole_cycles(fitted_seconds, c),
            basis: BlockBasis::Cycle,
            need: MIN_BLOCKS,
            cycle,
        },
        _ => BlockPlan {
            seconds,
            count,
            basis,
            need,
            cycle,
        },
    };
    Some(plan)
}

/// The verdict on `series` (`(t_seconds, bytes)`, increasing `t`).
pub fn trend(series: &[(f64, f64)], rules: &TrendRules) -> Trend {
    let samples = series.len();
    let seconds = match (series.first(), series.last()) {
        (Some(a), Some(b)) => (b.0 - a.0).max(0.0),
        _ => 0.0,
    };
    let mut w = Window {
        rules,
        samples,
        seconds,
        fitted_seconds: 0.0,
    };
    if samples < rules.min_samples.max(6) || seconds < rules.min_seconds {
        return w.short(rules.min_seconds, None, None, None);
    }
    let mid = series[0].0 + seconds / 2.0;
    let fitted: Vec<(f64, f64)> = series.iter().copied().filter(|p| p.0 >= mid).collect();
    // Samples bunched at the start (dense start-up sampling, then a probe held to its CPU
    // budget) leave too few where the slope is fitted: say so rather than "too few".
    if fitted.len() < MIN_FITTED_SAMPLES {
        return w.short(rules.min_seconds, Some(fitted.len()), None, None);
    }
    let Some(g) = grid(&fitted) else {
        return w.short(rules.min_seconds, None, None, None);
    };
    w.fitted_seconds = fitted.last().map_or(0.0, |l| l.0) - fitted[0].0;
    let Some(plan) = block_plan(series, &fitted, &g, w.fitted_seconds) else {
        if let Some(t) = envelope_verdict(&w, series, &fitted) {
            return t;
        }
        let c = Cycles {
            block_seconds: None,
            blocks: 0,
            basis: BlockBasis::Correlation,
        };
        return w.short(2.0 * seconds, None, Some(c), None);
    };
    let means = if plan.count > 0 {
        block_means(&fitted, plan.seconds, plan.count)
    } else {
        Vec::new()
    };
    if means.len() < plan.need {
        if plan.basis == BlockBasis::Samples {
            return w.short(rules.min_seconds, Some(fitted.len()), None, None);
        }
        if let Some(t) = envelope_verdict(&w, series, &fitted) {
            return t;
        }
        let c = Cycles {
            block_seconds: Some(plan.seconds),
            blocks: means.len(),
            basis: plan.basis,
        };
        return w.short(
            w.grow_to(plan.need as f64 * plan.seconds),
            None,
            Some(c),
            None,
        );
    }
    let Some((b, ci)) = ols_slope_ci95(&means) else {
        return w.short(rules.min_seconds, None, None, None);
    };
    let blocks = Blocks {
        count: means.len(),
        seconds: plan.seconds,
        basis: plan.basis,
    };
    slope_verdict(&w, series, &fitted, plan.cycle, blocks, b, ci)
}

/// The verdict from the slope `b` (bytes/s, 95% interval `ci`) fitted to the block means
/// of the later half `fitted`: a leak or a fall when the interval excludes 0 and the growth
/// over the half is material, unless a cycle (`cycle`) the later half holds too few of
/// explains it; undecided while the interval still reaches material growth; else a plateau.
fn slope_verdict(
    w: &Window,
    series: &[(f64, f64)],
    fitted: &[(f64, f64)],
    cycle: Option<f64>,
    blocks: Blocks,
    b: f64,
    ci: (f64, f64),
) -> Trend {
    let fitted_seconds = w.fitted_seconds;
    let level = fitted.iter().map(|p| p.1).sum::<f64>() / fitted.len() as f64;
    let material = w.rules.material_bytes(level);
    let growth = b * fitted_seconds;
    let per_min = |x: f64| x * 60.0;
    let fitted_samples = fitted.len();
    let grows = ci.0 > 0.0 && growth >= material;
    let shrinks = ci.1 < 0.0 && -growth >= material;
    // Growth (or a fall) that the whole window shows undone by a drop is a cycle's climb
    // (or its fall) until the later half holds enough cycles: blocks of the later half
    // alone cannot see a cycle longer than a sixth of it.
    if let Some(cycle) = cycle.filter(|_| grows || shrinks) {
        let fits = whole_cycles(fitted_seconds, cycle);
        if fits < MIN_BLOCKS {
            let c = Cycles {
                block_seconds: Some(cycle),
                blocks: fits,
                basis: BlockBasis::Cycle,
            };
            return w.short(w.grow_to(MIN_BLOCKS as f64 * cycle), None, Some(c), None);
        }
    }
    if grows || shrinks {
        return moving(w, fitted, blocks, b, ci);
    }
    if ci.1 * fitted_seconds >= material {
        let span = span_to_tell(b, ci.1 - b, fitted_seconds, material);
        let u = Undecided {
            slope_bytes_per_min: per_min(b),
            ci: (per_min(ci.0), per_min(ci.1)),
            material_bytes: material,
            blocks,
        };
        return w.short(w.grow_to(span), None, None, Some(u));
    }
    let band = (w.rules.plateau_band_fraction * level.abs()).max(w.rules.min_growth_bytes);
    let mut since = series[w.samples - 1].0;
    for p in series.iter().rev() {
        if (p.1 - level).abs() > band {
            break;
        }
        since = p.0;
    }
    Trend::Plateau {
        level_bytes: level,
        since_seconds: since - series[0].0,
        slope_bytes_per_min: per_min(b),
        ci: (per_min(ci.0), per_min(ci.1)),
        fitted_samples,
        fitted_seconds,
        blocks,
        material_bytes: material,
    }
}

/// Growing (`b` > 0) or shrinking, at slope `b` bytes/s within `ci`, over the later half
/// `fitted`.
fn moving(w: &Window, fitted: &[(f64, f64)], blocks: Blocks, b: f64, ci: (f64, f64)) -> Trend {
    let level = fitted.iter().map(|p| p.1).sum::<f64>() / fitted.len() as f64;
    let per_min = |x: f64| x * 60.0;
    let (slope_bytes_per_min, ci) = (per_min(b), (per_min(ci.0), per_min(ci.1)));
    let (fitted_samples, fitted_seconds) = (fitted.len(), w.fitted_seconds);
    let material_bytes = w.rules.material_bytes(level);
    if b > 0.0 {
        Trend::Leak {
            slope_bytes_per_min,
            ci,
            level_bytes: level,
            fitted_samples,
            fitted_seconds,
            blocks,
            material_bytes,
        }
    } else {
        Trend::Shrinking {
            slope_bytes_per_min,
            ci,
            level_bytes: level,
            fitted_samples,
            fitted_seconds,
            blocks,
            material_bytes,
        }
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

    /// The Rails defect's shape: live bytes swinging 30–46 MiB with each GC, every
    /// `period` seconds (its phase `phase`), sampled every second for `seconds`, noise
    /// ±0.5 MiB, growing `leak` bytes per minute beneath.
    fn sawtooth(seconds: usize, period: f64, phase: f64, leak: f64, seed: u64) -> Vec<(f64, f64)> {
        series(seconds, 1.0, 0.5 * MIB, seed, |t| {
            30.0 * MIB + 16.0 * MIB * ((t + phase) % period) / period + leak * t / 60.0
        })
    }

    /// The old rule: a line through the later half's samples taken as independent, and
    /// growth of 1% of the level.
    fn independent_leak(s: &[(f64, f64)]) -> bool {
        let mid = s[0].0 + (s[s.len() - 1].0 - s[0].0) / 2.0;
        let f: Vec<(f64, f64)> = s.iter().copied().filter(|p| p.0 >= mid).collect();
        let (b, ci) = ols_slope_ci95(&f).unwrap();
        let level = f.iter().map(|p| p.1).sum::<f64>() / f.len() as f64;
        ci.0 > 0.0 && b * (f[f.len() - 1].0 - f[0].0) >= 0.01 * level
    }

    #[test]
    fn a_gc_sawtooth_is_never_a_leak_and_says_how_long_to_run() {
        // Cycles of 60 s over 3.5 minutes, every phase: a line through 1-second samples
        // taken as independent calls a third of them a leak; the blocks never do.
        let (mut old, mut new) = (0, 0);
        for phase in 0..60 {
            let s = sawtooth(210, 60.0, phase as f64, 0.0, phase);
            old += usize::from(independent_leak(&s));
            let t = trend(&s, &TrendRules::default());
            new += usize::from(t.name() == "leak");
            assert_eq!(t.name(), "too_short", "{}", t.sentence());
            let text = t.sentence();
            assert!(text.starts_with("too short to tell: "), "{text}");
            assert!(text.contains(" more minute"), "{text}");
        }
        assert!(old >= 10, "the old rule called {old} of 60 a leak");
        assert_eq!(new, 0);
        // Cycles of 45 s over 3.5 minutes: the cycle is seen, and six of them asked for.
        let t = trend(&sawtooth(210, 45.0, 3.0, 0.0, 1), &TrendRules::default());
        match &t {
            Trend::TooShort {
                cycles: Some(c),
                need_seconds,
                ..
            } => {
                assert_eq!(c.basis, BlockBasis::Cycle, "{t:?}");
                let b = c.block_seconds.unwrap();
                assert!((40.0..=50.0).contains(&b), "{t:?}");
                // Six cycles in the later half: about 9 minutes of window.
                assert!((480.0..620.0).contains(need_seconds), "{t:?}");
            }
            other => panic!("{other:?}"),
        }
        let text = t.sentence();
        assert!(
            text.starts_with("too short to tell: the samples move in cycles of about 4"),
            "{text}"
        );
        // Cycles of 20 s over 3.5 minutes (about 5 in the later half), and over 15 minutes:
        // never a leak; long enough, a plateau.
        for phase in 0..20 {
            let s = sawtooth(210, 20.0, phase as f64, 0.0, 100 + phase);
            assert_ne!(trend(&s, &TrendRules::default()).name(), "leak");
            let s = sawtooth(900, 20.0, phase as f64, 0.0, 200 + phase);
            let t = trend(&s, &TrendRules::default());
            assert_eq!(t.name(), "plateau", "{}", t.sentence());
        }
    }

    #[test]
    fn a_cycle_longer_than_the_later_half_is_seen_by_its_drops() {
        // A GC every 90 s, the window's one drop 44 s in: the later half (65 s) is one
        // rising edge, a straight "leak" to a line through it.
        let s = series(131, 1.0, 0.3 * MIB, 12, |t| {
            let since = if t < 44.0 { t + 46.0 } else { t - 44.0 };
            30.0 * MIB + 0.64 * MIB * since
        });
        assert!(independent_leak(&s));
        let t = trend(&s, &TrendRules::default());
        match &t {
            Trend::TooShort {
                cycles: Some(c),
                need_seconds,
                ..
            } => {
                assert_eq!(c.basis, BlockBasis::Cycle);
                assert!((86.0..=88.0).contains(&c.block_seconds.unwrap()), "{c:?}");
                assert!(*need_seconds > 900.0, "{need_seconds}");
            }
            other => panic!("{other:?}"),
        }
        // A leak with noise has no such drop.
        let s = series(131, 1.0, 0.3 * MIB, 13, |t| 30.0 * MIB + 0.64 * MIB * t);
        assert_eq!(trend(&s, &TrendRules::default()).name(), "leak");
    }

    /// A soak of a Ruby app under puma (glibc, 8 threads): live bytes climb from 10 to
    /// 110 MiB over the first `climb` seconds as Ruby's malloc limit grows, then swing
    /// 12 MiB with each GC, every `period` seconds; nothing is kept. The climb makes the
    /// window's range ten times a drop.
    fn ruby_warm_up_then_sawtooth(
        seconds: usize,
        climb: f64,
        period: f64,
        seed: u64,
    ) -> Vec<(f64, f64)> {
        series(seconds, 1.0, 1.0 * MIB, seed, |t| {
            10.0 * MIB + 100.0 * MIB * (t / climb).min(1.0) + 12.0 * MIB * (t % period) / period
        })
    }

    #[test]
    fn a_gc_sawtooth_after_a_warm_up_is_neither_a_leak_nor_shrinking() {
        // Windows of 2.5 to 4 minutes, warm-ups of 30 to 70 s (over before the later half),
        // cycles of 12 to 19 s. Measured against the window's range, the GC's drops were no
        // drops, and blocks shorter than a cycle read its phase as growth ("leak") or as a
        // decline.
        let mut plateaus = 0;
        for (i, climb) in [30.0, 50.0, 70.0].into_iter().enumerate() {
            for (j, period) in [12.0, 15.0, 19.0].into_iter().enumerate() {
                for seconds in (150..=240).step_by(10) {
                    let s = ruby_warm_up_then_sawtooth(seconds, climb, period, (i * 3 + j) as u64);
                    let t = trend(&s, &TrendRules::default());
                    assert!(
                        !matches!(t, Trend::Leak { .. } | Trend::Shrinking { .. }),
                        "climb {climb} s, cycle {period} s, {seconds} s: {t:?}"
                    );
                    plateaus += usize::from(t.name() == "plateau");
                }
            }
        }
        // Where the later half holds six cycles, each a block, the plateau is seen.
        assert!(plateaus >= 20, "{plateaus} plateaus of 90");
    }

    /// A real GC sawtooth: the glibc instance of a 4-minute soak of
    /// tests/fixtures/servers/gc_sawtooth.ru under puma (nothing kept between requests),
    /// its live bytes every second: a climb to ~120 MiB over 70 s as Ruby's malloc limit
    /// grows, then a swing of ~12 MiB every 12 s.
    const PUMA_GC_SAWTOOTH: &str =
        include_str!("../../tests/fixtures/series/puma_gc_sawtooth_glibc.csv");

    #[test]
    fn a_real_gc_sawtooth_after_a_slower_warm_up_is_never_a_leak() {
        let points: Vec<(f64, f64)> = PUMA_GC_SAWTOOTH
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (t, v) = l.split_once(',').unwrap();
                (t.parse().unwrap(), v.parse().unwrap())
            })
            .collect();
        assert_eq!(points.len(), 240);
        // CI's run of the same soak saw cycles of 19 s: a slower machine. Its first 80 s
        // stretched 1.6× (a warm-up that ends ~130 s in) and every window from 10 s (after
        // the soak's warm-up window) to 150–240 s: the old rule called three of them a leak
        // (blocks of 10 s across cycles of 17 s whose drops, under a quarter of the
        // window's range, were not seen as drops).
        let slower: Vec<(f64, f64)> = points
            .iter()
            .map(|&(t, v)| (if t < 80.0 { t * 1.6 } else { t + 48.0 }, v))
            .collect();
        // Growth is material against the soak's mean RSS (532 MiB), as a soak judges it.
        let rules = TrendRules {
            reference_bytes: 532.0 * MIB,
            ..TrendRules::default()
        };
        for end in (150..=240).step_by(2) {
            let w: Vec<(f64, f64)> = slower
                .iter()
                .copied()
                .filter(|p| p.0 >= 10.0 && p.0 <= end as f64)
                .collect();
            let t = trend(&w, &rules);
            assert_ne!(t.name(), "leak", "to {end} s: {t:?}");
        }
    }

    #[test]
    fn a_leak_beneath_a_gc_sawtooth_is_found_once_the_window_holds_its_cycles() {
        for phase in [0.0, 7.0, 13.0] {
            // 2 MiB/min under a 16 MiB sawtooth every 20 s.
            let short = trend(
                &sawtooth(210, 20.0, phase, 2.0 * MIB, 1),
                &TrendRules::default(),
            );
            assert_eq!(short.name(), "too_short", "{}", short.sentence());
            let long = trend(
                &sawtooth(400, 20.0, phase, 2.0 * MIB, 2),
                &TrendRules::default(),
            );
            match long {
                Trend::Leak {
                    slope_bytes_per_min,
                    ci,
                    blocks,
                    ..
                } => {
                    assert!(
                        (slope_bytes_per_min / MIB - 2.0).abs() < 0.3,
                        "{slope_bytes_per_min}"
                    );
                    assert!(ci.0 / MIB > 1.5 && ci.1 / MIB < 2.5, "{ci:?}");
                    assert_eq!(blocks.basis, BlockBasis::Cycle);
                    assert!((blocks.seconds - 20.0).abs() < 2.0, "{blocks:?}");
                }
                other => panic!("expected a leak, got {other:?}"),
            }
        }
    }

    /// Of `n` flat series made by `make(seed)`, how many are called a leak.
    fn false_leaks(n: u64, make: impl Fn(u64) -> Vec<(f64, f64)>) -> u64 {
        (0..n)
            .filter(|&seed| trend(&make(seed), &TrendRules::default()).name() == "leak")
            .count() as u64
    }

    #[test]
    fn flat_correlated_series_are_rarely_called_a_leak() {
        // AR(1) with φ = 0.9 around 38 MiB (1-second samples, 7 minutes): taken as
        // independent, about a third of them "grow"; blocks of three autocorrelation
        // times keep it near the interval's 2.5%.
        let ar = |seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut x = 0.0;
            (0..400)
                .map(|i| {
                    x = 0.9 * x + rng.gen_range(-1.0..1.0) * MIB;
                    (i as f64, 38.0 * MIB + x)
                })
                .collect::<Vec<_>>()
        };
        let old = (0..100).filter(|&s| independent_leak(&ar(s))).count();
        assert!(old >= 20, "{old}");
        assert!(false_leaks(100, ar) <= 6);
        // GCs at irregular moments (12–30 s apart), 7 minutes.
        let jitter = |seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (mut start, mut next) = (0.0, rng.gen_range(12.0..30.0));
            (0..400)
                .map(|i| {
                    let t = i as f64;
                    if t - start >= next {
                        start = t;
                        next = rng.gen_range(12.0..30.0);
                    }
                    (t, 30.0 * MIB + 16.0 * MIB * (t - start) / next)
                })
                .collect::<Vec<_>>()
        };
        assert!(false_leaks(100, jitter) <= 5);
        // White noise: the plain interval, about 2.5% one-sided.
        assert!(
            false_leaks(100, |seed| series(400, 1.0, 2.0 * MIB, seed, |_| 38.0
                * MIB))
                <= 6
        );
    }

    #[test]
    fn growth_is_material_against_the_reference_footprint() {
        // 1 MiB over the later half of a 10 MiB live series: 10% of the level, but 0.5% of
        // a 200 MiB process.
        let s = series(60, 1.0, 0.0, 9, |t| 10.0 * MIB + MIB * t / 30.0);
        assert_eq!(trend(&s, &TrendRules::default()).name(), "leak");
        let against = TrendRules {
            reference_bytes: 200.0 * MIB,
            ..TrendRules::default()
        };
        let t = trend(&s, &against);
        assert_ne!(t.name(), "leak", "{}", t.sentence());
        match t {
            Trend::Plateau { material_bytes, .. }
            | Trend::TooShort {
                undecided: Some(Undecided { material_bytes, .. }),
                ..
            } => {
                assert_eq!(material_bytes, 2.0 * MIB)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interval_that_cannot_tell_says_how_much_longer() {
        // ±8 MiB on 38 MiB over a minute, alternating: neither 1% growth nor its absence.
        let s: Vec<(f64, f64)> = (0..60)
            .map(|i| {
                (
                    i as f64,
                    38.0 * MIB + if i % 2 == 0 { 8.0 } else { -8.0 } * MIB,
                )
            })
            .collect();
        let t = trend(&s, &TrendRules::default());
        match &t {
            Trend::TooShort {
                undecided: Some(u),
                need_seconds,
                ..
            } => {
                // Each fall is a drop (counted at most every third sample): blocks of
                // whole cycles.
                assert_eq!(u.blocks.basis, BlockBasis::Cycle);
                assert!([2.0, 4.0].contains(&u.blocks.seconds), "{u:?}");
                assert!(*need_seconds > 60.0, "{need_seconds}");
            }
            other => panic!("{other:?}"),
        }
        let text = t.sentence();
        assert!(
            text.starts_with("too short to tell: the samples have a slope of"),
            "{text}"
        );
        assert!(text.contains(" more minute"), "{text}");
    }

    #[test]
    fn a_series_that_wanders_longer_than_the_window_is_too_short() {
        // A random walk: no cycle, no decorrelation within the window.
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut x = 0.0;
        let s: Vec<(f64, f64)> = (0..200)
            .map(|i| {
                x += rng.gen_range(-1.0..1.0) * MIB;
                (i as f64, 100.0 * MIB + x)
            })
            .collect();
        let t = trend(&s, &TrendRules::default());
        assert_ne!(t.name(), "leak", "{}", t.sentence());
    }

    /// What `memtrial inspect --watch 2.5s` saw of a process appending 1 MiB every 50 ms
    /// (`sign` -1: freeing), read about every 100 ms by a sampler and a process both delayed
    /// by a busy machine (up to 100 ms each).
    fn appends(seed: u64, sign: f64) -> Vec<(f64, f64)> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut t, mut done, mut s) = (0.0, 0.0f64, Vec::new());
        while t < 2.5 {
            t += 0.1 + rng.gen_range(0.0..0.1);
            done = done.max(t - rng.gen_range(0.0..0.1));
            s.push((t, 100.0 * MIB + sign * (done / 0.05).floor() * MIB));
        }
        s
    }

    /// 24 MiB of steady growth in 2.5 s sampled every 100 ms, beside a wobble of ±1 MiB
    /// every 0.8 s (a phase for each seed): the residual is correlated over longer than a
    /// block the later half holds enough of, as the appends' beat against the sampling left
    /// the real watch's.
    fn beat(seed: u64, sign: f64) -> Vec<(f64, f64)> {
        let phase = seed as f64 * 0.37;
        (0..26)
            .map(|k| {
                let t = k as f64 * 0.1;
                let wobble = (std::f64::consts::TAU * t / 0.8 + phase).sin() * MIB;
                (t, 100.0 * MIB + sign * (t * 9.6 * MIB + wobble))
            })
            .collect()
    }

    fn basis(t: &Trend) -> Option<BlockBasis> {
        match t {
            Trend::Leak { blocks, .. }
            | Trend::Shrinking { blocks, .. }
            | Trend::Plateau { blocks, .. } => Some(blocks.basis),
            Trend::TooShort { .. } => None,
        }
    }

    #[test]
    fn growth_that_outruns_its_swing_is_told_where_blocks_do_not_fit() {
        let mut by_envelope = 0;
        for seed in 0..200 {
            let t = trend(&appends(seed, 1.0), &TrendRules::default());
            assert_eq!(t.name(), "leak", "seed {seed}: {}", t.sentence());
            let t = trend(&beat(seed, 1.0), &TrendRules::default());
            assert_eq!(t.name(), "leak", "seed {seed}: {}", t.sentence());
            by_envelope += usize::from(basis(&t) == Some(BlockBasis::Envelope));
            // The mirror, freeing: a steady fall with fewer than 12 samples in the later
            // half is all drops to step 6's rule (a quarter of the range within three
            // samples), read as a cycle's fall, so the verdict is the envelope's alone.
            let a = beat(seed, -1.0);
            let mid = a[0].0 + (a[a.len() - 1].0 - a[0].0) / 2.0;
            let fitted: Vec<_> = a.iter().copied().filter(|p| p.0 >= mid).collect();
            let rules = TrendRules::default();
            let w = Window {
                rules: &rules,
                samples: a.len(),
                seconds: a[a.len() - 1].0 - a[0].0,
                fitted_seconds: fitted[fitted.len() - 1].0 - fitted[0].0,
            };
            let t = envelope_verdict(&w, &a, &fitted).expect("a verdict");
            assert_eq!(t.name(), "shrinking", "seed {seed}: {}", t.sentence());
            assert_ne!(trend(&a, &rules).name(), "leak");
        }
        // Without the envelope these were "too short to tell" (blocks of ~0.7 s, one in
        // the later half): the rule is what tells them.
        assert!(by_envelope >= 25, "{by_envelope} of 200 by the envelope");
        let t = trend(&appends(3, 1.0), &TrendRules::default());
        if basis(&t) == Some(BlockBasis::Envelope) {
            assert!(
                t.sentence().contains("its swing allows"),
                "{}",
                t.sentence()
            );
        }
    }

    #[test]
    fn growth_in_one_burst_or_none_is_not_an_envelope_verdict() {
        for seed in 0..50 {
            // 24 MiB at once, 1.9 s into a 2.5 s watch: a step, not steady growth.
            let step = series(25, 0.1, 0.5 * MIB, seed, |t| {
                100.0 * MIB + if t > 1.9 { 24.0 * MIB } else { 0.0 }
            });
            let t = trend(&step, &TrendRules::default());
            assert_ne!(basis(&t), Some(BlockBasis::Envelope), "{}", t.sentence());
            let flat = series(25, 0.1, 0.5 * MIB, seed, |_| 100.0 * MIB);
            let t = trend(&flat, &TrendRules::default());
            assert_ne!(t.name(), "leak", "{}", t.sentence());
            assert_ne!(basis(&t), Some(BlockBasis::Envelope), "{}", t.sentence());
        }
    }

    #[test]
    fn flat_wandering_series_are_rarely_an_envelope_verdict() {
        // A random walk of 50 samples and AR(1) (φ = 0.99, 120 samples), 200 seeds each: a
        // flat series' slope beyond its own swing's reach; a Python model of the rule gave
        // 7 in 2000 for such walks and none for the AR(1).
        let mut verdicts = 0;
        for seed in 0..200 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (mut walk, mut ar) = (0.0, 0.0);
            let w: Vec<(f64, f64)> = (0..50)
                .map(|i| {
                    walk += rng.gen_range(-1.0..1.0) * MIB;
                    (i as f64, 100.0 * MIB + walk)
                })
                .collect();
            let a: Vec<(f64, f64)> = (0..120)
                .map(|i| {
                    ar = 0.99 * ar + rng.gen_range(-1.0..1.0) * MIB;
                    (i as f64, 100.0 * MIB + ar)
                })
                .collect();
            for s in [w, a] {
                let t = trend(&s, &TrendRules::default());
                verdicts += usize::from(basis(&t) == Some(BlockBasis::Envelope));
            }
        }
        assert!(verdicts <= 4, "{verdicts} of 400");
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

    /// The rates behind docs/methodology.md ("A trend through the program's own cycles"):
    /// 200 seeds of each kind of series at 2, 3.5, 6.7 and 15 minutes of 1-second samples,
    /// how many the trend calls a leak and how many "too short", beside the old rule (the
    /// later half's samples taken as independent). Prints its table:
    /// `cargo test --release --lib analysis::trend::tests::rates -- --ignored --nocapture`.
    #[test]
    #[ignore = "statistics over 200 seeds of each series: its figures are in docs/methodology.md"]
    fn rates_over_seeds() {
        let kinds = [
            "sawtooth every 20 s",
            "GCs 12-30 s apart",
            "AR(1) 0.9",
            "white noise",
            "2 MiB/min under the sawtooth",
        ];
        for (k, name) in kinds.iter().enumerate() {
            for secs in [120usize, 210, 400, 900] {
                let (mut leaks, mut old, mut short) = (0, 0, 0);
                for seed in 0..200u64 {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed);
                    let phase: f64 = rng.gen_range(0.0..20.0);
                    let (mut start, mut next, mut ar) = (0.0, rng.gen_range(12.0..30.0), 0.0);
                    let s: Vec<(f64, f64)> = (0..secs)
                        .map(|i| {
                            let t = i as f64;
                            let e = rng.gen_range(-0.5..0.5) * MIB;
                            let saw = 30.0 * MIB + 16.0 * MIB * ((t + phase) % 20.0) / 20.0 + e;
                            let v = match k {
                                0 => saw,
                                1 => {
                                    if t - start >= next {
                                        start = t;
                                        next = rng.gen_range(12.0..30.0);
                                    }
                                    30.0 * MIB + 16.0 * MIB * (t - start) / next + e
                                }
                                2 => {
                                    ar = 0.9 * ar + rng.gen_range(-1.0..1.0) * MIB;
                                    38.0 * MIB + ar
                                }
                                3 => 38.0 * MIB + 4.0 * e,
                                _ => saw + 2.0 * MIB * t / 60.0,
                            };
                            (t, v)
                        })
                        .collect();
                    match trend(&s, &TrendRules::default()).name() {
                        "leak" => leaks += 1,
                        "too_short" => short += 1,
                        _ => {}
                    }
                    old += u32::from(independent_leak(&s));
                }
                eprintln!("{name}, {secs} s: leak {leaks}/200 (samples as independent: {old}), too short {short}");
                if k < 4 {
                    assert!(
                        leaks <= 10,
                        "{name}, {secs} s: {leaks} of 200 called a leak"
                    );
                } else if secs >= 400 {
                    assert_eq!(leaks, 200, "{name}, {secs} s");
                }
            }
        }
    }
}
