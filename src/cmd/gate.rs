//! `memtrial gate`: `memtrial run`'s experiment (the two builds interleaved in shuffled
//! blocks, or the variants here against a stored record's baseline), each `--fail-if`
//! judged from its interval, the expected recommendation checked, the summary, JUnit XML
//! and verdicts written, and the exit code: 3 regression, 4 undecided, 5 the
//! recommendation changed (docs/results.md).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cli::{GateArgs, GateFlags, UndecidedPolicy};
use memtrial::analysis::decide::Look;
use memtrial::analysis::gate::{
    against, expect, host_differences, judge, look, overall, parse_criterion, Criterion,
    Expectation, GateVerdict, Judged, FROM_RECORD,
};
use memtrial::analysis::recommend::recommend;
use memtrial::analysis::{analyse, any_failed, Analysis};
use memtrial::plan::{Plan, PlanInput, VariantOrigin};
use memtrial::record::Experiment;
use memtrial::report::gate::{self as render, GateReport};
use memtrial::report::printer::OutputTarget;
use memtrial::report::Grouping;
use memtrial::runner::{Start, UntilDecided};
use memtrial::store::Store;

use super::experiment::{
    check_output, check_outputs, interrupted_note, prepare, present, run_here, Prepared,
};
use super::ui::{Outcome, Ui};

/// The environment variable GitHub Actions names its job summary file in.
const GITHUB_STEP_SUMMARY: &str = "GITHUB_STEP_SUMMARY";

/// Where the Markdown summary goes.
enum SummaryTo {
    Target(OutputTarget),
    /// Appended: the job summary GitHub shows, which other steps write too.
    Append(PathBuf),
}

/// The stored record `--against` names, and what wrote it.
type Record = (Experiment, Option<String>);

pub(super) fn gate_cmd(db: &Path, args: &GateArgs, ui: &Ui) -> Result<Outcome> {
    let GateArgs { gate, run } = args;
    let checked = check_flags(args)?;
    // The stored record, read and checked before anything runs.
    let record = gate
        .against
        .as_ref()
        .map(|p| {
            memtrial::store::import::read_experiment(p)
                .with_context(|| format!("--against {}", p.display()))
        })
        .transpose()?;
    let mut input = super::run::run_input(run)?;
    choose_baseline(&mut input, record.as_ref())?;
    let Prepared {
        plan,
        host,
        isolation,
        notes,
    } = prepare(input, ui)?;
    check_plan(
        &plan,
        &checked.criteria,
        gate.expect_recommendation.as_deref(),
    )?;
    let mut gate_notes = match &record {
        Some(rec) => record_notes(rec, gate, &plan, &host, &notes)?,
        None => Vec::new(),
    };

    let rule = super::run::until_rule(run)?;
    let mut look_at = |e: &Experiment| look_of(record.as_ref(), e, gate, &checked.criteria);
    let until = rule.map(|rule| UntilDecided {
        rule,
        judge: &mut look_at,
    });
    let mut store = Store::open(db)?;
    let ran = run_here(
        &mut store,
        &plan,
        Start::New {
            host: &host,
            notes: &notes,
        },
        &isolation,
        ui,
        until,
    )?;
    let shown = present(db, &ran.exp, &run.output, Grouping::Pooled, ui)?;
    if ran.interrupted {
        interrupted_note(db, &ran.exp, ui);
        return Ok(Outcome::Interrupted);
    }
    if record.is_none() {
        gate_notes.insert(0, interleaved_note(&ran.exp));
    }
    let judged_exp = judged_of(record.as_ref(), &ran.exp).with_context(|| {
        format!(
            "--against: the record's baseline '{}' has no run that finished ok",
            record
                .as_ref()
                .map(|(r, _)| r.plan.baseline.as_str())
                .unwrap_or("")
        )
    })?;
    let verdict = Verdict::of(&judged_exp, &ran.exp, gate, &checked.criteria);
    let report = GateReport {
        experiment: &judged_exp,
        analysis: &verdict.analysis,
        judged: &verdict.judged,
        expectation: verdict.expectation.as_ref(),
        verdict: verdict.verdict,
        fails: verdict.fails,
        notes: &gate_notes,
    };
    write_reports(&report, gate, &checked, ui)?;
    outcome(&report, shown)
}

/// The experiment the criteria judge: `e` itself, or `e` beside the stored record's
/// baseline (`None` when that baseline has no run that finished ok).
fn judged_of(record: Option<&Record>, e: &Experiment) -> Option<Experiment> {
    match record {
        Some((rec, _)) => against(rec, e),
        None => Some(e.clone()),
    }
}

/// Where the criteria (and the expected recommendation) stand on `e` so far: what
/// `--until decided` asks after each block.
fn look_of(
    record: Option<&Record>,
    e: &Experiment,
    gate: &GateFlags,
    criteria: &[Criterion],
) -> Look {
    let mut l = judged_of(record, e)
        .map(|x| look(&judge(&x, &analyse(&x), criteria)))
        .unwrap_or_default();
    if gate.expect_recommendation.is_some() {
        let r = memtrial::analysis::recommend::look(&analyse(e));
        for (k, s) in r.standings {
            l.standings.insert(format!("recommendation {k}"), s);
        }
        l.open
            .extend(r.open.into_iter().map(|o| format!("recommendation {o}")));
    }
    l
}

