//! Did the variant take effect? Checked on the live processes of a run:
//! a preloaded allocator must be mapped *and* be the one that answers `malloc`
//! (a static executable ignores `LD_PRELOAD`; an executable that defines `malloc`
//! wins over a preload); an environment setting must be in the initial environment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::record::Verification;

use super::{Member, Probe, RunEnd, Tick};
use crate::linux::allocator::detect_allocator;
use crate::linux::elf::{self, Linkage};
use crate::linux::maps;
use crate::linux::proc::{self, ProcError};
use crate::plan::Variant;
use crate::record::RunRecord;

/// The result of checking one process.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// The loader has not finished yet: look again later.
    Pending,
    Effective(String),
    NotEffective(String),
}

#[derive(Debug, Clone)]
struct ProcessCheck {
    comm: String,
    check: Check,
    allocator: String,
    peak_rss: u64,
}

/// Checks processes as they appear; summarises at the end of the run.
pub struct Verifier {
    preload: Option<PathBuf>,
    env: Vec<(String, String)>,
    /// (pid, starttime, exec generation) → result.
    checked: HashMap<(i32, u64, u32), ProcessCheck>,
    /// ELF facts by executable identity (device, inode, mtime): parsed once per program.
    elf_cache: HashMap<(u64, u64, i64), Result<elf::ElfFacts, String>>,
}

impl Verifier {
    pub fn new(variant: &Variant) -> Self {
        Verifier {
            preload: variant.preload.clone(),
            env: variant.env.clone(),
            checked: HashMap::new(),
            elf_cache: HashMap::new(),
        }
    }

