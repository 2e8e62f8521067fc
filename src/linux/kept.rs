//! A kernel-generated file (`/proc`, cgroupfs) kept open and re-read from its start.
//! Only for files the kernel generates in one piece (`status`, `stat`, `statm`,
//! `loadavg`, `memory.stat`): a read shorter than the buffer is then the whole text. A
//! file made of records (`smaps`, `maps`, `cgroup.procs`) can return fewer bytes than asked
//! before its end, and is read the ordinary way.
//!
//! `pread` at offset 0 makes the kernel generate the text again, so a sample costs one
//! system call instead of an open, a size query, a string of small reads and a close (and
//! no path walk). A `/proc/PID/*` descriptor stays bound to the process it was opened for:
//! once that process is reaped, reads fail with "no such process" even if its PID names
//! another process by then.

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The largest text a kept file is read into (the files sampled are a few KiB).
const MAX: usize = 1 << 20;

#[derive(Debug)]
pub(crate) struct KeptFile {
    path: PathBuf,
    file: fs::File,
    buf: Vec<u8>,
}

impl KeptFile {
    pub fn open(path: impl Into<PathBuf>) -> io::Result<KeptFile> {
        KeptFile::with_buffer(path, 4096)
    }

    fn with_buffer(path: impl Into<PathBuf>, bytes: usize) -> io::Result<KeptFile> {
        let path = path.into();
        let file = fs::File::open(&path)?;
        Ok(KeptFile {
            path,
            file,
            buf: vec![0; bytes.max(1)],
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's whole text now.
    pub fn read(&mut self) -> io::Result<&[u8]> {
        loop {
            let n = self.file.read_at(&mut self.buf, 0)?;
            // A read that filled the buffer may have been cut short: read it again into a
            // larger one (the text is generated whole from offset 0 each time).
            if n < self.buf.len() || self.buf.len() >= MAX {
                return Ok(&self.buf[..n]);
            }
            let grown = (self.buf.len() * 2).min(MAX);
            self.buf.resize(grown, 0);
        }
    }
}

/// A [`KeptFile`] opened on first use, and again when asked for another path; a clone
/// starts closed (it opens its own descriptor).
#[derive(Debug, Default)]
pub(crate) struct KeptSlot(Option<KeptFile>);

impl Clone for KeptSlot {
    fn clone(&self) -> Self {
        KeptSlot(None)
    }
}

impl KeptSlot {
    /// The whole text of `path` now.
    pub fn read(&mut self, path: &Path) -> io::Result<&[u8]> {
        if self.0.as_ref().is_none_or(|k| k.path() != path) {
            self.0 = Some(KeptFile::open(path)?);
        }
        self.0.as_mut().expect("opened above").read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rereads_what_the_kernel_generates_now_and_grows_for_long_texts() {
        let mut stat = KeptFile::open("/proc/self/stat").unwrap();
        let first = String::from_utf8_lossy(stat.read().unwrap()).to_string();
        let ticks = |s: &str| -> u64 {
            let rest = s.rsplit_once(')').unwrap().1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
        };
        // Burn CPU until utime + stime (fields 14 and 15) grow: the same descriptor shows it.
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        loop {
            for _ in 0..1_000_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            let now = String::from_utf8_lossy(stat.read().unwrap()).to_string();
            if ticks(&now) > ticks(&first) {
                break;
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "{first} / {now} ({x})"
            );
        }
        // A text longer than the buffer comes whole: the buffer grows.
        let mut status = KeptFile::with_buffer("/proc/self/status", 64).unwrap();
        let kept = String::from_utf8_lossy(status.read().unwrap()).to_string();
        let whole = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(kept.len() > 64, "{kept}");
        assert_eq!(
            kept.lines().count(),
            whole.lines().count(),
            "{kept}\n---\n{whole}"
        );
    }

    #[test]
    fn a_reaped_process_reads_as_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut status = KeptFile::open(format!("/proc/{}/status", child.id())).unwrap();
        // The same descriptor follows the process through its exec.
        let t0 = std::time::Instant::now();
        while !status.read().unwrap().starts_with(b"Name:\tsleep") {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(5),
                "never exec'd"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let e = status.read().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "{e}");
    }
}
