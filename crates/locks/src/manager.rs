//! The lock manager: held locks and waiting requests of every object, and the one mutex that
//! guards them.
//!
//! An object's `lock.grant` graft never runs under that mutex: the graft belongs to one file's
//! creator, and everyone's locks on every other file go through the mutex. A grant round that
//! asks a graft takes a snapshot of the object's queue and holders, marks the object as
//! deciding, releases the mutex for the call, and applies the answer only if the object is
//! as it was; otherwise it asks again with a fresh snapshot, a few times, then lets the default
//! decide under the mutex. Rounds of that object that come meanwhile leave the decision to the
//! round in progress, which sees their changes when it checks its snapshot. So only the users of
//! that one file wait for its graft, at most a few budgets (100 µs of work each); trusted native
//! policies and the default still decide under the mutex.

use crate::grant::{self, GRANT_MAX, GrantArgs, GrantEnv, LockGrant, Requeue, WaitInfo};
use crate::range::{Held, Lock, LockKind, Range};
use parking_lot::{Condvar, Mutex, MutexGuard};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use vino_graft::account::{Account, Charge, Exceeded, Resource};
use vino_graft::{Access, GraftSlot, PolicyKind, Runtime};

/// Why a lock request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// A conflicting lock is held and the caller would not wait (fcntl `F_SETLK`: `EAGAIN`).
    #[error("the range is locked by process {holder}")]
    WouldBlock { holder: u64 },
    /// Waiting would close a cycle of owners waiting for each other (`EDEADLK`).
    #[error("waiting for process {holder}'s lock would deadlock")]
    Deadlock { holder: u64 },
    /// The wait passed its time limit.
    #[error("timed out waiting for the lock")]
    TimedOut,
    /// The wait was cancelled: the owner closed the object or is going away.
    #[error("the lock wait was cancelled")]
    Cancelled,
    /// The range runs past the largest offset.
    #[error("invalid range: {0}")]
    Invalid(String),
    /// The owner's account may hold no more lock records (`ENOLCK`).
    #[error("{0}")]
    Limit(Exceeded),
}

/// Whether and how long a request may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Fail with [`LockError::WouldBlock`] instead (`F_SETLK`).
    No,
    /// Until granted, cancelled, or found to deadlock (`F_SETLKW`).
    Forever,
    /// At most this long, then [`LockError::TimedOut`].
    For(Duration),
}

/// The manager's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LockStats {
    /// Requests granted at once.
    pub immediate: u64,
    /// Requests granted after waiting (blocked at least once).
    pub waited: u64,
    pub would_block: u64,
    pub deadlocks: u64,
    pub timeouts: u64,
    pub cancelled: u64,
    /// Times a grant policy was asked.
    pub decisions: u64,
    /// Decisions where the policy granted nothing though nobody could release: the default
    /// decided instead.
    pub overridden: u64,
    /// Decisions of a native policy the kernel refused (a graft's are refused by its slot).
    pub refused: u64,
}

struct Waiter {
    id: u64,
    owner: u64,
    kind: LockKind,
    range: Range,
    /// When it arrived, on the kernel's clock.
    since: Duration,
    cv: Arc<Condvar>,
}

#[derive(Default)]
struct Object {
    held: Held,
    /// Counts changes to `held`, so a grant round can tell whether it changed meanwhile.
    generation: u64,
    /// Arrival order.
    waiting: VecDeque<Waiter>,
    /// A grant round is asking the object's graft, with the manager's mutex released.
    deciding: bool,
}

/// Times a graft is asked again when the object changed while it decided, before the default
/// decides under the mutex.
const GRAFT_ROUNDS: usize = 3;

/// Records a waiting request sets aside: the most a grant can add (one lock split in three).
const WAIT_RESERVE: u64 = 2;

/// Objects with more held locks than this are checked only by [`LockManager::check_invariants`],
/// not after every operation: a full check is O(n log n).
const CHECK_EACH_OP_MAX: usize = 512;

/// What an owner holds over all objects, and the charge to its account that pays for it.
struct Owner {
    records: u64,
    /// Set aside for its waiting requests, [`WAIT_RESERVE`] each.
    reserved: u64,
    /// `records + reserved`, charged to the account of the first charged request; none for
    /// owners never charged.
    charge: Option<Charge>,
}

