//! `vino-bench-execverify` (`vino bench execverify`): the `exec.verify` SHA-256 allow-list
//! graft's digest rate on a real module against `sha256sum` on the same bytes, side by side in
//! each round. Writes `execverify.json` and `execverify.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::execverify;
use vino_experiments::front::{self, Common};

#[derive(Parser)]
#[command(name = "vino-bench-execverify")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// The module to verify (default: the SDK's sqlite3 program).
    #[arg(long)]
    module: Option<PathBuf>,
    /// Where the files sha256sum reads go.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let Args {
        common,
        module,
        scratch,
    } = Args::parse();
    let opts = execverify::Options {
        quick: common.quick,
        module,
        scratch,
    };
    let result = front::experiment(
        &common,
        "execverify",
        |p| execverify::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-execverify", result)
}
