//! The Kubernetes flow without a cluster: `run --in-container` inside a real cgroup the
//! test makes (as a user that may not change its limits), `memtrial kube` rendering, and
//! `kube collect` against a stand-in `kubectl` that serves logs of real in-container runs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::*;

const MEMORY_LIMIT: u64 = 512 << 20;
const CPU_QUOTA_US: u64 = 50_000;
const CPU_PERIOD_US: u64 = 100_000;
const SEED: u64 = 11;
const VARIANTS: [&str; 3] = ["glibc", "jemalloc", "arena2"];

/// A cgroup the test made with a memory limit and a CPU quota (v1: a group in the `memory`
/// and one in the `cpu` hierarchy; v2: one group with `memory.max` and `cpu.max`),
/// removed when dropped.
struct TestGroup {
    /// The directories made, with the `cgroup.procs` a process is moved in through.
    dirs: Vec<PathBuf>,
    /// (file, content) of every limit, to see they are unchanged afterwards.
    limit_files: Vec<(PathBuf, String)>,
}

impl TestGroup {
    fn make(h: &memtrial::linux::cgroup::Hierarchy) -> TestGroup {
        use memtrial::linux::cgroup::{Controller, Hierarchy};
        // Beside memtrial's base, never inside it: a group there that no memtrial owns is
        // what the sandbox tests call a leftover. What a killed run of the suite left here
        // (or, in its base, under the name used before) goes first.
        const PREFIX: &str = "memtrial-it-kube-";
        let name = format!("{PREFIX}{}", std::process::id());
        let beside = |base: &Path| {
            let parent = base
                .parent()
                .expect("memtrial's base has a parent")
                .to_path_buf();
            remove_groups_of_killed_runs(&parent, pid_after(PREFIX));
            remove_groups_of_killed_runs(base, pid_after("kube-test-"));
            parent
        };
        let mut g = TestGroup {
            dirs: Vec::new(),
            limit_files: Vec::new(),
        };
        let write = |p: &Path, v: &str| {
            std::fs::write(p, v).unwrap_or_else(|e| panic!("write {v} to {}: {e}", p.display()))
        };
        match h {
            Hierarchy::V1 { bases } => {
                for c in [Controller::Memory, Controller::Cpu] {
                    let base = bases.get(&c).expect("a v1 hierarchy with memory and cpu");
                    let dir = beside(base).join(&name);
                    std::fs::create_dir_all(&dir).expect("make the test cgroup");
                    g.dirs.push(dir);
                }
                write(
                    &g.dirs[0].join("memory.limit_in_bytes"),
                    &MEMORY_LIMIT.to_string(),
                );
                write(
                    &g.dirs[1].join("cpu.cfs_period_us"),
                    &CPU_PERIOD_US.to_string(),
                );
                write(
                    &g.dirs[1].join("cpu.cfs_quota_us"),
                    &CPU_QUOTA_US.to_string(),
                );
                g.watch(&g.dirs[0].join("memory.limit_in_bytes"));
                g.watch(&g.dirs[1].join("cpu.cfs_quota_us"));
                g.watch(&g.dirs[1].join("cpu.cfs_period_us"));
            }
            Hierarchy::V2 { mount, base } => {
                let _ = std::fs::write(mount.join("cgroup.subtree_control"), "+memory +cpu");
                let parent = beside(base);
                let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +cpu");
                let dir = parent.join(&name);
                std::fs::create_dir_all(&dir).expect("make the test cgroup");
                write(&dir.join("memory.max"), &MEMORY_LIMIT.to_string());
                write(
                    &dir.join("cpu.max"),
                    &format!("{CPU_QUOTA_US} {CPU_PERIOD_US}"),
                );
                g.dirs.push(dir.clone());
                g.watch(&dir.join("memory.max"));
                g.watch(&dir.join("cpu.max"));
            }
        }
        g
    }

    fn watch(&mut self, p: &Path) {
        let text = std::fs::read_to_string(p).expect("read a limit file");
        self.limit_files.push((p.to_path_buf(), text));
    }

