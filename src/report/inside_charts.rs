//! SVG charts of the inside view: the allocator's live and held bytes beside RSS, and a
//! runtime's own figures (Ruby GC and YJIT, JVM NMT), and the resident bytes by kind of
//! mapping stacked over time, for each variant's median run.

use plotters::prelude::*;

use super::charts::{
    canvas, color, counted, draw_keys, gaps, median_run, sampled_line, time_axes, within, GapTally,
    Key, Picture, MIB, WIDTH,
};
use crate::analysis::{Analysis, Figure};
use crate::record::{Experiment, FigureUnit, RunRecord};

/// One line of a chart: its label, colour, points (seconds, value in the chart's unit), and
/// the interval its source samples at (a line breaks where two samples are further apart
/// than [`super::charts::JOIN_INTERVALS`] of it).
struct Line {
    label: String,
    color: RGBColor,
    width: u32,
    points: Vec<(f64, f64)>,
    interval: f64,
}

/// What one source of a chart's lines is, for the sentence about its gaps, and whether its
/// gaps are shaded on the chart (the sparse source: the probe's, not the kernel's RSS).
struct Source {
    what: String,
    lines: Vec<Line>,
    shade: bool,
}

/// The light band over a stretch without samples of the shaded source.
const GAP_FILL: RGBColor = RGBColor(240, 240, 240);

/// Draws the sources' lines on one pair of axes, each broken where its samples are missing
/// (a dot on every sample when sparse), the shaded source's gaps as light bands; `None`
/// when there is nothing to draw.
fn draw(title: &str, y_desc: &str, sources: &[Source]) -> Option<Picture> {
    let lines = || sources.iter().flat_map(|s| s.lines.iter());
    let pts = || lines().flat_map(|l| l.points.iter());
    let max_t = pts().map(|p| p.0).fold(0.0, f64::max);
    let max_y = pts().map(|p| p.1).fold(0.0, f64::max);
    pts().next()?;
    let mut notes = Vec::new();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 360)).into_drawing_area();
        let (plot, side) = canvas(&root, title)?;
        let mut chart = time_axes(&plot, max_t, max_y, y_desc)?;
        let mut keys = Vec::new();
        for src in sources.iter().filter(|s| s.shade) {
            let Some(l) = src.lines.iter().find(|l| !l.points.is_empty()) else {
                continue;
            };
            // A band only where none of the source's lines has a sample (a figure that some
            // samples lack, like live bytes, must not shade the others' samples).
            let mut times: Vec<(f64, f64)> = src
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| (p.0, 0.0)))
                .collect();
            times.sort_by(|p, q| p.0.total_cmp(&q.0));
            times.dedup();
            let stretches = gaps(&times, within(l.interval));
            if stretches.is_empty() {
                continue;
            }
            let top = (max_y * 1.08).max(1.0);
            // A band stops short of the samples at its ends (about two pixels, at most a
            // quarter of the gap): a sample alone between two gaps shows as a dot in a
            // clear slit, not inside one "no sample" band.
            let slit = |a: f64, b: f64| (max_t / 400.0).min((b - a) / 4.0);
            chart
                .draw_series(stretches.iter().map(|&(a, b)| {
                    let m = slit(a, b);
                    Rectangle::new([(a + m, 0.0), (b - m, top)], GAP_FILL.filled())
                }))
                .ok()?;
            keys.push(Key::area(format!("no {} sample", src.what), GAP_FILL));
        }
        for src in sources {
            let joins = |l: &Line| within(l.interval);
            let mut drawn = src.lines.iter().filter(|l| !l.points.is_empty());
            // A source's lines come from the same samples: its first line says its gaps.
            if let Some(l) = drawn.clone().next() {
                let mut tally = GapTally::every(&src.what, l.interval);
                tally.add("", &l.points, joins(l));
                notes.extend(tally.sentence());
            }
            for l in &mut drawn {
                // Probe and runtime samples are sparse (one per probe interval): mark them.
                let dot = (l.points.len() < 200).then_some(2);
                sampled_line(
                    &mut chart,
                    &l.points,
                    joins(l),
                    l.color.stroke_width(l.width),
                    dot,
                )?;
                keys.push(Key::line(l.label.clone(), l.color));
            }
        }
        draw_keys(&side, &keys)?;
        root.present().ok()?;
    }
    Some(Picture { svg, notes })
}

/// The kernel's RSS of a run, sampled at the plan's interval, as the grey line of a chart.
fn rss_line(e: &Experiment, m: &RunRecord) -> Source {
    Source {
        what: "RSS".into(),
        lines: vec![Line {
            label: "RSS (kernel)".into(),
            color: RSS_GREY,
            width: 2,
            points: m
                .samples
                .iter()
                .map(|s| (s.t_seconds, s.rss_bytes as f64 / MIB))
                .collect(),
            interval: e.plan.interval_ms as f64 / 1000.0,
        }],
        shade: false,
    }
}

/// The colour of the kernel's RSS line beside the inside view.
pub(crate) const RSS_GREY: RGBColor = RGBColor(90, 90, 90);

