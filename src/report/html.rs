//! One self-contained HTML file: summary and recommendation first, the ratio table,
//! charts, then every detail. No scripts, no fetches: it opens offline and prints.
//! Every user-controlled string goes through maud's escaping.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::charts::{self, Series};
use crate::analysis::recommend::{how_to_apply, HowToApply, Recommendation, Verdict};
use crate::analysis::{Analysis, Figure, VariantSummary};
use crate::record::Experiment;
use crate::units::{format_bytes, format_seconds};

pub(crate) const STYLE: &str = r#"
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f; max-width: 1100px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 0; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #555; margin-top: 4px; } code, pre { font: 13px/1.4 ui-monospace, "SFMono-Regular", Menlo, monospace; }
pre { background: #f6f8fa; padding: 10px 12px; overflow-x: auto; border-radius: 6px; }
.verdict { font-size: 1.15em; background: #eef6ee; border-left: 4px solid #2ca02c; padding: 10px 14px; }
.verdict.none { background: #f4f4f4; border-color: #999; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 13px; } th, td { border: 1px solid #ddd; padding: 4px 6px; text-align: right; vertical-align: top; }
table.figures td { white-space: nowrap; } .scroll { overflow-x: auto; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
.sig-better { color: #1a7f37; font-weight: 600; } .sig-worse { color: #cf222e; font-weight: 600; } .ns { color: #777; }
.flag { color: #cf222e; font-weight: 600; } .swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
figure { margin: 12px 0; } figure svg { max-width: 100%; height: auto; }
.small { font-size: 0.9em; color: #555; }
@media print { body { max-width: none; } h2 { page-break-after: avoid; } figure, table { page-break-inside: avoid; } }
"#;

/// The experiment report's own rules over [`STYLE`] (shared with soak's and judge's pages):
/// nothing scrolls sideways at 1280 px — preformatted text and long words wrap, the figures
/// tables are split narrow enough — and the answer's story and links.
const REPORT_STYLE: &str = r#"
pre { white-space: pre-wrap; overflow-wrap: anywhere; overflow-x: visible; } code { overflow-wrap: anywhere; }
td { overflow-wrap: break-word; } table.figures { width: auto; min-width: 60%; } table.figures td.l { white-space: normal; }
.story { font-size: 1.05em; margin: 10px 0; } nav.more { margin: 10px 0 0; font-size: 0.92em; color: #555; } nav.more a { margin-right: 12px; }
"#;

fn value(f: Figure, v: f64) -> String {
    super::format_value(f, v)
}

/// A chart in the page: the picture, and under it what it leaves out (where its series
/// have no samples).
impl maud::Render for charts::Picture {
    fn render(&self) -> Markup {
        html! {
            figure.chart {
                (PreEscaped(&self.svg))
                @if !self.notes.is_empty() {
                    figcaption.small { @for n in &self.notes { (n) " " } }
                }
            }
        }
    }
}

fn cell(s: &VariantSummary, f: Figure) -> Markup {
    let Some(est) = s.figures.get(&f) else {
        return html! { td.ns { (super::missing_cell(s, f)) } };
    };
    let ratio = s.ratio_to_baseline.get(&f);
    html! {
        td {
            (value(f, est.median))
            br;
            span.small { "[" (value(f, est.ci95[0])) ", " (value(f, est.ci95[1])) "]" }
            br;
            @if s.is_baseline && f.compared() {
                span.ns { "baseline" }
            } @else if let Some(r) = ratio {
                @let better = if f.higher_is_better() { r.value > 1.0 } else { r.value < 1.0 };
                @let class = if !r.significant { "ns" } else if better { "sig-better" } else { "sig-worse" };
                span class=(class) {
                    (format!("{:.2}× [{:.2}, {:.2}]", r.value, r.ci95[0], r.ci95[1]))
                    @if r.significant { " *" }
                }
            }
        }
    }
}

fn tradeoffs(rec: &Recommendation) -> &[String] {
    match &rec.verdict {
        Verdict::Pick { tradeoffs, .. } => tradeoffs,
        _ => &[],
    }
}

fn verdict_block(rec: &Recommendation) -> Markup {
    let pick = matches!(rec.verdict, Verdict::Pick { .. });
    html! {
        div.verdict.none[!pick] { (rec.headline()) }
        @if !tradeoffs(rec).is_empty() {
            ul { @for t in tradeoffs(rec) { li { (t) } } }
        }
    }
}

/// `--html`: the self-contained report with charts.
pub(crate) struct HtmlExporter;

impl<'a> super::Exporter<super::Report<'a>> for HtmlExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        Ok(render(r.experiment, r.analysis, r.recommendation).into_bytes())
    }
}

/// Renders the report. `recommendation` comes from [`crate::analysis::recommend::recommend`].
///
/// The answer first: the verdict, the baseline's story, one picture of every variant's
/// memory against the program's floor and the key figures; then, below, the sections that
/// explain it (leak or fragmentation, memory over time, where it is, inside the workload,
/// load, runs), every figure, and every detail.
pub fn render(e: &Experiment, a: &Analysis, rec: &Recommendation) -> String {
    let rss_chart = charts::memory_over_time(e, a, Series::Rss);
    let pss_chart = charts::memory_over_time(e, a, Series::Pss);
    let peak_chart = charts::distribution(
        e,
        a,
        Figure::PeakRssBytes,
        "Peak RSS of each run (MiB); bar = median",
    );
    let wall_chart = charts::distribution(
        e,
        a,
        Figure::WallSeconds,
        "Wall time of each run (s); bar = median",
    );
    let has_cgroup = e.runs.iter().any(|r| r.cgroup.is_some());
    let apply = match &rec.verdict {
        Verdict::Pick { variant, .. } => {
            how_to_apply(&e.plan, variant).map(|h| (variant.clone(), h))
        }
        _ => None,
    };
    let mut not_measured: Vec<String> = Vec::new();
    if pss_chart.is_none() {
        not_measured.push("PSS: no sample could read smaps_rollup".into());
    }
    if !has_cgroup {
        not_measured.push(
            "cgroup figures (tree peak, OOM kills, throttling): the runs were not in cgroups"
                .into(),
        );
    }
    let why = why_section(e, a);
    let inside = inside_section(e, a);
    let load = load_section(e, a);
    let mut more: Vec<(&str, &str)> = Vec::new();
    if apply.is_some() {
        more.push(("apply", "how to apply it"));
    }
    if !why.0.is_empty() {
        more.push((
            "why",
            "why: leak or fragmentation, the allocator's free memory",
        ));
    }
    more.push(("memory", "memory over time"));
    if !inside.0.is_empty() {
        more.push(("inside", "where the memory is, inside the workload"));
    }
    if !load.0.is_empty() {
        more.push(("load", "load"));
    }
    more.extend([("figures", "every figure"), ("details", "runs and details")]);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(e))
            body {
                (answer_section(e, a, rec, &more))
                (apply_section(&apply))
                (why)
                (memory_section(&rss_chart, &pss_chart))
                (inside)
                (load)
                (distribution_section(&peak_chart, &wall_chart))
                (figures_section(a, rec, has_cgroup))
                (details_table(e))
                (variants_table(e))
                (runs_table(e))
                (not_measured_and_footer(&not_measured))
            }
        }
    };
    // Names, commands and messages come from outside: maud escapes HTML; a control or
    // bidirectional character (ESC, U+202E) is shown as its escape, never kept raw.
    super::escape::visible_controls(&markup.into_string()).into_owned()
}

/// The document head: charset, viewport, title and the inline style sheet.
fn head(e: &Experiment) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { "memtrial experiment " (e.id) }
            style { (PreEscaped(STYLE)) (PreEscaped(REPORT_STYLE)) }
        }
    }
}

