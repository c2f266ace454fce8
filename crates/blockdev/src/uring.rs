//! The io_uring backend of [`crate::IoQueue`].
//!
//! Submitters push entries under a lock and enter the kernel to submit them; one reaper thread
//! waits for completions and is the only reader of the completion queue. A request's buffer
//! stays in the table of operations in flight until its completion arrives, so the kernel never
//! writes into freed memory; dropping the ring waits for every operation first. Should the ring
//! fail while an entry may still reach the kernel, the request fails and its buffer is leaked
//! rather than freed (see [`abandon`]).

use crate::queue::{Job, QueueShared};
use crate::{AlignedBuf, BLOCK_SIZE, IoOp};
use io_uring::{IoUring, opcode, types};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// `IORING_ENTER_GETEVENTS`: wait for completions in `io_uring_enter`.
const ENTER_GETEVENTS: u32 = 1;
/// The most parts one vectored entry takes (Linux's `UIO_MAXIOV`); a longer transfer continues
/// like a short one.
const IOV_MAX: usize = 1024;
/// User data of the no-op that wakes the reaper when the ring closes.
const WAKE: u64 = u64::MAX;

/// Whether this process may use io_uring, probed once: a ring is set up and a no-op sent through
/// it. `Err` says why not (the kernel lacks it, a seccomp filter or a sysctl forbids it, or
/// `VINO_NO_URING` is set in the environment).
pub fn uring_available() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    if std::env::var_os("VINO_NO_URING").is_some_and(|v| !v.is_empty() && v != "0") {
        return Err("VINO_NO_URING is set".into());
    }
    let mut ring = IoUring::new(2).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let nop = opcode::Nop::new().build().user_data(7);
    // SAFETY: a no-op references no memory, and this ring is used by this thread alone.
    unsafe { ring.submission().push(&nop) }.map_err(|_| "io_uring submission queue full".to_string())?;
    ring.submit_and_wait(1)
        .map_err(|e| format!("io_uring_enter failed: {e}"))?;
    match ring.completion().next() {
        Some(c) if c.user_data() == 7 && c.result() >= 0 => Ok(()),
        Some(c) => Err(format!(
            "io_uring no-op failed: {}",
            io::Error::from_raw_os_error(-c.result())
        )),
        None => Err("io_uring gave no completion for a no-op".into()),
    }
}

/// One operation in flight: the job (owning its buffers) and how much of it is done.
struct Op {
    job: Job,
    done: usize,
    /// A vectored transfer's parts still to do, as the kernel reads them (kept until the
    /// completion, like the buffers).
    iovs: Vec<libc::iovec>,
}

// SAFETY: the iovecs point into the job's own buffers, which the op owns and moves with it.
unsafe impl Send for Op {}

impl Op {
    fn len(&self) -> usize {
        self.job.buf.len() + self.job.more.iter().map(|b| b.len()).sum::<usize>()
    }
}

struct Shared {
    ring: IoUring,
    /// Guards the submission queue: pushes happen under it.
    sq: Mutex<()>,
    ops: Mutex<FxHashMap<u64, Op>>,
    next_id: AtomicU64,
    closing: AtomicBool,
    /// Set if the ring itself failed: later requests fail at once with this message.
    broken: Mutex<Option<String>>,
    fd: RawFd,
    queue: Arc<QueueShared>,
}

pub(crate) struct Ring {
    shared: Arc<Shared>,
    reaper: Option<JoinHandle<()>>,
}

impl Ring {
    pub(crate) fn start(queue: Arc<QueueShared>, fd: RawFd, depth: usize) -> io::Result<Ring> {
        // Each request has at most one entry in the ring at a time, plus the closing no-op.
        let entries = (depth + 1).next_power_of_two().max(4) as u32;
        let ring = IoUring::new(entries)?;
        let shared = Arc::new(Shared {
            ring,
            sq: Mutex::new(()),
            ops: Mutex::new(FxHashMap::default()),
            next_id: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            broken: Mutex::new(None),
            fd,
            queue,
        });
        let for_reaper = shared.clone();
        let reaper = std::thread::Builder::new()
            .name("vino-uring".into())
            .spawn(move || reap(&for_reaper))?;
        Ok(Ring {
            shared,
            reaper: Some(reaper),
        })
    }

