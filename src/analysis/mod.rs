//! Pure functions over stored runs: per-variant medians with intervals and
//! ratios against the baseline.

pub mod decide;
pub mod evidence;
mod figure;
pub mod floor;
pub mod gate;
pub mod hosts;
pub mod recommend;
pub mod stats;
pub mod trend;
pub mod why;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::record::{Experiment, RunRecord, RunStatus};

pub use figure::Figure;

/// Fewest successful runs in both groups before a ratio may be called significant.
pub(crate) const MIN_RUNS_FOR_SIGNIFICANCE: usize = 3;

/// A median with its 95% interval, over `n` runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub median: f64,
    pub ci95: [f64; 2],
    pub n: usize,
}

/// A ratio to the baseline's median with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    pub value: f64,
    pub ci95: [f64; 2],
    /// The interval excludes 1 and both groups had enough runs.
    pub significant: bool,
}

/// Everything said about one variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantSummary {
    pub name: String,
    pub is_baseline: bool,
    /// Measured (non-warm-up) runs recorded.
    pub runs_total: usize,
    /// Runs that finished `ok` and count in the figures.
    pub runs_ok: usize,
    /// Measured runs by status (only statuses that occurred).
    pub statuses: BTreeMap<String, usize>,
    /// Runs whose variant could not be confirmed (too short-lived to inspect).
    pub runs_unverified: usize,
    /// The allocator seen in most runs.
    pub allocator_detected: Option<String>,
    pub figures: BTreeMap<Figure, Estimate>,
    /// The smallest and largest value of each figure in `figures` over the runs behind its
    /// median: how much the runs vary (an undecided verdict and a gate say it).
    #[serde(skip)]
    pub range: BTreeMap<Figure, [f64; 2]>,
    pub ratio_to_baseline: BTreeMap<Figure, Ratio>,
    /// Leak or plateau, from the tail of each counted run's RSS series.
    pub trend: Option<TrendSummary>,
    /// Leak or fragmentation, from the allocator's live and held bytes on the steady
    /// part of each counted run (a batch job: its state at the peak).
    pub why: Option<WhySummary>,
    /// The figures a worker's `--driver` reported (`memtrial-figure`), by name.
    pub driver_figures: BTreeMap<String, DriverEstimate>,
    /// Set when this variant's peak of live bytes departs from the program's floor by more
    /// than allocators' accounting differs (`floor::ACCOUNTING`): by how much, and what the
    /// figures say about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_departure: Option<String>,
    /// What each figure rests on, over the counted runs; a figure no run supports is in
    /// here and not in `figures`, with why and what would give it.
    pub evidence: BTreeMap<Figure, FigureEvidence>,
}

/// A figure's evidence over a variant's counted runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureEvidence {
    pub source: crate::record::evidence::Source,
    pub moment: crate::record::evidence::Moment,
    /// Counted runs that have the figure.
    pub runs_with: usize,
    /// Of those, the runs whose figure meets its rule (only they enter the median).
    pub runs_standing: usize,
    /// The median number of samples a run's figure rests on (sampled figures).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<f64>,
    /// The median share of the run those samples span, 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// For a figure at the peak: the runs whose sample lies at the memory peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_at_peak: Option<usize>,
    /// Set when no run's figure meets its rule: the figure is not shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absent: Option<AbsentFigure>,
}

/// Why a figure is not shown, and what would give it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AbsentFigure {
    pub reason: String,
    pub remedy: String,
}

impl FigureEvidence {
    /// Exact figures (kernel marks and counters, the driver's counts) need no coverage note.
    pub fn exact(&self) -> bool {
        self.moment == crate::record::evidence::Moment::Exact
    }
}

