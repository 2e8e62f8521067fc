//! What to run with: the memory-versus-speed Pareto front, a pick with the figures that
//! justify it, and how to apply it. Says plainly when nothing is significant.

use serde::Serialize;

use super::decide::{more_runs, side, MoreRuns, Scale, Side};
use super::{Analysis, Figure, Ratio, VariantSummary, MIN_RUNS_FOR_SIGNIFICANCE};
use crate::plan::Plan;

/// The memory figure a recommendation weighs: peak RSS; for an experiment whose processes
/// shared for a meaningful share of the run ([`super::Sharing::Shared`], not a shim's
/// start-up helpers), peak PSS when it meets its rule in every counted run. An RSS sum counts
/// each shared page once per process that maps it (a forking server's copy-on-write heap
/// N times over), so between variants that share differently it compares the wrong thing;
/// PSS divides each shared page among the processes that map it.
pub fn memory(a: &Analysis) -> Figure {
    let pss_everywhere = a.variants.iter().filter(|s| s.runs_ok > 0).all(|s| {
        s.figures
            .get(&Figure::PeakPssBytes)
            .is_some_and(|e| e.n == s.runs_ok)
    });
    let pss_covered = matches!(
        a.sharing,
        super::Sharing::Shared {
            pss_covered: true,
            ..
        }
    );
    if pss_covered && pss_everywhere {
        Figure::PeakPssBytes
    } else {
        Figure::PeakRssBytes
    }
}

/// The speed figure: wall time of a batch job; p95 latency of a server (as Heroku
/// weighed `MALLOC_ARENA_MAX`).
pub fn speed(a: &Analysis) -> Figure {
    if a.server {
        Figure::LatencyP95Ms
    } else {
        Figure::WallSeconds
    }
}

/// The outcome of weighing the variants.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Switch to this variant.
    Pick {
        variant: String,
        /// One sentence with the figures.
        reason: String,
        /// Trade-offs against the other variants on the front.
        tradeoffs: Vec<String>,
    },
    /// The baseline is as good as anything measured: keep it.
    KeepBaseline { reason: String },
    /// Some variant's memory interval straddles the pick's threshold: the runs cannot
    /// tell yet whether it is leaner; how many more would likely tell.
    Undecided {
        reason: String,
        variants: Vec<OpenVariant>,
    },
    /// No difference was significant: recommend nothing.
    NoSignificantDifference { reason: String },
    /// Too few clean runs to say anything.
    NotEnoughRuns { reason: String },
}

/// A variant the runs cannot decide yet: its memory ratio's interval straddles the pick's
/// threshold (1 when it looks 5% or more leaner: is it leaner at all? 0.95 otherwise: is
/// it leaner by 5%?).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenVariant {
    pub variant: String,
    pub figure: Figure,
    pub ratio: f64,
    pub ci95: [f64; 2],
    /// The threshold the interval straddles.
    pub threshold: f64,
    pub runs: usize,
    pub baseline_runs: usize,
    /// The variant's largest run over its smallest in the figure, and the baseline's.
    pub spread: Option<f64>,
    pub baseline_spread: Option<f64>,
    /// How many more runs of each would likely decide, from the spread so far.
    pub more_runs: MoreRuns,
}

impl OpenVariant {
    /// One sentence: what it looks like, the interval, the spread, the runs that would tell.
    pub fn sentence(&self, baseline: &str) -> String {
        let p = (1.0 - self.ratio).abs() * 100.0;
        let looks = if self.threshold >= 1.0 {
            format!(
                "{} looks {p:.0}% leaner than {baseline}, but not significantly",
                self.variant
            )
        } else {
            format!(
                "{} may or may not be {:.0}% or more leaner than {baseline}",
                self.variant,
                (1.0 - PICK_MAX_MEMORY_RATIO) * 100.0
            )
        };
        let vary = |s: Option<f64>| s.map_or("?".to_string(), |s| format!("{s:.2}×"));
        format!(
            "{looks} ({} {:.2}× [{:.2}, {:.2}] over {} and {} runs, straddling {:.2}; its runs vary {}, {baseline}'s {}): {} would likely tell",
            label(self.figure),
            self.ratio,
            self.ci95[0],
            self.ci95[1],
            self.runs,
            self.baseline_runs,
            self.threshold,
            vary(self.spread),
            vary(self.baseline_spread),
            self.more_runs.phrase()
        )
    }
}

