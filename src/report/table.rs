//! The terminal table: rows are variants, columns are figures as medians and as
//! ratios to the baseline with 95% intervals.

use comfy_table::{presets, Attribute, Cell, CellAlignment, Color, ContentArrangement, Table};

use crate::analysis::{Analysis, Figure, VariantSummary};
use crate::record::Experiment;

use super::escape::terminal;

fn value(f: Figure, v: f64) -> String {
    super::format_value(f, v)
}

fn figure_cell(s: &VariantSummary, f: Figure, color: bool) -> Cell {
    let Some(est) = s.figures.get(&f) else {
        return Cell::new(super::missing_cell(s, f)).set_alignment(CellAlignment::Right);
    };
    let top = value(f, est.median);
    if !f.compared() {
        // Taken at each variant's own moment, or the program's: no ratio (see `Figure::compared`).
        return Cell::new(top).set_alignment(CellAlignment::Right);
    }
    if s.is_baseline {
        return Cell::new(format!("{top}\nbaseline")).set_alignment(CellAlignment::Right);
    }
    let Some(r) = s.ratio_to_baseline.get(&f) else {
        return Cell::new(format!("{top}\nno ratio")).set_alignment(CellAlignment::Right);
    };
    let mark = if r.significant { "*" } else { " " };
    let text = format!(
        "{top}\n{:.2}× [{:.2}, {:.2}]{mark}",
        r.value, r.ci95[0], r.ci95[1]
    );
    let mut cell = Cell::new(text).set_alignment(CellAlignment::Right);
    if color {
        let better = if f.higher_is_better() {
            r.value > 1.0
        } else {
            r.value < 1.0
        };
        cell = if !r.significant {
            cell.add_attribute(Attribute::Dim)
        } else if better {
            cell.fg(Color::Green)
        } else {
            cell.fg(Color::Red)
        };
    }
    cell
}

/// A driver figure's cell: median, then the ratio to the baseline (no colour: whether
/// more is better is the driver's to say, not memtrial's).
fn driver_cell(s: &VariantSummary, name: &str) -> Cell {
    let Some(d) = s.driver_figures.get(name) else {
        return Cell::new("—").set_alignment(CellAlignment::Right);
    };
    let top = terminal(&super::format_driver_value(
        d.estimate.median,
        d.unit.as_deref(),
    ));
    let bottom = match (&d.ratio_to_baseline, s.is_baseline) {
        (_, true) => "baseline".to_string(),
        (Some(r), false) => super::ratio_text(r, " "),
        (None, false) => "no ratio".to_string(),
    };
    Cell::new(format!("{top}\n{bottom}")).set_alignment(CellAlignment::Right)
}

/// The terminal table and the recommendation's headline under it.
pub(crate) struct TableExporter {
    pub color: bool,
}

impl<'a> super::Exporter<super::Report<'a>> for TableExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        let table = render(r.experiment, r.analysis, self.color);
        let mut out = format!("{table}\n{}\n", terminal(&r.recommendation.headline()));
        if let Some(m) = super::knobs::measured_as(r.experiment, r.recommendation) {
            out.push_str(&format!("  {}\n", terminal(&m)));
        }
        Ok(out.into_bytes())
    }
}

/// Renders the summary table and the notes under it.
pub fn render(e: &Experiment, a: &Analysis, color: bool) -> String {
    let mut out = format!(
        "experiment {} · {} · {} run(s) per variant · baseline {}\n",
        e.id,
        shell_line(&e.plan.command),
        e.plan.runs,
        terminal(&a.baseline)
    );
    out.push_str(&summary_table(a, color).to_string());
    out.push('\n');
    out.push_str(
        "medians over the runs that finished ok; ratio to the baseline's median with a 95% bootstrap interval;\n\
         * = significant (the interval excludes 1, at least 3 ok runs on both sides).\n\
         peak RSS: a kernel high-water mark (wait4 ru_maxrss or VmHWM); for several processes at once, the sampled tree sum if larger.\n",
    );
    if let Some(legend) = super::multi_process_legend(a) {
        out.push_str(&legend);
        out.push('\n');
    }
    section(&mut out, super::EVIDENCE_HEADING, super::evidence_lines(a));
    section(&mut out, WHY_HEADING, why_lines(e, a));
    section(
        &mut out,
        super::regions::REGIONS_HEADING,
        super::regions::region_lines(e, a),
    );
    section(
        &mut out,
        &super::requires::requires_heading(e),
        super::requires::require_lines(e, a),
    );
    section(
        &mut out,
        super::holes::HOLES_HEADING,
        super::holes::hole_lines(e, a),
    );
    section(
        &mut out,
        super::knobs::KNOBS_HEADING,
        super::knobs::knob_lines(e, a),
    );
    section(
        &mut out,
        &super::cpu::cpu_heading(e),
        super::cpu::cpu_lines(e, a),
    );
    section(
        &mut out,
        "runtime figures (medians over ok runs of the last value each run reported)",
        runtime_lines(e, a),
    );
    section(&mut out, "! not every run counted", problem_lines(e, a));
    out
}

