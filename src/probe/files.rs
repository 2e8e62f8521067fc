//! Files memtrial hands to the workload's processes (the allocator probe's library, a
//! runtime probe's script): embedded in the binary, written once to a directory of our
//! own, named by their content so that two memtrial builds never overwrite each other's;
//! or written where the user asks ([`write_atomic`]), for a process memtrial does not start.

use std::path::{Path, PathBuf};

/// Writes `bytes` to `<tmp>/memtrial-<uid>/<stem>-<hash>.<ext>` (mode 0755) unless that
/// file already holds them, and returns its path. The directory is created 0755 so that a
/// workload which drops privileges can still read it. One that is not this user's own
/// (another user may create `/tmp/memtrial-<uid>` first, or make it a symlink, or leave it
/// writable to others) is never used, nor needed: a directory of this user's own is used
/// instead, `<tmp>/memtrial-<uid>.XXXXXX`, made with a name nobody can foresee (an earlier
/// one of these is reused), so that the probe is never lost to another user's directory.
pub fn install(stem: &str, ext: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    install_in(&std::env::temp_dir(), stem, ext, bytes)
}

fn install_in(base: &Path, stem: &str, ext: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    let dir = own_dir(base)?;
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let path = dir.join(format!("{stem}-{hash:016x}.{ext}"));
    if std::fs::read(&path).is_ok_and(|b| b == bytes) {
        return Ok(path);
    }
    write_atomic(&path, bytes, 0o755)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Whether `dir` is a directory (not a symlink) this user owns that nobody else may write to.
fn is_own(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
}

/// This user's directory under `base`: `memtrial-<uid>` when it is this user's own (made
/// if missing), else an earlier `memtrial-<uid>.XXXXXX` of this user's, else a new one.
fn own_dir(base: &Path) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = base.join(format!("memtrial-{uid}"));
    match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    if is_own(&dir, uid) {
        return Ok(dir);
    }
    let prefix = format!("memtrial-{uid}.");
    if let Ok(entries) = std::fs::read_dir(base) {
        for e in entries.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with(&prefix) && is_own(&p, uid) {
                return Ok(p);
            }
        }
    }
    // mkdtemp: a name nobody can foresee, made 0700 by this user (then opened to reading).
    let template = base.join(format!("{prefix}XXXXXX"));
    let mut bytes = std::ffi::CString::new(template.as_os_str().as_encoded_bytes())
        .map_err(|e| format!("{}: {e}", template.display()))?
        .into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template ending in XXXXXX, which mkdtemp fills in.
    if unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) }.is_null() {
        return Err(format!(
            "{} is not a directory of this user's own, and no other could be made in {}: {}",
            dir.display(),
            base.display(),
            std::io::Error::last_os_error()
        ));
    }
    bytes.pop();
    let made = PathBuf::from(std::ffi::OsString::from_vec(bytes));
    std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", made.display()))?;
    Ok(made)
}

