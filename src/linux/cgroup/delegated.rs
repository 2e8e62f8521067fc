//! cgroup v2 groups memtrial must claim before it can make run groups in them: one
//! delegated to a user that is not root (systemd's `Delegate=yes`, what `systemd-run
//! --user --scope -p Delegate=yes` gives; or any group whose directory and
//! `cgroup.procs`/`cgroup.subtree_control` files the user owns, the kernel's own
//! delegation model), and, for root, the root of a container's cgroup namespace (Docker's
//! default on v2), which unlike the machine's root group holds processes.
//!
//! cgroup v2 lets a group other than the root give controllers to its children only while
//! it holds no processes itself, so memtrial moves itself into a leaf of its own
//! (`memtrial-self`) and makes its run groups beside it, under `memtrial/`, exactly as root
//! does under the machine's root. It does this only when it is alone in its group: it
//! never moves a process it did not start.

use std::fs;
use std::path::{Path, PathBuf};

use super::run::{enable_line, ensure_dir, read_pids};
use super::{parse_mountinfo, parse_proc_cgroup, Hierarchy};

/// The leaf memtrial moves itself into inside a delegated group.
pub const SELF_LEAF: &str = "memtrial-self";

/// What would give a user that is not root a cgroup per run, said with every refusal.
pub const HOW_TO_DELEGATE: &str = "on cgroup v2 with systemd, start memtrial in a delegated scope of its own: `systemd-run --user --scope -p Delegate=yes -- memtrial run …`; or run it as root";

/// Where the user's own cgroup v2 group is, from the text of `/proc/self/mountinfo` and
/// `/proc/self/cgroup`; the reason when there is none to use (pure, for tests).
pub fn own_v2_group(mountinfo: &str, self_cgroup: &str) -> Result<(PathBuf, PathBuf), String> {
    let mounts = parse_mountinfo(mountinfo);
    let v1_memory = mounts
        .iter()
        .any(|m| !m.is_v2() && m.controllers.iter().any(|c| c == "memory"));
    if v1_memory {
        return Err(
            "this machine's memory controller is on cgroup v1, where only root can make cgroups"
                .into(),
        );
    }
    let Some(m) = mounts.iter().find(|m| m.is_v2()) else {
        return Err("no cgroup v2 file system is mounted".into());
    };
    let lines = parse_proc_cgroup(self_cgroup).map_err(|e| e.to_string())?;
    let Some(own) = lines.iter().find(|l| l.hierarchy == 0) else {
        return Err("/proc/self/cgroup has no cgroup v2 line".into());
    };
    let dir = m.dir_of(&own.path).ok_or_else(|| {
        format!(
            "memtrial's cgroup {} lies outside the cgroup2 mount at {}",
            own.path,
            m.mount_point.display()
        )
    })?;
    Ok((m.mount_point.clone(), dir))
}

/// This user may write `p` (the kernel's own check, as `open` would make it).
fn writable(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Claims the group memtrial runs in when it is delegated to this user: moves memtrial
/// into [`SELF_LEAF`], gives the group's controllers to its children and returns the
/// layout, run groups under `<group>/memtrial`. The reason, with what would give one,
/// when there is none.
pub fn claim_delegated() -> Result<Hierarchy, String> {
    let (mount, group) = own_group()?;
    if !["", "cgroup.procs", "cgroup.subtree_control"]
        .iter()
        .all(|f| writable(&group.join(f)))
    {
        return Err(format!(
            "memtrial's cgroup {} is not delegated to this user",
            group.display()
        ));
    }
    claim(mount, group)
}

/// For root on cgroup v2: `h` as it is when the tree's root (as this process sees it) can
/// give controllers to its children — the machine's root group can; else (the root of a
/// container's cgroup namespace, which holds the container's processes) memtrial's own
/// group claimed as [`claim_delegated`] claims one. The reason when neither can be had.
pub fn ready_for_root(h: Hierarchy) -> Result<Hierarchy, String> {
    let Hierarchy::V2 { mount, .. } = &h else {
        return Ok(h);
    };
    let line = enable_line(mount, &WANT);
    if !line.contains("+memory") {
        // Run groups without their memory figures would look isolated and measure nothing.
        return Err(format!(
            "the cgroup v2 tree at {} offers no memory controller",
            mount.display()
        ));
    }
    if fs::write(mount.join("cgroup.subtree_control"), &line).is_ok() {
        return Ok(h);
    }
    let (mount, group) = own_group()?;
    claim(mount, group).map_err(|why| {
        format!(
            "the cgroup v2 tree's root here is a group with processes (a container's cgroup namespace), which cannot give controllers to run groups, and {why}; run memtrial as the container's first process, or in a group of its own"
        )
    })
}

/// The controllers run groups get, where the parent has them.
const WANT: [&str; 4] = ["memory", "cpu", "pids", "cpuset"];

/// The cgroup2 mount and memtrial's own group's directory on it.
fn own_group() -> Result<(PathBuf, PathBuf), String> {
    let read = |p: &str| fs::read_to_string(p).map_err(|e| format!("cannot read {p}: {e}"));
    own_v2_group(&read("/proc/self/mountinfo")?, &read("/proc/self/cgroup")?)
}

/// Moves memtrial into `<group>/memtrial-self` and gives the group's controllers to its
/// children, when memtrial is alone in it.
fn claim(mount: PathBuf, group: PathBuf) -> Result<Hierarchy, String> {
    let shown = group.display();
    let me = std::process::id() as i32;
    let others = read_pids(&group).into_iter().filter(|p| *p != me).count();
    if others > 0 {
        return Err(format!(
            "memtrial's cgroup {shown} holds {others} other process(es); \
             cgroup v2 lets only a group without processes give controllers to its children, and \
             memtrial moves no process it did not start"
        ));
    }
    let controllers = fs::read_to_string(group.join("cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Err(format!(
            "memtrial's cgroup {shown} has no memory controller to give (it has: {})",
            if controllers.trim().is_empty() {
                "none"
            } else {
                controllers.trim()
            }
        ));
    }
    let leaf = group.join(SELF_LEAF);
    ensure_dir(&leaf).map_err(|e| e.to_string())?;
    fs::write(leaf.join("cgroup.procs"), me.to_string())
        .map_err(|e| format!("cannot move memtrial into {}: {e}", leaf.display()))?;
    let line = enable_line(&group, &WANT);
    fs::write(group.join("cgroup.subtree_control"), &line).map_err(|e| {
        format!("cannot give the controllers ({line}) of {shown} to its children: {e}")
    })?;
    Ok(Hierarchy::V2 {
        mount,
        base: group.join("memtrial"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIFIED: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
    const HYBRID: &str = "\
30 23 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";

    #[test]
    fn a_users_own_group_on_the_unified_tree() {
        let (mount, dir) = own_v2_group(
            UNIFIED,
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope\n",
        )
        .unwrap();
        assert_eq!(mount, Path::new("/sys/fs/cgroup"));
        assert_eq!(
            dir,
            Path::new("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope")
        );
    }

    #[test]
    fn no_delegation_where_memory_is_on_v1() {
        let e = own_v2_group(HYBRID, "4:memory:/\n0::/\n").unwrap_err();
        assert!(e.contains("cgroup v1"), "{e}");
    }
}
