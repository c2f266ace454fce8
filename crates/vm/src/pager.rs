//! The pager: program memories reserved and registered with userfaultfd, their faults served on
//! threads of its own, resident sets kept to the limits the kernel gives, and pages out to
//! swap.
//!
//! A fault is served in three steps, and only the first keeps the program waiting: (1) the page
//! itself comes in (zeros on first touch, back from staging, or from swap), which wakes the
//! program; (2) the owner's fault-around graft, if any, names neighbours to bring in too; (3)
//! if the memory now holds more frames than its share, pages go (the owner's `vas.pick_victim`
//! graft choosing which). Grafts run only after the program is awake: a program stuck in a
//! fault may hold a lock a graft's call needs, and must not wait for it.
//!
//! Faults queue per user, and one user is served by one thread at a time, so a user whose
//! faults are slow (swap on a busy disk, a graft at its budget) takes one fault thread, never
//! all of them.

use crate::maps::{self, MAX_MAPPINGS, MapMode, MapSource, Mapping};
use crate::swap::{NoSlot, PAGE, Swap, SwapStore};
use crate::table::{Page, Table};
use crate::uffd::{Fault, Placed, Uffd};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// The object id program pages carry in the page ids a `vas.pick_victim` graft sees (file pages
/// carry their file's): `(MEMORY_OBJECT << 32) | page index`.
pub const MEMORY_OBJECT: u64 = 0xFFFF_FFFF;

/// Most candidates offered to a `vas.pick_victim` graft per eviction.
pub const VICTIM_CANDIDATES: usize = 256;

/// Most pages a fault-around graft may bring in with one fault.
pub const FAULT_AROUND_MAX: u64 = 32;

/// The page id of page `index` of program memory.
pub fn memory_page_id(index: u32) -> u64 {
    (MEMORY_OBJECT << 32) | u64::from(index)
}

/// What the kernel tells the pager about a memory's process.
pub trait Owner: Send + Sync {
    fn pid(&self) -> u64;
    /// Whose fault queue its faults join.
    fn uid(&self) -> u32;
    /// Which of `candidates` (page ids, the default's choice first) goes: the process's
    /// `vas.pick_victim` graft. `None`: no graft, or it failed (the first goes).
    fn pick_victim(&self, _candidates: &[u64]) -> Option<usize> {
        None
    }
    /// Which pages come in with a fault at `page` of `pages`: the process's `vm.fault_around`
    /// graft, `(first, count)` checked by the pager. `None`: the page alone.
    fn fault_around(&self, _page: u64, _pages: u64) -> Option<(u64, u64)> {
        None
    }
    /// Whether it has a `vm.fault_around` graft (faults served at once still consult it).
    fn has_fault_around(&self) -> bool {
        false
    }
    /// Charges `pages` of swap to the process's user; false at its limit.
    fn charge_swap(&self, _pages: u64) -> bool {
        true
    }
    fn uncharge_swap(&self, _pages: u64) {}
    /// The process needs swap and there is none for it: the kernel ends it (alone).
    fn out_of_swap(&self) {}
    /// A fault of OS thread `thread` was queued: it waits on I/O or behind a graft, and the
    /// kernel may give the CPU it held to another (called before the fault can be served).
    fn fault_waits(&self, _thread: u32) {}
    /// That fault is served: its thread is awake.
    fn fault_served(&self, _thread: u32) {}
}

/// Limits and sizes of a pager.
#[derive(Debug, Clone)]
pub struct PagerConfig {
    /// Most frames one memory holds.
    pub resident_per_process: u64,
    /// Most frames all memories hold together; each memory's fair share is this over the
    /// memories there are (Cao's rule: the kernel says how many, the process says which).
    pub resident_total: u64,
    /// Most pages of swap.
    pub swap_pages: u64,
    /// Pages the swap grows by at a time.
    pub swap_chunk: u64,
    /// Threads serving faults.
    pub fault_threads: usize,
    /// How long an eviction waits for the swap area to grow when no slot is free (past it the
    /// memory stays over its share for now: growing takes file-system locks a thread stuck in
    /// a fault may hold, so a fault's path never waits on it without bound).
    pub swap_wait: Duration,
}

impl Default for PagerConfig {
    fn default() -> Self {
        PagerConfig {
            resident_per_process: (1 << 30) / PAGE as u64,
            resident_total: (4u64 << 30) / PAGE as u64,
            swap_pages: (4u64 << 30) / PAGE as u64,
            swap_chunk: (4 << 20) / PAGE as u64,
            fault_threads: 2,
            swap_wait: Duration::from_millis(50),
        }
    }
}

/// Counts for one memory (`vino ps`, `vino top`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Pages in the program's memory or in staging.
    pub resident: u64,
    pub swapped: u64,
    /// First touches, filled with zeros.
    pub zero_faults: u64,
    /// Touches of a page taken out but still in a frame.
    pub minor_faults: u64,
    /// Pages read back from swap.
    pub swap_ins: u64,
    pub swap_outs: u64,
    /// Pages brought in by the fault-around graft beyond the one touched.
    pub faulted_around: u64,
    /// Evictions where the `vas.pick_victim` graft chose another page than the default.
    pub evicted_by_graft: u64,
    pub evicted_by_default: u64,
    /// Answers of its grafts the pager refused (the default decided).
    pub graft_refused: u64,
    /// Pages read in from mapped files.
    pub file_faults: u64,
    /// Pages written back to mapped files.
    pub written_back: u64,
    /// Pages mapped from files now.
    pub mapped: u64,
    /// Files mapped now.
    pub mappings: u64,
}

/// Counts for the whole pager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PagerStats {
    pub memories: u64,
    pub frames: u64,
    pub frame_limit: u64,
    pub swap_in_use: u64,
    pub swap_capacity: u64,
    pub staged: u64,
    /// Since the pager started, over all memories: faults served, pages written to swap and
    /// read back, and the reads that brought them (a fault on a page in swap reads the pages
    /// whose slots follow its own along).
    pub faults: u64,
    pub swap_outs: u64,
    pub swap_ins: u64,
    pub swap_reads: u64,
    /// Pages read in from mapped files, and written back to them.
    pub file_faults: u64,
    pub written_back: u64,
}

/// Slots of the staging area, where pages taken out of program memory wait (a frame each).
struct Staging {
    base: usize,
    slots: u32,
    free: Mutex<(Vec<u32>, u32)>,
}

impl Staging {
    fn alloc(&self) -> Option<u32> {
        let mut f = self.free.lock();
        if let Some(s) = f.0.pop() {
            return Some(s);
        }
        (f.1 < self.slots).then(|| {
            f.1 += 1;
            f.1 - 1
        })
    }

    fn release(&self, slot: u32) {
        self.free.lock().0.push(slot);
    }

    fn addr(&self, slot: u32) -> usize {
        self.base + slot as usize * PAGE
    }

    fn in_use(&self) -> u64 {
        let f = self.free.lock();
        u64::from(f.1) - f.0.len() as u64
    }
}

/// One program memory.
pub struct Region {
    base: usize,
    /// Bytes reserved (the memory may grow up to here without moving).
    reserved: usize,
    /// Bytes mapped: the reservation and the guard after it.
    mapped: usize,
    owner: Arc<dyn Owner>,
    /// It has mappings (read without the lock at every system call).
    has_maps: AtomicBool,
    state: Mutex<RegionState>,
}

