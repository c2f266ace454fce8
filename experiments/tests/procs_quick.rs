//! `vino bench procs` at CI size: every measure is taken on both sides in every round (the
//! children exited 0, the sink counted every byte), the ratios follow from the medians, the files
//! are written. Timings are not checked.

use std::process::Command;

#[test]
fn spawn_pipe_and_ping_pong_are_measured_on_vino_and_linux() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-procs"))
        .args(["--quick", "--json", "--out", path, "--scratch", path])
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let rounds = v["rounds"].as_u64().unwrap() as usize;
    assert!(rounds >= 3, "{v}");
    let rows = v["rows"].as_array().expect("rows");
    let measures: Vec<&str> = rows.iter().map(|r| r["measure"].as_str().unwrap()).collect();
    assert_eq!(
        measures,
        [
            "spawn + wait of a trivial child",
            "pipe throughput, 64 KiB writes",
            "ping-pong, one byte over two pipes",
        ]
    );
    for r in rows {
        for side in ["vino_rounds", "linux_rounds"] {
            let s = r[side].as_array().unwrap();
            assert_eq!(s.len(), rounds, "{r}");
            assert!(s.iter().all(|x| x.as_f64().unwrap() > 0.0), "{r}");
        }
        let (vino, linux) = (r["vino"].as_f64().unwrap(), r["linux"].as_f64().unwrap());
        let time = r["time_vs_linux"].as_f64().unwrap();
        let want = if r["unit"] == "GB/s" {
            linux / vino
        } else {
            vino / linux
        };
        assert!((time - want).abs() < 1e-9, "{r}");
        assert_eq!(
            r["meets_goal"],
            time <= r["goal_time_vs_linux"].as_f64().unwrap(),
            "{r}"
        );
    }
    assert!(dir.path().join("procs.json").exists() && dir.path().join("procs.svg").exists());
}

#[test]
fn the_programs_figures_are_read_back() {
    use vino_experiments::procs::parse_figure;
    assert_eq!(parse_figure("spawn_us 41.5\n", "spawn_us"), Some(41.5));
    assert_eq!(parse_figure("x 1\npipe_gbps 2.25\n", "pipe_gbps"), Some(2.25));
    assert_eq!(parse_figure("spawn_usx 1\n", "spawn_us"), None);
    assert_eq!(parse_figure("pipe_gbps inf\n", "pipe_gbps"), None);
}
