//! A stored soak, summarised: per variant its memory (RSS, working set, PSS), latency
//! (p50, p95), throughput, errors and CPU as ratios to the baseline over the counted
//! windows, with intervals; the leak-or-fragmentation verdict over its last start; the
//! recommendation; the terminal table, the JSON and the HTML page with the charts.

use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde::Serialize;

use super::decide::{self, compare, counted, Figure, Ratio, Standing};
use crate::analysis::why::{steady_why, Judged, Why};
use crate::record::soak::{SoakEvent, SoakHead, SoakPoint, SoakStatus, SoakWindow};
use crate::store::{Store, StoreError};
use crate::units::format_bytes;

/// The JSON's schema name and version.
pub const SCHEMA: &str = "memtrial-soak/1";

#[derive(Debug, Clone, Serialize)]
pub struct SoakSummary {
    pub schema: &'static str,
    pub id: i64,
    pub status: SoakStatus,
    pub stop_reason: Option<String>,
    pub created_at: String,
    pub command: Vec<String>,
    pub baseline: String,
    pub window_seconds: f64,
    pub warmup_windows: u32,
    pub duration_seconds: f64,
    /// Soak seconds measured so far (the last segment's end).
    pub measured_until: f64,
    /// Spans nobody measured (memtrial was down), `(from, to)` soak seconds.
    pub gaps: Vec<(f64, f64)>,
    pub variants: Vec<VariantSummary>,
    pub recommendation: String,
    pub events: Vec<SoakEvent>,
    /// The until-decided rule's standing per variant, when the soak has the rule.
    pub rule: Option<crate::record::soak::DecideRule>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantSummary {
    pub name: String,
    pub windows: usize,
    pub windows_counted: usize,
    pub rss: Option<Ratio>,
    pub working_set: Option<Ratio>,
    pub pss: Option<Ratio>,
    pub p50_ms: Option<Ratio>,
    pub p95_ms: Option<Ratio>,
    pub throughput_rps: Option<Ratio>,
    pub cpu_seconds: Option<Ratio>,
    pub requests: u64,
    /// Requests the schedule owed this instance (open loop).
    pub due: Option<u64>,
    pub errors: u64,
    /// Leak or fragmentation over the counted windows of the last start.
    pub(crate) why: Option<Why>,
    pub standing: Option<Standing>,
    /// When its instance went down and how (once per start it went down in); its windows
    /// from then on are left out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub down: Vec<Down>,
}

/// An instance that went down: soak time and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct Down {
    pub t: f64,
    pub why: String,
}

