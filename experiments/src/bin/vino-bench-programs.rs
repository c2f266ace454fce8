//! `vino-bench-programs` (`vino bench programs`): unmodified programs (tar, cp, du, find,
//! sha256sum, diff, git, SQLite, dd, random reads) on the VINO mount and on ext4 over a loop
//! device with the same cache memory, in one run. Writes `programs.json` and `programs.svg`.
//! Needs root, FUSE, a loop device and mkfs.ext4.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::programs as p;

#[derive(Parser)]
#[command(name = "vino-bench-programs")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Where the images, the tree and the mounts go (a real disk).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
    /// Page cache of each side in MiB (default 256; quick 64).
    #[arg(long)]
    cache_mib: Option<u64>,
    /// The VINO side's free frames made ahead of need (`cache_warm_ahead`; 0: off; default:
    /// the daemon's).
    #[arg(long)]
    cache_warm_ahead: Option<usize>,
    /// Whole runs of both sides; the median of each step is reported.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Only these steps (by name, e.g. --only "tar x"), repeatable.
    #[arg(long)]
    only: Vec<String>,
    /// The VINO side's FUSE transports, each run in turn: io_uring, dev_fuse (repeatable;
    /// default both where Linux has FUSE over io_uring), with the mount's default idle polling
    /// (over io_uring, in an idle cgroup); `_no_idle_poll` after either runs it with idle
    /// polling off
    /// (`mount_idle_poll_us = 0`), `_idle_poll` with it on wherever the pollers can run
    /// (`mount_idle_poll_us = 200`).
    #[arg(long, value_parser = [
        "io_uring", "dev_fuse",
        "io_uring_no_idle_poll", "dev_fuse_no_idle_poll",
        "io_uring_idle_poll", "dev_fuse_idle_poll",
    ])]
    transport: Vec<String>,
    #[command(subcommand)]
    tool: Option<Tool>,
}

/// The small programs the steps run (this program again).
#[derive(Subcommand)]
enum Tool {
    /// N random 4 KiB reads of FILE.
    Randread { file: PathBuf, n: u64 },
    /// N random 4 KiB reads through inherited descriptor FD.
    RandreadFd { fd: i32, n: u64 },
    /// ROWS SQLite inserts into DB.
    Sqlite { db: PathBuf, rows: u64 },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.tool {
        Some(Tool::Randread { file, n }) => p::random_reads(&file, n),
        Some(Tool::RandreadFd { fd, n }) => p::random_reads_fd(fd, n),
        Some(Tool::Sqlite { db, rows }) => p::sqlite_inserts(&db, rows),
        None => {
            let mut opts = p::ProgramsOptions::new(args.common.quick);
            opts.scratch = args.scratch;
            opts.repeats = args.repeats.max(1);
            opts.only = args.only;
            if !args.transport.is_empty() {
                opts.transports = args.transport;
            }
            if let Some(mib) = args.cache_mib {
                opts.cache = mib << 20;
            }
            opts.warm_ahead = args.cache_warm_ahead;
            front::experiment(
                &args.common,
                "programs",
                |progress| p::run(&opts, progress),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
    };
    front::exit("vino-bench-programs", result)
}
