//! Read-only cgroup facts about one process: which cgroup it is in (v1 and v2),
//! its memory limit and usage, CPU quota and cpuset.
//!
//! The cgroup of a process comes from `/proc/PID/cgroup`; where each hierarchy is
//! mounted, from `/proc/self/mountinfo`. On a hybrid machine a controller bound to a
//! v1 hierarchy is read there; the v2 (unified) group is used for controllers no v1
//! hierarchy has.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Errors parsing cgroup files.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("cannot parse {what}: {reason}")]
    Parse { what: &'static str, reason: String },
}

/// One line of `/proc/PID/cgroup`: `hierarchy-ID:controller-list:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLine {
    pub hierarchy: u32,
    /// Empty for the v2 hierarchy (`0::/path`).
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_proc_cgroup(text: &str) -> Result<Vec<CgroupLine>, ContainerError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.splitn(3, ':');
        let (Some(id), Some(ctl), Some(path)) = (it.next(), it.next(), it.next()) else {
            return Err(ContainerError::Parse {
                what: "/proc/PID/cgroup",
                reason: format!("{line:?} is not ID:CONTROLLERS:PATH"),
            });
        };
        let hierarchy = id.parse().map_err(|_| ContainerError::Parse {
            what: "/proc/PID/cgroup",
            reason: format!("hierarchy {id:?} is not a number"),
        })?;
        out.push(CgroupLine {
            hierarchy,
            controllers: ctl
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            path: path.to_string(),
        });
    }
    Ok(out)
}

/// Which cgroup version a mount or a group belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    V1,
    V2,
}

/// A cgroup filesystem mount from `mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub version: Version,
    /// v1: the controllers in the super options (`cpu`, `memory`, `name=systemd`, …).
    pub controllers: Vec<String>,
    /// The cgroup path that is the mount's root (`/` unless bind-mounted from inside).
    pub root: String,
    pub mount_point: PathBuf,
}

/// The cgroup mounts listed in `/proc/self/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let version = match r[0] {
            "cgroup" => Version::V1,
            "cgroup2" => Version::V2,
            _ => continue,
        };
        let controllers = match version {
            Version::V1 => r[2]
                .split(',')
                .filter(|o| {
                    !matches!(
                        *o,
                        "rw" | "ro" | "relatime" | "noatime" | "nosuid" | "nodev" | "noexec"
                    ) && !o.starts_with("release_agent")
                        && *o != "clone_children"
                        && *o != "xattr"
                })
                .map(str::to_string)
                .collect(),
            Version::V2 => Vec::new(),
        };
        out.push(CgroupMount {
            version,
            controllers,
            root: unescape(l[3]),
            mount_point: PathBuf::from(unescape(l[4])),
        });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of the group a process is in for `controller`, with its version.
pub fn group_dir(
    lines: &[CgroupLine],
    mounts: &[CgroupMount],
    controller: &str,
) -> Option<(Version, String, PathBuf)> {
    let join = |m: &CgroupMount, path: &str| -> Option<PathBuf> {
        let rel = if m.root == "/" {
            path
        } else {
            path.strip_prefix(m.root.as_str())?
        };
        let rel = rel.trim_start_matches('/');
        Some(if rel.is_empty() {
            m.mount_point.clone()
        } else {
            m.mount_point.join(rel)
        })
    };
    if let Some(l) = lines
        .iter()
        .find(|l| l.controllers.iter().any(|c| c == controller))
    {
        let m = mounts
            .iter()
            .find(|m| m.version == Version::V1 && m.controllers.iter().any(|c| c == controller))?;
        return Some((Version::V1, l.path.clone(), join(m, &l.path)?));
    }
    let l = lines
        .iter()
        .find(|l| l.hierarchy == 0 && l.controllers.is_empty())?;
    let m = mounts.iter().find(|m| m.version == Version::V2)?;
    Some((Version::V2, l.path.clone(), join(m, &l.path)?))
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
    let err = || ContainerError::Parse {
        what: "CPU list",
        reason: format!("{:?}", text.trim()),
    };
    let mut n = 0u32;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.parse().map_err(|_| err())?;
                let b: u32 = b.parse().map_err(|_| err())?;
                if b < a {
                    return Err(err());
                }
                let count = (b - a).checked_add(1).ok_or_else(err)?;
                n = n.checked_add(count).ok_or_else(err)?;
            }
            None => {
                part.parse::<u32>().map_err(|_| err())?;
                n = n.checked_add(1).ok_or_else(err)?;
            }
        }
    }
    Ok(n)
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
    /// `None`: no limit.
    pub limit_bytes: Option<u64>,
    pub usage_bytes: Option<u64>,
    /// `memory.peak` (v2, kernel ≥ 5.19) or `memory.max_usage_in_bytes` (v1).
    pub peak_bytes: Option<u64>,
}

