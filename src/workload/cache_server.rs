//! A small HTTP/1.1 cache server whose heap fragments slowly (std and mio, no `unsafe`):
//! the fixture behind `memtrial soak`'s long comparisons.
//!
//! * **Serving** - one I/O thread owns the listener and waits for every keep-alive
//!   connection (mio, edge-triggered). A connection with data to read is handed,
//!   round-robin, to one of `threads` handler threads, which reads and answers every
//!   complete request in it (`200 OK`, a short body with `Content-Length`; request bodies
//!   are skipped) and marks it idle again. Requests therefore spread evenly over the
//!   handlers whatever the number of connections and however a client picks among them
//!   (`memtrial load` reuses its most recently idle connection), as in a thread-pool
//!   server behind one event loop.
//! * **The cache** - every request inserts one new entry (keys rotate: the key is the
//!   request's number) into a shared cache bounded by `cache_bytes`, in
//!   [`SHARDS`] shards. Whoever inserts evicts the oldest entries of that shard, so most
//!   entries are freed by another thread than the one that allocated them. One request
//!   in [`PROMOTE_EVERY`] also "hits" a random cached entry and moves it, without copying,
//!   to a protected segment ([`PROTECTED_SHARE`] of the budget) where entries live about
//!   eight times longer: long-lived objects scattered among short-lived ones.
//! * **The size mix drifts** - entry sizes are log-uniform between `min_size` and an upper
//!   bound that depends on the handler's "heat". A hot spot moves over the handlers, one
//!   handler every `drift_requests` requests: a hot handler stores entries up to
//!   `max_size`, a cold one only tiny ones (up to about 3.5 times `min_size`). Each handler in
//!   turn therefore allocates most of the cache's bytes, then hardly any.
//! * **Temporaries** - each request also allocates and fills a short-lived buffer
//!   (256 B to 32 KiB) and builds its response, all freed before the next request.
//!
//! Why glibc grows for minutes: each handler thread gets its own glibc arena (up to
//! 8 x cores). While a handler is hot its arena grows to hold a large share of the
//! cache; when the hot spot moves on, those entries are freed, but the tiny entries the
//! handler keeps storing, and the protected entries, sit among the freed chunks, so the
//! arena keeps its pages (glibc returns only the free top of a heap). RSS becomes the
//! *sum* of every arena's hot peak, and the sum grows as the hot spot visits arena after
//! arena; a second round finds those heaps full of holes shaped for other sizes. With
//! `MALLOC_ARENA_MAX=2` two arenas are shared by all handlers, so a freed hot share is
//! reused by the next hot handler; jemalloc also shares and returns freed pages. The
//! cache's live bytes are the same in every case and plateau at `cache_bytes`.
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::fragment::Rng;

/// Cache shards (each with its own lock and its share of the budget).
pub const SHARDS: usize = 64;
/// One request in this many promotes a random cached entry to the protected segment.
pub const PROMOTE_EVERY: u64 = 32;
/// The protected segment's share of the cache budget.
pub const PROTECTED_SHARE: f64 = 0.125;
/// How far (in handlers) the hot spot's warmth reaches on each side.
const HOT_WIDTH: f64 = 3.0;
/// The share of the log-size range a cold handler still draws from.
const COLD_SPAN: f64 = 0.2;
/// How far up the log-size range the hot spot lifts the smallest entry.
const HOT_FLOOR: f64 = 0.7;
/// Longest request head accepted (431 beyond it).
const MAX_HEAD: usize = 64 * 1024;
/// Connections held at once; later ones are closed on accept.
const MAX_CONNECTIONS: usize = 10_000;
/// A response that cannot be written within this long closes its connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

const LISTENER: Token = Token(usize::MAX - 1);

