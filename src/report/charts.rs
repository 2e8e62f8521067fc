//! SVG charts (plotters): memory over time per variant, and each run's peak per variant.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::analysis::{Analysis, Figure};
use crate::record::{Experiment, RunRecord};
use crate::units::format_seconds;

pub(super) const MIB: f64 = 1048576.0;

/// A line joins two samples only when they are at most this many of the series' sampling
/// intervals apart; further apart, the line breaks (a sample alone is a dot) and the chart
/// says where.
pub(crate) const JOIN_INTERVALS: f64 = 2.0;

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

/// A drawing area of an SVG chart.
pub(super) type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

/// The width of every chart, in pixels: the page's column (charts shrink with a narrower one).
pub(crate) const WIDTH: u32 = 1060;

/// The width of the column beside a chart that holds its legend: a legend never covers
/// what was measured.
const KEY_WIDTH: u32 = 190;

/// The canvas of a chart with a legend: white, the title across the top, then the plot's
/// area and the legend's column to its right.
pub(super) fn canvas<'b>(root: &Area<'b>, title: &str) -> Option<(Area<'b>, Area<'b>)> {
    root.fill(&WHITE).ok()?;
    let body = root.titled(title, ("sans-serif", 18)).ok()?;
    let (w, _) = body.dim_in_pixel();
    Some(body.split_horizontally(w.saturating_sub(KEY_WIDTH)))
}

