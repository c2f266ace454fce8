//! Servers in the kernel (Small 1998, 3.5 and 4.2): a graft bound to a port handles each of
//! its connections inside the kernel, woken by the connection's bytes.
//!
//! [`Process::net_serve`] listens on a port as the process (so the port rules hold: below 1024
//! only root's, one user's while bound) and binds the graft at `event.net.packet/<port>` in the
//! process's namespace. A thread of the process (its CPU the process's, counted against its
//! user's threads) accepts connections and reads them; each call of the graft gets one
//! connection's new bytes in its argument area and answers with actions: bytes to send, a range
//! of a file for the kernel to send from the page cache (as sendfile does), close. The file is
//! read after the call commits, by the kernel, as the owner: a cache miss never waits for the
//! device inside the graft's transaction, and the owner's own permissions decide what it may
//! serve. The graft keeps what it knows of each connection in its own memory, by connection id.
//!
//! What a server may hold is bounded: [`SERVE_CONNS_MAX`] connections (each socket also charged
//! to the owner's account, `ENOBUFS` at its limit); one call's output (32 KiB of bytes, 64
//! actions) and one 64 KiB file chunk per connection at a time, no new input read from a
//! connection until its output is sent; and [`CONN_CPU_SHARE`] of a second of graft time per
//! connection per second, past which the connection is closed. A call that fails (a trap, its
//! budget, an answer that is not one) closes its connection, as the default does with nothing
//! bound, and the graft hears no [`NetEvent::Close`] for it; a graft that keeps failing is unloaded and its owner told, and the server then closes
//! each connection it accepts.

use crate::error::{Errno, SysError, SysResult};
use crate::perm::READ;
use crate::{OpenFlags, Process};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};
use vino_graft::{Access, CallError, Callables, GraftPoint, GraftSlot, Invalid};
use vino_net::{Interest, SocketId, Wait};

/// Bytes of a server graft's argument area (`VINO_NET_ARGS`).
pub const SERVE_ARGS: usize = 64 * 1024;
/// The connection's new bytes: at the start of the area, at most this many per call.
pub const SERVE_IN: usize = 16 * 1024;
/// Where the graft writes the bytes its actions send, and how many it may.
pub const SERVE_OUT_AT: usize = 16 * 1024;
pub const SERVE_OUT: usize = 32 * 1024;
/// Where the graft writes its actions, 32 bytes each, and how many it may.
pub const SERVE_ACTIONS_AT: usize = 48 * 1024;
pub const SERVE_ACTIONS: usize = 64;
/// A result with this bit asks for another call (with no new bytes) once its actions are done:
/// for work left over (pipelined requests past one call's room).
pub const SERVE_AGAIN: i32 = 1 << 16;
/// Most connections one server holds at once; more wait in the listener's backlog.
pub const SERVE_CONNS_MAX: usize = 1024;
/// Graft time one connection may take per second before it is closed.
pub const CONN_CPU_SHARE: Duration = Duration::from_millis(200);
/// Bytes of a file sent at a time.
const FILE_CHUNK: usize = 64 * 1024;
/// Longest path a file action may name.
const PATH_MAX: usize = 1024;
/// Steps one connection may take in one round before the others get theirs.
const STEPS_PER_ROUND: usize = 8;
/// Connections sending file bytes at once; the others' file responses wait their turn. A file
/// response runs nearly to completion, as an ordinary server's blocking writes do: eight
/// interleaved would keep eight sockets' windows of segments queued at the link at once.
const FILE_SENDERS: usize = 2;
/// Longest turn while others wait: a client that reads slowly, or not at all, delays the
/// others' responses by at most this much per turn it gets.
const TURN: Duration = Duration::from_millis(50);

/// Whose file responses may send now ([`FILE_SENDERS`] at a time, [`TURN`] each while others
/// wait, first come first served).
#[derive(Default)]
struct Turns {
    sending: Vec<(u32, Instant)>,
    waiting: VecDeque<u32>,
}

