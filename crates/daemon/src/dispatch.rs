//! One request, served: the system call on the connection's kernel process, and the answer in
//! the protocol's types.

use crate::Daemon;
use crate::shm::ClientMemory;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vino_kernel::{At, FallocMode, Process, RenameFlags, SysError};
use vino_proto::{ErrorReply, PAGE_BYTES, Payload, Request, Response, errno};

/// What a connection did, for `top`.
#[derive(Debug, Default)]
pub struct Account {
    pub syscalls: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
}

/// A connection's state while it serves requests.
pub(crate) struct Session<'a> {
    pub daemon: &'a Daemon,
    pub process: Arc<Process>,
    pub shm: Option<ClientMemory>,
    pub account: Arc<Account>,
    /// Reused for data on its way between the kernel and the client.
    pub scratch: Vec<u8>,
    /// The connection, watched for a hang-up while a request blocks.
    pub client: UnixStream,
    /// This thread's CPU, charged to the connection's user (see `vino_account::cpu`).
    pub cpu: vino_kernel::account::Worker,
}

type Answer = Result<Response, ErrorReply>;

fn sys(e: SysError) -> ErrorReply {
    ErrorReply::new(e.errno as i32, e.message)
}

fn inval(message: String) -> ErrorReply {
    ErrorReply::new(errno::EINVAL, message)
}

fn stream_info(s: vino_kernel::StreamStatus) -> vino_proto::StreamInfo {
    vino_proto::StreamInfo {
        module: s.module,
        loaded: s.loaded,
    }
}

fn lock_request(kind: vino_proto::LockKind, start: u64, len: u64) -> vino_kernel::LockRequest {
    let kind = match kind {
        vino_proto::LockKind::Read => vino_kernel::LockType::Read,
        vino_proto::LockKind::Write => vino_kernel::LockType::Write,
        vino_proto::LockKind::Unlock => vino_kernel::LockType::Unlock,
    };
    vino_kernel::LockRequest { kind, start, len }
}

fn lock_info(l: vino_kernel::Lock) -> vino_proto::LockInfo {
    let kind = match l.kind {
        vino_kernel::LockKind::Read => vino_proto::LockKind::Read,
        vino_kernel::LockKind::Write => vino_proto::LockKind::Write,
    };
    vino_proto::LockInfo {
        kind,
        start: l.range.start,
        len: l.range.len(),
        pid: l.owner,
    }
}

fn event_kind(k: vino_proto::EventKind) -> vino_kernel::EventKind {
    match k {
        vino_proto::EventKind::Open => vino_kernel::EventKind::Open,
        vino_proto::EventKind::Close => vino_kernel::EventKind::Close,
        vino_proto::EventKind::Create => vino_kernel::EventKind::Create,
        vino_proto::EventKind::Unlink => vino_kernel::EventKind::Unlink,
        vino_proto::EventKind::Modify => vino_kernel::EventKind::Modify,
        // The kernel refuses to filter or subscribe to it (EINVAL).
        vino_proto::EventKind::Overflow => vino_kernel::EventKind::Overflow,
    }
}

fn event(e: vino_kernel::FsEvent) -> vino_proto::Event {
    let kind = match e.kind {
        vino_kernel::EventKind::Open => vino_proto::EventKind::Open,
        vino_kernel::EventKind::Close => vino_proto::EventKind::Close,
        vino_kernel::EventKind::Create => vino_proto::EventKind::Create,
        vino_kernel::EventKind::Unlink => vino_proto::EventKind::Unlink,
        vino_kernel::EventKind::Modify => vino_proto::EventKind::Modify,
        vino_kernel::EventKind::Overflow => vino_proto::EventKind::Overflow,
    };
    vino_proto::Event {
        kind,
        ino: e.inode,
        dir: e.parent,
        pid: e.pid,
        name: e.name.unwrap_or_default(),
    }
}

/// Most bytes one event takes in an answer: kind, three integers, and a name of 255 bytes, each
/// byte possibly shown as U+FFFD (3 bytes) if the name is not UTF-8, with room to spare.
const EVENT_BYTES_MAX: usize = 1024;

/// Most events one `EventWait` answer carries: 1 MiB of events, well under a frame.
pub const EVENTS_PER_WAIT: usize = (1 << 20) / EVENT_BYTES_MAX;

