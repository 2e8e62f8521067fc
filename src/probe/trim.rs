//! A trimming variant (`trim:DURATION`): memtrial's probe library calls `malloc_trim(0)` on
//! the variant's schedule in every process of the run, from a thread of its own, and writes
//! what each call did to `<dir>/<pid>` (see `probe-shim/shim.c`). This probe puts the library
//! in the workload's preload (once, beside the allocator probe or without it), reads the
//! accounts, sums them into a [`TrimView`] and says whether the trimming took effect: a
//! process whose `malloc` is not glibc's trims nothing (`malloc_trim` is glibc's), and a
//! run that ended before the first call was due shows nothing either way.

use std::path::PathBuf;

use super::reports::{ProcessReports, ReportDir};
use super::{Probe, RunEnd, Tick, TickKind};
use crate::record::{RunRecord, TrimPoint, TrimView, Verification};

/// The probe's name, in records and messages.
pub const NAME: &str = "trim";

/// One process's trim account.
#[derive(Debug, Default)]
struct TrimFile {
    /// The allocator the library found answering `malloc` (empty before the header).
    allocator: String,
    calls: Vec<Call>,
    trims: u64,
    released: u64,
    returned: u64,
    largest: u64,
    cpu_ns: u64,
    longest_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Call {
    ns: u64,
    returned: u64,
    cpu_ns: u64,
}

/// At most this many calls of one process are kept as points (the sums count them all).
const CALLS_KEPT: usize = 4096;

impl ProcessReports for TrimFile {
    fn line(&mut self, line: &str) -> bool {
        if let Some(rest) = line.strip_prefix("# memtrial-trim 1 ") {
            let mut w = rest.split(' ');
            let _pid = w.next();
            if let Some(a) = w.next() {
                self.allocator = a.to_string();
            }
            return false;
        }
        let Some(c) = parse_call(line) else {
            return false;
        };
        self.trims += 1;
        self.released += u64::from(c.3);
        self.returned = self.returned.saturating_add(c.1.returned);
        self.largest = self.largest.max(c.1.returned);
        self.cpu_ns = self.cpu_ns.saturating_add(c.1.cpu_ns);
        self.longest_ns = self.longest_ns.max(c.2);
        if self.calls.len() < CALLS_KEPT {
            self.calls.push(c.1);
        }
        true
    }
}

/// One call's line: `<ns> <resident before> <resident after> <cpu ns> <wall ns> <released>`,
/// tab-separated: the call, its wall time, and whether glibc released memory.
fn parse_call(line: &str) -> Option<(u64, Call, u64, bool)> {
    let mut f = line.split('\t');
    let mut n = || f.next()?.parse::<u64>().ok();
    let (ns, before, after, cpu_ns, wall_ns, released) = (n()?, n()?, n()?, n()?, n()?, n()?);
    if f.next().is_some() || released > 1 {
        return None;
    }
    Some((
        ns,
        Call {
            ns,
            returned: before.saturating_sub(after),
            cpu_ns,
        },
        wall_ns,
        released == 1,
    ))
}

/// One call's line as (resident before, resident after, CPU ns, wall ns, released).
pub(crate) fn parse_trim_line(line: &str) -> Option<(u64, u64, u64, u64, bool)> {
    let mut f = line.split('\t');
    let mut n = || f.next()?.parse::<u64>().ok();
    let (_ns, before, after, cpu_ns, wall_ns, released) = (n()?, n()?, n()?, n()?, n()?, n()?);
    (released <= 1).then_some((before, after, cpu_ns, wall_ns, released == 1))
}

/// Reads the trim accounts of one run.
pub struct TrimProbe {
    reports: Result<ReportDir<TrimFile>, String>,
    interval_ms: u64,
    /// The run's start on `CLOCK_MONOTONIC`, in ns (learnt at the first tick).
    start_ns: Option<i128>,
    next_read: f64,
}

impl TrimProbe {
    /// Trims every `interval_ms`, accounts in `dir` (created here).
    pub fn new(dir: PathBuf, interval_ms: u64) -> TrimProbe {
        TrimProbe {
            reports: ReportDir::create(dir),
            interval_ms,
            start_ns: None,
            next_read: 0.0,
        }
    }

