//! `vino bench miss`: where the time of a cold random 4 KiB read goes, layer by layer, in one
//! run on one image file on the host's disk, every layer reading the same random blocks:
//!
//! 1. `pread` with `O_DIRECT` on the image: what the device gives;
//! 2. VINO's device (`FileDevice::read_blocks`, the same `pread`);
//! 3. VINO's device queue (io_uring where the kernel grants it): submit, then wait;
//! 4. the I/O scheduler with its dispatcher thread, and with the caller dispatching (the
//!    kernel's default), the request marked as one its thread waits for at once (as the cache
//!    marks a demand read), so that the scheduler may serve it on that thread;
//! 5. a page-cache miss: `pread` of a 4 KiB block of a file through a kernel process, the cache
//!    too small to hold the file.
//!
//! The queued layers and the miss run twice: the waiting thread sleeping at once (the default),
//! and watching for the completion for [`vino_blockdev::SPIN_BEFORE_SLEEP`] before it sleeps.
//! The layers take turns, one read each per round, so that a shared machine's slow moments fall
//! on all of them alike.
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

/// One layer of the measurement: its name, whether its waiting thread watches before it sleeps,
/// the blocks it reads (each read is timed), and how it reads one.
struct Reader<'a> {
    name: String,
    spin: Duration,
    blocks: Vec<u64>,
    read: Box<dyn FnMut(u64) -> Result<()> + 'a>,
    /// Microseconds per read, in the order read.
    times: Vec<f64>,
}

impl<'a> Reader<'a> {
    fn new(
        name: impl Into<String>,
        spin: Duration,
        blocks: Vec<u64>,
        read: impl FnMut(u64) -> Result<()> + 'a,
    ) -> Self {
        Reader {
            name: name.into(),
            spin,
            times: Vec::with_capacity(blocks.len()),
            blocks,
            read: Box::new(read),
        }
    }
}

/// Reads with every layer in turn, one read each per round, the order turning every round: a
/// slow moment of a shared machine then falls on every layer alike rather than on whichever ran
/// then, so the layers' ratios hold even when the absolute times drift.
fn interleave(readers: &mut [Reader<'_>], rounds: usize, progress: &mut dyn FnMut(&str)) -> Result<()> {
    let n = readers.len();
    for round in 0..rounds {
        if round % (rounds / 10).max(1) == 0 {
            progress(&format!("round {round} of {rounds}"));
        }
        for k in 0..n {
            let r = &mut readers[(round + k) % n];
            set_ticket_spin(r.spin);
            let block = r.blocks[round];
            let start = Instant::now();
            (r.read)(block).with_context(|| format!("{}: reading block {block}", r.name))?;
            r.times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    set_ticket_spin(Duration::ZERO);
    Ok(())
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
        let map = kernel.block_map(ino)?;
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
    let part = |k: usize| &data_blocks[k * slice..(k + 1) * slice];
    // Layer k's random picks: device blocks for the layers below the cache, file blocks (their
    // index in the file) for the cache's.
    let file_picks = |k: usize| -> Vec<u64> {
        blocks(slice as u64, reads, k as u64)
            .into_iter()
            .map(|i| (k * slice) as u64 + i)
            .collect()
    };
    let device_picks = |k: usize| -> Vec<u64> {
        blocks(slice as u64, reads, k as u64)
            .into_iter()
            .map(|i| part(k)[i as usize])
            .collect()
    };

    let raw = fs::OpenOptions::new()
        .read(true)
        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
        .open(&image)
        .with_context(|| format!("opening {}", image.display()))?;
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
    kernel.drop_clean_pages()?;
    // One kernel process per cache layer, so each one's misses are counted apart.
    let procs = [kernel.spawn(Credentials::root()), kernel.spawn(Credentials::root())];
    let mut fds = Vec::new();
    for p in &procs {
        let fd = p.open("/data", OpenFlags::read_only())?;
        p.set_read_ahead(fd, vino_cache::RaMode::Off)?;
        fds.push(fd);
    }
    let before: Vec<_> = procs.iter().map(|p| p.cache_counters()).collect();

    let queue_name = if uring { "io_uring" } else { "threads" };
    let mut raw_buf = AlignedBuf::new(1);
    let mut dev_buf = AlignedBuf::new(1);
    let mut readers = vec![
        Reader::new("pread, O_DIRECT", Duration::ZERO, device_picks(0), |b| {
            Ok(raw.read_exact_at(&mut raw_buf, b * BLOCK_SIZE as u64)?)
        }),
        Reader::new("VINO device (FileDevice)", Duration::ZERO, device_picks(1), |b| {
            Ok(dev.read_blocks(b, &mut dev_buf)?)
        }),
    ];
    let mut k = 2;
    for (i, (spin, label)) in [
        (Duration::ZERO, "sleep at once"),
        (SPIN_BEFORE_SLEEP, "watch, then sleep"),
    ]
    .into_iter()
    .enumerate()
    {
        readers.push(Reader::new(
            format!("device queue ({queue_name}; {label})"),
            spin,
            device_picks(k),
            |b| {
                queue.submit(IoRequest::read(b, 1)).wait()?;
                Ok(())
            },
        ));
        readers.push(Reader::new(
            format!("I/O scheduler, its thread dispatches ({label})"),
            spin,
            device_picks(k + 1),
            |b| {
                threaded.submit(IoRequest::read(b, 1)).wait()?;
                Ok(())
            },
        ));
        readers.push(Reader::new(
            format!("I/O scheduler, the caller dispatches ({label})"),
            spin,
            device_picks(k + 2),
            // Marked as the cache marks a demand read: the thread waits for it at once, so the
            // scheduler may serve it on that thread.
            |b| {
                caller.submit(IoRequest::read(b, 1).awaited()).wait()?;
                Ok(())
            },
        ));
        let (p, fd) = (&procs[i], fds[i]);
        let mut buf = vec![0u8; BLOCK_SIZE];
        readers.push(Reader::new(
            format!("cache miss, kernel pread ({label})"),
            spin,
            file_picks(k + 3),
            move |b| {
                ensure!(
                    p.pread(fd, &mut buf, b * BLOCK_SIZE as u64)? == BLOCK_SIZE,
                    "short read"
                );
                Ok(())
            },
        ));
        k += 4;
    }
    assert_eq!(k, LAYERS, "every layer has its own part of the file");
    progress("reading, every layer in turn");
    interleave(&mut readers, reads, progress)?;
    let mut layers: Vec<(String, Vec<f64>)> = readers.into_iter().map(|r| (r.name, r.times)).collect();
    // The cache layers' names say how many of their reads missed (a block picked twice hits).
    let mut cache_layers = layers.iter_mut().filter(|(name, _)| name.starts_with("cache miss"));
    for ((p, before), (name, _)) in procs.iter().zip(&before).zip(&mut cache_layers) {
        let misses = p.cache_counters().misses - before.misses;
        name.insert_str(name.len() - 1, &format!("; {misses} of {reads} missed"));
    }
    for (p, fd) in procs.iter().zip(fds) {
        p.close(fd)?;
    }
    drop(procs);
    kernel.shutdown()?;
    for (_, t) in &mut layers {
        t.sort_by(f64::total_cmp);
    }
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
