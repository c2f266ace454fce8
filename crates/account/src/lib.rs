//! Resource accounts: what each principal makes the kernel hold, and its limits.
//!
//! "Applications are offered control over resource use; VINO retains control over resource
//! allocation" (Small 1998, 2.2). Every resource a principal can make the kernel hold (open
//! descriptors, grafts and their memory and compiled code, file-wide bindings, event
//! subscriptions, connections, request buffers, compiles and control calls in progress) is
//! charged to an [`Account`] before the kernel takes it, and refunded when the kernel lets it go.
//! Accounts form a tree, as Tock's grants and the resource containers of Banga et al. do: a
//! process's account is charged, then its user's, then the total of all users, and a charge that
//! would pass any limit on that path fails with an [`Exceeded`] that names the account, the
//! resource and the limit, and maps to the errno a program expects ([`Resource::errno`]).
//!
//! A [`Charge`] is the kernel holding something: dropping it refunds the account, so a resource
//! freed by any path (close, unload, a client that dies) is refunded exactly once.
//!
//! Root (uid 0) has no per-user limits, and only root may use the last
//! [`LimitsConfig::root_reserve_percent`] of each total, so other users together can never lock
//! the administrator out.

// Unsafe only in `cpu::os`, for the thread-priority and CPU-clock system calls.
#![deny(unsafe_code)]

pub mod cpu;

pub use cpu::{CpuConfig, CpuShares, ThreadClock, Worker};
use parking_lot::{Condvar, Mutex};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A kind of resource the kernel holds for a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Open file descriptors.
    Descriptors,
    /// Grafts loaded (each an instance with its own memory reservation).
    Grafts,
    /// Bytes of grafts' linear memory.
    GraftMemory,
    /// Bytes of grafts' compiled code.
    GraftCode,
    /// Grafts bound to a file for all its users (file-wide bindings).
    Bindings,
    /// Kinds of file-system event subscribed to, over all of a principal's processes.
    Subscriptions,
    /// Bytes of requests being received.
    FrameBytes,
    /// Compiles running or waiting.
    Compiles,
    /// Control-function calls running.
    ControlCalls,
    /// Blocking lock waits that each hold a thread (the mount's, a connection's).
    LockWaits,
    /// VINO processes running in the daemon (each holds a thread and up to its memory cap).
    Programs,
    /// Threads of VINO processes (each a stack and a place in the CPU scheduler).
    Threads,
    /// Bytes of VINO processes' linear memory.
    ProgramMemory,
    /// Bytes of event filters (names and inode entries) the kernel keeps for subscribers.
    EventFilterBytes,
    /// Byte-range lock records held (each a range the lock table keeps).
    LockRecords,
    /// Client connections being served (each a thread and its buffers).
    Connections,
    /// Bytes of pipes' queues (each pipe's whole capacity, while it exists).
    PipeBytes,
    /// Bytes of VINO processes' memory in frames. Not charged: the pager keeps each process
    /// within its limit and all of them within the total by evicting its pages to swap.
    ResidentBytes,
    /// Bytes of swap holding VINO processes' pages.
    SwapBytes,
    /// Network sockets (each a listening slot of a listener's pool, a connection, or a
    /// connection closing): the stack's per-connection state.
    Sockets,
    /// Bytes of sockets' send and receive buffers.
    SocketBytes,
}

