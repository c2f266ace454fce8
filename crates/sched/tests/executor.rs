//! The scheduler running real threads (futures that burn CPU, sleep and block) on its workers,
//! with and without hostile grafts. Shares are checked from the scheduler's own accounts.
//!
//! Most tests run on a manual clock: a burner's step moves the clock 20 µs instead of spinning
//! for it, so the CPU each thread is charged is the clock's time its turns took, whatever the
//! host's load, and a test runs until the clock (not the host) has moved far enough. One test
//! keeps the machine's clock, where real time is the point (a thread blocked in the kernel).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vino_clock::{ManualClock, SharedClock};
use vino_graft::{Owner, PolicyKind, Runtime};
use vino_sched::shadow::SchedTryReport;
use vino_sched::{JoinHandle, SchedConfig, Scheduler, ThreadCtx, in_kernel};

fn one_worker() -> SchedConfig {
    SchedConfig {
        workers: 1,
        ..SchedConfig::default()
    }
}

/// A scheduler on a manual clock of its own.
fn manual(rt: &Runtime, config: SchedConfig) -> (Scheduler, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Duration::ZERO));
    (
        Scheduler::with_clock(rt, config, SharedClock::new(clock.clone())),
        clock,
    )
}

const STEP: Duration = Duration::from_micros(20);
/// Steps of a turn a burner takes before it yields, on a manual clock (1 ms of its time).
const TURN_STEPS: u64 = 50;

/// Burns CPU in 20 µs steps until `stop`, counting steps: on the machine's clock by spinning,
/// yielding at the end of each slice; on a manual clock by moving it, yielding every turn, and
/// only once the test has started the clock (every burner then exists: one that started alone
/// would have run up time before the others arrived).
async fn burn(ctx: ThreadCtx, stop: Arc<AtomicBool>, steps: Arc<AtomicU64>, clock: Option<Arc<ManualClock>>) {
    use vino_clock::Clock;
    while clock.as_ref().is_some_and(|c| c.monotonic().is_zero()) {
        ctx.yield_now().await;
    }
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match &clock {
            Some(c) => c.advance(STEP),
            None => {
                let t = Instant::now();
                while t.elapsed() < STEP {
                    std::hint::spin_loop();
                }
            }
        }
        n += 1;
        steps.fetch_add(1, Ordering::Relaxed);
        if ctx.slice_over() || (clock.is_some() && n.is_multiple_of(TURN_STEPS)) {
            ctx.yield_now().await;
        }
    }
}

fn burner(s: &Scheduler, pid: u64, stop: &Arc<AtomicBool>) -> (JoinHandle, Arc<AtomicU64>) {
    burner_on(s, pid, stop, None)
}

fn burner_on(
    s: &Scheduler,
    pid: u64,
    stop: &Arc<AtomicBool>,
    clock: Option<&Arc<ManualClock>>,
) -> (JoinHandle, Arc<AtomicU64>) {
    let steps = Arc::new(AtomicU64::new(0));
    let (stop, counted, clock) = (stop.clone(), steps.clone(), clock.cloned());
    let h = s.spawn(pid, move |ctx| burn(ctx, stop, counted, clock)).unwrap();
    (h, steps)
}

