//! Asynchronous queues: both backends, depth, completions, errors.

mod common;

use common::{Gate, pattern};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use vino_blockdev::{
    AlignedBuf, BLOCK_SIZE, Backend, BackendChoice, BlockDevice, Completer, FileDevice, IoOp, IoQueue, IoRequest,
    MemDevice, QueueConfig, uring_available,
};

const BLOCKS: u64 = 256;

fn image() -> (tempfile::TempDir, Arc<FileDevice>) {
    let dir = tempfile::tempdir().unwrap();
    let dev = FileDevice::create(dir.path().join("disk.img"), BLOCKS * BLOCK_SIZE as u64).unwrap();
    (dir, Arc::new(dev))
}

fn queue(dev: Arc<dyn BlockDevice>, depth: usize, backend: BackendChoice) -> io::Result<IoQueue> {
    IoQueue::with_config(
        dev,
        QueueConfig {
            depth,
            backend,
            ..QueueConfig::default()
        },
    )
}

/// Writes every block through the queue (many in flight), flushes, and reads it all back.
fn round_trip(q: &IoQueue, version: u8) {
    let tickets: Vec<_> = (0..BLOCKS)
        .map(|b| q.submit(IoRequest::write(b, AlignedBuf::from_slice(&pattern(b, version)))))
        .collect();
    for t in tickets {
        t.wait().unwrap();
    }
    q.submit(IoRequest::flush()).wait().unwrap();
    // Reads of 1..=4 blocks, submitted all at once, waited for in reverse order.
    let mut tickets = Vec::new();
    let mut b = 0;
    while b < BLOCKS {
        let n = (1 + b % 4).min(BLOCKS - b);
        tickets.push((b, n, q.submit(IoRequest::read(b, n as usize))));
        b += n;
    }
    for (b, n, t) in tickets.into_iter().rev() {
        let buf = t.wait().unwrap();
        assert_eq!(buf.blocks() as u64, n);
        for i in 0..n {
            let got = &buf[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE];
            assert!(
                got == pattern(b + i, version).as_slice(),
                "block {} differs ({:?})",
                b + i,
                q.backend()
            );
        }
    }
}

#[test]
fn the_inline_backend_serves_each_request_before_submit_returns() {
    let (_dir, dev) = image();
    let q = queue(dev.clone(), 4, BackendChoice::Inline).unwrap();
    assert_eq!(q.backend(), Backend::Inline);
    let t = q.submit(IoRequest::write(3, AlignedBuf::from_slice(&pattern(3, 9))));
    assert!(t.is_done());
    t.wait().unwrap();
    assert_eq!(q.in_flight(), 0);
    round_trip(&q, 1);
    assert_eq!(q.max_in_flight(), 1, "one at a time, on the caller's thread");
}

#[test]
fn thread_pool_backend_round_trips() {
    let (_dir, dev) = image();
    let q = queue(dev.clone(), 8, BackendChoice::Threads).unwrap();
    assert_eq!(q.backend(), Backend::Threads);
    round_trip(&q, 1);
    let s = dev.stats();
    assert_eq!(s.writes, BLOCKS);
    assert_eq!(s.blocks_read, BLOCKS);
    assert_eq!(s.flushes, 1);
}

#[test]
fn uring_backend_round_trips_and_agrees_with_the_thread_pool() {
    if let Err(why) = uring_available() {
        println!("note: io_uring unavailable here ({why}); the io_uring backend is not tested");
        let (_dir, dev) = image();
        let q = IoQueue::new(dev, 4).unwrap();
        assert_eq!(q.backend(), Backend::Threads, "Auto falls back to threads");
        assert!(q.uring_unavailable_reason().is_some());
        return;
    }
    let (_dir, dev) = image();
    let q = IoQueue::new(dev.clone(), 16).unwrap();
    assert_eq!(q.backend(), Backend::Uring, "Auto picks io_uring for a file device");
    round_trip(&q, 2);
    let s = dev.stats();
    assert_eq!(
        (s.writes, s.blocks_written, s.flushes),
        (BLOCKS, BLOCKS, 1),
        "the ring updates the device's counters"
    );
    assert!(s.busy_ns > 0);
    // The same bytes through the other backend and the synchronous path.
    let threads = queue(dev.clone(), 4, BackendChoice::Threads).unwrap();
    for b in [0, 17, BLOCKS - 1] {
        let via_pool = threads.submit(IoRequest::read(b, 1)).wait().unwrap();
        let via_ring = q.submit(IoRequest::read(b, 1)).wait().unwrap();
        let mut sync = vec![0u8; BLOCK_SIZE];
        dev.read_blocks(b, &mut sync).unwrap();
        assert!(via_pool[..] == via_ring[..], "block {b}: the backends disagree");
        assert!(
            via_ring[..] == sync[..],
            "block {b}: io_uring and the synchronous path disagree"
        );
    }
    // Errors from the ring carry the device's name.
    let e = q.submit(IoRequest::read(BLOCKS, 1)).wait().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("disk.img"), "{e}");
}

