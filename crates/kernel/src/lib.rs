//! The VINO kernel, assembled: a block device under an I/O scheduler, the page cache and the
//! file system on top, and the processes that use them through system calls.
//!
//! ```text
//!  Process (credentials, open files, graft namespace) ── system calls ── Kernel
//!      read/write ── PageCache ── IoScheduler ── BlockDevice
//!      namespace ops, block allocation ── FileSystem (journaled metadata) ──┘
//! ```
//!
//! The page cache, the file system and the I/O scheduler do not know each other; the kernel
//! wires them (`cache_io`): a file as the cache's backing ([`FileBacking`]), the scheduler as
//! the cache's I/O path ([`SchedulerIo`]), the cache as where a write's bytes go
//! ([`CacheTarget`]: the file system decides which blocks a write allocates and which bytes
//! become zeros, for its uncached path and this one alike), and the file system's data hook,
//! which writes a file's dirty pages before a journal commit makes its new blocks or size
//! durable (ordered mode). The file system's own reads and writes go through the scheduler too
//! (`ScheduledDevice`).
//!
//! Every policy on that path is a graftpoint: `vas.pick_victim` (per process),
//! `file.compute_ra/<fd>` (per open file), `file.block_buddy/<fd>` (per file, its creator only),
//! `lock.grant/<fd>` (per file, its creator), `disk.pick_request` and `cache.writeback` (global,
//! privileged processes only), and the file-system events `event.fs.*` (per process).
//! [`graftpoints`] lists them all, from their types. Byte-range locks (fcntl) are kept by
//! `vino-locks`.
//!
//! The kernel runs in the caller's process; the daemon (`vinod`) serves the same system calls to
//! other processes.
//!
//! # The boundary
//!
//! Front ends (the daemon's socket, the FUSE mount, VINO processes, the CLI and the benchmarks)
//! reach the kernel only through [`Kernel`] and [`Process`] calls, which check the caller's
//! credentials and charge its accounts themselves: a rule that protects one user from another
//! (what `top` and `graft list` show of other users' grafts, who sets whose CPU tickets, how
//! many connections and blocking lock waits a user holds, whose accounts a viewer may read)
//! is kept here, once, for every entry point. The subsystems (file system, page cache, I/O
//! scheduler, lock manager, graft runtime) and the CPU scheduler are this crate's own: their
//! accessors are `pub(crate)`, and public only with the cargo feature `internals`, which the
//! simulator turns on to drive and inspect them (nothing else does;
//! `crates/kernel/tests/boundary.rs` keeps it so). What front ends need of the lower crates is
//! re-exported: types here, image tools in [`storage`]. The one privileged front end is the
//! mount, which serves Linux's own permission checks: see [`Kernel::node_stat`]. The account
//! tree ([`Kernel::accounts`]) is still handed out whole: the daemon registers its connection
//! threads with the CPU sampler through it, and tests read what is charged.

#![forbid(unsafe_code)]

