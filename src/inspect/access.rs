//! Whether memtrial may read a process (owner, ptrace capability, kernel threads) and
//! what to do when it may not.

use super::*;

/// `PF_KTHREAD` in the flags of `/proc/PID/stat`.
pub(super) const PF_KTHREAD: u64 = 0x0020_0000;
/// Whether the process is a kernel thread: `Kthread: 1` in its status (kernel 6.8+),
/// else `PF_KTHREAD` in the flags of its stat (field 9).
pub(super) fn is_kernel_thread(stat_text: &str, status_text: &str) -> bool {
    if let Some(v) = status_text.lines().find_map(|l| l.strip_prefix("Kthread:")) {
        return v.trim() == "1";
    }
    stat_text
        .rfind(')')
        .and_then(|close| stat_text[close + 1..].split_ascii_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}
/// memtrial's effective UID.
pub(super) fn our_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { ::libc::geteuid() }
}
/// The real UID of a process, from the `Uid:` line of its status.
pub(super) fn owner_uid(status_text: &str) -> Option<u32> {
    status_text
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}
/// Whether memtrial holds `CAP_SYS_PTRACE` (bit 19 of `CapEff` in its status).
pub(super) fn has_ptrace_capability() -> Option<bool> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = text.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    // CAP_SYS_PTRACE is capability 19 (linux/capability.h).
    Some(caps & (1 << 19) != 0)
}
/// What to do when files of `pid` are refused.
pub(crate) fn access_hint(pid: i32, our: u32, owner: Option<u32>) -> String {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    access_hint_for(pid, our, owner, has_ptrace_capability(), yama)
}
/// [`access_hint`] from what it depends on: memtrial's UID, the owner's, whether
/// memtrial holds `CAP_SYS_PTRACE`, and Yama's `ptrace_scope`.
pub(crate) fn access_hint_for(
    pid: i32,
    our: u32,
    owner: Option<u32>,
    ptrace_cap: Option<bool>,
    yama: Option<u32>,
) -> String {
    const NEED: &str = "smaps, smaps_rollup, environ, exe and mem need ptrace-read access to the process (PTRACE_MODE_READ)";
    let yama_note = match yama {
        Some(n) if n >= 1 => format!(
            "; kernel.yama.ptrace_scope={n} also restricts ptrace-read access{}",
            match n {
                1 => " to ancestors (or CAP_SYS_PTRACE)",
                2 => " to CAP_SYS_PTRACE",
                _ => " entirely (scope 3: not even root may attach)",
            }
        ),
        _ => String::new(),
    };
    if our == 0 {
        // Root was refused: telling root to run as root helps nobody.
        let why = match ptrace_cap {
            Some(false) => "memtrial runs as root but without CAP_SYS_PTRACE (containers drop it; grant it, e.g. `docker run --cap-add SYS_PTRACE`)".to_string(),
            _ => format!(
                "memtrial already runs as root{}, so the refusal comes from a security policy around it — a sandbox memtrial runs in (Landlock, a container), Yama, AppArmor or SELinux{}: run memtrial outside that sandbox, or in the same one as the process",
                if ptrace_cap == Some(true) { " with CAP_SYS_PTRACE" } else { "" },
                if pid == 1 { "; PID 1 (the init of the machine, VM or container) is often outside a sandbox's reach" } else { "" }
            ),
        };
        return format!("{NEED}: {why}{yama_note}");
    }
    let who = match owner {
        Some(o) if o != our => format!(
            "PID {pid} belongs to UID {o} and memtrial runs as UID {our}: run memtrial as UID {o} or as root"
        ),
        _ => "run memtrial as root".to_string(),
    };
    format!("{NEED}: {who} (or grant CAP_SYS_PTRACE){yama_note}")
}
/// What could not be read for lack of rights, and what would help.
pub(super) fn access_of(p: &Partial, status_text: &str) -> Option<Access> {
    (!p.denied.is_empty()).then(|| {
        let owner = owner_uid(status_text);
        Access {
            our_uid: our_uid(),
            owner_uid: owner,
            denied: p.denied.clone(),
            hint: access_hint(p.pid, our_uid(), owner),
        }
    })
}
