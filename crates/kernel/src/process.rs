//! A process and its system calls.

use crate::cache_io::{CacheTarget, FileBacking};
use crate::error::{Errno, SysError, SysResult};
use crate::files::{Fd, FdTable, OpenFile, OpenFlags};
use crate::namei::{At, Found};
use crate::perm::{self, Credentials, EXEC, READ, WRITE};
use crate::{Account, FallocMode, Kernel, Pid, Resource, account};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use vino_cache::{IoCtx, ReadAhead};
use vino_fs::{FileType, NewFile, Stat};
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
    pub(crate) cred: Credentials,
    kernel: Arc<Kernel>,
    /// Shared with the process's event listener, which asks it which files the process holds.
    files: Arc<Mutex<FdTable>>,
    /// Graftpoints on objects this process owns: `vas.pick_victim`, `event.timer`, ...; and,
    /// through its descriptors, `file.compute_ra/<fd>`, `file.block_buddy/<fd>` and
    /// `lock.grant/<fd>` (`crate::fd_points`).
    pub(crate) namespace: Namespace,
    events: Arc<Mutex<Vec<GraftEvent>>>,
    /// What this process makes the kernel hold, charged here, to its user and to the total.
    account: Arc<Account>,
    /// Asked during long waits on the process's behalf (a compile waiting its turn): false once
    /// whoever runs the process (a daemon connection) is gone.
    alive: Mutex<Option<Arc<dyn Fn() -> bool + Send + Sync>>>,
    /// How to stop what runs in this process (a program's kill switch), and whether it was
    /// told to stop: a stop that comes before the runner says how is not lost.
    killer: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    killed: std::sync::atomic::AtomicBool,
    /// Per-file slots this process loaded grafts into: they outlive its descriptors, so its
    /// exit unloads what it still owns there.
    file_slots: Mutex<Vec<Weak<dyn ManagedSlot>>>,
    /// The process's `event.timer` graftpoint, and the thread that fires it while armed.
    timer_slot: Arc<vino_graft::GraftSlot<vino_sched::Timer>>,
    timer: Mutex<Option<ArmedTimer>>,
    /// Threads of timers stopped without waiting, waited for at exit.
    retired_timers: Mutex<Vec<vino_sched::JoinHandle>>,
    /// Bytes read and written, as its runner counts them (`vino ps`): counted by the program
    /// engine, off the kernel's read path that every caller shares.
    bytes_read: std::sync::atomic::AtomicU64,
    bytes_written: std::sync::atomic::AtomicU64,
    /// Signals sent to it, blocked, and what it does with each.
    pub(crate) signals: crate::signal::Signals,
    /// The signal that killed it (0: none yet).
    killed_by: std::sync::atomic::AtomicU8,
    /// It was ended for want of swap (see `memory`).
    pub(crate) out_of_swap: std::sync::atomic::AtomicBool,
    /// Its program memory, for mapping files into it (set when the memory is made).
    pub(crate) memory: Mutex<Option<vino_vm::MemoryHandle>>,
    /// Its `vm.fault_around` graftpoint: which pages come in with a fault of its memory.
    pub(crate) fault_around: Arc<vino_graft::GraftSlot<vino_vm::FaultAround>>,
    /// Its `dir.lookup` graftpoint: redirects of the names its walks look up.
    pub(crate) lookup_slot: Arc<vino_graft::GraftSlot<crate::dir_grafts::DirLookup>>,
    /// The ports it serves with grafts in the kernel (`Process::net_serve`).
    pub(crate) servers: Mutex<Vec<crate::net_server::Server>>,
    /// Shadows this process started (`vino graft try`), stopped when it exits.
    pub(crate) tries: Mutex<Vec<crate::graft_try::Tried>>,
    /// The stream layers pushed onto its sockets.
    pub(crate) socket_layers: Mutex<rustc_hash::FxHashMap<vino_net::SocketId, Arc<crate::socket_layers::SocketLayers>>>,
    /// It has pushed a layer once (until then a socket call skips the map).
    pub(crate) socket_layers_used: std::sync::atomic::AtomicBool,
    /// Its user's share of the stack's thread, looked up once (a process's uid never changes).
    pub(crate) net_share: std::sync::OnceLock<Arc<vino_net::congestion::StackShare>>,
    /// Its `net.congestion` graftpoint: congestion control of its TCP connections.
    pub(crate) congestion_slot: Arc<vino_graft::GraftSlot<vino_net::Congestion>>,
    /// Its parent, children, session and zombies.
    pub(crate) family: Mutex<crate::family::Family>,
    /// The digest of the program it runs ([`Process::exec_start`]).
    exec_digest: Mutex<Option<[u8; 32]>>,
}

/// A timer's thread: told to stop by the flag, waited for by its handle.
struct ArmedTimer {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: vino_sched::JoinHandle,
}

/// Shortest timer period: the CPU scheduler's tick.
pub const TIMER_MIN_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);

/// A reference to an inode taken while an open (or a setattr) is set up; given back when
/// dropped unless [`Held::keep`] handed it to the new descriptor (whose close gives it back).
pub(crate) struct Held<'p> {
    process: &'p Process,
    ino: u64,
    kept: bool,
}

impl Held<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.kept {
            // The open failed; freeing a file it kept alive can fail only as a later unlink would.
            let _ = self.process.kernel.release_ref(self.ino);
        }
    }
}

