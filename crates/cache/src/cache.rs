//! The frame table: lookup, LRU, loading, eviction (with `vas.pick_victim` and Cao's rule),
//! read-ahead, dirty pages and write-back.
//!
//! The table itself is in [`table`], making room in [`eviction`], writing dirty pages in
//! [`writeback`]; lookup, loading and read-ahead here.
//!
//! One mutex guards the table. It is never held across I/O or a graft call: a frame being
//! loaded is marked so, and threads that need it wait on the condition variable.

use crate::lru::{Links, List, NIL};
use crate::points::{
    Candidates, PageHint, PickVictim, ReadAhead, VictimEnv, WRITEBACK_MAX, Writeback, WritebackArgs, page_id,
};
use crate::shadow::{VictimTry, VictimTryReport};
use crate::stats::{CacheCounters, CacheStats};
use crate::{Backing, ChunkStore, IoCtx, PageIo, Pid};
use parking_lot::{Condvar, Mutex, MutexGuard};
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use vino_blockdev::{AlignedBuf, BLOCK_SIZE, IoRequest, SharedClock, Ticket};
use vino_graft::abi::{self, Extents};
use vino_graft::{Access, GraftSlot, Runtime};

const BS: u64 = BLOCK_SIZE as u64;

/// Most blocks one read-ahead advice may bring in.
const MAX_PREFETCH_BLOCKS: u64 = 256;

/// Blocks of a read loaded together (1 MiB, the I/O scheduler's merge limit): a read of any
/// size goes to the device in requests this large, two windows in flight.
const READ_WINDOW_BLOCKS: u64 = 256;

/// Most dirty pages one write-back round copies and submits before it waits (16 MiB).
const WRITEBACK_BATCH: usize = 4096;

/// When the page to evict is dirty, up to this many of the least recently used dirty pages are
/// written with it, so a cache full of dirty pages pays one device round trip per batch rather
/// than one per page.
const EVICTION_CLEAN_BATCH: usize = 256;

/// How far from the cold end of the LRU list eviction looks for those pages.
const EVICTION_SCAN: usize = 4096;

/// Most pages one write-back request carries (1 MiB, the I/O scheduler's merge limit).
const WRITE_RUN_BLOCKS: usize = 256;

/// Pages one turn of write-behind writes: four requests of [`WRITE_RUN_BLOCKS`] in flight. (Eight
/// made a streaming `dd` write faster on one host and no faster on another.)
const WRITE_BEHIND_BATCH: usize = 4 * WRITE_RUN_BLOCKS;

/// Candidates in the first page `vas.pick_victim` is offered: most grafts choose among the
/// oldest few, and gathering costs every eviction (later pages hold `abi::VICTIM_MAX`).
const VICTIM_FIRST_PAGE: usize = 32;
/// Most of the owner's frames looked at to gather one page of `vas.pick_victim` candidates
/// (frames pinned, loading or dirty are passed over).
const VICTIM_SCAN: usize = 4 * abi::VICTIM_MAX;

#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Number of 4 KB frames.
    pub frames: usize,
    /// How often the write-back policy runs (`None`: only on `sync`). Its thread also writes
    /// behind a writer past half its share of dirty pages; without it writers are only
    /// throttled at their share.
    pub writeback_every: Option<Duration>,
    /// Where the ages of dirty pages come from (the machine's clock; a simulation's own).
    pub clock: SharedClock,
    /// Percent of the frames one process's writes may keep dirty (at least
    /// [`MIN_DIRTY_SHARE`] frames). A write past its share waits while the writer's own oldest
    /// dirty pages are written: the writer pays for its writes, and others' misses find clean
    /// pages to evict instead of waiting for its write-back.
    pub dirty_percent: u8,
    /// Free frames a background thread keeps made ahead of need, up to `frames` in all (0:
    /// none; each frame is made by the miss or write that first needs it). Making a frame
    /// touches its memory for the first time, and on a virtual machine that can cost 10-50 µs
    /// a page (the host backs the page then; 2 µs where the guest used it recently): a cache
    /// filling under a writer paid it on the writer's path, frame by frame.
    pub warm_ahead: usize,
}