    /// `echo $$ > …/cgroup.procs` for every directory: a shell moves itself in.
    fn join_script(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("echo $$ > '{}'", d.join("cgroup.procs").display()))
            .collect::<Vec<_>>()
            .join(" && ")
    }

    fn subgroups(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(p, libc::SIGKILL);
                }
            }
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// A directory anyone may use, with a copy of memtrial that nobody may run.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("memtrial");
        std::fs::copy(memtrial(), &bin).expect("copy memtrial");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        Sandbox { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn bin(&self) -> PathBuf {
        self.path().join("memtrial")
    }

    /// A plan running memtrial's fragmentation workload briefly under three variants.
    fn plan(&self) -> PathBuf {
        let p = self.path().join("plan.toml");
        let text = format!(
            "command = [\"{}\", \"workload\", \"fragment\", \"--threads\", \"2\", \"--seconds\", \"0.3\", \"--seed\", \"7\"]\n\
             variants = [\"glibc\", \"jemalloc\", \"arena2\"]\n\
             runs = 1\nseed = {SEED}\n",
            self.bin().display()
        );
        std::fs::write(&p, text).expect("write the plan");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        p
    }
}

/// Runs `memtrial ARGS` in the group as nobody (a user that may not change its limits).
fn run_in_group(g: &TestGroup, sb: &Sandbox, args: &[&str]) -> Output {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "{} && exec setpriv --reuid=nobody --regid=nogroup --clear-groups -- '{}' --db '{}' {}",
        g.join_script(),
        sb.bin().display(),
        sb.path().join("memtrial.db").display(),
        quoted.join(" ")
    );
    Command::new("sh")
        .args(["-c", &script])
        .current_dir(sb.path())
        .env("NO_COLOR", "1")
        // What the Job passes through the downward API, and its name as the host.
        .env("MEMTRIAL_NODE", "node-a")
        .env("MEMTRIAL_HOST", "web-trial")
        .output()
        .expect("run sh")
}

/// The slot of the plan's seeded schedule that runs `variant`.
fn slot_of(variant: &str) -> usize {
    let i = VARIANTS.iter().position(|v| *v == variant).expect("known");
    memtrial::schedule::schedule(VARIANTS.len(), 0, 1, SEED)
        .iter()
        .position(|s| s.variant == i)
        .expect("every variant has a slot")
}

fn need_in_container_setup() -> Option<memtrial::linux::cgroup::Hierarchy> {
    let h = need_cgroups()?;
    (need_file("/usr/bin/setpriv", "util-linux") && need_allocators(&["jemalloc"])).then_some(h)
}

/// The pod logs of real in-container runs, one per slot, made once for the tests that need
/// them (the in-container test and collect's): (slot, the whole stdout + stderr).
pub(crate) fn pod_logs() -> Option<&'static Vec<(usize, String)>> {
    pod_run().map(|r| &r.1)
}

/// The plan text the pods ran (what the Job's ConfigMap carries), and their logs.
pub(crate) type PodRun = (String, Vec<(usize, String)>);

/// The plan text the pods ran (what the Job's ConfigMap carries), and their logs.
pub(crate) fn pod_run() -> Option<&'static PodRun> {
    static LOGS: OnceLock<Option<PodRun>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let h = need_in_container_setup()?;
        let sb = Sandbox::new();
        let plan = sb.plan();
        let plan_text = std::fs::read_to_string(&plan).expect("read the plan");
        let g = TestGroup::make(&h);
        let mut logs = Vec::new();
        for index in 0..VARIANTS.len() {
            let out = run_in_group(
                &g,
                &sb,
                &[
                    "run",
                    "--in-container",
                    "--plan",
                    &plan.display().to_string(),
                    "--index",
                    &index.to_string(),
                ],
            );
            assert_eq!(
                out.status.code(),
                Some(0),
                "slot {index}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // What a pod's log holds: memtrial's stderr lines and the record line.
            let log = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
            logs.push((index, log));
        }
        // Nothing was written to the group: its limits are as the test set them, and no
        // group was made inside it.
        for (file, before) in &g.limit_files {
            let now = std::fs::read_to_string(file).expect("read a limit file");
            assert_eq!(&now, before, "{} changed", file.display());
        }
        assert_eq!(g.subgroups(), Vec::<PathBuf>::new(), "a cgroup was made");
        // A limit flag is refused, with the flag named.
        let refused = run_in_group(
            &g,
            &sb,
            &[
                "run",
                "--in-container",
                "--plan",
                &plan.display().to_string(),
                "--index",
                "0",
                "--memory-limit",
                "1G",
            ],
        );
        let err = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--memory-limit 1G") && err.contains("container's own limits"),
            "{err}"
        );
        Some((plan_text, logs))
    })
    .as_ref()
}

