//! Trust boundaries of what `report`, `inspect` and the renderers read and print (issue 19):
//! a record from another host is data — the files it names are never opened — and what
//! other processes put in their names reaches the terminal escaped.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A watchdog, not a timing claim: a report that reads a FIFO or `/dev/zero` never ends.
const HANG: Duration = Duration::from_secs(120);

/// Runs memtrial in `dir` with a secret in its environment, under a 1 GiB address-space
/// limit (an unbounded read fails instead of taking the machine), killed after [`HANG`].
fn memtrial_watched(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(memtrial());
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("MEMTRIAL_TEST_SECRET", "environ-secret-7f3a")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start memtrial");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "memtrial {args:?} still running after {HANG:?}: it hung\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

fn both(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One failed run per variant, each writing a line to its stderr: the runs whose logs a
/// report shows.
fn failed_runs(dir: &Path) -> Value {
    let o = memtrial_watched(
        dir,
        &[
            "run",
            "--no-probes",
            "--runs",
            "1",
            "--seed",
            "1",
            "--variants",
            "glibc",
            "--variant",
            "environ=T=1",
            "--variant",
            "fifo=T=2",
            "--variant",
            "zero=T=3",
            "--variant",
            "link=T=4",
            "--db",
            "a.db",
            "--json",
            "out.json",
            "--",
            "/bin/sh",
            "-c",
            "x=line; echo own-log-$x >&2; exit 3",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert_eq!(
        both(&o).matches("| own-log-line").count(),
        5,
        "each failed run's own log is shown: {}",
        both(&o)
    );
    serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).expect("out.json"))
        .expect("JSON")
}

/// A record imported from elsewhere names `/proc/self/environ`, a FIFO, `/dev/zero` and a
/// symbolic link to a secret as its runs' stderr: `report` opens none of them, says where
/// the log is, and returns.
#[test]
fn report_never_opens_the_files_an_imported_record_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut doc = failed_runs(dir);
    std::fs::write(dir.join("secret"), "file-secret-91c2\n").expect("secret");
    mkfifo(&dir.join("fifo"));
    std::os::unix::fs::symlink(dir.join("secret"), dir.join("link")).expect("symlink");
    let paths = [
        ("glibc", dir.join("secret").display().to_string()),
        ("environ", "/proc/self/environ".to_string()),
        ("fifo", dir.join("fifo").display().to_string()),
        ("zero", "/dev/zero".to_string()),
        ("link", dir.join("link").display().to_string()),
    ];
    for v in doc["variants"].as_array_mut().expect("variants") {
        let name = v["name"].as_str().expect("name").to_string();
        let (_, path) = paths.iter().find(|(n, _)| *n == name).expect("variant");
        for r in v["runs"].as_array_mut().expect("runs") {
            r["stderr_path"] = Value::String(path.clone());
        }
    }
    std::fs::write(dir.join("hostile.json"), doc.to_string()).expect("write");
    let imp = memtrial_watched(dir, &["import", "--db", "b.db", "hostile.json"]);
    assert_eq!(imp.status.code(), Some(0), "{}", both(&imp));

    let rep = memtrial_watched(dir, &["report", "--db", "b.db"]);
    let text = both(&rep);
    assert_eq!(rep.status.code(), Some(0), "{text}");
    for leak in [
        "file-secret-91c2",
        "environ-secret-7f3a",
        "own-log-line",
        "\0",
    ] {
        assert!(
            !text.contains(leak),
            "{leak:?} leaked into the report:\n{text}"
        );
    }
    assert!(!text.contains("last lines of"), "{text}");
    assert_eq!(
        text.matches("not read here").count(),
        5,
        "each failed run says its log is elsewhere:\n{text}"
    );
}

/// memtrial's own log of a run, replaced by a symbolic link to a secret or by a FIFO, is
/// not followed nor waited on; the logs left as they were are still shown.
#[test]
fn report_reads_its_own_logs_only_as_regular_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    failed_runs(dir);
    std::fs::write(dir.join("secret"), "file-secret-91c2\n").expect("secret");
    let logs = dir.join("a-logs/exp-1");
    let mut replaced = 0;
    for entry in std::fs::read_dir(&logs).expect("logs") {
        let p = entry.expect("entry").path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !name.ends_with(".stderr") {
            continue;
        }
        if name.contains("-link.") {
            std::fs::remove_file(&p).expect("rm");
            std::os::unix::fs::symlink(dir.join("secret"), &p).expect("symlink");
            replaced += 1;
        } else if name.contains("-fifo.") {
            std::fs::remove_file(&p).expect("rm");
            mkfifo(&p);
            replaced += 1;
        }
    }
    assert_eq!(replaced, 2);
    let rep = memtrial_watched(dir, &["report", "--db", "a.db"]);
    let text = both(&rep);
    assert_eq!(rep.status.code(), Some(0), "{text}");
    assert!(!text.contains("file-secret-91c2"), "{text}");
    assert_eq!(text.matches("| own-log-line").count(), 3, "{text}");
    assert!(text.contains("not a regular file"), "{text}");

    // The log directory itself replaced by a link to a directory of the same shape whose
    // logs hold a secret: not followed either.
    let decoy = dir.join("decoy");
    std::fs::create_dir(&decoy).expect("decoy");
    for entry in std::fs::read_dir(&logs).expect("logs") {
        let p = entry.expect("entry").path();
        if let Some(name) = p.file_name() {
            std::fs::write(decoy.join(name), "file-secret-91c2\n").expect("decoy log");
        }
    }
    std::fs::rename(&logs, dir.join("a-logs/exp-1.moved")).expect("move");
    std::os::unix::fs::symlink(&decoy, &logs).expect("symlink");
    let rep = memtrial_watched(dir, &["report", "--db", "a.db"]);
    let text = both(&rep);
    assert_eq!(rep.status.code(), Some(0), "{text}");
    assert!(!text.contains("file-secret-91c2"), "{text}");
    assert_eq!(text.matches("its stderr is not shown").count(), 5, "{text}");
}

