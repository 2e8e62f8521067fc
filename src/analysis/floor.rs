//! The program's floor: the most the program itself had live — the peak of its live bytes
//! as the allocators count them — is what any allocator needs at least, so each variant's
//! peak is judged against it ("glibc peaked at 2.6× what the program was seen to have
//! live; tcmalloc at 1.2×").
//!
//! - Each run's peak of live bytes is the highest of its allocator samples
//!   ([`Figure::PeakLiveBytes`]): a lower bound, since no allocator memtrial reads keeps a
//!   high-water mark of its live bytes, and it stands only where the samples span the run.
//! - A variant's is the median over its runs; the program's floor is the median of the
//!   variants' — one quantity, the program's, whatever the allocator.
//! - Allocators count the same blocks a little differently (size classes, chunk headers):
//!   a variant whose peak of live bytes departs from the floor by more than
//!   [`ACCOUNTING`] either way is flagged, with what the figures say about it (how many
//!   samples each peak rests on) and nothing they do not.
//! - Each variant's peak over the floor ([`Figure::PeakOverFloor`]) is its median peak RSS
//!   (and interval) over the floor; it is never a ratio to the baseline's.

use serde::Serialize;

use super::{Estimate, Figure, VariantSummary};
use crate::units::format_bytes;

/// How far apart allocators' counts of the same live blocks can lie: size classes spaced
/// a quarter apart (jemalloc, tcmalloc, mimalloc) and glibc's 8-byte chunk header and
/// 16-byte alignment round a block of 64 bytes or more up by at most 25%.
pub(crate) const ACCOUNTING: f64 = 1.25;

/// The program's floor over an experiment's variants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floor {
    /// The median of the variants' peaks of live bytes (each the median over its runs).
    pub bytes: f64,
    /// Every peak of live bytes is the highest of a run's allocator samples: the program's
    /// own peak was at least this.
    pub lower_bound: bool,
    /// The variants whose peaks of live bytes it rests on.
    pub variants: Vec<String>,
    /// The fewest and the most allocator samples a run those peaks rest on (each
    /// variant's median).
    pub samples_per_run: [f64; 2],
    /// Some variant's peak of live bytes departs from the floor beyond [`ACCOUNTING`]
    /// (its summary's `floor_departure` says which and by how much).
    pub disputed: bool,
}

/// The program's floor, from the variants whose peak of live bytes stands in some run;
/// `None` when none has one (the probe off, mimalloc alone, runs too short).
pub(crate) fn floor(variants: &[VariantSummary]) -> Option<Floor> {
    let with: Vec<(&VariantSummary, f64)> = variants
        .iter()
        .filter_map(|s| Some((s, s.figures.get(&Figure::PeakLiveBytes)?.median)))
        .filter(|(_, b)| b.is_finite() && *b > 0.0)
        .collect();
    if with.is_empty() {
        return None;
    }
    let bytes = super::stats::median(&with.iter().map(|(_, b)| *b).collect::<Vec<_>>());
    let samples: Vec<f64> = with
        .iter()
        .filter_map(|(s, _)| s.evidence.get(&Figure::PeakLiveBytes)?.samples)
        .collect();
    let lo = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = samples.iter().copied().fold(0.0, f64::max);
    Some(Floor {
        bytes,
        lower_bound: true,
        variants: with.iter().map(|(s, _)| s.name.clone()).collect(),
        samples_per_run: if samples.is_empty() {
            [0.0, 0.0]
        } else {
            [lo, hi]
        },
        disputed: with
            .iter()
            .any(|(_, b)| !(1.0 / ACCOUNTING..=ACCOUNTING).contains(&(b / bytes))),
    })
}

/// Each variant's peak over the floor, and a departure from the floor said where there is
/// one.
pub(crate) fn judge(variants: &mut [VariantSummary], floor: &Floor) {
    let samples_of = |s: &VariantSummary| {
        s.evidence
            .get(&Figure::PeakLiveBytes)
            .and_then(|e| e.samples)
    };
    let others: Vec<(String, Option<f64>)> = variants
        .iter()
        .filter(|s| s.figures.contains_key(&Figure::PeakLiveBytes))
        .map(|s| (s.name.clone(), samples_of(s)))
        .collect();
    let f = floor.bytes;
    for s in variants.iter_mut() {
        if let Some(peak) = s.figures.get(&Figure::PeakRssBytes).copied() {
            s.figures.insert(
                Figure::PeakOverFloor,
                Estimate {
                    median: peak.median / f,
                    ci95: [peak.ci95[0] / f, peak.ci95[1] / f],
                    n: peak.n,
                },
            );
        }
        let Some(live) = s.figures.get(&Figure::PeakLiveBytes).map(|e| e.median) else {
            continue;
        };
        let r = live / f;
        if (1.0 / ACCOUNTING..=ACCOUNTING).contains(&r) {
            continue;
        }
        let mine = samples_of(s);
        let theirs: Vec<f64> = others
            .iter()
            .filter(|(n, _)| *n != s.name)
            .filter_map(|(_, x)| *x)
            .collect();
        let rest = if theirs.is_empty() {
            String::new()
        } else {
            let m = super::stats::median(&theirs);
            match mine {
                // A peak drawn from far fewer samples than the others' can miss the top:
                // what the figures say about a peak below the floor.
                Some(n) if r < 1.0 && n * 2.0 <= m => format!(
                    "; its peak rests on {n:.0} allocator samples a run against {m:.0} for the others: a sparser lower bound, which can miss the top"
                ),
                Some(n) => format!(
                    "; its peak rests on {n:.0} allocator samples a run ({m:.0} for the others); no figure memtrial has explains the rest"
                ),
                None => String::new(),
            }
        };
        s.floor_departure = Some(format!(
            "its live bytes peaked at {} ({r:.2}× the program's floor of {}): further apart than allocators count the same blocks (size classes, chunk headers: up to {ACCOUNTING:.2}× either way){rest}",
            format_bytes(live),
            format_bytes(f),
        ));
    }
}

