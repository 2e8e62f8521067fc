//! What `memtrial gate` writes: the lines on the terminal, the Markdown summary for a pull
//! request (a table per gated figure, the verdict, the runs' spread, a picture of each
//! run's peak per variant), JUnit XML (one test case per gated figure and variant) and its
//! verdicts as JSON. Bytes out; the command decides where they go.

use base64::Engine;
use serde::Serialize;

use crate::analysis::gate::{
    edge_phrase, in_unit, interval_phrase, sentence, Expectation, GateFigure, GateVerdict, Judged,
    Outcome,
};
use crate::analysis::{Analysis, Figure};
use crate::record::Experiment;

use super::escape::{markdown_code, markdown_text as md, shell_line, xml_text};

/// Everything a gate's outputs are made from.
pub struct GateReport<'a> {
    /// The experiment judged (with `--against`: the record's baseline beside the runs here).
    pub experiment: &'a Experiment,
    pub analysis: &'a Analysis,
    pub judged: &'a [Judged],
    pub expectation: Option<&'a Expectation>,
    pub verdict: GateVerdict,
    /// Whether the verdict fails the job (an undecided gate passes with `--undecided pass`).
    pub fails: bool,
    /// How the runs were compared and what differs between hosts, in words.
    pub notes: &'a [String],
}

fn verdict_mark(v: GateVerdict, fails: bool) -> &'static str {
    match v {
        GateVerdict::Pass => "✅",
        GateVerdict::Undecided if !fails => "⚠️",
        GateVerdict::Undecided => "❌ ⚠️",
        _ => "❌",
    }
}

/// The headline: `memtrial gate: regression (pr: peak_rss > +5%)`.
pub fn headline(r: &GateReport<'_>) -> String {
    let which: Vec<String> = r
        .judged
        .iter()
        .filter(|j| match r.verdict {
            GateVerdict::Regression => j.outcome == Outcome::Regression,
            GateVerdict::Undecided => j.outcome == Outcome::Undecided,
            GateVerdict::CannotJudge => j.outcome == Outcome::Missing,
            _ => false,
        })
        .map(Judged::key)
        .collect();
    let tail = if which.is_empty() {
        String::new()
    } else {
        format!(" ({})", which.join("; "))
    };
    let passes = if r.verdict == GateVerdict::Undecided && !r.fails {
        ", passed by --undecided pass"
    } else {
        ""
    };
    format!("memtrial gate: {}{tail}{passes}", r.verdict.word())
}

/// The terminal's lines: one per judged criterion, the expectation, the notes, the verdict.
pub fn text(r: &GateReport<'_>) -> String {
    let mut out = String::new();
    for n in r.notes {
        out.push_str(&format!("note: {}\n", super::escape::terminal(n)));
    }
    for j in r.judged {
        out.push_str(&format!(
            "gate: {}\n",
            super::escape::terminal(&sentence(j))
        ));
    }
    if let Some(x) = r.expectation {
        out.push_str(&format!(
            "gate: {}\n",
            super::escape::terminal(&x.sentence())
        ));
    }
    out.push_str(&format!("{}\n", super::escape::terminal(&headline(r))));
    out
}

/// The variants in the order the analysis has them, the baseline first.
fn variants_of(r: &GateReport<'_>) -> Vec<String> {
    let mut v: Vec<String> = r
        .analysis
        .variants
        .iter()
        .filter(|s| s.is_baseline)
        .map(|s| s.name.clone())
        .collect();
    v.extend(
        r.analysis
            .variants
            .iter()
            .filter(|s| !s.is_baseline)
            .map(|s| s.name.clone()),
    );
    v
}

/// One table per criterion: every variant's median, its runs' range and spread, its ratio
/// (or difference) to the baseline with the interval, and the verdict.
fn criterion_table(r: &GateReport<'_>, text: &str) -> String {
    let rows: Vec<&Judged> = r
        .judged
        .iter()
        .filter(|j| j.criterion.text == text)
        .collect();
    let Some(first) = rows.first() else {
        return String::new();
    };
    let c = &first.criterion;
    let mut out = format!(
        "#### {} — fail if `{}`\n\n| variant | median | runs: min – max | spread | against {} [95% interval] | verdict |\n|---|---:|---:|---:|---:|---|\n",
        md(&c.figure.label()),
        markdown_code(&c.text),
        md(&first.baseline)
    );
    let spread = |min: f64, max: f64| {
        if min > 0.0 {
            format!("{:.2}×", max / min)
        } else {
            "—".into()
        }
    };
    if let Some(b) = &first.baseline_runs {
        out.push_str(&format!(
            "| {} (baseline) | {} | {} – {} ({} runs) | {} | | |\n",
            md(&first.baseline),
            md(&in_unit(b.median, first)),
            md(&in_unit(b.min, first)),
            md(&in_unit(b.max, first)),
            b.runs,
            spread(b.min, b.max)
        ));
    }
    for j in rows {
        let (median, range, sp) = match &j.variant_runs {
            Some(v) => (
                in_unit(v.median, j),
                format!(
                    "{} – {} ({} runs)",
                    in_unit(v.min, j),
                    in_unit(v.max, j),
                    v.runs
                ),
                spread(v.min, v.max),
            ),
            None => ("—".into(), "—".into(), "—".into()),
        };
        let verdict = match j.outcome {
            Outcome::Missing => {
                format!("⛔ cannot judge: {}", j.missing.clone().unwrap_or_default())
            }
            Outcome::Regression => format!("❌ regression: wholly beyond {}", edge_phrase(j)),
            Outcome::Undecided => format!(
                "⚠️ undecided: straddles {}; {} would likely tell",
                edge_phrase(j),
                j.more_runs.map_or("more runs".into(), |m| m.phrase())
            ),
            Outcome::Improved => format!("✅ pass, improved: within {}", edge_phrase(j)),
            Outcome::Pass => format!("✅ pass: within {}", edge_phrase(j)),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            md(&j.variant),
            md(&median),
            md(&range),
            sp,
            md(&interval_phrase(j)),
            md(&verdict)
        ));
    }
    out
}

