//! Pipes and FIFOs: a bounded queue of bytes between processes, with POSIX's rules. A write of
//! at most [`PIPE_BUF`] bytes goes in whole or not at all (writers never interleave inside
//! one); the reader sees the end once the last writer has gone and the queue is drained; a
//! write with no reader left is `EPIPE` (and `SIGPIPE` to the writer, which the caller sends).
//!
//! Nothing here blocks: `read` and `write` take what they can now or say `EAGAIN`, and
//! `poll_*` register a waker for when they could go on. A VINO process's call awaits those
//! (its worker runs other threads meanwhile); a caller outside the scheduler may wait with
//! [`crate::blocking_wait`]. The queue's bytes are charged, whole, to the process that made the
//! pipe (or first opened the FIFO) while it exists: a pipe nobody reads costs its maker 64 KiB
//! and holds up only its writers.

use crate::account::{Account, Charge, Resource};
use crate::error::{Errno, SysError, SysResult};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Writes up to this many bytes are atomic.
pub const PIPE_BUF: usize = 4096;
/// Bytes a pipe holds (Linux's default).
pub const PIPE_CAPACITY: usize = 64 << 10;

/// Which end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Read,
    Write,
}

impl Side {
    fn index(self) -> usize {
        self as usize
    }

    fn other(self) -> Side {
        match self {
            Side::Read => Side::Write,
            Side::Write => Side::Read,
        }
    }
}

/// The queue both ends share.
pub struct Pipe {
    state: Mutex<State>,
    /// The FIFO's inode, for a named pipe.
    fifo: Option<u64>,
    _charge: Charge,
}

#[derive(Default)]
struct State {
    bytes: VecDeque<u8>,
    /// Ends open, by side.
    open: [usize; 2],
    /// Opens ever made, by side: a FIFO's open waits for the other side's count to move.
    opened: [u64; 2],
    /// Waiting to read (or for a writer to open), and to write (or for a reader to open).
    waiting: [Vec<Waker>; 2],
}

impl State {
    fn free(&self) -> usize {
        PIPE_CAPACITY - self.bytes.len()
    }

    /// Wakes those waiting on `side`.
    fn wake(&mut self, side: Side) {
        for w in self.waiting[side.index()].drain(..) {
            w.wake();
        }
    }

    fn wait(&mut self, side: Side, cx: &Context<'_>) {
        let list = &mut self.waiting[side.index()];
        if !list.iter().any(|w| w.will_wake(cx.waker())) {
            list.push(cx.waker().clone());
        }
    }
}

/// One open end of a pipe; the end closes when it is dropped. Shared between descriptors (a
/// `dup`, a child's inherited copy) by holding it in an `Arc`.
pub struct PipeEnd {
    pipe: Arc<Pipe>,
    side: Side,
}

impl Pipe {
    /// A new pipe, charged to `account`: its read end and its write end.
    pub fn ends(account: &Arc<Account>) -> SysResult<(PipeEnd, PipeEnd)> {
        let pipe = Pipe::unopened(account, None)?;
        Ok((pipe.open(Side::Read), pipe.open(Side::Write)))
    }

    /// A pipe with no end open yet (a FIFO's, until its first open).
    pub(crate) fn unopened(account: &Arc<Account>, fifo: Option<u64>) -> SysResult<Arc<Pipe>> {
        let charge = account.charge(Resource::PipeBytes, PIPE_CAPACITY as u64).map_err(|e| {
            SysError::new(
                Errno::NFile,
                format!("no pipe: {e} (each pipe holds {PIPE_CAPACITY} bytes)"),
            )
        })?;
        Ok(Arc::new(Pipe {
            state: Mutex::default(),
            fifo,
            _charge: charge,
        }))
    }

    /// Opens one more end on `side`; those waiting for it (a FIFO's other side) go on.
    pub fn open(self: &Arc<Self>, side: Side) -> PipeEnd {
        let mut s = self.state.lock();
        s.open[side.index()] += 1;
        s.opened[side.index()] += 1;
        s.wake(side.other());
        PipeEnd {
            pipe: self.clone(),
            side,
        }
    }

    /// The FIFO's inode, for a named pipe.
    pub fn fifo(&self) -> Option<u64> {
        self.fifo
    }
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        let mut s = self.pipe.state.lock();
        s.open[self.side.index()] -= 1;
        if s.open[self.side.index()] == 0 {
            // The other side sees the end (a reader) or EPIPE (a writer).
            s.wake(self.side.other());
        }
    }
}

