//! `vino-bench-layers` (`vino bench layers`): stream layers on a socket (LZ4, ChaCha20-Poly1305,
//! both) against the plain connection, over the loopback between two users' processes, in one
//! run. Writes `layers.json` and `layers.svg`.

use clap::Parser;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::layers;

/// Stream layers on a socket: throughput through LZ4 and ChaCha20-Poly1305 layers beside plain.
#[derive(Parser)]
#[command(name = "vino-bench-layers")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Repetitions (default 5; 2 with --quick).
    #[arg(long)]
    reps: Option<usize>,
}

fn main() -> ExitCode {
    let Args { common, reps } = Args::parse();
    let defaults = layers::LayersOptions::new(common.quick);
    let opts = layers::LayersOptions {
        reps: reps.unwrap_or(defaults.reps),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "layers",
        |p| layers::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-layers", result)
}