/// Where a weighed variant stands on the memory figure against the pick's threshold.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryStanding {
    /// Significantly leaner, by 5% or more: a candidate for the pick.
    Leaner,
    /// Its interval lies above 0.95: not leaner by 5% (it may be the same, or heavier).
    NotLeaner,
    /// Its interval straddles the threshold.
    Open(OpenVariant),
}

impl MemoryStanding {
    /// The standing's name for the sequential rule (`None`: open).
    pub fn answer(&self) -> Option<&'static str> {
        match self {
            MemoryStanding::Leaner => Some("leaner"),
            MemoryStanding::NotLeaner => Some("not_leaner"),
            MemoryStanding::Open(_) => None,
        }
    }
}

/// The largest value over the smallest.
fn spread(s: &VariantSummary, f: Figure) -> Option<f64> {
    let [lo, hi] = *s.range.get(&f)?;
    (lo > 0.0).then(|| hi / lo)
}

/// Every weighed variant but the baseline (all its runs ok and verified, enough of them),
/// with where it stands on the memory figure; a variant without a ratio in that figure is
/// left out. Empty when the baseline itself is not sound.
pub fn standings(a: &Analysis) -> Vec<(String, MemoryStanding)> {
    let memory = memory(a);
    let Some(base) = a.variants.iter().find(|s| s.is_baseline && eligible(s)) else {
        return Vec::new();
    };
    let base_runs = base.figures.get(&memory).map_or(0, |e| e.n);
    a.variants
        .iter()
        .filter(|s| !s.is_baseline && eligible(s))
        .filter_map(|s| {
            let r = s.ratio_to_baseline.get(&memory)?;
            let threshold = if r.value <= PICK_MAX_MEMORY_RATIO {
                1.0
            } else {
                PICK_MAX_MEMORY_RATIO
            };
            let standing = match side(r.ci95, threshold) {
                Side::Below if r.significant => MemoryStanding::Leaner,
                Side::Above => MemoryStanding::NotLeaner,
                _ => {
                    let runs = s.figures.get(&memory).map_or(0, |e| e.n);
                    MemoryStanding::Open(OpenVariant {
                        variant: s.name.clone(),
                        figure: memory,
                        ratio: r.value,
                        ci95: r.ci95,
                        threshold,
                        runs,
                        baseline_runs: base_runs,
                        spread: spread(s, memory),
                        baseline_spread: spread(base, memory),
                        more_runs: more_runs(
                            r.value,
                            r.ci95,
                            runs.min(base_runs),
                            threshold,
                            Scale::Log,
                        ),
                    })
                }
            };
            Some((s.name.clone(), standing))
        })
        .collect()
}

/// What `run --until-decided` looks at: each weighed variant's standing on the memory
/// figure (decided `leaner` or `not_leaner`, or open with why).
pub fn look(a: &Analysis) -> super::decide::Look {
    use super::decide::{Look, Standing};
    let mut l = Look::default();
    for (name, st) in standings(a) {
        let s = match (&st, st.answer()) {
            (MemoryStanding::Open(o), _) => {
                l.open.push(format!("{name}: {}", o.sentence(&a.baseline)));
                Standing::Open
            }
            (_, Some(answer)) => Standing::Decided(answer.into()),
            (_, None) => Standing::Open,
        };
        l.standings.insert(name, s);
    }
    l
}

/// The recommendation with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    pub verdict: Verdict,
    /// The memory figure weighed (`peak_rss_bytes`, or `peak_pss_bytes` when the runs had
    /// several processes at once; see [`memory`]).
    pub memory_figure: Figure,
    /// The speed figure weighed: wall time of a batch job, p95 latency of a server.
    pub speed_figure: Figure,
    /// Variants not dominated on (memory figure, speed figure) among those whose runs all
    /// succeeded.
    pub pareto_front: Vec<String>,
    /// Variants left out of the weighing, and why (failures, OOM kills, not effective).
    pub excluded: Vec<String>,
}

