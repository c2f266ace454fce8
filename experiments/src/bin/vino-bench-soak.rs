//! `vino-bench-soak` (`vino bench soak`): many clients against one daemon for a while; checks
//! that no record was lost and nothing leaked. Each client is a program of its own, this one run
//! as `vino-bench-soak client ...` (`--threads` runs them as threads instead).

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vino_experiments::daemon::SoakClients;
use vino_experiments::front;

/// Many clients against one daemon for a while; checks no record lost and nothing leaked.
#[derive(Parser)]
#[command(name = "vino-bench-soak", args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    client: Option<Client>,
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value_t = 120)]
    secs: u64,
    /// Run the clients as threads of this program instead of separate programs.
    #[arg(long)]
    threads: bool,
    #[arg(long)]
    json: bool,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

#[derive(Subcommand)]
enum Client {
    /// One client of the soak run (the soak run starts them).
    #[command(hide = true)]
    Client {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        id: usize,
        #[arg(long)]
        secs: u64,
        #[arg(long)]
        graft: PathBuf,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.client {
        Some(Client::Client {
            socket,
            id,
            secs,
            graft,
        }) => soak_client(&socket, id, secs, &graft),
        None => soak(args.clients, args.secs, args.threads, args.json, &args.scratch),
    };
    front::exit("vino-bench-soak", result)
}

/// `vino-bench-soak client`: one client of the soak run, as a program of its own.
fn soak_client(socket: &Path, id: usize, secs: u64, graft: &Path) -> Result<()> {
    let line = vino_experiments::daemon::soak_client_main(socket, id, secs, graft).map_err(anyhow::Error::msg)?;
    println!("{line}");
    Ok(())
}

/// The soak run: a progress bar while it runs, then the report; fails if an invariant broke.
fn soak(clients: usize, secs: u64, threads: bool, json: bool, scratch: &Path) -> Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    use std::io::IsTerminal;
    let dir = front::scratch_dir(scratch)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new(secs);
        b.set_style(ProgressStyle::with_template("soak {bar:40} {pos}/{len} s {msg}").expect("valid template"));
        b
    });
    let started = std::time::Instant::now();
    // Each client a program of its own: this one, running `vino-bench-soak client`.
    let exe = std::env::current_exe().context("finding the vino-bench-soak program")?;
    let command = |id: usize, socket: &Path, secs: u64, graft: &Path| {
        let mut c = std::process::Command::new(&exe);
        c.arg("client").arg("--socket").arg(socket).arg("--graft").arg(graft);
        c.args(["--id", &id.to_string(), "--secs", &secs.to_string()]);
        c
    };
    let how = if threads {
        SoakClients::Threads
    } else {
        SoakClients::Processes(&command)
    };
    let report = vino_experiments::daemon::soak(dir.path(), clients, secs, how, |ops, _| {
        if let Some(b) = &bar {
            b.set_position(started.elapsed().as_secs().min(secs));
            b.set_message(format!("{ops} ops"));
        }
    })
    .map_err(anyhow::Error::msg)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} clients, {} s: {} operations ({:.0}/s), {} records, {} read-ahead graft calls",
            report.clients,
            report.secs,
            report.ops,
            report.ops as f64 / report.secs.max(1) as f64,
            report.records,
            report.graft_invocations
        );
    }
    if !report.problems.is_empty() {
        bail!("soak: {}", report.problems.join("; "));
    }
    Ok(())
}
