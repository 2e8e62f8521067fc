//! The lean HTTP/1.1 path: requests serialised to bytes once, `http://` URLs, and an
//! incremental response parser that never copies a body (Content-Length, chunked, or
//! read-until-close framing; `Connection: close`; HEAD, 1xx, 204 and 304 without body).

use std::fmt;
use std::str::FromStr;

/// An HTTP method. Behaviour is an enum; unusual methods are kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Patch,
    Options,
    /// Any other token, upper-case as written.
    Other(String),
}

impl Method {
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Patch => "PATCH",
            Method::Options => "OPTIONS",
            Method::Other(s) => s,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = String;
    /// Accepts an HTTP token of upper-case letters (e.g. `GET`, `PROPFIND`).
    fn from_str(s: &str) -> Result<Method, String> {
        Ok(match s {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            _ if !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_uppercase()) => {
                Method::Other(s.to_string())
            }
            _ => return Err(format!("'{s}' is not an HTTP method (e.g. GET, POST)")),
        })
    }
}

/// One request of a load: what to send, independent of the server's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// Origin-form target, e.g. `/items?page=2`; always starts with `/`.
    pub path_and_query: String,
    /// Extra header lines (name, value); `Host` is added from the load's address.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// A `GET` of `path_and_query` without headers or body.
    pub fn get(path_and_query: impl Into<String>) -> Request {
        Request {
            method: Method::Get,
            path_and_query: path_and_query.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The bytes on the wire: request line, `Host`, the headers, `Content-Length` when
    /// there is a body and none was given, the body. Serialised once per run.
    pub(crate) fn serialise(&self, host_header: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.path_and_query.len() + self.body.len());
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.path_and_query.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host_header.as_bytes());
        out.extend_from_slice(b"\r\n");
        let mut has_length = false;
        for (name, value) in &self.headers {
            if name.eq_ignore_ascii_case("host") {
                continue;
            }
            has_length |= name.eq_ignore_ascii_case("content-length")
                || name.eq_ignore_ascii_case("transfer-encoding");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !self.body.is_empty() && !has_length {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// A parsed `http://host[:port]/path?query` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host as written (name, IPv4, or bracketed IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// Origin-form target; `/` when the URL has no path.
    pub path_and_query: String,
}

impl HttpUrl {
    /// The `Host` header value: the host, plus `:port` unless it is 80.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Resolves the host to a socket address (the first one; IPv4 preferred).
    pub fn socket_addr(&self) -> Result<std::net::SocketAddr, String> {
        use std::net::ToSocketAddrs;
        let addrs: Vec<_> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve '{}': {e}", self.host))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| format!("'{}' resolves to no address", self.host))
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.host_header(), self.path_and_query)
    }
}

/// Parses an `http://` URL. `https://` is refused with a reason: memtrial's load
/// generator speaks plain HTTP/1.1 only.
pub fn parse_url(text: &str) -> Result<HttpUrl, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &t[7..]
    } else if lower.starts_with("https://") {
        return Err(format!(
            "'{t}': https is not supported; the load generator speaks plain HTTP/1.1 (use http://, e.g. behind the TLS terminator)"
        ));
    } else if let Some(i) = t.find("://") {
        return Err(format!(
            "'{t}': scheme '{}' is not supported; use http://",
            &t[..i]
        ));
    } else {
        return Err(format!(
            "'{t}' is not a URL; write it as http://HOST[:PORT]/PATH"
        ));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(format!("'{t}': user information in URLs is not supported"));
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let end = inner
            .find(']')
            .ok_or_else(|| format!("'{t}': unclosed '[' in the host"))?;
        let host = &inner[..end];
        let after = &inner[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(format!("'{t}': unexpected '{after}' after the host")),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("'{t}' has no host"));
    }
    let port = match port {
        None => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("'{t}': port '{p}' is not a number from 1 to 65535"))?,
    };
    let path_and_query = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.split('#').next().unwrap_or(p).to_string(),
    };
    if path_and_query.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "'{t}': the path contains spaces or control characters; percent-encode them"
        ));
    }
    Ok(HttpUrl {
        host: host.to_string(),
        port,
        path_and_query,
    })
}

/// What went wrong while reading a response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("malformed response head: {0}")]
    Head(String),
    #[error("response head larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("response with more than {0} header lines")]
    TooManyHeaders(usize),
    #[error("malformed chunked body")]
    Chunked,
    #[error("malformed Content-Length")]
    ContentLength,
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size { value: u64, digits: u8 },
    Ext { value: u64 },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerEndLf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(Body),
    Done,
}

