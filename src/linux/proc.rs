//! Typed readers for the few `/proc/PID/*` files memtrial samples.
//!
//! Every reader comes in two halves: a pure `parse_*` function over the file's
//! text (unit-tested on captured text in `tests/fixtures/proc/`) and a thin
//! `read_*` function that fetches the file. A process may exit at any moment, so
//! "the process is gone" is an ordinary outcome ([`ProcError::Gone`]), not a failure.

use std::fs;
use std::io::{self, Read};
use std::path::PathBuf;

/// Errors reading `/proc`.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The process exited (or never existed) while we were reading it.
    #[error("process {pid} is gone")]
    Gone { pid: i32 },
    /// We are not allowed to read this file (ptrace-read permission is needed for some).
    #[error("permission denied reading {path}: {}", permission_hint())]
    PermissionDenied { path: PathBuf },
    /// Any other I/O error.
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The text did not have the expected shape.
    #[error("cannot parse {what}: {reason}")]
    Parse { what: &'static str, reason: String },
}

/// What to do about a refused read: telling root to run as root helps nobody.
fn permission_hint() -> &'static str {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        "memtrial already runs as root, so a policy around it refuses the read (a container without CAP_SYS_PTRACE, Yama's ptrace_scope, AppArmor or SELinux); run memtrial outside that sandbox or grant it CAP_SYS_PTRACE"
    } else {
        "run as the process's owner or as root"
    }
}

fn parse_err(what: &'static str, reason: impl Into<String>) -> ProcError {
    ProcError::Parse {
        what,
        reason: reason.into(),
    }
}

/// The calling thread's CPU time.
pub(crate) fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// The file to read a process's executable from: by its path where that file still
/// exists (`link_target` is `/proc/PID/exe`'s target), else through the link itself (a
/// deleted or replaced executable, or one outside this mount namespace).
pub(crate) fn exe_file(pid: i32, link_target: Option<&str>) -> PathBuf {
    link_target
        .filter(|t| !t.ends_with(" (deleted)") && std::path::Path::new(t).exists())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/proc/{pid}/exe")))
}

/// Reads `/proc/{pid}/{file}` as bytes, mapping "no such process" to [`ProcError::Gone`].
pub(crate) fn read_proc_file(pid: i32, file: &str) -> Result<Vec<u8>, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/{file}"));
    // Not fs::read: /proc files report size 0, so its size hint costs a statx and a
    // string of small reads. One open and a 4 KiB first read cover stat and status.
    let read = || -> io::Result<Vec<u8>> {
        let mut f = fs::File::open(&path)?;
        let mut buf = Vec::with_capacity(4096);
        f.read_to_end(&mut buf)?;
        Ok(buf)
    };
    read().map_err(|e| classify_io(pid, path.clone(), e))
}

/// A `/proc/{pid}/{file}` kept open (see [`super::kept`]), its errors told like
/// [`read_proc_file`]'s.
#[derive(Debug)]
pub(crate) struct KeptProcFile {
    pid: i32,
    path: PathBuf,
    file: super::kept::KeptFile,
}

impl KeptProcFile {
    pub fn open(pid: i32, file: &str) -> Result<KeptProcFile, ProcError> {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        match super::kept::KeptFile::open(&path) {
            Ok(file) => Ok(KeptProcFile { pid, path, file }),
            Err(e) => Err(classify_io(pid, path, e)),
        }
    }

    /// The file's whole text now.
    pub fn read(&mut self) -> Result<&[u8], ProcError> {
        let (pid, path) = (self.pid, &self.path);
        self.file
            .read()
            .map_err(|e| classify_io(pid, path.clone(), e))
    }
}

/// The most recently allocated PID (last field of `/proc/loadavg`): if it has not
/// changed, no process was created since it was last read.
#[cfg(test)]
pub(crate) fn last_pid() -> Option<i32> {
    let text = fs::read_to_string("/proc/loadavg").ok()?;
    parse_loadavg_last_pid(&text)
}

/// [`last_pid`] through a kept descriptor (read at every tick: see [`super::kept`]).
pub(crate) fn last_pid_kept(loadavg: &mut super::kept::KeptSlot) -> Option<i32> {
    let text = loadavg.read(std::path::Path::new("/proc/loadavg")).ok()?;
    parse_loadavg_last_pid(std::str::from_utf8(text).ok()?)
}

pub fn parse_loadavg_last_pid(text: &str) -> Option<i32> {
    text.split_whitespace().nth(4)?.parse().ok()
}

