//! VINO's I/O scheduler: the layer between the buffer cache and the block device.
//!
//! Requests wait here. Whenever the device can take another one (fewer than `depth` requests in
//! flight) and more than one is waiting, the scheduler asks the global graftpoint
//! `disk.pick_request` which goes next: the "which disk request to schedule next" decision the
//! thesis lists among prioritization policies (Small 1998, 4.2.1). Only a privileged process may
//! graft it. The default is an elevator; FIFO is the native alternative, and both exist as C
//! grafts (`sdk/grafts/elevator.c`, `sdk/grafts/fifo.c`).
//!
//! # The elevator
//!
//! A one-way elevator (C-SCAN; strictly C-LOOK, as BSD's `disksort`): the head sweeps towards
//! higher blocks serving the nearest request at or after it; when none is left ahead it returns
//! to the lowest waiting block and sweeps again. One direction only, so a request just behind
//! the head waits at most one sweep, and the middle of the disk is not favoured as with a
//! two-way SCAN. The head position is where the last dispatched request ended (its first block
//! plus its length): a request continuing the previous one is served next.
//!
//! Starvation: a steady stream of requests just ahead of the head (a sequential writer) could
//! keep a sweep going for ever. Hence an age cap: when the longest-waiting request has waited
//! `age_cap` (default 1 s) it is served next, whatever the sweep. Flushes are barriers: a flush
//! waits until every request submitted before it has completed, and requests submitted after it
//! are not considered until it has been dispatched; a flush is never shown to the graft.
//! The file system's own requests ([`vino_blockdev::IoRequest::meta`], made under a lock all
//! users wait for) go before the others, oldest first, and are not shown to the graft either.
//!
//! # The graft ABI
//!
//! `disk_pick_request(n: i32, head: i64) -> i32`. The argument area holds `n` (1..=128)
//! [`Candidate`] entries of 24 bytes, little-endian, in arrival order (entry 0 has waited
//! longest):
//!
//! ```c
//! struct vino_disk_request {
//!     uint64_t block;   /* first block (4096-byte blocks) */
//!     uint32_t nblocks; /* length in blocks */
//!     uint32_t flags;   /* bit 0: write */
//!     uint64_t age_ns;  /* how long it has waited */
//! };
//! ```
//!
//! `head` is the block after the last dispatched request. The result is the index of the request
//! to dispatch, in `[0, n)`; anything else is invalid: the transaction aborts, the elevator
//! decides, and the failure is counted. With more than 128 requests waiting, the 128 that have
//! waited longest are offered.
//!
//! # Who dispatches
//!
//! [`Dispatch::Thread`] (the default) runs the dispatcher on a thread of its own. With
//! [`Dispatch::Caller`] there is no such thread: whoever makes the queue ready runs it, the
//! thread that submits or unplugs, or the one that completes a request and frees a place at the
//! device. One thread at a time dispatches; another that finds it busy leaves its request for
//! it. Together with the inline device queue ([`BackendChoice::Inline`]) a request is then served
//! on the thread that needs it, with no hand-off, and every device operation happens in an
//! order fixed by the callers alone: what the deterministic simulator needs. On the other
//! queues a request marked [`IoRequest::awaited`] by the thread that dispatches it (a cache
//! miss, the file system's own reads and writes), with nothing else ready to send, is served on
//! that thread too ([`IoQueue::serve_here`]): the thread would
//! only wait for a completion thread to wake it. It lets others dispatch while it reads.

#![forbid(unsafe_code)]

mod device;
pub mod shadow;
pub use device::ScheduledDevice;

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use vino_blockdev::{
    AlignedBuf, BLOCK_SIZE, Backend, BackendChoice, BlockDevice, Completer, Finished, IoOp, IoQueue, IoRequest,
    QueueConfig, SharedClock, Ticket, check_transfer, ticket,
};
use vino_graft::{Access, GraftPoint, GraftSlot, Invalid, NativePolicy, Runtime};

/// Most requests offered to `disk.pick_request` in one call.
pub const PICK_MAX: usize = 128;
/// Size of one entry of the argument area.
pub const ENTRY_BYTES: usize = 24;
/// `flags` bit of a write.
pub const FLAG_WRITE: u32 = 1;
/// The elevator's default age cap.
pub const DEFAULT_AGE_CAP: Duration = Duration::from_secs(1);

