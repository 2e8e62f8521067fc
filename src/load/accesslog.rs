//! Access-log replay: requests and their timing from nginx/Apache logs in the common or
//! combined format (`%h %l %u [%t] "%r" %>s %b ["%{Referer}i" "%{User-agent}i"]`).
//!
//! Offsets are relative to the first parsed entry. Log timestamps have one-second
//! resolution, so the entries of one second are spread evenly over that second; entries
//! logged out of order (servers log at completion) never move the clock backwards.
//! Lines that cannot be parsed are counted, never fatal. A line dated in the future (more
//! than a day ahead of this machine's clock) is no record of a request that happened: it is
//! skipped and counted, since the clock it would move forward would hold every later line
//! back by as long (one line dated 9999 stalled a replay for ~8,000 years).

use std::time::Duration;

use super::http::{Method, Request};

/// The requests of a log, in log order, each with its offset from the first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayLog {
    pub entries: Vec<(Duration, Request)>,
    /// Non-empty lines that are not a log entry (or whose request line is not HTTP).
    pub unparseable: usize,
    /// Entries whose method was not among the accepted ones.
    pub skipped_methods: usize,
    /// Up to five (1-based line number, reason) examples of unparseable lines.
    pub examples: Vec<(usize, String)>,
    /// Entries dated more than [`FUTURE_SLACK_SECONDS`] after the clock at reading: skipped.
    pub future: usize,
    /// The first of them: (1-based line number, its timestamp as written).
    pub future_example: Option<(usize, String)>,
    /// The longest time between two consecutive entries (log time), with the 1-based line
    /// numbers of the entries on either side: a replay at the log's pace sends nothing for
    /// that long.
    pub longest_gap: Option<(Duration, usize, usize)>,
}

/// How far ahead of this machine's clock a log line may be dated (clocks differ, a log's
/// time zone may be written wrong) before it counts as dated in the future.
pub const FUTURE_SLACK_SECONDS: i64 = 86_400;

/// Methods replayed unless others are asked for: the ones without side effects.
pub(crate) const DEFAULT_METHODS: [Method; 2] = [Method::Get, Method::Head];

/// Parses an access log, keeping entries whose method is in `methods` and skipping those
/// dated in the future of this machine's clock.
pub fn parse_access_log(text: &str, methods: &[Method]) -> ReplayLog {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    parse_access_log_at(text, methods, now)
}

/// [`parse_access_log`] with the clock's time (seconds since the Unix epoch) given.
pub fn parse_access_log_at(text: &str, methods: &[Method], now: i64) -> ReplayLog {
    let mut log = ReplayLog::default();
    // (second since epoch, request, 1-based line number) in log order
    let mut parsed: Vec<(i64, Request, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok((t, _)) if t > now.saturating_add(FUTURE_SLACK_SECONDS) => {
                log.future += 1;
                if log.future_example.is_none() {
                    let stamp = line
                        .split_once('[')
                        .and_then(|(_, r)| r.split_once(']'))
                        .map_or("", |(d, _)| d);
                    log.future_example = Some((i + 1, stamp.to_string()));
                }
            }
            Ok((t, req)) => {
                if methods.contains(&req.method) {
                    parsed.push((t, req, i + 1));
                } else {
                    log.skipped_methods += 1;
                }
            }
            Err(reason) => {
                log.unparseable += 1;
                if log.examples.len() < 5 {
                    log.examples.push((i + 1, reason));
                }
            }
        }
    }
    let Some(first) = parsed.first().map(|p| p.0) else {
        return log;
    };
    // Clamp to a non-decreasing clock, then spread each second's entries over it.
    let mut secs: Vec<i64> = Vec::with_capacity(parsed.len());
    let mut prev = first;
    for (t, _, _) in &parsed {
        prev = prev.max(*t);
        secs.push(prev - first);
    }
    log.longest_gap = secs
        .windows(2)
        .enumerate()
        .max_by_key(|(_, w)| w[1] - w[0])
        .filter(|(_, w)| w[1] > w[0])
        .map(|(k, w)| {
            (
                Duration::from_secs((w[1] - w[0]).unsigned_abs()),
                parsed[k].2,
                parsed[k + 1].2,
            )
        });
    let mut offsets = Vec::with_capacity(secs.len());
    let mut i = 0;
    while i < secs.len() {
        let mut j = i;
        while j < secs.len() && secs[j] == secs[i] {
            j += 1;
        }
        let n = (j - i) as f64;
        for k in 0..(j - i) {
            let at = secs[i] as f64 + k as f64 / n;
            offsets.push(Duration::try_from_secs_f64(at).unwrap_or_default());
        }
        i = j;
    }
    log.entries = offsets
        .into_iter()
        .zip(parsed.into_iter().map(|p| p.1))
        .collect();
    log
}

