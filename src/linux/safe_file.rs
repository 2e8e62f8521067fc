//! Reading a file memtrial made, without trusting what sits at its path now.
//!
//! The one way to read a log or report file whose path could have been replaced: opened
//! with `O_NOFOLLOW` (a symbolic link is refused, not followed) and `O_NONBLOCK` (a FIFO
//! cannot make the open wait for a writer), checked to be a regular file on the open
//! descriptor (`fstat`: no FIFO, socket or device such as `/dev/zero`), and read no
//! further than a limit nor than the size the file had when it was opened (a pseudo-file
//! of `/proc`, which says it is empty, reads as empty). [`read_bounded_beneath`] also
//! refuses a link anywhere below a directory of memtrial's own (its log directories).
//!
//! The caller still decides *which* path to open: only one memtrial made under its own
//! directories, never one named by a record or by another process.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Which end of the file a bounded read keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The first `limit` bytes.
    Head,
    /// The last `limit` bytes (the end of a log).
    Tail,
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    #[error("cannot open {path} (a symbolic link is not followed): {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is a {kind}, not a regular file: not read")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens `path` for reading when it is a regular file reached without following a final
/// symbolic link and without waiting; returns the file and its size at open.
pub fn open_regular(path: &Path) -> Result<(File, u64), SafeFileError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| SafeFileError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    regular(path, file)
}

/// Checks the opened `file` is a regular file; returns it with its size.
fn regular(path: &Path, file: File) -> Result<(File, u64), SafeFileError> {
    let meta = file.metadata().map_err(|source| SafeFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(SafeFileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    Ok((file, meta.len()))
}

/// Opens `root/rel` when every component of `rel` is a plain name (no `..`, not
/// absolute) and none is a symbolic link — the directories below `root` included, each
/// opened `O_NOFOLLOW` from the one above — and the file is regular. For a file memtrial
/// made below a directory of its own (`root`), whose subdirectories could have been
/// replaced by links.
pub fn open_regular_beneath(root: &Path, rel: &Path) -> Result<(File, u64), SafeFileError> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Component;
    let full = root.join(rel);
    let open_err = |source| SafeFileError::Open {
        path: full.clone(),
        source,
    };
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(open_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path below the directory is not made of plain names",
            ))),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, dirs)) = names.split_last() else {
        return Err(open_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no file name",
        )));
    };
    let mut dir: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)
        .map_err(open_err)?
        .into();
    let at = |dir: &OwnedFd, name: &std::ffi::OsStr, flags: i32| {
        let c = std::ffi::CString::new(name.as_encoded_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a valid directory descriptor and a NUL-terminated name; the descriptor
        // returned is owned by the OwnedFd below alone.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is not owned elsewhere.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    for name in dirs {
        dir = at(
            &dir,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
        .map_err(open_err)?;
    }
    let fd = at(
        &dir,
        last,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
    )
    .map_err(open_err)?;
    regular(&full, File::from(fd))
}

/// At most `limit` bytes of the regular file at `path`, from its start or its end, never
/// more than its size when opened. See the module's notes for what is refused.
pub fn read_bounded(path: &Path, limit: u64, end: End) -> Result<Vec<u8>, SafeFileError> {
    read_opened(path, open_regular(path)?, limit, end)
}

/// Like [`read_bounded`], for `root/rel` opened by [`open_regular_beneath`].
pub fn read_bounded_beneath(
    root: &Path,
    rel: &Path,
    limit: u64,
    end: End,
) -> Result<Vec<u8>, SafeFileError> {
    read_opened(
        &root.join(rel),
        open_regular_beneath(root, rel)?,
        limit,
        end,
    )
}

fn read_opened(
    path: &Path,
    (mut file, len): (File, u64),
    limit: u64,
    end: End,
) -> Result<Vec<u8>, SafeFileError> {
    let want = len.min(limit);
    let err = |source| SafeFileError::Read {
        path: path.to_path_buf(),
        source,
    };
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
        assert!(matches!(e, SafeFileError::Open { .. }), "{e}");
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
        for (p, kind) in [("/dev/zero", "character device"), ("/", "directory")] {
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
        assert!(matches!(e, SafeFileError::Open { .. }), "{e}");
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
                    SafeFileError::Open { .. } | SafeFileError::NotRegular { .. }
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
