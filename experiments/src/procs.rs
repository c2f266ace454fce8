//! `vino bench procs`: what spawning a process, a pipe and a round trip between two processes
//! cost a VINO process, against the same C on Linux, in one run.
//!
//! One C source, `experiments/programs/procs.c`, is built twice by the same clang at -O2: for
//! wasm32-wasi with the SDK (its `posix_spawn`, `waitpid` and `pipe` on the kernel's process
//! calls) and for the host. Its modes time themselves with `clock_gettime(CLOCK_MONOTONIC)`:
//!
//! * `spawn`: `posix_spawn` of a trivial child (`experiments/programs/true.c`, `return 0`) and
//!   `waitpid` for it, N times after a warm-up, µs per spawn and wait. On VINO the child's
//!   module is compiled at the first spawn and taken from the user's cache of compiled programs
//!   after it (the module is still read and hashed at every spawn); on Linux the child is a
//!   dynamically linked executable, exec'd every time;
//! * `pipe`: 64 KiB writes into a pipe to a child (procs itself) that reads and discards them,
//!   from the spawn to the child's exit, GB/s;
//! * `pingpong`: one byte to a child and back over two pipes, N round trips after a warm-up,
//!   µs per round trip.
//!
//! The VINO side runs in this program: a kernel booted on an in-memory disk with the two modules
//! in its file system (`/bin/procs`, `/bin/true`, mode 755), the parent run by vino-wasi as a
//! VINO process, its children VINO processes it spawns. The Linux side runs the host build as
//! a child process of this program. Before the rounds every mode runs once, small, on both
//! sides, uncounted (VINO compiles and caches the children's modules then). Each round runs
//! every mode on both sides, the side that goes first alternating; each figure is the median of
//! the rounds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use serde::Serialize;
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags};
use vino_measure::report::{Table, bar_chart, fmt_ratio};

use crate::e6_layout::median_of;
use crate::e7_gunzip::run_printing;
use crate::front;

/// Bytes per write in the pipe mode (procs.c's BLOCK).
pub const BLOCK: usize = 64 << 10;

#[derive(Clone, Debug)]
pub struct ProcsOptions {
    pub quick: bool,
    /// Where the host's build goes.
    pub scratch: PathBuf,
    /// Rounds, the sides alternating within each.
    pub rounds: usize,
    /// Spawns timed per run of the spawn mode.
    pub spawns: u64,
    /// Bytes through the pipe per run of the pipe mode.
    pub pipe_bytes: u64,
    /// Round trips timed per run of the ping-pong mode.
    pub round_trips: u64,
    /// Only the modes named here (`spawn`, `pipe`, `pingpong`; empty: all), e.g. to profile one.
    pub only: Vec<String>,
}

impl ProcsOptions {
    pub fn new(quick: bool) -> ProcsOptions {
        ProcsOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            rounds: if quick { 3 } else { 5 },
            spawns: if quick { 50 } else { 2_000 },
            pipe_bytes: if quick { 16 << 20 } else { 512 << 20 },
            round_trips: if quick { 2_000 } else { 100_000 },
            only: Vec::new(),
        }
    }
}

/// What is measured: a mode of procs.c.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    Spawn,
    Pipe,
    PingPong,
}

impl Measure {
    const ALL: [Measure; 3] = [Measure::Spawn, Measure::Pipe, Measure::PingPong];

