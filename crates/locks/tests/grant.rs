//! Who gets the lock when it is released: FIFO/reader priority against strict FIFO (native and as
//! a C graft), and hostile `lock.grant` grafts, which never strand a waiter.

use LockKind::{Read, Write};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use vino_graft::{Access, GraftSlot, Owner, PolicyKind, Runtime};
use vino_locks::{Fifo, LockError, LockGrant, LockKind, LockManager, Range, Wait};

const OBJ: u64 = 9;
const BYTE0: Range = Range { start: 0, end: 1 };

#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    Frp,
    FifoNative,
    FifoGraft,
}

fn manager(policy: Policy) -> (Arc<LockManager>, Arc<GraftSlot<LockGrant>>) {
    let m = Arc::new(LockManager::new(&Runtime::default()));
    let slot = m.graftpoint(OBJ, Access::Process(1));
    match policy {
        Policy::Frp => {}
        Policy::FifoNative => slot.bind_native(Arc::new(Fifo), false),
        Policy::FifoGraft => {
            let wasm = vino_sdk::build_example("lock_fifo", &Default::default()).expect("building lock_fifo.c");
            slot.load(&wasm, Owner::process(1)).expect("loading lock_fifo");
        }
    }
    (m, slot)
}

/// Runs a blocking request in a thread; returns once it is queued (or done).
fn waiter(m: &Arc<LockManager>, owner: u64, kind: LockKind) -> JoinHandle<Result<(), LockError>> {
    let before = m.waiting(OBJ).len();
    let m2 = m.clone();
    let h = thread::spawn(move || m2.lock(OBJ, owner, kind, BYTE0, Wait::Forever));
    let t = Instant::now();
    while m.waiting(OBJ).len() == before && !h.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(10), "the waiter never queued");
        thread::sleep(Duration::from_millis(1));
    }
    h
}

fn holders(m: &LockManager) -> Vec<(u64, LockKind)> {
    let mut v: Vec<(u64, LockKind)> = m.held(OBJ).iter().map(|l| (l.owner, l.kind)).collect();
    v.sort_by_key(|h| h.0);
    v
}

/// Owner 1 holds a write lock; writer 2, readers 3 and 4, writer 5 queue in that order.
fn queue_up(m: &Arc<LockManager>) -> Vec<JoinHandle<Result<(), LockError>>> {
    m.lock(OBJ, 1, Write, BYTE0, Wait::No).unwrap();
    vec![
        waiter(m, 2, Write),
        waiter(m, 3, Read),
        waiter(m, 4, Read),
        waiter(m, 5, Write),
    ]
}

/// Queues up as [`queue_up`] and lets FRP's grants go by: the readers, then the writers in turn.
fn frp_rounds(m: &Arc<LockManager>) {
    let hs = queue_up(m);
    m.unlock(OBJ, 1, BYTE0).unwrap();
    // The live policy's grant (a candidate's or a recording's changes none).
    assert_eq!(holders(m), vec![(3, Read), (4, Read)]);
    for o in [3, 4] {
        m.unlock(OBJ, o, BYTE0).unwrap();
    }
    m.unlock(OBJ, 2, BYTE0).unwrap();
    m.unlock(OBJ, 5, BYTE0).unwrap();
    for h in hs {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
}

#[test]
fn frp_lets_readers_pass_the_waiting_writer() {
    let (m, _slot) = manager(Policy::Frp);
    let hs = queue_up(&m);
    m.unlock(OBJ, 1, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(3, Read), (4, Read)], "all waiting readers at once");
    assert!(
        m.lock(OBJ, 6, Read, BYTE0, Wait::No).is_ok(),
        "a new reader walks in past the writers"
    );
    for o in [3, 4, 6] {
        m.unlock(OBJ, o, BYTE0).unwrap();
    }
    assert_eq!(holders(&m), vec![(2, Write)], "then the writers, longest-waiting first");
    m.unlock(OBJ, 2, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(5, Write)]);
    m.unlock(OBJ, 5, BYTE0).unwrap();
    for h in hs {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
}

