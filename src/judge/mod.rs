//! `memtrial judge`: a baseline and variant groups of a fleet compared from Prometheus, with
//! the statistics of a local trial made fit for time series ([`blocks`]): per pod and time
//! block a median, a group's figure the median of those, each variant's ratio to the
//! baseline with a bootstrap interval, and a verdict that never outruns the data ("too
//! little data: N more blocks").
//!
//! Groups are label selectors over one memory metric: cAdvisor's
//! `container_memory_working_set_bytes` (what the kubelet evicts on), memtrial's exporter's
//! per-process or per-group series, or any the user names. One selector can also be judged
//! before and after a moment (a rollout), each side its own window.

pub mod blocks;
pub mod html;
pub mod prom;
pub mod why;

use serde::Serialize;

use blocks::{Cells, MIN_BLOCKS};
use prom::{Prometheus, Values, MAX_POINTS};

/// The memory metrics tried in order when none is named.
pub const METRICS: &[&str] = &[
    "container_memory_working_set_bytes",
    "memtrial_process_resident_bytes",
    "memtrial_group_cgroup_working_set_bytes",
    "memtrial_group_resident_bytes",
    "process_resident_memory_bytes",
];

/// The exporter's mark of a group whose cgroup figures are not its own (its memory
/// cgroups hold other processes, or could not all be read), and how many others they hold.
const CGROUP_SHARED: &str = "memtrial_group_cgroup_shared";
const CGROUP_OTHERS: &str = "memtrial_group_cgroup_other_processes";

/// The exporter's metrics that are a cgroup's figure, not the group's processes' own: each
/// group's series is its own only where [`CGROUP_SHARED`] says so.
const CGROUP_METRICS: &[&str] = &["memtrial_group_cgroup_working_set_bytes"];

/// The other memory figures shown beside each primary metric, where they are exported for
/// the baseline: cAdvisor's RSS beside its working set, memtrial's PSS beside its RSS, and
/// so on — Heroku's table had RSS, the kubelet evicts on the working set, PSS is a forking
/// server's real footprint.
const ALSO: &[(&str, &[&str])] = &[
    (
        "container_memory_working_set_bytes",
        &["container_memory_rss"],
    ),
    (
        "memtrial_process_resident_bytes",
        &["memtrial_process_proportional_bytes"],
    ),
    (
        "memtrial_group_cgroup_working_set_bytes",
        &[
            "memtrial_group_resident_bytes",
            "memtrial_group_proportional_bytes",
        ],
    ),
    (
        "memtrial_group_resident_bytes",
        &[
            "memtrial_group_proportional_bytes",
            "memtrial_group_cgroup_working_set_bytes",
        ],
    ),
];

/// Points aimed at per series: fine enough for hourly blocks over a week.
const POINTS: u64 = 1000;

/// One group: a name, its selector, its window (Unix seconds).
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub selector: String,
    pub start: f64,
    pub end: f64,
}

/// What to judge. The first group is the baseline.
#[derive(Debug, Clone)]
pub struct JudgeSpec {
    pub prometheus: String,
    pub groups: Vec<Group>,
    pub metric: Option<String>,
    /// Seconds; `None`: an hour for a window of 12 hours or more, else a twelfth of it.
    pub block: Option<f64>,
    /// Seconds left out of a pod that started in the window; `None`: one block.
    pub warmup: Option<f64>,
    /// Pair the blocks of windows a whole number of weeks apart (the same hours of the week),
    /// as for groups over the same window.
    pub align_week: bool,
    /// A latency histogram's `_bucket` series, with matchers of its own
    /// (`http_request_duration_seconds_bucket{route="/items"}`): p50, p95 and throughput
    /// per block beside the memory.
    pub latency: Option<String>,
}

/// A latency histogram named by the user: its `_bucket` metric's name (without the
/// suffix) and its own matchers.
pub fn parse_latency(text: &str) -> Result<(String, String), String> {
    let t = text.trim();
    let (name, matchers) = match t.split_once('{') {
        Some((n, rest)) => (
            n,
            rest.strip_suffix('}').ok_or_else(|| {
                format!("--latency {text:?}: the matchers' braces are not closed")
            })?,
        ),
        None => (t, ""),
    };
    let base = name.strip_suffix("_bucket").ok_or_else(|| {
        format!("--latency {text:?}: name a histogram's _bucket series, e.g. http_request_duration_seconds_bucket{{route=\"/items\"}}")
    })?;
    let ok = !base.is_empty()
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !matchers.contains(['{', '}', '\n']);
    if !ok {
        return Err(format!(
            "--latency {text:?}: give NAME_bucket or NAME_bucket{{MATCHERS}}"
        ));
    }
    Ok((base.to_string(), matchers.trim().to_string()))
}

