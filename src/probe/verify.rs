//! Did the variant take effect? Checked on the live processes of a run:
//! a preloaded allocator must be mapped *and* be the one that answers `malloc`
//! (a static executable ignores `LD_PRELOAD`; an executable that defines `malloc`
//! wins over a preload); an environment setting must be in the initial environment; a
//! variant's own program must be the executable of the processes that should run it (the
//! run's root, and every process started under that program's name).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::record::Verification;

use super::{Member, Probe, RunEnd, Tick};
use crate::linux::allocator::{detect_allocator, linked_allocators, preload_over_linked};
use crate::linux::elf::{self, Linkage};
use crate::linux::maps;
use crate::linux::proc::{self, ProcError};
use crate::plan::{Plan, Variant};
use crate::record::RunRecord;

/// The result of checking one process.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// The loader has not finished yet: look again later.
    Pending,
    Effective(String),
    NotEffective(String),
    /// Set, but a knob of it cannot be verified: what was seen, and why not.
    NotVerifiable(String),
}

#[derive(Debug, Clone)]
struct ProcessCheck {
    comm: String,
    check: Check,
    allocator: String,
    /// The allocator was named after the loader had mapped the program's libraries (before
    /// that, a linked allocator is not mapped yet and would read as glibc).
    allocator_final: bool,
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
    /// `DT_NEEDED` of libraries by path, to find the allocators a program is built with.
    needed_cache: HashMap<String, Vec<String>>,
    /// The variant's own program, when it has one.
    program: Option<ExpectedProgram>,
    /// The run's root process (pid, start time), and the exec generation it was first
    /// judged at: that one must run the variant's program.
    root: Option<(i32, u64)>,
    root_generation: Option<u32>,
    /// Remarks for the detail line, once each (a preload into a program built with an
    /// allocator of its own).
    notes: Vec<String>,
    /// Whether the loader had finished in the process checked last.
    loader_done: bool,
    /// The variant's knobs (huge pages, tunables), checked inside each process.
    knobs: super::knobs::KnobChecker,
    /// Why the knobs of a process could not be decided yet, the last time.
    knob_pending: Option<String>,
    /// The first CPython process seen, with its `PYTHONMALLOC`.
    python: Option<crate::record::PythonView>,
}

/// The executable a variant's processes must run.
#[derive(Debug, Clone)]
struct ExpectedProgram {
    /// What the processes must have as `/proc/PID/exe` (a script's interpreter).
    exe: PathBuf,
    /// Its identity (device, inode): symlinks and hard links compare equal.
    id: Option<(u64, u64)>,
    /// The file names under which a process should be this program: the command's
    /// argv[0] and the program's own name.
    names: Vec<String>,
}

impl ExpectedProgram {
    fn new(path: &Path, argv0: &str) -> ExpectedProgram {
        use std::os::unix::fs::MetadataExt;
        let exe = script_interpreter(path).unwrap_or_else(|| path.to_path_buf());
        let id = std::fs::metadata(&exe).ok().map(|m| (m.dev(), m.ino()));
        let mut names = vec![file_name(argv0).to_string()];
        for p in [path, exe.as_path()] {
            let n = file_name(&p.to_string_lossy()).to_string();
            if !names.contains(&n) {
                names.push(n);
            }
        }
        ExpectedProgram { exe, id, names }
    }
}

/// The interpreter a `#!` script runs under (`#!/usr/bin/env NAME` looked up in PATH):
/// what the kernel shows as its executable.
fn script_interpreter(path: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line.split(|b| *b == b'\n').next()?).into_owned();
    let mut words = line.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if file_name(&interp.to_string_lossy()) != "env" {
        return Some(interp);
    }
    let name = words.find(|w| !w.starts_with('-'))?;
    let path_var = std::env::var("PATH").unwrap_or_default();
    crate::plan::resolve_program(name, &path_var, Path::new("/")).ok()
}

/// What the executable check made of one process.
enum ProgramCheck {
    /// Before its `exec` (still the spawner), or mid-`exec`: look again.
    Pending,
    /// Not a process that should run the variant's program.
    NotChecked,
    Runs(String),
    Wrong(String),
}

