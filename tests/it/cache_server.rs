//! `memtrial workload cache-server`: real HTTP/1.1 over loopback, keep-alive, a clean stop on
//! SIGTERM with its summary line, and flags refused with the flag named.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// The server, killed and reaped if a test fails before stopping it.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads one HTTP response (head and Content-Length body) from a keep-alive stream.
fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).expect("read head"),
            1,
            "closed early"
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).expect("ASCII head");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .trim()
        .parse()
        .expect("a length");
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).expect("read body");
    (head, String::from_utf8(body).expect("text body"))
}

#[test]
fn cache_server_answers_keep_alive_requests_and_stops_on_sigterm() {
    let child = Command::new(memtrial())
        .args([
            "workload",
            "cache-server",
            "--port",
            "0",
            "--threads",
            "4",
            "--cache-size",
            "64M",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start memtrial");
    let mut server = Server(child);
    let mut stderr = BufReader::new(server.0.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("first line");
    let port: u16 = first
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first:?}"));

    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Several requests on one connection, one of them with a body to skip, and two
    // pipelined in a single write.
    for i in 0..5 {
        write!(stream, "GET /x{i} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut stream);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(body.starts_with("key "), "{body}");
    }
    stream
        .write_all(b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /a HTTP/1.1\r\n\r\n")
        .unwrap();
    for _ in 0..2 {
        let (head, _) = read_response(&mut stream);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    }
    // A second connection alongside, closed by its request.
    let mut other = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    other
        .write_all(b"GET /c HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (head, _) = read_response(&mut other);
    assert!(head.contains("Connection: close"), "{head}");
    assert_eq!(other.read(&mut [0u8; 1]).unwrap_or(0), 0, "not closed");
    // A malformed request: 400 and closed.
    let mut bad = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(b"\x01\x02\x03 nonsense\r\n\r\n").unwrap();
    let (head, _) = read_response(&mut bad);
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");

    // SAFETY: a signal to our own child, not yet waited for.
    unsafe {
        libc::kill(server.0.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = server.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).expect("stderr");
    assert_eq!(status.code(), Some(0), "{first}{rest}");
    let summary = rest
        .lines()
        .find(|l| l.starts_with("cache-server: "))
        .unwrap_or_else(|| panic!("no summary in {rest:?}"));
    assert!(
        summary.contains("8 requests (1 refused) on 3 connections"),
        "{summary}"
    );
    assert!(summary.contains("cache 8 entries"), "{summary}");
}

#[test]
fn cache_server_refuses_bad_flags_naming_them() {
    for (args, named) in [
        (&["--port", "70000"][..], "--port 70000"),
        (&["--port", "0", "--threads", "0"][..], "--threads 0"),
        (
            &["--port", "0", "--cache-size", "10K"][..],
            "--cache-size 10K",
        ),
        (
            &["--port", "0", "--cache-size", "lots"][..],
            "--cache-size lots",
        ),
        (&["--port", "0", "--drift", "0"][..], "--drift 0"),
        (
            &["--port", "0", "--min-size", "2K", "--max-size", "1K"][..],
            "--min-size",
        ),
    ] {
        let mut all = vec!["workload", "cache-server"];
        all.extend_from_slice(args);
        let r = memtrial_in_tmp(&all);
        assert_eq!(r.code(), 2, "{all:?}: {}", r.stderr());
        assert!(r.stderr().contains(named), "{all:?}: {}", r.stderr());
    }
}
