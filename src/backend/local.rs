//! The local backend: fork and exec on this machine, each run in a fresh cgroup of its
//! own (when memtrial may create one), started through memtrial's spawner (see
//! [`super::spawn`]) and reaped (`linux::child`) on a thread of its own.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::spawn::{self, Report};
use super::{Backend, BackendError, Exit, Launch, LaunchSpec, RunHandle, Usage, Waited};
use crate::linux::cgroup::{self, Hierarchy, RunCgroup};
use crate::linux::child::{self, Child};
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
        let cgroup = match &self.isolation {
            Isolation::Cgroup(h) => Some(RunCgroup::create(h, &spec.name, &spec.limits)?),
            Isolation::None { .. } => None,
        };
        start(spec, cgroup)
    }

    fn helper_cgroup(&self, name: &str) -> Result<Option<RunCgroup>, BackendError> {
        match &self.isolation {
            Isolation::Cgroup(h) => Ok(Some(RunCgroup::create(h, name, &Default::default())?)),
            Isolation::None { .. } => Ok(None),
        }
    }
}

/// Starts `spec`'s command through the spawner, in `cgroup` when there is one; without
/// one the run's processes are memtrial's descendants (memtrial is a child subreaper, so
/// the workload's orphans stay among them). Shared with [`super::container`].
pub(super) fn start(spec: LaunchSpec, cgroup: Option<RunCgroup>) -> Result<Launch, BackendError> {
    super::become_subreaper();
    let (reports, report_w) = report_pipe().map_err(BackendError::Thread)?;
    let report_fd = report_w.as_raw_fd();
    // The gate the spawner waits at, when something must attach to it first.
    let gate = match &spec.at_gate {
        Some(_) => Some(report_pipe().map_err(BackendError::Thread)?),
        None => None,
    };
    let gate_fd = gate.as_ref().map(|(r, _)| r.as_raw_fd());
    // memtrial itself, started again as the spawner (see [`super::spawn`]).
    let mut cmd = Command::new(spawn::spawner_program());
    cmd.arg0("memtrial")
        .args(spawn::spawner_args(
            report_fd,
            gate_fd,
            spec.thp_off,
            &spec.env,
            spec.program.as_os_str(),
            &spec.argv,
        ))
        .current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(spec.stdout)
        .stderr(spec.stderr)
        .process_group(0);
    let fds = match &cgroup {
        Some(cg) => cg.open_procs_files()?,
        None => Vec::new(),
    };
    // The workload gets the open-file limit memtrial started with, even when memtrial
    // raised its own for the load's connections.
    let nofile = crate::load::original_nofile();
    // SAFETY: the hook only calls setrlimit(2), fcntl(2) and write(2) on data and
    // descriptors prepared beforehand.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(r) = &nofile {
                libc::setrlimit(libc::RLIMIT_NOFILE, r);
            }
            for fd in std::iter::once(report_fd).chain(gate_fd) {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            cgroup::join_self(&fds)
        });
    }
    let mut started = Instant::now();
    let child = match Child::spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => return Ok(Launch::NotStarted(spawn_failure(&spec.workdir, &e))),
    };
    let pid = child.pid();
    drop(report_w);
    if let (Some((gate_r, gate_w)), Some(at_gate)) = (gate, spec.at_gate) {
        drop(gate_r);
        (at_gate.0)(pid);
        // The end of the pipe opens the gate.
        drop(gate_w);
    }
    let mut reports = spawn::Reports::new(reports);
    let workload = match reports.next_report() {
        Some(Report::Started(workload, forked_ns)) => {
            // When the spawner forked it, not when memtrial read it.
            started = spawn::instant_of(forked_ns).unwrap_or(started);
            workload
        }
        first => {
            let _ = wait_for(child, None);
            return Ok(Launch::NotStarted(format!(
                "could not start {}: {}",
                spec.program.display(),
                not_started(first, spec.limits.pids_max)
            )));
        }
    };
    let (tx, exits) = mpsc::channel::<Exit>();
    std::thread::Builder::new()
        .name("memtrial-wait4".into())
        .spawn(move || {
            if let Some(e) = wait_for(child, Some(reports)) {
                let _ = tx.send(e);
            }
        })
        .map_err(BackendError::Thread)?;
    Ok(Launch::Started(Box::new(LocalRun {
        spawner: pid,
        workload,
        started,
        exits,
        cgroup,
    })))
}

