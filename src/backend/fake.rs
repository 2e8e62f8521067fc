//! A scripted backend for tests: no process is started. A [`Script`] says when the
//! "workload" exits and how, whether it obeys SIGTERM, and what its cgroup reports.
//! Every signal it is sent is recorded, so tests can check how a run was stopped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Backend, BackendError, Exit, ExitKind, Launch, LaunchSpec, RunHandle, Usage, Waited};
use crate::linux::cgroup::CgroupFigures;
use crate::probe::{Membership, Probe, RunEnd, Tick};
use crate::record::RunRecord;

/// What the scripted workload does.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    /// Exits by itself this long after the start (`None`: runs until stopped).
    pub exits_after: Option<Duration>,
    /// How it exits by itself.
    pub exit: ExitKind,
    /// Obeys SIGTERM (exits with it); otherwise only SIGKILL ends it.
    pub obeys_sigterm: bool,
    /// OOM kills its cgroup reports (a cgroup probe is offered when set).
    pub oom_kills: Option<u64>,
    /// OOM kills counted outside a cgroup of its own (as in a container), and where.
    pub oom_outside: Option<(u64, String)>,
    /// The program cannot be started: this message.
    pub not_started: Option<String>,
    /// memtrial itself cannot launch anything (a cgroup it cannot set up): this message.
    pub launch_error: Option<String>,
    /// Its `ru_maxrss`.
    pub maxrss_bytes: u64,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            exits_after: Some(Duration::from_millis(30)),
            exit: ExitKind::Code(0),
            obeys_sigterm: true,
            oom_kills: None,
            oom_outside: None,
            not_started: None,
            launch_error: None,
            maxrss_bytes: 1 << 20,
        }
    }
}

/// Plays [`Script`]s; remembers the signals sent.
#[derive(Debug, Default, Clone)]
pub(crate) struct FakeBackend {
    pub script: Script,
    /// Every signal sent to the runs, in order.
    pub signals: Arc<Mutex<Vec<i32>>>,
}

impl FakeBackend {
    pub fn new(script: Script) -> FakeBackend {
        FakeBackend {
            script,
            signals: Arc::default(),
        }
    }

    /// The signals sent so far.
    #[cfg(test)]
    pub(crate) fn signals_sent(&self) -> Vec<i32> {
        self.signals.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Backend for FakeBackend {
    fn launch(&self, _spec: LaunchSpec) -> Result<Launch, BackendError> {
        if let Some(m) = &self.script.launch_error {
            return Err(BackendError::Thread(std::io::Error::other(m.clone())));
        }
        if let Some(m) = &self.script.not_started {
            return Ok(Launch::NotStarted(m.clone()));
        }
        Ok(Launch::Started(Box::new(FakeRun {
            script: self.script.clone(),
            started: Instant::now(),
            ended: None,
            reported: false,
            signals: Arc::clone(&self.signals),
        })))
    }
}

struct FakeRun {
    script: Script,
    started: Instant,
    /// Set when a signal ended it.
    ended: Option<(ExitKind, Instant)>,
    reported: bool,
    signals: Arc<Mutex<Vec<i32>>>,
}

impl FakeRun {
    fn exit_now(&self) -> Option<(ExitKind, Instant)> {
        self.ended.or_else(|| {
            let after = self.script.exits_after?;
            let at = self.started + after;
            (Instant::now() >= at).then_some((self.script.exit, at))
        })
    }
}

impl RunHandle for FakeRun {
    fn started(&self) -> Instant {
        self.started
    }

    fn pid(&self) -> i32 {
        // No such process: PIDs are below 2^22 on Linux.
        i32::MAX
    }

    fn membership(&self) -> Membership {
        Membership::DescendantsOf(i32::MAX)
    }

    fn probes(&self) -> Vec<Box<dyn Probe>> {
        match self.script.oom_kills {
            Some(n) => vec![Box::new(FakeCgroup(n))],
            None => Vec::new(),
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Waited {
        if self.reported {
            return Waited::Lost;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((kind, at)) = self.exit_now() {
                self.reported = true;
                return Waited::Exited(Exit {
                    kind,
                    usage: Usage {
                        maxrss_bytes: self.script.maxrss_bytes,
                        ..Usage::default()
                    },
                    at,
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Waited::Running;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
        }
    }

    fn signal(&mut self, sig: i32, _pids: &[i32]) {
        if let Ok(mut v) = self.signals.lock() {
            v.push(sig);
        }
        let ends = sig == libc::SIGKILL || (sig == libc::SIGTERM && self.script.obeys_sigterm);
        if ends && self.exit_now().is_none() {
            self.ended = Some((ExitKind::Signal(sig), Instant::now()));
        }
    }

    fn reap(&mut self, _pids: &[i32]) {}

    fn kill_rest(&mut self, _wait: Duration) {}

    fn oom_kills(&self) -> Option<(u64, String)> {
        self.script.oom_outside.clone()
    }
}

/// A cgroup that reports OOM kills.
struct FakeCgroup(u64);

impl Probe for FakeCgroup {
    fn observe(&mut self, _tick: &Tick) {}

    fn finish(self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        record.cgroup = Some(CgroupFigures {
            oom_kills: self.0,
            ..CgroupFigures::default()
        });
    }
}
