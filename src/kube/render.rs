//! `memtrial kube`: the trial matrix as an Indexed Job, from typed Kubernetes API structs
//! (`k8s-openapi`, API v1.33), written as one YAML stream: the plan's ConfigMap, then the Job.
//!
//! Each index of the Job is one slot of the plan's schedule. An init container copies
//! memtrial and the catalog's allocator libraries from the memtrial image into an
//! `emptyDir`; the main container runs the user's image under the production pod's
//! requests and limits with `/memtrial/memtrial run --in-container --index
//! $(JOB_COMPLETION_INDEX)`.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PodSpec, PodTemplateSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::plan::{
    select_variants, settings, PlanInput, SelectionError, DEFAULT_BASELINE, DEFAULT_RUNS,
};
use crate::report::escape;

/// Where things are inside the pod.
pub(crate) const MEMTRIAL_DIR: &str = "/memtrial";
pub(crate) const PLAN_DIR: &str = "/etc/memtrial";
pub(crate) const PLAN_KEY: &str = "plan.toml";
/// Where the memtrial image keeps what the init container copies (`docker/Dockerfile`).
pub(crate) const IMAGE_DIR: &str = "/opt/memtrial";

/// The memtrial image used when `--memtrial-image` is not given: built from
/// `docker/Dockerfile` and tagged with this version.
pub fn default_memtrial_image() -> String {
    format!("memtrial/memtrial:{}", env!("CARGO_PKG_VERSION"))
}

/// The most slots (the Job's completions) memtrial renders, and `collect` reads.
pub(crate) const MAX_SLOTS: u32 = 100_000;

/// Errors rendering a Job: each names the flag or plan key, the value and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{flag} {value:?}: {reason}")]
    BadValue {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("{0}")]
    Plan(String),
    #[error("cannot write the YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
}

/// How the pods know the schedule's seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// The plan sets `seed`.
    InPlan(u64),
    /// The plan does not: memtrial chose this one, passed as `--seed` to every pod.
    Chosen(u64),
}

/// A container's `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    /// The value Kubernetes takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// What the Job is made from, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeJob {
    pub name: String,
    pub plan_text: String,
    /// The plan's variants, in the order the plan resolves them.
    pub variants: Vec<String>,
    /// Slots of the schedule: variants × (warm-up + measured runs); the Job's completions.
    pub slots: u32,
    pub seed: Seed,
    pub image: String,
    pub memtrial_image: String,
    /// CPUs, as a Kubernetes quantity (`8`, `500m`).
    pub cpu: Quantity,
    /// Memory, as a Kubernetes quantity in binary units (`8Gi`).
    pub memory: Quantity,
    pub parallelism: u32,
    /// Both containers' `imagePullPolicy`; `None` leaves Kubernetes' default.
    pub pull_policy: Option<PullPolicy>,
}

/// `--cpu`: CPUs (`8`, `0.5`) or millicores (`500m`), as `--cpus` allows: 0.01 to 4096.
pub fn cpu_quantity(text: &str) -> Result<Quantity, RenderError> {
    let bad = |reason: String| RenderError::BadValue {
        flag: "--cpu",
        value: text.to_string(),
        reason,
    };
    let t = text.trim();
    let cpus = match t.strip_suffix('m') {
        Some(milli) => milli.parse::<u32>().ok().map(|m| f64::from(m) / 1000.0),
        None => t.parse::<f64>().ok(),
    }
    .ok_or_else(|| bad("not a number of CPUs; use e.g. 8, 0.5 or 500m".into()))?;
    let (min, max) = settings::CPUS;
    if !(min..=max).contains(&cpus) {
        return Err(bad(format!(
            "must be from {} to {} CPUs (10m to 4096)",
            settings::show_real(min),
            settings::show_real(max)
        )));
    }
    let milli = (cpus * 1000.0).round() as u64;
    Ok(Quantity(if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }))
}

