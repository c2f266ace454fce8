//! A process and its system calls.

use crate::cache_io::{CacheTarget, FileBacking};
use crate::error::{Errno, SysError, SysResult};
use crate::files::{Fd, FdTable, OpenFile, OpenFlags};
use crate::perm::{self, Credentials, EXEC, READ, WRITE};
use crate::{Kernel, Pid};
use parking_lot::Mutex;
use std::sync::Arc;
use vino_cache::{IoCtx, ReadAhead};
use vino_fs::{DirEntry, FileType, NewFile, Stat};
use vino_graft::{GraftEvent, GraftInfo, ManagedSlot, Namespace, Owner, Principal, SlotInfo};

/// A graft system call on a named graftpoint, for callers that dispatch on data (the daemon).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraftCall {
    Load { wasm: Vec<u8> },
    Unload,
    WriteMemory { offset: u32, bytes: Vec<u8> },
    Call { control: String, args: Vec<i64> },
}

/// A process: credentials, open files, and the graftpoints it may graft.
pub struct Process {
    pid: Pid,
    cred: Credentials,
    kernel: Arc<Kernel>,
    files: Mutex<FdTable>,
    /// Graftpoints on objects this process owns: `vas.pick_victim`, `file.compute_ra/<fd>`,
    /// `file.block_buddy/<fd>`.
    pub(crate) namespace: Namespace,
    events: Arc<Mutex<Vec<GraftEvent>>>,
}

/// One open count of a file taken while an open is set up; given back when dropped unless
/// [`OpenHold::keep`] handed it to the new descriptor (whose close gives it back).
struct OpenHold<'p> {
    process: &'p Process,
    ino: u64,
    kept: bool,
}

