//! CPU shares between users: whose work the kernel's threads run first.
//!
//! The daemon serves each connection on its own thread, and event grafts and compiles on shared
//! ones; left alone, Linux shares the cores among those threads, so a user with more threads
//! busy (four processes hammering a lock whose graft spins, say) gets more of the machine, and
//! everyone else's round trips wait for time slices. Here the kernel weighs users, not threads,
//! with Linux's nice values as the weights, while more than one user has work:
//! - a user keeping `n` threads busy runs each at about 1/`n` of a nice-0 thread's weight (a
//!   nice step is a factor of 1.25), so it weighs about one thread however many it keeps busy;
//! - a user whose work took more than its share of the cores lately (over about 100 ms; the
//!   cores divided among the users with work, and at least `heavy_percent` of one core) is
//!   *heavy*: its threads run at nice 19 by default (about 1/70 of a nice-0 thread's weight), so
//!   a lighter user's request runs as soon as it arrives. A user within its share is never
//!   heavy, however busy: a client in a tight loop of requests keeps one core busy between
//!   itself and its connection, and lowering it for that would make it wait for the heavier;
//! - a heavy user's connections also take turns ([`Worker::take_turn`]): no more of them serve
//!   it at once than its share of the cores, each waiting before its request holds anything.
//!   A lowered thread preempted inside one of the kernel's locks makes everyone wait for it;
//!   a turn waited for outside them does not.
//!
//! When its use falls back (or nobody else has work) its threads return to nice 0. Root's work
//! is never lowered.
//!
//! How it is measured. Reading a thread's CPU clock is a system call (over a microsecond on a
//! virtual machine), too dear for every request; instead a sampler thread reads, every
//! [`TICK`], the clocks of the threads that worked since the last tick and charges each
//! delta to the user that thread served. A thread polling for its client's next message
//! reports the time it spent so ([`Worker::spun`]), which is not charged: polling only uses a
//! core nobody else wants. The sampler sleeps while no registered thread works. This is the
//! scheduler-tick accounting of a kernel, with Linux's nice values as the weights.
//!
//! Lowering a thread's priority is always allowed; raising it back needs `CAP_SYS_NICE` (or an
//! `RLIMIT_NICE` of 20). A daemon without either measures but never lowers (it could not undo it).

use crate::Account;
use parking_lot::{Condvar, Mutex};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// How often the sampler reads the working threads' CPU clocks.
pub const TICK: Duration = Duration::from_millis(10);
/// Weight of the newest tick in a user's recent rate (a time constant of about ten ticks).
const NEW_WEIGHT: u64 = 10; // percent
/// Rates are kept in hundredths of a percent of one core.
const FULL_CORE: u64 = 10_000;
/// From this rate (0.01% of a core: any work in the last few hundred milliseconds) a user
/// counts as having work, and others must make way for it.
const ACTIVE: u64 = 1;
/// CPU in one tick (5% of it) that makes a thread count as busy for its user's weight.
const BUSY_THREAD_NS: u64 = 500_000;
/// Longest a heavy user's work waits for its turn (see `Worker::take_turn`).
const MAX_TURN_WAIT: Duration = Duration::from_millis(10);
/// Ticks with no work before the sampler sleeps until some thread works again.
const IDLE_TICKS: u32 = 100;

/// How users share the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuConfig {
    /// The nice value (1..=19) a heavy user's work runs at; 0 turns lowering off.
    pub heavy_nice: i32,
    /// Percent of one core a user's work may always take, averaged over about 100 ms, while
    /// another user also has work, before the user counts as heavy; above it, a user is heavy
    /// only once it takes more than its share of the cores.
    pub heavy_percent: u32,
    /// The cores the users share (the machine's, as this process may use them).
    pub cores: u32,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig {
            heavy_nice: 19,
            heavy_percent: 50,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        }
    }
}

