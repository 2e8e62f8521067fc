//! `memtrial gate`: a criterion per figure (`peak_rss > +5%`), each judged from the 95%
//! interval of the figure's ratio to the baseline (or, with a tolerance in units, of the
//! difference of medians): a *regression* when the interval lies wholly beyond the
//! tolerance, *undecided* when it straddles it (with how many more runs would likely
//! tell), a pass otherwise, and an improvement said when the interval lies wholly on the
//! better side of 1. Whether a recommendation still holds (`--expect-recommendation`),
//! and the facts of two hosts that a comparison across them would hide. Pure: the
//! command (`src/cmd/gate.rs`) runs the experiment and maps the outcome to an exit code.
//! See docs/gate.md.

use serde::Serialize;

use super::decide::{more_runs, side, Look, MoreRuns, Scale, Side, Standing};
use super::recommend::{label, Recommendation, Verdict};
use super::{stats, Analysis, Figure, MIN_RUNS_FOR_SIGNIFICANCE};
use crate::linux::host::HostInfo;
use crate::record::{Experiment, RunRecord};

/// A criterion that cannot be read, with what would be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--fail-if '{text}': {reason}")]
pub struct CriterionError {
    pub text: String,
    pub reason: String,
}

/// What a criterion gates on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum GateFigure {
    /// A figure memtrial measures itself.
    Fixed(Figure),
    /// A figure a worker's `--driver` reports (`memtrial-figure NAME VALUE [UNIT]`).
    Driver(String),
}

impl GateFigure {
    pub fn label(&self) -> String {
        match self {
            GateFigure::Fixed(f) => label(*f).to_string(),
            GateFigure::Driver(n) => n.clone(),
        }
    }
}

/// Which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Worse {
    /// `>`: a higher value is worse (memory, time, latency).
    Higher,
    /// `<`: a lower value is worse (throughput, jobs per second).
    Lower,
}

/// How far the figure may move the worse way before it fails.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Tolerance {
    /// A share of the baseline's median: 0.05 is 5%.
    Share(f64),
    /// In the figure's own unit: bytes, seconds (wall, CPU), milliseconds (latency), a count.
    Units(f64),
}

/// One `--fail-if`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Criterion {
    /// As the user wrote it.
    pub text: String,
    pub figure: GateFigure,
    pub worse: Worse,
    pub tolerance: Tolerance,
}

impl Criterion {
    /// The figure comes from memtrial's HTTP load (latency, throughput, requests, errors).
    pub fn needs_load(&self) -> bool {
        matches!(self.figure, GateFigure::Fixed(f) if f.is_latency()
            || matches!(f, Figure::ThroughputRps | Figure::Requests | Figure::Errors))
    }
}

/// The names a criterion may use for memtrial's own figures, beside each figure's key.
const ALIASES: &[(&str, Figure)] = &[
    ("peak_rss", Figure::PeakRssBytes),
    ("rss", Figure::PeakRssBytes),
    ("mean_rss", Figure::MeanRssBytes),
    ("final_rss", Figure::FinalRssBytes),
    ("peak_pss", Figure::PeakPssBytes),
    ("pss", Figure::PeakPssBytes),
    ("peak_uss", Figure::PeakUssBytes),
    ("uss", Figure::PeakUssBytes),
    ("peak_vsz", Figure::PeakVszBytes),
    ("cgroup_peak", Figure::CgroupPeakBytes),
    ("cgroup_anon_peak", Figure::CgroupAnonPeakBytes),
    ("wall", Figure::WallSeconds),
    ("wall_time", Figure::WallSeconds),
    ("cpu", Figure::CpuSeconds),
    ("cpu_user", Figure::CpuUserSeconds),
    ("cpu_sys", Figure::CpuSysSeconds),
    ("threads", Figure::ThreadsPeak),
    ("throttled", Figure::ThrottledSeconds),
    ("throughput", Figure::ThroughputRps),
    ("rps", Figure::ThroughputRps),
    ("p50", Figure::LatencyP50Ms),
    ("p90", Figure::LatencyP90Ms),
    ("p95", Figure::LatencyP95Ms),
    ("p99", Figure::LatencyP99Ms),
    ("max_latency", Figure::LatencyMaxMs),
    ("live_at_peak", Figure::LiveAtPeakBytes),
    ("held_at_peak", Figure::HeldAtPeakBytes),
];

/// The figure a criterion names: an alias, a figure's key, or else a driver's figure.
fn figure_named(name: &str) -> GateFigure {
    ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, f)| *f)
        .or_else(|| Figure::ALL.into_iter().find(|f| f.key() == name))
        .map_or_else(|| GateFigure::Driver(name.to_string()), GateFigure::Fixed)
}

