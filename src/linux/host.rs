//! Facts about the machine an experiment ran on.

use serde::{Deserialize, Serialize};

/// The host, recorded with every experiment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    /// Online CPUs (what glibc uses to size its arena limit).
    pub cpus: u32,
    /// Total memory in bytes (`MemTotal` of `/proc/meminfo`).
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The C library version (`gnu_get_libc_version`).
    pub glibc: String,
}

impl HostInfo {
    pub fn detect() -> HostInfo {
        HostInfo {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            cpus: online_cpus(),
            memory_bytes: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|t| parse_meminfo_total(&t))
                .unwrap_or(0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            glibc: glibc_version(),
        }
    }
}

/// Online CPUs, as `sysconf(_SC_NPROCESSORS_ONLN)` reports them.
pub fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as u32
    } else {
        1
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The version of the C library memtrial itself runs on (the host's glibc).
pub fn glibc_version() -> String {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    unsafe {
        let p = libc::gnu_get_libc_version();
        if p.is_null() {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24597188 kB\nMemFree:        23000000 kB\n";
        assert_eq!(parse_meminfo_total(t), Some(24597188 * 1024));
        assert_eq!(parse_meminfo_total("nothing"), None);
    }

    #[test]
    fn detects_this_host() {
        let h = HostInfo::detect();
        assert!(h.cpus >= 1);
        assert!(h.memory_bytes > 0);
        assert!(h.glibc.starts_with("2."), "{}", h.glibc);
    }
}
