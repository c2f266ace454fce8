//! `vino-bench-serve` (`vino bench serve`): a server in the kernel (the `http_server.c` graft)
//! against the same server as a VINO process (`httpd.c`), in one run: requests per second and
//! latency for a 4 KiB and a 1 MiB file. Writes `serve.json` and `serve.svg`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::serve;

/// A server in the kernel against the same server as a VINO process.
#[derive(Parser)]
#[command(name = "vino-bench-serve")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the built programs go.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Repetitions (default 5; 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Seconds per measurement (default 2; 0.3 with --quick).
    #[arg(long)]
    secs: Option<f64>,
}

fn main() -> ExitCode {
    let Args {
        common,
        scratch,
        reps,
        secs,
    } = Args::parse();
    let defaults = serve::ServeOptions::new(common.quick);
    let opts = serve::ServeOptions {
        scratch,
        reps: reps.unwrap_or(defaults.reps),
        secs: secs.unwrap_or(defaults.secs),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "serve",
        |p| serve::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-serve", result)
}
