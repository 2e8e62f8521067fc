//! Opening a file whose path memtrial does not fully control, without trusting what lies there.
//!
//! Two callers, one rule. `report` reads the logs memtrial itself wrote beside its
//! database, whose path could have been replaced since (a link to a secret, a FIFO); the
//! exporter runs as root and reads a report file that a watched process wrote into its own
//! filesystem (`/proc/PID/root/...`), where that process chooses what lies on the path: a
//! symbolic link to a secret (resolved through `/proc/PID/root`, an absolute link lands in
//! *our* root), a FIFO that blocks `open` forever, `/dev/zero`, a file that never ends.
//!
//! - the directory is memtrial's own (its log directory, a flag), never a path a record or
//!   another process named;
//! - every component below the root is opened with `O_NOFOLLOW` (a symbolic link anywhere
//!   is refused, not followed), and `..` or `.` never appear;
//! - the file is opened `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY` (a FIFO cannot block the
//!   open, a terminal cannot become ours), then checked with `fstat`: a regular file only,
//!   and, where the caller asks, owned by root or by one of the uids given;
//! - reads are bounded ([`read_head_and_tail`], [`read_bounded`]), and never go past the
//!   size the file had at open (a `/proc` pseudo-file, which says it is empty, reads empty).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    #[error("{path}: only a relative path of plain names is opened beneath a root (no `..`, no `.`, not absolute)")]
    BadPath { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{path}: a symbolic link or not a directory on the way; links are never followed here"
    )]
    NotPlain { path: PathBuf },
    #[error("{path}: a {kind}, not a regular file; only regular files are read")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path}: owned by uid {uid}, neither root nor the process's own uid ({allowed:?}); not read")]
    Owner {
        path: PathBuf,
        uid: u32,
        allowed: Vec<u32>,
    },
}

impl SafeFileError {
    /// The OS error behind it, if any (`ENOENT` for a file that is not there, …).
    #[cfg(test)]
    pub(crate) fn raw_os_error(&self) -> Option<i32> {
        match self {
            SafeFileError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

fn c_name(path: &Path, name: &std::ffi::OsStr) -> Result<CString, SafeFileError> {
    CString::new(name.as_bytes()).map_err(|_| SafeFileError::BadPath {
        path: path.to_path_buf(),
    })
}

fn openat(
    dir: Option<&OwnedFd>,
    name: &CString,
    flags: libc::c_int,
    shown: &Path,
) -> Result<OwnedFd, SafeFileError> {
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `name` is a NUL-terminated string that outlives the call; `at` is a valid
    // descriptor or AT_FDCWD; no mode is needed without O_CREAT.
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => SafeFileError::NotPlain {
                path: shown.to_path_buf(),
            },
            _ => SafeFileError::Io {
                path: shown.to_path_buf(),
                source: e,
            },
        });
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "FIFO",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFSOCK => "socket",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symbolic link",
        _ => "special file",
    }
}

/// Opens `root/rel` for reading: `root` is memtrial's own path (it may be a magic link
/// such as `/proc/PID/root`, followed on purpose); `rel` is walked one plain name at a
/// time without following any symbolic link; the file must be a regular file owned by
/// root or by one of `owners`. Never blocks on a FIFO, never opens a path with `..`.
pub(crate) fn open_beneath(root: &Path, rel: &Path, owners: &[u32]) -> Result<File, SafeFileError> {
    open_checked(root, rel, Some(owners))
}

/// [`open_beneath`] for a file of any owner: a file memtrial made below a directory of its
/// own, where the workload (which knows the directory) could have put something else.
pub(crate) fn open_regular_beneath(root: &Path, rel: &Path) -> Result<File, SafeFileError> {
    open_checked(root, rel, None)
}

/// The directory that holds `rel` beneath `root`, each directory on the way opened with
/// `open` (`O_PATH` to open a file in it, `O_RDONLY` to stat and create in it) without
/// following a link; with the path as shown in errors and the file's own name.
fn parent_beneath(
    root: &Path,
    rel: &Path,
    open: libc::c_int,
) -> Result<(PathBuf, OwnedFd, CString), SafeFileError> {
    let shown = root.join(rel);
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(c_name(&shown, n)?),
            _ => return Err(SafeFileError::BadPath { path: shown }),
        }
    }
    let Some(file_name) = names.pop() else {
        return Err(SafeFileError::BadPath { path: shown });
    };
    let root_c = CString::new(root.as_os_str().as_bytes()).map_err(|_| SafeFileError::BadPath {
        path: shown.clone(),
    })?;
    let mut dir = openat(None, &root_c, libc::O_PATH | libc::O_DIRECTORY, root)?;
    for n in &names {
        dir = openat(
            Some(&dir),
            n,
            open | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            &shown,
        )?;
    }
    Ok((shown, dir, file_name))
}