/// An accessor of an internal subsystem: public with the feature `internals`, else crate-only.
macro_rules! internal {
    ($(#[$m:meta])* fn $($rest:tt)*) => {
        #[cfg(feature = "internals")]
        $(#[$m])* pub fn $($rest)*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code)]
        $(#[$m])* pub(crate) fn $($rest)*
    };
}

mod attrs;
mod boundary;
pub use boundary::UserAccount;
mod cache_io;
mod changes;
pub mod dir_grafts;
mod error;
mod events;
mod exec_verify;
mod family;
mod fd_points;
mod file_grafts;
mod files;
pub mod graft_try;
pub mod graftpoints;
mod invariants;
mod locks;
pub mod memory;
mod namei;
mod names;
pub mod net_server;
mod net_sharing;
pub mod perm;
mod pipe;
mod process;
pub mod signal;
pub mod socket_layers;
mod sockets;
mod staged;
mod stream_names;
mod streams;
mod user_slot;
pub use staged::{STAGED_PER_PROCESS, STAGED_TTL};
pub use stream_names::parse_module_name;
pub use streams::{STREAM_SCAN_EVERY, StreamDependency, StreamStatus, Streams, module_id, module_name};

pub use attrs::{Attrs, FallocMode, SetTime};
pub use cache_io::{CacheTarget, FileBacking, QueueIo, SchedulerIo};
pub use changes::{Change, ChangeHook};
pub use dir_grafts::{AccessOp, DirAccess, DirAccessInfo, DirLookup, MAX_REDIRECTS, WALK_ACCESS_CALLS};
pub use error::{Errno, SysError, SysResult};
pub use events::{
    CloseEvent, CreateEvent, EVENT_BATCH, EVENT_QUEUE_MAX, EVENT_THREADS, EventEnv, EventFilter, EventKind, EventStats,
    FILTER_ENTRY_BYTES, FsEvent, FsEventPoint, KindStats, ModifyEvent, OpenEvent, UnlinkEvent, UnlinkRecord,
};
pub use exec_verify::{ExecVerify, Verdict, Verified, VerifyArgs, hex as exec_hex};
pub use vino_net::{
    EgressStats, HostConfig, HostStats, Interest as SocketInterest, LOOPBACK, NetConfig, NetStats, Shaping, SocketId,
    SocketInfo, Wait as SocketWait,
};

/// Largest module a bound `exec.verify` verifier reads.
pub fn exec_verify_max() -> usize {
    exec_verify::MAX_MODULE
}
pub use family::{ExitStatus, Waited};
pub use file_grafts::{FILE_WIDE_POINTS, FileGraftInfo};
pub use files::{Fd, OpenFlags};
#[cfg(any(test, feature = "internals"))]
pub use invariants::Corruption;
pub use invariants::{InvariantError, Relation};
pub use locks::{LockRequest, LockType};
pub use namei::{At, MAX_SYMLINKS, NAME_MAX, PATH_MAX};
pub use names::{DirPage, RenameFlags};
pub use perm::{Credentials, Protected};
pub use pipe::{PIPE_BUF, PIPE_CAPACITY, Pipe, PipeEnd, Side};
pub use process::{GraftCall, Process};
pub use vino_cache::RaMode;
pub use vino_fs::{DirEntry, FileType, Stat};
pub use vino_graft::GraftEvent;
pub use vino_graft::account::{self, Account, Resource};
pub use vino_iosched::Dispatch;
pub use vino_locks::{Lock, LockKind, LockStats};

/// The file system's constants and settings front ends need, and the tools on images (the
/// daemon's first start makes one; tests check one after unmount).
pub mod storage {
    pub use vino_fs::{
        BS, FREE_SLICE, FsStats, FsckReport, MAX_NAME, MkfsOptions, MountOptions, Quota, QuotaUsage, ROOT_INO,
        UNLIMITED, XattrSet, fsck, mkfs,
    };
}

use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use vino_blockdev::{BackendChoice, BlockDevice, SharedClock};
use vino_cache::{CacheConfig, PageCache};
use vino_fs::{FileSystem, MountOptions};
use vino_graft::account::{Accounts, LimitsConfig};
use vino_graft::{Namespace, Runtime, RuntimeConfig};
use vino_iosched::{IoScheduler, SchedConfig, ScheduledDevice};
pub use vino_sched::{
    SchedConfig as CpuSchedConfig, SchedStats as CpuStats, Scheduler as CpuScheduler, ShareError as CpuShareError,
    State as ThreadState, ThreadInfo as CpuThread, blocking as blocking_wait,
};

/// A process id.
pub type Pid = u64;

/// How the kernel is put together.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// Page-cache frames of 4 KiB (1024: the thesis' 4 MB cache).
    pub cache_frames: usize,
    /// Percent of the cache one process's writes may keep dirty (`CacheConfig::dirty_percent`).
    pub dirty_percent: u8,
    /// Free frames made ahead of need by a background thread (`CacheConfig::warm_ahead`; 0:
    /// none, each made on first need).
    pub cache_warm_ahead: usize,
    /// Requests the I/O scheduler keeps in flight at the device.
    pub queue_depth: usize,
    /// How often the write-back policy runs (`None`: only on sync).
    pub writeback_every: Option<Duration>,
    pub mount: MountOptions,
    pub runtime: RuntimeConfig,
    /// What each process and user may make the kernel hold.
    pub limits: LimitsConfig,
    /// Most events each listener's user-level queue, and each listener's queue of event graft
    /// jobs, holds; more are dropped (the user-level queue gets one overflow marker).
    pub event_queue_max: usize,
    /// The device queue's backend.
    pub io_backend: BackendChoice,
    /// Who runs the I/O scheduler's dispatcher: its own thread, or the threads that need the
    /// I/O (with the inline backend, a request is served on the thread that asked for it).
    pub dispatch: Dispatch,
    /// Where time comes from: request ages, timestamps (the file system's too: `boot` hands
    /// this clock to the mount).
    pub clock: SharedClock,
    /// Who runs event grafts: the kernel's event threads, or whoever calls
    /// [`Kernel::run_events`] (a simulation's steps; a quiesce or shutdown runs them too).
    pub event_dispatch: Dispatch,
    /// How VINO processes' threads share the CPU (the workers start with the first thread).
    pub cpu: CpuSchedConfig,
    /// Linux's `fs.protected_*` rules, for every entry point's names.
    pub protect: perm::Protected,
    /// Whether programs' memory is paged by the kernel (see `memory`); off, Linux pages it,
    /// unlimited by the kernel's resident sets (to measure what paging costs).
    pub paged_memory: bool,
    /// Swap on the kernel's file system (the default), or in the daemon's memory: the
    /// simulator's, whose disk must see the same writes every run while which page the pager
    /// evicts depends on when Linux lets a page move.
    pub swap_on_disk: bool,
    /// The network stack's settings; a host link in them is attached at boot (a link that
    /// cannot be attached fails the boot), the loopback-only stack at the first socket call.
    /// Its clock is the kernel's ([`KernelConfig::clock`]), whatever it names.
    pub net: vino_net::NetConfig,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            cache_frames: 1024,
            dirty_percent: CacheConfig::default().dirty_percent,
            cache_warm_ahead: 0,
            queue_depth: 32,
            writeback_every: Some(Duration::from_secs(1)),
            mount: MountOptions::default(),
            runtime: RuntimeConfig::default(),
            limits: LimitsConfig::default(),
            event_queue_max: EVENT_QUEUE_MAX,
            io_backend: BackendChoice::Auto,
            // The thread that needs the I/O dispatches it: a hand-off to a dispatcher thread
            // doubled a cold miss's time (`vino bench miss`).
            dispatch: Dispatch::Caller,
            clock: SharedClock::default(),
            event_dispatch: Dispatch::Thread,
            cpu: CpuSchedConfig::default(),
            protect: perm::Protected::default(),
            paged_memory: true,
            swap_on_disk: true,
            net: vino_net::NetConfig::default(),
        }
    }
}

