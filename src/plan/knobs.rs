//! The knobs a variant turns beside its environment and preload: transparent huge pages
//! (`thp:off`, `thp:heap`), glibc's tunables (`tunable:NAME=VALUE`, merged into one
//! `GLIBC_TUNABLES`) and trimming (`trim:DURATION`: `malloc_trim(0)` on a schedule, through
//! memtrial's probe library). Each is checked here against what this machine has (the
//! glibc version a tunable needs, the allocator it applies to) and verified inside the
//! workload when it runs.

use super::*;

/// What a variant turns besides its environment settings, preload and program.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knobs {
    /// `thp:off`: transparent huge pages off for the workload and its children
    /// (`prctl(PR_SET_THP_DISABLE)` at spawn).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thp_off: bool,
    /// `thp:heap`: huge pages on for the allocator's heap (glibc's `hugetlb=1`, jemalloc's
    /// `thp:always`), where the host's mode is `madvise`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_thp: Option<HeapThp>,
    /// `tunable:NAME=VALUE`: glibc malloc tunables, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunables: Vec<Tunable>,
    /// `trim:DURATION`: `malloc_trim(0)` every this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trim_ms: Option<u64>,
}

/// Whose heap `thp:heap` turns huge pages on for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeapThp {
    /// glibc malloc: `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc 2.35+).
    Glibc,
    /// jemalloc: `MALLOC_CONF=thp:always` (jemalloc 5.1+).
    Jemalloc,
}

/// One glibc malloc tunable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tunable {
    /// Without `glibc.malloc.`: `trim_threshold`.
    pub name: String,
    /// In glibc's units (bytes for sizes).
    pub value: u64,
}

impl Tunable {
    /// `glibc.malloc.trim_threshold=131072`, as `GLIBC_TUNABLES` holds it.
    pub fn setting(&self) -> String {
        format!("glibc.malloc.{}={}", self.name, self.value)
    }
}

/// One glibc malloc tunable: its name, whether the value is a size (takes `K`, `M`, `G`),
/// the first glibc version that has it, and the old environment variable that sets the same.
type TunableInfo = (&'static str, bool, (u32, u32), Option<&'static str>);

/// glibc's malloc tunables.
pub(crate) const TUNABLES: &[TunableInfo] = &[
    (
        "trim_threshold",
        true,
        (2, 26),
        Some("MALLOC_TRIM_THRESHOLD_"),
    ),
    ("top_pad", true, (2, 26), Some("MALLOC_TOP_PAD_")),
    (
        "mmap_threshold",
        true,
        (2, 26),
        Some("MALLOC_MMAP_THRESHOLD_"),
    ),
    ("mmap_max", false, (2, 26), Some("MALLOC_MMAP_MAX_")),
    ("arena_max", false, (2, 26), Some("MALLOC_ARENA_MAX")),
    ("arena_test", false, (2, 26), Some("MALLOC_ARENA_TEST")),
    ("tcache_max", true, (2, 26), None),
    ("tcache_count", false, (2, 26), None),
    ("tcache_unsorted_limit", false, (2, 26), None),
    ("perturb", false, (2, 26), Some("MALLOC_PERTURB_")),
    ("mxfast", true, (2, 30), None),
    ("hugetlb", true, (2, 35), None),
];

/// The first jemalloc with `opt.thp`.
const JEMALLOC_THP: (u32, u32) = (5, 1);

/// One knob word of a spec, before the variant around it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KnobWord {
    ThpOff,
    ThpHeap,
    Tunable(Tunable),
    Trim(u64),
}

/// Shortest and longest trim interval.
pub(crate) const TRIM_RANGE_MS: (u64, u64) = (10, 24 * 3600 * 1000);

/// `Some` when `word` is a knob word (`thp:…`, `tunable:…`, `trim:…`): what it asks for, or
/// why it cannot be.
pub(crate) fn knob_word(word: &str) -> Option<Result<KnobWord, String>> {
    if let Some(v) = word.strip_prefix("thp:") {
        return Some(match v {
            "off" => Ok(KnobWord::ThpOff),
            "heap" => Ok(KnobWord::ThpHeap),
            _ => Err(format!(
                "'{word}': thp: takes off (huge pages off for the process) or heap (on for \
                 the allocator's heap)"
            )),
        });
    }
    if let Some(t) = word.strip_prefix("tunable:") {
        return Some(parse_tunable(t).map(KnobWord::Tunable));
    }
    if let Some(d) = word.strip_prefix("trim:") {
        return Some(parse_trim(d).map(KnobWord::Trim));
    }
    None
}