impl Resource {
    pub const COUNT: usize = 21;
    pub const ALL: [Resource; Resource::COUNT] = [
        Resource::Descriptors,
        Resource::Grafts,
        Resource::GraftMemory,
        Resource::GraftCode,
        Resource::Bindings,
        Resource::Subscriptions,
        Resource::FrameBytes,
        Resource::Compiles,
        Resource::ControlCalls,
        Resource::LockWaits,
        Resource::Programs,
        Resource::Threads,
        Resource::ProgramMemory,
        Resource::EventFilterBytes,
        Resource::LockRecords,
        Resource::Connections,
        Resource::PipeBytes,
        Resource::ResidentBytes,
        Resource::SwapBytes,
        Resource::Sockets,
        Resource::SocketBytes,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// The errno of a charge that would pass a limit: `EMFILE` for descriptors, `EAGAIN` for
    /// work in progress (try again when some finishes), `ENOBUFS` for request buffers, `EDQUOT`
    /// for what a user keeps (grafts, memory, code, bindings, subscriptions), `ENOMEM` for a
    /// program's memory (what its `malloc` would report), `EUSERS` for connections, `ENFILE`
    /// for pipe buffers (as Linux says at its limit on pipe pages), `ENOBUFS` for sockets and
    /// their buffers (as socket(2) says when it lacks them).
    pub fn errno(self) -> i32 {
        match self {
            Resource::Descriptors => 24,                                           // EMFILE
            Resource::Compiles | Resource::ControlCalls => 11,                     // EAGAIN
            Resource::Programs | Resource::Threads => 11,                          // EAGAIN
            Resource::ProgramMemory => 12,                                         // ENOMEM
            Resource::FrameBytes => 105,                                           // ENOBUFS
            Resource::LockWaits | Resource::LockRecords => 37,                     // ENOLCK
            Resource::Grafts | Resource::GraftMemory | Resource::GraftCode => 122, // EDQUOT
            Resource::Bindings | Resource::Subscriptions => 122,                   // EDQUOT
            Resource::EventFilterBytes => 122,                                     // EDQUOT
            Resource::Connections => 87,                                           // EUSERS
            Resource::PipeBytes => 23,                                             // ENFILE
            Resource::ResidentBytes | Resource::SwapBytes => 12,                   // ENOMEM
            Resource::Sockets | Resource::SocketBytes => 105,                      // ENOBUFS
        }
    }

    /// True if the resource is counted in bytes (shown as sizes).
    pub fn is_bytes(self) -> bool {
        matches!(
            self,
            Resource::GraftMemory
                | Resource::GraftCode
                | Resource::FrameBytes
                | Resource::ProgramMemory
                | Resource::EventFilterBytes
                | Resource::PipeBytes
                | Resource::ResidentBytes
                | Resource::SwapBytes
                | Resource::SocketBytes
        )
    }

    pub fn describe(self) -> &'static str {
        match self {
            Resource::Descriptors => "open descriptors",
            Resource::Grafts => "grafts",
            Resource::GraftMemory => "graft memory",
            Resource::GraftCode => "compiled graft code",
            Resource::Bindings => "graft bindings (file-wide, dir.access)",
            Resource::Subscriptions => "event subscriptions",
            Resource::FrameBytes => "request buffers",
            Resource::Compiles => "compiles in progress",
            Resource::ControlCalls => "control calls in progress",
            Resource::LockWaits => "blocking lock waits",
            Resource::Programs => "programs running",
            Resource::Threads => "threads of programs",
            Resource::ProgramMemory => "program memory",
            Resource::EventFilterBytes => "event filter memory",
            Resource::LockRecords => "byte-range lock records",
            Resource::Connections => "connections",
            Resource::PipeBytes => "pipe buffers",
            Resource::ResidentBytes => "program memory in frames",
            Resource::SwapBytes => "swap",
            Resource::Sockets => "network sockets",
            Resource::SocketBytes => "socket buffers",
        }
    }
}

/// A limit per resource; `u64::MAX` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table([u64; Resource::COUNT]);

impl Table {
    pub const UNLIMITED: Table = Table([u64::MAX; Resource::COUNT]);
    /// No amount set: in [`LimitsConfig::root_reserved`], the percent applies.
    pub const UNSET: Table = Table::UNLIMITED;

    pub fn get(&self, r: Resource) -> u64 {
        self.0[r.index()]
    }

    pub fn set(&mut self, r: Resource, limit: u64) -> &mut Table {
        self.0[r.index()] = limit;
        self
    }

