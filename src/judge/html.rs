//! `memtrial judge --html`: the judgement as one self-contained HTML file in the house
//! style of a trial's report — the recommendation first, the table of groups with ratios
//! and intervals, leak or fragmentation, a chart of each group's memory per time block,
//! the notes and how it was measured. No scripts, no fetches; every string from
//! Prometheus or the user goes through maud's escaping, and no control or bidirectional
//! character is left raw in the page.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{GroupResult, Judgement};
use crate::report::charts::{css_color, named_lines, Named, NamedChart, Picture};
use crate::report::html::STYLE;
use crate::units::{format_bytes, format_seconds};

fn figure(j: &Judgement, v: Option<f64>) -> String {
    match v {
        Some(m) if j.metric.ends_with("_bytes") => format_bytes(m),
        Some(m) => format!("{m:.4}"),
        None => "-".into(),
    }
}

fn ratio(r: Option<f64>, ci: Option<[f64; 2]>) -> String {
    match (r, ci) {
        (Some(r), Some([lo, hi])) => format!("{r:.2}× [{lo:.2}, {hi:.2}]"),
        (Some(r), None) => format!("{r:.2}×"),
        _ => String::new(),
    }
}

fn verdict_class(v: &str) -> &'static str {
    match v {
        "lower" => "sig-better",
        "higher" => "sig-worse",
        _ => "ns",
    }
}

/// The unit the chart's time axis counts in, for a window of `seconds`.
fn time_unit(seconds: f64) -> (f64, &'static str) {
    if seconds >= 2.0 * 86400.0 {
        (86400.0, "days since the window's start")
    } else if seconds >= 2.0 * 3600.0 {
        (3600.0, "hours since the window's start")
    } else if seconds >= 120.0 {
        (60.0, "minutes since the window's start")
    } else {
        (1.0, "seconds since the window's start")
    }
}

/// Each group's memory per block, on one axis from each window's start (a window before and
/// one after a rollout lie over each other).
fn chart(j: &Judgement) -> Option<Picture> {
    let longest = j.groups.iter().map(|g| g.per_block.len()).max()? as f64 * j.block_seconds;
    let (unit, x_desc) = time_unit(longest);
    let bytes = j.metric.ends_with("_bytes");
    let scale = if bytes { 1048576.0 } else { 1.0 };
    // One point per block with data; a block without any breaks the line (a line joins
    // neighbours at most 1.5 blocks apart).
    let span = j.block_seconds / unit;
    let short = match unit {
        u if u >= 86400.0 => "d",
        u if u >= 3600.0 => "h",
        u if u >= 60.0 => "min",
        _ => "s",
    };
    let series: Vec<Named> = j
        .groups
        .iter()
        .map(|g| Named {
            name: g.name.clone(),
            points: g
                .per_block
                .iter()
                .enumerate()
                .filter_map(|(k, v)| v.map(|v| ((k as f64 + 0.5) * span, v / scale, 1.5 * span)))
                .collect(),
        })
        .collect();
    let title = format!(
        "{}: each group's median over its pods, per block of {}",
        j.metric,
        format_seconds(j.block_seconds)
    );
    named_lines(
        &NamedChart {
            title: &title,
            x_desc,
            y_desc: if bytes { "MiB" } else { "" },
            what: "each group's median per block",
            limit: "one block",
            format: &|x| format!("{x:.1} {short}"),
        },
        &series,
    )
}

fn latency(g: &GroupResult, name: &str) -> String {
    g.beside
        .iter()
        .find(|b| b.name == name)
        .map(|b| {
            let v = b.median.map_or("-".to_string(), |m| {
                if name.ends_with("_seconds") {
                    format_seconds(m)
                } else {
                    format!("{m:.1}/s")
                }
            });
            format!("{v} {}", ratio(b.ratio, b.ci95))
        })
        .unwrap_or_default()
}