/// The table: a row per variant, its runs, allocator, figures and the driver's columns.
fn summary_table(a: &Analysis, color: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    if !color {
        t.force_no_tty();
    } else {
        t.enforce_styling();
    }
    let mut header = vec![
        Cell::new("variant"),
        Cell::new("runs ok"),
        Cell::new("allocator"),
    ];
    let columns = super::columns(a);
    header.extend(columns.iter().map(|(_, h)| Cell::new(*h)));
    let driver = super::driver_columns(a);
    header.extend(driver.iter().map(|n| Cell::new(terminal(n))));
    t.set_header(header);
    for s in &a.variants {
        let flag = if s.clean() { "" } else { " !" };
        let mut row = vec![
            Cell::new(terminal(&s.name)),
            Cell::new(format!("{}/{}{flag}", s.runs_ok, s.runs_total)),
            Cell::new(terminal(s.allocator_detected.as_deref().unwrap_or("—"))),
        ];
        row.extend(columns.iter().map(|(f, _)| figure_cell(s, *f, color)));
        row.extend(driver.iter().map(|n| driver_cell(s, n)));
        t.add_row(row);
    }
    t
}

/// A section under the table: a blank line, `heading:`, then each line indented (nothing
/// when there are no lines).
fn section<S: AsRef<str>>(out: &mut String, heading: &str, lines: Vec<S>) {
    if lines.is_empty() {
        return;
    }
    out.push_str(&format!("\n{heading}:\n"));
    for t in lines {
        out.push_str("  ");
        out.push_str(&terminal(t.as_ref()));
        out.push('\n');
    }
}

/// The heading of the leak-or-fragmentation lines, in every format.
pub(crate) const WHY_HEADING: &str = "leak or fragmentation? (the allocator's live and held bytes beside RSS; a leak verdict needs steady load)";

/// Per variant: leak, fragmentation, plateau, or a batch job's state at its peak, with
/// how many runs agree; then any run whose allocator probe disagrees with its verification.
pub(crate) fn why_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out: Vec<String> = story_line(a).into_iter().collect();
    out.extend(a.variants.iter().filter_map(|s| {
        let t = s.why.as_ref()?;
        let n: usize = t.runs.values().sum();
        let agree = t.runs.get(&t.verdict).copied().unwrap_or(0);
        Some(format!("{}: {} ({agree} of {n} runs)", s.name, t.sentence))
    }));
    out.extend(
        a.variants
            .iter()
            .filter_map(|s| Some(format!("{}: {}", s.name, s.floor_departure.as_ref()?))),
    );
    let mut seen = std::collections::BTreeSet::new();
    for r in e.runs.iter().filter(|r| !r.warmup) {
        if let Some(d) = r
            .inside
            .allocator
            .as_ref()
            .and_then(|x| x.disagreement.as_ref())
        {
            if seen.insert((r.variant.as_str(), d.as_str())) {
                out.push(format!("! {}: {d}", r.variant));
            }
        }
    }
    out
}

