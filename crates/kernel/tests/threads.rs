//! Threads of kernel processes on the CPU scheduler, with a process's own `sched.pick_thread`
//! graft: it reorders the process's work and takes no more CPU than the process's share, and a
//! hostile one changes nothing for anybody.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::{CpuSchedConfig, Credentials, Kernel, KernelConfig, Process};
use vino_sched::JoinHandle;

fn boot() -> Arc<Kernel> {
    let dev = Arc::new(MemDevice::new(4096));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: None,
        cpu: CpuSchedConfig {
            workers: 1,
            ..CpuSchedConfig::default()
        },
        ..KernelConfig::default()
    };
    Kernel::boot(dev as Arc<dyn BlockDevice>, &config).unwrap()
}

/// A thread of `p` computing in 20 µs steps until `stop`, yielding at each slice's end.
fn burner(p: &Process, stop: &Arc<AtomicBool>) -> JoinHandle {
    let stop = stop.clone();
    p.spawn_thread(move |ctx| async move {
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            if ctx.slice_over() {
                ctx.yield_now().await;
            }
        }
    })
    .unwrap()
}

fn thread_ms(k: &Kernel, p: &Process, tid: u64) -> f64 {
    k.cpu()
        .threads_of(p.pid())
        .iter()
        .find(|t| t.tid == tid)
        .map_or(0.0, |t| t.cpu_ns as f64 / 1e6)
}

fn process_ms(k: &Kernel, p: &Process) -> f64 {
    k.cpu().threads_of(p.pid()).iter().map(|t| t.cpu_ns as f64 / 1e6).sum()
}

/// Runs two threads of `a` and one of `b` (another user) for a while; returns the CPU of a's
/// threads and of b, in ms.
fn compete(k: &Arc<Kernel>, a: &Process, b: &Process, before: impl FnOnce(&[JoinHandle])) -> ([f64; 2], f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let mine = [burner(a, &stop), burner(a, &stop)];
    let other = burner(b, &stop);
    before(&mine);
    std::thread::sleep(Duration::from_millis(800));
    let cpu = (
        [thread_ms(k, a, mine[0].tid()), thread_ms(k, a, mine[1].tid())],
        process_ms(k, b),
    );
    stop.store(true, Ordering::Relaxed);
    for h in mine.iter().chain([&other]) {
        h.join();
    }
    cpu
}

#[test]
fn a_process_orders_its_own_threads_and_gets_no_more_cpu() {
    let k = boot();
    let a = k.spawn(Credentials::user(1001, 1001));
    let b = k.spawn(Credentials::user(1002, 1002));
    let graft = vino_sdk::build_example("strict_priority", &Default::default()).unwrap();
    a.graft_load("sched.pick_thread", &graft).unwrap();
    // Another user may not graft a's threads; a may not graft the global decision.
    assert!(b.graft_load("sched.pick_next", &graft).is_err());
    let ([low, high], other) = compete(&k, &a, &b, |threads| {
        a.graft_call("sched.pick_thread", "set_priority", &[threads[1].tid() as i64, 10])
            .unwrap();
    });
    assert!(
        high > 4.0 * low.max(1.0),
        "the high-priority thread ran {high} ms, the other {low} ms"
    );
    let mine = low + high;
    assert!(
        (mine / other - 1.0).abs() < 0.3,
        "a's threads {mine} ms, b {other} ms: the graft took more than a's share"
    );
    k.exit(a.pid());
    k.exit(b.pid());
}

#[test]
fn a_hostile_thread_graft_changes_nothing_for_anybody() {
    const LOOPS: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "sched_pick_thread") (param i32 i32) (result i32) (loop $l (br $l)) (i32.const 0)))"#;
    const NOWHERE: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "sched_pick_thread") (param i32 i32) (result i32) (i32.const -7)))"#;
    for graft in [LOOPS, NOWHERE] {
        let k = boot();
        let a = k.spawn(Credentials::user(1001, 1001));
        let b = k.spawn(Credentials::user(1002, 1002));
        a.graft_load("sched.pick_thread", graft.as_bytes()).unwrap();
        let ([one, two], other) = compete(&k, &a, &b, |_| {});
        assert!(one > 50.0 && two > 50.0, "both of a's threads ran: {one} ms, {two} ms");
        assert!(
            ((one + two) / other - 1.0).abs() < 0.3,
            "a {one}+{two} ms, b {other} ms"
        );
        let stats = a.graft_stats("sched.pick_thread").unwrap();
        let failed = stats.stats.as_ref().is_none_or(|s| s.failures > 0);
        assert!(
            failed,
            "the graft's failures are counted (or it was unloaded): {stats:?}"
        );
        k.exit(a.pid());
        k.exit(b.pid());
    }
}

