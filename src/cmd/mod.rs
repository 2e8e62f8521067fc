//! The command-line edge: one module per group of commands, over shared helpers.
//!
//! `dispatch` (here) picks the command; [`run`] runs experiments here (`run`, `demo`),
//! [`kube`] inside a Kubernetes Job and renders it, [`resume`] finishes a stored one,
//! [`report`] reads the store (`report`, `import`, `recommend`, `list`, `variants`),
//! [`tools`] holds the commands that run no experiment (`workload`, `inspect`,
//! `exporter`, `probe-library`, `load`), [`soak`] runs every variant side by side for
//! hours and shows a soak again (`report --soak/--follow`). Beneath them: [`experiment`] (a plan from flags, isolation, running
//! and presenting an experiment) and [`ui`] (exit codes, the printer, progress, signals).
//! Arrows point down only: a command module uses `experiment` and `ui`, never another
//! command's module (`kube` takes `run`'s flags-to-plan step and `report`'s import).

mod experiment;
mod gate;
#[cfg(test)]
mod help_defaults;
mod judge;
mod kube;
mod report;
mod resume;
mod run;
mod soak;
mod tools;
mod ui;

use std::path::Path;

use anyhow::Result;

use crate::cli::{Cli, Command, OutputArgs, RunArgs, WorkloadCommand};
pub use ui::Outcome;

/// Runs the command `cli` parsed from `matches`.
pub fn dispatch(cli: Cli, matches: &clap::ArgMatches) -> Result<Outcome> {
    let ignored = ignored_with_resume(matches);
    if !ignored.is_empty() {
        anyhow::bail!(
            "{} {} not apply with --resume: a resumed experiment or soak runs with its stored \
             plan and settings; drop {} (or start a new one without --resume)",
            ignored.join(", "),
            if ignored.len() == 1 { "does" } else { "do" },
            if ignored.len() == 1 { "it" } else { "them" }
        );
    }
    let ui = ui::printer(&cli);
    let db = &cli.db;
    let log_limit = match &cli.command {
        Command::Run(a) => a.log_limit,
        Command::Gate(g) => g.run.log_limit,
        Command::Soak(s) => s.log_limit,
        _ => None,
    };
    if let Some(limit) = log_limit {
        memtrial::trial::logcap::set_limit(limit);
    }
    let done = match &cli.command {
        Command::Run(args) => match (args.resume, placement(args)) {
            (Some(id), _) => {
                resume::resume(db, id, args.confirm_command.as_deref(), &args.output, &ui)
            }
            (None, Placement::InContainer { index }) => {
                kube::in_container_cmd(db, args, index, &ui)
            }
            (None, Placement::Local) => run::run_cmd(db, args, &ui),
        },
        Command::Demo(args) => run::demo_cmd(db, args, &ui),
        Command::Variants => report::variants_cmd(&ui),
        Command::List => report::list_cmd(db, &ui),
        Command::Report(args) if args.soak || args.follow => soak::soak_report(
            db,
            args.id,
            args.follow,
            args.output.json.as_deref(),
            args.output.html.as_deref(),
            &ui,
        ),
        Command::Report(args) => report::report_cmd(db, args, &ui),
        Command::Import(args) => report::import_cmd(db, args, &ui),
        Command::Recommend(args) => report::recommend_cmd(db, args.id, &ui),
        Command::Workload(WorkloadCommand::Fragment(args)) => tools::fragment_cmd(args, &ui),
        Command::Workload(WorkloadCommand::CacheServer(args)) => tools::cache_server_cmd(args, &ui),
        Command::Inspect(args) => tools::inspect_cmd(args, &ui),
        Command::Load(args) => tools::load_cmd(args, &ui),
        Command::Exporter(args) => tools::exporter_cmd(args, &ui),
        Command::ProbeLibrary(args) => tools::probe_library_cmd(args, &ui),
        Command::Kube(args) => kube::kube_cmd(db, args, &ui),
        Command::Judge(args) => judge::judge_cmd(args, &ui),
        Command::Soak(args) => soak::soak_cmd(db, args, &ui),
        Command::Gate(args) => gate::gate_cmd(db, args, &ui),
    };
    done.map_err(|e| disk_full(e, db))
}

/// An error of a full disk names what memtrial itself keeps there: the run logs beside the
/// database, their size on disk, and the bound of each run's output.
fn disk_full(e: anyhow::Error, db: &Path) -> anyhow::Error {
    let text = format!("{e:#}");
    if !(text.contains("disk is full") || text.contains("No space left on device")) {
        return e;
    }
    let logs = memtrial::store::logs_root(db);
    let limit = match memtrial::trial::logcap::limit() {
        0 => "all of its output: --log-limit 0".to_string(),
        n => format!(
            "the first and last {} of each output",
            memtrial::units::format_bytes((n / 2) as f64)
        ),
    };
    anyhow::anyhow!(
        "{text}; the run logs beside the database, {}, take {} on disk (each run keeps \
         {limit}): free space, lower --log-limit, or remove the logs of experiments you no \
         longer read",
        logs.display(),
        memtrial::units::format_bytes(disk_use(&logs) as f64)
    )
}

