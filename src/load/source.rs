//! Where a load's requests come from: one URL's path, a targets file, or an access log
//! replayed; read once and shared by every run.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Method, Request, Source};

/// Where a server trial's requests come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RequestSource {
    /// The URL's path, again and again.
    Url,
    /// A targets file: one `METHOD URL` or `URL` per line.
    Targets { path: PathBuf },
    /// An nginx/Apache combined access log, its paths replayed; `speed` scales the log's
    /// own inter-arrival times (None: as fast as the connections allow).
    Replay {
        path: PathBuf,
        speed: Option<f64>,
        methods: Vec<String>,
    },
}

/// Reads a request source: the URL's path, a targets file or an access log. Notes count
/// what was read and what was skipped; errors name the file and line.
pub fn read_source(
    source: &RequestSource,
    url_path: &str,
) -> Result<(Source, Vec<String>), String> {
    let mut notes = Vec::new();
    let source = match source {
        RequestSource::Url => Source::Single(Request::get(url_path)),
        RequestSource::Targets { path } => {
            let reqs = super::load_targets_file(path).map_err(|e| e.to_string())?;
            notes.push(format!("{} request(s) from {}", reqs.len(), path.display()));
            Source::List(reqs)
        }
        RequestSource::Replay {
            path,
            speed,
            methods,
        } => {
            let methods = methods
                .iter()
                .map(|m| m.trim().to_ascii_uppercase().parse::<Method>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("--methods: {e}"))?;
            let bytes = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
            let log = super::parse_access_log(&String::from_utf8_lossy(&bytes), &methods);
            let mut note = format!(
                "replaying {} request(s) from {}",
                log.entries.len(),
                path.display()
            );
            if log.skipped_methods > 0 {
                note += &format!("; {} skipped for their method", log.skipped_methods);
            }
            if log.unparseable > 0 {
                note += &format!("; {} unparseable line(s)", log.unparseable);
                if let Some((line, why)) = log.examples.first() {
                    note += &format!(" (e.g. line {line}: {why})");
                }
            }
            let future = log.future_example.as_ref().map(|(line, stamp)| {
                format!(
                    "{} line(s) dated in the future skipped (more than a day ahead of this machine's clock, e.g. line {line}: [{stamp}]): a replay keeps the log's pace, and such a line would hold back every line after it",
                    log.future
                )
            });
            if let Some(f) = &future {
                note += &format!("; {f}");
            }
            if let (Some((gap, a, b)), Some(speed)) = (log.longest_gap, speed) {
                let wait = gap.as_secs_f64() / speed;
                if wait >= 60.0 {
                    note += &format!(
                        "; the log is silent for {} between lines {a} and {b}: at --speed {speed} nothing is sent for {}",
                        humantime::format_duration(gap),
                        humantime::format_duration(Duration::from_secs(wait as u64))
                    );
                }
            }
            notes.push(note);
            if log.entries.is_empty() {
                let first = log
                    .examples
                    .first()
                    .map(|(line, why)| format!("; line {line}: {why}"))
                    .or(future.map(|f| format!("; {f}")))
                    .unwrap_or_default();
                return Err(format!(
                    "no replayable requests ({} unparseable line(s), {} with other methods, {} dated in the future){first}",
                    log.unparseable, log.skipped_methods, log.future
                ));
            }
            Source::Replay {
                entries: log.entries,
                speed: *speed,
            }
        }
    };
    Ok((source, notes))
}
