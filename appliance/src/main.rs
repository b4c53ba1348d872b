//! `quarry`: the appliance binary. All logic lives in the library; this only parses the
//! command line and reports a fatal error as one line.

use clap::Parser;
use quarry::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => quarry::serve::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line, with the whole context chain, so an admin sees the reason at once.
            eprintln!("quarry: error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
