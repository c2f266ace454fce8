//! Swap space: page slots in a store the kernel owns (on VINO's file system, see the kernel's
//! `swapfile`), handed out one page at a time and given back at eviction's undo or the owner's
//! exit.
//!
//! Every page is enciphered (ChaCha20) on its way out with a key made at boot that never leaves
//! memory, each write under a stream number used once. So a freed slot never shows a process's
//! memory to anyone: not to the next owner of the blocks, not after a crash (the key died with
//! the kernel), not to root reading the device. It costs a pass over the page (a few µs) on a
//! path that waits for a disk anyway, and spares zeroing slots at free and after a crash.
//!
//! The store grows by chunks on a thread of its own, never on a fault's path: growing takes
//! file-system locks that a thread stuck in that fault may hold.

use parking_lot::{Condvar, Mutex};
use rand_core::{Rng, SeedableRng};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bytes of one page and one slot.
pub const PAGE: usize = 4096;

/// Where swap slots live: page-sized slots by index.
pub trait SwapStore: Send + Sync {
    /// Slots it has now.
    fn pages(&self) -> u64;
    /// Makes it at least `pages` slots (or as many as it can); returns how many it has. Called
    /// only from the swap's own thread.
    fn grow(&self, pages: u64) -> io::Result<u64>;
    fn write(&self, slot: u64, page: &[u8]) -> io::Result<()>;
    fn read(&self, slot: u64, page: &mut [u8]) -> io::Result<()>;

    /// Writes `pages.len() / PAGE` consecutive slots from `first` (one request where the slots
    /// lie together on the device).
    fn write_run(&self, first: u64, pages: &[u8]) -> io::Result<()> {
        for (i, page) in pages.chunks_exact(PAGE).enumerate() {
            self.write(first + i as u64, page)?;
        }
        Ok(())
    }

    /// Reads `pages.len() / PAGE` consecutive slots from `first`.
    fn read_run(&self, first: u64, pages: &mut [u8]) -> io::Result<()> {
        for (i, page) in pages.chunks_exact_mut(PAGE).enumerate() {
            self.read(first + i as u64, page)?;
        }
        Ok(())
    }
}

/// Swap in memory (unit tests, and a kernel without a file system to put it on).
#[derive(Default)]
pub struct MemSwap {
    slots: Mutex<Vec<Box<[u8]>>>,
}

impl SwapStore for MemSwap {
    fn pages(&self) -> u64 {
        self.slots.lock().len() as u64
    }

    fn grow(&self, pages: u64) -> io::Result<u64> {
        let mut s = self.slots.lock();
        while (s.len() as u64) < pages {
            s.push(vec![0u8; PAGE].into_boxed_slice());
        }
        Ok(s.len() as u64)
    }

    fn write(&self, slot: u64, page: &[u8]) -> io::Result<()> {
        let mut s = self.slots.lock();
        let to = s
            .get_mut(slot as usize)
            .ok_or_else(|| io::Error::other("no such slot"))?;
        to.copy_from_slice(page);
        Ok(())
    }

    fn read(&self, slot: u64, page: &mut [u8]) -> io::Result<()> {
        let s = self.slots.lock();
        page.copy_from_slice(s.get(slot as usize).ok_or_else(|| io::Error::other("no such slot"))?);
        Ok(())
    }
}

/// A page as it lies in swap: its slot and the stream it was enciphered under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swapped {
    pub slot: u64,
    pub stream: u64,
}

/// Why no slot was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Every slot the configuration allows is in use.
    Full,
    /// The store is still growing (a moment later there will be one).
    Growing,
}

struct Slots {
    /// One bit per slot the store has: set while handed out.
    used: Vec<u64>,
    /// Slots the store has.
    have: u64,
    /// Where the next search for free slots starts (next fit: runs handed out one after
    /// another lie together, so pages evicted together are read back together).
    cursor: u64,
    in_use: u64,
    /// The grower is asked to reach this many.
    want: u64,
    /// The store could not grow past `have` (the file system is full): no use asking again
    /// until slots are freed.
    stuck: bool,
    stop: bool,
}

