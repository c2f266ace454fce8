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
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

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
    /// Time the shadow's thread was held back to keep under its share of a core
    /// ([`TRY_CPU_SHARE`]); what was offered meanwhile waited in the queue, or was dropped.
    pub held_back_ms: u64,
    /// The kernel chose how many decisions to offer ([`Sampler`]), not the owner.
    pub sample_auto: bool,
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
            held_back_ms: 0,
            sample_auto: false,
            dropped: shadow.dropped().map(str::to_string),
            last_error: stats.last_error,
        }
    }
}

/// A shadow's report: the counts every one carries, and the sampling rate of those that
/// follow 1 in N decisions.
pub trait Report: Clone + Send + 'static {
    fn counts(&mut self) -> &mut ShadowCounts;
    /// Decisions are offered 1 in `every` (shadows that sample decisions keep it).
    fn set_sample(&mut self, every: u32) {
        let _ = every;
    }
}

/// What a shadow judged by agreement with the live decision reports besides its model's own
/// measures (the disk queue's, the lock grants', the scheduler's): decisions followed (1 in
/// `sample` of the live ones), those the candidate made alike, and the counts every shadow
/// carries. Flattened into each report, so the fields read the same in all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Agreement {
    pub followed: u64,
    pub agreed: u64,
    pub sample: u32,
    #[serde(flatten)]
    pub shadow: ShadowCounts,
}

impl Agreement {
    /// Agreement at 1 in `sample` decisions, none followed yet.
    pub fn sampled(sample: Option<u32>) -> Agreement {
        Agreement {
            sample: sample.unwrap_or(1).max(1),
            ..Agreement::default()
        }
    }

    /// One more decision followed, alike or not.
    pub fn follow(&mut self, alike: bool) {
        self.followed += 1;
        self.agreed += u64::from(alike);
    }
}

/// A report judged by agreement: [`Report`] keeps its counts and sampling rate in its
/// [`Agreement`].
pub trait Agreed: Clone + Send + 'static {
    fn agreement(&mut self) -> &mut Agreement;
}

impl<T: Agreed> Report for T {
    fn counts(&mut self) -> &mut ShadowCounts {
        &mut self.agreement().shadow
    }
    fn set_sample(&mut self, every: u32) {
        self.agreement().sample = every;
    }
}

/// The most of one core a shadow's thread may use, measured over each [`PACE_WINDOW`]; past it
/// the thread is held back until the window ends (the queue fills meanwhile, then drops). The
/// candidate's and its ghost's work is its owner's, on a thread of the kernel's: without a bound
/// one user's shadow could take a core from every other user.
pub const TRY_CPU_SHARE: f64 = 0.25;
/// The window over which a shadow's share of a core is measured and held.
pub const PACE_WINDOW: Duration = Duration::from_millis(50);
/// The rarest sampling the kernel chooses: 1 decision in this many.
pub const SAMPLE_MAX: u32 = 1 << 12;

/// How many of the live path's decisions a shadow is offered: 1 in `every`, set by the owner or
/// chosen by the kernel. The kernel's choice keeps the shadow's thread under
/// [`TRY_CPU_SHARE`]: it offers half as many after a window the thread was busy for most of its
/// share, and twice as many (down to all) after one it used under a quarter of it. The live
/// path's own cost is a counter and a queue send per decision offered, whatever the rate.
pub struct Sampler {
    every: AtomicU32,
    seen: AtomicU64,
    auto: bool,
    held_ns: AtomicU64,
}

impl Sampler {
    /// 1 in `sample` decisions; `None`: the kernel chooses, starting with all.
    pub fn new(sample: Option<u32>) -> Sampler {
        Sampler {
            every: AtomicU32::new(sample.unwrap_or(1).max(1)),
            seen: AtomicU64::new(0),
            auto: sample.is_none(),
            held_ns: AtomicU64::new(0),
        }
    }

    /// Whether the live path's next decision is offered (never waits).
    pub fn take(&self) -> bool {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        n.is_multiple_of(u64::from(self.every()))
    }

