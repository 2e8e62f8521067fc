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
//! Every read is bounded: a file is read up to `max` bytes, however long it is (a
//! process chooses the size of its `cmdline` and `environ`).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read};
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

/// One buffer and one path string, reused by every read.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    buf: Vec<u8>,
    path: String,
}

impl Reader {
    /// The text of `/proc/{pid}/{file}`, at most `max` bytes of it.
    pub fn proc(&mut self, pid: i32, file: &str, shape: Shape, max: usize) -> io::Result<&[u8]> {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let _ = write!(path, "/proc/{pid}/{file}");
        let r = self.read(Path::new(&path), shape, max);
        self.path = path;
        r.map(|n| &self.buf[..n])
    }

    /// Reads `path` into the buffer, at most `max` bytes; returns how many.
    fn read(&mut self, path: &Path, shape: Shape, max: usize) -> io::Result<usize> {
        let mut f = File::open(path)?;
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
            let n = match f.read(&mut self.buf[len..end]) {
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
        let n = self.read(path, shape, max)?;
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
