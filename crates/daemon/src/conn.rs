//! One connection: the Hello exchange, then requests until the client goes away. Whatever the
//! reason the connection ends, its kernel process exits (files closed, grafts unloaded).

use crate::dispatch::{Account, Session};
use crate::peer::Peer;
use crate::shm::ClientMemory;
use crate::{ConnInfo, Daemon};
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use std::io::{self, BufRead, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_kernel::{Credentials, Pid, Resource};
use vino_proto::{ErrorReply, FrameError, MAX_FRAME, Request, Response, VERSION, errno};

/// Largest request buffer a connection keeps between requests (uncharged).
const RETAINED_BUFFER: usize = 256 << 10;

/// Most bytes of a refused module's frame read (and dropped) to keep its connection going.
const DRAIN_MAX: u64 = 2 << 20;

/// Largest Hello frame (a version, a client name, a size): nothing is charged before Hello, so
/// nothing big is read either.
const MAX_HELLO: usize = vino_proto::MAX_PATH + 1024;

/// How long a new connection may take to say Hello (its whole frame).
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection's socket, read against a deadline while a frame is in flight: each read waits
/// only for what is left of the time the whole frame has, so that a client dribbling a frame a
/// byte at a time is cut off as surely as one that stops. Without a deadline (between frames) a
/// read waits as long as it takes.
struct Timed {
    stream: UnixStream,
    deadline: Option<Instant>,
    /// True while the socket has a read timeout (cleared at the first read without a deadline).
    timeout_set: bool,
}

impl Timed {
    fn new(stream: UnixStream) -> Timed {
        Timed {
            stream,
            deadline: None,
            timeout_set: false,
        }
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.deadline {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the frame took too long"));
                }
                self.stream.set_read_timeout(Some(left))?;
                self.timeout_set = true;
            }
            None if self.timeout_set => {
                self.stream.set_read_timeout(None)?;
                self.timeout_set = false;
            }
            None => {}
        }
        self.stream.read(buf)
    }
}

/// Sends an error answer, ignoring a peer that is gone.
fn refuse(stream: &mut UnixStream, errno: i32, message: impl Into<String>) {
    let _ = vino_proto::write_frame(stream, &Response::Error(ErrorReply::new(errno, message)));
}

/// The answer to a frame that could not be read, if one can still be sent.
fn frame_error(stream: &mut UnixStream, e: &FrameError) {
    match e {
        FrameError::TooLarge { .. } => refuse(stream, errno::EMSGSIZE, e.to_string()),
        FrameError::Decode(_) => refuse(stream, errno::EPROTO, e.to_string()),
        _ => {}
    }
}