#[test]
fn in_container_records_the_containers_limits_and_changes_nothing() {
    let Some(logs) = pod_logs() else { return };
    for variant in ["jemalloc", "arena2", "glibc"] {
        let (_, log) = &logs[slot_of(variant)];
        let doc = memtrial::kube::find_record(log).expect("a record in the log");
        validate_schema(&doc, "experiment-v4.schema.json");
        let limits = &doc["experiment"]["limits"];
        assert_eq!(limits["memory_max"], MEMORY_LIMIT, "{log}");
        assert_eq!(
            limits["cpus"].as_f64(),
            Some(CPU_QUOTA_US as f64 / CPU_PERIOD_US as f64),
            "{log}"
        );
        assert_eq!(limits["cpuset"], Value::Null);
        assert_eq!(limits["pids_max"], Value::Null);
        // Exactly one run, of the slot's variant, ok and verified.
        let runs = all_runs(&doc);
        assert_eq!(runs.len(), 1, "{log}");
        let run = &runs[0];
        assert_eq!(run.variant, variant, "{log}");
        assert_eq!(run.status, RunStatus::Ok, "{log}");
        assert!(run.verification.ok(), "{log}");
        // The record says where its limits came from.
        let notes = doc["notes"].to_string();
        assert!(
            notes.contains("no cgroup made")
                && notes.contains("limits read from")
                && notes.contains("in-container: node node-a"),
            "{notes}"
        );
    }
}

#[test]
fn in_container_refuses_a_plans_limits_and_a_missing_seed_and_a_bad_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = dir.path().join("plan.toml");
    let run = |text: &str, index: &str| {
        std::fs::write(&plan, text).expect("write");
        Command::new(memtrial())
            .args(["run", "--in-container", "--index", index, "--plan"])
            .arg(&plan)
            .current_dir(dir.path())
            .output()
            .expect("run memtrial")
    };
    let out = run(
        "command = \"/bin/true\"\nvariants = [\"glibc\"]\nseed = 1\nmemory_limit = \"1G\"\n",
        "0",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("memory_limit = \"1G\""), "{err}");
    let out = run("command = \"/bin/true\"\nvariants = [\"glibc\"]\n", "0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("fixed seed"), "{err}");
    let out = run(
        "command = \"/bin/true\"\nvariants = [\"glibc\"]\nruns = 2\nseed = 1\n",
        "2",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--index 2") && err.contains("2 slots"),
        "{err}"
    );
    // Without --in-container, --index means nothing: clap refuses it.
    let out = Command::new(memtrial())
        .args(["run", "--index", "0", "--", "/bin/true"])
        .output()
        .expect("run memtrial");
    assert_eq!(out.status.code(), Some(2));
}

// ───────────── memtrial kube: the Job ─────────────

fn kube(args: &[&str]) -> Output {
    Command::new(memtrial())
        .arg("kube")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial kube")
}

fn web_plan() -> String {
    fixture_path("kube/web.toml")
}

fn fixture_path(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
        .display()
        .to_string()
}

