//! Server trials: a free port per run, `{port}` substitution, readiness.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::load::{self, LoadSpec, Mode, Source};
use crate::plan::{substitute, ServerPlan};

/// A port free on 127.0.0.1 right now (the kernel picks it; it is released at once, so a
/// server started next can bind it).
pub fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The load of one run against the server on `port`.
pub fn load_spec(plan: &ServerPlan, port: u16, source: Source) -> Result<LoadSpec, String> {
    let url = load::parse_url(&substitute(&plan.url, port))?;
    let addr = url.socket_addr()?;
    let mode = match plan.rate {
        Some(r) => Mode::Open {
            rate_per_sec: r,
            connections: plan.connections,
        },
        None => Mode::Closed {
            connections: plan.connections,
        },
    };
    Ok(LoadSpec {
        addr,
        host_header: url.host_header(),
        source,
        mode,
        threads: plan.threads,
        duration: Duration::from_millis(plan.duration_ms),
        warmup: Duration::from_millis(plan.warmup_ms),
        timeout: Duration::from_millis(plan.request_timeout_ms),
    })
}

/// Why a server never became ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotReady {
    /// The server process exited first.
    Exited,
    /// Nothing answered within the time allowed; the last thing seen.
    TimedOut { last: String },
    /// memtrial was interrupted meanwhile.
    Interrupted,
}

/// What the readiness check saw when the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ready {
    pub after: Duration,
    /// The HTTP status of the readiness request.
    pub status: u16,
}

/// Why one readiness probe got no HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("connect to {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    #[error("send to {addr}: {reason}")]
    Send { addr: SocketAddr, reason: String },
    #[error("read from {addr}: {reason}")]
    Read { addr: SocketAddr, reason: String },
    #[error("{addr} accepted the connection and closed it without answering")]
    ClosedWithoutAnswer { addr: SocketAddr },
    #[error("{addr} answered something that is not HTTP/1.x: {head:?}")]
    NotHttp { addr: SocketAddr, head: String },
}

/// One readiness probe: TCP connect, then `GET path` with `Connection: close`; the status
/// code of the answer.
pub(crate) fn probe_http(
    addr: SocketAddr,
    host: &str,
    path: &str,
    timeout: Duration,
) -> Result<u16, ProbeError> {
    let io = |reason: std::io::Error| reason.to_string();
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| ProbeError::Connect {
        addr,
        reason: io(e),
    })?;
    let send = |e: std::io::Error| ProbeError::Send {
        addr,
        reason: io(e),
    };
    s.set_read_timeout(Some(timeout)).map_err(send)?;
    s.set_write_timeout(Some(timeout)).map_err(send)?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: memtrial-ready\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).map_err(send)?;
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if got == 0 && e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Err(ProbeError::ClosedWithoutAnswer { addr })
            }
            Err(e) => {
                return Err(ProbeError::Read {
                    addr,
                    reason: io(e),
                })
            }
        }
    }
    if got == 0 {
        return Err(ProbeError::ClosedWithoutAnswer { addr });
    }
    let head = String::from_utf8_lossy(&buf[..got]);
    let mut parts = head.split_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => Ok(code),
        _ => Err(ProbeError::NotHttp {
            addr,
            head: head.trim().to_string(),
        }),
    }
}

/// Polls until the server answers an HTTP request, the process exits, or time runs out.
pub(crate) fn wait_ready(
    addr: SocketAddr,
    host: &str,
    path: &str,
    limit: Duration,
    alive: &mut dyn FnMut() -> bool,
    interrupted: &dyn Fn() -> bool,
) -> Result<Ready, NotReady> {
    let start = Instant::now();
    let mut last;
    let mut pause = Duration::from_millis(10);
    loop {
        if interrupted() {
            return Err(NotReady::Interrupted);
        }
        if !alive() {
            return Err(NotReady::Exited);
        }
        match probe_http(addr, host, path, Duration::from_millis(500)) {
            Ok(status) => {
                return Ok(Ready {
                    after: start.elapsed(),
                    status,
                })
            }
            Err(e) => last = e.to_string(),
        }
        if start.elapsed() >= limit {
            return Err(NotReady::TimedOut { last });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_substitution() {
        let p = free_port().unwrap();
        assert!(p > 0);
        assert_eq!(
            substitute("http://127.0.0.1:{port}/x?p={port}", 8123),
            "http://127.0.0.1:8123/x?p=8123"
        );
        assert_eq!(substitute("no placeholder", 1), "no placeholder");
    }

    #[test]
    fn readiness_against_a_real_listener() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            c.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
        });
        let r = wait_ready(
            addr,
            "127.0.0.1",
            "/health",
            Duration::from_secs(5),
            &mut || true,
            &|| false,
        )
        .unwrap();
        assert_eq!(r.status, 204);
        server.join().unwrap();
    }

    #[test]
    fn a_server_that_closes_at_once_is_named_as_such_not_as_non_http() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            drop(c);
        });
        let e = probe_http(addr, "127.0.0.1", "/", Duration::from_secs(2)).unwrap_err();
        server.join().unwrap();
        assert_eq!(e, ProbeError::ClosedWithoutAnswer { addr });
        assert!(e.to_string().contains("closed it without answering"), "{e}");
    }

    #[test]
    fn nobody_listening_times_out_with_the_last_error() {
        let port = free_port().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        match wait_ready(
            addr,
            "x",
            "/",
            Duration::from_millis(300),
            &mut || true,
            &|| false,
        ) {
            Err(NotReady::TimedOut { last }) => assert!(last.contains("connect"), "{last}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            wait_ready(
                addr,
                "x",
                "/",
                Duration::from_secs(5),
                &mut || false,
                &|| false
            ),
            Err(NotReady::Exited)
        );
    }
}
