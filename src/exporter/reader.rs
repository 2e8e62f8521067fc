//! The exporter's reads of `/proc/PID/*`, into one buffer kept for the collector's life.
//!
//! A scrape reads a few files of every process on the machine (`stat`, `cmdline` to
//! match) and of every matched process (`status`, `cgroup`, `smaps_rollup`, `maps`):
//! thousands of reads. [`std::fs::read`] and `read_to_end` ask each file its size first
//! (a `statx` and an `lseek`, useless on `/proc`, whose files say 0) and allocate a buffer
//! per file; here a file costs an `open`, its reads into the kept buffer, and a `close`.
//! A file the kernel generates in one piece ([`Shape::OnePiece`]) is whole once a read
//! comes back shorter than asked, which spares the read that would say "end of file".
//!
//! A process's `stat`, `status` and `cgroup` are read through descriptors kept open
//! between scrapes ([`Kept`]): re-read from offset 0, the kernel generates the text
//! again, without the path walk and the descriptor's creation. These files follow their
//! process (through an `execve` too) and no other: once it is reaped, a read fails and the
//! file is opened afresh by its path. Files bound to an address space (`smaps_rollup`,
//! `maps`, `mem`: after an `execve`, a descriptor opened before would still show the old
//! one) are opened at every read.
//!
//! Every read is bounded: a file is read up to `max` bytes, however long it is (a
//! process chooses the size of its `cmdline` and `environ`).

use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
#[cfg(test)]
use std::path::Path;

/// How a file's text comes out of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Generated whole at the first read (`stat`, `status`, `cgroup`, `smaps_rollup`:
    /// the kernel's `single_open` files): a read shorter than asked is the whole text.
    OnePiece,
    /// Handed out in pieces (`maps` a page of records at a time, `cmdline` and `environ`
    /// from the process's memory): read until a read returns nothing.
    Pieces,
}

/// The buffer a first read is given, grown (doubling, up to a read's `max`) for longer
/// texts and kept: the `maps` of a large process run to hundreds of KiB.
const FIRST: usize = 64 << 10;

/// A task-bound `/proc/PID/*` file kept open between scrapes (see the module's notes).
#[derive(Debug, Default)]
pub(crate) struct Kept(Option<File>);

/// The most of the buffer kept between reads.
const KEEP: usize = 1 << 20;

/// One buffer and one path string, reused by every read.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    buf: Vec<u8>,
    path: String,
}

impl Reader {
    /// The text of `/proc/{pid}/{file}`, at most `max` bytes of it.
    pub fn proc(&mut self, pid: i32, file: &str, shape: Shape, max: usize) -> io::Result<&[u8]> {
        let f = self.open(pid, file)?;
        let n = self.read(&f, shape, max)?;
        Ok(&self.buf[..n])
    }

    /// The text of `/proc/{pid}/{file}` (a task-bound file: `stat`, `status`, `cgroup`)
    /// through `kept`: re-read where it is open, else opened, and kept if `keep`. A kept
    /// descriptor whose read fails or comes back empty (its process reaped) is closed and
    /// the file opened afresh by its path.
    pub fn kept(
        &mut self,
        kept: &mut Kept,
        keep: bool,
        pid: i32,
        file: &str,
        shape: Shape,
        max: usize,
    ) -> io::Result<&[u8]> {
        if let Some(f) = &kept.0 {
            match self.read(f, shape, max) {
                Ok(n) if n > 0 => return Ok(&self.buf[..n]),
                _ => kept.0 = None,
            }
        }
        let f = self.open(pid, file)?;
        let n = self.read(&f, shape, max)?;
        if keep {
            kept.0 = Some(f);
        }
        Ok(&self.buf[..n])
    }

    fn open(&mut self, pid: i32, file: &str) -> io::Result<File> {
        self.path.clear();
        let _ = write!(self.path, "/proc/{pid}/{file}");
        File::open(&self.path)
    }