#[derive(Default)]
struct State {
    objects: HashMap<u64, Object>,
    /// Outcomes of waits decided by someone else, by waiter id.
    outcomes: HashMap<u64, Result<(), LockError>>,
    slots: HashMap<u64, Arc<GraftSlot<LockGrant>>>,
    /// Candidates in shadow beside objects' live policies (`vino graft try`).
    tries: HashMap<u64, Arc<crate::shadow::LockTry>>,
    /// Owners holding or waiting for locks.
    owners: HashMap<u64, Owner>,
    next_id: u64,
    stats: LockStats,
}

/// Byte-range locks on objects named by `u64` ids, held by owners named by `u64` ids (process
/// ids), with POSIX fcntl semantics; see the crate documentation.
pub struct LockManager {
    runtime: Runtime,
    state: Mutex<State>,
}

impl LockManager {
    /// A manager whose `lock.grant` graftpoints run in `runtime`.
    pub fn new(runtime: &Runtime) -> LockManager {
        LockManager {
            runtime: runtime.clone(),
            state: Mutex::new(State::default()),
        }
    }

    /// The clock deadlines run on: the runtime's transaction manager's, which is the kernel's.
    fn clock(&self) -> &vino_graft::vlt::SharedClock {
        self.runtime.vlt().clock()
    }

    /// The `lock.grant` graftpoint of `object` (named `lock.grant/<object>`), created on first use
    /// with `access` (later calls return the same slot whatever they pass).
    pub fn graftpoint(&self, object: u64, access: Access) -> Arc<GraftSlot<LockGrant>> {
        let mut st = self.state.lock();
        st.slots
            .entry(object)
            .or_insert_with(|| {
                let env = Arc::new(GrantEnv::new(object));
                Arc::new(GraftSlot::new(&self.runtime, env, access, Some(&object.to_string())))
            })
            .clone()
    }

    /// The object's graftpoint if it has one.
    pub fn existing_graftpoint(&self, object: u64) -> Option<Arc<GraftSlot<LockGrant>>> {
        self.state.lock().slots.get(&object).cloned()
    }

    /// Starts `wasm`, a `lock.grant` graft, in shadow beside the live policy of `object`, whose
    /// graftpoint is `slot`, offered 1 in `sample` of its decisions (see [`crate::shadow`]); it
    /// replaces a shadow already there. The caller checks that `owner` may graft `slot`.
    pub fn try_start(
        &self,
        object: u64,
        slot: &GraftSlot<LockGrant>,
        wasm: &[u8],
        owner: vino_graft::Owner,
        sample: Option<u32>,
        queue: usize,
    ) -> Result<Arc<crate::shadow::LockTry>, vino_graft::LoadError> {
        let shadow = crate::shadow::LockTry::start(slot, wasm, owner, sample, queue)?;
        let old = self.state.lock().tries.insert(object, shadow.clone());
        if let Some(old) = old {
            old.stop();
        }
        Ok(shadow)
    }

    /// Stops `object`'s shadow, once it has drained what it was offered: what it found.
    pub fn try_stop(&self, object: u64) -> Option<crate::shadow::LockTryReport> {
        let shadow = self.state.lock().tries.remove(&object)?;
        Some(shadow.stop())
    }

    /// `object`'s shadow, if one runs.
    pub fn try_handle(&self, object: u64) -> Option<Arc<crate::shadow::LockTry>> {
        self.state.lock().tries.get(&object).cloned()
    }

    /// Forgets an object's graftpoint (the object is gone); its graft is unloaded.
    pub fn forget_graftpoint(&self, object: u64) {
        let (slot, tried) = {
            let mut st = self.state.lock();
            (st.slots.remove(&object), st.tries.remove(&object))
        };
        if let Some(tried) = tried {
            tried.stop();
        }
        if let Some(slot) = slot {
            slot.unload();
        }
    }

    /// `F_GETLK`: a lock of another owner that would block this request, if any.
    pub fn get_lock(&self, object: u64, owner: u64, kind: LockKind, range: Range) -> Option<Lock> {
        let st = self.state.lock();
        st.objects.get(&object)?.held.first_conflict(owner, kind, &range)
    }