/// The CPU shares of one kernel's users (a handle: clones share them).
#[derive(Clone)]
pub struct CpuShares {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CpuShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuShares")
            .field("config", &self.inner.config)
            .field("lowering", &self.inner.lowering)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: CpuConfig,
    /// False if the configuration turns lowering off or this process could not raise a
    /// lowered thread again.
    lowering: bool,
    workers: Mutex<Vec<Arc<Shared>>>,
    /// The sampler thread, joined when the shares go (so no thread outlives its kernel).
    sampler: OnceLock<Option<std::thread::JoinHandle<()>>>,
    /// Where the sampler waits between ticks; shared with it, as it holds no strong reference
    /// to `Inner` while it waits.
    wake: Arc<Wake>,
    /// Users with work lately (as of the sampler's last tick).
    active_users: AtomicUsize,
    /// How many threads may serve one heavy user at once: its share of the cores, at least one.
    heavy_threads: AtomicUsize,
}

/// The sampler's pauses: between ticks, and while no thread works (until the first to work
/// again wakes it); ended at once when the shares go.
#[derive(Default)]
struct Wake {
    asleep: AtomicBool,
    /// True once the shares have gone: the sampler returns.
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Drop for Inner {
    fn drop(&mut self) {
        *self.wake.stopped.lock() = true;
        self.wake.cv.notify_all();
        // Not on the sampler itself (its tick may hold the last reference).
        if let Some(Some(sampler)) = self.sampler.take()
            && sampler.thread().id() != std::thread::current().id()
        {
            let _ = sampler.join();
        }
    }
}

/// A registered thread, as the sampler sees it.
struct Shared {
    tid: i32,
    clock: Option<os::Clock>,
    /// The user this thread works for now.
    serving: Mutex<Option<Arc<Account>>>,
    /// The thread's nice value; changed only under this lock, so the sampler and the thread
    /// itself cannot leave it different from what they wrote.
    nice: Mutex<i32>,
    /// Set when the thread starts work, cleared by the sampler: worked since the last tick.
    touched: AtomicBool,
    busy: AtomicBool,
    /// Nanoseconds spent polling for a client's next message (not charged to anyone).
    spun_ns: AtomicU64,
    /// The sampler's last readings of the CPU clock and of `spun_ns`.
    last: Mutex<(u64, u64)>,
}

impl Shared {
    /// Sets the thread's nice value to `want` (its user's, see [`user_nice`]).
    fn settle(&self, want: i32) {
        let mut nice = self.nice.lock();
        if *nice != want && os::set_nice(self.tid, want) {
            *nice = want;
        }
    }
}

impl CpuShares {
    pub fn new(config: CpuConfig) -> CpuShares {
        let lowering = config.heavy_nice > 0 && os::may_raise_again();
        CpuShares {
            inner: Arc::new(Inner {
                config,
                lowering,
                workers: Mutex::new(Vec::new()),
                sampler: OnceLock::new(),
                wake: Arc::default(),
                active_users: AtomicUsize::new(0),
                heavy_threads: AtomicUsize::new(1),
            }),
        }
    }

    /// True if heavy users' threads are lowered (not only measured).
    pub fn lowering(&self) -> bool {
        self.inner.lowering
    }

    /// True if more than one user has had work lately: the cores are shared, and a thread
    /// should not hold one polling for its client.
    pub fn shared(&self) -> bool {
        self.inner.active_users.load(Ordering::Relaxed) > 1
    }

