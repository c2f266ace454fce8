//! What every candidate in shadow shares (`vino graft try`; the ghost models are the
//! subsystems', `vino_cache::shadow` and `vino_iosched::shadow`): the bounded queue the live
//! path feeds and the thread that drains it ([`Fed`]), the owner's calls to its candidate
//! ([`OwnerCall`]), and the counts every report carries ([`ShadowCounts`]).

use crate::error::GraftError;
use crate::error::LoadError;
use crate::point::GraftPoint;
use crate::slot::Shadow;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Events the queue between the live path and a shadow holds by default: page accesses, small
/// and many.
pub const TRY_QUEUE: usize = 1 << 16;
/// Decisions the queue holds where each carries its arguments (a read's answer, the requests
/// or waiters offered): fewer and larger.
pub const DECISION_QUEUE: usize = 256;

/// How a candidate in shadow fared, whatever its ghost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ShadowCounts {
    /// Decisions the candidate was asked for, those that failed (the default's answer was
    /// taken), and its mean time per decision.
    pub decisions: u64,
    pub failures: u64,
    pub candidate_ns_per_decision: f64,
    /// What the live path offered that the queue could not take (the ghost is inexact by as
    /// many).
    pub queue_drops: u64,
    /// Why the candidate was dropped, if it failed too often.
    pub dropped: Option<String>,
    pub last_error: Option<String>,
}

impl ShadowCounts {
    /// The candidate's counters now (the queue's drops are counted where it is fed).
    pub fn of<G: GraftPoint>(shadow: &Shadow<G>) -> ShadowCounts {
        let stats = shadow.stats();
        ShadowCounts {
            decisions: stats.invocations,
            failures: stats.failures,
            candidate_ns_per_decision: stats.time_ns as f64 / stats.invocations.max(1) as f64,
            queue_drops: 0,
            dropped: shadow.dropped().map(str::to_string),
            last_error: stats.last_error,
        }
    }
}

/// A report that counts what the queue dropped.
pub trait Report: Clone + Send + 'static {
    fn set_queue_drops(&mut self, n: u64);
}

/// What the owner asks of its candidate: what it would ask of a bound graft (its data written,
/// its control functions called, its symbols looked up). It goes through the shadow's queue,
/// in order with the live path's events (the owner waits for room, never the live path). A
/// control call or a lookup waits for its answer; a write does not (an owner moving a cursor
/// before every record must not wait for the candidate to catch up), and one that fails is
/// counted as the candidate's failure.
pub enum OwnerCall {
    Write { offset: u32, bytes: Vec<u8> },
    Control { name: String, args: Vec<i64> },
    Symbol { name: String },
}

impl OwnerCall {
    /// Does it to `shadow`.
    fn apply<G: GraftPoint>(&self, shadow: &Shadow<G>) -> Result<i64, GraftError> {
        match self {
            OwnerCall::Write { offset, bytes } => shadow.write_memory(*offset, bytes).map(|()| 0),
            OwnerCall::Control { name, args } => shadow.call_control(name, args),
            OwnerCall::Symbol { name } => shadow.symbol_address(name).map(i64::from),
        }
    }
}

/// One item of a shadow's queue.
pub enum Item<E> {
    /// What the live path saw.
    Live(E),
    /// The owner's call, and where its answer goes (none for a write).
    Owner(OwnerCall, Option<std::sync::mpsc::Sender<Result<i64, GraftError>>>),
}

impl<E> Item<E> {
    /// The live event; an owner's call is answered here, on `shadow`.
    pub fn live<G: GraftPoint>(self, shadow: &Shadow<G>) -> Option<E> {
        match self {
            Item::Live(e) => Some(e),
            Item::Owner(call, reply) => {
                let answer = call.apply(shadow);
                match reply {
                    Some(reply) => {
                        let _ = reply.send(answer);
                    }
                    None => {
                        if let Err(e) = answer {
                            shadow.owner_failed(&e);
                        }
                    }
                }
                None
            }
        }
    }
}

