//! Transparent huge pages: the host's mode and what a process may use.
//!
//! `/sys/kernel/mm/transparent_hugepage/enabled` says when the kernel backs anonymous
//! memory with 2 MiB pages: `always` (every large enough mapping), `madvise` (only ranges a
//! program marked with `madvise(MADV_HUGEPAGE)`, which `smaps` shows as `hg` in `VmFlags`)
//! or `never`; `defrag` says how hard a fault tries to find one. A process can turn THP off
//! for itself and its children (`prctl(PR_SET_THP_DISABLE)`, kept across `exec`:
//! `THP_enabled: 0` in its `status`). `AnonHugePages` in `smaps` is the share of its
//! anonymous memory in huge pages.

use serde::{Deserialize, Serialize};

const SYS: &str = "/sys/kernel/mm/transparent_hugepage";

/// The host's THP settings, as the kernel names them (`always`, `madvise`, `never`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThpMode {
    pub enabled: String,
    pub defrag: String,
}

impl ThpMode {
    /// Huge pages go only where a program asks for them (`madvise`).
    pub fn is_madvise(&self) -> bool {
        self.enabled == "madvise"
    }

    /// `enabled madvise, defrag madvise`.
    pub fn describe(&self) -> String {
        format!("enabled {}, defrag {}", self.enabled, self.defrag)
    }
}

/// The selected word of a sysfs choice line (`always [madvise] never` → `madvise`).
pub fn selected(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = start + text[start..].find(']')?;
    let word = text[start + 1..end].trim();
    (!word.is_empty() && word.len() <= 32).then(|| word.to_string())
}

/// This host's THP mode; `None` when the kernel has no THP (or sysfs is not mounted).
pub fn host_mode() -> Option<ThpMode> {
    let read = |f: &str| {
        std::fs::read_to_string(format!("{SYS}/{f}"))
            .ok()
            .and_then(|t| selected(&t))
    };
    Some(ThpMode {
        enabled: read("enabled")?,
        defrag: read("defrag").unwrap_or_else(|| "unknown".into()),
    })
}

/// The size of a PMD huge page here (2 MiB on x86-64), when the kernel says.
pub fn huge_page_size() -> Option<u64> {
    std::fs::read_to_string(format!("{SYS}/hpage_pmd_size"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selected_word_is_the_bracketed_one() {
        assert_eq!(
            selected("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(selected("always madvise never"), None);
        assert_eq!(selected("[]"), None);
        assert_eq!(selected("]["), None);
    }

    #[test]
    fn this_host_has_a_mode() {
        // Debian's kernels have THP; the machine's mode is whatever it is.
        if let Some(m) = host_mode() {
            assert!(
                ["always", "madvise", "never"].contains(&m.enabled.as_str()),
                "{m:?}"
            );
            assert!(m.describe().starts_with("enabled "));
        }
    }
}
