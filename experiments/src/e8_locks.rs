//! Experiment E8: lock granting, FIFO/reader priority against strict FIFO, under a varying write
//! share (Seltzer et al. 1995, section 4.4, figure 3).
//!
//! The report's test program requests a read or a write lock on byte 0 of a file (a write lock
//! with probability `w`), waits until it gets it, reads a randomly chosen 8 KB record of a 32 MB
//! file, computes for 15 ms and releases the lock; four copies run at once (the multiprogramming
//! level at which its machine saturated with readers alone). Under BSD's FIFO/reader priority
//! (FRP) readers pass waiting writers, so at a small write share a write took 667 ms against
//! 105 ms for a read; under strict FIFO read and write times track each other; total throughput
//! was the same under both.
//!
//! Here four VINO processes do the same through the kernel: `Process::lock` (`F_SETLKW`) on byte
//! 0, `Process::pread` of a random 8 KB record of a 32 MB file with the default 4 MB cache (so
//! most reads miss), 15 ms of CPU (thread CPU time, so four workers on fewer cores stretch it as
//! the report's single CPU did), unlock. The lock queue is served by the kernel's default (FRP),
//! the strict FIFO policy in Rust bound natively (unprotected), or `sdk/grafts/lock_fifo.c`
//! loaded on `lock.grant/<fd>` (protected). Each (device, policy, write share) cell boots a fresh
//! kernel, cold cache. Reported: mean read and write operation times and their lock-wait parts,
//! the share of lock requests that had to wait, and total throughput.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use vino_fs::MkfsOptions;
use vino_kernel::{Credentials, Kernel, LockRequest, OpenFlags, Process};
use vino_locks::Fifo;

use crate::e6_layout::{DeviceKind, Disk, FineTimerSlack, MIB, image_path, noise};
use vino_measure::report::{self, Table};

/// Which policy serves the lock queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantPolicy {
    /// The kernel's default: FIFO/reader priority.
    Frp,
    /// Strict FIFO in Rust, bound natively (unprotected).
    FifoNative,
    /// Strict FIFO as the C graft `lock_fifo.c` (protected).
    FifoGraft,
}

impl GrantPolicy {
    pub const ALL: [GrantPolicy; 3] = [GrantPolicy::Frp, GrantPolicy::FifoNative, GrantPolicy::FifoGraft];

    pub fn label(self) -> &'static str {
        match self {
            GrantPolicy::Frp => "FRP",
            GrantPolicy::FifoNative => "FIFO native",
            GrantPolicy::FifoGraft => "FIFO graft",
        }
    }
}

/// What E8 runs.
#[derive(Clone, Debug)]
pub struct E8Options {
    pub quick: bool,
    /// Where the image goes.
    pub scratch_dir: PathBuf,
    /// Size of the file the records are read from (report: 32 MB).
    pub file_bytes: u64,
    /// Record size (report: 8 KB).
    pub record_bytes: usize,
    /// Concurrent processes (report: 4).
    pub processes: usize,
    /// Operations each process performs per cell (report: 1000 iterations).
    pub ops_per_process: usize,
    /// CPU time computed while holding the lock (report: 15 ms).
    pub compute: Duration,
    /// Write shares in percent.
    pub write_percents: Vec<u32>,
    pub policies: Vec<GrantPolicy>,
    pub devices: Vec<DeviceKind>,
    /// Page-cache frames (1024: 4 MB).
    pub cache_frames: usize,
}

/// Scale of the ST32272N model's clock for E8: the 1996 disk's own times, so that reads take
/// about as long as the report's did next to the 15 ms of computing.
pub const E8_MODEL_SCALE: f64 = 1.0;

impl E8Options {
    pub fn new(quick: bool) -> E8Options {
        E8Options {
            quick,
            scratch_dir: PathBuf::from("target/vino-bench"),
            file_bytes: 32 * MIB,
            record_bytes: 8192,
            processes: 4,
            ops_per_process: if quick { 20 } else { 100 },
            compute: Duration::from_millis(15),
            write_percents: vec![5, 10, 25, 50, 75, 100],
            policies: GrantPolicy::ALL.to_vec(),
            devices: vec![DeviceKind::Plain, DeviceKind::Model { scale: E8_MODEL_SCALE }],
            cache_frames: 1024,
        }
    }
}

impl Default for E8Options {
    fn default() -> Self {
        E8Options::new(false)
    }
}

