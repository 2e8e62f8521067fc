//! Bad input through the real binary (issue 13, items 4–7): every number out of its
//! range, malformed environment keys, more connections than open files, and responses
//! with many headers. Each is refused up front with exit 2 and a message naming the flag
//! and the range — never a panic (101), an abort, or a silent wrap.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

use serde_json::Value;

use crate::common::*;

/// Runs memtrial in a fresh directory holding `files`; checks exit 2, no panic, and
/// every `expect` in stderr.
fn refused(files: &[(&str, &str)], args: &[&str], expect: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = Command::new(memtrial())
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "{args:?}: expected '{e}' in:\n{stderr}");
    }
    assert!(
        !dir.path().join("memtrial.db").exists(),
        "{args:?}: nothing may run"
    );
    stderr
}

const NOWHERE: &str = "http://127.0.0.1:1/";

#[test]
fn interval_1e300_is_refused_not_a_panic() {
    refused(
        &[],
        &["run", "--interval", "1e300", "--", "true"],
        &["--interval 1e300: must be from 10ms to 1h"],
    );
}

#[test]
fn timeout_1e300_is_refused_not_a_panic() {
    refused(
        &[],
        &["run", "--timeout", "1e300", "--", "true"],
        &["--timeout 1e300: must be from 1ms to 7days"],
    );
}

#[test]
fn plan_interval_1e300_is_refused_not_a_panic() {
    refused(
        &[("plan.toml", "command = \"true\"\ninterval = \"1e300\"\n")],
        &["run", "--plan", "plan.toml"],
        &["--interval 1e300: must be from 10ms to 1h"],
    );
}

#[test]
fn load_duration_1e300_is_refused_not_a_panic() {
    refused(
        &[],
        &["load", "--url", NOWHERE, "--duration", "1e300"],
        &["--duration 1e300: must be from 1ms to 1day"],
    );
}

#[test]
fn load_rate_and_speed_1e_300_are_refused_not_a_thread_panic() {
    refused(
        &[],
        &["load", "--url", NOWHERE, "--rate", "1e-300"],
        &["--rate 1e-300: must be a number from 0.001 to 10000000"],
    );
    let log = "127.0.0.1 - - [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 1\n";
    refused(
        &[("access.log", log)],
        &[
            "load",
            "--url",
            NOWHERE,
            "--replay",
            "access.log",
            "--speed",
            "1e-300",
        ],
        &["--speed 1e-300: must be a number from 0.001 to 1000000"],
    );
}

#[test]
fn load_duration_1e18_and_rate_1e300_are_refused_not_printed_in_300_digits() {
    refused(
        &[],
        &["load", "--url", NOWHERE, "--duration", "1e18"],
        &["--duration 1e18: must be from 1ms to 1day"],
    );
    let e = refused(
        &[],
        &["load", "--url", NOWHERE, "--rate", "1e300"],
        &["--rate 1e300: must be"],
    );
    assert!(e.len() < 300, "{e}");
}

#[test]
fn warmup_overflow_is_refused() {
    refused(
        &[],
        &["run", "--runs", "2", "--warmup", "4294967294", "--", "true"],
        &["--warmup 4294967294: must be from 0 to 10000"],
    );
}

#[test]
fn runs_4294967295_is_refused_not_an_abort() {
    refused(
        &[],
        &["run", "--runs", "4294967295", "--", "true"],
        &["--runs 4294967295: must be from 1 to 10000"],
    );
}

#[test]
fn pids_limit_u64_max_is_refused_before_any_run() {
    refused(
        &[],
        &["run", "--pids-limit", "18446744073709551615", "--", "true"],
        &["--pids-limit 18446744073709551615: must be from 2 to 4194304"],
    );
}