/// The names a criterion may use, for messages.
pub fn figure_names() -> String {
    ALIASES
        .iter()
        .map(|(a, _)| *a)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads `FIGURE > +TOL` or `FIGURE < -TOL`: a tolerance in percent (`+5%`) or in the
/// figure's unit (`+20MiB`, `+0.5s`, `+10ms`, `+3`).
pub fn parse_criterion(text: &str) -> Result<Criterion, CriterionError> {
    let err = |reason: String| CriterionError {
        text: text.to_string(),
        reason,
    };
    let (at, worse) = match (text.find('>'), text.find('<')) {
        (Some(i), None) => (i, Worse::Higher),
        (None, Some(i)) => (i, Worse::Lower),
        _ => {
            return Err(err(
                "write FIGURE > +TOLERANCE (fail when it rises by more) or FIGURE < -TOLERANCE (fail when it falls by more), e.g. 'peak_rss > +5%' or 'throughput < -5%'".into(),
            ))
        }
    };
    let name = text[..at].trim().to_ascii_lowercase();
    let rest = text[at + 1..].trim().trim_start_matches('=').trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(err(format!(
            "'{}' is not a figure's name; memtrial's own: {} (or any key of the JSON record, or a driver's figure)",
            text[..at].trim(),
            figure_names()
        )));
    }
    let figure = figure_named(&name);
    let (sign, amount) = match rest.chars().next() {
        Some('+') => (Some(Worse::Higher), rest[1..].trim()),
        Some('-') => (Some(Worse::Lower), rest[1..].trim()),
        _ => (None, rest),
    };
    if sign.is_some_and(|s| s != worse) {
        return Err(err(match worse {
            Worse::Higher => "'>' fails when the figure rises by more than the tolerance: give it as +N% or +N UNIT".into(),
            Worse::Lower => "'<' fails when the figure falls by more than the tolerance: give it as -N% or -N UNIT".into(),
        }));
    }
    if amount.is_empty() {
        return Err(err(
            "no tolerance after the comparison: e.g. +5%, +20MiB, +0.5s, +10ms".into(),
        ));
    }
    let tolerance = if let Some(p) = amount.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| err(format!("'{amount}' is not a percentage")))?;
        if !(0.0..1000.0).contains(&v) {
            return Err(err(format!("{v}% is out of range (0% to 1000%)")));
        }
        if worse == Worse::Lower && v >= 100.0 {
            return Err(err(format!(
                "a figure cannot fall by {v}% or more: give less than 100%"
            )));
        }
        Tolerance::Share(v / 100.0)
    } else {
        Tolerance::Units(units_of(&figure, amount).map_err(err)?)
    };
    Ok(Criterion {
        text: text.trim().to_string(),
        figure,
        worse,
        tolerance,
    })
}

/// A tolerance in the figure's own unit: a size for bytes, a duration for seconds and
/// milliseconds, a plain number for counts and a driver's figures.
fn units_of(figure: &GateFigure, amount: &str) -> Result<f64, String> {
    let plain = || -> Result<f64, String> {
        amount
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("'{amount}' is not a number; give a percentage (+5%) or a number in the figure's unit"))
    };
    let GateFigure::Fixed(f) = figure else {
        return plain();
    };
    let f = *f;
    if f.is_bytes() {
        if amount.parse::<f64>().is_ok() {
            return Err(format!(
                "'{amount}' has no unit; {} is in bytes: give e.g. +20MiB, +512K, or a percentage",
                label(f)
            ));
        }
        return crate::units::parse_size(amount).map(|b| b as f64);
    }
    let seconds = matches!(
        f,
        Figure::WallSeconds
            | Figure::CpuSeconds
            | Figure::CpuUserSeconds
            | Figure::CpuSysSeconds
            | Figure::ThrottledSeconds
    );
    if seconds || f.is_latency() {
        if amount.parse::<f64>().is_ok() {
            return Err(format!(
                "'{amount}' has no unit; give a duration for {} (e.g. +0.5s, +10ms) or a percentage",
                label(f)
            ));
        }
        let d = crate::units::parse_duration(amount)?;
        return Ok(if f.is_latency() {
            d.as_secs_f64() * 1000.0
        } else {
            d.as_secs_f64()
        });
    }
    plain()
}

/// What the evidence says of one criterion for one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The interval lies wholly beyond the tolerance: worse, significantly, by more.
    Regression,
    /// The interval straddles the tolerance's edge.
    Undecided,
    /// The interval lies wholly within the tolerance.
    Pass,
    /// A pass whose interval lies wholly on the better side of 1 (or of 0).
    Improved,
    /// The figure is not there to judge (a batch job has no latency, a run without it).
    Missing,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Regression => "regression",
            Outcome::Undecided => "undecided",
            Outcome::Pass => "pass",
            Outcome::Improved => "improved",
            Outcome::Missing => "missing",
        }
    }
}

