//! What one scrape found: plain, typed figures per process and per group, built by
//! [`super::collect`] from the `linux` and `inspect` readers and turned into the
//! exposition by [`super::metrics`]. Pure data and pure functions: tested on fixed figures.

use std::collections::BTreeMap;

use crate::linux::allocator::{AllocatorName, Detected, How};

/// How a process's allocator got there, as the `how` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HowLabel {
    /// glibc's malloc, nothing else mapped.
    Default,
    /// A shared allocator library nothing in `DT_NEEDED` names: `LD_PRELOAD` (or dlopen).
    Preloaded,
    /// A shared allocator library the program is built with (`DT_NEEDED`).
    Linked,
    /// The executable defines `malloc` itself.
    Executable,
    /// A statically linked executable.
    Static,
    /// Several allocator libraries mapped at once (the first answers).
    Several,
}

impl HowLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            HowLabel::Default => "default",
            HowLabel::Preloaded => "preloaded",
            HowLabel::Linked => "linked",
            HowLabel::Executable => "executable",
            HowLabel::Static => "static",
            HowLabel::Several => "several",
        }
    }
}

/// The allocator of a process as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllocatorLabel {
    pub name: &'static str,
    pub how: HowLabel,
}

impl AllocatorLabel {
    pub(crate) fn is_glibc(self) -> bool {
        self.name == AllocatorName::Glibc.as_str()
    }
}

impl From<&Detected> for AllocatorLabel {
    fn from(d: &Detected) -> Self {
        AllocatorLabel {
            name: d.name.as_str(),
            how: match d.how {
                How::Libc => HowLabel::Default,
                How::SharedLibrary => HowLabel::Preloaded,
                How::Linked => HowLabel::Linked,
                How::InExecutable => HowLabel::Executable,
                How::Static => HowLabel::Static,
                How::Several(_) => HowLabel::Several,
            },
        }
    }
}

/// Why a process could not be read, wholly or in part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unreadable {
    /// ptrace-read permission refused (`smaps_rollup`, `maps`, `environ`, `mem`).
    PermissionDenied,
    /// The process exited between being listed and being read.
    Vanished,
    /// Any other I/O or parse error.
    Error,
    /// The probe's report file (in `--probe-dir`) is not a regular file owned by the
    /// process's uid or root, or lies behind a symbolic link: not read.
    ProbeRefused,
}

impl Unreadable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unreadable::PermissionDenied => "permission_denied",
            Unreadable::Vanished => "vanished",
            Unreadable::Error => "error",
            Unreadable::ProbeRefused => "probe_refused",
        }
    }
}

/// glibc arenas of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaFigures {
    /// Arenas, the main one included.
    pub count: u64,
    /// Counted from heap headers (`true`) or estimated from the maps (an upper bound).
    pub exact: bool,
    /// The limit glibc applies (environment, else 8 × online CPUs).
    pub limit: u64,
}

/// The allocator's own counters, from memtrial's probe in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeFigures {
    pub live_bytes: Option<u64>,
    pub held_bytes: Option<u64>,
}

/// One matched process at one scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessFigures {
    pub pid: i32,
    /// The group it belongs to: its `comm`.
    pub group: String,
    /// `VmRSS` of `/proc/PID/status`, read every scrape.
    pub rss_bytes: u64,
    /// `VmSwap` of `/proc/PID/status`.
    pub swap_bytes: u64,
    /// `Threads` of `/proc/PID/status`.
    pub threads: u64,
    /// From `smaps_rollup`, cached: `None` until first read (or when refused).
    pub pss_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    /// Seconds since `pss_bytes`, `uss_bytes` and `arenas` were read.
    pub costly_age_seconds: Option<f64>,
    /// `None` until read, or when refused.
    pub allocator: Option<AllocatorLabel>,
    /// glibc processes only.
    pub arenas: Option<ArenaFigures>,
    /// The CPU quota of its cgroup, in CPUs (`None`: no quota).
    pub cpu_quota_cpus: Option<f64>,
    /// CPUs the process sees (online CPUs; a quota does not change them).
    pub visible_cpus: u32,
    /// The memory limit of its cgroup (`None`: no limit).
    pub memory_limit_bytes: Option<u64>,
    /// Its memory cgroup's path and working set (usage less inactive page cache), when
    /// the cgroup's files could be read.
    pub cgroup_working_set: Option<(String, u64)>,
    /// Present when the process carries memtrial's allocator probe and it reported.
    pub probe: Option<ProbeFigures>,
}

/// The arena pitfall: a glibc arena limit at least twice what the CPU quota warrants,
/// where the quota warrants what glibc would allow if it read it: 8 arenas per CPU of the
/// quota, rounded up (`limit ≥ 2 × 8 × ⌈quota⌉`). Without a quota, or for a process not on
/// glibc malloc, there is no pitfall.
pub(crate) fn arena_pitfall(limit: u64, quota_cpus: Option<f64>) -> bool {
    match quota_cpus {
        Some(q) if q.is_finite() && q > 0.0 => {
            let warranted = 8.0 * q.ceil();
            limit as f64 >= 2.0 * warranted
        }
        _ => false,
    }
}