fn strict_fifo(policy: Policy) {
    let (m, slot) = manager(policy);
    let hs = queue_up(&m);
    m.unlock(OBJ, 1, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(2, Write)], "{policy:?}: the writer that came first");
    m.unlock(OBJ, 2, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(3, Read), (4, Read)], "{policy:?}: then both readers");
    assert!(
        matches!(m.lock(OBJ, 6, Read, BYTE0, Wait::No), Err(LockError::WouldBlock { .. })),
        "{policy:?}: a new reader may not pass writer 5"
    );
    m.unlock(OBJ, 3, BYTE0).unwrap();
    m.unlock(OBJ, 4, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(5, Write)]);
    m.unlock(OBJ, 5, BYTE0).unwrap();
    for h in hs {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
    let stats = slot.stats().expect("a policy is bound");
    assert_eq!(stats.failures, 0, "{policy:?}: {stats:?}");
    assert!(stats.invocations >= 4, "{policy:?}: {stats:?}");
    assert_eq!(m.stats().overridden, 0);
}

#[test]
fn fifo_native_grants_in_arrival_order() {
    strict_fifo(Policy::FifoNative);
}

#[test]
fn fifo_graft_grants_in_arrival_order() {
    strict_fifo(Policy::FifoGraft);
}

#[test]
fn upgrading_reader_wins_under_every_policy() {
    for policy in [Policy::Frp, Policy::FifoNative, Policy::FifoGraft] {
        let (m, _slot) = manager(policy);
        m.lock(OBJ, 1, Read, BYTE0, Wait::No).unwrap();
        m.lock(OBJ, 2, Read, BYTE0, Wait::No).unwrap();
        let w = waiter(&m, 3, Write);
        let up = waiter(&m, 1, Write);
        m.unlock(OBJ, 2, BYTE0).unwrap();
        assert_eq!(holders(&m), vec![(1, Write)], "{policy:?}");
        assert_eq!(up.join().unwrap(), Ok(()));
        m.unlock(OBJ, 1, BYTE0).unwrap();
        assert_eq!(holders(&m), vec![(3, Write)], "{policy:?}");
        assert_eq!(w.join().unwrap(), Ok(()));
    }
}

/// A hostile graft in WebAssembly text: exports `memory`, `vino_args` and `lock_grant` with
/// `body` as its code.
fn hostile(body: &str) -> Vec<u8> {
    format!(
        r#"(module
             (memory (export "memory") 1)
             (global (export "vino_args") i32 (i32.const 0))
             (func (export "lock_grant") (param i32 i32) (result i64) {body}))"#
    )
    .into_bytes()
}

/// Queues waiters behind a holder, releases, and checks that everyone gets the lock in the end
/// in FRP's order (the default decided); returns the graft's failures, its invocations, and how
/// often the kernel overruled an empty grant.
fn nobody_is_stranded(body: &str) -> (u64, u64, u64) {
    let (m, slot) = manager(Policy::Frp);
    slot.load(&hostile(body), Owner::process(1)).expect("the module loads");
    let hs = queue_up(&m);
    m.unlock(OBJ, 1, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(3, Read), (4, Read)], "{body}: the default decided");
    m.unlock(OBJ, 3, BYTE0).unwrap();
    m.unlock(OBJ, 4, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(2, Write)], "{body}");
    m.unlock(OBJ, 2, BYTE0).unwrap();
    assert_eq!(holders(&m), vec![(5, Write)], "{body}");
    m.unlock(OBJ, 5, BYTE0).unwrap();
    for h in hs {
        assert_eq!(h.join().unwrap(), Ok(()), "{body}");
    }
    assert!(m.waiting(OBJ).is_empty() && m.held(OBJ).is_empty());
    m.check_invariants();
    let stats = slot.stats().expect("bound");
    (stats.failures, stats.invocations, m.stats().overridden)
}

#[test]
fn a_trapping_graft_leaves_it_to_the_default() {
    let (failures, calls, _) = nobody_is_stranded("unreachable");
    assert_eq!((failures, calls), (4, 4), "four decisions, all failed");
}

#[test]
fn an_invalid_choice_leaves_it_to_the_default() {
    // Everyone, conflicting writers included; then a waiter that does not exist; then negative.
    for body in ["i64.const 0xf", "i64.const 0x100", "i64.const -1"] {
        let (failures, calls, _) = nobody_is_stranded(body);
        assert_eq!((failures, calls), (4, 4), "{body}");
    }
}

#[test]
fn an_endless_graft_is_stopped_and_the_default_decides() {
    let (failures, calls, _) = nobody_is_stranded("(loop (br 0)) i64.const 0");
    assert_eq!((failures, calls), (4, 4));
}

#[test]
fn a_graft_that_never_grants_cannot_strand_anyone() {
    let (failures, _, overridden) = nobody_is_stranded("i64.const 0");
    assert_eq!(failures, 0, "granting nothing is a valid answer");
    // Three of its four answers left nobody able to release (the fourth came while reader 4
    // still held the lock): the kernel stepped in each of those times.
    assert_eq!(overridden, 3);
}

