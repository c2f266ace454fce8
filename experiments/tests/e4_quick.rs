//! E4 at a very small size, and E9's probe: behaviour, not timing.

use std::path::PathBuf;

use vino_experiments::e4_wisconsin::{self, Devices, E4Options, Policy, Protection};
use vino_experiments::e9_linux::{self, E9Options};

fn scratch() -> PathBuf {
    // Not a tmpfs: the plain device wants O_DIRECT.
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e4-quick")
}

#[test]
fn tiny_e4_reads_the_right_records_and_its_grafts_help() {
    let opts = E4Options {
        quick: true,
        scratch_dir: scratch(),
        devices: Devices::Plain,
        tuples: Some(5_000),
        cache_frames: Some(64),
        lookaheads: Some(vec![0, 100]),
        readaheads: Some(vec![0, 16]),
        plain_repeats: Some(1),
        ..E4Options::default()
    };
    let mut log = Vec::new();
    let report = e4_wisconsin::run(&opts, &mut |m| log.push(m.to_string())).expect("E4 runs");
    let d = report.device(e4_wisconsin::DeviceKind::Plain).expect("plain device");
    // LRU, 2 look-ahead x 2, 2 read-ahead x 2, read-ahead with look-ahead x 2, FIFO order.
    assert_eq!(d.runs.len(), 12, "{log:#?}");
    // Every run checked the unique1 of each of the 500 records it read (a wrong one fails the run).
    assert!(d.runs.iter().all(|r| r.records == 500));

    let lru = d.lru().expect("LRU run");
    assert!(
        lru.cache.misses > 300,
        "a cold 64-frame cache misses most of 500 random records: {}",
        lru.cache.misses
    );
    assert_eq!(lru.cache.prefetched, 0, "no read-ahead on random reads by default");

    for protection in [Protection::Protected, Protection::Unprotected] {
        let la0 = d.find(Policy::LookAhead, protection, 0).unwrap();
        let la = d.find(Policy::LookAhead, protection, 100).unwrap();
        assert_eq!(
            la0.cache.misses, lru.cache.misses,
            "look-ahead 0 decides as LRU ({protection:?})"
        );
        assert!(
            la.cache.misses < lru.cache.misses,
            "look-ahead 100 beats LRU: {} vs {}",
            la.cache.misses,
            lru.cache.misses
        );
        assert!(la.cache.evicted_by_graft > 0);
        let g = la.graft.as_ref().expect("graft statistics");
        assert!(g.invocations > 0 && !g.unloaded);

        let ra = d.find(Policy::ReadAhead, protection, 16).unwrap();
        assert!(
            ra.cache.prefetched > 100,
            "read-ahead prefetched {}",
            ra.cache.prefetched
        );
        assert!(
            ra.cache.prefetch_used * 10 >= ra.cache.prefetched * 9,
            "prefetches are mostly used: {} of {}",
            ra.cache.prefetch_used,
            ra.cache.prefetched
        );
        assert!(
            ra.cache.misses * 4 < lru.cache.misses,
            "few demand misses left: {}",
            ra.cache.misses
        );
        let ra0 = d.find(Policy::ReadAhead, protection, 0).unwrap();
        assert_eq!(ra0.cache.prefetched, 0, "a window of 0 reads nothing ahead");
    }
    // The Wasm graft and the native policy make the same decisions.
    for (policy, n) in [
        (Policy::LookAhead, 0),
        (Policy::LookAhead, 100),
        (Policy::ReadAhead, 0),
        (Policy::ReadAhead, 16),
    ] {
        let p = d.find(policy, Protection::Protected, n).unwrap();
        let u = d.find(policy, Protection::Unprotected, n).unwrap();
        assert_eq!(
            p.cache.misses, u.cache.misses,
            "{policy:?} {n}: protected vs unprotected misses"
        );
        assert_eq!(
            p.cache.prefetched, u.cache.prefetched,
            "{policy:?} {n}: protected vs unprotected prefetches"
        );
    }
    // Both grafts together: read-ahead's few demand misses, and look-ahead still choosing.
    let both: Vec<_> = [Protection::Protected, Protection::Unprotected]
        .into_iter()
        .map(|protection| {
            d.find(Policy::Both, protection, 16)
                .expect("read-ahead + look-ahead run")
        })
        .collect();
    for b in &both {
        assert!(b.lookahead.is_some_and(|n| n > 0));
        assert!(
            b.cache.misses * 4 < lru.cache.misses,
            "few demand misses: {}",
            b.cache.misses
        );
        assert!(b.cache.prefetched > 100 && b.graft.as_ref().is_some_and(|g| g.invocations > 0));
    }
    let fifo = d
        .runs
        .iter()
        .find(|r| r.order == e4_wisconsin::DiskOrder::Fifo)
        .expect("FIFO run");
    assert_eq!(
        fifo.cache.prefetched,
        d.find(Policy::ReadAhead, Protection::Protected, 16)
            .unwrap()
            .cache
            .prefetched
    );

    let tables = report.tables();
    let text: String = tables.iter().map(|t| t.render()).collect();
    assert!(
        text.contains("look-ahead page eviction") && text.contains("random-access read-ahead"),
        "{text}"
    );
    let svg = scratch().join("e4.svg");
    report.plot(&svg).expect("plot");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    serde_json::to_string(&report).expect("serializes");
    let images = std::fs::read_dir(scratch())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "img"))
        .count();
    assert_eq!(images, 0, "the image is removed");
}

