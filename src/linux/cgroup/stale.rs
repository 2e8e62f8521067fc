//! Who owns memtrial's groups, and the removal of groups left by a memtrial that died.
//!
//! A group's owner is the memtrial that holds an exclusive `flock` on the group's
//! directory (each of its directories on v1) from the moment it makes the group until it
//! has removed it. A lock is a kernel object of the directory, not of a PID namespace: a
//! memtrial in a container (its own PID namespace, the same cgroup tree) and one on the
//! host see each other's locks, where a PID in a group's name names another process, or
//! none, on the other side. The kernel drops the lock when its holder dies (SIGKILL, OOM
//! kill, a reboot), so a group whose lock is free belongs to nobody: it is stale.
//!
//! The name still says who made it, for people and for a second check in the same PID
//! namespace: `n<pid namespace>-<pid>-<start time>-<seq>`. Names of older memtrials
//! (`<pid>-<start>-<seq>`, `<pid>-<seq>`) carry a PID of some namespace and no lock: such a
//! group is left alone unless its owner is seen alive here, and the user is told.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

/// The PID namespace this process lives in (the inode of `/proc/self/ns/pid`), 0 when it
/// cannot be read.
fn own_pid_ns() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        fs::metadata("/proc/self/ns/pid")
            .map(|m| m.ino())
            .unwrap_or(0)
    })
}

/// The name of this memtrial's group for the run at schedule position `seq`:
/// `n<pid namespace>-<pid>-<start time>-<seq>`. The owner's PID with its start time (clock
/// ticks since boot, field 22 of `/proc/PID/stat`) in its PID namespace names one process
/// for good: a PID reused later has another start time, and a renamed or symlinked binary
/// does not matter. Who owns the group is the lock on it (see the module's notes).
pub(crate) fn run_group_name(seq: u32) -> String {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let pid = std::process::id() as i32;
    let start = *START.get_or_init(|| {
        crate::linux::proc::read_stat(pid)
            .map(|s| s.starttime_ticks)
            .unwrap_or(0)
    });
    format!("n{}-{pid}-{start}-{seq}", own_pid_ns())
}
/// Who made a group, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOwner {
    /// The PID namespace the owner lived in; absent in names of older memtrials, whose
    /// groups carry no lock.
    pub pid_ns: Option<u64>,
    pub pid: i32,
    /// Absent in names made by memtrial 0.1 (`<pid>-<seq>`).
    pub start: Option<u64>,
}
/// The group of run `seq`'s hook or driver (`kind`: `before` or `driver`):
/// `<run group>-<kind>`, owned like the run's own (see [`run_group_name`]).
pub(crate) fn helper_group_name(seq: u32, kind: &str) -> String {
    format!("{}-{kind}", run_group_name(seq))
}
/// Parses `n<ns>-<pid>-<start>-<seq>` (and `…-before|driver`, a helper's group), and
/// the older `<pid>-<start>-<seq>` (with its helpers' names) and `<pid>-<seq>`; `None`
/// for other names.
pub fn group_owner(name: &str) -> Option<GroupOwner> {
    let parts: Vec<&str> = name.split('-').collect();
    let num = |s: &str| s.parse::<u64>().ok();
    let (parts, helper) = match parts.as_slice() {
        [head @ .., "before" | "driver"] => (head, true),
        all => (all, false),
    };
    match parts {
        [ns, pid, start, seq] if ns.starts_with('n') => {
            num(seq)?;
            Some(GroupOwner {
                pid_ns: Some(num(&ns[1..])?),
                pid: pid.parse().ok()?,
                start: Some(num(start)?),
            })
        }
        [pid, start, seq] => {
            num(seq)?;
            Some(GroupOwner {
                pid_ns: None,
                pid: pid.parse().ok()?,
                start: Some(num(start)?),
            })
        }
        // memtrial 0.1 made no helper groups.
        [pid, seq] if !helper => {
            num(seq)?;
            Some(GroupOwner {
                pid_ns: None,
                pid: pid.parse().ok()?,
                start: None,
            })
        }
        _ => None,
    }
}
/// The owner is seen alive from here: it lived in this PID namespace (or its name is an
/// older one, which does not say) and its PID runs with the recorded start time. For a
/// name without a start time, any live process with that PID counts. `false` says
/// nothing about an owner of another PID namespace: only its lock does.
pub fn owner_alive(o: GroupOwner) -> bool {
    if o.pid_ns.is_some_and(|ns| ns != own_pid_ns()) {
        return false;
    }
    match crate::linux::proc::read_stat(o.pid) {
        Ok(st) => o.start.is_none_or(|s| s == st.starttime_ticks),
        Err(_) => false,
    }
}

