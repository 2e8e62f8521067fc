//! The allocator's free memory ("the holes") per variant, from the allocator's own account
//! nearest each run's peak, and the settings to try next that a finding suggests (printed,
//! never run).

use crate::analysis::Analysis;
use crate::plan::Variant;
use crate::record::{Experiment, Holes, RunRecord};
use crate::units::format_bytes;

/// The heading of the lines, in every format.
pub(crate) const HOLES_HEADING: &str = "the allocator's free memory (its own account: glibc's malloc_info, jemalloc's size classes and pages, tcmalloc's free lists; taken by the probe at each 5% rise of each process's resident memory, and where its growth paused)";

/// An account counts for a run's peak when the resident bytes it was taken at are at least
/// this share of the run's peak RSS (as the smaps reads).
const NEAR_PEAK: f64 = super::regions::NEAR_PEAK;

/// A finding is worth a next experiment when its bytes are at least this share of the
/// resident bytes…
const WORTH_SHARE: f64 = 0.10;
/// …and at least this many bytes.
const WORTH_BYTES: u64 = 8 << 20;

/// Free blocks are a fragmentation finding when they hold this share of the resident bytes.
const HOLES_SHARE: f64 = 0.25;

fn holes_of(r: &RunRecord) -> Option<&Holes> {
    r.inside.allocator.as_ref()?.holes.as_ref()
}

fn near_peak(r: &RunRecord) -> bool {
    holes_of(r).is_some_and(|h| h.resident_bytes as f64 >= NEAR_PEAK * r.peak_rss_bytes as f64)
}

/// The bytes of free memory an account names, resident only: what the median run is
/// chosen by.
fn resident_free(h: &Holes) -> u64 {
    h.free_bytes.unwrap_or(0)
        + h.parts
            .iter()
            .filter(|p| p.resident)
            .map(|p| p.bytes)
            .sum::<u64>()
}

fn part(h: &Holes, name: &str) -> u64 {
    h.parts
        .iter()
        .find(|p| p.name == name)
        .map_or(0, |p| p.bytes)
}

