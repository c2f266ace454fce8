//! The I/O scheduler: dispatch order under each policy (native and grafted), fallbacks, flushes
//! as barriers, depth, errors, and the elevator's gain on the modeled disk.

use parking_lot::{Condvar, Mutex};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{
    AlignedBuf, BLOCK_SIZE, BackendChoice, BlockDevice, DeviceCounters, DiskModel, DiskParams, IoOp, IoRequest,
    MemDevice, Ticket, Timing,
};
use vino_graft::{Access, Namespace, Owner, PolicyKind, Principal, Runtime};
use vino_iosched::{Dispatch, IoScheduler, Policy, SchedConfig, elevator};
use vino_sdk::{BuildOptions, build_c_bytes, example_path};

/// A device that records the order it serves requests in, and holds them at a gate until it is
/// opened.
struct Recorder {
    inner: MemDevice,
    log: Mutex<Vec<(IoOp, u64)>>,
    open: Mutex<bool>,
    cv: Condvar,
    active: AtomicUsize,
    max_active: AtomicUsize,
    arrived: AtomicUsize,
}

impl Recorder {
    fn new(blocks: u64, open: bool) -> Arc<Recorder> {
        Arc::new(Recorder {
            inner: MemDevice::new(blocks),
            log: Mutex::new(Vec::new()),
            open: Mutex::new(open),
            cv: Condvar::new(),
            active: AtomicUsize::new(0),
            max_active: AtomicUsize::new(0),
            arrived: AtomicUsize::new(0),
        })
    }

    fn open(&self) {
        *self.open.lock() = true;
        self.cv.notify_all();
    }

    fn wait_arrived(&self, n: usize) {
        while self.arrived.load(Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
    }

    fn blocks_served(&self) -> Vec<u64> {
        self.log
            .lock()
            .iter()
            .filter(|(op, _)| *op != IoOp::Flush)
            .map(|&(_, b)| b)
            .collect()
    }

    fn pass<T>(&self, op: IoOp, block: u64, f: impl FnOnce() -> T) -> T {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_active.fetch_max(now, Ordering::SeqCst);
        self.log.lock().push((op, block));
        self.arrived.fetch_add(1, Ordering::SeqCst);
        {
            let mut open = self.open.lock();
            while !*open {
                self.cv.wait(&mut open);
            }
        }
        let r = f();
        self.active.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

impl BlockDevice for Recorder {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.pass(IoOp::Read, first, || self.inner.read_blocks(first, buf))
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.pass(IoOp::Write, first, || self.inner.write_blocks(first, buf))
    }
    fn flush(&self) -> io::Result<()> {
        self.pass(IoOp::Flush, 0, || self.inner.flush())
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn name(&self) -> &str {
        "recorder"
    }
    fn counters(&self) -> &DeviceCounters {
        self.inner.counters()
    }
}

const BUSY_BLOCK: u64 = 500;
const BATCH: [u64; 6] = [900, 100, 600, 300, 700, 50];
/// The elevator's order for BATCH with the head after block 500: up from 501, then wrap.
const SWEEP: [u64; 6] = [600, 700, 900, 50, 100, 300];

fn sched(dev: Arc<dyn BlockDevice>, rt: &Runtime, depth: usize) -> IoScheduler {
    IoScheduler::with_config(
        dev,
        rt,
        SchedConfig {
            backend: BackendChoice::Threads,
            ..SchedConfig::new(depth)
        },
    )
    .unwrap()
}

/// Keeps the device busy with one read of BUSY_BLOCK, queues `batch` behind it, lets the device
/// go, and returns the order the batch was served in.
fn serve_batch(s: &IoScheduler, dev: &Recorder, batch: &[u64]) -> Vec<u64> {
    let first = s.submit(IoRequest::read(BUSY_BLOCK, 1));
    dev.wait_arrived(1);
    let tickets: Vec<Ticket> = batch.iter().map(|&b| s.submit(IoRequest::read(b, 1))).collect();
    assert_eq!(s.pending(), batch.len(), "the batch waits while the device is busy");
    dev.open();
    first.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    let served = dev.blocks_served();
    assert_eq!(served[0], BUSY_BLOCK);
    served[1..].to_vec()
}

fn build(name: &str) -> Vec<u8> {
    build_c_bytes(&example_path(name), &BuildOptions::default()).unwrap_or_else(|e| panic!("building {name}.c: {e}"))
}

#[test]
fn the_default_elevator_serves_a_batch_in_sweep_order() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, false);
    let s = sched(dev.clone(), &rt, 1);
    assert_eq!(s.slot().name(), "disk.pick_request");
    assert_eq!(s.slot().access(), Access::Privileged);
    assert_eq!(s.slot().policy_kind(), PolicyKind::Default);
    assert_eq!(serve_batch(&s, &dev, &BATCH), SWEEP);
    let st = s.stats();
    assert_eq!(st.decisions, 5, "a choice among one is not asked for");
    assert_eq!(st.dispatched, 7);
    assert_eq!(st.completed, 7);
    assert!(st.reorderings >= 3, "{st:?}");
    assert_eq!(st.graft_failures, 0);
    assert_eq!(s.head(), 301);
}

#[test]
fn fifo_serves_in_arrival_order() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, false);
    let s = sched(dev.clone(), &rt, 1);
    s.set_policy(Policy::Fifo);
    assert_eq!(s.slot().policy_kind(), PolicyKind::Native);
    assert_eq!(serve_batch(&s, &dev, &BATCH), BATCH);
    assert_eq!(s.stats().reorderings, 0);
    // And back to the elevator.
    s.set_policy(Policy::Elevator);
    let dev2 = Recorder::new(1024, false);
    let s2 = sched(dev2.clone(), &rt, 1);
    s2.set_policy(Policy::Elevator);
    assert_eq!(serve_batch(&s2, &dev2, &BATCH), SWEEP);
}

