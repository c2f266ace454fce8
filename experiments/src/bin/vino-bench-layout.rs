//! `vino-bench-layout` (`vino bench layout`, `e6`): E6, file layout: default FFS placement against
//! the NoSwitch graft and NoSwitch native (thesis 7.5). Writes `layout.json` and `layout.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e6_layout as e6;
use vino_experiments::front::{self, Common};

/// E6: file layout, default FFS placement vs the NoSwitch graft vs NoSwitch native (thesis 7.5).
#[derive(Parser)]
#[command(name = "vino-bench-layout")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let Args { common, scratch } = Args::parse();
    let opts = e6::E6Options {
        scratch_dir: scratch,
        ..e6::E6Options::new(common.quick)
    };
    let result = front::experiment(
        &common,
        "layout",
        |p| e6::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-layout", result)
}
