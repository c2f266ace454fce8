//! Sockets of VINO processes: TCP and UDP over the kernel's network stack (`vino-net`, through
//! the kernel's socket calls). WASI preview 1 has calls for a socket once it exists
//! (`sock_accept`, `sock_recv`, `sock_send`, `sock_shutdown`, and `fd_read`/`fd_write`/`poll_oneoff`
//! on it) and sockets the runner opened (`vino run --listen`, `--connect`); the `vino` imports
//! add what it lacks: `socket`, `bind`, `listen`, `connect`, `getsockname`, `getpeername`,
//! `sendto`, `recvfrom` (the SDK's <sys/socket.h> declares them the POSIX way).
//!
//! A call that would block gives its worker up as a pipe's does, and a handled signal ends it
//! with `EINTR` (or restarts it, for SA_RESTART). Addresses are IPv4 `sockaddr_in` as wasi-libc
//! lays it out (family 1 at 0, port at 2 and address at 4, both in network order; 16 bytes).

use crate::Ctx;
use crate::abi::{WasiErrno, fdflags, filetype};
use crate::calls::with_memory;
use crate::fds::Entry;
use crate::guest::{Guest, Result};
use crate::pipes::{Woken, errno, interrupted, wait};
use crate::signals;
use parking_lot::Mutex;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::task::{Context, Poll};
use vino_kernel::{Errno, Process, SocketId, SocketInterest, SocketWait};
use wasmtime::{Caller, Linker};

/// wasi-libc's `AF_INET`.
pub const AF_INET: u32 = 1;
/// wasi-libc's `AF_INET6` (not supported: the stack is IPv4).
pub const AF_INET6: u32 = 2;
/// wasi-libc's `SOCK_NONBLOCK` and `SOCK_CLOEXEC`, in `socket`'s type (nothing is exec'd:
/// the second changes nothing).
pub const SOCK_NONBLOCK: u32 = 0x4000;
pub const SOCK_CLOEXEC: u32 = 0x2000;
/// Bytes of a `sockaddr_in`.
pub const SOCKADDR_IN_SIZE: u32 = 16;
/// `__wasi_riflags_t` and `__wasi_roflags_t`.
const RECV_PEEK: u32 = 1;
const RECV_WAITALL: u32 = 2;
/// `__wasi_sdflags_t`.
const SHUT_RD: u32 = 1;
const SHUT_WR: u32 = 2;
/// How long `vino run --connect` waits for its connection.
pub const CONNECT_AT_START: std::time::Duration = std::time::Duration::from_secs(10);

/// A socket as the descriptor table holds it: shared by the descriptors `dup`ed from one
/// (`fd_renumber`), closed in the kernel with the last of them. Not inherited by children:
/// the kernel's sockets belong to one process.
#[derive(Clone)]
pub struct SocketFd {
    pub sock: Arc<Socket>,
    /// `O_NONBLOCK`: `EAGAIN` (or `EINPROGRESS` for a connect) instead of waiting.
    pub nonblock: bool,
}

/// TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// Where a socket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Made by `socket`, nothing in the kernel yet.
    Fresh,
    /// Bound to a port (UDP: ready to send and receive).
    Bound,
    Listening,
    /// A connect was started and may not have finished.
    Connecting,
    Connected,
    /// A connect failed or the socket was shut: nothing more it can do.
    Dead,
}

struct State {
    role: Role,
    id: Option<SocketId>,
    /// UDP: the peer `connect` set (sends without an address go there, only it is received).
    peer: Option<SocketAddrV4>,
    /// `shutdown(SHUT_RD)`: reads return 0 from now on.
    read_shut: bool,
    /// `TCP_NODELAY` asked for before the kernel socket was made: set on it when it is.
    nodelay: bool,
}

pub struct Socket {
    process: Arc<Process>,
    pub proto: Proto,
    state: Mutex<State>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        if let Some(id) = self.state.get_mut().id {
            // Gone already if the process exited (its sockets were closed then).
            let _ = self.process.socket_close(id);
        }
    }
}

