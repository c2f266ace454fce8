//! Whole files through the kernel with each codec bound and unbound, on an image file opened
//! with `O_DIRECT` (as E6 does), beside the same writes straight to the device and, if the
//! machine allows, btrfs with compression ([`super::btrfs`]).
//!
//! A round runs every case once, in an order that turns with the round, so a busy moment of
//! the shared machine falls on all of them; a case's ratio to its system's plain case is the
//! median over the rounds of the two measured in the same round.

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use vino_blockdev::{BlockDevice, FileDevice};
use vino_fs::{FileSystem, MkfsOptions, MountOptions};
use vino_kernel::{Credentials, OpenFlags, Process};

use super::btrfs;
use crate::e6_layout::{DeviceDelta, DeviceKind, Disk, E6_MODEL_SCALE, FineTimerSlack, image_path, median_of};
use vino_measure::report::{ChartOptions, Table, bar_chart_with};

/// Bytes per `write` and `read` call, as a copying program would use.
const IO_BYTES: usize = 1 << 20;
const MIB: u64 = 1 << 20;

/// The files written: each corpus whole, by name.
pub type Files<'a> = [(&'a str, &'a [u8])];

/// What one case did in one round.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds to write every file and fsync each.
    pub write_s: f64,
    /// Seconds to read every file back with nothing cached.
    pub read_s: f64,
    /// Bytes the file system holds for each file (VINO: `st_blocks` × 4 KiB; btrfs: its data
    /// space's growth; the device: the bytes written).
    pub stored: Vec<u64>,
    /// VINO: the exact encoded bytes of each file (the sum of its chunks' `coded_len`).
    pub coded: Option<Vec<u64>>,
    /// VINO: the device's requests over the write (with the fsyncs) and over the read.
    pub device: Option<[DeviceDelta; 2]>,
}

/// One way of storing the files.
#[derive(Clone)]
pub enum Case {
    /// Straight to the image file, `O_DIRECT`: the disk's own pace.
    Device,
    /// VINO, the files in a directory bound to `wasm` (none: unbound), keyed if `key`; on the
    /// image itself, or on E6's model of a 1996 disk over it (`model`: where the disk sets
    /// the pace).
    Vino {
        codec: &'static str,
        wasm: Option<Arc<Vec<u8>>>,
        key: Option<[u8; 32]>,
        model: bool,
    },
    /// btrfs on a loop device over an image file, mounted with `compress=<how>` (none: plain).
    Btrfs { compress: Option<&'static str> },
}

impl Case {
    pub fn system(&self) -> &'static str {
        match self {
            Case::Device => "device",
            Case::Vino { model: false, .. } => "VINO",
            Case::Vino { model: true, .. } => "VINO, disk model",
            Case::Btrfs { .. } => "btrfs",
        }
    }

    pub fn codec(&self) -> String {
        match self {
            Case::Device => "–".into(),
            Case::Vino { codec, .. } => codec.to_string(),
            Case::Btrfs { compress } => compress.map_or("none".into(), |c| format!("compress={c}")),
        }
    }

    /// The case this one's ratio is taken against: its system with no codec.
    fn is_plain(&self) -> bool {
        matches!(self, Case::Vino { wasm: None, .. } | Case::Btrfs { compress: None })
    }

    fn run(&self, scratch: &Path, files: &Files<'_>, exact: bool) -> Result<Sample> {
        match self {
            Case::Device => device_once(scratch, files),
            Case::Vino { wasm, key, model, .. } => {
                let device = if *model {
                    DeviceKind::Model { scale: E6_MODEL_SCALE }
                } else {
                    DeviceKind::Plain
                };
                let wasm = wasm.as_deref().map(|w| w.as_slice());
                vino_once(scratch, device, wasm, key.as_ref(), files, exact)
            }
            Case::Btrfs { compress } => btrfs::once(scratch, *compress, files),
        }
    }
}

/// One case's rows: medians and spreads over the rounds.
#[derive(Debug, Serialize)]
pub struct KernelRow {
    /// `device`, `VINO` or `btrfs`.
    pub system: String,
    /// The codec bound, the compression mounted, or none.
    pub codec: String,
    /// Write and fsync of every file: median MB/s over the rounds, and the slowest and fastest.
    pub write_mb_s: f64,
    pub write_min_mb_s: f64,
    pub write_max_mb_s: f64,
    /// Read back cold: median MB/s, slowest, fastest.
    pub read_mb_s: f64,
    pub read_min_mb_s: f64,
    pub read_max_mb_s: f64,
    /// This case's MB/s over its system's plain case's in the same round (median over the
    /// rounds); none for the device.
    pub write_vs_plain: Option<f64>,
    pub read_vs_plain: Option<f64>,
    /// Bytes stored for all the files (see [`Sample::stored`]), from the first round.
    pub stored_bytes: u64,
    pub stored_ratio: f64,
    /// VINO: the device's requests over the write and over the read, in the first round.
    pub write_device: Option<DeviceDelta>,
    pub read_device: Option<DeviceDelta>,
}

