//! Experiment E6: file layout (Small 1998, section 7.5, tables 25-27; Smith and Seltzer's
//! NoSwitch).
//!
//! FFS moves a file to another cylinder group at its first indirect block (file block 12), so
//! every file of more than 48 KB is split in two distant pieces. NoSwitch keeps block 12 right
//! after block 11. The thesis measured what that gives, and what grafting it costs, with Smith's
//! benchmark: 32 MB written and then read back as files of 32, 64, 128 and 256 KB (1024, 512,
//! 256 and 128 files), 4 MB at a time, the cache flushed between the phases, under three
//! placements:
//!
//! * **default**: the file system's own FFS placement;
//! * **NoSwitch graft**: the C graft `sdk/grafts/noswitch.c`, loaded by the creating process
//!   on the new file's `file.block_buddy/<fd>` right after creating it. Loading is part of the
//!   measured write time, as in the thesis (whose graft load, about 120 ms, halved the write
//!   throughput of 64 KB files);
//! * **NoSwitch native**: the same policy as trusted Rust ([`vino_fs::NoSwitch`]) bound on the
//!   file's slot, unprotected.
//!
//! Here one run of (device, file size, placement) makes a fresh file system on an image file,
//! boots a kernel with the thesis' 4 MB cache, and
//!
//! 1. **writes**: creates, writes and closes the files in batches of 4 MB, and after each batch
//!    syncs (the data and the journal reach the device); timed end to end;
//! 2. checks the layout with `block_map`: whether block 12 of each file left the group of
//!    block 11, and whether the file is contiguous (only its indirect block between blocks 11
//!    and 12);
//! 3. **flushes** by rebooting the kernel (page cache and file-system metadata cache cold);
//! 4. **reads** the files in creation order, `read_chunk` bytes per call, checking every byte;
//!    timed end to end.
//!
//! Cylinder groups are 1440 blocks (5.6 MB): 16 cylinders of the thesis' disk, FFS's usual group
//! size, and small enough that the file system has many of them, so the switch at block 12
//! really lands in another group. Devices: the image file itself (`O_DIRECT` where the host
//! allows it), and the same image under the timing model of the thesis' disk (Seagate
//! ST32272N), which answers whether the 1998 result reproduces on 1998 hardware.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde::Serialize;
use vino_blockdev::{
    BlockDevice, DeviceStats, Direct, DiskModel, DiskParams, FileDevice, FileOptions, ModelStats, Timing,
};
use vino_fs::{MkfsOptions, NoSwitch, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags};

use vino_measure::report::{self, Table, fmt_ns};

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;

/// The NoSwitch graft's source, built with the system clang at run time.
pub const NOSWITCH_C: &str = include_str!("../../sdk/grafts/noswitch.c");

/// File blocks an inode maps directly: block 12 is the first behind an indirect block.
const NDIRECT: usize = 12;

// ---- devices shared by E6 and E7 ---------------------------------------------------------------

/// Which device an experiment runs on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The image file, `O_DIRECT` if the host file system allows it.
    Plain,
    /// The image under the ST32272N timing model, sleeping `scale` × the modeled time per
    /// request (1.0: the 1996 disk itself). The image is read and written through the host's
    /// page cache, so its own transfers (microseconds) stay well inside the modeled times and
    /// the model alone sets the pace.
    Model { scale: f64 },
}

impl DeviceKind {
    pub fn label(&self) -> String {
        match self {
            DeviceKind::Plain => "plain".into(),
            DeviceKind::Model { scale } => format!("ST32272N x{scale}"),
        }
    }

    pub fn is_model(&self) -> bool {
        matches!(self, DeviceKind::Model { .. })
    }
}

/// An image file opened as a device, with its model if any.
pub struct Disk {
    pub path: PathBuf,
    pub dev: Arc<dyn BlockDevice>,
    pub model: Option<Arc<DiskModel<FileDevice>>>,
}

impl Disk {
    /// Creates a sparse image of `bytes` and makes a file system on it (straight on the file:
    /// making the file system is set-up, not part of what a model should time).
    pub fn create_image(path: &Path, bytes: u64, opts: &MkfsOptions) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let dev = FileDevice::create(path, bytes).with_context(|| format!("creating image {}", path.display()))?;
        mkfs(&dev, opts).with_context(|| format!("mkfs on {}", path.display()))?;
        dev.flush()?;
        Ok(())
    }

    /// Opens an image as `kind`.
    pub fn open(path: &Path, kind: DeviceKind) -> Result<Disk> {
        match kind {
            DeviceKind::Plain => {
                let dev = FileDevice::open_with(
                    path,
                    FileOptions {
                        direct: Direct::Auto,
                        read_only: false,
                    },
                )
                .with_context(|| format!("opening {}", path.display()))?;
                Ok(Disk {
                    path: path.to_path_buf(),
                    dev: Arc::new(dev),
                    model: None,
                })
            }
            DeviceKind::Model { scale } => {
                let dev = FileDevice::open_with(
                    path,
                    FileOptions {
                        direct: Direct::Never,
                        read_only: false,
                    },
                )
                .with_context(|| format!("opening {}", path.display()))?;
                let model = Arc::new(
                    DiskModel::new(dev, DiskParams::st32272n(), Timing::Sleep { scale })
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                );
                Ok(Disk {
                    path: path.to_path_buf(),
                    dev: model.clone(),
                    model: Some(model),
                })
            }
        }
    }

    /// True if transfers bypass the host's page cache.
    pub fn direct(&self) -> bool {
        self.dev.direct()
    }

    pub fn stats(&self) -> DeviceStats {
        self.dev.stats()
    }

    pub fn model_stats(&self) -> Option<ModelStats> {
        self.model.as_ref().map(|m| m.model_stats())
    }

    /// Boots a kernel on the device: `cache_frames` pages, no periodic write-back (the
    /// experiments sync when they mean to).
    pub fn boot(&self, cache_frames: usize) -> Result<Arc<Kernel>> {
        let config = KernelConfig {
            cache_frames,
            writeback_every: None,
            ..KernelConfig::default()
        };
        Kernel::boot(self.dev.clone(), &config).context("booting the kernel")
    }
}

