//! One load worker: a `mio` event loop over its connections, like one wrk thread.
//!
//! Closed loop: a connection sends its next request as soon as a response completes.
//! Open loop: the worker owns every `threads`-th request of the global schedule; a due
//! request goes to an idle connection, or waits for one (its latency still counts from
//! the intended time). A `timerfd` wakes the loop at the next intended send time with
//! sub-millisecond precision (epoll's own timeout has millisecond resolution).

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::http::{Progress, ResponseError, ResponseParser, MAX_HEAD};
use super::{new_histogram, Errors, LoadError, Plan, Schedule, Seconds};

const READ_BUF: usize = 16 * 1024;
const TIMER: Token = Token(usize::MAX - 1);
/// Wait before reconnecting after a failed connection attempt, so a dead server does
/// not turn the generator into a busy loop.
const CONNECT_BACKOFF: Duration = Duration::from_millis(20);
/// How often timeouts and reconnects are checked.
const HOUSEKEEPING: Duration = Duration::from_millis(10);
/// A worker's loop that woke later than it meant to by more than this was stalled: the
/// thread was stopped or waited for a CPU. At 100 req/s that is 10 requests sent late,
/// whose latency (from the intended time in an open loop) then includes the client's delay.
pub(crate) const STALL_BEYOND: Duration = Duration::from_millis(100);

/// What a worker hands back.
pub(crate) struct Output {
    pub latency: Histogram<u64>,
    pub errors: Errors,
    pub requests: u64,
    pub bytes: u64,
    pub cpu_seconds: f64,
    pub ended: Instant,
    /// Why the first failure counted as `other` happened.
    pub other_example: Option<String>,
    /// The longest time within the measurement that the worker's loop woke later than
    /// planned, beyond [`STALL_BEYOND`], and when that stall ended.
    pub stall: Option<(Duration, Instant)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// No socket; connect at `retry_at`.
    Down,
    Connecting,
    /// Connected, no request in flight.
    Idle,
    Writing,
    Reading,
}

struct Conn {
    stream: Option<TcpStream>,
    st: St,
    retry_at: Instant,
    buf: Vec<u8>,
    filled: usize,
    parser: ResponseParser,
    req: usize,
    written: usize,
    /// Latency origin: the write start (closed) or the intended time (open).
    start: Instant,
    deadline: Instant,
}

/// Counters for the whole run and for the current second.
struct Stats<'a> {
    total: Histogram<u64>,
    sec: Histogram<u64>,
    sec_idx: u64,
    sec_requests: u64,
    sec_errors: Errors,
    requests: u64,
    errors: Errors,
    bytes: u64,
    start: Instant,
    end: Instant,
    seconds: &'a Mutex<Seconds>,
    other_example: Option<String>,
    stall: Option<(Duration, Instant)>,
}

enum Failure {
    Connect,
    Timeout,
    Other(Other),
}

/// Why a request failed with neither a connect error nor a timeout.
enum Other {
    /// Writing the request failed (e.g. the connection was reset).
    Write(io::Error),
    /// Reading the response failed.
    Read(io::Error),
    /// The server closed the connection before the response was complete.
    ClosedEarly,
    /// The response could not be read.
    Response(ResponseError),
}

impl std::fmt::Display for Other {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Other::Write(e) => write!(f, "sending the request failed: {e}"),
            Other::Read(e) => write!(f, "reading the response failed: {e}"),
            Other::ClosedEarly => {
                f.write_str("the server closed the connection before the response was complete")
            }
            Other::Response(e) => write!(f, "{e}"),
        }
    }
}

