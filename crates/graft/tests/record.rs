//! Recording a graft's inputs on the live path and replaying them offline: the same answers, the
//! same failures at the same calls, a bounded recording charged to the owner, and another
//! module replayed on the same inputs.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use vino_graft::record::{Event, Recording};
use vino_graft::replay::{ReplayOptions, replay};
use vino_graft::{Access, Callables, GraftPoint, GraftSlot, Invalid, Owner, Runtime, RuntimeConfig};

/// The kernel state the test graftpoint's function reads: a value that changes on every call,
/// so that a replay can only match by being given the recorded answers.
#[derive(Default)]
struct Noise(AtomicI64);

/// `test.sum`: the arguments are pages of numbers, written into the argument area as a count
/// and the numbers; the graft returns a sum, or -1 to ask for the next page.
struct Sum;

impl GraftPoint for Sum {
    const NAME: &'static str = "test.sum";
    const CALLABLE: &'static [&'static str] = &["vino_test_noise"];
    const USES_ARG_AREA: bool = true;
    const PAGED: bool = true;
    type Env = Noise;
    type Args<'a> = (Vec<Vec<i32>>, std::cell::Cell<usize>);
    type Output = i32;
    type Params = (i32,);
    type Results = i32;

    fn default_policy(_: &Noise, _: &Self::Args<'_>) -> i32 {
        i32::MIN
    }
    fn encode(_: &Noise, (pages, at): &Self::Args<'_>, area: &mut [u8]) -> (i32,) {
        at.set(0);
        (write_page(&pages[0], area),)
    }
    fn next_page(_: &Noise, (pages, at): &Self::Args<'_>, r: &i32, area: &mut [u8]) -> Option<(i32,)> {
        if *r != -1 || at.get() + 1 >= pages.len() {
            return None;
        }
        at.set(at.get() + 1);
        Some((write_page(&pages[at.get()], area),))
    }
    fn decode(_: &Noise, _: &Self::Args<'_>, r: i32, area: &[u8]) -> Result<i32, Invalid> {
        // The graft also leaves its answer in the area's first word.
        match i32::from_le_bytes(area[..4].try_into().unwrap()) == r {
            true if r >= 0 => Ok(r),
            _ => Err(Invalid::new(format!("{r} is not a sum"))),
        }
    }
    fn callables(c: &mut Callables<Noise>) {
        c.func1("vino_test_noise", |n: &Noise, k: i32| {
            Ok(n.0.fetch_add(i64::from(k) + 1, Ordering::Relaxed) % 7)
        });
    }
}