#[test]
fn after_enough_failures_the_graft_is_unloaded() {
    let (m, slot) = manager(Policy::Frp);
    slot.load(&hostile("unreachable"), Owner::process(1)).unwrap();
    for round in 0..10 {
        m.lock(OBJ, 1, Write, BYTE0, Wait::No).unwrap();
        let h = waiter(&m, 2, Read);
        m.unlock(OBJ, 1, BYTE0).unwrap();
        assert_eq!(h.join().unwrap(), Ok(()), "round {round}");
        m.unlock(OBJ, 2, BYTE0).unwrap();
    }
    assert_eq!(slot.policy_kind(), PolicyKind::Default);
}

#[test]
fn a_timed_out_writer_lets_the_readers_behind_it_go_under_fifo() {
    let (m, _slot) = manager(Policy::FifoGraft);
    m.lock(OBJ, 1, Read, BYTE0, Wait::No).unwrap();
    let m2 = m.clone();
    let w = thread::spawn(move || m2.lock(OBJ, 2, Write, BYTE0, Wait::For(Duration::from_millis(100))));
    while m.waiting(OBJ).is_empty() {
        thread::sleep(Duration::from_millis(1));
    }
    let r = waiter(&m, 3, Read);
    assert_eq!(m.waiting(OBJ).len(), 2, "the reader waits behind the writer");
    assert_eq!(w.join().unwrap(), Err(LockError::TimedOut));
    assert_eq!(r.join().unwrap(), Ok(()));
    assert_eq!(holders(&m), vec![(1, Read), (3, Read)]);
}

/// A runtime whose 100 µs budgets are a long spin (a huge fuel rate), so a graft that spins to
/// its budget is seen running for about a second.
fn slow_runtime() -> Runtime {
    Runtime::new(vino_graft::RuntimeConfig {
        fuel_per_ms: 50_000_000_000,
        ..Default::default()
    })
}