/// Model counters over a phase.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ModelDelta {
    pub requests: u64,
    pub seeks: u64,
    pub seek_cylinders: u64,
    pub track_buffer_hits: u64,
    /// Modeled busy time, seconds.
    pub busy_s: f64,
}

impl ModelDelta {
    pub fn between(a: &ModelStats, b: &ModelStats) -> ModelDelta {
        ModelDelta {
            requests: b.requests - a.requests,
            seeks: b.seeks - a.seeks,
            seek_cylinders: b.seek_cylinders - a.seek_cylinders,
            track_buffer_hits: b.track_buffer_hits - a.track_buffer_hits,
            busy_s: (b.service_ns - a.service_ns) as f64 / 1e9,
        }
    }
}

/// Device counters over a phase.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct DeviceDelta {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub blocks_read: u64,
    pub blocks_written: u64,
}

impl DeviceDelta {
    pub fn between(a: &DeviceStats, b: &DeviceStats) -> DeviceDelta {
        DeviceDelta {
            reads: b.reads - a.reads,
            writes: b.writes - a.writes,
            flushes: b.flushes - a.flushes,
            blocks_read: b.blocks_read - a.blocks_read,
            blocks_written: b.blocks_written - a.blocks_written,
        }
    }
}

/// Sets this thread's timer slack to 1 ns while alive, and so that of the threads it starts
/// (the device queue's workers inherit it). With Linux's default 50 µs slack every sleep of the
/// disk model would overshoot by some 70 µs, more than a modeled 4 KB transfer at small scales.
pub struct FineTimerSlack(Option<libc::c_int>);

impl FineTimerSlack {
    pub fn new() -> FineTimerSlack {
        // SAFETY: prctl with PR_GET/SET_TIMERSLACK reads or sets a number of this thread.
        let old = unsafe {
            libc::prctl(
                libc::PR_GET_TIMERSLACK,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if old > 0 {
            // SAFETY: as above.
            unsafe {
                libc::prctl(
                    libc::PR_SET_TIMERSLACK,
                    1 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            };
            FineTimerSlack(Some(old))
        } else {
            FineTimerSlack(None)
        }
    }
}

impl Default for FineTimerSlack {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FineTimerSlack {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: as above.
            unsafe {
                libc::prctl(
                    libc::PR_SET_TIMERSLACK,
                    old as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            };
        }
    }
}

/// A unique image path under `dir`.
pub fn image_path(dir: &Path, what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{what}-{}-{n}.img", std::process::id()))
}

/// Deterministic bytes (xorshift), the same on every run.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn median_of(v: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.into_iter().collect();
    median(&mut v)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

// ---- the experiment -------------------------------------------------------------------------

/// Where a file's blocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// FFS, switching group at block 12.
    Default,
    /// NoSwitch, C graft loaded per file by its creator (protected).
    Graft,
    /// NoSwitch, native Rust bound on the file's slot (unprotected).
    Native,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::Default, Layout::Graft, Layout::Native];

    pub fn label(self) -> &'static str {
        match self {
            Layout::Default => "default (FFS)",
            Layout::Graft => "NoSwitch graft",
            Layout::Native => "NoSwitch native",
        }
    }
}

/// What E6 runs.
#[derive(Clone, Debug)]
pub struct E6Options {
    pub quick: bool,
    /// Where the images go (not a tmpfs: `O_DIRECT`).
    pub scratch_dir: PathBuf,
    /// Data written and read per run (thesis: 32 MB).
    pub total_bytes: u64,
    /// Written between syncs (thesis: 4 MB).
    pub batch_bytes: u64,
    pub file_sizes: Vec<u64>,
    pub layouts: Vec<Layout>,
    pub devices: Vec<DeviceKind>,
    /// Runs of each (size, placement) on the plain device.
    pub repeat: usize,
    /// Runs of each (size, placement) on the model.
    pub model_repeat: usize,
    /// Bytes per read call in the read phase.
    pub read_chunk: usize,
    pub image_bytes: u64,
    pub blocks_per_group: u32,
    /// Page-cache frames (1024: the thesis' 4 MB).
    pub cache_frames: usize,
}

