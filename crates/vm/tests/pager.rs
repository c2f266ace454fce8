//! The pager on real userfaultfd faults: memory larger than its resident limit keeps every
//! byte written, pages go to swap and come back, hostile grafts' answers are refused, a memory
//! out of swap ends alone, and nothing is held once the memory is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use vino_vm::{MEMORY_OBJECT, MemSwap, Owner, PAGE, Pager, PagerConfig, SwapStore};

/// A process as the tests play it: a graft answer to give, a swap charge, a kill flag.
#[derive(Default)]
struct Proc {
    pid: u64,
    uid: u32,
    /// -1: no graft; otherwise the index it answers (as given, possibly invalid).
    answer: AtomicI64,
    /// Answer with the last candidate offered.
    pick_last: AtomicBool,
    around: AtomicU64,
    swap: AtomicU64,
    swap_limit: AtomicU64,
    killed: AtomicBool,
    offered_foreign: AtomicBool,
}

impl Proc {
    fn new(pid: u64, uid: u32) -> Arc<Proc> {
        let p = Proc {
            pid,
            uid,
            swap_limit: AtomicU64::new(u64::MAX),
            ..Proc::default()
        };
        p.answer.store(-1, Ordering::SeqCst);
        Arc::new(p)
    }
}

impl Owner for Proc {
    fn pid(&self) -> u64 {
        self.pid
    }
    fn uid(&self) -> u32 {
        self.uid
    }
    fn pick_victim(&self, candidates: &[u64]) -> Option<usize> {
        if candidates.iter().any(|id| id >> 32 != MEMORY_OBJECT) {
            self.offered_foreign.store(true, Ordering::SeqCst);
        }
        if self.pick_last.load(Ordering::SeqCst) {
            return Some(candidates.len() - 1);
        }
        let a = self.answer.load(Ordering::SeqCst);
        (a >= 0).then_some(a as usize)
    }
    fn has_fault_around(&self) -> bool {
        self.around.load(Ordering::SeqCst) > 0
    }
    fn fault_around(&self, page: u64, pages: u64) -> Option<(u64, u64)> {
        let n = self.around.load(Ordering::SeqCst);
        (n > 0).then(|| (page, n.min(pages - page)))
    }
    fn charge_swap(&self, pages: u64) -> bool {
        let now = self.swap.fetch_add(pages, Ordering::SeqCst) + pages;
        if now > self.swap_limit.load(Ordering::SeqCst) {
            self.swap.fetch_sub(pages, Ordering::SeqCst);
            return false;
        }
        true
    }
    fn uncharge_swap(&self, pages: u64) {
        self.swap.fetch_sub(pages, Ordering::SeqCst);
    }
    fn out_of_swap(&self) {
        self.killed.store(true, Ordering::SeqCst);
    }
}

fn pager(per_process: u64, total: u64, swap_pages: u64) -> Option<(Pager, Arc<MemSwap>)> {
    let store = Arc::new(MemSwap::default());
    let config = PagerConfig {
        resident_per_process: per_process,
        resident_total: total,
        swap_pages,
        swap_chunk: 64,
        fault_threads: 2,
        ..PagerConfig::default()
    };
    match Pager::new(config, store.clone()) {
        Ok(p) => Some((p, store)),
        Err(e) => {
            eprintln!("skipped: no userfaultfd here ({e})");
            None
        }
    }
}

/// Writes a pattern naming each page, then reads it all back.
fn write_and_check(base: *mut u8, pages: usize, salt: u8) {
    for p in 0..pages {
        // SAFETY: the page lies in the memory's usable part.
        unsafe {
            let at = base.add(p * PAGE);
            at.write_volatile(salt);
            at.add(1).write_volatile(p as u8);
            at.add(PAGE - 1).write_volatile((p >> 8) as u8);
        }
    }
    for p in 0..pages {
        // SAFETY: as above.
        let got = unsafe {
            let at = base.add(p * PAGE);
            (
                at.read_volatile(),
                at.add(1).read_volatile(),
                at.add(PAGE - 1).read_volatile(),
            )
        };
        assert_eq!(got, (salt, p as u8, (p >> 8) as u8), "page {p}");
    }
}

