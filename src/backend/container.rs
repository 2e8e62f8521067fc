//! The in-container backend: memtrial runs inside the container whose limits are to be
//! measured (a Kubernetes pod), where it may not create cgroups and must not change the
//! limits it lives under.
//!
//! The workload starts through the spawner exactly as [`super::local`] starts it, but in
//! no cgroup of its own: it shares memtrial's container. Its processes are memtrial's
//! descendants (memtrial is a child subreaper, so orphans stay among them; the spawner
//! and hooks are hidden). The run's limits are the container's own, read once from its
//! cgroup files ([`own_limits`]) and recorded as the plan's [`Limits`]; nothing is written.
//! The container's cgroup figures (its peak) also count memtrial itself and whatever ran
//! before, so no cgroup probe is offered. Its OOM-kill count is read at launch and again
//! when the run ends ([`OomCounter`]): a kill in between was the kernel's answer to the
//! container reaching its memory limit during the run, and the run is recorded as
//! OOM-killed (Kubernetes then says `OOMKilled` of the container, though memtrial exits 0).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Backend, BackendError, Launch, LaunchSpec, RunHandle, Waited};
use crate::linux::cgroup::{parse_flat_keyed, Limits, Version};
use crate::linux::container::{
    group_dirs_up, parse_limit, parse_mountinfo, parse_proc_cgroup, read_container, tightest,
    Container,
};
use crate::probe::{Membership, Probe};

/// The limits of the container memtrial runs in, as its cgroup files state them.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerLimits {
    /// What the runs are recorded with: memory limit, CPU quota, a cpuset that leaves
    /// out some online CPUs, the pids limit.
    pub limits: Limits,
    /// The CPUs the container sees (online CPUs: a quota does not hide any).
    pub visible_cpus: u32,
    /// Where each figure came from (the cgroup file's directory), for the record's notes.
    pub sources: Vec<String>,
    /// Files that could not be read or parsed.
    pub problems: Vec<String>,
    /// The container's OOM-kill counter, when its memory group is found.
    pub oom: Option<OomCounter>,
}

/// The OOM-kill count of the container's memory cgroup: `oom_kill` of v1
/// `memory.oom_control` or of v2 `memory.events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCounter {
    pub file: PathBuf,
}

impl OomCounter {
    /// The counter of the memory group `groups[0]` (as [`group_dirs_up`] lists them).
    fn of(version: Version, groups: &[(String, PathBuf)]) -> Option<OomCounter> {
        let dir = &groups.first()?.1;
        Some(OomCounter {
            file: dir.join(match version {
                Version::V1 => "memory.oom_control",
                Version::V2 => "memory.events",
            }),
        })
    }

    /// The kernel's count now; `None` when the file cannot be read or has no `oom_kill`
    /// (kernels before 4.13).
    pub fn read(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.file).ok()?;
        parse_flat_keyed(&text).get("oom_kill").copied()
    }
}

/// Reads the limits of the container this process is in: `/proc/self/cgroup`, the
/// mounts of `/proc/self/mountinfo` and the group's limit files (v1 and v2).
pub fn own_limits() -> ContainerLimits {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cgroup_text = read("/proc/self/cgroup");
    let status_text = read("/proc/self/status");
    let mountinfo = read("/proc/self/mountinfo");
    let online = crate::linux::host::online_cpus();
    let c = read_container(
        std::process::id() as i32,
        &cgroup_text,
        &status_text,
        online,
    );
    let mut l = limits_of(&c, &cgroup_text, &mountinfo, online, &|p| {
        std::fs::read_to_string(p).ok()
    });
    l.oom = parse_proc_cgroup(&cgroup_text).ok().and_then(|lines| {
        let (v, groups) = group_dirs_up(&lines, &parse_mountinfo(&mountinfo), "memory")?;
        OomCounter::of(v, &groups)
    });
    l
}