/// The fewest frames a process may keep dirty, whatever the cache's size.
pub const MIN_DIRTY_SHARE: usize = 64;

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            frames: 1024,
            writeback_every: Some(Duration::from_secs(1)),
            clock: SharedClock::default(),
            dirty_percent: 25,
            warm_ahead: 0,
        }
    }
}

/// Counters to bump for an event on a page: the owner's, the file's, and the total.
macro_rules! count {
    ($t:expr, $owner:expr, $object:expr, $field:ident) => {{
        let t: &mut Table = $t;
        t.total.$field += 1;
        t.objects.entry($object).or_default().$field += 1;
        t.proc_mut($owner).counters.$field += 1;
    }};
}

/// Offers an access by `pid` to its shadow and its recording, if it has them.
#[inline]
fn shadow_sees(t: &mut Table, pid: Pid, key: PageKey, hit: bool) {
    if t.shadows + t.observed == 0 {
        return;
    }
    let Some(p) = t.procs.get_mut(&pid) else { return };
    let page = page_id(key.0, key.1);
    if let Some(shadow) = &p.shadow {
        shadow.offer(page, hit, p.pages.len);
    }
    if let Some(o) = &p.observed
        && !o.access(page, hit, p.pages.len)
    {
        // The recording ended or filled: it needs no more.
        p.observed = None;
        t.observed -= 1;
    }
}

mod eviction;
mod streams;
pub use streams::STREAM_WRITERS;
mod table;
mod writeback;

use eviction::{WarmSignal, spawn_warmer};
use table::{PageKey, State, Table, object_range};
use writeback::{FlushSignal, spawn_writeback};

/// The page cache. Shared by every process of the kernel.
pub struct PageCache {
    /// The cache itself, for the threads it starts.
    me: std::sync::Weak<PageCache>,
    /// Stream chunks waiting for background write-back, by owner.
    stream_queues: Mutex<streams::StreamQueues>,
    table: Mutex<Table>,
    changed: Condvar,
    io: Arc<dyn PageIo>,
    runtime: Runtime,
    writeback: Arc<GraftSlot<Writeback>>,
    /// How writers reach the write-back thread (and how dropping the cache stops it).
    flusher: Arc<FlushSignal>,
    /// Between allocations and the thread that makes frames ahead of need
    /// (`CacheConfig::warm_ahead`).
    warmer: Arc<WarmSignal>,
    config: CacheConfig,
    /// Dirty pages one process's writes may keep (`config.dirty_percent`).
    dirty_share: usize,
    /// Who pays for the write-back thread's rounds ([`PageCache::charge_writeback_to`]).
    charger: OnceLock<WorkCharger>,
    /// Processes with a `vas.pick_victim` shadow (the table's count, read without its lock by
    /// the pager's evictions, [`PageCache::victim_try`]).
    victim_tries: std::sync::atomic::AtomicUsize,
}

/// Charges a process for CPU the kernel spent on its behalf.
pub type WorkCharger = Box<dyn Fn(Pid, Duration) + Send + Sync>;