#[test]
fn memory_larger_than_its_limit_keeps_every_byte() {
    let Some((pager, _)) = pager(16, 1024, 4096) else {
        return;
    };
    let owner = Proc::new(1, 1000);
    let mem = pager.create(1 << 20, 1 << 20, 64 << 10, owner.clone()).unwrap();
    write_and_check(mem.as_ptr(), 256, 7);
    write_and_check(mem.as_ptr(), 256, 9);
    pager.settle();
    let s = mem.stats();
    assert!(s.resident <= 16 + vino_vm::FAULT_AROUND_MAX + 2, "{s:?}");
    assert!(s.swap_outs > 200 && s.swap_ins > 200, "{s:?}");
    assert!(
        s.zero_faults <= 256 / 8,
        "first touches fill the untouched pages after them: {s:?}"
    );
    assert!(s.evicted_by_default > 0 && s.evicted_by_graft == 0);
    assert!(!owner.offered_foreign.load(Ordering::SeqCst));
    pager.check().unwrap();
    assert_eq!(owner.swap.load(Ordering::SeqCst), s.swapped, "swap charged as held");
    drop(mem);
    let after = pager.stats();
    assert_eq!(
        (after.frames, after.swap_in_use, after.staged, after.memories),
        (0, 0, 0, 0),
        "{after:?}"
    );
    assert_eq!(owner.swap.load(Ordering::SeqCst), 0, "swap uncharged at the end");
}

#[test]
fn pages_of_zeros_take_no_swap() {
    let Some((pager, _)) = pager(8, 1024, 4096) else { return };
    let owner = Proc::new(1, 1000);
    let mem = pager.create(512 << 10, 1 << 20, 0, owner.clone()).unwrap();
    for p in 0..128 {
        // SAFETY: reads of the usable part.
        assert_eq!(unsafe { mem.as_ptr().add(p * PAGE).read_volatile() }, 0);
    }
    let s = mem.stats();
    assert_eq!(s.swap_outs, 0, "{s:?}");
    assert_eq!(owner.swap.load(Ordering::SeqCst), 0);
}

#[test]
fn swap_lies_enciphered_in_the_store() {
    let Some((pager, store)) = pager(4, 1024, 4096) else {
        return;
    };
    let owner = Proc::new(1, 1000);
    let mem = pager.create(256 << 10, 256 << 10, 0, owner).unwrap();
    let secret = b"a secret the next owner of the blocks must not read";
    for p in 0..64 {
        // SAFETY: writes within the usable part.
        unsafe { std::ptr::copy_nonoverlapping(secret.as_ptr(), mem.as_ptr().add(p * PAGE), secret.len()) };
    }
    pager.settle();
    assert!(mem.stats().swap_outs > 32);
    let mut raw = vec![0u8; PAGE];
    for slot in 0..store.pages() {
        store.read(slot, &mut raw).unwrap();
        assert!(
            !raw.windows(secret.len()).any(|w| w == secret),
            "slot {slot} holds the plain page"
        );
    }
}

#[test]
fn a_graft_chooses_among_its_own_pages_and_invalid_answers_are_refused() {
    let Some((pager, _)) = pager(16, 1024, 4096) else {
        return;
    };
    let owner = Proc::new(1, 1000);
    let mem = pager.create(1 << 20, 1 << 20, 0, owner.clone()).unwrap();
    owner.pick_last.store(true, Ordering::SeqCst);
    write_and_check(mem.as_ptr(), 128, 1);
    pager.settle();
    let s = mem.stats();
    assert!(s.evicted_by_graft > 50, "{s:?}");
    owner.pick_last.store(false, Ordering::SeqCst);
    owner.answer.store(100_000, Ordering::SeqCst);
    write_and_check(mem.as_ptr(), 128, 2);
    pager.settle();
    let t = mem.stats();
    assert!(t.graft_refused > 50, "{t:?}");
    assert!(t.evicted_by_default > s.evicted_by_default);
    pager.check().unwrap();
}

