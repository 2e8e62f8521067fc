//! Bounded run logs. A workload's stdout and stderr go straight to their files (the kernel
//! writes them; memtrial copies nothing, and the workload sees a regular file as before).
//! While it runs, a watcher keeps only each file's first and last halves of the limit on
//! disk: once a file passes the limit by a slack, the middle is punched out
//! (`fallocate(PUNCH_HOLE)`: the blocks are freed, the size stays). When the run ends the
//! file is rewritten in place as its head, one line saying how many bytes were left out and
//! the limit, and its tail — each cut at a line's end where one is near.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The default bound of each run log (`--log-limit`): 64 MiB, its first and last 32 MiB.
pub const DEFAULT_LIMIT: u64 = 64 << 20;
/// The least bound `--log-limit` accepts (0 aside: keep everything).
pub const LEAST_LIMIT: u64 = 64 << 10;

static LIMIT: AtomicU64 = AtomicU64::new(DEFAULT_LIMIT);

/// Sets the bound of every run log this process writes from now on; 0 keeps everything.
pub fn set_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The bound of each run log; 0: none.
pub fn limit() -> u64 {
    LIMIT.load(Ordering::Relaxed)
}

/// Checks `--log-limit`'s value: 0, or at least [`LEAST_LIMIT`].
pub fn parse_limit(text: &str) -> Result<u64, String> {
    let bytes = crate::units::parse_size(text)?;
    if bytes != 0 && bytes < LEAST_LIMIT {
        return Err(format!(
            "{text} is below the least bound of 64K (each run keeps its first and last halves); \
             0 keeps everything"
        ));
    }
    Ok(bytes)
}

/// How often the watcher looks at the files' sizes while one of them grows…
const TICK: Duration = Duration::from_millis(250);
/// …and, doubling from [`TICK`] while none grows, at most this seldom: a quiet workload's
/// logs cost memtrial one wake a second, not four (each wake costs ~80 µs of CPU on a VM).
const IDLE_TICK: Duration = Duration::from_secs(1);

/// The next wait after one at `last`: [`TICK`] when a file grew, else twice `last` up to
/// [`IDLE_TICK`].
fn next_wait(last: Duration, grew: bool) -> Duration {
    if grew {
        TICK
    } else {
        (last * 2).min(IDLE_TICK)
    }
}