fn classify_io(pid: i32, path: PathBuf, e: io::Error) -> ProcError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => ProcError::Gone { pid },
        Some(libc::EACCES) | Some(libc::EPERM) => ProcError::PermissionDenied { path },
        _ => ProcError::Io { path, source: e },
    }
}

/// The fields of `/proc/PID/stat` that memtrial uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    /// The command name (`comm`), at most 15 bytes, may contain spaces and parentheses.
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub minflt: u64,
    pub majflt: u64,
    /// CPU time in clock ticks (see [`clock_ticks_per_second`]).
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub num_threads: u64,
    /// Start time after boot in clock ticks: with the PID, identifies a process uniquely.
    pub starttime_ticks: u64,
    pub vsize_bytes: u64,
    pub rss_pages: u64,
}

/// Parses the text of `/proc/PID/stat`.
pub fn parse_stat(text: &str) -> Result<Stat, ProcError> {
    const WHAT: &str = "/proc/PID/stat";
    let open = text.find('(').ok_or_else(|| parse_err(WHAT, "no '('"))?;
    let close = text.rfind(')').ok_or_else(|| parse_err(WHAT, "no ')'"))?;
    if close < open {
        return Err(parse_err(WHAT, "')' before '('"));
    }
    let pid: i32 = text[..open]
        .trim()
        .parse()
        .map_err(|_| parse_err(WHAT, "pid is not a number"))?;
    let comm = text[open + 1..close].to_string();
    // Fields after the comm, numbered from 3 (state) as in proc(5).
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |n: usize| -> Result<&str, ProcError> {
        rest.get(n - 3)
            .copied()
            .ok_or_else(|| parse_err(WHAT, format!("missing field {n}")))
    };
    let num = |n: usize| -> Result<u64, ProcError> {
        field(n)?
            .parse::<u64>()
            .map_err(|_| parse_err(WHAT, format!("field {n} is not a number")))
    };
    let int = |n: usize| -> Result<i32, ProcError> {
        field(n)?
            .parse::<i32>()
            .map_err(|_| parse_err(WHAT, format!("field {n} is not a number")))
    };
    Ok(Stat {
        pid,
        comm,
        state: field(3)?.chars().next().unwrap_or('?'),
        ppid: int(4)?,
        pgrp: int(5)?,
        minflt: num(10)?,
        majflt: num(12)?,
        utime_ticks: num(14)?,
        stime_ticks: num(15)?,
        num_threads: num(20)?,
        starttime_ticks: num(22)?,
        vsize_bytes: num(23)?,
        rss_pages: num(24)?,
    })
}

/// Reads and parses `/proc/{pid}/stat`.
pub(crate) fn read_stat(pid: i32) -> Result<Stat, ProcError> {
    let bytes = read_proc_file(pid, "stat")?;
    if bytes.is_empty() {
        return Err(ProcError::Gone { pid });
    }
    parse_stat(&String::from_utf8_lossy(&bytes))
}

/// The memory fields of `/proc/PID/status` (all in bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// The state letter (`R`, `S`, `Z`, …).
    pub state: char,
    pub ppid: i32,
    pub threads: u64,
    pub vm_size: u64,
    pub vm_peak: u64,
    pub vm_rss: u64,
    /// Peak resident set size: the kernel's high-water mark.
    pub vm_hwm: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub rss_shmem: u64,
    pub vm_swap: u64,
    /// `Uid`: real, effective, saved and filesystem uid (empty when the line is missing or
    /// malformed).
    pub uids: Vec<u32>,
    /// The PID in the process's own PID namespace (the last field of `NSpid`): what the
    /// process itself calls `getpid()`. `None` when the line is missing or malformed.
    pub ns_pid: Option<i32>,
    /// `THP_enabled` (kernel 5.0+): `Some(false)` when transparent huge pages are off for
    /// the process (`prctl(PR_SET_THP_DISABLE)`, inherited across fork and exec); `None`
    /// when the kernel does not say.
    pub thp_enabled: Option<bool>,
}

