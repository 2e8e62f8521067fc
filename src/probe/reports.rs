//! A directory of per-process report files written by a probe inside the workload (the
//! allocator library, the Ruby script): `<dir>/<pid>`, appended one line at a time. Read
//! on the run's clock, whole lines only, into a state per process; tells which processes
//! reported since the last point, so that a probe sums the latest report of the processes
//! in the run at each sample.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What a probe keeps of one process's reports.
pub(crate) trait ProcessReports: Default {
    /// Takes one whole line; true when it is a new report of figures (not a header).
    fn line(&mut self, line: &str) -> bool;
}

#[derive(Debug, Default)]
struct Entry<S> {
    /// The file, kept open once found (a read is then one system call).
    file: Option<std::fs::File>,
    /// Bytes of the file consumed so far (whole lines only).
    offset: u64,
    /// A report arrived since the last point was taken.
    fresh: bool,
    state: S,
}

/// The report files of one run, with a state per process.
#[derive(Debug)]
pub(crate) struct ReportDir<S> {
    dir: PathBuf,
    files: BTreeMap<i32, Entry<S>>,
    /// Pids in the run at the last sample.
    last_members: BTreeSet<i32>,
}

/// At most this much of one file is read per tick: a misbehaving writer cannot make
/// memtrial read without end.
const MAX_READ: u64 = 4 << 20;

impl<S: ProcessReports> ReportDir<S> {
    /// The reports in `dir`, created here, without any a run before this one left there;
    /// the error says why it could not be.
    pub fn create(dir: PathBuf) -> Result<ReportDir<S>, String> {
        fresh_dir(&dir)?;
        Ok(ReportDir {
            dir,
            files: BTreeMap::new(),
            last_members: BTreeSet::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads every file's new whole lines into its process's state.
    pub(crate) fn read_new(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            read_file(
                &self.dir,
                &e.file_name(),
                self.files.entry(pid).or_default(),
            );
        }
    }

    /// The states of the processes in `pids`, if any of them reported since the last
    /// point (which they are then part of).
    pub(crate) fn take_point(&mut self, pids: &BTreeSet<i32>) -> Option<Vec<&S>> {
        let chosen: Vec<&mut Entry<S>> = self
            .files
            .iter_mut()
            .filter(|(pid, _)| pids.contains(pid))
            .map(|(_, e)| e)
            .collect();
        if !chosen.iter().any(|e| e.fresh) {
            return None;
        }
        Some(
            chosen
                .into_iter()
                .map(|e| {
                    e.fresh = false;
                    &e.state
                })
                .collect(),
        )
    }

    /// After a sample with the run's processes `pids`: the reports of processes no longer
    /// in the run are history, not the present.
    pub fn sampled(&mut self, pids: BTreeSet<i32>) {
        for (pid, e) in self.files.iter_mut() {
            if !pids.contains(pid) {
                e.fresh = false;
                // Only the run's processes keep a descriptor (a run of thousands of
                // short-lived processes must not exhaust memtrial's); the end reopens.
                e.file = None;
            }
        }
        self.last_members = pids;
    }

    /// A sample of the run with its processes `members`: reads the new reports and returns
    /// the states of the members if any of them reported since the last point.
    pub fn sample(&mut self, members: &[super::Member]) -> Option<Vec<&S>> {
        self.read_new();
        let pids: BTreeSet<i32> = members.iter().map(|m| m.pid).collect();
        self.sampled(pids);
        let pids = self.last_members.clone();
        self.take_point(&pids)
    }

    /// At the end: the processes of the last sample and any that reported since (a batch
    /// job's exit reports).
    pub(crate) fn final_pids(&mut self) -> BTreeSet<i32> {
        let mut pids = std::mem::take(&mut self.last_members);
        pids.extend(self.files.iter().filter(|(_, e)| e.fresh).map(|(p, _)| *p));
        pids
    }

    /// Every process that wrote a file: its pid and its state, to change.
    pub(crate) fn each_mut(&mut self) -> impl Iterator<Item = (i32, &mut S)> {
        self.files.iter_mut().map(|(pid, e)| (*pid, &mut e.state))
    }

    /// Every process that wrote a file, with its state.
    pub(crate) fn states(&self) -> impl Iterator<Item = &S> {
        self.files.values().map(|e| &e.state)
    }
}

/// Makes `dir` (and its parents) if missing and removes the report files in it: regular
/// files named by a number, as the probes inside a workload write them. The directory of a
/// run can hold some already: an earlier attempt of the same run (a crashed run resumed),
/// or the run of the same number in an experiment of a database since deleted, whose logs
/// stayed beside the new one. Read as this run's, their processes (whose pids the run's
/// own may even reuse) would be counted in its figures. Nothing else is touched.
pub(crate) fn fresh_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let numbered = e
            .file_name()
            .to_str()
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if numbered && e.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::remove_file(e.path()).map_err(|err| {
                format!(
                    "cannot remove {}, left by an earlier run: {err}",
                    e.path().display()
                )
            })?;
        }
    }
    Ok(())
}

