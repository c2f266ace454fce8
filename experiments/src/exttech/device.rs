//! Device costs for the break-even points, measured on this machine: what a
//! page fault served from the device costs (a random 4 KB read), what
//! reading 1 MB costs, and what a random 4 KB write and a 64 KB segment
//! write cost.  I/O uses O_DIRECT so the page cache is bypassed; where the
//! file system refuses O_DIRECT the measurement falls back to buffered I/O
//! with the cache dropped before every read, and says so.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::workloads::xorshift32;
use vino_measure::{Budget, Stats, try_sample};

const PAGE: usize = 4096;
const MB: usize = 1 << 20;
const SEGMENT: usize = 64 << 10;

/// Measured device costs (per operation).
#[derive(Clone, Debug, Serialize)]
pub struct DeviceCosts {
    pub path: String,
    /// File system of the scratch directory.
    pub filesystem: String,
    pub file_bytes: u64,
    /// The scratch file was left by an earlier run and reused.
    pub file_reused: bool,
    /// O_DIRECT worked; if false the numbers come from the fallback.
    pub direct_io: bool,
    pub notes: Vec<String>,
    /// A random 4 KB read: the page-fault cost used for the hot list.
    pub read_4k_random: Stats,
    /// A 1 MB read at a random 1 MB-aligned offset.
    pub read_1m: Stats,
    /// A random 4 KB write.
    pub write_4k_random: Stats,
    /// A 64 KB write at a random segment-aligned offset.
    pub write_64k_segment: Stats,
    /// A page fault on a memory-mapped page of the file, read-around
    /// disabled (MADV_RANDOM): the thesis' "page fault time" as Linux has it.
    pub fault_mmap_4k: Option<Stats>,
}

struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(len, PAGE).expect("layout");
        // SAFETY: non-zero size, checked for null.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        AlignedBuf { ptr, len }
    }
    fn slice(&self, len: usize) -> &[u8] {
        // SAFETY: ptr is valid for self.len bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, len.min(self.len)) }
    }
    fn slice_mut(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len.min(self.len)) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, PAGE).expect("layout")) };
    }
}

fn filesystem_name(dir: &Path) -> String {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: statfs is plain data, for which all zeros is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct that live through the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return "unknown".into();
    }
    let magic = s.f_type as u64;
    let name = match magic {
        0xEF53 => "ext4/ext3",
        0x0102_1994 => "tmpfs",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x794C_7630 => "overlayfs",
        0x6969 => "nfs",
        0xF2F5_2010 => "f2fs",
        0x2FC1_2FC1 => "zfs",
        0x6573_5546 => "fuse",
        0x0000_9fa0 => "proc",
        _ => "",
    };
    if name.is_empty() {
        format!("unknown (magic {magic:#x})")
    } else {
        name.to_string()
    }
}

