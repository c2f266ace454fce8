//! `vino graft ...`: build a graft from C, and check a module against a graftpoint.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::PathBuf;
use std::sync::Arc;
use vino_graft::{Access, GraftPoint, GraftSlot, Owner, Runtime};
use vino_toykernel::{ComputeRa, PickVictim, ToyApply, ToyFile, ToyKernel};

#[derive(Subcommand)]
pub enum GraftCommand {
    /// Compile a C graft to WebAssembly with the system clang (wasm32, no libc, optimized).
    Build {
        /// The C source.
        source: PathBuf,
        /// The module to write (default: the source with .wasm).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Optimization level: 0, 1, 2, 3, s or z.
        #[arg(short = 'O', long = "opt", default_value = "2")]
        opt: String,
        /// Keep debug information.
        #[arg(short, long)]
        debug: bool,
        /// Preprocessor definitions (NAME or NAME=VALUE).
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        defines: Vec<String>,
    },
    /// Check that a module would load at a graftpoint: valid, allowed imports, right entry point.
    Check {
        /// The module (.wasm, or .wat text).
        module: PathBuf,
        /// The graftpoint: toy.apply, vas.pick_victim or file.compute_ra.
        #[arg(long)]
        point: String,
    },
    #[command(flatten)]
    Remote(crate::remote::RemoteGraft),
}

pub fn run(cmd: GraftCommand) -> Result<()> {
    match cmd {
        GraftCommand::Build {
            source,
            output,
            opt,
            debug,
            defines,
        } => build(source, output, &opt, debug, defines),
        GraftCommand::Check { module, point } => check(module, &point),
        GraftCommand::Remote(cmd) => crate::remote::graft(cmd),
    }
}

fn build(source: PathBuf, output: Option<PathBuf>, opt: &str, debug: bool, defines: Vec<String>) -> Result<()> {
    let opt_level = match opt {
        "0" => vino_sdk::OptLevel::O0,
        "1" => vino_sdk::OptLevel::O1,
        "2" => vino_sdk::OptLevel::O2,
        "3" => vino_sdk::OptLevel::O3,
        "s" => vino_sdk::OptLevel::Os,
        "z" => vino_sdk::OptLevel::Oz,
        other => bail!("unknown optimization level `{other}` (0, 1, 2, 3, s, z)"),
    };
    let defines = defines
        .into_iter()
        .map(|d| match d.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (d, None),
        })
        .collect();
    let opts = vino_sdk::BuildOptions {
        opt_level,
        debug,
        defines,
        ..Default::default()
    };
    let output = output.unwrap_or_else(|| source.with_extension("wasm"));
    vino_sdk::build_c(&source, &output, &opts)?;
    Ok(())
}

fn check(module: PathBuf, point: &str) -> Result<()> {
    let wasm = std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?;
    let rt = Runtime::default();
    let kernel = Arc::new(ToyKernel::new(16));
    let loaded = match point {
        ToyApply::NAME => try_load::<ToyApply>(&rt, kernel, &wasm),
        PickVictim::NAME => try_load::<PickVictim>(&rt, kernel, &wasm),
        ComputeRa::NAME => try_load::<ComputeRa>(&rt, Arc::new(ToyFile::new(1 << 30)), &wasm),
        other => bail!("unknown graftpoint `{other}` (toy.apply, vas.pick_victim, file.compute_ra)"),
    };
    loaded.with_context(|| format!("{} does not load at {point}", module.display()))
}

fn try_load<G: GraftPoint>(rt: &Runtime, env: Arc<G::Env>, wasm: &[u8]) -> Result<()> {
    let slot: GraftSlot<G> = GraftSlot::new(rt, env, Access::Process(1), None);
    slot.load(wasm, Owner::process(1))?;
    Ok(())
}