    pub fn every(&self) -> u32 {
        self.every.load(Ordering::Relaxed)
    }

    pub fn auto(&self) -> bool {
        self.auto
    }

    /// After a window in which the thread was busy for `share` of it.
    fn adapt(&self, share: f64) {
        if !self.auto {
            return;
        }
        let every = self.every();
        let next = if share > 0.8 * TRY_CPU_SHARE {
            (every * 2).min(SAMPLE_MAX)
        } else if share < TRY_CPU_SHARE / 4.0 {
            (every / 2).max(1)
        } else {
            every
        };
        self.every.store(next, Ordering::Relaxed);
    }
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
/// live side one atomic check. The sleep grows while the queue stays empty. It also paces the
/// thread: the time between handing out an item and being asked for the next is the shadow's
/// work, held under [`TRY_CPU_SHARE`] of each [`PACE_WINDOW`].
pub struct Drain<E> {
    queue: Receiver<Item<E>>,
    sampler: Arc<Sampler>,
    window: Instant,
    busy: Duration,
    handed: Option<Instant>,
}

/// The shortest and longest pause of a shadow's thread between looks at an empty queue.
const POLL_MIN: Duration = Duration::from_micros(100);
const POLL_MAX: Duration = Duration::from_millis(5);

impl<E> Iterator for Drain<E> {
    type Item = Item<E>;