impl Turns {
    /// Whether connection `id`, which has file bytes to send, may send them now.
    fn may_send(&mut self, id: u32) -> bool {
        if let Some(at) = self.sending.iter().position(|s| s.0 == id) {
            if self.sending[at].1.elapsed() < TURN || self.waiting.is_empty() {
                return true;
            }
            self.sending.swap_remove(at);
        } else {
            // Someone waits: turns that ran out end now, whether or not their holders came
            // back for more (one stuck on a peer that does not read never does).
            self.sending.retain(|s| s.1.elapsed() < TURN);
        }
        let first = self.waiting.front().is_none_or(|&w| w == id);
        if self.sending.len() < FILE_SENDERS && first {
            self.waiting.retain(|&w| w != id);
            self.sending.push((id, Instant::now()));
            return true;
        }
        if !self.waiting.contains(&id) {
            self.waiting.push_back(id);
        }
        false
    }

    /// Connection `id` has no file bytes to send any more (or ended).
    fn done(&mut self, id: u32) {
        self.sending.retain(|s| s.0 != id);
        self.waiting.retain(|&w| w != id);
    }
}

/// What happened on a connection (the entry point's first argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetEvent {
    /// A new connection: the peer's address (IPv4, host order) and port at the start of the
    /// area as two u32. A negative result refuses it.
    Connect = 0,
    /// `len` new bytes at the start of the area (0: the call asked for with [`SERVE_AGAIN`]).
    Data = 1,
    /// The connection ended (the peer closed, or the kernel closed it): forget it.
    Close = 2,
}

/// What a call answers: what the kernel does next on the connection, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send(Vec<u8>),
    /// `len` bytes of the file at `path` from `offset` (`u64::MAX`: to its end).
    File {
        path: String,
        offset: u64,
        len: u64,
    },
    /// Close once everything before is sent.
    Close,
    /// Call the graft again with no new bytes once everything before is done.
    Again,
}

/// One call's arguments.
pub struct PacketArgs<'a> {
    pub event: NetEvent,
    pub conn: u32,
    pub data: &'a [u8],
    pub peer: SocketAddrV4,
}

/// The kernel state a server graft's calls see: its process, for `vino_net_stat`.
pub struct ServeEnv {
    process: Weak<Process>,
}

/// `event.net.packet`: a server graft's entry point,
/// `event_net_packet(event: i32, conn: i32, len: i32) -> i32`. See the module's documentation
/// and docs/graft-abi.md.
pub struct PacketEvent;

