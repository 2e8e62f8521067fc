//! Read-only cgroup facts about one process: which cgroup it is in (v1 and v2),
//! its memory limit and usage, CPU quota and cpuset.
//!
//! The cgroup of a process comes from `/proc/PID/cgroup`; where each hierarchy is
//! mounted, from `/proc/self/mountinfo`. On a hybrid machine a controller bound to a
//! v1 hierarchy is read there; the v2 (unified) group is used for controllers no v1
//! hierarchy has.

use std::path::Path;

use serde::Serialize;

pub use super::mounts::{
    group_dir, group_dirs_up, parse_mountinfo, parse_proc_cgroup, CgroupLine, Version,
};

/// Errors parsing cgroup files.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("cannot parse {what}: {reason}")]
    Parse { what: &'static str, reason: String },
}

impl From<super::mounts::MembershipError> for ContainerError {
    fn from(e: super::mounts::MembershipError) -> Self {
        ContainerError::Parse {
            what: "/proc/PID/cgroup",
            reason: e.0,
        }
    }
}

/// v1 reports "no limit" as a huge page-aligned number (`9223372036854771712`).
const V1_UNLIMITED: u64 = 1 << 62;

/// A byte limit: v2 `max` or a v1 number at or above 2^62 mean no limit.
pub fn parse_limit(text: &str) -> Result<Option<u64>, ContainerError> {
    let t = text.trim();
    if t == "max" {
        return Ok(None);
    }
    let n: u64 = t.parse().map_err(|_| ContainerError::Parse {
        what: "memory limit",
        reason: format!("{t:?}"),
    })?;
    Ok((n < V1_UNLIMITED).then_some(n))
}

/// A CPU quota: `quota` microseconds of CPU time per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuQuota {
    pub quota_us: u64,
    pub period_us: u64,
    /// quota / period: how many CPUs' worth of time the group may use.
    pub cpus: f64,
}

fn quota(quota_us: u64, period_us: u64) -> Option<CpuQuota> {
    (period_us > 0).then(|| CpuQuota {
        quota_us,
        period_us,
        cpus: quota_us as f64 / period_us as f64,
    })
}

/// v2 `cpu.max`: `"max 100000"` (none) or `"50000 100000"`.
pub fn parse_cpu_max(text: &str) -> Result<Option<CpuQuota>, ContainerError> {
    let err = || ContainerError::Parse {
        what: "cpu.max",
        reason: format!("{:?}", text.trim()),
    };
    let mut it = text.split_ascii_whitespace();
    let q = it.next().ok_or_else(err)?;
    let period: u64 = match it.next() {
        Some(p) => p.parse().map_err(|_| err())?,
        None => 100_000,
    };
    if q == "max" {
        return Ok(None);
    }
    Ok(quota(q.parse().map_err(|_| err())?, period))
}

/// v1 `cpu.cfs_quota_us` (`-1` for none) and `cpu.cfs_period_us`.
pub fn parse_cfs(quota_text: &str, period_text: &str) -> Result<Option<CpuQuota>, ContainerError> {
    let err = |what: &'static str, t: &str| ContainerError::Parse {
        what,
        reason: format!("{:?}", t.trim()),
    };
    let q: i64 = quota_text
        .trim()
        .parse()
        .map_err(|_| err("cpu.cfs_quota_us", quota_text))?;
    let p: u64 = period_text
        .trim()
        .parse()
        .map_err(|_| err("cpu.cfs_period_us", period_text))?;
    if q < 0 {
        return Ok(None);
    }
    Ok(quota(q as u64, p))
}

/// The number of CPUs in a list such as `0-3,8,10-11`.
pub fn cpu_list_count(text: &str) -> Result<u32, ContainerError> {
    Ok(cpu_list(text)?.len() as u32)
}

/// The kernel never numbers CPUs beyond this (`CONFIG_NR_CPUS` is at most 8192).
const MAX_CPUS: u32 = 1 << 16;

