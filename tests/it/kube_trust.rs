//! What `memtrial kube` and `kube collect` take from outside — plan files, names, pod
//! logs, kubectl's answers — is data: it never adds a YAML document, reaches kubectl as an
//! option, or enters the store unchecked.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

fn kube(args: &[&str]) -> Output {
    Command::new(memtrial())
        .arg("kube")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial kube")
}

/// The YAML documents of a stream, parsed (an unparsable stream fails the test).
fn documents(yaml: &str) -> Vec<serde_yaml_ng::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde_yaml_ng::Value::deserialize(d).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn render(plan: &Path, image: &str) -> Output {
    kube(&[
        &plan.display().to_string(),
        "--image",
        image,
        "--cpu",
        "1",
        "--memory",
        "1Gi",
        "--name",
        "hostile",
    ])
}

/// Names a plan could carry that would end a YAML comment, start a document or a key.
fn hostile_names() -> Vec<String> {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: evil\nspec:\n  hostPID: true\n  \
               containers:\n  - name: x\n    image: evil\n    securityContext:\n      privileged: true\n";
    vec![
        format!("x\n---\n{pod}"),
        format!("x\r---\r{pod}"),
        format!("x\u{2028}---\u{2028}{pod}"),
        format!("x\u{85}---\u{85}{pod}"),
        "x # comment".into(),
        "#x".into(),
        "a\u{1b}[31mred".into(),
        "a\u{202e}b".into(),
        "a=b".into(),
        "--- ".into(),
        "x".repeat(65),
        "y".repeat(100_000),
        String::new(),
    ]
}

#[test]
fn kube_yaml_has_exactly_its_documents_whatever_the_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = dir.path().join("plan.toml");
    for (i, name) in hostile_names().iter().enumerate() {
        // A TOML basic string holds any of them (escaped).
        let quoted = serde_json::to_string(name).expect("quote");
        let text = format!(
            "command = \"/bin/true\"\nvariants = [\"glibc\"]\nseed = 1\n\
             [[variant]]\nname = {quoted}\nenv = {{ MALLOC_ARENA_MAX = \"1\" }}\n"
        );
        std::fs::write(&plan, &text).expect("write");
        let out = render(&plan, "app:1");
        let yaml = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        // The name is refused, by the rule `run --plan` applies.
        assert_eq!(out.status.code(), Some(2), "name {i}: {yaml}{err}");
        assert!(yaml.is_empty(), "name {i}: YAML on a refused plan: {yaml}");
        assert!(
            err.contains("[[variant]] name") && err.contains("1 to 64 letters"),
            "name {i}: {err}"
        );
        assert!(err.len() < 1000, "name {i}: the refusal quotes it whole");
        assert!(
            !err.contains(['\u{1b}', '\r', '\u{2028}', '\u{85}', '\u{202e}']),
            "name {i}: {err}"
        );
        let run = Command::new(memtrial())
            .args(["run", "--plan"])
            .arg(&plan)
            .arg("--db")
            .arg(dir.path().join("m.db"))
            .current_dir(dir.path())
            .output()
            .expect("run memtrial run");
        let run_err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "name {i}: {run_err}");
        assert!(run_err.contains("1 to 64 letters"), "name {i}: {run_err}");
    }

    // What is accepted and hostile — the plan's text, the image — is written by the
    // serializer: exactly two documents, the plan carried byte for byte.
    let text =
        "# a comment\n# ---\n# kind: Pod\ncommand = [\"/bin/echo\", \"a\\n---\\nkind: Pod\", \
                \"\u{2028}--- \u{85}#\"]\nvariants = [\"glibc\"]\nseed = 1\n";
    std::fs::write(&plan, text).expect("write");
    for image in [
        "app:1\n---\nkind: Pod",
        "app:1 # x",
        "app\u{2028}---\u{2028}kind: Pod",
    ] {
        let out = render(&plan, image);
        let yaml = String::from_utf8(out.stdout).expect("UTF-8");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let docs = documents(&yaml);
        assert_eq!(docs.len(), 2, "{yaml}");
        assert_eq!(docs[0]["kind"], "ConfigMap", "{yaml}");
        assert_eq!(docs[1]["kind"], "Job", "{yaml}");
        assert_eq!(docs[0]["data"]["plan.toml"].as_str(), Some(text), "{yaml}");
        let containers = &docs[1]["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"].as_str(), Some(image), "{yaml}");
        // The header is comments only: every line before the first document starts a comment.
        let head = yaml.split("\n---\n").next().unwrap_or("");
        assert!(head.lines().all(|l| l.starts_with("# ")), "{head}");
    }
}