/// The kernel.
pub struct Kernel {
    runtime: Runtime,
    sched: Arc<IoScheduler>,
    /// The CPU scheduler of VINO processes' threads.
    cpu: Arc<CpuScheduler>,
    cache: Arc<PageCache>,
    fs: Arc<FileSystem>,
    /// Global graftpoints: privileged processes only.
    global: Namespace,
    processes: Mutex<BTreeMap<Pid, Arc<Process>>>,
    /// Set by [`Kernel::kill_all`]: processes spawned from then on start killed.
    killing: AtomicBool,
    next_pid: AtomicU64,
    pub(crate) files: files::FileTable,
    pub(crate) file_grafts: file_grafts::FileGrafts,
    pub(crate) events: events::Events,
    pub(crate) locks: locks::KernelLocks,
    /// The namespace lock: a system call that changes names holds it for writing, one that
    /// looks names up for reading, each for its whole walk and operation (see `names`).
    pub(crate) ns: RwLock<()>,
    pub(crate) changes: changes::ChangeHooks,
    /// The pipes of FIFOs open now, by inode.
    pub(crate) fifos: Mutex<rustc_hash::FxHashMap<u64, std::sync::Weak<Pipe>>>,
    pub(crate) accounts: Accounts,
    pub(crate) clock: SharedClock,
    /// Firings of processes' timers (`event.timer`), for the simulation's report.
    pub(crate) timer_firings: AtomicU64,
    /// Graft modules waiting for an ioctl on the mount to bind them.
    pub(crate) staged: staged::Staged,
    /// Linux's `fs.protected_*` rules.
    pub(crate) protect: perm::Protected,
    /// Processes' memory: the pager and its swap area.
    pub(crate) memory: memory::KernelMemory,
    /// Stream codecs and the stream files the cache knows.
    pub(crate) streams: streams::Streams,
    /// Directories' `dir.access` grafts.
    pub(crate) dir_grafts: dir_grafts::DirGrafts,
    /// `exec.verify`: the global verifier and each user's.
    pub(crate) exec: exec_verify::ExecVerifiers,
    /// The network stack, started by the first socket call (a kernel that never uses the
    /// network runs no thread for it).
    pub(crate) net: std::sync::OnceLock<vino_net::Net>,
    pub(crate) net_config: vino_net::NetConfig,
    /// Users' weights, shares and `net.pick_packet` grafts, as the stack asks for them.
    pub(crate) net_sharing: Arc<net_sharing::NetSharing>,
}

