//! `vino-bench-locks` (`vino bench locks`, `e8`): E8, byte-range lock granting, FIFO/reader
//! priority against strict FIFO (Seltzer et al. 1995, 4.4). Writes `locks.json` and `locks.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e8_locks as e8;
use vino_experiments::front::{self, Common};

/// E8: byte-range lock granting, FIFO/reader priority vs strict FIFO (native and graft), four
/// processes under a varying write share (Seltzer et al. 1995, 4.4).
#[derive(Parser)]
#[command(name = "vino-bench-locks")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let Args { common, scratch } = Args::parse();
    let opts = e8::E8Options {
        scratch_dir: scratch,
        ..e8::E8Options::new(common.quick)
    };
    let result = front::experiment(
        &common,
        "locks",
        |p| e8::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-locks", result)
}
