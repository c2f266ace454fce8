//! Packets in batches: [`Reader`] keeps many reads of the device in flight in an io_uring and
//! takes every packet that arrived with one system call; [`Writer`] hands a whole batch of
//! packets to the kernel with one. Where io_uring is missing or forbidden (a seccomp filter,
//! `VINO_NO_URING`), both fall back to a call per packet, after `poll` for reads.

use crate::Tun;
use io_uring::{IoUring, opcode, types};
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// Reads kept in flight: packets that may arrive between two entries of the ring.
pub const READ_DEPTH: u32 = 64;
/// Writes per entry of the ring.
const WRITE_DEPTH: u32 = 256;
/// User data of the cancels sent when a reader closes.
const CANCEL: u64 = u64::MAX;

fn uring_allowed() -> bool {
    !std::env::var_os("VINO_NO_URING").is_some_and(|v| !v.is_empty() && v != "0")
}

/// A ring whose waits can time out (`IORING_FEAT_EXT_ARG`, Linux 5.11), or none.
fn ring(entries: u32) -> Option<IoUring> {
    if !uring_allowed() {
        return None;
    }
    let ring = IoUring::new(entries).ok()?;
    ring.params().is_feature_ext_arg().then_some(ring)
}

/// How many packets a batch moved, and how many the device refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    pub packets: usize,
    pub refused: usize,
}

/// Takes the packets a TUN device gives VINO.
pub struct Reader {
    tun: Arc<Tun>,
    mtu: usize,
    ring: Option<RxRing>,
}

struct RxRing {
    ring: IoUring,
    /// One buffer per read in flight, indexed by the read's user data. The kernel writes into
    /// a buffer until its read completes, so none is freed or moved before that (see `Drop`).
    bufs: Vec<Box<[u8]>>,
    in_flight: Vec<bool>,
}

impl Reader {
    /// A reader of packets up to `mtu` bytes.
    pub fn new(tun: Arc<Tun>, mtu: usize) -> io::Result<Reader> {
        let mut reader = Reader { tun, mtu, ring: None };
        match ring(READ_DEPTH * 2) {
            Some(ring) => {
                let mut rx = RxRing {
                    ring,
                    bufs: (0..READ_DEPTH).map(|_| vec![0u8; mtu].into_boxed_slice()).collect(),
                    in_flight: vec![false; READ_DEPTH as usize],
                };
                for slot in 0..READ_DEPTH as usize {
                    rx.arm(reader.tun.fd(), slot)?;
                }
                reader.ring = Some(rx);
            }
            None => set_nonblocking(reader.tun.fd())?,
        }
        Ok(reader)
    }

    /// Whether reads go through io_uring (else a read per packet).
    pub fn batched(&self) -> bool {
        self.ring.is_some()
    }

    /// Waits up to `timeout` for packets and appends every one that has arrived to `out`. None
    /// arriving in time is not an error.
    pub fn read(&mut self, timeout: Duration, out: &mut Vec<Vec<u8>>) -> io::Result<()> {
        let fd = self.tun.fd();
        match &mut self.ring {
            Some(rx) => rx.read(fd, timeout, out),
            None => read_plain(fd, self.mtu, timeout, out),
        }
    }
}