impl Kernel {
    /// Mounts the file system on `device` (replaying its journal) and starts the kernel.
    pub fn boot(device: Arc<dyn BlockDevice>, config: &KernelConfig) -> SysResult<Arc<Kernel>> {
        if config.event_queue_max == 0 {
            return Err(SysError::new(Errno::Inval, "event_queue_max must be at least 1"));
        }
        // Deadlines of transactions, lock waits and grafts' `vino_now_ns` run on the kernel's clock.
        let vlt = vino_graft::vlt::Vlt::with_clock(config.runtime.vlt, config.clock.clone());
        let runtime = Runtime::with_vlt(config.runtime, vlt);
        let sched = Arc::new(IoScheduler::with_config(
            device.clone(),
            &runtime,
            SchedConfig {
                backend: config.io_backend,
                dispatch: config.dispatch,
                clock: config.clock.clone(),
                ..SchedConfig::new(config.queue_depth)
            },
        )?);
        let cache_config = CacheConfig {
            frames: config.cache_frames,
            writeback_every: config.writeback_every,
            clock: config.clock.clone(),
            dirty_percent: config.dirty_percent,
            warm_ahead: config.cache_warm_ahead,
        };
        let cache = PageCache::new(cache_config, Arc::new(SchedulerIo(sched.clone())), &runtime);
        let mount = MountOptions {
            clock: config.clock.clone(),
            ..config.mount.clone()
        };
        // The file system's own reads and writes (metadata, journal) wait in the scheduler's
        // queue with the cache's, under the same policy.
        let fs_device: Arc<dyn BlockDevice> = Arc::new(ScheduledDevice::new(sched.clone()));
        let fs = FileSystem::mount(fs_device, &runtime, &mount)?;
        // Ordered mode: before a journal commit makes new allocations durable, the data written
        // into those blocks goes to the device, all files' together; the commit's own device
        // flush then makes it durable.
        let hook_cache = Arc::downgrade(&cache);
        fs.set_data_hook(Some(Arc::new(move |inos: &[u64]| {
            let Some(cache) = hook_cache.upgrade() else {
                return Ok(());
            };
            cache.write_objects(inos)
        })));
        let global = Namespace::new();
        global.register(sched.slot().clone());
        global.register(cache.writeback_slot().clone());
        let cpu = Arc::new(CpuScheduler::new(&runtime, config.cpu));
        global.register(cpu.pick_next_slot().clone());
        let accounts = Accounts::new(config.limits);
        let fs_for_memory = fs.clone();
        let streams = streams::Streams::new(&runtime, &fs);
        let exec = exec_verify::ExecVerifiers::new(&runtime);
        global.register(exec.global.slot.clone());
        let net = std::sync::OnceLock::new();
        let net_sharing = Arc::new(net_sharing::NetSharing::new(&runtime));
        net_sharing.set_cpu(&cpu);
        global.register(net_sharing.link.clone());
        // One clock: the stack's timers read the kernel's.
        let net_config = vino_net::NetConfig {
            clock: config.clock.clone(),
            sharing: Some(vino_net::egress::SharingHandle(net_sharing.clone())),
            ..config.net.clone()
        };
        if net_config.host.is_some() {
            let started =
                vino_net::Net::start(net_config.clone()).map_err(|e| SysError::new(Errno::Inval, e.to_string()))?;
            let _ = net.set(started);
        }
        let kernel = Arc::new(Kernel {
            locks: locks::KernelLocks::new(&runtime),
            runtime,
            sched,
            cpu,
            cache,
            fs,
            global,
            processes: Mutex::new(BTreeMap::new()),
            killing: AtomicBool::new(false),
            next_pid: AtomicU64::new(1),
            files: files::FileTable::default(),
            file_grafts: Default::default(),
            events: events::Events::new(
                config.event_queue_max,
                Some(accounts.cpu().clone()),
                config.event_dispatch,
            ),
            ns: RwLock::new(()),
            changes: Default::default(),
            accounts,
            fifos: Mutex::default(),
            clock: config.clock.clone(),
            timer_firings: AtomicU64::new(0),
            staged: Default::default(),
            protect: config.protect,
            memory: memory::KernelMemory::new(fs_for_memory, config),
            streams,
            dir_grafts: Default::default(),
            exec,
            net,
            net_sharing,
            net_config,
        });
        // Write-back done for a process is paid from its CPU share, as its event grafts are.
        let weak = Arc::downgrade(&kernel);
        kernel.cache.charge_writeback_to(Box::new(move |pid, used| {
            if let Some(k) = weak.upgrade() {
                k.cpu().charge(pid, used);
            }
        }));
        Ok(kernel)
    }