impl Recommendation {
    /// The axes of the Pareto front, e.g. "peak RSS vs wall time".
    pub fn axes(&self) -> String {
        format!(
            "{} vs {}",
            label(self.memory_figure),
            label(self.speed_figure)
        )
    }

    pub fn headline(&self) -> String {
        match &self.verdict {
            Verdict::Pick {
                variant, reason, ..
            } => format!("Use {variant}: {reason}"),
            Verdict::KeepBaseline { reason } => format!("Keep the baseline: {reason}"),
            Verdict::Undecided { reason, .. } => format!("Undecided: {reason}"),
            Verdict::NoSignificantDifference { reason } => {
                format!("No recommendation: {reason}")
            }
            Verdict::NotEnoughRuns { reason } => format!("No recommendation: {reason}"),
        }
    }
}

fn pct(r: f64) -> String {
    let p = (r - 1.0) * 100.0;
    if p.abs() < 0.5 {
        "±0%".into()
    } else {
        format!("{p:+.0}%")
    }
}

/// `peak RSS -38% [-41%, -35%]`
pub(crate) fn ratio_phrase(label: &str, r: &Ratio) -> String {
    format!(
        "{label} {} [{}, {}]",
        pct(r.value),
        pct(r.ci95[0]),
        pct(r.ci95[1])
    )
}

pub fn label(f: Figure) -> &'static str {
    match f {
        Figure::PeakRssBytes => "peak RSS",
        Figure::PeakPssBytes => "peak PSS",
        Figure::PeakUssBytes => "peak USS",
        Figure::MeanRssBytes => "mean RSS",
        Figure::WallSeconds => "wall time",
        Figure::CpuSeconds => "CPU time",
        Figure::LatencyP95Ms => "p95 latency",
        _ => f.key(),
    }
}

fn eligible(s: &VariantSummary) -> bool {
    s.clean() && s.runs_ok >= MIN_RUNS_FOR_SIGNIFICANCE
}

fn median(s: &VariantSummary, f: Figure) -> Option<f64> {
    s.figures.get(&f).map(|e| e.median)
}

/// Why each variant left out of the weighing was left out, in the analysis's order.
fn excluded_reasons(a: &Analysis) -> Vec<String> {
    let mut excluded = Vec::new();
    for s in &a.variants {
        if !eligible(s) {
            let why = if s.runs_ok < MIN_RUNS_FOR_SIGNIFICANCE && s.clean() {
                format!(
                    "{} ok run(s), fewer than {MIN_RUNS_FOR_SIGNIFICANCE}",
                    s.runs_ok
                )
            } else {
                let bad: Vec<String> = s
                    .statuses
                    .iter()
                    .filter(|(k, _)| k.as_str() != "ok")
                    .map(|(k, n)| format!("{n} {k}"))
                    .collect();
                if bad.is_empty() {
                    format!("{} unverified run(s)", s.runs_unverified)
                } else {
                    format!("{} of {} runs: {}", bad.len(), s.runs_total, bad.join(", "))
                }
            };
            excluded.push(format!("{}: {why}", s.name));
        }
    }
    excluded
}

/// Why there is no sound baseline to compare against (too few or unclean runs).
fn no_baseline_reason(a: &Analysis) -> String {
    let ok = a
        .variants
        .iter()
        .find(|s| s.is_baseline)
        .map_or(0, |s| s.runs_ok);
    if ok < MIN_RUNS_FOR_SIGNIFICANCE {
        format!(
            "the baseline '{}' has {ok} ok run(s); with fewer than {MIN_RUNS_FOR_SIGNIFICANCE} nothing can be called significant (use --runs 5)",
            a.baseline
        )
    } else {
        format!(
            "not every run of the baseline '{}' finished ok and verified, so there is nothing sound to compare against",
            a.baseline
        )
    }
}

/// The most a pick's memory may be, as a ratio to the baseline's: a variant is recommended
/// only when it saves at least 5%. A significant 0.4% (three runs of a 1 s job whose
/// variants differ by a few pages) is real but is no reason to change a production setting.
pub(crate) const PICK_MAX_MEMORY_RATIO: f64 = 0.95;

/// The variant's ratio to the baseline in `f`, when it is significant.
fn sig(s: &VariantSummary, f: Figure) -> Option<Ratio> {
    s.ratio_to_baseline
        .get(&f)
        .filter(|r| r.significant)
        .copied()
}

