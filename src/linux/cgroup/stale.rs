//! Names of memtrial's groups (the owner's PID and start time in them), and the removal
//! of groups left by a memtrial that died.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

/// The name of this memtrial's group for the run at schedule position `seq`:
/// `<pid>-<start time>-<seq>`. The owner's PID with its start time (clock ticks since boot,
/// field 22 of `/proc/PID/stat`) names one process for good: a PID reused later has
/// another start time, and a renamed or symlinked binary does not matter.
pub(crate) fn run_group_name(seq: u32) -> String {
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
pub(crate) fn helper_group_name(seq: u32, kind: &str) -> String {
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
pub(super) fn memtrial_bases(h: &Hierarchy) -> Vec<(Controller, PathBuf)> {
    let mut bases: Vec<(Controller, PathBuf)> = match h {
        Hierarchy::V2 { base, .. } => vec![(Controller::Memory, base.clone())],
        Hierarchy::V1 { bases } => bases.iter().map(|(c, p)| (*c, p.clone())).collect(),
    };
    let mounts = fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default();
    for m in mounts {
        let controllers: Vec<Controller> = match h {
            Hierarchy::V2 { .. } if m.is_v2() => vec![Controller::Memory],
            Hierarchy::V1 { .. } if !m.is_v2() => Controller::ALL
                .into_iter()
                .filter(|c| m.controllers.iter().any(|x| x == c.name()))
                .collect(),
            _ => continue,
        };
        if controllers.is_empty() {
            // A named v1 hierarchy (name=systemd) or one of controllers memtrial never uses.
            continue;
        }
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
pub(super) fn find_dirs_named(root: &Path, name: &str) -> Vec<PathBuf> {
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