    /// This table with one limit changed.
    pub fn with(mut self, r: Resource, limit: u64) -> Table {
        self.set(r, limit);
        self
    }
}

/// The limits of every account: per process, per user, and all users together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsConfig {
    pub process: Table,
    pub user: Table,
    pub total: Table,
    /// Percent of each total that only root may use.
    pub root_reserve_percent: u8,
    /// Amounts of a total that only root may use, in place of the percent ([`Table::UNSET`]
    /// where the percent applies): a few connections, say, where 5% would be none.
    pub root_reserved: Table,
    /// How users share the CPU of the kernel's threads.
    pub cpu: CpuConfig,
}

const MIB: u64 = 1 << 20;

impl Default for LimitsConfig {
    /// Limits for a shared machine: no user can hold more than a small part of what the kernel
    /// can give, and the total leaves the address space and memory of the daemon bounded (each
    /// graft reserves about 6 GiB of address space for its sandbox; 4096 of them stay far below
    /// the 128 TiB a 64-bit process has).
    fn default() -> Self {
        let process = Table::UNLIMITED
            .with(Resource::Descriptors, 1024)
            .with(Resource::ResidentBytes, 512 * MIB)
            .with(Resource::Compiles, 1)
            .with(Resource::ControlCalls, 1);
        let user = Table::UNLIMITED
            .with(Resource::Descriptors, 16384)
            .with(Resource::Grafts, 64)
            .with(Resource::GraftMemory, 256 * MIB)
            .with(Resource::GraftCode, 64 * MIB)
            .with(Resource::Bindings, 64)
            .with(Resource::Subscriptions, 256)
            .with(Resource::FrameBytes, 128 * MIB)
            .with(Resource::Compiles, 2)
            .with(Resource::ControlCalls, 1)
            .with(Resource::LockWaits, 64)
            .with(Resource::Programs, 16)
            .with(Resource::Threads, 64)
            .with(Resource::PipeBytes, 16 * MIB)
            .with(Resource::ProgramMemory, 2048 * MIB)
            .with(Resource::SwapBytes, 1024 * MIB)
            .with(Resource::EventFilterBytes, 4 * MIB)
            .with(Resource::LockRecords, 16384)
            .with(Resource::Sockets, 1024)
            .with(Resource::SocketBytes, 512 * MIB);
        let total = Table::UNLIMITED
            .with(Resource::Grafts, 4096)
            .with(Resource::GraftMemory, 4096 * MIB)
            .with(Resource::GraftCode, 1024 * MIB)
            .with(Resource::FrameBytes, 1024 * MIB)
            .with(Resource::LockWaits, 256)
            .with(Resource::Programs, 64)
            .with(Resource::Threads, 512)
            .with(Resource::PipeBytes, 256 * MIB)
            .with(Resource::ProgramMemory, 8192 * MIB)
            .with(Resource::ResidentBytes, 2048 * MIB)
            .with(Resource::SwapBytes, 4096 * MIB)
            .with(Resource::EventFilterBytes, 256 * MIB)
            .with(Resource::LockRecords, 1 << 20)
            .with(Resource::Sockets, 16384)
            .with(Resource::SocketBytes, 4096 * MIB);
        LimitsConfig {
            process,
            user,
            total,
            root_reserve_percent: 5,
            root_reserved: Table::UNSET,
            cpu: CpuConfig::default(),
        }
    }
}

impl LimitsConfig {
    /// No limits at all (tests and benchmarks that measure something else).
    pub fn unlimited() -> LimitsConfig {
        LimitsConfig {
            process: Table::UNLIMITED,
            user: Table::UNLIMITED,
            total: Table::UNLIMITED,
            root_reserve_percent: 0,
            root_reserved: Table::UNSET,
            cpu: CpuConfig::default(),
        }
    }
}