impl ProcessFigures {
    /// The arena pitfall of this process ([`arena_pitfall`]).
    pub fn pitfall(&self) -> bool {
        match (self.allocator, self.arenas) {
            (Some(a), Some(ar)) if a.is_glibc() => arena_pitfall(ar.limit, self.cpu_quota_cpus),
            _ => false,
        }
    }
}

/// The sums (and extremes) over one group's processes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupFigures {
    pub processes: u64,
    pub rss_bytes: u64,
    pub swap_bytes: u64,
    pub threads: u64,
    pub pss_bytes: u64,
    pub uss_bytes: u64,
    /// How many processes the PSS and USS sums cover.
    pub pss_processes: u64,
    /// The oldest cached costly figure in the group.
    pub costly_age_seconds: Option<f64>,
    /// Arenas summed over its glibc processes, and the highest limit among them.
    pub glibc_arenas: Option<u64>,
    pub glibc_arena_limit: Option<u64>,
    /// glibc processes whose arena count is an estimate from the maps (`/proc/PID/mem`
    /// refused): an upper bound.
    pub glibc_arenas_estimated: u64,
    /// Processes with the arena pitfall.
    pub pitfall_processes: u64,
    /// The smallest CPU quota among its processes.
    pub cpu_quota_cpus: Option<f64>,
    pub visible_cpus: u32,
    /// The smallest memory limit among its processes.
    pub memory_limit_bytes: Option<u64>,
    /// The working sets of the distinct memory cgroups its processes are in, summed.
    pub cgroup_working_set_bytes: Option<u64>,
    /// Processes per allocator.
    pub allocators: BTreeMap<AllocatorLabel, u64>,
    /// Processes whose probe reported, and their sums.
    pub probed_processes: u64,
    pub live_bytes: Option<u64>,
    pub held_bytes: Option<u64>,
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

fn min_of<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Groups the processes by `group` and sums them.
pub fn group(processes: &[ProcessFigures]) -> BTreeMap<String, GroupFigures> {
    let mut out: BTreeMap<String, GroupFigures> = BTreeMap::new();
    // Each group's memory cgroups already counted: processes sharing one count it once.
    let mut counted: std::collections::BTreeSet<(&str, &str)> = Default::default();
    for p in processes {
        let g = out.entry(p.group.clone()).or_default();
        if let Some((path, ws)) = &p.cgroup_working_set {
            if counted.insert((p.group.as_str(), path.as_str())) {
                g.cgroup_working_set_bytes = add(g.cgroup_working_set_bytes, Some(*ws));
            }
        }
        g.processes += 1;
        g.rss_bytes = g.rss_bytes.saturating_add(p.rss_bytes);
        g.swap_bytes = g.swap_bytes.saturating_add(p.swap_bytes);
        g.threads = g.threads.saturating_add(p.threads);
        if let (Some(pss), Some(uss)) = (p.pss_bytes, p.uss_bytes) {
            g.pss_bytes = g.pss_bytes.saturating_add(pss);
            g.uss_bytes = g.uss_bytes.saturating_add(uss);
            g.pss_processes += 1;
        }
        g.costly_age_seconds = match (g.costly_age_seconds, p.costly_age_seconds) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let (Some(a), Some(ar)) = (p.allocator, p.arenas) {
            if a.is_glibc() {
                g.glibc_arenas = add(g.glibc_arenas, Some(ar.count));
                g.glibc_arena_limit = g.glibc_arena_limit.max(Some(ar.limit));
                g.glibc_arenas_estimated += u64::from(!ar.exact);
            }
        }
        if p.pitfall() {
            g.pitfall_processes += 1;
        }
        g.cpu_quota_cpus = min_of(g.cpu_quota_cpus, p.cpu_quota_cpus);
        g.visible_cpus = g.visible_cpus.max(p.visible_cpus);
        g.memory_limit_bytes = min_of(g.memory_limit_bytes, p.memory_limit_bytes);
        if let Some(a) = p.allocator {
            *g.allocators.entry(a).or_default() += 1;
        }
        if let Some(pr) = p.probe {
            g.probed_processes += 1;
            g.live_bytes = add(g.live_bytes, pr.live_bytes);
            g.held_bytes = add(g.held_bytes, pr.held_bytes);
        }
    }
    out
}

/// The exporter's own figures at one scrape.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExporterFigures {
    /// Scrapes served, this one included.
    pub scrapes: u64,
    /// Costly reads (smaps_rollup + maps + arenas of one process) done since the start.
    pub costly_reads: u64,
    /// Times a cached costly figure younger than `--max-age` was served instead.
    pub cached_reads: u64,
    /// Times a due read was put off because the scrape's budget was spent (the older
    /// figure, if any, is shown). Each matched process counts once per scrape in one of
    /// the three.
    pub deferred_reads: u64,
    /// How long collecting this scrape's figures took.
    pub collect_seconds: f64,
    /// `--budget` and `--max-age`, in seconds.
    pub budget_seconds: f64,
    pub max_age_seconds: f64,
}