#[test]
fn the_c_grafts_decide_as_the_native_policies() {
    let rt = Runtime::default();
    let elevator_wasm = build("elevator");
    let fifo_wasm = build("fifo");
    let mut rng = SplitMix64::new(2024);
    // Even blocks only: no two requests are adjacent, so none merges and every one is a choice.
    let batch: Vec<u64> = (0..60).map(|_| rng.below(2000) * 2).collect();
    let mut orders = Vec::new();
    for (policy, graft) in [(Policy::Elevator, &elevator_wasm), (Policy::Fifo, &fifo_wasm)] {
        let native = {
            let dev = Recorder::new(4096, false);
            let s = sched(dev.clone(), &rt, 1);
            s.set_policy(policy);
            serve_batch(&s, &dev, &batch)
        };
        let grafted = {
            let dev = Recorder::new(4096, false);
            let s = sched(dev.clone(), &rt, 1);
            s.slot().load(graft, Owner::process(0)).unwrap();
            let order = serve_batch(&s, &dev, &batch);
            let gs = s.slot().stats().unwrap();
            assert_eq!(gs.invocations, 59, "{policy:?}: asked once per choice");
            assert_eq!(gs.failures, 0, "{policy:?}: {:?}", gs.last_error);
            assert_eq!(s.stats().graft_failures, 0);
            order
        };
        assert_eq!(
            grafted, native,
            "{policy:?}: the C graft and the native policy disagree"
        );
        orders.push(native);
    }
    assert_eq!(orders[1], batch, "FIFO is arrival order");
    assert_ne!(orders[0], orders[1]);
    // The elevator's order is one sweep up from the head, then one from the bottom.
    let up: Vec<u64> = orders[0].iter().copied().take_while(|&b| b > BUSY_BLOCK).collect();
    assert!(up.windows(2).all(|w| w[0] <= w[1]) && orders[0][up.len()..].windows(2).all(|w| w[0] <= w[1]));
}

/// A graft that answers `n`: always one past the last candidate.
const OUT_OF_RANGE: &str = r#"(module
    (memory (export "memory") 1)
    (global (export "vino_args") i32 (i32.const 1024))
    (func (export "disk_pick_request") (param i32 i64) (result i32) (local.get 0)))"#;

/// A graft that traps on every call.
const TRAPS: &str = r#"(module
    (memory (export "memory") 1)
    (global (export "vino_args") i32 (i32.const 1024))
    (func (export "disk_pick_request") (param i32 i64) (result i32) unreachable))"#;