/// A chart with the house style: title (none when empty: the canvas has it), margins, label
/// areas, and the given ranges (made sane: see [`sane_range`]).
pub(super) fn styled<'a, 'b>(
    root: &'a Area<'b>,
    title: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Option<Chart<'a, 'b>> {
    let (x, y) = (sane_range(x), sane_range(y));
    root.fill(&WHITE).ok()?;
    let mut b = ChartBuilder::on(root);
    if !title.is_empty() {
        b.caption(title, ("sans-serif", 18));
    }
    b.margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(Clamped(x.into()), Clamped(y.into()))
        .ok()
}

/// A chart over time in the house style: seconds since start on x from 0 to `max_t`, the
/// unit `y_desc` on y from 0 to `max_y`, with the mesh drawn.
pub(super) fn time_axes<'a, 'b>(
    plot: &'a Area<'b>,
    max_t: f64,
    max_y: f64,
    y_desc: &str,
) -> Option<Chart<'a, 'b>> {
    let mut chart = styled(
        plot,
        "",
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

/// How a legend entry looks: a line's colour as a short bar, an area's as a square, a
/// series of separate reads as a dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Swatch {
    Line,
    Area,
    Dot,
    Ring,
}

/// One entry of a chart's legend.
pub(super) struct Key {
    pub label: String,
    pub color: RGBColor,
    pub swatch: Swatch,
}

impl Key {
    pub(super) fn line(label: impl Into<String>, color: RGBColor) -> Key {
        Key {
            label: label.into(),
            color,
            swatch: Swatch::Line,
        }
    }

    pub(super) fn area(label: impl Into<String>, color: RGBColor) -> Key {
        Key {
            label: label.into(),
            color,
            swatch: Swatch::Area,
        }
    }

    pub(super) fn dot(label: impl Into<String>, color: RGBColor) -> Key {
        Key {
            label: label.into(),
            color,
            swatch: Swatch::Dot,
        }
    }

    pub(super) fn ring(label: impl Into<String>, color: RGBColor) -> Key {
        Key {
            label: label.into(),
            color,
            swatch: Swatch::Ring,
        }
    }
}

/// The legend in its column beside the plot, top down (swatches are `<rect>`s, so a
/// legend is never read back as a line of data).
pub(super) fn draw_keys(area: &Area<'_>, keys: &[Key]) -> Option<()> {
    let style = TextStyle::from(("sans-serif", 11).into_font()).color(&RGBColor(40, 40, 40));
    let mut y = 24;
    for k in keys {
        match k.swatch {
            Swatch::Line => area
                .draw(&Rectangle::new([(4, y - 2), (22, y + 2)], k.color.filled()))
                .ok()?,
            Swatch::Area => {
                let square = [(7, y - 6), (19, y + 6)];
                area.draw(&Rectangle::new(square, k.color.filled())).ok()?;
                let edge = RGBColor(170, 170, 170).stroke_width(1);
                area.draw(&Rectangle::new(square, edge)).ok()?;
            }
            Swatch::Dot => area.draw(&Circle::new((13, y), 4, k.color.filled())).ok()?,
            Swatch::Ring => area
                .draw(&Circle::new((13, y), 4, k.color.stroke_width(2)))
                .ok()?,
        }
        let lines = legend_lines(&k.label);
        for (j, line) in lines.iter().enumerate() {
            area.draw_text(line, &style, (28, y - 7 + 13 * j as i32))
                .ok()?;
        }
        y += 18 + 13 * (lines.len() as i32 - 1);
    }
    Some(())
}

/// A legend label in lines of at most [`LEGEND_CHARS`], broken at spaces, two at most (the
/// second cut with "…" if the label is longer still): the column beside the plot is narrow.
fn legend_lines(label: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in label.split(' ') {
        let wanted = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if !line.is_empty() && wanted > LEGEND_CHARS {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    let cut = |l: &str| -> String {
        if l.chars().count() > LEGEND_CHARS {
            l.chars().take(LEGEND_CHARS - 1).chain(['…']).collect()
        } else {
            l.to_string()
        }
    };
    if lines.len() > 2 {
        let rest = lines[1..].join(" ");
        lines = vec![lines[0].clone(), rest];
        let last = lines[1]
            .chars()
            .take(LEGEND_CHARS - 1)
            .chain(['…'])
            .collect();
        lines[1] = last;
    }
    lines.iter().map(|l| cut(l)).collect()
}

/// The widest legend line, in characters, that fits the column beside the plot.
const LEGEND_CHARS: usize = 30;

/// A chart and what its reader needs to know beside it: where its series have no samples
/// (said in words under the picture, from the same computation that broke the lines).
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    pub svg: String,
    pub notes: Vec<String>,
}

/// Where consecutive points of `pts` are not joined: each gap's start and end.
pub(crate) fn gaps(
    pts: &[(f64, f64)],
    joins: impl Fn(&(f64, f64), &(f64, f64)) -> bool,
) -> Vec<(f64, f64)> {
    pts.windows(2)
        .filter(|w| !joins(&w[0], &w[1]))
        .map(|w| (w[0].0, w[1].0))
        .collect()
}

/// `pts` cut into the stretches a line may join.
pub(crate) fn pieces(
    pts: &[(f64, f64)],
    joins: impl Fn(&(f64, f64), &(f64, f64)) -> bool,
) -> Vec<&[(f64, f64)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=pts.len() {
        if i == pts.len() || !joins(&pts[i - 1], &pts[i]) {
            if i > start {
                out.push(&pts[start..i]);
            }
            start = i;
        }
    }
    out
}

/// The join rule of a series sampled every `interval` seconds: at most
/// [`JOIN_INTERVALS`] intervals apart.
pub(crate) fn within(interval: f64) -> impl Fn(&(f64, f64), &(f64, f64)) -> bool {
    move |p, q| (q.0 - p.0).abs() <= JOIN_INTERVALS * interval
}

/// Draws a sampled series: a line through each stretch `joins` accepts, broken where it
/// does not, a dot on a sample alone (and on every sample when `dot` is given: sparse reads).
pub(super) fn sampled_line(
    chart: &mut Chart<'_, '_>,
    pts: &[(f64, f64)],
    joins: impl Fn(&(f64, f64), &(f64, f64)) -> bool,
    style: ShapeStyle,
    dot: Option<u32>,
) -> Option<()> {
    // A sample alone between two gaps is a dot a little wider than the line.
    let lone = (style.stroke_width + 1).max(2);
    for piece in pieces(pts, joins) {
        if piece.len() > 1 {
            chart
                .draw_series(LineSeries::new(piece.to_vec(), style))
                .ok()?;
        }
        let r = match (dot, piece.len()) {
            (Some(r), 1) => r.max(lone),
            (Some(r), _) => r,
            (None, 1) => lone,
            (None, _) => continue,
        };
        chart
            .draw_series(
                piece
                    .iter()
                    .map(|p| Circle::new(*p, r, style.color.filled())),
            )
            .ok()?;
    }
    Some(())
}

/// The gaps of one kind of series over the runs a chart draws, said in one sentence: the
/// limit, how many gaps are longer, the longest and where.
pub(crate) struct GapTally {
    head: String,
    limit: String,
    each: &'static str,
    series: usize,
    count: usize,
    longest: Option<(f64, f64, String)>,
}

impl GapTally {
    /// `what` is sampled every `interval` seconds; lines join samples at most
    /// [`JOIN_INTERVALS`] intervals apart.
    pub(crate) fn every(what: &str, interval: f64) -> GapTally {
        GapTally::new(
            &format!("{what}, sampled every {}", format_seconds(interval)),
            &format_seconds(JOIN_INTERVALS * interval),
        )
    }

    /// `head` says what is drawn, `limit` the longest gap a line joins across.
    pub(crate) fn new(head: &str, limit: &str) -> GapTally {
        GapTally {
            head: head.into(),
            limit: limit.into(),
            each: "series",
            series: 0,
            count: 0,
            longest: None,
        }
    }

    /// What one series is, in the sentence ("runs").
    pub(crate) fn each(mut self, each: &'static str) -> GapTally {
        self.each = each;
        self
    }

    /// Counts the gaps of one series (of `who`) as `joins` cuts it.
    pub(crate) fn add(
        &mut self,
        who: &str,
        pts: &[(f64, f64)],
        joins: impl Fn(&(f64, f64), &(f64, f64)) -> bool,
    ) {
        if pts.is_empty() {
            return;
        }
        self.series += 1;
        for (a, b) in gaps(pts, joins) {
            self.count += 1;
            if self.longest.as_ref().is_none_or(|l| b - a > l.1 - l.0) {
                self.longest = Some((a, b, who.to_string()));
            }
        }
    }

    /// The sentence, times in seconds; `None` when no series was added.
    pub(crate) fn sentence(&self) -> Option<String> {
        self.sentence_with(&format_seconds)
    }

    /// The sentence, a position on the axis said by `f`; `None` when no series was added.
    pub(crate) fn sentence_with(&self, f: &dyn Fn(f64) -> String) -> Option<String> {
        if self.series == 0 {
            return None;
        }
        let Some((a, b, who)) = &self.longest else {
            return Some(format!("{}: no gap longer than {}.", self.head, self.limit));
        };
        let of = if self.series == 1 {
            String::new()
        } else {
            format!(" in {} {}", self.series, self.each)
        };
        let who = if who.is_empty() {
            String::new()
        } else {
            format!("{who}, ")
        };
        Some(format!(
            "{}: the line breaks at every gap longer than {}: {}{of}, the longest {} ({who}from {} to {}).",
            self.head,
            self.limit,
            self.count,
            f(b - a),
            f(*a),
            f(*b)
        ))
    }
}

/// A named series of [`named_lines`]: each point `(x, y, reach)`, `reach` how far along x a
/// line may join it to a neighbour (from its sampling interval, its bucket, its block).
pub(crate) struct Named {
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// The axes and words of a [`named_lines`] chart.
pub(crate) struct NamedChart<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// What the lines are, for the sentence under the chart.
    pub what: &'a str,
    /// The longest gap a line joins across, in words.
    pub limit: &'a str,
    /// A position on the x axis in words.
    pub format: &'a dyn Fn(f64) -> String,
}

/// Named series over time, one colour each in order, lines with a dot at each point; two
/// points are joined only when no further apart than the reach of either (a soak's restart,
/// a fleet's block without data breaks the line), said under the chart.
pub(crate) fn named_lines(c: &NamedChart<'_>, series: &[Named]) -> Option<Picture> {
    let NamedChart {
        title,
        x_desc,
        y_desc,
        what,
        limit,
        format,
    } = *c;
    let finite = |p: &&(f64, f64, f64)| p.0.is_finite() && p.1.is_finite();
    let all = || series.iter().flat_map(|s| s.points.iter().filter(finite));
    let max_t = all().map(|p| p.0).fold(f64::NAN, f64::max);
    let max_y = all().map(|p| p.1).fold(f64::NAN, f64::max);
    if max_t.is_nan() {
        return None;
    }
    let mut tally = GapTally::new(what, limit);
    let mut keys = Vec::new();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 420)).into_drawing_area();
        let (plot, side) = canvas(&root, title)?;
        let mut chart = styled(
            &plot,
            "",
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
        for (i, s) in series.iter().enumerate() {
            let kept: Vec<(f64, f64, f64)> = s.points.iter().filter(finite).copied().collect();
            let reach: std::collections::HashMap<u64, f64> =
                kept.iter().map(|p| (p.0.to_bits(), p.2.max(0.0))).collect();
            let reach = |x: f64| reach.get(&x.to_bits()).copied().unwrap_or(0.0);
            let joins =
                |p: &(f64, f64), q: &(f64, f64)| (q.0 - p.0).abs() <= reach(p.0).max(reach(q.0));
            let pts: Vec<(f64, f64)> = kept.iter().map(|p| (p.0, p.1)).collect();
            let c = color(i);
            sampled_line(&mut chart, &pts, joins, c.stroke_width(2), Some(3))?;
            keys.push(Key::line(s.name.clone(), c));
            tally.add(&s.name, &pts, joins);
        }
        draw_keys(&side, &keys)?;
        root.present().ok()?;
    }
    Some(Picture {
        svg,
        notes: tally.sentence_with(format).into_iter().collect(),
    })
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
/// of axes; RSS as lines that break where samples are missing, PSS (read within a CPU
/// budget, sparse) as dots. `None` when no run has samples of that series.
pub(crate) fn memory_over_time(e: &Experiment, a: &Analysis, s: Series) -> Option<Picture> {
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
    let interval = e.plan.interval_ms as f64 / 1000.0;
    let joins = within(interval);
    let mut tally = GapTally::every("RSS", interval).each("runs");
    let mut keys = Vec::new();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 420)).into_drawing_area();
        let (plot, side) = canvas(&root, title)?;
        let mut chart = time_axes(&plot, max_t, max_y, "MiB")?;
        for (vi, v) in a.variants.iter().enumerate() {
            let runs = counted(e, &v.name);
            let c = color(vi);
            // PSS is read sparsely (within a CPU budget): dots, not lines that would
            // pretend to know what happened between two reads.
            for r in &runs {
                let pts = series_points(r, s);
                match s {
                    Series::Rss => {
                        sampled_line(&mut chart, &pts, &joins, c.mix(0.3).stroke_width(1), None)?;
                        tally.add(&v.name, &pts, &joins);
                    }
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
                match s {
                    Series::Rss => sampled_line(&mut chart, &pts, &joins, c.stroke_width(3), None)?,
                    Series::Pss => chart
                        .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                        .map(|_| ())
                        .ok()?,
                };
                keys.push(match s {
                    Series::Rss => Key::line(v.name.clone(), c),
                    Series::Pss => Key::dot(v.name.clone(), c),
                });
            }
        }
        draw_keys(&side, &keys)?;
        root.present().ok()?;
    }
    let notes = match s {
        Series::Rss => tally.sentence().into_iter().collect(),
        Series::Pss => vec!["PSS is read from smaps_rollup within a CPU budget: each read is a dot, never joined to the next.".into()],
    };
    Some(Picture { svg, notes })
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
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 360)).into_drawing_area();
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
pub(crate) fn load_over_time(e: &Experiment, a: &Analysis, which: LoadSeries) -> Option<Picture> {
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
    // One point a second: a second without a point breaks the line.
    let joins = within(1.0);
    let mut tally = GapTally::new("the load's figures, one point a second", "2 s");
    let mut keys = Vec::new();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 320)).into_drawing_area();
        let (plot, side) = canvas(&root, title)?;
        let mut chart = styled(&plot, "", 0.0..max_t * 1.02, 0.0..max_y * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("seconds since start")
            .y_desc(unit)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .ok()?;
        for (vi, name, main, second) in lines {
            let c = color(vi);
            sampled_line(&mut chart, &main, &joins, c.stroke_width(3), None)?;
            keys.push(Key::line(name.clone(), c));
            tally.add(&name, &main, &joins);
            if !second.is_empty() {
                sampled_line(
                    &mut chart,
                    &second,
                    &joins,
                    c.mix(0.6).stroke_width(1),
                    None,
                )?;
            }
        }
        draw_keys(&side, &keys)?;
        root.present().ok()?;
    }
    Some(Picture {
        svg,
        notes: tally.sentence().into_iter().collect(),
    })
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
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 320)).into_drawing_area();
        let (plot, side) = canvas(&root, "Latency by percentile (median run by p99)")?;
        let mut chart = styled(&plot, "", nines(0.5)..4.0, 0.0..max_y * 1.1)?;
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
        let mut keys = Vec::new();
        for (vi, name, pts) in lines {
            let c = color(vi);
            sampled_line(&mut chart, &pts, |_, _| true, c.stroke_width(3), Some(3))?;
            keys.push(Key::line(name, c));
        }
        draw_keys(&side, &keys)?;
        root.present().ok()?;
    }
    Some(svg)
}