impl Socket {
    fn new(process: Arc<Process>, proto: Proto, role: Role, id: Option<SocketId>) -> Arc<Socket> {
        Arc::new(Socket {
            process,
            proto,
            state: Mutex::new(State {
                role,
                id,
                peer: None,
                read_shut: false,
                nodelay: false,
            }),
        })
    }

    /// WASI's file type of it.
    pub fn filetype(&self) -> u8 {
        match self.proto {
            Proto::Tcp => filetype::SOCKET_STREAM,
            Proto::Udp => filetype::SOCKET_DGRAM,
        }
    }

    fn id(&self) -> Result<SocketId> {
        self.state.lock().id.ok_or(WasiErrno::NOTCONN)
    }

    /// The kernel socket of a connection (or a bound UDP socket).
    pub(crate) fn connection(&self) -> Result<SocketId> {
        let st = self.state.lock();
        match (self.proto, st.role, st.id) {
            (Proto::Tcp, Role::Connected | Role::Connecting, Some(id)) => Ok(id),
            (Proto::Udp, Role::Bound, Some(id)) => Ok(id),
            _ => Err(WasiErrno::NOTCONN),
        }
    }

    /// Whether a call for `interest` would proceed now (registering `cx` if not). A socket
    /// with nothing to wait for is ready: the call itself says what is wrong.
    pub fn poll(&self, interest: SocketInterest, cx: &Context<'_>) -> Poll<()> {
        let Some(id) = self.state.lock().id else {
            return Poll::Ready(());
        };
        self.process.socket_poll(id, interest, cx).map(drop)
    }

    /// Binds to `port` (0: an ephemeral one) if not bound yet.
    fn bind(&self, port: u16) -> Result<()> {
        let mut st = self.state.lock();
        if st.role != Role::Fresh {
            return Err(WasiErrno::INVAL);
        }
        let id = match self.proto {
            Proto::Tcp => self.process.tcp_bind(port)?,
            Proto::Udp => self.process.udp_bind(port)?,
        };
        st.id = Some(id);
        st.role = Role::Bound;
        if st.nodelay {
            self.process.socket_set_nodelay(id, true)?;
        }
        Ok(())
    }

    /// `TCP_NODELAY`: on the kernel socket, or kept until there is one.
    fn set_nodelay(&self, on: bool) -> Result<()> {
        if self.proto != Proto::Tcp {
            return Err(WasiErrno::NOPROTOOPT);
        }
        let mut st = self.state.lock();
        st.nodelay = on;
        match st.id {
            Some(id) => Ok(self.process.socket_set_nodelay(id, on)?),
            None => Ok(()),
        }
    }

    fn bind_any(&self) -> Result<()> {
        if self.state.lock().role == Role::Fresh {
            self.bind(0)?;
        }
        Ok(())
    }

    /// The end of a connect: made, or the error it failed with (the socket is dead then).
    fn finish_connect(&self) -> Result<bool> {
        let id = self.id()?;
        match self.process.socket_connected(id) {
            Ok(true) => {
                self.state.lock().role = Role::Connected;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                let mut st = self.state.lock();
                st.role = Role::Dead;
                if let Some(id) = st.id.take() {
                    let _ = self.process.socket_close(id);
                }
                Err(e.into())
            }
        }
    }
}

/// The socket open as `fd`, if it is one.
pub fn socket_of(c: &Caller<'_, Ctx>, fd: u32) -> Option<SocketFd> {
    match c.data().fds.get(fd) {
        Ok(Entry::Socket(s)) => Some(s.clone()),
        _ => None,
    }
}

pub(crate) fn socket(x: &Ctx, fd: u32) -> Result<SocketFd> {
    match x.fds.get(fd)? {
        Entry::Socket(s) => Ok(s.clone()),
        _ => Err(WasiErrno::NOTSOCK),
    }
}

/// Reads a `sockaddr_in`.
fn read_addr(g: &Guest<'_>, addr: u32, len: u32) -> Result<SocketAddrV4> {
    if len < 8 {
        return Err(WasiErrno::INVAL);
    }
    let b = g.bytes(addr, 8)?;
    match u32::from(u16::from_le_bytes([b[0], b[1]])) {
        AF_INET => {}
        AF_INET6 => return Err(WasiErrno::AFNOSUPPORT),
        _ => return Err(WasiErrno::INVAL),
    }
    let port = u16::from_be_bytes([b[2], b[3]]);
    Ok(SocketAddrV4::new(Ipv4Addr::new(b[4], b[5], b[6], b[7]), port))
}

