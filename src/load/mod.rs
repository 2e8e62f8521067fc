//! The HTTP load generator: closed loop (wrk) and open loop at a fixed rate without
//! coordinated omission (wrk2), from one URL, a targets file or a replayed access log.
//!
//! Each worker thread runs its own `mio` event loop over its share of the keep-alive
//! connections, sends pre-serialised request bytes, parses responses with `httparse`
//! into reused buffers, and records latency into its own HDR histograms (one for the
//! whole run, one for the current second). Once a second each worker merges its
//! second's histogram into a shared slot; nothing is sent per request and memory does
//! not grow with the number of requests. See `docs/load.md`.

pub mod accesslog;
mod fds;
pub mod http;
mod seconds;
pub mod source;
pub mod summary;
pub mod targets;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

pub(crate) use accesslog::DEFAULT_METHODS;
pub use accesslog::{parse_access_log, ReplayLog};
pub use http::{parse_url, HttpUrl, Method, Request};
pub(crate) use targets::load_targets_file;
pub use targets::{parse_targets, TargetsError};

pub(crate) use fds::{check_fd_limit, original_nofile};
pub use fds::{ensure_fd_limit, FdLimitError};
pub(crate) use seconds::Seconds;
pub use seconds::{RunOptions, SecondReport};

/// Where the requests come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The same request again and again.
    Single(Request),
    /// Round-robin over the list, in the same order every run.
    List(Vec<Request>),
    /// A replayed log: requests with their offsets from the first. With `speed` the
    /// log's own timing drives an open loop (offsets divided by `speed`; the log starts
    /// over when it runs out); with `None` the requests go as fast as `mode` allows.
    Replay {
        entries: Vec<(Duration, Request)>,
        speed: Option<f64>,
    },
}

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Each connection sends its next request when the previous response is complete.
    Closed { connections: usize },
    /// Requests on a fixed schedule of `rate_per_sec` in total; latency counts from
    /// the intended send time. `connections` is the most requests in flight.
    Open {
        rate_per_sec: f64,
        connections: usize,
    },
}

impl Mode {
    pub fn connections(&self) -> usize {
        match *self {
            Mode::Closed { connections } | Mode::Open { connections, .. } => connections,
        }
    }
}

/// One load run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    /// The `Host` header, e.g. `127.0.0.1:8080`.
    pub host_header: String,
    pub source: Source,
    pub mode: Mode,
    /// Worker threads (at most one per connection).
    pub threads: usize,
    /// Measured time, after the warm-up.
    pub duration: Duration,
    /// Load before the measurement, excluded from every figure.
    pub warmup: Duration,
    /// A request (or connect) not complete after this long is a timeout.
    pub timeout: Duration,
}

/// Invalid specs and failures to start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid load: {0}")]
    Invalid(String),
    #[error("cannot start the load generator: {0}")]
    Io(#[from] std::io::Error),
    #[error("a load worker thread panicked")]
    WorkerPanicked,
}

/// Failures kept apart by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Errors {
    /// Requests that found no connection: refused, unreachable, or not established within
    /// the timeout. One per request, not per attempt: in an open loop each request due
    /// while no connection could be made; in a closed loop each failed attempt (the
    /// connection's next request).
    pub connect: u64,
    /// Requests without a complete response within the timeout.
    pub timeout: u64,
    /// Responses with a 4xx status (also counted in `requests`).
    pub status_4xx: u64,
    /// Responses with a 5xx status (also counted in `requests`).
    pub status_5xx: u64,
    /// Anything else: reset or closed connections, malformed responses.
    pub other: u64,
}

impl Errors {
    fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.timeout += o.timeout;
        self.status_4xx += o.status_4xx;
        self.status_5xx += o.status_5xx;
        self.other += o.other;
    }
}

