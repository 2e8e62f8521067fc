//! The knobs in a report: transparent huge pages (the host's mode, each variant's share of
//! memory in huge pages), a trimming variant's trims (what they returned, what they cost),
//! CPython's own allocator beside a preloaded one, and the next experiments these findings
//! point to — each a runnable variant (printed, never run).

use super::holes::{derived_name, own_words};
use crate::analysis::{Analysis, Figure};
use crate::plan::Variant;
use crate::record::{Experiment, RunRecord};
use crate::units::format_bytes;

/// The heading of the lines, in every format.
pub(crate) const KNOBS_HEADING: &str =
    "huge pages, trimming, Python's allocator (medians over ok runs)";

/// Huge pages are worth a line (and THP off an experiment) from this many bytes…
const HUGE_WORTH_BYTES: f64 = (8u64 << 20) as f64;
/// …and this share of the resident bytes.
const HUGE_WORTH_SHARE: f64 = 0.25;

fn counted<'a>(e: &'a Experiment, name: &'a str) -> impl Iterator<Item = &'a RunRecord> {
    e.runs
        .iter()
        .filter(move |r| r.variant == name && r.counts())
}

fn median(xs: Vec<f64>) -> Option<f64> {
    (!xs.is_empty()).then(|| crate::analysis::stats::median(&xs))
}

fn pct(part: f64, whole: f64) -> String {
    format!("{:.0}%", 100.0 * part / whole.max(1.0))
}

/// `--variant 'NAME-SUFFIX=<the variant's own words> EXTRA'`.
fn variant_arg(v: &Variant, suffix: &str, extra: &str) -> String {
    let mut words = own_words(v, extra);
    words.push(extra.to_string());
    format!(
        "--variant {}",
        shell_words::quote(&format!(
            "{}={}",
            derived_name(&v.name, suffix),
            words.join(" ")
        ))
    )
}

/// The lines under [`KNOBS_HEADING`]: empty when no variant turns a knob and nothing
/// points to one.
pub(crate) fn knob_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(thp_lines(e, a));
    out.extend(trim_lines(e, a));
    out.extend(python_lines(e, a));
    out.extend(next_for_knobs(e, a));
    out
}

/// Per variant: its share of memory in transparent huge pages at the read with the most.
fn thp_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let any_knob = e
        .plan
        .variants
        .iter()
        .any(|v| v.knobs.thp_off || v.knobs.heap_thp.is_some());
    let mut lines = Vec::new();
    let mut any_huge = false;
    for s in &a.variants {
        let views: Vec<(f64, f64)> = counted(e, &s.name)
            .filter_map(|r| {
                let t = r.inside.thp.as_ref()?;
                Some((
                    t.peak_anon_huge_bytes? as f64,
                    t.rss_at_peak_anon_huge_bytes? as f64,
                ))
            })
            .collect();
        let n = views.len();
        let (Some(huge), Some(rss)) = (
            median(views.iter().map(|x| x.0).collect()),
            median(views.iter().map(|x| x.1).collect()),
        ) else {
            continue;
        };
        any_huge |= huge >= HUGE_WORTH_BYTES;
        lines.push(format!(
            "{}: at most {} in transparent huge pages ({} of the {} resident then; {n} run(s))",
            s.name,
            format_bytes(huge),
            pct(huge, rss),
            format_bytes(rss)
        ));
    }
    if !(any_knob || any_huge) || lines.is_empty() {
        return Vec::new();
    }
    let host = e
        .runs
        .iter()
        .find_map(|r| r.inside.thp.as_ref()?.host.as_ref())
        .map_or("no THP".to_string(), |h| h.describe());
    lines.insert(
        0,
        format!("transparent huge pages (host: {host}; AnonHugePages at the PSS reads and the smaps read nearest the peak):"),
    );
    lines
}

