//! Medians and bootstrap confidence intervals over a handful of runs.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Bootstrap resamples per interval.
pub(crate) const RESAMPLES: usize = 4000;

/// The median of `xs` (mean of the two middle values for an even count); NaN if empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The `p` quantile (0..=1) of sorted values, by linear interpolation.
pub(crate) fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = p.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

fn resample_median(xs: &[f64], rng: &mut ChaCha8Rng, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..xs.len()).map(|_| xs[rng.gen_range(0..xs.len())]));
    median(buf)
}

/// 95% percentile-bootstrap interval of the median.
pub(crate) fn median_ci95(xs: &[f64], seed: u64) -> (f64, f64) {
    match xs.len() {
        0 => (f64::NAN, f64::NAN),
        1 => (xs[0], xs[0]),
        _ => {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut buf = Vec::with_capacity(xs.len());
            let mut meds: Vec<f64> = (0..RESAMPLES)
                .map(|_| resample_median(xs, &mut rng, &mut buf))
                .collect();
            meds.sort_by(f64::total_cmp);
            (quantile_sorted(&meds, 0.025), quantile_sorted(&meds, 0.975))
        }
    }
}

/// The ratio of medians `median(xs) / median(base)` and its 95% percentile-bootstrap
/// interval, resampling both groups independently. `None` when a median is zero or a
/// group is empty.
pub(crate) fn ratio_ci95(xs: &[f64], base: &[f64], seed: u64) -> Option<(f64, (f64, f64))> {
    if median(base) == 0.0 {
        return None;
    }
    two_groups_ci95(xs, base, seed, |a, b| (b != 0.0).then(|| a / b))
}

/// The difference of medians `median(xs) - median(base)` and its 95% percentile-bootstrap
/// interval, drawn as [`ratio_ci95`] draws (a gate's tolerance in absolute units).
pub(crate) fn difference_ci95(xs: &[f64], base: &[f64], seed: u64) -> Option<(f64, (f64, f64))> {
    two_groups_ci95(xs, base, seed, |a, b| Some(a - b))
}

/// `combine(median(xs), median(base))` and the 2.5% and 97.5% quantiles of the same over
/// [`RESAMPLES`] draws that resample each group independently.
fn two_groups_ci95(
    xs: &[f64],
    base: &[f64],
    seed: u64,
    combine: impl Fn(f64, f64) -> Option<f64>,
) -> Option<(f64, (f64, f64))> {
    if xs.is_empty() || base.is_empty() {
        return None;
    }
    let (mx, mb) = (median(xs), median(base));
    if !mx.is_finite() || !mb.is_finite() {
        return None;
    }
    let value = combine(mx, mb)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut bx, mut bb) = (Vec::new(), Vec::new());
    let mut draws: Vec<f64> = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        let a = resample_median(xs, &mut rng, &mut bx);
        let b = resample_median(base, &mut rng, &mut bb);
        if let Some(d) = combine(a, b) {
            draws.push(d);
        }
    }
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    Some((
        value,
        (
            quantile_sorted(&draws, 0.025),
            quantile_sorted(&draws, 0.975),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&v, 0.0), 1.0);
        assert_eq!(quantile_sorted(&v, 0.5), 3.0);
        assert_eq!(quantile_sorted(&v, 1.0), 5.0);
        assert_eq!(quantile_sorted(&v, 0.125), 1.5);
    }

    #[test]
    fn median_interval_brackets_the_median_and_stays_in_range() {
        let xs = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0];
        let (lo, hi) = median_ci95(&xs, 1);
        assert!(lo <= 13.0 && 13.0 <= hi, "{lo} {hi}");
        assert!(lo >= 10.0 && hi <= 16.0);
        assert!(hi - lo < 6.0, "narrower than the range: {lo} {hi}");
        assert_eq!(median_ci95(&[5.0], 1), (5.0, 5.0));
        assert_eq!(median_ci95(&xs, 3), median_ci95(&xs, 3), "seeded");
    }

    #[test]
    fn clear_difference_excludes_one() {
        let base = [100.0, 102.0, 98.0, 101.0, 99.0];
        let half = [50.0, 51.0, 49.0, 50.5, 49.5];
        let (r, (lo, hi)) = ratio_ci95(&half, &base, 7).unwrap();
        assert!((r - 0.5).abs() < 0.01);
        assert!(hi < 1.0 && lo > 0.45, "{lo} {hi}");
    }

    #[test]
    fn overlapping_groups_include_one() {
        let base = [100.0, 110.0, 90.0, 105.0, 95.0];
        let same = [102.0, 92.0, 108.0, 97.0, 101.0];
        let (_, (lo, hi)) = ratio_ci95(&same, &base, 7).unwrap();
        assert!(lo < 1.0 && hi > 1.0, "{lo} {hi}");
    }

    #[test]
    fn a_difference_of_medians_and_its_interval() {
        let base = [100.0, 102.0, 98.0, 101.0, 99.0];
        let more = [120.0, 121.0, 119.0, 120.5, 119.5];
        let (d, (lo, hi)) = difference_ci95(&more, &base, 7).unwrap();
        assert!((d - 20.0).abs() < 1e-9, "{d}");
        assert!(lo > 15.0 && hi < 25.0 && lo <= d && d <= hi, "{lo} {hi}");
        // Drawn as the ratio is: the same seed gives the same interval.
        assert_eq!(
            difference_ci95(&more, &base, 7),
            difference_ci95(&more, &base, 7)
        );
    }

    #[test]
    fn zero_baseline_has_no_ratio() {
        assert!(ratio_ci95(&[1.0], &[0.0, 0.0], 1).is_none());
        assert!(ratio_ci95(&[], &[1.0], 1).is_none());
    }
}