    /// Registers the calling thread as one that works for users; it is measured until the
    /// returned [`Worker`] drops (on this thread).
    pub fn register(&self) -> Worker {
        self.inner
            .sampler
            .get_or_init(|| spawn_sampler(Arc::downgrade(&self.inner), self.inner.wake.clone()));
        let shared = Arc::new(Shared {
            tid: os::tid(),
            clock: os::Clock::of_this_thread(),
            serving: Mutex::new(None),
            nice: Mutex::new(0),
            touched: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            spun_ns: AtomicU64::new(0),
            last: Mutex::new((0, 0)),
        });
        if let Some(c) = &shared.clock {
            *shared.last.lock() = (c.read_ns(), 0);
        }
        self.inner.workers.lock().push(shared.clone());
        Worker {
            inner: self.inner.clone(),
            shared,
            serving: RefCell::new(None),
            settled: Cell::new(-1),
            turn: RefCell::new(None),
        }
    }
}

/// The calling thread's registration: tell it whom the thread works for and when.
pub struct Worker {
    inner: Arc<Inner>,
    shared: Arc<Shared>,
    /// The thread's own copy of whom it serves (read on every request without a lock).
    serving: RefCell<Option<Arc<Account>>>,
    /// The nice value the thread last settled on for its user (-1: not yet).
    settled: Cell<i32>,
    /// The heavy user whose turn this thread holds (see [`Worker::take_turn`]).
    turn: RefCell<Option<Arc<Account>>>,
}

impl Worker {
    /// The thread works for `user` (a user's account) from now on.
    pub fn serve(&self, user: &Arc<Account>) {
        let same = self.serving.borrow().as_ref().is_some_and(|u| Arc::ptr_eq(u, user));
        if !same {
            *self.serving.borrow_mut() = Some(user.clone());
            *self.shared.serving.lock() = Some(user.clone());
            self.settled.set(-1);
        }
        self.settle();
    }

    /// The thread starts a piece of work (a request).
    pub fn begin(&self) {
        self.shared.touched.store(true, Ordering::Relaxed);
        self.shared.busy.store(true, Ordering::Relaxed);
        let wake = &self.inner.wake;
        if wake.asleep.load(Ordering::Relaxed) {
            // Under the sampler's lock: it is either not yet waiting (and sees the flag
            // cleared) or waiting (and is woken); no wake-up is lost between the two.
            let _g = wake.stopped.lock();
            wake.asleep.store(false, Ordering::Relaxed);
            wake.cv.notify_one();
        }
        self.settle();
    }

    /// The thread's piece of work ended; it waits for the next.
    pub fn end(&self) {
        self.shared.busy.store(false, Ordering::Relaxed);
        self.give_turn();
    }

    /// Runs `wait`, a wait of unknown length inside a piece of work (for a lock, for events),
    /// without holding the user's turn: the wait may be for another of the user's threads.
    pub fn waiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let held = self.turn.borrow().is_some();
        self.give_turn();
        let result = wait();
        if held {
            self.take_turn();
        }
        result
    }

    /// Gives the user's turn back for the rest of this piece of work (which now only waits:
    /// for a program running on the CPU scheduler, say); [`Worker::end`] does so too.
    pub fn give_turn(&self) {
        if let Some(user) = self.turn.borrow_mut().take() {
            let (serving, cv) = &user.cpu_serving;
            *serving.lock() -= 1;
            cv.notify_one();
        }
    }

    /// Waits, if the thread's user is heavy, until fewer threads serve it than its share of
    /// the cores; called after [`Worker::begin`] by a thread that serves only this user's
    /// requests (a connection's), before it takes anything others may wait for. A user with many
    /// connections busy then cannot keep every core, and the kernel's locks with them, from the
    /// others; lowering its priority alone does not do that, since a lowered thread preempted
    /// inside a lock makes everyone wait for it. The turn goes back at [`Worker::end`] and
    /// during [`Worker::waiting`]. The wait is bounded ([`MAX_TURN_WAIT`]): a turn held by a
    /// thread blocked on the user's own other work delays that user, never deadlocks it.
    /// Threads shared by all users (the event threads) never wait here.
    pub fn take_turn(&self) {
        self.turn_within(MAX_TURN_WAIT);
    }

    /// As [`Worker::take_turn`] without waiting, for threads shared by all users (the event
    /// threads): false if the user is heavy and all its turns are taken, and the thread should
    /// serve someone else first.
    pub fn try_take_turn(&self) -> bool {
        self.turn_within(Duration::ZERO)
    }

    /// Takes the user's turn if it is heavy, waiting up to `wait` for one: true once the thread
    /// may go on (a turn taken, or none needed, or the wait over); false only with no wait.
    fn turn_within(&self, wait: Duration) -> bool {
        // One load for a user that is not heavy: this runs on every request.
        let user = match self.serving.borrow().as_ref() {
            Some(u) if u.cpu_heavy() && self.turn.borrow().is_none() => u.clone(),
            _ => return true,
        };
        let most = self.inner.heavy_threads.load(Ordering::Relaxed);
        let (serving, cv) = &user.cpu_serving;
        let mut n = serving.lock();
        let until = std::time::Instant::now() + wait;
        while *n >= most {
            if wait.is_zero() {
                return false;
            }
            if cv.wait_until(&mut n, until).timed_out() {
                break;
            }
        }
        *n += 1;
        drop(n);
        *self.turn.borrow_mut() = Some(user);
        true
    }

