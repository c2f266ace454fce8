//! The same files on btrfs, plain and with `compress=lzo` or `compress=zstd:1`: a fresh image
//! file, a loop device over it with direct I/O (the host's page cache kept out, as VINO's
//! `O_DIRECT` image does), mounted in the scratch directory. Needs root, `mkfs.btrfs` and a
//! kernel with btrfs ([`unavailable`] says which is missing).
//!
//! Cold reads: the file system is unmounted and mounted again, which drops its pages (and only
//! its own, not the shared machine's other caches as `drop_caches` would).
//! Stored bytes: the growth of the data space (`btrfs filesystem df`) over each file, after a
//! `syncfs`, outside the timed part.

use anyhow::{Context, Result, bail, ensure};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::kernel::{Files, Sample};
use crate::e6_layout::image_path;

const MIB: u64 = 1 << 20;

/// Why btrfs cannot be measured here, if it cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (a loop device and a mount need it)".into());
    }
    let kernel_has =
        std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.lines().any(|l| l.ends_with("btrfs")));
    if !kernel_has {
        return Some("the kernel has no btrfs".into());
    }
    if Command::new("mkfs.btrfs").arg("--version").output().is_err() {
        return Some("no mkfs.btrfs (btrfs-progs)".into());
    }
    None
}

/// A mounted btrfs on a loop device; unmounted, detached and removed when dropped, whatever
/// happened.
struct Mounted {
    image: PathBuf,
    dir: PathBuf,
    loop_dev: Option<String>,
    mounted: bool,
    options: String,
}

impl Mounted {
    fn make(scratch: &Path, compress: Option<&str>, bytes: u64) -> Result<Mounted> {
        let image = image_path(scratch, "streams-btrfs");
        let mut m = Mounted {
            dir: image.with_extension("mnt"),
            image,
            loop_dev: None,
            mounted: false,
            options: compress.map_or("noatime".into(), |c| format!("noatime,compress={c}")),
        };
        std::fs::create_dir_all(&m.dir)?;
        std::fs::File::create(&m.image)?.set_len(bytes)?;
        run(Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&m.image))?;
        let out = run(Command::new("losetup")
            .args(["-f", "--show", "--direct-io=on"])
            .arg(&m.image))?;
        m.loop_dev = Some(out.trim().to_string());
        m.mount()?;
        Ok(m)
    }

    fn mount(&mut self) -> Result<()> {
        let dev = self.loop_dev.as_deref().context("no loop device")?;
        run(Command::new("mount")
            .args(["-t", "btrfs", "-o", &self.options, dev])
            .arg(&self.dir))?;
        self.mounted = true;
        Ok(())
    }

    fn unmount(&mut self) -> Result<()> {
        if self.mounted {
            run(Command::new("umount").arg(&self.dir))?;
            self.mounted = false;
        }
        Ok(())
    }

    /// Bytes of the data space in use (`btrfs filesystem df`), after a syncfs.
    fn data_used(&self) -> Result<u64> {
        let dir = std::fs::File::open(&self.dir)?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&dir);
        // SAFETY: syncfs on a descriptor this function holds open.
        let synced = unsafe { libc::syncfs(fd) };
        ensure!(synced == 0, "syncfs: {}", std::io::Error::last_os_error());
        let out = run(Command::new("btrfs").args(["filesystem", "df", "-b"]).arg(&self.dir))?;
        let line = out
            .lines()
            .find(|l| l.starts_with("Data"))
            .with_context(|| format!("no Data line in: {out}"))?;
        let used = line.split("used=").nth(1).context("no used=")?;
        Ok(used.trim().parse()?)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.unmount();
        if let Some(dev) = self.loop_dev.take() {
            let _ = Command::new("losetup").args(["-d", &dev]).status();
        }
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Runs a command, its standard output on success, its standard error in the error.
fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One round: write and fsync each file (timed), measure its stored bytes (not timed), remount,
/// read every file back (timed) and check it.
pub fn once(scratch: &Path, compress: Option<&str>, files: &Files<'_>) -> Result<Sample> {
    let bytes: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    // btrfs wants at least about 114 MiB; four times the data leaves its metadata room.
    let mut m = Mounted::make(scratch, compress, (4 * bytes).div_ceil(MIB).max(256) * MIB)?;
    let mut write_s = 0.0;
    let mut stored = Vec::new();
    for (name, data) in files {
        let before = m.data_used()?;
        let started = Instant::now();
        let mut f = std::fs::File::create(m.dir.join(name))?;
        for piece in data.chunks(1 << 20) {
            f.write_all(piece)?;
        }
        f.sync_all()?;
        drop(f);
        write_s += started.elapsed().as_secs_f64();
        stored.push(m.data_used()? - before);
    }
    m.unmount()?;
    m.mount()?;
    let mut back: Vec<Vec<u8>> = files.iter().map(|(_, d)| vec![0u8; d.len()]).collect();
    let started = Instant::now();
    for ((name, _), into) in files.iter().zip(&mut back) {
        let mut f = std::fs::File::open(m.dir.join(name))?;
        for piece in into.chunks_mut(1 << 20) {
            f.read_exact(piece)?;
        }
    }
    let read_s = started.elapsed().as_secs_f64();
    for ((name, data), got) in files.iter().zip(&back) {
        ensure!(got == data, "btrfs: {name} reads back other bytes");
    }
    Ok(Sample {
        write_s,
        read_s,
        stored,
        coded: None,
        device: None,
    })
}
