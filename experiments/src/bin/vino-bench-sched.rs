//! `vino-bench-sched` (`vino bench sched`, `e11`): E11, VINO's CPU scheduler: shares by
//! tickets, donation, and the costs of a thread switch and a scheduling decision. Writes
//! `sched.json` and `sched.svg`.

use clap::Parser;
use std::process::ExitCode;
use vino_experiments::e11_sched as e11;
use vino_experiments::front::{self, Common};

/// E11: CPU shares by tickets, donation, thread switch and decision costs.
#[derive(Parser)]
#[command(name = "vino-bench-sched")]
struct Args {
    #[command(flatten)]
    common: Common,
}

fn main() -> ExitCode {
    let Args { common } = Args::parse();
    let opts = e11::SchedOptions::new(common.quick);
    let result = front::experiment(
        &common,
        "sched",
        |p| e11::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-sched", result)
}
