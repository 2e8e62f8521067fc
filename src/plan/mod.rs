//! What to run: workload, variants, repetitions. Built from CLI flags and/or a
//! TOML plan file, validated once, then plain data.

pub mod catalog;
pub mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::linux::cgroup::Limits;
pub use crate::load::source::RequestSource;
use catalog::{catalog_entry, catalog_names, CatalogKind, Distro, LibAllocator, LibraryLocator};

mod build;
mod check;
mod error;
mod format;
mod input;
mod knobs;
mod model;
mod spec;
mod variants;

pub use build::*;
pub(crate) use check::*;
pub use error::*;
pub use format::*;
pub use input::*;
pub(crate) use knobs::*;
pub use knobs::{trim_text, HeapThp, Knobs, Tunable};
pub use model::*;
pub use spec::*;
pub use variants::catalog_variant_here;
pub(crate) use variants::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_keeps_the_plan_rules() {
        let p = crate::report::fixture::experiment().plan;
        assert!(p.check().is_ok());
        let broken = |edit: &dyn Fn(&mut Plan)| {
            let mut q = p.clone();
            edit(&mut q);
            q.check().unwrap_err().to_string()
        };
        let e = broken(&|q| q.baseline = "tcmalloc".into());
        assert!(
            e.contains("baseline \"tcmalloc\" is not one of") && e.contains("glibc, arena2"),
            "{e}"
        );
        let e = broken(&|q| q.variants[1].name = "glibc".into());
        assert!(e.contains("'glibc' is used twice"), "{e}");
        let e = broken(&|q| q.variants[1].env.push((String::new(), "1".into())));
        assert!(e.contains("\"\" is empty"), "{e}");
        let e = broken(&|q| {
            q.variants[1]
                .env
                .push(("MALLOC_ARENA_MAX".into(), "3".into()))
        });
        assert!(e.contains("sets MALLOC_ARENA_MAX twice"), "{e}");
        let e = broken(&|q| q.variants[1].env[0].1 = "a\0b".into());
        assert!(e.contains("NUL"), "{e}");
        let e = broken(&|q| q.variants[1].name = "a\n---\nkind: Pod".into());
        assert!(e.contains("1 to 64 letters") && !e.contains('\n'), "{e}");
        let e = broken(&|q| q.variants.clear());
        assert!(e.contains("it has none"), "{e}");
    }

    #[test]
    fn plan_files_are_read_within_their_limit() {
        let e = read_plan_text(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("more than 1048576 bytes") && e.contains("at most 1048576"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, vec![b'#'; MAX_PLAN_BYTES + 10]).unwrap();
        let e = read_plan_text(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("it has {} bytes", MAX_PLAN_BYTES + 10)),
            "{e}"
        );
        std::fs::write(&p, b"command = \"\xff\"").unwrap();
        assert!(read_plan_text(&p)
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
        std::fs::write(&p, vec![b'#'; MAX_PLAN_BYTES]).unwrap();
        assert_eq!(read_plan_text(&p).unwrap().len(), MAX_PLAN_BYTES);
    }

    #[test]
    fn fingerprint_is_stable_and_ignores_what_does_not_make_runs_differ() {
        let p = crate::report::fixture::experiment().plan;
        let f = p.fingerprint();
        assert_eq!(f.len(), 64);
        assert!(f.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(p.clone().fingerprint(), f);
        let mut q = p.clone();
        q.seed = 1;
        q.runs = 50;
        q.warmup = 2;
        q.interval_ms = 250;
        q.timeout_ms = Some(1000);
        q.grace_ms = 1;
        q.baseline = "arena2".into();
        q.workdir = "/elsewhere".into();
        q.program = "/opt/ruby/bin/ruby".into();
        q.variants[2].preload = Some("/usr/lib64/libjemalloc.so.2".into());
        assert_eq!(q.fingerprint(), f);
        // The order settings were given in does not matter either.
        let mut r = p.clone();
        r.variants[1].env = vec![("A".into(), "1".into()), ("B".into(), "2".into())];
        let mut r2 = r.clone();
        r2.variants[1].env.reverse();
        assert_eq!(r.fingerprint(), r2.fingerprint());
    }

    #[test]
    fn fingerprint_changes_with_what_runs() {
        let p = crate::report::fixture::experiment().plan;
        let f = p.fingerprint();
        let changed = |edit: &dyn Fn(&mut Plan)| {
            let mut q = p.clone();
            edit(&mut q);
            q.fingerprint()
        };
        assert_ne!(
            changed(&|q| q.variants[1].env[0].1 = "4".into()),
            f,
            "a variant's environment"
        );
        assert_ne!(changed(&|q| q.variants[1].name = "a2".into()), f);
        assert_ne!(
            changed(&|q| q.variants[2].preload_spec = Some("tcmalloc".into())),
            f
        );
        assert_ne!(changed(&|q| q.command.push("--fast".into())), f);
        assert_ne!(changed(&|q| q.limits.memory_max = Some(1 << 30)), f);
        assert_ne!(changed(&|q| q.probes.kinds.push(ProbeKind::Ruby)), f);
        assert_ne!(
            changed(&|q| q.variants[0].program = Some(VariantProgram::Program {
                spec: "ruby3.3".into(),
                path: "/usr/bin/ruby3.3".into()
            })),
            f
        );
        assert_ne!(changed(&|q| q.variants.pop().map(|_| ()).unwrap_or(())), f);
    }

    fn ctx() -> (LibraryLocator, PathBuf) {
        (LibraryLocator::in_dirs(vec![]), std::env::temp_dir())
    }

    fn input(cmd: &[&str]) -> PlanInput {
        PlanInput {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn build(i: PlanInput) -> Result<BuiltPlan, PlanError> {
        let (loc, wd) = ctx();
        build_plan(
            i,
            &PlanContext {
                locator: &loc,
                distro: Distro::Debian,
                path_var: "/usr/bin:/bin".into(),
                workdir: wd,
                online_cpus: 2,
            },
        )
    }

    #[test]
    fn default_set_without_libraries_is_glibc_and_arenas() {
        let b = build(input(&["true"])).unwrap();
        let names: Vec<_> = b.plan.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["glibc", "arena1", "arena2"]);
        assert_eq!(b.plan.baseline, "glibc");
        assert_eq!(b.plan.runs, DEFAULT_RUNS);
        assert_eq!(
            b.notes.len(),
            3,
            "one note per missing library: {:?}",
            b.notes
        );
        assert!(b.notes[0].contains("apt-get install -y libjemalloc2"));
    }

    #[test]
    fn requested_missing_library_names_the_package() {
        let mut i = input(&["true"]);
        i.variants = Some(vec!["glibc".into(), "jemalloc".into()]);
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("libjemalloc2"), "{e}");
    }

    #[test]
    fn unknown_variant_lists_known() {
        let mut i = input(&["true"]);
        i.variants = Some(vec!["jemaloc".into()]);
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("jemaloc") && e.contains("arena2"), "{e}");
    }

    #[test]
    fn custom_variants_with_quotes_and_baseline() {
        let mut i = input(&["true"]);
        i.custom = vec![
            "yjit=RUBYOPT=--yjit".into(),
            "w='RUBYOPT=-W0 --yjit' X=1".into(),
        ];
        let b = build(i).unwrap();
        let names: Vec<_> = b.plan.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["glibc", "yjit", "w"]);
        assert_eq!(
            b.plan.variants[2].env,
            vec![
                ("RUBYOPT".to_string(), "-W0 --yjit".to_string()),
                ("X".to_string(), "1".to_string())
            ]
        );
    }

    #[test]
    fn bad_specs() {
        for spec in [
            "noequals",
            "=X=1",
            "a=",
            "a=justaword",
            "a=preload:nosuchalloc",
            "a=LD_PRELOAD=/x.so",
        ] {
            let mut i = input(&["true"]);
            i.custom = vec![spec.into()];
            assert!(build(i).is_err(), "{spec} should be rejected");
        }
    }

    #[test]
    fn duplicate_and_malformed_env_keys_are_refused() {
        for (spec, expect) in [
            ("x=A=1 A=2", "variant 'x' sets A twice"),
            ("x=A=1 'B=2' A=3", "variant 'x' sets A twice"),
            ("x='=1'", "variant 'x': environment key \"\" is empty"),
            ("x='A=\0'", "NUL"),
        ] {
            let mut i = input(&["true"]);
            i.custom = vec![spec.into()];
            let e = build(i).unwrap_err().to_string();
            assert!(e.contains(expect), "{spec}: {e}");
        }
        let plan =
            "command = \"true\"\n[[variant]]\nname = \"x\"\nspec = \"A=1\"\nenv = { A = \"2\" }\n";
        let e = build(parse_plan_text(plan).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("variant 'x' sets A twice"), "{e}");
        let plan = "command = \"true\"\n[[variant]]\nname = \"y\"\nenv = { \"A=B\" = \"1\" }\n";
        let e = parse_plan_text(plan).unwrap_err();
        assert!(
            e.contains("variant 'y'") && e.contains("\"A=B\" contains '='"),
            "{e}"
        );
        let plan = "command = \"true\"\n[[variant]]\nname = \"z\"\nenv = { \"\" = \"1\" }\n";
        assert!(parse_plan_text(plan).unwrap_err().contains("is empty"));
    }

    #[test]
    fn numbers_out_of_range_name_the_flag_and_range() {
        type Case = (fn(&mut PlanInput), &'static str);
        let cases: [Case; 9] = [
            (|i| i.interval = Some("1e300".into()), "--interval 1e300"),
            (|i| i.timeout = Some("1e300".into()), "--timeout 1e300"),
            (|i| i.interval = Some("2h".into()), "from 10ms to 1h"),
            (
                |i| i.warmup = Some(4_294_967_294),
                "--warmup 4294967294: must be from 0 to 10000",
            ),
            (
                |i| i.runs = Some(4_294_967_295),
                "--runs 4294967295: must be from 1 to 10000",
            ),
            (
                |i| i.limits.pids_limit = Some(u64::MAX),
                "--pids-limit 18446744073709551615: must be from 2 to 4194304",
            ),
            (|i| i.seed = Some(u64::MAX), "--seed"),
            (
                |i| i.limits.memory_limit = Some("1000T".into()),
                "--memory-limit 1000T: must be from 4M to 64T",
            ),
            (
                |i| {
                    i.server.url = Some("http://127.0.0.1:{port}/".into());
                    i.server.duration = Some("1e18".into());
                },
                "--duration 1e18: must be from 1ms to 1day",
            ),
        ];
        for (set, expect) in cases {
            let mut i = input(&["true"]);
            set(&mut i);
            let e = build(i).unwrap_err().to_string();
            assert!(e.contains(expect), "{expect}: {e}");
        }
    }

    #[test]
    fn a_server_setting_without_url_is_not_ignored() {
        let mut i = input(&["true"]);
        i.server.load_threads = Some(2);
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("a server trial needs --url"), "{e}");
    }

    #[test]
    fn preload_path_with_a_space_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("my lib.so");
        std::fs::write(&lib, b"").unwrap();
        let mut i = input(&["true"]);
        i.custom = vec![format!("x=preload:'{}'", lib.display())];
        let e = build(i).unwrap_err().to_string();
        assert!(e.contains("LD_PRELOAD splits on spaces"), "{e}");
    }

    #[test]
    fn runs_zero_and_bad_durations() {
        let mut i = input(&["true"]);
        i.runs = Some(0);
        assert!(build(i).unwrap_err().to_string().contains("--runs"));
        let mut i = input(&["true"]);
        i.interval = Some("soon".into());
        assert!(build(i)
            .unwrap_err()
            .to_string()
            .contains("--interval soon"));
        let mut i = input(&["true"]);
        i.interval = Some("1ms".into());
        assert!(build(i).is_err());
        let mut i = input(&["true"]);
        i.timeout = Some("0s".into());
        assert!(build(i).is_err());
    }

    #[test]
    fn limits_are_validated() {
        let mut i = input(&["true"]);
        i.limits.memory_limit = Some("512M".into());
        i.limits.cpus = Some("1.5".into());
        i.limits.cpuset = Some("0-1".into());
        i.limits.pids_limit = Some(64);
        let l = build(i).unwrap().plan.limits;
        assert_eq!(l.memory_max, Some(512 << 20));
        assert_eq!(l.cpus, Some(1.5));
        assert_eq!(l.cpuset.as_deref(), Some("0-1"));
        assert_eq!(l.pids_max, Some(64));
        for (field, value, expect) in [
            ("mem", "1K", "--memory-limit 1K"),
            ("mem", "lots", "--memory-limit lots"),
            ("cpus", "0", "--cpus 0"),
            ("cpus", "two", "--cpus two"),
            ("cpuset", "5", "CPU 5 does not exist"),
            ("cpuset", "1-0", "--cpuset 1-0"),
        ] {
            let mut i = input(&["true"]);
            match field {
                "mem" => i.limits.memory_limit = Some(value.into()),
                "cpus" => i.limits.cpus = Some(value.into()),
                _ => i.limits.cpuset = Some(value.into()),
            }
            let e = build(i).unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
        }
    }

    #[test]
    fn command_lookup() {
        assert!(matches!(
            build(input(&["no-such-command-xyz"])),
            Err(PlanError::CommandNotFound { .. })
        ));
        assert!(matches!(
            build(input(&["/etc/passwd"])),
            Err(PlanError::NotExecutable { .. })
        ));
        assert!(matches!(
            build(PlanInput::default()),
            Err(PlanError::NoCommand)
        ));
    }

    #[test]
    fn plan_file_parses_and_flags_win() {
        let text = r#"
command = "ruby job.rb --n 'two words'"
runs = 3
variants = ["glibc", "arena2", "yjit"]
timeout = "5m"

[[variant]]
name = "yjit"
env = { RUBYOPT = "--yjit" }
"#;
        let file = parse_plan_text(text).unwrap();
        assert_eq!(file.command, ["ruby", "job.rb", "--n", "two words"]);
        assert_eq!(file.custom.len(), 1);
        let (name, spec) = file.custom[0].split_once('=').unwrap();
        assert_eq!(name, "yjit");
        assert_eq!(shell_words::split(spec).unwrap(), ["RUBYOPT=--yjit"]);
        let flags = PlanInput {
            runs: Some(7),
            ..Default::default()
        };
        let merged = flags.or(file);
        assert_eq!(merged.runs, Some(7));
        assert_eq!(merged.timeout.as_deref(), Some("5m"));
    }

    #[test]
    fn plan_file_server_section() {
        let text = "command = \"true --port {port}\"\n[server]\nurl = \"http://127.0.0.1:{port}/x\"\nduration = \"5s\"\nrate = 50.0\nconnections = 8\n";
        let file = parse_plan_text(text).unwrap();
        let b = build(file).map(|b| b.plan.server).unwrap().unwrap();
        assert_eq!(b.url, "http://127.0.0.1:{port}/x");
        assert_eq!(b.duration_ms, 5000);
        assert_eq!(b.rate, Some(50.0));
        assert_eq!(b.connections, 8);
        assert_eq!(b.cooldown_ms, 10_000);
        assert_eq!(b.source, RequestSource::Url);
        let e = parse_plan_text("[server]\nurll = \"x\"\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("urll"), "{e}");
    }

    #[test]
    fn worker_settings_and_the_two_meanings_of_duration() {
        // Without a URL, --duration is the service's.
        let mut i = input(&["true"]);
        i.server.duration = Some("2s".into());
        let p = build(i).unwrap().plan;
        assert!(p.server.is_none());
        assert_eq!(p.worker.unwrap().duration_ms, Some(2000));
        // With one, the load's.
        let mut i = input(&["true"]);
        i.server.url = Some("http://127.0.0.1:{port}/".into());
        i.server.duration = Some("2s".into());
        let p = build(i).unwrap().plan;
        assert_eq!(p.server.unwrap().duration_ms, 2000);
        assert!(p.worker.is_none());
        // A plan file's [worker] section; a --duration flag wins over it.
        let file =
            parse_plan_text("command = \"true\"\n[worker]\nbefore = \"true\"\ndriver = \"sleep 1\"\nduration = \"10m\"\n")
                .unwrap();
        let mut flags = PlanInput::default();
        flags.server.duration = Some("3s".into());
        let w = build(flags.or(file)).unwrap().plan.worker.unwrap();
        assert_eq!(w.before.as_deref(), Some("true"));
        assert_eq!(w.driver.as_deref(), Some("sleep 1"));
        assert_eq!(w.duration_ms, Some(3000));
        assert_eq!(w.before_timeout_ms, DEFAULT_BEFORE_TIMEOUT_MS);
        // One rule for both keys: --cooldown wins over the file's [worker] cooldown too,
        // and over a [server] duration that, without a URL, is the worker's.
        let file = parse_plan_text(
            "command = \"true\"\n[server]\nduration = \"10m\"\n[worker]\n\
             driver = \"sleep 1\"\ncooldown = \"9s\"\n",
        )
        .unwrap();
        let mut flags = PlanInput::default();
        flags.server.duration = Some("3s".into());
        flags.server.cooldown = Some("2s".into());
        let w = build(flags.or(file.clone())).unwrap().plan.worker.unwrap();
        assert_eq!((w.duration_ms, w.cooldown_ms), (Some(3000), 2000));
        let w = build(PlanInput::default().or(file.clone()))
            .unwrap()
            .plan
            .worker
            .unwrap();
        assert_eq!((w.duration_ms, w.cooldown_ms), (Some(600_000), 9000));
        // A URL among the flags makes the file's [server] duration the load's.
        let mut flags = PlanInput::default();
        flags.server.url = Some("http://127.0.0.1:{port}/".into());
        let file = parse_plan_text("command = \"true\"\n[server]\nduration = \"10m\"\n").unwrap();
        let p = build(flags.or(file)).unwrap().plan;
        assert_eq!(p.server.unwrap().duration_ms, 600_000);
        assert!(p.worker.is_none());
        let e = parse_plan_text("[worker]\ndriverr = \"x\"\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("driverr"), "{e}");
    }

    #[test]
    fn bad_worker_settings_name_the_flag() {
        let with = |f: &dyn Fn(&mut PlanInput)| {
            let mut i = input(&["true"]);
            f(&mut i);
            build(i).unwrap_err().to_string()
        };
        let e = with(&|i| i.worker.before = Some("  ".into()));
        assert!(e.starts_with("--before '  ': an empty command"), "{e}");
        let e = with(&|i| i.worker.driver = Some("no-such-program-xyz --go".into()));
        assert!(
            e.starts_with("--driver 'no-such-program-xyz --go'") && e.contains("not found"),
            "{e}"
        );
        let e = with(&|i| i.worker.driver = Some("echo 'unclosed".into()));
        assert!(e.contains("quotes"), "{e}");
        let e = with(&|i| {
            i.worker.driver = Some("sleep 1".into());
            i.server.url = Some("http://127.0.0.1:{port}/".into());
        });
        assert!(
            e.contains("--driver") && e.contains("cannot be combined with --url"),
            "{e}"
        );
        let e = with(&|i| i.server.duration = Some("0s".into()));
        assert!(e.starts_with("--duration 0s"), "{e}");
        let e = with(&|i| {
            i.server.duration = Some("1m".into());
            i.timeout = Some("30s".into());
        });
        assert!(e.contains("--timeout"), "{e}");
        // Shell syntax and builtins are the shell's business.
        for ok in [
            "cd /tmp && true",
            "X=1 true",
            "for i in 1; do :; done",
            "$HOME/x",
        ] {
            let mut i = input(&["true"]);
            i.worker.before = Some(ok.into());
            assert!(build(i).is_ok(), "{ok}");
        }
    }

    #[test]
    fn plan_file_errors_name_line_and_column() {
        let e = parse_plan_text("runs = 3\nvariants = [\"a\",\n  oops]\n").unwrap_err();
        assert!(e.starts_with("line 3, column 3"), "{e}");
        let e = parse_plan_text("runz = 3\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("runz"), "{e}");
    }

    #[test]
    fn probes_default_to_the_allocator_and_step_aside_under_a_pids_limit() {
        let mut notes = Vec::new();
        let p = build_probes(&PlanInput::default(), &mut notes).unwrap();
        assert_eq!(p.kinds, vec![ProbeKind::Allocator]);
        assert_eq!(p.interval_ms, 1000);
        let limited = PlanInput {
            limits: LimitsInput {
                pids_limit: Some(24),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(build_probes(&limited, &mut notes).unwrap().kinds.is_empty());
        assert!(notes[0].contains("--probe allocator"), "{notes:?}");
        let asked = PlanInput {
            limits: LimitsInput {
                pids_limit: Some(24),
                ..Default::default()
            },
            probes: Some(vec!["allocator".into(), "ruby".into()]),
            ..Default::default()
        };
        let p = build_probes(&asked, &mut notes).unwrap();
        assert_eq!(p.kinds, vec![ProbeKind::Allocator, ProbeKind::Ruby]);
        let none = PlanInput {
            no_probes: true,
            ..Default::default()
        };
        assert!(build_probes(&none, &mut notes).unwrap().kinds.is_empty());
        let bad = PlanInput {
            probes: Some(vec!["perl".into()]),
            ..Default::default()
        };
        let e = build_probes(&bad, &mut notes).unwrap_err().to_string();
        assert!(
            e.contains("--probe perl") && e.contains("allocator, ruby, jvm"),
            "{e}"
        );
        let fast = PlanInput {
            probe_interval: Some("5ms".into()),
            ..Default::default()
        };
        let e = build_probes(&fast, &mut notes).unwrap_err().to_string();
        assert!(e.contains("--probe-interval"), "{e}");
    }

    #[test]
    fn plan_files_name_their_probes() {
        let i = parse_plan_text(
            "command = \"true\"\nprobes = [\"ruby\"]\nprobe_interval = \"250ms\"\n",
        )
        .unwrap();
        assert_eq!(i.probes, Some(vec!["ruby".to_string()]));
        assert_eq!(i.probe_interval.as_deref(), Some("250ms"));
        let off = parse_plan_text("command = \"true\"\nprobes = []\n").unwrap();
        assert!(off.no_probes);
    }

    #[test]
    fn workload_env_adds_preload_first() {
        let v = Variant {
            name: "je".into(),
            env: vec![("A".into(), "1".into())],
            preload: Some(PathBuf::from("/lib/libjemalloc.so.2")),
            preload_spec: Some("jemalloc".into()),
            origin: VariantOrigin::Catalog,
            program: None,
            knobs: Default::default(),
        };
        let env = v.workload_env(Some("/other.so"));
        assert_eq!(env[1].1, "/lib/libjemalloc.so.2 /other.so");
        assert_eq!(v.describe(), "preload:jemalloc A=1");
    }

    fn parse(spec: &str) -> Result<Variant, PlanError> {
        let (loc, wd) = ctx();
        parse_custom_variant(
            spec,
            &PlanContext {
                locator: &loc,
                distro: Distro::Debian,
                path_var: "/usr/bin:/bin".into(),
                workdir: wd,
                online_cpus: 2,
            },
        )
    }

    #[test]
    fn a_variant_may_replace_the_program_with_settings_beside() {
        let v = parse("other=program:/bin/sh 'RUBYOPT=--yjit -W0'").unwrap();
        assert_eq!(v.program.as_ref().unwrap().path(), Path::new("/bin/sh"));
        assert_eq!(v.env, vec![("RUBYOPT".into(), "--yjit -W0".into())]);
        assert_eq!(v.describe(), "program:/bin/sh RUBYOPT=--yjit -W0");
        // Looked up in PATH like the command itself.
        let v = parse("p=program:sh").unwrap();
        assert!(v.program.unwrap().path().ends_with("sh"));
    }

    /// An unquoted value with a space splits into two settings; the second is refused with
    /// the quoting that was meant.
    #[test]
    fn an_unquoted_value_with_a_space_is_refused_with_the_fix() {
        let e = parse("yjit32=RUBYOPT=--yjit --yjit-exec-mem-size=32")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'--yjit-exec-mem-size=32' is not a setting")
                && e.contains(r#"RUBYOPT="--yjit --yjit-exec-mem-size=32""#),
            "{e}"
        );
        let v = parse(r#"yjit32=RUBYOPT="--yjit --yjit-exec-mem-size=32""#).unwrap();
        assert_eq!(
            v.env,
            vec![("RUBYOPT".into(), "--yjit --yjit-exec-mem-size=32".into())]
        );
    }

    #[test]
    fn a_variant_may_replace_the_whole_command() {
        let v = parse(r#"c=command:'sh -c "sleep 1"' A=1"#).unwrap();
        match &v.program {
            Some(VariantProgram::Command { argv, path }) => {
                assert_eq!(argv, &["sh", "-c", "sleep 1"]);
                assert!(path.ends_with("sh"));
            }
            other => panic!("{other:?}"),
        }
        assert!(v.describe().starts_with("command:") && v.describe().ends_with(" A=1"));
        // What describe() shows parses back to the same variant.
        let again = parse(&format!("c={}", v.describe())).unwrap();
        assert_eq!(again, v);
        let plan = build(input(&["true"])).unwrap().plan;
        let (prog, argv) = plan.launch_command(&v);
        assert!(prog.ends_with("sh"));
        assert_eq!(argv, ["sh", "-c", "sleep 1"]);
    }

    #[test]
    fn bad_program_variants_name_the_variant_and_why() {
        let e = parse("x=program:/nonexistent/ruby")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("variant 'x': program:/nonexistent/ruby does not exist"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("not-a-program");
        std::fs::write(&plain, "data").unwrap();
        let e = parse(&format!("x=program:{}", plain.display()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not an executable file"), "{e}");
        let e = parse("x=program:/bin/sh command:true")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("program:/bin/sh and command:true replace the program twice"),
            "{e}"
        );
        let e = parse("x=command:").unwrap_err().to_string();
        assert!(e.contains("command: is empty"), "{e}");
        let e = parse(r#"x=command:'a "b'"#).unwrap_err().to_string();
        assert!(e.contains("cannot be split"), "{e}");
        let e = parse("x=program:no-such-program-here")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not found in PATH"), "{e}");
    }

    #[test]
    fn plan_files_give_program_and_command() {
        let text = r#"command = "true"
[[variant]]
name = "a"
program = "/bin/sh"
[variant.env]
X = "1"
[[variant]]
name = "b"
command = ["sh", "-c", "echo 'hi there'"]
"#;
        let i = parse_plan_text(text).unwrap();
        let a = parse(&i.custom[0]).unwrap();
        assert_eq!(a.program.unwrap().path(), Path::new("/bin/sh"));
        assert_eq!(a.env, vec![("X".into(), "1".into())]);
        let b = parse(&i.custom[1]).unwrap();
        match b.program {
            Some(VariantProgram::Command { argv, .. }) => {
                assert_eq!(argv, ["sh", "-c", "echo 'hi there'"])
            }
            other => panic!("{other:?}"),
        }
        let e =
            parse_plan_text("command = \"true\"\n[[variant]]\nname = \"a\"\nprograms = \"x\"\n")
                .unwrap_err();
        assert!(e.contains("programs"), "{e}");
    }

    /// Knobs come from spec words and plan keys alike, merge into the environment the
    /// workload gets, describe themselves, and change the fingerprint only where present.
    #[test]
    fn knobs_from_specs_and_plan_files() {
        let v = parse("t=GLIBC_TUNABLES=glibc.malloc.arena_max=2 tunable:trim_threshold=128K thp:off trim:10s")
            .unwrap();
        assert!(v.knobs.thp_off);
        assert_eq!(v.knobs.trim_ms, Some(10_000));
        assert_eq!(
            v.settings(),
            vec![(
                "GLIBC_TUNABLES".to_string(),
                "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072".to_string()
            )]
        );
        assert_eq!(
            v.describe(),
            "GLIBC_TUNABLES=glibc.malloc.arena_max=2 thp:off tunable:trim_threshold=131072 trim:10s"
        );
        let text = r#"command = "true"
[[variant]]
name = "k"
thp = "off"
trim = "10s"
tunables = { trim_threshold = "128K", tcache_count = 0 }
"#;
        let i = parse_plan_text(text).unwrap();
        let k = parse(&i.custom[0]).unwrap();
        assert_eq!(k.knobs.tunables.len(), 2);
        assert_eq!((k.knobs.thp_off, k.knobs.trim_ms), (true, Some(10_000)));
        let e = parse_plan_text(
            "command = \"true\"\n[[variant]]\nname = \"a\"\ntunables = { top_pad = [1] }\n",
        )
        .unwrap_err();
        assert!(e.contains("whole number"), "{e}");
        let e = parse("bad=thp:sometimes").unwrap_err().to_string();
        assert!(e.contains("thp: takes off"), "{e}");
        // Stored and read back the same; a plan without knobs keeps its JSON (and so its
        // fingerprint) as before.
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(serde_json::from_str::<Variant>(&json).unwrap(), k);
        let plain = parse("a=X=1").unwrap();
        assert!(!serde_json::to_string(&plain).unwrap().contains("knobs"));
        let mut p = crate::report::fixture::experiment().plan;
        let f = p.fingerprint();
        p.variants[1].knobs.thp_off = true;
        assert_ne!(p.fingerprint(), f);
    }

    #[test]
    fn a_stored_plan_without_programs_reads_and_writes_the_same() {
        let v = parse("a=X=1").unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert!(!json.contains("program"), "{json}");
        let back: Variant = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
        let p = parse("p=program:/bin/sh").unwrap();
        let back: Variant = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