fn render_web() -> String {
    let out = kube(&[
        &web_plan(),
        "--image",
        "registry.example/app:1.4",
        "--cpu",
        "8",
        "--memory",
        "8Gi",
        "--parallelism",
        "2",
        "--name",
        "web-trial",
        "--memtrial-image",
        "registry.example/memtrial:0.1.0",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 YAML")
}

/// The YAML documents of a stream, parsed.
fn documents(yaml: &str) -> Vec<serde_yaml_ng::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde_yaml_ng::Value::deserialize(d).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn kube_renders_an_indexed_job_and_its_plan() {
    let yaml = render_web();
    insta::assert_snapshot!("kube_web_job", yaml);
    let docs = documents(&yaml);
    assert_eq!(docs.len(), 2, "{yaml}");
    // The Job round-trips through the typed API struct, unchanged.
    let job: k8s_openapi::api::batch::v1::Job =
        serde_yaml_ng::from_value(docs[1].clone()).expect("a batch/v1 Job");
    assert_eq!(
        serde_yaml_ng::to_value(&job).expect("serialize"),
        docs[1],
        "the Job does not round-trip"
    );
    let spec = job.spec.expect("spec");
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    // 3 variants × 2 runs.
    assert_eq!(spec.completions, Some(6));
    assert_eq!(spec.parallelism, Some(2));
    let pod = spec.template.spec.expect("pod spec");
    let main = &pod.containers[0];
    let args = main.args.clone().unwrap_or_default().join(" ");
    assert!(
        args.contains("--in-container") && args.contains("--index $(JOB_COMPLETION_INDEX)"),
        "{args}"
    );
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        serde_yaml_ng::from_value(docs[0].clone()).expect("a v1 ConfigMap");
    let plan = std::fs::read_to_string(web_plan()).expect("read the plan");
    assert_eq!(
        cm.data.and_then(|d| d.get("plan.toml").cloned()),
        Some(plan),
        "the ConfigMap carries the plan as it is"
    );
}

/// Checks the YAML against the Kubernetes JSON schemas (strict: no unknown fields) with
/// PyPI's kubernetes-validate, installed by scripts/setup-tests.sh.
#[test]
fn kube_yaml_passes_the_kubernetes_schema() {
    let validator = Path::new("/opt/memtrial-test-venv/bin/kubernetes-validate");
    if !require(
        "kubernetes-validate",
        "run scripts/setup-tests.sh (a venv in /opt/memtrial-test-venv)",
        || validator.exists(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |name: &str, yaml: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, yaml).expect("write");
        Command::new(validator)
            .args(["--strict", "--kubernetes-version", "1.33.0"])
            .arg(&p)
            .output()
            .expect("run kubernetes-validate")
    };
    let yaml = render_web();
    let out = check("job.yaml", &yaml);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("passed for resource job/web-trial")
            && said.contains("passed for resource configmap/web-trial-plan"),
        "{said}"
    );
    // The validator does fail a Job with a field Kubernetes does not know.
    let broken = yaml.replace(
        "completionMode: Indexed",
        "completionMode: Indexed\n  bogus: 1",
    );
    assert_ne!(broken, yaml);
    assert!(!check("broken.yaml", &broken).status.success());
}

#[test]
fn kube_refuses_bad_input_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let plan = web_plan();
    let base = |extra: &[&str], plan: &str| {
        let mut a = vec![plan, "--image", "app:1", "--cpu", "2", "--memory", "1Gi"];
        // A later flag of the same name replaces the default one here.
        for pair in extra.chunks(2) {
            if let Some(i) = a.iter().position(|x| *x == pair[0]) {
                a[i + 1] = pair[1];
            } else {
                a.extend_from_slice(pair);
            }
        }
        kube(&a)
    };
    let cases: Vec<(Vec<&str>, String, &str)> = vec![
        (vec!["--cpu", "0"], plan.clone(), "--cpu \"0\""),
        (vec!["--cpu", "eight"], plan.clone(), "--cpu \"eight\""),
        (vec!["--memory", "8Q"], plan.clone(), "--memory \"8Q\""),
        (vec!["--memory", "1M"], plan.clone(), "--memory \"1M\""),
        (
            vec!["--name", "Web_Trial"],
            plan.clone(),
            "--name \"Web_Trial\"",
        ),
        (vec!["--parallelism", "0"], plan.clone(), "--parallelism 0"),
        (
            vec![],
            write("broken.toml", "variants = [\n"),
            "broken.toml: line 2",
        ),
        (
            vec![],
            write(
                "limits.toml",
                "command = \"x\"\nvariants = [\"glibc\"]\ncpus = 2\n",
            ),
            "cpus = \"2\"",
        ),
        (
            vec![],
            write("implicit.toml", "command = \"x\"\n"),
            "does not name its variants",
        ),
        (
            vec![],
            write("Bad Name.toml", "command = \"x\"\nvariants = [\"glibc\"]\n"),
            "give --name",
        ),
    ];
    for (extra, plan, says) in cases {
        let out = base(&extra, &plan);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?} {plan}: {err}");
        assert!(err.contains(says), "{extra:?} {plan}: {err}");
        assert!(out.stdout.is_empty(), "no YAML on bad input");
    }
    // No seed in the plan: one is chosen and every pod gets it.
    let out = base(
        &[],
        &write("noseed.toml", "command = \"x\"\nvariants = [\"glibc\"]\n"),
    );
    assert_eq!(out.status.code(), Some(0));
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(yaml.contains("- --seed"), "{yaml}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("sets no seed"));
}