/// The kernel-path part of the report.
#[derive(Debug, Serialize, Default)]
pub struct KernelPath {
    pub rounds: usize,
    /// Bytes written (and read) per case and round: every corpus, one file each.
    pub bytes: u64,
    /// Whether the image files were opened with `O_DIRECT` (the host refused it otherwise).
    pub direct: bool,
    /// VINO's page cache, frames of 4 KiB.
    pub cache_frames: usize,
    pub rows: Vec<KernelRow>,
    /// Compressed sizes: VINO's LZ4 codec against the `lz4` command and btrfs.
    pub compression: Vec<CompressionRow>,
    /// What could not be measured, and why.
    pub notes: Vec<String>,
    pub load_before: String,
    pub load_after: String,
}

/// One compressed size of one corpus.
#[derive(Debug, Serialize)]
pub struct CompressionRow {
    pub corpus: String,
    pub what: String,
    pub bytes: u64,
    /// Over the plain bytes.
    pub ratio: f64,
    /// Over `lz4 -1 -B4` (64 KiB independent blocks, VINO's chunk).
    pub vs_lz4_64k: Option<f64>,
}

/// The page-cache frames a run gets: room for every file twice, so writes wait on the disk
/// only at fsync.
pub fn cache_frames(files: &Files<'_>) -> usize {
    let bytes: usize = files.iter().map(|(_, d)| d.len()).sum();
    2 * bytes.div_ceil(4096) + 1024
}

/// Every case, `rounds` times, each round in an order turned by one.
pub fn measure(
    cases: &[Case],
    scratch: &Path,
    files: &Files<'_>,
    rounds: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<KernelRow>, Vec<Sample>)> {
    // The disk model sleeps: with Linux's default timer slack each sleep would overshoot.
    let _slack = FineTimerSlack::new();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for k in 0..cases.len() {
            let i = (k + round) % cases.len();
            let case = &cases[i];
            progress(&format!(
                "round {}/{rounds}: {} {}",
                round + 1,
                case.system(),
                case.codec()
            ));
            let s = case
                .run(scratch, files, round == 0)
                .with_context(|| format!("{} {}", case.system(), case.codec()))?;
            samples[i].push(s);
        }
    }
    let bytes: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    let mb = bytes as f64 / 1e6;
    let rows = cases
        .iter()
        .zip(&samples)
        .map(|(case, s)| {
            let plain = cases
                .iter()
                .position(|c| c.is_plain() && c.system() == case.system())
                .map(|p| &samples[p]);
            let ratio = |f: fn(&Sample) -> f64| plain.map(|p| median_of(s.iter().zip(p).map(|(a, b)| f(b) / f(a))));
            let speeds = |f: fn(&Sample) -> f64| {
                let v: Vec<f64> = s.iter().map(|x| mb / f(x)).collect();
                let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                (median_of(v), lo, hi)
            };
            let (w, w_lo, w_hi) = speeds(|x| x.write_s);
            let (r, r_lo, r_hi) = speeds(|x| x.read_s);
            let stored: u64 = s[0].stored.iter().sum();
            KernelRow {
                system: case.system().into(),
                codec: case.codec(),
                write_mb_s: w,
                write_min_mb_s: w_lo,
                write_max_mb_s: w_hi,
                read_mb_s: r,
                read_min_mb_s: r_lo,
                read_max_mb_s: r_hi,
                write_vs_plain: ratio(|x| x.write_s),
                read_vs_plain: ratio(|x| x.read_s),
                stored_bytes: stored,
                stored_ratio: stored as f64 / bytes as f64,
                write_device: s[0].device.map(|d| d[0]),
                read_device: s[0].device.map(|d| d[1]),
            }
        })
        .collect();
    let first = samples.into_iter().map(|mut s| s.swap_remove(0)).collect();
    Ok((rows, first))
}

/// A fresh sparse image big enough for the files three times over.
fn image_for(scratch: &Path, what: &str, files: &Files<'_>) -> (PathBuf, u64) {
    let bytes: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    let image_bytes = (3 * bytes).div_ceil(MIB).max(64) * MIB;
    (image_path(scratch, what), image_bytes)
}

