//! E5 (unlink events against polling) at a tiny size: the behaviour the experiment rests on,
//! not its timings.

use std::path::PathBuf;
use vino_experiments::e5_events::{self, E5Options};

#[test]
fn e5_runs_and_every_variant_writes_one_record_per_event() {
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e5-quick");
    let opts = E5Options {
        scratch_dir: scratch.clone(),
        rounds: 3,
        async_events: 20,
        sync_events: 3,
        ..E5Options::new(true)
    };
    let report = e5_events::run(&opts, &mut |m| eprintln!("{m}")).expect("E5 runs");
    assert_eq!(
        report.filter.len(),
        1 + opts.filter_sizes.len(),
        "no handler, then each filter size"
    );
    assert_eq!(report.filter[0].files, 0);
    assert_eq!(report.poll.len(), 3);
    for g in [&report.async_graft, &report.sync_graft] {
        assert!(g.records_ok, "sync {}: one record per invocation in every log", g.sync);
        assert!(g.protected.median_ns > 0.0 && g.user_events.median_ns > 0.0);
    }
    for rows in [&report.break_even, &report.break_even_async, &report.break_even_sync] {
        assert_eq!(rows.iter().map(|b| b.files).collect::<Vec<_>>(), [1, 10, 50]);
        assert!(rows.iter().all(|b| b.ratio.is_finite() && b.ratio > 0.0));
    }
    let text: String = report.tables().iter().map(|t| t.render()).collect();
    assert!(
        text.contains("9.6 µs") && text.contains("6998"),
        "the thesis' figures are beside ours"
    );
    eprintln!("{text}");
    report.plot(&scratch.join("e5.svg")).expect("plot");
    report.write_json(&scratch.join("e5.json")).expect("json");
}
