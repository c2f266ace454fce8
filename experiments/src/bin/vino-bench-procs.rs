//! `vino-bench-procs` (`vino bench procs`): what spawning a process, a pipe's throughput and a
//! round trip between two processes cost a VINO process, against the same C on Linux, in one
//! run. Writes `procs.json` and `procs.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::procs;

/// Spawn + wait, pipe throughput and ping-pong latency: a VINO process against the same C
/// program on Linux (experiments/programs/procs.c).
#[derive(Parser)]
#[command(name = "vino-bench-procs")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the host's build of the programs goes.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Rounds, the sides alternating (default 5; 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Only this measure (spawn, pipe or pingpong; repeatable), e.g. to profile it.
    #[arg(long)]
    only: Vec<String>,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rounds,
        only,
    } = Args::parse();
    let defaults = procs::ProcsOptions::new(common.quick);
    let opts = procs::ProcsOptions {
        scratch,
        rounds: rounds.unwrap_or(defaults.rounds),
        only,
        ..defaults
    };
    let result = front::experiment(
        &common,
        "procs",
        |p| procs::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-procs", result)
}
