//! Processes and time at the trust boundary (issue 19): hooks and drivers never outlive
//! their run, a driver's endless line does not grow memtrial, and a stopped memtrial does
//! not change a run's figures.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;

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
        .args([
            "run",
            "--runs",
            "1",
            "--variants",
            "glibc",
            "--before",
            &before,
            "--driver",
            &driver,
            "--json",
            "out.json",
            "--",
            "sleep",
            "30",
        ])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    assert_eq!(first_run(&doc, "glibc")["status"], "ok", "{stderr}");
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