/// The shadow's side of its queue. It looks for items now and then rather than sleep on the
/// queue: a thread asleep on a channel is woken by every send, a system call on the live path
/// per access (it made E4's query 20% slower), where a thread that sleeps by the clock costs the
/// live side one atomic check. The sleep grows while the queue stays empty.
pub struct Drain<E>(Receiver<Item<E>>);

/// The shortest and longest pause of a shadow's thread between looks at an empty queue.
const POLL_MIN: std::time::Duration = std::time::Duration::from_micros(100);
const POLL_MAX: std::time::Duration = std::time::Duration::from_millis(5);

impl<E> Drain<E> {
    /// The next item; `None` once the queue is closed and empty.
    pub fn next(&self) -> Option<Item<E>> {
        let mut pause = POLL_MIN;
        loop {
            match self.0.try_recv() {
                Ok(item) => return Some(item),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(POLL_MAX);
                }
            }
        }
    }
}

/// What the live path feeds a shadow's thread through a bounded queue, and the report the
/// thread keeps. The live side never waits: a full queue counts a drop.
pub struct Fed<E, R: Report> {
    feed: Mutex<Option<SyncSender<Item<E>>>>,
    drops: AtomicU64,
    report: Arc<Mutex<R>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The queue's most memory, charged to the shadow's owner as graft memory.
    _charge: Option<vino_account::Charge>,
}

impl<E: Send + 'static, R: Report> Fed<E, R> {
    /// Starts the thread `name` running `body` on the queue (of `queue` items, each at most
    /// `item_bytes` with what it points to) and the report. What a full queue holds is charged
    /// to `account` as graft memory.
    pub fn start(
        name: String,
        queue: usize,
        item_bytes: usize,
        account: Option<&Arc<vino_account::Account>>,
        report: R,
        body: impl FnOnce(Drain<E>, Arc<Mutex<R>>) + Send + 'static,
    ) -> Result<Fed<E, R>, LoadError> {
        let queue = queue.max(1);
        let most = (queue as u64).saturating_mul(item_bytes as u64);
        let charge = match account {
            Some(a) => Some(a.charge(vino_account::Resource::GraftMemory, most)?),
            None => None,
        };
        let (feed, drain) = sync_channel(queue);
        let report = Arc::new(Mutex::new(report));
        let shared = report.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(Drain(drain), shared))
            .map_err(|e| LoadError::Start(format!("starting the shadow's thread: {e}")))?;
        Ok(Fed {
            feed: Mutex::new(Some(feed)),
            drops: AtomicU64::new(0),
            report,
            thread: Mutex::new(Some(thread)),
            _charge: charge,
        })
    }

    pub fn offer(&self, item: E) {
        let feed = self.feed.lock();
        let Some(feed) = feed.as_ref() else { return };
        if let Err(TrySendError::Full(_)) = feed.try_send(Item::Live(item)) {
            self.drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Passes the owner's call to the candidate, after what the live path offered before it,
    /// and waits for the answer (the owner waits for its own shadow, never the live path).
    pub fn owner(&self, call: OwnerCall) -> Result<i64, GraftError> {
        let gone = || GraftError::NotLoaded("the shadow (it was stopped)".into());
        let feed = self.feed.lock().clone().ok_or_else(gone)?;
        if let OwnerCall::Write { .. } = call {
            feed.send(Item::Owner(call, None)).map_err(|_| gone())?;
            return Ok(0);
        }
        let (reply, answer) = std::sync::mpsc::channel();
        feed.send(Item::Owner(call, Some(reply))).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    pub fn running(&self) -> bool {
        self.feed.lock().is_some()
    }

    pub fn report(&self) -> R {
        let mut r = self.report.lock().clone();
        r.set_queue_drops(self.drops.load(Ordering::Relaxed));
        r
    }

    /// Closes the queue and waits for the thread to drain it.
    pub fn stop(&self) -> R {
        self.feed.lock().take();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.report()
    }
}

impl<E, R: Report> Drop for Fed<E, R> {
    fn drop(&mut self) {
        // The thread ends once it has drained what was offered.
        self.feed.get_mut().take();
    }
}