/// [`open_beneath`] with the owner checked only when `owners` is given.
fn open_checked(root: &Path, rel: &Path, owners: Option<&[u32]>) -> Result<File, SafeFileError> {
    let (shown, dir, file_name) = parent_beneath(root, rel, libc::O_PATH)?;
    let fd = openat(
        Some(&dir),
        &file_name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        &shown,
    )?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|source| SafeFileError::Io {
        path: shown.clone(),
        source,
    })?;
    if meta.mode() & libc::S_IFMT != libc::S_IFREG {
        return Err(SafeFileError::NotRegular {
            path: shown,
            kind: kind_of(meta.mode()),
        });
    }
    if let Some(owners) = owners {
        if meta.uid() != 0 && !owners.contains(&meta.uid()) {
            return Err(SafeFileError::Owner {
                path: shown,
                uid: meta.uid(),
                allowed: owners.to_vec(),
            });
        }
    }
    Ok(file)
}

/// A file [`create_new_beneath`] made: its directory held open, so that whether it is still
/// there, and its removal, never go through a path again.
#[derive(Debug)]
pub(crate) struct MadeBeneath {
    dir: File,
    name: CString,
}

impl MadeBeneath {
    /// The name is still there in its directory (a link is not followed).
    pub(crate) fn exists(&self) -> bool {
        // SAFETY: libc::stat is plain data; all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a directory descriptor we own, a NUL-terminated name, a stat to fill.
        unsafe {
            libc::fstatat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            ) == 0
        }
    }

    /// Removes the name from its directory (whatever now lies there under it; gone is fine).
    pub(crate) fn remove(&self) -> io::Result<()> {
        // SAFETY: a directory descriptor we own and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    }
}

