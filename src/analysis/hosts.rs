//! The host as a factor: an experiment whose runs come from several machines (imported
//! records) is analysed per host, each variant against the baseline on the same host,
//! and the facts that change what an allocator does (CPUs, a CPU quota, a memory limit)
//! are compared between the hosts.

use crate::linux::host::HostInfo;
use crate::record::Experiment;
use crate::units::format_bytes;

use super::{analyse, Analysis};

/// The runs of one host and their analysis.
#[derive(Debug, Clone)]
pub struct HostGroup {
    pub host: HostInfo,
    /// The hostname, numbered when two hosts share it (`node-a (2)`).
    pub label: String,
    /// The experiment with this host's runs only.
    pub experiment: Experiment,
    pub analysis: Analysis,
}

/// A fact about a host that may differ between the hosts of an experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFact {
    Cpus,
    CpuQuota,
    MemoryLimit,
    Cpuset,
    Kernel,
    Glibc,
}

impl HostFact {
    pub(crate) const ALL: [HostFact; 6] = [
        HostFact::Cpus,
        HostFact::CpuQuota,
        HostFact::MemoryLimit,
        HostFact::Cpuset,
        HostFact::Kernel,
        HostFact::Glibc,
    ];

    /// The fact changes what an allocator does or what a run may use (glibc sizes its
    /// arenas by online CPUs, a quota throttles, a limit OOM-kills), so ratios from hosts
    /// that differ in it are not one population.
    pub(crate) fn matters(self) -> bool {
        matches!(
            self,
            HostFact::Cpus | HostFact::CpuQuota | HostFact::MemoryLimit | HostFact::Cpuset
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            HostFact::Cpus => "CPUs",
            HostFact::CpuQuota => "CPU quota",
            HostFact::MemoryLimit => "memory limit",
            HostFact::Cpuset => "cpuset",
            HostFact::Kernel => "kernel",
            HostFact::Glibc => "glibc",
        }
    }

    /// The fact's value on `h`, as shown.
    pub fn value(self, h: &HostInfo) -> String {
        let limits = h.container.as_ref();
        match self {
            HostFact::Cpus => format!("{} CPUs", h.cpus),
            HostFact::CpuQuota => match limits {
                None => "CPU quota not recorded".into(),
                Some(l) => match l.quota_cpus() {
                    Some(q) => format!("CPU quota {q:.2}"),
                    None => "no CPU quota".into(),
                },
            },
            HostFact::MemoryLimit => match limits {
                None => "memory limit not recorded".into(),
                Some(l) => match l.memory_limit_bytes {
                    Some(m) => format!("memory limit {}", format_bytes(m as f64)),
                    None => "no memory limit".into(),
                },
            },
            HostFact::Cpuset => match limits.and_then(|l| l.cpuset.as_deref()) {
                Some(c) => format!("cpuset {c}"),
                None => "no cpuset".into(),
            },
            HostFact::Kernel => format!("kernel {}", h.kernel),
            HostFact::Glibc => format!("glibc {}", h.glibc),
        }
    }
}

/// An experiment analysed per host.
#[derive(Debug, Clone)]
pub struct ByHost {
    pub groups: Vec<HostGroup>,
    /// The facts whose values differ between the hosts.
    pub differing: Vec<HostFact>,
}

impl ByHost {
    /// Hosts differ in a fact that matters (CPUs, quota, memory limit, cpuset).
    pub(crate) fn differ_in_what_matters(&self) -> bool {
        self.differing.iter().any(|f| f.matters())
    }
}

/// The hosts' labels: hostnames, numbered where two hosts share one.
pub fn labels(hosts: &[HostInfo]) -> Vec<String> {
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let name = if h.hostname.is_empty() {
                "unnamed host".to_string()
            } else {
                h.hostname.clone()
            };
            let same = hosts[..i]
                .iter()
                .filter(|o| o.hostname == h.hostname)
                .count();
            if same == 0 {
                name
            } else {
                format!("{name} ({})", same + 1)
            }
        })
        .collect()
}

/// Splits the experiment by host and analyses each part on its own.
pub fn by_host(e: &Experiment) -> ByHost {
    let hosts: Vec<HostInfo> = if e.hosts.is_empty() {
        vec![e.host.clone()]
    } else {
        e.hosts.clone()
    };
    let names = labels(&hosts);
    let groups: Vec<HostGroup> = hosts
        .iter()
        .zip(names)
        .enumerate()
        .map(|(hi, (host, label))| {
            let mut part = e.clone();
            let keep: Vec<usize> = (0..e.runs.len())
                .filter(|i| e.run_hosts.get(*i).copied().unwrap_or(0) == hi)
                .collect();
            part.runs = keep.iter().map(|i| e.runs[*i].clone()).collect();
            part.seqs = keep
                .iter()
                .filter_map(|i| e.seqs.get(*i).copied())
                .collect();
            part.run_hosts = vec![0; part.runs.len()];
            part.hosts = vec![host.clone()];
            part.host = host.clone();
            let analysis = analyse(&part);
            HostGroup {
                host: host.clone(),
                label,
                experiment: part,
                analysis,
            }
        })
        .collect();
    let differing = HostFact::ALL
        .into_iter()
        .filter(|f| {
            let first = hosts.first().map(|h| f.value(h));
            hosts.iter().any(|h| Some(f.value(h)) != first)
        })
        .collect();
    ByHost { groups, differing }
}