#[derive(Debug, Clone)]
pub struct CacheServerConfig {
    /// Handler threads.
    pub threads: usize,
    /// The cache's budget in bytes (entries' capacities).
    pub cache_bytes: usize,
    /// Smallest entry in bytes.
    pub min_size: usize,
    /// Largest entry in bytes.
    pub max_size: usize,
    /// Requests after which the hot spot has moved on by one handler.
    pub drift_requests: u64,
    pub seed: u64,
}

impl Default for CacheServerConfig {
    fn default() -> Self {
        CacheServerConfig {
            threads: 16,
            cache_bytes: 64 << 20,
            min_size: 64,
            max_size: 32 << 10,
            drift_requests: 30_000,
            seed: 42,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct CacheServerSummary {
    pub threads: usize,
    /// Requests answered `200 OK`.
    pub requests: u64,
    /// Requests refused (malformed, too long): answered 4xx and the connection closed.
    pub bad_requests: u64,
    pub connections: u64,
    /// Entries in the cache at the end, and the bytes they hold.
    pub entries: u64,
    pub cache_bytes: u64,
    /// Entries evicted, and how many of them by another thread than their allocator's.
    pub evictions: u64,
    pub cross_thread_frees: u64,
    pub elapsed: Duration,
}

// ---- the cache -------------------------------------------------------------------

struct Entry {
    /// The handler that allocated `data`.
    owner: usize,
    data: Vec<u8>,
}

#[derive(Default)]
struct Shard {
    probation: VecDeque<Entry>,
    probation_bytes: usize,
    protected: VecDeque<Entry>,
    protected_bytes: usize,
}

struct Cache {
    shards: Vec<Mutex<Shard>>,
    probation_budget: usize,
    protected_budget: usize,
}

impl Cache {
    fn new(bytes: usize) -> Cache {
        let protected = (bytes as f64 * PROTECTED_SHARE) as usize;
        Cache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            probation_budget: (bytes - protected) / SHARDS,
            protected_budget: protected / SHARDS,
        }
    }

    fn shard(&self, i: usize) -> MutexGuard<'_, Shard> {
        // A handler that panicked mid-insert leaves at worst a byte count off by one entry.
        self.shards[i % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Inserts `data` and moves the entries it pushes out of the budget into `victims`
    /// (dropped by the caller, outside the lock).
    fn insert(&self, key: u64, owner: usize, data: Vec<u8>, victims: &mut Vec<Entry>) {
        let mut s = self.shard(spread(key) as usize);
        s.probation_bytes += data.capacity();
        s.probation.push_back(Entry { owner, data });
        while s.probation_bytes > self.probation_budget {
            let Some(e) = s.probation.pop_front() else {
                break;
            };
            s.probation_bytes -= e.data.capacity();
            victims.push(e);
        }
    }

    /// A hit on a random entry of shard `shard`: it moves (not copied) to the protected
    /// segment, whose oldest entries go to `victims`.
    fn promote(&self, shard: usize, pick: usize, victims: &mut Vec<Entry>) {
        let mut s = self.shard(shard);
        let n = s.probation.len();
        if n == 0 {
            return;
        }
        let e = &mut s.probation[pick % n];
        // The slot stays behind, empty, until it reaches the front of the queue.
        let data = std::mem::take(&mut e.data);
        let owner = e.owner;
        if data.capacity() == 0 {
            return;
        }
        s.probation_bytes -= data.capacity();
        s.protected_bytes += data.capacity();
        s.protected.push_back(Entry { owner, data });
        while s.protected_bytes > self.protected_budget {
            let Some(e) = s.protected.pop_front() else {
                break;
            };
            s.protected_bytes -= e.data.capacity();
            victims.push(e);
        }
    }

    /// (entries, bytes) held.
    fn size(&self) -> (u64, u64) {
        let (mut n, mut b) = (0u64, 0u64);
        for i in 0..SHARDS {
            let s = self.shard(i);
            n += s.probation.iter().filter(|e| e.data.capacity() > 0).count() as u64;
            n += s.protected.len() as u64;
            b += (s.probation_bytes + s.protected_bytes) as u64;
        }
        (n, b)
    }
}

/// A key's shard: consecutive keys land in different shards.
fn spread(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40
}

/// The handler's heat, 0 (cold) to 1 (the hot spot is on it), after `served` requests.
fn heat(handler: usize, threads: usize, served: u64, drift: u64) -> f64 {
    let n = threads as f64;
    let pos = (served as f64 / drift.max(1) as f64) % n;
    let d = (handler as f64 - pos).abs();
    let d = d.min(n - d);
    (1.0 - d / HOT_WIDTH).max(0.0)
}

/// An entry's size: log-uniform between bounds that both grow with `heat`.
fn entry_size(rng: &mut Rng, min: usize, max: usize, heat: f64) -> usize {
    let range = (max as f64 / min as f64).ln();
    let lo = range * HOT_FLOOR * heat;
    let hi = range * (COLD_SPAN + (1.0 - COLD_SPAN) * heat);
    ((min as f64) * (lo + (hi - lo) * rng.unit()).exp()).clamp(min as f64, max as f64) as usize
}

/// A buffer of `size` bytes, every byte written (so its pages are resident).
fn filled(size: usize, byte: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(size);
    v.resize(size, byte);
    v
}

// ---- HTTP ------------------------------------------------------------------------

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Body bytes of the last request still to be skipped.
    skip: usize,
}

/// What one complete request head says.
enum Head {
    /// A request: its head length, body length, and whether the connection stays open.
    Request {
        len: usize,
        body: usize,
        keep_alive: bool,
        head: bool,
    },
    /// More bytes are needed.
    Partial,
    /// Refused with this status and reason; the connection closes.
    Bad(u16, &'static str),
}

fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Head::Bad(431, "Request Header Fields Too Large")
        }
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Head::Bad(431, "Request Header Fields Too Large")
        }
        Err(_) => return Head::Bad(400, "Bad Request"),
    };
    let mut body = 0usize;
    let mut keep_alive = req.version == Some(1);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
            {
                Some(n) => body = n,
                None => return Head::Bad(400, "Bad Request"),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Head::Bad(411, "Length Required");
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if v.contains("close") {
                keep_alive = false;
            } else if v.contains("keep-alive") {
                keep_alive = true;
            }
        }
    }
    Head::Request {
        len,
        body,
        keep_alive,
        head: req.method == Some("HEAD"),
    }
}