    /// `F_SETLK`/`F_SETLKW` with a read or write lock: sets `owner`'s lock on `range` to `kind`,
    /// replacing what it held there (upgrade, downgrade, split, merge). The records are not
    /// charged, unless the owner's are already (see [`LockManager::lock_charged`]).
    pub fn lock(&self, object: u64, owner: u64, kind: LockKind, range: Range, wait: Wait) -> Result<(), LockError> {
        self.lock_in(object, owner, None, kind, range, wait)
    }

    /// As [`LockManager::lock`], charging each lock record `owner` holds (and
    /// [`WAIT_RESERVE`] for each request it waits with) to `account` as
    /// [`Resource::LockRecords`]: [`LockError::Limit`] if that passes a limit, with nothing
    /// changed. The owner's records stay charged to the account of its first charged request
    /// until it holds and waits for nothing.
    pub fn lock_charged(
        &self,
        object: u64,
        owner: u64,
        account: &Arc<Account>,
        kind: LockKind,
        range: Range,
        wait: Wait,
    ) -> Result<(), LockError> {
        self.lock_in(object, owner, Some(account), kind, range, wait)
    }

    fn lock_in(
        &self,
        object: u64,
        owner: u64,
        account: Option<&Arc<Account>>,
        kind: LockKind,
        range: Range,
        wait: Wait,
    ) -> Result<(), LockError> {
        if range.is_empty() {
            return Err(LockError::Invalid(format!(
                "empty range {}..{}",
                range.start, range.end
            )));
        }
        let mut st = self.state.lock();
        let obj = st.objects.entry(object).or_default();
        let conflict = obj.held.first_conflict(owner, kind, &range).map(|l| l.owner);
        let weakens = obj.held.covered(owner, kind, &range);
        let queue_conflict = obj.waiting.iter().any(|w| {
            w.owner != owner && w.range.overlaps(&range) && (w.kind == LockKind::Write || kind == LockKind::Write)
        });
        if weakens || (conflict.is_none() && !queue_conflict) {
            // Nothing to order against: granted now. A downgrade may let waiters in.
            if let Err(e) = st.set(object, owner, account, Some(kind), range, 0) {
                tidy(&mut st, object);
                return Err(e);
            }
            st.stats.immediate += 1;
            if weakens {
                self.grant_round(&mut st, object);
            }
            checked(&st);
            return Ok(());
        }
        if let Some(holder) = conflict {
            if wait == Wait::No {
                st.stats.would_block += 1;
                return Err(LockError::WouldBlock { holder });
            }
            if let Some(holder) = deadlock(&st, owner, object, kind, &range) {
                st.stats.deadlocks += 1;
                return Err(LockError::Deadlock { holder });
            }
        }
        st.reserve(owner, account, WAIT_RESERVE)?;
        self.enqueue_and_wait(st, object, owner, kind, range, wait, conflict)
    }

    /// Queues a request (its records reserved), lets the policy decide, and waits for the outcome.
    #[allow(clippy::too_many_arguments)]
    fn enqueue_and_wait(
        &self,
        mut st: MutexGuard<'_, State>,
        object: u64,
        owner: u64,
        kind: LockKind,
        range: Range,
        wait: Wait,
        conflict: Option<u64>,
    ) -> Result<(), LockError> {
        st.next_id += 1;
        let id = st.next_id;
        let cv = Arc::new(Condvar::new());
        let waiter = Waiter {
            id,
            owner,
            kind,
            range,
            since: self.clock().monotonic(),
            cv: cv.clone(),
        };
        st.objects.entry(object).or_default().waiting.push_back(waiter);
        if conflict.is_none() {
            // It could go now, but others wait for overlapping bytes: the policy orders them.
            self.grant_round(&mut st, object);
            if let Some(outcome) = st.outcomes.remove(&id) {
                st.stats.immediate += 1;
                checked(&st);
                return outcome;
            }
        }
        let deadline = match wait {
            Wait::For(d) => Some(self.clock().deadline_in(d)),
            _ => None,
        };
        loop {
            if let Some(outcome) = st.outcomes.remove(&id) {
                if outcome.is_ok() {
                    st.stats.waited += 1;
                }
                checked(&st);
                return outcome;
            }
            let expired = match (wait, deadline) {
                (Wait::No, _) => true,
                // The kernel's clock decides when the time is up (a simulation's, too).
                (_, Some(d)) => self.clock().wait_until(&cv, &mut st, d),
                (_, None) => {
                    cv.wait(&mut st);
                    false
                }
            };
            if expired && !st.outcomes.contains_key(&id) {
                self.withdraw(&mut st, object, owner, id);
                let (err, counter) = if wait == Wait::No {
                    (
                        LockError::WouldBlock {
                            holder: conflict.unwrap_or(0),
                        },
                        &mut st.stats.would_block,
                    )
                } else {
                    (LockError::TimedOut, &mut st.stats.timeouts)
                };
                *counter += 1;
                checked(&st);
                return Err(err);
            }
        }
    }