/// Creates the new file `rel` beneath `root` (`/proc/PID/root`: a directory another process
/// controls), empty, mode 0600: every directory on the way opened without following a link,
/// the last one owned by root or one of `owners`, and the file made with `O_EXCL |
/// O_NOFOLLOW` (nothing already there, a link included, is opened or replaced).
pub(crate) fn create_new_beneath(
    root: &Path,
    rel: &Path,
    owners: &[u32],
) -> Result<MadeBeneath, SafeFileError> {
    let (shown, dir, file_name) = parent_beneath(root, rel, libc::O_RDONLY)?;
    let dir_file = File::from(dir);
    let meta = dir_file.metadata().map_err(|source| SafeFileError::Io {
        path: shown.clone(),
        source,
    })?;
    if meta.uid() != 0 && !owners.contains(&meta.uid()) {
        return Err(SafeFileError::Owner {
            path: shown,
            uid: meta.uid(),
            allowed: owners.to_vec(),
        });
    }
    // SAFETY: a NUL-terminated name and a directory descriptor we own; O_CREAT with a mode.
    let fd = unsafe {
        libc::openat(
            dir_file.as_raw_fd(),
            file_name.as_ptr(),
            libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_EXCL
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(SafeFileError::Io {
            path: shown,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else; closed here.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(MadeBeneath {
        dir: dir_file,
        name: file_name,
    })
}

/// At most `head` bytes from the start of `file` and at most `tail` bytes from its end
/// (as long as `fstat` says it is now), and whether the tail starts after the head's
/// start (`cut`: its first line may be partial). Two bounded reads, however large the
/// file is or grows.
pub(crate) fn read_head_and_tail(
    file: &File,
    head: usize,
    tail: usize,
) -> io::Result<(Vec<u8>, Vec<u8>, bool)> {
    let len = file.metadata()?.len();
    let mut h = vec![0u8; head];
    let n = read_at_most(file, &mut h, 0)?;
    h.truncate(n);
    let from = len.saturating_sub(tail as u64);
    let mut t = vec![0u8; tail.min(usize::try_from(len).unwrap_or(usize::MAX))];
    let n = read_at_most(file, &mut t, from)?;
    t.truncate(n);
    Ok((h, t, from > 0))
}

/// Fills `buf` from `offset` until it is full or the file ends: at most `buf.len()` bytes.
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Which end of the file a bounded read keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The first `limit` bytes.
    Head,
    /// The last `limit` bytes (the end of a log).
    Tail,
}

/// At most `limit` bytes of the regular file at `path` (its last component not followed
/// if it is a link), from its start or its end, and never more than it held at open.
pub fn read_bounded(path: &Path, limit: u64, end: End) -> Result<Vec<u8>, SafeFileError> {
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) if !d.as_os_str().is_empty() => (d, Path::new(n)),
        (_, Some(n)) => (Path::new("."), Path::new(n)),
        _ => {
            return Err(SafeFileError::BadPath {
                path: path.to_path_buf(),
            })
        }
    };
    read_opened(path, open_checked(dir, name, None)?, limit, end)
}

/// Like [`read_bounded`], for `root/rel`: no component below `root` may be a link.
pub fn read_bounded_beneath(
    root: &Path,
    rel: &Path,
    limit: u64,
    end: End,
) -> Result<Vec<u8>, SafeFileError> {
    read_opened(&root.join(rel), open_checked(root, rel, None)?, limit, end)
}

fn read_opened(
    path: &Path,
    mut file: File,
    limit: u64,
    end: End,
) -> Result<Vec<u8>, SafeFileError> {
    let err = |source| SafeFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(err)?.len();
    let want = len.min(limit);
    if end == End::Tail {
        file.seek(SeekFrom::Start(len - want)).map_err(err)?;
    }
    let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(0).min(1 << 20));
    file.take(want).read_to_end(&mut buf).map_err(err)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_made_beneath_a_root_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("d")).unwrap();
        // SAFETY: geteuid takes nothing and cannot fail.
        let me = unsafe { libc::geteuid() };
        let made = create_new_beneath(root, Path::new("d/x.request"), &[me]).unwrap();
        assert!(root.join("d/x.request").is_file());
        assert!(made.exists());
        // Already there: not replaced.
        assert!(create_new_beneath(root, Path::new("d/x.request"), &[me]).is_err());
        // Removed through the directory held open, even once the path leads elsewhere.
        std::fs::rename(root.join("d"), root.join("moved")).unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/x.request"), b"").unwrap();
        made.remove().unwrap();
        assert!(!made.exists());
        assert!(!root.join("moved/x.request").exists());
        assert!(root.join("d/x.request").exists());
        made.remove().unwrap();
        // A link, as the file or on the way: refused.
        std::os::unix::fs::symlink("/etc/passwd", root.join("d/l")).unwrap();
        assert!(create_new_beneath(root, Path::new("d/l"), &[me]).is_err());
        std::os::unix::fs::symlink(root.join("d"), root.join("via")).unwrap();
        assert!(matches!(
            create_new_beneath(root, Path::new("via/y"), &[me]),
            Err(SafeFileError::NotPlain { .. })
        ));
        assert!(create_new_beneath(root, Path::new("../y"), &[me]).is_err());
        if me != 0 {
            assert!(matches!(
                create_new_beneath(root, Path::new("d/z"), &[me + 1]),
                Err(SafeFileError::Owner { .. })
            ));
        }
    }
    use std::os::unix::fs::symlink;

    fn mkfifo(p: &Path) {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    fn me() -> u32 {
        // SAFETY: getuid cannot fail.
        unsafe { libc::geteuid() }
    }

    #[test]
    fn a_regular_file_of_ours_is_opened_and_read_bounded() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(d.path().join("a/f"), &body).unwrap();
        let f = open_beneath(d.path(), Path::new("a/f"), &[me()]).unwrap();
        let (h, t, cut) = read_head_and_tail(&f, 100, 1000).unwrap();
        assert_eq!(h, body[..100]);
        assert_eq!(t, body[body.len() - 1000..]);
        assert!(cut);
        let (h, t, cut) = read_head_and_tail(&f, 100_000, 100_000).unwrap();
        assert_eq!((h.len(), t.len(), cut), (20_000, 20_000, false));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        mkfifo(&d.path().join("p"));
        let e = open_beneath(d.path(), Path::new("p"), &[me()]).unwrap_err();
        assert!(
            matches!(e, SafeFileError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );
    }

    #[test]
    fn symbolic_links_are_never_followed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("secret"), "secret").unwrap();
        std::fs::create_dir(d.path().join("real")).unwrap();
        symlink(d.path().join("secret"), d.path().join("link")).unwrap();
        symlink(d.path().join("real"), d.path().join("dirlink")).unwrap();
        std::fs::write(d.path().join("real/f"), "x").unwrap();
        for rel in ["link", "dirlink/f"] {
            let e = open_beneath(d.path(), Path::new(rel), &[me()]).unwrap_err();
            assert!(matches!(e, SafeFileError::NotPlain { .. }), "{rel}: {e}");
        }
        assert!(open_beneath(d.path(), Path::new("real/f"), &[me()]).is_ok());
    }

    #[test]
    fn devices_directories_and_bad_paths_are_refused() {
        let e = open_beneath(Path::new("/dev"), Path::new("zero"), &[]).unwrap_err();
        assert!(
            matches!(
                e,
                SafeFileError::NotRegular {
                    kind: "character device",
                    ..
                }
            ),
            "{e}"
        );
        let e = open_beneath(Path::new("/"), Path::new("tmp"), &[]).unwrap_err();
        assert!(matches!(e, SafeFileError::NotRegular { .. }), "{e}");
        for rel in ["", "../etc/passwd", "a/../b", "/etc/passwd", "./x"] {
            let e = open_beneath(Path::new("/tmp"), Path::new(rel), &[]).unwrap_err();
            assert!(matches!(e, SafeFileError::BadPath { .. }), "{rel:?}: {e}");
        }
        let e = open_beneath(Path::new("/tmp"), Path::new("no-such-file-here-x"), &[]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_file_of_another_owner_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), "x").unwrap();
        if me() == 0 {
            // Root's file is accepted for anyone; someone else's is not.
            let c = CString::new(d.path().join("f").as_os_str().as_bytes()).unwrap();
            // SAFETY: a valid path string.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        }
        let e = open_beneath(d.path(), Path::new("f"), &[12345]).unwrap_err();
        assert!(matches!(e, SafeFileError::Owner { .. }), "{e}");
    }

    #[test]
    fn reads_the_head_or_the_tail_of_a_regular_file_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_bounded(&p, 4, End::Head).unwrap(), b"0123");
        assert_eq!(read_bounded(&p, 4, End::Tail).unwrap(), b"6789");
        assert_eq!(read_bounded(&p, 100, End::Tail).unwrap(), b"0123456789");
        assert_eq!(read_bounded(&p, 0, End::Head).unwrap(), b"");
    }

    #[test]
    fn a_symbolic_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"secret").unwrap();
        let link = dir.path().join("log");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let e = read_bounded(&link, 100, End::Tail).unwrap_err();
        assert!(matches!(e, SafeFileError::NotPlain { .. }), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_bounded(&fifo, 100, End::Head).unwrap_err();
        assert!(
            matches!(e, SafeFileError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );
    }

    #[test]
    fn devices_and_directories_are_refused() {
        for (p, kind) in [("/dev/zero", "character device"), ("/tmp", "directory")] {
            let e = read_bounded(Path::new(p), 100, End::Head).unwrap_err();
            assert!(
                matches!(e, SafeFileError::NotRegular { kind: k, .. } if k == kind),
                "{p}: {e}"
            );
        }
    }

    #[test]
    fn beneath_a_directory_no_component_may_be_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("logs/exp-1")).unwrap();
        std::fs::write(root.join("logs/exp-1/run.stderr"), b"own\n").unwrap();
        let rel = Path::new("logs/exp-1/run.stderr");
        assert_eq!(
            read_bounded_beneath(root, rel, 100, End::Tail).unwrap(),
            b"own\n"
        );
        // The same file name below a directory replaced by a link to elsewhere.
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("exp-2")).unwrap();
        std::fs::write(elsewhere.join("exp-2/run.stderr"), b"secret").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("exp-2"), root.join("logs/exp-2")).unwrap();
        let e = read_bounded_beneath(root, Path::new("logs/exp-2/run.stderr"), 100, End::Tail)
            .unwrap_err();
        assert!(matches!(e, SafeFileError::NotPlain { .. }), "{e}");
        for bad in [
            "../elsewhere/exp-2/run.stderr",
            "/etc/hostname",
            "",
            "logs/exp-1",
        ] {
            let e = read_bounded_beneath(root, Path::new(bad), 100, End::Head).unwrap_err();
            assert!(
                matches!(
                    e,
                    SafeFileError::BadPath { .. }
                        | SafeFileError::NotPlain { .. }
                        | SafeFileError::NotRegular { .. }
                ),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_proc_pseudo_file_reads_as_the_empty_file_it_says_it_is() {
        assert_eq!(
            read_bounded(Path::new("/proc/self/environ"), 1 << 20, End::Tail).unwrap(),
            b""
        );
    }
}
