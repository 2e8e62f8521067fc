//! A run stuck at its memory limit without an OOM kill.
//!
//! Without swap, a memory group at its limit whose reclaim still frees a page now and then
//! is not out of memory to the kernel: cgroup v1 (and v2's `memory.max`) retries the
//! charge after any reclaim that freed something, and the OOM killer waits. The pages
//! freed are the run's own file pages (its program's code, its libraries), which it reads
//! back at once — and frees again. Seen in a pod of 96 MiB on this machine's kernel (6.18,
//! cgroup v1): two workloads at 92.8 MiB resident spent minutes in the kernel (665 ticks of
//! system time against 3 of user, 10 major faults a second) and memtrial's own process
//! beside them likewise, with `oom_kill 0`, until the Job's wait gave up.
//!
//! memtrial's own process in a container is in that group too, and stalls likewise: its
//! main thread was seen in reclaim, reading back its own code, for 20 to 60 s at a time,
//! and never looked twice. So the looks are a thread's of their own ([`ThrashGuard`]),
//! once a second through the same few pages, which stay resident while they are used; it
//! kills the run's processes itself when the run is stuck, and the run's clock records why.
//!
//! [`ThrashWatch`] looks at the run's memory group and processes on the run's clock; when
//! for [`WINDOW`] the group stayed within [`NEAR`] of its limit and the run's processes
//! spent at least [`SYSTEM_SHARE`] of their CPU (at least [`MIN_CPU`] of it) in the kernel
//! while taking major faults, the run is stopped and recorded as failed with those figures:
//! the variant does not fit in the limit, though the kernel never said so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::linux::cgroup::Version;

/// How long the run must look stuck before memtrial stops it.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Within this share of the limit (or 1 MiB, whichever is more) counts as at the limit.
pub(crate) const NEAR: f64 = 0.03;
/// The share of the run's CPU time spent in the kernel that marks it stuck (a program
/// doing its work spends most of its time in user space; one refaulting its own code
/// spends nearly all of it in the kernel: 99.6% in the pod above).
pub(crate) const SYSTEM_SHARE: f64 = 0.9;
/// The least CPU time the run's processes must have used in the window: an idle program
/// at its limit is full, not stuck.
pub(crate) const MIN_CPU: Duration = Duration::from_millis(500);
/// The least major faults in the window (the pod above: about 100 in 10 s a process; a
/// 96 MiB group on the host: 430 a second).
pub(crate) const MIN_MAJOR_FAULTS: u64 = 50;

/// What [`ThrashWatch`] saw over its window (whole numbers: a run's end is compared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Thrashing {
    pub millis: u64,
    /// The least usage seen in the window, and the limit.
    pub usage_bytes: u64,
    pub limit_bytes: u64,
    pub cpu_millis: u64,
    /// Of the run's CPU time in the window, the kernel's share, in thousandths.
    pub system_permille: u64,
    pub major_faults: u64,
    /// The usage file read: `memory.usage_in_bytes` (v1) or `memory.current` (v2).
    pub usage_file: &'static str,
}

impl Thrashing {
    /// The run's message (its status is `failed`).
    pub(crate) fn message(&self) -> String {
        format!(
            "stuck at the memory limit, stopped by memtrial: for {:.0} s the memory group \
             stayed at {:.1} MiB or more of its {:.1} MiB limit ({}) and the run's \
             processes spent {:.0}% of their {:.1} s of CPU in the kernel, with {} major \
             page faults (pages read back from their files, their code among them, as \
             reclaim freed them). The kernel's OOM killer does not act while reclaim frees \
             any page, so the run would not have ended: the variant does not fit in the limit",
            self.millis as f64 / 1000.0,
            self.usage_bytes as f64 / 1048576.0,
            self.limit_bytes as f64 / 1048576.0,
            self.usage_file,
            self.system_permille as f64 / 10.0,
            self.cpu_millis as f64 / 1000.0,
            self.major_faults
        )
    }
}

/// One look: the group's usage and limit, and each process's CPU ticks and major faults.
#[derive(Debug, Clone)]
struct Look {
    at: Duration,
    near: bool,
    usage: u64,
    limit: u64,
    /// pid → (start time, user ticks, system ticks, major faults).
    procs: BTreeMap<i32, (u64, u64, u64, u64)>,
}

/// Watches a run's memory group for [`WINDOW`]s at the limit spent in the kernel.
pub(crate) struct ThrashWatch {
    usage_name: &'static str,
    usage_file: PathBuf,
    limit_file: PathBuf,
    looks: Vec<Look>,
    ticks_per_second: f64,
}

