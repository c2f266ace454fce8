//! The held-lock structure against a per-byte model, what lock records cost their owner's
//! account, and many locks on one object.

use LockKind::{Read, Write};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use vino_graft::Runtime;
use vino_graft::account::{Account, Resource, Table};
use vino_locks::{Held, Lock, LockError, LockKind, LockManager, Range, Wait};

/// Bytes the model tracks; byte `MODEL_END - 1` stands for everything beyond the finite ranges.
const MODEL_END: u64 = 41;

fn r(start: u64, len: u64) -> Range {
    Range::new(start, len).unwrap()
}

/// Who holds what, byte by byte.
type Model = Vec<BTreeMap<u64, LockKind>>;

fn bytes(range: Range) -> std::ops::Range<usize> {
    range.start as usize..range.end.min(MODEL_END) as usize
}

fn expand(held: &Held) -> Model {
    let mut m: Model = vec![BTreeMap::new(); MODEL_END as usize];
    for l in held.iter() {
        for b in bytes(l.range) {
            assert!(
                m[b].insert(l.owner, l.kind).is_none(),
                "owner {} holds byte {b} twice",
                l.owner
            );
        }
    }
    m
}

/// The owners whose bytes conflict with a request, each once.
fn model_conflicts(m: &Model, owner: u64, kind: LockKind, range: Range) -> Vec<u64> {
    let mut v: Vec<u64> = bytes(range)
        .flat_map(|b| m[b].iter().map(|(&o, &k)| (o, k)))
        .filter(|&(o, k)| o != owner && (k == Write || kind == Write))
        .map(|(o, _)| o)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Lock records the model's bytes make: runs of one owner's bytes of one kind.
fn model_records(m: &Model, owner: u64) -> usize {
    let mut n = 0;
    let mut prev = None;
    for byte in m {
        let k = byte.get(&owner).copied();
        if k.is_some() && k != prev {
            n += 1;
        }
        prev = k;
    }
    n
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Set(u64, Option<LockKind>, u64, u64),
    Probe(u64, LockKind, u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![Just(Some(Read)), Just(Some(Write)), Just(None)];
    let probe = prop_oneof![Just(Read), Just(Write)];
    prop_oneof![
        4 => (1u64..5, kind, 0u64..32, 0u64..9).prop_map(|(o, k, s, l)| Op::Set(o, k, s, l)),
        1 => (1u64..5, probe, 0u64..32, 0u64..9).prop_map(|(o, k, s, l)| Op::Probe(o, k, s, l)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Several owners set and clear locks at random, conflicts or not (the structure does not
    /// police them: each owner's view must match the model, and every query must agree).
    #[test]
    fn held_locks_match_a_per_byte_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut held = Held::default();
        let mut model: Model = vec![BTreeMap::new(); MODEL_END as usize];
        for op in ops {
            match op {
                Op::Set(owner, kind, start, len) => {
                    let range = r(start, len);
                    // Only what the manager would do: a lock that conflicts is never set.
                    if kind.is_some_and(|k| !model_conflicts(&model, owner, k, range).is_empty()) {
                        continue;
                    }
                    let before = held.count(owner) as i64;
                    let delta = held.set(owner, kind, range);
                    prop_assert_eq!(held.count(owner) as i64, before + delta);
                    let most = if kind.is_some() { 2 } else { 1 };
                    prop_assert!(delta <= most, "{} more records", delta);
                    for b in bytes(range) {
                        match kind {
                            Some(k) => model[b].insert(owner, k),
                            None => model[b].remove(&owner),
                        };
                    }
                }
                Op::Probe(owner, kind, start, len) => {
                    let range = r(start, len);
                    let want = model_conflicts(&model, owner, kind, range);
                    prop_assert_eq!(held.conflicting_owners(owner, kind, &range), want.clone());
                    let first = held.first_conflict(owner, kind, &range);
                    prop_assert_eq!(first.is_some(), !want.is_empty());
                    if let Some(l) = first {
                        prop_assert!(l.conflicts(owner, kind, &range), "{:?}", l);
                    }
                    let covered = bytes(range).all(|b| match model[b].get(&owner) {
                        Some(&k) => k == Write || kind == Read,
                        None => false,
                    });
                    prop_assert_eq!(held.covered(owner, kind, &range), covered);
                }
            }
            held.check(0);
            prop_assert_eq!(expand(&held), model.clone());
            for owner in 1..5 {
                prop_assert_eq!(held.count(owner), model_records(&model, owner));
            }
        }
    }
}

fn manager() -> LockManager {
    LockManager::new(&Runtime::default())
}

fn account(limit: u64) -> Arc<Account> {
    Account::standalone("uid 1000", Table::UNLIMITED.with(Resource::LockRecords, limit))
}

#[test]
fn records_are_charged_to_the_owner_up_to_its_limit_and_refunded() {
    let m = manager();
    let acct = account(4);
    let lock = |owner, kind, start, len| m.lock_charged(1, owner, &acct, kind, r(start, len), Wait::No);
    for i in 0..4 {
        lock(1, Read, i * 10, 1).unwrap();
    }
    assert_eq!(acct.used(Resource::LockRecords), 4);
    let e = lock(1, Read, 100, 1).unwrap_err();
    assert!(matches!(&e, LockError::Limit(x) if x.errno() == 37), "{e:?}");
    // Merging into a held record costs nothing, and a refused split changes nothing.
    lock(1, Read, 1, 1).unwrap();
    assert_eq!(m.held(1).len(), 4);
    assert!(
        matches!(m.unlock(1, 1, r(0, 1)), Ok(())),
        "shrinks a record: no new one"
    );
    lock(1, Read, 11, 2).unwrap();
    assert!(
        matches!(m.unlock(1, 1, r(11, 1)), Err(LockError::Limit(_))),
        "would split [10, 13)"
    );
    assert_eq!(m.held(1).len(), 4);
    // Unlocking gives records back; another object is charged to the same account.
    m.unlock(1, 1, r(30, 1)).unwrap();
    m.lock_charged(2, 1, &acct, Write, r(0, 0), Wait::No).unwrap();
    assert_eq!(acct.used(Resource::LockRecords), 4);
    assert_eq!(m.records(1), (4, 0));
    m.release_object(1, 1);
    assert_eq!(acct.used(Resource::LockRecords), 1);
    m.release_owner(1);
    assert_eq!(acct.used(Resource::LockRecords), 0);
    assert_eq!(m.records(1), (0, 0));
    m.check_invariants();
}

#[test]
fn a_wait_sets_records_aside_and_a_grant_keeps_only_those_it_holds() {
    let m = Arc::new(manager());
    let (a, b) = (account(100), account(3));
    m.lock_charged(1, 1, &a, Write, r(0, 10), Wait::No).unwrap();
    m.lock_charged(1, 2, &b, Read, r(20, 1), Wait::No).unwrap();
    let waiter = {
        let (m, b) = (m.clone(), b.clone());
        std::thread::spawn(move || m.lock_charged(1, 2, &b, Read, r(5, 1), Wait::Forever))
    };
    while m.waiting(1).is_empty() {
        std::thread::yield_now();
    }
    assert_eq!(b.used(Resource::LockRecords), 3, "one held, two set aside");
    // With its limit taken by the wait, another request of the owner is refused.
    assert!(matches!(
        m.lock_charged(1, 2, &b, Read, r(30, 1), Wait::No),
        Err(LockError::Limit(_))
    ));
    m.unlock(1, 1, r(0, 0)).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(b.used(Resource::LockRecords), 2);
    assert_eq!(a.used(Resource::LockRecords), 0);
    m.release_owner(2);
    assert_eq!(b.used(Resource::LockRecords), 0);
    m.check_invariants();
}

#[test]
fn a_hundred_thousand_locks_on_one_object_are_taken_and_released() {
    const N: u64 = 100_000;
    let m = manager();
    let acct = account(N);
    // Two owners on alternate bytes: every record borders another owner's.
    let of = |i: u64| if i.is_multiple_of(2) { (1, Write) } else { (2, Read) };
    for i in 0..N {
        let (owner, kind) = of(i);
        m.lock_charged(7, owner, &acct, kind, r(i, 1), Wait::No).unwrap();
    }
    assert_eq!(acct.used(Resource::LockRecords), N);
    assert_eq!(m.get_lock(7, 3, Read, r(N - 2, 1)).map(|l| l.owner), Some(1));
    assert_eq!(
        m.get_lock(7, 1, Write, r(3, 1)),
        Some(Lock {
            owner: 2,
            kind: Read,
            range: r(3, 1)
        })
    );
    m.check_invariants();
    for i in (0..N).rev() {
        m.unlock(7, of(i).0, r(i, 1)).unwrap();
    }
    assert!(m.held(7).is_empty());
    assert_eq!(acct.used(Resource::LockRecords), 0);
    m.check_invariants();
}