    /// A new process with these credentials, the leader of a session of its own.
    pub fn spawn(self: &Arc<Self>, cred: Credentials) -> Arc<Process> {
        self.spawn_with(cred, None)
    }

    pub(crate) fn spawn_with(self: &Arc<Self>, cred: Credentials, parent: Option<&Arc<Process>>) -> Arc<Process> {
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        let process = Process::new(self.clone(), pid, cred, parent.map(|p| &**p));
        self.events.attach(&process);
        let mut all = self.processes.lock();
        // Read under the lock that `kill_all` walks the processes under: no spawn slips between.
        if self.killing.load(Ordering::SeqCst) {
            process.kill();
        }
        all.insert(pid, process.clone());
        process
    }

    /// Kills what runs in every process (programs), and in every process spawned from now on:
    /// the start of a shutdown, which nothing running may then hold up.
    pub fn kill_all(&self) {
        self.killing.store(true, Ordering::SeqCst);
        for p in self.processes() {
            p.kill();
        }
    }

    /// Times processes' timers have fired since boot.
    pub fn timer_firings(&self) -> u64 {
        self.timer_firings.load(Ordering::Relaxed)
    }

    /// The resource accounts of every user, and the limits they are held to.
    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    pub fn process(&self, pid: Pid) -> Option<Arc<Process>> {
        self.processes.lock().get(&pid).cloned()
    }

    /// Every live process.
    pub fn processes(&self) -> Vec<Arc<Process>> {
        self.processes.lock().values().cloned().collect()
    }

    /// Ends a process: closes its files, unloads every graft it owns, forgets it. It exited
    /// with 0 unless a signal killed it.
    pub fn exit(&self, pid: Pid) {
        let status = self
            .process(pid)
            .and_then(|p| p.killed_by())
            .map_or(ExitStatus::Exited(0), ExitStatus::Signaled);
        self.exit_with(pid, status);
    }

    /// As [`Kernel::exit`], with the status its parent's `wait` reports.
    pub fn exit_with(&self, pid: Pid, status: ExitStatus) {
        let Some(p) = self.processes.lock().remove(&pid) else {
            return;
        };
        self.leave_family(&p, status);
        // What still runs in it stops rather than go on without its files.
        p.kill();
        p.release();
        debug_assert!(p.fds().is_empty(), "pid {pid} exited holding descriptors");
        self.global.unload_owned_by(pid);
        self.cache.unregister_process(pid);
        self.staged.release(pid);
        self.cpu.remove_process(pid);
        if let Some(net) = self.net.get() {
            net.close_all(pid);
        }
    }

    /// Writes everything to the device and commits the file system: all of it survives a crash
    /// from here on. The checkpoint (the journal's blocks written home) stays lazy, as ext4's
    /// does at sync(2): any user may call this, and a checkpoint writes much more.
    pub fn sync(&self) -> SysResult<()> {
        self.cache.sync_all()?;
        // Every stream file's chunks are stored: their sizes on disk catch up.
        self.fs.settle_stream_sizes()?;
        Ok(self.fs.commit()?)
    }