/// A waiting request as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Candidate {
    pub block: u64,
    pub nblocks: u32,
    /// Bit 0 ([`FLAG_WRITE`]): a write.
    pub flags: u32,
    /// How long it has waited, in nanoseconds.
    pub age_ns: u64,
}

impl Candidate {
    pub fn is_write(&self) -> bool {
        self.flags & FLAG_WRITE != 0
    }
}

/// The arguments of `disk.pick_request`: the waiting requests in arrival order (at most
/// [`PICK_MAX`], at least one) and the head position.
#[derive(Debug, Clone, Copy)]
pub struct PickArgs<'a> {
    pub pending: &'a [Candidate],
    pub head: u64,
}

/// What the default policy needs to know.
#[derive(Debug, Clone, Copy)]
pub struct PickEnv {
    /// A request that has waited this long is served next; 0 turns the cap off.
    pub age_cap_ns: u64,
}

/// The elevator (C-LOOK with an age cap; see the crate documentation). Ties go to the request
/// that has waited longest (the lower index). `pending` must not be empty.
pub fn elevator(pending: &[Candidate], head: u64, age_cap_ns: u64) -> usize {
    if age_cap_ns > 0 {
        let oldest = pending
            .iter()
            .enumerate()
            .max_by(|(i, a), (j, b)| a.age_ns.cmp(&b.age_ns).then(j.cmp(i)));
        if let Some((i, c)) = oldest
            && c.age_ns >= age_cap_ns
        {
            return i;
        }
    }
    let lowest_from = |from: u64| {
        pending
            .iter()
            .enumerate()
            .filter(|(_, c)| c.block >= from)
            .min_by_key(|(i, c)| (c.block, *i))
            .map(|(i, _)| i)
    };
    lowest_from(head).or_else(|| lowest_from(0)).unwrap_or(0)
}

/// First come, first served.
pub fn fifo(_pending: &[Candidate], _head: u64) -> usize {
    0
}

/// Copies the candidates into the argument area; returns how many fit (at most [`PICK_MAX`]).
pub fn encode_pending(pending: &[Candidate], area: &mut [u8]) -> i32 {
    let n = pending.len().min(PICK_MAX).min(area.len() / ENTRY_BYTES);
    for (slot, c) in area.chunks_exact_mut(ENTRY_BYTES).zip(&pending[..n]) {
        slot[0..8].copy_from_slice(&c.block.to_le_bytes());
        slot[8..12].copy_from_slice(&c.nblocks.to_le_bytes());
        slot[12..16].copy_from_slice(&c.flags.to_le_bytes());
        slot[16..24].copy_from_slice(&c.age_ns.to_le_bytes());
    }
    n as i32
}

/// Checks the index a graft chose among `n` candidates.
pub fn decode_pick(choice: i32, n: usize) -> Result<usize, Invalid> {
    usize::try_from(choice)
        .ok()
        .filter(|&i| i < n)
        .ok_or_else(|| Invalid(format!("request index {choice} is not one of the {n} waiting")))
}

/// The graftpoint `disk.pick_request`: which waiting request the device serves next.
pub struct PickRequest;

impl GraftPoint for PickRequest {
    const NAME: &'static str = "disk.pick_request";
    const USES_ARG_AREA: bool = true;
    const RECORDS_DEFAULT: bool = true;
    type Env = PickEnv;
    type Args<'a> = PickArgs<'a>;
    type Output = usize;
    type Params = (i32, i64);
    type Results = i32;

    fn default_policy(env: &PickEnv, args: &PickArgs<'_>) -> usize {
        elevator(args.pending, args.head, env.age_cap_ns)
    }

    fn encode(_: &PickEnv, args: &PickArgs<'_>, area: &mut [u8]) -> (i32, i64) {
        (encode_pending(args.pending, area), args.head as i64)
    }

    fn decode(_: &PickEnv, args: &PickArgs<'_>, choice: i32, _: &[u8]) -> Result<usize, Invalid> {
        decode_pick(choice, args.pending.len().min(PICK_MAX))
    }

    fn answer(_: &PickEnv, _: &PickArgs<'_>, choice: &usize, _: &mut [u8]) -> Option<i32> {
        (*choice < PICK_MAX).then_some(*choice as i32)
    }
}