impl PipeEnd {
    pub fn side(&self) -> Side {
        self.side
    }

    pub fn pipe(&self) -> &Arc<Pipe> {
        &self.pipe
    }

    /// Reads what is queued, up to `buf.len()`: 0 at the end (no writer left, nothing queued),
    /// `EAGAIN` if nothing is queued yet.
    pub fn read(&self, buf: &mut [u8]) -> SysResult<usize> {
        assert_eq!(self.side, Side::Read, "read from a pipe's write end");
        let mut s = self.pipe.state.lock();
        if s.bytes.is_empty() {
            if s.open[Side::Write.index()] == 0 {
                return Ok(0);
            }
            return Err(again());
        }
        let n = buf.len().min(s.bytes.len());
        let (a, b) = s.bytes.as_slices();
        let first = n.min(a.len());
        buf[..first].copy_from_slice(&a[..first]);
        buf[first..n].copy_from_slice(&b[..n - first]);
        s.bytes.drain(..n);
        if s.bytes.is_empty() {
            // Give the memory back between bursts: an idle pipe holds nothing.
            s.bytes.shrink_to(PIPE_BUF);
        }
        s.wake(Side::Write);
        Ok(n)
    }

    /// Writes what fits now: all of `data` if it is at most [`PIPE_BUF`] bytes and fits (else
    /// nothing: `EAGAIN`), as much as fits of a longer one (`EAGAIN` if none does). `EPIPE` if
    /// no reader is left.
    pub fn write(&self, data: &[u8]) -> SysResult<usize> {
        assert_eq!(self.side, Side::Write, "write to a pipe's read end");
        let mut s = self.pipe.state.lock();
        if s.open[Side::Read.index()] == 0 {
            return Err(SysError::new(Errno::Pipe, "the pipe has no reader"));
        }
        let free = s.free();
        let n = if data.len() <= PIPE_BUF {
            if free < data.len() {
                return Err(again());
            }
            data.len()
        } else {
            free.min(data.len())
        };
        if n == 0 {
            return Err(again());
        }
        s.bytes.extend(&data[..n]);
        s.wake(Side::Read);
        Ok(n)
    }

    /// Ready when a read would not say `EAGAIN` (something queued, or the end).
    pub fn poll_readable(&self, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.pipe.state.lock();
        if !s.bytes.is_empty() || s.open[Side::Write.index()] == 0 {
            return Poll::Ready(());
        }
        s.wait(Side::Read, cx);
        Poll::Pending
    }

    /// Ready when a write of `len` bytes would not say `EAGAIN` (room for it, whole if it is
    /// atomic, or no reader left).
    pub fn poll_writable(&self, len: usize, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.pipe.state.lock();
        let need = len.clamp(1, PIPE_BUF);
        if s.free() >= need || s.open[Side::Read.index()] == 0 {
            return Poll::Ready(());
        }
        s.wait(Side::Write, cx);
        Poll::Pending
    }

    /// Whether a read (a write of one byte) would go on now: what `poll` reports.
    pub fn ready(&self) -> bool {
        let s = self.pipe.state.lock();
        match self.side {
            Side::Read => !s.bytes.is_empty() || s.open[Side::Write.index()] == 0,
            Side::Write => s.free() > 0 || s.open[Side::Read.index()] == 0,
        }
    }

    /// Bytes queued.
    pub fn queued(&self) -> usize {
        self.pipe.state.lock().bytes.len()
    }

    /// Opens of the other side so far (a FIFO's open waits for this to move).
    pub fn peer_opens(&self) -> u64 {
        self.pipe.state.lock().opened[self.side.other().index()]
    }

    /// Ready once the other side has an end open, or has opened since `seen` opens (a FIFO's
    /// blocking open: POSIX's rendezvous of a reader and a writer).
    pub fn poll_peer(&self, seen: u64, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.pipe.state.lock();
        let other = self.side.other().index();
        if s.open[other] > 0 || s.opened[other] > seen {
            return Poll::Ready(());
        }
        s.wait(self.side, cx);
        Poll::Pending
    }

    /// Whether the other side has an end open.
    pub fn peer_open(&self) -> bool {
        self.pipe.state.lock().open[self.side.other().index()] > 0
    }
}

impl crate::Process {
    /// A new pipe, its queue charged to this process: the read end and the write end.
    pub fn pipe(&self) -> SysResult<(PipeEnd, PipeEnd)> {
        Pipe::ends(self.account())
    }

