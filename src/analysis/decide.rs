//! Deciding from an interval, shared by the recommendation, `memtrial gate` and
//! `--until-decided`: where a 95% interval lies against a threshold (wholly below, wholly
//! above, or straddling it: *undecided*), how many more runs would likely move it clear
//! of the threshold (from the spread observed so far), and the sequential rule that adds
//! blocks of runs until every question is decided — the soak's rule (`soak::decide`:
//! the same standing, not open, after each of the last K looks) over blocks of runs
//! instead of time windows. See docs/methodology.md, "Undecided, and more runs".

use std::collections::BTreeMap;

use serde::Serialize;

use super::MIN_RUNS_FOR_SIGNIFICANCE;

/// Where an interval lies against a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Wholly below: its upper bound is under the threshold.
    Below,
    /// Wholly above: its lower bound is over the threshold.
    Above,
    /// Neither: the evidence does not tell on which side the truth lies.
    Straddles,
}

/// Where `ci` lies against `threshold`.
pub fn side(ci: [f64; 2], threshold: f64) -> Side {
    if ci[1] < threshold {
        Side::Below
    } else if ci[0] > threshold {
        Side::Above
    } else {
        Side::Straddles
    }
}

/// The scale an interval narrows on: a ratio's on the logarithmic one (its interval is
/// symmetric there, not around the ratio), a difference's on the linear one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Log,
    Linear,
}

/// The most runs per variant a projection names; beyond it, "more than".
pub const MORE_RUNS_CAP: usize = 1000;

/// How many more runs (per variant: one more block each) would likely decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "runs", rename_all = "snake_case")]
pub enum MoreRuns {
    /// About this many more runs of each variant.
    About(usize),
    /// More than this many: the estimate sits too close to the threshold for runs to tell
    /// soon (the difference, if any, is much smaller than the runs' spread).
    MoreThan(usize),
}

impl MoreRuns {
    /// "about 12 more runs of each" / "more than 995 more runs of each".
    pub fn phrase(self) -> String {
        match self {
            MoreRuns::About(1) => "about 1 more run of each".into(),
            MoreRuns::About(k) => format!("about {k} more runs of each"),
            MoreRuns::MoreThan(k) => format!("more than {k} more runs of each"),
        }
    }

    /// The number of runs named (a lower bound for `MoreThan`).
    pub fn runs(self) -> usize {
        match self {
            MoreRuns::About(k) | MoreRuns::MoreThan(k) => k,
        }
    }
}

/// How many more runs of each group would likely move an interval that straddles
/// `threshold` clear of it, assuming the estimate stays where it is and the interval
/// narrows as `1/√n` (the spread of the runs so far stays what it was). `n` is the runs
/// behind the interval (the smaller group). The interval's half-width on the threshold's
/// side must shrink below the distance from the estimate to the threshold:
/// `n' = n · (half-width / distance)²`. Below [`MIN_RUNS_FOR_SIGNIFICANCE`] runs nothing
/// is decided, so at least that many.
pub fn more_runs(estimate: f64, ci: [f64; 2], n: usize, threshold: f64, scale: Scale) -> MoreRuns {
    let at_least = MIN_RUNS_FOR_SIGNIFICANCE.saturating_sub(n);
    let map = |x: f64| match scale {
        Scale::Log => x.ln(),
        Scale::Linear => x,
    };
    let valid = |x: f64| x.is_finite() && (scale == Scale::Linear || x > 0.0);
    if n == 0 || ![estimate, ci[0], ci[1], threshold].into_iter().all(valid) {
        return MoreRuns::MoreThan(at_least.max(MIN_RUNS_FOR_SIGNIFICANCE));
    }
    let (e, t) = (map(estimate), map(threshold));
    let half = if t > e {
        map(ci[1]) - e
    } else {
        e - map(ci[0])
    };
    let distance = (t - e).abs();
    let cap = MORE_RUNS_CAP.saturating_sub(n);
    if distance <= f64::EPSILON * e.abs().max(1.0) {
        return MoreRuns::MoreThan(cap.max(at_least));
    }
    let needed = n as f64 * (half.max(0.0) / distance).powi(2);
    if !needed.is_finite() || needed > MORE_RUNS_CAP as f64 {
        return MoreRuns::MoreThan(cap.max(at_least));
    }
    let more = (needed.ceil() as usize).saturating_sub(n).max(1);
    MoreRuns::About(more.max(at_least))
}