    /// Checks the members not yet decided. Cheap for decided ones.
    pub fn check<'a>(&mut self, members: impl Iterator<Item = &'a Member>) {
        for m in members {
            let key = (m.pid, m.starttime_ticks, m.exec_generation);
            if let Some(c) = self.checked.get_mut(&key) {
                c.peak_rss = c.peak_rss.max(m.peak_rss_bytes);
                if c.check != Check::Pending {
                    continue;
                }
            }
            if m.state == 'Z' {
                continue;
            }
            let (check, allocator) = match self.check_process(m.pid) {
                Ok(r) => r,
                Err(ProcError::Gone { .. }) => continue,
                Err(e) => (Check::Pending, format!("unknown ({e})")),
            };
            let entry = self.checked.entry(key).or_insert(ProcessCheck {
                comm: m.comm.clone(),
                check: Check::Pending,
                allocator: String::new(),
                peak_rss: 0,
            });
            entry.check = check;
            entry.allocator = allocator;
            entry.peak_rss = entry.peak_rss.max(m.peak_rss_bytes);
        }
    }

    /// ELF facts of a process's executable, parsed once per distinct file.
    fn exe_facts(&mut self, pid: i32) -> Result<elf::ElfFacts, String> {
        use std::os::unix::fs::MetadataExt;
        let link = PathBuf::from(format!("/proc/{pid}/exe"));
        // Metadata through the link is the executable's own, even if it was deleted.
        let meta = std::fs::metadata(&link).map_err(|e| format!("executable not readable: {e}"))?;
        let key = (meta.dev(), meta.ino(), meta.mtime());
        if let Some(f) = self.elf_cache.get(&key) {
            return f.clone();
        }
        // Parse the file by its path where it still exists, so a process that exits
        // meanwhile does not make its program unreadable.
        let target = std::fs::read_link(&link)
            .ok()
            .filter(|p| !p.to_string_lossy().ends_with(" (deleted)"))
            .unwrap_or(link);
        let facts = elf::inspect_elf(&target).map_err(|e| e.to_string());
        self.elf_cache.insert(key, facts.clone());
        facts
    }

    fn check_process(&mut self, pid: i32) -> Result<(Check, String), ProcError> {
        let maps_text = proc::read_maps_text(pid)?;
        if maps_text.is_empty() {
            return Err(ProcError::Gone { pid });
        }
        let mappings = maps::parse_maps(&maps_text).map_err(|e| ProcError::Parse {
            what: "/proc/PID/maps",
            reason: e.to_string(),
        })?;
        let libs = maps::mapped_libraries(&mappings);
        let libc_mapped = libs.iter().any(|l| file_name(l).starts_with("libc.so"));
        let facts = self.exe_facts(pid);
        let allocator = detect_allocator(&libs, facts.as_ref().ok()).to_string();

        let mut reasons_ok = Vec::new();
        // Environment settings: the initial environment must carry them.
        if !self.env.is_empty() {
            let env = match proc::read_environ(pid)? {
                env if !env.is_empty() => env,
                _ => match empty_environment(pid) {
                    EmptyEnvironment::Exiting => return Err(ProcError::Gone { pid }),
                    EmptyEnvironment::MidExec => return Ok((Check::Pending, allocator)),
                    EmptyEnvironment::StartedWithNone => {
                        let keys: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
                        return Ok((
                            Check::NotEffective(format!(
                                "{} missing: its environment is empty (started without \
                                     one, e.g. env -i)",
                                keys.join(", ")
                            )),
                            allocator,
                        ));
                    }
                },
            };
            for (k, v) in &self.env {
                match env.iter().find(|(ek, _)| ek == k) {
                    Some((_, ev)) if ev == v => reasons_ok.push(format!("{k}={v} in environ")),
                    Some((_, ev)) => {
                        return Ok((
                            Check::NotEffective(format!("{k}={ev} in its environment, not {v}")),
                            allocator,
                        ))
                    }
                    None => {
                        return Ok((
                            Check::NotEffective(format!("{k} missing from its environment")),
                            allocator,
                        ))
                    }
                }
            }
        }
        if let Some(pre) = &self.preload {
            if let Ok(f) = &facts {
                if let Linkage::Static = f.linkage {
                    return Ok((
                        Check::NotEffective(
                            "statically linked executable: LD_PRELOAD is ignored".into(),
                        ),
                        allocator,
                    ));
                }
            }
            let mapped = libs.iter().any(|l| same_file(Path::new(l), pre));
            if !mapped {
                if libc_mapped {
                    return Ok((
                        Check::NotEffective(format!(
                            "{} is not mapped{NOT_MAPPED_GUESS}",
                            pre.display()
                        )),
                        allocator,
                    ));
                }
                return Ok((Check::Pending, allocator));
            }
            if let Ok(f) = &facts {
                if f.defines_malloc {
                    return Ok((
                        Check::NotEffective(format!(
                            "{} is mapped but unused: the executable defines malloc itself",
                            file_name(&pre.display().to_string())
                        )),
                        allocator,
                    ));
                }
            }
            reasons_ok.push(format!("{} mapped", file_name(&pre.display().to_string())));
        }
        Ok((Check::Effective(reasons_ok.join(", ")), allocator))
    }

    /// Every process checked so far (each exec of it counts once): its PID and whether
    /// it carried the variant (`false`: not effective or not decided yet).
    pub fn checked_pids(&self) -> Vec<(i32, bool)> {
        let mut v: Vec<(i32, bool)> = self
            .checked
            .iter()
            .map(|(k, c)| (k.0, matches!(c.check, Check::Effective(_))))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The verdict over every process checked, with a detail line, and the
    /// allocator of the process with the largest RSS.
    pub fn finish(&self) -> (Verification, String, String) {
        let allocator = self
            .checked
            .values()
            .max_by_key(|c| c.peak_rss)
            .map(|c| c.allocator.clone())
            .unwrap_or_else(|| "unknown (exited before it could be inspected)".into());
        let nothing = self.preload.is_none() && self.env.is_empty();
        if let Some((key, c)) = self
            .checked
            .iter()
            .find(|(_, c)| matches!(c.check, Check::NotEffective(_)))
        {
            let Check::NotEffective(why) = &c.check else {
                unreachable!()
            };
            return (
                Verification::NotEffective,
                format!("pid {} ({}): {why}", key.0, c.comm),
                allocator,
            );
        }
        if nothing {
            return (
                Verification::NothingToVerify,
                "unchanged environment".into(),
                allocator,
            );
        }
        let effective: Vec<_> = self
            .checked
            .iter()
            .filter_map(|(k, c)| match &c.check {
                Check::Effective(why) => Some(format!("pid {} ({}): {why}", k.0, c.comm)),
                _ => None,
            })
            .collect();
        if effective.is_empty() {
            (
                Verification::Unverified,
                "no process lived long enough to be checked".into(),
                allocator,
            )
        } else {
            // Several processes (a forking server's master and workers, each worker a
            // master restarted): say how many carry it, then the first three checks (a
            // process checked before and after an exec is one process).
            let processes: std::collections::HashSet<(i32, u64)> = self
                .checked
                .iter()
                .filter(|(_, c)| matches!(c.check, Check::Effective(_)))
                .map(|(k, _)| (k.0, k.1))
                .collect();
            let n = effective.len();
            let mut detail = effective.into_iter().take(3).collect::<Vec<_>>().join("; ");
            if n > 3 {
                detail.push_str(&format!("; and {} more processes", n - 3));
            }
            if processes.len() > 1 {
                detail = format!("{} processes carry it: {detail}", processes.len());
            }
            (Verification::Verified, detail, allocator)
        }
    }
}

