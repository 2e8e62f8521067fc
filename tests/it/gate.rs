//! `memtrial gate` and `--until-decided`: the exact commands of the CI examples
//! (examples/ci/) on two real builds of their app — a planted 20% regression fails with
//! exit 3, identical code and a 2% change with a 5% tolerance pass — and the gate's other
//! paths (undecided, a stored record, host facts, the expected recommendation, the rule
//! that adds runs) on a C fixture whose peak follows a known cycle. The repetition that
//! bounds the false-alarm and miss rates is `benches/gate_rates.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::*;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/ci")
        .join(name)
}

fn yaml(name: &str) -> serde_yaml_ng::Value {
    let text = std::fs::read_to_string(example(name)).expect("example");
    serde_yaml_ng::from_str(&text).expect("YAML")
}

/// The `run:` scripts of a GitHub workflow's job, in order, but the one installing
/// memtrial (the test's own binary is on PATH instead).
fn github_scripts(name: &str, job: &str) -> Vec<String> {
    let doc = yaml(name);
    doc["jobs"][job]["steps"]
        .as_sequence()
        .expect("steps")
        .iter()
        .filter(|s| !s["name"].as_str().unwrap_or("").contains("memtrial"))
        .filter_map(|s| s["run"].as_str().map(String::from))
        .collect()
}

