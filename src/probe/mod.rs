//! Samples a process tree on one clock: which processes belong to the run, and
//! their summed RSS, VSZ, threads and (at a rate kept within a CPU budget) PSS.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::linux::proc::{self, ProcError};
use crate::record::TreeSample;

/// Share of one core that PSS reads (`smaps_rollup`) may use.
pub const PSS_CPU_FRACTION: f64 = 0.002;

/// `/proc` is walked for new processes when the kernel's last PID changed, and at least this often.
pub const FULL_SCAN_EVERY: Duration = Duration::from_secs(2);

/// How the run's processes are found.
#[derive(Debug, Clone)]
pub enum Membership {
    /// Every descendant of this process (memtrial itself, a child subreaper, so that
    /// orphans of the workload are reparented to it and stay in the tree).
    DescendantsOf(i32),
    /// The processes listed in this cgroup directory's `cgroup.procs`.
    Cgroup(std::path::PathBuf),
}

/// A process of the run, as last seen.
#[derive(Debug, Clone)]
pub struct Member {
    pub pid: i32,
    pub ppid: i32,
    pub starttime_ticks: u64,
    pub comm: String,
    /// Bumps whenever `comm` changes (the process exec'd another program).
    pub exec_generation: u32,
    pub state: char,
    pub rss_bytes: u64,
    pub vsz_bytes: u64,
    pub threads: u64,
    /// The kernel's high-water mark for this process (`VmHWM`).
    pub hwm_bytes: u64,
    pub peak_rss_bytes: u64,
}

impl Member {
    fn new(st: &proc::Stat) -> Member {
        Member {
            pid: st.pid,
            ppid: st.ppid,
            starttime_ticks: st.starttime_ticks,
            comm: String::new(),
            exec_generation: 0,
            state: st.state,
            rss_bytes: 0,
            vsz_bytes: 0,
            threads: 0,
            hwm_bytes: 0,
            peak_rss_bytes: 0,
        }
    }
}

/// Keeps the cost of reading `smaps_rollup` (it walks page tables: ~30 ms for a
/// 2 GiB process) within a fraction of one core.
#[derive(Debug, Clone)]
pub struct PssBudget {
    /// Fraction of one core PSS reads may use, e.g. 0.005.
    pub cpu_fraction: f64,
    next_allowed: Option<Instant>,
}

impl PssBudget {
    pub fn new(cpu_fraction: f64) -> Self {
        PssBudget {
            cpu_fraction,
            next_allowed: None,
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.next_allowed.is_none_or(|t| now >= t)
    }

    fn spent(&mut self, now: Instant, cost: Duration) {
        let wait = cost.as_secs_f64() / self.cpu_fraction;
        self.next_allowed = Some(now + Duration::from_secs_f64(wait));
    }
}

/// The sum of PSS over some processes, read by [`PssReader`].
struct PssResult {
    started: Instant,
    cost: Duration,
    /// `None` when a process's `smaps_rollup` could not be read (not when it exited).
    pss: Option<u64>,
}

/// Reads `smaps_rollup` on its own thread, one request at a time.
struct PssReader {
    tx: Option<std::sync::mpsc::Sender<Vec<i32>>>,
    rx: std::sync::mpsc::Receiver<PssResult>,
    busy: bool,
}

impl PssReader {
    fn new() -> PssReader {
        let (tx, work) = std::sync::mpsc::channel::<Vec<i32>>();
        let (done, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("memtrial-pss".into())
            .spawn(move || {
                while let Ok(pids) = work.recv() {
                    let started = Instant::now();
                    let mut sum = Some(0u64);
                    for pid in pids {
                        match proc::read_smaps_rollup(pid) {
                            Ok(r) => sum = sum.map(|x| x + r.pss),
                            Err(ProcError::Gone { .. }) => {}
                            Err(_) => sum = None,
                        }
                    }
                    let r = PssResult {
                        started,
                        cost: started.elapsed(),
                        pss: sum,
                    };
                    if done.send(r).is_err() {
                        return;
                    }
                }
            });
        PssReader {
            // Without the thread, PSS is simply never read.
            tx: spawned.ok().map(|_| tx),
            rx,
            busy: false,
        }
    }

    fn request(&mut self, pids: Vec<i32>) {
        if let Some(tx) = &self.tx {
            self.busy = tx.send(pids).is_ok();
        }
    }

    fn poll(&mut self) -> Option<PssResult> {
        let r = self.rx.try_recv().ok()?;
        self.busy = false;
        Some(r)
    }
}

/// Samples one run's process tree.
pub struct TreeProbe {
    membership: Membership,
    members: HashMap<i32, Member>,
    /// PIDs seen in `/proc` that are not ours (not re-read while they stay listed).
    strangers: HashSet<i32>,
    /// Processes that were members and are gone, with their last high-water mark.
    departed_hwm: u64,
    pss: PssBudget,
    pss_reader: PssReader,
    /// The last PID the kernel handed out when `/proc` was last scanned.
    last_pid: Option<i32>,
    next_full_scan: Option<Instant>,
    pub pss_reads: u64,
    pub pss_time: Duration,
}

impl TreeProbe {
    pub fn new(membership: Membership) -> Self {
        TreeProbe {
            membership,
            members: HashMap::new(),
            strangers: HashSet::new(),
            departed_hwm: 0,
            pss: PssBudget::new(PSS_CPU_FRACTION),
            pss_reader: PssReader::new(),
            last_pid: None,
            next_full_scan: None,
            pss_reads: 0,
            pss_time: Duration::ZERO,
        }
    }

