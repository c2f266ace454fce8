//! `vino-crashtest`: the workload the crash test (`tests/crash.rs`) kills, and the check of the
//! image it was killed on. Not part of the `vino` command.
//!
//! `vino-crashtest workload IMAGE --log LOG [--seed N]` appends to a few files through the kernel
//! and fsyncs at random until killed, logging on the host what was fsync'd, and between the
//! appends changes names: symbolic links, FIFOs, hard links, renames over names, extended
//! attributes, fallocate, and files unlinked while open (left on the orphan list by the kill);
//! `vino-crashtest check IMAGE --log LOG` then requires fsck to find the image clean after journal
//! replay and every fsync'd byte to be there (exit status 1 and the problems on stderr if not).

#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use vino_blockdev::{BlockDevice, FileDevice};

#[derive(Parser)]
#[command(name = "vino-crashtest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The workload the crash tests kill (appends, fsyncs and logs what was fsync'd).
    Workload {
        image: PathBuf,
        #[arg(long)]
        log: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Checks an image the workload was killed on: fsck clean, fsync'd data present.
    Check {
        image: PathBuf,
        #[arg(long)]
        log: PathBuf,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Workload { image, log, seed } => crash_workload(&image, &log, seed),
        Command::Check { image, log } => crash_check(&image, &log).and_then(|wrong| {
            for w in &wrong {
                eprintln!("{}: {w}", image.display());
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                anyhow::bail!("{} problems after the crash", wrong.len())
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vino-crashtest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The byte at `offset` of crash-test file `file`: known to the checker without a copy.
fn crash_byte(file: u32, offset: u64) -> u8 {
    let x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(file).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (x >> 56) as u8
}

/// The crash-test workload: appends to a few files through the kernel, fsyncs at random, and
/// after each fsync appends `file size` to `log` on the host (synced), so a checker knows what
/// must survive. Runs until killed.
fn crash_workload(image: &Path, log: &Path, seed: u64) -> Result<()> {
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
    let mut held = Vec::new();
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
        if next() % 25 == 0 {
            namespace_change(&p, next(), &mut held)?;
        }
    }
}

/// One namespace change of the crash workload, chosen by `r`: scratch files, symbolic links,
/// FIFOs, hard links, renames over a name, extended attributes, fallocate, and files unlinked
/// while still open (`held` keeps a few open, so that a kill leaves them on the orphan list,
/// which the next mount or fsck frees).
fn namespace_change(p: &vino_kernel::Process, r: u64, held: &mut Vec<vino_kernel::Fd>) -> Result<()> {
    use vino_kernel::{At, FileType, OpenFlags};
    let name = format!("/tmp{}", r % 8);
    let other = format!("/tmp{}", (r >> 8) % 8);
    // Each may fail (the name exists or is gone): the crash is what is tested, not the calls.
    match (r >> 16) % 8 {
        0 => {
            if let Ok(t) = p.open(&name, OpenFlags::create()) {
                p.write(t, b"scratch")?;
                p.close(t)?;
            }
        }
        1 => drop(p.symlink(&other, &name)),
        2 => drop(p.mknod_at(At::Root, &name, FileType::Fifo, 0o644, 0)),
        3 => drop(p.link(&other, &name)),
        4 => drop(p.rename(&other, &name)),
        5 => drop(p.setxattr_at(
            At::Root,
            &name,
            false,
            b"user.crash",
            &r.to_le_bytes(),
            vino_fs::XattrSet::Any,
        )),
        6 => {
            if let Ok(t) = p.open(&name, OpenFlags::read_write()) {
                let _ = p.fallocate(t, r.is_multiple_of(2), 0, 1 + (r >> 24) % 100_000);
                p.close(t)?;
            }
        }
        _ => {
            if held.len() >= 4 {
                p.close(held.remove(0))?;
            }
            if let Ok(t) = p.open(&name, OpenFlags::create()) {
                p.write(t, b"held while unlinked")?;
                let _ = p.unlink(&name);
                held.push(t);
            }
        }
    }
    if r.is_multiple_of(5) {
        let _ = p.unlink(&name);
    }
    Ok(())
}

/// Appends one line to the crash workload's log and forces it out. One `write` for the whole
/// line: `writeln!` writes piece by piece, and a kill between the pieces left a torn line.
fn log_line(log: &mut std::fs::File, line: &str) -> std::io::Result<()> {
    log.write_all(format!("{line}\n").as_bytes())?;
    log.sync_data()
}

/// Checks an image after a crash against the crash workload's log: fsck must call it clean
/// after journal replay, and every fsync'd byte must be there. Returns what is wrong.
fn crash_check(image: &Path, log: &Path) -> Result<Vec<String>> {
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
    // One user of an image at a time: fsck's device goes before the kernel boots on it.
    drop(dev);
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
