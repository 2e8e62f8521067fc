//! Many processes at once: a process and its descendants (`--tree`), and the largest
//! processes of the machine (`--top N`).
//!
//! Processes come from `/proc/*/stat`; a process may exit between any two reads, and
//! another user's `smaps_rollup` may be refused. Neither stops the scan: an exited
//! process is left out and counted, an unreadable PSS is `None` and counted.

use serde::Serialize;

use super::arenas::Method;
use super::InspectError;
use crate::linux::proc::{self, ProcError, Stat};

/// One process of a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub threads: u64,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    pub swap_bytes: u64,
}

/// Sums over a process and its descendants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tree {
    pub root: i32,
    pub processes: u64,
    pub threads: u64,
    /// Summed RSS: double-counts pages shared between the processes (copy-on-write
    /// after fork, shared libraries). PSS is the figure to add up.
    pub rss_bytes: u64,
    /// Summed PSS over the processes whose `smaps_rollup` was readable.
    pub pss_bytes: u64,
    pub uss_bytes: u64,
    pub swap_bytes: u64,
    /// Processes whose PSS/USS could not be read (permission); their RSS is summed.
    pub pss_unreadable: u64,
    /// Descendants that exited during the scan.
    pub exited: u64,
    pub members: Vec<Member>,
}

/// The stat of every process now (threads excluded); unreadable ones skipped.
fn all_stats() -> Result<Vec<Stat>, InspectError> {
    let pids = proc::list_pids().map_err(InspectError::Proc)?;
    Ok(pids
        .into_iter()
        .filter_map(|p| proc::read_stat(p).ok())
        .collect())
}

/// The PIDs of `root` and its descendants, parents before children, from a
/// snapshot of (pid, ppid) pairs.
pub fn descendants(root: i32, pairs: &[(i32, i32)]) -> Vec<i32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        let mut kids: Vec<i32> = pairs
            .iter()
            .filter(|(pid, ppid)| *ppid == parent && *pid != parent)
            .map(|(pid, _)| *pid)
            .collect();
        kids.sort_unstable();
        for k in kids {
            if !out.contains(&k) {
                out.push(k);
            }
        }
        i += 1;
    }
    out
}

/// One process's figures; `None` when it has exited (or is a zombie).
fn member(pid: i32) -> Option<Member> {
    let stat = proc::read_stat(pid).ok()?;
    if stat.state == 'Z' {
        return None;
    }
    let status = proc::read_status(pid).ok()?;
    let rollup = proc::read_smaps_rollup(pid).ok();
    Some(Member {
        pid,
        ppid: stat.ppid,
        comm: stat.comm,
        threads: status.threads,
        rss_bytes: status.vm_rss,
        pss_bytes: rollup.as_ref().map(|r| r.pss),
        uss_bytes: rollup.as_ref().map(|r| r.uss),
        swap_bytes: status.vm_swap,
    })
}

/// Sums over `root` and its descendants (by PPid, from one snapshot of `/proc`).
pub fn tree(root: i32) -> Result<Tree, InspectError> {
    let stats = all_stats()?;
    let pairs: Vec<(i32, i32)> = stats.iter().map(|s| (s.pid, s.ppid)).collect();
    let pids = descendants(root, &pairs);
    let mut t = Tree {
        root,
        processes: 0,
        threads: 0,
        rss_bytes: 0,
        pss_bytes: 0,
        uss_bytes: 0,
        swap_bytes: 0,
        pss_unreadable: 0,
        exited: 0,
        members: Vec::new(),
    };
    for pid in pids {
        let Some(m) = member(pid) else {
            if pid == root {
                return Err(InspectError::NotFound { pid });
            }
            t.exited += 1;
            continue;
        };
        t.processes += 1;
        t.threads += m.threads;
        t.rss_bytes += m.rss_bytes;
        t.swap_bytes += m.swap_bytes;
        match (m.pss_bytes, m.uss_bytes) {
            (Some(p), Some(u)) => {
                t.pss_bytes += p;
                t.uss_bytes += u;
            }
            _ => t.pss_unreadable += 1,
        }
        t.members.push(m);
    }
    Ok(t)
}