/// Reads soak `id` and summarises it.
pub fn summarise(store: &Store, head: &SoakHead) -> Result<SoakSummary, StoreError> {
    let id = head.id;
    let s = &head.settings;
    let windows = store.soak_windows(id)?;
    let segments = store.soak_segments(id)?;
    let gaps = segments
        .windows(2)
        .map(|p| (p[0].to_t, p[1].from_t))
        .collect();
    let base = s.plan.baseline.clone();
    let events = store.soak_events(id)?;
    let mut variants = Vec::new();
    for v in &s.plan.variants {
        let mine: Vec<&SoakWindow> = windows.iter().filter(|w| w.variant == v.name).collect();
        let r = |f: Figure| compare(&windows, s.window_seconds, &v.name, &base, f, 11);
        let last_seg = mine.iter().map(|w| w.segment).max();
        let span: Vec<(f64, f64)> = mine
            .iter()
            .filter(|w| Some(w.segment) == last_seg && counted(w, s.window_seconds))
            .map(|w| (w.from_t, w.to_t))
            .collect();
        let why = match (span.first(), span.last()) {
            (Some(a), Some(b)) => {
                let pts = store.soak_points(id, &v.name)?;
                why_over(&pts, a.0, b.1)
            }
            _ => None,
        };
        let standing = s
            .until_decided
            .filter(|_| v.name != base)
            .map(|rule| decide::decided(&windows, s.window_seconds, &v.name, &base, &rule));
        let due: Option<u64> = mine.iter().map(|w| w.figures.due).sum();
        variants.push(VariantSummary {
            name: v.name.clone(),
            windows: mine.len(),
            windows_counted: mine.iter().filter(|w| counted(w, s.window_seconds)).count(),
            rss: r(Figure::Rss),
            working_set: r(Figure::WorkingSet),
            pss: r(Figure::Pss),
            p50_ms: r(Figure::P50),
            p95_ms: r(Figure::P95),
            throughput_rps: r(Figure::Throughput),
            cpu_seconds: r(Figure::CpuSeconds),
            requests: mine.iter().map(|w| w.figures.requests).sum(),
            due,
            errors: mine.iter().map(|w| w.figures.errors).sum(),
            why,
            standing,
            down: events
                .iter()
                .filter(|e| e.variant.as_deref() == Some(v.name.as_str()))
                .filter_map(|e| {
                    Some(Down {
                        t: e.t,
                        why: e.down_why()?.to_string(),
                    })
                })
                .collect(),
        });
    }
    // Every variant saw the same requests at the same moments: live bytes that grow under
    // one while they stay flat under another are that allocator's count, not a leak.
    let mut whys: Vec<(&str, &mut Option<Why>)> = variants
        .iter_mut()
        .map(|v| (v.name.as_str(), &mut v.why))
        .collect();
    crate::analysis::why::across_variants(&mut whys);
    let margin = s.until_decided.unwrap_or_default().margin;
    let recommendation = recommend(&variants, &base, margin);
    Ok(SoakSummary {
        schema: SCHEMA,
        id,
        status: head.status,
        stop_reason: head.stop_reason.clone(),
        created_at: head.created_at.clone(),
        command: s.plan.command.clone(),
        baseline: base,
        window_seconds: s.window_seconds,
        warmup_windows: s.warmup_windows,
        duration_seconds: s.duration_seconds,
        measured_until: segments.iter().map(|g| g.to_t).fold(0.0, f64::max),
        gaps,
        variants,
        recommendation,
        events,
        rule: s.until_decided,
    })
}

/// The verdict over `[from, to]` from the stored series.
fn why_over(points: &[SoakPoint], from: f64, to: f64) -> Option<Why> {
    let inside: Vec<&SoakPoint> = points.iter().filter(|p| p.t >= from && p.t <= to).collect();
    let rss: Vec<(f64, f64)> = inside.iter().filter_map(|p| Some((p.t, p.rss?))).collect();
    if rss.len() < 3 {
        return None;
    }
    let live: Vec<(f64, f64)> = inside.iter().filter_map(|p| Some((p.t, p.live?))).collect();
    let held: Vec<(f64, f64)> = inside
        .iter()
        .filter(|p| p.live.is_some())
        .filter_map(|p| Some((p.t, p.held?)))
        .collect();
    let held = (held.len() == live.len()).then_some(held);
    Some(steady_why(&live, held.as_deref(), &rss, to - from))
}

/// The leanest variant whose RSS is lower than the baseline's by more than `margin` (the
/// whole interval below `1 - margin`: a difference that matters, not only one that is
/// there) and whose p95 is not significantly higher; else the baseline, with why.
fn recommend(variants: &[VariantSummary], base: &str, margin: f64) -> String {
    let mut best: Option<&VariantSummary> = None;
    for v in variants.iter().filter(|v| v.name != base) {
        let Some(r) = &v.rss else { continue };
        let lower = r.ci.is_some_and(|(_, hi)| hi < 1.0 - margin);
        let slower = v
            .p95_ms
            .as_ref()
            .is_some_and(|p| p.ci.is_some_and(|(lo, _)| lo > 1.0));
        if lower
            && !slower
            && best.is_none_or(|b| b.rss.as_ref().is_some_and(|br| r.ratio < br.ratio))
        {
            best = Some(v);
        }
    }
    match best {
        Some(v) => {
            let r = v.rss.as_ref().expect("chosen for its RSS");
            let (lo, hi) = r.ci.unwrap_or((r.ratio, r.ratio));
            let mut s = format!(
                "{}: mean RSS {:.2}× [{lo:.2}, {hi:.2}] of {base}'s over {} window(s) of the same traffic",
                v.name, r.ratio, r.windows
            );
            if let Some(p) = &v.p95_ms {
                s += &format!(", p95 {:.2}×", p.ratio);
            }
            let base_leaks = variants
                .iter()
                .find(|b| b.name == base)
                .and_then(|b| b.why.as_ref())
                .is_some_and(|w| w.name() == "leak");
            if let Some(w) = v.why.as_ref().filter(|_| !base_leaks) {
                if w.name() == "leak" {
                    s += &format!(
                        "; but its own probe says leak: {}",
                        w.sentence_for(Judged::Soak)
                    );
                }
            }
            s
        }
        None => {
            let any = variants
                .iter()
                .filter(|v| v.name != base)
                .any(|v| v.rss.as_ref().is_some_and(|r| r.ci.is_some()));
            if any {
                format!(
                    "keep {base}: no variant's mean RSS is lower by more than {:.0}% (its whole interval) without a significantly higher p95",
                    margin * 100.0
                )
            } else {
                "none yet: too few measured windows for an interval (at least 3 after the warm-up)"
                    .into()
            }
        }
    }
}

