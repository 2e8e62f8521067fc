//! Prometheus's HTTP API, read through `ureq` (a small blocking client, plain HTTP): one
//! `query_range` at a time, with a timeout, a bounded answer, and errors that name the URL
//! and what Prometheus said.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

/// Most bytes of one answer read (a range of thousands of series × 11,000 points).
const MAX_ANSWER: u64 = 256 << 20;

/// How long one query may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Prometheus refuses a range query of more points than this per series.
pub const MAX_POINTS: u64 = 11_000;

/// One series of a range query: its labels and its points (Unix seconds, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

/// Why a query gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error(
        "cannot reach Prometheus at {url}: {why} (is it running, and is --prometheus its address?)"
    )]
    Unreachable { url: String, why: String },
    #[error("Prometheus at {url} refused the query `{query}`: {why}")]
    Refused {
        url: String,
        query: String,
        why: String,
    },
    #[error("Prometheus at {url} answered the query `{query}` with something that is not its API's JSON: {why}")]
    Garbled {
        url: String,
        query: String,
        why: String,
    },
}

/// A Prometheus server.
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

    /// `query_range` from `start` to `end` (Unix seconds) every `step` seconds.
    pub fn query_range(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: u64,
    ) -> Result<Vec<Series>, PromError> {
        let url = format!("{}/api/v1/query_range", self.base);
        let answer = self
            .agent
            .get(&url)
            .query("query", query)
            .query("start", &format!("{start:.3}"))
            .query("end", &format!("{end:.3}"))
            .query("step", &format!("{step}s"))
            .call();
        let (ok, body) = match answer {
            Ok(r) => (true, read(r)),
            // Prometheus's errors come with its JSON saying why.
            Err(ureq::Error::Status(_, r)) => (false, read(r)),
            Err(ureq::Error::Transport(t)) => {
                return Err(PromError::Unreachable {
                    url: self.base.clone(),
                    why: t.to_string(),
                })
            }
        };
        let body = body.map_err(|why| PromError::Garbled {
            url: self.base.clone(),
            query: query.into(),
            why,
        })?;
        parse(&body, ok).map_err(|(refused, why)| {
            if refused {
                PromError::Refused {
                    url: self.base.clone(),
                    query: query.into(),
                    why,
                }
            } else {
                PromError::Garbled {
                    url: self.base.clone(),
                    query: query.into(),
                    why,
                }
            }
        })
    }
}

fn read(r: ureq::Response) -> Result<String, String> {
    let mut s = String::new();
    r.into_reader()
        .take(MAX_ANSWER)
        .read_to_string(&mut s)
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// A `query_range` answer's matrix; the error says whether Prometheus refused (its own
/// words) or the answer is not its API's.
fn parse(body: &str, ok: bool) -> Result<Vec<Series>, (bool, String)> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| {
        let start: String = body.chars().take(200).collect();
        (!ok, format!("{e} (it began: {start:?})"))
    })?;
    if v["status"] != "success" {
        let why = v["error"].as_str().unwrap_or("no reason given").to_string();
        return Err((true, why));
    }
    if v["data"]["resultType"] != "matrix" {
        return Err((
            false,
            format!("a {} where a matrix was due", v["data"]["resultType"]),
        ));
    }
    let mut out = Vec::new();
    for s in v["data"]["result"].as_array().into_iter().flatten() {
        let labels = s["metric"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let points = s["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let t = p[0].as_f64()?;
                let v: f64 = p[1].as_str()?.parse().ok()?;
                v.is_finite().then_some((t, v))
            })
            .collect();
        out.push(Series { labels, points });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_errors_say_why() {
        let body = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"m","pod":"a"},"values":[[1700000000,"5"],[1700000060,"NaN"],[1700000120,"7.5"]]}]}}"#;
        let s = parse(body, true).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].labels["pod"], "a");
        assert_eq!(s[0].points, vec![(1.7e9, 5.0), (1_700_000_120.0, 7.5)]);
        let refused =
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
        assert_eq!(
            parse(refused, false),
            Err((true, "parse error at char 5".into()))
        );
        assert!(parse("<html>", true).unwrap_err().1.contains("<html>"));
        assert!(Prometheus::new("https://x").is_err());
        assert!(Prometheus::new("http://").is_err());
        assert_eq!(
            Prometheus::new("http://127.0.0.1:9090/").unwrap().url(),
            "http://127.0.0.1:9090"
        );
    }
}
