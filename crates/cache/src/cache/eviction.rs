//! Making room: a free frame for a page, evicting one (with `vas.pick_victim` and Cao's rule)
//! when none is free, and the thread that makes frames ahead of need.

use super::*;

impl PageCache {
    /// Asks the warming thread for more frames once fewer than half of `warm_ahead` are free
    /// and the cache still has frames to make.
    pub(super) fn warm_if_low(&self, t: &Table) {
        let ahead = self.config.warm_ahead;
        if ahead > 0 && t.free.len() < ahead / 2 && t.frames.len() < t.capacity {
            self.warmer.ask();
        }
    }

    /// A free frame for `key`, evicting a page if none is free.
    pub(super) fn allocate(&self, t: &mut MutexGuard<'_, Table>, pid: Pid, key: PageKey) -> io::Result<u32> {
        Ok(self.allocate_within(t, pid, key, true)?.expect("allowed to wait"))
    }

    /// As [`PageCache::allocate`]; where every frame is pinned or in flight, waits for one to
    /// be released if `may_wait`, else returns `None`.
    pub(super) fn allocate_within(
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
            // A dirty stream page is its owner's writer's to write (its codec may be slow): passed over.
            let Some(candidate) = clean.or_else(|| {
                t.lru
                    .iter(&t.global)
                    .find(|&f| t.evictable(f) && !self.left_to_its_owner(t, f))
            }) else {
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
                streams::in_background(|| self.write_frames(t, &batch))?;
                if self.left_to_its_owner(t, victim) {
                    // Its owner's writer stores it: meanwhile, another victim, or a wait.
                    self.changed.wait_for(t, Duration::from_millis(1));
                }
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
        if !slot.consulted() {
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
        let victim = if still_there && t.frames[f as usize].state == State::Valid {
            f
        } else {
            candidate
        };
        let hints = slot.env().take_hints();
        if !hints.is_empty() {
            t.apply_hints(owner, &hints, &[victim, candidate]);
        }
        victim
    }
}

/// Between allocations and the warming thread: whether more frames are wanted, and the stop
/// flag.
#[derive(Default)]
pub(super) struct WarmSignal {
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
    pub(super) fn ask(&self) {
        if !self.asked.swap(true, Ordering::AcqRel) {
            self.state.lock().wanted = true;
            self.wake.notify_one();
        }
    }

    pub(super) fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_one();
    }

    /// Waits until frames are wanted; false once the cache is gone.
    pub(super) fn wait(&self) -> bool {
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
pub(super) fn spawn_warmer(cache: std::sync::Weak<PageCache>, signal: Arc<WarmSignal>, ahead: usize) {
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
