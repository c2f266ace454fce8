//! Trying a graft before binding it (`vino graft try`): a candidate runs in shadow on a ghost
//! model that follows its answers, page identities only. For `vas.pick_victim`, a ghost of its
//! process's resident pages ([`VictimTry`]); for `file.compute_ra`, two ghost caches of the
//! file fed the same reads, one following the live read-ahead and one the candidate's
//! ([`RaTry`]).
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
//! Program memory (the pager's evictions, when the process has a paged memory) has no ghost:
//! the pager sees faults, not accesses, so which pages a different choice would have kept in use
//! is unknown. Its decisions are offered to the same candidate and judged by agreement and a
//! stated model: where among the pager's candidates (coldest first) each would have taken its
//! victim.
//!
//! The live path only offers each access to a bounded queue (one `try_send`); a thread of the
//! shadow's own drains it, runs the ghost and the candidate, and counts what it could not take.
//! With `sample` N > 1, only pages whose identity hashes to 0 mod N are followed and the ghost
//! keeps 1/N of the allocation (spatial sampling, as SHARDS samples a miss-ratio curve): its
//! misses, times N, estimate the whole's at a fraction of the cost.

use crate::Pid;
use crate::points::{Advice, Candidates, ComputeRa, PageHint, PickVictim, RaFile, Read, VictimEnv};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use vino_blockdev::BLOCK_SIZE;
use vino_graft::abi::Extent;
use vino_graft::shadow::{DECISION_QUEUE, Drain, Fed, Report, Sampler};
pub use vino_graft::shadow::{OwnerCall, ShadowCounts, TRY_QUEUE};
use vino_graft::{GraftPoint, GraftSlot, LoadError, Owner, Shadow, abi};

/// One access the cache saw: the page, whether it was a hit, and the process's resident pages.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    page: u64,
    hit: bool,
    resident: u32,
}

/// What the live path offers a victim shadow: a page access the cache saw, or one eviction of
/// the pager's (program memory).
pub enum Seen {
    Access(Access),
    Memory(Box<MemoryPick>),
}

/// One eviction of program memory: the pager's candidates (page ids, coldest first) and the
/// live choice.
pub struct MemoryPick {
    ids: Vec<u64>,
    live: usize,
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
    /// Pages in the ghost now.
    pub ghost_pages: usize,
    /// Program memory's evictions offered, those the candidate chose alike, where each took its
    /// victim among the pager's candidates (mean index, 0 the coldest), and those the queue's
    /// share for them (256 at once) could not take.
    pub memory_decisions: u64,
    pub memory_agreed: u64,
    pub memory_live_index: f64,
    pub memory_candidate_index: f64,
    pub memory_drops: u64,
    #[serde(flatten)]
    pub shadow: ShadowCounts,
}

impl Report for VictimTryReport {
    fn counts(&mut self) -> &mut ShadowCounts {
        &mut self.shadow
    }
}