/// The evidence of `f` over `runs`; `None` when no run has the figure.
fn figure_evidence(runs: &[&RunRecord], f: Figure) -> Option<FigureEvidence> {
    use crate::record::evidence::Standing;
    let es: Vec<crate::record::evidence::Evidence> =
        runs.iter().filter_map(|r| evidence::of(f, r)).collect();
    let first = es.first()?;
    let covs: Vec<&crate::record::evidence::Coverage> =
        es.iter().filter_map(|e| e.coverage.as_ref()).collect();
    let runs_standing = es.iter().filter(|e| e.standing.stands()).count();
    let absent = (runs_standing == 0)
        .then(|| {
            es.iter().find_map(|e| match &e.standing {
                Standing::Absent { reason, remedy } => Some(AbsentFigure {
                    reason: if es.len() > 1 {
                        format!("in every run; e.g. {reason}")
                    } else {
                        reason.clone()
                    },
                    remedy: remedy.clone(),
                }),
                Standing::Stands => None,
            })
        })
        .flatten();
    let med = |xs: Vec<f64>| (!xs.is_empty()).then(|| stats::median(&xs));
    Some(FigureEvidence {
        source: first.source,
        moment: first.moment,
        runs_with: es.len(),
        runs_standing,
        samples: med(covs.iter().map(|c| c.samples as f64).collect()),
        share: med(covs.iter().map(|c| c.share()).collect()),
        runs_at_peak: covs.iter().any(|c| c.brackets_peak.is_some()).then(|| {
            covs.iter()
                .filter(|c| c.brackets_peak == Some(true))
                .count()
        }),
        absent,
    })
}

/// A driver's figure summarised like every other: median, interval, ratio to the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriverEstimate {
    /// The unit the driver gave (from the first run that gave one).
    pub unit: Option<String>,
    #[serde(flatten)]
    pub estimate: Estimate,
    /// Absent for the baseline, or when the baseline has no such figure.
    pub ratio_to_baseline: Option<Ratio>,
}

/// The names of every driver figure in `runs`.
fn driver_names(runs: &[&RunRecord]) -> std::collections::BTreeSet<String> {
    runs.iter()
        .filter_map(|r| r.driver.as_ref())
        .flat_map(|d| d.figures.keys().cloned())
        .collect()
}

fn driver_values(runs: &[&RunRecord], name: &str) -> Vec<f64> {
    runs.iter()
        .filter_map(|r| r.driver.as_ref()?.figures.get(name).map(|f| f.value))
        .collect()
}

/// Per driver figure: median and 95% interval over the ok runs, and the ratio to the
/// baseline's, with the same functions as the fixed figures.
fn summarise_driver(
    ok: &[&RunRecord],
    base: &[&RunRecord],
    is_baseline: bool,
    seed: u64,
) -> BTreeMap<String, DriverEstimate> {
    let mut out = BTreeMap::new();
    for (k, name) in driver_names(ok).into_iter().enumerate() {
        let xs = driver_values(ok, &name);
        let s = seed.wrapping_add(0xD1F0_0000 + k as u64);
        let (lo, hi) = stats::median_ci95(&xs, s);
        let unit = ok
            .iter()
            .filter_map(|r| r.driver.as_ref()?.figures.get(&name)?.unit.clone())
            .next();
        let ratio = (!is_baseline)
            .then(|| {
                let b = driver_values(base, &name);
                let (value, (lo, hi)) = stats::ratio_ci95(&xs, &b, s ^ 0xA5A5)?;
                let enough =
                    xs.len() >= MIN_RUNS_FOR_SIGNIFICANCE && b.len() >= MIN_RUNS_FOR_SIGNIFICANCE;
                Some(Ratio {
                    value,
                    ci95: [lo, hi],
                    significant: enough && (hi < 1.0 || lo > 1.0),
                })
            })
            .flatten();
        out.insert(
            name,
            DriverEstimate {
                unit,
                estimate: Estimate {
                    median: stats::median(&xs),
                    ci95: [lo, hi],
                    n: xs.len(),
                },
                ratio_to_baseline: ratio,
            },
        );
    }
    out
}

/// The leak-or-fragmentation verdicts of a variant's runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhySummary {
    /// The verdict most runs got (`leak`, `fragmentation`, `plateau`, `too_short`,
    /// `at_peak`, `rss_only`).
    pub verdict: String,
    /// Runs per verdict.
    pub runs: BTreeMap<String, usize>,
    /// The median run's verdict in words, with its figures.
    pub sentence: String,
    /// The median run's live and held bytes, the figures its sentence states (the
    /// headline quotes these, never other runs' medians).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_bytes: Option<f64>,
    /// Why the median run has no allocator figures, when it has none.
    #[serde(skip)]
    pub(crate) missing: Option<String>,
}

