//! A worker trial's driver (`--driver CMD`) and a service's `--duration`.
//!
//! The driver is a shell command beside the workload (see [`crate::backend::helper`]): it
//! starts when the workload has started; its exit 0 ends the driven phase (memtrial then
//! stops the workload), a non-zero exit fails the run. On its stdout it may print:
//!
//! - `memtrial-figure NAME VALUE [UNIT]`: a figure of the run (`NAME` is `[a-z0-9_]+`, at
//!   most 64 characters; `VALUE` a finite number; `UNIT` one optional word). The last
//!   line for a name counts.
//! - `memtrial-ready`: the workload's start-up is over; the steady phase judged by the
//!   leak-or-fragmentation verdict starts here (otherwise at the driver's start).
//!
//! Every other line is kept in the run's `.driver.stdout` file and otherwise ignored. A
//! line is read up to [`MAX_LINE`] bytes; a longer one is cut there, not read, and said.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::status::{exit_phrase, DriverOutcome, EndedBy};
use crate::backend::helper::{self, Helper};
use crate::backend::ExitKind;
use crate::record::{DriverFigure, DriverFigures};

/// The first word of a figure line.
pub(crate) const FIGURE_WORD: &str = "memtrial-figure";
/// The line that ends the workload's start-up.
pub(crate) const READY_WORD: &str = "memtrial-ready";
/// Longest figure name.
pub(crate) const MAX_NAME: usize = 64;
/// Most ignored lines kept per run.
const MAX_IGNORED: usize = 5;
/// Longest line of a driver's stdout that memtrial reads (64 KiB): the rest of a longer
/// line is skipped, and said, so memtrial's memory stays bounded whatever a driver prints.
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// The next line of `r` without its newline: at most `max` bytes of it, with the whole
/// line's length in bytes (more than the bytes returned when the line was cut). `None`
/// at the end of the input.
pub fn read_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<(Vec<u8>, u64)>> {
    let mut line = Vec::new();
    let mut length: u64 = 0;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok((length > 0).then_some((line, length)));
        }
        let (chunk, newline) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        length += chunk.len() as u64;
        let used = chunk.len() + usize::from(newline);
        r.consume(used);
        if newline {
            return Ok(Some((line, length)));
        }
    }
}

/// What one line of a driver's stdout says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    Figure {
        name: String,
        value: f64,
        unit: Option<String>,
    },
    Ready,
    /// A line meant for memtrial that it cannot read: why.
    Bad(String),
    /// Anything else: the driver's own output.
    Other,
}

/// Reads one line of a driver's stdout.
pub(crate) fn parse_line(line: &str) -> Line {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.first() {
        Some(&READY_WORD) if words.len() == 1 => Line::Ready,
        Some(&FIGURE_WORD) => {
            let bad = |why: &str| Line::Bad(format!("{}: {why}", line.trim()));
            let (name, value, unit) = match words[1..] {
                [n, v] => (n, v, None),
                [n, v, u] => (n, v, Some(u)),
                _ => return bad("expected memtrial-figure NAME VALUE [UNIT]"),
            };
            if name.is_empty()
                || name.len() > MAX_NAME
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return bad("NAME must be 1 to 64 of a-z, 0-9 and _");
            }
            let value = match value.parse::<f64>() {
                Ok(v) if v.is_finite() => v,
                _ => return bad("VALUE must be a finite number"),
            };
            if let Some(u) = unit {
                if u.chars().count() > 32 || u.chars().any(|c| c.is_control()) {
                    return bad("UNIT must be one word of at most 32 characters");
                }
            }
            Line::Figure {
                name: name.to_string(),
                value,
                unit: unit.map(str::to_string),
            }
        }
        _ => Line::Other,
    }
}

#[derive(Debug, Default)]
struct Collected {
    figures: BTreeMap<String, DriverFigure>,
    ready: Option<f64>,
    ignored: Vec<String>,
    /// Lines longer than [`MAX_LINE`]: how many, and the longest's length in bytes.
    cut: (u64, u64),
}