/// The CPU controller's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuGroup {
    pub version: Version,
    pub path: String,
    /// `None`: no quota.
    pub quota: Option<CpuQuota>,
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
    pub fn effective_cpus(&self) -> Option<f64> {
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

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Reads the cgroup facts of `pid`. `cgroup_text` is its `/proc/PID/cgroup`,
/// `status_text` its `/proc/PID/status`.
/// `online_cpus` is the host's, the "visible CPUs".
pub fn read_container(
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

    let memory = group_dir(&lines, &mounts, "memory").map(|(v, path, dir)| {
        let (limit, usage, peak) = match v {
            Version::V1 => (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "memory.max_usage_in_bytes",
            ),
            Version::V2 => ("memory.max", "memory.current", "memory.peak"),
        };
        let num = |f: &str| read_trim(&dir.join(f)).and_then(|t| t.parse::<u64>().ok());
        let limit_bytes = match read_trim(&dir.join(limit)).map(|t| parse_limit(&t)) {
            Some(Ok(l)) => l,
            Some(Err(e)) => {
                note_err(e);
                None
            }
            None => None,
        };
        MemoryGroup {
            version: v,
            path,
            limit_bytes,
            usage_bytes: num(usage),
            peak_bytes: num(peak),
        }
    });
    let cpu = group_dir(&lines, &mounts, "cpu").map(|(v, path, dir)| {
        let q = match v {
            Version::V1 => match (
                read_trim(&dir.join("cpu.cfs_quota_us")),
                read_trim(&dir.join("cpu.cfs_period_us")),
            ) {
                (Some(q), Some(p)) => parse_cfs(&q, &p),
                _ => Ok(None),
            },
            Version::V2 => read_trim(&dir.join("cpu.max")).map_or(Ok(None), |t| parse_cpu_max(&t)),
        };
        CpuGroup {
            version: v,
            path,
            quota: q.unwrap_or_else(|e| {
                note_err(e);
                None
            }),
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on Debian 12 (cgroup v1 hybrid), group names changed.
    const CGROUP_V1: &str = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n4:memory:/svc/web\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/memtrial-test-1\n0::/\n";
    const MOUNTINFO_V1: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    // A v2-only host (Debian 12 default with systemd), docker container scope.
    const CGROUP_V2: &str = "0::/system.slice/docker-4f1c.scope\n";
    const MOUNTINFO_V2: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn v1_hybrid_groups() {
        let lines = parse_proc_cgroup(CGROUP_V1).unwrap();
        assert_eq!(lines.len(), 10);
        assert_eq!(lines[8].controllers, ["cpu"]);
        let mounts = parse_mountinfo(MOUNTINFO_V1);
        assert_eq!(mounts.len(), 6);
        assert_eq!(mounts[0].controllers, ["cpu"]);
        assert_eq!(
            group_dir(&lines, &mounts, "cpu"),
            Some((
                Version::V1,
                "/memtrial-test-1".into(),
                "/sys/fs/cgroup/cpu/memtrial-test-1".into()
            ))
        );
        assert_eq!(
            group_dir(&lines, &mounts, "memory").unwrap().2,
            PathBuf::from("/sys/fs/cgroup/memory/svc/web")
        );
        assert_eq!(
            group_dir(&lines, &mounts, "cpuset").unwrap().2,
            PathBuf::from("/sys/fs/cgroup/cpuset")
        );
        // No v1 hierarchy has "io": the unified group answers.
        assert_eq!(group_dir(&lines, &mounts, "io").unwrap().0, Version::V2);
    }

    #[test]
    fn v2_groups() {
        let lines = parse_proc_cgroup(CGROUP_V2).unwrap();
        let mounts = parse_mountinfo(MOUNTINFO_V2);
        assert_eq!(mounts.len(), 1);
        let (v, path, dir) = group_dir(&lines, &mounts, "memory").unwrap();
        assert_eq!(v, Version::V2);
        assert_eq!(path, "/system.slice/docker-4f1c.scope");
        assert_eq!(
            dir,
            PathBuf::from("/sys/fs/cgroup/system.slice/docker-4f1c.scope")
        );
    }

    #[test]
    fn mount_rooted_inside_the_hierarchy() {
        // Inside a container the hierarchy's root is the container's own group.
        let mounts = parse_mountinfo(
            "700 690 0:38 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
        );
        let lines = parse_proc_cgroup("4:memory:/docker/abc/worker\n").unwrap();
        assert_eq!(
            group_dir(&lines, &mounts, "memory").unwrap().2,
            PathBuf::from("/sys/fs/cgroup/memory/worker")
        );
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
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
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