/// The top of the page: the title, the command and plan line, the verdict and its
/// trade-offs, the baseline's story, the overview picture, the key figures, and links to
/// the rest.
fn answer_section(
    e: &Experiment,
    a: &Analysis,
    rec: &Recommendation,
    more: &[(&str, &str)],
) -> Markup {
    let columns = super::answer::key_columns(a, rec);
    let driver = super::driver_columns(a);
    html! {
        h1 { "memtrial experiment " (e.id) }
        p.sub { code { (shell_words::join(&e.plan.command)) } }
        p.sub {
            (e.plan.runs) " measured run(s) per variant, " (e.plan.warmup) " warm-up · baseline " b { (a.baseline) }
            " · started " (e.created_at) " · " (e.status.as_str())
        }
        (verdict_block(rec))
        @if let Some(m) = super::knobs::measured_as(e, rec) { p.small { (m) } }
        @if let Some(story) = super::table::story_line(a) {
            p.story { (story) }
        }
        @let problems = super::table::problem_lines(e, a);
        @if !problems.is_empty() {
            p.flag { "Not every run counted:" }
            ul { @for p in &problems { li { (p) } } }
        }
        @if let Some(p) = super::overview::overview(e, a, rec) {
            div #overview { (p) }
        }
        table.figures.key {
            tr {
                th.l { "variant" } th { "runs ok" }
                @for (_, h) in &columns { th { (h) } }
                @for n in &driver { th { (n) } }
            }
            @for (i, s) in a.variants.iter().enumerate() {
                tr {
                    td.l { span.swatch style=(format!("background:{}", charts::css_color(i))) {} (s.name) }
                    td {
                        (s.runs_ok) "/" (s.runs_total)
                        @if !s.clean() { " " span.flag title="not every run finished ok and verified" { "!" } }
                    }
                    @for (f, _) in &columns { (cell(s, *f)) }
                    @for n in &driver { (driver_cell(s, n)) }
                }
            }
        }
        p.small {
            "Median over the runs that finished ok, its 95% bootstrap interval, and the ratio to the baseline's median with its 95% interval. "
            "* = significant: the interval excludes 1 and both sides have at least 3 ok runs."
        }
        nav.more {
            "Below: "
            @for (id, words) in more { a href=(format!("#{id}")) { (words) } }
        }
    }
}

