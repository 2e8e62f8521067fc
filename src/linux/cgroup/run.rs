//! One run's cgroup: made under memtrial's base with the plan's limits, joined by the
//! spawner, killed whole (cgroup.kill or signals until empty), removed.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

/// One run's cgroup (one directory on v2, one per controller on v1).
#[derive(Debug)]
pub struct RunCgroup {
    pub(super) hierarchy: Hierarchy,
    /// Directories created for this run, by controller (v2: one entry under Memory).
    pub(super) dirs: BTreeMap<Controller, PathBuf>,
    /// The lock on each directory: who owns the group (see `stale.rs`), held until the
    /// group is removed.
    locks: Vec<OwnedFd>,
}
pub(super) fn ensure_dir(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("create", dir)(e)),
    }
}
impl RunCgroup {
    /// Creates `<base>/<name>` with the limits applied.
    pub fn create(h: &Hierarchy, name: &str, limits: &Limits) -> Result<RunCgroup, CgroupError> {
        let mut dirs = BTreeMap::new();
        match h {
            Hierarchy::V2 { mount, base } => {
                let want = ["memory", "cpu", "pids", "cpuset"];
                // Controllers must be enabled from the root down to our base.
                let _ = fs::write(
                    mount.join("cgroup.subtree_control"),
                    enable_line(mount, &want),
                );
                ensure_dir(base)?;
                let _ = fs::write(
                    base.join("cgroup.subtree_control"),
                    enable_line(base, &want),
                );
                let dir = base.join(name);
                let lock = make_owned_dir(&dir)?;
                dirs.insert(Controller::Memory, dir.clone());
                let cg = RunCgroup {
                    hierarchy: h.clone(),
                    dirs,
                    locks: vec![lock],
                };
                if let Err(e) = cg.apply_v2(&dir, limits) {
                    cg.remove();
                    return Err(e);
                }
                Ok(cg)
            }
            Hierarchy::V1 { bases } => {
                let mut cg = RunCgroup {
                    hierarchy: h.clone(),
                    dirs,
                    locks: Vec::new(),
                };
                for (c, base) in bases {
                    ensure_dir(base)?;
                    if *c == Controller::Cpuset {
                        // v1 cpusets start empty: copy the parent's before anything joins.
                        if let Some(parent) = base.parent() {
                            for f in ["cpuset.cpus", "cpuset.mems"] {
                                if fs::read_to_string(base.join(f))
                                    .map(|s| s.trim().is_empty())
                                    .unwrap_or(true)
                                {
                                    let v = fs::read_to_string(parent.join(f)).unwrap_or_default();
                                    write(&base.join(f), v.trim())?;
                                }
                            }
                        }
                    }
                    let dir = base.join(name);
                    // What was made so far is removed with `cg` on an error.
                    cg.locks.push(make_owned_dir(&dir)?);
                    cg.dirs.insert(*c, dir);
                }
                if let Err(e) = cg.apply_v1(limits) {
                    cg.remove();
                    return Err(e);
                }
                Ok(cg)
            }
        }
    }