/// Starts the burners on `clock` and waits (on the host) until they have moved it by `d`.
fn until_clock(clock: &ManualClock, d: Duration) {
    use vino_clock::Clock;
    clock.advance(Duration::from_nanos(1));
    let start = Instant::now();
    while clock.monotonic() < d {
        assert!(start.elapsed() < Duration::from_secs(60), "the burners stopped");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn cpu_ms(s: &Scheduler, pid: u64) -> f64 {
    s.process_cpu(pid).unwrap().as_secs_f64() * 1e3
}

#[test]
fn cpu_follows_tickets_between_users() {
    let rt = Runtime::default();
    let (s, clock) = manual(&rt, one_worker());
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for (pid, tickets) in [(1u64, 300), (2, 200), (3, 100)] {
        s.set_user_tickets(pid as u32, tickets).unwrap();
        s.add_process(pid, pid as u32);
        hs.push(burner_on(&s, pid, &stop, Some(&clock)));
    }
    until_clock(&clock, Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for (h, _) in &hs {
        h.join();
    }
    let cpu: Vec<f64> = (1..=3).map(|p| cpu_ms(&s, p)).collect();
    let total: f64 = cpu.iter().sum();
    for (got, want) in cpu.iter().zip([3.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0]) {
        assert!((got / total - want).abs() / want < 0.15, "CPU {cpu:?} ms, wanted 3:2:1");
    }
    assert!(s.stats().switches > 100, "{:?}", s.stats());
}

#[test]
fn a_user_with_more_processes_gets_no_more_cpu() {
    let rt = Runtime::default();
    let (s, clock) = manual(&rt, one_worker());
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for pid in 1..=3 {
        s.add_process(pid, 1);
        hs.push(burner_on(&s, pid, &stop, Some(&clock)));
    }
    s.add_process(9, 2);
    hs.push(burner_on(&s, 9, &stop, Some(&clock)));
    until_clock(&clock, Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    for (h, _) in &hs {
        h.join();
    }
    let user1: f64 = (1..=3).map(|p| cpu_ms(&s, p)).sum();
    let user2 = cpu_ms(&s, 9);
    assert!(
        (user1 / user2 - 1.0).abs() < 0.2,
        "user 1 {user1} ms over 3 processes, user 2 {user2} ms"
    );
}

#[test]
fn a_sleeping_thread_gives_its_worker_back() {
    use vino_clock::Clock;
    let rt = Runtime::default();
    let (s, clock) = manual(&rt, one_worker());
    s.add_process(1, 1);
    s.add_process(2, 2);
    let stop = Arc::new(AtomicBool::new(false));
    // The burner moves the clock; the sleeper wakes as it passes each deadline.
    clock.advance(Duration::from_nanos(1));
    let (burning, steps) = burner_on(&s, 2, &stop, Some(&clock));
    let slept = Arc::new(AtomicU64::new(0));
    let (out, c) = (slept.clone(), clock.clone());
    let sleeper = s
        .spawn(1, move |ctx| async move {
            let t = c.monotonic();
            for _ in 0..5 {
                ctx.sleep_for(Duration::from_millis(20)).await;
            }
            out.store((c.monotonic() - t).as_millis() as u64, Ordering::Relaxed);
        })
        .unwrap();
    sleeper.join();
    let during = steps.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    burning.join();
    assert!(
        slept.load(Ordering::Relaxed) >= 100,
        "slept {} ms",
        slept.load(Ordering::Relaxed)
    );
    assert!(during > 100, "the other thread ran while it slept ({during} steps)");
    // The sleeper used almost no CPU.
    assert!(cpu_ms(&s, 1) < 50.0, "{} ms", cpu_ms(&s, 1));
}

#[test]
fn a_thread_blocked_in_the_kernel_leaves_its_place_to_another() {
    let rt = Runtime::default();
    let s = Scheduler::new(&rt, one_worker());
    s.add_process(1, 1);
    s.add_process(2, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let blocked = s
        .spawn(1, |_| async {
            // Two long calls in one turn: the worker is replaced once, not twice.
            in_kernel(|| std::thread::sleep(Duration::from_millis(150)));
            in_kernel(|| std::thread::sleep(Duration::from_millis(150)));
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (burning, steps) = burner(&s, 2, &stop);
    std::thread::sleep(Duration::from_millis(150));
    let during = steps.load(Ordering::Relaxed);
    blocked.join();
    stop.store(true, Ordering::Relaxed);
    burning.join();
    assert!(
        during > 100,
        "one worker, its thread asleep in the kernel: the other ran {during} steps"
    );
    assert!(s.stats().handoffs >= 1, "{:?}", s.stats());
    // The workers' count came back right: new threads still run.
    for _ in 0..3 {
        s.spawn(2, |ctx| async move { ctx.yield_now().await }).unwrap().join();
    }
}

#[test]
fn many_threads_in_many_processes_all_finish() {
    let rt = Runtime::default();
    let s = Scheduler::new(&rt, SchedConfig::default());
    let sum = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for pid in 1..=16 {
        s.add_process(pid, (pid % 4) as u32);
        for _ in 0..8 {
            let sum = sum.clone();
            hs.push(
                s.spawn(pid, move |ctx| async move {
                    for i in 0..50 {
                        sum.fetch_add(1, Ordering::Relaxed);
                        if i % 10 == 0 {
                            ctx.sleep_until(Instant::now() + Duration::from_millis(1)).await;
                        } else {
                            ctx.yield_now().await;
                        }
                    }
                })
                .unwrap(),
            );
        }
    }
    for h in &hs {
        h.join();
    }
    assert_eq!(sum.load(Ordering::Relaxed), 16 * 8 * 50);
    let st = s.stats();
    assert_eq!((st.spawned, st.exited), (128, 128));
    for pid in 1..=16 {
        assert!(s.threads_of(pid).is_empty());
        s.remove_process(pid);
    }
}

#[test]
fn a_thread_joins_another() {
    let rt = Runtime::default();
    let s = Arc::new(Scheduler::new(&rt, one_worker()));
    s.add_process(1, 1);
    let order = Arc::new(parking_lot_free::Order::default());
    let (o1, o2) = (order.clone(), order.clone());
    let child = s
        .spawn(1, move |ctx| async move {
            ctx.sleep_until(Instant::now() + Duration::from_millis(10)).await;
            o1.push(1);
        })
        .unwrap();
    let parent = s
        .spawn(1, move |_| async move {
            child.await;
            o2.push(2);
        })
        .unwrap();
    parent.join();
    assert_eq!(order.take(), vec![1, 2]);
}

/// A tiny ordered log without extra dependencies.
mod parking_lot_free {
    #[derive(Default)]
    pub struct Order(std::sync::Mutex<Vec<u32>>);
    impl Order {
        pub fn push(&self, v: u32) {
            self.0.lock().unwrap().push(v);
        }
        pub fn take(&self) -> Vec<u32> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }
}

/// `sched.pick_next` grafts: one that always picks the newest arrival (it starves whoever has
/// waited), one that loops forever, one that answers a thread that is not there.
const NEWEST: &str = r#"(module
    (memory (export "memory") 1)
    (global (export "vino_args") i32 (i32.const 1024))
    (func (export "sched_pick_next") (param i32 i32) (result i32)
        (i32.sub (local.get 0) (i32.const 1))))"#;
const LOOPS: &str = r#"(module
    (memory (export "memory") 1)
    (global (export "vino_args") i32 (i32.const 1024))
    (func (export "sched_pick_next") (param i32 i32) (result i32)
        (loop $l (br $l)) (i32.const 0)))"#;
const NOWHERE: &str = r#"(module
    (memory (export "memory") 1)
    (global (export "vino_args") i32 (i32.const 1024))
    (func (export "sched_pick_next") (param i32 i32) (result i32) (i32.const 1000)))"#;

fn two_burners_under(graft: &str, cap: Duration) -> (Scheduler, [f64; 2]) {
    let rt = Runtime::default();
    let (s, clock) = manual(
        &rt,
        SchedConfig {
            starvation_cap: cap,
            ..one_worker()
        },
    );
    s.pick_next_slot().load(graft.as_bytes(), Owner::process(0)).unwrap();
    s.add_process(1, 1);
    s.add_process(2, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let a = burner_on(&s, 1, &stop, Some(&clock));
    let b = burner_on(&s, 2, &stop, Some(&clock));
    until_clock(&clock, Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    a.0.join();
    b.0.join();
    let cpu = [cpu_ms(&s, 1), cpu_ms(&s, 2)];
    (s, cpu)
}

#[test]
fn a_starving_graft_cannot_starve_a_thread() {
    let (s, cpu) = two_burners_under(NEWEST, Duration::from_millis(50));
    assert!(cpu[0] > 50.0 && cpu[1] > 50.0, "both ran: {cpu:?} ms");
    let st = s.stats();
    assert!(st.starved > 0, "the starvation cap stepped in: {st:?}");
}

#[test]
fn a_looping_or_lying_graft_is_overruled_and_the_default_decides() {
    for graft in [LOOPS, NOWHERE] {
        let (s, cpu) = two_burners_under(graft, Duration::from_secs(1));
        assert!(
            (cpu[0] / cpu[1] - 1.0).abs() < 0.3,
            "the default shares evenly: {cpu:?} ms"
        );
        let slot = s.pick_next_slot();
        let failures = slot.stats().map_or(0, |g| g.failures);
        assert!(
            failures > 0 || slot.policy_kind() == PolicyKind::Default,
            "the graft's failures are counted, or it was unloaded for failing"
        );
        assert_eq!(s.stats().graft_picks, 0);
    }
}

#[test]
fn a_wait_of_no_known_length_gives_the_worker_away_at_once() {
    let rt = Runtime::default();
    // A tick so long the ticker never hands a worker off: only `blocking` can.
    let s = Scheduler::new(
        &rt,
        SchedConfig {
            workers: 1,
            tick: Duration::from_secs(30),
            ..SchedConfig::default()
        },
    );
    s.add_process(1, 1);
    s.add_process(2, 2);
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (ran, seen) = std::sync::mpsc::channel::<()>();
    let waiter = s
        .spawn(1, move |_| async move {
            // Inside a system call, as a program's read of its input is.
            in_kernel(|| vino_sched::blocking(|| wait.recv().unwrap()));
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let other = s
        .spawn(2, move |_| async move {
            ran.send(()).unwrap();
        })
        .unwrap();
    seen.recv_timeout(Duration::from_secs(10))
        .expect("the other thread ran while the first waited on the one worker");
    other.join();
    release.send(()).unwrap();
    waiter.join();
    assert_eq!(s.stats().handoffs, 1, "{:?}", s.stats());
    // The count of polling workers came back right: threads still run, one at a time.
    for _ in 0..3 {
        s.spawn(2, |ctx| async move { ctx.yield_now().await }).unwrap().join();
    }
}

/// A `sched.pick_thread` graft that gives one ticket to the process `vino_ctl_set` named on
/// every call (`vino_tickets_give`), then traps if told to, else runs the default's choice.
const GIVER: &str = r#"(module
    (import "vino" "vino_tickets_give" (func $give (param i64 i32) (result i32)))
    (memory (export "memory") 1)
    (global (export "vino_args") i32 (i32.const 1024))
    (func (export "vino_ctl_set") (param $to i64) (param $trap i64) (result i32)
        (i64.store (i32.const 0) (local.get $to))
        (i64.store (i32.const 8) (local.get $trap))
        (i32.const 0))
    (func (export "sched_pick_thread") (param i32 i32) (result i32)
        (drop (call $give (i64.load (i32.const 0)) (i32.const 1)))
        (if (i64.ne (i64.load (i32.const 8)) (i64.const 0)) (then unreachable))
        (i32.const 0)))"#;

/// Process 1 (user 1) runs two burners under [`GIVER`] giving to `to`; process 2 is user 1's
/// too, process 3 user 2's. Returns the scheduler and how many calls the graft made.
fn giving(to: u64, trap: bool) -> (Scheduler, u64) {
    let (s, stats) = giving_from(GIVER.as_bytes(), &[("set", &[to as i64, i64::from(trap)])]);
    (s, stats.invocations)
}

/// Process 1 (user 1) runs two burners under `graft`, set up by the `controls` calls; process 2
/// is user 1's too, process 3 user 2's. Returns the scheduler and the graft's statistics.
fn giving_from(graft: &[u8], controls: &[(&str, &[i64])]) -> (Scheduler, vino_graft::GraftStats) {
    // A graft that keeps failing stays loaded, so that its failed calls are counted.
    let rt = Runtime::new(vino_graft::RuntimeConfig {
        max_consecutive_failures: u32::MAX,
        failure_rate_min: u32::MAX,
        ..Default::default()
    });
    let (s, clock) = manual(&rt, one_worker());
    let slot = s.add_process(1, 1);
    s.add_process(2, 1);
    s.add_process(3, 2);
    slot.load(graft, Owner::process(1)).unwrap();
    for (name, args) in controls {
        slot.call_control(name, args).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let a = burner_on(&s, 1, &stop, Some(&clock));
    let b = burner_on(&s, 1, &stop, Some(&clock));
    until_clock(&clock, Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    a.0.join();
    b.0.join();
    let stats = slot.stats().expect("the graft stays loaded");
    (s, stats)
}

#[test]
fn a_thread_graft_moves_tickets_between_its_users_processes_when_its_call_commits() {
    let (s, calls) = giving(2, false);
    let (mine, theirs) = (s.process_tickets(1).unwrap(), s.process_tickets(2).unwrap());
    assert!(calls > 0 && mine < 100, "{calls} calls, {mine} tickets left");
    assert_eq!(mine + theirs, 200, "tickets moved, none made");
    assert_eq!(s.stats().tickets_given, u64::from(100 - mine));
    assert!(s.stats().tickets_given + s.stats().gifts_refused <= calls);
    // The same gifts from calls that trap afterwards: none is made.
    let (s, calls) = giving(2, true);
    assert!(calls > 0);
    assert_eq!((s.process_tickets(1), s.process_tickets(2)), (Some(100), Some(100)));
    assert_eq!(s.stats().tickets_given, 0);
    // Another user's process takes no gift: the user's share against others never moves.
    let (s, calls) = giving(3, false);
    assert!(calls > 0);
    assert_eq!((s.process_tickets(1), s.process_tickets(3)), (Some(100), Some(100)));
    assert!(s.stats().gifts_refused > 0 && s.stats().tickets_given == 0);
}

/// The hostile suite's `change_then_fail` at `sched.pick_thread`: a gift asked for by calls that
/// then trap, spin past their budget or answer out of range is never made.
#[test]
fn a_ticket_gift_is_made_only_by_calls_that_commit_however_they_fail() {
    let graft = vino_sdk::change_then_fail("sched.pick_thread").unwrap();
    for (mode, failure) in vino_sdk::CHANGE_THEN_FAIL_MODES {
        let (s, stats) = giving_from(&graft, &[("set", &[2, 1]), ("fail", &[mode])]);
        assert!(
            stats.failures > 0 && stats.failures == stats.invocations,
            "mode {mode}: {stats:?}"
        );
        assert!(stats.last_error.unwrap().contains(failure), "mode {mode}");
        assert_eq!(stats.changes, 0);
        assert_eq!((s.process_tickets(1), s.process_tickets(2)), (Some(100), Some(100)));
        assert_eq!(s.stats().tickets_given, 0, "mode {mode}");
    }
    let (s, stats) = giving_from(&graft, &[("set", &[2, 1])]);
    assert!(stats.invocations > 0 && stats.failures == 0);
    // Each committed call's gift is counted as a change when made over to the scheduler, which
    // gives it if the giver can spare it.
    assert!(stats.changes > 0 && stats.changes >= s.stats().tickets_given);
    assert!(
        s.process_tickets(1).unwrap() < 100,
        "the committed calls' gifts were made"
    );
}

/// Runs burners of process 1 (two, user 1) and process 3 (one, user 2) for 40 ms of the
/// clock, with `wasm` in shadow at `sched.pick_thread` of process 1 (`thread`) or at
/// `sched.pick_next`, set up by the owner's `controls`; returns the scheduler and the report.
fn tried(wasm: &str, thread: bool, controls: &[(&str, &[i64])]) -> (Scheduler, SchedTryReport) {
    use vino_graft::shadow::OwnerCall;
    let rt = Runtime::default();
    let (s, clock) = manual(&rt, one_worker());
    s.add_process(1, 1);
    s.add_process(2, 1);
    s.add_process(3, 2);
    let at = thread.then_some(1);
    let shadow = s.try_start(at, wasm.as_bytes(), Owner::process(2), None, 256).unwrap();
    for (name, args) in controls {
        let call = OwnerCall::Control {
            name: name.to_string(),
            args: args.to_vec(),
        };
        shadow.owner(call).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let burners = [1, 1, 3].map(|pid| burner_on(&s, pid, &stop, Some(&clock)));
    until_clock(&clock, Duration::from_millis(40));
    stop.store(true, Ordering::Relaxed);
    for (h, _) in burners {
        h.join();
    }
    let report = s.try_stop(at).expect("the shadow ran");
    assert!(s.try_handle(at).is_none());
    (s, report)
}

/// A candidate in shadow at a process's `sched.pick_thread` is asked what the live default
/// decides, and nothing it asks for is done: the tickets it gives stay where they were.
#[test]
fn a_thread_candidate_in_shadow_is_asked_and_moves_nothing() {
    let (s, r) = tried(GIVER, true, &[("set", &[2, 0])]);
    assert!(r.agreement.followed > 0, "{r:?}");
    assert_eq!(
        r.agreement.agreed, r.agreement.followed,
        "it chooses as the default does: {r:?}"
    );
    assert_eq!(r.agreement.shadow.failures, 0, "{r:?}");
    assert_eq!(r.other_user, 0, "one process's threads: {r:?}");
    assert_eq!((s.process_tickets(1), s.process_tickets(2)), (Some(100), Some(100)));
    assert_eq!(s.stats().tickets_given, 0);
}

/// At `sched.pick_next`, a candidate that would always run the newest thread is judged against
/// the live shares; one that loops or answers out of range is counted failing, and the live
/// turns are the default's throughout.
#[test]
fn a_next_candidate_is_judged_by_agreement_and_a_hostile_one_changes_no_turn() {
    let (s, r) = tried(NEWEST, false, &[]);
    assert!(
        r.agreement.followed > 0 && r.agreement.agreed <= r.agreement.followed,
        "{r:?}"
    );
    assert!(r.other_user <= r.agreement.followed - r.agreement.agreed, "{r:?}");
    assert!(r.candidate_oldest <= r.agreement.followed, "{r:?}");
    assert_eq!(s.stats().graft_picks, 0);
    for hostile in [LOOPS, NOWHERE] {
        let (s, r) = tried(hostile, false, &[]);
        assert!(
            r.agreement.shadow.failures > 0 || r.agreement.shadow.dropped.is_some(),
            "{r:?}"
        );
        assert_eq!(
            r.agreement.agreed, r.agreement.followed,
            "a failed call counts as the default's: {r:?}"
        );
        assert_eq!(s.stats().graft_picks, 0);
        let cpu = [cpu_ms(&s, 1), cpu_ms(&s, 3)];
        assert!(
            (cpu[0] / cpu[1] - 1.0).abs() < 0.3,
            "the users share evenly: {cpu:?} ms"
        );
    }
}
