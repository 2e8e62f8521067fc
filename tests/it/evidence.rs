//! No figure beyond its evidence (issue 18): real short jobs, a shim that execs the
//! interpreter, a batch that grows; every figure shown meets its rule, in every format.

use std::path::Path;

use serde_json::Value;

use crate::common::*;
use memtrial::record::RunRecord;

fn f64_of(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// The headline's ratio of the baseline's peak to the program's floor, if the text has one
/// ("X peaked at N× the most the program was seen to have live").
fn headline_ratio(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.contains("the most the program was seen to have live"))?;
    let after = line.split(" peaked at ").nth(1)?;
    after.split('×').next()?.trim().parse().ok()
}

/// A ~1 s job of 8 threads, the default settings: the allocator's figures at the peak are
/// either absent (with why and what would give them) or taken at the peak; no
/// fragmentation headline or held/live ratio rests on a sample from the start or the exit.
#[test]
fn a_one_second_eight_thread_job_shows_no_allocator_figure_beyond_its_samples() {
    if !need_c_compiler() {
        return;
    }
    let burst = fixture("burst").display().to_string();
    let r = run_json(
        3,
        "glibc,arena1",
        &["--markdown", "out.md"],
        &[&burst, "8", "128", "600"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let table = r.stdout();
    let md = std::fs::read_to_string(r.dir.path().join("out.md")).expect("markdown");
    // 128 MiB live in 2 KiB blocks at the peak: held/live near 1, live near the peak.
    for name in ["glibc", "arena1"] {
        let s = summary(&doc, name);
        let peak = f64_of(&s["peak_rss_bytes"]["median"]).expect("the kernel's peak");
        let ev = &s["evidence"]["live_at_peak_bytes"];
        match f64_of(&s["live_at_peak_bytes"]["median"]) {
            Some(live) => {
                // Shown: it comes from a sample at the peak, so it is most of the peak.
                assert!(
                    live > 0.5 * peak,
                    "{name}: live at peak {live} beside a peak of {peak}: {ev}"
                );
                let ratio = f64_of(&s["held_over_live"]["median"]).unwrap();
                assert!(ratio < 2.0, "{name}: held/live {ratio}: {ev}");
                assert!(ev["runs_at_peak"].as_u64().unwrap_or(0) >= 1, "{ev}");
            }
            None => {
                // Absent: no ratio, and the reason with what would give it.
                assert!(s["held_over_live"].is_null(), "{name}: {s}");
                let absent = &ev["absent"];
                assert!(absent["reason"].is_string(), "{name}: {ev}");
                assert!(
                    absent["remedy"]
                        .as_str()
                        .unwrap_or("")
                        .contains("--probe-interval"),
                    "{name}: {ev}"
                );
                assert!(
                    s["ratio_to_baseline"].get("held_over_live").is_none(),
                    "{name}: no ratio from an absent figure"
                );
                assert!(
                    table.contains(&format!("{name}: live/held at peak not shown: ")),
                    "{table}"
                );
                assert!(
                    md.contains(&format!("{name}: live/held at peak not shown: ")),
                    "{md}"
                );
            }
        }
    }
    for (what, text) in [("table", &table), ("markdown", &md)] {
        // 128 MiB live at once and little else: the peak is near the program's floor.
        if let Some(q) = headline_ratio(text) {
            assert!(q < 2.0, "{what}: a peak of {q}× the floor: {text}");
        }
        assert!(
            !text.contains("fragmentation/retention, not live data"),
            "{what}: {text}"
        );
    }
}

/// Writes `name` with `text` into `dir`, executable.
fn script(dir: &Path, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p.display().to_string()
}

/// A job whose size the variant sets: `lean` holds a quarter of the baseline's memory.
const JOB: &str = "import os, time\n\
n = int(os.environ.get('JOB_MB', '160'))\n\
time.sleep(0.3)\n\
x = bytearray(n << 20)\n\
for i in range(0, len(x), 4096):\n    x[i] = 1\n\
time.sleep(1.2)\n";

fn shim_run(cmd: &[&str]) -> Run {
    let mut args = vec![
        "run",
        "--runs",
        "3",
        "--variants",
        "glibc",
        "--variant",
        "lean=JOB_MB=40",
        "--baseline",
        "glibc",
        "--json",
        "out.json",
        // The sharing legend is among the sections the default answer leaves to --detail.
        "--detail",
        "--",
    ];
    args.extend_from_slice(cmd);
    memtrial_in_tmp(&args)
}

/// Like pyenv's `python3`: a bash script that runs a few helper processes, then execs the
/// interpreter. Its start-up helpers are not a tree that shares memory: the kernel's peak
/// decides, as for the direct run, and both get the same recommendation.
#[test]
fn a_shim_that_execs_the_interpreter_gets_the_recommendation_of_the_direct_run() {
    if !need_python3() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let job = script(dir.path(), "job.py", JOB);
    let shim = script(
        dir.path(),
        "python3-shim",
        "#!/bin/bash\n\
         # helpers first (the version manager finding its version), then exec\n\
         v=$(python3 -c 'import sys; print(sys.version_info[0])')\n\
         for i in 1 2 3; do sleep 0.2 & done\n\
         wait\n\
         exec python3 \"$@\"\n",
    );
    let direct = shim_run(&["python3", &job]);
    assert_eq!(direct.code(), 0, "{}", direct.explain());
    let shimmed = shim_run(&[&shim, &job]);
    assert_eq!(shimmed.code(), 0, "{}", shimmed.explain());
    let (d, s) = (direct.json(), shimmed.json());
    // The shim really ran helpers beside it.
    let most = all_runs(&s)
        .iter()
        .map(RunRecord::processes_at_once)
        .max()
        .unwrap_or(0);
    assert!(most >= 2, "the shim's helpers were seen: {most}");
    assert_eq!(s["sharing"]["kind"], "brief", "{}", s["sharing"]);
    for doc in [&d, &s] {
        assert_eq!(
            doc["recommendation"]["memory_figure"], "peak_rss_bytes",
            "{}",
            doc["recommendation"]
        );
    }
    assert_eq!(
        d["recommendation"]["verdict"]["kind"], s["recommendation"]["verdict"]["kind"],
        "direct: {}\nshim: {}",
        d["recommendation"], s["recommendation"]
    );
    assert_eq!(
        d["recommendation"]["verdict"]["variant"], "lean",
        "{}",
        d["recommendation"]
    );
    assert_eq!(
        s["recommendation"]["verdict"]["variant"], "lean",
        "{}",
        s["recommendation"]
    );
    assert!(
        shimmed.stdout().contains("not a tree that shares memory"),
        "{}",
        shimmed.stdout()
    );
}

/// A 3 s batch whose memory grows all along: a batch has no steady phase, so nowhere in
/// its JSON — trend, why, sentences — is there a leak or growth verdict.
#[test]
fn a_growing_three_second_batch_has_no_leak_verdict_anywhere_in_its_json() {
    if !need_python3() {
        return;
    }
    let code = "import time\nl = []\nend = time.monotonic() + 3\nwhile time.monotonic() < end:\n    l.append(b'x' * 1_500_000); time.sleep(0.05)\n";
    let r = run_json(2, "glibc,arena2", &[], &["python3", "-c", code]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let text = std::fs::read_to_string(r.dir.path().join("out.json")).unwrap();
    for word in ["leak", "grows", "grow "] {
        assert!(
            !text.contains(word),
            "{word:?} in the JSON of a batch:\n{text}"
        );
    }
    for name in ["glibc", "arena2"] {
        let s = summary(&doc, name);
        assert!(s["trend"].is_null(), "{name}: {}", s["trend"]);
        assert_eq!(s["why"]["verdict"], "at_peak", "{name}: {}", s["why"]);
    }
    assert!(!r.stdout().contains("leak:"), "{}", r.stdout());
}

/// `inspect PID --json` prints only JSON: nothing for people on either stream beside it.
#[test]
fn inspect_json_prints_only_json() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let pid = child.id().to_string();
    let out = std::process::Command::new(memtrial())
        .args(["inspect", &pid, "--json"])
        .output()
        .expect("memtrial inspect");
    let _ = child.kill();
    let _ = child.wait();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("standard output is JSON");
    assert_eq!(v["pid"].as_u64().map(|p| p.to_string()), Some(pid.clone()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains(&format!("PID {pid}")) && !err.contains("RSS"),
        "a report beside the JSON on standard error:\n{err}"
    );
}

/// The runs' log files are numbered as the progress counts them: `[  1/2]` is `001-…`.
#[test]
fn log_files_are_numbered_as_the_progress_counts_them() {
    let r = run_with(2, "glibc", &["--no-probes"], &["true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let progress = r.stderr();
    assert!(progress.contains("[  1/2]"), "{progress}");
    let mut names: Vec<String> = walk(r.dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "stdout"))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["001-glibc.stdout", "002-glibc.stdout"],
        "{progress}"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A run of a few milliseconds has its kernel peak, but no mean RSS: one or two samples
/// cannot stand for the run. The table says why and what would give it.
#[test]
fn a_run_of_milliseconds_shows_its_peak_but_no_mean() {
    let r = run_json(3, "glibc,arena1", &[], &["true"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    for name in ["glibc", "arena1"] {
        let s = summary(&doc, name);
        assert!(s["peak_rss_bytes"]["median"].is_number(), "{s}");
        assert!(s.get("mean_rss_bytes").is_none(), "{name}: {s}");
        assert!(
            s.get("ratio_to_baseline")
                .and_then(|x| x.get("mean_rss_bytes"))
                .is_none(),
            "{name}: no ratio of an absent mean"
        );
        let absent = &s["evidence"]["mean_rss_bytes"]["absent"];
        assert!(
            absent["reason"].as_str().unwrap_or("").contains("run"),
            "{absent}"
        );
        assert!(absent["remedy"].is_string(), "{absent}");
    }
    let table = r.stdout();
    assert!(table.contains("glibc: mean RSS not shown: "), "{table}");
}

/// The reason the allocator probe was absent from a run, if it was.
fn allocator_absence(run: &RunRecord) -> &str {
    run.inside
        .absent
        .iter()
        .find(|a| a.probe == "allocator")
        .map_or("", |a| a.reason.as_str())
}

/// Holds every run after the first to the rule, whatever the machine's load made of the
/// runs' lengths: a run goes without the allocator probe exactly when the variant's
/// previous run (in the order of the schedule: one run of it per block) ended before the probe's first sample
/// (10 ms) with no allocator figures. Returns how many runs went without it.
fn check_left_out_rule(runs: &[RunRecord]) -> usize {
    let mut runs: Vec<&RunRecord> = runs.iter().collect();
    runs.sort_by_key(|r| r.block);
    let mut left_out = 0;
    for w in runs.windows(2) {
        let (before, run) = (w[0], w[1]);
        let short = before.wall_seconds < 0.010 && before.inside.allocator.is_none();
        let out = allocator_absence(run).starts_with("left out of this run: ");
        assert_eq!(out, short, "after {before:?}\nthis run: {run:?}");
        if out {
            assert!(run.inside.allocator.is_none(), "{run:?}");
            left_out += 1;
        }
    }
    left_out
}

/// The observer stays out of the peak: `/bin/true` ends long before the allocator probe's
/// first sample (10 ms), so only the first run of a variant carries the probe (its thread
/// adds ~90 KiB, a tenth of the peak); the later runs go without it and say why, and the
/// median peak is within 5% of `--no-probes`. `/bin/true`'s own peak (wait4's maxrss) ranges
/// over ±10% from run to run on a quiet machine, so each side pools 2 × 31 runs, taken in
/// turn, before medians are compared.
#[test]
#[ignore = "measures: needs runs of /bin/true under 10 ms; runs alone in the second pass of scripts/test.sh"]
fn true_peaks_the_same_with_the_default_probe_as_without() {
    let peaks = |extra: &[&str]| -> Vec<RunRecord> {
        let r = run_json(31, "glibc", extra, &["/bin/true"]);
        assert_eq!(r.code(), 0, "{}", r.explain());
        typed_runs(&r.json(), "glibc")
    };
    let median = |runs: &[RunRecord]| {
        let mut xs: Vec<u64> = runs.iter().map(|r| r.peak_rss_bytes).collect();
        xs.sort_unstable();
        xs[xs.len() / 2] as f64
    };
    let (mut probed, mut bare) = (Vec::new(), Vec::new());
    let mut left_out = 0;
    for _ in 0..2 {
        let p = peaks(&[]);
        left_out = check_left_out_rule(&p);
        probed.extend(p);
        bare.extend(peaks(&["--no-probes"]));
    }
    let (probed, bare) = (median(&probed), median(&bare));
    assert!(
        (probed - bare).abs() <= 0.05 * bare,
        "median peak {probed} with the default probe, {bare} without"
    );
    assert!(
        left_out >= 25,
        "the probe was left out of {left_out} of 30 runs"
    );
}

/// The rule under any load: each run is held to it, whatever its length came to.
#[test]
fn a_short_run_leaves_the_allocator_probe_out_of_the_next_one() {
    let r = run_json(4, "glibc", &[], &["/bin/true"]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    check_left_out_rule(&typed_runs(&doc, "glibc"));
}

#[test]
#[ignore = "measures: needs the short runs under 10 ms; runs alone in the second pass of scripts/test.sh"]
fn a_run_long_enough_for_a_sample_brings_the_allocator_probe_back() {
    // Every third run is short (one shell that counts its runs in a file with builtins
    // only, no other program started — `touch` made a run 13 ms once, past the 10 ms that
    // leaves the probe out), the others 300 ms. A short run can still come out over 10 ms
    // on a loaded machine (one did in CI, right after the cgroup v2 VM's tests): three
    // chances, and the rule is held to every run either way.
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let cmd = format!(
        "n=0; [ -e {f} ] && read n < {f}; echo $((n + 1)) > {f}; \
         [ $((n % 3)) = 0 ] || exec sleep 0.3",
        f = count.display()
    );
    let r = run_json(9, "glibc", &[], &["sh", "-c", &cmd]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let doc = r.json();
    let mut runs = typed_runs(&doc, "glibc");
    runs.sort_by_key(|r| r.block);
    let lengths: Vec<String> = runs
        .iter()
        .map(|r| format!("{:.1} ms", r.wall_seconds * 1e3))
        .collect();
    check_left_out_rule(&runs);
    // A short run (the first of each three) leaves the probe out of the next, which lasts
    // 300 ms, so the one after has it again, with samples.
    let chains = (0..runs.len() - 2)
        .step_by(3)
        .filter(|&i| runs[i].wall_seconds < 0.010 && runs[i].inside.allocator.is_none())
        .inspect(|&i| {
            assert!(
                allocator_absence(&runs[i + 1]).starts_with("left out"),
                "{:?}",
                runs[i + 1]
            );
            assert!(
                runs[i + 2]
                    .inside
                    .allocator
                    .as_ref()
                    .is_some_and(|a| !a.series.is_empty()),
                "{:?}",
                runs[i + 2]
            );
        })
        .count();
    assert!(
        chains >= 1,
        "no run of the three meant to be short ended under 10 ms: {lengths:?}"
    );
}
