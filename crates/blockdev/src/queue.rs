//! Asynchronous requests: a queue of bounded depth in front of a device.
//!
//! A request owns its buffer ([`AlignedBuf`]) while it is in flight and hands it back through
//! its [`Ticket`]: a read's buffer comes back filled, a write's comes back for reuse. Up to
//! `depth` requests are in flight at once; [`IoQueue::submit`] waits for a free place,
//! [`IoQueue::try_submit`] gives the request back instead. Two backends serve a queue:
//!
//! * io_uring, for devices that offer a file descriptor ([`BlockDevice::uring_fd`]) when the
//!   kernel grants this process a ring (containers often forbid `io_uring_setup`);
//! * a small pool of threads calling the device's synchronous methods, for every device;
//! * inline: the submitting thread serves its own request before `submit` returns. No thread
//!   is woken and the order of device operations is exactly the order of submissions, which is
//!   what a deterministic simulation of the kernel needs (and the cheapest path to a device that
//!   answers at once, such as memory).

use crate::{AlignedBuf, BLOCK_SIZE, BlockDevice, check_transfer, uring};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum IoOp {
    Read,
    Write,
    /// A durability barrier: writes that completed before it was submitted are durable when it
    /// completes. It does not order writes still in flight.
    Flush,
}

/// One asynchronous request.
#[derive(Debug)]
pub struct IoRequest {
    pub op: IoOp,
    /// First block (ignored by a flush).
    pub block: u64,
    /// The data of a write, the destination of a read (its size says how many blocks); empty
    /// for a flush.
    pub buf: AlignedBuf,
    /// Buffers that continue `buf` on the device, in order: a vectored transfer (the parts of a
    /// merged request, read into or written from where they are, without a copy). Usually
    /// empty. A ticket gives back `buf` only; [`Completer::then_all`] gets them all.
    pub more: Vec<AlignedBuf>,
    /// A number of the submitter's choosing, passed back in [`Finished`].
    pub tag: u64,
    /// The thread that waits for this request as soon as it is submitted, if any: a layer
    /// that dispatches on that thread may serve the request there ([`IoQueue::serve_here`])
    /// instead of handing it to its backend and waking the thread on completion.
    pub waiter: Option<ThreadId>,
    /// The file system's own I/O, done under a lock every user's namespace operations wait
    /// for: a scheduler sends it before the data requests waiting beside it (as Linux's
    /// `REQ_META | REQ_PRIO`), so another user's queued data cannot hold that lock long.
    pub meta: bool,
}

impl IoRequest {
    /// A read of `blocks` blocks at `block` into a fresh buffer.
    pub fn read(block: u64, blocks: usize) -> IoRequest {
        IoRequest {
            op: IoOp::Read,
            block,
            buf: AlignedBuf::new(blocks),
            tag: 0,
            waiter: None,
            more: Vec::new(),
            meta: false,
        }
    }

    /// A read into a buffer the caller already has (a cache frame).
    pub fn read_into(block: u64, buf: AlignedBuf) -> IoRequest {
        IoRequest {
            op: IoOp::Read,
            block,
            buf,
            tag: 0,
            waiter: None,
            more: Vec::new(),
            meta: false,
        }
    }

    pub fn write(block: u64, buf: AlignedBuf) -> IoRequest {
        IoRequest {
            op: IoOp::Write,
            block,
            buf,
            tag: 0,
            waiter: None,
            more: Vec::new(),
            meta: false,
        }
    }

    pub fn flush() -> IoRequest {
        IoRequest {
            op: IoOp::Flush,
            block: 0,
            buf: AlignedBuf::new(0),
            tag: 0,
            waiter: None,
            more: Vec::new(),
            meta: false,
        }
    }

    /// A read (or write) of consecutive blocks from `block` into (from) `bufs`, one after
    /// another, as one device request.
    pub fn vectored(op: IoOp, block: u64, bufs: Vec<AlignedBuf>) -> IoRequest {
        let mut bufs = bufs.into_iter();
        let first = bufs.next().unwrap_or_else(|| AlignedBuf::new(0));
        let mut req = match op {
            IoOp::Write => IoRequest::write(block, first),
            _ => IoRequest::read_into(block, first),
        };
        req.op = op;
        req.more = bufs.collect();
        req
    }

