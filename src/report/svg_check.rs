//! Reading back what a chart drew, to check it drew only what was measured: the lines
//! of an SVG chart (plotters' `<polyline>`s) in the units of its time axis, read from the
//! axis's own tick labels. Test code only, in one file for both kinds of test: the library's
//! unit tests compile it as `crate::report::svg_check`, and the integration tests include it
//! from tests/it/common.rs with `#[path]`. It uses nothing but `regex`.

use regex::Regex;

/// One line a chart drew: its stroke colour (`#RRGGBB`) and its vertices in pixels.
#[derive(Debug, Clone)]
pub struct Polyline {
    pub stroke: String,
    pub points: Vec<(f64, f64)>,
}

/// Every `<polyline>` of `svg` but the axes (drawn black).
pub fn lines(svg: &str) -> Vec<Polyline> {
    let tag = Regex::new(r"<polyline\b[^>]*>").expect("regex");
    let attr = |t: &str, name: &str| -> Option<String> {
        let re = Regex::new(&format!(r#"\b{name}="([^"]*)""#)).expect("regex");
        re.captures(t).map(|c| c[1].to_string())
    };
    tag.find_iter(svg)
        .filter_map(|m| {
            let t = m.as_str();
            let stroke = attr(t, "stroke")?.to_ascii_uppercase();
            let points = attr(t, "points")?
                .split_whitespace()
                .filter_map(|p| {
                    let (x, y) = p.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect();
            (stroke != "#000000").then_some(Polyline { stroke, points })
        })
        .collect()
}

/// The x axis as `value = a + b · pixel`, from its numeric tick labels (the centred numbers
/// on the lowest row of labels); `None` without two of them.
pub fn x_axis(svg: &str) -> Option<(f64, f64)> {
    let text = Regex::new(r#"<text\b([^>]*)>\s*([^<]*?)\s*</text>"#).expect("regex");
    let num = |t: &str, name: &str| -> Option<f64> {
        let re = Regex::new(&format!(r#"\b{name}="([-0-9.e]+)""#)).expect("regex");
        re.captures(t)?[1].parse().ok()
    };
    let mut ticks: Vec<(f64, f64, f64)> = text
        .captures_iter(svg)
        .filter(|c| c[1].contains(r#"text-anchor="middle""#) && !c[1].contains("rotate("))
        .filter_map(|c| {
            let v: f64 = c[2].parse().ok()?;
            Some((num(&c[1], "y")?, num(&c[1], "x")?, v))
        })
        .collect();
    let bottom = ticks.iter().map(|t| t.0).fold(f64::NAN, f64::max);
    ticks.retain(|t| t.0 == bottom);
    ticks.sort_by(|p, q| p.1.total_cmp(&q.1));
    let (first, last) = (ticks.first()?, ticks.last()?);
    if last.1 <= first.1 {
        return None;
    }
    let b = (last.2 - first.2) / (last.1 - first.1);
    Some((first.2 - b * first.1, b))
}

/// The widest step along the time axis, in its units, that any line of `svg` whose stroke
/// `keep` accepts draws between two vertices, with the stroke that drew it.
pub fn widest_step(svg: &str, keep: impl Fn(&str) -> bool) -> Option<(f64, String)> {
    let (_, b) = x_axis(svg)?;
    lines(svg)
        .into_iter()
        .filter(|l| keep(&l.stroke))
        .flat_map(|l| {
            let stroke = l.stroke.clone();
            l.points
                .windows(2)
                .map(|w| ((w[1].0 - w[0].0).abs() * b, stroke.clone()))
                .collect::<Vec<_>>()
        })
        .max_by(|p, q| p.0.total_cmp(&q.0))
}

/// One pixel of the time axis, in its units: how far a drawn step may exceed a limit from
/// rounding alone.
pub fn pixel(svg: &str) -> Option<f64> {
    x_axis(svg).map(|(_, b)| b.abs())
}
