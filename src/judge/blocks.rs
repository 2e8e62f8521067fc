//! Statistics for time series from a fleet: each pod's samples reduced to one median per
//! time block, a group's figure the median of its pods' blocks, and the interval of a
//! ratio from a bootstrap that keeps what the data shares: pods are drawn with replacement
//! (pods are the independent units), time blocks in runs of neighbouring blocks (a moving
//! block bootstrap: memory an hour from now is not independent of memory now), and the
//! same draw of time blocks for the baseline and a variant that cover the same window
//! (they saw the same traffic at the same hours). See docs/methodology.md.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::prom::Series;
use crate::analysis::stats::{median, quantile_sorted};

/// Resamples per interval.
const RESAMPLES: usize = 2000;

/// Fewer blocks than this in a group, and it is too little data to judge.
pub const MIN_BLOCKS: usize = 3;

/// One group's data: per pod, per time block, the median of the pod's samples in it.
#[derive(Debug, Clone)]
pub struct Cells {
    pub pods: Vec<String>,
    pub cells: Vec<Vec<Option<f64>>>,
    pub samples: usize,
    /// Pods whose first samples were left out as a warm-up (they started in the window).
    pub warmed: usize,
}

impl Cells {
    pub fn blocks(&self) -> usize {
        self.cells.first().map_or(0, Vec::len)
    }

    /// Blocks in which some pod has data.
    pub fn blocks_with_data(&self) -> usize {
        (0..self.blocks())
            .filter(|b| self.cells.iter().any(|p| p[*b].is_some()))
            .count()
    }

    /// The group's figure: the median over its pods' block medians.
    pub fn figure(&self) -> Option<f64> {
        let all: Vec<f64> = self.cells.iter().flatten().flatten().copied().collect();
        (!all.is_empty()).then(|| median(&all))
    }

    /// Per block, the median over the pods that have data in it.
    pub fn per_block(&self) -> Vec<Option<f64>> {
        (0..self.blocks())
            .map(|b| {
                let v: Vec<f64> = self.cells.iter().filter_map(|p| p[b]).collect();
                (!v.is_empty()).then(|| median(&v))
            })
            .collect()
    }

    fn resampled(&self, pods: &[usize], blocks: &[usize]) -> Option<f64> {
        let mut v = Vec::with_capacity(pods.len() * blocks.len());
        for &p in pods {
            for &b in blocks {
                if let Some(x) = self.cells[p].get(b).copied().flatten() {
                    v.push(x);
                }
            }
        }
        (!v.is_empty()).then(|| median(&v))
    }
}

/// A pod's name: its labels but the metric's name, each label's name and value escaped
/// (a name is shown as text, whatever a server sent).
pub fn pod_name(s: &Series) -> String {
    s.labels
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| crate::escape::terminal(&format!("{k}={v:?}")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a series whose first sample is at `first` starts to count: a series that begins
/// later than 1.5 steps into the window started there (a rollout, a restart) loses its
/// first `warmup` seconds; one already running when the window opened keeps everything
/// (`-inf`).
pub fn warm_from(first: f64, start: f64, step: f64, warmup: f64) -> f64 {
    if first > start + 1.5 * step {
        first + warmup
    } else {
        f64::NEG_INFINITY
    }
}

/// The index of the first point kept of a series (sorted by time) whose warm-up ends at
/// `from`: the first at or after `from` whose value is not the one held from before `from`.
/// Prometheus repeats a sample at every step until the next one: a target that refreshes
/// its figures every 15 s, like the kubelet's cAdvisor, would otherwise carry a value read
/// while the container was starting (a few MiB) past its warm-up.
pub fn warm_start(points: &[(f64, f64)], from: f64) -> usize {
    let i = points.partition_point(|p| p.0 < from);
    let Some(&(_, held)) = i.checked_sub(1).map(|j| &points[j]) else {
        return i;
    };
    i + points[i..].iter().take_while(|p| p.1 == held).count()
}

/// The series of one group cut into `n` blocks of `block` seconds from `start`. A series
/// that begins later than one `step` into the window started there (a rollout, a restart):
/// its first `warmup` seconds are left out, and the value it held then ([`warm_start`]).
pub fn cells(series: &[Series], start: f64, block: f64, n: usize, step: f64, warmup: f64) -> Cells {
    let mut out = Cells {
        pods: Vec::new(),
        cells: Vec::new(),
        samples: 0,
        warmed: 0,
    };
    for s in series {
        let Some(&(first, _)) = s.points.first() else {
            continue;
        };
        let from = warm_from(first, start, step, warmup);
        if from.is_finite() {
            out.warmed += 1;
        }
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); n];
        for &(t, v) in &s.points[warm_start(&s.points, from)..] {
            let b = ((t - start) / block).floor();
            if b >= 0.0 && (b as usize) < n {
                per[b as usize].push(v);
                out.samples += 1;
            }
        }
        out.pods.push(pod_name(s));
        out.cells.push(
            per.iter()
                .map(|v| (!v.is_empty()).then(|| median(v)))
                .collect(),
        );
    }
    out
}

