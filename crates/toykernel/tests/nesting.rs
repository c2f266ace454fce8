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

/// Counts its calls in its memory's first word and answers the count; `vino_ctl_count` reads it.
/// With `transactional` it also imports a kernel function (so its calls run in a transaction of
/// their own, nested in the caller's).
fn counter(transactional: bool) -> String {
    let (import, touch) = match transactional {
        true => (
            r#"(import "vino" "vino_toy_get" (func $get (param i32) (result i64)))"#,
            "(drop (call $get (i32.const 3)))",
        ),
        false => ("", ""),
    };
    format!(
        r#"(module {import}
        (memory (export "memory") 1)
        (func (export "toy_apply") (param i64) (result i64)
            {touch}
            (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1)))
            (i64.load (i32.const 0)))
        (func (export "vino_ctl_count") (result i64) (i64.load (i32.const 0))))"#
    )
}

/// Calls the inner graftpoint and returns the negation of its answer: always invalid, so the
/// whole family aborts after the inner call committed.
const OUTER_NEGATING: &str = r#"(module
    (import "vino" "vino_toy_call_inner" (func $inner (param i64) (result i64)))
    (func (export "toy_apply") (param i64) (result i64)
        (i64.sub (i64.const 0) (call $inner (local.get 0)))))"#;

#[test]
fn an_outer_abort_undoes_the_inner_grafts_memory_too() {
    for transactional in [false, true] {
        let rt = Runtime::default();
        let (_k, outer, inner) = setup(&rt);
        inner
            .load(counter(transactional).as_bytes(), Owner::process(1))
            .unwrap();
        let count = || inner.call_control("count", &[]).unwrap();
        assert_eq!(inner.invoke(&0), 1, "a call of its own");
        // The inner call commits inside the outer transaction, which then aborts: the count it
        // wrote goes with it.
        outer.load(OUTER_NEGATING.as_bytes(), Owner::process(1)).unwrap();
        assert_eq!(outer.invoke(&2), 2, "the default decided");
        assert_eq!(outer.stats().unwrap().failures, 1);
        assert_eq!(count(), 1, "transactional inner graft: {transactional}");
        // Committed by both, it stays; and the pin on the inner instance is gone.
        outer.load(OUTER.as_bytes(), Owner::process(1)).unwrap();
        assert_eq!(outer.invoke(&2), 2, "the inner graft's second count");
        assert_eq!(count(), 2);
        assert_eq!(inner.invoke(&0), 3);
        assert_eq!(rt.vlt().locked_objects(), 0);
    }
}

#[test]
fn an_outer_graft_calling_twice_has_both_inner_calls_undone() {
    let rt = Runtime::default();
    let (_k, outer, inner) = setup(&rt);
    inner.load(counter(true).as_bytes(), Owner::process(1)).unwrap();
    let twice = r#"(module
        (import "vino" "vino_toy_call_inner" (func $inner (param i64) (result i64)))
        (func (export "toy_apply") (param i64) (result i64)
            (drop (call $inner (local.get 0)))
            (if (i64.ne (call $inner (local.get 0)) (i64.const 3)) (then (return (i64.const -1))))
            unreachable))"#;
    assert_eq!(inner.invoke(&0), 1);
    outer.load(twice.as_bytes(), Owner::process(1)).unwrap();
    assert_eq!(outer.invoke(&5), 5, "the default decided");
    let failure = outer.stats().unwrap().last_error.unwrap();
    assert!(
        failure.contains("unreachable"),
        "the second inner call saw 3: {failure}"
    );
    assert_eq!(inner.call_control("count", &[]).unwrap(), 1);
    assert_eq!(rt.vlt().locked_objects(), 0);
}

#[test]
fn an_inner_graft_pinned_by_an_unfinished_transaction_makes_others_wait() {
    use std::sync::mpsc;
    use vino_graft::{GraftError, Invalid};
    let config = RuntimeConfig {
        vlt: vino_vlt::VltConfig {
            wait_limit: std::time::Duration::from_secs(30),
            ..vino_vlt::VltConfig::default()
        },
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config);
    let (_k, outer, inner) = setup(&rt);
    inner.load(counter(false).as_bytes(), Owner::process(1)).unwrap();
    assert_eq!(inner.invoke(&0), 1);
    // A trusted outer policy that calls the inner graft, says so, waits to be let go, then
    // fails: its transaction holds the inner instance until then.
    let (reached_tx, reached) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let (reached_tx, go_rx) = (std::sync::Mutex::new(reached_tx), std::sync::Mutex::new(go_rx));
    let policy = move |k: &ToyKernel, arg: &i64| -> Result<i64, Invalid> {
        let counted = k.call_inner(*arg).expect("inner graftpoint set");
        reached_tx.lock().unwrap().send(counted).unwrap();
        go_rx.lock().unwrap().recv().unwrap();
        Err(Invalid("changed its mind".into()))
    };
    outer.bind_native(Arc::new(policy), true);
    let outer = Arc::new(outer);
    let caller = std::thread::spawn({
        let outer = outer.clone();
        move || outer.invoke(&9)
    });
    assert_eq!(reached.recv().unwrap(), 2, "the nested call counted");
    // Another caller of the inner graft: the control call waits for the outer family to end;
    // a graftpoint that does not wait is told the instance is busy, and the default decides.
    let control = std::thread::spawn({
        let inner = inner.clone();
        move || inner.call_control("count", &[])
    });
    assert_eq!(inner.invoke(&0), 0, "busy: the default answered");
    assert_eq!(inner.stats().unwrap().failures, 0, "busy is not the graft's failure");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        !control.is_finished(),
        "the control call waits for the outer transaction"
    );
    go.send(()).unwrap();
    assert_eq!(
        caller.join().unwrap(),
        9,
        "the outer policy failed: the default decided"
    );
    let seen: Result<i64, GraftError> = control.join().unwrap();
    assert_eq!(
        seen,
        Ok(1),
        "the waiting call saw the count with the aborted call undone"
    );
    assert_eq!(inner.invoke(&0), 2);
    assert_eq!(rt.vlt().locked_objects(), 0);
}