/// How long the maker of a group waits for a lock someone else holds for a moment (a
/// cleaner looking whether the group is stale, or removing it as it was made).
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Takes `file`'s exclusive lock without waiting: `Ok(false)` when another holds it.
fn try_flock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor this process owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// `file` is still what `dir` names (a cleaner did not remove it in between).
fn same_dir(dir: &Path, file: &File) -> bool {
    match (fs::metadata(dir), file.metadata()) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Makes the group directory `dir` and takes its lock: the descriptor holds it, and the
/// group is this process's until the descriptor closes. A cleaner may find the directory
/// in the moment between `mkdir` and the lock, take it for stale and remove it (it is
/// empty then, so nothing is killed): that is seen here and the directory made again.
pub(super) fn make_owned_dir(dir: &Path) -> Result<OwnedFd, CgroupError> {
    let lock_err = |reason: io::Error| CgroupError::Io {
        action: "lock",
        path: dir.to_path_buf(),
        reason,
    };
    for _ in 0..3 {
        fs::create_dir(dir).map_err(io_err("create", dir))?;
        let file = File::open(dir).map_err(io_err("open", dir))?;
        let until = Instant::now() + LOCK_WAIT;
        while !try_flock(&file).map_err(lock_err)? {
            if Instant::now() >= until {
                return Err(lock_err(io::Error::other(
                    "another process holds the lock on the group this memtrial just made",
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if same_dir(dir, &file) {
            return Ok(OwnedFd::from(file));
        }
    }
    Err(lock_err(io::Error::other(
        "another memtrial removed it as it was made, three times",
    )))
}

/// What the lock of a group says.
enum Lock {
    /// Another process holds it: the group's owner runs (in whatever PID namespace).
    Held,
    /// Free, and now this process's (the descriptors hold it): nobody owns the group.
    Taken(Vec<File>),
    /// Not every directory could be opened or locked (the OS error): the owner is unknown.
    Unknown(String),
}

/// Tries the lock of every directory of a group (all or nothing).
fn take_lock(dirs: &BTreeMap<Controller, PathBuf>) -> Lock {
    let mut taken = Vec::new();
    for d in dirs.values() {
        let file = match File::open(d) {
            Ok(f) => f,
            // Removed meanwhile (by its owner as its run ended, or another cleaner).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Lock::Unknown(format!("cannot open {}: {e}", d.display())),
        };
        match try_flock(&file) {
            Ok(true) => taken.push(file),
            Ok(false) => return Lock::Held,
            Err(e) => return Lock::Unknown(format!("cannot lock {}: {e}", d.display())),
        }
    }
    if taken.is_empty() {
        return Lock::Held;
    }
    Lock::Taken(taken)
}

/// Whether the memtrial group at `dir` has a live owner: its lock is held (whatever PID
/// namespace the owner is in), or, for an older memtrial's name, its owner runs here.
/// For tests and tools that look at the groups on a machine.
pub fn group_alive(dir: &Path) -> bool {
    let Some(owner) = dir
        .file_name()
        .and_then(|n| group_owner(&n.to_string_lossy()))
    else {
        return false;
    };
    if owner.pid_ns.is_none() {
        return owner_alive(owner);
    }
    let dirs = BTreeMap::from([(Controller::Memory, dir.to_path_buf())]);
    !matches!(take_lock(&dirs), Lock::Taken(_))
}

/// Every `memtrial` directory of the machine's cgroup mounts, by controller, that this
/// memtrial could have made groups in (it may write there: as root on a read-write mount,
/// or a user's delegated group): memtrials started in other cgroups keep their groups
/// there.
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
            if !writable(&dir) {
                continue;
            }
            for c in &controllers {
                if !bases.iter().any(|(bc, bp)| bc == c && *bp == dir) {
                    bases.push((*c, dir.clone()));
                }
            }
        }
    }
    bases
}
/// This process may make and remove groups in `dir` (the kernel's own check).
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
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

/// Why a group that may be stale was left in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftWhy {
    /// An older memtrial's name: a PID of some PID namespace and no lock, and no process
    /// here is that owner. It may run in a container (or on its host).
    OlderName,
    /// Nobody holds its lock, but its processes are out of this PID namespace's sight
    /// and cgroup v1 can only kill a group by its PIDs.
    OutOfSight,
    /// Its owner could not be told, or it could not be removed (the OS error).
    Failed(String),
}

/// A group left in place, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub dir: PathBuf,
    pub why: LeftWhy,
}

/// What a start-up's cleaning did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Stale groups removed (their processes killed).
    pub removed: Vec<PathBuf>,
    /// Groups that may be stale, left in place.
    pub left: Vec<Left>,
}

