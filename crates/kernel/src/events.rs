//! File-system events (Small 1998, 3.5 and 7.4).
//!
//! The file system raises an event when a file is opened, closed, created, unlinked (a file
//! replaced by a rename counts as unlinked) or modified (write, pwrite, ftruncate). Each process
//! has one graftpoint per kind in its own namespace, `event.fs.{open,close,create,unlink,modify}`,
//! and a data-driven filter per kind, set by a system call ([`Process::event_filter`]): a set of
//! inodes and a set of names (a created or unlinked name), checked in the kernel with hash sets
//! so the cost does not grow with the filter. An empty filter accepts every event of its kind.
//! A process hears only of files it may read (checked on the file's state when the event
//! happens), and of a name (open, create, unlink) only if it may list the directory holding it:
//! read and search permission on the directory and search permission on every directory above
//! it (found through `..`), as a walk to it and a `readdir` of it would need. An event that
//! names no directory (close, modify, an open by inode) reaches a process only for a file it
//! reached by a path: one it holds open, one it named by inode in its filter (accepted only for
//! a file it held open then, as `inotify_add_watch` resolves a path; kept, as a watch is, if the
//! path closes later), or one it acted on itself. A file has no parent pointer and may have many
//! names, so this is checked by what the process holds, not by walking up. Privileged
//! processes hear everything. These checks run only for a listener the event would otherwise
//! reach, the directory one once per set of credentials and event; they apply alike to
//! user-level delivery and to event grafts.
//!
//! A filter's bytes (its names, and a fixed cost per entry) are charged to the process and its
//! user ([`Resource::EventFilterBytes`], `EDQUOT` past the limit) while the kernel keeps it:
//! until it is replaced, until the process stops hearing that kind (no subscription, no
//! graft), or until it exits.
//!
//! A process receives an event if it has a graft (or a native policy) bound on that kind's
//! graftpoint, or has asked for user-level delivery ([`Process::event_subscribe`], then
//! [`Process::event_wait`]); with both, it gets both.
//!
//! Delivery is asynchronous: the system call that raises the event only filters and enqueues.
//! A small pool of kernel threads runs the event grafts, each invocation inside its transaction.
//! Each listener has its own queue of graft jobs; the threads serve the listeners that have jobs
//! in turn (a run queue: take the listener at the head, run at most [`EVENT_BATCH`] of its jobs,
//! put it back at the tail if it has more). A listener is served by one thread at a time, so its
//! graft sees its events in order, and a slow graft delays only its own events: another
//! listener waits at most about one batch per other busy listener. Each event reaches each
//! process that should get it exactly once, unless its queue is full. With nobody listening,
//! raising an event costs one counter increment and one load (the thesis' "no handler" row).
//!
//! Both queues of a listener (user-level events, graft jobs) are bounded by the kernel's
//! `event_queue_max`. An event for a full queue is dropped and counted ([`KindStats::dropped`]);
//! the user-level queue then gets one [`EventKind::Overflow`] marker in its place (as
//! inotify's `IN_Q_OVERFLOW`), and no other until its reader has taken it below the bound
//! again. A full graft queue just counts its drops: a graft that cannot keep up loses events.
//!
//! Event grafts may call `vino_file_write(fd, offset, ptr, len)` and `vino_file_fsync(fd)` on a
//! file their owner has open for writing. The arguments are checked at the call (a negative
//! errno comes back on a bad descriptor or range) but the effect is deferred to the
//! transaction's commit log: a graft that writes and then fails leaves the file unchanged, as
//! the thesis' transaction-protected write did.
//!
//! A graft that writes to a file whose modify events its own process hears, unfiltered, will
//! keep hearing of its own writes: filter them out.

use crate::account::{CpuShares, Worker};
use crate::error::{Errno, SysError, SysResult};
use crate::files::{Fd, FdTable};
use crate::perm::{self, Credentials, EXEC, READ};
use crate::{Account, Dispatch, Kernel, Pid, Process, Resource};
use parking_lot::{Condvar, Mutex, RwLock};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use vino_fs::Stat;
use vino_graft::account::Charge;
use vino_graft::{
    Access, CallError, Callables, GraftInfo, GraftPoint, GraftSlot, Invalid, LoadError, ManagedSlot, NativePolicy,
    Owner, SlotWrapper,
};

/// Kernel threads that run event grafts.
pub const EVENT_THREADS: usize = 2;
/// Most graft jobs of one listener an event thread runs before serving the next listener.
pub const EVENT_BATCH: usize = 4;
/// How long an event thread with only a heavy user's listener to serve, and that user's turns
/// all taken, waits before it looks again.
const TURN_RETRY: Duration = Duration::from_millis(1);
/// Default bound of each listener's queues (`KernelConfig::event_queue_max`).
pub const EVENT_QUEUE_MAX: usize = 4096;
/// Most bytes one `vino_file_write` may write.
pub const EVENT_WRITE_MAX: usize = 64 * 1024;
/// Most entries (inodes and names together) of one filter.
pub const FILTER_MAX: usize = 1 << 20;
/// Bytes a filter entry costs the kernel beyond a name's own bytes (its hash-set slot, the
/// string's header and the table's slack): charged with the names as
/// [`Resource::EventFilterBytes`].
pub const FILTER_ENTRY_BYTES: u64 = 48;
/// Longest name copied into an event graft's argument area (NUL-terminated there).
pub const EVENT_NAME_MAX: usize = 255;

const POINT_NAMES: [&str; 5] = [
    "event.fs.open",
    "event.fs.close",
    "event.fs.create",
    "event.fs.unlink",
    "event.fs.modify",
];

/// A kind of file-system event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Open = 0,
    Close = 1,
    Create = 2,
    Unlink = 3,
    /// write, pwrite, ftruncate.
    Modify = 4,
    /// Not an event of the file system: the marker a full user-level queue gets in place of the
    /// events it dropped. It has no graftpoint, no filter and cannot be subscribed to.
    Overflow = 5,
}

impl EventKind {
    /// The kinds the file system raises (every kind but [`EventKind::Overflow`]).
    pub const ALL: [EventKind; 5] = [
        EventKind::Open,
        EventKind::Close,
        EventKind::Create,
        EventKind::Unlink,
        EventKind::Modify,
    ];