    /// The next item; `None` once the queue is closed and empty.
    fn next(&mut self) -> Option<Item<E>> {
        self.pace();
        let mut pause = POLL_MIN;
        loop {
            match self.queue.try_recv() {
                Ok(item) => {
                    self.handed = Some(Instant::now());
                    return Some(item);
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(POLL_MAX);
                }
            }
        }
    }
}

impl<E> Drain<E> {
    /// Counts the work on the item handed out last; past the share, waits out the window.
    fn pace(&mut self) {
        let now = Instant::now();
        if let Some(t) = self.handed.take() {
            self.busy += now - t;
        }
        let mut elapsed = now - self.window;
        let budget = PACE_WINDOW.mul_f64(TRY_CPU_SHARE);
        if self.busy > budget && elapsed < PACE_WINDOW {
            let rest = PACE_WINDOW - elapsed;
            std::thread::sleep(rest);
            self.sampler
                .held_ns
                .fetch_add(rest.as_nanos() as u64, Ordering::Relaxed);
            elapsed = PACE_WINDOW;
        }
        if elapsed >= PACE_WINDOW {
            self.sampler.adapt(self.busy.as_secs_f64() / elapsed.as_secs_f64());
            self.window = Instant::now();
            self.busy = Duration::ZERO;
        }
    }
}

/// What the live path feeds a shadow's thread through a bounded queue, and the report the
/// thread keeps. The live side never waits: a full queue counts a drop.
pub struct Fed<E, R: Report> {
    feed: Mutex<Option<SyncSender<Item<E>>>>,
    drops: AtomicU64,
    report: Arc<Mutex<R>>,
    sampler: Arc<Sampler>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The queue's most memory, charged to the shadow's owner as graft memory.
    _charge: Option<vino_account::Charge>,
}

impl<E: Send + 'static, R: Report> Fed<E, R> {
    /// Starts the thread `name` running `body` on the queue (of `queue` items, each at most
    /// `item_bytes` with what it points to) and the report, offered what `sampler` takes. What
    /// a full queue holds is charged to `account` as graft memory.
    pub fn start(
        name: String,
        queue: usize,
        item_bytes: usize,
        account: Option<&Arc<vino_account::Account>>,
        sampler: Sampler,
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
        let sampler = Arc::new(sampler);
        let drain = Drain {
            queue: drain,
            sampler: sampler.clone(),
            window: Instant::now(),
            busy: Duration::ZERO,
            handed: None,
        };
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(drain, shared))
            .map_err(|e| LoadError::Start(format!("starting the shadow's thread: {e}")))?;
        Ok(Fed {
            feed: Mutex::new(Some(feed)),
            drops: AtomicU64::new(0),
            report,
            sampler,
            thread: Mutex::new(Some(thread)),
            _charge: charge,
        })
    }

    /// Offers a live event (never waits: a full queue counts a drop). True if it was queued.
    pub fn offer(&self, item: E) -> bool {
        let feed = self.feed.lock();
        let Some(feed) = feed.as_ref() else { return false };
        match feed.try_send(Item::Live(item)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.drops.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
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

    /// Whether the live path's next decision is to be offered (see [`Sampler`]).
    pub fn take(&self) -> bool {
        self.sampler.take()
    }

    pub fn running(&self) -> bool {
        self.feed.lock().is_some()
    }

    pub fn report(&self) -> R {
        let mut r = self.report.lock().clone();
        r.set_sample(self.sampler.every());
        let counts = r.counts();
        counts.queue_drops = self.drops.load(Ordering::Relaxed);
        counts.held_back_ms = self.sampler.held_ns.load(Ordering::Relaxed) / 1_000_000;
        counts.sample_auto = self.sampler.auto();
        r
    }

    /// Closes the queue without waiting: the thread ends once it has drained it (what it
    /// followed goes with the live object it followed).
    pub fn close(&self) {
        self.feed.lock().take();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Counted {
        counts: ShadowCounts,
        sample: u32,
        seen: u64,
    }

    impl Report for Counted {
        fn counts(&mut self) -> &mut ShadowCounts {
            &mut self.counts
        }
        fn set_sample(&mut self, every: u32) {
            self.sample = every;
        }
    }

    #[test]
    fn a_fixed_sample_takes_one_in_n() {
        let s = Sampler::new(Some(4));
        let taken: Vec<bool> = (0..8).map(|_| s.take()).collect();
        assert_eq!(taken, [true, false, false, false, true, false, false, false]);
        s.adapt(1.0);
        assert_eq!(s.every(), 4, "the owner's choice stands");
    }

    #[test]
    fn the_kernels_sample_follows_the_shadows_share() {
        let s = Sampler::new(None);
        assert_eq!(s.every(), 1, "all, until the shadow is too busy");
        s.adapt(TRY_CPU_SHARE);
        s.adapt(1.0);
        assert_eq!(s.every(), 4);
        for _ in 0..100 {
            s.adapt(1.0);
        }
        assert_eq!(s.every(), SAMPLE_MAX);
        s.adapt(TRY_CPU_SHARE / 2.0);
        assert_eq!(s.every(), SAMPLE_MAX, "between a quarter and most of its share: kept");
        for _ in 0..100 {
            s.adapt(0.0);
        }
        assert_eq!(s.every(), 1);
    }

    /// A shadow that works longer on each item than its share allows is held back, the queue
    /// drops the rest, and the kernel offers it fewer decisions.
    #[test]
    fn a_busy_shadow_is_held_back_and_sampled() {
        let fed: Fed<u32, Counted> = Fed::start(
            "test-shadow".into(),
            4,
            8,
            None,
            Sampler::new(None),
            Counted::default(),
            |drain, report| {
                for _ in drain {
                    let t = Instant::now();
                    while t.elapsed() < PACE_WINDOW / 2 {
                        std::hint::spin_loop();
                    }
                    report.lock().seen += 1;
                }
            },
        )
        .unwrap();
        let until = Instant::now() + PACE_WINDOW * 8;
        let mut offered = 0u64;
        while Instant::now() < until {
            if fed.take() {
                fed.offer(0);
                offered += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let r = fed.stop();
        assert!(r.counts.held_back_ms > 0, "never held back");
        assert!(r.sample > 1, "the kernel kept offering every decision");
        assert!(r.counts.sample_auto);
        assert_eq!(
            r.seen + r.counts.queue_drops,
            offered,
            "every offer is taken or counted"
        );
    }
}