#[test]
fn other_numbers_out_of_range_name_the_flag() {
    for (args, expect) in [
        (
            vec!["run", "--seed", "18446744073709551615", "--", "true"],
            "--seed 18446744073709551615: must be from 0 to 9007199254740991",
        ),
        (
            vec!["run", "--memory-limit", "1000T", "--", "true"],
            "--memory-limit 1000T: must be from 4M to 64T",
        ),
        (
            vec!["run", "--cpuset", "0-4294967295", "--", "true"],
            "--cpuset 0-4294967295",
        ),
        (
            vec![
                "run",
                "--url",
                "http://127.0.0.1:{port}/",
                "--cooldown",
                "1e300",
                "--",
                "true",
            ],
            "--cooldown 1e300: must be from 0s to 1day",
        ),
        (
            vec![
                "run",
                "--url",
                "http://127.0.0.1:{port}/",
                "--ready-timeout",
                "2h",
                "--",
                "true",
            ],
            "--ready-timeout 2h: must be from 1ms to 1h",
        ),
        (
            vec!["load", "--url", NOWHERE, "--timeout", "1e300"],
            "--timeout 1e300: must be from 1ms to 1h",
        ),
        (
            vec!["load", "--url", NOWHERE, "-t", "5000", "-c", "6000"],
            "--threads 5000: must be from 1 to 1024",
        ),
        (
            vec!["workload", "fragment", "--seconds", "1e300"],
            "--seconds 1e300: must be from 1ms to 1day",
        ),
        (
            vec!["workload", "fragment", "--live", "0"],
            "--live 0: must be from 1 to 10000000",
        ),
        (
            vec!["inspect", "1", "--watch", "1s", "--interval", "1e300"],
            "--interval 1e300: must be from 10ms to 1h",
        ),
        (vec!["inspect", "--top", "0"], "--top 0: must be from 1"),
        (vec!["demo", "--runs", "4294967295"], "--runs 4294967295"),
    ] {
        refused(&[], &args, &[expect]);
    }
}

#[test]
fn duplicate_env_key_in_variant_is_refused() {
    refused(
        &[],
        &["run", "--variant", "x=A=1 A=2", "--", "true"],
        &["variant 'x' sets A twice"],
    );
}

#[test]
fn env_key_in_spec_and_env_table_is_refused() {
    let plan =
        "command = \"true\"\n[[variant]]\nname = \"x\"\nspec = \"A=1\"\nenv = { A = \"2\" }\n";
    refused(
        &[("plan.toml", plan)],
        &["run", "--plan", "plan.toml"],
        &["variant 'x' sets A twice"],
    );
}

#[test]
fn plan_env_key_with_equals_is_refused() {
    let plan = "command = \"true\"\n[[variant]]\nname = \"x\"\nenv = { \"A=B\" = \"1\" }\n";
    refused(
        &[("plan.toml", plan)],
        &["run", "--plan", "plan.toml"],
        &["variant 'x': environment key \"A=B\" contains '='"],
    );
}

#[test]
fn empty_or_nul_env_keys_are_refused() {
    refused(
        &[],
        &["run", "--variant", "x='=1'", "--", "true"],
        &["variant 'x': environment key \"\" is empty"],
    );
    let plan = "command = \"true\"\n[[variant]]\nname = \"y\"\nenv = { \"A\\u0000B\" = \"1\" }\n";
    refused(
        &[("plan.toml", plan)],
        &["run", "--plan", "plan.toml"],
        &["variant 'y'", "NUL"],
    );
    let plan = "command = \"true\"\n[[variant]]\nname = \"z\"\nenv = { A = \"1\\u0000\" }\n";
    refused(
        &[("plan.toml", plan)],
        &["run", "--plan", "plan.toml"],
        &["variant 'z'", "NUL"],
    );
}

/// memtrial under a shell that first sets the open-file limits.
fn with_nofile(soft: u32, hard: u32, args: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn {soft} && ulimit -Hn {hard} && exec {} {args}",
            memtrial().display()
        ))
        .current_dir(dir.path())
        .output()
        .unwrap()
}

