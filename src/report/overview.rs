//! The picture the HTML report opens with: for each variant, the peak (the memory figure the
//! recommendation weighs) and the mean RSS, each a median with its 95% interval, against
//! the program's floor — the most the program itself had live, below which no allocator
//! can go.

use plotters::prelude::*;

use super::charts::{canvas, color, counted, draw_keys, styled, Chart, Key, Picture, MIB, WIDTH};
use crate::analysis::recommend::{label, Recommendation};
use crate::analysis::{Analysis, Estimate, Figure};
use crate::record::Experiment;
use crate::units::{format_bytes, format_seconds};

/// A variant's floor: the median over its counted runs of the most live bytes the
/// allocator probe saw, with what it rests on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Floor {
    pub bytes: f64,
    /// Counted runs with a live figure, of the counted runs.
    pub runs: usize,
    pub of: usize,
    /// The longest stretch between two of the probe's samples in those runs: a higher
    /// moment inside one is missed, so the floor is at least this.
    pub longest_gap: f64,
}

/// The program's floor as each variant's allocator counts it, from the probe's samples of
/// live bytes (`peak_live_bytes`, the highest sample of a run); `None` for a variant whose
/// allocator offers no live figure or was not probed. (Allocators count live bytes each
/// their way — tcmalloc at its size classes — so each variant has its own.)
pub(crate) fn floor(e: &Experiment, variant: &str) -> Option<Floor> {
    let runs = counted(e, variant);
    let with: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|r| {
            let al = r.inside.allocator.as_ref()?;
            let live = al.peak_live_bytes? as f64;
            let gap = al
                .series
                .windows(2)
                .map(|w| w[1].t_seconds - w[0].t_seconds)
                .fold(0.0, f64::max);
            Some((live, gap))
        })
        .collect();
    if with.is_empty() {
        return None;
    }
    let lives: Vec<f64> = with.iter().map(|x| x.0).collect();
    Some(Floor {
        bytes: crate::analysis::stats::median(&lives),
        runs: with.len(),
        of: runs.len(),
        longest_gap: with.iter().map(|x| x.1).fold(0.0, f64::max),
    })
}

/// The overview picture: one row per variant, top down in the plan's order; `None` when no
/// variant has the memory figure.
pub(crate) fn overview(e: &Experiment, a: &Analysis, rec: &Recommendation) -> Option<Picture> {
    let peak_f = rec.memory_figure;
    let mean_f = Figure::MeanRssBytes;
    let n = a.variants.len();
    let floors: Vec<Option<Floor>> = a.variants.iter().map(|v| floor(e, &v.name)).collect();
    let est = |i: usize, f: Figure| a.variants[i].figures.get(&f);
    let max_x = (0..n)
        .flat_map(|i| {
            [est(i, peak_f), est(i, mean_f)]
                .into_iter()
                .flatten()
                .map(|x| x.ci95[1].max(x.median))
                .chain(floors[i].as_ref().map(|f| f.bytes))
        })
        .fold(0.0, f64::max)
        / MIB;
    if max_x <= 0.0 || (0..n).all(|i| est(i, peak_f).is_none()) {
        return None;
    }
    let names: Vec<String> = a.variants.iter().map(|v| v.name.clone()).collect();
    // Row i is drawn at y = n - 1 - i: the first variant on top.
    let row = |i: usize| (n - 1 - i) as f64;
    let height = 110 + 46 * n as u32;
    let peak_label = label(peak_f);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let title = format!(
            "Each variant's {peak_label} and mean RSS (median, 95% interval) against the program's floor (MiB)"
        );
        let (plot, side) = canvas(&root, &title)?;
        let mut chart = styled(&plot, "", 0.0..max_x * 1.12, -0.6..(n as f64 - 0.4))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|y| {
                let k = y.round();
                if (y - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < n {
                    names[n - 1 - k as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc("MiB")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .ok()?;
        let floor_fill = RGBColor(215, 215, 215);
        let text = TextStyle::from(("sans-serif", 11).into_font()).color(&RGBColor(60, 60, 60));
        for (i, floor) in floors.iter().enumerate() {
            let y = row(i);
            let c = color(i);
            if let Some(f) = floor {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y - 0.34), (f.bytes / MIB, y + 0.34)],
                        floor_fill.filled(),
                    )))
                    .ok()?;
            }
            // Peak above the row's middle, mean below; the peak's ratio to the baseline at
            // the end of its whisker.
            let s = &a.variants[i];
            if let Some(x) = est(i, peak_f) {
                let words = if s.is_baseline {
                    Some("baseline".to_string())
                } else {
                    s.ratio_to_baseline
                        .get(&peak_f)
                        .map(|r| super::ratio_text(r, ""))
                };
                draw_estimate(&mut chart, x, y + 0.14, c, true, words, &text)?;
            }
            if let Some(x) = est(i, mean_f) {
                draw_estimate(&mut chart, x, y - 0.14, c, false, None, &text)?;
            }
        }
        let ink = RGBColor(60, 60, 60);
        let mut keys = vec![
            Key::dot(format!("{peak_label}, median"), ink),
            Key::ring("mean RSS, median", ink),
            Key::line("95% interval", ink),
        ];
        if floors.iter().any(Option::is_some) {
            keys.push(Key::area("program's floor (peak live)", floor_fill));
        }
        draw_keys(&side, &keys)?;
        root.present().ok()?;
    }
    Some(Picture {
        svg,
        notes: vec![floor_sentence(a, &floors, peak_f)],
    })
}