/// One second of the measured load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecondStats {
    /// Start of the interval, in seconds since the `t0` given to [`run`].
    pub t_seconds: f64,
    /// Length of the interval (1 s, the last one may be shorter).
    pub seconds: f64,
    /// Responses completed in the interval (any status).
    pub requests: u64,
    pub errors_connect: u64,
    pub errors_timeout: u64,
    pub errors_other: u64,
    pub http_4xx: u64,
    pub http_5xx: u64,
    /// Latency percentiles of the interval's responses (0 when there were none).
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// The figures of a load run. Warm-up is excluded from all of them.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    /// Responses completed while measuring (any status).
    pub requests: u64,
    pub throughput_rps: f64,
    pub errors: Errors,
    /// Why the first `other` failure happened (e.g. "response with more than 1024
    /// header lines"); absent when there was none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_example: Option<String>,
    /// Latency of every counted response in microseconds (1 µs to 1 h, 3 significant
    /// digits); from the intended send time in open loop.
    #[serde(skip)]
    pub latency: Histogram<u64>,
    pub latency_mean_ms: f64,
    pub latency_p50_ms: f64,
    pub latency_p90_ms: f64,
    pub latency_p95_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
    pub latency_max_ms: f64,
    pub per_second: Vec<SecondStats>,
    /// The open-loop target, requests per second (None in a closed loop).
    pub target_rate: Option<f64>,
    /// Responses per second actually completed (equals `throughput_rps`).
    pub achieved_rate: f64,
    /// Bytes read from the server while measuring (heads and bodies).
    pub bytes_received: u64,
    /// CPU time of the generator's threads while measuring.
    pub client_cpu_seconds: f64,
    /// The busiest generator thread's CPU time over the measured wall time.
    pub client_max_thread_busy: f64,
    /// True when a generator thread was busy over 90% of the time: then the figures
    /// measure the client as much as the server.
    pub client_saturated: bool,
    pub threads: usize,
    pub connections: usize,
    /// Wall time measured (shorter than asked when stopped early); seconds in JSON.
    #[serde(rename = "duration_measured_seconds", serialize_with = "as_seconds")]
    pub duration_measured: Duration,
    /// True when `stop` ended the run before its duration.
    pub stopped_early: bool,
    /// The longest time a generator thread did not run when it meant to (stopped, or
    /// waiting for a CPU), when longer than 100 ms; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_stall: Option<ClientStall>,
}

/// A generator thread did not run when it meant to: requests due meanwhile were sent late,
/// so the rate fell and (open loop) their latency includes the client's own delay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClientStall {
    /// How long, within the measurement.
    pub seconds: f64,
    /// When it ended, on the caller's clock (`t0`).
    pub until_seconds: f64,
}

impl ClientStall {
    /// The stall in a sentence (`open`: an open loop, whose latency counts from the
    /// intended send time).
    pub fn describe(&self, open: bool) -> String {
        format!(
            "memtrial's load generator did not run for {:.2} s until {:.1} s into the run (stopped or starved of CPU): no request was sent meanwhile, so the load's rate{} includes memtrial's own delay",
            self.seconds,
            self.until_seconds,
            if open {
                " and the latency of the requests due meanwhile"
            } else {
                ""
            }
        )
    }
}

fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Busy fraction of a generator thread above which the client counts as saturated.
pub(crate) const SATURATION: f64 = 0.9;

const HIST_MAX_US: u64 = 3_600_000_000;

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("static histogram bounds are valid")
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Checks a spec before anything starts.
pub fn validate(spec: &LoadSpec) -> Result<(), LoadError> {
    let bad = |m: String| Err(LoadError::Invalid(m));
    let conns = spec.mode.connections();
    if conns == 0 {
        return bad("connections must be at least 1".into());
    }
    if spec.threads == 0 {
        return bad("threads must be at least 1".into());
    }
    if spec.threads > conns {
        return bad(format!(
            "{} threads for {conns} connections: every thread needs a connection; use at most {conns} threads",
            spec.threads
        ));
    }
    if spec.duration.is_zero() {
        return bad("the duration must be longer than 0".into());
    }
    if spec
        .warmup
        .checked_add(spec.duration)
        .is_none_or(|d| d > Duration::from_secs(366 * 24 * 3600))
    {
        return bad("the warm-up and duration together must be at most a year".into());
    }
    if spec.timeout.is_zero() {
        return bad("the timeout must be longer than 0".into());
    }
    if let Mode::Open { rate_per_sec, .. } = spec.mode {
        if !(rate_per_sec.is_finite() && rate_per_sec > 0.0) {
            return bad(format!("rate {rate_per_sec} is not a positive number"));
        }
    }
    check_fd_limit(conns, spec.threads).map_err(|e| LoadError::Invalid(e.to_string()))?;
    match &spec.source {
        Source::Single(_) => {}
        Source::List(l) if l.is_empty() => return bad("the request list is empty".into()),
        Source::List(_) => {}
        Source::Replay { entries, speed } => {
            if entries.is_empty() {
                return bad("the replay log has no requests".into());
            }
            if let Some(s) = speed {
                if !(s.is_finite() && *s > 0.0) {
                    return bad(format!("speed {s} is not a positive number"));
                }
                if matches!(spec.mode, Mode::Open { .. }) {
                    return bad("a replay with a speed follows the log's timing; a rate cannot be given too".into());
                }
            }
        }
    }
    Ok(())
}