impl Process {
    /// A new process; a child of `parent` takes its session and its signal state (as exec
    /// leaves it).
    pub(crate) fn new(kernel: Arc<Kernel>, pid: Pid, cred: Credentials, parent: Option<&Process>) -> Arc<Process> {
        let namespace = Namespace::new();
        namespace.register(kernel.cache.register_process(pid));
        namespace.register(kernel.cpu.add_process(pid, cred.uid));
        let timer_slot = Arc::new(vino_graft::GraftSlot::new(
            &kernel.runtime,
            Arc::new(pid),
            vino_graft::Access::Process(pid),
            None,
        ));
        namespace.register(timer_slot.clone());
        let fault_around = Arc::new(vino_graft::GraftSlot::new(
            &kernel.runtime,
            Arc::new(pid),
            vino_graft::Access::Process(pid),
            None,
        ));
        namespace.register(fault_around.clone());
        let lookup_slot = Arc::new(vino_graft::GraftSlot::new(
            &kernel.runtime,
            Arc::new(()),
            vino_graft::Access::Process(pid),
            None,
        ));
        namespace.register(lookup_slot.clone());
        let congestion_slot = Arc::new(vino_graft::GraftSlot::new(
            &kernel.runtime,
            Arc::new(()),
            vino_graft::Access::Process(pid),
            None,
        ));
        namespace.register(congestion_slot.clone());
        namespace.register_as(
            crate::exec_verify::USER_POINT,
            Arc::new(crate::user_slot::UserSlot {
                slot: kernel.exec.user(cred.uid).slot.clone(),
                pid,
                user: kernel.accounts.user(cred.uid),
            }),
        );
        namespace.register_as(
            crate::net_sharing::USER_POINT,
            Arc::new(crate::user_slot::UserSlot {
                slot: kernel.net_sharing.user(cred.uid),
                pid,
                user: kernel.accounts.user(cred.uid),
            }),
        );
        let account = kernel.accounts.process(cred.uid, format!("process {pid}"));
        let files: Arc<Mutex<FdTable>> = Arc::default();
        namespace.set_source(Box::new(crate::fd_points::FdPoints {
            files: files.clone(),
            kernel: Arc::downgrade(&kernel),
            pid,
            privileged: cred.privileged,
        }));
        Arc::new(Process {
            pid,
            cred,
            kernel,
            files,
            namespace,
            events: Arc::default(),
            account,
            alive: Mutex::new(None),
            killer: Mutex::new(None),
            killed: Default::default(),
            file_slots: Mutex::new(Vec::new()),
            timer_slot,
            timer: Mutex::new(None),
            retired_timers: Mutex::new(Vec::new()),
            bytes_read: Default::default(),
            bytes_written: Default::default(),
            signals: parent.map(|p| p.signals.inherit()).unwrap_or_default(),
            killed_by: Default::default(),
            out_of_swap: Default::default(),
            memory: Default::default(),
            fault_around,
            lookup_slot,
            congestion_slot,
            servers: Mutex::new(Vec::new()),
            tries: Mutex::new(Vec::new()),
            socket_layers: Mutex::default(),
            socket_layers_used: Default::default(),
            net_share: std::sync::OnceLock::new(),
            family: Mutex::new(crate::family::Family {
                parent: parent.map_or(0, Process::pid),
                session: parent.map_or(pid, Process::session),
                ..Default::default()
            }),
            exec_digest: Mutex::new(None),
        })
    }

    /// What this process holds of the kernel, and its limits.
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// Tells the kernel how to see that whoever runs this process has gone (a closed
    /// connection), so work queued for it can be dropped.
    pub fn set_alive_check(&self, alive: Arc<dyn Fn() -> bool + Send + Sync>) {
        *self.alive.lock() = Some(alive);
    }

    /// Tells the kernel how to stop what runs in this process (a program), so that a kill or
    /// a shutdown need not wait for it to end by itself. Called at once if it was killed already.
    pub fn set_killer(&self, kill: Arc<dyn Fn() + Send + Sync>) {
        *self.killer.lock() = Some(kill.clone());
        if self.killed() {
            kill();
        }
    }

    /// Stops what runs in this process, now or as soon as its runner says how (SIGKILL).
    pub fn kill(&self) {
        self.kill_by(crate::signal::SIGKILL);
    }

    /// As [`Process::kill`], the process dying of `sig` (the first such signal counts).
    pub fn kill_by(&self, sig: u8) {
        use std::sync::atomic::Ordering;
        let _ = self
            .killed_by
            .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        if self.killed.swap(true, Ordering::SeqCst) {
            // Killed already: its runner was told (a killer that kills others, a session's,
            // may come back here).
            return;
        }
        let kill = self.killer.lock().clone();
        if let Some(kill) = kill {
            kill();
        }
        // Blocked calls look again, and find the process ending.
        self.signals.wake_all();
        self.family.lock().waiting.drain(..).for_each(std::task::Waker::wake);
    }