/// The CPUs of a list such as `0-3,8,10-11`, in its order.
pub fn cpu_list(text: &str) -> Result<Vec<u32>, ContainerError> {
    let err = || ContainerError::Parse {
        what: "CPU list",
        reason: format!("{:?}", text.trim()),
    };
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u32 = a.parse().map_err(|_| err())?;
        let b: u32 = b.parse().map_err(|_| err())?;
        if b < a || b >= MAX_CPUS || out.len() as u32 + (b - a) >= MAX_CPUS {
            return Err(err());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// `Cpus_allowed_list` of `/proc/PID/status`: the affinity mask.
pub fn status_cpus_allowed(status_text: &str) -> Option<String> {
    status_text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// The memory controller's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryGroup {
    pub version: Version,
    pub path: String,
    /// `None`: no limit. The tightest of the group's own and its ancestors' limits.
    pub limit_bytes: Option<u64>,
    /// The ancestor group the limit is set on, when it is not the group itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_from: Option<String>,
    pub usage_bytes: Option<u64>,
    /// Usage less the inactive page cache (v2 `inactive_file`, v1 `total_inactive_file`
    /// of `memory.stat`): what the kubelet and cAdvisor call the working set and evict on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// `memory.peak` (v2, kernel ≥ 5.19) or `memory.max_usage_in_bytes` (v1).
    pub peak_bytes: Option<u64>,
}

/// The CPU controller's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuGroup {
    pub version: Version,
    pub path: String,
    /// `None`: no quota. The tightest of the group's own and its ancestors' quotas.
    pub quota: Option<CpuQuota>,
    /// The ancestor group the quota is set on, when it is not the group itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_from: Option<String>,
}

/// The cpuset controller's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpusetGroup {
    pub version: Version,
    pub path: String,
    pub cpus: String,
    pub count: u32,
}

/// Everything known about a process's cgroups.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Container {
    /// The memory limit in bytes (`None`: no limit, or no memory controller).
    pub memory_limit_bytes: Option<u64>,
    /// The cgroup's memory usage (includes page cache).
    pub memory_usage_bytes: Option<u64>,
    /// The CPU quota in CPUs (`None`: no quota).
    pub cpu_quota_cpus: Option<f64>,
    /// The CPUs the process sees: online CPUs, what `nproc --all`, glibc's arena
    /// limit and most runtimes count. A quota does not change it.
    pub visible_cpus: u32,
    pub memory: Option<MemoryGroup>,
    pub cpu: Option<CpuGroup>,
    pub cpuset: Option<CpusetGroup>,
    /// The affinity mask (`Cpus_allowed_list`) and its size.
    pub cpus_allowed: Option<String>,
    pub cpus_allowed_count: Option<u32>,
    /// The process sees a different PID namespace than memtrial: it runs in a container.
    pub own_pid_namespace: Option<bool>,
    /// Files that could not be read or parsed.
    pub notes: Vec<String>,
}

impl Container {
    /// The fewest CPUs the process can actually use: quota, cpuset and affinity.
    pub(crate) fn effective_cpus(&self) -> Option<f64> {
        [
            self.cpu.as_ref().and_then(|c| c.quota).map(|q| q.cpus),
            self.cpuset.as_ref().map(|c| f64::from(c.count)),
            self.cpus_allowed_count.map(f64::from),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min)
    }
}

/// The tightest limit set on `groups` (a group and its ancestors, as
/// [`group_dirs_up`] lists them), with the path of the group that sets it: the kernel
/// enforces every one of them. A file that cannot be parsed is noted and skipped.
pub(crate) fn tightest<T: Limit>(
    groups: &[(String, std::path::PathBuf)],
    note_err: &mut impl FnMut(ContainerError),
    read: impl Fn(&Path) -> Option<Result<Option<T>, ContainerError>>,
) -> (Option<T>, Option<String>) {
    let mut best: Option<(T, String)> = None;
    for (path, dir) in groups {
        match read(dir) {
            Some(Ok(Some(l))) => {
                if best.as_ref().is_none_or(|(b, _)| l.tighter_than(b)) {
                    best = Some((l, path.clone()));
                }
            }
            Some(Err(e)) => note_err(e),
            Some(Ok(None)) | None => {}
        }
    }
    match best {
        Some((l, p)) => (Some(l), Some(p)),
        None => (None, None),
    }
}

