//! The local backend: fork and exec on this machine, each run in a fresh cgroup of its
//! own (when memtrial may create one), the root reaped by `wait4` on a thread of its own.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{Backend, BackendError, Exit, ExitKind, Launch, LaunchSpec, RunHandle, Usage, Waited};
use crate::linux::cgroup::{self, Hierarchy, RunCgroup};
use crate::probe::{CgroupProbe, Membership, Probe};

/// Where runs are isolated.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// Each run in a fresh cgroup of this hierarchy.
    Cgroup(Hierarchy),
    /// No cgroup could be had: the reason, said to the user.
    None { reason: String },
}

/// Starts workloads on this machine.
pub struct LocalBackend {
    pub isolation: Isolation,
}

impl Backend for LocalBackend {
    fn launch(&self, spec: LaunchSpec) -> Result<Launch, BackendError> {
        become_subreaper();
        let mut cmd = Command::new(&spec.program);
        cmd.arg0(&spec.argv[0])
            .args(&spec.argv[1..])
            .current_dir(&spec.workdir)
            .stdin(Stdio::null())
            .stdout(spec.stdout)
            .stderr(spec.stderr)
            .process_group(0)
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        let cgroup = match &self.isolation {
            Isolation::Cgroup(h) => {
                let cg = RunCgroup::create(h, &spec.name, &spec.limits)?;
                let fds = cg.open_procs_files()?;
                // SAFETY: the hook only calls write(2) on descriptors opened beforehand.
                unsafe {
                    cmd.pre_exec(move || cgroup::join_self(&fds));
                }
                Some(cg)
            }
            Isolation::None { .. } => None,
        };
        let started = Instant::now();
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Ok(Launch::NotStarted(format!(
                    "could not start {}: {e}",
                    spec.program.display()
                )))
            }
        };
        let pid = child.id() as i32;
        // The child is reaped by wait4 below, never by std.
        drop(child);
        let (tx, exits) = mpsc::channel::<Exit>();
        std::thread::Builder::new()
            .name("memtrial-wait4".into())
            .spawn(move || {
                if let Some(e) = wait_for(pid) {
                    let _ = tx.send(e);
                }
            })
            .map_err(BackendError::Thread)?;
        Ok(Launch::Started(Box::new(LocalRun {
            pid,
            started,
            exits,
            cgroup,
        })))
    }
}

/// Blocks until `pid` exits; its status and resource usage.
fn wait_for(pid: i32) -> Option<Exit> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            let kind = if libc::WIFSIGNALED(status) {
                ExitKind::Signal(libc::WTERMSIG(status))
            } else {
                ExitKind::Code(libc::WEXITSTATUS(status))
            };
            return Some(Exit {
                kind,
                usage: Usage {
                    user_seconds: tv_seconds(ru.ru_utime),
                    sys_seconds: tv_seconds(ru.ru_stime),
                    maxrss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
                    minor_faults: ru.ru_minflt.max(0) as u64,
                    major_faults: ru.ru_majflt.max(0) as u64,
                },
                at: Instant::now(),
            });
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

fn tv_seconds(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// A workload started by [`LocalBackend`].
struct LocalRun {
    pid: i32,
    started: Instant,
    exits: mpsc::Receiver<Exit>,
    /// Dropped with the run: whatever is left is killed and the group removed.
    cgroup: Option<RunCgroup>,
}

impl RunHandle for LocalRun {
    fn started(&self) -> Instant {
        self.started
    }

    fn pid(&self) -> i32 {
        self.pid
    }

    fn membership(&self) -> Membership {
        match &self.cgroup {
            Some(cg) => Membership::Cgroup(cg.main_dir().to_path_buf()),
            None => Membership::DescendantsOf(std::process::id() as i32),
        }
    }

    fn probes(&self) -> Vec<Box<dyn Probe>> {
        match &self.cgroup {
            Some(cg) => vec![Box::new(CgroupProbe::new(cg.reader()))],
            None => Vec::new(),
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Waited {
        match self.exits.recv_timeout(timeout) {
            Ok(e) => Waited::Exited(e),
            Err(mpsc::RecvTimeoutError::Timeout) => Waited::Running,
            Err(mpsc::RecvTimeoutError::Disconnected) => Waited::Lost,
        }
    }

    fn signal(&mut self, sig: i32, pids: &[i32]) {
        // SAFETY: kill has no memory-safety preconditions. The process group first, then
        // every known member (daemons leave the group with setsid).
        unsafe {
            libc::kill(-self.pid, sig);
            for p in pids {
                libc::kill(*p, sig);
            }
        }
    }

    fn reap(&mut self, pids: &[i32]) {
        for p in pids {
            if *p == self.pid {
                continue;
            }
            let mut st = 0;
            // SAFETY: WNOHANG on a specific PID; fails harmlessly if it is not our child.
            unsafe {
                libc::waitpid(*p, &mut st, libc::WNOHANG);
            }
        }
    }

    fn kill_rest(&mut self, wait: Duration) {
        if let Some(cg) = &self.cgroup {
            cg.kill_all(wait);
        }
    }
}
