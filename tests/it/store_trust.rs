//! The store's trust boundaries (issue 19): imported records are data, never commands;
//! concurrent writers lose and duplicate nothing; numbers and sizes from outside are
//! bounded and refused by name.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::common::*;

fn cmd<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) -> Command {
    let mut c = Command::new(memtrial());
    c.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("MEMTRIAL_HOST");
    c
}

fn out<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) -> Output {
    cmd(dir, args).output().expect("run memtrial")
}

fn spawn<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) -> Child {
    cmd(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start memtrial")
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `run --runs RUNS --variants VARIANTS MORE… --no-probes --quiet -- COMMAND…`: the short
/// runs these tests make.
fn quiet_run(runs: u32, variants: &str, more: &[&str], command: &[&str]) -> Vec<String> {
    run_args(
        runs,
        variants,
        &[more, &["--no-probes", "--quiet"]].concat(),
        command,
    )
}

/// One quick local experiment (`/bin/true` under glibc) in `dir`'s `memtrial.db`.
fn one_local_run(dir: &Path, what: &str) {
    ok(&out(dir, &quiet_run(1, "glibc", &[], &["/bin/true"])), what);
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A short real record (`--runs 2`, glibc and arena2, `/bin/true`) written by another
/// host (`MEMTRIAL_HOST`), as JSON.
fn record_of_another_host(dir: &Path) -> Value {
    let o = cmd(
        dir,
        &quiet_run(
            2,
            "glibc,arena2",
            &["--db", "other.db", "--json", "other.json", "--seed", "3"],
            &["/bin/true"],
        ),
    )
    .env("MEMTRIAL_HOST", "node-b")
    .output()
    .expect("run memtrial");
    ok(&o, "the other host's run");
    let text = std::fs::read_to_string(dir.join("other.json")).expect("record");
    serde_json::from_str(&text).expect("JSON")
}

/// The record made hostile: interrupted, half its runs gone, and a command that would
/// leave `marker` behind if it ever ran here.
fn hostile(mut rec: Value, marker: &Path) -> Value {
    let command: Vec<Value> = ["/bin/sh", "-c", &format!("touch {}", marker.display())]
        .iter()
        .map(|s| Value::from(*s))
        .collect();
    rec["experiment"]["status"] = "interrupted".into();
    rec["experiment"]["command"] = Value::Array(command.clone());
    rec["experiment"]["plan"]["command"] = Value::Array(command);
    rec["experiment"]["plan"]["program"] = "/bin/sh".into();
    rec["experiment"]["plan"]["workdir"] = "/".into();
    for v in rec["variants"].as_array_mut().expect("variants") {
        v["runs"].as_array_mut().expect("runs").truncate(1);
    }
    rec
}

/// Item 2: an imported interrupted experiment with a hostile command is never run by a
/// plain `run --resume`, nor by naming it without the confirmation; it runs only when
/// named and its command is repeated, and then its runs stay apart by host.
#[test]
fn an_imported_experiment_runs_nothing_unless_named_and_confirmed() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let marker = dir.join("marker");
    let rec = hostile(record_of_another_host(dir), &marker);
    std::fs::write(dir.join("evil.json"), rec.to_string()).unwrap();

    // A store with one local experiment, interrupted by nothing (complete), then the import.
    one_local_run(dir, "local run");
    let imported = ok(&out(dir, &["import", "evil.json"]), "import");
    assert!(imported.contains("new experiment 2"), "{imported}");

    // Plain resume: the local experiment is the only candidate, and it is complete.
    let plain = out(dir, &["run", "--resume"]);
    assert!(!marker.exists(), "a plain resume ran the imported command");
    assert!(!plain.status.success());
    assert!(
        stderr(&plain).contains("experiment 1 is complete"),
        "{}",
        stderr(&plain)
    );
    assert!(!marker.exists(), "a plain resume ran the imported command");

    // Named, unconfirmed: refused, showing where it came from and what it would run.
    let named = out(dir, &["run", "--resume", "2"]);
    let text = stderr(&named);
    assert!(!named.status.success(), "{text}");
    assert!(
        text.contains("imported from a record of host node-b"),
        "{text}"
    );
    assert!(text.contains("touch"), "{text}");
    assert!(text.contains("--confirm-command"), "{text}");
    assert!(!marker.exists(), "resume ID ran the imported command");

    // A wrong confirmation is no confirmation.
    let wrong = out(
        dir,
        &["run", "--resume", "2", "--confirm-command", "/bin/true"],
    );
    assert!(!wrong.status.success());
    assert!(!marker.exists());

    // Named and confirmed: it runs, says the imported runs stay apart, and they do.
    let command = format!("/bin/sh -c 'touch {}'", marker.display());
    let yes = out(
        dir,
        &[
            "run",
            "--resume",
            "2",
            "--confirm-command",
            &command,
            "--json",
            "resumed.json",
        ],
    );
    let text = stderr(&yes);
    assert!(yes.status.success(), "{text}");
    assert!(marker.exists(), "the confirmed command did not run");
    assert!(
        text.contains("0 of its 4 scheduled run(s) kept, 4 to run"),
        "{text}"
    );
    assert!(
        text.contains("2 run(s) of other hosts (node-b)") && text.contains("stay apart"),
        "{text}"
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("resumed.json")).unwrap()).unwrap();
    assert_eq!(doc["experiment"]["hosts"].as_array().map(Vec::len), Some(2));
}

/// Runs stored per experiment, from `list`: (status, done/planned).
fn listed(dir: &Path, db: &str) -> Vec<(String, String)> {
    let text = ok(&out(dir, &["list", "--db", db]), "list");
    text.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('│').split('┆').map(str::trim).collect();
            (cells.len() > 3 && cells[0].parse::<i64>().is_ok())
                .then(|| (cells[2].to_string(), cells[3].to_string()))
        })
        .collect()
}

