//! FUSE over io_uring (Linux 6.14 and later; the kernel's
//! `Documentation/filesystems/fuse-io-uring.rst`).
//!
//! Through `/dev/fuse` every request costs two wake-ups of sleeping threads, usually across CPUs:
//! the daemon's reader when the request is queued, the caller when the reply is written. Over
//! io_uring Linux copies each request into a buffer the daemon registered on the queue of the
//! CPU the caller runs on and completes that entry's pending command; the queue's thread, kept
//! on that CPU, serves it, then commits the reply and asks for the next request in a single
//! submission. Caller and server take turns on one CPU.
//!
//! This crate is only the transport: it knows the ring protocol and its buffers, not the FUSE
//! operations. A [`Handler`] gets each request laid out as a `/dev/fuse` read would return it
//! and answers through a [`Reply`], at once or later from any thread.
//!
//! Forgets, interrupts and notifications still travel through `/dev/fuse`, so its readers stay.
//!
//! An entry whose reply is pending stays out of service: a handler that answers late (a lock
//! wait) holds one of its queue's `depth` entries until then, and must bound how many it holds.

mod buf;

use buf::Region;
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use parking_lot::Mutex;
use std::cell::Cell;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::thread::JoinHandle;

/// `struct fuse_uring_req_header`: the in/out header, the operation's own header, then
/// `struct fuse_uring_ent_in_out` (uapi `linux/fuse.h`).
const IN_OUT: usize = 128;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = IN_OUT + OP_IN;
const HEADER: usize = ENT_IN_OUT + 32;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
const IN_HEADER: usize = 40; // struct fuse_in_header
const OUT_HEADER: usize = 16; // struct fuse_out_header
/// Room before each payload for the in-header and the operation's header, so that a request
/// reaches the handler as one slice without moving its payload (a write's data).
const SLACK: usize = IN_HEADER + OP_IN;
/// `user_data` of the read that wakes a queue's thread for replies sent from other threads.
const WAKE: u64 = u64::MAX;

const PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether this Linux can serve FUSE over io_uring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// The kernel has no FUSE over io_uring (older than 6.14, or built without it).
    Missing,
    /// It has, but the host-wide switch is off.
    Disabled,
    Enabled,
}

/// The host-wide switch (`/sys/module/fuse/parameters/enable_uring`).
pub fn parameter() -> &'static str {
    PARAMETER
}

pub fn availability() -> Availability {
    match std::fs::read_to_string(PARAMETER) {
        Err(_) => Availability::Missing,
        Ok(s) if s.trim() == "Y" => Availability::Enabled,
        Ok(_) => Availability::Disabled,
    }
}

/// Turns the host-wide switch on (root only). It affects mounts made from then on.
pub fn enable() -> io::Result<()> {
    std::fs::write(PARAMETER, "Y")
}

/// Whether mounts made from now on can be served over io_uring, turning the host's switch on
/// where it is off and this process may (root).
pub fn switch_on() -> bool {
    match availability() {
        Availability::Enabled => true,
        Availability::Disabled => enable().is_ok(),
        Availability::Missing => false,
    }
}

/// Whether this process may make a ring of the size FUSE needs (io_uring may be disabled by
/// `kernel.io_uring_disabled`, or refused by a seccomp filter). Asked before `FUSE_INIT` is
/// answered: once a connection has agreed to io_uring, Linux holds every request until the
/// ring's queues are registered.
pub fn usable() -> bool {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(2).is_ok()
}

/// Linux makes one queue per possible CPU and serves nothing through the ring until every
/// queue has an entry registered.
pub fn possible_cpus() -> io::Result<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(&list).ok_or_else(|| io::Error::other(format!("cpu list {list:?}")))
}

fn parse_cpu_list(list: &str) -> Option<usize> {
    let mut last = None;
    for part in list.trim().split(',') {
        let hi = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        last = Some(last.map_or(hi, |l: usize| l.max(hi)));
    }
    last.map(|l| l + 1)
}

/// The shape of the ring.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Entries per queue: requests one CPU's callers may have in service at once.
    pub depth: usize,
    /// Bytes of payload per entry: at least the mount's largest read or write, and never less
    /// than Linux asks for (the larger of `max_write` and `max_pages` pages).
    pub payload: usize,
}

