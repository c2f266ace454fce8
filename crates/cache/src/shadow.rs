//! Trying a `vas.pick_victim` graft before binding it: a candidate runs in shadow on a ghost of
//! its process's resident pages (`vino graft try`).
//!
//! The ghost holds page identities only, no data. It follows the process's page accesses as the
//! cache sees them, and keeps exactly as many pages as the kernel lets the process keep at that
//! moment (Cao's rule: the kernel decides how many of its pages go, the process which): when it
//! holds more, the candidate picks which of the ghost's pages goes, offered as a bound graft
//! would be (the ghost's least recently used first, a page of candidates at a time; the pages it
//! passed over before its choice get a second chance, its hints move or drop ghost pages). An
//! access to a page the ghost does not hold is a miss the process would have had with the
//! candidate bound. The process's allocation is the live one, which the candidate's choices
//! would have moved a little had it been bound (its misses take frames from other processes'
//! pages and its hits do not): that is the model's one approximation.
//!
//! The live path only offers each access to a bounded queue (one `try_send`); a thread of the
//! shadow's own drains it, runs the ghost and the candidate, and counts what it could not take.
//! With `sample` N > 1, only pages whose identity hashes to 0 mod N are followed and the ghost
//! keeps 1/N of the allocation (spatial sampling, as SHARDS samples a miss-ratio curve): its
//! misses, times N, estimate the whole's at a fraction of the cost.

use crate::Pid;
use crate::points::{Candidates, PageHint, PickVictim, VictimEnv};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use vino_graft::{GraftSlot, LoadError, Owner, Shadow, abi};

/// Accesses the queue between the live path and the shadow holds by default.
pub const TRY_QUEUE: usize = 1 << 16;

/// One access the cache saw: the page, whether it was a hit, and the process's resident pages.
#[derive(Debug, Clone, Copy)]
struct Access {
    page: u64,
    hit: bool,
    resident: u32,
}

/// What a shadow found so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VictimTryReport {
    pub point: String,
    /// Accesses followed (of the sampled pages), and how many the live policy missed.
    pub accesses: u64,
    pub live_misses: u64,
    /// Misses the process would have had with the candidate bound.
    pub would_be_misses: u64,
    /// The sampling rate: 1 in `sample` pages followed; counts are of those.
    pub sample: u32,
    /// Evictions the candidate decided, failed (the default took them), and its mean time per
    /// decision.
    pub decisions: u64,
    pub failures: u64,
    pub candidate_ns_per_decision: f64,
    /// Accesses the queue could not take (the ghost is inexact by as many).
    pub queue_drops: u64,
    /// Why the candidate was dropped, if it failed too often.
    pub dropped: Option<String>,
    pub last_error: Option<String>,
    /// Pages in the ghost now.
    pub ghost_pages: usize,
}