/// Item 6: four `memtrial run`s at once on one new database all complete with every run
/// (before: "table experiments already exists", "database is locked").
#[test]
fn four_concurrent_runs_on_one_new_database_keep_every_run() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let args = quiet_run(
        2,
        "glibc,arena2",
        &["--db", "shared.db"],
        &[
            "/bin/sh",
            "-c",
            "head -c 2000000 /dev/zero | tail -c 1 >/dev/null",
        ],
    );
    let children: Vec<Child> = (0..4).map(|_| spawn(dir, &args)).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        ok(&o, "a concurrent run");
    }
    let rows = listed(dir, "shared.db");
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (status, runs) in rows {
        assert_eq!((status.as_str(), runs.as_str()), ("complete", "4/4"));
    }
}

/// Item 5: two resumes of one interrupted experiment at once add exactly the missing runs
/// (before: both ran every missing slot).
#[test]
fn two_concurrent_resumes_add_exactly_the_missing_runs() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // An experiment of 8 slots stopped after its first run: SIGINT while the second sleeps.
    let mut first = spawn(
        dir,
        &quiet_run(
            4,
            "glibc,arena2",
            &[],
            &[
                "/bin/sh",
                "-c",
                "test -e go && exec sleep 0.3; touch go; exec sleep 30",
            ],
        ),
    );
    // The first run creates `go` and sleeps: interrupt it there.
    wait_for_first_run(dir);
    // SAFETY: a signal to our own child, not yet waited for.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    let o = first.wait().unwrap();
    assert_eq!(o.code(), Some(130));
    let before = listed(dir, "memtrial.db");
    assert_eq!(before[0].0, "interrupted", "{before:?}");

    let a = spawn(dir, &["run", "--resume", "--quiet"]);
    let b = spawn(dir, &["run", "--resume", "--quiet"]);
    for c in [a, b] {
        ok(&c.wait_with_output().unwrap(), "a concurrent resume");
    }
    let after = listed(dir, "memtrial.db");
    assert_eq!(after, vec![("complete".to_string(), "8/8".to_string())]);
}

/// A local experiment with its record `a.json` (this host), in `memtrial.db`.
fn local_with_record(dir: &Path) -> Value {
    ok(
        &out(
            dir,
            &quiet_run(
                2,
                "glibc,arena2",
                &["--json", "a.json", "--seed", "4"],
                &["/bin/true"],
            ),
        ),
        "local run",
    );
    serde_json::from_str(&std::fs::read_to_string(dir.join("a.json")).unwrap()).unwrap()
}

