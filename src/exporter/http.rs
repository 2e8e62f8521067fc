//! The exporter's small HTTP/1.1 server, built so that no client can exhaust it.
//!
//! - One event loop (`mio`, on the calling thread) accepts connections and reads their
//!   request heads without blocking. At most [`Limits::max_pending`] connections wait for a
//!   head; when one more arrives, the one that has waited longest is closed to make room,
//!   so a crowd of idle connections cannot keep a scraper out.
//! - A head must arrive whole within [`Limits::head_timeout`] of the connection's accept
//!   (an idle connection is closed then too, with `408`), and within [`Limits::max_head`]
//!   bytes (else `431`); a malformed one gets `400`.
//! - A whole request goes to a fixed pool of [`Limits::workers`] threads through a queue of
//!   [`Limits::queue`]; when the queue is full the request is answered `503` at once.
//! - Each response is written with a timeout ([`Limits::write_timeout`]) and the connection
//!   closed (`Connection: close`): there is no keep-alive to hold a thread.
//!
//! So the exporter has `1 + workers` threads, however many connections arrive.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

/// The server's bounds; [`LIMITS`] are the exporter's (documented in `docs/exporter.md`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Threads answering whole requests.
    pub workers: usize,
    /// Whole requests waiting for a worker; beyond it, `503`.
    pub queue: usize,
    /// Connections waiting for their request head; beyond it, the oldest is closed.
    pub max_pending: usize,
    /// Time from accept to a whole request head.
    pub head_timeout: Duration,
    /// The largest request head read.
    pub max_head: usize,
    /// Time to write a response.
    pub write_timeout: Duration,
}

/// The exporter's limits.
pub(crate) const LIMITS: Limits = Limits {
    workers: 2,
    queue: 16,
    max_pending: 128,
    head_timeout: Duration::from_secs(5),
    max_head: 8192,
    write_timeout: Duration::from_secs(10),
};

/// The request methods answered; others are `405`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
}

/// A whole request head, as the handler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
}

/// A response: status, content type, body (not sent for `HEAD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(code: u16, body: &str) -> Response {
        Response {
            code,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
        }
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// The bytes of a response (`Connection: close`; no body for `HEAD`).
fn bytes_of(r: &Response, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.code,
        reason(r.code),
        r.content_type,
        r.body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(&r.body);
    }
    out
}

/// What a request head is, once read.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// Not whole yet.
    Partial,
    Whole(Request),
    /// Whole, but a method other than GET or HEAD.
    OtherMethod,
    Malformed,
}

/// Parses a request head (HTTP/1.x, at most 32 headers).
fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::Malformed,
        Ok(httparse::Status::Complete(_)) => {
            let method = match req.method {
                Some("GET") => Method::Get,
                Some("HEAD") => Method::Head,
                _ => return Head::OtherMethod,
            };
            let path = req
                .path
                .unwrap_or("")
                .split('?')
                .next()
                .unwrap_or("")
                .to_string();
            let accept = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("accept"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned());
            Head::Whole(Request {
                method,
                path,
                accept,
            })
        }
    }
}

/// A connection waiting for its request head.
struct Pending {
    stream: TcpStream,
    buf: Vec<u8>,
    accepted: Instant,
}

/// A whole request waiting for a worker.
struct Ready {
    stream: TcpStream,
    request: Request,
}

/// Best effort, never blocking: a short refusal to a connection about to be closed.
fn refuse(mut stream: TcpStream, code: u16, why: &str) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write(&bytes_of(&Response::text(code, why), false));
}

const LISTENER: Token = Token(0);

/// The refusal of a connection whose head did not arrive in time, naming the limit.
fn too_slow(limits: &Limits) -> Option<(u16, String)> {
    Some((
        408,
        format!(
            "no whole request head within {} s of connecting: closed\n",
            limits.head_timeout.as_secs_f64()
        ),
    ))
}