    /// The FIFO at `path` (from `at`, symbolic links followed), opened for `side`: the pipe
    /// every opener of that FIFO shares, made at the first open and charged to its opener.
    /// `EACCES` without read (or write) permission on it; `ENXIO` if it is not a FIFO. The
    /// caller waits for the other side as POSIX says ([`PipeEnd::poll_peer`]).
    pub fn open_fifo_at(&self, at: crate::At, path: impl AsRef<[u8]>, side: Side) -> SysResult<PipeEnd> {
        let st = self.stat_at(at, path, true)?;
        if st.kind != vino_fs::FileType::Fifo {
            return Err(SysError::new(Errno::NxIo, "not a FIFO"));
        }
        let want = match side {
            Side::Read => crate::perm::READ,
            Side::Write => crate::perm::WRITE,
        };
        if !crate::perm::may(self.credentials(), &st, want) {
            return Err(SysError::new(
                Errno::Acces,
                format!("permission denied (FIFO inode {})", st.ino),
            ));
        }
        let pipe = {
            let mut fifos = self.kernel().fifos.lock();
            match fifos.get(&st.ino).and_then(std::sync::Weak::upgrade) {
                Some(p) => p,
                None => {
                    fifos.retain(|_, w| w.strong_count() > 0);
                    let p = Pipe::unopened(self.account(), Some(st.ino))?;
                    fifos.insert(st.ino, Arc::downgrade(&p));
                    p
                }
            }
        };
        Ok(pipe.open(side))
    }
}

fn again() -> SysError {
    SysError::new(Errno::Again, "the pipe would block")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::{Accounts, LimitsConfig};

    fn account() -> Arc<Account> {
        Accounts::new(LimitsConfig::default()).process(1000, "process 1")
    }

    #[test]
    fn bytes_go_through_in_order_and_the_end_follows_the_last_writer() {
        let a = account();
        let (r, w) = Pipe::ends(&a).unwrap();
        assert_eq!(w.write(b"hello ").unwrap(), 6);
        assert_eq!(w.write(b"world").unwrap(), 5);
        let mut buf = [0u8; 64];
        assert_eq!(r.read(&mut buf).unwrap(), 11);
        assert_eq!(&buf[..11], b"hello world");
        assert_eq!(r.read(&mut buf).unwrap_err().errno, Errno::Again);
        let w2 = w.pipe().open(Side::Write);
        drop(w);
        assert_eq!(r.read(&mut buf).unwrap_err().errno, Errno::Again, "one writer is left");
        drop(w2);
        assert_eq!(r.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn small_writes_are_whole_or_nothing_and_large_ones_fill() {
        let a = account();
        let (r, w) = Pipe::ends(&a).unwrap();
        let big = vec![7u8; PIPE_CAPACITY + 100];
        assert_eq!(w.write(&big).unwrap(), PIPE_CAPACITY);
        assert_eq!(w.write(b"x").unwrap_err().errno, Errno::Again);
        let mut buf = vec![0u8; PIPE_BUF - 1];
        r.read(&mut buf).unwrap();
        // PIPE_BUF - 1 bytes free: a PIPE_BUF write does not go in part.
        assert_eq!(w.write(&vec![1u8; PIPE_BUF]).unwrap_err().errno, Errno::Again);
        assert_eq!(w.write(&vec![1u8; PIPE_BUF - 1]).unwrap(), PIPE_BUF - 1);
    }

    #[test]
    fn a_write_with_no_reader_is_epipe() {
        let a = account();
        let (r, w) = Pipe::ends(&a).unwrap();
        drop(r);
        assert_eq!(w.write(b"x").unwrap_err().errno, Errno::Pipe);
    }

    #[test]
    fn the_queue_is_charged_to_its_maker_until_it_goes() {
        let limits = LimitsConfig {
            user: LimitsConfig::default()
                .user
                .with(Resource::PipeBytes, 2 * PIPE_CAPACITY as u64),
            ..LimitsConfig::default()
        };
        let a = Accounts::new(limits).process(1000, "process 1");
        let one = Pipe::ends(&a).unwrap();
        let two = Pipe::ends(&a).unwrap();
        let refused = Pipe::ends(&a).err().expect("the third pipe passes the limit");
        assert_eq!(refused.errno, Errno::NFile);
        drop(one);
        let _three = Pipe::ends(&a).expect("a pipe's charge goes with it");
        drop(two);
    }
}
