//! The mount served over io_uring ([`vino_fuse_uring`]): requests go to the same file system
//! code as `/dev/fuse`'s (fuser's dispatcher), replies back through the ring.
//!
//! A queue's thread serves its CPU's callers one request at a time, so a request that may wait
//! long must not run on it: a blocking lock wait (`F_SETLKW`) waits on a thread of its own, and
//! so do an `fsync` (which waits for the disk) and an ioctl (a graft's, which compiles a module).
//! Each keeps its ring entry until answered, and a queue has only `depth` entries for all the
//! callers on its CPU. So such requests are bounded per queue: a quarter of the entries is kept
//! for requests that do not wait, and one user may hold at most another quarter. A lock wait
//! beyond that fails with ENOLCK, as a wait beyond the user's share of lock waits does on either
//! transport, and an ioctl with EAGAIN; an `fsync` beyond it runs on the queue's thread (it cannot
//! be refused), delaying only that CPU's callers. A truncation that frees more than a slice of
//! blocks ([`vino_kernel::storage::FREE_SLICE`]: a `setattr` of the size, an open with `O_TRUNC`) goes aside
//! the same way: freeing a 2 GiB file took 130 ms, every other request on its CPU waiting.

use crate::ops::{State, VinoFs};
use fuser::{Dispatcher, ReplySink};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::sync::{Arc, OnceLock};
use vino_fuse_uring::{Availability, Reply};

/// Which transport carries the mount's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// io_uring where Linux offers it, else `/dev/fuse`.
    Auto,
    /// io_uring or nothing: mounting fails where Linux does not offer it.
    Uring,
    /// `/dev/fuse` reads and writes only (the library's default; vinod asks for `Auto`).
    #[default]
    DevFuse,
}

/// Fewest ring entries per queue: a quarter kept for requests that do not wait, a quarter for
/// one user's waits, the rest for other users'.
pub const MIN_RING_DEPTH: usize = 4;

/// Bytes of payload per ring entry: the largest read or write Linux sends (256 pages).
pub(crate) const PAYLOAD: usize = 1 << 20;

const FUSE_SETATTR: u32 = 4;
const FUSE_OPEN: u32 = 14;
const FUSE_READ: u32 = 15;
const FUSE_FSYNC: u32 = 20;
const FUSE_FSYNCDIR: u32 = 30;
const FUSE_IOCTL: u32 = 39;
const FUSE_SETLKW: u32 = 33;
/// Bytes of `fuse_in_header`, before an operation's arguments.
const IN_HEADER: usize = 40;

/// What the mount knows of its ring.
#[derive(Debug, Default)]
pub(crate) struct RingState {
    /// Ask Linux for the ring at `FUSE_INIT`.
    pub(crate) wanted: bool,
    pub(crate) depth: usize,
    /// Linux agreed (set during the handshake).
    pub(crate) granted: std::sync::atomic::AtomicBool,
    /// The running ring, or why it could not start (the mount then serves through /dev/fuse).
    pub(crate) ring: OnceLock<Result<vino_fuse_uring::Ring, String>>,
}

impl RingState {
    pub(crate) fn new(transport: Transport, depth: usize) -> io::Result<RingState> {
        if transport != Transport::DevFuse && !(MIN_RING_DEPTH..u16::MAX as usize).contains(&depth) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ring_depth {depth}: from {MIN_RING_DEPTH} to {} entries per queue",
                    u16::MAX - 1
                ),
            ));
        }
        let available = vino_fuse_uring::availability();
        let wanted = match (transport, available) {
            (Transport::DevFuse, _) => false,
            (Transport::Auto, a) => a == Availability::Enabled && vino_fuse_uring::usable(),
            (Transport::Uring, Availability::Enabled) if vino_fuse_uring::usable() => true,
            (Transport::Uring, a) => return Err(unavailable(a)),
        };
        Ok(RingState {
            wanted,
            depth,
            ..Default::default()
        })
    }

    /// "io_uring, N queues" or "/dev/fuse".
    pub(crate) fn describe(&self) -> String {
        match self.ring.get() {
            Some(Ok(r)) => match r.refused() {
                None => format!("io_uring, {} queues", r.queues()),
                Some(errno) => format!("/dev/fuse (io_uring refused: errno {errno})"),
            },
            Some(Err(why)) => format!("/dev/fuse (io_uring did not start: {why})"),
            None => "/dev/fuse".into(),
        }
    }

    /// True while the ring serves the requests (it started and Linux did not refuse its
    /// queues): `/dev/fuse` then brings only forgets and interrupts.
    pub(crate) fn serving(&self) -> bool {
        matches!(self.ring.get(), Some(Ok(r)) if r.refused().is_none())
    }

    /// Requests served through the ring so far.
    pub(crate) fn served(&self) -> u64 {
        match self.ring.get() {
            Some(Ok(r)) => r.served(),
            _ => 0,
        }
    }
}