    /// The graftpoint of this kind (`event.fs.unlink`); `None` for [`EventKind::Overflow`].
    pub fn point(self) -> Option<&'static str> {
        POINT_NAMES.get(self as usize).copied()
    }

    /// The index of a kind the file system raises, in [`EventKind::ALL`] order (callers check
    /// for [`EventKind::Overflow`] first, with [`raised_kind`]).
    fn index(self) -> usize {
        debug_assert!(self != EventKind::Overflow, "overflow has no per-kind state");
        self as usize
    }
}

/// `kind` if the file system raises it; `EINVAL` for [`EventKind::Overflow`], which has no
/// graftpoint, filter or subscription.
fn raised_kind(kind: EventKind) -> SysResult<EventKind> {
    if kind == EventKind::Overflow {
        return Err(SysError::new(Errno::Inval, "overflow is not an event one can ask for"));
    }
    Ok(kind)
}

/// One file-system event. What an event graft is told, and what [`Process::event_wait`] returns.
///
/// An [`EventKind::Overflow`] marker has `inode`, `parent` and `pid` 0, no name, and the `seq`
/// of the first event its queue dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEvent {
    pub kind: EventKind,
    pub inode: u64,
    /// The directory holding the name (open, create, unlink); 0 for an event on an open file
    /// (close, modify), which the kernel knows only by its inode.
    pub parent: u64,
    /// The process whose system call raised the event.
    pub pid: Pid,
    /// The name created or unlinked.
    pub name: Option<String>,
    /// When it happened (monotonic nanoseconds, `vino_now_ns`).
    pub time_ns: u64,
    /// Kernel-wide order of events that someone heard.
    pub seq: u64,
}

/// What events of one kind a process wants: files by inode, names created or unlinked. An
/// event passes if its inode is in `inodes` or its name in `names`; an empty filter passes all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventFilter {
    pub inodes: Vec<u64>,
    pub names: Vec<String>,
}

impl EventFilter {
    /// What the kernel charges for keeping this filter: each name's bytes and
    /// [`FILTER_ENTRY_BYTES`] per entry.
    pub fn bytes(&self) -> u64 {
        let names: u64 = self.names.iter().map(|n| n.len() as u64).sum();
        names + (self.inodes.len() + self.names.len()) as u64 * FILTER_ENTRY_BYTES
    }
}

/// A filter as the kernel checks it, with the charge for its memory.
#[derive(Default)]
struct Filter {
    inodes: FxHashSet<u64>,
    names: FxHashSet<String>,
    _charge: Option<Charge>,
}

impl Filter {
    fn new(f: EventFilter, charge: Option<Charge>) -> Filter {
        Filter {
            inodes: f.inodes.into_iter().collect(),
            names: f.names.into_iter().collect(),
            _charge: charge,
        }
    }

    #[inline]
    fn accepts(&self, inode: u64, name: Option<&str>) -> bool {
        if self.inodes.is_empty() && self.names.is_empty() {
            return true;
        }
        self.inodes.contains(&inode) || name.is_some_and(|n| self.names.contains(n))
    }
}

// ---- statistics ----------------------------------------------------------------------------------

/// Counters of one kind of event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindStats {
    /// Events raised by system calls, heard or not.
    pub raised: u64,
    /// Listeners an event did not reach: rejected by the filter or not allowed to read the file.
    pub filtered_out: u64,
    /// Of those, the ones refused because the listener may not read the file, or may not list
    /// the directory holding the name the event carries.
    pub denied: u64,
    /// Event graft invocations that committed.
    pub delivered_graft: u64,
    /// Events put on a user-level queue.
    pub delivered_user: u64,
    /// Event graft invocations that aborted (trap, budget, refused call, invalid result).
    pub graft_aborts: u64,
    /// Deferred writes or fsyncs that failed at commit (descriptor closed, disk full).
    pub commit_errors: u64,
    /// Deliveries dropped because the listener's queue (user-level or graft) was full.
    #[serde(default)]
    pub dropped: u64,
}

/// Counters of the event service, one entry per kind in [`EventKind::ALL`] order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStats {
    pub kinds: Vec<(EventKind, KindStats)>,
    /// [`EventKind::Overflow`] markers put on user-level queues.
    #[serde(default)]
    pub overflows: u64,
    /// [`Process::event_wait`] calls that found the queue empty and waited, and those of them
    /// that ended at their deadline (on the kernel's clock) with nothing come.
    #[serde(default)]
    pub waits_blocked: u64,
    #[serde(default)]
    pub wait_timeouts: u64,
}

