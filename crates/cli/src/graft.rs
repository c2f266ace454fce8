//! `vino graft ...`: build a graft from C, list the kernel's graftpoints, and check a module
//! against one of them.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::PathBuf;
use vino_graft::Runtime;
use vino_kernel::graftpoints;

#[derive(Subcommand)]
pub enum GraftCommand {
    /// Compile a C graft to WebAssembly with the system clang (wasm32, no libc, optimized).
    Build {
        /// The C source.
        source: PathBuf,
        /// The module to write (default: the source with .wasm).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        flags: BuildFlags,
    },
    /// Check that a module would load at one of the kernel's graftpoints: a valid module, only
    /// the imports the graftpoint allows, its entry point with the right signature, the argument
    /// area if it uses one, memory under the cap. Quiet on success.
    Check {
        /// The module (.wasm, or .wat text).
        module: PathBuf,
        /// The graftpoint, e.g. vas.pick_victim or event.fs.unlink (`vino graft points` lists them).
        #[arg(long)]
        point: String,
    },
    /// List the kernel's graftpoints: entry point and signature, callable functions, who may
    /// graft each, CPU budget.
    Points {
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// The Markdown table `docs/graft-abi.md` holds.
        #[arg(long)]
        markdown: bool,
    },
    /// Replay a recording (`vino graft record`, `vino graft load --record`) offline, without a
    /// kernel: with the recorded module, check that every answer and every failure comes again
    /// at the same call (exit status 1 at the first difference, said on stderr); with another
    /// module for the same graftpoint, what it would have decided on the same inputs, and, on
    /// the ghost models of `vino graft try`, what it would have read ahead (`file.compute_ra`)
    /// or missed (`vas.pick_victim`, on the recorded page accesses) against the recorded graft.
    /// Quiet on success unless asked (another module's ghost is printed).
    Replay {
        /// The recording.
        recording: PathBuf,
        /// The module to replay it on (.wasm, or .wat text).
        module: PathBuf,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// With --json, each invocation's decision too.
        #[arg(long, requires = "json")]
        decisions: bool,
        /// A line of totals on stdout.
        #[arg(short, long)]
        verbose: bool,
        /// Pages in each ghost cache, for another module at `file.compute_ra` (default: the
        /// kernel's cache).
        #[arg(long)]
        frames: Option<usize>,
    },
    #[command(flatten)]
    Remote(crate::remote::RemoteGraft),
}

pub fn run(cmd: GraftCommand) -> Result<()> {
    match cmd {
        GraftCommand::Build { source, output, flags } => build(source, output, flags),
        GraftCommand::Check { module, point } => check(module, &point),
        GraftCommand::Points { json, markdown } => points(json, markdown),
        GraftCommand::Replay {
            recording,
            module,
            json,
            decisions,
            verbose,
            frames,
        } => replay(&recording, &module, json, decisions, verbose, frames),
        GraftCommand::Remote(cmd) => crate::remote::graft(cmd),
    }
}

