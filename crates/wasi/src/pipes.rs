//! Reads and writes on pipe descriptors: straight between the program's memory and the pipe's
//! queue (no copy in between), waiting off the worker when the pipe is empty or full, and
//! giving up with `EINTR` when a handled signal comes (or going on after its handler, for
//! SA_RESTART). A write with no reader left is `EPIPE` and sends the writer SIGPIPE, whose
//! default ends it.

use crate::Ctx;
use crate::abi::WasiErrno;
use crate::calls::with_memory;
use crate::fds::{Entry, PipeFd};
use crate::guest::Result;
use crate::signals;
use std::sync::Arc;
use std::task::Poll;
use vino_kernel::{Errno, PIPE_BUF, Side, signal};
use wasmtime::Caller;

/// The pipe end open as `fd`, if it is one.
pub fn pipe_of(c: &Caller<'_, Ctx>, fd: u32) -> Option<PipeFd> {
    match c.data().fds.get(fd) {
        Ok(Entry::Pipe(p)) => Some(p.clone()),
        _ => None,
    }
}

/// How a wait for a pipe (or a socket) ended.
pub(crate) enum Woken {
    Ready,
    Signal,
}

/// Waits until `ready` says so or a signal is deliverable.
pub(crate) async fn wait(c: &Caller<'_, Ctx>, ready: impl Fn(&std::task::Context<'_>) -> Poll<()>) -> Woken {
    let process = c.data().process.clone();
    std::future::poll_fn(|cx| {
        if ready(cx).is_ready() {
            return Poll::Ready(Woken::Ready);
        }
        if process.poll_signal(cx).is_ready() {
            return Poll::Ready(Woken::Signal);
        }
        Poll::Pending
    })
    .await
}

/// What a blocked call does after a signal came: `Ok(())` to go on waiting (its handlers ran
/// and all asked to restart), `EINTR` otherwise; an error of the program's end passes through.
pub(crate) async fn interrupted(c: &mut Caller<'_, Ctx>) -> wasmtime::Result<Result<()>> {
    let d = signals::deliver(c).await?;
    Ok(if d.handled && d.restart {
        Ok(())
    } else {
        Err(WasiErrno::INTR)
    })
}

/// `fd_read` on a pipe's read end: what is queued, up to the first buffer with room, as a
/// Linux pipe read returns; waits while nothing is (unless the descriptor is non-blocking).
pub async fn read(c: &mut Caller<'_, Ctx>, p: PipeFd, iovs: u32, n: u32, out: u32) -> wasmtime::Result<i32> {
    if p.end.side() != Side::Read {
        return Ok(i32::from(WasiErrno::BADF.0));
    }
    loop {
        let got = with_memory(c, |g, _| {
            let Some((buf, len)) = g.iovecs(iovs, n)?.into_iter().find(|&(_, len)| len > 0) else {
                return Ok(Some(0));
            };
            match p.end.read(g.bytes_mut(buf, len)?) {
                Ok(got) => Ok(Some(got)),
                Err(e) if e.errno == Errno::Again && !p.nonblock => Ok(None),
                Err(e) => Err(e.into()),
            }
        });
        let result = match got {
            Ok(Some(got)) => with_memory(c, |g, _| g.put_u32(out, got as u32)),
            Ok(None) => {
                let end = p.end.clone();
                match wait(c, move |cx| end.poll_readable(cx)).await {
                    Woken::Ready => continue,
                    Woken::Signal => match interrupted(c).await? {
                        Ok(()) => continue,
                        Err(e) => Err(e),
                    },
                }
            }
            Err(e) => Err(e),
        };
        return signals::after(c, errno(result)).await;
    }
}

/// `fd_write` on a pipe's write end: all of it, waiting for room as needed (a write of at most
/// PIPE_BUF bytes in one piece); on a non-blocking descriptor, what fits now (`EAGAIN` if
/// nothing does). Interrupted after some bytes went, it reports those.
pub async fn write(c: &mut Caller<'_, Ctx>, p: PipeFd, iovs: u32, n: u32, out: u32) -> wasmtime::Result<i32> {
    if p.end.side() != Side::Write {
        return Ok(i32::from(WasiErrno::BADF.0));
    }
    let bufs = match with_memory(c, |g, _| g.iovecs(iovs, n)) {
        Ok(b) => b,
        Err(e) => return Ok(i32::from(e.0)),
    };
    let total: u64 = bufs.iter().map(|&(_, len)| u64::from(len)).sum();
    let result = if total as usize <= PIPE_BUF && bufs.len() > 1 {
        // Atomic across its buffers: gathered (at most PIPE_BUF bytes) and written whole.
        match with_memory(c, |g, _| {
            let mut all = Vec::with_capacity(total as usize);
            for &(b, len) in &bufs {
                all.extend_from_slice(g.bytes(b, len)?);
            }
            Ok(all)
        }) {
            Ok(all) => write_all(c, &p, &[Chunk::Owned(all)]).await?,
            Err(e) => Err(e),
        }
    } else {
        let chunks: Vec<Chunk> = bufs.iter().map(|&(b, len)| Chunk::Guest(b, len)).collect();
        write_all(c, &p, &chunks).await?
    };
    let result = result.and_then(|done| with_memory(c, |g, _| g.put_u32(out, done as u32)));
    signals::after(c, errno(result)).await
}