fn parse_tunable(t: &str) -> Result<Tunable, String> {
    let names = || TUNABLES.iter().map(|t| t.0).collect::<Vec<_>>().join(", ");
    let Some((name, value)) = t.split_once('=') else {
        return Err(format!(
            "'tunable:{t}' needs NAME=VALUE, e.g. tunable:trim_threshold=128K (names: {})",
            names()
        ));
    };
    let short = name.strip_prefix("glibc.malloc.").unwrap_or(name);
    let Some(&(short, size, _, _)) = TUNABLES.iter().find(|x| x.0 == short) else {
        return Err(format!(
            "'tunable:{t}': glibc has no malloc tunable '{name}' (names: {})",
            names()
        ));
    };
    let parsed = if size {
        crate::units::parse_size(value)
    } else {
        value
            .trim()
            .parse::<u64>()
            .map_err(|_| "not a whole number".to_string())
    };
    let value = parsed.map_err(|why| {
        format!(
            "'tunable:{t}': {why}{}",
            if size {
                " (a size: 131072, 128K, 1M)"
            } else {
                " (a whole number)"
            }
        )
    })?;
    // glibc reads tunables as `size_t` (and a few as int): larger values are not numbers
    // to it.
    if value > i64::MAX as u64 {
        return Err(format!("'tunable:{t}': too large for glibc"));
    }
    Ok(Tunable {
        name: short.to_string(),
        value,
    })
}

fn parse_trim(d: &str) -> Result<u64, String> {
    let ms = crate::units::parse_duration(d)
        .map_err(|why| format!("'trim:{d}': {why} (a duration: 500ms, 10s, 1m)"))?
        .as_millis() as u64;
    if !(TRIM_RANGE_MS.0..=TRIM_RANGE_MS.1).contains(&ms) {
        return Err(format!(
            "'trim:{d}': the interval must be between 10ms and 24h"
        ));
    }
    Ok(ms)
}

/// What the checks need to know about this machine.
#[derive(Debug, Clone)]
pub(crate) struct KnobHost {
    /// The glibc version (`gnu_get_libc_version`), when the C library is glibc.
    pub glibc: Option<(u32, u32)>,
    /// The host's THP mode, when the kernel has THP.
    pub thp: Option<crate::linux::thp::ThpMode>,
}

impl KnobHost {
    pub(crate) fn detect() -> KnobHost {
        KnobHost {
            glibc: parse_version(&crate::linux::host::glibc_version()),
            thp: crate::linux::thp::host_mode(),
        }
    }
}

/// `2.36` → (2, 36).
pub(crate) fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut it = v.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    Some((major, minor))
}

/// The version of the jemalloc library at `path` (its embedded `5.3.0-0-g…` string).
pub(crate) fn jemalloc_version(path: &Path) -> Option<(u32, u32)> {
    let bytes = std::fs::read(path).ok()?;
    // `MAJOR.MINOR.PATCH-N-gHASH`: jemalloc's JEMALLOC_VERSION.
    bytes.split(|b| *b == 0).find_map(|s| {
        let s = std::str::from_utf8(s).ok()?;
        let (ver, rest) = s.split_once("-")?;
        if !rest.contains("-g") || ver.split('.').count() != 3 || ver.len() > 16 {
            return None;
        }
        parse_version(ver)
    })
}

/// The knobs of variant `variant` from its knob words, checked against this machine and
/// against the rest of the variant (`env` as given, the preload as asked for). Errors say
/// which word, why, and what to do.
pub(crate) fn resolve_knobs(
    words: Vec<KnobWord>,
    env: &[(String, String)],
    preload: Option<(&str, &Path)>,
    host: &KnobHost,
) -> Result<Knobs, String> {
    let other = other_allocator(preload);
    let known_other = other.as_deref().filter(|a| {
        ["jemalloc", "tcmalloc", "mimalloc"]
            .iter()
            .any(|n| a.contains(n))
    });
    let mut k = Knobs::default();
    for w in words {
        add_word(&mut k, w, known_other, host)?;
    }
    check_heap_thp(&mut k, env, preload, host)?;
    if k.heap_thp.is_some() && k.thp_off {
        return Err("thp:off and thp:heap contradict each other: give one".into());
    }
    check_against_env(&k, env)?;
    Ok(k)
}