impl GraftPoint for PacketEvent {
    const NAME: &'static str = "event.net.packet";
    const CALLABLE: &'static [&'static str] = &["vino_net_stat"];
    const USES_ARG_AREA: bool = true;
    const ARG_BYTES: usize = SERVE_ARGS;
    /// On the server's own thread: no other principal waits on a call.
    const BUDGET: Duration = Duration::from_millis(10);
    /// Every connection's bytes must reach the graft: the server's thread waits for the owner's
    /// control call to end.
    const WAIT_WHEN_BUSY: bool = true;
    type Env = ServeEnv;
    type Args<'a> = PacketArgs<'a>;
    type Output = Vec<Action>;
    type Params = (i32, i32, i32);
    type Results = i32;

    /// With nothing bound (or a call failed): the connection is closed.
    fn default_policy(_: &ServeEnv, a: &PacketArgs<'_>) -> Vec<Action> {
        match a.event {
            NetEvent::Close => Vec::new(),
            _ => vec![Action::Close],
        }
    }

    fn encode(_: &ServeEnv, a: &PacketArgs<'_>, area: &mut [u8]) -> (i32, i32, i32) {
        let len = match a.event {
            NetEvent::Connect => {
                area[..4].copy_from_slice(&u32::from(*a.peer.ip()).to_le_bytes());
                area[4..8].copy_from_slice(&u32::from(a.peer.port()).to_le_bytes());
                0
            }
            _ => {
                let n = a.data.len().min(SERVE_IN);
                area[..n].copy_from_slice(&a.data[..n]);
                n
            }
        };
        (a.event as i32, a.conn as i32, len as i32)
    }

    fn decode(_: &ServeEnv, a: &PacketArgs<'_>, r: i32, area: &[u8]) -> Result<Vec<Action>, Invalid> {
        if a.event == NetEvent::Close {
            return Ok(Vec::new());
        }
        if r < 0 {
            return Ok(vec![Action::Close]);
        }
        let again = r & SERVE_AGAIN != 0;
        let n = (r & !SERVE_AGAIN) as usize;
        if n > SERVE_ACTIONS || r & !(SERVE_AGAIN | 0xffff) != 0 {
            return Err(Invalid(format!("{n} actions: at most {SERVE_ACTIONS}")));
        }
        let mut actions = Vec::with_capacity(n + 1);
        for i in 0..n {
            let at = SERVE_ACTIONS_AT + i * 32;
            let word = |o: usize| u32::from_le_bytes(area[at + o..at + o + 4].try_into().expect("4 bytes"));
            let long = |o: usize| u64::from_le_bytes(area[at + o..at + o + 8].try_into().expect("8 bytes"));
            let region = |off: u32, len: u32, max: usize| {
                let (off, len) = (off as usize, len as usize);
                (off.checked_add(len).is_some_and(|end| end <= SERVE_OUT) && len <= max)
                    .then(|| &area[SERVE_OUT_AT + off..SERVE_OUT_AT + off + len])
                    .ok_or_else(|| Invalid(format!("action {i}: bytes {off}+{len} outside the output region")))
            };
            actions.push(match word(0) {
                1 => Action::Send(region(word(4), word(8), SERVE_OUT)?.to_vec()),
                2 => {
                    let path = std::str::from_utf8(region(word(4), word(8), PATH_MAX)?)
                        .map_err(|_| Invalid(format!("action {i}: the path is not UTF-8")))?;
                    Action::File {
                        path: path.to_string(),
                        offset: long(16),
                        len: long(24),
                    }
                }
                3 => Action::Close,
                k => return Err(Invalid(format!("action {i}: no action of kind {k}"))),
            });
        }
        if again {
            actions.push(Action::Again);
        }
        Ok(actions)
    }

    fn callables(c: &mut Callables<ServeEnv>) {
        c.func2_mem("vino_net_stat", net_stat);
    }
}

/// `vino_net_stat(path, len) -> size | -errno`: the size of a regular file the owner may read
/// (`-EACCES` if it may not, `-ENOENT`, `-EISDIR` for a directory).
fn net_stat(env: &ServeEnv, memory: &[u8], ptr: i32, len: i32) -> Result<i64, CallError> {
    let (start, len) = (ptr as u32 as usize, len as u32 as usize);
    if len > PATH_MAX {
        return Ok(-(Errno::NameTooLong as i64));
    }
    let Some(bytes) = memory.get(start..start.saturating_add(len)) else {
        return Ok(-14); // EFAULT
    };
    let (Some(process), Ok(path)) = (env.process.upgrade(), std::str::from_utf8(bytes)) else {
        return Ok(-(Errno::NoEnt as i64));
    };
    let answer = process.stat(path).and_then(|st| {
        if st.kind == vino_fs::FileType::Directory {
            return Err(SysError::new(Errno::IsDir, "a directory"));
        }
        process.access(path, READ).map(|()| st.size as i64)
    });
    Ok(answer.unwrap_or_else(|e| -(e.errno as i64)))
}

/// A running server, as its process keeps it.
pub(crate) struct Server {
    pub(crate) port: u16,
    stop: Arc<AtomicBool>,
    wake: Option<vino_sched::ThreadWakeHandle>,
    thread: Option<vino_sched::JoinHandle>,
}

impl Server {
    /// Tells the thread to end and waits for it.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = &self.wake {
            w.wake();
        }
        if let Some(t) = self.thread.take() {
            t.join();
        }
    }
}

/// One connection of a server.
struct Conn {
    socket: SocketId,
    peer: SocketAddrV4,
    /// Bytes being sent, and how many of them went.
    out: Vec<u8>,
    sent: usize,
    /// What the graft asked for and the kernel has not done yet.
    todo: VecDeque<Action>,
    /// A file being sent: its descriptor, where the next chunk starts, bytes left.
    file: Option<(crate::files::Fd, u64, u64)>,
    /// Graft time in the current second, and when that second began.
    cpu: Duration,
    since: Instant,
    /// A call for it failed: it closes without a [`NetEvent::Close`] (the graft's state for it
    /// may be whatever the failed call's predecessors left).
    failed: bool,
}