/// `n` block indices drawn as runs of `len` neighbours from random starts (wrapping).
fn block_draw(n: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let len = ((n as f64).cbrt().ceil() as usize).max(1);
    let mut out = Vec::with_capacity(n + len);
    while out.len() < n {
        let s = rng.gen_range(0..n);
        out.extend((0..len).map(|i| (s + i) % n));
    }
    out.truncate(n);
    out
}

fn pod_draw(n: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    (0..n).map(|_| rng.gen_range(0..n)).collect()
}

/// The ratio `variant / base` of the groups' figures with its 95% interval; `paired`
/// when both cover the same window (the same time blocks are drawn for both).
pub fn ratio(variant: &Cells, base: &Cells, paired: bool, seed: u64) -> Option<(f64, (f64, f64))> {
    let point = variant.figure()? / base.figure()?;
    if !point.is_finite() || variant.pods.is_empty() || base.pods.is_empty() {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rs = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        let bb = block_draw(base.blocks(), &mut rng);
        let vb = if paired && variant.blocks() == base.blocks() {
            bb.clone()
        } else {
            block_draw(variant.blocks(), &mut rng)
        };
        let b = base.resampled(&pod_draw(base.pods.len(), &mut rng), &bb);
        let v = variant.resampled(&pod_draw(variant.pods.len(), &mut rng), &vb);
        if let (Some(v), Some(b)) = (v, b) {
            let r = v / b;
            if r.is_finite() {
                rs.push(r);
            }
        }
    }
    if rs.len() < RESAMPLES / 2 {
        return None;
    }
    rs.sort_by(f64::total_cmp);
    Some((
        point,
        (quantile_sorted(&rs, 0.025), quantile_sorted(&rs, 0.975)),
    ))
}

/// A series of metric `m` for the pod named `pod`, for tests.
#[cfg(test)]
pub(crate) fn series(pod: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        labels: std::collections::BTreeMap::from([
            ("__name__".to_string(), "m".to_string()),
            ("pod".to_string(), pod.to_string()),
        ]),
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pods whose memory wanders in hourly steps around `level`, seeded.
    fn group(level: f64, pods: usize, seed: u64) -> Vec<Series> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..pods)
            .map(|p| {
                let mut x = level;
                let pts = (0..24 * 60)
                    .map(|m| {
                        if m % 60 == 0 {
                            x = level * (1.0 + rng.gen_range(-0.1..0.1));
                        }
                        (m as f64 * 60.0, x * (1.0 + rng.gen_range(-0.01..0.01)))
                    })
                    .collect();
                series(&format!("p{p}"), pts)
            })
            .collect()
    }

    #[test]
    fn identical_groups_include_one_and_a_leaner_one_does_not() {
        let c = |s: &[Series]| cells(s, 0.0, 3600.0, 24, 60.0, 3600.0);
        let base = c(&group(1000.0, 4, 1));
        let twin = c(&group(1000.0, 4, 2));
        let lean = c(&group(600.0, 4, 3));
        assert_eq!((base.pods.len(), base.blocks_with_data()), (4, 24));
        let (r, (lo, hi)) = ratio(&twin, &base, true, 9).unwrap();
        assert!(lo <= 1.0 && hi >= 1.0, "{r} [{lo}, {hi}]");
        let (r, (lo, hi)) = ratio(&lean, &base, true, 9).unwrap();
        assert!(hi < 1.0 && (0.5..0.7).contains(&r), "{r} [{lo}, {hi}]");
    }

    #[test]
    fn a_pod_that_started_in_the_window_loses_its_warm_up() {
        let s = vec![
            series("old", (0..120).map(|m| (m as f64 * 60.0, 1.0)).collect()),
            series(
                "new",
                (60..120)
                    .map(|m| (m as f64 * 60.0, if m < 90 { 9.0 } else { 2.0 }))
                    .collect(),
            ),
        ];
        let c = cells(&s, 0.0, 1800.0, 4, 60.0, 1800.0);
        assert_eq!(c.warmed, 1);
        assert_eq!(c.cells[1], vec![None, None, None, Some(2.0)]);
        assert_eq!(c.cells[0], vec![Some(1.0); 4]);
    }

    /// cAdvisor refreshes a container's figures every ~15 s while Prometheus's steps are 1 s:
    /// the value read as the container started is repeated past a 6 s warm-up, and stays
    /// out until the next sample.
    #[test]
    fn a_value_held_from_the_warm_up_stays_out() {
        let points: Vec<(f64, f64)> = (10..70)
            .map(|t| {
                (
                    f64::from(t),
                    if t < 25 {
                        2.0
                    } else if t < 40 {
                        300.0
                    } else {
                        400.0
                    },
                )
            })
            .collect();
        assert_eq!(points[warm_start(&points, 16.0)], (25.0, 300.0));
        assert_eq!(warm_start(&points, f64::NEG_INFINITY), 0);
        assert_eq!(points[warm_start(&points, 30.0)], (40.0, 400.0));
        assert_eq!(warm_start(&points, 80.0), points.len());
        let s = vec![series("new", points)];
        let c = cells(&s, 0.0, 10.0, 7, 1.0, 6.0);
        assert_eq!(c.warmed, 1);
        assert_eq!(
            c.cells[0],
            vec![
                None,
                None,
                Some(300.0),
                Some(300.0),
                Some(400.0),
                Some(400.0),
                Some(400.0)
            ]
        );
    }
}
