//! memtrial's entry point: parse, dispatch, print the error once, map to an exit code.

mod app;
mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match app::dispatch(cli) {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            eprintln!("memtrial: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