impl RxRing {
    fn arm(&mut self, fd: i32, slot: usize) -> io::Result<()> {
        let buf = &mut self.bufs[slot];
        let read = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer is owned by this ring and neither freed nor moved until the read
        // completes (`in_flight`, and `Drop` waits for every read).
        unsafe { self.ring.submission().push(&read) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.in_flight[slot] = true;
        Ok(())
    }

    fn read(&mut self, fd: i32, timeout: Duration, out: &mut Vec<Vec<u8>>) -> io::Result<()> {
        let ts = types::Timespec::from(timeout);
        match self
            .ring
            .submitter()
            .submit_with_args(1, &types::SubmitArgs::new().timespec(&ts))
        {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
            Err(e) => return Err(e),
        }
        let done: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        let mut failed = None;
        for (slot, result) in done {
            if slot == CANCEL {
                continue;
            }
            let slot = slot as usize;
            self.in_flight[slot] = false;
            match result {
                n if n > 0 => out.push(self.bufs[slot][..n as usize].to_vec()),
                0 => {}
                e if matches!(-e, libc::EAGAIN | libc::EINTR) => {}
                e => {
                    failed = Some(io::Error::from_raw_os_error(-e));
                    continue;
                }
            }
            self.arm(fd, slot)?;
        }
        match failed {
            // A read that failed for another reason (the device went away) is not rearmed.
            Some(e) if !self.in_flight.iter().any(|f| *f) => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        for slot in 0..self.bufs.len() {
            if self.in_flight[slot] {
                let cancel = opcode::AsyncCancel::new(slot as u64).build().user_data(CANCEL);
                // SAFETY: a cancel references no memory.
                let _ = unsafe { self.ring.submission().push(&cancel) };
            }
        }
        // Every read must end before its buffer is freed; a ring that will not say so keeps
        // its buffers forever rather than let the kernel write into freed memory.
        let ts = types::Timespec::from(Duration::from_millis(100));
        for _ in 0..50 {
            if !self.in_flight.iter().any(|f| *f) {
                return;
            }
            let _ = self
                .ring
                .submitter()
                .submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
            let done: Vec<u64> = self.ring.completion().map(|c| c.user_data()).collect();
            for slot in done.into_iter().filter(|s| *s != CANCEL) {
                self.in_flight[slot as usize] = false;
            }
        }
        std::mem::forget(std::mem::take(&mut self.bufs));
    }
}

fn set_nonblocking(fd: i32) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this crate owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn read_plain(fd: i32, mtu: usize, timeout: Duration, out: &mut Vec<Vec<u8>>) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one pollfd, alive for the call.
    if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
        return Ok(());
    }
    let mut buf = vec![0u8; mtu];
    for _ in 0..READ_DEPTH {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                _ if n == 0 => Ok(()),
                Some(libc::EAGAIN | libc::EINTR) => Ok(()),
                _ => Err(e),
            };
        }
        out.push(buf[..n as usize].to_vec());
    }
    Ok(())
}

/// Gives a TUN device the packets VINO sends.
pub struct Writer {
    tun: Arc<Tun>,
    ring: Option<IoUring>,
}

impl Writer {
    pub fn new(tun: Arc<Tun>) -> Writer {
        Writer {
            tun,
            ring: ring(WRITE_DEPTH),
        }
    }

    pub fn batched(&self) -> bool {
        self.ring.is_some()
    }

    /// Writes every packet of `packets`, in order, and empties it. A packet the device refuses
    /// (it is down, or the host has no memory for it) is lost as on any link: counted, not an
    /// error.
    pub fn write(&mut self, packets: &mut Vec<Vec<u8>>) -> Moved {
        let fd = self.tun.fd();
        let mut moved = Moved::default();
        match &mut self.ring {
            Some(ring) => {
                for chunk in packets.chunks(WRITE_DEPTH as usize) {
                    write_ring(ring, fd, chunk, &mut moved);
                }
            }
            None => {
                for p in packets.iter() {
                    // SAFETY: `p` is readable for its length.
                    let n = unsafe { libc::write(fd, p.as_ptr().cast(), p.len()) };
                    if n == p.len() as isize {
                        moved.packets += 1;
                    } else {
                        moved.refused += 1;
                    }
                }
            }
        }
        packets.clear();
        moved
    }
}

fn write_ring(ring: &mut IoUring, fd: i32, chunk: &[Vec<u8>], moved: &mut Moved) {
    let mut pushed = 0;
    for (i, p) in chunk.iter().enumerate() {
        let write = opcode::Write::new(types::Fd(fd), p.as_ptr(), p.len() as u32)
            .build()
            .user_data(i as u64);
        // SAFETY: the packets are borrowed until every write below has completed.
        if unsafe { ring.submission().push(&write) }.is_err() {
            break;
        }
        pushed += 1;
    }
    let mut reaped = 0;
    while reaped < pushed {
        match ring.submit_and_wait(pushed - reaped) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(_) => {
                // The ring failed with writes perhaps in flight: wait for them one by one so
                // the packets outlive them.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for c in ring.completion() {
            reaped += 1;
            let len = chunk[c.user_data() as usize].len();
            if c.result() == len as i32 {
                moved.packets += 1;
            } else {
                moved.refused += 1;
            }
        }
    }
    moved.refused += chunk.len() - pushed;
}