/// Policies the kernel itself can bind to the graftpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Nothing bound: the default (the elevator) decides.
    Default,
    /// The elevator as a native policy (the same decisions as the default, counted as a binding).
    Elevator,
    /// First come, first served.
    Fifo,
}

/// Which thread runs the dispatcher (see the crate documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// A thread of the scheduler's own.
    #[default]
    Thread,
    /// The threads that submit, unplug and complete requests.
    Caller,
}

/// How to build an [`IoScheduler`].
#[derive(Debug, Clone)]
pub struct SchedConfig {
    /// Most requests in flight at the device (at least 1). A disk of the 1990s serves one at a
    /// time: depth 1 leaves every choice to the scheduler.
    pub depth: usize,
    /// See [`PickEnv::age_cap_ns`].
    pub age_cap: Duration,
    /// Backend of the device queue.
    pub backend: BackendChoice,
    pub dispatch: Dispatch,
    /// Where request ages come from.
    pub clock: SharedClock,
}

impl SchedConfig {
    pub fn new(depth: usize) -> Self {
        SchedConfig {
            depth,
            age_cap: DEFAULT_AGE_CAP,
            backend: BackendChoice::Auto,
            dispatch: Dispatch::Thread,
            clock: SharedClock::default(),
        }
    }
}

/// The scheduler's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SchedStats {
    /// Requests accepted into the queue.
    pub submitted: u64,
    /// Requests refused at submission (a range past the device, a bad buffer).
    pub refused: u64,
    /// Device requests sent and completed: a merged request counts once for all its parts
    /// (`submitted` = `completed` + `merged` + `flushes_elided` once everything is served).
    pub dispatched: u64,
    pub completed: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Dispatched requests that failed at the device.
    pub errors: u64,
    /// Times the policy was asked (two or more requests waiting).
    pub decisions: u64,
    /// Dispatches of a request other than the one that had waited longest.
    pub reorderings: u64,
    /// Decisions where the bound graft failed and the elevator decided instead.
    pub graft_failures: u64,
    /// Most requests ever waiting at once.
    pub max_pending: u64,
    /// Total time from submission to dispatch, ns.
    pub wait_ns: u64,
    /// Total time from dispatch to completion, ns.
    pub service_ns: u64,
    /// Total head movement between consecutive dispatches, in blocks.
    pub head_travel_blocks: u64,
    /// Requests that went to the device as part of another's (adjacent blocks, same direction).
    pub merged: u64,
    /// Flushes completed without the device: no write was sent since the last flush was (every
    /// write before a flush has completed when it is dispatched, so that flush covered them).
    pub flushes_elided: u64,
}

impl SchedStats {
    /// Average time a request waited in the scheduler.
    pub fn mean_wait(&self) -> Duration {
        Duration::from_nanos(self.wait_ns.checked_div(self.dispatched).unwrap_or(0))
    }

    /// Average time a request spent at the device.
    pub fn mean_service(&self) -> Duration {
        Duration::from_nanos(self.service_ns.checked_div(self.completed).unwrap_or(0))
    }
}

/// What [`Core::take_next`] took from the queue.
enum Next {
    /// To the device.
    Send(Pending),
    /// A flush with no write sent since the last one: complete it at once.
    Elided(Pending),
}

struct Pending {
    req: IoRequest,
    completer: Completer,
    /// When it was submitted, on the scheduler's clock.
    submitted: Duration,
}

struct State {
    pending: VecDeque<Pending>,
    in_flight: usize,
    plugged: bool,
    shutdown: bool,
    /// A thread is dispatching ([`Dispatch::Caller`]): others leave their requests to it.
    dispatching: bool,
    /// A write was sent since the last flush was (or that flush failed): the next flush must
    /// go to the device. A user repeating fsync or sync with nothing written in between costs
    /// others no device flushes.
    unflushed: bool,
    head: u64,
    stats: SchedStats,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    depth: usize,
    clock: SharedClock,
}

impl Shared {
    /// True if the dispatcher can send the front of the queue now.
    fn ready(&self, st: &State) -> bool {
        let Some(front) = st.pending.front() else { return false };
        if st.in_flight >= self.depth || (st.plugged && !st.shutdown) {
            return false;
        }
        // A flush waits for everything submitted before it.
        !(front.req.op == IoOp::Flush && st.in_flight > 0)
    }
}

