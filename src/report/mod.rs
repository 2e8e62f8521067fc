//! Pure renderers from analysis results to bytes.

pub mod charts;
pub mod csv;
pub mod html;
pub mod json;
pub mod markdown;
pub mod table;

use crate::analysis::{Analysis, Figure};
use crate::units::{format_bytes, format_seconds};

/// The figures shown as columns: memory, then time for a batch job, throughput and
/// latency for a server.
pub fn columns(a: &Analysis) -> Vec<(Figure, &'static str)> {
    let mut c = vec![
        (Figure::PeakRssBytes, "peak RSS"),
        (Figure::MeanRssBytes, "mean RSS"),
    ];
    if a.server {
        c.extend([
            (Figure::ThroughputRps, "throughput"),
            (Figure::LatencyP50Ms, "p50 latency"),
            (Figure::LatencyP95Ms, "p95 latency"),
            (Figure::LatencyP99Ms, "p99 latency"),
        ]);
    } else {
        c.extend([(Figure::WallSeconds, "wall"), (Figure::CpuSeconds, "CPU")]);
    }
    c
}

/// A figure's value in its unit.
pub fn format_value(f: Figure, v: f64) -> String {
    if f.is_bytes() {
        format_bytes(v)
    } else if f.is_latency() {
        if v < 10.0 {
            format!("{v:.2} ms")
        } else {
            format!("{v:.1} ms")
        }
    } else if f == Figure::ThroughputRps {
        format!("{v:.0} req/s")
    } else if matches!(f, Figure::Requests | Figure::Errors | Figure::ThreadsPeak) {
        format!("{v:.0}")
    } else {
        format_seconds(v)
    }
}

#[cfg(test)]
pub(crate) mod fixture;

#[cfg(test)]
mod snapshots {
    use super::*;
    use crate::analysis::analyse;

    #[test]
    fn table_snapshot() {
        let e = fixture::experiment();
        insta::assert_snapshot!(table::render(&e, &analyse(&e), false));
    }

    #[test]
    fn json_snapshot() {
        let e = fixture::experiment();
        let text = json::render(&e, &analyse(&e));
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        insta::assert_json_snapshot!(v, {".generator" => "[generator]"});
    }

    #[test]
    fn markdown_snapshot() {
        let e = fixture::experiment();
        let a = analyse(&e);
        let rec = crate::analysis::recommend::recommend(&a);
        insta::assert_snapshot!(markdown::render(&e, &a, &rec));
    }

    /// The HTML's structure: headings, table rows, charts and escaping (SVG bodies are
    /// summarised, their numbers belong to plotters).
    #[test]
    fn html_structure_snapshot() {
        let mut e = fixture::experiment();
        e.plan.command.push("<script>alert(1)</script>".into());
        let a = analyse(&e);
        let rec = crate::analysis::recommend::recommend(&a);
        let html = html::render(&e, &a, &rec);
        assert!(!html.contains("<script>"), "user strings are escaped");
        assert!(html.contains("&lt;script&gt;"));
        let outline: Vec<String> = html
            .split('<')
            .filter_map(|tag| {
                let name: String = tag
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                matches!(
                    name.as_str(),
                    "h1" | "h2" | "h3" | "table" | "figure" | "svg" | "pre" | "tr"
                )
                .then(|| {
                    let text = tag.split_once('>').map(|x| x.1).unwrap_or("").trim();
                    format!("{name}: {}", text.chars().take(70).collect::<String>())
                })
            })
            .collect();
        insta::assert_snapshot!(outline.join("\n"));
    }

    #[test]
    fn csv_snapshot() {
        insta::assert_snapshot!(csv::render(&fixture::experiment()));
    }
}