impl EventStats {
    pub fn of(&self, kind: EventKind) -> KindStats {
        self.kinds
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Counters {
    raised: AtomicU64,
    filtered_out: AtomicU64,
    denied: AtomicU64,
    delivered_graft: AtomicU64,
    delivered_user: AtomicU64,
    graft_aborts: AtomicU64,
    commit_errors: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> KindStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        KindStats {
            raised: r(&self.raised),
            filtered_out: r(&self.filtered_out),
            denied: r(&self.denied),
            delivered_graft: r(&self.delivered_graft),
            delivered_user: r(&self.delivered_user),
            graft_aborts: r(&self.graft_aborts),
            commit_errors: r(&self.commit_errors),
            dropped: r(&self.dropped),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

// ---- the graftpoints -----------------------------------------------------------------------------

/// What an event graft's kernel functions see: the process that owns it.
pub struct EventEnv {
    pid: Pid,
    kind: EventKind,
    process: Weak<Process>,
    shared: Weak<Shared>,
}

impl EventEnv {
    /// The owning process, while it lives (native policies use it to write directly).
    pub fn process(&self) -> Option<Arc<Process>> {
        self.process.upgrade()
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    fn commit_error(&self) {
        if let Some(s) = self.shared.upgrade() {
            bump(&s.counters[self.kind.index()].commit_errors);
        }
    }
}

/// `event.fs.<kind>`: the graftpoint of one kind of event, `K` being its [`EventKind`] number.
///
/// Graft entry point: `event_fs_<kind>(kind: i32, inode: i64, parent: i64, pid: i64,
/// time_ns: i64, name_len: i32) -> i32`, the name (create, unlink, open) at the start of the
/// argument area, NUL-terminated. A result `>= 0` commits; a negative one is invalid and aborts
/// the invocation (its deferred writes are dropped). Default: nothing.
pub struct FsEventPoint<const K: usize>;

pub type OpenEvent = FsEventPoint<0>;
pub type CloseEvent = FsEventPoint<1>;
pub type CreateEvent = FsEventPoint<2>;
pub type UnlinkEvent = FsEventPoint<3>;
pub type ModifyEvent = FsEventPoint<4>;

impl<const K: usize> GraftPoint for FsEventPoint<K> {
    const NAME: &'static str = POINT_NAMES[K];
    const CALLABLE: &'static [&'static str] = &["vino_file_write", "vino_file_fsync"];
    const USES_ARG_AREA: bool = true;
    /// Event grafts run on the event threads, off every system call's path: more room than
    /// the kernel paths' 100 µs.
    const BUDGET: std::time::Duration = std::time::Duration::from_millis(10);
    /// Every event must reach the graft: a delivery that finds the owner in a control call waits
    /// for it (at most the control budget) on the event thread.
    const WAIT_WHEN_BUSY: bool = true;
    type Env = EventEnv;
    type Args<'a> = FsEvent;
    /// True if a policy ran and committed.
    type Output = bool;
    type Params = (i32, i64, i64, i64, i64, i32);
    type Results = i32;

    fn default_policy(_: &EventEnv, _: &FsEvent) -> bool {
        false
    }

    fn encode(_: &EventEnv, ev: &FsEvent, area: &mut [u8]) -> Self::Params {
        let name = ev.name.as_deref().unwrap_or("").as_bytes();
        let n = name.len().min(EVENT_NAME_MAX).min(area.len().saturating_sub(1));
        area[..n].copy_from_slice(&name[..n]);
        if let Some(nul) = area.get_mut(n) {
            *nul = 0;
        }
        (
            ev.kind as i32,
            ev.inode as i64,
            ev.parent as i64,
            ev.pid as i64,
            ev.time_ns as i64,
            n as i32,
        )
    }

    fn decode(_: &EventEnv, _: &FsEvent, r: i32, _: &[u8]) -> Result<bool, Invalid> {
        if r >= 0 {
            Ok(true)
        } else {
            Err(Invalid(format!("event graft returned {r}")))
        }
    }

    fn callables(c: &mut Callables<EventEnv>) {
        c.func4_mem("vino_file_write", file_write);
        c.func1("vino_file_fsync", file_fsync);
    }
}

fn errno(e: Errno) -> i32 {
    -(e as i32)
}

/// `vino_file_write(fd, offset, ptr, len) -> len | -errno`: checks now, writes at commit.
/// `offset` -1 appends at the end the file has at commit.
fn file_write(env: &EventEnv, memory: &[u8], fd: i32, offset: i64, ptr: i32, len: i32) -> Result<i32, CallError> {
    let Some(process) = env.process() else {
        return Ok(errno(Errno::BadF));
    };
    let Ok(file) = process.file(fd as Fd) else {
        return Ok(errno(Errno::BadF));
    };
    if fd < 0 || !file.flags.write {
        return Ok(errno(Errno::BadF));
    }
    if len < 0 || len as usize > EVENT_WRITE_MAX || offset < -1 {
        return Ok(errno(Errno::Inval));
    }
    // A write that cannot land is refused now, not dropped at commit after a success.
    if offset >= 0 && (offset as u64).saturating_add(len as u64) > vino_fs::MAX_FILE_SIZE {
        return Ok(errno(Errno::FBig));
    }
    let start = ptr as u32 as usize;
    let Some(bytes) = memory.get(start..start + len as usize) else {
        return Ok(-14);
    }; // EFAULT
    let data = bytes.to_vec();
    let (weak, fd, shared, kind, pid) = (env.process.clone(), fd as Fd, env.shared.clone(), env.kind, env.pid);
    vino_vlt::current::on_commit(move || {
        let env = EventEnv {
            pid,
            kind,
            process: weak,
            shared,
        };
        let Some(p) = env.process() else { return };
        // The descriptor must still name the file checked above.
        let same = p.file(fd).is_ok_and(|f| Arc::ptr_eq(&f, &file));
        let done = same && {
            let at = if offset < 0 {
                p.fstat(fd).map(|s| s.size)
            } else {
                Ok(offset as u64)
            };
            at.and_then(|at| p.pwrite(fd, &data, at)).is_ok_and(|n| n == data.len())
        };
        if done {
            vino_graft::change_made();
        } else {
            env.commit_error();
        }
    });
    Ok(len)
}

/// `vino_file_fsync(fd) -> 0 | -errno`: checks now, forces the file to the device at commit.
fn file_fsync(env: &EventEnv, fd: i32) -> Result<i32, CallError> {
    let Some(process) = env.process() else {
        return Ok(errno(Errno::BadF));
    };
    let Ok(file) = process.file(fd as Fd) else {
        return Ok(errno(Errno::BadF));
    };
    if fd < 0 || !file.flags.write {
        return Ok(errno(Errno::BadF));
    }
    let (weak, fd, shared, kind, pid) = (env.process.clone(), fd as Fd, env.shared.clone(), env.kind, env.pid);
    vino_vlt::current::on_commit(move || {
        let env = EventEnv {
            pid,
            kind,
            process: weak,
            shared,
        };
        let Some(p) = env.process() else { return };
        let same = p.file(fd).is_ok_and(|f| Arc::ptr_eq(&f, &file));
        if same && p.fsync(fd).is_ok() {
            vino_graft::change_made();
        } else {
            env.commit_error();
        }
    });
    Ok(0)
}

/// A process's event graftpoint, whatever its kind.
trait EventSlot: Send + Sync {
    fn bound(&self) -> bool;
    fn deliver(&self, ev: &FsEvent) -> bool;
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<const K: usize> EventSlot for GraftSlot<FsEventPoint<K>> {
    fn bound(&self) -> bool {
        self.policy_kind() != vino_graft::PolicyKind::Default
    }
    fn deliver(&self, ev: &FsEvent) -> bool {
        self.invoke(ev)
    }
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The slot as the process's namespace sees it: loading a graft makes the process a listener.
struct Watched {
    slot: Arc<dyn ManagedSlot>,
    kind: EventKind,
    listener: Weak<Listener>,
    shared: Weak<Shared>,
}

impl Watched {
    fn refresh(&self) {
        if let (Some(l), Some(s)) = (self.listener.upgrade(), self.shared.upgrade()) {
            s.refresh(self.kind, &l);
        }
    }
}

impl SlotWrapper for Watched {
    fn inner(&self) -> &dyn ManagedSlot {
        &*self.slot
    }
    fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError> {
        let info = self.slot.load(wasm, owner)?;
        self.refresh();
        Ok(info)
    }
    fn unload(&self) -> bool {
        let was = self.slot.unload();
        self.refresh();
        was
    }
}

// ---- listeners -----------------------------------------------------------------------------------

/// One process's side of the event service.
struct Listener {
    pid: Pid,
    cred: Credentials,
    /// The process's descriptors: an event that names no directory reaches it only for a file
    /// it holds open (or filters on by inode).
    files: Arc<Mutex<FdTable>>,
    /// The account of the process's user, whose CPU share its grafts' events run at.
    user: Option<Arc<Account>>,
    slots: [Arc<dyn EventSlot>; 5],
    filters: [RwLock<Filter>; 5],
    subscribed: [AtomicBool; 5],
    /// Each subscription is charged to the process's account while it lasts.
    subscriptions: Mutex<[Option<Charge>; 5]>,
    /// User-level delivery, read by [`Process::event_wait`].
    queue: Mutex<UserQueue>,
    ready: Condvar,
    /// Events waiting for this process's grafts.
    jobs: Mutex<GraftJobs>,
    gone: AtomicBool,
    /// Charges the process, on the CPU scheduler, for the time its grafts took: the kernel's
    /// work done for it is paid from its share.
    charge_cpu: Box<dyn Fn(std::time::Duration) + Send + Sync>,
}

impl Listener {
    fn listening(&self, kind: EventKind) -> bool {
        !self.gone.load(Ordering::Relaxed)
            && (self.subscribed[kind.index()].load(Ordering::Relaxed) || self.slots[kind.index()].bound())
    }

    /// Gives back the filter of a kind the process no longer hears (no subscription, no graft),
    /// and its charge.
    fn forget_filter_if_idle(&self, kind: EventKind) {
        let i = kind.index();
        if !self.subscribed[i].load(Ordering::Relaxed) && !self.slots[i].bound() {
            let old = std::mem::take(&mut *self.filters[i].write());
            drop(old);
        }
    }

    /// Events queued for this process, both queues together.
    fn queued(&self) -> usize {
        self.queue.lock().events.len() + self.jobs.lock().events.len()
    }
}

/// A user-level queue: at most the bound of events, plus one overflow marker.
#[derive(Default)]
struct UserQueue {
    events: VecDeque<FsEvent>,
    /// A marker was queued and the reader has not yet taken the queue below the bound.
    overflowed: bool,
}

impl UserQueue {
    /// Queues `ev`, or drops it (false) and queues a marker if this overflow has none yet.
    fn push(&mut self, ev: &FsEvent, max: usize, overflows: &AtomicU64) -> bool {
        if self.events.len() < max {
            self.events.push_back(ev.clone());
            return true;
        }
        if !self.overflowed {
            self.overflowed = true;
            self.events.push_back(FsEvent {
                kind: EventKind::Overflow,
                inode: 0,
                parent: 0,
                pid: 0,
                name: None,
                time_ns: ev.time_ns,
                seq: ev.seq,
            });
            bump(overflows);
        }
        debug_assert!(self.events.len() <= max + 1, "a full queue holds one marker at most");
        false
    }

    /// Takes the oldest `max` events; below the bound again, the next overflow gets a marker.
    fn take(&mut self, max: usize, bound: usize) -> Vec<FsEvent> {
        let n = self.events.len().min(max);
        let got: Vec<FsEvent> = self.events.drain(..n).collect();
        if self.events.len() < bound {
            self.overflowed = false;
        }
        got
    }
}

/// A listener's graft jobs.
#[derive(Default)]
struct GraftJobs {
    events: VecDeque<FsEvent>,
    /// On the run queue or being served by an event thread (never both, never two threads).
    scheduled: bool,
}

/// What the kernel and the event threads share.
struct Shared {
    /// Per kind: the processes that may be listening (a graft loaded or a subscription).
    listeners: [RwLock<Vec<Arc<Listener>>>; 5],
    /// Per kind: `listeners[k].len()`, read without the lock on every raise.
    count: [AtomicUsize; 5],
    counters: [Counters; 5],
    /// Overflow markers queued.
    overflows: AtomicU64,
    procs: RwLock<HashMap<Pid, Arc<Listener>>>,
    /// Bound of each listener's user-level queue and of its graft jobs.
    queue_max: usize,
    /// Listeners with graft jobs, waiting for an event thread, served in turn.
    run: Mutex<VecDeque<Arc<Listener>>>,
    runnable: Condvar,
    started: OnceLock<()>,
    /// Graft deliveries queued or running.
    pending: Mutex<u64>,
    idle: Condvar,
    stop: AtomicBool,
    seq: AtomicU64,
    waits_blocked: AtomicU64,
    wait_timeouts: AtomicU64,
    /// The event threads' CPU is charged to the user whose listener they serve.
    cpu: Option<CpuShares>,
    /// No event threads: graft jobs wait for [`Kernel::run_events`] (or a quiesce).
    stepped: bool,
}

impl Shared {
    fn new(queue_max: usize, cpu: Option<CpuShares>, stepped: bool) -> Shared {
        assert!(queue_max > 0, "an event queue holds at least one event");
        Shared {
            listeners: Default::default(),
            count: Default::default(),
            counters: Default::default(),
            overflows: AtomicU64::new(0),
            procs: RwLock::default(),
            queue_max,
            run: Mutex::default(),
            runnable: Condvar::new(),
            started: OnceLock::new(),
            pending: Mutex::new(0),
            idle: Condvar::new(),
            stop: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            waits_blocked: AtomicU64::new(0),
            wait_timeouts: AtomicU64::new(0),
            cpu,
            stepped,
        }
    }

    /// Puts `l` on kind's list if it listens, takes it off if not.
    fn refresh(&self, kind: EventKind, l: &Arc<Listener>) {
        let mut list = self.listeners[kind.index()].write();
        let at = list.iter().position(|x| Arc::ptr_eq(x, l));
        match (l.listening(kind), at) {
            (true, None) => list.push(l.clone()),
            (false, Some(i)) => {
                list.swap_remove(i);
            }
            _ => {}
        }
        self.count[kind.index()].store(list.len(), Ordering::Release);
    }

    /// Puts `ev` on `l`'s user-level queue, or counts it dropped.
    fn deliver_user(&self, l: &Listener, ev: &FsEvent) {
        let counters = &self.counters[ev.kind.index()];
        if l.queue.lock().push(ev, self.queue_max, &self.overflows) {
            bump(&counters.delivered_user);
        } else {
            bump(&counters.dropped);
        }
        l.ready.notify_all();
    }

    /// Queues `ev` for `l`'s graft (dropped and counted if its queue is full), and puts `l` on
    /// the run queue if no thread has it.
    fn enqueue(self: &Arc<Self>, l: &Arc<Listener>, ev: FsEvent) {
        let mut jobs = l.jobs.lock();
        if jobs.events.len() >= self.queue_max {
            bump(&self.counters[ev.kind.index()].dropped);
            return;
        }
        if !self.stepped {
            self.started.get_or_init(|| self.start_threads());
        }
        *self.pending.lock() += 1;
        jobs.events.push_back(ev);
        if !std::mem::replace(&mut jobs.scheduled, true) {
            drop(jobs);
            self.make_runnable(l);
        }
    }

    /// Puts `l`, whose user must wait for its turn, back at the tail of the run queue. The
    /// caller has put back `deferred` listeners in a row without serving one: once that is every
    /// listener waiting (all are heavy users' whose turns are taken), it waits a little instead
    /// of spinning through them.
    fn defer(&self, l: Arc<Listener>, deferred: usize) {
        let mut run = self.run.lock();
        run.push_back(l);
        if deferred >= run.len() {
            self.runnable.wait_for(&mut run, TURN_RETRY);
        } else {
            self.runnable.notify_one();
        }
    }

    fn make_runnable(&self, l: &Arc<Listener>) {
        self.run.lock().push_back(l.clone());
        self.runnable.notify_one();
    }

    fn start_threads(self: &Arc<Self>) {
        for i in 0..EVENT_THREADS {
            let weak = Arc::downgrade(self);
            let cpu = self.cpu.clone();
            std::thread::Builder::new()
                .name(format!("vino-events-{i}"))
                .spawn(move || worker(weak, cpu.as_ref().map(CpuShares::register)))
                .expect("spawning an event thread");
        }
    }

    /// The listener at the head of the run queue; `None` after a while with none, or at stop.
    fn next_runnable(&self) -> Option<Arc<Listener>> {
        let mut run = self.run.lock();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(l) = run.pop_front() {
                return Some(l);
            }
            // Wake now and then to notice the kernel went away (its drop also wakes us).
            if self.runnable.wait_for(&mut run, Duration::from_millis(200)).timed_out() {
                return None;
            }
        }
    }

    /// Runs up to [`EVENT_BATCH`] of `l`'s jobs, in order, then puts `l` back at the tail of the
    /// run queue if it has more.
    fn serve(&self, l: &Arc<Listener>) {
        let batch: Vec<FsEvent> = {
            let mut jobs = l.jobs.lock();
            debug_assert!(jobs.scheduled, "a listener on the run queue is scheduled");
            let n = jobs.events.len().min(EVENT_BATCH);
            jobs.events.drain(..n).collect()
        };
        for ev in &batch {
            self.run_job(l, ev);
            self.done(1);
        }
        let mut jobs = l.jobs.lock();
        if jobs.events.is_empty() {
            jobs.scheduled = false;
        } else {
            drop(jobs);
            self.make_runnable(l);
        }
    }

    fn run_job(&self, l: &Listener, ev: &FsEvent) {
        let k = ev.kind.index();
        // A graft unloaded since the event was queued (for failing, or by its owner) hears no more.
        let slot = &l.slots[k];
        if !l.gone.load(Ordering::Relaxed) && slot.bound() {
            let started = std::time::Instant::now();
            let delivered = slot.deliver(ev);
            (l.charge_cpu)(started.elapsed());
            if delivered {
                bump(&self.counters[k].delivered_graft);
            } else {
                bump(&self.counters[k].graft_aborts);
            }
        }
    }

    /// `n` deliveries ran or were dropped.
    fn done(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut pending = self.pending.lock();
        assert!(*pending >= n, "more deliveries done than queued");
        *pending -= n;
        if *pending == 0 {
            self.idle.notify_all();
        }
    }
}

/// An event thread: serves the listeners on the run queue in turn.
fn worker(shared: Weak<Shared>, cpu: Option<Worker>) {
    // Listeners put back for their user's turn in a row, without one served.
    let mut deferred = 0;
    loop {
        let Some(s) = shared.upgrade() else { return };
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        if let Some(l) = s.next_runnable() {
            // The turn runs at the priority the listener's user has earned (see vino_account::cpu).
            if let (Some(w), Some(user)) = (&cpu, &l.user) {
                w.serve(user);
                w.begin();
                // A heavy user whose turns are all taken (by its connections) waits; the event
                // threads, shared by all, serve the others meanwhile.
                if !w.try_take_turn() {
                    w.end();
                    deferred += 1;
                    s.defer(l, deferred);
                    continue;
                }
            }
            deferred = 0;
            s.serve(&l);
            if let Some(w) = &cpu {
                w.end();
            }
        }
    }
}

/// The kernel's event service.
pub(crate) struct Events {
    shared: Arc<Shared>,
}

impl Events {
    /// An event service whose listeners' queues hold at most `queue_max` events each. Its
    /// graft jobs run on event threads of its own, or with `Dispatch::Caller` when someone calls
    /// [`Kernel::run_events`].
    pub(crate) fn new(queue_max: usize, cpu: Option<CpuShares>, dispatch: Dispatch) -> Events {
        let stepped = dispatch == Dispatch::Caller;
        Events {
            shared: Arc::new(Shared::new(queue_max, cpu, stepped)),
        }
    }
}

impl Default for Events {
    fn default() -> Self {
        Events::new(EVENT_QUEUE_MAX, None, Dispatch::Thread)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _guard = self.shared.run.lock();
        self.shared.runnable.notify_all();
    }
}

fn slot<const K: usize>(p: &Arc<Process>, shared: &Arc<Shared>) -> Arc<GraftSlot<FsEventPoint<K>>> {
    let env = EventEnv {
        pid: p.pid(),
        kind: EventKind::ALL[K],
        process: Arc::downgrade(p),
        shared: Arc::downgrade(shared),
    };
    Arc::new(GraftSlot::new(
        p.kernel().runtime(),
        Arc::new(env),
        Access::Process(p.pid()),
        None,
    ))
}

impl Events {
    /// Gives a new process its event graftpoints.
    pub(crate) fn attach(&self, p: &Arc<Process>) {
        let s = &self.shared;
        let slots: [Arc<dyn EventSlot>; 5] = [
            slot::<0>(p, s),
            slot::<1>(p, s),
            slot::<2>(p, s),
            slot::<3>(p, s),
            slot::<4>(p, s),
        ];
        let listener = Arc::new(Listener {
            pid: p.pid(),
            cred: p.credentials().clone(),
            files: p.open_files().clone(),
            user: p.account().parent().cloned(),
            slots: slots.clone(),
            filters: Default::default(),
            subscribed: Default::default(),
            subscriptions: Mutex::default(),
            queue: Mutex::default(),
            ready: Condvar::new(),
            jobs: Mutex::default(),
            gone: AtomicBool::new(false),
            charge_cpu: {
                let (kernel, pid) = (Arc::downgrade(p.kernel()), p.pid());
                Box::new(move |used| {
                    if let Some(k) = kernel.upgrade() {
                        k.cpu().charge(pid, used);
                    }
                })
            },
        });
        for (kind, slot) in EventKind::ALL.into_iter().zip(slots) {
            let managed: Arc<dyn ManagedSlot> = managed_of(slot);
            let watched = Watched {
                slot: managed,
                kind,
                listener: Arc::downgrade(&listener),
                shared: Arc::downgrade(s),
            };
            let point = kind.point().expect("every raised kind has a graftpoint");
            p.namespace().register_as(point, Arc::new(watched));
        }
        s.procs.write().insert(p.pid(), listener);
    }

    /// Forgets an exiting process: its filters, its queues, its place on every list; events
    /// queued for its grafts are dropped (a thread serving it finishes the job it runs).
    pub(crate) fn detach(&self, pid: Pid) {
        let Some(l) = self.shared.procs.write().remove(&pid) else {
            return;
        };
        l.gone.store(true, Ordering::Relaxed);
        for kind in EventKind::ALL {
            l.subscribed[kind.index()].store(false, Ordering::Relaxed);
            *l.filters[kind.index()].write() = Filter::default();
            self.shared.refresh(kind, &l);
        }
        *l.subscriptions.lock() = Default::default();
        *l.queue.lock() = UserQueue::default();
        l.ready.notify_all();
        let dropped = std::mem::take(&mut l.jobs.lock().events).len();
        self.shared.done(dropped as u64);
    }

    fn listener(&self, pid: Pid) -> SysResult<Arc<Listener>> {
        self.shared
            .procs
            .read()
            .get(&pid)
            .cloned()
            .ok_or_else(|| SysError::new(Errno::Inval, format!("process {pid} has exited")))
    }

    /// True if some process may hear events of `kind` (the cheap test before any work).
    #[inline]
    pub(crate) fn heard(&self, kind: EventKind) -> bool {
        self.shared.count[kind.index()].load(Ordering::Acquire) != 0
    }

    /// Raises an event. `stat` is the file as it was when the event happened (given for unlink,
    /// where the file may be gone by now; looked up otherwise, and only if someone listens).
    #[inline]
    pub(crate) fn raise(
        &self,
        kind: EventKind,
        actor: &Process,
        inode: u64,
        parent: u64,
        name: Option<&str>,
        stat: Option<&Stat>,
    ) {
        bump(&self.shared.counters[kind.index()].raised);
        if self.heard(kind) {
            self.dispatch(kind, actor, inode, parent, name, stat);
        }
    }

    /// An open; `name` is `None` for an open by inode (the mount's), which knows no name.
    pub(crate) fn opened(&self, actor: &Process, inode: u64, dir: u64, name: Option<&str>, stat: &Stat) {
        self.raise(EventKind::Open, actor, inode, dir, name, Some(stat));
    }

    pub(crate) fn closed(&self, actor: &Process, inode: u64) {
        self.raise(EventKind::Close, actor, inode, 0, None, None);
    }

    /// A write, pwrite or ftruncate.
    pub(crate) fn modified(&self, actor: &Process, inode: u64) {
        self.raise(EventKind::Modify, actor, inode, 0, None, None);
    }

    /// Raises a create event for `inode`, just made as `name` in `dir`; returns `inode`.
    pub(crate) fn created(&self, actor: &Process, dir: u64, name: &str, inode: u64) -> u64 {
        self.raise(EventKind::Create, actor, inode, dir, Some(name), None);
        inode
    }

    /// A name of `inode` was removed from `dir` (by unlink, or by a rename that replaced it);
    /// `before` is the file as it was, for the permission check on listeners.
    pub(crate) fn unlinked(&self, actor: &Process, dir: u64, name: &str, inode: u64, before: &Stat) {
        self.raise(EventKind::Unlink, actor, inode, dir, Some(name), Some(before));
    }

    #[inline(never)]
    fn dispatch(
        &self,
        kind: EventKind,
        actor: &Process,
        inode: u64,
        parent: u64,
        name: Option<&str>,
        stat: Option<&Stat>,
    ) {
        let s = &self.shared;
        let counters = &s.counters[kind.index()];
        let listeners = s.listeners[kind.index()].read();
        let mut looked_up: Option<Option<Stat>> = stat.map(|st| Some(st.clone()));
        let mut event: Option<FsEvent> = None;
        // Whether the directory's names may be seen, one answer per set of credentials.
        let mut reached: Vec<(&Credentials, bool)> = Vec::new();
        for l in listeners.iter() {
            let (graft, user) = (
                l.slots[kind.index()].bound(),
                l.subscribed[kind.index()].load(Ordering::Relaxed),
            );
            if l.gone.load(Ordering::Relaxed) || !(graft || user) {
                continue;
            }
            let by_inode = {
                let filter = l.filters[kind.index()].read();
                if !filter.accepts(inode, name) {
                    bump(&counters.filtered_out);
                    continue;
                }
                filter.inodes.contains(&inode)
            };
            let st = looked_up.get_or_insert_with(|| actor.kernel().fs().stat(inode).ok());
            if !st.as_ref().is_some_and(|st| perm::may(&l.cred, st, READ)) {
                bump(&counters.filtered_out);
                bump(&counters.denied);
                continue;
            }
            let named = name.is_some() && parent != 0;
            // A file known only by its inode: heard only by who reached it by a path.
            if !named && !l.cred.privileged && !reached_unnamed(l, actor.pid(), inode, by_inode) {
                bump(&counters.filtered_out);
                bump(&counters.denied);
                continue;
            }
            // A name in a directory: heard only by who could list that directory.
            if named && !l.cred.privileged {
                let seen = match reached.iter().find(|(c, _)| **c == l.cred) {
                    Some(&(_, seen)) => seen,
                    None => {
                        let seen = may_list(actor.kernel().fs(), &l.cred, parent);
                        reached.push((&l.cred, seen));
                        seen
                    }
                };
                if !seen {
                    bump(&counters.filtered_out);
                    bump(&counters.denied);
                    continue;
                }
            }
            let ev = event
                .get_or_insert_with(|| FsEvent {
                    kind,
                    inode,
                    parent,
                    pid: actor.pid(),
                    name: name.map(str::to_string),
                    time_ns: actor.kernel().clock.now_ns(),
                    seq: s.seq.fetch_add(1, Ordering::Relaxed),
                })
                .clone();
            if user {
                s.deliver_user(l, &ev);
            }
            if graft {
                s.enqueue(l, ev);
            }
        }
    }
}

/// True if listener `l` has reached the file `inode` by a path, for an event that names no
/// directory (close, modify, an open by inode): it raised the event itself, it holds the file
/// open, or its filter names the inode (accepted only for a file it held open then, as
/// `inotify_add_watch` resolves a path). The kernel keeps no parent of a file, so a file in a
/// directory the listener cannot search is heard of only this way.
fn reached_unnamed(l: &Listener, actor: Pid, inode: u64, by_inode: bool) -> bool {
    by_inode || l.pid == actor || l.files.lock().holds(inode)
}

/// Most steps of the walk from a directory up to the root before it counts as unreachable.
const REACH_STEPS: usize = 4096;

/// True if `cred` may list the names of directory `dir`: read permission on it, and search
/// permission on it and on every directory above it up to the root (found through `..`). A
/// directory that cannot be stat'ed, or a walk that does not reach the root, counts as unseen.
fn may_list(fs: &vino_fs::FileSystem, cred: &Credentials, dir: u64) -> bool {
    if cred.privileged {
        return true;
    }
    match fs.stat(dir) {
        Ok(st) if perm::may(cred, &st, READ | EXEC) => {}
        _ => return false,
    }
    let mut at = dir;
    for _ in 0..REACH_STEPS {
        if at == vino_fs::ROOT_INO {
            return true;
        }
        let Ok(up) = fs.lookup(at, b"..") else {
            return false;
        };
        match fs.stat(up) {
            Ok(st) if perm::may(cred, &st, EXEC) => at = up,
            _ => return false,
        }
    }
    false
}

fn managed_of(slot: Arc<dyn EventSlot>) -> Arc<dyn ManagedSlot> {
    let any = slot.as_any();
    macro_rules! try_kind {
        ($($k:literal),*) => {$(
            if let Ok(s) = any.clone().downcast::<GraftSlot<FsEventPoint<$k>>>() {
                return s;
            }
        )*};
    }
    try_kind!(0, 1, 2, 3, 4);
    unreachable!("an event slot of an unknown kind")
}

// ---- system calls ------------------------------------------------------------------------------

impl Process {
    /// Sets this process's filter for one kind of event (replacing the last one). Its bytes
    /// ([`EventFilter::bytes`]) are charged to the process and its user while it is kept
    /// (`EDQUOT` past the limit); the new filter is charged before the old one is given back.
    /// An unprivileged process may name by inode only files it holds open now (`EACCES`
    /// otherwise): the open walked a path to the file, which the inode alone does not.
    pub fn event_filter(&self, kind: EventKind, filter: EventFilter) -> SysResult<()> {
        if filter.inodes.len() + filter.names.len() > FILTER_MAX {
            return Err(SysError::new(
                Errno::Inval,
                format!("an event filter holds at most {FILTER_MAX} entries"),
            ));
        }
        let kind = raised_kind(kind)?;
        let l = self.kernel().events.listener(self.pid())?;
        self.check_filter_inodes(&filter.inodes)?;
        let bytes = filter.bytes();
        let charge = match bytes {
            0 => None,
            n => Some(self.account().charge(Resource::EventFilterBytes, n)?),
        };
        let old = std::mem::replace(&mut *l.filters[kind.index()].write(), Filter::new(filter, charge));
        drop(old);
        Ok(())
    }

    /// Refuses an inode this (unprivileged) process has not reached by a path: one it does not
    /// hold open.
    fn check_filter_inodes(&self, inodes: &[u64]) -> SysResult<()> {
        if self.credentials().privileged {
            return Ok(());
        }
        let files = self.open_files().lock();
        match inodes.iter().find(|&&ino| !files.holds(ino)) {
            None => Ok(()),
            Some(ino) => Err(SysError::new(
                Errno::Acces,
                format!("an event filter may name inode {ino} only while this process holds it open"),
            )),
        }
    }

    /// Asks for user-level delivery of `kind` through [`Process::event_wait`].
    pub fn event_subscribe(&self, kind: EventKind) -> SysResult<()> {
        self.set_subscribed(kind, true)
    }

    /// Stops user-level delivery of `kind` (events already queued stay).
    pub fn event_unsubscribe(&self, kind: EventKind) -> SysResult<()> {
        self.set_subscribed(kind, false)
    }

    fn set_subscribed(&self, kind: EventKind, on: bool) -> SysResult<()> {
        let kind = raised_kind(kind)?;
        let events = &self.kernel().events;
        let l = events.listener(self.pid())?;
        {
            let mut charges = l.subscriptions.lock();
            let charge = &mut charges[kind.index()];
            if on && charge.is_none() {
                *charge = Some(self.account().charge(Resource::Subscriptions, 1)?);
            } else if !on {
                *charge = None;
            }
            l.subscribed[kind.index()].store(on, Ordering::Relaxed);
        }
        events.shared.refresh(kind, &l);
        if !on {
            l.forget_filter_if_idle(kind);
        }
        Ok(())
    }

    /// Waits up to `timeout` for events on this process's user-level queue and takes them all,
    /// oldest first (empty if none came).
    pub fn event_wait(&self, timeout: Duration) -> Vec<FsEvent> {
        self.event_wait_at_most(timeout, usize::MAX)
    }

    /// Like [`Process::event_wait`], but takes at most `max` events (the oldest); the rest stay
    /// queued, in order, for the next wait. Taking the queue below the kernel's bound again
    /// ends an overflow: the next one gets its own [`EventKind::Overflow`] marker.
    pub fn event_wait_at_most(&self, timeout: Duration, max: usize) -> Vec<FsEvent> {
        let Ok(l) = self.kernel().events.listener(self.pid()) else {
            return Vec::new();
        };
        let clock = &self.kernel().clock;
        let until = clock.deadline_in(timeout);
        let mut queue = l.queue.lock();
        if queue.events.is_empty() && !l.gone.load(Ordering::Relaxed) {
            let shared = &self.kernel().events.shared;
            shared.waits_blocked.fetch_add(1, Ordering::Relaxed);
            // Events come when others act: a VINO thread's worker goes to other threads now.
            crate::blocking_wait(|| {
                while queue.events.is_empty() && !l.gone.load(Ordering::Relaxed) {
                    if clock.wait_until(&l.ready, &mut queue, until) {
                        break;
                    }
                }
            });
            if queue.events.is_empty() && clock.passed(until) {
                shared.wait_timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
        queue.take(max, self.kernel().events.shared.queue_max)
    }

    /// Events the kernel holds for this process now: its user-level queue (markers included)
    /// and its grafts' pending jobs. Each is bounded by the kernel's `event_queue_max`.
    pub fn events_queued(&self) -> usize {
        self.kernel().events.listener(self.pid()).map_or(0, |l| l.queued())
    }

    /// The graftpoint `event.fs.<kind>` of this process, for kernel-side code (experiments bind
    /// native policies to it with [`Process::event_bind_native`]).
    pub fn event_slot<const K: usize>(&self) -> SysResult<Arc<GraftSlot<FsEventPoint<K>>>> {
        let l = self.kernel().events.listener(self.pid())?;
        Ok(l.slots[K].clone().as_any().downcast().expect("slot K has kind K"))
    }

    /// Binds a trusted native policy (the "unprotected" variant of an event graft) to
    /// `event.fs.<kind>`; the process then hears those events.
    pub fn event_bind_native<const K: usize>(
        &self,
        policy: Arc<dyn NativePolicy<FsEventPoint<K>>>,
        transactional: bool,
    ) -> SysResult<()> {
        self.event_slot::<K>()?.bind_native(policy, transactional);
        self.event_refresh(EventKind::ALL[K])
    }

    /// Puts `event.fs.<kind>` back to nothing bound.
    pub fn event_unbind(&self, kind: EventKind) -> SysResult<()> {
        let kind = raised_kind(kind)?;
        let l = self.kernel().events.listener(self.pid())?;
        managed_of(l.slots[kind.index()].clone()).unload();
        l.forget_filter_if_idle(kind);
        self.event_refresh(kind)
    }

    fn event_refresh(&self, kind: EventKind) -> SysResult<()> {
        let events = &self.kernel().events;
        events.shared.refresh(kind, &events.listener(self.pid())?);
        Ok(())
    }
}

impl Kernel {
    /// Waits until every event graft delivery queued so far has run. False if `timeout` passed
    /// first.
    pub fn events_quiesce_for(&self, timeout: Duration) -> bool {
        let s = &self.events.shared;
        if s.stepped {
            self.run_events();
        }
        let until = self.clock.deadline_in(timeout);
        let mut pending = s.pending.lock();
        while *pending > 0 {
            if self.clock.wait_until(&s.idle, &mut pending, until) {
                return *pending == 0;
            }
        }
        true
    }

    /// Runs the queued event graft jobs on this thread, listener by listener in turn, until
    /// none is left; returns how many turns it ran. Only with `event_dispatch:
    /// Dispatch::Caller` (without event threads); with threads it leaves the jobs to them.
    pub fn run_events(&self) -> usize {
        let s = &self.events.shared;
        if !s.stepped {
            return 0;
        }
        let mut turns = 0;
        loop {
            let next = s.run.lock().pop_front();
            let Some(l) = next else { return turns };
            s.serve(&l);
            turns += 1;
        }
    }

    /// Waits until every event graft delivery queued so far has run.
    pub fn events_quiesce(&self) {
        while !self.events_quiesce_for(Duration::from_secs(3600)) {}
    }

    /// The event service's counters.
    pub fn event_stats(&self) -> EventStats {
        let s = &self.events.shared;
        EventStats {
            kinds: EventKind::ALL
                .iter()
                .map(|&k| (k, s.counters[k.index()].snapshot()))
                .collect(),
            overflows: s.overflows.load(Ordering::Relaxed),
            waits_blocked: s.waits_blocked.load(Ordering::Relaxed),
            wait_timeouts: s.wait_timeouts.load(Ordering::Relaxed),
        }
    }

    /// Raises an event by hand as if `actor`'s system call had, for benchmarks and tests of the
    /// filtering path.
    /// [`EventKind::Overflow`] is not raised (it is no event of the file system).
    pub fn event_raise(&self, kind: EventKind, actor: &Process, inode: u64, parent: u64, name: Option<&str>) {
        if kind != EventKind::Overflow {
            self.events.raise(kind, actor, inode, parent, name, None);
        }
    }
}

// ---- the bookkeeping record of the example grafts ------------------------------------------------

/// The record `sdk/grafts/unlink_log.c` appends per unlink (64 bytes, little-endian):
/// `{u64 inode; u64 parent; u64 pid; u64 time_ns; char name[32]}`, the name NUL-padded and cut
/// at 31 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnlinkRecord {
    pub inode: u64,
    pub parent: u64,
    pub pid: u64,
    pub time_ns: u64,
    pub name: String,
}

impl UnlinkRecord {
    pub const BYTES: usize = 64;
    const NAME: usize = 32;

    pub fn of(ev: &FsEvent) -> UnlinkRecord {
        let name = ev.name.as_deref().unwrap_or("");
        let mut cut = name.len().min(Self::NAME - 1);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        UnlinkRecord {
            inode: ev.inode,
            parent: ev.parent,
            pid: ev.pid,
            time_ns: ev.time_ns,
            name: name[..cut].to_string(),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        for (i, v) in [self.inode, self.parent, self.pid, self.time_ns]
            .into_iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let n = self.name.len().min(Self::NAME - 1);
        b[32..32 + n].copy_from_slice(&self.name.as_bytes()[..n]);
        b
    }

    /// Reads back a log of records (a partial record at the end is ignored).
    pub fn parse_all(bytes: &[u8]) -> Vec<UnlinkRecord> {
        bytes.chunks_exact(Self::BYTES).map(Self::parse).collect()
    }

    pub fn parse(b: &[u8]) -> UnlinkRecord {
        assert_eq!(b.len(), Self::BYTES, "one record");
        let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let name = &b[32..];
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        UnlinkRecord {
            inode: u(0),
            parent: u(1),
            pid: u(2),
            time_ns: u(3),
            name: String::from_utf8_lossy(&name[..end]).into_owned(),
        }
    }
}