/// "Why": the lines that explain the figures — leak or fragmentation, where the memory is,
/// what each require cost, the allocator's free memory, where the CPU went. Empty when
/// none applies.
fn why_section(e: &Experiment, a: &Analysis) -> Markup {
    let trends = super::table::why_lines(e, a);
    let regions = super::regions::region_lines(e, a);
    let requires = super::requires::require_report(e, a);
    let holes = super::holes::hole_lines(e, a);
    let knobs = super::knobs::knob_lines(e, a);
    let cpu = super::cpu::cpu_lines(e, a);
    if trends.is_empty()
        && knobs.is_empty()
        && regions.is_empty()
        && requires.variants.is_empty()
        && holes.is_empty()
        && cpu.is_empty()
    {
        return html! {};
    }
    html! {
        h2 #why { "Why" }
        @if !trends.is_empty() {
            p { (super::table::WHY_HEADING) ":" }
            ul { @for t in &trends { li { (t) } } }
        }
        @if !regions.is_empty() {
            p { (super::regions::REGIONS_HEADING) ":" }
            ul { @for t in &regions { li { (t) } } }
        }
        @if !requires.variants.is_empty() {
            p { (super::requires::requires_heading(e)) ":" }
            @for v in &requires.variants {
                details.requires { summary { (v.top) } (require_items(&v.items())) }
            }
            ul {
                @for t in requires.variants.iter().filter_map(|v| v.gems.as_ref()) { li { (t) } }
                @for t in &requires.against { li { (t) } }
            }
        }
        @if !holes.is_empty() {
            p { (super::holes::HOLES_HEADING) ":" }
            ul { @for t in &holes { li { (t) } } }
        }
        @if !knobs.is_empty() {
            p { (super::knobs::KNOBS_HEADING) ":" }
            ul { @for t in &knobs { li { (t) } } }
        }
        @if !cpu.is_empty() {
            p { (super::cpu::cpu_heading(e)) ":" }
            ul { @for t in &cpu { li { (t) } } }
        }
    }
}

