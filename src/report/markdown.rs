//! A compact Markdown summary, fit for a pull-request comment.

use crate::analysis::recommend::{how_to_apply, Recommendation, Verdict};
use crate::analysis::Analysis;
use crate::record::Experiment;

use super::escape::{markdown_code, markdown_code_block, markdown_text as md, shell_line};

/// `--markdown`: a summary for a pull-request comment.
pub struct MarkdownExporter;

impl<'a> super::Exporter<super::Report<'a>> for MarkdownExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        Ok(render(r.experiment, r.analysis, r.recommendation).into_bytes())
    }
}

pub fn render(e: &Experiment, a: &Analysis, rec: &Recommendation) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "### memtrial: `{}`\n\n",
        markdown_code(&shell_line(&e.plan.command))
    ));
    out.push_str(&format!("**{}**\n\n", md(&rec.headline())));
    if let Verdict::Pick { tradeoffs, .. } = &rec.verdict {
        for t in tradeoffs {
            out.push_str(&format!("- {}\n", md(t)));
        }
        if !tradeoffs.is_empty() {
            out.push('\n');
        }
    }
    let columns = super::columns(a);
    out.push_str("| variant | runs ok |");
    for (_, h) in &columns {
        out.push_str(&format!(" {h} |"));
    }
    out.push_str("\n|---|---:|");
    for _ in &columns {
        out.push_str("---:|");
    }
    out.push('\n');
    for s in &a.variants {
        out.push_str(&format!(
            "| {} | {}/{}{} |",
            md(&s.name),
            s.runs_ok,
            s.runs_total,
            if s.clean() { "" } else { " ⚠" }
        ));
        for &(f, _) in &columns {
            let Some(est) = s.figures.get(&f) else {
                out.push_str(" — |");
                continue;
            };
            let v = super::format_value(f, est.median);
            match (s.is_baseline, s.ratio_to_baseline.get(&f)) {
                (true, _) => out.push_str(&format!(" {v} (baseline) |")),
                (false, Some(r)) => out.push_str(&format!(
                    " {v} {}{:.2}× [{:.2}, {:.2}]{} |",
                    if r.significant { "**" } else { "" },
                    r.value,
                    r.ci95[0],
                    r.ci95[1],
                    if r.significant { "**" } else { "" }
                )),
                (false, None) => out.push_str(&format!(" {v} |")),
            }
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\nMedians of {} run(s) per variant; ratio to {} with 95% bootstrap intervals; **bold** = significant.\n",
        e.plan.runs, a.baseline
    ));
    let trends = super::table::trend_lines(a);
    if !trends.is_empty() {
        out.push_str("\nMemory over time (last half of each run):\n");
        for t in trends {
            out.push_str(&format!("- {}\n", md(&t)));
        }
    }
    for p in super::table::problem_lines(e, a) {
        out.push_str(&format!("\n⚠ {}", md(&p)));
    }
    if let Verdict::Pick { variant, .. } = &rec.verdict {
        if let Some(h) = how_to_apply(&e.plan, variant) {
            out.push_str(&format!(
                "\n\nTo apply `{}` in a Dockerfile:\n\n{}",
                markdown_code(variant),
                markdown_code_block("dockerfile", &h.dockerfile)
            ));
        }
    }
    out.push_str(&format!(
        "\n<sub>memtrial {} · experiment {} · {} CPUs · kernel {} · glibc {}</sub>\n",
        env!("CARGO_PKG_VERSION"),
        e.id,
        e.host.cpus,
        md(&e.host.kernel),
        md(&e.host.glibc)
    ));
    out
}
