//! The simulated disk: a device in memory that loses power at a chosen write, and a trace of
//! every operation, so two runs of one seed can be compared.

use std::io;
use std::sync::Mutex;
use vino_blockdev::{BlockDevice, CrashOptions, DeviceCounters, MemDevice};

/// Folds `v` into the running trace hash (FNV-1a over 64-bit words).
fn fold(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x0000_0100_0000_01b3)
}

fn digest(data: &[u8]) -> u64 {
    data.chunks(8).fold(0xcbf2_9ce4_8422_2325, |h, c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        fold(h, u64::from_le_bytes(w))
    })
}

struct State {
    writes: u64,
    /// The write (1-based) at which the power goes; `u64::MAX`: never.
    trip: u64,
    crash_seed: u64,
    options: CrashOptions,
    /// The image the power cut left.
    crashed: Option<Vec<u8>>,
    trace: u64,
}

/// A [`MemDevice`] with a power switch and a trace (see the module documentation).
pub struct SimDevice {
    inner: MemDevice,
    state: Mutex<State>,
}

impl SimDevice {
    pub fn new(inner: MemDevice) -> SimDevice {
        SimDevice {
            inner,
            state: Mutex::new(State {
                writes: 0,
                trip: u64::MAX,
                crash_seed: 0,
                options: CrashOptions::default(),
                crashed: None,
                trace: 0xcbf2_9ce4_8422_2325,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while the lock was held leaves the plain data usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power at the `trip`-th write from now (1 = the next): the writes since the last
    /// flush survive, tear or vanish as the generator seeded with `crash_seed` decides, and every
    /// operation fails from then on.
    pub fn arm(&self, trip: u64, crash_seed: u64, options: CrashOptions) {
        let mut s = self.state();
        s.trip = s.writes + trip.max(1);
        s.crash_seed = crash_seed;
        s.options = options;
    }

    /// Writes so far.
    pub fn writes(&self) -> u64 {
        self.state().writes
    }

    /// The hash of every operation so far, in order, with the data written.
    pub fn trace(&self) -> u64 {
        self.state().trace
    }

    /// The image the power cut left, if it came.
    pub fn crashed(&self) -> Option<Vec<u8>> {
        self.state().crashed.clone()
    }

    fn note(&self, op: u64, first: u64, data: Option<&[u8]>) {
        let mut s = self.state();
        s.trace = fold(fold(s.trace, op), first);
        if let Some(d) = data {
            s.trace = fold(s.trace, digest(d));
        }
    }
}

impl BlockDevice for SimDevice {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.note(1, first, None);
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        {
            let mut s = self.state();
            s.writes += 1;
            if s.writes == s.trip && s.crashed.is_none() {
                s.crashed = Some(self.inner.crash_image_with(s.crash_seed, &s.options));
                self.inner.set_dead(true);
            }
        }
        self.note(2, first, Some(buf));
        self.inner.write_blocks(first, buf)
    }

    fn flush(&self) -> io::Result<()> {
        self.note(3, 0, None);
        self.inner.flush()
    }

    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn name(&self) -> &str {
        "sim"
    }

    fn counters(&self) -> &DeviceCounters {
        self.inner.counters()
    }
}
