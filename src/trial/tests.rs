//! The orchestration with the fake backend: no root, no real workload.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;
use crate::backend::fake::{FakeBackend, Script};
use crate::backend::ExitKind;
use crate::probe::{RunEnd, Tick};
use crate::record::{PeakSource, RunStatus, Verification};

fn plan() -> Plan {
    let mut p = crate::report::fixture::experiment().plan;
    p.interval_ms = 10;
    p.grace_ms = 100;
    p.timeout_ms = None;
    p.server = None;
    p
}

fn trial(backend: &FakeBackend, plan: &Plan, probes: Vec<Box<dyn Probe>>, stop: bool) -> RunRecord {
    let dir = tempfile::tempdir().unwrap();
    let spec = TrialSpec {
        plan,
        variant: &plan.variants[0],
        seq: 1,
        block: 2,
        warmup: false,
        log_stem: dir.path().join("001-x"),
        load_source: None,
    };
    let stop = AtomicBool::new(stop);
    run_trial(&spec, backend, probes, &stop, &mut |_| {}).unwrap()
}

/// A verifier that finds the variant missing.
struct NotEffective;
impl Probe for NotEffective {
    fn observe(&mut self, _tick: &Tick) {}
    fn finish(self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        record.verification = Verification::NotEffective;
        record.verification_detail = "pid 1 (x): MALLOC_ARENA_MAX missing".into();
    }
}

#[test]
fn a_normal_exit_is_ok_with_the_kernels_peak() {
    let b = FakeBackend::new(Script::default());
    let r = trial(&b, &plan(), vec![], false);
    assert_eq!(r.status, RunStatus::Ok, "{:?}", r.message);
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.peak_rss_bytes, 1 << 20);
    assert_eq!(r.peak_rss_source, PeakSource::Wait4Maxrss);
    assert!(
        r.wall_seconds >= 0.03 && r.wall_seconds < 1.0,
        "{}",
        r.wall_seconds
    );
    assert_eq!(
        (r.block, r.variant.as_str()),
        (2, plan().variants[0].name.as_str())
    );
    assert!(r.stdout_path.ends_with("001-x.stdout"));
    assert!(b.signals_sent().is_empty(), "nothing to stop");
}

#[test]
fn a_crash_is_a_failed_run_naming_the_signal() {
    let b = FakeBackend::new(Script {
        exit: ExitKind::Signal(libc::SIGSEGV),
        ..Script::default()
    });
    let r = trial(&b, &plan(), vec![], false);
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.signal, Some(libc::SIGSEGV));
    assert_eq!(r.exit_code, None);
    assert!(r.message.unwrap().contains("SIGSEGV"));
}

#[test]
fn a_program_that_cannot_start_is_a_failed_run() {
    let b = FakeBackend::new(Script {
        not_started: Some("could not start /nope: No such file".into()),
        ..Script::default()
    });
    let r = trial(&b, &plan(), vec![], false);
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.message.as_deref(),
        Some("could not start /nope: No such file")
    );
}

#[test]
fn a_timeout_stops_the_tree_with_sigterm() {
    let b = FakeBackend::new(Script {
        exits_after: None,
        ..Script::default()
    });
    let mut p = plan();
    p.timeout_ms = Some(50);
    let r = trial(&b, &p, vec![], false);
    assert_eq!(r.status, RunStatus::Timeout);
    assert_eq!(b.signals_sent(), vec![libc::SIGTERM]);
    assert_eq!(r.signal, Some(libc::SIGTERM));
    assert!(r.message.unwrap().contains("timed out after 50ms"));
}

#[test]
fn a_workload_ignoring_sigterm_gets_sigkill_after_the_grace() {
    let b = FakeBackend::new(Script {
        exits_after: None,
        obeys_sigterm: false,
        ..Script::default()
    });
    let mut p = plan();
    p.timeout_ms = Some(20);
    let r = trial(&b, &p, vec![], false);
    assert_eq!(r.status, RunStatus::Timeout);
    assert_eq!(b.signals_sent(), vec![libc::SIGTERM, libc::SIGKILL]);
    assert_eq!(r.signal, Some(libc::SIGKILL));
    assert!(
        r.wall_seconds >= 0.1,
        "the grace was given: {}",
        r.wall_seconds
    );
}

#[test]
fn an_interrupt_stops_the_run_and_says_so() {
    let b = FakeBackend::new(Script {
        exits_after: None,
        ..Script::default()
    });
    let r = trial(&b, &plan(), vec![], true);
    assert_eq!(r.status, RunStatus::Interrupted);
    assert_eq!(b.signals_sent(), vec![libc::SIGTERM]);
    assert_eq!(r.message, None);
}

#[test]
fn an_oom_kill_is_recorded_as_such() {
    let b = FakeBackend::new(Script {
        exit: ExitKind::Signal(libc::SIGKILL),
        oom_kills: Some(1),
        ..Script::default()
    });
    let r = trial(&b, &plan(), vec![], false);
    assert_eq!(r.status, RunStatus::OomKilled);
    assert_eq!(r.cgroup.as_ref().map(|c| c.oom_kills), Some(1));
    assert!(r.message.unwrap().starts_with("OOM-killed"));
}