/// A charge refused: `account` would pass its limit of `resource`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Exceeded {
    pub resource: Resource,
    /// Whose limit: "process 12", "uid 1000", "all users".
    pub account: String,
    pub limit: u64,
    pub used: u64,
    pub asked: u64,
}

impl Exceeded {
    pub fn errno(&self) -> i32 {
        self.resource.errno()
    }
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let amount = |n: u64| {
            if self.resource.is_bytes() {
                format!("{} KiB", n.div_ceil(1024))
            } else {
                n.to_string()
            }
        };
        write!(
            f,
            "{} limit of {} {} reached ({} in use, {} more asked)",
            self.account,
            amount(self.limit),
            self.resource.describe(),
            amount(self.used),
            amount(self.asked)
        )
    }
}

/// What an account holds now, for `top` and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub account: String,
    pub used: Vec<(Resource, u64)>,
    /// Nanoseconds of CPU spent in this principal's grafts, control calls and compiles.
    pub cpu_ns: u64,
}

/// One principal's account.
pub struct Account {
    label: String,
    limits: Table,
    /// Which share of its parent's limits it may use: root may use the reserve.
    may_use_reserve: bool,
    reserve_percent: u8,
    /// Amounts kept for root in place of the percent (see [`LimitsConfig::root_reserved`]).
    reserved: Table,
    parent: Option<Arc<Account>>,
    used: [AtomicU64; Resource::COUNT],
    cpu_ns: AtomicU64,
    /// CPU the kernel's threads spent working for it (requests, the grafts they ran), as the
    /// CPU-share sampler counts it: since the account was made.
    cpu_work_ns: AtomicU64,
    /// CPU its work took since the sampler's last tick, its recent rate (hundredths of a
    /// percent of a core) and whether that makes it heavy (see [`cpu`]).
    cpu_tick_ns: AtomicU64,
    cpu_tick_threads: AtomicU64,
    cpu_rate: AtomicU64,
    cpu_heavy: AtomicBool,
    /// The nice value its work runs at now.
    cpu_nice: AtomicI32,
    /// While heavy: how many of its threads are serving it now (at most the kernel's share
    /// of cores), and where the others wait their turn (see [`cpu`]).
    cpu_serving: (Mutex<usize>, Condvar),
    /// Per resource: woken (one waiter per unit) when some is refunded, for charges that wait
    /// ([`Account::charge_waiting`]).
    refunded: [(Mutex<()>, Condvar); Resource::COUNT],
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Account {
    fn new(label: String, limits: Table, parent: Option<Arc<Account>>, root: bool, reserve: u8) -> Account {
        Account {
            label,
            limits,
            may_use_reserve: root,
            reserve_percent: reserve,
            reserved: Table::UNSET,
            parent,
            used: Default::default(),
            cpu_ns: AtomicU64::new(0),
            cpu_work_ns: AtomicU64::new(0),
            cpu_tick_ns: AtomicU64::new(0),
            cpu_tick_threads: AtomicU64::new(0),
            cpu_rate: AtomicU64::new(0),
            cpu_heavy: AtomicBool::new(false),
            cpu_nice: AtomicI32::new(0),
            cpu_serving: (Mutex::new(0), Condvar::new()),
            refunded: std::array::from_fn(|_| (Mutex::new(()), Condvar::new())),
        }
    }

    /// An account with no parent (tests, and kernels run without a daemon).
    pub fn standalone(label: impl Into<String>, limits: Table) -> Arc<Account> {
        Arc::new(Account::new(label.into(), limits, None, false, 0))
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn used(&self, r: Resource) -> u64 {
        self.used[r.index()].load(Ordering::Relaxed)
    }

    pub fn limit(&self, r: Resource) -> u64 {
        self.limits.get(r)
    }

    pub fn parent(&self) -> Option<&Arc<Account>> {
        self.parent.as_ref()
    }

    /// The limit a child with `may_use_reserve` meets here.
    fn limit_for(&self, r: Resource, reserve_ok: bool) -> u64 {
        let limit = self.limits.get(r);
        if limit == u64::MAX || reserve_ok {
            return limit;
        }
        let reserve = match self.reserved.get(r) {
            u64::MAX => limit.saturating_mul(u64::from(self.reserve_percent)) / 100,
            n => n,
        };
        limit.saturating_sub(reserve)
    }

    /// Adds `n` of `r` here and in every account above, or nowhere.
    fn add(&self, r: Resource, n: u64, reserve_ok: bool) -> Result<(), Exceeded> {
        let reserve_ok = reserve_ok || self.may_use_reserve;
        let limit = self.limit_for(r, reserve_ok);
        let slot = &self.used[r.index()];
        // Compare-and-swap rather than add-then-undo: a reader (`vino top`, a limit's waiter)
        // never sees an account above its limit, even for the instant a refused charge lasts.
        if let Err(before) = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(n).filter(|&after| after <= limit)
        }) {
            return Err(Exceeded {
                resource: r,
                account: self.label.clone(),
                limit,
                used: before,
                asked: n,
            });
        }
        if let Some(parent) = &self.parent
            && let Err(e) = parent.add(r, n, reserve_ok)
        {
            slot.fetch_sub(n, Ordering::AcqRel);
            return Err(e);
        }
        Ok(())
    }