/// The allocator a preload brings in place of glibc's: its name when memtrial knows it,
/// else the library's file name.
fn other_allocator(preload: Option<(&str, &Path)>) -> Option<String> {
    preload.map(|(spec, path)| {
        LibAllocator::from_name(spec).map_or_else(
            || {
                let f = path.file_name().map(|f| f.to_string_lossy().into_owned());
                f.unwrap_or_default()
            },
            |a| a.name().to_string(),
        )
    })
}

/// `what` changes glibc's malloc: an error where the variant preloads `known_other`
/// (jemalloc, tcmalloc, mimalloc), which answers malloc instead.
fn glibc_only(what: &str, known_other: Option<&str>) -> Result<(), String> {
    match known_other {
        Some(a) => Err(format!(
            "{what} changes glibc's malloc, and this variant preloads {a}, which answers \
             malloc instead: give it to a variant without a preload"
        )),
        None => Ok(()),
    }
}

/// `what` needs glibc `need` or newer: an error on an older glibc or another C library.
fn glibc_at_least(what: &str, need: (u32, u32), host: &KnobHost) -> Result<(), String> {
    match host.glibc {
        Some(have) if have >= need => Ok(()),
        Some(have) => Err(format!(
            "{what} needs glibc {}.{} or newer; this machine has glibc {}.{}",
            need.0, need.1, have.0, have.1
        )),
        None => Err(format!(
            "{what} needs glibc {}.{} or newer; this machine's C library is not glibc",
            need.0, need.1
        )),
    }
}

/// One knob word into `k`, checked against this machine and the variant's allocator.
fn add_word(
    k: &mut Knobs,
    w: KnobWord,
    known_other: Option<&str>,
    host: &KnobHost,
) -> Result<(), String> {
    match w {
        KnobWord::ThpOff => {
            if host.thp.is_none() {
                return Err("thp:off: this kernel has no transparent huge pages \
                     (/sys/kernel/mm/transparent_hugepage): there is nothing to turn off"
                    .into());
            }
            k.thp_off = true;
        }
        KnobWord::ThpHeap => {
            k.heap_thp = Some(match known_other {
                None => HeapThp::Glibc,
                Some(a) if a.contains("jemalloc") => HeapThp::Jemalloc,
                Some(a) => {
                    return Err(format!(
                        "thp:heap knows glibc's hugetlb=1 and jemalloc's thp:always; this \
                         variant preloads {a}: set its own setting instead (mimalloc: \
                         MIMALLOC_LARGE_OS_PAGES=1)"
                    ))
                }
            });
        }
        KnobWord::Tunable(t) => {
            let what = format!("tunable:{}", t.name);
            glibc_only(&what, known_other)?;
            let need = TUNABLES
                .iter()
                .find(|x| x.0 == t.name)
                .map_or((2, 26), |x| x.2);
            glibc_at_least(&what, need, host)?;
            if k.tunables.iter().any(|o| o.name == t.name) {
                return Err(format!("{what} is given twice"));
            }
            k.tunables.push(t);
        }
        KnobWord::Trim(ms) => {
            glibc_only("trim:", known_other)?;
            if k.trim_ms.is_some() {
                return Err("trim: is given twice".into());
            }
            k.trim_ms = Some(ms);
        }
    }
    Ok(())
}