fn kb_value(value: &str) -> Option<u64> {
    let mut parts = value.split_ascii_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// Parses the text of `/proc/PID/status`. Kernel threads lack the `Vm*` lines;
/// those fields are then 0.
pub fn parse_status(text: &str) -> Result<Status, ProcError> {
    const WHAT: &str = "/proc/PID/status";
    let mut s = Status::default();
    let mut saw_name = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let bytes = || kb_value(value).ok_or_else(|| parse_err(WHAT, format!("bad {key}")));
        match key {
            "Name" => {
                s.name = value.to_string();
                saw_name = true;
            }
            "State" => s.state = value.chars().next().unwrap_or('?'),
            "PPid" => s.ppid = value.parse().map_err(|_| parse_err(WHAT, "bad PPid"))?,
            "Threads" => s.threads = value.parse().map_err(|_| parse_err(WHAT, "bad Threads"))?,
            "VmSize" => s.vm_size = bytes()?,
            "VmPeak" => s.vm_peak = bytes()?,
            "VmRSS" => s.vm_rss = bytes()?,
            "VmHWM" => s.vm_hwm = bytes()?,
            "RssAnon" => s.rss_anon = bytes()?,
            "RssFile" => s.rss_file = bytes()?,
            "RssShmem" => s.rss_shmem = bytes()?,
            "VmSwap" => s.vm_swap = bytes()?,
            "Uid" => {
                s.uids = value
                    .split_ascii_whitespace()
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .unwrap_or_default()
            }
            "NSpid" => {
                s.ns_pid = value
                    .split_ascii_whitespace()
                    .last()
                    .and_then(|v| v.parse().ok())
            }
            "THP_enabled" => s.thp_enabled = value.parse::<u8>().ok().map(|v| v != 0),
            _ => {}
        }
        // The kernel writes the process's name, state, ids and memory before its signals,
        // which `Threads` opens: the 20-odd lines after it (signals, capabilities, CPUs,
        // context switches) hold nothing read here, and are half of what a tick would parse.
        if key == "Threads" {
            break;
        }
    }
    if !saw_name {
        return Err(parse_err(WHAT, "no Name line"));
    }
    Ok(s)
}

/// Reads and parses `/proc/{pid}/status`.
pub fn read_status(pid: i32) -> Result<Status, ProcError> {
    let bytes = read_proc_file(pid, "status")?;
    status_of(pid, &bytes)
}

/// [`read_status`] through a kept descriptor (see [`KeptProcFile`]).
pub(crate) fn read_kept_status(kept: &mut KeptProcFile) -> Result<Status, ProcError> {
    let pid = kept.pid;
    let bytes = kept.read()?;
    status_of(pid, bytes)
}

fn status_of(pid: i32, bytes: &[u8]) -> Result<Status, ProcError> {
    if bytes.is_empty() {
        return Err(ProcError::Gone { pid });
    }
    parse_status(&String::from_utf8_lossy(bytes))
}

/// The summed figures of `/proc/PID/smaps_rollup` (bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmapsRollup {
    pub rss: u64,
    pub pss: u64,
    pub pss_anon: u64,
    pub pss_file: u64,
    pub pss_shmem: u64,
    /// Unique set size: the sum of the private pages.
    pub uss: u64,
    pub swap: u64,
    pub swap_pss: u64,
    /// Anonymous memory in transparent huge pages (`AnonHugePages`).
    pub anon_huge: u64,
}

/// Parses the text of `/proc/PID/smaps_rollup`.
pub fn parse_smaps_rollup(text: &str) -> Result<SmapsRollup, ProcError> {
    const WHAT: &str = "/proc/PID/smaps_rollup";
    let mut r = SmapsRollup::default();
    let mut saw_pss = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Some(v) = kb_value(value.trim()) else {
            continue; // the header line holds an address range, not "N kB"
        };
        match key {
            "Rss" => r.rss = v,
            "Pss" => {
                r.pss = v;
                saw_pss = true;
            }
            "Pss_Anon" => r.pss_anon = v,
            "Pss_File" => r.pss_file = v,
            "Pss_Shmem" => r.pss_shmem = v,
            "Private_Clean" | "Private_Dirty" | "Private_Hugetlb" => r.uss += v,
            "Swap" => r.swap = v,
            "SwapPss" => r.swap_pss = v,
            "AnonHugePages" => r.anon_huge = v,
            _ => {}
        }
    }
    if !saw_pss {
        return Err(parse_err(WHAT, "no Pss line"));
    }
    Ok(r)
}

/// Reads and parses `/proc/{pid}/smaps_rollup` (walks the page tables: costly
/// for large processes, so sample it sparingly).
pub(crate) fn read_smaps_rollup(pid: i32) -> Result<SmapsRollup, ProcError> {
    let bytes = read_proc_file(pid, "smaps_rollup")?;
    if bytes.is_empty() {
        // A zombie or kernel thread has no address space to report.
        return Err(ProcError::Gone { pid });
    }
    parse_smaps_rollup(&String::from_utf8_lossy(&bytes))
}

