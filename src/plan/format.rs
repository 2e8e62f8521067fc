//! The TOML plan file: reading it (bounded) and parsing it into a [`PlanInput`].

use super::*;

/// The most bytes of a plan file memtrial reads (a ConfigMap holds at most 1 MiB too).
pub(crate) const MAX_PLAN_BYTES: usize = 1 << 20;

/// The text of a plan file, read up to [`MAX_PLAN_BYTES`] (`/dev/zero` or a huge file is
/// refused with the limit, after reading at most one byte more).
pub fn read_plan_text(path: &Path) -> Result<String, PlanError> {
    use std::io::Read;
    let err = |message: String| PlanError::PlanFile {
        path: path.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    let mut bytes = Vec::new();
    (&file)
        .take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(format!("cannot read it: {e}")))?;
    if bytes.len() > MAX_PLAN_BYTES {
        let size = match file.metadata() {
            Ok(m) if m.is_file() => format!("it has {} bytes", m.len()),
            _ => format!("it holds more than {MAX_PLAN_BYTES} bytes"),
        };
        return Err(PlanError::PlanTooBig {
            path: path.to_path_buf(),
            size,
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        err(format!(
            "it is not UTF-8 text (byte {} is not); a plan is a TOML file",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The TOML plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    command: Option<CommandField>,
    variants: Option<Vec<String>>,
    #[serde(default)]
    variant: Vec<VariantFile>,
    baseline: Option<String>,
    runs: Option<u32>,
    warmup: Option<u32>,
    interval: Option<String>,
    timeout: Option<String>,
    seed: Option<u64>,
    memory_limit: Option<String>,
    cpus: Option<TomlNumber>,
    cpuset: Option<String>,
    pids_limit: Option<u64>,
    #[serde(default)]
    server: ServerInput,
    #[serde(default)]
    worker: WorkerInput,
    /// `probes = ["allocator", "ruby"]`; `[]` for kernel counters only.
    probes: Option<Vec<String>>,
    probe_interval: Option<String>,
    /// `require_cut_off = "1MiB"`.
    require_cut_off: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "cpus must be a number (2, 0.5) or a string (\"2\", \"0.5\")"
)]
enum TomlNumber {
    Int(i64),
    Float(f64),
    Text(String),
}

impl TomlNumber {
    fn text(&self) -> String {
        match self {
            TomlNumber::Int(i) => i.to_string(),
            TomlNumber::Float(f) => f.to_string(),
            TomlNumber::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "command must be a string (split like a shell would) or an array of strings"
)]
enum CommandField {
    Line(String),
    Argv(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: String,
    spec: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    preload: Option<String>,
    program: Option<String>,
    command: Option<CommandField>,
    /// `thp = "off"` or `"heap"`: the spec's `thp:`.
    thp: Option<String>,
    /// `trim = "10s"`: the spec's `trim:`.
    trim: Option<String>,
    /// `tunables = { trim_threshold = "128K", tcache_count = 0 }`: the spec's `tunable:`s.
    #[serde(default)]
    tunables: BTreeMap<String, TunableValue>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a tunable's value must be a whole number (131072) or a string (\"128K\")"
)]
enum TunableValue {
    Int(u64),
    Text(String),
}

/// Reads a TOML plan file into a [`PlanInput`]. Syntax errors name the line and column.
pub fn read_plan_file(path: &Path) -> Result<PlanInput, PlanError> {
    let text = read_plan_text(path)?;
    parse_plan_text(&text).map_err(|message| PlanError::PlanFile {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses plan-file text. The error is a message naming line and column.
pub fn parse_plan_text(text: &str) -> Result<PlanInput, String> {
    let file: PlanFile = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    let command = match file.command {
        None => Vec::new(),
        Some(CommandField::Argv(v)) => v,
        Some(CommandField::Line(s)) => {
            shell_words::split(&s).map_err(|e| format!("command: {e}"))?
        }
    };
    let mut custom = Vec::new();
    for v in file.variant {
        custom.push(variant_spec(v)?);
    }
    Ok(PlanInput {
        command,
        variants: file.variants,
        custom,
        baseline: file.baseline,
        runs: file.runs,
        warmup: file.warmup,
        interval: file.interval,
        timeout: file.timeout,
        seed: file.seed,
        limits: LimitsInput {
            memory_limit: file.memory_limit,
            cpus: file.cpus.map(|c| c.text()),
            cpuset: file.cpuset,
            pids_limit: file.pids_limit,
        },
        server: file.server,
        worker: file.worker,
        no_probes: file.probes.as_ref().is_some_and(|p| p.is_empty()),
        probes: file.probes,
        probe_interval: file.probe_interval,
        require_cut_off: file.require_cut_off,
    })
}

/// A TOML parse error of `text` as a message naming line and column, and the character
/// refused when the parser names no reason.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
    let mut msg = e.message().trim().to_string();
    if msg.is_empty() {
        // The parser names no reason for a character it does not take: say which.
        let at = e.span().and_then(|s| text.get(s.start..)?.chars().next());
        msg = match at {
            Some(c) if c.is_control() => format!(
                "the control character U+{:04X} is not allowed in TOML (not even in a \
                 comment); remove it, or write it as \\u{:04X} inside a quoted string",
                c as u32, c as u32
            ),
            Some(c) => format!("{:?} is not valid TOML here", c),
            None => "the plan ends where TOML expects more".into(),
        };
    }
    if line > 0 {
        format!("line {line}, column {col}: {msg}")
    } else {
        msg
    }
}

/// A `[[variant]]` table as the `NAME=SPEC` a custom variant is given on the command line.
fn variant_spec(v: VariantFile) -> Result<String, String> {
    if !valid_name(&v.name) {
        return Err(format!(
            "[[variant]] name {}: {VARIANT_NAME_RULE}",
            shown_name(&v.name)
        ));
    }
    let mut parts: Vec<String> = Vec::new();
    if let Some(p) = v.program {
        parts.push(shell_words::quote(&format!("program:{p}")).into_owned());
    }
    if let Some(c) = v.command {
        let line = match c {
            CommandField::Line(s) => s,
            CommandField::Argv(argv) => shell_words::join(argv),
        };
        parts.push(shell_words::quote(&format!("command:{line}")).into_owned());
    }
    if let Some(p) = v.preload {
        parts.push(shell_words::quote(&format!("preload:{p}")).into_owned());
    }
    for (k, val) in v.env {
        if let Some(reason) = env_key_problem(&k).or_else(|| {
            val.contains('\0')
                .then_some("has a value containing a NUL byte (an environment cannot hold one)")
        }) {
            return Err(PlanError::BadEnvKey {
                variant: v.name,
                key: k,
                reason,
            }
            .to_string());
        }
        parts.push(shell_words::quote(&format!("{k}={val}")).into_owned());
    }
    if let Some(t) = v.thp {
        parts.push(shell_words::quote(&format!("thp:{t}")).into_owned());
    }
    for (k, val) in v.tunables {
        let val = match val {
            TunableValue::Int(i) => i.to_string(),
            TunableValue::Text(t) => t,
        };
        parts.push(shell_words::quote(&format!("tunable:{k}={val}")).into_owned());
    }
    if let Some(t) = v.trim {
        parts.push(shell_words::quote(&format!("trim:{t}")).into_owned());
    }
    if let Some(s) = v.spec {
        parts.push(s);
    }
    Ok(format!("{}={}", v.name, parts.join(" ")))
}

pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}
