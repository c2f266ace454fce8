//! VINO's byte-range lock manager and its `lock.grant` graftpoint (Seltzer et al. 1995, 4.4).
//!
//! The manager knows nothing of files: objects are `u64` ids (the kernel uses inode numbers) and
//! owners are `u64` ids (process ids). It follows POSIX fcntl record locking:
//!
//! * shared (read) and exclusive (write) locks over `[start, start + len)`, `len == 0` meaning to
//!   infinity;
//! * an owner's locks never conflict with each other, and a new request replaces whatever the
//!   owner held in its range: locks split, merge, upgrade and downgrade, and an unlock may free a
//!   sub-range;
//! * `F_GETLK` ([`LockManager::get_lock`]) reports a conflicting lock; `F_SETLK`
//!   ([`Wait::No`]) fails with [`LockError::WouldBlock`] (`EAGAIN`); `F_SETLKW`
//!   ([`Wait::Forever`]) blocks until granted, after checking that waiting would not close a
//!   cycle of owners waiting for each other's locks ([`LockError::Deadlock`], `EDEADLK`);
//! * closing an object drops the owner's locks on it ([`LockManager::release_object`]), exiting
//!   drops all of them ([`LockManager::release_owner`]); waits can be bounded ([`Wait::For`]) or
//!   cancelled ([`LockManager::cancel_waits`]), for clients that die while waiting.
//!
//! # Granting
//!
//! Waiters are granted by hand-off: when a lock is released or downgraded, or a request arrives
//! that could go but overlaps others still waiting, the object's `lock.grant` policy sees the
//! waiting requests (owner, kind, range, arrival order, whether it is an upgrade) and the held
//! locks, and names which waiters to grant; the kernel checks the choice and grants them, under
//! the manager's lock, before anyone else can take the bytes. A request that overlaps nobody's
//! lock and nobody's waiting request is granted at once without asking. The default is
//! FIFO/reader priority, as in BSD; strict FIFO is the alternative ([`grant`] has both and the
//! ABI). A policy that fails, chooses a conflicting or unknown waiter, or grants nothing when no
//! holder could ever release (nothing held, or every holder waiting here itself) is overruled by
//! the default, so no waiter is ever stranded.
//!
//! The policy runs under the manager's one mutex, within the graft runtime's invocation budget;
//! a hostile graft can delay lock operations by at most that budget per decision.
//!
//! Deadlock detection follows POSIX: it considers owners waiting for locks that are held, at the
//! moment a request would block. Waiting that a grant policy imposes on a request no held lock
//! blocks (FIFO keeping a reader behind an earlier writer) is not in the graph; bounded waits
//! ([`Wait::For`]) and cancellation cover what that misses.

#![forbid(unsafe_code)]

pub mod grant;
mod manager;
pub mod range;
pub mod shadow;
mod tree;

pub use grant::{Fifo, Frp, GrantArgs, GrantEnv, LockGrant, REQUEUE_MAX, Requeue, WaitInfo};
pub use manager::{LockError, LockManager, LockStats, Wait};
pub use range::{Change, Held, Lock, LockKind, Range, TO_EOF};

/// True if this build checks the lock manager's invariants after every operation (debug builds, and
/// release builds with the `invariants` feature, which `cargo test` of the workspace turns on
/// for every binary it builds): correct, but too slow to measure.
pub const CHECKS_INVARIANTS: bool = cfg!(any(debug_assertions, feature = "invariants"));

// The crate's tests run with its invariant checks on, in release builds too: the dev-dependency
// on itself enables the `invariants` feature.
#[cfg(all(test, not(any(debug_assertions, feature = "invariants"))))]
compile_error!("the tests must be built with the `invariants` feature");
