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
    let r = run_with(
        1,
        "glibc",
        &["--db", db.to_str().unwrap(), "--probe", "jvm"],
        &[
            "java",
            "-Xms32m",
            "-Xmx128m",
            "-cp",
            classes.to_str().unwrap(),
            "NativeThreads",
            "50",
            "64",
            // 15 s: NMT is read at most every 5 s, and beside the suite's other tests a JVM
            // of 6 s was read once, with its start-up still under way (no thread stacks yet).
            "15",
        ],
    );
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
    // NMT's reservations found in the JVM's mappings: the Java heap (-Xmx128m) and the class
    // space by their exact size, the code cache as the executable stretch, and the thread
    // stacks by their shape, as many as NMT counts threads (give or take the JVM's few
    // threads NMT starts later or does not count).
    assert_eq!(max("mmap_reserved.java_heap"), 128.0 * MIB);
    assert!(
        max("resident.java_heap") > 0.0 && max("resident.java_heap") <= 128.0 * MIB,
        "{:?}",
        jvm.figures
    );
    assert!(
        jvm.figure("resident.class_space").is_some(),
        "{:?}",
        jvm.figures
    );
    assert!(
        max("resident.code_cache") > 0.0 && max("mapped.code_cache") >= max("resident.code_cache"),
        "{:?}",
        jvm.figures
    );
    let (stacks, threads) = (max("thread_stacks_mapped"), max("threads"));
    assert!(
        stacks >= threads - 2.0 && stacks <= threads + 16.0,
        "{stacks} stacks by shape vs {threads} threads by NMT"
    );
    assert!(max("resident.thread_stacks") > 0.0);
    // The run's regions: the kinds sum to the mappings' Rss, within 1% of VmRSS (plus the
    // kernel's per-CPU counter slack) read around the smaps.
    let g = run.regions.as_ref().expect("a regions read");
    let sum: u64 = g.regions.by_kind.values().sum();
    assert_eq!(sum, g.regions.rss_bytes);
    let slack = 64 * 4096 * memtrial::linux::host::online_cpus() as u64;
    let lo = g.status_rss_bytes.min(g.status_rss_after_bytes);
    let hi = g.status_rss_bytes.max(g.status_rss_after_bytes);
    assert!(
        sum + lo / 100 + slack >= lo && sum <= hi + hi / 100 + slack,
        "kinds sum to {sum}, VmRSS {lo}..{hi}"
    );
    let text = r.stdout();
    assert!(
        text.contains("the JVM's regions (NMT's reservations found in its mappings")
            && text.contains("Java heap 128 MiB reserved, ")
            && text.contains("thread stacks, "),
        "{text}"
    );
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
    let r = run_with(
        1,
        "glibc",
        &["--db", db.to_str().unwrap(), "--probe", "jvm"],
        &["sleep", "1"],
    );
    assert_eq!(r.code(), 0, "{}", r.explain());
    let exp = stored(&db);
    let run = &exp.runs[0];
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.message);
    assert!(run.inside.runtime("jvm").is_none());
    let why = run.inside.absence("jvm").expect("an absence for jvm");
    assert!(why.contains("no JVM"), "{why}");
}