/// One question's standing after a look: still open, or decided with a name for the
/// answer (`pick`, `not_leaner`, `regression`, `within` …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "answer", rename_all = "snake_case")]
pub enum Standing {
    Open,
    Decided(String),
}

/// What a look found: each question's standing (a variant, or a variant's figure), and
/// for the open ones what they wait for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Look {
    pub standings: BTreeMap<String, Standing>,
    /// Why each open question is open, in words ("jemalloc: peak RSS 0.66× [0.27, 1.06],
    /// about 12 more runs of each would tell").
    pub open: Vec<String>,
}

/// The sequential rule of `--until-decided`: after each block of runs every question is
/// looked at again; a question is decided when it had the same standing, not open, at
/// each of the last `consecutive` looks. Looks start at [`MIN_RUNS_FOR_SIGNIFICANCE`]
/// runs per variant (with fewer, nothing is decided).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Looks in a row a standing must hold.
    pub consecutive: usize,
    /// The most measured runs per variant.
    pub max_runs: u32,
}

/// The default number of looks in a row (`--until-decided`): 2.
pub const DEFAULT_CONSECUTIVE: usize = 2;

/// The looks so far, by the runs per variant they saw.
#[derive(Debug, Clone, Default)]
pub struct Looks {
    by_runs: BTreeMap<u32, Look>,
}

impl Looks {
    pub fn has(&self, runs: u32) -> bool {
        self.by_runs.contains_key(&runs)
    }

    pub fn add(&mut self, runs: u32, look: Look) {
        self.by_runs.insert(runs, look);
    }

    /// The latest look.
    pub fn last(&self) -> Option<(u32, &Look)> {
        self.by_runs.iter().next_back().map(|(n, l)| (*n, l))
    }

