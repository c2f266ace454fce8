//! `vino-bench-native` (`vino bench native`): real programs (SQLite, gzip, bzip2, and lz4, zstd
//! and minigzip where the SDK builds them) as VINO processes against the same .wasm on stock
//! wasmtime and Node's WASI and the same C sources compiled for Linux, on the same inputs.
//! Writes `native.json` and `native.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::native;

/// Real programs as VINO processes against the same .wasm on stock wasmtime and Node's WASI and
/// the same C sources compiled for Linux, on the same inputs.
#[derive(Parser)]
#[command(name = "vino-bench-native")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the daemon's image and the host's directories go (a real disk, not tmpfs).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Rows SQLite inserts (default 100,000; 5,000 with --quick).
    #[arg(long)]
    rows: Option<u64>,
    /// MiB of text compressed and restored (default 20; 1 with --quick).
    #[arg(long)]
    text_mib: Option<usize>,
    /// Rounds, the sides alternating within each (default 3; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Leave Node's WASI out even if `node` is there.
    #[arg(long)]
    no_node: bool,
    /// Also measure what wasmtime's settings change (default; not with --quick).
    #[arg(long)]
    settings: bool,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rows,
        text_mib,
        rounds,
        no_node,
        settings,
    } = Args::parse();
    let defaults = native::NativeOptions::new(common.quick);
    let opts = native::NativeOptions {
        scratch,
        sqlite_rows: rows.unwrap_or(defaults.sqlite_rows),
        text_bytes: text_mib.map_or(defaults.text_bytes, |m| m << 20),
        rounds: rounds.unwrap_or(defaults.rounds),
        node: !no_node,
        settings: settings || defaults.settings,
        ..defaults
    };
    let result = front::experiment(
        &common,
        "native",
        |p| native::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-native", result)
}
