//! A device in memory, for tests: fault injection and a crash model.
//!
//! The crash model keeps two images: what reads see now, and what was durable at the last
//! successful flush, with the writes made since in the order they completed. A simulated power
//! cut starts from the durable image and replays the unflushed writes, a seeded generator
//! deciding for each whether it reached the platter whole, not at all, or torn (only some of
//! its sectors). Writes replay in order, so a block ends up holding its durable contents or the
//! contents of one of the writes made to it since, sector by sector if torn. This is what disks
//! with volatile write caches may do; it is what file-system crash tests need to survive.

use crate::rng::SplitMix64;
use crate::{BLOCK_SIZE, BlockDevice, DeviceCounters, IoOp, check_transfer, counted};
use parking_lot::Mutex;
use std::io;

/// How a simulated power cut treats the writes made since the last flush.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrashOptions {
    /// Probability that an unflushed write survives whole.
    pub survive: f64,
    /// Probability that an unflushed write is torn: each of its sectors survives or not, on its
    /// own. The rest of the time (1 - survive - tear) the write is lost.
    pub tear: f64,
    /// The unit a torn write is cut into (the disk's atomic sector).
    pub sector_bytes: usize,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions {
            survive: 0.5,
            tear: 0.2,
            sector_bytes: 512,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    /// Absolute number (1-based) of the read, write or flush that fails.
    read: Option<u64>,
    write: Option<u64>,
    flush: Option<u64>,
    /// Every operation fails: the device is dead.
    dead: bool,
}

struct MemState {
    data: Vec<u8>,
    durable: Vec<u8>,
    unflushed: Vec<(u64, Vec<u8>)>,
    faults: Faults,
    reads: u64,
    writes: u64,
    flushes: u64,
}

/// A device held in memory (see the module documentation).
pub struct MemDevice {
    name: String,
    blocks: u64,
    state: Mutex<MemState>,
    counters: DeviceCounters,
}

fn injected(what: &str, name: &str, n: u64) -> io::Error {
    io::Error::other(format!("{name}: injected failure of {what} #{n}"))
}

impl MemDevice {
    /// A zeroed device of `blocks` blocks.
    pub fn new(blocks: u64) -> MemDevice {
        let bytes = usize::try_from(blocks)
            .ok()
            .and_then(|b| b.checked_mul(BLOCK_SIZE))
            .expect("device too large for memory");
        // Both images zeroed by the allocator: untouched pages cost nothing.
        Self::with_images(vec![0; bytes], vec![0; bytes], format!("mem:{blocks}"))
    }

