//! Test devices shared by the integration tests.
#![allow(dead_code)]

use parking_lot::{Condvar, Mutex};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use vino_blockdev::{BlockDevice, DeviceCounters, MemDevice};

/// A device whose reads and writes wait at a gate until it is opened, counting how many are
/// inside at once.
pub struct Gate {
    pub inner: MemDevice,
    open: Mutex<bool>,
    cv: Condvar,
    active: AtomicUsize,
    pub max_active: AtomicUsize,
    pub arrived: AtomicUsize,
}

impl Gate {
    pub fn new(blocks: u64) -> Gate {
        Gate {
            inner: MemDevice::new(blocks),
            open: Mutex::new(false),
            cv: Condvar::new(),
            active: AtomicUsize::new(0),
            max_active: AtomicUsize::new(0),
            arrived: AtomicUsize::new(0),
        }
    }

    pub fn open(&self) {
        *self.open.lock() = true;
        self.cv.notify_all();
    }

    /// Waits (without a timeout: the test harness has one) until `n` requests have arrived.
    pub fn wait_arrived(&self, n: usize) {
        while self.arrived.load(Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
    }

    fn pass<T>(&self, f: impl FnOnce() -> T) -> T {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_active.fetch_max(now, Ordering::SeqCst);
        self.arrived.fetch_add(1, Ordering::SeqCst);
        {
            let mut open = self.open.lock();
            while !*open {
                self.cv.wait(&mut open);
            }
        }
        let r = f();
        self.active.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

impl BlockDevice for Gate {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.pass(|| self.inner.read_blocks(first, buf))
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.pass(|| self.inner.write_blocks(first, buf))
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn name(&self) -> &str {
        "gate"
    }
    fn counters(&self) -> &DeviceCounters {
        self.inner.counters()
    }
}

/// Recognisable contents for block `b` (version `v`).
pub fn pattern(b: u64, v: u8) -> Vec<u8> {
    (0..vino_blockdev::BLOCK_SIZE)
        .map(|i| (b as usize * 31 + i * 7 + v as usize * 13) as u8)
        .collect()
}
