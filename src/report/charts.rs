//! SVG charts (plotters): memory over time per variant, and each run's peak per variant.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::analysis::{Analysis, Figure};
use crate::record::{Experiment, RunRecord};

pub(super) const MIB: f64 = 1048576.0;

/// One colour per variant, in plan order (colour-blind-friendly Tableau 10).
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// CSS hex of a palette colour, for legends drawn in HTML.
pub(crate) fn css_color(i: usize) -> String {
    let c = color(i);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

pub(super) type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Clamped, Clamped>>;

/// An `f64` axis on which a value far outside the range is drawn just beyond its edge:
/// plotters' own mapping turns it into a pixel that overflows `i32` (a panic in a debug
/// build, garbage otherwise).
pub(super) struct Clamped(RangedCoordf64);

impl Ranged for Clamped {
    type FormatOption = plotters::coord::ranged1d::NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let r = self.0.range();
        let span = r.end - r.start;
        let v = if value.is_nan() {
            r.start
        } else {
            value.clamp(r.start - span, r.end + span)
        };
        self.0.map(&v, limit)
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        self.0.key_points(hint)
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.0.range()
    }
}

impl plotters::coord::ranged1d::ValueFormatter<f64> for Clamped {
    /// plotters' own labels, but a huge value in scientific notation, not 300 digits.
    fn format(value: &f64) -> String {
        if value.abs() >= 1e15 {
            format!("{value:.2e}")
        } else {
            <RangedCoordf64 as plotters::coord::ranged1d::ValueFormatter<f64>>::format(value)
        }
    }
}

/// The largest magnitude an axis reaches. plotters computes an axis's key points by
/// stepping through its range in powers of ten; an infinite or NaN end (a padded
/// `1.8e308`) made that loop run forever. Beyond this, values are drawn at the edge.
const AXIS_LIMIT: f64 = 1e300;

/// An axis range plotters can always lay out: finite ends within [`AXIS_LIMIT`], NaN
/// taken as 0, and a non-empty span (an empty or reversed one widened upwards).
pub(super) fn sane_range(r: std::ops::Range<f64>) -> std::ops::Range<f64> {
    let clamp = |v: f64| {
        if v.is_nan() {
            0.0
        } else {
            v.clamp(-AXIS_LIMIT, AXIS_LIMIT)
        }
    };
    let (lo, hi) = (clamp(r.start), clamp(r.end));
    if hi > lo {
        lo..hi
    } else {
        lo..lo + lo.abs().max(1.0)
    }
}

/// A chart with the house style: title, margins, label areas, and the given ranges (made
/// sane: see [`sane_range`]).
pub(super) fn styled<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Option<Chart<'a, 'b>> {
    let (x, y) = (sane_range(x), sane_range(y));
    root.fill(&WHITE).ok()?;
    ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(Clamped(x.into()), Clamped(y.into()))
        .ok()
}

/// A chart over time in the house style: seconds since start on x from 0 to `max_t`, the
/// unit `y_desc` on y from 0 to `max_y`, with the mesh drawn.
pub(super) fn time_axes<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    max_t: f64,
    max_y: f64,
    y_desc: &str,
) -> Option<Chart<'a, 'b>> {
    let mut chart = styled(
        root,
        title,
        0.0..(max_t * 1.02).max(0.1),
        0.0..(max_y * 1.08).max(1.0),
    )?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc(y_desc)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .ok()?;
    Some(chart)
}

/// Named series over time, one colour each in order, lines with a dot at each point (a
/// point alone, between gaps, still shows): a fleet's groups per time block.
pub(crate) fn named_lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Option<String> {
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let all = || series.iter().flat_map(|s| s.1.iter().filter(finite));
    let max_t = all().map(|p| p.0).fold(f64::NAN, f64::max);
    let max_y = all().map(|p| p.1).fold(f64::NAN, f64::max);
    if max_t.is_nan() {
        return None;
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        let mut chart = styled(
            &root,
            title,
            0.0..(max_t * 1.02).max(0.1),
            0.0..(max_y * 1.08).max(1.0),
        )?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .ok()?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let pts: Vec<(f64, f64)> = pts.iter().filter(finite).copied().collect();
            line_with_dots(&mut chart, name.clone(), pts, color(i), 2)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        root.present().ok()?;
    }
    Some(svg)
}

