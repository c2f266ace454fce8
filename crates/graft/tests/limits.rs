//! The runtime's limits on what a graft's owner can make the kernel spend: modules refused
//! before compiling, compiles that wait their turn and are dropped when unwanted, memory and
//! grafts charged to the owner's account, budgets measured in work, and a busy instance that
//! never makes the kernel wait. Where a budget is time, it is a manual clock's: the test moves
//! it past the budget. One check keeps the machine's clock, where real time is the point.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vino_clock::{ManualClock, SharedClock};
use vino_graft::account::{Account, Resource, Table};
use vino_graft::undo_log::LOG_INITIAL_PAGES;
use vino_graft::vlt::{Vlt, VltConfig};
use vino_graft::{
    Access, DEFAULT_BUDGET, GraftPoint, GraftSlot, Interrupt, Invalid, LoadError, ModuleLimits, Owner, Runtime,
    RuntimeConfig,
};

/// `test.step(i64) -> i64`: returns its argument plus what the graft adds; its calls' budget
/// is `BUDGET_US` microseconds.
struct StepWith<const BUDGET_US: u64>;

/// [`StepWith`] with the default budget.
type Step = StepWith<{ DEFAULT_BUDGET.as_micros() as u64 }>;
/// [`StepWith`] with the runtime's whole invocation budget (10 ms), for calls that write a lot.
type LongStep = StepWith<10_000>;

impl<const BUDGET_US: u64> GraftPoint for StepWith<BUDGET_US> {
    const NAME: &'static str = "test.step";
    const BUDGET: Duration = Duration::from_micros(BUDGET_US);
    type Env = ();
    type Args<'a> = i64;
    type Output = i64;
    type Params = (i64,);
    type Results = i64;

    fn default_policy(_: &(), n: &i64) -> i64 {
        -*n
    }
    fn encode(_: &(), n: &i64, _: &mut [u8]) -> (i64,) {
        (*n,)
    }
    fn decode(_: &(), _: &i64, r: i64, _: &[u8]) -> Result<i64, Invalid> {
        Ok(r)
    }
}

const ADD_ONE: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "test_step") (param i64) (result i64) (i64.add (local.get 0) (i64.const 1)))
  (func (export "vino_ctl_spin") (result i32) (loop (br 0)) (i32.const 0)))"#;

fn slot(rt: &Runtime) -> GraftSlot<Step> {
    GraftSlot::new(rt, Arc::new(()), Access::Process(1), None)
}

fn owned_by(account: &Arc<Account>) -> Owner {
    Owner {
        account: Some(account.clone()),
        ..Owner::process(1)
    }
}

/// A module of `n` functions, each `(func)`.
fn many_functions(n: usize) -> Vec<u8> {
    let mut wat = String::from("(module");
    for _ in 0..n {
        wat.push_str(" (func)");
    }
    wat.push(')');
    wat::parse_str(&wat).unwrap()
}

/// A module with one body of `depth` nested blocks.
fn deep_blocks(depth: usize) -> Vec<u8> {
    let wat = format!("(module (func {} {}))", "(block ".repeat(depth), ")".repeat(depth));
    wat::parse_str(&wat).unwrap()
}

/// Fuel counts `memory.fill` as one unit however many bytes it writes: a graft looping over
/// it would run for minutes on a 10 ms budget. Grafts may not use the bulk instructions;
/// programs, which the scheduler stops by time, may.
#[test]
fn grafts_may_not_use_instructions_whose_cost_fuel_does_not_count() {
    let rt = Runtime::new(RuntimeConfig::default());
    let s = slot(&rt);
    let fill = r#"(module
      (memory (export "memory") 256)
      (func (export "test_step") (param i64) (result i64)
        (loop $again
          (memory.fill (i32.const 0) (i32.const 0) (i32.const 16777216))
          (br $again))
        (local.get 0)))"#;
    let copy = r#"(module
      (memory (export "memory") 1)
      (func (export "test_step") (param i64) (result i64)
        (memory.copy (i32.const 0) (i32.const 8) (i32.const 8))
        (local.get 0)))"#;
    for (what, wat) in [("memory.fill", fill), ("memory.copy", copy)] {
        match s.load(wat.as_bytes(), Owner::process(1)) {
            Err(e @ LoadError::Unmetered(_)) => assert!(e.to_string().contains(what), "{e}"),
            other => panic!("{what}: {:?}", other.map(|i| i.hash)),
        }
        let binary = wat::parse_str(wat).unwrap();
        vino_graft::precheck(&binary, &ModuleLimits::program(1 << 20)).unwrap();
    }
}