/// The gate's verdict on the runs: the criteria on `judged` (the runs, or the runs beside
/// the record), the expected recommendation on the runs `here`, and whether it fails.
struct Verdict {
    analysis: Analysis,
    judged: Vec<Judged>,
    expectation: Option<Expectation>,
    verdict: GateVerdict,
    fails: bool,
}

impl Verdict {
    fn of(
        judged: &Experiment,
        here: &Experiment,
        gate: &GateFlags,
        criteria: &[Criterion],
    ) -> Self {
        let analysis = analyse(judged);
        let judged_criteria = judge(judged, &analysis, criteria);
        let here_analysis = analyse(here);
        let expectation = gate
            .expect_recommendation
            .as_ref()
            .map(|name| expect(&here_analysis, &recommend(&here_analysis), name));
        let verdict = overall(&judged_criteria, expectation.as_ref(), any_failed(here));
        let fails = match verdict {
            GateVerdict::Pass => false,
            GateVerdict::Undecided => gate.undecided == UndecidedPolicy::Fail,
            _ => true,
        };
        Verdict {
            analysis,
            judged: judged_criteria,
            expectation,
            verdict,
            fails,
        }
    }
}

/// What the flags alone settle, checked before anything is read or run.
struct Checked {
    criteria: Vec<Criterion>,
    summary_to: Option<SummaryTo>,
    /// How many outputs go to standard output (`-`): at most one.
    to_stdout: usize,
}

/// Refuses flags that cannot make a gate; parses the criteria; finds where the summary goes.
fn check_flags(args: &GateArgs) -> Result<Checked> {
    let GateArgs { gate, run } = args;
    let GateFlags {
        fail_if,
        summary,
        junit,
        gate_json,
        expect_recommendation,
        ..
    } = gate;
    if run.resume.is_some() {
        bail!("--resume: memtrial gate runs a new experiment; finish an interrupted one with `memtrial run --resume`");
    }
    if run.in_container {
        bail!("--in-container: memtrial gate compares variants run here; run the pods with `memtrial kube` and gate here");
    }
    let criteria: Vec<Criterion> = fail_if
        .iter()
        .map(|c| parse_criterion(c))
        .collect::<Result<_, _>>()?;
    if criteria.is_empty() && expect_recommendation.is_none() {
        bail!("nothing to gate: give --fail-if 'peak_rss > +5%' (repeatable), or --expect-recommendation NAME");
    }
    check_outputs(&run.output)?;
    check_output(junit, "--junit")?;
    check_output(gate_json, "--gate-json")?;
    let summary_to = match summary {
        Some(p) => {
            check_output(summary, "--summary")?;
            Some(SummaryTo::Target(OutputTarget::from_path(p)))
        }
        None => std::env::var_os(GITHUB_STEP_SUMMARY)
            .filter(|v| !v.is_empty())
            .map(|v| SummaryTo::Append(PathBuf::from(v))),
    };
    let to_stdout = [
        run.output.json.as_deref(),
        run.output.csv.as_deref(),
        run.output.samples_csv.as_deref(),
        run.output.markdown.as_deref(),
        summary.as_deref(),
        junit.as_deref(),
        gate_json.as_deref(),
    ]
    .into_iter()
    .flatten()
    .filter(|p| p.as_os_str() == "-")
    .count();
    if to_stdout > 1 {
        bail!("only one output can go to standard output ('-')");
    }
    Ok(Checked {
        criteria,
        summary_to,
        to_stdout,
    })
}

/// The gate's baseline when none is named: the first of two builds given as custom
/// variants; against a record, its baseline (a catalog variant, run here again only as
/// the record's) or the first variant given.
fn choose_baseline(input: &mut PlanInput, record: Option<&Record>) -> Result<()> {
    let custom_name = |spec: &String| spec.split_once('=').map(|(n, _)| n.trim().to_string());
    match record {
        None => {
            if input.baseline.is_none() && input.variants.is_none() {
                input.baseline = input.custom.first().and_then(custom_name);
            }
        }
        Some((rec, _)) => {
            let base = &rec.plan.baseline;
            if input.variants.is_none() && input.custom.is_empty() {
                match rec.plan.variant(base) {
                    Some(v) if v.origin == VariantOrigin::Catalog => {
                        input.variants = Some(vec![base.clone()])
                    }
                    _ => bail!(
                        "--against: the record's baseline '{base}' is a custom variant; give the build to gate against it with --variant NAME=SPEC (e.g. --variant 'pr=program:./build/app')"
                    ),
                }
            }
            if input.baseline.is_none() {
                input.baseline = input
                    .variants
                    .as_ref()
                    .and_then(|v| v.first().cloned())
                    .or_else(|| input.custom.first().and_then(custom_name));
            }
        }
    }
    Ok(())
}