fn ratio_text(r: &Option<Ratio>, bytes: bool, is_base: bool) -> String {
    let Some(r) = r else { return "-".into() };
    let v = if bytes {
        format_bytes(r.variant)
    } else {
        format!("{:.2}", r.variant)
    };
    if is_base {
        return v;
    }
    match r.ci {
        Some((lo, hi)) => format!("{v} {:.2}× [{lo:.2}, {hi:.2}]", r.ratio),
        None => format!("{v} {:.2}×", r.ratio),
    }
}

/// The variants' rows of the terminal table: each figure beside the baseline's.
fn variants_table(s: &SoakSummary) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "variant",
        "windows",
        "mean RSS",
        "working set",
        "PSS",
        "p50 ms",
        "p95 ms",
        "req/s",
        "errors",
    ]);
    for v in &s.variants {
        let b = v.name == s.baseline;
        let errors = match v.due {
            Some(d) if d > v.requests + v.requests / 100 => {
                format!("{} ({} of {} due done)", v.errors, v.requests, d)
            }
            _ => v.errors.to_string(),
        };
        t.add_row(vec![
            if b {
                format!("{} (baseline)", v.name)
            } else {
                v.name.clone()
            },
            format!("{}/{}", v.windows_counted, v.windows),
            ratio_text(&v.rss, true, b),
            ratio_text(&v.working_set, true, b),
            ratio_text(&v.pss, true, b),
            ratio_text(&v.p50_ms, false, b),
            ratio_text(&v.p95_ms, false, b),
            ratio_text(&v.throughput_rps, false, b),
            errors,
        ]);
    }
    t.to_string()
}

/// The terminal table: Heroku's, one row per variant.
pub fn table(s: &SoakSummary) -> String {
    let mut out = String::new();
    out += &format!(
        "soak {}: {} — {}\n",
        s.id,
        s.status.as_str(),
        s.stop_reason.as_deref().unwrap_or("running")
    );
    out += &format!(
        "{} measured of {}, windows of {} ({} warm-up after each start), the same requests to every variant; ratios to {} over the windows both measured, 95% intervals (moving-block bootstrap over windows)\n",
        super::clock(s.measured_until),
        super::clock(s.duration_seconds),
        super::clock(s.window_seconds),
        s.warmup_windows,
        s.baseline
    );
    let down: Vec<String> = s
        .variants
        .iter()
        .flat_map(|v| {
            v.down
                .iter()
                .map(|d| format!("{} at {} ({})", v.name, super::clock(d.t), d.why))
        })
        .collect();
    if !down.is_empty() {
        out += &format!(
            "down: {}; each one's windows from then on are left out\n",
            down.join(", ")
        );
    }
    for (a, b) in &s.gaps {
        out += &format!(
            "gap: nothing measured from {} to {} (memtrial was not running)\n",
            super::clock(*a),
            super::clock(*b)
        );
    }
    out += &variants_table(s);
    out.push('\n');
    for v in &s.variants {
        if let Some(w) = &v.why {
            out += &format!(
                "{}: {}: {}\n",
                v.name,
                w.name(),
                w.sentence_for(Judged::Soak)
            );
        }
        if let Some(st) = v.standing {
            let words = match st {
                Standing::Differs => "decided: differs from the baseline beyond the margin",
                Standing::Same => "decided: within the margin of the baseline",
                Standing::Open => "not decided yet",
            };
            out += &format!("{}: {words}\n", v.name);
        }
    }
    for e in &s.events {
        out += &format!("event at {}: {}\n", super::clock(e.t), e.text);
    }
    out += &format!("recommendation: {}\n", s.recommendation);
    out
}