    /// Ends every process, syncs and unmounts cleanly.
    pub fn shutdown(&self) -> SysResult<()> {
        self.events_quiesce();
        let pids: Vec<Pid> = self.processes.lock().keys().copied().collect();
        for pid in pids {
            self.exit(pid);
        }
        self.cache.sync_all()?;
        self.memory.release_swap();
        self.streams.unload_codecs();
        self.dir_grafts.clear();
        self.exec.unload_all();
        self.net_sharing.unload_all();
        Ok(self.fs.unmount()?)
    }

    internal! {
        /// The graft runtime.
        fn runtime(&self) -> &Runtime {
            &self.runtime
        }
    }

    internal! {
        fn fs(&self) -> &Arc<FileSystem> {
            &self.fs
        }
    }

    internal! {
        fn cache(&self) -> &Arc<PageCache> {
            &self.cache
        }
    }

    internal! {
        /// The CPU scheduler that runs VINO processes' threads.
        fn cpu(&self) -> &CpuScheduler {
            &self.cpu
        }
    }

    internal! {
        fn scheduler(&self) -> &Arc<IoScheduler> {
            &self.sched
        }
    }

    internal! {
        /// The byte-range lock manager (objects are inode numbers, owners process ids).
        fn locks(&self) -> &vino_locks::LockManager {
            &self.locks.manager
        }
    }

    internal! {
        /// The global graftpoints' namespace (binding goes through [`Process::graft_load`]).
        fn global_graftpoints(&self) -> &Namespace {
            &self.global
        }
    }

    /// The global graftpoints, with what is bound and its statistics, unredacted: for the
    /// kernel's owner (a privileged view such as `top`, which filters by [`Kernel::sees`]).
    pub fn global_grafts(&self) -> Vec<vino_graft::SlotInfo> {
        self.global.list()
    }

    /// Takes a reference to the inode `ino`, if it still holds the file of `generation` (else
    /// `ESTALE`): while referenced, the file lives on even if its last name goes. The mount
    /// holds each node it has told Linux of this way. [`Kernel::release_inode`] gives it back.
    pub fn hold_inode(&self, ino: u64, generation: u32) -> SysResult<Stat> {
        let _ns = self.ns.read();
        match self.fs.stat(ino) {
            Ok(st) if st.generation == generation && (st.nlink > 0 || self.files.parked().contains(&ino)) => {
                self.files.take_for_mount(ino);
                self.debug_check_locked(None, &[ino]);
                Ok(st)
            }
            _ => Err(SysError::new(
                Errno::Stale,
                format!("inode {ino} (generation {generation}) is gone"),
            )),
        }
    }

    /// Gives back a reference taken by [`Kernel::hold_inode`].
    pub fn release_inode(&self, ino: u64) -> SysResult<()> {
        self.files.mount_released();
        let released = self.release_ref(ino);
        if cfg!(debug_assertions) {
            let _ns = self.ns.read();
            self.debug_check_locked(None, &[ino]);
        }
        released
    }

    /// Drops a reference; the last one of a parked file frees it.
    pub(crate) fn release_ref(&self, ino: u64) -> SysResult<()> {
        if !self.files.drop_ref(ino) {
            return Ok(());
        }
        // The unlink that parked the file holds the namespace lock until the file system has
        // it on its orphan list: taking the lock waits for that. It is not held while the file
        // is freed, which takes long (every block, and the cache's pages): with the last
        // reference gone and no name left (a link to a nameless file is refused), nothing can
        // reach the inode any more, and every rename, link and unlink of other files waited for
        // each such release (the mount's forgets of what `rm -rf` unlinked).
        drop(self.ns.read());
        // The cache forgets the file before its blocks are freed: a stale dirty page written
        // back later could land on a block reused for metadata.
        self.cache.invalidate(ino, 0);
        self.streams.forget(&self.cache, ino);
        Ok(self.fs.release_orphan(ino)?)
    }

    /// Files unlinked while referenced, waiting for their last reference (inode numbers).
    pub fn parked_files(&self) -> Vec<u64> {
        self.files.parked()
    }

    /// Inodes referenced now (by open files and the mount's nodes).
    pub fn referenced_inodes(&self) -> usize {
        self.files.referenced()
    }

    /// Calls `hook` after every change to names or attributes; returns an id for
    /// [`Kernel::remove_change_hook`].
    pub fn on_change(&self, hook: ChangeHook) -> u64 {
        self.changes.add(hook)
    }

    pub fn remove_change_hook(&self, id: u64) {
        self.changes.remove(id);
    }
}