/// The sentence saying how the hosts differ, or `None` when they agree on every fact.
/// E.g. "hosts differ: node-a 2 CPUs, no CPU quota; node-b 2 CPUs, CPU quota 1.00 —
/// ratios are per host".
pub(crate) fn difference_sentence(b: &ByHost) -> Option<String> {
    if b.differing.is_empty() {
        return None;
    }
    // CPUs and quota always (what glibc and the scheduler go by); the rest when they differ.
    let shown: Vec<HostFact> = HostFact::ALL
        .into_iter()
        .filter(|f| {
            matches!(f, HostFact::Cpus | HostFact::CpuQuota)
                || (f.matters() && b.differing.contains(f))
        })
        .collect();
    let hosts = b
        .groups
        .iter()
        .map(|g| {
            let facts: Vec<String> = shown.iter().map(|f| f.value(&g.host)).collect();
            format!("{} {}", g.label, facts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut out = if b.differ_in_what_matters() {
        format!(
            "hosts differ in {}: {hosts} — ratios are per host; compare them across hosts with care",
            b.differing
                .iter()
                .filter(|f| f.matters())
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!("hosts agree on CPUs, CPU quota and memory limit: {hosts}")
    };
    let other: Vec<String> = b
        .differing
        .iter()
        .filter(|f| !f.matters())
        .map(|f| {
            let values: Vec<String> = b
                .groups
                .iter()
                .map(|g| format!("{} {}", g.label, f.value(&g.host)))
                .collect();
            format!("{} differs ({})", f.name(), values.join(", "))
        })
        .collect();
    if !other.is_empty() {
        out.push_str(&format!("; note: {}", other.join("; ")));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Figure;
    use crate::report::fixture;

    #[test]
    fn ratios_are_computed_within_each_host() {
        let e = fixture::two_host_experiment();
        let b = by_host(&e);
        assert_eq!(b.groups.len(), 2);
        assert_eq!(b.groups[0].label, "node-a");
        assert_eq!(b.groups[1].label, "node-b");
        assert_eq!(b.groups[0].experiment.runs.len(), 9);
        assert_eq!(b.groups[1].experiment.runs.len(), 9);
        // node-b's runs all took twice as long: against node-b's own baseline, arena2's
        // wall ratio is what it is on node-a; pooled with node-a it would not be.
        let ratio = |g: &HostGroup| {
            g.analysis
                .variants
                .iter()
                .find(|v| v.name == "arena2")
                .and_then(|v| v.ratio_to_baseline.get(&Figure::WallSeconds))
                .map(|r| r.value)
        };
        let (a, bb) = (ratio(&b.groups[0]), ratio(&b.groups[1]));
        assert!(a.is_some());
        assert!(
            (a.unwrap_or(0.0) - bb.unwrap_or(0.0)).abs() < 1e-9,
            "{a:?} {bb:?}"
        );
        let wall = |g: &HostGroup| g.analysis.variants[0].figures[&Figure::WallSeconds].median;
        assert!((wall(&b.groups[1]) - 2.0 * wall(&b.groups[0])).abs() < 1e-9);
    }

    #[test]
    fn the_quota_difference_is_named() {
        let b = by_host(&fixture::two_host_experiment());
        assert_eq!(b.differing, vec![HostFact::CpuQuota]);
        assert!(b.differ_in_what_matters());
        let s = difference_sentence(&b).unwrap_or_default();
        assert_eq!(
            s,
            "hosts differ in CPU quota: node-a 2 CPUs, no CPU quota; node-b 2 CPUs, \
CPU quota 1.00 — ratios are per host; compare them across hosts with care"
        );
    }

    #[test]
    fn one_host_has_one_group_and_no_difference() {
        let e = fixture::experiment();
        let b = by_host(&e);
        assert_eq!(b.groups.len(), 1);
        assert_eq!(b.groups[0].experiment.runs.len(), e.runs.len());
        assert_eq!(b.groups[0].analysis, analyse(&e));
        assert!(difference_sentence(&b).is_none());
    }

    #[test]
    fn kernel_differences_are_noted_not_weighed() {
        let mut e = fixture::two_host_experiment();
        e.hosts[1].container = e.hosts[0].container.clone();
        e.hosts[1].kernel = "6.9.0".into();
        let b = by_host(&e);
        assert!(!b.differ_in_what_matters());
        let s = difference_sentence(&b).unwrap_or_default();
        assert!(s.starts_with("hosts agree on CPUs"), "{s}");
        assert!(
            s.contains("kernel differs (node-a kernel 6.1.0-fixture, node-b kernel 6.9.0)"),
            "{s}"
        );
    }

    #[test]
    fn shared_hostnames_are_numbered() {
        let mut e = fixture::two_host_experiment();
        e.hosts[1].hostname = "node-a".into();
        assert_eq!(labels(&e.hosts), ["node-a", "node-a (2)"]);
    }
}
