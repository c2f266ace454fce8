//! `vino-bench-syscalls` (`vino bench syscalls`, `e10`): E10, what a system call costs a VINO
//! process (a null call, a cached 4 KiB read) against the same through vinod's client library,
//! through the FUSE mount and on Linux, in one run. Writes `syscalls.json` and `syscalls.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e10_syscalls as e10;
use vino_experiments::front::{self, Common};

/// E10: a system call from a VINO process (null call, cached 4 KiB read) against the same
/// through vinod's client library, through the FUSE mount, and on Linux.
#[derive(Parser)]
#[command(name = "vino-bench-syscalls")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the daemon's image and the host's file go.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Repetitions of every measurement (default 5; 3 with --quick).
    #[arg(long)]
    reps: Option<usize>,
}

fn main() -> ExitCode {
    let Args { common, scratch, reps } = Args::parse();
    let defaults = e10::SyscallsOptions::new(common.quick);
    let opts = e10::SyscallsOptions {
        scratch,
        reps: reps.unwrap_or(defaults.reps),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "syscalls",
        |p| e10::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-syscalls", result)
}