/// An `event.timer` graft that keeps the count of its firings (`count` reads it).
const COUNTER: &str = r#"(module (memory (export "memory") 1)
    (global $n (mut i64) (i64.const 0))
    (func (export "event_timer") (param i64 i64) (result i32) (global.set $n (local.get 0)) (i32.const 0))
    (func (export "vino_ctl_count") (result i64) (global.get $n)))"#;

#[test]
fn a_timer_fires_its_graft_on_a_thread_of_the_process_until_stopped() {
    let k = boot();
    let p = k.spawn(Credentials::user(1001, 1001));
    p.graft_load("event.timer", COUNTER.as_bytes()).unwrap();
    let e = p.timer_start(Duration::from_micros(10)).unwrap_err();
    assert_eq!(e.errno, vino_kernel::Errno::Inval, "{e}");
    p.timer_start(Duration::from_millis(5)).unwrap();
    assert_eq!(
        k.cpu().threads_of(p.pid()).len(),
        1,
        "the timer's thread is the process's"
    );
    std::thread::sleep(Duration::from_millis(300));
    let count = || p.graft_call("event.timer", "count", &[]).unwrap();
    let n = count();
    assert!((20..=61).contains(&n), "fired {n} times in 300 ms at 5 ms");
    p.timer_stop();
    let stopped = count();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(count(), stopped, "no firing after the stop");
    assert!(k.cpu().threads_of(p.pid()).is_empty());
    // Started again and left running: the process's exit ends it.
    p.timer_start(Duration::from_millis(2)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let pid = p.pid();
    drop(p);
    k.exit(pid);
    assert!(k.cpu().threads_of(pid).is_empty());
}

#[test]
fn a_looping_timer_graft_is_cut_short_and_others_run() {
    const LOOPS: &str = r#"(module (memory (export "memory") 1)
        (func (export "event_timer") (param i64 i64) (result i32) (loop $l (br $l)) (i32.const 0)))"#;
    let k = boot();
    let a = k.spawn(Credentials::user(1001, 1001));
    let b = k.spawn(Credentials::user(1002, 1002));
    a.graft_load("event.timer", LOOPS.as_bytes()).unwrap();
    a.timer_start(Duration::from_millis(5)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let other = burner(&b, &stop);
    std::thread::sleep(Duration::from_millis(500));
    let ran = process_ms(&k, &b);
    stop.store(true, Ordering::Relaxed);
    other.join();
    assert!(ran > 250.0, "the other user ran {ran} ms of 500 on the one worker");
    let stats = a.graft_stats("event.timer").unwrap();
    assert!(
        stats.stats.as_ref().is_none_or(|s| s.failures > 0),
        "the graft's failures are counted (or it was unloaded): {stats:?}"
    );
    k.exit(a.pid());
    k.exit(b.pid());
    assert!(k.cpu().threads_of(a.pid()).is_empty());
}

#[test]
fn write_back_is_paid_by_the_processes_whose_writes_it_cleans() {
    let dev = Arc::new(MemDevice::new(4096));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let config = KernelConfig {
        cache_frames: 512,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev as Arc<dyn BlockDevice>, &config).unwrap();
    let a = k.spawn(Credentials::root());
    a.chmod("/", 0o777).unwrap();
    let b = k.spawn(Credentials::user(1000, 1000));
    let page = vec![7u8; 4096];
    for (p, name, pages) in [(&a, "/a", 96), (&b, "/b", 32)] {
        let fd = p.open(name, vino_kernel::OpenFlags::create()).unwrap();
        for _ in 0..pages {
            p.write(fd, &page).unwrap();
        }
        p.close(fd).unwrap();
    }
    let cpu = |p: &Process| k.cpu().process_cpu(p.pid()).unwrap().as_nanos() as f64;
    assert_eq!((cpu(&a), cpu(&b)), (0.0, 0.0), "neither has run a thread");
    // A policy that writes every dirty page now; the round runs on this (kernel) thread.
    let all: Arc<dyn vino_graft::NativePolicy<vino_cache::Writeback>> =
        Arc::new(|_: &(), pages: &&[vino_cache::WritebackArgs]| Ok((0..pages.len()).collect()));
    k.cache().writeback_slot().bind_native(all, false);
    let written = k.cache().run_writeback().unwrap();
    assert!(written >= 128, "{written} pages written");
    // Each pays for the round by the pages its writes dirtied: 3 to 1 (the file system's own
    // pages, inodes and bitmaps, are the writers' too).
    let (ca, cb) = (cpu(&a), cpu(&b));
    assert!(ca > 0.0 && cb > 0.0, "a {ca} ns, b {cb} ns");
    assert!((2.0..4.5).contains(&(ca / cb)), "a {ca} ns, b {cb} ns");
    k.exit(a.pid());
    k.exit(b.pid());
}