/// At the end of a run: reads the last reports (a batch job's exit lines) and returns the
/// processes of the last point; a probe that could not run records why instead.
pub(crate) fn end_of_run<S: ProcessReports>(
    reports: &mut Result<ReportDir<S>, String>,
    probe: &str,
    record: &mut crate::record::RunRecord,
) -> Option<BTreeSet<i32>> {
    match reports {
        Ok(r) => {
            r.read_new();
            Some(r.final_pids())
        }
        Err(reason) => {
            record.inside.absent.push(crate::record::Absence {
                probe: probe.into(),
                reason: reason.clone(),
            });
            None
        }
    }
}

/// Reads the whole new lines of one report file: a regular file, opened without following
/// a link or waiting on a FIFO (the workload knows the directory and could put either there).
fn read_file<S: ProcessReports>(dir: &Path, name: &std::ffi::OsStr, entry: &mut Entry<S>) {
    use std::os::unix::fs::FileExt;
    if entry.file.is_none() {
        entry.file = crate::linux::safe_file::open_regular_beneath(dir, Path::new(name)).ok();
    }
    let Some(f) = &entry.file else {
        return;
    };
    let mut buf = vec![0; 16 << 10];
    let mut got = 0;
    while (got as u64) < MAX_READ {
        if got == buf.len() {
            buf.resize((buf.len() * 2).min(MAX_READ as usize), 0);
        }
        match f.read_at(&mut buf[got..], entry.offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
    buf.truncate(got);
    let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
        return;
    };
    entry.offset += end as u64 + 1;
    for line in String::from_utf8_lossy(&buf[..end]).lines() {
        if entry.state.line(line) {
            entry.fresh = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Last(Option<String>);

    impl ProcessReports for Last {
        fn line(&mut self, line: &str) -> bool {
            if line.starts_with('#') {
                return false;
            }
            self.0 = Some(line.to_string());
            true
        }
    }

    #[test]
    fn whole_lines_only_and_fresh_until_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r: ReportDir<Last> = ReportDir::create(tmp.path().join("d")).unwrap();
        let path = r.dir().join("7");
        std::fs::write(&path, "# header\none\ntw").unwrap();
        std::fs::write(r.dir().join("not-a-pid"), "x\n").unwrap();
        r.read_new();
        let pids: BTreeSet<i32> = [7].into();
        let got: Vec<Option<String>> = r
            .take_point(&pids)
            .unwrap()
            .iter()
            .map(|s| s.0.clone())
            .collect();
        assert_eq!(got, [Some("one".to_string())]);
        assert!(r.take_point(&pids).is_none(), "taken: not fresh any more");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"o\n").unwrap();
        r.read_new();
        assert_eq!(r.take_point(&pids).unwrap()[0].0.as_deref(), Some("two"));
    }

    #[test]
    fn a_run_starts_without_the_reports_an_earlier_one_left() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for name in ["7", "123", "7.tmp", "notes"] {
            std::fs::write(d.join(name), "# header\nold\n").unwrap();
        }
        std::os::unix::fs::symlink(d.join("notes"), d.join("9")).unwrap();
        let mut r: ReportDir<Last> = ReportDir::create(d.clone()).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        // The numbered regular files went; the rest (a link too) stayed.
        assert_eq!(left, ["7.tmp", "9", "notes", "sub"]);
        r.read_new();
        assert!(
            r.take_point(&[7, 123].into()).is_none(),
            "nothing reported yet"
        );
        assert_eq!(r.final_pids(), BTreeSet::new());
    }

    #[test]
    fn gone_processes_are_history_and_the_end_takes_late_reporters() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r: ReportDir<Last> = ReportDir::create(tmp.path().join("d")).unwrap();
        std::fs::write(r.dir().join("1"), "a\n").unwrap();
        std::fs::write(r.dir().join("2"), "b\n").unwrap();
        r.read_new();
        r.sampled([1].into());
        // 2 reported but was not in the run at the sample: not part of the end either.
        assert_eq!(r.final_pids(), [1].into());
        std::fs::write(r.dir().join("3"), "c\n").unwrap();
        r.read_new();
        assert!(r.final_pids().contains(&3));
    }
}