/// A variant's figure over its counted runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunsOf {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

/// One criterion judged for one variant against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    pub variant: String,
    pub baseline: String,
    pub criterion: Criterion,
    /// The figure's unit as memtrial formats it (`bytes`, `seconds`, `ms`, a driver's own).
    pub unit: Option<String>,
    pub variant_runs: Option<RunsOf>,
    pub baseline_runs: Option<RunsOf>,
    /// The ratio to the baseline's median and its 95% interval (the table's ratio).
    pub ratio: Option<f64>,
    pub ratio_ci95: Option<[f64; 2]>,
    /// With a tolerance in units: the difference of medians and its 95% interval.
    pub difference: Option<f64>,
    pub difference_ci95: Option<[f64; 2]>,
    /// Where the tolerance's edge lies: a ratio (1.05) or a difference (in the unit).
    pub edge: f64,
    pub outcome: Outcome,
    /// Undecided: how many more runs of each would likely tell.
    pub more_runs: Option<MoreRuns>,
    /// Missing: why.
    pub missing: Option<String>,
}

impl Judged {
    /// The question's key for the sequential rule: `pr: peak_rss > +5%`.
    pub fn key(&self) -> String {
        format!("{}: {}", self.variant, self.criterion.text)
    }
}

/// The values of a gated figure over a variant's counted runs (those that meet the
/// figure's evidence rule, as the table's median takes them).
fn values(e: &Experiment, variant: &str, figure: &GateFigure) -> Vec<f64> {
    let runs: Vec<&RunRecord> = e
        .runs
        .iter()
        .filter(|r| r.variant == variant && r.counts())
        .collect();
    match figure {
        GateFigure::Fixed(f) => super::values(&runs, *f),
        GateFigure::Driver(n) => super::driver_values(&runs, n),
    }
}

fn side_of(xs: &[f64]) -> Option<RunsOf> {
    (!xs.is_empty()).then(|| RunsOf {
        median: stats::median(xs),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        runs: xs.len(),
    })
}

/// Every criterion for every variant but the baseline of `e` (analysed as `a`).
pub fn judge(e: &Experiment, a: &Analysis, criteria: &[Criterion]) -> Vec<Judged> {
    let mut out = Vec::new();
    for s in a.variants.iter().filter(|s| !s.is_baseline) {
        for c in criteria {
            out.push(judge_one(e, a, &s.name, c));
        }
    }
    out
}

fn judge_one(e: &Experiment, a: &Analysis, variant: &str, c: &Criterion) -> Judged {
    let xs = values(e, variant, &c.figure);
    let bs = values(e, &a.baseline, &c.figure);
    let mut j = Judged {
        variant: variant.to_string(),
        baseline: a.baseline.clone(),
        criterion: c.clone(),
        unit: unit_of(&c.figure, a),
        variant_runs: side_of(&xs),
        baseline_runs: side_of(&bs),
        ratio: None,
        ratio_ci95: None,
        difference: None,
        difference_ci95: None,
        edge: 0.0,
        outcome: Outcome::Missing,
        more_runs: None,
        missing: None,
    };
    if xs.is_empty() || bs.is_empty() {
        let whose = if xs.is_empty() { variant } else { &a.baseline };
        j.missing = Some(missing_reason(e, a, whose, &c.figure));
        return j;
    }
    // The table's ratio where it has one (one figure, one computation), else the same
    // bootstrap over the same values.
    let summary = a.variants.iter().find(|s| s.name == variant);
    let table_ratio = summary.and_then(|s| match &c.figure {
        GateFigure::Fixed(f) => s.ratio_to_baseline.get(f).map(|r| (r.value, r.ci95)),
        GateFigure::Driver(n) => s
            .driver_figures
            .get(n)?
            .ratio_to_baseline
            .map(|r| (r.value, r.ci95)),
    });
    let seed = e.plan.seed ^ 0x6A7E_0000;
    let ratio = table_ratio
        .or_else(|| stats::ratio_ci95(&xs, &bs, seed).map(|(v, (lo, hi))| (v, [lo, hi])));
    if let Some((v, ci)) = ratio {
        j.ratio = Some(v);
        j.ratio_ci95 = Some(ci);
    }
    let n = xs.len().min(bs.len());
    let (estimate, ci, edge, better_edge, scale) = match c.tolerance {
        Tolerance::Share(t) => {
            let Some((v, ci)) = ratio else {
                j.missing = Some(format!(
                    "the baseline's median {} is 0: no ratio to gate a percentage on; give the tolerance in units",
                    c.figure.label()
                ));
                return j;
            };
            let edge = match c.worse {
                Worse::Higher => 1.0 + t,
                Worse::Lower => 1.0 - t,
            };
            (v, ci, edge, 1.0, Scale::Log)
        }
        Tolerance::Units(u) => {
            let Some((d, (lo, hi))) = stats::difference_ci95(&xs, &bs, seed ^ 0xD1FF) else {
                j.missing = Some("no difference could be drawn".into());
                return j;
            };
            j.difference = Some(d);
            j.difference_ci95 = Some([lo, hi]);
            let edge = match c.worse {
                Worse::Higher => u,
                Worse::Lower => -u,
            };
            (d, [lo, hi], edge, 0.0, Scale::Linear)
        }
    };
    j.edge = edge;
    j.outcome = outcome_of(c.worse, ci, (edge, better_edge), n);
    if j.outcome == Outcome::Undecided {
        j.more_runs = Some(more_runs(estimate, ci, n, edge, scale));
    }
    j
}

