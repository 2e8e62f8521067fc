//! Facts about the machine an experiment ran on.

use serde::{Deserialize, Serialize};

/// The host, recorded with every experiment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// The hostname, or `MEMTRIAL_HOST` when set (absent from some old records).
    #[serde(default)]
    pub hostname: String,
    /// Online CPUs (what glibc uses to size its arena limit).
    pub cpus: u32,
    /// Total memory in bytes (`MemTotal` of `/proc/meminfo`).
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The C library version (`gnu_get_libc_version`).
    pub glibc: String,
    /// The limits of the cgroup memtrial itself ran in (a container's, a pod's): absent
    /// from records written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<HostLimits>,
}

/// The limits of memtrial's own cgroup: what a container or a Kubernetes pod gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLimits {
    /// CPU quota: microseconds of CPU time per period (`None`: no quota).
    #[serde(default)]
    pub cpu_quota_us: Option<u64>,
    #[serde(default)]
    pub cpu_period_us: Option<u64>,
    /// The memory limit in bytes (`None`: no limit).
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
    /// The CPUs of its cpuset (`0-3`) and how many they are (`None`: no cpuset controller).
    #[serde(default)]
    pub cpuset: Option<String>,
    #[serde(default)]
    pub cpuset_cpus: Option<u32>,
}

impl HostLimits {
    /// The quota in CPUs (quota / period).
    pub(crate) fn quota_cpus(&self) -> Option<f64> {
        match (self.cpu_quota_us, self.cpu_period_us) {
            (Some(q), Some(p)) if p > 0 => Some(q as f64 / p as f64),
            _ => None,
        }
    }

    /// The limits of the cgroup of `/proc/self`, read with the `inspect` readers.
    pub fn detect() -> HostLimits {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let c = crate::linux::container::read_container(
            std::process::id() as i32,
            &cgroup,
            &status,
            online_cpus(),
        );
        let quota = c.cpu.as_ref().and_then(|g| g.quota);
        HostLimits {
            cpu_quota_us: quota.map(|q| q.quota_us),
            cpu_period_us: quota.map(|q| q.period_us),
            memory_limit_bytes: c.memory_limit_bytes,
            cpuset: c.cpuset.as_ref().map(|s| s.cpus.clone()),
            cpuset_cpus: c.cpuset.as_ref().map(|s| s.count),
        }
    }
}

/// The environment variable that replaces the recorded hostname (a Kubernetes pod's own
/// name changes with every pod; its Job's name does not).
pub(crate) const HOST_ENV: &str = "MEMTRIAL_HOST";

impl HostInfo {
    /// This machine; `MEMTRIAL_HOST`, when set and not empty, is the recorded hostname.
    pub fn detect() -> HostInfo {
        let named = std::env::var(HOST_ENV)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        HostInfo {
            hostname: named.unwrap_or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            }),
            cpus: online_cpus(),
            memory_bytes: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|t| parse_meminfo_total(&t))
                .unwrap_or(0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            glibc: glibc_version(),
            container: Some(HostLimits::detect()),
        }
    }

    /// A stable identity of these facts (hex SHA-256 of their JSON): two records of the
    /// same machine under the same limits name the same host.
    pub(crate) fn identity(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        crate::units::sha256_hex(json.as_bytes())
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
pub(crate) fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The version of the C library memtrial itself runs on (the host's glibc).
pub(crate) fn glibc_version() -> String {
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