    /// `F_SETLK` with `F_UNLCK`: drops `owner`'s locks on `range`, letting waiters in.
    /// [`LockError::Limit`] if it splits a lock in two and the owner's account may hold no more.
    pub fn unlock(&self, object: u64, owner: u64, range: Range) -> Result<(), LockError> {
        let mut st = self.state.lock();
        if !st.objects.contains_key(&object) {
            return Ok(());
        }
        st.set(object, owner, None, None, range, 0)?;
        self.grant_round(&mut st, object);
        tidy(&mut st, object);
        checked(&st);
        Ok(())
    }

    /// Drops every lock `owner` holds on `object` and cancels its waits there (POSIX: closing any
    /// descriptor of a file drops the process's locks on it).
    pub fn release_object(&self, object: u64, owner: u64) {
        let mut st = self.state.lock();
        self.release_in(&mut st, object, owner);
        checked(&st);
    }

    /// Drops every lock `owner` holds and cancels all its waits (it exited).
    pub fn release_owner(&self, owner: u64) {
        let mut st = self.state.lock();
        let objects: Vec<u64> = st
            .objects
            .iter()
            .filter(|(_, o)| o.held.count(owner) > 0 || o.waiting.iter().any(|w| w.owner == owner))
            .map(|(&id, _)| id)
            .collect();
        for object in objects {
            self.release_in(&mut st, object, owner);
        }
        checked(&st);
    }

    /// Cancels `owner`'s waits (a dying client): they fail with [`LockError::Cancelled`]; its
    /// held locks stay.
    pub fn cancel_waits(&self, owner: u64) {
        let mut st = self.state.lock();
        let objects: Vec<u64> = st
            .objects
            .iter()
            .filter(|(_, o)| o.waiting.iter().any(|w| w.owner == owner))
            .map(|(&id, _)| id)
            .collect();
        for object in objects {
            cancel_in(&mut st, object, owner);
            self.grant_round(&mut st, object);
            tidy(&mut st, object);
        }
        checked(&st);
    }

    fn release_in(&self, st: &mut MutexGuard<'_, State>, object: u64, owner: u64) {
        cancel_in(st, object, owner);
        if st.objects.contains_key(&object) {
            // Unlocking everything splits nothing: it cannot fail.
            let _ = st.set(object, owner, None, None, Range::all(), 0);
        }
        self.grant_round(st, object);
        tidy(st, object);
    }

    /// Removes a waiter that gave up; those queued behind it may now go.
    fn withdraw(&self, st: &mut MutexGuard<'_, State>, object: u64, owner: u64, id: u64) {
        if let Some(obj) = st.objects.get_mut(&object) {
            let before = obj.waiting.len();
            obj.waiting.retain(|w| w.id != id);
            if obj.waiting.len() < before {
                st.settle(owner, WAIT_RESERVE, 0);
            }
        }
        self.grant_round(st, object);
        tidy(st, object);
    }

