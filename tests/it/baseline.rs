//! The baseline explained, the program's floor, one figure in every renderer (issue 36,
//! items 1–3): one experiment on real allocators — a job whose heap, with holes, grows
//! until it ends and that counts its own live bytes exactly — read three ways.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::*;
use memtrial::units::{format_bytes, format_seconds};

/// What the shared experiment left behind (its directory is gone: only its outputs).
struct Shared {
    stdout: String,
    json: Value,
    markdown: String,
    html: String,
    csv: String,
    /// Each run's own count of its peak of live bytes (the requested sizes), by variant.
    true_peaks: BTreeMap<String, Vec<f64>>,
}

const VARIANTS: &str = "glibc,jemalloc,tcmalloc";

/// glibc, jemalloc and tcmalloc, 3 runs each, of a 4-thread job growing a heap with holes
/// to 160 MiB live over 2 s (peaking as it ends), with every renderer written; `None` where
/// the allocators or a C compiler are missing.
fn shared() -> Option<&'static Shared> {
    static SHARED: OnceLock<Option<Shared>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if !(need_c_compiler() && need_allocators(&["jemalloc", "tcmalloc"])) {
                return None;
            }
            let grow = fixture("grow").display().to_string();
            let r = run_json(
                3,
                VARIANTS,
                &[
                    "--markdown",
                    "out.md",
                    "--html",
                    "out.html",
                    "--csv",
                    "out.csv",
                ],
                &[&grow, "4", "160", "2"],
            );
            assert_eq!(r.code(), 0, "{}", r.explain());
            let read = |n: &str| std::fs::read_to_string(r.dir.path().join(n)).expect(n);
            let json = r.json();
            let mut true_peaks: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for name in VARIANTS.split(',') {
                for run in typed_runs(&json, name) {
                    let out = std::fs::read_to_string(&run.stdout_path).expect("the job's output");
                    let peak = out
                        .lines()
                        .find_map(|l| l.strip_prefix("peak_live "))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .unwrap_or_else(|| panic!("no peak_live in {out}"));
                    true_peaks.entry(name.into()).or_default().push(peak);
                }
            }
            Some(Shared {
                stdout: r.stdout(),
                markdown: read("out.md"),
                html: read("out.html"),
                csv: read("out.csv"),
                json,
                true_peaks,
            })
        })
        .as_ref()
}

/// Defect 1: the baseline (and every variant) gets a regions read within 10% of each
/// run's peak and the allocator's own account there — live/held at the peak and the holes
/// — in every run, although the job grows without a pause until it ends (reads that waited
/// for a pause, or for twice the last, never came near such a peak).
///
/// The rule's promise is a read within 10% of the peak in at least 95% of such runs: the
/// read of the last 5% rung can be lost when the job ends while it is being taken (one
/// tcmalloc run here, under the suite's parallel load, read at 89.9%). So: every run within
/// 20%, at most one of the nine outside 10%, and the report's count for the baseline is
/// the count the record holds.
#[test]
fn every_variant_gets_its_regions_and_allocator_account_at_its_peak() {
    let Some(s) = shared() else { return };
    let mut outside = Vec::new();
    let mut glibc_within = 0;
    for name in VARIANTS.split(',') {
        for run in typed_runs(&s.json, name) {
            let peak = run.peak_rss_bytes as f64;
            let g = run
                .regions
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no regions read"));
            let at = g.tree_rss_bytes.max(g.status_rss_bytes) as f64;
            let said = format!(
                "{name}: the regions read nearest the peak at {at} of a {peak} peak ({} reads)",
                g.reads
            );
            assert!(at >= 0.8 * peak, "{said}");
            if at < 0.9 * peak {
                outside.push(said);
            } else if name == "glibc" {
                glibc_within += 1;
            }
            // The kinds describe the memory read, not twice it (smaps read page by page
            // can print a grown mapping twice).
            let vm_rss = g.status_rss_bytes.max(g.status_rss_after_bytes);
            assert!(
                (g.regions.rss_bytes as f64) < 1.1 * vm_rss as f64,
                "{name}: kinds sum to {} beside VmRSS {}..{}",
                g.regions.rss_bytes,
                g.status_rss_bytes,
                g.status_rss_after_bytes
            );
            let a = run
                .inside
                .allocator
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no allocator figures"));
            let h = a
                .holes
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no account of the allocator's free memory"));
            assert!(
                h.resident_bytes as f64 >= 0.9 * peak,
                "{name}: the allocator's account at {} of a {peak} peak",
                h.resident_bytes
            );
        }
        let ev = &summary(&s.json, name)["evidence"]["live_at_peak_bytes"];
        assert_eq!(ev["runs_at_peak"], 3, "{name}: live/held at the peak: {ev}");
    }
    assert!(outside.len() <= 1, "{outside:#?}");
    // The report says it for the baseline: where its memory is, and its free memory.
    assert!(
        s.stdout.lines().any(|l| l.trim().starts_with("glibc: ")
            && l.contains("resident: ")
            && l.contains(&format!(
                "{glibc_within} of 3 runs read within 10% of their peak"
            ))),
        "{}",
        s.stdout
    );
    assert!(
        s.stdout
            .lines()
            .any(|l| l.trim().starts_with("glibc: glibc at ") && l.contains("of the run's peak")),
        "{}",
        s.stdout
    );
    assert!(!s.stdout.contains("no read near a peak"), "{}", s.stdout);
}

