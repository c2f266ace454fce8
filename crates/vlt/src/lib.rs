//! VINO lightweight transactions (VLT), after Small 1998, chapter 6.
//!
//! A VLT is an ephemeral (non-durable) transaction that wraps every graft invocation so that a
//! graft which fails, runs too long or returns nonsense leaves the kernel as if it had never run.
//!
//! * **Logical logging.** Kernel code that changes state under a transaction pushes an *undo
//!   record* (an action that puts the state back) on the abort log, or defers an action that
//!   cannot be undone (a disk write, a free) to the commit log. Records are closures: a function
//!   and its arguments, as the thesis' call-frame logs were.
//! * **Two-phase locking.** [`Txn::lock`] takes a shared or exclusive lock on a kernel object,
//!   held until the top-level transaction ends.
//! * **Nesting.** [`Txn::begin_nested`] opens a child that inherits its parent's locks; on commit it
//!   hands its logs and locks to the parent, on abort it undoes only its own work.
//! * **Deadlines.** A lock wait has a deadline. A transaction that holds a lock somebody waits for
//!   is given a time limit ([`VltConfig::hold_limit`]) and is told to abort when it passes it
//!   ([`Txn::check`]); simple wait-for cycles are detected at once. No lock wait hangs.
//!
//! This crate knows nothing of WebAssembly: the graft runtime builds on it, and so does kernel
//! code that wants the same all-or-nothing behaviour.

#![forbid(unsafe_code)]

mod clock;
pub mod current;
mod lock;
mod txn;

pub use clock::now_ns;
pub use lock::{LockMode, ObjectId};
pub use txn::{Txn, TxnId};
pub use vino_clock::SharedClock;
pub use vino_clock::clock::MANUAL_SLICE;

use std::sync::Arc;
use std::time::Duration;

/// Why a transaction could not go on. Any of these means: abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VltError {
    /// The lock was not granted before the wait deadline.
    #[error("lock wait on object {0:#x} timed out")]
    LockTimeout(ObjectId),
    /// Waiting would close a cycle of transactions waiting on each other.
    #[error("deadlock: waiting for object {0:#x} would close a wait-for cycle")]
    Deadlock(ObjectId),
    /// The transaction held a lock others wait on for longer than its time limit, or passed a
    /// deadline set on it.
    #[error("transaction passed its deadline")]
    DeadlinePassed,
}

/// Limits of the transaction system.
#[derive(Debug, Clone, Copy)]
pub struct VltConfig {
    /// How long a transaction may go on holding a lock once another transaction waits for it.
    pub hold_limit: Duration,
    /// How long a lock request may wait before it fails with [`VltError::LockTimeout`].
    pub wait_limit: Duration,
}

impl Default for VltConfig {
    fn default() -> Self {
        VltConfig {
            hold_limit: Duration::from_millis(20),
            wait_limit: Duration::from_millis(200),
        }
    }
}

/// Counters of the rare events of the transaction system (the common ones, begin and commit, are
/// not counted: a shared counter on the fast path would cost more than the transaction).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VltStats {
    pub aborts: u64,
    pub lock_waits: u64,
    pub lock_timeouts: u64,
    pub deadlocks: u64,
    pub deadlines_set: u64,
}

/// The transaction manager: the lock table and the limits. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct Vlt {
    inner: Arc<lock::Manager>,
}

impl Vlt {
    pub fn new(config: VltConfig) -> Self {
        Vlt::with_clock(config, SharedClock::default())
    }

    /// A manager whose deadlines and limits run on `clock` (a simulation's, say).
    pub fn with_clock(config: VltConfig, clock: SharedClock) -> Self {
        Vlt {
            inner: Arc::new(lock::Manager::new(config, clock)),
        }
    }

    /// The clock deadlines run on.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// Now on this manager's clock, in deadline units (never 0).
    pub fn now_ns(&self) -> u64 {
        self.inner.clock.now_ns()
    }

    /// Begins a top-level transaction.
    pub fn begin(&self) -> Txn {
        Txn::begin(self.inner.clone())
    }

    pub fn config(&self) -> VltConfig {
        self.inner.config
    }

    /// Adds a hook that a waiter calls when the transaction it waits for has passed the deadline
    /// the wait imposed on it, while that transaction still holds the lock: a transaction that
    /// computes without calling back into the kernel cannot see its deadline itself, so whoever
    /// runs it (the graft runtime) is asked to interrupt it. Called again about every
    /// millisecond until the lock is released.
    pub fn add_deadline_hook(&self, hook: std::sync::Arc<dyn Fn() + Send + Sync>) {
        self.inner.deadline_hooks.write().push(hook);
    }

    /// Number of kernel objects on which some transaction holds a lock right now. Zero when the
    /// system is quiet: a non-zero count then means a leaked lock.
    pub fn locked_objects(&self) -> usize {
        self.inner.locked_objects()
    }

    pub fn stats(&self) -> VltStats {
        self.inner.stats()
    }

    /// Counts an abort of a transaction that never began (see [`current`]).
    pub(crate) fn count_abort(&self) {
        self.inner.count_abort();
    }

    /// True when both handles name the same manager.
    pub fn same(&self, other: &Vlt) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Default for Vlt {
    fn default() -> Self {
        Vlt::new(VltConfig::default())
    }
}

impl std::fmt::Debug for Vlt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vlt").field("config", &self.inner.config).finish()
    }
}