    /// A device holding `image` (a whole number of blocks), durable as it is.
    pub fn from_image(image: Vec<u8>) -> io::Result<MemDevice> {
        if !image.len().is_multiple_of(BLOCK_SIZE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an image of {} bytes is not a whole number of {BLOCK_SIZE}-byte blocks",
                    image.len()
                ),
            ));
        }
        let name = format!("mem:{}", image.len() / BLOCK_SIZE);
        Ok(Self::build(image, name))
    }

    fn build(image: Vec<u8>, name: String) -> MemDevice {
        Self::with_images(image.clone(), image, name)
    }

    fn with_images(data: Vec<u8>, durable: Vec<u8>, name: String) -> MemDevice {
        MemDevice {
            name,
            blocks: (data.len() / BLOCK_SIZE) as u64,
            state: Mutex::new(MemState {
                durable,
                data,
                unflushed: Vec::new(),
                faults: Faults::default(),
                reads: 0,
                writes: 0,
                flushes: 0,
            }),
            counters: DeviceCounters::new(),
        }
    }

    pub fn with_name(mut self, name: impl Into<String>) -> MemDevice {
        self.name = name.into();
        self
    }

    /// What reads see now.
    pub fn image(&self) -> Vec<u8> {
        self.state.lock().data.clone()
    }

    /// The contents as of the last successful flush.
    pub fn durable_image(&self) -> Vec<u8> {
        self.state.lock().durable.clone()
    }

    /// Writes made since the last successful flush.
    pub fn unflushed_writes(&self) -> usize {
        self.state.lock().unflushed.len()
    }

    /// The `nth` read from now (1 = the next) fails, changing nothing.
    pub fn fail_read(&self, nth: u64) {
        let mut s = self.state.lock();
        s.faults.read = Some(s.reads + nth.max(1));
    }

    /// The `nth` write from now (1 = the next) fails and writes nothing.
    pub fn fail_write(&self, nth: u64) {
        let mut s = self.state.lock();
        s.faults.write = Some(s.writes + nth.max(1));
    }

    /// The `nth` flush from now (1 = the next) fails; the writes stay unflushed.
    pub fn fail_flush(&self, nth: u64) {
        let mut s = self.state.lock();
        s.faults.flush = Some(s.flushes + nth.max(1));
    }

    /// Every operation fails from now on (`true`) or works again (`false`).
    pub fn set_dead(&self, dead: bool) {
        self.state.lock().faults.dead = dead;
    }

    pub fn clear_faults(&self) {
        self.state.lock().faults = Faults::default();
    }

    /// The image a power cut now would leave, with [`CrashOptions::default`].
    pub fn crash_image(&self, seed: u64) -> Vec<u8> {
        self.crash_image_with(seed, &CrashOptions::default())
    }

    /// The image a power cut now would leave: the durable image plus the unflushed writes the
    /// generator seeded with `seed` lets through. The device itself is unchanged.
    pub fn crash_image_with(&self, seed: u64, options: &CrashOptions) -> Vec<u8> {
        let s = self.state.lock();
        let mut image = s.durable.clone();
        let mut rng = SplitMix64::new(seed);
        let sector = options.sector_bytes.clamp(1, BLOCK_SIZE);
        for (first, data) in &s.unflushed {
            let at = *first as usize * BLOCK_SIZE;
            let roll = rng.next_f64();
            if roll < options.tear {
                for (i, chunk) in data.chunks(sector).enumerate() {
                    if rng.chance(0.5) {
                        let off = at + i * sector;
                        image[off..off + chunk.len()].copy_from_slice(chunk);
                    }
                }
            } else if roll < options.tear + options.survive {
                image[at..at + data.len()].copy_from_slice(data);
            }
        }
        image
    }

    /// A new device holding the image a power cut now would leave (durable as it is).
    pub fn crashed(&self, seed: u64) -> MemDevice {
        Self::build(self.crash_image(seed), self.name.clone())
    }

    /// Cuts the power of this device: its contents become [`MemDevice::crash_image_with`], all
    /// durable, faults cleared. Handy when the device is shared and must be "rebooted" in place.
    pub fn power_cut(&self, seed: u64, options: &CrashOptions) {
        let image = self.crash_image_with(seed, options);
        let mut s = self.state.lock();
        s.durable = image.clone();
        s.data = image;
        s.unflushed.clear();
        s.faults = Faults::default();
    }
}

impl BlockDevice for MemDevice {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let blocks =
            check_transfer(&self.name, self.blocks, first, buf.len()).inspect_err(|_| self.counters.refused())?;
        counted(&self.counters, IoOp::Read, blocks, || {
            let mut s = self.state.lock();
            s.reads += 1;
            if s.faults.dead || s.faults.read == Some(s.reads) {
                return Err(injected("read", &self.name, s.reads));
            }
            let at = first as usize * BLOCK_SIZE;
            buf.copy_from_slice(&s.data[at..at + buf.len()]);
            Ok(())
        })
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let blocks =
            check_transfer(&self.name, self.blocks, first, buf.len()).inspect_err(|_| self.counters.refused())?;
        counted(&self.counters, IoOp::Write, blocks, || {
            let mut s = self.state.lock();
            s.writes += 1;
            if s.faults.dead || s.faults.write == Some(s.writes) {
                return Err(injected("write", &self.name, s.writes));
            }
            if buf.is_empty() {
                return Ok(());
            }
            let at = first as usize * BLOCK_SIZE;
            s.data[at..at + buf.len()].copy_from_slice(buf);
            s.unflushed.push((first, buf.to_vec()));
            Ok(())
        })
    }

    fn flush(&self) -> io::Result<()> {
        counted(&self.counters, IoOp::Flush, 0, || {
            let mut s = self.state.lock();
            s.flushes += 1;
            if s.faults.dead || s.faults.flush == Some(s.flushes) {
                return Err(injected("flush", &self.name, s.flushes));
            }
            let s = &mut *s;
            for (first, data) in s.unflushed.drain(..) {
                let at = first as usize * BLOCK_SIZE;
                s.durable[at..at + data.len()].copy_from_slice(&data);
            }
            Ok(())
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
}