struct RegionState {
    size: usize,
    table: Table,
    stats: MemoryStats,
    /// Its process was told it is out of swap: no more evictions are tried.
    out_of_swap: bool,
    /// Files mapped into it, in address order.
    maps: Vec<Mapping>,
    /// System calls touching it now ([`HostPin`]): its file-backed pages stay, and changes to
    /// their files wait in `deferred` (file, start, end) until the last one ends.
    pins: u32,
    deferred: Vec<(u64, u64, u64)>,
    /// Pages of shared writable mappings evicted and not yet written back: a fault in the
    /// meantime reads them here, not from the file. (generation, bytes)
    pending: HashMap<u32, (u64, Arc<[u8]>)>,
    pending_next: u64,
    /// The memory is gone (its owner dropped it); handles to it do nothing.
    dropped: bool,
}

impl RegionState {
    /// Keeps a change to file `key` for when no system call pins the memory: one range per
    /// file, widened (so another user writing the file all the while cannot grow the list).
    fn defer(&mut self, key: u64, start: u64, end: u64) {
        match self.deferred.iter_mut().find(|d| d.0 == key) {
            Some(d) => *d = (key, d.1.min(start), d.2.max(end)),
            None => self.deferred.push((key, start, end)),
        }
    }

    /// Queues `bytes`, page `page` as the program changed it, for write-back.
    fn pend(&mut self, page: u32, bytes: &[u8]) {
        self.pending_next += 1;
        self.pending.insert(page, (self.pending_next, Arc::from(bytes)));
    }

    fn mapping_of(&self, page: u32) -> Option<usize> {
        if self.maps.is_empty() {
            return None;
        }
        let i = self.maps.partition_point(|m| m.first + m.pages <= page);
        (i < self.maps.len() && self.maps[i].contains(page)).then_some(i)
    }

    /// Whether `page` lies in a mapping whose pages are dropped rather than swapped.
    fn file_backed(&self, page: u32) -> bool {
        self.mapping_of(page).is_some_and(|i| self.maps[i].file_backed())
    }
}

impl Region {
    fn reserve(reserved: usize, guard: usize, owner: Arc<dyn Owner>) -> io::Result<Arc<Region>> {
        let mapped = reserved + guard;
        Ok(Arc::new(Region {
            base: mmap_none(mapped)?,
            reserved,
            mapped,
            owner,
            has_maps: AtomicBool::new(false),
            state: Mutex::new(RegionState {
                size: 0,
                table: Table::default(),
                stats: MemoryStats::default(),
                out_of_swap: false,
                maps: Vec::new(),
                pins: 0,
                deferred: Vec::new(),
                pending: HashMap::new(),
                pending_next: 0,
                dropped: false,
            }),
        }))
    }

    fn page_of(&self, addr: usize) -> u32 {
        ((addr - self.base) / PAGE) as u32
    }

    fn addr(&self, page: u32) -> usize {
        self.base + page as usize * PAGE
    }
}

struct Shared {
    uffd: Uffd,
    config: PagerConfig,
    staging: Staging,
    swap: Swap,
    regions: RwLock<BTreeMap<usize, Arc<Region>>>,
    /// The memories mapping each file, by the file's key.
    mapped: RwLock<HashMap<u64, Vec<Weak<Region>>>>,
    frames: AtomicU64,
    /// Fault events read and not yet served or queued.
    reading: AtomicU64,
    faults: AtomicU64,
    swap_outs: AtomicU64,
    swap_ins: AtomicU64,
    swap_reads: AtomicU64,
    file_faults: AtomicU64,
    written_back: AtomicU64,
    queues: Mutex<Queues>,
    queued: Condvar,
    stop: AtomicBool,
    zeros: Box<[u8]>,
}

/// Work a fault thread does for a memory's user.
enum Job {
    /// A fault to serve whole.
    Fault(Fault),
    /// A fault already served (by the reader): its fault-around and evictions.
    After(u32),
}

#[derive(Default)]
struct Queues {
    by_user: BTreeMap<u32, VecDeque<(Arc<Region>, Job)>>,
    /// Users with faults waiting, in the order they are served.
    turn: VecDeque<u32>,
    busy: HashSet<u32>,
    stop: bool,
}

