//! `vino-bench-events` (`vino bench events`, `e5`): E5, file unlink events against polling with
//! stat (thesis 7.4). Writes `events.json` and `events.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e5_events as e5;
use vino_experiments::front::{self, Common};

/// E5: file unlink events vs polling with stat; asynchronous and synchronous bookkeeping
/// grafts, protected, unprotected and at user level (thesis 7.4).
#[derive(Parser)]
#[command(name = "vino-bench-events")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let Args { common, scratch } = Args::parse();
    let opts = e5::E5Options {
        scratch_dir: scratch,
        ..e5::E5Options::new(common.quick)
    };
    let result = front::experiment(
        &common,
        "events",
        |p| e5::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-events", result)
}