/// One entry: (seconds since the Unix epoch, request).
fn parse_line(line: &str) -> Result<(i64, Request), String> {
    let open = line.find('[').ok_or("no [timestamp]")?;
    let close = open + line[open..].find(']').ok_or("unclosed [timestamp]")?;
    let t = parse_time(&line[open + 1..close])?;
    let rest = line[close + 1..].trim_start();
    let rest = rest
        .strip_prefix('"')
        .ok_or("no quoted request line after the timestamp")?;
    // The request line ends at the first quote not escaped by a backslash.
    let bytes = rest.as_bytes();
    let mut end = None;
    let mut k = 0;
    while k < bytes.len() {
        match bytes[k] {
            b'\\' => k += 2,
            b'"' => {
                end = Some(k);
                break;
            }
            _ => k += 1,
        }
    }
    let end = end.ok_or("unclosed request line")?;
    let request_line = &rest[..end];
    let after = rest[end + 1..].trim_start();
    let status = after.split_whitespace().next().unwrap_or("");
    if status.len() != 3 || !status.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{status}' is not a status code"));
    }
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), proto) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!(
            "request line '{}' is not METHOD TARGET HTTP/x",
            shorten(request_line)
        ));
    };
    if parts.next().is_some() || proto.is_some_and(|p| !p.starts_with("HTTP/")) {
        return Err(format!(
            "request line '{}' is not METHOD TARGET HTTP/x",
            shorten(request_line)
        ));
    }
    let method: Method = method.parse().map_err(|_| {
        format!(
            "request line '{}' has no HTTP method",
            shorten(request_line)
        )
    })?;
    let path_and_query = if target.starts_with('/') {
        target.to_string()
    } else if let Some(after_scheme) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        match after_scheme.find('/') {
            Some(p) => after_scheme[p..].to_string(),
            None => "/".to_string(),
        }
    } else {
        return Err(format!("target '{}' is not a path", shorten(target)));
    };
    if path_and_query.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err("target contains control characters".into());
    }
    Ok((
        t,
        Request {
            method,
            path_and_query,
            headers: Vec::new(),
            body: Vec::new(),
        },
    ))
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        out.push('…');
    }
    out
}

