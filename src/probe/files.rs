//! Files memtrial hands to the workload's processes (the allocator probe's library, a
//! runtime probe's script): embedded in the binary, written once to a directory of our
//! own, named by their content so that two memtrial builds never overwrite each other's.

use std::path::PathBuf;

/// Writes `bytes` to `<tmp>/memtrial-<uid>/<stem>-<hash>.<ext>` (mode 0755) unless that
/// file already holds them, and returns its path. The directory is created 0755 so that a
/// workload which drops privileges can still read it; it is refused if another user owns
/// it, anyone else may write to it, or it is a symlink.
pub fn install(stem: &str, ext: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("memtrial-{uid}"));
    match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory owned by this user and writable only by it; remove it",
            dir.display()
        ));
    }
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let path = dir.join(format!("{stem}-{hash:016x}.{ext}"));
    if std::fs::read(&path).is_ok_and(|b| b == bytes) {
        return Ok(path);
    }
    let tmp = dir.join(format!(".{stem}-{}.{ext}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
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
}