/// The container's limits from what [`read_container`] found, plus the pids limit
/// (`pids.max`, read through `read_file`).
pub(crate) fn limits_of(
    c: &Container,
    cgroup_text: &str,
    mountinfo: &str,
    online_cpus: u32,
    read_file: &dyn Fn(&Path) -> Option<String>,
) -> ContainerLimits {
    let mut sources = Vec::new();
    let mut problems = c.notes.clone();
    let set_on = |from: &Option<String>| {
        from.as_ref()
            .map(|f| format!(", limit set on {f}"))
            .unwrap_or_default()
    };
    if let Some(m) = &c.memory {
        sources.push(format!(
            "memory: {} (cgroup {}{})",
            m.path,
            version(m.version),
            set_on(&m.limit_from)
        ));
    }
    if let Some(q) = &c.cpu {
        sources.push(format!(
            "cpu: {} (cgroup {}{})",
            q.path,
            version(q.version),
            set_on(&q.quota_from)
        ));
    }
    // A cpuset is a limit only when it leaves out some of the online CPUs.
    let cpuset = c
        .cpuset
        .as_ref()
        .filter(|s| s.count < online_cpus)
        .map(|s| s.cpus.clone());
    // The tightest pids.max of the group and the groups above it.
    let pids_max = parse_proc_cgroup(cgroup_text).ok().and_then(|lines| {
        let mounts = parse_mountinfo(mountinfo);
        let (_, groups) = group_dirs_up(&lines, &mounts, "pids")?;
        let (l, from) = tightest(&groups, &mut |e| problems.push(e.to_string()), |d| {
            read_file(&d.join("pids.max")).map(|t| parse_limit(&t))
        });
        let (l, from) = (l?, from?);
        let own = &groups[0].0;
        sources.push(if from == *own {
            format!("pids: {own}")
        } else {
            format!("pids: {own}, limit set on {from}")
        });
        Some(l)
    });
    ContainerLimits {
        limits: Limits {
            memory_max: c.memory_limit_bytes,
            cpus: c.cpu_quota_cpus,
            cpuset,
            pids_max,
        },
        visible_cpus: c.visible_cpus,
        sources,
        problems,
        oom: None,
    }
}

fn version(v: crate::linux::container::Version) -> &'static str {
    match v {
        crate::linux::container::Version::V1 => "v1",
        crate::linux::container::Version::V2 => "v2",
    }
}

/// Starts workloads in the container memtrial is in, under its limits.
#[derive(Debug, Clone)]
pub struct ContainerBackend {
    limits: Limits,
    oom: Option<OomCounter>,
}