impl Stats<'_> {
    /// Moves to the second of `now`, reporting finished seconds; false outside the window.
    #[inline]
    fn window(&mut self, now: Instant) -> bool {
        if now < self.start || now >= self.end {
            return false;
        }
        let idx = (now - self.start).as_secs();
        while idx > self.sec_idx {
            self.flush();
        }
        true
    }

    fn flush(&mut self) {
        {
            let mut s = self.seconds.lock().unwrap_or_else(|e| e.into_inner());
            s.report(self.sec_idx, &self.sec, self.sec_requests, &self.sec_errors);
        }
        self.sec.reset();
        self.sec_requests = 0;
        self.sec_errors = Errors::default();
        self.sec_idx += 1;
    }

    #[inline]
    fn response(&mut self, now: Instant, start: Instant, status: u16) {
        if !self.window(now) {
            return;
        }
        let us = now.saturating_duration_since(start).as_micros() as u64;
        let us = us.max(1);
        self.total.saturating_record(us);
        self.sec.saturating_record(us);
        self.requests += 1;
        self.sec_requests += 1;
        match status {
            400..=499 => {
                self.errors.status_4xx += 1;
                self.sec_errors.status_4xx += 1;
            }
            500..=599 => {
                self.errors.status_5xx += 1;
                self.sec_errors.status_5xx += 1;
            }
            _ => {}
        }
    }

    fn failure(&mut self, now: Instant, kind: Failure) {
        if !self.window(now) {
            return;
        }
        let (a, b) = match kind {
            Failure::Connect => (&mut self.errors.connect, &mut self.sec_errors.connect),
            Failure::Timeout => (&mut self.errors.timeout, &mut self.sec_errors.timeout),
            Failure::Other(why) => {
                if self.other_example.is_none() {
                    self.other_example = Some(why.to_string());
                }
                (&mut self.errors.other, &mut self.sec_errors.other)
            }
        };
        *a += 1;
        *b += 1;
    }

    /// The loop meant to run again by `due` at the latest and runs at `now`: keeps the part
    /// of that delay inside the measurement when it is a stall.
    #[inline]
    fn woke(&mut self, due: Instant, now: Instant) {
        let late = now
            .min(self.end)
            .saturating_duration_since(due.max(self.start));
        if late > STALL_BEYOND && self.stall.is_none_or(|(d, _)| late > d) {
            self.stall = Some((late, now.min(self.end)));
        }
    }

    /// Reports every second up to the end of the measurement (or `ended`).
    fn finish(&mut self, ended: Instant) {
        let end = ended.min(self.end);
        if end <= self.start {
            return;
        }
        let span = (end - self.start).as_nanos();
        let last = (span.saturating_sub(1) / 1_000_000_000) as u64;
        while self.sec_idx <= last {
            self.flush();
        }
    }
}

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// A monotonic timerfd for sub-millisecond wake-ups.
struct Timer {
    fd: OwnedFd,
    armed_for: Option<Instant>,
}

