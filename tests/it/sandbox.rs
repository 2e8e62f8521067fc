//! Runs in cgroups: memory, CPU quota, cpuset and pids limits; interrupts, resume, stale groups.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// The cgroup layout memtrial would use (see [`need_cgroups`]).
fn cgroups() -> Option<memtrial::linux::cgroup::Hierarchy> {
    need_cgroups()
}

fn cgroup_bases(h: &memtrial::linux::cgroup::Hierarchy) -> Vec<PathBuf> {
    match h {
        memtrial::linux::cgroup::Hierarchy::V2 { base, .. } => vec![base.clone()],
        memtrial::linux::cgroup::Hierarchy::V1 { bases } => bases.values().cloned().collect(),
    }
}

/// No run cgroup whose memtrial has exited is left behind. Only memtrial's run groups (the
/// names it gives them today) are judged: a group another test made in the base at the
/// same moment (an older memtrial's name, trust.rs) is no run of these tests'.
fn assert_no_orphan_cgroups(h: &memtrial::linux::cgroup::Hierarchy) {
    for base in cgroup_bases(h) {
        let Ok(rd) = std::fs::read_dir(&base) else {
            continue;
        };
        let run_group = |e: &std::fs::DirEntry| {
            memtrial::linux::cgroup::group_owner(&e.file_name().to_string_lossy())
                .is_some_and(|o| o.pid_ns.is_some())
        };
        for e in rd.flatten().filter(|e| e.path().is_dir() && run_group(e)) {
            // Owned by a live memtrial (the lock on the group), whatever its binary is called.
            let alive = memtrial::linux::cgroup::group_alive(&e.path());
            assert!(alive, "cgroup {} outlived its memtrial", e.path().display());
        }
    }
}

