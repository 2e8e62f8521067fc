//! Where the cgroup hierarchies are and which group a process is in: the one reading of
//! `/proc/self/mountinfo` (cgroup and cgroup2 mounts) and `/proc/PID/cgroup` (a process's
//! membership), used by memtrial's own run groups (`Hierarchy`), stale cleanup, and the
//! read-only facts of any process's cgroup (`container`: `inspect`, the exporter, the host's
//! facts, the in-container backend).

use std::path::PathBuf;

use serde::Serialize;

/// A `/proc/PID/cgroup` that is not `ID:CONTROLLERS:PATH` lines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MembershipError(pub String);

/// One line of `/proc/PID/cgroup`: `hierarchy-ID:controller-list:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLine {
    pub hierarchy: u32,
    /// Empty for the v2 hierarchy (`0::/path`).
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_proc_cgroup(text: &str) -> Result<Vec<CgroupLine>, MembershipError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.splitn(3, ':');
        let (Some(id), Some(ctl), Some(path)) = (it.next(), it.next(), it.next()) else {
            return Err(MembershipError(format!(
                "{line:?} is not ID:CONTROLLERS:PATH"
            )));
        };
        let hierarchy = id
            .parse()
            .map_err(|_| MembershipError(format!("hierarchy {id:?} is not a number")))?;
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
    let (v, path, m) = group_mount(lines, mounts, controller)?;
    let dir = m.dir_of(&path)?;
    Some((v, path, dir))
}

/// The group a process is in for `controller` and every group above it that the mount
/// shows, nearest first, as (path, directory): a limit set on any of them applies.
pub fn group_dirs_up(
    lines: &[CgroupLine],
    mounts: &[CgroupMount],
    controller: &str,
) -> Option<(Version, Vec<(String, PathBuf)>)> {
    let (v, path, m) = group_mount(lines, mounts, controller)?;
    let mut out = Vec::new();
    let mut p = path.as_str();
    while let Some(dir) = m.dir_of(p) {
        out.push((if p.is_empty() { "/" } else { p }.to_string(), dir));
        if p == "/" || p.is_empty() {
            break;
        }
        p = &p[..p.rfind('/').unwrap_or(0)];
    }
    (!out.is_empty()).then_some((v, out))
}

fn group_mount<'m>(
    lines: &[CgroupLine],
    mounts: &'m [CgroupMount],
    controller: &str,
) -> Option<(Version, String, &'m CgroupMount)> {
    if let Some(l) = lines
        .iter()
        .find(|l| l.controllers.iter().any(|c| c == controller))
    {
        let m = mounts
            .iter()
            .find(|m| m.version == Version::V1 && m.controllers.iter().any(|c| c == controller))?;
        return Some((Version::V1, l.path.clone(), m));
    }
    let l = lines
        .iter()
        .find(|l| l.hierarchy == 0 && l.controllers.is_empty())?;
    let m = mounts.iter().find(|m| m.version == Version::V2)?;
    Some((Version::V2, l.path.clone(), m))
}

impl CgroupMount {
    pub fn is_v2(&self) -> bool {
        self.version == Version::V2
    }

    /// The directory of the group at `path` (a path of the hierarchy, as in
    /// `/proc/PID/cgroup`) under this mount; `None` when the mount's root is not above it.
    pub(crate) fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rel = if self.root == "/" {
            path
        } else {
            path.strip_prefix(self.root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))?
        };
        let rel = rel.trim_start_matches('/');
        Some(if rel.is_empty() {
            self.mount_point.clone()
        } else {
            self.mount_point.join(rel)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group and the groups above it that the mount shows: all of them on the host;
    /// inside a container whose mount's root is its own group, only that group.
    #[test]
    fn groups_up_to_the_mounts_root() {
        let lines = parse_proc_cgroup("0::/kubepods/pod1/c1\n").unwrap();
        let host = parse_mountinfo("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let (v, up) = group_dirs_up(&lines, &host, "memory").unwrap();
        assert_eq!(v, Version::V2);
        let paths: Vec<_> = up.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
        assert_eq!(
            paths,
            [
                (
                    "/kubepods/pod1/c1",
                    PathBuf::from("/sys/fs/cgroup/kubepods/pod1/c1")
                ),
                (
                    "/kubepods/pod1",
                    PathBuf::from("/sys/fs/cgroup/kubepods/pod1")
                ),
                ("/kubepods", PathBuf::from("/sys/fs/cgroup/kubepods")),
                ("/", PathBuf::from("/sys/fs/cgroup")),
            ]
        );
        let inside =
            parse_mountinfo("30 23 0:26 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
        let (_, up) = group_dirs_up(&lines, &inside, "memory").unwrap();
        let dirs: Vec<_> = up.iter().map(|(_, d)| d.clone()).collect();
        assert_eq!(
            dirs,
            [
                PathBuf::from("/sys/fs/cgroup/c1"),
                PathBuf::from("/sys/fs/cgroup")
            ]
        );
        // A sibling whose name merely starts with the mount's root is not under it.
        let sibling = parse_proc_cgroup("0::/kubepods/pod10/c1\n").unwrap();
        assert_eq!(group_dirs_up(&sibling, &inside, "memory"), None);
    }

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
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
