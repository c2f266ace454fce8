//! `vino-sim`: runs seeds of the deterministic kernel simulator (see the crate documentation).
//!
//! ```text
//! vino-sim --seeds 1000            # seeds 0..1000
//! vino-sim --seeds 500 --from 7000
//! vino-sim --seed 42               # one seed, again
//! ```
//!
//! Quiet when every seed passes (`--json` prints the reports); each failing seed goes to stderr
//! with the command that reruns it, and the exit status is 1.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;
use vino_sim::{SimOptions, run_many, summary};

#[derive(Parser)]
#[command(
    name = "vino-sim",
    about = "Deterministic simulation of the whole VINO kernel, with power cuts"
)]
struct Args {
    /// Run this one seed.
    #[arg(long, conflicts_with_all = ["seeds", "from"])]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Steps of each seed's workload.
    #[arg(long, default_value_t = SimOptions::default().steps)]
    steps: usize,
    /// Skip the second pass (the power cut).
    #[arg(long)]
    no_crash: bool,
    /// Turn ordered mode off (shows the hole the simulator finds; seeds are expected to fail).
    #[arg(long)]
    unordered: bool,
    /// Leave a failed graft call's writes in its memory (shows that the simulator finds them;
    /// seeds are expected to fail).
    #[arg(long)]
    no_memory_rollback: bool,
    /// Make stream files too (in `/s`, bound to a codec).
    #[arg(long)]
    streams: bool,
    /// Print every seed's report and the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write the recordings of a failing seed's grafts here (`vino graft replay` reads them).
    #[arg(long)]
    record_dir: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = SimOptions {
        steps: args.steps,
        crash: !args.no_crash,
        ordered: !args.unordered,
        roll_back_memory: !args.no_memory_rollback,
        graft: None,
        streams: args.streams,
        record_dir: args.record_dir,
    };
    let (from, count) = match args.seed {
        Some(s) => (s, 1),
        None => (args.from, args.seeds),
    };
    let tty = std::io::stderr().is_terminal();
    let mut done = 0u64;
    let (reports, failures) = run_many(from, count, &opts, |seed, r| {
        done += 1;
        if let Err(f) = r {
            eprintln!("{f}");
        }
        if tty && count > 1 {
            eprint!("\rvino-sim: {done}/{count} seeds (last {seed})\x1b[K");
        }
    });
    if tty && count > 1 {
        eprintln!();
    }
    if args.json {
        let out = serde_json::json!({
            "summary": summary(&reports),
            "failed": failures.iter().map(|f| f.seed).collect::<Vec<_>>(),
            "reports": reports,
        });
        println!("{out}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("vino-sim: {} of {count} seeds failed", failures.len());
        ExitCode::FAILURE
    }
}