#[test]
fn too_many_connections_for_fd_limit() {
    let out = with_nofile(
        1024,
        4096,
        &format!("load --url {NOWHERE} --connections 100000 --duration 1s"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--connections 100000")
            && stderr.contains("open files")
            && stderr.contains("at most 4096"),
        "{stderr}"
    );
    // The same rule for a server trial.
    let out = with_nofile(
        1024,
        1024,
        "run --url 'http://127.0.0.1:{port}/' --connections 5000 -- true",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--connections 5000") && stderr.contains("open files"),
        "{stderr}"
    );
}

/// A keep-alive server on 127.0.0.1 answering every request with `headers` extra header
/// lines; stops when the test process ends.
fn server_with_headers(headers: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut response = String::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
    for i in 0..headers {
        response.push_str(&format!("X-Header-{i}: value {i}\r\n"));
    }
    response.push_str("\r\nok");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let response = response.clone();
            std::thread::spawn(move || serve(conn, response.as_bytes()));
        }
    });
    port
}

fn serve(conn: TcpStream, response: &[u8]) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
        }
        if w.write_all(response).is_err() {
            return;
        }
    }
}

fn load_json(port: u16, extra: &str) -> (Value, String) {
    let out = with_nofile(
        4096,
        4096,
        &format!("load --url http://127.0.0.1:{port}/ --duration 1s -c 2 --json - {extra}"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (doc, stderr)
}

#[test]
fn response_with_100_headers_is_accepted() {
    let port = server_with_headers(100);
    let (doc, stderr) = load_json(port, "");
    let r = &doc["result"];
    assert!(r["requests"].as_u64().unwrap() > 0, "{stderr}");
    assert_eq!(r["errors"]["other"], 0, "{r}");
    assert!(r.get("other_example").is_none(), "{r}");
}

#[test]
fn response_with_too_many_headers_says_why() {
    let port = server_with_headers(1100);
    let (doc, stderr) = load_json(port, "");
    let r = &doc["result"];
    assert!(r["errors"]["other"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(
        r["other_example"], "response with more than 1024 header lines",
        "{r}"
    );
    assert!(
        stderr.contains("first other error: response with more than 1024 header lines"),
        "{stderr}"
    );
}

#[test]
fn soft_fd_limit_is_raised_for_connections_when_the_hard_limit_allows() {
    let port = server_with_headers(0);
    let out = with_nofile(
        128,
        4096,
        &format!("load --url http://127.0.0.1:{port}/ --duration 1s -c 300 --json -"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("raised the open-file limit from 128 to"),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["result"]["errors"]["connect"], 0, "{doc}");
}

/// A flag that does not apply with `--resume` (the resumed experiment or soak runs its
/// stored plan) is refused by name before anything is opened, never parsed and ignored
/// (issue 38, item 14).
#[test]
fn flags_that_do_not_apply_with_resume_are_refused_by_name() {
    let said = refused(
        &[],
        &["run", "--resume", "--connections", "8", "--cooldown", "5s"],
        &["--connections", "--cooldown", "do not apply with --resume"],
    );
    assert!(!said.contains("no database"), "{said}");
    refused(
        &[],
        &["soak", "--resume", "--rate", "500", "--driver", "X"],
        &["--rate", "--driver", "do not apply with --resume"],
    );
    refused(
        &[],
        &["run", "--resume", "1", "--runs", "3", "--", "/bin/true"],
        &["--runs", "COMMAND (after --)", "do not apply with --resume"],
    );
    // What applies (where the results go) still does: the resume goes on to the store.
    refused(
        &[],
        &["run", "--resume", "--json", "out.json", "--quiet"],
        &["no database at memtrial.db"],
    );
}

/// Issue 38, item 12: `--pids-limit 1` leaves no room for the workload beside memtrial's
/// spawner in the run's cgroup: refused up front, saying so (before: every run failed with
/// a bare "Resource temporarily unavailable" from the spawner's fork).
#[test]
fn a_pids_limit_without_room_for_the_workload_is_refused_saying_why() {
    refused(
        &[],
        &["run", "--pids-limit", "1", "--", "true"],
        &["--pids-limit 1", "at least 2: memtrial's spawner"],
    );
}
