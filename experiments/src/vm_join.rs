//! `vino bench vm-join`: experiment E4's look-ahead eviction (Small 1998, 7.3.3 and 7.7.1,
//! tables 12-13) on a program's own memory instead of the page cache.
//!
//! One C source, `experiments/programs/vm_join.c`, holds two Wisconsin relations in its memory
//! (each [`VmJoinOptions::tuples`] tuples of 208 bytes, 19 to a page, together a few times the
//! memory it is given), builds a nonclustered index on `unique1` for each, and joins them in
//! index order: for every key, A's record and B's record, each at a random place in memory. It
//! runs three ways, a round each of the three, the order reversed every other round:
//!
//! * **VINO, default policy**: the program built for wasm32-wasi as a VINO process, its memory
//!   paged by the kernel within a resident limit of [`VmJoinOptions::limit_bytes`], swapped to
//!   VINO's file system on an image in the scratch directory (`O_DIRECT`), a kernel booted for
//!   each run;
//! * **VINO, look-ahead graft**: the same, the program loading `sdk/grafts/lookahead_evict.c` on
//!   its own `vas.pick_victim` and giving it the join's plan (each key's two memory pages) with
//!   control calls, its cursor moved every 16 keys: the kernel then takes none of the pages the
//!   next [`VmJoinOptions::lookahead`] keys read;
//! * **Linux**: the same C built for the host, in a fresh memory cgroup limited to the same bytes,
//!   with a swap file in the scratch directory (so on the same disk) switched on meanwhile
//!   (`vm::SwapRig`; needs root and a memory cgroup, else the row is skipped with the reason).
//!
//! Each run times the join alone (after the relations are built) with
//! `clock_gettime(CLOCK_MONOTONIC)`; the grafted run's time includes loading the graft and its
//! plan. Faults over the join: Linux's from `getrusage`; VINO's from the process's memory counters
//! (`Process::memory_stats`, read while the program waits on its standard input before and after
//! the join) and the pager's reads of swap (`Kernel::pager_stats`: the kernel runs this program
//! alone). Major faults are faults that waited for swap on both sides.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::Serialize;
use vino_measure::report::{Table, bar_chart, fmt_ratio};

use crate::e4_wisconsin::{LOOKAHEAD_C, THESIS_LOOKAHEAD_PROTECTED, THESIS_LRU_FAULTS, THESIS_LRU_SECONDS};
use crate::e6_layout::median_of;
use crate::front;
use crate::vm::{self, Interrupts, SwapRig, SwapSetup, parse_figures};
use crate::wisconsin::{PAGE_BYTES, Relation, TUPLES_PER_PAGE};

/// The seeds of relations A and B (vm_join.c's SEED_A, SEED_B).
pub const SEEDS: [u64; 2] = [1998, 1999];

/// The thesis' look-ahead values whose rows give the range of its ratios (1024..4096 records:
/// where look-ahead helped; 8192 ran past the graft's time limit).
const THESIS_RANGE: [u64; 3] = [1024, 2048, 4096];

/// The longest the program may take to reach its next line before the run is ended.
const PATIENCE: Duration = Duration::from_secs(600);

#[derive(Clone, Debug)]
pub struct VmJoinOptions {
    pub quick: bool,
    /// Where the host's build, VINO's image and Linux's swap file go (one disk).
    pub scratch: PathBuf,
    /// Rounds, each running every side once.
    pub rounds: usize,
    /// The memory both sides get: VINO's resident limit, Linux's cgroup limit.
    pub limit_bytes: u64,
    /// Tuples in each relation.
    pub tuples: u32,
    /// Keys the graft looks ahead.
    pub lookahead: u32,
    /// Linux's swap file, and VINO's swap limit.
    pub swap_bytes: u64,
}