/// Reads the first frame's header with `recvmsg`, so that a file descriptor sent with it
/// (the client's shared memory) arrives too; the rest of the header from `rest`.
fn read_hello_header(stream: &mut UnixStream, rest: &mut impl Read) -> Result<([u8; 4], Option<OwnedFd>), FrameError> {
    let mut header = [0u8; 4];
    let mut cmsg = nix::cmsg_space!([RawFd; 4]);
    let (got, fds) = {
        let mut iov = [IoSliceMut::new(&mut header)];
        // A signal interrupts a read with a timeout rather than restarting it: read again.
        let msg = loop {
            match recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => break r.map_err(|e| FrameError::Io(e.into()))?,
            }
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(|e| FrameError::Io(e.into()))? {
            if let ControlMessageOwned::ScmRights(list) = c {
                // SAFETY: SCM_RIGHTS installed these descriptors in this process just now; nothing
                // else refers to them, and each appears once in the list, so each is owned once.
                fds.extend(list.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        (msg.bytes, fds)
    };
    if got == 0 {
        return Err(FrameError::Closed);
    }
    rest.read_exact(&mut header[got..]).map_err(|_| FrameError::Truncated)?;
    // One descriptor is expected at most; others are closed as they drop.
    Ok((header, fds.into_iter().next()))
}

/// The Hello exchange: the client's version and shared memory. Returns the client's name and
/// its memory, or `None` after refusing it. The whole Hello must arrive within
/// [`HELLO_TIMEOUT`] of the connection.
fn hello(stream: &mut UnixStream, max_shm: u64) -> Option<(String, Option<ClientMemory>)> {
    let deadline = Instant::now() + HELLO_TIMEOUT;
    // A client that connects and says nothing does not hold a thread for long (a stop closes
    // it at once: `Daemon::disconnect_all`).
    let _ = stream.set_read_timeout(Some(HELLO_TIMEOUT));
    let mut rest = Timed::new(stream.try_clone().ok()?);
    rest.deadline = Some(deadline);
    let mut buf = Vec::new();
    let read = read_hello_header(stream, &mut rest)
        .and_then(|(header, fd)| {
            vino_proto::read_frame_after_header(header, &mut rest, &mut buf, MAX_HELLO).map(|_| fd)
        })
        .and_then(|fd| Ok((vino_proto::decode::<Request>(&buf)?, fd)));
    let _ = stream.set_read_timeout(None);
    let (req, fd) = match read {
        Ok(r) => r,
        Err(e) => {
            frame_error(stream, &e);
            return None;
        }
    };
    let Request::Hello {
        version,
        client,
        shm_len,
    } = req
    else {
        refuse(stream, errno::EPROTO, "the first message must be Hello");
        return None;
    };
    if version != VERSION {
        refuse(
            stream,
            errno::EPROTO,
            format!("protocol version {version} is not spoken here (this daemon speaks {VERSION})"),
        );
        return None;
    }
    if let Err(why) = (Request::Hello {
        version,
        client: client.clone(),
        shm_len,
    })
    .check()
    {
        refuse(stream, errno::EINVAL, why);
        return None;
    }
    let shm = match (shm_len, fd) {
        (0, _) => None,
        (_, None) => {
            refuse(
                stream,
                errno::EINVAL,
                "Hello announced shared memory but passed no descriptor",
            );
            return None;
        }
        (len, Some(fd)) => match ClientMemory::map(fd, len, max_shm) {
            Ok(m) => Some(m),
            Err(why) => {
                refuse(stream, errno::EINVAL, why);
                return None;
            }
        },
    };
    Some((client, shm))
}

/// Ends the kernel process and forgets the connection, however the connection ends.
struct Cleanup<'a> {
    daemon: &'a Daemon,
    pid: Pid,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        self.daemon.conns.lock().remove(&self.pid);
        self.daemon.kernel.exit(self.pid);
    }
}

/// Serves a connection from `peer` until it ends.
pub(crate) fn serve(daemon: &Daemon, mut stream: UnixStream, peer: Peer) {
    let Some(greeting) = daemon.greeting(&stream) else {
        return;
    };
    let Some((client, shm)) = hello(&mut stream, daemon.config.max_shm) else {
        return;
    };
    drop(greeting);
    let privileged = peer.privileged(daemon.privileged_gid);
    let cred = Credentials {
        uid: peer.uid,
        gid: peer.gid,
        groups: peer.groups.clone(),
        privileged,
    };
    let process = daemon.kernel.spawn(cred);
    let pid = process.pid();
    let cpu = daemon.kernel.accounts().cpu().register();
    if let Some(user) = process.account().parent() {
        cpu.serve(user);
    }
    // Work the kernel queues for this connection (a compile waiting its turn) is dropped once
    // the client has gone.
    if let Ok(watch) = stream.try_clone() {
        process.set_alive_check(Arc::new(move || {
            !crate::dispatch::hung_up(watch.as_fd(), Duration::ZERO)
        }));
    }
    let account = Arc::new(Account::default());
    let Ok(handle) = stream.try_clone() else {
        return daemon.kernel.exit(pid);
    };
    let info = ConnInfo {
        peer,
        client,
        account: account.clone(),
        stream: handle,
    };
    daemon.conns.lock().insert(pid, info);
    let _cleanup = Cleanup { daemon, pid };
    if daemon.stopping() {
        return;
    }
    let has_shm = shm.is_some();
    let reply = Response::Hello {
        version: VERSION,
        pid,
        privileged,
        shm: has_shm,
    };
    if vino_proto::write_frame(&mut stream, &reply).is_err() {
        return;
    }
    let Ok(client) = stream.try_clone() else { return };
    let mut session = Session {
        daemon,
        process,
        shm,
        account,
        scratch: Vec::new(),
        client,
        cpu,
    };
    requests(&mut stream, &mut session);
}

/// Judges the module a frame carries while it arrives, as far as `got` (the frame's bytes so
/// far) shows it: false, with the kernel's refusal in `refused`, once it is too costly to
/// compile, so that no more of it is read.
fn watch_module(process: &vino_kernel::Process, got: &[u8], refused: &mut Option<ErrorReply>) -> bool {
    let Some(m) = vino_proto::module_head(got) else {
        return true;
    };
    let program = m.kind == vino_proto::ModuleFor::Program;
    match process.precheck_module_head(program, m.head, m.size) {
        Ok(()) => true,
        Err(e) => {
            *refused = Some(ErrorReply::new(e.errno as i32, e.message));
            false
        }
    }
}

/// Reads, serves and answers requests until the client leaves or misbehaves. Between requests
/// the client may take its time; once a request's first byte has arrived, the rest must follow
/// within the configured `frame_timeout`, or the connection ends.
fn requests(stream: &mut UnixStream, session: &mut Session<'_>) {
    let Ok(clone) = stream.try_clone() else { return };
    let frame_timeout = session.daemon.config.frame_timeout;
    // Buffered: a small request's header and body come in one read.
    let mut reader = io::BufReader::with_capacity(64 << 10, Timed::new(clone));
    let mut buf = Vec::new();
    loop {
        session.cpu.end();
        if reader.buffer().is_empty() {
            // A client in a tight loop sends its next request within microseconds: a few
            // connections at a time poll for it before sleeping (see vino_proto::spin_until_readable).
            if !session.daemon.kernel.accounts().cpu().shared() && session.daemon.try_spin() {
                let polled = vino_proto::poll_until_readable(stream.as_fd(), vino_proto::SPIN);
                // Polling uses only a core nobody else wants: not charged to the user.
                session.cpu.spun(polled.own);
                session.daemon.end_spin();
            }
            reader.get_mut().deadline = None;
            match reader.fill_buf() {
                Ok([]) => return,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
        session.cpu.begin();
        // A heavy user's connections take turns (see vino_account::cpu::Worker::take_turn).
        session.cpu.take_turn();
        reader.get_mut().deadline = Some(Instant::now() + frame_timeout);
        let mut header = [0u8; 4];
        if reader.read_exact(&mut header).is_err() {
            return;
        }
        // The frame's buffer is charged to the user before it grows: one user's many slow big
        // frames cannot make the daemon hold more than its share.
        let announced = (u32::from_le_bytes(header) as usize).min(MAX_FRAME) as u64;
        let _buffer = match session.process.account().charge(Resource::FrameBytes, announced) {
            Ok(c) => c,
            Err(e) => return refuse(stream, e.errno(), e.to_string()),
        };
        let mut refused = None;
        let mut watch = |got: &[u8]| watch_module(&session.process, got, &mut refused);
        match vino_proto::read_frame_watching(header, &mut reader, &mut buf, MAX_FRAME, &mut watch) {
            Ok(true) => {}
            Ok(false) => {
                let e = refused.unwrap_or_else(|| ErrorReply::new(errno::E2BIG, "the module is refused"));
                let left = (announced as usize).saturating_sub(buf.len()) as u64;
                // The rest of a small frame is read and dropped unkept, so the connection goes
                // on; a large one's is not read at all, and the connection ends.
                let _ = vino_proto::write_frame(stream, &Response::Error(e));
                let drained =
                    left <= DRAIN_MAX && io::copy(&mut (&mut reader).take(left), &mut io::sink()).ok() == Some(left);
                if !drained {
                    return;
                }
                if buf.capacity() > RETAINED_BUFFER {
                    buf = Vec::new();
                }
                continue;
            }
            Err(e) => return frame_error(stream, &e),
        }
        let req: Request = match vino_proto::decode(&buf) {
            Ok(r) => r,
            Err(e) => return frame_error(stream, &e),
        };
        if let Err(why) = req.check() {
            return refuse(stream, errno::E2BIG, format!("{}: {why}", req.name()));
        }
        if let Request::Run {
            wasm,
            setup,
            detach,
            then,
        } = req
        {
            // The connection is the program's from here to its end.
            // Its CPU is charged to the user as any request's (the thread stays busy); the
            // frame's buffer goes now, the module once compiled.
            drop(_buffer);
            drop(buf);
            // The program runs on the CPU scheduler; this thread only waits for it.
            session.cpu.give_turn();
            reader.get_mut().deadline = None;
            return crate::program::run(stream, reader, session, (wasm, then), setup, detach);
        }
        let answer = vino_proto::encode(&session.serve(req));
        if stream.write_all(&answer).is_err() {
            return;
        }
        // A big request's buffer is not kept for the rest of the connection (its charge ends
        // here, so neither may its memory).
        if buf.capacity() > RETAINED_BUFFER {
            buf = Vec::new();
        }
    }
}
