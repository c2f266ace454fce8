//! The lock table: shared/exclusive locks on kernel objects, created on first use (as the
//! thesis' lock objects were) and removed when nobody holds or waits for them.
//!
//! Locks are held by a transaction *family* (a top-level transaction and all its nested
//! children, which run one at a time on one thread), so a child inherits its parent's locks for
//! free. The transaction records, per lock it took, what the family held before, so a child's
//! abort can give back exactly what the child added.

use crate::clock::later;
use crate::{VltConfig, VltError, VltStats};
use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A kernel object that can be locked. The kernel names its objects; the table does not care how.
pub type ObjectId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockMode {
    Shared,
    Exclusive,
}

/// What the family held on an object before an acquisition, so the acquisition can be undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prior {
    /// Nothing: undoing removes the family from the holders.
    Nothing,
    /// A shared lock that the acquisition upgraded: undoing downgrades it.
    Shared,
}

/// What an acquisition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Granted {
    /// The family already held a strong enough lock: nothing to undo.
    AlreadyHeld,
    New(Prior),
}

/// The part of a transaction that other transactions may touch: its identity, and the deadline
/// a waiter puts on it.
pub(crate) struct Family {
    /// Identity of the current top-level transaction using this record (records are pooled).
    pub(crate) id: AtomicU64,
    /// Deadline in [`crate::now_ns`] units, 0 for none. Waiters lower it; the owner polls it.
    pub(crate) deadline_ns: AtomicU64,
    /// The family this one is blocked on, for wait-for cycle detection.
    pub(crate) waits_for: Mutex<Option<Arc<Family>>>,
}

impl Family {
    pub(crate) fn new() -> Self {
        Family {
            id: AtomicU64::new(0),
            deadline_ns: AtomicU64::new(0),
            waits_for: Mutex::new(None),
        }
    }

