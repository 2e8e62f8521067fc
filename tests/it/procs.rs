//! Processes and time at the trust boundary (issue 19): hooks and drivers never outlive
//! their run, a driver's endless line does not grow memtrial, and a stopped memtrial does
//! not change a run's figures.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::common::*;

/// The PIDs whose argv contains `marker`, read from `/proc` (zombies have none).
fn pids_with_marker(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(argv) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&argv).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Kills what a failed assertion would otherwise leave running.
struct Reaper(Vec<String>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for m in &self.0 {
            for p in pids_with_marker(m) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(p, libc::SIGKILL);
                }
            }
        }
    }
}

/// A `--before` hook and a `--driver` each start a `setsid` daemon and exit; after the
/// run neither daemon is left. `as_user` runs memtrial as that (non-root) uid, where it
/// makes no cgroups and keeps helpers together as a subreaper.
fn setsid_daemons_die_with_the_run(as_user: Option<u32>) {
    let tag = format!("{}-{}", std::process::id(), as_user.unwrap_or(0));
    let before_mark = format!("memtrial-it-before-daemon-{tag}");
    let driver_mark = format!("memtrial-it-driver-daemon-{tag}");
    let _reaper = Reaper(vec![before_mark.clone(), driver_mark.clone()]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let before = format!("setsid sh -c 'sleep 300 # {before_mark}' >/dev/null 2>&1 &");
    // The driver's daemon is started while the workload runs; the driver then exits 0.
    let driver = format!("setsid sh -c 'sleep 301 # {driver_mark}' >/dev/null 2>&1 & sleep 0.3");
    let mut cmd = match as_user {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
            ])
            .arg(memtrial());
            c
        }
        None => Command::new(memtrial()),
    };
    let out = cmd
        .args(run_json_args(
            1,
            "glibc",
            &["--before", &before, "--driver", &driver],
            &["sleep", "30"],
        ))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc = json_in(dir.path());
    assert_eq!(first_run(&doc, "glibc").status, RunStatus::Ok, "{stderr}");
    assert_eq!(
        pids_with_marker(&before_mark),
        Vec::<i32>::new(),
        "the --before hook's daemon outlived the run"
    );
    assert_eq!(
        pids_with_marker(&driver_mark),
        Vec::<i32>::new(),
        "the --driver's daemon outlived the run"
    );
}

#[test]
fn setsid_daemons_of_hooks_and_drivers_die_with_the_run() {
    setsid_daemons_die_with_the_run(None);
}

/// The same without root: no cgroups, memtrial keeps helpers together as a subreaper.
#[test]
fn setsid_daemons_die_with_the_run_without_root() {
    if !need_root("to run memtrial as another, unprivileged user")
        || !need_program("setpriv", "util-linux")
    {
        return;
    }
    setsid_daemons_die_with_the_run(Some(65534));
}

/// Runs memtrial with `args` in `dir`; its exit code and its peak RSS in bytes (`wait4`'s
/// `ru_maxrss`: memtrial's own, or a reaped descendant's if larger).
#[allow(clippy::zombie_processes)] // reaped by wait4 below, for its rusage
fn memtrial_with_peak(dir: &std::path::Path, args: &[&str]) -> (i32, u64, String) {
    // Through a small static launcher: forked straight from this test process, memtrial's
    // ru_maxrss would start from the harness's own resident size (kept across exec).
    let result = dir.join("maxrss");
    let out = Command::new(fixture("maxrss_of"))
        .arg(&result)
        .arg(memtrial())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("memtrial.stderr")).unwrap())
        .status()
        .unwrap();
    assert!(out.success(), "maxrss_of failed: {out}");
    let stderr = std::fs::read_to_string(dir.join("memtrial.stderr")).unwrap_or_default();
    let text = std::fs::read_to_string(&result).unwrap();
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().unwrap());
    let (code, kib) = (it.next().unwrap(), it.next().unwrap());
    (code as i32, kib * 1024, stderr)
}

