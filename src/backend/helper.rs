//! Processes beside the workload: `--before` hooks and `--driver` commands. Each is one
//! string run by `/bin/sh -c` in memtrial's own environment (never the variant's), never
//! in the run's cgroup, in a process group of its own — and kept together so that it and
//! everything it started, daemons that left the group with `setsid` included, are stopped
//! together. A helper never outlives its handle.
//!
//! How a helper is kept together ([`Keeping`]): when memtrial makes cgroups (as root, v1
//! or v2), in a cgroup of its own that is killed whole; otherwise the shell is a child
//! subreaper (what it orphans stays below it while it lives), memtrial is one too (what the
//! shell orphans when it exits comes to memtrial, not to init), and memtrial kills every
//! descendant of the shell it has seen or finds, and every session leader it adopted while
//! the helper ran that carries the helper's mark ([`MARK_VAR`]) in its environment.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::linux::cgroup::{self, RunCgroup};
use crate::linux::child::{self, Child};
use crate::linux::proc;
use crate::probe::Helpers;

/// The variable that marks a helper's processes, `<memtrial pid>-<n>`: without a cgroup,
/// what a helper left in a session of its own is told from the workload's by it.
pub(crate) const MARK_VAR: &str = "MEMTRIAL_HELPER";

/// How often, without a cgroup, the shell's descendants are looked up while it runs.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How a helper's processes are found when it is stopped.
enum Keeping {
    /// A cgroup of its own: everything the helper starts is listed there.
    Cgroup(RunCgroup),
    /// No cgroup: the processes below the shell, by PID and start time, as seen so far.
    Descendants {
        seen: HashSet<(i32, u64)>,
        next_look: Instant,
    },
}

/// A running helper command.
pub(crate) struct Helper {
    child: Child,
    /// Its process group (the shell's pid).
    pgid: i32,
    /// The run's helper processes, where it is hidden from the workload's until reaped.
    helpers: Helpers,
    /// The shell's start time (clock ticks after boot): nothing older is the helper's.
    started_ticks: u64,
    /// `MARK_VAR`'s value for this helper.
    mark: String,
    keeping: Keeping,
    status: Option<ExitStatus>,
}

impl Helper {
    /// Starts `/bin/sh -c command` with `env` added to memtrial's environment, in `group`
    /// when there is one. Its stdout is a pipe when `stdout` is `None` (taken with
    /// [`Helper::take_stdout`]), else `stdout`.
    pub fn start(
        command: &str,
        env: &[(String, String)],
        workdir: &Path,
        stdout: Option<File>,
        stderr: File,
        group: Option<RunCgroup>,
        helpers: &Helpers,
    ) -> std::io::Result<Helper> {
        // What a helper's shell orphans when it exits comes to memtrial, not to init.
        crate::backend::become_subreaper();
        static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mark = format!("{}-{n}", own_pid());
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(workdir)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(MARK_VAR, &mark)
            .stdin(Stdio::null())
            .stdout(match stdout {
                Some(f) => Stdio::from(f),
                None => Stdio::piped(),
            })
            .stderr(Stdio::from(stderr))
            .process_group(0);
        let fds = match &group {
            Some(g) => g.open_procs_files().map_err(std::io::Error::other)?,
            None => Vec::new(),
        };
        // SAFETY: the hook only calls write(2) (joining the cgroup) or prctl(2) on data
        // prepared beforehand.
        unsafe {
            cmd.pre_exec(move || {
                if fds.is_empty() {
                    // Without a cgroup the shell keeps its orphans below it while it lives.
                    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
                    Ok(())
                } else {
                    cgroup::join_self(&fds)
                }
            });
        }
        let child = Child::spawn(&mut cmd)?;
        let pgid = child.pid();
        // Without a cgroup a run's processes are memtrial's descendants: the helper and
        // what it starts are not the workload's.
        helpers.hide(pgid);
        let started_ticks = proc::read_stat(pgid).map_or(0, |s| s.starttime_ticks);
        let keeping = match group {
            Some(g) => Keeping::Cgroup(g),
            None => Keeping::Descendants {
                seen: HashSet::new(),
                next_look: Instant::now(),
            },
        };
        Ok(Helper {
            child,
            pgid,
            helpers: helpers.clone(),
            started_ticks,
            mark,
            keeping,
            status: None,
        })
    }