/// Serves one request. `request` is laid out as a `/dev/fuse` read returns it (`fuse_in_header`
/// first) and lives only during the call; `reply` may be kept and answered later.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, queue: usize, request: &[u8], reply: Reply);

    /// Linux refused a queue's registration with `errno` (called once per queue): the
    /// connection's requests then come through `/dev/fuse`.
    fn refused(&self, _errno: i32) {}
}

/// The running ring: its queues' buffers stay allocated as long as this lives, since Linux
/// holds their addresses for as long as the connection does.
#[derive(Debug)]
pub struct Ring {
    queues: Vec<Arc<Queue>>,
}

impl Ring {
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Requests served through the ring so far.
    pub fn served(&self) -> u64 {
        self.queues.iter().map(|q| q.served.load(Ordering::Relaxed)).sum()
    }

    /// The errno Linux refused a registration with, if it did (the mount then stays on
    /// `/dev/fuse`).
    pub fn refused(&self) -> Option<i32> {
        self.queues
            .iter()
            .map(|q| q.refused.load(Ordering::Relaxed))
            .find(|&e| e != 0)
    }
}

/// Registers `config.depth` entries on each of `queues` queues of the FUSE connection `dev`
/// (whose `FUSE_INIT` reply asked for `FUSE_OVER_IO_URING`) and starts one thread per queue,
/// kept on the CPU of its number. The threads end when the connection does.
pub fn start(
    dev: BorrowedFd<'_>,
    queues: usize,
    config: Config,
    handler: Arc<dyn Handler>,
) -> io::Result<(Ring, Vec<JoinHandle<io::Result<()>>>)> {
    assert!(config.depth >= 1 && config.depth < u16::MAX as usize);
    let made = (0..queues)
        .map(|qid| {
            let q = Arc::new(Queue::new(qid, dev, config)?);
            // Only the queue's thread submits and waits on its ring, so Linux may keep the work
            // of each arriving request (its task work) until that thread waits, rather than
            // interrupting it (`DEFER_TASKRUN`): a 4 KiB cached read through the mount took
            // 9.3-9.9 us against 10.4-11.4 us without, taking turns (`vino bench daemon`). The
            // ring starts disabled so that the thread that serves it, not this one, becomes
            // its single issuer when it enables it.
            let ring = IoUring::builder()
                .setup_r_disabled()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .build((config.depth + 1).next_power_of_two() as u32)?;
            Ok((q, ring))
        })
        .collect::<io::Result<Vec<_>>>();
    let made = match made {
        Ok(made) => made,
        Err(e) => {
            decline(dev);
            return Err(e);
        }
    };
    let mut threads = Vec::with_capacity(made.len());
    let mut kept = Vec::with_capacity(made.len());
    for (q, ring) in made {
        kept.push(q.clone());
        let handler = handler.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("vino-fuse-ring{}", q.qid))
            .spawn(move || serve(&q, ring, &*handler));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                // Some queues may be registered already; the rest never will be.
                decline(dev);
                return Err(e);
            }
        }
    }
    Ok((Ring { queues: kept }, threads))
}

/// Tells Linux this connection will not use the ring after all (a registration it must refuse
/// turns io_uring off for the connection), so requests held for the ring go to `/dev/fuse`.
pub fn decline(dev: BorrowedFd<'_>) {
    let Ok(mut ring) = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(2) else {
        return;
    };
    let mut cmd = [0u8; 80];
    cmd[16..18].copy_from_slice(&u16::MAX.to_ne_bytes()); // no such queue: EINVAL
    let sqe = with_len(
        opcode::UringCmd80::new(types::Fd(dev.as_raw_fd()), CMD_REGISTER)
            .cmd(cmd)
            .build(),
        2,
    );
    // SAFETY: the command names no buffer (addr 0); Linux refuses it before reading any.
    if unsafe { ring.submission().push(&sqe) }.is_ok() {
        let _ = ring.submit_and_wait(1);
    }
}