    fn sub(&self, r: Resource, n: u64) {
        let before = self.used[r.index()].fetch_sub(n, Ordering::AcqRel);
        assert!(
            before >= n,
            "{}: refunded {n} {} but held only {before}",
            self.label,
            r.describe()
        );
        if let Some(parent) = &self.parent {
            parent.sub(r, n);
        }
        // One unit back lets one waiter in: waking all of them would have every waiting
        // connection of a user wake for each refund.
        let (lock, cv) = &self.refunded[r.index()];
        let _g = lock.lock();
        if n == 1 {
            cv.notify_one();
        } else {
            cv.notify_all();
        }
    }

    /// Charges `n` of `r`; the [`Charge`] refunds it when dropped.
    pub fn charge(self: &Arc<Self>, r: Resource, n: u64) -> Result<Charge, Exceeded> {
        self.add(r, n, false)?;
        Ok(Charge {
            account: self.clone(),
            resource: r,
            amount: n,
        })
    }

    /// Like [`Account::charge`], but waits up to `patience` for this account's own holdings to
    /// fall under its limit (a second control call of a process waits for its first). A limit
    /// reached higher up (the user's, the total) still waits on this account's refunds only, so
    /// it fails after `patience`.
    pub fn charge_waiting(self: &Arc<Self>, r: Resource, n: u64, patience: Duration) -> Result<Charge, Exceeded> {
        let deadline = Instant::now() + patience;
        loop {
            let e = match self.charge(r, n) {
                Ok(c) => return Ok(c),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(e);
            }
            // Wait on the account whose limit refused: its refunds are what can let this in.
            let full = self.on_path(&e.account);
            let (lock, cv) = &full.refunded[r.index()];
            let mut g = lock.lock();
            if full.used(r).saturating_add(n) > full.limit_for(r, self.reserve_ok_at(full)) {
                // A refund between the refusal and taking the lock woke nobody: wake now and
                // then as well.
                let until = deadline.min(Instant::now() + Duration::from_millis(20));
                cv.wait_until(&mut g, until);
            }
        }
    }

    /// True if this account's charges may use `above`'s reserve: an account between them
    /// (root's user account) may.
    fn reserve_ok_at(&self, above: &Account) -> bool {
        let mut a = self;
        while !std::ptr::eq(a, above) {
            if a.may_use_reserve {
                return true;
            }
            match &a.parent {
                Some(p) => a = p,
                None => return false,
            }
        }
        false
    }

    /// The account labelled `label` on the path from this one to the root (this one if none).
    fn on_path(&self, label: &str) -> &Account {
        let mut a = self;
        loop {
            if a.label == label {
                return a;
            }
            match &a.parent {
                Some(p) => a = p,
                None => return self,
            }
        }
    }

