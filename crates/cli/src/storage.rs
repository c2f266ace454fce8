//! `vino mkfs` and `vino fsck`, and the workload the crash tests kill.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use vino_blockdev::{BLOCK_SIZE, BlockDevice, FileDevice};
use vino_fs::{MkfsOptions, mkfs};

/// Parses a size such as `64M`, `2G`, `4096`.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .with_context(|| format!("`{text}` is not a size (e.g. 64M, 2G)"))?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => bail!("`{text}`: unknown unit `{unit}` (K, M, G)"),
    };
    Ok(n * mult)
}

/// Makes a file system on `image`, creating the image file of `size` bytes if it does not exist.
pub fn run_mkfs(image: &Path, size: Option<u64>, blocks_per_group: Option<u32>, json: bool) -> Result<()> {
    let dev: Arc<dyn BlockDevice> = if image.exists() {
        Arc::new(FileDevice::open(image)?)
    } else {
        let Some(size) = size else {
            bail!("{} does not exist: give --size to create it", image.display())
        };
        Arc::new(FileDevice::create(
            image,
            size.div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64,
        )?)
    };
    let mut opts = MkfsOptions::default();
    if let Some(b) = blocks_per_group {
        opts.blocks_per_group = b;
    }
    let report = mkfs(&*dev, &opts).with_context(|| format!("making a file system on {}", image.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&MkfsJson::from(&report))?);
    }
    Ok(())
}

#[derive(Serialize)]
struct MkfsJson {
    block_count: u64,
    groups: u32,
    blocks_per_group: u32,
    inodes: u64,
    journal_blocks: u32,
    free_blocks: u64,
}

impl From<&vino_fs::MkfsReport> for MkfsJson {
    fn from(r: &vino_fs::MkfsReport) -> Self {
        MkfsJson {
            block_count: r.block_count,
            groups: r.groups,
            blocks_per_group: r.blocks_per_group,
            inodes: r.inodes,
            journal_blocks: r.journal_blocks,
            free_blocks: r.free_blocks,
        }
    }
}

/// fsck's exit status, as e2fsck: 0 clean, 1 problems repaired, 4 problems left, 8 could not check.
pub fn run_fsck(image: &Path, repair: bool, json: bool) -> Result<i32> {
    let dev = FileDevice::open(image)?;
    let report = match vino_fs::fsck(&dev, repair) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vino: fsck {}: {e}", image.display());
            return Ok(8);
        }
    };
    let status = if report.is_clean() {
        0
    } else if report.problems.iter().all(|p| p.fixed) {
        1
    } else {
        4
    };
    if json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| serde_json::json!({"kind": format!("{:?}", p.kind), "detail": p.detail, "fixed": p.fixed}))
            .collect();
        let out = serde_json::json!({
            "clean": report.is_clean(), "status": status, "replayed": report.replayed,
            "was_mounted": report.was_mounted, "files": report.files, "directories": report.directories,
            "used_blocks": report.used_blocks, "free_blocks": report.free_blocks, "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for p in &report.problems {
            let fixed = if p.fixed { " (fixed)" } else { "" };
            eprintln!("{}: {:?}: {}{fixed}", image.display(), p.kind, p.detail);
        }
    }
    Ok(status)
}

/// The byte at `offset` of crash-test file `file`: known to the checker without a copy.
pub fn crash_byte(file: u32, offset: u64) -> u8 {
    let x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(file).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (x >> 56) as u8
}