/// In a container there is no cgroup of the run's own: the container's count, read at
/// launch and at the end, decides, and the message says where it was counted.
#[test]
fn an_oom_kill_counted_by_the_container_is_recorded_as_such() {
    let b = FakeBackend::new(Script {
        exit: ExitKind::Signal(libc::SIGKILL),
        oom_outside: Some((1, "the container's memory.oom_control".into())),
        ..Script::default()
    });
    let r = trial(&b, &plan(), vec![], false);
    assert_eq!(r.status, RunStatus::OomKilled);
    assert_eq!(r.cgroup, None);
    let m = r.message.unwrap();
    assert!(
        m.starts_with("OOM-killed") && m.contains("counted by the container's memory.oom_control"),
        "{m}"
    );
    // No kill counted during the run: a SIGKILL is a failure, not an OOM kill.
    let b = FakeBackend::new(Script {
        exit: ExitKind::Signal(libc::SIGKILL),
        oom_outside: Some((0, "the container's memory.oom_control".into())),
        ..Script::default()
    });
    let r = trial(&b, &plan(), vec![], false);
    assert_eq!(r.status, RunStatus::Failed);
}

#[test]
fn a_variant_that_did_not_take_effect_voids_the_run() {
    let b = FakeBackend::new(Script::default());
    let r = trial(&b, &plan(), vec![Box::new(NotEffective)], false);
    assert_eq!(r.status, RunStatus::VariantNotEffective);
    assert!(r.verification_detail.contains("MALLOC_ARENA_MAX"));
}

#[test]
fn probes_see_every_tick_and_finish_once() {
    use std::sync::{Arc, Mutex};
    struct Counting(Arc<Mutex<(u32, u32, u32)>>);
    impl Probe for Counting {
        fn observe(&mut self, tick: &Tick) {
            let mut c = self.0.lock().unwrap();
            match tick.kind {
                TickKind::Sample => c.0 += 1,
                TickKind::Look => c.1 += 1,
            }
        }
        fn finish(self: Box<Self>, end: &RunEnd, _record: &mut RunRecord) {
            assert_eq!(end.maxrss_bytes, Some(1 << 20));
            self.0.lock().unwrap().2 += 1;
        }
    }
    let seen = Arc::new(Mutex::new((0, 0, 0)));
    let b = FakeBackend::new(Script {
        exits_after: Some(Duration::from_millis(60)),
        ..Script::default()
    });
    trial(
        &b,
        &plan(),
        vec![Box::new(Counting(Arc::clone(&seen)))],
        false,
    );
    let (samples, looks, finished) = *seen.lock().unwrap();
    assert!(samples >= 3, "10 ms interval over 60 ms: {samples}");
    assert!(looks >= 4, "early looks and the look after exit: {looks}");
    assert_eq!(finished, 1);
}

#[test]
fn sampling_is_dense_for_a_second_then_backs_off_to_the_interval() {
    let ms = Duration::from_millis;
    let interval = ms(100);
    // Walk the clock as `watch` does: the times of the samples of a 5 s run.
    let (mut t, mut gap, mut times) = (Duration::ZERO, Duration::ZERO, Vec::new());
    while t < Duration::from_secs(5) {
        times.push(t);
        gap = super::sample_gap(gap, t, interval);
        t += gap;
    }
    let first_second = times
        .iter()
        .filter(|x| **x < Duration::from_secs(1))
        .count();
    assert_eq!(first_second, 100, "every 10 ms for the first second");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g >= ms(10) && *g <= interval),
        "{gaps:?}"
    );
    assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "gaps never shrink");
    assert_eq!(
        *gaps.last().unwrap(),
        interval,
        "back at the plan's interval"
    );
    // A plan denser than 10 ms stays as dense; a wider one reaches its own interval.
    assert_eq!(super::sample_gap(Duration::ZERO, ms(0), ms(5)), ms(5));
    let mut g = ms(10);
    for _ in 0..40 {
        g = super::sample_gap(g, Duration::from_secs(2), Duration::from_secs(30));
    }
    assert_eq!(g, Duration::from_secs(30));
}

#[test]
fn a_run_shorter_than_the_first_allocator_sample_leaves_the_probe_out_of_the_next() {
    let mut plan = plan();
    plan.probes.kinds = vec![crate::plan::ProbeKind::Allocator];
    let mut r = RunRecord::skeleton("glibc", 0, false, "now".into());
    r.wall_seconds = 0.004;
    let why = ended_before_allocator_sample(&plan, &r, 7).expect("left out next");
    assert!(
        why.starts_with("left out of this run: the variant's previous run (run 7) ended in 4 ms"),
        "{why}"
    );
    // Long enough for a sample, or figures after all, or no allocator probe planned: kept.
    r.wall_seconds = 0.2;
    assert_eq!(ended_before_allocator_sample(&plan, &r, 7), None);
    r.wall_seconds = 0.004;
    r.inside.allocator = Some(crate::record::AllocatorView {
        answered: "glibc".into(),
        library: "-".into(),
        processes: 1,
        interval_ms: 1000,
        disagreement: None,
        at_peak: None,
        peak_live_bytes: None,
        peak_held_bytes: None,
        series: Vec::new(),
        holes: None,
    });
    assert_eq!(ended_before_allocator_sample(&plan, &r, 7), None);
    r.inside.allocator = None;
    plan.probes.kinds.clear();
    assert_eq!(ended_before_allocator_sample(&plan, &r, 7), None);
}
