//! memtrial's cgroup v2 path on a real v2 kernel: `scripts/vm.sh` boots Debian 12's own
//! kernel with only the unified hierarchy (KVM where the machine has it, else qemu's
//! software emulation) and memtrial — this build's binary, shared into the VM — runs there.
//! One boot serves every check, to keep the suite's time.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;

fn record(dir: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("no {name} written inside the VM: {e}"));
    serde_json::from_str(&text).expect("valid JSON")
}

/// Limits applied and recorded, an OOM kill read from `memory.events`, the CPU quota seen by
/// the workload in its own group's `cpu.max`, and every run group removed afterwards.
#[test]
#[ignore = "boots a VM (about 2 min the first time on a machine, then about 40 s): runs alone in the second pass of scripts/test.sh"]
fn limits_an_oom_kill_and_teardown_on_a_real_cgroup_v2_kernel() {
    if !need_root("scripts/vm.sh installs qemu and builds the VM's image") {
        return;
    }
    let bin = memtrial();
    let bin_dir = bin.parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "M={bin}\n\
         $M run --runs 1 --variants glibc --memory-limit 64M --json oom.json -- \
           python3 -c 'x = bytearray(200 << 20)'\n\
         echo oom-exit=$?\n\
         $M run --runs 1 --variants glibc,jemalloc --cpus 0.5 --pids-limit 64 --json limits.json -- \
           python3 -c 'g = open(\"/proc/self/cgroup\").read().split(\"::\")[1].strip(); print(g); print(open(\"/sys/fs/cgroup\" + g + \"/cpu.max\").read().strip())'\n\
         echo limits-exit=$?\n\
         echo left=$(ls /sys/fs/cgroup/memtrial | grep -c -- '-')\n\
         echo v1=$(grep -c ' - cgroup ' /proc/self/mountinfo)\n",
        bin = bin.display()
    );
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/vm.sh"))
        .arg("--share")
        .arg(bin_dir)
        .args(["--", "sh", "-c", &script])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/vm.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "scripts/vm.sh failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let said = |key: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in\n{stdout}\n{stderr}"))
            .trim()
            .to_string()
    };
    // Only the unified hierarchy is mounted inside.
    assert_eq!(said("v1"), "0", "{stdout}");
    // The OOM kill: memtrial exits 1 (a failed run), the run is oom_killed, its group's
    // counters say so, and the isolation note names cgroup v2 and the limit.
    assert_eq!(said("oom-exit"), "1", "{stdout}\n{stderr}");
    let oom = record(dir.path(), "oom.json");
    let run = first_run(&oom, "glibc");
    assert_eq!(run["status"], "oom_killed", "{run}");
    assert!(run["cgroup"]["oom_kills"].as_u64() >= Some(1), "{run}");
    let notes = oom["notes"].to_string();
    assert!(
        notes.contains("cgroup v2") && notes.contains("memory 64"),
        "{notes}"
    );
    // The CPU quota and the pids limit, under two variants: each run in a group of its own
    // whose cpu.max holds the quota.
    assert_eq!(said("limits-exit"), "0", "{stdout}\n{stderr}");
    let limits = record(dir.path(), "limits.json");
    for name in ["glibc", "jemalloc"] {
        let run = first_run(&limits, name);
        assert_eq!(run["status"], "ok", "{run}");
        let log = std::fs::read_to_string(run["stdout_path"].as_str().unwrap()).unwrap();
        let mut lines = log.lines();
        let group = lines.next().unwrap_or_default();
        assert!(group.starts_with("/memtrial/"), "{name}: {log}");
        assert_eq!(lines.next(), Some("50000 100000"), "{name}: {log}");
    }
    // Nothing of the runs is left: no run group under memtrial's base.
    assert_eq!(said("left"), "0", "{stdout}");
}