    fn name(self) -> &'static str {
        match self {
            Measure::Spawn => "spawn + wait of a trivial child",
            Measure::Pipe => "pipe throughput, 64 KiB writes",
            Measure::PingPong => "ping-pong, one byte over two pipes",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Measure::Spawn => "µs per spawn + wait",
            Measure::Pipe => "GB/s",
            Measure::PingPong => "µs per round trip",
        }
    }

    /// procs.c's name for it.
    fn mode(self) -> &'static str {
        match self {
            Measure::Spawn => "spawn",
            Measure::Pipe => "pipe",
            Measure::PingPong => "pingpong",
        }
    }

    /// The line procs.c prints its figure on.
    fn key(self) -> &'static str {
        match self {
            Measure::Spawn => "spawn_us",
            Measure::Pipe => "pipe_gbps",
            Measure::PingPong => "pingpong_us",
        }
    }

    /// True for a rate (GB/s), false for a time.
    fn higher_is_better(self) -> bool {
        self == Measure::Pipe
    }

    /// The goal: VINO's time for the same work at most this many times Linux's.
    fn goal(self) -> f64 {
        match self {
            Measure::Pipe => 1.0,
            Measure::Spawn | Measure::PingPong => 2.0,
        }
    }

    fn goal_text(self) -> &'static str {
        match self {
            Measure::Pipe => "at least Linux's GB/s",
            Measure::Spawn | Measure::PingPong => "within 2x of Linux",
        }
    }

    /// procs.c's arguments after its name: full size, or the warm-up's.
    fn args(self, opts: &ProcsOptions, child: &str, warm_up: bool) -> Vec<String> {
        let small = |full: u64, small: u64| if warm_up { small.min(full) } else { full }.to_string();
        match self {
            Measure::Spawn => vec![self.mode().into(), small(opts.spawns, 5), child.into()],
            Measure::Pipe => vec![self.mode().into(), small(opts.pipe_bytes, 1 << 20)],
            Measure::PingPong => vec![self.mode().into(), small(opts.round_trips, 100)],
        }
    }
}