/// How often a blocked request looks whether its client is still there.
const HANGUP_POLL: Duration = Duration::from_millis(50);

/// True if the client closed its end of the connection (or it broke), waiting up to `wait`.
pub(crate) fn hung_up(fd: BorrowedFd<'_>, wait: Duration) -> bool {
    // POLLRDHUP, which nix does not name: the peer shut down or closed.
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `pfd` is one valid pollfd that lives through the call (count 1), and its descriptor
    // is borrowed, so open, for as long.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

fn flags(f: vino_proto::OpenFlags) -> vino_kernel::OpenFlags {
    vino_kernel::OpenFlags {
        read: f.read,
        write: f.write,
        create: f.create,
        exclusive: f.exclusive,
        truncate: f.truncate,
        append: f.append,
        nofollow: f.nofollow,
        directory: f.directory,
        mode: f.mode,
    }
}

/// Where a walk starts: the root, or a directory the connection has open. Never an inode: a
/// client reaches only what its walks reach.
fn at(dirfd: Option<u32>) -> At {
    dirfd.map_or(At::Root, At::Fd)
}

fn kind(k: vino_kernel::FileType) -> vino_proto::FileKind {
    use vino_kernel::FileType as K;
    use vino_proto::FileKind as P;
    match k {
        K::Regular => P::Regular,
        K::Directory => P::Directory,
        K::Symlink => P::Symlink,
        K::Fifo => P::Fifo,
        K::Socket => P::Socket,
        K::CharDevice => P::CharDevice,
        K::BlockDevice => P::BlockDevice,
    }
}

fn kernel_kind(k: vino_proto::FileKind) -> vino_kernel::FileType {
    use vino_kernel::FileType as K;
    use vino_proto::FileKind as P;
    match k {
        P::Regular => K::Regular,
        P::Directory => K::Directory,
        P::Symlink => K::Symlink,
        P::Fifo => K::Fifo,
        P::Socket => K::Socket,
        P::CharDevice => K::CharDevice,
        P::BlockDevice => K::BlockDevice,
    }
}

fn set_time(t: vino_proto::SetTime) -> vino_kernel::SetTime {
    match t {
        vino_proto::SetTime::Omit => vino_kernel::SetTime::Omit,
        vino_proto::SetTime::Now => vino_kernel::SetTime::Now,
        vino_proto::SetTime::At(ns) => vino_kernel::SetTime::At(ns),
    }
}

fn attrs(a: vino_proto::SetAttrs) -> vino_kernel::Attrs {
    vino_kernel::Attrs {
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        atime: set_time(a.atime),
        mtime: set_time(a.mtime),
    }
}

fn xattr_how(h: vino_proto::XattrHow) -> vino_kernel::storage::XattrSet {
    match h {
        vino_proto::XattrHow::Any => vino_kernel::storage::XattrSet::Any,
        vino_proto::XattrHow::Create => vino_kernel::storage::XattrSet::Create,
        vino_proto::XattrHow::Replace => vino_kernel::storage::XattrSet::Replace,
    }
}

fn stat(s: vino_kernel::Stat) -> vino_proto::Stat {
    vino_proto::Stat {
        ino: s.ino,
        kind: kind(s.kind),
        mode: s.mode,
        nlink: s.nlink,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        blocks: s.blocks,
        atime_ns: s.atime_ns,
        mtime_ns: s.mtime_ns,
        ctime_ns: s.ctime_ns,
        rdev: s.rdev,
        generation: s.generation,
    }
}

pub(crate) fn graft_info(g: vino_graft::GraftInfo) -> vino_proto::GraftInfo {
    vino_proto::GraftInfo {
        hash: g.hash,
        size: g.size as u64,
        owner: g.owner,
        cached: g.cached,
        compile_ns: g.compile_ns,
        load_ns: g.load_ns,
    }
}

pub(crate) fn graft_stats(s: vino_graft::GraftStats) -> vino_proto::GraftStats {
    vino_proto::GraftStats {
        invocations: s.invocations,
        aborts: s.failures,
        consecutive_aborts: s.consecutive_failures,
        changes: s.changes,
        time_ns: s.time_ns,
        last_error: s.last_error,
        last_log: s.last_log,
    }
}

pub(crate) fn slot_info(s: vino_graft::SlotInfo) -> vino_proto::SlotInfo {
    vino_proto::SlotInfo {
        point: s.point,
        access: match s.access {
            vino_graft::Access::Privileged => "privileged".into(),
            vino_graft::Access::Process(p) => format!("process {p}"),
        },
        policy: format!("{:?}", s.policy).to_lowercase(),
        graft: s.graft.map(graft_info),
        stats: s.stats.map(graft_stats),
    }
}

fn event_text(e: vino_graft::GraftEvent) -> String {
    match e {
        // `last_error` says why: so many failures in a row, or too many of its recent calls.
        vino_graft::GraftEvent::Unloaded { point, last_error, .. } => format!("{point}: unloaded: {last_error}"),
    }
}

impl Session<'_> {
    /// Serves one request (Hello excepted: the connection handles it).
    pub fn serve(&mut self, req: Request) -> Response {
        self.account.syscalls.fetch_add(1, Ordering::Relaxed);
        self.answer(req).unwrap_or_else(Response::Error)
    }

    fn answer(&mut self, req: Request) -> Answer {
        let p = self.process.clone();
        let ok = |r: Result<(), SysError>| r.map(|_| Response::Ok).map_err(sys);
        let st = |r: Result<vino_kernel::Stat, SysError>| r.map(|s| Response::Stat(stat(s))).map_err(sys);
        match req {
            Request::Hello { .. } => Err(ErrorReply::new(errno::EPROTO, "Hello was already said")),
            // A connection's Run is taken by the connection (see program.rs); input and kills
            // only mean something while a program runs.
            Request::Run { .. } | Request::Input { .. } | Request::Kill | Request::Signal { .. } => {
                Err(ErrorReply::new(errno::EPROTO, "no program runs on this connection"))
            }
            Request::KillProgram { pid } => self.daemon.kill_program(pid, p.credentials()).map(|()| Response::Ok),
            Request::SetTickets { pid, uid, tickets } => match uid {
                Some(uid) => ok(p.set_user_tickets(uid, tickets)),
                None => ok(p.set_tickets_of(pid.unwrap_or(p.pid()), tickets)),
            },
            Request::Null => Ok(Response::Ok),
            Request::Open { path, flags: f } => p.open(&path, flags(f)).map(Response::Fd).map_err(sys),
            Request::Close { fd } => ok(p.close(fd)),
            Request::Read {
                fd,
                len,
                offset,
                to_shm,
            } => self.read(fd, len, offset, to_shm),
            Request::Write { fd, data, offset } => self.write(fd, data, offset),
            Request::Seek { fd, offset } => ok(p.seek(fd, offset)),
            Request::Fsync { fd } => ok(p.fsync(fd)),
            Request::Ftruncate { fd, size } => ok(p.ftruncate(fd, size)),
            Request::Fstat { fd } => p.fstat(fd).map(|s| Response::Stat(stat(s))).map_err(sys),
            Request::Stat { path } => p.stat(&path).map(|s| Response::Stat(stat(s))).map_err(sys),
            Request::Mkdir { path, mode } => ok(p.mkdir(&path, mode)),
            Request::Rmdir { path } => ok(p.rmdir(&path)),
            Request::Readdir { path, cookie } => page(p.readdir_page_at(At::Root, &path, cookie, PAGE_BYTES)),
            Request::Unlink { path } => ok(p.unlink(&path)),
            Request::Rename { from, to } => ok(p.rename(&from, &to)),
            Request::Sync => ok(p.kernel().sync()),
            Request::GraftLoad { point, wasm } => p
                .graft_load(&point, &wasm)
                .map(|g| Response::Graft(graft_info(g)))
                .map_err(sys),
            Request::GraftStage { wasm } => p.graft_stage(&wasm).map(|t| Response::Value(t as i64)).map_err(sys),
            Request::GraftLoadFile { path, point, wasm } => p
                .graft_load_file(&path, &point, &wasm)
                .map(|g| Response::Graft(graft_info(g)))
                .map_err(sys),
            Request::GraftUnload { point } => ok(p.graft_unload(&point)),
            Request::GraftUnloadFile { path, point } => ok(p.graft_unload_file(&path, &point)),
            Request::GraftWriteMemory { point, offset, data } => ok(p.graft_write_memory(&point, offset, &data)),
            Request::GraftSymbol { point, symbol } => {
                p.graft_symbol(&point, &symbol).map(Response::Address).map_err(sys)
            }
            Request::GraftCall { point, control, args } => {
                p.graft_call(&point, &control, &args).map(Response::Value).map_err(sys)
            }
            Request::GraftList => Ok(Response::Slots(p.graft_list().into_iter().map(slot_info).collect())),
            Request::GraftStats { point } => p.graft_stats(&point).map(|s| Response::Slot(slot_info(s))).map_err(sys),
            Request::GraftRecord { point, limit, default } => {
                let limit = usize::try_from(limit)
                    .unwrap_or(usize::MAX)
                    .min(vino_proto::MAX_RECORDING);
                match default {
                    true => ok(p.graft_record_default_start(&point, limit)),
                    false => ok(p.graft_record_start(&point, limit)),
                }
            }
            Request::GraftRecordStop { point } => p
                .graft_record_stop(&point)
                .map(|r| Response::Data(r.to_bytes()))
                .map_err(sys),
            Request::GraftTry {
                pid,
                point,
                wasm,
                sample,
            } => ok(p.graft_try_start(
                pid,
                &point,
                &wasm,
                vino_kernel::graft_try::TryOptions {
                    // 0: the kernel chooses.
                    sample: (sample > 0).then_some(sample),
                },
            )),
            Request::GraftTryStop { pid, point } => p
                .graft_try_stop(pid, &point)
                .map(|r| Response::Data(serde_json::to_vec(&r).expect("a report always encodes")))
                .map_err(sys),
            Request::GraftEvents => Ok(Response::GraftEvents(
                p.graft_events().into_iter().map(event_text).collect(),
            )),
            Request::Lock {
                fd,
                kind,
                start,
                len,
                wait,
            } => {
                let req = lock_request(kind, start, len);
                // Most locks are free: only a request that must wait is watched for its
                // client hanging up (see crate::hangup).
                match p.lock(fd, req, false) {
                    Err(e) if wait && e.errno == vino_kernel::Errno::Again => ok(self.cpu.waiting(|| {
                        let lock = || p.lock(fd, req, true);
                        self.daemon
                            .hangups
                            .during(p.kernel(), p.pid(), self.client.as_fd(), lock)
                    })),
                    r => ok(r),
                }
            }
            Request::GetLk { fd, kind, start, len } => p
                .getlk(fd, lock_request(kind, start, len))
                .map(|l| Response::Lock(l.map(lock_info)))
                .map_err(sys),
            Request::EventFilter { kind, inodes, names } => {
                ok(p.event_filter(event_kind(kind), vino_kernel::EventFilter { inodes, names }))
            }
            Request::EventSubscribe { kind } => ok(p.event_subscribe(event_kind(kind))),
            Request::EventWait { timeout_ms } => Ok(Response::Events(self.event_wait(timeout_ms))),
            Request::Top => Ok(Response::Top(self.daemon.top_for(p.credentials()))),
            Request::Mount { path } => self.mount(&path, true),
            Request::Unmount { path } => self.mount(&path, false),
            Request::OpenAt { dirfd, path, flags: f } => {
                p.open_at(at(dirfd), &path, flags(f)).map(Response::Fd).map_err(sys)
            }
            Request::StatAt { dirfd, path, follow } => st(p.stat_at(at(dirfd), &path, follow)),
            Request::MkdirAt { dirfd, path, mode } => st(p.mkdir_at(at(dirfd), &path, mode)),
            Request::MknodAt {
                dirfd,
                path,
                kind: k,
                mode,
                rdev,
            } => st(p.mknod_at(at(dirfd), &path, kernel_kind(k), mode, rdev)),
            Request::SymlinkAt { target, dirfd, path } => st(p.symlink_at(&target, at(dirfd), &path)),
            Request::ReadlinkAt { dirfd, path } => p.readlink_at(at(dirfd), &path).map(Response::Data).map_err(sys),
            Request::UnlinkAt { dirfd, path } => ok(p.unlink_at(at(dirfd), &path)),
            Request::RmdirAt { dirfd, path } => ok(p.rmdir_at(at(dirfd), &path)),
            Request::RenameAt {
                from_dirfd,
                from,
                to_dirfd,
                to,
                no_replace,
            } => ok(p.rename_at(at(from_dirfd), &from, at(to_dirfd), &to, RenameFlags { no_replace })),
            Request::LinkAt {
                from_dirfd,
                from,
                to_dirfd,
                to,
                follow,
            } => st(p.link_at(at(from_dirfd), &from, at(to_dirfd), &to, follow)),
            Request::SetattrAt {
                dirfd,
                path,
                follow,
                attrs: a,
            } => st(p.setattr_at(at(dirfd), &path, follow, &attrs(a))),
            Request::Fsetattr { fd, attrs: a } => st(p.fsetattr(fd, &attrs(a))),
            Request::AccessAt {
                dirfd,
                path,
                mode,
                follow,
            } => ok(p.access_at(at(dirfd), &path, mode, follow)),
            Request::ReaddirAt { dirfd, path, cookie } => page(p.readdir_page_at(at(dirfd), &path, cookie, PAGE_BYTES)),
            Request::ReaddirFd { fd, cookie } => page(p.readdir_page_fd(fd, cookie, PAGE_BYTES)),
            Request::GetXattr {
                dirfd,
                path,
                follow,
                name,
            } => p
                .getxattr_at(at(dirfd), &path, follow, &name)
                .map(Response::Data)
                .map_err(sys),
            Request::SetXattr {
                dirfd,
                path,
                follow,
                name,
                value,
                how,
            } => ok(p.setxattr_at(at(dirfd), &path, follow, &name, &value, xattr_how(how))),
            Request::ListXattr { dirfd, path, follow } => p
                .listxattr_at(at(dirfd), &path, follow)
                .map(Response::Names)
                .map_err(sys),
            Request::RemoveXattr {
                dirfd,
                path,
                follow,
                name,
            } => ok(p.removexattr_at(at(dirfd), &path, follow, &name)),
            Request::Fallocate {
                fd,
                keep_size,
                offset,
                len,
            } => ok(p.fallocate(fd, keep_size, offset, len)),
            Request::FallocateMode { fd, mode, offset, len } => {
                ok(FallocMode::from_linux(mode).and_then(|mode| p.fallocate_mode(fd, mode, offset, len)))
            }
            Request::StreamBind { path, wasm } => ok(p.stream_bind(&path, wasm.as_deref())),
            Request::StreamStatus { path } => p
                .stream_status(&path)
                .map(|s| Response::Stream(s.map(stream_info)))
                .map_err(sys),
            Request::StreamControl { path, name, args } => {
                p.stream_control(&path, &name, &args).map(Response::Value).map_err(sys)
            }
            Request::StreamFiles => p
                .stream_dependencies()
                .map(|deps| {
                    Response::StreamFiles(
                        deps.into_iter()
                            .map(|d| vino_proto::StreamFile {
                                ino: d.ino,
                                uid: d.uid,
                                kind: d.kind,
                                module: d.module,
                                loaded: d.loaded,
                            })
                            .collect(),
                    )
                })
                .map_err(sys),
            Request::StreamCollect => p
                .collect_stream_modules()
                .map(|n| Response::Value(n as i64))
                .map_err(sys),
        }
    }

    /// Mounts or unmounts the file system through FUSE: privileged, as mount(8) is.
    fn mount(&self, path: &str, mount: bool) -> Answer {
        if !self.process.credentials().privileged {
            return Err(ErrorReply::new(errno::EPERM, "mounting needs a privileged process"));
        }
        let at = std::path::Path::new(path);
        if !at.is_absolute() {
            return Err(inval(format!("{path}: the mount point must be an absolute path")));
        }
        if mount {
            self.daemon.mount(at)
        } else {
            self.daemon.unmount(at)
        }
        .map(|_| Response::Ok)
    }

    /// Waits up to `timeout_ms` for events, in short steps, so a client that leaves does not hold
    /// its thread until the timeout. Takes at most [`EVENTS_PER_WAIT`], so the answer fits a
    /// frame; the rest stay queued for the next wait.
    fn event_wait(&self, timeout_ms: u32) -> Vec<vino_proto::Event> {
        let until = Instant::now() + Duration::from_millis(timeout_ms as u64);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let got = self
                .cpu
                .waiting(|| self.process.event_wait_at_most(left.min(HANGUP_POLL), EVENTS_PER_WAIT));
            if !got.is_empty() || left <= HANGUP_POLL || hung_up(self.client.as_fd(), Duration::ZERO) {
                return got.into_iter().map(event).collect();
            }
        }
    }

    fn read(&mut self, fd: u32, len: u32, offset: Option<u64>, to_shm: Option<u64>) -> Answer {
        let len = len as usize;
        if to_shm.is_some() && self.shm.is_none() {
            return Err(inval("a read into shared memory, but none was passed in Hello".into()));
        }
        if let (Some(at), Some(shm)) = (to_shm, &self.shm) {
            // Check the bounds before the read moves the file offset.
            shm.copy_in(at, &[])
                .and_then(|_| shm.copy_in(at.saturating_add(len as u64), &[]))
                .map_err(inval)?;
        }
        self.scratch.clear();
        self.scratch.resize(len, 0);
        let n = match offset {
            Some(o) => self.process.pread(fd, &mut self.scratch, o),
            None => self.process.read(fd, &mut self.scratch),
        }
        .map_err(sys)?;
        self.account.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        match (to_shm, &self.shm) {
            (Some(at), Some(shm)) => {
                shm.copy_in(at, &self.scratch[..n]).map_err(inval)?;
                Ok(Response::Count(n as u64))
            }
            _ => Ok(Response::Data(self.scratch[..n].to_vec())),
        }
    }

    fn write(&mut self, fd: u32, data: Payload, offset: Option<u64>) -> Answer {
        let bytes = match data {
            Payload::Inline(v) => v,
            Payload::Shm { offset: at, len } => {
                let shm = self
                    .shm
                    .as_ref()
                    .ok_or_else(|| inval("data in shared memory, but none was passed".into()))?;
                let mut buf = std::mem::take(&mut self.scratch);
                shm.copy_out(at, len as usize, &mut buf).map_err(inval)?;
                buf
            }
        };
        let n = match offset {
            Some(o) => self.process.pwrite(fd, &bytes, o),
            None => self.process.write(fd, &bytes),
        };
        self.scratch = bytes;
        let n = n.map_err(sys)?;
        self.account.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
        Ok(Response::Count(n as u64))
    }
}