#[test]
fn a_failing_graft_falls_back_to_the_elevator_and_is_counted() {
    let rt = Runtime::default();
    for wat in [OUT_OF_RANGE, TRAPS] {
        let dev = Recorder::new(1024, false);
        let s = sched(dev.clone(), &rt, 1);
        s.slot().load(wat.as_bytes(), Owner::process(0)).unwrap();
        assert_eq!(serve_batch(&s, &dev, &BATCH), SWEEP, "the elevator decided every time");
        let gs = s.slot().stats().unwrap();
        assert_eq!(gs.failures, 5);
        assert_eq!(s.stats().graft_failures, 5);
        assert_eq!(s.stats().decisions, 5);
        assert_eq!(
            s.slot().policy_kind(),
            PolicyKind::Wasm,
            "five failures in a row is below the unload threshold"
        );
    }
}

#[test]
fn the_kernel_can_register_the_graftpoint_for_privileged_processes_only() {
    let rt = Runtime::default();
    let s = sched(Arc::new(MemDevice::new(16)), &rt, 1);
    let ns = Namespace::new();
    ns.register(s.slot().clone());
    let fifo = build("fifo");
    let user = Principal {
        process: 7,
        privileged: false,
    };
    assert!(ns.load(user, "disk.pick_request", &fifo, Owner::process(7)).is_err());
    let root = Principal {
        process: 1,
        privileged: true,
    };
    ns.load(root, "disk.pick_request", &fifo, Owner::process(1)).unwrap();
    assert_eq!(s.slot().policy_kind(), PolicyKind::Wasm);
}

#[test]
fn a_tiny_age_cap_turns_the_elevator_into_fifo() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, false);
    let config = SchedConfig {
        age_cap: Duration::from_nanos(1),
        backend: BackendChoice::Threads,
        ..SchedConfig::new(1)
    };
    let s = IoScheduler::with_config(dev.clone(), &rt, config).unwrap();
    assert_eq!(
        serve_batch(&s, &dev, &BATCH),
        BATCH,
        "every request is past the cap: the oldest goes first"
    );
    // The same rule, directly: the oldest past the cap beats the sweep.
    let c = |block, age_ns| vino_iosched::Candidate {
        block,
        nblocks: 1,
        flags: 0,
        age_ns,
    };
    assert_eq!(elevator(&[c(10, 5_000_000_000), c(600, 1)], 500, 1_000_000_000), 0);
}

#[test]
fn flushes_are_barriers() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, true);
    let s = sched(dev.clone(), &rt, 2);
    s.plug();
    let tickets = vec![
        s.submit(IoRequest::write(500, AlignedBuf::new(1))),
        s.submit(IoRequest::write(100, AlignedBuf::new(1))),
        s.submit(IoRequest::flush()),
        s.submit(IoRequest::read(50, 1)),
        s.submit(IoRequest::read(600, 1)),
    ];
    assert_eq!(s.pending(), 5);
    s.unplug();
    for t in tickets {
        t.wait().unwrap();
    }
    let log = dev.log.lock().clone();
    let flush_at = log.iter().position(|(op, _)| *op == IoOp::Flush).unwrap();
    assert_eq!(flush_at, 2, "{log:?}");
    let before: Vec<u64> = log[..2].iter().map(|&(_, b)| b).collect();
    assert_eq!(before, [100, 500], "writes before the flush, in sweep order");
    let after: Vec<u64> = log[3..].iter().map(|&(_, b)| b).collect();
    assert_eq!(after, [600, 50], "reads after it, sweeping on from 501");
    assert_eq!(dev.inner.unflushed_writes(), 0, "both writes were durable at the flush");
    let st = s.stats();
    assert_eq!((st.reads, st.writes, st.flushes), (2, 2, 1));
}

