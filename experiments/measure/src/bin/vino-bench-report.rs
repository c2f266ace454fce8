//! Rewrites the tables of the result pages (`docs/results/*.md`) from `results/*.json`;
//! `--check` only says which pages differ, and fails if any does.

use std::path::Path;
use std::process::ExitCode;

use vino_measure::pages::{FIX_COMMAND, sync};

fn main() -> anyhow::Result<ExitCode> {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(_) => {
            eprintln!("usage: vino-bench-report [--check]");
            return Ok(ExitCode::from(2));
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let stale = sync(&root, check)?;
    for page in &stale {
        let verb = if check {
            "differs from its results file"
        } else {
            "rewritten"
        };
        println!("{}: {verb}", page.strip_prefix(&root).unwrap_or(page).display());
    }
    if check && !stale.is_empty() {
        println!("run `{FIX_COMMAND}`");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