/// One queue: the entries' memory, shared with Linux, and the replies waiting to be committed.
///
/// An entry's memory is written by Linux only while the entry is registered with it (between
/// a submission naming the entry and the completion that hands it a request) and by this
/// crate only while the entry is in user space (between that completion and the next
/// submission). In user space only the queue's thread touches it, except that the thread
/// serving the request may write the reply's header and, when it does not overlap the
/// request, its payload, while the request is being handled on that same thread.
struct Queue {
    qid: usize,
    depth: usize,
    payload: usize,
    dev: OwnedFd,
    headers: Region,
    bodies: Region,
    /// Two `iovec`s per entry (header, payload), read by Linux at registration.
    iovecs: Region,
    done: Mutex<Vec<Done>>,
    wake: OwnedFd,
    served: AtomicU64,
    refused: AtomicI32,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Queue({}, depth {})", self.qid, self.depth)
    }
}

/// A reply ready to be committed: already in the entry's buffers, or still to be copied there.
enum Done {
    Written(u16),
    Staged(u16, Vec<u8>),
}

thread_local! {
    /// The queue and entry this thread is handling a request of, if any.
    static HANDLING: Cell<(usize, u16)> = const { Cell::new((0, 0)) };
    /// The queue this thread serves, if any.
    static SERVING: Cell<usize> = const { Cell::new(0) };
}