    /// Asks the object's policy which waiters to grant and grants them. A graft is asked with
    /// the mutex released (see the module documentation); `st` is held again on return.
    fn grant_round(&self, st: &mut MutexGuard<'_, State>, object: u64) {
        let Some(obj) = st.objects.get(&object) else { return };
        if obj.waiting.is_empty() {
            return;
        }
        if obj.deciding {
            // The round in progress sees this change when it checks its snapshot.
            return;
        }
        let slot = st
            .slots
            .get(&object)
            .filter(|s| s.policy_kind() == PolicyKind::Wasm)
            .cloned();
        if let Some(slot) = slot {
            for _ in 0..GRAFT_ROUNDS {
                match self.graft_round(st, object, &slot) {
                    Round::Done => return,
                    Round::Changed => continue,
                }
            }
        }
        self.decide_here(st, object);
    }

    /// One round asking `slot` with the mutex released.
    fn graft_round(&self, st: &mut MutexGuard<'_, State>, object: u64, slot: &Arc<GraftSlot<LockGrant>>) -> Round {
        let Some(obj) = st.objects.get_mut(&object) else {
            return Round::Done;
        };
        if obj.waiting.is_empty() {
            return Round::Done;
        }
        let (infos, held, generation) = (wait_infos(obj, self.clock().monotonic()), held_for(obj), obj.generation);
        let ids: Vec<u64> = obj.waiting.iter().take(GRANT_MAX).map(|w| w.id).collect();
        obj.deciding = true;
        let mask = MutexGuard::unlocked(st, || {
            slot.invoke(&GrantArgs {
                waiters: &infos,
                held: &held,
            })
        });
        let Some(obj) = st.objects.get_mut(&object) else {
            return Round::Done;
        };
        obj.deciding = false;
        let requeues = slot.env().take_requeues();
        let same =
            obj.generation == generation && obj.waiting.iter().take(GRANT_MAX).map(|w| w.id).eq(ids.iter().copied());
        if !same {
            return Round::Changed;
        }
        self.apply(st, object, &infos, &held, mask);
        if let Some(obj) = st.objects.get_mut(&object) {
            requeue(obj, &ids, &requeues);
        }
        Round::Done
    }

    /// Decides with the native policy or the default, under the mutex.
    fn decide_here(&self, st: &mut State, object: u64) {
        let Some(obj) = st.objects.get(&object) else { return };
        if obj.waiting.is_empty() {
            return;
        }
        let (infos, held) = (wait_infos(obj, self.clock().monotonic()), held_for(obj));
        let args = GrantArgs {
            waiters: &infos,
            held: &held,
        };
        // The slot decides unless it holds a graft (one that kept changing its mind, or was
        // bound meanwhile): a graft never runs under the mutex, the default decides then. With
        // nothing bound the slot's answer is the default's, recorded while a recording of the
        // default runs.
        let mask = st
            .slots
            .get(&object)
            .and_then(|slot| slot.invoke_inline(&args))
            .unwrap_or_else(|| grant::frp(&args));
        self.apply(st, object, &infos, &held, mask);
    }

    /// Checks a policy's answer and grants what it names (the default decides for an answer
    /// the kernel refuses, or one that would strand the waiters).
    fn apply(&self, st: &mut State, object: u64, infos: &[WaitInfo], held: &[Lock], mut mask: u64) {
        let args = GrantArgs { waiters: infos, held };
        let refused = grant::check_grant(&args, mask).is_err();
        if refused {
            mask = grant::frp(&args);
        }
        let obj = st.objects.get(&object).expect("an object with waiters");
        let overridden = mask == 0 && nobody_can_release(obj);
        if overridden {
            mask = grant::frp(&args);
        }
        st.stats.decisions += 1;
        st.stats.refused += u64::from(refused);
        st.stats.overridden += u64::from(overridden);
        if let Some(shadow) = st.tries.get(&object) {
            shadow.offer(infos, held, mask);
        }
        if mask != 0 {
            grant_mask(st, object, mask);
        }
    }

    /// The locks held on an object, ordered by owner and start.
    pub fn held(&self, object: u64) -> Vec<Lock> {
        self.state
            .lock()
            .objects
            .get(&object)
            .map(|o| o.held.to_vec())
            .unwrap_or_default()
    }

