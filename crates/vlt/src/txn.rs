//! Transactions: the abort and commit logs, the locks held, and nesting by marks.
//!
//! One flat abort log, commit log and lock list serve the whole family; a nested transaction is a
//! *mark* (the lengths of the three at its begin). Committing a child just drops its mark, which
//! hands its records and locks to the parent; aborting it runs and truncates everything past the
//! mark. This keeps begin and commit free of allocation.

use crate::VltError;
use crate::lock::{Family, Granted, LockMode, Manager, ObjectId, Prior};
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Identity of a top-level transaction (unique in the process).
pub type TxnId = u64;

type Record = Box<dyn FnOnce() + Send>;

#[derive(Clone, Copy)]
struct Mark {
    abort_len: usize,
    commit_len: usize,
    locks_len: usize,
}

struct Held {
    obj: ObjectId,
    prior: Prior,
}

/// The reusable body of a transaction, kept in a per-thread pool between uses.
struct Body {
    family: Arc<Family>,
    manager: Option<Arc<Manager>>,
    abort_log: Vec<Record>,
    commit_log: Vec<Record>,
    locks: Vec<Held>,
    marks: Vec<Mark>,
}

impl Body {
    fn new() -> Box<Body> {
        Box::new(Body {
            family: Arc::new(Family::new()),
            manager: None,
            abort_log: Vec::new(),
            commit_log: Vec::new(),
            locks: Vec::new(),
            marks: Vec::new(),
        })
    }
}

const POOL: usize = 8;

thread_local! {
    // Transactions own their body as a `Box<Body>`: pooling the boxes themselves reuses their
    // allocations, which a `Vec<Body>` would not.
    #[allow(clippy::vec_box)]
    static POOL_BODIES: RefCell<Vec<Box<Body>>> = const { RefCell::new(Vec::new()) };
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
}

static THREADS: AtomicU64 = AtomicU64::new(1);

/// Ids are (thread number << 40 | per-thread count): unique without a shared counter.
fn next_id() -> TxnId {
    NEXT_ID.with(|c| {
        let mut v = c.get();
        if v & ((1 << 40) - 1) == 0 {
            v = THREADS.fetch_add(1, Ordering::Relaxed) << 40;
        }
        v += 1;
        c.set(v);
        v
    })
}

/// A transaction in progress. Dropping it without [`Txn::commit`] aborts it.
pub struct Txn {
    body: Option<Box<Body>>,
    id: TxnId,
}

impl Txn {
    pub(crate) fn begin(manager: Arc<Manager>) -> Txn {
        let mut body = POOL_BODIES.with(|p| p.borrow_mut().pop()).unwrap_or_else(Body::new);
        let id = next_id();
        body.family.id.store(id, Ordering::Relaxed);
        body.family.deadline_ns.store(0, Ordering::Relaxed);
        match &body.manager {
            Some(m) if Arc::ptr_eq(m, &manager) => {}
            _ => body.manager = Some(manager),
        }
        debug_assert!(body.abort_log.is_empty() && body.commit_log.is_empty());
        debug_assert!(body.locks.is_empty() && body.marks.is_empty());
        Txn { body: Some(body), id }
    }

    fn body(&mut self) -> &mut Body {
        self.body.as_mut().expect("transaction already ended")
    }

    fn manager(&self) -> &Manager {
        self.body
            .as_ref()
            .and_then(|b| b.manager.as_deref())
            .expect("transaction already ended")
    }

    pub fn id(&self) -> TxnId {
        self.id
    }

    /// 0 for the top-level transaction, 1 inside one nested child, and so on.
    pub fn depth(&self) -> usize {
        self.body.as_ref().map_or(0, |b| b.marks.len())
    }

    /// Opens a nested transaction; it inherits every lock the family holds.
    pub fn begin_nested(&mut self) {
        let b = self.body();
        let mark = Mark {
            abort_len: b.abort_log.len(),
            commit_len: b.commit_log.len(),
            locks_len: b.locks.len(),
        };
        b.marks.push(mark);
    }

    /// Commits the innermost nested transaction: its logs and locks become its parent's.
    pub fn commit_nested(&mut self) {
        let popped = self.body().marks.pop();
        assert!(popped.is_some(), "commit_nested without a nested transaction");
    }

    /// Aborts the innermost nested transaction: runs its undo records newest first, forgets its
    /// deferred actions and gives back the locks it took. The parent's work is untouched.
    pub fn abort_nested(&mut self) {
        let mark = self
            .body()
            .marks
            .pop()
            .expect("abort_nested without a nested transaction");
        self.unwind_to(mark);
        self.manager().count_abort();
    }