fn summarise_whys(runs: &[&RunRecord]) -> Option<WhySummary> {
    let whys: Vec<(why::Why, u64)> = runs
        .iter()
        .map(|r| (why::run_why(r), r.peak_rss_bytes))
        .collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (w, _) in &whys {
        *counts.entry(w.name().to_string()).or_insert(0) += 1;
    }
    let verdict = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(v, _)| v.clone())?;
    let mut with: Vec<&(why::Why, u64)> =
        whys.iter().filter(|(w, _)| w.name() == verdict).collect();
    with.sort_by_key(|(_, peak)| *peak);
    let median = with.get(with.len().saturating_sub(1) / 2)?;
    let (live_bytes, held_bytes) = median.0.live_and_held();
    let missing = match &median.0 {
        why::Why::AtPeak { missing, .. } => missing.clone(),
        _ => None,
    };
    Some(WhySummary {
        sentence: median.0.sentence(),
        verdict,
        runs: counts,
        live_bytes,
        held_bytes,
        missing,
    })
}

/// A batch job's state at its RSS peak in the figures the table shows for it (each the
/// median over the runs where it stands), so that the line and the table never disagree;
/// other verdicts keep the median run's words (their figures are the steady window's).
fn in_the_tables_figures(mut w: WhySummary, figures: &BTreeMap<Figure, Estimate>) -> WhySummary {
    if w.verdict != "at_peak" {
        return w;
    }
    let get = |f: Figure| figures.get(&f).map(|e| e.median);
    let Some(rss) = get(Figure::PeakRssBytes) else {
        return w;
    };
    let (live, held, ratio) = (
        get(Figure::LiveAtPeakBytes),
        get(Figure::HeldAtPeakBytes),
        get(Figure::HeldOverLive),
    );
    let missing = match (&live, &held) {
        (None, None) => w.missing.clone(),
        _ => None,
    };
    w.sentence = why::at_peak_sentence(live, held, ratio, rss, missing.as_deref());
    w.live_bytes = live;
    w.held_bytes = held;
    w
}

/// The leak-or-plateau verdicts of a variant's runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendSummary {
    /// The verdict most runs got (`leak`, `shrinking`, `plateau`, `too_short`).
    pub verdict: String,
    /// Runs per verdict.
    pub runs: BTreeMap<String, usize>,
    /// The median run's verdict in words, e.g. "grows 12 MiB/min [8, 15], no plateau".
    pub sentence: String,
}

/// A run's memory trend in report words.
pub(crate) fn trend_phrase(t: &trend::Trend) -> String {
    use crate::units::format_bytes;
    let rate = |b: f64| {
        if b < 0.0 {
            format!("-{}", format_bytes(-b))
        } else {
            format_bytes(b)
        }
    };
    match t {
        trend::Trend::Leak {
            slope_bytes_per_min,
            ci,
            ..
        } => format!(
            "grows {}/min [{}, {}], no plateau",
            rate(*slope_bytes_per_min),
            rate(ci.0),
            rate(ci.1)
        ),
        trend::Trend::Shrinking {
            slope_bytes_per_min,
            level_bytes,
            ..
        } => format!(
            "gives memory back at the end: {}/min from about {}",
            rate(*slope_bytes_per_min),
            format_bytes(*level_bytes)
        ),
        trend::Trend::Plateau {
            level_bytes,
            since_seconds,
            ..
        } => format!(
            "plateaus at {} after {:.1} s",
            format_bytes(*level_bytes),
            since_seconds
        ),
        trend::Trend::TooShort {
            seconds,
            need_seconds,
            cycles,
            undecided,
            ..
        } if cycles.is_some() || undecided.is_some() => format!(
            "too short to tell: {}",
            trend::cannot_tell_clause(
                "the samples",
                cycles.as_ref(),
                undecided.as_ref(),
                *seconds,
                *need_seconds
            )
            .unwrap_or_default()
        ),
        trend::Trend::TooShort {
            samples,
            seconds,
            need_seconds,
            ..
        } if *need_seconds >= why::MIN_LEAK_STEADY_SECONDS => format!(
            "too short: {samples} samples over {seconds:.0} s of steady phase cannot tell growth from warm-up; a verdict needs {need_seconds:.0} s: run {} more",
            why::more_minutes(need_seconds - seconds)
        ),
        trend::Trend::TooShort {
            samples,
            seconds,
            late_samples,
            ..
        } => format!(
            "too short to judge ({samples} samples over {seconds:.1} s{})",
            trend::late_clause(*late_samples)
        ),
    }
}

