//! Pure renderers from analysis results to bytes, behind one interface ([`Exporter`])
//! chosen by one enum ([`ExportType`]); the one [`printer`] through which everything a
//! user sees goes; and [`escape`], the quoting of untrusted text for each target.

pub mod answer;
pub mod charts;
pub mod csv;
pub mod gate;
/// Escaping for terminals, shells and HTML lives at the bottom layer (analysis quotes a
/// Dockerfile line with it); reachable here as before.
pub use crate::escape;
pub(crate) mod cpu;
pub(crate) mod holes;
pub mod hosts;
pub mod html;
pub mod inside_charts;
pub mod json;
pub(crate) mod knobs;
pub mod markdown;
pub(crate) mod overview;
pub mod printer;
pub(crate) mod regions;
pub(crate) mod requires;
pub mod table;
pub mod text;

use crate::analysis::recommend::Recommendation;
use crate::analysis::{Analysis, Figure};
use crate::record::Experiment;
use crate::units::{format_bytes, format_seconds};

/// Failures of a renderer.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot write CSV: {0}")]
    Csv(#[from] ::csv::Error),
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A renderer: what it is given in, bytes out. Every report format implements it.
pub trait Exporter<In: ?Sized> {
    fn serialize(&self, input: &In) -> Result<Vec<u8>, ExportError>;
}

/// What a report of an experiment is made from.
pub struct Report<'a> {
    pub experiment: &'a Experiment,
    pub analysis: &'a Analysis,
    pub recommendation: &'a Recommendation,
}

/// How the runs of an experiment are put together in the terminal report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Every run of a variant together, whatever host it ran on.
    Pooled,
    /// One block per host, ratios within the host (`--by host`).
    ByHost,
}

/// How much of a report the terminal shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One screen: the key figures, the baseline's story, the recommendation.
    Answer,
    /// Every section: each figure and what it rests on, leak or fragmentation, where the
    /// memory is, the allocator's free memory, what to try next (`--detail`).
    Detail,
}

/// Every format an experiment can be reported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportType {
    /// The terminal report with the recommendation's headline under it.
    Table {
        color: bool,
        layout: Layout,
    },
    Json,
    Csv,
    SamplesCsv,
    Markdown,
    Html,
}

impl ExportType {
    /// The flag that asks for this format in a file.
    pub fn flag(self) -> &'static str {
        match self {
            ExportType::Table { .. } => "table",
            ExportType::Json => "--json",
            ExportType::Csv => "--csv",
            ExportType::SamplesCsv => "--samples-csv",
            ExportType::Markdown => "--markdown",
            ExportType::Html => "--html",
        }
    }

    pub fn exporter(self) -> Box<dyn for<'a> Exporter<Report<'a>>> {
        match self {
            ExportType::Table {
                color,
                layout: Layout::Detail,
            } => Box::new(table::TableExporter { color }),
            ExportType::Table {
                color,
                layout: Layout::Answer,
            } => Box::new(answer::AnswerExporter { color }),
            ExportType::Json => Box::new(json::JsonExporter),
            ExportType::Csv => Box::new(csv::CsvExporter),
            ExportType::SamplesCsv => Box::new(csv::SamplesCsvExporter),
            ExportType::Markdown => Box::new(markdown::MarkdownExporter),
            ExportType::Html => Box::new(html::HtmlExporter),
        }
    }

    /// Renders `report` in this format.
    pub fn serialize(self, report: &Report<'_>) -> Result<Vec<u8>, ExportError> {
        self.exporter().serialize(report)
    }
}

/// The figures shown as columns: memory, then time for a batch job, throughput and
/// latency for a server.
pub(crate) fn columns(a: &Analysis) -> Vec<(Figure, &'static str)> {
    let mut c = vec![(Figure::PeakRssBytes, "peak RSS")];
    // Several processes at once: the RSS sum counts shared pages once per process; PSS
    // and USS beside it (see [`multi_process_legend`]).
    if a.multi_process() {
        c.extend([
            (Figure::PeakPssBytes, "peak PSS"),
            (Figure::PeakUssBytes, "peak USS"),
        ]);
    }
    c.push((Figure::MeanRssBytes, "mean RSS"));
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
    // The allocator's view, when any variant has it (shown, or absent with why): the
    // program's peak of live bytes, each variant's peak over the program's floor, and held
    // over live at the RSS peak (retention then). Live and held at the RSS peak are in the
    // lines under the table, the JSON and the CSV.
    let probed = |f: Figure| a.variants.iter().any(|v| v.evidence.contains_key(&f));
    if probed(Figure::PeakLiveBytes) {
        c.push((Figure::PeakLiveBytes, "peak live"));
    }
    if a.floor.is_some() {
        c.push((Figure::PeakOverFloor, "peak/floor"));
    }
    if probed(Figure::HeldOverLive) {
        c.push((Figure::HeldOverLive, "held/live at RSS peak"));
    }
    c
}