impl Queue {
    fn new(qid: usize, dev: BorrowedFd<'_>, config: Config) -> io::Result<Queue> {
        let depth = config.depth;
        let body = SLACK + config.payload.next_multiple_of(8);
        // SAFETY: eventfd with valid flags; the result is checked before use.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `wake` was just returned by eventfd and is owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        let q = Queue {
            qid,
            depth,
            payload: config.payload,
            dev: dev.try_clone_to_owned()?,
            headers: Region::new(depth * HEADER)?,
            bodies: Region::new(depth * body)?,
            iovecs: Region::new(depth * 2 * size_of::<libc::iovec>())?,
            done: Mutex::new(Vec::new()),
            wake,
            served: AtomicU64::new(0),
            refused: AtomicI32::new(0),
        };
        for e in 0..depth {
            let iov = [
                libc::iovec {
                    iov_base: q.header(e).cast(),
                    iov_len: HEADER,
                },
                libc::iovec {
                    iov_base: q.payload(e).cast(),
                    iov_len: q.payload,
                },
            ];
            // SAFETY: the iovec region holds 2 * depth iovecs, 8-aligned; nothing else
            // refers to it yet.
            unsafe { q.iovecs.ptr().cast::<[libc::iovec; 2]>().add(e).write(iov) };
        }
        Ok(q)
    }

    fn header(&self, e: usize) -> *mut u8 {
        assert!(e < self.depth);
        // SAFETY: in bounds of the header region (e < depth).
        unsafe { self.headers.ptr().add(e * HEADER) }
    }

    /// Where the kernel puts (and reads) entry `e`'s payload; `SLACK` bytes before it are ours.
    fn payload(&self, e: usize) -> *mut u8 {
        assert!(e < self.depth);
        let body = SLACK + self.payload.next_multiple_of(8);
        // SAFETY: in bounds of the body region (e < depth).
        unsafe { self.bodies.ptr().add(e * body + SLACK) }
    }

    fn id(&self) -> usize {
        self as *const Queue as usize
    }

    /// The command for entry `e`: register it, or commit its reply and fetch the next request.
    fn command(&self, e: usize, op: u32, commit_id: u64) -> squeue::Entry128 {
        let mut cmd = [0u8; 80]; // struct fuse_uring_cmd_req: flags, commit_id, qid
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&(self.qid as u16).to_ne_bytes());
        // SAFETY: entry e's two iovecs are inside the iovec region.
        let iov = unsafe { self.iovecs.ptr().cast::<libc::iovec>().add(2 * e) };
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), op)
            .cmd(cmd)
            .addr(Some(iov as u64))
            .build()
            .user_data(e as u64);
        with_len(sqe, 2)
    }

    /// Copies a reply (`fuse_out_header`, then its payload) into entry `e`.
    ///
    /// # Safety
    /// Entry `e` is in user space, and nothing else reads or writes its header's in/out area,
    /// its `ent_in_out`, or (if the reply has a payload) its payload, during the call.
    unsafe fn write_reply(&self, e: usize, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = [0u8; OUT_HEADER];
        copy_prefix(parts, &mut out);
        let body = total.saturating_sub(OUT_HEADER);
        let body = if total < OUT_HEADER || body > self.payload {
            // Malformed, or too large for the entry: the caller gets EIO.
            out = out_header(-libc::EIO, u64::from_ne_bytes(out[8..16].try_into().unwrap()));
            0
        } else {
            body
        };
        // SAFETY: header and payload areas are ours (the caller's promise) and large enough
        // (body <= payload capacity, checked above).
        unsafe {
            if body > 0 {
                let mut dst = self.payload(e);
                let mut consumed = 0;
                for p in parts {
                    let chunk = &p[OUT_HEADER.saturating_sub(consumed).min(p.len())..];
                    std::ptr::copy_nonoverlapping(chunk.as_ptr(), dst, chunk.len());
                    dst = dst.add(chunk.len());
                    consumed += p.len();
                }
            }
        }
        // SAFETY: as above.
        unsafe { self.write_header(e, out, body) };
    }

    /// Writes entry `e`'s reply header and the size of the body its payload holds.
    ///
    /// # Safety
    /// The entry's header area must be free to write (its request is being handled by this
    /// thread, or none is).
    unsafe fn write_header(&self, e: usize, out: [u8; OUT_HEADER], body: usize) {
        let header = self.header(e);
        // SAFETY: the caller's promise; the header area holds OUT_HEADER bytes and the entry's
        // `fuse_uring_ent_in_out` after ENT_IN_OUT.
        unsafe {
            std::ptr::copy_nonoverlapping(out.as_ptr(), header, OUT_HEADER);
            header.add(ENT_IN_OUT + 16).cast::<u32>().write_unaligned(body as u32);
        }
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

fn copy_prefix(parts: &[&[u8]], out: &mut [u8]) {
    let mut n = 0;
    for p in parts {
        let k = p.len().min(out.len() - n);
        out[n..n + k].copy_from_slice(&p[..k]);
        n += k;
        if n == out.len() {
            break;
        }
    }
}

fn out_header(error: i32, unique: u64) -> [u8; OUT_HEADER] {
    out_header_of(error, unique, 0)
}

/// A `fuse_out_header` for a reply of `body` bytes after it.
fn out_header_of(error: i32, unique: u64, body: usize) -> [u8; OUT_HEADER] {
    let mut h = [0u8; OUT_HEADER];
    h[0..4].copy_from_slice(&((OUT_HEADER + body) as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

/// Sets an SQE's `len` (the number of iovecs a FUSE registration names), which the io-uring
/// crate's `UringCmd80` builder does not expose.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is `repr(C)`: a 64-byte `io_uring_sqe` followed by 64 bytes of command;
    // `len` is the u32 at byte 24 of the SQE. Any bit pattern is a valid Entry128.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(sqe);
        raw[24..28].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

/// An answer owed to one request. Dropped unsent, it answers EIO.
#[derive(Debug)]
pub struct Reply {
    queue: Arc<Queue>,
    entry: u16,
    unique: u64,
    /// The request's payload lies where the reply's would go.
    overlaps: bool,
    sent: bool,
}

impl Reply {
    /// Sends the reply: `data` is `fuse_out_header` and then the reply's arguments, as a
    /// `writev` to `/dev/fuse` would carry them.
    pub fn send(mut self, data: &[IoSlice<'_>]) -> io::Result<()> {
        self.sent = true;
        let parts: Vec<&[u8]> = data.iter().map(|s| &**s).collect();
        self.deliver(&parts);
        Ok(())
    }

    /// Answers with data written in place: `fill` gets the entry's own payload buffer, at most
    /// `max` bytes, and returns how many it filled (or an errno to answer with), so a read's
    /// data reaches Linux without passing through a buffer of its own. Off the thread that
    /// handles the request, or where the request's payload occupies that buffer, `fill` gets a
    /// buffer that is then copied.
    pub fn send_filled(mut self, max: usize, fill: impl FnOnce(&mut [u8]) -> Result<usize, i32>) {
        let q = self.queue.clone();
        let max = max.min(q.payload);
        let here = HANDLING.with(|h| h.get()) == (q.id(), self.entry);
        if !here || self.overlaps {
            let mut buf = vec![0u8; max];
            match fill(&mut buf) {
                Ok(n) => {
                    let n = n.min(max);
                    let h = out_header_of(0, self.unique, n);
                    let _ = self.send(&[IoSlice::new(&h), IoSlice::new(&buf[..n])]);
                }
                Err(errno) => self.error(errno),
            }
            return;
        }
        // SAFETY: this thread is handling this entry's request, which does not occupy the
        // payload area (checked above); `max` is within the entry's payload capacity.
        let payload = unsafe { std::slice::from_raw_parts_mut(q.payload(self.entry as usize), max) };
        match fill(payload) {
            Ok(n) => {
                let n = n.min(max);
                self.sent = true;
                // SAFETY: as above; the payload already holds the `n` bytes.
                unsafe { q.write_header(self.entry as usize, out_header_of(0, self.unique, n), n) };
                q.done.lock().push(Done::Written(self.entry));
            }
            Err(errno) => self.error(errno),
        }
    }

    /// Answers with an error (a positive errno).
    pub fn error(self, errno: i32) {
        let h = out_header(-errno, self.unique);
        let _ = self.send(&[IoSlice::new(&h)]);
    }

    fn deliver(&self, parts: &[&[u8]]) {
        let q = &self.queue;
        let here = HANDLING.with(|h| h.get()) == (q.id(), self.entry);
        let body: usize = parts.iter().map(|p| p.len()).sum::<usize>().saturating_sub(OUT_HEADER);
        if here && (!self.overlaps || body == 0) {
            // SAFETY: this thread is handling this entry's request, whose slice covers only
            // the slack and (when `overlaps`) the payload; the header area and a payload the
            // request does not occupy are free to write.
            unsafe { q.write_reply(self.entry as usize, parts) };
            q.done.lock().push(Done::Written(self.entry));
            return;
        }
        q.done.lock().push(Done::Staged(self.entry, parts.concat()));
        if SERVING.with(|s| s.get()) != q.id() {
            q.wake();
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.sent {
            let h = out_header(-libc::EIO, self.unique);
            self.deliver(&[&h]);
        }
    }
}

/// A queue's thread: registers the entries, then serves requests and commits replies until
/// Linux ends every entry (the connection closed).
fn serve(q: &Arc<Queue>, mut ring: IoUring<squeue::Entry128, cqueue::Entry>, handler: &dyn Handler) -> io::Result<()> {
    vino_idlepoll::pin_to_cpu(q.qid);
    ring.submitter().register_enable_rings()?;
    SERVING.with(|s| s.set(q.id()));
    let mut commit_ids = vec![0u64; q.depth];
    // Entries that may still serve (not refused, connection not ended), and entries whose
    // command is in Linux's hands (registered, or committed and waiting for the next request).
    let (mut live, mut in_kernel, mut ended) = (q.depth, 0usize, false);
    let mut wake_buf = Box::new(0u64);
    let mut pending = Vec::with_capacity(q.depth + 1);
    for e in 0..q.depth {
        pending.push(q.command(e, CMD_REGISTER, 0));
        in_kernel += 1;
    }
    pending.push(wake_read(q, &mut wake_buf));
    let mut ready = Vec::new();
    loop {
        for d in std::mem::take(&mut *q.done.lock()) {
            let e = match d {
                Done::Written(e) => e,
                Done::Staged(e, bytes) => {
                    // SAFETY: the entry is in user space and no request of it is being
                    // handled (handling ends before this loop runs).
                    unsafe { q.write_reply(e as usize, &[&bytes]) };
                    e
                }
            } as usize;
            pending.push(q.command(e, CMD_COMMIT_AND_FETCH, commit_ids[e]));
            in_kernel += 1;
        }
        // Done when Linux holds none of our commands and none can come back to serve: the
        // connection ended (an entry whose reply is still owed, a lock wait, will never serve
        // again), or every entry was refused.
        if in_kernel == 0 && (ended || live == 0) {
            return Ok(());
        }
        push_all(&mut ring, &mut pending)?;
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        ready.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for (user_data, result) in ready.drain(..) {
            if user_data == WAKE {
                pending.push(wake_read(q, &mut wake_buf));
                continue;
            }
            let e = user_data as usize;
            in_kernel -= 1;
            if result < 0 {
                match -result {
                    libc::ENOTCONN | libc::ECANCELED | libc::ENODEV | libc::ECONNABORTED => ended = true,
                    // Linux refused the entry (EOPNOTSUPP with the switch off, EINVAL): the
                    // connection goes on through /dev/fuse.
                    errno => {
                        let first = q
                            .refused
                            .compare_exchange(0, errno, Ordering::Relaxed, Ordering::Relaxed);
                        if first.is_ok() {
                            handler.refused(errno);
                        }
                    }
                }
                live -= 1;
                continue;
            }
            commit_ids[e] = handle(q, e, handler);
        }
    }
}

fn push_all(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    pending: &mut Vec<squeue::Entry128>,
) -> io::Result<()> {
    for sqe in pending.drain(..) {
        loop {
            // SAFETY: every command names buffers of the queue, which outlives the ring (the
            // Ring keeps the queue), and the wake read's buffer lives in the serving frame.
            match unsafe { ring.submission().push(&sqe) } {
                Ok(()) => break,
                Err(_) => {
                    ring.submit()?;
                }
            }
        }
    }
    Ok(())
}

fn wake_read(q: &Queue, buf: &mut u64) -> squeue::Entry128 {
    let sqe = opcode::Read::new(types::Fd(q.wake.as_raw_fd()), (buf as *mut u64).cast(), 8)
        .build()
        .user_data(WAKE);
    sqe.into()
}

/// Hands entry `e`'s request to the handler; returns the id its reply must be committed with.
fn handle(q: &Arc<Queue>, e: usize, handler: &dyn Handler) -> u64 {
    let header = q.header(e);
    let mut h = [0u8; IN_HEADER];
    let mut ent = [0u8; 32];
    // SAFETY: the entry is in user space (Linux completed its command); only this thread
    // touches it now.
    unsafe {
        std::ptr::copy_nonoverlapping(header, h.as_mut_ptr(), IN_HEADER);
        std::ptr::copy_nonoverlapping(header.add(ENT_IN_OUT), ent.as_mut_ptr(), 32);
    }
    let len = u32::from_ne_bytes(h[0..4].try_into().unwrap()) as usize;
    let unique = u64::from_ne_bytes(h[8..16].try_into().unwrap());
    let commit_id = u64::from_ne_bytes(ent[8..16].try_into().unwrap());
    let payload = u32::from_ne_bytes(ent[16..20].try_into().unwrap()) as usize;
    let reply = Reply {
        queue: q.clone(),
        entry: e as u16,
        unique,
        overlaps: payload > 0,
        sent: false,
    };
    let op = len
        .checked_sub(IN_HEADER + payload)
        .filter(|&op| op <= OP_IN && payload <= q.payload);
    let Some(op) = op else {
        drop(reply); // malformed: EIO
        return commit_id;
    };
    // Lay the request out as /dev/fuse would: in-header, the operation's header, payload.
    let start = q.payload(e).wrapping_sub(IN_HEADER + op);
    // SAFETY: `start` is inside the slack before the payload (IN_HEADER + op <= SLACK); the
    // sources are the entry's header area; the entry is ours (above).
    let request = unsafe {
        std::ptr::copy_nonoverlapping(h.as_ptr(), start, IN_HEADER);
        std::ptr::copy_nonoverlapping(header.add(IN_OUT), start.add(IN_HEADER), op);
        std::slice::from_raw_parts(start, len)
    };
    HANDLING.with(|c| c.set((q.id(), e as u16)));
    if (start as usize).is_multiple_of(8) {
        handler.handle(q.qid, request, reply);
    } else {
        // Headers are multiples of 8 bytes; should one not be, parse from an aligned copy.
        let mut aligned = vec![0u64; len.div_ceil(8)];
        // SAFETY: `aligned` holds at least len bytes.
        let copy = unsafe {
            std::ptr::copy_nonoverlapping(request.as_ptr(), aligned.as_mut_ptr().cast::<u8>(), len);
            std::slice::from_raw_parts(aligned.as_ptr().cast::<u8>(), len)
        };
        handler.handle(q.qid, copy, reply);
    }
    HANDLING.with(|c| c.set((0, 0)));
    q.served.fetch_add(1, Ordering::Relaxed);
    commit_id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0\n"), Some(1));
        assert_eq!(parse_cpu_list("0,2-5,7"), Some(8));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn a_registration_names_two_iovecs() {
        let sqe = opcode::UringCmd80::new(types::Fd(3), CMD_REGISTER).build();
        // SAFETY: Entry128 is 128 plain bytes.
        let raw: [u8; 128] = unsafe { std::mem::transmute(with_len(sqe, 2)) };
        assert_eq!(u32::from_ne_bytes(raw[24..28].try_into().unwrap()), 2);
        assert_eq!(raw[0], io_uring::opcode::UringCmd80::CODE);
    }
}