/// The unit a figure is gated in (`None`: a count or a ratio).
fn unit_of(figure: &GateFigure, a: &Analysis) -> Option<String> {
    match figure {
        GateFigure::Fixed(f) if f.is_bytes() => Some("bytes".to_string()),
        GateFigure::Fixed(f) if f.is_latency() => Some("ms".to_string()),
        GateFigure::Fixed(Figure::WallSeconds | Figure::CpuSeconds) => Some("seconds".into()),
        GateFigure::Fixed(_) => None,
        GateFigure::Driver(n) => a
            .variants
            .iter()
            .find_map(|s| s.driver_figures.get(n)?.unit.clone()),
    }
}

/// A criterion's outcome from the interval `ci` of `n` runs a side: a regression when it
/// lies beyond `edge` on the `worse` side, improved when it lies wholly on the better side
/// of `better_edge` (no change), undecided when it straddles `edge` or the runs are too
/// few.
fn outcome_of(worse: Worse, ci: [f64; 2], (edge, better_edge): (f64, f64), n: usize) -> Outcome {
    if n < MIN_RUNS_FOR_SIGNIFICANCE {
        return Outcome::Undecided;
    }
    let beyond = match (worse, side(ci, edge)) {
        (Worse::Higher, Side::Above) | (Worse::Lower, Side::Below) => Some(true),
        (_, Side::Straddles) => None,
        _ => Some(false),
    };
    let improved = match worse {
        Worse::Higher => ci[1] < better_edge,
        Worse::Lower => ci[0] > better_edge,
    };
    match beyond {
        Some(true) => Outcome::Regression,
        None => Outcome::Undecided,
        Some(false) if improved => Outcome::Improved,
        Some(false) => Outcome::Pass,
    }
}

/// Why a variant has no value of a figure: the figure's absence as the analysis says it,
/// or what would give it.
fn missing_reason(e: &Experiment, a: &Analysis, variant: &str, figure: &GateFigure) -> String {
    let counted = e
        .runs
        .iter()
        .filter(|r| r.variant == variant && r.counts())
        .count();
    if counted == 0 {
        return format!("{variant} has no run that finished ok");
    }
    match figure {
        GateFigure::Fixed(f) => {
            if let Some(ab) = a
                .variants
                .iter()
                .find(|s| s.name == variant)
                .and_then(|s| s.evidence.get(f)?.absent.as_ref())
            {
                return format!("{variant}: {} not shown: {} ({})", label(*f), ab.reason, ab.remedy);
            }
            if f.is_latency() || matches!(f, Figure::ThroughputRps | Figure::Requests | Figure::Errors) {
                format!("{variant} has no {}: it comes from memtrial's HTTP load (--url)", label(*f))
            } else {
                format!("{variant}'s runs have no {}", label(*f))
            }
        }
        GateFigure::Driver(n) => format!(
            "{variant}'s runs have no figure '{n}': not one of memtrial's ({}), and no --driver reported it (memtrial-figure {n} VALUE)",
            figure_names()
        ),
    }
}

/// The standings of a gate's questions for the sequential rule: each criterion of each
/// variant, decided when it is a regression or a pass (an improvement is a pass).
pub fn look(judged: &[Judged]) -> Look {
    let mut l = Look::default();
    for j in judged {
        let s = match j.outcome {
            Outcome::Regression => Standing::Decided("regression".into()),
            Outcome::Pass | Outcome::Improved => Standing::Decided("pass".into()),
            Outcome::Missing => Standing::Decided("missing".into()),
            Outcome::Undecided => {
                l.open.push(format!(
                    "{}: {}{}",
                    j.key(),
                    interval_phrase(j),
                    j.more_runs
                        .map(|m| format!(", {} would likely tell", m.phrase()))
                        .unwrap_or_default()
                ));
                Standing::Open
            }
        };
        l.standings.insert(j.key(), s);
    }
    l
}