/// `--memory`: a size as memtrial reads sizes (binary: `8G` = `8Gi` = 8 GiB), 4M to 64T;
/// written in the largest binary unit that holds it exactly.
pub fn memory_quantity(text: &str) -> Result<Quantity, RenderError> {
    let bad = |reason: String| RenderError::BadValue {
        flag: "--memory",
        value: text.to_string(),
        reason,
    };
    let bytes = crate::units::parse_size(text).map_err(bad)?;
    let (min, max) = settings::MEMORY_LIMIT;
    if !(min..=max).contains(&bytes) {
        return Err(bad(
            "must be from 4Mi to 64Ti (a container cannot even start below 4Mi)".into(),
        ));
    }
    let units = [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    let q = units
        .iter()
        .find(|(_, shift)| bytes % (1u64 << shift) == 0)
        .map_or(bytes.to_string(), |(u, shift)| {
            format!("{}{u}", bytes >> shift)
        });
    Ok(Quantity(q))
}

/// The plan's variants and the number of slots of its schedule, from the plan file alone
/// (the variants must be named: the pods' catalog, not this machine's, resolves them).
pub fn plan_slots(input: &PlanInput) -> Result<(Vec<String>, u32), RenderError> {
    let plan_err = |m: String| RenderError::Plan(m);
    let Some(names) = &input.variants else {
        return Err(plan_err(
            "the plan does not name its variants: add e.g. variants = [\"glibc\", \"jemalloc\"] \
             (the Job's size is fixed here, and the pods' catalog, not this machine's, decides \
             what \"every available variant\" would be)"
                .into(),
        ));
    };
    // The names as `run --plan` checks them: the rule, not a catalog name, once.
    let custom = crate::plan::custom_variant_names(&input.custom)
        .map_err(|e| plan_err(format!("[[variant]]: {e}")))?;
    // The variants as `run` chooses them, so that each pod's index is the slot counted
    // here. A misspelt variant would fail every pod: it is caught here.
    let baseline = input.baseline.as_deref().unwrap_or(DEFAULT_BASELINE);
    let chosen: Vec<String> = select_variants(names, &custom, baseline)
        .map_err(|e| match e {
            SelectionError::Unknown(n) => {
                let mut names: Vec<&str> = crate::plan::catalog::CATALOG
                    .iter()
                    .map(|e| e.name)
                    .collect();
                names.extend(custom.iter().copied());
                plan_err(format!(
                    "the plan names the variant '{n}', which is neither in the catalog nor one \
                     of its [[variant]]s; known: {}",
                    names.join(", ")
                ))
            }
            SelectionError::Twice(n) => plan_err(format!(
                "the plan names the variant '{n}' twice; name each once"
            )),
            SelectionError::Empty => plan_err(
                "the plan's variants list is empty: name at least one, e.g. variants = \
                 [\"glibc\", \"jemalloc\"] (memtrial run refuses a plan that selects none)"
                    .into(),
            ),
        })?
        .names
        .into_iter()
        .map(String::from)
        .collect();
    let runs = settings::count("runs", input.runs.unwrap_or(DEFAULT_RUNS), settings::RUNS)
        .map_err(|e| plan_err(e.to_string()))?;
    let warmup = settings::count("warmup", input.warmup.unwrap_or(0), settings::WARMUP)
        .map_err(|e| plan_err(e.to_string()))?;
    let slots = u64::from(runs + warmup) * chosen.len() as u64;
    let slots = u32::try_from(slots)
        .ok()
        .filter(|s| *s <= MAX_SLOTS)
        .ok_or_else(|| {
            plan_err(format!(
                "the plan has {slots} slots ({} variants × {} runs); a Job of more than \
                 {MAX_SLOTS} completions is refused: use fewer runs",
                chosen.len(),
                runs + warmup
            ))
        })?;
    Ok((chosen, slots))
}

fn meta(name: &str, job: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels(job)),
        ..Default::default()
    }
}

fn labels(job: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "memtrial".to_string()),
        ("app.kubernetes.io/instance".to_string(), job.to_string()),
    ])
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The ConfigMap carrying the plan file.
pub(crate) fn config_map(k: &KubeJob) -> ConfigMap {
    ConfigMap {
        metadata: meta(&format!("{}-plan", k.name), &k.name),
        data: Some(BTreeMap::from([(
            PLAN_KEY.to_string(),
            k.plan_text.clone(),
        )])),
        ..Default::default()
    }
}

