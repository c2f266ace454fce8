//! The frame table: frames, the LRU lists, dirty pages and counters, and its invariants.

use super::*;

pub(super) type PageKey = (u64, u64);

/// Every page of `object`, as a range of keys.
pub(super) fn object_range(object: u64) -> RangeInclusive<PageKey> {
    (object, 0)..=(object, u64::MAX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Free,
    /// A read is in flight; `ticket` holds it until someone waits for it.
    Loading,
    Valid,
}

pub(super) struct Frame {
    pub(super) key: PageKey,
    pub(super) owner: Pid,
    pub(super) state: State,
    pub(super) ticket: Option<Ticket>,
    pub(super) buf: AlignedBuf,
    /// Device block of the page (None for a hole that has not been written).
    pub(super) dev: Option<u64>,
    pub(super) dirty_since: Option<u64>,
    /// Whose write made the page dirty (valid while `dirty_since` is set).
    pub(super) dirtier: Pid,
    /// Bumped by every write, so a write-back knows whether it wrote the latest data.
    pub(super) generation: u64,
    pub(super) writing: bool,
    /// Brought in by read-ahead and not used yet.
    pub(super) prefetched: bool,
    /// Being loaded for a read that counted its miss already: its first use is not a hit.
    pub(super) demanded: bool,
    pub(super) pins: u32,
}

impl Frame {
    pub(super) fn empty() -> Frame {
        Frame::empty_with(AlignedBuf::new(1))
    }

    /// A free frame holding `buf`.
    pub(super) fn empty_with(buf: AlignedBuf) -> Frame {
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

pub(super) struct Proc {
    /// The process's pages, least recently used first, except that pages its
    /// `vas.pick_victim` graft passed over count as used then ([`Table::pass_over`]).
    pub(super) pages: List,
    /// Dirty pages this process's writes made (whoever owns them).
    pub(super) dirty: usize,
    pub(super) victim: Option<Arc<GraftSlot<PickVictim>>>,
    /// A candidate `vas.pick_victim` graft in shadow, fed this process's accesses.
    pub(super) shadow: Option<Arc<crate::shadow::VictimTry>>,
    /// A recording of its `vas.pick_victim` (its graft's or the default's), fed its accesses
    /// for replay's ghost; let go when the recording ends.
    pub(super) observed: Option<Arc<vino_graft::record::Observations>>,
    pub(super) counters: CacheCounters,
}

pub(super) struct Table {
    /// Frames made so far; they are made on first need, up to `capacity`, so a large cache costs
    /// memory only as it fills.
    pub(super) frames: Vec<Frame>,
    pub(super) capacity: usize,
    pub(super) global: Vec<Links>,
    pub(super) owned: Vec<Links>,
    pub(super) lru: List,
    pub(super) free: Vec<u32>,
    pub(super) map: FxHashMap<PageKey, u32>,
    /// The keys of `map` in order, for the pages of one file (truncate, unlink).
    pub(super) keys: BTreeSet<PageKey>,
    /// The dirty pages, in order: a file's are found without a scan, and adjacent ones are
    /// written together.
    pub(super) dirty: BTreeSet<PageKey>,
    pub(super) procs: FxHashMap<Pid, Proc>,
    pub(super) objects: FxHashMap<u64, CacheCounters>,
    /// Cao's placeholders: page the graft evicted -> page the kernel had chosen (kept instead).
    pub(super) placeholders: FxHashMap<PageKey, PageKey>,
    /// Stream objects and where their chunks are kept.
    pub(super) streams: FxHashMap<u64, Arc<dyn ChunkStore>>,
    pub(super) total: CacheCounters,
    /// Processes with a shadow: the access path looks for one only when there are some.
    pub(super) shadows: usize,
    /// Processes whose accesses a recording observes (likewise).
    pub(super) observed: usize,
}

impl Table {
    pub(super) fn proc_mut(&mut self, pid: Pid) -> &mut Proc {
        self.procs.entry(pid).or_insert_with(|| Proc {
            pages: List::default(),
            dirty: 0,
            victim: None,
            shadow: None,
            observed: None,
            counters: CacheCounters::default(),
        })
    }

    pub(super) fn evictable(&self, f: u32) -> bool {
        let fr = &self.frames[f as usize];
        fr.pins == 0
            && !fr.writing
            && (fr.state == State::Valid
                || (fr.state == State::Loading && fr.ticket.as_ref().is_some_and(Ticket::is_done)))
    }

    pub(super) fn touch(&mut self, f: u32) {
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
    pub(super) fn pass_over(&mut self, owner: Pid, passed: &[(u32, PageKey)]) {
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

    /// Applies the committed `vino_page_hint`s of `owner`'s graft to those of its pages still
    /// resident, leaving `busy` (the frames the eviction under way decided on) where they are.
    /// A page hinted cold goes to the cold end of the global list too: that gives the owner's
    /// own memory up sooner, never another's. Keeping moves it in the owner's order only, as
    /// [`Table::pass_over`] does.
    pub(super) fn apply_hints(&mut self, owner: Pid, hints: &[(u64, PageHint)], busy: &[u32]) {
        let Some(mut pages) = self.procs.get(&owner).map(|p| p.pages) else {
            return;
        };
        for &(id, hint) in hints {
            let Some(&f) = self.map.get(&(id >> 32, id & 0xffff_ffff)) else {
                continue;
            };
            if self.frames[f as usize].owner != owner || busy.contains(&f) {
                continue;
            }
            let free = hint == PageHint::Drop
                && self.evictable(f)
                && self.frames[f as usize].state == State::Valid
                && self.frames[f as usize].dirty_since.is_none();
            match hint {
                PageHint::Keep => pages.touch(&mut self.owned, f),
                _ if free => {
                    self.procs.get_mut(&owner).expect("owner has a list").pages = pages;
                    self.remove(f);
                    self.free.push(f);
                    pages = self.procs[&owner].pages;
                }
                PageHint::Cold | PageHint::Drop => {
                    pages.move_to_front(&mut self.owned, f);
                    self.lru.move_to_front(&mut self.global, f);
                }
            }
        }
        self.proc_mut(owner).pages = pages;
    }

    pub(super) fn install(&mut self, f: u32, key: PageKey, owner: Pid, dev: Option<u64>) {
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
    pub(super) fn remove(&mut self, f: u32) {
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
    pub(super) fn mark_dirty(&mut self, f: u32, now: u64, writer: Pid) {
        let fr = &mut self.frames[f as usize];
        if fr.dirty_since.is_none() {
            fr.dirty_since = Some(now);
            fr.dirtier = writer;
            let key = fr.key;
            self.dirty.insert(key);
            self.proc_mut(writer).dirty += 1;
        }
    }

    pub(super) fn mark_clean(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        if fr.dirty_since.take().is_some() {
            let (key, writer) = (fr.key, fr.dirtier);
            self.dirty.remove(&key);
            self.proc_mut(writer).dirty -= 1;
        }
    }

    /// A valid page that nobody has pinned or is writing: one a write-back may take.
    pub(super) fn writable(&self, f: u32) -> bool {
        let fr = &self.frames[f as usize];
        fr.state == State::Valid && !fr.writing && fr.pins == 0
    }

    /// Up to `max` of `writer`'s dirty pages that could be written now, those of `object`
    /// first (adjacent, so they go out in few requests), looking at most `scan` dirty pages in
    /// each of the two passes.
    pub(super) fn own_dirty(&self, writer: Pid, object: u64, max: usize, scan: usize) -> Vec<u32> {
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
    pub(super) fn take_free(&mut self) -> Option<u32> {
        if let Some(f) = self.free.pop() {
            return Some(f);
        }
        if self.frames.len() >= self.capacity {
            return None;
        }
        Some(self.add_frame(Frame::empty()))
    }

    /// Makes `frame` the table's next frame; the caller files it (free list or map).
    pub(super) fn add_frame(&mut self, frame: Frame) -> u32 {
        debug_assert!(self.frames.len() < self.capacity);
        self.frames.push(frame);
        self.global.push(Links::default());
        self.owned.push(Links::default());
        (self.frames.len() - 1) as u32
    }

    /// Files made-ahead frames' buffers as free frames, as many as the capacity has room for.
    pub(super) fn add_free(&mut self, bufs: Vec<AlignedBuf>) {
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
    pub(super) fn cold_dirty(&self, max: usize, scan: usize) -> Vec<u32> {
        self.lru
            .iter(&self.global)
            .take(scan)
            .filter(|&f| self.frames[f as usize].dirty_since.is_some() && self.writable(f))
            .take(max)
            .collect()
    }

    /// Settles a read-ahead whose I/O is done but that nobody waited for.
    pub(super) fn settle(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        if fr.state == State::Loading
            && let Some(t) = fr.ticket.take()
        {
            let result = t.wait();
            // A failed read-ahead just frees its frame.
            let _ = self.finish_load(f, result);
        }
    }

    pub(super) fn finish_load(&mut self, f: u32, result: io::Result<AlignedBuf>) -> io::Result<()> {
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
    pub(super) fn check(&self) {
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
                    fr.state == State::Valid && (fr.dev.is_some() || self.streams.contains_key(&fr.key.0)),
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
    pub(super) fn checked(&self) {
        if crate::CHECKS_INVARIANTS {
            self.check();
        }
    }
}