/// The I/O scheduler of one device (see the crate documentation).
pub struct IoScheduler {
    core: Arc<Core>,
    device: Arc<dyn BlockDevice>,
    /// The dispatcher's thread ([`Dispatch::Thread`]).
    dispatcher: Option<JoinHandle<()>>,
}

/// What dispatching needs, shared with the dispatcher's thread or the completion hook.
struct Core {
    shared: Arc<Shared>,
    queue: IoQueue,
    slot: Arc<GraftSlot<PickRequest>>,
    dispatch: Dispatch,
    /// A candidate in shadow beside the live policy (`vino graft try`), and whether there is
    /// one (read without the lock at every decision).
    shadow: Mutex<Option<Arc<shadow::DiskTry>>>,
    trying: std::sync::atomic::AtomicBool,
}

impl IoScheduler {
    /// A scheduler letting `depth` requests be in flight at `device`, with the default age cap.
    pub fn new(device: Arc<dyn BlockDevice>, runtime: &Runtime, depth: usize) -> io::Result<IoScheduler> {
        Self::with_config(device, runtime, SchedConfig::new(depth))
    }

    pub fn with_config(
        device: Arc<dyn BlockDevice>,
        runtime: &Runtime,
        config: SchedConfig,
    ) -> io::Result<IoScheduler> {
        let depth = config.depth.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                in_flight: 0,
                plugged: false,
                shutdown: false,
                dispatching: false,
                unflushed: true,
                head: 0,
                stats: SchedStats::default(),
            }),
            cv: Condvar::new(),
            depth,
            clock: config.clock.clone(),
        });
        let for_hook = shared.clone();
        // Dispatching by the callers: a completion frees a place, so the completing thread
        // dispatches what waits for it. The hook is made before the core it needs.
        let core_for_hook: Arc<OnceLock<Weak<Core>>> = Arc::new(OnceLock::new());
        let hook_core = core_for_hook.clone();
        let hook = Arc::new(move |done: &Finished| {
            {
                let mut st = for_hook.state.lock();
                st.in_flight -= 1;
                st.stats.completed += 1;
                st.stats.service_ns += done.service.as_nanos() as u64;
                if !done.ok {
                    st.stats.errors += 1;
                    if done.op == IoOp::Flush {
                        st.unflushed = true;
                    }
                }
            }
            for_hook.cv.notify_all();
            if let Some(core) = hook_core.get().and_then(Weak::upgrade) {
                core.run();
            }
        });
        let queue = IoQueue::with_config(
            device.clone(),
            QueueConfig {
                depth,
                backend: config.backend,
                threads: 0,
                hook: Some(hook),
            },
        )?;
        let env = Arc::new(PickEnv {
            age_cap_ns: config.age_cap.as_nanos().min(u64::MAX as u128) as u64,
        });
        let slot = Arc::new(GraftSlot::new(runtime, env, Access::Privileged, None));
        let core = Arc::new(Core {
            shared,
            queue,
            slot,
            dispatch: config.dispatch,
            shadow: Mutex::new(None),
            trying: std::sync::atomic::AtomicBool::new(false),
        });
        let dispatcher = match config.dispatch {
            Dispatch::Thread => {
                let core = core.clone();
                Some(
                    std::thread::Builder::new()
                        .name("vino-iosched".into())
                        .spawn(move || core.dispatch_loop())?,
                )
            }
            Dispatch::Caller => {
                let _ = core_for_hook.set(Arc::downgrade(&core));
                None
            }
        };
        Ok(IoScheduler {
            core,
            device,
            dispatcher,
        })
    }

    /// The graftpoint, for the kernel to register in its namespace.
    pub fn slot(&self) -> &Arc<GraftSlot<PickRequest>> {
        &self.core.slot
    }

    /// Starts `wasm`, a `disk.pick_request` graft, in shadow beside the live policy, offered
    /// 1 in `sample` of its decisions (see [`shadow`]); it replaces a shadow already there. The
    /// caller checks that `owner` may graft here (privileged: the requests are every user's).
    pub fn try_start(
        &self,
        wasm: &[u8],
        owner: vino_graft::Owner,
        sample: Option<u32>,
        queue: usize,
    ) -> Result<Arc<shadow::DiskTry>, vino_graft::LoadError> {
        let shadow = shadow::DiskTry::start(&self.core.slot, wasm, owner, sample, queue)?;
        let old = self.core.shadow.lock().replace(shadow.clone());
        self.core.trying.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(old) = old {
            old.stop();
        }
        Ok(shadow)
    }

    /// Stops the shadow, once it has drained what it was offered: what it found.
    pub fn try_stop(&self) -> Option<shadow::DiskTryReport> {
        let shadow = self.core.shadow.lock().take()?;
        self.core.trying.store(false, std::sync::atomic::Ordering::Relaxed);
        Some(shadow.stop())
    }

    /// The shadow, if one runs.
    pub fn try_handle(&self) -> Option<Arc<shadow::DiskTry>> {
        self.core.shadow.lock().clone()
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.device
    }

    /// The backend of the device queue.
    pub fn backend(&self) -> Backend {
        self.core.queue.backend()
    }

    pub fn depth(&self) -> usize {
        self.core.shared.depth
    }

    /// Who runs the dispatcher.
    pub fn dispatch(&self) -> Dispatch {
        self.core.dispatch
    }

    /// Binds one of the kernel's own policies (or puts the default back).
    pub fn set_policy(&self, policy: Policy) {
        let slot = &self.core.slot;
        match policy {
            Policy::Default => {
                slot.unload();
            }
            Policy::Elevator => {
                let p: Arc<dyn NativePolicy<PickRequest>> = Arc::new(|env: &PickEnv, args: &PickArgs<'_>| {
                    Ok(elevator(args.pending, args.head, env.age_cap_ns))
                });
                slot.bind_native(p, false);
            }
            Policy::Fifo => {
                let p: Arc<dyn NativePolicy<PickRequest>> =
                    Arc::new(|_: &PickEnv, args: &PickArgs<'_>| Ok(fifo(args.pending, args.head)));
                slot.bind_native(p, false);
            }
        }
    }

    /// Queues a request; its ticket completes when the device has served it. A request that
    /// does not fit the device completes at once with an error.
    pub fn submit(&self, req: IoRequest) -> Ticket {
        if let Err(e) = req.check(&*self.device) {
            self.core.shared.state.lock().stats.refused += 1;
            self.device.counters().refused();
            return Ticket::ready(Err(e));
        }
        let (t, completer) = ticket();
        let shared = &self.core.shared;
        {
            let mut st = shared.state.lock();
            st.pending.push_back(Pending {
                req,
                completer,
                submitted: shared.clock.monotonic(),
            });
            st.stats.submitted += 1;
            st.stats.max_pending = st.stats.max_pending.max(st.pending.len() as u64);
        }
        shared.cv.notify_all();
        self.core.run();
        t
    }

    /// Queues several requests at once, then dispatches: all of them wait together, so the
    /// policy orders them and adjacent ones merge even when the device could take the first
    /// at once (as a plugged Linux queue gathers a task's batch).
    pub fn submit_batch(&self, reqs: Vec<IoRequest>) -> Vec<Ticket> {
        let shared = &self.core.shared;
        let mut tickets = Vec::with_capacity(reqs.len());
        {
            let mut st = shared.state.lock();
            for req in reqs {
                if let Err(e) = req.check(&*self.device) {
                    st.stats.refused += 1;
                    self.device.counters().refused();
                    tickets.push(Ticket::ready(Err(e)));
                    continue;
                }
                let (t, completer) = ticket();
                st.pending.push_back(Pending {
                    req,
                    completer,
                    submitted: shared.clock.monotonic(),
                });
                st.stats.submitted += 1;
                tickets.push(t);
            }
            st.stats.max_pending = st.stats.max_pending.max(st.pending.len() as u64);
        }
        shared.cv.notify_all();
        self.core.run();
        tickets
    }

    /// Reads `buf.len() / BLOCK_SIZE` blocks at `block` through the scheduler and waits.
    pub fn read_sync(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let blocks = check_transfer(self.device.name(), self.device.block_count(), block, buf.len())?;
        let data = self.submit(IoRequest::read(block, blocks as usize)).wait()?;
        buf.copy_from_slice(&data);
        Ok(())
    }

    /// Writes whole blocks at `block` through the scheduler and waits.
    pub fn write_sync(&self, block: u64, data: &[u8]) -> io::Result<()> {
        check_transfer(self.device.name(), self.device.block_count(), block, data.len())?;
        self.submit(IoRequest::write(block, AlignedBuf::from_slice(data)))
            .wait()
            .map(|_| ())
    }

    /// A durability barrier through the scheduler: returns when every write submitted before it
    /// has completed and is durable.
    pub fn flush_sync(&self) -> io::Result<()> {
        self.submit(IoRequest::flush()).wait().map(|_| ())
    }

    /// Holds dispatching: requests queue up until [`IoScheduler::unplug`] (as Linux plugs a
    /// block queue to gather a batch).
    pub fn plug(&self) {
        self.core.shared.state.lock().plugged = true;
    }

    pub fn unplug(&self) {
        self.core.shared.state.lock().plugged = false;
        self.core.shared.cv.notify_all();
        self.core.run();
    }

    /// Requests waiting to be dispatched.
    pub fn pending(&self) -> usize {
        self.core.shared.state.lock().pending.len()
    }

    /// Requests at the device.
    pub fn in_flight(&self) -> usize {
        self.core.shared.state.lock().in_flight
    }

    /// Where the last dispatched request ended.
    pub fn head(&self) -> u64 {
        self.core.shared.state.lock().head
    }

    /// Waits until nothing is waiting or in flight (unplugging first).
    pub fn drain(&self) {
        self.unplug();
        let shared = &self.core.shared;
        let mut st = shared.state.lock();
        while !st.pending.is_empty() || st.in_flight > 0 {
            shared.cv.wait(&mut st);
        }
    }

    pub fn stats(&self) -> SchedStats {
        self.core.shared.state.lock().stats
    }
}

