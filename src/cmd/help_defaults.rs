//! Help texts and what the commands apply cannot drift: every default a flag's help states
//! as a figure ("[default: 10m]", "[default: 5]", "[default: 0.3MiB]") is what the
//! command's own resolution applies when the flag is not given — read from what it
//! resolved, on a command line without the flag, never from a second copy of the value
//! (issue 42). Defaults clap applies itself (`default_value`) are printed by clap from the
//! value it applies and are not in these texts.

use std::time::Duration;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, WorkloadCommand};
use memtrial::units::{parse_duration, parse_size};

use super::ui::{printer, Ui};

/// A default as the command applied it, in the unit its help states it in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Applied {
    Time(Duration),
    Number(f64),
    Bytes(u64),
}

impl Applied {
    fn agrees(self, said: &str) -> bool {
        match self {
            Applied::Time(d) => parse_duration(said).is_ok_and(|s| s == d),
            Applied::Number(n) => said
                .parse::<f64>()
                .is_ok_and(|s| (s - n).abs() <= n.abs() * 1e-12),
            Applied::Bytes(b) => parse_size(said).is_ok_and(|s| s == b),
        }
    }
}

fn ms(v: u64) -> Applied {
    Applied::Time(Duration::from_millis(v))
}

fn secs(v: f64) -> Applied {
    Applied::Time(Duration::from_secs_f64(v))
}

fn number<T: Into<f64>>(v: T) -> Applied {
    Applied::Number(v.into())
}

/// The command line `args` (after `memtrial -q`), parsed as the binary parses it.
fn parse(args: &[&str]) -> (Cli, Ui) {
    let cli = Cli::try_parse_from([&["memtrial", "-q"], args].concat())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let ui = printer(&cli);
    (cli, ui)
}

fn run_plan(args: &[&str]) -> memtrial::plan::Plan {
    let (cli, ui) = parse(args);
    let Command::Run(run) = cli.command else {
        unreachable!()
    };
    let input = super::run::run_input(&run).unwrap();
    super::experiment::resolve_plan(input, &ui).unwrap().plan
}

fn soak_settings(args: &[&str]) -> memtrial::record::soak::SoakSettings {
    let (cli, ui) = parse(args);
    let Command::Soak(soak) = cli.command else {
        unreachable!()
    };
    super::soak::settings_from(&soak, &ui).unwrap()
}

/// A (command path, flag) whose help states a figure as its default, and what the
/// command applied without the flag.
type Stated = (&'static [&'static str], &'static str, Applied);

/// Each (command path, flag) whose help states a figure as its default, and what the
/// command applied without the flag.
fn applied() -> Vec<Stated> {
    [
        run_applied(),
        soak_applied(),
        load_applied(),
        cache_server_applied(),
    ]
    .concat()
}

/// `run` and `gate`: a plain, a server and a worker trial, and `--until-decided`.
fn run_applied() -> Vec<Stated> {
    const RUN: &[&str] = &["run", "gate"];
    let plain = run_plan(&["run", "--", "/bin/true"]);
    let server = run_plan(&["run", "--url", "http://127.0.0.1:9/", "--", "/bin/true"]);
    let server = server.server.expect("a server trial");
    let worker = run_plan(&["run", "--before", "true", "--", "/bin/true"]);
    let worker = worker.worker.expect("a worker trial");
    let until = {
        let (cli, _) = parse(&["run", "--until-decided", "--", "/bin/true"]);
        let Command::Run(run) = cli.command else {
            unreachable!()
        };
        super::run::until_rule(&run).unwrap().expect("a rule")
    };
    // Where a default is applied only when the figure is used (the report's require trees,
    // the run logs' bound), its one constant.
    let cut_off = memtrial::plan::settings::REQUIRE_CUT_OFF;
    let log_limit = memtrial::trial::logcap::DEFAULT_LIMIT;
    vec![
        (RUN, "runs", number(plain.runs)),
        (RUN, "warmup", number(plain.warmup)),
        (RUN, "interval", ms(plain.interval_ms)),
        (RUN, "probe-interval", ms(plain.probes.interval_ms)),
        (RUN, "require-cut-off", Applied::Bytes(cut_off)),
        (RUN, "max-runs", number(until.max_runs)),
        (
            &["run", "gate", "soak"],
            "log-limit",
            Applied::Bytes(log_limit),
        ),
        (RUN, "ready-timeout", ms(server.ready_timeout_ms)),
        (RUN, "warmup-duration", ms(server.warmup_ms)),
        (RUN, "duration", ms(server.duration_ms)),
        (RUN, "cooldown", ms(server.cooldown_ms)),
        (RUN, "connections", number(server.connections as f64)),
        (RUN, "request-timeout", ms(server.request_timeout_ms)),
        (RUN, "before", ms(worker.before_timeout_ms)),
    ]
}

