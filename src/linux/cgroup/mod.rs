//! Control groups, v1, v2 and hybrid: one fresh cgroup per run, with container-like
//! limits, the kernel's figures for the whole tree, and a teardown that leaves nothing.
//!
//! `mounts.rs` is the one reading of mountinfo and `/proc/PID/cgroup`; `run.rs` makes,
//! kills and removes a run's group; `reader.rs` reads its figures; `stale.rs` names
//! memtrial's groups and removes those left by a memtrial that died; `container.rs` reads
//! the limits of any process's cgroup, read-only; here, the layout memtrial's groups go in
//! (v1, v2, hybrid), limits and the flat-keyed and CPU-list parsers.

pub mod container;
mod delegated;
mod mounts;
mod reader;
mod run;
mod stale;

pub use delegated::{claim_delegated, ready_for_root, HOW_TO_DELEGATE};
pub use mounts::*;
pub use reader::*;
pub use run::*;
pub use stale::*;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

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
    #[error("cannot read /proc/self/cgroup: {0}")]
    Membership(MembershipError),
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
    pub(crate) const ALL: [Controller; 6] = [
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

    /// What the kernel cannot give for this layout, said once in the record: on v2 a
    /// group's own memory high-water mark (`memory.peak`) exists from Linux 5.19 on.
    /// `kernel` is a release as `uname -r` prints it.
    pub fn missing_figures(&self, kernel: &str) -> Option<String> {
        let Hierarchy::V2 { .. } = self else {
            return None;
        };
        let mut parts = kernel.trim().split(['.', '-']);
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        ((major, minor) < (5, 19)).then(|| {
            format!(
                "kernel {} keeps no memory.peak for a cgroup v2 group (Linux 5.19 added it): the cgroup peak is not measured; peak RSS (wait4, VmHWM) and the sampled anon and file peaks are",
                kernel.trim()
            )
        })
    }

    pub fn version(&self) -> u8 {
        match self {
            Hierarchy::V2 { .. } => 2,
            Hierarchy::V1 { .. } => 1,
        }
    }
}

/// Decides the layout from mount and membership text (pure, for tests).
pub fn hierarchy_from(mountinfo: &str, self_cgroup: &str) -> Result<Hierarchy, CgroupError> {
    let mounts = parse_mountinfo(mountinfo);
    let membership = parse_proc_cgroup(self_cgroup).map_err(CgroupError::Membership)?;
    let v1: Vec<&CgroupMount> = mounts
        .iter()
        .filter(|m| !m.is_v2() && !m.controllers.is_empty())
        .collect();
    let has_v1_memory = v1
        .iter()
        .any(|m| m.controllers.iter().any(|c| c == "memory"));
    if !has_v1_memory {
        if let Some(m) = mounts.iter().find(|m| m.is_v2()) {
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
            .find(|l| l.controllers.iter().any(|x| x == c.name()))
            .map(|l| l.path.as_str())
            .unwrap_or("/");
        let dir = m
            .dir_of(own)
            .unwrap_or_else(|| m.mount_point.join(own.trim_start_matches('/')));
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
pub(crate) const MAX_CPUS: u32 = 8192;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MOUNTINFO_V1: &str =
        include_str!("../../../tests/fixtures/cgroup/mountinfo_v1_hybrid.txt");
    const MOUNTINFO_V2: &str = "24 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n\
        29 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";

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

    /// mountinfo and membership are read by the same parsers as `container` uses: a mount
    /// whose path holds an escaped space is found, and a membership that is not
    /// `ID:CONTROLLERS:PATH` is an error that names the line, not a silent "/".
    #[test]
    fn one_reading_of_mounts_and_membership() {
        let mi = "35 31 0:32 / /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup rw,memory\n";
        let Ok(Hierarchy::V1 { bases }) = hierarchy_from(mi, "4:memory:/svc\n") else {
            panic!("a v1 layout")
        };
        assert_eq!(
            bases[&Controller::Memory],
            Path::new("/sys/fs/cgroup/mem ory/svc/memtrial")
        );
        let e = hierarchy_from(mi, "memory:/svc\n").unwrap_err();
        assert!(matches!(e, CgroupError::Membership(_)), "{e}");
        assert!(e.to_string().contains("memory:/svc"), "{e}");
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
    fn memory_peak_missing_before_5_19_on_v2_only() {
        let v2 = Hierarchy::V2 {
            mount: "/sys/fs/cgroup".into(),
            base: "/sys/fs/cgroup/memtrial".into(),
        };
        let note = v2.missing_figures("5.15.0-91-generic").unwrap();
        assert!(
            note.contains("memory.peak") && note.contains("5.15.0-91-generic"),
            "{note}"
        );
        assert_eq!(v2.missing_figures("5.19.0"), None);
        assert_eq!(v2.missing_figures("6.1.0-50-amd64\n"), None);
        assert_eq!(v2.missing_figures("garbage"), None);
        let v1 = Hierarchy::V1 {
            bases: BTreeMap::new(),
        };
        assert_eq!(v1.missing_figures("4.19.0"), None);
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
        let v2 = parse_mountinfo(&mi).into_iter().find(|m| m.is_v2());
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
        // SAFETY: the pre_exec closure only writes "0" (the calling process) to descriptors opened
        // before the fork (join_self): no allocation, no lock, async-signal-safe.
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
}
