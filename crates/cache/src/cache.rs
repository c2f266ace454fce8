//! The frame table: lookup, LRU, loading, eviction (with `vas.pick_victim` and Cao's rule),
//! read-ahead, dirty pages and write-back.
//!
//! One mutex guards the table. It is never held across I/O or a graft call: a frame being
//! loaded is marked so, and threads that need it wait on the condition variable.

use crate::lru::{Links, List, NIL};
use crate::points::{Candidates, PickVictim, ReadAhead, WRITEBACK_MAX, Writeback, WritebackArgs, page_id};
use crate::stats::{CacheCounters, CacheStats};
use crate::{Backing, IoCtx, PageIo, Pid};
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
use vino_graft::{Access, GraftSlot, PolicyKind, Runtime};

const BS: u64 = BLOCK_SIZE as u64;

/// Most blocks one read-ahead advice may bring in.
const MAX_PREFETCH_BLOCKS: u64 = 256;

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

type PageKey = (u64, u64);

/// Every page of `object`, as a range of keys.
fn object_range(object: u64) -> RangeInclusive<PageKey> {
    (object, 0)..=(object, u64::MAX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// A read is in flight; `ticket` holds it until someone waits for it.
    Loading,
    Valid,
}

struct Frame {
    key: PageKey,
    owner: Pid,
    state: State,
    ticket: Option<Ticket>,
    buf: AlignedBuf,
    /// Device block of the page (None for a hole that has not been written).
    dev: Option<u64>,
    dirty_since: Option<u64>,
    /// Whose write made the page dirty (valid while `dirty_since` is set).
    dirtier: Pid,
    /// Bumped by every write, so a write-back knows whether it wrote the latest data.
    generation: u64,
    writing: bool,
    /// Brought in by read-ahead and not used yet.
    prefetched: bool,
    /// Being loaded for a read that counted its miss already: its first use is not a hit.
    demanded: bool,
    pins: u32,
}

impl Frame {
    fn empty() -> Frame {
        Frame::empty_with(AlignedBuf::new(1))
    }

    /// A free frame holding `buf`.
    fn empty_with(buf: AlignedBuf) -> Frame {
        Frame {
            key: (0, 0),
            owner: 0,
            state: State::Free,
            ticket: None,
            buf,
            dev: None,
            dirty_since: None,
            dirtier: 0,
            generation: 0,
            writing: false,
            prefetched: false,
            demanded: false,
            pins: 0,
        }
    }
}

struct Proc {
    /// The process's pages, least recently used first, except that pages its
    /// `vas.pick_victim` graft passed over count as used then ([`Table::pass_over`]).
    pages: List,
    /// Dirty pages this process's writes made (whoever owns them).
    dirty: usize,
    victim: Option<Arc<GraftSlot<PickVictim>>>,
    counters: CacheCounters,
}

struct Table {
    /// Frames made so far; they are made on first need, up to `capacity`, so a large cache costs
    /// memory only as it fills.
    frames: Vec<Frame>,
    capacity: usize,
    global: Vec<Links>,
    owned: Vec<Links>,
    lru: List,
    free: Vec<u32>,
    map: FxHashMap<PageKey, u32>,
    /// The keys of `map` in order, for the pages of one file (truncate, unlink).
    keys: BTreeSet<PageKey>,
    /// The dirty pages, in order: a file's are found without a scan, and adjacent ones are
    /// written together.
    dirty: BTreeSet<PageKey>,
    procs: FxHashMap<Pid, Proc>,
    objects: FxHashMap<u64, CacheCounters>,
    /// Cao's placeholders: page the graft evicted -> page the kernel had chosen (kept instead).
    placeholders: FxHashMap<PageKey, PageKey>,
    total: CacheCounters,
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

impl Table {
    fn proc_mut(&mut self, pid: Pid) -> &mut Proc {
        self.procs.entry(pid).or_insert_with(|| Proc {
            pages: List::default(),
            dirty: 0,
            victim: None,
            counters: CacheCounters::default(),
        })
    }

    fn evictable(&self, f: u32) -> bool {
        let fr = &self.frames[f as usize];
        fr.pins == 0
            && !fr.writing
            && (fr.state == State::Valid
                || (fr.state == State::Loading && fr.ticket.as_ref().is_some_and(Ticket::is_done)))
    }

    fn touch(&mut self, f: u32) {
        let owner = self.frames[f as usize].owner;
        self.lru.touch(&mut self.global, f);
        let mut pages = self.procs.get(&owner).map(|p| p.pages).expect("owner has a list");
        pages.touch(&mut self.owned, f);
        self.proc_mut(owner).pages = pages;
    }

    /// Moves the pages a `vas.pick_victim` graft passed over before its choice behind the
    /// owner's other pages, as if the owner had just used them (CLOCK's second chance): the
    /// next eviction's candidates start with pages not yet looked at. Without it a graft that
    /// keeps many pages (look-ahead eviction keeping what the next records need) was offered the
    /// same kept pages first at every eviction, and its evictions cost time in proportion to
    /// everything it kept. Only the owner's order moves: the global LRU order, which decides
    /// between processes, is not a graft's to change. Pages no longer the owner's are left.
    fn pass_over(&mut self, owner: Pid, passed: &[(u32, PageKey)]) {
        if passed.is_empty() {
            return;
        }
        let Some(mut pages) = self.procs.get(&owner).map(|p| p.pages) else {
            return;
        };
        for &(f, key) in passed {
            if self.map.get(&key) == Some(&f) && self.frames[f as usize].owner == owner {
                pages.touch(&mut self.owned, f);
            }
        }
        self.proc_mut(owner).pages = pages;
    }

    fn install(&mut self, f: u32, key: PageKey, owner: Pid, dev: Option<u64>) {
        let fr = &mut self.frames[f as usize];
        debug_assert_eq!(fr.state, State::Free);
        *fr = Frame {
            key,
            owner,
            dev,
            state: State::Valid,
            buf: std::mem::replace(&mut fr.buf, AlignedBuf::new(0)),
            ..Frame::empty_with(AlignedBuf::new(0))
        };
        self.map.insert(key, f);
        self.keys.insert(key);
        self.lru.push_back(&mut self.global, f);
        let mut pages = self.proc_mut(owner).pages;
        pages.push_back(&mut self.owned, f);
        self.proc_mut(owner).pages = pages;
    }

    /// Takes a clean, evictable page out of the table; the frame is the caller's.
    fn remove(&mut self, f: u32) {
        let (key, owner, prefetched) = {
            let fr = &self.frames[f as usize];
            (fr.key, fr.owner, fr.prefetched)
        };
        self.mark_clean(f);
        self.map.remove(&key);
        self.keys.remove(&key);
        self.lru.remove(&mut self.global, f);
        let mut pages = self.proc_mut(owner).pages;
        pages.remove(&mut self.owned, f);
        self.proc_mut(owner).pages = pages;
        if prefetched {
            count!(self, owner, key.0, prefetch_wasted);
        }
        let fr = &mut self.frames[f as usize];
        fr.state = State::Free;
        fr.dirty_since = None;
        fr.prefetched = false;
        fr.demanded = false;
        fr.ticket = None;
    }

    /// Marks a mapped page dirty (if it is not already) as of `now`, by `writer`'s write.
    fn mark_dirty(&mut self, f: u32, now: u64, writer: Pid) {
        let fr = &mut self.frames[f as usize];
        if fr.dirty_since.is_none() {
            fr.dirty_since = Some(now);
            fr.dirtier = writer;
            let key = fr.key;
            self.dirty.insert(key);
            self.proc_mut(writer).dirty += 1;
        }
    }

    fn mark_clean(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        if fr.dirty_since.take().is_some() {
            let (key, writer) = (fr.key, fr.dirtier);
            self.dirty.remove(&key);
            self.proc_mut(writer).dirty -= 1;
        }
    }

    /// A valid page that nobody has pinned or is writing: one a write-back may take.
    fn writable(&self, f: u32) -> bool {
        let fr = &self.frames[f as usize];
        fr.state == State::Valid && !fr.writing && fr.pins == 0
    }

    /// Up to `max` of `writer`'s dirty pages that could be written now, those of `object`
    /// first (adjacent, so they go out in few requests), looking at most `scan` dirty pages in
    /// each of the two passes.
    fn own_dirty(&self, writer: Pid, object: u64, max: usize, scan: usize) -> Vec<u32> {
        let own = |k: &PageKey| {
            let f = self.map[k];
            (self.frames[f as usize].dirtier == writer && self.writable(f)).then_some(f)
        };
        let mut out: Vec<u32> = self
            .dirty
            .range(object_range(object))
            .take(scan)
            .filter_map(own)
            .take(max)
            .collect();
        if out.len() < max {
            let room = max - out.len();
            let others = self.dirty.iter().take(scan).filter(|k| k.0 != object);
            out.extend(others.filter_map(own).take(room));
        }
        out
    }

    /// A frame that holds no page: one from the free list, or a new one while the table is
    /// below its capacity.
    fn take_free(&mut self) -> Option<u32> {
        if let Some(f) = self.free.pop() {
            return Some(f);
        }
        if self.frames.len() >= self.capacity {
            return None;
        }
        Some(self.add_frame(Frame::empty()))
    }

    /// Makes `frame` the table's next frame; the caller files it (free list or map).
    fn add_frame(&mut self, frame: Frame) -> u32 {
        debug_assert!(self.frames.len() < self.capacity);
        self.frames.push(frame);
        self.global.push(Links::default());
        self.owned.push(Links::default());
        (self.frames.len() - 1) as u32
    }

    /// Files made-ahead frames' buffers as free frames, as many as the capacity has room for.
    fn add_free(&mut self, bufs: Vec<AlignedBuf>) {
        for buf in bufs {
            if self.frames.len() >= self.capacity {
                break;
            }
            let f = self.add_frame(Frame::empty_with(buf));
            self.free.push(f);
        }
    }

    /// Up to `max` dirty pages that could be written now (not pinned or being written), from
    /// the cold end of the LRU list, looking at most `scan` pages deep.
    fn cold_dirty(&self, max: usize, scan: usize) -> Vec<u32> {
        self.lru
            .iter(&self.global)
            .take(scan)
            .filter(|&f| self.frames[f as usize].dirty_since.is_some() && self.writable(f))
            .take(max)
            .collect()
    }

    /// Settles a read-ahead whose I/O is done but that nobody waited for.
    fn settle(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        if fr.state == State::Loading
            && let Some(t) = fr.ticket.take()
        {
            let result = t.wait();
            // A failed read-ahead just frees its frame.
            let _ = self.finish_load(f, result);
        }
    }

    fn finish_load(&mut self, f: u32, result: io::Result<AlignedBuf>) -> io::Result<()> {
        match result {
            Ok(buf) => {
                let fr = &mut self.frames[f as usize];
                fr.buf = buf;
                fr.state = State::Valid;
                Ok(())
            }
            Err(e) => {
                self.frames[f as usize].buf = AlignedBuf::new(1);
                self.frames[f as usize].prefetched = false;
                self.frames[f as usize].state = State::Valid;
                self.remove(f);
                self.free.push(f);
                Err(e)
            }
        }
    }
}

impl Table {
    /// Checks the table's invariants and panics, naming the one broken. They hold whenever the
    /// table's lock is free (the lock is released mid-operation only with every frame in one of
    /// these states):
    /// * every frame is in exactly one place: the free list (state `Free`) or the map under its
    ///   own key;
    /// * the global LRU list holds exactly the mapped frames, and each owner's list exactly its
    ///   own, in the same relative order (so an owner's oldest page is also its oldest globally,
    ///   which `vas.pick_victim`'s candidate order relies on);
    /// * a free frame is unpinned, clean, not being written, with no read in flight;
    /// * the writers' dirty counts add up to the dirty pages;
    /// * a dirty page is valid and has a device block to be written to; a read in flight
    ///   (`ticket`) belongs to a loading frame.
    fn check(&self) {
        let n = self.frames.len();
        let mut free = vec![false; n];
        for &f in &self.free {
            assert!((f as usize) < n, "free list names frame {f} of {n}");
            assert!(
                !std::mem::replace(&mut free[f as usize], true),
                "frame {f} is on the free list twice"
            );
        }
        assert_eq!(
            self.map.len() + self.free.len(),
            n,
            "frames lost: neither free nor mapped"
        );
        assert!(n <= self.capacity, "more frames than the cache's capacity");
        assert!(
            self.global.len() == n && self.owned.len() == n,
            "list links do not match the frames"
        );
        assert_eq!(self.keys.len(), self.map.len(), "the ordered keys do not match the map");
        assert!(
            self.keys.iter().all(|k| self.map.contains_key(k)),
            "the ordered keys name a page that is not mapped"
        );
        let dirty = self
            .frames
            .iter()
            .filter(|f| f.state != State::Free && f.dirty_since.is_some());
        assert_eq!(
            dirty.count(),
            self.dirty.len(),
            "the dirty set does not match the dirty frames"
        );
        assert_eq!(
            self.procs.values().map(|p| p.dirty).sum::<usize>(),
            self.dirty.len(),
            "the writers' dirty counts do not add up to the dirty pages"
        );
        for key in &self.dirty {
            let f = self.map.get(key).expect("a dirty key is mapped");
            assert!(
                self.frames[*f as usize].dirty_since.is_some(),
                "the dirty set names a clean page"
            );
        }
        for (key, &f) in &self.map {
            let fr = &self.frames[f as usize];
            assert!(!free[f as usize], "frame {f} is both free and mapped");
            assert_eq!(fr.key, *key, "frame {f} is mapped under another page's key");
            assert_ne!(fr.state, State::Free, "mapped frame {f} is marked free");
        }
        for (f, fr) in self.frames.iter().enumerate() {
            if free[f] {
                assert_eq!(fr.state, State::Free, "free frame {f} is in use");
                assert!(
                    fr.pins == 0 && fr.dirty_since.is_none() && !fr.writing && fr.ticket.is_none(),
                    "free frame {f} is pinned, dirty, being written or loading"
                );
            }
            if fr.dirty_since.is_some() {
                assert!(
                    fr.state == State::Valid && fr.dev.is_some(),
                    "dirty frame {f} is not a valid placed page"
                );
            }
            if fr.ticket.is_some() {
                assert_eq!(fr.state, State::Loading, "frame {f} holds a read but is not loading");
            }
        }
        let global: Vec<u32> = self.lru.iter(&self.global).collect();
        assert_eq!(global.len(), self.lru.len, "the LRU list's length is off");
        assert_eq!(
            global.len(),
            self.map.len(),
            "the LRU list does not hold every mapped frame"
        );
        let mut by_owner: FxHashMap<Pid, Vec<u32>> = FxHashMap::default();
        for &f in &global {
            by_owner.entry(self.frames[f as usize].owner).or_default().push(f);
        }
        for (&pid, p) in &self.procs {
            let mut mine: Vec<u32> = p.pages.iter(&self.owned).collect();
            assert_eq!(mine.len(), p.pages.len, "process {pid}'s page list length is off");
            // The same pages; the order may differ where a graft passed pages over.
            let mut expected = by_owner.remove(&pid).unwrap_or_default();
            mine.sort_unstable();
            expected.sort_unstable();
            assert_eq!(mine, expected, "process {pid}'s page list does not hold its pages");
        }
        assert!(by_owner.is_empty(), "mapped pages have owners the cache does not know");
    }

    /// [`Table::check`] after an operation, in builds that ask for it: debug builds, or the
    /// `invariants` feature the test gate turns on in release builds.
    #[inline]
    fn checked(&self) {
        if crate::CHECKS_INVARIANTS {
            self.check();
        }
    }
}

/// The page cache. Shared by every process of the kernel.
pub struct PageCache {
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
            total: CacheCounters::default(),
        };
        let cache = Arc::new(PageCache {
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

    /// Makes `pid` known to the cache and returns its `vas.pick_victim` graftpoint.
    pub fn register_process(&self, pid: Pid) -> Arc<GraftSlot<PickVictim>> {
        let mut t = self.table.lock();
        let proc = t.proc_mut(pid);
        proc.victim
            .get_or_insert_with(|| Arc::new(GraftSlot::new(&self.runtime, Arc::new(pid), Access::Process(pid), None)))
            .clone()
    }

    /// Forgets a process's graft (it exited); its pages stay cached, owned by nobody special.
    pub fn unregister_process(&self, pid: Pid) {
        if let Some(p) = self.table.lock().procs.get_mut(&pid)
            && let Some(slot) = p.victim.take()
        {
            slot.unload();
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
        if (offset % BS) as usize + n > BLOCK_SIZE {
            // Several pages: the missing ones are read together (adjacent ones merge into one
            // device request) before the copy below waits for each.
            let mut whole = Extents::new();
            whole.push(vino_graft::abi::Extent {
                off: offset,
                len: n as u64,
            });
            self.load(ctx.pid, object, backing, &whole, true);
        }
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (index, within) = (pos / BS, (pos % BS) as usize);
            let take = (BLOCK_SIZE - within).min(n - done);
            let mut t = self.table.lock();
            let f = self.pin(&mut t, ctx.pid, object, backing, index)?;
            buf[done..done + take].copy_from_slice(&t.frames[f as usize].buf[within..within + take]);
            self.unpin(&mut t, f);
            done += take;
        }
        if let Some(ra) = ctx.ra {
            let extents = ra.advise(offset, n, size);
            self.load(ctx.pid, object, backing, &extents, false);
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
        let mut done = 0;
        while done < data.len() {
            let pos = offset + done as u64;
            let (index, within) = (pos / BS, (pos % BS) as usize);
            let take = (BLOCK_SIZE - within).min(data.len() - done);
            let dev = backing.locate(index)?.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("block {index} of object {object} has no device block"),
                )
            })?;
            let mut t = self.table.lock();
            let f = if take == BLOCK_SIZE {
                self.pin_for_overwrite(&mut t, ctx.pid, object, index, dev)?
            } else {
                self.pin(&mut t, ctx.pid, object, backing, index)?
            };
            let fr = &mut t.frames[f as usize];
            fr.buf[within..within + take].copy_from_slice(&data[done..done + take]);
            fr.dev = Some(dev);
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
        let mut t = self.table.lock();
        loop {
            let doomed: Vec<u32> = t
                .keys
                .range((object, from)..=(object, u64::MAX))
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
                        if !std::mem::take(&mut t.frames[f as usize].demanded) {
                            count!(t, pid, object, hits);
                        }
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
        dev: u64,
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
            t.install(f, key, pid, Some(dev));
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

    /// Asks the warming thread for more frames once fewer than half of `warm_ahead` are free
    /// and the cache still has frames to make.
    fn warm_if_low(&self, t: &Table) {
        let ahead = self.config.warm_ahead;
        if ahead > 0 && t.free.len() < ahead / 2 && t.frames.len() < t.capacity {
            self.warmer.ask();
        }
    }

    /// A free frame for `key`, evicting a page if none is free.
    fn allocate(&self, t: &mut MutexGuard<'_, Table>, pid: Pid, key: PageKey) -> io::Result<u32> {
        Ok(self.allocate_within(t, pid, key, true)?.expect("allowed to wait"))
    }

    /// As [`PageCache::allocate`]; where every frame is pinned or in flight, waits for one to
    /// be released if `may_wait`, else returns `None`.
    fn allocate_within(
        &self,
        t: &mut MutexGuard<'_, Table>,
        pid: Pid,
        key: PageKey,
        may_wait: bool,
    ) -> io::Result<Option<u32>> {
        loop {
            if let Some(f) = t.take_free() {
                self.warm_if_low(t);
                return Ok(Some(f));
            }
            // Cao's rule: if this miss is on a page a graft evicted in place of the kernel's
            // choice, and that page is still here, the process pays with it.
            if let Some(kept) = t.placeholders.remove(&key)
                && let Some(&a) = t.map.get(&kept)
                && t.frames[a as usize].owner == pid
                && t.evictable(a)
                && t.frames[a as usize].dirty_since.is_none()
            {
                t.settle(a);
                if t.frames[a as usize].state == State::Valid {
                    count!(t, pid, kept.0, graft_mistakes);
                    count!(t, pid, kept.0, evicted_by_lru);
                    t.remove(a);
                    return Ok(Some(a));
                }
            }
            // The oldest clean page near the cold end, else the oldest page: a miss does not
            // wait for another's dirty pages to be written while clean ones are there to take.
            let clean = t
                .lru
                .iter(&t.global)
                .take(EVICTION_SCAN)
                .find(|&f| t.evictable(f) && t.frames[f as usize].dirty_since.is_none());
            let Some(candidate) = clean.or_else(|| t.lru.iter(&t.global).find(|&f| t.evictable(f))) else {
                // Everything is pinned or in flight: wait for a change.
                if !may_wait {
                    return Ok(None);
                }
                self.changed.wait_for(t, Duration::from_millis(5));
                continue;
            };
            t.settle(candidate);
            if t.frames[candidate as usize].state != State::Valid {
                continue;
            }
            let victim = self.choose_victim(t, candidate);
            if t.frames[victim as usize].dirty_since.is_some() {
                let mut batch = t.cold_dirty(EVICTION_CLEAN_BATCH, EVICTION_SCAN);
                if !batch.contains(&victim) {
                    batch.push(victim);
                }
                self.write_frames(t, &batch)?;
                continue;
            }
            let (vkey, owner) = (t.frames[victim as usize].key, t.frames[victim as usize].owner);
            if victim == candidate {
                count!(t, owner, vkey.0, evicted_by_lru);
            } else {
                count!(t, owner, vkey.0, evicted_by_graft);
                let kept = t.frames[candidate as usize].key;
                t.placeholders.insert(vkey, kept);
            }
            t.remove(victim);
            return Ok(Some(victim));
        }
    }

    /// Asks the owner's `vas.pick_victim` graft, if any, which of its pages goes instead of
    /// `candidate`. The graft runs with the table unlocked and sees the owner's pages a page of
    /// candidates at a time, each page gathered under the lock when asked for; its choice is
    /// checked afterwards.
    fn choose_victim(&self, t: &mut MutexGuard<'_, Table>, candidate: u32) -> u32 {
        let owner = t.frames[candidate as usize].owner;
        let Some(slot) = t.procs.get(&owner).and_then(|p| p.victim.clone()) else {
            return candidate;
        };
        if slot.policy_kind() == PolicyKind::Default {
            return candidate;
        }
        // The frames offered so far, in the order offered, and where the next page starts.
        let offered = RefCell::new(vec![(candidate, t.frames[candidate as usize].key)]);
        let next = Cell::new(t.procs[&owner].pages.head);
        // Appends up to `room` more of the owner's evictable pages.
        let gather = |t: &Table, ids: &mut Vec<u64>, room: usize| {
            let mut offered = offered.borrow_mut();
            let (mut scanned, end) = (0, ids.len() + room);
            while next.get() != NIL && ids.len() < end && scanned < VICTIM_SCAN {
                let f = next.get();
                // The list changed while the graft ran and this frame left it: stop here.
                if t.frames[f as usize].owner != owner || t.map.get(&t.frames[f as usize].key) != Some(&f) {
                    next.set(NIL);
                    break;
                }
                next.set(t.owned[f as usize].next);
                scanned += 1;
                if f != candidate && t.evictable(f) {
                    let key = t.frames[f as usize].key;
                    offered.push((f, key));
                    ids.push(page_id(key.0, key.1));
                }
            }
        };
        let mut first = vec![page_id(offered.borrow()[0].1.0, offered.borrow()[0].1.1)];
        gather(t, &mut first, VICTIM_FIRST_PAGE - 1);
        let more = |ids: &mut Vec<u64>| gather(&self.table.lock(), ids, abi::VICTIM_MAX);
        let choice = MutexGuard::unlocked(t, || slot.invoke(&Candidates::paged(first, &more)));
        let (f, key) = offered.borrow()[choice];
        // A page of candidates at a time, letting others take the lock in between, as the
        // pages were gathered.
        for passed in offered.borrow()[..choice].chunks(abi::VICTIM_MAX) {
            t.pass_over(owner, passed);
            MutexGuard::bump(t);
        }
        let still_there = t.map.get(&key) == Some(&f) && t.frames[f as usize].owner == owner && t.evictable(f);
        if still_there && t.frames[f as usize].state == State::Valid {
            f
        } else {
            candidate
        }
    }

    /// Starts reads of the blocks in `extents` that are not cached, without waiting for them:
    /// read-ahead, or (`demand`) the pages of a read about to wait for them, whose misses are
    /// counted here.
    fn load(&self, pid: Pid, object: u64, backing: &dyn Backing, extents: &Extents, demand: bool) {
        let mut budget = MAX_PREFETCH_BLOCKS;
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

    /// Writes the dirty pages in `ranges` and waits for them, and for those others were writing.
    fn write_back(&self, ranges: &[RangeInclusive<PageKey>]) -> io::Result<()> {
        let mut t = self.table.lock();
        loop {
            let mut busy = false;
            let mut ready = Vec::new();
            for key in ranges.iter().flat_map(|r| t.dirty.range(r.clone())) {
                let f = t.map[key];
                if t.frames[f as usize].writing {
                    busy = true;
                } else if ready.len() < WRITEBACK_BATCH {
                    ready.push(f);
                }
            }
            if ready.is_empty() && !busy {
                t.checked();
                return Ok(());
            }
            if ready.is_empty() {
                self.changed.wait_for(&mut t, Duration::from_millis(1));
                continue;
            }
            self.write_frames(&mut t, &ready)?;
        }
    }

    /// Writes `frames` (dirty, not being written) to the device and marks them clean if no
    /// write came in meanwhile. The writes are queued at the scheduler together, which merges
    /// those on adjacent device blocks into one request. The table is unlocked during the I/O;
    /// the pages stay readable and writable (the device gets a copy).
    fn write_frames(&self, t: &mut MutexGuard<'_, Table>, frames: &[u32]) -> io::Result<()> {
        let mut located = Vec::with_capacity(frames.len());
        for &f in frames {
            let fr = &t.frames[f as usize];
            let Some(dev) = fr.dev else {
                return Err(io::Error::other(format!("dirty page {:?} has no device block", fr.key)));
            };
            located.push((dev, f));
        }
        // Pages on adjacent device blocks go out in one request, copied once into its buffer.
        located.sort_unstable();
        let mut starts = Vec::new();
        let mut members = Vec::with_capacity(frames.len());
        for run in located.chunk_by(|a, b| a.0 + 1 == b.0) {
            for piece in run.chunks(WRITE_RUN_BLOCKS) {
                starts.push(piece[0].0);
                members.push(piece.iter().map(|&(_, f)| (f, 0)).collect::<Vec<_>>());
            }
        }
        // Marked first: a page being written is neither evicted nor dropped nor written by
        // another thread, so the lock can be let go between requests' copies (a batch is up to
        // 16 MiB; other users of the cache wait for one request's copy at most). A write that
        // comes in meanwhile changes the generation, and the page stays dirty.
        for (f, generation) in members.iter_mut().flatten() {
            let fr = &mut t.frames[*f as usize];
            fr.writing = true;
            *generation = fr.generation;
        }
        let mut requests = Vec::with_capacity(members.len());
        for (i, (piece, &start)) in members.iter().zip(&starts).enumerate() {
            if i > 0 {
                MutexGuard::bump(t);
            }
            let bufs = piece.iter().map(|&(f, _)| &t.frames[f as usize].buf[..]);
            requests.push(IoRequest::write(start, AlignedBuf::gather(piece.len(), bufs)));
        }
        let results: Vec<io::Result<AlignedBuf>> = MutexGuard::unlocked(t, || {
            let tickets = self.io.submit_batch(requests);
            tickets.into_iter().map(Ticket::wait).collect()
        });
        let mut first_error = None;
        for (run, result) in members.into_iter().zip(results) {
            let result = result.map(drop);
            for (f, generation) in run {
                t.frames[f as usize].writing = false;
                if let Err(e) = &result {
                    first_error.get_or_insert(io::Error::new(e.kind(), e.to_string()));
                    continue;
                }
                if t.frames[f as usize].generation == generation {
                    t.mark_clean(f);
                }
                let fr = &t.frames[f as usize];
                let (owner, object) = (fr.owner, fr.key.0);
                count!(t, owner, object, written_back);
            }
        }
        self.changed.notify_all();
        first_error.map_or(Ok(()), Err)
    }

    /// One round of the `cache.writeback` policy; the pages written. Its CPU is charged to
    /// the pages' writers ([`PageCache::charge_writeback_to`]).
    pub fn run_writeback(&self) -> io::Result<usize> {
        let clock = vino_account::ThreadClock::of_this_thread();
        let started = clock.as_ref().map_or(0, |c| c.read_ns());
        let mut writers: Vec<Pid> = Vec::new();
        let written = self.writeback_round(&mut writers);
        if let (Some(charge), Some(clock)) = (self.charger.get(), clock)
            && !writers.is_empty()
        {
            let used = clock.read_ns().saturating_sub(started);
            writers.sort_unstable();
            for run in writers.chunk_by(|a, b| a == b) {
                charge(
                    run[0],
                    Duration::from_nanos(used * run.len() as u64 / writers.len() as u64),
                );
            }
        }
        written
    }

    /// Dirty pages a writer may keep before the write-back thread starts writing them behind
    /// it: half its share (Linux starts background write-back at half its dirty limit too).
    fn behind_mark(&self) -> usize {
        self.dirty_share / 2
    }

    /// Asks the write-back thread to write `pid`'s pages behind it if it is past the mark.
    /// Without that thread (tests, the simulator) writers are only throttled.
    fn want_write_behind(&self, t: &Table, pid: Pid, object: u64) {
        if self.config.writeback_every.is_none() || t.procs.get(&pid).is_none_or(|p| p.dirty <= self.behind_mark()) {
            return;
        }
        // One entry per writer (its latest object first): a writer of many files gets one
        // turn, and the list is no longer than the writers.
        let mut wanted = self.flusher.wanted.lock();
        match wanted.iter_mut().find(|w| w.0 == pid) {
            Some(w) => w.1 = object,
            None => {
                wanted.push((pid, object));
                self.flusher.wake.notify_one();
            }
        }
    }

    /// Write-behind: writes the pages of each writer in `wanted` past the mark, a batch each in
    /// turn (so one writer's flood delays another's write-behind by one batch at most), until
    /// each is under the mark. A batch is several device requests in flight at once: a writer
    /// copying its next data overlaps the device writing its last, instead of waiting for one
    /// request at a time when it reaches its share. Its CPU is charged to the writer.
    ///
    /// Stops at `until` (the next round of the write-back policy, which a writer that never
    /// stops must not hold off from others' pages); returns the writers still to serve.
    fn write_behind(&self, mut wanted: Vec<(Pid, u64)>, until: Duration) -> Vec<(Pid, u64)> {
        wanted.sort_unstable();
        wanted.dedup_by_key(|w| w.0);
        let clock = vino_account::ThreadClock::of_this_thread();
        while !wanted.is_empty() && !self.flusher.stop.load(Ordering::Relaxed) {
            if self.config.clock.passed(until) {
                return wanted;
            }
            wanted.retain(|&(pid, object)| {
                let started = clock.as_ref().map_or(0, |c| c.read_ns());
                let wrote = {
                    let mut t = self.table.lock();
                    if t.procs.get(&pid).is_none_or(|p| p.dirty <= self.behind_mark()) {
                        false
                    } else {
                        let batch = t.own_dirty(pid, object, WRITE_BEHIND_BATCH, EVICTION_SCAN);
                        // A failed write leaves the pages dirty: the writer's throttle, sync and
                        // eviction report it.
                        !batch.is_empty() && self.write_frames(&mut t, &batch).is_ok()
                    }
                };
                if let (Some(charge), Some(clock)) = (self.charger.get(), clock.as_ref()) {
                    charge(pid, Duration::from_nanos(clock.read_ns().saturating_sub(started)));
                }
                wrote
            });
            // Writers that asked meanwhile take their turn too.
            let mut more = std::mem::take(&mut *self.flusher.wanted.lock());
            more.retain(|w| !wanted.iter().any(|x| x.0 == w.0));
            wanted.append(&mut more);
        }
        Vec::new()
    }

    /// A write-back round; `writers` gets the writer of each page it writes.
    fn writeback_round(&self, writers: &mut Vec<Pid>) -> io::Result<usize> {
        let now = self.now_ns();
        let mut offered: Vec<WritebackArgs> = {
            let t = self.table.lock();
            t.dirty
                .iter()
                .filter_map(|k| {
                    let fr = &t.frames[t.map[k] as usize];
                    fr.dirty_since.filter(|_| !fr.writing).map(|since| WritebackArgs {
                        object: k.0,
                        index: k.1,
                        age_ns: now.saturating_sub(since),
                    })
                })
                .collect()
        };
        if offered.is_empty() {
            return Ok(0);
        }
        offered.sort_by_key(|p| std::cmp::Reverse(p.age_ns));
        offered.truncate(WRITEBACK_MAX);
        let chosen = self.writeback.invoke(&offered.as_slice());
        let keys: Vec<PageKey> = chosen
            .iter()
            .filter_map(|&i| offered.get(i))
            .map(|p| (p.object, p.index))
            .collect();
        let mut t = self.table.lock();
        let frames: Vec<u32> = keys
            .iter()
            .filter_map(|k| t.map.get(k).copied())
            .filter(|&f| t.frames[f as usize].dirty_since.is_some() && !t.frames[f as usize].writing)
            .collect();
        let n = frames.len();
        if n > 0 {
            writers.extend(frames.iter().map(|&f| t.frames[f as usize].dirtier));
            self.write_frames(&mut t, &frames)?;
        }
        Ok(n)
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

/// Between allocations and the warming thread: whether more frames are wanted, and the stop
/// flag.
#[derive(Default)]
struct WarmSignal {
    /// Set by the allocation that finds the made-ahead frames low, cleared by the thread as it
    /// starts a round; allocations meanwhile skip the lock.
    asked: AtomicBool,
    state: Mutex<Warm>,
    wake: Condvar,
}

#[derive(Default)]
struct Warm {
    wanted: bool,
    stop: bool,
}

impl WarmSignal {
    fn ask(&self) {
        if !self.asked.swap(true, Ordering::AcqRel) {
            self.state.lock().wanted = true;
            self.wake.notify_one();
        }
    }

    fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_one();
    }

    /// Waits until frames are wanted; false once the cache is gone.
    fn wait(&self) -> bool {
        let mut w = self.state.lock();
        while !w.wanted && !w.stop {
            self.wake.wait(&mut w);
        }
        w.wanted = false;
        self.asked.store(false, Ordering::Release);
        !w.stop
    }
}

/// Frames the warming thread makes between two looks at the table: 2 MiB of memory.
const WARM_BATCH: usize = 512;

/// The thread that makes frames ahead of need (`CacheConfig::warm_ahead`): it touches each new
/// frame's memory outside the table's lock, at the lowest CPU priority, so that the first fill
/// of the cache costs writers and misses no first-touch page faults where it keeps ahead. It
/// ends once every frame is made, or with the cache.
fn spawn_warmer(cache: std::sync::Weak<PageCache>, signal: Arc<WarmSignal>, ahead: usize) {
    std::thread::Builder::new()
        .name("vino-cache-warm".into())
        .spawn(move || {
            // Refused without privilege to lower again? Lowering needs none: best effort.
            let _ = vino_account::cpu::lower_this_thread();
            // The first round runs at once (a new cache has no frames yet), the others when
            // an allocation asks.
            loop {
                loop {
                    let want = {
                        let Some(cache) = cache.upgrade() else { return };
                        let t = cache.table.lock();
                        if t.frames.len() >= t.capacity {
                            return;
                        }
                        ahead
                            .saturating_sub(t.free.len())
                            .min(t.capacity - t.frames.len())
                            .min(WARM_BATCH)
                    };
                    if want == 0 {
                        break;
                    }
                    let bufs: Vec<AlignedBuf> = (0..want).map(|_| touched_frame()).collect();
                    let Some(cache) = cache.upgrade() else { return };
                    let mut t = cache.table.lock();
                    t.add_free(bufs);
                    t.checked();
                }
                if !signal.wait() {
                    return;
                }
            }
        })
        .expect("spawning the cache's warming thread");
}

/// A frame's buffer whose page has been written once, so that Linux has backed it.
fn touched_frame() -> AlignedBuf {
    let mut buf = AlignedBuf::new(1);
    // A fresh allocation may be untouched memory that reads as zeros; a store makes Linux back
    // it. `black_box` keeps the compiler from dropping a store of the zero it knows is there.
    buf[0] = 0;
    std::hint::black_box(&mut buf[..]);
    buf
}

/// Between writers and the write-back thread: the writers past the write-behind mark, each
/// with the object it wrote last, and the stop flag.
#[derive(Default)]
struct FlushSignal {
    stop: AtomicBool,
    wanted: Mutex<Vec<(Pid, u64)>>,
    wake: Condvar,
}

/// The write-back thread: a round of the `cache.writeback` policy every `every`, and between
/// rounds, write-behind for writers past half their share as soon as they ask. It holds the
/// cache only while working, so dropping the cache ends it.
fn spawn_writeback(cache: std::sync::Weak<PageCache>, signal: Arc<FlushSignal>, every: Duration, clock: SharedClock) {
    std::thread::Builder::new()
        .name("vino-writeback".into())
        .spawn(move || {
            // Rounds run on the cache's clock (a simulation's moves them).
            let mut next_round = clock.deadline_in(every);
            loop {
                let wanted = {
                    let mut w = signal.wanted.lock();
                    if w.is_empty() && !signal.stop.load(Ordering::Relaxed) {
                        clock.wait_until(&signal.wake, &mut w, next_round);
                    }
                    std::mem::take(&mut *w)
                };
                if signal.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(cache) = cache.upgrade() else { return };
                if !wanted.is_empty() {
                    let left = cache.write_behind(wanted, next_round);
                    let mut w = signal.wanted.lock();
                    for writer in left {
                        if !w.iter().any(|x| x.0 == writer.0) {
                            w.push(writer);
                        }
                    }
                }
                if clock.passed(next_round) {
                    // A failed write-back leaves the pages dirty; the next round or a sync retries.
                    let _ = cache.run_writeback();
                    next_round = clock.deadline_in(every);
                }
            }
        })
        .expect("spawning the write-back thread");
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
