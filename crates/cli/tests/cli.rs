//! The `vino` command as a user runs it: exit codes, quiet success, errors on stderr.

use std::path::Path;
use std::process::{Command, Output};

fn vino(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(args)
        .output()
        .expect("vino runs")
}

fn sdk(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../sdk")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn graft_build_is_quiet_and_writes_a_module_that_checks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hot.wasm");
    let o = vino(&[
        "graft",
        "build",
        &sdk("grafts/hotlist_evict.c"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"\0asm");
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "lock.grant"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("lock_grant") && err.contains("(i32, i32) -> i64"), "{err}");
}

#[test]
fn graft_check_knows_every_graftpoint_of_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("unlink_log.wasm");
    let o = vino(&[
        "graft",
        "build",
        &sdk("grafts/unlink_log.c"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "event.fs.unlink"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Its file writes are allowed at event graftpoints only.
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("vino.vino_file_write"));
    // The toy kernel's functions are the toy's: the kernel's graftpoints refuse them.
    let toy = dir.path().join("toy_get.wat");
    std::fs::write(
        &toy,
        r#"(module (import "vino" "vino_toy_get" (func (param i32) (result i64)))
            (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
            (func (export "vas_pick_victim") (param i32) (result i32) i32.const 0))"#,
    )
    .unwrap();
    let o = vino(&["graft", "check", toy.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("vino.vino_toy_get") && err.contains("does not allow"),
        "{err}"
    );
    // So are the toy's graftpoints.
    let o = vino(&["graft", "check", toy.to_str().unwrap(), "--point", "toy.pick_victim"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown graftpoint `toy.pick_victim`"), "{err}");
}

#[test]
fn graft_points_lists_the_registry() {
    let o = vino(&["graft", "points"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for line in [
        "vas.pick_victim",
        "vas_pick_victim(i32) -> i32",
        "vino_file_write",
        "10 ms",
    ] {
        assert!(out.contains(line), "{out}");
    }
    let o = vino(&["graft", "points", "--json"]);
    let points: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = points
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 11);
    assert!(names.contains(&"event.fs.modify") && names.contains(&"disk.pick_request"));
    assert_eq!(points[0]["signature"], "(i32) -> i32");
    assert_eq!(points[0]["budget_ns"], 10_000_000);
    let o = vino(&["graft", "points", "--markdown"]);
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/graft-abi.md")).unwrap();
    assert!(
        doc.contains(&*String::from_utf8_lossy(&o.stdout)),
        "the ABI doc holds the table"
    );
}

#[test]
fn graft_build_reports_compile_errors_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("broken.c");
    std::fs::write(&src, "int toy_apply(long long x) { return x +; }\n").unwrap();
    let o = vino(&["graft", "build", src.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("vino: ") && err.contains("error"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn graft_check_refuses_forbidden_imports_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let o = vino(&[
        "graft",
        "check",
        &sdk("hostile/forbidden_import_env.wat"),
        "--point",
        "vas.pick_victim",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not allow"));
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0garbage").unwrap();
    let o = vino(&["graft", "check", junk.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a valid WebAssembly module"));
    let o = vino(&["graft", "check", junk.to_str().unwrap(), "--point", "no.such"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown graftpoint `no.such`")
            && err.contains("vas.pick_victim")
            && err.contains("event.fs.unlink"),
        "lists the known ones: {err}"
    );
    let o = vino(&["graft", "check", "/nonexistent.wasm", "--point", "vas.pick_victim"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.wasm"));
}

#[test]
fn demo_runs_and_contains_every_hostile_graft() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("demo.img");
    let o = vino(&["demo", "--no-bench", "--image", image.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Hostile grafts") && out.contains("evict page 102"),
        "{out}"
    );
    assert!(out.contains("fsck after unmount: clean"), "{out}");
    assert!(
        !out.contains("FAILED") && !out.contains("LEAKED") && !out.contains("CHANGED"),
        "{out}"
    );
}

#[test]
fn bench_core_costs_json_is_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    let o = vino(&[
        "bench",
        "core",
        "--quick",
        "--part",
        "costs",
        "--json",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
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
fn bench_soak_runs_client_programs_against_one_daemon_and_finds_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().to_str().unwrap();
    let o = vino(&[
        "bench",
        "soak",
        "--clients",
        "6",
        "--secs",
        "2",
        "--json",
        "--scratch",
        scratch,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["clients"], 6);
    assert!(report["records"].as_u64().unwrap() > 0, "{report}");
    assert!(report["graft_invocations"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}
