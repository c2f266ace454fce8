//! Lock semantics of the VLT lock table: compatibility, upgrades, inheritance by nested
//! transactions, what a child's abort gives back, release at commit/abort/drop, and the
//! deterministic parts of deadlock detection and deadlines.
//!
//! Most tests run several transaction families on one thread: a family is a top-level `Txn`, not
//! a thread, so a conflicting request from a second family waits out a short wait limit and
//! fails with `LockTimeout`. Time is a manual clock: a helper moves it past the limit once the
//! request waits, so no test depends on how fast the host runs. One test keeps the machine's
//! clock, where real time is the point.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use vino_clock::{ManualClock, SharedClock};
use vino_vlt::{LockMode, Vlt, VltConfig, VltError};

const X: u64 = 0x10;
const Y: u64 = 0x20;
const Z: u64 = 0x30;

const WAIT_LIMIT: Duration = Duration::from_millis(20);

/// A manager on a manual clock of its own.
fn manual(config: VltConfig) -> (Vlt, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Duration::ZERO));
    (Vlt::with_clock(config, SharedClock::new(clock.clone())), clock)
}

/// Short wait limit, on a manual clock ([`past_limit`] moves it). The hold limit is long so that
/// the deadlines imposed by those short waits never matter within a test.
fn short_wait() -> (Vlt, Arc<ManualClock>) {
    manual(VltConfig {
        hold_limit: Duration::from_secs(30),
        wait_limit: WAIT_LIMIT,
    })
}

/// Long limits on a manual clock nobody moves: only cycle detection ends a wait.
fn never() -> (Vlt, Arc<ManualClock>) {
    manual(VltConfig {
        hold_limit: Duration::from_secs(60),
        wait_limit: Duration::from_secs(60),
    })
}

/// Wait limit zero: a conflicting request fails at once, without waiting and without imposing a
/// deadline on the holder. Used to probe the lock table cheaply.
fn no_wait() -> Vlt {
    manual(VltConfig {
        hold_limit: Duration::from_secs(30),
        wait_limit: Duration::ZERO,
    })
    .0
}

/// Runs `request` on this thread while another moves `clock` by `by` as soon as the request
/// waits (its limit is fixed by then): a request that must time out does so on the clock's time.
fn past_limit<R>(vlt: &Vlt, clock: &ManualClock, by: Duration, request: impl FnOnce() -> R) -> R {
    let before = vlt.stats().lock_waits;
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if vlt.stats().lock_waits > before {
                    clock.advance(by);
                    return;
                }
                thread::yield_now();
            }
        });
        let r = request();
        done.store(true, Ordering::Relaxed);
        r
    })
}

/// Can a fresh family take `mode` on `obj` right now? The probe gives the lock back at once.
fn probe(vlt: &Vlt, obj: u64, mode: LockMode) -> Result<(), VltError> {
    let mut t = vlt.begin();
    let r = t.lock(obj, mode);
    t.abort();
    r
}