/// Refuses criteria and an expected recommendation that the plan cannot judge.
fn check_plan(
    plan: &Plan,
    criteria: &[Criterion],
    expect_recommendation: Option<&str>,
) -> Result<()> {
    if let Some(c) = criteria.iter().find(|c| c.needs_load()) {
        if plan.server.is_none() {
            bail!(
                "--fail-if '{}': {} comes from memtrial's HTTP load; this gate runs no server (give --url to load one)",
                c.text,
                c.figure.label()
            );
        }
    }
    if let Some(name) = expect_recommendation {
        if plan.variant(name).is_none() {
            bail!(
                "--expect-recommendation {name}: not a variant of this gate ({})",
                plan.variants
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if plan.variants.len() < 2 {
            bail!("--expect-recommendation {name}: a recommendation weighs two or more variants run here; give them with --variants or --variant");
        }
    }
    Ok(())
}

/// Against a record: refuses one from another machine unless `--across-hosts`, and says
/// what the gate then is (not interleaved; across which differences).
fn record_notes(
    (rec, generator): &Record,
    gate: &GateFlags,
    plan: &Plan,
    host: &memtrial::linux::host::HostInfo,
    notes: &[String],
) -> Result<Vec<String>> {
    let file = gate
        .against
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let base = &rec.plan.baseline;
    if plan.variant(&format!("{base}{FROM_RECORD}")).is_some() {
        bail!("--against: a variant here is named like the record's baseline '{base}{FROM_RECORD}'; name it otherwise");
    }
    let diffs = host_differences(
        (&rec.host, generator.as_deref(), &rec.notes),
        (
            host,
            &format!("memtrial {}", env!("CARGO_PKG_VERSION")),
            notes,
        ),
    );
    let listed: Vec<String> = diffs
        .iter()
        .map(|d| format!("{}: {} in the record, {} here", d.fact, d.record, d.here))
        .collect();
    if !diffs.is_empty() && !gate.across_hosts {
        bail!(
            "--against {file}: the record ran on another machine ({}); a gate across machines judges the machines as much as the builds. Run both builds here, interleaved (--variant 'main=program:…' --variant 'pr=program:…'), or give --across-hosts to gate anyway",
            listed.join("; ")
        );
    }
    let mut out = vec![format!(
        "not interleaved: the baseline {base}{FROM_RECORD} is {} run(s) of '{base}' from {file} (recorded {}); the variants here ran now",
        rec.runs.iter().filter(|r| &r.variant == base && r.counts()).count(),
        rec.created_at
    )];
    if !listed.is_empty() {
        out.push(format!(
            "across hosts (--across-hosts): {}",
            listed.join("; ")
        ));
    }
    Ok(out)
}

/// What a gate without a record is: its variants interleaved on this machine.
fn interleaved_note(exp: &Experiment) -> String {
    format!(
        "interleaved: {} ran in {} shuffled block(s) on this machine, every variant once per block",
        exp.plan
            .variants
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>()
            .join(" and "),
        exp.plan.runs
    )
}

/// The verdict for a person, then the summary, the JUnit XML and the verdicts' JSON where
/// they were asked for.
fn write_reports(report: &GateReport, gate: &GateFlags, checked: &Checked, ui: &Ui) -> Result<()> {
    ui.human(&render::text(report), checked.to_stdout > 0)?;
    if let Some(to) = &checked.summary_to {
        let md = render::markdown(report);
        match to {
            SummaryTo::Target(t) => ui.write_output(t, md.as_bytes(), "--summary")?,
            SummaryTo::Append(p) => ui.append_output(p, md.as_bytes(), GITHUB_STEP_SUMMARY)?,
        }
    }
    if let Some(p) = &gate.junit {
        ui.write_output(
            &OutputTarget::from_path(p),
            render::junit(report).as_bytes(),
            "--junit",
        )?;
    }
    if let Some(p) = &gate.gate_json {
        ui.write_output(
            &OutputTarget::from_path(p),
            &render::json(report)?,
            "--gate-json",
        )?;
    }
    Ok(())
}

/// The exit the verdict gives (`shown`: the one the experiment's own report gave, kept
/// when runs failed).
fn outcome(report: &GateReport, shown: Outcome) -> Result<Outcome> {
    Ok(match report.verdict {
        GateVerdict::RunsFailed => shown,
        GateVerdict::CannotJudge => {
            bail!(
                "cannot judge: {}",
                report
                    .judged
                    .iter()
                    .filter_map(|j| j.missing.as_ref().map(|m| format!("{}: {m}", j.key())))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
        GateVerdict::Regression => Outcome::Regression,
        GateVerdict::Drifted => Outcome::RecommendationChanged,
        GateVerdict::Undecided if report.fails => Outcome::Undecided,
        GateVerdict::Undecided | GateVerdict::Pass => Outcome::Ok,
    })
}