impl ContainerBackend {
    /// A backend for the container whose limits are `limits` and whose OOM kills `oom`
    /// counts (see [`own_limits`]).
    pub fn new(limits: Limits, oom: Option<OomCounter>) -> ContainerBackend {
        ContainerBackend { limits, oom }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

impl Backend for ContainerBackend {
    fn launch(&self, spec: LaunchSpec) -> Result<Launch, BackendError> {
        // The plan records the container's limits; a plan with other limits would be
        // recorded as something that was not so.
        if spec.limits != self.limits {
            return Ok(Launch::NotStarted(format!(
                "the run's limits ({:?}) are not the container's ({:?}): in a container the \
                 container's own limits are the run's",
                spec.limits, self.limits
            )));
        }
        let oom = self.oom.as_ref().and_then(|c| Some((c.clone(), c.read()?)));
        Ok(match super::local::start(spec, None)? {
            Launch::Started(run) => Launch::Started(Box::new(ContainerRun { run, oom })),
            not => not,
        })
    }
}

/// A workload started in the container: the local start without a cgroup, and the
/// container's OOM-kill count as it was at launch.
struct ContainerRun {
    run: Box<dyn RunHandle>,
    oom: Option<(OomCounter, u64)>,
}

impl RunHandle for ContainerRun {
    fn started(&self) -> Instant {
        self.run.started()
    }
    fn pid(&self) -> i32 {
        self.run.pid()
    }
    fn spawner(&self) -> Option<i32> {
        self.run.spawner()
    }
    fn membership(&self) -> Membership {
        self.run.membership()
    }
    fn probes(&self) -> Vec<Box<dyn Probe>> {
        self.run.probes()
    }
    fn wait_exit(&mut self, timeout: Duration) -> Waited {
        self.run.wait_exit(timeout)
    }
    fn root_ended(&self) -> bool {
        self.run.root_ended()
    }
    fn signal(&mut self, sig: i32, pids: &[i32]) {
        self.run.signal(sig, pids)
    }
    fn reap(&mut self, pids: &[i32]) {
        self.run.reap(pids)
    }
    fn kill_rest(&mut self, wait: Duration) {
        self.run.kill_rest(wait)
    }
    fn memory_group(&self) -> Option<(PathBuf, Version)> {
        let (counter, _) = self.oom.as_ref()?;
        let version = match counter.file.file_name()?.to_str()? {
            "memory.oom_control" => Version::V1,
            _ => Version::V2,
        };
        Some((counter.file.parent()?.to_path_buf(), version))
    }
    fn oom_kills(&self) -> Option<(u64, String)> {
        let (counter, at_launch) = self.oom.as_ref()?;
        let now = counter.read()?;
        Some((
            now.saturating_sub(*at_launch),
            format!("the container's {}", counter.file.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CGROUP_V1: &str = "9:name=systemd:/\n8:pids:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n3:cpuset:/kubepods/pod1/c1\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n";
    // Inside a pod the hierarchies are mounted with the container's group as their root.
    const MOUNTINFO_V1: &str = "\
32 31 0:29 /kubepods/pod1/c1 /sys/fs/cgroup/cpu,cpuacct ro,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 /kubepods/pod1/c1 /sys/fs/cgroup/cpuset ro,relatime - cgroup cgroup rw,cpuset
35 31 0:32 /kubepods/pod1/c1 /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory
36 31 0:33 /kubepods/pod1/c1 /sys/fs/cgroup/pids ro,relatime - cgroup cgroup rw,pids
";

    fn container(memory: Option<u64>, cpus: Option<f64>, cpuset: Option<(&str, u32)>) -> Container {
        use crate::linux::container::{CpusetGroup, Version};
        Container {
            memory_limit_bytes: memory,
            memory_usage_bytes: None,
            cpu_quota_cpus: cpus,
            visible_cpus: 8,
            memory: None,
            cpu: None,
            cpuset: cpuset.map(|(cpus, count)| CpusetGroup {
                version: Version::V1,
                path: "/kubepods/pod1/c1".into(),
                cpus: cpus.into(),
                count,
            }),
            cpus_allowed: None,
            cpus_allowed_count: None,
            own_pid_namespace: Some(false),
            notes: vec![],
        }
    }

    #[test]
    fn limits_come_from_the_containers_group() {
        let c = container(Some(8 << 30), Some(2.0), Some(("0-7", 8)));
        let files = |p: &Path| {
            (p == Path::new("/sys/fs/cgroup/pids/pids.max")).then(|| "512\n".to_string())
        };
        let l = limits_of(&c, CGROUP_V1, MOUNTINFO_V1, 8, &files);
        assert_eq!(
            l.limits,
            Limits {
                memory_max: Some(8 << 30),
                cpus: Some(2.0),
                // Every online CPU: not a limit.
                cpuset: None,
                pids_max: Some(512),
            }
        );
        assert!(l.problems.is_empty(), "{:?}", l.problems);
    }

    #[test]
    fn a_cpuset_that_leaves_cpus_out_is_a_limit() {
        let c = container(None, None, Some(("2-3", 2)));
        let l = limits_of(&c, CGROUP_V1, MOUNTINFO_V1, 8, &|p: &Path| {
            (p == Path::new("/sys/fs/cgroup/pids/pids.max")).then(|| "max\n".to_string())
        });
        assert_eq!(l.limits.cpuset.as_deref(), Some("2-3"));
        assert_eq!(l.limits.pids_max, None);
        assert_eq!(l.limits.memory_max, None);
    }

    /// cgroup v2 seen from the host: the pod's group above the container's holds the
    /// tighter pids limit, and the kernel enforces it, so it is the run's.
    #[test]
    fn a_limit_set_above_the_containers_group_is_its_limit() {
        let cgroup = "0::/kubepods/pod1/c1\n";
        let mountinfo = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let l = limits_of(
            &container(None, None, None),
            cgroup,
            mountinfo,
            8,
            &|p: &Path| match p.to_str()? {
                "/sys/fs/cgroup/kubepods/pod1/c1/pids.max" => Some("max\n".into()),
                "/sys/fs/cgroup/kubepods/pod1/pids.max" => Some("64\n".into()),
                "/sys/fs/cgroup/kubepods/pids.max" => Some("4096\n".into()),
                _ => None,
            },
        );
        assert_eq!(l.limits.pids_max, Some(64));
        assert!(
            l.sources
                .contains(&"pids: /kubepods/pod1/c1, limit set on /kubepods/pod1".to_string()),
            "{:?}",
            l.sources
        );
    }

    #[test]
    fn an_unreadable_pids_limit_is_a_problem_not_a_panic() {
        let c = container(None, None, None);
        let l = limits_of(&c, CGROUP_V1, MOUNTINFO_V1, 8, &|_: &Path| {
            Some("lots".to_string())
        });
        assert_eq!(l.limits.pids_max, None);
        assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
        let none = limits_of(&c, "garbage", "", 8, &|_: &Path| None);
        assert_eq!(none.limits, Limits::default());
    }
}
