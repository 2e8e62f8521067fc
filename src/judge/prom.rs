//! Prometheus's HTTP API, read through `ureq` (a small blocking client, plain HTTP): one
//! `query_range` at a time, with a timeout, a bounded answer, and errors that name the URL,
//! the HTTP status and what Prometheus said.
//!
//! An answer is parsed as it streams in, straight into typed series ([`Series`]: labels
//! and `(time, value)` pairs): no text of the answer and no generic JSON tree is held, so
//! a query's memory is its points (16 bytes each) and labels, about a third of the
//! answer's size, and never more than [`MAX_ANSWER`] allows. Every string Prometheus
//! sends back (its error text, a body that is not its JSON) is shown escaped: it can
//! neither drive a terminal nor forge a line of memtrial's own.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::escape;

/// Most bytes of one answer read (a range of thousands of series × 11,000 points).
pub const MAX_ANSWER: u64 = 256 << 20;

/// Most bytes of an error answer read (Prometheus's error JSON, a proxy's HTML page).
const MAX_ERROR_ANSWER: u64 = 64 << 10;

/// How long one query may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Prometheus refuses a range query of more points than this per series.
pub const MAX_POINTS: u64 = 11_000;

/// The most bytes a memory series may hold: 1 PiB. No machine has that much memory (the
/// largest have tens of TiB); a larger value is not a measurement.
pub const MAX_BYTES: f64 = (1u64 << 50) as f64;

/// One series of a range query: its labels and its points (Unix seconds, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// The series as Prometheus writes it, `name{label="value",…}`, escaped for a
    /// terminal (a label's name or value from a server can hold anything).
    pub fn display(&self) -> String {
        let name = self.labels.get("__name__").map_or("", String::as_str);
        let labels: Vec<String> = self
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() != "__name__")
            .map(|(k, v)| format!("{}={:?}", escape::terminal(k), v))
            .collect();
        escape::terminal(&format!("{name}{{{}}}", labels.join(",")))
    }
}

/// Why a query gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error(
        "cannot reach Prometheus at {url}: {why} (is it running, and is --prometheus its address?)"
    )]
    Unreachable { url: String, why: String },
    #[error("Prometheus at {url} refused the query `{query}` ({status}): {why}")]
    Refused {
        url: String,
        query: String,
        status: String,
        why: String,
    },
    #[error("Prometheus at {url} answered the query `{query}` ({status}) with something that is not its API's JSON: {why}")]
    Garbled {
        url: String,
        query: String,
        status: String,
        why: String,
    },
    #[error("Prometheus at {url} answered the query `{query}` with more than {} MiB; narrow the selector or shorten the window (--since), or give a longer --block", MAX_ANSWER >> 20)]
    TooLarge { url: String, query: String },
    #[error("Prometheus at {url}: the query `{query}` gives {series} the value {value} at {at}: {why}, not a figure of memory; memtrial judges bytes from 0 to 1 PiB: check what exports this series")]
    Impossible {
        url: String,
        query: String,
        series: String,
        value: f64,
        at: String,
        why: &'static str,
    },
}

/// What the values of a query are, and so which of them are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Any number; a point that is not finite (`NaN`, `±Inf`: a quantile of no requests, a
    /// division by zero) is left out.
    Any,
    /// Bytes of memory: a value that is negative, not finite or above [`MAX_BYTES`] is an
    /// error naming the series, never a figure.
    Bytes,
}

/// A server.
pub struct Prometheus {
    base: String,
    agent: ureq::Agent,
}

impl Prometheus {
    /// `url` is the server's base (`http://127.0.0.1:9090`); only `http` is spoken.
    pub fn new(url: &str) -> Result<Prometheus, String> {
        let base = url.trim_end_matches('/').to_string();
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?}: give the server as http://HOST:PORT (https is not spoken: put a local proxy or port-forward in front)"))?;
        if rest.is_empty() || rest.contains(char::is_whitespace) {
            return Err(format!("{url:?}: no host after http://"));
        }
        let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
        Ok(Prometheus { base, agent })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// `query_range` from `start` to `end` (Unix seconds) every `step` seconds; points that
    /// are not finite are left out ([`Values::Any`]).
    pub fn query_range(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: u64,
    ) -> Result<Vec<Series>, PromError> {
        self.query_values(query, (start, end, step), Values::Any)
    }

    /// `query_range` whose values are `values`: see [`Values`].
    pub fn query_values(
        &self,
        query: &str,
        (start, end, step): (f64, f64, u64),
        values: Values,
    ) -> Result<Vec<Series>, PromError> {
        let mut series = self.fetch(query, start, end, step)?;
        match values {
            Values::Any => {
                for s in &mut series {
                    s.points.retain(|p| p.1.is_finite());
                }
            }
            Values::Bytes => {
                if let Some((s, (t, v), why)) = first_impossible(&series) {
                    return Err(PromError::Impossible {
                        url: self.base.clone(),
                        query: query.into(),
                        series: s.display(),
                        value: v,
                        at: moment(t),
                        why,
                    });
                }
            }
        }
        Ok(series)
    }