/// Writes a `sockaddr_in` into a buffer of `*len_ptr` bytes (truncated to fit, as POSIX has
/// it), and its full size into `*len_ptr`.
fn write_addr(g: &mut Guest<'_>, a: SocketAddrV4, addr: u32, len_ptr: u32) -> Result<()> {
    let room = g.u32(len_ptr)?.min(SOCKADDR_IN_SIZE);
    let mut b = [0u8; SOCKADDR_IN_SIZE as usize];
    b[..2].copy_from_slice(&(AF_INET as u16).to_le_bytes());
    b[2..4].copy_from_slice(&a.port().to_be_bytes());
    b[4..8].copy_from_slice(&a.ip().octets());
    g.put(addr, &b[..room as usize])?;
    g.put_u32(len_ptr, SOCKADDR_IN_SIZE)
}

/// A bind's address must be one of this host's: any, the loopback network, or VINO's address
/// on the host link. (A socket is bound to a port of every address.)
fn local_port(process: &vino_kernel::Process, a: SocketAddrV4) -> Result<u16> {
    if a.ip().is_unspecified() || a.ip().is_loopback() || process.kernel().is_local_address(*a.ip()) {
        Ok(a.port())
    } else {
        Err(WasiErrno::ADDRNOTAVAIL)
    }
}

/// Waits until `sock` may proceed for `interest`; `Err` if a signal ended the wait.
async fn ready(c: &mut Caller<'_, Ctx>, sock: &Arc<Socket>, interest: SocketInterest) -> wasmtime::Result<Result<()>> {
    let s = sock.clone();
    match wait(c, move |cx| s.poll(interest, cx)).await {
        Woken::Ready => Ok(Ok(())),
        Woken::Signal => interrupted(c).await,
    }
}

// ---- the preview 1 calls -----------------------------------------------------------------------

