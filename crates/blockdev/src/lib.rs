//! VINO's block devices: the lowest layer of the storage kernel.
//!
//! Everything above (the I/O scheduler, the buffer cache, the file system) sees a device as a
//! [`BlockDevice`]: an array of [`BLOCK_SIZE`]-byte blocks with synchronous reads, writes and a
//! durability barrier, and counters. Asynchronous I/O goes through an [`IoQueue`] of a chosen
//! depth: [`IoQueue::submit`] hands back a [`Ticket`] at once, so a cache can start read-ahead
//! without blocking and wait for exactly the request it needs later.
//!
//! Devices:
//!
//! * [`FileDevice`]: an image file or a real block device, opened with `O_DIRECT` where the file
//!   system allows it. Its queues use io_uring when the kernel lets this process have a ring,
//!   and a small thread pool otherwise ([`IoQueue::backend`] says which).
//! * [`MemDevice`]: in memory, for tests, with fault injection and a crash model (writes since the
//!   last flush may be lost or torn in a simulated power cut).
//! * [`DiskModel`]: wraps any device and makes each request take as long as it would on a disk
//!   of the 1990s (seek curve, rotation, transfer rate, track buffer), by sleeping or in virtual
//!   time; [`DiskParams::st32272n`] is the thesis' test disk.

mod buf;
mod file;
mod mem;
mod model;
mod queue;
mod uring;

pub use buf::AlignedBuf;
// The clock and the generator moved to the base crate; these names keep their users compiling.
pub use file::{Direct, FileDevice, FileOptions};
pub use mem::{CrashOptions, MemDevice};
pub use model::{DiskModel, DiskParams, Geometry, ModelError, ModelStats, SeekCurve, Timing};
pub use queue::{
    Backend, BackendChoice, Completer, CompletionHook, Finished, IoOp, IoQueue, IoRequest, QueueConfig,
    SPIN_BEFORE_SLEEP, Ticket, set_ticket_spin, ticket,
};
pub use uring::uring_available;
pub use vino_clock::{Clock, ManualClock, SharedClock, SystemClock, clock, rng};

use parking_lot::Mutex;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Size of a block, the unit of every device operation: 4 KiB, the page size of the cache and
/// the alignment `O_DIRECT` needs on today's devices.
pub const BLOCK_SIZE: usize = 4096;

/// A device of fixed-size blocks.
///
/// Buffers are whole blocks (`buf.len()` a multiple of [`BLOCK_SIZE`], possibly zero); a request
/// that does not fit the device or whose buffer is not whole blocks fails with
/// [`io::ErrorKind::InvalidInput`] and a message naming the device, never a panic. Buffers need
/// not be aligned: a device that needs alignment copies through an aligned buffer.
pub trait BlockDevice: Send + Sync {
    /// Reads `buf.len() / BLOCK_SIZE` blocks starting at block `first`.
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes `buf.len() / BLOCK_SIZE` blocks starting at block `first`. Not durable until a
    /// [`BlockDevice::flush`] that starts after this write completed.
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()>;

    /// Reads consecutive blocks from `first` into `bufs`, one after another, as one request
    /// (a vectored read: a merged request fills its parts' buffers without a copy). The default
    /// reads into one buffer and copies out, so a device that models requests sees one.
    fn read_blocks_vectored(&self, first: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        read_through_one(self, first, bufs)
    }

