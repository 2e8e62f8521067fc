//! SVG charts of the inside view: the allocator's live and held bytes beside RSS, and a
//! runtime's own figures (Ruby GC and YJIT, JVM NMT), and the resident bytes by kind of
//! mapping stacked over time, for each variant's median run.

use plotters::prelude::*;

use super::charts::{color, counted, legend, median_run, time_axes, MIB};
use crate::analysis::{Analysis, Figure};
use crate::record::{Experiment, FigureUnit, RunRecord};

/// One line of a chart: its label, colour and points (seconds, value in the chart's unit).
struct Line {
    label: String,
    color: RGBColor,
    width: u32,
    points: Vec<(f64, f64)>,
}

/// Draws lines on one pair of axes; `None` when there is nothing to draw.
fn draw(title: &str, y_desc: &str, lines: &[Line]) -> Option<String> {
    let pts = || lines.iter().flat_map(|l| l.points.iter());
    let max_t = pts().map(|p| p.0).fold(0.0, f64::max);
    let max_y = pts().map(|p| p.1).fold(0.0, f64::max);
    pts().next()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 360)).into_drawing_area();
        let mut chart = time_axes(&root, title, max_t, max_y, y_desc)?;
        for l in lines.iter().filter(|l| !l.points.is_empty()) {
            let (c, w) = (l.color, l.width);
            chart
                .draw_series(LineSeries::new(l.points.clone(), c.stroke_width(w)))
                .ok()?
                .label(l.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(w))
                });
            // Allocator and runtime samples are sparse (one per probe interval): mark them.
            if l.points.len() < 200 {
                chart
                    .draw_series(l.points.iter().map(|p| Circle::new(*p, 2, c.filled())))
                    .ok()?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().ok()?;
    }
    Some(svg)
}

/// For each variant with allocator figures: RSS, the allocator's held bytes and the live
/// bytes of its median run (by peak RSS) over time, in MiB. The gap between held and live
/// is what the allocator holds unused; between RSS and held, what is not the heap.
pub(crate) fn allocator_over_time(e: &Experiment, a: &Analysis) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for v in &a.variants {
        let runs: Vec<&RunRecord> = counted(e, &v.name)
            .into_iter()
            .filter(|r| r.inside.allocator.is_some())
            .collect();
        let Some(m) = median_run(&runs, Figure::PeakRssBytes) else {
            continue;
        };
        let Some(al) = &m.inside.allocator else {
            continue;
        };
        let series = |get: fn(&crate::record::AllocatorPoint) -> Option<u64>| {
            al.series
                .iter()
                .filter_map(|p| Some((p.t_seconds, get(p)? as f64 / MIB)))
                .collect::<Vec<_>>()
        };
        let lines = [
            Line {
                label: "RSS (kernel)".into(),
                color: RGBColor(90, 90, 90),
                width: 2,
                points: m
                    .samples
                    .iter()
                    .map(|s| (s.t_seconds, s.rss_bytes as f64 / MIB))
                    .collect(),
            },
            Line {
                label: format!("held by {}", al.answered),
                color: color(1),
                width: 3,
                points: series(|p| p.held_bytes),
            },
            Line {
                label: "live (allocated, not freed)".into(),
                color: color(0),
                width: 3,
                points: series(|p| p.live_bytes),
            },
        ];
        let title = format!(
            "{}: RSS vs allocator-held vs live (MiB), median run",
            v.name
        );
        if let Some(svg) = draw(&title, "MiB", &lines) {
            out.push((v.name.clone(), svg));
        }
    }
    out
}

/// For each runtime probed and each variant with its figures: the median run's series,
/// one chart for byte figures (MiB) and one for counts.
pub(crate) fn runtime_over_time(e: &Experiment, a: &Analysis) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for runtime in ["ruby", "jvm"] {
        for v in &a.variants {
            let runs: Vec<&RunRecord> = counted(e, &v.name)
                .into_iter()
                .filter(|r| r.inside.runtime(runtime).is_some())
                .collect();
            let Some(m) = median_run(&runs, Figure::PeakRssBytes) else {
                continue;
            };
            let Some(view) = m.inside.runtime(runtime) else {
                continue;
            };
            for (unit, y_desc, scale) in [
                (FigureUnit::Bytes, "MiB", MIB),
                (FigureUnit::Count, "count", 1.0),
            ] {
                let lines: Vec<Line> = view
                    .series
                    .iter()
                    .filter(|s| s.unit == unit)
                    .take(PALETTE_LINES)
                    .enumerate()
                    .map(|(i, s)| Line {
                        label: s.name.clone(),
                        color: color(i),
                        width: 2,
                        points: s.points.iter().map(|p| (p[0], p[1] / scale)).collect(),
                    })
                    .collect();
                let title = format!(
                    "{}: {runtime} {} over time, median run",
                    v.name,
                    y_desc_word(unit)
                );
                if let Some(svg) = draw(&title, y_desc, &lines) {
                    out.push((format!("{} {runtime}", v.name), svg));
                }
            }
        }
    }
    out
}

