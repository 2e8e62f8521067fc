//! Leak or fragmentation, from the fleet: the exporter's series of the allocator probe
//! (`memtrial_group_allocator_live_bytes` and `_held_bytes`, beside
//! `memtrial_group_resident_bytes`) judged per pod by the rules of a local run
//! ([`steady_why`]: live growing → leak; live flat while held or resident grow, or held
//! well above live → fragmentation; all flat → plateau), the pod's warm-up left out as for
//! the memory. A group's verdict is its pods' when they agree, else `mixed` with the count
//! of each; the probe's coverage (probed processes of all matched) is stated beside it, as
//! a local run states which processes the probe saw. The arena pitfall is reported where
//! the exporter saw it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::blocks::{pod_name, warm_from, warm_start};
use super::prom::{Prometheus, Series, Values};
use super::Group;
use crate::analysis::why::{steady_why, Judged, Why};

/// The exporter's series a verdict is read from: per process (`--per-process`: each
/// process a pod, as for the memory) or per group (each exporter's group a pod).
pub struct Level {
    pub live: &'static str,
    pub held: &'static str,
    pub resident: &'static str,
    pub pitfall: &'static str,
    pub arenas: &'static str,
    pub arena_limit: &'static str,
}

pub const PROCESS: Level = Level {
    live: "memtrial_process_allocator_live_bytes",
    held: "memtrial_process_allocator_held_bytes",
    resident: "memtrial_process_resident_bytes",
    pitfall: "memtrial_process_arena_pitfall",
    arenas: "memtrial_process_glibc_arenas",
    arena_limit: "memtrial_process_glibc_arena_limit",
};

pub const GROUP: Level = Level {
    live: "memtrial_group_allocator_live_bytes",
    held: "memtrial_group_allocator_held_bytes",
    resident: "memtrial_group_resident_bytes",
    pitfall: "memtrial_group_arena_pitfall",
    arenas: "memtrial_group_glibc_arenas",
    arena_limit: "memtrial_group_glibc_arena_limit",
};

const PROBED: &str = "memtrial_group_probed_processes";
const PROCESSES: &str = "memtrial_group_processes";
const QUOTA: &str = "memtrial_group_cpu_quota_cpus";
const VISIBLE: &str = "memtrial_group_visible_cpus";

/// One pod's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct PodWhy {
    pub pod: String,
    #[serde(flatten)]
    pub(crate) why: Why,
    pub says: String,
}

/// A group's leak-or-fragmentation verdict from the exporter's probe series.
#[derive(Debug, Clone, Serialize)]
pub struct GroupWhy {
    /// `leak`, `fragmentation`, `plateau`, `too_short` when every pod says so; `mixed`
    /// when they disagree; `no_probe` when the exporter reports no probe for the group.
    pub verdict: String,
    pub says: String,
    /// Probed processes over matched processes, the median over the pods' samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodWhy>,
}

/// The arena pitfall as the exporter saw it in a group.
#[derive(Debug, Clone, Serialize)]
pub struct ArenaPitfall {
    /// Pods in which some sample had the pitfall.
    pub pods: usize,
    pub of_pods: usize,
    pub most_arenas: Option<u64>,
    pub limit: Option<u64>,
    pub quota_cpus: Option<f64>,
    pub visible_cpus: Option<u64>,
    pub says: String,
}

/// A pod's series with the samples of its warm-up left out, by the rule the memory's
/// blocks use ([`warm_from`]).
fn trimmed(s: &Series, g: &Group, step: f64, warmup: f64) -> Vec<(f64, f64)> {
    let Some(&(first, _)) = s.points.first() else {
        return Vec::new();
    };
    let from = warm_from(first, g.start, step, warmup);
    s.points[warm_start(&s.points, from)..].to_vec()
}

/// Each pod's points whose sample is new: where the sample's own time (`stamps`, the
/// `timestamp()` of the same series) differs from the point before's. A pod without stamps
/// keeps its points.
fn once_per_scrape(series: Vec<Series>, stamps: &[Series]) -> Vec<Series> {
    let stamps: BTreeMap<String, &Series> = stamps.iter().map(|s| (pod_name(s), s)).collect();
    series
        .into_iter()
        .map(|mut s| {
            if let Some(st) = stamps.get(&pod_name(&s)) {
                let at: std::collections::HashMap<u64, f64> =
                    st.points.iter().map(|p| (p.0.to_bits(), p.1)).collect();
                let mut last = None;
                s.points.retain(|p| {
                    let own = at.get(&p.0.to_bits()).copied();
                    let new = own.is_none() || own != last;
                    last = own.or(last);
                    new
                });
            }
            s
        })
        .collect()
}

