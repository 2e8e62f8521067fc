//! A run's identity in the store: its JSON object (less what names this machine's files)
//! and its host, in a canonical form, hashed.

use serde_json::Value;

use crate::linux::host::HostInfo;

/// `v` with every object's keys in order, as text: the same value always reads the same.
pub(super) fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        Value::String(k.clone()),
                        canonical(m.get(k).unwrap_or(&Value::Null))
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// A run's identity: the hash of its JSON object (without its `host` index, and without
/// `verification_detail`, which a report may enrich with ld.so's complaint when it shows
/// the run) and its host's identity. The same run read from the same record twice, or
/// from a record written again later, has the same one.
pub(crate) fn run_identity(run: &Value, host: &HostInfo) -> String {
    identity_of(run, host, Paths::AsGiven)
}

/// What a run's identity makes of its output paths.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Paths {
    /// As the run's JSON has them (local runs; what imports stored before schema 9).
    AsGiven,
    /// Blank, as an imported run is stored (its paths are another machine's) and so as
    /// a record written from this store shows it again.
    Blank,
}

pub(super) fn identity_of(run: &Value, host: &HostInfo, paths: Paths) -> String {
    // The run's own keys without the two left out, in order: the same text as the
    // canonical form of the object without them, without copying the run.
    let blank = Value::String(String::new());
    let body = match run {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m
                .keys()
                .filter(|k| *k != "host" && *k != "verification_detail")
                .collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    let v = match (paths, k.as_str()) {
                        (Paths::Blank, "stdout_path" | "stderr_path") => &blank,
                        _ => m.get(k).unwrap_or(&Value::Null),
                    };
                    format!("{}:{}", Value::String(k.clone()), canonical(v))
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => canonical(other),
    };
    let text = format!("{body}\n{}", host.identity());
    crate::units::sha256_hex(text.as_bytes())
}

/// An imported run's identities: the one it is stored under (its paths blank, as stored),
/// and the one of its JSON as given (a run this store ran, exported and imported back;
/// a run imported before schema 9).
pub(super) struct Identities {
    pub(super) stored: String,
    pub(super) as_given: String,
}
