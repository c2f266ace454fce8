//! The FUSE requests, each served by system calls of the kernel process of the caller's uid/gid.

use crate::MountConfig;
use crate::nodes::{Nodes, ROOT};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    OpenAccMode, OpenFlags as FuseOpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vino_kernel::{Credentials, Fd, FileType, Kernel, OpenFlags, Process, SetTime, Stat, SysError};

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
        blocks: st.blocks * (vino_fs::BS as u64 / 512),
        atime: time(st.atime_ns),
        mtime: time(st.mtime_ns),
        ctime: time(st.ctime_ns),
        crtime: time(st.ctime_ns),
        kind: kind_of(st.kind),
        perm: (st.mode & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: 0,
        blksize: vino_fs::BS as u32,
        flags: 0,
    }
}

fn kind_of(kind: FileType) -> fuser::FileType {
    match kind {
        FileType::Directory => fuser::FileType::Directory,
        FileType::Regular => fuser::FileType::RegularFile,
    }
}

fn name_of(name: &OsStr) -> R<&str> {
    name.to_str().ok_or(Errno::EINVAL)
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
    ino: u64,
    /// Writes go to the end (the kernel's `write` finds it; `pwrite` would not).
    append: bool,
}

/// A directory listing taken at opendir, so offsets stay valid while the directory changes.
type Listing = Arc<Vec<(u64, fuser::FileType, String)>>;

/// Everything the mount keeps between requests.
pub(crate) struct State {
    kernel: Arc<Kernel>,
    ttl: Duration,
    nodes: Mutex<Nodes>,
    files: Mutex<HashMap<u64, Arc<Handle>>>,
    dirs: Mutex<HashMap<u64, Listing>>,
    processes: Mutex<HashMap<(u32, u32), Arc<Process>>>,
    next_fh: AtomicU64,
}

impl State {
    pub(crate) fn new(kernel: Arc<Kernel>, config: &MountConfig) -> State {
        assert_eq!(vino_fs::ROOT_INO, ROOT, "FUSE's root inode must be the file system's");
        State {
            kernel,
            ttl: config.attr_ttl,
            nodes: Mutex::default(),
            files: Mutex::default(),
            dirs: Mutex::default(),
            processes: Mutex::default(),
            next_fh: AtomicU64::new(1),
        }
    }

    /// The kernel process of a uid/gid pair, made on first use (uid 0 is privileged).
    fn process(&self, req: &Request) -> Arc<Process> {
        let key = (req.uid(), req.gid());
        let mut all = self.processes.lock();
        let process = all.entry(key).or_insert_with(|| {
            let cred = if key.0 == 0 {
                Credentials {
                    gid: key.1,
                    ..Credentials::root()
                }
            } else {
                Credentials::user(key.0, key.1)
            };
            self.kernel.spawn(cred)
        });
        process.clone()
    }

    /// Kernel processes the mount made so far.
    pub(crate) fn processes(&self) -> Vec<Arc<Process>> {
        self.processes.lock().values().cloned().collect()
    }

    /// Closes every file still open and ends the mount's processes.
    pub(crate) fn release_all(&self) {
        for (_, h) in self.files.lock().drain() {
            let _ = h.process.close(h.fd);
        }
        self.dirs.lock().clear();
        for (_, p) in self.processes.lock().drain() {
            self.kernel.exit(p.pid());
        }
    }