/// A page of a listing as the protocol has it: `.` and `..` left out (they still count for the
/// page's budget, so it stays under [`PAGE_BYTES`]).
fn page(p: vino_kernel::SysResult<vino_kernel::DirPage>) -> Answer {
    let p = p.map_err(sys)?;
    let entries = p
        .entries
        .into_iter()
        .filter(|(_, e)| e.name != b"." && e.name != b"..")
        .map(|(_, e)| vino_proto::DirEntry {
            name: e.name,
            ino: e.ino,
            kind: kind(e.kind),
        })
        .collect();
    Ok(Response::Entries { entries, next: p.next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_errno_has_its_name_in_the_protocol() {
        for e in vino_kernel::Errno::ALL {
            let name = errno::name(e as i32);
            assert!(name.is_some(), "{e:?} ({}) is not in vino_proto::errno", e as i32);
        }
    }

    #[test]
    fn the_largest_event_answer_fits_well_inside_a_frame() {
        let worst = vino_proto::Event {
            kind: vino_proto::EventKind::Unlink,
            ino: u64::MAX,
            dir: u64::MAX,
            pid: u64::MAX,
            name: String::from_utf8_lossy(&[0xff; vino_kernel::NAME_MAX]).into_owned(),
        };
        assert_eq!(worst.name.len(), 3 * vino_kernel::NAME_MAX);
        assert!(vino_proto::encode(&worst).len() <= EVENT_BYTES_MAX);
        let answer = Response::Events(vec![worst; EVENTS_PER_WAIT]);
        let bytes = vino_proto::encode(&answer).len();
        assert!(bytes <= (1 << 20) + 64, "{bytes} bytes");
        assert!(bytes < vino_proto::MAX_FRAME / 8);
    }

    #[test]
    fn every_file_kind_maps_both_ways() {
        use vino_kernel::FileType as K;
        for k in [
            K::Regular,
            K::Directory,
            K::Symlink,
            K::Fifo,
            K::Socket,
            K::CharDevice,
            K::BlockDevice,
        ] {
            assert_eq!(kernel_kind(kind(k)), k);
        }
    }
}
