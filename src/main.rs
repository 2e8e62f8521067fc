//! memtrial's entry point: parse, dispatch, print the error once, map to an exit code.

mod cli;
mod cmd;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn main() -> ExitCode {
    // memtrial started again as the spawner of a run's workload (see backend::spawn).
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|a| a == memtrial::backend::spawn::SPAWN_ARG)
    {
        return match memtrial::backend::spawn::spawner_main(args.collect()) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(255)),
            Err(e) => {
                eprintln!("memtrial: error: {e}");
                ExitCode::from(2)
            }
        };
    }
    let matches = cli::Cli::command().get_matches();
    let cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cmd::dispatch(cli, &matches) {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            // The error edge: control and bidirectional characters from the input
            // (a command, a path) are shown escaped, never acted on by the terminal.
            let text = memtrial::report::escape::terminal_lines(&format!("{e:#}"));
            eprintln!("memtrial: error: {text}");
            ExitCode::from(2)
        }
    }
}