/// The outcome of feeding bytes to a [`ResponseParser`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More bytes are needed. For the head, the caller keeps the bytes given so far
    /// (and appends); after the head, everything given was consumed.
    NeedMore,
    /// The response is complete; `consumed` bytes of the input belonged to it.
    Done { consumed: usize },
}

/// Largest response head accepted.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Header lines parsed without allocating; a head with more is parsed again with room
/// for [`MAX_HEADERS`].
const FEW_HEADERS: usize = 64;
/// Most header lines accepted in one response head.
pub(crate) const MAX_HEADERS: usize = 1024;

/// An incremental HTTP/1.1 response reader for one response at a time. The head must
/// be given contiguously (the caller buffers it until [`ResponseParser::in_head`] is
/// false); body bytes are only counted, never stored.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    state: State,
    head_request: bool,
    status: u16,
    close: bool,
}

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser::new(false)
    }
}

impl ResponseParser {
    /// A parser for the response to a request; `head_request` for `HEAD` (no body).
    pub fn new(head_request: bool) -> ResponseParser {
        ResponseParser {
            state: State::Head,
            head_request,
            status: 0,
            close: false,
        }
    }

    /// Starts over for the next response on the connection.
    pub fn reset(&mut self, head_request: bool) {
        *self = ResponseParser::new(head_request);
    }

    /// The final status code (0 until the head is parsed).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// True when the server asked to close the connection after this response
    /// (`Connection: close`, HTTP/1.0 without keep-alive, or a body delimited by close).
    pub(crate) fn must_close(&self) -> bool {
        self.close
    }

    /// True while the head has not been parsed completely.
    pub fn in_head(&self) -> bool {
        self.state == State::Head
    }

    /// True when the body is delimited by the end of the connection.
    pub(crate) fn until_close(&self) -> bool {
        self.state == State::Body(Body::UntilClose)
    }

    /// True once the response is complete.
    #[cfg(test)]
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Marks a read-until-close body as complete (the peer closed).
    pub fn finish_on_close(&mut self) -> bool {
        if self.until_close() {
            self.state = State::Done;
            true
        } else {
            false
        }
    }

    /// Feeds bytes. In the head state `input` must hold the whole head received so far.
    pub fn feed(&mut self, input: &[u8]) -> Result<Progress, ResponseError> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Done => return Ok(Progress::Done { consumed: pos }),
                State::Head => {
                    let rest = &input[pos..];
                    match self.parse_head(rest)? {
                        None => {
                            if rest.len() > MAX_HEAD {
                                return Err(ResponseError::HeadTooLarge(MAX_HEAD));
                            }
                            return Ok(Progress::NeedMore);
                        }
                        Some(n) => pos += n,
                    }
                }
                State::Body(Body::UntilClose) => return Ok(Progress::NeedMore),
                State::Body(Body::Length(left)) => {
                    let avail = (input.len() - pos) as u64;
                    if avail >= left {
                        pos += left as usize;
                        self.state = State::Done;
                    } else {
                        self.state = State::Body(Body::Length(left - avail));
                        return Ok(Progress::NeedMore);
                    }
                }
                State::Body(Body::Chunked(c)) => {
                    let (n, next) = chunked(c, &input[pos..])?;
                    pos += n;
                    match next {
                        Some(c) => {
                            self.state = State::Body(Body::Chunked(c));
                            return Ok(Progress::NeedMore);
                        }
                        None => self.state = State::Done,
                    }
                }
            }
        }
    }

    /// Parses one head; returns the bytes it took, or None when incomplete. Up to
    /// [`FEW_HEADERS`] lines are parsed on the stack; a longer head is parsed again with
    /// room for [`MAX_HEADERS`].
    fn parse_head(&mut self, buf: &[u8]) -> Result<Option<usize>, ResponseError> {
        let mut few = [httparse::EMPTY_HEADER; FEW_HEADERS];
        let mut resp = httparse::Response::new(&mut few);
        match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => return self.head_parsed(&resp, n).map(Some),
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {}
            Err(e) => return Err(ResponseError::Head(e.to_string())),
        }
        let mut many = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut many);
        match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => self.head_parsed(&resp, n).map(Some),
            Ok(httparse::Status::Partial) => Ok(None),
            Err(httparse::Error::TooManyHeaders) => Err(ResponseError::TooManyHeaders(MAX_HEADERS)),
            Err(e) => Err(ResponseError::Head(e.to_string())),
        }
    }

    /// Takes what matters from a parsed head of `n` bytes: status, framing, keep-alive.
    fn head_parsed(
        &mut self,
        resp: &httparse::Response<'_, '_>,
        n: usize,
    ) -> Result<usize, ResponseError> {
        let status = resp.code.unwrap_or(0);
        let http10 = resp.version == Some(0);
        let mut length: Option<u64> = None;
        let mut chunked_te = false;
        let mut conn_close = false;
        let mut conn_keep_alive = false;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or(ResponseError::ContentLength)?;
                if length.is_some_and(|l| l != v) {
                    return Err(ResponseError::ContentLength);
                }
                length = Some(v);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked_te = h
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .map(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
                    .unwrap_or(false);
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    conn_close |= token.eq_ignore_ascii_case(b"close");
                    conn_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        if (100..200).contains(&status) && status != 101 {
            // An interim response: the real one follows.
            return Ok(n);
        }
        self.status = status;
        self.close = conn_close || (http10 && !conn_keep_alive);
        self.state = if self.head_request || status == 204 || status == 304 {
            State::Done
        } else if chunked_te {
            State::Body(Body::Chunked(Chunk::Size {
                value: 0,
                digits: 0,
            }))
        } else if let Some(len) = length {
            if len == 0 {
                State::Done
            } else {
                State::Body(Body::Length(len))
            }
        } else {
            self.close = true;
            State::Body(Body::UntilClose)
        };
        Ok(n)
    }
}