/// The picture: each run's value of the first gated figure measured in bytes (peak RSS
/// when none is), one column of dots per variant, the median as a bar; an SVG inline.
fn picture(r: &GateReport<'_>) -> Option<String> {
    let figure = r
        .judged
        .iter()
        .find_map(|j| match j.criterion.figure {
            GateFigure::Fixed(f) if f.is_bytes() && j.variant_runs.is_some() => Some(f),
            _ => None,
        })
        .unwrap_or(Figure::PeakRssBytes);
    let title = format!(
        "{} of each run (MiB); bar = median",
        crate::analysis::recommend::label(figure)
    );
    let svg = super::charts::distribution(r.experiment, r.analysis, figure, &title)?;
    let b64 = base64::engine::general_purpose::STANDARD.encode(svg.as_bytes());
    Some(format!(
        "<img alt=\"{}: each run per variant\" src=\"data:image/svg+xml;base64,{b64}\" width=\"720\">\n",
        xml_text(crate::analysis::recommend::label(figure))
    ))
}

/// The Markdown summary for a pull request (or `$GITHUB_STEP_SUMMARY`).
pub fn markdown(r: &GateReport<'_>) -> String {
    let e = r.experiment;
    let mut out = format!(
        "## {} {}\n\n",
        verdict_mark(r.verdict, r.fails),
        md(&headline(r))
    );
    let names = variants_of(r);
    let runs: Vec<String> = r
        .analysis
        .variants
        .iter()
        .map(|s| format!("{} {}", md(&s.name), s.runs_ok))
        .collect();
    out.push_str(&format!(
        "`{}` — {} against **{}** (baseline); runs ok: {}.\n\n",
        markdown_code(&shell_line(&e.plan.command)),
        names
            .iter()
            .skip(1)
            .map(|n| format!("**{}**", md(n)))
            .collect::<Vec<_>>()
            .join(", "),
        md(names.first().map_or("", |s| s.as_str())),
        runs.join(", ")
    ));
    for n in r.notes {
        out.push_str(&format!("> {}\n>\n", md(n)));
    }
    if !r.notes.is_empty() {
        out.push('\n');
    }
    let mut seen: Vec<&str> = Vec::new();
    for j in r.judged {
        if seen.contains(&j.criterion.text.as_str()) {
            continue;
        }
        seen.push(&j.criterion.text);
        out.push_str(&criterion_table(r, &j.criterion.text));
        out.push('\n');
    }
    if let Some(x) = r.expectation {
        out.push_str(&format!(
            "**Recommendation:** {} {}\n\n",
            if x.holds() { "✅" } else { "❌" },
            md(&x.sentence())
        ));
    }
    if let Some(p) = picture(r) {
        out.push_str(&p);
        out.push('\n');
    }
    out.push_str(
        "Regression: the 95% interval of the ratio to the baseline lies wholly beyond the tolerance; undecided: it straddles the tolerance; improved: it lies wholly below 1 (above, where lower is worse). Medians over each variant's runs; 95% intervals by bootstrap (memtrial's docs/gate.md).\n",
    );
    out
}

