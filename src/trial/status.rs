//! How a run ended, decided from what was observed: a pure function, tested case by case.

use std::time::Duration;

use crate::backend::ExitKind;
use crate::linux::proc::signal_name;
use crate::record::{RunStatus, Verification};

/// Why memtrial ended the run itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndedBy {
    /// memtrial was interrupted (SIGINT, SIGTERM, SIGHUP, SIGQUIT).
    Interrupt,
    /// The run's time limit passed.
    Timeout(Duration),
    /// The driver's measured phase was over (a server after its load and cool-down).
    Driver,
    /// The run was stuck at its memory limit without an OOM kill ([`super::thrash`]).
    Thrashing(super::thrash::Thrashing),
}

/// What the driver made of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DriverOutcome {
    /// No driver: a batch run judged by its exit.
    None,
    /// The driven phase completed.
    Done,
    /// The driven phase could not complete: why.
    Failed(String),
    /// The driver stopped because memtrial ended the run first.
    Stopped,
    /// The driven phase ended early because the workload exited by itself (a service
    /// before its `--duration`): the run is judged by its exit; this note goes with it.
    Ended(String),
}

/// Everything the status depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    pub ended_by: Option<EndedBy>,
    /// The root's exit; `None` when memtrial lost track of it.
    pub exit: Option<ExitKind>,
    pub oom_kills: u64,
    pub verification: Verification,
    pub driver: DriverOutcome,
}

/// The run's status and, where it is not `ok`, why, in memtrial's words. Order matters:
/// an interrupt is never blamed on the workload; an OOM kill explains whatever followed
/// it; a timeout is memtrial's verdict; a failed driver outranks the exit memtrial
/// caused; a variant that did not take effect makes any figure meaningless.
pub(crate) fn decide(f: &Facts) -> (RunStatus, Option<String>) {
    if f.ended_by == Some(EndedBy::Interrupt) {
        return (RunStatus::Interrupted, None);
    }
    if f.oom_kills > 0 {
        let n = f.oom_kills;
        return (
            RunStatus::OomKilled,
            Some(format!(
                "OOM-killed: the kernel killed {n} process(es) at the memory limit"
            )),
        );
    }
    if let Some(EndedBy::Thrashing(t)) = f.ended_by {
        return (RunStatus::Failed, Some(t.message()));
    }
    if let Some(EndedBy::Timeout(limit)) = f.ended_by {
        return (
            RunStatus::Timeout,
            Some(format!(
                "timed out after {}",
                humantime::format_duration(limit)
            )),
        );
    }
    if let DriverOutcome::Failed(why) = &f.driver {
        return (RunStatus::Failed, Some(why.clone()));
    }
    if f.verification == Verification::NotEffective {
        return (RunStatus::VariantNotEffective, None);
    }
    if f.driver == DriverOutcome::Done || f.ended_by == Some(EndedBy::Driver) {
        return (RunStatus::Ok, None);
    }
    let note = match &f.driver {
        DriverOutcome::Ended(n) => Some(n.clone()),
        _ => None,
    };
    match f.exit {
        Some(ExitKind::Code(0)) => (RunStatus::Ok, note),
        Some(ExitKind::Code(c)) => (RunStatus::Failed, Some(format!("exited with code {c}"))),
        Some(ExitKind::Signal(s)) => (
            RunStatus::Failed,
            Some(format!("killed by signal {s} ({})", signal_name(s))),
        ),
        None => (
            RunStatus::Failed,
            Some("lost track of the workload's exit".into()),
        ),
    }
}

