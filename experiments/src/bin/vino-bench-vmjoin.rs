//! `vino-bench-vmjoin` (`vino bench vm-join`): experiment E4's Wisconsin join with its relations
//! in a program's own memory, under VINO's default eviction, under the look-ahead graft the
//! program loads on its own pages, and on Linux with the same memory. Writes `vm-join.json` and
//! `vm-join.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::vm_join;

/// The Wisconsin join of E4 in program memory (experiments/programs/vm_join.c): VINO's default
/// policy, VINO with the look-ahead graft, Linux in a memory cgroup with a swap file. Linux's
/// side needs root and a memory cgroup, and is skipped with the reason otherwise.
#[derive(Parser)]
#[command(name = "vino-bench-vmjoin")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the host's build, VINO's image and Linux's swap file go (one disk).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Rounds (default 5; 2 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Keys the graft looks ahead (default: half the memory's pages, two record reads a key).
    #[arg(long)]
    lookahead: Option<u32>,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rounds,
        lookahead,
    } = Args::parse();
    let defaults = vm_join::VmJoinOptions::new(common.quick);
    let opts = vm_join::VmJoinOptions {
        scratch,
        rounds: rounds.unwrap_or(defaults.rounds),
        lookahead: lookahead.unwrap_or(defaults.lookahead),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "vm-join",
        |p| vm_join::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-vmjoin", result)
}
