//! `vino bench ...`: run a benchmark, print its tables, write JSON and plots.

use crate::progress::Progress;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use std::path::{Path, PathBuf};
use vino_experiments::exttech::{self, ExtTechOptions, ExtTechReport};
use vino_experiments::graftcost::{self, GraftCostReport};
use vino_experiments::report::{Table, write_json};

#[derive(Args)]
pub struct Common {
    /// CI-sized runs: fewer rounds and smaller inputs.
    #[arg(long)]
    pub quick: bool,
    /// Print the results as JSON on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Where to write the JSON file and the plots.
    #[arg(long, default_value_os_t = crate::default_results_dir())]
    pub out: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CorePart {
    All,
    /// Transactions, null-graft invocation, graft loading.
    Costs,
    /// The extension-technology study (E2/E3).
    Extensions,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The safe-extension core: E1 transactions, null-graft invocation, graft loading, and the
    /// extension-technology study (E2/E3: native, Wasm, interpreter, separate process).
    Core {
        #[command(flatten)]
        common: Common,
        /// Run only part of it.
        #[arg(long, value_enum, default_value_t = CorePart::All)]
        part: CorePart,
        /// Scratch directory for the device-cost file (must allow O_DIRECT: not a tmpfs).
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// E4: Wisconsin query 6 with look-ahead eviction and read-ahead grafts, protected and
    /// unprotected, on the plain device and the 1990s disk model (thesis 7.3).
    #[command(alias = "e4")]
    Wisconsin {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_enum, default_value_t = DeviceChoice::Both)]
        device: DeviceChoice,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// E6: file layout, default FFS placement vs the NoSwitch graft vs NoSwitch native (thesis 7.5).
    #[command(alias = "e6")]
    Layout {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// E7: gunzip of a file stored in VINO under read-ahead of 0-8 blocks and the default (TR 4.3).
    #[command(alias = "e7")]
    Gunzip {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// E5: file unlink events vs polling with stat; asynchronous and synchronous bookkeeping
    /// grafts, protected, unprotected and at user level (thesis 7.4).
    #[command(alias = "e5")]
    Events {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// E8: byte-range lock granting, FIFO/reader priority vs strict FIFO (native and graft), four
    /// processes under a varying write share (Seltzer et al. 1995, 4.4).
    #[command(alias = "e8")]
    Locks {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// E9: the Wisconsin query on Linux's own stack (ext4 on a loop device, cgroup-limited page
    /// cache, fadvise hints), where the machine allows it.
    #[command(alias = "e9")]
    Linux {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// What serving the kernel from vinod costs: null call round trip, cached 4 KiB and 64 KiB
    /// reads over the socket and through shared memory, against calls in the same process.
    Daemon {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "target/vino-bench")]
        scratch: PathBuf,
    },
    /// Many clients against one daemon for a while; checks no record lost and nothing leaked.
    Soak {
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
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceChoice {
    Plain,
    Model,
    Both,
}

#[derive(Serialize)]
struct CoreResults {
    quick: bool,
    costs: Option<GraftCostReport>,
    extensions: Option<ExtTechReport>,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    use vino_experiments::{
        e4_wisconsin as e4, e5_events as e5, e6_layout as e6, e7_gunzip as e7, e8_locks as e8, e9_linux as e9,
    };
    match cmd {
        BenchCommand::Core { common, part, scratch } => core(&common, part, scratch),
        BenchCommand::Wisconsin {
            common,
            device,
            scratch,
        } => {
            let devices = match device {
                DeviceChoice::Plain => e4::Devices::Plain,
                DeviceChoice::Model => e4::Devices::Model,
                DeviceChoice::Both => e4::Devices::Both,
            };
            let opts = e4::E4Options {
                quick: common.quick,
                scratch_dir: scratch,
                devices,
                ..Default::default()
            };
            experiment(
                &common,
                "wisconsin",
                |p| e4::run(&opts, p),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
        BenchCommand::Layout { common, scratch } => {
            let opts = e6::E6Options {
                scratch_dir: scratch,
                ..e6::E6Options::new(common.quick)
            };
            experiment(
                &common,
                "layout",
                |p| e6::run(&opts, p),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
        BenchCommand::Gunzip { common, scratch } => {
            let opts = e7::E7Options {
                scratch_dir: scratch,
                ..e7::E7Options::new(common.quick)
            };
            experiment(
                &common,
                "gunzip",
                |p| e7::run(&opts, p),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
        BenchCommand::Events { common, scratch } => {
            let opts = e5::E5Options {
                scratch_dir: scratch,
                ..e5::E5Options::new(common.quick)
            };
            experiment(
                &common,
                "events",
                |p| e5::run(&opts, p),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
        BenchCommand::Locks { common, scratch } => {
            let opts = e8::E8Options {
                scratch_dir: scratch,
                ..e8::E8Options::new(common.quick)
            };
            experiment(
                &common,
                "locks",
                |p| e8::run(&opts, p),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
        BenchCommand::Linux { common, scratch } => {
            let opts = e9::E9Options {
                quick: common.quick,
                scratch_dir: scratch,
                ..Default::default()
            };
            experiment(
                &common,
                "linux",
                |p| e9::run(&opts, p),
                |r| r.tables(),
                |r, path| r.plot(path),
            )
        }
        BenchCommand::Daemon { common, scratch } => {
            crate::remote::bench_daemon(common.quick, common.json, &scratch, &common.out)
        }
        BenchCommand::Soak {
            clients,
            secs,
            threads,
            json,
            scratch,
        } => crate::remote::soak(clients, secs, threads, json, &scratch),
    }
}

/// Runs one experiment with progress, writes `<name>.json` and `<name>.svg` under `--out`, and
/// prints its tables (or the JSON).
fn experiment<R: Serialize>(
    common: &Common,
    name: &str,
    run: impl FnOnce(&mut dyn FnMut(&str)) -> Result<R>,
    tables: impl Fn(&R) -> Vec<Table>,
    plot: impl Fn(&R, &Path) -> Result<()>,
) -> Result<()> {
    let mut p = Progress::new(name);
    let report = run(&mut |m| p.step(m)).with_context(|| format!("experiment {name}"))?;
    p.finish();
    let (json, svg) = (
        common.out.join(format!("{name}.json")),
        common.out.join(format!("{name}.svg")),
    );
    write_json(&json, &report)?;
    plot(&report, &svg).with_context(|| format!("plotting {name}"))?;
    emit(common, &report, &tables(&report), &[&json, &svg])
}

fn core(common: &Common, part: CorePart, scratch: PathBuf) -> Result<()> {
    let mut results = CoreResults {
        quick: common.quick,
        costs: None,
        extensions: None,
    };
    // The extension study forks its upcall server before any other thread exists, so it runs
    // first.
    if part != CorePart::Costs {
        let mut p = Progress::new("extension technologies");
        let opts = ExtTechOptions {
            quick: common.quick,
            scratch_dir: scratch,
        };
        let report = exttech::run(&opts, &mut |m| p.step(m)).context("extension-technology study")?;
        p.finish();
        report
            .plot(&common.out.join("exttech.svg"))
            .context("plotting the extension study")?;
        results.extensions = Some(report);
    }
    if part != CorePart::Extensions {
        let mut p = Progress::new("core costs");
        let report = graftcost::run(common.quick, &mut |m| p.step(m));
        p.finish();
        report
            .plot(&common.out.join("core-costs.svg"))
            .context("plotting the core costs")?;
        results.costs = Some(report);
    }
    write_json(&common.out.join("core.json"), &results)?;
    let mut tables: Vec<Table> = Vec::new();
    if let Some(c) = &results.costs {
        tables.extend(c.tables());
    }
    if let Some(e) = &results.extensions {
        tables.extend(e.tables());
    }
    emit(
        common,
        &results,
        &tables,
        &[&common.out.join("core.json"), &common.out.join("core-costs.svg")],
    )
}

/// Prints tables (or JSON) and says where the files went.
fn emit<T: Serialize>(common: &Common, value: &T, tables: &[Table], files: &[&Path]) -> Result<()> {
    if common.json {
        println!("{}", serde_json::to_string_pretty(value)?);
        return Ok(());
    }
    for t in tables {
        t.print();
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    println!("written: {}", names.join(", "));
    Ok(())
}
