//! `vino bench miss` at CI size: behaviour, not timing.

use std::path::PathBuf;

use vino_experiments::miss::{self, MissOptions};

#[test]
fn every_layer_reads_its_own_cold_blocks_in_turn() {
    let opts = MissOptions {
        quick: true,
        // Not a tmpfs: the layers want O_DIRECT.
        scratch: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("miss-quick"),
    };
    let mut log = Vec::new();
    let report = miss::run(&opts, &mut |m| log.push(m.to_string())).expect("the miss bench runs");
    assert_eq!(report.layers.len(), 10, "{log:#?}");
    assert_eq!(report.layers[0].layer, "pread, O_DIRECT");
    assert!((report.layers[0].vs_raw - 1.0).abs() < 1e-9, "raw is its own unit");
    for l in &report.layers {
        assert!(
            l.median_us > 0.0 && l.p99_us >= l.median_us,
            "{}: median {} µs, p99 {} µs",
            l.layer,
            l.median_us,
            l.p99_us
        );
    }
    // The two cache layers read through kernel processes of their own, on parts of the file
    // nobody read before: every read misses but those of a block picked twice.
    let cache: Vec<_> = report
        .layers
        .iter()
        .filter(|l| l.layer.starts_with("cache miss"))
        .collect();
    assert_eq!(cache.len(), 2, "{:#?}", report.layers);
    for l in cache {
        let missed: usize = l
            .layer
            .split("; ")
            .find_map(|part| part.strip_suffix(&format!(" of {} missed)", report.reads)))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no miss count in {:?}", l.layer));
        assert!(
            missed > report.reads * 8 / 10 && missed <= report.reads,
            "{}: {missed} of {} missed",
            l.layer,
            report.reads
        );
    }
    assert!(
        log.iter().any(|m| m.starts_with("round 0 of")),
        "progress shown: {log:#?}"
    );
}

/// A build that checks the kernel's invariants after every operation (as `cargo test` makes
/// them) says so on stderr, and one that does not stays quiet.
#[test]
fn a_checked_build_warns_that_its_times_are_not_the_kernels() {
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("miss-warn");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vino-bench-miss"))
        .args(["--quick", "--no-files", "--scratch"])
        .arg(&out_dir)
        .output()
        .expect("the bench runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warned = stderr.contains("warning: this build checks the kernel's invariants");
    assert_eq!(warned, vino_experiments::front::checked_build(), "stderr: {stderr}");
    assert_eq!(
        stderr.matches("warning:").count(),
        usize::from(warned),
        "said once: {stderr}"
    );
}