impl ThrashWatch {
    /// A watch of the memory group `dir`; `None` when the group has no limit to be stuck at
    /// (checked at each look too: the limit is read every time).
    pub(crate) fn new(dir: &Path, version: Version) -> Option<ThrashWatch> {
        let (usage, limit) = match version {
            Version::V1 => ("memory.usage_in_bytes", "memory.limit_in_bytes"),
            Version::V2 => ("memory.current", "memory.max"),
        };
        let w = ThrashWatch {
            usage_name: usage,
            usage_file: dir.join(usage),
            limit_file: dir.join(limit),
            looks: Vec::new(),
            ticks_per_second: crate::linux::proc::clock_ticks_per_second() as f64,
        };
        w.limit().map(|_| w)
    }

    /// The group's limit; `None` without one (v2's `max`, v1's page-rounded 2^63).
    fn limit(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.limit_file).ok()?;
        crate::linux::cgroup::container::parse_limit(&text)
            .ok()
            .flatten()
    }

    /// A look at `at` on the run's clock at the run's `members`; what the run did over the
    /// last [`WINDOW`] when it was stuck all through it.
    pub(crate) fn look(&mut self, at: Duration, pids: &[i32]) -> Option<Thrashing> {
        let limit = self.limit()?;
        let usage = std::fs::read_to_string(&self.usage_file)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()?;
        let margin = ((limit as f64 * NEAR) as u64).max(1 << 20);
        let procs = pids
            .iter()
            .filter_map(|&pid| Some((pid, proc_counts(pid)?)))
            .collect();
        self.looks.push(Look {
            at,
            near: usage + margin >= limit,
            usage,
            limit,
            procs,
        });
        // Keep the newest look at least WINDOW old, and every one after it.
        while self.looks.len() > 2 && at.saturating_sub(self.looks[1].at) >= WINDOW {
            self.looks.remove(0);
        }
        judge(&self.looks, self.ticks_per_second, self.usage_name)
    }
}

/// How often [`ThrashGuard`] looks.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A [`ThrashWatch`] on a thread of its own that kills the run's processes (SIGKILL to the
/// root's process group and to each process of the last tick) when the run is stuck.
/// Dropped, it stops within [`LOOK_EVERY`] (it is not waited for: a look may be stalled).
pub(crate) struct ThrashGuard {
    shared: Arc<Shared>,
    thread: Option<std::thread::Thread>,
}

struct Shared {
    pids: Mutex<Vec<i32>>,
    stuck: Mutex<Option<Thrashing>>,
    stop: AtomicBool,
}

