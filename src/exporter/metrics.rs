//! The exposition: a [`Snapshot`] in, the text of `/metrics` out, through the official
//! Prometheus client (`prometheus-client`, OpenMetrics text format). A fresh registry per
//! scrape: a process or group that is gone leaves no stale series behind.
//!
//! Cardinality: the `memtrial_group_*` series carry `group` only (one group per distinct
//! `comm` of the matched processes), so PID churn does not create series. The
//! `memtrial_process_*` series carry `pid` and appear only with `--per-process`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::figures::{group, GroupFigures, ProcessFigures, Snapshot};

type IntGauge = Gauge<u64, AtomicU64>;
type RealGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabel {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    group: String,
    pid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupAllocatorLabels {
    group: String,
    allocator: String,
    how: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessAllocatorLabels {
    group: String,
    pid: String,
    allocator: String,
    how: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessJemallocLabels {
    group: String,
    pid: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

/// Registers a family under `name` and returns a handle to fill it.
fn family<L, M>(reg: &mut Registry, name: &str, help: &str) -> Family<L, M>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    M: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + Send
        + Sync
        + std::fmt::Debug
        + 'static,
{
    let f = Family::<L, M>::default();
    // The client ends every help text with a full stop itself.
    reg.register(name, help.trim_end_matches('.'), f.clone());
    f
}

/// Group-level families.
struct Groups {
    processes: Family<GroupLabel, IntGauge>,
    rss: Family<GroupLabel, IntGauge>,
    pss: Family<GroupLabel, IntGauge>,
    uss: Family<GroupLabel, IntGauge>,
    pss_processes: Family<GroupLabel, IntGauge>,
    swap: Family<GroupLabel, IntGauge>,
    threads: Family<GroupLabel, IntGauge>,
    arenas: Family<GroupLabel, IntGauge>,
    arena_limit: Family<GroupLabel, IntGauge>,
    estimated: Family<GroupLabel, IntGauge>,
    pitfall: Family<GroupLabel, IntGauge>,
    jemalloc_arenas: Family<GroupLabel, IntGauge>,
    quota: Family<GroupLabel, RealGauge>,
    visible: Family<GroupLabel, IntGauge>,
    mem_limit: Family<GroupLabel, IntGauge>,
    working_set: Family<GroupLabel, IntGauge>,
    shared: Family<GroupLabel, IntGauge>,
    others: Family<GroupLabel, IntGauge>,
    allocator: Family<GroupAllocatorLabels, IntGauge>,
    allocator_processes: Family<GroupAllocatorLabels, IntGauge>,
    probed: Family<GroupLabel, IntGauge>,
    live: Family<GroupLabel, IntGauge>,
    held: Family<GroupLabel, IntGauge>,
    age: Family<GroupLabel, RealGauge>,
}

impl Groups {
    fn register(reg: &mut Registry) -> Groups {
        Groups {
            processes: family(reg, "memtrial_group_processes", "Matched processes in the group."),
            rss: family(reg, "memtrial_group_resident_bytes", "Summed VmRSS (/proc/PID/status), read every scrape; double-counts pages shared between processes."),
            pss: family(reg, "memtrial_group_proportional_bytes", "Summed Pss (/proc/PID/smaps_rollup), cached; covers memtrial_group_pss_processes processes."),
            uss: family(reg, "memtrial_group_unique_bytes", "Summed USS, the private pages (/proc/PID/smaps_rollup), cached."),
            pss_processes: family(reg, "memtrial_group_pss_processes", "Processes whose smaps_rollup has been read (the PSS and USS sums cover these)."),
            swap: family(reg, "memtrial_group_swap_bytes", "Summed VmSwap (/proc/PID/status)."),
            threads: family(reg, "memtrial_group_threads", "Summed Threads (/proc/PID/status)."),
            arenas: family(reg, "memtrial_group_glibc_arenas", "glibc malloc arenas summed over the group's glibc processes (heap headers read through /proc/PID/mem, or estimated from the maps), cached."),
            arena_limit: family(reg, "memtrial_group_glibc_arena_limit", "The highest glibc arena limit among the group's glibc processes (MALLOC_ARENA_MAX, glibc.malloc.arena_max, else 8 x online CPUs)."),
            estimated: family(reg, "memtrial_group_glibc_arenas_estimated_processes", "glibc processes whose arena count is estimated from the maps (/proc/PID/mem refused): an upper bound."),
            pitfall: family(reg, "memtrial_group_arena_pitfall", "1 when a process of the group has arenas sized for the host's CPUs, not its CPU quota: a glibc arena limit at least 2 x 8 x ceil(quota), or jemalloc arenas at least 2 x 4 x ceil(quota) (try MALLOC_CONF=narenas:4 x ceil(quota))."),
            jemalloc_arenas: family(reg, "memtrial_group_jemalloc_arenas", "jemalloc arenas summed over the group's jemalloc processes: arenas.narenas from memtrial's probe where it is preloaded, else narenas of MALLOC_CONF, else jemalloc's default of 4 per CPU in the affinity mask."),
            quota: family(reg, "memtrial_group_cpu_quota_cpus", "The smallest cgroup CPU quota among the group's processes, in CPUs (absent: no quota)."),
            visible: family(reg, "memtrial_group_visible_cpus", "CPUs the processes see (online CPUs): what glibc sizes its arena limit from."),
            mem_limit: family(reg, "memtrial_group_memory_limit_bytes", "The smallest cgroup memory limit among the group's processes (absent: no limit)."),
            working_set: family(reg, "memtrial_group_cgroup_working_set_bytes", "The working set of the memory cgroups the group's processes are in (usage less inactive page cache, what the kubelet evicts on), each cgroup counted once; it includes any other process in those cgroups: the group's own only where memtrial_group_cgroup_shared is 0."),
            shared: family(reg, "memtrial_group_cgroup_shared", "1 when the group's memory cgroups (or the groups below them) also hold processes outside the group, or could not all be read: its memtrial_group_cgroup_working_set_bytes is then not the group's own (judge will not compare groups on it); 0 when they hold only the group's processes."),
            others: family(reg, "memtrial_group_cgroup_other_processes", "Processes in the group's memory cgroups (and the groups below them) that are not the group's: another group's, or unmatched; a lower bound when memtrial_group_cgroup_shared is 1 for want of reading them all."),
            allocator: family(reg, "memtrial_group_allocator_info", "An allocator answering malloc in the group's processes and how it got there (default, preloaded, linked, executable, static, several); value 1."),
            allocator_processes: family(reg, "memtrial_group_allocator_processes", "Processes of the group per allocator and how it got there."),
            probed: family(reg, "memtrial_group_probed_processes", "Processes carrying memtrial's allocator probe that reported."),
            live: family(reg, "memtrial_group_allocator_live_bytes", "Bytes allocated and not freed, from the allocator's own counters (memtrial's probe), summed over probed processes."),
            held: family(reg, "memtrial_group_allocator_held_bytes", "Bytes the allocator holds from the OS (memtrial's probe), summed over probed processes."),
            age: family(reg, "memtrial_group_stale_seconds", "Age of the oldest cached costly figure (PSS, USS, arenas) in the group."),
        }
    }

    /// One group's figures into the families.
    fn set(&self, name: String, f: &GroupFigures) {
        let l = GroupLabel {
            group: name.clone(),
        };
        self.processes.get_or_create(&l).set(f.processes);
        self.rss.get_or_create(&l).set(f.rss_bytes);
        self.swap.get_or_create(&l).set(f.swap_bytes);
        self.threads.get_or_create(&l).set(f.threads);
        self.pss_processes.get_or_create(&l).set(f.pss_processes);
        if f.pss_processes > 0 {
            self.pss.get_or_create(&l).set(f.pss_bytes);
            self.uss.get_or_create(&l).set(f.uss_bytes);
        }
        if let Some(a) = f.glibc_arenas {
            self.arenas.get_or_create(&l).set(a);
        }
        if let Some(a) = f.glibc_arena_limit {
            self.arena_limit.get_or_create(&l).set(a);
            self.estimated
                .get_or_create(&l)
                .set(f.glibc_arenas_estimated);
        }
        self.pitfall
            .get_or_create(&l)
            .set(u64::from(f.pitfall_processes > 0));
        if let Some(a) = f.jemalloc_arenas {
            self.jemalloc_arenas.get_or_create(&l).set(a);
        }
        if let Some(q) = f.cpu_quota_cpus {
            self.quota.get_or_create(&l).set(q);
        }
        self.visible
            .get_or_create(&l)
            .set(u64::from(f.visible_cpus));
        if let Some(m) = f.memory_limit_bytes {
            self.mem_limit.get_or_create(&l).set(m);
        }
        if let Some(w) = f.cgroup_working_set_bytes {
            self.working_set.get_or_create(&l).set(w);
        }
        if let Some(shared) = f.cgroup_shared() {
            self.shared.get_or_create(&l).set(u64::from(shared));
        }
        if let Some(n) = f.cgroup_other_processes {
            self.others.get_or_create(&l).set(n);
        }
        for (a, n) in &f.allocators {
            let labels = GroupAllocatorLabels {
                group: name.clone(),
                allocator: a.name.into(),
                how: a.how.as_str().into(),
            };
            self.allocator.get_or_create(&labels).set(1);
            self.allocator_processes.get_or_create(&labels).set(*n);
        }
        self.probed.get_or_create(&l).set(f.probed_processes);
        if let Some(v) = f.live_bytes {
            self.live.get_or_create(&l).set(v);
        }
        if let Some(v) = f.held_bytes {
            self.held.get_or_create(&l).set(v);
        }
        if let Some(a) = f.costly_age_seconds {
            self.age.get_or_create(&l).set(a);
        }
    }
}

/// Per-process families (`--per-process`).
struct Processes {
    rss: Family<ProcessLabels, IntGauge>,
    pss: Family<ProcessLabels, IntGauge>,
    uss: Family<ProcessLabels, IntGauge>,
    swap: Family<ProcessLabels, IntGauge>,
    threads: Family<ProcessLabels, IntGauge>,
    arenas: Family<ProcessLabels, IntGauge>,
    arena_limit: Family<ProcessLabels, IntGauge>,
    pitfall: Family<ProcessLabels, IntGauge>,
    jemalloc_arenas: Family<ProcessJemallocLabels, IntGauge>,
    allocator: Family<ProcessAllocatorLabels, IntGauge>,
    live: Family<ProcessLabels, IntGauge>,
    held: Family<ProcessLabels, IntGauge>,
}

impl Processes {
    fn register(reg: &mut Registry) -> Processes {
        Processes {
            rss: family(
                reg,
                "memtrial_process_resident_bytes",
                "VmRSS of one process (high cardinality: --per-process).",
            ),
            pss: family(
                reg,
                "memtrial_process_proportional_bytes",
                "Pss of one process, cached.",
            ),
            uss: family(
                reg,
                "memtrial_process_unique_bytes",
                "USS of one process, cached.",
            ),
            swap: family(reg, "memtrial_process_swap_bytes", "VmSwap of one process."),
            threads: family(reg, "memtrial_process_threads", "Threads of one process."),
            arenas: family(
                reg,
                "memtrial_process_glibc_arenas",
                "glibc arenas of one process, cached.",
            ),
            arena_limit: family(
                reg,
                "memtrial_process_glibc_arena_limit",
                "glibc arena limit of one process.",
            ),
            pitfall: family(
                reg,
                "memtrial_process_arena_pitfall",
                "1 when the process's glibc arena limit is at least 2 x 8 x ceil(CPU quota), or its jemalloc arenas at least 2 x 4 x ceil(CPU quota).",
            ),
            jemalloc_arenas: family(
                reg,
                "memtrial_process_jemalloc_arenas",
                "jemalloc arenas of one process; source: probe (arenas.narenas), setting (MALLOC_CONF narenas) or default (4 x CPUs in the affinity mask).",
            ),
            allocator: family(
                reg,
                "memtrial_process_allocator_info",
                "The allocator answering malloc in one process (value 1).",
            ),
            live: family(
                reg,
                "memtrial_process_allocator_live_bytes",
                "Live bytes from memtrial's probe in one process.",
            ),
            held: family(
                reg,
                "memtrial_process_allocator_held_bytes",
                "Held bytes from memtrial's probe in one process.",
            ),
        }
    }

    /// One process's figures into the families.
    fn set(&self, f: &ProcessFigures) {
        let l = ProcessLabels {
            group: f.group.clone(),
            pid: f.pid.to_string(),
        };
        self.rss.get_or_create(&l).set(f.rss_bytes);
        self.swap.get_or_create(&l).set(f.swap_bytes);
        self.threads.get_or_create(&l).set(f.threads);
        if let Some(v) = f.pss_bytes {
            self.pss.get_or_create(&l).set(v);
        }
        if let Some(v) = f.uss_bytes {
            self.uss.get_or_create(&l).set(v);
        }
        if let (Some(a), true) = (f.arenas, f.allocator.is_some_and(|a| a.is_glibc())) {
            self.arenas.get_or_create(&l).set(a.count);
            self.arena_limit.get_or_create(&l).set(a.limit);
        }
        self.pitfall.get_or_create(&l).set(u64::from(f.pitfall()));
        if let Some(je) = f.jemalloc_arenas {
            self.jemalloc_arenas
                .get_or_create(&ProcessJemallocLabels {
                    group: f.group.clone(),
                    pid: l.pid.clone(),
                    source: je.source.as_str().into(),
                })
                .set(je.count);
        }
        if let Some(a) = f.allocator {
            self.allocator
                .get_or_create(&ProcessAllocatorLabels {
                    group: f.group.clone(),
                    pid: l.pid.clone(),
                    allocator: a.name.into(),
                    how: a.how.as_str().into(),
                })
                .set(1);
        }
        if let Some(pr) = f.probe {
            if let Some(v) = pr.live_bytes {
                self.live.get_or_create(&l).set(v);
            }
            if let Some(v) = pr.held_bytes {
                self.held.get_or_create(&l).set(v);
            }
        }
    }
}

/// The text of `/metrics` for one snapshot (OpenMetrics text, ending in `# EOF`).
pub(crate) fn encode(s: &Snapshot) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::default();
    let g = Groups::register(&mut reg);
    for (name, f) in group(&s.processes, &s.cgroup_members) {
        g.set(name, &f);
    }
    if s.per_process {
        let p = Processes::register(&mut reg);
        for f in &s.processes {
            p.set(f);
        }
    }
    exporter_families(&mut reg, s);
    let mut out = String::new();
    text::encode(&mut out, &reg)?;
    Ok(out)
}

/// The exposition formats served, chosen by the scraper's `Accept` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// OpenMetrics 1.0 text: what Prometheus asks for, and what the client writes.
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4: for any other scraper (curl, `promtool
    /// check metrics`), in which a counter's family carries its `_total` name.
    Classic,
}

impl Format {
    /// OpenMetrics when the scraper accepts it, else the classic format.
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a)
                if a.to_ascii_lowercase()
                    .contains("application/openmetrics-text") =>
            {
                Format::OpenMetrics
            }
            _ => Format::Classic,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The exposition `openmetrics` (as [`encode`] writes it) in this format.
    pub fn render(self, openmetrics: String) -> String {
        match self {
            Format::OpenMetrics => openmetrics,
            Format::Classic => classic(&openmetrics),
        }
    }
}

/// The classic text format of an OpenMetrics exposition: a counter's `# HELP` and `# TYPE`
/// name the `_total` series its samples carry, and there is no `# EOF` (nor `# UNIT`).
/// Gauges, labels, escaping and values are the same in both.
fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{prefix}{name}_total {tail}"));
                } else {
                    out.push_str(line);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The exporter's own figures: unreadable processes, cost, cache.
fn exporter_families(reg: &mut Registry, s: &Snapshot) {
    let unreadable: Family<ReasonLabel, IntGauge> = family(
        reg,
        "memtrial_unreadable_processes",
        "Matched processes not (fully) readable at this scrape, by reason (permission_denied, vanished, error, probe_refused: a probe file that is not a regular file of the process's uid or root); a process counts once per reason.",
    );
    for r in [
        super::figures::Unreadable::PermissionDenied,
        super::figures::Unreadable::Vanished,
        super::figures::Unreadable::Error,
        super::figures::Unreadable::ProbeRefused,
    ] {
        unreadable
            .get_or_create(&ReasonLabel {
                reason: r.as_str().into(),
            })
            .set(s.unreadable.get(&r).copied().unwrap_or(0));
    }
    let e = &s.exporter;
    let reads: Family<OutcomeLabel, Counter> = family(
        reg,
        "memtrial_exporter_costly_reads",
        "Costly per-process reads (smaps_rollup, maps, arena headers), one per matched process and scrape: read afresh, served from the cache (younger than --max-age), or deferred (due, but the scrape's budget was spent: the older figure, if any, is shown).",
    );
    for (outcome, n) in [
        ("read", e.costly_reads),
        ("cached", e.cached_reads),
        ("deferred", e.deferred_reads),
    ] {
        reads
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc_by(n);
    }
    let scrapes = Counter::<u64>::default();
    scrapes.inc_by(e.scrapes);
    reg.register("memtrial_exporter_scrapes", "Scrapes served", scrapes);
    for (name, help, v) in [
        (
            "memtrial_exporter_collect_seconds",
            "Time spent collecting this scrape's figures.",
            e.collect_seconds,
        ),
        (
            "memtrial_exporter_budget_seconds",
            "Time per scrape allowed for costly reads (--budget).",
            e.budget_seconds,
        ),
        (
            "memtrial_exporter_max_age_seconds",
            "Age at which a cached costly figure is read again (--max-age).",
            e.max_age_seconds,
        ),
    ] {
        let gauge = RealGauge::default();
        gauge.set(v);
        reg.register(name, help.trim_end_matches('.'), gauge);
    }
}

#[cfg(test)]
mod tests {
    use super::super::figures::*;
    use super::*;

    fn snapshot(per_process: bool) -> Snapshot {
        let glibc = AllocatorLabel {
            name: "glibc",
            how: HowLabel::Default,
        };
        let base = ProcessFigures {
            pid: 100,
            group: "puma".into(),
            rss_bytes: 300 << 20,
            swap_bytes: 0,
            threads: 12,
            pss_bytes: Some(200 << 20),
            uss_bytes: Some(180 << 20),
            costly_age_seconds: Some(4.5),
            allocator: Some(glibc),
            arenas: Some(ArenaFigures {
                count: 13,
                exact: true,
                limit: 16,
            }),
            cpu_quota_cpus: Some(1.0),
            visible_cpus: 2,
            memory_limit_bytes: Some(1 << 30),
            cgroup_working_set: Some(("/pod/web".into(), 400 << 20)),
            probe: None,
            jemalloc_arenas: None,
        };
        let worker = ProcessFigures {
            pid: 101,
            probe: Some(ProbeFigures {
                live_bytes: Some(90 << 20),
                held_bytes: Some(150 << 20),
                arenas: None,
            }),
            ..base.clone()
        };
        let java = ProcessFigures {
            pid: 200,
            group: "java".into(),
            rss_bytes: 1 << 30,
            threads: 40,
            pss_bytes: None,
            uss_bytes: None,
            costly_age_seconds: None,
            allocator: Some(AllocatorLabel {
                name: "jemalloc",
                how: HowLabel::Preloaded,
            }),
            arenas: None,
            jemalloc_arenas: Some(crate::exporter::figures::JemallocArenas {
                count: 8,
                source: crate::exporter::figures::JemallocArenasSource::Default,
            }),
            cpu_quota_cpus: None,
            memory_limit_bytes: None,
            // On a host: its cgroup holds a shell and a cron daemon too.
            cgroup_working_set: Some(("/system.slice/app.service".into(), 2 << 30)),
            ..base.clone()
        };
        let members = |pids: &[i32]| crate::linux::container::Members {
            pids: pids.to_vec(),
            complete: true,
        };
        Snapshot {
            processes: vec![base, worker, java],
            unreadable: [(Unreadable::PermissionDenied, 2)].into_iter().collect(),
            exporter: ExporterFigures {
                scrapes: 3,
                costly_reads: 5,
                cached_reads: 4,
                deferred_reads: 1,
                collect_seconds: 0.25,
                budget_seconds: 0.2,
                max_age_seconds: 30.0,
            },
            per_process,
            cgroup_members: [
                ("/pod/web".to_string(), members(&[100, 101])),
                (
                    "/system.slice/app.service".to_string(),
                    members(&[200, 310, 311]),
                ),
            ]
            .into_iter()
            .collect(),
        }
    }

    /// The exposition with each family's samples sorted: the client keeps a family's
    /// series in a hash map, so their order varies from run to run.
    fn sorted(text: &str) -> String {
        let mut out = Vec::new();
        let mut samples: Vec<&str> = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') {
                samples.sort_unstable();
                out.append(&mut samples);
                out.push(line);
            } else {
                samples.push(line);
            }
        }
        samples.sort_unstable();
        out.append(&mut samples);
        out.join("\n")
    }

    #[test]
    fn exposition_of_fixed_figures() {
        insta::assert_snapshot!(
            "exposition_groups",
            sorted(&encode(&snapshot(false)).unwrap())
        );
    }

    #[test]
    fn exposition_per_process() {
        let text = encode(&snapshot(true)).unwrap();
        insta::assert_snapshot!("exposition_per_process", sorted(&text));
    }

    #[test]
    fn group_series_carry_no_pid() {
        let text = encode(&snapshot(false)).unwrap();
        assert!(!text.contains("pid="), "{text}");
        assert!(text.contains("memtrial_group_arena_pitfall{group=\"puma\"} 1"));
        assert!(text.contains("memtrial_group_arena_pitfall{group=\"java\"} 0"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn the_classic_format_names_counters_by_their_samples() {
        let text = Format::Classic.render(encode(&snapshot(false)).unwrap());
        assert!(text.contains("# HELP memtrial_exporter_scrapes_total Scrapes served"));
        assert!(text.contains("# TYPE memtrial_exporter_scrapes_total counter\n"));
        assert!(text.contains("\nmemtrial_exporter_scrapes_total 3\n"));
        assert!(text.contains("# TYPE memtrial_exporter_costly_reads_total counter\n"));
        assert!(text.contains("# TYPE memtrial_group_processes gauge\n"));
        assert!(!text.contains("# EOF"), "{text}");
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::negotiate(Some("*/*")), Format::Classic);
        assert_eq!(Format::negotiate(None), Format::Classic);
    }

    #[test]
    fn a_hostile_comm_is_escaped() {
        let mut s = snapshot(false);
        s.processes[0].group = "a\"b\\c\nd".into();
        let text = encode(&s).unwrap();
        assert!(
            text.contains("memtrial_group_processes{group=\"a\\\"b\\\\c\\nd\"} 1"),
            "{text}"
        );
    }
}
