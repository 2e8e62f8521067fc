//! `memtrial exporter`: the fleet view in Prometheus. Serves `/metrics` with the memory of
//! the processes whose name or command line matches a regex: RSS, PSS, USS, swap,
//! threads, the allocator answering `malloc`, glibc arenas against their limit, the cgroup's
//! CPU quota and memory limit, the arena pitfall, and the allocator's own live and held
//! bytes where memtrial's probe is in the process. See `docs/exporter.md`.
//!
//! [`collect`] reads (the same `linux` and `inspect` readers as `memtrial inspect`),
//! [`figures`] holds and sums, [`metrics`] writes the exposition with the official
//! Prometheus client; [`serve`] answers HTTP through [`http`], a small server whose
//! threads, connections and waits are bounded, one scrape at a time.

pub mod collect;
pub mod figures;
pub mod http;
pub mod metrics;
mod reader;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

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
    #[error("--match '{value}': matches the empty string, so it matches every process on the machine (the exporter's cost and cardinality grow with them); give the names to export, e.g. 'puma|sidekiq|java'")]
    MatchesEverything { value: String },
    #[error("--match '{value}': matches any name at all (even 'a', '0', '-' and ' '), so it matches every process on the machine (the exporter's cost and cardinality grow with them); give the names to export, e.g. 'puma|sidekiq|java'")]
    MatchesAnyName { value: String },
    #[error("--probe-dir {value}: {why}; give an absolute directory of plain names, e.g. {DEFAULT_PROBE_DIR}")]
    BadProbeDir { value: String, why: &'static str },
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

/// Where the probe's reports are looked for by default (inside each process's root):
/// the value to give `MEMTRIAL_PROBE_DIR` in a Deployment.
pub(crate) const DEFAULT_PROBE_DIR: &str = "/run/memtrial/probe";

/// Parses `--probe-dir`: an absolute path of plain names (no `.`, no `..`), not `/`.
pub fn parse_probe_dir(value: &str) -> Result<std::path::PathBuf, ExporterError> {
    use std::path::{Component, Path};
    let bad = |why| ExporterError::BadProbeDir {
        value: value.to_string(),
        why,
    };
    let p = Path::new(value);
    if !p.is_absolute() {
        return Err(bad("not an absolute path"));
    }
    if value.contains('\0') {
        return Err(bad("holds a NUL byte"));
    }
    if value.len() > 1024 {
        return Err(bad("longer than 1024 bytes"));
    }
    let mut names = 0;
    for c in p.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(_) => names += 1,
            _ => return Err(bad("holds `.` or `..`")),
        }
    }
    if names == 0 {
        return Err(bad("is the root directory"));
    }
    Ok(p.components().collect())
}

/// Compiles `--match` (with a size limit: no pattern can make it use unbounded memory).
/// A pattern that matches the empty string (`''`, `.*`, `a|`), or any name at all (`.+`),
/// matches every process and is refused.
pub fn parse_match(value: &str) -> Result<regex::Regex, ExporterError> {
    let re = compile_match(value)?;
    if re.is_match("") {
        return Err(ExporterError::MatchesEverything {
            value: value.to_string(),
        });
    }
    // `.+`, `.`, `\w|\W`: a pattern that finds a match in names this unlike each other
    // would find one in every name.
    const UNLIKE: [&str; 8] = ["a", "Z", "0", "-", "/", " ", "\u{e9}", "kworker/0:1"];
    if UNLIKE.iter().all(|n| re.is_match(n)) {
        return Err(ExporterError::MatchesAnyName {
            value: value.to_string(),
        });
    }
    Ok(re)
}

fn compile_match(value: &str) -> Result<regex::Regex, ExporterError> {
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

/// Serves `/metrics` on `listener` until `stop` is set (SIGINT, SIGTERM), through the
/// bounded server of [`http`]: a fixed pool of worker threads, request heads read within
/// a timeout, so that no number of idle or slow connections can freeze it. One scrape at
/// a time: a scrape is bounded by the budget, and two scrapers queue rather than double
/// the cost.
pub fn serve(
    listener: TcpListener,
    collector: Collector,
    stop: &AtomicBool,
) -> Result<(), ExporterError> {
    let collector = Mutex::new(collector);
    http::serve(listener, http::LIMITS, stop, move |req| {
        respond(&collector, req)
    })
    .map_err(|e| ExporterError::Server(e.to_string()))
}

/// The answer to one request.
fn respond(collector: &Mutex<Collector>, req: &http::Request) -> http::Response {
    match req.path.as_str() {
        "/metrics" => {
            // A scrape that panicked cannot have left the collector half-written in a
            // way that matters: its cache is only ever replaced whole.
            let snapshot = match collector.lock() {
                Ok(mut c) => c.scrape(),
                Err(poisoned) => poisoned.into_inner().scrape(),
            };
            let format = metrics::Format::negotiate(req.accept.as_deref());
            match metrics::encode(&snapshot) {
                Ok(text) => http::Response {
                    code: 200,
                    content_type: format.content_type(),
                    body: format.render(text).into_bytes(),
                },
                Err(_) => http::Response::text(500, "encoding failed\n"),
            }
        }
        "/" => http::Response::text(200, "memtrial exporter: the metrics are at /metrics\n"),
        _ => http::Response::text(404, "not found: try /metrics\n"),
    }
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
        fn flags_never_panic(text in "\\PC{0,60}|[0-9a-f:.\\[\\]]{0,40}|(/[a-z.]{0,3}){0,6}") {
            let _ = parse_listen(&text);
            let _ = parse_match(&text);
            if let Ok(p) = parse_probe_dir(&text) {
                // What is accepted is absolute and holds plain names only.
                proptest::prop_assert!(p.is_absolute());
                proptest::prop_assert!(p.components().skip(1).all(|c| matches!(c, std::path::Component::Normal(_))));
            }
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
    fn a_match_of_everything_is_refused_naming_the_flag() {
        for all in ["", ".*", "puma|", "^", "x*", "(?:)"] {
            let e = parse_match(all).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--match '{all}': matches the empty string")),
                "{e}"
            );
            assert!(e.contains("every process"), "{e}");
        }
        assert!(parse_match("puma").is_ok());
        for any in [".+", ".", "(?s).", "\\w|\\W", "[^q]|q"] {
            let e = parse_match(any).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--match '{any}': matches any name at all")),
                "{e}"
            );
        }
        for narrow in ["puma|sidekiq|java", "[a-z]", "^ruby", "\\d", "k.*"] {
            assert!(parse_match(narrow).is_ok(), "{narrow}");
        }
    }

    #[test]
    fn probe_dirs() {
        assert_eq!(
            parse_probe_dir("/run/memtrial/probe/").unwrap(),
            std::path::PathBuf::from("/run/memtrial/probe")
        );
        assert!(parse_probe_dir(DEFAULT_PROBE_DIR).is_ok());
        // A `.` inside is no way out: it is dropped.
        assert_eq!(
            parse_probe_dir("/run/./x").unwrap(),
            std::path::PathBuf::from("/run/x")
        );
        for (bad, why) in [
            ("run/x", "not an absolute path"),
            ("/", "is the root directory"),
            ("/run/../etc", "`..`"),
            ("/a\0b", "NUL"),
        ] {
            let e = parse_probe_dir(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--probe-dir {bad}: ")), "{e}");
            assert!(
                e.contains(why) && e.contains("give an absolute directory"),
                "{e}"
            );
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
