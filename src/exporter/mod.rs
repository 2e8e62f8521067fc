//! `memtrial exporter`: the fleet view in Prometheus. Serves `/metrics` with the memory of
//! the processes whose name or command line matches a regex: RSS, PSS, USS, swap,
//! threads, the allocator answering `malloc`, glibc arenas against their limit, the cgroup's
//! CPU quota and memory limit, the arena pitfall, and the allocator's own live and held
//! bytes where memtrial's probe is in the process. See `docs/exporter.md`.
//!
//! [`collect`] reads (the same `linux` and `inspect` readers as `memtrial inspect`),
//! [`figures`] holds and sums, [`metrics`] writes the exposition with the official
//! Prometheus client; [`serve`] answers HTTP with `tiny_http` on one thread, one scrape
//! at a time.

pub mod collect;
pub mod figures;
pub mod metrics;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use collect::{Collector, Settings};

/// Errors of the exporter; each names the flag, the value, why, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("--listen {value}: not an address and port ({why}); give IP:PORT, e.g. 127.0.0.1:9464, 0.0.0.0:9464 or [::1]:9464")]
    BadListen { value: String, why: String },
    #[error("--listen {value}: the address is in use (another exporter, or another program on port {port}); stop it or choose another port")]
    InUse { value: String, port: u16 },
    #[error("--listen {value}: {why}; choose an address of this machine and a port you may bind (ports below 1024 need root)")]
    CannotBind { value: String, why: String },
    #[error("--match {value}: not a regular expression: {why}; give one in Rust regex syntax, e.g. 'puma|sidekiq|java'")]
    BadRegex { value: String, why: String },
    #[error("the HTTP server failed: {0}")]
    Server(String),
}

/// Parses `--listen`.
pub fn parse_listen(value: &str) -> Result<SocketAddr, ExporterError> {
    value
        .trim()
        .parse::<SocketAddr>()
        .map_err(|e| ExporterError::BadListen {
            value: value.to_string(),
            why: e.to_string(),
        })
}

/// Compiles `--match` (with a size limit: no pattern can make it use unbounded memory).
pub fn parse_match(value: &str) -> Result<regex::Regex, ExporterError> {
    regex::RegexBuilder::new(value)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ExporterError::BadRegex {
            value: value.to_string(),
            // The regex crate's message spans lines (a caret diagram); keep its last line.
            why: e
                .to_string()
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("invalid")
                .trim()
                .trim_start_matches("error: ")
                .to_string(),
        })
}

/// Binds `--listen`: a port in use or refused is a clear error before anything runs.
pub fn bind(addr: SocketAddr, value: &str) -> Result<TcpListener, ExporterError> {
    TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => ExporterError::InUse {
            value: value.to_string(),
            port: addr.port(),
        },
        _ => ExporterError::CannotBind {
            value: value.to_string(),
            why: e.to_string(),
        },
    })
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `/metrics` on `listener` until `stop` is set (SIGINT, SIGTERM). One request at a
/// time: a scrape is bounded by the budget, and two scrapers queue rather than double the
/// cost.
pub fn serve(
    listener: TcpListener,
    mut collector: Collector,
    stop: &AtomicBool,
) -> Result<(), ExporterError> {
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| ExporterError::Server(e.to_string()))?;
    while !stop.load(Ordering::Relaxed) {
        let req = match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ExporterError::Server(e.to_string())),
        };
        let path = req.url().split('?').next().unwrap_or("");
        let response = match (req.method(), path) {
            (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => {
                match metrics::encode(&collector.scrape()) {
                    Ok(body) => text_response(body, 200, OPENMETRICS),
                    Err(_) => text_response("encoding failed\n".into(), 500, "text/plain"),
                }
            }
            (tiny_http::Method::Get | tiny_http::Method::Head, "/") => text_response(
                "memtrial exporter: the metrics are at /metrics\n".into(),
                200,
                "text/plain; charset=utf-8",
            ),
            _ => text_response("not found: try /metrics\n".into(), 404, "text/plain"),
        };
        // A scraper that went away is its own business, not the exporter's.
        let _ = req.respond(response);
    }
    Ok(())
}

fn text_response(
    body: String,
    code: u16,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let mut r = tiny_http::Response::from_data(body.into_bytes()).with_status_code(code);
    if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", content_type) {
        r.add_header(h);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_values() {
        assert!(parse_listen("127.0.0.1:9464").is_ok());
        assert!(parse_listen("[::1]:9464").is_ok());
        for bad in [
            "localhost:9464",
            "127.0.0.1",
            "127.0.0.1:99999",
            ":9464",
            "",
        ] {
            let e = parse_listen(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--listen {bad}: ")), "{e}");
            assert!(e.contains("give IP:PORT"), "{e}");
        }
    }

    #[test]
    fn bad_regex_names_flag_value_and_reason() {
        let e = parse_match("puma(").unwrap_err().to_string();
        assert!(
            e.starts_with("--match puma(: not a regular expression: "),
            "{e}"
        );
        assert!(e.contains("unclosed group"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(parse_match("puma|sidekiq|java").is_ok());
        // A pattern whose automaton would be huge is refused, not built.
        assert!(parse_match("(?:[a-z]{1,100}){1,100}x{1000}").is_err());
    }

    proptest::proptest! {
        #[test]
        fn flags_never_panic(text in "\\PC{0,60}|[0-9a-f:.\\[\\]]{0,40}") {
            let _ = parse_listen(&text);
            let _ = parse_match(&text);
        }

        /// Any process name (a comm may hold any byte but NUL) gives a valid exposition.
        #[test]
        fn any_group_name_encodes(name in "\\PC{0,15}|[\"\\\\\n{}=,]{0,15}") {
            let mut p = figures::tests::process(1, &name);
            p.probe = None;
            let s = figures::Snapshot { processes: vec![p], ..figures::Snapshot::default() };
            let text = metrics::encode(&s).unwrap();
            proptest::prop_assert!(text.ends_with("# EOF\n"));
            proptest::prop_assert_eq!(text.matches("memtrial_group_processes{").count(), 1);
        }
    }

    #[test]
    fn a_port_in_use_is_named() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let e = bind(addr, &addr.to_string()).unwrap_err().to_string();
        assert!(e.contains("the address is in use"), "{e}");
        assert!(e.contains(&format!("port {}", addr.port())), "{e}");
    }
}