// ───────────── memtrial kube collect, against a stand-in kubectl ─────────────

/// A stand-in `kubectl` (there is no cluster here): a script answering `get job`, `get
/// configmap`, `get pods` and `logs … -- POD` from files in `dir`, noting every call in
/// `dir/asked`.
pub(crate) fn fake_kubectl(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(bin.join("..").join("logs")).expect("mkdir");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let d = dir.display();
    let script = format!(
        r#"#!/bin/sh
echo "$*" >> "{d}/asked"
# The pod: the word after `logs` (kubectl's positional argument), or after `--`.
prev=""; pod=""
for a in "$@"; do
  if [ "$prev" = "--" ] || {{ [ "$prev" = "logs" ] && [ "$a" != "-c" ]; }}; then pod="$a"; fi
  prev="$a"
done
last="$pod"
case "$*" in
  *"get job "*) cat "{d}/job.json" ;;
  *"get configmap "*) cat "{d}/configmap.json" ;;
  *"get pods "*) cat "{d}/pods.json" ;;
  *"logs "*) cat "{d}/logs/$last.log" 2>/dev/null || {{ echo "Error from server (NotFound): pods \"$last\" not found" >&2; exit 1; }} ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"#
    );
    let p = bin.join("kubectl");
    std::fs::write(&p, script).expect("write kubectl");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

pub(crate) fn pod_json(
    name: &str,
    index: usize,
    phase: &str,
    at: &str,
    reason: Option<&str>,
) -> Value {
    let state = match reason {
        Some(r) => serde_json::json!({"terminated": {"reason": r, "exitCode": 137}}),
        None => serde_json::json!({"terminated": {"reason": "Completed", "exitCode": 0}}),
    };
    serde_json::json!({
        "metadata": {
            "name": name,
            "creationTimestamp": at,
            "labels": {"job-name": "web-trial", "batch.kubernetes.io/job-completion-index": index.to_string()},
            "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string()}
        },
        "spec": {"nodeName": "node-a"},
        "status": {"phase": phase, "containerStatuses": [{"name": "workload", "state": state}]}
    })
}

/// The Job's ConfigMap, carrying `plan`, as `kubectl get configmap -o json` answers.
pub(crate) fn config_map_json(plan: &str) -> Value {
    serde_json::json!({"metadata": {"name": "web-trial-plan"}, "data": {"plan.toml": plan}})
}

