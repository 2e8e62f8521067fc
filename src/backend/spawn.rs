//! The spawner: a fresh, small process between memtrial and the workload, so that the
//! workload's peak is its own.
//!
//! The kernel's `ru_maxrss` of a process is the largest RSS of every memory image it
//! had: a child forked from memtrial starts as a copy of memtrial's pages (and a
//! `vfork`/`posix_spawn` child *is* memtrial's memory until it execs), and that mark
//! survives `exec` — `memtrial run -- /bin/true` reported memtrial's own size. So
//! the run's child execs a small spawner, and that process forks the workload: the
//! workload's first image is a copy of the spawner, not of memtrial. The spawner is
//! `spawner/spawn.c`, built static by `build.rs` and embedded (a few dozen KiB of private
//! pages). Where the embedded spawner cannot be put in a memory file at run time, memtrial
//! starts itself again (`/proc/self/exe __memtrial-spawn …`, [`spawner_main`]), a fresh
//! image whose start-up pages (~1.3 MiB) can still show as the peak of a very small
//! program. The spawner waits for the workload (`wait4`, through `linux::child`)
//! and reports the workload's exit and resource usage on a pipe, then exits the same way.
//! The workload leads a process group of its own, which memtrial signals; the spawner
//! ignores the usual stop signals all the same, so that it outlives the workload to
//! report (even when the workload is SIGKILLed), and the workload gets the default
//! dispositions back.

use std::ffi::{CString, OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::OnceLock;

use super::{ExitKind, Usage};
use crate::linux::child::Child;

/// The spawner built from `spawner/spawn.c` by build.rs (which fails without a C compiler).
const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/memtrial-spawn"));

/// How build.rs linked the embedded spawner: `static`, or `dynamic` where libc.a is missing.
const EMBEDDED_LINKAGE: &str = env!("MEMTRIAL_SPAWNER_LINKAGE");

/// The embedded spawner in a sealed memory file, made once per process; the error says why
/// it could not be (then memtrial itself is the spawner).
fn memfd() -> &'static Result<OwnedFd, String> {
    static MEMFD: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    MEMFD.get_or_init(|| embedded_memfd().map_err(|e| e.to_string()))
}

