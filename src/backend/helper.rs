//! Processes beside the workload: `--before` hooks and `--driver` commands. Each is one
//! string run by `/bin/sh -c` in memtrial's own environment (never the variant's) and
//! memtrial's own cgroup (never the run's), in a process group of its own so that it and
//! everything it started can be stopped together. A helper never outlives its handle.

use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running helper command.
pub struct Helper {
    child: Child,
    /// Its process group (the shell's pid).
    pgid: i32,
    status: Option<ExitStatus>,
}

impl Helper {
    /// Starts `/bin/sh -c command` with `env` added to memtrial's environment. Its stdout
    /// is a pipe when `pipe_stdout` (taken with [`Helper::take_stdout`]), else `stdout`.
    pub fn start(
        command: &str,
        env: &[(String, String)],
        workdir: &Path,
        stdout: Option<File>,
        stderr: File,
    ) -> std::io::Result<Helper> {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(workdir)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(match stdout {
                Some(f) => Stdio::from(f),
                None => Stdio::piped(),
            })
            .stderr(Stdio::from(stderr))
            .process_group(0);
        let child = cmd.spawn()?;
        let pgid = child.id() as i32;
        Ok(Helper {
            child,
            pgid,
            status: None,
        })
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The shell's exit, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `wait` for the shell's exit.
    pub fn wait_for(&mut self, wait: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the whole group: SIGTERM, up to `grace` for the shell to go, then SIGKILL
    /// to whatever of the group is left. Returns the shell's exit.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.exited().is_none() {
            self.killpg(libc::SIGTERM);
            self.wait_for(grace);
        }
        self.killpg(libc::SIGKILL);
        self.wait_for(Duration::from_secs(2))
    }

    fn killpg(&self, sig: i32) {
        // SAFETY: killpg only sends a signal; the group is ours (made at spawn).
        unsafe {
            libc::killpg(self.pgid, sig);
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.killpg(libc::SIGKILL);
        if self.status.is_none() {
            let _ = self.child.wait();
        }
    }
}

/// How a helper ended, in a few words.
pub fn exit_words(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!(
            "killed by signal {sig} ({})",
            crate::trial::signal_name(sig)
        ),
        _ => "an unknown exit".into(),
    }
}

/// The head of a helper's stderr file, for a message: at most `max` bytes, trimmed.
pub fn head(path: &Path, max: usize) -> String {
    let mut buf = Vec::new();
    if let Ok(f) = File::open(path) {
        let _ = f.take(max as u64).read_to_end(&mut buf);
    }
    let text = String::from_utf8_lossy(&buf);
    let text = text.trim();
    if buf.len() >= max {
        format!("{text}…")
    } else {
        text.to_string()
    }
}

/// Runs a hook to completion: its exit, or `None` when it was stopped (timeout or
/// `stop()`), with how long it ran.
pub fn run_to_end(
    command: &str,
    env: &[(String, String)],
    workdir: &Path,
    stdout: File,
    stderr: File,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> std::io::Result<(Option<ExitStatus>, Duration)> {
    let t = Instant::now();
    let mut h = Helper::start(command, env, workdir, Some(stdout), stderr)?;
    loop {
        if let Some(s) = h.exited() {
            // Anything it left running in its group goes with it.
            h.killpg(libc::SIGKILL);
            return Ok((Some(s), t.elapsed()));
        }
        if t.elapsed() >= timeout || stop() {
            h.stop(Duration::from_secs(2));
            return Ok((None, t.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