    pub fn with_tag(mut self, tag: u64) -> IoRequest {
        self.tag = tag;
        self
    }

    /// Marks the request as one the calling thread waits for at once (see
    /// [`IoRequest::waiter`]).
    pub fn awaited(mut self) -> IoRequest {
        self.waiter = Some(std::thread::current().id());
        self
    }

    /// Marks the request as the file system's own (see [`IoRequest::meta`]).
    pub fn metadata(mut self) -> IoRequest {
        self.meta = true;
        self
    }

    /// True if the calling thread is the one waiting for this request.
    pub fn awaited_here(&self) -> bool {
        self.waiter.is_some_and(|w| w == std::thread::current().id())
    }

    /// Number of blocks transferred.
    pub fn blocks(&self) -> u64 {
        (self.len() / BLOCK_SIZE) as u64
    }

    /// Bytes transferred.
    fn len(&self) -> usize {
        self.buf.len() + self.more.iter().map(|b| b.len()).sum::<usize>()
    }

    /// Checks the request against a device: a clear `InvalidInput` error for a range past the
    /// end (a flush is always valid).
    pub fn check(&self, device: &dyn BlockDevice) -> io::Result<()> {
        match self.op {
            IoOp::Flush => Ok(()),
            IoOp::Read | IoOp::Write => {
                crate::vectored_blocks(device.name(), self.more.iter().map(|b| b.len()))?;
                check_transfer(device.name(), device.block_count(), self.block, self.len()).map(|_| ())
            }
        }
    }
}

/// What a completion hook hears about each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub op: IoOp,
    pub block: u64,
    pub blocks: u64,
    pub tag: u64,
    pub ok: bool,
    /// From the moment the request entered the backend to its completion.
    pub service: Duration,
}

/// Called once for every request submitted to a queue, after its place in the queue is free
/// and before its ticket completes, on the thread that completed it. It must not block long.
pub type CompletionHook = Arc<dyn Fn(&Finished) + Send + Sync>;

struct Slot {
    result: Mutex<Option<io::Result<AlignedBuf>>>,
    cv: Condvar,
    /// Set (after `result`) when the request completes, for a waiter that spins.
    done: AtomicBool,
}

/// A watch [`Ticket::wait`] may keep for the completion before it sleeps ([`set_ticket_spin`]).
/// Off by default. On a 2-CPU virtual machine (`vino bench miss`, its layers taking turns) it
/// made a read through the io_uring queue faster (0.89-1.02x of a raw `pread` against
/// 1.17-1.26x) but one through the scheduler's dispatcher thread slower (2.1-2.4x against
/// 1.7-1.9x), the watcher taking the CPU that thread needs; the kernel's cache misses are read
/// on their own thread (`IoRequest::awaited`) and do not wait on a ticket.
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(30);

static SPIN_NS: AtomicU64 = AtomicU64::new(0);

