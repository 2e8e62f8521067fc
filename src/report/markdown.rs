//! A compact Markdown summary, fit for a pull-request comment.

use crate::analysis::recommend::{how_to_apply, Recommendation, Verdict};
use crate::analysis::{Analysis, Figure};
use crate::record::Experiment;

use super::escape::{markdown_code, markdown_code_block, markdown_text as md, shell_line};

/// `--markdown`: a summary for a pull-request comment.
pub(crate) struct MarkdownExporter;

impl<'a> super::Exporter<super::Report<'a>> for MarkdownExporter {
    fn serialize(&self, r: &super::Report<'a>) -> Result<Vec<u8>, super::ExportError> {
        Ok(render(r.experiment, r.analysis, r.recommendation).into_bytes())
    }
}

/// A cell: the median, then the ratio to the baseline (bold when significant).
fn cell(v: &str, baseline: bool, ratio: Option<&crate::analysis::Ratio>) -> String {
    match (baseline, ratio) {
        (true, _) => format!(" {v} (baseline) |"),
        (false, Some(r)) => {
            let b = if r.significant { "**" } else { "" };
            format!(
                " {v} {b}{:.2}× [{:.2}, {:.2}]{b} |",
                r.value, r.ci95[0], r.ci95[1]
            )
        }
        (false, None) => format!(" {v} |"),
    }
}

/// A figures table: a row per variant, `columns` then the driver's.
fn table(a: &Analysis, columns: &[(Figure, &str)]) -> String {
    let mut out = String::new();
    let driver = super::driver_columns(a);
    out.push_str("| variant | runs ok |");
    for (_, h) in columns {
        out.push_str(&format!(" {h} |"));
    }
    for n in &driver {
        out.push_str(&format!(" {} |", md(n)));
    }
    out.push_str("\n|---|---:|");
    out.push_str(&"---:|".repeat(columns.len() + driver.len()));
    out.push('\n');
    for s in &a.variants {
        out.push_str(&format!(
            "| {} | {}/{}{} |",
            md(&s.name),
            s.runs_ok,
            s.runs_total,
            if s.clean() { "" } else { " ⚠" }
        ));
        for &(f, _) in columns {
            out.push_str(&match s.figures.get(&f) {
                Some(est) => cell(
                    &super::format_value(f, est.median),
                    s.is_baseline && f.compared(),
                    s.ratio_to_baseline.get(&f),
                ),
                None => format!(" {} |", super::missing_cell(s, f)),
            });
        }
        for n in &driver {
            out.push_str(&match s.driver_figures.get(n) {
                Some(d) => cell(
                    &md(&super::format_driver_value(
                        d.estimate.median,
                        d.unit.as_deref(),
                    )),
                    s.is_baseline,
                    d.ratio_to_baseline.as_ref(),
                ),
                None => " — |".into(),
            });
        }
        out.push('\n');
    }
    out
}

/// A list under a heading, when there is anything to list.
fn list(out: &mut String, heading: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    out.push_str(&format!("\n{}:\n", md(heading)));
    for t in lines {
        out.push_str(&format!("- {}\n", md(t)));
    }
}

