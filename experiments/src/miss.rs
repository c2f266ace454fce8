//! `vino bench miss`: where the time of a cold random 4 KiB read goes, layer by layer, in one
//! run on one image file on the host's disk, every layer reading the same random blocks:
//!
//! 1. `pread` with `O_DIRECT` on the image: what the device gives;
//! 2. VINO's device (`FileDevice::read_blocks`, the same `pread`);
//! 3. VINO's device queue (io_uring where the kernel grants it): submit, then wait;
//! 4. the I/O scheduler with its dispatcher thread (the kernel's default), and with the caller
//!    dispatching;
//! 5. a page-cache miss: `pread` of a 4 KiB block of a file through a kernel process, the cache
//!    too small to hold the file.
//!
//! The queued layers and the miss run twice: the waiting thread sleeping at once (the default),
//! and watching for the completion for [`vino_blockdev::SPIN_BEFORE_SLEEP`] before it sleeps.
//! Linux's own cold miss through ext4 is E9's (`vino bench linux`).

use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use vino_blockdev::{
    AlignedBuf, BLOCK_SIZE, BackendChoice, BlockDevice, Direct, FileDevice, FileOptions, IoQueue, IoRequest,
    QueueConfig, SPIN_BEFORE_SLEEP, set_ticket_spin,
};
use vino_fs::MkfsOptions;
use vino_graft::Runtime;
use vino_iosched::{Dispatch, IoScheduler, SchedConfig};
use vino_kernel::{Credentials, KernelConfig, OpenFlags};
use vino_measure::report::{ChartOptions, Table, bar_chart_with};

#[derive(Clone, Debug)]
pub struct MissOptions {
    pub quick: bool,
    pub scratch: PathBuf,
}

/// One layer's reads, microseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Layer {
    pub layer: String,
    pub median_us: f64,
    pub p99_us: f64,
    /// Median over the raw `pread`'s median.
    pub vs_raw: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MissReport {
    pub reads: usize,
    pub file_mib: u64,
    pub direct: bool,
    pub uring: bool,
    pub layers: Vec<Layer>,
}

/// Layers measured, each on its own part of the file.
const LAYERS: usize = 10;

/// Seeded random blocks below `n`.
fn blocks(n: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..count)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        })
        .collect()
}

