//! memtrial's child processes: the one place they are waited for, reaped and signalled.
//!
//! A [`Child`] is a process memtrial started — through a `std::process::Command`
//! ([`Child::spawn`]) or a `fork` of its own ([`Child::forked`]) — that only this module
//! reaps (std never waits for it): [`Child::try_wait`] never blocks, [`Child::wait`] does,
//! and both give the exit status with the child's resource usage (`wait4`). A child whose
//! exit was collected, or whose wait failed (`ECHILD`: it was not memtrial's), is never
//! signalled or waited for again: its PID may name another process by then. Processes memtrial did not
//! start but may have to reap — orphans it adopted as a child subreaper — go through
//! [`reap_exited`]; signals to a PID or a process group it does not hold a [`Child`] for
//! through [`kill`] and [`kill_group`].

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStderr, ChildStdout, Command, ExitStatus};
use std::time::Duration;

/// How a child ended and what it used.
#[derive(Clone, Copy)]
pub(crate) struct Ended {
    pub(crate) status: ExitStatus,
    /// The child's own usage and that of the children it waited for (`wait4`).
    pub(crate) rusage: libc::rusage,
}

impl Ended {
    /// User plus system CPU time.
    pub(crate) fn cpu(&self) -> Duration {
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        tv(self.rusage.ru_utime) + tv(self.rusage.ru_stime)
    }
}

enum State {
    Running,
    /// Reaped here: its exit, kept for later asks.
    Ended(Ended),
    /// `wait4` failed with this errno: not memtrial's child (`ECHILD`: reaped elsewhere).
    Gone(i32),
}

/// A child process of memtrial, reaped only through this handle. Dropping it neither
/// kills nor reaps the process.
pub(crate) struct Child {
    pid: i32,
    state: State,
    /// Its stdout and stderr, when they were piped (take them).
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

impl Child {
    /// Starts `cmd`; the child is reaped through the handle, never by std. A piped stdin
    /// is closed.
    pub(crate) fn spawn(cmd: &mut Command) -> io::Result<Child> {
        let mut c = cmd.spawn()?;
        Ok(Child {
            pid: c.id() as i32,
            state: State::Running,
            stdout: c.stdout.take(),
            stderr: c.stderr.take(),
        })
        // `c` is dropped here: std's handle neither waits for nor kills the process.
    }

    /// A child the caller forked itself (`pid` as `fork` returned it in the parent).
    pub(crate) fn forked(pid: i32) -> Child {
        Child {
            pid,
            state: State::Running,
            stdout: None,
            stderr: None,
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Its exit and usage if it has exited (reaping it), `None` while it runs; never
    /// blocks. The exit is kept: a later call gives it again.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<Ended>> {
        self.wait_with(libc::WNOHANG)
    }

    /// Waits for its exit and usage (reaping it); interrupted waits are retried.
    pub(crate) fn wait(&mut self) -> io::Result<Ended> {
        self.wait_with(0)?
            .ok_or_else(|| io::Error::other("wait4 returned without a child"))
    }

    fn wait_with(&mut self, options: libc::c_int) -> io::Result<Option<Ended>> {
        match self.state {
            State::Running => {}
            State::Ended(e) => return Ok(Some(e)),
            State::Gone(errno) => return Err(io::Error::from_raw_os_error(errno)),
        }
        match wait4(self.pid, options) {
            Ok(Some(e)) => {
                self.state = State::Ended(e);
                Ok(Some(e))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.state = State::Gone(e.raw_os_error().unwrap_or(libc::ECHILD));
                Err(e)
            }
        }
    }

    /// Whether its exit was collected, or its wait failed (it was not memtrial's): nothing
    /// more is done to it through the handle.
    pub(crate) fn is_done(&self) -> bool {
        !matches!(self.state, State::Running)
    }

    /// Sends `sig` to it, unless its exit was collected (or it was not memtrial's).
    pub(crate) fn signal(&self, sig: i32) {
        if let State::Running = self.state {
            kill(self.pid, sig);
        }
    }
}

/// `wait4` on `pid` with `options`, retried when interrupted: `None` when `WNOHANG` found
/// it still running.
fn wait4(pid: i32, options: libc::c_int) -> io::Result<Option<Ended>> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data, all zeroes valid; wait4 fills it.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals.
        let r = unsafe { libc::wait4(pid, &mut status, options, &mut rusage) };
        if r == pid {
            return Ok(Some(Ended {
                status: ExitStatus::from_raw(status),
                rusage,
            }));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if r < 0 && e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether memtrial's child `pid` has exited, without reaping it (`WNOWAIT`); one reaped
/// already (`ECHILD`) has too. Never blocks.
pub(crate) fn has_exited(pid: i32) -> bool {
    // SAFETY: siginfo_t is plain data, all zeroes valid; waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local; WNOHANG|WNOWAIT neither blocks nor reaps.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r != 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD);
    }
    // SAFETY: waitid succeeded, so si_pid is set (0 when no child has exited).
    unsafe { info.si_pid() != 0 }
}

/// Reaps those of `pids` that are memtrial's exited children (orphans it adopted as a
/// subreaper); never blocks, and leaves alone what is not its child or still runs.
pub(crate) fn reap_exited(pids: &[i32]) {
    for p in pids.iter().filter(|p| **p > 0) {
        let mut status = 0;
        // SAFETY: a valid pointer to a local; WNOHANG on one PID, no usage wanted.
        unsafe {
            libc::wait4(*p, &mut status, libc::WNOHANG, std::ptr::null_mut());
        }
    }
}

/// Sends `sig` to the process `pid` (nothing for a PID that names no one process).
pub(crate) fn kill(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Sends `sig` to the process group `pgid` (nothing for 0 or 1, which would name
/// memtrial's own group or every process).
pub(crate) fn kill_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Not `sleep` or `sh` for the long child: other tests count this process's `sleep`s.
    #[test]
    fn waits_without_and_with_blocking() {
        let mut c = Child::spawn(Command::new("tail").args(["-f", "/dev/null"])).unwrap();
        assert!(c.try_wait().unwrap().is_none());
        assert!(!c.is_done());
        c.signal(libc::SIGTERM);
        let e = c.wait().unwrap();
        assert_eq!(e.status.signal(), Some(libc::SIGTERM));
        // Kept: asked again, the same exit, and no signal to a PID that may be reused.
        assert_eq!(c.try_wait().unwrap().unwrap().status, e.status);
        assert!(c.is_done());
        c.signal(libc::SIGKILL);

        let mut c = Child::spawn(Command::new("/bin/sh").args(["-c", "exit 3"])).unwrap();
        let e = loop {
            if let Some(e) = c.try_wait().unwrap() {
                break e;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(e.status.code(), Some(3));
        assert!(e.rusage.ru_maxrss > 0);
    }

    #[test]
    fn a_child_reaped_elsewhere_is_gone() {
        let mut c = Child::spawn(&mut Command::new("/bin/true")).unwrap();
        while !has_exited(c.pid()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(has_exited(c.pid()), "not reaped by the look");
        reap_exited(&[c.pid()]);
        assert!(has_exited(c.pid()), "reaped: ECHILD counts as exited");
        let Err(e) = c.wait() else {
            panic!("a child reaped elsewhere was waited for");
        };
        assert_eq!(e.raw_os_error(), Some(libc::ECHILD));
        assert!(c.try_wait().is_err());
        assert!(c.is_done());
    }
}