impl Process {
    /// Serves TCP `port` with the graft `wasm` (`event.net.packet`), in the kernel, until
    /// [`Process::net_unserve`] or exit. Errors: the port's (`EACCES`, `EADDRINUSE`), the
    /// graft's (`EINVAL` for a module that is not a server graft), `EAGAIN` without a thread.
    pub fn net_serve(self: &Arc<Self>, port: u16, backlog: usize, wasm: &[u8]) -> SysResult<()> {
        if self.servers.lock().iter().any(|s| s.port == port) {
            return Err(SysError::new(
                Errno::AddrInUse,
                format!("this process serves port {port} already"),
            ));
        }
        let listener = self.tcp_listen(port, backlog)?;
        let slot = Arc::new(GraftSlot::<PacketEvent>::new(
            &self.kernel().runtime,
            Arc::new(ServeEnv {
                process: Arc::downgrade(self),
            }),
            Access::Process(self.pid()),
            Some(&port.to_string()),
        ));
        let started = slot
            .load(wasm, self.graft_owner())
            .map_err(SysError::from)
            .and_then(|_| {
                let stop = Arc::new(AtomicBool::new(false));
                let (me, halt, serving) = (Arc::downgrade(self), stop.clone(), slot.clone());
                let (wake_tx, wake_rx) = std::sync::mpsc::channel();
                let thread = self.spawn_thread(move |ctx| {
                    let _ = wake_tx.send(ctx.waker());
                    serve(ctx, me, listener, serving, halt)
                })?;
                Ok(Server {
                    port,
                    stop,
                    wake: wake_rx.recv_timeout(Duration::from_secs(10)).ok(),
                    thread: Some(thread),
                })
            });
        match started {
            Ok(server) => {
                self.namespace.register(slot);
                self.servers.lock().push(server);
                Ok(())
            }
            Err(e) => {
                let _ = self.socket_close(listener);
                Err(e)
            }
        }
    }

    /// Stops serving `port`: its connections and listener close, its graft is unloaded.
    pub fn net_unserve(&self, port: u16) -> SysResult<()> {
        let server = {
            let mut servers = self.servers.lock();
            let at = servers
                .iter()
                .position(|s| s.port == port)
                .ok_or_else(|| SysError::new(Errno::NoEnt, format!("this process serves no port {port}")))?;
            servers.swap_remove(at)
        };
        server.stop();
        self.namespace.forget(&format!("{}/{port}", PacketEvent::NAME));
        Ok(())
    }

    /// Stops every server of this process (at exit).
    pub(crate) fn stop_servers(&self) {
        let servers = std::mem::take(&mut *self.servers.lock());
        for s in servers {
            s.stop();
        }
    }
}

/// The server's thread: accepts, reads, calls the graft, sends, until told to stop or its
/// process is gone.
async fn serve(
    ctx: vino_sched::ThreadCtx,
    process: Weak<Process>,
    listener: SocketId,
    slot: Arc<GraftSlot<PacketEvent>>,
    stop: Arc<AtomicBool>,
) {
    let mut conns: BTreeMap<u32, Conn> = BTreeMap::new();
    let mut next_id = 0u32;
    let mut turns = Turns::default();
    let mut buf = vec![0u8; SERVE_IN];
    while !stop.load(Ordering::Relaxed) {
        let Some(p) = process.upgrade() else { return };
        let mut busy = accept(&p, listener, &slot, &mut conns, &mut next_id);
        let ids: Vec<u32> = conns.keys().copied().collect();
        for id in ids {
            let conn = conns.get_mut(&id).expect("listed above");
            let (moved, alive) = drive(&p, &slot, id, conn, &mut buf, &mut turns);
            busy |= moved;
            if !alive || conn.file.is_none() {
                turns.done(id);
            }
            if !alive {
                let conn = conns.remove(&id).expect("listed above");
                end(&p, &slot, id, conn);
            }
        }
        if busy {
            if ctx.slice_over() {
                ctx.yield_now().await;
            }
            continue;
        }
        // Nothing to do: wait for a connection, bytes, room to send, or the stop; and with
        // responses waiting for a turn, at most a turn (a turn ends by time, not by an event).
        let waiting = !turns.waiting.is_empty();
        let mut nap = std::pin::pin!(ctx.sleep_for(TURN));
        std::future::poll_fn(|cx| {
            if stop.load(Ordering::Relaxed) || (waiting && nap.as_mut().poll(cx).is_ready()) {
                return Poll::Ready(());
            }
            let mut ready = conns.len() < SERVE_CONNS_MAX && p.socket_poll(listener, Interest::Read, cx).is_ready();
            for c in conns.values() {
                let interest = if c.out.len() > c.sent {
                    Interest::Write
                } else {
                    Interest::Read
                };
                ready |= p.socket_poll(c.socket, interest, cx).is_ready();
            }
            if ready { Poll::Ready(()) } else { Poll::Pending }
        })
        .await;
    }
    if let Some(p) = process.upgrade() {
        for (id, conn) in std::mem::take(&mut conns) {
            end(&p, &slot, id, conn);
        }
        let _ = p.socket_close(listener);
    }
}