    /// The questions not decided under `rule` at the latest look: open then, or whose
    /// standing was not the same at each of the last `rule.consecutive` looks. Empty
    /// when every question is decided; `None` before there are enough looks.
    pub fn undecided(&self, rule: &Rule) -> Option<Vec<String>> {
        let k = rule.consecutive.max(1);
        if self.by_runs.len() < k {
            return None;
        }
        let recent: Vec<&Look> = self.by_runs.values().rev().take(k).collect();
        let last = recent.first()?;
        Some(
            last.standings
                .iter()
                .filter(|(key, s)| {
                    **s == Standing::Open
                        || recent[1..]
                            .iter()
                            .any(|l| l.standings.get(*key) != Some(*s))
                })
                .map(|(key, _)| key.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_of_a_threshold() {
        assert_eq!(side([0.8, 0.9], 0.95), Side::Below);
        assert_eq!(side([1.06, 1.2], 1.05), Side::Above);
        assert_eq!(side([0.27, 1.06], 0.95), Side::Straddles);
        assert_eq!(
            side([0.95, 0.99], 0.95),
            Side::Straddles,
            "touching is not clear"
        );
    }

    /// The JNI program of issue 36: jemalloc 0.66× [0.27, 1.06] over 5 runs; to call it
    /// leaner, the interval's upper bound must fall below 1: half-width ln(1.06/0.66) =
    /// 0.474 against a distance ln(1/0.66) = 0.416, so 5 · 1.30 = 6.5 → 7 runs, 2 more.
    #[test]
    fn more_runs_from_the_spread() {
        let m = more_runs(0.66, [0.27, 1.06], 5, 1.0, Scale::Log);
        assert_eq!(m, MoreRuns::About(2));
        // A wide interval on a small difference: 5 · (ln 1.2 / ln 1.05)² = 69.8 → 70.
        assert_eq!(
            more_runs(1.0, [0.9, 1.2], 5, 1.05, Scale::Log),
            MoreRuns::About(65)
        );
        // On the threshold itself: no number of runs tells soon.
        assert!(matches!(
            more_runs(1.05, [1.0, 1.1], 7, 1.05, Scale::Log),
            MoreRuns::MoreThan(_)
        ));
        // A difference narrows on the linear scale: 2 MiB ± 3 MiB against 5 MiB.
        let d = more_runs(2.0, [-1.0, 5.5], 7, 5.0, Scale::Linear);
        assert_eq!(d, MoreRuns::About(3), "7 · (3.5/3)² = 9.5 → 10");
        // Fewer runs than a significance needs: at least up to that.
        assert_eq!(
            more_runs(0.5, [0.4, 1.1], 1, 1.0, Scale::Log),
            MoreRuns::About(2)
        );
        assert_eq!(MoreRuns::About(1).phrase(), "about 1 more run of each");
    }

    fn look(pairs: &[(&str, Option<&str>)]) -> Look {
        Look {
            standings: pairs
                .iter()
                .map(|(k, s)| {
                    (
                        k.to_string(),
                        s.map_or(Standing::Open, |s| Standing::Decided(s.into())),
                    )
                })
                .collect(),
            open: Vec::new(),
        }
    }

    #[test]
    fn decided_only_when_the_last_looks_agree() {
        let rule = Rule {
            consecutive: 2,
            max_runs: 30,
        };
        let mut looks = Looks::default();
        looks.add(3, look(&[("a", Some("pick")), ("b", None)]));
        assert_eq!(looks.undecided(&rule), None, "one look is not two");
        looks.add(4, look(&[("a", Some("pick")), ("b", Some("within"))]));
        assert_eq!(looks.undecided(&rule), Some(vec!["b".to_string()]));
        looks.add(5, look(&[("a", Some("not_leaner")), ("b", Some("within"))]));
        assert_eq!(looks.undecided(&rule), Some(vec!["a".to_string()]));
        looks.add(6, look(&[("a", Some("not_leaner")), ("b", Some("within"))]));
        assert_eq!(looks.undecided(&rule), Some(vec![]));
        assert_eq!(looks.last().map(|(n, _)| n), Some(6));
    }

    /// A two-variant experiment (`glibc`, the baseline, and `pr`) whose runs' peaks are
    /// the given MiB, block by block, built on the report fixture's runs.
    fn two_builds(base: &[f64], pr: &[f64], seed: u64) -> crate::record::Experiment {
        let mut e = crate::report::fixture::experiment();
        let Some(g) = e.runs.iter().find(|r| r.variant == "glibc").cloned() else {
            panic!("the fixture has glibc runs");
        };
        e.plan.variants.retain(|v| v.name != "arena2");
        e.plan.variants[1].name = "pr".into();
        e.plan.variants[1].preload = None;
        e.plan.seed = seed;
        e.runs.clear();
        for (b, (x, y)) in base.iter().zip(pr).enumerate() {
            for (name, mib) in [("glibc", x), ("pr", y)] {
                let mut r = g.clone();
                r.variant = name.into();
                r.block = b as u32;
                r.peak_rss_bytes = (mib * 1048576.0) as u64;
                r.peak_pss_bytes = Some(r.peak_rss_bytes);
                e.runs.push(r);
            }
        }
        e.seqs = (0..e.runs.len() as u32).collect();
        e.run_hosts = vec![0; e.runs.len()];
        e
    }

    /// Box–Muller: a standard normal, then log-normal around 1 with spread `sigma`.
    fn log_normal(rng: &mut rand_chacha::ChaCha8Rng, sigma: f64) -> f64 {
        use rand::Rng;
        let (u1, u2): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (sigma * z).exp()
    }

    /// Which answer a look gave: 0 regression / leaner, 1 pass / not leaner, 2 open.
    fn answer(s: Option<&Standing>) -> usize {
        match s {
            Some(Standing::Decided(a)) if a == "regression" || a == "leaner" => 0,
            Some(Standing::Decided(_)) => 1,
            _ => 2,
        }
    }

    /// How often the gate ([0]) and the pick ([1]) gave each answer, looked at once after
    /// `planned` runs and until decided, and the runs the latter used in all.
    #[derive(Default)]
    struct Answers {
        fixed: [[usize; 3]; 2],
        until: [[usize; 3]; 2],
        used: [usize; 2],
    }

    /// `sims` experiments of a true `ratio` with spread `sigma`, each looked at after every
    /// run from `planned - 1` on, as the runner does under `rule`.
    fn simulate(
        ratio: f64,
        sigma: f64,
        sims: usize,
        rule: &Rule,
        planned: u32,
        criterion: &crate::analysis::gate::Criterion,
    ) -> Answers {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
        let mut out = Answers::default();
        for sim in 0..sims {
            let bs: Vec<f64> = (0..rule.max_runs)
                .map(|_| 100.0 * log_normal(&mut rng, sigma))
                .collect();
            let xs: Vec<f64> = (0..rule.max_runs)
                .map(|_| 100.0 * ratio * log_normal(&mut rng, sigma))
                .collect();
            let mut looks = [Looks::default(), Looks::default()];
            let mut done = [false; 2];
            for n in (planned - 1)..=rule.max_runs {
                let e = two_builds(&bs[..n as usize], &xs[..n as usize], sim as u64);
                let a = crate::analysis::analyse(&e);
                let judged = crate::analysis::gate::judge(&e, &a, std::slice::from_ref(criterion));
                let seen = [
                    crate::analysis::gate::look(&judged),
                    crate::analysis::recommend::look(&a),
                ];
                for (w, l) in seen.into_iter().enumerate() {
                    let st = l.standings.values().next().cloned();
                    if n == planned {
                        out.fixed[w][answer(st.as_ref())] += 1;
                    }
                    if done[w] {
                        continue;
                    }
                    looks[w].add(n, l);
                    let decided =
                        n >= planned && looks[w].undecided(rule).is_some_and(|u| u.is_empty());
                    if decided || n == rule.max_runs {
                        out.until[w][if decided { answer(st.as_ref()) } else { 2 }] += 1;
                        out.used[w] += n as usize;
                        done[w] = true;
                    }
                }
                if done == [true, true] {
                    break;
                }
            }
        }
        out
    }

    /// The error rates of the gate and of the recommendation's pick, simulated through the
    /// code itself: experiments of two builds whose peaks vary log-normally (σ: the runs'
    /// spread) around a true ratio, each analysed as `memtrial run` analyses it
    /// (`analyse`, the bootstrap, `gate::judge` of `peak_rss > +5%`, `recommend::look`),
    /// looked at once after 7 runs and under `--until-decided` (looks after each block
    /// from 7 runs, K = 2, at most 30: the runner's rule). Prints the table of
    /// docs/methodology.md; run with benches/decide_rates.sh.
    #[test]
    #[ignore = "a simulation of thousands of experiments: benches/decide_rates.sh"]
    fn error_rates_of_the_gate_and_the_pick() {
        let sims: usize = std::env::var("SIMS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(200);
        let rule = Rule {
            consecutive: DEFAULT_CONSECUTIVE,
            max_runs: 30,
        };
        let planned = 7u32;
        let criterion = crate::analysis::gate::parse_criterion("peak_rss > +5%").unwrap();
        let pct = |k: usize| 100.0 * k as f64 / sims as f64;
        let cases = [
            (1.0, 0.01),
            (1.0, 0.05),
            (1.0, 0.15),
            (1.02, 0.01),
            (1.02, 0.05),
            (1.02, 0.15),
            (0.97, 0.05),
            (0.8, 0.05),
            (0.8, 0.15),
            (1.2, 0.01),
            (1.2, 0.05),
            (1.2, 0.15),
        ];
        println!("sims per case: {sims}; answers: gate regression / pass / undecided, pick leaner / not leaner / undecided");
        println!("| true ratio | σ | gate after 7 runs | gate until decided | its mean runs | pick after 7 runs | pick until decided | its mean runs |");
        println!("|---:|---:|---|---|---:|---|---|---:|");
        let (mut false_gate, mut false_pick): (f64, f64) = (0.0, 0.0);
        for (ratio, sigma) in cases {
            let Answers { fixed, until, used } =
                simulate(ratio, sigma, sims, &rule, planned, &criterion);
            let three = |c: [usize; 3]| {
                format!("{:.1}% / {:.1}% / {:.1}%", pct(c[0]), pct(c[1]), pct(c[2]))
            };
            println!(
                "| {ratio:.2} | {sigma:.2} | {} | {} | {:.1} | {} | {} | {:.1} |",
                three(fixed[0]),
                three(until[0]),
                used[0] as f64 / sims as f64,
                three(fixed[1]),
                three(until[1]),
                used[1] as f64 / sims as f64,
            );
            let wrong = |w: usize| pct(fixed[w][0]).max(pct(until[w][0]));
            if ratio <= 1.02 {
                false_gate = false_gate.max(wrong(0));
            }
            if ratio > 0.95 {
                false_pick = false_pick.max(wrong(1));
            }
            if ratio >= 1.2 && sigma <= 0.05 {
                assert!(
                    pct(fixed[0][0]) >= 95.0,
                    "a 20% regression is caught after 7 runs"
                );
            }
        }
        // Within 2% of the baseline, a gate fails and a variant is called leaner in under
        // 2.5% of experiments, looked at once or until decided.
        println!("most false regressions: {false_gate:.1}%; most false picks: {false_pick:.1}%");
        assert!(false_gate <= 2.5, "{false_gate}%");
        assert!(false_pick <= 2.5, "{false_pick}%");
    }
}