/// The program a run's child execs as its spawner: the embedded C spawner, run from a
/// sealed memory file, or else memtrial itself (`/proc/self/exe`).
pub(crate) fn spawner_program() -> PathBuf {
    match memfd() {
        Ok(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        Err(_) => PathBuf::from("/proc/self/exe"),
    }
}

/// Which spawner this memtrial's runs start their workloads through, for the experiment's
/// notes (it changes a small program's peak), and whether it is the fallback that can.
pub fn spawner_note() -> (String, bool) {
    match memfd() {
        Ok(_) => (
            format!(
                "spawner: memtrial's embedded C spawner ({EMBEDDED_LINKAGE}, {} KiB, SHA-256 \
                 {}), run from a sealed memory file",
                EMBEDDED.len().div_ceil(1024),
                &crate::units::sha256_hex(EMBEDDED)[..16]
            ),
            false,
        ),
        Err(e) => (
            format!(
                "spawner: memtrial itself (/proc/self/exe), because the embedded spawner could \
                 not be put in a memory file ({e}): a program smaller than ~1.3 MiB may show \
                 memtrial's start-up pages as its peak RSS"
            ),
            true,
        ),
    }
}

/// The embedded spawner in an anonymous memory file, sealed and reopened read-only (a
/// file open for writing cannot be executed).
fn embedded_memfd() -> std::io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and flags.
    let fd = unsafe {
        libc::memfd_create(
            c"memtrial-spawn".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created and ours.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(EMBEDDED)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on our descriptor.
    unsafe {
        libc::fcntl(fd, libc::F_ADD_SEALS, seals);
    }
    let ro = std::fs::File::open(format!("/proc/self/fd/{fd}"))?;
    drop(file);
    Ok(OwnedFd::from(ro))
}

/// `argv[1]` that makes memtrial the spawner.
pub const SPAWN_ARG: &str = "__memtrial-spawn";

/// The option of the spawner's first argument that turns THP off for the workload.
const NOTHP: &str = ",nothp";

/// The signals memtrial sends a run's process group to stop it.
const STOP_SIGNALS: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// The spawner's arguments after [`SPAWN_ARG`]: `<report fd>[:<gate fd>][,nothp] <n env>
/// K=V… <program> <argv0> <args…>`. With a gate, the spawner forks the workload only once
/// memtrial has written to the gate or closed it: what memtrial attaches to the spawner
/// meanwhile (the CPU probe's perf events) the workload inherits from its first instruction.
/// With `nothp`, the workload's transparent huge pages are turned off before it execs
/// (`prctl(PR_SET_THP_DISABLE)`, kept across exec and inherited by its children); a
/// refusal is reported as the exec's failure.
pub(crate) fn spawner_args(
    report_fd: RawFd,
    gate_fd: Option<RawFd>,
    thp_off: bool,
    env: &[(String, String)],
    program: &OsStr,
    argv: &[String],
) -> Vec<OsString> {
    let mut fds = match gate_fd {
        Some(g) => format!("{report_fd}:{g}"),
        None => report_fd.to_string(),
    };
    if thp_off {
        fds.push_str(NOTHP);
    }
    let mut a: Vec<OsString> = vec![SPAWN_ARG.into(), fds.into()];
    a.push(env.len().to_string().into());
    a.extend(env.iter().map(|(k, v)| OsString::from(format!("{k}={v}"))));
    a.push(program.to_os_string());
    a.extend(argv.iter().map(OsString::from));
    a
}

/// What the spawner reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Report {
    /// The workload could not be exec'd: errno.
    ExecFailed(i32),
    /// The workload runs, with this PID (the leader of its own process group), forked at
    /// this `CLOCK_MONOTONIC` in ns (0 when unknown): the run's zero even when memtrial
    /// was stopped meanwhile.
    Started(i32, u64),
    /// The workload exited, with `CLOCK_MONOTONIC` in ns when the spawner reaped it (0 when
    /// unknown): the spawner is not stopped when memtrial is, so this is the run's end
    /// even when memtrial reads the report late.
    Exited(ExitKind, Usage, u64),
}

impl Report {
    fn line(&self) -> String {
        match self {
            Report::ExecFailed(e) => format!("E {e}\n"),
            Report::Started(pid, forked_ns) => format!("S {pid} {forked_ns}\n"),
            Report::Exited(kind, u, exited_ns) => {
                let (k, v) = match kind {
                    ExitKind::Code(c) => ('c', *c),
                    ExitKind::Signal(s) => ('s', *s),
                };
                format!(
                    "X {k} {v} {} {} {} {} {} {exited_ns}\n",
                    (u.user_seconds * 1e6).round() as u64,
                    (u.sys_seconds * 1e6).round() as u64,
                    u.maxrss_bytes,
                    u.minor_faults,
                    u.major_faults
                )
            }
        }
    }

    /// Parses one report line; `None` for anything else.
    pub fn parse(line: &str) -> Option<Report> {
        let mut w = line.split_whitespace();
        match w.next()? {
            "E" => Some(Report::ExecFailed(w.next()?.parse().ok()?)),
            "S" => Some(Report::Started(
                w.next()?.parse().ok()?,
                w.next().and_then(|n| n.parse().ok()).unwrap_or(0),
            )),
            "X" => {
                let k = w.next()?;
                let v: i32 = w.next()?.parse().ok()?;
                let kind = match k {
                    "c" => ExitKind::Code(v),
                    "s" => ExitKind::Signal(v),
                    _ => return None,
                };
                let mut n = || w.next()?.parse::<u64>().ok();
                let usage = Usage {
                    user_seconds: n()? as f64 / 1e6,
                    sys_seconds: n()? as f64 / 1e6,
                    maxrss_bytes: n()?,
                    minor_faults: n()?,
                    major_faults: n()?,
                };
                Some(Report::Exited(kind, usage, n().unwrap_or(0)))
            }
            _ => None,
        }
    }
}

/// Reads the reports of a spawner from its pipe.
pub struct Reports {
    pipe: std::fs::File,
    buf: Vec<u8>,
}

impl Reports {
    pub fn new(fd: OwnedFd) -> Reports {
        Reports {
            pipe: std::fs::File::from(fd),
            buf: Vec::new(),
        }
    }

    /// The next report, blocking until one comes; `None` at the end of the pipe.
    pub(crate) fn next_report(&mut self) -> Option<Report> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Report::parse(&String::from_utf8_lossy(&line));
            }
            let mut chunk = [0u8; 256];
            match self.pipe.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }
}