/// Item 7: a schema-valid size of 2^64-1 from another host is refused on import, naming
/// the field and the record; the local experiment it would have joined stays reportable
/// (before: imported, then `report`, `recommend` and `--json` failed on "corrupt: -1").
#[test]
fn a_size_beyond_the_store_is_refused_and_the_experiment_stays_reportable() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rec = local_with_record(dir);
    rec["experiment"]["hosts"][0]["hostname"] = "node-b".into();
    rec["variants"][0]["runs"][1]["peak_rss_bytes"] = u64::MAX.into();
    std::fs::write(dir.join("huge.json"), rec.to_string()).unwrap();
    let o = out(dir, &["import", "huge.json"]);
    let text = stderr(&o);
    assert!(!o.status.success(), "imported: {text}");
    assert!(
        text.contains("huge.json: /variants/0/runs/1/peak_rss_bytes is 18446744073709551615"),
        "{text}"
    );
    assert!(text.contains("nothing was imported"), "{text}");
    for args in [
        &["report"][..],
        &["recommend"],
        &["report", "--json", "r.json"],
    ] {
        ok(
            &out(dir, args),
            &format!("{args:?} after the refused import"),
        );
    }
}

/// Minor: a hostname with a line break and an escape sequence in an imported record is
/// shown escaped on the import's success line, never as a second line or a colour.
#[test]
fn an_imported_hostname_cannot_forge_lines() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rec = local_with_record(dir);
    rec["experiment"]["hosts"][0]["hostname"] =
        "node-b\nimported 0 runs: all good\u{1b}[31m".into();
    std::fs::write(dir.join("nl.json"), rec.to_string()).unwrap();
    let o = out(dir, &["import", "--db", "other.db", "nl.json"]);
    let text = ok(&o, "import");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(
        !text.lines().any(|l| l.starts_with("imported 0 runs")),
        "a forged line: {text:?}"
    );
    assert!(text.contains("node-b\\nimported 0 runs"), "{text:?}");
}

/// Issue 38, item 7: a record's `message` and `allocator_detected` holding terminal
/// escapes and a bidirectional override are shown escaped by `report --csv -` (before:
/// written raw, as the text, Markdown, HTML and JSON renderers never did).
#[test]
fn an_imported_message_cannot_drive_the_terminal_through_csv() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rec = local_with_record(dir);
    rec["experiment"]["hosts"][0]["hostname"] = "node-b".into();
    rec["variants"][0]["runs"][0]["message"] =
        "ok\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}gnp.exe".into();
    rec["variants"][0]["runs"][0]["allocator_detected"] = "glibc\u{1b}[31m".into();
    std::fs::write(dir.join("esc.json"), rec.to_string()).unwrap();
    ok(
        &out(dir, &["import", "--db", "esc.db", "esc.json"]),
        "import",
    );
    for flag in ["--csv", "--samples-csv"] {
        let csv = ok(&out(dir, &["report", "--db", "esc.db", flag, "-"]), flag);
        assert!(
            !csv.contains(['\u{1b}', '\u{7}', '\u{202e}']),
            "{flag} writes a raw escape: {csv:?}"
        );
    }
    let csv = ok(
        &out(dir, &["report", "--db", "esc.db", "--csv", "-"]),
        "--csv",
    );
    assert!(
        csv.contains("ok\\x1b]0;owned\\x07\\x1b[2J\\u{202e}gnp.exe"),
        "{csv}"
    );
    assert!(csv.contains("glibc\\x1b[31m"), "{csv}");
}

/// Item 14: an input larger than the stated limit (64 MiB) is refused naming it, before
/// it is parsed (before: read whole, `import /dev/zero` grew to 4 GB in 3 s).
#[test]
fn an_oversized_input_is_refused_naming_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = std::fs::File::create(dir.join("big.json")).unwrap();
    f.set_len((64 << 20) + 1).unwrap();
    let o = out(dir, &["import", "big.json"]);
    let text = stderr(&o);
    assert!(!o.status.success());
    assert!(
        text.contains("big.json: larger than the 64 MiB a record may be"),
        "{text}"
    );
    assert!(
        !dir.join("memtrial.db").exists(),
        "a refused import made a database"
    );
}

