//! Grafts reached from grafts, and grafts used from many threads while being replaced.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use vino_graft::{Access, GraftSlot, Owner, PolicyKind, Runtime, RuntimeConfig};
use vino_toykernel::{ToyApply, ToyKernel};

const OUTER: &str = r#"(module
    (import "vino" "vino_toy_set" (func $set (param i32 i64)))
    (import "vino" "vino_toy_call_inner" (func $inner (param i64) (result i64)))
    (func (export "toy_apply") (param i64) (result i64)
        (call $set (i32.const 0) (local.get 0))
        (call $inner (local.get 0))))"#;

/// Sets cell 1, then traps when its argument is odd.
const INNER_FLAKY: &str = r#"(module
    (import "vino" "vino_toy_set" (func $set (param i32 i64)))
    (func (export "toy_apply") (param i64) (result i64)
        (call $set (i32.const 1) (i64.const 77))
        (if (i32.wrap_i64 (i64.rem_u (local.get 0) (i64.const 2))) (then unreachable))
        (i64.mul (local.get 0) (i64.const 10))))"#;

fn setup(rt: &Runtime) -> (ToyKernel, GraftSlot<ToyApply>, Arc<GraftSlot<ToyApply>>) {
    let k = ToyKernel::new(4);
    let inner = Arc::new(GraftSlot::new(
        rt,
        Arc::new(k.clone()),
        Access::Process(1),
        Some("inner"),
    ));
    k.set_inner(inner.clone());
    let outer = GraftSlot::new(rt, Arc::new(k.clone()), Access::Process(1), None);
    outer.load(OUTER.as_bytes(), Owner::process(1)).unwrap();
    inner.load(INNER_FLAKY.as_bytes(), Owner::process(1)).unwrap();
    (k, outer, inner)
}

#[test]
fn inner_abort_undoes_only_the_inner_graft() {
    let rt = Runtime::default();
    let (k, outer, inner) = setup(&rt);
    // Odd: the inner graft traps; its write to cell 1 is undone, the default answers 3, and the
    // outer graft's write to cell 0 commits.
    assert_eq!(outer.invoke(&3), 3);
    assert_eq!(k.snapshot(), vec![3, 0, 0, 0]);
    assert_eq!(inner.stats().unwrap().failures, 1);
    assert_eq!(outer.stats().unwrap().failures, 0);
    // Even: both commit, the inner's changes through the outer's transaction.
    assert_eq!(outer.invoke(&4), 40);
    assert_eq!(k.snapshot(), vec![4, 77, 0, 0]);
    assert_eq!(rt.vlt().locked_objects(), 0);
}

#[test]
fn outer_abort_undoes_the_committed_inner_graft_too() {
    let rt = Runtime::default();
    let (k, outer, _inner) = setup(&rt);
    // The outer graft turns the inner's (even) answer negative: invalid, so the whole family aborts.
    let negate = r#"(module
        (import "vino" "vino_toy_set" (func $set (param i32 i64)))
        (import "vino" "vino_toy_call_inner" (func $inner (param i64) (result i64)))
        (func (export "toy_apply") (param i64) (result i64)
            (call $set (i32.const 0) (local.get 0))
            (i64.sub (i64.const 0) (call $inner (local.get 0)))))"#;
    outer.load(negate.as_bytes(), Owner::process(1)).unwrap();
    assert_eq!(outer.invoke(&2), 2, "default");
    assert_eq!(
        k.snapshot(),
        vec![0, 0, 0, 0],
        "the inner graft's committed write went with its parent"
    );
    assert_eq!(rt.vlt().locked_objects(), 0);
}

#[test]
fn callers_see_old_or_new_graft_while_it_is_replaced() {
    let rt = Runtime::new(RuntimeConfig::default());
    let k = ToyKernel::new(1);
    let slot = Arc::new(GraftSlot::<ToyApply>::new(&rt, Arc::new(k), Access::Process(1), None));
    let times = |n: i64| {
        format!(r#"(module (func (export "toy_apply") (param i64) (result i64) local.get 0 i64.const {n} i64.mul))"#)
    };
    let grafts: Vec<Vec<u8>> = (2..6).map(|n| times(n).into_bytes()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (slot, stop, started) = (slot.clone(), stop.clone(), started.clone());
            std::thread::spawn(move || {
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = slot.invoke(&7);
                    // Default (7) or one of the grafts (14, 21, 28, 35): never anything else.
                    assert!(r % 7 == 0 && (1..=5).contains(&(r / 7)), "impossible answer {r}");
                    if seen == 0 {
                        started.fetch_add(1, Ordering::Relaxed);
                    }
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    // Both callers are calling before the grafts start changing (a loaded machine may start
    // them late).
    while started.load(Ordering::Relaxed) < 2 {
        std::thread::yield_now();
    }
    for round in 0..200 {
        let g = &grafts[round % grafts.len()];
        if round % 7 == 6 {
            slot.unload();
        } else {
            slot.load(g, Owner::process(1)).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        assert!(c.join().expect("caller panicked") > 0);
    }
    assert!(matches!(slot.policy_kind(), PolicyKind::Wasm | PolicyKind::Default));
    assert_eq!(rt.vlt().locked_objects(), 0);
}

#[test]
fn concurrent_grafts_updating_shared_cells_lose_no_update() {
    let rt = Runtime::default();
    let k = ToyKernel::new(2);
    // Adds its argument to cell 0 and subtracts it from cell 1; traps on arguments divisible by 5
    // after changing both cells, so those updates must vanish.
    let transfer = r#"(module
        (import "vino" "vino_toy_get" (func $get (param i32) (result i64)))
        (import "vino" "vino_toy_set" (func $set (param i32 i64)))
        (func (export "toy_apply") (param i64) (result i64)
            (call $set (i32.const 0) (i64.add (call $get (i32.const 0)) (local.get 0)))
            (call $set (i32.const 1) (i64.sub (call $get (i32.const 1)) (local.get 0)))
            (if (i64.eqz (i64.rem_u (local.get 0) (i64.const 5))) (then unreachable))
            (local.get 0)))"#;
    // One slot (one sandbox) per worker, so the grafts really run at once and meet on the locks:
    // get takes a shared lock, set upgrades it, so two of them can deadlock and one must abort.
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let slot = GraftSlot::<ToyApply>::new(&rt, Arc::new(k.clone()), Access::Process(1), Some(&w.to_string()));
            slot.load(transfer.as_bytes(), Owner::process(1)).unwrap();
            std::thread::spawn(move || {
                let mut committed = 0i64;
                for i in 1..=300i64 {
                    let failures = slot.stats().unwrap().failures;
                    slot.invoke(&i);
                    if slot.stats().unwrap().failures == failures {
                        committed += i;
                    }
                }
                (committed, slot.stats().unwrap())
            })
        })
        .collect();
    let mut committed = 0;
    for w in workers {
        let (c, stats) = w.join().unwrap();
        assert!(stats.failures >= 60, "every fifth call traps: {stats:?}");
        committed += c;
    }
    assert_eq!(
        k.snapshot(),
        vec![committed, -committed],
        "exactly the committed transfers are there"
    );
    assert_eq!(rt.vlt().locked_objects(), 0);
}
