//! `vino-bench-try` (`vino bench try`): on E4's query, the look-ahead graft tried in shadow beside
//! LRU against the same graft bound, and the bound graft recorded and replayed offline. Writes
//! `try.json` and `try.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e4_wisconsin::{E4Options, try_replay};
use vino_experiments::front::{self, Common};

/// Graft try and replay on E4 (Wisconsin query 6 on the plain device).
#[derive(Parser)]
#[command(name = "vino-bench-try")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the disk image goes (not a tmpfs: the plain device wants O_DIRECT).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Rounds of the four runs (default 5; 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rounds,
    } = Args::parse();
    let opts = E4Options {
        quick: common.quick,
        scratch_dir: scratch,
        ..E4Options::default()
    };
    let result = front::experiment(
        &common,
        "try",
        |p| try_replay::run(&opts, rounds, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-try", result)
}