impl Verifier {
    pub fn new(variant: &Variant) -> Self {
        Verifier {
            preload: variant.preload.clone(),
            env: variant.settings(),
            checked: HashMap::new(),
            elf_cache: HashMap::new(),
            needed_cache: HashMap::new(),
            program: None,
            root: None,
            root_generation: None,
            notes: Vec::new(),
            loader_done: false,
            knobs: super::knobs::KnobChecker::new(&variant.knobs),
            knob_pending: None,
            python: None,
        }
    }

    /// The verifier of one run of `variant` in `plan`: also checks the variant's own
    /// program, if it has one.
    pub(crate) fn for_run(plan: &Plan, variant: &Variant) -> Self {
        let mut v = Verifier::new(variant);
        if let Some(p) = &variant.program {
            let (_, argv) = plan.launch_command(variant);
            let argv0 = argv.first().map_or("", String::as_str);
            v.program = Some(ExpectedProgram::new(p.path(), argv0));
        }
        v
    }

    /// Checks the members not yet decided. Cheap for decided ones.
    pub fn check<'a>(&mut self, members: impl Iterator<Item = &'a Member>) {
        let members: Vec<&Member> = members.collect();
        if self.root.is_none() {
            // The workload's root is the one whose parent (the spawner) is not in the run.
            self.root = members
                .iter()
                .find(|m| !members.iter().any(|p| p.pid == m.ppid))
                .map(|m| (m.pid, m.starttime_ticks));
        }
        for m in members {
            let key = (m.pid, m.starttime_ticks, m.exec_generation);
            if let Some(c) = self.checked.get_mut(&key) {
                c.peak_rss = c.peak_rss.max(m.peak_rss_bytes);
                if c.check != Check::Pending && c.allocator_final {
                    continue;
                }
            }
            if m.state == 'Z' {
                continue;
            }
            let is_root = self.root == Some((m.pid, m.starttime_ticks));
            let root_first = is_root && self.root_generation.is_none_or(|g| g == m.exec_generation);
            self.loader_done = false;
            if self.python.is_none() {
                self.python = python_of(m.pid);
            }
            let (check, allocator) = match self.check_process(m.pid, root_first) {
                Ok(r) => r,
                Err(ProcError::Gone { .. }) => continue,
                Err(e) => (Check::Pending, format!("unknown ({e})")),
            };
            // What was read is the member's only if its PID still holds it: one that exited
            // meanwhile leaves its PID to the next process the machine starts (PIDs wrap at
            // pid_max, 32768 here), and a stranger's maps read under it said
            // "libjemalloc.so.2 is not mapped" of a run that carried it (the suite under
            // load). A verdict against the variant needs the member proved; one gone
            // since cannot be, and stays undecided.
            match same_process(m.pid, m.starttime_ticks) {
                Some(false) => continue,
                None if matches!(check, Check::NotEffective(_)) => continue,
                _ => {}
            }
            let entry = self.checked.entry(key).or_insert(ProcessCheck {
                comm: m.comm.clone(),
                check: Check::Pending,
                allocator: String::new(),
                allocator_final: false,
                peak_rss: 0,
            });
            if root_first && check != Check::Pending {
                self.root_generation = Some(m.exec_generation);
            }
            // A decided check stays; only its allocator is named again, once the loader is done.
            if entry.check == Check::Pending {
                entry.check = check;
            }
            entry.allocator = allocator;
            entry.allocator_final = self.loader_done;
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

    /// Does the process run the variant's program? Asked of the root's first program and
    /// of every process started under the program's name.
    fn check_program(&self, pid: i32, root_first: bool) -> Result<ProgramCheck, ProcError> {
        use std::os::unix::fs::MetadataExt;
        let Some(exp) = &self.program else {
            return Ok(ProgramCheck::NotChecked);
        };
        let link = PathBuf::from(format!("/proc/{pid}/exe"));
        let gone = |_| ProcError::Gone { pid };
        let target = std::fs::read_link(&link).map_err(gone)?;
        let shown = target.to_string_lossy().into_owned();
        if shown.starts_with("/memfd:memtrial-spawn") || is_memtrial(&target) {
            // The spawner's child before its exec.
            return Ok(ProgramCheck::Pending);
        }
        let args = proc::read_proc_file(pid, "cmdline")?;
        if args.is_empty() {
            return Ok(ProgramCheck::Pending);
        }
        let argv0 =
            String::from_utf8_lossy(args.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
        if !root_first && !exp.names.iter().any(|n| n == file_name(&argv0)) {
            return Ok(ProgramCheck::NotChecked);
        }
        let meta = std::fs::metadata(&link).map_err(gone)?;
        let expected = exp.exe.display();
        if exp.id == Some((meta.dev(), meta.ino())) {
            Ok(ProgramCheck::Runs(format!("runs {expected}")))
        } else {
            let how = if root_first {
                "the run's root process"
            } else {
                "started as"
            };
            let who = if root_first {
                how.to_string()
            } else {
                format!("{how} '{argv0}',")
            };
            Ok(ProgramCheck::Wrong(format!(
                "{who} runs {shown}, not the variant's program {expected}"
            )))
        }
    }

    /// The variant's environment settings against the process's initial environment:
    /// `Some(verdict)` when that decides the check (missing, wrong, not readable yet),
    /// else the settings found are added to `reasons_ok`.
    fn check_env(
        &self,
        pid: i32,
        reasons_ok: &mut Vec<String>,
    ) -> Result<Option<Check>, ProcError> {
        if self.env.is_empty() {
            return Ok(None);
        }
        let env = match proc::read_environ(pid)? {
            env if !env.is_empty() => env,
            _ => match empty_environment(pid) {
                EmptyEnvironment::Exiting => return Err(ProcError::Gone { pid }),
                EmptyEnvironment::MidExec => return Ok(Some(Check::Pending)),
                EmptyEnvironment::StartedWithNone => {
                    let keys: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
                    return Ok(Some(Check::NotEffective(format!(
                        "{} missing: its environment is empty (started without one, e.g. env -i)",
                        keys.join(", ")
                    ))));
                }
            },
        };
        for (k, v) in &self.env {
            match environ_value(&env, k) {
                Some(ev) if ev == *v => reasons_ok.push(format!("{k}={v} in environ")),
                Some(ev) => {
                    return Ok(Some(Check::NotEffective(format!(
                        "{k}={ev} in its environment, not {v}"
                    ))))
                }
                None => {
                    return Ok(Some(Check::NotEffective(format!(
                        "{k} missing from its environment"
                    ))))
                }
            }
        }
        Ok(None)
    }

    /// The preload, when the variant has one: `Some` verdict when it decides the check
    /// (not effective, or pending until the loader has mapped libc), `None` when it took
    /// (said in `reasons_ok`). `exe`: the executable's facts, when they could be read.
    fn check_preload(
        &mut self,
        exe: Option<&elf::ElfFacts>,
        libs: &[String],
        libc_mapped: bool,
        linked: &[crate::linux::allocator::LinkedAllocator],
        reasons_ok: &mut Vec<String>,
    ) -> Option<Check> {
        let pre = self.preload.as_ref()?;
        if exe.is_some_and(|f| matches!(f.linkage, Linkage::Static)) {
            return Some(Check::NotEffective(
                "statically linked executable: LD_PRELOAD is ignored".into(),
            ));
        }
        let name = file_name(&pre.display().to_string()).to_string();
        if !libs.iter().any(|l| same_file(Path::new(l), pre)) {
            if libc_mapped {
                return Some(Check::NotEffective(format!(
                    "{} is not mapped{NOT_MAPPED_GUESS}",
                    pre.display()
                )));
            }
            return Some(Check::Pending);
        }
        if exe.is_some_and(|f| f.defines_malloc) {
            return Some(Check::NotEffective(format!(
                "{name} is mapped but unused: the executable defines malloc itself"
            )));
        }
        reasons_ok.push(format!("{name} mapped"));
        if let Some(note) = preload_over_linked(&pre.display().to_string(), linked) {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        None
    }

    fn check_process(&mut self, pid: i32, root_first: bool) -> Result<(Check, String), ProcError> {
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
        let linked = match &facts {
            Ok(f) => {
                let cache = &mut self.needed_cache;
                linked_allocators(f, &libs, &mut |p| {
                    cache
                        .entry(p.to_string())
                        .or_insert_with(|| crate::linux::allocator::needed_of_file(p))
                        .clone()
                })
            }
            Err(_) => Vec::new(),
        };
        let allocator = detect_allocator(&libs, facts.as_ref().ok(), &linked).to_string();
        // Before the loader has mapped the program's libraries, only the executable and
        // ld.so are there (libc comes last; musl's loader is its libc).
        let loader_done = match &facts {
            Ok(f) => match &f.linkage {
                Linkage::Dynamic { interpreter } => {
                    f.needed.is_empty() || libc_mapped || interpreter.contains("musl")
                }
                Linkage::Static => true,
            },
            Err(_) => true,
        };
        self.loader_done = loader_done;

        let mut reasons_ok = Vec::new();
        match self.check_program(pid, root_first)? {
            ProgramCheck::Pending => return Ok((Check::Pending, allocator)),
            ProgramCheck::NotChecked => {}
            // Its program, but the loader has not mapped its libraries yet: the allocator
            // cannot be named until it has.
            ProgramCheck::Runs(_) if !loader_done => return Ok((Check::Pending, allocator)),
            ProgramCheck::Runs(why) => reasons_ok.push(why),
            ProgramCheck::Wrong(why) => return Ok((Check::NotEffective(why), allocator)),
        }
        // Environment settings: the initial environment must carry them.
        if let Some(verdict) = self.check_env(pid, &mut reasons_ok)? {
            return Ok((verdict, allocator));
        }
        let exe = facts.as_ref().ok();
        if let Some(verdict) = self.check_preload(exe, &libs, libc_mapped, &linked, &mut reasons_ok)
        {
            return Ok((verdict, allocator));
        }
        if self.knobs.any() && !loader_done {
            return Ok((Check::Pending, allocator));
        }
        use super::knobs::KnobVerdict;
        match self.knobs.check(pid, &allocator)? {
            KnobVerdict::None => {}
            KnobVerdict::Pending(why) => {
                self.knob_pending = Some(why);
                return Ok((Check::Pending, allocator));
            }
            KnobVerdict::Took(what) => reasons_ok.extend(what),
            KnobVerdict::NotEffective(why) => return Ok((Check::NotEffective(why), allocator)),
            KnobVerdict::NotVerifiable(what, why) => {
                reasons_ok.extend(what);
                reasons_ok.push(format!("set, not verifiable: {why}"));
                return Ok((Check::NotVerifiable(reasons_ok.join(", ")), allocator));
            }
        }
        Ok((Check::Effective(reasons_ok.join(", ")), allocator))
    }

    /// Every process checked so far (each exec of it counts once): its PID and whether
    /// it carried the variant (`false`: not effective or not decided yet).
    #[cfg(test)]
    pub(crate) fn checked_pids(&self) -> Vec<(i32, bool)> {
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
        let (verification, mut detail, allocator) = self.verdict();
        for n in &self.notes {
            detail.push_str("; note: ");
            detail.push_str(n);
        }
        (verification, detail, allocator)
    }

    fn verdict(&self) -> (Verification, String, String) {
        let allocator = self
            .checked
            .values()
            .max_by_key(|c| c.peak_rss)
            .map(|c| c.allocator.clone())
            .unwrap_or_else(|| "unknown (exited before it could be inspected)".into());
        let nothing = self.preload.is_none()
            && self.env.is_empty()
            && self.program.is_none()
            && !self.knobs.any();
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
        if let Some((key, c)) = self
            .checked
            .iter()
            .find(|(_, c)| matches!(c.check, Check::NotVerifiable(_)))
        {
            let Check::NotVerifiable(why) = &c.check else {
                unreachable!()
            };
            return (
                Verification::SetNotVerifiable,
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
            match &self.knob_pending {
                Some(why) => (
                    Verification::SetNotVerifiable,
                    format!("set, not verifiable: {why}"),
                    allocator,
                ),
                None => (
                    Verification::Unverified,
                    "no process lived long enough to be checked".into(),
                    allocator,
                ),
            }
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
    fn observe(&mut self, tick: &Tick) {
        self.check(tick.members.iter());
    }

    fn finish(self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        let (verification, detail, allocator) = Verifier::finish(&self);
        record.verification = verification;
        record.verification_detail = detail;
        record.allocator_detected = allocator;
        record.inside.python = self.python;
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

/// The value of `key` in a process's environment (`GLIBC_TUNABLES` as it was given: see
/// [`proc::parse_environ`]).
fn environ_value(env: &[(String, String)], key: &str) -> Option<String> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// The process, when it runs CPython (an executable named `python…`), with the
/// `PYTHONMALLOC` of its environment; `None` for anything else or before its exec.
fn python_of(pid: i32) -> Option<crate::record::PythonView> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_string_lossy().into_owned();
    let name = file_name(exe.trim_end_matches(" (deleted)"));
    let rest = name.strip_prefix("python")?;
    if !rest
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == 'd' || c == 'm')
    {
        return None;
    }
    let env = proc::read_environ(pid).ok().filter(|e| !e.is_empty())?;
    Some(crate::record::PythonView {
        executable: exe,
        pythonmalloc: environ_value(&env, "PYTHONMALLOC"),
    })
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
pub(crate) fn head_of(path: &Path, limit: u64) -> String {
    // The workload knows this path (its own stderr) and could have put a FIFO or a link
    // there: read only a regular file, without waiting, within the limit.
    let buf =
        crate::linux::safe_file::read_bounded(path, limit, crate::linux::safe_file::End::Head)
            .unwrap_or_default();
    String::from_utf8_lossy(&buf).into_owned()
}

/// What an environment that reads empty means.
enum EmptyEnvironment {
    /// The process is exiting: no evidence either way.
    Exiting,
    /// In the middle of `execve` (the kernel has not yet written the environment's bounds),
    /// or not decided yet: "could not read yet", never "missing". Asked again at the next
    /// check.
    MidExec,
    /// Its arguments are there and its environment is not, and it has finished its exec:
    /// started with none.
    StartedWithNone,
}

/// Whether a process whose environment reads empty has finished its exec. The kernel
/// writes the argument bounds, then the environment's pointers with the environment's
/// bounds equal (it reads empty) until the last is written. A process preempted there
/// reads "arguments, no environment" for as long as it waits for a CPU — on a loaded
/// machine (the suite's exec storm beside busy loops) longer than any fixed wait, so time
/// alone never decides it. What does: that loop neither sleeps nor returns to user mode,
/// so a process that is sleeping or stopped, or that has spent user-mode time since the
/// first empty read, has finished its exec. A process waiting for a CPU (`R`) or in an
/// uninterruptible wait (`D`, a page fault) without user time since stays undecided.
fn empty_environment(pid: i32) -> EmptyEnvironment {
    if !has_address_space(pid) {
        return EmptyEnvironment::Exiting;
    }
    let args = proc::read_proc_file(pid, "cmdline").unwrap_or_default();
    if args.is_empty() {
        return EmptyEnvironment::MidExec;
    }
    let Ok(first) = proc::read_stat(pid) else {
        return EmptyEnvironment::Exiting;
    };
    for wait_ms in [0, 1, 2, 4, 8, 16, 32] {
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        // The state first, then the environment: empty after a sleep or after user time
        // was seen means empty after the exec ended.
        let Ok(now) = proc::read_stat(pid) else {
            return EmptyEnvironment::Exiting;
        };
        let exec_done = exec_finished(&first, &now);
        match proc::read_environ(pid) {
            // Gone meanwhile: an exiting process reads empty too.
            Ok(env) if env.is_empty() && !has_address_space(pid) => {
                return EmptyEnvironment::Exiting
            }
            Ok(env) if env.is_empty() && exec_done => return EmptyEnvironment::StartedWithNone,
            Ok(env) if env.is_empty() => {}
            Ok(_) => return EmptyEnvironment::MidExec,
            Err(_) => return EmptyEnvironment::Exiting,
        }
    }
    EmptyEnvironment::MidExec
}

/// Whether `pid` is still held by the process started at `starttime_ticks` (a zombie
/// too); `None` when nothing holds it.
fn same_process(pid: i32, starttime_ticks: u64) -> Option<bool> {
    proc::read_stat(pid)
        .ok()
        .map(|s| s.starttime_ticks == starttime_ticks)
}

/// Whether `now` (a later read of the same process's stat than `first`) shows a process
/// that is past its exec: sleeping or stopped, or with user-mode time since `first`.
fn exec_finished(first: &proc::Stat, now: &proc::Stat) -> bool {
    let same = first.starttime_ticks == now.starttime_ticks;
    same && (matches!(now.state, 'S' | 'T' | 't' | 'I') || now.utime_ticks > first.utime_ticks)
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

/// The file is memtrial itself (the spawner falls back to it when built without one).
fn is_memtrial(target: &Path) -> bool {
    std::env::current_exe().is_ok_and(|me| me == target)
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
    fn glibc_tunables_split_by_the_loader_are_joined_back() {
        // /proc/PID/environ of `GLIBC_TUNABLES=glibc.malloc.trim_threshold=65536:glibc.malloc.top_pad=0 sl`
        // on glibc 2.36.
        let env = crate::linux::proc::parse_environ(
            b"PATH=/bin\0GLIBC_TUNABLES=glibc.malloc.trim_threshold=65536\0glibc.malloc.top_pad=0\0HOME=/root\0",
        );
        assert_eq!(
            environ_value(&env, "GLIBC_TUNABLES").as_deref(),
            Some("glibc.malloc.trim_threshold=65536:glibc.malloc.top_pad=0")
        );
        assert_eq!(environ_value(&env, "HOME").as_deref(), Some("/root"));
        assert_eq!(environ_value(&env, "NOPE"), None);
    }

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

    fn stat(state: char, utime_ticks: u64, starttime_ticks: u64) -> proc::Stat {
        proc::Stat {
            pid: 7,
            comm: "true".into(),
            state,
            ppid: 1,
            pgrp: 7,
            minflt: 0,
            majflt: 0,
            utime_ticks,
            stime_ticks: 0,
            num_threads: 1,
            starttime_ticks,
            vsize_bytes: 1 << 20,
            rss_pages: 100,
        }
    }

    #[test]
    fn only_a_sleeping_process_or_user_time_shows_the_exec_has_ended() {
        // Waiting for a CPU (or in a page fault) with no user time since: may still be
        // writing its environment's pointers, however long it waited.
        assert!(!exec_finished(&stat('R', 3, 50), &stat('R', 3, 50)));
        assert!(!exec_finished(&stat('R', 3, 50), &stat('D', 3, 50)));
        // Sleeping, stopped, or user time since: past its exec.
        for state in ['S', 'T', 't'] {
            assert!(exec_finished(&stat('R', 3, 50), &stat(state, 3, 50)));
        }
        assert!(exec_finished(&stat('R', 3, 50), &stat('R', 4, 50)));
        // Another process under a reused PID proves nothing.
        assert!(!exec_finished(&stat('R', 3, 50), &stat('S', 9, 51)));
    }

    #[test]
    fn a_process_started_without_an_environment_is_told_apart() {
        // A real process started with none (as by `env -i`), once past its exec.
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("5")
            .env_clear()
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while proc::read_stat(pid).map_or(true, |s| s.comm != "sleep") {
            assert!(std::time::Instant::now() < deadline, "sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut verdict = empty_environment(pid);
        while matches!(verdict, EmptyEnvironment::MidExec) && std::time::Instant::now() < deadline {
            verdict = empty_environment(pid);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(verdict, EmptyEnvironment::StartedWithNone));
    }
}
