//! The exporter's trust boundaries (issue 19): a watched process cannot freeze it or make
//! it read what it should not (probe files), no number of idle or half-sent connections
//! exhausts it, and it never exports itself. Loopback only; bounded counts; every process
//! and connection started here ends with the test.

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use crate::exporter::{http_get, refused, series, start_exporter, status_field, Killed};

/// `/bin/sleep` copied under `name` (its comm), started with `env`, for 120 s.
fn sleeper(dir: &Path, name: &str, env: &[(&str, &str)]) -> Killed {
    let p = dir.join(name);
    std::fs::copy("/bin/sleep", &p).expect("copy /bin/sleep");
    Killed(
        Command::new(&p)
            .arg("120")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the sleeper"),
    )
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// A character device like /dev/zero (root only); else a symbolic link to it.
fn dev_zero(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path; makedev(1, 5) is /dev/zero.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 5)) };
    if made != 0 {
        std::os::unix::fs::symlink("/dev/zero", p).unwrap();
    }
}

/// A probe report whose figures no real process of these tests has: if they show, the
/// exporter read the file.
fn report(live: u64) -> String {
    format!(
        "# memtrial-probe 1 1 glibc /lib/libc.so.6\n1000\t{live}\t{}\t-\t-\t-\t-\t-\t-\t-\n",
        live * 2
    )
}

/// A process that sets `MEMTRIAL_PROBE_DIR` to a directory holding a FIFO named after its
/// PID, a symbolic link to a secret, or `/dev/zero`: the exporter answers every scrape
/// and shows nothing of them. Only its own `--probe-dir` is looked in, and there only a
/// regular file of the process's own uid is read — shown by a well-behaved neighbour.
#[test]
fn a_hostile_probe_dir_cannot_freeze_the_exporter_nor_leak() {
    let dir = tempfile::tempdir().unwrap();
    let id = std::process::id();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, report(987_654_321)).unwrap();

    // 1. The process names a directory of its choosing: never opened.
    let chosen = dir.path().join("chosen");
    std::fs::create_dir(&chosen).unwrap();
    let chosen_s = chosen.display().to_string();
    let fifo = sleeper(
        dir.path(),
        &format!("mtqf{id}"),
        &[("MEMTRIAL_PROBE_DIR", &chosen_s)],
    );
    mkfifo(&chosen.join(fifo.pid().to_string()));
    let linked = sleeper(
        dir.path(),
        &format!("mtql{id}"),
        &[("MEMTRIAL_PROBE_DIR", &chosen_s)],
    );
    std::os::unix::fs::symlink(&secret, chosen.join(linked.pid().to_string())).unwrap();
    let e = start_exporter(&memtrial(), &["--match", &format!("^mtq[fl]{id}$")], &[]);
    for _ in 0..3 {
        let (code, text) = http_get(e.addr, "/metrics").expect("the exporter answers");
        assert_eq!(code, 200, "{text}");
        assert!(text.contains(&format!("group=\"mtqf{id}\"")), "{text}");
        assert!(!text.contains("987654321"), "{text}");
        assert!(
            !text.contains("memtrial_group_allocator_live_bytes{"),
            "{text}"
        );
    }
    drop(e);

    // 2. The exporter's own --probe-dir, holding the same traps, and one honest report.
    let probe = dir.path().join("probe");
    std::fs::create_dir(&probe).unwrap();
    let probe_s = probe.display().to_string();
    let env = [("MEMTRIAL_PROBE_DIR", probe_s.as_str())];
    let fifo2 = sleeper(dir.path(), &format!("mtrf{id}"), &env);
    mkfifo(&probe.join(fifo2.pid().to_string()));
    let link2 = sleeper(dir.path(), &format!("mtrl{id}"), &env);
    std::os::unix::fs::symlink(&secret, probe.join(link2.pid().to_string())).unwrap();
    let zero = sleeper(dir.path(), &format!("mtrz{id}"), &env);
    dev_zero(&probe.join(zero.pid().to_string()));
    let honest = sleeper(dir.path(), &format!("mtrh{id}"), &env);
    std::fs::write(probe.join(honest.pid().to_string()), report(4_242_424)).unwrap();
    let e = start_exporter(
        &memtrial(),
        &[
            "--match",
            &format!("^mtr[flzh]{id}$"),
            "--probe-dir",
            &probe_s,
        ],
        &[],
    );
    for _ in 0..3 {
        let (code, text) = http_get(e.addr, "/metrics").expect("the exporter answers");
        assert_eq!(code, 200, "{text}");
        assert_eq!(
            series(
                &text,
                &format!("memtrial_group_allocator_live_bytes{{group=\"mtrh{id}\"}}")
            ),
            Some(4_242_424.0),
            "the honest report is read:\n{text}"
        );
        for trap in ['f', 'l', 'z'] {
            let g = format!("{{group=\"mtr{trap}{id}\"}}");
            assert_eq!(
                series(&text, &format!("memtrial_group_processes{g}")),
                Some(1.0),
                "{text}"
            );
            assert_eq!(
                series(&text, &format!("memtrial_group_probed_processes{g}")),
                Some(0.0),
                "{text}"
            );
            assert_eq!(
                series(&text, &format!("memtrial_group_allocator_live_bytes{g}")),
                None,
                "{text}"
            );
        }
        assert!(!text.contains("987654321"), "{text}");
        // Refused, and said so: a FIFO, a link, a device.
        assert_eq!(
            series(
                &text,
                "memtrial_unreadable_processes{reason=\"probe_refused\"}"
            ),
            Some(3.0),
            "{text}"
        );
    }
    drop((fifo, linked, fifo2, link2, zero, honest));
}