#[test]
fn shared_locks_are_compatible_across_families() {
    let (vlt, _) = short_wait();
    let mut a = vlt.begin();
    let mut b = vlt.begin();
    let mut c = vlt.begin();
    a.lock(X, LockMode::Shared).unwrap();
    b.lock(X, LockMode::Shared).unwrap();
    c.lock(X, LockMode::Shared).unwrap();
    assert_eq!(vlt.locked_objects(), 1);
    assert_eq!(vlt.stats().lock_waits, 0, "compatible requests never wait");
    a.commit();
    b.commit();
    assert_eq!(vlt.locked_objects(), 1, "c still holds X");
    c.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn shared_and_exclusive_conflict() {
    let (vlt, clock) = short_wait();
    let timing_out = |t: &mut vino_vlt::Txn, mode| past_limit(&vlt, &clock, WAIT_LIMIT, || t.lock(X, mode));
    let mut a = vlt.begin();
    a.lock(X, LockMode::Shared).unwrap();

    // Exclusive against shared.
    let mut b = vlt.begin();
    assert_eq!(timing_out(&mut b, LockMode::Exclusive), Err(VltError::LockTimeout(X)));
    assert_eq!(b.locks_held(), 0);
    b.abort();
    a.commit();

    // Shared against exclusive, and exclusive against exclusive.
    let mut a = vlt.begin();
    a.lock(X, LockMode::Exclusive).unwrap();
    let mut b = vlt.begin();
    assert_eq!(timing_out(&mut b, LockMode::Shared), Err(VltError::LockTimeout(X)));
    assert_eq!(timing_out(&mut b, LockMode::Exclusive), Err(VltError::LockTimeout(X)));
    // The failed requests left nothing behind; other objects are still free.
    b.lock(Y, LockMode::Exclusive).unwrap();
    assert_eq!(vlt.locked_objects(), 2);
    b.commit();
    a.commit();
    assert_eq!(vlt.locked_objects(), 0);

    let s = vlt.stats();
    assert_eq!(s.lock_timeouts, 3);
    assert!(
        s.deadlines_set >= 1,
        "a waiter puts a deadline on the holder in its way"
    );
    assert_eq!(s.deadlocks, 0);
}

#[test]
fn a_request_that_waits_is_counted_once() {
    // Regression: `lock_waits` used to be incremented on every 1 ms re-check of a single wait.
    // On the machine's clock, where real time is the point: the request naps many times before
    // its limit, and does not end before it.
    let limit = Duration::from_millis(60);
    let vlt = Vlt::new(VltConfig {
        hold_limit: Duration::from_secs(30),
        wait_limit: limit,
    });
    let mut a = vlt.begin();
    a.lock(X, LockMode::Exclusive).unwrap();
    let mut b = vlt.begin();
    let t0 = Instant::now();
    assert_eq!(b.lock(X, LockMode::Exclusive), Err(VltError::LockTimeout(X)));
    assert!(t0.elapsed() >= limit, "a timed-out request waited its limit");
    assert_eq!(vlt.stats().lock_waits, 1);
    assert_eq!(vlt.stats().lock_timeouts, 1);
    b.abort();
    a.commit();
}

#[test]
fn failed_request_leaves_no_table_entry() {
    let vlt = no_wait();
    let mut a = vlt.begin();
    a.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!(probe(&vlt, X, LockMode::Shared), Err(VltError::LockTimeout(X)));
    assert_eq!(vlt.locked_objects(), 1);
    a.commit();
    assert_eq!(vlt.locked_objects(), 0);
    // And the object is really free again for everyone.
    probe(&vlt, X, LockMode::Exclusive).unwrap();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn repeated_requests_by_the_same_family_are_free() {
    let vlt = no_wait();
    let mut a = vlt.begin();
    a.lock(X, LockMode::Shared).unwrap();
    a.lock(X, LockMode::Shared).unwrap();
    assert_eq!(a.locks_held(), 1, "a second shared request records nothing");
    a.lock(Y, LockMode::Exclusive).unwrap();
    a.lock(Y, LockMode::Exclusive).unwrap();
    a.lock(Y, LockMode::Shared).unwrap();
    assert_eq!(a.locks_held(), 2, "exclusive covers shared");
    assert_eq!(vlt.locked_objects(), 2);
    a.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn sole_shared_holder_may_upgrade() {
    let vlt = no_wait();
    let mut a = vlt.begin();
    a.lock(X, LockMode::Shared).unwrap();
    probe(&vlt, X, LockMode::Shared).unwrap();
    a.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!(a.locks_held(), 2, "the upgrade is its own record");
    assert_eq!(probe(&vlt, X, LockMode::Shared), Err(VltError::LockTimeout(X)));
    assert_eq!(vlt.locked_objects(), 1);
    a.commit();
    assert_eq!(vlt.locked_objects(), 0);
    probe(&vlt, X, LockMode::Exclusive).unwrap();
}

#[test]
fn upgrade_refused_while_another_family_shares() {
    let (vlt, clock) = short_wait();
    let upgrade = |t: &mut vino_vlt::Txn| past_limit(&vlt, &clock, WAIT_LIMIT, || t.lock(X, LockMode::Exclusive));
    let mut a = vlt.begin();
    let mut b = vlt.begin();
    a.lock(X, LockMode::Shared).unwrap();
    b.lock(X, LockMode::Shared).unwrap();
    assert_eq!(upgrade(&mut a), Err(VltError::LockTimeout(X)));
    assert_eq!(a.locks_held(), 1, "the refused upgrade records nothing");
    // A still holds its shared lock: B cannot upgrade either while A is there.
    assert_eq!(upgrade(&mut b), Err(VltError::LockTimeout(X)));
    a.abort();
    // Now B is the sole holder and may upgrade.
    b.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!(b.locks_held(), 2);
    b.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn nested_child_inherits_parent_locks() {
    // No waiting at all: if the child had to wait for its own parent, its request would fail.
    let vlt = no_wait();
    let mut t = vlt.begin();
    t.lock(X, LockMode::Exclusive).unwrap();
    t.lock(Y, LockMode::Shared).unwrap();
    assert_eq!(t.locks_held(), 2);

    t.begin_nested();
    assert_eq!(t.depth(), 1);
    t.lock(X, LockMode::Exclusive).unwrap();
    t.lock(X, LockMode::Shared).unwrap();
    t.lock(Y, LockMode::Shared).unwrap();
    t.begin_nested();
    assert_eq!(t.depth(), 2);
    t.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!(t.locks_held(), 2, "inherited locks are not taken again");
    // The grandchild upgrades the parent's shared lock on Y (the family is its only holder).
    t.lock(Y, LockMode::Exclusive).unwrap();
    assert_eq!(t.locks_held(), 3);
    t.commit_nested();
    t.commit_nested();
    assert_eq!(t.depth(), 0);
    assert_eq!(vlt.stats().lock_waits, 0);
    assert_eq!(t.locks_held(), 3, "a committed child hands its locks to the parent");
    t.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn child_abort_releases_only_what_the_child_took() {
    let vlt = no_wait();
    let mut t = vlt.begin();
    t.lock(X, LockMode::Shared).unwrap();
    t.lock(Z, LockMode::Exclusive).unwrap();
    assert_eq!(t.locks_held(), 2);

    t.begin_nested();
    t.lock(X, LockMode::Exclusive).unwrap(); // upgrade of the parent's shared lock
    t.lock(Y, LockMode::Exclusive).unwrap(); // new
    t.lock(Z, LockMode::Exclusive).unwrap(); // already held by the parent: nothing to give back
    assert_eq!(t.locks_held(), 4);
    assert_eq!(probe(&vlt, X, LockMode::Shared), Err(VltError::LockTimeout(X)));
    assert_eq!(probe(&vlt, Y, LockMode::Shared), Err(VltError::LockTimeout(Y)));
    assert_eq!(vlt.locked_objects(), 3);

    t.abort_nested();
    assert_eq!(t.depth(), 0);
    assert_eq!(t.locks_held(), 2);
    // X is back to shared: another family may share it but not take it exclusively.
    probe(&vlt, X, LockMode::Shared).unwrap();
    assert_eq!(probe(&vlt, X, LockMode::Exclusive), Err(VltError::LockTimeout(X)));
    // Y is free again.
    probe(&vlt, Y, LockMode::Exclusive).unwrap();
    // Z, the parent's exclusive lock, survives the child's abort.
    assert_eq!(probe(&vlt, Z, LockMode::Shared), Err(VltError::LockTimeout(Z)));
    assert_eq!(vlt.locked_objects(), 2);

    // The parent still owns its shared lock on X and may upgrade it itself.
    t.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!(probe(&vlt, X, LockMode::Shared), Err(VltError::LockTimeout(X)));
    t.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn child_that_took_then_upgraded_gives_both_back() {
    let vlt = no_wait();
    let mut t = vlt.begin();
    t.begin_nested();
    t.lock(X, LockMode::Shared).unwrap();
    t.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!(t.locks_held(), 2);
    t.abort_nested();
    assert_eq!(t.locks_held(), 0);
    assert_eq!(vlt.locked_objects(), 0);
    probe(&vlt, X, LockMode::Exclusive).unwrap();
    t.commit();
}

#[test]
fn grandchild_abort_keeps_child_locks() {
    let vlt = no_wait();
    let mut t = vlt.begin();
    t.begin_nested();
    t.lock(X, LockMode::Shared).unwrap();
    t.begin_nested();
    t.lock(X, LockMode::Exclusive).unwrap();
    t.lock(Y, LockMode::Shared).unwrap();
    t.abort_nested();
    assert_eq!(t.locks_held(), 1);
    probe(&vlt, X, LockMode::Shared).unwrap();
    probe(&vlt, Y, LockMode::Exclusive).unwrap();
    t.commit_nested();
    assert_eq!(t.locks_held(), 1);
    assert_eq!(probe(&vlt, X, LockMode::Exclusive), Err(VltError::LockTimeout(X)));
    t.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn commit_releases_everything_and_runs_the_commit_log_under_the_locks() {
    let vlt = no_wait();
    let seen_locked = Arc::new(Mutex::new(Vec::new()));
    let mut t = vlt.begin();
    for obj in 0..10u64 {
        let mode = if obj % 2 == 0 {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        };
        t.lock(obj, mode).unwrap();
    }
    t.begin_nested();
    t.lock(100, LockMode::Exclusive).unwrap();
    t.lock(0, LockMode::Exclusive).unwrap();
    // Left open on purpose: commit commits open children.
    let v = vlt.clone();
    let s = seen_locked.clone();
    t.on_commit(move || s.lock().unwrap().push(v.locked_objects()));
    t.on_abort(|| panic!("undo record run at commit"));
    t.commit();
    assert_eq!(
        *seen_locked.lock().unwrap(),
        vec![11],
        "commit actions run before locks are released"
    );
    assert_eq!(vlt.locked_objects(), 0);
    for obj in (0..10u64).chain([100]) {
        probe(&vlt, obj, LockMode::Exclusive).unwrap();
    }
}

#[test]
fn abort_runs_undo_newest_first_then_releases() {
    let vlt = no_wait();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut t = vlt.begin();
    t.lock(X, LockMode::Exclusive).unwrap();
    for i in 0..5 {
        let (l, v) = (log.clone(), vlt.clone());
        t.on_abort(move || l.lock().unwrap().push((i, v.locked_objects())));
    }
    t.on_commit(|| panic!("commit action run at abort"));
    assert_eq!(t.undo_records(), 5);
    t.abort();
    assert_eq!(*log.lock().unwrap(), vec![(4, 1), (3, 1), (2, 1), (1, 1), (0, 1)]);
    assert_eq!(vlt.locked_objects(), 0);
    assert_eq!(vlt.stats().aborts, 1);
}

#[test]
fn dropping_a_txn_aborts_it() {
    let vlt = no_wait();
    let undone = Arc::new(AtomicUsize::new(0));
    let committed = Arc::new(AtomicUsize::new(0));
    {
        let mut t = vlt.begin();
        t.lock(X, LockMode::Exclusive).unwrap();
        t.lock(Y, LockMode::Shared).unwrap();
        t.begin_nested();
        t.lock(Z, LockMode::Exclusive).unwrap();
        let u = undone.clone();
        t.on_abort(move || {
            u.fetch_add(1, Ordering::SeqCst);
        });
        let c = committed.clone();
        t.on_commit(move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(vlt.locked_objects(), 3);
    }
    assert_eq!(undone.load(Ordering::SeqCst), 1);
    assert_eq!(committed.load(Ordering::SeqCst), 0);
    assert_eq!(vlt.locked_objects(), 0);
    assert_eq!(vlt.stats().aborts, 1);
    probe(&vlt, X, LockMode::Exclusive).unwrap();
}

#[test]
fn a_panicking_commit_action_does_not_leak_locks() {
    // Regression: `Txn::commit` used to drop the transaction body without releasing its locks
    // when a commit action panicked, so the objects stayed locked forever.
    let vlt = no_wait();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut t = vlt.begin();
        t.lock(X, LockMode::Exclusive).unwrap();
        t.on_commit(|| panic!("commit action fails"));
        t.commit();
    }));
    assert!(r.is_err());
    assert_eq!(vlt.locked_objects(), 0);
    probe(&vlt, X, LockMode::Exclusive).unwrap();
}

#[test]
fn own_deadline_fails_check_and_lock_waits() {
    // Nobody moves the clock past the wait limit: a contended request can only end because its
    // own deadline passed.
    let (vlt, clock) = manual(VltConfig {
        hold_limit: Duration::from_secs(30),
        wait_limit: Duration::from_secs(5),
    });
    let mut holder = vlt.begin();
    holder.lock(X, LockMode::Exclusive).unwrap();

    let mut t = vlt.begin();
    t.check().unwrap();
    t.set_deadline_in(Duration::from_millis(5));
    // A later deadline does not push back an earlier one.
    t.set_deadline_in(Duration::from_secs(60));
    clock.advance(Duration::from_millis(4));
    t.check().unwrap();
    clock.advance(Duration::from_millis(1));
    assert_eq!(t.check(), Err(VltError::DeadlinePassed));
    // A free lock is still granted; a contended one fails at once rather than waiting 5 s.
    t.lock(Y, LockMode::Exclusive).unwrap();
    assert_eq!(t.lock(X, LockMode::Shared), Err(VltError::DeadlinePassed));
    t.abort();
    holder.check().unwrap();
    holder.commit();

    // A new transaction (possibly reusing the pooled body) starts without a deadline.
    let t2 = vlt.begin();
    t2.check().unwrap();
    t2.commit();
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn ids_are_unique() {
    let vlt = no_wait();
    let mut ids = std::collections::HashSet::new();
    for _ in 0..100 {
        let t = vlt.begin();
        assert!(ids.insert(t.id()));
        t.commit();
    }
    let v = vlt.clone();
    let other: Vec<u64> = thread::spawn(move || (0..100).map(|_| v.begin().id()).collect())
        .join()
        .unwrap();
    for id in other {
        assert!(ids.insert(id));
    }
}

/// Spins until `vlt` has recorded at least `n` lock waits.
fn wait_for_waiters(vlt: &Vlt, n: u64) {
    let t0 = Instant::now();
    while vlt.stats().lock_waits < n {
        assert!(t0.elapsed() < Duration::from_secs(10), "waiter never started waiting");
        thread::sleep(Duration::from_millis(1));
    }
    // Give the waiter time to publish what it waits for.
    thread::sleep(Duration::from_millis(5));
}

#[test]
fn two_party_cycle_is_detected_without_waiting_out_the_limits() {
    // Limits the clock never reaches: only cycle detection can end this.
    let (vlt, _clock) = never();
    let mut b = vlt.begin();
    b.lock(Y, LockMode::Exclusive).unwrap();
    let v = vlt.clone();
    let a = thread::spawn(move || {
        let mut a = v.begin();
        a.lock(X, LockMode::Exclusive).unwrap();
        let r = a.lock(Y, LockMode::Exclusive);
        a.abort();
        r
    });
    wait_for_waiters(&vlt, 1);
    let rb = b.lock(X, LockMode::Exclusive);
    // Whoever closed the cycle is told; if it was A (it noticed first), B then gets X.
    match rb {
        Err(VltError::Deadlock(X)) => {
            b.abort();
            a.join().unwrap().unwrap();
        }
        Ok(()) => {
            assert_eq!(a.join().unwrap(), Err(VltError::Deadlock(Y)));
            b.commit();
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(vlt.stats().deadlocks >= 1);
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn upgrade_cycle_is_detected() {
    let (vlt, _clock) = never();
    let mut b = vlt.begin();
    b.lock(X, LockMode::Shared).unwrap();
    let v = vlt.clone();
    let barrier = Arc::new(Barrier::new(2));
    let bar = barrier.clone();
    let a = thread::spawn(move || {
        let mut a = v.begin();
        a.lock(X, LockMode::Shared).unwrap();
        bar.wait();
        let r = a.lock(X, LockMode::Exclusive);
        if r.is_ok() {
            a.commit()
        } else {
            a.abort()
        }
        r
    });
    barrier.wait();
    wait_for_waiters(&vlt, 1);
    match b.lock(X, LockMode::Exclusive) {
        Err(VltError::Deadlock(X)) => {
            b.abort();
            a.join().unwrap().unwrap();
        }
        Ok(()) => {
            assert_eq!(a.join().unwrap(), Err(VltError::Deadlock(X)));
            b.commit();
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn three_party_chain_cycle_is_detected() {
    // A holds X, waits for Y; B holds Y, waits for Z; C holds Z and asks for X.
    let (vlt, _clock) = never();
    let mut c = vlt.begin();
    c.lock(Z, LockMode::Exclusive).unwrap();

    let spawn = |own: u64, want: u64, ready: Arc<Barrier>| {
        let v = vlt.clone();
        thread::spawn(move || {
            let mut t = v.begin();
            t.lock(own, LockMode::Exclusive).unwrap();
            ready.wait();
            let r = t.lock(want, LockMode::Exclusive);
            t.abort();
            r
        })
    };
    let ready_b = Arc::new(Barrier::new(2));
    let b = spawn(Y, Z, ready_b.clone());
    ready_b.wait();
    wait_for_waiters(&vlt, 1);
    let ready_a = Arc::new(Barrier::new(2));
    let a = spawn(X, Y, ready_a.clone());
    ready_a.wait();
    wait_for_waiters(&vlt, 2);

    let rc = c.lock(X, LockMode::Exclusive);
    match rc {
        Err(VltError::Deadlock(X)) => {
            c.abort();
            // The chain unwinds: B gets Z, aborts; A gets Y, aborts.
            assert_eq!(b.join().unwrap(), Ok(()));
            assert_eq!(a.join().unwrap(), Ok(()));
        }
        Ok(()) => {
            // One of A and B noticed the cycle first (its periodic re-check) and gave up. If it
            // was A, B still waits for Z: commit C before joining.
            c.commit();
            let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
            assert!(
                matches!(ra, Err(VltError::Deadlock(_))) || matches!(rb, Err(VltError::Deadlock(_))),
                "{ra:?} {rb:?}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(vlt.stats().deadlocks >= 1);
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn vlt_handles() {
    let a = Vlt::default();
    let b = a.clone();
    let c = Vlt::default();
    assert!(a.same(&b));
    assert!(!a.same(&c));
    assert_eq!(a.config().wait_limit, VltConfig::default().wait_limit);
    // Locks of one manager do not affect another's.
    let mut t = a.begin();
    t.lock(X, LockMode::Exclusive).unwrap();
    let mut u = c.begin();
    u.lock(X, LockMode::Exclusive).unwrap();
    assert_eq!((a.locked_objects(), c.locked_objects()), (1, 1));
    t.commit();
    u.commit();
    assert_eq!((a.locked_objects(), c.locked_objects()), (0, 0));
}

#[test]
fn huge_limits_mean_never() {
    // Regression: limits were turned into nanoseconds with `as u64` and added to the clock
    // unchecked, so `Duration::MAX` ("no limit") wrapped around into a deadline in the past.
    let (vlt, clock) = manual(VltConfig {
        hold_limit: Duration::MAX,
        wait_limit: Duration::MAX,
    });
    let mut holder = vlt.begin();
    holder.lock(X, LockMode::Exclusive).unwrap();
    holder.set_deadline_in(Duration::MAX);
    holder.set_deadline_in(Duration::from_secs(1 << 40));
    let v = vlt.clone();
    let waiter = thread::spawn(move || {
        let mut t = v.begin();
        let r = t.lock(X, LockMode::Exclusive);
        t.commit();
        r
    });
    wait_for_waiters(&vlt, 1);
    // Centuries pass on the clock; the waiter rechecks its limit (naps of 1 ms of host time).
    clock.advance(Duration::from_secs(1 << 33));
    thread::sleep(Duration::from_millis(20));
    // The waiter gave the holder a hold limit of "forever", and is still waiting.
    assert_eq!(holder.check(), Ok(()));
    assert!(!waiter.is_finished());
    holder.commit();
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert_eq!(vlt.stats().lock_timeouts, 0);
    assert_eq!(vlt.locked_objects(), 0);
}

/// A top-level transaction begins only when its body needs it: one that touches nothing costs no
/// transaction (and its abort is still counted); one that takes a lock or logs an undo begins,
/// and aborting undoes its work and releases its locks.
#[test]
fn a_top_level_transaction_begins_when_first_needed() {
    use vino_vlt::current;
    let vlt = Vlt::default();
    let r: Result<(), ()> = current::atomically(&vlt, || {
        assert!(current::active());
        assert!(current::check().is_ok());
        Err(())
    });
    assert!(r.is_err());
    assert!(!current::active());
    assert_eq!(vlt.stats().aborts, 1);

    let undone = Arc::new(AtomicUsize::new(0));
    let u = undone.clone();
    let r: Result<(), ()> = current::atomically(&vlt, || {
        current::lock(7, LockMode::Exclusive).unwrap();
        current::on_abort(move || {
            u.fetch_add(1, Ordering::SeqCst);
        });
        // A child of a transaction begun lazily.
        let inner: Result<(), ()> = current::atomically(&vlt, || {
            current::lock(8, LockMode::Shared).unwrap();
            Ok(())
        });
        assert!(inner.is_ok());
        assert_eq!(vlt.locked_objects(), 2);
        Err(())
    });
    assert!(r.is_err());
    assert_eq!(undone.load(Ordering::SeqCst), 1);
    assert_eq!(vlt.locked_objects(), 0);
    assert_eq!(vlt.stats().aborts, 2);

    // A child opened inside a top-level transaction not yet begun begins it first.
    let ran = Arc::new(AtomicUsize::new(0));
    let r2 = ran.clone();
    let r: Result<(), ()> = current::atomically(&vlt, || {
        current::atomically(&vlt, || {
            current::on_commit(move || {
                r2.fetch_add(1, Ordering::SeqCst);
            });
            Ok::<(), ()>(())
        })?;
        assert_eq!(ran.load(Ordering::SeqCst), 0, "commit actions wait for the top level");
        Ok(())
    });
    assert!(r.is_ok());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(!current::active());
}