/// Defect 2: the headline compares each peak with the program's floor (the most it was
/// seen to have live), and that floor is true to the job's own count; held against live at
/// the RSS peak is said only as retention then; no ratio of a figure each variant takes at
/// its own moment; no cause the figures do not support.
#[test]
fn the_headline_judges_peaks_against_the_programs_floor() {
    let Some(s) = shared() else { return };
    let doc = &s.json;
    let floor = &doc["floor"];
    let bytes = floor["bytes"].as_f64().expect("a floor");
    assert_eq!(floor["lower_bound"], true, "{floor}");
    // The floor is the program's: no higher than its own peak of live bytes counted
    // exactly (allocators round blocks up by at most a quarter), and a bound worth having.
    let all: Vec<f64> = s.true_peaks.values().flatten().copied().collect();
    let (lo, hi) = (
        all.iter().copied().fold(f64::INFINITY, f64::min),
        all.iter().copied().fold(0.0, f64::max),
    );
    assert!(
        bytes <= 1.25 * hi && bytes >= 0.75 * lo,
        "floor {bytes} beside the job's own peaks {lo}..{hi}"
    );
    // The three allocators agree on it within their accounting: nothing flagged.
    assert_eq!(floor["disputed"], false, "{floor}");
    for name in VARIANTS.split(',') {
        let sm = summary(doc, name);
        assert!(sm["floor_departure"].is_null(), "{name}: {sm}");
        let over = sm["peak_over_floor"]["median"]
            .as_f64()
            .expect("peak/floor");
        let peak = sm["peak_rss_bytes"]["median"].as_f64().unwrap();
        assert!(
            (over - peak / bytes).abs() < 1e-9,
            "{name}: {over} vs {peak}/{bytes}"
        );
        for f in [
            "live_at_peak_bytes",
            "held_at_peak_bytes",
            "held_over_live",
            "peak_live_bytes",
            "peak_over_floor",
        ] {
            assert!(
                sm["ratio_to_baseline"].get(f).is_none(),
                "{name}: a ratio to the baseline of {f}, taken at each variant's own moment"
            );
        }
    }
    let head = s
        .stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("glibc peaked at "))
        .unwrap_or_else(|| panic!("no headline against the floor:\n{}", s.stdout));
    assert!(
        head.contains("the most the program was seen to have live")
            && head.contains(&format!("a floor of {}", format_bytes(bytes)))
            && head.contains("a lower bound"),
        "{head}"
    );
    for bad in [
        "what the program has live at its peak",
        "fragmentation/retention, not live data",
        "counts each chunk with its header",
    ] {
        for (what, text) in [
            ("table", &s.stdout),
            ("markdown", &s.markdown),
            ("html", &s.html),
        ] {
            assert!(!text.contains(bad), "{what} says {bad:?}");
        }
    }
}

/// The figures a label stands for, by the words each renderer uses for it.
fn key_of(label: &str) -> Option<&'static str> {
    Some(match label {
        "peak RSS" => "peak_rss_bytes",
        "mean RSS" => "mean_rss_bytes",
        "wall" => "wall_seconds",
        "CPU" => "cpu_seconds",
        "peak live" => "peak_live_bytes",
        "peak/floor" => "peak_over_floor",
        "live at peak" => "live_at_peak_bytes",
        "held at peak" => "held_at_peak_bytes",
        "held/live" | "held/live at RSS peak" => "held_over_live",
        _ => return None,
    })
}

