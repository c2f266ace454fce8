//! `vino-bench-net` (`vino bench net`): VINO's TCP/IP stack against Linux's over a TUN link,
//! beside the raw packet pump through the same link and Linux to Linux over a veth pair; with
//! 1% loss; and a victim user's round trips while another user's port is flooded. Writes
//! `net.json` and `net.svg`. Needs root (network namespaces, a TUN device, a veth pair).

use clap::Parser;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::net;

/// VINO's network stack against Linux's, over a link between them (experiments/src/net.rs).
#[derive(Parser)]
#[command(name = "vino-bench-net")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Rounds (default 3; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each bulk transfer sends (default 2; 0.4 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
}

fn main() -> ExitCode {
    let Args {
        common,
        rounds,
        seconds,
    } = Args::parse();
    let defaults = net::NetOptions::new(common.quick);
    let opts = net::NetOptions {
        rounds: rounds.unwrap_or(defaults.rounds).max(1),
        seconds: seconds.unwrap_or(defaults.seconds),
        ..defaults
    };
    let result = front::experiment(
        &common,
        "net",
        |p| net::run(&opts, p),
        |r| r.tables(),
        |r, path| r.plot(path),
    );
    front::exit("vino-bench-net", result)
}