/// Takes the connections waiting in the listener, up to the server's bound.
fn accept(
    p: &Arc<Process>,
    listener: SocketId,
    slot: &GraftSlot<PacketEvent>,
    conns: &mut BTreeMap<u32, Conn>,
    next_id: &mut u32,
) -> bool {
    let mut any = false;
    while conns.len() < SERVE_CONNS_MAX {
        let Ok((socket, peer)) = p.tcp_accept(listener, Wait::No) else {
            break;
        };
        any = true;
        // Ids count up from 1; after 2^32 connections they wrap, past the ones still open.
        *next_id = next_id.wrapping_add(1);
        while *next_id == 0 || conns.contains_key(next_id) {
            *next_id = next_id.wrapping_add(1);
        }
        let mut conn = Conn {
            socket,
            peer,
            out: Vec::new(),
            sent: 0,
            todo: VecDeque::new(),
            file: None,
            cpu: Duration::ZERO,
            since: Instant::now(),
            failed: false,
        };
        let answer = call(slot, *next_id, &mut conn, NetEvent::Connect, &[]);
        conn.todo.extend(answer);
        conns.insert(*next_id, conn);
    }
    any
}

/// One call of the graft for connection `id`, its time counted against the connection.
fn call(slot: &GraftSlot<PacketEvent>, id: u32, conn: &mut Conn, event: NetEvent, data: &[u8]) -> Vec<Action> {
    let started = Instant::now();
    let args = PacketArgs {
        event,
        conn: id,
        data,
        peer: conn.peer,
    };
    let answer = vino_sched::in_kernel(|| slot.try_invoke(&args)).unwrap_or_else(|_| {
        conn.failed = true;
        PacketEvent::default_policy(slot.env(), &args)
    });
    if started.duration_since(conn.since) > Duration::from_secs(1) {
        (conn.cpu, conn.since) = (Duration::ZERO, started);
    }
    conn.cpu += started.elapsed();
    if conn.cpu > CONN_CPU_SHARE {
        return vec![Action::Close];
    }
    answer
}

/// Moves connection `id` on: sends what is pending, does what the graft asked, reads new bytes
/// for the graft. Returns (whether anything happened, whether it lives on).
fn drive(
    p: &Arc<Process>,
    slot: &GraftSlot<PacketEvent>,
    id: u32,
    conn: &mut Conn,
    buf: &mut [u8],
    turns: &mut Turns,
) -> (bool, bool) {
    let mut moved = false;
    for _ in 0..STEPS_PER_ROUND {
        if conn.sent < conn.out.len() {
            match p.socket_send(conn.socket, &conn.out[conn.sent..], Wait::No) {
                Ok(n) => {
                    conn.sent += n;
                    moved = true;
                    if conn.sent < conn.out.len() {
                        return (moved, true);
                    }
                    (conn.out, conn.sent) = (Vec::new(), 0);
                    continue;
                }
                Err(e) if e.errno == Errno::Again => return (moved, true),
                Err(_) => return (true, false),
            }
        }
        match fill(p, slot, id, conn, turns) {
            Fill::Bytes => {
                moved = true;
                continue;
            }
            Fill::End => return (true, false),
            // Its file's turn has not come: nothing more is read from it meanwhile.
            Fill::Wait => return (moved, true),
            Fill::Nothing => {}
        }
        match p.socket_recv(conn.socket, buf, Wait::No) {
            Ok(0) => return (true, false),
            Ok(n) => {
                let answer = call(slot, id, conn, NetEvent::Data, &buf[..n]);
                conn.todo.extend(answer);
                moved = true;
            }
            Err(e) if e.errno == Errno::Again => return (moved, true),
            Err(_) => return (true, false),
        }
    }
    (moved, true)
}

