//! Drivers: what happens to the workload while it runs. A batch command is only waited
//! for; a server is made ready, loaded and cooled down on a thread of its own, and its
//! end tells memtrial to stop the server. A worker's `--driver` runs beside the workload
//! and its exit ends the run ([`super::worker`]); a service runs for its `--duration`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::server;
use super::status::{exit_phrase, DriverOutcome, EndedBy};
use super::worker::{DriverSetup, ServiceDriver, WorkerDriver};
use super::TrialError;
use crate::backend::ExitKind;
use crate::load::Source;
use crate::plan::{Plan, ServerPlan};
use crate::record::{DriverFigures, LoadFigures, TreeSample};

/// The driver of one run.
pub(crate) enum Driver {
    /// A batch command: nothing to drive; its exit ends the run.
    Wait,
    /// A server under HTTP load.
    Http(HttpDriver),
    /// A worker driven by the user's `--driver` command.
    Worker(Box<WorkerDriver>),
    /// A service run for `--duration`, then stopped.
    Service(ServiceDriver),
}

/// What the driver made of a run.
pub(crate) struct Finished {
    pub outcome: DriverOutcome,
    /// A server trial's load figures.
    pub load: Option<LoadFigures>,
    /// A worker's or service's driven phase and figures.
    pub driver: Option<DriverFigures>,
    /// What disturbed the driver, for the run's message (a stalled load generator).
    pub disturbed: Option<String>,
}

/// What a driver needs besides the plan.
pub(crate) struct DriverStart<'a> {
    pub port: Option<u16>,
    pub source: Option<&'a Source>,
    /// The environment naming the run, for a `--driver` (on top of memtrial's own).
    pub env: Vec<(String, String)>,
    pub log_stem: &'a std::path::Path,
    /// Where a `--driver` gets a cgroup of its own (see [`crate::backend::helper`]).
    pub backend: &'a dyn crate::backend::Backend,
    /// The name of that cgroup.
    pub group_name: String,
    /// The run's helper processes, left out of its processes.
    pub helpers: crate::probe::Helpers,
}

pub(crate) struct HttpDriver {
    thread: JoinHandle<Driven>,
    halt: Arc<AtomicBool>,
    root_gone: Arc<AtomicBool>,
    ready_timeout: Duration,
}

impl Driver {
    /// Starts the driver for a run whose clock started at `t0`.
    pub fn start(plan: &Plan, s: DriverStart, t0: Instant) -> Result<Driver, TrialError> {
        if let Some(w) = &plan.worker {
            let bound = w.duration_ms.map(Duration::from_millis);
            if let Some(cmd) = &w.driver {
                let command = match s.port {
                    Some(p) => crate::plan::substitute_quoted(cmd, p),
                    None => cmd.clone(),
                };
                let group = s.backend.helper_cgroup(&s.group_name)?;
                let d = WorkerDriver::start(
                    DriverSetup {
                        group,
                        command: &command,
                        env: s.env,
                        workdir: &plan.workdir,
                        log_stem: s.log_stem,
                        bound,
                        cooldown: Duration::from_millis(w.cooldown_ms),
                        grace: plan.grace(),
                        helpers: s.helpers.clone(),
                    },
                    t0,
                )
                .map_err(TrialError::Driver)?;
                return Ok(Driver::Worker(Box::new(d)));
            }
            if let Some(duration) = bound {
                return Ok(Driver::Service(ServiceDriver {
                    t0,
                    duration,
                    gone_at: std::cell::Cell::new(None),
                }));
            }
        }
        let (Some(sp), Some(port), Some(source)) = (plan.server.as_ref(), s.port, s.source) else {
            return Ok(Driver::Wait);
        };
        let halt = Arc::new(AtomicBool::new(false));
        let root_gone = Arc::new(AtomicBool::new(false));
        let (sp2, source) = (sp.clone(), source.clone());
        let (h, g) = (Arc::clone(&halt), Arc::clone(&root_gone));
        let thread = std::thread::Builder::new()
            .name("memtrial-driver".into())
            .spawn(move || drive(&sp2, port, source, t0, &h, &g))
            .map_err(TrialError::Thread)?;
        Ok(Driver::Http(HttpDriver {
            thread,
            halt,
            root_gone,
            ready_timeout: Duration::from_millis(sp.ready_timeout_ms),
        }))
    }

    /// The driven phase is over: memtrial should stop the workload.
    pub fn finished(&self) -> bool {
        match self {
            Driver::Wait => false,
            Driver::Http(d) => d.thread.is_finished(),
            Driver::Worker(d) => d.finished(),
            Driver::Service(d) => d.finished(),
        }
    }

    /// Whether this driver may end the run by itself (everything but a batch command).
    pub(crate) fn may_finish(&self) -> bool {
        !matches!(self, Driver::Wait)
    }

    /// memtrial is ending the run: stop driving.
    pub(crate) fn halt(&self) {
        match self {
            Driver::Http(d) => d.halt.store(true, Ordering::SeqCst),
            Driver::Worker(d) => d.halt(),
            Driver::Wait | Driver::Service(_) => {}
        }
    }

    /// The workload's root has exited.
    pub(crate) fn root_gone(&self) {
        match self {
            Driver::Http(d) => {
                d.root_gone.store(true, Ordering::SeqCst);
                d.halt.store(true, Ordering::SeqCst);
            }
            Driver::Worker(d) => d.root_gone(),
            Driver::Service(d) => d.root_gone(),
            Driver::Wait => {}
        }
    }