/// The files' bytes written straight to a fresh image (`O_DIRECT`) and flushed, then read back.
fn device_once(scratch: &Path, files: &Files<'_>) -> Result<Sample> {
    let (path, image_bytes) = image_for(scratch, "streams-dev", files);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    drop(FileDevice::create(&path, image_bytes)?);
    let result = (|| {
        let disk = Disk::open(&path, DeviceKind::Plain)?;
        let dev = &disk.dev;
        let blocks = |d: &[u8]| d.len().div_ceil(IO_BYTES) * IO_BYTES;
        let mut buf = vec![0u8; IO_BYTES];
        let started = Instant::now();
        let mut at = 0u64;
        for (_, data) in files {
            for piece in data.chunks(IO_BYTES) {
                buf[..piece.len()].copy_from_slice(piece);
                dev.write_blocks(at, &buf)?;
                at += (IO_BYTES / 4096) as u64;
            }
        }
        dev.flush()?;
        let write_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut at = 0u64;
        for (_, data) in files {
            for _ in 0..blocks(data) / IO_BYTES {
                dev.read_blocks(at, &mut buf)?;
                at += (IO_BYTES / 4096) as u64;
            }
        }
        let read_s = started.elapsed().as_secs_f64();
        Ok(Sample {
            write_s,
            read_s,
            stored: files.iter().map(|(_, d)| d.len() as u64).collect(),
            coded: None,
            device: None,
        })
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// VINO on a fresh image: the files written into `/s` (bound to `wasm` if given) by a process,
/// each fsynced; the cache dropped; the files read back and checked.
fn vino_once(
    scratch: &Path,
    device: DeviceKind,
    wasm: Option<&[u8]>,
    key: Option<&[u8; 32]>,
    files: &Files<'_>,
    exact: bool,
) -> Result<Sample> {
    let (path, image_bytes) = image_for(scratch, "streams", files);
    Disk::create_image(&path, image_bytes, &MkfsOptions::default())?;
    let result = vino_on_image(&path, device, wasm, key, files, exact);
    let _ = std::fs::remove_file(&path);
    result
}

fn vino_on_image(
    path: &Path,
    device: DeviceKind,
    wasm: Option<&[u8]>,
    key: Option<&[u8; 32]>,
    files: &Files<'_>,
    exact: bool,
) -> Result<Sample> {
    let disk = Disk::open(path, device)?;
    let kernel = disk.boot(cache_frames(files))?;
    let p = kernel.spawn(Credentials::root());
    p.mkdir("/s", 0o755)?;
    if let Some(wasm) = wasm {
        p.stream_bind("/s", Some(wasm))?;
    }
    if let Some(key) = key {
        set_key(&p, "/s", key)?;
    }
    kernel.sync()?;

    let dev0 = disk.stats();
    let started = Instant::now();
    for (name, data) in files {
        let fd = p.open(&format!("/s/{name}"), OpenFlags::create())?;
        for piece in data.chunks(IO_BYTES) {
            let n = p.write(fd, piece)?;
            ensure!(n == piece.len(), "short write: {n} of {} bytes", piece.len());
        }
        p.fsync(fd)?;
        p.close(fd)?;
    }
    let write_s = started.elapsed().as_secs_f64();
    let dev1 = disk.stats();
    let mut stored = Vec::new();
    for (name, _) in files {
        stored.push(p.stat(&format!("/s/{name}"))?.blocks * 4096);
    }

    kernel.drop_clean_pages()?;
    let dev2 = disk.stats();
    let mut back: Vec<Vec<u8>> = files.iter().map(|(_, d)| vec![0u8; d.len()]).collect();
    let started = Instant::now();
    for ((name, _), into) in files.iter().zip(&mut back) {
        let fd = p.open(&format!("/s/{name}"), OpenFlags::read_only())?;
        let mut at = 0;
        while at < into.len() {
            let end = (at + IO_BYTES).min(into.len());
            let n = p.read(fd, &mut into[at..end])?;
            ensure!(n > 0, "{name} ends at {at} of {} bytes", into.len());
            at += n;
        }
        p.close(fd)?;
    }
    let read_s = started.elapsed().as_secs_f64();
    let dev3 = disk.stats();
    for ((name, data), got) in files.iter().zip(&back) {
        ensure!(got == data, "{name} reads back other bytes");
    }
    kernel.shutdown()?;
    drop(p);
    drop(kernel);

    let coded = if exact && wasm.is_some() {
        Some(coded_bytes(disk.dev.clone(), files)?)
    } else {
        None
    };
    Ok(Sample {
        write_s,
        read_s,
        stored,
        coded,
        device: Some([DeviceDelta::between(&dev0, &dev1), DeviceDelta::between(&dev2, &dev3)]),
    })
}

/// Gives the codec of `path` the bench key, a 64-bit word at a time.
fn set_key(p: &Process, path: &str, key: &[u8; 32]) -> Result<()> {
    for (word, bytes) in key.chunks(8).enumerate() {
        let value = i64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        ensure!(
            p.stream_control(path, "set_key", &[word as i64, value])? == 0,
            "set_key"
        );
    }
    Ok(())
}

/// Each file's encoded bytes as the file system stores them: its chunks' `coded_len`, read
/// from the image after the kernel's shutdown.
fn coded_bytes(dev: Arc<dyn BlockDevice>, files: &Files<'_>) -> Result<Vec<u64>> {
    let runtime = vino_graft::Runtime::new(vino_graft::RuntimeConfig::default());
    let fs = FileSystem::mount(dev, &runtime, &MountOptions::default())?;
    let mut out = Vec::new();
    for (name, data) in files {
        let ino = fs.resolve(format!("/s/{name}"))?;
        let chunks = data.len().div_ceil(vino_stream::CHUNK) as u64;
        let mut sum = 0u64;
        for c in 0..chunks {
            sum += u64::from(fs.read_chunk(ino, c)?.entry.coded_len);
        }
        out.push(sum);
    }
    fs.unmount()?;
    Ok(out)
}

impl KernelPath {
    /// Each case's write+fsync and cold read against its system's plain case (1 is as fast).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .filter_map(|r| {
                let (w, rd) = (r.write_vs_plain?, r.read_vs_plain?);
                let name = format!("{} {}", r.system, r.codec.trim_end_matches("_stream"));
                Some((
                    name,
                    vec![("write+fsync".to_string(), w), ("cold read".to_string(), rd)],
                ))
            })
            .collect();
        bar_chart_with(
            path,
            "Whole files through the kernel: each case against its system's plain case",
            "MB/s over plain's (median of the rounds)",
            &groups,
            &ChartOptions {
                reference: Some(1.0),
                value_labels: true,
                log_scale: Some(false),
                size: Some((1200, 560)),
            },
        )
    }

    pub fn tables(&self) -> Vec<Table> {
        if self.rows.is_empty() {
            return Vec::new();
        }
        let mut t = Table::new(
            format!(
                "Whole files through the kernel: write+fsync and cold read, MB/s median (min-max) of {} rounds",
                self.rounds
            ),
            &[
                "system",
                "codec",
                "write MB/s",
                "write / plain",
                "read MB/s",
                "read / plain",
                "stored",
                "writes",
                "reads",
            ],
        );
        let ratio = |r: Option<f64>| r.map_or("–".into(), |r| format!("{r:.2}"));
        for r in &self.rows {
            t.row([
                r.system.clone(),
                r.codec.clone(),
                format!("{:.0} ({:.0}-{:.0})", r.write_mb_s, r.write_min_mb_s, r.write_max_mb_s),
                ratio(r.write_vs_plain),
                format!("{:.0} ({:.0}-{:.0})", r.read_mb_s, r.read_min_mb_s, r.read_max_mb_s),
                ratio(r.read_vs_plain),
                format!("{:.3}", r.stored_ratio),
                r.write_device.map_or("–".into(), |d| d.writes.to_string()),
                r.read_device.map_or("–".into(), |d| d.reads.to_string()),
            ]);
        }
        t.note("writes, reads: VINO's device requests over the write+fsync and over the cold read (first round)");
        t.note(format!(
            "{} bytes per case and round (every corpus, one file each); image files {}; VINO's cache {} frames",
            self.bytes,
            if self.direct {
                "opened with O_DIRECT"
            } else {
                "buffered (the host refused O_DIRECT)"
            },
            self.cache_frames
        ));
        t.note(format!("load before {}, after {}", self.load_before, self.load_after));
        for n in &self.notes {
            t.note(n.clone());
        }
        let mut c = Table::new("Compressed sizes", &["corpus", "what", "bytes", "/ plain", "/ lz4 -B4"]);
        for r in &self.compression {
            c.row([
                r.corpus.clone(),
                r.what.clone(),
                r.bytes.to_string(),
                format!("{:.3}", r.ratio),
                ratio(r.vs_lz4_64k),
            ]);
        }
        vec![t, c]
    }
}