/// The GitLab job's `script:` (its `before_script` installs memtrial: the test's own
/// binary is on PATH instead).
fn gitlab_script(name: &str) -> String {
    let doc = yaml(name);
    doc["memory-gate"]["script"]
        .as_sequence()
        .expect("script")
        .iter()
        .map(|l| l.as_str().expect("a line").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `script` as the CI would (`bash -e`), in `dir`, memtrial first on PATH.
fn run_script(dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
    let bin = memtrial();
    let path = format!(
        "{}:{}",
        bin.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .args(["-e", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .expect("bash")
}

/// The example's app with `RECORD_BYTES` set to `bytes` (the pull request's change).
fn app_with(source: &str, bytes: u32) -> String {
    let text = std::fs::read_to_string(example(source)).expect("app");
    let (from, to) = if source.ends_with(".c") {
        (
            "#define RECORD_BYTES 1000".to_string(),
            format!("#define RECORD_BYTES {bytes}"),
        )
    } else {
        (
            "RECORD_BYTES = 1000".to_string(),
            format!("RECORD_BYTES = {bytes}"),
        )
    };
    assert!(text.contains(&from), "{source} lost its RECORD_BYTES line");
    text.replace(&from, &to)
}

fn say(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A GitHub example: `main/` and `pr/` checked out (the pull request's app with
/// `RECORD_BYTES` = `pr_bytes`), its steps run; the gate's output, the job summary and
/// the JUnit report.
fn github(workflow: &str, source: &str, pr_bytes: u32) -> (Output, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = Path::new(source).file_name().expect("name");
    for (side, bytes) in [("main", 1000), ("pr", pr_bytes)] {
        std::fs::create_dir_all(dir.path().join(side)).expect("mkdir");
        std::fs::write(dir.path().join(side).join(file), app_with(source, bytes)).expect("app");
    }
    let summary = dir.path().join("step-summary.md");
    std::fs::write(&summary, "earlier step\n").expect("summary");
    let mut last = None;
    for script in github_scripts(workflow, "memory-gate") {
        let o = run_script(
            dir.path(),
            &script,
            &[("GITHUB_STEP_SUMMARY", &summary.display().to_string())],
        );
        let failed = !o.status.success();
        last = Some(o);
        if failed {
            break;
        }
    }
    let o = last.expect("a step");
    let md = std::fs::read_to_string(&summary).unwrap_or_default();
    assert!(
        md.starts_with("earlier step\n"),
        "appended, not replaced: {md}"
    );
    let junit = std::fs::read_to_string(dir.path().join("memtrial-junit.xml")).unwrap_or_default();
    (o, md, junit)
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .output()
        .expect("git");
    assert!(o.status.success(), "git {args:?}: {}", say(&o));
}

/// A GitLab example: a repository whose `main` has the app and whose checked-out merge
/// request changes `RECORD_BYTES` to `pr_bytes`, `origin` itself; the job's script run.
fn gitlab(job: &str, source: &str, pr_bytes: u32) -> (Output, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let file = Path::new(source)
        .file_name()
        .expect("name")
        .to_str()
        .expect("utf-8");
    git(d, &["init", "-q", "-b", "main"]);
    std::fs::write(d.join(file), app_with(source, 1000)).expect("app");
    git(d, &["add", file]);
    git(d, &["commit", "-q", "-m", "main"]);
    git(d, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(d.join(file), app_with(source, pr_bytes)).expect("app");
    git(d, &["commit", "-q", "-am", "the merge request"]);
    git(d, &["checkout", "-q", "--detach"]);
    git(d, &["remote", "add", "origin", &d.display().to_string()]);
    let o = run_script(
        d,
        &gitlab_script(job),
        &[("CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "main")],
    );
    let md = std::fs::read_to_string(d.join("memtrial-summary.md")).unwrap_or_default();
    let junit = std::fs::read_to_string(d.join("memtrial-junit.xml")).unwrap_or_default();
    (o, md, junit)
}

fn need_c_example() -> bool {
    need_c_compiler() && need_program("git", "git")
}

fn need_ruby_example() -> bool {
    need_program("ruby", "ruby") && need_program("git", "git")
}

/// A pull request that makes each record 20% larger: peak RSS +19.5%, beyond 5%.
#[test]
fn github_c_example_fails_a_planted_regression_with_exit_3() {
    if !need_c_example() {
        return;
    }
    let (o, md, junit) = github("github-c.yml", "c/app.c", 1200);
    assert_eq!(o.status.code(), Some(3), "{}", say(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("gate: pr: peak_rss > +5%: regression: peak RSS 1.1"),
        "{out}"
    );
    assert!(
        md.contains("## ❌ memtrial gate: regression (pr: peak\\_rss &gt; +5%)"),
        "{md}"
    );
    assert!(
        md.contains("#### peak RSS — fail if `peak_rss > +5%`"),
        "{md}"
    );
    assert!(md.contains("| main (baseline) |"), "{md}");
    assert!(
        md.contains("❌ regression: wholly beyond 1.05× (+5%)"),
        "{md}"
    );
    assert!(
        md.contains("interleaved: main and pr ran in 7 shuffled block(s)"),
        "{md}"
    );
    assert!(
        md.contains("src=\"data:image/svg+xml;base64,"),
        "the picture: {md}"
    );
    assert!(junit.contains("failures=\"1\""), "{junit}");
    assert!(junit.contains("<failure type=\"regression\""), "{junit}");
}

/// A merge request that makes each record 2% larger stays within a 5% tolerance.
#[test]
fn gitlab_c_example_passes_a_two_percent_change_within_five() {
    if !need_c_example() {
        return;
    }
    let (o, md, junit) = gitlab("gitlab-c.yml", "c/app.c", 1020);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    assert!(md.contains("## ✅ memtrial gate: pass"), "{md}");
    assert!(md.contains("✅ pass: within 1.05× (+5%)"), "{md}");
    assert!(
        junit.contains("failures=\"0\" errors=\"0\" skipped=\"0\""),
        "{junit}"
    );
}

/// The same code on both sides passes.
#[test]
fn github_ruby_example_passes_identical_code() {
    if !need_ruby_example() {
        return;
    }
    let (o, md, _) = github("github-ruby.yml", "ruby/app.rb", 1000);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    assert!(md.contains("## ✅ memtrial gate: pass"), "{md}");
}

/// The nightly job: the allocator decision (stay on glibc: jemalloc is not leaner for this
/// single-threaded app) still holds, until decided.
#[test]
fn github_ruby_nightly_job_finds_the_allocator_decision_holds() {
    if !need_ruby_example() || !need_allocators(&["jemalloc"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("app.rb"), app_with("ruby/app.rb", 1000)).expect("app");
    let scripts = github_scripts("github-ruby.yml", "allocator-decision");
    assert_eq!(scripts.len(), 1, "{scripts:?}");
    let o = run_script(dir.path(), &scripts[0], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("gate: the recommendation holds: glibc"),
        "{out}"
    );
    let junit = std::fs::read_to_string(dir.path().join("memtrial-junit.xml")).unwrap_or_default();
    assert!(
        junit.contains("name=\"recommendation is glibc\"><system-out>"),
        "{junit}"
    );
}

/// Records of 1400 bytes instead of 1000: peak RSS about +20% (Ruby's own ~17 MiB beside).
#[test]
fn gitlab_ruby_example_fails_a_planted_regression_with_exit_3() {
    if !need_ruby_example() {
        return;
    }
    let (o, md, junit) = gitlab("gitlab-ruby.yml", "ruby/app.rb", 1400);
    assert_eq!(o.status.code(), Some(3), "{}", say(&o));
    assert!(md.contains("❌ regression"), "{md}");
    assert!(junit.contains("<failure type=\"regression\""), "{junit}");
}

/// `cycle` with a list of sizes in MiB and its own counter file in `dir`.
fn cycle(dir: &Path, name: &str, sizes: &str) -> String {
    format!(
        "{name}=command:'{} {sizes} {}'",
        fixture("cycle").display(),
        dir.join(format!("{name}.count")).display()
    )
}

fn memtrial_at(dir: &Path, args: &[&str]) -> Output {
    Command::new(memtrial())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("memtrial")
}

/// A spread the runs cannot see past: undecided, exit 4 — and how many more runs would
/// tell; `--undecided pass` passes it, saying so; its verdicts as JSON.
#[test]
fn an_interval_straddling_the_tolerance_is_undecided_with_exit_4() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let base = cycle(d, "main", "40");
    let pr = cycle(d, "pr", "30,60,36");
    let cmd = fixture("cycle").display().to_string();
    let args = |more: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "gate",
            "--variant",
            &base,
            "--variant",
            &pr,
            "--fail-if",
            "peak_rss > +5%",
            "--runs",
            "3",
            "--seed",
            "1",
            "--no-probes",
            "--gate-json",
            "gate.json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(more.iter().map(|s| s.to_string()));
        a.extend(["--".into(), cmd.clone(), "1".into(), "x".into()]);
        a
    };
    let a = args(&[]);
    let o = memtrial_at(d, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(4), "{}", say(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("pr: peak_rss > +5%: undecided: peak RSS"),
        "{out}"
    );
    assert!(out.contains("more runs of each would likely tell"), "{out}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(d.join("gate.json")).unwrap())
        .expect("gate JSON");
    validate_schema(&doc, "gate-v1.schema.json");
    assert_eq!(doc["verdict"], "undecided", "{doc}");
    assert_eq!(doc["criteria"][0]["more_runs"]["kind"], "about", "{doc}");
    // The recommendation says the same: undecided, never "keep the baseline".
    assert!(out.contains("Undecided: pr"), "{out}");
    let a = args(&["--undecided", "pass"]);
    let o = memtrial_at(d, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("memtrial gate: undecided (pr: peak_rss > +5%), passed by --undecided pass"),
        "{}",
        say(&o)
    );
}

/// `run --until-decided`: a clear difference stops as soon as two looks agree; a spread
/// that never narrows enough stops at the cap, saying what is still open.
#[test]
fn until_decided_adds_blocks_until_decided_or_the_cap() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cmd = fixture("cycle").display().to_string();
    let run = |pr: &str, more: &[&str]| {
        let base = cycle(d, "base", "40");
        let pr = cycle(d, "pr", pr);
        let mut a = vec![
            "run",
            "--variant",
            &base,
            "--variant",
            &pr,
            "--baseline",
            "base",
            "--runs",
            "3",
            "--seed",
            "1",
            "--no-probes",
            "--until-decided",
            "--json",
            "out.json",
        ];
        a.extend_from_slice(more);
        a.extend_from_slice(&["--", &cmd, "1", "x"]);
        let o = memtrial_at(d, &a);
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("out.json")).unwrap_or_default())
                .unwrap_or(Value::Null);
        (o, doc)
    };
    // 20 MiB against 40: decided at the looks after 3 and 4 runs.
    let (o, doc) = run("20", &["--max-runs", "8"]);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    assert_eq!(doc["experiment"]["runs_per_variant"], 4, "{}", say(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("until decided: after 3 runs of each, undecided"),
        "{err}"
    );
    assert!(
        err.contains("until decided: after 4 runs of each, every question is decided"),
        "{err}"
    );
    assert_eq!(doc["recommendation"]["verdict"]["kind"], "pick", "{doc}");
    // 30 to 60 MiB against 40: never decided by 5 runs; the record holds all 5.
    let (o, doc) = run("30,60,36,52", &["--max-runs", "5"]);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    assert_eq!(doc["experiment"]["runs_per_variant"], 5, "{}", say(&o));
    assert_eq!(
        variant(&doc, "pr")["runs"].as_array().map(Vec::len),
        Some(5)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("until decided: after 5 runs of each (the most --max-runs allows), still undecided: pr:"),
        "{err}"
    );
    assert_eq!(
        doc["recommendation"]["verdict"]["kind"], "undecided",
        "{doc}"
    );
    assert!(
        doc["recommendation"]["verdict"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("would likely tell"),
        "{doc}"
    );
    // Bad caps are said before anything runs.
    let (o, _) = run("20", &["--max-runs", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", say(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-runs 2: out of range"));
}

/// `--against FILE`: the record's baseline runs against the build run here; a record of
/// another machine is refused unless `--across-hosts`, which says what differs.
#[test]
fn a_gate_against_a_stored_record() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cmd = fixture("cycle").display().to_string();
    let main = cycle(d, "main", "40");
    let o = memtrial_at(
        d,
        &[
            "run",
            "--variant",
            &main,
            "--baseline",
            "main",
            "--runs",
            "3",
            "--no-probes",
            "--json",
            "main.json",
            "--",
            &cmd,
            "1",
            "x",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    let gate = |pr_sizes: &str, record: &str, more: &[&str]| {
        let pr = cycle(d, "pr", pr_sizes);
        let mut a = vec![
            "gate",
            "--against",
            record,
            "--variant",
            &pr,
            "--fail-if",
            "peak_rss > +5%",
            "--runs",
            "3",
            "--no-probes",
            "--summary",
            "summary.md",
        ];
        a.extend_from_slice(more);
        a.extend_from_slice(&["--", &cmd, "1", "x"]);
        memtrial_at(d, &a)
    };
    let o = gate("48", "main.json", &[]);
    assert_eq!(o.status.code(), Some(3), "{}", say(&o));
    let md = std::fs::read_to_string(d.join("summary.md")).unwrap_or_default();
    assert!(md.contains("| main@record (baseline) |"), "{md}");
    assert!(
        md.contains("not interleaved: the baseline main@record is 3 run(s)"),
        "{md}"
    );
    // The same record from a machine with 64 CPUs.
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("main.json")).unwrap()).unwrap();
    doc["experiment"]["host"]["cpus"] = 64.into();
    std::fs::write(d.join("other.json"), doc.to_string()).unwrap();
    let o = gate("40", "other.json", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", say(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the record ran on another machine (CPUs: 64 CPUs in the record"),
        "{err}"
    );
    assert!(err.contains("--across-hosts"), "{err}");
    let o = gate("40", "other.json", &["--across-hosts"]);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    let md = std::fs::read_to_string(d.join("summary.md")).unwrap_or_default();
    assert!(
        md.contains("across hosts (--across-hosts): CPUs: 64 CPUs in the record"),
        "{md}"
    );
}

/// `--expect-recommendation`: the baseline expected while a variant is clearly leaner:
/// exit 5, naming what changed; with no `--fail-if`, the expectation alone is the gate.
#[test]
fn a_changed_recommendation_fails_with_exit_5() {
    if !need_c_compiler() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cmd = fixture("cycle").display().to_string();
    let (base, lean) = (cycle(d, "main", "40"), cycle(d, "lean", "20"));
    let o = memtrial_at(
        d,
        &[
            "gate",
            "--variant",
            &base,
            "--variant",
            &lean,
            "--expect-recommendation",
            "main",
            "--runs",
            "3",
            "--no-probes",
            "--junit",
            "j.xml",
            "--",
            &cmd,
            "1",
            "x",
        ],
    );
    assert_eq!(o.status.code(), Some(5), "{}", say(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(
            "the recommendation changed: expected main; today's evidence picks lean (peak RSS -4"
        ),
        "{out}"
    );
    let junit = std::fs::read_to_string(d.join("j.xml")).unwrap_or_default();
    assert!(
        junit.contains("<failure type=\"recommendation_changed\""),
        "{junit}"
    );
    // Nothing to gate, or a figure this gate has not: said before any run.
    let o = memtrial_at(d, &["gate", "--variant", &base, "--", &cmd, "1", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to gate"));
    let o = memtrial_at(
        d,
        &[
            "gate",
            "--variant",
            &base,
            "--variant",
            &lean,
            "--fail-if",
            "p95 > +10%",
            "--",
            &cmd,
            "1",
            "x",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("p95 latency comes from memtrial's HTTP load"),
        "{}",
        say(&o)
    );
}