impl VmJoinOptions {
    /// Full: 8 MiB of memory, two relations of 12 MiB (3 times the memory together), 1,024 keys
    /// of look-ahead (2,048 record reads, as many as the frames: of 320, 640, 1,024 and 1,536
    /// keys, one run each on a busy machine, 1,024 cut the faults most); quick the same shape at
    /// 1 MiB.
    pub fn new(quick: bool) -> VmJoinOptions {
        let limit_pages: u32 = if quick { 256 } else { 2048 };
        VmJoinOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            rounds: if quick { 2 } else { 5 },
            limit_bytes: u64::from(limit_pages) * PAGE_BYTES as u64,
            tuples: limit_pages * 3 / 2 * TUPLES_PER_PAGE as u32,
            lookahead: limit_pages / 2,
            swap_bytes: if quick { 32 << 20 } else { 128 << 20 },
        }
    }

    /// Bytes of both relations.
    pub fn relation_bytes(&self) -> u64 {
        2 * u64::from(self.tuples).div_ceil(TUPLES_PER_PAGE as u64) * PAGE_BYTES as u64
    }

    fn check(&self) -> Result<()> {
        ensure!(self.rounds > 0, "at least one round");
        ensure!(self.tuples > 0, "at least one tuple");
        // The graft's plan holds 65,536 records and its page table 65,536 pages (256 MiB).
        ensure!(
            self.tuples <= 65_536,
            "{} tuples: the graft's plan holds 65,536 keys",
            self.tuples
        );
        ensure!(
            self.relation_bytes() < 192 << 20,
            "relations of {} MiB: the graft knows pages below 256 MiB only",
            self.relation_bytes() >> 20
        );
        ensure!(
            self.relation_bytes() > self.limit_bytes,
            "the relations ({} bytes) must exceed the memory ({} bytes)",
            self.relation_bytes(),
            self.limit_bytes
        );
        ensure!(
            self.swap_bytes >= 2 * self.relation_bytes(),
            "the swap ({} bytes) must hold the relations twice over",
            self.swap_bytes
        );
        Ok(())
    }
}

/// The join's checksum as vm_join.c computes it: over the keys, A's unique2 times B's (a tuple's
/// unique2 is its position, an index's entry). Below 2^53 for any join the graft can plan, so
/// exact in the figures' floats.
pub fn expected_checksum(tuples: u32) -> u64 {
    let [a, b] = SEEDS.map(|seed| Relation::generate(tuples as usize, seed).index());
    a.iter().zip(&b).fold(0u64, |sum, (&pa, &pb)| {
        sum.wrapping_add(u64::from(pa).wrapping_mul(u64::from(pb)))
    })
}

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs").join("vm_join.c")
}

/// A C file defining `vm_join_graft` (the module's bytes) and `vm_join_graft_len`.
fn graft_blob(wasm: &[u8]) -> String {
    let bytes: Vec<String> = wasm.iter().map(|b| b.to_string()).collect();
    format!(
        "#include <stddef.h>\nconst unsigned char vm_join_graft[] = {{{}}};\nconst size_t vm_join_graft_len = {};\n",
        bytes.join(","),
        wasm.len()
    )
}

/// Builds vm_join.c for wasm32-wasi with the SDK, the look-ahead graft linked in: the module.
pub fn build_wasm(dir: &Path) -> Result<Vec<u8>> {
    let opts = vino_sdk::BuildOptions::default();
    let graft = vino_sdk::build_c_str("lookahead_evict.c", LOOKAHEAD_C, &opts).context("building lookahead_evict.c")?;
    let blob = dir.join("vm_join_graft.c");
    fs::write(&blob, graft_blob(&graft))?;
    let out = dir.join("vm_join.wasm");
    vino_sdk::build_program(&[source(), blob], &out, &opts)
        .map_err(|e| anyhow!("building vm_join.c for wasm32-wasi: {e}"))?;
    Ok(fs::read(&out)?)
}

/// One run's figures, over the join only.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JoinRun {
    pub seconds: f64,
    /// Of which loading the graft and its plan.
    pub setup_seconds: f64,
    /// Faults that waited for swap (Linux: majflt; VINO: the pager's reads of swap).
    pub major_faults: u64,
    /// Other faults (Linux: minflt; VINO: zero fills and pages back from its inactive list).
    pub minor_faults: u64,
    /// VINO: pages read back from swap (a read brings the faulting page and those whose slots
    /// follow its own).
    pub swap_ins: Option<u64>,
    pub swap_outs: Option<u64>,
    /// VINO: evictions where the graft chose another page than the default, and where the
    /// default chose.
    pub evicted_by_graft: Option<u64>,
    pub evicted_by_default: Option<u64>,
    /// VINO: answers of the graft the pager refused.
    pub graft_refused: Option<u64>,
    /// Keys joined and the join's checksum.
    pub matches: u64,
    pub checksum: u64,
}

