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
            // The error edge: control and bidirectional characters from the input
            // (a command, a path) are shown escaped, never acted on by the terminal.
            let text = memtrial::report::escape::terminal_lines(&format!("{e:#}"));
            eprintln!("memtrial: error: {text}");
            ExitCode::from(2)
        }
    }
}
