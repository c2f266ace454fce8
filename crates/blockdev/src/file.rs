//! A device backed by an image file or a real block device.

use crate::buf::is_aligned;
use crate::{AlignedBuf, BLOCK_SIZE, BlockDevice, DeviceCounters, IoOp, check_transfer, counted};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Whether to bypass the host's page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direct {
    /// `O_DIRECT` if the file system accepts it, buffered otherwise (tmpfs refuses it).
    #[default]
    Auto,
    /// `O_DIRECT` or an error.
    Require,
    /// Buffered I/O through the host's page cache.
    Never,
}

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FileOptions {
    pub direct: Direct,
    pub read_only: bool,
}

/// An image file or a real block device, read and written with `pread`/`pwrite` at
/// `block * BLOCK_SIZE` (safe to share between threads), flushed with `fdatasync`.
///
/// Opening takes a `flock` on the file, exclusive for reading and writing, shared when read
/// only, held until the device is dropped: a second writer (or a writer and a reader) of one
/// image is refused with [`io::ErrorKind::WouldBlock`].
///
/// With `O_DIRECT` transfers must be aligned: the device copies through an aligned buffer when
/// the caller's is not. A trailing partial block of an image whose size is not a multiple of
/// [`BLOCK_SIZE`] is not part of the device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    name: String,
    blocks: u64,
    direct: bool,
    read_only: bool,
    block_device: bool,
    counters: DeviceCounters,
}

/// `BLKGETSIZE64`, `_IOR(0x12, 114, u64)`: the size of a block device in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn with_path(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

impl FileDevice {
    /// Opens an existing image or block device for reading and writing, `O_DIRECT` if possible.
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        Self::open_with(path, FileOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, options: FileOptions) -> io::Result<FileDevice> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| with_path(path, "cannot open", e))?;
        let block_device = meta.file_type().is_block_device();
        if !block_device && !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a regular file or a block device", path.display()),
            ));
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(!options.read_only);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (mut file, mut direct) = open_mode(path, options.direct, &open)?;
        let bytes = if block_device {
            block_device_size(&file).map_err(|e| with_path(path, "BLKGETSIZE64", e))?
        } else {
            meta.len()
        };
        // Some file systems accept the flag at open and refuse the first transfer instead.
        if direct && bytes >= BLOCK_SIZE as u64 {
            let mut probe = AlignedBuf::new(1);
            if let Err(e) = file.read_exact_at(&mut probe, 0) {
                if !refuses_direct(&e) {
                    return Err(with_path(path, "reading block 0", e));
                }
                if options.direct == Direct::Require {
                    return Err(with_path(path, "the file system refuses O_DIRECT", e));
                }
                direct = false;
                file = open(false).map_err(|e| with_path(path, "cannot open", e))?;
            }
        }
        lock_image(&file, path, options.read_only)?;
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            name: path.display().to_string(),
            blocks: bytes / BLOCK_SIZE as u64,
            direct,
            read_only: options.read_only,
            block_device,
            counters: DeviceCounters::new(),
        })
    }

    /// Creates (or truncates) an image file of `bytes` bytes, a non-zero multiple of
    /// [`BLOCK_SIZE`], and opens it. The file is sparse: it reads as zeros.
    pub fn create(path: impl AsRef<Path>, bytes: u64) -> io::Result<FileDevice> {
        let path = path.as_ref();
        if bytes == 0 || !bytes.is_multiple_of(BLOCK_SIZE as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: an image of {bytes} bytes is not a non-zero multiple of {BLOCK_SIZE}",
                    path.display()
                ),
            ));
        }
        let file = File::create(path).map_err(|e| with_path(path, "cannot create", e))?;
        file.set_len(bytes)
            .map_err(|e| with_path(path, "cannot set the size", e))?;
        drop(file);
        Self::open(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// One `preadv`/`pwritev` transfer (continued after a short one) of the parts `iovs` names,
    /// from block `first`.
    fn transfer_vectored(&self, op: IoOp, first: u64, mut iovs: Vec<libc::iovec>) -> io::Result<()> {
        let lens = iovs.iter().map(|v| v.iov_len);
        let blocks = crate::vectored_blocks(&self.name, lens)
            .and_then(|b| check_transfer(&self.name, self.blocks, first, b * BLOCK_SIZE))
            .inspect_err(|_| self.counters.refused())?;
        if blocks == 0 {
            return Ok(());
        }
        let what = || {
            format!(
                "{} blocks {first}..{}",
                if op == IoOp::Read { "reading" } else { "writing" },
                first + blocks
            )
        };
        let mut offset = first * BLOCK_SIZE as u64;
        let mut at = 0;
        counted(&self.counters, op, blocks, || {
            while at < iovs.len() {
                let (fd, v, n) = (self.file.as_raw_fd(), iovs[at..].as_ptr(), (iovs.len() - at) as i32);
                // SAFETY: the iovecs name live buffers of the caller's for the whole call
                // (writable ones for a read), and at most IOV_MAX of them are passed.
                let done = unsafe {
                    match op {
                        IoOp::Read => libc::preadv(fd, v, n, offset as libc::off_t),
                        _ => libc::pwritev(fd, v, n, offset as libc::off_t),
                    }
                };
                let mut done = match done {
                    d if d < 0 => {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        return Err(self.io_error(what(), e));
                    }
                    0 => {
                        let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the device ended early");
                        return Err(self.io_error(what(), e));
                    }
                    d => d as usize,
                };
                offset += done as u64;
                // Skip what was transferred: whole parts, then the front of a partial one.
                while at < iovs.len() && done >= iovs[at].iov_len {
                    done -= iovs[at].iov_len;
                    at += 1;
                }
                if done > 0 {
                    // SAFETY: `done` is less than this part's length, so the base stays in it.
                    iovs[at].iov_base = unsafe { iovs[at].iov_base.cast::<u8>().add(done).cast() };
                    iovs[at].iov_len -= done;
                }
            }
            Ok(())
        })
    }

    /// True if parts at these addresses can go to the device as they are: few enough for one
    /// call, and aligned where `O_DIRECT` needs it.
    fn vectorable(&self, mut parts: impl ExactSizeIterator<Item = *const u8>) -> bool {
        parts.len() <= IOV_MAX && (!self.direct || parts.all(is_aligned))
    }

    /// Refuses a write to a device opened read-only.
    fn writable(&self) -> io::Result<()> {
        if self.read_only {
            self.counters.refused();
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: opened read-only", self.name),
            ));
        }
        Ok(())
    }

    fn io_error(&self, what: String, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {what}: {e}", self.name))
    }
}