#[test]
fn deeper_queues_keep_data_right_and_respect_the_depth() {
    let rt = Runtime::default();
    let dev = Recorder::new(512, true);
    let s = Arc::new(sched(dev.clone(), &rt, 4));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..64u64 {
                    let b = w * 128 + i;
                    let data = vec![(b % 251) as u8; BLOCK_SIZE];
                    s.write_sync(b, &data).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let tickets: Vec<_> = (0..512u64)
        .step_by(2)
        .map(|b| (b, s.submit(IoRequest::read(b, 1))))
        .collect();
    for (b, t) in tickets {
        let buf = t.wait().unwrap();
        let expect = if b % 128 < 64 { (b % 251) as u8 } else { 0 };
        assert!(buf.iter().all(|&x| x == expect), "block {b}");
    }
    let mut one = vec![0u8; BLOCK_SIZE];
    s.read_sync(3, &mut one).unwrap();
    assert!(one.iter().all(|&x| x == 3));
    s.flush_sync().unwrap();
    s.drain();
    assert!(dev.max_active.load(Ordering::SeqCst) <= 4);
    let st = s.stats();
    assert_eq!(st.completed, st.dispatched);
    assert_eq!(st.submitted, 256 + 256 + 1 + 1);
    assert_eq!(s.in_flight(), 0);
    assert_eq!(s.pending(), 0);
}

#[test]
fn bad_requests_and_device_failures_reach_the_caller() {
    let rt = Runtime::default();
    let mem = Arc::new(MemDevice::new(8));
    let s = sched(mem.clone(), &rt, 1);
    let e = s.submit(IoRequest::read(8, 1)).wait().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("past the end"), "{e}");
    let e = s.read_sync(0, &mut [0u8; 100]).unwrap_err();
    assert!(e.to_string().contains("not a whole number"), "{e}");
    let e = s.write_sync(7, &[0u8; 2 * BLOCK_SIZE]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    mem.fail_write(1);
    let e = s.write_sync(1, &[1u8; BLOCK_SIZE]).unwrap_err();
    assert!(e.to_string().contains("injected failure"), "{e}");
    s.write_sync(1, &[1u8; BLOCK_SIZE]).unwrap();
    let st = s.stats();
    assert_eq!(
        st.refused, 1,
        "only submit() refusals are counted here; the sync helpers check first"
    );
    assert_eq!(st.errors, 1);
    assert_eq!(st.completed, 2);
}

#[test]
fn on_the_modeled_disk_the_elevator_beats_fifo() {
    // Virtual time: the modeled service time depends only on the order, which the policies fix.
    let rt = Runtime::default();
    let mut rng = SplitMix64::new(99);
    let blocks: Vec<u64> = (0..64).map(|_| rng.below(500_000)).collect();
    let mut busy = Vec::new();
    for policy in [Policy::Elevator, Policy::Fifo] {
        let model = Arc::new(DiskModel::new(MemDevice::new(500_000), DiskParams::st32272n(), Timing::Virtual).unwrap());
        let s = sched(model.clone(), &rt, 1);
        s.set_policy(policy);
        s.plug();
        let tickets: Vec<_> = blocks.iter().map(|&b| s.submit(IoRequest::read(b, 1))).collect();
        s.unplug();
        for t in tickets {
            t.wait().unwrap();
        }
        let m = model.model_stats();
        assert_eq!(m.requests, 64);
        busy.push((m.service_ns, m.seek_cylinders, s.stats().head_travel_blocks));
    }
    let (elev, fifo) = (busy[0], busy[1]);
    println!(
        "64 random reads: elevator {} ms, FIFO {} ms of modeled disk time",
        elev.0 / 1_000_000,
        fifo.0 / 1_000_000
    );
    // Rotational latency stays: the elevator saves seek time only.
    assert!(
        elev.0 * 10 < fifo.0 * 7,
        "elevator {} ms vs FIFO {} ms",
        elev.0 / 1_000_000,
        fifo.0 / 1_000_000
    );
    assert!(elev.1 * 4 < fifo.1, "arm travel: {} vs {} cylinders", elev.1, fifo.1);
    assert!(elev.2 < fifo.2);
}

#[test]
fn a_file_device_through_the_scheduler_on_either_backend() {
    let rt = Runtime::default();
    let dir = tempfile::tempdir().unwrap();
    let dev = Arc::new(vino_blockdev::FileDevice::create(dir.path().join("s.img"), 64 * BLOCK_SIZE as u64).unwrap());
    let mut images = Vec::new();
    for backend in [BackendChoice::Auto, BackendChoice::Threads] {
        let s = IoScheduler::with_config(
            dev.clone(),
            &rt,
            SchedConfig {
                backend,
                ..SchedConfig::new(4)
            },
        )
        .unwrap();
        println!("{backend:?} gives the {:?} backend", s.backend());
        s.plug();
        let writes: Vec<_> = (0..64u64)
            .rev()
            .map(|b| {
                s.submit(IoRequest::write(
                    b,
                    AlignedBuf::from_slice(&[(b as u8) ^ 0x5a; BLOCK_SIZE]),
                ))
            })
            .collect();
        s.unplug();
        for t in writes {
            t.wait().unwrap();
        }
        s.flush_sync().unwrap();
        let mut image = vec![0u8; 64 * BLOCK_SIZE];
        s.read_sync(0, &mut image).unwrap();
        assert!(
            image
                .chunks(BLOCK_SIZE)
                .enumerate()
                .all(|(b, c)| c.iter().all(|&x| x == (b as u8) ^ 0x5a))
        );
        assert!(
            s.stats().reorderings > 0,
            "the elevator turned the descending batch around"
        );
        images.push(image);
    }
    assert!(images[0] == images[1]);
}

fn caller_dispatched(dev: Arc<dyn BlockDevice>, rt: &Runtime, depth: usize, backend: BackendChoice) -> IoScheduler {
    IoScheduler::with_config(
        dev,
        rt,
        SchedConfig {
            backend,
            dispatch: Dispatch::Caller,
            ..SchedConfig::new(depth)
        },
    )
    .unwrap()
}

#[test]
fn callers_dispatch_and_the_inline_queue_serves_each_request_on_the_thread_that_asked() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, true);
    let s = caller_dispatched(dev.clone(), &rt, 1, BackendChoice::Inline);
    assert_eq!(s.dispatch(), Dispatch::Caller);
    let t = s.submit(IoRequest::read(BUSY_BLOCK, 1));
    assert!(t.is_done(), "served before submit returned");
    t.wait().unwrap();
    // A plugged batch is ordered by the policy when the caller unplugs.
    s.plug();
    let tickets: Vec<Ticket> = BATCH.iter().map(|&b| s.submit(IoRequest::read(b, 1))).collect();
    assert_eq!(s.pending(), BATCH.len());
    assert!(tickets.iter().all(|t| !t.is_done()));
    s.unplug();
    assert!(tickets.iter().all(Ticket::is_done));
    assert_eq!(
        dev.blocks_served()[1..],
        SWEEP,
        "the elevator's order, from after block 500"
    );
    assert_eq!(dev.max_active.load(Ordering::SeqCst), 1);
}