/// The driver figures shown as columns after the fixed ones: every name any variant has.
pub(crate) fn driver_columns(a: &Analysis) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = a
        .variants
        .iter()
        .flat_map(|v| v.driver_figures.keys())
        .collect();
    names.into_iter().cloned().collect()
}

/// A driver figure's value with the unit its driver gave.
pub(crate) fn format_driver_value(v: f64, unit: Option<&str>) -> String {
    let n = if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    match unit {
        Some(u) => format!("{n} {u}"),
        None => n,
    }
}

/// The legend of the PSS and USS columns, when the runs had several processes at once:
/// what an RSS sum counts, what PSS and USS count, and which figure the recommendation
/// weighs. `None` for a single process (its report is unchanged).
pub(crate) fn multi_process_legend(a: &Analysis) -> Option<String> {
    if let crate::analysis::Sharing::Brief { processes, share } = a.sharing {
        return Some(format!(
            "up to {processes} processes at once, but for only {:.0}% of the run (start-up helpers: \
a shim, a wrapper, sh -c): not a tree that shares memory, so the kernel's peak RSS decides \
and PSS is not weighed (that needs several processes for at least {:.0}% of the run).",
            share * 100.0,
            crate::analysis::MIN_SHARING_SHARE * 100.0
        ));
    }
    if !a.multi_process() {
        return None;
    }
    let weighed = crate::analysis::recommend::memory(a);
    let which = if weighed == Figure::PeakPssBytes {
        "the recommendation weighs peak PSS".to_string()
    } else {
        format!(
            "the recommendation weighs {} (PSS reads did not cover the runs' shared stretch in every ok run)",
            crate::analysis::recommend::label(weighed)
        )
    };
    Some(format!(
        "up to {} processes at once: peak RSS sums RSS over them, counting a page they share \
(a forked worker's copy-on-write heap) once per process;\n\
peak PSS divides each shared page among the processes that map it (the tree's own footprint); \
peak USS counts only pages private to one process;\n\
PSS and USS are sampled from smaps_rollup within a CPU budget, not kernel high-water marks; \
{which}; the trend and leak-or-fragmentation lines use the RSS sum.",
        a.processes_at_once
    ))
}

/// The heading of the evidence lines, in every format.
pub(crate) const EVIDENCE_HEADING: &str =
    "what the sampled figures rest on (a figure below its rule is not shown, and enters no ratio, verdict or recommendation)";

/// The text of a cell whose figure is below its rule (the evidence lines say why).
pub(crate) const ABSENT: &str = "absent";

/// A ratio to the baseline with its 95% interval, `*` when significant, else `unmarked`
/// (a space where columns must line up): "0.41× [0.40, 0.43]*".
pub(crate) fn ratio_text(r: &crate::analysis::Ratio, unmarked: &str) -> String {
    format!(
        "{:.2}× [{:.2}, {:.2}]{}",
        r.value,
        r.ci95[0],
        r.ci95[1],
        if r.significant { "*" } else { unmarked }
    )
}

/// A table cell's text for a figure a variant does not show: "absent" when it was measured
/// and is below its rule, "—" when it was not measured.
pub(crate) fn missing_cell(s: &crate::analysis::VariantSummary, f: Figure) -> &'static str {
    if s.evidence.get(&f).is_some_and(|e| e.absent.is_some()) {
        ABSENT
    } else {
        "—"
    }
}

pub(crate) fn column_label(f: Figure) -> &'static str {
    match f {
        Figure::LiveAtPeakBytes => "live at peak",
        Figure::HeldAtPeakBytes => "held at peak",
        Figure::HeldOverLive => "held/live at RSS peak",
        Figure::PeakLiveBytes => "peak live",
        Figure::PeakOverFloor => "peak/floor",
        Figure::FinalRssBytes => "final RSS",
        _ => crate::analysis::recommend::label(f),
    }
}