/// At most this many lines on one runtime chart (one colour each).
const PALETTE_LINES: usize = 8;

fn y_desc_word(unit: FigureUnit) -> &'static str {
    match unit {
        FigureUnit::Bytes => "memory (MiB)",
        FigureUnit::Count => "counts",
    }
}

/// For each variant whose median run (by peak RSS) has two or more `smaps` reads: its
/// resident bytes by kind of mapping stacked over time (MiB), the kernel's RSS as a line.
pub(crate) fn regions_over_time(e: &Experiment, a: &Analysis) -> Vec<(String, String)> {
    use crate::linux::regions::Kind;
    let mut out = Vec::new();
    for v in &a.variants {
        let runs: Vec<&RunRecord> = counted(e, &v.name)
            .into_iter()
            .filter(|r| r.regions.as_ref().is_some_and(|g| g.series.len() >= 2))
            .collect();
        let Some(m) = median_run(&runs, Figure::PeakRssBytes) else {
            continue;
        };
        let Some(read) = &m.regions else { continue };
        let series = &read.series;
        let kinds: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| {
                series
                    .iter()
                    .any(|p| p.by_kind.get(k).is_some_and(|b| *b > 0))
            })
            .collect();
        // Cumulative tops, kind by kind, at every read.
        let tops: Vec<Vec<(f64, f64)>> = (0..kinds.len())
            .map(|upto| {
                series
                    .iter()
                    .map(|p| {
                        let sum: u64 = kinds[..=upto]
                            .iter()
                            .map(|k| p.by_kind.get(k).copied().unwrap_or(0))
                            .sum();
                        (p.t_seconds, sum as f64 / MIB)
                    })
                    .collect()
            })
            .collect();
        let rss: Vec<(f64, f64)> = m
            .samples
            .iter()
            .map(|s| (s.t_seconds, s.rss_bytes as f64 / MIB))
            .collect();
        let max_t = rss
            .iter()
            .chain(tops.last().into_iter().flatten())
            .map(|p| p.0)
            .fold(0.0, f64::max);
        let max_y = rss
            .iter()
            .chain(tops.last().into_iter().flatten())
            .map(|p| p.1)
            .fold(0.0, f64::max);
        let title = format!(
            "{}: resident bytes by kind of mapping (MiB), median run, {} smaps reads",
            v.name,
            series.len()
        );
        let mut svg = String::new();
        let drawn = (|| -> Option<()> {
            let root = SVGBackend::with_string(&mut svg, (900, 360)).into_drawing_area();
            let mut chart = time_axes(&root, &title, max_t, max_y, "MiB")?;
            // The highest band first, each lower one drawn over it.
            for (i, k) in kinds.iter().enumerate().rev() {
                // Opaque and light: each lower band covers the one above it exactly.
                let RGBColor(r, g, b) = color(i);
                let light = |x: u8| ((u16::from(x) + 2 * 255) / 3) as u8;
                let c = RGBColor(r, g, b);
                let fill = RGBColor(light(r), light(g), light(b));
                chart
                    .draw_series(AreaSeries::new(tops[i].clone(), 0.0, fill).border_style(c))
                    .ok()?
                    .label(k.label())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 14, y + 5)], fill.filled())
                    });
            }
            let grey = RGBColor(60, 60, 60);
            chart
                .draw_series(LineSeries::new(rss, grey.stroke_width(2)))
                .ok()?
                .label("RSS (kernel)")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2))
                });
            legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
            root.present().ok()
        })();
        if drawn.is_some() {
            out.push((v.name.clone(), svg));
        }
    }
    out
}