#[test]
fn with_several_callers_and_a_threaded_queue_no_request_is_left_behind() {
    // Callers race to dispatch while completions (on the queue's threads) free places and
    // dispatch too: every request must be served.
    let rt = Runtime::default();
    let dev = Recorder::new(4096, true);
    let s = Arc::new(caller_dispatched(dev.clone(), &rt, 2, BackendChoice::Threads));
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut rng = SplitMix64::new(w);
                for _ in 0..500 {
                    let t = s.submit(IoRequest::read(rng.below(4096), 1));
                    if rng.chance(0.1) {
                        s.flush_sync().unwrap();
                    }
                    t.wait().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    s.drain();
    let st = s.stats();
    // A merged request completes (and counts) once for all its parts.
    assert_eq!(st.completed + st.merged + st.flushes_elided, st.submitted);
    assert_eq!(st.reads + st.merged, 2000);
    assert!(dev.max_active.load(Ordering::SeqCst) <= 2, "the depth holds");
}

#[test]
fn adjacent_requests_are_merged_and_each_gets_its_own_data() {
    let rt = Runtime::default();
    let dev = Recorder::new(2048, false);
    // Blocks 200..210 hold recognisable data; written behind the busy request, adjacent in
    // shuffled order, so they merge into one device write.
    let s = sched(dev.clone(), &rt, 1);
    let busy = s.submit(IoRequest::read(BUSY_BLOCK, 1));
    dev.wait_arrived(1);
    let fill = |b: u64| AlignedBuf::from_slice(&vec![(b % 251) as u8; BLOCK_SIZE]);
    let order = [204u64, 200, 209, 201, 207, 203, 202, 206, 205, 208];
    let writes: Vec<Ticket> = order.iter().map(|&b| s.submit(IoRequest::write(b, fill(b)))).collect();
    // A far request and a flush: neither merges, and nothing merges across the flush.
    let far = s.submit(IoRequest::write(1500, fill(1500)));
    let flush = s.submit(IoRequest::flush());
    let after = s.submit(IoRequest::write(210, fill(210)));
    dev.open();
    busy.wait().unwrap();
    for (t, &b) in writes.into_iter().zip(&order) {
        let own = t.wait().unwrap();
        assert!(
            own.iter().all(|&x| x == (b % 251) as u8),
            "block {b}'s buffer came back changed"
        );
    }
    far.wait().unwrap();
    flush.wait().unwrap();
    after.wait().unwrap();
    let st = s.stats();
    assert_eq!(st.merged, 9, "ten adjacent writes went as one: {st:?}");
    // The elevator sweeps up from the busy block (1500), then takes 200..210 as one write
    // starting at its lowest block; 210 waited for the flush.
    assert_eq!(dev.blocks_served(), [BUSY_BLOCK, 1500, 200, 210]);

    // Reads of the same blocks, merged, each filled with its own block.
    let reads: Vec<(u64, Ticket)> = {
        s.plug();
        let r = order.iter().map(|&b| (b, s.submit(IoRequest::read(b, 1)))).collect();
        s.unplug();
        r
    };
    for (b, t) in reads {
        let data = t.wait().unwrap();
        assert!(
            data.iter().all(|&x| x == (b % 251) as u8),
            "block {b} read someone else's data"
        );
    }
    assert!(s.stats().merged >= 18, "{:?}", s.stats());
}

#[test]
fn a_merged_request_that_fails_fails_every_part() {
    let rt = Runtime::default();
    let dev = Recorder::new(64, false);
    let s = sched(dev.clone(), &rt, 1);
    let busy = s.submit(IoRequest::read(10, 1));
    dev.wait_arrived(1);
    // 60..64 exist, 64 does not: refused at submission, so 60..63 merge and succeed.
    let ok: Vec<Ticket> = (60..64).map(|b| s.submit(IoRequest::read(b, 1))).collect();
    let past = s.submit(IoRequest::read(64, 1));
    dev.open();
    busy.wait().unwrap();
    assert!(past.wait().is_err());
    for t in ok {
        t.wait().unwrap();
    }
    assert_eq!(s.stats().merged, 3);
}

/// A read its submitter waits for at once is served on that thread when nothing else waits to
/// be dispatched (no completion thread needs to wake it); one nobody waits for goes to the
/// queue's threads; and while one caller reads on its own thread, another caller's read still
/// reaches the device at the same time.
#[test]
fn a_read_its_caller_waits_for_is_served_on_the_callers_thread_without_holding_up_others() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, false);
    let s = Arc::new(caller_dispatched(dev.clone(), &rt, 4, BackendChoice::Threads));
    // Not awaited: handed to the queue's threads, so submit returns while the device holds it.
    let background = s.submit(IoRequest::read(7, 1));
    dev.wait_arrived(1);
    assert!(!background.is_done());
    dev.open();
    background.wait().unwrap();
    // Awaited (a part of a merged pair too): done when submit returns.
    let t = s.submit(IoRequest::read(10, 1).awaited());
    assert!(t.is_done(), "served on the submitting thread");
    t.wait().unwrap();
    s.plug();
    let parts = [
        s.submit(IoRequest::read(20, 1)),
        s.submit(IoRequest::read(21, 1).awaited()),
    ];
    s.unplug();
    assert!(parts.iter().all(Ticket::is_done), "the merged read was served here");
    assert_eq!(s.stats().merged, 1);
    // Two callers, each reading on its own thread, with the device holding requests: both
    // reach it together.
    *dev.open.lock() = false;
    let before = dev.arrived.load(Ordering::SeqCst);
    let readers: Vec<_> = [100u64, 200]
        .into_iter()
        .map(|b| {
            let s = s.clone();
            std::thread::spawn(move || s.submit(IoRequest::read(b, 1).awaited()).wait().unwrap())
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dev.arrived.load(Ordering::SeqCst) < before + 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        dev.arrived.load(Ordering::SeqCst),
        before + 2,
        "the second caller's read waited for the first's"
    );
    dev.open();
    for r in readers {
        r.join().unwrap();
    }
    assert!(dev.max_active.load(Ordering::SeqCst) >= 2);
}