/// Scale of the model's clock for E6: a quarter of the 1996 disk's times. A 4 KB write that
/// misses its sector costs a revolution (8.3 ms modeled, 2.1 ms here) and a track-buffer read
/// 0.6 ms (150 µs here, several times the ~25 µs a sleep overshoots with fine timer slack), so
/// the model still sets the pace, and the full run (twice 12 writes of 32 MB at about 3 MB/s
/// here and 12 reads, plus the plain device) stays under ten minutes.
pub const E6_MODEL_SCALE: f64 = 0.25;

impl E6Options {
    pub fn new(quick: bool) -> E6Options {
        E6Options {
            quick,
            scratch_dir: PathBuf::from("target/vino-bench"),
            total_bytes: if quick { 4 * MIB } else { 32 * MIB },
            batch_bytes: 4 * MIB,
            file_sizes: vec![32 * KIB, 64 * KIB, 128 * KIB, 256 * KIB],
            layouts: Layout::ALL.to_vec(),
            devices: vec![DeviceKind::Plain, DeviceKind::Model { scale: E6_MODEL_SCALE }],
            repeat: if quick { 1 } else { 5 },
            model_repeat: if quick { 1 } else { 2 },
            read_chunk: 8 * KIB as usize,
            image_bytes: 256 * MIB,
            blocks_per_group: 1440,
            cache_frames: 1024,
        }
    }

    fn mkfs_options(&self) -> MkfsOptions {
        MkfsOptions {
            blocks_per_group: self.blocks_per_group,
            ..MkfsOptions::default()
        }
    }
}

impl Default for E6Options {
    fn default() -> Self {
        E6Options::new(false)
    }
}

/// One graft load as the kernel reported it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LoadSample {
    pub load_ns: u64,
    pub compile_ns: u64,
    pub cached: bool,
}

/// How the files of one run were laid out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LayoutCheck {
    pub files: usize,
    /// Files with a block 12.
    pub long_files: usize,
    /// Of those, files whose block 12 is in another cylinder group than block 11.
    pub switched: usize,
    /// Files whose blocks follow each other on the device, with at most the indirect block
    /// between blocks 11 and 12.
    pub contiguous: usize,
    /// The block map of the first file, for the record.
    pub first_map: Vec<u64>,
    /// Cylinder group of the first file's block 11 and 12 (if it has them).
    pub first_groups: Option<(u32, u32)>,
}

/// One run of (device, file size, placement).
#[derive(Clone, Debug, Serialize)]
pub struct E6Run {
    pub device: DeviceKind,
    pub direct: bool,
    pub file_bytes: u64,
    pub layout: Layout,
    pub rep: usize,
    pub files: usize,
    pub bytes: u64,
    pub write_s: f64,
    pub read_s: f64,
    /// Time spent in graft loads and unloads (measured around the system calls).
    pub install_s: f64,
    pub loads: Vec<LoadSample>,
    pub layout_check: LayoutCheck,
    pub placements_rejected: u64,
    pub write_device: DeviceDelta,
    pub read_device: DeviceDelta,
    pub write_model: Option<ModelDelta>,
    pub read_model: Option<ModelDelta>,
    pub read_misses: u64,
    pub read_prefetched: u64,
    pub read_prefetch_used: u64,
    /// Bytes read back and compared with what was written.
    pub verified_bytes: u64,
}

impl E6Run {
    pub fn write_mb_s(&self) -> f64 {
        self.bytes as f64 / MIB as f64 / self.write_s
    }
    pub fn read_mb_s(&self) -> f64 {
        self.bytes as f64 / MIB as f64 / self.read_s
    }
}

/// Mean over the repetitions of one (device, size, placement).
#[derive(Clone, Debug, Serialize)]
pub struct E6Cell {
    pub device: DeviceKind,
    pub file_bytes: u64,
    pub layout: Layout,
    pub runs: usize,
    /// From the mean time (the harmonic mean of the throughputs, as the thesis reports).
    pub write_mb_s: f64,
    pub read_mb_s: f64,
    pub write_s: f64,
    pub read_s: f64,
    pub install_s: f64,
    /// Throughput relative to the default placement on the same device and size.
    pub write_norm: f64,
    pub read_norm: f64,
    pub read_seeks: Option<f64>,
}