impl Drop for IoScheduler {
    /// Serves every request still waiting, then stops.
    fn drop(&mut self) {
        self.core.shared.state.lock().shutdown = true;
        self.core.shared.cv.notify_all();
        match self.dispatcher.take() {
            Some(d) => {
                let _ = d.join();
            }
            None => self.core.run(),
        }
        // The queue, dropped with the last reference, waits for the requests in flight.
    }
}

impl Core {
    /// [`Dispatch::Caller`]: dispatches on this thread whatever the device can take now,
    /// unless another thread is doing so (it will see what was queued: the flag is cleared
    /// only under the lock, after finding the queue not ready).
    fn run(&self) {
        if self.dispatch != Dispatch::Caller {
            return;
        }
        let mut candidates = Vec::new();
        let mut st = self.shared.state.lock();
        if st.dispatching {
            return;
        }
        st.dispatching = true;
        while self.shared.ready(&st) {
            let (mut guard, p) = match self.take_next(st, &mut candidates) {
                (guard, Next::Send(p)) => (guard, p),
                (guard, Next::Elided(p)) => {
                    drop(guard);
                    p.completer.complete(Ok(p.req.buf));
                    st = self.shared.state.lock();
                    continue;
                }
            };
            // A read this thread is about to wait for, with nothing else to send now, is read
            // here: through the backend its completion would wake this thread from another
            // (two cross-CPU wake-ups on every synchronous miss). Meanwhile another thread may
            // dispatch what comes in, so concurrent misses still reach the device together.
            if p.req.awaited_here() && !self.shared.ready(&guard) {
                guard.dispatching = false;
                drop(guard);
                self.queue.serve_here(p.req, p.completer);
                st = self.shared.state.lock();
                if st.dispatching {
                    return;
                }
                st.dispatching = true;
                continue;
            }
            drop(guard);
            // An inline queue serves it here; its completion calls `run` again, which
            // returns at once: this loop goes on.
            self.queue.submit_with(p.req, p.completer);
            st = self.shared.state.lock();
        }
        st.dispatching = false;
    }