/// What `--top` ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankBy {
    /// `VmRSS`: cheap (status), double-counts shared pages.
    Rss,
    /// `Pss` of `smaps_rollup`: walks every process's page tables; processes whose
    /// PSS is refused rank last.
    Pss,
}

/// One of the largest processes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopEntry {
    pub pid: i32,
    pub comm: String,
    pub threads: u64,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
    /// Which allocator answers `malloc` (`None`: the maps or executable were unreadable).
    pub allocator: Option<String>,
    pub glibc_arenas: Option<u64>,
    /// How the arenas were counted (`None` when not counted: not glibc, or unreadable).
    pub arenas_method: Option<Method>,
    /// Anything that could not be read.
    pub notes: Vec<String>,
}
// RSS and PSS are those of the scan that ranked the processes; allocator, threads and
// arenas come from inspecting each one a moment later.

/// The largest processes of the machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Top {
    pub schema_version: u32,
    pub ranked_by: RankBy,
    /// Processes with memory (kernel threads excluded) seen in `/proc`.
    pub scanned: u64,
    /// Candidates that exited before they could be inspected.
    pub exited: u64,
    pub processes: Vec<TopEntry>,
}

/// The `n` largest processes by `by`, each inspected for its allocator and arenas.
pub fn top(n: usize, by: RankBy) -> Result<Top, InspectError> {
    let me = std::process::id() as i32;
    let mut cands: Vec<(i32, u64, Option<u64>)> = Vec::new();
    for s in all_stats()? {
        if s.pid == me || s.state == 'Z' {
            continue;
        }
        let Ok(st) = proc::read_status(s.pid) else {
            continue;
        };
        if st.vm_rss == 0 {
            continue; // kernel thread
        }
        let pss = match by {
            RankBy::Pss => proc::read_smaps_rollup(s.pid).ok().map(|r| r.pss),
            RankBy::Rss => None,
        };
        cands.push((s.pid, st.vm_rss, pss));
    }
    let scanned = cands.len() as u64;
    match by {
        RankBy::Rss => cands.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0))),
        RankBy::Pss => cands.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1))),
    }
    let mut out = Top {
        schema_version: super::SCHEMA_VERSION,
        ranked_by: by,
        scanned,
        exited: 0,
        processes: Vec::new(),
    };
    for (pid, rss, pss) in cands {
        if out.processes.len() >= n {
            break;
        }
        match super::gather(pid) {
            Ok(ins) => out.processes.push(TopEntry {
                pid,
                comm: ins.process.comm.clone(),
                threads: ins.threads,
                // The figures it was ranked by, so the list reads in order.
                rss_bytes: rss,
                pss_bytes: pss.or(ins.memory.pss_bytes),
                allocator: ins.allocator.as_ref().map(|a| a.name.clone()),
                glibc_arenas: ins.glibc_arenas.as_ref().map(|a| a.count),
                arenas_method: ins.glibc_arenas.as_ref().map(|a| a.method),
                notes: ins.missing.clone(),
            }),
            Err(InspectError::NotFound { .. } | InspectError::Zombie { .. }) => out.exited += 1,
            Err(InspectError::Proc(ProcError::Gone { .. })) => out.exited += 1,
            Err(e) => out.processes.push(TopEntry {
                pid,
                comm: proc::read_stat(pid).map(|s| s.comm).unwrap_or_default(),
                threads: 0,
                rss_bytes: rss,
                pss_bytes: pss,
                allocator: None,
                glibc_arenas: None,
                arenas_method: None,
                notes: vec![e.to_string()],
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_in_order() {
        let pairs = [
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 10),
            (13, 11),
            (20, 1),
            (14, 99),
        ];
        assert_eq!(descendants(10, &pairs), vec![10, 11, 12, 13]);
        assert_eq!(descendants(13, &pairs), vec![13]);
        // A PID that is not in the snapshot is still its own root.
        assert_eq!(descendants(77, &pairs), vec![77]);
    }

    #[test]
    fn this_process_is_a_tree_of_one_or_more() {
        let t = tree(std::process::id() as i32).unwrap();
        assert!(t.processes >= 1);
        assert!(t.rss_bytes > 0);
        assert!(t.threads >= 1);
        assert!(tree(i32::MAX).is_err());
    }
}