/// Per variant and runtime probed: each figure's median (over ok runs) of the last value
/// the run reported, in the runtime's own names; then the probe's note, once.
pub(crate) fn runtime_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    use crate::record::FigureUnit;
    let mut out = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for runtime in ["ruby", "jvm"] {
        for s in &a.variants {
            let views: Vec<&crate::record::RuntimeView> = e
                .runs
                .iter()
                .filter(|r| r.variant == s.name && r.counts())
                .filter_map(|r| r.inside.runtime(runtime))
                .collect();
            let Some(first) = views.first() else { continue };
            let figures: Vec<String> = first
                .figures
                .iter()
                .map(|f| {
                    let xs: Vec<f64> = views
                        .iter()
                        .filter_map(|v| v.figure(&f.name).map(|g| g.last))
                        .collect();
                    let m = crate::analysis::stats::median(&xs);
                    match f.unit {
                        FigureUnit::Bytes => {
                            format!("{} {}", f.name, crate::units::format_bytes(m))
                        }
                        FigureUnit::Count => format!("{} {m:.0}", f.name),
                    }
                })
                .collect();
            let version = first
                .version
                .as_ref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default();
            out.push(format!(
                "{}: {runtime}{version} ({} run(s)): {}",
                s.name,
                views.len(),
                figures.join(", ")
            ));
            notes.extend(views.iter().filter_map(|v| v.note.clone()));
        }
    }
    notes.sort();
    notes.dedup();
    out.extend(notes.into_iter().map(|n| format!("note: {n}")));
    out
}

/// The batch story in one line: the baseline's peak against the program's floor (the most
/// it was seen to have live), and the variant nearest the floor (`analysis::floor`); the
/// same figures as the table's `peak/floor` column. Without a floor there is no story.
pub(crate) fn story_line(a: &Analysis) -> Option<String> {
    crate::analysis::floor::headline(a)
}

/// One line per variant whose runs did not all succeed or verify, with the reason.
pub(crate) fn problem_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    for s in a.variants.iter().filter(|s| !s.clean()) {
        let statuses: Vec<String> = s
            .statuses
            .iter()
            .filter(|(k, _)| k.as_str() != "ok")
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let mut line = format!("{}: {} of {} runs ok", s.name, s.runs_ok, s.runs_total);
        if let Some(n) = s.statuses.get("oom_killed") {
            line = format!(
                "{}: OOM kills: {n} of {} runs; its figures come from the {} run(s) that finished ok",
                s.name, s.runs_total, s.runs_ok
            );
        }
        if !statuses.is_empty() {
            line.push_str(&format!(" ({})", statuses.join(", ")));
        }
        if s.runs_unverified > 0 {
            line.push_str(&format!(
                "; {} ok run(s) could not be verified",
                s.runs_unverified
            ));
        }
        if let Some(r) = e
            .runs
            .iter()
            .find(|r| r.variant == s.name && !r.warmup && (!r.counts() || !r.verification.ok()))
        {
            let why = match r.status {
                crate::record::RunStatus::VariantNotEffective => r.verification_detail.clone(),
                _ => r
                    .message
                    .clone()
                    .unwrap_or_else(|| r.verification_detail.clone()),
            };
            line.push_str(&format!(" — e.g. {why}"));
        }
        out.push(line);
    }
    out
}

/// The command as a shell would show it (and safe to show on a terminal).
pub fn shell_line(cmd: &[String]) -> String {
    super::escape::shell_line(cmd)
}

#[cfg(test)]
mod why_tests {
    use super::*;

    #[test]
    fn a_probe_that_disagrees_with_verification_is_said_once() {
        let mut e = crate::report::fixture::experiment();
        for r in e.runs.iter_mut().filter(|r| r.variant == "jemalloc") {
            if let Some(a) = r.inside.allocator.as_mut() {
                a.disagreement = Some(
                    "the probe found glibc answering malloc, verification found jemalloc".into(),
                );
            }
        }
        let a = crate::analysis::analyse(&e);
        let lines = why_lines(&e, &a);
        let flagged: Vec<&String> = lines.iter().filter(|l| l.starts_with("! ")).collect();
        assert_eq!(flagged.len(), 1, "{lines:?}");
        assert!(
            flagged[0].contains("jemalloc: the probe found glibc"),
            "{lines:?}"
        );
        // The story first (the fixture's glibc peaks at about 3× the program's floor,
        // jemalloc at 1.6×), then one line a variant.
        assert!(
            lines[0].starts_with("glibc peaked at 3.")
                && lines[0].contains("the most the program was seen to have live")
                && lines[0].contains("; jemalloc at 1.")
                && !lines[0].contains("fragmentation"),
            "{lines:?}"
        );
        assert!(lines[1].starts_with("glibc: at its RSS peak:"), "{lines:?}");
    }
}