    /// [`Dispatch::Thread`]: the dispatcher's thread.
    fn dispatch_loop(&self) {
        let mut candidates: Vec<Candidate> = Vec::with_capacity(PICK_MAX);
        loop {
            let mut st = self.shared.state.lock();
            while !self.shared.ready(&st) {
                if st.shutdown && st.pending.is_empty() {
                    return;
                }
                self.shared.cv.wait(&mut st);
            }
            let (guard, next) = self.take_next(st, &mut candidates);
            drop(guard);
            match next {
                Next::Send(p) => self.queue.submit_with(p.req, p.completer),
                Next::Elided(p) => p.completer.complete(Ok(p.req.buf)),
            }
        }
    }

    /// Takes the request to send next from a ready queue, asking the policy when several
    /// wait, and counts it in flight; or a flush that need not go ([`State::unflushed`]),
    /// for the caller to complete once the lock is dropped. Only the dispatching thread removes
    /// requests, so the candidates stay where they are while the policy runs without the lock.
    fn take_next<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        candidates: &mut Vec<Candidate>,
    ) -> (MutexGuard<'a, State>, Next) {
        let now = self.shared.clock.monotonic();
        let chosen = if st.pending[0].req.op == IoOp::Flush {
            0
        } else {
            // Requests after a flush wait until it has gone.
            let before_flush = st
                .pending
                .iter()
                .position(|p| p.req.op == IoOp::Flush)
                .unwrap_or(st.pending.len());
            let n = before_flush.min(PICK_MAX);
            let meta = st.pending.iter().take(before_flush).position(|p| p.req.meta);
            if let Some(i) = meta {
                // The file system's own I/O goes first, oldest first, not offered to the policy.
                i
            } else if n == 1 {
                0
            } else {
                candidates.clear();
                candidates.extend(st.pending.iter().take(n).map(|p| Candidate {
                    block: p.req.block,
                    nblocks: p.req.blocks().min(u32::MAX as u64) as u32,
                    flags: if p.req.op == IoOp::Write { FLAG_WRITE } else { 0 },
                    age_ns: now.saturating_sub(p.submitted).as_nanos() as u64,
                }));
                let head = st.head;
                drop(st);
                let slot = &self.slot;
                let failures_before = slot.stats().map_or(0, |s| s.failures);
                let choice = slot.invoke(&PickArgs {
                    pending: candidates,
                    head,
                });
                let failures_after = slot.stats().map_or(0, |s| s.failures);
                if self.trying.load(std::sync::atomic::Ordering::Relaxed)
                    && let Some(shadow) = &*self.shadow.lock()
                {
                    shadow.offer(candidates, head, choice);
                }
                st = self.shared.state.lock();
                st.stats.decisions += 1;
                st.stats.graft_failures += failures_after.saturating_sub(failures_before);
                choice
            }
        };
        let p = st.pending.remove(chosen).expect("the policy's choice was checked");
        match p.req.op {
            IoOp::Flush if !st.unflushed => {
                st.stats.flushes_elided += 1;
                return (st, Next::Elided(p));
            }
            IoOp::Flush => st.unflushed = false,
            IoOp::Write => st.unflushed = true,
            IoOp::Read => {}
        }
        let p = merge_adjacent(&mut st, p);
        let st_ref = &mut *st;
        let stats = &mut st_ref.stats;
        stats.dispatched += 1;
        stats.wait_ns += now.saturating_sub(p.submitted).as_nanos() as u64;
        if chosen != 0 {
            stats.reorderings += 1;
        }
        match p.req.op {
            IoOp::Read => stats.reads += 1,
            IoOp::Write => stats.writes += 1,
            IoOp::Flush => stats.flushes += 1,
        }
        if p.req.op != IoOp::Flush {
            stats.head_travel_blocks += p.req.block.abs_diff(st_ref.head);
            st_ref.head = p.req.block + p.req.blocks();
        }
        st_ref.in_flight += 1;
        (st, Next::Send(p))
    }
}