fn unavailable(a: Availability) -> io::Error {
    let why = match a {
        Availability::Missing => "this Linux has no FUSE over io_uring (6.14 or later needed)".to_string(),
        _ => format!(
            "FUSE over io_uring is off on this host (as root: echo Y > {})",
            vino_fuse_uring::parameter()
        ),
    };
    io::Error::new(io::ErrorKind::Unsupported, why)
}

/// Starts the ring's queues on the session's connection (fuser calls this after the handshake).
pub(crate) fn start(
    dispatcher: Dispatcher<VinoFs>,
    fs: &Arc<State>,
) -> io::Result<Vec<std::thread::JoinHandle<io::Result<()>>>> {
    let started = start_queues(dispatcher, fs);
    if let Err(e) = &started {
        let _ = fs.ring.ring.set(Err(e.to_string()));
        fs.no_ring();
    }
    started
}

fn start_queues(
    dispatcher: Dispatcher<VinoFs>,
    fs: &Arc<State>,
) -> io::Result<Vec<std::thread::JoinHandle<io::Result<()>>>> {
    let state = &fs.ring;
    let Ok(queues) = vino_fuse_uring::possible_cpus() else {
        vino_fuse_uring::decline(dispatcher.device());
        return Err(io::Error::other("the number of possible CPUs is unknown"));
    };
    let depth = state.depth;
    let dev = match dispatcher.device().try_clone_to_owned() {
        Ok(dev) => dev,
        Err(e) => {
            vino_fuse_uring::decline(dispatcher.device());
            return Err(e);
        }
    };
    let server = Arc::new(Server {
        fs: fs.clone(),
        dispatcher: Arc::new(dispatcher),
        aside: Arc::default(),
        waits: Arc::new((0..queues).map(|_| Mutex::default()).collect()),
        depth,
    });
    let config = vino_fuse_uring::Config {
        depth,
        payload: PAYLOAD,
    };
    let (ring, threads) = vino_fuse_uring::start(std::os::fd::AsFd::as_fd(&dev), queues, config, server)?;
    let _ = state.ring.set(Ok(ring));
    Ok(threads)
}

struct Server {
    /// The mount's state, for the requests served here without the dispatcher (reads).
    fs: Arc<State>,
    dispatcher: Arc<Dispatcher<VinoFs>>,
    aside: Arc<Aside>,
    /// Entries held by requests answered off the queue's thread, per queue: in all, and per uid.
    waits: Arc<Vec<Mutex<Waits>>>,
    depth: usize,
}

#[derive(Default)]
struct Waits {
    total: usize,
    by_user: HashMap<u32, usize>,
}

impl vino_fuse_uring::Handler for Server {
    fn refused(&self, _errno: i32) {
        self.fs.no_ring();
    }

    fn handle(&self, queue: usize, request: &[u8], reply: Reply) {
        self.fs.activity.busy();
        let opcode = u32::from_ne_bytes(request[4..8].try_into().unwrap());
        let uid = u32::from_ne_bytes(request[24..28].try_into().unwrap());
        match opcode {
            FUSE_SETLKW => match self.hold(queue, uid) {
                // The lock manager's wait runs on a thread of its own (ops' setlk).
                Some(hold) => self.dispatch(request, reply, Some(hold)),
                None => reply.error(libc::ENOLCK),
            },
            FUSE_FSYNC | FUSE_FSYNCDIR => match self.hold(queue, uid) {
                Some(hold) => self.dispatch_aside(request, reply, hold),
                None => self.dispatch(request, reply, None),
            },
            // A graft ioctl compiles a module (tens of milliseconds, after waiting for one of
            // its user's compiles): never on the queue's thread, which other users' requests on
            // this CPU wait for. Beyond the user's share of the queue: try again.
            FUSE_IOCTL => match self.hold(queue, uid) {
                Some(hold) => self.dispatch_aside(request, reply, hold),
                None => reply.error(libc::EAGAIN),
            },
            FUSE_SETATTR | FUSE_OPEN if self.frees_much(opcode, request) => match self.hold(queue, uid) {
                Some(hold) => self.dispatch_aside(request, reply, hold),
                None => self.dispatch(request, reply, None),
            },
            FUSE_READ => {
                // Served here, not through the dispatcher, which counts the others.
                let start = std::time::Instant::now();
                self.read_in_place(request, reply);
                self.fs.served.record(FUSE_READ, start.elapsed());
            }
            _ => self.dispatch(request, reply, None),
        }
    }
}