fn fadvise_dontneed(f: &File, off: u64, len: u64) {
    // SAFETY: advisory call on an open descriptor.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            off as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}

/// Creates (or reuses) the scratch file of `bytes` bytes of non-zero data,
/// so that no read is served from a hole.
fn prepare_file(path: &Path, bytes: u64) -> Result<bool> {
    if let Ok(m) = std::fs::metadata(path)
        && m.len() == bytes
    {
        return Ok(true);
    }
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut chunk = vec![0u8; MB];
    let mut rng = 0x0f11_e5edu32;
    let mut written = 0u64;
    while written < bytes {
        for w in chunk.chunks_exact_mut(4) {
            w.copy_from_slice(&xorshift32(&mut rng).to_le_bytes());
        }
        let n = (bytes - written).min(MB as u64) as usize;
        f.write_all(&chunk[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        written += n as u64;
    }
    f.sync_all()?;
    fadvise_dontneed(&f, 0, 0);
    Ok(false)
}

fn is_einval(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Measures the device costs in `dir`.
pub fn measure(dir: &Path, budget: Budget, progress: &mut dyn FnMut(&str)) -> Result<DeviceCosts> {
    measure_with(dir, budget, progress, true)
}

fn measure_with(dir: &Path, budget: Budget, progress: &mut dyn FnMut(&str), try_direct: bool) -> Result<DeviceCosts> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating scratch directory {}", dir.display()))?;
    let file_bytes = budget.pick(64u64, 256) * MB as u64;
    let path = dir.join(format!("vino-exttech-{}m.dat", file_bytes / MB as u64));
    let filesystem = filesystem_name(dir);
    let mut notes = Vec::new();
    if filesystem == "tmpfs" {
        notes.push("scratch directory is on tmpfs: there is no device behind it".to_string());
    }
    progress(&format!(
        "device: preparing {} ({} MB, {filesystem})",
        path.display(),
        file_bytes / MB as u64
    ));
    let file_reused = prepare_file(&path, file_bytes)?;

    let mut buf = AlignedBuf::new(MB);
    for (i, b) in buf.slice_mut(MB).iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }

    // Try O_DIRECT; fall back to buffered I/O with the cache dropped.
    let direct = if try_direct {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
    } else {
        Err(std::io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (file, direct_io) = match direct {
        Ok(f) => match f.read_exact_at(buf.slice_mut(PAGE), 0) {
            Ok(()) => (f, true),
            Err(e) if is_einval(&e) => {
                notes.push(format!("O_DIRECT reads fail with EINVAL on {filesystem}: {e}"));
                (OpenOptions::new().read(true).write(true).open(&path)?, false)
            }
            Err(e) => return Err(e).context("O_DIRECT read"),
        },
        Err(e) if is_einval(&e) => {
            notes.push(format!("O_DIRECT open fails with EINVAL on {filesystem}: {e}"));
            (OpenOptions::new().read(true).write(true).open(&path)?, false)
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    if !direct_io {
        notes.push(
            "FALLBACK: buffered I/O; the page cache is dropped (POSIX_FADV_DONTNEED) before each read and \
             writes are followed by fdatasync, so the numbers are approximate"
                .to_string(),
        );
    }

    let pages = file_bytes / PAGE as u64;
    let mbs = file_bytes / MB as u64;
    let segs = file_bytes / SEGMENT as u64;
    let mut rng = 0xd15c_0001u32;
    let mut pick = move |n: u64| -> u64 { ((xorshift32(&mut rng) as u64) * n) >> 32 };

    let read = |f: &File, buf: &mut AlignedBuf, off: u64, len: usize| -> std::io::Result<()> {
        if !direct_io {
            fadvise_dontneed(f, off, len as u64);
        }
        f.read_exact_at(buf.slice_mut(len), off)
    };
    let write = |f: &File, buf: &AlignedBuf, off: u64, len: usize| -> std::io::Result<()> {
        f.write_all_at(buf.slice(len), off)?;
        if !direct_io {
            f.sync_data()?;
        }
        Ok(())
    };

    progress("device: random 4 KB reads");
    let read_4k_random = try_sample(budget.pick(300, 2000), || {
        read(&file, &mut buf, pick(pages) * PAGE as u64, PAGE)
    })?;
    progress("device: 1 MB reads");
    let read_1m = try_sample(budget.pick(24, 100), || {
        read(&file, &mut buf, pick(mbs) * MB as u64, MB)
    })?;
    progress("device: random 4 KB writes");
    let write_4k_random = try_sample(budget.pick(200, 1000), || {
        write(&file, &buf, pick(pages) * PAGE as u64, PAGE)
    })?;
    progress("device: 64 KB segment writes");
    let write_64k_segment = try_sample(budget.pick(100, 400), || {
        write(&file, &buf, pick(segs) * SEGMENT as u64, SEGMENT)
    })?;
    file.sync_all()?;

    progress("device: page faults on a mapped file");
    let fault_mmap_4k = match fault_cost(&path, pages, budget.pick(300, 2000)) {
        Ok(s) => Some(s),
        Err(e) => {
            notes.push(format!("mmap page-fault measurement failed: {e}"));
            None
        }
    };

    Ok(DeviceCosts {
        path: path.display().to_string(),
        filesystem,
        file_bytes,
        file_reused,
        direct_io,
        notes,
        read_4k_random,
        read_1m,
        write_4k_random,
        write_64k_segment,
        fault_mmap_4k,
    })
}

/// Touches `n` distinct random pages of a fresh read-only mapping of the
/// file (cache dropped, read-around disabled), timing each fault.
fn fault_cost(path: &Path, pages: u64, n: usize) -> Result<Stats> {
    let f = File::open(path)?;
    f.sync_all().ok();
    fadvise_dontneed(&f, 0, 0);
    let len = (pages as usize) * PAGE;
    // SAFETY: a private read-only mapping of an open file, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        bail!("mmap: {}", std::io::Error::last_os_error());
    }
    // SAFETY: advice on the mapping just made, `len` bytes from `base`; it changes no memory.
    unsafe { libc::madvise(base, len, libc::MADV_RANDOM) };
    // Distinct pages: a stride walk with a stride coprime to the page count.
    let stride = {
        let mut s = (pages / 2 + 1) | 1;
        while gcd(s, pages) != 1 {
            s += 2;
        }
        s
    };
    let mut page = 7 % pages;
    let r = try_sample::<u8, std::convert::Infallible>(n.min(pages as usize - 1), || {
        page = (page + stride) % pages;
        // SAFETY: page < pages, inside the mapping.
        Ok(unsafe { std::ptr::read_volatile((base as *const u8).add(page as usize * PAGE)) })
    });
    // SAFETY: the mapping made above, no longer read (the sampling closure is done with it).
    unsafe { libc::munmap(base, len) };
    match r {
        Ok(s) => Ok(s),
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffered_fallback_is_flagged() {
        let dir = std::env::temp_dir().join(format!("vino-bench-device-{}", std::process::id()));
        let d = measure_with(&dir, Budget::new(true), &mut |_| {}, false).unwrap();
        assert!(!d.direct_io);
        assert!(d.notes.iter().any(|n| n.contains("EINVAL")));
        assert!(d.notes.iter().any(|n| n.contains("FALLBACK")));
        assert!(d.read_4k_random.median_ns > 0.0 && d.read_1m.median_ns > 0.0);
        assert!(d.write_4k_random.rounds > 0 && d.write_64k_segment.rounds > 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
