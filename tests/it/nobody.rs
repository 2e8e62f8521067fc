//! memtrial as a user that is not root, on this machine (cgroup v1, where only root can
//! make cgroups): every command works on the user's own programs, the missing isolation is
//! said once with what would give it, and a limit is refused rather than pretended. (On
//! cgroup v2, with and without a delegated group: `cgroup_v2.rs`.)

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::exporter::{http_get, series, start_exporter, Killed};

const AS_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
];

/// `memtrial ARGS` as nobody in `dir`.
fn as_nobody(dir: &Path, bin: &Path, args: &[&str]) -> Output {
    Command::new(AS_NOBODY[0])
        .args(&AS_NOBODY[1..])
        .arg(bin)
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("setpriv")
}

fn explain(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A directory nobody may write, holding a copy of memtrial nobody may run.
fn sandbox() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = copy_into(dir.path(), &memtrial(), "memtrial");
    (dir, bin)
}

fn copy_into(dir: &Path, from: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(from, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

#[test]
fn a_user_without_root_runs_reports_inspects_and_exports_their_own_programs() {
    if !(need_root("to become nobody")
        && need_c_compiler()
        && need_file("/usr/bin/setpriv", "util-linux")
        && need_allocators(&["jemalloc"]))
    {
        return;
    }
    // The fixture named uniquely, so that no other test's process joins its exporter group.
    let name = format!("mtnb{}", std::process::id());
    let (dir, bin) = sandbox();
    let arenas = copy_into(dir.path(), &fixture("arenas"), &name);
    let d = dir.path();

    // run: every variant, unisolated, said once with the reason and the way to isolation.
    let bin_s = bin.display().to_string();
    let mut args = vec![
        "run",
        "--runs",
        "3",
        "--variants",
        "glibc,jemalloc",
        "--json",
        "out.json",
        "--",
        &bin_s,
        "workload",
        "fragment",
    ];
    args.extend(FRAGMENT_SHORT);
    let out = as_nobody(d, &bin, &args);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("not isolated").count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot apply limits, see OOM kills")
            && stderr
                .contains("memory controller is on cgroup v1, where only root can make cgroups")
            && stderr.contains("systemd-run --user --scope -p Delegate=yes"),
        "{stderr}"
    );
    let doc = json_in(d);
    for v in ["glibc", "jemalloc"] {
        let runs = typed_runs(&doc, v);
        assert_eq!(runs.len(), 3, "{v}");
        for r in runs {
            assert_eq!(r.status, RunStatus::Ok, "{v}: {r:?}");
            assert!(
                r.cgroup.is_none(),
                "no cgroup figures without a cgroup: {r:?}"
            );
        }
    }
    assert!(first_run(&doc, "jemalloc").verification.ok());
    assert!(
        doc["notes"].to_string().contains("isolation: none"),
        "{}",
        doc["notes"]
    );

    // A limit is refused, saying why and what would give it (exit 2: bad usage).
    let out = as_nobody(
        d,
        &bin,
        &[
            "run",
            "--memory-limit",
            "64M",
            "--variants",
            "glibc",
            "--",
            "/bin/true",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    let refused = String::from_utf8_lossy(&out.stderr);
    assert!(
        refused.contains("--memory-limit")
            && refused.contains("need a cgroup")
            && refused.contains("Delegate=yes"),
        "{refused}"
    );

    // report: the stored experiment again, in every format.
    let out = as_nobody(
        d,
        &bin,
        &[
            "report",
            "--html",
            "r.html",
            "--markdown",
            "r.md",
            "--csv",
            "r.csv",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    for f in ["r.html", "r.md", "r.csv"] {
        let len = std::fs::metadata(d.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 200, "{f}: {len} bytes");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("jemalloc"));

    // inspect and the exporter on nobody's own process: complete, arenas counted exactly.
    let mut child = Command::new(AS_NOBODY[0])
        .args(&AS_NOBODY[1..])
        .arg(&arenas)
        .args(["4", "60"])
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("GLIBC_TUNABLES")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture as nobody");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let p = Killed(child);
    let mut printed = None;
    for line in lines {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("arenas ") {
            printed = n.trim().parse::<u64>().ok();
        }
        if line == "ready" {
            break;
        }
    }
    let printed = printed.expect("the fixture printed its arena count");
    assert_eq!(status_uid(p.pid()), 65534);
    let out = as_nobody(d, &bin, &["inspect", &p.pid().to_string(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["complete"], true, "{}", v["access"]);
    assert_eq!(
        v["glibc_arenas"]["method"], "exact",
        "{}",
        v["glibc_arenas"]
    );
    assert_eq!(v["glibc_arenas"]["count"], printed, "{}", v["glibc_arenas"]);

    let exporter = start_exporter(&bin, &["--match", &format!("^{name}$")], &AS_NOBODY);
    let g = format!("{{group=\"{name}\"}}");
    let mut text = String::new();
    for _ in 0..50 {
        text = http_get(exporter.addr, "/metrics").unwrap().1;
        if series(&text, &format!("memtrial_group_glibc_arenas{g}")).is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        series(&text, &format!("memtrial_group_glibc_arenas{g}")),
        Some(printed as f64),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            &format!("memtrial_group_glibc_arenas_estimated_processes{g}")
        ),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        series(&text, &format!("memtrial_group_pss_processes{g}")),
        Some(1.0)
    );
    for reason in ["permission_denied", "error"] {
        assert_eq!(
            series(
                &text,
                &format!("memtrial_unreadable_processes{{reason=\"{reason}\"}}")
            ),
            Some(0.0),
            "nothing of its own process is refused to nobody:\n{text}"
        );
    }
}

/// Without a cgroup, a stopped run still leaves nothing: SIGINT to memtrial run as nobody
/// kills the workload and a daemon it left behind (its own session, ignoring SIGTERM,
/// SIGINT and SIGHUP), which memtrial, a child subreaper, still has among its descendants.
#[test]
fn a_run_without_a_cgroup_stops_cleanly_daemons_included() {
    if !(need_root("to become nobody") && need_file("/usr/bin/setpriv", "util-linux")) {
        return;
    }
    let (dir, bin) = sandbox();
    // Markers of this test process alone: a daemon a killed earlier run left (it ignores
    // SIGTERM) is not taken for this one.
    let id = std::process::id();
    let (daemon, main) = (format!("sleep 47.{id:07}"), format!("sleep 46.{id:07}"));
    let script = format!("setsid sh -c 'trap \"\" TERM INT HUP; {daemon}' & {main}");
    let child = Command::new(AS_NOBODY[0])
        .args(&AS_NOBODY[1..])
        .arg(&bin)
        .args([
            "run",
            "--runs",
            "3",
            "--variants",
            "glibc",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while no_process_matching(&format!("^{daemon}$")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: sending a signal to a process this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", explain(&out));
    assert!(
        no_process_matching(&format!("^{daemon}$")),
        "the daemon outlived the run"
    );
    assert!(
        no_process_matching(&format!("^{main}$")),
        "the workload outlived the run"
    );
}

fn status_uid(pid: i32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}