/// Removes groups left by memtrials that died without cleaning up, wherever on the
/// machine's cgroup mounts this memtrial could have made them: groups whose lock nobody
/// holds (see the module's notes), whatever PID namespace their owner ran in. A group it
/// cannot prove stale (an older memtrial's name whose owner is not seen here; one whose
/// processes it cannot see to kill) is left alone, and returned with why.
pub fn clean_stale(h: &Hierarchy) -> Cleaned {
    let own_bases: Vec<PathBuf> = match h {
        Hierarchy::V2 { base, .. } => vec![base.clone()],
        Hierarchy::V1 { bases } => bases.values().cloned().collect(),
    };
    // Group names across controllers: judged and killed through all of a name's dirs.
    let mut found: BTreeMap<String, (GroupOwner, BTreeMap<Controller, PathBuf>)> = BTreeMap::new();
    let mut older: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (c, base) in memtrial_bases(h) {
        let Ok(rd) = fs::read_dir(&base) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Some(owner) = group_owner(&name) else {
                continue;
            };
            if owner.pid_ns.is_none() {
                // Only in this memtrial's own places: elsewhere it is no concern of its.
                if own_bases.contains(&base) && !owner_alive(owner) {
                    older.entry(name).or_insert_with(|| e.path());
                }
                continue;
            }
            found
                .entry(name)
                .or_insert_with(|| (owner, BTreeMap::new()))
                .1
                .insert(c, e.path());
        }
    }
    let mut out = Cleaned {
        left: older
            .into_values()
            .map(|dir| Left {
                dir,
                why: LeftWhy::OlderName,
            })
            .collect(),
        ..Cleaned::default()
    };
    for (owner, dirs) in found.into_values() {
        if owner_alive(owner) {
            continue;
        }
        let locks = match take_lock(&dirs) {
            Lock::Held => continue,
            Lock::Unknown(why) => {
                out.left.push(Left {
                    dir: main_of(&dirs),
                    why: LeftWhy::Failed(why),
                });
                continue;
            }
            Lock::Taken(locks) => locks,
        };
        kill_group(h, &dirs, Duration::from_secs(2));
        let mut failed = None;
        for d in dirs.values() {
            match remove_when_empty(d, Duration::from_secs(2)) {
                Ok(()) => out.removed.push(d.clone()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => failed = failed.or(Some((d.clone(), e))),
            }
        }
        if let Some((dir, e)) = failed {
            let pids = read_pids(&main_of(&dirs));
            let why = if pids.is_empty() && e.raw_os_error() == Some(libc::EBUSY) {
                LeftWhy::OutOfSight
            } else {
                LeftWhy::Failed(format!("cannot remove it: {e}"))
            };
            out.left.push(Left { dir, why });
        }
        drop(locks);
    }
    out
}

/// Removes the group `dir`, trying again for up to `wait` while the kernel says it is busy
/// although it lists no process: the killed processes are gone from `cgroup.procs` before
/// their exit is complete (their parent, the memtrial that died, no longer reaps them; on a
/// slow machine init does it a moment later), and a removal in between fails with EBUSY.
fn remove_when_empty(dir: &Path, wait: Duration) -> io::Result<()> {
    let until = Instant::now() + wait;
    loop {
        match fs::remove_dir(dir) {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY)
                    && read_pids(dir).is_empty()
                    && Instant::now() < until =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// The directory whose `cgroup.procs` lists a group's processes.
fn main_of(dirs: &BTreeMap<Controller, PathBuf>) -> PathBuf {
    dirs.get(&Controller::Memory)
        .or_else(|| dirs.values().next())
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_this_and_older_memtrials() {
        let name = run_group_name(7);
        assert!(name.starts_with('n'), "{name}");
        let o = group_owner(&name).unwrap();
        assert_eq!(o.pid, std::process::id() as i32);
        assert_eq!(o.pid_ns, Some(own_pid_ns()));
        assert!(o.start.is_some_and(|s| s > 0), "{name}");
        assert!(owner_alive(o), "this process owns {name}");
        // The same PID with another start time is a reused PID: not the owner.
        let reused = GroupOwner {
            start: o.start.map(|s| s + 1),
            ..o
        };
        assert!(!owner_alive(reused));
        // An owner of another PID namespace is never judged by its PID here.
        let elsewhere = GroupOwner {
            pid_ns: Some(own_pid_ns() + 1),
            ..o
        };
        assert!(!owner_alive(elsewhere));
        assert_eq!(group_owner(&helper_group_name(7, "driver")), Some(o));
        assert_eq!(group_owner(&helper_group_name(7, "before")), Some(o));
        // Older names: no namespace, no lock.
        assert_eq!(
            group_owner("123-4"),
            Some(GroupOwner {
                pid_ns: None,
                pid: 123,
                start: None
            })
        );
        assert_eq!(
            group_owner("123-456-4-driver"),
            Some(GroupOwner {
                pid_ns: None,
                pid: 123,
                start: Some(456)
            })
        );
        for other in [
            "memtrial",
            "1-2-x",
            "1-2-3-other",
            "n-1-2-3",
            "x1-2-3-4",
            "1-driver",
        ] {
            assert_eq!(group_owner(other), None, "{other}");
        }
    }
}
