//! Targets files: a list of requests sent round-robin, in the same order every run.
//!
//! Format (one request per block, vegeta-like):
//!
//! ```text
//! # comments and blank lines are ignored
//! /health                              a path: GET, sent to the load's address
//! HEAD /items?page=2                   METHOD PATH
//! http://127.0.0.1:8080/search?q=a     an absolute http:// URL: only its path is used
//! POST /items                          header lines follow their request line
//! Content-Type: application/json
//! @body.json                           the body, from a file next to the targets file
//! ```
//!
//! Every request goes to the load's address (`--url`), so the host and port of absolute
//! URLs are ignored; this lets one file serve servers on any (`{port}`) port.

use std::path::Path;

use super::http::{parse_url, Method, Request};

/// A line of a targets file that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetsError {
    /// 1-based line number (0 for the file as a whole).
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for TargetsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "line {}: {}", self.line, self.reason)
        }
    }
}

impl std::error::Error for TargetsError {}

/// Parses a targets file. `read_body` loads `@FILE` bodies (given the name as written).
pub fn parse_targets(
    text: &str,
    read_body: &mut dyn FnMut(&str) -> Result<Vec<u8>, String>,
) -> Result<Vec<Request>, TargetsError> {
    let mut out: Vec<Request> = Vec::new();
    // Whether the last request can still take header/body lines.
    let mut open = false;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |reason: String| TargetsError {
            line: line_no,
            reason,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            open = open && !line.is_empty();
            continue;
        }
        if let Some(name) = line.strip_prefix('@') {
            let req = out.last_mut().filter(|_| open).ok_or_else(|| {
                err("a body (@FILE) must follow a request line and its headers".into())
            })?;
            if !req.body.is_empty() {
                return Err(err("this request already has a body".into()));
            }
            let name = name.trim();
            if name.is_empty() {
                return Err(err("'@' needs a file name".into()));
            }
            req.body = read_body(name).map_err(|e| err(format!("body file '{name}': {e}")))?;
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if first.ends_with(':') && !first.contains('/') {
            let req = out
                .last_mut()
                .filter(|_| open)
                .ok_or_else(|| err(format!("header '{line}' does not follow a request line")))?;
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            let name = name.trim();
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(err(format!("'{name}' is not a header name")));
            }
            req.headers
                .push((name.to_string(), value.trim().to_string()));
            continue;
        }
        out.push(parse_request_line(line).map_err(err)?);
        open = true;
    }
    if out.is_empty() {
        return Err(TargetsError {
            line: 0,
            reason: "no requests in the targets file".into(),
        });
    }
    Ok(out)
}

/// Reads a targets file; `@FILE` bodies are read relative to its directory.
pub(crate) fn load_targets_file(path: &Path) -> Result<Vec<Request>, TargetsError> {
    let text = std::fs::read_to_string(path).map_err(|e| TargetsError {
        line: 0,
        reason: format!("cannot read {}: {e}", path.display()),
    })?;
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    parse_targets(&text, &mut |name| {
        std::fs::read(dir.join(name)).map_err(|e| e.to_string())
    })
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_request_line(line: &str) -> Result<Request, String> {
    let mut parts = line.split_whitespace();
    let a = parts.next().unwrap_or("");
    let (method, target) = match parts.next() {
        Some(t) => (a.parse::<Method>()?, t),
        None => (Method::Get, a),
    };
    if let Some(extra) = parts.next() {
        return Err(format!(
            "unexpected '{extra}': a request line is `URL` or `METHOD URL`"
        ));
    }
    let path_and_query = if target.starts_with('/') {
        target.split('#').next().unwrap_or(target).to_string()
    } else if target.contains("://") {
        parse_url(target)?.path_and_query
    } else {
        return Err(format!(
            "'{target}' is neither a path (/...) nor an http:// URL"
        ));
    };
    Ok(Request {
        method,
        path_and_query,
        headers: Vec::new(),
        body: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(name: &str) -> Result<Vec<u8>, String> {
        match name {
            "body.json" => Ok(b"{\"a\":1}".to_vec()),
            _ => Err("No such file or directory".into()),
        }
    }

    #[test]
    fn parses_paths_methods_urls_headers_and_bodies() {
        let text = "# a comment\n\
/health\n\
HEAD /items?page=2\n\
\n\
http://127.0.0.1:9999/search?q=a#x\n\
POST /items\n\
Content-Type: application/json\n\
X-Empty:\n\
@body.json\n\
DELETE http://localhost/items/1\n";
        let r = parse_targets(text, &mut no_files).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(r[0], Request::get("/health"));
        assert_eq!(
            (r[1].method.clone(), r[1].path_and_query.as_str()),
            (Method::Head, "/items?page=2")
        );
        assert_eq!(r[2].path_and_query, "/search?q=a");
        assert_eq!(r[3].method, Method::Post);
        assert_eq!(
            r[3].headers,
            vec![
                ("Content-Type".to_string(), "application/json".to_string()),
                ("X-Empty".to_string(), String::new())
            ]
        );
        assert_eq!(r[3].body, b"{\"a\":1}");
        assert_eq!(
            (r[4].method.clone(), r[4].path_and_query.as_str()),
            (Method::Delete, "/items/1")
        );
    }

    #[test]
    fn errors_name_the_line() {
        let cases: [(&str, usize, &str); 8] = [
            ("/a\nget /b\n", 2, "not an HTTP method"),
            ("/a\nGET /b extra\n", 2, "unexpected 'extra'"),
            ("Accept: */*\n/a\n", 1, "does not follow a request line"),
            ("/a\n\nAccept: */*\n", 3, "does not follow a request line"),
            ("/a\n@missing.bin\n", 2, "body file 'missing.bin'"),
            ("/a\nhttps://x/\n", 2, "https is not supported"),
            ("/a\nitems\n", 2, "neither a path"),
            ("# only comments\n\n", 0, "no requests"),
        ];
        for (text, line, needle) in cases {
            let e = parse_targets(text, &mut no_files).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
        }
    }
}