impl Server {
    fn dispatch(&self, request: &[u8], reply: Reply, hold: Option<Hold>) {
        let sink = Arc::new(Sink {
            reply: Mutex::new(Some(reply)),
            _hold: hold,
        });
        // An unparsable request gets EIO when its sink drops unanswered.
        let _ = self.dispatcher.dispatch(request, sink);
    }

    /// A read answered straight into the ring entry's buffer: the data is copied once, from
    /// the cache to the buffer Linux copies to the reader, not through a reply of its own.
    fn read_in_place(&self, request: &[u8], reply: Reply) {
        // fuse_in_header, then fuse_read_in: fh, offset, size, ...
        let arg = |at: usize, n: usize| request.get(IN_HEADER + at..IN_HEADER + at + n);
        let (Some(fh), Some(offset), Some(size)) = (arg(0, 8), arg(8, 8), arg(16, 4)) else {
            return reply.error(libc::EIO);
        };
        let fh = u64::from_ne_bytes(fh.try_into().expect("8 bytes"));
        let offset = u64::from_ne_bytes(offset.try_into().expect("8 bytes"));
        let size = u32::from_ne_bytes(size.try_into().expect("4 bytes")) as usize;
        reply.send_filled(size, |buf| self.fs.read_into(fh, offset, buf).map_err(|e| e.code()));
    }

    /// Serves a request that may wait long on another thread, so the queue's thread goes on
    /// with its CPU's other callers.
    fn dispatch_aside(&self, request: &[u8], reply: Reply, hold: Hold) {
        let sink = Arc::new(Sink {
            reply: Mutex::new(Some(reply)),
            _hold: Some(hold),
        });
        self.aside.submit((self.dispatcher.clone(), request.to_vec(), sink));
    }

    /// True if the request shrinks a file by more than one slice of blocks.
    fn frees_much(&self, opcode: u32, request: &[u8]) -> bool {
        let Some((node, new_size)) = shrinks(opcode, request) else {
            return false;
        };
        let slice = vino_kernel::storage::FREE_SLICE * vino_kernel::storage::BS as u64;
        self.fs
            .size_of(node)
            .is_some_and(|old| old > new_size.saturating_add(slice))
    }