/// `soak`: a worker soak, one until decided, and a server soak.
fn soak_applied() -> Vec<Stated> {
    const SOAK: &[&str] = &["soak"];
    let variants = ["soak", "--variants", "glibc,arena2"];
    let soak = soak_settings(
        &[
            &variants[..],
            &["--driver", "true", "--before", "true", "--duration", "1h"],
            &["--", "/bin/true"],
        ]
        .concat(),
    );
    let soak_worker = soak.plan.worker.clone().expect("a worker soak");
    let decided = soak_settings(
        &[
            &variants[..],
            &[
                "--driver",
                "true",
                "--until-decided",
                "--max-duration",
                "1h",
            ],
            &["--", "/bin/true"],
        ]
        .concat(),
    );
    let decided = decided.until_decided.expect("a rule");
    let served = soak_settings(
        &[
            &variants[..],
            &["--url", "http://127.0.0.1:{port}/", "--rate", "1"],
            &[
                "--duration",
                "1h",
                "--",
                "/bin/sh",
                "-c",
                "exec true {port}",
            ],
        ]
        .concat(),
    );
    let served = served.plan.server.expect("a server soak");
    vec![
        (SOAK, "ready-timeout", ms(served.ready_timeout_ms)),
        (SOAK, "connections", number(served.connections as f64)),
        (SOAK, "request-timeout", ms(served.request_timeout_ms)),
        (SOAK, "before", ms(soak_worker.before_timeout_ms)),
        (SOAK, "margin", number(decided.margin)),
        (SOAK, "consecutive", number(decided.consecutive)),
        (SOAK, "window", secs(soak.window_seconds)),
        (SOAK, "warmup-windows", number(soak.warmup_windows)),
        (SOAK, "interval", secs(soak.sample_seconds)),
    ]
}

/// `load` with only a URL.
fn load_applied() -> Vec<Stated> {
    let load = {
        let (cli, ui) = parse(&["load", "--url", "http://127.0.0.1:9/"]);
        let Command::Load(load) = cli.command else {
            unreachable!()
        };
        super::tools::load_spec(&load, &ui).unwrap()
    };
    let connections = load.mode.connections();
    vec![
        (&["load"], "duration", Applied::Time(load.duration)),
        (&["load"], "warmup-duration", Applied::Time(load.warmup)),
        (&["load"], "connections", number(connections as f64)),
        (&["load"], "timeout", Applied::Time(load.timeout)),
    ]
}

/// `workload cache-server` with only a port.
fn cache_server_applied() -> Vec<Stated> {
    const CACHE: &[&str] = &["workload cache-server"];
    let cache = {
        let (cli, _) = parse(&["workload", "cache-server", "--port", "0"]);
        let Command::Workload(WorkloadCommand::CacheServer(args)) = cli.command else {
            unreachable!()
        };
        super::tools::cache_server_config(&args).unwrap().1
    };
    vec![
        (CACHE, "threads", number(cache.threads as f64)),
        (
            CACHE,
            "cache-size",
            Applied::Bytes(cache.cache_bytes as u64),
        ),
        (CACHE, "min-size", Applied::Bytes(cache.min_size as u64)),
        (CACHE, "max-size", Applied::Bytes(cache.max_size as u64)),
        (CACHE, "drift", number(cache.drift_requests as f64)),
    ]
}

/// Every (command path, flag, help) of the command line, hidden flags left out.
fn flags(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String, String)>) {
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = a.get_long() else { continue };
        let help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        out.push((path.to_string(), long.to_string(), help.replace('\n', " ")));
    }
    for sub in cmd.get_subcommands() {
        let p = format!("{path} {}", sub.get_name()).trim().to_string();
        flags(sub, &p, out);
    }
}