/// `thp:heap` made concrete: glibc's `hugetlb=1` tunable (glibc 2.35 or newer), or
/// jemalloc's `thp:always` (a jemalloc new enough, a MALLOC_CONF without its own `thp:`).
fn check_heap_thp(
    k: &mut Knobs,
    env: &[(String, String)],
    preload: Option<(&str, &Path)>,
    host: &KnobHost,
) -> Result<(), String> {
    match k.heap_thp {
        Some(HeapThp::Glibc) => {
            glibc_at_least("thp:heap (glibc.malloc.hugetlb=1)", (2, 35), host)?;
            if k.tunables.iter().any(|t| t.name == "hugetlb") {
                return Err("thp:heap sets tunable:hugetlb=1 itself; give one of them".into());
            }
            k.tunables.push(Tunable {
                name: "hugetlb".into(),
                value: 1,
            });
        }
        Some(HeapThp::Jemalloc) => {
            if let Some((_, path)) = preload {
                if let Some(v) = jemalloc_version(path).filter(|v| *v < JEMALLOC_THP) {
                    return Err(format!(
                        "thp:heap (MALLOC_CONF=thp:always) needs jemalloc {}.{} or newer; {} \
                         is {}.{}",
                        JEMALLOC_THP.0,
                        JEMALLOC_THP.1,
                        path.display(),
                        v.0,
                        v.1
                    ));
                }
            }
            if env
                .iter()
                .any(|(key, v)| key == "MALLOC_CONF" && v.contains("thp:"))
            {
                return Err(
                    "thp:heap sets MALLOC_CONF's thp itself; its MALLOC_CONF sets \
                            thp: too: give one of them"
                        .into(),
                );
            }
        }
        None => {}
    }
    Ok(())
}

/// A tunable and its old environment variable, or the same tunable in GLIBC_TUNABLES:
/// one setting given twice.
fn check_against_env(k: &Knobs, env: &[(String, String)]) -> Result<(), String> {
    for t in &k.tunables {
        if let Some(var) = TUNABLES.iter().find(|x| x.0 == t.name).and_then(|x| x.3) {
            if env.iter().any(|(key, _)| key == var) {
                return Err(format!(
                    "tunable:{} and {var} set the same glibc setting: give one",
                    t.name
                ));
            }
        }
        let dotted = format!("glibc.malloc.{}=", t.name);
        if env
            .iter()
            .any(|(key, v)| key == "GLIBC_TUNABLES" && v.split(':').any(|s| s.starts_with(&dotted)))
        {
            return Err(format!(
                "tunable:{} is already in the variant's GLIBC_TUNABLES: give it once",
                t.name
            ));
        }
    }
    Ok(())
}

impl Knobs {
    pub fn is_empty(&self) -> bool {
        !self.thp_off
            && self.heap_thp.is_none()
            && self.tunables.is_empty()
            && self.trim_ms.is_none()
    }

    /// The spec words that give these knobs again (`thp:off`, `tunable:…`, `trim:10s`);
    /// `thp:heap`'s own `hugetlb=1` is not repeated.
    pub fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.thp_off {
            w.push("thp:off".to_string());
        }
        if self.heap_thp.is_some() {
            w.push("thp:heap".to_string());
        }
        for t in &self.tunables {
            if self.heap_thp == Some(HeapThp::Glibc) && t.name == "hugetlb" {
                continue;
            }
            w.push(format!("tunable:{}={}", t.name, t.value));
        }
        if let Some(ms) = self.trim_ms {
            w.push(format!("trim:{}", trim_text(ms)));
        }
        w
    }

    /// The environment these knobs add to the variant's own `env`: the tunables merged into
    /// `GLIBC_TUNABLES` (after the variant's own value), jemalloc's `thp:always` into
    /// `MALLOC_CONF`. Every other setting as it is.
    pub fn merged_env(&self, env: &[(String, String)]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = env.to_vec();
        let mut merge =
            |key: &str, value: String, sep: char| match out.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) if !v.is_empty() => {
                    v.push(sep);
                    v.push_str(&value);
                }
                Some((_, v)) => *v = value,
                None => out.push((key.to_string(), value)),
            };
        if !self.tunables.is_empty() {
            let v: Vec<String> = self.tunables.iter().map(Tunable::setting).collect();
            merge("GLIBC_TUNABLES", v.join(":"), ':');
        }
        if self.heap_thp == Some(HeapThp::Jemalloc) {
            merge("MALLOC_CONF", "thp:always".into(), ',');
        }
        out
    }
}