/// `10/Oct/2000:13:55:36 -0700` → seconds since the Unix epoch (UTC).
fn parse_time(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}' is not a log timestamp (dd/Mon/yyyy:HH:MM:SS +zzzz)");
    let (dt, zone) = s.split_once(' ').unwrap_or((s, "+0000"));
    let mut it = dt.splitn(4, ['/', ':']);
    let day: i64 = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let mon = it.next().ok_or_else(bad)?;
    let year: i64 = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let hms = it.next().ok_or_else(bad)?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == mon)
    .ok_or_else(bad)? as i64
        + 1;
    let mut hms_it = hms.split(':').map(|v| v.parse::<i64>().ok());
    let (Some(Some(h)), Some(Some(m)), Some(Some(sec)), None) =
        (hms_it.next(), hms_it.next(), hms_it.next(), hms_it.next())
    else {
        return Err(bad());
    };
    // Bounded fields keep the arithmetic below far from overflow, whatever the log says.
    if !(1..=31).contains(&day)
        || !(1..=9999).contains(&year)
        || !(0..=23).contains(&h)
        || !(0..=59).contains(&m)
        || !(0..=60).contains(&sec)
    {
        return Err(bad());
    }
    let zone = zone.trim();
    let (sign, digits) = match zone.as_bytes().first() {
        Some(b'+') => (1, &zone[1..]),
        Some(b'-') => (-1, &zone[1..]),
        _ => return Err(bad()),
    };
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let zh: i64 = digits[..2].parse().map_err(|_| bad())?;
    let zm: i64 = digits[2..].parse().map_err(|_| bad())?;
    let offset = sign * (zh * 3600 + zm * 60);
    Ok(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_beyond_the_calendar_are_unparseable_not_an_overflow() {
        let log = "1.2.3.4 - - [01/Jan/-99999999999:00:00:00 +0000] \"GET /a HTTP/1.1\" 200 1\n\
1.2.3.4 - - [01/Jan/99999999999:00:00:00 +0000] \"GET /b HTTP/1.1\" 200 1\n\
1.2.3.4 - - [01/Jan/2024:-1:00:00 +0000] \"GET /c HTTP/1.1\" 200 1\n";
        let r = parse_access_log(log, &[Method::Get]);
        assert_eq!((r.entries.len(), r.unparseable), (0, 3));
    }

    /// Captured from nginx (combined format) with damaged lines mixed in.
    const NGINX: &str = r#"127.0.0.1 - - [12/Mar/2024:10:00:00 +0000] "GET /index.html HTTP/1.1" 200 615 "-" "curl/7.88.1"
127.0.0.1 - - [12/Mar/2024:10:00:00 +0000] "GET /items?page=2 HTTP/1.1" 200 12 "-" "Mozilla/5.0 (X11; Linux x86_64)"
10.0.0.7 - alice [12/Mar/2024:10:00:00 +0000] "POST /login HTTP/1.1" 302 0 "https://example.com/" "Mozilla/5.0"
127.0.0.1 - - [12/Mar/2024:10:00:01 +0000] "HEAD / HTTP/1.1" 200 0 "-" "check/1.0"
this line is not a log entry at all
127.0.0.1 - - [12/Mar/2024:10:00:02 +0000] "-" 400 0 "-" "-"
127.0.0.1 - - [12/Mar/2024:10:00:02 +0000] "\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03" 400 157 "-" "-"
127.0.0.1 - - [12/Mar/2024:10:00:03 +0000] "GET /search?q=\"quoted\" HTTP/1.1" 200 5 "-" "x"
127.0.0.1 - - [12/Mar/2024:10:00:02 +0000] "GET /late HTTP/1.1" 200 5 "-" "x"
127.0.0.1 - - [32/Foo/2024:10:00:03 +0000] "GET /bad-date HTTP/1.1" 200 5 "-" "x"
127.0.0.1 - - [12/Mar/2024:10:00:04 +0000] "GET http://example.com/proxied HTTP/1.1" 200 5
127.0.0.1 - - [12/Mar/2024:10:00:05 +0000] "GET /truncated HTTP/1.1
"#;

    #[test]
    fn nginx_combined_log_with_malformed_lines() {
        let log = parse_access_log(NGINX, &DEFAULT_METHODS);
        let paths: Vec<&str> = log
            .entries
            .iter()
            .map(|(_, r)| r.path_and_query.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "/index.html",
                "/items?page=2",
                "/",
                "/search?q=\\\"quoted\\\"",
                "/late",
                "/proxied"
            ]
        );
        assert_eq!(log.entries[2].1.method, Method::Head);
        assert_eq!(log.skipped_methods, 1, "the POST");
        assert_eq!(log.unparseable, 5, "{:?}", log.examples);
        assert_eq!(log.examples[0].0, 5);
        let secs: Vec<f64> = log.entries.iter().map(|(d, _)| d.as_secs_f64()).collect();
        // Two GETs in second 0 spread over it; /late (logged at :02 after :03) clamped to 3.
        assert_eq!(secs, [0.0, 0.5, 1.0, 3.0, 3.5, 4.0]);
    }

    #[test]
    fn other_methods_on_request_and_time_zones() {
        let log = parse_access_log(NGINX, &[Method::Get, Method::Post]);
        assert_eq!(log.entries.len(), 6);
        assert_eq!(log.skipped_methods, 1, "the HEAD");
        assert_eq!(
            parse_time("10/Oct/2000:13:55:36 -0700"),
            Ok(971_211_336),
            "the Apache documentation's example"
        );
        assert_eq!(parse_time("01/Jan/1970:01:00:00 +0100"), Ok(0));
    }

    /// One line dated 9999 among 30 of 2024: it is skipped and said, the others keep
    /// their one-second pace (before, every line after it waited ~8,000 years).
    #[test]
    fn a_line_dated_in_the_future_is_skipped_and_counted() {
        let text: String = (0..30)
            .map(|i| {
                let year = if i == 10 { 9999 } else { 2024 };
                format!(
                    "1.2.3.4 - - [12/Mar/{year}:10:00:{i:02} +0000] \"GET /x{i} HTTP/1.1\" 200 5\n"
                )
            })
            .collect();
        let now = parse_time("01/Jan/2025:00:00:00 +0000").unwrap();
        let log = parse_access_log_at(&text, &DEFAULT_METHODS, now);
        assert_eq!(log.entries.len(), 29);
        assert_eq!(log.future, 1);
        assert_eq!(
            log.future_example,
            Some((11, "12/Mar/9999:10:00:10 +0000".into()))
        );
        let last = log.entries.last().unwrap().0;
        assert_eq!(last, Duration::from_secs(29));
        assert_eq!(log.longest_gap, Some((Duration::from_secs(2), 10, 12)));
        // A day of slack: a line a few hours ahead (a clock or time zone set wrong) is kept.
        let skewed = format!(
            "1.2.3.4 - - [31/Dec/2024:23:00:00 -0500] \"GET /late HTTP/1.1\" 200 5\n{text}"
        );
        assert_eq!(
            parse_access_log_at(&skewed, &DEFAULT_METHODS, now).future,
            1
        );
    }

    #[test]
    fn empty_and_hopeless_logs() {
        let log = parse_access_log("\n\ngarbage\n", &DEFAULT_METHODS);
        assert!(log.entries.is_empty());
        assert_eq!(log.unparseable, 1);
    }
}