/// A candidate `vas.pick_victim` graft in shadow beside a process's live policy. Dropping it
/// stops the shadow.
pub struct VictimTry {
    feed: Mutex<Option<SyncSender<Access>>>,
    drops: AtomicU64,
    sample: u32,
    report: Arc<Mutex<VictimTryReport>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl VictimTry {
    /// Starts `wasm` in shadow for process `pid`, whose live graftpoint is `slot`; charged to
    /// `owner` as a graft.
    pub(crate) fn start(
        slot: &GraftSlot<PickVictim>,
        pid: Pid,
        wasm: &[u8],
        owner: Owner,
        sample: u32,
        queue: usize,
    ) -> Result<Arc<VictimTry>, LoadError> {
        let shadow = slot.shadow(wasm, owner, Arc::new(VictimEnv::new(pid)))?;
        let (feed, drain) = sync_channel(queue.max(1));
        let sample = sample.max(1);
        let report = Arc::new(Mutex::new(VictimTryReport {
            point: slot.name().to_string(),
            sample,
            ..VictimTryReport::default()
        }));
        let mut ghost = Ghost::new(shadow, report.clone());
        let thread = std::thread::Builder::new()
            .name(format!("vino-try-{pid}"))
            .spawn(move || ghost.run(drain))
            .map_err(|e| LoadError::Start(format!("starting the shadow's thread: {e}")))?;
        Ok(Arc::new(VictimTry {
            feed: Mutex::new(Some(feed)),
            drops: AtomicU64::new(0),
            sample,
            report,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// Offers one access of the live path (never waits: a full queue counts a drop).
    #[inline]
    pub(crate) fn offer(&self, page: u64, hit: bool, resident: usize) {
        if self.sample > 1 && !sampled(page, self.sample) {
            return;
        }
        let resident = (resident / self.sample as usize) as u32;
        let feed = self.feed.lock();
        let Some(feed) = feed.as_ref() else { return };
        if let Err(TrySendError::Full(_)) = feed.try_send(Access { page, hit, resident }) {
            self.drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the shadow found so far.
    pub fn report(&self) -> VictimTryReport {
        let mut r = self.report.lock().clone();
        r.queue_drops = self.drops.load(Ordering::Relaxed);
        r
    }

    /// Stops the shadow once it has drained its queue; what it found.
    pub fn stop(&self) -> VictimTryReport {
        self.feed.lock().take();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.report()
    }
}

impl Drop for VictimTry {
    fn drop(&mut self) {
        self.feed.get_mut().take();
    }
}

/// Whether page `page` is one of the 1 in `n` a sampled shadow follows.
fn sampled(page: u64, n: u32) -> bool {
    (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32).is_multiple_of(u64::from(n))
}

/// The first place a used page takes; a page hinted cold goes before the oldest, below it.
const FIRST_PLACE: u64 = 1 << 62;
/// Candidates in the first page a graft is offered (as the cache offers them).
const FIRST_PAGE: usize = 32;

/// Pages in an order: page -> place, place -> page (a larger place is more recent).
#[derive(Default)]
struct Order {
    place: FxHashMap<u64, u64>,
    pages: BTreeMap<u64, u64>,
}

impl Order {
    fn put(&mut self, page: u64, at: u64) {
        if let Some(old) = self.place.insert(page, at) {
            self.pages.remove(&old);
        }
        self.pages.insert(at, page);
    }

    fn remove(&mut self, page: u64) {
        if let Some(at) = self.place.remove(&page) {
            self.pages.remove(&at);
        }
    }

    /// Moves `page` before every other.
    fn make_coldest(&mut self, page: u64) {
        let first = self.pages.keys().next().map_or(FIRST_PLACE, |&k| k - 1);
        self.put(page, first);
    }
}

/// The ghost of a process's resident pages, and the candidate.
///
/// It keeps the two orders the cache keeps: the cache's LRU order of the process's pages (by
/// use alone: the eviction's first candidate is the oldest there) and the process's own list
/// (where a graft's passed-over pages and kept hints move pages to the young end), which gives
/// the other candidates. And Cao's placeholders: a miss on a page the candidate evicted in
/// place of the kernel's choice costs that choice, if the ghost still holds it.
struct Ghost {
    shadow: Shadow<PickVictim>,
    lru: Order,
    list: Order,
    placeholders: FxHashMap<u64, u64>,
    next: u64,
    report: Arc<Mutex<VictimTryReport>>,
}

impl Ghost {
    fn new(shadow: Shadow<PickVictim>, report: Arc<Mutex<VictimTryReport>>) -> Ghost {
        Ghost {
            shadow,
            lru: Order::default(),
            list: Order::default(),
            placeholders: FxHashMap::default(),
            next: FIRST_PLACE,
            report,
        }
    }

    fn run(&mut self, drain: Receiver<Access>) {
        while let Ok(a) = drain.recv() {
            self.access(a);
        }
    }

    fn len(&self) -> usize {
        self.lru.place.len()
    }

    fn holds(&self, page: u64) -> bool {
        self.lru.place.contains_key(&page)
    }

    fn stamp(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn forget(&mut self, page: u64) {
        self.lru.remove(page);
        self.list.remove(page);
    }

    fn access(&mut self, a: Access) {
        let held = self.holds(a.page);
        // A miss makes room for its page first, as the kernel evicts before it installs.
        let room = (a.resident as usize).saturating_sub(usize::from(!held));
        let mut decided = 0;
        let mut first = !held;
        while self.len() > room {
            // Cao's rule, as the cache applies it to the frame a miss needs.
            let kept = self
                .placeholders
                .remove(&a.page)
                .filter(|&k| first && k != a.page && self.holds(k));
            first = false;
            match kept {
                Some(k) => self.forget(k),
                None if self.evict(a.page) => decided += 1,
                None => break,
            }
        }
        let at = self.stamp();
        self.lru.put(a.page, at);
        self.list.put(a.page, at);
        let stats = self.shadow.stats();
        let mut r = self.report.lock();
        r.accesses += 1;
        r.live_misses += u64::from(!a.hit);
        r.would_be_misses += u64::from(!held);
        r.decisions += decided;
        r.failures = stats.failures;
        r.candidate_ns_per_decision = stats.time_ns as f64 / stats.invocations.max(1) as f64;
        r.dropped = self.shadow.dropped().map(str::to_string);
        r.last_error = stats.last_error;
        r.ghost_pages = self.len();
    }

    /// Evicts one ghost page other than `keep`, at the candidate's choice (the kernel's if it
    /// fails). False if there is none to evict.
    fn evict(&mut self, keep: u64) -> bool {
        let Some(oldest) = self.lru.pages.values().copied().find(|&p| p != keep) else {
            return false;
        };
        let mut ids = vec![oldest];
        let mut cursor = 0;
        for (&at, &p) in self
            .list
            .pages
            .iter()
            .filter(|&(_, &p)| p != keep && p != oldest)
            .take(FIRST_PAGE - 1)
        {
            ids.push(p);
            cursor = at;
        }
        // The rest of the process's list, a page of candidates at a time, as the graft asks.
        let cursor = Cell::new(cursor);
        let list = &self.list;
        let more = |out: &mut Vec<u64>| {
            if cursor.get() == u64::MAX {
                return;
            }
            let mut last = u64::MAX;
            let rest = list
                .pages
                .range(cursor.get() + 1..)
                .filter(|&(_, &p)| p != keep && p != oldest);
            for (&at, &p) in rest.take(abi::VICTIM_MAX) {
                out.push(p);
                last = at;
            }
            cursor.set(last);
        };
        let candidates = Candidates::paged(ids, &more);
        let choice = self.shadow.decide(&candidates).unwrap_or(0);
        let victim = candidates.get(choice).unwrap_or(oldest);
        // The pages passed over before the choice go to the young end of the process's list.
        let passed: Vec<u64> = (0..choice).filter_map(|i| candidates.get(i)).collect();
        drop(candidates);
        for p in passed {
            let at = self.stamp();
            self.list.put(p, at);
        }
        if victim != oldest {
            self.placeholders.insert(victim, oldest);
        }
        self.forget(victim);
        for (page, hint) in self.shadow.env().take_hints() {
            if !self.holds(page) {
                continue;
            }
            match hint {
                PageHint::Keep => {
                    let at = self.stamp();
                    self.list.put(page, at);
                }
                PageHint::Cold => {
                    self.lru.make_coldest(page);
                    self.list.make_coldest(page);
                }
                PageHint::Drop if page != keep => self.forget(page),
                PageHint::Drop => {}
            }
        }
        true
    }
}