    /// The signal that killed it, if one did.
    pub fn killed_by(&self) -> Option<u8> {
        match self.killed_by.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    /// Whether this process was told to stop.
    pub fn killed(&self) -> bool {
        self.killed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The owner of a graft this process loads: it is told of unloads, charged for the graft,
    /// and its compile is dropped if the process's runner goes while it waits.
    pub(crate) fn graft_owner(&self) -> Owner {
        let events = self.events.clone();
        Owner {
            process: self.pid,
            notify: Some(Arc::new(move |e| events.lock().push(e))),
            account: Some(self.account.clone()),
            wanted: self.alive.lock().clone(),
        }
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

    // ---- files ------------------------------------------------------------------------------

    /// Opens the file at `path` (from `at`), creating it if `flags` say so.
    pub fn open_at(&self, at: At, path: impl AsRef<[u8]>, flags: OpenFlags) -> SysResult<Fd> {
        let path = path.as_ref();
        let (found, dir, name, created, held) = {
            // A create changes the namespace; a plain open only reads it.
            let _ns_w;
            let _ns_r;
            if flags.create {
                _ns_w = self.kernel.ns.write();
            } else {
                _ns_r = self.kernel.ns.read();
            }
            let (found, dir, name, created) = self.find_or_create(at, path, flags)?;
            let held = self.hold(found.ino);
            (found, dir, name, created, held)
        };
        // From here on the file is referenced: an unlink parks it instead of freeing it, and if
        // the open fails, dropping `held` gives the reference back (and frees a parked file).
        self.check_open(&found.stat, flags, created)?;
        let name = name.map(|n| String::from_utf8_lossy(&n).into_owned());
        let ino = found.ino;
        let fd = self.install(found, flags, created, held, dir, name.as_deref())?;
        self.debug_check(&[ino]);
        Ok(fd)
    }

    /// Opens the inode `ino` (the mount's: it holds the inode and Linux has walked the path),
    /// checking the file's own permissions only.
    pub fn open_inode(&self, ino: u64, generation: u32, flags: OpenFlags) -> SysResult<Fd> {
        if flags.create {
            return Err(SysError::new(Errno::Inval, "open by inode cannot create"));
        }
        let (found, held) = {
            let _ns = self.kernel.ns.read();
            let found = self.handle(ino, generation)?;
            self.open_allowed(&found, None, flags)?;
            let held = self.hold(ino);
            (found, held)
        };
        self.check_open(&found.stat, flags, false)?;
        let fd = self.install(found, flags, false, held, 0, None)?;
        self.debug_check(&[ino]);
        Ok(fd)
    }

    /// Gives `child` a descriptor of the file this process has open as `fd`, opened as this
    /// one was (less creating and truncating): what a spawned child inherits. No permission is
    /// checked again, as none is when POSIX's children inherit descriptors. The offset is the
    /// child's own from here on (a VINO program keeps its offsets itself).
    pub fn inherit_fd(&self, fd: Fd, child: &Process) -> SysResult<Fd> {
        let file = self.files.lock().get(fd)?;
        let flags = OpenFlags {
            create: false,
            exclusive: false,
            truncate: false,
            ..file.flags
        };
        let (found, held) = {
            let _ns = self.kernel.ns.read();
            let found = child.handle(file.ino, file.generation)?;
            let held = child.hold(file.ino);
            (found, held)
        };
        let fd = child.install(found, flags, false, held, 0, None)?;
        child.debug_check(&[file.ino]);
        Ok(fd)
    }

    /// Opens `path`, an absolute path (the path call, as a wrapper).
    pub fn open(&self, path: &str, flags: OpenFlags) -> SysResult<Fd> {
        self.open_at(At::Root, path, flags)
    }

    pub(crate) fn hold(&self, ino: u64) -> Held<'_> {
        self.kernel.files.take(ino);
        Held {
            process: self,
            ino,
            kept: false,
        }
    }

    /// What an open of `path` finds or makes: the file, the directory and name it was found
    /// by, and whether this open created it. Called under the namespace lock.
    fn find_or_create(&self, at: At, path: &[u8], flags: OpenFlags) -> SysResult<(Found, u64, Option<Vec<u8>>, bool)> {
        self.find_or_create_via(at, path, flags, 0)
    }

    /// [`Process::find_or_create`] after `links` symbolic links: `O_CREAT` through a dangling
    /// link creates the file it names, as Linux does.
    fn find_or_create_via(
        &self,
        at: At,
        path: &[u8],
        flags: OpenFlags,
        links: usize,
    ) -> SysResult<(Found, u64, Option<Vec<u8>>, bool)> {
        let p = self.walk_parent(at, path)?;
        let fs = self.kernel.fs();
        let plain_name = !matches!(p.name.as_slice(), b"" | b"." | b"..");
        let existing = if plain_name {
            // The directory's `dir.access` grafts are asked once, about the open with its
            // flags, which stands for the lookup of the name too (not a lookup and then an
            // open: two calls where one tells the graft everything).
            self.parent_allows(
                &p,
                crate::dir_grafts::AccessOp::Open,
                crate::dir_grafts::open_bits(&flags),
            )?;
            self.lookup_in(&p)?
        } else {
            Some(self.walk_placed(at, path, true)?)
        };
        match existing {
            Some(_) if flags.create && flags.exclusive => Err(SysError::new(
                Errno::Exist,
                format!("file exists: {}", String::from_utf8_lossy(path)),
            )),
            Some(f) if f.stat.kind == FileType::Symlink => {
                if flags.nofollow {
                    return Err(SysError::new(
                        Errno::Loop,
                        "the last component is a symbolic link (O_NOFOLLOW)",
                    ));
                }
                match self.walk_placed(at, path, true) {
                    Ok(found) => {
                        self.open_allowed(&found, None, flags)?;
                        Ok((found, p.dir, Some(p.name), false))
                    }
                    Err(e) if e.errno == Errno::NoEnt && flags.create => {
                        self.may_follow(&p.dir_stat, &f.stat)?;
                        if links >= crate::MAX_SYMLINKS {
                            return Err(SysError::new(Errno::Loop, "too many symbolic links"));
                        }
                        let target = fs.readlink(f.ino)?;
                        let dir = At::Inode {
                            ino: p.dir,
                            generation: p.dir_stat.generation,
                        };
                        self.find_or_create_via(dir, &target, flags, links + 1)
                    }
                    Err(e) => Err(e),
                }
            }
            Some(f) => {
                if p.trailing_slash && f.stat.kind != FileType::Directory {
                    return Err(SysError::new(Errno::NotDir, "not a directory"));
                }
                if flags.create && !self.kernel.protect.may_create_over(&self.cred, &p.dir_stat, &f.stat) {
                    return Err(SysError::new(
                        Errno::Acces,
                        "protected_regular/fifos: O_CREAT of another user's file in a sticky directory",
                    ));
                }
                if !plain_name {
                    self.open_allowed(&f, Some(&p), flags)?;
                }
                Ok((f, p.dir, Some(p.name), false))
            }
            None if !flags.create => Err(SysError::new(
                Errno::NoEnt,
                format!("no such file: {}", String::from_utf8_lossy(path)),
            )),
            None => {
                if p.trailing_slash {
                    return Err(SysError::new(
                        Errno::IsDir,
                        "cannot create a file named with a trailing /",
                    ));
                }
                if !perm::may(&self.cred, &p.dir_stat, WRITE | EXEC) {
                    return Err(SysError::new(Errno::Acces, "no write permission on the directory"));
                }
                // The grafts were asked about this open (its flags say create) before the lookup.
                debug_assert!(plain_name);
                let (gid, mode) = perm::new_file_owner(&self.cred, &p.dir_stat, flags.mode, FileType::Regular);
                let attrs = NewFile {
                    mode,
                    uid: self.cred.uid,
                    gid,
                    creator: self.pid,
                };
                let ino = self.acting(|| fs.create(p.dir, &p.name, &attrs))?;
                self.tell_changes(p.dir, &p.name, &[p.dir]);
                let name = String::from_utf8_lossy(&p.name).into_owned();
                self.kernel.events.created(self, p.dir, &name, ino);
                Ok((Found::new(ino, fs.stat(ino)?), p.dir, Some(p.name), true))
            }
        }
    }

    /// May this process open the file `st` as `flags` ask? A file this open created is opened
    /// as asked whatever its mode (POSIX).
    fn check_open(&self, st: &Stat, flags: OpenFlags, created: bool) -> SysResult<()> {
        let writes = flags.write || flags.truncate;
        match st.kind {
            FileType::Directory if writes || flags.create => {
                return Err(SysError::new(Errno::IsDir, "is a directory"));
            }
            FileType::Directory | FileType::Regular => {}
            // VINO stores these nodes; their I/O is the host's (through the mount, which Linux
            // serves itself for FIFOs and sockets, and refuses for devices under `nodev`).
            _ => {
                return Err(SysError::new(
                    Errno::NxIo,
                    "a FIFO, socket or device is not opened through VINO",
                ));
            }
        }
        if flags.directory && st.kind != FileType::Directory {
            return Err(SysError::new(Errno::NotDir, "not a directory (O_DIRECTORY)"));
        }
        let want = if flags.read { READ } else { 0 } | if writes { WRITE } else { 0 };
        if !created && !perm::may(&self.cred, st, want) {
            return Err(SysError::new(
                Errno::Acces,
                format!("permission denied (inode {})", st.ino),
            ));
        }
        Ok(())
    }

    /// Makes the descriptor of an open that has passed its checks.
    fn install(
        &self,
        found: Found,
        flags: OpenFlags,
        created: bool,
        held: Held<'_>,
        dir: u64,
        name: Option<&str>,
    ) -> SysResult<Fd> {
        let (ino, mut st) = (found.ino, found.stat);
        let kernel = &self.kernel;
        let regular = st.kind == FileType::Regular;
        if flags.truncate && regular && !created {
            // POSIX: O_TRUNC on an existing file marks it modified even if it was empty.
            let _writer = kernel.files.write_lock(ino);
            self.resize(ino, 0)?;
            st = self.after_change(ino, true)?.expect("a touched file's attributes");
        }
        let charge = self.account.charge(Resource::Descriptors, 1)?;
        if regular {
            kernel.prepare_stream(&st);
        }
        let mut files = self.files.lock();
        if files.closed() {
            // The process exited while this open ran: the charge and `held` (the inode's
            // reference) go back as they drop, or a parked file would never be freed.
            return Err(SysError::new(Errno::Srch, "the process has exited"));
        }
        // Nothing below fails: the open is made.
        let fd = (0..).find(|fd| files.get(*fd).is_err()).expect("a free descriptor");
        let file = Arc::new(OpenFile {
            ino,
            generation: st.generation,
            kind: st.kind,
            flags,
            offset: Mutex::new(0),
            ra: ReadAhead::new(&kernel.runtime, self.pid, &fd.to_string()),
            backing: FileBacking::new(kernel.fs.clone(), ino),
            _charge: charge,
        });
        held.keep();
        if regular {
            kernel.file_grafts.on_open(ino, &file.ra);
        }
        // Its graftpoints are reached through the descriptor table (`crate::fd_points`).
        self.locks_opened(&st);
        // The descriptor's reference, handed over by `held`: without it an unlink would free
        // the file under the descriptor.
        debug_assert!(
            kernel.files.refs_of(ino).0 > 0,
            "a descriptor of unreferenced inode {ino}"
        );
        let got = files.insert(file);
        debug_assert_eq!(got, fd);
        drop(files);
        kernel.events.opened(self, ino, dir, name, &st);
        Ok(fd)
    }

    /// After a write or resize of `ino` by this process: drops set-ID bits as an unprivileged
    /// writer must, optionally marks the file modified now, and tells the change hooks.
    pub(crate) fn after_change(&self, ino: u64, touch: bool) -> SysResult<Option<Stat>> {
        let mut st = None;
        if !self.cred.privileged || touch {
            let fs = self.fs();
            let now = fs.stat(ino)?;
            let mode = perm::after_write(&self.cred, &now);
            st = Some(if mode.is_some() || touch {
                let attrs = vino_fs::SetAttr {
                    mode,
                    mtime_ns: touch.then(|| self.kernel().clock.wall_ns()),
                    ..Default::default()
                };
                fs.set_attr(ino, &attrs)?
            } else {
                now
            });
        }
        if self.kernel.changes.wanted() {
            self.kernel.changes.tell(self.pid, &[crate::Change::Attr { ino }]);
        }
        Ok(st)
    }

    pub fn close(&self, fd: Fd) -> SysResult<()> {
        let file = self.files.lock().remove(fd)?;
        let closed = self.drop_file(&file);
        self.debug_check(&[file.ino]);
        closed
    }

    fn drop_file(&self, file: &OpenFile) -> SysResult<()> {
        self.kernel.events.closed(self, file.ino);
        self.locks_closed(file.ino);
        if file.kind == FileType::Regular {
            self.kernel.file_grafts.on_close(file.ino, &file.ra);
            // The descriptor's own read-ahead graft goes with it.
            file.ra.slot().unload();
        }
        self.kernel.release_ref(file.ino)
    }

    /// The descriptor table, for the event listener's check of which files this process holds.
    pub(crate) fn open_files(&self) -> &Arc<Mutex<FdTable>> {
        &self.files
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

    /// Counts bytes read and written for [`Process::io_bytes`].
    pub fn count_io(&self, read: u64, written: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if read > 0 {
            self.bytes_read.fetch_add(read, Relaxed);
        }
        if written > 0 {
            self.bytes_written.fetch_add(written, Relaxed);
        }
    }

    /// Bytes counted as read and written by this process's runner ([`Process::count_io`]).
    pub fn io_bytes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.bytes_read.load(Relaxed), self.bytes_written.load(Relaxed))
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
        let n = self.acting(|| self.write_file(fd, &f, at, data))?;
        *offset = at + n as u64;
        self.after_change(f.ino, false)?;
        self.kernel.events.modified(self, f.ino);
        Ok(n)
    }

    pub fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> SysResult<usize> {
        let f = self.file(fd)?;
        let _writer = self.kernel.files.write_lock(f.ino);
        let n = self.acting(|| self.write_file(fd, &f, offset, data))?;
        self.after_change(f.ino, false)?;
        self.kernel.events.modified(self, f.ino);
        Ok(n)
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
        // A writer past its share of dirty pages waits here, holding nothing others need.
        self.kernel.cache.throttle(self.pid, f.ino);
        let mut target = CacheTarget {
            cache: &self.kernel.cache,
            ctx: IoCtx::new(self.pid),
            ino: f.ino,
            backing: &f.backing,
        };
        let n = self.fs().write_with(f.ino, offset, data, &mut target)?;
        self.kernel.memory.file_changed(f.ino, offset, offset + n as u64);
        Ok(n)
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
        self.resize(f.ino, size)?;
        self.after_change(f.ino, true)?;
        self.kernel.events.modified(self, f.ino);
        Ok(())
    }

    /// Sets a file's size, by the file system's rules ([`vino_fs::write`]): the cache forgets
    /// the pages of the blocks the file system frees (past the new end, or past the old end of
    /// a file that grows) before it frees them; growing zeroes, in the cache, the bytes past the
    /// old end in the old last page.
    pub(crate) fn resize(&self, ino: u64, size: u64) -> SysResult<()> {
        self.through_cache(ino, 0..u64::MAX, |fs, target| fs.set_size_with(ino, size, target))
    }

    /// fallocate through the cache, by the file system's rules: a size that grows zeroes, in
    /// the cache, the old last page past the old end (as a resize does); a punched hole or a
    /// zeroed range drops the pages of the blocks freed or zeroed on the device and zeroes its
    /// partial edges in the cache. Mappings look again at the range (from it on, or at the
    /// whole file, where the size may grow).
    pub(crate) fn fallocate_cached(&self, ino: u64, mode: FallocMode, offset: u64, len: u64) -> SysResult<()> {
        let end = offset.saturating_add(len);
        match mode {
            FallocMode::Allocate { keep_size } => self.through_cache(ino, 0..u64::MAX, |fs, target| {
                fs.fallocate_with(ino, offset, len, keep_size, target)
            }),
            FallocMode::PunchHole => self.through_cache(ino, offset..end, |fs, target| {
                fs.punch_hole_with(ino, offset, len, target)
            }),
            FallocMode::ZeroRange { keep_size } => {
                let changed = offset..if keep_size { end } else { u64::MAX };
                self.through_cache(ino, changed, |fs, target| {
                    fs.zero_range_with(ino, offset, len, keep_size, target)
                })
            }
        }
    }

    /// Runs a file-system change of `ino`'s data with the page cache as where its bytes go;
    /// mappings of the file look again at bytes `changed`.
    fn through_cache(
        &self,
        ino: u64,
        changed: std::ops::Range<u64>,
        change: impl FnOnce(&vino_fs::FileSystem, &mut CacheTarget<'_>) -> vino_fs::Result<()>,
    ) -> SysResult<()> {
        let backing = FileBacking::new(self.kernel.fs.clone(), ino);
        self.kernel.prepare_stream(&self.kernel.fs.stat(ino)?);
        self.kernel.cache.throttle(self.pid, ino);
        let mut target = CacheTarget {
            cache: &self.kernel.cache,
            ctx: IoCtx::new(self.pid),
            ino,
            backing: &backing,
        };
        change(self.fs(), &mut target)?;
        self.kernel.memory.file_changed(ino, changed.start, changed.end);
        Ok(())
    }

    pub fn fstat(&self, fd: Fd) -> SysResult<Stat> {
        let f = self.file(fd)?;
        match self.fs().stat(f.ino) {
            Ok(st) if st.generation == f.generation => Ok(st),
            _ => Err(SysError::new(
                Errno::NoEnt,
                format!("descriptor {fd}: its file was removed"),
            )),
        }
    }

    // ---- threads ----------------------------------------------------------------------------

    /// Starts a thread of this process on the kernel's CPU scheduler, running the future `make`
    /// returns. Each thread counts against the user's thread limit (`EAGAIN`) until it ends.
    pub fn spawn_thread<F, Fut>(&self, make: F) -> SysResult<vino_sched::JoinHandle>
    where
        F: FnOnce(vino_sched::ThreadCtx) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let charge = self.account.charge(Resource::Threads, 1)?;
        self.kernel
            .cpu
            .spawn(self.pid, move |ctx| {
                let body = make(ctx);
                async move {
                    let _charge = charge;
                    body.await
                }
            })
            .map_err(|e| SysError::new(Errno::Again, e.to_string()))
    }

    /// Fires this process's `event.timer` graft every `period` (at least [`TIMER_MIN_PERIOD`]),
    /// on a thread of the process (so the graft's CPU is the process's, and the thread counts
    /// against the user's thread limit), until [`Process::timer_stop`] or exit. Replaces a timer
    /// started before. A firing whose period has passed is skipped, not made up.
    pub fn timer_start(&self, period: std::time::Duration) -> SysResult<()> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Duration;
        if period < TIMER_MIN_PERIOD {
            return Err(SysError::new(
                Errno::Inval,
                format!("a timer period is at least {TIMER_MIN_PERIOD:?}"),
            ));
        }
        self.timer_cancel();
        let stop = Arc::new(AtomicBool::new(false));
        let (slot, stopped) = (self.timer_slot.clone(), stop.clone());
        // Time is the kernel's clock's (a simulation moves it); the first firing is due one
        // period from the call, not from whenever the thread first runs.
        let clock = self.kernel.clock.clone();
        let kernel = Arc::downgrade(&self.kernel);
        let mut start = clock.deadline_in(period);
        let thread = self.spawn_thread(move |ctx| async move {
            let mut count = 0u64;
            loop {
                // In naps of at most 10 ms, so that a stop is seen soon (on a manual clock, host
                // slices between looks at the clock).
                while !clock.passed(start) && !stopped.load(Ordering::Relaxed) {
                    let nap = match clock.host_instant(start) {
                        Some(_) => start.saturating_sub(clock.monotonic()).min(Duration::from_millis(10)),
                        None => vino_blockdev::clock::MANUAL_SLICE,
                    };
                    ctx.sleep_until(std::time::Instant::now() + nap).await;
                }
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                count += 1;
                let late_ns = clock.monotonic().saturating_sub(start).as_nanos() as u64;
                vino_sched::in_kernel(|| slot.invoke(&vino_sched::TimerArgs { count, late_ns }));
                if let Some(k) = kernel.upgrade() {
                    k.timer_firings.fetch_add(1, Ordering::Relaxed);
                }
                start += period;
                if clock.passed(start) {
                    start = clock.deadline_in(period);
                }
            }
        })?;
        *self.timer.lock() = Some(ArmedTimer { stop, thread });
        Ok(())
    }