/// The spawner was started with arguments memtrial did not make.
#[derive(Debug, thiserror::Error)]
#[error("{SPAWN_ARG} is memtrial's own way to start a workload; it is not for direct use")]
pub struct NotForDirectUse;

/// The spawner's main: `args` are those after [`SPAWN_ARG`]. Returns the exit code the
/// workload had (when it died of a signal, the spawner dies of it first).
pub fn spawner_main(args: Vec<OsString>) -> Result<i32, NotForDirectUse> {
    let parsed = parse_args(args).ok_or(NotForDirectUse)?;
    let Parsed {
        report_fd,
        gate_fd,
        thp_off,
        env,
        program,
        argv,
    } = parsed;
    // SAFETY: the descriptor was handed to us by memtrial for this purpose.
    let mut report = unsafe { std::fs::File::from_raw_fd(report_fd) };
    set_cloexec(report_fd);
    for s in STOP_SIGNALS {
        // SAFETY: setting a disposition to SIG_IGN has no preconditions.
        unsafe {
            libc::signal(s, libc::SIG_IGN);
        }
    }
    // Everything the child needs is built before fork: after it, only exec or _exit.
    let envp = environment(env);
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    let argv_c: Vec<CString> = argv
        .into_iter()
        .filter_map(|a| CString::new(a).ok())
        .collect();
    let mut argv_ptrs: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let Ok(program) = CString::new(program) else {
        let _ = report.write_all(Report::ExecFailed(libc::EINVAL).line().as_bytes());
        return Ok(127);
    };
    if let Some(g) = gate_fd {
        // SAFETY: the descriptor was handed to us by memtrial for this purpose; any byte or
        // the end of the pipe opens the gate.
        let mut gate = unsafe { std::fs::File::from_raw_fd(g) };
        let _ = gate.read(&mut [0u8; 1]);
    }
    let mut status_pipe = [0; 2];
    // SAFETY: a valid array of two ints.
    if unsafe { libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let _ = report.write_all(Report::ExecFailed(errno()).line().as_bytes());
        return Ok(127);
    }
    let forked = monotonic_ns();
    // SAFETY: this process is single-threaded here; the child only calls
    // async-signal-safe functions before exec.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: async-signal-safe calls on prepared data; never returns.
        unsafe {
            for s in STOP_SIGNALS.iter().chain(&[libc::SIGPIPE]) {
                libc::signal(*s, libc::SIG_DFL);
            }
            libc::setpgid(0, 0);
            if thp_off && libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0 {
                let e = errno().to_ne_bytes();
                libc::write(status_pipe[1], e.as_ptr().cast(), e.len());
                libc::_exit(127);
            }
            libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            let e = errno().to_ne_bytes();
            libc::write(status_pipe[1], e.as_ptr().cast(), e.len());
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe {
        libc::close(status_pipe[1]);
    }
    if pid < 0 {
        let _ = report.write_all(Report::ExecFailed(errno()).line().as_bytes());
        return Ok(127);
    }
    // SAFETY: the read end is ours.
    let mut status = unsafe { std::fs::File::from(OwnedFd::from_raw_fd(status_pipe[0])) };
    let mut e = [0u8; 4];
    let started = match status.read(&mut e) {
        Ok(4) => Report::ExecFailed(i32::from_ne_bytes(e)),
        _ => Report::Started(pid, forked),
    };
    let _ = report.write_all(started.line().as_bytes());
    let (kind, usage) = reap(pid);
    let exited = monotonic_ns();
    let _ = report.write_all(Report::Exited(kind, usage, exited).line().as_bytes());
    drop(report);
    if let Report::ExecFailed(_) = started {
        return Ok(127);
    }
    Ok(exit_like(kind))
}

/// Ends as the workload ended: dies of its signal (its default action), or returns its
/// exit code (`128 + signal` should the signal not end the spawner).
fn exit_like(kind: ExitKind) -> i32 {
    match kind {
        ExitKind::Code(c) => c,
        ExitKind::Signal(s) => {
            // SAFETY: die of the same signal, with its default action.
            unsafe {
                libc::signal(s, libc::SIG_DFL);
                libc::raise(s);
            }
            128 + s
        }
    }
}

struct Parsed {
    report_fd: RawFd,
    gate_fd: Option<RawFd>,
    thp_off: bool,
    env: Vec<Vec<u8>>,
    program: Vec<u8>,
    argv: Vec<Vec<u8>>,
}

fn parse_args(args: Vec<OsString>) -> Option<Parsed> {
    let mut it = args.into_iter().map(OsStringExt::into_vec);
    let num = |b: Vec<u8>| String::from_utf8(b).ok()?.parse::<usize>().ok();
    let first = String::from_utf8(it.next()?).ok()?;
    let (fds, thp_off) = match first.strip_suffix(NOTHP) {
        Some(fds) => (fds.to_string(), true),
        None => (first, false),
    };
    let (report, gate) = match fds.split_once(':') {
        Some((r, g)) => (r, Some(g)),
        None => (fds.as_str(), None),
    };
    let report_fd = report.parse::<RawFd>().ok().filter(|fd| *fd >= 0)?;
    let gate_fd = match gate {
        Some(g) => Some(g.parse::<RawFd>().ok().filter(|fd| *fd >= 0)?),
        None => None,
    };
    let n_env = num(it.next()?)?;
    let env: Vec<Vec<u8>> = it.by_ref().take(n_env).collect();
    if env.len() != n_env {
        return None;
    }
    let program = it.next()?;
    let argv: Vec<Vec<u8>> = it.collect();
    if argv.is_empty() {
        return None;
    }
    Some(Parsed {
        report_fd,
        gate_fd,
        thp_off,
        env,
        program,
        argv,
    })
}

/// The spawner's own environment with the workload's settings on top.
fn environment(set: Vec<Vec<u8>>) -> Vec<CString> {
    let key = |kv: &[u8]| kv.split(|b| *b == b'=').next().map(<[u8]>::to_vec);
    let keys: Vec<Vec<u8>> = set.iter().filter_map(|kv| key(kv)).collect();
    std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            kv
        })
        .filter(|kv| key(kv).is_none_or(|k| !keys.contains(&k)))
        .chain(set)
        .filter_map(|kv| CString::new(kv).ok())
        .collect()
}

