//! Model-based property tests: random programs of nested transactions over a toy kernel state,
//! checked against a serial model (a stack of snapshots) after every step.
//!
//! The toy state is 8 integer cells, each one a lockable object. Setting a cell takes an
//! exclusive lock and pushes an undo record; reading takes a shared lock; a deferred effect is an
//! append to a "committed effects" list made by the commit log. After every operation the test
//! compares the real state, the lock table (by probing it from another family that never waits),
//! `locks_held` and `undo_records` with the model's prediction.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vino_vlt::{LockMode, Txn, Vlt, VltConfig, VltError, current};

const CELLS: usize = 8;
const BASE: u64 = 0x1000;

fn obj(cell: usize) -> u64 {
    BASE + cell as u64
}

/// A conflicting request fails at once (no wait, no deadline imposed on the holder).
fn no_wait_vlt() -> Vlt {
    Vlt::new(VltConfig {
        hold_limit: Duration::from_secs(60),
        wait_limit: Duration::ZERO,
    })
}

type Cells = Arc<Mutex<Vec<i64>>>;
type Effects = Arc<Mutex<Vec<u32>>>;

fn initial() -> Vec<i64> {
    (0..CELLS as i64).map(|i| i * 100).collect()
}

#[derive(Debug, Clone)]
enum Op {
    Begin,
    Commit,
    Abort,
    Set(usize, i64),
    Read(usize),
    Defer(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Begin),
        1 => Just(Op::Commit),
        1 => Just(Op::Abort),
        4 => (0..CELLS, -1000i64..1000).prop_map(|(c, v)| Op::Set(c, v)),
        3 => (0..CELLS).prop_map(Op::Read),
        2 => any::<u32>().prop_map(Op::Defer),
    ]
}

/// The model's view of one (nested) transaction level.
#[derive(Debug, Clone, PartialEq)]
struct Level {
    cells: Vec<i64>,
    pending: Vec<u32>,
    locks: BTreeMap<usize, LockMode>,
    records: usize,
    undo: usize,
}

/// Checks the real system against the model's current level.
fn check(vlt: &Vlt, txn: &Txn, state: &Cells, m: &Level, depth: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(&*state.lock().unwrap(), &m.cells);
    prop_assert_eq!(txn.depth(), depth);
    prop_assert_eq!(txn.locks_held(), m.records);
    prop_assert_eq!(txn.undo_records(), m.undo);
    prop_assert_eq!(vlt.locked_objects(), m.locks.len());
    txn.check().map_err(|e| TestCaseError::fail(format!("check: {e}")))?;
    probe_table(vlt, &m.locks)
}

/// Probes every cell from a fresh family that never waits: what it can take must match the
/// locks the model says the transaction holds.
fn probe_table(vlt: &Vlt, locks: &BTreeMap<usize, LockMode>) -> Result<(), TestCaseError> {
    for cell in 0..CELLS {
        let held = locks.get(&cell).copied();
        let mut p = vlt.begin();
        let shared = p.lock(obj(cell), LockMode::Shared);
        p.abort();
        let mut p = vlt.begin();
        let excl = p.lock(obj(cell), LockMode::Exclusive);
        p.abort();
        let conflict = Err(VltError::LockTimeout(obj(cell)));
        match held {
            None => {
                prop_assert_eq!(shared, Ok(()));
                prop_assert_eq!(excl, Ok(()));
            }
            Some(LockMode::Shared) => {
                prop_assert_eq!(shared, Ok(()));
                prop_assert_eq!(excl, conflict);
            }
            Some(LockMode::Exclusive) => {
                prop_assert_eq!(shared, conflict);
                prop_assert_eq!(excl, conflict);
            }
        }
    }
    Ok(())
}