#[cfg(test)]
mod tests {

    /// A legend label too long for the column is broken at a space, not cut: "executable
    /// anonymous (JIT code)" is read whole; a label longer than two lines ends in "…".
    #[test]
    fn legend_labels_wrap_at_spaces() {
        assert_eq!(
            legend_lines("executable anonymous (JIT code)"),
            ["executable anonymous (JIT", "code)"]
        );
        assert_eq!(legend_lines("RSS"), ["RSS"]);
        let long = legend_lines(&"word ".repeat(30));
        assert_eq!(long.len(), 2);
        assert!(long[1].ends_with('…') && long[1].chars().count() <= LEGEND_CHARS);
    }

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

    /// The fixture with stretches where nothing was sampled: no RSS sample from 1.0 s to
    /// 2.0 s in any run (sampled every 100 ms), and the allocator probe's samples about 0.9 s
    /// apart at a stated 200 ms interval.
    fn with_gaps() -> Experiment {
        let mut e = fixture::experiment();
        for r in e.runs.iter_mut() {
            r.samples
                .retain(|s| !(s.t_seconds > 1.0 && s.t_seconds < 2.0));
            if let Some(al) = r.inside.allocator.as_mut() {
                al.interval_ms = 200;
            }
        }
        e
    }

    /// No line of a chart over time spans a stretch longer than its stated limit, read
    /// back from the SVG in the time axis's own units (a pixel of rounding allowed).
    #[test]
    fn no_line_is_drawn_across_a_gap() {
        use crate::report::svg_check::{lines, pixel, widest_step};
        let e = with_gaps();
        let a = analyse(&e);
        let picture = memory_over_time(&e, &a, Series::Rss).expect("RSS chart");
        let rss = &picture.svg;
        let limit = 0.1 * JOIN_INTERVALS + pixel(rss).unwrap_or(0.0);
        let (step, stroke) = widest_step(rss, |_| true).expect("lines");
        assert!(
            step <= limit,
            "RSS: a {step:.2} s line ({stroke}) over a 0.2 s limit"
        );
        assert!(
            lines(rss).len() >= 2 * 8,
            "each run's RSS on both sides of its gap"
        );
        // The gap is said under the chart: one per run (8 counted), the longest and where.
        let said = picture.notes.join(" ");
        assert!(
            said == "RSS, sampled every 100 ms: the line breaks at every gap longer than 200 ms: 8 in 8 runs, the longest 1.11 s (jemalloc, from 959 ms to 2.07 s).",
            "{said}"
        );
        let charts = crate::report::inside_charts::allocator_over_time(&e, &a);
        assert_eq!(charts.len(), 3, "a chart per variant");
        for (name, picture) in &charts {
            let svg = &picture.svg;
            let px = pixel(svg).unwrap_or(0.0);
            // The kernel's RSS (grey, every 100 ms) and the allocator's lines (every 200 ms).
            let (step, _) = widest_step(svg, |s| s == "#5A5A5A").expect("RSS line");
            assert!(
                step <= 0.1 * JOIN_INTERVALS + px,
                "{name}: RSS over {step:.2} s"
            );
            if let Some((step, stroke)) = widest_step(svg, |s| s != "#5A5A5A") {
                assert!(
                    step <= 0.2 * JOIN_INTERVALS + px,
                    "{name}: a {step:.2} s allocator line ({stroke}) over a 0.4 s limit"
                );
            }
            let said = picture.notes.join(" ");
            assert!(said.contains("allocator ("), "{name}: {said}");
            assert!(said.contains("sampled every 200 ms"), "{name}: {said}");
            // Each gap of the probe's samples is shaded, with its legend.
            assert!(svg.contains("no allocator ("), "{name}");
        }
    }

