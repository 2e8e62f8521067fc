//! The require probe on Debian's Rails: `require "rails/all"` as a tree of requires with
//! the resident bytes each added, matching the program's own measure of its boot; objects
//! per gem; glibc against jemalloc; and a program that is no Ruby says why it has none.

use std::process::Command;

use memtrial::record::RunRecord;

use crate::common::*;

const MIB: u64 = 1 << 20;

fn need_rails() -> bool {
    require(
        "Rails (ruby -e 'require \"rails/all\"')",
        "apt-get install ruby-rails",
        || {
            Command::new("ruby")
                .args(["-e", "require 'rails/all'"])
                .output()
                .is_ok_and(|o| o.status.success())
        },
    )
}

/// Boots Rails and prints the resident bytes the require added, read from statm around it
/// as the program's own measure.
const BOOT: &str = "rss = -> { File.read('/proc/self/statm').split[1].to_i * 4096 }
before = rss.call
require 'rails/all'
puts \"boot grew #{rss.call - before}\"";

fn own_growth(doc: &serde_json::Value, name: &str, i: usize) -> u64 {
    let log = std::fs::read_to_string(typed_run(doc, name, i).stdout_path).unwrap();
    log.lines()
        .find_map(|l| l.strip_prefix("boot grew "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{log}"))
}

/// The objects `require "rails/all"` allocates in a Ruby without the probe.
fn uninstrumented_objects() -> u64 {
    let o = Command::new("ruby")
        .args([
            "-e",
            "a = GC.stat(:total_allocated_objects); require 'rails/all'; \
             puts GC.stat(:total_allocated_objects) - a",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

#[test]
fn rails_boot_is_a_tree_of_requires_with_what_each_added() {
    if !(need_rails() && need_file("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "libjemalloc2")) {
        return;
    }
    let objects = uninstrumented_objects();
    let r = run_json(
        2,
        "glibc,jemalloc",
        &[
            "--probe",
            "require",
            "--require-cut-off",
            "1MiB",
            "--html",
            "out.html",
        ],
        &["ruby", "-e", BOOT],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    validate_schema(&doc, "experiment-v4.schema.json");
    for name in ["glibc", "jemalloc"] {
        let runs: Vec<RunRecord> = typed_runs(&doc, name);
        for (i, run) in runs.iter().enumerate() {
            let t = run
                .inside
                .requires
                .as_ref()
                .unwrap_or_else(|| panic!("no tree: {:?}", run.inside.absent));
            // One top-level require: rails/all, the boot; its growth is the program's own
            // measure of the same require within a few percent (the probe's own objects
            // and statm reads are inside it).
            let top: Vec<_> = t.nodes.iter().filter(|n| n.depth == 0).collect();
            assert_eq!(
                top.len(),
                1,
                "{:?}",
                top.iter().map(|n| &n.name).collect::<Vec<_>>()
            );
            assert_eq!(top[0].name, "rails/all");
            assert_eq!(top[0].gem, "railties");
            // Its objects, the probe's own taken out, are the uninstrumented boot's within
            // 5% (seen 2% under).
            assert!(
                top[0].objects.abs_diff(objects) as f64 <= 0.05 * objects as f64,
                "the probe counts {}, a Ruby without it {objects}",
                top[0].objects
            );
            let probe = top[0].rss_after_bytes - top[0].rss_before_bytes;
            let own = own_growth(&doc, name, i);
            assert!(own > 20 * MIB, "Rails adds tens of MiB: {own}");
            assert!(
                probe.abs_diff(own) as f64 <= 0.05 * own as f64,
                "{name}: the probe saw {probe}, the program {own}"
            );
            // Rails itself is in it, with its requirers, and the nodes nest.
            let rails = t.nodes.iter().find(|n| n.name == "rails" && n.depth == 1);
            let rails = rails.unwrap_or_else(|| panic!("no rails node"));
            assert!(!rails.also.is_empty(), "{rails:?}");
            assert!(t.nodes.iter().any(|n| n.gem == "activesupport"));
            assert!(t.nodes.len() > 500, "{}", t.nodes.len());
            assert!(t.nodes.windows(2).all(|w| w[1].depth <= w[0].depth + 1));
            // A node's children take no longer than it did (its own code is the rest; 1 µs a
            // child for the rounding of their times) and, under glibc, add no more RSS.
            // jemalloc returns dirty pages on its own clock (its decay), so a require can
            // end with less resident than its children added: no invariant there.
            for (k, n) in t.nodes.iter().enumerate() {
                let kids: Vec<_> = t.nodes[k + 1..]
                    .iter()
                    .take_while(|c| c.depth > n.depth)
                    .filter(|c| c.depth == n.depth + 1)
                    .collect();
                let seconds: f64 = kids.iter().map(|c| c.seconds).sum();
                assert!(
                    seconds <= n.seconds + 1e-6 * kids.len() as f64,
                    "{name}: the children of {} (depth {}) took {seconds} s, it took {} s",
                    n.name,
                    n.depth,
                    n.seconds
                );
                if name != "glibc" {
                    continue;
                }
                let added: u64 = kids
                    .iter()
                    .map(|c| c.rss_after_bytes.saturating_sub(c.rss_before_bytes))
                    .sum();
                let own = n.rss_after_bytes.saturating_sub(n.rss_before_bytes);
                assert!(
                    added <= own + 64 * 4096,
                    "{name}: the children of {} (depth {}) add {added} bytes, it added {own}",
                    n.name,
                    n.depth
                );
            }
        }
    }
    let text = r.stdout();
    assert!(
        text.contains("what does each require cost?")
            && text.contains("requires under 1.0 MiB left out"),
        "{text}"
    );
    assert!(
        text.contains("glibc: TOP ") && text.contains("  rails/all: "),
        "{text}"
    );
    assert!(
        text.contains("objects allocated per gem while loading") && text.contains("activesupport "),
        "{text}"
    );
    assert!(text.contains("jemalloc against glibc: TOP "), "{text}");
    // The HTML folds each require's own requires under it.
    let html = std::fs::read_to_string(r.dir.path().join("out.html")).unwrap();
    assert!(
        html.contains("<details class=\"requires\"><summary>glibc: TOP ")
            && html.contains("<summary>rails/all: "),
        "no collapsible require tree in the HTML"
    );
}

#[test]
fn a_program_that_is_no_ruby_says_why_it_has_no_requires() {
    let r = run_json(1, "glibc", &["--probe", "require"], &["/bin/sleep", "0.2"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let run = typed_runs(&r.json(), "glibc").into_iter().next().unwrap();
    assert!(run.inside.requires.is_none());
    let why = run.inside.absence("require").expect("an absence");
    assert!(why.contains("no Ruby process wrote its requires"), "{why}");
}

#[test]
fn a_cut_off_without_the_require_probe_or_of_no_size_is_refused_by_name() {
    for (args, says) in [
        (&["--require-cut-off", "1MiB"][..], "add --probe require"),
        (
            &["--probe", "require", "--require-cut-off", "lots"][..],
            "'lots' is not a size",
        ),
    ] {
        let r = run_json(1, "glibc", args, &["/bin/true"]);
        assert_eq!(r.code(), 2, "{}", r.explain());
        assert!(
            r.stderr().contains("--require-cut-off") && r.stderr().contains(says),
            "{}",
            r.stderr()
        );
    }
}