#[test]
fn reports_of_repetitions_merge_into_their_median_runs() {
    let opts = E4Options {
        quick: true,
        scratch_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e4-merge"),
        devices: Devices::Plain,
        tuples: Some(2_000),
        cache_frames: Some(32),
        lookaheads: Some(Vec::new()),
        readaheads: Some(vec![8]),
        both: Some(Vec::new()),
        fifo_comparison: false,
        plain_repeats: Some(1),
        ..E4Options::default()
    };
    let reports: Vec<_> = (0..3)
        .map(|_| e4_wisconsin::run(&opts, &mut |_| {}).expect("E4 runs"))
        .collect();
    let runs = |r: &e4_wisconsin::E4Report| r.device(e4_wisconsin::DeviceKind::Plain).unwrap().runs.clone();
    let each: Vec<_> = reports.iter().map(runs).collect();
    let merged = e4_wisconsin::E4Report::merge(reports).expect("three reports");
    assert_eq!(merged.config.plain_repeats, 3);
    let merged = runs(&merged);
    // LRU, then read-ahead protected and unprotected.
    assert_eq!(merged.len(), 3);
    for (i, m) in merged.iter().enumerate() {
        let mut times: Vec<u64> = each.iter().map(|r| r[i].time_ns).collect();
        times.sort_unstable();
        assert_eq!(m.time_ns, times[1], "run {i}: the median repetition stands for it");
        assert_eq!(m.repeats, 3);
        assert_eq!(m.wall_min_ns, each.iter().map(|r| r[i].wall_min_ns).min().unwrap());
        assert_eq!(m.wall_max_ns, each.iter().map(|r| r[i].wall_max_ns).max().unwrap());
        assert!(each.iter().all(|r| r[i].policy == m.policy && r[i].param == m.param));
    }
    assert!(e4_wisconsin::E4Report::merge(Vec::new()).is_none());
}

#[test]
fn e9_probe_reports_its_capabilities() {
    let opts = E9Options {
        probe_only: true,
        scratch_dir: scratch(),
        ..E9Options::quick()
    };
    let report = e9_linux::run(&opts, &mut |_| {}).expect("the probe runs");
    assert!(report.runs.is_empty());
    assert!(report.skipped.is_some(), "probe only, or the reason E9 cannot run");
    let table = report.tables()[0].render();
    for what in ["root", "mkfs.ext4", "loop mount", "memory cgroup"] {
        assert!(table.contains(what), "{table}");
    }
    eprintln!("{table}");
}

/// The whole of E4 and E9, printed: `cargo test --release -p vino-experiments --test e4_quick -- --ignored
/// --nocapture` (quick sizes; set `VINO_E4_FULL=1` for the thesis' sizes, about ten minutes).
#[test]
#[ignore]
fn e4_and_e9_print_their_tables() {
    let full = std::env::var_os("VINO_E4_FULL").is_some();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vino-bench");
    let e4 = E4Options {
        quick: !full,
        scratch_dir: dir.clone(),
        ..E4Options::default()
    };
    let e4 = e4_wisconsin::run(&e4, &mut |m| eprintln!("{m}")).expect("E4");
    let e9 = E9Options {
        quick: !full,
        scratch_dir: dir.clone(),
        ..E9Options::default()
    };
    let e9 = e9_linux::run(&e9, &mut |m| eprintln!("{m}")).expect("E9");
    for t in e4
        .tables()
        .iter()
        .chain(e9.tables().iter())
        .chain([e9_linux::compare(&e4, &e9)].iter())
    {
        println!("{}", t.render());
    }
    let tag = if full { "full" } else { "quick" };
    vino_measure::report::write_json(&dir.join(format!("e4-{tag}.json")), &e4).unwrap();
    vino_measure::report::write_json(&dir.join(format!("e9-{tag}.json")), &e9).unwrap();
    e4.plot(&dir.join(format!("e4-{tag}.svg"))).unwrap();
    if !e9.runs.is_empty() {
        e9.plot(&dir.join(format!("e9-{tag}.svg"))).unwrap();
    }
}
