//! `vino-bench-vmlat` (`vino bench vm-latency`): another user's page-fault latency (first touch
//! and swap-in, p50 and p99) alone and beside hostile neighbours in another uid: a hog swapping
//! far over its resident limit, the hog with a `vm.fault_around` graft asking for the most, and
//! with one that loops. Writes `vm-latency.json` and `vm-latency.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::vm_latency;

/// Another user's fault latency beside hostile neighbours (experiments/programs/vm_lat.c as VINO
/// processes). Needs userfaultfd (root, or vm.unprivileged_userfaultfd) for the kernel to page
/// programs' memory.
#[derive(Parser)]
#[command(name = "vino-bench-vmlat")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the VINO image goes.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Rounds (default 5; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rounds,
    } = Args::parse();
    let defaults = vm_latency::VmLatencyOptions::new(common.quick);
    let opts = vm_latency::VmLatencyOptions {
        scratch,
        rounds: rounds.unwrap_or(defaults.rounds),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "vm-latency",
        |p| vm_latency::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-vmlat", result)
}