#[test]
fn collect_gathers_one_record_per_index_and_says_what_is_missing() {
    let Some((plan, logs)) = pod_run() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake_kubectl(dir.path());
    std::fs::write(
        dir.path().join("configmap.json"),
        config_map_json(plan).to_string(),
    )
    .expect("write");
    // Index 1 failed once (the pod was OOM-killed) and succeeded on its retry.
    let mut pods = vec![pod_json(
        "web-trial-1-old",
        1,
        "Failed",
        "2026-01-01T00:00:00Z",
        Some("OOMKilled"),
    )];
    for (index, log) in logs {
        let name = format!("web-trial-{index}-x");
        std::fs::write(dir.path().join(format!("logs/{name}.log")), log).expect("write a log");
        pods.push(pod_json(
            &name,
            *index,
            "Succeeded",
            "2026-01-01T00:05:00Z",
            None,
        ));
    }
    let write_job = |completions: usize, pods: &[Value]| {
        std::fs::write(
            dir.path().join("job.json"),
            serde_json::json!({"spec": {"completionMode": "Indexed", "completions": completions}})
                .to_string(),
        )
        .expect("write");
        std::fs::write(
            dir.path().join("pods.json"),
            serde_json::json!({ "items": pods }).to_string(),
        )
        .expect("write");
    };
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let db = dir.path().join("collected.db");
    let collect = |out: &Path| {
        Command::new(memtrial())
            .args([
                "kube",
                "collect",
                "web-trial",
                "--namespace",
                "perf",
                "--out",
            ])
            .arg(out)
            .arg("--db")
            .arg(&db)
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .output()
            .expect("run memtrial kube collect")
    };

    write_job(logs.len(), &pods);
    let out_dir = dir.path().join("records");
    let out = collect(&out_dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let mut limits = Vec::new();
    for (index, log) in logs {
        let file = out_dir.join(format!("web-trial-{index}.json"));
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("a record per index"))
                .expect("JSON");
        assert_eq!(saved, memtrial::kube::find_record(log).expect("record"));
        validate_schema(&saved, "experiment-v4.schema.json");
        limits.push(saved["experiment"]["limits"].clone());
    }
    // All pods of one Job record the same limits.
    assert!(limits.windows(2).all(|w| w[0] == w[1]), "{limits:?}");
    assert!(err.contains("collected 3 of 3 record(s)"), "{err}");
    // The records were imported: the pods' slots of one plan join one experiment.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches(": new experiment 1 ").count(), 1, "{stdout}");
    assert_eq!(
        stdout.matches(": joined experiment 1 ").count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("1 new run(s), 0 already present").count(),
        3,
        "{stdout}"
    );
    let list = Command::new(memtrial())
        .args(["list", "--db"])
        .arg(&db)
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial list");
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains("│ 1 ") && !listed.contains("│ 2 "),
        "{listed}"
    );
    assert!(listed.contains("3/"), "{listed}");
    let asked = std::fs::read_to_string(dir.path().join("asked")).expect("kubectl was asked");
    assert!(
        asked.contains("--namespace=perf get pods -l job-name=web-trial -o json"),
        "{asked}"
    );
    // The failed first pod of index 1 was not asked for its log: its retry was.
    assert!(!asked.contains("web-trial-1-old"), "{asked}");
    assert!(
        asked.contains("logs -c workload --limit-bytes=67108865 -- web-trial-1-x"),
        "{asked}"
    );

    // A fourth index whose only pod was OOM-killed, and a fifth never started.
    pods.push(pod_json(
        "web-trial-3-x",
        3,
        "Failed",
        "2026-01-01T00:09:00Z",
        Some("OOMKilled"),
    ));
    write_job(logs.len() + 2, &pods);
    let out = collect(&dir.path().join("records2"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("index 3: FAILED: web-trial-3-x (OOMKilled, exit 137)"),
        "{err}"
    );
    assert!(err.contains("index 4: MISSING"), "{err}");
    assert!(err.contains("collected 3 of 5 record(s)"), "{err}");
    assert!(err.contains("not collected: index(es) 3, 4"), "{err}");
    // What was collected again is in the store already: nothing is added twice.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("0 new run(s), 1 already present").count(),
        3,
        "{stdout}"
    );

    // kubectl itself failing is memtrial's error, with kubectl's words.
    let out = Command::new(memtrial())
        .args([
            "kube",
            "collect",
            "web-trial",
            "--kubectl",
            "/nonexistent/kubectl",
        ])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/kubectl (--kubectl)"), "{err}");
}
