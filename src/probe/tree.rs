//! The process-tree sampler: which processes belong to the run, and their summed RSS,
//! VSZ and threads on the run's clock; the run's peak from the kernel's high-water marks.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::budget::CpuBudget;
use super::{Probe, RunEnd, Tick};
use crate::linux::proc;
use crate::record::{PeakSource, RunRecord, TreeSample};

/// `/proc` (or the run's cgroup) is searched for new processes when the kernel's last PID
/// changed (a fork anywhere), and at least this often: a process can also join without a
/// fork (moved into the run's cgroup from outside). Rare enough to wait for; a search of a
/// 1000-thread cgroup costs about 0.35 ms, so every 2 s was a tenth of memtrial's CPU on a
/// quiet machine.
pub(crate) const FULL_SCAN_EVERY: Duration = Duration::from_secs(10);

/// Share of one core the search for new members may use. Reading a cgroup's
/// `cgroup.procs` lists and sorts every *thread* of the group (0.57 ms for a process of
/// 1000 threads), and on a busy machine the kernel's last PID changes at every tick, so
/// the search is paced by its own cost (the CPU time it took): after [`SCAN_BURST`], a
/// search is due while the time spent searching is at most `SCAN_BURST + SCAN_CPU_FRACTION × time since the first`.
/// A small tree (a search of ~20 µs) is still searched at every tick; one of 1000 threads
/// about every 2 s.
pub(crate) const SCAN_CPU_FRACTION: f64 = 0.0003;
/// CPU time the search may take at once at the start of a run (the first second's dense
/// samples find a shim's helpers and its exec at once).
pub(crate) const SCAN_BURST: Duration = Duration::from_millis(5);

/// One run's helper processes, which memtrial started and which are never the workload's
/// (a `--before` hook, a `--driver`, the JVM probe's `jcmd`): children of memtrial, so
/// descendants of the run's ancestor when the run has no cgroup. Whoever starts one hides
/// it here; the run's tree sampler, which holds the same handle, leaves it out.
#[derive(Debug, Clone, Default)]
pub struct Helpers(std::sync::Arc<std::sync::Mutex<Vec<i32>>>);

impl Helpers {
    /// Keeps `pid` out of the run's processes until [`Helpers::unhide`]. Call it before the
    /// next tick, right after starting the helper.
    pub fn hide(&self, pid: i32) {
        if let Ok(mut h) = self.0.lock() {
            h.push(pid);
        }
    }

    /// The helper `pid` was reaped: its PID may name a process of the run again.
    pub(crate) fn unhide(&self, pid: i32) {
        if let Ok(mut h) = self.0.lock() {
            h.retain(|p| *p != pid);
        }
    }