/// The most parts one `preadv`/`pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// How long opening a busy image waits for its lock.
pub const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the image's lock: exclusive for a writer, shared for a reader (`flock`, released when
/// the file is closed), so that two VINOs never write one image at once. A busy image is an
/// error of kind [`io::ErrorKind::WouldBlock`].
///
/// A holder that just died may keep the lock a moment: the kernel tears down its io_uring
/// instance, which holds the file open, asynchronously. So a busy image is tried again for up
/// to [`LOCK_PATIENCE`] before the error.
fn lock_image(file: &File, path: &Path, read_only: bool) -> io::Result<()> {
    let try_once = || {
        if read_only {
            file.try_lock_shared()
        } else {
            file.try_lock()
        }
    };
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    let mut r = try_once();
    while matches!(r, Err(std::fs::TryLockError::WouldBlock)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        r = try_once();
    }
    match r {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "{}: in use by another VINO (the daemon, a mount or fsck): stop it first",
                path.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(with_path(path, "cannot lock", e)),
    }
}

fn refuses_direct(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Opens with `O_DIRECT` as `mode` asks, falling back to buffered I/O under [`Direct::Auto`] when
/// the file system refuses the flag. Returns the file and whether it is direct.
fn open_mode(path: &Path, mode: Direct, open: &dyn Fn(bool) -> io::Result<File>) -> io::Result<(File, bool)> {
    if mode == Direct::Never {
        return open(false)
            .map(|f| (f, false))
            .map_err(|e| with_path(path, "cannot open", e));
    }
    match open(true) {
        Ok(f) => Ok((f, true)),
        Err(e) if refuses_direct(&e) && mode == Direct::Auto => open(false)
            .map(|f| (f, false))
            .map_err(|e| with_path(path, "cannot open", e)),
        Err(e) if refuses_direct(&e) => Err(with_path(path, "the file system refuses O_DIRECT", e)),
        Err(e) => Err(with_path(path, "cannot open", e)),
    }
}

fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: the descriptor is open for as long as `file` is borrowed, and BLKGETSIZE64 writes
    // one u64 through the pointer, which points to `size`.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(size)
    }
}