/// A labelled line of `width` with a dot at each point.
fn line_with_dots(
    chart: &mut Chart<'_, '_>,
    name: String,
    pts: Vec<(f64, f64)>,
    c: RGBColor,
    width: u32,
) -> Option<()> {
    chart
        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(width)))
        .ok()?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
    chart
        .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
        .ok()?;
    Some(())
}

/// The legend box, where the lines are least likely to be.
pub(super) fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Option<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .position(position)
        .draw()
        .ok()
}

/// The run of a variant whose figure is the median (the middle run by that figure).
pub(crate) fn median_run<'a>(runs: &[&'a RunRecord], f: Figure) -> Option<&'a RunRecord> {
    let mut v: Vec<&RunRecord> = runs.iter().copied().filter(|r| f.of(r).is_some()).collect();
    v.sort_by(|a, b| f.of(a).unwrap_or(0.0).total_cmp(&f.of(b).unwrap_or(0.0)));
    v.get(v.len().saturating_sub(1) / 2).copied()
}

pub(super) fn counted<'a>(e: &'a Experiment, variant: &str) -> Vec<&'a RunRecord> {
    e.runs
        .iter()
        .filter(|r| r.variant == variant && r.counts())
        .collect()
}

/// Which memory series to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Series {
    Rss,
    Pss,
}

fn series_points(r: &RunRecord, s: Series) -> Vec<(f64, f64)> {
    r.samples
        .iter()
        .filter_map(|x| {
            let v = match s {
                Series::Rss => Some(x.rss_bytes),
                Series::Pss => x.pss_bytes,
            }?;
            Some((x.t_seconds, v as f64 / MIB))
        })
        .collect()
}

/// Memory over time: every counted run faint, each variant's median run bold, on one pair
/// of axes. `None` when no run has samples of that series.
pub(crate) fn memory_over_time(e: &Experiment, a: &Analysis, s: Series) -> Option<String> {
    let mut max_t: f64 = 0.0;
    let mut max_y: f64 = 0.0;
    let mut any = false;
    for r in e.runs.iter().filter(|r| r.counts()) {
        for (t, y) in series_points(r, s) {
            max_t = max_t.max(t);
            max_y = max_y.max(y);
            any = true;
        }
    }
    if !any {
        return None;
    }
    let title = match s {
        Series::Rss => "RSS of the process tree over time (MiB)",
        Series::Pss => "PSS of the process tree over time (MiB, where sampled)",
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        let mut chart = time_axes(&root, title, max_t, max_y, "MiB")?;
        for (vi, v) in a.variants.iter().enumerate() {
            let runs = counted(e, &v.name);
            let c = color(vi);
            // PSS is read sparsely (within a CPU budget): dots, not lines that would
            // pretend to know what happened between two reads.
            for r in &runs {
                let pts = series_points(r, s);
                match s {
                    Series::Rss => chart
                        .draw_series(LineSeries::new(pts, c.mix(0.3).stroke_width(1)))
                        .map(|_| ())
                        .ok()?,
                    Series::Pss => chart
                        .draw_series(
                            pts.into_iter()
                                .map(|p| Circle::new(p, 2, c.mix(0.35).filled())),
                        )
                        .map(|_| ())
                        .ok()?,
                }
            }
            if let Some(m) = median_run(&runs, Figure::MeanRssBytes) {
                let pts = series_points(m, s);
                let legend = move |(x, y): (i32, i32)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                };
                match s {
                    Series::Rss => chart
                        .draw_series(LineSeries::new(pts, c.stroke_width(3)))
                        .ok()?
                        .label(v.name.clone())
                        .legend(legend),
                    Series::Pss => chart
                        .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                        .ok()?
                        .label(v.name.clone())
                        .legend(legend),
                };
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().ok()?;
    }
    Some(svg)
}

/// Each counted run's value of a figure, one column of dots per variant, the median as a bar.
pub fn distribution(e: &Experiment, a: &Analysis, f: Figure, title: &str) -> Option<String> {
    let scale = if f.is_bytes() { MIB } else { 1.0 };
    let cols: Vec<(String, Vec<f64>)> = a
        .variants
        .iter()
        .map(|v| {
            let xs = counted(e, &v.name)
                .iter()
                .filter_map(|r| f.of(r))
                .map(|x| x / scale)
                .collect();
            (v.name.clone(), xs)
        })
        .collect();
    let max_y = cols
        .iter()
        .flat_map(|(_, v)| v.iter())
        .copied()
        .fold(0.0, f64::max);
    if max_y <= 0.0 {
        return None;
    }
    let n = cols.len();
    let names: Vec<String> = cols.iter().map(|(n, _)| n.clone()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 360)).into_drawing_area();
        let mut chart = styled(&root, title, -0.5..(n as f64 - 0.5), 0.0..max_y * 1.1)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(if f.is_bytes() {
                "MiB"
            } else if f == Figure::ThroughputRps {
                "requests/s"
            } else {
                "seconds"
            })
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .ok()?;
        for (i, (_, xs)) in cols.iter().enumerate() {
            let c = color(i);
            let k = xs.len().max(1) as f64;
            chart
                .draw_series(xs.iter().enumerate().map(|(j, y)| {
                    // Spread the dots a little so equal values stay visible.
                    let dx = (j as f64 - (k - 1.0) / 2.0) * 0.06;
                    Circle::new((i as f64 + dx, *y), 5, c.filled())
                }))
                .ok()?;
            if !xs.is_empty() {
                let m = crate::analysis::stats::median(xs);
                chart
                    .draw_series(LineSeries::new(
                        vec![(i as f64 - 0.3, m), (i as f64 + 0.3, m)],
                        BLACK.stroke_width(2),
                    ))
                    .ok()?;
            }
        }
        root.present().ok()?;
    }
    Some(svg)
}