/// The shared, read-only plan every worker follows.
pub(crate) struct Plan {
    /// Serialised requests; the k-th request overall is `requests[k % len]`.
    pub requests: Vec<Box<[u8]>>,
    /// Whether each request is a HEAD (its response has no body).
    pub head: Vec<bool>,
    pub schedule: Schedule,
    pub begin: Instant,
    pub measure_start: Instant,
    pub measure_end: Instant,
    pub threads: usize,
    pub timeout: Duration,
    pub addr: SocketAddr,
}

/// When the k-th request overall is meant to be sent (None: when a connection is free).
pub(crate) enum Schedule {
    Closed,
    Rate {
        per_sec: f64,
    },
    Log {
        offsets: Vec<Duration>,
        speed: f64,
        span: Duration,
    },
}

impl Schedule {
    /// How many requests the schedule means to have sent in its first `secs` seconds
    /// (None in a closed loop, which sends as fast as responses come).
    pub(crate) fn due_before(&self, secs: f64) -> Option<u64> {
        if secs <= 0.0 {
            return Some(0);
        }
        match self {
            Schedule::Closed => None,
            // Request k is due at k / rate.
            Schedule::Rate { per_sec } => Some((secs * per_sec).ceil() as u64),
            Schedule::Log {
                offsets,
                speed,
                span,
            } => {
                let at = secs * speed;
                let span = span.as_secs_f64();
                let rounds = (at / span).floor();
                let rest = at - rounds * span;
                let within = offsets.partition_point(|o| o.as_secs_f64() < rest);
                Some(rounds as u64 * offsets.len() as u64 + within as u64)
            }
        }
    }
}

/// How many requests `spec`'s schedule means to have sent in its first `secs` seconds
/// after the warm-up; None in a closed loop. Loads that share the schedule's start (a
/// fan-out) are all owed this many.
pub fn due_before(spec: &LoadSpec, secs: f64) -> Option<u64> {
    let (_, schedule) = requests_and_schedule(spec);
    let w = spec.warmup.as_secs_f64();
    Some(schedule.due_before(w + secs)? - schedule.due_before(w)?)
}

impl Plan {
    /// `begin` plus `secs`; past the measurement (never sent) when that is out of range.
    fn at(&self, secs: f64) -> Instant {
        Duration::try_from_secs_f64(secs)
            .ok()
            .and_then(|d| self.begin.checked_add(d))
            .unwrap_or(self.measure_end + Duration::from_secs(1))
    }

    /// The intended send time of request `k` (open loop only).
    pub fn intended(&self, k: u64) -> Option<Instant> {
        match &self.schedule {
            Schedule::Closed => None,
            Schedule::Rate { per_sec } => Some(self.at(k as f64 / per_sec)),
            Schedule::Log {
                offsets,
                speed,
                span,
            } => {
                let n = offsets.len() as u64;
                let round = (k / n) as f64;
                let at = span.as_secs_f64() * round + offsets[(k % n) as usize].as_secs_f64();
                Some(self.at(at / speed))
            }
        }
    }
}