fn share(part: u64, whole: u64) -> String {
    format!("{:.0}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// `of 257 B–1.0 KiB`, `above 1.0 MiB`: a class by its bounds.
fn class_range(c: &crate::record::HoleClass) -> String {
    match c.up_to_bytes {
        None => format!(
            "above {}",
            format_bytes(c.from_bytes.saturating_sub(1) as f64)
        ),
        Some(up) if c.from_bytes == 0 => format!("of up to {}", format_bytes(up as f64)),
        Some(up) => format!(
            "of {}–{}",
            format_bytes(c.from_bytes as f64),
            format_bytes(up as f64)
        ),
    }
}

/// The account of one run, in words: free blocks by size, arenas, the allocator's other
/// free memory.
fn describe(h: &Holes) -> String {
    let mut out = Vec::new();
    if let (Some(free), Some(blocks)) = (h.free_bytes, h.free_blocks) {
        let what = if h.allocator == "jemalloc" {
            "free regions of small size classes"
        } else {
            "free chunks"
        };
        let mut order: Vec<usize> = (0..h.classes.len()).collect();
        order.sort_by_key(|i| std::cmp::Reverse(h.classes[*i].bytes));
        let sizes: Vec<String> = order
            .iter()
            .take(2)
            .filter(|i| h.classes[**i].bytes * 20 >= free)
            .map(|i| {
                format!(
                    "{} in blocks {}",
                    share(h.classes[*i].bytes, free),
                    class_range(&h.classes[*i])
                )
            })
            .collect();
        out.push(if blocks == 0 {
            format!("no {what}")
        } else {
            format!(
                "{} in {} {what}{}",
                format_bytes(free as f64),
                crate::units::format_count(blocks),
                if sizes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", sizes.join(", "))
                }
            )
        });
    }
    if !h.arenas.is_empty() {
        let threads = h.arenas.iter().filter(|a| !a.main).count();
        let system: u64 = h.arenas.iter().map(|a| a.system_bytes).sum();
        out.push(format!(
            "{} arenas ({} main + {threads} thread) with {} from the system",
            h.arenas.len(),
            h.arenas.len() - threads,
            format_bytes(system as f64)
        ));
    }
    for p in h.parts.iter().filter(|p| p.bytes > 0 || p.resident) {
        out.push(format!(
            "{} {}{}",
            p.name,
            format_bytes(p.bytes as f64),
            if p.resident { "" } else { " (not resident)" }
        ));
    }
    out.join("; ")
}

/// Per variant: the allocator's free memory in the run with the median free bytes among
/// those whose account lies near their peak; then the next experiments it suggests.
pub(crate) fn hole_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = Vec::new();
    for s in &a.variants {
        let runs: Vec<&RunRecord> = e
            .runs
            .iter()
            .filter(|r| r.variant == s.name && r.counts() && holes_of(r).is_some())
            .collect();
        if runs.is_empty() {
            continue;
        }
        let mut near: Vec<&RunRecord> = runs.iter().copied().filter(|r| near_peak(r)).collect();
        if near.is_empty() {
            let (at, peak) = runs
                .iter()
                .map(|r| {
                    (
                        holes_of(r).map_or(0, |h| h.resident_bytes),
                        r.peak_rss_bytes,
                    )
                })
                .max_by(|x, y| {
                    (x.0 as f64 / x.1.max(1) as f64).total_cmp(&(y.0 as f64 / y.1.max(1) as f64))
                })
                .unwrap_or((0, 0));
            out.push(format!(
                "{}: no account near a peak (the nearest at {} of a {} peak): the probe takes one at each 5% rise of resident memory while an account is cheap, and where growth pauses within its CPU budget",
                s.name,
                format_bytes(at as f64),
                format_bytes(peak as f64)
            ));
            continue;
        }
        near.sort_by_key(|r| holes_of(r).map_or(0, resident_free));
        let r = near[(near.len() - 1) / 2];
        let Some(h) = holes_of(r) else { continue };
        let text = describe(h);
        if text.is_empty() {
            continue;
        }
        out.push(format!(
            "{}: {} at {} resident ({} of the run's peak{}): {text}",
            s.name,
            h.allocator,
            format_bytes(h.resident_bytes as f64),
            share(h.resident_bytes, r.peak_rss_bytes),
            if near.len() > 1 {
                format!("; the median of {} runs", near.len())
            } else {
                String::new()
            }
        ));
        if let Some(v) = e.plan.variants.iter().find(|v| v.name == s.name) {
            next.extend(next_for_holes(e, v, h));
        }
    }
    out.extend(next);
    out
}

/// `preload:LIB` of a variant, as it was asked for.
fn preload_word(v: &Variant) -> Option<String> {
    let spec = v
        .preload_spec
        .clone()
        .or_else(|| v.preload.as_ref().map(|p| p.display().to_string()))?;
    Some(prefixed_word("preload:", &spec))
}

/// `prefix` and a value as one word of a variant spec, the value quoted when a shell would
/// split it or read something in it (`preload:'/opt/my libs/x.so'`).
fn prefixed_word(prefix: &str, value: &str) -> String {
    format!("{prefix}{}", shell_words::quote(value))
}

/// A variant's own words (preload, settings, program or command), less the settings
/// `replaced` names, as its spec holds them.
pub(super) fn own_words(v: &Variant, replaced: &str) -> Vec<String> {
    let mut words: Vec<String> = preload_word(v).into_iter().collect();
    words.extend(
        v.env
            .iter()
            .filter(|(k, _)| !replaced.starts_with(&format!("{k}=")))
            .map(|(k, val)| setting_word(k, val)),
    );
    match &v.program {
        Some(crate::plan::VariantProgram::Program { spec, .. }) => {
            words.push(prefixed_word("program:", spec))
        }
        Some(crate::plan::VariantProgram::Command { argv, .. }) => {
            words.push(prefixed_word("command:", &shell_words::join(argv)))
        }
        None => {}
    }
    // A knob's key: `tunable:NAME`, `thp:`, `trim:`.
    let key = |w: &str| match w.split_once('=') {
        Some((k, _)) => k.to_string(),
        None => w
            .split_once(':')
            .map_or(w.to_string(), |(k, _)| format!("{k}:")),
    };
    words.extend(
        v.knobs
            .words()
            .into_iter()
            .filter(|w| key(w) != key(replaced)),
    );
    words
}

/// `NAME-SUFFIX`, the name shortened to keep within a variant name's 64 characters.
pub(super) fn derived_name(name: &str, suffix: &str) -> String {
    let room = 64usize.saturating_sub(suffix.len() + 1);
    let short: String = name.chars().take(room).collect();
    format!("{short}-{suffix}")
}