/// Walks a chunked body; returns bytes consumed and the state to resume in, or None
/// when the body (with its trailers) ended.
fn chunked(mut c: Chunk, input: &[u8]) -> Result<(usize, Option<Chunk>), ResponseError> {
    let mut i = 0;
    while i < input.len() {
        if let Chunk::Data(left) = c {
            let take = left.min((input.len() - i) as u64);
            i += take as usize;
            c = if take == left {
                Chunk::DataCr
            } else {
                Chunk::Data(left - take)
            };
            continue;
        }
        let b = input[i];
        i += 1;
        c = match c {
            Chunk::Size { value, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                    if digits >= 15 {
                        return Err(ResponseError::Chunked);
                    }
                    Chunk::Size {
                        value: value * 16 + d,
                        digits: digits + 1,
                    }
                }
                _ if digits == 0 => return Err(ResponseError::Chunked),
                b';' | b' ' | b'\t' => Chunk::Ext { value },
                b'\r' => Chunk::SizeLf { value },
                b'\n' => size_done(value),
                _ => return Err(ResponseError::Chunked),
            },
            Chunk::Ext { value } => {
                if b == b'\n' {
                    size_done(value)
                } else {
                    Chunk::Ext { value }
                }
            }
            Chunk::SizeLf { value } => match b {
                b'\n' => size_done(value),
                _ => Chunk::SizeLf { value }, // tolerate extension bytes before LF
            },
            Chunk::Data(_) => unreachable!("handled above"),
            Chunk::DataCr => match b {
                b'\r' => Chunk::DataLf,
                b'\n' => Chunk::Size {
                    value: 0,
                    digits: 0,
                },
                _ => return Err(ResponseError::Chunked),
            },
            Chunk::DataLf => match b {
                b'\n' => Chunk::Size {
                    value: 0,
                    digits: 0,
                },
                _ => return Err(ResponseError::Chunked),
            },
            Chunk::TrailerStart => match b {
                b'\r' => Chunk::TrailerEndLf,
                b'\n' => return Ok((i, None)),
                _ => Chunk::TrailerLine,
            },
            Chunk::TrailerLine => {
                if b == b'\n' {
                    Chunk::TrailerStart
                } else {
                    Chunk::TrailerLine
                }
            }
            Chunk::TrailerEndLf => match b {
                b'\n' => return Ok((i, None)),
                _ => return Err(ResponseError::Chunked),
            },
        };
    }
    Ok((i, Some(c)))
}