impl Probe for Verifier {
    fn name(&self) -> &'static str {
        "verifier"
    }

    fn observe(&mut self, tick: &Tick) {
        self.check(tick.members.iter());
    }

    fn finish(self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        let (verification, detail, allocator) = Verifier::finish(&self);
        record.verification = verification;
        record.verification_detail = detail;
        record.allocator_detected = allocator;
    }

    /// A probe may extend a setting of the variant (`RUBYOPT=--yjit` gains the Ruby
    /// probe's `-r`): the workload must carry the value it is actually given.
    fn launching(&mut self, env: &[(String, String)]) {
        for (k, v) in &mut self.env {
            if let Some((_, given)) = env.iter().find(|(ek, _)| ek == k) {
                v.clone_from(given);
            }
        }
    }
}

/// The guess a "not mapped" verdict carries when nothing better is known.
const NOT_MAPPED_GUESS: &str = " (environment reset, setuid, or LD_PRELOAD overridden?)";

/// A "preload is not mapped" verdict explained by the loader's own complaint on the run's
/// standard error ("invalid ELF header", "file too short", …) instead of a guess at
/// setuid; `None` when there is nothing to explain or the loader said nothing.
pub fn explain_not_mapped(detail: &str, stderr_head: &str, preload: &str) -> Option<String> {
    if !detail.contains(" is not mapped") || detail.contains("the loader refused it") {
        return None;
    }
    let c = crate::linux::ldso::refusal_of(stderr_head, preload)?;
    Some(match detail.split_once(NOT_MAPPED_GUESS) {
        Some((head, tail)) => format!("{head}: the loader refused it: {}{tail}", c.line),
        None => format!("{detail}; the loader refused it: {}", c.line),
    })
}

/// The first `limit` bytes of a file, as text (empty when it cannot be read).
pub fn head_of(path: &Path, limit: u64) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(limit).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// What an environment that reads empty means.
enum EmptyEnvironment {
    /// The process is exiting: no evidence either way.
    Exiting,
    /// In the middle of `execve`: the kernel has switched the memory map but not yet
    /// recorded the new argument and environment bounds, so `cmdline` reads empty too.
    /// "Could not read yet", never "missing".
    MidExec,
    /// Its arguments are there and its environment is not: started with none.
    StartedWithNone,
}

fn empty_environment(pid: i32) -> EmptyEnvironment {
    if !has_address_space(pid) {
        return EmptyEnvironment::Exiting;
    }
    // The kernel records the argument bounds just before the environment's: arguments
    // first, then the environment again.
    let args = proc::read_proc_file(pid, "cmdline").unwrap_or_default();
    if args.is_empty() {
        return EmptyEnvironment::MidExec;
    }
    match proc::read_environ(pid) {
        Ok(env) if env.is_empty() => EmptyEnvironment::StartedWithNone,
        Ok(_) => EmptyEnvironment::MidExec,
        Err(_) => EmptyEnvironment::Exiting,
    }
}

/// A process that is exiting (or a zombie) has released its memory: `statm` reads zeros.
fn has_address_space(pid: i32) -> bool {
    proc::read_proc_file(pid, "statm")
        .ok()
        .and_then(|b| {
            String::from_utf8_lossy(&b)
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .is_some_and(|size| size > 0)
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod loader_tests {
    use super::*;

    #[test]
    fn a_refused_preload_is_explained_by_the_loader_once() {
        let detail = format!("pid 7 (sleep): /etc/hostname is not mapped{NOT_MAPPED_GUESS}");
        let stderr = "ERROR: ld.so: object '/etc/hostname' from LD_PRELOAD cannot be preloaded (invalid ELF header): ignored.\n";
        let d = explain_not_mapped(&detail, stderr, "/etc/hostname").unwrap();
        assert!(d.contains("the loader refused it"), "{d}");
        assert!(
            d.contains("invalid ELF header") && !d.contains("setuid"),
            "{d}"
        );
        // Already explained: left alone; nothing said by the loader: no change.
        assert_eq!(explain_not_mapped(&d, stderr, "/etc/hostname"), None);
        assert_eq!(explain_not_mapped(&detail, "", "/etc/hostname"), None);
    }
}