/// A figure's value as every renderer prints it.
fn shown(key: &str, v: f64) -> String {
    if key.ends_with("_bytes") {
        format_bytes(v)
    } else if key.ends_with("_seconds") {
        format_seconds(v)
    } else {
        format!("{v:.2}×")
    }
}

/// The value cells of a variant's row, by column label, from each renderer's table.
fn table_cells(s: &Shared, name: &str) -> Vec<(&'static str, &'static str, String)> {
    let mut out: Vec<(&'static str, String, String)> = Vec::new();
    // The terminal table: the header row and the first line of the variant's row.
    let split = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('│')
            .split('┆')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let lines: Vec<&str> = s.stdout.lines().collect();
    let head = lines
        .iter()
        .find(|l| l.starts_with("│ variant"))
        .map(|l| split(l))
        .expect("the table's header");
    let row = lines
        .iter()
        .find(|l| l.starts_with(&format!("│ {name} ")))
        .map(|l| split(l))
        .expect("the variant's row");
    for (h, c) in head.iter().zip(&row) {
        out.push(("table", h.clone(), c.clone()));
    }
    // Markdown: `| variant | runs ok | … |` and `| name | … |`.
    let md_split = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().replace("**", ""))
            .collect()
    };
    let md: Vec<&str> = s.markdown.lines().collect();
    let head = md
        .iter()
        .find(|l| l.starts_with("| variant |"))
        .map(|l| md_split(l))
        .expect("the Markdown header");
    let row = md
        .iter()
        .find(|l| l.starts_with(&format!("| {name} |")))
        .map(|l| md_split(l))
        .expect("the Markdown row");
    for (h, c) in head.iter().zip(&row) {
        out.push(("markdown", h.clone(), c.clone()));
    }
    // HTML: the figures table's headers and the variant's cells (the median comes first).
    let html = &s.html;
    let at = html
        .find("table class=\"figures\"")
        .expect("the figures table");
    let table = &html[at..at + html[at..].find("</table>").expect("its end")];
    let text = |cell: &str| -> String {
        let mut t = String::new();
        let mut tag = false;
        for ch in cell.chars() {
            match ch {
                '<' => tag = true,
                '>' => tag = false,
                _ if !tag => t.push(ch),
                _ => {}
            }
        }
        t.trim().to_string()
    };
    let heads: Vec<String> = table
        .split("<th")
        .skip(1)
        .map(|c| text(&format!("<th{}", &c[..c.find("</th>").unwrap_or(c.len())])))
        .collect();
    let row = table
        .split("<tr")
        .find(|r| r.contains(&format!("</span>{name}</td>")))
        .expect("the HTML row");
    let cells: Vec<String> = row
        .split("<td")
        .skip(1)
        .map(|c| {
            let c = &c[..c.find("</td>").unwrap_or(c.len())];
            // The first line of a cell: up to its first <br>.
            text(&format!("<td{}", &c[..c.find("<br").unwrap_or(c.len())]))
        })
        .collect();
    for (h, c) in heads.iter().zip(&cells) {
        out.push(("html", h.clone(), c.clone()));
    }
    out.into_iter()
        .filter_map(|(w, h, c)| Some((w, key_of(&h)?, c)))
        .collect()
}