/// One figure of a group beside its memory: a latency quantile or the throughput.
#[derive(Debug, Clone, Serialize)]
pub struct Beside {
    /// `p50_seconds`, `p95_seconds`, `requests_per_second`.
    pub name: String,
    /// The median over the group's blocks.
    pub median: Option<f64>,
    pub ratio: Option<f64>,
    pub ci95: Option<[f64; 2]>,
}

/// A week in seconds.
pub const WEEK: f64 = 7.0 * 86400.0;

/// kube-state-metrics' restarts counter and last termination reason.
const RESTARTS: &str = "kube_pod_container_status_restarts_total";
const TERMINATED: &str = "kube_pod_container_status_last_terminated_reason";

/// A memory metric left out because its series do not belong to each group.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub metric: String,
    pub why: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Judgement {
    pub prometheus: String,
    pub metric: String,
    /// Why this metric: named, or the first of [`METRICS`] with the baseline's series whose
    /// series belong to each group.
    pub metric_why: String,
    /// Metrics passed over (the primary ones before it, and the other memory metrics),
    /// each with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_metrics: Vec<Skipped>,
    pub step_seconds: u64,
    pub block_seconds: f64,
    pub warmup_seconds: f64,
    pub groups: Vec<GroupResult>,
    /// What to do: the leanest variant significantly below the baseline without a
    /// significantly higher p95, or keeping the baseline.
    pub recommendation: String,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupResult {
    pub name: String,
    pub selector: String,
    pub start: String,
    pub end: String,
    pub pods: usize,
    pub blocks: usize,
    pub blocks_with_data: usize,
    pub samples: usize,
    /// Pods that started in the window, their warm-up left out.
    pub warmed_pods: usize,
    /// The median over pods and blocks of the metric.
    pub median: Option<f64>,
    /// Per time block from the window's start, the median over the pods' block medians.
    pub per_block: Vec<Option<f64>>,
    /// Against the baseline (absent for the baseline).
    pub ratio: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    /// Container restarts in the window (kube-state-metrics' counter), when it is exported.
    pub restarts: Option<u64>,
    /// Pods whose last termination was an OOM kill, when kube-state-metrics exports it.
    pub oom_killed_pods: Option<usize>,
    /// Latency quantiles and throughput from `--latency`, each against the baseline's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub beside: Vec<Beside>,
    /// The other memory metrics exported for the groups (named by their metric), each
    /// against the baseline's with the same bootstrap.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Beside>,
    /// `baseline`, `lower`, `higher`, `no_significant_difference`, `too_little_data`.
    pub verdict: String,
    pub says: String,
    /// Leak or fragmentation, from the exporter's allocator probe series.
    pub why: why::GroupWhy,
    /// The arena pitfall, where the exporter saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arena_pitfall: Option<why::ArenaPitfall>,
}

/// A selector as the user gives it, checked for what would break the query's shape.
pub fn check_selector(flag: &str, s: &str) -> Result<(), String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!(
            "{flag}: give a label selector, e.g. 'deployment=\"web\"'"
        ));
    }
    if t.contains(['{', '}', '\n', '\r']) || t.len() > 2000 {
        return Err(format!(
            "{flag} {s:?}: give the label matchers only, without braces or line breaks \
             (e.g. 'deployment=\"web\",variant=\"glibc\"'), at most 2000 characters"
        ));
    }
    Ok(())
}

fn rfc3339(t: f64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(t.max(0.0));
    humantime::format_rfc3339_seconds(at).to_string()
}

fn window_text(g: &Group) -> String {
    format!("{} – {}", rfc3339(g.start), rfc3339(g.end))
}

/// The query's step and the blocks: the step keeps a series within [`POINTS`] (and
/// Prometheus's limit), the block is the user's or the default for the longest window.
fn step_and_block(spec: &JudgeSpec) -> Result<(u64, f64), String> {
    let longest = spec
        .groups
        .iter()
        .map(|g| g.end - g.start)
        .fold(0.0f64, f64::max);
    let step = ((longest / POINTS as f64).ceil() as u64)
        .max((longest / (MAX_POINTS - 1) as f64).ceil() as u64)
        .max(1);
    let block = spec.block.unwrap_or(if longest >= 12.0 * 3600.0 {
        3600.0
    } else {
        (longest / 12.0).max(step as f64)
    });
    if block < step as f64 {
        return Err(format!(
            "--block {block} s is shorter than the query's step ({step} s for a {longest:.0} s \
             window): give a longer block or a shorter window"
        ));
    }
    Ok((step, block))
}