/// `1.20× [1.19, 1.21]` or `+2.1 MiB [+1.9 MiB, +2.3 MiB]`.
pub fn interval_phrase(j: &Judged) -> String {
    match (
        j.criterion.tolerance,
        j.ratio,
        j.ratio_ci95,
        j.difference,
        j.difference_ci95,
    ) {
        (Tolerance::Units(_), _, _, Some(d), Some([lo, hi])) => {
            format!("{} [{}, {}]", signed(d, j), signed(lo, j), signed(hi, j))
        }
        (_, Some(r), Some([lo, hi]), _, _) => format!("{r:.3}× [{lo:.3}, {hi:.3}]"),
        _ => "no interval".into(),
    }
}

/// A value in the criterion's unit: `412 MiB`, `1.25 s`, `3.2 ms`, `12.5`.
pub fn in_unit(v: f64, j: &Judged) -> String {
    match j.unit.as_deref() {
        Some("bytes") => crate::units::format_bytes(v),
        Some("seconds") => crate::units::format_seconds(v),
        Some("ms") => format!("{v:.2} ms"),
        Some(u) => format!("{} {u}", trim_number(v)),
        None => trim_number(v),
    }
}

fn trim_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn signed(v: f64, j: &Judged) -> String {
    if v < 0.0 {
        format!("-{}", in_unit(-v, j))
    } else {
        format!("+{}", in_unit(v, j))
    }
}

/// The edge in words: `1.05× (+5%)`, `+20.0 MiB`.
pub fn edge_phrase(j: &Judged) -> String {
    match j.criterion.tolerance {
        Tolerance::Share(t) => format!(
            "{:.2}× ({}{:.0}%)",
            j.edge,
            if j.criterion.worse == Worse::Higher {
                "+"
            } else {
                "-"
            },
            t * 100.0
        ),
        Tolerance::Units(_) => signed(j.edge, j),
    }
}

/// One sentence on a judged criterion.
pub fn sentence(j: &Judged) -> String {
    let c = &j.criterion;
    match j.outcome {
        Outcome::Missing => format!(
            "{}: {}: cannot be judged: {}",
            j.variant,
            c.text,
            j.missing.clone().unwrap_or_default()
        ),
        Outcome::Regression => format!(
            "{}: {}: regression: {} {} against {}, the interval wholly beyond {}",
            j.variant,
            c.text,
            c.figure.label(),
            interval_phrase(j),
            j.baseline,
            edge_phrase(j)
        ),
        Outcome::Undecided => format!(
            "{}: {}: undecided: {} {} against {} straddles {}; {} would likely tell",
            j.variant,
            c.text,
            c.figure.label(),
            interval_phrase(j),
            j.baseline,
            edge_phrase(j),
            j.more_runs.map_or("more runs".into(), |m| m.phrase())
        ),
        Outcome::Pass | Outcome::Improved => format!(
            "{}: {}: {}: {} {} against {}, within {}",
            j.variant,
            c.text,
            if j.outcome == Outcome::Improved {
                "pass, improved significantly"
            } else {
                "pass"
            },
            c.figure.label(),
            interval_phrase(j),
            j.baseline,
            edge_phrase(j)
        ),
    }
}

/// Whether the recommendation on today's evidence is the one expected.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Expectation {
    Holds {
        expected: String,
        found: String,
    },
    Drifted {
        expected: String,
        found: String,
        what_changed: String,
    },
}

impl Expectation {
    pub fn holds(&self) -> bool {
        matches!(self, Expectation::Holds { .. })
    }

    pub fn sentence(&self) -> String {
        match self {
            Expectation::Holds { expected, found } => {
                format!("the recommendation holds: {expected} (today: {found})")
            }
            Expectation::Drifted {
                expected,
                what_changed,
                ..
            } => format!("the recommendation changed: expected {expected}; {what_changed}"),
        }
    }
}