fn respond(out: &mut Vec<u8>, code: u16, reason: &str, body: &str, close: bool, head: bool) {
    let connection = if close { "Connection: close\r\n" } else { "" };
    let _ = write!(
        out,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{connection}\r\n",
        body.len()
    );
    if !head {
        out.extend_from_slice(body.as_bytes());
    }
}

/// Writes all of `out` to a non-blocking stream, waiting briefly when its buffer is full.
fn write_all(stream: &mut TcpStream, mut out: &[u8]) -> io::Result<()> {
    let deadline = Instant::now() + WRITE_TIMEOUT;
    while !out.is_empty() {
        match stream.write(out) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => out = &out[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

// ---- handlers --------------------------------------------------------------------

struct Shared {
    cache: Cache,
    served: AtomicU64,
    bad: AtomicU64,
    threads: usize,
    min: usize,
    max: usize,
    drift: u64,
}

#[derive(Default)]
struct Tally {
    evictions: u64,
    cross: u64,
}

struct Handler<'a> {
    id: usize,
    sh: &'a Shared,
    rng: Rng,
    victims: Vec<Entry>,
    tally: Tally,
}

impl Handler<'_> {
    /// The work of one request: a temporary, one insert, sometimes a promotion.
    /// Returns the response body.
    fn work(&mut self) -> String {
        let sh = self.sh;
        let n = sh.served.fetch_add(1, Ordering::Relaxed);
        let h = heat(self.id, sh.threads, n, sh.drift);
        let temp_size = 256 << self.rng.below(7);
        let temp = filled(temp_size + self.rng.below(temp_size), n as u8);
        let size = entry_size(&mut self.rng, sh.min, sh.max, h);
        let data = filled(size, temp[temp.len() / 2] ^ 0x5a);
        sh.cache.insert(n, self.id, data, &mut self.victims);
        if n % PROMOTE_EVERY == PROMOTE_EVERY - 1 {
            let shard = self.rng.below(SHARDS);
            let pick = self.rng.below(1 << 20);
            sh.cache.promote(shard, pick, &mut self.victims);
        }
        self.tally.evictions += self.victims.len() as u64;
        self.tally.cross += self.victims.iter().filter(|e| e.owner != self.id).count() as u64;
        // The evicted entries are freed here, mostly by another thread than their allocator's.
        self.victims.clear();
        format!("key {n} size {size} temp {}\n", temp.len())
    }

    /// Reads and answers everything that has arrived on `conn`; false: close it.
    fn serve(&mut self, conn: &mut Conn) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let mut out = Vec::new();
        let mut open = true;
        loop {
            match conn.stream.read(&mut chunk) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => conn.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
            if !self.answer(conn, &mut out) {
                let _ = write_all(&mut conn.stream, &out);
                return false;
            }
            if !out.is_empty() {
                if write_all(&mut conn.stream, &out).is_err() {
                    return false;
                }
                out.clear();
            }
        }
        open
    }

    /// Answers every complete request in `conn.buf` into `out`; false: close after it.
    fn answer(&mut self, conn: &mut Conn, out: &mut Vec<u8>) -> bool {
        loop {
            if conn.skip > 0 {
                let n = conn.skip.min(conn.buf.len());
                conn.buf.drain(..n);
                conn.skip -= n;
                if conn.skip > 0 {
                    return true;
                }
            }
            if conn.buf.is_empty() {
                return true;
            }
            match parse_head(&conn.buf) {
                Head::Partial => return true,
                Head::Bad(code, reason) => {
                    self.sh.bad.fetch_add(1, Ordering::Relaxed);
                    respond(out, code, reason, "", true, false);
                    return false;
                }
                Head::Request {
                    len,
                    body,
                    keep_alive,
                    head,
                } => {
                    conn.buf.drain(..len);
                    conn.skip = body;
                    let text = self.work();
                    respond(out, 200, "OK", &text, !keep_alive, head);
                    if !keep_alive {
                        return false;
                    }
                }
            }
        }
    }
}

