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
            let notes = cgroup::clean_stale(&h)
                .into_iter()
                .map(|p| {
                    format!(
                        "removed a cgroup left by an earlier memtrial that died: {}",
                        p.display()
                    )
                })
                .collect();
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