    pub(crate) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The shell's exit, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.look();
            self.status = self.child.try_wait().ok().flatten().map(|e| e.status);
            if self.status.is_some() {
                // Reaped: its PID may name a process of the run again.
                self.helpers.unhide(self.pgid);
            }
        }
        self.status
    }

    /// Without a cgroup: notes the shell's descendants (at most every [`LOOK_EVERY`]).
    fn look(&mut self) {
        let Keeping::Descendants { seen, next_look } = &mut self.keeping else {
            return;
        };
        if Instant::now() < *next_look {
            return;
        }
        *next_look = Instant::now() + LOOK_EVERY;
        let mut frontier = vec![self.pgid];
        while let Some(p) = frontier.pop() {
            for c in proc::children(p) {
                if let Ok(st) = proc::read_stat(c) {
                    if seen.insert((c, st.starttime_ticks)) {
                        frontier.push(c);
                    }
                }
            }
        }
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

    /// Stops the whole helper: SIGTERM to its group, up to `grace` for the shell to go,
    /// then SIGKILL to whatever of the helper is left, daemons included. Returns the
    /// shell's exit.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.exited().is_none() {
            self.killpg(libc::SIGTERM);
            self.wait_for(grace);
        }
        self.kill_all();
        self.wait_for(Duration::from_secs(2))
    }

    fn killpg(&self, sig: i32) {
        // The group is ours (made at spawn).
        child::kill_group(self.pgid, sig);
    }

    /// SIGKILL to everything of the helper's, and the reaping of what memtrial adopted.
    fn kill_all(&mut self) {
        self.killpg(libc::SIGKILL);
        let started = self.started_ticks;
        let mark = self.mark.clone();
        let shell = self.pgid;
        let shell_alive = self.status.is_none();
        match &mut self.keeping {
            Keeping::Cgroup(g) => {
                // The shell is its handle's to reap; what else was in the group and came to
                // memtrial is reaped here.
                let pids: Vec<i32> = g.procs().into_iter().filter(|p| *p != shell).collect();
                g.kill_all(Duration::from_secs(2));
                child::reap_exited(&pids);
            }
            Keeping::Descendants { seen, .. } => {
                // Killed processes cannot fork: a few rounds catch what was forked
                // between a look and the signals.
                for _ in 0..20 {
                    let table = process_table();
                    let mut targets = HashSet::new();
                    if shell_alive {
                        targets.extend(descendants(&table, &[shell]));
                    }
                    let live_seen: Vec<i32> = seen
                        .iter()
                        .filter(|(p, t)| table.iter().any(|e| e.pid == *p && e.start == *t))
                        .map(|(p, _)| *p)
                        .collect();
                    targets.extend(live_seen.iter().map(|p| (*p, 0)));
                    targets.extend(descendants(&table, &live_seen));
                    let adopted = adopted_session_leaders(&table, started, &mark);
                    targets.extend(adopted.iter().map(|p| (*p, 0)));
                    targets.extend(descendants(&table, &adopted));
                    let pids: Vec<i32> = targets
                        .into_iter()
                        .map(|(p, _)| p)
                        .filter(|p| *p != shell)
                        .filter(|p| table.iter().any(|e| e.pid == *p && e.state != 'Z'))
                        .collect();
                    let zombies: Vec<i32> = table
                        .iter()
                        .filter(|e| e.state == 'Z' && e.ppid == own_pid() && e.pid != shell)
                        .filter(|e| seen.iter().any(|(p, t)| *p == e.pid && *t == e.start))
                        .map(|e| e.pid)
                        .collect();
                    child::reap_exited(&zombies);
                    if pids.is_empty() {
                        break;
                    }
                    for p in &pids {
                        child::kill(*p, libc::SIGKILL);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    child::reap_exited(&pids);
                }
            }
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.kill_all();
        if self.status.is_none() {
            let _ = self.child.wait();
            self.helpers.unhide(self.pgid);
        }
    }
}

fn own_pid() -> i32 {
    std::process::id() as i32
}

/// One process as the helper's stop sees it.
struct Entry {
    pid: i32,
    ppid: i32,
    start: u64,
    state: char,
}

fn process_table() -> Vec<Entry> {
    proc::list_pids()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pid| proc::read_stat(pid).ok())
        .map(|s| Entry {
            pid: s.pid,
            ppid: s.ppid,
            start: s.starttime_ticks,
            state: s.state,
        })
        .collect()
}

/// Every descendant of `roots` in `table`, by PID and start time.
fn descendants(table: &[Entry], roots: &[i32]) -> Vec<(i32, u64)> {
    let mut found = Vec::new();
    let mut frontier: Vec<i32> = roots.to_vec();
    let mut visited: HashSet<i32> = roots.iter().copied().collect();
    while let Some(parent) = frontier.pop() {
        for e in table.iter().filter(|e| e.ppid == parent) {
            if visited.insert(e.pid) {
                found.push((e.pid, e.start));
                frontier.push(e.pid);
            }
        }
    }
    found
}

/// memtrial's children that lead a session of their own, started after `since` and
/// carrying this helper's `mark`: memtrial never starts one itself, so they are orphans it
/// adopted as a subreaper — here, what the helper's shell left behind when it exited (a
/// workload's daemon has no mark; one that cleared its environment is the run's, stopped
/// with the run).
fn adopted_session_leaders(table: &[Entry], since: u64, mark: &str) -> Vec<i32> {
    // SAFETY: getsid has no preconditions.
    let own_session = unsafe { libc::getsid(0) };
    table
        .iter()
        .filter(|e| e.ppid == own_pid() && e.start >= since && e.state != 'Z')
        .filter(|e| {
            // SAFETY: getsid has no preconditions.
            let sid = unsafe { libc::getsid(e.pid) };
            sid == e.pid && sid != own_session
        })
        .filter(|e| {
            proc::read_environ(e.pid)
                .is_ok_and(|env| env.iter().any(|(k, v)| k == MARK_VAR && v == mark))
        })
        .map(|e| e.pid)
        .collect()
}

/// How a helper ended, in a few words.
pub(crate) fn exit_words(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!(
            "killed by signal {sig} ({})",
            crate::linux::proc::signal_name(sig)
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

/// Runs a started hook to completion: its exit, or `None` when it was stopped (timeout
/// or `stop()`), with how long it ran.
pub(crate) fn run_to_end(
    mut h: Helper,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> (Option<ExitStatus>, Duration) {
    let t = Instant::now();
    loop {
        if let Some(s) = h.exited() {
            // Anything it left running, daemons included, goes with it.
            h.kill_all();
            return (Some(s), t.elapsed());
        }
        if t.elapsed() >= timeout || stop() {
            h.stop(Duration::from_secs(2));
            return (None, t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