// ───────────── kube collect: real pod logs, a stand-in kubectl, hostile answers ─────────────

use crate::kube::{config_map_json, fake_kubectl, pod_json, pod_run};
use serde_json::Value;

/// A Job of `pods` (name, index, log or none) for the stand-in kubectl in `dir`, its
/// ConfigMap carrying `plan`; then `memtrial kube collect web-trial` into its own store.
fn collect_job(dir: &Path, plan: &str, pods: &[(&str, usize, Option<String>)]) -> (Output, String) {
    let bin = fake_kubectl(dir);
    let at = "2026-01-01T00:05:00Z";
    let mut items = Vec::new();
    for (name, index, log) in pods {
        if let Some(log) = log {
            std::fs::write(dir.join(format!("logs/{name}.log")), log).expect("write a log");
        }
        items.push(pod_json(name, *index, "Succeeded", at, None));
    }
    let write = |f: &str, v: Value| std::fs::write(dir.join(f), v.to_string()).expect("write");
    write(
        "job.json",
        serde_json::json!({"spec": {"completionMode": "Indexed", "completions": pods.len()}}),
    );
    write("pods.json", serde_json::json!({ "items": items }));
    write("configmap.json", config_map_json(plan));
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(memtrial())
        .args(["kube", "collect", "web-trial", "--out"])
        .arg(dir.join("records"))
        .arg("--db")
        .arg(dir.join("m.db"))
        .env("PATH", &path)
        .env("NO_COLOR", "1")
        .output()
        .expect("run memtrial kube collect");
    let asked = std::fs::read_to_string(dir.join("asked")).unwrap_or_default();
    (out, asked)
}

/// The record line of `log`, edited.
fn forged(log: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut r = memtrial::kube::find_record(log).expect("a record");
    edit(&mut r);
    format!(
        "memtrial-record: {}\n",
        serde_json::to_string(&r).expect("JSON")
    )
}

