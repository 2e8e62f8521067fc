//! Which glibc a process runs: read from the `libc.so.6` it has mapped, not from
//! memtrial's own (`gnu_get_libc_version` answers for memtrial only).
//!
//! glibc's `libc.so.6` carries its banner, e.g. `GNU C Library (Debian GLIBC
//! 2.36-9+deb12u4) stable release version 2.36.`; old layouts name the file
//! `libc-2.31.so`. A static executable carries no banner: its glibc is the build
//! machine's, which we cannot know, so the version is left unknown and said why.

use std::path::Path;

use serde::Serialize;

/// Where the version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionSource {
    /// The banner inside the mapped `libc.so.6`.
    Banner,
    /// The file name (`libc-2.31.so`).
    FileName,
}

/// The glibc version of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlibcVersion {
    /// `2.36`.
    pub version: String,
    /// The full banner (`GNU C Library (Debian GLIBC 2.36-9+deb12u4) ...`), when read.
    pub banner: Option<String>,
    /// The mapped library it was read from.
    pub library: String,
    pub source: VersionSource,
}

const MARK: &[u8] = b"GNU C Library ";

/// The banner and its version (`... release version 2.36.`), from libc bytes.
pub(crate) fn parse_banner(bytes: &[u8]) -> Option<(String, String)> {
    let at = bytes.windows(MARK.len()).position(|w| w == MARK)?;
    let rest = &bytes[at..];
    let end = rest
        .iter()
        .position(|b| *b == 0 || *b == b'\n')
        .unwrap_or(rest.len())
        .min(200);
    let banner = String::from_utf8_lossy(&rest[..end]).trim().to_string();
    let v = banner.split("version ").nth(1)?;
    let version: String = v
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let version = version.trim_end_matches('.').to_string();
    (!version.is_empty()).then_some((banner, version))
}

/// `2.31` from `/lib/x86_64-linux-gnu/libc-2.31.so`.
pub(crate) fn version_from_file_name(path: &str) -> Option<String> {
    let name = path.rsplit('/').next()?;
    let v = name.strip_prefix("libc-")?.strip_suffix(".so")?;
    (!v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| v.to_string())
}

/// Is this mapped library the C library?
pub(crate) fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "libc.so.6" || version_from_file_name(path).is_some()
}

/// The glibc version of `pid`, from the libc among its mapped `libs`. Read through
/// `/proc/PID/root` so a container's own libc is the one read.
pub fn detect(pid: i32, libs: &[String]) -> Option<GlibcVersion> {
    let lib = libs.iter().find(|l| is_libc(l))?;
    let in_root = format!("/proc/{pid}/root{lib}");
    let bytes = std::fs::read(&in_root)
        .or_else(|_| std::fs::read(Path::new(lib)))
        .ok();
    if let Some((banner, version)) = bytes.as_deref().and_then(parse_banner) {
        return Some(GlibcVersion {
            version,
            banner: Some(banner),
            library: lib.clone(),
            source: VersionSource::Banner,
        });
    }
    version_from_file_name(lib).map(|version| GlibcVersion {
        version,
        banner: None,
        library: lib.clone(),
        source: VersionSource::FileName,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_of_debian_12() {
        let bytes = b"\0\0xxGNU C Library (Debian GLIBC 2.36-9+deb12u4) stable release version 2.36.\nCopyright";
        let (banner, v) = parse_banner(bytes).unwrap();
        assert_eq!(v, "2.36");
        assert_eq!(
            banner,
            "GNU C Library (Debian GLIBC 2.36-9+deb12u4) stable release version 2.36."
        );
        assert_eq!(parse_banner(b"no banner here"), None);
    }

    #[test]
    fn old_file_names() {
        assert_eq!(
            version_from_file_name("/lib/x86_64-linux-gnu/libc-2.31.so").as_deref(),
            Some("2.31")
        );
        assert_eq!(version_from_file_name("/usr/lib/libc.so.6"), None);
        assert!(is_libc("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!is_libc("/usr/lib/x86_64-linux-gnu/libcrypt.so.1"));
    }

    #[test]
    fn this_process_libc_matches_gnu_get_libc_version() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let maps = crate::linux::maps::parse_maps(&maps).unwrap();
        let libs = crate::linux::maps::mapped_libraries(&maps);
        let v = detect(std::process::id() as i32, &libs).expect("libc mapped");
        assert_eq!(v.version, crate::linux::host::glibc_version());
    }
}