/// The batch headline: the baseline's peak against the program's floor, and the variant
/// whose peak lies nearest it. `None` without a floor or a baseline peak.
pub(crate) fn headline(a: &super::Analysis) -> Option<String> {
    let floor = a.floor.as_ref()?;
    let over = |s: &VariantSummary| {
        Some((
            s.figures.get(&Figure::PeakOverFloor)?.median,
            s.figures.get(&Figure::PeakRssBytes)?.median,
        ))
    };
    let base = a.variants.iter().find(|s| s.is_baseline)?;
    let (ratio, peak) = over(base)?;
    let [lo, hi] = floor.samples_per_run;
    let samples = if (hi - lo).abs() < 0.5 {
        format!("{lo:.0}")
    } else {
        format!("{lo:.0}–{hi:.0}")
    };
    let mut line = format!(
        "{} peaked at {ratio:.2}× the most the program was seen to have live ({} against a floor of {}: the highest of {samples} allocator samples a run, a lower bound{})",
        base.name,
        format_bytes(peak),
        format_bytes(floor.bytes),
        if floor.variants.len() > 1 {
            format!(", the median of {} variants'", floor.variants.len())
        } else {
            String::new()
        },
    );
    let leanest = a
        .variants
        .iter()
        .filter_map(|s| Some((s, over(s)?)))
        .min_by(|x, y| x.1 .0.total_cmp(&y.1 .0));
    match leanest {
        Some((s, (r, p))) if !s.is_baseline => {
            line.push_str(&format!(
                "; {} at {r:.2}× ({}), the least",
                s.name,
                format_bytes(p)
            ));
        }
        _ if a.variants.len() > 1 => line.push_str(", the least of every variant"),
        _ => {}
    }
    if floor.disputed {
        line.push_str("; the variants disagree on the floor beyond their accounting (below)");
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;

    const MB: f64 = (1u64 << 20) as f64;

    #[test]
    fn the_headline_compares_peaks_with_the_programs_floor() {
        let e = crate::report::fixture::experiment();
        let a = analyse(&e);
        let floor = a.floor.as_ref().expect("a floor");
        assert!(floor.lower_bound);
        // Every variant's peak over the floor is its peak RSS over the floor.
        for s in &a.variants {
            let peak = s.figures[&Figure::PeakRssBytes].median;
            let over = s.figures[&Figure::PeakOverFloor].median;
            assert!((over - peak / floor.bytes).abs() < 1e-9);
            assert!(!s.ratio_to_baseline.contains_key(&Figure::PeakOverFloor));
            assert!(!s.ratio_to_baseline.contains_key(&Figure::PeakLiveBytes));
        }
        let h = headline(&a).expect("a headline");
        assert!(h.starts_with("glibc peaked at "), "{h}");
        assert!(
            h.contains("the most the program was seen to have live"),
            "{h}"
        );
        assert!(h.contains("a lower bound"), "{h}");
        assert!(!h.contains("fragmentation"), "{h}");
    }

    #[test]
    fn a_variant_far_from_the_floor_is_flagged_and_not_explained_beyond_the_figures() {
        let mut e = crate::report::fixture::experiment();
        // jemalloc's live bytes twice the others' on the same program.
        for r in e.runs.iter_mut().filter(|r| r.variant == "jemalloc") {
            if let Some(a) = r.inside.allocator.as_mut() {
                for p in a.series.iter_mut() {
                    p.live_bytes = p.live_bytes.map(|l| l * 3);
                }
                a.peak_live_bytes = a.peak_live_bytes.map(|l| l * 3);
            }
        }
        let a = analyse(&e);
        let floor = a.floor.as_ref().unwrap();
        assert!(floor.disputed);
        let je = a.variants.iter().find(|s| s.name == "jemalloc").unwrap();
        let d = je.floor_departure.as_deref().expect("flagged");
        assert!(d.contains("× the program's floor of"), "{d}");
        assert!(!d.contains("header and alignment"), "{d}");
        for s in a.variants.iter().filter(|s| s.name != "jemalloc") {
            assert!(
                s.floor_departure.is_none(),
                "{}: {:?}",
                s.name,
                s.floor_departure
            );
        }
        assert!(headline(&a).unwrap().contains("disagree on the floor"));
        let _ = MB;
    }
}