/// The part of a log before its record line (memtrial's notes).
fn notes_of(log: &str) -> String {
    log.lines()
        .filter(|l| !l.starts_with("memtrial-record: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn collect_takes_what_holds_and_names_each_pod_that_does_not() {
    let Some((plan, logs)) = pod_run() else {
        return;
    };
    let log = |i: usize| logs[i].1.clone();
    let err_of = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let stdout_of = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();

    // A: a forged later record line with another host; a pod named as an option.
    let a = tempfile::tempdir().expect("tempdir");
    let two_lines = log(1)
        + &forged(&log(1), |r| {
            r["experiment"]["host"]["hostname"] = "evil".into()
        });
    let (out, asked) = collect_job(
        a.path(),
        plan,
        &[
            ("web-trial-0-x", 0, Some(log(0))),
            ("web-trial-1-x", 1, Some(two_lines)),
            ("--kubeconfig=evil.conf", 2, Some(log(2))),
        ],
    );
    let err = err_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("index 1: REFUSED: the record of pod web-trial-1-x: 2 lines start with"),
        "{err}"
    );
    assert!(
        err.contains("index 2: REFUSED") && err.contains("not a Kubernetes name"),
        "{err}"
    );
    assert!(!asked.contains("kubeconfig"), "{asked}");
    assert!(err.contains("collected 1 of 3"), "{err}");
    assert!(
        stdout_of(&out).contains("1 new run(s)"),
        "{}",
        stdout_of(&out)
    );

    // B: kubectl fails for one pod; one record the import refuses; the third is imported.
    let b = tempfile::tempdir().expect("tempdir");
    let invalid = notes_of(&log(0))
        + &forged(&log(0), |r| {
            r["experiment"]["status"] = "bogus\u{1b}[31m".into()
        });
    let (out, _) = collect_job(
        b.path(),
        plan,
        &[
            ("web-trial-0-x", 0, Some(invalid)),
            ("web-trial-1-x", 1, Some(log(1))),
            ("web-trial-2-x", 2, None),
        ],
    );
    let err = err_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("index 2: NO LOG: kubectl could not give the log of pod web-trial-2-x")
            && err.contains("NotFound"),
        "{err}"
    );
    assert!(
        err.contains("NOT IMPORTED: ") && err.contains("web-trial-0.json") && err.contains("bogus"),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "{err}");
    let stdout = stdout_of(&out);
    assert!(
        stdout.contains("web-trial-1.json: new experiment 1") && stdout.contains("1 new run(s)"),
        "{stdout}"
    );

    // C: the records are of another plan than the Job's (its ConfigMap has another seed).
    let c = tempfile::tempdir().expect("tempdir");
    let other = plan.replace("seed = 11", "seed = 12");
    assert_ne!(&other, plan);
    let (out, _) = collect_job(
        c.path(),
        &other,
        &[
            ("web-trial-0-x", 0, Some(log(0))),
            ("web-trial-1-x", 1, Some(log(1))),
            ("web-trial-2-x", 2, Some(log(2))),
        ],
    );
    let err = err_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.matches("not a record of the Job's plan (ConfigMap web-trial-plan): its seed is 11, the Job's 12")
            .count(),
        3,
        "{err}"
    );
    assert!(
        stdout_of(&out).is_empty(),
        "nothing imported: {}",
        stdout_of(&out)
    );

    // D: one forged line alone, with another host; another with another node.
    let d = tempfile::tempdir().expect("tempdir");
    let (out, _) = collect_job(
        d.path(),
        plan,
        &[
            (
                "web-trial-0-x",
                0,
                Some(forged(&log(0), |r| {
                    r["experiment"]["host"]["hostname"] = "evil".into()
                })),
            ),
            (
                "web-trial-1-x",
                1,
                Some(forged(&log(1), |r| {
                    let notes = r["notes"].as_array_mut().expect("notes");
                    for n in notes.iter_mut() {
                        if n.as_str()
                            .is_some_and(|s| s.starts_with("in-container: node "))
                        {
                            *n = "in-container: node node-b".into();
                        }
                    }
                })),
            ),
            ("web-trial-2-x", 2, Some(log(2))),
        ],
    );
    let err = err_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("its host is \"evil\""), "{err}");
    assert!(err.contains("says it ran on node(s) [\"node-b\"]"), "{err}");
    assert!(err.contains("collected 1 of 3"), "{err}");
}

#[test]
fn collect_refuses_hostile_names_and_sizes_up_front() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake_kubectl(dir.path());
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let collect = |args: &[&str]| {
        Command::new(memtrial())
            .args(["kube", "collect"])
            .args(args)
            .arg("--db")
            .arg(dir.path().join("m.db"))
            .env("PATH", &path)
            .output()
            .expect("run memtrial kube collect")
    };
    let out = collect(&["web-trial", "--namespace=--kubeconfig=/tmp/x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--namespace \"--kubeconfig=/tmp/x\""), "{err}");
    // A Job of 2^31 - 1 completions (Kubernetes' most): refused, naming the limit.
    std::fs::write(
        dir.path().join("job.json"),
        r#"{"spec":{"completionMode":"Indexed","completions":2147483647}}"#,
    )
    .expect("write");
    let out = collect(&["web-trial"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("2147483647 completions") && err.contains("at most 100000"),
        "{err}"
    );
}