/// Checks the recommendation against the variant expected: a pick of it, or — when the
/// baseline is expected — keeping it (no variant leaner by 5%, or no difference). An
/// undecided verdict does not hold: the evidence no longer shows the decision.
pub fn expect(a: &Analysis, rec: &Recommendation, expected: &str) -> Expectation {
    let found = rec.headline();
    let holds = match &rec.verdict {
        Verdict::Pick { variant, .. } => variant == expected,
        Verdict::KeepBaseline { .. } | Verdict::NoSignificantDifference { .. } => {
            expected == a.baseline
        }
        Verdict::Undecided { .. } | Verdict::NotEnoughRuns { .. } => false,
    };
    if holds {
        return Expectation::Holds {
            expected: expected.to_string(),
            found,
        };
    }
    let figure = rec.memory_figure;
    let ratio_of = |name: &str| {
        a.variants
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.ratio_to_baseline.get(&figure))
            .map(|r| super::recommend::ratio_phrase(label(figure), r))
    };
    let mut what = match &rec.verdict {
        Verdict::Pick { variant, .. } => format!(
            "today's evidence picks {variant} ({})",
            ratio_of(variant).unwrap_or_default()
        ),
        Verdict::Undecided { .. } => "today's evidence is undecided".to_string(),
        Verdict::NotEnoughRuns { .. } => "today's runs are not enough to recommend".to_string(),
        _ => format!("today's evidence keeps the baseline {}", a.baseline),
    };
    if expected != a.baseline {
        match ratio_of(expected) {
            Some(p) => what.push_str(&format!("; {expected} against {}: {p}", a.baseline)),
            None => what.push_str(&format!(
                "; {expected} was not weighed ({})",
                rec.excluded
                    .iter()
                    .find(|x| x.starts_with(&format!("{expected}:")))
                    .cloned()
                    .unwrap_or_else(|| "no ratio in the memory figure".into())
            )),
        }
    }
    what.push_str(&format!(" — {found}"));
    Expectation::Drifted {
        expected: expected.to_string(),
        found,
        what_changed: what,
    }
}

/// A fact of the host a stored record ran on that differs here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostDifference {
    pub fact: String,
    pub record: String,
    pub here: String,
}

/// The facts of two machines that make a comparison across them unfair: the machine
/// itself (hostname), CPUs, memory, the kernel, glibc, the container's limits, memtrial's
/// version, and the allocator libraries both preload (by content).
pub fn host_differences(
    record: (&HostInfo, Option<&str>, &[String]),
    here: (&HostInfo, &str, &[String]),
) -> Vec<HostDifference> {
    use super::hosts::HostFact;
    let (rh, rv, rnotes) = record;
    let (hh, hv, hnotes) = here;
    let mut out = Vec::new();
    let mut differ = |fact: &str, a: String, b: String| {
        if a != b {
            out.push(HostDifference {
                fact: fact.into(),
                record: a,
                here: b,
            });
        }
    };
    differ("host", rh.hostname.clone(), hh.hostname.clone());
    differ(
        "memory",
        crate::units::format_bytes(rh.memory_bytes as f64),
        crate::units::format_bytes(hh.memory_bytes as f64),
    );
    for f in HostFact::ALL {
        differ(f.name(), f.value(rh), f.value(hh));
    }
    differ(
        "memtrial",
        rv.unwrap_or("an unknown version").to_string(),
        hv.to_string(),
    );
    let (rl, hl) = (
        crate::linux::allocator::library_facts_of(rnotes),
        crate::linux::allocator::library_facts_of(hnotes),
    );
    for (path, sum) in &rl {
        if let Some(h) = hl.get(path) {
            differ(&format!("allocator library {path}"), sum.clone(), h.clone());
        }
    }
    out
}

/// A gate's verdict over all its criteria, the worst first: runs that failed make the
/// rest untrustworthy; a criterion that cannot be judged is a mistake in the gate; then a
/// regression, a changed recommendation, an undecided criterion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateVerdict {
    RunsFailed,
    CannotJudge,
    Regression,
    Drifted,
    Undecided,
    Pass,
}

impl GateVerdict {
    pub fn word(self) -> &'static str {
        match self {
            GateVerdict::RunsFailed => "runs failed",
            GateVerdict::CannotJudge => "cannot judge",
            GateVerdict::Regression => "regression",
            GateVerdict::Drifted => "recommendation changed",
            GateVerdict::Undecided => "undecided",
            GateVerdict::Pass => "pass",
        }
    }
}

/// The gate's verdict from its judged criteria, its expectation and whether runs failed.
pub fn overall(
    judged: &[Judged],
    expectation: Option<&Expectation>,
    runs_failed: bool,
) -> GateVerdict {
    let any = |o: Outcome| judged.iter().any(|j| j.outcome == o);
    if runs_failed {
        GateVerdict::RunsFailed
    } else if any(Outcome::Missing) {
        GateVerdict::CannotJudge
    } else if any(Outcome::Regression) {
        GateVerdict::Regression
    } else if expectation.is_some_and(|x| !x.holds()) {
        GateVerdict::Drifted
    } else if any(Outcome::Undecided) {
        GateVerdict::Undecided
    } else {
        GateVerdict::Pass
    }
}