/// What [`fill`] did.
enum Fill {
    /// Bytes are ready to send.
    Bytes,
    /// The connection is to end (closed by the graft, or a file that could not be sent).
    End,
    /// A file waits for its turn to send.
    Wait,
    /// Nothing to send: read.
    Nothing,
}

/// Gathers the next bytes to send into the connection's empty output, from the graft's actions
/// and the file being sent, up to a file chunk: a response's head and the start of its file go
/// in one send, so the head is not a small segment left waiting for its acknowledgement
/// (Nagle's rule against the peer's delayed ACK would hold every response up by its delay).
fn fill(p: &Arc<Process>, slot: &GraftSlot<PacketEvent>, id: u32, conn: &mut Conn, turns: &mut Turns) -> Fill {
    debug_assert!(conn.out.is_empty());
    while conn.out.len() < FILE_CHUNK {
        if let Some((fd, offset, left)) = conn.file {
            if !turns.may_send(id) {
                return if conn.out.is_empty() { Fill::Wait } else { Fill::Bytes };
            }
            let room = (FILE_CHUNK - conn.out.len()).min(left as usize);
            let at = conn.out.len();
            conn.out.resize(at + room, 0);
            match p.pread(fd, &mut conn.out[at..], offset) {
                Ok(n) if n > 0 => {
                    conn.out.truncate(at + n);
                    let left = left - n as u64;
                    conn.file = (left > 0).then_some((fd, offset + n as u64, left));
                }
                // The file ended early (it shrank) or could not be read: the response is cut
                // short, so the connection cannot go on.
                _ => {
                    conn.file = None;
                    let _ = p.close(fd);
                    return Fill::End;
                }
            }
            if conn.file.is_none() {
                let _ = p.close(fd);
            }
            continue;
        }
        match conn.todo.front() {
            None => break,
            // What ends or asks again waits for the bytes before it to go.
            Some(Action::Close | Action::Again) if !conn.out.is_empty() => break,
            Some(_) => {}
        }
        match conn.todo.pop_front().expect("looked at above") {
            Action::Send(bytes) => conn.out.extend_from_slice(&bytes),
            Action::File { path, offset, len } => match open_range(p, &path, offset, len) {
                Ok(file) => conn.file = file,
                Err(_) => return Fill::End,
            },
            // Everything before it went out (it waited for `out` to empty): the connection ends.
            Action::Close => return Fill::End,
            Action::Again => {
                let answer = call(slot, id, conn, NetEvent::Data, &[]);
                conn.todo.extend(answer);
            }
        }
    }
    if conn.out.is_empty() {
        Fill::Nothing
    } else {
        Fill::Bytes
    }
}

/// Opens `path` as the owner for a range to send: `None` for an empty range.
fn open_range(p: &Arc<Process>, path: &str, offset: u64, len: u64) -> SysResult<Option<(crate::files::Fd, u64, u64)>> {
    let fd = p.open(path, OpenFlags::read_only())?;
    let size = p.fstat(fd).map(|s| s.size);
    let left = size.map(|size| size.saturating_sub(offset).min(len));
    match left {
        Ok(left) if left > 0 => Ok(Some((fd, offset, left))),
        other => {
            let _ = p.close(fd);
            other.map(|_| None)
        }
    }
}

