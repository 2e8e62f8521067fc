//! Finding a run's JVMs, their version, and the `jcmd` that can read them.

use std::path::{Path, PathBuf};

/// Whether `pid` runs a JVM: its executable is `java`, or it maps `libjvm.so`. With
/// the executable's path (as the process sees it) when it is one.
pub(super) fn jvm_exe(pid: i32) -> Option<Option<PathBuf>> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let name = exe
        .as_ref()
        .and_then(|e| e.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    if name
        .as_deref()
        .map(|n| n.strip_suffix(" (deleted)").unwrap_or(n))
        == Some("java")
    {
        return Some(exe);
    }
    let maps = crate::linux::proc::read_maps_text(pid).ok()?;
    maps.lines()
        .any(|l| l.ends_with("/libjvm.so"))
        .then_some(exe)
}

/// A file as memtrial sees it, for a path as the process `pid` sees it.
pub(super) fn through_root(pid: i32, path: &Path) -> PathBuf {
    Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path))
}

/// `JAVA_VERSION` of the JDK the executable belongs to (its `release` file).
pub(super) fn version_of(pid: i32, exe: &Path) -> Option<String> {
    let home = exe.parent()?.parent()?;
    let text = [home.join("release"), home.join("../release")]
        .iter()
        .find_map(|p| std::fs::read_to_string(through_root(pid, p)).ok())?;
    parse_release(&text)
}

/// `JAVA_VERSION="17.0.15"` of a JDK's `release` file.
pub(crate) fn parse_release(text: &str) -> Option<String> {
    let v = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("JAVA_VERSION="))?
        .trim()
        .trim_matches('"');
    (!v.is_empty()).then(|| v.chars().take(64).collect())
}

pub(super) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where jcmd is: `$JAVA_HOME/bin`, then beside the JVM's own executable, then `PATH`.
pub(super) fn find_jcmd(pid: i32, exe: Option<&Path>) -> Option<PathBuf> {
    let home = std::env::var_os("JAVA_HOME").map(|h| PathBuf::from(h).join("bin/jcmd"));
    let beside = exe.and_then(Path::parent).map(|d| d.join("jcmd"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    home.into_iter()
        .chain(
            beside
                .iter()
                .flat_map(|b| [b.clone(), through_root(pid, b)]),
        )
        .chain(std::env::split_paths(&path).map(|d| d.join("jcmd")))
        .find(|p| is_executable(p))
}

/// Whether the hex mask `SigCgt:` of `/proc/PID/status` has SIGQUIT.
pub(crate) fn catches_sigquit(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << (libc::SIGQUIT - 1)) != 0)
}

/// Whether jcmd may attach: it sends SIGQUIT unless the JVM's attach socket exists, and a
/// JVM that does not catch SIGQUIT (not yet, or `-Xrs`) dies of it.
pub(super) fn attach_safe(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    if catches_sigquit(&status) == Some(true) {
        return true;
    }
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("");
    !nspid.is_empty() && through_root(pid, Path::new(&format!("/tmp/.java_pid{nspid}"))).exists()
}