#[test]
fn plans_are_read_within_a_limit_and_their_errors_say_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p
    };
    // /dev/zero and a 2 MB plan: refused with the limit (and the size), no YAML.
    let big = write(
        "big.toml",
        &format!(
            "command = \"/bin/true\"\nvariants = [\"glibc\"]\nseed = 1\n{}",
            "# padding padding padding padding padding padding padding padding\n".repeat(31_000)
        ),
    );
    let big_len = std::fs::metadata(&big).expect("stat").len();
    assert!(big_len > 2_000_000);
    for (plan, says) in [
        (
            Path::new("/dev/zero").to_path_buf(),
            "more than 1048576 bytes".to_string(),
        ),
        (big.clone(), format!("it has {big_len} bytes")),
    ] {
        let out = render(&plan, "app:1");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(out.stdout.is_empty());
        assert!(
            err.contains(&says)
                && err.contains("at most 1048576 bytes")
                && err.contains("ConfigMap"),
            "{err}"
        );
    }
    // Just under the reader's limit, but over the ConfigMap's once its key is counted.
    let head = "command = \"/bin/true\"\nvariants = [\"glibc\"]\nseed = 1\n#";
    let edge = write(
        "edge.toml",
        &format!("{head}{}\n", "x".repeat((1 << 20) - head.len() - 1)),
    );
    assert_eq!(std::fs::metadata(&edge).expect("stat").len(), 1 << 20);
    let out = render(&edge, "app:1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a ConfigMap of 1048585 bytes") && err.contains("over 1048576 bytes"),
        "{err}"
    );
    // Errors with a reason, a line and a column; `run --plan` and `kube` alike.
    let cases = [
        (
            "# a comment with \u{1} in it\ncommand = \"/bin/true\"\n",
            "line 1, column 18: the control character U+0001 is not allowed",
        ),
        (
            "command = 5\nvariants = [\"glibc\"]\n",
            "line 1, column 11: command must be a string (split like a shell would) or an array of strings",
        ),
        (
            "command = \"/bin/true\"\nvariants = [\"glibc\"]\ncpus = true\n",
            "line 3, column 8: cpus must be a number",
        ),
    ];
    for (text, says) in cases {
        let plan = write("p.toml", text);
        let out = render(&plan, "app:1");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "kube: {text:?}: {err}");
        run_refuses_the_plan(dir.path(), &plan, says, text);
    }
}

/// `memtrial run --plan PLAN` (a database in `dir`) refuses the plan as bad input, saying
/// `says` (`what`: the case, for the failure message).
fn run_refuses_the_plan(dir: &std::path::Path, plan: &std::path::Path, says: &str, what: &str) {
    let run = Command::new(memtrial())
        .args(["run", "--plan"])
        .arg(plan)
        .arg("--db")
        .arg(dir.join("m.db"))
        .current_dir(dir)
        .output()
        .expect("run memtrial");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "run: {what:?}: {err}");
    assert!(err.contains(says), "run: {what:?}: {err}");
}

#[test]
fn kube_refuses_the_variant_names_run_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = dir.path().join("plan.toml");
    let cases = [
        (
            "[[variant]]\nname = \"glibc\"\nenv = { A = \"1\" }\n",
            "variant name 'glibc' is used twice",
        ),
        (
            "[[variant]]\nname = \"a\"\nenv = { A = \"1\" }\n[[variant]]\nname = \"a\"\nenv = { A = \"2\" }\n",
            "variant name 'a' is used twice",
        ),
    ];
    for (variants, says) in cases {
        let text = format!("command = \"/bin/true\"\nvariants = [\"glibc\"]\nseed = 1\n{variants}");
        std::fs::write(&plan, text).expect("write");
        let out = render(&plan, "app:1");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "kube: {err}");
        assert!(out.stdout.is_empty() && err.contains(says), "kube: {err}");
        run_refuses_the_plan(dir.path(), &plan, says, variants);
    }
}