impl BlockDevice for FileDevice {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let blocks =
            check_transfer(&self.name, self.blocks, first, buf.len()).inspect_err(|_| self.counters.refused())?;
        if blocks == 0 {
            return Ok(());
        }
        let offset = first * BLOCK_SIZE as u64;
        let what = || format!("reading blocks {first}..{}", first + blocks);
        counted(&self.counters, IoOp::Read, blocks, || {
            if self.direct && !is_aligned(buf.as_ptr()) {
                let mut bounce = AlignedBuf::new(blocks as usize);
                self.file
                    .read_exact_at(&mut bounce, offset)
                    .map_err(|e| self.io_error(what(), e))?;
                buf.copy_from_slice(&bounce);
                Ok(())
            } else {
                self.file
                    .read_exact_at(buf, offset)
                    .map_err(|e| self.io_error(what(), e))
            }
        })
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let blocks =
            check_transfer(&self.name, self.blocks, first, buf.len()).inspect_err(|_| self.counters.refused())?;
        self.writable()?;
        if blocks == 0 {
            return Ok(());
        }
        let offset = first * BLOCK_SIZE as u64;
        let what = || format!("writing blocks {first}..{}", first + blocks);
        counted(&self.counters, IoOp::Write, blocks, || {
            if self.direct && !is_aligned(buf.as_ptr()) {
                let bounce = AlignedBuf::from_slice(buf);
                self.file
                    .write_all_at(&bounce, offset)
                    .map_err(|e| self.io_error(what(), e))
            } else {
                self.file
                    .write_all_at(buf, offset)
                    .map_err(|e| self.io_error(what(), e))
            }
        })
    }

    fn read_blocks_vectored(&self, first: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        if !self.vectorable(bufs.iter().map(|b| b.as_ptr())) {
            return crate::read_through_one(self, first, bufs);
        }
        let iovs = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        self.transfer_vectored(IoOp::Read, first, iovs)
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.writable()?;
        if !self.vectorable(bufs.iter().map(|b| b.as_ptr())) {
            return crate::write_through_one(self, first, bufs);
        }
        let iovs = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            })
            .collect();
        self.transfer_vectored(IoOp::Write, first, iovs)
    }

    fn flush(&self) -> io::Result<()> {
        counted(&self.counters, IoOp::Flush, 0, || {
            self.file.sync_data().map_err(|e| self.io_error("fdatasync".into(), e))
        })
    }

    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn counters(&self) -> &DeviceCounters {
        &self.counters
    }

    fn direct(&self) -> bool {
        self.direct
    }

    fn uring_fd(&self) -> Option<RawFd> {
        // A read-only device keeps its requests on the methods above, which refuse writes with a
        // clear message (the kernel would only say EBADF).
        (!self.read_only).then(|| self.file.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file system that refuses O_DIRECT at open (as tmpfs did before Linux 6.6).
    fn refusing(dir: &Path) -> impl Fn(bool) -> io::Result<File> + '_ {
        move |direct| {
            if direct {
                Err(io::Error::from_raw_os_error(libc::EINVAL))
            } else {
                File::create(dir.join("f"))
            }
        }
    }

    #[test]
    fn refused_o_direct_falls_back_or_fails_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (_, direct) = open_mode(&path, Direct::Auto, &refusing(dir.path())).unwrap();
        assert!(!direct);
        let e = open_mode(&path, Direct::Require, &refusing(dir.path())).unwrap_err();
        assert!(
            e.to_string().contains("refuses O_DIRECT") && e.to_string().contains(&*path.to_string_lossy()),
            "{e}"
        );
        let (_, direct) = open_mode(&path, Direct::Never, &refusing(dir.path())).unwrap();
        assert!(!direct);
        let other = |_: bool| -> io::Result<File> { Err(io::Error::from_raw_os_error(libc::EACCES)) };
        let e = open_mode(&path, Direct::Auto, &other).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("cannot open"), "{e}");
    }
}