fn run_program(ops: &[Op], commit_top: bool) -> Result<(), TestCaseError> {
    let vlt = no_wait_vlt();
    let state: Cells = Arc::new(Mutex::new(initial()));
    let effects: Effects = Arc::new(Mutex::new(Vec::new()));

    let mut txn = vlt.begin();
    let mut model = Level {
        cells: initial(),
        pending: vec![],
        locks: BTreeMap::new(),
        records: 0,
        undo: 0,
    };
    let mut stack: Vec<Level> = Vec::new();
    check(&vlt, &txn, &state, &model, 0)?;

    for op in ops {
        match *op {
            Op::Begin => {
                txn.begin_nested();
                stack.push(model.clone());
            }
            Op::Commit => {
                if stack.pop().is_some() {
                    txn.commit_nested();
                }
            }
            Op::Abort => {
                if let Some(saved) = stack.pop() {
                    txn.abort_nested();
                    model = saved;
                }
            }
            Op::Set(cell, value) => {
                txn.lock(obj(cell), LockMode::Exclusive)
                    .map_err(|e| TestCaseError::fail(format!("lock: {e}")))?;
                let old = std::mem::replace(&mut state.lock().unwrap()[cell], value);
                let s = state.clone();
                txn.on_abort(move || s.lock().unwrap()[cell] = old);
                if model.locks.insert(cell, LockMode::Exclusive) != Some(LockMode::Exclusive) {
                    model.records += 1; // a new lock, or an upgrade of a shared one
                }
                model.cells[cell] = value;
                model.undo += 1;
            }
            Op::Read(cell) => {
                txn.lock(obj(cell), LockMode::Shared)
                    .map_err(|e| TestCaseError::fail(format!("lock: {e}")))?;
                let seen = state.lock().unwrap()[cell];
                prop_assert_eq!(seen, model.cells[cell]);
                if let std::collections::btree_map::Entry::Vacant(e) = model.locks.entry(cell) {
                    e.insert(LockMode::Shared);
                    model.records += 1;
                }
            }
            Op::Defer(tag) => {
                let e = effects.clone();
                txn.on_commit(move || e.lock().unwrap().push(tag));
                model.pending.push(tag);
            }
        }
        check(&vlt, &txn, &state, &model, stack.len())?;
        prop_assert!(effects.lock().unwrap().is_empty(), "commit log ran early");
    }

    let aborts_before = vlt.stats().aborts;
    if commit_top {
        txn.commit();
        prop_assert_eq!(&*state.lock().unwrap(), &model.cells);
        prop_assert_eq!(&*effects.lock().unwrap(), &model.pending);
        prop_assert_eq!(vlt.stats().aborts, aborts_before);
    } else {
        txn.abort();
        prop_assert_eq!(&*state.lock().unwrap(), &initial());
        prop_assert!(effects.lock().unwrap().is_empty());
        prop_assert_eq!(vlt.stats().aborts, aborts_before + 1);
    }
    prop_assert_eq!(vlt.locked_objects(), 0);
    prop_assert_eq!(vlt.stats().lock_waits, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn nested_programs_match_the_serial_model(ops in prop::collection::vec(op(), 0..48), commit_top in any::<bool>()) {
        run_program(&ops, commit_top)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The same with the ambient transaction: `current::atomically`, nested bodies failing at random.

#[derive(Debug, Clone)]
enum Stmt {
    Set(usize, i64),
    Read(usize),
    Defer(u32),
    Nested(Block),
}

#[derive(Debug, Clone)]
struct Block {
    stmts: Vec<Stmt>,
    fail: bool,
}

fn block() -> impl Strategy<Value = Block> {
    let leaf = prop_oneof![
        (0..CELLS, -1000i64..1000).prop_map(|(c, v)| Stmt::Set(c, v)),
        (0..CELLS).prop_map(Stmt::Read),
        any::<u32>().prop_map(Stmt::Defer),
    ];
    let stmt = leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            3 => inner.clone(),
            1 => (prop::collection::vec(inner, 0..6), prop::bool::weighted(0.35))
                .prop_map(|(stmts, fail)| Stmt::Nested(Block { stmts, fail })),
        ]
    });
    (prop::collection::vec(stmt, 0..10), prop::bool::weighted(0.25)).prop_map(|(stmts, fail)| Block { stmts, fail })
}

/// The serial model: runs `b` on a copy and keeps the copy only if the block succeeds.
fn model_block(b: &Block, cells: &mut Vec<i64>, pending: &mut Vec<u32>, locks: &mut BTreeMap<usize, LockMode>) {
    let (mut c, mut p, mut l) = (cells.clone(), pending.clone(), locks.clone());
    for s in &b.stmts {
        match *s {
            Stmt::Set(cell, v) => {
                c[cell] = v;
                l.insert(cell, LockMode::Exclusive);
            }
            Stmt::Read(cell) => {
                l.entry(cell).or_insert(LockMode::Shared);
            }
            Stmt::Defer(tag) => p.push(tag),
            Stmt::Nested(ref inner) => model_block(inner, &mut c, &mut p, &mut l),
        }
    }
    if !b.fail {
        *cells = c;
        *pending = p;
        *locks = l;
    }
}