impl ThrashGuard {
    /// Starts the guard of the run whose clock started at `t0` and whose root (leader of its
    /// own process group) is `root`.
    pub(crate) fn start(mut watch: ThrashWatch, t0: Instant, root: i32) -> ThrashGuard {
        let shared = Arc::new(Shared {
            pids: Mutex::new(vec![root]),
            stuck: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let mine = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("memtrial-thrash".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut pids = Vec::new();
                while !mine.stop.load(Ordering::SeqCst) {
                    std::thread::park_timeout(LOOK_EVERY);
                    if mine.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    pids.clone_from(&mine.pids.lock().unwrap_or_else(|e| e.into_inner()));
                    if let Some(t) = watch.look(t0.elapsed(), &pids) {
                        *mine.stuck.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
                        // SAFETY: kill(2) with a process group or pid and a signal number.
                        unsafe {
                            libc::kill(-root, libc::SIGKILL);
                            for &pid in &pids {
                                libc::kill(pid, libc::SIGKILL);
                            }
                        }
                        break;
                    }
                }
            })
            .ok()
            .map(|h| h.thread().clone());
        ThrashGuard { shared, thread }
    }

    /// The run's processes at its latest tick.
    pub(crate) fn members(&self, pids: impl Iterator<Item = i32>) {
        let mut p = self.shared.pids.lock().unwrap_or_else(|e| e.into_inner());
        p.clear();
        p.extend(pids);
    }

    /// What the guard saw, once it found the run stuck (and killed it).
    pub(crate) fn stuck(&self) -> Option<Thrashing> {
        *self.shared.stuck.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ThrashGuard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = &self.thread {
            t.unpark();
        }
    }
}

/// `(start time, utime, stime, majflt)` of `pid` from `/proc/PID/stat`.
fn proc_counts(pid: i32) -> Option<(u64, u64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_counts(&stat)
}

fn parse_counts(stat: &str) -> Option<(u64, u64, u64, u64)> {
    // Fields after the command's closing parenthesis, from field 3 (state) on.
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some((n(19)?, n(11)?, n(12)?, n(9)?))
}

/// Stuck when the looks span at least [`WINDOW`], every one at the limit, and the
/// processes present at both ends spent their CPU in the kernel taking major faults.
fn judge(looks: &[Look], ticks_per_second: f64, usage_file: &'static str) -> Option<Thrashing> {
    let (first, last) = (looks.first()?, looks.last()?);
    let span = last.at.saturating_sub(first.at);
    if span < WINDOW || !looks.iter().all(|l| l.near) {
        return None;
    }
    let (mut user, mut system, mut major) = (0u64, 0u64, 0u64);
    for (pid, (start, u1, s1, m1)) in &last.procs {
        if let Some((start0, u0, s0, m0)) = first.procs.get(pid) {
            if start0 == start {
                user += u1.saturating_sub(*u0);
                system += s1.saturating_sub(*s0);
                major += m1.saturating_sub(*m0);
            }
        }
    }
    let cpu = (user + system) as f64 / ticks_per_second;
    let permille = (system * 1000).checked_div(user + system).unwrap_or(0);
    let stuck = cpu >= MIN_CPU.as_secs_f64()
        && permille as f64 >= SYSTEM_SHARE * 1000.0
        && major >= MIN_MAJOR_FAULTS;
    stuck.then(|| Thrashing {
        millis: span.as_millis() as u64,
        usage_bytes: looks.iter().map(|l| l.usage).min().unwrap_or(0),
        limit_bytes: last.limit,
        cpu_millis: (cpu * 1000.0).round() as u64,
        system_permille: permille,
        major_faults: major,
        usage_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(at: u64, near: bool, procs: &[(i32, u64, u64, u64)]) -> Look {
        Look {
            at: Duration::from_secs(at),
            near,
            usage: 95 << 20,
            limit: 96 << 20,
            procs: procs
                .iter()
                .map(|&(pid, u, s, m)| (pid, (7, u, s, m)))
                .collect(),
        }
    }

    #[test]
    fn ten_seconds_at_the_limit_in_the_kernel_is_stuck() {
        // Like the pod's figures: nearly all system time, ~100 major faults in 10 s.
        let looks = [
            look(0, true, &[(10, 1, 300, 1000)]),
            look(5, true, &[(10, 2, 330, 1050)]),
            look(10, true, &[(10, 2, 360, 1100)]),
        ];
        let t = judge(&looks, 100.0, "memory.usage_in_bytes").expect("stuck");
        assert_eq!(
            (t.major_faults, t.cpu_millis, t.system_permille),
            (100, 610, 983)
        );
        let m = t.message();
        assert!(
            m.contains("stuck at the memory limit") && m.contains("98%"),
            "{m}"
        );
    }

    #[test]
    fn work_below_the_limit_or_in_user_space_or_too_short_is_not_stuck() {
        let stuck = |looks: &[Look]| judge(looks, 100.0, "memory.current").is_some();
        let busy = [(10, 1, 0, 0), (10, 2, 100, 200)];
        let ends = |a: bool, b: bool, t: u64| [look(0, a, &[busy[0]]), look(t, b, &[busy[1]])];
        assert!(stuck(&ends(true, true, 10)));
        // A look below the limit in the window.
        assert!(!stuck(&ends(true, false, 10)));
        // Not yet 10 s.
        assert!(!stuck(&ends(true, true, 9)));
        // Mostly user time: working, near its limit.
        let working = [
            look(0, true, &[(10, 0, 0, 0)]),
            look(10, true, &[(10, 500, 40, 100)]),
        ];
        assert!(!stuck(&working));
        // In the kernel but without major faults (a program busy in system calls).
        let syscalls = [
            look(0, true, &[(10, 0, 0, 0)]),
            look(10, true, &[(10, 1, 300, 3)]),
        ];
        assert!(!stuck(&syscalls));
        // Idle at its limit: full, not stuck.
        let idle = [
            look(0, true, &[(10, 0, 0, 0)]),
            look(10, true, &[(10, 0, 20, 30)]),
        ];
        assert!(!stuck(&idle));
        // A PID reused by another process counts nothing.
        let mut reused = ends(true, true, 10);
        reused[1].procs.insert(10, (8, 2, 100, 200));
        assert!(!stuck(&reused));
    }

    #[test]
    fn proc_stat_fields() {
        let stat = "42 (a (b) c) R 1 42 42 0 -1 4194304 2244 0 664 0 1 340 0 0 20 0 5 0 \
                    12345 1000 300 18446744073709551615";
        assert_eq!(parse_counts(stat), Some((12345, 1, 340, 664)));
    }
}