    /// The thread spent `d` of its CPU polling for its client's next message (not its wall
    /// time: see `vino_proto::poll_until_readable`).
    pub fn spun(&self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.shared.spun_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Lowers or restores the thread if its user's state changed since it last looked: one
    /// atomic load when nothing changed.
    fn settle(&self) {
        if !self.inner.lowering {
            return;
        }
        let want = self.serving.borrow().as_ref().map_or(0, |u| u.cpu_nice());
        if self.settled.replace(want) != want {
            self.shared.settle(want);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.end();
        self.inner.workers.lock().retain(|w| !Arc::ptr_eq(w, &self.shared));
        // A pooled thread may live on: it leaves at nice 0.
        self.shared.settle(0);
    }
}

fn spawn_sampler(inner: Weak<Inner>, wake: Arc<Wake>) -> Option<std::thread::JoinHandle<()>> {
    // Without the sampler nobody counts as heavy: shares are simply not enforced.
    std::thread::Builder::new()
        .name("vino-cpu-shares".into())
        .spawn(move || sampler(inner, &wake))
        .ok()
}

/// Every [`TICK`]: charges the working threads' CPU to their users, updates each user's recent
/// rate and heaviness, and re-settles the threads of users whose state changed.
fn sampler(inner: Weak<Inner>, wake: &Wake) {
    let mut tracked: Vec<Arc<Account>> = Vec::new();
    let mut idle_ticks = 0u32;
    loop {
        {
            let mut stopped = wake.stopped.lock();
            if idle_ticks >= IDLE_TICKS {
                // Until some thread works again (begin wakes it), or a second has passed (a
                // thread that began just before the flag was set did not wake it).
                wake.asleep.store(true, Ordering::Relaxed);
                if !*stopped {
                    wake.cv.wait_for(&mut stopped, Duration::from_secs(1));
                }
                wake.asleep.store(false, Ordering::Relaxed);
                idle_ticks = 0;
            } else if !*stopped {
                wake.cv.wait_for(&mut stopped, TICK);
            }
            if *stopped {
                return;
            }
        }
        let Some(inner) = inner.upgrade() else { return };
        let workers = inner.workers.lock().clone();
        let mut worked = false;
        for w in &workers {
            let was_touched = w.touched.swap(false, Ordering::Relaxed);
            if !was_touched && !w.busy.load(Ordering::Relaxed) {
                continue;
            }
            worked = true;
            let Some(clock) = &w.clock else { continue };
            let (cpu, spun) = (clock.read_ns(), w.spun_ns.load(Ordering::Relaxed));
            let used = {
                let mut last = w.last.lock();
                let used = cpu.saturating_sub(last.0).saturating_sub(spun.saturating_sub(last.1));
                *last = (cpu, spun);
                used
            };
            let Some(user) = w.serving.lock().clone() else { continue };
            user.cpu_tick_ns.fetch_add(used, Ordering::Relaxed);
            user.cpu_work_ns.fetch_add(used, Ordering::Relaxed);
            if used >= BUSY_THREAD_NS {
                user.cpu_tick_threads.fetch_add(1, Ordering::Relaxed);
            }
            if !tracked.iter().any(|u| Arc::ptr_eq(u, &user)) {
                tracked.push(user);
            }
        }
        let (changed, active) = update_rates(&mut tracked, &inner.config);
        inner.active_users.store(active, Ordering::Relaxed);
        let share = inner.config.cores.max(1) as usize / active.max(1);
        inner.heavy_threads.store(share.max(1), Ordering::Relaxed);
        if changed && inner.lowering {
            for w in &workers {
                let want = w.serving.lock().as_ref().map_or(0, |u| u.cpu_nice());
                w.settle(want);
            }
        }
        idle_ticks = if worked || !tracked.is_empty() {
            0
        } else {
            idle_ticks + 1
        };
    }
}

/// Folds each tracked user's CPU of the last tick into its recent rate, decides who is heavy
/// (more than its share of the cores and more than `heavy_percent` of one core, while some
/// other user is active; hysteresis: it stays heavy until below three quarters of that) and
/// sets each user's nice value ([`user_nice`]). Users with no recent work are dropped. Returns whether any user's nice value changed, and
/// how many users have work.
fn update_rates(tracked: &mut Vec<Arc<Account>>, config: &CpuConfig) -> (bool, usize) {
    let heavy_percent = config.heavy_percent;
    let tick_ns = TICK.as_nanos() as u64;
    for u in tracked.iter() {
        let used = u.cpu_tick_ns.swap(0, Ordering::Relaxed);
        let now = (used.saturating_mul(FULL_CORE) / tick_ns).min(FULL_CORE * 64);
        let old = u.cpu_rate.load(Ordering::Relaxed);
        let rate = (old * (100 - NEW_WEIGHT) + now * NEW_WEIGHT) / 100;
        u.cpu_rate.store(rate, Ordering::Relaxed);
    }
    let active = tracked
        .iter()
        .filter(|u| u.cpu_rate.load(Ordering::Relaxed) >= ACTIVE)
        .count();
    // The cores divided among the users with work (the share is what lets a busy but fair
    // user keep its priority), and never under the configured floor.
    let share = FULL_CORE * u64::from(config.cores.max(1)) / active.max(1) as u64;
    let enter = (u64::from(heavy_percent) * 100).max(share);
    let mut changed = false;
    for u in tracked.iter() {
        let rate = u.cpu_rate.load(Ordering::Relaxed);
        let others = active - usize::from(rate >= ACTIVE);
        let was = u.cpu_heavy();
        let heavy = !u.may_use_reserve && others > 0 && if was { rate * 4 >= enter * 3 } else { rate > enter };
        u.cpu_heavy.store(heavy, Ordering::Relaxed);
        let threads = u.cpu_tick_threads.swap(0, Ordering::Relaxed);
        let nice = user_nice(threads, heavy, others > 0 && !u.may_use_reserve, config);
        if u.cpu_nice.swap(nice, Ordering::Relaxed) != nice {
            changed = true;
        }
    }
    tracked.retain(|u| u.cpu_rate.load(Ordering::Relaxed) > 0 || u.cpu_heavy());
    (changed, active)
}

/// The nice value of a user's threads: each of its `threads` busy threads gets about
/// 1/`threads` of one nice-0 thread's weight (a nice step is a factor of 1.25 in weight), so a
/// user weighs about one thread however many it keeps busy; a heavy user's threads get
/// `heavy_nice`. Only while `shared` (another user has work; root's threads are never lowered).
fn user_nice(threads: u64, heavy: bool, shared: bool, config: &CpuConfig) -> i32 {
    if !shared || config.heavy_nice == 0 {
        return 0;
    }
    if heavy {
        return config.heavy_nice;
    }
    let mut nice = 0;
    let mut weight = 1.0f64;
    while weight * 1.25 <= threads as f64 && nice < config.heavy_nice {
        weight *= 1.25;
        nice += 1;
    }
    nice
}

/// A thread's CPU-time clock ([`ThreadClock::of_this_thread`], [`ThreadClock::read_ns`]).
pub use os::Clock as ThreadClock;

/// Lowers the calling thread to the lowest CPU priority (nice 19), for the kernel's background
/// work that should take only CPU time others leave; false if Linux refused.
pub fn lower_this_thread() -> bool {
    os::set_nice(os::tid(), 19)
}

/// The few system calls this needs.
#[allow(unsafe_code)]
mod os {
    /// The calling thread's id.
    pub fn tid() -> i32 {
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::gettid() }
    }

    /// Sets thread `tid`'s nice value; false if refused.
    pub fn set_nice(tid: i32, nice: i32) -> bool {
        // SAFETY: plain system call on integers; a wrong tid is an error return, not UB.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
    }

    /// True if this process may lower a thread's priority and raise it back (root, or
    /// `CAP_SYS_NICE`, or `RLIMIT_NICE` 20): tried on a thread of its own.
    pub fn may_raise_again() -> bool {
        std::thread::spawn(|| {
            let me = tid();
            set_nice(me, 1) && set_nice(me, 0)
        })
        .join()
        .unwrap_or(false)
    }

    /// A thread's CPU-time clock, readable from any thread of the process (the daemon reads
    /// the clocks of the threads running programs for `vino ps` too).
    #[derive(Debug, Clone, Copy)]
    pub struct Clock(libc::clockid_t);

    impl Clock {
        pub fn of_this_thread() -> Option<Clock> {
            let mut id: libc::clockid_t = 0;
            // SAFETY: `id` is a valid out-pointer; pthread_self is the calling thread.
            let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &raw mut id) };
            (rc == 0).then_some(Clock(id))
        }