/// The crash-test workload: appends to a few files through the kernel, fsyncs at random, and
/// after each fsync appends `file size` to `log` on the host (synced), so a checker knows what
/// must survive. Runs until killed.
pub fn crash_workload(image: &Path, log: &Path, seed: u64) -> Result<()> {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(image)?);
    let config = vino_kernel::KernelConfig {
        cache_frames: 128,
        ..Default::default()
    };
    let kernel = vino_kernel::Kernel::boot(dev, &config)?;
    let p = kernel.spawn(vino_kernel::Credentials::root());
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    const FILES: u32 = 4;
    let mut fds = Vec::new();
    for f in 0..FILES {
        let fd = p.open(
            &format!("/crash{f}"),
            vino_kernel::OpenFlags {
                create: true,
                read: true,
                write: true,
                mode: 0o644,
                ..Default::default()
            },
        )?;
        fds.push((fd, p.fstat(fd)?.size));
    }
    loop {
        let f = (next() % u64::from(FILES)) as usize;
        if fds[f].1 > 4 << 20 {
            // Keep the image from filling: say so first, so the checker expects nothing of f.
            log_line(&mut log, &format!("{f} reset"))?;
            p.ftruncate(fds[f].0, 0)?;
            fds[f].1 = 0;
        }
        let (fd, size) = fds[f];
        let len = 1 + next() % 20_000;
        let data: Vec<u8> = (size..size + len).map(|o| crash_byte(f as u32, o)).collect();
        p.pwrite(fd, &data, size)?;
        fds[f].1 = size + len;
        if next() % 3 == 0 {
            p.fsync(fd)?;
            log_line(&mut log, &format!("{f} {}", size + len))?;
        }
        if next() % 50 == 0 {
            // Namespace changes in the middle, too.
            let name = format!("/tmp{}", next() % 8);
            if let Ok(t) = p.open(&name, vino_kernel::OpenFlags::create()) {
                p.write(t, b"scratch")?;
                p.close(t)?;
                if next() % 2 == 0 {
                    let _ = p.unlink(&name);
                }
            }
        }
    }
}

/// Appends one line to the crash workload's log and forces it out. One `write` for the whole
/// line: `writeln!` writes piece by piece, and a kill between the pieces left a torn line.
fn log_line(log: &mut std::fs::File, line: &str) -> std::io::Result<()> {
    log.write_all(format!("{line}\n").as_bytes())?;
    log.sync_data()
}

/// Checks an image after a crash against the crash workload's log: fsck must call it clean
/// after journal replay, and every fsync'd byte must be there. Returns what is wrong.
pub fn crash_check(image: &Path, log: &Path) -> Result<Vec<String>> {
    let mut wrong = Vec::new();
    let dev = FileDevice::open(image)?;
    let report = vino_fs::fsck(&dev, true)?;
    wrong.extend(
        report
            .problems
            .iter()
            .map(|p| format!("fsck: {:?}: {}", p.kind, p.detail)),
    );
    let second = vino_fs::fsck(&dev, false)?;
    if !second.is_clean() {
        wrong.push(format!(
            "fsck still finds {} problems after replay",
            second.problems.len()
        ));
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut durable = [0u64; 4];
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if let (Some(f), Some(size)) = (it.next(), it.next()) {
            match (f.parse::<usize>(), size) {
                (Ok(f), "reset") if f < durable.len() => durable[f] = 0,
                (Ok(f), size) if f < durable.len() => {
                    if let Ok(size) = size.parse::<u64>() {
                        durable[f] = durable[f].max(size);
                    }
                }
                _ => wrong.push(format!("unreadable log line `{line}`")),
            }
        }
    }
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(image)?);
    let kernel = vino_kernel::Kernel::boot(
        dev,
        &vino_kernel::KernelConfig {
            writeback_every: None,
            ..Default::default()
        },
    )?;
    let p = kernel.spawn(vino_kernel::Credentials::root());
    for (f, &size) in durable.iter().enumerate() {
        if size == 0 {
            continue;
        }
        let fd = match p.open(&format!("/crash{f}"), vino_kernel::OpenFlags::read_only()) {
            Ok(fd) => fd,
            Err(e) => {
                wrong.push(format!("/crash{f}: {e} (fsync'd {size} bytes)"));
                continue;
            }
        };
        let mut buf = vec![0u8; size as usize];
        let n = p.pread(fd, &mut buf, 0)?;
        if (n as u64) < size {
            wrong.push(format!("/crash{f}: {n} bytes, {size} were fsync'd"));
        }
        if let Some(o) = (0..n).find(|&o| buf[o] != crash_byte(f as u32, o as u64)) {
            wrong.push(format!("/crash{f}: byte {o} differs"));
        }
    }
    kernel.shutdown()?;
    Ok(wrong)
}
