//! A quick run of the whole extension-technology study: every technology is
//! measured, answers agree, and the report renders, serializes and plots.

use std::path::PathBuf;

use vino_experiments::exttech::{ExtTechOptions, Variant, Workload, run};

#[test]
fn quick_run_fills_every_variant() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vino-bench-exttech");
    let opts = ExtTechOptions {
        quick: true,
        scratch_dir: dir.clone(),
    };
    let report = run(&opts, &mut |line| eprintln!("[exttech] {line}")).expect("quick run");

    let two_cpus = std::thread::available_parallelism()
        .map(|n| n.get() >= 2)
        .unwrap_or(false);
    for w in Workload::ALL {
        for v in Variant::ALL {
            let m = report
                .results
                .iter()
                .find(|m| m.workload == w && m.variant == v)
                .unwrap_or_else(|| panic!("{w:?}/{v:?} missing"));
            if v == Variant::ProcessSpin && !two_cpus {
                assert!(m.skipped.is_some());
                continue;
            }
            let s = m
                .stats
                .unwrap_or_else(|| panic!("{w:?}/{v:?} not measured: {:?}", m.skipped));
            assert!(s.median_ns > 0.0 && s.rounds > 0);
            assert!(m.normalized.is_some());
            assert!(m.answer.is_some());
        }
        // Every technology reported the same answer.
        let answers: Vec<&String> = report
            .results
            .iter()
            .filter(|m| m.workload == w)
            .filter_map(|m| m.answer.as_ref())
            .collect();
        assert!(answers.windows(2).all(|p| p[0] == p[1]), "{w:?}: {answers:?}");
    }
    assert_eq!(report.break_even.hotlist.len(), if two_cpus { 6 } else { 5 });
    assert!(report.break_even.fault_ns > 0.0);
    assert!(report.invocation.iter().filter(|c| c.stats.is_some()).count() >= 5);
    assert_eq!(report.load.len(), 9);
    // Native code and both Wasm variants taking turns: native is the unit, every call timed.
    let turns: Vec<_> = report.in_turn.iter().map(|t| t.variant).collect();
    assert_eq!(turns, [Variant::Native, Variant::Wasm, Variant::WasmFuel]);
    assert_eq!(report.in_turn[0].hot_vs_native, 1.0);
    assert_eq!(report.in_turn[0].nop_vs_native, 1.0);
    assert!(
        report
            .in_turn
            .iter()
            .all(|t| t.nop_ns > 0.0 && t.hot_ns > 0.0 && t.hot_vs_native > 0.0 && t.rounds >= 9),
        "{:#?}",
        report.in_turn
    );

    let tables = report.tables();
    assert!(tables.len() >= 8);
    for t in &tables {
        t.print();
    }
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["results"].as_array().unwrap().len() >= 20);
    vino_measure::report::write_json(&dir.join("exttech.json"), &report).unwrap();
    vino_measure::report::write_json(&dir.join("exttech-tables.json"), &tables).unwrap();
    let svg = dir.join("exttech.svg");
    report.plot(&svg).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    eprintln!("[exttech] report written to {}", dir.display());
}

/// The full-size study; prints the tables and leaves the JSON and SVG in the
/// target directory.  `cargo test --release -p vino-experiments --test exttech_quick -- --ignored --nocapture`
#[test]
#[ignore = "full-size run, a few minutes"]
fn full_run() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vino-bench-exttech-full");
    let opts = ExtTechOptions {
        quick: false,
        scratch_dir: dir.clone(),
    };
    let report = run(&opts, &mut |line| eprintln!("[exttech] {line}")).expect("full run");
    for t in report.tables() {
        t.print();
    }
    vino_measure::report::write_json(&dir.join("exttech.json"), &report).unwrap();
    report.plot(&dir.join("exttech.svg")).unwrap();
    eprintln!("[exttech] report written to {}", dir.display());
}