/// The trend of one run's tree RSS over its steady phase (a server's load, a worker's or
/// service's driven phase); `None` for a batch run, which has no steady phase and gets no
/// trend verdict. Growth over a phase shorter than [`why::MIN_LEAK_STEADY_SECONDS`] is
/// "too short", never a leak: it cannot be told from warm-up.
pub(crate) fn run_trend(r: &RunRecord) -> Option<trend::Trend> {
    let (a, b) = why::steady_window(r)?;
    let series: Vec<(f64, f64)> = r
        .samples
        .iter()
        .filter(|s| s.t_seconds >= a && s.t_seconds <= b)
        .map(|s| (s.t_seconds, s.rss_bytes as f64))
        .collect();
    let rules = trend::TrendRules::default();
    let t = trend::trend(&series, &rules);
    Some(match t {
        trend::Trend::Leak { .. } if b - a < why::MIN_LEAK_STEADY_SECONDS => {
            trend::Trend::TooShort {
                samples: series.len(),
                seconds: b - a,
                need_samples: rules.min_samples,
                need_seconds: why::MIN_LEAK_STEADY_SECONDS,
                late_samples: None,
                cycles: None,
                undecided: None,
            }
        }
        t => t,
    })
}

fn summarise_trends(runs: &[&RunRecord]) -> Option<TrendSummary> {
    let trends: Vec<(&RunRecord, trend::Trend)> = runs
        .iter()
        .filter_map(|r| Some((*r, run_trend(r)?)))
        .collect();
    if trends.is_empty() {
        return None;
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, t) in &trends {
        *counts.entry(t.name().to_string()).or_insert(0) += 1;
    }
    let verdict = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(v, _)| v.clone())?;
    // Words from the median run (by mean RSS) among those with the majority verdict.
    let mut with: Vec<&(&RunRecord, trend::Trend)> =
        trends.iter().filter(|(_, t)| t.name() == verdict).collect();
    with.sort_by_key(|(r, _)| r.mean_rss_bytes);
    let median = with.get(with.len().saturating_sub(1) / 2)?;
    Some(TrendSummary {
        sentence: trend_phrase(&median.1),
        verdict,
        runs: counts,
    })
}

impl VariantSummary {
    /// Every measured run succeeded and was verified.
    pub(crate) fn clean(&self) -> bool {
        self.runs_ok == self.runs_total && self.runs_unverified == 0 && self.runs_total > 0
    }
}

/// The analysis of one experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub baseline: String,
    pub variants: Vec<VariantSummary>,
    /// A server trial (runs carry load figures).
    pub server: bool,
    /// The most processes alive at once in any measured run: from 2 on, the RSS sum
    /// counts shared pages once per process.
    pub processes_at_once: u32,
    /// Whether the runs' processes shared for a meaningful share of the run (a forking
    /// server) or only during start-up (a shim, a wrapper, `sh -c`).
    pub sharing: Sharing,
    /// The program's floor: the most it was seen to have live (`floor`); `None` without
    /// allocator figures that stand.
    pub floor: Option<floor::Floor>,
}

/// Smallest share of a run during which several processes coexisted for the tree to count
/// as one that shares memory (and PSS to be weighed).
pub(crate) const MIN_SHARING_SHARE: f64 = 0.5;

/// How the runs' processes coexisted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sharing {
    /// One process at a time.
    OneProcess,
    /// Several processes, but only for a short stretch (start-up helpers of a shim or a
    /// wrapper): not a tree that shares memory; the kernel's peak decides.
    Brief { processes: u32, share: f64 },
    /// Several processes for a meaningful share of the run (a forking server, a pool).
    Shared {
        processes: u32,
        share: f64,
        /// Peak PSS meets its rule (a read at the memory peak) in every run that shared.
        pss_covered: bool,
    },
}