// ---- the server ------------------------------------------------------------------

/// A connection's state between the I/O thread and the handlers.
const IDLE: u8 = 0;
/// At a handler.
const BUSY: u8 = 1;
/// At a handler, and more data arrived meanwhile: the handler serves it again.
const PENDING: u8 = 2;
/// Closed by its handler; the I/O thread forgets it.
const CLOSED: u8 = 3;

/// A connection as the I/O thread and the handlers share it. Only the handler that
/// moved it from IDLE to BUSY touches `conn`, so its lock is never contended.
struct Link {
    state: AtomicU8,
    conn: Mutex<Option<Conn>>,
}

/// Serves on `listener` until `stop` is set, then stops the handlers and says what
/// was done. The listener should be bound already (so that a bad port fails early).
pub fn serve(
    listener: std::net::TcpListener,
    cfg: &CacheServerConfig,
    stop: &AtomicBool,
) -> io::Result<CacheServerSummary> {
    let start = Instant::now();
    let threads = cfg.threads.max(1);
    let min = cfg.min_size.max(1);
    let sh = Shared {
        cache: Cache::new(cfg.cache_bytes),
        served: AtomicU64::new(0),
        bad: AtomicU64::new(0),
        threads,
        min,
        max: cfg.max_size.max(min),
        drift: cfg.drift_requests.max(1),
    };
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut connections = 0u64;
    let tallies = thread::scope(|scope| -> io::Result<Vec<Tally>> {
        let mut to_handlers: Vec<Sender<Arc<Link>>> = Vec::with_capacity(threads);
        let mut joins = Vec::with_capacity(threads);
        for id in 0..threads {
            let (tx, rx) = mpsc::channel::<Arc<Link>>();
            to_handlers.push(tx);
            let registry = poll.registry().try_clone()?;
            let sh = &sh;
            let seed = cfg.seed ^ (id as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
            joins.push(
                thread::Builder::new()
                    .name(format!("cache-{id}"))
                    .spawn_scoped(scope, move || handler_loop(id, sh, seed, &rx, &registry))?,
            );
        }
        let result = io_loop(
            &mut poll,
            &mut listener,
            &to_handlers,
            stop,
            &mut connections,
        );
        drop(to_handlers);
        let tallies = joins
            .into_iter()
            .map(|j| j.join().unwrap_or_default())
            .collect();
        result.map(|()| tallies)
    })?;
    let (entries, cache_bytes) = sh.cache.size();
    Ok(CacheServerSummary {
        threads,
        requests: sh.served.load(Ordering::Relaxed),
        bad_requests: sh.bad.load(Ordering::Relaxed),
        connections,
        entries,
        cache_bytes,
        evictions: tallies.iter().map(|t| t.evictions).sum(),
        cross_thread_frees: tallies.iter().map(|t| t.cross).sum(),
        elapsed: start.elapsed(),
    })
}

fn handler_loop(
    id: usize,
    sh: &Shared,
    seed: u64,
    rx: &Receiver<Arc<Link>>,
    registry: &mio::Registry,
) -> Tally {
    let mut h = Handler {
        id,
        sh,
        rng: Rng(seed),
        victims: Vec::new(),
        tally: Tally::default(),
    };
    // Ends when the I/O thread drops its sender.
    while let Ok(link) = rx.recv() {
        let mut slot = link.conn.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let open = match slot.as_mut() {
                Some(conn) => h.serve(conn),
                None => false,
            };
            if !open {
                if let Some(mut conn) = slot.take() {
                    let _ = registry.deregister(&mut conn.stream);
                }
                link.state.store(CLOSED, Ordering::Release);
                break;
            }
            // Back to IDLE, unless data arrived while serving: then serve again.
            match link
                .state
                .compare_exchange(BUSY, IDLE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(_) => link.state.store(BUSY, Ordering::Release),
            }
        }
    }
    h.tally
}

