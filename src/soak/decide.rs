//! A soak's comparison: per variant, the figures of its measured windows against the
//! baseline's in the same windows (they saw the same requests at the same moments), the
//! ratio's 95% interval from a moving-block bootstrap over the windows (neighbouring
//! windows are correlated: memory in one is most of memory in the next), and the
//! sequential rule of `--until-decided`. See docs/methodology.md, "Soaks".

use serde::Serialize;

use crate::judge::blocks::{ratio, Cells};
use crate::record::soak::{DecideRule, SoakWindow, WindowFigures};

/// A window counts when it is not warm-up and lasted at least this share of a window
/// (the last one of a segment cut short by the end or a crash does not).
pub const MIN_WINDOW_SHARE: f64 = 0.9;

/// Fewer paired windows than this, and there is no interval.
pub const MIN_WINDOWS: usize = 3;

/// One figure of a variant against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    /// Median over the paired windows, the variant's and the baseline's.
    pub variant: f64,
    pub baseline: f64,
    pub ratio: f64,
    /// 95% interval (absent with fewer than [`MIN_WINDOWS`] paired windows).
    pub ci: Option<(f64, f64)>,
    pub windows: usize,
}

impl Ratio {
    /// The interval lies wholly below or above 1.
    pub fn significant(&self) -> bool {
        self.ci.is_some_and(|(lo, hi)| hi < 1.0 || lo > 1.0)
    }
}

/// A figure of the windows, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Rss,
    WorkingSet,
    Pss,
    P50,
    P95,
    Throughput,
    CpuSeconds,
}

impl Figure {
    pub fn name(self) -> &'static str {
        match self {
            Figure::Rss => "rss",
            Figure::WorkingSet => "working_set",
            Figure::Pss => "pss",
            Figure::P50 => "p50",
            Figure::P95 => "p95",
            Figure::Throughput => "throughput",
            Figure::CpuSeconds => "cpu",
        }
    }

    pub fn of(self, w: &SoakWindow) -> Option<f64> {
        let f: &WindowFigures = &w.figures;
        let secs = w.to_t - w.from_t;
        match self {
            Figure::Rss => f.rss_mean,
            Figure::WorkingSet => f.working_set_mean,
            Figure::Pss => f.pss_mean,
            Figure::P50 => f.p50_ms,
            Figure::P95 => f.p95_ms,
            Figure::Throughput => (secs > 0.0 && f.requests > 0).then(|| f.requests as f64 / secs),
            Figure::CpuSeconds => f.cpu_seconds,
        }
        .filter(|v| v.is_finite() && *v > 0.0)
    }
}

/// The windows that count: measured (not warm-up), long enough, the instance up.
pub fn counted(w: &SoakWindow, window_seconds: f64) -> bool {
    !w.warm && !w.figures.instance_down && w.to_t - w.from_t >= MIN_WINDOW_SHARE * window_seconds
}

/// `variant`'s figure against the baseline's, over the windows both have.
pub fn compare(
    windows: &[SoakWindow],
    window_seconds: f64,
    variant: &str,
    baseline: &str,
    figure: Figure,
    seed: u64,
) -> Option<Ratio> {
    let key = |w: &SoakWindow| (w.segment, w.index);
    let base: std::collections::BTreeMap<(u32, u32), f64> = windows
        .iter()
        .filter(|w| w.variant == baseline && counted(w, window_seconds))
        .filter_map(|w| Some((key(w), figure.of(w)?)))
        .collect();
    let mut v = Vec::new();
    let mut b = Vec::new();
    for w in windows
        .iter()
        .filter(|w| w.variant == variant && counted(w, window_seconds))
    {
        if let (Some(x), Some(y)) = (figure.of(w), base.get(&key(w))) {
            v.push(Some(x));
            b.push(Some(*y));
        }
    }
    let n = v.len();
    if n == 0 {
        return None;
    }
    let cells = |name: &str, c: Vec<Option<f64>>| Cells {
        pods: vec![name.to_string()],
        cells: vec![c],
        samples: n,
        warmed: 0,
    };
    let (vc, bc) = (cells(variant, v), cells(baseline, b));
    let (vf, bf) = (vc.figure()?, bc.figure()?);
    let point = vf / bf;
    let ci = if n >= MIN_WINDOWS {
        ratio(&vc, &bc, true, seed).map(|(_, ci)| ci)
    } else {
        None
    };
    Some(Ratio {
        variant: vf,
        baseline: bf,
        ratio: point,
        ci,
        windows: n,
    })
}

/// Where a variant stands under the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Not yet: the interval straddles a margin's edge, or too few windows.
    Open,
    /// Lower or higher than the baseline by more than the margin.
    Differs,
    /// Within the margin of the baseline: no difference that matters.
    Same,
}