    /// Waits for the driver; what it made of the run, and the load's figures (with the
    /// tree's RSS at the end of the load and of the cool-down, from `samples`).
    pub fn finish(
        self,
        ended_by: Option<EndedBy>,
        exit: Option<ExitKind>,
        samples: &[TreeSample],
    ) -> Finished {
        let worker = |(outcome, driver)| Finished {
            outcome,
            load: None,
            driver,
            disturbed: None,
        };
        let (outcome, load, disturbed) = match self {
            Driver::Wait => (DriverOutcome::None, None, None),
            Driver::Worker(d) => return worker(d.finish(ended_by, exit)),
            Driver::Service(d) => return worker(d.finish(ended_by)),
            Driver::Http(d) => d.finish(ended_by, exit, samples),
        };
        Finished {
            outcome,
            load,
            driver: None,
            disturbed,
        }
    }
}

impl HttpDriver {
    fn finish(
        self,
        ended_by: Option<EndedBy>,
        exit: Option<ExitKind>,
        samples: &[TreeSample],
    ) -> (DriverOutcome, Option<LoadFigures>, Option<String>) {
        let d = self;
        d.root_gone.store(true, Ordering::SeqCst);
        d.halt.store(true, Ordering::SeqCst);
        let driven = d
            .thread
            .join()
            .unwrap_or(Driven::Failed("the load driver panicked".into()));
        let exited = exit_phrase(exit);
        let failed = |m: String| (DriverOutcome::Failed(m), None, None);
        match driven {
            Driven::Done(done) => {
                let open = done.result.target_rate.is_some();
                let disturbed = done
                    .result
                    .client_stall
                    .map(|s| format!("disturbed: {}", s.describe(open)));
                (DriverOutcome::Done, Some(done.figures(samples)), disturbed)
            }
            Driven::NotReady(server::NotReady::TimedOut { last }) => failed(format!(
                "the server never became ready within {} (last: {last})",
                humantime::format_duration(d.ready_timeout)
            )),
            Driven::NotReady(server::NotReady::Exited) => {
                failed(format!("the server exited before it was ready ({exited})"))
            }
            Driven::NotReady(server::NotReady::Interrupted) => (DriverOutcome::Stopped, None, None),
            Driven::Interrupted { at } if ended_by.is_none() => failed(format!(
                "the server exited during the load, {at:.1} s into the run ({exited})"
            )),
            Driven::Interrupted { .. } => (DriverOutcome::Stopped, None, None),
            Driven::Failed(m) => failed(m),
        }
    }
}

/// What the server's driver saw.
enum Driven {
    NotReady(server::NotReady),
    /// The load was stopped before its end (the server died, or memtrial was stopped).
    Interrupted {
        at: f64,
    },
    Done(Box<DriveDone>),
    Failed(String),
}

struct DriveDone {
    ready_seconds: f64,
    load_start: f64,
    load_end: f64,
    cooldown_end: f64,
    result: crate::load::LoadResult,
}

impl DriveDone {
    fn figures(&self, samples: &[TreeSample]) -> LoadFigures {
        let rss_at = |t: f64| {
            samples
                .iter()
                .rev()
                .find(|s| s.t_seconds <= t)
                .map(|s| s.rss_bytes)
        };
        LoadFigures::new(
            &self.result,
            self.ready_seconds,
            self.load_start,
            self.load_end,
            self.cooldown_end,
            rss_at(self.load_end),
            rss_at(self.cooldown_end),
        )
    }
}

/// Readiness, then the load (warm-up and measured), then the cool-down.
fn drive(
    sp: &ServerPlan,
    port: u16,
    source: Source,
    t0: Instant,
    halt: &AtomicBool,
    root_gone: &AtomicBool,
) -> Driven {
    let url = match crate::load::parse_url(&crate::plan::substitute(&sp.url, port)) {
        Ok(u) => u,
        Err(e) => return Driven::Failed(e),
    };
    let addr = match url.socket_addr() {
        Ok(a) => a,
        Err(e) => return Driven::Failed(e),
    };
    let path = sp
        .ready_path
        .clone()
        .unwrap_or_else(|| url.path_and_query.clone());
    let ready = match server::wait_ready(
        addr,
        &url.host_header(),
        &path,
        Duration::from_millis(sp.ready_timeout_ms),
        &mut || !root_gone.load(Ordering::SeqCst),
        &|| halt.load(Ordering::SeqCst),
    ) {
        Ok(r) => r,
        Err(e) => return Driven::NotReady(e),
    };
    let spec = match server::load_spec(sp, port, source) {
        Ok(s) => s,
        Err(e) => return Driven::Failed(e),
    };
    let load_start = t0.elapsed().as_secs_f64();
    let result = match crate::load::run(&spec, t0, halt) {
        Ok(r) => r,
        Err(e) => return Driven::Failed(format!("load generator: {e}")),
    };
    let load_end = t0.elapsed().as_secs_f64();
    if result.stopped_early {
        return Driven::Interrupted { at: load_end };
    }
    let cool = Instant::now() + Duration::from_millis(sp.cooldown_ms);
    while Instant::now() < cool {
        if halt.load(Ordering::SeqCst) {
            return Driven::Interrupted {
                at: t0.elapsed().as_secs_f64(),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Driven::Done(Box::new(DriveDone {
        ready_seconds: ready.after.as_secs_f64(),
        load_start,
        load_end,
        cooldown_end: t0.elapsed().as_secs_f64(),
        result,
    }))
}
