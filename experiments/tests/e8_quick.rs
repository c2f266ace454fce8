//! E8 (lock granting, FRP vs FIFO) at a tiny size: the behaviour the experiment rests on, not its
//! timings.

use std::path::PathBuf;
use std::time::Duration;
use vino_experiments::e6_layout::{DeviceKind, MIB};
use vino_experiments::e8_locks::{self, E8Options, GrantPolicy};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e8-quick")
}

#[test]
fn e8_every_operation_runs_under_every_policy_and_fifo_grafts_never_fail() {
    let opts = E8Options {
        quick: true,
        scratch_dir: scratch(),
        file_bytes: 2 * MIB,
        ops_per_process: 6,
        compute: Duration::from_millis(2),
        write_percents: vec![10, 100],
        devices: vec![DeviceKind::Plain, DeviceKind::Model { scale: 0.1 }],
        cache_frames: 64,
        ..E8Options::new(true)
    };
    let report = e8_locks::run(&opts, &mut |m| eprintln!("{m}")).expect("E8 runs");
    assert_eq!(report.cells.len(), 2 * 2 * 3);
    for c in &report.cells {
        let what = format!("{} {} {}%", c.device.label(), c.policy.label(), c.write_percent);
        assert_eq!(c.reads + c.writes, 24, "{what}: every operation ran");
        assert!(c.misses > 0, "{what}: records come from the device");
        assert_eq!(c.policy_failures, 0, "{what}");
        if c.write_percent == 100 {
            assert_eq!(c.reads, 0, "{what}");
            assert!(
                c.blocked_percent > 0.0,
                "{what}: four writers on one byte wait for each other"
            );
            assert!(c.write_wait_ms > 0.0 && c.write_ms > c.write_wait_ms, "{what}");
        }
        match c.policy {
            GrantPolicy::Frp => assert_eq!(c.policy_calls, 0, "{what}: the default is not a binding"),
            GrantPolicy::FifoNative | GrantPolicy::FifoGraft if c.write_percent == 100 => {
                assert!(c.policy_calls > 0, "{what}: the bound policy decided")
            }
            _ => {}
        }
    }
    let text: String = report.tables().iter().map(|t| t.render()).collect();
    assert!(
        text.contains("667") && text.contains("105"),
        "the report's figures are beside ours"
    );
    eprintln!("{text}");
    report.plot(&scratch().join("e8.svg")).expect("plot");
    serde_json::to_string(&report).expect("the report serializes");
}