    /// Counts a lock wait against the queue's bounds, released when the wait's reply is sent.
    fn hold(&self, queue: usize, uid: u32) -> Option<Hold> {
        let quarter = (self.depth / 4).max(1);
        let mut w = self.waits[queue].lock();
        let mine = w.by_user.get(&uid).copied().unwrap_or(0);
        if w.total >= self.depth.saturating_sub(quarter) || mine >= quarter {
            return None;
        }
        w.total += 1;
        *w.by_user.entry(uid).or_default() += 1;
        Some(Hold {
            waits: self.waits.clone(),
            queue,
            uid,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.aside.close();
    }
}

/// A request served aside: the dispatcher (held only while it is served), the request, its sink.
type Job = (Arc<Dispatcher<VinoFs>>, Vec<u8>, Arc<Sink>);

/// The threads that serve requests set aside from the queues' threads: made when none is idle
/// (their number is bounded by the entries such requests may hold), kept until the ring ends.
#[derive(Default)]
struct Aside {
    state: Mutex<AsideState>,
    ready: parking_lot::Condvar,
}

#[derive(Default)]
struct AsideState {
    jobs: std::collections::VecDeque<Job>,
    /// Idle threads not yet handed a job.
    idle: usize,
    closed: bool,
}

impl Aside {
    fn submit(self: &Arc<Aside>, job: Job) {
        let mut s = self.state.lock();
        s.jobs.push_back(job);
        if s.idle > 0 {
            s.idle -= 1;
            self.ready.notify_one();
            return;
        }
        drop(s);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("vino-fuse-aside".into())
            .spawn(move || me.serve());
        if spawned.is_err() {
            // No thread to be had: serve it here rather than not at all.
            if let Some((dispatcher, request, sink)) = self.state.lock().jobs.pop_back() {
                let _ = dispatcher.dispatch(&request, sink);
            }
        }
    }

    fn serve(&self) {
        loop {
            let (dispatcher, request, sink) = {
                let mut s = self.state.lock();
                loop {
                    if let Some(job) = s.jobs.pop_front() {
                        break job;
                    }
                    if s.closed {
                        return;
                    }
                    s.idle += 1;
                    self.ready.wait(&mut s);
                }
            };
            let _ = dispatcher.dispatch(&request, sink);
        }
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.ready.notify_all();
    }
}

/// The node a request sets the size of, and the size: a `setattr` of the size
/// (`fuse_setattr_in`: `valid`, padding, `fh`, `size`) or an open with `O_TRUNC` (`fuse_open_in`:
/// `flags`), of the node `fuse_in_header` names (at byte 16).
fn shrinks(opcode: u32, request: &[u8]) -> Option<(u64, u64)> {
    const FATTR_SIZE: u32 = 1 << 3;
    let u32_at = |at: usize| {
        request
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
    };
    let u64_at = |at: usize| {
        request
            .get(at..at + 8)
            .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    };
    let size = match opcode {
        FUSE_SETATTR if u32_at(IN_HEADER)? & FATTR_SIZE != 0 => u64_at(IN_HEADER + 16)?,
        FUSE_OPEN if u32_at(IN_HEADER)? & libc::O_TRUNC as u32 != 0 => 0,
        _ => return None,
    };
    Some((u64_at(16)?, size))
}

/// A counted wait; dropping it gives the place back.
struct Hold {
    waits: Arc<Vec<Mutex<Waits>>>,
    queue: usize,
    uid: u32,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut w = self.waits[self.queue].lock();
        w.total -= 1;
        let mine = w.by_user.get_mut(&self.uid).expect("a held wait is counted");
        *mine -= 1;
        if *mine == 0 {
            w.by_user.remove(&self.uid);
        }
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hold(queue {}, uid {})", self.queue, self.uid)
    }
}

#[derive(Debug)]
struct Sink {
    reply: Mutex<Option<Reply>>,
    _hold: Option<Hold>,
}

impl ReplySink for Sink {
    fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        match self.reply.lock().take() {
            Some(reply) => reply.send(data),
            None => Err(io::Error::other("FUSE reply sent twice")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fuse_in_header` (len, opcode, unique, nodeid, uid, gid, pid, ...) and an argument.
    fn request(opcode: u32, node: u64, arg: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; IN_HEADER];
        r[0..4].copy_from_slice(&((IN_HEADER + arg.len()) as u32).to_ne_bytes());
        r[4..8].copy_from_slice(&opcode.to_ne_bytes());
        r[8..16].copy_from_slice(&77u64.to_ne_bytes());
        r[16..24].copy_from_slice(&node.to_ne_bytes());
        r.extend_from_slice(arg);
        r
    }

    /// Which requests set a size, of which node, to what: what decides that a big truncation
    /// is served aside.
    #[test]
    fn a_size_change_is_found_in_setattr_and_open() {
        // fuse_setattr_in: valid, padding, fh, size, lock_owner, ...
        let mut setattr = vec![0u8; 88];
        setattr[0..4].copy_from_slice(&(1u32 << 3 | 1).to_ne_bytes());
        setattr[16..24].copy_from_slice(&4096u64.to_ne_bytes());
        assert_eq!(
            shrinks(FUSE_SETATTR, &request(FUSE_SETATTR, 9, &setattr)),
            Some((9, 4096))
        );
        setattr[0..4].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(
            shrinks(FUSE_SETATTR, &request(FUSE_SETATTR, 9, &setattr)),
            None,
            "a chmod"
        );
        // fuse_open_in: flags, open_flags.
        let open = |flags: i32| {
            let mut a = (flags as u32).to_ne_bytes().to_vec();
            a.extend_from_slice(&[0; 4]);
            request(FUSE_OPEN, 12, &a)
        };
        assert_eq!(shrinks(FUSE_OPEN, &open(libc::O_WRONLY | libc::O_TRUNC)), Some((12, 0)));
        assert_eq!(shrinks(FUSE_OPEN, &open(libc::O_WRONLY)), None);
        assert_eq!(
            shrinks(FUSE_OPEN, &request(FUSE_OPEN, 12, &[])),
            None,
            "truncated: no arguments"
        );
        assert_eq!(shrinks(FUSE_READ, &open(libc::O_TRUNC)), None);
    }
}