    /// The processes currently in the run.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// The largest high-water mark of any single process seen so far (`VmHWM`).
    pub fn max_hwm(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.hwm_bytes)
            .max()
            .unwrap_or(0)
            .max(self.departed_hwm)
    }

    /// Refreshes membership and reads every member; returns the tree sum. PSS is read
    /// on a thread of its own (walking page tables can wait on a busy process's memory
    /// lock for a long time) and attached to the first sample after it arrives.
    pub fn sample(&mut self, t_seconds: f64) -> TreeSample {
        self.refresh();
        let now = Instant::now();
        let mut s = TreeSample {
            t_seconds,
            rss_bytes: 0,
            vsz_bytes: 0,
            threads: 0,
            pss_bytes: None,
            processes: 0,
        };
        let mut live = Vec::new();
        for m in self.members.values() {
            if m.state == 'Z' {
                continue;
            }
            s.rss_bytes += m.rss_bytes;
            s.vsz_bytes += m.vsz_bytes;
            s.threads += m.threads;
            s.processes += 1;
            live.push(m.pid);
        }
        if let Some(r) = self.pss_reader.poll() {
            self.pss_reads += 1;
            self.pss_time += r.cost;
            self.pss.spent(r.started, r.cost);
            s.pss_bytes = r.pss;
        }
        if !live.is_empty() && self.pss.due(now) && !self.pss_reader.busy {
            self.pss_reader.request(live);
        }
        s
    }

    /// Finds new members (only when a process was created since the last look, or
    /// every [`FULL_SCAN_EVERY`]), drops departed ones and re-reads the rest.
    pub fn refresh(&mut self) {
        let last = proc::last_pid();
        let now = Instant::now();
        let due = self.next_full_scan.is_none_or(|t| now >= t);
        if last.is_none() || last != self.last_pid || due {
            self.scan();
            self.last_pid = last;
            self.next_full_scan = Some(now + FULL_SCAN_EVERY);
        }
        let mut vanished = Vec::new();
        for m in self.members.values_mut() {
            let st = match proc::read_status(m.pid) {
                Ok(st) => st,
                Err(_) => {
                    vanished.push(m.pid);
                    continue;
                }
            };
            if m.comm.is_empty() {
                m.comm = st.name;
            } else if st.name != m.comm {
                m.comm = st.name;
                m.exec_generation += 1;
            }
            m.state = st.state;
            m.ppid = st.ppid;
            m.threads = st.threads;
            m.rss_bytes = st.vm_rss;
            m.vsz_bytes = st.vm_size;
            m.hwm_bytes = m.hwm_bytes.max(st.vm_hwm);
            m.peak_rss_bytes = m.peak_rss_bytes.max(m.rss_bytes);
        }
        self.forget(vanished);
    }