    /// Stops this process's timer (if one runs) and waits for its thread to end: not to be
    /// called from a thread of the CPU scheduler (a program uses [`Process::timer_cancel`]).
    pub fn timer_stop(&self) {
        self.timer_cancel();
        let ending = std::mem::take(&mut *self.retired_timers.lock());
        for t in ending {
            t.join();
        }
    }

    /// Stops this process's timer without waiting for its thread (which ends within 10 ms;
    /// the process's exit waits for it).
    pub fn timer_cancel(&self) {
        let armed = self.timer.lock().take();
        if let Some(t) = armed {
            t.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let mut retired = self.retired_timers.lock();
            // Ended threads are forgotten, so a process restarting its timer in a loop holds at
            // most the few still ending (each also counts against its user's thread limit).
            retired.retain(|h| !h.is_finished());
            retired.push(t.thread);
        }
    }

    /// Sets this process's tickets in its user's currency.
    pub fn set_tickets(&self, tickets: u32) -> SysResult<()> {
        self.kernel
            .cpu
            .set_process_tickets(self.pid, tickets)
            .map_err(|e| SysError::new(Errno::Inval, e.to_string()))
    }

    /// Gives this process's turns to `to` while it has nothing runnable (`None`: takes them back).
    pub fn donate(&self, to: Option<Pid>) -> SysResult<()> {
        if let Some(to) = to
            && self.kernel.process(to).is_none()
        {
            return Err(SysError::new(Errno::Srch, format!("no process {to}")));
        }
        self.kernel
            .cpu
            .donate(self.pid, to)
            .map_err(|e| SysError::new(Errno::Inval, e.to_string()))
    }