/// Per trimming variant: its calls, what they returned and what they cost.
fn trim_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    for s in &a.variants {
        let runs: Vec<&RunRecord> = counted(e, &s.name)
            .filter(|r| r.inside.trim.is_some())
            .collect();
        let Some(first) = runs.first().and_then(|r| r.inside.trim.as_ref()) else {
            continue;
        };
        let each = |f: &dyn Fn(&RunRecord, &crate::record::TrimView) -> f64| {
            median(
                runs.iter()
                    .filter_map(|r| Some(f(r, r.inside.trim.as_ref()?)))
                    .collect(),
            )
            .unwrap_or(0.0)
        };
        let calls = each(&|_, t| t.trims as f64);
        let returned = each(&|_, t| t.returned_bytes as f64);
        let largest = each(&|_, t| t.largest_bytes as f64);
        let cpu = each(&|_, t| t.cpu_seconds);
        let share =
            each(&|r, t| t.cpu_seconds / (r.cpu_user_seconds + r.cpu_sys_seconds).max(1e-9));
        let longest = each(&|_, t| t.longest_seconds);
        let mean = s
            .ratio_to_baseline
            .get(&Figure::MeanRssBytes)
            .map(|r| format!("; mean RSS {:.2}× {}'s", r.value, a.baseline))
            .unwrap_or_default();
        out.push(format!(
            "{}: malloc_trim(0) every {}: {calls:.0} call(s) per run returned {} (the largest {}), {} of CPU inside malloc_trim ({:.1}% of the run's CPU), the longest call {}{mean} ({} run(s))",
            s.name,
            crate::plan::trim_text(first.interval_ms),
            format_bytes(returned),
            format_bytes(largest),
            crate::units::format_seconds(cpu),
            share * 100.0,
            crate::units::format_seconds(longest),
            runs.len()
        ));
    }
    out
}

/// Per variant on CPython: pymalloc's part beside a preloaded allocator.
fn python_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    for s in &a.variants {
        let Some(v) = e.plan.variant(&s.name) else {
            continue;
        };
        let runs: Vec<&RunRecord> = counted(e, &s.name)
            .filter(|r| r.inside.python.is_some())
            .collect();
        let Some(py) = runs.first().and_then(|r| r.inside.python.as_ref()) else {
            continue;
        };
        let allocator = s.allocator_detected.as_deref().unwrap_or("glibc");
        if v.preload.is_none() && !py.pymalloc() {
            continue;
        }
        if !py.pymalloc() {
            out.push(format!(
                "{}: CPython ({}) with {}: every object goes through {allocator}",
                s.name,
                py.executable,
                py.setting()
            ));
            continue;
        }
        // Where the probe can tell: anonymous memory beside what the allocator held at
        // its peak is what it never saw (pymalloc's arenas among it).
        let outside = median(
            runs.iter()
                .filter_map(|r| {
                    let held = r.inside.allocator.as_ref()?.at_peak.as_ref()?.held_bytes? as f64;
                    let regions = &r.regions.as_ref()?.regions;
                    let anon: u64 = regions
                        .by_kind
                        .iter()
                        .filter(|(k, _)| {
                            matches!(
                                k,
                                crate::linux::regions::Kind::MainHeap
                                    | crate::linux::regions::Kind::MallocArenas
                                    | crate::linux::regions::Kind::OtherAnon
                            )
                        })
                        .map(|(_, b)| *b)
                        .sum();
                    Some(((anon as f64 - held).max(0.0), anon as f64))
                })
                .map(|(o, a)| o / a.max(1.0))
                .collect(),
        );
        let share = outside
            .map(|o| {
                format!(
                    "; near its peak {} of its anonymous memory lay outside {allocator}'s account (pymalloc's arenas among it)",
                    pct(o, 1.0)
                )
            })
            .unwrap_or_default();
        out.push(format!(
            "{}: CPython ({}) with {}: pymalloc serves objects up to 512 bytes from arenas of its own, which {allocator} never sees{share}",
            s.name,
            py.executable,
            py.setting()
        ));
    }
    out
}

