//! `vino-bench-gunzip` (`vino bench gunzip`, `e7`): E7, gunzip of a file stored in VINO under
//! read-ahead of 0-8 blocks and the default (TR 4.3). Writes `gunzip.json` and `gunzip.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e7_gunzip as e7;
use vino_experiments::front::{self, Common};

/// E7: gunzip of a file stored in VINO under read-ahead of 0-8 blocks and the default (TR 4.3).
#[derive(Parser)]
#[command(name = "vino-bench-gunzip")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let Args { common, scratch } = Args::parse();
    let opts = e7::E7Options {
        scratch_dir: scratch,
        ..e7::E7Options::new(common.quick)
    };
    let result = front::experiment(
        &common,
        "gunzip",
        |p| e7::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-gunzip", result)
}