/// One (device, policy, write share) cell.
#[derive(Clone, Debug, Serialize)]
pub struct E8Cell {
    pub device: DeviceKind,
    pub policy: GrantPolicy,
    pub write_percent: u32,
    pub reads: u64,
    pub writes: u64,
    /// Mean time of a read operation (lock request to release), ms.
    pub read_ms: f64,
    /// Of it, waiting for the lock, ms.
    pub read_wait_ms: f64,
    pub write_ms: f64,
    pub write_wait_ms: f64,
    /// Longest single wait for a write lock, ms (starvation shows here).
    pub write_wait_max_ms: f64,
    /// Operations per second, all processes together.
    pub throughput: f64,
    pub elapsed_s: f64,
    /// Lock requests that had to wait, percent.
    pub blocked_percent: f64,
    /// Page-cache misses over all reads.
    pub misses: u64,
    /// Decisions the grant policy was asked for, its failures and its time (graft: transaction
    /// included); zero for the default.
    pub policy_calls: u64,
    pub policy_failures: u64,
    pub policy_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct E8Report {
    pub quick: bool,
    pub file_bytes: u64,
    pub record_bytes: usize,
    pub processes: usize,
    pub ops_per_process: usize,
    pub compute_ms: f64,
    pub cache_frames: usize,
    pub cells: Vec<E8Cell>,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

/// The report's figures quoted in its text: at 95% readers under FRP, a read took 105 ms and a
/// write 667 ms.
pub const REPORT_FRP_95_READ_MS: f64 = 105.0;
pub const REPORT_FRP_95_WRITE_MS: f64 = 667.0;

const DATA_PATH: &str = "/records";

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Burns `cpu` of this thread's CPU time.
fn compute(cpu: Duration) -> u64 {
    let until = thread_cpu_ns() + cpu.as_nanos() as u64;
    let mut x = 1u64;
    while thread_cpu_ns() < until {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// One operation as a worker measured it.
#[derive(Clone, Copy)]
struct Sample {
    write: bool,
    total_ns: u64,
    wait_ns: u64,
}

/// Writes the record file on a fresh file system in a new image.
fn prepare_image(opts: &E8Options) -> Result<PathBuf> {
    let path = image_path(&opts.scratch_dir, "e8");
    let bytes = (opts.file_bytes * 5 / 4 + 32 * MIB).div_ceil(MIB) * MIB;
    Disk::create_image(&path, bytes, &MkfsOptions::default())?;
    let disk = Disk::open(&path, DeviceKind::Plain)?;
    let kernel = disk.boot(opts.cache_frames)?;
    let p = kernel.spawn(Credentials::root());
    let fd = p.open(DATA_PATH, OpenFlags::create())?;
    let data = noise(0xE8, opts.file_bytes as usize);
    for chunk in data.chunks(MIB as usize) {
        ensure!(p.write(fd, chunk)? == chunk.len(), "short write storing the records");
    }
    p.fsync(fd)?;
    p.close(fd)?;
    kernel.shutdown()?;
    Ok(path)
}

/// Binds the policy to the file's `lock.grant` through `owner`'s descriptor.
fn bind(owner: &Process, fd: u32, policy: GrantPolicy, wasm: &[u8]) -> Result<()> {
    match policy {
        GrantPolicy::Frp => {}
        GrantPolicy::FifoNative => owner.lock_grant(fd)?.bind_native(Arc::new(Fifo), false),
        GrantPolicy::FifoGraft => {
            owner
                .graft_load(&format!("lock.grant/{fd}"), wasm)
                .context("loading lock_fifo on lock.grant")?;
        }
    }
    Ok(())
}

/// One worker: `ops` lock-read-compute-unlock operations.
fn worker(p: &Process, opts: &E8Options, write_percent: u32, seed: u64, start: &Barrier) -> Result<Vec<Sample>> {
    let fd = p.open(DATA_PATH, OpenFlags::read_write())?;
    let records = opts.file_bytes / opts.record_bytes as u64;
    let mut rng = crate::wisconsin::Rng(seed);
    let mut buf = vec![0u8; opts.record_bytes];
    let mut samples = Vec::with_capacity(opts.ops_per_process);
    start.wait();
    for _ in 0..opts.ops_per_process {
        let write = rng.below(100) < u64::from(write_percent);
        let offset = rng.below(records) * opts.record_bytes as u64;
        let t0 = Instant::now();
        let req = if write {
            LockRequest::write(0, 1)
        } else {
            LockRequest::read(0, 1)
        };
        p.lock(fd, req, true)?;
        let wait_ns = t0.elapsed().as_nanos() as u64;
        ensure!(
            p.pread(fd, &mut buf, offset)? == buf.len(),
            "short record read at {offset}"
        );
        compute(opts.compute);
        p.lock(fd, LockRequest::unlock(0, 1), false)?;
        samples.push(Sample {
            write,
            total_ns: t0.elapsed().as_nanos() as u64,
            wait_ns,
        });
    }
    p.close(fd)?;
    Ok(samples)
}

fn run_cell(
    opts: &E8Options,
    disk: &Disk,
    device: DeviceKind,
    policy: GrantPolicy,
    write_percent: u32,
    wasm: &[u8],
) -> Result<E8Cell> {
    let kernel: Arc<Kernel> = disk.boot(opts.cache_frames)?;
    let owner = kernel.spawn(Credentials::root());
    let fd = owner.open(DATA_PATH, OpenFlags::read_write())?;
    bind(&owner, fd, policy, wasm)?;
    let workers: Vec<Arc<Process>> = (0..opts.processes).map(|_| kernel.spawn(Credentials::root())).collect();
    let start = Barrier::new(opts.processes + 1);
    let (samples, elapsed_s) = std::thread::scope(|s| -> Result<(Vec<Sample>, f64)> {
        let handles: Vec<_> = workers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (start, seed) = (&start, 0xE8_0000 + u64::from(write_percent) * 64 + i as u64);
                s.spawn(move || worker(p, opts, write_percent, seed, start))
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| anyhow::anyhow!("a worker panicked"))??);
        }
        Ok((all, t0.elapsed().as_secs_f64()))
    })?;
    let misses = workers.iter().map(|p| p.cache_counters().misses).sum();
    let lock_stats = kernel.lock_stats();
    let slot = owner.lock_grant(fd)?.stats().unwrap_or_default();
    owner.close(fd)?;
    kernel.shutdown()?;
    let of = |write: bool| samples.iter().filter(move |s| s.write == write);
    let mean_ms = |write: bool, f: fn(&Sample) -> u64| {
        let n = of(write).count();
        if n == 0 {
            f64::NAN
        } else {
            of(write).map(f).sum::<u64>() as f64 / n as f64 / 1e6
        }
    };
    let requests = lock_stats.immediate + lock_stats.waited;
    Ok(E8Cell {
        device,
        policy,
        write_percent,
        reads: of(false).count() as u64,
        writes: of(true).count() as u64,
        read_ms: mean_ms(false, |s| s.total_ns),
        read_wait_ms: mean_ms(false, |s| s.wait_ns),
        write_ms: mean_ms(true, |s| s.total_ns),
        write_wait_ms: mean_ms(true, |s| s.wait_ns),
        write_wait_max_ms: of(true).map(|s| s.wait_ns).max().unwrap_or(0) as f64 / 1e6,
        throughput: samples.len() as f64 / elapsed_s,
        elapsed_s,
        blocked_percent: if requests == 0 {
            0.0
        } else {
            lock_stats.waited as f64 * 100.0 / requests as f64
        },
        misses,
        policy_calls: slot.invocations,
        policy_failures: slot.failures,
        policy_ns: slot.time_ns,
    })
}

/// Builds `sdk/grafts/lock_fifo.c`.
pub fn build_lock_fifo() -> Result<Vec<u8>> {
    vino_sdk::build_example("lock_fifo", &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow::anyhow!("building lock_fifo: {e}"))
}

/// Runs E8.
pub fn run(opts: &E8Options, progress: &mut dyn FnMut(&str)) -> Result<E8Report> {
    let started = Instant::now();
    ensure!(opts.processes > 0 && opts.record_bytes > 0, "nothing to run");
    ensure!(opts.file_bytes >= opts.record_bytes as u64, "the file holds no record");
    std::fs::create_dir_all(&opts.scratch_dir).with_context(|| format!("creating {}", opts.scratch_dir.display()))?;
    progress("building the lock_fifo graft");
    let wasm = build_lock_fifo()?;
    let _slack = FineTimerSlack::new();
    let mut cells = Vec::new();
    for &device in &opts.devices {
        progress(&format!(
            "{}: writing the {} MB record file",
            device.label(),
            opts.file_bytes / MIB
        ));
        let path = prepare_image(opts)?;
        let result = (|| -> Result<()> {
            let disk = Disk::open(&path, device)?;
            for &w in &opts.write_percents {
                for &policy in &opts.policies {
                    progress(&format!("{}: {}, {w}% writes", device.label(), policy.label()));
                    let cell = run_cell(opts, &disk, device, policy, w, &wasm)
                        .with_context(|| format!("E8 on {}: {} at {w}% writes", device.label(), policy.label()))?;
                    cells.push(cell);
                }
            }
            Ok(())
        })();
        let _ = std::fs::remove_file(&path);
        result?;
    }
    let notes = vec![
        format!(
            "{} processes, {} operations each per cell: lock byte 0 (F_SETLKW), pread a random {} KB record of \
             a {} MB file, {} ms of CPU, unlock; fresh kernel and cold {:.1} MB cache per cell",
            opts.processes,
            opts.ops_per_process,
            opts.record_bytes / 1024,
            opts.file_bytes / MIB,
            opts.compute.as_secs_f64() * 1e3,
            opts.cache_frames as f64 * 4096.0 / MIB as f64
        ),
        "op: from the lock request to the release; wait: the part spent waiting for the lock; blocked: lock \
         requests that had to wait"
            .into(),
        format!(
            "report (BSD/OS, 4 processes): at 95% reads under FRP a read took {REPORT_FRP_95_READ_MS} ms and a \
             write {REPORT_FRP_95_WRITE_MS} ms; under FIFO read and write times track each other; total \
             throughput is the same under both"
        ),
    ];
    Ok(E8Report {
        quick: opts.quick,
        file_bytes: opts.file_bytes,
        record_bytes: opts.record_bytes,
        processes: opts.processes,
        ops_per_process: opts.ops_per_process,
        compute_ms: opts.compute.as_secs_f64() * 1e3,
        cache_frames: opts.cache_frames,
        cells,
        notes,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

impl E8Report {
    pub fn cell(&self, device: DeviceKind, policy: GrantPolicy, write_percent: u32) -> Option<&E8Cell> {
        self.cells
            .iter()
            .find(|c| c.device == device && c.policy == policy && c.write_percent == write_percent)
    }

    fn devices(&self) -> Vec<DeviceKind> {
        let mut v: Vec<DeviceKind> = Vec::new();
        for c in &self.cells {
            if !v.contains(&c.device) {
                v.push(c.device);
            }
        }
        v
    }

    /// The report as printable tables, one per device.
    pub fn tables(&self) -> Vec<Table> {
        let ms = |v: f64| if v.is_finite() { format!("{v:.1}") } else { "-".into() };
        let mut out = Vec::new();
        for d in self.devices() {
            let mut t = Table::new(
                format!("E8: lock granting, FRP vs FIFO, {} (report 4.4, figure 3)", d.label()),
                &[
                    "writes %",
                    "policy",
                    "reads",
                    "read op ms",
                    "read wait ms",
                    "writes",
                    "write op ms",
                    "write wait ms",
                    "max write wait ms",
                    "ops/s",
                    "blocked %",
                    "policy calls",
                    "policy failures",
                ],
            );
            for c in self.cells.iter().filter(|c| c.device == d) {
                t.row([
                    c.write_percent.to_string(),
                    c.policy.label().to_string(),
                    c.reads.to_string(),
                    ms(c.read_ms),
                    ms(c.read_wait_ms),
                    c.writes.to_string(),
                    ms(c.write_ms),
                    ms(c.write_wait_ms),
                    ms(c.write_wait_max_ms),
                    format!("{:.1}", c.throughput),
                    format!("{:.0}", c.blocked_percent),
                    c.policy_calls.to_string(),
                    c.policy_failures.to_string(),
                ]);
            }
            out.push(t);
        }
        if let Some(first) = out.first_mut() {
            for n in &self.notes {
                first.note(n.clone());
            }
        }
        out
    }

    /// Mean read and write operation times against the write share, per device and policy, as
    /// the report's figure 3 (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let mut series = Vec::new();
        for d in self.devices() {
            for policy in GrantPolicy::ALL {
                for (what, f) in [
                    ("read", (|c: &E8Cell| c.read_ms) as fn(&E8Cell) -> f64),
                    ("write", |c| c.write_ms),
                ] {
                    let pts: Vec<(f64, f64)> = self
                        .cells
                        .iter()
                        .filter(|c| c.device == d && c.policy == policy)
                        .map(|c| (f64::from(c.write_percent), f(c)))
                        .filter(|p| p.1.is_finite())
                        .collect();
                    if !pts.is_empty() {
                        series.push((format!("{} {} {what}", d.label(), policy.label()), pts));
                    }
                }
            }
        }
        report::line_chart(
            path,
            "E8: operation time against write share, FRP vs FIFO",
            "write locks (%)",
            "mean operation time (ms)",
            &series,
            false,
        )
    }
}