/// Most blocks a merged request carries (1 MiB).
pub const MERGE_MAX_BLOCKS: u64 = 256;

/// Takes into `first` the waiting requests (before any flush) that continue it on the device in
/// the same direction, on either side, up to [`MERGE_MAX_BLOCKS`]: one device request serves
/// them all, and each part's ticket completes with its own buffer (a read's filled from the
/// merged one). The policy has ordered the queue; merging only saves the device round trips,
/// as Linux's elevator merges a bio into a queued request.
fn merge_adjacent(st: &mut State, first: Pending) -> Pending {
    let op = first.req.op;
    // A request already vectored (none is submitted so today) keeps its shape.
    if op == IoOp::Flush || !first.req.more.is_empty() {
        return first;
    }
    let mut limit = st
        .pending
        .iter()
        .position(|p| p.req.op == IoOp::Flush)
        .unwrap_or(st.pending.len());
    let (mut start, mut end) = (first.req.block, first.req.block + first.req.blocks());
    let mut parts = vec![first];
    while end - start < MERGE_MAX_BLOCKS {
        let next = st.pending.iter().take(limit).position(|p| {
            let r = &p.req;
            r.op == op
                && r.blocks() > 0
                && r.more.is_empty()
                && (r.block == end || r.block + r.blocks() == start)
                && end - start + r.blocks() <= MERGE_MAX_BLOCKS
        });
        let Some(i) = next else { break };
        let p = st.pending.remove(i).expect("found above");
        limit -= 1;
        if p.req.block == end {
            end += p.req.blocks();
        } else {
            start = p.req.block;
        }
        parts.push(p);
    }
    if parts.len() == 1 {
        return parts.pop().expect("one part");
    }
    st.stats.merged += parts.len() as u64 - 1;
    parts.sort_by_key(|p| p.req.block);
    // Waited for by this thread if any part is, else by whoever waits for a part.
    let waiter = parts
        .iter()
        .find(|p| p.req.awaited_here())
        .or_else(|| parts.iter().find(|p| p.req.waiter.is_some()))
        .and_then(|p| p.req.waiter);
    let submitted = parts.iter().map(|p| p.submitted).min().expect("parts");
    // The parts are adjacent and sorted: one vectored transfer reads into (writes from) their
    // own buffers in place, so merging costs no copy.
    let mut bufs = Vec::with_capacity(parts.len());
    let mut completers = Vec::with_capacity(parts.len());
    for p in parts {
        bufs.push(p.req.buf);
        completers.push(p.completer);
    }
    let completer = Completer::then_all(move |result| match result {
        Ok(bufs) => {
            debug_assert_eq!(bufs.len(), completers.len(), "a buffer back for every part");
            for (buf, c) in bufs.into_iter().zip(completers) {
                c.complete(Ok(buf));
            }
        }
        Err(e) => {
            for c in completers {
                c.complete(Err(io::Error::new(e.kind(), e.to_string())));
            }
        }
    });
    let mut req = IoRequest::vectored(op, start, bufs);
    req.waiter = waiter;
    Pending {
        req,
        completer,
        submitted,
    }
}