#[test]
fn fault_around_brings_neighbours_and_an_overreaching_answer_is_refused() {
    let Some((pager, _)) = pager(1024, 4096, 4096) else {
        return;
    };
    let owner = Proc::new(1, 1000);
    let mem = pager.create(1 << 20, 1 << 20, 0, owner.clone()).unwrap();
    owner.around.store(8, Ordering::SeqCst);
    write_and_check(mem.as_ptr(), 64, 3);
    pager.settle();
    let s = mem.stats();
    assert!(s.zero_faults <= 16, "one fault per 8 pages or so: {s:?}");
    assert!(s.faulted_around >= 48, "{s:?}");
    owner.around.store(1000, Ordering::SeqCst);
    write_and_check(mem.as_ptr(), 128, 4);
    pager.settle();
    assert!(mem.stats().graft_refused > 0);
}

#[test]
fn a_memory_out_of_swap_is_ended_alone() {
    let Some((pager, _)) = pager(8, 4096, 4096) else { return };
    let hog = Proc::new(1, 1000);
    hog.swap_limit.store(16, Ordering::SeqCst);
    let other = Proc::new(2, 1001);
    let a = pager.create(1 << 20, 1 << 20, 0, hog.clone()).unwrap();
    let b = pager.create(256 << 10, 256 << 10, 0, other.clone()).unwrap();
    // The hog goes on touching (its kill would end it at its next tick in the kernel).
    write_and_check(a.as_ptr(), 64, 5);
    pager.settle();
    assert!(hog.killed.load(Ordering::SeqCst));
    write_and_check(b.as_ptr(), 64, 6);
    pager.settle();
    assert!(!other.killed.load(Ordering::SeqCst));
    assert!(b.stats().swap_outs > 0);
    pager.check().unwrap();
}

#[test]
fn the_total_is_shared_out_between_memories() {
    let Some((pager, _)) = pager(1024, 64, 8192) else {
        return;
    };
    let (p1, p2) = (Proc::new(1, 1000), Proc::new(2, 1001));
    let a = pager.create(1 << 20, 1 << 20, 0, p1).unwrap();
    let b = pager.create(1 << 20, 1 << 20, 0, p2).unwrap();
    write_and_check(a.as_ptr(), 200, 1);
    write_and_check(b.as_ptr(), 200, 2);
    pager.settle();
    let total = pager.stats().frames;
    assert!(total <= 64 + vino_vm::FAULT_AROUND_MAX + 2, "{total}");
    // The first memory gave up what it held past its fair share when the second grew.
    assert!(a.stats().resident <= 40, "{:?} {:?}", a.stats(), b.stats());
    write_and_check(a.as_ptr(), 200, 3);
    pager.check().unwrap();
}

#[test]
fn threads_touching_one_memory_at_once_see_their_own_bytes() {
    let Some((pager, _)) = pager(32, 1024, 8192) else {
        return;
    };
    let owner = Proc::new(1, 1000);
    let mem = pager.create(4 << 20, 4 << 20, 0, owner).unwrap();
    let base = mem.as_ptr() as usize;
    std::thread::scope(|s| {
        for t in 0..4usize {
            s.spawn(move || {
                for round in 0..3u8 {
                    for p in (t..1024).step_by(4) {
                        // SAFETY: each thread its own pages of the usable part.
                        unsafe { (base as *mut u8).add(p * PAGE).write_volatile(round ^ p as u8) };
                    }
                    for p in (t..1024).step_by(4) {
                        // SAFETY: as above.
                        let v = unsafe { (base as *const u8).add(p * PAGE).read_volatile() };
                        assert_eq!(v, round ^ p as u8);
                    }
                }
            });
        }
    });
    pager.check().unwrap();
}