/// Sets how long [`Ticket::wait`] watches before it sleeps, for the whole process (zero, the
/// default: it sleeps at once). For experiments that compare the two.
pub fn set_ticket_spin(d: Duration) {
    SPIN_NS.store(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The handle of a request in flight: wait for it, or ask whether it is done.
pub struct Ticket {
    slot: Arc<Slot>,
}

/// The other end of a [`Ticket`]: whoever carries out the request completes it. Dropping it
/// uncompleted completes the ticket with an error, so a waiter never hangs.
pub struct Completer {
    slot: Option<Arc<Slot>>,
    /// Instead of a slot: a function given the result (a merged request completing its parts).
    then: Option<Then>,
}

/// What a [`Completer`] without a slot calls.
enum Then {
    /// Given the request's buffer.
    One(Box<dyn FnOnce(io::Result<AlignedBuf>) + Send>),
    /// Given all of a vectored request's buffers, in order.
    All(Box<dyn FnOnce(io::Result<Vec<AlignedBuf>>) + Send>),
}

/// A connected ticket and completer, for layers that carry requests themselves (a scheduler
/// hands the completer to the device's queue with [`IoQueue::submit_with`]).
pub fn ticket() -> (Ticket, Completer) {
    let slot = Arc::new(Slot {
        result: Mutex::new(None),
        cv: Condvar::new(),
        done: AtomicBool::new(false),
    });
    (
        Ticket { slot: slot.clone() },
        Completer {
            slot: Some(slot),
            then: None,
        },
    )
}

impl Ticket {
    /// A ticket that is already complete.
    pub fn ready(result: io::Result<AlignedBuf>) -> Ticket {
        let (t, c) = ticket();
        c.complete(result);
        t
    }

    /// Waits for the request; gives back its buffer (filled, for a read) or its error.
    pub fn wait(self) -> io::Result<AlignedBuf> {
        self.spin();
        let mut r = self.slot.result.lock();
        while r.is_none() {
            self.slot.cv.wait(&mut r);
        }
        r.take().expect("checked above")
    }

    /// Waits up to `timeout`; true if the request is done.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut r = self.slot.result.lock();
        while r.is_none() {
            if self.slot.cv.wait_until(&mut r, deadline).timed_out() {
                return r.is_some();
            }
        }
        true
    }

    pub fn is_done(&self) -> bool {
        self.slot.result.lock().is_some()
    }

    /// Watches for the completion for up to the spin time ([`set_ticket_spin`]), on machines
    /// with a CPU to spare for it.
    fn spin(&self) {
        static SPARE_CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let limit = Duration::from_nanos(SPIN_NS.load(Ordering::Relaxed));
        if limit.is_zero()
            || !*SPARE_CPU.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
        {
            return;
        }
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.slot.done.load(Ordering::Acquire) {
                    return;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= limit {
                return;
            }
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ticket({})", if self.is_done() { "done" } else { "pending" })
    }
}

impl Completer {
    /// A completer that hands the result to `f` (which runs on the completing thread) instead
    /// of to a ticket.
    pub fn then(f: impl FnOnce(io::Result<AlignedBuf>) + Send + 'static) -> Completer {
        Completer {
            slot: None,
            then: Some(Then::One(Box::new(f))),
        }
    }

    /// A completer that hands all the buffers of a vectored request ([`IoRequest::more`]
    /// after its `buf`) to `f`.
    pub fn then_all(f: impl FnOnce(io::Result<Vec<AlignedBuf>>) + Send + 'static) -> Completer {
        Completer {
            slot: None,
            then: Some(Then::All(Box::new(f))),
        }
    }

    pub fn complete(mut self, result: io::Result<AlignedBuf>) {
        self.deliver(result, Vec::new());
    }

    /// Completes a vectored request: `more` are the buffers after the first.
    pub(crate) fn complete_all(mut self, result: io::Result<AlignedBuf>, more: Vec<AlignedBuf>) {
        self.deliver(result, more);
    }

    fn deliver(&mut self, result: io::Result<AlignedBuf>, more: Vec<AlignedBuf>) {
        if let Some(slot) = self.slot.take() {
            *slot.result.lock() = Some(result);
            slot.done.store(true, Ordering::Release);
            slot.cv.notify_all();
        } else if let Some(then) = self.then.take() {
            match then {
                Then::One(f) => f(result),
                Then::All(f) => f(result.map(|first| std::iter::once(first).chain(more).collect())),
            }
        }
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        if self.slot.is_some() || self.then.is_some() {
            self.deliver(
                Err(io::Error::other("the request was abandoned before it completed")),
                Vec::new(),
            );
        }
    }
}

/// Which backend serves a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Backend {
    /// The kernel's io_uring: requests go to the kernel without a thread each.
    Uring,
    /// A pool of threads calling the device's synchronous methods.
    Threads,
    /// The submitting thread serves its request itself.
    Inline,
}

/// Which backend to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum BackendChoice {
    /// io_uring if the device offers a descriptor and the kernel grants a ring, else threads.
    #[default]
    Auto,
    /// io_uring or an error saying why not.
    Uring,
    /// The thread pool.
    Threads,
    /// The submitting thread (see the module documentation).
    Inline,
}