    fn view(&self, reports: &ReportDir<TrimFile>) -> TrimView {
        let glibc: Vec<&TrimFile> = reports
            .states()
            .filter(|f| f.allocator == "glibc")
            .collect();
        let start = self.start_ns.unwrap_or(0);
        let mut series: Vec<TrimPoint> = glibc
            .iter()
            .flat_map(|f| f.calls.iter())
            .map(|c| TrimPoint {
                t_seconds: ((c.ns as i128 - start) as f64 / 1e9).max(0.0),
                returned_bytes: c.returned,
                cpu_seconds: c.cpu_ns as f64 / 1e9,
            })
            .collect();
        series.sort_by(|a, b| a.t_seconds.total_cmp(&b.t_seconds));
        while series.len() > TrimView::SERIES_MAX {
            let mut i = 0;
            series.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
        TrimView {
            interval_ms: self.interval_ms,
            processes: glibc.len() as u32,
            trims: glibc.iter().map(|f| f.trims).sum(),
            released: glibc.iter().map(|f| f.released).sum(),
            returned_bytes: glibc.iter().map(|f| f.returned).sum(),
            largest_bytes: glibc.iter().map(|f| f.largest).max().unwrap_or(0),
            cpu_seconds: glibc.iter().map(|f| f.cpu_ns).sum::<u64>() as f64 / 1e9,
            longest_seconds: glibc.iter().map(|f| f.longest_ns).max().unwrap_or(0) as f64 / 1e9,
            series,
        }
    }
}

/// What the accounts say about the variant: `Err(why)` when the trimming did not take
/// effect, `Ok(None)` when nothing can be said (no call was due yet), `Ok(Some(what))`.
fn judge(
    reports: &ReportDir<TrimFile>,
    view: &TrimView,
    interval_ms: u64,
    run_seconds: f64,
) -> Result<Option<String>, String> {
    let every = crate::plan::trim_text(interval_ms);
    if let Some(other) = reports
        .states()
        .find(|f| !f.allocator.is_empty() && f.allocator != "glibc")
    {
        return Err(format!(
            "trim:{every}: malloc_trim is glibc's, and {} answers malloc in a process of the run: nothing was trimmed",
            other.allocator
        ));
    }
    if view.processes == 0 {
        if run_seconds * 1000.0 < crate::probe::allocator::FIRST_SAMPLE_MS as f64 * 5.0 {
            return Ok(None);
        }
        return Err(format!(
            "trim:{every}: no process started memtrial's trimming thread (a statically linked \
             program, a setuid one, or one that resets LD_PRELOAD)"
        ));
    }
    if view.trims == 0 {
        return Ok(None);
    }
    Ok(Some(format!(
        "trim:{every}: {} call(s) of malloc_trim(0) in {} process(es)",
        view.trims, view.processes
    )))
}

impl Probe for TrimProbe {
    fn instrument(&mut self, env: &mut Vec<(String, String)>) {
        let Ok(reports) = &self.reports else {
            return;
        };
        match super::allocator::shim_path() {
            Ok(lib) => {
                let lib = lib.display().to_string();
                // Once: the allocator probe may have put it there already.
                let there = env
                    .iter()
                    .any(|(k, v)| k == "LD_PRELOAD" && v.split([' ', ':']).any(|p| p == lib));
                if !there {
                    super::append_env(env, "LD_PRELOAD", &lib, ' ');
                }
                env.push(("MEMTRIAL_TRIM_MS".into(), self.interval_ms.to_string()));
                env.push((
                    "MEMTRIAL_TRIM_DIR".into(),
                    reports.dir().display().to_string(),
                ));
            }
            Err(why) => self.reports = Err(why),
        }
    }

    fn observe(&mut self, tick: &Tick) {
        if tick.kind != TickKind::Sample {
            return;
        }
        if self.start_ns.is_none() {
            self.start_ns = Some(tick.start_ns);
        }
        if tick.t_seconds < self.next_read {
            return;
        }
        self.next_read = tick.t_seconds + 1.0;
        if let Ok(r) = self.reports.as_mut() {
            r.read_new();
        }
    }

