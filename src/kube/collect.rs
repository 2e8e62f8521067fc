//! `memtrial kube collect NAME`: the Job's records back from its pods' logs, through the
//! user's `kubectl` (its context and credentials as they are).
//!
//! The Job's size comes from `kubectl get job NAME -o json`, its plan from its ConfigMap
//! (`NAME-plan`), its pods from `kubectl get pods -l job-name=NAME -o json`; for each
//! completion index the succeeded pod's log (`kubectl logs POD -c workload`) holds the
//! record line ([`super::find_record`]). Indexes without a succeeded pod are reported as
//! failed, still running or missing.
//!
//! What kubectl answers is data from the cluster, trusted only as far as it is checked:
//! - names passed back to kubectl are Kubernetes names, after `--` (never an option);
//! - every answer is read up to a stated limit ([`MAX_ANSWER_BYTES`], [`MAX_LOG_BYTES`]),
//!   and a Job of more than [`MAX_SLOTS`] completions is refused;
//! - a pod's log holds exactly one record line; the record must be of the Job's plan
//!   (command, variants, baseline, runs, warm-up, seed as the ConfigMap and the Job say),
//!   of the pod's slot (its index, one run of the slot's variant), of the Job's host
//!   (`MEMTRIAL_HOST` = the Job's name) and of the node Kubernetes says the pod ran on;
//! - all records taken share one plan fingerprint: the one most records carry.
//!
//! One pod's failure (kubectl could not give its log, its record is refused) is that
//! index's outcome; the other indexes are collected.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod as K8sPod, PodStatus};
use serde::Deserialize;
use serde_json::Value;

use super::render::{MAX_SLOTS, PLAN_KEY};
use crate::plan::{Plan, DEFAULT_RUNS};
use crate::report::escape;

/// The annotation (and, from Kubernetes 1.28, label) with a pod's completion index.
pub(crate) const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

/// The most bytes read of kubectl's answer to `get job`, `get pods`, `get configmap`.
pub(crate) const MAX_ANSWER_BYTES: usize = 256 << 20;
/// The most bytes read of one pod's log (memtrial's notes and one record line).
pub(crate) const MAX_LOG_BYTES: usize = 64 << 20;
/// The most bytes of kubectl's standard error kept for a message.
pub(crate) const MAX_STDERR_BYTES: usize = 16 << 10;

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
    #[error("`{command}` answered more than {limit} bytes, the most memtrial reads of it; nothing of it was used")]
    TooBig { command: String, limit: usize },
    #[error("`{command}` did not answer what was expected: {reason}")]
    Answer { command: String, reason: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How memtrial reaches the cluster: runs kubectl with `args`, returns its stdout, of
/// which at most `limit` bytes are read (more is [`CollectError::TooBig`]).
pub trait Kubectl {
    fn run(&self, args: &[String], limit: usize) -> Result<String, CollectError>;
}

/// The real `kubectl` (or whatever `--kubectl` names), in `namespace` if given.
pub struct KubectlProgram {
    pub program: PathBuf,
    /// A DNS-1123 label (checked by the caller), passed as `--namespace=NS`.
    pub namespace: Option<String>,
}

/// Reads at most `limit` bytes of `r`; `None` when there were more.
fn read_bounded(r: impl Read, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    r.take(limit as u64 + 1).read_to_end(&mut buf)?;
    Ok((buf.len() <= limit).then_some(buf))
}

impl Kubectl for KubectlProgram {
    fn run(&self, args: &[String], limit: usize) -> Result<String, CollectError> {
        use std::process::{Command, Stdio};
        let mut all: Vec<String> = Vec::new();
        if let Some(ns) = &self.namespace {
            all.push(format!("--namespace={ns}"));
        }
        all.extend(args.iter().cloned());
        let command = format!("{} {}", self.program.display(), shell_words::join(&all));
        let spawn_err = |source| CollectError::Spawn {
            kubectl: self.program.display().to_string(),
            source,
        };
        let mut child = Command::new(&self.program)
            .args(&all)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        // Standard error beside: the first bytes kept, the rest drained so kubectl never
        // blocks on it.
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                let _ = (&mut e)
                    .take(MAX_STDERR_BYTES as u64)
                    .read_to_end(&mut kept);
                let _ = std::io::copy(&mut e, &mut std::io::sink());
                kept
            })
        });
        let out = match child.stdout.take() {
            Some(o) => read_bounded(o, limit),
            None => Ok(Some(Vec::new())),
        };
        let out = match out {
            Ok(Some(out)) => out,
            Ok(None) => {
                // Over the limit: kubectl is stopped, nothing of its answer is used.
                let _ = child.kill();
                let _ = child.wait();
                return Err(CollectError::TooBig { command, limit });
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(spawn_err(e));
            }
        };
        let status = child.wait().map_err(spawn_err)?;
        let stderr = stderr
            .and_then(|t| t.join().ok())
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        if !status.success() {
            return Err(CollectError::Kubectl {
                command,
                status: status.to_string(),
                stderr,
            });
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
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

/// Why a pod that has not finished is not running, as Kubernetes says it: a container
/// waiting (`ErrImagePull` and its message), or the pod not scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// `container NAME: REASON: MESSAGE`, or `not scheduled: REASON: MESSAGE`.
    pub said: String,
    /// A reason that waiting does not cure (an image that cannot be pulled or found, a
    /// container that cannot be created): the index will not finish without a change.
    pub stuck: bool,
}

/// Waiting reasons the kubelet does not get over by itself: the image cannot be had, or
/// the container cannot be made from the pod's spec.
const STUCK_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

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
    /// The node Kubernetes scheduled it on (`spec.nodeName`), when it says.
    pub node: Option<String>,
    /// Why it is not running yet, when it is pending and Kubernetes says.
    pub waiting: Option<Waiting>,
}

fn answer_err(command: &str, reason: impl Into<String>) -> CollectError {
    CollectError::Answer {
        command: command.to_string(),
        reason: reason.into(),
    }
}

/// `completions` of `kubectl get job NAME -o json`, at most [`MAX_SLOTS`].
#[cfg(test)]
pub(crate) fn parse_completions(json: &str) -> Result<u32, CollectError> {
    let cmd = "kubectl get job -o json";
    let job: Job = serde_json::from_str(json).map_err(|e| answer_err(cmd, e.to_string()))?;
    completions_of(&job)
}