    /// Lowers the deadline to `at` if it is later or unset; true if it changed.
    fn impose_deadline(&self, at: u64) -> bool {
        let mut cur = self.deadline_ns.load(Ordering::Relaxed);
        while cur == 0 || cur > at {
            match self
                .deadline_ns
                .compare_exchange_weak(cur, at, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
        false
    }

    /// True if the deadline is set and `now` (the manager's clock) has reached it.
    pub(crate) fn deadline_passed(&self, now: u64) -> bool {
        let d = self.deadline_ns.load(Ordering::Acquire);
        d != 0 && now >= d
    }

    fn id(&self) -> u64 {
        self.id.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct LockState {
    exclusive: bool,
    holders: SmallVec<[Arc<Family>; 2]>,
    waiters: u32,
}

impl LockState {
    fn position(&self, fam: &Family) -> Option<usize> {
        self.holders.iter().position(|h| std::ptr::eq(&**h, fam))
    }
}

struct Shard {
    locks: Mutex<FxHashMap<ObjectId, LockState>>,
    released: Condvar,
}

const SHARDS: usize = 64;

pub(crate) struct Manager {
    pub(crate) config: VltConfig,
    pub(crate) clock: vino_clock::SharedClock,
    shards: Box<[Shard]>,
    aborts: AtomicU64,
    lock_waits: AtomicU64,
    lock_timeouts: AtomicU64,
    deadlocks: AtomicU64,
    deadlines_set: AtomicU64,
    /// Called when a holder someone waits for has passed its deadline (see
    /// [`crate::Vlt::add_deadline_hook`]).
    pub(crate) deadline_hooks: parking_lot::RwLock<Vec<Arc<dyn Fn() + Send + Sync>>>,
}

fn shard_of(obj: ObjectId) -> usize {
    // Fibonacci hashing spreads sequential ids over the shards.
    (obj.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS
}

/// Longest wait-for chain followed when looking for a cycle.
const MAX_CHAIN: usize = 64;

impl Manager {
    pub(crate) fn new(config: VltConfig, clock: vino_clock::SharedClock) -> Self {
        let shards = (0..SHARDS)
            .map(|_| Shard {
                locks: Mutex::new(FxHashMap::default()),
                released: Condvar::new(),
            })
            .collect();
        Manager {
            config,
            clock,
            shards,
            aborts: AtomicU64::new(0),
            lock_waits: AtomicU64::new(0),
            lock_timeouts: AtomicU64::new(0),
            deadlocks: AtomicU64::new(0),
            deadlines_set: AtomicU64::new(0),
            deadline_hooks: parking_lot::RwLock::new(Vec::new()),
        }
    }

    /// Acquires `mode` on `obj` for `fam`, waiting (with deadlines) while another family holds a
    /// conflicting lock.
    pub(crate) fn acquire(&self, fam: &Arc<Family>, obj: ObjectId, mode: LockMode) -> Result<Granted, VltError> {
        let shard = &self.shards[shard_of(obj)];
        let mut table = shard.locks.lock();
        let mut wait_until: Option<u64> = None;
        let mut counted = false;
        loop {
            let st = table.entry(obj).or_default();
            if let Some(granted) = try_grant(st, fam, mode) {
                return Ok(granted);
            }
            // Conflict. Give up if our own time is up, then check for a cycle, then wait.
            if fam.deadline_passed(self.clock.now_ns()) {
                self.forget_if_idle(&mut table, obj);
                return Err(VltError::DeadlinePassed);
            }
            let now = self.clock.now_ns();
            let until = *wait_until.get_or_insert(later(now, self.config.wait_limit));
            if now >= until {
                self.lock_timeouts.fetch_add(1, Ordering::Relaxed);
                self.forget_if_idle(&mut table, obj);
                return Err(VltError::LockTimeout(obj));
            }
            let st = table.get_mut(&obj).expect("entry made above");
            let blocker = st.holders.iter().find(|h| !std::ptr::eq(&***h, &**fam)).cloned();
            if let Some(blocker) = &blocker
                && closes_cycle(fam, blocker)
            {
                self.deadlocks.fetch_add(1, Ordering::Relaxed);
                self.forget_if_idle(&mut table, obj);
                return Err(VltError::Deadlock(obj));
            }
            // Every holder in our way now has a time limit (thesis 6.3).
            let limit = later(now, self.config.hold_limit);
            for h in st.holders.iter().filter(|h| !std::ptr::eq(&***h, &**fam)) {
                if h.impose_deadline(limit) {
                    self.deadlines_set.fetch_add(1, Ordering::Relaxed);
                }
            }
            st.waiters += 1;
            // One wait per request, however many naps it takes.
            if !counted {
                counted = true;
                self.lock_waits.fetch_add(1, Ordering::Relaxed);
            }
            *fam.waits_for.lock() = blocker.clone();
            // Wake at least every millisecond to re-check our own deadline, which another waiter
            // may have lowered while we slept (on a manual clock the nap is host time, and the
            // recheck reads the clock: the wait ends when the clock passes `until`).
            let nap = Duration::from_nanos((until - now).min(1_000_000));
            shard.released.wait_for(&mut table, nap);
            if let Some(b) = &blocker
                && b.deadline_passed(self.clock.now_ns())
            {
                // The holder is past its time and still holds the lock: have it interrupted.
                self.deadline_hooks.read().iter().for_each(|hook| hook());
            }
            *fam.waits_for.lock() = None;
            table.get_mut(&obj).expect("a waiter keeps the entry alive").waiters -= 1;
        }
    }

    /// Gives back what one acquisition took.
    pub(crate) fn release(&self, fam: &Family, obj: ObjectId, prior: Prior) {
        let shard = &self.shards[shard_of(obj)];
        let mut table = shard.locks.lock();
        let st = table.get_mut(&obj).expect("releasing a lock that is not in the table");
        let at = st.position(fam).expect("releasing a lock the family does not hold");
        match prior {
            Prior::Nothing => {
                st.holders.swap_remove(at);
                if st.holders.is_empty() {
                    st.exclusive = false;
                }
            }
            Prior::Shared => {
                debug_assert!(st.exclusive, "undoing an upgrade of a lock that is not exclusive");
                st.exclusive = false;
            }
        }
        let wake = st.waiters > 0;
        self.forget_if_idle(&mut table, obj);
        drop(table);
        if wake {
            shard.released.notify_all();
        }
    }

    fn forget_if_idle(&self, table: &mut FxHashMap<ObjectId, LockState>, obj: ObjectId) {
        if table
            .get(&obj)
            .is_some_and(|st| st.holders.is_empty() && st.waiters == 0)
        {
            table.remove(&obj);
        }
    }

    pub(crate) fn count_abort(&self) {
        self.aborts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn locked_objects(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.locks.lock().values().filter(|st| !st.holders.is_empty()).count())
            .sum()
    }

    pub(crate) fn stats(&self) -> VltStats {
        VltStats {
            aborts: self.aborts.load(Ordering::Relaxed),
            lock_waits: self.lock_waits.load(Ordering::Relaxed),
            lock_timeouts: self.lock_timeouts.load(Ordering::Relaxed),
            deadlocks: self.deadlocks.load(Ordering::Relaxed),
            deadlines_set: self.deadlines_set.load(Ordering::Relaxed),
        }
    }
}

/// Grants the lock if it is compatible with the other holders.
fn try_grant(st: &mut LockState, fam: &Arc<Family>, mode: LockMode) -> Option<Granted> {
    let mine = st.position(fam);
    match (mode, mine) {
        (LockMode::Shared, Some(_)) => Some(Granted::AlreadyHeld),
        (LockMode::Exclusive, Some(_)) if st.exclusive => Some(Granted::AlreadyHeld),
        (LockMode::Exclusive, Some(_)) if st.holders.len() == 1 => {
            st.exclusive = true;
            Some(Granted::New(Prior::Shared))
        }
        (LockMode::Shared, None) if !st.exclusive => {
            st.holders.push(fam.clone());
            Some(Granted::New(Prior::Nothing))
        }
        (LockMode::Exclusive, None) if st.holders.is_empty() => {
            st.exclusive = true;
            st.holders.push(fam.clone());
            Some(Granted::New(Prior::Nothing))
        }
        _ => None,
    }
}

/// True if `blocker` is (transitively) waiting for `me`.
fn closes_cycle(me: &Family, blocker: &Arc<Family>) -> bool {
    let mut cur = blocker.clone();
    for _ in 0..MAX_CHAIN {
        if cur.id() == me.id() {
            return true;
        }
        let next = cur.waits_for.lock().clone();
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    false
}
