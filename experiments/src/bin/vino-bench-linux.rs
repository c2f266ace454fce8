//! `vino-bench-linux` (`vino bench linux`, `e9`): E9, the Wisconsin query on Linux's own stack,
//! where the machine allows it, beside VINO's runs of it on the same disk. Writes `linux.json`
//! and `linux.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e9_linux as e9;
use vino_experiments::front::{self, Common};

/// E9: the Wisconsin query on Linux's own stack (ext4 on a loop device, cgroup-limited page
/// cache, fadvise hints), where the machine allows it.
#[derive(Parser)]
#[command(name = "vino-bench-linux")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Run Linux's side only (by default VINO's runs of the same query come first, on an image
    /// in the same scratch directory).
    #[arg(long)]
    linux_only: bool,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        linux_only,
    } = Args::parse();
    let opts = e9::E9Options {
        quick: common.quick,
        scratch_dir: scratch,
        vino: !linux_only,
        ..Default::default()
    };
    let result = front::experiment(
        &common,
        "linux",
        |p| e9::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-linux", result)
}
