//! The Ruby probe on real Ruby: `GC.stat` and YJIT's code sizes from inside the workload,
//! through RUBYOPT, next to the variant's own `RUBYOPT=--yjit` (still verified), and in a
//! forked child. The JSON report does not carry the inside view yet: read from the store.

use crate::common::*;
use memtrial::record::{FigureUnit, RunRecord, RuntimeView};

/// Allocates objects for ~2.5 s through a method called often enough for YJIT to compile.
const ALLOCATE: &str = "def f(i) = i.to_s * 2
a = []
t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 2.5
  2000.times { |i| a << f(i) }
  a.clear if a.size > 200_000
end";

/// The parent allocates, forks a child that lives ~2 s, and waits for it.
const FORK: &str = "a = Array.new(50_000) { |i| i.to_s }
pid = fork { b = Array.new(50_000) { |i| i.to_s }; sleep 2; b.size }
sleep 0.5
Process.wait(pid)
a.size";

/// The experiment's measured runs, from the database the run wrote.
fn runs(run: &Run) -> Vec<RunRecord> {
    let db = run.dir.path().join("memtrial.db");
    let store = memtrial::store::Store::open_existing(&db).expect("open the store");
    let id = store.latest_id().expect("an experiment");
    store.load(id).expect("load it").runs
}

fn run_of<'a>(runs: &'a [RunRecord], variant: &str) -> &'a RunRecord {
    runs.iter()
        .find(|r| r.variant == variant)
        .unwrap_or_else(|| panic!("no run of {variant}"))
}

fn ruby_view<'a>(r: &'a RunRecord, run: &Run) -> &'a RuntimeView {
    r.inside.runtime("ruby").unwrap_or_else(|| {
        panic!(
            "{}: no ruby view (absent: {:?})\n{}",
            r.variant,
            r.inside.absence("ruby"),
            run.explain()
        )
    })
}

fn figure(v: &RuntimeView, name: &str) -> f64 {
    v.figure(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", v.figures))
        .last
}

fn gc_figures_present(v: &RuntimeView) {
    assert!(figure(v, "heap_live_slots") > 0.0, "{v:?}");
    assert!(figure(v, "count") > 0.0, "{v:?}");
    assert!(figure(v, "total_allocated_objects") > 0.0, "{v:?}");
    assert_eq!(v.figure("heap_live_slots").unwrap().unit, FigureUnit::Count);
    assert_eq!(
        v.figure("malloc_increase_bytes").unwrap().unit,
        FigureUnit::Bytes
    );
    assert!(
        v.version.as_deref().is_some_and(|s| s.starts_with('3')),
        "{v:?}"
    );
    let live = v
        .series
        .iter()
        .find(|s| s.name == "heap_live_slots")
        .unwrap();
    assert!(live.points.len() >= 2, "{live:?}");
}

#[test]
fn ruby_probe_reads_gc_and_yjit_figures_and_keeps_the_variant_verified() {
    if !need_program("ruby", "ruby") {
        return;
    }
    let run = run_json(
        1,
        "glibc",
        &["--variant", "yjit=RUBYOPT=--yjit", "--probe", "ruby"],
        &["ruby", "-e", ALLOCATE],
    );
    assert_eq!(run.code(), 0, "{}", run.explain());
    let doc = run.json();
    let yjit = first_run(&doc, "yjit");
    assert_eq!(yjit.status, RunStatus::Ok, "{}", run.explain());
    assert_eq!(yjit.verification, Verification::Verified);
    let runs = runs(&run);

    let yjit = ruby_view(run_of(&runs, "yjit"), &run);
    gc_figures_present(yjit);
    let code = yjit
        .figures
        .iter()
        .filter(|f| f.name.ends_with("_code_size") || f.name == "code_region_size")
        .collect::<Vec<_>>();
    assert!(
        code.iter()
            .any(|f| f.last > 0.0 && f.unit == FigureUnit::Bytes),
        "no YJIT code size > 0 in {:?}",
        yjit.figures
    );
    assert_eq!(yjit.processes, 1);

    let glibc = ruby_view(run_of(&runs, "glibc"), &run);
    gc_figures_present(glibc);
    assert!(
        !glibc.figures.iter().any(|f| f.name.ends_with("_code_size")),
        "YJIT sizes without YJIT: {:?}",
        glibc.figures
    );
}

#[test]
fn ruby_probe_follows_a_forked_child() {
    if !need_program("ruby", "ruby") {
        return;
    }
    let run = run_json(1, "glibc", &["--probe", "ruby"], &["ruby", "-e", FORK]);
    assert_eq!(run.code(), 0, "{}", run.explain());
    let runs = runs(&run);
    let v = ruby_view(run_of(&runs, "glibc"), &run);
    assert!(v.processes >= 2, "{v:?}");
    gc_figures_present(v);
}

#[test]
fn ruby_probe_on_a_program_that_is_not_ruby_says_why() {
    let run = run_with(1, "glibc", &["--probe", "ruby"], &["sleep", "0.3"]);
    assert_eq!(run.code(), 0, "{}", run.explain());
    let runs = runs(&run);
    let r = run_of(&runs, "glibc");
    assert!(r.inside.runtime("ruby").is_none());
    let why = r.inside.absence("ruby").expect("an absence");
    assert!(why.starts_with("not a Ruby program"), "{why}");
}
