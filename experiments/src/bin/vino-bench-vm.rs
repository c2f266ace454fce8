//! `vino-bench-vm` (`vino bench vm`): what a page fault costs on this machine (first touch, the
//! userfaultfd round trip, swap-in, a mapped ext4 file cold and hot), each against the
//! userfaultfd round trip, the floor for a pager in user space, on Linux and as a VINO process;
//! and what paging costs SQLite and gzip. Writes `vm.json` and `vm.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::vm;

/// Page-fault costs on Linux and VINO: first touch, userfaultfd, swap-in, mapped file
/// (experiments/programs/vm.c); and SQLite and gzip as VINO processes with their memory paged
/// and not. Linux's swap-in needs root and a memory cgroup, and is skipped with the reason
/// otherwise.
#[derive(Parser)]
#[command(name = "vino-bench-vm")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the host's build, the mapped file and the swap file go (one disk).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Rounds (default 5; 2 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rounds,
    } = Args::parse();
    let defaults = vm::VmOptions::new(common.quick);
    let opts = vm::VmOptions {
        scratch,
        rounds: rounds.unwrap_or(defaults.rounds),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "vm",
        |p| vm::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-vm", result)
}