/// The production pod's CPU and memory, as both request and limit.
fn pod_resources(k: &KubeJob) -> ResourceRequirements {
    let both = || {
        BTreeMap::from([
            ("cpu".to_string(), k.cpu.clone()),
            ("memory".to_string(), k.memory.clone()),
        ])
    };
    ResourceRequirements {
        requests: Some(both()),
        limits: Some(both()),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// The init container: copies memtrial and the allocator libraries into the shared volume.
fn install_container(k: &KubeJob, resources: ResourceRequirements) -> Container {
    Container {
        name: "memtrial-install".into(),
        image: Some(k.memtrial_image.clone()),
        command: Some(vec![
            "cp".into(),
            "-R".into(),
            format!("{IMAGE_DIR}/."),
            format!("{MEMTRIAL_DIR}/"),
        ]),
        // The same as the workload's: the pod's QoS class stays the production pod's
        // (init containers run first, so they add nothing to the pod's requests).
        resources: Some(resources),
        volume_mounts: Some(vec![mount("memtrial", MEMTRIAL_DIR, false)]),
        image_pull_policy: k.pull_policy.map(|p| p.as_str().to_string()),
        ..Default::default()
    }
}

/// The workload's container: the user's image running `memtrial run --in-container` on
/// this pod's completion index.
fn workload_container(k: &KubeJob, resources: ResourceRequirements) -> Container {
    let mut args: Vec<String> = [
        "run",
        "--in-container",
        "--plan",
        &format!("{PLAN_DIR}/{PLAN_KEY}"),
        "--index",
        "$(JOB_COMPLETION_INDEX)",
        "--db",
        &format!("{MEMTRIAL_DIR}/memtrial.db"),
    ]
    .map(String::from)
    .to_vec();
    if let Seed::Chosen(s) = k.seed {
        args.extend(["--seed".to_string(), s.to_string()]);
    }
    Container {
        name: "workload".into(),
        image: Some(k.image.clone()),
        command: Some(vec![format!("{MEMTRIAL_DIR}/memtrial")]),
        args: Some(args),
        env: Some(vec![
            // Every pod of the Job is one host of the experiment.
            env("MEMTRIAL_HOST", &k.name),
            EnvVar {
                name: super::NODE_ENV.into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "spec.nodeName".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            env(super::LIB_DIR_ENV, &format!("{MEMTRIAL_DIR}/lib")),
        ]),
        resources: Some(resources),
        volume_mounts: Some(vec![
            mount("memtrial", MEMTRIAL_DIR, false),
            mount("plan", PLAN_DIR, true),
        ]),
        image_pull_policy: k.pull_policy.map(|p| p.as_str().to_string()),
        ..Default::default()
    }
}

/// The shared volume memtrial is copied into, and the plan's ConfigMap.
fn volumes(k: &KubeJob) -> Vec<Volume> {
    vec![
        Volume {
            name: "memtrial".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "plan".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: format!("{}-plan", k.name),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]
}

/// The Indexed Job.
pub fn job(k: &KubeJob) -> Job {
    let resources = pod_resources(k);
    let install = install_container(k, resources.clone());
    let workload = workload_container(k, resources);
    let completions = i32::try_from(k.slots).unwrap_or(i32::MAX);
    let parallelism = i32::try_from(k.parallelism.min(k.slots)).unwrap_or(i32::MAX);
    Job {
        metadata: meta(&k.name, &k.name),
        spec: Some(JobSpec {
            completion_mode: Some("Indexed".into()),
            completions: Some(completions),
            parallelism: Some(parallelism),
            // One more try for a slot whose pod failed (memtrial exits 0 whenever it
            // recorded the run, even a failed one; non-zero means it could not, or it was
            // interrupted); at most as many failed pods in all as there are slots.
            backoff_limit_per_index: Some(1),
            backoff_limit: Some(completions),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&k.name)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    init_containers: Some(vec![install]),
                    containers: vec![workload],
                    volumes: Some(volumes(k)),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Kubernetes' limit on a ConfigMap's data: the bytes of its keys and values together.
pub(crate) const CONFIG_MAP_MAX_BYTES: usize = 1 << 20;

/// The YAML stream: a comment, the ConfigMap, the Job. A plan the ConfigMap cannot carry
/// (over [`CONFIG_MAP_MAX_BYTES`]) is refused: Kubernetes would refuse the ConfigMap.
pub fn render(k: &KubeJob) -> Result<String, RenderError> {
    let size = PLAN_KEY.len() + k.plan_text.len();
    if size > CONFIG_MAP_MAX_BYTES {
        return Err(RenderError::Plan(format!(
            "the plan makes a ConfigMap of {size} bytes ({PLAN_KEY} and the plan's text); \
             Kubernetes refuses a ConfigMap over {CONFIG_MAP_MAX_BYTES} bytes (1 MiB): make \
             the plan smaller"
        )));
    }
    let seed = match k.seed {
        Seed::InPlan(s) => format!("seed {s} (from the plan)"),
        Seed::Chosen(s) => format!("seed {s} (chosen now; the plan has none)"),
    };
    // The comment lines are the only text not written by the serializer: each is escaped
    // for a YAML comment (its names follow the plan's and Kubernetes' rules already).
    let comment = [
        format!(
            "memtrial kube: Job {}, {} slot(s): {}; {seed}.",
            k.name,
            k.slots,
            k.variants.join(", ")
        ),
        "kubectl apply -f THIS".to_string(),
        format!("memtrial kube collect {} --wait 24h", k.name),
    ]
    .iter()
    .map(|l| format!("# {}\n", escape::yaml_comment(l)))
    .collect::<String>();
    Ok(format!(
        "{comment}---\n{cm}---\n{job}",
        cm = serde_yaml_ng::to_string(&config_map(k))?,
        job = serde_yaml_ng::to_string(&job(k))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::parse_plan_text;

    #[test]
    fn cpu_quantities() {
        assert_eq!(cpu_quantity("8").unwrap().0, "8");
        assert_eq!(cpu_quantity("0.5").unwrap().0, "500m");
        assert_eq!(cpu_quantity("250m").unwrap().0, "250m");
        assert_eq!(cpu_quantity("2000m").unwrap().0, "2");
        assert_eq!(cpu_quantity("1.25").unwrap().0, "1250m");
        for bad in ["0", "-1", "5000", "x", "", "m", "1.5m", "NaN", "inf", "9m"] {
            let e = cpu_quantity(bad).unwrap_err().to_string();
            assert!(e.starts_with("--cpu "), "{bad}: {e}");
        }
    }

    #[test]
    fn memory_quantities() {
        assert_eq!(memory_quantity("8Gi").unwrap().0, "8Gi");
        assert_eq!(memory_quantity("8G").unwrap().0, "8Gi");
        assert_eq!(memory_quantity("512M").unwrap().0, "512Mi");
        assert_eq!(memory_quantity("1536Mi").unwrap().0, "1536Mi");
        assert_eq!(memory_quantity("1.5G").unwrap().0, "1536Mi");
        assert_eq!(memory_quantity("4194305").unwrap().0, "4194305");
        for bad in ["8Q", "1M", "100T", "", "x"] {
            let e = memory_quantity(bad).unwrap_err().to_string();
            assert!(e.starts_with("--memory "), "{bad}: {e}");
        }
    }

    /// `kube` sizes the Job from the plan alone; each pod builds the plan with `run`'s
    /// builder and runs the slot at its index: both must choose the same variants, in the
    /// same order (custom specs with '=' in their settings included).
    #[test]
    fn slots_name_the_variants_run_builds() {
        use crate::plan::catalog::{Distro, LibAllocator, LibraryLocator};
        use crate::plan::{build_plan, PlanContext};
        // Every catalog library "installed": the pods' image has them all.
        let libs = tempfile::tempdir().unwrap();
        for lib in [
            LibAllocator::Jemalloc,
            LibAllocator::Tcmalloc,
            LibAllocator::Mimalloc,
        ] {
            for soname in lib.sonames() {
                std::fs::write(libs.path().join(soname), b"").unwrap();
            }
        }
        let locator = LibraryLocator::in_dirs(vec![libs.path().to_path_buf()]);
        let ctx = PlanContext {
            locator: &locator,
            distro: Distro::Debian,
            path_var: "/usr/bin:/bin".into(),
            workdir: std::env::temp_dir(),
            online_cpus: 2,
        };
        let plans = [
            "variants = [\"jemalloc\", \"arena2\"]\n".to_string(),
            "variants = [\"arena2\", \"glibc\"]\nbaseline = \"arena2\"\n".to_string(),
            "variants = [\"mimalloc\"]\nbaseline = \"tcmalloc\"\n".to_string(),
            "variants = [\" tcmalloc \", \"\", \"big\"]\n\
             [[variant]]\nname = \"big\"\nspec = \"MALLOC_ARENA_MAX=64 preload:jemalloc\"\n\
             [[variant]]\nname = \"small\"\nenv = { MALLOC_ARENA_MAX = \"1\" }\n"
                .to_string(),
            "variants = []\nbaseline = \"c\"\n[[variant]]\nname = \"a.b\"\nspec = \"X=y=z\"\n\
             [[variant]]\nname = \"c\"\nspec = \"Y==\"\n"
                .to_string(),
            "variants = [\"big\", \"jemalloc\"]\n[[variant]]\nname = \"big\"\n\
             env = { MALLOC_CONF = \"narenas:2,dirty_decay_ms=0\" }\n"
                .to_string(),
        ];
        for plan in &plans {
            let text = format!("command = \"true\"\nruns = 2\n{plan}");
            let input = parse_plan_text(&text).unwrap();
            let (slots, _) = plan_slots(&input).unwrap_or_else(|e| panic!("{text}: {e}"));
            let built = build_plan(input, &ctx).unwrap_or_else(|e| panic!("{text}: {e}"));
            let run: Vec<&str> = built
                .plan
                .variants
                .iter()
                .map(|v| v.name.as_str())
                .collect();
            assert_eq!(slots, run, "{text}");
        }
        // And they refuse the same lists.
        for plan in [
            "variants = [\"glibc\", \"glibc\"]\n",
            "variants = [\"jemaloc\"]\n",
            "variants = [\"glibc\"]\nbaseline = \"nope\"\n",
            "variants = [\"\"]\n",
        ] {
            let text = format!("command = \"true\"\n{plan}");
            let input = parse_plan_text(&text).unwrap();
            assert!(plan_slots(&input).is_err(), "{text}");
            assert!(build_plan(input, &ctx).is_err(), "{text}");
        }
    }

    #[test]
    fn slots_count_every_variant_and_the_baseline() {
        let i = parse_plan_text(
            "command = \"x\"\nvariants = [\"jemalloc\", \"arena2\"]\nruns = 3\nwarmup = 1\n\
             [[variant]]\nname = \"big\"\nenv = { MALLOC_ARENA_MAX = \"64\" }\n",
        )
        .unwrap();
        let (v, n) = plan_slots(&i).unwrap();
        assert_eq!(v, ["glibc", "jemalloc", "arena2", "big"]);
        assert_eq!(n, 16);
        let none = parse_plan_text("command = \"x\"\n").unwrap();
        assert!(plan_slots(&none)
            .unwrap_err()
            .to_string()
            .contains("does not name its variants"));
        let twice =
            parse_plan_text("command = \"x\"\nvariants = [\"glibc\", \"glibc\"]\n").unwrap();
        assert!(plan_slots(&twice)
            .unwrap_err()
            .to_string()
            .contains("twice"));
        let typo = parse_plan_text("command = \"x\"\nvariants = [\"jemaloc\"]\n").unwrap();
        let e = plan_slots(&typo).unwrap_err().to_string();
        assert!(e.contains("'jemaloc'") && e.contains("known: glibc"), "{e}");
        let zero = parse_plan_text("command = \"x\"\nvariants = [\"glibc\"]\nruns = 0\n").unwrap();
        assert!(plan_slots(&zero).is_err());
    }
}