    fn forget(&mut self, pids: Vec<i32>) {
        for p in pids {
            if let Some(m) = self.members.remove(&p) {
                self.departed_hwm = self.departed_hwm.max(m.hwm_bytes);
            }
        }
    }

    /// The cgroup lists the run's processes: no walk of `/proc` needed.
    fn scan_cgroup(&mut self, dir: &std::path::Path) {
        let listed: HashSet<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default();
        let stale: Vec<i32> = self
            .members
            .values()
            .filter(|m| !listed.contains(&m.pid))
            .map(|m| m.pid)
            .collect();
        self.forget(stale);
        for pid in listed {
            if self.members.contains_key(&pid) {
                continue;
            }
            if let Ok(st) = proc::read_stat(pid) {
                self.members.insert(pid, Member::new(&st));
            }
        }
    }

    /// Walks `/proc`: new processes whose parent is the ancestor or a member join.
    fn scan(&mut self) {
        let ancestor = match &self.membership {
            Membership::DescendantsOf(a) => *a,
            Membership::Cgroup(dir) => {
                self.scan_cgroup(&dir.clone());
                return;
            }
        };
        let Ok(pids) = proc::list_pids() else {
            return;
        };
        let listed: HashSet<i32> = pids.iter().copied().collect();
        self.strangers.retain(|p| listed.contains(p));
        // Departed members, and members whose PID now names another process.
        let stale: Vec<i32> = self
            .members
            .values()
            .filter(|m| {
                !listed.contains(&m.pid)
                    || proc::read_stat(m.pid)
                        .map_or(true, |st| st.starttime_ticks != m.starttime_ticks)
            })
            .map(|m| m.pid)
            .collect();
        self.forget(stale);
        let mut fresh: Vec<proc::Stat> = pids
            .iter()
            .filter(|p| {
                **p != ancestor && !self.members.contains_key(p) && !self.strangers.contains(p)
            })
            .filter_map(|p| proc::read_stat(*p).ok())
            .collect();
        // A fresh process belongs if its parent is the ancestor or a member; its parent may
        // itself be fresh, so repeat until nothing changes.
        loop {
            let before = fresh.len();
            let mut i = 0;
            while i < fresh.len() {
                let pp = fresh[i].ppid;
                if pp == ancestor || self.members.contains_key(&pp) {
                    let st = fresh.swap_remove(i);
                    self.members.insert(st.pid, Member::new(&st));
                } else {
                    i += 1;
                }
            }
            if fresh.len() == before {
                break;
            }
        }
        self.strangers.extend(fresh.iter().map(|s| s.pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn finds_children_and_grandchildren() {
        // sh → sleep (grandchild of this test process).
        let mut child = Command::new("sh")
            .args(["-c", "sleep 2 & sleep 2; wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut probe = TreeProbe::new(Membership::DescendantsOf(std::process::id() as i32));
        let s = probe.sample(0.0);
        let comms: Vec<String> = probe.members().map(|m| m.comm.clone()).collect();
        let _ = child.kill();
        let _ = child.wait();
        assert!(s.processes >= 3, "sh and two sleeps: {comms:?}");
        assert_eq!(
            comms.iter().filter(|c| *c == "sleep").count(),
            2,
            "{comms:?}"
        );
        assert!(s.rss_bytes > 0 && s.vsz_bytes >= s.rss_bytes);
        std::thread::sleep(Duration::from_millis(100));
        let s2 = probe.sample(0.1);
        assert!(
            s2.pss_bytes.is_some_and(|p| p > 0),
            "PSS arrives with the next sample"
        );
        assert!(probe.max_hwm() > 0);
    }

    #[test]
    fn pss_budget_spaces_reads() {
        let mut b = PssBudget::new(0.01);
        let now = Instant::now();
        assert!(b.due(now));
        b.spent(now, Duration::from_millis(10));
        assert!(!b.due(now + Duration::from_millis(500)));
        assert!(b.due(now + Duration::from_millis(1001)));
    }
}