fn completions_of(job: &Job) -> Result<u32, CollectError> {
    let cmd = "kubectl get job -o json";
    let spec = job
        .spec
        .as_ref()
        .ok_or_else(|| answer_err(cmd, "the Job has no spec"))?;
    if spec.completion_mode.as_deref() != Some("Indexed") {
        return Err(answer_err(
            cmd,
            "the Job is not an Indexed Job (was it rendered by memtrial kube?)",
        ));
    }
    let c = spec
        .completions
        .ok_or_else(|| answer_err(cmd, "the Job has no spec.completions"))?;
    let c = u32::try_from(c)
        .map_err(|_| answer_err(cmd, format!("spec.completions is {c}, below 0")))?;
    if c > MAX_SLOTS {
        return Err(answer_err(
            cmd,
            format!(
                "the Job has {c} completions; memtrial kube renders and collects at most \
                 {MAX_SLOTS} (was it rendered by memtrial kube?)"
            ),
        ));
    }
    Ok(c)
}

/// Whether the Job controller gave up on the Job (its `Failed` condition is true: the
/// backoff limit was reached, or its deadline passed): its unfinished indexes stay so.
fn job_failed(job: &Job) -> Option<String> {
    let c = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")?;
    Some(
        [c.reason.as_deref(), c.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": "),
    )
}

/// The list `kubectl get pods -o json` answers (its `kind` is `List`: only the items are
/// read, each as a `v1` Pod).
#[derive(serde::Deserialize)]
struct Items {
    items: Vec<Value>,
}

/// The pods of `kubectl get pods -o json`; items that are not pods, and pods without a
/// completion index, are left out.
pub(crate) fn parse_pods(json: &str) -> Result<Vec<Pod>, CollectError> {
    let cmd = "kubectl get pods -o json";
    let list: Items = serde_json::from_str(json).map_err(|e| answer_err(cmd, e.to_string()))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|item| pod_of(serde_json::from_value::<K8sPod>(item).ok()?))
        .collect())
}

/// One pod of the Job, when it has a name and a completion index.
fn pod_of(p: K8sPod) -> Option<Pod> {
    let meta = &p.metadata;
    let name = meta.name.clone()?;
    let index = [meta.annotations.as_ref(), meta.labels.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|m| m.get(INDEX_KEY)?.parse::<u32>().ok())?;
    let status = p.status.as_ref();
    let containers = |s: &PodStatus| -> Vec<ContainerStatus> {
        // Init containers first: a pod waits on them before its other containers.
        [&s.init_container_statuses, &s.container_statuses]
            .into_iter()
            .flatten()
            .flatten()
            .cloned()
            .collect()
    };
    let statuses = status.map(containers).unwrap_or_default();
    let reason = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            let r = t.reason.as_deref()?;
            Some(format!("{r}, exit {}", t.exit_code))
        })
        .or_else(|| status.and_then(|s| s.reason.clone()));
    let phase = Phase::parse(status.and_then(|s| s.phase.as_deref()).unwrap_or(""));
    let waiting = (phase == Phase::Pending)
        .then(|| {
            let container = statuses.iter().find_map(|c| {
                let w = c.state.as_ref()?.waiting.as_ref()?;
                let r = w.reason.as_deref()?;
                // Merely starting (`PodInitializing`, `ContainerCreating`) is no reason.
                (!matches!(r, "PodInitializing" | "ContainerCreating")).then(|| Waiting {
                    said: with_message(&format!("container {}: {r}", c.name), &w.message),
                    stuck: STUCK_REASONS.contains(&r),
                })
            });
            let unscheduled = || {
                let c = status?
                    .conditions
                    .as_ref()?
                    .iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
                Some(Waiting {
                    said: with_message(
                        &format!(
                            "not scheduled: {}",
                            c.reason.as_deref().unwrap_or("no reason given")
                        ),
                        &c.message,
                    ),
                    stuck: false,
                })
            };
            container.or_else(unscheduled)
        })
        .flatten();
    Some(Pod {
        name,
        index,
        phase,
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        reason,
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        waiting,
    })
}

fn with_message(what: &str, message: &Option<String>) -> String {
    match message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => format!("{what}: {m}"),
        None => what.to_string(),
    }
}

/// What the Job says its pods run: its plan (from its ConfigMap) and its seed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobPlan {
    /// The Job's name: also the host its pods record (`MEMTRIAL_HOST`).
    pub name: String,
    pub command: Vec<String>,
    pub variants: Vec<String>,
    pub baseline: String,
    pub runs: u32,
    pub warmup: u32,
    pub seed: u64,
}

/// The Job's plan: the ConfigMap's `plan.toml` (as `memtrial kube` counted it) and the
/// seed every pod got (the Job's `--seed`, or the plan's).
pub(crate) fn job_plan(
    name: &str,
    job: &Job,
    config_map: &ConfigMap,
) -> Result<JobPlan, CollectError> {
    let cmd = "kubectl get configmap -o json";
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(PLAN_KEY))
        .ok_or_else(|| {
            answer_err(
                cmd,
                format!("the ConfigMap {name}-plan has no data.{PLAN_KEY}"),
            )
        })?;
    let input = crate::plan::parse_plan_text(text).map_err(|m| {
        answer_err(
            cmd,
            format!("the Job's plan (ConfigMap {name}-plan) does not parse: {m}"),
        )
    })?;
    let (variants, _) = super::render::plan_slots(&input)
        .map_err(|e| answer_err(cmd, format!("the Job's plan (ConfigMap {name}-plan): {e}")))?;
    let args: Vec<&str> = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|c| c.name == "workload")
        .flat_map(|c| c.args.iter().flatten())
        .map(String::as_str)
        .collect();
    let job_seed = args
        .windows(2)
        .find(|w| w[0] == "--seed")
        .and_then(|w| w[1].parse::<u64>().ok());
    let seed = job_seed.or(input.seed).ok_or_else(|| {
        answer_err(
            "kubectl get job -o json",
            "neither the Job's workload container (--seed) nor its plan sets a seed (was it rendered by memtrial kube?)",
        )
    })?;
    Ok(JobPlan {
        name: name.to_string(),
        command: input.command.clone(),
        variants,
        baseline: input.baseline.clone().unwrap_or_else(|| "glibc".into()),
        runs: input.runs.unwrap_or(DEFAULT_RUNS),
        warmup: input.warmup.unwrap_or(0),
        seed,
    })
}

