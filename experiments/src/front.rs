//! What every experiment program (`src/bin/vino-bench-*.rs`) shares: the common options, running
//! an experiment with progress on stderr, writing its JSON file and plot, printing its tables
//! (or the JSON), and the exit status. `vino bench <name> ARGS...` runs `vino-bench-<name> ARGS...`.

use crate::progress::Progress;
use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vino_measure::report::{Table, write_json};

#[derive(Args)]
pub struct Common {
    /// CI-sized runs: fewer rounds and smaller inputs.
    #[arg(long)]
    pub quick: bool,
    /// Print the results as JSON on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Where to write the JSON file and the plots.
    #[arg(long, default_value_os_t = default_results_dir())]
    pub out: PathBuf,
    /// Print only: write no JSON file and no plot.
    #[arg(long)]
    pub no_files: bool,
}

/// Where results go unless `--out` says otherwise.
pub fn default_results_dir() -> PathBuf {
    PathBuf::from("results")
}

/// Runs one experiment with progress, writes `<name>.json` and `<name>.svg` under `--out` (unless
/// `--no-files`), and prints its tables (or the JSON).
pub fn experiment<R: Serialize>(
    common: &Common,
    name: &str,
    run: impl FnOnce(&mut dyn FnMut(&str)) -> Result<R>,
    tables: impl Fn(&R) -> Vec<Table>,
    plot: impl Fn(&R, &Path) -> Result<()>,
) -> Result<()> {
    warn_if_checked_build(name);
    let mut p = Progress::new(name);
    let report = run(&mut |m| p.step(m)).with_context(|| format!("experiment {name}"))?;
    p.finish();
    let (json, svg) = (
        common.out.join(format!("{name}.json")),
        common.out.join(format!("{name}.svg")),
    );
    if common.no_files {
        return emit(common, &report, &tables(&report), &[]);
    }
    write_json(&json, &report)?;
    plot(&report, &svg).with_context(|| format!("plotting {name}"))?;
    emit(common, &report, &tables(&report), &[&json, &svg])
}

/// Prints tables (or JSON) and says where the files went.
pub fn emit<T: Serialize>(common: &Common, value: &T, tables: &[Table], files: &[&Path]) -> Result<()> {
    if common.json {
        println!("{}", serde_json::to_string_pretty(value)?);
        return Ok(());
    }
    for t in tables {
        t.print();
    }
    if !files.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        println!("written: {}", names.join(", "));
    }
    Ok(())
}

/// A fresh directory under `scratch` (created if need be), removed when dropped.
pub fn scratch_dir(scratch: &Path) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(scratch).with_context(|| format!("creating {}", scratch.display()))?;
    Ok(tempfile::tempdir_in(scratch)?)
}

/// The exit status of an experiment program: success, or the error on stderr after the
/// program's name.
pub fn exit(program: &str, result: Result<()>) -> ExitCode {
    warn_if_checked_build(program);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// True if the kernel's crates in this build check their invariants after every operation.
pub fn checked_build() -> bool {
    vino_cache::CHECKS_INVARIANTS || vino_fs::CHECKS_INVARIANTS || vino_locks::CHECKS_INVARIANTS
}

/// Says once, on stderr, that the numbers of this build are not to be quoted: `cargo test
/// --release --workspace` builds every binary with the invariant checks on (its dev-dependencies'
/// features apply to the whole build), and those binaries replace the ones `cargo build
/// --release` made in the same directory.
pub fn warn_if_checked_build(program: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if checked_build() {
        WARNED.call_once(|| {
            eprintln!(
                "{program}: warning: this build checks the kernel's invariants after every operation \
                 (a debug build, or one made by `cargo test`); its times are not the kernel's. \
                 Build with `cargo build --release --workspace` to measure."
            )
        });
    }
}