    /// Takes a lock on `obj`, held to the end of the top-level transaction (or until the nested
    /// transaction that took it aborts).
    pub fn lock(&mut self, obj: ObjectId, mode: LockMode) -> Result<(), VltError> {
        let body = self.body.as_mut().expect("transaction already ended");
        let manager = body.manager.as_deref().expect("transaction has a manager");
        match manager.acquire(&body.family, obj, mode)? {
            Granted::AlreadyHeld => {}
            Granted::New(prior) => body.locks.push(Held { obj, prior }),
        }
        Ok(())
    }

    /// Pushes an undo record: run (newest first) if this transaction or the nested one that
    /// pushed it aborts.
    pub fn on_abort(&mut self, undo: impl FnOnce() + Send + 'static) {
        self.body().abort_log.push(Box::new(undo));
    }

    /// Defers an action to the commit of the top-level transaction (run oldest first, before the
    /// locks are released). Forgotten if the transaction that deferred it aborts.
    pub fn on_commit(&mut self, action: impl FnOnce() + Send + 'static) {
        self.body().commit_log.push(Box::new(action));
    }

    /// Ok while the transaction may go on; an error once it has passed a deadline (its own, or
    /// the time limit it got for holding a lock others wait for). The caller must then abort.
    pub fn check(&self) -> Result<(), VltError> {
        let b = self.body.as_ref().expect("transaction already ended");
        let now = b.manager.as_deref().map_or_else(crate::now_ns, |m| m.clock.now_ns());
        if b.family.deadline_passed(now) {
            Err(VltError::DeadlinePassed)
        } else {
            Ok(())
        }
    }

    /// Sets a deadline `after_ns` from now (lowering any deadline already set).
    pub fn set_deadline_in(&mut self, after: std::time::Duration) {
        let now = self.manager().clock.now_ns();
        let at = crate::clock::later(now, after);
        let fam = &self.body().family;
        let _ = fam.deadline_ns.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |d| {
            (d == 0 || d > at).then_some(at)
        });
    }

    /// Number of lock acquisitions this transaction holds (for assertions and tests).
    pub fn locks_held(&self) -> usize {
        self.body.as_ref().map_or(0, |b| b.locks.len())
    }

    /// Number of records on the abort log.
    pub fn undo_records(&self) -> usize {
        self.body.as_ref().map_or(0, |b| b.abort_log.len())
    }

    /// Commits the top-level transaction: runs the commit log, drops the abort log, releases
    /// every lock. Nested transactions still open are committed into it first.
    pub fn commit(mut self) {
        let mut body = self.body.take().expect("transaction already ended");
        body.marks.clear();
        body.abort_log.clear();
        // A panicking action must not leak the locks: release them, then go on unwinding.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for action in body.commit_log.drain(..) {
                action();
            }
        }));
        body.commit_log.clear();
        release_all(&mut body);
        recycle(body);
        if let Err(panic) = ran {
            std::panic::resume_unwind(panic);
        }
    }

    /// Aborts the whole transaction: undo records newest first, commit log forgotten, every lock
    /// released.
    pub fn abort(mut self) {
        self.abort_in_place();
    }

    fn abort_in_place(&mut self) {
        if self.body.is_none() {
            return;
        }
        self.unwind_to(Mark {
            abort_len: 0,
            commit_len: 0,
            locks_len: 0,
        });
        self.manager().count_abort();
        let mut body = self.body.take().expect("checked above");
        body.marks.clear();
        recycle(body);
    }

    fn unwind_to(&mut self, mark: Mark) {
        let body = self.body();
        body.commit_log.truncate(mark.commit_len);
        while body.abort_log.len() > mark.abort_len {
            let undo = body.abort_log.pop().expect("length checked");
            undo();
        }
        let manager = body.manager.clone().expect("transaction has a manager");
        while body.locks.len() > mark.locks_len {
            let held = body.locks.pop().expect("length checked");
            manager.release(&body.family, held.obj, held.prior);
        }
    }
}

fn release_all(body: &mut Body) {
    let manager = body.manager.clone().expect("transaction has a manager");
    // Newest first, so an upgrade is undone before the shared lock under it is dropped.
    while let Some(held) = body.locks.pop() {
        manager.release(&body.family, held.obj, held.prior);
    }
}

fn recycle(body: Box<Body>) {
    debug_assert!(body.locks.is_empty() && body.abort_log.is_empty() && body.commit_log.is_empty());
    POOL_BODIES.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL {
            p.push(body);
        }
    });
}

impl Drop for Txn {
    fn drop(&mut self) {
        self.abort_in_place();
    }
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("depth", &self.depth())
            .field("locks", &self.locks_held())
            .field("undo_records", &self.undo_records())
            .finish()
    }
}
