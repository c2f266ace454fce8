//! The experiment programs as a user runs them (`vino bench <name>` runs the same programs).

use std::process::{Command, Output};

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().expect("the program runs")
}

#[test]
fn core_costs_json_is_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        env!("CARGO_BIN_EXE_vino-bench-core"),
        &[
            "--quick",
            "--part",
            "costs",
            "--json",
            "--out",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let ops = v["costs"]["ops"].as_array().expect("ops");
    assert!(
        ops.iter()
            .any(|op| op["name"] == "Wasm graft + transaction (protected)")
    );
    assert!(dir.path().join("core.json").exists() && dir.path().join("core-costs.svg").exists());
}

#[test]
fn soak_runs_client_programs_against_one_daemon_and_finds_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().to_str().unwrap();
    let o = run(
        env!("CARGO_BIN_EXE_vino-bench-soak"),
        &["--clients", "6", "--secs", "2", "--json", "--scratch", scratch],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["clients"], 6);
    assert!(report["records"].as_u64().unwrap() > 0, "{report}");
    assert!(report["graft_invocations"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}

#[test]
fn no_files_prints_the_tables_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let o = run(
        env!("CARGO_BIN_EXE_vino-bench-core"),
        &[
            "--quick",
            "--part",
            "costs",
            "--no-files",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Wasm graft + transaction (protected)"), "{text}");
    assert!(!text.contains("written:") && !out.exists(), "{text}");
}