/// A limit of which the smaller is the tighter.
pub(crate) trait Limit {
    fn tighter_than(&self, other: &Self) -> bool;
}
impl Limit for u64 {
    fn tighter_than(&self, other: &Self) -> bool {
        self < other
    }
}
impl Limit for CpuQuota {
    fn tighter_than(&self, other: &Self) -> bool {
        self.cpus < other.cpus
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The memory group of a process, `groups` its own and those above it (nearest first):
/// its usage and peak, and the tightest limit on the way up.
fn memory_group(
    v: Version,
    groups: &[(String, std::path::PathBuf)],
    note_err: &mut impl FnMut(ContainerError),
) -> MemoryGroup {
    let (limit, usage, peak) = match v {
        Version::V1 => (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "memory.max_usage_in_bytes",
        ),
        Version::V2 => ("memory.max", "memory.current", "memory.peak"),
    };
    let (path, dir) = groups[0].clone();
    let num = |f: &str| read_trim(&dir.join(f)).and_then(|t| t.parse::<u64>().ok());
    let usage_bytes = num(usage);
    let inactive = read_trim(&dir.join("memory.stat")).and_then(|t| {
        let stat = super::parse_flat_keyed(&t);
        let key = match v {
            Version::V1 => "total_inactive_file",
            Version::V2 => "inactive_file",
        };
        stat.get(key).copied()
    });
    let working_set_bytes = usage_bytes.zip(inactive).map(|(u, i)| u.saturating_sub(i));
    let (limit_bytes, from) = tightest(groups, note_err, |d| {
        read_trim(&d.join(limit)).map(|t| parse_limit(&t))
    });
    MemoryGroup {
        version: v,
        limit_from: from.filter(|f| *f != path),
        path,
        limit_bytes,
        usage_bytes,
        working_set_bytes,
        peak_bytes: num(peak),
    }
}

/// The CPU group of a process, `groups` as for [`memory_group`]: the tightest quota.
fn cpu_group(
    v: Version,
    groups: &[(String, std::path::PathBuf)],
    note_err: &mut impl FnMut(ContainerError),
) -> CpuGroup {
    let (quota, from) = tightest(groups, note_err, |dir| match v {
        Version::V1 => match (
            read_trim(&dir.join("cpu.cfs_quota_us")),
            read_trim(&dir.join("cpu.cfs_period_us")),
        ) {
            (Some(q), Some(p)) => Some(parse_cfs(&q, &p)),
            _ => None,
        },
        Version::V2 => read_trim(&dir.join("cpu.max")).map(|t| parse_cpu_max(&t)),
    });
    let path = groups[0].0.clone();
    CpuGroup {
        version: v,
        quota_from: from.filter(|f| *f != path),
        path,
        quota,
    }
}

/// Reads the cgroup facts of `pid`. `cgroup_text` is its `/proc/PID/cgroup`,
/// `status_text` its `/proc/PID/status`.
/// `online_cpus` is the host's, the "visible CPUs".
pub(crate) fn read_container(
    pid: i32,
    cgroup_text: &str,
    status_text: &str,
    online_cpus: u32,
) -> Container {
    let mut notes = Vec::new();
    let lines = match parse_proc_cgroup(cgroup_text) {
        Ok(l) => l,
        Err(e) => {
            notes.push(e.to_string());
            Vec::new()
        }
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default();
    let mut note_err = |e: ContainerError| notes.push(e.to_string());

    let memory = group_dirs_up(&lines, &mounts, "memory")
        .map(|(v, groups)| memory_group(v, &groups, &mut note_err));
    let cpu = group_dirs_up(&lines, &mounts, "cpu")
        .map(|(v, groups)| cpu_group(v, &groups, &mut note_err));
    let cpuset = group_dir(&lines, &mounts, "cpuset").and_then(|(v, path, dir)| {
        let file = match v {
            Version::V1 => "cpuset.cpus",
            Version::V2 => "cpuset.cpus.effective",
        };
        let cpus = read_trim(&dir.join(file)).filter(|s| !s.is_empty())?;
        let count = cpu_list_count(&cpus).map_err(&mut note_err).ok()?;
        Some(CpusetGroup {
            version: v,
            path,
            cpus,
            count,
        })
    });
    let cpus_allowed = status_cpus_allowed(status_text);
    let cpus_allowed_count = cpus_allowed
        .as_deref()
        .and_then(|s| cpu_list_count(s).map_err(&mut note_err).ok());
    let ns = |p: &str| std::fs::read_link(p).ok();
    let own_pid_namespace = match (ns(&format!("/proc/{pid}/ns/pid")), ns("/proc/self/ns/pid")) {
        (Some(a), Some(b)) => Some(a != b),
        _ => None,
    };
    Container {
        memory_limit_bytes: memory.as_ref().and_then(|m| m.limit_bytes),
        memory_usage_bytes: memory.as_ref().and_then(|m| m.usage_bytes),
        cpu_quota_cpus: cpu.as_ref().and_then(|c| c.quota).map(|q| q.cpus),
        visible_cpus: online_cpus,
        memory,
        cpu,
        cpuset,
        cpus_allowed,
        cpus_allowed_count,
        own_pid_namespace,
        notes,
    }
}

/// The processes a memory cgroup's usage counts: those in the group and in every group
/// below it, as their `cgroup.procs` list them (PIDs as this process sees them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Members {
    /// Sorted, each once.
    pub pids: Vec<i32>,
    /// Every group below was read: the walk stops after [`MAX_MEMBER_GROUPS`] groups (a
    /// process in the root group, say), and a group that vanished mid-walk is skipped.
    pub complete: bool,
}

/// Groups a walk for [`Members`] reads at most.
pub const MAX_MEMBER_GROUPS: usize = 256;

/// The most read of one `cgroup.procs` (a root group of a busy host: a few hundred KiB).
const MAX_PROCS_BYTES: u64 = 4 << 20;

/// The members of the memory cgroup of the process whose `/proc/PID/cgroup` is
/// `cgroup_text`; `None` without a memory controller or its directory.
pub(crate) fn memory_members(cgroup_text: &str) -> Option<Members> {
    let lines = parse_proc_cgroup(cgroup_text).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .ok()?;
    let (_, _, dir) = group_dir(&lines, &mounts, "memory")?;
    Some(members_below(&dir, MAX_MEMBER_GROUPS))
}

/// The PIDs in the `cgroup.procs` of `dir` and of every directory below it, reading at
/// most `max_groups` groups.
pub(crate) fn members_below(dir: &Path, max_groups: usize) -> Members {
    use std::io::Read;
    let mut pids = Vec::new();
    let mut complete = true;
    let mut todo = vec![dir.to_path_buf()];
    let mut read = 0;
    while let Some(d) = todo.pop() {
        if read == max_groups {
            complete = false;
            break;
        }
        read += 1;
        let mut text = String::new();
        let got = std::fs::File::open(d.join("cgroup.procs"))
            .and_then(|f| f.take(MAX_PROCS_BYTES).read_to_string(&mut text));
        match got {
            Ok(n) if (n as u64) < MAX_PROCS_BYTES => pids.extend(
                text.split_whitespace()
                    .filter_map(|w| w.parse::<i32>().ok()),
            ),
            _ => complete = false,
        }
        match std::fs::read_dir(&d) {
            Ok(entries) => todo.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            ),
            Err(_) => complete = false,
        }
    }
    pids.sort_unstable();
    pids.dedup();
    Members { pids, complete }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_read_from_the_group_and_every_group_below() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::write(root.join("cgroup.procs"), "12\n7\n").unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/cgroup.procs"), "").unwrap();
        std::fs::write(root.join("a/b/cgroup.procs"), "40\n7\n").unwrap();
        std::fs::create_dir(root.join("c")).unwrap();
        std::fs::write(root.join("c/cgroup.procs"), "3\n").unwrap();
        let m = members_below(root, MAX_MEMBER_GROUPS);
        assert_eq!(m.pids, vec![3, 7, 12, 40]);
        assert!(m.complete);
        // A walk cut short says so.
        let m = members_below(root, 2);
        assert!(!m.complete);
        assert!(m.pids.contains(&12), "{m:?}");
        // A group without cgroup.procs (gone mid-walk): incomplete, what was read kept.
        std::fs::remove_file(root.join("c/cgroup.procs")).unwrap();
        let m = members_below(root, MAX_MEMBER_GROUPS);
        assert!(!m.complete);
        assert_eq!(m.pids, vec![7, 12, 40]);
    }