/// Serves `handler` on `listener` until `stop` is set, within `limits`. Returns once the
/// workers have finished the requests they hold.
pub fn serve<H>(
    listener: TcpListener,
    limits: Limits,
    stop: &AtomicBool,
    handler: H,
) -> io::Result<()>
where
    H: Fn(&Request) -> Response + Send + Sync + 'static,
{
    listener.set_nonblocking(true)?;
    let mut poll = Poll::new()?;
    poll.registry().register(
        &mut SourceFd(&listener.as_raw_fd()),
        LISTENER,
        Interest::READABLE,
    )?;
    let (tx, rx) = sync_channel::<Ready>(limits.queue);
    let rx = Arc::new(Mutex::new(rx));
    let handler = Arc::new(handler);
    let mut workers = Vec::with_capacity(limits.workers);
    for i in 0..limits.workers.max(1) {
        let rx = Arc::clone(&rx);
        let handler = Arc::clone(&handler);
        workers.push(
            std::thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || work(&rx, &*handler, limits.write_timeout))?,
        );
    }
    let mut pending: HashMap<Token, Pending> = HashMap::new();
    let mut next = 1usize;
    let mut events = Events::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = pending
            .values()
            .map(|p| (p.accepted + limits.head_timeout).saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(200));
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                continue;
            }
            let token = ev.token();
            if let Some(mut p) = pending.remove(&token) {
                let step = read_head(&mut p, limits.max_head);
                if let Some(p) = settle(&poll, &tx, p, step) {
                    pending.insert(token, p);
                }
            }
        }
        accept_waiting(&listener, &poll, &tx, &mut pending, &mut next, &limits);
        close_late(&poll, &tx, &mut pending, &limits);
    }
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}

/// Accepts every waiting connection (also after an error such as EMFILE, which leaves
/// them queued in the kernel with no new readiness event), making room among `pending` by
/// closing the oldest when it holds `limits.max_pending`.
fn accept_waiting(
    listener: &TcpListener,
    poll: &Poll,
    tx: &SyncSender<Ready>,
    pending: &mut HashMap<Token, Pending>,
    next: &mut usize,
    limits: &Limits,
) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                if pending.len() >= limits.max_pending {
                    let oldest = pending
                        .iter()
                        .min_by_key(|(_, p)| p.accepted)
                        .map(|(t, _)| *t);
                    if let Some(p) = oldest.and_then(|t| pending.remove(&t)) {
                        settle(poll, tx, p, Step::Close(too_slow(limits)));
                    }
                }
                let token = Token(*next);
                *next = next.wrapping_add(1).max(1);
                let fd = stream.as_raw_fd();
                if poll
                    .registry()
                    .register(&mut SourceFd(&fd), token, Interest::READABLE)
                    .is_err()
                {
                    continue;
                }
                let mut p = Pending {
                    stream,
                    buf: Vec::new(),
                    accepted: Instant::now(),
                };
                // Bytes that came with the connection raise no new event.
                let step = read_head(&mut p, limits.max_head);
                if let Some(p) = settle(poll, tx, p, step) {
                    pending.insert(token, p);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // WouldBlock: none left; anything else (EMFILE, ECONNABORTED): next turn.
            Err(_) => break,
        }
    }
}

/// Closes the connections whose head did not arrive within `limits.head_timeout`.
fn close_late(
    poll: &Poll,
    tx: &SyncSender<Ready>,
    pending: &mut HashMap<Token, Pending>,
    limits: &Limits,
) {
    let now = Instant::now();
    let late: Vec<Token> = pending
        .iter()
        .filter(|(_, p)| now.duration_since(p.accepted) >= limits.head_timeout)
        .map(|(t, _)| *t)
        .collect();
    for t in late {
        if let Some(p) = pending.remove(&t) {
            settle(poll, tx, p, Step::Close(too_slow(limits)));
        }
    }
}

/// Acts on a step: keeps the connection waiting (returned), hands a whole request to
/// the workers (`503` when their queue is full), or closes it with its refusal.
fn settle(
    poll: &Poll,
    tx: &std::sync::mpsc::SyncSender<Ready>,
    p: Pending,
    step: Step,
) -> Option<Pending> {
    if matches!(step, Step::Wait) {
        return Some(p);
    }
    let _ = poll
        .registry()
        .deregister(&mut SourceFd(&p.stream.as_raw_fd()));
    match step {
        Step::Wait => {}
        Step::Whole(request) => {
            let ready = Ready {
                stream: p.stream,
                request,
            };
            if let Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) = tx.try_send(ready) {
                refuse(r.stream, 503, "busy: try again\n");
            }
        }
        Step::Close(Some((code, why))) => refuse(p.stream, code, &why),
        Step::Close(None) => {}
    }
    None
}

/// What to do with a pending connection after reading what it sent.
enum Step {
    Wait,
    Whole(Request),
    /// Close it, with a refusal to send first if any.
    Close(Option<(u16, String)>),
}