impl JoinRun {
    /// The figures of the program's result line (faults as Linux's getrusage gave them, if there).
    fn from_figures(f: &BTreeMap<String, f64>) -> Result<JoinRun> {
        let get = |k: &str| {
            f.get(k)
                .copied()
                .ok_or_else(|| anyhow!("vm_join printed no {k}: {f:?}"))
        };
        Ok(JoinRun {
            seconds: get("seconds")?,
            setup_seconds: get("setup_seconds")?,
            major_faults: f.get("majflt").map_or(0, |v| *v as u64),
            minor_faults: f.get("minflt").map_or(0, |v| *v as u64),
            matches: get("matches")? as u64,
            checksum: get("checksum")? as u64,
            ..JoinRun::default()
        })
    }
}

// ---- the VINO side ----------------------------------------------------------------------------

/// vm_join's standard output, passed on a line at a time.
struct Lines {
    partial: Vec<u8>,
    tx: Sender<String>,
}

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.partial.extend_from_slice(b);
        while let Some(end) = self.partial.iter().position(|&c| c == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let _ = self.tx.send(String::from_utf8_lossy(&line).trim_end().to_string());
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// vm_join's standard input: a byte whenever the runner lets it go on, the end when the runner
/// drops its sender.
struct Turns(Receiver<u8>);

impl Read for Turns {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (buf.first_mut(), self.0.recv()) {
            (Some(slot), Ok(b)) => {
                *slot = b;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

/// What vm_join's standard error collects.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<u8>>>);

impl Write for Collected {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The process's memory counters and the pager's reads of swap, at one point (None where its
/// memory is not paged).
#[derive(Clone, Copy, Default)]
struct Counters {
    swap_ins: u64,
    swap_outs: u64,
    evicted_by_graft: u64,
    evicted_by_default: u64,
    graft_refused: u64,
    /// Zero fills and pages back from the inactive list.
    minor_faults: u64,
    swap_reads: u64,
}

impl Counters {
    /// Once every eviction set off so far is done.
    fn read(kernel: &vino_kernel::Kernel, process: &vino_kernel::Process) -> Option<Counters> {
        kernel.settle_memory();
        let m = process.memory_stats()?;
        Some(Counters {
            swap_ins: m.swap_ins,
            swap_outs: m.swap_outs,
            evicted_by_graft: m.evicted_by_graft,
            evicted_by_default: m.evicted_by_default,
            graft_refused: m.graft_refused,
            minor_faults: m.zero_faults + m.minor_faults,
            swap_reads: kernel.pager_stats()?.swap_reads,
        })
    }

    /// Fills `run`'s VINO counters with what happened between `self` and `after`.
    fn since(self, after: Counters, run: &mut JoinRun) {
        let d = |f: fn(&Counters) -> u64| f(&after).saturating_sub(f(&self));
        run.swap_ins = Some(d(|c| c.swap_ins));
        run.swap_outs = Some(d(|c| c.swap_outs));
        run.evicted_by_graft = Some(d(|c| c.evicted_by_graft));
        run.evicted_by_default = Some(d(|c| c.evicted_by_default));
        run.graft_refused = Some(d(|c| c.graft_refused));
        run.minor_faults = d(|c| c.minor_faults);
        run.major_faults = d(|c| c.swap_reads);
    }
}

/// The next line of the program that starts with `prefix` (lines before it are skipped).
fn line_starting(lines: &Receiver<String>, prefix: &str) -> Result<String> {
    loop {
        match lines.recv_timeout(PATIENCE) {
            Ok(l) if l.starts_with(prefix) => return Ok(l),
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => bail!("no `{prefix}` line in {PATIENCE:?}"),
            Err(RecvTimeoutError::Disconnected) => bail!("the program ended before its `{prefix}` line"),
        }
    }
}

/// vm_join as a VINO process on `kernel`: builds relations of `tuples` tuples, joins them with
/// the look-ahead graft over `lookahead` keys (0: the default policy), its counters over the join.
pub fn run_vino(
    kernel: &Arc<vino_kernel::Kernel>,
    program: &vino_wasi::Program,
    tuples: u32,
    lookahead: u32,
) -> Result<JoinRun> {
    let process = kernel.spawn(vino_kernel::Credentials::root());
    let (lines_tx, lines) = mpsc::channel();
    let (go, turns) = mpsc::channel();
    let err = Collected::default();
    let stdio = vino_wasi::Stdio {
        stdin: Box::new(Turns(turns)),
        stdout: Box::new(Lines {
            partial: Vec::new(),
            tx: lines_tx,
        }),
        stderr: Box::new(err.clone()),
        tty: [false; 3],
    };
    let argv = ["vm_join".to_string(), tuples.to_string(), lookahead.to_string()]
        .map(String::into_bytes)
        .to_vec();
    let kill = program.kill_switch();
    let (exit, run) = std::thread::scope(|s| {
        let runner = s.spawn(|| program.run_in(process.clone(), vino_wasi::Setup::new(argv, Vec::new()), stdio, &kill));
        let run = drive(kernel, &process, &lines, go);
        if run.is_err() {
            kill.kill();
        }
        (runner.join(), run)
    });
    kernel.exit(process.pid());
    let stderr = String::from_utf8_lossy(&err.0.lock().map_err(|_| anyhow!("poisoned"))?).into_owned();
    let exit = exit.map_err(|_| anyhow!("the program's runner panicked"))?;
    match exit {
        Ok(vino_wasi::Exit::Code(0)) => run,
        other => bail!(
            "vm_join {tuples} {lookahead} as a VINO process ended {other:?}: {}",
            stderr.trim()
        ),
    }
}

/// Reads the counters when the relations are built and again after the join, letting the
/// program go on after each.
fn drive(
    kernel: &vino_kernel::Kernel,
    process: &vino_kernel::Process,
    lines: &Receiver<String>,
    go: Sender<u8>,
) -> Result<JoinRun> {
    line_starting(lines, "built")?;
    let before = Counters::read(kernel, process);
    let _ = go.send(b'\n');
    let line = line_starting(lines, "ns_per_page=")?;
    let after = Counters::read(kernel, process);
    drop(go);
    let mut run = JoinRun::from_figures(&parse_figures(&line))?;
    if let (Some(before), Some(after)) = (before, after) {
        before.since(after, &mut run);
    }
    Ok(run)
}

/// The VINO side's program and the image its kernels boot on.
pub struct VinoSide {
    program: vino_wasi::Program,
    image: PathBuf,
    limit_bytes: u64,
    swap_bytes: u64,
}

impl VinoSide {
    /// Builds vm_join for wasm32-wasi into `dir` and makes an image there.
    pub fn new(dir: &Path, limit_bytes: u64, swap_bytes: u64) -> Result<VinoSide> {
        let program = vino_wasi::Program::compile(&build_wasm(dir)?, vino_wasi::ProgramLimits::default())?;
        let image = dir.join("vino-vm-join.img");
        let image_bytes = (2 * swap_bytes + (256 << 20)).next_multiple_of(1 << 20);
        let dev = vino_blockdev::FileDevice::create(&image, image_bytes)?;
        vino_fs::mkfs(&dev, &vino_fs::MkfsOptions::default())?;
        Ok(VinoSide {
            program,
            image,
            limit_bytes,
            swap_bytes,
        })
    }

    /// One run on a kernel booted for it.
    pub fn run(&self, tuples: u32, lookahead: u32) -> Result<JoinRun> {
        let kernel = vm::boot_vino(&self.image, self.limit_bytes, self.swap_bytes)?;
        let run = run_vino(&kernel, &self.program, tuples, lookahead);
        kernel.shutdown().map_err(|e| anyhow!("shutting VINO down: {e}"))?;
        run
    }
}

// ---- the experiment ---------------------------------------------------------------------------

/// A way to run the join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    VinoDefault,
    VinoLookAhead,
    Linux,
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::VinoDefault => "vino-default",
            Side::VinoLookAhead => "vino-lookahead",
            Side::Linux => "linux",
        }
    }

    fn name(self, lookahead: u32) -> String {
        match self {
            Side::VinoDefault => "VINO, default policy".into(),
            Side::VinoLookAhead => format!("VINO, look-ahead graft ({lookahead} keys)"),
            Side::Linux => "Linux, memory cgroup and swap file".into(),
        }
    }
}

/// One side: the medians of its rounds, and each round.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub key: String,
    pub side: String,
    pub seconds: f64,
    pub major_faults: f64,
    pub minor_faults: f64,
    pub swap_ins: Option<f64>,
    pub evicted_by_graft: Option<f64>,
    pub graft_refused: Option<f64>,
    /// Seconds over the default policy's (VINO) and over Linux's.
    pub time_vs_default: f64,
    pub time_vs_linux: f64,
    pub faults_vs_default: f64,
    pub runs: Vec<JoinRun>,
}

/// A goal and where it stands.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    pub what: String,
    pub measured: f64,
    /// What the thesis measured for the same ratio, as text (a range or a figure).
    pub thesis: String,
    pub goal: String,
    pub met: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct VmJoinReport {
    pub rounds: usize,
    pub tuples: u32,
    pub relation_bytes: u64,
    pub limit_bytes: u64,
    pub lookahead: u32,
    pub swap_bytes: u64,
    pub rows: Vec<Row>,
    pub goals: Vec<Goal>,
    /// Why Linux did not run (no root, no memory cgroup).
    pub linux_skipped: Option<String>,
    /// Linux runs the cgroup's OOM killer ended (each run again, not counted).
    pub linux_oom_kills: u32,
    pub swap_setup: Option<SwapSetup>,
    pub clang: String,
    pub notes: Vec<String>,
}

/// The thesis' look-ahead runs over its LRU run, faults and seconds, for 1024..4096 records
/// (table 12, protected).
fn thesis_ratios() -> Vec<(u64, f64, f64)> {
    THESIS_LOOKAHEAD_PROTECTED
        .iter()
        .filter(|r| THESIS_RANGE.contains(&r.lookahead))
        .map(|r| {
            (
                r.lookahead,
                r.faults as f64 / THESIS_LRU_FAULTS as f64,
                r.seconds / THESIS_LRU_SECONDS,
            )
        })
        .collect()
}

fn percent_range(v: impl Iterator<Item = f64> + Clone) -> String {
    let lo = v.clone().fold(f64::INFINITY, f64::min);
    let hi = v.fold(0.0, f64::max);
    format!("{:.1}-{:.1}%", lo * 100.0, hi * 100.0)
}

pub fn run(opts: &VmJoinOptions, progress: &mut dyn FnMut(&str)) -> Result<VmJoinReport> {
    opts.check()?;
    let before = vm::load_average();
    let dir = front::scratch_dir(&opts.scratch)?;
    progress("building vm_join.c for the host");
    let (exe, clang) = vm::build_native_from(&source(), &dir.path().join("vm_join-native"))?;
    progress("building vm_join.c and the look-ahead graft for wasm32-wasi");
    let vino = VinoSide::new(dir.path(), opts.limit_bytes, opts.swap_bytes)?;
    progress("switching on a swap file");
    let rig_opts = vm::VmOptions {
        swap_limit_bytes: opts.limit_bytes,
        swap_working_bytes: opts.relation_bytes(),
        swap_file_bytes: opts.swap_bytes,
        ..vm::VmOptions::new(opts.quick)
    };
    let (rig, linux_skipped) = match SwapRig::make(&rig_opts, dir.path())? {
        Ok(rig) => (Some(rig), None),
        Err(reason) => (None, Some(reason)),
    };
    let sides: Vec<Side> = [Side::VinoDefault, Side::VinoLookAhead, Side::Linux]
        .into_iter()
        .filter(|s| *s != Side::Linux || rig.is_some())
        .collect();
    let expected = expected_checksum(opts.tuples);
    let mut linux_oom_kills = 0;
    let mut once = |side: Side| -> Result<JoinRun> {
        let run = match (side, &rig) {
            (Side::VinoDefault, _) => vino.run(opts.tuples, 0)?,
            (Side::VinoLookAhead, _) => vino.run(opts.tuples, opts.lookahead)?,
            (Side::Linux, Some(rig)) => {
                let (run, kills) = linux_run(&exe, opts.tuples, rig)?;
                linux_oom_kills += kills;
                run
            }
            (Side::Linux, None) => bail!("Linux has no swap rig"),
        };
        ensure!(
            run.matches == u64::from(opts.tuples) && run.checksum == expected,
            "{}: the join gave {} matches, checksum {} (expected {}, {expected})",
            side.key(),
            run.matches,
            run.checksum,
            opts.tuples
        );
        Interrupts::check()?;
        Ok(run)
    };
    let mut runs: Vec<Vec<JoinRun>> = vec![Vec::new(); sides.len()];
    for round in 0..opts.rounds {
        let mut order: Vec<usize> = (0..sides.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            progress(&format!("round {} of {}: {}", round + 1, opts.rounds, sides[i].key()));
            runs[i].push(once(sides[i])?);
        }
    }
    let swap_setup = rig.as_ref().map(|r| r.setup.clone());
    drop(rig);
    let rows = rows(&sides, runs, opts.lookahead);
    let goals = goals(&rows);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(VmJoinReport {
        rounds: opts.rounds,
        tuples: opts.tuples,
        relation_bytes: opts.relation_bytes(),
        limit_bytes: opts.limit_bytes,
        lookahead: opts.lookahead,
        swap_bytes: opts.swap_bytes,
        rows,
        goals,
        linux_skipped,
        linux_oom_kills,
        swap_setup,
        clang,
        notes: vec![format!(
            "load average (1, 5, 15 min) before: {before}, after: {}; {cpus} CPUs",
            vm::load_average()
        )],
    })
}

/// Times Linux may kill vm_join in its cgroup (the cgroup's OOM killer, when reclaim into swap
/// falls behind on a busy machine) before the run fails.
const LINUX_ATTEMPTS: u32 = 3;

/// vm_join for the host in the rig's cgroup, tried again if the cgroup's OOM killer ended it;
/// the run and the kills.
fn linux_run(exe: &Path, tuples: u32, rig: &SwapRig) -> Result<(JoinRun, u32)> {
    let args: Vec<OsString> = vec![tuples.to_string().into(), "0".into()];
    let mut kills = 0;
    loop {
        match vm::run_native(exe, &args, Some(&rig.cgroup)) {
            Ok(figures) => return Ok((JoinRun::from_figures(&figures)?, kills)),
            Err(e) if kills + 1 < LINUX_ATTEMPTS && format!("{e:#}").contains("SIGKILL") => kills += 1,
            Err(e) => return Err(e),
        }
    }
}

fn rows(sides: &[Side], runs: Vec<Vec<JoinRun>>, lookahead: u32) -> Vec<Row> {
    let median = |runs: &[JoinRun], f: fn(&JoinRun) -> f64| median_of(runs.iter().map(f));
    let optional = |runs: &[JoinRun], f: fn(&JoinRun) -> Option<u64>| -> Option<f64> {
        let v: Vec<f64> = runs.iter().filter_map(|r| f(r).map(|n| n as f64)).collect();
        (!v.is_empty()).then(|| median_of(v))
    };
    let mut rows: Vec<Row> = sides
        .iter()
        .zip(runs)
        .map(|(side, runs)| Row {
            key: side.key().into(),
            side: side.name(lookahead),
            seconds: median(&runs, |r| r.seconds),
            major_faults: median(&runs, |r| r.major_faults as f64),
            minor_faults: median(&runs, |r| r.minor_faults as f64),
            swap_ins: optional(&runs, |r| r.swap_ins),
            evicted_by_graft: optional(&runs, |r| r.evicted_by_graft),
            graft_refused: optional(&runs, |r| r.graft_refused),
            time_vs_default: f64::NAN,
            time_vs_linux: f64::NAN,
            faults_vs_default: f64::NAN,
            runs,
        })
        .collect();
    let find = |rows: &[Row], key: &str| rows.iter().find(|r| r.key == key).map(|r| (r.seconds, r.major_faults));
    let default = find(&rows, Side::VinoDefault.key());
    let linux = find(&rows, Side::Linux.key());
    for r in &mut rows {
        if let Some((s, f)) = default {
            r.time_vs_default = r.seconds / s;
            r.faults_vs_default = r.major_faults / f;
        }
        if let Some((s, _)) = linux {
            r.time_vs_linux = r.seconds / s;
        }
    }
    rows
}

fn goals(rows: &[Row]) -> Vec<Goal> {
    let thesis = thesis_ratios();
    let best = thesis.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
    let Some(grafted) = rows.iter().find(|r| r.key == Side::VinoLookAhead.key()) else {
        return Vec::new();
    };
    let mut goals = vec![
        Goal {
            what: "faults: look-ahead graft / default policy (VINO)".into(),
            measured: grafted.faults_vs_default,
            thesis: format!("{} (1,024-4,096 records)", percent_range(thesis.iter().map(|t| t.1))),
            goal: format!("<= {:.1}% (the thesis' best)", best * 100.0),
            met: grafted.faults_vs_default <= best,
        },
        Goal {
            what: "time: look-ahead graft / default policy (VINO)".into(),
            measured: grafted.time_vs_default,
            thesis: format!("{} (1,024-4,096 records)", percent_range(thesis.iter().map(|t| t.2))),
            goal: "-".into(),
            met: grafted.time_vs_default < 1.0,
        },
    ];
    if grafted.time_vs_linux.is_finite() {
        goals.push(Goal {
            what: "time: VINO with the graft / Linux, same memory".into(),
            measured: grafted.time_vs_linux,
            thesis: "-".into(),
            goal: "< 1".into(),
            met: grafted.time_vs_linux < 1.0,
        });
    }
    goals
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

impl VmJoinReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "The Wisconsin join in a program's own memory: look-ahead eviction against the default and Linux",
            &[
                "side",
                "s",
                "major faults",
                "minor faults",
                "swap-ins",
                "by graft",
                "refused",
                "time / default",
                "faults / default",
                "time / Linux",
            ],
        );
        for r in &self.rows {
            t.row([
                r.side.clone(),
                format!("{:.3}", r.seconds),
                format!("{:.0}", r.major_faults),
                format!("{:.0}", r.minor_faults),
                fmt_opt(r.swap_ins),
                fmt_opt(r.evicted_by_graft),
                fmt_opt(r.graft_refused),
                fmt_ratio(r.time_vs_default),
                fmt_ratio(r.faults_vs_default),
                fmt_ratio(r.time_vs_linux),
            ]);
        }
        t.note(format!(
            "median of {} rounds, every side once a round, the order reversed every other round; two relations of {} \
             tuples ({} MiB together) joined on unique1 in index order, {} MiB of memory (VINO's resident limit, \
             Linux's cgroup limit), {} keys of look-ahead",
            self.rounds,
            self.tuples,
            self.relation_bytes >> 20,
            self.limit_bytes >> 20,
            self.lookahead
        ));
        if let Some(why) = &self.linux_skipped {
            t.note(format!("Linux skipped: {why}"));
        }
        if self.linux_oom_kills > 0 {
            t.note(format!(
                "Linux: the cgroup's OOM killer ended {} runs, each run again",
                self.linux_oom_kills
            ));
        }
        let mut g = Table::new("Goals", &["what", "measured", "thesis", "goal", "met"]);
        for goal in &self.goals {
            g.row([
                goal.what.clone(),
                fmt_ratio(goal.measured),
                goal.thesis.clone(),
                goal.goal.clone(),
                if goal.met { "yes" } else { "no" }.into(),
            ]);
        }
        for n in &self.notes {
            g.note(n.clone());
        }
        vec![t, g]
    }

    /// Seconds and major faults of each side over the default policy's (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    r.key.clone(),
                    vec![
                        ("time".to_string(), r.time_vs_default),
                        ("major faults".to_string(), r.faults_vs_default),
                    ],
                )
            })
            .collect();
        bar_chart(
            path,
            "The join in program memory: over VINO's default policy (1 = default)",
            "over the default policy",
            &groups,
        )
    }
}