type Points = Vec<(f64, f64)>;

/// Which load series to draw over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoadSeries {
    Throughput,
    Latency,
}

/// Throughput, or p50 (bold) and p99 (thin) latency, per second for each variant's median
/// run, on the run's clock — the same clock as the memory charts. `None` without load.
pub(crate) fn load_over_time(e: &Experiment, a: &Analysis, which: LoadSeries) -> Option<String> {
    let mut max_t: f64 = 0.0;
    let mut max_y: f64 = 0.0;
    let mut lines: Vec<(usize, String, Points, Points)> = Vec::new();
    for (vi, v) in a.variants.iter().enumerate() {
        let runs = counted(e, &v.name);
        let Some(m) = median_run(&runs, Figure::ThroughputRps) else {
            continue;
        };
        let Some(l) = &m.load else { continue };
        let (main, second): (Points, Points) = match which {
            LoadSeries::Throughput => (
                l.per_second
                    .iter()
                    .map(|s| (s.t_seconds, s.throughput_rps))
                    .collect(),
                Vec::new(),
            ),
            LoadSeries::Latency => (
                l.per_second
                    .iter()
                    .map(|s| (s.t_seconds, s.p50_ms))
                    .collect(),
                l.per_second
                    .iter()
                    .map(|s| (s.t_seconds, s.p99_ms))
                    .collect(),
            ),
        };
        for (t, y) in main.iter().chain(second.iter()) {
            max_t = max_t.max(*t + 1.0);
            max_y = max_y.max(*y);
        }
        for s in &m.samples {
            max_t = max_t.max(s.t_seconds);
        }
        lines.push((vi, v.name.clone(), main, second));
    }
    if lines.is_empty() || max_y <= 0.0 {
        return None;
    }
    let (title, unit) = match which {
        LoadSeries::Throughput => (
            "Throughput per second (median run by throughput)",
            "requests/s",
        ),
        LoadSeries::Latency => ("Latency per second: p50 bold, p99 thin (median run)", "ms"),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        let mut chart = styled(&root, title, 0.0..max_t * 1.02, 0.0..max_y * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("seconds since start")
            .y_desc(unit)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .ok()?;
        for (vi, name, main, second) in lines {
            let c = color(vi);
            chart
                .draw_series(LineSeries::new(main, c.stroke_width(3)))
                .ok()?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                });
            if !second.is_empty() {
                chart
                    .draw_series(LineSeries::new(second, c.mix(0.6).stroke_width(1)))
                    .ok()?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().ok()?;
    }
    Some(svg)
}

/// Latency by percentile (x in "nines": 90%, 99%, 99.9% …) for each variant's median run.
pub(crate) fn latency_percentiles(e: &Experiment, a: &Analysis) -> Option<String> {
    let nines = |q: f64| -(1.0 - q.min(0.9999)).log10();
    let mut lines = Vec::new();
    let mut max_y: f64 = 0.0;
    for (vi, v) in a.variants.iter().enumerate() {
        let runs = counted(e, &v.name);
        let Some(m) = median_run(&runs, Figure::LatencyP99Ms) else {
            continue;
        };
        let Some(l) = &m.load else { continue };
        let pts: Vec<(f64, f64)> = l
            .latency_quantiles
            .iter()
            .filter(|(q, _)| *q >= 0.5 && *q < 1.0)
            .map(|(q, ms)| (nines(*q), *ms))
            .collect();
        max_y = pts.iter().map(|p| p.1).fold(max_y, f64::max);
        lines.push((vi, v.name.clone(), pts));
    }
    if lines.is_empty() || max_y <= 0.0 {
        return None;
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        let mut chart = styled(
            &root,
            "Latency by percentile (median run by p99)",
            nines(0.5)..4.0,
            0.0..max_y * 1.1,
        )?;
        chart
            .configure_mesh()
            .x_labels(8)
            .x_label_formatter(&|x| {
                let q = 1.0 - 10f64.powf(-x);
                format!("{:.2}%", q * 100.0).replace(".00%", "%")
            })
            .x_desc("percentile")
            .y_desc("ms")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .ok()?;
        for (vi, name, pts) in lines {
            line_with_dots(&mut chart, name, pts, color(vi), 3)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().ok()?;
    }
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::report::fixture;

    #[test]
    fn ranges_are_finite_bounded_and_non_empty() {
        for (r, want) in [
            (0.0..f64::INFINITY, 0.0..AXIS_LIMIT),
            (0.0..f64::NAN, 0.0..1.0),
            (f64::NEG_INFINITY..0.0, -AXIS_LIMIT..0.0),
            (5.0..5.0, 5.0..10.0),
            (3.0..1.0, 3.0..6.0),
            (AXIS_LIMIT..f64::MAX, AXIS_LIMIT..2.0 * AXIS_LIMIT),
            (-0.5..2.5, -0.5..2.5),
        ] {
            let got = sane_range(r.clone());
            assert_eq!(got, want, "{r:?}");
            assert!(got.start.is_finite() && got.end.is_finite() && got.end > got.start);
        }
    }

    /// Every chart renders (and returns) with figures at the ends of what an f64 holds.
    #[test]
    fn every_chart_renders_extreme_finite_values() {
        for v in [f64::MAX, -f64::MAX, 1e-300, f64::MIN_POSITIVE] {
            let mut e = fixture::experiment();
            for r in &mut e.runs {
                r.wall_seconds = v;
                r.cpu_user_seconds = v;
                for s in &mut r.samples {
                    s.t_seconds = v;
                }
            }
            let a = analyse(&e);
            let wall = distribution(&e, &a, crate::analysis::Figure::WallSeconds, "wall");
            if v > 0.0 {
                let svg = wall.unwrap_or_default();
                assert!(svg.contains("<svg"), "{v}");
                assert!(
                    !svg.chars()
                        .collect::<Vec<_>>()
                        .windows(30)
                        .any(|w| w.iter().all(char::is_ascii_digit)),
                    "axis labels of {v} are short"
                );
            }
            assert!(memory_over_time(&e, &a, Series::Rss).is_some(), "{v}");
            let _ = memory_over_time(&e, &a, Series::Pss);
        }
    }
}