/// Everything one scrape shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    pub processes: Vec<ProcessFigures>,
    /// Matched processes that could not be read (wholly or in part), by reason: a process
    /// counts once per reason.
    pub unreadable: BTreeMap<Unreadable, u64>,
    pub exporter: ExporterFigures,
    /// Whether the per-process series are shown (`--per-process`).
    pub per_process: bool,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn pitfall_is_a_limit_twice_what_the_quota_warrants() {
        // 2 online CPUs, default limit 16; a quota of 0.5 warrants 8: pitfall.
        assert!(arena_pitfall(16, Some(0.5)));
        assert!(arena_pitfall(16, Some(1.0)));
        // A quota of 1.5 CPUs warrants 16: a limit of 16 is what it warrants.
        assert!(!arena_pitfall(16, Some(1.5)));
        assert!(!arena_pitfall(31, Some(2.0)));
        assert!(arena_pitfall(32, Some(2.0)));
        // The 64-CPU host, --cpus 8: 512 arenas allowed, 64 warranted.
        assert!(arena_pitfall(512, Some(8.0)));
        // MALLOC_ARENA_MAX=2 under any quota.
        assert!(!arena_pitfall(2, Some(0.1)));
        // No quota, or a nonsensical one: no pitfall.
        assert!(!arena_pitfall(512, None));
        assert!(!arena_pitfall(512, Some(0.0)));
        assert!(!arena_pitfall(512, Some(f64::NAN)));
    }

    fn glibc() -> AllocatorLabel {
        AllocatorLabel {
            name: "glibc",
            how: HowLabel::Default,
        }
    }

    pub(crate) fn process(pid: i32, group: &str) -> ProcessFigures {
        ProcessFigures {
            pid,
            group: group.into(),
            rss_bytes: 100 << 20,
            swap_bytes: 0,
            threads: 5,
            pss_bytes: Some(80 << 20),
            uss_bytes: Some(70 << 20),
            costly_age_seconds: Some(3.0),
            allocator: Some(glibc()),
            arenas: Some(ArenaFigures {
                count: 5,
                exact: true,
                limit: 16,
            }),
            cpu_quota_cpus: Some(0.5),
            visible_cpus: 2,
            memory_limit_bytes: Some(512 << 20),
            cgroup_working_set: Some(("/pod/web".into(), 300 << 20)),
            probe: None,
        }
    }

    #[test]
    fn groups_sum_and_take_extremes() {
        let mut a = process(10, "puma");
        let mut b = process(11, "puma");
        b.pss_bytes = None;
        b.uss_bytes = None;
        b.costly_age_seconds = None;
        b.arenas = Some(ArenaFigures {
            count: 2,
            exact: true,
            limit: 2,
        });
        b.cpu_quota_cpus = None;
        b.memory_limit_bytes = Some(256 << 20);
        a.probe = Some(ProbeFigures {
            live_bytes: Some(10),
            held_bytes: Some(20),
        });
        let mut c = process(12, "sidekiq");
        c.cgroup_working_set = Some(("/pod/jobs".into(), 40 << 20));
        // A second sidekiq in the same pod: its cgroup counts once.
        let d = ProcessFigures {
            pid: 13,
            ..c.clone()
        };
        let mut e = process(14, "sidekiq");
        e.cgroup_working_set = Some(("/pod/other".into(), 2 << 20));
        let g = group(&[a, b, c, d, e]);
        assert_eq!(g["puma"].cgroup_working_set_bytes, Some(300 << 20));
        assert_eq!(g["sidekiq"].cgroup_working_set_bytes, Some(42 << 20));
        let puma = &g["puma"];
        assert_eq!(puma.processes, 2);
        assert_eq!(puma.rss_bytes, 200 << 20);
        assert_eq!(puma.threads, 10);
        assert_eq!((puma.pss_bytes, puma.pss_processes), (80 << 20, 1));
        assert_eq!(puma.costly_age_seconds, Some(3.0));
        assert_eq!(puma.glibc_arenas, Some(7));
        assert_eq!(puma.glibc_arena_limit, Some(16));
        assert_eq!(puma.glibc_arenas_estimated, 0);
        assert_eq!(puma.pitfall_processes, 1);
        assert_eq!(puma.cpu_quota_cpus, Some(0.5));
        assert_eq!(puma.memory_limit_bytes, Some(256 << 20));
        assert_eq!(puma.allocators[&glibc()], 2);
        assert_eq!(puma.probed_processes, 1);
        assert_eq!((puma.live_bytes, puma.held_bytes), (Some(10), Some(20)));
        assert_eq!(g["sidekiq"].processes, 3);
    }

    #[test]
    fn jemalloc_has_no_glibc_arenas_nor_pitfall() {
        let mut p = process(1, "java");
        p.allocator = Some(AllocatorLabel {
            name: "jemalloc",
            how: HowLabel::Preloaded,
        });
        assert!(!p.pitfall());
        let g = group(&[p]);
        assert_eq!(g["java"].glibc_arenas, None);
        assert_eq!(g["java"].pitfall_processes, 0);
    }
}
