//! `vino`: the VINO command.
//!
//! `vino demo` shows the safe-extension core at work; `vino graft build` turns C into a graft;
//! `vino bench core` measures what the core costs and compares extension technologies.

mod bench;
mod demo;
mod graft;
mod progress;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "vino", version, about = "VINO: an extensible kernel in user space, with safe grafts")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load grafts into a small kernel object: a good graft working, hostile grafts aborted,
    /// and the core costs measured.
    Demo {
        /// Skip the measurements at the end.
        #[arg(long)]
        no_bench: bool,
    },
    /// Build, inspect and check grafts.
    #[command(subcommand)]
    Graft(graft::GraftCommand),
    /// Run a benchmark and print its tables (also written as JSON and a plot).
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { no_bench } => demo::run(!no_bench),
        Command::Graft(cmd) => graft::run(cmd),
        Command::Bench { which } => bench::run(which),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vino: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where results go unless `--out` says otherwise.
pub(crate) fn default_results_dir() -> PathBuf {
    PathBuf::from("results")
}