        /// Nanoseconds of CPU the thread has used; 0 if it has exited.
        pub fn read_ns(&self) -> u64 {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid out-pointer.
            if unsafe { libc::clock_gettime(self.0, &raw mut ts) } != 0 {
                return 0;
            }
            (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Accounts, LimitsConfig};
    use std::sync::atomic::AtomicI32;
    use std::time::Instant;

    fn nice_of(tid: i32) -> i32 {
        #[allow(unsafe_code)]
        // SAFETY: plain system call on integers.
        unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
        }
    }

    fn burn(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_user_over_its_share_is_lowered_and_restored_when_it_stops() {
        let accounts = Accounts::new(LimitsConfig::default());
        // One core between two users: the hog's whole core is twice its share.
        let shares = Arc::new(CpuShares::new(CpuConfig {
            cores: 1,
            ..CpuConfig::default()
        }));
        if !shares.lowering() {
            eprintln!("skipped: this process may not raise a lowered thread again");
            return;
        }
        let (hog, light) = (accounts.user(1000), accounts.user(1001));
        let stop = Arc::new(AtomicBool::new(false));
        let hog_tid = Arc::new(AtomicI32::new(0));
        let t = {
            let (shares, hog, stop, hog_tid) = (shares.clone(), hog.clone(), stop.clone(), hog_tid.clone());
            std::thread::spawn(move || {
                let w = shares.register();
                w.serve(&hog);
                hog_tid.store(os::tid(), Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    w.begin();
                    burn(Duration::from_millis(1));
                    w.end();
                }
            })
        };
        // The light user works a little (10% of a core): the hog is not alone.
        let w = shares.register();
        w.serve(&light);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !hog.cpu_heavy() && Instant::now() < deadline {
            w.begin();
            burn(Duration::from_millis(1));
            w.end();
            std::thread::sleep(Duration::from_millis(9));
        }
        assert!(
            hog.cpu_heavy(),
            "a user taking a whole core beside another user is heavy"
        );
        assert!(!light.cpu_heavy(), "the light user is not");
        let deadline = Instant::now() + Duration::from_secs(5);
        while nice_of(hog_tid.load(Ordering::Relaxed)) != 19 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            nice_of(hog_tid.load(Ordering::Relaxed)),
            19,
            "the hog's thread is lowered"
        );
        assert_eq!(nice_of(os::tid()), 0, "the light user's thread is not");
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while hog.cpu_heavy() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!hog.cpu_heavy(), "the hog's rate decays once it stops");
    }

    fn serving(user: &Account) -> usize {
        *user.cpu_serving.0.lock()
    }

    /// Runs `work` on another thread whose worker serves `user` and has begun a piece of work.
    fn on_thread(shares: &CpuShares, user: &Arc<Account>, work: impl FnOnce(&Worker) + Send) {
        std::thread::scope(|s| {
            s.spawn(|| {
                let w = shares.register();
                w.serve(user);
                w.begin();
                work(&w);
                w.end();
            });
        });
    }

    #[test]
    fn a_heavy_users_connections_take_turns_and_a_wait_gives_the_turn_back() {
        let accounts = Accounts::new(LimitsConfig::default());
        let shares = CpuShares::new(CpuConfig {
            cores: 1,
            ..CpuConfig::default()
        });
        // No sampler: the test says who is heavy.
        shares.inner.sampler.set(None).unwrap();
        let (heavy, light) = (accounts.user(1000), accounts.user(1001));
        heavy.cpu_heavy.store(true, Ordering::Relaxed);
        let first = shares.register();
        first.serve(&heavy);
        first.begin();
        first.take_turn();
        assert_eq!(serving(&heavy), 1, "the first thread holds the user's one turn");
        // A second connection of the same user waits for the turn; never past the bound.
        on_thread(&shares, &heavy, |second| {
            let asked = Instant::now();
            second.take_turn();
            assert!(asked.elapsed() >= MAX_TURN_WAIT, "it waited for the turn");
            assert_eq!(serving(&heavy), 2, "past the bound it goes anyway");
        });
        assert_eq!(serving(&heavy), 1);
        // A shared thread (an event thread) does not wait: it serves others.
        on_thread(&shares, &heavy, |shared| assert!(!shared.try_take_turn()));
        // A wait inside the work (a lock another of the user's threads holds) gives it back.
        first.waiting(|| assert_eq!(serving(&heavy), 0));
        assert_eq!(serving(&heavy), 1, "and takes it again after");
        first.end();
        assert_eq!(serving(&heavy), 0);
        // A turn handed over: the waiter goes as soon as the holder ends.
        first.begin();
        first.take_turn();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                on_thread(&shares, &heavy, |second| {
                    tx.send(()).unwrap();
                    second.take_turn();
                    assert_eq!(serving(&heavy), 1, "it went on the turn handed over");
                })
            });
            rx.recv().unwrap();
            first.end();
        });
        assert_eq!(serving(&heavy), 0);
        // A user that is not heavy never waits and holds no turn.
        on_thread(&shares, &light, |w| {
            w.take_turn();
            assert_eq!(serving(&light), 0);
        });
    }

    #[test]
    fn a_users_threads_weigh_together_about_one_thread() {
        let c = CpuConfig::default();
        let nices: Vec<i32> = [0, 1, 2, 4, 8, 64, 1000]
            .iter()
            .map(|&n| user_nice(n, false, true, &c))
            .collect();
        assert_eq!(nices, [0, 0, 3, 6, 9, 18, 19]);
        assert_eq!(user_nice(8, false, false, &c), 0, "alone: nothing to share");
        assert_eq!(user_nice(1, true, true, &c), 19, "heavy");
        let off = CpuConfig { heavy_nice: 0, ..c };
        assert_eq!(user_nice(8, true, true, &off), 0, "sharing turned off");
    }

    #[test]
    fn a_user_alone_is_never_heavy_and_root_never() {
        let config = CpuConfig {
            cores: 2,
            ..CpuConfig::default()
        };
        let accounts = Accounts::new(LimitsConfig::default());
        let (alone, root) = (accounts.user(1000), accounts.user(0));
        let mut tracked = vec![alone.clone()];
        for _ in 0..50 {
            alone.cpu_tick_ns.store(TICK.as_nanos() as u64, Ordering::Relaxed);
            update_rates(&mut tracked, &config);
        }
        assert!(!alone.cpu_heavy(), "alone on the machine: nobody to make way for");
        let other = accounts.user(1001);
        tracked.extend([root.clone(), other.clone()]);
        for _ in 0..50 {
            for u in [&alone, &root] {
                u.cpu_tick_ns.store(TICK.as_nanos() as u64, Ordering::Relaxed);
            }
            other.cpu_tick_ns.store(TICK.as_nanos() as u64 / 20, Ordering::Relaxed);
            update_rates(&mut tracked, &config);
        }
        assert!(alone.cpu_heavy());
        assert!(!root.cpu_heavy(), "root's work is never lowered");
        assert!(!other.cpu_heavy(), "5% of a core is under the share");
        for _ in 0..100 {
            update_rates(&mut tracked, &config);
        }
        assert!(!alone.cpu_heavy(), "heaviness decays with the rate");
    }
}