/// A process in a mount namespace of its own runs an executable whose path is, in the
/// exporter's namespace, a FIFO: the exporter resolves `/proc/PID/exe`'s path in its own
/// namespace and must not block opening it (it did: every scrape hung).
#[test]
fn an_executable_path_that_is_a_fifo_here_does_not_freeze_the_exporter() {
    if !(need_root("it makes a mount namespace") && need_file("/usr/bin/unshare", "util-linux")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("mtx{}", std::process::id());
    let here = dir.path().join(&name);
    mkfifo(&here);
    // In its own namespace a tmpfs hides the FIFO, and the program is a copy of sleep.
    let d = dir.path().display().to_string();
    let script =
        format!("mount -t tmpfs none '{d}' && cp /bin/sleep '{d}/{name}' && exec '{d}/{name}' 120");
    let mut child = Killed(
        Command::new("/usr/bin/unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                &script,
            ])
            .spawn()
            .expect("unshare"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(format!("/proc/{}/comm", child.pid()))
        .map_or(true, |c| c.trim() != name)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the program did not start"
        );
        assert!(child.0.try_wait().unwrap().is_none(), "unshare failed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = start_exporter(&memtrial(), &["--match", &format!("^{name}$")], &[]);
    for _ in 0..2 {
        let (code, text) = http_get(e.addr, "/metrics").expect("the exporter answers");
        assert_eq!(code, 200, "{text}");
        assert_eq!(
            series(
                &text,
                &format!("memtrial_group_processes{{group=\"{name}\"}}")
            ),
            Some(1.0),
            "{text}"
        );
    }
    drop(e);
    let _ = child.0.kill();
}

/// `memtrial exporter`'s threads: its `/proc/PID/status` `Threads`.
fn threads(e: &crate::exporter::Exporter) -> u64 {
    status_field(e.child.pid(), "Threads")
}

/// 300 connections that send nothing or half a request: the exporter keeps a fixed
/// number of threads, still answers a scrape, and closes the half-sent ones after its
/// head timeout (5 s; the test allows 60 s).
#[test]
fn idle_and_partial_connections_cannot_exhaust_the_exporter() {
    let e = start_exporter(&memtrial(), &["--match", "^no-such-process-x$"], &[]);
    // The main thread (accepting, reading request heads) and 2 workers; one spare.
    let bound = 4;
    let before = threads(&e);
    assert!(before <= bound, "{before} threads before any connection");
    let mut conns = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect_timeout(&e.addr, Duration::from_secs(5)).expect("connect");
        if i % 2 == 1 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
        }
        conns.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = threads(&e);
    assert!(
        during <= bound,
        "{during} threads with 300 idle connections (before: {before})"
    );
    let (code, text) = http_get(e.addr, "/metrics").expect("a scrape is answered");
    assert_eq!(code, 200, "{text}");
    assert!(
        series(&text, "memtrial_exporter_scrapes_total").is_some(),
        "{text}"
    );
    // The most recent half-sent connection is closed by the exporter, not by us.
    let mut last = conns.pop().expect("a connection");
    last.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let closed = last.read_to_end(&mut got);
    assert!(closed.is_ok(), "still open after 60 s: {closed:?}");
    let said = String::from_utf8_lossy(&got);
    assert!(
        said.is_empty() || said.starts_with("HTTP/1.1 408 "),
        "{said}"
    );
    assert!(threads(&e) <= bound);
    drop(conns);
}

/// A regex that the exporter's own command line matches does not make it export itself.
#[test]
fn the_exporter_never_exports_itself() {
    let token = format!("mtself{}", std::process::id());
    let e = start_exporter(&memtrial(), &["--match", &token], &[]);
    let (code, text) = http_get(e.addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{text}");
    assert!(!text.contains("memtrial_group_processes{"), "{text}");
}

/// A regex matching every process is refused, naming the flag.
#[test]
fn a_match_of_everything_is_refused() {
    for all in ["", ".*", "puma|"] {
        refused(
            &["--listen", "127.0.0.1:0", "--match", all],
            &[
                &format!("--match '{all}': matches the empty string"),
                "every process",
            ],
        );
    }
    refused(
        &[
            "--listen",
            "127.0.0.1:0",
            "--match",
            "x",
            "--probe-dir",
            "relative/dir",
        ],
        &["--probe-dir relative/dir: not an absolute path"],
    );
}

/// Where `memtrial run` has its workload report: `<log>.probe/allocator` under `root`.
pub(crate) fn run_probe_dir(root: &Path) -> Option<PathBuf> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if p.file_name().is_some_and(|n| n == "allocator")
                && p.parent()
                    .and_then(|q| q.extension())
                    .is_some_and(|x| x == "probe")
            {
                return Some(p);
            }
            stack.push(p);
        }
    }
    None
}