/// Why memtrial's spawner could not be started in `workdir`.
fn spawn_failure(workdir: &std::path::Path, e: &std::io::Error) -> String {
    if workdir.is_dir() {
        format!("could not start memtrial's spawner: {e}")
    } else {
        format!(
            "the working directory {} does not exist ({e})",
            workdir.display()
        )
    }
}

/// Why the spawner did not start the workload, from its first report (`None`: it ended
/// first); `pids_max` is the run's --pids-limit, which a failed fork may have met.
fn not_started(first: Option<Report>, pids_max: Option<u64>) -> String {
    match (first, pids_max) {
        (Some(Report::ExecFailed(libc::EAGAIN)), Some(most)) => format!(
            "{}: the run's cgroup holds at most {most} processes and threads (--pids-limit), \
             memtrial's spawner, which starts the workload there, included; give a higher \
             --pids-limit",
            std::io::Error::from_raw_os_error(libc::EAGAIN),
        ),
        (Some(Report::ExecFailed(e)), _) => std::io::Error::from_raw_os_error(e).to_string(),
        _ => "the spawner ended before it could start it".into(),
    }
}

/// A pipe for the spawner's reports: (read end, write end), both close-on-exec.
fn report_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits for the spawner: the workload's exit and usage as the spawner reported them
/// (the spawner's own exit time stands for it), or, when the spawner could not report
/// (killed), its own exit with no peak.
fn wait_for(mut spawner: Child, reports: Option<spawn::Reports>) -> Option<Exit> {
    let mut reported = None;
    if let Some(mut r) = reports {
        while let Some(rep) = r.next_report() {
            if let Report::Exited(kind, usage, exited_ns) = rep {
                // When the spawner reaped the workload, not when memtrial read it (memtrial
                // may have been stopped meanwhile).
                let at = spawn::instant_of(exited_ns).unwrap_or_else(Instant::now);
                reported = Some((kind, usage, at));
            }
        }
    }
    let ended = spawner.wait().ok()?;
    let (kind, usage, at) = reported.unwrap_or_else(|| {
        let usage = Usage {
            maxrss_bytes: 0,
            ..spawn::usage(&ended.rusage)
        };
        (spawn::exit_kind(ended.status), usage, Instant::now())
    });
    Some(Exit { kind, usage, at })
}

/// A workload started by [`LocalBackend`].
struct LocalRun {
    /// memtrial's spawner: reaped by the wait thread.
    spawner: i32,
    /// The workload's root, leader of its own process group.
    workload: i32,
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
        self.workload
    }

    fn spawner(&self) -> Option<i32> {
        Some(self.spawner)
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

    fn root_ended(&self) -> bool {
        // The spawner exits right after it reaped the workload and reported it: it has
        // exited (not reaped: the wait thread does), or was reaped already, once the root has.
        child::has_exited(self.spawner)
    }

    fn signal(&mut self, sig: i32, pids: &[i32]) {
        // The process group first, then every known member (daemons leave the group with
        // setsid).
        child::kill_group(self.workload, sig);
        for p in pids {
            child::kill(*p, sig);
        }
    }

    fn reap(&mut self, pids: &[i32]) {
        // The spawner is the wait thread's to reap.
        let adopted: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|p| *p != self.spawner)
            .collect();
        child::reap_exited(&adopted);
    }

    fn kill_rest(&mut self, wait: Duration) {
        if let Some(cg) = &self.cgroup {
            cg.kill_all(wait);
        }
    }

    fn cgroup_reader(&self) -> Option<crate::linux::cgroup::CgroupReader> {
        self.cgroup.as_ref().map(RunCgroup::reader)
    }

    fn memory_group(&self) -> Option<(std::path::PathBuf, cgroup::Version)> {
        self.cgroup.as_ref()?.reader().memory_group()
    }
}
