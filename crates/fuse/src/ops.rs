//! The FUSE requests, each served by system calls of the kernel process of the caller's
//! credentials, naming files by handle ([`At::Inode`]): the kernel walks, checks and acts in one
//! step, so the mount adds no check-then-act window of its own.

use crate::MountConfig;
use crate::nodes::Nodes;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags as FuseOpenFlags, RenameFlags as FuseRenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vino_kernel::{
    At, Attrs, Credentials, DirEntry, FallocMode, Fd, FileType, Kernel, LockRequest, LockType, OpenFlags, Pid, Process,
    RenameFlags, SetTime, Stat, SysError, SysResult,
};

type R<T> = Result<T, Errno>;

/// The kernel's errno, passed on to the caller.
fn sys(e: SysError) -> Errno {
    Errno::from_i32(e.errno as i32)
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn attr_of(st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(st.ino),
        size: st.size,
        blocks: st.blocks * (vino_kernel::storage::BS as u64 / 512),
        atime: time(st.atime_ns),
        mtime: time(st.mtime_ns),
        ctime: time(st.ctime_ns),
        crtime: time(st.ctime_ns),
        kind: kind_of(st.kind),
        perm: (st.mode & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev as u32,
        blksize: PREFERRED_IO as u32,
        flags: 0,
    }
}

/// The I/O size the mount tells programs to prefer (`st_blksize`): 128 KiB, as coreutils'
/// own minimum. Programs that size their reads and buffers by it (diff, stdio's buffers) would
/// otherwise make a round trip to the daemon per 4 KiB block, where on a disk file system
/// each such call is a copy from Linux's page cache.
const PREFERRED_IO: usize = 128 << 10;

/// The attributes of an entry given without any (a `readdirplus` entry, a negative lookup):
/// node id 0, only the type.
fn unlisted(kind: fuser::FileType) -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

pub(crate) fn kind_of(kind: FileType) -> fuser::FileType {
    match kind {
        FileType::Directory => fuser::FileType::Directory,
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

/// The file type of a `mknod` mode (`S_IFMT` bits).
fn kind_of_mode(mode: u32) -> R<FileType> {
    Ok(match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => FileType::Regular,
        libc::S_IFIFO => FileType::Fifo,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => return Err(Errno::EINVAL),
    })
}

fn set_time(t: Option<TimeOrNow>) -> SetTime {
    match t {
        None => SetTime::Omit,
        Some(TimeOrNow::Now) => SetTime::Now,
        Some(TimeOrNow::SpecificTime(t)) => {
            SetTime::At(t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64))
        }
    }
}

/// An open file: the descriptor of the process that opened it.
struct Handle {
    process: Arc<Process>,
    fd: Fd,
    /// Writes go to the end (the kernel's `write` finds it; `pwrite` would not).
    append: bool,
}

/// Directory entries read from the file system at a time while filling a listing's reply.
const LIST_BATCH: usize = 128;

/// How long a caller's supplementary groups, read from `/proc`, are trusted.
const GROUPS_FRESH: Duration = Duration::from_secs(1);

/// A caller's credentials: uid, gid and supplementary groups.
type Caller = (u32, u32, Vec<u32>);

/// Everything the mount keeps between requests.
pub(crate) struct State {
    kernel: Arc<Kernel>,
    ttl: Duration,
    /// Linux's page cache in front of VINO's ([`MountConfig::page_cache`]).
    page_cache: bool,
    pub(crate) nodes: Nodes,
    files: Mutex<FxHashMap<u64, Arc<Handle>>>,
    /// Linux opens directories without asking (`FUSE_NO_OPENDIR_SUPPORT`, granted at init).
    no_opendir: AtomicBool,
    processes: Mutex<FxHashMap<Caller, Arc<Process>>>,
    /// The kernel pids of the mount's processes: changes they make need no notice to Linux.
    pub(crate) own: RwLock<HashSet<Pid>>,
    groups: Mutex<HashMap<u32, (Instant, Vec<u32>)>>,
    /// Linux pid of each lock owner, for `F_GETLK`'s answer.
    lock_pids: Mutex<HashMap<u64, u32>>,
    next_fh: AtomicU64,
    /// FUSE over io_uring: asked for, granted, running.
    pub(crate) ring: crate::ring::RingState,
    /// Keeps idle CPUs running while requests come (none if off or not useful here).
    idle_poll: Mutex<Result<vino_idlepoll::IdlePoll, vino_idlepoll::Off>>,
    /// The pollers are the mount's default (not asked for by the administrator): they go if
    /// the mount ends up on `/dev/fuse`, where they do not help.
    idle_poll_default: bool,
    pub(crate) activity: vino_idlepoll::Activity,
    /// Notices to Linux the mount sends of its own accord (set once the session has a notifier).
    pub(crate) notices: crate::invalidate::Notices,
    /// Requests served, by kind, and the time spent on them.
    pub(crate) served: crate::served::Counters,
}

/// Most bytes one `copy_file_range` request copies: the largest write a request carries.
const COPY_CHUNK: usize = crate::ring::PAYLOAD;

/// Why a mount on `/dev/fuse` has no pollers by default.
const NO_GAIN_OVER_DEV_FUSE: &str = "no gain over /dev/fuse";

/// How long a `/dev/fuse` reader waits after serving forgets before it reads again, while
/// the ring serves the requests: forgets (which never use the ring) that come meanwhile arrive
/// as one batch. Read one by one, each woke a sleeping thread: the readers took a third of the
/// daemon's CPU while `rm -rf` ran (two forgets for every five requests). Only forgets and
/// interrupts come that way then; neither has a caller waiting for its answer.
const FORGET_GATHER: Duration = Duration::from_millis(1);

impl State {
    /// The size of the file behind node `ino`, if it has one (for a transport deciding where
    /// to serve a request that may shrink it).
    pub(crate) fn size_of(&self, ino: u64) -> Option<u64> {
        self.kernel.node_stat(ino).ok().map(|st| st.size)
    }

    /// Called by a `/dev/fuse` reader after it served forgets (see [`FORGET_GATHER`]). Not
    /// where the ring was granted but could not start: `/dev/fuse` then serves every request.
    fn gather_forgets(&self) {
        if self.ring.serving() {
            std::thread::sleep(FORGET_GATHER);
        }
    }

    pub(crate) fn new(kernel: Arc<Kernel>, config: &MountConfig, ring: crate::ring::RingState) -> SysResult<State> {
        assert_eq!(
            vino_kernel::storage::ROOT_INO,
            crate::nodes::ROOT,
            "FUSE's root inode must be the file system's"
        );
        // By default only over io_uring: through `/dev/fuse` a request wakes whichever reader
        // thread Linux picks, and pollers beside them made a 4 KiB read's round trip slower
        // (24 µs without, 30-36 µs with them).
        let idle_poll_default = config.idle_poll_placement == vino_idlepoll::Placement::IdleGroup;
        let idle_poll = if idle_poll_default && !ring.wanted && !config.idle_poll.is_zero() {
            Err(vino_idlepoll::Off::NoGain(NO_GAIN_OVER_DEV_FUSE))
        } else {
            vino_idlepoll::IdlePoll::start(config.idle_poll, config.idle_poll_placement)
        };
        Ok(State {
            nodes: Nodes::new(kernel.clone())?,
            kernel,
            ttl: config.attr_ttl,
            page_cache: config.page_cache,
            files: Mutex::default(),
            no_opendir: AtomicBool::new(false),
            processes: Mutex::default(),
            own: RwLock::default(),
            groups: Mutex::default(),
            lock_pids: Mutex::default(),
            next_fh: AtomicU64::new(1),
            ring,
            activity: idle_poll.as_ref().map(|p| p.activity()).unwrap_or_default(),
            idle_poll: Mutex::new(idle_poll),
            idle_poll_default,
            notices: Default::default(),
            served: Default::default(),
        })
    }

    /// How a file opened with `flags` is to be served. With the page cache, a descriptor open
    /// for reading only is read through it; one open for writing writes directly (as Linux's
    /// cached writes would go through at once anyway, but split at every page they end inside
    /// and each ask for `security.capability` first), and Linux drops the pages it holds of the
    /// range written. Both keep what Linux holds of the file at open.
    fn open_reply(&self, flags: i32) -> FopenFlags {
        if !self.page_cache {
            FopenFlags::FOPEN_DIRECT_IO
        } else if flags & libc::O_ACCMODE == libc::O_RDONLY {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_DIRECT_IO
        }
    }

    pub(crate) fn page_cache(&self) -> bool {
        self.page_cache
    }

    /// The mount stays on `/dev/fuse` (Linux offers no ring, or it could not start): the
    /// pollers it started by default for the ring go (the threads holding `activity` then
    /// signal no one).
    pub(crate) fn no_ring(&self) {
        let mut idle_poll = self.idle_poll.lock();
        if self.idle_poll_default && idle_poll.is_ok() {
            *idle_poll = Err(vino_idlepoll::Off::NoGain(NO_GAIN_OVER_DEV_FUSE));
        }
    }

    /// The idle pollers: how many, or why there are none.
    pub(crate) fn describe_idle_poll(&self) -> String {
        match &*self.idle_poll.lock() {
            Ok(p) => format!("{} pollers", p.pollers()),
            Err(off) => off.to_string(),
        }
    }

    /// The supplementary groups of the calling Linux process (FUSE does not send them; read
    /// from `/proc`, kept for a second per pid).
    fn groups_of(&self, pid: u32) -> Vec<u32> {
        let mut cache = self.groups.lock();
        if let Some((at, groups)) = cache.get(&pid)
            && at.elapsed() < GROUPS_FRESH
        {
            return groups.clone();
        }
        if cache.len() > 4096 {
            cache.retain(|_, (at, _)| at.elapsed() < GROUPS_FRESH);
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let mut groups: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        groups.sort_unstable();
        groups.dedup();
        cache.insert(pid, (Instant::now(), groups.clone()));
        groups
    }

    /// The kernel process of the caller's credentials (uid, gid, groups), made on first use
    /// (uid 0 privileged).
    fn process(&self, req: &Request) -> Arc<Process> {
        let groups = if req.uid() == 0 {
            Vec::new()
        } else {
            self.groups_of(req.pid())
        };
        let key = (req.uid(), req.gid(), groups);
        let mut all = self.processes.lock();
        if let Some(p) = all.get(&key) {
            return p.clone();
        }
        let cred = if key.0 == 0 {
            Credentials {
                gid: key.1,
                ..Credentials::root()
            }
        } else {
            Credentials::user(key.0, key.1).with_groups(key.2.clone())
        };
        let process = self.kernel.spawn(cred);
        self.own.write().insert(process.pid());
        all.insert(key, process.clone());
        process
    }

    /// Kernel processes the mount made so far.
    pub(crate) fn processes(&self) -> Vec<Arc<Process>> {
        self.processes.lock().values().cloned().collect()
    }

    /// Closes every file still open, drops every node and ends the mount's processes.
    pub(crate) fn release_all(&self) {
        for (_, h) in self.files.lock().drain() {
            let _ = h.process.close(h.fd);
        }
        self.nodes.clear();
        for (_, p) in self.processes.lock().drain() {
            self.kernel.exit(p.pid());
        }
    }

    fn at(&self, ino: INodeNo) -> R<At> {
        self.nodes.at(ino.0).map_err(sys)
    }

    /// `VINO_IOC_GRAFT` on an open file: binds the module the caller staged through its client
    /// connection. Only the user who opened the descriptor may, and the kernel's own rules
    /// decide the rest (a file's `lock.grant` is its creator's, say). Returns the file whose
    /// pages Linux must drop before the answer, if the graft decides for its reads.
    ///
    /// On a directory (the mount keeps no handle for one), `dir.access` binds the directory's
    /// access graft: its owner only, as the kernel rules.
    fn fd_graft(&self, req: &Request, ino: INodeNo, fh: u64, arg: &[u8]) -> R<Option<u64>> {
        let g = vino_proto::ioctl::FdGraft::decode(arg).ok_or(Errno::EINVAL)?;
        if g.point == "dir.access" {
            let p = self.process(req);
            p.dir_access_bind_staged_at(self.at(ino)?, g.token).map_err(sys)?;
            return Ok(None);
        }
        let h = self.handle(fh)?;
        if h.process.credentials().uid != req.uid() {
            return Err(Errno::EPERM);
        }
        let point = match g.point.as_str() {
            "file.compute_ra" | "file.block_buddy" | "lock.grant" => format!("{}/{}", g.point, h.fd),
            "vas.pick_victim" => g.point.clone(),
            _ => return Err(Errno::EINVAL),
        };
        h.process.graft_load_staged(&point, g.token).map_err(sys)?;
        // A policy of the file's reads or of the caller's cached pages decides only for the
        // reads that reach VINO's cache: the pages Linux holds go, so the file's next reads do.
        if matches!(g.point.as_str(), "file.compute_ra" | "vas.pick_victim") {
            return Ok(Some(h.process.fstat(h.fd).map_err(sys)?.ino));
        }
        Ok(None)
    }

    /// `VINO_IOC_TRY` on an open file: starts the module the caller staged in shadow beside
    /// the descriptor's live policy, as [`Self::fd_graft`] would bind it (the same users may).
    /// Answers the process holding the descriptor and the graftpoint's name there, for the
    /// caller to stop it through its client connection.
    fn fd_try(&self, req: &Request, fh: u64, arg: &[u8]) -> R<Vec<u8>> {
        let g = vino_proto::ioctl::FdGraft::decode(arg).ok_or(Errno::EINVAL)?;
        let h = self.handle(fh)?;
        if h.process.credentials().uid != req.uid() {
            return Err(Errno::EPERM);
        }
        let point = match g.point.as_str() {
            "file.compute_ra" | "lock.grant" => format!("{}/{}", g.point, h.fd),
            "vas.pick_victim" => g.point.clone(),
            _ => return Err(Errno::EINVAL),
        };
        let options = vino_kernel::graft_try::TryOptions::default();
        h.process
            .graft_try_start_staged(&point, g.token, options)
            .map_err(sys)?;
        let answer = vino_proto::ioctl::FdGraft {
            token: h.process.pid(),
            point,
        };
        Ok(answer.encode().ok_or(Errno::ENAMETOOLONG)?.to_vec())
    }

    /// [`vino_proto::STREAM_XATTR`] of `ino`: its codec's hash, in hex.
    fn stream_xattr(&self, req: &Request, ino: INodeNo) -> R<Vec<u8>> {
        let st = self.process(req).stat_at(self.at(ino)?, b"", false).map_err(sys)?;
        let module = st.stream.ok_or(Errno::ENODATA)?;
        Ok(vino_kernel::module_name(&module).into_bytes())
    }

    /// Binds the stored codec whose hash `value` holds (trailing NULs and a newline allowed,
    /// as tools write them) to `ino`, or unbinds (`None`). The kernel's rules decide: the
    /// file's owner only, an empty file.
    fn bind_stream_xattr(&self, req: &Request, ino: INodeNo, value: Option<&[u8]>) -> R<()> {
        let module = match value {
            None => None,
            Some(v) => {
                let end = v.iter().rposition(|&b| b != 0 && b != b'\n').map_or(0, |i| i + 1);
                Some(vino_kernel::parse_module_name(&v[..end]).ok_or(Errno::EINVAL)?)
            }
        };
        self.process(req)
            .stream_bind_stored_at(self.at(ino)?, b"", module)
            .map_err(sys)
    }

    fn handle(&self, fh: u64) -> R<Arc<Handle>> {
        self.files.lock().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Looks `name` up in `parent` and records the node. A file that goes between the lookup
    /// and the node's reference (freed, its number perhaps reused) is looked up again.
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr) -> R<(FileAttr, Generation)> {
        let p = self.process(req);
        let at = self.at(parent)?;
        loop {
            let st = p.stat_at(at, name.as_bytes(), false).map_err(sys)?;
            match self.entry(&st) {
                Err(Errno::ESTALE) => continue,
                r => return r,
            }
        }
    }

    /// Records a node Linux is told of and gives its attributes.
    fn entry(&self, st: &Stat) -> R<(FileAttr, Generation)> {
        self.nodes.looked_up(st).map_err(sys)?;
        Ok((attr_of(st), Generation(u64::from(st.generation))))
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>) -> R<Stat> {
        if let Some(h) = fh.and_then(|fh| self.handle(fh.0).ok()) {
            return h.process.fstat(h.fd).map_err(sys);
        }
        self.process(req).stat_at(self.at(ino)?, b"", false).map_err(sys)
    }

    fn setattr(&self, req: &Request, ino: INodeNo, attrs: &Attrs, fh: Option<FileHandle>) -> R<FileAttr> {
        let handle = fh.and_then(|fh| self.handle(fh.0).ok());
        let st = match handle {
            // ftruncate: the descriptor's right to write, not the file's mode.
            Some(h) if attrs.size.is_some() && attrs.mode.is_none() && attrs.uid.is_none() && attrs.gid.is_none() => {
                let p = self.process(req);
                if p.pid() == h.process.pid() {
                    p.fsetattr(h.fd, attrs)
                } else {
                    p.setattr_at(self.at(ino)?, b"", false, attrs)
                }
            }
            _ => self.process(req).setattr_at(self.at(ino)?, b"", false, attrs),
        };
        Ok(attr_of(&st.map_err(sys)?))
    }

    /// Checks that the caller may list the directory. Only where Linux cannot open
    /// directories without asking (it offers no `FUSE_NO_OPENDIR_SUPPORT`): no handle is kept,
    /// listings are read by position.
    fn opendir(&self, req: &Request, ino: INodeNo) -> R<()> {
        self.process(req)
            .readdir_from_at(self.at(ino)?, b"", 0, 0)
            .map(drop)
            .map_err(sys)
    }

    /// Calls `add` with the entries of directory `ino` from position `offset` on, each with
    /// the position to resume at (its own plus one), until `add` says the reply is full. No
    /// listing is kept between calls: an entry keeps its position while it exists, so a
    /// listing read in parts while the directory changes still gives each entry present
    /// throughout exactly once.
    fn list(
        &self,
        req: &Request,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(&Arc<Process>, At, u64, DirEntry) -> bool,
    ) -> R<()> {
        let (p, at) = (self.process(req), self.at(ino)?);
        let mut from = offset;
        loop {
            let batch = p.readdir_from_at(at, b"", from, LIST_BATCH).map_err(sys)?;
            if batch.is_empty() {
                return Ok(());
            }
            for (pos, entry) in batch {
                if add(&p, at, pos + 1, entry) {
                    return Ok(());
                }
                from = pos + 1;
            }
        }
    }

    fn readdir(&self, req: &Request, ino: INodeNo, offset: u64, reply: &mut ReplyDirectory) -> R<()> {
        self.list(req, ino, offset, |_, _, next, e| {
            reply.add(INodeNo(e.ino), next, kind_of(e.kind), OsStr::from_bytes(&e.name))
        })
    }

    /// As [`State::readdir`], each entry with its attributes (`readdirplus`), so that Linux
    /// needs no lookup for it. Each entry given with attributes counts as a lookup, as a lookup's
    /// reply does; `.`, `..` and an entry whose name no longer names the listed file (or that
    /// the caller may not look up) go without (node id 0: Linux then only lists it).
    fn readdirplus(&self, req: &Request, ino: INodeNo, offset: u64, reply: &mut ReplyDirectoryPlus) -> R<()> {
        self.list(req, ino, offset, |p, at, next, e| {
            let dots = e.name == b"." || e.name == b"..";
            let found = (!dots)
                .then(|| p.stat_at(at, &e.name, false).ok())
                .flatten()
                .filter(|st| st.ino == e.ino)
                .and_then(|st| self.entry(&st).ok());
            let name = OsStr::from_bytes(&e.name);
            let full = match &found {
                Some((attr, generation)) => reply.add(INodeNo(e.ino), next, name, &self.ttl, attr, *generation),
                None => reply.add(
                    INodeNo(e.ino),
                    next,
                    name,
                    &Duration::ZERO,
                    &unlisted(kind_of(e.kind)),
                    Generation(0),
                ),
            };
            if full && found.is_some() {
                // Not sent: Linux does not hold the lookup counted for it.
                self.nodes.forget(e.ino, 1);
            }
            full
        })
    }

    fn keep_handle(&self, process: Arc<Process>, fd: Fd, flags: OpenFlags) -> u64 {
        let handle = Arc::new(Handle {
            process,
            fd,
            append: flags.append,
        });
        let fh = self.new_fh();
        self.files.lock().insert(fh, handle);
        fh
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: FuseOpenFlags) -> R<u64> {
        let p = self.process(req);
        let At::Inode { ino, generation } = self.at(ino)? else {
            unreachable!("nodes are inodes")
        };
        let flags = open_flags(flags.0, 0);
        let fd = p.open_inode(ino, generation, flags).map_err(sys)?;
        Ok(self.keep_handle(p, fd, flags))
    }

    /// Creates and opens, in one kernel call.
    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> R<(FileAttr, Generation, u64)> {
        let p = self.process(req);
        let mut open = open_flags(flags, (mode & !umask & 0o7777) as u16);
        open.create = true;
        open.exclusive = flags & libc::O_EXCL != 0;
        let fd = p.open_at(self.at(parent)?, name.as_bytes(), open).map_err(sys)?;
        // The descriptor holds the file: it cannot go before the node does.
        let made = p.fstat(fd).map_err(sys).and_then(|st| self.entry(&st));
        match made {
            Ok((attr, generation)) => Ok((attr, generation, self.keep_handle(p, fd, open))),
            Err(e) => {
                let _ = p.close(fd);
                Err(e)
            }
        }
    }

    fn read(&self, fh: u64, offset: u64, size: u32) -> R<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        let n = self.read_into(fh, offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Reads into `buf` (the ring's reply buffer, or one of `read`'s); returns the bytes read.
    pub(crate) fn read_into(&self, fh: u64, offset: u64, buf: &mut [u8]) -> R<usize> {
        let h = self.handle(fh)?;
        h.process.pread(h.fd, buf, offset).map_err(sys)
    }

    fn write(&self, fh: u64, offset: u64, data: &[u8]) -> R<u32> {
        let h = self.handle(fh)?;
        let n = if h.append {
            h.process.write(h.fd, data)
        } else {
            h.process.pwrite(h.fd, data, offset)
        };
        Ok(n.map_err(sys)? as u32)
    }

    /// `copy_file_range`: up to `len` bytes of one open file into another, read and written
    /// by each descriptor's process as its reads and writes are, so that `cp` copies a file in
    /// one request instead of a read and a write per chunk. At most [`COPY_CHUNK`] per request,
    /// as a write carries at most that: the caller asks again for the rest. Returns the bytes
    /// copied (0 at the end of the source); a write that fails after some were copied returns
    /// what was. Linux checked the descriptors' modes, `O_APPEND` and overlaps before asking.
    fn copy_range(&self, fh_in: u64, off_in: u64, fh_out: u64, off_out: u64, len: u64) -> R<u32> {
        let (from, to) = (self.handle(fh_in)?, self.handle(fh_out)?);
        let size = from.process.fstat(from.fd).map_err(sys)?.size;
        let n = len.min(size.saturating_sub(off_in)).min(COPY_CHUNK as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let mut buf = vec![0u8; n];
        let got = from.process.pread(from.fd, &mut buf, off_in).map_err(sys)?;
        let mut done = 0;
        while done < got {
            match to.process.pwrite(to.fd, &buf[done..got], off_out + done as u64) {
                Ok(0) => break,
                Ok(w) => done += w,
                Err(e) if done == 0 => return Err(sys(e)),
                Err(_) => break,
            }
        }
        Ok(done as u32)
    }

    fn release(&self, fh: u64, flock_owner: Option<LockOwner>) -> R<()> {
        let h = self.files.lock().remove(&fh).ok_or(Errno::EBADF)?;
        if let Some(owner) = flock_owner {
            let _ = h.process.lock_for(h.fd, owner.0, LockRequest::unlock(0, 0), false);
            self.lock_pids.lock().remove(&owner.0);
        }
        h.process.close(h.fd).map_err(sys)
    }

    /// A close by some Linux process: POSIX drops its locks on the file.
    fn flush(&self, fh: u64, owner: LockOwner) -> R<()> {
        let h = self.handle(fh)?;
        h.process
            .lock_for(h.fd, owner.0, LockRequest::unlock(0, 0), false)
            .map_err(sys)?;
        self.lock_pids.lock().remove(&owner.0);
        Ok(())
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32) -> R<(FileAttr, Generation)> {
        let p = self.process(req);
        let mode = (mode & !umask & 0o7777) as u16;
        // The new directory may go (rmdir by another client) before its node is recorded.
        let st = p.mkdir_at(self.at(parent)?, name.as_bytes(), mode).map_err(sys)?;
        self.entry(&st)
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> R<(FileAttr, Generation)> {
        let p = self.process(req);
        let kind = kind_of_mode(mode)?;
        let perm = (mode & !umask & 0o7777) as u16;
        let st = p
            .mknod_at(self.at(parent)?, name.as_bytes(), kind, perm, u64::from(rdev))
            .map_err(sys)?;
        self.entry(&st)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, name: &OsStr, target: &Path) -> R<(FileAttr, Generation)> {
        let p = self.process(req);
        let st = p
            .symlink_at(target.as_os_str().as_bytes(), self.at(parent)?, name.as_bytes())
            .map_err(sys)?;
        self.entry(&st)
    }

    fn link(&self, req: &Request, ino: INodeNo, parent: INodeNo, name: &OsStr) -> R<(FileAttr, Generation)> {
        let p = self.process(req);
        let st = p
            .link_at(self.at(ino)?, b"", self.at(parent)?, name.as_bytes(), false)
            .map_err(sys)?;
        self.entry(&st)
    }

    fn rename(&self, req: &Request, from: (INodeNo, &OsStr), to: (INodeNo, &OsStr), flags: FuseRenameFlags) -> R<()> {
        if !(flags - FuseRenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported.
            return Err(Errno::EINVAL);
        }
        let flags = RenameFlags {
            no_replace: flags.contains(FuseRenameFlags::RENAME_NOREPLACE),
        };
        let p = self.process(req);
        p.rename_at(
            self.at(from.0)?,
            from.1.as_bytes(),
            self.at(to.0)?,
            to.1.as_bytes(),
            flags,
        )
        .map_err(sys)
    }

    /// A reply to an extended-attribute read: the size only if `size` is 0, `ERANGE` if the
    /// caller's buffer is too small.
    fn xattr_reply(data: R<Vec<u8>>, size: u32, reply: ReplyXattr) {
        match data {
            Err(e) => reply.error(e),
            Ok(d) if size == 0 => reply.size(d.len() as u32),
            Ok(d) if d.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(d) => reply.data(&d),
        }
    }

    /// `F_SETLK` / `F_SETLKW` (and `flock`, which Linux sends the same way for the whole file,
    /// owned by the open file): the kernel's lock manager, so that the mount's programs and
    /// the socket's clients conflict, and `lock.grant` grafts decide for both.
    #[allow(clippy::too_many_arguments)]
    fn setlk(
        &self,
        fh: u64,
        owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let req = match lock_request(start, end, typ) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        if req.kind != LockType::Unlock {
            self.lock_pids.lock().insert(owner.0, pid);
        }
        if !sleep || req.kind == LockType::Unlock {
            return match h.process.lock_for(h.fd, owner.0, req, false) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(sys(e)),
            };
        }
        // Try without waiting first: most locks are free, and need no thread.
        match h.process.lock_for(h.fd, owner.0, req, false) {
            Ok(()) => return reply.ok(),
            Err(e) if e.errno != vino_kernel::Errno::Again => return reply.error(sys(e)),
            Err(_) => {}
        }
        // A blocking wait holds a thread of its own (so that the mount's threads stay free to
        // serve the unlock that ends it). The kernel charges each wait to the caller: one
        // user's waits beyond its share get ENOLCK at once, and the thread ends.
        let _ = std::thread::Builder::new()
            .name("vino-fuse-lock".into())
            .spawn(move || match h.process.lock_for(h.fd, owner.0, req, true) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(sys(e)),
            });
    }

    fn getlk(&self, fh: u64, owner: LockOwner, start: u64, end: u64, typ: i32, reply: ReplyLock) {
        let result = self.handle(fh).and_then(|h| {
            let req = lock_request(start, end, typ)?;
            h.process.getlk_for(h.fd, owner.0, req).map_err(sys)
        });
        match result {
            Err(e) => reply.error(e),
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Ok(Some(lock)) => {
                let end = if lock.range.end == u64::MAX {
                    i64::MAX as u64
                } else {
                    lock.range.end - 1
                };
                let typ = match lock.kind {
                    vino_kernel::LockKind::Read => libc::F_RDLCK,
                    vino_kernel::LockKind::Write => libc::F_WRLCK,
                };
                let pid = self.lock_pids.lock().get(&lock.owner).copied().unwrap_or(0);
                reply.locked(lock.range.start, end, typ, pid);
            }
        }
    }
}

/// A FUSE lock range (`start..=end`, `end` = `OFFSET_MAX` for "to the end") as the kernel's.
fn lock_request(start: u64, end: u64, typ: i32) -> R<LockRequest> {
    let len = if end >= i64::MAX as u64 {
        0
    } else if end < start {
        return Err(Errno::EINVAL);
    } else {
        end - start + 1
    };
    match typ {
        libc::F_RDLCK => Ok(LockRequest::read(start, len)),
        libc::F_WRLCK => Ok(LockRequest::write(start, len)),
        libc::F_UNLCK => Ok(LockRequest::unlock(start, len)),
        _ => Err(Errno::EINVAL),
    }
}

/// The kernel's open flags for Linux's (`mode` for a file the open creates).
fn open_flags(flags: i32, mode: u16) -> OpenFlags {
    let acc = FuseOpenFlags(flags).acc_mode();
    OpenFlags {
        read: acc != OpenAccMode::O_WRONLY,
        write: acc != OpenAccMode::O_RDONLY,
        truncate: flags & libc::O_TRUNC != 0,
        append: flags & libc::O_APPEND != 0,
        mode,
        ..OpenFlags::default()
    }
}

/// The FUSE file system: a thin layer over [`State`].
pub(crate) struct VinoFs(pub(crate) Arc<State>);

/// Replies `Ok` values with `$ok`, errors with their errno.
macro_rules! answer {
    ($reply:ident, $result:expr, |$v:pat_param| $ok:expr) => {
        match $result {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for VinoFs {
    fn request_arrived(&self) {
        self.0.activity.busy();
    }

    fn request_served(&self, opcode: u32, took: Duration) {
        self.0.served.record(opcode, took);
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // O_TRUNC comes with the open (one system call, not an open and a setattr); shared
        // mappings of direct-I/O files are allowed (sqlite maps its shared-memory file); locks
        // come to VINO's lock manager; set-ID bits are the kernel's to drop on write, truncate
        // and chown (Linux would otherwise send a chmod as the writer, which a non-owner may not
        // do).
        let wanted = InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP
            | InitFlags::FUSE_POSIX_LOCKS
            | InitFlags::FUSE_FLOCK_LOCKS
            | InitFlags::FUSE_HANDLE_KILLPRIV
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_NO_OPENDIR_SUPPORT;
        let granted = wanted & config.capabilities();
        let _ = config.add_capabilities(granted);
        self.0
            .no_opendir
            .store(granted.contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT), Ordering::Relaxed);
        // FUSE over io_uring, when asked for and offered; the ring's payload buffers hold the
        // largest write.
        if self.0.ring.wanted && config.capabilities().contains(InitFlags::FUSE_OVER_IO_URING) {
            let _ = config.add_capabilities(InitFlags::FUSE_OVER_IO_URING);
            let _ = config.set_max_write(crate::ring::PAYLOAD as u32);
            self.0.ring.granted.store(true, std::sync::atomic::Ordering::Relaxed);
        } else {
            self.0.no_ring();
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.0.release_all();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        match self.0.lookup(req, parent, name) {
            Ok((a, g)) => reply.entry(&ttl, &a, g),
            // Linux keeps a name that is not there too (a negative entry: node id 0), so a
            // program searching paths asks once; a name made by another client invalidates it
            // as it does a positive entry.
            Err(Errno::ENOENT) => reply.entry(&ttl, &unlisted(fuser::FileType::RegularFile), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.0.nodes.forget(ino.0, nlookup);
        self.0.gather_forgets();
    }

    fn batch_forget(&self, _req: &Request, nodes: &[fuser::ForgetOne]) {
        for node in nodes {
            self.0.nodes.forget(node.nodeid().0, node.nlookup());
        }
        self.0.gather_forgets();
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        answer!(reply, self.0.getattr(req, ino, fh), |st| reply
            .attr(&self.0.ttl, &attr_of(&st)));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let attrs = Attrs {
            mode: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        answer!(reply, self.0.setattr(req, ino, &attrs, fh), |a| reply
            .attr(&self.0.ttl, &a));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let target = self
            .0
            .at(ino)
            .and_then(|at| self.0.process(req).readlink_at(at, b"").map_err(sys));
        answer!(reply, target, |t| reply.data(&t));
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.mknod(req, parent, name, mode, umask, rdev), |(a, g)| {
            reply.entry(&ttl, &a, g)
        });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.mkdir(req, parent, name, mode, umask), |(a, g)| reply
            .entry(&ttl, &a, g));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self
            .0
            .at(parent)
            .and_then(|at| self.0.process(req).unlink_at(at, name.as_bytes()).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self
            .0
            .at(parent)
            .and_then(|at| self.0.process(req).rmdir_at(at, name.as_bytes()).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.symlink(req, parent, link_name, target), |(a, g)| reply
            .entry(&ttl, &a, g));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.0.rename(req, (parent, name), (newparent, newname), flags);
        answer!(reply, result, |()| reply.ok());
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.link(req, ino, newparent, newname), |(a, g)| reply
            .entry(&ttl, &a, g));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: FuseOpenFlags, reply: ReplyOpen) {
        let how = self.0.open_reply(flags.0);
        answer!(reply, self.0.open(req, ino, flags), |fh| reply
            .opened(FileHandle(fh), how));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (ttl, how) = (self.0.ttl, self.0.open_reply(flags));
        answer!(reply, self.0.create(req, parent, name, mode, umask, flags), |(
            a,
            g,
            fh,
        )| {
            reply.created(&ttl, &a, g, FileHandle(fh), how)
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        answer!(reply, self.0.read(fh.0, offset, size), |data| reply.data(&data));
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        answer!(reply, self.0.write(fh.0, offset, data), |n| reply.written(n));
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        answer!(reply, self.0.flush(fh.0, lock_owner), |()| reply.ok());
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: FuseOpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        answer!(reply, self.0.release(fh.0, lock_owner), |()| reply.ok());
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let result = match cmd {
            vino_proto::ioctl::GRAFT => self.0.fd_graft(req, ino, fh.0, in_data),
            vino_proto::ioctl::TRY => match self.0.fd_try(req, fh.0, in_data) {
                Ok(out) => return reply.ioctl(0, &out),
                Err(e) => Err(e),
            },
            _ => Err(Errno::ENOTTY),
        };
        match result {
            Err(e) => reply.error(e),
            Ok(None) => reply.ioctl(0, &[]),
            // The answer waits for the drop, on the notices' thread, not on this one.
            Ok(Some(ino)) => self.0.notices.drop_data(ino, move || reply.ioctl(0, &[])),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let copied = self.0.copy_range(fh_in.0, offset_in, fh_out.0, offset_out, len);
        answer!(reply, copied, |n| reply.written(n));
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self.0.handle(fh.0).and_then(|h| h.process.fsync(h.fd).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: FuseOpenFlags, reply: ReplyOpen) {
        // Listings are read by position, so an open directory needs no handle: where Linux
        // allows, the first opendir answers ENOSYS and Linux asks no more (nor for releasedir),
        // a round trip each saved per directory a program walks. Linux checks the caller's
        // permission itself (`default_permissions`), and may keep the listing in its page
        // cache across opens (its default then): every change made through the mount resets
        // it, and a change by anyone else sends an invalidation of the directory's inode,
        // which drops it.
        if self.0.no_opendir.load(Ordering::Relaxed) {
            return reply.error(Errno::ENOSYS);
        }
        answer!(reply, self.0.opendir(req, ino), |()| reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        ));
    }

    fn readdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        answer!(reply, self.0.readdir(req, ino, offset, &mut reply), |()| reply.ok());
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        answer!(reply, self.0.readdirplus(req, ino, offset, &mut reply), |()| reply.ok());
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: FuseOpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self
            .0
            .at(ino)
            .and_then(|at| self.0.process(req).fsync_at(at, b"").map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let p = self.0.process(req);
        let s = p.statfs();
        let bs = vino_kernel::storage::BS as u32;
        let max_name = vino_kernel::storage::MAX_NAME as u32;
        // As ext4: what users other than root may still take leaves out root's reserve.
        let available = if p.credentials().uid == 0 {
            s.free_blocks
        } else {
            s.free_blocks.saturating_sub(s.reserved_blocks)
        };
        reply.statfs(
            s.block_count,
            s.free_blocks,
            available,
            s.inodes,
            s.free_inodes,
            bs,
            max_name,
            bs,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let how = match flags {
            0 => vino_kernel::storage::XattrSet::Any,
            libc::XATTR_CREATE => vino_kernel::storage::XattrSet::Create,
            libc::XATTR_REPLACE => vino_kernel::storage::XattrSet::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        if name.as_bytes() == vino_proto::STREAM_XATTR.as_bytes() {
            return answer!(reply, self.0.bind_stream_xattr(req, ino, Some(value)), |()| reply.ok());
        }
        let result = self.0.at(ino).and_then(|at| {
            self.0
                .process(req)
                .setxattr_at(at, b"", false, name.as_bytes(), value, how)
                .map_err(sys)
        });
        answer!(reply, result, |()| reply.ok());
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if name.as_bytes() == vino_proto::STREAM_XATTR.as_bytes() {
            return State::xattr_reply(self.0.stream_xattr(req, ino), size, reply);
        }
        let at = match self.0.at(ino) {
            Ok(at) => at,
            Err(e) => return reply.error(e),
        };
        let value = self.0.process(req).getxattr_at(at, b"", false, name.as_bytes());
        State::xattr_reply(value.map_err(sys), size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let at = match self.0.at(ino) {
            Ok(at) => at,
            Err(e) => return reply.error(e),
        };
        let names = self.0.process(req).listxattr_at(at, b"", false).map(|names| {
            names.into_iter().fold(Vec::new(), |mut all, n| {
                all.extend_from_slice(&n);
                all.push(0);
                all
            })
        });
        State::xattr_reply(names.map_err(sys), size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if name.as_bytes() == vino_proto::STREAM_XATTR.as_bytes() {
            return answer!(reply, self.0.bind_stream_xattr(req, ino, None), |()| reply.ok());
        }
        let result = self.0.at(ino).and_then(|at| {
            self.0
                .process(req)
                .removexattr_at(at, b"", false, name.as_bytes())
                .map_err(sys)
        });
        answer!(reply, result, |()| reply.ok());
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let want = mask.bits() as u32 & 7;
        let result = self
            .0
            .at(ino)
            .and_then(|at| self.0.process(req).access_at(at, b"", want, false).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        self.0.getlk(fh.0, lock_owner, start, end, typ, reply);
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.0.setlk(fh.0, lock_owner, start, end, typ, pid, sleep, reply);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Allocation, punched holes and zeroed ranges; collapse and insert are EOPNOTSUPP.
        let result = FallocMode::from_linux(mode as u32).map_err(sys).and_then(|mode| {
            let h = self.0.handle(fh.0)?;
            h.process.fallocate_mode(h.fd, mode, offset, length).map_err(sys)
        });
        answer!(reply, result, |()| reply.ok());
    }
}