/// Minor: an experiment whose memtrial was SIGKILLed mid-run lists as interrupted, not
/// running for ever; and `run --resume` finishes it.
#[test]
fn a_sigkilled_experiment_lists_as_interrupted_and_resumes() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut victim = spawn(
        dir,
        &quiet_run(
            2,
            "glibc",
            &[],
            &[
                "/bin/sh",
                "-c",
                "test -e go && exit 0; touch go; exec sleep 30",
            ],
        ),
    );
    wait_for_first_run(dir);
    victim.kill().unwrap();
    victim.wait().unwrap();
    assert_eq!(
        listed(dir, "memtrial.db"),
        vec![("interrupted".to_string(), "0/2".to_string())]
    );
    ok(&out(dir, &["run", "--resume", "--quiet"]), "resume");
    assert_eq!(
        listed(dir, "memtrial.db"),
        vec![("complete".to_string(), "2/2".to_string())]
    );
}

/// A damaged database whose plan has no command: `run --resume` refuses, never panics.
#[test]
fn a_stored_plan_without_a_command_is_refused_not_a_panic() {
    if need_cgroups().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    one_local_run(dir, "run");
    let c = rusqlite::Connection::open(dir.join("memtrial.db")).unwrap();
    c.execute(
        "UPDATE experiments SET status = 'interrupted',
            plan_json = json_set(plan_json, '$.command', json('[]'))",
        [],
    )
    .unwrap();
    drop(c);
    let o = out(dir, &["run", "--resume"]);
    let text = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("its stored plan has no command"), "{text}");
}

/// Waits (at most 30 s) until the workload's first run has made `dir/go`.
fn wait_for_first_run(dir: &Path) {
    for _ in 0..600 {
        if dir.join("go").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(dir.join("go").exists(), "the first run never started");
}

/// Another application's SQLite database, as its own migrations left it.
fn foreign_database(path: &Path, tables: &str) -> Vec<u8> {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(&format!("{tables} PRAGMA user_version = 3;"))
        .unwrap();
    drop(c);
    std::fs::read(path).unwrap()
}

/// Issue 38, item 5: `list`, `report`, `recommend` and `run` pointed at another
/// program's database refuse it in one line and leave it byte for byte as it was (before:
/// `list` added 12 tables and set its user_version to 11; with a table named `runs` the
/// error was a 143-line SQL dump).
#[test]
fn another_programs_database_is_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (name, tables) in [
        (
            "app.db",
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE orders (id INTEGER);",
        ),
        (
            "runs.db",
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, job TEXT, started TEXT);",
        ),
    ] {
        let db = dir.join(name);
        let before = foreign_database(&db, tables);
        for args in [
            &["list"][..],
            &["report"],
            &["recommend"],
            &["report", "--soak"],
            &["run", "--resume"],
            &["run", "--runs", "1", "--variants", "glibc", "--", "/bin/true"],
        ] {
            let o = out(dir, &[&["--db", name][..], args].concat());
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
            assert!(
                e.contains("another program's SQLite database")
                    && e.contains("memtrial leaves it untouched"),
                "{args:?}: {e}"
            );
            assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
            assert_eq!(
                std::fs::read(&db).unwrap(),
                before,
                "{args:?} changed {name}"
            );
            assert!(!dir.join(format!("{name}-journal")).exists());
        }
    }
}

/// Issue 38, item 12: what is not a database file gets a hint, before any run: a directory,
/// a file that is not SQLite, a device (before: `--db /dev/null` left a world-writable
/// `/dev/null-journal`, the others SQLite's bare words).
#[test]
fn what_is_not_a_database_file_is_said_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("store")).unwrap();
    std::fs::write(dir.join("notes.txt"), "my notes\n").unwrap();
    let journal_before = Path::new("/dev/null-journal").exists();
    let marker = dir.join("ran");
    let command = ["/bin/sh", "-c", "touch ran"];
    for (db, says) in [
        (
            "store",
            "store is a directory: give --db a file's path, e.g. --db store/memtrial.db",
        ),
        (
            "notes.txt",
            "notes.txt is not an SQLite database (it begins with \"my notes\\n\")",
        ),
        ("/dev/null", "/dev/null is not a regular file"),
    ] {
        for args in [
            quiet_run(1, "glibc", &["--db", db], &command),
            vec!["list".into(), "--db".into(), db.into()],
        ] {
            let o = out(dir, &args);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{db}: {e}");
            assert!(e.contains(says), "{db}: {e}");
        }
        assert!(!marker.exists(), "{db}: the workload ran");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "my notes\n"
    );
    if !journal_before {
        assert!(
            !Path::new("/dev/null-journal").exists(),
            "--db /dev/null left /dev/null-journal"
        );
    }
}
