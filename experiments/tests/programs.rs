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
            .any(|op| op["name"] == "Wasm graft + transaction (protected, as a graft that calls the kernel)")
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
    assert!(text.contains("Wasm graft as the kernel calls it"), "{text}");
    assert!(!text.contains("written:") && !out.exists(), "{text}");
}

#[test]
fn programs_runs_steps_on_both_sides_or_says_why_not() {
    let program = env!("CARGO_BIN_EXE_vino-bench-programs");
    let vino = std::path::Path::new(program).with_file_name("vino");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !vino.is_file() || !std::path::Path::new("/dev/loop-control").exists() {
        eprintln!("skipped: needs root, a loop device and the vino program next to the experiment");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = run(
        program,
        &[
            "--quick",
            "--json",
            "--out",
            path,
            "--scratch",
            path,
            "--only",
            "tar x",
            "--only",
            "dd write",
            "--only",
            "dd read (cold)",
            "--only",
            "random 4K reads, read-ahead graft (cold)",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && (stderr.contains("loop mount") || stderr.contains("mkfs.ext4")) {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert!(o.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let steps = v["steps"].as_array().expect("steps");
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "tar x",
            "dd write",
            "dd read (cold)",
            "random 4K reads, read-ahead graft (cold)"
        ]
    );
    // Both transports where Linux has FUSE over io_uring, each timed.
    let switch = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").unwrap_or_default();
    let expected: &[&str] = if switch.trim() == "Y" {
        &["io_uring", "dev_fuse"]
    } else {
        &["dev_fuse"]
    };
    for s in steps {
        assert!(
            s["vino_s"].as_f64().unwrap() > 0.0 && s["ext4_s"].as_f64().unwrap() > 0.0,
            "{s}"
        );
        let by: Vec<(&str, f64)> = s["by_transport"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["transport"].as_str().unwrap(), t["seconds"].as_f64().unwrap()))
            .collect();
        assert_eq!(by.iter().map(|t| t.0).collect::<Vec<_>>(), expected, "{s}");
        assert!(by.iter().all(|t| t.1 > 0.0), "{s}");
    }
    assert!(dir.path().join("programs.json").exists() && dir.path().join("programs.svg").exists());
}

#[test]
fn the_programs_small_tools_work_on_any_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, vec![7u8; 64 << 10]).unwrap();
    let program = env!("CARGO_BIN_EXE_vino-bench-programs");
    let o = run(program, &["randread", file.to_str().unwrap(), "100"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let o = run(program, &["randread", empty.to_str().unwrap(), "1"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("empty"));
    if Command::new("python3")
        .arg("-c")
        .arg("import sqlite3")
        .status()
        .is_ok_and(|s| s.success())
    {
        let db = dir.path().join("db");
        let o = run(program, &["sqlite", db.to_str().unwrap(), "2500"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(db.exists());
    }
}