#[test]
fn asking_for_uring_where_it_cannot_be_is_an_error() {
    let mem: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(8));
    let e = queue(mem.clone(), 2, BackendChoice::Uring).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    assert!(e.to_string().contains("no file descriptor"), "{e}");
    let q = queue(mem, 2, BackendChoice::Auto).unwrap();
    assert_eq!(q.backend(), Backend::Threads);
    assert!(q.uring_unavailable_reason().unwrap().contains("mem:8"));
}

#[test]
fn depth_is_honoured() {
    {
        let backend = BackendChoice::Threads;
        let gate = Arc::new(Gate::new(64));
        let q = Arc::new(
            IoQueue::with_config(
                gate.clone(),
                QueueConfig {
                    depth: 3,
                    backend,
                    threads: 8,
                    hook: None,
                },
            )
            .unwrap(),
        );
        let first: Vec<_> = (0..3).map(|b| q.submit(IoRequest::read(b, 1))).collect();
        assert_eq!(q.in_flight(), 3);
        let refused = q.try_submit(IoRequest::read(9, 1)).expect_err("the queue is full");
        assert_eq!(refused.block, 9, "the request comes back intact");
        // A blocking submitter waits for a place.
        let q2 = q.clone();
        let more = std::thread::spawn(move || (3..10).map(|b| q2.submit(IoRequest::read(b, 1))).collect::<Vec<_>>());
        gate.wait_arrived(3);
        assert!(first.iter().all(|t| !t.is_done()));
        gate.open();
        for t in first.into_iter().chain(more.join().unwrap()) {
            t.wait().unwrap();
        }
        assert_eq!(q.max_in_flight(), 3);
        assert!(gate.max_active.load(Ordering::SeqCst) <= 3);
        assert_eq!(q.counts(), (10, 10));
        assert_eq!(q.in_flight(), 0);
    }
}

#[test]
fn completions_arrive_asynchronously() {
    let gate = Arc::new(Gate::new(16));
    gate.inner.write_blocks(5, &pattern(5, 9)).unwrap();
    let q = IoQueue::new(gate.clone(), 4).unwrap();
    // Read-ahead issued without blocking; a demand read waited for on its own.
    let ahead = q.submit(IoRequest::read(6, 2));
    let wanted = q.submit(IoRequest::read(5, 1));
    gate.wait_arrived(2);
    assert!(!wanted.is_done() && !ahead.is_done());
    assert!(!wanted.wait_timeout(Duration::from_millis(5)), "the gate is shut");
    gate.open();
    assert!(wanted.wait().unwrap()[..] == pattern(5, 9)[..]);
    assert_eq!(ahead.wait().unwrap().blocks(), 2);
}

#[test]
fn a_read_fills_the_callers_own_buffer() {
    let mem = Arc::new(MemDevice::new(8));
    mem.write_blocks(3, &pattern(3, 1)).unwrap();
    let q = IoQueue::new(mem, 2).unwrap();
    let frame = AlignedBuf::new(1);
    let at = frame.as_ptr();
    let back = q.submit(IoRequest::read_into(3, frame)).wait().unwrap();
    assert_eq!(back.as_ptr(), at, "the same frame comes back");
    assert!(back[..] == pattern(3, 1)[..]);
}

#[test]
fn bad_requests_fail_clearly_and_the_hook_hears_of_everything() {
    let heard = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (h, f) = (heard.clone(), failed.clone());
    let hook = Arc::new(move |done: &vino_blockdev::Finished| {
        h.fetch_add(1, Ordering::SeqCst);
        if !done.ok {
            f.fetch_add(1, Ordering::SeqCst);
        }
    });
    let mem = Arc::new(MemDevice::new(8));
    let q = IoQueue::with_config(
        mem.clone(),
        QueueConfig {
            depth: 2,
            hook: Some(hook),
            ..QueueConfig::default()
        },
    )
    .unwrap();
    let e = q.submit(IoRequest::read(7, 2)).wait().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("blocks 7..9 are past the end"), "{e}");
    let e = q
        .submit(IoRequest::write(u64::MAX, AlignedBuf::new(1)))
        .wait()
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // Nothing to transfer is fine.
    assert!(q.submit(IoRequest::read(0, 0)).wait().unwrap().is_empty());
    // A device failure reaches the ticket.
    mem.fail_write(1);
    let e = q.submit(IoRequest::write(1, AlignedBuf::new(1))).wait().unwrap_err();
    assert!(e.to_string().contains("injected failure of write"), "{e}");
    q.submit(IoRequest::write(1, AlignedBuf::new(1))).wait().unwrap();
    q.submit(IoRequest::flush()).wait().unwrap();
    q.drain();
    assert_eq!(heard.load(Ordering::SeqCst), 6);
    assert_eq!(failed.load(Ordering::SeqCst), 3);
    assert_eq!(mem.stats().errors, 3, "refusals and failures are counted on the device");
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn dropping_a_queue_lets_requests_in_flight_finish() {
    let gate = Arc::new(Gate::new(8));
    let q = IoQueue::new(gate.clone(), 4).unwrap();
    let tickets: Vec<_> = (0..4)
        .map(|b| q.submit(IoRequest::write(b, AlignedBuf::from_slice(&pattern(b, 3)))))
        .collect();
    gate.wait_arrived(4);
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.open())
    };
    drop(q);
    opener.join().unwrap();
    for t in tickets {
        assert!(t.is_done());
        t.wait().unwrap();
    }
    let mut buf = vec![0u8; BLOCK_SIZE];
    gate.inner.read_blocks(3, &mut buf).unwrap();
    assert!(buf == pattern(3, 3));
}