/// Bytes of the argument area `n` candidates take.
pub const fn area_bytes(n: usize) -> usize {
    n * ENTRY_BYTES
}

const _: () = assert!(
    area_bytes(PICK_MAX) <= vino_graft::ARG_BYTES,
    "the candidates fit the argument area"
);
const _: () = assert!(BLOCK_SIZE == 4096);

#[cfg(test)]
mod tests {
    use super::*;

    fn c(block: u64, age_ns: u64) -> Candidate {
        Candidate {
            block,
            nblocks: 1,
            flags: 0,
            age_ns,
        }
    }

    #[test]
    fn elevator_sweeps_up_then_wraps() {
        let pending = [c(50, 5), c(10, 4), c(70, 3), c(30, 2), c(50, 1)];
        assert_eq!(
            elevator(&pending, 40, 0),
            0,
            "nearest at or after the head; ties to the oldest"
        );
        assert_eq!(elevator(&pending, 51, 0), 2);
        assert_eq!(elevator(&pending, 71, 0), 1, "nothing ahead: back to the lowest");
        assert_eq!(elevator(&pending, 30, 0), 3, "a request at the head goes first");
    }

    #[test]
    fn the_age_cap_serves_the_oldest() {
        let pending = [c(90, 2_000), c(10, 100), c(41, 50)];
        assert_eq!(elevator(&pending, 40, 1_000), 0);
        assert_eq!(elevator(&pending, 40, 5_000), 2);
        assert_eq!(elevator(&pending, 40, 0), 2, "cap off");
    }

    #[test]
    fn arguments_round_trip() {
        let pending: Vec<Candidate> = (0..200)
            .map(|i| Candidate {
                block: i * 3,
                nblocks: i as u32,
                flags: (i % 2) as u32,
                age_ns: 1000 - i,
            })
            .collect();
        let mut area = vec![0u8; vino_graft::ARG_BYTES];
        assert_eq!(encode_pending(&pending, &mut area), PICK_MAX as i32);
        let e = &area[5 * ENTRY_BYTES..6 * ENTRY_BYTES];
        assert_eq!(u64::from_le_bytes(e[0..8].try_into().unwrap()), 15);
        assert_eq!(u32::from_le_bytes(e[8..12].try_into().unwrap()), 5);
        assert_eq!(u32::from_le_bytes(e[12..16].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(e[16..24].try_into().unwrap()), 995);
        assert_eq!(decode_pick(3, 4), Ok(3));
        assert!(decode_pick(4, 4).is_err());
        assert!(decode_pick(-1, 4).is_err());
    }
}