fn arena_line(run: &RunRecord) -> std::collections::HashMap<String, i64> {
    let out = std::fs::read_to_string(&run.stdout_path).unwrap();
    out.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

#[test]
fn over_the_memory_limit_is_oom_killed() {
    if !need_python3() {
        return;
    }
    let Some(h) = cgroups() else { return };
    let r = run_with(
        2,
        "glibc",
        &["--memory-limit", "64M", "--json", "out.json"],
        &["python3", "-c", "x = bytearray(400_000_000)"],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    assert_eq!(run.status, RunStatus::OomKilled, "{run:?}");
    assert!(cgroup_of(&run).oom_kills >= 1);
    assert_eq!(doc["experiment"]["limits"]["memory_max"], 64 << 20);
    assert_eq!(summary(&doc, "glibc")["statuses"]["oom_killed"], 2);
    assert!(
        r.stdout().contains("OOM kills: 2 of 2 runs"),
        "{}",
        r.stdout()
    );
    assert_no_orphan_cgroups(&h);
}

#[test]
fn a_cpu_quota_throttles_but_glibc_still_sees_every_cpu() {
    if !need_c_compiler() {
        return;
    }
    let Some(h) = cgroups() else { return };
    let prog = fixture("arena_count");
    let cpus = memtrial::linux::host::online_cpus() as i64;
    let r = run_with(
        1,
        "glibc",
        &["--cpus", "0.5", "--json", "out.json"],
        &[prog.to_str().unwrap(), "40", "300"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    // Throttling needs the workload to want more than its quota and get it. Beside a busy
    // machine (the suite and two busy loops) its 40 threads once got 0.21 s of CPU in
    // 0.62 s, a third of a CPU, below the quota's half, and no period was throttled. Then
    // the quota shows as the tree's CPU staying within it (and one 100 ms period's worth);
    // without a quota, 40 threads on an idle machine take about 2 CPUs.
    let c = cgroup_of(&run);
    let cpu = c
        .cpu_seconds
        .unwrap_or(run.cpu_user_seconds + run.cpu_sys_seconds);
    assert!(
        c.nr_throttled > 0 || cpu <= 0.5 * run.wall_seconds + 0.05,
        "neither throttled nor within its quota ({cpu} s of CPU in {} s): {run:?}",
        run.wall_seconds
    );
    assert!(c.nr_throttled == 0 || c.throttled_seconds > 0.0, "{run:?}");
    let seen = arena_line(&run);
    assert_eq!(seen["online"], cpus, "a quota hides no CPU");
    assert_eq!(seen["affinity"], cpus);
    // 40 threads allocating at once: glibc stops at 8 arenas per visible CPU.
    assert_eq!(seen["arenas"], (8 * cpus).min(41), "{seen:?}");
    assert_no_orphan_cgroups(&h);
}

#[test]
fn a_cpuset_is_what_the_program_sees() {
    if !need_c_compiler() {
        return;
    }
    let Some(_) = cgroups() else { return };
    let prog = fixture("arena_count");
    let r = run_with(
        1,
        "glibc",
        &["--cpuset", "0", "--json", "out.json"],
        &[prog.to_str().unwrap(), "2", "50"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let seen = arena_line(&first_run(&r.json(), "glibc"));
    assert_eq!(seen["affinity"], 1, "{seen:?}");
}

#[test]
fn a_fork_bomb_is_stopped_by_the_pids_limit() {
    let Some(h) = cgroups() else { return };
    let r = run_with(
        1,
        "glibc",
        &[
            "--pids-limit",
            "24",
            "--timeout",
            "3s",
            "--json",
            "out.json",
        ],
        &["sh", "-c", "bomb_marker_44=1; f() { f & f; }; f"],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    // The shell dies of a failed fork, or the timeout stops what is left: either way, stopped.
    assert!(
        matches!(run.status, RunStatus::Failed | RunStatus::Timeout),
        "{run:?}"
    );
    let most = run.samples.iter().map(|s| s.processes).max().unwrap();
    assert!(most <= 24, "at most 24 processes at once, saw {most}");
    assert!(
        cgroup_of(&run).pids_limit_hits.unwrap() > 0,
        "forks were refused: {run:?}"
    );
    assert!(no_process_matching("bomb_marker_44"), "the bomb is gone");
    assert_no_orphan_cgroups(&h);
}

#[test]
fn the_cgroup_peak_covers_the_whole_tree() {
    if !need_python3() {
        return;
    }
    let Some(_) = cgroups() else { return };
    let r = run_json(
        1,
        "glibc",
        &[],
        &[
            "sh",
            "-c",
            "python3 -c 'import time; x=bytearray(40_000_000); time.sleep(0.6)' & \
         python3 -c 'import time; x=bytearray(40_000_000); time.sleep(0.6)'; wait",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let doc = r.json();
    let run = first_run(&doc, "glibc");
    let cg_peak = cgroup_of(&run).peak_bytes.unwrap();
    let anon = cgroup_of(&run).anon_peak_bytes;
    assert!(
        anon >= 80_000_000,
        "both children's anonymous memory at once: {anon}"
    );
    assert!(cg_peak >= anon);
    // At least the largest single process's kernel high-water mark.
    assert!(cg_peak >= run.peak_rss_bytes.min(anon), "{run:?}");
    assert!(median(&doc, "glibc", "cgroup_peak_bytes").as_f64().unwrap() > 80e6);
}

#[test]
fn sigint_then_resume_completes_the_experiment() {
    let Some(h) = cgroups() else { return };
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(memtrial())
        .args([
            "run",
            "--runs",
            "2",
            "--variants",
            "glibc,arena2",
            "--seed",
            "3",
            "--",
            "sh",
            "-c",
            "sleep 0.8; echo resume_marker_45",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    // SAFETY: a signal to our own child, not yet waited for.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(no_process_matching("resume_marker_45"));
    assert_no_orphan_cgroups(&h);
    let resumed = Command::new(memtrial())
        .args(["run", "--resume", "--json", "out.json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("resuming experiment 1"), "{stderr}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    validate_schema(&doc, "experiment-v4.schema.json");
    assert_eq!(doc["experiment"]["status"], "complete");
    assert_eq!(doc["experiment"]["seed"], 3);
    for v in ["glibc", "arena2"] {
        let runs = typed_runs(&doc, v);
        assert_eq!(runs.len(), 2, "{v}: {runs:?}");
        assert!(runs.iter().all(|r| r.status == RunStatus::Ok), "{v}");
    }
    let again = Command::new(memtrial())
        .args(["run", "--resume"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is complete; nothing to resume"));
}

#[test]
fn stale_cgroups_of_a_killed_memtrial_are_cleaned() {
    let Some(h) = cgroups() else { return };
    // A group of this memtrial's naming that nobody holds the lock on, with a process in
    // it, as a SIGKILLed memtrial leaves it (the kernel dropped its lock as it died).
    let ns = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").unwrap().ino()
    };
    let name = format!("n{ns}-999999999-{}-0", std::process::id());
    let stale: Vec<PathBuf> = cgroup_bases(&h).iter().map(|b| b.join(&name)).collect();
    for d in &stale {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut orphan = Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(stale[0].join("cgroup.procs"), orphan.id().to_string()).unwrap();
    let r = run_with(1, "glibc", &[], &["true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    // Another memtrial starting at the same moment (tests run in parallel) may be the one
    // that cleans it and says so; either way it must be gone, its process with it.
    for d in &stale {
        assert!(!d.exists(), "{} was cleaned", d.display());
    }
    let status = orphan.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
}