    fn pids(&self) -> Vec<i32> {
        self.0.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

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

/// Samples one run's process tree.
pub struct TreeProbe {
    membership: Membership,
    members: HashMap<i32, Member>,
    /// PIDs seen in `/proc` that are not ours (not re-read while they stay listed).
    strangers: HashSet<i32>,
    /// Processes that were members and are gone, with their last high-water mark.
    departed_hwm: u64,
    /// A process in the tree that is not the workload's (memtrial's spawner).
    hidden: Option<i32>,
    /// Samples with at least one process, in order.
    samples: Vec<TreeSample>,
    /// Distinct processes seen: (pid, start time).
    seen: HashSet<(i32, u64)>,
    /// The last PID the kernel handed out when `/proc` was last scanned.
    last_pid: Option<i32>,
    next_full_scan: Option<Instant>,
    /// The search's budget of CPU time.
    scan_budget: CpuBudget,
    /// Members' `status` files kept open (at most [`KEPT_STATUS`] of them): a sample of a
    /// member then costs one system call.
    status_files: HashMap<i32, proc::KeptProcFile>,
    /// `/proc/loadavg` (the last PID), kept open: read at every tick.
    loadavg: crate::linux::kept::KeptSlot,
    /// The run's helper processes, left out.
    helpers: Helpers,
}

/// At most this many members' status files stay open; the rest are opened at each read
/// (a tree of thousands of processes must not exhaust memtrial's descriptors).
const KEPT_STATUS: usize = 64;

impl TreeProbe {
    pub fn new(membership: Membership) -> Self {
        TreeProbe {
            membership,
            members: HashMap::new(),
            strangers: HashSet::new(),
            departed_hwm: 0,
            hidden: None,
            samples: Vec::new(),
            seen: HashSet::new(),
            last_pid: None,
            next_full_scan: None,
            scan_budget: CpuBudget::new(SCAN_CPU_FRACTION, SCAN_BURST),
            status_files: HashMap::new(),
            loadavg: Default::default(),
            helpers: Helpers::default(),
        }
    }

    /// Leaves the processes hidden in `helpers` out of the run's processes.
    pub(crate) fn with_helpers(mut self, helpers: Helpers) -> Self {
        self.helpers = helpers;
        self
    }

    /// The run's helper processes, for the probes that start some.
    pub fn helpers(&self) -> &Helpers {
        &self.helpers
    }

    /// Leaves `pid` out of the run's processes, but follows its descendants.
    pub(crate) fn hiding(mut self, pid: Option<i32>) -> Self {
        self.hidden = pid;
        self
    }

    /// The processes currently in the run.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// The largest high-water mark of any single process seen so far (`VmHWM`).
    pub(crate) fn max_hwm(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.hwm_bytes)
            .max()
            .unwrap_or(0)
            .max(self.departed_hwm)
    }

    /// Refreshes membership and reads every member; keeps the tree sum as a sample (when
    /// the tree has a live process) and returns its RSS.
    pub fn sample(&mut self, t_seconds: f64) -> u64 {
        self.refresh();
        let mut s = TreeSample {
            t_seconds,
            rss_bytes: 0,
            vsz_bytes: 0,
            threads: 0,
            pss_bytes: None,
            uss_bytes: None,
            processes: 0,
        };
        for m in self.members.values() {
            if m.state == 'Z' {
                continue;
            }
            s.rss_bytes += m.rss_bytes;
            s.vsz_bytes += m.vsz_bytes;
            s.threads += m.threads;
            s.processes += 1;
        }
        let rss = s.rss_bytes;
        if s.processes > 0 {
            self.samples.push(s);
        }
        rss
    }

    /// The samples so far.
    pub fn samples(&self) -> &[TreeSample] {
        &self.samples
    }

    /// Finds new members (only when a process was created since the last look, or
    /// every [`FULL_SCAN_EVERY`]), drops departed ones and re-reads the rest.
    pub(crate) fn refresh(&mut self) {
        let now = Instant::now();
        // Over its budget the search waits: the last PID is not even read.
        let allowed = self.scan_budget.due(now);
        let last = if allowed {
            proc::last_pid_kept(&mut self.loadavg)
        } else {
            self.last_pid
        };
        let due = self.next_full_scan.is_none_or(|t| now >= t);
        if (last.is_none() || last != self.last_pid || due) && allowed {
            // The budget is of CPU time (see probe::budget).
            let cpu = proc::thread_cpu();
            self.scan();
            self.scan_budget
                .spent(now, proc::thread_cpu().saturating_sub(cpu));
            self.last_pid = last;
            self.next_full_scan = Some(now + FULL_SCAN_EVERY);
        }
        let mut vanished = Vec::new();
        for m in self.members.values_mut() {
            let st = match read_member_status(&mut self.status_files, m.pid) {
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
        self.seen
            .extend(self.members.values().map(|m| (m.pid, m.starttime_ticks)));
    }

    fn forget(&mut self, pids: Vec<i32>) {
        for p in pids {
            self.status_files.remove(&p);
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
            if self.members.contains_key(&pid) || Some(pid) == self.hidden {
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
        let helpers = self.helpers.pids();
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
                **p != ancestor
                    && Some(**p) != self.hidden
                    && !helpers.contains(p)
                    && !self.members.contains_key(p)
                    && !self.strangers.contains(p)
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
                if pp == ancestor || Some(pp) == self.hidden || self.members.contains_key(&pp) {
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

impl Probe for TreeProbe {
    /// The tree sampler drives membership itself (see [`super::ProbeSet::tick`]).
    fn observe(&mut self, _tick: &Tick) {}

    fn finish(self: Box<Self>, end: &RunEnd, record: &mut RunRecord) {
        let s = &self.samples;
        record.processes_seen = self.seen.len() as u32;
        record.mean_rss_bytes = time_weighted_mean(s);
        record.final_rss_bytes = s.last().map_or(0, |x| x.rss_bytes);
        record.peak_vsz_bytes = s.iter().map(|x| x.vsz_bytes).max().unwrap_or(0);
        record.threads_peak = s.iter().map(|x| x.threads).max().unwrap_or(0);
        if let Some(maxrss) = end.maxrss_bytes {
            let (peak, source) = choose_peak(maxrss, self.max_hwm(), s);
            record.peak_rss_bytes = peak;
            record.peak_rss_source = source;
        }
        record.samples = self.samples;
    }
}

/// A member's status, through its kept file when it has one or there is room for one.
fn read_member_status(
    kept: &mut HashMap<i32, proc::KeptProcFile>,
    pid: i32,
) -> Result<proc::Status, proc::ProcError> {
    if !kept.contains_key(&pid) {
        if kept.len() >= KEPT_STATUS {
            return proc::read_status(pid);
        }
        kept.insert(pid, proc::KeptProcFile::open(pid, "status")?);
    }
    let file = kept.get_mut(&pid).expect("inserted above");
    proc::read_kept_status(file)
}

/// The run's peak RSS and where it came from. Kernel high-water marks first:
/// `wait4`'s `ru_maxrss` (final, for the root and the children it reaped), else a
/// `VmHWM` read while a process lived (orphans, or when it is clearly larger — the
/// two differ by the kernel's approximate per-CPU RSS counters, so within 1% the
/// `wait4` figure stands). A tree of several processes at once can exceed any single
/// process's mark; then the largest sampled sum over samples with two or more
/// processes is the figure.
pub(crate) fn choose_peak(maxrss: u64, hwm: u64, samples: &[TreeSample]) -> (u64, PeakSource) {
    let (kernel, ksrc) = if hwm > maxrss + maxrss / 100 {
        (hwm, PeakSource::VmHwm)
    } else {
        (maxrss, PeakSource::Wait4Maxrss)
    };
    let tree = samples
        .iter()
        .filter(|s| s.processes >= 2)
        .map(|s| s.rss_bytes)
        .max()
        .unwrap_or(0);
    if tree > kernel {
        (tree, PeakSource::SampledTreeSum)
    } else {
        (kernel, ksrc)
    }
}

/// The time-weighted mean of RSS over the samples (trapezoids).
pub(crate) fn time_weighted_mean(samples: &[TreeSample]) -> u64 {
    match samples {
        [] => 0,
        [one] => one.rss_bytes,
        _ => {
            let mut area = 0.0;
            for w in samples.windows(2) {
                let dt = w[1].t_seconds - w[0].t_seconds;
                area += dt * (w[0].rss_bytes as f64 + w[1].rss_bytes as f64) / 2.0;
            }
            let span = samples[samples.len() - 1].t_seconds - samples[0].t_seconds;
            if span > 0.0 {
                (area / span).round() as u64
            } else {
                samples[0].rss_bytes
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn hidden_helpers_are_not_members() {
        let mut helper = Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = helper.id() as i32;
        let helpers = Helpers::default();
        helpers.hide(pid);
        let mut probe = TreeProbe::new(Membership::DescendantsOf(std::process::id() as i32))
            .with_helpers(helpers.clone());
        // Another run's helpers are that run's: this probe does not leave them out.
        let mut other = TreeProbe::new(Membership::DescendantsOf(std::process::id() as i32));
        other.sample(0.0);
        let others_see_it = other.members().any(|m| m.pid == pid);
        probe.sample(0.0);
        let hidden = !probe.members().any(|m| m.pid == pid);
        helpers.unhide(pid);
        probe.next_full_scan = None;
        probe.sample(0.1);
        let seen_again = probe.members().any(|m| m.pid == pid);
        drop(helper.stdin.take());
        let _ = helper.wait();
        assert!(hidden, "a hidden helper joined the run");
        assert!(
            others_see_it,
            "one run's helpers hid a process from another run"
        );
        assert!(seen_again, "an unhidden process stays out of the run");
    }

    #[test]
    fn finds_children_and_grandchildren() {
        // sh → sleep (grandchild of this test process).
        let mut child = Command::new("sh")
            .args(["-c", "sleep 2 & sleep 2; wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        // Rooted at the shell, not at this test process: other tests run children of
        // their own (sleeps too) at the same time.
        let mut probe = TreeProbe::new(Membership::DescendantsOf(child.id() as i32));
        probe.sample(0.0);
        let s = probe.samples()[0].clone();
        let comms: Vec<String> = probe.members().map(|m| m.comm.clone()).collect();
        let _ = child.kill();
        let _ = child.wait();
        assert!(s.processes >= 2, "the shell's two sleeps: {comms:?}");
        assert_eq!(
            comms.iter().filter(|c| *c == "sleep").count(),
            2,
            "{comms:?}"
        );
        assert!(s.rss_bytes > 0 && s.vsz_bytes >= s.rss_bytes);
        assert!(probe.max_hwm() > 0);
    }

    fn s(t: f64, rss: u64) -> TreeSample {
        TreeSample {
            t_seconds: t,
            rss_bytes: rss,
            vsz_bytes: 0,
            threads: 1,
            pss_bytes: None,
            uss_bytes: None,
            processes: 1,
        }
    }

    #[test]
    fn mean_is_time_weighted() {
        assert_eq!(time_weighted_mean(&[]), 0);
        assert_eq!(time_weighted_mean(&[s(0.0, 10)]), 10);
        // 0..1 s at 100, then a jump to 300 held 3 s: trapezoid areas 200 + 900 = 1100 over 4 s.
        let v = [s(0.0, 100), s(1.0, 100), s(1.0, 300), s(4.0, 300)];
        assert_eq!(time_weighted_mean(&v), 250);
    }

    #[test]
    fn peak_prefers_kernel_marks() {
        let single = [s(0.0, 90), s(0.1, 101)];
        assert_eq!(
            choose_peak(100, 100, &single),
            (100, PeakSource::Wait4Maxrss)
        );
        // VmHWM within 1% of ru_maxrss: counter noise, wait4 stands.
        assert_eq!(
            choose_peak(1000, 1005, &single),
            (1000, PeakSource::Wait4Maxrss)
        );
        // An orphan's VmHWM clearly above what wait4 saw.
        assert_eq!(choose_peak(100, 300, &single), (300, PeakSource::VmHwm));
        let mut two = s(0.2, 500);
        two.processes = 2;
        assert_eq!(
            choose_peak(300, 300, &[two]),
            (500, PeakSource::SampledTreeSum)
        );
    }
}