impl Analysis {
    /// The runs' processes shared for a meaningful share of the run (a forking server, a
    /// pool of workers): RSS sums double-count, PSS and USS are shown beside them.
    pub(crate) fn multi_process(&self) -> bool {
        matches!(self.sharing, Sharing::Shared { .. })
    }
}

/// How the counted runs' processes coexisted: the median run's share of time with two or
/// more processes decides.
fn sharing(e: &Experiment, processes: u32) -> Sharing {
    if processes < 2 {
        return Sharing::OneProcess;
    }
    let runs: Vec<&RunRecord> = e.runs.iter().filter(|r| r.counts()).collect();
    let shares: Vec<f64> = runs.iter().map(|r| evidence::sharing_share(r)).collect();
    let share = if shares.is_empty() {
        0.0
    } else {
        stats::median(&shares)
    };
    if share < MIN_SHARING_SHARE {
        return Sharing::Brief { processes, share };
    }
    let pss_covered = runs
        .iter()
        .filter(|r| evidence::sharing_share(r) >= MIN_SHARING_SHARE)
        .all(|r| evidence::stands(Figure::PeakPssBytes, r));
    Sharing::Shared {
        processes,
        share,
        pss_covered,
    }
}

/// The figure's values over the runs where it meets its rule (see [`evidence`]).
fn values(runs: &[&RunRecord], f: Figure) -> Vec<f64> {
    runs.iter()
        .filter(|r| evidence::stands(f, r))
        .filter_map(|r| f.of(r))
        .collect()
}

fn seed_for(base_seed: u64, variant_idx: usize, f: Figure) -> u64 {
    base_seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((variant_idx as u64) << 8 | f.index())
}

/// A variant's figures over its counted runs.
struct FigureSet {
    figures: BTreeMap<Figure, Estimate>,
    range: BTreeMap<Figure, [f64; 2]>,
    ratio_to_baseline: BTreeMap<Figure, Ratio>,
    evidence: BTreeMap<Figure, FigureEvidence>,
}

/// Each figure of the counted runs `ok`: its median with a 95% interval (bootstrap seeded
/// by `seed(figure)`), its range, its evidence, and (not for the baseline, nor for a
/// figure each variant takes at its own moment) its ratio to the baseline's runs.
fn summarise_figures(
    ok: &[&RunRecord],
    base_runs: &[&RunRecord],
    is_baseline: bool,
    seed: impl Fn(Figure) -> u64,
) -> FigureSet {
    let mut set = FigureSet {
        figures: BTreeMap::new(),
        range: BTreeMap::new(),
        ratio_to_baseline: BTreeMap::new(),
        evidence: BTreeMap::new(),
    };
    for f in Figure::ALL {
        if let Some(ev) = figure_evidence(ok, f) {
            set.evidence.insert(f, ev);
        }
        let xs = values(ok, f);
        if xs.is_empty() {
            continue;
        }
        let s = seed(f);
        let (lo, hi) = stats::median_ci95(&xs, s);
        set.figures.insert(
            f,
            Estimate {
                median: stats::median(&xs),
                ci95: [lo, hi],
                n: xs.len(),
            },
        );
        set.range.insert(
            f,
            [
                xs.iter().copied().fold(f64::INFINITY, f64::min),
                xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ],
        );
        // No ratio for a figure each variant takes at its own moment (`Figure::compared`).
        if is_baseline || !f.compared() {
            continue;
        }
        let base = values(base_runs, f);
        if let Some((value, (lo, hi))) = stats::ratio_ci95(&xs, &base, s ^ 0xA5A5) {
            let enough =
                xs.len() >= MIN_RUNS_FOR_SIGNIFICANCE && base.len() >= MIN_RUNS_FOR_SIGNIFICANCE;
            set.ratio_to_baseline.insert(
                f,
                Ratio {
                    value,
                    ci95: [lo, hi],
                    significant: enough && (hi < 1.0 || lo > 1.0),
                },
            );
        }
    }
    set
}