/// A piece of a write: bytes of the program's memory, or gathered ones.
enum Chunk {
    Guest(u32, u32),
    Owned(Vec<u8>),
}

/// Writes the chunks in order, waiting for room; the bytes written, or the error if none were.
async fn write_all(c: &mut Caller<'_, Ctx>, p: &PipeFd, chunks: &[Chunk]) -> wasmtime::Result<Result<u64>> {
    let mut done = 0u64;
    for chunk in chunks {
        let len = match chunk {
            Chunk::Guest(_, len) => *len as usize,
            Chunk::Owned(v) => v.len(),
        };
        let mut at = 0usize;
        while at < len {
            let wrote = with_memory(c, |g, _| {
                let bytes = match chunk {
                    Chunk::Guest(b, len) => g.bytes(*b, *len)?,
                    Chunk::Owned(v) => &v[..],
                };
                match p.end.write(&bytes[at..]) {
                    Ok(n) => Ok(Some(n)),
                    Err(e) if e.errno == Errno::Again => Ok(None),
                    Err(e) => Err(e),
                }
                .map_err(Into::into)
            });
            match wrote {
                Ok(Some(n)) => {
                    at += n;
                    done += n as u64;
                }
                Ok(None) if p.nonblock => return Ok(if done > 0 { Ok(done) } else { Err(WasiErrno::AGAIN) }),
                Ok(None) => {
                    let (end, want) = (p.end.clone(), len - at);
                    if let Woken::Signal = wait(c, move |cx| end.poll_writable(want, cx)).await
                        && let Err(e) = interrupted(c).await?
                    {
                        return Ok(if done > 0 { Ok(done) } else { Err(e) });
                    }
                }
                Err(e) if e == WasiErrno::PIPE => {
                    // No reader: SIGPIPE to the writer (its default ends it, on the way out).
                    c.data().process.raise(signal::SIGPIPE);
                    return Ok(if done > 0 { Ok(done) } else { Err(e) });
                }
                Err(e) => return Ok(if done > 0 { Ok(done) } else { Err(e) }),
            }
        }
    }
    Ok(Ok(done))
}

/// Opens the FIFO at `path` (from directory `dirfd`): for writing if the rights ask only for
/// that, else for reading. As POSIX has it, the open waits until the other side is open too,
/// except a non-blocking one: for reading it returns at once, for writing it is `ENXIO` while
/// nobody reads. The descriptor is a pipe's end from then on.
pub async fn open_fifo(
    c: &mut Caller<'_, Ctx>,
    dirfd: u32,
    path: &[u8],
    rights: u64,
    fdflags: u16,
) -> wasmtime::Result<Result<u32>> {
    use crate::abi::{fdflags, rights as r};
    let side = if rights & r::FD_WRITE != 0 && rights & r::FD_READ == 0 {
        Side::Write
    } else {
        Side::Read
    };
    let nonblock = fdflags & fdflags::NONBLOCK != 0;
    let opened = with_memory(c, |_, x| {
        let dir = crate::calls::dir(x, dirfd)?;
        Ok(x.process.open_fifo_at(vino_kernel::At::Beneath(dir), path, side)?)
    });
    let end = match opened {
        Ok(end) => Arc::new(end),
        Err(e) => return Ok(Err(e)),
    };
    let seen = end.peer_opens();
    if !end.peer_open() {
        if nonblock && side == Side::Write {
            return Ok(Err(WasiErrno::NXIO));
        }
        if !nonblock {
            loop {
                let waiting = end.clone();
                match wait(c, move |cx| waiting.poll_peer(seen, cx)).await {
                    Woken::Ready => break,
                    Woken::Signal => {
                        if let Err(e) = interrupted(c).await? {
                            return Ok(Err(e));
                        }
                    }
                }
            }
        }
    }
    let entry = Entry::Pipe(PipeFd { end, nonblock });
    Ok(with_memory(c, |_, x| x.fds.insert(entry)))
}

/// A call's WASI errno (0 for success).
pub(crate) fn errno(r: Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => i32::from(e.0),
    }
}
