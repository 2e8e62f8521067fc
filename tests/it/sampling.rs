//! Sampling that serves short runs without flags, and an observer that stays out of the
//! peak (issue 18): real C programs, real allocators, the real kernel's high-water marks.

use serde_json::Value;

use crate::common::*;
use memtrial::record::{AllocatorPoint, AllocatorView};

/// A run's allocator view (`None` when the probe saw nothing).
fn allocator(run: &RunRecord) -> Option<&AllocatorView> {
    run.inside.allocator.as_ref()
}

/// A run's allocator figures at its peak.
fn at_peak(run: &RunRecord) -> Option<&AllocatorPoint> {
    allocator(run).and_then(|a| a.at_peak.as_ref())
}

/// The at-peak allocator figures (live, held) of every ok run of `variant`, and the
/// longest gap between the allocator's samples within the first second of any run.
fn at_peak_figures(doc: &Value, variant_name: &str) -> (Vec<f64>, Vec<f64>, f64) {
    let (mut live, mut held, mut gap) = (Vec::new(), Vec::new(), 0.0f64);
    for r in typed_runs(doc, variant_name) {
        assert_eq!(r.status, RunStatus::Ok, "{r:?}");
        let peak = at_peak(&r);
        live.push(peak.and_then(|p| p.live_bytes).unwrap_or(0) as f64);
        held.push(peak.and_then(|p| p.held_bytes).unwrap_or(0) as f64);
        let t: Vec<f64> = allocator(&r)
            .into_iter()
            .flat_map(|a| &a.series)
            .map(|p| p.t_seconds)
            .collect();
        // Within the dense first second (after it the gaps grow by design: a job slowed
        // down by a busy machine outlives its second).
        gap = t
            .windows(2)
            .filter(|w| w[1] <= 1.0)
            .map(|w| w[1] - w[0])
            .fold(gap, f64::max);
    }
    (live, held, gap)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn peak_threads_run(extra: &[&str]) -> Run {
    let job = fixture("peak_threads").display().to_string();
    run_json(3, "glibc", extra, &[&job])
}

/// A ~1 s job of 8 threads whose heap peaks mid-run: at the default probe interval its
/// at-peak live and held bytes are within 10% of the same job sampled every 10 ms, and its
/// allocator samples in the first second are denser than a second apart (10 ms apart on an
/// idle machine; a busy one delays the sampling thread; before, a second apart).
#[test]
fn a_one_second_threaded_job_gets_its_allocator_peak_without_flags() {
    if !need_c_compiler() {
        return;
    }
    let plain = peak_threads_run(&[]);
    assert_eq!(plain.code(), 0, "{}", plain.explain());
    let dense = peak_threads_run(&["--probe-interval", "10ms"]);
    assert_eq!(dense.code(), 0, "{}", dense.explain());
    let (live, held, gap) = at_peak_figures(&plain.json(), "glibc");
    let (dense_live, dense_held, _) = at_peak_figures(&dense.json(), "glibc");
    let (live, held) = (median(live), median(held));
    let (dense_live, dense_held) = (median(dense_live), median(dense_held));
    // 8 threads × 8 MiB live at the peak.
    assert!(dense_live > 48.0 * 1048576.0, "dense live {dense_live}");
    assert!(
        (live / dense_live - 1.0).abs() < 0.10,
        "live at peak {live} vs {dense_live} sampled every 10 ms"
    );
    assert!(
        (held / dense_held - 1.0).abs() < 0.10,
        "held at peak {held} vs {dense_held} sampled every 10 ms"
    );
    // Denser than the old interval of 1 s, whatever the machine does to the sampling
    // thread: in the suite's parallel phase, beside its other tests' workloads, it was
    // delayed 0.62 s once (issue 48); 10 ms apart on an idle machine.
    assert!(
        gap < 0.9,
        "a gap of {gap} s between allocator samples in the first second"
    );
}

/// The live bytes of a variant's first run after `from` seconds, where its working set is
/// full: the samples before its first and after its last at half the most live or more are
/// left out (the fill at the start and the frees before exit, which a busy machine can
/// stretch past any fixed margin: one sample 0.3 s before exit read 141 KB of 44.8 MB).
fn live_after(doc: &Value, variant_name: &str, from: f64) -> Vec<f64> {
    let run = first_run(doc, variant_name);
    assert_eq!(run.status, RunStatus::Ok, "{variant_name}: {run:?}");
    let live: Vec<f64> = allocator(&run)
        .into_iter()
        .flat_map(|a| &a.series)
        .filter(|p| p.t_seconds >= from)
        .filter_map(|p| p.live_bytes)
        .map(|b| b as f64)
        .collect();
    let most = live.iter().copied().fold(0.0, f64::max);
    let full = |b: &f64| *b >= most / 2.0;
    match (live.iter().position(full), live.iter().rposition(full)) {
        (Some(a), Some(b)) => live[a..=b].to_vec(),
        _ => Vec::new(),
    }
}

/// 20 threads churning a bounded working set, each also freeing scratch blocks that
/// jemalloc keeps in its thread caches: jemalloc's live bytes are the program's (flat, and
/// within 5% of glibc's for the same job), not the program's plus its caches.
#[test]
fn jemalloc_live_bytes_leave_out_its_thread_caches() {
    if !need_c_compiler() || !need_allocators(&["jemalloc"]) {
        return;
    }
    let job = fixture("bounded").display().to_string();
    let r = run_json(1, "glibc,jemalloc", &[], &[&job, "20", "3"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let glibc = live_after(&doc, "glibc", 0.5);
    let je = live_after(&doc, "jemalloc", 0.5);
    assert!(glibc.len() >= 3 && je.len() >= 3, "{glibc:?} {je:?}");
    let (g, j) = (median(glibc), median(je.clone()));
    assert!(
        (j / g - 1.0).abs() < 0.05,
        "jemalloc live {j} vs glibc live {g} for the same job"
    );
    let cache = at_peak(&first_run(&doc, "jemalloc")).and_then(|p| p.thread_cache_bytes);
    let cache = cache.unwrap_or(0) as f64;
    assert!(
        cache > 0.0,
        "jemalloc's thread-cache bytes are reported apart"
    );
    // Flat: the samples' spread is well below what the caches would move it by, were they
    // counted in some samples and not in others. Not a fixed share of the level: jemalloc's
    // live bytes are its allocated count less its caches, read while 20 threads churn, and
    // beside two busy loops they spread 3.3-4.6% of 43 MiB (glibc's 1.4-2.4%), once 5.03%
    // beside the suite and a build, while its caches held 8-10 MiB.
    let (lo, hi) = je
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    assert!(
        hi - lo < cache / 2.0,
        "jemalloc live not flat: {lo} .. {hi}, its thread caches {cache}"
    );
}

/// A program that closes every descriptor (a daemon) and opens a file of its own gets the
/// lowest free numbers, the probe's report file's among them: the probe must notice and
/// never write its lines into the program's file (it reopens its own and goes on).
#[test]
fn the_probe_never_writes_into_a_file_of_the_program() {
    if !need_c_compiler() {
        return;
    }
    let prog = fixture("closes_fds").display().to_string();
    let r = run_json(1, "glibc", &[], &[&prog, "own.txt"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let own = std::fs::read_to_string(r.dir.path().join("own.txt")).unwrap_or_default();
    assert_eq!(own, "mine\n", "the program's file got foreign lines");
    let doc = r.json();
    let points = allocator(&first_run(&doc, "glibc")).map_or(0, |a| a.series.len());
    assert!(
        points > 50,
        "the probe went on sampling after the program closed its descriptors: {points} points"
    );
}
