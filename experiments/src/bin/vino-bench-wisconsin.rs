//! `vino-bench-wisconsin` (`vino bench wisconsin`, `e4`): E4, Wisconsin query 6 with look-ahead
//! eviction and read-ahead grafts (thesis 7.3). Writes `wisconsin.json` and `wisconsin.svg`.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::e4_wisconsin as e4;
use vino_experiments::front::{self, Common};

/// E4: Wisconsin query 6 with look-ahead eviction and read-ahead grafts, protected and
/// unprotected, on the plain device and the 1990s disk model (thesis 7.3).
#[derive(Parser)]
#[command(name = "vino-bench-wisconsin")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, value_enum, default_value_t = DeviceChoice::Both)]
    device: DeviceChoice,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DeviceChoice {
    Plain,
    Model,
    Both,
}

fn main() -> ExitCode {
    let Args {
        common,
        device,
        scratch,
    } = Args::parse();
    let devices = match device {
        DeviceChoice::Plain => e4::Devices::Plain,
        DeviceChoice::Model => e4::Devices::Model,
        DeviceChoice::Both => e4::Devices::Both,
    };
    let opts = e4::E4Options {
        quick: common.quick,
        scratch_dir: scratch,
        devices,
        ..Default::default()
    };
    let result = front::experiment(
        &common,
        "wisconsin",
        |p| e4::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-wisconsin", result)
}