fn by_pod(series: Vec<Series>) -> BTreeMap<String, Series> {
    series.into_iter().map(|s| (pod_name(&s), s)).collect()
}

/// The held series at the live series' times, when it has a sample at each of them (the
/// probe's line gives both at once, so the exporter serves them at the same scrape).
fn at_times(of: &[(f64, f64)], at: &[(f64, f64)]) -> Option<Vec<(f64, f64)>> {
    let by_time: std::collections::HashMap<u64, f64> =
        of.iter().map(|p| (p.0.to_bits(), p.1)).collect();
    at.iter()
        .map(|p| Some((p.0, *by_time.get(&p.0.to_bits())?)))
        .collect()
}

fn median(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| crate::analysis::stats::median(v))
}

/// The group's verdict from its pods' live, held and resident series. Pure.
pub fn group_why(
    live: Vec<Series>,
    held: Vec<Series>,
    resident: Vec<Series>,
    coverage: Option<f64>,
    g: &Group,
    step: f64,
    warmup: f64,
) -> GroupWhy {
    let (held, resident) = (by_pod(held), by_pod(resident));
    let mut pods = Vec::new();
    for s in live.iter().filter(|s| !s.points.is_empty()) {
        let name = pod_name(s);
        let l = trimmed(s, g, step, warmup);
        let h = held
            .get(&name)
            .map(|h| trimmed(h, g, step, warmup))
            .and_then(|h| at_times(&h, &l));
        let r = resident
            .get(&name)
            .map(|r| trimmed(r, g, step, warmup))
            .unwrap_or_default();
        let seconds = match (l.first(), l.last()) {
            (Some(a), Some(b)) => b.0 - a.0,
            _ => 0.0,
        };
        let why = steady_why(&l, h.as_deref(), &r, seconds);
        pods.push(PodWhy {
            pod: name,
            says: why.sentence_for(Judged::Fleet),
            why,
        });
    }
    if pods.is_empty() {
        return GroupWhy {
            verdict: "no_probe".into(),
            says: format!(
                "no allocator probe reported ({} and {} have no series for {{{}}}): preload \
                 memtrial's probe in the workload (docs/exporter.md) to tell a leak from \
                 fragmentation",
                PROCESS.live,
                GROUP.live,
                g.selector.trim()
            ),
            coverage,
            pods,
        };
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &pods {
        *counts.entry(p.why.name()).or_default() += 1;
    }
    let n = pods.len();
    let verdict = if counts.len() == 1 {
        pods[0].why.name().to_string()
    } else {
        "mixed".to_string()
    };
    let tally = counts
        .iter()
        .map(|(k, c)| format!("{k} in {c} of {n} pod(s)"))
        .collect::<Vec<_>>()
        .join(", ");
    // The pod that speaks for the group: the first with a leak, else the first of the
    // most common verdict.
    let speaker = pods
        .iter()
        .find(|p| p.why.name() == "leak")
        .or_else(|| {
            let most = counts.iter().max_by_key(|(_, c)| **c).map(|(k, _)| *k);
            pods.iter().find(|p| Some(p.why.name()) == most)
        })
        .unwrap_or(&pods[0]);
    let cover = match coverage {
        Some(c) if c < 0.999 => format!(
            "; the probe reported for {:.0}% of the matched processes: live and held speak for those only",
            c * 100.0
        ),
        _ => String::new(),
    };
    GroupWhy {
        verdict,
        says: format!("{tally} ({}: {}){cover}", speaker.pod, speaker.says),
        coverage,
        pods,
    }
}

/// The highest (`f64::max`) or lowest (`f64::min`) value of a metric over a group's
/// series, if any.
fn extreme(series: &[Series], pick: fn(f64, f64) -> f64) -> Option<f64> {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .reduce(pick)
}

/// The arena pitfall from the exporter's gauges; `None` when no pod had it.
pub fn pitfall(
    flags: &[Series],
    arenas: &[Series],
    limit: &[Series],
    quota: &[Series],
    visible: &[Series],
) -> Option<ArenaPitfall> {
    let pods = flags
        .iter()
        .filter(|s| s.points.iter().any(|p| p.1 >= 1.0))
        .count();
    if pods == 0 {
        return None;
    }
    let most_arenas = extreme(arenas, f64::max).map(|v| v as u64);
    let limit = extreme(limit, f64::max).map(|v| v as u64);
    let quota_cpus = extreme(quota, f64::min);
    let visible_cpus = extreme(visible, f64::max).map(|v| v as u64);
    let quota_text = quota_cpus.map_or("-".to_string(), |q| format!("{q:.2}"));
    let says = format!(
        "arena pitfall in {pods} of {} pod(s): up to {} glibc arenas, a limit of {} ({} CPUs \
         visible) under a CPU quota of {quota_text} CPUs → set MALLOC_ARENA_MAX=2 or preload \
         jemalloc, and judge that variant",
        flags.len(),
        most_arenas.map_or("-".to_string(), |a| a.to_string()),
        limit.map_or("-".to_string(), |a| a.to_string()),
        visible_cpus.map_or("-".to_string(), |a| a.to_string()),
    );
    Some(ArenaPitfall {
        pods,
        of_pods: flags.len(),
        most_arenas,
        limit,
        quota_cpus,
        visible_cpus,
        says,
    })
}

/// Queries a group's probe and arena series and judges them: per process where the
/// exporter serves them (`--per-process`), else per group.
pub fn query(
    prom: &Prometheus,
    g: &Group,
    step: u64,
    warmup: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<(GroupWhy, Option<ArenaPitfall>), String> {
    let sel = g.selector.trim();
    let mut ask = |q: String| -> Result<Vec<Series>, String> {
        progress(&format!("{}: {q}", g.name));
        // The probe's live, held and resident series are bytes: an impossible value is
        // refused, naming its series.
        let values = match q.split_once('{') {
            Some((m, _)) if m.ends_with("_bytes") => Values::Bytes,
            _ => Values::Any,
        };
        let s = prom
            .query_values(&q, (g.start, g.end, step), values)
            .map_err(|e| e.to_string())?;
        Ok(s.into_iter().filter(|s| !s.points.is_empty()).collect())
    };
    let of = |m: &str| format!("{m}{{{sel}}}");
    let (level, live) = match ask(of(PROCESS.live))? {
        l if !l.is_empty() => (&PROCESS, l),
        _ => (&GROUP, ask(of(GROUP.live))?),
    };
    // A step shorter than the scrape interval repeats each sample at every step: a slope
    // fitted on the repeats would claim more evidence than there is. Each sample's own
    // time (`timestamp()`) keeps one point per scrape.
    let stamps = if live.is_empty() {
        Vec::new()
    } else {
        ask(format!("timestamp({})", of(level.live)))?
    };
    let live = once_per_scrape(live, &stamps);
    let why = if live.is_empty() {
        group_why(live, vec![], vec![], None, g, step as f64, warmup)
    } else {
        let held = ask(of(level.held))?;
        let resident = ask(of(level.resident))?;
        let coverage = if std::ptr::eq(level, &PROCESS) {
            // Processes with a probe series of all the processes with a resident one.
            Some((live.len() as f64 / resident.len().max(1) as f64).min(1.0))
        } else {
            let probed = by_pod(ask(of(PROBED))?);
            let processes = by_pod(ask(of(PROCESSES))?);
            let shares: Vec<f64> = probed
                .iter()
                .filter_map(|(k, p)| Some((p, processes.get(k)?)))
                .flat_map(|(p, all)| {
                    let all: std::collections::HashMap<u64, f64> =
                        all.points.iter().map(|q| (q.0.to_bits(), q.1)).collect();
                    p.points.iter().filter_map(move |(t, n)| {
                        let m = *all.get(&t.to_bits())?;
                        (m > 0.0).then(|| (n / m).min(1.0))
                    })
                })
                .collect();
            median(&shares)
        };
        group_why(live, held, resident, coverage, g, step as f64, warmup)
    };
    let (level, flags) = match ask(of(PROCESS.pitfall))? {
        f if !f.is_empty() => (&PROCESS, f),
        _ => (&GROUP, ask(of(GROUP.pitfall))?),
    };
    let pitfall = if flags.iter().any(|s| s.points.iter().any(|p| p.1 >= 1.0)) {
        pitfall(
            &flags,
            &ask(of(level.arenas))?,
            &ask(of(level.arena_limit))?,
            &ask(of(QUOTA))?,
            &ask(of(VISIBLE))?,
        )
    } else {
        None
    };
    Ok((why, pitfall))
}

/// One line: the group's verdict.
pub fn line(name: &str, w: &GroupWhy) -> String {
    format!("{name} leak or fragmentation: {}: {}", w.verdict, w.says)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::blocks::series;

    fn group() -> Group {
        Group {
            name: "g".into(),
            selector: "group=\"x\"".into(),
            start: 0.0,
            end: 3600.0,
        }
    }

    /// An hour at one sample a minute: `f(minute)`.
    fn hour(pod: &str, f: impl Fn(f64) -> f64) -> Series {
        series(
            pod,
            (0..60).map(|m| (m as f64 * 60.0, f(m as f64))).collect(),
        )
    }

    const MIB: f64 = 1048576.0;

    #[test]
    fn flat_live_with_growing_held_is_fragmentation_and_growing_live_a_leak() {
        let live = vec![hour("a", |_| 100.0 * MIB), hour("b", |_| 100.0 * MIB)];
        let held = vec![
            hour("a", |m| (150.0 + m) * MIB),
            hour("b", |m| (150.0 + m) * MIB),
        ];
        let rss = vec![
            hour("a", |m| (160.0 + m) * MIB),
            hour("b", |m| (160.0 + m) * MIB),
        ];
        let w = group_why(live, held, rss, Some(1.0), &group(), 60.0, 600.0);
        assert_eq!(w.verdict, "fragmentation", "{}", w.says);
        assert!(
            w.says.starts_with("fragmentation in 2 of 2 pod(s)"),
            "{}",
            w.says
        );
        assert!(!w.says.contains("speak for those only"));

        let live = vec![hour("a", |m| (100.0 + m) * MIB), hour("b", |_| 100.0 * MIB)];
        let held = vec![hour("a", |m| (120.0 + m) * MIB), hour("b", |_| 105.0 * MIB)];
        let rss = vec![hour("a", |m| (130.0 + m) * MIB), hour("b", |_| 110.0 * MIB)];
        let w = group_why(live, held, rss, Some(0.5), &group(), 60.0, 600.0);
        assert_eq!(w.verdict, "mixed");
        assert!(w.says.contains("leak in 1 of 2"), "{}", w.says);
        assert!(w.says.contains("plateau in 1 of 2"), "{}", w.says);
        // The leaking pod speaks for the group; the coverage is said.
        assert!(w.says.contains("pod=\"a\": leak:"), "{}", w.says);
        assert!(
            w.says.contains("50% of the matched processes"),
            "{}",
            w.says
        );
    }

    #[test]
    fn a_sample_repeated_at_every_step_counts_once() {
        // Scraped every 2 s, queried every 1 s: each sample twice.
        let live = vec![hour("a", |m| m)];
        let stamps = vec![hour("a", |m| (m / 2.0).floor() * 120.0)];
        let once = once_per_scrape(live, &stamps);
        assert_eq!(once[0].points.len(), 30);
        assert_eq!(once[0].points[1], (120.0, 2.0));
        // Without stamps, nothing is left out.
        assert_eq!(
            once_per_scrape(vec![hour("b", |m| m)], &stamps)[0]
                .points
                .len(),
            60
        );
    }

    #[test]
    fn no_probe_series_says_how_to_get_them() {
        let w = group_why(vec![], vec![], vec![], None, &group(), 60.0, 600.0);
        assert_eq!(w.verdict, "no_probe");
        assert!(w.says.contains("memtrial_group_allocator_live_bytes"));
    }

    #[test]
    fn a_pod_that_started_late_loses_its_warm_up_before_the_verdict() {
        // Starts 30 min in, grows for its first 10 minutes (warm-up), then flat.
        let late = series(
            "late",
            (30..60)
                .map(|m| {
                    let m = m as f64;
                    (
                        m * 60.0,
                        if m < 40.0 {
                            (m - 30.0) * 10.0 * MIB
                        } else {
                            100.0 * MIB
                        },
                    )
                })
                .collect(),
        );
        let w = group_why(
            vec![late.clone()],
            vec![late.clone()],
            vec![late],
            None,
            &group(),
            60.0,
            600.0,
        );
        assert_eq!(w.verdict, "plateau", "{}", w.says);
    }

    #[test]
    fn the_pitfall_names_its_numbers() {
        let p = pitfall(
            &[
                hour("a", |m| if m > 30.0 { 1.0 } else { 0.0 }),
                hour("b", |_| 0.0),
            ],
            &[hour("a", |_| 40.0)],
            &[hour("a", |_| 512.0)],
            &[hour("a", |_| 8.0)],
            &[hour("a", |_| 64.0)],
        )
        .unwrap();
        assert_eq!(
            (p.pods, p.of_pods, p.most_arenas, p.limit),
            (1, 2, Some(40), Some(512))
        );
        assert!(p.says.contains("quota of 8.00 CPUs"), "{}", p.says);
        assert!(pitfall(&[hour("a", |_| 0.0)], &[], &[], &[], &[]).is_none());
    }
}
