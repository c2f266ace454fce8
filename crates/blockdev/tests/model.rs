//! The disk model: its timing properties, in virtual (deterministic) time.

use std::time::{Duration, Instant};
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{BLOCK_SIZE, BlockDevice, DiskModel, DiskParams, IoOp, MemDevice, ModelStats, Timing};

fn virtual_disk(blocks: u64) -> DiskModel<MemDevice> {
    DiskModel::new(MemDevice::new(blocks), DiskParams::st32272n(), Timing::Virtual).unwrap()
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

fn delta(a: &ModelStats, b: &ModelStats) -> ModelStats {
    ModelStats {
        requests: b.requests - a.requests,
        seeks: b.seeks - a.seeks,
        track_buffer_hits: b.track_buffer_hits - a.track_buffer_hits,
        seek_ns: b.seek_ns - a.seek_ns,
        rotation_ns: b.rotation_ns - a.rotation_ns,
        transfer_ns: b.transfer_ns - a.transfer_ns,
        overhead_ns: b.overhead_ns - a.overhead_ns,
        service_ns: b.service_ns - a.service_ns,
        ..ModelStats::default()
    }
}

#[test]
fn preset_follows_the_thesis() {
    let p = DiskParams::st32272n();
    assert_eq!(p.rpm, 7200.0);
    assert!((p.revolution_ms() - 8.333).abs() < 0.001);
    let gb = p.capacity() as f64 / 1e9;
    assert!((2.19..2.21).contains(&gb), "capacity {gb} GB");
    // 360 KB cylinders (thesis 7.3.4).
    assert_eq!(p.heads * p.sectors_per_track * p.sector_bytes, 360 * 1024);
    assert!((p.average_seek_ms + p.revolution_ms() / 2.0 - 9.4).abs() < 1e-9);
    assert_eq!(DiskParams::preset("ST32272N"), Some(p));
}

#[test]
fn seek_curve_meets_its_three_points() {
    let disk = virtual_disk(16);
    let curve = disk.seek_curve();
    let p = disk.params();
    let n = p.cylinders as u64;
    assert!((ms(curve.time_ns(1)) - p.track_to_track_ms).abs() < 1e-6);
    assert!((ms(curve.time_ns(n - 1)) - p.full_stroke_ms).abs() < 1e-6);
    assert!((ms(curve.average_ns(n)) - p.average_seek_ms).abs() < 1e-6);
    assert_eq!(curve.time_ns(0), 0.0);
    let mut last = 0.0;
    for d in (1..n).step_by(7) {
        let t = curve.time_ns(d);
        assert!(t >= last, "seek time must not fall with distance ({d})");
        last = t;
    }
    // Short seeks grow like a square root: four times the distance, about twice the travel time.
    let (t100, t400) = (curve.time_ns(100) - curve.a_ns, curve.time_ns(400) - curve.a_ns);
    assert!((t400 / t100 - 2.0).abs() < 1e-6);
}

#[test]
fn random_access_averages_the_thesis_access_time() {
    let disk = virtual_disk(16);
    let capacity = disk.geometry().capacity_blocks();
    let mut rng = SplitMix64::new(42);
    let n = 4000;
    for _ in 0..n {
        disk.simulate(IoOp::Read, rng.below(capacity), 1);
    }
    let s = disk.model_stats();
    let access = ms((s.seek_ns + s.rotation_ns) as f64 / n as f64);
    assert!(
        (access - 9.4).abs() / 9.4 < 0.10,
        "average access (seek + rotation) {access:.2} ms, expected ~9.4"
    );
    let seek = ms(s.seek_ns as f64 / n as f64);
    let rotation = ms(s.rotation_ns as f64 / n as f64);
    println!("random 4 KiB reads: seek {seek:.2} ms + rotation {rotation:.2} ms = {access:.2} ms");
    assert!((seek - 5.23).abs() < 0.4, "average seek {seek:.2} ms");
    assert!(
        (rotation - 4.17).abs() < 0.4,
        "average rotational latency {rotation:.2} ms"
    );
    // The whole service adds the command overhead and one block's transfer.
    let p = disk.params();
    let expected = 9.4 + p.command_overhead_ms + BLOCK_SIZE as f64 / p.media_rate() * 1e3;
    let service = ms(s.service_ns as f64 / n as f64);
    println!("random 4 KiB reads: {service:.2} ms per request in all");
    assert!(
        (service - expected).abs() / expected < 0.10,
        "average service {service:.2} ms, expected ~{expected:.2}"
    );
    assert!(s.seeks > n * 99 / 100, "random requests nearly always seek");
}

#[test]
fn sequential_reads_run_near_the_media_rate() {
    let disk = virtual_disk(16);
    let media = disk.params().media_rate();
    let sustained = disk.geometry().sustained_rate();
    assert!(
        sustained < media && sustained > 0.85 * media,
        "track skew costs a little: {sustained} of {media}"
    );
    for (blocks_per_request, at_least) in [(1u64, 0.90), (4, 0.97), (16, 0.97)] {
        let before = disk.model_stats();
        let start = 100_000;
        let total = 4096; // 16 MiB, many tracks and cylinders
        let mut b = start;
        while b < start + total {
            disk.simulate(IoOp::Read, b, blocks_per_request);
            b += blocks_per_request;
        }
        let d = delta(&before, &disk.model_stats());
        let rate = (total * BLOCK_SIZE as u64) as f64 / (d.service_ns as f64 / 1e9);
        println!(
            "sequential {blocks_per_request}-block reads: {:.2} MB/s (sustained media rate {:.2})",
            rate / 1e6,
            sustained / 1e6
        );
        assert!(
            rate > at_least * sustained && rate <= sustained * 1.001,
            "{blocks_per_request}-block reads: {:.2} MB/s against a sustained media rate of {:.2} MB/s",
            rate / 1e6,
            sustained / 1e6
        );
        assert!(
            d.seeks <= total / 100,
            "sequential reads rarely seek ({} seeks)",
            d.seeks
        );
    }
}

#[test]
fn track_buffer_hits_are_cheap() {
    let disk = virtual_disk(16);
    let first = disk.simulate(IoOp::Read, 50_000, 1);
    assert!(
        first > Duration::from_millis(1),
        "a cold read seeks and waits for the platter"
    );
    let again = disk.simulate(IoOp::Read, 50_000, 1);
    let s = disk.model_stats();
    assert_eq!(s.track_buffer_hits, 1);
    assert!(again < Duration::from_millis(1), "a buffered re-read took {again:?}");
    // Let the read-ahead reach the end of the track, then read further on the same track.
    disk.advance(Duration::from_millis(10));
    let next = disk.simulate(IoOp::Read, 50_001, 1);
    assert!(next < Duration::from_millis(1), "read-ahead data took {next:?}");
    assert_eq!(disk.model_stats().track_buffer_hits, 2);
    // Far ahead of what the buffer reaches: back to the platter.
    let far = disk.simulate(IoOp::Read, 50_001 + 1000, 1);
    assert!(far > Duration::from_millis(1), "{far:?}");
    // A write to the track ends the buffer; writes are never buffered.
    disk.simulate(IoOp::Write, 50_000, 1);
    let w = disk.simulate(IoOp::Read, 50_000, 1);
    assert!(
        w > Duration::from_millis(1),
        "a read after a write to the track must go to the platter"
    );
}

#[test]
fn without_a_track_buffer_sequential_blocks_lose_a_revolution() {
    let params = DiskParams {
        track_buffer_kb: 0,
        ..DiskParams::st32272n()
    };
    let disk = DiskModel::new(MemDevice::new(16), params, Timing::Virtual).unwrap();
    disk.simulate(IoOp::Read, 1000, 1);
    let next = disk.simulate(IoOp::Read, 1001, 1);
    let rev = disk.params().revolution_ms();
    assert!(
        ms(next.as_nanos() as f64) > 0.9 * rev,
        "the next block passed under the head during the overhead: {next:?}"
    );
    assert_eq!(disk.model_stats().track_buffer_hits, 0);
}

#[test]
fn virtual_time_is_deterministic() {
    let run = || {
        let disk = virtual_disk(64);
        let mut rng = SplitMix64::new(7);
        for i in 0..500u64 {
            let op = if i % 3 == 0 { IoOp::Write } else { IoOp::Read };
            disk.simulate(op, rng.below(disk.geometry().capacity_blocks() - 8), 1 + rng.below(8));
        }
        disk.model_stats()
    };
    assert_eq!(run(), run());
}

#[test]
fn the_model_serves_real_data_and_counts_modeled_time() {
    let disk = virtual_disk(256);
    let data: Vec<u8> = (0..4 * BLOCK_SIZE).map(|i| (i % 251) as u8).collect();
    disk.write_blocks(10, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    disk.read_blocks(10, &mut back).unwrap();
    assert!(back == data);
    disk.flush().unwrap();
    let s = disk.stats();
    let m = disk.model_stats();
    assert_eq!(
        (s.reads, s.writes, s.flushes, s.blocks_read, s.blocks_written),
        (1, 1, 1, 4, 4)
    );
    assert_eq!(s.busy_ns, m.service_ns, "device busy time is the modeled service time");
    assert!(
        m.clock_ns.abs_diff(m.service_ns) <= m.requests,
        "back to back in virtual time"
    );
    assert_eq!(disk.busy(), Duration::from_nanos(m.service_ns));
    // Errors are the inner device's rules, named after the model.
    let e = disk.read_blocks(255, &mut back).unwrap_err();
    assert!(e.to_string().contains("past the end"), "{e}");
    assert_eq!(
        disk.model_stats().requests,
        m.requests,
        "a refused request costs no modeled time"
    );
}

#[test]
fn idle_time_lets_the_platter_turn() {
    let disk = virtual_disk(16);
    disk.simulate(IoOp::Read, 0, 1);
    let before = disk.clock();
    disk.advance(Duration::from_millis(3));
    assert_eq!(disk.clock(), before + Duration::from_millis(3));
}

#[test]
fn a_device_larger_than_the_modeled_disk_extends_it() {
    let params = DiskParams {
        cylinders: 50,
        average_seek_ms: 3.0,
        full_stroke_ms: 6.0,
        ..DiskParams::st32272n()
    };
    let disk = DiskModel::new(MemDevice::new(20_000), params, Timing::Virtual).unwrap();
    let g = disk.geometry();
    assert!(g.capacity_blocks() >= 20_000 && g.cylinders > 50, "{g:?}");
    let mut buf = vec![0u8; BLOCK_SIZE];
    disk.read_blocks(19_999, &mut buf).unwrap();
    assert!(
        disk.model_stats().seek_cylinders > 50,
        "the extra cylinders are further away"
    );
}

#[test]
fn sleeping_model_takes_at_least_its_scaled_time() {
    // A lower bound only: sleeping never returns early; no upper bound is asserted.
    let disk = DiskModel::new(
        MemDevice::new(4096),
        DiskParams::st32272n(),
        Timing::Sleep { scale: 0.01 },
    )
    .unwrap();
    let mut buf = vec![0u8; BLOCK_SIZE];
    let started = Instant::now();
    for b in [0u64, 4000, 100, 3000, 7, 2500] {
        disk.read_blocks(b, &mut buf).unwrap();
    }
    let m = disk.model_stats();
    let scaled = Duration::from_nanos((m.service_ns as f64 * 0.01) as u64);
    assert!(
        started.elapsed() >= scaled.mul_f64(0.99),
        "{:?} < {scaled:?}",
        started.elapsed()
    );
    assert_eq!(m.requests, 6);
    assert!(DiskModel::new(MemDevice::new(1), DiskParams::st32272n(), Timing::Sleep { scale: 0.0 }).is_err());
}

#[test]
fn parameters_load_from_toml_and_json() {
    let p = DiskParams::from_toml("name = \"slow\"\nrpm = 5400.0\ntrack_buffer_kb = 0\n").unwrap();
    assert_eq!(p.name, "slow");
    assert_eq!(p.rpm, 5400.0);
    assert_eq!(p.track_buffer_kb, 0);
    assert_eq!(p.heads, DiskParams::st32272n().heads, "unnamed fields keep the preset");
    let round = DiskParams::from_toml(&p.to_toml()).unwrap();
    assert_eq!(round, p);
    let j = DiskParams::from_json(r#"{"cylinders": 1000, "average_seek_ms": 4.0}"#).unwrap();
    assert_eq!(j.cylinders, 1000);

    let e = DiskParams::from_toml("rpms = 7200.0").unwrap_err();
    assert!(e.to_string().contains("rpms"), "unknown fields are named: {e}");
    let e = DiskParams::from_json(r#"{"rpm": -1}"#).unwrap_err();
    assert!(e.to_string().contains("rpm must be positive"), "{e}");
    let e = DiskParams::from_json(r#"{"sector_bytes": 1000}"#).unwrap_err();
    assert!(e.to_string().contains("sector_bytes"), "{e}");
    let e = DiskParams::from_json(r#"{"average_seek_ms": 10.5, "full_stroke_ms": 11.0}"#).unwrap_err();
    assert!(e.to_string().contains("no seek curve"), "{e}");
    let e = DiskParams::from_json(r#"{"average_seek_ms": 20.0}"#).unwrap_err();
    assert!(e.to_string().contains("seek times must grow"), "{e}");
}

#[test]
fn a_read_ahead_of_the_stream_goes_to_the_platter_when_that_is_sooner() {
    let disk = virtual_disk(16);
    let p = disk.params();
    let (spt, per_block) = (
        u64::from(p.sectors_per_track),
        BLOCK_SIZE as u64 / u64::from(p.sector_bytes),
    );
    assert_eq!(spt % per_block, 0, "the test wants whole blocks per track");
    let blocks_per_track = spt / per_block;
    let first = 1000 * blocks_per_track;
    // Two tracks on, same cylinder, inside the track buffer's reach: the stream would get there
    // after about two revolutions; a head switch and at most one revolution is sooner.
    let target = first + 2 * blocks_per_track;
    assert!(2 * spt * u64::from(p.sector_bytes) < u64::from(p.track_buffer_kb) * 1024);
    disk.simulate(IoOp::Read, first, 1);
    let before = disk.model_stats();
    let t = disk.simulate(IoOp::Read, target, 1);
    let s = delta(&before, &disk.model_stats());
    let rev = p.revolution_ms();
    assert!(ms(t.as_nanos() as f64) < 1.3 * rev, "waited for the stream: {t:?}");
    assert_eq!(s.track_buffer_hits, 0, "served from the platter");
    // Just ahead of the stream on the same track, waiting is sooner: a buffer hit.
    let near = disk.simulate(IoOp::Read, target + 1, 1);
    assert!(ms(near.as_nanos() as f64) < 0.5 * rev, "{near:?}");
}
