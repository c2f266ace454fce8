//! `vino bench native` at a tiny size, one round: every program runs on every side (Node's
//! where `node` is installed) and restores the text (the experiment checks it), the ratios and
//! files are there. Timings are not checked.

use std::process::Command;

#[test]
fn real_programs_run_as_vino_processes_natively_and_on_wasmtime_wasi() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-native"))
        .args([
            "--quick",
            "--rows",
            "500",
            "--text-mib",
            "1",
            "--json",
            "--out",
            path,
            "--scratch",
            path,
        ])
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let steps = v["steps"].as_array().expect("steps");
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(
        names[..7],
        [
            "sqlite3: 500 inserts in a transaction",
            "gzip -6",
            "gunzip",
            "gzip -6 -c < text",
            "bzip2 -9",
            "bzip2 -d",
            "bzip2 -9 -c < text",
        ]
    );
    // Each compressor the SDK builds: compress, restore, compute.
    assert_eq!((names.len() - 1) % 3, 0, "{names:?}");
    let node = v["node"].is_string();
    for s in steps {
        for side in ["vino_s", "native_s", "wasmtime_s"] {
            assert!(s[side].as_f64().unwrap() > 0.0, "{s}");
        }
        assert_eq!(s["node_s"].is_f64(), node, "Node ran every step or none: {s}");
        let r = s["vino_vs_native"].as_f64().unwrap();
        assert!((r - s["vino_s"].as_f64().unwrap() / s["native_s"].as_f64().unwrap()).abs() < 1e-9);
    }
    assert!(dir.path().join("native.json").exists() && dir.path().join("native.svg").exists());
}