/// The pick among the non-baseline variants on the front with significantly less
/// memory: the leanest not significantly slower, or the leanest when all are slower.
fn pick_variant<'p>(
    pool: &'p [&'p VariantSummary],
    front: &[String],
    memory: Figure,
    speed: Figure,
) -> Option<&'p &'p VariantSummary> {
    // Candidates: on the front, significantly less memory, and not significantly slower.
    let better_memory: Vec<&&VariantSummary> = pool
        .iter()
        .filter(|s| !s.is_baseline && front.contains(&s.name))
        .filter(|s| sig(s, memory).is_some_and(|r| r.value <= PICK_MAX_MEMORY_RATIO))
        .collect();
    let not_slower: Vec<&&VariantSummary> = better_memory
        .iter()
        .copied()
        .filter(|s| !sig(s, speed).is_some_and(|r| r.value > 1.0))
        .collect();
    // The leanest variant that is not slower; only when every lean one is slower, the leanest.
    let shortlist = if not_slower.is_empty() {
        &better_memory
    } else {
        &not_slower
    };
    shortlist
        .iter()
        .min_by(|a, b| {
            median(a, memory)
                .unwrap_or(f64::MAX)
                .total_cmp(&median(b, memory).unwrap_or(f64::MAX))
        })
        .copied()
}

/// The pick's reason: its memory and speed ratios to the baseline, with run counts; when
/// weighed on PSS, peak RSS beside it and a word on why.
fn pick_reason(
    pick: &VariantSummary,
    base: &VariantSummary,
    memory: Figure,
    speed: Figure,
) -> String {
    let mut parts = Vec::new();
    let second = if memory == Figure::PeakRssBytes {
        Figure::MeanRssBytes
    } else {
        Figure::PeakRssBytes
    };
    for f in [memory, second, speed] {
        if let Some(r) = pick.ratio_to_baseline.get(&f) {
            let mut p = ratio_phrase(label(f), r);
            if !r.significant {
                p.push_str(" (not significant)");
            }
            parts.push(p);
        }
    }
    let weighed = if memory == Figure::PeakPssBytes {
        "; weighed on peak PSS, as the processes share pages (an RSS sum counts them once per process)"
    } else {
        ""
    };
    format!(
        "{} against {} over {} and {} runs{weighed}",
        parts.join(", "),
        base.name,
        pick.runs_ok,
        base.runs_ok
    )
}

/// The pick's trade-offs against the other variants on the front.
fn pick_tradeoffs(
    pool: &[&VariantSummary],
    pick: &VariantSummary,
    front: &[String],
    memory: Figure,
    speed: Figure,
) -> Vec<String> {
    let mut tradeoffs = Vec::new();
    for other in pool
        .iter()
        .filter(|s| s.name != pick.name && front.contains(&s.name))
    {
        let (Some(pm), Some(om), Some(pt), Some(ot)) = (
            median(pick, memory),
            median(other, memory),
            median(pick, speed),
            median(other, speed),
        ) else {
            continue;
        };
        let faster = 1.0 - ot / pt;
        let more_mem = om / pm - 1.0;
        let than = format!("than {} (the pick)", pick.name);
        let (mem, spd) = (label(memory), label(speed));
        if faster > 0.0 {
            tradeoffs.push(format!(
                "{} is {:.0}% faster {than} but uses {:.0}% more memory ({mem}, {spd})",
                other.name,
                faster * 100.0,
                more_mem * 100.0
            ));
        } else {
            tradeoffs.push(format!(
                "{} uses {:.0}% {} memory {than} and is {:.0}% slower ({mem}, {spd})",
                other.name,
                more_mem.abs() * 100.0,
                if more_mem >= 0.0 { "more" } else { "less" },
                -faster * 100.0
            ));
        }
    }
    tradeoffs
}