    /// Asks for `query` over `start`..`end` (Unix seconds) at `step` seconds: the response,
    /// whatever its status (Prometheus's errors come with its JSON saying why).
    fn ask(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: u64,
    ) -> Result<ureq::Response, PromError> {
        let url = format!("{}/api/v1/query_range", self.base);
        let answer = self
            .agent
            .get(&url)
            .query("query", query)
            .query("start", &format!("{start:.3}"))
            .query("end", &format!("{end:.3}"))
            .query("step", &format!("{step}s"))
            .call();
        match answer {
            Ok(r) | Err(ureq::Error::Status(_, r)) => Ok(r),
            Err(ureq::Error::Transport(t)) => Err(PromError::Unreachable {
                url: self.base.clone(),
                why: escape::terminal(&t.to_string()),
            }),
        }
    }

    fn fetch(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: u64,
    ) -> Result<Vec<Series>, PromError> {
        let response = self.ask(query, start, end, step)?;
        let code = response.status();
        let status = format!("HTTP {code} {}", escape::terminal(response.status_text()))
            .trim_end()
            .to_string();
        let ok = (200..300).contains(&code);
        let limit = if ok { MAX_ANSWER } else { MAX_ERROR_ANSWER };
        let mut reader = BufReader::with_capacity(
            64 << 10,
            Counted {
                inner: response.into_reader().take(limit + 1),
                read: 0,
            },
        );
        let began = reader
            .fill_buf()
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned())
            .unwrap_or_default();
        let parsed: Result<Answer, serde_json::Error> = serde_json::from_reader(&mut reader);
        let too_large = reader.get_ref().read > limit;
        let garbled = |why: String| PromError::Garbled {
            url: self.base.clone(),
            query: query.into(),
            status: status.clone(),
            why,
        };
        let answer = match parsed {
            _ if too_large && ok => {
                return Err(PromError::TooLarge {
                    url: self.base.clone(),
                    query: query.into(),
                })
            }
            Ok(a) => a,
            // An error status with a body of another kind (a proxy's or a crashed
            // server's HTML page): the status says it all, with how the body began.
            Err(_) if !ok => {
                return Err(garbled(format!(
                    "its body began: {}",
                    escape::terminal(&format!("{began:?}"))
                )))
            }
            Err(e) => {
                return Err(garbled(format!(
                    "{} (it began: {})",
                    escape::terminal(&e.to_string()),
                    escape::terminal(&format!("{began:?}"))
                )))
            }
        };
        if answer.status != "success" || !ok {
            let why = answer.error.as_deref().unwrap_or("no reason given");
            return Err(PromError::Refused {
                url: self.base.clone(),
                query: query.into(),
                status,
                why: escape::terminal(why),
            });
        }
        let Some(data) = answer.data else {
            return Err(garbled("a success without data".into()));
        };
        if data.result_type != "matrix" {
            return Err(garbled(format!(
                "a {} where a matrix was due",
                escape::terminal(&format!("{:?}", data.result_type))
            )));
        }
        Ok(data
            .result
            .into_iter()
            .filter_map(|e| match e {
                Elem::Series(s) => Some(s),
                Elem::Other => None,
            })
            .collect())
    }
}

/// The first point of `series` that cannot be bytes of memory, with why.
fn first_impossible(series: &[Series]) -> Option<(&Series, (f64, f64), &'static str)> {
    series.iter().find_map(|s| {
        s.points.iter().find_map(|&(t, v)| {
            let why = if v.is_nan() {
                "not a number"
            } else if v.is_infinite() {
                "infinite"
            } else if v < 0.0 {
                "negative"
            } else if v > MAX_BYTES {
                "more than 1 PiB"
            } else {
                return None;
            };
            Some((s, (t, v), why))
        })
    })
}

/// A moment in RFC 3339 (the Unix seconds themselves when out of range).
fn moment(t: f64) -> String {
    if !(0.0..1e11).contains(&t) {
        return format!("{t} s");
    }
    let at = std::time::UNIX_EPOCH + Duration::from_secs_f64(t);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A reader that counts what it read (to tell a truncated answer from a garbled one).
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// An answer of the HTTP API: `{"status": …, "data": …}` or `{"status": "error",
/// "error": …}`; other keys (`errorType`, `warnings`, `infos`) are skipped.
#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Elem>,
}

/// One element of a result: a series (of a matrix, or of a vector), or something else
/// (a scalar's or a string's parts), skipped and told by the result type.
enum Elem {
    Series(Series),
    Other,
}

