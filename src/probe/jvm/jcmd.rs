//! One `jcmd` read in flight: started, drained without blocking, collected or killed.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::linux::child::Child;
use crate::probe::tree::Helpers;

use super::*;

/// One jcmd, started and not yet collected.
pub(super) struct InFlight {
    /// Owns the pipes; reaped through the handle, never by std.
    pub(super) child: Child,
    /// Where it is hidden from the run's processes until reaped.
    pub(super) helpers: Helpers,
    pub(super) out: Vec<u8>,
    pub(super) err: Vec<u8>,
    pub(super) started: Instant,
    pub(super) killed: bool,
}

/// A finished jcmd.
pub(super) struct Finished {
    pub(super) ok: bool,
    pub(super) killed: bool,
    pub(super) out: String,
    pub(super) err: String,
    pub(super) cpu: Duration,
}

pub(super) fn set_nonblocking(fd: i32) {
    // SAFETY: fcntl on a pipe descriptor we own; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// Reads what is there without waiting (the pipes are non-blocking).
pub(super) fn drain(r: &mut impl Read, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

impl InFlight {
    pub(super) fn start(jcmd: &Path, pid: i32, helpers: &Helpers) -> std::io::Result<InFlight> {
        let mut cmd = Command::new(jcmd);
        cmd.args(JCMD_JVM_OPTIONS)
            .arg(pid.to_string())
            .args(["VM.native_memory", "summary"])
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("_JAVA_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setpriority is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::setpriority(libc::PRIO_PROCESS, 0, 10);
                Ok(())
            });
        }
        let child = Child::spawn(&mut cmd)?;
        helpers.hide(child.pid());
        for fd in [
            child.stdout.as_ref().map(|o| o.as_raw_fd()),
            child.stderr.as_ref().map(|e| e.as_raw_fd()),
        ]
        .into_iter()
        .flatten()
        {
            set_nonblocking(fd);
        }
        Ok(InFlight {
            child,
            helpers: helpers.clone(),
            out: Vec::new(),
            err: Vec::new(),
            started: Instant::now(),
            killed: false,
        })
    }

    pub(super) fn drain(&mut self) {
        if let Some(o) = self.child.stdout.as_mut() {
            drain(o, &mut self.out);
        }
        if let Some(e) = self.child.stderr.as_mut() {
            drain(e, &mut self.err);
        }
    }

    /// Collects jcmd if it exited (killing it once it is late); never waits.
    pub(super) fn poll(&mut self) -> Option<Finished> {
        self.drain();
        // Its exit, or a failed wait (not ours any more): either way it is done.
        let ended = match self.child.try_wait() {
            Ok(None) => {
                if !self.killed && self.started.elapsed() > TIMEOUT {
                    self.child.signal(libc::SIGKILL);
                    self.killed = true;
                }
                return None;
            }
            Ok(Some(e)) => Some(e),
            Err(_) => None,
        };
        self.helpers.unhide(self.child.pid());
        self.drain();
        Some(Finished {
            ok: ended.is_some_and(|e| e.status.success()),
            killed: self.killed,
            out: String::from_utf8_lossy(&self.out).into_owned(),
            err: String::from_utf8_lossy(&self.err).into_owned(),
            cpu: ended.map_or(Duration::ZERO, |e| e.cpu()),
        })
    }
}

impl Drop for InFlight {
    /// A read still running when the run ends is killed and reaped (quick after SIGKILL).
    fn drop(&mut self) {
        if self.child.is_done() {
            // Collected by poll, and unhidden then: its PID may be another helper's now.
            return;
        }
        self.child.signal(libc::SIGKILL);
        let _ = self.child.wait();
        self.helpers.unhide(self.child.pid());
    }
}
