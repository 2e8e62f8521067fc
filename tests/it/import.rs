//! Several machines, one comparison (issue 12, part 2): records written by `memtrial run
//! --json` on two hosts — this machine, and memtrial in a UTS namespace with another
//! hostname inside a cgroup with a CPU quota — imported into a third store, reported per
//! host; refused records leave the store as it was.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::*;

fn in_dir(dir: &Path, args: &[&str]) -> Output {
    Command::new(memtrial())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("MEMTRIAL_HOST")
        .output()
        .expect("run memtrial")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok(o: &Output, what: &str) -> String {
    let (out, err) = text(o);
    assert!(o.status.success(), "{what}: {}\n{out}\n{err}", o.status);
    out
}

/// The arguments of a short two-variant batch experiment writing `name.db` and `name.json`.
fn run_args(name: &str, seed: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--db",
        &format!("{name}.db"),
        "--json",
        &format!("{name}.json"),
        "--variants",
        "glibc,arena2",
        "--runs",
        "2",
        "--seed",
        seed,
        "--quiet",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(fragment_cmd());
    a
}

fn list_line(dir: &Path, db: &str) -> String {
    let out = ok(&in_dir(dir, &["list", "--db", db]), "list");
    out.lines()
        .find(|l| l.contains("glibc,arena2"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn records_of_two_hosts_join_one_experiment_and_report_per_host() {
    if need_cgroups().is_none() {
        return;
    }
    let Some(group) = QuotaGroup::new("import", 100_000) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // Host A: this machine, named by MEMTRIAL_HOST.
    let a_args = run_args("a", "5");
    let a = Command::new(memtrial())
        .args(&a_args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("MEMTRIAL_HOST", "node-a")
        .output()
        .unwrap();
    ok(&a, "host A's run");
    // Host B: another hostname (UTS namespace) and a CPU quota of one CPU on its own cgroup.
    let b_args = run_args("b", "6");
    let b_refs: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = memtrial_as_host(dir, "node-b", &group, &b_refs);
    ok(&b, "host B's run");
    drop(group);

    let b_doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("b.json")).unwrap()).unwrap();
    validate_schema(&b_doc, "experiment-v4.schema.json");
    assert_eq!(b_doc["experiment"]["host"]["hostname"], "node-b");
    assert_eq!(
        b_doc["experiment"]["host"]["container"]["cpu_quota_us"],
        100_000
    );
    let a_doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("a.json")).unwrap()).unwrap();
    assert_eq!(a_doc["experiment"]["host"]["hostname"], "node-a");
    assert_eq!(
        a_doc["experiment"]["fingerprint"], b_doc["experiment"]["fingerprint"],
        "same plan, another seed: one fingerprint"
    );

    let imp = in_dir(dir, &["import", "--db", "c.db", "a.json", "b.json"]);
    let out = ok(&imp, "import");
    assert!(
        out.contains("a.json: new experiment 1")
            && out.contains("4 new run(s), 0 already present; host node-a"),
        "{out}"
    );
    assert!(
        out.contains("b.json: joined experiment 1")
            && out.contains("4 new run(s), 0 already present; host node-b"),
        "{out}"
    );
    let line = list_line(dir, "c.db");
    assert!(line.contains("8/8") && line.contains("┆ 2 "), "{line}");

    // Per host: one block each, titled with its facts, and the quota named.
    let rep = ok(
        &in_dir(dir, &["report", "--db", "c.db", "--by", "host"]),
        "report --by host",
    );
    assert!(rep.contains("── host node-a ·"), "{rep}");
    assert!(rep.contains("── host node-b ·"), "{rep}");
    assert!(rep.contains("hosts differ in CPU quota"), "{rep}");
    assert!(
        rep.contains("no CPU quota; node-b") && rep.contains("CPU quota 1.00"),
        "{rep}"
    );
    assert_eq!(rep.matches("variant ┆ runs ok").count(), 2, "{rep}");
    assert_eq!(rep.matches("│ glibc ").count(), 2, "{rep}");

    // The same per host in JSON and Markdown.
    let by = dir.join("by.json");
    ok(
        &in_dir(
            dir,
            &[
                "report",
                "--db",
                "c.db",
                "--by",
                "host",
                "--json",
                &by.display().to_string(),
            ],
        ),
        "report --by host --json",
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&by).unwrap()).unwrap();
    validate_schema(&doc, "experiment-v4.schema.json");
    assert_eq!(doc["by_host"][0]["label"], "node-a");
    assert_eq!(doc["by_host"][1]["label"], "node-b");
    assert_eq!(doc["by_host"][1]["runs"], 4);
    let md = ok(
        &in_dir(
            dir,
            &["report", "--db", "c.db", "--by", "host", "--markdown", "-"],
        ),
        "report --by host --markdown -",
    );
    assert!(
        md.contains("#### host node-b · ") && md.contains("CPU quota 1.00"),
        "{md}"
    );

    // Pooled: a warning naming the hosts and pointing to --by host.
    let pooled = in_dir(dir, &["report", "--db", "c.db", "--csv", "-"]);
    let (csv, err) = text(&pooled);
    assert!(pooled.status.success(), "{err}");
    assert!(
        err.contains("2 hosts (node-a, node-b)") && err.contains("memtrial report --by host 1"),
        "{err}"
    );
    assert!(csv.lines().next().unwrap_or("").ends_with(",host"), "{csv}");
    assert_eq!(csv.lines().filter(|l| l.ends_with(",node-b")).count(), 4);
    assert_eq!(csv.lines().filter(|l| l.ends_with(",node-a")).count(), 4);

    let rec = in_dir(dir, &["recommend", "--db", "c.db"]);
    let (_, err) = text(&rec);
    assert!(rec.status.success() && err.contains("pooled here"), "{err}");

    // Again: nothing new.
    let again = ok(
        &in_dir(dir, &["import", "--db", "c.db", "a.json", "b.json"]),
        "import again",
    );
    assert_eq!(
        again.matches("0 new run(s), 4 already present").count(),
        2,
        "{again}"
    );
    assert!(list_line(dir, "c.db").contains("8/8"));

    // The merged experiment's own record keeps both hosts, and imports as it is.
    let merged = dir.join("merged.json");
    ok(
        &in_dir(
            dir,
            &[
                "report",
                "--db",
                "c.db",
                "--json",
                &merged.display().to_string(),
            ],
        ),
        "report --json",
    );
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    validate_schema(&m, "experiment-v4.schema.json");
    assert_eq!(m["experiment"]["hosts"].as_array().map(Vec::len), Some(2));
    let back = ok(
        &in_dir(dir, &["import", "--db", "c.db", "merged.json"]),
        "import merged",
    );
    assert!(back.contains("0 new run(s), 8 already present"), "{back}");
}