/// A driver that prints 300 MB without a newline: memtrial reads 64 KiB of the line, says
/// so, reads the lines after it, and its own peak RSS stays far below the line's size.
#[test]
fn a_driver_line_without_newline_keeps_memtrial_small() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let driver = "head -c 300000000 /dev/zero | tr '\\0' a; echo; echo memtrial-figure after_the_long_line 7";
    let args = run_json_args(1, "glibc", &["--driver", driver], &["sleep", "60"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, peak, stderr) = memtrial_with_peak(dir.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        peak < 150 << 20,
        "memtrial's peak RSS was {} MiB reading a 300 MB line",
        peak >> 20
    );
    let doc = json_in(dir.path());
    let run = first_run(&doc, "glibc");
    assert_eq!(run.status, RunStatus::Ok, "{stderr}");
    let driver = driver_of(&run);
    assert_eq!(
        driver.figures.get("after_the_long_line").map(|f| f.value),
        Some(7.0),
        "{driver:?}"
    );
    let ignored = driver.ignored.join("\n");
    assert!(
        ignored.contains("a line of 300000000 bytes was cut to its first 64 KiB"),
        "{ignored}"
    );
    // The run's .driver.stdout keeps the line's head, not the 300 MB.
    let mut stack = vec![dir.path().to_path_buf()];
    let mut logs = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(".driver.stdout") {
                logs.push(p);
            }
        }
    }
    assert_eq!(logs.len(), 1, "{logs:?}");
    let size = std::fs::metadata(&logs[0]).unwrap().len();
    assert!(size < 1 << 20, "{} is {size} bytes", logs[0].display());
}

/// `memtrial run` of `sh -c 'sleep 1; : MARK'` with `extra` flags; when `stop_for` is
/// given, memtrial is stopped (SIGSTOP) for that long once the workload runs. The run.
fn sleep_one(extra: &[&str], stop_for: Option<std::time::Duration>) -> (RunRecord, String) {
    let stop = stop_for.map(|d| (std::time::Duration::ZERO, d));
    stopped_run("sleep 1", extra, stop)
}