/// JUnit XML: a test suite per variant, a test case per criterion (a failure for a
/// regression, and for an undecided criterion unless `--undecided pass`, where it is
/// skipped), and one for the expected recommendation.
pub fn junit(r: &GateReport<'_>) -> String {
    let mut suites = String::new();
    let (mut total, mut failures, mut errors, mut skipped) = (0, 0, 0, 0);
    let mut variants: Vec<&str> = Vec::new();
    for j in r.judged {
        if !variants.contains(&j.variant.as_str()) {
            variants.push(&j.variant);
        }
    }
    let case = |class: &str, name: &str, body: &str| {
        format!(
            "    <testcase classname=\"{}\" name=\"{}\">{body}</testcase>\n",
            xml_text(class),
            xml_text(name)
        )
    };
    for v in variants {
        let (mut t, mut f, mut er, mut s) = (0, 0, 0, 0);
        let mut cases = String::new();
        for j in r.judged.iter().filter(|j| j.variant == v) {
            t += 1;
            let said = xml_text(&sentence(j));
            let body = match j.outcome {
                Outcome::Regression => {
                    f += 1;
                    format!("<failure type=\"regression\" message=\"{said}\">{said}</failure>")
                }
                Outcome::Undecided if r.fails => {
                    f += 1;
                    format!("<failure type=\"undecided\" message=\"{said}\">{said}</failure>")
                }
                Outcome::Undecided => {
                    s += 1;
                    format!("<skipped message=\"{said}\"/>")
                }
                Outcome::Missing => {
                    er += 1;
                    format!("<error type=\"cannot_judge\" message=\"{said}\">{said}</error>")
                }
                Outcome::Pass | Outcome::Improved => format!("<system-out>{said}</system-out>"),
            };
            cases.push_str(&case(
                &format!("memtrial.gate.{v}"),
                &j.criterion.text,
                &body,
            ));
        }
        suites.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{t}\" failures=\"{f}\" errors=\"{er}\" skipped=\"{s}\">\n{cases}  </testsuite>\n",
            xml_text(&format!("memtrial gate: {v} against {}", r.analysis.baseline))
        ));
        total += t;
        failures += f;
        errors += er;
        skipped += s;
    }
    if let Some(x) = r.expectation {
        total += 1;
        let said = xml_text(&x.sentence());
        let body = if x.holds() {
            format!("<system-out>{said}</system-out>")
        } else {
            failures += 1;
            format!("<failure type=\"recommendation_changed\" message=\"{said}\">{said}</failure>")
        };
        let name = match x {
            Expectation::Holds { expected, .. } | Expectation::Drifted { expected, .. } => {
                format!("recommendation is {expected}")
            }
        };
        suites.push_str(&format!(
            "  <testsuite name=\"memtrial gate: recommendation\" tests=\"1\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n{}  </testsuite>\n",
            usize::from(!x.holds()),
            case("memtrial.gate.recommendation", &name, &body)
        ));
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"memtrial gate\" tests=\"{total}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">\n{suites}</testsuites>\n"
    )
}

#[derive(Serialize)]
struct GateJson<'a> {
    /// Versioned apart from the experiment record.
    gate_schema_version: u32,
    generator: String,
    verdict: GateVerdict,
    fails: bool,
    headline: String,
    /// The stored experiment the runs here belong to (`memtrial report ID`).
    experiment: i64,
    baseline: &'a str,
    criteria: &'a [Judged],
    #[serde(skip_serializing_if = "Option::is_none")]
    expectation: Option<&'a Expectation>,
    notes: &'a [String],
}

/// The gate's verdicts as JSON.
pub fn json(r: &GateReport<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let mut b = serde_json::to_vec_pretty(&GateJson {
        gate_schema_version: 1,
        generator: format!("memtrial {}", env!("CARGO_PKG_VERSION")),
        verdict: r.verdict,
        fails: r.fails,
        headline: headline(r),
        experiment: r.experiment.id,
        baseline: &r.analysis.baseline,
        criteria: r.judged,
        expectation: r.expectation,
        notes: r.notes,
    })?;
    b.push(b'\n');
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::gate::{judge, overall, parse_criterion};

    fn report_of(e: &Experiment, crit: &[&str]) -> (Analysis, Vec<Judged>) {
        let a = crate::analysis::analyse(e);
        let c: Vec<_> = crit.iter().map(|c| parse_criterion(c).unwrap()).collect();
        let j = judge(e, &a, &c);
        (a, j)
    }

    #[test]
    fn summary_junit_and_json_of_a_regression() {
        let mut e = super::super::fixture::experiment();
        // arena2's failed run left out: two clean candidates against glibc.
        for r in e.runs.iter_mut() {
            r.status = crate::record::RunStatus::Ok;
        }
        let (a, j) = report_of(&e, &["peak_rss > +5%", "wall > +2%"]);
        let verdict = overall(&j, None, false);
        let r = GateReport {
            experiment: &e,
            analysis: &a,
            judged: &j,
            expectation: None,
            verdict,
            fails: true,
            notes: &["runs interleaved in shuffled blocks".to_string()],
        };
        let md = markdown(&r);
        insta::assert_snapshot!("gate_markdown", md.split("<img").next().unwrap_or(""));
        assert!(md.contains(
            "<img alt=\"peak RSS: each run per variant\" src=\"data:image/svg+xml;base64,"
        ));
        let x = junit(&r);
        insta::assert_snapshot!("gate_junit", x);
        assert_eq!(verdict, GateVerdict::Regression);
        let v: serde_json::Value = serde_json::from_slice(&json(&r).unwrap()).unwrap();
        assert_eq!(v["verdict"], serde_json::to_value(verdict).unwrap());
        assert_eq!(v["criteria"].as_array().map(Vec::len), Some(4));
        assert_eq!(text(&r).lines().last(), Some(headline(&r).as_str()));
    }
}