impl Slots {
    fn is_used(&self, slot: u64) -> bool {
        self.used[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    fn set(&mut self, slot: u64, used: bool) {
        let (w, b) = ((slot / 64) as usize, slot % 64);
        if used {
            self.used[w] |= 1 << b;
        } else {
            self.used[w] &= !(1 << b);
        }
    }

    /// The store has `have` slots now.
    fn grown(&mut self, have: u64) {
        self.have = self.have.max(have);
        self.used.resize(self.have.div_ceil(64) as usize, 0);
    }

    /// The first free run of up to `max` slots from the cursor on (wrapping once), taken.
    fn take_run(&mut self, max: u64) -> Option<(u64, u64)> {
        if self.in_use >= self.have {
            return None;
        }
        let start = self.cursor.min(self.have);
        let order = (start..self.have).chain(0..start);
        let mut found = None;
        for slot in order {
            if !self.is_used(slot) {
                found = Some(slot);
                break;
            }
        }
        let first = found?;
        let mut n = 0;
        while n < max && first + n < self.have && !self.is_used(first + n) {
            self.set(first + n, true);
            n += 1;
        }
        self.in_use += n;
        self.cursor = first + n;
        Some((first, n))
    }
}

/// The swap space of one pager.
pub struct Swap {
    store: Arc<dyn SwapStore>,
    /// Most slots the store may grow to.
    max_pages: u64,
    /// Slots added per growth.
    chunk: u64,
    key: [u8; 32],
    /// Next cipher stream: one per write, never reused under this key.
    streams: AtomicU64,
    slots: Mutex<Slots>,
    changed: Condvar,
}

impl Swap {
    /// A swap of at most `max_pages` slots in `store`, grown `chunk` at a time, half a chunk
    /// ahead of need; its key made now, at random.
    pub fn new(store: Arc<dyn SwapStore>, max_pages: u64, chunk: u64) -> Swap {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the host gives random bytes");
        let have = store.pages().min(max_pages);
        let mut slots = Slots {
            used: Vec::new(),
            have: 0,
            cursor: 0,
            in_use: 0,
            want: have,
            stuck: false,
            stop: false,
        };
        slots.grown(have);
        Swap {
            store,
            max_pages,
            chunk: chunk.max(1),
            key,
            streams: AtomicU64::new(1),
            slots: Mutex::new(slots),
            changed: Condvar::new(),
        }
    }

    /// Slots handed out now.
    pub fn in_use(&self) -> u64 {
        self.slots.lock().in_use
    }

    /// Whether the grower has growing to do.
    pub fn growing(&self) -> bool {
        let s = self.slots.lock();
        s.want > s.have
    }

    /// Slots the store has.
    pub fn capacity(&self) -> u64 {
        self.slots.lock().have
    }

    /// Up to `max` consecutive free slots (at least one), waiting up to `wait` for the store
    /// to grow if none is free: (first, how many).
    pub fn alloc_run(&self, max: u64, wait: Duration) -> Result<(u64, u64), NoSlot> {
        let deadline = std::time::Instant::now() + wait;
        let mut s = self.slots.lock();
        loop {
            if let Some(run) = s.take_run(max.max(1)) {
                // Less than half a chunk left: the grower adds one ahead of need.
                if s.have - s.in_use < self.chunk / 2 && s.have < self.max_pages && s.want <= s.have && !s.stuck {
                    s.want = (s.have + self.chunk).min(self.max_pages);
                    self.changed.notify_all();
                }
                return Ok(run);
            }
            if s.have >= self.max_pages || s.stuck {
                return Err(NoSlot::Full);
            }
            s.want = s.want.max((s.have + self.chunk).min(self.max_pages));
            self.changed.notify_all();
            if self.changed.wait_until(&mut s, deadline).timed_out() {
                return Err(NoSlot::Growing);
            }
        }
    }

    pub fn free(&self, slot: u64) {
        let mut s = self.slots.lock();
        debug_assert!(
            slot < s.have && s.is_used(slot),
            "freeing slot {slot}, which is not handed out"
        );
        if slot < s.have && s.is_used(slot) {
            s.set(slot, false);
            s.in_use -= 1;
            s.stuck = false;
        }
    }

    /// Enciphers `pages` (whole pages) into `scratch` (as long) and writes them to the
    /// consecutive slots from `first`: where each lies.
    pub fn write_pages(&self, first: u64, pages: &[&[u8]], scratch: &mut [u8]) -> io::Result<Vec<Swapped>> {
        let mut at = Vec::with_capacity(pages.len());
        for (i, (page, out)) in pages.iter().zip(scratch.chunks_exact_mut(PAGE)).enumerate() {
            let stream = self.streams.fetch_add(1, Ordering::Relaxed);
            self.keystream(stream, out);
            for (o, p) in out.iter_mut().zip(page.iter()) {
                *o ^= p;
            }
            at.push(Swapped {
                slot: first + i as u64,
                stream,
            });
        }
        self.store.write_run(first, &scratch[..pages.len() * PAGE])?;
        Ok(at)
    }

    /// Reads the pages `at` (consecutive slots) into `pages`, deciphered; `scratch` is a page.
    pub fn read_pages(&self, at: &[Swapped], pages: &mut [u8], scratch: &mut [u8]) -> io::Result<()> {
        let Some(first) = at.first() else { return Ok(()) };
        debug_assert!(at.windows(2).all(|w| w[1].slot == w[0].slot + 1));
        self.store.read_run(first.slot, &mut pages[..at.len() * PAGE])?;
        for (a, page) in at.iter().zip(pages.chunks_exact_mut(PAGE)) {
            self.keystream(a.stream, scratch);
            for (p, k) in page.iter_mut().zip(scratch.iter()) {
                *p ^= k;
            }
        }
        Ok(())
    }

    fn keystream(&self, stream: u64, out: &mut [u8]) {
        let mut c = chacha20::ChaCha20Rng::from_seed(self.key);
        c.set_stream(stream);
        c.set_word_pos(0);
        c.fill_bytes(out);
    }

    /// The grower's loop: grows the store when asked, until [`Swap::stop`].
    pub fn grow_while_running(&self) {
        let mut s = self.slots.lock();
        loop {
            if s.stop {
                return;
            }
            if s.want > s.have {
                let want = s.want;
                drop(s);
                let got = self.store.grow(want);
                s = self.slots.lock();
                match got {
                    Ok(n) => s.grown(n.min(self.max_pages)),
                    // No room on the file system: the swap ends where it is.
                    Err(_) => {
                        s.want = s.have;
                        s.stuck = true;
                    }
                }
                self.changed.notify_all();
                continue;
            }
            self.changed.wait(&mut s);
        }
    }

    pub fn stop(&self) {
        self.slots.lock().stop = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_back_as_written_and_lie_enciphered() {
        let store = Arc::new(MemSwap::default());
        store.grow(4).unwrap();
        let swap = Swap::new(store.clone(), 4, 4);
        let page: Vec<u8> = (0..PAGE).map(|i| (i % 251) as u8).collect();
        let mut scratch = vec![0u8; PAGE];
        let (slot, _) = swap.alloc_run(1, Duration::ZERO).unwrap();
        let at = swap.write_pages(slot, &[&page], &mut scratch).unwrap()[0];
        let mut raw = vec![0u8; PAGE];
        store.read(slot, &mut raw).unwrap();
        assert_ne!(raw, page, "the store holds no plain page");
        let mut back = vec![0u8; PAGE];
        swap.read_pages(&[at], &mut back, &mut vec![0u8; PAGE]).unwrap();
        assert_eq!(back, page);
        // The same page written again goes under another stream.
        let again = swap.write_pages(slot, &[&page], &mut scratch).unwrap()[0];
        let mut raw2 = vec![0u8; PAGE];
        store.read(slot, &mut raw2).unwrap();
        assert_ne!(again.stream, at.stream);
        assert_ne!(raw, raw2);
    }

    #[test]
    fn slots_are_bounded_and_reused() {
        let store = Arc::new(MemSwap::default());
        store.grow(2).unwrap();
        let swap = Swap::new(store, 2, 2);
        let a = swap.alloc_run(1, Duration::ZERO).map(|r| r.0).unwrap();
        let b = swap.alloc_run(1, Duration::ZERO).map(|r| r.0).unwrap();
        assert_ne!(a, b);
        assert_eq!(swap.alloc_run(1, Duration::ZERO).map(|r| r.0), Err(NoSlot::Full));
        swap.free(a);
        assert_eq!(swap.alloc_run(1, Duration::ZERO).map(|r| r.0), Ok(a));
        assert_eq!(swap.in_use(), 2);
    }

    #[test]
    fn the_store_grows_on_its_own_thread() {
        let store = Arc::new(MemSwap::default());
        let swap = Arc::new(Swap::new(store.clone(), 8, 4));
        let grower = {
            let swap = swap.clone();
            std::thread::spawn(move || swap.grow_while_running())
        };
        let got: Vec<u64> = (0..8)
            .map(|_| swap.alloc_run(1, Duration::from_secs(10)).map(|r| r.0).unwrap())
            .collect();
        assert_eq!(got.len(), 8);
        assert_eq!(store.pages(), 8);
        assert_eq!(
            swap.alloc_run(1, Duration::from_millis(10)).map(|r| r.0),
            Err(NoSlot::Full)
        );
        swap.stop();
        grower.join().unwrap();
    }
}
