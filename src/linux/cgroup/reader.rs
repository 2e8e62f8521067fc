//! Reading one run's cgroup: the peaks sampled on the run's clock and the kernel's own
//! figures at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::*;

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
    /// Largest sampled working set: usage less inactive page cache (v2 `memory.current` −
    /// `inactive_file`, v1 `memory.usage_in_bytes` − `total_inactive_file`), what the
    /// kubelet evicts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_peak_bytes: Option<u64>,
}
/// Reads one run's cgroup files: the figures a probe samples and reports. It owns
/// nothing: the [`RunCgroup`] it came from creates, kills and removes the group.
#[derive(Debug, Clone)]
pub struct CgroupReader {
    pub(super) hierarchy: Hierarchy,
    pub(super) dirs: BTreeMap<Controller, PathBuf>,
    pub(super) figures: CgroupFigures,
    /// `memory.stat`, kept open: it is read on the run's clock.
    pub(super) stat: crate::linux::kept::KeptSlot,
    /// `memory.current` (v2) or `memory.usage_in_bytes` (v1), kept open likewise.
    pub(super) usage: crate::linux::kept::KeptSlot,
    /// The working set of the latest [`CgroupReader::sample`].
    pub(super) working_set: Option<u64>,
}
impl CgroupReader {
    pub(super) fn main_dir(&self) -> &Path {
        self.dirs
            .get(&Controller::Memory)
            .or_else(|| self.dirs.values().next())
            .map(PathBuf::as_path)
            .unwrap_or(Path::new("/"))
    }

    pub(super) fn dir_of(&self, c: Controller) -> Option<&Path> {
        match self.hierarchy {
            Hierarchy::V2 { .. } => Some(self.main_dir()),
            Hierarchy::V1 { .. } => self.dirs.get(&c).map(PathBuf::as_path),
        }
    }

    /// The memory controller's directory and the hierarchy's version.
    pub fn memory_group(&self) -> Option<(PathBuf, Version)> {
        let dir = self.dir_of(Controller::Memory)?.to_path_buf();
        Some(match self.hierarchy {
            Hierarchy::V2 { .. } => (dir, Version::V2),
            Hierarchy::V1 { .. } => (dir, Version::V1),
        })
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
        let (anon, file, inactive) = if v2 {
            (
                stat.get("anon"),
                stat.get("file"),
                stat.get("inactive_file"),
            )
        } else {
            (
                stat.get("rss"),
                stat.get("cache"),
                stat.get("total_inactive_file"),
            )
        };
        let usage_file = d.with_file_name(if v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        });
        let usage = self
            .usage
            .read(&usage_file)
            .ok()
            .and_then(|t| String::from_utf8_lossy(t).trim().parse::<u64>().ok());
        if let (Some(u), Some(i)) = (usage, inactive) {
            let ws = u.saturating_sub(*i);
            self.working_set = Some(ws);
            self.figures.working_set_peak_bytes = self.figures.working_set_peak_bytes.max(Some(ws));
        }
        self.figures.anon_peak_bytes = self.figures.anon_peak_bytes.max(anon.copied().unwrap_or(0));
        self.figures.file_peak_bytes = self.figures.file_peak_bytes.max(file.copied().unwrap_or(0));
    }

    /// The working set at the latest [`CgroupReader::sample`] (None before one, or when
    /// the kernel gave no usage).
    pub fn working_set_now(&self) -> Option<u64> {
        self.working_set
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