/// The bytes `dir` and everything under it take on disk (allocated blocks).
fn disk_use(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_use(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Where `memtrial run` runs: here, each run in a cgroup of its own, or one slot inside
/// the container memtrial is in.
enum Placement {
    Local,
    InContainer { index: u32 },
}

fn placement(args: &RunArgs) -> Placement {
    match (args.in_container, args.index) {
        // clap requires --index with --in-container.
        (true, Some(index)) => Placement::InContainer { index },
        _ => Placement::Local,
    }
}

/// Whether the flag with id `id` of subcommand `sub` still applies with `--resume`: a
/// resumed experiment or soak runs its stored plan and settings, so only what says where
/// its results go does (`run`: [`OutputArgs`] and --confirm-command; `soak`: --json and
/// --html). Every other flag is refused by name, a flag added later included: the list of
/// what applies is the output flags' own definitions, not a list of what does not.
fn applies_with_resume(sub: &str, id: &str) -> bool {
    match sub {
        "run" => {
            id == "resume"
                || id == "confirm_command"
                || id == "log_limit"
                || <OutputArgs as clap::Args>::augment_args(clap::Command::new("output"))
                    .get_arguments()
                    .any(|a| a.get_id() == id)
        }
        "soak" => matches!(id, "resume" | "json" | "html" | "log_limit"),
        _ => true,
    }
}

/// The flags given on the command line to `sub` (its own, not the global ones) that do
/// not apply with `--resume`, as the user wrote them (`--connections`, or `COMMAND` for the
/// command after `--`). Empty unless `--resume` was given.
fn ignored_with_resume(matches: &clap::ArgMatches) -> Vec<String> {
    let Some((sub, m)) = matches.subcommand() else {
        return Vec::new();
    };
    let given = |id: &str| {
        m.try_contains_id(id).unwrap_or(false)
            && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
    };
    if !given("resume") {
        return Vec::new();
    }
    let cli = <Cli as clap::CommandFactory>::command();
    let Some(cmd) = cli.find_subcommand(sub) else {
        return Vec::new();
    };
    cmd.get_arguments()
        .filter(|a| !a.is_global_set())
        .filter(|a| given(a.get_id().as_str()) && !applies_with_resume(sub, a.get_id().as_str()))
        .map(|a| match a.get_long() {
            Some(l) => format!("--{l}"),
            None => format!(
                "{} (after --)",
                a.get_value_names()
                    .and_then(|n| n.first())
                    .map_or("COMMAND".to_string(), |n| n.to_string())
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own checks of the definitions (unique ids and flags, valid references), which
    /// it otherwise makes only when a debug build parses.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Help texts say the ranges the checks apply (issue 38, item 12: `soak --duration`
    /// said 1m while 10 s was taken, `import` said versions 2 or 3 while 4 was read).
    #[test]
    fn help_texts_say_what_the_checks_accept() {
        use memtrial::plan::settings::{duration, SOAK_DURATION};
        let help = |sub: &str| {
            let mut c = Cli::command();
            c.find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string()
        };
        let soak = help("soak")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(soak.contains("10s to 7 days"), "{soak}");
        assert!(duration("--duration", "10s", SOAK_DURATION).is_ok());
        assert!(duration("--duration", "9s", SOAK_DURATION).is_err());
        assert!(duration("--duration", "7d", SOAK_DURATION).is_ok());
        let (oldest, newest) = memtrial::store::import::versions_read();
        let import = help("import")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            import.contains(&format!("schema_version {oldest} to {newest}")),
            "{import}"
        );
    }

    /// `--resume`'s help names each flag that still applies with it, and no flag it refuses
    /// (the output flags of `run` go by their heading: "the output flags").
    #[test]
    fn the_resume_help_names_what_applies_with_it() {
        let cli = Cli::command();
        let output = <OutputArgs as clap::Args>::augment_args(clap::Command::new("output"));
        let is_output = |id: &str| output.get_arguments().any(|a| a.get_id() == id);
        for sub in ["run", "soak"] {
            let cmd = cli.find_subcommand(sub).unwrap();
            let help = cmd
                .get_arguments()
                .find(|a| a.get_id() == "resume")
                .and_then(|a| a.get_long_help().or(a.get_help()))
                .map(|h| h.to_string().replace('\n', " "))
                .unwrap();
            let named = |long: &str| {
                help.split(|c: char| !(c.is_alphanumeric() || c == '-'))
                    .any(|w| w == format!("--{long}"))
            };
            for a in cmd.get_arguments().filter(|a| !a.is_global_set()) {
                let (Some(long), id) = (a.get_long(), a.get_id().as_str()) else {
                    continue;
                };
                if id == "resume" || (sub == "run" && is_output(id)) {
                    continue;
                }
                assert_eq!(
                    named(long),
                    applies_with_resume(sub, id),
                    "`{sub} --resume` help and --{long}: {help}"
                );
            }
        }
    }

    #[test]
    fn only_output_flags_apply_with_resume() {
        let ignored = |args: &[&str]| {
            let m = Cli::command().try_get_matches_from(args).unwrap();
            ignored_with_resume(&m)
        };
        assert_eq!(
            ignored(&["memtrial", "run", "--resume", "--rate", "5", "--html", "x"]),
            ["--rate"]
        );
        assert!(ignored(&["memtrial", "run", "--resume", "3", "--json", "-", "-q"]).is_empty());
        assert!(
            ignored(&["memtrial", "--db", "x.db", "soak", "--resume", "--json", "-"]).is_empty()
        );
        assert_eq!(
            ignored(&["memtrial", "soak", "--resume", "--duration", "1h"]),
            ["--duration"]
        );
        // Without --resume nothing is refused here.
        assert!(ignored(&["memtrial", "run", "--rate", "5", "--", "x"]).is_empty());
    }
}