/// Waits for the workload: its exit and usage (exit code 127 when it cannot be waited for).
fn reap(pid: i32) -> (ExitKind, Usage) {
    match Child::forked(pid).wait() {
        Ok(e) => (exit_kind(e.status), usage(&e.rusage)),
        Err(_) => (ExitKind::Code(127), Usage::default()),
    }
}

/// A `wait` status as an exit.
pub(crate) fn exit_kind(status: ExitStatus) -> ExitKind {
    let status = status.into_raw();
    if libc::WIFSIGNALED(status) {
        ExitKind::Signal(libc::WTERMSIG(status))
    } else {
        ExitKind::Code(libc::WEXITSTATUS(status))
    }
}

/// `rusage` in our units.
pub fn usage(ru: &libc::rusage) -> Usage {
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Usage {
        user_seconds: secs(ru.ru_utime),
        sys_seconds: secs(ru.ru_stime),
        maxrss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
        minor_faults: ru.ru_minflt.max(0) as u64,
        major_faults: ru.ru_majflt.max(0) as u64,
    }
}

/// `CLOCK_MONOTONIC` in ns (0 if it cannot be read): the clock of `std::time::Instant` on
/// Linux, readable by another process.
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain data; clock_gettime fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec.max(0) as u64)
}

/// The `Instant` of a `CLOCK_MONOTONIC` reading `ns` taken in the past (by the spawner);
/// `None` when it is unknown (0) or not in the past.
pub(crate) fn instant_of(ns: u64) -> Option<std::time::Instant> {
    let now = std::time::Instant::now();
    let mono = monotonic_ns();
    if ns == 0 || ns > mono {
        return None;
    }
    now.checked_sub(std::time::Duration::from_nanos(mono - ns))
}

fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        for r in [
            Report::ExecFailed(2),
            Report::Started(4321, 99),
            Report::Exited(
                ExitKind::Signal(9),
                Usage {
                    user_seconds: 1.25,
                    sys_seconds: 0.5,
                    maxrss_bytes: 1 << 30,
                    minor_faults: 7,
                    major_faults: 1,
                },
                123_456_789_000,
            ),
        ] {
            assert_eq!(Report::parse(&r.line()), Some(r));
        }
        // The exit's time is read when it is there.
        assert!(matches!(
            Report::parse("X c 0 1 2 3 4 5"),
            Some(Report::Exited(ExitKind::Code(0), _, 0))
        ));
        let past = monotonic_ns() - 1_000_000_000;
        let at = instant_of(past).unwrap();
        let ago = at.elapsed().as_secs_f64();
        assert!((1.0..10.0).contains(&ago), "{ago}");
        assert_eq!(instant_of(0), None);
        assert_eq!(instant_of(u64::MAX), None);
        assert_eq!(Report::parse("X c"), None);
        assert_eq!(Report::parse(""), None);
    }

    #[test]
    fn arguments_round_trip() {
        let a = spawner_args(
            5,
            None,
            false,
            &[("A".into(), "1=2".into())],
            OsStr::new("/bin/echo"),
            &["echo".into(), "hi".into()],
        );
        assert_eq!(a[0], SPAWN_ARG);
        let p = parse_args(a[1..].to_vec()).unwrap();
        assert_eq!(p.report_fd, 5);
        assert_eq!(p.env, vec![b"A=1=2".to_vec()]);
        assert_eq!(p.program, b"/bin/echo");
        assert_eq!(p.argv, vec![b"echo".to_vec(), b"hi".to_vec()]);
        assert_eq!(p.gate_fd, None);
        assert!(!p.thp_off);
        assert!(parse_args(vec!["x".into()]).is_none());
        let gated = spawner_args(
            5,
            Some(9),
            false,
            &[],
            OsStr::new("/bin/true"),
            &["true".into()],
        );
        assert_eq!(gated[1], "5:9");
        let p = parse_args(gated[1..].to_vec()).unwrap();
        assert_eq!((p.report_fd, p.gate_fd), (5, Some(9)));
        let nothp = spawner_args(
            5,
            Some(9),
            true,
            &[],
            OsStr::new("/bin/true"),
            &["true".into()],
        );
        assert_eq!(nothp[1], "5:9,nothp");
        let p = parse_args(nothp[1..].to_vec()).unwrap();
        assert_eq!((p.report_fd, p.gate_fd, p.thp_off), (5, Some(9), true));
        for bad in ["5:", ":9", "5:-1", "-5"] {
            let mut a = gated[1..].to_vec();
            a[0] = bad.into();
            assert!(parse_args(a).is_none(), "{bad}");
        }
    }
}
