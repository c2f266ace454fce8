//! `vino-bench-miss` (`vino bench miss`): a cold random 4 KiB read, layer by layer (raw
//! `pread`, VINO's device, its queue, the I/O scheduler, a page-cache miss), in one run.
//! Writes `miss.json` and `miss.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::miss;

#[derive(Parser)]
#[command(name = "vino-bench-miss")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the image goes (a real disk, so that O_DIRECT reads reach it).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let Args { common, scratch } = Args::parse();
    let opts = miss::MissOptions {
        quick: common.quick,
        scratch,
    };
    let result = front::experiment(
        &common,
        "miss",
        |p| miss::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-miss", result)
}