fn write_page(page: &[i32], area: &mut [u8]) -> i32 {
    for (i, v) in page.iter().enumerate() {
        area[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    page.len() as i32
}

/// Sums its page plus the kernel's noise and a running total it keeps in memory (so replay
/// needs the image); `-1` first asks for the next page; 999 first writes then traps (the write
/// must be undone); 777 first loops forever; a control call adds to the total.
const SUM: &str = r#"(module
  (import "vino" "vino_test_noise" (func $noise (param i32) (result i64)))
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (global $calls (mut i32) (i32.const 0))
  (func (export "test_sum") (param $n i32) (result i32)
    (local $i i32) (local $acc i32) (local $first i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (local.set $first (i32.load (i32.const 1024)))
    (if (i32.eq (local.get $first) (i32.const -1)) (then (return (i32.const -1))))
    (if (i32.eq (local.get $first) (i32.const 777)) (then (loop $l (br $l))))
    (block $done (loop $l
      (br_if $done (i32.ge_s (local.get $i) (local.get $n)))
      (local.set $acc (i32.add (local.get $acc)
        (i32.load (i32.add (i32.const 1024) (i32.shl (local.get $i) (i32.const 2))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (local.set $acc (i32.add (local.get $acc) (i32.wrap_i64 (call $noise (local.get $n)))))
    (local.set $acc (i32.add (local.get $acc) (i32.load (i32.const 16))))
    (i32.store (i32.const 16) (local.get $acc))
    (if (i32.eq (local.get $first) (i32.const 999)) (then unreachable))
    (i32.store (i32.const 1024) (local.get $acc))
    (local.get $acc))
  (func (export "vino_ctl_add") (param $x i32) (result i32)
    (i32.store (i32.const 16) (i32.add (i32.load (i32.const 16)) (local.get $x)))
    (i32.load (i32.const 16))))"#;

fn slot(runtime: &Runtime) -> GraftSlot<Sum> {
    GraftSlot::new(runtime, Arc::new(Noise::default()), Access::Process(1), None)
}

fn call(slot: &GraftSlot<Sum>, pages: &[&[i32]]) -> i32 {
    slot.invoke(&(pages.iter().map(|p| p.to_vec()).collect(), std::cell::Cell::new(0)))
}

/// A mixed run: plain calls, a paged call, a trap after a write, a runaway loop, an owner's
/// write and control call, and an answer the kernel refuses.
fn workload(slot: &GraftSlot<Sum>) -> Vec<i32> {
    let mut answers = vec![
        call(slot, &[&[1, 2, 3]]),
        call(slot, &[&[-1], &[10, 20]]),
        call(slot, &[&[999, 1]]),
        call(slot, &[&[4]]),
    ];
    slot.write_memory(16, &100i32.to_le_bytes()).unwrap();
    answers.push(call(slot, &[&[777]]));
    assert_eq!(slot.call_control("add", &[5]).unwrap(), 105);
    answers.push(call(slot, &[&[-50_000]]));
    for k in 0..20 {
        answers.push(call(slot, &[&[k, k + 1]]));
    }
    answers
}

fn config() -> RuntimeConfig {
    RuntimeConfig {
        max_consecutive_failures: 100,
        failure_rate_min: 1000,
        ..RuntimeConfig::default()
    }
}

#[test]
fn a_replay_of_the_recorded_graft_gives_every_answer_and_failure_again() {
    let runtime = Runtime::new(config());
    let slot = slot(&runtime);
    slot.load(SUM.as_bytes(), Owner::process(1)).unwrap();
    // State from before the recording starts: the replay must start from it.
    call(&slot, &[&[7]]);
    slot.record_start(1 << 20).unwrap();
    let answers = workload(&slot);
    assert_eq!(answers[2], i32::MIN, "the trap gave the default");
    assert_eq!(answers[4], i32::MIN, "the runaway loop gave the default");
    let recording = slot.record_stop().unwrap();
    assert_eq!(recording.invocations, 26);
    assert!(!recording.truncated && recording.ended.is_none());
    let calls = recording
        .events
        .iter()
        .filter(|e| matches!(e, Event::Call { .. }))
        .count();
    assert!(calls >= 23, "kernel calls recorded: {calls}");

    let bytes = recording.to_bytes();
    let recording = Recording::from_bytes(&bytes).unwrap();
    let report = replay(&recording, SUM.as_bytes(), ReplayOptions::default()).unwrap();
    assert!(report.exact(), "{report:#?}");
    assert_eq!(report.invocations, 26);
    // The trap, the loop and the refused answer each failed again, the same way.
    assert_eq!(report.failed, 2);
    assert_eq!(report.failed_as_recorded, 2);
    assert_eq!(report.control_calls, 1);
    // Replays are deterministic: twice the same.
    let again = replay(
        &recording,
        SUM.as_bytes(),
        ReplayOptions {
            decisions: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(again.exact());
    let decided: Vec<i32> = again
        .decisions
        .unwrap()
        .iter()
        .map(|d| d.as_ref().map_or(i32::MIN, |r| r.results[0] as i32))
        .collect();
    // The decisions the kernel took are the replay's (a refused answer is the kernel's default).
    for (live, replayed) in answers.iter().zip(&decided) {
        if *live != i32::MIN {
            assert_eq!(live, replayed);
        }
    }
}

#[test]
fn a_replay_that_differs_from_the_recording_says_where() {
    let runtime = Runtime::new(config());
    let slot = slot(&runtime);
    slot.load(SUM.as_bytes(), Owner::process(1)).unwrap();
    slot.record_start(1 << 20).unwrap();
    workload(&slot);
    let mut recording = slot.record_stop().unwrap();
    // A kernel answer changed in the file: the replay's sums differ from the fifth call on.
    let mut seen = 0;
    for e in &mut recording.events {
        if let Event::Call {
            answer: Ok(Some(v)), ..
        } = e
        {
            seen += 1;
            if seen == 4 {
                *v += 1000;
            }
        }
    }
    let report = replay(&recording, SUM.as_bytes(), ReplayOptions::default()).unwrap();
    let d = report.divergence.clone().expect("the change is seen");
    assert!(!report.exact());
    assert!(d.invocation >= 3, "{d:?}");
}

#[test]
fn another_module_is_replayed_on_the_same_inputs() {
    let runtime = Runtime::new(config());
    let slot = slot(&runtime);
    slot.load(SUM.as_bytes(), Owner::process(1)).unwrap();
    slot.record_start(1 << 20).unwrap();
    workload(&slot);
    let recording = slot.record_stop().unwrap();
    // A candidate that answers the page's count and asks for no more.
    let other = r#"(module
      (import "vino" "vino_test_noise" (func $noise (param i32) (result i64)))
      (memory (export "memory") 1)
      (global (export "vino_args") i32 (i32.const 2048))
      (func (export "test_sum") (param $n i32) (result i32) (local.get $n)))"#;
    let report = replay(
        &recording,
        other.as_bytes(),
        ReplayOptions {
            decisions: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!report.same_module);
    assert_eq!(report.invocations, 26);
    assert!(report.divergence.is_none());
    let decisions: Vec<Option<Vec<i64>>> = report
        .decisions
        .unwrap()
        .into_iter()
        .map(|d| d.map(|d| d.results))
        .collect();
    assert_eq!(decisions[0], Some(vec![3]), "three numbers in the first page");
    assert_eq!(decisions[1], Some(vec![1]), "it did not ask for the second page");
    assert!(report.matched < report.invocations);
}

#[test]
fn a_recording_is_bounded_and_charged_to_the_owner() {
    let runtime = Runtime::new(config());
    let slot = slot(&runtime);
    let account = vino_graft::account::Account::standalone("owner", vino_graft::account::Table::UNLIMITED);
    let owner = Owner {
        account: Some(account.clone()),
        ..Owner::process(1)
    };
    slot.load(SUM.as_bytes(), owner).unwrap();
    let before = account.used(vino_graft::account::Resource::GraftMemory);
    slot.record_start(2000).unwrap();
    call(&slot, &[&[1]]);
    assert!(
        account.used(vino_graft::account::Resource::GraftMemory) > before,
        "charged as it grows"
    );
    for k in 0..500 {
        call(&slot, &[&[k]]);
    }
    let recording = slot.record_stop().unwrap();
    assert!(recording.truncated);
    assert!(
        recording.to_bytes().len() < 2000 + 64 * 1024,
        "the events stay under the limit"
    );
    assert_eq!(
        account.used(vino_graft::account::Resource::GraftMemory),
        before,
        "refunded"
    );
    // What was kept replays exactly, up to where it stopped.
    let report = replay(&recording, SUM.as_bytes(), ReplayOptions::default()).unwrap();
    assert!(report.exact() && report.truncated, "{report:#?}");
    assert_eq!(report.invocations, recording.invocations);
}

#[test]
fn the_recording_of_a_graft_unloaded_for_failing_is_kept() {
    let runtime = Runtime::new(RuntimeConfig {
        max_consecutive_failures: 3,
        ..RuntimeConfig::default()
    });
    let slot = slot(&runtime);
    let account = vino_graft::account::Account::standalone("owner", vino_graft::account::Table::UNLIMITED);
    let owner = Owner {
        account: Some(account.clone()),
        ..Owner::process(1)
    };
    slot.load(SUM.as_bytes(), owner).unwrap();
    slot.record_start(1 << 20).unwrap();
    call(&slot, &[&[1]]);
    for _ in 0..3 {
        call(&slot, &[&[999]]);
    }
    assert_eq!(slot.policy_kind(), vino_graft::PolicyKind::Default, "unloaded");
    // The graft is gone, its recording not yet taken: that stays charged to the owner.
    let memory = vino_graft::account::Resource::GraftMemory;
    assert!(account.used(memory) > 0, "the kept recording is charged");
    let recording = slot.record_stop().unwrap();
    assert_eq!(account.used(memory), 0, "refunded once taken");
    assert!(
        recording.ended.as_deref().unwrap().contains("failing"),
        "{:?}",
        recording.ended
    );
    assert_eq!(recording.invocations, 4);
    // The failure is a test case: replayed, it traps at the same calls.
    let report = replay(&recording, SUM.as_bytes(), ReplayOptions::default()).unwrap();
    assert!(report.exact(), "{report:#?}");
    assert_eq!(report.failed_as_recorded, 3);
    assert!(slot.record_stop().is_err(), "taken once");
}
