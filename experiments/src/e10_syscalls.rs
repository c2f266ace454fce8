//! E10, `vino bench syscalls`: what a system call costs a VINO process, against the same call
//! from the other places a program can call VINO from, and against Linux, all in one run.
//!
//! One daemon is started on a fresh image (as `vino bench daemon` does) with a 64 KiB file in
//! it, read once so that it is cached. Each repetition then measures, one after the other:
//!
//! * a VINO process (`experiments/programs/syscalls.c`, built for wasm32-wasi and run by
//!   vino-wasi on the daemon's kernel) timing, from inside with `clock_gettime(CLOCK_MONOTONIC)`,
//!   a loop of the null system call (`vino_null`, which does nothing) and a loop of 4 KiB
//!   `pread`s at offset 0 of the file;
//! * the same read by the kernel's `Process::pread` called from Rust in this program (no Wasm,
//!   no WASI): what the read itself costs;
//! * the null call and the read through the client library to the daemon, over its socket (the
//!   read's data in the answer, and in the shared-memory buffer), timed as `vino bench daemon`
//!   times them;
//! * the read through a FUSE mount of the daemon by a plain `pread` (root and `/dev/fuse`);
//! * Linux: `getppid` (a real system call: glibc does not cache it) and a 4 KiB `pread` of a
//!   cached file on the host's file system (in the scratch directory).
//!
//! Each row's median, minimum and maximum are over the repetitions; ratios are medians of the
//! same run.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use serde::Serialize;
use vino_client::{Client, OpenFlags};
use vino_kernel::Credentials;
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ns, fmt_ratio};

use crate::daemon::{self, FuseMount};
use crate::e6_layout::median_of;
use crate::e7_gunzip::run_printing;

/// The goal for a null system call from a VINO process, ns.
pub const NULL_GOAL_NS: f64 = 100.0;
/// The goal for a cached 4 KiB read from a VINO process, ns.
pub const READ_GOAL_NS: f64 = 500.0;

/// Bytes read per call.
const BLOCK: usize = 4096;
/// The file in VINO the reads read.
const FILE: &str = "/bench";

#[derive(Clone, Debug)]
pub struct SyscallsOptions {
    pub quick: bool,
    /// Where the daemon's image, its socket and the host's file go.
    pub scratch: PathBuf,
    /// Repetitions of every measurement.
    pub reps: usize,
}

impl SyscallsOptions {
    pub fn new(quick: bool) -> SyscallsOptions {
        SyscallsOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            reps: if quick { 3 } else { 5 },
        }
    }

    /// Calls per timed loop for calls of about 100 ns or less (null calls, in-process reads).
    fn fast_calls(&self) -> u64 {
        if self.quick { 100_000 } else { 2_000_000 }
    }

    /// Calls per timed loop for calls of about a microsecond.
    fn medium_calls(&self) -> u64 {
        if self.quick { 20_000 } else { 200_000 }
    }

    /// Calls per timed loop for calls that cross to the daemon (several microseconds).
    fn slow_calls(&self) -> u64 {
        if self.quick { 1_000 } else { 20_000 }
    }
}

/// What a row measures: an operation, and the path it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    NullVino,
    NullClient,
    NullLinux,
    ReadVino,
    ReadInProcess,
    ReadClient,
    ReadClientShm,
    ReadFuse,
    ReadLinux,
}

impl Route {
    const ALL: [Route; 9] = [
        Route::NullVino,
        Route::NullClient,
        Route::NullLinux,
        Route::ReadVino,
        Route::ReadInProcess,
        Route::ReadClient,
        Route::ReadClientShm,
        Route::ReadFuse,
        Route::ReadLinux,
    ];

    fn operation(self) -> &'static str {
        match self {
            Route::NullVino | Route::NullClient | Route::NullLinux => "null system call",
            _ => "cached 4 KiB read",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Route::NullVino => "VINO process (vino_null)",
            Route::NullClient => "client library through vinod (socket)",
            Route::NullLinux => "Linux (getppid)",
            Route::ReadVino => "VINO process (pread)",
            Route::ReadInProcess => "kernel in process (Process::pread, no Wasm)",
            Route::ReadClient => "client library through vinod (data in the message)",
            Route::ReadClientShm => "client library through vinod (shared memory)",
            Route::ReadFuse => "FUSE mount of vinod (pread)",
            Route::ReadLinux => "Linux (pread, host file system)",
        }
    }

    fn goal_ns(self) -> Option<f64> {
        match self {
            Route::NullVino => Some(NULL_GOAL_NS),
            Route::ReadVino => Some(READ_GOAL_NS),
            _ => None,
        }
    }

    /// The Linux row of the same operation.
    fn linux(self) -> Route {
        match self {
            Route::NullVino | Route::NullClient | Route::NullLinux => Route::NullLinux,
            _ => Route::ReadLinux,
        }
    }
}