/// Ends a connection: its file closed, the graft told, its socket closed.
fn end(p: &Arc<Process>, slot: &GraftSlot<PacketEvent>, id: u32, mut conn: Conn) {
    if let Some((fd, ..)) = conn.file.take() {
        let _ = p.close(fd);
    }
    if !conn.failed {
        let _ = call(slot, id, &mut conn, NetEvent::Close, &[]);
    }
    let _ = p.socket_close(conn.socket);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args(event: NetEvent) -> PacketArgs<'static> {
        PacketArgs {
            event,
            conn: 1,
            data: b"GET / HTTP/1.1\r\n\r\n",
            peer: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 5000),
        }
    }

    fn action(area: &mut [u8], i: usize, kind: u32, a: u32, b: u32, offset: u64, len: u64) {
        let at = SERVE_ACTIONS_AT + i * 32;
        area[at..at + 4].copy_from_slice(&kind.to_le_bytes());
        area[at + 4..at + 8].copy_from_slice(&a.to_le_bytes());
        area[at + 8..at + 12].copy_from_slice(&b.to_le_bytes());
        area[at + 16..at + 24].copy_from_slice(&offset.to_le_bytes());
        area[at + 24..at + 32].copy_from_slice(&len.to_le_bytes());
    }

    #[test]
    fn actions_are_read_and_checked() {
        let env = ServeEnv { process: Weak::new() };
        let mut area = vec![0u8; SERVE_ARGS];
        area[SERVE_OUT_AT..SERVE_OUT_AT + 7].copy_from_slice(b"HI/www/");
        action(&mut area, 0, 1, 0, 2, 0, 0);
        action(&mut area, 1, 2, 2, 5, 10, u64::MAX);
        action(&mut area, 2, 3, 0, 0, 0, 0);
        let a = args(NetEvent::Data);
        let got = PacketEvent::decode(&env, &a, 3 | SERVE_AGAIN, &area).unwrap();
        assert_eq!(
            got,
            vec![
                Action::Send(b"HI".to_vec()),
                Action::File {
                    path: "/www/".into(),
                    offset: 10,
                    len: u64::MAX
                },
                Action::Close,
                Action::Again,
            ]
        );
        assert_eq!(PacketEvent::decode(&env, &a, -1, &area).unwrap(), vec![Action::Close]);
        assert!(PacketEvent::decode(&env, &a, SERVE_ACTIONS as i32 + 1, &area).is_err());
        action(&mut area, 0, 1, SERVE_OUT as u32 - 1, 2, 0, 0);
        assert!(
            PacketEvent::decode(&env, &a, 1, &area).is_err(),
            "past the output region"
        );
        action(&mut area, 0, 9, 0, 0, 0, 0);
        assert!(PacketEvent::decode(&env, &a, 1, &area).is_err(), "no such action");
        assert!(
            PacketEvent::decode(&env, &args(NetEvent::Close), 1, &area)
                .unwrap()
                .is_empty()
        );
        let mut area2 = vec![0u8; SERVE_ARGS];
        assert_eq!(
            PacketEvent::encode(&env, &args(NetEvent::Connect), &mut area2),
            (0, 1, 0)
        );
        assert_eq!(&area2[..4], &0x7f00_0001u32.to_le_bytes());
    }

    proptest! {
        /// Whatever a graft leaves in its area and answers, reading it back never panics and
        /// never yields more than the area allows.
        #[test]
        fn any_answer_is_read_safely(r in any::<i32>(), words in proptest::collection::vec(any::<u32>(), 64 * 8)) {
            let env = ServeEnv { process: Weak::new() };
            let mut area = vec![0u8; SERVE_ARGS];
            for (i, w) in words.iter().enumerate() {
                let at = SERVE_ACTIONS_AT + i * 4;
                // Each action's first word its kind: mostly real kinds, sometimes not.
                let word = if i % 8 == 0 { w % 5 } else { *w };
                area[at..at + 4].copy_from_slice(&word.to_le_bytes());
            }
            if let Ok(actions) = PacketEvent::decode(&env, &args(NetEvent::Data), r, &area) {
                prop_assert!(actions.len() <= SERVE_ACTIONS + 1);
                let bytes: usize = actions.iter().map(|a| match a { Action::Send(b) => b.len(), _ => 0 }).sum();
                prop_assert!(bytes <= SERVE_ACTIONS * SERVE_OUT);
            }
        }
    }
}
