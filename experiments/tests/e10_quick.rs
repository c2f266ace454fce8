//! E10 at CI size: every path is measured (or said why not), the VINO process's own numbers are
//! read back, the files are written. Timings are not checked.

use std::process::Command;

#[test]
fn e10_measures_every_path_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-syscalls"))
        .args(["--quick", "--reps", "2", "--json", "--out", path, "--scratch", path])
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let rows = v["rows"].as_array().expect("rows");
    let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
    for expected in [
        "VINO process (vino_null)",
        "VINO process (pread)",
        "client library through vinod (socket)",
        "client library through vinod (shared memory)",
        "Linux (getppid)",
        "Linux (pread, host file system)",
    ] {
        assert!(paths.contains(&expected), "{expected} missing from {paths:?}");
    }
    let fuse = paths.contains(&"FUSE mount of vinod (pread)");
    let notes = v["notes"].as_array().unwrap();
    assert!(
        fuse || notes.iter().any(|n| n.as_str().unwrap().contains("FUSE")),
        "the FUSE row, or why not: {notes:?}"
    );
    for r in rows {
        let samples = r["samples_ns"].as_array().unwrap();
        assert_eq!(samples.len(), 2, "{r}");
        assert!(samples.iter().all(|s| s.as_f64().unwrap() > 0.0), "{r}");
        let (min, med, max) = (
            r["min_ns"].as_f64().unwrap(),
            r["median_ns"].as_f64().unwrap(),
            r["max_ns"].as_f64().unwrap(),
        );
        assert!(min <= med && med <= max, "{r}");
        let vino = r["path"].as_str().unwrap().starts_with("VINO process");
        assert_eq!(r["goal_ns"].is_number(), vino, "goals are the VINO process's: {r}");
    }
    assert!(dir.path().join("syscalls.json").exists() && dir.path().join("syscalls.svg").exists());
}

#[test]
fn the_programs_output_is_read_back() {
    use vino_experiments::e10_syscalls::parse_program_output;
    assert_eq!(parse_program_output("null 41.50\npread 310.25\n"), Some((41.5, 310.25)));
    assert_eq!(parse_program_output("null 41.50\n"), None);
    assert_eq!(parse_program_output("nullish 1\npread 2\n"), None);
}