/// How the record's baseline is named beside the variants run here: `glibc@record`.
pub const FROM_RECORD: &str = "@record";

/// What `--against FILE` gates on: the record's baseline runs (its variant renamed
/// `NAME@record`, the baseline) beside every variant run here, in one experiment with
/// both hosts. `None` when the record's baseline has no run that finished ok.
pub fn against(record: &Experiment, here: &Experiment) -> Option<Experiment> {
    let base = &record.plan.baseline;
    let name = format!("{base}{FROM_RECORD}");
    let mut variant = record.plan.variant(base)?.clone();
    variant.name = name.clone();
    let mut out = here.clone();
    out.plan.variants.insert(0, variant);
    out.plan.baseline = name.clone();
    let hosts_before = here.hosts.len();
    out.hosts.extend(record.hosts.iter().cloned());
    let mut any = false;
    for (i, r) in record.runs.iter().enumerate() {
        if r.variant != *base {
            continue;
        }
        any |= r.counts();
        let mut r = r.clone();
        r.variant = name.clone();
        out.runs.push(r);
        out.seqs.push(record.seqs.get(i).copied().unwrap_or(0));
        out.run_hosts
            .push(hosts_before + record.run_hosts.get(i).copied().unwrap_or(0));
    }
    any.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criteria_are_read_with_their_units() {
        let c = parse_criterion("peak_rss > +5%").unwrap();
        assert_eq!(c.figure, GateFigure::Fixed(Figure::PeakRssBytes));
        assert_eq!(
            (c.worse, c.tolerance),
            (Worse::Higher, Tolerance::Share(0.05))
        );
        let c = parse_criterion("p95>10%").unwrap();
        assert_eq!(c.figure, GateFigure::Fixed(Figure::LatencyP95Ms));
        let c = parse_criterion("throughput < -5%").unwrap();
        assert_eq!(
            (c.worse, c.tolerance),
            (Worse::Lower, Tolerance::Share(0.05))
        );
        let c = parse_criterion("peak_rss_bytes > +20MiB").unwrap();
        assert_eq!(c.tolerance, Tolerance::Units(20.0 * 1048576.0));
        let c = parse_criterion("p99 > +10ms").unwrap();
        assert_eq!(c.tolerance, Tolerance::Units(10.0));
        let c = parse_criterion("wall > +0.5s").unwrap();
        assert_eq!(c.tolerance, Tolerance::Units(0.5));
        let c = parse_criterion("jobs_per_s < -3").unwrap();
        assert_eq!(c.figure, GateFigure::Driver("jobs_per_s".into()));
        assert_eq!(c.tolerance, Tolerance::Units(3.0));
    }

    #[test]
    fn bad_criteria_say_what_would_do() {
        for (text, says) in [
            ("peak_rss", "write FIGURE > +TOLERANCE"),
            ("peak_rss > -5%", "'>' fails when the figure rises"),
            ("throughput < +5%", "'<' fails when the figure falls"),
            ("peak_rss > +20", "has no unit"),
            ("wall > 2", "has no unit"),
            ("peak_rss >", "no tolerance"),
            ("peak rss > 5%", "not a figure's name"),
            ("peak_rss > +5 furlongs", "unknown size unit"),
            ("throughput < -100%", "less than 100%"),
            ("peak_rss > +x%", "not a percentage"),
        ] {
            let e = parse_criterion(text).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    fn exp(base: &[f64], var: &[f64]) -> Experiment {
        let mut e = crate::report::fixture::experiment();
        let g = e
            .runs
            .iter()
            .find(|r| r.variant == "glibc")
            .unwrap()
            .clone();
        e.plan.variants.retain(|v| v.name != "arena2");
        e.plan.variants[1].name = "pr".into();
        e.plan.variants[1].preload = None;
        e.runs.clear();
        for (b, (x, y)) in base.iter().zip(var).enumerate() {
            for (name, mib) in [("glibc", x), ("pr", y)] {
                let mut r = g.clone();
                r.variant = name.into();
                r.block = b as u32;
                r.peak_rss_bytes = (mib * 1048576.0) as u64;
                e.runs.push(r);
            }
        }
        e.seqs = (0..e.runs.len() as u32).collect();
        e.run_hosts = vec![0; e.runs.len()];
        e
    }

    fn judged(base: &[f64], var: &[f64], crit: &str) -> Judged {
        let e = exp(base, var);
        let a = super::super::analyse(&e);
        let mut j = judge(&e, &a, &[parse_criterion(crit).unwrap()]);
        assert_eq!(j.len(), 1);
        j.remove(0)
    }

    const BASE: [f64; 7] = [100.0, 100.2, 99.9, 100.1, 100.0, 99.8, 100.3];

    #[test]
    fn a_planted_regression_fails_a_small_one_passes_and_a_wide_one_is_undecided() {
        let up20: Vec<f64> = BASE.iter().map(|x| x * 1.2).collect();
        let j = judged(&BASE, &up20, "peak_rss > +5%");
        assert_eq!(j.outcome, Outcome::Regression, "{j:?}");
        assert!(
            sentence(&j).contains("regression: peak RSS 1.2"),
            "{}",
            sentence(&j)
        );
        let up2: Vec<f64> = BASE.iter().rev().map(|x| x * 1.02).collect();
        assert_eq!(judged(&BASE, &up2, "peak_rss > +5%").outcome, Outcome::Pass);
        let down: Vec<f64> = BASE.iter().map(|x| x * 0.8).collect();
        assert_eq!(
            judged(&BASE, &down, "peak_rss > +5%").outcome,
            Outcome::Improved
        );
        let wide = [90.0, 125.0, 100.0, 118.0, 96.0, 110.0, 104.0];
        let j = judged(&BASE, &wide, "peak_rss > +5%");
        assert_eq!(j.outcome, Outcome::Undecided, "{j:?}");
        assert!(matches!(
            j.more_runs,
            Some(MoreRuns::About(_) | MoreRuns::MoreThan(_))
        ));
        assert!(
            sentence(&j).contains("would likely tell"),
            "{}",
            sentence(&j)
        );
        // In units: +20 MiB on 100 MiB is beyond +10MiB, within +30MiB.
        assert_eq!(
            judged(&BASE, &up20, "peak_rss > +10MiB").outcome,
            Outcome::Regression
        );
        assert_eq!(
            judged(&BASE, &up20, "peak_rss > +30MiB").outcome,
            Outcome::Pass
        );
        // A figure the runs do not have.
        let j = judged(&BASE, &up20, "p95 > +10%");
        assert_eq!(j.outcome, Outcome::Missing);
        assert!(
            j.missing.as_deref().unwrap_or("").contains("--url"),
            "{j:?}"
        );
    }

    #[test]
    fn a_gate_is_decided_for_the_sequential_rule_unless_undecided() {
        let wide = [90.0, 125.0, 100.0, 118.0, 96.0, 110.0, 104.0];
        let e = exp(&BASE, &wide);
        let a = super::super::analyse(&e);
        let j = judge(
            &e,
            &a,
            &[
                parse_criterion("peak_rss > +5%").unwrap(),
                parse_criterion("wall > +50%").unwrap(),
            ],
        );
        let l = look(&j);
        assert_eq!(l.standings["pr: peak_rss > +5%"], Standing::Open);
        assert_eq!(
            l.standings["pr: wall > +50%"],
            Standing::Decided("pass".into())
        );
        assert_eq!(l.open.len(), 1);
    }

    #[test]
    fn an_expected_recommendation_holds_or_says_what_changed() {
        let e = crate::report::fixture::experiment();
        let a = super::super::analyse(&e);
        let rec = super::super::recommend::recommend(&a);
        assert!(expect(&a, &rec, "jemalloc").holds());
        let x = expect(&a, &rec, "glibc");
        assert!(!x.holds());
        assert!(
            x.sentence()
                .contains("today's evidence picks jemalloc (peak RSS -50%"),
            "{}",
            x.sentence()
        );
    }

    #[test]
    fn host_facts_that_differ_are_named() {
        let h = crate::report::fixture::experiment().host;
        let mut other = h.clone();
        other.cpus = 8;
        other.hostname = "ci-runner-7".into();
        let rn = vec![crate::linux::allocator::library_facts_note(&[(
            "/usr/lib/libjemalloc.so.2".into(),
            "sha256:aaaa".into(),
        )])];
        let hn = vec![crate::linux::allocator::library_facts_note(&[(
            "/usr/lib/libjemalloc.so.2".into(),
            "sha256:bbbb".into(),
        )])];
        let d = host_differences(
            (&h, Some("memtrial 0.1.0"), &rn),
            (&other, "memtrial 0.1.0", &hn),
        );
        let facts: Vec<&str> = d.iter().map(|x| x.fact.as_str()).collect();
        assert_eq!(
            facts,
            [
                "host",
                "CPUs",
                "allocator library /usr/lib/libjemalloc.so.2"
            ],
            "{d:?}"
        );
        assert!(host_differences(
            (&h, Some("memtrial 0.1.0"), &rn),
            (&h, "memtrial 0.1.0", &rn)
        )
        .is_empty());
    }
}
