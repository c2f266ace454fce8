//! `vino-bench-native` (`vino bench native`): real programs (SQLite, gzip, bzip2) as VINO
//! processes against the same C sources compiled for Linux and the same .wasm on stock
//! wasmtime-wasi, on the same inputs. Writes `native.json` and `native.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::native;

/// Real programs (SQLite, gzip, bzip2) as VINO processes against the same C sources
/// compiled for Linux and the same .wasm on stock wasmtime-wasi, on the same inputs.
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
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        rows,
        text_mib,
    } = Args::parse();
    let defaults = native::NativeOptions::new(common.quick);
    let opts = native::NativeOptions {
        scratch,
        sqlite_rows: rows.unwrap_or(defaults.sqlite_rows),
        text_bytes: text_mib.map_or(defaults.text_bytes, |m| m << 20),
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