/// For each variant with allocator figures: RSS, the allocator's held bytes and the live
/// bytes of its median run (by peak RSS) over time, in MiB. The gap between held and live
/// is what the allocator holds unused; between RSS and held, what is not the heap.
pub(crate) fn allocator_over_time(e: &Experiment, a: &Analysis) -> Vec<(String, Picture)> {
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
        let interval = al.interval_ms as f64 / 1000.0;
        let probe = Source {
            what: format!("allocator ({})", al.answered),
            lines: vec![
                Line {
                    label: format!("held by {}", al.answered),
                    color: color(1),
                    width: 3,
                    points: series(|p| p.held_bytes),
                    interval,
                },
                Line {
                    label: "live (allocated, not freed)".into(),
                    color: color(0),
                    width: 3,
                    points: series(|p| p.live_bytes),
                    interval,
                },
            ],
            shade: true,
        };
        let title = format!(
            "{}: RSS vs allocator-held vs live (MiB), median run",
            v.name
        );
        if let Some(p) = draw(&title, "MiB", &[rss_line(e, m), probe]) {
            out.push((v.name.clone(), p));
        }
    }
    out
}

/// For each runtime probed and each variant with its figures: the median run's series,
/// one chart for byte figures (MiB) and one for counts.
pub(crate) fn runtime_over_time(e: &Experiment, a: &Analysis) -> Vec<(String, Picture)> {
    let mut out = Vec::new();
    let interval = e.plan.probes.interval_ms as f64 / 1000.0;
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
                        interval,
                    })
                    .collect();
                let title = format!(
                    "{}: {runtime} {} over time, median run",
                    v.name,
                    y_desc_word(unit)
                );
                let source = Source {
                    what: runtime.to_string(),
                    lines,
                    shade: true,
                };
                if let Some(p) = draw(&title, y_desc, &[source]) {
                    out.push((format!("{} {runtime}", v.name), p));
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
/// resident bytes by kind of mapping at each read, stacked in a narrow bar at the read's
/// moment (reads are sparse by design: at new highs where growth pauses, within a CPU
/// budget; nothing is drawn between two), the kernel's RSS as a line that breaks where its
/// samples are missing.
pub(crate) fn regions_over_time(e: &Experiment, a: &Analysis) -> Vec<(String, Picture)> {
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
        // Each read's bands, kind by kind from the bottom: (time, from, to) in MiB.
        let bands: Vec<Vec<(f64, f64, f64)>> = series
            .iter()
            .map(|p| {
                let mut below = 0u64;
                kinds
                    .iter()
                    .map(|k| {
                        let b = p.by_kind.get(k).copied().unwrap_or(0);
                        let band = (p.t_seconds, below as f64 / MIB, (below + b) as f64 / MIB);
                        below += b;
                        band
                    })
                    .collect()
            })
            .collect();
        let rss = rss_line(e, m);
        let rss_pts = &rss.lines[0].points;
        let max_t = rss_pts
            .iter()
            .map(|p| p.0)
            .chain(series.iter().map(|p| p.t_seconds))
            .fold(0.0, f64::max);
        let max_y = rss_pts
            .iter()
            .map(|p| p.1)
            .chain(bands.iter().filter_map(|b| b.last().map(|x| x.2)))
            .fold(0.0, f64::max);
        let title = format!(
            "{}: resident bytes by kind of mapping (MiB) at each of {} smaps reads, median run",
            v.name,
            series.len()
        );
        // A bar 0.8% of the time axis wide (about 6 pixels), centred on its read.
        let half = (max_t * 1.02).max(0.1) * 0.004;
        let mut notes = Vec::new();
        let mut svg = String::new();
        let drawn = (|| -> Option<()> {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, 360)).into_drawing_area();
            let (plot, side) = canvas(&root, &title)?;
            let mut chart = time_axes(&plot, max_t, max_y, "MiB")?;
            let mut keys = Vec::new();
            for (i, k) in kinds.iter().enumerate() {
                let RGBColor(r, g, b) = color(i);
                let light = |x: u8| ((u16::from(x) + 255) / 2) as u8;
                let fill = RGBColor(light(r), light(g), light(b));
                chart
                    .draw_series(bands.iter().map(|read| {
                        let (t, lo, hi) = read[i];
                        Rectangle::new([(t - half, lo), (t + half, hi)], fill.filled())
                    }))
                    .ok()?;
                // The legend top down, as the bands stack.
                keys.insert(0, Key::area(k.label(), fill));
            }
            let l = &rss.lines[0];
            let joins = within(l.interval);
            sampled_line(&mut chart, &l.points, &joins, l.color.stroke_width(2), None)?;
            keys.push(Key::line(l.label.clone(), l.color));
            let mut tally = GapTally::every("RSS", l.interval);
            tally.add("", &l.points, &joins);
            notes.extend(tally.sentence());
            draw_keys(&side, &keys)?;
            root.present().ok()
        })();
        if drawn.is_some() {
            out.push((v.name.clone(), Picture { svg, notes }));
        }
    }
    out
}