/// Every run of a real experiment with its figures edited to `value`, imported into
/// `db`: the record another host could send.
fn import_edited(dir: &Path, db: &str, edit: impl Fn(&mut Value)) {
    let o = memtrial_watched(
        dir,
        &[
            "run",
            "-q",
            "--no-probes",
            "--runs",
            "1",
            "--seed",
            "1",
            "--variants",
            "glibc,arena1",
            "--db",
            "src.db",
            "--json",
            "src.json",
            "--",
            "/bin/true",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("src.json")).expect("src.json"))
            .expect("JSON");
    for v in doc["variants"].as_array_mut().expect("variants") {
        for r in v["runs"].as_array_mut().expect("runs") {
            edit(r);
        }
    }
    std::fs::write(dir.join("edited.json"), doc.to_string()).expect("write");
    let imp = memtrial_watched(dir, &["import", "--db", db, "edited.json"]);
    assert_eq!(imp.status.code(), Some(0), "{}", both(&imp));
}

/// A wall time of 1.7976931348623157e308 s made the distribution chart's axis infinite and
/// plotters' key-point loop never ended: the HTML report renders, with its charts.
#[test]
fn html_report_renders_the_largest_finite_wall_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    import_edited(dir, "b.db", |r| {
        r["wall_seconds"] = serde_json::json!(f64::MAX);
    });
    let rep = memtrial_watched(dir, &["report", "-q", "--db", "b.db", "--html", "out.html"]);
    assert_eq!(rep.status.code(), Some(0), "{}", both(&rep));
    let html = std::fs::read_to_string(dir.join("out.html")).expect("out.html");
    assert!(html.contains("<svg"), "the charts are there");
    // Printed in a few characters, in the table and on the charts' axes alike.
    let table = memtrial_watched(dir, &["report", "--db", "b.db"]);
    let text = both(&table);
    assert!(text.contains("1.80e308 s"), "{text}");
    for (what, t) in [("table", &text), ("HTML", &html)] {
        assert!(
            !has_digit_run(t, 30),
            "a number of 30 digits or more in the {what}"
        );
    }
}

