//! A cache over an in-memory device, with files laid out contiguously on it.

#![allow(dead_code)]

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use vino_blockdev::{BLOCK_SIZE, BlockDevice, IoQueue, IoRequest, MemDevice, Ticket};
use vino_cache::{Backing, CacheConfig, PageCache, PageIo};
use vino_graft::Runtime;

/// A file whose block i lives at device block `base + i`; blocks at or past `allocated` are
/// holes.
pub struct File {
    pub base: u64,
    pub size: AtomicU64,
    pub allocated: u64,
}

impl Backing for File {
    fn locate(&self, index: u64) -> io::Result<Option<u64>> {
        Ok((index < self.allocated).then_some(self.base + index))
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.size.load(Ordering::Relaxed))
    }
}

pub fn file(base: u64, blocks: u64) -> File {
    File {
        base,
        size: AtomicU64::new(blocks * BLOCK_SIZE as u64),
        allocated: blocks,
    }
}

/// The cache's I/O straight to a device queue (the kernel puts its scheduler there instead).
pub struct Queue(pub IoQueue);

impl PageIo for Queue {
    fn submit(&self, request: IoRequest) -> Ticket {
        self.0.submit(request)
    }
}

/// The byte every block of the device starts out with: its block number.
pub fn pattern(block: u64) -> u8 {
    (block % 251) as u8
}

pub struct Setup {
    pub device: Arc<MemDevice>,
    pub cache: Arc<PageCache>,
    pub runtime: Runtime,
}

pub fn setup(frames: usize, device_blocks: u64) -> Setup {
    setup_with(frames, device_blocks, None)
}

/// As [`setup`], with a write-back thread running the policy every `writeback_every`.
pub fn setup_with(frames: usize, device_blocks: u64, writeback_every: Option<std::time::Duration>) -> Setup {
    let device = Arc::new(MemDevice::new(device_blocks));
    for b in 0..device_blocks {
        device.write_blocks(b, &vec![pattern(b); BLOCK_SIZE]).unwrap();
    }
    let queue = IoQueue::new(device.clone(), 8).unwrap();
    let runtime = Runtime::default();
    let cache = PageCache::new(
        CacheConfig {
            frames,
            writeback_every,
            ..CacheConfig::default()
        },
        Arc::new(Queue(queue)),
        &runtime,
    );
    Setup { device, cache, runtime }
}