/// The groups against the baseline, a row each; the columns of other memory metrics,
/// of Kubernetes' restarts and of latency only when some group has them.
fn groups_table(j: &Judgement) -> Markup {
    let with_latency = j.groups.iter().any(|g| !g.beside.is_empty());
    let with_kube = j.groups.iter().any(|g| g.restarts.is_some());
    let with_also = j.groups.iter().any(|g| !g.also.is_empty());
    html! {
        div.scroll { table.figures {
            tr {
                th.l { "group" } th.l { "selector and window" } th { "pods" }
                th { "blocks with data" } th { "samples" } th { (j.metric) }
                th { "against the baseline" } th.l { "verdict" }
                @if with_also { th { "other memory metrics" } }
                @if with_kube { th { "restarts" } th { "OOM-killed pods" } }
                @if with_latency { th { "p50" } th { "p95" } th { "throughput" } }
                th.l { "leak or fragmentation" }
            }
            @for (i, g) in j.groups.iter().enumerate() {
                tr {
                    td.l { span.swatch style=(format!("background:{}", css_color(i))) {} (g.name) }
                    td.l { code { "{" (g.selector) "}" } br; span.small { (g.start) " – " (g.end) } }
                    td { (g.pods) @if g.warmed_pods > 0 { br; span.small { (g.warmed_pods) " started in it" } } }
                    td { (g.blocks_with_data) " of " (g.blocks) }
                    td { (g.samples) }
                    td { (figure(j, g.median)) }
                    td class=(verdict_class(&g.verdict)) { (ratio(g.ratio, g.ci95)) }
                    td.l { (g.says) }
                    @if with_also {
                        td { @for b in &g.also {
                            span.small { (b.name) } br;
                            (b.median.map_or("-".into(), format_bytes)) " " (ratio(b.ratio, b.ci95)) br;
                        } }
                    }
                    @if with_kube {
                        td { (g.restarts.map_or("-".into(), |r| r.to_string())) }
                        td { (g.oom_killed_pods.map_or("-".into(), |r| r.to_string())) }
                    }
                    @if with_latency {
                        td { (latency(g, "p50_seconds")) }
                        td { (latency(g, "p95_seconds")) }
                        td { (latency(g, "requests_per_second")) }
                    }
                    td.l { (g.why.verdict) }
                }
            }
        } }
    }
}

