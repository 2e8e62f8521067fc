//! Reports a person reads: the HTML in a real browser, `recommend`.

use std::path::Path;
use std::process::Command;

use crate::common::*;

// ───────────── reports people look at (issue 5) ─────────────

/// The headless browser the HTML tests look with, or skipped with the reason.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    require("chromium", "install with: apt-get install chromium", || {
        found.is_some()
    })
    .then_some(found)
    .flatten()
}

#[test]
fn html_report_renders_in_headless_chromium() {
    if !need_allocators(&["jemalloc"]) {
        return;
    }
    let Some(chromium) = chromium() else { return };
    let mut args = vec![
        "run",
        "--runs",
        "3",
        "--variants",
        "glibc,jemalloc",
        "--seed",
        "2",
        "--html",
        "r.html",
        "--markdown",
        "r.md",
        "--samples-csv",
        "s.csv",
        "--",
    ];
    let cmd = fragment_cmd();
    args.extend(cmd.iter().map(String::as_str));
    let r = memtrial_in_tmp(&args);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let html = r.dir.path().join("r.html");
    let text = std::fs::read_to_string(&html).unwrap();
    for fetch in ["src=\"http", "href=\"http", "url(http", "<script", "<link"] {
        assert!(
            !text.contains(fetch),
            "nothing is fetched at view time: found {fetch}"
        );
    }
    let profile = r.dir.path().join("chromium-profile");
    let browse = |extra: &[&str]| {
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(format!("file://{}", html.display()))
            .output()
            .unwrap()
    };
    let dom = browse(&["--dump-dom"]);
    assert!(dom.status.success());
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(!log.contains("CONSOLE"), "console messages: {log}");
    assert!(dom_text.matches("<svg").count() >= 3, "charts in the page");
    assert!(dom_text.contains(r#"class="verdict"#) && dom_text.contains("jemalloc"));
    let png = r.dir.path().join("shot.png");
    let shot = browse(&[
        "--hide-scrollbars",
        "--window-size=1150,1400",
        &format!("--screenshot={}", png.display()),
    ]);
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    assert!(
        std::fs::metadata(&png).unwrap().len() > 20_000,
        "a real picture"
    );
    // The Markdown and the samples CSV are there too.
    let md = std::fs::read_to_string(r.dir.path().join("r.md")).unwrap();
    assert!(
        md.contains("| variant | runs ok |") && md.contains("| jemalloc | 3/3 |"),
        "{md}"
    );
    let csv = std::fs::read_to_string(r.dir.path().join("s.csv")).unwrap();
    assert!(csv.lines().count() > 6 * 5, "every sample of 6 runs");
    assert!(
        r.stdout().contains("Use ")
            || r.stdout().contains("No recommendation")
            || r.stdout().contains("Keep the baseline")
            || r.stdout().contains("Undecided: ")
    );
}

// ───────────── the answer first, pictures of what was measured (issue 37) ─────────────

/// A duration as `units::format_seconds` writes it ("200 ms", "1.25 s", "3.5 min").
fn seconds(words: &str) -> Option<f64> {
    let (n, unit) = words.trim().split_once(' ')?;
    let n: f64 = n.parse().ok()?;
    match unit.trim_end_matches(['.', ',', ':']) {
        "ms" => Some(n / 1000.0),
        "s" => Some(n),
        "min" => Some(n * 60.0),
        _ => None,
    }
}

/// Each chart over time of an HTML report: its SVG and the longest gap its caption says a
/// line joins across (the largest, when it names several), or `None` when it draws reads
/// as dots never joined.
fn charts_over_time(html: &str) -> Vec<(String, Option<f64>)> {
    html.split(r#"<figure class="chart">"#)
        .skip(1)
        .filter_map(|f| {
            let f = &f[..f.find("</figure>")?];
            let (svg, caption) = f.split_at(f.find("</svg>")?);
            if !svg.contains("seconds since start") {
                return None;
            }
            let limit = caption
                .split("longer than ")
                .skip(1)
                .filter_map(|rest| {
                    // "… longer than 500 ms: 5, …" or "no gap longer than 200 ms. …"
                    let head = rest.split(':').next().unwrap_or("");
                    let head = head.split(". ").next().unwrap_or(head);
                    seconds(head.trim_end_matches('.'))
                })
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
            Some((svg.to_string(), limit))
        })
        .collect()
}

/// `memtrial demo`, as a new user runs it: one screen of answer on the terminal (the
/// recommendation, the baseline's story, where the rest is), and an HTML report that opens
/// on the verdict and the overview, never scrolls sideways at 1280 px, and whose charts
/// join no two samples further apart than their captions say. Screenshots are taken the
/// way scripts/screenshots.sh takes the ones in docs/.
#[test]
fn the_demo_answers_in_one_screen_and_draws_only_what_was_measured() {
    if !need_python3() {
        return;
    }
    let Some(_) = chromium() else { return };
    let r = memtrial_in_tmp(&["demo", "--runs", "1"]);
    assert!(matches!(r.code(), 0 | 1), "{}", r.explain());
    let (out, err) = (r.stdout(), r.stderr());
    let progress = |l: &&str| l.starts_with('[') && l.contains("] ");
    let said: Vec<&str> = out
        .lines()
        .chain(err.lines())
        .filter(|l| !progress(l))
        .collect();
    assert!(
        said.len() <= 25,
        "{} lines besides progress:\n{}",
        said.len(),
        said.join("\n")
    );
    assert!(
        out.lines().any(|l| l.starts_with("Use ")
            || l.starts_with("No recommendation")
            || l.starts_with("Keep the baseline")
            || l.contains("undecided")),
        "the recommendation, or why there is none: {out}"
    );
    assert!(
        out.contains("the rest: memtrial report 1 --detail (")
            && out.contains("; charts: memtrial-demo.html"),
        "{out}"
    );
    let html = std::fs::read_to_string(r.dir.path().join("memtrial-demo.html")).unwrap();
    // The baseline's story is the same sentence on the terminal and on the page.
    if let Some(story) = html.split(r#"<p class="story">"#).nth(1) {
        let story = story.split("</p>").next().unwrap_or("");
        let plain = story
            .replace("&gt;", ">")
            .replace("&lt;", "<")
            .replace("&amp;", "&");
        assert!(
            out.contains(&plain),
            "the story {plain:?} on the terminal: {out}"
        );
    }
    // The page opens on the verdict and the overview picture.
    let verdict = html.find(r#"<div class="verdict"#).expect("a verdict");
    let overview = html
        .find(r#"<div id="overview">"#)
        .expect("an overview picture");
    let first_h2 = html.find("<h2").expect("sections");
    assert!(
        verdict < overview && overview < first_h2,
        "the answer first"
    );
    // No line across a gap longer than its chart's stated limit.
    let charts = charts_over_time(&html);
    assert!(charts.len() >= 6, "the charts over time: {}", charts.len());
    for (svg, limit) in &charts {
        let px = svg_check::pixel(svg).expect("a time axis");
        match limit {
            Some(limit) => {
                if let Some((step, stroke)) = svg_check::widest_step(svg, |_| true) {
                    assert!(
                        step <= limit + px,
                        "a {stroke} line across {step:.3} s, its limit {limit} s"
                    );
                }
            }
            None => assert!(
                svg_check::lines(svg).is_empty(),
                "reads drawn as dots only: {:?} in {}",
                svg_check::lines(svg),
                &svg[..svg.len().min(1500)]
            ),
        }
    }
    // In a browser 1280 px wide: nothing scrolls sideways; the pictures of docs/.
    let shots = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/html_shots.py"))
        .arg("memtrial-demo.html")
        .args(["--width", "1280", "--height", "1000"])
        .args(["--top", "top.png", "--element", "#inside", "inside.png"])
        .current_dir(r.dir.path())
        .output()
        .unwrap();
    assert!(
        shots.status.success(),
        "{}",
        String::from_utf8_lossy(&shots.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&shots.stdout).expect("its JSON");
    assert!(
        seen["page_width"].as_u64().unwrap_or(u64::MAX) <= 1280,
        "{seen}"
    );
    assert_eq!(seen["sideways"], serde_json::json!([]), "{seen}");
    for png in ["top.png", "inside.png"] {
        let size = std::fs::metadata(r.dir.path().join(png)).map_or(0, |m| m.len());
        assert!(size > 20_000, "{png}: a real picture ({size} bytes)");
    }
    // --quiet leaves the answer alone on standard output.
    let quiet = Command::new(memtrial())
        .args(["--quiet", "report"])
        .current_dir(r.dir.path())
        .output()
        .unwrap();
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    assert!(String::from_utf8_lossy(&quiet.stdout).starts_with("experiment 1 · "));
}

#[test]
fn recommend_says_what_to_do_and_how() {
    if !need_allocators(&["tcmalloc"]) {
        return;
    }
    let mut args = vec![
        "run",
        "--runs",
        "3",
        "--variants",
        "glibc,tcmalloc",
        "--seed",
        "4",
        "--",
    ];
    let cmd = fragment_cmd();
    args.extend(cmd.iter().map(String::as_str));
    let r = memtrial_in_tmp(&args);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = Command::new(memtrial())
        .args(["recommend"])
        .current_dir(r.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("Pareto front"), "{text}");
    if text.contains("Use tcmalloc") {
        assert!(
            text.contains("ENV LD_PRELOAD=") && text.contains("libtcmalloc-minimal4"),
            "{text}"
        );
        assert!(text.contains("- name: LD_PRELOAD"), "{text}");
    } else {
        assert!(
            text.contains("No recommendation")
                || text.contains("Keep the baseline")
                || (text.contains("Undecided: ") && text.contains("would likely tell")),
            "{text}"
        );
    }
}
// ---------------------------------------------------------------------------
// memtrial inspect (issue 6): live processes, compared with their own reports.
// ---------------------------------------------------------------------------
