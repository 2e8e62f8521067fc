//! Control groups, v1, v2 and hybrid: one fresh cgroup per run, with container-like
//! limits, the kernel's figures for the whole tree, and a teardown that leaves nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup file system is mounted (/proc/self/mountinfo lists none)")]
    NotMounted,
    /// The OS error is part of the message (not a chained source), so it is said once.
    #[error("cannot {action} {}: {reason}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        reason: io::Error,
    },
    #[error("the {0} controller is not available in this cgroup hierarchy")]
    MissingController(&'static str),
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |reason| CgroupError::Io {
        action,
        path: path.to_path_buf(),
        reason,
    }
}

/// A v1 controller memtrial uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    Memory,
    Cpu,
    Cpuacct,
    Cpuset,
    Pids,
    Freezer,
}

impl Controller {
    pub const ALL: [Controller; 6] = [
        Controller::Memory,
        Controller::Cpu,
        Controller::Cpuacct,
        Controller::Cpuset,
        Controller::Pids,
        Controller::Freezer,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Cpuset => "cpuset",
            Controller::Pids => "pids",
            Controller::Freezer => "freezer",
        }
    }
}

/// Which cgroup layout the machine has, and where memtrial's groups go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2: one tree. `base` is the directory memtrial creates its groups under.
    V2 { mount: PathBuf, base: PathBuf },
    /// cgroup v1 (or hybrid: v1 controllers with an empty cgroup2 beside them). Per
    /// controller, the directory memtrial creates its groups under.
    V1 {
        bases: BTreeMap<Controller, PathBuf>,
    },
}

impl Hierarchy {
    pub fn describe(&self) -> String {
        match self {
            Hierarchy::V2 { base, .. } => format!("cgroup v2 under {}", base.display()),
            Hierarchy::V1 { bases } => format!(
                "cgroup v1 ({}) under {}",
                bases
                    .keys()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                bases
                    .get(&Controller::Memory)
                    .or_else(|| bases.values().next())
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
        }
    }

    pub fn version(&self) -> u8 {
        match self {
            Hierarchy::V2 { .. } => 2,
            Hierarchy::V1 { .. } => 1,
        }
    }
}

/// A line of `/proc/self/mountinfo` that mounts a cgroup file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub mount_point: PathBuf,
    /// The path inside the hierarchy that is mounted (usually `/`).
    pub root: String,
    pub v2: bool,
    /// v1 controllers from the super options (`rw,cpu,cpuacct` → cpu, cpuacct).
    pub controllers: Vec<String>,
}

/// Parses `/proc/self/mountinfo`, keeping cgroup and cgroup2 mounts.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            let fstype = *r.first()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(CgroupMount {
                mount_point: PathBuf::from(unescape_mount(l.get(4)?)),
                root: l.get(3)?.to_string(),
                v2: fstype == "cgroup2",
                controllers: r
                    .get(2)
                    .map(|o| {
                        o.split(',')
                            .filter(|x| !x.contains('=') && !matches!(*x, "rw" | "ro"))
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\134", "\\")
}

/// Parses `/proc/PID/cgroup`: hierarchy id, controllers, path.
pub fn parse_proc_cgroup(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            let ctrls = it.next()?;
            let path = it.next()?;
            Some((ctrls.to_string(), path.to_string()))
        })
        .collect()
}

/// Decides the layout from mount and membership text (pure, for tests).
pub fn hierarchy_from(mountinfo: &str, self_cgroup: &str) -> Result<Hierarchy, CgroupError> {
    let mounts = parse_mountinfo(mountinfo);
    let membership = parse_proc_cgroup(self_cgroup);
    let v1: Vec<&CgroupMount> = mounts
        .iter()
        .filter(|m| !m.v2 && !m.controllers.is_empty())
        .collect();
    let has_v1_memory = v1
        .iter()
        .any(|m| m.controllers.iter().any(|c| c == "memory"));
    if !has_v1_memory {
        if let Some(m) = mounts.iter().find(|m| m.v2) {
            // v2: our groups go under the root of the tree (the root cgroup may hold
            // processes and enable controllers for its children; a leaf may not).
            return Ok(Hierarchy::V2 {
                mount: m.mount_point.clone(),
                base: m.mount_point.join("memtrial"),
            });
        }
        return Err(CgroupError::NotMounted);
    }
    let mut bases = BTreeMap::new();
    for c in Controller::ALL {
        let Some(m) = v1
            .iter()
            .find(|m| m.controllers.iter().any(|x| x == c.name()))
        else {
            continue;
        };
        // Nest under memtrial's own group of that controller, so limits above still apply.
        let own = membership
            .iter()
            .find(|(ctrls, _)| ctrls.split(',').any(|x| x == c.name()))
            .map(|(_, p)| p.as_str())
            .unwrap_or("/");
        let rel = own
            .strip_prefix(m.root.trim_end_matches('/'))
            .unwrap_or(own);
        let dir = m.mount_point.join(rel.trim_start_matches('/'));
        bases.insert(c, dir.join("memtrial"));
    }
    Ok(Hierarchy::V1 { bases })
}