/// `memtrial run` of `sh -c 'SCRIPT; : MARK'` with `extra` flags; with `stop` (after,
/// for), memtrial is stopped (SIGSTOP) `after` the workload started, `for` that long. The
/// run and memtrial's stderr.
fn stopped_run(
    script: &str,
    extra: &[&str],
    stop: Option<(std::time::Duration, std::time::Duration)>,
) -> (RunRecord, String) {
    let stop_for = stop.map(|(_, d)| d);
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mark = format!("memtrial-it-sigstop-{}-{call}", std::process::id());
    let _reaper = Reaper(vec![mark.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(memtrial())
        .args(run_json_args(
            1,
            "glibc",
            extra,
            &["sh", "-c", &format!("{script}; : {mark}")],
        ))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(d) = stop_for {
        let seen = std::time::Instant::now();
        // memtrial's own argv has the mark too (and its forks' before they exec): wait
        // for the workload's shell.
        let workload_runs = || {
            pids_with_marker(&mark).iter().any(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|a| a.starts_with(b"sh\0"))
            })
        };
        while !workload_runs() {
            assert!(seen.elapsed().as_secs() < 30, "the workload never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(stop.map(|(after, _)| after).unwrap_or_default());
        // SAFETY: signals to our own child.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGSTOP);
        }
        std::thread::sleep(d);
        // SAFETY: as above.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGCONT);
        }
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    let timeout = extra.contains(&"--timeout") && !script.starts_with("sleep 1");
    // A run that times out makes memtrial exit 1.
    assert_eq!(status.code(), Some(if timeout { 1 } else { 0 }), "{stderr}");
    (first_run(&json_in(dir.path()), "glibc"), stderr)
}

/// memtrial stopped for 3 s while `sleep 1` runs (with `extra` flags): the run is ok, its
/// wall time is the workload's own (within a third of the stop of an undisturbed run's),
/// and the run says memtrial was disturbed.
fn sigstop_changes_no_figure(extra: &[&str]) {
    let stop = std::time::Duration::from_secs(3);
    let (calm, _) = sleep_one(extra, None);
    assert_eq!(calm.status, RunStatus::Ok, "{calm:?}");
    let calm_wall = calm.wall_seconds;
    let (run, stderr) = sleep_one(extra, Some(stop));
    assert_eq!(run.status, RunStatus::Ok, "{extra:?}: {run:?}");
    let wall = run.wall_seconds;
    assert!(
        (wall - calm_wall).abs() < stop.as_secs_f64() / 3.0,
        "{extra:?}: wall {wall} s with memtrial stopped {stop:?}, {calm_wall} s without"
    );
    let message = run.message.unwrap_or_default();
    assert!(
        message.contains("disturbed: memtrial itself did not run for"),
        "{extra:?}: {message}"
    );
    // And the run's line says so as it ends.
    assert!(
        stderr.contains("ok") && stderr.contains("— disturbed: memtrial itself"),
        "{stderr}"
    );
}

#[test]
fn sigstop_of_memtrial_changes_no_wall_time() {
    sigstop_changes_no_figure(&[]);
}

/// `sleep 1` under `--timeout 2s` with memtrial stopped past the timeout: not a timeout.
#[test]
fn sigstop_of_memtrial_fires_no_timeout() {
    sigstop_changes_no_figure(&["--timeout", "2s"]);
}

/// Without cgroups (memtrial as uid 65534) a run's processes are memtrial's descendants:
/// a `--driver` holding 150 MiB is not the workload's (`sleep`) memory.
#[test]
fn a_drivers_memory_is_not_the_workloads_without_cgroups() {
    if !need_root("to run memtrial as another, unprivileged user")
        || !need_program("setpriv", "util-linux")
        || !need_python3()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(memtrial())
        .args(run_json_args(
            1,
            "glibc",
            &[
                "--driver",
                "python3 -c 'import time; x = bytearray(150 << 20); time.sleep(1)'",
            ],
            &["sleep", "30"],
        ))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let run = first_run(&json_in(dir.path()), "glibc");
    assert_eq!(run.status, RunStatus::Ok, "{stderr}");
    let peak = run.peak_rss_bytes;
    assert!(peak < 32 << 20, "sleep's peak was {} MiB", peak >> 20);
    assert_eq!(run.processes_seen, 1, "{run:?}");
}

/// memtrial stopped for 3 s during the grace period of a timeout (a workload ignoring
/// SIGTERM): the workload is killed late, so the run says memtrial was disturbed.
#[test]
fn sigstop_of_memtrial_in_the_grace_period_marks_the_run() {
    let (run, stderr) = stopped_run(
        "trap '' TERM; sleep 30",
        &["--timeout", "1s"],
        Some((
            std::time::Duration::from_millis(1600),
            std::time::Duration::from_secs(3),
        )),
    );
    assert_eq!(run.status, RunStatus::Timeout, "{stderr}");
    let message = run.message.unwrap_or_default();
    assert!(
        message.contains("timed out after 1s; disturbed: memtrial itself did not run for"),
        "{message}"
    );
}

/// The workload knows its probe directory (`MEMTRIAL_PROBE_DIR`): a FIFO and a link to a
/// secret put there under a process-like name must neither freeze the run (opening a FIFO
/// waits for a writer) nor be read. A watchdog ends memtrial if it hangs, and the test
/// then fails on its exit status.
#[test]
fn a_fifo_or_link_in_the_probe_directory_neither_freezes_nor_leaks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "not-a-probe-line\n").unwrap();
    let script = format!(
        "mkfifo \"$MEMTRIAL_PROBE_DIR/4242\" && ln -s {} \"$MEMTRIAL_PROBE_DIR/4243\" && sleep 2",
        dir.path().join("secret").display()
    );
    let out = watched()
        .args(run_json_args(1, "glibc", &[], &["sh", "-c", &script]))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "memtrial hung or failed: {stderr}"
    );
    let doc = json_in(dir.path());
    assert_eq!(first_run(&doc, "glibc").status, RunStatus::Ok);
    assert!(!doc.to_string().contains("not-a-probe-line"));
}

/// The workload knows its own stderr's path: replaced by a FIFO, it must not freeze the
/// run when memtrial reads the loader's words from it (a preload that did not take).
#[test]
fn a_workload_that_turns_its_stderr_into_a_fifo_cannot_freeze_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libnot-elf.so");
    std::fs::write(&fake, "this is text, not a shared object\n".repeat(8)).unwrap();
    let variant = format!("x=preload:{}", fake.display());
    let out = watched()
        .args(run_json_args(
            1,
            "glibc",
            &["--variant", &variant],
            &[
                "/bin/sh",
                "-c",
                "p=$(readlink /proc/self/fd/2); rm -f \"$p\" && mkfifo \"$p\"; sleep 0.5",
            ],
        ))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    // The preload did not take (exit 1, said); a hang would be the watchdog's SIGKILL.
    assert_eq!(
        out.status.code(),
        Some(1),
        "memtrial hung or failed: {stderr}"
    );
    assert_eq!(
        first_run(&json_in(dir.path()), "x").status,
        RunStatus::VariantNotEffective,
        "{stderr}"
    );
}

/// memtrial under a watchdog: a hang ends in SIGKILL after 120 s, so the test fails on the
/// exit status instead of hanging the suite.
fn watched() -> Command {
    let mut c = Command::new("timeout");
    c.args(["-s", "KILL", "120"]).arg(memtrial());
    c
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
