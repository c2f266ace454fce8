//! `vino bench ...`: run a benchmark, print its tables, write JSON and plots.

use crate::progress::Progress;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use std::path::{Path, PathBuf};
use vino_bench::exttech::{self, ExtTechOptions, ExtTechReport};
use vino_bench::graftcost::{self, GraftCostReport};
use vino_bench::report::{Table, write_json};

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
}

#[derive(Serialize)]
struct CoreResults {
    quick: bool,
    costs: Option<GraftCostReport>,
    extensions: Option<ExtTechReport>,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Core { common, part, scratch } => core(&common, part, scratch),
    }
}

fn core(common: &Common, part: CorePart, scratch: PathBuf) -> Result<()> {
    let mut results = CoreResults { quick: common.quick, costs: None, extensions: None };
    // The extension study forks its upcall server before any other thread exists, so it runs
    // first.
    if part != CorePart::Costs {
        let mut p = Progress::new("extension technologies");
        let opts = ExtTechOptions { quick: common.quick, scratch_dir: scratch };
        let report = exttech::run(&opts, &mut |m| p.step(m)).context("extension-technology study")?;
        p.finish();
        report.plot(&common.out.join("exttech.svg")).context("plotting the extension study")?;
        results.extensions = Some(report);
    }
    if part != CorePart::Extensions {
        let mut p = Progress::new("core costs");
        let report = graftcost::run(common.quick, &mut |m| p.step(m));
        p.finish();
        report.plot(&common.out.join("core-costs.svg")).context("plotting the core costs")?;
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
    emit(common, &results, &tables, &[&common.out.join("core.json"), &common.out.join("core-costs.svg")])
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
    println!("written: {} (and plots beside it)", names.join(", "));
    Ok(())
}
