//! `vino bench isolation` at its quick size with the lock attack and its control (ones that leave a
//! victim of the same uid room to run, for runs that are not root): the phases run and the table has
//! its rows (no timings asserted).

use std::process::Command;

#[test]
fn isolation_quick_runs_alone_and_the_lock_attack_with_its_control_and_reports_every_victim_op() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = dir.path().join("results");
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-isolation"))
        .args([
            "--quick",
            "--attacks",
            "lock-grant-spin,lock-contend",
            "--json",
            "--out",
        ])
        .arg(&out)
        .arg("--scratch")
        .arg(dir.path())
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let phases: Vec<&str> = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "alone",
            "alone, one core",
            "lock-grant-spin",
            "alone before lock-contend",
            "lock-contend",
            "alone, after"
        ],
        "{report}"
    );
    let rows = report["rows"].as_array().unwrap();
    // An alone phase before a later attack is that attack's baseline, not a row of its own.
    for phase in phases.iter().filter(|p| !p.starts_with("alone before")) {
        let ops: Vec<&str> = rows
            .iter()
            .filter(|r| r["phase"] == *phase)
            .map(|r| r["op"].as_str().unwrap())
            .collect();
        assert_eq!(ops, vino_experiments::isolation::VICTIM_OPS, "{phase}: {report}");
    }
    for r in rows {
        assert!(r["samples"].as_u64().unwrap() > 0, "the victim measured every op: {r}");
        assert_eq!(
            r["pass"].is_null(),
            r["phase"].as_str().unwrap().starts_with("alone"),
            "{r}"
        );
    }
    // What the attack got is reported whatever it was (held connections, or a refusal).
    let attack = &report["phases"][2];
    assert!(!attack["note"].as_str().unwrap().is_empty(), "{attack}");
    assert!(report["phases"][0]["rss_mib"].as_f64().unwrap() > 0.0);
    // With separate users, each phase says where the CPU went: the victim worked in every
    // phase (its own process and the daemon for it); only an attacked phase has an attacker.
    if report["separate_users"] == true {
        for p in report["phases"].as_array().unwrap() {
            let cpu = &p["cpu"];
            let (victim, attacker) = (
                cpu["victim_client"].as_f64().unwrap() + cpu["victim_daemon"].as_f64().unwrap(),
                cpu["attacker_client"].as_f64().unwrap() + cpu["attacker_daemon"].as_f64().unwrap(),
            );
            assert!(cpu["victim_daemon"].as_f64().unwrap() > 0.0 && victim > 0.0, "{p}");
            // (A sampler tick of the last attack's work may land in the next alone phase.)
            if p["name"].as_str().unwrap().starts_with("alone") {
                assert!(attacker < 0.1, "{p}");
            } else {
                assert!(attacker > 0.0, "{p}");
            }
        }
    }
    assert!(out.join("isolation.json").exists() && out.join("isolation.svg").exists());
}