#[test]
fn uring_queue_depth_and_many_requests() {
    if let Err(why) = uring_available() {
        println!("note: io_uring unavailable here ({why}); skipped");
        return;
    }
    let (_dir, dev) = image();
    let q = Arc::new(queue(dev.clone(), 4, BackendChoice::Uring).unwrap());
    // Four submitters, each with many requests: never more than four in flight.
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let q = q.clone();
            std::thread::spawn(move || {
                for round in 0..50u64 {
                    let b = (w * 50 + round) % BLOCKS;
                    q.submit(IoRequest::write(b, AlignedBuf::from_slice(&pattern(b, 4))))
                        .wait()
                        .unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(q.max_in_flight() <= 4);
    assert_eq!(q.counts(), (200, 200));
    let buf = q.submit(IoRequest::read(199, 1)).wait().unwrap();
    assert!(buf[..] == pattern(199, 4)[..], "the last block written reads back");
}

/// A vectored write then read of parts of 1-3 blocks: one device request each way, every part
/// landing where it belongs, and every buffer handed back in order to a `then_all` completer.
fn vectored_round_trip(q: &IoQueue, dev: &dyn BlockDevice, version: u8) {
    let (first, sizes) = (40u64, [1usize, 3, 2, 1, 2]);
    let total: usize = sizes.iter().sum();
    let mut block = first;
    let mut parts = Vec::new();
    for n in sizes {
        let bytes: Vec<u8> = (0..n as u64).flat_map(|i| pattern(block + i, version)).collect();
        parts.push(AlignedBuf::from_slice(&bytes));
        block += n as u64;
    }
    let writes = dev.stats().writes;
    q.submit(IoRequest::vectored(IoOp::Write, first, parts)).wait().unwrap();
    assert_eq!(dev.stats().writes, writes + 1, "one device write for every part");
    let mut plain = vec![0u8; total * BLOCK_SIZE];
    dev.read_blocks(first, &mut plain).unwrap();
    for i in 0..total {
        let b = first + i as u64;
        assert!(
            plain[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE] == pattern(b, version)[..],
            "block {b} was written wrong"
        );
    }
    let reads = dev.stats().reads;
    let bufs: Vec<AlignedBuf> = sizes.iter().map(|&n| AlignedBuf::new(n)).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    q.submit_with(
        IoRequest::vectored(IoOp::Read, first, bufs),
        Completer::then_all(move |r| tx.send(r).unwrap()),
    );
    let back = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(dev.stats().reads, reads + 1, "one device read for every part");
    assert_eq!(
        back.iter().map(|b| b.blocks()).collect::<Vec<_>>(),
        sizes,
        "the parts come back in order"
    );
    let joined: Vec<u8> = back.iter().flat_map(|b| b.iter().copied()).collect();
    assert!(
        joined == plain,
        "the parts hold what a plain read holds ({:?})",
        q.backend()
    );
    // A part that is not whole blocks is refused, not transferred.
    let bad = IoRequest::vectored(IoOp::Read, first, vec![AlignedBuf::new(1), AlignedBuf::new(0)]);
    assert!(q.submit(bad).wait().is_ok(), "an empty part is whole blocks");
    let past_end = IoRequest::vectored(IoOp::Read, BLOCKS - 1, vec![AlignedBuf::new(1), AlignedBuf::new(1)]);
    assert_eq!(
        q.submit(past_end).wait().unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn vectored_transfers_fill_and_write_each_part_in_place_on_every_backend_and_device() {
    let mut backends = vec![BackendChoice::Inline, BackendChoice::Threads];
    if uring_available().is_ok() {
        backends.push(BackendChoice::Uring);
    }
    for (i, backend) in backends.into_iter().enumerate() {
        let (_dir, file) = image();
        let q = queue(file.clone(), 8, backend).unwrap();
        vectored_round_trip(&q, &*file, i as u8);
        // A device without vectored transfers of its own reads into one buffer and copies out
        // (such a device has no descriptor for io_uring).
        if backend == BackendChoice::Uring {
            continue;
        }
        let mem = Arc::new(MemDevice::new(BLOCKS));
        let q = queue(mem.clone(), 8, backend).unwrap();
        vectored_round_trip(&q, &*mem, i as u8 + 10);
    }
}