#[test]
fn costly_modules_are_refused_before_compiling() {
    let rt = Runtime::new(RuntimeConfig::default());
    let limits = ModuleLimits::default();
    let s = slot(&rt);
    let started = Instant::now();
    for (what, wasm) in [
        ("functions", many_functions(limits.max_functions as usize + 1)),
        ("nest", deep_blocks(limits.max_nesting as usize + 1)),
        ("bytes", vec![0u8; limits.max_bytes + 1]),
    ] {
        match s.load(&wasm, Owner::process(1)) {
            Err(LoadError::TooLarge(why)) => assert!(why.contains(what), "{what}: {why}"),
            other => panic!("{what}: {:?}", other.map(|i| i.hash)),
        }
    }
    // Refused by reading, not by compiling: far quicker than any compile of such modules (on
    // the machine's clock, where the speed is the point; a wide margin for a loaded machine).
    assert!(started.elapsed() < Duration::from_secs(10));
    // Within the limits, the same shapes load (the limits leave room for real grafts).
    let mut fine = String::from("(module");
    fine.push_str(&" (func)".repeat(1000));
    fine.push_str(&format!(" (func {} {})", "(block ".repeat(200), ")".repeat(200)));
    fine.push_str(r#" (func (export "test_step") (param i64) (result i64) (local.get 0)))"#);
    s.load(fine.as_bytes(), Owner::process(1)).unwrap();
}

#[test]
fn a_compile_waits_its_turn_and_is_dropped_when_its_owner_goes() {
    let rt = Runtime::new(RuntimeConfig {
        compile_threads: 1,
        compile_queue: 1,
        ..RuntimeConfig::default()
    });
    // Hold the only turn with a compile that takes a while.
    let big = many_functions(4000);
    let rt2 = rt.clone();
    let busy = std::thread::spawn(move || rt2.compile(&big).map(|_| ()));
    std::thread::sleep(Duration::from_millis(20));
    let gone = Arc::new(AtomicBool::new(false));
    let flag = gone.clone();
    let rt3 = rt.clone();
    let waiting = std::thread::spawn(move || {
        let m = many_functions(3);
        rt3.compile_while(&m, &|| !flag.load(Ordering::Relaxed)).map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(5));
    gone.store(true, Ordering::Relaxed);
    let waited = waiting.join().unwrap();
    let first = busy.join().unwrap();
    assert!(first.is_ok());
    // The waiter either saw its owner gone while it waited, or the first compile was already
    // done and it never waited: both are right; a compile never runs for an owner known gone.
    if let Err(e) = waited {
        assert_eq!(e, LoadError::Cancelled);
    }
    let never = rt.compile_while(&many_functions(5), &|| false);
    assert_eq!(never.err(), Some(LoadError::Cancelled));
}

#[test]
fn grafts_and_their_memory_are_charged_to_the_owner_and_refunded() {
    let rt = Runtime::new(RuntimeConfig::default());
    // Each graft's memory is charged with its undo log's.
    let log = LOG_INITIAL_PAGES << 16;
    let limits = Table::UNLIMITED
        .with(Resource::Grafts, 2)
        .with(Resource::GraftMemory, (3 << 16) + 2 * log);
    let account = Account::standalone("uid 1000", limits);
    let slots: Vec<_> = (0..3).map(|_| slot(&rt)).collect();
    slots[0].load(ADD_ONE.as_bytes(), owned_by(&account)).unwrap();
    assert_eq!(account.used(Resource::Grafts), 1);
    assert_eq!(account.used(Resource::GraftMemory), (1 << 16) + log);
    assert!(account.used(Resource::GraftCode) > 0);
    slots[1].load(ADD_ONE.as_bytes(), owned_by(&account)).unwrap();
    match slots[2].load(ADD_ONE.as_bytes(), owned_by(&account)) {
        Err(LoadError::Limit(e)) => assert_eq!((e.resource, e.errno()), (Resource::Grafts, 122)),
        other => panic!("{:?}", other.map(|i| i.hash)),
    }
    // Memory: a module asking for more than is left is refused at instantiation.
    slots[1].unload();
    let hungry = r#"(module (memory (export "memory") 3)
      (func (export "test_step") (param i64) (result i64) (local.get 0)))"#;
    match slots[2].load(hungry.as_bytes(), owned_by(&account)) {
        Err(LoadError::Limit(e)) => assert_eq!(e.resource, Resource::GraftMemory),
        other => panic!("{:?}", other.map(|i| i.hash)),
    }
    // Everything comes back when the grafts go.
    slots[0].unload();
    assert_eq!(account.used(Resource::Grafts), 0);
    assert_eq!(account.used(Resource::GraftMemory), 0);
    assert_eq!(account.used(Resource::GraftCode), 0);
}

#[test]
fn growing_memory_past_the_account_fails_the_call_not_the_kernel() {
    let rt = Runtime::new(RuntimeConfig::default());
    let log = LOG_INITIAL_PAGES << 16;
    let account = Account::standalone(
        "uid 1000",
        Table::UNLIMITED.with(Resource::GraftMemory, (2 << 16) + log),
    );
    let s = slot(&rt);
    let grows = r#"(module (memory (export "memory") 1)
      (func (export "test_step") (param i64) (result i64)
        (drop (memory.grow (i32.const 4))) (local.get 0)))"#;
    s.load(grows.as_bytes(), owned_by(&account)).unwrap();
    assert_eq!(s.invoke(&7), -7, "the default decided");
    assert!(s.stats().unwrap().last_error.unwrap().contains("graft memory"));
    assert_eq!(account.used(Resource::GraftMemory), (1 << 16) + log);
}

