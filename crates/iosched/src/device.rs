//! The scheduler seen as a block device: for the file system's own reads and writes (its
//! metadata, its journal), so that they wait in the same queue as the cache's, are ordered by
//! the same policy (`disk.pick_request`), merge with their neighbours and count in the same
//! statistics, instead of going to the device beside the queue.

use crate::IoScheduler;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use vino_blockdev::{AlignedBuf, BlockDevice, DeviceCounters, DeviceStats, IoRequest};

/// A [`BlockDevice`] whose every operation is a request through an [`IoScheduler`], waited for
/// at once (so a caller that dispatches serves it on its own thread when nothing else waits)
/// and marked as metadata: the file system holds its lock meanwhile, so the scheduler sends it
/// ahead of the data requests waiting (see [`vino_blockdev::IoRequest::meta`]).
pub struct ScheduledDevice {
    sched: Arc<IoScheduler>,
}

impl ScheduledDevice {
    pub fn new(sched: Arc<IoScheduler>) -> ScheduledDevice {
        ScheduledDevice { sched }
    }

    fn run(&self, req: IoRequest) -> io::Result<AlignedBuf> {
        self.sched.submit(req.awaited().metadata()).wait()
    }
}

impl BlockDevice for ScheduledDevice {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let blocks = vino_blockdev::check_transfer(self.name(), self.block_count(), first, buf.len())?;
        if blocks == 0 {
            return Ok(());
        }
        let data = self.run(IoRequest::read(first, blocks as usize))?;
        buf.copy_from_slice(&data);
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let blocks = vino_blockdev::check_transfer(self.name(), self.block_count(), first, buf.len())?;
        if blocks == 0 {
            return Ok(());
        }
        self.run(IoRequest::write(first, AlignedBuf::from_slice(buf))).map(drop)
    }

    fn flush(&self) -> io::Result<()> {
        self.run(IoRequest::flush()).map(drop)
    }

    fn block_count(&self) -> u64 {
        self.sched.device().block_count()
    }

    fn name(&self) -> &str {
        self.sched.device().name()
    }

    fn counters(&self) -> &DeviceCounters {
        self.sched.device().counters()
    }

    fn stats(&self) -> DeviceStats {
        self.sched.device().stats()
    }

    fn direct(&self) -> bool {
        self.sched.device().direct()
    }

    /// None: every request goes through the scheduler.
    fn uring_fd(&self) -> Option<RawFd> {
        None
    }
}
