//! `vino bench vm` at CI size: every Linux row that ran has a positive, finite ns per page in
//! every round and its ratio to the userfaultfd floor; the swap-in either ran or says why not;
//! no swap file or cgroup is left behind; vm.c builds for wasm32-wasi too. Timings are not
//! checked.

use std::process::Command;

#[test]
fn the_linux_fault_costs_are_measured_and_the_swap_is_undone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-vm"))
        .args(["--quick", "--json", "--out", path, "--scratch", path])
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let rounds = v["rounds"].as_u64().unwrap() as usize;
    assert_eq!(rounds, 2, "{v}");
    assert!(v["vino_side"].is_null(), "{v}");
    let linux = &v["linux"];
    let rows = linux["rows"].as_array().expect("rows");
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    let skipped: Vec<&str> = linux["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    for key in ["first-touch", "uffd", "uffd-one-cpu", "mapped-cold", "mapped-hot"] {
        assert!(keys.contains(&key), "{key} missing: {v}");
    }
    assert!(
        keys.contains(&"swap-in") != skipped.contains(&"swap-in"),
        "swap-in neither ran nor was skipped: {v}"
    );
    let floor = rows.iter().find(|r| r["key"] == "uffd").unwrap()["ns_per_page"]
        .as_f64()
        .unwrap();
    for r in rows {
        let ns = r["ns_per_page"].as_f64().unwrap();
        assert!(ns.is_finite() && ns > 0.0, "{r}");
        let each = r["ns_per_page_rounds"].as_array().unwrap();
        assert_eq!(each.len(), rounds, "{r}");
        assert!(
            each.iter()
                .all(|x| x.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)),
            "{r}"
        );
        assert!((r["vs_uffd_floor"].as_f64().unwrap() - ns / floor).abs() < 1e-9, "{r}");
        assert!(r["pages"].as_u64().unwrap() > 0, "{r}");
    }
    if let Some(swap) = rows.iter().find(|r| r["key"] == "swap-in") {
        assert!(
            swap["major_faults"].as_f64().unwrap() > 0.0,
            "no page came back from swap: {swap}"
        );
    }
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    assert!(!swaps.contains(path), "the swap file is still on: {swaps}");
    assert!(dir.path().join("vm.json").exists() && dir.path().join("vm.svg").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "vm.json" && n != "vm.svg")
        .collect();
    assert!(left.is_empty(), "left in the scratch directory: {left:?}");
}

#[test]
fn the_programs_figures_are_read_back() {
    use vino_experiments::vm::parse_figures;
    let f = parse_figures("noise\nns_per_page=123.4 pages=16 minflt=18 majflt=0 resident_before=3\n");
    assert_eq!(f["ns_per_page"], 123.4);
    assert_eq!(f["pages"], 16.0);
    assert_eq!(f["majflt"], 0.0);
    assert_eq!(f["resident_before"], 3.0);
    assert!(parse_figures("pages=16\n").is_empty());
    assert!(!parse_figures("ns_per_page=inf pages=1\n").contains_key("ns_per_page"));
}

#[test]
fn vm_c_builds_for_wasm32_wasi() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = vino_experiments::vm::build_wasm(dir.path()).expect("vm.c builds with the SDK");
    assert!(wasm.starts_with(b"\0asm"));
}