/// The self-contained HTML page: the table, the verdicts, and every variant's memory and
/// p95 over the soak on one time axis, each line broken where its samples are missing (a
/// restart, memtrial down). `sample_seconds`: how often each instance's memory was sampled.
/// `refresh`: reload itself (a soak still running).
pub fn html(
    s: &SoakSummary,
    series: &[(String, Vec<SoakPoint>)],
    windows: &[SoakWindow],
    sample_seconds: f64,
    refresh: Option<u32>,
) -> String {
    use crate::report::charts::{named_lines, Named, NamedChart, JOIN_INTERVALS};
    // A point of a coarser tier stands for the `n` samples it merged: a line joins it to a
    // neighbour at most twice that stretch away (a restart, memtrial down, breaks it).
    let mem: Vec<Named> = series
        .iter()
        .map(|(n, pts)| Named {
            name: n.clone(),
            points: pts
                .iter()
                .filter_map(|p| {
                    let reach = JOIN_INTERVALS * f64::from(p.n.max(1)) * sample_seconds / 60.0;
                    Some((p.t / 60.0, p.rss? / 1048576.0, reach))
                })
                .collect(),
        })
        .collect();
    // One point per window: a window without a p95 breaks the line.
    let p95: Vec<Named> = s
        .variants
        .iter()
        .map(|v| Named {
            name: v.name.clone(),
            points: windows
                .iter()
                .filter(|w| w.variant == v.name)
                .filter_map(|w| {
                    let reach = 1.5 * s.window_seconds / 60.0;
                    Some((w.to_t / 60.0, w.figures.p95_ms?, reach))
                })
                .collect(),
        })
        .collect();
    let minutes = |x: f64| super::clock(x * 60.0);
    let mem_what = format!(
        "resident memory, sampled every {} (older stretches as means over 10 s, then 1 min)",
        crate::units::format_seconds(sample_seconds)
    );
    let mem_chart = named_lines(
        &NamedChart {
            title: "Resident memory of each variant (sum over its processes)",
            x_desc: "minutes into the soak",
            y_desc: "MiB",
            what: &mem_what,
            limit: "twice the stretch a point stands for",
            format: &minutes,
        },
        &mem,
    );
    let p95_chart = named_lines(
        &NamedChart {
            title: "p95 latency per window",
            x_desc: "minutes into the soak (window end)",
            y_desc: "ms",
            what: "p95 latency, one point per window",
            limit: "one window",
            format: &minutes,
        },
        &p95,
    );
    let page: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(r) = refresh { meta http-equiv="refresh" content=(r); }
                title { "memtrial soak " (s.id) }
                style { (PreEscaped(crate::report::html::STYLE)) }
            }
            body {
                h1 { "memtrial soak " (s.id) ": " (s.status.as_str()) }
                p.recommendation { strong { "Recommendation: " } (s.recommendation) }
                p { (s.stop_reason.clone().unwrap_or_default()) }
                pre { (table(s)) }
                @for v in &s.variants {
                    @for d in &v.down {
                        p.warn { "Down: the " (v.name) " instance at " (super::clock(d.t)) " (" (d.why) "); its windows from then on are left out, and its lines end there." }
                    }
                }
                @for (a, b) in &s.gaps {
                    p.warn { "Gap: nothing measured from " (super::clock(*a)) " to " (super::clock(*b)) "; the instances were restarted, so the lines start again from a fresh process." }
                }
                @if let Some(c) = &mem_chart { (c) }
                @if let Some(c) = &p95_chart { (c) }
            }
        }
    };
    page.into_string()
}