/// The next experiments the findings point to, each a runnable variant.
fn next_for_knobs(e: &Experiment, a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    let plan = &e.plan;
    let any_thp_off = plan.variants.iter().any(|v| v.knobs.thp_off);
    for s in &a.variants {
        let Some(v) = plan.variant(&s.name) else {
            continue;
        };
        let runs: Vec<&RunRecord> = counted(e, &s.name).collect();
        // Much of the memory in huge pages, and no variant without them.
        let huge = median(
            runs.iter()
                .filter_map(|r| {
                    let t = r.inside.thp.as_ref()?;
                    Some(t.peak_anon_huge_bytes? as f64)
                })
                .collect(),
        );
        let rss = s.figures.get(&Figure::PeakRssBytes).map(|x| x.median);
        if let (Some(h), Some(rss)) = (huge, rss) {
            if !any_thp_off
                && !v.knobs.thp_off
                && h >= HUGE_WORTH_BYTES
                && h >= HUGE_WORTH_SHARE * rss
            {
                out.push(format!(
                    "next: {} of {}'s {} peak is in transparent huge pages; whether it needs them is one experiment away, with THP off for the process: memtrial run {} …",
                    format_bytes(h),
                    s.name,
                    format_bytes(rss),
                    variant_arg(v, "nothp", "thp:off")
                ));
            }
        }
        // jemalloc's arenas sized for the host's CPUs under a CPU quota.
        if let Some(next) = next_for_jemalloc_arenas(e, v, &runs) {
            out.push(next);
        }
        // CPython with a preloaded allocator and pymalloc on.
        let py = runs.iter().find_map(|r| r.inside.python.as_ref());
        if let (Some(py), Some(_)) = (py, &v.preload) {
            let tried = plan.variants.iter().any(|o| {
                o.preload == v.preload
                    && o.settings()
                        .iter()
                        .any(|(k, val)| k == "PYTHONMALLOC" && val.starts_with("malloc"))
            });
            if py.pymalloc() && !tried {
                out.push(format!(
                    "next: {} preloads {} into CPython with pymalloc on: objects up to 512 bytes never reach it; PYTHONMALLOC=malloc hands them over: memtrial run {} …",
                    s.name,
                    v.preload_spec.as_deref().unwrap_or("a library"),
                    variant_arg(v, "pymalloc-off", "PYTHONMALLOC=malloc")
                ));
            }
        }
    }
    out
}

/// jemalloc makes 4 arenas per CPU it sees; under a CPU quota that is the host's CPUs, not
/// the quota's. Found from the arenas the probe counted against the run's quota.
fn next_for_jemalloc_arenas(e: &Experiment, v: &Variant, runs: &[&RunRecord]) -> Option<String> {
    let quota = e.plan.limits.cpus?;
    if v.settings()
        .iter()
        .any(|(k, val)| k == "MALLOC_CONF" && val.contains("narenas"))
    {
        return None;
    }
    let arenas = runs
        .iter()
        .filter_map(|r| {
            let al = r.inside.allocator.as_ref()?;
            if al.answered != "jemalloc" {
                return None;
            }
            al.series.iter().filter_map(|p| p.arenas).max()
        })
        .max()?;
    let warranted = crate::linux::allocator::jemalloc_arenas_for(quota);
    (arenas >= 2 * warranted).then(|| {
        format!(
            "next: jemalloc in {} made {arenas} arenas (4 per CPU it sees) under a CPU quota of {quota} CPUs, which warrants {warranted}: memtrial run {} …",
            v.name,
            variant_arg(v, &format!("narenas{warranted}"), &format!("MALLOC_CONF=narenas:{warranted}"))
        )
    })
}

/// The combination the recommendation's pick measured, where its name alone does not say
/// it (see [`combination`]).
pub(crate) fn measured_as(
    e: &Experiment,
    rec: &crate::analysis::recommend::Recommendation,
) -> Option<String> {
    match &rec.verdict {
        crate::analysis::recommend::Verdict::Pick { variant, .. } => combination(e, variant),
        _ => None,
    }
}