    // ---- programs ---------------------------------------------------------------------------

    /// Streams a program's module through `exec.verify` (the global verifier, then this user's)
    /// before it runs as a process of this user: `EACCES` if either denies it or fails (a
    /// failing verifier refuses, as a denying one does). With nothing bound, every module
    /// passes. `name` names the program in the error. The time is charged to this process.
    pub fn exec_verify(&self, name: &str, wasm: &[u8]) -> SysResult<crate::Verified> {
        crate::exec_verify::verify(&self.kernel.exec, self.cred.uid, name, wasm, &self.account)
    }

    /// Starts running a verified module in this process: `verified` must be for this user
    /// and for the module whose SHA-256 is `module_sha256` (`EACCES` otherwise). Its digest is
    /// the process's from now on ([`Process::exec_digest`]).
    pub fn exec_start(&self, verified: crate::Verified, module_sha256: &[u8; 32]) -> SysResult<()> {
        if verified.uid() != self.cred.uid || verified.sha256() != module_sha256 {
            return Err(SysError::new(
                Errno::Acces,
                "exec.verify: the program was verified for another module or user",
            ));
        }
        *self.exec_digest.lock() = Some(*verified.digest());
        Ok(())
    }

    /// The digest of the program this process runs, hex: its verifier's (the global one's if
    /// both ran), else the kernel's SHA-256 of the module; `None` if it runs no program.
    pub fn exec_digest(&self) -> Option<String> {
        self.exec_digest.lock().as_ref().map(|d| crate::exec_verify::hex(d))
    }

