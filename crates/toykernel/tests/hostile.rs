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