/// The groups of the full figures table, each narrow enough for the page: memory, speed,
/// the allocator's view, the run's cgroup, the driver's figures.
fn figure_groups(a: &Analysis) -> Vec<(&'static str, Vec<(Figure, &'static str)>)> {
    let columns = super::columns(a);
    let pick = |fs: &[Figure]| -> Vec<(Figure, &'static str)> {
        columns
            .iter()
            .filter(|(f, _)| fs.contains(f))
            .copied()
            .collect()
    };
    let groups = [
        (
            "Memory",
            pick(&[
                Figure::PeakRssBytes,
                Figure::PeakPssBytes,
                Figure::PeakUssBytes,
                Figure::MeanRssBytes,
            ]),
        ),
        (
            "Speed",
            pick(&[
                Figure::WallSeconds,
                Figure::CpuSeconds,
                Figure::ThroughputRps,
                Figure::LatencyP50Ms,
                Figure::LatencyP95Ms,
                Figure::LatencyP99Ms,
            ]),
        ),
        (
            "The allocator's view: the program's floor, and retention at the RSS peak",
            pick(&[
                Figure::PeakLiveBytes,
                Figure::PeakOverFloor,
                Figure::LiveAtPeakBytes,
                Figure::HeldAtPeakBytes,
                Figure::HeldOverLive,
            ]),
        ),
    ];
    groups.into_iter().filter(|(_, c)| !c.is_empty()).collect()
}

/// The "Every figure" section: the per-variant tables by group, their legend, what the
/// sampled figures rest on, and the Pareto front.
fn figures_section(a: &Analysis, rec: &Recommendation, has_cgroup: bool) -> Markup {
    let driver = super::driver_columns(a);
    let row_head = |i: usize, s: &VariantSummary| {
        html! {
            td.l { span.swatch style=(format!("background:{}", charts::css_color(i))) {} (s.name) }
            td {
                (s.runs_ok) "/" (s.runs_total)
                @if !s.clean() { " " span.flag title="not every run finished ok and verified" { "!" } }
            }
        }
    };
    html! {
        h2 #figures { "Every figure" }
        @for (title, columns) in figure_groups(a) {
            h3 { (title) }
            table.figures {
                tr {
                    th.l { "variant" } th { "runs ok" }
                    @if title == "Memory" { th.l { "allocator" } }
                    @for (_, h) in &columns { th { (h) } }
                }
                @for (i, s) in a.variants.iter().enumerate() {
                    tr {
                        (row_head(i, s))
                        @if title == "Memory" { td.l { (s.allocator_detected.as_deref().unwrap_or("—")) } }
                        @for (f, _) in &columns { (cell(s, *f)) }
                    }
                }
            }
        }
        @if has_cgroup {
            h3 { "The run's cgroup" }
            table.figures {
                tr { th.l { "variant" } th { "runs ok" } th { "cgroup peak" } th { "OOM kills" } }
                @for (i, s) in a.variants.iter().enumerate() {
                    tr {
                        (row_head(i, s))
                        (cell(s, Figure::CgroupPeakBytes))
                        td { (s.statuses.get("oom_killed").copied().unwrap_or(0)) " of " (s.runs_total) }
                    }
                }
            }
        }
        @if !driver.is_empty() {
            h3 { "What the driver reported" }
            table.figures {
                tr {
                    th.l { "variant" } th { "runs ok" }
                    @for n in &driver { th { (n) } }
                }
                @for (i, s) in a.variants.iter().enumerate() {
                    tr { (row_head(i, s)) @for n in &driver { (driver_cell(s, n)) } }
                }
            }
        }
        p.small {
            "Median over the runs that finished ok, its 95% bootstrap interval, and the ratio to the baseline's median with its 95% interval. "
            "* = significant: the interval excludes 1 and both sides have at least 3 ok runs."
        }
        @if let Some(legend) = super::multi_process_legend(a) {
            p.small { (legend) }
        }
        @let evidence = super::evidence_lines(a);
        @if !evidence.is_empty() {
            p.small { (super::EVIDENCE_HEADING) ":" }
            ul.small { @for x in &evidence { li { (x) } } }
        }
        p.small {
            "Pareto front (" (rec.axes()) ", variants whose runs all succeeded): "
            @if rec.pareto_front.is_empty() { "none" } @else { (rec.pareto_front.join(", ")) }
            @if !rec.excluded.is_empty() {
                br; "Left out: " (rec.excluded.join("; "))
            }
        }
    }
}