/// Summarises every variant of an experiment.
pub fn analyse(e: &Experiment) -> Analysis {
    let seed = e.plan.seed;
    let counted = |name: &str| -> Vec<&RunRecord> {
        e.runs
            .iter()
            .filter(|r| r.variant == name && r.counts())
            .collect()
    };
    let base_runs = counted(&e.plan.baseline);
    let mut variants = Vec::new();
    for (vi, v) in e.plan.variants.iter().enumerate() {
        let measured: Vec<&RunRecord> = e
            .runs
            .iter()
            .filter(|r| r.variant == v.name && !r.warmup)
            .collect();
        let ok = counted(&v.name);
        let mut statuses = BTreeMap::new();
        for r in &measured {
            *statuses.entry(r.status.as_str().to_string()).or_insert(0) += 1;
        }
        let runs_unverified = ok.iter().filter(|r| !r.verification.ok()).count();
        let mut alloc_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &measured {
            *alloc_counts
                .entry(r.allocator_detected.as_str())
                .or_insert(0) += 1;
        }
        let allocator_detected = alloc_counts
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(a, _)| a.to_string());
        let is_baseline = v.name == e.plan.baseline;
        let FigureSet {
            figures,
            range,
            ratio_to_baseline,
            evidence,
        } = summarise_figures(&ok, &base_runs, is_baseline, |f| seed_for(seed, vi, f));
        let trend = summarise_trends(&ok);
        let driver_figures = summarise_driver(
            &ok,
            &base_runs,
            is_baseline,
            seed_for(seed, vi, Figure::PeakRssBytes),
        );
        let why = summarise_whys(&ok).map(|w| in_the_tables_figures(w, &figures));
        variants.push(VariantSummary {
            driver_figures,
            trend,
            why,
            name: v.name.clone(),
            is_baseline,
            runs_total: measured.len(),
            runs_ok: ok.len(),
            statuses,
            runs_unverified,
            allocator_detected,
            figures,
            range,
            ratio_to_baseline,
            evidence,
            floor_departure: None,
        });
    }
    let processes_at_once = e
        .runs
        .iter()
        .filter(|r| !r.warmup)
        .map(RunRecord::processes_at_once)
        .max()
        .unwrap_or(0);
    judge_departures(&mut variants);
    let floor = floor::floor(&variants);
    if let Some(f) = &floor {
        floor::judge(&mut variants, f);
    }
    Analysis {
        baseline: e.plan.baseline.clone(),
        variants,
        floor,
        server: e.plan.server.is_some(),
        processes_at_once,
        sharing: sharing(e, processes_at_once),
    }
}

/// A variant whose live bytes "grow" while the same workload's stay flat under another
/// variant — the baseline included either way — is not called a leak: the allocator's
/// count departs, not the program (`why::flat_beside`, the rule a soak and `judge` apply
/// too). Where a variant's peak of live bytes departs from the program's, `floor` says so.
fn judge_departures(variants: &mut [VariantSummary]) {
    let moves: Vec<(&str, Option<bool>)> = variants
        .iter()
        .map(|s| {
            let grows = s.why.as_ref().and_then(|w| match w.verdict.as_str() {
                "leak" => Some(true),
                "plateau" | "fragmentation" => Some(false),
                _ => None,
            });
            (s.name.as_str(), grows)
        })
        .collect();
    let flats = why::flat_beside(&moves);
    for (s, flat) in variants.iter_mut().zip(flats) {
        let Some(flat_under) = flat else { continue };
        let alloc = match s.allocator_detected.as_deref() {
            Some(a) if !a.is_empty() => a.to_string(),
            _ => s.name.clone(),
        };
        let Some(w) = s.why.as_mut() else { continue };
        let leaks = w.runs.remove("leak").unwrap_or(0);
        *w.runs
            .entry(why::ALLOCATOR_DEPARTS.to_string())
            .or_insert(0) += leaks;
        w.verdict = why::ALLOCATOR_DEPARTS.into();
        w.sentence =
            why::departs_sentence(&flat_under, why::departure_cause(&alloc, true), &w.sentence);
    }
}

/// True when any measured run did not finish `ok`.
pub fn any_failed(e: &Experiment) -> bool {
    e.runs
        .iter()
        .any(|r| !r.warmup && r.status != RunStatus::Ok)
}