/// One measure on both sides: the medians of the rounds, each round's figure, the ratio.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub measure: String,
    pub unit: String,
    pub vino: f64,
    pub linux: f64,
    pub vino_rounds: Vec<f64>,
    pub linux_rounds: Vec<f64>,
    /// VINO's time for the same work over Linux's (for a rate, Linux's rate over VINO's): above
    /// 1 is slower.
    pub time_vs_linux: f64,
    pub goal: String,
    /// The most `time_vs_linux` may be.
    pub goal_time_vs_linux: f64,
    pub meets_goal: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcsReport {
    pub rounds: usize,
    pub spawns: u64,
    pub pipe_bytes: u64,
    pub block_bytes: usize,
    pub round_trips: u64,
    pub clang: String,
    /// Sizes of the wasm32 modules: procs (the parent, and the pipes' children) and true.
    pub procs_module_bytes: usize,
    pub true_module_bytes: usize,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

/// procs.c and true.c, built both ways.
struct Built {
    procs_wasm: Vec<u8>,
    true_wasm: Vec<u8>,
    procs_native: PathBuf,
    true_native: PathBuf,
    clang: String,
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs").join(name)
}

fn build(dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<Built> {
    let opts = vino_sdk::BuildOptions::default();
    let wasm = |name: &str| -> Result<Vec<u8>> {
        let out = dir.join(format!("{name}.wasm"));
        vino_sdk::build_program(&[source(&format!("{name}.c"))], &out, &opts)
            .map_err(|e| anyhow!("building {name}.c for wasm32-wasi: {e}"))?;
        Ok(std::fs::read(&out)?)
    };
    progress("building procs.c and true.c for wasm32-wasi");
    let (procs_wasm, true_wasm) = (wasm("procs")?, wasm("true")?);
    progress("building procs.c and true.c for the host");
    let tc = vino_sdk::find_toolchain(&opts).map_err(|e| anyhow!("{e}"))?;
    let native = |name: &str| -> Result<PathBuf> {
        let exe = dir.join(format!("{name}-native"));
        let mut cmd = Command::new(&tc.clang);
        cmd.arg(opts.opt_level.flag())
            .arg(source(&format!("{name}.c")))
            .arg("-o")
            .arg(&exe);
        let out = cmd
            .output()
            .with_context(|| format!("running {}", tc.clang.display()))?;
        ensure!(
            out.status.success(),
            "building {name}.c for the host: {cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(exe)
    };
    Ok(Built {
        procs_wasm,
        true_wasm,
        procs_native: native("procs")?,
        true_native: native("true")?,
        clang: format!("{} {}", tc.clang.display(), opts.opt_level.flag()),
    })
}

/// The figure on procs.c's `key` line.
pub fn parse_figure(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// The VINO side: a kernel on an in-memory disk with the modules installed, and the parent
/// compiled once.
struct Vino {
    kernel: Arc<Kernel>,
    procs: vino_wasi::Program,
}

const VINO_PROCS: &str = "/bin/procs";
const VINO_TRUE: &str = "/bin/true";

impl Vino {
    fn boot(built: &Built) -> Result<Vino> {
        let kernel = crate::mem_kernel(
            4096,
            &KernelConfig {
                cache_frames: 1024,
                writeback_every: None,
                ..KernelConfig::default()
            },
        )?;
        let root = kernel.spawn(Credentials::root());
        let installed = (|| -> std::result::Result<(), vino_kernel::SysError> {
            root.mkdir("/bin", 0o755)?;
            for (path, wasm) in [(VINO_PROCS, &built.procs_wasm), (VINO_TRUE, &built.true_wasm)] {
                let fd = root.open(path, OpenFlags::create())?;
                let mut done = 0;
                while done < wasm.len() {
                    done += root.write(fd, &wasm[done..])?;
                }
                root.close(fd)?;
                root.chmod(path, 0o755)?;
            }
            Ok(())
        })();
        kernel.exit(root.pid());
        installed.map_err(|e| anyhow!("installing the modules in VINO: {e}"))?;
        let procs = vino_wasi::Program::compile(&built.procs_wasm, vino_wasi::ProgramLimits::default())?;
        Ok(Vino { kernel, procs })
    }

    /// Runs `/bin/procs ARGS` as root; what it printed.
    fn run(&self, args: &[String]) -> Result<String> {
        let argv = std::iter::once(VINO_PROCS.to_string())
            .chain(args.iter().cloned())
            .map(String::into_bytes)
            .collect();
        let what = format!("procs {} as a VINO process", args.join(" "));
        run_printing(&self.kernel, &self.procs, argv, &what)
    }
}

/// Runs the host's procs with `args`; what it printed.
fn run_native(exe: &Path, args: &[String]) -> Result<String> {
    let out = Command::new(exe)
        .args(args)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    ensure!(
        out.status.success(),
        "procs {} on Linux: {}: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs procs with the given arguments; what it printed.
type Runner<'a> = Box<dyn Fn(&[String]) -> Result<String> + 'a>;

/// A side of the comparison: runs procs with the given mode and size.
struct Side<'a> {
    name: &'static str,
    child: String,
    run: Runner<'a>,
}

impl Side<'_> {
    fn measure(&self, m: Measure, opts: &ProcsOptions, warm_up: bool) -> Result<f64> {
        let text = (self.run)(&m.args(opts, &self.child, warm_up))?;
        parse_figure(&text, m.key()).ok_or_else(|| anyhow!("procs on {} printed no `{}`: {text:?}", self.name, m.key()))
    }
}

pub fn run(opts: &ProcsOptions, progress: &mut dyn FnMut(&str)) -> Result<ProcsReport> {
    ensure!(opts.rounds > 0, "at least one round");
    for o in &opts.only {
        ensure!(
            Measure::ALL.iter().any(|m| m.mode() == o),
            "no measure {o:?} (spawn, pipe, pingpong)"
        );
    }
    let measures: Vec<Measure> = Measure::ALL
        .into_iter()
        .filter(|m| opts.only.is_empty() || opts.only.iter().any(|o| o == m.mode()))
        .collect();
    let dir = front::scratch_dir(&opts.scratch)?;
    let built = build(dir.path(), progress)?;
    progress("booting a kernel on an in-memory disk");
    let vino = Vino::boot(&built)?;
    let sides = [
        Side {
            name: "VINO",
            child: VINO_TRUE.into(),
            run: Box::new(|a| vino.run(a)),
        },
        Side {
            name: "Linux",
            child: built.true_native.display().to_string(),
            run: Box::new(|a| run_native(&built.procs_native, a)),
        },
    ];
    progress("warming up (VINO compiles the children's modules)");
    for &m in &measures {
        for s in &sides {
            s.measure(m, opts, true)?;
        }
    }
    // samples[measure][side]
    let mut samples = vec![[Vec::new(), Vec::new()]; measures.len()];
    for round in 0..opts.rounds {
        for (i, m) in measures.iter().enumerate() {
            for k in 0..2 {
                let side = (round + k) % 2;
                progress(&format!(
                    "round {} of {}: {} ({})",
                    round + 1,
                    opts.rounds,
                    m.key(),
                    sides[side].name
                ));
                let v = sides[side].measure(*m, opts, false)?;
                samples[i][side].push(v);
            }
        }
    }
    drop(sides);
    vino.kernel
        .shutdown()
        .map_err(|e| anyhow!("shutting the kernel down: {e}"))?;
    let rows = measures
        .iter()
        .zip(samples)
        .map(|(&m, [v, l])| {
            let (vino, linux) = (median_of(v.iter().copied()), median_of(l.iter().copied()));
            let time = if m.higher_is_better() {
                linux / vino
            } else {
                vino / linux
            };
            Row {
                measure: m.name().into(),
                unit: m.unit().into(),
                vino,
                linux,
                vino_rounds: v,
                linux_rounds: l,
                time_vs_linux: time,
                goal: m.goal_text().into(),
                goal_time_vs_linux: m.goal(),
                meets_goal: time <= m.goal(),
            }
        })
        .collect();
    Ok(ProcsReport {
        rounds: opts.rounds,
        spawns: opts.spawns,
        pipe_bytes: opts.pipe_bytes,
        block_bytes: BLOCK,
        round_trips: opts.round_trips,
        clang: built.clang,
        procs_module_bytes: built.procs_wasm.len(),
        true_module_bytes: built.true_wasm.len(),
        rows,
        notes: Vec::new(),
    })
}

impl ProcsReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Processes: spawn, pipe, ping-pong, a VINO process against the same C on Linux",
            &["measure", "unit", "VINO", "Linux", "VINO time / Linux", "goal", "met"],
        );
        for r in &self.rows {
            t.row([
                r.measure.clone(),
                r.unit.clone(),
                format!("{:.3}", r.vino),
                format!("{:.3}", r.linux),
                fmt_ratio(r.time_vs_linux),
                r.goal.clone(),
                if r.meets_goal { "yes".into() } else { "no".into() },
            ]);
        }
        t.note(format!(
            "median of {} rounds, the side that goes first alternating; experiments/programs/procs.c built by {} \
             for wasm32-wasi (VINO) and for the host (Linux), timing itself with clock_gettime(CLOCK_MONOTONIC)",
            self.rounds, self.clang
        ));
        t.note(format!(
            "spawn: {} spawns of true.c (return 0) after 20 uncounted; VINO takes the child's compiled module from \
             its cache (compiled at the warm-up), Linux execs a dynamically linked executable; pipe: {} MiB in {} \
             KiB writes to a child that discards them; ping-pong: {} round trips after 20 uncounted",
            self.spawns,
            self.pipe_bytes >> 20,
            self.block_bytes >> 10,
            self.round_trips
        ));
        t.note(format!(
            "modules: procs.wasm {} KiB, true.wasm {} KiB; VINO time / Linux: above 1 is slower (for the pipe, \
             Linux's GB/s over VINO's)",
            self.procs_module_bytes >> 10,
            self.true_module_bytes >> 10
        ));
        for n in &self.notes {
            t.note(n.clone());
        }
        vec![t]
    }

    /// VINO's time for the same work over Linux's, per measure, with each goal (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    r.measure.clone(),
                    vec![
                        ("VINO".to_string(), r.time_vs_linux),
                        ("goal".to_string(), r.goal_time_vs_linux),
                    ],
                )
            })
            .collect();
        bar_chart(
            path,
            "Processes: VINO's time over Linux's for the same work (1 = Linux)",
            "time / Linux's",
            &groups,
        )
    }
}
