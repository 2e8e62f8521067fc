//! `--probe jvm`: Native Memory Tracking read with jcmd from a real JVM, and its absence
//! with a reason when the workload is no JVM.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use memtrial::record::{Experiment, RunStatus};
use memtrial::store::Store;

use crate::common::*;

const JDK: &str = "openjdk-17-jdk-headless";
const MIB: f64 = 1024.0 * 1024.0;

/// java, javac and jcmd (which answers `-h`, not `--version`).
fn need_jdk() -> bool {
    need_program("java", JDK)
        && need_program("javac", JDK)
        && require(
            "jcmd",
            &format!("install with: apt-get install {JDK}"),
            || {
                Command::new("jcmd")
                    .arg("-h")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            },
        )
}

/// `tests/fixtures/java/NativeThreads.java` compiled into `dir`.
fn compile_native_threads(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/java/NativeThreads.java");
    let classes = dir.join("classes");
    let out = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg(&src)
        .output()
        .expect("run javac");
    assert!(
        out.status.success(),
        "javac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    classes
}

fn stored(db: &Path) -> Experiment {
    let store = Store::open_existing(db).expect("the run's database");
    let id = store.latest_id().expect("an experiment");
    store.load(id).expect("load the experiment")
}

#[test]
fn jvm_probe_reads_native_memory_tracking() {
    if !need_jdk() {
        return;
    }
    let build = tempfile::tempdir().unwrap();
    let classes = compile_native_threads(build.path());
    let db = build.path().join("m.db");
    // A small initial heap, so that NMT's committed total is near the RSS; the direct
    // buffers need more than the default direct-memory limit of -Xmx64m would give.
    let r = memtrial_in_tmp(&[
        "run",
        "--db",
        db.to_str().unwrap(),
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--probe",
        "jvm",
        "--",
        "java",
        "-Xms32m",
        "-Xmx128m",
        "-cp",
        classes.to_str().unwrap(),
        "NativeThreads",
        "50",
        "64",
        "6",
    ]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let exp = stored(&db);
    let run = &exp.runs[0];
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.message);
    let jvm = run.inside.runtime("jvm").unwrap_or_else(|| {
        panic!(
            "no jvm view; absent: {:?}\n{}",
            run.inside.absent,
            r.explain()
        )
    });
    let max = |name: &str| {
        jvm.figure(name)
            .unwrap_or_else(|| panic!("no figure {name} in {:?}", jvm.figures))
            .max
    };
    assert_eq!(jvm.processes, 1);
    assert!(max("threads") >= 50.0, "threads {}", max("threads"));
    assert!(
        max("committed.other") >= 64.0 * MIB,
        "committed.other {}",
        max("committed.other")
    );
    assert!(max("committed_total") > 0.0);
    assert!(max("committed.java_heap") > 0.0);
    assert!(jvm.figure("rss_outside_nmt").is_some());
    assert!(
        max("rss") > 64.0 * MIB,
        "the JVM's RSS at the read holds the buffers"
    );
    let series = jvm
        .series
        .iter()
        .find(|s| s.name == "committed_total")
        .unwrap();
    assert!(!series.points.is_empty());
    assert!(jvm.version.as_deref().is_some_and(|v| !v.is_empty()));
    let note = jvm.note.as_deref().unwrap_or("");
    assert!(note.contains("CPU") && note.contains("JNI"), "{note}");
    assert!(run.inside.absence("jvm").is_none());
    // jcmd is memtrial's child, never a process of the run.
    assert!(
        run.samples.iter().all(|s| s.processes == 1),
        "{:?}",
        run.samples.iter().map(|s| s.processes).collect::<Vec<_>>()
    );
}

#[test]
fn jvm_probe_on_a_program_that_is_no_jvm_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let r = memtrial_in_tmp(&[
        "run",
        "--db",
        db.to_str().unwrap(),
        "--runs",
        "1",
        "--variants",
        "glibc",
        "--probe",
        "jvm",
        "--",
        "sleep",
        "1",
    ]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let exp = stored(&db);
    let run = &exp.runs[0];
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.message);
    assert!(run.inside.runtime("jvm").is_none());
    let why = run.inside.absence("jvm").expect("an absence for jvm");
    assert!(why.contains("no JVM"), "{why}");
}