    /// The requests waiting on an object, in arrival order.
    pub fn waiting(&self, object: u64) -> Vec<Lock> {
        let st = self.state.lock();
        let Some(o) = st.objects.get(&object) else {
            return Vec::new();
        };
        o.waiting
            .iter()
            .map(|w| Lock {
                owner: w.owner,
                kind: w.kind,
                range: w.range,
            })
            .collect()
    }

    pub fn stats(&self) -> LockStats {
        self.state.lock().stats
    }

    /// Lock records `owner` holds, over all objects, and those set aside for its waits.
    pub fn records(&self, owner: u64) -> (u64, u64) {
        self.state
            .lock()
            .owners
            .get(&owner)
            .map_or((0, 0), |o| (o.records, o.reserved))
    }

    /// Checks the manager's invariants and panics, naming the one broken, if any does not hold
    /// (see [`check_state`]). Tests call it between steps; builds with debug assertions or the
    /// `invariants` feature also check after every operation (objects of at most
    /// [`CHECK_EACH_OP_MAX`] locks).
    pub fn check_invariants(&self) {
        check_state(&self.state.lock(), usize::MAX);
    }
}

impl State {
    /// Charges `owner` for `n` more records, set aside, to `account` if it has no charge yet.
    fn reserve(&mut self, owner: u64, account: Option<&Arc<Account>>, n: u64) -> Result<(), LockError> {
        let entry = self.owners.entry(owner).or_insert(Owner {
            records: 0,
            reserved: 0,
            charge: None,
        });
        let grown = match (&mut entry.charge, account) {
            (Some(c), _) => c.grow(n),
            (None, Some(a)) => a.charge(Resource::LockRecords, n).map(|c| entry.charge = Some(c)),
            (None, None) => Ok(()),
        };
        if let Err(e) = grown {
            if entry.records + entry.reserved == 0 {
                self.owners.remove(&owner);
            }
            return Err(LockError::Limit(e));
        }
        entry.reserved += n;
        Ok(())
    }

    /// Turns `used` records set aside into `delta` more held ones, refunding what is left over.
    fn settle(&mut self, owner: u64, used: u64, delta: i64) {
        if used == 0 && delta == 0 {
            return;
        }
        let entry = self.owners.get_mut(&owner).expect("an owner with records");
        entry.reserved -= used;
        entry.records = entry
            .records
            .checked_add_signed(delta)
            .expect("an owner never drops more records than it holds");
        let keep = entry.records + entry.reserved;
        if let Some(c) = &mut entry.charge {
            assert!(keep <= c.amount(), "owner {owner}: records grew past what was charged");
            c.shrink(c.amount() - keep);
        }
        if keep == 0 {
            self.owners.remove(&owner);
        }
    }

    /// Sets `owner`'s lock on `range` of `object` to `kind` (`None`: unlocks it), paying for the
    /// records it adds from `reserved` set aside before, then by charging the rest.
    fn set(
        &mut self,
        object: u64,
        owner: u64,
        account: Option<&Arc<Account>>,
        kind: Option<LockKind>,
        range: Range,
        reserved: u64,
    ) -> Result<(), LockError> {
        let change = self.objects.entry(object).or_default().held.plan(owner, kind, range);
        let delta = change.delta();
        let extra = u64::try_from(delta).unwrap_or(0).saturating_sub(reserved);
        if extra > 0 {
            self.reserve(owner, account, extra)?;
        }
        let obj = self.objects.get_mut(&object).expect("the object planned on");
        obj.generation += u64::from(!change.is_empty());
        obj.held.apply(change);
        self.settle(owner, reserved + extra, delta);
        Ok(())
    }
}

/// Checks after an operation, in builds that ask for it (debug assertions, or the `invariants`
/// feature that the test gate turns on in release builds).
#[inline]
fn checked(st: &State) {
    if crate::CHECKS_INVARIANTS {
        check_state(st, CHECK_EACH_OP_MAX);
    }
}

