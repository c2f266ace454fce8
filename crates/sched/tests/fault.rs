//! A thread blocked on a page fault that waits on I/O gives its worker to another, as one
//! blocked in a system call does: a real pager (userfaultfd) whose swap is slow to read, a
//! one-worker scheduler, and a second process that must run while the first one's fault waits.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vino_graft::Runtime;
use vino_sched::{SchedConfig, Scheduler};
use vino_vm::{MemSwap, Owner, PAGE, Pager, PagerConfig, SwapStore};

/// Swap in memory whose reads take `DELAY` once `slow` is set (a busy disk).
#[derive(Default)]
struct SlowSwap {
    pages: MemSwap,
    slow: AtomicBool,
}

const DELAY: Duration = Duration::from_millis(300);

impl SlowSwap {
    fn wait(&self) {
        if self.slow.load(Ordering::SeqCst) {
            std::thread::sleep(DELAY);
        }
    }
}

impl SwapStore for SlowSwap {
    fn pages(&self) -> u64 {
        self.pages.pages()
    }
    fn grow(&self, pages: u64) -> io::Result<u64> {
        self.pages.grow(pages)
    }
    fn write(&self, slot: u64, page: &[u8]) -> io::Result<()> {
        self.pages.write(slot, page)
    }
    fn read(&self, slot: u64, page: &mut [u8]) -> io::Result<()> {
        self.wait();
        self.pages.read(slot, page)
    }
    fn read_run(&self, first: u64, pages: &mut [u8]) -> io::Result<()> {
        self.wait();
        self.pages.read_run(first, pages)
    }
}

/// A process whose faults the scheduler hears of, as the kernel's are.
struct Proc;

impl Owner for Proc {
    fn pid(&self) -> u64 {
        1
    }
    fn uid(&self) -> u32 {
        1
    }
    fn fault_waits(&self, thread: u32) {
        vino_sched::fault_waits(thread);
    }
    fn fault_served(&self, thread: u32) {
        vino_sched::fault_served(thread);
    }
}

#[test]
fn a_thread_blocked_on_a_slow_fault_leaves_its_place_to_another() {
    let swap = Arc::new(SlowSwap::default());
    let config = PagerConfig {
        resident_per_process: 16,
        resident_total: 1024,
        swap_pages: 4096,
        swap_chunk: 64,
        ..PagerConfig::default()
    };
    let pager = match Pager::new(config, swap.clone()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipped: no userfaultfd here ({e})");
            return;
        }
    };
    let pages = 256;
    let memory = Arc::new(pager.create(pages * PAGE, pages * PAGE, 0, Arc::new(Proc)).unwrap());
    for p in 0..pages {
        assert!(memory.write_byte(p * PAGE, 7));
    }
    pager.settle();
    assert!(memory.stats().swapped > 0, "{:?}", memory.stats());
    swap.slow.store(true, Ordering::SeqCst);

    let rt = Runtime::default();
    let s = Scheduler::new(
        &rt,
        SchedConfig {
            workers: 1,
            ..SchedConfig::default()
        },
    );
    s.add_process(1, 1);
    s.add_process(2, 2);
    let other_ran = Arc::new(AtomicBool::new(false));
    let (done, faulted) = std::sync::mpsc::channel();
    let faulting = {
        let (memory, other_ran) = (memory.clone(), other_ran.clone());
        s.spawn(1, move |_| async move {
            // Page 0 went to swap first: its fault reads the slow swap on a fault thread.
            let byte = memory.read_byte(0);
            done.send((byte, other_ran.load(Ordering::SeqCst))).unwrap();
        })
        .unwrap()
    };
    std::thread::sleep(Duration::from_millis(20));
    let other = {
        let other_ran = other_ran.clone();
        s.spawn(2, move |_| async move { other_ran.store(true, Ordering::SeqCst) })
            .unwrap()
    };
    let (byte, ran_during) = faulted.recv_timeout(Duration::from_secs(30)).unwrap();
    faulting.join();
    other.join();
    assert_eq!(byte, Some(7), "the page came back from swap");
    assert!(
        ran_during,
        "one worker, its thread in a {DELAY:?} fault: the other process ran only after it"
    );
    // (A fault reported late may cost one more, needless, hand-off.)
    assert!(s.stats().handoffs >= 1, "{:?}", s.stats());
    // The count of polling workers came back right: threads still run.
    for _ in 0..3 {
        s.spawn(2, |ctx| async move { ctx.yield_now().await }).unwrap().join();
    }
}