impl<'p> OpenHold<'p> {
    fn new(process: &'p Process, ino: u64) -> Self {
        process.kernel.files.opened(ino);
        OpenHold {
            process,
            ino,
            kept: false,
        }
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for OpenHold<'_> {
    fn drop(&mut self) {
        if !self.kept {
            // The open failed; freeing a file it kept alive can fail only as a later unlink would.
            let _ = self.process.release_open(self.ino);
        }
    }
}

/// Splits an absolute path into its directory and last name.
fn split(path: &str) -> SysResult<(&str, &str)> {
    let trimmed = path.trim_end_matches('/');
    if !path.starts_with('/') || trimmed.is_empty() {
        return Err(SysError::new(
            Errno::Inval,
            format!("`{path}`: an absolute path to a file is needed"),
        ));
    }
    let cut = trimmed.rfind('/').expect("starts with /");
    Ok((if cut == 0 { "/" } else { &trimmed[..cut] }, &trimmed[cut + 1..]))
}

impl Process {
    pub(crate) fn new(kernel: Arc<Kernel>, pid: Pid, cred: Credentials) -> Arc<Process> {
        let namespace = Namespace::new();
        namespace.register(kernel.cache.register_process(pid));
        Arc::new(Process {
            pid,
            cred,
            kernel,
            files: Mutex::new(FdTable::default()),
            namespace,
            events: Arc::default(),
        })
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    pub fn credentials(&self) -> &Credentials {
        &self.cred
    }

    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    pub(crate) fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    fn fs(&self) -> &vino_fs::FileSystem {
        &self.kernel.fs
    }

    fn check(&self, stat: &Stat, want: u32, path: &str) -> SysResult<()> {
        if perm::may(&self.cred, stat, want) {
            Ok(())
        } else {
            Err(SysError::new(Errno::Acces, format!("permission denied: {path}")))
        }
    }

    /// The directory `dir` (checked for search and, if `write`, for changing its entries).
    fn dir(&self, dir: &str, write: bool) -> SysResult<u64> {
        let ino = self.fs().resolve(dir)?;
        let st = self.fs().stat(ino)?;
        if st.kind != FileType::Directory {
            return Err(SysError::new(Errno::NotDir, format!("not a directory: {dir}")));
        }
        self.check(&st, EXEC | if write { WRITE } else { 0 }, dir)?;
        Ok(ino)
    }

    // ---- files ------------------------------------------------------------------------------

    pub fn open(&self, path: &str, flags: OpenFlags) -> SysResult<Fd> {
        let (dir_path, name) = split(path)?;
        let dir = self.dir(dir_path, false)?;
        let (ino, held) = self.find_and_hold(dir, dir_path, name, path, flags)?;
        // From here on the file is counted open: an unlink parks it instead of freeing it, and
        // if the open fails, dropping `held` gives the count back (and frees a parked file).
        let st = self.fs().stat(ino)?;
        if st.kind == FileType::Directory {
            return Err(SysError::new(Errno::IsDir, format!("is a directory: {path}")));
        }
        let want = if flags.read { READ } else { 0 } | if flags.write || flags.truncate { WRITE } else { 0 };
        self.check(&st, want, path)?;
        if flags.truncate && flags.write && st.size > 0 {
            self.resize(ino, 0)?;
        }
        let kernel = &self.kernel;
        let buddy = kernel.fs.block_buddy(ino)?;
        // Nothing below fails: the open is made.
        let mut files = self.files.lock();
        let fd = (0..).find(|fd| files.get(*fd).is_err()).expect("a free descriptor");
        let file = Arc::new(OpenFile {
            ino,
            flags,
            offset: Mutex::new(0),
            ra: ReadAhead::new(&kernel.runtime, self.pid, &fd.to_string()),
            backing: FileBacking::new(kernel.fs.clone(), ino),
        });
        held.keep();
        kernel.file_grafts.on_open(ino, &file.ra);
        self.namespace.register(file.ra.slot().clone());
        self.namespace
            .register_as(&format!("file.block_buddy/{fd}"), buddy as Arc<dyn ManagedSlot>);
        self.locks_opened(fd, &st);
        let got = files.insert(file);
        debug_assert_eq!(got, fd);
        self.kernel.events.opened(self, ino, dir, name, &st);
        Ok(fd)
    }

    /// The inode `name` in `dir` names (created if `flags` say so), counted open. The name is
    /// looked up again once the count is taken: a file unlinked in between (freed, its inode
    /// perhaps reused by another file) is not the one to open.
    fn find_and_hold(
        &self,
        dir: u64,
        dir_path: &str,
        name: &str,
        path: &str,
        flags: OpenFlags,
    ) -> SysResult<(u64, OpenHold<'_>)> {
        loop {
            let ino = match self.fs().lookup(dir, name) {
                Ok(ino) => {
                    if flags.create && flags.exclusive {
                        return Err(SysError::new(Errno::Exist, format!("file exists: {path}")));
                    }
                    ino
                }
                Err(e) if flags.create && e.errno() == Errno::NoEnt as i32 => {
                    self.dir(dir_path, true)?;
                    let attrs = NewFile {
                        mode: flags.mode & 0o7777,
                        uid: self.cred.uid,
                        gid: self.cred.gid,
                        creator: self.pid,
                    };
                    self.kernel
                        .events
                        .created(self, dir, name, self.fs().create(dir, name, &attrs)?)
                }
                Err(e) => return Err(e.into()),
            };
            let held = OpenHold::new(self, ino);
            match self.fs().lookup(dir, name) {
                Ok(now) if now == ino => return Ok((ino, held)),
                // Unlinked, perhaps replaced, meanwhile: look again.
                Ok(_) => continue,
                Err(e) if e.errno() == Errno::NoEnt as i32 => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub fn close(&self, fd: Fd) -> SysResult<()> {
        let file = self.files.lock().remove(fd)?;
        self.drop_file(fd, &file)
    }

    fn drop_file(&self, fd: Fd, file: &OpenFile) -> SysResult<()> {
        self.kernel.events.closed(self, file.ino);
        self.locks_closed(fd, file.ino);
        self.kernel.file_grafts.on_close(file.ino, &file.ra);
        if let Some(ra) = self.namespace.forget(&format!("file.compute_ra/{fd}")) {
            ra.unload();
        }
        self.namespace.forget(&format!("file.block_buddy/{fd}"));
        self.release_open(file.ino)
    }

    /// Gives back one open count of `ino`; the last one of a file unlinked while open frees it.
    fn release_open(&self, ino: u64) -> SysResult<()> {
        match self.kernel.files.closed(ino) {
            Some(parked) => self.free_parked(ino, &parked),
            None => Ok(()),
        }
    }

    /// Frees a file unlinked while open, parked at `parked`, now that nothing has it open.
    fn free_parked(&self, ino: u64, parked: &str) -> SysResult<()> {
        // The cache forgets the file before its blocks are freed: a stale dirty page written back
        // later could land on a block reused for metadata.
        self.kernel.cache.invalidate(ino, 0);
        Ok(self.fs().unlink_path(parked)?)
    }

    pub(crate) fn file(&self, fd: Fd) -> SysResult<Arc<OpenFile>> {
        self.files.lock().get(fd)
    }

    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> SysResult<usize> {
        let f = self.file(fd)?;
        let mut offset = f.offset.lock();
        let n = self.read_file(fd, &f, *offset, buf)?;
        *offset += n as u64;
        Ok(n)
    }

    pub fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> SysResult<usize> {
        let f = self.file(fd)?;
        self.read_file(fd, &f, offset, buf)
    }

    fn read_file(&self, fd: Fd, f: &OpenFile, offset: u64, buf: &mut [u8]) -> SysResult<usize> {
        if !f.flags.read {
            return Err(SysError::new(
                Errno::BadF,
                format!("descriptor {fd} is not open for reading"),
            ));
        }
        let ctx = IoCtx::with_read_ahead(self.pid, &f.ra);
        Ok(self.kernel.cache.read(&ctx, f.ino, &f.backing, offset, buf)?)
    }

    pub fn write(&self, fd: Fd, data: &[u8]) -> SysResult<usize> {
        let f = self.file(fd)?;
        let mut offset = f.offset.lock();
        let _writer = self.kernel.files.write_lock(f.ino);
        let at = if f.flags.append {
            self.fs().stat(f.ino)?.size
        } else {
            *offset
        };
        let n = self.write_file(fd, &f, at, data)?;
        *offset = at + n as u64;
        self.kernel.events.modified(self, f.ino);
        Ok(n)
    }

    pub fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> SysResult<usize> {
        let f = self.file(fd)?;
        let _writer = self.kernel.files.write_lock(f.ino);
        self.write_file(fd, &f, offset, data)
            .inspect(|_| self.kernel.events.modified(self, f.ino))
    }

    /// Writes into the page cache. The file system allocates each block (through the file's
    /// placement policy) and decides which bytes become zeros and what a full disk part way
    /// does (a short write), by the same rules as its uncached path ([`vino_fs::write`]).
    fn write_file(&self, fd: Fd, f: &OpenFile, offset: u64, data: &[u8]) -> SysResult<usize> {
        if !f.flags.write {
            return Err(SysError::new(
                Errno::BadF,
                format!("descriptor {fd} is not open for writing"),
            ));
        }
        let mut target = CacheTarget {
            cache: &self.kernel.cache,
            ctx: IoCtx::new(self.pid),
            ino: f.ino,
            backing: &f.backing,
        };
        Ok(self.fs().write_with(f.ino, offset, data, &mut target)?)
    }

    pub fn seek(&self, fd: Fd, offset: u64) -> SysResult<()> {
        *self.file(fd)?.offset.lock() = offset;
        Ok(())
    }

    /// Makes the file's data and every earlier metadata change durable.
    pub fn fsync(&self, fd: Fd) -> SysResult<()> {
        let f = self.file(fd)?;
        self.kernel.cache.sync_object(f.ino)?;
        Ok(self.fs().fsync(f.ino)?)
    }

    pub fn ftruncate(&self, fd: Fd, size: u64) -> SysResult<()> {
        let f = self.file(fd)?;
        if !f.flags.write {
            return Err(SysError::new(
                Errno::BadF,
                format!("descriptor {fd} is not open for writing"),
            ));
        }
        let _writer = self.kernel.files.write_lock(f.ino);
        self.resize(f.ino, size)
            .inspect(|_| self.kernel.events.modified(self, f.ino))
    }

    /// Sets a file's size, by the file system's rules ([`vino_fs::write`]): the cache forgets
    /// the pages of the blocks the file system frees (past the new end, or past the old end of
    /// a file that grows) before it frees them; growing zeroes, in the cache, the bytes past the
    /// old end in the old last page.
    fn resize(&self, ino: u64, size: u64) -> SysResult<()> {
        let backing = FileBacking::new(self.kernel.fs.clone(), ino);
        let mut target = CacheTarget {
            cache: &self.kernel.cache,
            ctx: IoCtx::new(self.pid),
            ino,
            backing: &backing,
        };
        Ok(self.fs().set_size_with(ino, size, &mut target)?)
    }

    pub fn fstat(&self, fd: Fd) -> SysResult<Stat> {
        Ok(self.fs().stat(self.file(fd)?.ino)?)
    }

    // ---- names ------------------------------------------------------------------------------

    pub fn stat(&self, path: &str) -> SysResult<Stat> {
        Ok(self.fs().stat_path(path)?)
    }

    pub fn mkdir(&self, path: &str, mode: u16) -> SysResult<()> {
        let (dir_path, name) = split(path)?;
        let dir = self.dir(dir_path, true)?;
        let attrs = NewFile {
            mode: mode & 0o7777,
            uid: self.cred.uid,
            gid: self.cred.gid,
            creator: self.pid,
        };
        self.fs().mkdir(dir, name, &attrs)?;
        Ok(())
    }

    pub fn rmdir(&self, path: &str) -> SysResult<()> {
        let (dir_path, name) = split(path)?;
        let dir = self.dir(dir_path, true)?;
        Ok(self.fs().rmdir(dir, name)?)
    }

    pub fn readdir(&self, path: &str) -> SysResult<Vec<DirEntry>> {
        let ino = self.fs().resolve(path)?;
        let st = self.fs().stat(ino)?;
        self.check(&st, READ, path)?;
        Ok(self.fs().readdir(ino)?)
    }

    /// Removes a name. A file still open somewhere lives on, out of the namespace, until its
    /// last close.
    pub fn unlink(&self, path: &str) -> SysResult<()> {
        let (dir_path, name) = split(path)?;
        let dir = self.dir(dir_path, true)?;
        let ino = self.fs().lookup(dir, name)?;
        self.kernel
            .events
            .unlinking(self, dir, name, Some(ino), || self.remove_name(dir, name, ino))
    }

    fn remove_name(&self, dir: u64, name: &str, ino: u64) -> SysResult<()> {
        let st = self.fs().stat(ino)?;
        if st.kind == FileType::Directory {
            return Err(SysError::new(Errno::IsDir, format!("is a directory: {name}")));
        }
        if st.nlink == 1 && self.kernel.files.is_open(ino) {
            return match self.kernel.files.orphan(self.fs(), ino, dir, name.as_bytes())? {
                Some(parked) => self.free_parked(ino, &parked),
                None => Ok(()),
            };
        }
        if st.nlink == 1 {
            self.kernel.cache.invalidate(ino, 0);
        }
        Ok(self.fs().unlink(dir, name)?)
    }

    pub fn rename(&self, from: &str, to: &str) -> SysResult<()> {
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        let (fd_ino, td_ino) = (self.dir(from_dir, true)?, self.dir(to_dir, true)?);
        // A file replaced by the rename goes the way of an unlinked one.
        let mut replaced = None;
        if let Ok(target) = self.fs().lookup(td_ino, to_name) {
            let source = self.fs().lookup(fd_ino, from_name)?;
            let st = self.fs().stat(target)?;
            replaced = Some(target).filter(|_| target != source && st.kind != FileType::Directory);
            if target != source && st.kind != FileType::Directory && st.nlink == 1 {
                if self.kernel.files.is_open(target) {
                    if let Some(parked) = self
                        .kernel
                        .files
                        .orphan(self.fs(), target, td_ino, to_name.as_bytes())?
                    {
                        self.free_parked(target, &parked)?;
                    }
                } else {
                    self.kernel.cache.invalidate(target, 0);
                }
            }
        }
        let rename = || Ok(self.fs().rename(fd_ino, from_name, td_ino, to_name)?);
        self.kernel.events.unlinking(self, td_ino, to_name, replaced, rename)
    }

    // ---- grafts -----------------------------------------------------------------------------

    fn principal(&self) -> Principal {
        Principal {
            process: self.pid,
            privileged: self.cred.privileged,
        }
    }

    /// The graftpoint named `point`: this process's own, else a global one.
    fn namespace_of(&self, point: &str) -> &Namespace {
        if self.namespace.lookup(point).is_ok() {
            &self.namespace
        } else {
            &self.kernel.global
        }
    }

    /// Loads a graft at `point`. The owner hears, through [`Process::graft_events`], if the
    /// kernel unloads it for failing.
    pub fn graft_load(&self, point: &str, wasm: &[u8]) -> SysResult<GraftInfo> {
        let events = self.events.clone();
        let owner = Owner {
            process: self.pid,
            notify: Some(Arc::new(move |e| events.lock().push(e))),
        };
        Ok(self.namespace_of(point).load(self.principal(), point, wasm, owner)?)
    }

    pub fn graft_unload(&self, point: &str) -> SysResult<()> {
        Ok(self.namespace_of(point).unload(self.principal(), point)?)
    }

    pub fn graft_write_memory(&self, point: &str, offset: u32, bytes: &[u8]) -> SysResult<()> {
        Ok(self
            .namespace_of(point)
            .write_memory(self.principal(), point, offset, bytes)?)
    }

    /// The address of a data symbol the graft exports (where to write its shared state).
    pub fn graft_symbol(&self, point: &str, symbol: &str) -> SysResult<u32> {
        Ok(self
            .namespace_of(point)
            .authorized(self.principal(), point)?
            .symbol_address(symbol)?)
    }

    pub fn graft_call(&self, point: &str, control: &str, args: &[i64]) -> SysResult<i64> {
        Ok(self
            .namespace_of(point)
            .call_control(self.principal(), point, control, args)?)
    }

    /// One graft system call, by data.
    pub fn graft(&self, point: &str, call: GraftCall) -> SysResult<i64> {
        match call {
            GraftCall::Load { wasm } => self.graft_load(point, &wasm).map(|_| 0),
            GraftCall::Unload => self.graft_unload(point).map(|_| 0),
            GraftCall::WriteMemory { offset, bytes } => self.graft_write_memory(point, offset, &bytes).map(|_| 0),
            GraftCall::Call { control, args } => self.graft_call(point, &control, &args),
        }
    }

    /// This process's graftpoints and the global ones, with what is bound and its statistics.
    pub fn graft_list(&self) -> Vec<SlotInfo> {
        let mut all = self.namespace.list();
        all.extend(self.kernel.global.list());
        all
    }

    pub fn graft_stats(&self, point: &str) -> SysResult<SlotInfo> {
        let slot = self.namespace_of(point).lookup(point)?;
        Ok(SlotInfo {
            point: point.to_string(),
            ..slot.info()
        })
    }

    /// What happened to this process's grafts since the last call (e.g. unloaded for failing).
    pub fn graft_events(&self) -> Vec<GraftEvent> {
        std::mem::take(&mut *self.events.lock())
    }

    /// The `file.compute_ra` graftpoint of an open file, for kernel-side code (experiments bind
    /// native policies to it; processes use the graft calls).
    pub fn read_ahead(&self, fd: Fd) -> SysResult<Arc<vino_graft::GraftSlot<vino_cache::ComputeRa>>> {
        Ok(self.file(fd)?.ra.slot().clone())
    }

    /// Sets an open file's read-ahead to the default policy or off (like `posix_fadvise`).
    pub fn set_read_ahead(&self, fd: Fd, mode: vino_cache::RaMode) -> SysResult<()> {
        self.file(fd)?.ra.set_mode(mode);
        Ok(())
    }

    /// The inode (the cache's object id) of an open file.
    pub fn inode(&self, fd: Fd) -> SysResult<u64> {
        Ok(self.file(fd)?.ino)
    }

    /// Open descriptors.
    pub fn fds(&self) -> Vec<Fd> {
        self.files.lock().fds()
    }

    /// Closes every file and unloads every graft of this process (it exited).
    pub(crate) fn release(&self) {
        self.kernel.events.detach(self.pid);
        let open = self.files.lock().drain();
        for (fd, file) in open {
            let _ = self.drop_file(fd, &file);
        }
        self.locks_released();
        self.namespace.unload_owned_by(self.pid);
        self.kernel.file_grafts.release(self.pid);
        for info in self.namespace.list() {
            self.namespace.forget(&info.point);
        }
    }
}