fn has_digit_run(t: &str, n: usize) -> bool {
    let mut run = 0;
    for c in t.chars() {
        run = if c.is_ascii_digit() { run + 1 } else { 0 };
        if run >= n {
            return true;
        }
    }
    false
}

/// A process killed and reaped when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real process whose name (`prctl(PR_SET_NAME)`) and argv[0] (`exec -a`) hold a clear
/// screen, a window title, a BEL, a newline and a bidi override: `inspect` shows each as
/// an escape, on its line.
#[test]
fn inspect_escapes_the_targets_name_and_command_line() {
    if !need_python3() {
        return;
    }
    // The interpreter itself: a version manager's shim would exec it again, argv[0] lost.
    let py = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let py = String::from_utf8_lossy(&py.stdout).trim().to_string();
    let child = Command::new("bash")
        .env("PY", &py)
        .args([
            "-c",
            r#"exec -a $'\e]0;pwned-title\a\e[2Jargv-\u202ezero\nline' "$PY" -c '
import ctypes, time
ctypes.CDLL(None).prctl(15, b"\x1b[2J\x07nm\nx", 0, 0, 0)
print("ready", flush=True)
time.sleep(120)
'"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bash");
    let mut child = Killed(child);
    let pid = child.0.id();
    let mut line = String::new();
    let out = child.0.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("ready");
    assert_eq!(line.trim(), "ready");
    let comm = std::fs::read(format!("/proc/{pid}/comm")).expect("comm");
    assert!(comm.starts_with(b"\x1b[2J\x07nm\nx"), "{comm:?}");

    let tmp = tempfile::tempdir().expect("tempdir");
    let pid = pid.to_string();
    for args in [
        vec!["inspect", pid.as_str()],
        vec!["inspect", "--maps", pid.as_str()],
    ] {
        let o = memtrial_watched(tmp.path(), &args);
        let text = both(&o);
        assert_eq!(o.status.code(), Some(0), "{text}");
        for raw in ['\x1b', '\x07', '\u{202e}'] {
            assert!(!text.contains(raw), "{args:?} printed {raw:?} raw:\n{text}");
        }
        assert!(!text.lines().any(|l| l.starts_with('x')), "{text}");
        assert!(text.contains(r"\x1b[2J\x07nm\nx"), "{text}");
        if args.len() == 2 {
            // The screen view shows the command line.
            assert!(!text.lines().any(|l| l.starts_with("line")), "{text}");
            assert!(
                text.contains(r"$'\x1b]0;pwned-title\x07\x1b[2Jargv-\u202ezero\nline'"),
                "{text}"
            );
        }
    }
}

/// Text from a record that a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab,
/// CR first) is written with a leading `'`; the figures stay numbers.
#[test]
fn csv_cells_from_a_record_never_start_a_formula() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    import_edited(dir, "b.db", |r| {
        r["message"] = Value::String("=HYPERLINK(\"http://127.0.0.1/x\",\"open\")".into());
        r["allocator_detected"] = Value::String("@SUM(1+1)".into());
    });
    let rep = memtrial_watched(dir, &["report", "-q", "--db", "b.db", "--csv", "out.csv"]);
    assert_eq!(rep.status.code(), Some(0), "{}", both(&rep));
    let text = std::fs::read_to_string(dir.join("out.csv")).expect("out.csv");
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let headers = rdr.headers().expect("headers").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect(name);
    let mut rows = 0;
    for rec in rdr.records() {
        let rec = rec.expect("row");
        rows += 1;
        for cell in rec.iter() {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{cell:?} in {text}"
            );
        }
        assert_eq!(
            &rec[col("message")],
            "'=HYPERLINK(\"http://127.0.0.1/x\",\"open\")"
        );
        assert_eq!(&rec[col("allocator_detected")], "'@SUM(1+1)");
        assert!(rec[col("peak_rss_bytes")].parse::<u64>().is_ok());
    }
    assert_eq!(rows, 2, "{text}");
}