impl<'de> Deserialize<'de> for Elem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ElemVisitor)
    }
}

struct ElemVisitor;

impl<'de> Visitor<'de> for ElemVisitor {
    type Value = Elem;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a series ({\"metric\": {…}, \"values\": […]})")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Elem, A::Error> {
        let mut labels = None;
        let mut points: Vec<(f64, f64)> = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Metric => labels = Some(map.next_value::<BTreeMap<String, String>>()?),
                Key::Values => {
                    points = map
                        .next_value::<Vec<Point>>()?
                        .into_iter()
                        .map(|p| p.0)
                        .collect();
                    points.shrink_to_fit();
                }
                Key::Value => points = vec![map.next_value::<Point>()?.0],
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let labels = labels.ok_or_else(|| de::Error::missing_field("metric"))?;
        Ok(Elem::Series(Series { labels, points }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elem, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Elem::Other)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Elem, E> {
        Ok(Elem::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Elem, E> {
        Ok(Elem::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Elem, E> {
        Ok(Elem::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Elem, E> {
        Ok(Elem::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Elem, E> {
        Ok(Elem::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Elem, E> {
        Ok(Elem::Other)
    }
}

/// The keys of a series.
enum Key {
    Metric,
    Values,
    Value,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key of a series")
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<Key, E> {
                Ok(match k {
                    "metric" => Key::Metric,
                    "values" => Key::Values,
                    "value" => Key::Value,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// A point, `[<unix seconds>, "<value>"]`: the value a string, as the API writes it
/// (`"5"`, `"NaN"`, `"+Inf"`).
struct Point((f64, f64));

impl<'de> Deserialize<'de> for Point {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Point;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a point [<unix seconds>, \"<value>\"]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Point, A::Error> {
                let t: f64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let v: Sample = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(Point((t, v.0)))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A sample's value: a string holding a number.
struct Sample(f64);

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Sample;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sample value as a string (\"5\", \"NaN\", \"+Inf\")")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Sample, E> {
                s.parse()
                    .map(Sample)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(&escape::terminal(s)), &self))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Vec<Series>, String> {
        let a: Answer = serde_json::from_reader(body.as_bytes()).map_err(|e| e.to_string())?;
        assert_eq!(a.status, "success", "{body}");
        let d = a.data.unwrap();
        assert_eq!(d.result_type, "matrix");
        Ok(d.result
            .into_iter()
            .filter_map(|e| match e {
                Elem::Series(s) => Some(s),
                Elem::Other => None,
            })
            .collect())
    }

    #[test]
    fn answers_parse_typed_and_strays_say_why() {
        let body = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"m","pod":"a"},"values":[[1700000000,"5"],[1700000060,"NaN"],[1700000120.5,"+Inf"]]}]},"warnings":["w"]}"#;
        let s = parse(body).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].labels["pod"], "a");
        assert_eq!(s[0].points.len(), 3);
        assert_eq!(s[0].points[0], (1.7e9, 5.0));
        assert!(s[0].points[1].1.is_nan());
        assert_eq!(s[0].points[2], (1_700_000_120.5, f64::INFINITY));
        // A value that is not a string, a label that is not text: said, never dropped.
        let e = parse(r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,5]]}]}}"#).unwrap_err();
        assert!(e.contains("expected a sample value as a string"), "{e}");
        let e = parse(r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":7},"values":[]}]}}"#).unwrap_err();
        assert!(e.contains("expected a string"), "{e}");
        let e = parse(r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}"#).unwrap_err();
        assert!(e.contains("\"x\""), "{e}");
        assert!(Prometheus::new("https://x").is_err());
        assert!(Prometheus::new("http://").is_err());
        assert_eq!(
            Prometheus::new("http://127.0.0.1:9090/").unwrap().url(),
            "http://127.0.0.1:9090"
        );
    }

    #[test]
    fn impossible_bytes_are_named_by_their_series() {
        let s = |v: f64| Series {
            labels: BTreeMap::from([
                ("__name__".to_string(), "m_bytes".to_string()),
                ("po\x1b[2Jd".to_string(), "a\nb".to_string()),
            ]),
            points: vec![(1.0, 5.0), (2.0, v)],
        };
        for (v, why) in [
            (-1.0, "negative"),
            (f64::NAN, "not a number"),
            (f64::INFINITY, "infinite"),
            (1e308, "more than 1 PiB"),
        ] {
            let series = [s(v)];
            let (bad, (t, _), w) = first_impossible(&series).unwrap();
            assert_eq!((t, w), (2.0, why));
            assert_eq!(bad.display(), "m_bytes{po\\x1b[2Jd=\"a\\nb\"}");
        }
        assert!(first_impossible(&[s(0.0), s(MAX_BYTES)]).is_none());
    }
}