/// How to build an [`IoQueue`].
#[derive(Clone, Default)]
pub struct QueueConfig {
    /// Most requests in flight at once (at least 1).
    pub depth: usize,
    pub backend: BackendChoice,
    /// Threads of the pool backend; 0 means `depth`, at most 16.
    pub threads: usize,
    pub hook: Option<CompletionHook>,
}

impl QueueConfig {
    pub fn new(depth: usize) -> Self {
        QueueConfig {
            depth,
            ..Default::default()
        }
    }
}

/// What a queue remembers of a request while its buffer is away.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobMeta {
    pub(crate) op: IoOp,
    pub(crate) block: u64,
    pub(crate) blocks: u64,
    pub(crate) tag: u64,
    pub(crate) started: Instant,
}

/// A request accepted by a queue, on its way through a backend.
pub(crate) struct Job {
    pub(crate) meta: JobMeta,
    pub(crate) buf: AlignedBuf,
    pub(crate) more: Vec<AlignedBuf>,
    pub(crate) completer: Completer,
}

impl Job {
    fn new(req: IoRequest, completer: Completer) -> Job {
        let meta = JobMeta {
            op: req.op,
            block: req.block,
            blocks: req.blocks(),
            tag: req.tag,
            started: Instant::now(),
        };
        Job {
            meta,
            buf: req.buf,
            more: req.more,
            completer,
        }
    }
}

#[derive(Default)]
struct Places {
    in_flight: usize,
    max_in_flight: usize,
    submitted: u64,
    completed: u64,
}

pub(crate) struct QueueShared {
    pub(crate) device: Arc<dyn BlockDevice>,
    depth: usize,
    places: Mutex<Places>,
    freed: Condvar,
    hook: Option<CompletionHook>,
}

impl QueueShared {
    /// Completes a request: frees its place, tells the hook, completes the ticket. `more` are a
    /// vectored request's buffers after the first (handed back with it).
    pub(crate) fn finish(
        &self,
        meta: JobMeta,
        completer: Completer,
        result: io::Result<AlignedBuf>,
        more: Vec<AlignedBuf>,
    ) {
        {
            let mut p = self.places.lock();
            p.in_flight -= 1;
            p.completed += 1;
        }
        self.freed.notify_all();
        if let Some(hook) = &self.hook {
            hook(&Finished {
                op: meta.op,
                block: meta.block,
                blocks: meta.blocks,
                tag: meta.tag,
                ok: result.is_ok(),
                service: meta.started.elapsed(),
            });
        }
        completer.complete_all(result, more);
    }
}

enum Engine {
    Threads(Pool),
    Uring(uring::Ring),
    Inline,
}

/// A queue of asynchronous requests to one device (see the module documentation).
pub struct IoQueue {
    shared: Arc<QueueShared>,
    engine: Engine,
    uring_note: Option<String>,
}

impl IoQueue {
    /// A queue of `depth` places, on io_uring where possible.
    pub fn new(device: Arc<dyn BlockDevice>, depth: usize) -> io::Result<IoQueue> {
        Self::with_config(device, QueueConfig::new(depth))
    }

