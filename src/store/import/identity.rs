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

/// A run's identity: its body's hash ([`body_hash`]: the run's JSON object, less what a
/// report may change or another machine's paths, and its host) joined with the plan's
/// fingerprint and the variant's name. Two runs of different variants or plans are never
/// the same run, however equal their figures (a record whose arena2 runs equal its glibc
/// runs keeps all of them). The same run read from the same record twice, or from a
/// record written again later, has the same one.
pub(crate) fn run_identity(
    run: &Value,
    host: &HostInfo,
    fingerprint: &str,
    variant: &str,
) -> String {
    identity(fingerprint, variant, &body_hash(run, host))
}

/// The identity of a run of `variant` in a plan of `fingerprint` whose body hashes to
/// `body` (the form runs were stored under before schema 12 kept it alone).
pub(super) fn identity(fingerprint: &str, variant: &str, body: &str) -> String {
    crate::units::sha256_hex(
        format!(
            "memtrial run identity 2\n{}\n{}\n{body}",
            serde_json::Value::String(fingerprint.into()),
            serde_json::Value::String(variant.into())
        )
        .as_bytes(),
    )
}

/// The keys a run's body leaves out: its host index (the host is hashed by its identity)
/// and `verification_detail`, which a report may enrich with ld.so's complaint.
fn left_out(k: &str) -> bool {
    k == "host" || k == "verification_detail"
}

/// The hash of a run's body: the canonical text of its JSON object (without the keys
/// [`left_out`]) and its host's identity. What runs stored before schema 12 were
/// identified by alone. An imported run's is made as it is read ([`BodyHasher`]), both
/// with its paths as given and blank (as an imported run is stored: its paths are another
/// machine's, and so as a record written from this store shows it again).
pub(super) fn body_hash(run: &Value, host: &HostInfo) -> String {
    // The run's own keys without the two left out, in order: the same text as the
    // canonical form of the object without them, without copying the run.
    let body = match run {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().filter(|k| !left_out(k)).collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    let v = m.get(k).unwrap_or(&Value::Null);
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

/// The body hash of a run object read in two parts, its fields but `samples` and its
/// samples one at a time (see [`body_hash`]: the same text, hashed as it comes, both
/// forms of the paths at once), so that a run's samples are never held as a JSON tree.
pub(super) struct BodyHasher {
    given: sha2::Sha256,
    blank: sha2::Sha256,
    /// The fields after `samples`, as given and with blank paths.
    after: (String, String),
    first: bool,
}

impl BodyHasher {
    /// Starts the body of a run whose fields but `samples` are `fields`.
    pub(super) fn start(fields: &serde_json::Map<String, Value>) -> BodyHasher {
        use sha2::Digest;
        let mut keys: Vec<&str> = fields
            .keys()
            .map(String::as_str)
            .filter(|k| !left_out(k) && *k != "samples")
            .chain(["samples"])
            .collect();
        keys.sort_unstable();
        let at = keys.iter().position(|k| *k == "samples").unwrap_or(0);
        let field = |k: &str, blank: bool| {
            let v = match (blank, k) {
                (true, "stdout_path" | "stderr_path") => Value::String(String::new()),
                _ => fields.get(k).cloned().unwrap_or(Value::Null),
            };
            format!("{}:{}", Value::String(k.to_string()), canonical(&v))
        };
        let before: Vec<String> = keys[..at].iter().map(|k| field(k, false)).collect();
        let after = |blank: bool| -> String {
            keys[at + 1..]
                .iter()
                .map(|k| format!(",{}", field(k, blank)))
                .collect()
        };
        let mut head = String::from("{");
        for f in &before {
            head.push_str(f);
            head.push(',');
        }
        head.push_str("\"samples\":[");
        let mut given = sha2::Sha256::new();
        given.update(head.as_bytes());
        BodyHasher {
            blank: given.clone(),
            given,
            after: (after(false), after(true)),
            first: true,
        }
    }

    /// One sample, in order.
    pub(super) fn sample(&mut self, sample: &Value) {
        use sha2::Digest;
        let mut text = canonical(sample);
        if !self.first {
            text.insert(0, ',');
        }
        self.first = false;
        self.given.update(text.as_bytes());
        self.blank.update(text.as_bytes());
    }

    /// The body hashes with the paths as given and blank.
    pub(super) fn finish(mut self, host: &HostInfo) -> (String, String) {
        use sha2::Digest;
        let tail = |after: &str| format!("]{after}}}\n{}", host.identity());
        self.given.update(tail(&self.after.0).as_bytes());
        self.blank.update(tail(&self.after.1).as_bytes());
        let hex = |d: sha2::Sha256| {
            d.finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        (hex(self.given), hex(self.blank))
    }
}

/// An imported run's identities: the one it is stored under (its paths blank, as stored),
/// the one of its JSON as given (a run this store ran, exported and imported back), and
/// the body hashes runs stored before schema 12 carry as theirs (matched within the same
/// plan and variant only).
pub(super) struct Identities {
    pub(super) stored: String,
    pub(super) as_given: String,
    pub(super) old_stored: String,
    pub(super) old_as_given: String,
}

impl Identities {
    pub(super) fn of(fingerprint: &str, variant: &str, (given, blank): (String, String)) -> Self {
        Identities {
            stored: identity(fingerprint, variant, &blank),
            as_given: identity(fingerprint, variant, &given),
            old_stored: blank,
            old_as_given: given,
        }
    }
}