/// Splits the NUL-separated text of `/proc/PID/environ` into `KEY=VALUE` pairs.
///
/// glibc's loader splits `GLIBC_TUNABLES` in place as it parses it (each `:` becomes a
/// NUL; seen on 2.36), so the environment holds its first tunable as the value and each
/// further one as an entry of its own right after it (`glibc.malloc.top_pad=0`): those are
/// joined back into the value it was given.
pub fn parse_environ(bytes: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in bytes.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let s = String::from_utf8_lossy(e);
        let (k, v) = match s.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (s.to_string(), String::new()),
        };
        match out.last_mut() {
            Some((last, value)) if last == "GLIBC_TUNABLES" && k.starts_with("glibc.") => {
                value.push(':');
                value.push_str(&k);
                value.push('=');
                value.push_str(&v);
            }
            _ => out.push((k, v)),
        }
    }
    out
}

/// Reads `/proc/{pid}/environ` (the process's *initial* environment).
pub(crate) fn read_environ(pid: i32) -> Result<Vec<(String, String)>, ProcError> {
    Ok(parse_environ(&read_proc_file(pid, "environ")?))
}

/// Reads `/proc/{pid}/maps` as text.
///
/// Whole, or not at all: the kernel hands the file out a page at a time and ends it early,
/// without an error, when the process exits or execs between two pages (the memory the file
/// was opened on is gone). Cut there, a bash under load named libc but not the preloaded
/// jemalloc mapped above it, and the verifier called the variant not effective (issue 48).
/// The main thread's stack lies above every library, so a read that reached `[stack]` is
/// whole; one that did not is taken only when a second read gives the same text, and is
/// otherwise [`ProcError::Gone`] (the caller's next look reads it again).
pub(crate) fn read_maps_text(pid: i32) -> Result<String, ProcError> {
    let read = || read_proc_file(pid, "maps").map(|b| String::from_utf8_lossy(&b).into_owned());
    let text = read()?;
    if text.is_empty() || reaches_the_stack(&text) {
        return Ok(text);
    }
    if read()? == text {
        Ok(text)
    } else {
        Err(ProcError::Gone { pid })
    }
}

/// Whether a maps text reaches the main thread's stack (above every library).
fn reaches_the_stack(maps: &str) -> bool {
    maps.lines().any(|l| l.ends_with("[stack]"))
}

/// Lists the PIDs of all processes (not threads) currently in `/proc`.
pub(crate) fn list_pids() -> Result<Vec<i32>, ProcError> {
    let dir = fs::read_dir("/proc").map_err(|e| ProcError::Io {
        path: PathBuf::from("/proc"),
        source: e,
    })?;
    Ok(dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .collect())
}

/// The children of `pid`, from each of its threads' `task/TID/children` (empty when the
/// process is gone or the kernel lacks `CONFIG_PROC_CHILDREN`).
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let Ok(text) = fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        out.extend(
            text.split_whitespace()
                .filter_map(|w| w.parse::<i32>().ok()),
        );
    }
    out
}

/// The kernel's clock ticks per second (`sysconf(_SC_CLK_TCK)`), 100 if unknown.
pub(crate) fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as u64
    } else {
        100
    }
}

/// The page size in bytes (`sysconf(_SC_PAGESIZE)`), 4096 if unknown.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64
    } else {
        4096
    }
}