/// How many blocks a group's window holds.
fn block_count(g: &Group, block: f64) -> usize {
    ((g.end - g.start) / block).ceil().max(1.0) as usize
}

/// `metric{selector}`.
fn query(metric: &str, g: &Group) -> String {
    format!("{metric}{{{}}}", g.selector.trim())
}

/// What a metric's values are: bytes of memory when its name says so (Prometheus's
/// naming rule: the unit is the name's suffix), refused when impossible.
fn values_of(metric: &str) -> Values {
    if metric.ends_with("_bytes") {
        Values::Bytes
    } else {
        Values::Any
    }
}

/// Why `metric` cannot compare the groups: its series are not each group's own. Two ways
/// to know: the exporter marks a group whose cgroup holds other processes
/// ([`CGROUP_SHARED`], for [`CGROUP_METRICS`]); and two groups over overlapping windows
/// whose selectors pick the same series. `None` when each group's series are its own.
fn shared_between(
    prom: &Prometheus,
    spec: &JudgeSpec,
    metric: &str,
    step: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<String>, String> {
    let mut ask = |q: String, g: &Group| -> Result<Vec<prom::Series>, String> {
        progress(&format!("{}: {q}", g.name));
        prom.query_range(&q, g.start, g.end, step)
            .map_err(|e| e.to_string())
    };
    if CGROUP_METRICS.contains(&metric) {
        for g in &spec.groups {
            let marks = ask(query(CGROUP_SHARED, g), g)?;
            if marks.iter().all(|s| s.points.is_empty()) {
                return Ok(Some(format!(
                    "the exporter does not say whether {}'s cgroups hold only its processes \
                     ({CGROUP_SHARED} has no series: an exporter older than this memtrial)",
                    g.name
                )));
            }
            if marks.iter().any(|s| s.points.iter().any(|p| p.1 >= 1.0)) {
                let most = ask(query(CGROUP_OTHERS, g), g)?
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| p.1))
                    .fold(0.0f64, f64::max);
                let others = if most >= 1.0 {
                    format!(" (up to {most:.0} other process(es))")
                } else {
                    " (its members could not all be read)".to_string()
                };
                return Ok(Some(format!(
                    "{}'s memory cgroups also hold processes outside the group{others}, as the \
                     exporter marks them ({CGROUP_SHARED} = 1): a cgroup's figure there is not \
                     the group's own, and groups sharing one cgroup all get the same",
                    g.name
                )));
            }
        }
    }
    let mut picked: Vec<std::collections::BTreeSet<String>> = Vec::new();
    for g in &spec.groups {
        picked.push(
            ask(query(metric, g), g)?
                .iter()
                .filter(|s| !s.points.is_empty())
                .map(blocks::pod_name)
                .collect(),
        );
    }
    for (i, a) in spec.groups.iter().enumerate() {
        for (j, b) in spec.groups.iter().enumerate().skip(i + 1) {
            let overlap = a.start < b.end && b.start < a.end;
            if let Some(same) = picked[i]
                .intersection(&picked[j])
                .next()
                .filter(|_| overlap)
            {
                return Ok(Some(format!(
                    "{} and {} select the same series ({{{same}}}) over the same time",
                    a.name, b.name
                )));
            }
        }
    }
    Ok(None)
}