#[derive(Debug)]
struct Failed;

/// Runs `b` through `current::atomically`, checking the model as it goes.
fn run_block(
    vlt: &Vlt,
    b: &Block,
    depth: usize,
    state: &Cells,
    effects: &Effects,
    model: &mut Vec<i64>,
    locks: &mut BTreeMap<usize, LockMode>,
) -> Result<Result<(), Failed>, TestCaseError> {
    let mut inner_err = None;
    let (mut m, mut l) = (model.clone(), locks.clone());
    let r = current::atomically(vlt, || {
        let mut go = || -> Result<(), TestCaseError> {
            prop_assert!(current::active());
            prop_assert_eq!(current::with(|t| t.depth()), Some(depth));
            for s in &b.stmts {
                match *s {
                    Stmt::Set(cell, v) => {
                        current::lock(obj(cell), LockMode::Exclusive)
                            .map_err(|e| TestCaseError::fail(e.to_string()))?;
                        let old = std::mem::replace(&mut state.lock().unwrap()[cell], v);
                        let st = state.clone();
                        current::on_abort(move || st.lock().unwrap()[cell] = old);
                        m[cell] = v;
                        l.insert(cell, LockMode::Exclusive);
                    }
                    Stmt::Read(cell) => {
                        current::lock(obj(cell), LockMode::Shared).map_err(|e| TestCaseError::fail(e.to_string()))?;
                        prop_assert_eq!(state.lock().unwrap()[cell], m[cell]);
                        l.entry(cell).or_insert(LockMode::Shared);
                    }
                    Stmt::Defer(tag) => {
                        let e = effects.clone();
                        current::on_commit(move || e.lock().unwrap().push(tag));
                    }
                    Stmt::Nested(ref inner) => {
                        // A failing child is not the parent's failure: the parent goes on.
                        let _ = run_block(vlt, inner, depth + 1, state, effects, &mut m, &mut l)?;
                    }
                }
                prop_assert_eq!(&*state.lock().unwrap(), &m);
                prop_assert_eq!(vlt.locked_objects(), l.len());
                probe_table(vlt, &l)?;
                current::check().map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Ok(())
        };
        if let Err(e) = go() {
            inner_err = Some(e);
            return Err(Failed);
        }
        if b.fail { Err(Failed) } else { Ok(()) }
    });
    if let Some(e) = inner_err {
        return Err(e);
    }
    if r.is_ok() {
        *model = m;
        *locks = l;
    }
    // After the body ends, its changes are either kept or undone exactly.
    prop_assert_eq!(&*state.lock().unwrap(), &*model);
    prop_assert_eq!(vlt.locked_objects(), if depth == 0 { 0 } else { locks.len() });
    let none = BTreeMap::new();
    probe_table(vlt, if depth == 0 { &none } else { &*locks })?;
    prop_assert_eq!(current::active(), depth > 0);
    if depth > 0 {
        prop_assert_eq!(current::with(|t| t.depth()), Some(depth - 1));
    }
    Ok(r)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn atomically_matches_the_serial_model(b in block()) {
        let vlt = no_wait_vlt();
        let state: Cells = Arc::new(Mutex::new(initial()));
        let effects: Effects = Arc::new(Mutex::new(Vec::new()));

        let (mut cells, mut pending, mut locks) = (initial(), Vec::new(), BTreeMap::new());
        model_block(&b, &mut cells, &mut pending, &mut locks);

        prop_assert!(!current::active());
        let mut m = initial();
        let mut l = BTreeMap::new();
        let r = run_block(&vlt, &b, 0, &state, &effects, &mut m, &mut l)?;
        prop_assert_eq!(r.is_ok(), !b.fail);
        prop_assert_eq!(&m, &cells);
        prop_assert_eq!(&*state.lock().unwrap(), &cells);
        prop_assert_eq!(&*effects.lock().unwrap(), &pending);
        prop_assert_eq!(vlt.locked_objects(), 0);
        prop_assert!(!current::active());
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic checks of the ambient-transaction edges.

#[test]
fn outside_a_transaction_effects_are_immediate() {
    assert!(!current::active());
    assert_eq!(current::check(), Ok(()));
    assert_eq!(current::with(|t| t.depth()), None);
    let ran = Arc::new(Mutex::new(0));
    let r = ran.clone();
    current::on_commit(move || *r.lock().unwrap() += 1);
    assert_eq!(
        *ran.lock().unwrap(),
        1,
        "deferred action runs at once outside a transaction"
    );
    let r = ran.clone();
    current::on_abort(move || *r.lock().unwrap() += 100);
    assert_eq!(*ran.lock().unwrap(), 1, "undo record is dropped outside a transaction");
}

#[test]
fn a_panic_in_atomically_aborts_and_propagates() {
    let vlt = no_wait_vlt();
    let state: Cells = Arc::new(Mutex::new(initial()));
    let effects: Effects = Arc::new(Mutex::new(Vec::new()));
    let (s, e) = (state.clone(), effects.clone());
    let v = vlt.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        current::atomically(&v, || -> Result<(), ()> {
            current::lock(obj(0), LockMode::Exclusive).unwrap();
            let old = std::mem::replace(&mut s.lock().unwrap()[0], 7);
            let s2 = s.clone();
            current::on_abort(move || s2.lock().unwrap()[0] = old);
            let e2 = e.clone();
            current::on_commit(move || e2.lock().unwrap().push(1));
            // A nested body panics: both levels unwind.
            current::atomically(&v, || -> Result<(), ()> {
                current::lock(obj(1), LockMode::Exclusive).unwrap();
                let old = std::mem::replace(&mut s.lock().unwrap()[1], 8);
                let s2 = s.clone();
                current::on_abort(move || s2.lock().unwrap()[1] = old);
                panic!("graft fault");
            })
        })
    }));
    assert!(r.is_err());
    assert!(!current::active());
    assert_eq!(*state.lock().unwrap(), initial());
    assert!(effects.lock().unwrap().is_empty());
    assert_eq!(vlt.locked_objects(), 0);

    // The thread is usable again afterwards.
    let out = current::atomically(&vlt, || -> Result<i32, ()> {
        current::lock(obj(0), LockMode::Exclusive).unwrap();
        Ok(5)
    });
    assert_eq!(out, Ok(5));
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn a_commit_action_may_use_transactions() {
    // `end` takes the top-level transaction out of the thread before running its logs.
    let vlt = no_wait_vlt();
    let effects: Effects = Arc::new(Mutex::new(Vec::new()));
    let (v, e) = (vlt.clone(), effects.clone());
    current::atomically(&vlt, || -> Result<(), ()> {
        current::lock(obj(0), LockMode::Exclusive).unwrap();
        current::on_commit(move || {
            assert!(!current::active());
            current::atomically(&v, || -> Result<(), ()> {
                current::lock(obj(1), LockMode::Exclusive).unwrap();
                let e2 = e.clone();
                current::on_commit(move || e2.lock().unwrap().push(2));
                Ok(())
            })
            .unwrap();
        });
        Ok(())
    })
    .unwrap();
    assert_eq!(*effects.lock().unwrap(), vec![2]);
    assert_eq!(vlt.locked_objects(), 0);
}

#[test]
fn a_panicking_undo_record_in_a_failed_child_unwinds_cleanly() {
    // Regression: `current::end` took the transaction out of the thread to abort a child and, if
    // an undo record panicked, never put it back; the parent's abort then found no transaction
    // and panicked while unwinding, which aborts the process.
    let vlt = no_wait_vlt();
    let state: Cells = Arc::new(Mutex::new(initial()));
    let (v, s) = (vlt.clone(), state.clone());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        current::atomically(&v, || -> Result<(), ()> {
            current::lock(obj(0), LockMode::Exclusive).unwrap();
            let old = std::mem::replace(&mut s.lock().unwrap()[0], -1);
            let s2 = s.clone();
            current::on_abort(move || s2.lock().unwrap()[0] = old);
            let _ = current::atomically(&v, || -> Result<(), ()> {
                current::lock(obj(1), LockMode::Exclusive).unwrap();
                let old = std::mem::replace(&mut s.lock().unwrap()[1], -2);
                let s2 = s.clone();
                current::on_abort(move || s2.lock().unwrap()[1] = old);
                current::on_abort(|| panic!("broken undo record"));
                Err(())
            });
            unreachable!("the child's abort panicked");
        })
    }));
    assert!(r.is_err());
    assert!(!current::active());
    assert_eq!(*state.lock().unwrap(), initial(), "every other undo record still ran");
    assert_eq!(vlt.locked_objects(), 0);
}