impl PageCache {
    pub fn new(config: CacheConfig, io: Arc<dyn PageIo>, runtime: &Runtime) -> Arc<PageCache> {
        assert!(config.frames > 0, "a cache needs frames");
        assert!(config.frames < u32::MAX as usize, "frame numbers are 32 bits");
        let table = Table {
            frames: Vec::new(),
            capacity: config.frames,
            global: Vec::new(),
            owned: Vec::new(),
            lru: List::default(),
            free: Vec::new(),
            map: FxHashMap::default(),
            keys: BTreeSet::new(),
            dirty: BTreeSet::new(),
            procs: FxHashMap::default(),
            objects: FxHashMap::default(),
            placeholders: FxHashMap::default(),
            streams: FxHashMap::default(),
            total: CacheCounters::default(),
            shadows: 0,
            observed: 0,
        };
        let cache = Arc::new_cyclic(|me| PageCache {
            me: me.clone(),
            stream_queues: Mutex::default(),
            table: Mutex::new(table),
            changed: Condvar::new(),
            io,
            runtime: runtime.clone(),
            writeback: Arc::new(GraftSlot::new(runtime, Arc::new(()), Access::Privileged, None)),
            flusher: Arc::new(FlushSignal::default()),
            warmer: Arc::new(WarmSignal::default()),
            dirty_share: (config.frames * usize::from(config.dirty_percent.min(100)) / 100).max(MIN_DIRTY_SHARE),
            config,
            charger: OnceLock::new(),
            victim_tries: std::sync::atomic::AtomicUsize::new(0),
        });
        if let Some(every) = cache.config.writeback_every {
            let clock = cache.config.clock.clone();
            spawn_writeback(Arc::downgrade(&cache), cache.flusher.clone(), every, clock);
        }
        if cache.config.warm_ahead > 0 {
            spawn_warmer(Arc::downgrade(&cache), cache.warmer.clone(), cache.config.warm_ahead);
        }
        cache
    }