/// Runs a load: warm-up, then `duration` of measurement, unless `stop` becomes true.
/// `t0` is the caller's clock origin for the per-second series.
pub fn run(spec: &LoadSpec, t0: Instant, stop: &AtomicBool) -> Result<LoadResult, LoadError> {
    run_with(spec, t0, stop, RunOptions::default())
}

/// [`run`] with a given start of the schedule and the seconds streamed as they finish.
pub fn run_with(
    spec: &LoadSpec,
    t0: Instant,
    stop: &AtomicBool,
    options: RunOptions,
) -> Result<LoadResult, LoadError> {
    validate(spec)?;
    let connections = spec.mode.connections();
    let (reqs, schedule) = requests_and_schedule(spec);
    let target_rate = match spec.mode {
        Mode::Open { rate_per_sec, .. } => Some(rate_per_sec),
        Mode::Closed { .. } => None,
    };
    let begin = options.begin.unwrap_or_else(Instant::now);
    let measure_start = begin + spec.warmup;
    let measure_end = measure_start + spec.duration;
    let plan = Arc::new(Plan {
        requests: reqs
            .iter()
            .map(|r| r.serialise(&spec.host_header).into_boxed_slice())
            .collect(),
        head: reqs.iter().map(|r| r.method == Method::Head).collect(),
        schedule,
        begin,
        measure_start,
        measure_end,
        threads: spec.threads,
        timeout: spec.timeout,
        addr: spec.addr,
    });
    let seconds = Arc::new(Mutex::new(Seconds::new(
        spec.threads,
        t0,
        measure_start..measure_end,
        options.sink,
    )));
    let outputs = run_workers(spec, connections, &plan, &seconds, stop)?;
    let mut result = summarise(spec, connections, target_rate, &plan, &outputs, &seconds);
    result.client_stall = longest_stall(&outputs, t0);
    Ok(result)
}

/// The requests in sending order and when to send them, from the spec's source and mode.
fn requests_and_schedule(spec: &LoadSpec) -> (Vec<&Request>, Schedule) {
    match (&spec.source, spec.mode) {
        (
            Source::Replay {
                entries,
                speed: Some(speed),
            },
            _,
        ) => {
            let offsets: Vec<Duration> = entries.iter().map(|e| e.0).collect();
            let last = offsets.last().copied().unwrap_or_default();
            let n = offsets.len() as u32;
            let gap = if n > 1 {
                last / (n - 1)
            } else {
                Duration::from_secs(1)
            };
            let span = last.saturating_add(gap.max(Duration::from_millis(1)));
            (
                entries.iter().map(|e| &e.1).collect(),
                Schedule::Log {
                    offsets,
                    speed: *speed,
                    span,
                },
            )
        }
        (source, mode) => {
            let reqs: Vec<&Request> = match source {
                Source::Single(r) => vec![r],
                Source::List(l) => l.iter().collect(),
                Source::Replay { entries, .. } => entries.iter().map(|e| &e.1).collect(),
            };
            let schedule = match mode {
                Mode::Closed { .. } => Schedule::Closed,
                Mode::Open { rate_per_sec, .. } => Schedule::Rate {
                    per_sec: rate_per_sec,
                },
            };
            (reqs, schedule)
        }
    }
}

/// Starts one worker thread per `spec.threads`, deals out the connections, and joins them.
fn run_workers(
    spec: &LoadSpec,
    connections: usize,
    plan: &Arc<Plan>,
    seconds: &Arc<Mutex<Seconds>>,
    stop: &AtomicBool,
) -> Result<Vec<worker::Output>, LoadError> {
    std::thread::scope(|scope| -> Result<Vec<worker::Output>, LoadError> {
        let mut handles = Vec::with_capacity(spec.threads);
        for id in 0..spec.threads {
            // Connections are dealt out round-robin.
            let conns = connections / spec.threads + usize::from(id < connections % spec.threads);
            let plan = Arc::clone(plan);
            let seconds = Arc::clone(seconds);
            let h = std::thread::Builder::new()
                .name(format!("memtrial-load-{id}"))
                .spawn_scoped(scope, move || worker::run(id, conns, &plan, &seconds, stop))?;
            handles.push(h);
        }
        let mut outs = Vec::with_capacity(handles.len());
        for h in handles {
            outs.push(h.join().map_err(|_| LoadError::WorkerPanicked)??);
        }
        Ok(outs)
    })
}