fn io_loop(
    poll: &mut Poll,
    listener: &mut TcpListener,
    handlers: &[Sender<Arc<Link>>],
    stop: &AtomicBool,
    connections: &mut u64,
) -> io::Result<()> {
    let mut links: HashMap<Token, Arc<Link>> = HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut next_token = 0usize;
    let mut next_handler = 0usize;
    let mut swept = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_millis(100))) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            if links.len() >= MAX_CONNECTIONS {
                                continue;
                            }
                            let _ = stream.set_nodelay(true);
                            let token = Token(next_token);
                            next_token = (next_token + 1) % (usize::MAX - 16);
                            poll.registry()
                                .register(&mut stream, token, Interest::READABLE)?;
                            *connections += 1;
                            let conn = Conn {
                                stream,
                                buf: Vec::new(),
                                skip: 0,
                            };
                            links.insert(
                                token,
                                Arc::new(Link {
                                    state: AtomicU8::new(IDLE),
                                    conn: Mutex::new(Some(conn)),
                                }),
                            );
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // Out of descriptors, a connection reset before accept: try later.
                        Err(_) => break,
                    }
                }
                continue;
            }
            let Some(link) = links.get(&ev.token()) else {
                continue;
            };
            let mut state = link.state.load(Ordering::Acquire);
            loop {
                let (next, send) = match state {
                    IDLE => (BUSY, true),
                    BUSY => (PENDING, false),
                    _ => break,
                };
                match link
                    .state
                    .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        if send {
                            // Round-robin: requests spread over the handlers whatever
                            // connection they arrive on.
                            next_handler = (next_handler + 1) % handlers.len();
                            handlers[next_handler]
                                .send(Arc::clone(link))
                                .map_err(|_| io::Error::other("a cache handler thread ended"))?;
                        }
                        break;
                    }
                    Err(now) => state = now,
                }
            }
        }
        if swept.elapsed() >= Duration::from_secs(1) {
            links.retain(|_, l| l.state.load(Ordering::Acquire) != CLOSED);
            swept = Instant::now();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_follows_the_hot_spot_around_the_ring() {
        let near = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} != {b}");
        near(heat(0, 16, 0, 100), 1.0);
        near(heat(1, 16, 0, 100), 1.0 - 1.0 / HOT_WIDTH);
        near(heat(15, 16, 0, 100), 1.0 - 1.0 / HOT_WIDTH);
        near(heat(8, 16, 0, 100), 0.0);
        // after 3.5 steps the spot sits between handlers 3 and 4
        near(heat(3, 16, 350, 100), 1.0 - 0.5 / HOT_WIDTH);
        near(heat(4, 16, 350, 100), 1.0 - 0.5 / HOT_WIDTH);
        // and wraps around after a full round
        assert_eq!(heat(0, 16, 1600, 100), 1.0);
        let alone = heat(0, 1, 12345, 100);
        assert!((0.0..=1.0).contains(&alone), "{alone}");
    }

    #[test]
    fn entry_sizes_stay_in_range_and_grow_with_heat() {
        let mut rng = Rng(1);
        let mean = |rng: &mut Rng, h: f64| {
            let sizes: Vec<usize> = (0..4000).map(|_| entry_size(rng, 64, 32768, h)).collect();
            assert!(sizes.iter().all(|&s| (64..=32768).contains(&s)));
            sizes.iter().sum::<usize>() / sizes.len()
        };
        let cold = mean(&mut rng, 0.0);
        let hot = mean(&mut rng, 1.0);
        assert!(cold < 256, "{cold}");
        assert!(hot > 3000, "{hot}");
    }

    #[test]
    fn the_cache_stays_within_its_budget() {
        let cache = Cache::new(1 << 20);
        let mut victims = Vec::new();
        let mut evicted = 0;
        for key in 0..20_000u64 {
            cache.insert(
                key,
                (key % 3) as usize,
                filled(100 + key as usize % 900, 1),
                &mut victims,
            );
            if key % 7 == 0 {
                cache.promote(key as usize, key as usize * 31, &mut victims);
            }
            evicted += victims.len();
            victims.clear();
        }
        let (entries, bytes) = cache.size();
        assert!(bytes <= 1 << 20, "{bytes}");
        assert!(bytes > 900 << 10, "{bytes}");
        assert!(entries > 0 && evicted > 0);
    }

    #[test]
    fn heads_are_parsed_with_bodies_and_keep_alive() {
        match parse_head(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET") {
            Head::Request {
                len,
                body,
                keep_alive,
                head,
            } => {
                assert_eq!((len, body, keep_alive, head), (28, 0, true, false));
            }
            _ => panic!("not a request"),
        }
        match parse_head(b"POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello") {
            Head::Request {
                body, keep_alive, ..
            } => assert_eq!((body, keep_alive), (5, false)),
            _ => panic!("not a request"),
        }
        match parse_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n") {
            Head::Request { keep_alive, .. } => assert!(!keep_alive),
            _ => panic!("not a request"),
        }
        assert!(matches!(parse_head(b"GET / HTTP/1.1\r\nHo"), Head::Partial));
        assert!(matches!(
            parse_head(b"\x01\x02 nonsense\r\n\r\n"),
            Head::Bad(400, _)
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Head::Bad(400, _)
        ));
        let long = [b'a'; MAX_HEAD + 10];
        let mut req = b"GET /".to_vec();
        req.extend_from_slice(&long);
        assert!(matches!(parse_head(&req), Head::Bad(431, _)));
    }
}