/// `sock_accept`: a connection that arrived at a listening socket, as a new descriptor.
pub async fn accept(c: &mut Caller<'_, Ctx>, s: SocketFd, flags: u32, out: u32) -> wasmtime::Result<i32> {
    let listener = {
        let st = s.sock.state.lock();
        match (st.role, st.id) {
            (Role::Listening, Some(id)) => Ok(id),
            _ => Err(WasiErrno::INVAL),
        }
    };
    let result = match listener {
        Ok(id) => loop {
            match s.sock.process.tcp_accept(id, SocketWait::No) {
                Ok((conn, _peer)) => {
                    let sock = Socket::new(s.sock.process.clone(), Proto::Tcp, Role::Connected, Some(conn));
                    let nonblock = flags & u32::from(fdflags::NONBLOCK) != 0;
                    let entry = Entry::Socket(SocketFd { sock, nonblock });
                    break with_memory(c, |g, x| {
                        let fd = x.fds.insert(entry)?;
                        g.put_u32(out, fd)
                    });
                }
                Err(e) if e.errno == Errno::Again && !s.nonblock => {
                    if let Err(e) = ready(c, &s.sock, SocketInterest::Read).await? {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e.into()),
            }
        },
        Err(e) => Err(e),
    };
    signals::after(c, errno(result)).await
}

/// Receives into the buffers: a connection's bytes (what has come, at least one byte, or all
/// of them with WAITALL; 0 at its end), or one datagram (and its sender, for `recvfrom`).
async fn receive(
    c: &mut Caller<'_, Ctx>,
    s: &SocketFd,
    bufs: &[(u32, u32)],
    flags: u32,
) -> wasmtime::Result<Result<(u64, Option<SocketAddrV4>)>> {
    if flags & RECV_PEEK != 0 {
        return Ok(Err(WasiErrno::NOTSUP));
    }
    // A UDP socket receives once bound: to an ephemeral port, if nothing bound it yet.
    if s.sock.proto == Proto::Udp
        && let Err(e) = s.sock.bind_any()
    {
        return Ok(Err(e));
    }
    if s.sock.state.lock().read_shut {
        return Ok(Ok((0, None)));
    }
    let id = match s.sock.connection() {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    let want: u64 = bufs.iter().map(|&(_, len)| u64::from(len)).sum();
    let mut done = 0u64;
    let (mut buf, mut at) = (0usize, 0u32);
    loop {
        // The next stretch of the current buffer.
        while buf < bufs.len() && at == bufs[buf].1 {
            (buf, at) = (buf + 1, 0);
        }
        if buf == bufs.len() {
            return Ok(Ok((done, None)));
        }
        let (ptr, len) = bufs[buf];
        let udp = s.sock.proto == Proto::Udp;
        let peer = s.sock.state.lock().peer;
        let got = with_memory(c, |g, x| {
            let into = g.bytes_mut(ptr + at, len - at)?;
            if udp {
                let (n, from) = x.process.socket_recv_from(id, into, SocketWait::No)?;
                Ok((n, Some(from)))
            } else {
                Ok((x.process.socket_recv(id, into, SocketWait::No)?, None))
            }
        });
        match got {
            // A connected UDP socket hears only its peer.
            Ok((_, Some(from))) if peer.is_some_and(|p| p != from) => continue,
            Ok((n, from)) if udp => return Ok(Ok((n as u64, from))),
            Ok((0, _)) => return Ok(Ok((done, None))),
            Ok((n, _)) => {
                done += n as u64;
                at += n as u32;
                if done == want || flags & RECV_WAITALL == 0 {
                    // What has come: stop once nothing more is queued.
                    if done == want {
                        return Ok(Ok((done, None)));
                    }
                    continue;
                }
            }
            Err(WasiErrno::AGAIN) if done > 0 && flags & RECV_WAITALL == 0 => return Ok(Ok((done, None))),
            Err(WasiErrno::AGAIN) if s.nonblock => {
                return Ok(if done > 0 {
                    Ok((done, None))
                } else {
                    Err(WasiErrno::AGAIN)
                });
            }
            Err(WasiErrno::AGAIN) => {
                if let Err(e) = ready(c, &s.sock, SocketInterest::Read).await? {
                    return Ok(if done > 0 { Ok((done, None)) } else { Err(e) });
                }
            }
            Err(e) => return Ok(if done > 0 { Ok((done, None)) } else { Err(e) }),
        }
    }
}

/// Sends the buffers: on a connection all of them, waiting for room (on a non-blocking one,
/// what fits); on UDP one datagram, to `to` or the connected peer.
async fn transmit(
    c: &mut Caller<'_, Ctx>,
    s: &SocketFd,
    bufs: &[(u32, u32)],
    to: Option<SocketAddrV4>,
) -> wasmtime::Result<Result<u64>> {
    if s.sock.proto == Proto::Udp {
        if let Err(e) = s.sock.bind_any() {
            return Ok(Err(e));
        }
        let Some(to) = to.or(s.sock.state.lock().peer) else {
            return Ok(Err(WasiErrno::DESTADDRREQ));
        };
        let id = match s.sock.id() {
            Ok(id) => id,
            Err(e) => return Ok(Err(e)),
        };
        let datagram = match with_memory(c, |g, _| gather(g, bufs)) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        loop {
            match s.sock.process.socket_send_to(id, &datagram, to, SocketWait::No) {
                Ok(()) => return Ok(Ok(datagram.len() as u64)),
                Err(e) if e.errno == Errno::Again && !s.nonblock => {
                    if let Err(e) = ready(c, &s.sock, SocketInterest::Write).await? {
                        return Ok(Err(e));
                    }
                }
                Err(e) => return Ok(Err(e.into())),
            }
        }
    }
    let id = match s.sock.connection() {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    let mut done = 0u64;
    for &(ptr, len) in bufs {
        let mut at = 0u32;
        while at < len {
            let sent = with_memory(c, |g, x| {
                Ok(x.process
                    .socket_send(id, g.bytes(ptr + at, len - at)?, SocketWait::No)?)
            });
            match sent {
                Ok(n) => {
                    at += n as u32;
                    done += n as u64;
                }
                Err(WasiErrno::AGAIN) if s.nonblock => {
                    return Ok(if done > 0 { Ok(done) } else { Err(WasiErrno::AGAIN) });
                }
                Err(WasiErrno::AGAIN) => {
                    if let Err(e) = ready(c, &s.sock, SocketInterest::Write).await? {
                        return Ok(if done > 0 { Ok(done) } else { Err(e) });
                    }
                }
                Err(e) => {
                    if e == WasiErrno::PIPE {
                        c.data().process.raise(vino_kernel::signal::SIGPIPE);
                    }
                    return Ok(if done > 0 { Ok(done) } else { Err(e) });
                }
            }
        }
    }
    Ok(Ok(done))
}

fn gather(g: &Guest<'_>, bufs: &[(u32, u32)]) -> Result<Vec<u8>> {
    let mut all = Vec::new();
    for &(b, len) in bufs {
        all.extend_from_slice(g.bytes(b, len)?);
    }
    Ok(all)
}

/// `fd_read` on a socket: `recv` with no flags.
pub async fn read(c: &mut Caller<'_, Ctx>, s: SocketFd, iovs: u32, n: u32, out: u32) -> wasmtime::Result<i32> {
    let r = match with_memory(c, |g, _| g.iovecs(iovs, n)) {
        Ok(bufs) => receive(c, &s, &bufs, 0).await?,
        Err(e) => Err(e),
    };
    let r = r.and_then(|(got, _)| with_memory(c, |g, _| g.put_u32(out, got as u32)));
    signals::after(c, errno(r)).await
}

/// `fd_write` on a socket: `send` with no flags.
pub async fn write(c: &mut Caller<'_, Ctx>, s: SocketFd, iovs: u32, n: u32, out: u32) -> wasmtime::Result<i32> {
    let r = match with_memory(c, |g, _| g.iovecs(iovs, n)) {
        Ok(bufs) => transmit(c, &s, &bufs, None).await?,
        Err(e) => Err(e),
    };
    let r = r.and_then(|sent| with_memory(c, |g, _| g.put_u32(out, sent as u32)));
    signals::after(c, errno(r)).await
}

/// `sock_shutdown`: no more sending (the peer reads to the end), no more receiving, or both.
fn shutdown(x: &mut Ctx, fd: u32, how: u32) -> Result<()> {
    let s = socket(x, fd)?;
    if how == 0 || how & !(SHUT_RD | SHUT_WR) != 0 {
        return Err(WasiErrno::INVAL);
    }
    let id = s.sock.connection()?;
    if how & SHUT_WR != 0 && s.sock.proto == Proto::Tcp {
        s.sock.process.socket_shutdown_write(id)?;
    }
    if how & SHUT_RD != 0 {
        s.sock.state.lock().read_shut = true;
    }
    Ok(())
}

/// Links the preview 1 socket calls.
pub fn define_preview1(l: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    type C<'a> = Caller<'a, Ctx>;
    let m = crate::abi::MODULE;
    l.func_wrap_async(m, "sock_accept", |mut c: C, (fd, flags, out): (u32, u32, u32)| {
        Box::new(async move {
            match with_memory(&mut c, |_, x| socket(x, fd)) {
                Ok(s) => accept(&mut c, s, flags, out).await,
                Err(e) => Ok(i32::from(e.0)),
            }
        })
    })?;
    l.func_wrap_async(
        m,
        "sock_recv",
        |mut c: C, (fd, iovs, n, flags, out_len, out_flags): (u32, u32, u32, u32, u32, u32)| {
            Box::new(async move {
                let r = match with_memory(&mut c, |g, x| Ok((socket(x, fd)?, g.iovecs(iovs, n)?))) {
                    Ok((s, bufs)) => receive(&mut c, &s, &bufs, flags).await?,
                    Err(e) => Err(e),
                };
                let r = r.and_then(|(got, _)| {
                    with_memory(&mut c, |g, _| {
                        g.put_u32(out_len, got as u32)?;
                        g.put_u16(out_flags, 0)
                    })
                });
                signals::after(&mut c, errno(r)).await
            })
        },
    )?;
    l.func_wrap_async(
        m,
        "sock_send",
        |mut c: C, (fd, iovs, n, _flags, out): (u32, u32, u32, u32, u32)| {
            Box::new(async move {
                let r = match with_memory(&mut c, |g, x| Ok((socket(x, fd)?, g.iovecs(iovs, n)?))) {
                    Ok((s, bufs)) => transmit(&mut c, &s, &bufs, None).await?,
                    Err(e) => Err(e),
                };
                let r = r.and_then(|sent| with_memory(&mut c, |g, _| g.put_u32(out, sent as u32)));
                signals::after(&mut c, errno(r)).await
            })
        },
    )?;
    l.func_wrap(m, "sock_shutdown", |mut c: C, fd: u32, how: u32| {
        crate::calls::sys(&mut c, |_, x| shutdown(x, fd, how))
    })?;
    Ok(())
}

// ---- the `vino` imports ------------------------------------------------------------------------

/// Links `socket`, `socket_push`, `socket_pop`, `bind`, `listen`, `connect`, `getsockname`,
/// `getpeername`, `sendto` and `recvfrom` in the `vino` module: each returns 0 or a result, or a negative WASI errno.
pub fn define_vino(l: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    use crate::calls::sys_value;
    type C<'a> = Caller<'a, Ctx>;
    let m = crate::vino::MODULE;
    l.func_wrap(m, "socket", |mut c: C, domain: u32, kind: u32| {
        sys_value(&mut c, |_, x| {
            if domain != AF_INET {
                return Err(WasiErrno::AFNOSUPPORT);
            }
            let proto = match (kind & !(SOCK_NONBLOCK | SOCK_CLOEXEC)) as u8 {
                filetype::SOCKET_STREAM => Proto::Tcp,
                filetype::SOCKET_DGRAM => Proto::Udp,
                _ => return Err(WasiErrno::PROTONOSUPPORT),
            };
            let sock = Socket::new(x.process.clone(), proto, Role::Fresh, None);
            let nonblock = kind & SOCK_NONBLOCK != 0;
            Ok(x.fds.insert(Entry::Socket(SocketFd { sock, nonblock }))? as i32)
        })
    })?;
    // Stream layers (a stream graft on the connection's bytes): push returns the new layer's
    // depth, its control calls go to `net.stream/<fd>/<depth>`.
    l.func_wrap(m, "socket_push", |mut c: C, fd: u32, wasm: u32, wasm_len: u32| {
        sys_value(&mut c, |g, x| {
            let id = socket(x, fd)?.sock.connection()?;
            x.process.socket_push(id, g.bytes(wasm, wasm_len)?)?;
            Ok(x.process.socket_layer_count(id) as i32 - 1)
        })
    })?;
    // `setsockopt(IPPROTO_TCP, TCP_NODELAY)`.
    l.func_wrap(m, "socket_nodelay", |mut c: C, fd: u32, on: u32| {
        sys_value(&mut c, |_, x| {
            socket(x, fd)?.sock.set_nodelay(on != 0)?;
            Ok(0)
        })
    })?;
    l.func_wrap(m, "socket_pop", |mut c: C, fd: u32| {
        sys_value(&mut c, |_, x| {
            let id = socket(x, fd)?.sock.connection()?;
            x.process.socket_pop(id)?;
            Ok(0)
        })
    })?;
    l.func_wrap(m, "bind", |mut c: C, fd: u32, addr: u32, len: u32| {
        sys_value(&mut c, |g, x| {
            let s = socket(x, fd)?;
            s.sock.bind(local_port(&x.process, read_addr(g, addr, len)?)?)?;
            Ok(0)
        })
    })?;
    l.func_wrap(m, "listen", |mut c: C, fd: u32, backlog: i32| {
        sys_value(&mut c, |_, x| {
            let s = socket(x, fd)?;
            if s.sock.proto != Proto::Tcp {
                return Err(WasiErrno::NOTSUP);
            }
            s.sock.bind_any()?;
            let id = s.sock.id()?;
            let mut st = s.sock.state.lock();
            match st.role {
                Role::Bound | Role::Listening => {}
                _ => return Err(WasiErrno::INVAL),
            }
            // POSIX's backlog of 0 or less still lets a connection wait.
            s.sock.process.socket_listen(id, backlog.max(1) as usize)?;
            st.role = Role::Listening;
            Ok(0)
        })
    })?;
    l.func_wrap_async(m, "connect", |mut c: C, (fd, addr, len): (u32, u32, u32)| {
        Box::new(async move {
            let r = match with_memory(&mut c, |g, x| Ok((socket(x, fd)?, read_addr(g, addr, len)?))) {
                Ok((s, to)) => connect(&mut c, &s, to).await?,
                Err(e) => Err(e),
            };
            signals::after(&mut c, errno(r)).await.map(|r| -r)
        })
    })?;
    l.func_wrap(m, "getsockname", |mut c: C, fd: u32, addr: u32, len: u32| {
        sys_value(&mut c, |g, x| {
            let s = socket(x, fd)?;
            let a = match s.sock.state.lock().id {
                Some(id) => s.sock.process.socket_local_addr(id)?,
                None => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            };
            write_addr(g, a, addr, len)?;
            Ok(0)
        })
    })?;
    l.func_wrap(m, "getpeername", |mut c: C, fd: u32, addr: u32, len: u32| {
        sys_value(&mut c, |g, x| {
            let s = socket(x, fd)?;
            let a = match s.sock.proto {
                Proto::Udp => s.sock.state.lock().peer.ok_or(WasiErrno::NOTCONN)?,
                Proto::Tcp => s.sock.process.socket_peer_addr(s.sock.connection()?)?,
            };
            write_addr(g, a, addr, len)?;
            Ok(0)
        })
    })?;
    l.func_wrap_async(
        m,
        "sendto",
        |mut c: C, (fd, buf, len, _flags, addr, addr_len): (u32, u32, u32, u32, u32, u32)| {
            Box::new(async move {
                let args = with_memory(&mut c, |g, x| {
                    let to = if addr == 0 {
                        None
                    } else {
                        Some(read_addr(g, addr, addr_len)?)
                    };
                    Ok((socket(x, fd)?, to))
                });
                let r = match args {
                    Ok((s, to)) => transmit(&mut c, &s, &[(buf, len)], to).await?,
                    Err(e) => Err(e),
                };
                value(&mut c, r.map(|n| n as i32)).await
            })
        },
    )?;
    l.func_wrap_async(
        m,
        "recvfrom",
        |mut c: C, (fd, buf, len, flags, addr, addr_len): (u32, u32, u32, u32, u32, u32)| {
            Box::new(async move {
                let r = match with_memory(&mut c, |_, x| socket(x, fd)) {
                    Ok(s) => receive(&mut c, &s, &[(buf, len)], flags).await?,
                    Err(e) => Err(e),
                };
                let r = r.and_then(|(got, from)| {
                    if addr != 0 {
                        let from = from.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
                        with_memory(&mut c, |g, _| write_addr(g, from, addr, addr_len))?;
                    }
                    Ok(got as i32)
                });
                value(&mut c, r).await
            })
        },
    )?;
    Ok(())
}

/// A `vino` call's value, or its negative errno, after any signal is delivered.
async fn value(c: &mut Caller<'_, Ctx>, r: Result<i32>) -> wasmtime::Result<i32> {
    let v = match r {
        Ok(v) => v,
        Err(e) => -i32::from(e.0),
    };
    signals::after(c, v).await
}

/// Connects (TCP: waits for the connection unless the socket is non-blocking, which answers
/// `EINPROGRESS`; UDP: sets the peer).
async fn connect(c: &mut Caller<'_, Ctx>, s: &SocketFd, to: SocketAddrV4) -> wasmtime::Result<Result<()>> {
    if s.sock.proto == Proto::Udp {
        if let Err(e) = s.sock.bind_any() {
            return Ok(Err(e));
        }
        s.sock.state.lock().peer = Some(to);
        return Ok(Ok(()));
    }
    {
        let mut st = s.sock.state.lock();
        match st.role {
            // Not bound: its port is an ephemeral one shared with connections to other peers.
            Role::Fresh => match s.sock.process.tcp_connect(to, SocketWait::No) {
                Ok(id) => {
                    st.id = Some(id);
                    if st.nodelay
                        && let Err(e) = s.sock.process.socket_set_nodelay(id, true)
                    {
                        return Ok(Err(e.into()));
                    }
                }
                Err(e) => return Ok(Err(e.into())),
            },
            Role::Bound => {
                let id = st.id.expect("a bound socket has its id");
                if let Err(e) = s.sock.process.socket_connect(id, to, SocketWait::No) {
                    // The kernel closed it with the failed connect.
                    st.id = None;
                    st.role = Role::Dead;
                    return Ok(Err(e.into()));
                }
            }
            Role::Connecting => return Ok(Err(WasiErrno::ALREADY)),
            Role::Connected => return Ok(Err(WasiErrno::ISCONN)),
            _ => return Ok(Err(WasiErrno::INVAL)),
        }
        st.role = Role::Connecting;
    }
    if s.nonblock {
        return Ok(match s.sock.finish_connect() {
            Ok(true) => Ok(()),
            Ok(false) => Err(WasiErrno::INPROGRESS),
            Err(e) => Err(e),
        });
    }
    loop {
        match s.sock.finish_connect() {
            Ok(true) => return Ok(Ok(())),
            Ok(false) => {
                if let Err(e) = ready(c, &s.sock, SocketInterest::Write).await? {
                    return Ok(Err(e));
                }
            }
            Err(e) => return Ok(Err(e)),
        }
    }
}

// ---- sockets the runner opens ------------------------------------------------------------------

/// A socket `vino run` opens for the program before it starts, after its directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketSpec {
    /// `--listen tcp:PORT` or `udp:PORT`: a listening TCP socket or a bound UDP one.
    Listen { proto: Proto, port: u16 },
    /// `--connect HOST:PORT`: a TCP connection (HOST an IPv4 address or `localhost`).
    Connect(SocketAddrV4),
}

impl std::fmt::Display for SocketSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketSpec::Listen {
                proto: Proto::Tcp,
                port,
            } => write!(f, "tcp:{port}"),
            SocketSpec::Listen {
                proto: Proto::Udp,
                port,
            } => write!(f, "udp:{port}"),
            SocketSpec::Connect(to) => write!(f, "{to}"),
        }
    }
}

