//! `vino bench vm-latency` at its smallest: it runs, the victim measured both kinds of fault
//! in every case, and the neighbours were held in: no memory held more frames than its limit
//! (and the fault's own cluster), the looping graft failed and was ended, every neighbour was
//! killed once the victim was done. Timings are not checked.

use std::process::Command;

/// Frames a memory may hold past its limit for a moment: the pages one fault brings (a
/// fault-around of 32, or a swap-in's 32) before its evictions run.
const OVERSHOOT: u64 = 64;

#[test]
fn the_victim_is_measured_and_the_neighbours_are_held_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-vmlat"))
        .args(["--quick", "--json", "--out", path, "--scratch", path])
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let rows = v["rows"].as_array().expect("rows");
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["alone", "hog", "fault-around-max", "fault-around-loops"], "{v}");
    let limit = v["resident_limit_pages"].as_u64().unwrap();
    let paged = v["paged"] == true;
    for r in rows {
        for l in r["latency_rounds"].as_array().unwrap() {
            for k in ["first_p50_ns", "first_p99_ns", "swap_p50_ns", "swap_p99_ns"] {
                assert!(l[k].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{k}: {r}");
            }
            assert_eq!(l["first_n"], v["victim_pages"], "{r}");
        }
        for c in r["containment_rounds"].as_array().unwrap() {
            if r["key"] == "alone" {
                assert_eq!(c["exit"], "none", "{r}");
                continue;
            }
            assert_eq!(c["exit"], "Killed", "the neighbour ran until killed: {r}");
            if paged {
                let held = c["max_resident_pages"].as_u64().unwrap();
                assert!(
                    held > 0 && held <= limit + OVERSHOOT,
                    "{held} frames, limit {limit}: {r}"
                );
                assert!(c["swap_outs"].as_u64().unwrap() > 0, "the neighbour swapped: {r}");
            }
        }
    }
    if paged {
        let looping = &rows[3]["containment_rounds"][0];
        assert!(looping["graft_failures"].as_u64().unwrap() > 0, "{looping}");
        assert_eq!(
            looping["graft_unloaded"], true,
            "the looping graft was ended: {looping}"
        );
    }
    assert!(dir.path().join("vm-latency.json").exists() && dir.path().join("vm-latency.svg").exists());
}