/// A value from outside for a message: one line, cut to 120 characters.
fn shown(v: impl std::fmt::Debug) -> String {
    let s = escape::terminal(&format!("{v:?}"));
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Why a pod's record is not taken as its index's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RecordRefused {
    #[error("it is not a record of memtrial's shape: {0}")]
    Shape(String),
    #[error(
        "it is not a record of the Job's plan (ConfigMap {job}-plan): its {what} is {theirs}, the Job's {jobs}"
    )]
    OtherPlan {
        job: String,
        what: &'static str,
        theirs: String,
        jobs: String,
    },
    #[error("its host is {said}; the Job's pods record the Job's name, {job:?} (MEMTRIAL_HOST)")]
    OtherHost { said: String, job: String },
    #[error("it says it ran on node(s) {said}; Kubernetes says pod {pod} ran on node {node}")]
    OtherNode {
        said: String,
        pod: String,
        node: String,
    },
    #[error("it does not say it is slot {0} (the pod's completion index)")]
    NoSlot(u32),
    #[error("index {0} is outside the Job's schedule")]
    OutsideSchedule(u32),
    #[error("slot {index} is one run of {expected}; the record has run(s) of {runs}")]
    OtherRuns {
        index: u32,
        expected: String,
        runs: String,
    },
}

/// The parts of a pod's record that [`check_record`] reads; the rest of it is kept as
/// it came (the record is written out whole).
#[derive(Debug, serde::Deserialize)]
struct PodRecord {
    experiment: PodExperiment,
    #[serde(default)]
    notes: Vec<String>,
    #[serde(default)]
    variants: Vec<PodVariant>,
}

