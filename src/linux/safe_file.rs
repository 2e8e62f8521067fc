//! Reading a file memtrial made, without trusting what sits at its path now.
//!
//! The one way to read a log or report file whose path could have been replaced: opened
//! with `O_NOFOLLOW` (a symbolic link is refused, not followed) and `O_NONBLOCK` (a FIFO
//! cannot make the open wait for a writer), checked to be a regular file on the open
//! descriptor (`fstat`: no FIFO, socket or device such as `/dev/zero`), and read no
//! further than a limit nor than the size the file had when it was opened (a pseudo-file
//! of `/proc`, which says it is empty, reads as empty).
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

/// At most `limit` bytes of the regular file at `path`, from its start or its end, never
/// more than its size when opened. See the module's notes for what is refused.
pub fn read_bounded(path: &Path, limit: u64, end: End) -> Result<Vec<u8>, SafeFileError> {
    let (mut file, len) = open_regular(path)?;
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
    fn a_proc_pseudo_file_reads_as_the_empty_file_it_says_it_is() {
        assert_eq!(
            read_bounded(Path::new("/proc/self/environ"), 1 << 20, End::Tail).unwrap(),
            b""
        );
    }
}