/// The file system's own requests (made under a lock every user waits for) go before the data
/// requests waiting beside them, whatever the policy would choose, but not past a flush.
#[test]
fn the_file_systems_own_requests_go_before_waiting_data() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, false);
    let s = sched(dev.clone(), &rt, 1);
    let busy = s.submit(IoRequest::read(BUSY_BLOCK, 1));
    dev.wait_arrived(1);
    let mut tickets: Vec<Ticket> = [500u64, 10, 700]
        .iter()
        .map(|&b| s.submit(IoRequest::read(b, 1)))
        .collect();
    tickets.push(s.submit(IoRequest::read(900, 1).metadata()));
    tickets.push(s.submit(IoRequest::flush()));
    tickets.push(s.submit(IoRequest::read(950, 1).metadata()));
    dev.open();
    busy.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    let served = dev.blocks_served();
    assert_eq!(served[1], 900, "the metadata read went first: {served:?}");
    assert_eq!(
        *served.last().unwrap(),
        950,
        "but not past the flush before it: {served:?}"
    );
}

#[test]
fn a_flush_with_no_write_sent_since_the_last_does_not_reach_the_device() {
    let rt = Runtime::default();
    let dev = Recorder::new(64, true);
    let s = sched(dev.clone(), &rt, 2);
    let flushes = || dev.log.lock().iter().filter(|(op, _)| *op == IoOp::Flush).count();
    s.flush_sync().unwrap();
    assert_eq!(flushes(), 1, "the first flush goes: earlier writes are not known");
    s.flush_sync().unwrap();
    s.read_sync(3, &mut [0u8; BLOCK_SIZE]).unwrap();
    s.flush_sync().unwrap();
    assert_eq!(flushes(), 1, "nothing written since: reads need no flush");
    s.write_sync(3, &[1u8; BLOCK_SIZE]).unwrap();
    assert_eq!(dev.inner.unflushed_writes(), 1);
    s.flush_sync().unwrap();
    assert_eq!((flushes(), dev.inner.unflushed_writes()), (2, 0));
    s.flush_sync().unwrap();
    assert_eq!(flushes(), 2);
    // A flush that fails leaves the writes unflushed: the next one goes to the device again.
    s.write_sync(4, &[2u8; BLOCK_SIZE]).unwrap();
    dev.inner.fail_flush(1);
    assert!(s.flush_sync().is_err());
    s.flush_sync().unwrap();
    assert_eq!((flushes(), dev.inner.unflushed_writes()), (4, 0));
    let st = s.stats();
    assert_eq!((st.flushes, st.flushes_elided), (4, 3));
    assert_eq!(st.completed + st.merged + st.flushes_elided, st.submitted);
}