/// Weighs the variants of an analysis.
pub fn recommend(a: &Analysis) -> Recommendation {
    #[allow(non_snake_case)]
    let SPEED = speed(a);
    let memory_figure = memory(a);
    let excluded = excluded_reasons(a);
    let pool: Vec<&VariantSummary> = a.variants.iter().filter(|s| eligible(s)).collect();
    let front = pareto_front(&pool, memory_figure, SPEED);
    let base = pool.iter().find(|s| s.is_baseline);
    let Some(base) = base else {
        let reason = no_baseline_reason(a);
        return Recommendation {
            verdict: Verdict::NotEnoughRuns { reason },
            memory_figure,
            speed_figure: SPEED,
            pareto_front: front,
            excluded,
        };
    };
    let any_sig = pool.iter().filter(|s| !s.is_baseline).any(|s| {
        s.ratio_to_baseline
            .iter()
            .any(|(f, r)| r.significant && !f.explains())
    });
    let open: Vec<OpenVariant> = standings(a)
        .into_iter()
        .filter_map(|(_, st)| match st {
            MemoryStanding::Open(o) => Some(o),
            _ => None,
        })
        .collect();
    let verdict = match pick_variant(&pool, &front, memory_figure, SPEED) {
        Some(pick) => {
            let mut tradeoffs = pick_tradeoffs(&pool, pick, &front, memory_figure, SPEED);
            tradeoffs.extend(open.iter().map(|o| format!("undecided: {}", o.sentence(&base.name))));
            Verdict::Pick {
                variant: pick.name.clone(),
                reason: pick_reason(pick, base, memory_figure, SPEED),
                tradeoffs,
            }
        }
        // Never "keep" or "no difference" where an interval straddles the threshold.
        None if !open.is_empty() => Verdict::Undecided {
            reason: format!(
                "{} (`memtrial run --until-decided` takes them)",
                open.iter()
                    .map(|o| o.sentence(&base.name))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            variants: open,
        },
        None if !any_sig => Verdict::NoSignificantDifference {
            reason: format!(
                "no variant differs significantly from {} in any figure (95% intervals all include 1)",
                base.name
            ),
        },
        None => Verdict::KeepBaseline {
            reason: format!(
                "no variant uses significantly less memory than {}, by {:.0}% or more ({})",
                base.name,
                (1.0 - PICK_MAX_MEMORY_RATIO) * 100.0,
                label(memory_figure)
            ),
        },
    };
    Recommendation {
        verdict,
        memory_figure,
        speed_figure: SPEED,
        pareto_front: front,
        excluded,
    }
}

/// Names of the variants no other variant beats on both memory and speed (both: lower is better).
pub(crate) fn pareto_front(pool: &[&VariantSummary], memory: Figure, speed: Figure) -> Vec<String> {
    let point = |s: &VariantSummary| Some((median(s, memory)?, median(s, speed)?));
    pool.iter()
        .filter_map(|s| Some((s, point(s)?)))
        .filter(|(_, (m, t))| {
            !pool
                .iter()
                .filter_map(|o| point(o))
                .any(|(om, ot)| om <= *m && ot <= *t && (om < *m || ot < *t))
        })
        .map(|(s, _)| s.name.clone())
        .collect()
}

/// How to apply a variant: environment lines, a Dockerfile snippet, a Kubernetes `env:`
/// block, and a check to run in production.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HowToApply {
    pub env: Vec<(String, String)>,
    pub dockerfile: String,
    pub kubernetes: String,
    pub check: String,
}

/// Debian/Ubuntu package providing a preloaded library, by file name.
fn package_for(lib: &str) -> Option<&'static str> {
    let name = lib.rsplit('/').next().unwrap_or(lib);
    [
        ("libjemalloc", "libjemalloc2"),
        ("libtcmalloc_minimal", "libtcmalloc-minimal4"),
        ("libtcmalloc", "libgoogle-perftools4"),
        ("libmimalloc", "libmimalloc2.0"),
    ]
    .into_iter()
    .find(|(prefix, _)| name.starts_with(prefix))
    .map(|(_, p)| p)
}

