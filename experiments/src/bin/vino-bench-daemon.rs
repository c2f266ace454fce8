//! `vino-bench-daemon` (`vino bench daemon`): what serving the kernel from vinod costs: null call
//! round trip, cached 4 KiB and 64 KiB reads over the socket, through shared memory and through a
//! FUSE mount, against calls in the same process. Writes `daemon.json`.

use anyhow::Result;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};

/// What serving the kernel from vinod costs: null call round trip, cached 4 KiB and 64 KiB
/// reads over the socket and through shared memory, against calls in the same process.
#[derive(Parser)]
#[command(name = "vino-bench-daemon")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    front::exit("vino-bench-daemon", run(&args))
}

fn run(Args { common, scratch }: &Args) -> Result<()> {
    let dir = front::scratch_dir(scratch)?;
    let report = vino_experiments::daemon::run(dir.path(), common.quick).map_err(anyhow::Error::msg)?;
    let file = common.out.join("daemon.json");
    if !common.no_files {
        vino_measure::report::write_json(&file, &report)?;
    }
    for note in &report.notes {
        eprintln!("vino-bench-daemon: {note}");
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{:<22} {:<36} {:>12}", "operation", "path", "ns/op");
    for r in &report.rows {
        println!("{:<22} {:<36} {:>12.0}", r.operation, r.path, r.ns_per_op);
    }
    println!();
    println!(
        "{:<40} {:>7} {:>10} {:>10} {:>10}",
        "single calls (lock: lock + unlock)", "calls", "p50 µs", "p99 µs", "max µs"
    );
    for t in &report.tails {
        let us = |ns: u64| ns as f64 / 1e3;
        println!(
            "{:<40} {:>7} {:>10.1} {:>10.1} {:>10.1}",
            t.operation,
            t.calls,
            us(t.p50_ns),
            us(t.p99_ns),
            us(t.max_ns)
        );
    }
    if !common.no_files {
        println!("written: {}", file.display());
    }
    Ok(())
}