fn standing_of(r: &Ratio, rule: &DecideRule) -> Standing {
    let Some((lo, hi)) = r.ci else {
        return Standing::Open;
    };
    let (low, high) = (1.0 - rule.margin, 1.0 + rule.margin);
    if hi < low || lo > high {
        Standing::Differs
    } else if lo >= low && hi <= high {
        Standing::Same
    } else {
        Standing::Open
    }
}

/// Whether the rule has decided `variant`: the same standing (not open) after each of the
/// last `consecutive` windows — the comparison redone on the windows up to each of them —
/// and at least `min_windows` counted windows in all.
pub fn decided(
    windows: &[SoakWindow],
    window_seconds: f64,
    variant: &str,
    baseline: &str,
    rule: &DecideRule,
) -> Standing {
    let mut ends: Vec<f64> = windows
        .iter()
        .filter(|w| w.variant == variant && counted(w, window_seconds))
        .map(|w| w.to_t)
        .collect();
    ends.sort_by(f64::total_cmp);
    ends.dedup();
    if ends.len() < rule.min_windows.max(MIN_WINDOWS as u32) as usize
        || ends.len() < rule.consecutive as usize
    {
        return Standing::Open;
    }
    let mut seen = None;
    for end in &ends[ends.len() - rule.consecutive.max(1) as usize..] {
        let upto: Vec<SoakWindow> = windows.iter().filter(|w| w.to_t <= *end).cloned().collect();
        let Some(r) = compare(&upto, window_seconds, variant, baseline, Figure::Rss, 7) else {
            return Standing::Open;
        };
        let s = standing_of(&r, rule);
        if s == Standing::Open || seen.is_some_and(|p| p != s) {
            return Standing::Open;
        }
        seen = Some(s);
    }
    seen.unwrap_or(Standing::Open)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(variant: &str, index: u32, rss: f64) -> SoakWindow {
        SoakWindow {
            variant: variant.into(),
            index,
            segment: 0,
            from_t: f64::from(index) * 60.0,
            to_t: f64::from(index + 1) * 60.0,
            warm: index == 0,
            figures: WindowFigures {
                rss_mean: Some(rss),
                ..Default::default()
            },
            latency: None,
        }
    }

    fn soak(n: u32, base: impl Fn(u32) -> f64, var: impl Fn(u32) -> f64) -> Vec<SoakWindow> {
        (0..n)
            .flat_map(|i| [w("glibc", i, base(i)), w("arena2", i, var(i))])
            .collect()
    }

    fn wiggle(i: u32) -> f64 {
        1.0 + 0.01 * f64::from((i * 7919) % 5) - 0.02
    }

    #[test]
    fn a_planted_difference_is_decided_and_identical_twins_are_the_same() {
        let rule = DecideRule::default();
        let leaner = soak(12, |i| 1e9 * wiggle(i), |i| 6e8 * wiggle(i + 3));
        let r = compare(&leaner, 60.0, "arena2", "glibc", Figure::Rss, 1).unwrap();
        assert_eq!(r.windows, 11, "the warm-up window is left out");
        assert!(r.significant() && r.ratio < 0.7, "{r:?}");
        assert_eq!(
            decided(&leaner, 60.0, "arena2", "glibc", &rule),
            Standing::Differs
        );
        let twins = soak(12, |i| 1e9 * wiggle(i), |i| 1e9 * wiggle(i + 1));
        assert_eq!(
            decided(&twins, 60.0, "arena2", "glibc", &rule),
            Standing::Same
        );
        // Too early to tell: three windows, one of them warm-up.
        let early = soak(3, |i| 1e9 * wiggle(i), |i| 6e8 * wiggle(i));
        assert_eq!(
            decided(&early, 60.0, "arena2", "glibc", &rule),
            Standing::Open
        );
    }

    #[test]
    fn a_difference_near_the_margin_stays_open() {
        // Windows alternate 8% and 2% below the baseline: the interval straddles the
        // margin's edge (0.95), so the rule can say neither "differs" nor "same".
        let rule = DecideRule::default();
        let edge = soak(10, |_| 1e9, |i| 1e9 * if i % 2 == 0 { 0.92 } else { 0.98 });
        let r = compare(&edge, 60.0, "arena2", "glibc", Figure::Rss, 1).unwrap();
        let (lo, hi) = r.ci.unwrap();
        assert!(lo < 0.95 && hi > 0.95, "{r:?}");
        assert_eq!(
            decided(&edge, 60.0, "arena2", "glibc", &rule),
            Standing::Open
        );
    }

    #[test]
    fn short_and_down_windows_do_not_count() {
        let mut ws = soak(6, |_| 1e9, |_| 5e8);
        ws[5].to_t = ws[5].from_t + 10.0;
        ws[7].figures.instance_down = true;
        let r = compare(&ws, 60.0, "arena2", "glibc", Figure::Rss, 1).unwrap();
        assert_eq!(r.windows, 3);
    }
}