/// Reads the machine's layout.
pub fn detect() -> Result<Hierarchy, CgroupError> {
    let mi = fs::read_to_string("/proc/self/mountinfo")
        .map_err(io_err("read", Path::new("/proc/self/mountinfo")))?;
    let cg = fs::read_to_string("/proc/self/cgroup")
        .map_err(io_err("read", Path::new("/proc/self/cgroup")))?;
    hierarchy_from(&mi, &cg)
}

/// Container-like limits for every run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory limit in bytes (no swap escape).
    pub memory_max: Option<u64>,
    /// CPU quota in CPUs (e.g. 1.5), the program still sees every CPU.
    pub cpus: Option<f64>,
    /// CPUs the program may run on (`0-1,3`).
    pub cpuset: Option<String>,
    /// Most processes and threads at once.
    pub pids_max: Option<u64>,
}

impl Limits {
    pub fn any(&self) -> bool {
        self.memory_max.is_some()
            || self.cpus.is_some()
            || self.cpuset.is_some()
            || self.pids_max.is_some()
    }
}

pub const CPU_PERIOD_US: u64 = 100_000;

/// What the kernel says about a run's cgroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupFigures {
    /// The cgroup's memory high-water mark (anon + page cache + kernel), if the kernel keeps one.
    pub peak_bytes: Option<u64>,
    /// Largest sampled anonymous memory (`anon` / `rss` of memory.stat).
    pub anon_peak_bytes: u64,
    /// Largest sampled page cache (`file` / `cache`).
    pub file_peak_bytes: u64,
    pub oom_kills: u64,
    pub nr_throttled: u64,
    pub throttled_seconds: f64,
    /// CPU time of the whole tree.
    pub cpu_seconds: Option<f64>,
    /// Times a fork or clone failed at the pids limit, where the kernel counts them.
    pub pids_limit_hits: Option<u64>,
}

/// Parses `KEY VALUE` lines (memory.stat, cpu.stat, memory.events, oom_control).
pub fn parse_flat_keyed(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = it.next()?.parse().ok()?;
            Some((k.to_string(), v))
        })
        .collect()
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_keyed(path: &Path) -> BTreeMap<String, u64> {
    fs::read_to_string(path)
        .map(|t| parse_flat_keyed(&t))
        .unwrap_or_default()
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(io_err("write", path))
}

/// CPU numbers accepted in a CPU list: the kernel's own limit (`NR_CPUS`) is at most 8192.
pub const MAX_CPUS: u32 = 8192;

/// Parses a CPU list such as `0-3,6` into CPU numbers (each below [`MAX_CPUS`]).
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: u32 = a
            .trim()
            .parse()
            .map_err(|_| format!("'{part}' is not a CPU number or range"))?;
        let b: u32 = b
            .trim()
            .parse()
            .map_err(|_| format!("'{part}' is not a CPU number or range"))?;
        if b < a {
            return Err(format!("'{part}': range runs backwards"));
        }
        if b >= MAX_CPUS {
            return Err(format!(
                "'{part}': CPU {b} is beyond any machine (CPU numbers go below {MAX_CPUS})"
            ));
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(out)
}

/// One run's cgroup (one directory on v2, one per controller on v1).
#[derive(Debug)]
pub struct RunCgroup {
    hierarchy: Hierarchy,
    /// Directories created for this run, by controller (v2: one entry under Memory).
    dirs: BTreeMap<Controller, PathBuf>,
}