/// The figure a help states as its default, if it states one: "[default: 10m]" gives
/// "10m"; "[default: half the CPUs]" none.
fn stated_default(help: &str) -> Option<String> {
    let re = regex::Regex::new(r"\[default: (\d[^\]\s,;]*)\]").unwrap();
    re.captures(help).map(|c| c[1].to_string())
}

#[test]
fn every_default_a_help_states_is_the_one_applied() {
    let mut all = Vec::new();
    flags(&Cli::command(), "", &mut all);
    let table = applied();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, flag, help) in &all {
        let Some(said) = stated_default(help) else {
            continue;
        };
        let Some((_, _, value)) = table
            .iter()
            .find(|(paths, f, _)| f == flag && paths.contains(&path.as_str()))
        else {
            wrong.push(format!(
                "`{path} --{flag}` says \"[default: {said}]\": add what the command applies without it to this test's table"
            ));
            continue;
        };
        checked += 1;
        if !value.agrees(&said) {
            wrong.push(format!(
                "`{path} --{flag}` says \"[default: {said}]\" but the command applies {value:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The pattern still finds what the help states (47 defaults today).
    assert!(checked >= 40, "only {checked} stated defaults found");
}

/// The test itself: a help that drifted from what is applied is caught.
#[test]
fn a_drifted_default_is_caught() {
    assert_eq!(
        stated_default("The window (e.g. 10m) [default: 10m].").as_deref(),
        Some("10m")
    );
    assert_eq!(stated_default("[default: half the CPUs, at least 1]"), None);
    let window = secs(600.0);
    assert!(window.agrees("10m") && !window.agrees("1m"));
    assert!(Applied::Bytes(314_573).agrees("0.3MiB"));
    assert!(!number(5u32).agrees("3") && number(0.05).agrees("0.05"));
}

/// `--variants` without a list runs the catalog's default variants: its help names each
/// knob that runs only when named, and only those.
#[test]
fn the_variants_help_names_the_variants_left_out() {
    let mut c = Cli::command();
    let run = c.find_subcommand_mut("run").unwrap();
    let help = run
        .get_arguments()
        .find(|a| a.get_long() == Some("variants"))
        .and_then(|a| a.get_long_help().or(a.get_help()))
        .map(|h| h.to_string().replace('\n', " "))
        .unwrap();
    let left_out = help
        .split_once("the knobs ")
        .and_then(|(_, rest)| rest.split_once(" run when named"))
        .map(|(names, _)| names.replace(" and ", ", "))
        .unwrap_or_else(|| panic!("{help}"));
    let named: Vec<&str> = left_out.split(", ").collect();
    let catalog: Vec<&str> = memtrial::plan::catalog::CATALOG
        .iter()
        .filter(|e| !e.by_default)
        .map(|e| e.name)
        .collect();
    assert_eq!(named, catalog, "{help}");
}

/// Soak refuses the server settings' warm-up and cool-down, so its help does not offer
/// them, and a user who gives one is told why.
#[test]
fn soak_offers_no_flag_it_refuses() {
    let mut all = Vec::new();
    flags(&Cli::command(), "", &mut all);
    let soak: Vec<&str> = all
        .iter()
        .filter(|(p, _, _)| p == "soak")
        .map(|(_, f, _)| f.as_str())
        .collect();
    assert!(soak.contains(&"url") && soak.contains(&"rate"), "{soak:?}");
    assert!(!soak.contains(&"warmup-duration") && !soak.contains(&"cooldown"));
    let (cli, ui) = parse(&[
        "soak",
        "--variants",
        "glibc,arena2",
        "--url",
        "http://127.0.0.1:{port}/",
        "--rate",
        "1",
        "--cooldown",
        "5s",
        "--duration",
        "1h",
        "--",
        "/bin/sh",
        "-c",
        "exec true {port}",
    ]);
    let Command::Soak(soak) = cli.command else {
        unreachable!()
    };
    let e = super::soak::settings_from(&soak, &ui)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--cooldown"), "{e}");
}
