//! The answer first: what `memtrial run` and `memtrial report` print by default, in one
//! screen — the key figures with one row per variant, the baseline's story, the
//! recommendation (or why there is none) — the way hyperfine prints a mean, a range and a
//! comparison. Every other section is one step below: `--detail` ([`super::table`]).

use comfy_table::{Attribute, Cell, CellAlignment, Color, ContentArrangement, Table};

use crate::analysis::recommend::Recommendation;
use crate::analysis::{Analysis, Figure, VariantSummary};
use crate::record::Experiment;

use super::escape::terminal;

/// Only a rule under the header: no borders, no lines between columns or rows.
const HEADER_RULE: &str = "     ──            ";

/// The figures of the short table: the memory figure the recommendation weighs, the mean
/// RSS beside it, throughput for a server, and the speed figure it weighs.
pub(crate) fn key_columns(a: &Analysis, rec: &Recommendation) -> Vec<(Figure, &'static str)> {
    let mut c = vec![rec.memory_figure];
    if rec.memory_figure != Figure::MeanRssBytes {
        c.push(Figure::MeanRssBytes);
    }
    if a.server && rec.speed_figure != Figure::ThroughputRps {
        c.push(Figure::ThroughputRps);
    }
    if !c.contains(&rec.speed_figure) {
        c.push(rec.speed_figure);
    }
    c.into_iter().map(|f| (f, super::column_label(f))).collect()
}

/// A key figure's cell in one line: the median, and beside it the ratio to the baseline's
/// median with its interval (`*` significant).
pub(crate) fn key_text(s: &VariantSummary, f: Figure) -> String {
    let Some(est) = s.figures.get(&f) else {
        return super::missing_cell(s, f).into();
    };
    let top = super::format_value(f, est.median);
    if s.is_baseline {
        return top;
    }
    match s.ratio_to_baseline.get(&f) {
        Some(r) => format!("{top} {}", super::ratio_text(r, "")),
        None => format!("{top} (no ratio)"),
    }
}

/// A driver figure's cell in one line: the median with the driver's unit, and the ratio.
fn driver_text(s: &VariantSummary, name: &str) -> String {
    let Some(d) = s.driver_figures.get(name) else {
        return "—".into();
    };
    let top = super::format_driver_value(d.estimate.median, d.unit.as_deref());
    match (&d.ratio_to_baseline, s.is_baseline) {
        (_, true) => top,
        (Some(r), false) => format!("{top} {}", super::ratio_text(r, "")),
        (None, false) => format!("{top} (no ratio)"),
    }
}

fn key_cell(s: &VariantSummary, f: Figure, color: bool) -> Cell {
    let cell = Cell::new(key_text(s, f));
    let Some(r) = s
        .ratio_to_baseline
        .get(&f)
        .filter(|_| color && !s.is_baseline)
    else {
        return cell;
    };
    let better = if f.higher_is_better() {
        r.value > 1.0
    } else {
        r.value < 1.0
    };
    if !r.significant {
        cell.add_attribute(Attribute::Dim)
    } else if better {
        cell.fg(Color::Green)
    } else {
        cell.fg(Color::Red)
    }
}

/// The short table and the lines under it, without the recommendation's headline (which
/// [`AnswerExporter`] puts last).
pub(crate) fn render(e: &Experiment, a: &Analysis, rec: &Recommendation, color: bool) -> String {
    let columns = key_columns(a, rec);
    let mut t = Table::new();
    t.load_preset(HEADER_RULE)
        .set_content_arrangement(ContentArrangement::Disabled);
    if color {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    // What a worker's driver reported is what its user asked to measure: beside the rest.
    let driver = super::driver_columns(a);
    let mut header = vec![Cell::new("variant"), Cell::new("runs ok")];
    header.extend(columns.iter().map(|(_, h)| Cell::new(*h)));
    header.extend(driver.iter().map(|n| Cell::new(terminal(n))));
    t.set_header(header);
    for s in &a.variants {
        let flag = if s.clean() { "" } else { " !" };
        let mut row = vec![
            Cell::new(terminal(&s.name)),
            Cell::new(format!("{}/{}{flag}", s.runs_ok, s.runs_total))
                .set_alignment(CellAlignment::Right),
        ];
        row.extend(columns.iter().map(|(f, _)| key_cell(s, *f, color)));
        row.extend(
            driver
                .iter()
                .map(|n| Cell::new(terminal(&driver_text(s, n)))),
        );
        t.add_row(row);
    }
    let mut out = format!(
        "experiment {} · {} · {} run(s) per variant · baseline {}\n",
        e.id,
        super::table::shell_line(&e.plan.command),
        e.plan.runs,
        terminal(&a.baseline)
    );
    // comfy-table pads each line to the table's width: the header rule is the only line
    // that needs it.
    for line in t.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "medians of the runs that finished ok; beside them, the ratio to {}'s median [95% bootstrap interval]; * = significant\n",
        terminal(&a.baseline)
    ));
    if a.multi_process() {
        out.push_str(&format!(
            "up to {} processes at once: the memory weighed is {}; what an RSS sum counts twice, PSS and USS: --detail\n",
            a.processes_at_once,
            crate::analysis::recommend::label(rec.memory_figure)
        ));
    }
    let absent = a.variants.iter().any(|s| {
        columns
            .iter()
            .any(|(f, _)| super::missing_cell(s, *f) == super::ABSENT && !s.figures.contains_key(f))
    });
    if absent {
        out.push_str("absent = measured, but below the rule its label needs; why, and what would give it: --detail\n");
    }
    if let Some(story) = super::table::story_line(a) {
        out.push_str(&terminal(&story));
        out.push('\n');
    }
    for p in super::table::problem_lines(e, a) {
        out.push_str(&format!("! {}\n", terminal(&p)));
    }
    out
}

/// The terminal's default: the short table, the story, the recommendation's headline.
pub(crate) struct AnswerExporter {
    pub color: bool,
}

impl<'a> super::Exporter<super::Report<'a>> for AnswerExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        let body = render(r.experiment, r.analysis, r.recommendation, self.color);
        Ok(format!("{body}\n{}\n", terminal(&r.recommendation.headline())).into_bytes())
    }
}

/// Where the rest of a report is, for the line under the answer: the command that shows
/// every section (with the database when it is not the default) and the HTML report.
pub fn more_line(id: i64, db: Option<&str>, html: Option<&str>) -> String {
    let db = db.map(|d| format!(" --db {d}")).unwrap_or_default();
    let html = match html {
        Some(h) => format!("; charts: {h}"),
        None => format!("; charts: memtrial report {id}{db} --html FILE"),
    };
    format!(
        "the rest: memtrial report {id}{db} --detail (what each figure rests on, leak or fragmentation, where the memory is, what to try next){html}"
    )
}