#[derive(Debug, serde::Deserialize)]
struct PodExperiment {
    plan: Plan,
    #[serde(default)]
    host: PodHost,
    #[serde(default)]
    hosts: Vec<PodHost>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct PodHost {
    hostname: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct PodVariant {
    name: String,
    #[serde(default)]
    runs: Vec<PodRun>,
}

#[derive(Debug, serde::Deserialize)]
struct PodRun {
    status: Option<String>,
}

/// Whether a record's `plan` is the Job's: its command, variants, baseline, runs, warm-up
/// and seed; why not otherwise.
fn same_plan(plan: &Plan, job: &JobPlan) -> Result<(), RecordRefused> {
    let names: Vec<&str> = plan.variants.iter().map(|v| v.name.as_str()).collect();
    // Each pair is compared whole; only the message shows them cut.
    let differs: [(&'static str, bool, String, String); 6] = [
        (
            "command",
            plan.command != job.command,
            shown(&plan.command),
            shown(&job.command),
        ),
        (
            "variants",
            names != job.variants,
            shown(&names),
            shown(&job.variants),
        ),
        (
            "baseline",
            plan.baseline != job.baseline,
            shown(&plan.baseline),
            shown(&job.baseline),
        ),
        (
            "runs",
            plan.runs != job.runs,
            plan.runs.to_string(),
            job.runs.to_string(),
        ),
        (
            "warmup",
            plan.warmup != job.warmup,
            plan.warmup.to_string(),
            job.warmup.to_string(),
        ),
        (
            "seed",
            plan.seed != job.seed,
            plan.seed.to_string(),
            job.seed.to_string(),
        ),
    ];
    match differs.into_iter().find(|(_, differs, ..)| *differs) {
        Some((what, _, theirs, jobs)) => Err(RecordRefused::OtherPlan {
            job: job.name.clone(),
            what,
            theirs,
            jobs,
        }),
        None => Ok(()),
    }
}

/// Checks a pod's record against its Job, its index and its node; the record's plan
/// fingerprint and its run's status ("VARIANT STATUS") when it holds, why not otherwise.
pub(crate) fn check_record(
    record: &Value,
    job: &JobPlan,
    pod: &Pod,
) -> Result<(String, String), RecordRefused> {
    let r = PodRecord::deserialize(record).map_err(|e| RecordRefused::Shape(e.to_string()))?;
    let e = &r.experiment;
    same_plan(&e.plan, job)?;
    // The host: every pod of the Job records the Job's name (MEMTRIAL_HOST).
    for h in std::iter::once(&e.host).chain(&e.hosts) {
        if h.hostname.as_deref() != Some(job.name.as_str()) {
            return Err(RecordRefused::OtherHost {
                said: h.hostname.as_ref().map_or("not named".into(), shown),
                job: job.name.clone(),
            });
        }
    }
    // The node the record says it ran on is the one Kubernetes says the pod ran on.
    if let Some(node) = &pod.node {
        let said: Vec<&str> = r
            .notes
            .iter()
            .filter_map(|n| n.strip_prefix("in-container: node "))
            .collect();
        if said != [node.as_str()] {
            return Err(RecordRefused::OtherNode {
                said: shown(&said),
                pod: pod.name.clone(),
                node: shown(node),
            });
        }
    }
    // The slot: the pod's index, one run of the slot's variant.
    let slot = format!("in-container: slot {} of ", pod.index);
    if !r.notes.iter().any(|n| n.starts_with(&slot)) {
        return Err(RecordRefused::NoSlot(pod.index));
    }
    let schedule = crate::schedule::schedule(job.variants.len(), job.warmup, job.runs, job.seed);
    let expected = schedule
        .get(pod.index as usize)
        .and_then(|s| job.variants.get(s.variant))
        .ok_or(RecordRefused::OutsideSchedule(pod.index))?;
    let runs: Vec<(&str, &PodRun)> = r
        .variants
        .iter()
        .flat_map(|v| v.runs.iter().map(move |run| (v.name.as_str(), run)))
        .collect();
    match &runs[..] {
        [(name, run)] if name == expected => Ok((
            e.plan.fingerprint(),
            format!("{name} {}", run.status.as_deref().unwrap_or("?")),
        )),
        _ => Err(RecordRefused::OtherRuns {
            index: pod.index,
            expected: expected.clone(),
            runs: shown(runs.iter().map(|(n, _)| *n).collect::<Vec<_>>()),
        }),
    }
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
    /// The pod's record was read and refused (not the Job's plan, slot, host or node;
    /// two record lines; a pod name that is not a Kubernetes name).
    Refused { pod: String, why: String },
    /// kubectl could not give the pod's log; what it said.
    LogFailed { pod: String, said: String },
    /// Every pod of the index failed.
    Failed { pods: Vec<(String, Option<String>)> },
    /// A pod is still pending or running; why it waits, when Kubernetes says.
    Unfinished {
        pod: String,
        phase: Phase,
        waiting: Option<Waiting>,
    },
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

/// The answer of a `kubectl get … -o json`, as `T` (a typed Kubernetes object).
fn get_json<T: serde::de::DeserializeOwned>(
    kubectl: &dyn Kubectl,
    args: &[String],
) -> Result<T, CollectError> {
    let text = kubectl.run(args, MAX_ANSWER_BYTES)?;
    serde_json::from_str(&text)
        .map_err(|e| answer_err(&format!("kubectl {}", args.join(" ")), e.to_string()))
}

/// An index's pod whose log held a record that passed [`check_record`].
struct Candidate {
    index: u32,
    pod: String,
    record: Value,
    fingerprint: String,
    /// The run's status as recorded ("VARIANT STATUS").
    run_status: String,
}

fn words(a: &[&str]) -> Vec<String> {
    a.iter().map(|x| x.to_string()).collect()
}

/// The Job and its pods as kubectl says now (no pod's log is read).
#[derive(Debug, Clone)]
pub struct JobState {
    job: Job,
    pub completions: u32,
    /// Why the Job controller gave up on the Job, when it did: its unfinished indexes
    /// will stay so.
    pub failed: Option<String>,
    /// Each index's pods, the one that decides first: succeeded, then running, pending,
    /// failed, the latest of a phase first (a retried index has several).
    by_index: BTreeMap<u32, Vec<Pod>>,
}

/// Where the indexes of a Job stand, without reading any log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub succeeded: u32,
    pub failed: u32,
    pub running: u32,
    /// Pending pods that may yet start (scheduling, pulling, creating).
    pub pending: u32,
    /// No pod yet (the Job has not started it).
    pub missing: u32,
    /// Pending pods that will not start by themselves: (index, pod, why).
    pub stuck: Vec<(u32, String, String)>,
}

impl Progress {
    /// Nothing is left that may still finish: every index succeeded, failed or is stuck
    /// (or the Job controller gave up).
    pub fn settled(&self) -> bool {
        self.running + self.pending + self.missing == 0
    }
}

/// The Job `name` and its pods, through kubectl (`get job`, `get pods -l job-name=NAME`).
pub fn job_state(kubectl: &dyn Kubectl, name: &str) -> Result<JobState, CollectError> {
    let job: Job = get_json(kubectl, &words(&["get", "job", "-o", "json", "--", name]))?;
    let completions = completions_of(&job)?;
    let selector = format!("job-name={name}");
    let pods = parse_pods(&kubectl.run(
        &words(&["get", "pods", "-l", &selector, "-o", "json"]),
        MAX_ANSWER_BYTES,
    )?)?;
    let mut by_index: BTreeMap<u32, Vec<Pod>> = BTreeMap::new();
    for p in pods.into_iter().filter(|p| p.index < completions) {
        by_index.entry(p.index).or_default().push(p);
    }
    for pods in by_index.values_mut() {
        pods.sort_by(|a, b| a.phase.cmp(&b.phase).then(b.created.cmp(&a.created)));
    }
    Ok(JobState {
        failed: job_failed(&job),
        job,
        completions,
        by_index,
    })
}

impl JobState {
    fn pods(&self, index: u32) -> &[Pod] {
        self.by_index.get(&index).map_or(&[], Vec::as_slice)
    }

    /// Where each index stands.
    pub fn progress(&self) -> Progress {
        let mut p = Progress::default();
        for index in 0..self.completions {
            match self.pods(index).first() {
                None => p.missing += 1,
                Some(pod) => match (pod.phase, &pod.waiting) {
                    (Phase::Succeeded, _) => p.succeeded += 1,
                    (Phase::Running, _) => p.running += 1,
                    (Phase::Pending, Some(w)) if w.stuck => {
                        p.stuck.push((index, pod.name.clone(), w.said.clone()))
                    }
                    (Phase::Pending, _) => p.pending += 1,
                    _ => p.failed += 1,
                },
            }
        }
        if self.failed.is_some() {
            // The Job controller starts nothing more.
            p.failed += p.running + p.pending + p.missing;
            (p.running, p.pending, p.missing) = (0, 0, 0);
        }
        p
    }
}

/// Gathers the Job `name`'s records into `out` (one `NAME-INDEX.json` per index). `name`
/// must be a DNS-1123 label (the caller checks it).
pub fn collect(kubectl: &dyn Kubectl, name: &str, out: &Path) -> Result<Collected, CollectError> {
    let state = job_state(kubectl, name)?;
    let config_map: ConfigMap = get_json(
        kubectl,
        &words(&[
            "get",
            "configmap",
            "-o",
            "json",
            "--",
            &format!("{name}-plan"),
        ]),
    )?;
    let plan = job_plan(name, &state.job, &config_map)?;
    let completions = state.completions;
    let mut indexes = Vec::new();
    let mut candidates = Vec::new();
    for index in 0..completions {
        let pods = state.pods(index);
        let outcome = match pods.first() {
            None => IndexOutcome::Missing,
            Some(p) if p.phase == Phase::Succeeded => match pod_record(kubectl, p, &plan) {
                Ok(c) => {
                    candidates.push(c);
                    continue;
                }
                Err(o) => o,
            },
            Some(p) if matches!(p.phase, Phase::Running | Phase::Pending) => {
                IndexOutcome::Unfinished {
                    pod: p.name.clone(),
                    phase: p.phase,
                    waiting: p.waiting.clone(),
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
    // One plan fingerprint for the Job: the one most records carry.
    let (leaders, top) = most_carried(&candidates);
    let job_fingerprint = match &leaders[..] {
        [one] => Some(one.clone()),
        _ => None,
    };
    if !candidates.is_empty() {
        std::fs::create_dir_all(out).map_err(|source| CollectError::Write {
            path: out.to_path_buf(),
            source,
        })?;
    }
    for c in candidates {
        let short = crate::store::import::short;
        let outcome = match &job_fingerprint {
            Some(f) if *f == c.fingerprint => {
                let file = out.join(format!("{name}-{}.json", c.index));
                let text = serde_json::to_string_pretty(&c.record)
                    .map_err(|e| answer_err("kubectl logs", e.to_string()))?;
                std::fs::write(&file, text + "\n").map_err(|source| CollectError::Write {
                    path: file.clone(),
                    source,
                })?;
                IndexOutcome::Collected {
                    pod: c.pod,
                    file,
                    run_status: c.run_status,
                }
            }
            Some(f) => IndexOutcome::Refused {
                pod: c.pod,
                why: format!(
                    "its plan fingerprint {} differs from the Job's, {} (carried by {top} of its \
                     records): its variants' settings or its limits are not the Job's",
                    short(&c.fingerprint),
                    short(f)
                ),
            },
            None => IndexOutcome::Refused {
                pod: c.pod,
                why: format!(
                    "the Job's records carry {} plan fingerprints, {top} record(s) each: none \
                     can be taken as the Job's (its is {})",
                    leaders.len(),
                    short(&c.fingerprint)
                ),
            },
        };
        indexes.push((c.index, outcome));
    }
    indexes.sort_by_key(|(i, _)| *i);
    Ok(Collected {
        completions,
        indexes,
    })
}

/// The plan fingerprints the most of `candidates` carry, and how many carry each.
fn most_carried(candidates: &[Candidate]) -> (Vec<String>, usize) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for c in candidates {
        *counts.entry(c.fingerprint.as_str()).or_default() += 1;
    }
    let top = counts.values().copied().max().unwrap_or(0);
    let leaders = counts
        .iter()
        .filter(|(_, n)| **n == top)
        .map(|(f, _)| f.to_string())
        .collect();
    (leaders, top)
}

/// The checked record of a succeeded pod, or what became of its index instead.
fn pod_record(kubectl: &dyn Kubectl, p: &Pod, plan: &JobPlan) -> Result<Candidate, IndexOutcome> {
    let refused = |why: String| IndexOutcome::Refused {
        pod: p.name.clone(),
        why,
    };
    if let Err(why) = super::dns1123_subdomain(&p.name) {
        return Err(refused(format!(
            "its name is not a Kubernetes name ({why}); it was not passed to kubectl"
        )));
    }
    let args = [
        "logs".to_string(),
        "-c".into(),
        "workload".into(),
        format!("--limit-bytes={}", MAX_LOG_BYTES + 1),
        "--".into(),
        p.name.clone(),
    ];
    let log = match kubectl.run(&args, MAX_LOG_BYTES) {
        Ok(log) => log,
        Err(CollectError::TooBig { .. }) => {
            return Err(refused(format!(
                "its log is over {MAX_LOG_BYTES} bytes (64 MiB), the most memtrial reads of a pod's log"
            )))
        }
        Err(e) => {
            return Err(IndexOutcome::LogFailed {
                pod: p.name.clone(),
                said: e.to_string(),
            })
        }
    };
    let record = match super::find_record(&log) {
        Ok(r) => r,
        Err(e @ super::RecordError::Missing) | Err(e @ super::RecordError::Json(_)) => {
            return Err(IndexOutcome::NoRecord {
                pod: p.name.clone(),
                why: e.to_string(),
            })
        }
        Err(e) => return Err(refused(e.to_string())),
    };
    let (fingerprint, run_status) =
        check_record(&record, plan, p).map_err(|e| refused(e.to_string()))?;
    Ok(Candidate {
        index: p.index,
        pod: p.name.clone(),
        record,
        fingerprint,
        run_status,
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
        fn run(&self, args: &[String], limit: usize) -> Result<String, CollectError> {
            self.asked.borrow_mut().push(args.to_vec());
            let answer = match args.first().map(String::as_str) {
                Some("get") if args[1] == "job" => Ok(self.job.clone()),
                Some("get") if args[1] == "configmap" => Ok(serde_json::json!({"data": {
                    "plan.toml": "command = \"x\"\nvariants = [\"glibc\", \"jemalloc\"]\nruns = 3\nseed = 5\n"
                }})
                .to_string()),
                Some("get") => Ok(self.pods.clone()),
                Some("logs") => self
                    .logs
                    .get(args.last().expect("a pod"))
                    .cloned()
                    .ok_or(CollectError::Kubectl {
                        command: "logs".into(),
                        status: "exit 1".into(),
                        stderr: "not found".into(),
                    }),
                _ => Err(answer_err("?", "unexpected")),
            }?;
            if answer.len() > limit {
                return Err(CollectError::TooBig {
                    command: args.join(" "),
                    limit,
                });
            }
            Ok(answer)
        }
    }

    fn pod(name: &str, index: u32, phase: &str, created: &str) -> Value {
        serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created,
                         "annotations": {INDEX_KEY: index.to_string()}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "workload", "state": {"terminated": {"reason": "Error", "exitCode": 2}}}]}
        })
    }

    /// The Fake's ConfigMap plan: command x, glibc and jemalloc, 3 runs, seed 5.
    fn plan() -> Plan {
        let mut p = crate::report::fixture::experiment().plan;
        p.command = vec!["x".into()];
        p.variants.remove(1);
        p.runs = 3;
        p.seed = 5;
        p
    }

    /// The variant slot `index` of the Fake's plan runs.
    fn slot_variant(index: u32) -> String {
        let s = crate::schedule::schedule(2, 0, 3, 5)[index as usize];
        ["glibc", "jemalloc"][s.variant].to_string()
    }

    /// A record as the pod of `index` prints it, with `edit` applied.
    fn record(index: u32, edit: impl FnOnce(&mut Value)) -> String {
        let mut r = serde_json::json!({
            "experiment": {"plan": plan(), "host": {"hostname": "t"}, "hosts": [{"hostname": "t"}]},
            "notes": [format!("in-container: slot {index} of 6 (variant …)"), "in-container: node n1"],
            "variants": [{"name": slot_variant(index), "runs": [{"status": "ok"}]}]
        });
        edit(&mut r);
        serde_json::to_string(&r).unwrap()
    }

    fn fake(completions: u32, pods: Vec<Value>, logs: Vec<(&str, String)>) -> Fake {
        Fake {
            job: serde_json::json!({"spec": {"completionMode": "Indexed", "completions": completions}})
                .to_string(),
            pods: serde_json::json!({ "items": pods }).to_string(),
            logs: logs.into_iter().map(|(p, l)| (p.to_string(), l)).collect(),
            asked: RefCell::new(Vec::new()),
        }
    }

    #[test]
    fn each_index_gets_its_succeeded_pods_record_and_the_rest_is_said() {
        let pods = vec![
            pod("t-0-a", 0, "Failed", "2026-01-01T00:00:00Z"),
            pod("t-0-b", 0, "Succeeded", "2026-01-01T00:01:00Z"),
            pod("t-1-a", 1, "Failed", "2026-01-01T00:00:00Z"),
            pod("t-1-b", 1, "Failed", "2026-01-01T00:02:00Z"),
            pod("t-2-a", 2, "Running", "2026-01-01T00:00:00Z"),
            pod("t-4-a", 4, "Succeeded", "2026-01-01T00:00:00Z"),
            serde_json::json!({"metadata": {"name": "stray"}, "status": {"phase": "Succeeded"}}),
        ];
        let rec = record(0, |_| {});
        let fake = fake(
            5,
            pods,
            vec![
                ("t-0-b", format!("note: x\nmemtrial-record: {rec}\n")),
                ("t-4-a", "memtrial: error: no record\n".into()),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let c = collect(&fake, "t", dir.path()).unwrap();
        assert_eq!(c.completions, 5);
        assert!(!c.complete());
        assert_eq!(
            c.indexes[0].1,
            IndexOutcome::Collected {
                pod: "t-0-b".into(),
                file: dir.path().join("t-0.json"),
                run_status: format!("{} ok", slot_variant(0))
            }
        );
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("t-0.json")).unwrap())
                .unwrap();
        assert_eq!(saved, serde_json::from_str::<Value>(&rec).unwrap());
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
        // Names reach kubectl after `--` only; the pods are found by the Job's label; logs
        // of the workload container, bounded.
        let asked = fake.asked.borrow();
        assert_eq!(asked[0], ["get", "job", "-o", "json", "--", "t"]);
        assert_eq!(asked[1], ["get", "pods", "-l", "job-name=t", "-o", "json"]);
        assert_eq!(asked[2], ["get", "configmap", "-o", "json", "--", "t-plan"]);
        assert_eq!(
            asked[3],
            [
                "logs",
                "-c",
                "workload",
                &format!("--limit-bytes={}", MAX_LOG_BYTES + 1),
                "--",
                "t-0-b"
            ]
        );
    }

    #[test]
    fn one_bad_pod_does_not_stop_the_others_and_forgeries_are_refused() {
        let at = "2026-01-01T00:00:00Z";
        let line = |r: String| format!("memtrial-record: {r}\n");
        let mut hostile = pod("--kubeconfig=-evil", 5, "Succeeded", at);
        hostile["metadata"]["annotations"][INDEX_KEY] = "5".into();
        let pods = vec![
            pod("t-0-x", 0, "Succeeded", at),
            pod("t-1-x", 1, "Succeeded", at),
            pod("t-2-x", 2, "Succeeded", at),
            pod("t-3-x", 3, "Succeeded", at),
            pod("t-4-x", 4, "Succeeded", at),
            hostile,
        ];
        let fake = fake(
            6,
            pods,
            vec![
                ("t-0-x", line(record(0, |_| {}))),
                // A forged later line with another host.
                (
                    "t-1-x",
                    line(record(1, |_| {}))
                        + &line(record(1, |r| {
                            r["experiment"]["host"]["hostname"] = "evil".into()
                        })),
                ),
                // A record of another plan (another seed).
                (
                    "t-2-x",
                    line(record(2, |r| r["experiment"]["plan"]["seed"] = 6.into())),
                ),
                // t-3-x has no log: kubectl fails for it.
                ("t-4-x", line(record(4, |_| {}))),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let c = collect(&fake, "t", dir.path()).unwrap();
        let o = |i: usize| c.indexes[i].1.clone();
        assert!(matches!(o(0), IndexOutcome::Collected { .. }), "{:?}", o(0));
        let why = |i: usize| match o(i) {
            IndexOutcome::Refused { why, .. } => why,
            other => panic!("index {i}: {other:?}"),
        };
        assert!(why(1).contains("2 lines start with"), "{}", why(1));
        assert!(why(2).contains("not a record of the Job's plan") && why(2).contains("seed is 6"));
        assert!(
            matches!(o(3), IndexOutcome::LogFailed { ref said, .. } if said.contains("not found")),
            "{:?}",
            o(3)
        );
        assert!(matches!(o(4), IndexOutcome::Collected { .. }), "{:?}", o(4));
        assert!(why(5).contains("not a Kubernetes name"), "{}", why(5));
        assert_eq!(c.files().len(), 2);
        let asked = fake.asked.borrow();
        assert!(!asked.iter().flatten().any(|a| a.contains("kubeconfig")));
    }

    #[test]
    fn the_fingerprint_most_records_carry_is_the_jobs() {
        let at = "2026-01-01T00:00:00Z";
        let line = |r: String| format!("memtrial-record: {r}\n");
        let fake = fake(
            3,
            vec![
                pod("t-0-x", 0, "Succeeded", at),
                pod("t-1-x", 1, "Succeeded", at),
                pod("t-2-x", 2, "Succeeded", at),
            ],
            vec![
                ("t-0-x", line(record(0, |_| {}))),
                ("t-1-x", line(record(1, |_| {}))),
                (
                    "t-2-x",
                    line(record(2, |r| {
                        r["experiment"]["plan"]["limits"]["memory_max"] = 1.into()
                    })),
                ),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let c = collect(&fake, "t", dir.path()).unwrap();
        assert_eq!(c.files().len(), 2);
        match &c.indexes[2].1 {
            IndexOutcome::Refused { why, .. } => {
                assert!(why.contains("differs from the Job's"), "{why}")
            }
            o => panic!("{o:?}"),
        }
        // One record of each of two fingerprints: a tie, neither is taken as the Job's.
        let tie = super::tests::fake(
            2,
            vec![
                pod("t-0-x", 0, "Succeeded", at),
                pod("t-1-x", 1, "Succeeded", at),
            ],
            vec![
                ("t-0-x", line(record(0, |_| {}))),
                (
                    "t-1-x",
                    line(record(1, |r| {
                        r["experiment"]["plan"]["variants"][0]["env"] =
                            serde_json::json!([["MALLOC_ARENA_MAX", "1"]])
                    })),
                ),
            ],
        );
        let c2 = collect(&tie, "t", dir.path()).unwrap();
        assert!(c2.files().is_empty());
        assert!(
            matches!(&c2.indexes[0].1, IndexOutcome::Refused { why, .. } if why.contains("2 plan fingerprints"))
        );
        // The wrong node or slot is refused too.
        let p = |node: &str, index: u32| Pod {
            name: "t-0-x".into(),
            index,
            phase: Phase::Succeeded,
            created: String::new(),
            reason: None,
            node: Some(node.into()),
            waiting: None,
        };
        let job = job_plan(
            "t",
            &Job::default(),
            &serde_json::from_str(
                &fake
                    .run(&["get".into(), "configmap".into()], 1 << 20)
                    .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        let r: Value = serde_json::from_str(&record(0, |_| {})).unwrap();
        let (_, status) = check_record(&r, &job, &p("n1", 0)).unwrap();
        assert_eq!(status, format!("{} ok", slot_variant(0)));
        let refused = |r: &Value, node, index| check_record(r, &job, &p(node, index)).unwrap_err();
        assert!(refused(&r, "n2", 0)
            .to_string()
            .contains("ran on node \"n2\""));
        assert!(refused(&r, "n1", 1).to_string().contains("slot 1"));
        // A record of another shape, another host, or more than the slot's one run.
        let edited =
            |edit: fn(&mut Value)| -> Value { serde_json::from_str(&record(0, edit)).unwrap() };
        let no_plan = edited(|r| drop(r["experiment"].as_object_mut().unwrap().remove("plan")));
        assert!(
            matches!(refused(&no_plan, "n1", 0), RecordRefused::Shape(m) if m.contains("plan"))
        );
        let no_status = edited(|r| {
            drop(
                r["variants"][0]["runs"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("status"),
            )
        });
        assert!(check_record(&no_status, &job, &p("n1", 0))
            .unwrap()
            .1
            .ends_with(" ?"));
        let unnamed = edited(|r| {
            drop(
                r["experiment"]["hosts"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("hostname"),
            )
        });
        assert_eq!(
            refused(&unnamed, "n1", 0).to_string(),
            "its host is not named; the Job's pods record the Job's name, \"t\" (MEMTRIAL_HOST)"
        );
        let two = edited(|r| {
            let run = r["variants"][0]["runs"][0].clone();
            r["variants"][0]["runs"].as_array_mut().unwrap().push(run)
        });
        assert!(matches!(
            refused(&two, "n1", 0),
            RecordRefused::OtherRuns { index: 0, .. }
        ));
    }

    #[test]
    fn a_job_of_too_many_completions_and_a_log_too_big_are_refused() {
        // Beyond Kubernetes' own int32: not a Job's answer.
        let e =
            parse_completions(r#"{"spec":{"completionMode":"Indexed","completions":4294967295}}"#)
                .unwrap_err()
                .to_string();
        assert!(e.contains("4294967295"), "{e}");
        let e = parse_completions(r#"{"spec":{"completionMode":"Indexed","completions":100001}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("100001") && e.contains("at most 100000"), "{e}");
        let big = "x".repeat(MAX_LOG_BYTES + 1);
        let fake = fake(
            1,
            vec![pod("t-0-x", 0, "Succeeded", "2026-01-01T00:00:00Z")],
            vec![("t-0-x", big)],
        );
        let dir = tempfile::tempdir().unwrap();
        let c = collect(&fake, "t", dir.path()).unwrap();
        match &c.indexes[0].1 {
            IndexOutcome::Refused { why, .. } => assert!(why.contains("64 MiB"), "{why}"),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn the_real_kubectl_is_read_within_its_limit() {
        let k = KubectlProgram {
            program: "/bin/sh".into(),
            namespace: None,
        };
        let run = |script: &str, limit| k.run(&["-c".to_string(), script.to_string()], limit);
        assert_eq!(run("printf abc", 3).unwrap(), "abc");
        // More than the limit: refused, and kubectl (here: an endless writer) is stopped.
        assert!(matches!(
            run("cat /dev/zero", 1 << 20),
            Err(CollectError::TooBig { limit, .. }) if limit == 1 << 20
        ));
        // Endless standard error is drained, and its first bytes kept.
        match run("head -c 1000000 /dev/zero | tr '\\0' e >&2; exit 3", 10) {
            Err(CollectError::Kubectl { stderr, .. }) => {
                assert_eq!(stderr.len(), MAX_STDERR_BYTES)
            }
            o => panic!("{o:?}"),
        }
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

    /// A pending pod says why it waits, init containers first; image and container errors
    /// are what waiting does not cure; merely starting is no reason.
    #[test]
    fn a_pending_pod_says_why_and_whether_it_will_start() {
        let pending = |init: Value, main: Value, conditions: Value| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "t-0-x", "annotations": {INDEX_KEY: "0"}},
                "status": {"phase": "Pending", "initContainerStatuses": [init],
                           "containerStatuses": [main], "conditions": conditions}
            })
        };
        let waiting = |name: &str, reason: &str, message: &str| {
            serde_json::json!({"name": name, "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}})
        };
        let list = |p: Value| serde_json::json!({"kind": "List", "items": [p]}).to_string();
        let pods = parse_pods(&list(pending(
            waiting(
                "memtrial-install",
                "ErrImagePull",
                "failed to pull \"x\": not found",
            ),
            waiting("workload", "PodInitializing", ""),
            serde_json::json!([]),
        )))
        .unwrap();
        let w = pods[0].waiting.clone().unwrap();
        assert_eq!(
            w.said,
            "container memtrial-install: ErrImagePull: failed to pull \"x\": not found"
        );
        assert!(w.stuck);
        // Starting: no reason; not scheduled: the scheduler's words, not stuck.
        let pods = parse_pods(&list(pending(
            waiting("memtrial-install", "PodInitializing", ""),
            waiting("workload", "ContainerCreating", ""),
            serde_json::json!([{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient cpu."}]),
        )))
        .unwrap();
        let w = pods[0].waiting.clone().unwrap();
        assert_eq!(
            w.said,
            "not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
        );
        assert!(!w.stuck);
        let pods = parse_pods(&list(pending(
            waiting("memtrial-install", "PodInitializing", ""),
            waiting("workload", "ContainerCreating", ""),
            serde_json::json!([]),
        )))
        .unwrap();
        assert_eq!(pods[0].waiting, None);
        // A running pod's waiting state is not read (a restarting container is no reason).
        let mut running = pending(
            waiting("memtrial-install", "ErrImagePull", ""),
            waiting("workload", "ErrImagePull", ""),
            serde_json::json!([]),
        );
        running["status"]["phase"] = "Running".into();
        assert_eq!(parse_pods(&list(running)).unwrap()[0].waiting, None);
    }

    #[test]
    fn progress_counts_each_index_once_and_a_failed_job_settles() {
        let at = |m: u32| format!("2026-01-01T00:0{m}:00Z");
        let mut stuck = pod("t-2-a", 2, "Pending", &at(1));
        stuck["status"]["containerStatuses"][0]["state"] =
            serde_json::json!({"waiting": {"reason": "ImagePullBackOff"}});
        let pods = vec![
            pod("t-0-a", 0, "Failed", &at(0)),
            pod("t-0-b", 0, "Succeeded", &at(1)),
            pod("t-1-a", 1, "Running", &at(0)),
            stuck,
            pod("t-3-a", 3, "Failed", &at(0)),
        ];
        let f = fake(5, pods, vec![]);
        let state = job_state(&f, "t").unwrap();
        let p = state.progress();
        assert_eq!(
            (p.succeeded, p.running, p.pending, p.failed, p.missing),
            (1, 1, 0, 1, 1)
        );
        assert_eq!(p.stuck.len(), 1);
        assert_eq!(p.stuck[0].0, 2);
        assert!(p.stuck[0].2.contains("ImagePullBackOff"), "{:?}", p.stuck);
        assert!(!p.settled());
        // The Job controller gave up: nothing more will run.
        let mut f = f;
        let mut job: Value = serde_json::from_str(&f.job).unwrap();
        job["status"] = serde_json::json!({"conditions": [{"type": "Failed", "status": "True",
            "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]});
        f.job = job.to_string();
        let state = job_state(&f, "t").unwrap();
        assert_eq!(
            state.failed.as_deref(),
            Some("BackoffLimitExceeded: Job has reached the specified backoff limit")
        );
        assert!(state.progress().settled());
    }

    /// Hostile text for pod logs and names: line breaks of every kind, controls, the
    /// record prefix, option-like words, JSON and YAML syntax, long runs.
    fn hostile() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let pieces = prop::sample::select(vec![
            "\n",
            "\r",
            "\r\n",
            "\u{2028}",
            "\u{85}",
            "\0",
            "\u{1b}[2J",
            "\u{202e}",
            "--",
            "--kubeconfig=/tmp/x",
            "-o",
            "memtrial-record: ",
            "memtrial-record: {}",
            "{",
            "}",
            "\"",
            "\\",
            "---",
            "# ",
            "t-0-x",
            "é",
            " ",
            "a",
        ]);
        (
            prop::collection::vec(pieces, 0..30),
            prop::collection::vec(any::<char>(), 0..40),
            0usize..4,
            0usize..200_000,
        )
            .prop_map(|(p, c, rep, long)| {
                let mut s: String = p.concat();
                s.extend(c);
                if rep == 3 {
                    s.push_str(&"x".repeat(long));
                }
                s
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 256, ..Default::default() })]

        #[test]
        fn a_record_is_found_only_on_exactly_one_record_line(log in hostile()) {
            let lines = log
                .lines()
                .filter(|l| l.trim_end_matches('\r').starts_with(crate::kube::RECORD_PREFIX))
                .count();
            match crate::kube::find_record(&log) {
                Ok(_) => proptest::prop_assert_eq!(lines, 1),
                Err(crate::kube::RecordError::Several(n)) => proptest::prop_assert_eq!(n, lines),
                Err(crate::kube::RecordError::Missing) => proptest::prop_assert_eq!(lines, 0),
                Err(_) => proptest::prop_assert_eq!(lines, 1),
            }
        }

        #[test]
        fn hostile_pod_logs_and_names_never_pass_unchecked(
            before in hostile(),
            after in hostile(),
            name in proptest::prop_oneof![proptest::strategy::Just("t-0-x".to_string()), hostile()],
            host in proptest::prop_oneof![proptest::strategy::Just("t".to_string()), hostile()],
            forged in 0usize..3,
            node in proptest::prop_oneof![proptest::strategy::Just("n1".to_string()), hostile()],
        ) {
            let at = "2026-01-01T00:00:00Z";
            let genuine = record(0, |_| {});
            let tampered = record(0, |r| {
                r["experiment"]["host"]["hostname"] = host.clone().into();
                r["notes"][1] = format!("in-container: node {node}").into();
            });
            let mut log = format!("{before}\nmemtrial-record: {tampered}\n{after}\n");
            for _ in 0..forged {
                log.push_str(&format!("memtrial-record: {genuine}\n"));
            }
            let fake = fake(1, vec![pod(&name, 0, "Succeeded", at)], vec![(name.as_str(), log.clone())]);
            let dir = tempfile::tempdir().unwrap();
            let c = collect(&fake, "t", dir.path()).unwrap();
            proptest::prop_assert_eq!(c.indexes.len(), 1);
            let asked = fake.asked.borrow();
            // A pod's name reaches kubectl only as a Kubernetes name, after `--`.
            for a in asked.iter().filter(|a| a[0] == "logs") {
                let pod = a.last().unwrap();
                proptest::prop_assert!(crate::kube::dns1123_subdomain(pod).is_ok(), "{pod:?}");
                proptest::prop_assert_eq!(&a[a.len() - 2], "--");
            }
            // Taken exactly when everything holds.
            let holds = crate::kube::dns1123_subdomain(&name).is_ok()
                && crate::kube::find_record(&log).ok() == serde_json::from_str::<Value>(&tampered).ok()
                && host == "t"
                && node == "n1";
            proptest::prop_assert_eq!(
                matches!(c.indexes[0].1, IndexOutcome::Collected { .. }),
                holds,
                "{:?}",
                c.indexes[0].1
            );
            if let IndexOutcome::Collected { file, .. } = &c.indexes[0].1 {
                proptest::prop_assert!(crate::kube::dns1123_subdomain(&name).is_ok());
                proptest::prop_assert_eq!(crate::kube::find_record(&log).ok(), serde_json::from_str::<Value>(&tampered).ok());
                proptest::prop_assert_eq!(host.as_str(), "t");
                proptest::prop_assert_eq!(node.as_str(), "n1");
                let saved: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
                proptest::prop_assert_eq!(saved, serde_json::from_str::<Value>(&tampered).unwrap());
            }
        }

        #[test]
        fn completions_are_taken_only_within_the_limit(c in proptest::prelude::any::<i128>(), f in proptest::prelude::any::<f64>()) {
            let json = format!(r#"{{"spec":{{"completionMode":"Indexed","completions":{c}}}}}"#);
            let got = parse_completions(&json);
            proptest::prop_assert_eq!(got.is_ok(), (0..=i128::from(MAX_SLOTS)).contains(&c), "{}", json);
            let json = format!(r#"{{"spec":{{"completionMode":"Indexed","completions":{f:?}}}}}"#);
            let _ = parse_completions(&json);
        }
    }
}