fn replay(
    recording: &std::path::Path,
    module: &std::path::Path,
    json: bool,
    decisions: bool,
    verbose: bool,
    frames: Option<usize>,
) -> Result<()> {
    use vino_graft::record::Recording;
    use vino_graft::replay::{ReplayOptions, replay};
    let bytes = std::fs::read(recording).with_context(|| format!("reading {}", recording.display()))?;
    let rec = Recording::from_bytes(&bytes).with_context(|| recording.display().to_string())?;
    let wasm = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    // Another module's decisions feed the read-ahead ghost.
    let ghosted = rec.header.point == <vino_kernel::graftpoints::ComputeRa as vino_graft::GraftPoint>::NAME;
    let mut report = replay(
        &rec,
        &wasm,
        ReplayOptions {
            decisions: decisions || ghosted,
            ..Default::default()
        },
    )?;
    let frames = frames.unwrap_or_else(|| vino_kernel::KernelConfig::default().cache_frames);
    let ghost = match report.same_module {
        true => None,
        false => vino_kernel::graft_try::replayed_ghost(&rec, &report, &wasm, frames)
            .transpose()
            .map_err(anyhow::Error::msg)?,
    };
    if !decisions {
        report.decisions = None;
    }
    if json {
        let mut out = serde_json::to_value(&report)?;
        if let Some(g) = &ghost {
            out["ghost"] = serde_json::to_value(g)?;
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else if let Some(g) = &ghost {
        print!("{}", crate::remote::try_table(&serde_json::to_value(g)?));
    }
    if !json && verbose {
        println!(
            "{}: {} of {} invocations as recorded ({} failed, {} as recorded; {} imposed), {} control calls, {:.0} invocations/s{}",
            rec.header.slot,
            report.matched,
            report.invocations,
            report.failed,
            report.failed_as_recorded,
            report.imposed,
            report.control_calls,
            report.rate,
            if report.same_module { "" } else { " (another module)" }
        );
    }
    if let Some(d) = &report.divergence {
        bail!(
            "the replay differs from the recording at invocation {} (event {}): recorded {}, replayed {}",
            d.invocation,
            d.event,
            d.expected,
            d.got
        );
    }
    if report.truncated && !json {
        eprintln!(
            "vino: the recording ends early ({}): replayed what it holds",
            rec.ended.as_deref().unwrap_or("its limit was reached")
        );
    }
    Ok(())
}

fn build(source: PathBuf, output: Option<PathBuf>, flags: BuildFlags) -> Result<()> {
    let opts = flags.options()?;
    let output = output.unwrap_or_else(|| source.with_extension("wasm"));
    vino_sdk::build_c(&source, &output, &opts)?;
    Ok(())
}

/// How clang builds: the flags `vino graft build` and `vino build` share.
#[derive(clap::Args)]
pub struct BuildFlags {
    /// Optimization level: 0, 1, 2, 3, s or z.
    #[arg(short = 'O', long = "opt", default_value = "2")]
    opt: String,
    /// Keep debug information.
    #[arg(short, long)]
    debug: bool,
    /// Preprocessor definitions (NAME or NAME=VALUE).
    #[arg(short = 'D', value_name = "NAME[=VALUE]")]
    defines: Vec<String>,
    /// Include directories.
    #[arg(short = 'I', value_name = "DIR")]
    include: Vec<PathBuf>,
}

impl BuildFlags {
    /// The SDK's build options.
    pub fn options(self) -> Result<vino_sdk::BuildOptions> {
        build_options(&self.opt, self.debug, self.defines, self.include)
    }
}

fn build_options(
    opt: &str,
    debug: bool,
    defines: Vec<String>,
    include_dirs: Vec<PathBuf>,
) -> Result<vino_sdk::BuildOptions> {
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
    Ok(vino_sdk::BuildOptions {
        opt_level,
        debug,
        defines,
        include_dirs,
        ..Default::default()
    })
}

fn check(module: PathBuf, point: &str) -> Result<()> {
    let Some(graftpoint) = graftpoints::find(point) else {
        bail!(
            "unknown graftpoint `{point}` (the kernel's graftpoints: {})",
            graftpoints::names().join(", ")
        );
    };
    let wasm = std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?;
    (graftpoint.check)(&Runtime::default(), &wasm)
        .with_context(|| format!("{} does not load at {point}", module.display()))?;
    Ok(())
}

fn points(json: bool, markdown: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(graftpoints::all())?);
        return Ok(());
    }
    if markdown {
        print!("{}", graftpoints::render_markdown());
        return Ok(());
    }
    let rows: Vec<[String; 6]> = graftpoints::all()
        .iter()
        .map(|g| {
            [
                g.name.to_string(),
                g.entry(),
                if g.callable.is_empty() {
                    "-".into()
                } else {
                    g.callable.join(", ")
                },
                if g.uses_arg_area { "yes" } else { "no" }.into(),
                graftpoints::budget_text(g.budget),
                g.who.describe().into(),
            ]
        })
        .collect();
    let header = [
        "graftpoint",
        "entry point",
        "imports (besides common)",
        "vino_args",
        "budget",
        "who may graft",
    ]
    .map(String::from);
    let mut widths = [0usize; 6];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{line}");
    }
    println!("(every graft may also import vino_now_ns and vino_log)");
    Ok(())
}
