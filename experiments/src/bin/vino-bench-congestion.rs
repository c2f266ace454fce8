//! `vino-bench-congestion` (`vino bench congestion`): Reno and CUBIC as `net.congestion` grafts
//! against the stack's built-ins over a seeded lossy wire, in one run: goodput (simulated time)
//! and what a call costs (machine time). Writes `congestion.json` and `congestion.svg`.

use clap::Parser;
use std::process::ExitCode;
use vino_experiments::congestion;
use vino_experiments::front::{self, Common};

/// Congestion control as a graft: goodput against the built-in at 1% loss, and the cost of a call.
#[derive(Parser)]
#[command(name = "vino-bench-congestion")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Repetitions (default 5; 2 with --quick).
    #[arg(long)]
    reps: Option<usize>,
}

fn main() -> ExitCode {
    let Args { common, reps } = Args::parse();
    let defaults = congestion::CongestionOptions::new(common.quick);
    let opts = congestion::CongestionOptions {
        reps: reps.unwrap_or(defaults.reps),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "congestion",
        |p| congestion::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-congestion", result)
}