/// The pager of one kernel.
pub struct Pager {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Bytes of address space the staging area reserves (no memory until used).
const STAGING_BYTES: usize = 64 << 30;

fn mmap_none(len: usize) -> io::Result<usize> {
    // SAFETY: a fresh anonymous reservation; nothing else refers to the range.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // Huge pages would defeat paging a page at a time.
    // SAFETY: advice on the range just mapped.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    Ok(p as usize)
}

fn protect_rw(addr: usize, len: usize) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: `[addr, addr + len)` lies in a reservation this pager made.
    let r = unsafe { libc::mprotect(addr as *mut _, len, libc::PROT_READ | libc::PROT_WRITE) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl Pager {
    /// A pager with its own userfaultfd, staging area, swap (in `store`) and threads.
    pub fn new(config: PagerConfig, store: Arc<dyn SwapStore>) -> io::Result<Pager> {
        let uffd = Uffd::open()?;
        let base = mmap_none(STAGING_BYTES)?;
        protect_rw(base, STAGING_BYTES)?;
        uffd.register(base, STAGING_BYTES)?;
        let swap = Swap::new(store, config.swap_pages, config.swap_chunk);
        let shared = Arc::new(Shared {
            uffd,
            staging: Staging {
                base,
                slots: (STAGING_BYTES / PAGE) as u32,
                free: Mutex::new((Vec::new(), 0)),
            },
            swap,
            regions: RwLock::default(),
            mapped: RwLock::default(),
            frames: AtomicU64::new(0),
            reading: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            swap_outs: AtomicU64::new(0),
            swap_ins: AtomicU64::new(0),
            swap_reads: AtomicU64::new(0),
            file_faults: AtomicU64::new(0),
            written_back: AtomicU64::new(0),
            queues: Mutex::default(),
            queued: Condvar::new(),
            stop: AtomicBool::new(false),
            zeros: vec![0u8; PAGE].into_boxed_slice(),
            config,
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(spawn("vino-vm-faults", move || s.read_faults())?);
        for _ in 0..shared.config.fault_threads.max(1) {
            let s = shared.clone();
            threads.push(spawn("vino-vm-serve", move || s.serve_faults())?);
        }
        let s = shared.clone();
        threads.push(spawn("vino-vm-swap", move || s.swap.grow_while_running())?);
        Ok(Pager {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// Reserves a memory of `reserved` bytes and `guard` more never mapped, `minimum` bytes
    /// usable at first, all of it zeros paged in on touch.
    pub fn create(&self, minimum: usize, reserved: usize, guard: usize, owner: Arc<dyn Owner>) -> io::Result<Memory> {
        if minimum > reserved || !reserved.is_multiple_of(PAGE) || !guard.is_multiple_of(PAGE) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "memory sizes"));
        }
        let region = Region::reserve(reserved, guard, owner)?;
        let base = region.base;
        let memory = Memory {
            region: region.clone(),
            shared: Some(self.shared.clone()),
        };
        if reserved > 0 {
            self.shared.uffd.register(base, reserved)?;
        }
        self.shared.regions.write().insert(base, region);
        memory.grow_to(minimum)?;
        Ok(memory)
    }

    pub fn stats(&self) -> PagerStats {
        let s = &self.shared;
        PagerStats {
            memories: s.regions.read().len() as u64,
            frames: s.frames.load(Ordering::Relaxed),
            frame_limit: s.config.resident_total,
            swap_in_use: s.swap.in_use(),
            swap_capacity: s.swap.capacity(),
            staged: s.staging.in_use(),
            faults: s.faults.load(Ordering::Relaxed),
            swap_outs: s.swap_outs.load(Ordering::Relaxed),
            swap_ins: s.swap_ins.load(Ordering::Relaxed),
            swap_reads: s.swap_reads.load(Ordering::Relaxed),
            file_faults: s.file_faults.load(Ordering::Relaxed),
            written_back: s.written_back.load(Ordering::Relaxed),
        }
    }

    /// The counts of process `pid`'s memory, if it has one.
    pub fn memory_of(&self, pid: u64) -> Option<MemoryStats> {
        let regions = self.shared.regions.read();
        let r = regions.values().find(|r| r.owner.pid() == pid)?;
        Some(r.stats())
    }

    /// Waits until no fault is queued or being served and the swap is not growing: every
    /// eviction a served fault set off is done (the simulator settles after each touch so that
    /// what reaches the device comes in the same order every run).
    pub fn settle(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            // The reader's count first: it queues what a fault leaves to do before it counts
            // the fault done, so a queue seen empty after a count of zero is empty indeed.
            let read = self.shared.reading.load(Ordering::SeqCst) == 0;
            let idle = read && {
                let q = self.shared.queues.lock();
                q.turn.is_empty() && q.busy.is_empty()
            };
            if idle && !self.shared.swap.growing() {
                return;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Checks every memory's table (the simulator's invariant).
    pub fn check(&self) -> Result<(), String> {
        self.settle();
        let regions: Vec<_> = self.shared.regions.read().values().cloned().collect();
        let mut frames = 0;
        for r in regions {
            let st = r.state.lock();
            st.table
                .check()
                .map_err(|e| format!("memory of process {}: {e}", r.owner.pid()))?;
            frames += st.table.frames();
        }
        let counted = self.shared.frames.load(Ordering::Relaxed);
        if frames != counted {
            return Err(format!("memories hold {frames} frames, the pager counts {counted}"));
        }
        Ok(())
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.queues.lock().stop = true;
        self.shared.queued.notify_all();
        self.shared.swap.stop();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // SAFETY: the staging reservation is this pager's; its threads are gone.
        unsafe { libc::munmap(self.shared.staging.base as *mut _, STAGING_BYTES) };
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(f)
}

/// A program memory, owned by whoever runs the program (wasmtime's `LinearMemory`): dropping it
/// gives back its frames, swap and staging and unmaps it.
pub struct Memory {
    region: Arc<Region>,
    /// The pager paging it; none for memory Linux pages (where userfaultfd is not to be had).
    shared: Option<Arc<Shared>>,
}

impl Memory {
    /// A memory as [`Pager::create`] makes one, but paged by Linux: for a kernel whose host
    /// gives it no userfaultfd. Its pages are not counted, limited or grafted.
    pub fn unpaged(minimum: usize, reserved: usize, guard: usize, owner: Arc<dyn Owner>) -> io::Result<Memory> {
        let memory = Memory {
            region: Region::reserve(reserved, guard, owner)?,
            shared: None,
        };
        memory.grow_to(minimum)?;
        Ok(memory)
    }

    /// Whether the kernel pages it.
    pub fn is_paged(&self) -> bool {
        self.shared.is_some()
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.region.base as *mut u8
    }

    pub fn size(&self) -> usize {
        self.region.state.lock().size
    }

    /// The byte at `offset` (faulted in as the program's access would be), or `None` past the
    /// usable part: for the simulator and tests, which touch a memory with no program in it.
    pub fn read_byte(&self, offset: usize) -> Option<u8> {
        (offset < self.size()).then(|| self.byte(offset).load(Ordering::Relaxed))
    }

    /// Writes the byte at `offset`; false past the usable part.
    pub fn write_byte(&self, offset: usize, value: u8) -> bool {
        let inside = offset < self.size();
        if inside {
            self.byte(offset).store(value, Ordering::Relaxed);
        }
        inside
    }

    fn byte(&self, offset: usize) -> &std::sync::atomic::AtomicU8 {
        // SAFETY: `offset` lies in the usable part (checked by the callers), mapped read-write
        // while the memory lives; an atomic byte access races with nothing undefined.
        unsafe { &*(self.region.base as *const std::sync::atomic::AtomicU8).add(offset) }
    }

    pub fn capacity(&self) -> usize {
        self.region.reserved
    }

    /// Makes the first `bytes` usable (new pages read as zeros).
    pub fn grow_to(&self, bytes: usize) -> io::Result<()> {
        if bytes > self.region.reserved {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "past the memory's reservation",
            ));
        }
        let bytes = bytes.next_multiple_of(PAGE);
        let mut st = self.region.state.lock();
        if bytes > st.size {
            protect_rw(self.region.base + st.size, bytes - st.size)?;
            st.size = bytes;
            st.table.grow(bytes / PAGE);
        }
        Ok(())
    }

    pub fn stats(&self) -> MemoryStats {
        self.region.stats()
    }

    /// A handle the kernel keeps to map files into the memory and pin it during system calls;
    /// it does nothing once the memory is gone.
    pub fn handle(&self) -> MemoryHandle {
        MemoryHandle {
            region: self.region.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl Region {
    fn stats(&self) -> MemoryStats {
        let st = self.state.lock();
        MemoryStats {
            resident: st.table.frames(),
            swapped: st.table.swapped(),
            mapped: st.maps.iter().map(|m| u64::from(m.pages)).sum(),
            mappings: st.maps.len() as u64,
            ..st.stats
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let r = &self.region;
        let Some(s) = &self.shared else {
            // SAFETY: the region's mapping, which nothing uses any more.
            unsafe { libc::munmap(r.base as *mut _, r.mapped) };
            return;
        };
        s.regions.write().remove(&r.base);
        // Its shared writable mappings' changes reach their files; then its mappings go.
        s.end_mappings(r);
        let _ = s.uffd.unregister(r.base, r.reserved);
        let mut st = r.state.lock();
        let held: Vec<_> = st.table.held().map(|(page, _)| page).collect();
        // (Its frames go with the unmapping below, all at once.)
        let swapped: u64 = held.into_iter().map(|p| s.give_up(r, &mut st, p, false)).sum();
        drop(st);
        if swapped > 0 {
            r.owner.uncharge_swap(swapped);
        }
        // SAFETY: the region's mapping; no program runs in it any more (its store is gone).
        unsafe { libc::munmap(r.base as *mut _, r.mapped) };
    }
}

/// Pages read back from swap with one fault: the faulting page and those after it whose slots
/// follow its slot (pages evicted together are written together, in order). Linux reads 8; on
/// this pager's path a read of 32 cost little more than one of 8 (`vino bench vm`: 49 µs a page
/// re-read at 8 and 16 at a time, 21 µs at 32 and 64, on a busy 2-CPU machine).
const SWAP_CLUSTER: usize = 32;

/// Pages a first touch fills with zeros, itself included (the default's cluster).
const ZERO_CLUSTER: usize = 16;

/// Most pages written to swap in one request.
const WRITE_BATCH: u64 = 64;

impl Shared {
    /// Reads fault events. A fault on a page that needs no I/O (first touch, a page back from
    /// the inactive list) is served here at once, if its memory's lock is free, and only what
    /// comes after (fault-around, evictions) is queued; the others queue whole to their
    /// memory's user.
    fn read_faults(&self) {
        let mut faults = Vec::new();
        while !self.stop.load(Ordering::SeqCst) {
            let mut pfd = libc::pollfd {
                fd: self.uffd.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd that lives across the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 50) };
            if n <= 0 {
                continue;
            }
            faults.clear();
            if self.uffd.read_faults(&mut faults).is_err() {
                continue;
            }
            self.reading.fetch_add(faults.len() as u64, Ordering::SeqCst);
            for f in faults.drain(..) {
                self.take_fault(f);
                self.reading.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn take_fault(&self, f: Fault) {
        let region = {
            let regions = self.regions.read();
            let found = regions
                .range(..=f.address)
                .next_back()
                .map(|(_, r)| r)
                .filter(|r| f.address < r.base + r.reserved)
                .cloned();
            match found {
                Some(r) => r,
                None => {
                    // Not a memory this pager keeps (freed meanwhile): let the thread retry.
                    let _ = self.uffd.wake(f.address & !(PAGE - 1), PAGE);
                    return;
                }
            }
        };
        let page = region.page_of(f.address);
        // A memory with a fault-around graft has its faults served in order on its user's
        // thread, so the neighbours a fault brings come in before the next fault is looked at.
        if region.owner.has_fault_around() {
            self.queue(region, Job::Fault(f));
            return;
        }
        // A memory over its limit has its faults wait behind its evictions (queued to its
        // user's thread), so a process touching memory as fast as it can stays within it.
        let served = match region.state.try_lock() {
            Some(mut st)
                if (page as usize) < st.table.len() && !needs_io(&st, page) && st.table.frames() <= self.limit_of() =>
            {
                self.faults.fetch_add(1, Ordering::Relaxed);
                self.bring_in(&region, &mut st, page, true);
                Some(st.table.frames() > self.limit_of() || self.over_total())
            }
            _ => None,
        };
        match served {
            Some(true) => self.queue(region, Job::After(page)),
            Some(false) => {}
            None => self.queue(region, Job::Fault(f)),
        }
    }

    fn queue(&self, region: Arc<Region>, job: Job) {
        if let Job::Fault(f) = &job {
            region.owner.fault_waits(f.thread);
        }
        let uid = region.owner.uid();
        let mut q = self.queues.lock();
        let queue = q.by_user.entry(uid).or_default();
        queue.push_back((region, job));
        if queue.len() == 1 && !q.busy.contains(&uid) {
            q.turn.push_back(uid);
        }
        drop(q);
        self.queued.notify_one();
    }

    /// A fault thread: serves one user's faults at a time, users in turn.
    fn serve_faults(&self) {
        loop {
            let (uid, batch) = {
                let mut q = self.queues.lock();
                loop {
                    if q.stop {
                        return;
                    }
                    if let Some(uid) = q.turn.pop_front() {
                        let batch: Vec<_> = q.by_user.remove(&uid).map(Vec::from).unwrap_or_default();
                        q.busy.insert(uid);
                        break (uid, batch);
                    }
                    self.queued.wait(&mut q);
                }
            };
            for (region, job) in batch {
                match job {
                    Job::Fault(f) => self.serve(&region, f),
                    Job::After(page) => self.after(&region, page),
                }
            }
            let mut q = self.queues.lock();
            q.busy.remove(&uid);
            if q.by_user.get(&uid).is_some_and(|v| !v.is_empty()) {
                q.turn.push_back(uid);
                drop(q);
                self.queued.notify_one();
            }
        }
    }

    fn serve(&self, region: &Arc<Region>, fault: Fault) {
        self.faults.fetch_add(1, Ordering::Relaxed);
        let page = region.page_of(fault.address);
        {
            let mut st = region.state.lock();
            if page as usize >= st.table.len() {
                drop(st);
                let _ = self.uffd.wake(region.addr(page), PAGE);
                region.owner.fault_served(fault.thread);
                return;
            }
            self.bring_in(region, &mut st, page, true);
        }
        region.owner.fault_served(fault.thread);
        self.after(region, page);
    }

    /// What follows a fault once the program is awake: the fault-around graft's neighbours,
    /// then evictions down to the memory's share and the total.
    fn after(&self, region: &Arc<Region>, page: u32) {
        let pages = region.state.lock().table.len() as u64;
        if let Some((first, count)) = region.owner.fault_around(u64::from(page), pages) {
            let valid = count <= FAULT_AROUND_MAX
                && first <= u64::from(page)
                && u64::from(page) < first + count
                && first + count <= pages;
            let mut st = region.state.lock();
            if valid {
                for p in first..first + count {
                    let p = p as u32;
                    if p != page && (p as usize) < st.table.len() && !matches!(st.table.get(p), Page::Resident { .. }) {
                        self.bring_in(region, &mut st, p, false);
                        st.stats.faulted_around += 1;
                    }
                }
            } else {
                st.stats.graft_refused += 1;
            }
        }
        self.trim(region);
        self.balance();
    }

    /// Puts `page` in the program's memory from wherever it is (a page from swap brings the
    /// pages whose slots follow its own along). `waited`: a thread waits on it.
    fn bring_in(&self, region: &Region, st: &mut RegionState, page: u32, waited: bool) {
        let addr = region.addr(page);
        let placed = match st.table.get(page) {
            Page::Resident { .. } => {
                let _ = self.uffd.wake(addr, PAGE);
                return;
            }
            Page::Absent if st.mapping_of(page).is_some() => {
                self.fill_mapped(region, st, page, waited && !region.owner.has_fault_around());
                return;
            }
            Page::Absent => {
                st.stats.zero_faults += u64::from(waited);
                self.uffd.copy(addr, &self.zeros)
            }
            Page::Inactive { staged, .. } => {
                st.stats.minor_faults += u64::from(waited);
                let r = self.uffd.move_page(addr, self.staging.addr(staged), PAGE);
                if matches!(r, Ok(Placed::Done)) {
                    self.staging.release(staged);
                }
                r
            }
            Page::Swapped(_) => {
                self.swap_in(region, st, page, waited);
                return;
            }
        };
        let first_touch = matches!(st.table.get(page), Page::Absent);
        self.placed(st, page, placed);
        // A move, or a copy that found the page there, does not wake the thread waiting on it.
        let _ = self.uffd.wake(addr, PAGE);
        if first_touch && waited && !region.owner.has_fault_around() {
            self.zero_around(region, st, page);
        }
    }

    /// The default's small cluster: a first touch fills the untouched pages after it too, up
    /// to [`ZERO_CLUSTER`] (a heap is mostly touched in order; a copy of zeros costs a
    /// microsecond, a fault ten or more). Pages of zeros cost no swap when evicted.
    fn zero_around(&self, region: &Region, st: &mut RegionState, page: u32) {
        let end = (page as usize + ZERO_CLUSTER).min(st.table.len()) as u32;
        for p in page + 1..end {
            if !matches!(st.table.get(p), Page::Absent) || st.mapping_of(p).is_some() {
                break;
            }
            let placed = self.uffd.copy(region.addr(p), &self.zeros);
            self.placed(st, p, placed);
        }
    }

    /// Records what putting `page` in came to.
    fn placed(&self, st: &mut RegionState, page: u32, placed: io::Result<Placed>) {
        if let Ok(Placed::Done | Placed::AlreadyThere) = placed {
            if !matches!(st.table.get(page), Page::Inactive { .. }) {
                self.frames.fetch_add(1, Ordering::Relaxed);
            }
            st.table.set_resident(page);
        }
    }

    /// Reads `page` back from swap with the pages whose slots follow its own, in one request.
    fn swap_in(&self, region: &Region, st: &mut RegionState, page: u32, waited: bool) {
        let Page::Swapped(first) = st.table.get(page) else {
            return;
        };
        let mut run = vec![(page, first)];
        while run.len() < SWAP_CLUSTER {
            let (last, at) = *run.last().unwrap();
            let next = last + 1;
            match (next as usize) < st.table.len() {
                true => match st.table.get(next) {
                    Page::Swapped(n) if n.slot == at.slot + 1 => run.push((next, n)),
                    _ => break,
                },
                false => break,
            }
        }
        let ats: Vec<_> = run.iter().map(|r| r.1).collect();
        let mut pages = vec![0u8; run.len() * PAGE];
        let mut scratch = vec![0u8; PAGE];
        self.swap_reads.fetch_add(1, Ordering::Relaxed);
        if self.swap.read_pages(&ats, &mut pages, &mut scratch).is_err() {
            // The swap could not be read: the program cannot go on with its page lost; it ends
            // as if out of swap (its page stays recorded as swapped).
            region.owner.out_of_swap();
            let _ = self.uffd.copy(region.addr(page), &self.zeros);
            return;
        }
        for ((p, at), bytes) in run.iter().zip(pages.chunks_exact(PAGE)) {
            let placed = self.uffd.copy(region.addr(*p), bytes);
            if matches!(placed, Ok(Placed::Done | Placed::AlreadyThere)) {
                self.swap.free(at.slot);
                region.owner.uncharge_swap(1);
                st.stats.swap_ins += 1;
                self.swap_ins.fetch_add(1, Ordering::Relaxed);
            }
            self.placed(st, *p, placed);
        }
        if waited {
            let _ = self.uffd.wake(region.addr(page), PAGE);
        }
    }

    /// The memory's share: its own limit.
    fn limit_of(&self) -> u64 {
        self.config.resident_per_process.max(1)
    }

    fn over_total(&self) -> bool {
        self.frames.load(Ordering::Relaxed) > self.config.resident_total.max(1)
    }

    /// Pages evicted beyond the excess, so that the next faults need not evict one each: a
    /// sixteenth of the limit, at most a write batch.
    fn slack(&self) -> u64 {
        (self.limit_of() / 16).min(WRITE_BATCH - 1)
    }

    /// Gives up pages of `region` until it holds no more than its limit.
    fn trim(&self, region: &Region) {
        let limit = self.limit_of();
        for _ in 0..(FAULT_AROUND_MAX + SWAP_CLUSTER as u64 + 2) {
            let frames = region.state.lock().table.frames();
            if frames <= limit {
                return;
            }
            let want = (frames - limit + self.slack()).min(WRITE_BATCH);
            if self.evict(region, want) == 0 {
                return;
            }
        }
    }

    /// When all memories together hold more than the total, the one furthest over its fair
    /// share gives up pages (its own policy choosing which).
    fn balance(&self) {
        let total = self.config.resident_total.max(1);
        for _ in 0..(FAULT_AROUND_MAX + SWAP_CLUSTER as u64 + 2) {
            let frames = self.frames.load(Ordering::Relaxed);
            if frames <= total {
                return;
            }
            let regions: Vec<_> = self.regions.read().values().cloned().collect();
            let fair = total / regions.len().max(1) as u64;
            // Ties go to the highest pid, not to where the memories happen to lie.
            let worst = regions
                .iter()
                .map(|r| (r.state.lock().table.frames(), r))
                .filter(|(f, _)| *f > fair)
                .max_by_key(|(f, r)| (*f, r.owner.pid()))
                .map(|(f, r)| (f, r.clone()));
            // Never below its fair share: what it holds past it, at most.
            match worst {
                Some((held, r)) if self.evict(&r, (frames - total).min(held - fair).min(WRITE_BATCH)) > 0 => {}
                _ => return,
            }
        }
    }

    /// Inactive pages to keep per memory: an eighth of its limit, at least one, at most 256.
    fn inactive_target(&self) -> u64 {
        (self.limit_of() / 8).clamp(1, 256)
    }

    /// Gives up to `want` pages of `region`: for each, refills its inactive list, asks its
    /// graft, takes the chosen page out of its memory; then writes the chosen pages to swap
    /// together (pages holding only zeros are not written). How many went.
    fn evict(&self, region: &Region, want: u64) -> u64 {
        let mut chosen: Vec<u32> = Vec::new();
        for _ in 0..want {
            match self.choose(region, &chosen) {
                Some(p) => chosen.push(p),
                None => break,
            }
        }
        if chosen.is_empty() {
            return 0;
        }
        let mut st = region.state.lock();
        // File pages chosen were dropped already (written back below if changed).
        let dropped = chosen
            .iter()
            .filter(|&&p| matches!(st.table.get(p), Page::Absent))
            .count() as u64;
        let gone = dropped + self.page_out(region, &mut st, &chosen);
        let pending = !st.pending.is_empty();
        drop(st);
        if pending {
            self.write_back(region, false);
        }
        gone
    }

    /// One victim of `region` not among `taken`, staged out of its memory.
    fn choose(&self, region: &Region, taken: &[u32]) -> Option<u32> {
        let candidates: Vec<u32> = {
            let mut st = region.state.lock();
            if st.out_of_swap {
                return None;
            }
            self.refill_inactive(region, &mut st, taken.len() as u64);
            let mut c = st.table.candidates(VICTIM_CANDIDATES + taken.len());
            // While a system call uses the memory, its file pages stay (see `HostPin`).
            let pinned = |p: u32| st.pins > 0 && st.file_backed(p);
            c.retain(|&p| !taken.contains(&p) && !pinned(p));
            c.truncate(VICTIM_CANDIDATES);
            c
        };
        let first = *candidates.first()?;
        let ids: Vec<u64> = candidates.iter().map(|&p| memory_page_id(p)).collect();
        let choice = region.owner.pick_victim(&ids);
        let mut st = region.state.lock();
        let holds_frame =
            |st: &RegionState, p: u32| matches!(st.table.get(p), Page::Resident { .. } | Page::Inactive { .. });
        let victim = match choice {
            Some(i) if i < candidates.len() && holds_frame(&st, candidates[i]) => {
                if i == 0 {
                    st.stats.evicted_by_default += 1;
                } else {
                    st.stats.evicted_by_graft += 1;
                }
                candidates[i]
            }
            other => {
                if other.is_some_and(|i| i >= candidates.len()) {
                    st.stats.graft_refused += 1;
                }
                let p = if holds_frame(&st, first) {
                    first
                } else {
                    *st.table
                        .candidates(taken.len() + 1)
                        .iter()
                        .find(|p| !taken.contains(p))?
                };
                st.stats.evicted_by_default += 1;
                p
            }
        };
        match st.table.get(victim) {
            Page::Inactive { .. } => Some(victim),
            _ => self.stage(region, &mut st, victim).then_some(victim),
        }
    }

    /// Moves the oldest active pages out to staging until the inactive list is full enough
    /// (`staged` of its pages are already chosen to go).
    fn refill_inactive(&self, region: &Region, st: &mut RegionState, staged: u64) {
        let target = self.inactive_target() + staged;
        let mut tries = st.table.active();
        while st.table.inactive() < target && tries > 0 {
            tries -= 1;
            let Some(page) = st.table.oldest_active() else { return };
            if !self.stage(region, st, page) {
                st.table.requeue(page);
            }
        }
    }

    /// Takes resident `page` out of the program's memory into a staging slot.
    /// A page of a file mapping is dropped instead (the file holds its bytes).
    fn stage(&self, region: &Region, st: &mut RegionState, page: u32) -> bool {
        if st.file_backed(page) {
            return st.pins == 0 && self.drop_mapped(region, st, page);
        }
        let Some(slot) = self.staging.alloc() else { return false };
        match self.uffd.move_page(self.staging.addr(slot), region.addr(page), PAGE) {
            Ok(Placed::Done) => {
                st.table.set_inactive(page, slot);
                true
            }
            Ok(Placed::NoSource) => {
                // Not there after all (never happens while the table is right): a zero page.
                self.staging.release(slot);
                st.table.set_absent(page);
                self.frames.fetch_sub(1, Ordering::Relaxed);
                false
            }
            // Busy (pinned by I/O in flight) or the like: it stays.
            _ => {
                self.staging.release(slot);
                false
            }
        }
    }

    /// Writes the staged pages among `pages` to swap (runs of consecutive slots, a request
    /// each) and frees their frames; pages of zeros only become untouched pages. How many went.
    fn page_out(&self, region: &Region, st: &mut RegionState, pages: &[u32]) -> u64 {
        let mut gone = 0;
        let mut out: Vec<(u32, u32)> = Vec::new();
        for &page in pages {
            // Touched again since it was chosen: it stays.
            let Page::Inactive { staged, .. } = st.table.get(page) else {
                continue;
            };
            // (A private mapping's page of zeros is not the file's page: it goes to swap.)
            if st.mapping_of(page).is_none() && self.staged_bytes(staged).iter().all(|&b| b == 0) {
                self.discard_staged(staged);
                st.table.set_absent(page);
                self.frames.fetch_sub(1, Ordering::Relaxed);
                gone += 1;
            } else {
                out.push((page, staged));
            }
        }
        let mut rest = &out[..];
        while !rest.is_empty() {
            if !region.owner.charge_swap(rest.len() as u64) {
                self.out_of_swap(region, st);
                break;
            }
            let (first, n) = match self.swap.alloc_run(rest.len() as u64, self.config.swap_wait) {
                Ok(run) => run,
                Err(e) => {
                    region.owner.uncharge_swap(rest.len() as u64);
                    if e == NoSlot::Full {
                        self.out_of_swap(region, st);
                    }
                    break;
                }
            };
            region.owner.uncharge_swap(rest.len() as u64 - n);
            let (now, later) = rest.split_at(n as usize);
            let bytes: Vec<&[u8]> = now.iter().map(|&(_, staged)| self.staged_bytes(staged)).collect();
            let mut scratch = vec![0u8; now.len() * PAGE];
            match self.swap.write_pages(first, &bytes, &mut scratch) {
                Ok(ats) => {
                    for (&(page, staged), at) in now.iter().zip(ats) {
                        self.discard_staged(staged);
                        st.table.set_swapped(page, at);
                        st.stats.swap_outs += 1;
                        self.swap_outs.fetch_add(1, Ordering::Relaxed);
                        self.frames.fetch_sub(1, Ordering::Relaxed);
                        gone += 1;
                    }
                }
                Err(_) => {
                    for i in 0..n {
                        self.swap.free(first + i);
                    }
                    region.owner.uncharge_swap(n);
                    break;
                }
            }
            rest = later;
        }
        gone
    }

    /// The page in staging slot `slot`.
    fn staged_bytes(&self, slot: u32) -> &[u8] {
        // SAFETY: a staging slot holding a page moved there; only this pager touches it, under
        // the lock of the memory whose page it is.
        unsafe { std::slice::from_raw_parts(self.staging.addr(slot) as *const u8, PAGE) }
    }

    fn out_of_swap(&self, region: &Region, st: &mut RegionState) {
        if !st.out_of_swap {
            st.out_of_swap = true;
            region.owner.out_of_swap();
        }
    }

    /// Frees a staging slot's frame and the slot.
    fn discard_staged(&self, slot: u32) {
        // SAFETY: the slot's page lies in the staging area, which only this pager uses.
        unsafe { libc::madvise(self.staging.addr(slot) as *mut _, PAGE, libc::MADV_DONTNEED) };
        self.staging.release(slot);
    }
}

/// Whether a fault on `page` needs I/O (swap, or a mapped file): the reader then queues it.
fn needs_io(st: &RegionState, page: u32) -> bool {
    match st.table.get(page) {
        Page::Swapped(_) => true,
        Page::Absent => st.mapping_of(page).is_some(),
        _ => false,
    }
}

// ---- Files mapped into program memory (see `maps`) ----------------------------------------

impl Pager {
    /// The bytes `[start, end)` of file `key` changed: every memory mapping them gives up its
    /// clean copies of those pages (and pages fenced past the old end become touchable again).
    pub fn file_changed(&self, key: u64, start: u64, end: u64) {
        let regions: Vec<Arc<Region>> = match self.shared.mapped.read().get(&key) {
            Some(list) => list.iter().filter_map(Weak::upgrade).collect(),
            None => return,
        };
        for r in regions {
            let mut st = r.state.lock();
            if st.pins > 0 {
                st.defer(key, start, end);
            } else {
                self.shared.invalidate(&r, &mut st, key, start, end);
            }
        }
    }
}

impl Shared {
    /// Reads mapped `page` in from its file (or from a write-back still pending), with the
    /// untouched pages after it up to [`maps::FILE_CLUSTER`] when `cluster`. A page past the
    /// end of the file is fenced instead: the program's touch traps.
    fn fill_mapped(&self, region: &Region, st: &mut RegionState, page: u32, cluster: bool) {
        let Some(i) = st.mapping_of(page) else { return };
        let addr = region.addr(page);
        let (mut buf, got) = match st.pending.get(&page) {
            Some((_, bytes)) => (bytes.to_vec(), PAGE),
            None => {
                let m = &st.maps[i];
                let mut n = 1;
                while cluster
                    && n < maps::FILE_CLUSTER
                    && m.contains(page + n)
                    && matches!(st.table.get(page + n), Page::Absent)
                    && !st.pending.contains_key(&(page + n))
                {
                    n += 1;
                }
                let mut buf = vec![0u8; n as usize * PAGE];
                let got = m.source.read(m.file_index(page), &mut buf).unwrap_or(0);
                (buf, got)
            }
        };
        if got == 0 {
            // A system call's own touch past the end (the file shrank after it checked) reads
            // zeros; the program's traps.
            if st.pins == 0 {
                let _ = maps::protect(addr, PAGE, libc::PROT_NONE);
                st.maps[i].fenced.insert(page);
                let _ = self.uffd.wake(addr, PAGE);
                return;
            }
            buf.truncate(PAGE);
        }
        let pages = got.div_ceil(PAGE).max(1);
        for (k, bytes) in buf.chunks_exact(PAGE).take(pages).enumerate() {
            let p = page + k as u32;
            st.stats.file_faults += 1;
            self.file_faults.fetch_add(1, Ordering::Relaxed);
            if st.maps[i].writes_back() {
                st.maps[i].filled.insert(p, maps::page_hash(bytes));
            }
            let placed = self.uffd.copy(region.addr(p), bytes);
            self.placed(st, p, placed);
        }
        let _ = self.uffd.wake(addr, PAGE);
    }

    /// Drops resident file page `page`; a page changed through a shared writable mapping is
    /// taken out first (so no store of the program's is lost) and queued for write-back.
    fn drop_mapped(&self, region: &Region, st: &mut RegionState, page: u32) -> bool {
        let Some(i) = st.mapping_of(page) else { return false };
        if !matches!(st.table.get(page), Page::Resident { .. }) {
            return false;
        }
        let addr = region.addr(page);
        if st.maps[i].writes_back() {
            let Some(slot) = self.staging.alloc() else { return false };
            if !matches!(
                self.uffd.move_page(self.staging.addr(slot), addr, PAGE),
                Ok(Placed::Done)
            ) {
                self.staging.release(slot);
                return false;
            }
            let bytes = self.staged_bytes(slot);
            if st.maps[i].dirty(page, bytes) {
                st.pend(page, bytes);
            }
            self.discard_staged(slot);
        } else {
            maps::zap(addr, PAGE);
        }
        st.maps[i].filled.remove(&page);
        st.table.set_absent(page);
        self.frames.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Writes the region's pending pages back to their files (outside its lock: the kernel's
    /// write tells every mapping of the file, this one included). Without `wait` (on a fault
    /// thread), a page whose file a writer holds stays pending for a later write-back; a fault
    /// meanwhile reads the pending copy.
    fn write_back(&self, region: &Region, wait: bool) {
        let jobs: Vec<_> = {
            let st = region.state.lock();
            st.pending
                .iter()
                .filter_map(|(&page, (generation, bytes))| {
                    let m = &st.maps[st.mapping_of(page)?];
                    Some((page, *generation, bytes.clone(), m.source.clone(), m.file_index(page)))
                })
                .collect()
        };
        for (page, generation, bytes, source, index) in jobs {
            let written = source.write_page(index, &bytes, wait);
            if written.as_ref().is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock) {
                continue;
            }
            let written = written.is_ok();
            let mut st = region.state.lock();
            if st.pending.get(&page).is_some_and(|(g, _)| *g == generation) {
                st.pending.remove(&page);
            }
            match st.mapping_of(page) {
                Some(_) if written => {
                    st.stats.written_back += 1;
                    self.written_back.fetch_add(1, Ordering::Relaxed);
                }
                Some(i) => st.maps[i].failed = true,
                None => {}
            }
        }
    }

    /// Queues the changed resident pages of `region`'s shared writable mappings among
    /// `pages` for write-back, as clean from now on. Only while the program cannot run (in a
    /// system call of its own, or gone): its bytes are read in place.
    fn pend_changed(&self, region: &Region, st: &mut RegionState, pages: std::ops::Range<u32>) {
        for i in 0..st.maps.len() {
            if !st.maps[i].writes_back() {
                continue;
            }
            let (first, end) = (st.maps[i].first, st.maps[i].first + st.maps[i].pages);
            for p in pages.start.max(first)..pages.end.min(end) {
                if !matches!(st.table.get(p), Page::Resident { .. }) {
                    continue;
                }
                // SAFETY: a resident page of the program's memory, which lives while its lock
                // is held; the program is not running (see above).
                let bytes = unsafe { std::slice::from_raw_parts(region.addr(p) as *const u8, PAGE) };
                if st.maps[i].dirty(p, bytes) {
                    st.maps[i].filled.insert(p, maps::page_hash(bytes));
                    st.pend(p, bytes);
                }
            }
        }
    }

    /// Gives up `region`'s clean copies of file `key`'s bytes `[start, end)`.
    fn invalidate(&self, region: &Region, st: &mut RegionState, key: u64, start: u64, end: u64) {
        for i in 0..st.maps.len() {
            if st.maps[i].key != key || !st.maps[i].file_backed() {
                continue;
            }
            for p in st.maps[i].pages_of(start, end) {
                let addr = region.addr(p);
                if st.maps[i].fenced.remove(&p) {
                    let _ = maps::protect(addr, PAGE, st.maps[i].prot());
                }
                if !matches!(st.table.get(p), Page::Resident { .. }) {
                    continue;
                }
                if st.maps[i].writes_back() {
                    // Taken out before it is looked at: a store of the program's racing with
                    // the look either lands in the page kept or waits for it to come back.
                    let Some(slot) = self.staging.alloc() else { continue };
                    if !matches!(
                        self.uffd.move_page(self.staging.addr(slot), addr, PAGE),
                        Ok(Placed::Done)
                    ) {
                        self.staging.release(slot);
                        continue;
                    }
                    if st.maps[i].dirty(p, self.staged_bytes(slot)) {
                        // Written through the mapping: it keeps its bytes until msync.
                        let _ = self.uffd.move_page(addr, self.staging.addr(slot), PAGE);
                        self.staging.release(slot);
                        let _ = self.uffd.wake(addr, PAGE);
                        continue;
                    }
                    self.discard_staged(slot);
                    let _ = self.uffd.wake(addr, PAGE);
                } else {
                    maps::zap(addr, PAGE);
                }
                st.maps[i].filled.remove(&p);
                st.table.set_absent(p);
                self.frames.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// The memory is going: its changed shared pages reach their files, its mappings end.
    fn end_mappings(&self, region: &Region) {
        let maps = {
            let mut st = region.state.lock();
            st.dropped = true;
            if st.maps.is_empty() {
                return;
            }
            let all = 0..st.table.len() as u32;
            self.pend_changed(region, &mut st, all);
            std::mem::take(&mut st.maps)
        };
        let pending = std::mem::take(&mut region.state.lock().pending);
        for (page, (_, bytes)) in pending {
            if let Some(m) = maps.iter().find(|m| m.contains(page)) {
                let _ = m.source.write_page(m.file_index(page), &bytes, true);
            }
        }
        region.has_maps.store(false, Ordering::Release);
        for m in &maps {
            self.forget_mapping(region, m.key);
        }
    }

    /// Takes `region` off the list of memories mapping file `key`.
    fn forget_mapping(&self, region: &Region, key: u64) {
        let mut mapped = self.mapped.write();
        if let Some(list) = mapped.get_mut(&key) {
            list.retain(|w| w.upgrade().is_some_and(|r| !std::ptr::eq(Arc::as_ptr(&r), region)));
            if list.is_empty() {
                mapped.remove(&key);
            }
        }
    }
}

/// What the kernel keeps of a process's memory: to map files into it and to pin it while a
/// system call touches it. Does nothing once the memory is gone.
#[derive(Clone)]
pub struct MemoryHandle {
    region: Arc<Region>,
    shared: Option<Arc<Shared>>,
}

/// Why a mapping was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// Not page-aligned, outside the memory, or over another mapping (`EINVAL`).
    Invalid,
    /// The memory holds [`MAX_MAPPINGS`] already (`ENOMEM`).
    TooMany,
    /// The memory is not paged by the kernel, or is gone (`ENODEV`).
    NotPaged,
    /// Writing back failed (`EIO`).
    Io,
}

impl MemoryHandle {
    fn live(&self) -> Option<(&Arc<Shared>, parking_lot::MutexGuard<'_, RegionState>)> {
        let shared = self.shared.as_ref()?;
        let st = self.region.state.lock();
        (!st.dropped).then_some((shared, st))
    }

    fn pages(&self, st: &RegionState, offset: usize, len: usize) -> Result<(u32, u32), MapError> {
        let end = offset.checked_add(len).ok_or(MapError::Invalid)?;
        if len == 0 || !offset.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || end > st.size {
            return Err(MapError::Invalid);
        }
        Ok(((offset / PAGE) as u32, (len / PAGE) as u32))
    }

    /// Maps the file behind `source` (file `key`), from its page `file_page`, at the
    /// `len` bytes of memory at `offset` (both page-aligned). What was there goes.
    pub fn map(
        &self,
        offset: usize,
        len: usize,
        source: Arc<dyn MapSource>,
        key: u64,
        file_page: u64,
        mode: MapMode,
    ) -> Result<(), MapError> {
        let (shared, mut st) = self.live().ok_or(MapError::NotPaged)?;
        let (first, pages) = self.pages(&st, offset, len)?;
        if st.maps.len() >= MAX_MAPPINGS {
            return Err(MapError::TooMany);
        }
        if (first..first + pages).any(|p| st.mapping_of(p).is_some()) {
            return Err(MapError::Invalid);
        }
        shared.clear(&self.region, &mut st, first, pages);
        let mapping = Mapping {
            first,
            pages,
            source,
            key,
            file_page,
            mode,
            filled: HashMap::new(),
            fenced: Default::default(),
            failed: false,
        };
        if !mode.writable {
            maps::protect(self.region.addr(first), len, mapping.prot()).map_err(|_| MapError::Invalid)?;
        }
        let known = st.maps.iter().any(|m| m.key == key);
        let at = st.maps.partition_point(|m| m.first < first);
        st.maps.insert(at, mapping);
        self.region.has_maps.store(true, Ordering::Release);
        drop(st);
        // Listed once per file however often it maps it: a change is looked at once.
        if !known {
            shared
                .mapped
                .write()
                .entry(key)
                .or_default()
                .push(Arc::downgrade(&self.region));
        }
        Ok(())
    }

    /// Ends the mapping of exactly `[offset, offset + len)`: its changes reach the file, and the
    /// range is program memory of zeros again.
    pub fn unmap(&self, offset: usize, len: usize) -> Result<(), MapError> {
        let (shared, mut st) = self.live().ok_or(MapError::NotPaged)?;
        let (first, pages) = self.pages(&st, offset, len)?;
        let i = st.mapping_of(first).ok_or(MapError::Invalid)?;
        if st.maps[i].first != first || st.maps[i].pages != pages {
            return Err(MapError::Invalid);
        }
        shared.pend_changed(&self.region, &mut st, first..first + pages);
        drop(st);
        shared.write_back(&self.region, true);
        let mut st = self.region.state.lock();
        let Some(i) = st.mapping_of(first) else { return Ok(()) };
        let failed = st.maps[i].failed;
        shared.clear(&self.region, &mut st, first, pages);
        let m = st.maps.remove(i);
        let key = m.key;
        let still = st.maps.iter().any(|m| m.key == key);
        self.region.has_maps.store(!st.maps.is_empty(), Ordering::Release);
        drop(st);
        let _ = maps::protect(self.region.addr(first), len, libc::PROT_READ | libc::PROT_WRITE);
        if !still {
            shared.forget_mapping(&self.region, key);
        }
        if failed { Err(MapError::Io) } else { Ok(()) }
    }

    /// Writes back what the program changed through its shared writable mappings within
    /// `[offset, offset + len)`; `durable`: and makes it durable (`MS_SYNC`).
    pub fn sync(&self, offset: usize, len: usize, durable: bool) -> Result<(), MapError> {
        let (shared, mut st) = self.live().ok_or(MapError::NotPaged)?;
        let end = offset.checked_add(len).ok_or(MapError::Invalid)?.min(st.size);
        if !offset.is_multiple_of(PAGE) {
            return Err(MapError::Invalid);
        }
        let pages = (offset / PAGE) as u32..end.div_ceil(PAGE) as u32;
        shared.pend_changed(&self.region, &mut st, pages.clone());
        drop(st);
        shared.write_back(&self.region, true);
        let mut st = self.region.state.lock();
        let mut failed = false;
        let mut sources = Vec::new();
        for m in st.maps.iter_mut() {
            if m.first < pages.end && pages.start < m.first + m.pages && m.writes_back() {
                failed |= std::mem::take(&mut m.failed);
                sources.push(m.source.clone());
            }
        }
        drop(st);
        if durable {
            for s in sources {
                failed |= s.sync().is_err();
            }
        }
        if failed { Err(MapError::Io) } else { Ok(()) }
    }

    /// Pins the memory for a system call, if it has mappings (else `None`: nothing to check).
    pub fn pin(&self) -> Option<HostPin> {
        if !self.region.has_maps.load(Ordering::Acquire) {
            return None;
        }
        let (_, mut st) = self.live()?;
        st.pins += 1;
        drop(st);
        Some(HostPin(self.clone()))
    }

    /// Counts of the memory.
    pub fn stats(&self) -> MemoryStats {
        self.region.stats()
    }
}

/// A system call in progress on a memory with mappings. While any is, the memory's file pages
/// are not evicted and changes to their files wait, so the pages [`HostPin::check`] touched
/// stay in place: kernel code never faults on a file page while it may hold a kernel lock the
/// fault's read of the file would need.
pub struct HostPin(MemoryHandle);

impl HostPin {
    /// Whether the kernel may touch `[offset, offset + len)` of the memory (`write`: store into
    /// it): false for a store into a read-only mapping and for a mapped page past the end of
    /// its file (the call fails with `EFAULT`). Touches its file pages first.
    pub fn check(&self, offset: usize, len: usize, write: bool) -> bool {
        if len == 0 {
            return true;
        }
        let region = &self.0.region;
        let (first, last) = ((offset / PAGE) as u32, ((offset + len - 1) / PAGE) as u32);
        let mut touch = Vec::new();
        {
            let st = region.state.lock();
            for m in st.maps.iter().filter(|m| m.first <= last && first < m.first + m.pages) {
                if write && !m.mode.writable {
                    return false;
                }
                let size = m.source.size();
                for p in first.max(m.first)..=last.min(m.first + m.pages - 1) {
                    if m.fenced.contains(&p) || m.file_index(p) * PAGE as u64 >= size {
                        return false;
                    }
                    touch.push(p);
                }
            }
        }
        for p in touch {
            // SAFETY: a page of the memory's usable part (mapped, so readable); the read
            // faults it in if it is not.
            unsafe { std::ptr::read_volatile(region.addr(p) as *const u8) };
        }
        true
    }
}

impl Drop for HostPin {
    fn drop(&mut self) {
        let Some(shared) = self.0.shared.as_ref() else { return };
        let region = &self.0.region;
        let mut st = region.state.lock();
        st.pins -= 1;
        if st.pins == 0 {
            for (key, start, end) in std::mem::take(&mut st.deferred) {
                shared.invalidate(region, &mut st, key, start, end);
            }
        }
    }
}

impl Shared {
    /// Gives up whatever `pages` pages from `first` hold (frames, staging, swap): they read as
    /// zeros, or from the file if mapped, at the next touch.
    fn clear(&self, region: &Region, st: &mut RegionState, first: u32, pages: u32) {
        let swapped: u64 = (first..first + pages).map(|p| self.give_up(region, st, p, true)).sum();
        if swapped > 0 {
            region.owner.uncharge_swap(swapped);
        }
    }

    /// Gives up what `page` holds (its frame, taken out of the program's memory if `zap`; its
    /// staging slot; its swap slot, counted in the result for the caller to uncharge).
    fn give_up(&self, region: &Region, st: &mut RegionState, page: u32, zap: bool) -> u64 {
        let mut swapped = 0;
        match st.table.get(page) {
            Page::Resident { .. } => {
                if zap {
                    maps::zap(region.addr(page), PAGE);
                }
                self.frames.fetch_sub(1, Ordering::Relaxed);
            }
            Page::Inactive { staged, .. } => {
                self.discard_staged(staged);
                self.frames.fetch_sub(1, Ordering::Relaxed);
            }
            Page::Swapped(at) => {
                self.swap.free(at.slot);
                swapped = 1;
            }
            Page::Absent => {}
        }
        st.table.set_absent(page);
        st.pending.remove(&page);
        if let Some(i) = st.mapping_of(page) {
            st.maps[i].filled.remove(&page);
            st.maps[i].fenced.remove(&page);
        }
        swapped
    }
}