/// Defect 3: a label means one computation wherever it appears — the terminal table, the
/// lines under it, Markdown, HTML, JSON and the CSV's runs — for every variant.
#[test]
fn every_renderer_gives_a_label_the_same_value() {
    let Some(s) = shared() else { return };
    let doc = &s.json;
    let mut checked = 0;
    for name in VARIANTS.split(',') {
        let sm = summary(doc, name);
        let json = |k: &str| sm[k]["median"].as_f64();
        // The tables.
        for (what, key, cell) in table_cells(s, name) {
            let Some(v) = json(key) else {
                assert!(
                    cell == "absent" || cell == "—",
                    "{what}: {name}'s {key} shows {cell:?} where the JSON has none"
                );
                continue;
            };
            let want = shown(key, v);
            assert!(
                cell == want || cell.starts_with(&format!("{want} ")),
                "{what}: {name}'s {key} is {cell:?}, the JSON's {want}"
            );
            checked += 1;
        }
        // The line under the table (terminal, Markdown, HTML): the state at the RSS peak.
        for (what, text) in [
            ("table", &s.stdout),
            ("markdown", &s.markdown),
            ("html", &s.html),
        ] {
            let start = text
                .find(&format!("{name}: at its"))
                .unwrap_or_else(|| panic!("{what}: no line for {name}'s state at its peak"));
            let line = &text[start..];
            let line = &line[..line.find(['\n', '<']).unwrap_or(line.len())];
            let (live, held, ratio) =
                parse_at_peak(line).unwrap_or_else(|| panic!("{what}: cannot read {line:?}"));
            for (label, got, key) in [
                ("live", &live, "live_at_peak_bytes"),
                ("held", &held, "held_at_peak_bytes"),
                ("held/live", &ratio, "held_over_live"),
            ] {
                let want = shown(key, json(key).expect(key));
                assert_eq!(
                    got, &want,
                    "{what}: {name}'s line says {label} {got}, its table {want}: {line}"
                );
                checked += 1;
            }
        }
        // The CSV: one row a run; a summary figure is the median of the runs' values.
        let mut rows = ::csv::Reader::from_reader(s.csv.as_bytes());
        let head = rows.headers().expect("CSV header").clone();
        let col = |k: &str| head.iter().position(|h| h == k);
        let runs: Vec<::csv::StringRecord> = rows
            .records()
            .map(|r| r.expect("a CSV row"))
            .filter(|r| {
                col("variant").map(|i| &r[i]) == Some(name) && &r[col("status").unwrap()] == "ok"
            })
            .collect();
        for key in [
            "peak_rss_bytes",
            "mean_rss_bytes",
            "live_at_peak_bytes",
            "held_at_peak_bytes",
            "held_over_live",
            "peak_live_bytes",
        ] {
            let Some(i) = col(key) else {
                panic!("the CSV has no {key} column");
            };
            let xs: Vec<f64> = runs.iter().filter_map(|r| r[i].parse().ok()).collect();
            let Some(want) = json(key) else { continue };
            let got = memtrial::analysis::stats::median(&xs);
            assert!(
                (got - want).abs() <= 1e-3 * want.abs().max(1.0),
                "CSV: {name}'s {key} runs {xs:?} have median {got}, the summary {want}"
            );
            checked += 1;
        }
    }
    // The headline: the baseline's peak over the floor, its peak and the floor, as the
    // table's peak/floor and peak RSS and the JSON's floor.
    let base = summary(doc, "glibc");
    let over = shown(
        "peak_over_floor",
        base["peak_over_floor"]["median"].as_f64().unwrap(),
    );
    let peak = format_bytes(base["peak_rss_bytes"]["median"].as_f64().unwrap());
    let floor = format_bytes(doc["floor"]["bytes"].as_f64().unwrap());
    for (what, text) in [
        ("table", &s.stdout),
        ("markdown", &s.markdown),
        ("html", &s.html),
    ] {
        assert!(
            text.contains(&format!(
                "glibc peaked at {over} the most the program was seen to have live ({peak} against a floor of {floor}"
            )),
            "{what}: the headline does not carry peak/floor {over}, peak RSS {peak}, floor {floor}"
        );
    }
    assert!(checked >= 60, "only {checked} values compared");
}

/// Live, held and held/live from a line "NAME: at its [RSS ]peak: X live, Y held by the
/// allocator (held/live Q×…" (or the older "X live vs Y held by the allocator (Q×)").
fn parse_at_peak(line: &str) -> Option<(String, String, String)> {
    let rest = &line[line.find("peak: ")? + "peak: ".len()..];
    let live_end = rest.find(" live")?;
    let live = rest[..live_end].to_string();
    let rest = rest[live_end + " live".len()..]
        .trim_start_matches(',')
        .trim_start_matches(" vs")
        .trim_start();
    let held_end = rest.find(" held by the allocator")?;
    let held = rest[..held_end].to_string();
    let rest = &rest[held_end..];
    let open = rest.find('(')? + 1;
    let inner = rest[open..].trim_start_matches("held/live ");
    let ratio = inner[..inner.find('×')? + '×'.len_utf8()].to_string();
    Some((live, held, ratio))
}