/// What loading the graft costs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadCost {
    pub wasm_bytes: usize,
    /// Validating and compiling the module in a fresh runtime (median of a few).
    pub cold_compile_ns: f64,
    /// A load that compiled: the first load of each grafted run (each boot has its own module
    /// cache), median.
    pub first_load_ns: f64,
    /// Loads served from the module cache, median.
    pub cached_load_ns: f64,
    pub cached_loads: usize,
    /// Load plus unload as the process sees them, per file, mean over all grafted runs.
    pub install_per_file_ns: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct E6Report {
    pub quick: bool,
    pub total_bytes: u64,
    pub batch_bytes: u64,
    pub read_chunk: usize,
    pub blocks_per_group: u32,
    pub cache_frames: usize,
    pub runs: Vec<E6Run>,
    pub cells: Vec<E6Cell>,
    pub load: LoadCost,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

/// Thesis table 25, write MB/s (baseline, grafted, unprotected) for 64, 128, 256 KB.
pub const THESIS_WRITE: [(u64, [f64; 3]); 3] = [
    (64, [0.596, 0.282, 0.578]),
    (128, [0.853, 0.486, 0.870]),
    (256, [0.935, 0.662, 0.945]),
];
/// Thesis table 26, seconds: grafted run time, installation overhead, net, unprotected.
pub const THESIS_INSTALL: [(u64, [f64; 4]); 3] = [
    (64, [118.2, 59.8, 58.4, 56.0]),
    (128, [69.3, 31.4, 37.9, 38.5]),
    (256, [50.5, 15.4, 35.1, 35.3]),
];
/// Thesis table 27, read MB/s (baseline, grafted, unprotected).
pub const THESIS_READ: [(u64, [f64; 3]); 4] = [
    (32, [0.992, 0.975, 0.985]),
    (64, [0.624, 0.681, 0.673]),
    (128, [0.819, 0.897, 0.910]),
    (256, [0.830, 0.895, 0.896]),
];

fn file_name(i: usize) -> String {
    format!("/e6/f{i:05}")
}

/// Writes the file's number into its first bytes, so no two files are alike.
fn stamp(data: &mut [u8], i: usize) {
    let n = data.len().min(8);
    data[..n].copy_from_slice(&(i as u64).to_le_bytes()[..n]);
}

fn check_layout(kernel: &Kernel, inos: &[u64]) -> Result<LayoutCheck> {
    let mut c = LayoutCheck {
        files: inos.len(),
        ..LayoutCheck::default()
    };
    for (i, &ino) in inos.iter().enumerate() {
        let map = kernel
            .block_map(ino)
            .with_context(|| format!("block map of inode {ino}"))?;
        ensure!(map.iter().all(|&b| b != 0), "file {i} has a hole: {map:?}");
        let contiguous = map.windows(2).enumerate().all(|(j, w)| {
            let gap = w[1].wrapping_sub(w[0]);
            gap == 1 || (j + 1 == NDIRECT && gap == 2)
        });
        c.contiguous += usize::from(contiguous);
        if map.len() > NDIRECT {
            c.long_files += 1;
            let (g11, g12) = (kernel.block_group(map[NDIRECT - 1]), kernel.block_group(map[NDIRECT]));
            c.switched += usize::from(g11 != g12);
            if i == 0 {
                c.first_groups = Some((g11, g12));
            }
        }
        if i == 0 {
            c.first_map = map;
        }
    }
    Ok(c)
}

/// One (device, size, placement) run on a fresh file system.
fn run_one(
    opts: &E6Options,
    device: DeviceKind,
    file_bytes: u64,
    layout: Layout,
    rep: usize,
    wasm: &[u8],
) -> Result<E6Run> {
    let path = image_path(&opts.scratch_dir, "e6");
    Disk::create_image(&path, opts.image_bytes, &opts.mkfs_options())?;
    let result = run_on_image(opts, &path, device, file_bytes, layout, rep, wasm);
    let _ = std::fs::remove_file(&path);
    result
}

fn run_on_image(
    opts: &E6Options,
    path: &Path,
    device: DeviceKind,
    file_bytes: u64,
    layout: Layout,
    rep: usize,
    wasm: &[u8],
) -> Result<E6Run> {
    let disk = Disk::open(path, device)?;
    let size = file_bytes as usize;
    let files = (opts.total_bytes / file_bytes).max(1) as usize;
    let per_batch = (opts.batch_bytes / file_bytes).max(1) as usize;
    let mut data = noise(0xE6, size);

    // Write phase.
    let kernel = disk.boot(opts.cache_frames)?;
    let p = kernel.spawn(Credentials::root());
    p.mkdir("/e6", 0o755)?;
    kernel.sync()?;
    let alloc_before = p.statfs().alloc;
    let (dev0, model0) = (disk.stats(), disk.model_stats());
    let mut inos = Vec::with_capacity(files);
    let mut loads = Vec::new();
    let mut install = Duration::ZERO;
    let started = Instant::now();
    for first in (0..files).step_by(per_batch) {
        for i in first..(first + per_batch).min(files) {
            let fd = p.open(&file_name(i), OpenFlags::create())?;
            let point = format!("file.block_buddy/{fd}");
            match layout {
                Layout::Default => {}
                Layout::Graft => {
                    let t = Instant::now();
                    let info = p
                        .graft_load(&point, wasm)
                        .with_context(|| format!("loading the graft on {point}"))?;
                    install += t.elapsed();
                    loads.push(LoadSample {
                        load_ns: info.load_ns,
                        compile_ns: info.compile_ns,
                        cached: info.cached,
                    });
                }
                Layout::Native => p.block_buddy(fd)?.bind_native(Arc::new(NoSwitch), false),
            }
            stamp(&mut data, i);
            let n = p.write(fd, &data)?;
            ensure!(n == size, "short write: {n} of {size} bytes");
            if layout == Layout::Graft {
                // The graft has placed every block; the file keeps no graft once closed.
                let t = Instant::now();
                p.graft_unload(&point)?;
                install += t.elapsed();
            }
            inos.push(p.inode(fd)?);
            p.close(fd)?;
        }
        kernel.sync()?;
    }
    let write_s = started.elapsed().as_secs_f64();
    let (dev1, model1) = (disk.stats(), disk.model_stats());
    let layout_check = check_layout(&kernel, &inos)?;
    let placements_rejected = p.statfs().alloc.placements_rejected - alloc_before.placements_rejected;
    kernel.shutdown()?;
    drop(p);
    drop(kernel);

    // Flush: a new kernel starts with nothing cached.
    let kernel = disk.boot(opts.cache_frames)?;
    let p = kernel.spawn(Credentials::root());
    let (dev2, model2) = (disk.stats(), disk.model_stats());
    let chunk = opts.read_chunk.max(1);
    let mut buf = vec![0u8; chunk];
    let mut verified = 0u64;
    let started = Instant::now();
    for i in 0..files {
        let fd = p.open(&file_name(i), OpenFlags::read_only())?;
        stamp(&mut data, i);
        let mut at = 0usize;
        loop {
            let n = p.read(fd, &mut buf)?;
            if n == 0 {
                break;
            }
            if at + n > size || buf[..n] != data[at..at + n] {
                bail!("file {i} ({size} bytes) reads back wrong at offset {at}");
            }
            at += n;
        }
        ensure!(at == size, "file {i} reads back {at} of {size} bytes");
        verified += at as u64;
        p.close(fd)?;
    }
    let read_s = started.elapsed().as_secs_f64();
    let (dev3, model3) = (disk.stats(), disk.model_stats());
    let counters = p.cache_counters();
    kernel.shutdown()?;

    Ok(E6Run {
        device,
        direct: disk.direct(),
        file_bytes,
        layout,
        rep,
        files,
        bytes: files as u64 * file_bytes,
        write_s,
        read_s,
        install_s: install.as_secs_f64(),
        loads,
        layout_check,
        placements_rejected,
        write_device: DeviceDelta::between(&dev0, &dev1),
        read_device: DeviceDelta::between(&dev2, &dev3),
        write_model: model0.zip(model1).map(|(a, b)| ModelDelta::between(&a, &b)),
        read_model: model2.zip(model3).map(|(a, b)| ModelDelta::between(&a, &b)),
        read_misses: counters.misses,
        read_prefetched: counters.prefetched,
        read_prefetch_used: counters.prefetch_used,
        verified_bytes: verified,
    })
}

/// Builds the NoSwitch graft from its C source.
pub fn build_noswitch() -> Result<Vec<u8>> {
    vino_sdk::build_c_str("noswitch.c", NOSWITCH_C, &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow::anyhow!("building the NoSwitch graft: {e}"))
}

/// Runs E6.
pub fn run(opts: &E6Options, progress: &mut dyn FnMut(&str)) -> Result<E6Report> {
    let started = Instant::now();
    ensure!(
        !opts.file_sizes.is_empty() && !opts.layouts.is_empty(),
        "nothing to run"
    );
    ensure!(
        opts.file_sizes
            .iter()
            .all(|&s| s > 0 && s % vino_blockdev::BLOCK_SIZE as u64 == 0),
        "file sizes must be whole blocks"
    );
    std::fs::create_dir_all(&opts.scratch_dir).with_context(|| format!("creating {}", opts.scratch_dir.display()))?;
    progress("building the NoSwitch graft");
    let wasm = build_noswitch()?;
    let cold_compile_ns = median_of((0..3).map(|_| {
        let rt = vino_graft::Runtime::new(vino_graft::RuntimeConfig::default());
        let t = Instant::now();
        let ok = rt.compile(&wasm).is_ok();
        if ok { t.elapsed().as_nanos() as f64 } else { f64::NAN }
    }));

    let _slack = FineTimerSlack::new();
    let mut runs = Vec::new();
    for &device in &opts.devices {
        let reps = if device.is_model() {
            opts.model_repeat
        } else {
            opts.repeat
        };
        for rep in 0..reps.max(1) {
            for &size in &opts.file_sizes {
                for &layout in &opts.layouts {
                    progress(&format!(
                        "{}: {} KB files, {} (run {} of {})",
                        device.label(),
                        size / KIB,
                        layout.label(),
                        rep + 1,
                        reps.max(1)
                    ));
                    let r = run_one(opts, device, size, layout, rep, &wasm).with_context(|| {
                        format!("E6 on {}: {} KB files, {}", device.label(), size / KIB, layout.label())
                    })?;
                    runs.push(r);
                }
            }
        }
    }

    let cells = summarize(&runs, opts);
    let load = load_cost(&runs, wasm.len(), cold_compile_ns);
    let mut notes = vec![
        format!(
            "{} MB per run, synced every {} MB; files read back {} KB per call in creation order; {} KB \
             cylinder groups ({} blocks); a {} MB page cache; every byte read back is checked",
            opts.total_bytes / MIB,
            opts.batch_bytes / MIB,
            opts.read_chunk / 1024,
            u64::from(opts.blocks_per_group) * 4,
            opts.blocks_per_group,
            opts.cache_frames * 4 / 1024
        ),
        "the cache is flushed between the phases by rebooting the kernel (page cache and metadata \
         cache both cold)"
            .into(),
        "graft: loaded on file.block_buddy/<fd> by the creating process right after the create, \
         unloaded before the close; load and unload are inside the write time, as in the thesis"
            .into(),
    ];
    for &d in &opts.devices {
        if let Some(r) = runs.iter().find(|r| r.device == d) {
            notes.push(format!(
                "{}: {}",
                d.label(),
                match d {
                    DeviceKind::Plain if r.direct => "the image file with O_DIRECT".to_string(),
                    DeviceKind::Plain => "the image file, buffered (the host refused O_DIRECT)".to_string(),
                    DeviceKind::Model { scale } =>
                        format!("the image under the ST32272N model, every modeled time x{scale} in real time"),
                }
            ));
        }
    }
    Ok(E6Report {
        quick: opts.quick,
        total_bytes: opts.total_bytes,
        batch_bytes: opts.batch_bytes,
        read_chunk: opts.read_chunk,
        blocks_per_group: opts.blocks_per_group,
        cache_frames: opts.cache_frames,
        runs,
        cells,
        load,
        notes,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn summarize(runs: &[E6Run], opts: &E6Options) -> Vec<E6Cell> {
    let mut cells: Vec<E6Cell> = Vec::new();
    for &device in &opts.devices {
        for &size in &opts.file_sizes {
            for &layout in &opts.layouts {
                let rs: Vec<&E6Run> = runs
                    .iter()
                    .filter(|r| r.device == device && r.file_bytes == size && r.layout == layout)
                    .collect();
                if rs.is_empty() {
                    continue;
                }
                let bytes = rs[0].bytes as f64 / MIB as f64;
                let write_s = mean(&rs.iter().map(|r| r.write_s).collect::<Vec<_>>());
                let read_s = mean(&rs.iter().map(|r| r.read_s).collect::<Vec<_>>());
                let seeks: Vec<f64> = rs.iter().filter_map(|r| r.read_model.map(|m| m.seeks as f64)).collect();
                cells.push(E6Cell {
                    device,
                    file_bytes: size,
                    layout,
                    runs: rs.len(),
                    write_mb_s: bytes / write_s,
                    read_mb_s: bytes / read_s,
                    write_s,
                    read_s,
                    install_s: mean(&rs.iter().map(|r| r.install_s).collect::<Vec<_>>()),
                    write_norm: f64::NAN,
                    read_norm: f64::NAN,
                    read_seeks: (!seeks.is_empty()).then(|| mean(&seeks)),
                });
            }
        }
    }
    let base: Vec<(DeviceKind, u64, f64, f64)> = cells
        .iter()
        .filter(|c| c.layout == Layout::Default)
        .map(|c| (c.device, c.file_bytes, c.write_mb_s, c.read_mb_s))
        .collect();
    for c in &mut cells {
        if let Some(b) = base.iter().find(|b| b.0 == c.device && b.1 == c.file_bytes) {
            c.write_norm = c.write_mb_s / b.2;
            c.read_norm = c.read_mb_s / b.3;
        }
    }
    cells
}

fn load_cost(runs: &[E6Run], wasm_bytes: usize, cold_compile_ns: f64) -> LoadCost {
    let loads: Vec<&LoadSample> = runs.iter().flat_map(|r| &r.loads).collect();
    let cached: Vec<f64> = loads.iter().filter(|l| l.cached).map(|l| l.load_ns as f64).collect();
    let first: Vec<f64> = loads.iter().filter(|l| !l.cached).map(|l| l.load_ns as f64).collect();
    let grafted: Vec<&E6Run> = runs.iter().filter(|r| r.layout == Layout::Graft).collect();
    let files: usize = grafted.iter().map(|r| r.files).sum();
    let install: f64 = grafted.iter().map(|r| r.install_s).sum();
    LoadCost {
        wasm_bytes,
        cold_compile_ns,
        first_load_ns: median_of(first),
        cached_loads: cached.len(),
        cached_load_ns: median_of(cached),
        install_per_file_ns: if files > 0 {
            install * 1e9 / files as f64
        } else {
            f64::NAN
        },
    }
}

fn mb(v: f64) -> String {
    if v.is_finite() { format!("{v:.3}") } else { "-".into() }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.1}%", v * 100.0)
    } else {
        "-".into()
    }
}

impl E6Report {
    pub fn cell(&self, device: DeviceKind, size: u64, layout: Layout) -> Option<&E6Cell> {
        self.cells
            .iter()
            .find(|c| c.device == device && c.file_bytes == size && c.layout == layout)
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

    fn sizes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.cells.iter().map(|c| c.file_bytes).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Layout check summed over all runs of one (size, placement).
    pub fn layout_summary(&self, size: u64, layout: Layout) -> Option<LayoutCheck> {
        let rs: Vec<&E6Run> = self
            .runs
            .iter()
            .filter(|r| r.file_bytes == size && r.layout == layout)
            .collect();
        let first = rs.first()?;
        let mut c = LayoutCheck {
            first_map: first.layout_check.first_map.clone(),
            first_groups: first.layout_check.first_groups,
            ..LayoutCheck::default()
        };
        for r in rs {
            c.files += r.layout_check.files;
            c.long_files += r.layout_check.long_files;
            c.switched += r.layout_check.switched;
            c.contiguous += r.layout_check.contiguous;
        }
        Some(c)
    }

    fn throughput_table(&self, write: bool) -> Table {
        let (title, seed): (&str, Vec<(u64, [f64; 3])>) = if write {
            ("E6: write throughput, MB/s (thesis table 25)", THESIS_WRITE.to_vec())
        } else {
            ("E6: read throughput, MB/s (thesis table 27)", THESIS_READ.to_vec())
        };
        let mut t = Table::new(
            title,
            &[
                "device / file size",
                "default",
                "graft",
                "native",
                "graft norm.",
                "native norm.",
                "thesis default",
                "thesis graft",
                "thesis native",
                "thesis graft norm.",
                "thesis native norm.",
            ],
        );
        for d in self.devices() {
            for size in self.sizes() {
                let get = |l: Layout| self.cell(d, size, l);
                let v = |l: Layout| get(l).map_or(f64::NAN, |c| if write { c.write_mb_s } else { c.read_mb_s });
                let n = |l: Layout| get(l).map_or(f64::NAN, |c| if write { c.write_norm } else { c.read_norm });
                let s = seed.iter().find(|s| s.0 == size / KIB).map(|s| s.1);
                let sv = |i: usize| s.map_or("-".to_string(), |s| mb(s[i]));
                let sn = |i: usize| s.map_or("-".to_string(), |s| pct(s[i] / s[0]));
                t.row([
                    format!(
                        "{} / {} KB ({} files)",
                        d.label(),
                        size / KIB,
                        get(Layout::Default)
                            .or(get(Layout::Graft))
                            .map_or(0, |c| self.files_of(c))
                    ),
                    mb(v(Layout::Default)),
                    mb(v(Layout::Graft)),
                    mb(v(Layout::Native)),
                    pct(n(Layout::Graft)),
                    pct(n(Layout::Native)),
                    sv(0),
                    sv(1),
                    sv(2),
                    sn(1),
                    sn(2),
                ]);
            }
        }
        t.note(format!(
            "{} MB per run; from the mean time over the runs (the harmonic mean of the throughputs)",
            self.total_bytes / MIB
        ));
        t.note("thesis: VINO on a 120 MHz Pentium with the ST32272N disk, 32 MB per run, mean of ten runs");
        if write {
            t.note("the thesis ran no 32 KB write test (the graft is never invoked for files of 12 blocks or less)");
        }
        t
    }

    /// Read time per file, in the disk's own time on the model (real time divided by the
    /// scale), beside the thesis' (from its throughputs).
    fn per_file_table(&self) -> Table {
        let mut t = Table::new(
            "E6: read time per file, ms (on the model: the 1996 disk's time)",
            &[
                "device / file size",
                "default",
                "graft",
                "native",
                "saved by NoSwitch (native)",
                "thesis default",
                "thesis graft",
                "thesis native",
                "thesis saved (unprotected)",
            ],
        );
        for d in self.devices() {
            let scale = match d {
                DeviceKind::Model { scale } => scale,
                DeviceKind::Plain => 1.0,
            };
            for size in self.sizes() {
                let ms = |l: Layout| {
                    self.cell(d, size, l)
                        .map_or(f64::NAN, |c| c.read_s / scale / self.files_of(c) as f64 * 1e3)
                };
                let seed = THESIS_READ.iter().find(|s| s.0 == size / KIB).map(|s| s.1);
                let sm = |i: usize| seed.map_or(f64::NAN, |s| size as f64 / MIB as f64 / s[i] * 1e3);
                let f = |v: f64| if v.is_finite() { format!("{v:.1}") } else { "-".into() };
                t.row([
                    format!("{} / {} KB", d.label(), size / KIB),
                    f(ms(Layout::Default)),
                    f(ms(Layout::Graft)),
                    f(ms(Layout::Native)),
                    f(ms(Layout::Default) - ms(Layout::Native)),
                    f(sm(0)),
                    f(sm(1)),
                    f(sm(2)),
                    f(sm(0) - sm(2)),
                ]);
            }
        }
        t.note(
            "the thesis' per-file times include costs of its whole read path (its 32 KB files, which \
             NoSwitch does not change, took 31 ms each); with FFS placement the reads go back and forth \
             between the file's two groups, more than once per file here, because read-ahead asks for \
             blocks on both sides of block 12 and locating block 12 reads the indirect block (in the \
             other group) while the direct blocks are still being fetched: see the seek counts",
        );
        t
    }

    fn files_of(&self, c: &E6Cell) -> u64 {
        self.total_bytes / c.file_bytes
    }

    /// The report as printable tables.
    pub fn tables(&self) -> Vec<Table> {
        let mut out = vec![self.throughput_table(true)];

        let mut inst = Table::new(
            "E6: where the grafted write time goes, seconds (thesis table 26)",
            &[
                "device / file size",
                "grafted run",
                "installation",
                "net",
                "native run",
                "if every load compiled",
                "thesis grafted",
                "thesis installation",
                "thesis net",
                "thesis unprotected",
            ],
        );
        for d in self.devices() {
            for size in self.sizes() {
                let (Some(g), Some(n)) = (self.cell(d, size, Layout::Graft), self.cell(d, size, Layout::Native)) else {
                    continue;
                };
                let files = self.files_of(g) as f64;
                let compile_all = g.write_s - g.install_s + files * self.load.first_load_ns / 1e9;
                let s = THESIS_INSTALL.iter().find(|s| s.0 == size / KIB).map(|s| s.1);
                let sv = |i: usize| s.map_or("-".to_string(), |s| format!("{:.1}", s[i]));
                inst.row([
                    format!("{} / {} KB", d.label(), size / KIB),
                    format!("{:.3}", g.write_s),
                    format!("{:.4}", g.install_s),
                    format!("{:.3}", g.write_s - g.install_s),
                    format!("{:.3}", n.write_s),
                    format!("{:.3}", compile_all),
                    sv(0),
                    sv(1),
                    sv(2),
                    sv(3),
                ]);
            }
        }
        inst.note("installation: graft load and unload system calls, measured around them, summed over the files");
        inst.note(
            "if every load compiled: net time plus one compiling load per file (what the thesis paid: \
             its graft load, about 120 ms, included linking the graft each time)",
        );
        out.push(inst);

        out.push(self.throughput_table(false));
        out.push(self.per_file_table());

        let mut lay = Table::new(
            "E6: layout check (block maps after the write phase, all runs)",
            &[
                "file size / placement",
                "files",
                "with a block 12",
                "block 12 in another group",
                "contiguous",
                "first file: groups of blocks 11, 12",
            ],
        );
        for size in self.sizes() {
            for l in Layout::ALL {
                let Some(c) = self.layout_summary(size, l) else {
                    continue;
                };
                lay.row([
                    format!("{} KB / {}", size / KIB, l.label()),
                    c.files.to_string(),
                    c.long_files.to_string(),
                    c.switched.to_string(),
                    c.contiguous.to_string(),
                    c.first_groups.map_or("-".into(), |(a, b)| format!("{a}, {b}")),
                ]);
            }
        }
        lay.note(format!(
            "cylinder groups of {} blocks ({} KB); contiguous: each block follows the previous one, with \
             only the indirect block between blocks 11 and 12; a file that reaches the end of a full group \
             goes on in the next one whatever the policy (the few NoSwitch files counted as switching)",
            self.blocks_per_group,
            u64::from(self.blocks_per_group) * 4
        ));
        out.push(lay);

        let l = &self.load;
        let mut load = Table::new("E6: loading the NoSwitch graft", &["what", "time", "thesis"]);
        load.row([
            "validate and compile, fresh runtime".to_string(),
            fmt_ns(l.cold_compile_ns),
            "-".into(),
        ]);
        load.row([
            "load that compiles (first of each run)".to_string(),
            fmt_ns(l.first_load_ns),
            "about 120 ms".into(),
        ]);
        load.row([
            format!("load from the module cache ({} loads)", l.cached_loads),
            fmt_ns(l.cached_load_ns),
            "-".into(),
        ]);
        load.row([
            "load + unload per file, as the process sees it".to_string(),
            fmt_ns(l.install_per_file_ns),
            "-".into(),
        ]);
        load.note(format!(
            "module: {} bytes of Wasm, built from sdk/grafts/noswitch.c by clang",
            l.wasm_bytes
        ));
        out.push(load);

        let model_rows: Vec<&E6Cell> = self.cells.iter().filter(|c| c.read_seeks.is_some()).collect();
        if !model_rows.is_empty() {
            let mut seeks = Table::new(
                "E6: seeks the model counted in the read phase (mean per run)",
                &["device / file size", "default", "graft", "native"],
            );
            for d in self.devices().into_iter().filter(|d| d.is_model()) {
                for size in self.sizes() {
                    let s = |l: Layout| {
                        self.cell(d, size, l)
                            .and_then(|c| c.read_seeks)
                            .map_or("-".to_string(), |v| format!("{v:.0}"))
                    };
                    seeks.row([
                        format!("{} / {} KB", d.label(), size / KIB),
                        s(Layout::Default),
                        s(Layout::Graft),
                        s(Layout::Native),
                    ]);
                }
            }
            out.push(seeks);
        }
        if let Some(first) = out.first_mut() {
            for n in &self.notes {
                first.note(n.clone());
            }
        }
        out
    }

    /// Normalized throughputs as a bar chart (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let mut groups = Vec::new();
        for d in self.devices() {
            for write in [true, false] {
                for size in self.sizes() {
                    let bars: Vec<(String, f64)> = [Layout::Graft, Layout::Native]
                        .iter()
                        .filter_map(|&l| {
                            let c = self.cell(d, size, l)?;
                            Some((l.label().to_string(), if write { c.write_norm } else { c.read_norm }))
                        })
                        .collect();
                    if !bars.is_empty() {
                        groups.push((
                            format!("{} {} {}K", d.label(), if write { "W" } else { "R" }, size / KIB),
                            bars,
                        ));
                    }
                }
            }
        }
        report::bar_chart(
            path,
            "E6: NoSwitch throughput normalized to FFS placement",
            "throughput / default",
            &groups,
        )
    }
}