    /// Adds CPU time spent for this principal (here and above).
    pub fn add_cpu(&self, spent: Duration) {
        let ns = spent.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.cpu_ns.fetch_add(ns, Ordering::Relaxed);
        if let Some(p) = &self.parent {
            p.add_cpu(spent);
        }
    }

    pub fn cpu_ns(&self) -> u64 {
        self.cpu_ns.load(Ordering::Relaxed)
    }

    /// CPU the kernel's threads spent working for this user since its account was made
    /// (sampled every CPU-share tick; see [`cpu`]).
    pub fn cpu_work_ns(&self) -> u64 {
        self.cpu_work_ns.load(Ordering::Relaxed)
    }

    /// True if this user's work lately took more than its share of the CPU (see [`cpu`]).
    pub fn cpu_heavy(&self) -> bool {
        self.cpu_heavy.load(Ordering::Relaxed)
    }

    /// The nice value this user's work runs at now (see [`cpu`]).
    pub fn cpu_nice(&self) -> i32 {
        self.cpu_nice.load(Ordering::Relaxed)
    }

    /// The recent CPU rate of this user's work in the kernel threads, in percent of one core.
    pub fn cpu_percent(&self) -> f64 {
        self.cpu_rate.load(Ordering::Relaxed) as f64 / 100.0
    }

    pub fn usage(&self) -> Usage {
        Usage {
            account: self.label.clone(),
            used: Resource::ALL
                .iter()
                .map(|&r| (r, self.used(r)))
                .filter(|&(_, n)| n > 0)
                .collect(),
            cpu_ns: self.cpu_ns(),
        }
    }
}

/// Something the kernel holds for an account; dropping it refunds the account.
#[must_use = "dropping a charge refunds it at once"]
pub struct Charge {
    account: Arc<Account>,
    resource: Resource,
    amount: u64,
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Charge({} {:?} {})", self.account.label, self.resource, self.amount)
    }
}

/// A charge that grows with what it pays for (a linear memory that only grows), refunded
/// whole when dropped. Nothing is charged until the first [`Growing::grow`].
pub struct Growing {
    account: Arc<Account>,
    resource: Resource,
    charge: Option<Charge>,
}

impl Growing {
    pub fn new(account: Arc<Account>, resource: Resource) -> Growing {
        Growing {
            account,
            resource,
            charge: None,
        }
    }

    /// Charges `n` more; on a refusal nothing more is held.
    pub fn grow(&mut self, n: u64) -> Result<(), Exceeded> {
        match &mut self.charge {
            Some(c) => c.grow(n),
            None => {
                self.charge = Some(self.account.charge(self.resource, n)?);
                Ok(())
            }
        }
    }

    pub fn amount(&self) -> u64 {
        self.charge.as_ref().map_or(0, Charge::amount)
    }
}

impl Charge {
    pub fn amount(&self) -> u64 {
        self.amount
    }

    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// Charges `n` more to the same account and resource.
    pub fn grow(&mut self, n: u64) -> Result<(), Exceeded> {
        self.account.add(self.resource, n, false)?;
        self.amount += n;
        Ok(())
    }

