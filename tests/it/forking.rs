//! Forking servers (issue 11): several processes at once, measured without counting shared
//! pages once per process. Every worker verified; PSS and USS summed over the tree.

use std::path::Path;

use crate::common::*;

/// Every measured run of a variant (warm-ups left out).
fn runs(doc: &serde_json::Value, variant: &str) -> Vec<RunRecord> {
    let mut runs = typed_runs(doc, variant);
    runs.retain(|r| !r.warmup);
    runs
}

/// A parent and three children share 64 MiB copy-on-write for 5 s: the RSS sum counts it four
/// times, PSS once (each process holds a quarter), USS is only the private pages.
#[test]
fn shared_copy_on_write_pages_count_once_in_pss() {
    if !need_c_compiler() {
        return;
    }
    let cow = fixture("cow");
    let r = run_json(1, "glibc", &[], &[cow.to_str().unwrap(), "64", "3", "5"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.processes_at_once(), 4, "{run:?}");
    let mib = |v: Option<u64>| v.unwrap() as f64 / (1 << 20) as f64;
    // Each PSS read (a few per run, within a CPU budget) against the sample it is attached
    // to: with the region shared by every process alive, PSS ≈ the RSS sum / processes —
    // checked on the read with the most processes alive (a read at the end may find a
    // child gone, and is then checked against the processes it saw).
    let at = run
        .samples
        .iter()
        .filter(|s| s.pss_bytes.is_some() && s.processes >= 2)
        .max_by_key(|s| (s.processes, s.pss_bytes))
        .expect("PSS was read while the children lived");
    let n = at.processes as f64;
    let (rss, pss, uss) = (
        mib(Some(at.rss_bytes)),
        mib(at.pss_bytes),
        mib(at.uss_bytes),
    );
    assert!(
        rss > n * 64.0,
        "the RSS sum counts the region once per process ({n}): {rss}"
    );
    let share = rss / n;
    assert!(
        pss > 0.9 * share && pss < 1.25 * share,
        "PSS {pss:.1} MiB ≈ RSS sum / {n} = {share:.1} MiB"
    );
    assert!(uss < 16.0, "USS is the private pages only: {uss:.1} MiB");
    // The peaks: PSS is the region once; USS peaks before the fork, when the parent
    // alone held the region privately.
    let (pss, uss) = (mib(run.peak_pss_bytes), mib(run.peak_uss_bytes));
    assert!((64.0..80.0).contains(&pss), "peak PSS {pss:.1} MiB");
    assert!(uss <= pss, "peak USS {uss:.1} MiB, at most peak PSS");
    let summary = summary(&doc, "glibc");
    assert!(summary["peak_pss_bytes"]["median"].is_number(), "{summary}");
    assert!(summary["peak_uss_bytes"]["median"].is_number(), "{summary}");
    // The table shows both beside peak RSS, with the legend.
    let table = r.stdout() + &r.stderr();
    assert!(
        table.contains("peak PSS") && table.contains("peak USS"),
        "{table}"
    );
    assert!(table.contains("once per process"), "{table}");
}

/// puma in cluster mode (a master and two workers) under glibc and jemalloc: every
/// process carries the variant, the PSS sum is below the RSS sum, figures reported.
#[test]
fn puma_cluster_mode_every_worker_verified_pss_below_rss() {
    if !(need_program("puma", "puma ruby-rack") && need_allocators(&["jemalloc"])) {
        return;
    }
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/forking.ru");
    let r = run_json(
        1,
        "glibc,jemalloc",
        &[
            "--url",
            "http://127.0.0.1:{port}/",
            "--duration",
            "2s",
            "--cooldown",
            "500ms",
            "--connections",
            "4",
            "--ready-timeout",
            "30s",
        ],
        &[
            "puma",
            "-w",
            "2",
            "-t",
            "2:2",
            "-b",
            "tcp://127.0.0.1:{port}",
            app.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let mut pss_everywhere = true;
    for v in ["glibc", "jemalloc"] {
        for run in runs(&doc, v) {
            assert_eq!(run.status, RunStatus::Ok, "{v}: {run:?}");
            assert!(run.verification.ok(), "{v}: {}", run.verification_detail);
            assert!(load_of(&run).requests > 10, "{v}: {run:?}");
            assert!(run.processes_seen >= 3, "{v}: {run:?}");
            assert!(
                run.processes_at_once() >= 3,
                "{v}: master + 2 workers: {run:?}"
            );
            let (rss, pss, uss) = (
                run.peak_rss_bytes,
                run.peak_pss_bytes.expect("PSS read"),
                run.peak_uss_bytes.expect("USS read"),
            );
            assert!(pss < rss, "{v}: PSS sum {pss} below the RSS sum {rss}");
            assert!(uss <= pss, "{v}: USS {uss} at most PSS {pss}");
            eprintln!(
                "{v}: peak RSS sum {} MiB, peak PSS {} MiB, peak USS {} MiB",
                rss >> 20,
                pss >> 20,
                uss >> 20
            );
        }
        let summary = summary(&doc, v);
        assert!(
            summary["peak_rss_bytes"]["median"].is_number(),
            "{v}: {summary}"
        );
        // Peak PSS and USS come from reads spaced by their CPU budget: shown when a read
        // lies at the memory peak, else absent with why (docs/methodology.md).
        for f in ["peak_pss_bytes", "peak_uss_bytes"] {
            let shown = summary[f]["median"].is_number();
            let why = &summary["evidence"][f]["absent"]["reason"];
            assert!(shown || why.is_string(), "{v} {f}: {summary}");
            pss_everywhere &= shown;
        }
    }
    // jemalloc: every process (master and both workers) has the preload mapped.
    let je = first_run(&doc, "jemalloc");
    assert_eq!(je.verification, Verification::Verified, "{je:?}");
    let detail = &je.verification_detail;
    let checked: u32 = detail
        .split_once(" processes carry it")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(1);
    assert!(checked >= 3, "master and both workers checked: {detail}");
    assert_eq!(je.allocator_detected, "jemalloc");
    // Three processes throughout: they share; PSS is weighed where it stands everywhere.
    assert_eq!(doc["sharing"]["kind"], "shared", "{}", doc["sharing"]);
    let weighed = if pss_everywhere {
        "peak_pss_bytes"
    } else {
        "peak_rss_bytes"
    };
    assert_eq!(doc["recommendation"]["memory_figure"], weighed);
    let table = r.stdout() + &r.stderr();
    assert!(table.contains("peak PSS"), "{table}");
}