    fn finish(mut self: Box<Self>, end: &RunEnd, record: &mut RunRecord) {
        if let Ok(r) = self.reports.as_mut() {
            r.read_new();
        }
        let reports = match &self.reports {
            Ok(r) => r,
            Err(why) => {
                record.verification = Verification::NotEffective;
                record.verification_detail = format!("trim: {why}");
                return;
            }
        };
        let view = self.view(reports);
        let verdict = judge(reports, &view, self.interval_ms, end.t_seconds);
        match verdict {
            Err(why) => {
                record.verification = Verification::NotEffective;
                record.verification_detail = why;
            }
            Ok(what) if record.verification != Verification::NotEffective => {
                let (state, said) = match what {
                    Some(w) => (
                        // Trimming took effect; the rest of the variant keeps its own verdict.
                        match record.verification {
                            Verification::NothingToVerify | Verification::Unverified => {
                                Verification::Verified
                            }
                            v => v,
                        },
                        w,
                    ),
                    None => (
                        match record.verification {
                            Verification::Verified | Verification::NothingToVerify => {
                                Verification::SetNotVerifiable
                            }
                            v => v,
                        },
                        format!(
                            "trim:{}: set, not verifiable: the run ended before a call was due",
                            crate::plan::trim_text(self.interval_ms)
                        ),
                    ),
                };
                record.verification = state;
                record.verification_detail = match record.verification_detail.as_str() {
                    "" | "unchanged environment" | "no process lived long enough to be checked" => {
                        said
                    }
                    d => format!("{d}; {said}"),
                };
            }
            Ok(_) => {}
        }
        if view.processes > 0 {
            record.inside.trim = Some(view);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_summed_and_a_foreign_allocator_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("trim");
        let mut p = TrimProbe::new(dir.clone(), 1000);
        p.start_ns = Some(1_000_000_000);
        let glibc = "# memtrial-trim 1 7 glibc 1000\n\
             2000000000\t211722240\t15118336\t29343549\t53482044\t1\n\
             3000000000\t15118336\t15118336\t2289672\t6287435\t1\n\
             bad line\n";
        std::fs::write(dir.join("7"), glibc).unwrap();
        let r = p.reports.as_mut().unwrap();
        r.read_new();
        let r = p.reports.as_ref().unwrap();
        let v = p.view(r);
        assert_eq!((v.processes, v.trims, v.released), (1, 2, 2));
        assert_eq!(v.returned_bytes, 211722240 - 15118336);
        assert_eq!(v.largest_bytes, v.returned_bytes);
        assert!((v.cpu_seconds - 0.031633221).abs() < 1e-9);
        assert!((v.longest_seconds - 0.053482044).abs() < 1e-9);
        assert_eq!(v.series[0].t_seconds, 1.0);
        let what = judge(r, &v, 1000, 3.0).unwrap().unwrap();
        assert!(what.contains("2 call(s)"), "{what}");
        // A new run's probe starts without the last run's reports: they are written again.
        let mut p2 = TrimProbe::new(dir.clone(), 1000);
        assert!(!dir.join("7").exists());
        std::fs::write(dir.join("7"), glibc).unwrap();
        std::fs::write(dir.join("8"), "# memtrial-trim 1 8 jemalloc 1000\n").unwrap();
        p2.reports.as_mut().unwrap().read_new();
        let r2 = p2.reports.as_ref().unwrap();
        let why = judge(r2, &p2.view(r2), 1000, 3.0).unwrap_err();
        assert!(why.contains("jemalloc answers malloc"), "{why}");
    }

    #[test]
    fn nothing_due_is_not_verifiable_and_nothing_started_is_not_effective() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("trim");
        let mut p = TrimProbe::new(dir.clone(), 10_000);
        std::fs::write(dir.join("7"), "# memtrial-trim 1 7 glibc 10000\n").unwrap();
        p.reports.as_mut().unwrap().read_new();
        let r = p.reports.as_ref().unwrap();
        assert_eq!(judge(r, &p.view(r), 10_000, 2.0), Ok(None));
        let empty = TrimProbe::new(tmp.path().join("none"), 1000);
        let r = empty.reports.as_ref().unwrap();
        assert!(judge(r, &empty.view(r), 1000, 2.0)
            .unwrap_err()
            .contains("no process started"));
        assert_eq!(judge(r, &empty.view(r), 1000, 0.01), Ok(None));
        assert_eq!(parse_call("1\t2\t3\t4\t5\t2"), None);
    }
}