    /// Writes `bufs` one after another from block `first`, as one request (see
    /// [`BlockDevice::read_blocks_vectored`]). The default gathers them into one buffer.
    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        write_through_one(self, first, bufs)
    }

    /// Durability barrier (`fdatasync`): every write that completed before this call is on
    /// stable storage when it returns `Ok`.
    fn flush(&self) -> io::Result<()>;

    /// Size of the device in blocks.
    fn block_count(&self) -> u64;

    /// A name for messages: the path of a file device, a description otherwise.
    fn name(&self) -> &str;

    /// The device's operation counters.
    fn counters(&self) -> &DeviceCounters;

    /// A snapshot of the counters.
    fn stats(&self) -> DeviceStats {
        self.counters().snapshot()
    }

    /// True if transfers bypass the host's page cache (`O_DIRECT`).
    fn direct(&self) -> bool {
        false
    }

    /// A file descriptor on which an io_uring backend may issue this device's reads and writes
    /// directly (at byte offset `block * BLOCK_SIZE`, aligned buffers of whole blocks) and its
    /// flush (`fdatasync`), updating [`BlockDevice::counters`] itself. `None` (the default) if
    /// every request must go through the methods above, as for models and in-memory devices.
    fn uring_fd(&self) -> Option<RawFd> {
        None
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for Arc<T> {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_blocks(first, buf)
    }
    fn read_blocks_vectored(&self, first: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        (**self).read_blocks_vectored(first, bufs)
    }
    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        (**self).write_blocks_vectored(first, bufs)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn counters(&self) -> &DeviceCounters {
        (**self).counters()
    }
    fn stats(&self) -> DeviceStats {
        (**self).stats()
    }
    fn direct(&self) -> bool {
        (**self).direct()
    }
    fn uring_fd(&self) -> Option<RawFd> {
        (**self).uring_fd()
    }
}

/// A vectored read done as one plain read into a buffer of its own, copied out to the parts.
pub(crate) fn read_through_one<D: BlockDevice + ?Sized>(dev: &D, first: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
    let mut whole = AlignedBuf::new(vectored_blocks(dev.name(), bufs.iter().map(|b| b.len()))?);
    dev.read_blocks(first, &mut whole)?;
    let mut at = 0;
    for b in bufs.iter_mut() {
        b.copy_from_slice(&whole[at..at + b.len()]);
        at += b.len();
    }
    Ok(())
}

/// A vectored write done as one plain write of the parts gathered into one buffer.
pub(crate) fn write_through_one<D: BlockDevice + ?Sized>(dev: &D, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
    let blocks = vectored_blocks(dev.name(), bufs.iter().map(|b| b.len()))?;
    dev.write_blocks(first, &AlignedBuf::gather(blocks, bufs.iter().copied()))
}

/// Blocks a vectored transfer of parts of these lengths covers; every part must be whole blocks.
pub(crate) fn vectored_blocks(name: &str, lens: impl Iterator<Item = usize>) -> io::Result<usize> {
    let mut blocks = 0;
    for len in lens {
        if !len.is_multiple_of(BLOCK_SIZE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: a vectored part of {len} bytes is not whole blocks"),
            ));
        }
        blocks += len / BLOCK_SIZE;
    }
    Ok(blocks)
}

/// Checks a transfer of `len` bytes at block `first` against a device of `count` blocks and
/// returns the number of blocks.
pub fn check_transfer(name: &str, count: u64, first: u64, len: usize) -> io::Result<u64> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name}: a buffer of {len} bytes is not a whole number of {BLOCK_SIZE}-byte blocks"),
        ));
    }
    let blocks = (len / BLOCK_SIZE) as u64;
    match first.checked_add(blocks) {
        Some(end) if end <= count => Ok(blocks),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{name}: blocks {first}..{} are past the end of the device ({count} blocks)",
                first.saturating_add(blocks)
            ),
        )),
    }
}

/// A snapshot of a device's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStats {
    /// Read requests that succeeded.
    pub reads: u64,
    /// Write requests that succeeded.
    pub writes: u64,
    /// Flushes that succeeded.
    pub flushes: u64,
    pub blocks_read: u64,
    pub blocks_written: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Requests that failed (including ones refused for a bad range or buffer).
    pub errors: u64,
    /// Time during which at least one request was in progress, in nanoseconds. For a
    /// [`DiskModel`], the modeled service time instead.
    pub busy_ns: u64,
}