#[test]
fn a_spinning_graft_on_one_file_never_holds_up_locks_on_another() {
    let m = Arc::new(LockManager::new(&slow_runtime()));
    let slot = m.graftpoint(OBJ, Access::Process(1));
    slot.load(&hostile("(loop (br 0)) i64.const 0"), Owner::process(1))
        .unwrap();
    m.lock(OBJ, 1, Write, BYTE0, Wait::No).unwrap();
    let h = waiter(&m, 2, Write);
    // The unlock asks the spinning graft, with the manager's mutex released.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (m2, done2) = (m.clone(), done.clone());
    let unlocker = thread::spawn(move || {
        m2.unlock(OBJ, 1, BYTE0).unwrap();
        done2.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    // Let it enter the graft (which spins for most of a second).
    thread::sleep(Duration::from_millis(50));
    // Other owners lock and unlock another object many times while the graft spins.
    const OTHER: u64 = 77;
    for i in 0..1000u64 {
        m.lock(OTHER, 10 + i % 3, Write, BYTE0, Wait::No).unwrap();
        m.unlock(OTHER, 10 + i % 3, BYTE0).unwrap();
    }
    m.lock(OTHER, 20, Read, BYTE0, Wait::Forever).unwrap();
    m.release_owner(20);
    assert!(
        !done.load(std::sync::atomic::Ordering::SeqCst),
        "the other object's locks waited for the graft"
    );
    unlocker.join().unwrap();
    assert_eq!(
        h.join().unwrap(),
        Ok(()),
        "the default decided once the graft was stopped"
    );
    assert_eq!(holders(&m), vec![(2, Write)]);
    m.check_invariants();
}

#[test]
fn an_object_that_changes_while_its_graft_decides_is_decided_again() {
    // Several owners lock and unlock one object with a FIFO graft deciding and others changing
    // the queue meanwhile: invariants hold after every step and nobody is stranded.
    let (m, slot) = manager(Policy::FifoGraft);
    let threads: Vec<_> = (0..6u64)
        .map(|owner| {
            let m = m.clone();
            thread::spawn(move || {
                for i in 0..200u64 {
                    let kind = if (owner + i) % 3 == 0 { Write } else { Read };
                    let range = Range {
                        start: i % 4,
                        end: i % 4 + 2,
                    };
                    m.lock(OBJ, owner, kind, range, Wait::Forever).unwrap_or_else(|e| {
                        assert!(matches!(e, LockError::Deadlock { .. }), "{e}");
                    });
                    m.check_invariants();
                    // Held a moment, so others queue behind it and the graft decides.
                    thread::sleep(Duration::from_micros(200));
                    m.unlock(OBJ, owner, range).unwrap();
                }
                m.release_owner(owner);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(m.waiting(OBJ).is_empty() && m.held(OBJ).is_empty());
    assert!(
        slot.stats().unwrap().invocations > 0,
        "the graft decided: {:?} {:?}",
        slot.stats(),
        m.stats()
    );
    m.check_invariants();
}

/// A graft that moves the newest waiter it is offered to the front of the queue
/// (`vino_lock_requeue`), grants nothing, and traps afterwards while `vino_ctl_trap` has set
/// its flag.
const REQUEUING: &str = r#"(module
  (import "vino" "vino_lock_requeue" (func $requeue (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "vino_ctl_trap") (param $on i64) (result i32)
    (i64.store (i32.const 0) (local.get $on)) (i32.const 0))
  (func (export "lock_grant") (param $n i32) (param $m i32) (result i64)
    (if (call $requeue (i32.sub (local.get $n) (i32.const 1)) (i32.const 0)) (then unreachable))
    (if (i64.ne (i64.load (i32.const 0)) (i64.const 0)) (then unreachable))
    (i64.const 0)))"#;

fn waiting_owners(m: &LockManager) -> Vec<u64> {
    m.waiting(OBJ).iter().map(|l| l.owner).collect()
}

/// The hostile suite's `change_then_fail` at `lock.grant`: a move asked for by a call that then
/// traps, spins past its budget or answers out of range is never made.
#[test]
fn a_queue_move_is_made_only_by_a_call_that_commits_however_the_call_fails() {
    let (m, slot) = manager(Policy::Frp);
    slot.load(&vino_sdk::change_then_fail("lock.grant").unwrap(), Owner::process(1))
        .unwrap();
    // Every call asks for the third waiter offered to go to the front.
    slot.call_control("set", &[2, 0]).unwrap();
    m.lock(OBJ, 1, Read, BYTE0, Wait::No).unwrap();
    let hs = vec![waiter(&m, 2, Write), waiter(&m, 3, Write), waiter(&m, 4, Write)];
    let mut failed = 0;
    for (mode, failure) in vino_sdk::CHANGE_THEN_FAIL_MODES {
        slot.call_control("fail", &[mode]).unwrap();
        // The reader's arrival and its leaving make the policy decide: the graft fails, the
        // default lets the reader share owner 1's lock, and the queue keeps its order.
        m.lock(OBJ, 8, Read, BYTE0, Wait::No).unwrap();
        m.unlock(OBJ, 8, BYTE0).unwrap();
        let stats = slot.stats().unwrap();
        assert!(stats.failures > failed, "mode {mode}: {stats:?}");
        failed = stats.failures;
        assert!(stats.last_error.unwrap().contains(failure), "mode {mode}");
        assert_eq!(stats.changes, 0);
        assert_eq!(
            waiting_owners(&m),
            [2, 3, 4],
            "mode {mode}: a failed call's move was made"
        );
        assert_eq!(slot.call_control("calls", &[]).unwrap(), 0);
    }
    // Committed: owner 4 goes to the front as the reader comes (the graft grants nothing, so
    // the reader gives up), then owner 3 as it leaves.
    slot.call_control("fail", &[0]).unwrap();
    assert!(m.lock(OBJ, 8, Read, BYTE0, Wait::No).is_err());
    assert_eq!(waiting_owners(&m), [3, 4, 2]);
    assert_eq!(slot.stats().unwrap().changes, 2);
    assert_eq!(slot.call_control("calls", &[]).unwrap(), 2);
    slot.unload();
    m.unlock(OBJ, 1, BYTE0).unwrap();
    for owner in [3, 4, 2] {
        assert_eq!(holders(&m), [(owner, Write)]);
        m.unlock(OBJ, owner, BYTE0).unwrap();
    }
    for h in hs {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
    m.check_invariants();
}

#[test]
fn a_graft_reorders_its_objects_waiters_when_its_call_commits_and_not_when_it_fails() {
    let (m, slot) = manager(Policy::Frp);
    slot.load(&wat::parse_str(REQUEUING).unwrap(), Owner::process(1))
        .unwrap();
    m.lock(OBJ, 1, Read, BYTE0, Wait::No).unwrap();
    let hs = vec![waiter(&m, 2, Write), waiter(&m, 3, Write), waiter(&m, 4, Write)];
    // A reader that could share owner 1's lock while writers wait makes the policy decide: the
    // graft moves it to the front and grants nothing, so the reader gives up (it would not
    // wait), and the policy decides again: writer 4 goes to the front.
    assert!(m.lock(OBJ, 8, Read, BYTE0, Wait::No).is_err());
    assert_eq!(waiting_owners(&m), [4, 2, 3]);
    // The same call failing after its move: the default decides (the reader gets in) and the
    // queue keeps its order.
    slot.call_control("trap", &[1]).unwrap();
    m.lock(OBJ, 8, Read, BYTE0, Wait::No).unwrap();
    assert_eq!(waiting_owners(&m), [4, 2, 3]);
    assert_eq!(slot.stats().unwrap().failures, 1);
    // Two calls committed a move each (as the reader came, and as it gave up); the failed one's
    // move was never made.
    assert_eq!(slot.stats().unwrap().changes, 2);
    slot.call_control("trap", &[0]).unwrap();
    m.unlock(OBJ, 8, BYTE0).unwrap();
    assert_eq!(waiting_owners(&m), [3, 4, 2]);
    // Once nobody holds the byte, the default overrules the empty grant: the writer at the
    // front goes, then the graft's move applies to those still waiting.
    m.unlock(OBJ, 1, BYTE0).unwrap();
    assert_eq!(holders(&m), [(3, Write)]);
    assert_eq!(waiting_owners(&m), [2, 4]);
    for owner in [3, 2, 4] {
        assert_eq!(holders(&m), [(owner, Write)]);
        m.unlock(OBJ, owner, BYTE0).unwrap();
    }
    for h in hs {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
    m.check_invariants();
}

#[test]
fn a_fifo_candidate_in_shadow_is_judged_on_the_live_grants_and_changes_none() {
    // FRP decides; strict FIFO in shadow beside it.
    let (m, slot) = manager(Policy::Frp);
    let wasm = vino_sdk::build_example("lock_fifo", &Default::default()).expect("building lock_fifo.c");
    m.try_start(OBJ, &slot, &wasm, Owner::process(1), Some(1), 1024)
        .unwrap();
    frp_rounds(&m);
    let r = m.try_stop(OBJ).unwrap();
    assert!(r.agreement.followed >= 2, "{r:?}");
    // The first grant differs: FRP lets both readers in, FIFO the writer that came first.
    assert!(r.agreement.agreed < r.agreement.followed, "{r:?}");
    assert_eq!(r.agreement.shadow.failures, 0, "{r:?}");
    assert!(r.live_granted > r.candidate_granted, "{r:?}");
    assert_eq!(slot.policy_kind(), PolicyKind::Default, "nothing was bound");
}

/// Strict FIFO as a graft written by hand: the longest waiter only.
const FIRST_ONLY: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
  (func (export "lock_grant") (param $n i32) (param $m i32) (result i64) (i64.const 1)))"#;

#[test]
fn the_default_s_grants_are_recorded_and_a_candidate_replayed_on_them() {
    use vino_graft::record::{Event, Outcome, Recording};
    use vino_graft::replay::{ReplayOptions, replay};
    let (m, slot) = manager(Policy::Frp);
    slot.record_default_start(1 << 20, &Owner::process(1)).unwrap();
    assert!(
        slot.consulted(),
        "the manager asks the slot while the default is recorded"
    );
    frp_rounds(&m);
    let recording = Recording::from_bytes(&slot.record_stop().unwrap().to_bytes()).unwrap();
    assert!(recording.invocations >= 3, "{recording:?}");
    // The first decision: four waiters, the readers (entries 1 and 2) granted.
    let answers: Vec<&Vec<i64>> = recording
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Return {
                results,
                outcome: Outcome::Decided,
                ..
            } => Some(results),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len() as u64, recording.invocations);
    assert_eq!(answers[0], &vec![0b110]);
    // Strict FIFO on the same inputs would have granted the writer first.
    let options = ReplayOptions {
        decisions: true,
        ..Default::default()
    };
    let replayed = replay(&recording, FIRST_ONLY.as_bytes(), options).unwrap();
    assert!(!replayed.same_module && replayed.failed == 0, "{replayed:?}");
    let first = replayed.decisions.as_ref().unwrap()[0].as_ref().unwrap();
    assert_eq!(first.results, vec![1]);
    assert!(replayed.matched < replayed.invocations, "{replayed:?}");
}