/// Why a file could not be written where the user asked: each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("is a directory; name the file to write in it, e.g. {suggestion}")]
    IsDirectory { suggestion: PathBuf },
    #[error("the directory {dir} does not exist; create it first (mkdir -p {dir})")]
    NoDirectory { dir: PathBuf },
    #[error("{dir} is not a directory; name a file in a directory")]
    NotADirectory { dir: PathBuf },
    #[error(
        "no permission to write in {dir} ({source}); choose a directory you may write to, \
         or run as a user who may"
    )]
    Permission {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write in {dir}: {source}")]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Writes `bytes` to `path` whole or not at all: a temporary file in the same directory,
/// mode `mode` (whatever the umask), synced, then renamed over `path` (a link at `path`
/// is replaced, not followed). Returns the path written, absolute.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<PathBuf, WriteError> {
    use std::io::ErrorKind;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = match path.file_name() {
        Some(n) if std::fs::metadata(path).map_or(true, |m| !m.is_dir()) => n,
        _ => {
            return Err(WriteError::IsDirectory {
                suggestion: path.join("libmemtrial-probe.so"),
            })
        }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(WriteError::NotADirectory { dir }),
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(WriteError::NoDirectory { dir }),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Err(WriteError::NotADirectory { dir })
        }
        Err(source) => return Err(classify(dir, source)),
    }
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
    };
    let write = || -> std::io::Result<()> {
        // Created new, so a link planted at the name is never followed; one left by a
        // killed process of the same PID is removed (the link itself) and made again.
        let mut f = match create() {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::fs::remove_file(&tmp)?;
                create()?
            }
            other => other?,
        };
        let done = (|| {
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            std::io::Write::write_all(&mut f, bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done
    };
    write().map_err(|e| classify(dir.clone(), e))?;
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    Ok(dir.join(name))
}

fn classify(dir: PathBuf, source: std::io::Error) -> WriteError {
    match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => WriteError::Permission { dir, source },
        _ => WriteError::Io { dir, source },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn installs_once_by_content() {
        let a = super::install("memtrial-test", "txt", b"one").unwrap();
        let b = super::install("memtrial-test", "txt", b"one").unwrap();
        let c = super::install("memtrial-test", "txt", b"two").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(std::fs::read(&c).unwrap(), b"two");
    }

    /// Issue 38, item 13: another user's `memtrial-<uid>` (any local user may create it in
    /// /tmp first) is never used, and the probe is not lost to it: a directory of this
    /// user's own with a name nobody can foresee is, and then reused.
    #[test]
    fn another_users_directory_is_left_alone_and_the_probe_kept() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = tempfile::tempdir().unwrap();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let taken = base.path().join(format!("memtrial-{uid}"));
        std::fs::create_dir(&taken).unwrap();
        // Writable by anyone: what another user's (or a planted) directory looks like to us.
        std::fs::set_permissions(&taken, std::fs::Permissions::from_mode(0o777)).unwrap();
        let a = super::install_in(base.path(), "memtrial-test", "txt", b"one").unwrap();
        assert_ne!(a.parent().unwrap(), taken);
        assert!(a
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("memtrial-{uid}.")));
        let m = std::fs::metadata(a.parent().unwrap()).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (uid, 0o755));
        assert_eq!(std::fs::read(&a).unwrap(), b"one");
        assert_eq!(
            std::fs::read_dir(&taken).unwrap().count(),
            0,
            "wrote into it"
        );
        // Again: the same directory, not another.
        let b = super::install_in(base.path(), "memtrial-test", "txt", b"two").unwrap();
        assert_eq!(a.parent(), b.parent());
        // A symlink planted there is not followed either.
        let base2 = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(base.path(), base2.path().join(format!("memtrial-{uid}")))
            .unwrap();
        let c = super::install_in(base2.path(), "memtrial-test", "txt", b"one").unwrap();
        assert!(c.starts_with(base2.path()) && !c.starts_with(base.path()));
    }

    #[test]
    fn writes_whole_with_its_mode_or_says_why_not() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lib.so");
        std::fs::write(&p, b"old").unwrap();
        let got = super::write_atomic(&p, b"new bytes", 0o644).unwrap();
        assert_eq!(got, std::fs::canonicalize(&p).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"new bytes");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        // Nothing left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let e = super::write_atomic(dir.path(), b"x", 0o644).unwrap_err();
        assert!(matches!(e, super::WriteError::IsDirectory { .. }), "{e}");
        let e = super::write_atomic(&dir.path().join("no/such/x.so"), b"x", 0o644).unwrap_err();
        assert!(
            e.to_string().contains("does not exist; create it first"),
            "{e}"
        );
        let e = super::write_atomic(&p.join("x.so"), b"x", 0o644).unwrap_err();
        assert!(matches!(e, super::WriteError::NotADirectory { .. }), "{e}");
    }
}