/// Times `read` for each block; microseconds, sorted.
fn time_each(blocks: &[u64], mut read: impl FnMut(u64) -> Result<()>) -> Result<Vec<f64>> {
    let mut t = Vec::with_capacity(blocks.len());
    for &b in blocks {
        let start = Instant::now();
        read(b)?;
        t.push(start.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    Ok(t)
}

fn pick(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub fn run(opts: &MissOptions, progress: &mut dyn FnMut(&str)) -> Result<MissReport> {
    let reads = if opts.quick { 300 } else { 3000 };
    let file_mib: u64 = if opts.quick { 64 } else { 512 };
    let work = crate::front::scratch_dir(&opts.scratch)?;
    let image = work.path().join("miss.img");
    let image_bytes = (file_mib + 64) << 20;
    progress("making the image and the file");
    crate::e6_layout::Disk::create_image(&image, image_bytes, &MkfsOptions::default())?;
    let open_dev = || -> Result<Arc<FileDevice>> {
        Ok(Arc::new(FileDevice::open_with(
            &image,
            FileOptions {
                direct: Direct::Auto,
                read_only: false,
            },
        )?))
    };
    // The file, written through the kernel; the layers below the cache read its blocks (the
    // image is sparse: a hole would be read without the disk).
    let data_blocks: Vec<u64> = {
        let kernel = vino_kernel::Kernel::boot(open_dev()?, &KernelConfig::default())?;
        let p = kernel.spawn(Credentials::root());
        let fd = p.open("/data", OpenFlags::create())?;
        let chunk = vec![0x5a_u8; 1 << 20];
        for _ in 0..file_mib {
            ensure!(p.write(fd, &chunk)? == chunk.len(), "short write");
        }
        p.fsync(fd)?;
        let ino = p.fstat(fd)?.ino;
        p.close(fd)?;
        let map = kernel.fs().block_map(ino)?;
        kernel.shutdown()?;
        map.into_iter().filter(|&b| b != 0).collect()
    };
    ensure!(!data_blocks.is_empty(), "the file has no blocks");
    let dev = open_dev()?;
    let direct = dev.direct();
    // Every layer reads blocks of its own, from its own part of the file: a block read twice
    // may come from a cache below (the host's, the hypervisor's), which would flatter whichever
    // layer came later.
    let slice = data_blocks.len() / LAYERS;
    let layer = std::cell::Cell::new(0usize);
    // The next layer's part of the file: (first file block, its device blocks).
    let next_part = || {
        let k = layer.get();
        layer.set(k + 1);
        (k * slice, &data_blocks[k * slice..(k + 1) * slice])
    };
    let picks = || {
        let (_, part) = next_part();
        blocks(part.len() as u64, reads, layer.get() as u64)
            .into_iter()
            .map(|i| part[i as usize])
            .collect::<Vec<u64>>()
    };
    let mut layers: Vec<(String, Vec<f64>)> = Vec::new();

    progress("raw pread");
    {
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&image)
            .with_context(|| format!("opening {}", image.display()))?;
        let mut buf = AlignedBuf::new(1);
        layers.push((
            "pread, O_DIRECT".into(),
            time_each(&picks(), |b| Ok(f.read_exact_at(&mut buf, b * BLOCK_SIZE as u64)?))?,
        ));
    }
    progress("device");
    {
        let mut buf = AlignedBuf::new(1);
        layers.push((
            "VINO device (FileDevice)".into(),
            time_each(&picks(), |b| Ok(dev.read_blocks(b, &mut buf)?))?,
        ));
    }
    let queue = IoQueue::with_config(
        dev.clone(),
        QueueConfig {
            backend: BackendChoice::Auto,
            ..QueueConfig::new(32)
        },
    )?;
    let uring = queue.backend() == vino_blockdev::Backend::Uring;
    let runtime = Runtime::default();
    let sched = |dispatch| {
        IoScheduler::with_config(
            dev.clone() as Arc<dyn BlockDevice>,
            &runtime,
            SchedConfig {
                dispatch,
                ..SchedConfig::new(32)
            },
        )
    };
    let (threaded, caller) = (sched(Dispatch::Thread)?, sched(Dispatch::Caller)?);
    let kernel = vino_kernel::Kernel::boot(
        dev.clone(),
        &KernelConfig {
            writeback_every: None,
            ..KernelConfig::default()
        },
    )?;
    let p = kernel.spawn(Credentials::root());
    let fd = p.open("/data", OpenFlags::read_only())?;
    p.set_read_ahead(fd, vino_cache::RaMode::Off)?;
    for (spin, label) in [
        (Duration::ZERO, "sleep at once"),
        (SPIN_BEFORE_SLEEP, "watch, then sleep"),
    ] {
        set_ticket_spin(spin);
        progress(&format!("queue ({label})"));
        layers.push((
            format!("device queue ({}; {label})", if uring { "io_uring" } else { "threads" }),
            time_each(&picks(), |b| {
                queue.submit(IoRequest::read(b, 1)).wait()?;
                Ok(())
            })?,
        ));
        progress(&format!("scheduler ({label})"));
        layers.push((
            format!("I/O scheduler, its thread dispatches ({label})"),
            time_each(&picks(), |b| {
                threaded.submit(IoRequest::read(b, 1)).wait()?;
                Ok(())
            })?,
        ));
        layers.push((
            format!("I/O scheduler, the caller dispatches ({label})"),
            time_each(&picks(), |b| {
                caller.submit(IoRequest::read(b, 1)).wait()?;
                Ok(())
            })?,
        ));
        progress(&format!("cache miss ({label})"));
        kernel.cache().drop_clean()?;
        let before = kernel.cache().process_counters(p.pid());
        let mut buf = vec![0u8; BLOCK_SIZE];
        // This layer's part of the file, read by file offset.
        let (first, part) = next_part();
        let t = time_each(&blocks(part.len() as u64, reads, 100 + layer.get() as u64), |i| {
            let b = first as u64 + i;
            ensure!(
                p.pread(fd, &mut buf, b * BLOCK_SIZE as u64)? == BLOCK_SIZE,
                "short read"
            );
            Ok(())
        })?;
        let after = kernel.cache().process_counters(p.pid());
        let misses = after.misses - before.misses;
        layers.push((
            format!("cache miss, kernel pread ({label}; {misses} of {reads} missed)"),
            t,
        ));
    }
    set_ticket_spin(Duration::ZERO);
    p.close(fd)?;
    drop(p);
    kernel.shutdown()?;
    let raw = pick(&layers[0].1, 0.5);
    Ok(MissReport {
        reads,
        file_mib,
        direct,
        uring,
        layers: layers
            .into_iter()
            .map(|(layer, t)| Layer {
                layer,
                median_us: pick(&t, 0.5),
                p99_us: pick(&t, 0.99),
                vs_raw: pick(&t, 0.5) / raw,
            })
            .collect(),
    })
}

impl MissReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            format!("A cold random 4 KiB read, layer by layer ({} reads each)", self.reads),
            &["layer", "median", "p99", "vs pread"],
        );
        for l in &self.layers {
            t.row([
                l.layer.clone(),
                format!("{:.1} µs", l.median_us),
                format!("{:.1} µs", l.p99_us),
                format!("{:.2}x", l.vs_raw),
            ]);
        }
        t.note(format!(
            "the image opened with O_DIRECT: {}; device queue on io_uring: {}",
            self.direct, self.uring
        ));
        vec![t]
    }

    pub fn plot(&self, path: &std::path::Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .layers
            .iter()
            .map(|l| (l.layer.clone(), vec![("median µs".to_string(), l.median_us)]))
            .collect();
        bar_chart_with(
            path,
            "A cold random 4 KiB read, layer by layer",
            "µs (median)",
            &groups,
            &ChartOptions {
                value_labels: true,
                log_scale: Some(false),
                ..ChartOptions::default()
            },
        )
    }
}
