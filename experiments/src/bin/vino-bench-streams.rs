//! `vino-bench-streams` (`vino bench streams`): each example stream graft (LZ4,
//! ChaCha20-Poly1305, CRC32C) encoding and decoding 64 KiB chunks of a source tree and a binary,
//! in Wasm through the kernel's codec path against the same C native; then whole files through
//! the kernel with each codec bound, against the device, the `lz4` command and btrfs. Writes
//! `streams.json` and `streams.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::streams;
use vino_graft::Interrupt;

#[derive(Parser)]
#[command(name = "vino-bench-streams")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// The binary corpus (default: the `vino` program beside this one).
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Count the grafts' budget in epoch ticks instead of fuel (what counting fuel costs).
    #[arg(long)]
    epoch: bool,
    /// Where the images go (not a tmpfs: they are opened with O_DIRECT).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Leave btrfs out (it needs root, a loop device and mkfs.btrfs).
    #[arg(long)]
    no_btrfs: bool,
}

fn main() -> ExitCode {
    let Args {
        common,
        binary,
        epoch,
        scratch,
        no_btrfs,
    } = Args::parse();
    let opts = streams::StreamsOptions {
        quick: common.quick,
        binary,
        interrupt: if epoch { Interrupt::Epoch } else { Interrupt::Fuel },
        scratch_dir: scratch,
        btrfs: !no_btrfs,
    };
    let result = front::experiment(
        &common,
        "streams",
        |p| streams::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-streams", result)
}