/// One measured path: ns per call in each repetition, and their median, minimum and maximum.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub operation: String,
    pub path: String,
    /// Calls in each timed loop.
    pub calls: u64,
    pub samples_ns: Vec<f64>,
    pub median_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    /// The row's median over Linux's of the same operation, in this run.
    pub vs_linux: f64,
    pub goal_ns: Option<f64>,
    pub meets_goal: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SyscallsReport {
    pub reps: usize,
    pub rows: Vec<Row>,
    /// What could not be measured here, and why.
    pub notes: Vec<String>,
}

impl SyscallsReport {
    pub fn row(&self, operation: &str, path: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.operation == operation && r.path == path)
    }

    /// The VINO process's null call and read, the rows the goals are for.
    pub fn vino_rows(&self) -> [Option<&Row>; 2] {
        [Route::NullVino, Route::ReadVino].map(|p| self.row(p.operation(), p.path()))
    }

    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "E10: a system call from a VINO process, through vinod, through FUSE and on Linux",
            &["operation", "path", "median", "min", "max", "vs Linux", "goal", "met"],
        );
        for r in &self.rows {
            t.row([
                r.operation.clone(),
                r.path.clone(),
                fmt_ns(r.median_ns),
                fmt_ns(r.min_ns),
                fmt_ns(r.max_ns),
                fmt_ratio(r.vs_linux),
                r.goal_ns.map_or("-".into(), |g| format!("< {}", fmt_ns(g))),
                r.meets_goal
                    .map_or("-".into(), |m| if m { "yes".into() } else { "no".into() }),
            ]);
        }
        t.note(format!(
            "ns per call; median, min and max of {} repetitions, each a loop of `calls` calls after a warm-up",
            self.reps
        ));
        t.note(
            "VINO process: experiments/programs/syscalls.c (clang --target=wasm32-wasi -O2) run by vino-wasi on \
             the daemon's kernel, timed inside with clock_gettime(CLOCK_MONOTONIC); the others timed in this \
             program; every read is 4 KiB at offset 0 of a cached file",
        );
        t.note("goal: met when the median is under it");
        for n in &self.notes {
            t.note(n.clone());
        }
        vec![t]
    }

    /// Median ns per call of every path, grouped by operation, on a log scale (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let mut groups: Vec<(String, Vec<(String, f64)>)> = Vec::new();
        for r in &self.rows {
            match groups.iter_mut().find(|g| g.0 == r.operation) {
                Some(g) => g.1.push((r.path.clone(), r.median_ns)),
                None => groups.push((r.operation.clone(), vec![(r.path.clone(), r.median_ns)])),
            }
        }
        bar_chart_with(
            path,
            "E10: what a system call costs (median ns per call)",
            "ns per call",
            &groups,
            &ChartOptions {
                log_scale: Some(true),
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}

/// The VINO program timing itself: built once, run once per repetition.
struct VinoProgram {
    program: vino_wasi::Program,
}

impl VinoProgram {
    fn build() -> Result<VinoProgram> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/syscalls.c");
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("syscalls.wasm");
        vino_sdk::build_program(&[source], &out, &vino_sdk::BuildOptions::default())
            .map_err(|e| anyhow!("building syscalls.c for wasm32-wasi: {e}"))?;
        let wasm = std::fs::read(&out)?;
        let program = vino_wasi::Program::compile(&wasm, vino_wasi::ProgramLimits::default())?;
        Ok(VinoProgram { program })
    }

    /// Runs it on `kernel`: ns per null call and per read, as it measured them.
    fn run(&self, kernel: &Arc<vino_kernel::Kernel>, calls: u64, reads: u64) -> Result<(f64, f64)> {
        let args = [
            "syscalls".to_string(),
            calls.to_string(),
            reads.to_string(),
            FILE.into(),
        ];
        let args = args.into_iter().map(String::into_bytes).collect();
        let text = run_printing(kernel, &self.program, args, "syscalls.wasm")?;
        parse_program_output(&text).ok_or_else(|| anyhow!("syscalls.wasm printed {text:?}"))
    }
}

/// The program's `null NS` and `pread NS` lines.
pub fn parse_program_output(text: &str) -> Option<(f64, f64)> {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
    };
    Some((value("null")?, value("pread")?))
}

pub fn run(opts: &SyscallsOptions, progress: &mut dyn FnMut(&str)) -> Result<SyscallsReport> {
    ensure!(opts.reps > 0, "at least one repetition");
    progress("building syscalls.c for wasm32-wasi");
    let program = VinoProgram::build()?;
    std::fs::create_dir_all(&opts.scratch).with_context(|| format!("creating {}", opts.scratch.display()))?;
    let dir = tempfile::tempdir_in(&opts.scratch)?;
    progress("starting a daemon on a fresh image");
    let handle = daemon::start_daemon(dir.path(), 1024).map_err(anyhow::Error::msg)?;
    let result = measure(opts, &program, &handle, dir.path(), progress);
    handle
        .shutdown()
        .map_err(|e| anyhow!("shutting the daemon down: {e}"))?;
    result
}

