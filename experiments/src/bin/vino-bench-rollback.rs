//! `vino-bench-rollback` (`vino bench rollback`): what rolling a graft's memory back on abort
//! costs, rollback on against off in one run (the null graft, grafts storing 1-1000 words,
//! failed calls with 0-1000 undo records, E3's hot list). Writes `rollback.json` and
//! `rollback.svg`.

use clap::Parser;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::rollback;

/// Memory rollback: the undo log's cost per call, per word stored and per record undone.
#[derive(Parser)]
#[command(name = "vino-bench-rollback")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Rounds of every comparison (default 41; 9 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
}

fn main() -> ExitCode {
    let Args { common, rounds } = Args::parse();
    let defaults = rollback::RollbackOptions::new(common.quick);
    let opts = rollback::RollbackOptions {
        rounds: rounds.unwrap_or(defaults.rounds).max(1),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "rollback",
        |p| rollback::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-rollback", result)
}
