//! Reports a person reads: the HTML in a real browser, `recommend`.

use std::process::Command;

use crate::common::*;

// ───────────── reports people look at (issue 5) ─────────────

#[test]
fn html_report_renders_in_headless_chromium() {
    if !need_allocators(&["jemalloc"]) {
        return;
    }
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if !require("chromium", "install with: apt-get install chromium", || {
        found.is_some()
    }) {
        return;
    }
    let Some(chromium) = found else { return };
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
    assert!(dom_text.contains("Verdict") && dom_text.contains("jemalloc"));
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
    );
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
            text.contains("No recommendation") || text.contains("Keep the baseline"),
            "{text}"
        );
    }
}
// ---------------------------------------------------------------------------
// memtrial inspect (issue 6): live processes, compared with their own reports.
// ---------------------------------------------------------------------------