    pub fn with_config(device: Arc<dyn BlockDevice>, config: QueueConfig) -> io::Result<IoQueue> {
        let depth = config.depth.max(1);
        let shared = Arc::new(QueueShared {
            device: device.clone(),
            depth,
            places: Mutex::new(Places::default()),
            freed: Condvar::new(),
            hook: config.hook.clone(),
        });
        let threads = if config.threads == 0 {
            depth.min(16)
        } else {
            config.threads
        };
        let want_uring = match config.backend {
            BackendChoice::Inline => {
                return Ok(IoQueue {
                    shared,
                    engine: Engine::Inline,
                    uring_note: None,
                });
            }
            BackendChoice::Threads => false,
            BackendChoice::Auto | BackendChoice::Uring => true,
        };
        let mut uring_note = None;
        if want_uring {
            let attempt = match (device.uring_fd(), uring::uring_available()) {
                (None, _) => Err(format!("{} offers no file descriptor for io_uring", device.name())),
                (Some(_), Err(why)) => Err(why),
                (Some(fd), Ok(())) => uring::Ring::start(shared.clone(), fd, depth).map_err(|e| e.to_string()),
            };
            match attempt {
                Ok(ring) => {
                    return Ok(IoQueue {
                        shared,
                        engine: Engine::Uring(ring),
                        uring_note: None,
                    });
                }
                Err(why) if config.backend == BackendChoice::Uring => {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("io_uring backend unavailable: {why}"),
                    ));
                }
                Err(why) => uring_note = Some(why),
            }
        }
        let pool = Pool::start(shared.clone(), threads)?;
        Ok(IoQueue {
            shared,
            engine: Engine::Threads(pool),
            uring_note,
        })
    }

    /// The backend serving this queue.
    pub fn backend(&self) -> Backend {
        match self.engine {
            Engine::Threads(_) => Backend::Threads,
            Engine::Uring(_) => Backend::Uring,
            Engine::Inline => Backend::Inline,
        }
    }

    /// Why io_uring was not used, when [`BackendChoice::Auto`] fell back to threads.
    pub fn uring_unavailable_reason(&self) -> Option<&str> {
        self.uring_note.as_deref()
    }

    pub fn depth(&self) -> usize {
        self.shared.depth
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.shared.device
    }

    /// Requests submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.shared.places.lock().in_flight
    }

    /// The most requests ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.places.lock().max_in_flight
    }

    /// Requests submitted and completed so far.
    pub fn counts(&self) -> (u64, u64) {
        let p = self.shared.places.lock();
        (p.submitted, p.completed)
    }

    /// Submits a request, waiting for a free place if `depth` requests are in flight. A request
    /// that does not fit the device completes at once with an error.
    pub fn submit(&self, req: IoRequest) -> Ticket {
        let (t, c) = ticket();
        self.submit_with(req, c);
        t
    }

    /// Submits a request unless `depth` requests are in flight, in which case it is given back.
    pub fn try_submit(&self, req: IoRequest) -> Result<Ticket, IoRequest> {
        if !req_is_immediate(&req, &*self.shared.device) {
            let mut p = self.shared.places.lock();
            if p.in_flight >= self.shared.depth {
                return Err(req);
            }
            self.take_place(&mut p);
            drop(p);
            let (t, c) = ticket();
            self.start(req, c);
            return Ok(t);
        }
        Ok(self.submit(req))
    }

    /// Like [`IoQueue::submit`], completing a ticket made elsewhere (see [`ticket`]).
    pub fn submit_with(&self, req: IoRequest, completer: Completer) {
        self.admit(req, completer, false);
    }

    /// Like [`IoQueue::submit_with`], but served on this thread with the device's synchronous
    /// methods, whatever the backend: for a request the calling thread is about to wait for
    /// anyway, which then needs no completion thread to wake it. It takes a place in the queue
    /// (waiting for one as `submit_with` does) and completes as any other request does.
    pub fn serve_here(&self, req: IoRequest, completer: Completer) {
        self.admit(req, completer, true);
    }

    /// Waits for a place, then hands the request to the backend or (`here`) serves it on this
    /// thread.
    fn admit(&self, req: IoRequest, completer: Completer, here: bool) {
        if req_is_immediate(&req, &*self.shared.device) {
            return self.complete_now(req, completer);
        }
        let mut p = self.shared.places.lock();
        while p.in_flight >= self.shared.depth {
            self.shared.freed.wait(&mut p);
        }
        self.take_place(&mut p);
        drop(p);
        if here {
            serve(&self.shared, Job::new(req, completer));
        } else {
            self.start(req, completer);
        }
    }

    /// Waits until no request is in flight.
    pub fn drain(&self) {
        let mut p = self.shared.places.lock();
        while p.in_flight > 0 {
            self.shared.freed.wait(&mut p);
        }
    }

    fn take_place(&self, p: &mut Places) {
        p.in_flight += 1;
        p.submitted += 1;
        p.max_in_flight = p.max_in_flight.max(p.in_flight);
    }

    fn start(&self, req: IoRequest, completer: Completer) {
        let job = Job::new(req, completer);
        match &self.engine {
            Engine::Threads(pool) => pool.push(job),
            Engine::Uring(ring) => ring.push(job),
            Engine::Inline => serve(&self.shared, job),
        }
    }

    /// A request refused for its range, or one with nothing to transfer: completed here, with
    /// the hook told as for any other.
    fn complete_now(&self, req: IoRequest, completer: Completer) {
        {
            // Counted, but not against the depth: it never reaches the device.
            let mut p = self.shared.places.lock();
            p.in_flight += 1;
            p.submitted += 1;
        }
        let result = match req.check(&*self.shared.device) {
            Ok(()) => Ok(AlignedBuf::new(0)),
            Err(e) => {
                self.shared.device.counters().refused();
                Err(e)
            }
        };
        let job = Job::new(req, completer);
        self.shared.finish(job.meta, job.completer, result, job.more);
    }
}