impl Collected {
    /// The ignored lines, and a note on the cut ones.
    fn ignored(&self) -> Vec<String> {
        let mut out = self.ignored.clone();
        let (n, longest) = self.cut;
        if n > 0 {
            let kib = MAX_LINE / 1024;
            out.push(match n {
                1 => format!("a line of {longest} bytes was cut to its first {kib} KiB (a line of the driver's stdout is read up to {kib} KiB) and not read"),
                _ => format!("{n} lines longer than {kib} KiB (the longest {longest} bytes) were cut to their first {kib} KiB (a line of the driver's stdout is read up to {kib} KiB) and not read"),
            });
        }
        out
    }
}

/// Why the driven phase ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// The driver exited by itself.
    Exited(ExitStatus),
    /// `--duration` bounded the driven phase.
    Bound,
    /// memtrial ended the run (interrupt, timeout) or the workload exited.
    Halted,
}

/// The driver of a worker trial.
pub(crate) struct WorkerDriver {
    helper: RefCell<Helper>,
    t0: Instant,
    started: f64,
    bound: Option<Duration>,
    /// After the driver is done (exited 0, or `--duration` passed), the workload is still
    /// sampled this long before it is stopped.
    cooldown: Duration,
    ended: Cell<Option<(f64, Ending)>>,
    workload_first: Cell<bool>,
    collected: Arc<Mutex<Collected>>,
    reader: Option<JoinHandle<()>>,
    stderr_path: PathBuf,
    grace: Duration,
}

/// Where a driver's output goes and what it is told.
pub(crate) struct DriverSetup<'a> {
    pub command: &'a str,
    pub env: Vec<(String, String)>,
    pub workdir: &'a std::path::Path,
    /// `<log_stem>`: the driver writes `<log_stem>.driver.stdout` and `.driver.stderr`.
    pub log_stem: &'a std::path::Path,
    pub bound: Option<Duration>,
    pub cooldown: Duration,
    pub grace: Duration,
    /// A cgroup of its own, when memtrial makes cgroups.
    pub group: Option<crate::linux::cgroup::RunCgroup>,
    /// The run's helper processes: the driver is one.
    pub helpers: crate::probe::Helpers,
}