#[cfg(test)]
mod departure_tests {
    use super::*;
    use crate::record::{AllocatorPoint, DriverFigures};

    const MB: u64 = 1 << 20;

    /// Every counted run a worker driven for `seconds`, its allocator's live bytes
    /// sampled every second: growing under the variants `grows` names, flat under the
    /// others.
    fn driven(seconds: f64, grows: &[&str]) -> Experiment {
        let mut e = crate::report::fixture::experiment();
        for r in e.runs.iter_mut() {
            r.driver = Some(DriverFigures {
                driven_start_seconds: 0.0,
                ready_seconds: None,
                driven_end_seconds: seconds,
                figures: Default::default(),
                ignored: Vec::new(),
            });
            let growing = grows.contains(&r.variant.as_str());
            if let Some(a) = r.inside.allocator.as_mut() {
                a.series = (0..=seconds as u64)
                    .map(|t| {
                        let live = 100 * MB + if growing { t * 2 * MB } else { (t % 3) * 4096 };
                        AllocatorPoint {
                            t_seconds: t as f64,
                            live_bytes: Some(live),
                            held_bytes: Some(live + 10 * MB),
                            ..Default::default()
                        }
                    })
                    .collect();
            }
        }
        e
    }

    #[test]
    fn live_growth_under_one_allocator_while_the_baseline_is_flat_is_not_a_leak() {
        let a = analyse(&driven(200.0, &["jemalloc"]));
        let base = a.variants.iter().find(|s| s.name == "glibc").unwrap();
        // Live flat under the baseline (its fixture's RSS grows: fragmentation, not a leak).
        let v = &base.why.as_ref().unwrap().verdict;
        assert!(v == "plateau" || v == "fragmentation", "{v}");
        let je = a.variants.iter().find(|s| s.name == "jemalloc").unwrap();
        let w = je.why.as_ref().unwrap();
        assert_eq!(w.verdict, "allocator_departs", "{}", w.sentence);
        assert!(w.sentence.starts_with("not a leak"), "{}", w.sentence);
        assert!(w.sentence.contains("tcache_bytes"), "{}", w.sentence);
        assert!(!w.runs.contains_key("leak"), "{:?}", w.runs);
    }

    #[test]
    fn the_baselines_live_growth_while_the_others_are_flat_is_not_a_leak() {
        // The Rails defect: glibc (the baseline) "leaks", arena2 and jemalloc on the same
        // workload are flat.
        let a = analyse(&driven(200.0, &["glibc"]));
        let base = a.variants.iter().find(|s| s.name == "glibc").unwrap();
        let w = base.why.as_ref().unwrap();
        assert_eq!(w.verdict, "allocator_departs", "{}", w.sentence);
        assert!(
            w.sentence.starts_with(
                "not a leak: live bytes grow here but stay flat under arena2 and jemalloc"
            ),
            "{}",
            w.sentence
        );
        assert!(w.sentence.contains("mallinfo2"), "{}", w.sentence);
        assert!(
            w.sentence.contains("was: leak: live bytes grow"),
            "{}",
            w.sentence
        );
        for v in ["arena2", "jemalloc"] {
            let s = a.variants.iter().find(|s| s.name == v).unwrap();
            assert_ne!(s.why.as_ref().unwrap().verdict, "leak");
        }
        // Growth under every variant is the program's: a leak in each.
        let a = analyse(&driven(200.0, &["glibc", "arena2", "jemalloc"]));
        for s in &a.variants {
            let w = s.why.as_ref().unwrap();
            assert_eq!(w.verdict, "leak", "{}: {}", s.name, w.sentence);
        }
    }

    #[test]
    fn live_growth_over_a_short_steady_phase_is_too_short_everywhere() {
        // 25 s of a warming-up worker: no leak under any allocator, and how long to run.
        let a = analyse(&driven(25.0, &["jemalloc"]));
        let je = a.variants.iter().find(|s| s.name == "jemalloc").unwrap();
        let w = je.why.as_ref().unwrap();
        assert_eq!(w.verdict, "too_short", "{}", w.sentence);
        assert!(w.sentence.contains("run 2 more minutes"), "{}", w.sentence);
    }
}
