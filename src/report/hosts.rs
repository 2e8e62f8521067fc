//! `memtrial report --by host`: one block per host, each variant against the baseline
//! on the same host, and what differs between the hosts.

use crate::analysis::hosts::{by_host, difference_sentence, ByHost, HostFact};
use crate::record::Experiment;
use crate::units::format_bytes;

use super::escape::terminal;

/// The title of a host's block: its facts.
pub(crate) fn host_title(label: &str, h: &crate::linux::host::HostInfo, runs: usize) -> String {
    let mut facts = vec![
        HostFact::Cpus.value(h),
        HostFact::CpuQuota.value(h),
        HostFact::MemoryLimit.value(h),
    ];
    if h.container
        .as_ref()
        .and_then(|c| c.cpuset.as_ref())
        .is_some()
    {
        facts.push(HostFact::Cpuset.value(h));
    }
    facts.push(format!("{} RAM", format_bytes(h.memory_bytes as f64)));
    facts.push(HostFact::Kernel.value(h));
    facts.push(HostFact::Glibc.value(h));
    facts.push(format!("{runs} run(s)"));
    format!(
        "host {} · {}",
        terminal(label),
        terminal(&facts.join(" · "))
    )
}

/// The per-host report of an experiment.
pub fn render(e: &Experiment, color: bool) -> String {
    render_groups(&by_host(e), color)
}

/// The per-host report from its analysis.
pub(crate) fn render_groups(b: &ByHost, color: bool) -> String {
    let mut out = format!(
        "{} host(s); each variant is compared with the baseline on the same host.\n",
        b.groups.len()
    );
    if let Some(s) = difference_sentence(b) {
        out.push_str(&terminal(&s));
        out.push('\n');
    }
    for g in &b.groups {
        let title = host_title(&g.label, &g.host, g.experiment.runs.len());
        out.push_str(&format!("\n── {title} ──\n"));
        if g.experiment.runs.iter().all(|r| r.warmup) {
            out.push_str("no measured runs on this host\n");
            continue;
        }
        out.push_str(&super::table::render(&g.experiment, &g.analysis, color));
    }
    out
}

/// `report --by host --markdown`: the per-host summaries, one section per host.
pub(crate) fn render_markdown(e: &Experiment) -> String {
    use super::escape::markdown_text as md;
    let b = by_host(e);
    let mut out = format!(
        "### memtrial per host: {} host(s), each variant against the baseline on the same host\n\n",
        b.groups.len()
    );
    if let Some(s) = difference_sentence(&b) {
        out.push_str(&format!("**{}**\n\n", md(&s)));
    }
    for g in &b.groups {
        out.push_str(&format!(
            "#### {}\n\n",
            md(&host_title(&g.label, &g.host, g.experiment.runs.len()))
        ));
        let rec = crate::analysis::recommend::recommend(&g.analysis);
        out.push_str(&super::markdown::render(&g.experiment, &g.analysis, &rec));
        out.push('\n');
    }
    out
}

/// A report in `format`, split by host where the format has a per-host form (the table,
/// Markdown, JSON); the others list every run with its host already.
pub fn serialize(
    format: super::ExportType,
    report: &super::Report<'_>,
) -> Result<Vec<u8>, super::ExportError> {
    use super::ExportType;
    Ok(match format {
        // Per host, every section: `--by host` is already the detail.
        ExportType::Table { color, .. } => render(report.experiment, color).into_bytes(),
        ExportType::Markdown => render_markdown(report.experiment).into_bytes(),
        ExportType::Json => super::json::render_by_host(report.experiment)?,
        ExportType::Csv | ExportType::SamplesCsv | ExportType::Html => format.serialize(report)?,
    })
}

/// The warning of a pooled report whose runs come from several hosts; `None` for one.
pub fn pooled_warning(e: &Experiment) -> Option<String> {
    if !e.several_hosts() {
        return None;
    }
    let names = crate::analysis::hosts::labels(&e.hosts).join(", ");
    Some(format!(
        "warning: the runs come from {} hosts ({}) and are pooled here; `memtrial report --by host {}` compares each variant with the baseline on the same host",
        e.hosts.len(),
        terminal(&names),
        e.id
    ))
}