    pub(crate) fn push(&self, job: Job) {
        let s = &self.shared;
        if let Some(why) = s.broken.lock().clone() {
            return fail(s, job, io::Error::other(format!("io_uring failed earlier: {why}")));
        }
        s.queue.device.counters().begin();
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = {
            let mut ops = s.ops.lock();
            let op = ops.entry(id).or_insert(Op {
                job,
                done: 0,
                iovs: Vec::new(),
            });
            entry_for(s.fd, id, op)
        };
        if let Err(e) = submit(s, &entry) {
            let op = s.ops.lock().remove(&id);
            if let Some(op) = op {
                end_unsubmitted(s, op, e);
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let s = &self.shared;
        s.closing.store(true, Ordering::SeqCst);
        let nop = opcode::Nop::new().build().user_data(WAKE);
        let woken = submit(s, &nop).is_ok();
        if let Some(r) = self.reaper.take() {
            // If the wake-up could not be sent the ring is unusable; the reaper is left to the
            // process rather than waited for forever.
            if woken || r.is_finished() {
                let _ = r.join();
            }
        }
    }
}

/// The ring entry carrying the rest of an operation.
fn entry_for(fd: RawFd, id: u64, op: &mut Op) -> io_uring::squeue::Entry {
    let fd = types::Fd(fd);
    let meta = op.job.meta;
    let len = op.len();
    let offset = meta.block * BLOCK_SIZE as u64 + op.done as u64;
    // At most 1 GiB per entry; a longer transfer continues like a short one.
    let chunk = (len - op.done).min(1 << 30) as u32;
    if !op.job.more.is_empty() && meta.op != IoOp::Flush {
        // The parts after the `done` bytes already transferred.
        op.iovs.clear();
        let mut skip = op.done;
        for b in std::iter::once(&mut op.job.buf).chain(op.job.more.iter_mut()) {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            op.iovs.push(libc::iovec {
                // SAFETY: `skip < b.len()`, so the pointer stays inside the buffer.
                iov_base: unsafe { b.as_mut_ptr().add(skip) }.cast(),
                iov_len: b.len() - skip,
            });
            skip = 0;
        }
        let (iovs, n) = (op.iovs.as_ptr(), op.iovs.len().min(IOV_MAX) as u32);
        let entry = match meta.op {
            IoOp::Read => opcode::Readv::new(fd, iovs, n).offset(offset).build(),
            _ => opcode::Writev::new(fd, iovs, n).offset(offset).build(),
        };
        return entry.user_data(id);
    }
    let entry = match meta.op {
        IoOp::Read => {
            // SAFETY: `done < len` (a new request starts at 0 and is never empty, since empty
            // transfers complete without the device; `complete` continues only while
            // `done < len`), so the pointer stays inside the buffer's allocation.
            let ptr = unsafe { op.job.buf.as_mut_ptr().add(op.done) };
            opcode::Read::new(fd, ptr, chunk).offset(offset).build()
        }
        IoOp::Write => {
            // SAFETY: as for a read, `done < len` keeps the pointer inside the buffer.
            let ptr = unsafe { op.job.buf.as_ptr().add(op.done) };
            opcode::Write::new(fd, ptr, chunk).offset(offset).build()
        }
        IoOp::Flush => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
    };
    entry.user_data(id)
}

/// Why [`submit`] failed, and whether the kernel may still see the entry.
enum SubmitError {
    /// The entry never reached the submission queue: the kernel will not see it.
    NotQueued(io::Error),
    /// The entry is in the submission queue but entering the kernel failed: the next successful
    /// submission of any entry may still hand it to the kernel.
    Queued(io::Error),
}

/// Pushes an entry and enters the kernel to submit it.
fn submit(s: &Shared, entry: &io_uring::squeue::Entry) -> Result<(), SubmitError> {
    let _guard = s.sq.lock();
    loop {
        // SAFETY: only holders of `sq` touch the submission queue. The entry's buffer (if any)
        // is the heap allocation of a job kept in `ops` until its completion is reaped, or leaked
        // by `abandon` if that may never come; moving the job within `ops` does not move the
        // allocation, and the device's file stays open while the queue (held by `s`) lives.
        let pushed = unsafe { s.ring.submission_shared().push(entry) };
        if pushed.is_ok() {
            break;
        }
        // Full: submitting empties it (no SQ polling thread).
        submit_now(s).map_err(SubmitError::NotQueued)?;
    }
    submit_now(s).map_err(SubmitError::Queued)
}

fn submit_now(s: &Shared) -> io::Result<()> {
    loop {
        match s.ring.submitter().submit() {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

fn reap(s: &Shared) {
    let mut completions: Vec<(u64, i32)> = Vec::new();
    loop {
        // SAFETY: a plain wait for completions; no signal mask or other argument is passed.
        let waited = unsafe { s.ring.submitter().enter::<libc::sigset_t>(0, 1, ENTER_GETEVENTS, None) };
        if let Err(e) = waited {
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY) => continue,
                _ => {
                    *s.broken.lock() = Some(e.to_string());
                    // Their completions will not be reaped, but the kernel may still carry them out.
                    let ops: Vec<Op> = s.ops.lock().drain().map(|(_, op)| op).collect();
                    for op in ops {
                        abandon(s, op, io::Error::other(format!("io_uring wait failed: {e}")));
                    }
                    return;
                }
            }
        }
        completions.clear();
        // SAFETY: this thread is the only reader of the completion queue.
        completions.extend(unsafe { s.ring.completion_shared() }.map(|c| (c.user_data(), c.result())));
        for &(id, res) in &completions {
            if id != WAKE {
                complete(s, id, res);
            }
        }
        if s.closing.load(Ordering::SeqCst) && s.ops.lock().is_empty() {
            return;
        }
    }
}

/// Handles one completion: done, a short transfer to continue, or an error.
fn complete(s: &Shared, id: u64, res: i32) {
    let mut ops = s.ops.lock();
    let Some(op) = ops.get_mut(&id) else { return };
    let len = op.len();
    let outcome: Option<io::Result<()>> = if res < 0 {
        match -res {
            libc::EINTR | libc::EAGAIN => None, // try again as it is
            errno => Some(Err(io::Error::from_raw_os_error(errno))),
        }
    } else if op.job.meta.op == IoOp::Flush {
        Some(Ok(()))
    } else if res == 0 {
        Some(Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: transfer at block {} stopped after {} of {len} bytes",
                s.queue.device.name(),
                op.job.meta.block,
                op.done
            ),
        )))
    } else {
        op.done += res as usize;
        if op.done >= len { Some(Ok(())) } else { None }
    };
    match outcome {
        Some(result) => {
            let op = ops.remove(&id).expect("looked up above");
            drop(ops);
            let result = result.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", s.queue.device.name())));
            end_op(s, op, result);
        }
        None => {
            let entry = entry_for(s.fd, id, op);
            drop(ops);
            if let Err(e) = submit(s, &entry)
                && let Some(op) = s.ops.lock().remove(&id)
            {
                end_unsubmitted(s, op, e);
            }
        }
    }
}

