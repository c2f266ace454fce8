//! `net.congestion`: a process's own congestion control, as a graft, on two stacks joined by a
//! seeded lossy wire and one manual clock. The Reno and CUBIC example grafts give the same
//! window trace as the stack's built-in Reno and CUBIC on the same link; hostile grafts (a
//! window of zero, a loop, a trap after changing their state) never stall a connection: the
//! built-in decides each call they fail, their window trace is the built-in's, and they are
//! unloaded after failing again and again.

use std::sync::Arc;
use std::time::Duration;
use vino_graft::{GraftSlot, PolicyKind, Runtime};
use vino_net::congestion::{CongestionControl, StackShare, TraceEntry};
use vino_net::testbed::{Run, transfers};
use vino_net::{Congestion, Faults};

const TOTAL: usize = 1 << 20;

fn lossy(seed: u64) -> Faults {
    Faults {
        seed,
        loss: 0.01,
        duplicate: 0.0,
        reorder: 0.01,
        delay: Duration::from_millis(3),
    }
}

/// A client on A sends [`TOTAL`] bytes to a sink on B over a wire with `faults`; A's
/// connections run `builtin` with whatever `slot` has bound. Checks every byte and that the
/// transfer ends within a simulated ten minutes.
fn transfer(faults: Faults, builtin: CongestionControl, slot: &Arc<GraftSlot<Congestion>>) -> Run {
    transfers(faults, builtin, slot, (1, TOTAL), None, &mut || {})
}

fn runtime() -> Runtime {
    Runtime::default()
}

fn slot(runtime: &Runtime) -> Arc<GraftSlot<Congestion>> {
    Arc::new(GraftSlot::new(
        runtime,
        Arc::new(()),
        vino_graft::Access::Process(2),
        None,
    ))
}

fn example(name: &str) -> Vec<u8> {
    vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).expect("the example builds")
}

/// The window went down at least once (a loss or a timeout), so the trace covers recovery.
fn saw_a_cut(trace: &[TraceEntry]) -> bool {
    trace.windows(2).any(|w| w[1].2 < w[0].2)
}

#[test]
fn reno_and_cubic_grafts_trace_the_built_ins_window_for_window() {
    let rt = runtime();
    for (graft, builtin) in [
        ("reno_cc", CongestionControl::Reno),
        ("cubic_cc", CongestionControl::Cubic),
    ] {
        // Seed 53 loses the first SYN: a timeout before the segment size is known.
        for seed in [3, 17, 53] {
            let empty = slot(&rt);
            let alone = transfer(lossy(seed), builtin, &empty);
            assert!(saw_a_cut(&alone.trace), "{graft}: seed {seed} lost nothing");
            let grafted = slot(&rt);
            grafted
                .load(&example(graft), vino_graft::Owner::process(2))
                .expect("the example loads");
            let run = transfer(lossy(seed), builtin, &grafted);
            let stats = grafted.stats().expect("still bound");
            assert_eq!(stats.failures, 0, "{graft}: {:?}", stats.last_error);
            assert!(stats.invocations > 100, "{graft}: only {} calls", stats.invocations);
            if let Some(at) = (0..alone.trace.len().min(run.trace.len())).find(|&i| alone.trace[i] != run.trace[i]) {
                panic!(
                    "{graft} and the built-in part at change {at} of {} (seed {seed}): built-in {:?}, graft {:?}",
                    alone.trace.len(),
                    &alone.trace[at.saturating_sub(3)..(at + 3).min(alone.trace.len())],
                    &run.trace[at.saturating_sub(3)..(at + 3).min(run.trace.len())],
                );
            }
            assert_eq!(alone.trace.len(), run.trace.len(), "{graft}: seed {seed}");
            assert_eq!(alone.took, run.took, "{graft}: the same windows take the same time");
        }
    }
}

/// A graft that fails every call: the built-in decides each one, so the window trace is the
/// built-in's; the graft is unloaded after failing too often, and the transfer never stalls.
#[test]
fn a_failing_graft_leaves_the_built_in_in_charge() {
    let rt = runtime();
    let alone = transfer(lossy(5), CongestionControl::Cubic, &slot(&rt));
    for (name, wasm) in [
        // Answers a window of zero, every time.
        ("zero", wat::parse_str(ZERO).unwrap()),
        // Answers a window past 1 GiB.
        ("huge", wat::parse_str(HUGE).unwrap()),
        // Loops until its budget ends.
        ("loop", wat::parse_str(LOOP).unwrap()),
        // Scribbles over its state, then traps: the state it had comes back.
        ("trap", wat::parse_str(TRAP).unwrap()),
    ] {
        let s = slot(&rt);
        s.load(&wasm, vino_graft::Owner::process(2))
            .expect("a hostile graft loads");
        let run = transfer(lossy(5), CongestionControl::Cubic, &s);
        assert_eq!(run.trace, alone.trace, "{name}: the built-in's windows");
        assert_eq!(
            s.policy_kind(),
            PolicyKind::Default,
            "{name}: unloaded after its failures"
        );
    }
}