    /// Refunds `n` of what it holds (a holding that shrank), at most all of it.
    pub fn shrink(&mut self, n: u64) {
        let n = n.min(self.amount);
        if n > 0 {
            self.account.sub(self.resource, n);
            self.amount -= n;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.amount > 0 {
            self.account.sub(self.resource, self.amount);
        }
    }
}

/// Every account of a kernel: the total of all users, one per user, one per process.
pub struct Accounts {
    config: LimitsConfig,
    cpu: CpuShares,
    total: Arc<Account>,
    users: Mutex<HashMap<u32, Weak<Account>>>,
}

impl Accounts {
    pub fn new(config: LimitsConfig) -> Accounts {
        let total = Arc::new(Account {
            reserved: config.root_reserved,
            ..Account::new(
                "all users".into(),
                config.total,
                None,
                false,
                config.root_reserve_percent,
            )
        });
        Accounts {
            cpu: CpuShares::new(config.cpu),
            config,
            total,
            users: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &LimitsConfig {
        &self.config
    }

    /// How the users share the CPU of the threads that serve them.
    pub fn cpu(&self) -> &CpuShares {
        &self.cpu
    }

    pub fn total(&self) -> &Arc<Account> {
        &self.total
    }

    /// The account of user `uid`, made on first use and kept while anything of it lives.
    pub fn user(&self, uid: u32) -> Arc<Account> {
        let mut users = self.users.lock();
        if let Some(a) = users.get(&uid).and_then(Weak::upgrade) {
            return a;
        }
        let root = uid == 0;
        let limits = if root { Table::UNLIMITED } else { self.config.user };
        let a = Arc::new(Account::new(
            format!("uid {uid}"),
            limits,
            Some(self.total.clone()),
            root,
            0,
        ));
        users.retain(|_, w| w.strong_count() > 0);
        users.insert(uid, Arc::downgrade(&a));
        a
    }

    /// A new account for a process of user `uid`, labelled `label` ("process 12").
    pub fn process(&self, uid: u32, label: impl Into<String>) -> Arc<Account> {
        Arc::new(Account::new(
            label.into(),
            self.config.process,
            Some(self.user(uid)),
            false,
            0,
        ))
    }

    /// The users with an account now, and what they hold.
    pub fn users(&self) -> Vec<(u32, Usage)> {
        let users = self.users.lock();
        let mut v: Vec<_> = users
            .iter()
            .filter_map(|(&uid, w)| w.upgrade().map(|a| (uid, a.usage())))
            .collect();
        v.sort_by_key(|(uid, _)| *uid);
        v
    }
}

impl Default for Accounts {
    fn default() -> Self {
        Accounts::new(LimitsConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> LimitsConfig {
        LimitsConfig {
            process: Table::UNLIMITED.with(Resource::Descriptors, 3),
            user: Table::UNLIMITED
                .with(Resource::Descriptors, 5)
                .with(Resource::Grafts, 2),
            total: Table::UNLIMITED.with(Resource::Grafts, 20),
            root_reserve_percent: 50,
            root_reserved: Table::UNSET,
            cpu: CpuConfig::default(),
        }
    }

    #[test]
    fn an_amount_reserved_for_root_replaces_the_percent() {
        let mut config = small();
        config.total.set(Resource::Connections, 4);
        config.root_reserved.set(Resource::Connections, 1);
        let accounts = Accounts::new(config);
        let users: Vec<_> = (0..3)
            .map(|i| accounts.user(1000 + i).charge(Resource::Connections, 1).unwrap())
            .collect();
        let e = accounts.user(1005).charge(Resource::Connections, 1).unwrap_err();
        assert_eq!((e.account.as_str(), e.limit, e.errno()), ("all users", 3, 87));
        let root = accounts.user(0).charge(Resource::Connections, 1).unwrap();
        assert!(accounts.user(0).charge(Resource::Connections, 1).is_err());
        drop((users, root));
        assert_eq!(accounts.total().used(Resource::Connections), 0);
    }

    #[test]
    fn a_charge_passes_every_limit_on_its_path_or_none() {
        let accounts = Accounts::new(small());
        let p1 = accounts.process(1000, "process 1");
        let p2 = accounts.process(1000, "process 2");
        let held: Vec<_> = (0..3).map(|_| p1.charge(Resource::Descriptors, 1).unwrap()).collect();
        let e = p1.charge(Resource::Descriptors, 1).unwrap_err();
        assert_eq!((e.account.as_str(), e.limit, e.errno()), ("process 1", 3, 24));
        let more: Vec<_> = (0..2).map(|_| p2.charge(Resource::Descriptors, 1).unwrap()).collect();
        let e = p2.charge(Resource::Descriptors, 1).unwrap_err();
        assert_eq!(e.account, "uid 1000");
        // The refused charge left nothing behind anywhere.
        assert_eq!(
            (
                p2.used(Resource::Descriptors),
                accounts.user(1000).used(Resource::Descriptors)
            ),
            (2, 5)
        );
        drop(held);
        drop(more);
        assert_eq!(accounts.user(1000).used(Resource::Descriptors), 0);
        assert_eq!(accounts.total().used(Resource::Descriptors), 0);
    }

    #[test]
    fn other_users_cannot_take_roots_reserve() {
        let accounts = Accounts::new(small());
        let mut held = Vec::new();
        for uid in 1000..1010 {
            let p = accounts.process(uid, format!("p{uid}"));
            while let Ok(c) = p.charge(Resource::Grafts, 1) {
                held.push(c);
            }
        }
        // Half of the total of 20 is root's.
        assert_eq!(accounts.total().used(Resource::Grafts), 10);
        let e = accounts.process(1011, "late").charge(Resource::Grafts, 1).unwrap_err();
        assert_eq!((e.account.as_str(), e.errno()), ("all users", 122));
        let root = accounts.process(0, "root");
        let mine: Vec<_> = (0..10).map(|_| root.charge(Resource::Grafts, 1).unwrap()).collect();
        assert!(root.charge(Resource::Grafts, 1).is_err());
        drop(mine);
        drop(held);
        assert_eq!(accounts.total().used(Resource::Grafts), 0);
    }

    #[test]
    fn a_waiting_charge_goes_when_the_first_is_refunded() {
        let a = Account::standalone("p", Table::UNLIMITED.with(Resource::ControlCalls, 1));
        let first = a.charge(Resource::ControlCalls, 1).unwrap();
        assert!(
            a.charge_waiting(Resource::ControlCalls, 1, Duration::from_millis(30))
                .is_err()
        );
        let a2 = a.clone();
        let t = std::thread::spawn(move || {
            a2.charge_waiting(Resource::ControlCalls, 1, Duration::from_secs(30))
                .is_ok()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        assert!(t.join().unwrap());
    }

    #[test]
    fn an_account_is_never_seen_above_its_limit_while_others_are_refused() {
        let a = Account::standalone("p", Table::UNLIMITED.with(Resource::ControlCalls, 1));
        let (tries, refused) = (AtomicU64::new(0), AtomicU64::new(0));
        // A million tries, and on until the threads have met (on a loaded machine one may
        // run its share before the other is scheduled), within a bound that a working
        // account meets long before.
        let more = || {
            let n = tries.load(Ordering::Relaxed);
            n < 1_000_000 || (refused.load(Ordering::Relaxed) == 0 && n < 500_000_000)
        };
        let mut seen = 0;
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while more() {
                        tries.fetch_add(1, Ordering::Relaxed);
                        if let Ok(held) = a.charge(Resource::ControlCalls, 1) {
                            // Hold it a moment, so the other thread is refused now and then.
                            std::hint::black_box(a.used(Resource::ControlCalls));
                            drop(held);
                        } else {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            while more() {
                seen = seen.max(a.used(Resource::ControlCalls));
            }
        });
        assert!(refused.into_inner() > 0, "the threads never met");
        assert!(seen <= 1, "{seen} held at once under a limit of 1");
        assert_eq!(a.used(Resource::ControlCalls), 0);
    }

    #[test]
    fn growing_a_charge_is_checked_and_refunded_whole() {
        let a = Account::standalone("p", Table::UNLIMITED.with(Resource::GraftMemory, 100));
        let mut c = a.charge(Resource::GraftMemory, 40).unwrap();
        c.grow(60).unwrap();
        assert!(c.grow(1).is_err());
        assert_eq!(a.used(Resource::GraftMemory), 100);
        drop(c);
        assert_eq!(a.used(Resource::GraftMemory), 0);
    }
}