/// The combination a recommendation measured, where the name alone does not say it: a
/// preloaded allocator in CPython, with or without pymalloc.
pub(crate) fn combination(e: &Experiment, variant: &str) -> Option<String> {
    let v = e.plan.variant(variant)?;
    let py = counted(e, variant).find_map(|r| r.inside.python.as_ref())?;
    let alloc = v
        .preload_spec
        .as_deref()
        .map_or("glibc malloc".to_string(), |p| format!("preload:{p}"));
    Some(format!(
        "measured as: {variant} = {alloc} in CPython ({}) with {}{}",
        py.executable,
        py.setting(),
        if py.pymalloc() && v.preload.is_some() {
            ": objects up to 512 bytes stayed in pymalloc's arenas"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;

    /// The fixture with a trimming variant, huge pages in one variant and CPython.
    fn knobbed() -> Experiment {
        let mut e = crate::report::fixture::experiment();
        for r in e.runs.iter_mut() {
            r.inside.thp = Some(crate::record::ThpView {
                host: Some(crate::linux::thp::ThpMode {
                    enabled: "madvise".into(),
                    defrag: "madvise".into(),
                }),
                peak_anon_huge_bytes: Some(if r.variant == "jemalloc" {
                    300 << 20
                } else {
                    0
                }),
                rss_at_peak_anon_huge_bytes: Some(r.peak_rss_bytes),
                reads: 3,
            });
            r.inside.python = Some(crate::record::PythonView {
                executable: "/usr/bin/python3.11".into(),
                pythonmalloc: None,
            });
            if r.variant == "arena2" {
                r.inside.trim = Some(crate::record::TrimView {
                    interval_ms: 1000,
                    processes: 1,
                    trims: 3,
                    released: 3,
                    returned_bytes: 100 << 20,
                    largest_bytes: 90 << 20,
                    cpu_seconds: 0.05,
                    longest_seconds: 0.06,
                    series: Vec::new(),
                });
            }
        }
        e
    }

    #[test]
    fn huge_pages_trims_and_python_are_said_with_their_next_experiments() {
        let e = knobbed();
        let a = analyse(&e);
        let lines = knob_lines(&e, &a);
        let text = lines.join("\n");
        assert!(
            text.contains("host: enabled madvise, defrag madvise"),
            "{text}"
        );
        assert!(
            text.contains("jemalloc: at most 300 MiB in transparent huge pages"),
            "{text}"
        );
        assert!(
            text.contains("arena2: malloc_trim(0) every 1s: 3 call(s) per run returned 100 MiB"),
            "{text}"
        );
        assert!(
            text.contains("pymalloc serves objects up to 512 bytes"),
            "{text}"
        );
        let thp = lines
            .iter()
            .find(|l| l.contains("THP off"))
            .expect("THP off suggested");
        let arg = thp
            .split("--variant ")
            .nth(1)
            .unwrap()
            .trim_end_matches(" …");
        assert_eq!(
            shell_words::split(arg).unwrap(),
            ["jemalloc-nothp=preload:jemalloc thp:off"]
        );
        let py = lines
            .iter()
            .find(|l| l.contains("PYTHONMALLOC=malloc hands them over"))
            .expect("pymalloc off suggested");
        assert!(
            py.contains("jemalloc-pymalloc-off=preload:jemalloc PYTHONMALLOC=malloc"),
            "{py}"
        );
        assert_eq!(
            combination(&e, "jemalloc").as_deref(),
            Some("measured as: jemalloc = preload:jemalloc in CPython (/usr/bin/python3.11) with pymalloc on (PYTHONMALLOC unset): objects up to 512 bytes stayed in pymalloc's arenas")
        );
    }

    #[test]
    fn nothing_to_say_without_knobs_or_findings() {
        let e = crate::report::fixture::experiment();
        let a = analyse(&e);
        assert!(knob_lines(&e, &a).is_empty());
        assert_eq!(combination(&e, "jemalloc"), None);
    }

    #[test]
    fn jemalloc_arenas_above_the_quota_get_narenas() {
        let mut e = crate::report::fixture::experiment();
        e.plan.limits.cpus = Some(0.5);
        for r in e.runs.iter_mut().filter(|r| r.variant == "jemalloc") {
            if let Some(al) = r.inside.allocator.as_mut() {
                al.answered = "jemalloc".into();
                for p in al.series.iter_mut() {
                    p.arenas = Some(8);
                }
            }
        }
        let a = analyse(&e);
        let lines = knob_lines(&e, &a);
        let l = lines
            .iter()
            .find(|l| l.contains("made 8 arenas"))
            .unwrap_or_else(|| panic!("{lines:?}"));
        assert!(
            l.contains("warrants 4") && l.contains("MALLOC_CONF=narenas:4"),
            "{l}"
        );
    }
}
