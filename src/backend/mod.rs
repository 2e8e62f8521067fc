//! Backends: where and how a run's workload is started, found, stopped and reaped.
//!
//! A backend launches one command with an environment and limits and hands back a
//! [`RunHandle`]: how to find the run's processes, how to signal them, the root's exit
//! with its resource usage, and the probes only the backend can offer (its cgroup).
//! [`local::LocalBackend`] forks and execs into a fresh cgroup on this machine;
//! [`container::ContainerBackend`] starts the workload the same way inside a container
//! that already has its limits (a Kubernetes pod), creating no cgroup and recording the
//! container's limits as the run's; [`fake::FakeBackend`] plays a scripted run so the
//! orchestration and the status decision are tested without root or a real process.

pub mod container;
#[cfg(test)]
pub mod fake;
pub mod helper;
pub mod local;
pub mod spawn;

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::linux::cgroup::{CgroupError, Limits, RunCgroup};
use crate::probe::{Membership, Probe};

/// What to start.
#[derive(Debug)]
pub struct LaunchSpec {
    pub program: PathBuf,
    /// argv, argv[0] first.
    pub argv: Vec<String>,
    /// Set on top of memtrial's own environment.
    pub env: Vec<(String, String)>,
    pub workdir: PathBuf,
    pub stdout: File,
    pub stderr: File,
    pub limits: Limits,
    /// Unique among the runs of this memtrial (the cgroup's name).
    pub name: String,
    /// Called with the spawner's PID before it forks the workload (a backend that starts
    /// workloads through the spawner holds it at a gate meanwhile); a backend that cannot
    /// never calls it.
    pub at_gate: Option<AtGate>,
    /// Transparent huge pages off for the workload and its children
    /// (`prctl(PR_SET_THP_DISABLE)` before its exec: a variant's `thp:off`).
    pub thp_off: bool,
}

/// What to do while the spawner waits at its gate: the CPU probe attaches its perf events
/// to the spawner there, and the workload inherits them.
pub struct AtGate(pub Box<dyn FnOnce(i32)>);

impl std::fmt::Debug for AtGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AtGate(..)")
    }
}

/// How the root process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Code(i32),
    Signal(i32),
}

/// The root's resource usage (`wait4`), covering the children it waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub user_seconds: f64,
    pub sys_seconds: f64,
    pub maxrss_bytes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

/// The root's exit, as the backend saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exit {
    pub kind: ExitKind,
    pub usage: Usage,
    pub at: Instant,
}

/// What a wait for the root's exit saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Waited {
    /// The root exited (reported once).
    Exited(Exit),
    /// Still running when the wait timed out.
    Running,
    /// The root's exit can no longer be observed (reported already, or lost).
    Lost,
}

/// The outcome of a launch that memtrial itself survived.
pub enum Launch {
    Started(Box<dyn RunHandle>),
    /// The program could not be started (not found, not executable): the run's failure,
    /// in memtrial's words.
    NotStarted(String),
}

/// Errors that stop memtrial itself (not the workload's failures).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot set up the run's cgroup")]
    Cgroup(#[from] CgroupError),
    #[error("cannot start a thread to wait for the workload: {0}")]
    Thread(std::io::Error),
}

/// Starts workloads.
pub trait Backend {
    /// Starts `spec`'s command; `Ok(Launch::NotStarted)` when the program could not be
    /// started (a failed run), `Err` when memtrial itself cannot go on.
    fn launch(&self, spec: LaunchSpec) -> Result<Launch, BackendError>;

    /// A cgroup of its own for a hook or driver named `name` (see [`helper`]), when this
    /// backend makes cgroups; `None` keeps the helper together without one.
    fn helper_cgroup(&self, name: &str) -> Result<Option<RunCgroup>, BackendError> {
        let _ = name;
        Ok(None)
    }
}

/// Makes memtrial a child subreaper: orphans of the processes it started (the workload's
/// without a cgroup, a hook's or driver's) are reparented to memtrial, not to init, and
/// stay where memtrial finds them.
pub(crate) fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// A running workload.
pub trait RunHandle {
    /// When the workload was started: the zero of the run's clock.
    fn started(&self) -> Instant;
    /// The root process (the process group's leader).
    fn pid(&self) -> i32;
    /// A process of the backend's own in the run's tree (a spawner) that is not part of
    /// the workload: never sampled, verified or counted.
    fn spawner(&self) -> Option<i32> {
        None
    }
    /// How the run's processes are found.
    fn membership(&self) -> Membership;
    /// Probes only this backend can offer (e.g. its cgroup's figures).
    fn probes(&self) -> Vec<Box<dyn Probe>>;
    /// Waits up to `timeout` for the root's exit.
    fn wait_exit(&mut self, timeout: Duration) -> Waited;
    /// The root has ended, even if [`RunHandle::wait_exit`] has not reported it yet (memtrial
    /// was stopped meanwhile, and its reader of the exit has not caught up).
    fn root_ended(&self) -> bool {
        false
    }
    /// Sends `sig` to the root's process group and to each of `pids`.
    fn signal(&mut self, sig: i32, pids: &[i32]);
    /// Reaps exited processes among `pids` that were handed to memtrial as orphans.
    fn reap(&mut self, pids: &[i32]);
    /// Kills whatever is left of the run that signals did not reach (a cgroup's
    /// kill), waiting up to `wait`.
    fn kill_rest(&mut self, wait: Duration);
    /// OOM kills the kernel counted during the run where no cgroup probe of the run's own
    /// counts them (in a container: its memory group's count since launch), with where
    /// they were counted; `None` when the backend has no such count.
    fn oom_kills(&self) -> Option<(u64, String)> {
        None
    }
    /// The memory cgroup whose limit bounds the run, and its version: the run's own group,
    /// or in a container the container's (watched for a run stuck at the limit).
    fn memory_group(&self) -> Option<(std::path::PathBuf, crate::linux::cgroup::Version)> {
        None
    }
    /// A reader of the run's own cgroup, when it has one (a soak reads it as it goes).
    fn cgroup_reader(&self) -> Option<crate::linux::cgroup::CgroupReader> {
        None
    }
}