/// The watcher of one run's logs: [`Capped::finish`] (or drop) stops it and writes each
/// file's final form.
pub struct Capped {
    files: Vec<PathBuf>,
    limit: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Capped {
    /// Starts watching `files` under the process's [`limit`] (nothing to watch at 0).
    pub fn watch(files: Vec<PathBuf>) -> Capped {
        let limit = limit();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (limit > 0).then(|| {
            let (files, stop) = (files.clone(), stop.clone());
            std::thread::Builder::new()
                .name("memtrial-logcap".into())
                .spawn(move || {
                    let mut sizes = vec![0u64; files.len()];
                    let mut wait = TICK;
                    while !stop.load(Ordering::Relaxed) {
                        let mut grew = false;
                        for (f, last) in files.iter().zip(&mut sizes) {
                            if let Ok(size) = punch(f, limit) {
                                grew |= size != *last;
                                *last = size;
                            }
                        }
                        wait = next_wait(wait, grew);
                        std::thread::park_timeout(wait);
                    }
                })
                .ok()
        });
        Capped {
            files,
            limit,
            stop,
            thread: thread.flatten(),
        }
    }

    /// Stops the watcher and writes each file as head, the line saying what was left out,
    /// and tail; the bytes left out of each file that lost some.
    pub fn finish(mut self) -> Vec<(PathBuf, u64)> {
        self.end()
    }

    fn end(&mut self) -> Vec<(PathBuf, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        if self.limit == 0 {
            return Vec::new();
        }
        let files = std::mem::take(&mut self.files);
        files
            .into_iter()
            .filter_map(|f| match compact(&f, self.limit) {
                Ok(Some(n)) => Some((f, n)),
                _ => None,
            })
            .collect()
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        self.end();
    }
}

/// The slack past the limit before the middle is punched out again.
fn slack(limit: u64) -> u64 {
    (limit / 8).max(64 << 10)
}

/// Frees the blocks of the middle of `path` once it is past `limit` by the slack: from the
/// end of its first half of the limit to the start of its last. The file's size.
fn punch(path: &Path, limit: u64) -> std::io::Result<u64> {
    let size = std::fs::metadata(path)?.len();
    if size <= limit + slack(limit) {
        return Ok(size);
    }
    let half = limit / 2;
    let f = OpenOptions::new().write(true).open(path)?;
    let len = size - half - half;
    // SAFETY: fallocate(2) on a descriptor this function owns; no memory is passed.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            half as libc::off_t,
            len as libc::off_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(size)
}

/// How far from a cut a line's end is looked for.
const LINE_SEARCH: usize = 4096;

/// Rewrites `path`, when it is longer than `limit`, as its first half of the limit (to the
/// last line's end in its final 4 KiB), a line saying how many bytes were left out, and its
/// last half (from the first line's start in its first 4 KiB). `Some(bytes left out)`.
fn compact(path: &Path, limit: u64) -> std::io::Result<Option<u64>> {
    let mut f = OpenOptions::new().read(true).write(true).open(path)?;
    let size = f.metadata()?.len();
    let half = limit / 2;
    if size <= limit {
        return Ok(None);
    }
    let near = |f: &mut File, at: u64| -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; LINE_SEARCH.min(half as usize)];
        f.seek(SeekFrom::Start(at))?;
        let n = f.read(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    };
    // The head ends after the last newline of its final stretch, if it has one.
    let before = half - (LINE_SEARCH as u64).min(half);
    let head_end = near(&mut f, before)?
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(half, |i| before + i as u64 + 1);
    // The tail starts after the first newline of its first stretch, if it has one.
    let tail_from = size - half;
    let tail_start = near(&mut f, tail_from)?
        .iter()
        .position(|b| *b == b'\n')
        .map_or(tail_from, |i| tail_from + i as u64 + 1);
    let left_out = tail_start - head_end;
    let line = format!(
        "\n[memtrial: {} left out here ({left_out} bytes); a run keeps the first and last {} \
         of its output (--log-limit {})]\n",
        crate::units::format_bytes(left_out as f64),
        crate::units::format_bytes(half as f64),
        crate::units::format_bytes(limit as f64)
    );
    if left_out < line.len() as u64 {
        return Ok(None);
    }
    // Forward copy: every write lands before what is still to be read.
    f.seek(SeekFrom::Start(head_end))?;
    f.write_all(line.as_bytes())?;
    let mut to = head_end + line.len() as u64;
    let mut from = tail_start;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        f.seek(SeekFrom::Start(from))?;
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        f.seek(SeekFrom::Start(to))?;
        f.write_all(&buf[..n])?;
        from += n as u64;
        to += n as u64;
    }
    f.set_len(to)?;
    Ok(Some(left_out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn lines(from: usize, to: usize) -> String {
        (from..to).map(|i| format!("line {i:07}\n")).collect()
    }

    /// A log written while it is watched keeps its head and tail, whole lines, and says
    /// what it left out; on disk it never held much more than the limit.
    #[test]
    fn a_long_log_keeps_its_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("001-glibc.stdout");
        let mut out = File::create(&path).unwrap();
        let limit = 256u64 << 10;
        // Punched by hand below, at each step, instead of by the watcher's clock.
        let watched = Capped {
            files: vec![path.clone()],
            limit,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        // 200,000 lines of 13 bytes (2.6 MB), the middle punched out as it grows.
        let mut most_on_disk = 0;
        for chunk in 0..200 {
            out.write_all(lines(chunk * 1000, chunk * 1000 + 1000).as_bytes())
                .unwrap();
            punch(&path, limit).unwrap();
            most_on_disk = most_on_disk.max(std::fs::metadata(&path).unwrap().blocks() * 512);
        }
        assert!(
            most_on_disk <= limit + slack(limit) + (64 << 10),
            "{most_on_disk} bytes on disk"
        );
        let left = watched.finish();
        assert_eq!(left.len(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("line 0000000\n"), "{}", &text[..40]);
        assert!(text.ends_with("line 0199999\n"));
        assert!(text.len() as u64 <= limit + 200, "{}", text.len());
        let (head, rest) = text.split_once("\n[memtrial: ").expect("the line");
        let (said, tail) = rest.split_once("]\n").expect("its end");
        // Whole lines on both sides, and the count is what is missing.
        assert!(head.ends_with('\n') && tail.starts_with("line "), "{said}");
        let last_kept: usize = head
            .trim_end()
            .rsplit("line ")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let first_missing = last_kept + 1;
        let first_kept: usize = tail[5..12].parse().unwrap();
        let missing = (first_kept - first_missing) as u64 * 13;
        assert_eq!(left[0].1, missing, "{said}");
        assert!(said.contains(&format!("({missing} bytes)")), "{said}");
        assert!(said.contains("--log-limit 256 KiB"), "{said}");
        // A short log is left alone.
        let short = dir.path().join("002-glibc.stderr");
        std::fs::write(&short, lines(0, 10)).unwrap();
        assert_eq!(compact(&short, limit).unwrap(), None);
        assert_eq!(std::fs::read_to_string(&short).unwrap(), lines(0, 10));
    }

    /// Looks come every 250 ms while a log grows and back off to one a second while none
    /// does; growth brings the quick looks back at once.
    #[test]
    fn the_watcher_backs_off_while_no_log_grows() {
        let mut wait = TICK;
        let quiet: Vec<Duration> = (0..4)
            .map(|_| {
                wait = next_wait(wait, false);
                wait
            })
            .collect();
        let ms = |v: u64| Duration::from_millis(v);
        assert_eq!(quiet, [ms(500), ms(1000), ms(1000), ms(1000)]);
        assert_eq!(next_wait(wait, true), TICK);
    }

    #[test]
    fn the_limit_is_checked() {
        assert_eq!(parse_limit("0"), Ok(0));
        assert_eq!(parse_limit("1M"), Ok(1 << 20));
        assert!(parse_limit("1K")
            .unwrap_err()
            .contains("least bound of 64K"));
        assert!(parse_limit("lots").is_err());
    }
}
