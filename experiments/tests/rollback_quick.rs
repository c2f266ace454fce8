//! `vino bench rollback` at CI size: behaviour, not timing.

use vino_experiments::rollback::{self, RECORDS, RollbackOptions, WORDS};

#[test]
fn every_comparison_is_timed_on_both_sides() {
    let opts = RollbackOptions {
        rounds: 3,
        ..RollbackOptions::new(true)
    };
    let report = rollback::run(&opts, &mut |_| {}).expect("the rollback bench runs");
    assert_eq!(report.calls.len(), 1 + WORDS.len());
    assert_eq!(report.aborts.len(), RECORDS.len());
    assert_eq!(report.hot_list.len(), 4, "{:#?}", report.hot_list);
    assert_eq!(report.functions.len(), 4);
    let pairs = report
        .calls
        .iter()
        .chain(&report.aborts)
        .map(|r| &r.times)
        .chain(report.hot_list.iter().map(|r| &r.times))
        .chain(report.functions.iter().flat_map(|f| [&f.committed, &f.aborted]));
    for p in pairs {
        assert!(p.on_ns > 0.0 && p.off_ns > 0.0 && p.ratio > 0.0, "{p:?}");
    }
    assert_eq!(report.goals.len(), 3);
    assert!(
        report.instrumented.iter().any(|m| m == "hotlist.wasm"),
        "{:?}",
        report.instrumented
    );
    assert_eq!(report.tables().len(), 5);
}