/// One estimate at height `y`: a whisker for its 95% interval, a dot for its median
/// (filled, or a ring), and `words` at the whisker's end.
fn draw_estimate(
    chart: &mut Chart<'_, '_>,
    x: &Estimate,
    y: f64,
    c: RGBColor,
    filled: bool,
    words: Option<String>,
    text: &TextStyle,
) -> Option<()> {
    let (lo, hi, m) = (x.ci95[0] / MIB, x.ci95[1] / MIB, x.median / MIB);
    chart
        .draw_series(LineSeries::new(vec![(lo, y), (hi, y)], c.stroke_width(2)))
        .ok()?;
    for end in [lo, hi] {
        chart
            .draw_series(LineSeries::new(
                vec![(end, y - 0.07), (end, y + 0.07)],
                c.stroke_width(2),
            ))
            .ok()?;
    }
    let style = if filled { c.filled() } else { WHITE.filled() };
    chart
        .draw_series(std::iter::once(Circle::new((m, y), 5, style)))
        .ok()?;
    if !filled {
        chart
            .draw_series(std::iter::once(Circle::new((m, y), 5, c.stroke_width(2))))
            .ok()?;
    }
    if let Some(w) = words {
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((hi, y)) + Text::new(w, (8, -6), text.clone()),
            ))
            .ok()?;
    }
    Some(())
}

/// What the picture shows and where its floor comes from, per variant.
fn floor_sentence(a: &Analysis, floors: &[Option<Floor>], peak_f: Figure) -> String {
    let peak_source = if peak_f == Figure::PeakRssBytes {
        "a kernel high-water mark"
    } else {
        "sampled from smaps_rollup"
    };
    let mut per = Vec::new();
    let mut none = Vec::new();
    for (s, f) in a.variants.iter().zip(floors) {
        match f {
            Some(f) => per.push(format!(
                "{} {} ({} of {} runs, samples at most {} apart)",
                s.name,
                format_bytes(f.bytes),
                f.runs,
                f.of,
                format_seconds(f.longest_gap)
            )),
            None => none.push(s.name.clone()),
        }
    }
    let mut out = format!(
        "{} ({peak_source}) and mean RSS (sampled): the median over the runs that finished ok, its 95% bootstrap interval as a whisker; beside the {}, its ratio to the baseline's (* = significant).",
        label(peak_f),
        label(peak_f)
    );
    if per.is_empty() {
        out.push_str(
            " The program's floor is not drawn: no variant's allocator probe reported live bytes.",
        );
        return out;
    }
    out.push_str(&format!(
        " Grey: the program's floor, the most it had live as each allocator counts it — the highest of the allocator probe's samples of live bytes, median over runs (a higher moment between two samples is missed, so the floor is at least this): {}.",
        per.join("; ")
    ));
    if !none.is_empty() {
        out.push_str(&format!(
            " No floor for {}: its allocator offers no live-bytes figure, or it was not probed.",
            none.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::analysis::recommend::recommend;
    use crate::report::fixture;

    /// The floor is each variant's median over its counted runs of the probe's highest live
    /// sample, with how many runs have it and the probe's longest gap.
    #[test]
    fn the_floor_is_the_median_peak_live_with_its_coverage() {
        let e = fixture::experiment();
        let f = floor(&e, "glibc").expect("glibc's probe reported live bytes");
        // The median of glibc's counted runs' peaks of live bytes.
        let mut lives: Vec<f64> = e
            .runs
            .iter()
            .filter(|r| r.variant == "glibc" && !r.warmup)
            .filter_map(|r| Some(r.inside.allocator.as_ref()?.peak_live_bytes? as f64))
            .collect();
        lives.sort_by(f64::total_cmp);
        assert_eq!(lives.len(), 3);
        assert!((f.bytes - lives[1]).abs() < 1.0, "{f:?} {lives:?}");
        assert!(f.bytes > 250.0 * MIB && f.bytes < 257.0 * MIB, "{f:?}");
        assert_eq!((f.runs, f.of), (3, 3));
        assert!((f.longest_gap - 0.31 * 3.20).abs() < 1e-6, "{f:?}");
        // arena2's failed run does not count.
        assert_eq!(floor(&e, "arena2").map(|f| (f.runs, f.of)), Some((2, 2)));
        let mut e = e;
        for r in e.runs.iter_mut().filter(|r| r.variant == "jemalloc") {
            if let Some(al) = r.inside.allocator.as_mut() {
                al.peak_live_bytes = None;
            }
        }
        assert_eq!(floor(&e, "jemalloc"), None, "no live figure, no floor");
        let a = analyse(&e);
        let p = overview(&e, &a, &recommend(&a)).expect("a picture");
        let said = p.notes.join(" ");
        assert!(said.contains("No floor for jemalloc"), "{said}");
        assert!(
            said.contains("glibc 250 MiB (3 of 3 runs, samples at most 992 ms apart)"),
            "{said}"
        );
        // Two floor bars (glibc, arena2), each variant's two medians and four whiskers.
        assert!(p.svg.contains("program&apos;s floor") || p.svg.contains("program's floor"));
        assert!(
            p.svg.matches("<circle").count() > 3 * 2,
            "each variant's two medians"
        );
    }
}