    // ---- grafts -----------------------------------------------------------------------------

    pub(crate) fn principal(&self) -> Principal {
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
        if let Some(fd) = crate::dir_grafts::bound_fd(point) {
            let bound = self.dir_access_bind_at(At::Fd(fd?), b"", Some(wasm))?;
            return Ok(bound.expect("a load gives its graft"));
        }
        let owner = self.graft_owner();
        let info = self.namespace_of(point).load(self.principal(), point, wasm, owner)?;
        if let Some(slot) = self.per_file_slot(point) {
            let slot = Arc::downgrade(&slot);
            let mut kept = self.file_slots.lock();
            kept.retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &slot));
            kept.push(slot);
        }
        Ok(info)
    }

    /// Keeps a graft module for a later [`Process::graft_load_staged`], by this user's process
    /// that holds the descriptor it is for (the FUSE mount's, through an ioctl that can carry a
    /// token but not a module). Returns the token: good once, for this user, for
    /// [`crate::STAGED_TTL`].
    pub fn graft_stage(&self, wasm: &[u8]) -> SysResult<u64> {
        // Compiled now, on the stager's thread and charged to it, so the bind (on a thread of
        // the mount, which every user's requests share) finds it in the module cache.
        self.kernel
            .runtime()
            .compile_for(wasm, Some(&self.account), &|| self.runner_alive())
            .map_err(vino_graft::GraftError::from)?;
        self.kernel.staged.stage(self.cred.uid, self.pid, &self.account, wasm)
    }

    /// False once whoever runs this process has gone (see [`Process::set_alive_check`]).
    fn runner_alive(&self) -> bool {
        let alive = self.alive.lock().clone();
        alive.is_none_or(|a| a())
    }

    /// Judges a module still arriving for a graft load (or, with `program`, for a program run)
    /// by its first bytes `head` and its declared `size`: refused (E2BIG) as soon as they show
    /// it too costly to compile, so that a front end need not receive the rest.
    pub fn precheck_module_head(&self, program: bool, head: &[u8], size: usize) -> SysResult<()> {
        if !program {
            return Ok(self
                .kernel
                .runtime
                .precheck_head(head, size)
                .map_err(vino_graft::GraftError::from)?);
        }
        // A program's size is bounded where it is received.
        match vino_graft::precheck_head(head, size, &vino_graft::ModuleLimits::program(usize::MAX)) {
            Err(vino_graft::LoadError::TooLarge(why)) => Err(SysError::new(
                Errno::TooBig,
                format!("program refused before compiling: {why}"),
            )),
            Err(e) => Err(SysError::new(Errno::Inval, e.to_string())),
            Ok(()) => Ok(()),
        }
    }

    /// One of this user's compiles in progress, for compiling a program: a user's compiles
    /// wait for each other's end (not for other users'), and the wait is dropped (EINTR) once
    /// the process's runner is gone. The compile's time is charged with
    /// [`Account::add_cpu`] by the caller.
    pub fn compile_charge(&self) -> SysResult<account::Charge> {
        let charge = self
            .kernel
            .runtime
            .compile_charge(&self.account, &|| self.runner_alive())
            .map_err(vino_graft::GraftError::from)?;
        if !self.runner_alive() {
            return Err(vino_graft::GraftError::from(vino_graft::LoadError::Cancelled).into());
        }
        Ok(charge)
    }

    /// Loads the module this user staged under `token` at `point`, as [`Process::graft_load`].
    pub fn graft_load_staged(&self, point: &str, token: u64) -> SysResult<GraftInfo> {
        let wasm = self.kernel.staged.take(token, self.cred.uid)?;
        self.graft_load(point, &wasm)
    }

    /// The file's own slot behind `point` if it is one of [`crate::fd_points::FILE_WIDE`] (not
    /// the wrapper a descriptor may reach it through).
    fn per_file_slot(&self, point: &str) -> Option<Arc<dyn ManagedSlot>> {
        let (base, fd) = crate::fd_points::parse(point)?;
        if !crate::fd_points::FILE_WIDE.contains(&base) {
            return None;
        }
        let ino = self.file(fd).ok()?.ino;
        match base {
            "file.block_buddy" => Some(self.kernel.fs.block_buddy(ino).ok()? as Arc<dyn ManagedSlot>),
            _ => Some(self.kernel.locks.manager.existing_graftpoint(ino)? as Arc<dyn ManagedSlot>),
        }
    }

    pub fn graft_unload(&self, point: &str) -> SysResult<()> {
        if let Some(r) = self.dir_access_call(point, &GraftCall::Unload) {
            return r.map(drop);
        }
        Ok(self.namespace_of(point).unload(self.principal(), point)?)
    }

    pub fn graft_write_memory(&self, point: &str, offset: u32, bytes: &[u8]) -> SysResult<()> {
        let write = || vino_cache::OwnerCall::Write {
            offset,
            bytes: bytes.to_vec(),
        };
        if let Some(r) = self.try_owner_call(point, write()) {
            return r.map(drop);
        }
        if let Some(r) = self.dir_access_call(
            point,
            &GraftCall::WriteMemory {
                offset,
                bytes: bytes.to_vec(),
            },
        ) {
            return r.map(drop);
        }
        Ok(self
            .namespace_of(point)
            .write_memory(self.principal(), point, offset, bytes)?)
    }

    /// The address of a data symbol the graft exports (where to write its shared state).
    pub fn graft_symbol(&self, point: &str, symbol: &str) -> SysResult<u32> {
        let lookup = vino_cache::OwnerCall::Symbol { name: symbol.into() };
        if let Some(r) = self.try_owner_call(point, lookup) {
            return r.map(|a| a as u32);
        }
        Ok(self
            .namespace_of(point)
            .authorized(self.principal(), point)?
            .symbol_address(symbol)?)
    }

    /// Calls a control function of a graft this process owns. Control calls use the owner's
    /// CPU: one user runs at most its limit of them at once (others of its calls wait their turn,
    /// up to twice the control budget, then `EAGAIN`), so its calls cannot take every core.
    pub fn graft_call(&self, point: &str, control: &str, args: &[i64]) -> SysResult<i64> {
        let call = vino_cache::OwnerCall::Control {
            name: control.into(),
            args: args.to_vec(),
        };
        if let Some(r) = self.try_owner_call(point, call) {
            return r;
        }
        if let Some(r) = self.dir_access_call(
            point,
            &GraftCall::Call {
                control: control.to_string(),
                args: args.to_vec(),
            },
        ) {
            return r;
        }
        let slot = self.namespace_of(point).authorized(self.principal(), point)?;
        let patience = self.kernel.runtime.config().control_budget.saturating_mul(2);
        let _turn = self.account.charge_waiting(Resource::ControlCalls, 1, patience)?;
        Ok(slot.call_control(control, args)?)
    }

    /// Starts recording the inputs of the graft at `point` (see `vino_graft::record`), at most
    /// `limit` bytes (cut to `vino_graft::record::DEFAULT_LIMIT`), charged to the graft's owner.
    /// Only a process that may bind at `point` may record there.
    pub fn graft_record_start(&self, point: &str, limit: usize) -> SysResult<()> {
        let limit = limit.clamp(1, vino_graft::record::DEFAULT_LIMIT);
        Ok(self.namespace_of(point).record_start(self.principal(), point, limit)?)
    }

    /// Starts recording the kernel's own decisions at `point`, where nothing is bound: each
    /// invocation's arguments and the default's answer as a graft would give it, charged to
    /// this process (at most `limit` bytes) and dropped if it exits before the stop. Who may:
    /// as for [`Process::graft_record_start`].
    pub fn graft_record_default_start(&self, point: &str, limit: usize) -> SysResult<()> {
        let limit = limit.clamp(1, vino_graft::record::DEFAULT_LIMIT);
        let owner = self.graft_owner();
        Ok(self
            .namespace_of(point)
            .record_default_start(self.principal(), point, limit, &owner)?)
    }

    /// Stops the recording at `point` and gives it (also that of a graft unloaded meanwhile).
    pub fn graft_record_stop(&self, point: &str) -> SysResult<vino_graft::record::Recording> {
        Ok(self.namespace_of(point).record_stop(self.principal(), point)?)
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

    /// This process's graftpoints and the global ones, with what is bound and its statistics:
    /// a graft loaded by a process of another user keeps only its point and policy (see
    /// [`Kernel::sees`]). Then the `dir.access` bindings and the loaded stream codecs of this
    /// process's user (every user's, for a privileged process).
    pub fn graft_list(&self) -> Vec<SlotInfo> {
        let mut all = self.namespace.list();
        all.extend(self.kernel.global.list());
        all.extend(self.dir_access_slots());
        let mut listed: Vec<_> = all
            .into_iter()
            .map(|s| self.kernel.visible_slot(&self.cred, s))
            .collect();
        // A codec belongs to its user, not to a process: `stream_slots` shows the viewer's own.
        listed.extend(self.stream_slots());
        listed
    }

    /// One graftpoint as [`Process::graft_list`] shows it.
    pub fn graft_stats(&self, point: &str) -> SysResult<SlotInfo> {
        let slot = self.namespace_of(point).lookup(point)?;
        let info = SlotInfo {
            point: point.to_string(),
            ..slot.info()
        };
        Ok(self.kernel.visible_slot(&self.cred, info))
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
        self.timer_stop();
        self.stop_tries();
        self.stop_servers();
        self.drop_all_layers();
        self.kernel.events.detach(self.pid);
        let open = self.files.lock().drain();
        for (_, file) in open {
            let _ = self.drop_file(&file);
        }
        self.locks_released();
        // The user's verifier and packet order outlive the process that loaded them.
        self.namespace.forget(crate::exec_verify::USER_POINT);
        self.namespace.forget(crate::net_sharing::USER_POINT);
        self.namespace.unload_owned_by(self.pid);
        for slot in self.file_slots.lock().drain(..).filter_map(|w| w.upgrade()) {
            if slot.info().graft.is_some_and(|g| g.owner == self.pid) {
                slot.unload();
            }
        }
        self.kernel.file_grafts.release(self.pid);
        for info in self.namespace.list() {
            self.namespace.forget(&info.point);
        }
    }
}
