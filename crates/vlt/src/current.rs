//! The thread's current transaction.
//!
//! Kernel code reached from a graft (a graft-callable function) does not get the transaction as
//! an argument: it finds it here, as kernel code in the original found it through the current
//! thread. [`atomically`] runs a body inside a transaction, nested in the current one when there
//! is one, so a graft invoked from inside another graft gets a child transaction.
//!
//! A top-level transaction begins lazily: [`atomically`] only notes that one is open, and it is
//! begun when the body first needs it (a lock, an undo or commit record, anything through
//! [`with`]). A body that touches no kernel state, as most policy decisions do, then pays for
//! no transaction at all: it holds no lock, so no one can wait on it or set it a deadline, and
//! it has nothing to undo.

use crate::{Txn, Vlt, VltError};
use std::cell::{Cell, RefCell};

thread_local! {
    static CURRENT: RefCell<Option<Txn>> = const { RefCell::new(None) };
    /// A top-level transaction is open but not yet begun.
    static PENDING: Cell<bool> = const { Cell::new(false) };
    /// The manager of the last top-level transaction opened on this thread, kept between
    /// transactions so that opening one costs no reference count.
    static MANAGER: RefCell<Option<Vlt>> = const { RefCell::new(None) };
}

/// Runs `f` on the thread's current transaction (beginning one that is open but not yet begun);
/// `None` when the thread is in none.
///
/// `f` must not call back into [`atomically`] (the transaction is borrowed while it runs).
pub fn with<R>(f: impl FnOnce(&mut Txn) -> R) -> Option<R> {
    begin_pending();
    CURRENT.with(|c| c.borrow_mut().as_mut().map(f))
}

/// Begins the open top-level transaction if it has not begun yet.
fn begin_pending() {
    if PENDING.with(|p| p.replace(false)) {
        let txn = MANAGER.with(|m| {
            m.borrow()
                .as_ref()
                .expect("an open transaction has its manager")
                .begin()
        });
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            debug_assert!(c.is_none(), "a transaction both pending and begun");
            *c = Some(txn);
        });
    }
}

/// True if the thread is inside a transaction.
pub fn active() -> bool {
    PENDING.with(|p| p.get()) || CURRENT.with(|c| c.borrow().is_some())
}

/// True if the thread's current transaction holds a lock (a transaction not yet begun holds
/// none, and is not begun by asking).
pub fn holds_locks() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|t| t.locks_held() > 0))
}

/// Runs `body` inside a transaction of `vlt`. If the thread already is in a transaction, `body`
/// runs in a nested child of it; otherwise in a new top-level transaction that is the thread's
/// current one while `body` runs. `Ok` commits (a child's work goes to its parent), `Err` aborts
/// it and undoes exactly `body`'s work. A panic in `body` aborts too, then goes on unwinding.
pub fn atomically<T, E>(vlt: &Vlt, body: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    // A child needs its parent begun (its undo scope is a mark in the parent's logs).
    begin_pending();
    let top = CURRENT.with(|c| match c.borrow_mut().as_mut() {
        Some(t) => {
            t.begin_nested();
            false
        }
        None => true,
    });
    if top {
        MANAGER.with(|m| {
            let mut m = m.borrow_mut();
            if !m.as_ref().is_some_and(|kept| kept.same(vlt)) {
                *m = Some(vlt.clone());
            }
        });
        PENDING.with(|p| p.set(true));
    }
    let guard = EndGuard { top, armed: true };
    let result = body();
    guard.finish(result.is_ok());
    result
}

/// Ends the transaction [`atomically`] opened, on the normal path or while unwinding.
struct EndGuard {
    top: bool,
    armed: bool,
}

impl EndGuard {
    fn finish(mut self, commit: bool) {
        self.armed = false;
        end(self.top, commit);
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if self.armed {
            end(self.top, false);
        }
    }
}

fn end(top: bool, commit: bool) {
    if top {
        if PENDING.with(|p| p.replace(false)) {
            // Never begun: nothing to undo or release; an abort is still counted.
            if !commit {
                MANAGER.with(|m| m.borrow().as_ref().map(Vlt::count_abort));
            }
            return;
        }
        // Take the transaction out before running its logs, so that a log record may itself
        // use transactions.
        let txn = CURRENT
            .with(|c| c.borrow_mut().take())
            .expect("current transaction vanished");
        if commit { txn.commit() } else { txn.abort() }
    } else {
        let mut txn = CURRENT
            .with(|c| c.borrow_mut().take())
            .expect("current transaction vanished");
        // Put the transaction back even if an undo record panics, so that the enclosing levels
        // can still abort it while the panic unwinds through them.
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if commit {
                txn.commit_nested()
            } else {
                txn.abort_nested()
            }
        }));
        CURRENT.with(|c| *c.borrow_mut() = Some(txn));
        if let Err(panic) = ended {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Takes a lock in the current transaction. Outside a transaction this is an error of the caller
/// (kernel code that needs isolation must run in one).
pub fn lock(obj: crate::ObjectId, mode: crate::LockMode) -> Result<(), VltError> {
    with(|t| t.lock(obj, mode)).expect("lock taken outside a transaction")
}

/// Pushes an undo record on the current transaction; outside a transaction the change is final
/// and the record is dropped.
pub fn on_abort(undo: impl FnOnce() + Send + 'static) {
    with(|t| t.on_abort(undo));
}

/// Defers an action to commit; outside a transaction it runs at once.
pub fn on_commit(action: impl FnOnce() + Send + 'static) {
    let mut action = Some(action);
    with(|t| t.on_commit(action.take().expect("once")));
    if let Some(a) = action {
        a();
    }
}

/// The current transaction's [`Txn::check`]; Ok outside a transaction, and in one not yet
/// begun (it holds no lock, so no waiter can have set it a deadline).
pub fn check() -> Result<(), VltError> {
    CURRENT.with(|c| c.borrow().as_ref().map(Txn::check)).unwrap_or(Ok(()))
}