/// Per variant, what its sampled figures among `shown` rest on, and each absent figure
/// with why and what would give it; the same words in every renderer. Exact figures
/// (kernel marks and counters, the load generator's counts) are said once in the legend.
pub(crate) fn evidence_lines(a: &Analysis) -> Vec<String> {
    let shown: Vec<Figure> = columns(a)
        .into_iter()
        .map(|(f, _)| f)
        .chain([Figure::FinalRssBytes])
        .collect();
    let mut out = Vec::new();
    for s in &a.variants {
        let mut covered = Vec::new();
        let mut absent = Vec::new();
        let mut allocator_said = false;
        for f in &shown {
            let Some(e) = s.evidence.get(f) else { continue };
            if e.exact() {
                continue;
            }
            let alloc = matches!(
                f,
                Figure::LiveAtPeakBytes | Figure::HeldAtPeakBytes | Figure::HeldOverLive
            );
            if alloc && allocator_said {
                continue;
            }
            let label = if alloc {
                "live/held at peak"
            } else {
                column_label(*f)
            };
            allocator_said |= alloc;
            if let Some(x) = &e.absent {
                absent.push(format!(
                    "{label} not shown: {}; {} would give it",
                    x.reason, x.remedy
                ));
                continue;
            }
            let mut words = format!("{label}: {}", e.source.words());
            if let Some(n) = e.samples {
                words.push_str(&format!(", {n:.0} samples"));
            }
            if let Some(share) = e.share {
                words.push_str(&format!(" over {:.0}% of the run", share * 100.0));
            }
            if let Some(k) = e.runs_at_peak {
                words.push_str(&format!(
                    ", at the memory peak in {k} of {} runs",
                    e.runs_with
                ));
            }
            if e.runs_standing < e.runs_with {
                words.push_str(&format!(
                    " (from the {} of {} runs that meet its rule)",
                    e.runs_standing, e.runs_with
                ));
            }
            covered.push(words);
        }
        if !covered.is_empty() {
            out.push(format!("{}: {}", s.name, covered.join("; ")));
        }
        out.extend(absent.into_iter().map(|x| format!("{}: {x}", s.name)));
    }
    out
}

/// A figure's value in its unit.
pub(crate) fn format_value(f: Figure, v: f64) -> String {
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
    } else if matches!(f, Figure::HeldOverLive | Figure::PeakOverFloor) {
        format!("{v:.2}×")
    } else if matches!(f, Figure::Requests | Figure::Errors | Figure::ThreadsPeak) {
        format!("{v:.0}")
    } else {
        format_seconds(v)
    }
}

#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod hostile;
#[cfg(test)]
pub(crate) mod svg_check;

#[cfg(test)]
mod snapshots {
    use super::*;
    use crate::analysis::analyse;

    #[test]
    fn table_snapshot() {
        let e = fixture::experiment();
        insta::assert_snapshot!(table::render(&e, &analyse(&e), false));
    }

    /// The terminal's default: the key columns, the story, the recommendation.
    #[test]
    fn answer_snapshot() {
        let text = with_fixture_report(|r| {
            ExportType::Table {
                color: false,
                layout: Layout::Answer,
            }
            .serialize(r)
            .expect("bytes")
        });
        insta::assert_snapshot!(String::from_utf8_lossy(&text));
    }

    /// `f` of the fixture experiment's report (its analysis and recommendation).
    fn with_fixture_report<T>(f: impl FnOnce(&Report) -> T) -> T {
        let e = fixture::experiment();
        let a = analyse(&e);
        let rec = crate::analysis::recommend::recommend(&a);
        f(&Report {
            experiment: &e,
            analysis: &a,
            recommendation: &rec,
        })
    }

    #[test]
    fn by_host_table_snapshot() {
        let e = fixture::two_host_experiment();
        insta::assert_snapshot!(hosts::render(&e, false));
    }

    #[test]
    fn by_host_markdown_and_json() {
        let e = fixture::two_host_experiment();
        let md = hosts::render_markdown(&e);
        assert!(md.contains("**hosts differ in CPU quota"), "{md}");
        assert_eq!(md.matches("#### host ").count(), 2, "{md}");
        assert!(
            md.contains("#### host node-b · 2 CPUs · CPU quota 1.00"),
            "{md}"
        );
        let v: serde_json::Value =
            serde_json::from_slice(&json::render_by_host(&e).expect("JSON")).expect("valid");
        let schema: serde_json::Value = serde_json::from_str(json::SCHEMAS[2].1).expect("schema");
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        assert!(validator.is_valid(&v));
        let b = &v["by_host"];
        assert_eq!(b[1]["label"], "node-b");
        assert_eq!(b[1]["runs"], 9);
        // Within node-b, arena2's wall ratio is node-a's (every node-b run took twice as long).
        let r = |h: usize| {
            b[h]["variants"][1]["summary"]["ratio_to_baseline"]["wall_seconds"]["value"].as_f64()
        };
        assert!(r(0).is_some());
        assert!((r(0).unwrap_or(0.0) - r(1).unwrap_or(1.0)).abs() < 1e-9);
    }

    #[test]
    fn pooled_report_of_two_hosts_warns() {
        let e = fixture::two_host_experiment();
        let w = hosts::pooled_warning(&e).unwrap_or_default();
        assert!(w.contains("2 hosts (node-a, node-b)"), "{w}");
        assert!(w.contains("memtrial report --by host 7"), "{w}");
        assert!(hosts::pooled_warning(&fixture::experiment()).is_none());
    }