/// A request that needs no device work: refused for its range, or transferring nothing.
fn req_is_immediate(req: &IoRequest, device: &dyn BlockDevice) -> bool {
    match req.op {
        IoOp::Flush => false,
        IoOp::Read | IoOp::Write => req.blocks() == 0 || req.check(device).is_err(),
    }
}

impl Drop for IoQueue {
    /// Waits for the requests in flight; their tickets complete as usual.
    fn drop(&mut self) {
        self.drain();
    }
}

impl fmt::Debug for IoQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoQueue")
            .field("device", &self.shared.device.name())
            .field("backend", &self.backend())
            .field("depth", &self.shared.depth)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// Runs one request on the device's synchronous methods.
pub(crate) fn run_sync(
    device: &dyn BlockDevice,
    op: IoOp,
    block: u64,
    buf: &mut AlignedBuf,
    more: &mut [AlignedBuf],
) -> io::Result<()> {
    match op {
        IoOp::Read if more.is_empty() => device.read_blocks(block, buf),
        IoOp::Write if more.is_empty() => device.write_blocks(block, buf),
        IoOp::Read => {
            let mut parts: Vec<&mut [u8]> = std::iter::once(&mut buf[..])
                .chain(more.iter_mut().map(|b| &mut b[..]))
                .collect();
            device.read_blocks_vectored(block, &mut parts)
        }
        IoOp::Write => {
            let parts: Vec<&[u8]> = std::iter::once(&buf[..]).chain(more.iter().map(|b| &b[..])).collect();
            device.write_blocks_vectored(block, &parts)
        }
        IoOp::Flush => device.flush(),
    }
}

struct PoolState {
    jobs: VecDeque<Job>,
    closing: bool,
}

struct PoolShared {
    state: Mutex<PoolState>,
    ready: Condvar,
}

/// The thread-pool backend.
struct Pool {
    shared: Arc<PoolShared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    fn start(queue: Arc<QueueShared>, threads: usize) -> io::Result<Pool> {
        let shared = Arc::new(PoolShared {
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                closing: false,
            }),
            ready: Condvar::new(),
        });
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let (shared, queue) = (shared.clone(), queue.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("vino-io-{i}"))
                .spawn(move || worker(&shared, &queue));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) if workers.is_empty() => return Err(e),
                Err(_) => break, // fewer threads than asked: still a working pool
            }
        }
        Ok(Pool { shared, workers })
    }

    fn push(&self, job: Job) {
        self.shared.state.lock().jobs.push_back(job);
        self.shared.ready.notify_one();
    }
}

fn worker(shared: &PoolShared, queue: &QueueShared) {
    loop {
        let job = {
            let mut s = shared.state.lock();
            loop {
                if let Some(job) = s.jobs.pop_front() {
                    break job;
                }
                if s.closing {
                    return;
                }
                shared.ready.wait(&mut s);
            }
        };
        serve(queue, job);
    }
}

/// Serves one request on the device's synchronous methods, on this thread, and completes it.
fn serve(queue: &QueueShared, job: Job) {
    let Job {
        meta,
        mut buf,
        mut more,
        completer,
    } = job;
    let result = run_sync(&*queue.device, meta.op, meta.block, &mut buf, &mut more).map(|()| buf);
    queue.finish(meta, completer, result, more);
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.state.lock().closing = true;
        self.shared.ready.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