/// Operation counters every device keeps (see [`DeviceStats`]).
#[derive(Debug, Default)]
pub struct DeviceCounters {
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    blocks_read: AtomicU64,
    blocks_written: AtomicU64,
    errors: AtomicU64,
    busy_ns: AtomicU64,
    active: Mutex<Active>,
}

#[derive(Debug, Default)]
struct Active {
    in_progress: u32,
    since: Option<Instant>,
}

impl DeviceCounters {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks one more request in progress (for the busy time).
    pub fn begin(&self) {
        let mut a = self.active.lock();
        if a.in_progress == 0 {
            a.since = Some(Instant::now());
        }
        a.in_progress += 1;
    }

    /// Marks a request begun with [`DeviceCounters::begin`] finished, and counts it.
    pub fn end(&self, op: IoOp, blocks: u64, ok: bool) {
        {
            let mut a = self.active.lock();
            a.in_progress = a.in_progress.saturating_sub(1);
            if a.in_progress == 0
                && let Some(since) = a.since.take()
            {
                self.busy_ns
                    .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        self.record(op, blocks, ok);
    }

    /// Counts a request without measuring time.
    pub fn record(&self, op: IoOp, blocks: u64, ok: bool) {
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match op {
            IoOp::Read => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                self.blocks_read.fetch_add(blocks, Ordering::Relaxed);
            }
            IoOp::Write => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.blocks_written.fetch_add(blocks, Ordering::Relaxed);
            }
            IoOp::Flush => {
                self.flushes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts a request refused before it started.
    pub fn refused(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds busy time measured some other way (a model's service time).
    pub fn add_busy_ns(&self, ns: u64) {
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> DeviceStats {
        let blocks_read = self.blocks_read.load(Ordering::Relaxed);
        let blocks_written = self.blocks_written.load(Ordering::Relaxed);
        let mut busy_ns = self.busy_ns.load(Ordering::Relaxed);
        if let Some(since) = self.active.lock().since {
            busy_ns += since.elapsed().as_nanos() as u64;
        }
        DeviceStats {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            blocks_read,
            blocks_written,
            bytes_read: blocks_read * BLOCK_SIZE as u64,
            bytes_written: blocks_written * BLOCK_SIZE as u64,
            errors: self.errors.load(Ordering::Relaxed),
            busy_ns,
        }
    }
}

/// Runs one synchronous operation under the counters: begin, run, end.
pub(crate) fn counted<T>(
    counters: &DeviceCounters,
    op: IoOp,
    blocks: u64,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    counters.begin();
    let r = f();
    counters.end(op, blocks, r.is_ok());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_checks() {
        assert_eq!(check_transfer("d", 10, 0, 0).unwrap(), 0);
        assert_eq!(check_transfer("d", 10, 8, 2 * BLOCK_SIZE).unwrap(), 2);
        let e = check_transfer("d", 10, 9, 2 * BLOCK_SIZE).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("blocks 9..11 are past the end"), "{e}");
        let e = check_transfer("d", 10, 0, 100).unwrap_err();
        assert!(e.to_string().contains("not a whole number"), "{e}");
        assert!(check_transfer("d", 10, u64::MAX, BLOCK_SIZE).is_err());
    }

    #[test]
    fn counters_count() {
        let c = DeviceCounters::new();
        counted(&c, IoOp::Read, 3, || Ok(())).unwrap();
        counted(&c, IoOp::Write, 2, || Ok(())).unwrap();
        let _ = counted(&c, IoOp::Write, 2, || Err::<(), _>(io::Error::other("x")));
        c.record(IoOp::Flush, 0, true);
        let s = c.snapshot();
        assert_eq!((s.reads, s.writes, s.flushes, s.errors), (1, 1, 1, 1));
        assert_eq!((s.blocks_read, s.blocks_written), (3, 2));
        assert_eq!(s.bytes_read, 3 * BLOCK_SIZE as u64);
    }
}