fn has_env(v: &Variant, key: &str) -> bool {
    v.env.iter().any(|(k, _)| k == key)
}

/// `KEY=VALUE` as one word of a variant spec: the value in double quotes when a shell would
/// split it or read something in it.
fn setting_word(key: &str, value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "=:,./_+-@%".contains(c));
    if plain {
        return format!("{key}={value}");
    }
    let mut quoted = String::from("\"");
    for c in value.chars() {
        if "\"\\$`".contains(c) {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    format!("{key}={quoted}")
}

/// The settings a variant's account suggests trying, each with its reason.
fn next_for_holes(e: &Experiment, v: &Variant, h: &Holes) -> Vec<String> {
    let resident = h.resident_bytes;
    let worth = |b: u64| b >= WORTH_BYTES && b as f64 >= WORTH_SHARE * resident as f64;
    let name = &v.name;
    let mut out = Vec::new();
    // The variant's own settings and one more, as one `--variant` word quoted for a shell.
    let variant_arg = |suffix: &str, extra: &str| {
        let mut words = own_words(v, extra);
        words.push(extra.to_string());
        format!(
            "--variant {}",
            shell_words::quote(&format!(
                "{}={}",
                derived_name(name, suffix),
                words.join(" ")
            ))
        )
    };
    // Other allocators beside this variant: a custom one is given again by its spec.
    let others = if v.origin == crate::plan::VariantOrigin::Catalog {
        format!("--variants {name},jemalloc,tcmalloc")
    } else {
        format!(
            "--variant {} --variants jemalloc,tcmalloc",
            shell_words::quote(&format!("{name}={}", own_words(v, "").join(" ")))
        )
    };
    match h.allocator.as_str() {
        "glibc" => {
            let top = part(h, "top of heaps");
            let has_tunable = |t: &str| v.knobs.tunables.iter().any(|x| x.name == t);
            if worth(top) && !has_env(v, "MALLOC_TRIM_THRESHOLD_") && !has_tunable("trim_threshold")
            {
                out.push(format!(
                    "next: in {name}, glibc keeps {} free at the tops of its heaps ({} of resident); glibc gives a top back only above its trim threshold, which grows to twice the largest mapped block freed (up to 64 MiB): a fixed small one returns it (and keeps blocks over 128 KiB in mappings of their own): memtrial run {} …",
                    format_bytes(top as f64),
                    share(top, resident),
                    variant_arg("trim128k", "tunable:trim_threshold=128K")
                ));
            }
            let free = h.free_bytes.unwrap_or(0);
            let trims = e.plan.variants.iter().any(|x| x.knobs.trim_ms.is_some());
            if worth(free) && !trims && v.preload.is_none() {
                out.push(format!(
                    "next: in {name}, glibc holds {} ({} of resident) in free chunks between live ones; malloc_trim(0) gives their whole free pages back to the system without another allocator (at a CPU cost the run measures): memtrial run {} …",
                    format_bytes(free as f64),
                    share(free, resident),
                    variant_arg("trim10s", "trim:10s")
                ));
            }
            let tried = e.plan.variants.iter().any(|v| v.preload.is_some());
            if free as f64 >= HOLES_SHARE * resident as f64 && !tried && v.preload.is_none() {
                out.push(format!(
                    "next: in {name}, glibc holds {} ({} of resident) in free chunks between live ones, which it does not give back by itself; whether an allocator that keeps blocks of one size together leaves fewer is one experiment away: memtrial run {others} …",
                    format_bytes(free as f64),
                    share(free, resident)
                ));
            }
        }
        "jemalloc" if !has_env(v, "MALLOC_CONF") => {
            let dirty = part(h, "dirty pages");
            if worth(dirty) {
                out.push(format!(
                    "next: in {name}, jemalloc keeps {} of freed pages dirty ({} of resident) until their decay time (10 s by default) passes, and purges them only when it is called: a background thread and a shorter decay return them sooner: memtrial run {} …",
                    format_bytes(dirty as f64),
                    share(dirty, resident),
                    variant_arg("decay", "MALLOC_CONF=background_thread:true,dirty_decay_ms:1000")
                ));
            }
        }
        "tcmalloc" if !has_env(v, "TCMALLOC_RELEASE_RATE") => {
            let free = part(h, "page heap free");
            if worth(free) {
                out.push(format!(
                    "next: in {name}, tcmalloc keeps {} of free pages resident in its page heap ({} of resident); a higher release rate (1 by default) returns them sooner: memtrial run {} …",
                    format_bytes(free as f64),
                    share(free, resident),
                    variant_arg("release", "TCMALLOC_RELEASE_RATE=10")
                ));
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;

    #[test]
    fn settings_are_quoted_only_where_a_shell_would_split_them() {
        assert_eq!(setting_word("MALLOC_ARENA_MAX", "2"), "MALLOC_ARENA_MAX=2");
        assert_eq!(
            setting_word("RUBYOPT", "--yjit --yjit-exec-mem-size=32"),
            "RUBYOPT=\"--yjit --yjit-exec-mem-size=32\""
        );
        assert_eq!(setting_word("X", "a\"$b"), "X=\"a\\\"\\$b\"");
        assert_eq!(setting_word("X", ""), "X=\"\"");
        assert_eq!(crate::units::format_count(703_856), "703,856");
        assert_eq!(crate::units::format_count(12), "12");
    }

    #[test]
    fn a_suggested_variant_parses_back_to_the_same_settings_plus_one() {
        let e = crate::report::fixture::experiment();
        let a = analyse(&e);
        let lines = hole_lines(&e, &a);
        let line = lines
            .iter()
            .find(|l| l.starts_with("next: in arena2"))
            .unwrap();
        let arg = line
            .split("--variant ")
            .nth(1)
            .unwrap()
            .trim_end_matches(" …");
        let words = shell_words::split(arg).unwrap();
        assert_eq!(
            words,
            ["arena2-trim128k=MALLOC_ARENA_MAX=2 tunable:trim_threshold=128K"]
        );
    }

    #[test]
    fn a_suggested_variant_keeps_the_variants_program_and_quotes_its_library() {
        let v = Variant {
            name: "x".repeat(70),
            env: vec![("RUBYOPT".into(), "--yjit -W0".into())],
            preload: Some("/opt/my libs/libjemalloc.so.2".into()),
            preload_spec: Some("/opt/my libs/libjemalloc.so.2".into()),
            origin: crate::plan::VariantOrigin::Custom,
            program: Some(crate::plan::VariantProgram::Command {
                argv: vec!["ruby".into(), "--yjit".into(), "job.rb".into()],
                path: "/usr/bin/ruby".into(),
            }),
            knobs: Default::default(),
        };
        let words = own_words(&v, "MALLOC_CONF=x");
        let spec = format!("{}={}", derived_name(&v.name, "decay"), words.join(" "));
        assert!(spec.len() < 64 + 200 && spec.split('=').next().unwrap().len() == 64);
        // Read back the way the spec parser splits it.
        let split = shell_words::split(spec.split_once('=').unwrap().1).unwrap();
        assert_eq!(
            split,
            [
                "preload:/opt/my libs/libjemalloc.so.2",
                "RUBYOPT=--yjit -W0",
                "command:ruby --yjit job.rb"
            ]
        );
    }

    #[test]
    fn a_variant_that_already_sets_the_knob_gets_no_suggestion() {
        let mut e = crate::report::fixture::experiment();
        for v in e.plan.variants.iter_mut() {
            v.env.push(("MALLOC_TRIM_THRESHOLD_".into(), "0".into()));
            v.env.push(("MALLOC_CONF".into(), "narenas:1".into()));
            v.knobs.trim_ms = Some(10_000);
        }
        let a = analyse(&e);
        let lines = hole_lines(&e, &a);
        assert!(!lines.iter().any(|l| l.starts_with("next:")), "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("glibc: glibc at")));
    }

    #[test]
    fn an_account_far_from_the_peak_is_not_shown_as_the_peaks() {
        let mut e = crate::report::fixture::experiment();
        for r in e.runs.iter_mut() {
            if let Some(h) = r.inside.allocator.as_mut().and_then(|a| a.holes.as_mut()) {
                h.resident_bytes /= 2;
            }
        }
        let a = analyse(&e);
        let lines = hole_lines(&e, &a);
        assert!(
            lines.iter().all(|l| l.contains("no account near a peak")),
            "{lines:?}"
        );
    }
}
