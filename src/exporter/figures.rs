//! What one scrape found: plain, typed figures per process and per group, built by
//! [`super::collect`] from the `linux` and `inspect` readers and turned into the
//! exposition by [`super::metrics`]. Pure data and pure functions: tested on fixed figures.

use std::collections::BTreeMap;

use crate::linux::allocator::{AllocatorName, Detected, How};
pub use crate::linux::container::Members;

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
    /// jemalloc's `arenas.narenas`, where the allocator counts arenas.
    pub arenas: Option<u64>,
}

pub use crate::linux::allocator::{JemallocArenas, JemallocArenasSource};

/// The arenas of a jemalloc process: the probe's count, else its `MALLOC_CONF`'s
/// `narenas`, else jemalloc's default for the CPUs it sees.
pub(crate) fn jemalloc_arenas(
    probe: Option<&ProbeFigures>,
    env: &[(String, String)],
    visible_cpus: u32,
) -> JemallocArenas {
    crate::linux::allocator::jemalloc_arenas(probe.and_then(|p| p.arenas), env, visible_cpus)
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
    /// jemalloc processes only.
    pub jemalloc_arenas: Option<JemallocArenas>,
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
    /// The arena pitfall of this process: glibc's ([`arena_pitfall`]), or jemalloc's (its
    /// arenas at least twice the 4 per CPU of the quota:
    /// [`crate::linux::allocator::jemalloc_arena_pitfall`]).
    pub fn pitfall(&self) -> bool {
        match (self.allocator, self.arenas, self.jemalloc_arenas) {
            (Some(a), Some(ar), _) if a.is_glibc() => arena_pitfall(ar.limit, self.cpu_quota_cpus),
            (_, _, Some(je)) => {
                crate::linux::allocator::jemalloc_arena_pitfall(je.count, self.cpu_quota_cpus)
                    .is_some()
            }
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
    /// jemalloc arenas summed over its jemalloc processes.
    pub jemalloc_arenas: Option<u64>,
    /// The smallest CPU quota among its processes.
    pub cpu_quota_cpus: Option<f64>,
    pub visible_cpus: u32,
    /// The smallest memory limit among its processes.
    pub memory_limit_bytes: Option<u64>,
    /// The working sets of the distinct memory cgroups its processes are in, summed.
    pub cgroup_working_set_bytes: Option<u64>,
    /// Processes in those memory cgroups (or the groups below them) that are not the
    /// group's — another group's, or unmatched — which the working set counts too; a
    /// lower bound when `cgroup_members_complete` is false. `None`: no working set, or
    /// its members could not be read.
    pub cgroup_other_processes: Option<u64>,
    /// Whether every member of those cgroups was read.
    pub cgroup_members_complete: bool,
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

impl GroupFigures {
    /// Whether the group's cgroup figures are not wholly its own: its memory cgroups hold
    /// other processes, or could not be shown to hold only its own. `None` without a
    /// working set.
    pub fn cgroup_shared(&self) -> Option<bool> {
        self.cgroup_working_set_bytes?;
        Some(match self.cgroup_other_processes {
            Some(n) => n > 0 || !self.cgroup_members_complete,
            None => true,
        })
    }
}

/// Groups the processes by `group` and sums them; `members` are the processes of each
/// memory cgroup seen (by its path), from which each group's cgroup figures are known to
/// be its own or shared.
pub fn group(
    processes: &[ProcessFigures],
    members: &BTreeMap<String, Members>,
) -> BTreeMap<String, GroupFigures> {
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
        if let Some(je) = p.jemalloc_arenas {
            g.jemalloc_arenas = add(g.jemalloc_arenas, Some(je.count));
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
    // Who else is in each group's memory cgroups.
    let mut own: BTreeMap<&str, std::collections::BTreeSet<i32>> = BTreeMap::new();
    for p in processes {
        own.entry(p.group.as_str()).or_default().insert(p.pid);
    }
    for (name, g) in out.iter_mut() {
        let paths: Vec<&str> = counted
            .iter()
            .filter(|(grp, _)| *grp == name.as_str())
            .map(|(_, path)| *path)
            .collect();
        if paths.is_empty() {
            continue;
        }
        let mine = own.get(name.as_str());
        let mut others: std::collections::BTreeSet<i32> = std::collections::BTreeSet::new();
        let mut complete = true;
        let mut known = true;
        for path in paths {
            match members.get(path) {
                Some(m) => {
                    complete &= m.complete;
                    others.extend(
                        m.pids
                            .iter()
                            .filter(|pid| !mine.is_some_and(|s| s.contains(pid)))
                            .copied(),
                    );
                }
                None => known = false,
            }
        }
        g.cgroup_other_processes = known.then_some(others.len() as u64);
        g.cgroup_members_complete = known && complete;
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
    /// The processes of each memory cgroup the matched processes are in (and the groups
    /// below it), by the cgroup's path.
    pub cgroup_members: BTreeMap<String, Members>,
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
            jemalloc_arenas: None,
        }
    }

    /// jemalloc's arenas: the probe's count first, then MALLOC_CONF's narenas, then its
    /// default of 4 per CPU it sees; a pitfall at twice the 4 per CPU of the quota.
    #[test]
    fn jemalloc_arenas_and_their_pitfall() {
        let env = vec![(
            "MALLOC_CONF".to_string(),
            "background_thread:true,narenas:3".to_string(),
        )];
        let probe = ProbeFigures {
            arenas: Some(9),
            ..Default::default()
        };
        assert_eq!(
            jemalloc_arenas(Some(&probe), &env, 2),
            JemallocArenas {
                count: 9,
                source: JemallocArenasSource::Probe
            }
        );
        assert_eq!(jemalloc_arenas(None, &env, 2).count, 3);
        let default = jemalloc_arenas(None, &[], 2);
        assert_eq!(
            (default.count, default.source),
            (8, JemallocArenasSource::Default)
        );
        let mut p = process(20, "flink");
        p.allocator = Some(AllocatorLabel {
            name: "jemalloc",
            how: HowLabel::Preloaded,
        });
        p.arenas = None;
        p.jemalloc_arenas = Some(default);
        // 8 arenas for 2 CPUs under a quota of 0.5: 4 warranted, twice that made.
        assert!(p.pitfall());
        p.cpu_quota_cpus = Some(2.0);
        assert!(!p.pitfall());
        p.cpu_quota_cpus = Some(0.5);
        p.jemalloc_arenas = Some(jemalloc_arenas(None, &env, 2));
        assert!(!p.pitfall(), "narenas:3 is within the quota's");
        let g = group(&[p], &BTreeMap::new());
        assert_eq!(g["flink"].jemalloc_arenas, Some(3));
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
            arenas: None,
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
        let members = |pids: &[i32], complete: bool| Members {
            pids: pids.to_vec(),
            complete,
        };
        // The puma pod holds puma only; the jobs pod a shell besides its sidekiqs.
        let all: BTreeMap<String, Members> = [
            ("/pod/web".to_string(), members(&[10, 11], true)),
            ("/pod/jobs".to_string(), members(&[1, 12, 13], true)),
            ("/pod/other".to_string(), members(&[14], true)),
        ]
        .into_iter()
        .collect();
        let g = group(&[a, b, c, d, e], &all);
        assert_eq!(g["puma"].cgroup_working_set_bytes, Some(300 << 20));
        assert_eq!(g["sidekiq"].cgroup_working_set_bytes, Some(42 << 20));
        assert_eq!(
            (g["puma"].cgroup_other_processes, g["puma"].cgroup_shared()),
            (Some(0), Some(false))
        );
        assert_eq!(
            (
                g["sidekiq"].cgroup_other_processes,
                g["sidekiq"].cgroup_shared()
            ),
            (Some(1), Some(true))
        );
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
    fn groups_sharing_one_cgroup_are_each_marked() {
        // A host that is not a pod per group: both groups in the session's cgroup.
        let mut a = process(10, "canary");
        a.cgroup_working_set = Some(("/user.slice".into(), 1200 << 20));
        let mut b = process(20, "stable");
        b.cgroup_working_set = Some(("/user.slice".into(), 1200 << 20));
        let all: BTreeMap<String, Members> = [(
            "/user.slice".to_string(),
            Members {
                pids: vec![10, 20],
                complete: true,
            },
        )]
        .into_iter()
        .collect();
        let g = group(&[a.clone(), b], &all);
        for name in ["canary", "stable"] {
            assert_eq!(g[name].cgroup_working_set_bytes, Some(1200 << 20));
            assert_eq!(g[name].cgroup_other_processes, Some(1), "{name}");
            assert_eq!(g[name].cgroup_shared(), Some(true), "{name}");
        }
        // Alone in it, but the walk below it was cut short: not shown to be its own.
        let cut: BTreeMap<String, Members> = [(
            "/user.slice".to_string(),
            Members {
                pids: vec![10],
                complete: false,
            },
        )]
        .into_iter()
        .collect();
        let g = group(&[a], &cut);
        assert_eq!(g["canary"].cgroup_other_processes, Some(0));
        assert_eq!(g["canary"].cgroup_shared(), Some(true));
    }

    #[test]
    fn jemalloc_has_no_glibc_arenas_nor_pitfall() {
        let mut p = process(1, "java");
        p.allocator = Some(AllocatorLabel {
            name: "jemalloc",
            how: HowLabel::Preloaded,
        });
        assert!(!p.pitfall());
        let g = group(&[p], &BTreeMap::new());
        assert_eq!(g["java"].glibc_arenas, None);
        // Its cgroup's members unread: not shown to be its own.
        assert_eq!(g["java"].cgroup_shared(), Some(true));
        assert_eq!(g["java"].pitfall_processes, 0);
    }
}