    #[test]
    fn csv_has_the_host_of_each_run() {
        let text = csv::render(&fixture::two_host_experiment());
        let mut lines = text.lines();
        assert!(lines.next().unwrap_or("").ends_with(",host"));
        let hosts: Vec<&str> = lines.filter_map(|l| l.rsplit(',').next()).collect();
        assert_eq!(hosts.len(), 18);
        assert_eq!(hosts.iter().filter(|h| **h == "node-b").count(), 9);
    }

    #[test]
    fn json_v3_matches_its_schema() {
        let e = fixture::two_host_experiment();
        let v: serde_json::Value =
            serde_json::from_str(&json::render(&e, &analyse(&e))).expect("valid JSON");
        let schema: serde_json::Value = serde_json::from_str(json::SCHEMAS[2].1).expect("schema");
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(&v)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(v["schema_version"], 4);
        assert_eq!(v["experiment"]["hosts"][1]["hostname"], "node-b");
        assert_eq!(v["experiment"]["fingerprint"], e.plan.fingerprint());
        assert_eq!(v["variants"][0]["runs"][3]["host"], 1);
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

    /// Every format through the one interface gives the same bytes as its renderer.
    #[test]
    fn exporters_give_the_renderers_bytes() {
        with_fixture_report(renderers_bytes_of);
    }

    fn renderers_bytes_of(r: &Report) {
        let (e, a, rec) = (r.experiment, r.analysis, r.recommendation);
        let text = |t: ExportType| String::from_utf8(t.serialize(r).unwrap()).unwrap();
        assert_eq!(
            text(ExportType::Table {
                color: false,
                layout: Layout::Detail
            }),
            format!("{}\n{}\n", table::render(e, a, false), rec.headline())
        );
        assert_eq!(
            text(ExportType::Table {
                color: false,
                layout: Layout::Answer
            }),
            format!("{}\n{}\n", answer::render(e, a, rec, false), rec.headline())
        );
        assert_eq!(text(ExportType::Json), json::render(e, a));
        assert_eq!(text(ExportType::Csv), csv::render(e));
        assert_eq!(text(ExportType::SamplesCsv), csv::render_samples(e));
        assert_eq!(text(ExportType::Markdown), markdown::render(e, a, rec));
        assert_eq!(text(ExportType::Html), html::render(e, a, rec));
    }

    /// Several processes at once: peak PSS and USS beside peak RSS in the table,
    /// Markdown and HTML, with the legend saying what each counts and which is weighed;
    /// a single process keeps its columns (the snapshots above).
    #[test]
    fn multi_process_reports_show_pss_and_uss_beside_rss() {
        let mut e = fixture::experiment();
        assert!(!analyse(&e).multi_process());
        assert!(!columns(&analyse(&e))
            .iter()
            .any(|(f, _)| *f == Figure::PeakPssBytes));
        for r in e.runs.iter_mut() {
            for s in r.samples.iter_mut() {
                s.processes = 3;
            }
        }
        let a = analyse(&e);
        let rec = crate::analysis::recommend::recommend(&a);
        let heads: Vec<&str> = columns(&a).iter().map(|(_, h)| *h).collect();
        assert_eq!(heads[..4], ["peak RSS", "peak PSS", "peak USS", "mean RSS"]);
        let legend = multi_process_legend(&a).unwrap();
        assert!(legend.contains("up to 3 processes at once"), "{legend}");
        assert!(legend.contains("once per process"), "{legend}");
        assert!(
            legend.contains("the recommendation weighs peak PSS"),
            "{legend}"
        );
        let table = table::render(&e, &a, false);
        assert!(
            table.contains("peak PSS") && table.contains("peak USS"),
            "{table}"
        );
        assert!(table.contains("once per process"), "{table}");
        let md = markdown::render(&e, &a, &rec);
        assert!(md.contains("| peak RSS | peak PSS | peak USS |"), "{md}");
        assert!(md.contains("once per process"), "{md}");
        let html = html::render(&e, &a, &rec);
        assert!(html.contains("<th>peak USS</th>"), "a figures column");
        assert!(html.contains("once per process"));
        assert!(html.contains("Pareto front (peak PSS vs"));
        let v: serde_json::Value = serde_json::from_str(&json::render(&e, &a)).unwrap();
        let summary = &v["variants"][0]["summary"];
        assert!(summary["peak_pss_bytes"]["median"].is_number(), "{summary}");
        assert!(summary["peak_uss_bytes"]["median"].is_number(), "{summary}");
    }

    #[test]
    fn csv_snapshot() {
        insta::assert_snapshot!(csv::render(&fixture::experiment()));
    }
}