fn ensure_dir(dir: &Path) -> Result<(), CgroupError> {
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
                fs::create_dir(&dir).map_err(io_err("create", &dir))?;
                dirs.insert(Controller::Memory, dir.clone());
                let cg = RunCgroup {
                    hierarchy: h.clone(),
                    dirs,
                };
                if let Err(e) = cg.apply_v2(&dir, limits) {
                    cg.remove();
                    return Err(e);
                }
                Ok(cg)
            }
            Hierarchy::V1 { bases } => {
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
                    fs::create_dir(&dir).map_err(io_err("create", &dir))?;
                    dirs.insert(*c, dir);
                }
                let cg = RunCgroup {
                    hierarchy: h.clone(),
                    dirs,
                };
                if let Err(e) = cg.apply_v1(limits) {
                    cg.remove();
                    return Err(e);
                }
                Ok(cg)
            }
        }
    }

    fn apply_v2(&self, dir: &Path, l: &Limits) -> Result<(), CgroupError> {
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

    fn apply_v1(&self, l: &Limits) -> Result<(), CgroupError> {
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
    pub fn open_procs_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
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
    pub fn main_dir(&self) -> &Path {
        self.dirs
            .get(&Controller::Memory)
            .or_else(|| self.dirs.values().next())
            .map(PathBuf::as_path)
            .unwrap_or(Path::new("/"))
    }

    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.dirs.values().map(PathBuf::as_path)
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
        }
    }

    /// Kills every process in the group and waits (up to `wait`) until it is empty.
    pub fn kill_all(&self, wait: Duration) -> bool {
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

/// Reads one run's cgroup files: the figures a probe samples and reports. It owns
/// nothing: the [`RunCgroup`] it came from creates, kills and removes the group.
#[derive(Debug, Clone)]
pub struct CgroupReader {
    hierarchy: Hierarchy,
    dirs: BTreeMap<Controller, PathBuf>,
    figures: CgroupFigures,
    /// `memory.stat`, kept open: it is read on the run's clock.
    stat: crate::linux::kept::KeptSlot,
}

impl CgroupReader {
    fn main_dir(&self) -> &Path {
        self.dirs
            .get(&Controller::Memory)
            .or_else(|| self.dirs.values().next())
            .map(PathBuf::as_path)
            .unwrap_or(Path::new("/"))
    }

    fn dir_of(&self, c: Controller) -> Option<&Path> {
        match self.hierarchy {
            Hierarchy::V2 { .. } => Some(self.main_dir()),
            Hierarchy::V1 { .. } => self.dirs.get(&c).map(PathBuf::as_path),
        }
    }

    /// Reads memory.stat; keeps the largest anon and page-cache figures seen.
    pub fn sample(&mut self) {
        let v2 = matches!(self.hierarchy, Hierarchy::V2 { .. });
        let Some(d) = self
            .dir_of(Controller::Memory)
            .map(|d| d.join("memory.stat"))
        else {
            return;
        };
        let stat = self
            .stat
            .read(&d)
            .map(|t| parse_flat_keyed(&String::from_utf8_lossy(t)))
            .unwrap_or_default();
        let (anon, file) = if v2 {
            (stat.get("anon"), stat.get("file"))
        } else {
            (stat.get("rss"), stat.get("cache"))
        };
        self.figures.anon_peak_bytes = self.figures.anon_peak_bytes.max(anon.copied().unwrap_or(0));
        self.figures.file_peak_bytes = self.figures.file_peak_bytes.max(file.copied().unwrap_or(0));
    }

    /// The kernel's figures for the run so far.
    pub fn figures(&mut self) -> CgroupFigures {
        self.sample();
        let mut f = self.figures.clone();
        match self.hierarchy {
            Hierarchy::V2 { .. } => {
                let d = self.main_dir();
                f.peak_bytes = read_u64(&d.join("memory.peak"));
                f.oom_kills = read_keyed(&d.join("memory.events"))
                    .get("oom_kill")
                    .copied()
                    .unwrap_or(0);
                let cpu = read_keyed(&d.join("cpu.stat"));
                f.nr_throttled = cpu.get("nr_throttled").copied().unwrap_or(0);
                f.throttled_seconds = cpu.get("throttled_usec").copied().unwrap_or(0) as f64 / 1e6;
                f.cpu_seconds = cpu.get("usage_usec").map(|u| *u as f64 / 1e6);
                f.pids_limit_hits = read_keyed(&d.join("pids.events")).get("max").copied();
            }
            Hierarchy::V1 { .. } => {
                if let Some(d) = self.dir_of(Controller::Memory) {
                    f.peak_bytes = read_u64(&d.join("memory.max_usage_in_bytes"));
                    f.oom_kills = read_keyed(&d.join("memory.oom_control"))
                        .get("oom_kill")
                        .copied()
                        .unwrap_or(0);
                }
                if let Some(d) = self.dir_of(Controller::Cpu) {
                    let cpu = read_keyed(&d.join("cpu.stat"));
                    f.nr_throttled = cpu.get("nr_throttled").copied().unwrap_or(0);
                    f.throttled_seconds =
                        cpu.get("throttled_time").copied().unwrap_or(0) as f64 / 1e9;
                }
                if let Some(d) = self.dir_of(Controller::Cpuacct) {
                    f.cpu_seconds = read_u64(&d.join("cpuacct.usage")).map(|ns| ns as f64 / 1e9);
                }
                if let Some(d) = self.dir_of(Controller::Pids) {
                    f.pids_limit_hits = read_keyed(&d.join("pids.events")).get("max").copied();
                }
            }
        }
        f
    }
}

impl Drop for RunCgroup {
    /// Nothing of a run outlives it: whatever is left is killed and the group removed.
    fn drop(&mut self) {
        self.kill_all(Duration::from_secs(2));
        self.remove();
    }
}

fn enable_line(dir: &Path, want: &[&str]) -> String {
    let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    want.iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn read_pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn kill_group(h: &Hierarchy, dirs: &BTreeMap<Controller, PathBuf>, wait: Duration) -> bool {
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

fn signal_all(pids: &[i32]) {
    for p in pids {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(*p, libc::SIGKILL);
        }
    }
}

/// Joins the calling process to the cgroups whose `cgroup.procs` files are open.
/// Only async-signal-safe calls: meant for `pre_exec`.
pub fn join_self(fds: &[OwnedFd]) -> io::Result<()> {
    for fd in fds {
        // SAFETY: writing a static buffer to an open descriptor.
        let r = unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        if r != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The name of this memtrial's group for the run at schedule position `seq`:
/// `<pid>-<start time>-<seq>`. The owner's PID with its start time (clock ticks since boot,
/// field 22 of `/proc/PID/stat`) names one process for good: a PID reused later has
/// another start time, and a renamed or symlinked binary does not matter.
pub fn run_group_name(seq: u32) -> String {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let pid = std::process::id() as i32;
    let start = *START.get_or_init(|| {
        crate::linux::proc::read_stat(pid)
            .map(|s| s.starttime_ticks)
            .unwrap_or(0)
    });
    format!("{pid}-{start}-{seq}")
}

/// Who made a group, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOwner {
    pub pid: i32,
    /// Absent in names made by memtrial 0.1 (`<pid>-<seq>`).
    pub start: Option<u64>,
}

/// The group of run `seq`'s hook or driver (`kind`: `before` or `driver`):
/// `<pid>-<start time>-<seq>-<kind>`, owned like the run's own (see [`run_group_name`]).
pub fn helper_group_name(seq: u32, kind: &str) -> String {
    format!("{}-{kind}", run_group_name(seq))
}

/// Parses `<pid>-<start>-<seq>`, `<pid>-<start>-<seq>-before|driver` (a helper's group)
/// or the older `<pid>-<seq>`; `None` for other names.
pub fn group_owner(name: &str) -> Option<GroupOwner> {
    let parts: Vec<&str> = name.split('-').collect();
    let num = |s: &str| s.parse::<u64>().ok();
    match parts.as_slice() {
        [pid, start, seq] | [pid, start, seq, "before" | "driver"] => {
            num(seq)?;
            Some(GroupOwner {
                pid: pid.parse().ok()?,
                start: Some(num(start)?),
            })
        }
        [pid, seq] => {
            num(seq)?;
            Some(GroupOwner {
                pid: pid.parse().ok()?,
                start: None,
            })
        }
        _ => None,
    }
}

/// The owner still runs: its PID is alive with the recorded start time. For an older
/// name without a start time, any live process with that PID counts (never kill a group
/// that might still be in use).
pub fn owner_alive(o: GroupOwner) -> bool {
    match crate::linux::proc::read_stat(o.pid) {
        Ok(st) => o.start.is_none_or(|s| s == st.starttime_ticks),
        Err(_) => false,
    }
}

/// Every `memtrial` directory of the machine's cgroup mounts, by controller: memtrials
/// started in other cgroups than this one keep their groups there.
fn memtrial_bases(h: &Hierarchy) -> Vec<(Controller, PathBuf)> {
    let mut bases: Vec<(Controller, PathBuf)> = match h {
        Hierarchy::V2 { base, .. } => vec![(Controller::Memory, base.clone())],
        Hierarchy::V1 { bases } => bases.iter().map(|(c, p)| (*c, p.clone())).collect(),
    };
    let mounts = fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default();
    for m in mounts {
        let controllers: Vec<Controller> = match h {
            Hierarchy::V2 { .. } if m.v2 => vec![Controller::Memory],
            Hierarchy::V1 { .. } if !m.v2 => Controller::ALL
                .into_iter()
                .filter(|c| m.controllers.iter().any(|x| x == c.name()))
                .collect(),
            _ => continue,
        };
        for dir in find_dirs_named(&m.mount_point, "memtrial") {
            for c in &controllers {
                if !bases.iter().any(|(bc, bp)| bc == c && *bp == dir) {
                    bases.push((*c, dir.clone()));
                }
            }
        }
    }
    bases
}

/// Directories called `name` under `root`, breadth first, bounded (depth 8, 20,000
/// directories) so that a huge tree cannot stall start-up; not below a match.
fn find_dirs_named(root: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut queue = std::collections::VecDeque::from([(root.to_path_buf(), 0u32)]);
    let mut visited = 0;
    while let Some((dir, depth)) = queue.pop_front() {
        visited += 1;
        if visited > 20_000 {
            break;
        }
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == name {
                found.push(e.path());
            } else if depth < 8 {
                queue.push_back((e.path(), depth + 1));
            }
        }
    }
    found
}

/// Removes groups left by memtrials that died without cleaning up, wherever on the
/// machine's cgroup mounts they were started: groups whose owner (PID and start time,
/// see [`run_group_name`]) no longer runs. Returns what was removed.
pub fn clean_stale(h: &Hierarchy) -> Vec<PathBuf> {
    // Group names across controllers: kill through all of a name's dirs at once.
    let mut stale: BTreeMap<String, BTreeMap<Controller, PathBuf>> = BTreeMap::new();
    for (c, base) in memtrial_bases(h) {
        let Ok(rd) = fs::read_dir(&base) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.path().is_dir() {
                continue;
            }
            let Some(owner) = group_owner(&name) else {
                continue;
            };
            if owner_alive(owner) {
                continue;
            }
            stale.entry(name).or_default().insert(c, e.path());
        }
    }
    let mut removed = Vec::new();
    for (_, dirs) in stale {
        kill_group(h, &dirs, Duration::from_secs(2));
        for d in dirs.values() {
            if fs::remove_dir(d).is_ok() {
                removed.push(d.clone());
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = include_str!("../../tests/fixtures/cgroup/mountinfo_v1_hybrid.txt");
    const MOUNTINFO_V2: &str = "24 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n\
        29 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";

    #[test]
    fn group_names_carry_their_owner() {
        let name = run_group_name(7);
        let o = group_owner(&name).unwrap();
        assert_eq!(o.pid, std::process::id() as i32);
        assert!(o.start.is_some_and(|s| s > 0), "{name}");
        assert!(owner_alive(o), "this process owns {name}");
        // The same PID with another start time is a reused PID: not the owner.
        let reused = GroupOwner {
            start: o.start.map(|s| s + 1),
            ..o
        };
        assert!(!owner_alive(reused));
        assert_eq!(
            group_owner("123-4"),
            Some(GroupOwner {
                pid: 123,
                start: None
            })
        );
        assert_eq!(group_owner("memtrial"), None);
        assert_eq!(group_owner("1-2-x"), None);
        // A hook's or driver's group is owned like the run's.
        assert_eq!(group_owner(&helper_group_name(7, "driver")), Some(o));
        assert_eq!(group_owner(&helper_group_name(7, "before")), Some(o));
        assert_eq!(group_owner("1-2-3-other"), None);
    }

    #[test]
    fn v1_hybrid_nests_under_our_own_groups() {
        let own = "4:memory:/process_api/abc\n3:cpuset:/\n1:cpu:/\n2:cpuacct:/\n8:pids:/\n6:freezer:/\n0::/\n";
        let h = hierarchy_from(MOUNTINFO_V1, own).unwrap();
        let Hierarchy::V1 { bases } = &h else {
            panic!("{h:?}")
        };
        assert_eq!(
            bases[&Controller::Memory],
            PathBuf::from("/sys/fs/cgroup/memory/process_api/abc/memtrial")
        );
        assert_eq!(
            bases[&Controller::Cpu],
            PathBuf::from("/sys/fs/cgroup/cpu/memtrial")
        );
        assert_eq!(bases.len(), 6);
        assert_eq!(h.version(), 1);
    }

    #[test]
    fn v2_goes_under_the_root() {
        let h = hierarchy_from(
            MOUNTINFO_V2,
            "0::/user.slice/user-1000.slice/session-2.scope\n",
        )
        .unwrap();
        assert_eq!(
            h,
            Hierarchy::V2 {
                mount: "/sys/fs/cgroup".into(),
                base: "/sys/fs/cgroup/memtrial".into()
            }
        );
    }

    #[test]
    fn no_cgroups() {
        assert!(matches!(
            hierarchy_from("29 1 8:1 / / rw - ext4 /dev/sda1 rw\n", "0::/\n"),
            Err(CgroupError::NotMounted)
        ));
    }

    #[test]
    fn keyed_files() {
        let v1_oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_flat_keyed(v1_oom)["oom_kill"], 3);
        let v2_cpu = "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 12\nthrottled_usec 800000\n";
        let m = parse_flat_keyed(v2_cpu);
        assert_eq!(m["nr_throttled"], 12);
        assert_eq!(m["throttled_usec"], 800_000);
        let v2_events = "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_flat_keyed(v2_events)["oom_kill"], 1);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), [0, 1, 2, 5]);
        assert_eq!(parse_cpu_list("1").unwrap(), [1]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    /// The v2 code path on a real cgroup2 mount: on a hybrid machine the unified tree has no
    /// controllers, but creating a group, joining it before exec, listing, `cgroup.kill`
    /// and removal are core v2 features and work there.
    #[test]
    fn v2_lifecycle_on_a_real_unified_mount() {
        use std::os::unix::process::CommandExt;
        // SAFETY: geteuid has no preconditions.
        let root = || unsafe { libc::geteuid() } == 0;
        if !crate::testing::require("root", "run the tests as root", root) {
            return;
        }
        let mi = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let v2 = parse_mountinfo(&mi).into_iter().find(|m| m.v2);
        let how = "a kernel with a cgroup2 mount (hybrid or unified)";
        if !crate::testing::require("a cgroup2 mount", how, || v2.is_some()) {
            return;
        }
        let m = v2.expect("checked above");
        let h = Hierarchy::V2 {
            base: m.mount_point.join("memtrial-selftest"),
            mount: m.mount_point.clone(),
        };
        let name = format!("{}-v2test", std::process::id());
        let cg = match RunCgroup::create(&h, &name, &Limits::default()) {
            Ok(cg) => cg,
            Err(e) => {
                let what = format!("a v2 group it can create ({e})");
                crate::testing::require(&what, "a writable cgroup2 mount", || false);
                return;
            }
        };
        let fds = cg.open_procs_files().unwrap();
        let mut child = unsafe {
            std::process::Command::new("sleep")
                .arg("30")
                .pre_exec(move || join_self(&fds))
                .spawn()
                .unwrap()
        };
        assert_eq!(cg.procs(), vec![child.id() as i32]);
        assert!(
            cg.kill_all(Duration::from_secs(2)),
            "cgroup.kill empties the group"
        );
        let status = child.wait().unwrap();
        assert!(!status.success());
        let dir = cg.main_dir().to_path_buf();
        drop(cg);
        assert!(!dir.exists(), "removed");
        let _ = fs::remove_dir(m.mount_point.join("memtrial-selftest"));
    }

    #[test]
    fn proc_cgroup_lines() {
        let v = parse_proc_cgroup("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/x\n");
        assert_eq!(v[0], ("memory".to_string(), "/a/b".to_string()));
        assert_eq!(v[1].0, "cpu,cpuacct");
        assert_eq!(v[2], (String::new(), "/x".to_string()));
    }
}