    /// A sample alone between two gaps of the probe's samples is a dot in a clear slit: no
    /// "no sample" band covers a drawn sample or touches it (two bands meeting at a dot read
    /// as one stretch without samples).
    #[test]
    fn no_band_covers_a_sample() {
        let num = |t: &str, name: &str| -> Option<f64> {
            let re = regex::Regex::new(&format!(r#"\b{name}="([-0-9.e]+)""#)).unwrap();
            re.captures(t)?[1].parse().ok()
        };
        let mut e = fixture::experiment();
        for r in e.runs.iter_mut() {
            if let Some(al) = r.inside.allocator.as_mut() {
                // Every sample farther from the next than the join limit: all lone dots.
                al.interval_ms = 1;
            }
        }
        let a = analyse(&e);
        let charts = crate::report::inside_charts::allocator_over_time(&e, &a);
        assert!(!charts.is_empty());
        for (name, picture) in &charts {
            let svg = &picture.svg;
            let tag = |t: &str| regex::Regex::new(&format!(r"<{t}\b[^>]*>")).unwrap();
            let bands: Vec<(f64, f64)> = tag("rect")
                .find_iter(svg)
                .map(|m| m.as_str())
                .filter(|t| t.to_ascii_uppercase().contains("#F0F0F0"))
                .filter_map(|t| Some((num(t, "x")?, num(t, "x")? + num(t, "width")?)))
                .collect();
            // The allocator's samples (the kernel's RSS, grey, is another source).
            let dots: Vec<f64> = tag("circle")
                .find_iter(svg)
                .map(|m| m.as_str())
                .filter(|t| !t.to_ascii_uppercase().contains("#5A5A5A"))
                .filter_map(|t| num(t, "cx"))
                .collect();
            assert!(
                bands.len() >= 3 && dots.len() >= 3,
                "{name}: {bands:?} {dots:?}"
            );
            for x in &dots {
                assert!(
                    !bands.iter().any(|(a, b)| a - 1.0 < *x && *x < b + 1.0),
                    "{name}: a sample at x={x} under a band or touching one: {bands:?}"
                );
            }
        }
    }

    /// A fleet's or a soak's lines break where a point is missing: hourly blocks with the
    /// third missing, joined within 1.5 blocks; the gap said in the axis's words.
    #[test]
    fn named_lines_break_where_a_point_is_missing() {
        use crate::report::svg_check::{lines, pixel, widest_step};
        let block = |k: f64, v: f64| (k + 0.5, v, 1.5);
        let series = [
            Named {
                name: "before".into(),
                points: vec![
                    block(0.0, 10.0),
                    block(1.0, 12.0),
                    block(3.0, 11.0),
                    block(4.0, 12.0),
                ],
            },
            Named {
                name: "after".into(),
                points: vec![block(0.0, 8.0), block(1.0, 8.5), block(2.0, 9.0)],
            },
        ];
        let hours = |x: f64| format!("{x:.1} h");
        let chart = NamedChart {
            title: "memory per block",
            x_desc: "hours",
            y_desc: "MiB",
            what: "each group's median per block",
            limit: "1.5 blocks",
            format: &hours,
        };
        let p = named_lines(&chart, &series).expect("a chart");
        let (step, _) = widest_step(&p.svg, |_| true).expect("lines");
        assert!(step <= 1.5 + pixel(&p.svg).unwrap_or(0.0), "{step}");
        assert_eq!(lines(&p.svg).len(), 3, "before: two pieces; after: one");
        assert_eq!(
            p.notes,
            ["each group's median per block: the line breaks at every gap longer than 1.5 blocks: 1 in 2 series, the longest 2.0 h (before, from 1.5 h to 3.5 h)."]
        );
    }

    /// The regions chart draws each smaps read as a bar at its moment, nothing between two
    /// reads: its only line is the kernel's RSS.
    #[test]
    fn regions_are_bars_at_their_reads() {
        use crate::linux::regions::Kind;
        use crate::report::svg_check::lines;
        let mut e = fixture::experiment();
        for r in e.runs.iter_mut() {
            let read = |t: f64, heap: u64| crate::record::RegionsPoint {
                t_seconds: t,
                by_kind: [(Kind::MainHeap, heap << 20), (Kind::OtherAnon, 4 << 20)].into(),
            };
            r.regions = Some(crate::record::RegionsRead {
                t_seconds: 2.5,
                tree_rss_bytes: r.peak_rss_bytes,
                status_rss_bytes: r.peak_rss_bytes,
                status_rss_after_bytes: r.peak_rss_bytes,
                processes: 1,
                reads: 2,
                read_seconds: 0.01,
                regions: Default::default(),
                series: vec![read(0.1, 20), read(2.5, 300)],
            });
        }
        let a = analyse(&e);
        let charts = crate::report::inside_charts::regions_over_time(&e, &a);
        assert_eq!(charts.len(), 3);
        for (name, p) in &charts {
            let strokes: Vec<String> = lines(&p.svg).into_iter().map(|l| l.stroke).collect();
            assert!(
                strokes.iter().all(|s| s == "#5A5A5A"),
                "{name}: only the RSS line, no band joining two reads: {strokes:?}"
            );
            assert!(
                p.svg.matches("<rect").count() >= 2 * 2,
                "{name}: two bars of two kinds"
            );
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
