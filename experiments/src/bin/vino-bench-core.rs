//! `vino-bench-core` (`vino bench core`): the safe-extension core. E1: transactions, null-graft
//! invocation, graft loading; E2/E3: the extension-technology study (native, Wasm, interpreter,
//! separate process). Writes `core.json`, `core-costs.svg` and `exttech.svg`.

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use vino_experiments::exttech::{self, ExtTechOptions, ExtTechReport};
use vino_experiments::front::{self, Common};
use vino_experiments::graftcost::{self, GraftCostReport};
use vino_experiments::progress::Progress;
use vino_measure::report::{Table, write_json};

/// The safe-extension core: E1 transactions, null-graft invocation, graft loading, and the
/// extension-technology study (E2/E3: native, Wasm, interpreter, separate process).
#[derive(Parser)]
#[command(name = "vino-bench-core")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Run only part of it.
    #[arg(long, value_enum, default_value_t = CorePart::All)]
    part: CorePart,
    /// Scratch directory for the device-cost file (must allow O_DIRECT: not a tmpfs).
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CorePart {
    All,
    /// Transactions, null-graft invocation, graft loading.
    Costs,
    /// The extension-technology study (E2/E3).
    Extensions,
}

#[derive(Serialize)]
struct CoreResults {
    quick: bool,
    costs: Option<GraftCostReport>,
    extensions: Option<ExtTechReport>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    front::exit("vino-bench-core", core(&args.common, args.part, args.scratch))
}

fn core(common: &Common, part: CorePart, scratch: PathBuf) -> Result<()> {
    let mut results = CoreResults {
        quick: common.quick,
        costs: None,
        extensions: None,
    };
    let files = !common.no_files;
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
        if files {
            report
                .plot(&common.out.join("exttech.svg"))
                .context("plotting the extension study")?;
        }
        results.extensions = Some(report);
    }
    if part != CorePart::Extensions {
        let mut p = Progress::new("core costs");
        let report = graftcost::run(common.quick, &mut |m| p.step(m));
        p.finish();
        if files {
            report
                .plot(&common.out.join("core-costs.svg"))
                .context("plotting the core costs")?;
        }
        results.costs = Some(report);
    }
    let mut tables: Vec<Table> = Vec::new();
    if let Some(c) = &results.costs {
        tables.extend(c.tables());
    }
    if let Some(e) = &results.extensions {
        tables.extend(e.tables());
    }
    if !files {
        return front::emit(common, &results, &tables, &[]);
    }
    write_json(&common.out.join("core.json"), &results)?;
    front::emit(
        common,
        &results,
        &tables,
        &[&common.out.join("core.json"), &common.out.join("core-costs.svg")],
    )
}