    fn path(&self, ino: u64) -> R<String> {
        self.nodes.lock().path(ino).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> R<(String, String)> {
        let name = name_of(name)?;
        let path = self.nodes.lock().child_path(parent, name).ok_or(Errno::ENOENT)?;
        Ok((path, name.to_string()))
    }

    fn handle(&self, fh: u64) -> R<Arc<Handle>> {
        self.files.lock().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    /// Any open handle on `ino` (for a file that has lost its name but is still open).
    fn handle_of(&self, ino: u64) -> Option<Arc<Handle>> {
        self.files.lock().values().find(|h| h.ino == ino).cloned()
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Records the reply of a lookup-like request and gives its attributes.
    fn entry(&self, st: &Stat, parent: u64, name: &str) -> (FileAttr, Generation) {
        self.nodes.lock().looked_up(st.ino, parent, name);
        (attr_of(st), Generation(u64::from(st.generation)))
    }

    fn stat(&self, p: &Process, ino: u64, fh: Option<FileHandle>) -> R<Stat> {
        if let Some(h) = fh.and_then(|fh| self.handle(fh.0).ok()) {
            return h.process.fstat(h.fd).map_err(sys);
        }
        match self.path(ino) {
            Ok(path) => p.stat(&path).map_err(sys),
            Err(e) => {
                let h = self.handle_of(ino).ok_or(e)?;
                h.process.fstat(h.fd).map_err(sys)
            }
        }
    }

    fn lookup(&self, req: &Request, parent: u64, name: &OsStr) -> R<(FileAttr, Generation)> {
        let (path, name) = self.child(parent, name)?;
        let st = self.process(req).stat(&path).map_err(sys)?;
        Ok(self.entry(&st, parent, &name))
    }

    /// Sets the size through a descriptor open for writing: the request's own, else a
    /// temporary one opened by the caller (so the caller needs write permission).
    fn truncate(&self, p: &Process, ino: u64, fh: Option<FileHandle>, size: u64) -> R<()> {
        let h = fh.and_then(|fh| self.handle(fh.0).ok());
        if let Some(h) = h
            && h.process.ftruncate(h.fd, size).is_ok()
        {
            return Ok(());
        }
        let path = self.path(ino)?;
        let fd = p
            .open(
                &path,
                OpenFlags {
                    write: true,
                    ..OpenFlags::default()
                },
            )
            .map_err(sys)?;
        let done = p.ftruncate(fd, size).map_err(sys);
        p.close(fd).map_err(sys)?;
        done
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        req: &Request,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> R<FileAttr> {
        let p = self.process(req);
        if let Some(size) = size {
            self.truncate(&p, ino, fh, size)?;
        }
        if mode.is_some() || uid.is_some() || gid.is_some() || atime.is_some() || mtime.is_some() {
            let path = self.path(ino)?;
            if let Some(mode) = mode {
                p.chmod(&path, (mode & 0o7777) as u16).map_err(sys)?;
            }
            if uid.is_some() || gid.is_some() {
                p.chown(&path, uid, gid).map_err(sys)?;
            }
            if atime.is_some() || mtime.is_some() {
                p.utimes(&path, set_time(atime), set_time(mtime)).map_err(sys)?;
            }
        }
        Ok(attr_of(&self.stat(&p, ino, fh)?))
    }

    fn opendir(&self, req: &Request, ino: u64) -> R<u64> {
        let path = self.path(ino)?;
        let entries = self.process(req).readdir(&path).map_err(sys)?;
        let parent = self.nodes.lock().parent(ino).unwrap_or(ROOT);
        let mut listing = vec![
            (ino, fuser::FileType::Directory, ".".into()),
            (parent, fuser::FileType::Directory, "..".into()),
        ];
        listing.extend(entries.into_iter().map(|e| (e.ino, kind_of(e.kind), e.name_lossy())));
        let fh = self.new_fh();
        self.dirs.lock().insert(fh, Arc::new(listing));
        Ok(fh)
    }

    /// Fills a readdir reply from entry `offset` on; each entry's offset is the next one's index.
    fn readdir(&self, fh: u64, offset: u64, reply: &mut ReplyDirectory) -> R<()> {
        let listing = self.dirs.lock().get(&fh).cloned().ok_or(Errno::EBADF)?;
        for (i, (ino, kind, name)) in listing.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        Ok(())
    }

    fn open_handle(&self, process: Arc<Process>, path: &str, flags: OpenFlags) -> R<(u64, Arc<Handle>)> {
        let fd = process.open(path, flags).map_err(sys)?;
        let ino = process.inode(fd).map_err(sys)?;
        let handle = Arc::new(Handle {
            process,
            fd,
            ino,
            append: flags.append,
        });
        let fh = self.new_fh();
        self.files.lock().insert(fh, handle.clone());
        Ok((fh, handle))
    }

    fn open(&self, req: &Request, ino: u64, flags: FuseOpenFlags) -> R<u64> {
        let path = self.path(ino)?;
        Ok(self.open_handle(self.process(req), &path, open_flags(flags.0, 0))?.0)
    }

    /// Creates and opens. The kernel checks the new file's mode against the open; POSIX lets the
    /// creator open it whatever the mode (git makes objects 0444 and opens them for writing), so
    /// an unprivileged creator gets owner read/write until the file is open.
    fn create(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> R<(FileAttr, Generation, u64)> {
        let (path, name) = self.child(parent, name)?;
        let p = self.process(req);
        let mode = (mode & !umask & 0o7777) as u16;
        let widen = !p.credentials().privileged && mode & 0o600 != 0o600;
        let mut open = open_flags(flags, if widen { mode | 0o600 } else { mode });
        open.create = true;
        open.exclusive = flags & libc::O_EXCL != 0;
        let (fh, h) = self.open_handle(p.clone(), &path, open)?;
        if widen {
            p.chmod(&path, mode).map_err(sys)?;
        }
        let st = h.process.fstat(h.fd).map_err(sys)?;
        let (attr, generation) = self.entry(&st, parent, &name);
        Ok((attr, generation, fh))
    }

    fn read(&self, fh: u64, offset: u64, size: u32) -> R<Vec<u8>> {
        let h = self.handle(fh)?;
        let mut buf = vec![0u8; size as usize];
        let n = h.process.pread(h.fd, &mut buf, offset).map_err(sys)?;
        buf.truncate(n);
        Ok(buf)
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

    fn release(&self, fh: u64) -> R<()> {
        let h = self.files.lock().remove(&fh).ok_or(Errno::EBADF)?;
        h.process.close(h.fd).map_err(sys)
    }

    fn mkdir(&self, req: &Request, parent: u64, name: &OsStr, mode: u32, umask: u32) -> R<(FileAttr, Generation)> {
        let (path, name) = self.child(parent, name)?;
        let p = self.process(req);
        p.mkdir(&path, (mode & !umask & 0o7777) as u16).map_err(sys)?;
        let st = p.stat(&path).map_err(sys)?;
        Ok(self.entry(&st, parent, &name))
    }

    /// unlink or rmdir: the name goes, and with it the path recorded for its inode.
    fn remove(&self, req: &Request, parent: u64, name: &OsStr, dir: bool) -> R<()> {
        let (path, name) = self.child(parent, name)?;
        let p = self.process(req);
        let ino = p.stat(&path).map_err(sys)?.ino;
        if dir { p.rmdir(&path) } else { p.unlink(&path) }.map_err(sys)?;
        self.nodes.lock().removed(ino, parent, &name);
        Ok(())
    }

    fn rename(&self, req: &Request, from: (u64, &OsStr), to: (u64, &OsStr), flags: RenameFlags) -> R<()> {
        let (from_path, _) = self.child(from.0, from.1)?;
        let (to_path, to_name) = self.child(to.0, to.1)?;
        let p = self.process(req);
        let moved = p.stat(&from_path).map_err(sys)?.ino;
        let replaced = p.stat(&to_path).ok().map(|st| st.ino);
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && replaced.is_some() {
            return Err(Errno::EEXIST);
        }
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            return Err(Errno::EINVAL);
        }
        p.rename(&from_path, &to_path).map_err(sys)?;
        let mut nodes = self.nodes.lock();
        if let Some(old) = replaced.filter(|&old| old != moved) {
            nodes.removed(old, to.0, &to_name);
        }
        nodes.moved(moved, to.0, &to_name);
        Ok(())
    }

    fn link(&self, req: &Request, ino: u64, parent: u64, name: &OsStr) -> R<(FileAttr, Generation)> {
        let from = self.path(ino)?;
        let (to, name) = self.child(parent, name)?;
        let p = self.process(req);
        p.link(&from, &to).map_err(sys)?;
        let st = p.stat(&to).map_err(sys)?;
        Ok(self.entry(&st, parent, &name))
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
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // O_TRUNC comes with the open (one system call, not an open and a setattr); shared
        // mappings of direct-I/O files are allowed (sqlite maps its shared-memory file).
        let wanted = InitFlags::FUSE_ATOMIC_O_TRUNC | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        let _ = config.add_capabilities(wanted & config.capabilities());
        Ok(())
    }

    fn destroy(&mut self) {
        self.0.release_all();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.lookup(req, parent.0, name), |(a, g)| reply
            .entry(&ttl, &a, g));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.0.nodes.lock().forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let p = self.0.process(req);
        answer!(reply, self.0.stat(&p, ino.0, fh), |st| reply
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
        let result = self.0.setattr(req, ino.0, mode, uid, gid, size, atime, mtime, fh);
        answer!(reply, result, |a| reply.attr(&self.0.ttl, &a));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.mkdir(req, parent.0, name, mode, umask), |(a, g)| reply
            .entry(&ttl, &a, g));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(reply, self.0.remove(req, parent.0, name, false), |()| reply.ok());
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(reply, self.0.remove(req, parent.0, name, true), |()| reply.ok());
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.0.rename(req, (parent.0, name), (newparent.0, newname), flags);
        answer!(reply, result, |()| reply.ok());
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let ttl = self.0.ttl;
        answer!(reply, self.0.link(req, ino.0, newparent.0, newname), |(a, g)| reply
            .entry(&ttl, &a, g));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: FuseOpenFlags, reply: ReplyOpen) {
        answer!(reply, self.0.open(req, ino.0, flags), |fh| reply
            .opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO));
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
        let ttl = self.0.ttl;
        answer!(
            reply,
            self.0.create(req, parent.0, name, mode, umask, flags),
            |(a, g, fh)| { reply.created(&ttl, &a, g, FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO) }
        );
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: FuseOpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
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
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        answer!(reply, self.0.write(fh.0, offset, data), |n| reply.written(n));
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _lock_owner: fuser::LockOwner, reply: ReplyEmpty) {
        // Data lives in VINO's cache, which every process shares: nothing to hand over at close.
        answer!(reply, self.0.handle(fh.0), |_| reply.ok());
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: FuseOpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        answer!(reply, self.0.release(fh.0), |()| reply.ok());
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self.0.handle(fh.0).and_then(|h| h.process.fsync(h.fd).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: FuseOpenFlags, reply: ReplyOpen) {
        answer!(reply, self.0.opendir(req, ino.0), |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        answer!(reply, self.0.readdir(fh.0, offset, &mut reply), |()| reply.ok());
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: FuseOpenFlags, reply: ReplyEmpty) {
        self.0.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self
            .0
            .path(ino.0)
            .and_then(|path| self.0.process(req).fsync_path(&path).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.0.process(req).statfs();
        let bs = vino_fs::BS as u32;
        let max_name = vino_fs::MAX_NAME as u32;
        reply.statfs(
            s.block_count,
            s.free_blocks,
            s.free_blocks,
            s.inodes,
            s.free_inodes,
            bs,
            max_name,
            bs,
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let want = (mask.bits() & 7) as u32;
        let result = self
            .0
            .path(ino.0)
            .and_then(|path| self.0.process(req).access(&path, want).map_err(sys));
        answer!(reply, result, |()| reply.ok());
    }
}
