//! `vino bench native` at a tiny size: every program runs on the three sides and restores the
//! text (the experiment checks it), the ratios and files are there. Timings are not checked.

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
        names,
        [
            "sqlite3: 500 inserts in a transaction",
            "gzip -6",
            "gunzip",
            "bzip2 -9",
            "bunzip2"
        ]
    );
    for s in steps {
        for side in ["vino_s", "native_s", "wasmtime_s"] {
            assert!(s[side].as_f64().unwrap() > 0.0, "{s}");
        }
        let r = s["vino_vs_native"].as_f64().unwrap();
        assert!((r - s["vino_s"].as_f64().unwrap() / s["native_s"].as_f64().unwrap()).abs() < 1e-9);
    }
    assert!(dir.path().join("native.json").exists() && dir.path().join("native.svg").exists());
}