    /// The cache's clock, in nanoseconds (for the ages of dirty pages).
    fn now_ns(&self) -> u64 {
        u64::try_from(self.config.clock.monotonic().as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Has each round of [`PageCache::run_writeback`] charged, through `charger`, to the
    /// processes whose writes dirtied the pages it wrote: the CPU the round took on its thread
    /// (the policy's graft included), split by their pages. Set once; later calls are ignored.
    pub fn charge_writeback_to(&self, charger: WorkCharger) {
        let _ = self.charger.set(charger);
    }

    /// The global `cache.writeback` graftpoint.
    pub fn writeback_slot(&self) -> &Arc<GraftSlot<Writeback>> {
        &self.writeback
    }

    /// Makes `pid` known to the cache and returns its `vas.pick_victim` graftpoint. A recording
    /// there is fed the process's accesses ([`vino_graft::record::Observations`]).
    pub fn register_process(&self, pid: Pid) -> Arc<GraftSlot<PickVictim>> {
        let mut t = self.table.lock();
        let proc = t.proc_mut(pid);
        proc.victim
            .get_or_insert_with(|| {
                let env = Arc::new(VictimEnv::new(pid));
                let slot = GraftSlot::new(&self.runtime, env, Access::Process(pid), None);
                let cache = self.me.clone();
                slot.observe_with(Box::new(move |observations| {
                    if let Some(cache) = cache.upgrade() {
                        cache.observe(pid, observations);
                    }
                }));
                Arc::new(slot)
            })
            .clone()
    }

    /// Feeds `pid`'s accesses to a recording of its `vas.pick_victim` from now on.
    fn observe(&self, pid: Pid, observations: Arc<vino_graft::record::Observations>) {
        let mut t = self.table.lock();
        let old = t.proc_mut(pid).observed.replace(observations);
        t.observed += usize::from(old.is_none());
    }

    /// Starts `wasm`, a `vas.pick_victim` graft, in shadow beside `pid`'s live policy, on a
    /// ghost of its pages (see [`crate::shadow`]); it replaces a shadow already there. The
    /// caller checks that `owner` may graft `pid`'s graftpoint.
    pub fn try_victim(
        &self,
        pid: Pid,
        wasm: &[u8],
        owner: vino_graft::Owner,
        sample: u32,
        queue: usize,
    ) -> Result<Arc<VictimTry>, vino_graft::LoadError> {
        let slot = self.register_process(pid);
        let shadow = VictimTry::start(&slot, pid, wasm, owner, sample, queue)?;
        let old = {
            let mut t = self.table.lock();
            let old = t.proc_mut(pid).shadow.replace(shadow.clone());
            t.shadows += usize::from(old.is_none());
            self.victim_tries.store(t.shadows, std::sync::atomic::Ordering::Relaxed);
            old
        };
        if let Some(old) = old {
            old.stop();
        }
        Ok(shadow)
    }

    /// `pid`'s shadow, if one runs (the table is locked only if some process has one).
    pub fn victim_try(&self, pid: Pid) -> Option<Arc<VictimTry>> {
        if self.victim_tries.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        self.table.lock().procs.get(&pid).and_then(|p| p.shadow.clone())
    }

    /// Stops `pid`'s shadow, once it has drained what the live path offered it: what it found.
    pub fn try_victim_stop(&self, pid: Pid) -> Option<VictimTryReport> {
        let shadow = {
            let mut t = self.table.lock();
            let old = t.procs.get_mut(&pid).and_then(|p| p.shadow.take());
            t.shadows -= usize::from(old.is_some());
            self.victim_tries.store(t.shadows, std::sync::atomic::Ordering::Relaxed);
            old
        }?;
        Some(shadow.stop())
    }

    /// Forgets a process's graft (it exited); its pages stay cached, owned by nobody special.
    pub fn unregister_process(&self, pid: Pid) {
        self.try_victim_stop(pid);
        let mut t = self.table.lock();
        let t = &mut *t;
        if let Some(p) = t.procs.get_mut(&pid) {
            t.observed -= usize::from(p.observed.take().is_some());
            if let Some(slot) = p.victim.take() {
                slot.unload();
            }
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` of `object` (never past its size); returns how
    /// many. Then asks the open file's read-ahead policy what to prefetch. An error getting the
    /// size, finding a block or reading one fails the read.
    pub fn read(
        &self,
        ctx: &IoCtx,
        object: u64,
        backing: &dyn Backing,
        offset: u64,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let size = backing.size()?;
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = buf.len().min((size - offset) as usize);
        let (first, end) = (offset / BS, (offset + n as u64).div_ceil(BS));
        let window = self.read_window();
        if end - first > 1 {
            // Several pages: the missing ones of each window are read together (adjacent ones
            // merge into one device request) before the copy below waits for each.
            self.load_demand(ctx.pid, object, backing, first, end.min(first + window));
        }
        let mut done = 0;
        for start in (first..end).step_by(window as usize) {
            // The next window goes to the device before this one is waited for, so the device
            // is never idle while the read copies.
            let next = start + window;
            if next < end {
                self.load_demand(ctx.pid, object, backing, next, end.min(next + window));
            }
            let upto = (end.min(next) * BS - offset).min(n as u64) as usize;
            while done < upto {
                let pos = offset + done as u64;
                let (index, within) = (pos / BS, (pos % BS) as usize);
                let take = (BLOCK_SIZE - within).min(upto - done);
                let mut t = self.table.lock();
                let f = self.pin(&mut t, ctx.pid, object, backing, index)?;
                buf[done..done + take].copy_from_slice(&t.frames[f as usize].buf[within..within + take]);
                self.unpin(&mut t, f);
                done += take;
            }
        }
        if let Some(ra) = ctx.ra {
            let advice = ra.advise(offset, n, size);
            for extents in [&advice.prefetched, &advice.decided] {
                self.load(ctx.pid, object, backing, extents, false);
            }
        }
        self.table.lock().checked();
        Ok(n)
    }

    /// Writes `data` at `offset` of `object`. Every block written must already have a device
    /// block (`backing.locate` returns `Some`): the file system allocates before it writes.
    pub fn write(&self, ctx: &IoCtx, object: u64, backing: &dyn Backing, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_pages(ctx, object, backing, offset, data, true)
    }

    /// As [`PageCache::write`], but never waits for the writer's share of dirty pages to be
    /// written: for a caller that holds what others wait for (the file system's data gate) and
    /// has waited first, with [`PageCache::throttle`].
    pub fn write_unthrottled(
        &self,
        ctx: &IoCtx,
        object: u64,
        backing: &dyn Backing,
        offset: u64,
        data: &[u8],
    ) -> io::Result<()> {
        self.write_pages(ctx, object, backing, offset, data, false)
    }

    /// Waits while `pid` keeps more than its share of dirty pages, writing its own oldest ones
    /// (of `object` first), as a write past the share does.
    pub fn throttle(&self, pid: Pid, object: u64) {
        let mut t = self.table.lock();
        // Bounded: pages written again meanwhile do not keep the writer here for ever.
        for _ in 0..64 {
            if t.procs.get(&pid).is_none_or(|p| p.dirty <= self.dirty_share) {
                break;
            }
            let batch = t.own_dirty(pid, object, EVICTION_CLEAN_BATCH, EVICTION_SCAN);
            if batch.is_empty() || self.write_frames(&mut t, &batch).is_err() {
                break;
            }
        }
        t.checked();
    }

    fn write_pages(
        &self,
        ctx: &IoCtx,
        object: u64,
        backing: &dyn Backing,
        offset: u64,
        data: &[u8],
        throttled: bool,
    ) -> io::Result<()> {
        // A stream object's pages have no device block: their chunk is stored whole. Asked once
        // per write, not per page (the table's lock is the cache's hottest).
        let stream = self.is_stream(object);
        let mut done = 0;
        while done < data.len() {
            let pos = offset + done as u64;
            let (index, within) = (pos / BS, (pos % BS) as usize);
            let take = (BLOCK_SIZE - within).min(data.len() - done);
            let dev = if stream {
                None
            } else {
                Some(backing.locate(index)?.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("block {index} of object {object} has no device block"),
                    )
                })?)
            };
            let mut t = self.table.lock();
            let f = if take == BLOCK_SIZE {
                self.pin_for_overwrite(&mut t, ctx.pid, object, index, dev)?
            } else {
                self.pin(&mut t, ctx.pid, object, backing, index)?
            };
            let fr = &mut t.frames[f as usize];
            fr.buf[within..within + take].copy_from_slice(&data[done..done + take]);
            fr.dev = dev;
            fr.generation += 1;
            t.mark_dirty(f, self.now_ns(), ctx.pid);
            self.unpin(&mut t, f);
            if throttled && t.procs[&ctx.pid].dirty > self.dirty_share {
                // Past its share: the writer waits for its own oldest pages to go out.
                // A failed write leaves the pages dirty: sync and eviction report it.
                let batch = t.own_dirty(ctx.pid, object, EVICTION_CLEAN_BATCH, EVICTION_SCAN);
                let _ = self.write_frames(&mut t, &batch);
            }
            t.checked();
            done += take;
        }
        self.want_write_behind(&self.table.lock(), ctx.pid, object);
        Ok(())
    }

    /// Writes every dirty page of `object` and waits until the device has them (fsync's data part).
    pub fn sync_object(&self, object: u64) -> io::Result<()> {
        self.write_back(&[object_range(object)])?;
        self.barrier()
    }

    /// Writes every dirty page and flushes the device.
    pub fn sync_all(&self) -> io::Result<()> {
        self.write_back(&[(0, 0)..=(u64::MAX, u64::MAX)])?;
        self.barrier()
    }

    /// Writes every dirty page of these objects and waits for the writes, without flushing the
    /// device: for a caller that flushes next (a journal commit writing the data of the files
    /// it allocated for first). Adjacent pages of all of them go to the device together.
    pub fn write_objects(&self, objects: &[u64]) -> io::Result<()> {
        let ranges: Vec<_> = objects.iter().map(|&o| object_range(o)).collect();
        self.write_back(&ranges)
    }

    /// Flushes the device. The kernel's I/O scheduler sends no flush when no write went to the
    /// device since the last one, so a stream of syncs is not a stream of device flushes.
    fn barrier(&self) -> io::Result<()> {
        self.io.submit(IoRequest::flush()).wait().map(|_| ())
    }

    /// Drops the pages of `object` from block `from` on (truncate, unlink). Dirty data there is
    /// discarded: the file system is freeing those blocks.
    pub fn invalidate(&self, object: u64, from: u64) {
        self.invalidate_range(object, from, u64::MAX);
    }

    /// Drops the pages of `object` in blocks `[first, end)` (a punched hole, a range zeroed on
    /// the device), as [`PageCache::invalidate`] does; `end` `u64::MAX`: to the last.
    pub fn invalidate_range(&self, object: u64, first: u64, end: u64) {
        if first >= end {
            return;
        }
        let last = if end == u64::MAX { end } else { end - 1 };
        let mut t = self.table.lock();
        loop {
            let doomed: Vec<u32> = t
                .keys
                .range((object, first)..=(object, last))
                .map(|k| t.map[k])
                .collect();
            if doomed.is_empty() {
                t.checked();
                return;
            }
            let mut waited = false;
            for f in doomed {
                let fr = &t.frames[f as usize];
                let in_flight = fr.state == State::Loading && !fr.ticket.as_ref().is_some_and(Ticket::is_done);
                if fr.pins > 0 || fr.writing || in_flight {
                    waited = true;
                    continue;
                }
                t.settle(f);
                if t.frames[f as usize].state == State::Free {
                    continue;
                }
                t.mark_clean(f);
                t.remove(f);
                t.free.push(f);
            }
            if waited {
                self.changed.wait_for(&mut t, Duration::from_millis(1));
            }
        }
    }

    /// The counters of one process.
    pub fn process_counters(&self, pid: Pid) -> CacheCounters {
        self.table
            .lock()
            .procs
            .get(&pid)
            .map(|p| p.counters)
            .unwrap_or_default()
    }

    /// The counters of one file.
    pub fn object_counters(&self, object: u64) -> CacheCounters {
        self.table.lock().objects.get(&object).copied().unwrap_or_default()
    }

    pub fn stats(&self) -> CacheStats {
        let t = self.table.lock();
        CacheStats {
            frames: t.capacity,
            made: t.frames.len(),
            resident: t.map.len(),
            dirty: t.dirty.len(),
            total: t.total,
        }
    }

    /// Pages of `pid` resident now.
    pub fn resident_pages(&self, pid: Pid) -> usize {
        self.table.lock().procs.get(&pid).map_or(0, |p| p.pages.len)
    }

    /// Checks the frame table's invariants (see `Table::check`) and panics if one is broken.
    /// Tests call it between steps; debug builds and the `invariants` feature also check after
    /// every read, write, invalidation and write-back.
    pub fn check_invariants(&self) {
        self.table.lock().check();
    }

    /// True if block `index` of `object` is cached (loaded or loading).
    pub fn contains(&self, object: u64, index: u64) -> bool {
        self.table.lock().map.contains_key(&(object, index))
    }

    /// Drops every clean page (for experiments that start cold). Dirty pages are written first.
    pub fn drop_clean(&self) -> io::Result<()> {
        self.sync_all()?;
        let mut t = self.table.lock();
        let all: Vec<u32> = t.map.values().copied().collect();
        for f in all {
            if !t.evictable(f) {
                continue;
            }
            t.settle(f);
            if t.frames[f as usize].state == State::Valid && t.frames[f as usize].dirty_since.is_none() {
                t.remove(f);
                t.free.push(f);
            }
        }
        t.placeholders.clear();
        t.checked();
        Ok(())
    }

    /// Finds or loads a page and pins it (a pinned page is not evicted).
    fn pin(
        &self,
        t: &mut MutexGuard<'_, Table>,
        pid: Pid,
        object: u64,
        backing: &dyn Backing,
        index: u64,
    ) -> io::Result<u32> {
        let key = (object, index);
        loop {
            if let Some(&f) = t.map.get(&key) {
                match t.frames[f as usize].state {
                    State::Valid => {
                        t.touch(f);
                        let owner = t.frames[f as usize].owner;
                        if std::mem::take(&mut t.frames[f as usize].prefetched) {
                            count!(t, owner, object, prefetch_used);
                        }
                        let hit = !std::mem::take(&mut t.frames[f as usize].demanded);
                        if hit {
                            count!(t, pid, object, hits);
                        }
                        shadow_sees(t, pid, key, hit);
                        t.frames[f as usize].pins += 1;
                        return Ok(f);
                    }
                    State::Loading => {
                        if let Some(ticket) = t.frames[f as usize].ticket.take() {
                            t.frames[f as usize].pins += 1;
                            let result = MutexGuard::unlocked(t, || ticket.wait());
                            t.frames[f as usize].pins -= 1;
                            let r = t.finish_load(f, result);
                            self.changed.notify_all();
                            r?;
                        } else {
                            self.changed.wait(t);
                        }
                        continue;
                    }
                    State::Free => unreachable!("a free frame is in the map"),
                }
            }
            if let Some(store) = t.streams.get(&object).cloned() {
                let limit = MutexGuard::unlocked(t, || backing.size())?.div_ceil(BS);
                self.load_chunk(t, pid, object, &store, index, limit)?;
                continue;
            }
            let dev = MutexGuard::unlocked(t, || backing.locate(index))?;
            if t.map.contains_key(&key) {
                continue;
            }
            let f = self.allocate(t, pid, key)?;
            if t.map.contains_key(&key) {
                t.free.push(f);
                continue;
            }
            count!(t, pid, object, misses);
            t.install(f, key, pid, dev);
            match dev {
                None => {
                    t.frames[f as usize].buf.fill(0);
                }
                Some(block) => {
                    let buf = std::mem::replace(&mut t.frames[f as usize].buf, AlignedBuf::new(0));
                    t.frames[f as usize].state = State::Loading;
                    t.frames[f as usize].pins += 1;
                    let read = IoRequest::read_into(block, buf).awaited();
                    let result = MutexGuard::unlocked(t, || self.io.submit(read).wait());
                    t.frames[f as usize].pins -= 1;
                    let r = t.finish_load(f, result);
                    self.changed.notify_all();
                    r?;
                }
            }
            t.frames[f as usize].pins += 1;
            shadow_sees(t, pid, key, false);
            return Ok(f);
        }
    }

    /// A page about to be overwritten whole: found, or made without reading the device.
    fn pin_for_overwrite(
        &self,
        t: &mut MutexGuard<'_, Table>,
        pid: Pid,
        object: u64,
        index: u64,
        dev: Option<u64>,
    ) -> io::Result<u32> {
        let key = (object, index);
        loop {
            if let Some(&f) = t.map.get(&key) {
                if t.frames[f as usize].state == State::Loading {
                    if let Some(ticket) = t.frames[f as usize].ticket.take() {
                        let result = MutexGuard::unlocked(t, || ticket.wait());
                        let _ = t.finish_load(f, result);
                        self.changed.notify_all();
                    } else {
                        self.changed.wait(t);
                    }
                    continue;
                }
                t.touch(f);
                t.frames[f as usize].prefetched = false;
                t.frames[f as usize].pins += 1;
                return Ok(f);
            }
            let f = self.allocate(t, pid, key)?;
            if t.map.contains_key(&key) {
                t.free.push(f);
                continue;
            }
            t.install(f, key, pid, dev);
            t.frames[f as usize].pins += 1;
            return Ok(f);
        }
    }

    fn unpin(&self, t: &mut MutexGuard<'_, Table>, f: u32) {
        let fr = &mut t.frames[f as usize];
        debug_assert!(fr.pins > 0);
        fr.pins -= 1;
        if fr.pins == 0 {
            self.changed.notify_all();
        }
    }

    /// How many blocks of a read are loaded together: 1 MiB (the I/O scheduler's merge limit),
    /// or a quarter of the cache if that is less, so that two windows in flight leave room for
    /// everyone else's pages and a read larger than the cache streams through it.
    fn read_window(&self) -> u64 {
        READ_WINDOW_BLOCKS.min(self.config.frames as u64 / 4).max(1)
    }

    /// Starts the reads of blocks `first..end` of `object` that are not cached (a read's own
    /// pages: their misses are counted).
    fn load_demand(&self, pid: Pid, object: u64, backing: &dyn Backing, first: u64, end: u64) {
        let mut blocks = Extents::new();
        blocks.push(vino_graft::abi::Extent {
            off: first * BS,
            len: (end - first) * BS,
        });
        self.load(pid, object, backing, &blocks, true);
    }

    /// Starts reads of the blocks in `extents` that are not cached, without waiting for them:
    /// read-ahead, or (`demand`) the pages of a read about to wait for them, whose misses are
    /// counted here.
    fn load(&self, pid: Pid, object: u64, backing: &dyn Backing, extents: &Extents, demand: bool) {
        if self.is_stream(object) {
            // A stream object's pages come a chunk at a time, when a read needs one (`pin`).
            return;
        }
        // The cap bounds read-ahead only: a read's own pages come in windows of
        // [`PageCache::read_window`] blocks, whatever the read's size.
        let mut budget = if demand { u64::MAX } else { MAX_PREFETCH_BLOCKS };
        // Frames installed as loading, and their reads: submitted together at the end, so the
        // scheduler can merge adjacent ones. Until then a reader of one of these pages waits on
        // the condition variable (a loading frame without a ticket).
        let mut batch: Vec<(u32, IoRequest)> = Vec::new();
        'extents: for e in extents.as_slice() {
            let (first, last) = (e.off / BS, (e.off + e.len).div_ceil(BS));
            for index in first..last {
                if budget == 0 {
                    break 'extents;
                }
                budget -= 1;
                if self.table.lock().map.contains_key(&(object, index)) {
                    continue;
                }
                let block = match backing.locate(index) {
                    Ok(Some(block)) => block,
                    Ok(None) => continue,
                    // Read-ahead is advice: the read it follows succeeded; stop here.
                    Err(_) => break 'extents,
                };
                let mut t = self.table.lock();
                let key = (object, index);
                if t.map.contains_key(&key) {
                    continue;
                }
                // Taking a frame may wait for frames to be released, and these reads' frames
                // are released only once submitted: so with reads held, take one only if it
                // needs no wait, else submit them first. (Evicting a clean page or writing a
                // dirty one waits for nothing held here, so a full cache still reads a
                // sequential run in one batch.)
                let f = match self.allocate_within(&mut t, pid, key, batch.is_empty()) {
                    Ok(Some(f)) => Ok(f),
                    Ok(None) => {
                        drop(t);
                        self.submit_loads(&mut batch);
                        t = self.table.lock();
                        if t.map.contains_key(&key) {
                            continue;
                        }
                        self.allocate(&mut t, pid, key)
                    }
                    Err(e) => Err(e),
                };
                let Ok(f) = f else {
                    break 'extents;
                };
                if t.map.contains_key(&key) {
                    t.free.push(f);
                    continue;
                }
                t.install(f, key, pid, Some(block));
                if demand {
                    count!(&mut t, pid, object, misses);
                } else {
                    count!(&mut t, pid, object, prefetched);
                }
                let buf = std::mem::replace(&mut t.frames[f as usize].buf, AlignedBuf::new(0));
                let fr = &mut t.frames[f as usize];
                fr.state = State::Loading;
                fr.prefetched = !demand;
                fr.demanded = demand;
                // Pinned until its ticket is set, so no eviction finds it loading without one.
                fr.pins += 1;
                let read = IoRequest::read_into(block, buf);
                batch.push((f, if demand { read.awaited() } else { read }));
            }
        }
        self.submit_loads(&mut batch);
    }

    /// Submits the reads of frames installed as loading (pinned, without a ticket) together,
    /// gives each frame its ticket and unpins it.
    fn submit_loads(&self, batch: &mut Vec<(u32, IoRequest)>) {
        if batch.is_empty() {
            return;
        }
        let (frames, requests): (Vec<u32>, Vec<IoRequest>) = std::mem::take(batch).into_iter().unzip();
        let tickets = self.io.submit_batch(requests);
        let mut t = self.table.lock();
        for (f, ticket) in frames.into_iter().zip(tickets) {
            let fr = &mut t.frames[f as usize];
            fr.ticket = Some(ticket);
            fr.pins -= 1;
        }
        self.changed.notify_all();
    }
}

impl Drop for PageCache {
    fn drop(&mut self) {
        // Under the lock the thread checks the flag with, so the wake-up cannot fall between
        // its check and its wait.
        let wanted = self.flusher.wanted.lock();
        self.flusher.stop.store(true, Ordering::Relaxed);
        self.flusher.wake.notify_all();
        drop(wanted);
        self.warmer.stop();
    }
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache").field("config", &self.config).finish()
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<PageCache>();
    check::<ReadAhead>();
}