/// The manager's invariants, between operations:
/// * no two owners hold conflicting locks on an object (POSIX's one guarantee);
/// * one owner's locks on an object are sorted, non-empty, disjoint, and adjacent ones of the
///   same kind are merged (what [`range::set_lock`] keeps);
/// * waiter ids are unique, and no waiter is still queued once its outcome is decided;
/// * an object with nothing held and nobody waiting has no entry (`tidy`);
/// * a waiter is never stranded: if some are waiting, at least one holder is free to release,
///   or a graft is deciding for them (its round settles them when it returns);
/// * each owner's entry counts exactly the records it holds and [`WAIT_RESERVE`] per waiting
///   request, and its charge is their sum.
///
/// Objects with more than `big` locks skip the check of their locks (O(n log n)).
fn check_state(st: &State, big: usize) {
    let mut ids = HashSet::new();
    let mut counted: HashMap<u64, (u64, u64)> = HashMap::new();
    for (&object, obj) in &st.objects {
        assert!(
            !obj.held.is_empty() || !obj.waiting.is_empty(),
            "object {object}: an empty entry was left behind"
        );
        if obj.held.len() <= big {
            obj.held.check(object);
        }
        for owner in obj.held.holders() {
            counted.entry(owner).or_default().0 += obj.held.count(owner) as u64;
        }
        for w in &obj.waiting {
            counted.entry(w.owner).or_default().1 += WAIT_RESERVE;
        }
        for w in &obj.waiting {
            assert!(ids.insert(w.id), "object {object}: waiter id {} queued twice", w.id);
            assert!(
                !st.outcomes.contains_key(&w.id),
                "object {object}: waiter {} is decided but still queued",
                w.id
            );
            assert!(
                !w.range.is_empty(),
                "object {object}: waiter {} asks for an empty range",
                w.id
            );
        }
        // While a graft decides, the round in progress settles the waiters when it returns.
        assert!(
            obj.waiting.is_empty() || obj.deciding || !nobody_can_release(obj),
            "object {object}: {} waiters stranded, no holder can release",
            obj.waiting.len()
        );
    }
    for (&owner, o) in &st.owners {
        assert_eq!(
            counted.remove(&owner).unwrap_or_default(),
            (o.records, o.reserved),
            "owner {owner}: records and reservations miscounted"
        );
        if let Some(c) = &o.charge {
            assert_eq!(c.amount(), o.records + o.reserved, "owner {owner}: charge is off");
        }
    }
    assert!(counted.is_empty(), "owners without an entry: {counted:?}");
}

/// How a round that asked a graft ended.
enum Round {
    Done,
    /// The object changed while the graft decided: its answer is stale.
    Changed,
}

/// What a policy is told of an object's waiters (the first [`GRANT_MAX`]).
fn wait_infos(obj: &Object, now: Duration) -> Vec<WaitInfo> {
    obj.waiting
        .iter()
        .take(GRANT_MAX)
        .map(|w| WaitInfo {
            owner: w.owner,
            kind: w.kind,
            range: w.range,
            upgrade: w.kind == LockKind::Write && obj.held.mine(w.owner, &w.range).any(|l| l.kind == LockKind::Read),
            age_ns: now.saturating_sub(w.since).as_nanos() as u64,
        })
        .collect()
}

/// The held locks a policy is shown: those overlapping a waiter it is told of (the others
/// cannot keep any of them waiting), by owner and start.
fn held_for(obj: &Object) -> Vec<Lock> {
    let mut held: Vec<Lock> = obj
        .waiting
        .iter()
        .take(GRANT_MAX)
        .flat_map(|w| obj.held.overlapping(&w.range))
        .collect();
    held.sort_by_key(|l| (l.owner, l.range.start));
    held.dedup();
    held
}

/// Grants the waiters the mask names (checked), in index order, and wakes them.
fn grant_mask(st: &mut State, object: u64, mask: u64) {
    let obj = st.objects.get_mut(&object).expect("object with waiters");
    let mut granted = Vec::new();
    for i in (0..obj.waiting.len().min(GRANT_MAX)).rev() {
        if mask & (1 << i) != 0 {
            granted.push(obj.waiting.remove(i).expect("index in range"));
        }
    }
    for w in granted.into_iter().rev() {
        // Its reservation covers whatever the grant adds: it cannot fail.
        let _ = st.set(object, w.owner, None, Some(w.kind), w.range, WAIT_RESERVE);
        st.outcomes.insert(w.id, Ok(()));
        w.cv.notify_one();
    }
}