impl WorkerDriver {
    pub fn start(s: DriverSetup, t0: Instant) -> std::io::Result<WorkerDriver> {
        let stdout_path = s.log_stem.with_extension("driver.stdout");
        let stderr_path = s.log_stem.with_extension("driver.stderr");
        let mut out = File::create(&stdout_path)?;
        let err = File::create(&stderr_path)?;
        let mut h = Helper::start(s.command, &s.env, s.workdir, None, err, s.group, &s.helpers)?;
        let started = t0.elapsed().as_secs_f64();
        let collected = Arc::new(Mutex::new(Collected::default()));
        let pipe = h.take_stdout();
        let c = Arc::clone(&collected);
        let reader = pipe.and_then(|pipe| {
            std::thread::Builder::new()
                .name("memtrial-driver-out".into())
                .spawn(move || {
                    let mut pipe = BufReader::new(pipe);
                    while let Ok(Some((line, length))) = read_line(&mut pipe, MAX_LINE) {
                        let _ = out.write_all(&line).and_then(|_| out.write_all(b"\n"));
                        let text = String::from_utf8_lossy(&line);
                        let at = t0.elapsed().as_secs_f64();
                        let Ok(mut c) = c.lock() else { return };
                        if length > line.len() as u64 {
                            // Its head is not the whole line: never read as a figure.
                            c.cut.0 += 1;
                            c.cut.1 = c.cut.1.max(length);
                            continue;
                        }
                        match parse_line(&text) {
                            Line::Figure { name, value, unit } => {
                                c.figures.insert(name, DriverFigure { value, unit });
                            }
                            Line::Ready => {
                                c.ready.get_or_insert(at);
                            }
                            Line::Bad(why) if c.ignored.len() < MAX_IGNORED => c.ignored.push(why),
                            Line::Bad(_) | Line::Other => {}
                        }
                    }
                })
                .ok()
        });
        Ok(WorkerDriver {
            helper: RefCell::new(h),
            t0,
            started,
            bound: s.bound,
            cooldown: s.cooldown,
            ended: Cell::new(None),
            workload_first: Cell::new(false),
            collected,
            reader,
            stderr_path,
            grace: s.grace,
        })
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The run is over for the driver: it failed, or it is done (exited 0, or
    /// `--duration` passed) and the cool-down has passed too.
    pub fn finished(&self) -> bool {
        self.driven_over();
        match self.ended.get() {
            None => false,
            Some((_, Ending::Exited(s))) if !s.success() => true,
            Some((_, Ending::Halted)) => true,
            Some((end, _)) => self.now() >= end + self.cooldown.as_secs_f64(),
        }
    }

    /// Notes when the driven phase ended: the driver exited, or `--duration` passed (the
    /// driver and its group are stopped then, so that the cool-down is the workload's own).
    fn driven_over(&self) -> bool {
        if self.ended.get().is_some() {
            return true;
        }
        if let Some(s) = self.helper.borrow_mut().exited() {
            self.ended.set(Some((self.now(), Ending::Exited(s))));
            return true;
        }
        if self
            .bound
            .is_some_and(|b| self.now() >= self.started + b.as_secs_f64())
        {
            self.ended.set(Some((self.now(), Ending::Bound)));
            self.helper.borrow_mut().stop(self.grace);
            return true;
        }
        false
    }

    /// memtrial is ending the run: the driver and its group go.
    pub(crate) fn halt(&self) {
        if self.ended.get().is_none() {
            self.driven_over();
        }
        if self.ended.get().is_none() {
            self.ended.set(Some((self.now(), Ending::Halted)));
        }
        self.helper.borrow_mut().stop(self.grace);
    }

    /// The workload's root has exited: if the driver still runs, the workload went first.
    pub(crate) fn root_gone(&self) {
        if !self.driven_over() {
            self.workload_first.set(true);
            self.ended.set(Some((self.now(), Ending::Halted)));
        }
        self.helper.borrow_mut().stop(self.grace);
    }

    /// What the driver made of the run, and its phases and figures.
    pub fn finish(
        self,
        ended_by: Option<EndedBy>,
        exit: Option<ExitKind>,
    ) -> (DriverOutcome, Option<DriverFigures>) {
        self.helper.borrow_mut().stop(self.grace);
        // Its stdout closes when its group is gone; do not wait on an escaped process.
        if let Some(r) = self.reader {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !r.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
        let (end, ending) = self
            .ended
            .get()
            .unwrap_or((self.t0.elapsed().as_secs_f64(), Ending::Halted));
        let figures = {
            let c = self.collected.lock().map(|c| {
                (
                    c.figures.clone(),
                    c.ready.filter(|r| *r <= end),
                    c.ignored(),
                )
            });
            let (figures, ready, ignored) = c.unwrap_or_default();
            DriverFigures {
                driven_start_seconds: self.started,
                ready_seconds: ready,
                driven_end_seconds: end,
                figures,
                ignored,
            }
        };
        let outcome = if self.workload_first.get() && ended_by.is_none() {
            DriverOutcome::Failed(format!(
                "the workload exited while the --driver was still running ({}), {:.1} s into the run; the driver was stopped",
                exit_phrase(exit),
                end
            ))
        } else {
            match ending {
                Ending::Exited(s) if s.success() => DriverOutcome::Done,
                Ending::Exited(s) => {
                    let err = helper::head(&self.stderr_path, 2048);
                    let said = if err.is_empty() {
                        "nothing on its stderr".to_string()
                    } else {
                        err
                    };
                    DriverOutcome::Failed(format!(
                        "--driver failed ({}): {said}",
                        helper::exit_words(s)
                    ))
                }
                Ending::Bound => DriverOutcome::Done,
                Ending::Halted => DriverOutcome::Stopped,
            }
        };
        (outcome, Some(figures))
    }
}

/// A service that does not exit by itself, run for `--duration`.
pub(crate) struct ServiceDriver {
    pub t0: Instant,
    pub duration: Duration,
    pub gone_at: Cell<Option<f64>>,
}

impl ServiceDriver {
    pub fn finished(&self) -> bool {
        self.t0.elapsed() >= self.duration
    }

    pub(crate) fn root_gone(&self) {
        if self.gone_at.get().is_none() {
            self.gone_at.set(Some(self.t0.elapsed().as_secs_f64()));
        }
    }

    pub fn finish(&self, ended_by: Option<EndedBy>) -> (DriverOutcome, Option<DriverFigures>) {
        let d = self.duration.as_secs_f64();
        let phase = |end: f64| DriverFigures {
            driven_start_seconds: 0.0,
            ready_seconds: None,
            driven_end_seconds: end,
            figures: BTreeMap::new(),
            ignored: Vec::new(),
        };
        match ended_by {
            Some(EndedBy::Driver) => (DriverOutcome::Done, Some(phase(d))),
            Some(_) => (DriverOutcome::Stopped, None),
            None => {
                let at = self
                    .gone_at
                    .get()
                    .unwrap_or_else(|| self.t0.elapsed().as_secs_f64());
                (
                    DriverOutcome::Ended(format!(
                        "exited by itself after {at:.1} s, before the end of --duration {}",
                        humantime::format_duration(self.duration)
                    )),
                    Some(phase(at.min(d))),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_lines() {
        assert_eq!(
            parse_line("memtrial-figure jobs_per_second 123.5 jobs/s"),
            Line::Figure {
                name: "jobs_per_second".into(),
                value: 123.5,
                unit: Some("jobs/s".into())
            }
        );
        assert_eq!(
            parse_line("  memtrial-figure jobs 100\r"),
            Line::Figure {
                name: "jobs".into(),
                value: 100.0,
                unit: None
            }
        );
        assert_eq!(parse_line("memtrial-ready"), Line::Ready);
        assert_eq!(parse_line("memtrial-ready now"), Line::Other);
        assert_eq!(parse_line("processed 100 jobs"), Line::Other);
        assert_eq!(parse_line(""), Line::Other);
        for bad in [
            "memtrial-figure",
            "memtrial-figure jobs",
            "memtrial-figure Jobs 1",
            "memtrial-figure jobs-done 1",
            "memtrial-figure jobs NaN",
            "memtrial-figure jobs inf",
            "memtrial-figure jobs 1e999",
            "memtrial-figure jobs 1 two words",
        ] {
            assert!(matches!(parse_line(bad), Line::Bad(_)), "{bad}");
        }
        let long = format!("memtrial-figure {} 1", "a".repeat(65));
        assert!(matches!(parse_line(&long), Line::Bad(_)));
    }

    #[test]
    fn lines_are_read_up_to_the_limit() {
        let input = b"short\n\nabcdefghij\nlast-without-newline".to_vec();
        let mut r = std::io::BufReader::with_capacity(3, &input[..]);
        let mut got = Vec::new();
        while let Some((l, n)) = read_line(&mut r, 4).unwrap() {
            got.push((String::from_utf8(l).unwrap(), n));
        }
        assert_eq!(
            got,
            vec![
                ("shor".to_string(), 5),
                (String::new(), 0),
                ("abcd".to_string(), 10),
                ("last".to_string(), 20),
            ]
        );
        assert!(read_line(&mut &b""[..], 4).unwrap().is_none());
    }
}
