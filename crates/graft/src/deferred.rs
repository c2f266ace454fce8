//! Changes to kernel state that graft-callable functions ask for during a call, made only if the
//! call commits.
//!
//! The real kernel's state-changing functions (`vino_prefetch`, `vino_page_hint`,
//! `vino_lock_requeue`, `vino_tickets_give`) share one shape: check the arguments at once, as a
//! system call does; count the request against the call's allowance (`-ENOSPC` once it is
//! spent); and hand the change to the subsystem that makes it only when the call's transaction
//! commits, so that an aborted call's requests are dropped, never made (docs/departures.md,
//! "What the VLT guards in the real kernel"). [`Deferred`] is that shape; each function keeps
//! only its own checks.
//!
//! A graftpoint's environment holds one, begins each call with [`Deferred::begin_call`] (in its
//! `encode`, while the graft's instance is held, so calls never share an allowance), and the
//! subsystem takes the committed changes with [`Deferred::take`] after the call.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The deferred changes of one graftpoint's graft: the running call's allowance and the
/// committed changes waiting to be made.
#[derive(Debug)]
pub struct Deferred<T> {
    /// Most changes one call may ask for.
    per_call: usize,
    /// Changes the running call asked for.
    asked: AtomicUsize,
    committed: Arc<Committed<T>>,
}

/// Changes whose calls committed, not taken yet.
#[derive(Debug)]
struct Committed<T> {
    /// Most changes waiting at once; more are dropped (every such change is advice, and the
    /// subsystem takes them after each call, so only calls racing past it fill the list).
    waiting: usize,
    /// Some are waiting: the subsystem looks at this flag, not the lock, after every call.
    any: AtomicBool,
    list: Mutex<Vec<T>>,
}

impl<T: Send + 'static> Deferred<T> {
    /// At most `per_call` changes asked for by one call, at most `waiting` committed ones
    /// waiting to be made.
    pub fn new(per_call: usize, waiting: usize) -> Self {
        assert!(waiting >= per_call, "a committed call's changes must fit");
        Deferred {
            per_call,
            asked: AtomicUsize::new(0),
            committed: Arc::new(Committed {
                waiting,
                any: AtomicBool::new(false),
                list: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A call begins: its allowance is whole again.
    pub fn begin_call(&self) {
        self.asked.store(0, Ordering::Relaxed);
    }

    /// Asks for `change`, made when the running call's transaction commits (at once outside a
    /// transaction) and dropped if it aborts. False, and nothing asked, when the call's
    /// allowance is spent.
    pub fn ask(&self, change: T) -> bool {
        let counted = self
            .asked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.per_call).then_some(n + 1)
            })
            .is_ok();
        if counted {
            let committed = self.committed.clone();
            vino_vlt::current::on_commit(move || committed.push(change));
        }
        counted
    }

    /// The committed changes not taken yet, oldest first; none (without taking the lock) when
    /// none wait.
    pub fn take(&self) -> Vec<T> {
        if !self.committed.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut list = self.committed.list.lock();
        self.committed.any.store(false, Ordering::Relaxed);
        std::mem::take(&mut *list)
    }
}

impl<T> Committed<T> {
    /// A committed change joins the list (counted as made, [`crate::change_made`]), unless the
    /// list is full.
    fn push(&self, change: T) {
        let mut list = self.list.lock();
        if list.len() < self.waiting {
            list.push(change);
            self.any.store(true, Ordering::Release);
            crate::change_made();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vino_vlt::{Vlt, current};

    #[test]
    fn changes_are_made_at_commit_within_the_allowance_and_dropped_at_abort() {
        let vlt = Vlt::default();
        let d = Deferred::new(2, 3);
        // Aborted: asked, counted, never made.
        let aborted: Result<(), ()> = current::atomically(&vlt, || {
            assert!(d.ask(1) && d.ask(2));
            assert!(!d.ask(3), "the allowance is spent");
            Err(())
        });
        assert!(aborted.is_err());
        assert_eq!(d.take(), Vec::<i32>::new());
        // Committed: made, in order.
        d.begin_call();
        let both = |a, b| current::atomically(&vlt, || Ok::<_, ()>(d.ask(a) && d.ask(b))).unwrap();
        assert!(both(4, 5));
        // A second call's changes beyond what may wait are dropped.
        d.begin_call();
        assert!(both(6, 7));
        assert_eq!(d.take(), [4, 5, 6]);
        assert_eq!(d.take(), Vec::<i32>::new());
        // Outside a transaction a change is made at once.
        d.begin_call();
        assert!(d.ask(8));
        assert_eq!(d.take(), [8]);
    }
}
