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