/// What the experiment's notes say about its variants' knobs before any run: jemalloc's
/// arenas sized for the host under a CPU quota (its pitfall, with the variant to try), a
/// huge-page knob the host's THP mode makes moot, and CPython's pymalloc beside a
/// preloaded allocator.
pub(crate) fn knob_notes(
    variants: &[Variant],
    program: &Path,
    limits: &Limits,
    online_cpus: u32,
    thp: Option<&crate::linux::thp::ThpMode>,
) -> Vec<String> {
    let mut notes = Vec::new();
    // The CPUs a run's process sees (its affinity: the cpuset's), and may use.
    let seen = limits
        .cpuset
        .as_deref()
        .and_then(|c| crate::linux::cgroup::parse_cpu_list(c).ok())
        .map_or(online_cpus, |c| c.len() as u32)
        .max(1);
    let usable = limits.cpus.map(|q| q.min(f64::from(seen)));
    for v in variants {
        let settings = v.settings();
        let jemalloc = v
            .preload_spec
            .as_deref()
            .or(v.preload.as_deref().and_then(|p| p.to_str()))
            .is_some_and(|p| p.contains("jemalloc"));
        let narenas_set = settings
            .iter()
            .any(|(k, val)| k == "MALLOC_CONF" && val.contains("narenas"));
        if jemalloc && !narenas_set {
            let narenas = 4 * u64::from(seen);
            if let (Some(q), Some(warranted)) = (
                usable,
                crate::linux::allocator::jemalloc_arena_pitfall(narenas, usable),
            ) {
                let mut words: Vec<String> = v
                    .preload_spec
                    .iter()
                    .map(|p| format!("preload:{p}"))
                    .collect();
                words.push(format!("MALLOC_CONF=narenas:{warranted}"));
                notes.push(format!(
                    "variant '{}': jemalloc will make {narenas} arenas (4 per CPU it sees: {seen}), sized for the host, not for the CPU quota of {q} (--cpus), which warrants {warranted}; to measure it sized for the quota: --variant {}",
                    v.name,
                    shell_words::quote(&format!("{}-narenas{warranted}={}", v.name, words.join(" ")))
                ));
            }
        }
        match (v.knobs.heap_thp, thp) {
            (Some(_), Some(m)) if m.enabled == "always" => notes.push(format!(
                "variant '{}': thp:heap changes nothing here: the host's THP mode is always, so every large anonymous mapping may get huge pages already",
                v.name
            )),
            (Some(_), Some(m)) if m.enabled == "never" => notes.push(format!(
                "variant '{}': thp:heap gets no huge pages here: the host's THP mode is never",
                v.name
            )),
            _ => {}
        }
        if v.knobs.thp_off && thp.is_some_and(|m| m.enabled == "never") {
            notes.push(format!(
                "variant '{}': thp:off changes nothing here: the host's THP mode is never",
                v.name
            ));
        }
    }
    // CPython: pymalloc keeps small objects away from a preloaded allocator.
    let python = variants
        .iter()
        .map(|v| v.program.as_ref().map_or(program, |p| p.path()))
        .any(is_cpython);
    if python {
        let pymalloc_on: Vec<&Variant> = variants
            .iter()
            .filter(|v| v.preload.is_some())
            .filter(|v| {
                !v.settings()
                    .iter()
                    .any(|(k, val)| k == "PYTHONMALLOC" && val.starts_with("malloc"))
            })
            .collect();
        if let Some(first) = pymalloc_on.first() {
            let names: Vec<&str> = pymalloc_on.iter().map(|v| v.name.as_str()).collect();
            let pre = first.preload_spec.as_deref().unwrap_or("LIB");
            notes.push(format!(
                "the workload is CPython: pymalloc serves objects up to 512 bytes from arenas of its own, which {} never see(s) (PYTHONMALLOC unset); PYTHONMALLOC=malloc hands them over: --variant {}",
                names.join(", "),
                shell_words::quote(&format!("{}-pymalloc-off=preload:{pre} PYTHONMALLOC=malloc", first.name))
            ));
        }
    }
    notes
}

