//! `vino-bench-isolation` (`vino bench isolation`): whether one user can hurt another through
//! vinod. A victim user's operations (open/read/close, lock/unlock, an event round trip, a graft
//! load) are timed alone, then while another user runs each attack (spinning grafts, control
//! calls, event floods, memory, compiles, connections, the disk). Writes `isolation.json` and
//! `isolation.svg`.
//!
//! The victim and the attacker are this program again, run as other users (`--role`).

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vino_experiments::front::{self, Common};
use vino_experiments::isolation::{self, Attack, Options, RoleArgs};

/// Whether one user can hurt another: the victim's latency alone and under each attack.
#[derive(Parser)]
#[command(name = "vino-bench-isolation")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// The attacks to run, comma-separated (default: all): lock-grant-spin, lock-contend,
    /// control-spin, event-flood, graft-hog, compile-bomb, connection-hog, disk-fill, sync-storm,
    /// event-filter, compile-churn, lock-count, listing, link-fill.
    #[arg(long, value_delimiter = ',')]
    attacks: Vec<String>,
    /// Seconds each phase measures the victim (default 5; 1 with --quick).
    #[arg(long)]
    phase_secs: Option<f64>,
    /// The role this program plays for the benchmark (victim or attacker).
    #[arg(long, hide = true)]
    role: Option<String>,
    #[arg(long, hide = true)]
    attack: Option<String>,
    #[arg(long, hide = true)]
    socket: Option<PathBuf>,
    #[arg(long, hide = true)]
    graft: Option<PathBuf>,
    #[arg(long, hide = true, default_value_t = 1.0)]
    secs: f64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.role {
        Some(role) => play(&args, role),
        None => bench(&args),
    };
    front::exit("vino-bench-isolation", result)
}

/// A role's program: the victim or the attacker of one phase.
fn play(args: &Args, role: &str) -> anyhow::Result<()> {
    let socket = args
        .socket
        .clone()
        .ok_or_else(|| anyhow::anyhow!("--role needs --socket"))?;
    let role = RoleArgs {
        role: role.to_string(),
        socket,
        attack: args.attack.clone(),
        graft: args.graft.clone(),
        secs: args.secs,
    };
    isolation::role_main(&role).map_err(anyhow::Error::msg)
}

fn bench(args: &Args) -> anyhow::Result<()> {
    let attacks = if args.attacks.is_empty() {
        Attack::ALL.to_vec()
    } else {
        args.attacks
            .iter()
            .map(|a| Attack::parse(a.trim()))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?
    };
    let secs = args.phase_secs.unwrap_or(if args.common.quick { 1.0 } else { 5.0 });
    anyhow::ensure!(secs > 0.0 && secs.is_finite(), "--phase-secs must be positive");
    let opts = Options {
        phase: Duration::from_secs_f64(secs),
        attacks,
        scratch: args.scratch.clone(),
        program: std::env::current_exe()?,
    };
    front::experiment(
        &args.common,
        "isolation",
        |p| isolation::run(&opts, p).map_err(anyhow::Error::msg),
        |r| r.tables(),
        |r, path| r.plot(path),
    )
}