/// A graft that keeps a count of its calls in the connection's state and answers a window from
/// it: the state comes back to it from call to call, per connection.
#[test]
fn the_state_block_is_kept_between_calls() {
    let rt = runtime();
    let s = slot(&rt);
    s.load(&wat::parse_str(COUNTER).unwrap(), vino_graft::Owner::process(2))
        .expect("loads");
    let run = transfer(Faults::default(), CongestionControl::Cubic, &s);
    let windows: Vec<u64> = run.trace.iter().map(|t| t.2).collect();
    // INIT answers 1 MiB, then each call one segment more than the last: a window that only
    // ever grows, starting from the first count.
    assert!(windows.len() > 10, "{windows:?}");
    assert!(windows.windows(2).all(|w| w[1] > w[0]), "{windows:?}");
    assert_eq!(s.stats().unwrap().failures, 0);
}

/// One window for all of a process's connections (`shared_cc.c`): four connections at once over
/// a lossy wire all finish, the graft sees the four of them, and it never fails.
#[test]
fn a_process_shares_one_window_among_its_connections() {
    let rt = runtime();
    let s = slot(&rt);
    s.load(&example("shared_cc"), vino_graft::Owner::process(2)).unwrap();
    let mut most = 0;
    transfers(
        lossy(9),
        CongestionControl::Cubic,
        &s,
        (4, 256 << 10),
        None,
        &mut || {
            most = most.max(s.call_control("connections", &[]).unwrap());
        },
    );
    assert_eq!(most, 4, "the graft saw every connection");
    let stats = s.stats().unwrap();
    assert_eq!(stats.failures, 0, "{:?}", stats.last_error);
    assert!(s.call_control("window", &[]).unwrap() >= 2048);
}

/// A graft that answers validly but slowly (about 15 µs of work a call, within its 20 µs
/// budget): it is never unloaded, but once its user's share of the stack's thread is spent in a
/// window the built-in decides until the next, so its user cannot make others wait behind it.
/// A graft as fast as `reno_cc` never comes near the share.
#[test]
fn a_slow_graft_gets_its_users_share_of_the_stack_and_no_more() {
    let rt = runtime();
    let s = slot(&rt);
    s.load(&wat::parse_str(SLOW).unwrap(), vino_graft::Owner::process(2))
        .expect("loads");
    // A share of 0.2 ms a window (the kernel's is 5 ms) for this short transfer.
    let share = Arc::new(StackShare::with_limit(Duration::from_micros(200)));
    let run = transfers(
        Faults::default(),
        CongestionControl::Cubic,
        &s,
        (4, 256 << 10),
        Some(share),
        &mut || {},
    );
    assert!(run.skipped > 0, "the share was never spent");
    let stats = s.stats().unwrap();
    assert_eq!(stats.failures, 0, "{:?}", stats.last_error);
    assert_eq!(s.policy_kind(), PolicyKind::Wasm, "a slow graft is not a failing one");
    let fast = slot(&rt);
    fast.load(&example("reno_cc"), vino_graft::Owner::process(2)).unwrap();
    let run = transfers(
        Faults::default(),
        CongestionControl::Reno,
        &fast,
        (4, 256 << 10),
        None,
        &mut || {},
    );
    assert_eq!(run.skipped, 0);
}

/// Spins 600 rounds (about 4,800 units of fuel, 12 µs of its 20 µs budget), then keeps the
/// window it was given.
const SLOW: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_congestion") (param i32 i64 i64 i64) (result i64)
    (local $i i32)
    (loop $spin
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $spin (i32.lt_u (local.get $i) (i32.const 600))))
    (i64.load (i32.const 1024))))"#;

const ZERO: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_congestion") (param i32 i64 i64 i64) (result i64) (i64.const 0)))"#;

const HUGE: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_congestion") (param i32 i64 i64 i64) (result i64) (i64.const 0x40000001)))"#;

const LOOP: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_congestion") (param i32 i64 i64 i64) (result i64) (loop (br 0)) (i64.const 4096)))"#;

const TRAP: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_congestion") (param i32 i64 i64 i64) (result i64)
    (i64.store (i32.const 1072) (i64.const -1))
    unreachable))"#;

/// state[0] counts calls; the window is 1 MiB plus a segment a call.
const COUNTER: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_congestion") (param i32 i64 i64 i64) (result i64)
    (i64.store (i32.const 1072) (i64.add (i64.load (i32.const 1072)) (i64.const 1)))
    (i64.add (i64.const 1048576) (i64.mul (i64.load (i32.const 1072)) (i64.const 1024)))))"#;
