//! POSIX record-locking rules, checked against a per-byte model, and deadlock detection.

use LockKind::{Read, Write};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vino_graft::Runtime;
use vino_locks::{Lock, LockError, LockKind, LockManager, Range, TO_EOF, Wait};

/// Bytes the model tracks; byte `MODEL_END - 1` stands for everything beyond the finite ranges.
const MODEL_END: u64 = 33;

fn manager() -> Arc<LockManager> {
    Arc::new(LockManager::new(&Runtime::default()))
}

fn r(start: u64, len: u64) -> Range {
    Range::new(start, len).unwrap()
}

/// Who holds what, byte by byte.
type Model = Vec<BTreeMap<u64, LockKind>>;

fn expand(held: &[Lock]) -> Model {
    let mut m: Model = vec![BTreeMap::new(); MODEL_END as usize];
    for l in held {
        for b in l.range.start..l.range.end.min(MODEL_END) {
            assert!(
                m[b as usize].insert(l.owner, l.kind).is_none(),
                "owner {} holds byte {b} twice",
                l.owner
            );
        }
    }
    m
}

fn model_conflict(m: &Model, owner: u64, kind: LockKind, range: Range) -> bool {
    (range.start..range.end.min(MODEL_END)).any(|b| {
        m[b as usize]
            .iter()
            .any(|(&o, &k)| o != owner && (k == Write || kind == Write))
    })
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Lock(u64, LockKind, u64, u64),
    Unlock(u64, u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![Just(Read), Just(Write)];
    prop_oneof![
        3 => (1u64..4, kind, 0u64..24, 0u64..9).prop_map(|(o, k, s, l)| Op::Lock(o, k, s, l)),
        1 => (1u64..4, 0u64..24, 0u64..9).prop_map(|(o, s, l)| Op::Unlock(o, s, l)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn non_blocking_requests_follow_the_per_byte_model(ops in proptest::collection::vec(op(), 1..40)) {
        let m = manager();
        let mut model: Model = vec![BTreeMap::new(); MODEL_END as usize];
        for op in ops {
            match op {
                Op::Lock(owner, kind, start, len) => {
                    let range = r(start, len);
                    let conflict = model_conflict(&model, owner, kind, range);
                    let probe = m.get_lock(7, owner, kind, range);
                    prop_assert_eq!(probe.is_some(), conflict, "GETLK agrees with the model");
                    if let Some(l) = probe {
                        prop_assert!(l.conflicts(owner, kind, &range));
                    }
                    let got = m.lock(7, owner, kind, range, Wait::No);
                    if conflict {
                        let is_would_block = matches!(got, Err(LockError::WouldBlock { .. }));
                        prop_assert!(is_would_block, "{:?}", got);
                    } else {
                        prop_assert_eq!(got, Ok(()));
                        for b in range.start..range.end.min(MODEL_END) {
                            model[b as usize].insert(owner, kind);
                        }
                    }
                }
                Op::Unlock(owner, start, len) => {
                    let range = r(start, len);
                    m.unlock(7, owner, range).unwrap();
                    for b in range.start..range.end.min(MODEL_END) {
                        model[b as usize].remove(&owner);
                    }
                }
            }
            m.check_invariants();
            let held = m.held(7);
            prop_assert_eq!(expand(&held), model.clone());
            // Canonical: an owner's adjacent locks of one kind are merged.
            for w in held.windows(2) {
                prop_assert!(!(w[0].owner == w[1].owner && w[0].kind == w[1].kind && w[0].range.end == w[1].range.start));
            }
        }
    }
}

#[test]
fn split_merge_upgrade_downgrade() {
    let m = manager();
    m.lock(1, 10, Read, r(0, 100), Wait::No).unwrap();
    m.lock(1, 10, Write, r(40, 20), Wait::No).unwrap();
    let kinds: Vec<(LockKind, u64, u64)> = m.held(1).iter().map(|l| (l.kind, l.range.start, l.range.end)).collect();
    assert_eq!(
        kinds,
        vec![(Read, 0, 40), (Write, 40, 60), (Read, 60, 100)],
        "upgrade splits"
    );
    // Another owner may read outside the write lock only.
    assert!(m.lock(1, 11, Read, r(10, 5), Wait::No).is_ok());
    assert_eq!(
        m.lock(1, 11, Read, r(45, 1), Wait::No),
        Err(LockError::WouldBlock { holder: 10 })
    );
    m.lock(1, 10, Read, r(40, 20), Wait::No).unwrap();
    let mine: Vec<Lock> = m.held(1).into_iter().filter(|l| l.owner == 10).collect();
    assert_eq!(mine.len(), 1, "downgrade merges back: {mine:?}");
    assert!(m.lock(1, 11, Read, r(45, 1), Wait::No).is_ok());
    // Unlocking a sub-range splits; to-infinity ranges.
    m.unlock(1, 10, r(20, 10)).unwrap();
    assert_eq!(m.held(1).iter().filter(|l| l.owner == 10).count(), 2);
    m.lock(1, 12, Write, r(200, 0), Wait::No).unwrap();
    let probe = m.get_lock(1, 10, Read, r(1 << 40, 1)).unwrap();
    assert_eq!((probe.owner, probe.range.end, probe.range.len()), (12, TO_EOF, 0));
    assert!(
        m.get_lock(1, 12, Write, r(0, 0)).is_some(),
        "owner 12 sees the others' locks"
    );
    assert!(Range::new(u64::MAX, 5).is_none(), "past the largest offset");
    assert!(matches!(
        m.lock(1, 10, Read, Range { start: 5, end: 5 }, Wait::No),
        Err(LockError::Invalid(_))
    ));
    m.release_object(1, 10);
    m.release_owner(11);
    m.release_owner(12);
    assert!(m.held(1).is_empty());
}

/// Runs a blocking request in a thread and returns once it waits (or finished).
fn waiter(
    m: &Arc<LockManager>,
    obj: u64,
    owner: u64,
    kind: LockKind,
    range: Range,
) -> thread::JoinHandle<Result<(), LockError>> {
    let before = m.waiting(obj).len();
    let m2 = m.clone();
    let h = thread::spawn(move || m2.lock(obj, owner, kind, range, Wait::Forever));
    let t = Instant::now();
    while m.waiting(obj).len() == before && !h.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(10), "the waiter never queued");
        thread::sleep(Duration::from_millis(1));
    }
    h
}

#[test]
fn two_owner_cycle_is_a_deadlock() {
    let m = manager();
    m.lock(1, 1, Write, r(0, 1), Wait::No).unwrap();
    m.lock(1, 2, Write, r(1, 1), Wait::No).unwrap();
    let a = waiter(&m, 1, 1, Write, r(1, 1));
    assert_eq!(
        m.lock(1, 2, Write, r(0, 1), Wait::Forever),
        Err(LockError::Deadlock { holder: 1 })
    );
    assert_eq!(m.stats().deadlocks, 1);
    m.unlock(1, 2, r(1, 1)).unwrap();
    assert_eq!(a.join().unwrap(), Ok(()));
    assert!(m.held(1).iter().all(|l| l.owner == 1));
}

#[test]
fn three_owner_cycle_across_objects_is_a_deadlock() {
    let m = manager();
    m.lock(1, 1, Write, r(0, 1), Wait::No).unwrap();
    m.lock(2, 2, Read, r(0, 1), Wait::No).unwrap();
    m.lock(1, 3, Write, r(5, 1), Wait::No).unwrap();
    let a = waiter(&m, 2, 1, Write, r(0, 1)); // 1 waits for 2 (object 2)
    let b = waiter(&m, 1, 2, Read, r(5, 1)); // 2 waits for 3
    // A waiter that closes no cycle is fine, one that does is refused.
    assert!(matches!(
        m.lock(1, 4, Read, r(0, 1), Wait::For(Duration::from_millis(20))),
        Err(LockError::TimedOut)
    ));
    assert_eq!(
        m.lock(1, 3, Read, r(0, 1), Wait::Forever),
        Err(LockError::Deadlock { holder: 1 })
    );
    m.release_owner(3);
    assert_eq!(b.join().unwrap(), Ok(()));
    m.release_owner(2);
    assert_eq!(a.join().unwrap(), Ok(()));
    let s = m.stats();
    assert_eq!((s.deadlocks, s.timeouts), (1, 1));
}

#[test]
fn upgrade_deadlock_between_two_readers_is_detected() {
    let m = manager();
    m.lock(1, 1, Read, r(0, 1), Wait::No).unwrap();
    m.lock(1, 2, Read, r(0, 1), Wait::No).unwrap();
    let a = waiter(&m, 1, 1, Write, r(0, 1));
    assert_eq!(
        m.lock(1, 2, Write, r(0, 1), Wait::Forever),
        Err(LockError::Deadlock { holder: 1 })
    );
    m.unlock(1, 2, r(0, 1)).unwrap();
    assert_eq!(a.join().unwrap(), Ok(()));
    assert_eq!(
        m.held(1),
        vec![Lock {
            owner: 1,
            kind: Write,
            range: r(0, 1)
        }]
    );
}

#[test]
fn close_exit_timeout_and_cancel_wake_or_end_waits() {
    let m = manager();
    m.lock(1, 1, Write, r(0, 10), Wait::No).unwrap();
    let a = waiter(&m, 1, 2, Read, r(0, 1));
    m.release_object(1, 1);
    assert_eq!(a.join().unwrap(), Ok(()), "close releases");
    let b = waiter(&m, 1, 3, Write, r(0, 1));
    m.release_owner(2);
    assert_eq!(b.join().unwrap(), Ok(()), "exit releases");
    let c = waiter(&m, 1, 4, Read, r(0, 1));
    m.cancel_waits(4);
    assert_eq!(c.join().unwrap(), Err(LockError::Cancelled));
    let d = waiter(&m, 1, 5, Read, r(0, 1));
    m.release_owner(5);
    assert_eq!(
        d.join().unwrap(),
        Err(LockError::Cancelled),
        "exit cancels the exiting owner's waits"
    );
    let t = Instant::now();
    assert_eq!(
        m.lock(1, 6, Read, r(0, 1), Wait::For(Duration::from_millis(30))),
        Err(LockError::TimedOut)
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert!(m.waiting(1).is_empty(), "nothing left queued");
    m.release_owner(3);
    assert!(m.held(1).is_empty());
    m.check_invariants();
}

#[test]
fn a_timed_wait_ends_when_the_kernels_clock_passes_its_deadline() {
    // The manager's clock is its runtime's (the kernel's): a manual one that only the test moves.
    let clock = Arc::new(vino_clock::ManualClock::new(Duration::ZERO));
    let vlt = vino_graft::vlt::Vlt::with_clock(Default::default(), vino_clock::SharedClock::new(clock.clone()));
    let rt = Runtime::with_vlt(Default::default(), vlt);
    let m = Arc::new(LockManager::new(&rt));
    m.lock(1, 1, Write, r(0, 1), Wait::No).unwrap();
    let m2 = m.clone();
    let waiter = thread::spawn(move || m2.lock(1, 2, Write, r(0, 1), Wait::For(Duration::from_secs(3600))));
    let started = Instant::now();
    while m.waiting(1).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "the request never waited");
        thread::yield_now();
    }
    // An hour of the clock's time, none of the host's.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(waiter.join().unwrap(), Err(LockError::TimedOut));
    assert_eq!(m.stats().timeouts, 1);
    assert!(m.waiting(1).is_empty());
    m.check_invariants();
}