    /// Reads `f` from its start into the buffer, at most `max` bytes; returns how many.
    fn read(&mut self, f: &File, shape: Shape, max: usize) -> io::Result<usize> {
        if self.buf.len() > KEEP {
            // One long text (a large process's maps) does not stay held.
            self.buf.truncate(KEEP);
            self.buf.shrink_to_fit();
        }
        if self.buf.len() < FIRST.min(max.max(1)) {
            self.buf.resize(FIRST.min(max.max(1)), 0);
        }
        let mut len = 0;
        loop {
            let end = self.buf.len().min(max);
            if len == end {
                if end == max {
                    return Ok(len);
                }
                let grown = (self.buf.len() * 2).min(max);
                self.buf.resize(grown, 0);
                continue;
            }
            let n = match f.read_at(&mut self.buf[len..end], len as u64) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            len += n;
            if n == 0 || (shape == Shape::OnePiece && len < end) {
                return Ok(len);
            }
        }
    }

    /// [`Reader::proc`] of a path (for the tests).
    #[cfg(test)]
    fn path(&mut self, path: &Path, shape: Shape, max: usize) -> io::Result<&[u8]> {
        let n = self.read(&File::open(path)?, shape, max)?;
        Ok(&self.buf[..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape of file comes whole, whatever its length against the buffer, and no
    /// read goes past `max`.
    #[test]
    fn whole_texts_and_bounded_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Reader::default();
        for len in [
            0,
            1,
            4095,
            FIRST - 1,
            FIRST,
            FIRST + 1,
            3 * FIRST + 7,
            1 << 20,
        ] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let p = dir.path().join(format!("f{len}"));
            std::fs::write(&p, &bytes).unwrap();
            // A regular file answers every read in full, so even OnePiece reads it whole.
            for shape in [Shape::OnePiece, Shape::Pieces] {
                assert_eq!(r.path(&p, shape, usize::MAX).unwrap(), &bytes[..], "{len}");
                for max in [1, 100, FIRST, FIRST + 3] {
                    let got = r.path(&p, shape, max).unwrap();
                    assert_eq!(got, &bytes[..len.min(max)], "{len} {max}");
                }
            }
        }
        // A file that never ends (/dev/zero) is read up to max.
        let got = r
            .path(Path::new("/dev/zero"), Shape::Pieces, 3 << 20)
            .unwrap();
        assert_eq!(got.len(), 3 << 20);
    }

    /// A kept file is read again from its start and shows what is true now; once its
    /// process is reaped, the file is opened afresh by its path.
    #[test]
    fn kept_files_reread_and_reopen() {
        let mut r = Reader::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut kept = Kept::default();
        let first = r
            .kept(&mut kept, true, pid, "stat", Shape::OnePiece, 4096)
            .unwrap()
            .to_vec();
        assert!(kept.0.is_some());
        let again = r
            .kept(&mut kept, true, pid, "stat", Shape::OnePiece, 4096)
            .unwrap();
        assert_eq!(
            again.split(|b| *b == b' ').next(),
            first.split(|b| *b == b' ').next()
        );
        child.kill().unwrap();
        child.wait().unwrap();
        // Reaped: the kept descriptor fails, and the path names no process.
        let e = r
            .kept(&mut kept, true, pid, "stat", Shape::OnePiece, 4096)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        assert!(kept.0.is_none());
        // Not kept when asked not to.
        let me = std::process::id() as i32;
        r.kept(&mut kept, false, me, "status", Shape::OnePiece, 1 << 20)
            .unwrap();
        assert!(kept.0.is_none());
    }

    /// The kernel's files of this process, read both ways, equal what `std::fs` reads.
    #[test]
    fn proc_files_of_this_process() {
        let me = std::process::id() as i32;
        let mut r = Reader::default();
        for (file, shape) in [
            ("stat", Shape::OnePiece),
            ("status", Shape::OnePiece),
            ("cgroup", Shape::OnePiece),
            ("cmdline", Shape::Pieces),
            ("environ", Shape::Pieces),
        ] {
            let ours = r.proc(me, file, shape, usize::MAX).unwrap().to_vec();
            let std = std::fs::read(format!("/proc/{me}/{file}")).unwrap();
            if file == "stat" || file == "status" {
                // Figures move between the two reads; the shape does not.
                assert_eq!(
                    ours.split(|b| *b == b'\n').count(),
                    std.split(|b| *b == b'\n').count()
                );
            } else {
                assert_eq!(ours, std, "{file}");
            }
        }
        let rollup = r
            .proc(me, "smaps_rollup", Shape::OnePiece, usize::MAX)
            .unwrap();
        assert!(String::from_utf8_lossy(rollup).contains("\nPss:"));
        let e = r.proc(i32::MAX, "stat", Shape::OnePiece, 1024).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