fn size_done(value: u64) -> Chunk {
    if value == 0 {
        Chunk::TrailerStart
    } else {
        Chunk::Data(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes the way a connection does: the head is
    /// buffered until parsed, body bytes are dropped once fed.
    fn feed_in_steps(wire: &[u8], step: usize, head: bool) -> (u16, bool, usize) {
        let mut p = ResponseParser::new(head);
        let mut buf: Vec<u8> = Vec::new();
        let mut fed = 0;
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            let before_head = p.in_head();
            match p.feed(&buf).expect("valid response") {
                Progress::Done { consumed } => {
                    fed += consumed;
                    return (p.status(), p.must_close(), fed);
                }
                Progress::NeedMore => {
                    if !p.in_head() || !before_head {
                        fed += buf.len();
                        buf.clear();
                    }
                }
            }
        }
        panic!("response incomplete after {} bytes", wire.len());
    }

    #[test]
    fn content_length_response_in_every_split() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhelloEXTRA";
        for step in 1..wire.len() {
            let (status, close, used) = feed_in_steps(wire, step, false);
            assert_eq!((status, close), (200, false), "step {step}");
            assert_eq!(used, wire.len() - 5, "step {step}");
        }
    }

    #[test]
    fn chunked_response_with_extensions_and_trailers_in_every_split() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
4\r\nWiki\r\n5;name=val\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for step in 1..=wire.len() {
            let (status, close, used) = feed_in_steps(wire, step, false);
            assert_eq!((status, close), (200, false), "step {step}");
            assert_eq!(used, wire.len(), "step {step}");
        }
    }

    #[test]
    fn chunked_without_trailers_and_malformed_sizes() {
        let wire =
            b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(feed_in_steps(wire, 7, false), (404, false, wire.len()));
        let mut p = ResponseParser::new(false);
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(p.feed(bad), Err(ResponseError::Chunked));
    }

    #[test]
    fn close_framing_and_http10() {
        let mut p = ResponseParser::new(false);
        let wire = b"HTTP/1.0 200 OK\r\n\r\nbody until close";
        assert_eq!(p.feed(wire), Ok(Progress::NeedMore));
        assert!(p.until_close() && p.must_close());
        assert!(p.finish_on_close());
        assert!(p.is_done());

        let wire = b"HTTP/1.1 500 Oops\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno";
        assert_eq!(feed_in_steps(wire, 100, false), (500, true, wire.len()));
        let wire = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(feed_in_steps(wire, 100, false), (200, false, wire.len()));
    }

    #[test]
    fn no_body_for_head_204_304_and_interim_100() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
        assert_eq!(feed_in_steps(wire, 3, true), (200, false, wire.len()));
        let wire = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(feed_in_steps(wire, 3, false), (204, false, wire.len()));
        let wire =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(feed_in_steps(wire, 200, false), (201, false, wire.len()));
    }

    #[test]
    fn malformed_heads_are_errors() {
        let mut p = ResponseParser::new(false);
        assert!(matches!(
            p.feed(b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(ResponseError::Head(_))
        ));
        let mut p = ResponseParser::new(false);
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(p.feed(wire), Err(ResponseError::ContentLength));
    }

    fn head_with(lines: usize) -> Vec<u8> {
        let mut wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n".to_vec();
        for i in 0..lines {
            wire.extend_from_slice(format!("X-Header-{i}: {i}\r\n").as_bytes());
        }
        wire.extend_from_slice(b"\r\nok");
        wire
    }

    #[test]
    fn many_headers_are_accepted_up_to_the_cap() {
        for lines in [63, 64, 100, 1000] {
            let wire = head_with(lines);
            assert_eq!(
                feed_in_steps(&wire, 4096, false),
                (200, false, wire.len()),
                "{lines}"
            );
        }
        let mut p = ResponseParser::new(false);
        let e = p.feed(&head_with(1100)).unwrap_err();
        assert_eq!(e, ResponseError::TooManyHeaders(MAX_HEADERS));
        assert_eq!(e.to_string(), "response with more than 1024 header lines");
    }

    #[test]
    fn serialises_once_with_host_and_length() {
        let r = Request {
            method: Method::Post,
            path_and_query: "/items?x=1".into(),
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("Host".into(), "ignored".into()),
            ],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            String::from_utf8(r.serialise("127.0.0.1:8080")).unwrap(),
            "POST /items?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        assert_eq!(
            Request::get("/").serialise("h"),
            b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
        );
    }

    #[test]
    fn urls() {
        let u = parse_url("http://127.0.0.1:8080/items?a=b#frag").unwrap();
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, 8080);
        assert_eq!(u.path_and_query, "/items?a=b");
        assert_eq!(u.host_header(), "127.0.0.1:8080");
        let u = parse_url("http://localhost").unwrap();
        assert_eq!((u.port, u.path_and_query.as_str()), (80, "/"));
        assert_eq!(u.host_header(), "localhost");
        let u = parse_url("http://[::1]:9000?q").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9000));
        assert_eq!(u.path_and_query, "/?q");
        assert_eq!(u.host_header(), "[::1]:9000");
        assert!(parse_url("https://x/")
            .unwrap_err()
            .contains("https is not supported"));
        assert!(parse_url("ftp://x/").unwrap_err().contains("'ftp'"));
        assert!(parse_url("127.0.0.1:80").unwrap_err().contains("not a URL"));
        assert!(parse_url("http://x:99999/").unwrap_err().contains("port"));
        assert!(parse_url("http://:80/").unwrap_err().contains("no host"));
        assert!(parse_url("http://x/a b").unwrap_err().contains("spaces"));
    }

    #[test]
    fn methods() {
        assert_eq!("GET".parse::<Method>(), Ok(Method::Get));
        assert_eq!(
            "PROPFIND".parse::<Method>(),
            Ok(Method::Other("PROPFIND".into()))
        );
        assert!("get".parse::<Method>().is_err());
    }
}
