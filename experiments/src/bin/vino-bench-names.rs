//! `vino-bench-names` (`vino bench names`): what a bound `dir.access` or `dir.lookup` graft adds
//! to a walk step and to an open, against the same with nothing bound, in one run. Writes
//! `names.json` and `names.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::names;

/// Grafts over names: the cost of a bound access or lookup graft per walk step and per open.
#[derive(Parser)]
#[command(name = "vino-bench-names")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the image goes.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Turns, in each of which every case runs 5,000 calls of each kind (2,000 with --quick); default
    /// 200 (20 with --quick).
    #[arg(long)]
    reps: Option<usize>,
}

fn main() -> ExitCode {
    let Args { common, scratch, reps } = Args::parse();
    let defaults = names::NamesOptions::new(common.quick);
    let opts = names::NamesOptions {
        scratch,
        reps: reps.unwrap_or(defaults.reps),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "names",
        |p| names::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-names", result)
}