/// Reads what the connection has sent (without blocking, up to `max_head` bytes).
fn read_head(p: &mut Pending, max_head: usize) -> Step {
    let mut chunk = [0u8; 2048];
    // A client may send its request and close its side (shutdown): the request stands.
    let mut eof = false;
    loop {
        let room = max_head.saturating_sub(p.buf.len());
        if room == 0 {
            break;
        }
        let take = room.min(chunk.len());
        match p.stream.read(&mut chunk[..take]) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => p.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close(None),
        }
    }
    match parse_head(&p.buf) {
        Head::Whole(r) => Step::Whole(r),
        _ if eof => Step::Close(None),
        Head::Partial if p.buf.len() >= max_head => Step::Close(Some((
            431,
            format!("request head larger than {max_head} bytes: closed\n"),
        ))),
        Head::Partial => Step::Wait,
        Head::OtherMethod => Step::Close(Some((405, "only GET and HEAD are answered\n".into()))),
        Head::Malformed => Step::Close(Some((400, "not an HTTP/1.x request head\n".into()))),
    }
}

/// One worker: answers whole requests until the queue is closed.
fn work<H>(rx: &Mutex<Receiver<Ready>>, handler: &H, write_timeout: Duration)
where
    H: Fn(&Request) -> Response,
{
    loop {
        let next = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(Ready {
            mut stream,
            request,
        }) = next
        else {
            return;
        };
        // A handler that panics answers 500; the worker lives on.
        let response = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&request)))
            .unwrap_or_else(|_| Response::text(500, "internal error\n"));
        if stream.set_nonblocking(false).is_err()
            || stream.set_write_timeout(Some(write_timeout)).is_err()
        {
            continue;
        }
        // A client that went away is its own business.
        let _ = stream.write_all(&bytes_of(&response, request.method == Method::Head));
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            Head::Partial
        );
        assert_eq!(parse_head(b""), Head::Partial);
        assert_eq!(
            parse_head(
                b"GET /metrics?x=1 HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n"
            ),
            Head::Whole(Request {
                method: Method::Get,
                path: "/metrics".into(),
                accept: Some("application/openmetrics-text".into()),
            })
        );
        assert_eq!(
            parse_head(b"HEAD / HTTP/1.0\r\n\r\n"),
            Head::Whole(Request {
                method: Method::Head,
                path: "/".into(),
                accept: None,
            })
        );
        assert_eq!(parse_head(b"POST / HTTP/1.1\r\n\r\n"), Head::OtherMethod);
        assert_eq!(parse_head(b"\x00\x01 nonsense\r\n\r\n"), Head::Malformed);
    }

    #[test]
    fn responses_say_their_length_and_close() {
        let r = Response::text(404, "no\n");
        let b = String::from_utf8(bytes_of(&r, false)).unwrap();
        assert!(b.starts_with("HTTP/1.1 404 Not Found\r\n"), "{b}");
        assert!(b.contains("Content-Length: 3\r\n") && b.contains("Connection: close\r\n"));
        assert!(b.ends_with("\r\n\r\nno\n"));
        let b = String::from_utf8(bytes_of(&r, true)).unwrap();
        assert!(b.ends_with("\r\n\r\n"), "{b}");
    }

    /// A real server on loopback: a handler that panics answers 500 and its worker lives
    /// on to answer the next request, also one whose sender shut its side after it;
    /// `stop` ends it.
    #[test]
    fn a_panicking_handler_answers_500_and_a_half_closed_request_is_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let limits = Limits {
            workers: 1,
            ..LIMITS
        };
        let mut half_closed = TcpStream::connect(addr).unwrap();
        half_closed
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        half_closed.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        half_closed.shutdown(std::net::Shutdown::Write).unwrap();
        let server = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                serve(listener, limits, &stop, |r: &Request| {
                    if r.path == "/boom" {
                        panic!("boom");
                    }
                    Response::text(200, "fine\n")
                })
            })
        };
        let get = |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        assert!(get("/boom").starts_with("HTTP/1.1 500 "));
        // A request whose sender shut its side before the server even accepted it (the
        // request and the end arrive together) is still answered.
        let mut out = String::new();
        half_closed.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
        let ok = get("/");
        assert!(
            ok.starts_with("HTTP/1.1 200 ") && ok.ends_with("fine\n"),
            "{ok}"
        );
        // Refusals name the limit.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(LIMITS.max_head + 100, b'a');
        let _ = s.write_all(&big);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
        assert!(out.contains("larger than 8192 bytes"), "{out}");
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
    }

    proptest::proptest! {
        /// Any bytes, at any size up to the limit, parse to something without panicking.
        #[test]
        fn any_head_parses_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..9000)) {
            let _ = parse_head(&bytes);
        }

        #[test]
        fn any_printable_head_parses_without_panic(text in "[ -~\r\n]{0,400}") {
            let _ = parse_head(text.as_bytes());
        }
    }
}