#[test]
fn a_budget_is_work_so_the_same_graft_stops_at_the_same_place() {
    // The graft counts loop turns in its memory until its budget stops it.
    let counter = r#"(module (memory (export "memory") 1)
      (func (export "test_step") (param i64) (result i64)
        (i64.store (i32.const 0) (i64.const 0))
        (loop (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1))) (br 0))
        (local.get 0)))"#;
    // The count stays in memory only if the failed call's writes are not rolled back.
    let rt = Runtime::new(RuntimeConfig {
        roll_back_memory: false,
        ..RuntimeConfig::default()
    });
    let mut turns = Vec::new();
    for _ in 0..3 {
        let s = slot(&rt);
        s.load(counter.as_bytes(), Owner::process(1)).unwrap();
        assert_eq!(s.invoke(&1), -1);
        let bytes = s.read_memory(0, 8).unwrap();
        turns.push(u64::from_le_bytes(bytes.try_into().unwrap()));
    }
    assert!(turns[0] > 1000, "{turns:?}");
    assert!(turns.iter().all(|&t| t == turns[0]), "{turns:?}");
}

#[test]
fn a_busy_instance_makes_the_kernel_take_the_default_at_once() {
    // Budgets in time, on a manual clock: the owner's spin cannot end until the test moves it.
    let clock = Arc::new(ManualClock::new(Duration::ZERO));
    let vlt = Vlt::with_clock(VltConfig::default(), SharedClock::new(clock.clone()));
    let config = RuntimeConfig {
        interrupt: Interrupt::Epoch,
        control_budget: Duration::from_millis(20),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::with_vlt(config, vlt);
    let s = Arc::new(slot(&rt));
    s.load(ADD_ONE.as_bytes(), Owner::process(1)).unwrap();
    assert_eq!(s.invoke(&1), 2);
    // The owner spins in a control call (until its budget); meanwhile kernel calls go on.
    let owner = s.clone();
    let spinning = std::thread::spawn(move || owner.call_control("spin", &[]));
    let started = Instant::now();
    while s.invoke(&5) != -5 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the owner never started spinning"
        );
        std::thread::yield_now();
    }
    // Every call while the owner spins takes the default: none waited for the owner, which
    // spins until the clock moves.
    for _ in 0..100 {
        assert_eq!(s.invoke(&5), -5, "the default decided");
    }
    assert!(!spinning.is_finished());
    clock.advance(Duration::from_millis(40));
    assert!(spinning.join().unwrap().is_err());
    let stats = s.stats().unwrap();
    assert_eq!(stats.busy, 101);
    assert_eq!(s.invoke(&1), 2, "the graft decides again once free");
}