fn end_op(s: &Shared, op: Op, result: io::Result<()>) {
    let Job {
        meta,
        buf,
        more,
        completer,
    } = op.job;
    s.queue.device.counters().end(meta.op, meta.blocks, result.is_ok());
    s.queue.finish(meta, completer, result.map(|()| buf), more);
}

/// Ends an operation whose entry [`submit`] could not hand to the kernel.
fn end_unsubmitted(s: &Shared, op: Op, e: SubmitError) {
    match e {
        SubmitError::NotQueued(e) => end_op(s, op, Err(e)),
        SubmitError::Queued(e) => abandon(s, op, e),
    }
}

/// Fails an operation the kernel may still read or write: its buffer is leaked, not freed or
/// handed back, so that a late transfer touches memory nobody else uses.
fn abandon(s: &Shared, mut op: Op, e: io::Error) {
    std::mem::forget(std::mem::replace(&mut op.job.buf, AlignedBuf::new(0)));
    std::mem::forget(std::mem::take(&mut op.job.more));
    std::mem::forget(std::mem::take(&mut op.iovs));
    end_op(s, op, Err(e));
}

fn fail(s: &Shared, job: Job, e: io::Error) {
    let Job { meta, completer, .. } = job;
    s.queue.device.counters().record(meta.op, meta.blocks, false);
    s.queue.finish(meta, completer, Err(e), Vec::new());
}