    pub(super) fn apply_v2(&self, dir: &Path, l: &Limits) -> Result<(), CgroupError> {
        if let Some(m) = l.memory_max {
            write(&dir.join("memory.max"), &m.to_string())?;
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            }
        }
        if let Some(c) = l.cpus {
            let quota = (c * CPU_PERIOD_US as f64).round() as u64;
            write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
        }
        if let Some(s) = &l.cpuset {
            write(&dir.join("cpuset.cpus"), s)?;
        }
        if let Some(p) = l.pids_max {
            write(&dir.join("pids.max"), &p.to_string())?;
        }
        Ok(())
    }

    pub(super) fn apply_v1(&self, l: &Limits) -> Result<(), CgroupError> {
        let need = |c: Controller, what: &'static str| {
            self.dirs
                .get(&c)
                .ok_or(CgroupError::MissingController(what))
        };
        if let Some(d) = self.dirs.get(&Controller::Cpuset) {
            let parent = d.parent().unwrap_or(d);
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let v = fs::read_to_string(parent.join(f)).unwrap_or_default();
                write(&d.join(f), v.trim())?;
            }
        }
        if let Some(m) = l.memory_max {
            let d = need(Controller::Memory, "memory")?;
            write(&d.join("memory.limit_in_bytes"), &m.to_string())?;
            let memsw = d.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &m.to_string())?;
            }
        }
        if let Some(c) = l.cpus {
            let d = need(Controller::Cpu, "cpu")?;
            let quota = (c * CPU_PERIOD_US as f64).round() as u64;
            write(&d.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
            write(&d.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        if let Some(s) = &l.cpuset {
            write(&need(Controller::Cpuset, "cpuset")?.join("cpuset.cpus"), s)?;
        }
        if let Some(p) = l.pids_max {
            write(
                &need(Controller::Pids, "pids")?.join("pids.max"),
                &p.to_string(),
            )?;
        }
        Ok(())
    }

    /// The `cgroup.procs` files a new process must join, opened for writing now so that
    /// joining after `fork` is a single async-signal-safe `write`.
    pub(crate) fn open_procs_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        self.dirs
            .values()
            .map(|d| {
                let p = d.join("cgroup.procs");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map(OwnedFd::from)
                    .map_err(io_err("open", &p))
            })
            .collect()
    }

    /// The directory whose `cgroup.procs` lists the run's processes.
    pub(crate) fn main_dir(&self) -> &Path {
        self.dirs
            .get(&Controller::Memory)
            .or_else(|| self.dirs.values().next())
            .map(PathBuf::as_path)
            .unwrap_or(Path::new("/"))
    }

    /// PIDs in the run's cgroup.
    pub fn procs(&self) -> Vec<i32> {
        read_pids(self.main_dir())
    }

    /// A reader of the group's figures, for the run's probes.
    pub fn reader(&self) -> CgroupReader {
        CgroupReader {
            hierarchy: self.hierarchy.clone(),
            dirs: self.dirs.clone(),
            figures: CgroupFigures::default(),
            stat: Default::default(),
            usage: Default::default(),
            working_set: None,
        }
    }

    /// Kills every process in the group and waits (up to `wait`) until it is empty.
    pub(crate) fn kill_all(&self, wait: Duration) -> bool {
        kill_group(&self.hierarchy, &self.dirs, wait)
    }

    /// Removes the run's directories (the group must be empty).
    pub fn remove(&self) {
        for d in self.dirs.values() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while fs::remove_dir(d).is_err() && d.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
impl Drop for RunCgroup {
    /// Nothing of a run outlives it: whatever is left is killed and the group removed.
    fn drop(&mut self) {
        self.kill_all(Duration::from_secs(2));
        self.remove();
    }
}
pub(super) fn enable_line(dir: &Path, want: &[&str]) -> String {
    let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    want.iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}
pub(super) fn read_pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}
pub(super) fn kill_group(
    h: &Hierarchy,
    dirs: &BTreeMap<Controller, PathBuf>,
    wait: Duration,
) -> bool {
    let main = dirs
        .get(&Controller::Memory)
        .or_else(|| dirs.values().next())
        .cloned()
        .unwrap_or_default();
    let deadline = Instant::now() + wait;
    loop {
        let pids = read_pids(&main);
        if pids.is_empty() {
            return true;
        }
        match h {
            Hierarchy::V2 { .. } if main.join("cgroup.kill").exists() => {
                let _ = fs::write(main.join("cgroup.kill"), "1");
            }
            Hierarchy::V2 { .. } => {
                let _ = fs::write(main.join("cgroup.freeze"), "1");
                signal_all(&read_pids(&main));
                let _ = fs::write(main.join("cgroup.freeze"), "0");
            }
            Hierarchy::V1 { .. } => {
                // Freeze so nothing forks between reading the list and the signals.
                let freezer = dirs.get(&Controller::Freezer);
                if let Some(f) = freezer {
                    let _ = fs::write(f.join("freezer.state"), "FROZEN");
                    let until = Instant::now() + Duration::from_millis(500);
                    while fs::read_to_string(f.join("freezer.state"))
                        .map(|s| s.trim() != "FROZEN")
                        .unwrap_or(false)
                        && Instant::now() < until
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                signal_all(&read_pids(&main));
                if let Some(f) = freezer {
                    let _ = fs::write(f.join("freezer.state"), "THAWED");
                }
            }
        }
        if Instant::now() >= deadline {
            return read_pids(&main).is_empty();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
pub(super) fn signal_all(pids: &[i32]) {
    for p in pids {
        crate::linux::child::kill(*p, libc::SIGKILL);
    }
}
/// Joins the calling process to the cgroups whose `cgroup.procs` files are open.
/// Only async-signal-safe calls: meant for `pre_exec`.
pub(crate) fn join_self(fds: &[OwnedFd]) -> io::Result<()> {
    for fd in fds {
        // SAFETY: writing a static buffer to an open descriptor.
        let r = unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        if r != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