impl Timer {
    fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Timer {
            // SAFETY: fd is a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed_for: None,
        })
    }

    fn arm(&mut self, at: Instant, now: Instant) {
        if self.armed_for == Some(at) {
            return;
        }
        let d = at
            .saturating_duration_since(now)
            .max(Duration::from_micros(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: valid fd and itimerspec.
        unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        self.armed_for = Some(at);
    }

    fn fired(&mut self) {
        let mut b = [0u8; 8];
        // SAFETY: reading 8 bytes into our buffer from our fd.
        unsafe { libc::read(self.fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        self.armed_for = None;
    }
}

struct Worker<'a> {
    id: u64,
    plan: &'a Plan,
    poll: Poll,
    conns: Vec<Conn>,
    /// Idle connections (open loop).
    idle: Vec<usize>,
    /// This worker's next request number (its k-th request is the overall
    /// `id + k * threads`-th).
    next: u64,
    stats: Stats<'a>,
    open: bool,
    /// Connections with a request to write once the current batch of events is read.
    deferred: Vec<usize>,
}

pub(crate) fn run(
    id: usize,
    nconns: usize,
    plan: &Plan,
    seconds: &Mutex<Seconds>,
    stop: &AtomicBool,
) -> Result<Output, LoadError> {
    let poll = Poll::new()?;
    let now = Instant::now();
    let mut w = Worker::new(id, nconns, plan, seconds, poll, now);
    let mut timer = Timer::new()?;
    w.poll.registry().register(
        &mut SourceFd(&timer.fd.as_raw_fd()),
        TIMER,
        Interest::READABLE,
    )?;
    for c in 0..nconns {
        w.connect(c, now);
    }
    let mut events = Events::with_capacity(1024);
    let mut cpu_start: Option<f64> = None;
    let mut next_housekeeping = now + HOUSEKEEPING;
    // When the loop means to run again at the latest (the timer may wake it sooner).
    let mut due = now;
    let ended = loop {
        let now = Instant::now();
        w.stats.woke(due, now);
        if now >= plan.measure_end || stop.load(Ordering::Relaxed) {
            break now;
        }
        if cpu_start.is_none() && now >= plan.measure_start {
            cpu_start = Some(thread_cpu());
        }
        w.stats.window(now);
        if now >= next_housekeeping {
            w.housekeeping(now);
            next_housekeeping = now + HOUSEKEEPING;
        }
        if w.open {
            w.dispatch(now);
        }
        let wake = w.next_wake(now, next_housekeeping);
        w.arm_for_next_send(&mut timer, now, wake);
        let timeout = wake.saturating_duration_since(now);
        due = wake;
        w.poll_events(&mut events, &mut timer, timeout)?;
        w.write_deferred();
    };
    let cpu = cpu_start.map(|s| thread_cpu() - s).unwrap_or(0.0);
    Ok(w.take_output(ended, cpu))
}

impl<'a> Worker<'a> {
    /// A worker with `nconns` connections, all down, and empty statistics.
    fn new(
        id: usize,
        nconns: usize,
        plan: &'a Plan,
        seconds: &'a Mutex<Seconds>,
        poll: Poll,
        now: Instant,
    ) -> Worker<'a> {
        Worker {
            id: id as u64,
            plan,
            poll,
            conns: (0..nconns)
                .map(|_| Conn {
                    stream: None,
                    st: St::Down,
                    retry_at: now,
                    buf: vec![0u8; READ_BUF],
                    filled: 0,
                    parser: ResponseParser::default(),
                    req: 0,
                    written: 0,
                    start: now,
                    deadline: now,
                })
                .collect(),
            idle: Vec::with_capacity(nconns),
            next: 0,
            stats: Stats {
                total: new_histogram(),
                sec: new_histogram(),
                sec_idx: 0,
                sec_requests: 0,
                sec_errors: Errors::default(),
                requests: 0,
                errors: Errors::default(),
                bytes: 0,
                start: plan.measure_start,
                end: plan.measure_end,
                seconds,
                other_example: None,
                stall: None,
            },
            open: !matches!(plan.schedule, Schedule::Closed),
            deferred: Vec::with_capacity(nconns),
        }
    }

    /// When the event loop must wake at the latest: housekeeping, the end of the
    /// measurement, and the start of the measurement or of the next second.
    #[inline]
    fn next_wake(&self, now: Instant, next_housekeeping: Instant) -> Instant {
        let plan = self.plan;
        let mut wake = next_housekeeping.min(plan.measure_end);
        if now < plan.measure_start {
            wake = wake.min(plan.measure_start);
        } else {
            let next_sec = plan.measure_start + Duration::from_secs(self.stats.sec_idx + 1);
            wake = wake.min(next_sec);
        }
        wake
    }

    /// In an open loop with an idle connection, arms the timer for the next request's
    /// intended send time when that comes before `wake`.
    #[inline]
    fn arm_for_next_send(&self, timer: &mut Timer, now: Instant, wake: Instant) {
        if self.open && !self.idle.is_empty() {
            if let Some(at) = self.plan.intended(self.global(self.next)) {
                if at < wake {
                    timer.arm(at, now);
                }
            }
        }
    }

    /// Waits up to `timeout` for events and handles them: the timer, or a connection's.
    #[inline]
    fn poll_events(
        &mut self,
        events: &mut Events,
        timer: &mut Timer,
        timeout: Duration,
    ) -> io::Result<()> {
        if let Err(e) = self.poll.poll(events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        for ev in events.iter() {
            if ev.token() == TIMER {
                timer.fired();
            } else {
                self.drive(ev.token().0);
            }
        }
        Ok(())
    }

    /// Writes the requests deferred while the batch of events was read.
    #[inline]
    fn write_deferred(&mut self) {
        let mut deferred = std::mem::take(&mut self.deferred);
        for &c in &deferred {
            if self.conns[c].st == St::Writing {
                // The latency of a closed-loop request starts with its write.
                self.conns[c].start = Instant::now();
                self.drive(c);
            }
        }
        deferred.clear();
        self.deferred = deferred;
    }

    /// Closes the statistics at `ended` and hands over the worker's figures.
    fn take_output(&mut self, ended: Instant, cpu: f64) -> Output {
        self.stats.finish(ended);
        Output {
            latency: std::mem::replace(
                &mut self.stats.total,
                Histogram::new(1).expect("tiny histogram"),
            ),
            errors: self.stats.errors,
            requests: self.stats.requests,
            bytes: self.stats.bytes,
            cpu_seconds: cpu,
            ended,
            other_example: self.stats.other_example.take(),
            stall: self.stats.stall,
        }
    }
}

impl Worker<'_> {
    #[inline]
    fn global(&self, k: u64) -> u64 {
        self.id + k * self.plan.threads as u64
    }

    fn connect(&mut self, c: usize, now: Instant) {
        let conn = &mut self.conns[c];
        conn.stream = None;
        conn.filled = 0;
        match TcpStream::connect(self.plan.addr) {
            Ok(mut s) => {
                if let Err(_e) = self.poll.registry().register(
                    &mut s,
                    Token(c),
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    self.connect_failed(c, now);
                    return;
                }
                let conn = &mut self.conns[c];
                conn.stream = Some(s);
                conn.st = St::Connecting;
                conn.deadline = now + self.plan.timeout;
            }
            Err(_) => self.connect_failed(c, now),
        }
    }

    /// A connection attempt failed. Errors count requests, not attempts (a dead server
    /// is tried again every [`CONNECT_BACKOFF`]): in a closed loop the connection's next
    /// request is due at once, so it failed; in an open loop every request due by now fails
    /// when no connection is up to take it, one connect error each, and is not sent later.
    fn connect_failed(&mut self, c: usize, now: Instant) {
        let conn = &mut self.conns[c];
        conn.stream = None;
        conn.st = St::Down;
        conn.retry_at = now + CONNECT_BACKOFF;
        if !self.open {
            self.stats.failure(now, Failure::Connect);
            return;
        }
        if self
            .conns
            .iter()
            .any(|c| matches!(c.st, St::Idle | St::Writing | St::Reading))
        {
            // A connection is up: the due requests wait for it.
            return;
        }
        while let Some(at) = self.plan.intended(self.global(self.next)) {
            if at > now {
                break;
            }
            self.next += 1;
            self.stats.failure(now, Failure::Connect);
        }
    }

    /// A request failed: count it, drop the connection, connect again at once.
    fn fail(&mut self, c: usize, now: Instant, kind: Failure) {
        self.stats.failure(now, kind);
        self.conns[c].stream = None;
        self.connect(c, now);
    }

    fn housekeeping(&mut self, now: Instant) {
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            match conn.st {
                St::Down if now >= conn.retry_at => self.connect(c, now),
                St::Connecting if now >= conn.deadline => self.connect_failed(c, now),
                St::Writing | St::Reading if now >= conn.deadline => {
                    self.fail(c, now, Failure::Timeout)
                }
                _ => {}
            }
        }
    }

    /// Open loop: hands due requests to idle connections.
    fn dispatch(&mut self, now: Instant) {
        while let Some(&c) = self.idle.last() {
            let Some(at) = self.plan.intended(self.global(self.next)) else {
                return;
            };
            if at > now {
                return;
            }
            self.idle.pop();
            self.send(c, now, at);
            self.drive(c);
        }
    }

    /// A connection has nothing in flight: give it work or park it.
    fn ready(&mut self, c: usize, now: Instant) {
        if self.open {
            if let Some(at) = self.plan.intended(self.global(self.next)) {
                if at <= now {
                    self.send(c, now, at);
                    return;
                }
            }
            self.conns[c].st = St::Idle;
            self.idle.push(c);
        } else {
            self.send(c, now, now);
        }
    }

    /// Assigns this worker's next request to connection `c`.
    #[inline]
    fn send(&mut self, c: usize, now: Instant, origin: Instant) {
        let g = self.global(self.next);
        self.next += 1;
        let n = self.plan.requests.len() as u64;
        let req = (g % n) as usize;
        let conn = &mut self.conns[c];
        conn.req = req;
        conn.written = 0;
        conn.start = origin;
        conn.deadline = now + self.plan.timeout;
        conn.parser.reset(self.plan.head[req]);
        conn.filled = 0;
        conn.st = St::Writing;
    }

    /// Makes progress on connection `c` until it would block.
    fn drive(&mut self, c: usize) {
        loop {
            match self.conns[c].st {
                St::Down => return,
                St::Idle => {
                    self.idle_event(c);
                    return;
                }
                St::Connecting => {
                    let Some(s) = self.conns[c].stream.as_ref() else {
                        return;
                    };
                    match s.take_error() {
                        Ok(None) => {}
                        Ok(Some(_)) | Err(_) => {
                            self.connect_failed(c, Instant::now());
                            return;
                        }
                    }
                    match s.peer_addr() {
                        Ok(_) => {
                            let _ = s.set_nodelay(true);
                            self.ready(c, Instant::now());
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                        Err(_) => {
                            self.connect_failed(c, Instant::now());
                            return;
                        }
                    }
                }
                St::Writing => {
                    let conn = &mut self.conns[c];
                    let bytes = &self.plan.requests[conn.req];
                    let Some(s) = conn.stream.as_mut() else {
                        return;
                    };
                    match s.write(&bytes[conn.written..]) {
                        Ok(n) => {
                            conn.written += n;
                            if conn.written == bytes.len() {
                                conn.st = St::Reading;
                                // The response arrives later; its readiness edge wakes us.
                                return;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            self.fail(c, Instant::now(), Failure::Other(Other::Write(e)));
                            return;
                        }
                    }
                }
                St::Reading => {
                    if !self.read(c) {
                        return;
                    }
                }
            }
        }
    }

    /// An event on an idle connection: the server closed it (e.g. its keep-alive
    /// timeout) or sent something unasked. A close is not an error: reconnect quietly.
    fn idle_event(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        let Some(s) = conn.stream.as_mut() else {
            return;
        };
        let closed = loop {
            match s.read(&mut conn.buf) {
                Ok(0) => break true,
                Ok(_) => continue, // unsolicited bytes: dropped
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break true,
            }
        };
        if closed {
            self.idle.retain(|&i| i != c);
            self.connect(c, Instant::now());
        }
    }

    /// Reads what is there; true when the connection changed state and should be
    /// driven again.
    fn read(&mut self, c: usize) -> bool {
        let conn = &mut self.conns[c];
        if conn.filled == conn.buf.len() {
            // Only a head can fill the buffer (body bytes are dropped once counted).
            if conn.buf.len() > MAX_HEAD {
                let why = Other::Response(ResponseError::HeadTooLarge(MAX_HEAD));
                self.fail(c, Instant::now(), Failure::Other(why));
                return true;
            }
            let len = conn.buf.len() * 2;
            conn.buf.resize(len, 0);
        }
        let Some(s) = conn.stream.as_mut() else {
            return false;
        };
        let space = conn.buf.len() - conn.filled;
        match s.read(&mut conn.buf[conn.filled..]) {
            Ok(0) => {
                let now = Instant::now();
                if conn.parser.finish_on_close() {
                    let (start, status) = (conn.start, conn.parser.status());
                    self.stats.response(now, start, status);
                    self.conns[c].stream = None;
                    self.connect(c, now);
                } else {
                    self.fail(c, now, Failure::Other(Other::ClosedEarly));
                }
                true
            }
            Ok(n) => {
                let now = Instant::now();
                conn.filled += n;
                if now >= self.stats.start && now < self.stats.end {
                    self.stats.bytes += n as u64;
                }
                match conn.parser.feed(&conn.buf[..conn.filled]) {
                    Ok(Progress::NeedMore) => {
                        if !conn.parser.in_head() {
                            conn.filled = 0;
                        }
                        // A short read drained the socket: wait for the next edge.
                        n == space
                    }
                    Ok(Progress::Done { .. }) => {
                        conn.filled = 0;
                        let (start, status, close) =
                            (conn.start, conn.parser.status(), conn.parser.must_close());
                        self.stats.response(now, start, status);
                        if close {
                            self.conns[c].stream = None;
                            self.connect(c, now);
                            true
                        } else if self.open {
                            self.ready(c, now);
                            true
                        } else {
                            // Closed loop: like wrk, read every response of this batch
                            // first, then write the next requests in one burst.
                            self.ready(c, now);
                            self.deferred.push(c);
                            false
                        }
                    }
                    Err(e) => {
                        self.fail(c, now, Failure::Other(Other::Response(e)));
                        true
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) => {
                self.fail(c, Instant::now(), Failure::Other(Other::Read(e)));
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_wake_inside_the_measurement_is_a_stall() {
        let start = Instant::now();
        let end = start + Duration::from_secs(10);
        let seconds = Mutex::new(Seconds::new(1, start, start..end, None));
        let mut stats = Stats {
            total: new_histogram(),
            sec: new_histogram(),
            sec_idx: 0,
            sec_requests: 0,
            sec_errors: Errors::default(),
            requests: 0,
            errors: Errors::default(),
            bytes: 0,
            start,
            end,
            seconds: &seconds,
            other_example: None,
            stall: None,
        };
        let at = |ms: u64| start + Duration::from_millis(ms);
        // 50 ms late: a CPU's ordinary wait, not a stall.
        stats.woke(at(1000), at(1050));
        assert_eq!(stats.stall, None);
        // 0.4 s late: kept, with when it ended.
        stats.woke(at(2000), at(2400));
        assert_eq!(stats.stall, Some((Duration::from_millis(400), at(2400))));
        // A shorter one later does not replace it.
        stats.woke(at(3000), at(3200));
        assert_eq!(stats.stall.unwrap().0, Duration::from_millis(400));
        // Only the part inside the measurement counts: 0.3 s of this one ran past its end.
        stats.woke(at(9500), at(10_300));
        assert_eq!(stats.stall, Some((Duration::from_millis(500), end)));
    }
}
