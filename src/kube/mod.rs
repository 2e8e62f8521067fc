//! The trial matrix as a Kubernetes Job: each pod of an Indexed Job runs one slot of the
//! plan's schedule in-container (`memtrial run --in-container --index N`, see
//! [`crate::backend::container`]) and prints its JSON record on one line of its log
//! ([`record_line`]); [`render`] writes the Job, [`collect`] gathers the records back.

pub mod collect;
pub mod render;

/// What starts the line that carries a pod's JSON record in its log.
pub(crate) const RECORD_PREFIX: &str = "memtrial-record: ";

/// The environment variable naming a directory of allocator libraries that the catalog
/// searches first (the init container copies the catalog's libraries there).
pub const LIB_DIR_ENV: &str = "MEMTRIAL_LIB_DIR";

/// The environment variable with the pod's node name (the downward API's `spec.nodeName`),
/// noted in the record.
pub const NODE_ENV: &str = "MEMTRIAL_NODE";

/// The longest record line `collect` reads (the prefix and the compact JSON): a record
/// holds one run; 16 MiB is far beyond what one run writes.
pub(crate) const MAX_RECORD_LINE_BYTES: usize = 16 << 20;

/// Errors of the record line.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("the JSON record is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no line starting with {RECORD_PREFIX:?} in the log")]
    Missing,
    #[error("{0} lines start with {RECORD_PREFIX:?} in the log; a pod prints exactly one, so none is trusted")]
    Several(usize),
    #[error(
        "its record line has {0} bytes; memtrial reads at most {MAX_RECORD_LINE_BYTES} (16 MiB)"
    )]
    TooLong(usize),
}

/// The JSON record (as `--json` writes it) as one line: [`RECORD_PREFIX`], compact JSON,
/// a line break. Compact JSON escapes every line break inside strings, so the record stays
/// on one line among memtrial's stderr lines in a pod's log.
pub fn record_line(json: &[u8]) -> Result<String, RecordError> {
    let v: serde_json::Value = serde_json::from_slice(json)?;
    Ok(format!("{RECORD_PREFIX}{}\n", serde_json::to_string(&v)?))
}

/// The record in a pod's log: **exactly one** line starts with [`RECORD_PREFIX`]. A pod
/// runs one slot and prints one record (`restartPolicy: Never`, and `kubectl logs` shows
/// one container's attempt), so a log with two record lines holds one that memtrial did
/// not print — neither is trusted: the log is refused, not resolved by position.
pub fn find_record(log: &str) -> Result<serde_json::Value, RecordError> {
    let mut lines = log
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix(RECORD_PREFIX));
    let line = lines.next().ok_or(RecordError::Missing)?;
    let more = lines.count();
    if more > 0 {
        return Err(RecordError::Several(more + 1));
    }
    if line.len() + RECORD_PREFIX.len() > MAX_RECORD_LINE_BYTES {
        return Err(RecordError::TooLong(line.len() + RECORD_PREFIX.len()));
    }
    Ok(serde_json::from_str(line)?)
}

/// Whether `name` is a DNS-1123 subdomain (what Kubernetes accepts as a pod's or a
/// ConfigMap's name): 1 to 253 lowercase letters, digits, '-' and '.', starting and ending
/// with a letter or digit. A name from kubectl's answers is passed back to kubectl only
/// when it is one (so it can never be read as an option).
pub(crate) fn dns1123_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err(format!(
            "it has {} characters; a Kubernetes name has 1 to 253",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.')))
    {
        return Err(format!(
            "{c:?} is not allowed: a Kubernetes name has lowercase letters, digits, '-' and '.' only"
        ));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Err("a Kubernetes name starts and ends with a letter or digit".into());
    }
    Ok(())
}

/// Whether `name` is a DNS-1123 label (what Kubernetes accepts as a Job's name): 1 to 63
/// lowercase letters, digits and '-', starting and ending with a letter or digit.
pub fn dns1123_label(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!(
            "it has {} characters; a DNS-1123 label has 1 to 63",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "{c:?} is not allowed: a DNS-1123 label has lowercase letters, digits and '-' only"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("a DNS-1123 label starts and ends with a letter or digit".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_line_is_one_line_and_found_among_stderr_lines() {
        let json = b"{\n  \"schema_version\": 2,\n  \"notes\": [\"two\\nlines\"]\n}\n";
        let line = record_line(json).unwrap();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.starts_with(RECORD_PREFIX));
        let log = format!("memtrial: note: x\n{line}[  1/1] glibc ok\n");
        let v = find_record(&log).unwrap();
        assert_eq!(v["notes"][0], "two\nlines");
        assert!(matches!(
            find_record("no record\n"),
            Err(RecordError::Missing)
        ));
        assert!(matches!(
            find_record("memtrial-record: {\"cut\": \n"),
            Err(RecordError::Json(_))
        ));
        assert!(record_line(b"not json").is_err());
    }

    #[test]
    fn a_log_with_two_record_lines_is_refused() {
        let log = "memtrial-record: {\"a\":1}\nmemtrial-record: {\"a\":2}\r\n";
        assert!(matches!(find_record(log), Err(RecordError::Several(2))));
        assert_eq!(
            find_record("memtrial-record: {\"a\":2}\r\n").unwrap()["a"],
            2
        );
        let long = format!(
            "memtrial-record: \"{}\"\n",
            "x".repeat(MAX_RECORD_LINE_BYTES)
        );
        assert!(matches!(find_record(&long), Err(RecordError::TooLong(_))));
    }

    #[test]
    fn kubernetes_names() {
        assert!(dns1123_subdomain("web-trial-0-abcde").is_ok());
        assert!(dns1123_subdomain("a.b").is_ok());
        assert!(dns1123_subdomain(&"a".repeat(253)).is_ok());
        for bad in [
            "",
            "--kubeconfig=/tmp/x",
            "-a",
            "a-",
            ".a",
            "A",
            "a b",
            "a\nb",
            "a/b",
            "é",
        ] {
            assert!(dns1123_subdomain(bad).is_err(), "{bad:?}");
        }
        assert!(dns1123_subdomain(&"a".repeat(254)).is_err());
    }

    #[test]
    fn dns_labels() {
        assert!(dns1123_label("trial-1").is_ok());
        assert!(dns1123_label(&"a".repeat(63)).is_ok());
        assert!(dns1123_label(&"a".repeat(64)).is_err());
        assert!(dns1123_label("").is_err());
        assert!(dns1123_label("Trial").is_err());
        assert!(dns1123_label("-a").is_err());
        assert!(dns1123_label("a-").is_err());
        assert!(dns1123_label("a_b").is_err());
        assert!(dns1123_label("é").is_err());
    }
}