/// Moves the waiters a graft's committed `vino_lock_requeue` calls named (by their index in
/// `ids`, the waiters it was offered) that still wait, in the order the calls were made.
fn requeue(obj: &mut Object, ids: &[u64], requeues: &[(usize, Requeue)]) {
    for &(index, place) in requeues {
        let Some(id) = ids.get(index) else { continue };
        let Some(at) = obj.waiting.iter().position(|w| w.id == *id) else {
            continue;
        };
        let w = obj.waiting.remove(at).expect("found");
        match place {
            Requeue::Front => obj.waiting.push_front(w),
            Requeue::Back => obj.waiting.push_back(w),
        }
    }
}

/// True if no owner holding a lock on the object is free to release it: nothing is held, or
/// every holder is itself waiting here. Granting nothing then would strand the waiters.
fn nobody_can_release(obj: &Object) -> bool {
    obj.held.holders().all(|h| obj.waiting.iter().any(|w| w.owner == h))
}

fn cancel_in(st: &mut State, object: u64, owner: u64) {
    let Some(obj) = st.objects.get_mut(&object) else { return };
    let mut kept = VecDeque::with_capacity(obj.waiting.len());
    let mut cancelled = 0;
    for w in obj.waiting.drain(..) {
        if w.owner == owner {
            st.outcomes.insert(w.id, Err(LockError::Cancelled));
            st.stats.cancelled += 1;
            cancelled += 1;
            w.cv.notify_one();
        } else {
            kept.push_back(w);
        }
    }
    obj.waiting = kept;
    st.settle(owner, cancelled * WAIT_RESERVE, 0);
}

/// Drops an object's entry once nothing is held or waiting on it.
fn tidy(st: &mut State, object: u64) {
    if st
        .objects
        .get(&object)
        .is_some_and(|o| o.held.is_empty() && o.waiting.is_empty())
    {
        st.objects.remove(&object);
    }
}

/// The owners whose held locks block a request.
fn blockers(st: &State, object: u64, owner: u64, kind: LockKind, range: &Range) -> Vec<u64> {
    st.objects
        .get(&object)
        .map(|o| o.held.conflicting_owners(owner, kind, range))
        .unwrap_or_default()
}

/// If `owner` waiting for this request would close a wait-for cycle (owner waits for a holder
/// who waits, directly or through others, for owner), the holder it would wait for.
fn deadlock(st: &State, owner: u64, object: u64, kind: LockKind, range: &Range) -> Option<u64> {
    let first = blockers(st, object, owner, kind, range);
    for &start in &first {
        let mut stack = vec![start];
        let mut seen = HashSet::new();
        while let Some(b) = stack.pop() {
            if b == owner {
                return Some(start);
            }
            if !seen.insert(b) {
                continue;
            }
            for (&obj_id, obj) in &st.objects {
                for w in obj.waiting.iter().filter(|w| w.owner == b) {
                    stack.extend(blockers(st, obj_id, b, w.kind, &w.range));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: u64, kind: LockKind, start: u64, end: u64) -> Lock {
        Lock {
            owner,
            kind,
            range: Range { start, end },
        }
    }

    /// An object holding `locks` as given, without the rules' splitting and merging.
    fn forced(locks: &[Lock]) -> Held {
        let mut h = Held::default();
        for l in locks {
            h.apply(Held::default().plan(l.owner, Some(l.kind), l.range));
        }
        h
    }

    #[test]
    #[should_panic(expected = "conflicting locks held")]
    fn the_check_catches_two_writers_on_one_byte() {
        let mut st = State::default();
        st.objects.entry(1).or_default().held =
            forced(&[held(1, LockKind::Write, 0, 10), held(2, LockKind::Write, 5, 6)]);
        check_state(&st, usize::MAX);
    }

    #[test]
    #[should_panic(expected = "not merged")]
    fn the_check_catches_an_unmerged_pair() {
        let mut st = State::default();
        st.objects.entry(1).or_default().held = forced(&[held(1, LockKind::Read, 0, 5), held(1, LockKind::Read, 5, 9)]);
        check_state(&st, usize::MAX);
    }
}