#[test]
fn a_candidate_in_shadow_is_judged_on_the_live_decisions_and_changes_none() {
    let rt = Runtime::default();
    let dev = Recorder::new(1024, false);
    let s = sched(dev.clone(), &rt, 1);
    // FIFO in shadow beside the elevator: the elevator still decides.
    s.try_start(&build("fifo"), Owner::process(1), Some(1), 1024).unwrap();
    assert_eq!(serve_batch(&s, &dev, &BATCH), SWEEP);
    let r = s.try_stop().unwrap();
    assert_eq!(r.agreement.followed, 5, "every decision among several");
    assert!(r.agreement.agreed < 5, "FIFO and the elevator differ: {r:?}");
    assert_eq!(r.agreement.shadow.decisions, 5);
    assert_eq!(r.agreement.shadow.failures, 0);
    // The model: the elevator's next requests are nearer the head than FIFO's.
    assert!(r.live_seek_blocks < r.candidate_seek_blocks, "{r:?}");
    // The elevator in shadow beside itself agrees with every decision.
    let dev = Recorder::new(1024, false);
    let s = sched(dev.clone(), &rt, 1);
    s.try_start(&build("elevator"), Owner::process(1), Some(1), 1024)
        .unwrap();
    serve_batch(&s, &dev, &BATCH);
    let r = s.try_stop().unwrap();
    assert_eq!((r.agreement.followed, r.agreement.agreed), (5, 5), "{r:?}");
    // A candidate that loops is dropped; the live order is the elevator's all along.
    let dev = Recorder::new(1024, false);
    let s = sched(dev.clone(), &rt, 1);
    let loops = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
      (func (export "disk_pick_request") (param i32 i64) (result i32) (loop (br 0)) (i32.const 0)))"#;
    s.try_start(loops.as_bytes(), Owner::process(1), Some(1), 1024).unwrap();
    assert_eq!(serve_batch(&s, &dev, &BATCH), SWEEP);
    let r = s.try_stop().unwrap();
    assert_eq!(r.agreement.shadow.failures, 5, "{r:?}");
    assert_eq!(
        r.agreement.agreed, 5,
        "a failed candidate's decision is the default's, here the live one"
    );
}