/// A driver figure's cell: median, then the ratio to the baseline (uncoloured: whether more
/// is better is the driver's to say).
fn driver_cell(s: &crate::analysis::VariantSummary, name: &str) -> Markup {
    let Some(d) = s.driver_figures.get(name) else {
        return html! { td { "—" } };
    };
    let top = super::format_driver_value(d.estimate.median, d.unit.as_deref());
    html! {
        td {
            (top)
            br;
            span.small {
                @if s.is_baseline { "baseline" }
                @else if let Some(r) = &d.ratio_to_baseline {
                    (super::ratio_text(r, ""))
                }
                @else { "no ratio" }
            }
        }
    }
}

/// The "Memory over time" section: the RSS chart and, when measured, the PSS chart.
fn memory_section(
    rss_chart: &Option<charts::Picture>,
    pss_chart: &Option<charts::Picture>,
) -> Markup {
    html! {
        section #memory {
            h2 { "Memory over time" }
            @if let Some(p) = rss_chart { (p) } @else { p.ns { "No samples." } }
            @if let Some(p) = pss_chart { (p) }
            p.small { "Every run drawn faint, each variant's median run (by mean RSS) bold, on the same axes." }
        }
    }
}

/// The "Inside the workload" section: the allocator's live and held bytes beside RSS, and
/// the runtimes' own figures, for each variant's median run.
fn inside_section(e: &Experiment, a: &Analysis) -> Markup {
    let allocator = super::inside_charts::allocator_over_time(e, a);
    let runtimes = super::inside_charts::runtime_over_time(e, a);
    let regions = super::inside_charts::regions_over_time(e, a);
    let notes: Vec<String> = {
        let mut n: Vec<String> = e
            .runs
            .iter()
            .flat_map(|r| r.inside.runtimes.iter().filter_map(|v| v.note.clone()))
            .collect();
        n.sort();
        n.dedup();
        n
    };
    let absent: Vec<String> = {
        let mut n: Vec<String> = e
            .runs
            .iter()
            .filter(|r| r.counts())
            .flat_map(|r| {
                r.inside
                    .absent
                    .iter()
                    .map(move |x| format!("{} ({}): {}", x.probe, r.variant, x.reason))
            })
            .collect();
        n.sort();
        n.dedup();
        n
    };
    let probed = !allocator.is_empty() || !runtimes.is_empty() || !absent.is_empty();
    if regions.is_empty() && !probed {
        return html! {};
    }
    html! {
        section #inside {
        @if !regions.is_empty() {
            h2 { "Where the memory is, over time" }
            @for (name, p) in &regions { div id=(format!("regions-{name}")) { (p) } }
            p.small { "Each variant's median run: every /proc/PID/smaps read memtrial made (at each 5% rise of RSS while a read is cheap, where its growth paused, and every 5 s between within a CPU budget), its resident bytes by kind of mapping stacked in a bar at the moment of the read — nothing is drawn between two reads; the kernel's RSS sampled as a line." }
        }
        @if probed {
            h2 { "Inside the workload" }
            @for (name, p) in &allocator { div id=(format!("allocator-{name}")) { (p) } }
            @if !allocator.is_empty() {
                p.small { "From memtrial's probe library preloaded after the variant's allocator: live = allocated and not freed; held = what the allocator holds from the system for the heap. Held far above live is fragmentation or retention, not a leak; live still growing under steady load is a leak." }
            }
            @for (_, p) in &runtimes { (p) }
            @for n in &notes { p.small { (n) } }
            @if !absent.is_empty() {
                p { "Probes without data:" }
                ul { @for n in &absent { li { (n) } } }
            }
        }
        }
    }
}