impl SocketSpec {
    /// Parses `tcp:PORT`/`udp:PORT` (`listen`) or `HOST:PORT`.
    pub fn parse(spec: &str, listen: bool) -> std::result::Result<SocketSpec, String> {
        let port = |p: &str| p.parse::<u16>().map_err(|_| format!("{p:?} is not a port"));
        if listen {
            let (proto, p) = match spec.split_once(':') {
                Some(("tcp", p)) => (Proto::Tcp, p),
                Some(("udp", p)) => (Proto::Udp, p),
                None => (Proto::Tcp, spec),
                Some(_) => return Err(format!("{spec:?}: expected tcp:PORT or udp:PORT")),
            };
            return Ok(SocketSpec::Listen { proto, port: port(p)? });
        }
        let (host, p) = spec
            .rsplit_once(':')
            .ok_or_else(|| format!("{spec:?}: expected HOST:PORT"))?;
        let ip = match host {
            "localhost" => Ipv4Addr::LOCALHOST,
            h => h.parse().map_err(|_| format!("{h:?} is not an IPv4 address"))?,
        };
        Ok(SocketSpec::Connect(SocketAddrV4::new(ip, port(p)?)))
    }

    /// Opens it for `process`.
    pub fn open(&self, process: &Arc<Process>) -> vino_kernel::SysResult<SocketFd> {
        let sock = match *self {
            SocketSpec::Listen {
                proto: Proto::Tcp,
                port,
            } => {
                let id = process.tcp_listen(port, 128)?;
                Socket::new(process.clone(), Proto::Tcp, Role::Listening, Some(id))
            }
            SocketSpec::Listen {
                proto: Proto::Udp,
                port,
            } => {
                let id = process.udp_bind(port)?;
                Socket::new(process.clone(), Proto::Udp, Role::Bound, Some(id))
            }
            SocketSpec::Connect(to) => {
                let id = process.tcp_connect(to, SocketWait::For(CONNECT_AT_START))?;
                Socket::new(process.clone(), Proto::Tcp, Role::Connected, Some(id))
            }
        };
        Ok(SocketFd { sock, nonblock: false })
    }
}
