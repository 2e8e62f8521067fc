//! `memtrial kube collect NAME`: the Job's records back from its pods' logs, through the
//! user's `kubectl` (its context and credentials as they are).
//!
//! The Job's size comes from `kubectl get job NAME -o json`, its pods from `kubectl get
//! pods -l job-name=NAME -o json`; for each completion index the succeeded pod's log
//! (`kubectl logs POD -c workload`) holds the record line ([`super::find_record`]).
//! Indexes without a succeeded pod are reported as failed, still running or missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The annotation (and, from Kubernetes 1.28, label) with a pod's completion index.
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

/// Errors that stop collect (an index without a record is not one: it is reported).
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot run {kubectl} (--kubectl): {source}")]
    Spawn {
        kubectl: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Kubectl {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` did not answer what was expected: {reason}")]
    Answer { command: String, reason: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How memtrial reaches the cluster: runs kubectl with `args`, returns its stdout.
pub trait Kubectl {
    fn run(&self, args: &[String]) -> Result<String, CollectError>;
}

/// The real `kubectl` (or whatever `--kubectl` names), in `namespace` if given.
pub struct KubectlProgram {
    pub program: PathBuf,
    pub namespace: Option<String>,
}

impl Kubectl for KubectlProgram {
    fn run(&self, args: &[String]) -> Result<String, CollectError> {
        let mut all: Vec<String> = Vec::new();
        if let Some(ns) = &self.namespace {
            all.extend(["--namespace".to_string(), ns.clone()]);
        }
        all.extend(args.iter().cloned());
        let command = format!("{} {}", self.program.display(), shell_words::join(&all));
        let out = std::process::Command::new(&self.program)
            .args(&all)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|source| CollectError::Spawn {
                kubectl: self.program.display().to_string(),
                source,
            })?;
        if !out.status.success() {
            return Err(CollectError::Kubectl {
                command,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A pod's phase, as Kubernetes reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Succeeded,
    Running,
    Pending,
    Failed,
    Unknown,
}

impl Phase {
    fn parse(s: &str) -> Phase {
        match s {
            "Succeeded" => Phase::Succeeded,
            "Running" => Phase::Running,
            "Pending" => Phase::Pending,
            "Failed" => Phase::Failed,
            _ => Phase::Unknown,
        }
    }
}

/// One pod of the Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub index: u32,
    pub phase: Phase,
    /// RFC 3339, sorts by time.
    pub created: String,
    /// Why it failed, when Kubernetes says (`OOMKilled`, `Error`, an exit code).
    pub reason: Option<String>,
}

fn answer_err(command: &str, reason: impl Into<String>) -> CollectError {
    CollectError::Answer {
        command: command.to_string(),
        reason: reason.into(),
    }
}

/// `completions` of `kubectl get job NAME -o json`.
pub fn parse_completions(json: &str) -> Result<u32, CollectError> {
    let cmd = "kubectl get job -o json";
    let v: Value = serde_json::from_str(json).map_err(|e| answer_err(cmd, e.to_string()))?;
    if v["spec"]["completionMode"] != "Indexed" {
        return Err(answer_err(
            cmd,
            "the Job is not an Indexed Job (was it rendered by memtrial kube?)",
        ));
    }
    v["spec"]["completions"]
        .as_u64()
        .and_then(|c| u32::try_from(c).ok())
        .ok_or_else(|| answer_err(cmd, "the Job has no spec.completions"))
}

/// The pods of `kubectl get pods -o json`; pods without a completion index are left out.
pub fn parse_pods(json: &str) -> Result<Vec<Pod>, CollectError> {
    let cmd = "kubectl get pods -o json";
    let v: Value = serde_json::from_str(json).map_err(|e| answer_err(cmd, e.to_string()))?;
    let items = v["items"]
        .as_array()
        .ok_or_else(|| answer_err(cmd, "no items list"))?;
    let mut pods = Vec::new();
    for p in items {
        let meta = &p["metadata"];
        let Some(name) = meta["name"].as_str() else {
            continue;
        };
        let index = [&meta["annotations"][INDEX_KEY], &meta["labels"][INDEX_KEY]]
            .into_iter()
            .find_map(|v| v.as_str()?.parse::<u32>().ok());
        let Some(index) = index else { continue };
        let reason = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| {
                let t = &c["state"]["terminated"];
                let r = t["reason"].as_str()?;
                Some(match t["exitCode"].as_i64() {
                    Some(code) => format!("{r}, exit {code}"),
                    None => r.to_string(),
                })
            })
            .or_else(|| p["status"]["reason"].as_str().map(str::to_string));
        pods.push(Pod {
            name: name.to_string(),
            index,
            phase: Phase::parse(p["status"]["phase"].as_str().unwrap_or("")),
            created: meta["creationTimestamp"].as_str().unwrap_or("").to_string(),
            reason,
        });
    }
    Ok(pods)
}

/// What became of one completion index.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexOutcome {
    /// The record, written to this file; the run's status as recorded.
    Collected {
        pod: String,
        file: PathBuf,
        run_status: String,
    },
    /// A pod succeeded but its log holds no readable record.
    NoRecord { pod: String, why: String },
    /// Every pod of the index failed.
    Failed { pods: Vec<(String, Option<String>)> },
    /// A pod is still pending or running.
    Unfinished { pod: String, phase: Phase },
    /// No pod of the index exists (not started yet, or deleted).
    Missing,
}

/// The outcome of every index, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub completions: u32,
    pub indexes: Vec<(u32, IndexOutcome)>,
}

impl Collected {
    pub fn files(&self) -> Vec<PathBuf> {
        self.indexes
            .iter()
            .filter_map(|(_, o)| match o {
                IndexOutcome::Collected { file, .. } => Some(file.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn complete(&self) -> bool {
        self.files().len() == self.completions as usize
    }
}

/// The one run's status in a record (`variants[].runs[]`).
fn run_status(record: &Value) -> String {
    record["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| {
            v["runs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |r| (v["name"].as_str().unwrap_or("?"), r))
        })
        .map(|(v, r)| format!("{v} {}", r["status"].as_str().unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Gathers the Job `name`'s records into `out` (one `NAME-INDEX.json` per index).
pub fn collect(kubectl: &dyn Kubectl, name: &str, out: &Path) -> Result<Collected, CollectError> {
    let s = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let completions = parse_completions(&kubectl.run(&s(&["get", "job", name, "-o", "json"]))?)?;
    let selector = format!("job-name={name}");
    let pods = parse_pods(&kubectl.run(&s(&["get", "pods", "-l", &selector, "-o", "json"]))?)?;
    let mut by_index: BTreeMap<u32, Vec<Pod>> = BTreeMap::new();
    for p in pods.into_iter().filter(|p| p.index < completions) {
        by_index.entry(p.index).or_default().push(p);
    }
    std::fs::create_dir_all(out).map_err(|source| CollectError::Write {
        path: out.to_path_buf(),
        source,
    })?;
    let mut indexes = Vec::new();
    for index in 0..completions {
        let mut pods = by_index.remove(&index).unwrap_or_default();
        // The latest pod of a phase first: a retried index has several.
        pods.sort_by(|a, b| a.phase.cmp(&b.phase).then(b.created.cmp(&a.created)));
        let outcome = match pods.first() {
            None => IndexOutcome::Missing,
            Some(p) if p.phase == Phase::Succeeded => {
                let log = kubectl.run(&s(&["logs", &p.name, "-c", "workload"]))?;
                match super::find_record(&log) {
                    Ok(record) => {
                        let file = out.join(format!("{name}-{index}.json"));
                        let text = serde_json::to_string_pretty(&record)
                            .map_err(|e| answer_err("kubectl logs", e.to_string()))?;
                        std::fs::write(&file, text + "\n").map_err(|source| {
                            CollectError::Write {
                                path: file.clone(),
                                source,
                            }
                        })?;
                        IndexOutcome::Collected {
                            pod: p.name.clone(),
                            file,
                            run_status: run_status(&record),
                        }
                    }
                    Err(e) => IndexOutcome::NoRecord {
                        pod: p.name.clone(),
                        why: e.to_string(),
                    },
                }
            }
            Some(p) if matches!(p.phase, Phase::Running | Phase::Pending) => {
                IndexOutcome::Unfinished {
                    pod: p.name.clone(),
                    phase: p.phase,
                }
            }
            Some(_) => IndexOutcome::Failed {
                pods: pods
                    .iter()
                    .map(|p| (p.name.clone(), p.reason.clone()))
                    .collect(),
            },
        };
        indexes.push((index, outcome));
    }
    Ok(Collected {
        completions,
        indexes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    struct Fake {
        job: String,
        pods: String,
        logs: BTreeMap<String, String>,
        asked: RefCell<Vec<Vec<String>>>,
    }

    impl Kubectl for Fake {
        fn run(&self, args: &[String]) -> Result<String, CollectError> {
            self.asked.borrow_mut().push(args.to_vec());
            match args.first().map(String::as_str) {
                Some("get") if args[1] == "job" => Ok(self.job.clone()),
                Some("get") => Ok(self.pods.clone()),
                Some("logs") => self
                    .logs
                    .get(&args[1])
                    .cloned()
                    .ok_or(CollectError::Kubectl {
                        command: "logs".into(),
                        status: "exit 1".into(),
                        stderr: "not found".into(),
                    }),
                _ => Err(answer_err("?", "unexpected")),
            }
        }
    }

    fn pod(name: &str, index: u32, phase: &str, created: &str) -> Value {
        serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created,
                         "annotations": {INDEX_KEY: index.to_string()}},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "workload", "state": {"terminated": {"reason": "Error", "exitCode": 2}}}]}
        })
    }

    #[test]
    fn each_index_gets_its_succeeded_pods_record_and_the_rest_is_said() {
        let pods = serde_json::json!({"items": [
            pod("t-0-a", 0, "Failed", "2026-01-01T00:00:00Z"),
            pod("t-0-b", 0, "Succeeded", "2026-01-01T00:01:00Z"),
            pod("t-1-a", 1, "Failed", "2026-01-01T00:00:00Z"),
            pod("t-1-b", 1, "Failed", "2026-01-01T00:02:00Z"),
            pod("t-2-a", 2, "Running", "2026-01-01T00:00:00Z"),
            pod("t-4-a", 4, "Succeeded", "2026-01-01T00:00:00Z"),
            {"metadata": {"name": "stray"}, "status": {"phase": "Succeeded"}},
        ]});
        let record = r#"{"variants":[{"name":"jemalloc","runs":[{"status":"ok"}]}]}"#;
        let fake = Fake {
            job: r#"{"spec":{"completionMode":"Indexed","completions":5}}"#.into(),
            pods: pods.to_string(),
            logs: BTreeMap::from([
                (
                    "t-0-b".into(),
                    format!("note: x\nmemtrial-record: {record}\n"),
                ),
                ("t-4-a".into(), "memtrial: error: no record\n".into()),
            ]),
            asked: RefCell::new(Vec::new()),
        };
        let dir = tempfile::tempdir().unwrap();
        let c = collect(&fake, "t", dir.path()).unwrap();
        assert_eq!(c.completions, 5);
        assert!(!c.complete());
        assert_eq!(
            c.indexes[0].1,
            IndexOutcome::Collected {
                pod: "t-0-b".into(),
                file: dir.path().join("t-0.json"),
                run_status: "jemalloc ok".into()
            }
        );
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("t-0.json")).unwrap())
                .unwrap();
        assert_eq!(saved, serde_json::from_str::<Value>(record).unwrap());
        match &c.indexes[1].1 {
            IndexOutcome::Failed { pods } => {
                assert_eq!(pods.len(), 2);
                assert_eq!(pods[0].1.as_deref(), Some("Error, exit 2"));
            }
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            c.indexes[2].1,
            IndexOutcome::Unfinished {
                phase: Phase::Running,
                ..
            }
        ));
        assert_eq!(c.indexes[3].1, IndexOutcome::Missing);
        assert!(matches!(c.indexes[4].1, IndexOutcome::NoRecord { .. }));
        assert_eq!(c.files(), [dir.path().join("t-0.json")]);
        // The pods are found by the Job's label; logs of the workload container.
        let asked = fake.asked.borrow();
        assert_eq!(asked[1], ["get", "pods", "-l", "job-name=t", "-o", "json"]);
        assert_eq!(asked[2], ["logs", "t-0-b", "-c", "workload"]);
    }

    #[test]
    fn answers_that_are_not_a_jobs_are_errors_not_panics() {
        assert!(parse_completions("{}").is_err());
        assert!(parse_completions("not json").is_err());
        assert!(parse_completions(r#"{"spec":{"completionMode":"Indexed"}}"#).is_err());
        assert!(
            parse_completions(r#"{"spec":{"completionMode":"Indexed","completions":-1}}"#).is_err()
        );
        assert!(parse_pods("[]").is_err());
        assert!(parse_pods(r#"{"items":[1, {"metadata":{}}]}"#)
            .unwrap()
            .is_empty());
    }
}