/// The "Load" section of a server experiment: throughput, latency and percentile charts.
fn load_section(e: &Experiment, a: &Analysis) -> Markup {
    html! {
        @if a.server {
            h2 #load { "Load" }
            @if let Some(p) = charts::load_over_time(e, a, charts::LoadSeries::Throughput) { (p) }
            @if let Some(p) = charts::load_over_time(e, a, charts::LoadSeries::Latency) { (p) }
            @if let Some(svg) = charts::latency_percentiles(e, a) { figure.chart { (PreEscaped(svg)) } }
            p.small { "Per-second series on the same clock as the memory charts; latency from HDR histograms (in an open loop, from the intended send time)." }
        }
    }
}

/// The "Distribution over runs" section: peak RSS and wall time of each run.
fn distribution_section(peak_chart: &Option<String>, wall_chart: &Option<String>) -> Markup {
    html! {
        h2 { "Distribution over runs" }
        @if let Some(svg) = peak_chart { figure.chart { (PreEscaped(svg)) } }
        @if let Some(svg) = wall_chart { figure.chart { (PreEscaped(svg)) } }
    }
}

/// The "How to apply" section for a picked variant: environment, Dockerfile, Kubernetes, check.
fn apply_section(apply: &Option<(String, HowToApply)>) -> Markup {
    html! {
        @if let Some((variant, h)) = apply {
            h2 #apply { "How to apply " (variant) }
            p { "Environment:" }
            pre { @for (k, v) in &h.env { (k) "=" (v) "\n" } }
            p { "Dockerfile:" }
            pre { (h.dockerfile) }
            p { "Kubernetes container:" }
            pre { (h.kubernetes) }
            p { "Check in production that it took effect:" }
            pre { (h.check) }
        }
    }
}

/// The "Details" section: host, command, sampling, seed and notes.
fn details_table(e: &Experiment) -> Markup {
    html! {
        h2 #details { "Details" }
        table {
            tr { th.l { "host" } td.l { (e.host.hostname) ", " (e.host.cpus) " CPUs, " (format_bytes(e.host.memory_bytes as f64)) } }
            tr { th.l { "kernel" } td.l { (e.host.kernel) } }
            tr { th.l { "glibc" } td.l { (e.host.glibc) } }
            tr { th.l { "command" } td.l { code { (shell_words::join(&e.plan.command)) } } }
            tr { th.l { "working directory" } td.l { code { (e.plan.workdir.display().to_string()) } } }
            tr { th.l { "sampling" } td.l { "every " (e.plan.interval_ms) " ms" } }
            tr { th.l { "seed" } td.l { (e.plan.seed) } }
            @for n in &e.notes { tr { th.l { "note" } td.l { (n) } } }
        }
    }
}

/// The "Variants" table: each variant's environment, preload and verification.
fn variants_table(e: &Experiment) -> Markup {
    html! {
        h3 { "Variants" }
        table {
            tr { th.l { "variant" } th.l { "environment and preload" } th.l { "how it was verified (first measured run)" } }
            @for v in &e.plan.variants {
                tr {
                    td.l { (v.name) }
                    td.l { code { (v.describe()) } @if let Some(p) = &v.preload { br; span.small { (p.display().to_string()) } } }
                    td.l {
                        @if let Some(r) = e.runs.iter().find(|r| r.variant == v.name && !r.warmup) {
                            (r.verification.as_str()) ": " (r.verification_detail)
                        }
                    }
                }
            }
        }
    }
}