/// A candidate `vas.pick_victim` graft in shadow beside a process's live policy. Dropping it
/// stops the shadow.
pub struct VictimTry {
    fed: Fed<Seen, VictimTryReport>,
    sample: u32,
    /// Program memory's evictions in the queue (at most [`DECISION_QUEUE`]), and those refused.
    memory_queued: Arc<AtomicUsize>,
    memory_drops: AtomicU64,
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
        let account = owner.account.clone();
        let shadow = slot.shadow(wasm, owner, Arc::new(VictimEnv::new(pid)))?;
        let sample = sample.max(1);
        let report = VictimTryReport {
            point: slot.name().to_string(),
            sample,
            ..VictimTryReport::default()
        };
        // Each slot of the queue, and its share of the program-memory decisions it may hold.
        let pick = std::mem::size_of::<MemoryPick>() + abi::VICTIM_MAX * 8;
        let item =
            std::mem::size_of::<vino_graft::shadow::Item<Seen>>() + (DECISION_QUEUE * pick).div_ceil(queue.max(1));
        let memory_queued = Arc::new(AtomicUsize::new(0));
        let queued = memory_queued.clone();
        let fed = Fed::start(
            format!("vino-try-{pid}"),
            queue,
            item,
            account.as_ref(),
            // Exact needs every access; the thread is paced, and what it cannot take dropped.
            Sampler::new(Some(1)),
            report,
            move |drain, report| Ghost::new(shadow, report).run(drain, &queued),
        )?;
        Ok(Arc::new(VictimTry {
            fed,
            sample,
            memory_queued,
            memory_drops: AtomicU64::new(0),
        }))
    }

    /// Offers one eviction of the process's program memory: the pager's candidates and the
    /// live choice (never waits).
    pub fn offer_memory(&self, ids: &[u64], live: usize) {
        let ids = &ids[..ids.len().min(abi::VICTIM_MAX)];
        if live >= ids.len() {
            return;
        }
        // A place among the 256 is taken first, and given back if the queue refuses it.
        if self.memory_queued.fetch_add(1, Ordering::Relaxed) >= DECISION_QUEUE {
            self.memory_queued.fetch_sub(1, Ordering::Relaxed);
            self.memory_drops.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let pick = MemoryPick {
            ids: ids.to_vec(),
            live,
        };
        if !self.fed.offer(Seen::Memory(Box::new(pick))) {
            self.memory_queued.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// What it found so far ([`Fed::report`], with program memory's drops).
    pub fn report(&self) -> VictimTryReport {
        let mut r = self.fed.report();
        r.memory_drops = self.memory_drops.load(Ordering::Relaxed);
        r
    }

    /// Stops it once it has drained its queue ([`Fed::stop`]): what it found.
    pub fn stop(&self) -> VictimTryReport {
        let mut r = self.fed.stop();
        r.memory_drops = self.memory_drops.load(Ordering::Relaxed);
        r
    }

    /// Offers one access of the live path (never waits: a full queue counts a drop).
    #[inline]
    pub(crate) fn offer(&self, page: u64, hit: bool, resident: usize) {
        if self.sample > 1 && !sampled(page, self.sample) {
            return;
        }
        let resident = (resident / self.sample as usize) as u32;
        self.fed.offer(Seen::Access(Access { page, hit, resident }));
    }
}

/// Its queue: [`Fed::running`], [`Fed::owner`], [`Fed::report`], [`Fed::stop`].
impl std::ops::Deref for VictimTry {
    type Target = Fed<Seen, VictimTryReport>;
    fn deref(&self) -> &Self::Target {
        &self.fed
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

    fn run(&mut self, drain: Drain<Seen>, memory_queued: &AtomicUsize) {
        for item in drain {
            match item.live(&self.shadow) {
                Some(Seen::Access(a)) => self.access(a),
                Some(Seen::Memory(pick)) => {
                    memory_queued.fetch_sub(1, Ordering::Relaxed);
                    self.memory(&pick);
                }
                None => {}
            }
        }
    }

    /// One eviction of program memory: the candidate's choice against the live one.
    fn memory(&mut self, pick: &MemoryPick) {
        let candidates = Candidates::fixed(pick.ids.clone());
        let n = pick.ids.len();
        // A failed call takes the default's choice (the coldest), as it would bound.
        let choice = self.shadow.decide(&candidates).ok().filter(|&i| i < n).unwrap_or(0);
        drop(candidates);
        // Its hints are about program pages, which the ghost does not hold.
        drop(self.shadow.env().take_hints());
        let mut r = self.report.lock();
        r.memory_decisions += 1;
        r.memory_agreed += u64::from(choice == pick.live);
        let k = r.memory_decisions as f64;
        r.memory_live_index += (pick.live as f64 - r.memory_live_index) / k;
        r.memory_candidate_index += (choice as f64 - r.memory_candidate_index) / k;
        r.shadow = ShadowCounts::of(&self.shadow);
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
                None if self.evict(a.page) => {}
                None => break,
            }
        }
        let at = self.stamp();
        self.lru.put(a.page, at);
        self.list.put(a.page, at);
        let mut r = self.report.lock();
        r.accesses += 1;
        r.live_misses += u64::from(!a.hit);
        r.would_be_misses += u64::from(!held);
        r.shadow = ShadowCounts::of(&self.shadow);
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

/// One read of a file with a `file.compute_ra` shadow: where, the file's size then, and what
/// the live policy asked to read ahead after it.
#[derive(Debug, Clone)]
pub struct RaRead {
    offset: u64,
    len: u32,
    size: u64,
    live: Vec<Extent>,
}

/// What one read-ahead policy's ghost cache saw, in pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RaOutcome {
    /// Pages read that the ghost held, and those it did not (read from the device).
    pub hits: u64,
    pub misses: u64,
    /// Pages the policy asked for that the ghost did not hold yet (read ahead).
    pub prefetched: u64,
    /// Of those, read before they left the ghost, and not (pushed out unread, or never read).
    pub used: u64,
    pub wasted: u64,
}

/// What a read-ahead shadow found: the live policy and the candidate, each in a ghost cache of
/// the same size fed the same reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RaTryReport {
    pub point: String,
    pub reads: u64,
    /// Pages each ghost cache holds (the model: the file alone in a cache of this many frames,
    /// least recently used out first; read-ahead does not make a held page younger).
    pub frames: usize,
    pub live: RaOutcome,
    pub candidate: RaOutcome,
    #[serde(flatten)]
    pub shadow: ShadowCounts,
}

impl Report for RaTryReport {
    fn counts(&mut self) -> &mut ShadowCounts {
        &mut self.shadow
    }
}

/// A candidate `file.compute_ra` graft in shadow beside an open file's live read-ahead.
pub struct RaTry {
    fed: Fed<RaRead, RaTryReport>,
}

impl RaTry {
    /// Starts `wasm` in shadow beside the file's graftpoint `slot`, with ghosts of `frames`
    /// pages; charged to `owner` as a graft.
    pub(crate) fn start(
        slot: &GraftSlot<ComputeRa>,
        wasm: &[u8],
        owner: Owner,
        frames: usize,
        queue: usize,
    ) -> Result<Arc<RaTry>, LoadError> {
        let account = owner.account.clone();
        let mut shadow = slot.shadow(wasm, owner, Arc::new(RaFile::new()))?;
        let frames = frames.max(1);
        let report = RaTryReport {
            point: slot.name().to_string(),
            frames,
            ..RaTryReport::default()
        };
        let fed = Fed::start(
            "vino-try-ra".into(),
            queue,
            // A read and the live answer's extents (at most two calls' worth).
            std::mem::size_of::<vino_graft::shadow::Item<RaRead>>()
                + 2 * abi::RA_MAX_EXTENTS * std::mem::size_of::<Extent>(),
            account.as_ref(),
            Sampler::new(Some(1)),
            report,
            move |drain: Drain<RaRead>, shared| {
                let (mut live, mut candidate) = (RaGhost::new(frames), RaGhost::new(frames));
                for item in drain {
                    let Some(read) = item.live(&shadow) else { continue };
                    let env = shadow.env().clone();
                    env.size.store(read.size, Ordering::Relaxed);
                    let args = Read {
                        offset: read.offset,
                        len: read.len,
                    };
                    // A failed call takes the default's answer, as it would bound.
                    let decided = shadow
                        .decide(&args)
                        .unwrap_or_else(|_| ComputeRa::default_policy(shadow.env(), &args));
                    let mut asked: Vec<Extent> = decided.as_slice().to_vec();
                    asked.extend(env.prefetched.take());
                    live.read(&read, &read.live);
                    candidate.read(&read, &asked);
                    let mut r = shared.lock();
                    r.reads += 1;
                    r.live = live.outcome();
                    r.candidate = candidate.outcome();
                    r.shadow = ShadowCounts::of(&shadow);
                }
                let mut r = shared.lock();
                r.live = live.finish();
                r.candidate = candidate.finish();
            },
        )?;
        Ok(Arc::new(RaTry { fed }))
    }

    /// Offers one read and the live policy's answer (never waits: a full queue counts a drop).
    pub(crate) fn offer(&self, offset: u64, len: u32, size: u64, live: &Advice) {
        let mut asked = live.decided.as_slice().to_vec();
        asked.extend_from_slice(live.prefetched.as_slice());
        self.fed.offer(RaRead {
            offset,
            len,
            size,
            live: asked,
        });
    }
}

/// Its queue: [`Fed::running`], [`Fed::owner`], [`Fed::report`], [`Fed::stop`].
impl std::ops::Deref for RaTry {
    type Target = Fed<RaRead, RaTryReport>;
    fn deref(&self) -> &Self::Target {
        &self.fed
    }
}

/// A ghost cache of one file's pages under one read-ahead policy.
struct RaGhost {
    frames: usize,
    held: Order,
    /// Pages read ahead and not read yet.
    unread: rustc_hash::FxHashSet<u64>,
    next: u64,
    outcome: RaOutcome,
}

impl RaGhost {
    fn new(frames: usize) -> RaGhost {
        RaGhost {
            frames,
            held: Order::default(),
            unread: Default::default(),
            next: FIRST_PLACE,
            outcome: RaOutcome::default(),
        }
    }

    /// Makes `page` held (the youngest), pushing out the oldest if the ghost is full.
    fn hold(&mut self, page: u64) {
        if self.held.place.len() >= self.frames
            && let Some((_, &old)) = self.held.pages.iter().next()
        {
            self.held.remove(old);
            if self.unread.remove(&old) {
                self.outcome.wasted += 1;
            }
        }
        self.next += 1;
        self.held.put(page, self.next);
    }

    /// A read, then the policy's read-ahead after it.
    fn read(&mut self, read: &RaRead, asked: &[Extent]) {
        let bs = BLOCK_SIZE as u64;
        let end = (read.offset + u64::from(read.len)).min(read.size.max(read.offset + 1));
        for page in read.offset / bs..end.div_ceil(bs) {
            if self.held.place.contains_key(&page) {
                self.outcome.hits += 1;
                if self.unread.remove(&page) {
                    self.outcome.used += 1;
                }
            } else {
                self.outcome.misses += 1;
            }
            self.hold(page);
        }
        let most = (abi::RA_MAX_BYTES / bs) as usize;
        let asked_pages = asked
            .iter()
            .flat_map(|e| e.off / bs..(e.off + e.len).div_ceil(bs))
            .take(most);
        for page in asked_pages {
            if !self.held.place.contains_key(&page) {
                self.outcome.prefetched += 1;
                self.unread.insert(page);
                self.hold(page);
            }
        }
    }

    fn outcome(&self) -> RaOutcome {
        self.outcome
    }

    /// The outcome at the end: what was read ahead and is still unread was wasted.
    fn finish(&mut self) -> RaOutcome {
        self.outcome.wasted += self.unread.len() as u64;
        self.unread.clear();
        self.outcome
    }
}

/// What replaying another `file.compute_ra` module on a recording would have read ahead,
/// against the recorded graft, in the ghost caches of `graft try` (`frames` pages each): the
/// recording's reads are fed to both, one ghost following the recorded answers (their extents
/// and committed `vino_prefetch` calls), the other the candidate's. `candidate` is the replay
/// of the candidate on `recording`, its decisions kept. A failed invocation, on either side,
/// takes the default's answer, as it would bound; the candidate's `vino_prefetch` calls are
/// held to what the kernel would have allowed (inside the file, [`abi::RA_MAX_BYTES`] a call).
pub fn ra_replayed(
    recording: &vino_graft::record::Recording,
    candidate: &vino_graft::replay::ReplayReport,
    frames: usize,
) -> Result<RaTryReport, String> {
    use vino_graft::record::{Event, Outcome, apply};
    let h = &recording.header;
    if h.point != ComputeRa::NAME {
        return Err(format!("a recording at {}, not {}", h.point, ComputeRa::NAME));
    }
    let decisions = candidate.decisions.as_ref().ok_or("the replay kept no decisions")?;
    let mut area = match h.arg_area {
        Some((at, len)) => recording.image.slice(at, len),
        None => Vec::new(),
    };
    let env = RaFile::new();
    let frames = frames.max(1);
    let (mut live, mut tried) = (RaGhost::new(frames), RaGhost::new(frames));
    let mut report = RaTryReport {
        point: h.slot.clone(),
        frames,
        ..RaTryReport::default()
    };
    let mut read: Option<(Read, u64)> = None;
    let mut live_prefetched: Vec<Extent> = Vec::new();
    let mut k = 0usize;
    for event in &recording.events {
        match event {
            Event::Invoke { params, area: changes } => {
                apply(&mut area, changes);
                let [offset, len, size] = params[..] else {
                    return Err(format!("an invocation with {} parameters", params.len()));
                };
                let r = Read {
                    offset: offset as u64,
                    len: len as u32,
                };
                read = Some((r, size as u64));
                live_prefetched.clear();
            }
            Event::Call { function, args, answer } => {
                let name = h.functions.get(*function as usize).map(String::as_str);
                if name == Some("vino_prefetch")
                    && answer == &Ok(Some(0))
                    && let [off, len] = args[..]
                {
                    live_prefetched.push(Extent {
                        off: off as u64,
                        len: len as u64,
                    });
                }
            }
            Event::Return { results, left, outcome } => {
                let Some((r, size)) = read.take() else { continue };
                env.size.store(size, Ordering::Relaxed);
                let default = || ComputeRa::default_policy(&env, &r).as_slice().to_vec();
                let answered = |results: &[i64], left: &vino_graft::record::Changes| {
                    let mut answer = area.clone();
                    apply(&mut answer, left);
                    let count = results.first().copied().unwrap_or(-1) as i32;
                    abi::decode_extents(count, &answer, size)
                        .ok()
                        .map(|e| e.as_slice().to_vec())
                };
                let mut live_asked = match outcome {
                    Outcome::Decided => answered(results, left).unwrap_or_else(default),
                    _ => default(),
                };
                if *outcome == Outcome::Decided {
                    live_asked.append(&mut live_prefetched);
                }
                let decided = decisions.get(k).cloned().flatten();
                k += 1;
                let candidate_asked = match decided.and_then(|d| Some((answered(&d.results, &d.area)?, d.calls))) {
                    Some((mut asked, calls)) => {
                        asked.extend(allowed_prefetches(&calls, size));
                        asked
                    }
                    None => {
                        report.shadow.failures += 1;
                        default()
                    }
                };
                let ra_read = RaRead {
                    offset: r.offset,
                    len: r.len,
                    size,
                    live: Vec::new(),
                };
                live.read(&ra_read, &live_asked);
                tried.read(&ra_read, &candidate_asked);
                report.reads += 1;
            }
            _ => {}
        }
    }
    report.shadow.decisions = k as u64;
    report.live = live.finish();
    report.candidate = tried.finish();
    Ok(report)
}

/// The `vino_prefetch` calls of `calls` the kernel would have taken: inside a file of `size`
/// bytes, at most [`abi::RA_MAX_BYTES`] in all.
fn allowed_prefetches(calls: &[(String, Vec<i64>)], size: u64) -> Vec<Extent> {
    let mut bytes = 0u64;
    let mut out = Vec::new();
    for (name, args) in calls {
        let (true, [off, len]) = (name == "vino_prefetch", &args[..]) else {
            continue;
        };
        let (Ok(off), Ok(len)) = (u64::try_from(*off), u64::try_from(*len)) else {
            continue;
        };
        if len == 0 || off.checked_add(len).is_none_or(|end| end > size) || bytes + len > abi::RA_MAX_BYTES {
            continue;
        }
        bytes += len;
        out.push(Extent { off, len });
    }
    out
}

/// What another `vas.pick_victim` module would have done on a recording's page accesses, in the
/// ghost of `graft try`: the recording's accesses ([`vino_graft::record::Event::Access`]) run
/// through a ghost of the process's resident pages whose evictions `wasm` chooses, with the
/// owner's writes (moved to the same symbols, [`vino_graft::replay::moved_write`]) and control
/// calls reaching it where they came. The candidate runs under fuel with the recording's
/// budgets, so the answer is the same on every run. The live side is what the recording saw:
/// the accesses the cache missed.
pub fn victim_replayed(recording: &vino_graft::record::Recording, wasm: &[u8]) -> Result<VictimTryReport, String> {
    use vino_graft::record::Event;
    let h = &recording.header;
    if h.point != PickVictim::NAME {
        return Err(format!("a recording at {}, not {}", h.point, PickVictim::NAME));
    }
    if !recording.events.iter().any(|e| matches!(e, Event::Access { .. })) {
        return Err(format!(
            "the recording of {} holds no page accesses for the ghost (none were made, or it was \
             recorded where the cache does not observe them)",
            h.slot
        ));
    }
    let runtime = vino_graft::replay::runtime_for(h);
    let slot: GraftSlot<PickVictim> = GraftSlot::new(
        &runtime,
        Arc::new(VictimEnv::new(0)),
        vino_graft::Access::Privileged,
        None,
    );
    let shadow = slot
        .shadow(wasm, Owner::default(), Arc::new(VictimEnv::new(0)))
        .map_err(|e| e.to_string())?;
    let report = Arc::new(Mutex::new(VictimTryReport {
        point: h.slot.clone(),
        sample: 1,
        ..VictimTryReport::default()
    }));
    let mut ghost = Ghost::new(shadow, report.clone());
    for event in &recording.events {
        match event {
            Event::Access { page, hit, resident } => ghost.access(Access {
                page: *page,
                hit: *hit,
                resident: *resident,
            }),
            Event::Write { offset, bytes } => {
                let shadow = &ghost.shadow;
                let at = vino_graft::replay::moved_write(h, *offset, |name| shadow.symbol_address(name).ok());
                if let Err(e) = shadow.write_memory(at, bytes) {
                    shadow.owner_failed(&e);
                }
            }
            Event::Control { name, args } => {
                if let Err(e) = ghost.shadow.call_control(name, args) {
                    ghost.shadow.owner_failed(&e);
                }
            }
            _ => {}
        }
    }
    let mut r = report.lock().clone();
    r.shadow = ShadowCounts::of(&ghost.shadow);
    Ok(r)
}
