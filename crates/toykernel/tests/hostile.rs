//! The hostile-graft suite (see `vino_toykernel::hostile`): every case is refused or aborted
//! cleanly, the default decides, the state is restored, no lock is held, and the next graft works.

use std::time::Duration;
use vino_graft::{Runtime, RuntimeConfig};
use vino_toykernel::hostile::{self, Expect};

#[test]
fn every_hostile_graft_is_contained() {
    // A long invocation budget for the contended lock hog, so that it is the lock deadline, not
    // the budget, that stops it; the other cases use the default budget.
    let rt = Runtime::new(RuntimeConfig::default());
    let patient = Runtime::new(RuntimeConfig {
        invocation_budget: Duration::from_secs(20),
        ..RuntimeConfig::default()
    });
    let mut failed = Vec::new();
    for case in hostile::CASES {
        let runtime = if case.name.contains("contended") { &patient } else { &rt };
        let outcome = hostile::run_case(runtime, case).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if !outcome.passed() {
            failed.push(format!("{outcome:#?}"));
        }
        if let Expect::Aborts(_) = case.expect {
            assert!(outcome.failure != "(no failure recorded)", "{}", case.name);
        }
    }
    assert!(failed.is_empty(), "cases not contained:\n{}", failed.join("\n"));
    assert_eq!(rt.vlt().locked_objects(), 0);
    assert_eq!(patient.vlt().locked_objects(), 0);
}

/// A graft whose failed calls leave its list half-linked and its counter behind: with its memory
/// rolled back at each abort, the list and the counter agree and count only the calls that
/// succeeded; without, they disagree after the first abort.
#[test]
fn aborted_calls_leave_nothing_in_the_graft_s_own_memory() {
    use std::sync::Arc;
    use vino_graft::{Access, GraftSlot, Owner};
    use vino_toykernel::{ToyApply, ToyKernel};
    let wasm = hostile::build(hostile::Source::C("corrupt_then_trap")).unwrap();
    let consistent = |roll_back_memory: bool| {
        let rt = Runtime::new(RuntimeConfig {
            roll_back_memory,
            // Every other call fails: keep the graft loaded through all of them.
            max_consecutive_failures: u32::MAX,
            failure_rate_min: u32::MAX,
            ..RuntimeConfig::default()
        });
        let slot: GraftSlot<ToyApply> = GraftSlot::new(&rt, Arc::new(ToyKernel::new(1)), Access::Process(1), None);
        slot.load(&wasm, Owner::process(1)).unwrap();
        for arg in 2..42 {
            // Odd arguments trap half-way; the default (the argument) decides.
            assert_eq!(slot.invoke(&arg), arg);
        }
        assert_eq!(slot.stats().unwrap().failures, 20);
        slot.call_control("check", &[]).unwrap()
    };
    assert_eq!(
        consistent(true),
        20,
        "the list holds exactly the 20 calls that succeeded"
    );
    assert_eq!(
        consistent(false),
        -1,
        "without rollback the aborted calls corrupt the list"
    );
}