/// The metric to judge on and why, with the metrics passed over: the named one (refused
/// when its series are shared between the groups), or the first of [`METRICS`] that has
/// the baseline's series and whose series belong to each group.
fn find_metric(
    prom: &Prometheus,
    spec: &JudgeSpec,
    step: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<(String, String, Vec<Skipped>), String> {
    if let Some(m) = &spec.metric {
        if let Some(why) = shared_between(prom, spec, m, step, progress)? {
            return Err(format!(
                "--metric {m}: its series are not each group's own ({why}); name a metric that \
                 belongs to each group, e.g. memtrial_group_resident_bytes (the group's own \
                 processes) or memtrial_process_resident_bytes (--per-process)"
            ));
        }
        return Ok((m.clone(), "named with --metric".into(), Vec::new()));
    }
    let base = &spec.groups[0];
    let mut skipped = Vec::new();
    for m in METRICS {
        progress(&format!("looking for {m} of the baseline"));
        let s = prom
            .query_values(&query(m, base), (base.start, base.end, step), values_of(m))
            .map_err(|e| e.to_string())?;
        if !s.iter().any(|s| !s.points.is_empty()) {
            continue;
        }
        if let Some(why) = shared_between(prom, spec, m, step, progress)? {
            skipped.push(Skipped {
                metric: m.to_string(),
                why,
            });
            continue;
        }
        let why = if skipped.is_empty() {
            format!(
                "the first memory metric memtrial knows with series for {{{}}}",
                base.selector.trim()
            )
        } else {
            format!(
                "the first memory metric memtrial knows with series for {{{}}} that belong to each group ({} passed over: see why)",
                base.selector.trim(),
                skipped.iter().map(|k| k.metric.as_str()).collect::<Vec<_>>().join(", ")
            )
        };
        return Ok((m.to_string(), why, skipped));
    }
    if let Some(k) = skipped.first() {
        return Err(format!(
            "no memory metric memtrial knows belongs to each group: {} was passed over because \
             {}; run the exporter with --per-process, or name a metric with --metric",
            k.metric, k.why
        ));
    }
    Err(format!(
        "the baseline's selector {{{}}} matches no series of any memory metric memtrial knows \
         ({}) in {}: check the selector, or name the metric with --metric",
        base.selector,
        METRICS.join(", "),
        window_text(base)
    ))
}

/// Each group's `metric` per pod and block; when `required`, a group matching nothing is an
/// error naming it, else it gets empty cells (no figure, no ratio).
fn memory_cells(
    prom: &Prometheus,
    spec: &JudgeSpec,
    metric: &str,
    required: bool,
    (step, block, warmup): (u64, f64, f64),
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Cells>, String> {
    let mut out = Vec::new();
    for g in &spec.groups {
        let q = query(metric, g);
        progress(&format!("{}: {q}", g.name));
        let series = prom
            .query_values(&q, (g.start, g.end, step), values_of(metric))
            .map_err(|e| e.to_string())?;
        if required && series.iter().all(|s| s.points.is_empty()) {
            return Err(format!(
                "{}: {q} matches no series in {} (Prometheus {}): check the selector and the window",
                g.name,
                window_text(g),
                prom.url()
            ));
        }
        let n = block_count(g, block);
        let cells = blocks::cells(&series, g.start, block, n, step as f64, warmup);
        if required && values_of(metric) == Values::Bytes && cells.figure() == Some(0.0) {
            return Err(format!(
                "{}: {q} is 0 bytes (the median of its {} samples in {}, Prometheus {}): no \
                 process runs in nothing, and no ratio can be taken against it; check that the \
                 selector matches the workload's containers or processes (not a pause \
                 container or an empty cgroup)",
                g.name,
                cells.samples,
                window_text(g),
                prom.url()
            ));
        }
        out.push(cells);
    }
    Ok(out)
}

/// Each group's other memory metrics ([`ALSO`]) that the baseline's selector has series of
/// and whose series belong to each group (those that do not are added to `skipped`).
fn also_cells(
    prom: &Prometheus,
    spec: &JudgeSpec,
    metric: &str,
    blocking: (u64, f64, f64),
    skipped: &mut Vec<Skipped>,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Vec<(String, Cells)>>, String> {
    let others = ALSO
        .iter()
        .find(|(m, _)| *m == metric)
        .map_or(&[][..], |(_, o)| *o);
    let mut out: Vec<Vec<(String, Cells)>> = vec![Vec::new(); spec.groups.len()];
    for other in others {
        let per = memory_cells(prom, spec, other, false, blocking, progress)?;
        if per[0].figure().is_none() {
            continue;
        }
        if let Some(why) = shared_between(prom, spec, other, blocking.0, progress)? {
            if !skipped.iter().any(|k| k.metric == *other) {
                skipped.push(Skipped {
                    metric: other.to_string(),
                    why,
                });
            }
            continue;
        }
        for (k, c) in per.into_iter().enumerate() {
            out[k].push((other.to_string(), c));
        }
    }
    Ok(out)
}

/// Each group's latency quantiles and throughput per block from `--latency`: one series
/// per group, queried every block, its point at the end of block k covering block k.
fn latency_cells(
    prom: &Prometheus,
    spec: &JudgeSpec,
    latency: &str,
    block: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Vec<(String, Cells)>>, String> {
    let (name, own) = parse_latency(latency)?;
    let w = format!("{}s", block.round() as u64);
    let mut out = Vec::new();
    for g in &spec.groups {
        let m = [own.as_str(), g.selector.trim()]
            .into_iter()
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .join(",");
        let quantile = |q: f64| {
            format!("histogram_quantile({q}, sum by (le) (rate({name}_bucket{{{m}}}[{w}])))")
        };
        let mut per = Vec::new();
        for (fig, q) in [
            ("p50_seconds", quantile(0.5)),
            ("p95_seconds", quantile(0.95)),
            (
                "requests_per_second",
                format!("sum(rate({name}_count{{{m}}}[{w}]))"),
            ),
        ] {
            progress(&format!("{}: {q}", g.name));
            let series = prom
                .query_range(&q, g.start + block, g.end, block.round().max(1.0) as u64)
                .map_err(|e| e.to_string())?;
            let n = block_count(g, block);
            let c = blocks::cells(&series, g.start + block - 1.0, block, n, block, 0.0);
            per.push((fig.to_string(), c));
        }
        out.push(per);
    }
    Ok(out)
}

/// Whether a group's blocks are drawn with the baseline's: the same window, or with
/// `--align hour-of-week` one as long a whole number of weeks apart.
fn paired(spec: &JudgeSpec, g: &Group) -> bool {
    let base = &spec.groups[0];
    let same_length = (g.end - g.start - (base.end - base.start)).abs() < 1.0;
    let weeks_apart = ((g.start - base.start) / WEEK).round() * WEEK;
    (g.start == base.start && g.end == base.end)
        || (spec.align_week && same_length && (g.start - base.start - weeks_apart).abs() < 1.0)
}

/// A variant's memory against the baseline's: ratio, interval, verdict and its words.
type Verdict = (Option<f64>, Option<[f64; 2]>, String, String);

fn verdict(c: &Cells, b: &Cells, paired: bool, block: f64, seed: u64) -> Verdict {
    let have = c.blocks_with_data().min(b.blocks_with_data());
    if have < MIN_BLOCKS {
        let more = MIN_BLOCKS - have;
        return (
            None,
            None,
            "too_little_data".into(),
            format!(
                "too little data: {more} more block(s) of {} with data in both groups needed",
                crate::units::format_seconds(block)
            ),
        );
    }
    let Some((r, (lo, hi))) = blocks::ratio(c, b, paired, seed) else {
        return (
            None,
            None,
            "too_little_data".into(),
            "too little data for an interval".into(),
        );
    };
    let (v, s) = if hi < 1.0 {
        ("lower", "lower than the baseline, significantly")
    } else if lo > 1.0 {
        ("higher", "higher than the baseline, significantly")
    } else {
        (
            "no_significant_difference",
            "no significant difference (the interval includes 1)",
        )
    };
    (
        Some(r),
        Some([lo, hi]),
        v.to_string(),
        format!("{r:.2}× [{lo:.2}, {hi:.2}]: {s}"),
    )
}

/// What the reader should know of the groups as a whole.
fn notes(spec: &JudgeSpec, groups: &[GroupResult]) -> Vec<String> {
    let mut notes = Vec::new();
    if groups.iter().all(|g| g.restarts.is_none()) {
        notes.push(format!(
            "restarts and OOM kills: {RESTARTS} and {TERMINATED} (kube-state-metrics) have no \
             series for these selectors"
        ));
    }
    if spec.align_week {
        notes.push(
            "windows a whole number of weeks apart are compared block by block at the same \
             hours of the week"
                .into(),
        );
    }
    for g in groups.iter().skip(1) {
        let (p, bp) = (g.pods.max(1) as f64, groups[0].pods.max(1) as f64);
        if p / bp > 3.0 || bp / p > 3.0 {
            notes.push(format!(
                "{} has {} pod(s) against the baseline's {}: groups of very different size",
                g.name, g.pods, groups[0].pods
            ));
        }
        let (c, bc) = (g.blocks_with_data, groups[0].blocks_with_data);
        if c * 2 < bc || bc * 2 < c {
            notes.push(format!(
                "{} has data in {c} block(s) against the baseline's {bc}: very different coverage",
                g.name
            ));
        }
    }
    notes
}

/// Runs the queries and judges. `progress` hears what is being asked.
pub fn judge(spec: &JudgeSpec, progress: &mut dyn FnMut(&str)) -> Result<Judgement, String> {
    let prom = Prometheus::new(&spec.prometheus)?;
    if spec.groups.is_empty() {
        return Err("no baseline group".into());
    }
    let (step, block) = step_and_block(spec)?;
    let warmup = spec.warmup.unwrap_or(block);
    let (metric, metric_why, mut skipped_metrics) = find_metric(&prom, spec, step, progress)?;
    let cells = memory_cells(&prom, spec, &metric, true, (step, block, warmup), progress)?;
    let beside = match &spec.latency {
        Some(l) => latency_cells(&prom, spec, l, block, progress)?,
        None => Vec::new(),
    };
    let also = also_cells(
        &prom,
        spec,
        &metric,
        (step, block, warmup),
        &mut skipped_metrics,
        progress,
    )?;
    let mut groups = Vec::new();
    for (i, (g, c)) in spec.groups.iter().zip(&cells).enumerate() {
        let paired = paired(spec, g);
        let (ratio, ci95, verdict, says) = if i == 0 {
            (None, None, "baseline".into(), "the baseline".into())
        } else {
            verdict(c, &cells[0], paired, block, 0x1d6e + i as u64)
        };
        let (restarts, oom_killed_pods) = kube_state(&prom, g, step)?;
        let (why, arena_pitfall) = why::query(&prom, g, step, warmup, progress)?;
        let against = |table: &[Vec<(String, Cells)>], seed: u64| -> Vec<Beside> {
            table
                .get(i)
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(k, (name, c))| {
                    let r = (i > 0)
                        .then(|| blocks::ratio(c, &table[0][k].1, paired, seed + i as u64))
                        .flatten();
                    Beside {
                        name: name.clone(),
                        median: c.figure(),
                        ratio: r.map(|r| r.0),
                        ci95: r.map(|(_, (lo, hi))| [lo, hi]),
                    }
                })
                .collect()
        };
        let beside_of = against(&beside, 0xbe5);
        let also_of = against(&also, 0xa150);
        groups.push(GroupResult {
            name: g.name.clone(),
            selector: g.selector.clone(),
            start: rfc3339(g.start),
            end: rfc3339(g.end),
            pods: c.pods.len(),
            blocks: c.blocks(),
            blocks_with_data: c.blocks_with_data(),
            samples: c.samples,
            warmed_pods: c.warmed,
            median: c.figure(),
            per_block: c.per_block(),
            restarts,
            oom_killed_pods,
            beside: beside_of,
            also: also_of,
            ratio,
            ci95,
            verdict,
            says,
            why,
            arena_pitfall,
        });
    }
    same_traffic_leaks(spec, &mut groups);
    Ok(Judgement {
        recommendation: recommendation(&metric, &groups),
        prometheus: prom.url().to_string(),
        metric,
        metric_why,
        skipped_metrics,
        step_seconds: step,
        block_seconds: block,
        warmup_seconds: warmup,
        notes: notes(spec, &groups),
        groups,
    })
}

/// The rule a local run and a soak apply across variants, over the groups that share the
/// baseline's window (the same traffic at the same hours): a group whose pods' live bytes
/// all grow while another's all stay flat is not called a leak — the program's live data
/// is the same, so the allocator's count is the suspect.
fn same_traffic_leaks(spec: &JudgeSpec, groups: &mut [GroupResult]) {
    let base = &spec.groups[0];
    let same: Vec<bool> = spec
        .groups
        .iter()
        .map(|g| g.start == base.start && g.end == base.end)
        .collect();
    let moves: Vec<(&str, Option<bool>)> = groups
        .iter()
        .zip(&same)
        .map(|(g, same)| {
            let grows = match g.why.verdict.as_str() {
                "leak" => Some(true),
                "plateau" | "fragmentation" => Some(false),
                _ => None,
            };
            (g.name.as_str(), grows.filter(|_| *same))
        })
        .collect();
    let flats = crate::analysis::why::flat_beside(&moves);
    for (g, flat) in groups.iter_mut().zip(flats) {
        let Some(flat) = flat else { continue };
        g.why.says = crate::analysis::why::departs_sentence(
            &flat,
            crate::analysis::why::departure_cause(&g.name, true),
            &g.why.says,
        );
        g.why.verdict = crate::analysis::why::ALLOCATOR_DEPARTS.into();
    }
}

/// The leanest variant whose memory is significantly lower than the baseline's and whose
/// p95 latency (when measured) is not significantly higher; else the baseline.
fn recommendation(metric: &str, groups: &[GroupResult]) -> String {
    let slower = |g: &GroupResult| {
        g.beside
            .iter()
            .any(|b| b.name == "p95_seconds" && b.ci95.is_some_and(|[lo, _]| lo > 1.0))
    };
    let best = groups
        .iter()
        .skip(1)
        .filter(|g| g.verdict == "lower" && !slower(g))
        .min_by(|a, b| a.ratio.unwrap_or(1.0).total_cmp(&b.ratio.unwrap_or(1.0)));
    let base = &groups[0].name;
    match best {
        Some(g) => {
            let [lo, hi] = g.ci95.unwrap_or([f64::NAN; 2]);
            let leak = if g.why.verdict == "leak" || g.why.verdict == "mixed" {
                format!(
                    "; but its probe says {}: look before rolling it out",
                    g.why.verdict
                )
            } else {
                String::new()
            };
            format!(
                "{}: {metric} {:.2}× [{lo:.2}, {hi:.2}] of {base}'s{}{leak}",
                g.name,
                g.ratio.unwrap_or(f64::NAN),
                if g.beside.iter().any(|b| b.name == "p95_seconds") {
                    ", p95 not significantly higher"
                } else {
                    ""
                }
            )
        }
        None => {
            let slow = groups
                .iter()
                .skip(1)
                .filter(|g| g.verdict == "lower" && slower(g))
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>();
            if slow.is_empty() {
                format!("keep {base}: no variant's {metric} is significantly lower")
            } else {
                format!(
                    "keep {base}: {} use less memory but their p95 latency is significantly higher",
                    slow.join(", ")
                )
            }
        }
    }
}

/// A group's container restarts in its window (each counter's increases, a reset counted
/// as its new value) and its pods last terminated by an OOM kill, from kube-state-metrics;
/// `None` where it exports nothing for the selector.
fn kube_state(
    prom: &Prometheus,
    g: &Group,
    step: u64,
) -> Result<(Option<u64>, Option<usize>), String> {
    let sel = g.selector.trim();
    let restarts = prom
        .query_range(&format!("{RESTARTS}{{{sel}}}"), g.start, g.end, step)
        .map_err(|e| e.to_string())?;
    let restarts = (!restarts.is_empty()).then(|| {
        restarts
            .iter()
            .map(|s| {
                s.points
                    .windows(2)
                    .map(|w| {
                        let (a, b) = (w[0].1, w[1].1);
                        if b >= a {
                            (b - a) as u64
                        } else {
                            b as u64
                        }
                    })
                    .sum::<u64>()
            })
            .sum()
    });
    let oom = prom
        .query_range(
            &format!("{TERMINATED}{{{sel},reason=\"OOMKilled\"}}"),
            g.start,
            g.end,
            step,
        )
        .map_err(|e| e.to_string())?;
    let oom = restarts.map(|_| {
        let mut pods: Vec<String> = oom
            .iter()
            .filter(|s| s.points.iter().any(|p| p.1 >= 1.0))
            .map(|s| {
                s.labels
                    .get("pod")
                    .cloned()
                    .unwrap_or_else(|| blocks::pod_name(s))
            })
            .collect();
        pods.sort();
        pods.dedup();
        pods.len()
    });
    Ok((restarts, oom))
}

/// The judgement as text.
pub fn text(j: &Judgement) -> String {
    use crate::units::format_seconds;
    let bytes = j.metric.ends_with("_bytes");
    let mut out = format!("metric: {}, {}\n", j.metric, j.metric_why);
    for k in &j.skipped_metrics {
        out.push_str(&format!("not {}: {}\n", k.metric, k.why));
    }
    out += &format!(
        "memory from {} (Prometheus {}; step {} s; per pod, the median of each block of {}; a \
         pod that started in the window loses its first {} and the value it held then; the group's figure is the median \
         of its pods' blocks; intervals from a bootstrap over pods and runs of neighbouring \
         blocks)\n\n",
        j.metric,
        j.prometheus,
        j.step_seconds,
        format_seconds(j.block_seconds),
        format_seconds(j.warmup_seconds)
    );
    for g in &j.groups {
        out.push_str(&group_line(g, bytes));
    }
    for g in j.groups.iter().filter(|g| !g.also.is_empty()) {
        out.push_str(&also_line(g));
    }
    for g in j.groups.iter().filter(|g| !g.beside.is_empty()) {
        out.push_str(&latency_line(g));
    }
    for g in &j.groups {
        out.push_str(&why::line(&g.name, &g.why));
        out.push('\n');
        if let Some(p) = &g.arena_pitfall {
            out.push_str(&format!("{}: {}\n", g.name, p.says));
        }
    }
    out.push_str(&format!("recommendation: {}\n", j.recommendation));
    for n in &j.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    // Each line as text on a terminal, whatever a server's labels held (what came from
    // outside was escaped where it entered; this keeps any line from driving a terminal).
    out.split_inclusive('\n')
        .map(|l| match l.strip_suffix('\n') {
            Some(l) => format!("{}\n", crate::escape::terminal(l)),
            None => crate::escape::terminal(l),
        })
        .collect()
}

/// A group's line: its figure, what it rests on and what it says.
fn group_line(g: &GroupResult, bytes: bool) -> String {
    use crate::units::format_bytes;
    let figure = g.median.map_or("-".to_string(), |m| {
        if bytes {
            format_bytes(m)
        } else {
            format!("{m:.4}")
        }
    });
    format!(
        "{}: {figure} ({} pod(s), {} of {} block(s) with data, {} samples{}{}; {{{}}} {} – {}): {}\n",
        g.name,
        g.pods,
        g.blocks_with_data,
        g.blocks,
        g.samples,
        if g.warmed_pods > 0 {
            format!(", {} started in the window", g.warmed_pods)
        } else {
            String::new()
        },
        match (g.restarts, g.oom_killed_pods) {
            (Some(r), Some(o)) => format!(", {r} restart(s), {o} pod(s) last ended by an OOM kill"),
            _ => String::new(),
        },
        g.selector,
        g.start,
        g.end,
        g.says
    )
}

/// A group's other memory figures, each with its ratio and interval.
fn also_line(g: &GroupResult) -> String {
    use crate::units::format_bytes;
    let figs: Vec<String> = g
        .also
        .iter()
        .map(|b| {
            let v = b.median.map_or("-".to_string(), format_bytes);
            let r = match (b.ratio, b.ci95) {
                (Some(r), Some([lo, hi])) => format!(" ({r:.2}× [{lo:.2}, {hi:.2}])"),
                _ => String::new(),
            };
            format!("{} {v}{r}", b.name)
        })
        .collect();
    format!("{} also: {}\n", g.name, figs.join(", "))
}

/// A group's latency and throughput figures, each with its ratio and interval.
fn latency_line(g: &GroupResult) -> String {
    use crate::units::format_seconds;
    let figs: Vec<String> = g
        .beside
        .iter()
        .map(|b| {
            let v = b.median.map_or("-".to_string(), |m| {
                if b.name.ends_with("_seconds") {
                    format_seconds(m)
                } else {
                    format!("{m:.1}/s")
                }
            });
            let r = match (b.ratio, b.ci95) {
                (Some(r), Some([lo, hi])) => format!(" ({r:.2}× [{lo:.2}, {hi:.2}])"),
                _ => String::new(),
            };
            format!(
                "{} {v}{r}",
                b.name
                    .replace("_seconds", "")
                    .replace("requests_per_second", "throughput")
            )
        })
        .collect();
    format!("{} latency: {}\n", g.name, figs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaking_group_beside_a_flat_one_on_the_same_traffic_is_not_a_leak() {
        let spec = |after: f64| JudgeSpec {
            prometheus: String::new(),
            groups: vec![
                Group {
                    name: "glibc".into(),
                    selector: "v=\"glibc\"".into(),
                    start: 0.0,
                    end: 3600.0,
                },
                Group {
                    name: "arena2".into(),
                    selector: "v=\"arena2\"".into(),
                    start: after,
                    end: after + 3600.0,
                },
            ],
            metric: None,
            block: None,
            warmup: None,
            align_week: false,
            latency: None,
        };
        let groups = || {
            let mut g = vec![
                html::tests::group("glibc", "v=\"glibc\"", 2e8, None),
                html::tests::group("arena2", "v=\"arena2\"", 1e8, Some(0.5)),
            ];
            g[0].why.verdict = "leak".into();
            g[0].why.says = "leak in 3 of 3 pod(s)".into();
            g[1].why.verdict = "plateau".into();
            g
        };
        let mut same = groups();
        same_traffic_leaks(&spec(0.0), &mut same);
        assert_eq!(same[0].why.verdict, "allocator_departs");
        assert!(
            same[0]
                .why
                .says
                .starts_with("not a leak: live bytes grow here but stay flat under arena2"),
            "{}",
            same[0].why.says
        );
        assert!(same[0].why.says.ends_with("was: leak in 3 of 3 pod(s)"));
        assert_eq!(same[1].why.verdict, "plateau");
        // A window before and one after a rollout saw other traffic: the leak stands.
        let mut apart = groups();
        same_traffic_leaks(&spec(7200.0), &mut apart);
        assert_eq!(apart[0].why.verdict, "leak");
    }

    #[test]
    fn latency_histograms_are_named_with_their_own_matchers() {
        assert_eq!(
            parse_latency("http_request_duration_seconds_bucket{route=\"/items\"}"),
            Ok((
                "http_request_duration_seconds".into(),
                "route=\"/items\"".into()
            ))
        );
        assert_eq!(parse_latency("x_bucket"), Ok(("x".into(), String::new())));
        assert!(parse_latency("x_count").unwrap_err().contains("_bucket"));
        assert!(parse_latency("x_bucket{a=\"b\"")
            .unwrap_err()
            .contains("not closed"));
        assert!(parse_latency("x y_bucket").is_err());
        assert!(check_selector("--baseline", "a=\"b\"").is_ok());
        assert!(check_selector("--baseline", "{a=\"b\"}").is_err());
        assert!(check_selector("--baseline", " ").is_err());
    }
}