/// The page.
pub fn render(j: &Judgement) -> String {
    let keep = j.recommendation.starts_with("keep ");
    let page: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "memtrial judge: " (j.metric) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "memtrial judge" }
                p.sub {
                    (j.metric) " from Prometheus " code { (j.prometheus) }
                    "; step " (j.step_seconds) " s; blocks of " (format_seconds(j.block_seconds))
                    "; warm-up " (format_seconds(j.warmup_seconds))
                }
                p.small {
                    "Metric: " code { (j.metric) } ", " (j.metric_why) "."
                    @for k in &j.skipped_metrics {
                        br; "Not " code { (k.metric) } ": " (k.why) "."
                    }
                }
                div class=(if keep { "verdict none" } else { "verdict" }) {
                    "Recommendation: " (j.recommendation)
                }
                h2 { "Groups against the baseline" }
                (groups_table(j))
                h2 { "Leak or fragmentation" }
                ul {
                    @for g in &j.groups {
                        li {
                            strong { (g.name) ": " (g.why.verdict) } " — " (g.why.says)
                            @if let Some(p) = &g.arena_pitfall { br; span.flag { (p.says) } }
                        }
                    }
                }
                @if let Some(picture) = chart(j) {
                    h2 { "Over time" }
                    (picture)
                }
                @if !j.notes.is_empty() {
                    h2 { "Notes" }
                    ul { @for n in &j.notes { li { (n) } } }
                }
                h2 { "How it was measured" }
                p.small {
                    "Per pod, the median of each block of " (format_seconds(j.block_seconds))
                    "; a pod that started in the window loses its first "
                    (format_seconds(j.warmup_seconds))
                    " and the value it held then (until its next sample); a group's figure is the median of its pods' blocks; a ratio's 95% interval \
                     comes from 2,000 bootstrap resamples drawing pods with replacement and runs \
                     of neighbouring blocks, the same blocks for groups over the same window. \
                     Leak or fragmentation is judged per pod by a local run's rules on the \
                     exporter's allocator-probe series. See docs/judge.md."
                }
            }
        }
    };
    // Controls and bidirectional characters from a server's labels shown as escapes, as
    // in a trial's report: none reaches a terminal the page is printed on.
    crate::escape::visible_controls(&page.into_string()).into_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::judge::why::GroupWhy;
    use crate::judge::Skipped;

    pub(crate) fn group(
        name: &str,
        selector: &str,
        median: f64,
        ratio: Option<f64>,
    ) -> GroupResult {
        GroupResult {
            name: name.into(),
            selector: selector.into(),
            start: "2026-11-26T00:00:00Z".into(),
            end: "2026-11-27T00:00:00Z".into(),
            pods: 3,
            blocks: 24,
            blocks_with_data: 24,
            samples: 4000,
            warmed_pods: 0,
            median: Some(median),
            per_block: (0..24).map(|k| Some(median + k as f64 * 1e6)).collect(),
            ratio,
            ci95: ratio.map(|r| [r - 0.05, r + 0.05]),
            restarts: None,
            oom_killed_pods: None,
            beside: vec![],
            also: vec![],
            verdict: if ratio.is_some() { "lower" } else { "baseline" }.into(),
            says: "says".into(),
            why: GroupWhy {
                verdict: "no_probe".into(),
                says: "no probe".into(),
                coverage: None,
                pods: vec![],
            },
            arena_pitfall: None,
        }
    }

    /// A selector or name with markup is shown as text, the chart drawn, the
    /// recommendation first.
    #[test]
    fn the_page_escapes_what_prometheus_and_the_user_gave() {
        let j = Judgement {
            prometheus: "http://127.0.0.1:9090".into(),
            metric: "container_memory_working_set_bytes".into(),
            metric_why: "named with --metric".into(),
            skipped_metrics: vec![Skipped {
                metric: "memtrial_group_cgroup_working_set_bytes".into(),
                why: "base's memory cgroups also hold <i>processes</i>".into(),
            }],
            step_seconds: 87,
            block_seconds: 3600.0,
            warmup_seconds: 3600.0,
            groups: vec![
                group("base", "app=\"<script>x</script>\"", 2e9, None),
                group("jemalloc", "app=\"je\"", 1e9, Some(0.5)),
            ],
            recommendation: "jemalloc: 0.50×".into(),
            notes: vec!["a <b>note</b>".into()],
        };
        let page = render(&j);
        assert!(!page.contains("<script>x"), "{page}");
        assert!(page.contains("&lt;script&gt;x"));
        assert!(page.contains("a &lt;b&gt;note"));
        assert!(page.contains(
            "Metric: <code>container_memory_working_set_bytes</code>, named with --metric."
        ));
        assert!(page.contains("also hold &lt;i&gt;processes"));
        assert!(page.contains("<svg"));
        assert!(page.contains("hours since the window"));
        let rec = page.find("Recommendation: jemalloc").unwrap();
        assert!(rec < page.find("<table").unwrap());
    }

    /// A block of a group without data breaks its line, said under the chart.
    #[test]
    fn a_block_without_data_breaks_the_line() {
        let mut base = group("base", "app=\"base\"", 2e9, None);
        for k in 9..12 {
            base.per_block[k] = None;
        }
        let j = Judgement {
            prometheus: "http://127.0.0.1:9090".into(),
            metric: "container_memory_working_set_bytes".into(),
            step_seconds: 87,
            block_seconds: 3600.0,
            warmup_seconds: 3600.0,
            groups: vec![base, group("jemalloc", "app=\"je\"", 1e9, Some(0.5))],
            recommendation: "jemalloc: 0.50×".into(),
            notes: vec![],
            metric_why: String::new(),
            skipped_metrics: vec![],
        };
        let page = render(&j);
        assert!(
            page.contains("each group&#39;s median per block: the line breaks at every gap longer than one block: 1 in 2 series, the longest 4.0 h (base, from 8.5 h to 12.5 h).")
                || page.contains("each group's median per block: the line breaks at every gap longer than one block: 1 in 2 series, the longest 4.0 h (base, from 8.5 h to 12.5 h)."),
            "{page}"
        );
    }
}
