//! `memtrial judge` against a real Prometheus (Debian's, on loopback) scraping memtrial's
//! exporter every second: three groups of real processes holding known heaps — a baseline of
//! 40, 60 and 80 MiB, a twin of the same sizes, a lean group of 10, 15 and 20 MiB — each
//! process a "pod" (`--per-process`). The lean group is found lower, significantly and by
//! about the right ratio; the twin's interval includes 1; bad input names what is wrong.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::exporter::{free_port, query, start_exporter, start_prometheus, wait_for, Killed};

/// The `live` fixture under `name` (its comm, so its group), holding `mib` MiB.
fn start_live(dir: &Path, name: &str, mib: u32) -> Killed {
    let p = dir.join(name);
    if !p.exists() {
        std::fs::copy(fixture("live"), &p).expect("copy the fixture");
    }
    Killed(
        Command::new(&p)
            .args([mib.to_string().as_str(), "300"])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn live"),
    )
}

fn judge(args: &[&str]) -> Run {
    memtrial_in_tmp(&[&["judge"], args].concat())
}

#[test]
fn judge_finds_the_leaner_group_and_not_a_twin() {
    if !(need_c_compiler() && need_file("/usr/bin/prometheus", "prometheus")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let id = std::process::id();
    let (base, twin, lean) = (format!("jb{id}"), format!("jt{id}"), format!("jl{id}"));
    let mut procs = Vec::new();
    for (name, sizes) in [
        (&base, [40, 60, 80]),
        (&twin, [40, 60, 80]),
        (&lean, [10, 15, 20]),
    ] {
        for mib in sizes {
            procs.push(start_live(dir.path(), name, mib));
        }
    }
    let exporter = start_exporter(
        &memtrial(),
        &["--match", &format!("^(jb|jt|jl){id}$"), "--per-process"],
        &[],
    );
    let (_prom, prom) = start_prometheus(dir.path(), exporter.addr);
    let url = format!("http://{prom}");
    wait_for("nine pods in Prometheus", 60, || {
        query(
            prom,
            &format!("count(memtrial_process_resident_bytes{{group=~\"j[btl]{id}\"}})"),
        )
        .filter(|n| *n == 9.0)
    });
    // 30 s of scrapes: ten blocks of 3 s.
    std::thread::sleep(Duration::from_secs(31));
    let sel = |g: &str| format!("group=\"{g}\"");
    let r = judge(&[
        "--prometheus",
        &url,
        "--baseline",
        &sel(&base),
        "--variant",
        &format!("lean={}", sel(&lean)),
        "--variant",
        &format!("twin={}", sel(&twin)),
        "--since",
        "30s",
        "--block",
        "3s",
        "--json",
        "j.json",
    ]);
    assert_eq!(r.code(), 0, "{}", r.explain());
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(r.dir.path().join("j.json")).unwrap())
            .unwrap();
    // The metric was found by itself: the exporter's per-process series.
    assert_eq!(j["metric"], "memtrial_process_resident_bytes", "{j}");
    let group = |name: &str| {
        j["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {j}"))
            .clone()
    };
    let b = group("baseline");
    assert_eq!(b["pods"], 3, "{b}");
    assert!(b["blocks_with_data"].as_u64().unwrap() >= 9, "{b}");
    let median = b["median"].as_f64().unwrap() / (1 << 20) as f64;
    assert!(
        (58.0..66.0).contains(&median),
        "baseline median {median} MiB"
    );
    let l = group("lean");
    assert_eq!(l["verdict"], "lower", "{l}");
    let ratio = l["ratio"].as_f64().unwrap();
    // 15 MiB against 60 MiB, each with a MiB or so of the program's own.
    assert!((0.2..0.35).contains(&ratio), "{l}");
    assert!(l["ci95"][1].as_f64().unwrap() < 1.0, "{l}");
    let t = group("twin");
    assert_eq!(t["verdict"], "no_significant_difference", "{t}");
    let (lo, hi) = (
        t["ci95"][0].as_f64().unwrap(),
        t["ci95"][1].as_f64().unwrap(),
    );
    assert!(lo <= 1.0 && hi >= 1.0, "{t}");
    let text = r.stdout();
    assert!(
        text.contains("memory from memtrial_process_resident_bytes")
            && text.contains("lean: ")
            && text.contains("lower than the baseline, significantly"),
        "{text}"
    );

    // A selector that matches nothing is named, with the window.
    let r = judge(&[
        "--prometheus",
        &url,
        "--baseline",
        &sel(&base),
        "--variant",
        "ghost=group=\"no-such-group\"",
        "--since",
        "30s",
        "--block",
        "3s",
    ]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert!(
        r.stderr().contains(
            "ghost: memtrial_process_resident_bytes{group=\"no-such-group\"} matches no series"
        ),
        "{}",
        r.stderr()
    );
    // A selector Prometheus cannot parse: its own words.
    let r = judge(&[
        "--prometheus",
        &url,
        "--baseline",
        "group=~",
        "--variant",
        "x=group=\"a\"",
        "--metric",
        "memtrial_process_resident_bytes",
    ]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert!(
        r.stderr()
            .contains(&format!("Prometheus at {url} refused the query")),
        "{}",
        r.stderr()
    );
    drop(procs);
}

#[test]
fn judge_bad_input_names_the_flag() {
    // Nothing listens on this loopback port: the URL is named.
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let url = format!("http://{addr}");
    let r = judge(&[
        "--prometheus",
        &url,
        "--baseline",
        "a=\"b\"",
        "--variant",
        "x=a=\"c\"",
    ]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert!(
        r.stderr()
            .contains(&format!("cannot reach Prometheus at {url}")),
        "{}",
        r.stderr()
    );
    for (args, says) in [
        (
            vec![
                "--prometheus",
                "https://p:9090",
                "--baseline",
                "a=\"b\"",
                "--variant",
                "x=a=\"c\"",
            ],
            "https is not spoken",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--baseline",
                "{a=\"b\"}",
                "--variant",
                "x=a=\"c\"",
            ],
            "--baseline",
        ),
        (
            vec!["--prometheus", &url, "--baseline", "a=\"b\""],
            "at least one --variant",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--baseline",
                "a=\"b\"",
                "--variant",
                "no selector",
            ],
            "give NAME=SELECTOR",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--baseline",
                "a=\"b\"",
                "--variant",
                "x=a=\"c\"",
                "--since",
                "0s",
            ],
            "--since",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--baseline",
                "a=\"b\"",
                "--variant",
                "x=a=\"c\"",
                "--metric",
                "m{a=\"b\"}",
            ],
            "--metric",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--selector",
                "a=\"b\"",
                "--before",
                "2026-11-01T00:00Z",
            ],
            "TIME/DURATION",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--selector",
                "a=\"b\"",
                "--before",
                "yesterday/7d",
            ],
            "RFC 3339",
        ),
        (
            vec![
                "--prometheus",
                &url,
                "--selector",
                "a=\"b\"",
                "--before",
                "2999-01-01T00:00Z/1d",
            ],
            "not in the past",
        ),
    ] {
        let r = judge(&args);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.explain());
        assert!(r.stderr().contains(says), "{args:?}: {}", r.stderr());
    }
}