    #[test]
    fn this_process_is_a_member_of_its_own_memory_group() {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        // Without a memory controller (some containers) there is nothing to read.
        if let Some(m) = memory_members(&text) {
            assert!(m.pids.contains(&(std::process::id() as i32)), "{m:?}");
        }
    }

    #[test]
    fn limits_and_quotas() {
        assert_eq!(parse_limit("max\n").unwrap(), None);
        assert_eq!(parse_limit("9223372036854771712\n").unwrap(), None);
        assert_eq!(parse_limit("536870912\n").unwrap(), Some(512 << 20));
        assert!(parse_limit("lots").is_err());
        assert_eq!(parse_cpu_max("max 100000\n").unwrap(), None);
        let q = parse_cpu_max("50000 100000\n").unwrap().unwrap();
        assert_eq!((q.quota_us, q.period_us, q.cpus), (50000, 100000, 0.5));
        assert_eq!(parse_cpu_max("150000 100000").unwrap().unwrap().cpus, 1.5);
        assert!(parse_cpu_max("").is_err());
        assert!(parse_cpu_max("x 100000").is_err());
        assert_eq!(parse_cfs("-1\n", "100000\n").unwrap(), None);
        assert_eq!(parse_cfs("50000\n", "100000\n").unwrap().unwrap().cpus, 0.5);
        assert!(parse_cfs("half", "100000").is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list_count("0-1\n").unwrap(), 2);
        assert_eq!(cpu_list_count("0-3,8,10-11").unwrap(), 7);
        assert_eq!(cpu_list_count("5").unwrap(), 1);
        assert!(cpu_list_count("3-1").is_err());
        assert!(cpu_list_count("a").is_err());
        assert_eq!(cpu_list("0-2,5\n").unwrap(), vec![0, 1, 2, 5]);
        assert!(cpu_list("").unwrap().is_empty());
        assert!(
            cpu_list("0-4294967295").is_err(),
            "no range beyond any kernel's CPUs"
        );
        let status = "Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed:\t1\n";
        assert_eq!(status_cpus_allowed(status).as_deref(), Some("0-1"));
    }

    #[test]
    fn effective_cpus_is_the_smallest_bound() {
        let c = Container {
            memory_limit_bytes: None,
            memory_usage_bytes: None,
            cpu_quota_cpus: Some(0.5),
            visible_cpus: 2,
            memory: None,
            cpu: Some(CpuGroup {
                quota_from: None,
                version: Version::V1,
                path: "/x".into(),
                quota: parse_cfs("50000", "100000").unwrap(),
            }),
            cpuset: None,
            cpus_allowed: Some("0-1".into()),
            cpus_allowed_count: Some(2),
            own_pid_namespace: Some(false),
            notes: vec![],
        };
        assert_eq!(c.effective_cpus(), Some(0.5));
    }

    #[test]
    fn this_process_has_readable_cgroups() {
        let me = std::process::id() as i32;
        let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let st = std::fs::read_to_string("/proc/self/status").unwrap();
        let c = read_container(me, &cg, &st, 2);
        assert_eq!(c.own_pid_namespace, Some(false));
        assert!(c.cpus_allowed_count.unwrap() >= 1);
    }
}