/// How the root ended, in a few words (for messages about servers).
pub(crate) fn exit_phrase(exit: Option<ExitKind>) -> String {
    match exit {
        Some(ExitKind::Code(c)) => format!("exit code {c}"),
        Some(ExitKind::Signal(s)) => format!("killed by {}", signal_name(s)),
        None => "no exit status".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            ended_by: None,
            exit: Some(ExitKind::Code(0)),
            oom_kills: 0,
            verification: Verification::Verified,
            driver: DriverOutcome::None,
        }
    }

    #[test]
    fn a_run_stuck_at_its_limit_failed_unless_the_kernel_killed_too() {
        let t = crate::trial::thrash::Thrashing {
            millis: 11_000,
            usage_bytes: 95 << 20,
            limit_bytes: 96 << 20,
            cpu_millis: 6_900,
            system_permille: 998,
            major_faults: 2333,
            usage_file: "memory.usage_in_bytes",
        };
        let f = Facts {
            ended_by: Some(EndedBy::Thrashing(t)),
            exit: Some(ExitKind::Signal(9)),
            ..facts()
        };
        let (status, message) = decide(&f);
        assert_eq!(status, RunStatus::Failed);
        let m = message.unwrap_or_default();
        assert!(
            m.starts_with("stuck at the memory limit, stopped by memtrial: for 11 s")
                && m.contains("95.0 MiB or more of its 96.0 MiB limit (memory.usage_in_bytes)")
                && m.contains("100% of their 6.9 s of CPU in the kernel, with 2333 major"),
            "{m}"
        );
        // An OOM kill the kernel counted explains the end first.
        let f = Facts { oom_kills: 1, ..f };
        assert_eq!(decide(&f).0, RunStatus::OomKilled);
    }

    #[test]
    fn a_clean_exit_is_ok() {
        assert_eq!(decide(&facts()), (RunStatus::Ok, None));
    }

    #[test]
    fn a_service_that_ended_early_is_judged_by_its_exit_with_a_note() {
        let f = Facts {
            driver: DriverOutcome::Ended("exited by itself".into()),
            ..facts()
        };
        assert_eq!(decide(&f), (RunStatus::Ok, Some("exited by itself".into())));
        let f = Facts {
            exit: Some(ExitKind::Code(2)),
            ..f
        };
        assert_eq!(decide(&f).0, RunStatus::Failed);
    }

    #[test]
    fn a_non_zero_exit_fails_with_its_code() {
        let f = Facts {
            exit: Some(ExitKind::Code(3)),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            (RunStatus::Failed, Some("exited with code 3".into()))
        );
    }

    #[test]
    fn a_crash_fails_with_the_signal_named() {
        let f = Facts {
            exit: Some(ExitKind::Signal(libc::SIGSEGV)),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            (
                RunStatus::Failed,
                Some("killed by signal 11 (SIGSEGV)".into())
            )
        );
    }

    #[test]
    fn a_lost_exit_is_a_failure_that_says_so() {
        let f = Facts {
            exit: None,
            ..facts()
        };
        assert_eq!(decide(&f).0, RunStatus::Failed);
        assert!(decide(&f).1.unwrap().contains("lost track"));
    }

    #[test]
    fn an_interrupt_outranks_everything() {
        let f = Facts {
            ended_by: Some(EndedBy::Interrupt),
            exit: Some(ExitKind::Signal(libc::SIGTERM)),
            oom_kills: 2,
            verification: Verification::NotEffective,
            driver: DriverOutcome::Failed("x".into()),
        };
        assert_eq!(decide(&f), (RunStatus::Interrupted, None));
    }

    #[test]
    fn an_oom_kill_explains_the_death() {
        let f = Facts {
            exit: Some(ExitKind::Signal(libc::SIGKILL)),
            oom_kills: 1,
            ..facts()
        };
        let (st, msg) = decide(&f);
        assert_eq!(st, RunStatus::OomKilled);
        assert!(msg.unwrap().contains("killed 1 process(es)"));
        // Also when the OOM kill led to a timeout or a driver failure.
        let f = Facts {
            ended_by: Some(EndedBy::Timeout(Duration::from_secs(1))),
            driver: DriverOutcome::Failed("server died".into()),
            ..f
        };
        assert_eq!(decide(&f).0, RunStatus::OomKilled);
        // The status name survives a round trip through its stored text.
        assert_eq!(
            RunStatus::parse(RunStatus::OomKilled.as_str()),
            Some(RunStatus::OomKilled)
        );
    }

    #[test]
    fn a_timeout_says_its_limit() {
        let f = Facts {
            ended_by: Some(EndedBy::Timeout(Duration::from_millis(1500))),
            exit: Some(ExitKind::Signal(libc::SIGTERM)),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            (RunStatus::Timeout, Some("timed out after 1s 500ms".into()))
        );
    }

    #[test]
    fn a_variant_not_effective_voids_a_clean_exit() {
        let f = Facts {
            verification: Verification::NotEffective,
            ..facts()
        };
        assert_eq!(decide(&f), (RunStatus::VariantNotEffective, None));
        // Unverified (nothing lived long enough) is not a verdict against the variant.
        let f = Facts {
            verification: Verification::Unverified,
            ..facts()
        };
        assert_eq!(decide(&f).0, RunStatus::Ok);
    }

    #[test]
    fn a_server_stopped_by_memtrial_after_its_load_is_ok() {
        let f = Facts {
            ended_by: Some(EndedBy::Driver),
            exit: Some(ExitKind::Signal(libc::SIGTERM)),
            driver: DriverOutcome::Done,
            ..facts()
        };
        assert_eq!(decide(&f), (RunStatus::Ok, None));
        // Even a server that exits non-zero on SIGTERM.
        let f = Facts {
            exit: Some(ExitKind::Code(143)),
            ..f
        };
        assert_eq!(decide(&f), (RunStatus::Ok, None));
    }

    #[test]
    fn a_failed_driver_fails_the_run_with_its_reason() {
        let f = Facts {
            ended_by: Some(EndedBy::Driver),
            driver: DriverOutcome::Failed("the server never became ready".into()),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            (
                RunStatus::Failed,
                Some("the server never became ready".into())
            )
        );
    }

    #[test]
    fn every_status_name_round_trips() {
        for st in [
            RunStatus::Ok,
            RunStatus::Failed,
            RunStatus::Timeout,
            RunStatus::VariantNotEffective,
            RunStatus::Interrupted,
            RunStatus::OomKilled,
        ] {
            assert_eq!(RunStatus::parse(st.as_str()), Some(st));
        }
        assert_eq!(RunStatus::parse("running"), None);
    }
}