/// The "Runs" table: one row per run with its status and figures.
fn runs_table(e: &Experiment) -> Markup {
    html! {
        h3 { "Runs" }
        table {
            tr { th { "#" } th.l { "variant" } th.l { "status" } th { "wall" } th { "CPU" } th { "peak RSS" } th.l { "source" } th { "mean RSS" } th { "peak PSS" } th { "peak USS" } th { "threads" } th.l { "allocator" } }
            @for (i, r) in e.runs.iter().enumerate() {
                tr {
                    td { (e.seqs.get(i).copied().unwrap_or(i as u32) + 1) }
                    td.l { (r.variant) @if r.warmup { " (warm-up)" } }
                    td class=(if r.status == crate::record::RunStatus::Ok { "l" } else { "l flag" }) {
                        (r.status.as_str())
                        @if let Some(m) = &r.message { br; span.small { (m) } }
                    }
                    td { (format_seconds(r.wall_seconds)) }
                    td { (format_seconds(r.cpu_user_seconds + r.cpu_sys_seconds)) }
                    td { (format_bytes(r.peak_rss_bytes as f64)) }
                    td.l { (r.peak_rss_source.as_str()) }
                    (run_cell(r, Figure::MeanRssBytes))
                    (run_cell(r, Figure::PeakPssBytes))
                    (run_cell(r, Figure::PeakUssBytes))
                    td { (r.threads_peak) }
                    td.l { (r.allocator_detected) }
                }
            }
        }
    }
}

/// One run's figure: its value where it meets its rule, "absent" (with why, on hover)
/// where it does not, "—" where it was not measured.
fn run_cell(r: &crate::record::RunRecord, f: Figure) -> Markup {
    use crate::record::evidence::Standing;
    let Some(v) = f.of(r) else {
        return html! { td { "—" } };
    };
    match crate::analysis::evidence::of(f, r).map(|e| e.standing) {
        Some(Standing::Absent { reason, remedy }) => html! {
            td.ns title=(format!("{reason}; {remedy} would give it")) { (super::ABSENT) }
        },
        _ => html! { td { (format_bytes(v)) } },
    }
}

/// The "Not measured" list, when anything was not, and the footer.
fn not_measured_and_footer(not_measured: &[String]) -> Markup {
    html! {
        @if !not_measured.is_empty() {
            h3 { "Not measured" }
            ul { @for n in not_measured { li { (n) } } }
        }
        p.small { "Made by memtrial " (env!("CARGO_PKG_VERSION")) ". How the figures are made: docs/methodology.md in the memtrial repository." }
    }
}

/// The require tree as nested lists, each require with what it required folded under it.
fn require_items(items: &[super::requires::Item]) -> Markup {
    html! {
        ul {
            @for i in items {
                li {
                    @if i.children.is_empty() {
                        (i.label)
                    } @else {
                        details { summary { (i.label) } (require_items(&i.children)) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::analysis::recommend::recommend;
    use crate::report::fixture;

    /// The page opens with the answer — the verdict, the baseline's story, the overview
    /// picture, the key figures — and the sections that explain it come after; nothing in
    /// it is laid out to scroll sideways.
    #[test]
    fn the_answer_opens_the_page() {
        let e = fixture::experiment();
        let a = analyse(&e);
        let page = render(&e, &a, &recommend(&a));
        let at = |needle: &str| {
            page.find(needle)
                .unwrap_or_else(|| panic!("{needle} is in the page"))
        };
        let order = [
            r#"<div class="verdict">Use jemalloc"#,
            r#"<p class="story">glibc peaked at "#,
            r#"<div id="overview">"#,
            r#"<table class="figures key">"#,
            r##"<a href="#why">"##,
            r#"<h2 id="apply">"#,
            r#"<h2 id="why">"#,
            r#"<section id="memory">"#,
            r#"<h2 id="figures">"#,
            r#"<h2 id="details">"#,
        ];
        for w in order.windows(2) {
            assert!(at(w[0]) < at(w[1]), "{} before {}", w[0], w[1]);
        }
        // The key table has the key columns only; every figure is further down.
        let key = &page[at(r#"<table class="figures key">"#)..];
        let key = &key[..key.find("</table>").unwrap_or(key.len())];
        assert!(key.contains("<th>peak RSS</th>") && key.contains("<th>wall time</th>"));
        assert!(!key.contains("peak live"), "{key}");
        assert!(
            page.contains(">peak live</th>") && page.contains(">peak/floor</th>"),
            "every figure is further down"
        );
        assert!(
            !page.contains(r#"class="scroll""#),
            "no box is made to scroll sideways"
        );
    }
}