/// The workers' figures added up.
struct Totals {
    latency: Histogram<u64>,
    errors: Errors,
    requests: u64,
    bytes: u64,
    cpu: f64,
    /// When the last worker stopped (at least `measure_start`).
    ended: Instant,
    other_example: Option<String>,
}

/// Adds up the workers' outputs; the first `other` failure's reason wins.
fn totals(outputs: &[worker::Output], measure_start: Instant) -> Totals {
    let mut latency = new_histogram();
    let mut errors = Errors::default();
    let mut requests = 0;
    let mut bytes = 0;
    let mut cpu = 0.0;
    let mut ended = measure_start;
    let mut other_example = None;
    for o in outputs {
        if other_example.is_none() {
            other_example.clone_from(&o.other_example);
        }
        let _ = latency.add(&o.latency);
        errors.add(&o.errors);
        requests += o.requests;
        bytes += o.bytes;
        cpu += o.cpu_seconds;
        ended = ended.max(o.ended);
    }
    Totals {
        latency,
        errors,
        requests,
        bytes,
        cpu,
        ended,
        other_example,
    }
}

/// The longest stall of any worker, ending `t0 + until_seconds`.
fn longest_stall(outputs: &[worker::Output], t0: Instant) -> Option<ClientStall> {
    let (d, at) = outputs.iter().filter_map(|o| o.stall).max_by_key(|s| s.0)?;
    Some(ClientStall {
        seconds: d.as_secs_f64(),
        until_seconds: at.saturating_duration_since(t0).as_secs_f64(),
    })
}

/// The busiest worker's CPU time over `secs` of measured wall time (0 when none passed).
fn busiest_thread(outputs: &[worker::Output], secs: f64) -> f64 {
    let mut busiest: f64 = 0.0;
    for o in outputs {
        if secs > 0.0 {
            busiest = busiest.max(o.cpu_seconds / secs);
        }
    }
    busiest
}

/// The run's result from the workers' outputs and the per-second slots.
fn summarise(
    spec: &LoadSpec,
    connections: usize,
    target_rate: Option<f64>,
    plan: &Plan,
    outputs: &[worker::Output],
    seconds: &Mutex<Seconds>,
) -> LoadResult {
    let (measure_start, measure_end) = (plan.measure_start, plan.measure_end);
    let Totals {
        latency,
        errors,
        requests,
        bytes,
        cpu,
        ended,
        other_example,
    } = totals(outputs, measure_start);
    let measured = ended
        .min(measure_end)
        .saturating_duration_since(measure_start);
    let secs = measured.as_secs_f64();
    let busiest = busiest_thread(outputs, secs);
    let per_second = seconds.lock().unwrap_or_else(|e| e.into_inner()).series();
    let rate = if secs > 0.0 {
        requests as f64 / secs
    } else {
        0.0
    };
    let q = |p: f64| {
        if latency.is_empty() {
            0.0
        } else {
            ms(latency.value_at_quantile(p))
        }
    };
    LoadResult {
        requests,
        throughput_rps: rate,
        errors,
        other_example,
        latency_mean_ms: if latency.is_empty() {
            0.0
        } else {
            latency.mean() / 1000.0
        },
        latency_p50_ms: q(0.5),
        latency_p90_ms: q(0.9),
        latency_p95_ms: q(0.95),
        latency_p99_ms: q(0.99),
        latency_p999_ms: q(0.999),
        latency_max_ms: if latency.is_empty() {
            0.0
        } else {
            ms(latency.max())
        },
        latency,
        per_second,
        target_rate,
        achieved_rate: rate,
        bytes_received: bytes,
        client_cpu_seconds: cpu,
        client_max_thread_busy: busiest,
        client_saturated: busiest > SATURATION,
        threads: spec.threads,
        connections,
        duration_measured: measured,
        stopped_early: ended < measure_end,
        client_stall: None,
    }
}