/// The program is CPython: named `python…`, or a script whose `#!` line runs it.
pub(crate) fn is_cpython(program: &Path) -> bool {
    let named = |p: &str| {
        let name = p.rsplit('/').next().unwrap_or(p);
        name.strip_prefix("python")
            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    if named(&program.to_string_lossy()) {
        return true;
    }
    use std::io::Read;
    let mut head = [0u8; 128];
    let Ok(n) = std::fs::File::open(program).and_then(|mut f| f.read(&mut head)) else {
        return false;
    };
    let Some(line) = head[..n].strip_prefix(b"#!") else {
        return false;
    };
    let line = String::from_utf8_lossy(line.split(|b| *b == b'\n').next().unwrap_or(&[]));
    let mut words = line.split_whitespace();
    match words.next() {
        Some(interp) if interp.ends_with("/env") => {
            words.find(|w| !w.starts_with('-')).is_some_and(named)
        }
        Some(interp) => named(interp),
        None => false,
    }
}

/// `10s`, `1500ms`, `2m`: a trim interval as a spec gives it.
pub fn trim_text(ms: u64) -> String {
    if ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(glibc: (u32, u32)) -> KnobHost {
        KnobHost {
            glibc: Some(glibc),
            thp: Some(crate::linux::thp::ThpMode {
                enabled: "madvise".into(),
                defrag: "madvise".into(),
            }),
        }
    }

    fn words(spec: &[&str]) -> Vec<KnobWord> {
        spec.iter()
            .map(|w| knob_word(w).expect("a knob word").expect("valid"))
            .collect()
    }

    #[test]
    fn tunables_merge_into_one_glibc_tunables_after_the_variants_own() {
        let env = vec![("GLIBC_TUNABLES".into(), "glibc.malloc.arena_max=2".into())];
        let k = resolve_knobs(
            words(&[
                "tunable:trim_threshold=128K",
                "tunable:glibc.malloc.tcache_count=0",
                "thp:heap",
            ]),
            &env,
            None,
            &host((2, 36)),
        )
        .unwrap();
        assert_eq!(
            k.merged_env(&env),
            vec![(
                "GLIBC_TUNABLES".to_string(),
                "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072:glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1".to_string()
            )]
        );
        assert_eq!(
            k.words(),
            vec![
                "thp:heap",
                "tunable:trim_threshold=131072",
                "tunable:tcache_count=0"
            ]
        );
    }

    #[test]
    fn a_glibc_too_old_is_refused_naming_both_versions() {
        let e = resolve_knobs(words(&["thp:heap"]), &[], None, &host((2, 31))).unwrap_err();
        assert!(
            e.contains("glibc 2.35 or newer") && e.contains("glibc 2.31"),
            "{e}"
        );
        let e =
            resolve_knobs(words(&["tunable:mxfast=64"]), &[], None, &host((2, 28))).unwrap_err();
        assert!(e.contains("2.30") && e.contains("2.28"), "{e}");
        assert!(resolve_knobs(words(&["tunable:mxfast=64"]), &[], None, &host((2, 30))).is_ok());
        let none = KnobHost {
            glibc: None,
            thp: None,
        };
        let e = resolve_knobs(words(&["tunable:top_pad=0"]), &[], None, &none).unwrap_err();
        assert!(e.contains("not glibc"), "{e}");
        let e = resolve_knobs(words(&["thp:off"]), &[], None, &none).unwrap_err();
        assert!(e.contains("no transparent huge pages"), "{e}");
    }

    #[test]
    fn glibc_knobs_are_refused_beside_another_allocator() {
        let je = Some((
            "jemalloc",
            Path::new("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
        ));
        for w in ["tunable:trim_threshold=0", "trim:1s"] {
            let e = resolve_knobs(words(&[w]), &[], je, &host((2, 36))).unwrap_err();
            assert!(e.contains("preloads jemalloc"), "{e}");
        }
        let k = resolve_knobs(words(&["thp:heap"]), &[], je, &host((2, 36))).unwrap();
        assert_eq!(k.heap_thp, Some(HeapThp::Jemalloc));
        let env = vec![("MALLOC_CONF".into(), "narenas:2".into())];
        assert_eq!(
            k.merged_env(&env),
            vec![(
                "MALLOC_CONF".to_string(),
                "narenas:2,thp:always".to_string()
            )]
        );
        let tc = Some(("tcmalloc", Path::new("/x/libtcmalloc_minimal.so.4")));
        let e = resolve_knobs(words(&["thp:heap"]), &[], tc, &host((2, 36))).unwrap_err();
        assert!(e.contains("preloads tcmalloc"), "{e}");
    }

    #[test]
    fn conflicts_and_bad_words_are_named() {
        let h = host((2, 36));
        let arena = vec![("MALLOC_ARENA_MAX".into(), "2".into())];
        let e = resolve_knobs(words(&["tunable:arena_max=4"]), &arena, None, &h).unwrap_err();
        assert!(e.contains("MALLOC_ARENA_MAX"), "{e}");
        let e = resolve_knobs(words(&["thp:off", "thp:heap"]), &[], None, &h).unwrap_err();
        assert!(e.contains("contradict"), "{e}");
        let e = resolve_knobs(
            words(&["tunable:top_pad=0", "tunable:top_pad=1"]),
            &[],
            None,
            &h,
        )
        .unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let bad = |w: &str| knob_word(w).unwrap().unwrap_err();
        assert!(bad("thp:on").contains("off") && bad("thp:on").contains("heap"));
        assert!(bad("tunable:trim").contains("NAME=VALUE"));
        assert!(bad("tunable:nope=1").contains("no malloc tunable 'nope'"));
        assert!(bad("tunable:arena_max=2K").contains("whole number"));
        assert!(bad("trim:5ms").contains("between 10ms and 24h"));
        assert!(bad("trim:soon").contains("a duration"));
        assert!(knob_word("preload:jemalloc").is_none());
        assert_eq!(knob_word("trim:10s"), Some(Ok(KnobWord::Trim(10_000))));
        assert_eq!(trim_text(10_000), "10s");
        assert_eq!(trim_text(1500), "1500ms");
        assert_eq!(trim_text(120_000), "2m");
    }

    #[test]
    fn notes_name_jemalloc_under_a_quota_moot_thp_and_cpython() {
        let je = Variant {
            name: "jemalloc".into(),
            env: vec![],
            preload: Some("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2".into()),
            preload_spec: Some("jemalloc".into()),
            origin: VariantOrigin::Catalog,
            program: None,
            knobs: Knobs::default(),
        };
        let quota = Limits {
            cpus: Some(0.5),
            ..Default::default()
        };
        let n = knob_notes(
            std::slice::from_ref(&je),
            Path::new("/bin/true"),
            &quota,
            2,
            None,
        );
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(
            n[0].contains("jemalloc will make 8 arenas (4 per CPU it sees: 2)")
                && n[0].contains(
                    "--variant 'jemalloc-narenas4=preload:jemalloc MALLOC_CONF=narenas:4'"
                ),
            "{}",
            n[0]
        );
        // Sized already, or a quota that warrants them: nothing to say.
        let mut sized = je.clone();
        sized.env.push(("MALLOC_CONF".into(), "narenas:2".into()));
        assert!(knob_notes(&[sized], Path::new("/bin/true"), &quota, 2, None).is_empty());
        let two = Limits {
            cpus: Some(2.0),
            ..Default::default()
        };
        assert!(knob_notes(
            std::slice::from_ref(&je),
            Path::new("/bin/true"),
            &two,
            2,
            None
        )
        .is_empty());
        // A cpuset narrows what jemalloc sees.
        let set = Limits {
            cpus: Some(1.0),
            cpuset: Some("0".into()),
            ..Default::default()
        };
        assert!(knob_notes(
            std::slice::from_ref(&je),
            Path::new("/bin/true"),
            &set,
            2,
            None
        )
        .is_empty());
        let always = crate::linux::thp::ThpMode {
            enabled: "always".into(),
            defrag: "madvise".into(),
        };
        let heap = Variant {
            name: "glibc-thp".into(),
            preload: None,
            preload_spec: None,
            knobs: Knobs {
                heap_thp: Some(HeapThp::Glibc),
                ..Default::default()
            },
            ..je.clone()
        };
        let n = knob_notes(
            &[heap],
            Path::new("/bin/true"),
            &Limits::default(),
            2,
            Some(&always),
        );
        assert!(n[0].contains("changes nothing here"), "{n:?}");
        let n = knob_notes(
            &[je],
            Path::new("/usr/bin/python3.11"),
            &Limits::default(),
            2,
            None,
        );
        assert!(
            n[0].contains("CPython")
                && n[0].contains("'jemalloc-pymalloc-off=preload:jemalloc PYTHONMALLOC=malloc'"),
            "{n:?}"
        );
        assert!(is_cpython(Path::new("/usr/bin/python3")));
        assert!(!is_cpython(Path::new("/usr/bin/pythonista")));
        assert!(!is_cpython(Path::new("/bin/true")));
    }

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("2.36"), Some((2, 36)));
        assert_eq!(parse_version("2.35.9000"), Some((2, 35)));
        assert_eq!(parse_version("unknown"), None);
        if let Some(v) = jemalloc_version(Path::new("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")) {
            assert!(v >= (5, 0), "{v:?}");
        }
    }
}
