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
mod judge;
mod kube;
mod report;
mod resume;
mod run;
mod soak;
mod tools;
mod ui;

use anyhow::Result;

use crate::cli::{Cli, Command, RunArgs, WorkloadCommand};
pub use ui::Outcome;

pub fn dispatch(cli: Cli) -> Result<Outcome> {
    let ui = ui::printer(&cli);
    let db = &cli.db;
    match &cli.command {
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
    }
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