/// A signal's name, e.g. `SIGKILL`.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_read_is_whole_or_cut_at_a_page() {
        let whole = include_str!("../../tests/fixtures/maps/cat_jemalloc.txt");
        assert!(reaches_the_stack(whole));
        // Cut after libc's lines, before jemalloc's above them: what an exit between two
        // pages of the file leaves.
        let cut: String = whole.lines().take(17).map(|l| format!("{l}\n")).collect();
        assert!(cut.contains("libc.so.6") && !cut.contains("libjemalloc"));
        assert!(!reaches_the_stack(&cut));
        // This process's own maps, read through the real file, are whole.
        let own = read_maps_text(std::process::id() as i32).unwrap();
        assert!(reaches_the_stack(&own), "{own}");
    }

    #[test]
    fn a_refused_read_tells_root_something_other_than_to_run_as_root() {
        let e = ProcError::PermissionDenied {
            path: "/proc/1/smaps_rollup".into(),
        };
        let text = e.to_string();
        assert!(text.starts_with("permission denied reading /proc/1/smaps_rollup: "));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(!text.contains("or as root"), "{text}");
            assert!(text.contains("CAP_SYS_PTRACE"), "{text}");
        } else {
            assert!(text.contains("or as root"), "{text}");
        }
    }

    const STAT: &str = include_str!("../../tests/fixtures/proc/python_threads.stat");
    const STATUS: &str = include_str!("../../tests/fixtures/proc/python_threads.status");
    const ROLLUP: &str = include_str!("../../tests/fixtures/proc/python_threads.smaps_rollup");
    const ENVIRON: &[u8] = include_bytes!("../../tests/fixtures/proc/python_threads.environ");

    #[test]
    fn stat_fields_from_captured_text() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(s.pid, 4577);
        assert_eq!(s.comm, "python3");
        assert_eq!(s.state, 'R');
        assert_eq!(s.ppid, 4517);
        assert_eq!(s.pgrp, 4514);
        assert_eq!(s.minflt, 8415);
        assert_eq!(s.utime_ticks, 6);
        assert_eq!(s.stime_ticks, 13);
        assert_eq!(s.num_threads, 6);
        assert_eq!(s.starttime_ticks, 17663);
        assert_eq!(s.vsize_bytes, 154_984_448);
        assert_eq!(s.rss_pages, 10201);
    }

    #[test]
    fn stat_comm_with_spaces_and_parens() {
        let text = "77 (a) b (c)) S 1 77 77 0 -1 0 1 0 2 0 3 4 0 0 20 0 9 0 555 1000 7 0";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.num_threads, 9);
        assert_eq!(s.starttime_ticks, 555);
        assert_eq!(s.rss_pages, 7);
    }

    #[test]
    fn stat_truncated_is_an_error() {
        assert!(parse_stat("12 (x) S 1 2").is_err());
        assert!(parse_stat("garbage").is_err());
    }

    #[test]
    fn status_fields_from_captured_text() {
        let s = parse_status(STATUS).unwrap();
        assert_eq!(s.name, "python3");
        assert_eq!(s.state, 'R');
        assert_eq!(s.ppid, 4517);
        assert_eq!(s.threads, 6);
        assert_eq!(s.vm_hwm, 40924 * 1024);
        assert_eq!(s.vm_rss, 40924 * 1024);
        assert_eq!(s.vm_rss, s.rss_anon + s.rss_file + s.rss_shmem);
        assert!(s.vm_size >= s.vm_rss);
        assert!(s.vm_peak >= s.vm_size);
    }

    #[test]
    fn status_of_kernel_thread_has_no_vm_lines() {
        let text = "Name:\tkthreadd\nState:\tS (sleeping)\nPPid:\t0\nThreads:\t1\n";
        let s = parse_status(text).unwrap();
        assert_eq!(s.vm_rss, 0);
        assert_eq!(s.threads, 1);
    }

    #[test]
    fn smaps_rollup_from_captured_text() {
        let r = parse_smaps_rollup(ROLLUP).unwrap();
        assert!(r.pss > 0);
        assert!(r.pss <= r.rss);
        assert!(r.uss <= r.pss);
        assert_eq!(r.pss, r.pss_anon + r.pss_file + r.pss_shmem);
    }

    #[test]
    fn smaps_rollup_without_pss_is_an_error() {
        assert!(parse_smaps_rollup("Rss: 12 kB\n").is_err());
    }

    #[test]
    fn environ_pairs() {
        let env = parse_environ(ENVIRON);
        assert!(env.contains(&("MALLOC_ARENA_MAX".into(), "2".into())));
        assert!(env.contains(&(
            "LD_PRELOAD".into(),
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2".into()
        )));
    }

    #[test]
    fn loadavg_last_pid() {
        assert_eq!(
            parse_loadavg_last_pid("0.52 0.58 0.59 2/1104 31337\n"),
            Some(31337)
        );
        assert_eq!(parse_loadavg_last_pid("garbage"), None);
        assert!(last_pid().is_some());
        let mut kept = crate::linux::kept::KeptSlot::default();
        let a = last_pid_kept(&mut kept).unwrap();
        std::process::Command::new("true").status().unwrap();
        let b = last_pid_kept(&mut kept).unwrap();
        assert_ne!(a, b, "a process was created between the reads");
    }

    #[test]
    fn reading_a_missing_process_is_gone() {
        // PID numbers above pid_max never exist.
        match read_status(i32::MAX) {
            Err(ProcError::Gone { .. }) => {}
            other => panic!("expected Gone, got {other:?}"),
        }
    }

    #[test]
    fn reading_self_works() {
        let me = std::process::id() as i32;
        let s = read_status(me).unwrap();
        assert!(s.vm_rss > 0);
        let st = read_stat(me).unwrap();
        assert_eq!(st.pid, me);
        assert!(list_pids().unwrap().contains(&me));
    }

    #[test]
    fn a_kb_figure_that_overflows_is_refused_not_wrapped() {
        let e = parse_status("Name:\tx\nVmRSS:\t18446744073709551615 kB\n").unwrap_err();
        assert!(e.to_string().contains("VmRSS"), "{e}");
        let s = parse_status("Name:\tx\nVmRSS:\t18014398509481983 kB\n").unwrap();
        assert_eq!(s.vm_rss, 18014398509481983 * 1024);
    }

    /// A `status` of a megabyte of lines parses like a small one.
    #[test]
    fn a_huge_status_parses() {
        let mut text = String::from("Name:\tx\nThreads:\t3\n");
        while text.len() < 1 << 20 {
            text.push_str("Other:\t18446744073709551616 kB\tpadding padding padding\n");
        }
        assert_eq!(parse_status(&text).unwrap().threads, 3);
    }

    #[test]
    fn uids_and_the_namespace_pid() {
        let s = parse_status("Name:\tx\nUid:\t1000\t1001\t1002\t1003\nNSpid:\t4242\t17\n").unwrap();
        assert_eq!(s.uids, vec![1000, 1001, 1002, 1003]);
        assert_eq!(s.ns_pid, Some(17));
        let s = parse_status("Name:\tx\nUid:\t1000\tx\nNSpid:\t-\n").unwrap();
        assert!(s.uids.is_empty());
        assert_eq!(s.ns_pid, None);
    }

    /// A line of `status` with a hostile value: huge, negative, not a number, empty,
    /// control characters, very long.
    fn hostile_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<u64>().prop_map(|n| format!("{n} kB")),
            any::<i64>().prop_map(|n| n.to_string()),
            Just("18446744073709551616 kB".to_string()),
            Just("99999999999999999999999 kB".to_string()),
            "\\PC{0,40}",
            "[0-9 \t]{0,300}",
            proptest::collection::vec(any::<u32>(), 0..6).prop_map(|v| v
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join("\t")),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 64, ..Default::default() })]
        /// A `status` of any keys and values, at any size (up to hundreds of lines),
        /// parses or is refused; it never panics, and what parses is what was written.
        #[test]
        fn status_of_hostile_content_never_panics(
            lines in proptest::collection::vec(
                (proptest::sample::select(vec![
                    "Name", "State", "PPid", "Threads", "VmRSS", "VmHWM", "VmSwap", "Uid",
                    "NSpid", "RssAnon", "Other",
                ]), hostile_value()),
                0..200,
            )
        ) {
            let text: String = lines.iter().map(|(k, v)| format!("{k}:\t{v}\n")).collect();
            if let Ok(s) = parse_status(&text) {
                if let Some(n) = s.ns_pid {
                    let last = lines.iter().rev().find(|(k, _)| *k == "NSpid").map(|(_, v)| v);
                    proptest::prop_assert!(last.is_some_and(|v| v.split_whitespace().last() == Some(&n.to_string())));
                }
            }
            let _ = parse_stat(&text);
            let _ = parse_smaps_rollup(&text);
            let _ = parse_environ(text.as_bytes());
        }
    }
}

/// What this process (all its threads, not its children) has used so far, from
/// `getrusage(RUSAGE_SELF)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelfUsage {
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// The kernel's high-water mark of this process's RSS, bytes: `VmHWM` of
    /// `/proc/self/status` (this image's own; `ru_maxrss` keeps the parent's at the fork,
    /// across exec, so a large parent's would be taken for memtrial's), else `ru_maxrss`.
    pub max_rss_bytes: u64,
}

/// This process's own CPU and peak RSS; `None` if the kernel refuses (it does not).
pub fn self_usage() -> Option<SelfUsage> {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF and a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(SelfUsage {
        cpu_seconds: secs(ru.ru_utime) + secs(ru.ru_stime),
        max_rss_bytes: read_status(std::process::id() as i32)
            .map(|st| st.vm_hwm)
            .unwrap_or(ru.ru_maxrss.max(0) as u64 * 1024),
    })
}