/// The answer first, for a pull request: the recommendation and its trade-offs, the
/// baseline's story, the key figures, runs not counted and how to apply the pick; every
/// other figure and section folded below it (`<details>`).
pub fn render(e: &Experiment, a: &Analysis, rec: &Recommendation) -> String {
    let mut out = String::new();
    answer(&mut out, e, a, rec);
    out.push_str("\n\n<details><summary>Every figure, what each rests on, leak or fragmentation, where the memory is</summary>\n\n");
    details(&mut out, e, a, rec);
    out.push_str("\n</details>\n");
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

/// What shows unfolded: the headline, trade-offs, the baseline's story, the key figures,
/// runs not counted and how to apply the pick.
fn answer(out: &mut String, e: &Experiment, a: &Analysis, rec: &Recommendation) {
    out.push_str(&format!(
        "### memtrial: `{}`\n\n",
        markdown_code(&shell_line(&e.plan.command))
    ));
    out.push_str(&format!("**{}**\n\n", md(&rec.headline())));
    if let Some(m) = super::knobs::measured_as(e, rec) {
        out.push_str(&format!("{}\n\n", md(&m)));
    }
    if let Verdict::Pick { tradeoffs, .. } = &rec.verdict {
        for t in tradeoffs {
            out.push_str(&format!("- {}\n", md(t)));
        }
        if !tradeoffs.is_empty() {
            out.push('\n');
        }
    }
    if let Some(story) = super::table::story_line(a) {
        out.push_str(&format!("{}\n\n", md(&story)));
    }
    out.push_str(&table(a, &super::answer::key_columns(a, rec)));
    out.push_str(&format!(
        "\nMedians of {} run(s) per variant; ratio to {} with 95% bootstrap intervals; **bold** = significant.\n",
        e.plan.runs, a.baseline
    ));
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
}

/// What is folded: every figure, the Pareto front and the sections of the terminal report.
fn details(out: &mut String, e: &Experiment, a: &Analysis, rec: &Recommendation) {
    out.push_str(&table(a, &super::columns(a)));
    if let Some(legend) = super::multi_process_legend(a) {
        out.push_str(&format!("\n{}\n", md(&legend)));
    }
    out.push_str(&format!(
        "\nPareto front ({}): {}\n",
        md(&rec.axes()),
        if rec.pareto_front.is_empty() {
            "none".to_string()
        } else {
            md(&rec.pareto_front.join(", "))
        }
    ));
    list(out, super::EVIDENCE_HEADING, &super::evidence_lines(a));
    list(
        out,
        super::table::WHY_HEADING,
        &super::table::why_lines(e, a),
    );
    list(
        out,
        super::regions::REGIONS_HEADING,
        &super::regions::region_lines(e, a),
    );
    let requires = super::requires::require_lines(e, a);
    if !requires.is_empty() {
        out.push_str(&format!(
            "\n{}:\n",
            md(&super::requires::requires_heading(e))
        ));
        out.push_str("```\n");
        for t in requires {
            out.push_str(&t);
            out.push('\n');
        }
        out.push_str("```\n");
    }
    list(
        out,
        super::holes::HOLES_HEADING,
        &super::holes::hole_lines(e, a),
    );
    list(
        out,
        super::knobs::KNOBS_HEADING,
        &super::knobs::knob_lines(e, a),
    );
    list(
        out,
        &super::cpu::cpu_heading(e),
        &super::cpu::cpu_lines(e, a),
    );
    list(
        out,
        "Runtime figures (medians over ok runs of the last value each run reported)",
        &super::table::runtime_lines(e, a),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::analysis::recommend::recommend;
    use crate::record::RunStatus;
    use crate::report::fixture;

    fn markdown(e: &Experiment) -> String {
        let a = analyse(e);
        render(e, &a, &recommend(&a))
    }

    #[test]
    fn markdown_warning_cannot_inject_html() {
        let mut e = fixture::experiment();
        let run = e
            .runs
            .iter_mut()
            .find(|r| r.status == RunStatus::Failed)
            .expect("the fixture has a failed run");
        run.message = Some(
            "<img src=x onerror=alert(1)> [login](http://evil.example) ![i](http://evil.example/p.png)\n# Heading"
                .into(),
        );
        let md = markdown(&e);
        let warning = md.lines().find(|l| l.starts_with("⚠ ")).unwrap();
        assert!(!md.contains("<img"), "{warning}");
        assert!(
            warning.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{warning}"
        );
        assert!(
            !warning.replace("\\](", "").contains("]("),
            "no link survives: {warning}"
        );
        assert!(!md.contains("\n# Heading"), "the message stays on its line");
    }

    #[test]
    fn dockerfile_env_value_with_newline_stays_in_block() {
        let mut e = fixture::experiment();
        let v = e
            .plan
            .variants
            .iter_mut()
            .find(|v| v.name == "jemalloc")
            .unwrap();
        v.env.push((
            "MALLOC_CONF".into(),
            "x\n```\n<script>alert(1)</script>".into(),
        ));
        v.env.push(("OTHER".into(), "a ``` b $HOME".into()));
        let md = markdown(&e);
        let start = md.find("dockerfile\n").expect("a Dockerfile block");
        let fence_len = md[..start].chars().rev().take_while(|c| *c == '`').count();
        assert!(
            fence_len > 3,
            "the fence outgrows the value's backticks: {md}"
        );
        let fence = "`".repeat(fence_len);
        let body_end = md[start..].find(&format!("\n{fence}\n")).unwrap() + start;
        let body = &md[start + "dockerfile\n".len()..body_end];
        assert!(
            !md[body_end..].contains("<script>"),
            "nothing after the block: {md}"
        );
        assert!(
            !body.contains("<script>"),
            "the value with a newline is not written: {body}"
        );
        assert!(body.contains("# MALLOC_CONF: "), "{body}");
        assert!(body.contains("ENV OTHER=\"a ``` b \\$HOME\""), "{body}");
        for line in body.lines() {
            assert!(
                line.starts_with("RUN ") || line.starts_with("ENV ") || line.starts_with("# "),
                "every line is an instruction or a comment: {line:?}"
            );
        }
    }
}