pub(crate) fn how_to_apply(plan: &Plan, variant: &str) -> Option<HowToApply> {
    use crate::escape;
    let v = plan.variant(variant)?;
    let mut env: Vec<(String, String)> = v.env.clone();
    if let Some(p) = &v.preload {
        env.push(("LD_PRELOAD".into(), p.display().to_string()));
    }
    let mut docker = String::new();
    if let Some(pkg) = v
        .preload
        .as_ref()
        .and_then(|p| package_for(&p.display().to_string()))
    {
        docker.push_str(&format!(
            "RUN apt-get update && apt-get install -y --no-install-recommends {pkg} && rm -rf /var/lib/apt/lists/*\n"
        ));
    }
    for (k, val) in &env {
        match escape::dockerfile_env_key(k)
            .and_then(|key| Ok((key, escape::dockerfile_value(val)?)))
        {
            Ok((key, value)) => docker.push_str(&format!("ENV {key}={value}\n")),
            Err(why) => docker.push_str(&format!(
                "# {}: {}; set it when the container starts\n",
                escape::terminal(k),
                why.reason()
            )),
        }
    }
    if env.is_empty() {
        docker.push_str("# nothing to change: this is the default environment\n");
    }
    let mut k8s = String::from("env:\n");
    for (k, val) in &env {
        k8s.push_str(&format!(
            "  - name: {}\n    value: {}\n",
            escape::yaml_name(k),
            escape::yaml_string(val)
        ));
    }
    if env.is_empty() {
        k8s = "# nothing to change: this is the default environment\n".into();
    }
    let check = match &v.preload {
        Some(p) => {
            let file = p
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!(
                "grep -c {} /proc/$(pidof -s YOUR_PROGRAM)/maps   # > 0: the allocator is loaded",
                escape::shell_word(&file)
            )
        }
        None if !env.is_empty() => {
            let (k, val) = &env[0];
            format!(
                "tr '\\0' '\\n' < /proc/$(pidof -s YOUR_PROGRAM)/environ | grep -Fx -- {}",
                escape::shell_word(&format!("{k}={val}"))
            )
        }
        None => "nothing to check".into(),
    };
    Some(HowToApply {
        env,
        dockerfile: docker,
        kubernetes: k8s,
        check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::report::fixture;

    #[test]
    fn picks_the_lean_variant_with_its_figures() {
        let e = fixture::experiment();
        let r = recommend(&analyse(&e));
        let Verdict::Pick {
            variant, reason, ..
        } = &r.verdict
        else {
            panic!("{r:?}")
        };
        assert_eq!(variant, "jemalloc");
        assert!(reason.starts_with("peak RSS -50% [-51%, -49%]"), "{reason}");
        assert!(reason.contains("wall time -6%"), "{reason}");
        assert!(
            r.excluded.iter().any(|x| x.starts_with("arena2: ")),
            "{:?}",
            r.excluded
        );
        assert_eq!(r.pareto_front, ["jemalloc"]);
    }

    #[test]
    fn a_leaner_but_slower_variant_is_a_tradeoff_not_the_pick() {
        let mut e = fixture::experiment();
        for r in e.runs.iter_mut().filter(|r| r.variant == "arena2") {
            r.status = crate::record::RunStatus::Ok;
            r.peak_rss_bytes = 300 << 20;
            r.wall_seconds = 6.0 + r.block as f64 * 0.1;
        }
        let r = recommend(&analyse(&e));
        let Verdict::Pick {
            variant, tradeoffs, ..
        } = &r.verdict
        else {
            panic!("{r:?}")
        };
        assert_eq!(variant, "jemalloc");
        assert_eq!(r.pareto_front, ["arena2", "jemalloc"]);
        assert!(
            tradeoffs[0].starts_with(
                "arena2 uses 25% less memory than jemalloc (the pick) and is 110% slower (peak RSS, wall time)"
            ),
            "{tradeoffs:?}"
        );
    }

    /// Several processes at once: the recommendation weighs peak PSS, says so, and shows
    /// peak RSS beside it; with PSS missing from a run it falls back to peak RSS.
    #[test]
    fn a_multi_process_experiment_is_weighed_on_pss() {
        let mut e = fixture::experiment();
        for r in e.runs.iter_mut() {
            for s in r.samples.iter_mut() {
                s.processes = 3;
            }
            if r.variant == "jemalloc" {
                // More RSS summed over the workers, but far less PSS: it shares more.
                r.peak_rss_bytes *= 3;
                r.peak_pss_bytes = r.peak_pss_bytes.map(|p| p / 4);
            }
        }
        let a = analyse(&e);
        assert!(a.multi_process());
        let r = recommend(&a);
        assert_eq!(r.memory_figure, Figure::PeakPssBytes);
        let Verdict::Pick {
            variant, reason, ..
        } = &r.verdict
        else {
            panic!("{r:?}")
        };
        assert_eq!(variant, "jemalloc");
        assert!(reason.starts_with("peak PSS -"), "{reason}");
        assert!(reason.contains(", peak RSS +"), "{reason}");
        assert!(reason.contains("weighed on peak PSS"), "{reason}");
        // On RSS alone, jemalloc would not have been picked.
        if let Some(r) = e
            .runs
            .iter_mut()
            .find(|r| r.variant == "glibc" && r.counts())
        {
            r.peak_pss_bytes = None;
        }
        let r = recommend(&analyse(&e));
        assert_eq!(r.memory_figure, Figure::PeakRssBytes);
        assert!(!matches!(r.verdict, Verdict::Pick { .. }), "{r:?}");
    }

    #[test]
    fn a_significant_but_tiny_saving_is_no_pick() {
        let mut e = fixture::experiment();
        // Every variant within 1% of the baseline's peak, run to run alike: significant,
        // but no reason to change a setting.
        for r in e.runs.iter_mut() {
            let base = 400u64 << 20;
            r.peak_rss_bytes = match r.variant.as_str() {
                "glibc" => base,
                _ => base - (base / 200),
            } + r.block as u64 * 4096;
        }
        let a = analyse(&e);
        let jem = a.variants.iter().find(|v| v.name == "jemalloc").unwrap();
        let ratio = jem.ratio_to_baseline[&Figure::PeakRssBytes];
        assert!(ratio.significant && ratio.value > 0.99, "{ratio:?}");
        let r = recommend(&a);
        let Verdict::KeepBaseline { reason } = &r.verdict else {
            panic!("{r:?}")
        };
        assert!(reason.contains("by 5% or more"), "{reason}");
    }

    /// Two variants over five runs each, peaks in MiB by block.
    fn five_runs(peaks: &[(f64, f64)]) -> crate::record::Experiment {
        let mut e = fixture::experiment();
        let g = e
            .runs
            .iter()
            .find(|r| r.variant == "glibc")
            .unwrap()
            .clone();
        let j = e
            .runs
            .iter()
            .find(|r| r.variant == "jemalloc")
            .unwrap()
            .clone();
        e.plan.variants.retain(|v| v.name != "arena2");
        e.plan.runs = peaks.len() as u32;
        e.runs.clear();
        for (b, (gp, jp)) in peaks.iter().enumerate() {
            for (proto, mib) in [(&g, gp), (&j, jp)] {
                let mut r = proto.clone();
                r.block = b as u32;
                r.peak_rss_bytes = (mib * 1048576.0) as u64;
                e.runs.push(r);
            }
        }
        e.seqs = (0..e.runs.len() as u32).collect();
        e.run_hosts = vec![0; e.runs.len()];
        e
    }

    /// Issue 36's JNI program: jemalloc's peaks 125–483 MiB against glibc's 451–483 (median
    /// 0.64×, the interval reaching past 1). Not "keep the baseline" and not "no
    /// difference": undecided, how lean it looks, how much its runs vary, and how many
    /// more runs would likely tell.
    #[test]
    fn an_interval_straddling_the_threshold_is_undecided_never_keep() {
        let e = five_runs(&[
            (451.0, 125.0),
            (460.0, 255.0),
            (470.0, 303.0),
            (480.0, 362.0),
            (483.0, 483.0),
        ]);
        let r = recommend(&analyse(&e));
        let Verdict::Undecided { reason, variants } = &r.verdict else {
            panic!("{r:?}")
        };
        assert_eq!(variants.len(), 1);
        let o = &variants[0];
        assert_eq!((o.variant.as_str(), o.threshold), ("jemalloc", 1.0));
        assert!(o.ci95[0] < 1.0 && o.ci95[1] >= 1.0, "{o:?}");
        assert!(
            o.spread.is_some_and(|s| (s - 483.0 / 125.0).abs() < 0.01),
            "{o:?}"
        );
        assert!(matches!(o.more_runs, MoreRuns::About(k) if k >= 1), "{o:?}");
        assert!(
            r.headline().starts_with(
                "Undecided: jemalloc looks 36% leaner than glibc, but not significantly"
            ),
            "{}",
            r.headline()
        );
        assert!(reason.contains("its runs vary 3.86×"), "{reason}");
        assert!(reason.contains("would likely tell"), "{reason}");
        // The same runs, tight: decided (the pick).
        let tight = five_runs(&[
            (451.0, 300.0),
            (460.0, 301.0),
            (470.0, 303.0),
            (480.0, 302.0),
            (483.0, 304.0),
        ]);
        let t = recommend(&analyse(&tight));
        assert!(matches!(t.verdict, Verdict::Pick { .. }), "{t:?}");
        assert_eq!(standings(&analyse(&tight))[0].1.answer(), Some("leaner"));
    }

    /// Within a few percent and wide: it may be 5% leaner or not; undecided, with the
    /// threshold 0.95 named.
    #[test]
    fn a_wide_interval_near_one_is_undecided_at_the_five_percent_threshold() {
        let e = five_runs(&[
            (400.0, 360.0),
            (420.0, 440.0),
            (410.0, 400.0),
            (430.0, 415.0),
            (405.0, 430.0),
        ]);
        let a = analyse(&e);
        let st = standings(&a);
        let MemoryStanding::Open(o) = &st[0].1 else {
            panic!("{st:?}")
        };
        assert_eq!(o.threshold, PICK_MAX_MEMORY_RATIO);
        let r = recommend(&a);
        assert!(
            r.headline().contains("may or may not be 5% or more leaner"),
            "{}",
            r.headline()
        );
    }

    #[test]
    fn identical_variants_get_no_recommendation() {
        let mut e = fixture::experiment();
        for r in e.runs.iter_mut() {
            r.peak_rss_bytes = 100 << 20;
            r.mean_rss_bytes = 50 << 20;
            r.wall_seconds = 3.0;
            r.cpu_user_seconds = 2.0;
            r.cpu_sys_seconds = 0.5;
            r.final_rss_bytes = 10;
            r.peak_pss_bytes = Some(9);
            r.peak_uss_bytes = Some(8);
            r.peak_vsz_bytes = 100;
        }
        let r = recommend(&analyse(&e));
        assert!(
            matches!(r.verdict, Verdict::NoSignificantDifference { .. }),
            "{r:?}"
        );
    }

    #[test]
    fn apply_snippets_for_a_preload() {
        let e = fixture::experiment();
        let h = how_to_apply(&e.plan, "jemalloc").unwrap();
        assert!(h
            .dockerfile
            .contains("apt-get install -y --no-install-recommends libjemalloc2"));
        assert!(h
            .dockerfile
            .contains("ENV LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"));
        assert!(h.kubernetes.contains("- name: LD_PRELOAD"));
        assert!(h.check.contains("libjemalloc.so.2"));
        let a = how_to_apply(&e.plan, "arena2").unwrap();
        assert_eq!(a.dockerfile, "ENV MALLOC_ARENA_MAX=2\n");
    }

    /// `K=EQ` set to `v2` once became `ENV K=EQ=v2`, which Docker reads as `K` set to
    /// `EQ=v2`: a name a Dockerfile cannot write is a comment saying why.
    #[test]
    fn a_dockerfile_never_writes_a_name_it_would_read_as_another() {
        let mut e = fixture::experiment();
        let v = e
            .plan
            .variants
            .iter_mut()
            .find(|v| v.name == "arena2")
            .unwrap();
        v.env = vec![
            ("K=EQ".into(), "v2".into()),
            ("OK".into(), "1".into()),
            ("A\nB".into(), "x".into()),
        ];
        let a = how_to_apply(&e.plan, "arena2").unwrap();
        assert!(!a.dockerfile.contains("ENV K="), "{}", a.dockerfile);
        assert!(
            a.dockerfile.contains("# K=EQ: its name holds '='"),
            "{}",
            a.dockerfile
        );
        assert!(a.dockerfile.contains("ENV OK=1\n"), "{}", a.dockerfile);
        assert!(a
            .dockerfile
            .contains("# A\\nB: its name or value holds a line break"));
        assert_eq!(a.dockerfile.lines().count(), 3, "{}", a.dockerfile);
    }
}