/// A record of a short one-variant run, and its store.
fn one_record(dir: &Path) -> String {
    ok(
        &in_dir(
            dir,
            &[
                "run",
                "--db",
                "d.db",
                "--json",
                "good.json",
                "--variants",
                "glibc",
                "--runs",
                "1",
                "--no-probes",
                "--quiet",
                "--",
                "/bin/sh",
                "-c",
                "head -c 100000 /dev/zero >/dev/null",
            ],
        ),
        "run",
    );
    std::fs::read_to_string(dir.join("good.json")).unwrap()
}

fn refused(dir: &Path, args: &[&str], expect: &[&str]) {
    let o = in_dir(dir, args);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for e in expect {
        assert!(err.contains(e), "{args:?}: expected '{e}' in:\n{err}");
    }
}

#[test]
fn refused_records_leave_the_store_unchanged_and_v2_still_imports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let good = one_record(dir);
    let before = ok(&in_dir(dir, &["list", "--db", "d.db"]), "list");

    // A newer record: which file, which version, what this memtrial reads, upgrade.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(dir.join("v99.json"), v.to_string()).unwrap();
    refused(
        dir,
        &["import", "--db", "d.db", "v99.json"],
        &[
            "v99.json: schema_version 99",
            "versions 2 to 4",
            "upgrade memtrial",
            "nothing was imported",
        ],
    );
    // A schema violation, given with a good file: the pointer, and nothing of either.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["variants"][0]["runs"][0]["peak_rss_bytes"] = "x".into();
    std::fs::write(dir.join("bad.json"), v.to_string()).unwrap();
    refused(
        dir,
        &["import", "--db", "d.db", "good.json", "bad.json"],
        &["bad.json:", "/variants/0/runs/0/peak_rss_bytes", "\"x\""],
    );
    std::fs::write(dir.join("trunc.json"), &good[..good.len() / 2]).unwrap();
    refused(
        dir,
        &["import", "--db", "d.db", "trunc.json"],
        &["trunc.json: not JSON", "line"],
    );
    refused(
        dir,
        &["import", "--db", "d.db", "missing.json"],
        &["cannot read missing.json"],
    );
    assert_eq!(ok(&in_dir(dir, &["list", "--db", "d.db"]), "list"), before);
    refused(
        dir,
        &["import", "--db", "e.db", "good.json", "bad.json"],
        &["bad.json:"],
    );
    // Records are read and checked before the store is opened: a refused import makes no
    // database.
    assert!(!dir.join("e.db").exists());

    // A v2 record (what 0.2 wrote): imported, saying what it lacks. First what v4 added
    // (each figure's evidence) taken out: that is a v3 record, which imports too.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["schema_version"] = 3.into();
    v.as_object_mut().unwrap().remove("sharing");
    v.as_object_mut().unwrap().remove("floor");
    v["recommendation"]
        .as_object_mut()
        .unwrap()
        .remove("speed_figure");
    for var in v["variants"].as_array_mut().unwrap() {
        // What v4 records grew later: a run's regions and its cgroup's working set.
        for r in var["runs"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("regions");
            if let Some(c) = r.get_mut("cgroup").and_then(Value::as_object_mut) {
                c.remove("working_set_peak_bytes");
            }
            // And the resident bytes the probe read at each of its samples.
            // Huge pages (recorded for every run since v4) too; `get_mut`, as indexing
            // would add an `allocator: null` the v3 schema refuses.
            if let Some(i) = r.get_mut("inside").and_then(Value::as_object_mut) {
                i.remove("thp");
            }
            let inside = r.get_mut("inside");
            if let Some(a) = inside
                .and_then(|i| i.get_mut("allocator"))
                .and_then(Value::as_object_mut)
            {
                for p in a["series"].as_array_mut().into_iter().flatten() {
                    p.as_object_mut().map(|p| p.remove("rss_bytes"));
                }
                a["at_peak"].as_object_mut().map(|p| p.remove("rss_bytes"));
            }
        }
        let s = var["summary"].as_object_mut().unwrap();
        s.remove("evidence");
        s.remove("live_departure");
        // The program's floor, later still.
        for k in ["floor_departure", "peak_live_bytes", "peak_over_floor"] {
            s.remove(k);
        }
        if let Some(w) = s.get_mut("why").and_then(Value::as_object_mut) {
            w.remove("live_bytes");
            w.remove("held_bytes");
        }
    }
    validate_schema(&v, "experiment-v3.schema.json");
    v["schema_version"] = 2.into();
    let e = v["experiment"].as_object_mut().unwrap();
    for k in ["fingerprint", "plan", "hosts"] {
        e.remove(k);
    }
    e["host"].as_object_mut().unwrap().remove("container");
    for var in v["variants"].as_array_mut().unwrap() {
        for r in var["runs"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("host");
        }
    }
    validate_schema(&v, "experiment-v2.schema.json");
    std::fs::write(dir.join("old.json"), v.to_string()).unwrap();
    let out = ok(
        &in_dir(dir, &["import", "--db", "f.db", "old.json"]),
        "import v2",
    );
    assert!(out.contains("old.json: new experiment 1"), "{out}");
    assert!(out.contains("1 new run(s)"), "{out}");
    assert!(out.contains("note: a schema v2 record"), "{out}");
}