fn measure(
    opts: &SyscallsOptions,
    program: &VinoProgram,
    handle: &vino_daemon::Handle,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<SyscallsReport> {
    let ce = |e: vino_client::ClientError| anyhow!("client: {e}");
    let data = vec![0x5a; 64 << 10];
    let mut c = Client::connect(handle.socket()).map_err(ce)?;
    let fd = c.open(FILE, OpenFlags::create()).map_err(ce)?;
    c.write(fd, &data).map_err(ce)?;
    let kernel = handle.kernel();
    let p = kernel.spawn(Credentials::root());
    let kfd = p
        .open(FILE, vino_kernel::OpenFlags::read_only())
        .map_err(|e| anyhow!("opening {FILE} in process: {e}"))?;
    let host_file = dir.join("host-file");
    std::fs::write(&host_file, &data)?;
    let host = std::fs::File::open(&host_file)?;
    let mut notes = Vec::new();
    // Every read a request to the daemon (direct I/O), as the row compares system-call paths;
    // by default Linux's page cache would serve all but the first.
    let transport = handle.daemon().config().mount_transport.fuse();
    let fuse = match FuseMount::mount_with(handle, dir, transport, false) {
        Ok(m) => Some(m),
        Err(why) => {
            notes.push(format!(
                "no FUSE row: mounting failed ({why}); it needs root and /dev/fuse"
            ));
            None
        }
    };
    let fuse_file = match &fuse {
        Some(m) => Some(std::fs::File::open(m.dir().join(&FILE[1..])).context("opening the file through FUSE")?),
        None => None,
    };
    let (fast, medium, slow) = (opts.fast_calls(), opts.medium_calls(), opts.slow_calls());
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); Route::ALL.len()];
    let mut put = |p: Route, ns: f64| samples[Route::ALL.iter().position(|&q| q == p).unwrap()].push(ns);
    let mut buf = vec![0u8; BLOCK];
    for rep in 0..opts.reps {
        let step = |what: &str| format!("{what} (repetition {} of {})", rep + 1, opts.reps);
        progress(&step("VINO process"));
        let (null, read) = program.run(kernel, fast, medium)?;
        put(Route::NullVino, null);
        put(Route::ReadVino, read);
        progress(&step("kernel in process"));
        put(
            Route::ReadInProcess,
            daemon::time(1, medium, || assert_eq!(p.pread(kfd, &mut buf, 0).unwrap(), BLOCK)),
        );
        progress(&step("client library through vinod"));
        put(Route::NullClient, daemon::time(1, slow, || c.null().unwrap()));
        c.set_shm_threshold(usize::MAX);
        put(
            Route::ReadClient,
            daemon::time(1, slow, || assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), BLOCK)),
        );
        c.set_shm_threshold(0);
        put(
            Route::ReadClientShm,
            daemon::time(1, slow, || assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), BLOCK)),
        );
        if let Some(f) = &fuse_file {
            progress(&step("FUSE mount"));
            put(
                Route::ReadFuse,
                daemon::time(1, slow, || assert_eq!(f.read_at(&mut buf, 0).unwrap(), BLOCK)),
            );
        }
        progress(&step("Linux"));
        put(
            Route::NullLinux,
            daemon::time(1, fast, || {
                // SAFETY: getppid has no preconditions.
                std::hint::black_box(unsafe { libc::getppid() });
            }),
        );
        put(
            Route::ReadLinux,
            daemon::time(1, medium, || assert_eq!(host.read_at(&mut buf, 0).unwrap(), BLOCK)),
        );
    }
    drop(fuse_file);
    if let Some(m) = fuse {
        m.unmount().map_err(|e| anyhow!("unmounting FUSE: {e}"))?;
    }
    drop(c);
    kernel.exit(p.pid());
    let calls = |p: Route| match p {
        Route::NullVino | Route::NullLinux => fast,
        Route::ReadVino | Route::ReadInProcess | Route::ReadLinux => medium,
        _ => slow,
    };
    let medians: Vec<Option<f64>> = samples
        .iter()
        .map(|s| (!s.is_empty()).then(|| median_of(s.iter().copied())))
        .collect();
    let median_at = |p: Route| medians[Route::ALL.iter().position(|&q| q == p).unwrap()];
    let rows = Route::ALL
        .iter()
        .zip(&samples)
        .filter(|(_, s)| !s.is_empty())
        .map(|(&p, s)| {
            let m = median_of(s.iter().copied());
            Row {
                operation: p.operation().into(),
                path: p.path().into(),
                calls: calls(p),
                samples_ns: s.clone(),
                median_ns: m,
                min_ns: s.iter().copied().fold(f64::INFINITY, f64::min),
                max_ns: s.iter().copied().fold(0.0, f64::max),
                vs_linux: median_at(p.linux()).map_or(f64::NAN, |l| m / l),
                goal_ns: p.goal_ns(),
                meets_goal: p.goal_ns().map(|g| m < g),
            }
        })
        .collect();
    Ok(SyscallsReport {
        reps: opts.reps,
        rows,
        notes,
    })
}