/// A call that writes more than its undo log may grow to (the memory cap bounds the log as it
/// bounds the memory) fails and is rolled back; the log's pages are charged to the owner while
/// the graft is loaded and given back with it.
#[test]
fn a_call_whose_undo_log_outgrows_the_cap_fails_and_is_rolled_back() {
    let rt = Runtime::new(RuntimeConfig {
        memory_cap: 1 << 20,
        ..RuntimeConfig::default()
    });
    let account = Account::standalone("uid 1000", Table::UNLIMITED);
    let s: GraftSlot<LongStep> = GraftSlot::new(&rt, Arc::new(()), Access::Process(1), None);
    // Stores its argument into n words (n = the argument), one after another.
    let writer = r#"(module (memory (export "memory") 16)
      (func (export "test_step") (param $n i64) (result i64) (local $i i32)
        (block $done (loop $next
          (br_if $done (i64.ge_u (i64.extend_i32_u (local.get $i)) (local.get $n)))
          (i64.store (i32.shl (i32.and (local.get $i) (i32.const 0x1ffff)) (i32.const 3)) (local.get $n))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next)))
        (local.get $n)))"#;
    s.load(writer.as_bytes(), owned_by(&account)).unwrap();
    // 1000 words: a log of 24 KB, within its first page.
    assert_eq!(s.invoke(&1000), 1000, "{:?}", s.stats());
    let first = s.read_memory(0, 8).unwrap();
    // 100,000 words: 2.4 MB of log, past the 1 MiB cap.
    assert_eq!(s.invoke(&100_000), -100_000, "the default decided");
    let stats = s.stats().unwrap();
    assert!(
        stats.last_error.unwrap().contains("undo log"),
        "the failure names the log"
    );
    assert_eq!(
        s.read_memory(0, 8).unwrap(),
        first,
        "the failed call's writes are undone"
    );
    assert!(
        account.used(Resource::GraftMemory) > (16 << 16),
        "the grown log is charged"
    );
    s.unload();
    assert_eq!(account.used(Resource::GraftMemory), 0);
}

/// `test.echo(i32) -> i32` through the argument area: the kernel writes its argument at the
/// area's start, the graft answers in the area's next four bytes.
struct Echo;

impl GraftPoint for Echo {
    const NAME: &'static str = "test.echo";
    const USES_ARG_AREA: bool = true;
    type Env = ();
    type Args<'a> = i32;
    type Output = i32;
    type Params = (i32,);
    type Results = i32;

    fn default_policy(_: &(), _: &i32) -> i32 {
        -1
    }
    fn encode(_: &(), n: &i32, area: &mut [u8]) -> (i32,) {
        area[..4].copy_from_slice(&n.to_le_bytes());
        (0,)
    }
    fn decode(_: &(), _: &i32, _: i32, area: &[u8]) -> Result<i32, Invalid> {
        Ok(i32::from_le_bytes(area[4..8].try_into().expect("four bytes")))
    }
}

#[test]
fn the_argument_area_stays_put_while_a_graft_grows_its_memory() {
    // The kernel keeps the area's address from instantiation on: growing the memory call after
    // call (64 MiB in all) must never move it, or the kernel would write where the graft no
    // longer reads.
    let rt = Runtime::new(RuntimeConfig {
        memory_cap: 128 << 20,
        ..RuntimeConfig::default()
    });
    let s: GraftSlot<Echo> = GraftSlot::new(&rt, Arc::new(()), Access::Process(1), None);
    let grows = r#"(module (memory (export "memory") 1)
      (global (export "vino_args") i32 (i32.const 4096))
      (func (export "test_echo") (param i32) (result i32)
        (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1)) (then unreachable))
        (i32.store (i32.const 4100) (i32.mul (i32.load (i32.const 4096)) (i32.const 3)))
        (i32.const 0)))"#;
    s.load(grows.as_bytes(), Owner::process(1)).unwrap();
    for n in 0..64 {
        assert_eq!(s.try_invoke(&n), Ok(3 * n), "call {n}");
    }
}
