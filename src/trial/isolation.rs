//! Where runs are isolated, decided once per command: a fresh cgroup per run where one
//! can be had (as root, or in a group delegated to this user), else none — and then limits
//! cannot be honoured, which is an error, never a silent no-op.

use crate::linux::cgroup;
use crate::plan::Limits;

use super::Isolation;

/// The isolation runs get, with the notes the user should read (stale groups removed,
/// or what is lost without a cgroup); `Err` names why limits cannot be honoured.
pub fn choose_isolation(limits: &Limits) -> Result<(Isolation, Vec<String>), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let found = if root {
        cgroup::detect()
            .map_err(|e| format!("no usable cgroup: {e}"))
            .and_then(cgroup::ready_for_root)
    } else {
        cgroup::claim_delegated().map_err(|why| {
            format!(
                "not running as root, and {why}; {}",
                cgroup::HOW_TO_DELEGATE
            )
        })
    };
    let reason = match found {
        Ok(h) => {
            let notes = cleaning_notes(&cgroup::clean_stale(&h));
            return Ok((Isolation::Cgroup(h), notes));
        }
        Err(reason) => reason,
    };
    if limits.any() {
        return Err(format!("--memory-limit, --cpus, --cpuset and --pids-limit need a cgroup, and there is none: {reason}"));
    }
    let note = format!(
        "runs are not isolated in cgroups: without one, memtrial cannot apply limits, see OOM kills, measure the whole tree's cgroup peak and CPU throttling, or kill a run's whole tree at once (it stops the workload's process group and the descendants it has seen); {reason}"
    );
    Ok((Isolation::None { reason }, vec![note]))
}

/// What the start-up's cleaning did, said: each stale group removed, and the groups that
/// may be stale but were left alone, with why and what the user can do.
fn cleaning_notes(c: &cgroup::Cleaned) -> Vec<String> {
    use cgroup::LeftWhy;
    let mut notes: Vec<String> = c
        .removed
        .iter()
        .map(|p| {
            format!(
                "removed a cgroup left by an earlier memtrial that died: {}",
                p.display()
            )
        })
        .collect();
    let shown = |why: &dyn Fn(&LeftWhy) -> bool| -> Option<String> {
        let dirs: Vec<String> = c
            .left
            .iter()
            .filter(|l| why(&l.why))
            .map(|l| l.dir.display().to_string())
            .collect();
        let more = dirs.len().saturating_sub(3);
        (!dirs.is_empty()).then(|| {
            let mut s = dirs[..dirs.len().min(3)].join(", ");
            if more > 0 {
                s += &format!(" and {more} more");
            }
            s
        })
    };
    if let Some(dirs) = shown(&|w| *w == LeftWhy::OlderName) {
        notes.push(format!(
            "left in place cgroup(s) an older memtrial made, whose owner cannot be checked (their name holds a PID of some PID namespace, and no process here is that owner; it may run in a container or on its host): {dirs}; once no memtrial older than this one runs, kill the processes in each group's cgroup.procs and remove the group with rmdir"
        ));
    }
    if let Some(dirs) = shown(&|w| *w == LeftWhy::OutOfSight) {
        notes.push(format!(
            "left in place cgroup(s) of a memtrial that died, whose processes run outside this PID namespace (cgroup v1 kills a group only by its PIDs): {dirs}; the next memtrial started where they are seen (e.g. on the host) removes them"
        ));
    }
    for l in &c.left {
        if let LeftWhy::Failed(why) = &l.why {
            notes.push(format!(
                "left in place a cgroup that may be stale: {}: {why}",
                l.dir.display()
            ));
        }
    }
    notes
}
