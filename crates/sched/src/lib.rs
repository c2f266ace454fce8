//! VINO's CPU scheduler.
//!
//! VINO threads are the unit of CPU. A thread is a future (a VINO process's program runs as one:
//! wasmtime's async calls put it on a stack of its own and let it yield), and a fixed pool of
//! workers, one per core by default, runs them: each worker asks the policy which runnable thread
//! is next, polls it until it gives the worker back, and charges it the time. A thread gives its
//! worker back when its time slice ends (the program's epoch callback asks
//! [`ThreadCtx::slice_over`] and yields), when it yields, or when it waits for a timer
//! ([`ThreadCtx::sleep_until`]). A system call that blocks on the disk or a lock runs inside
//! [`in_kernel`]: if it outlasts two ticks, the ticker lets another worker take its place, so
//! the cores stay busy (the hand-off Go's runtime makes for a system call, done lazily so that
//! a call that does not block costs two atomic stores). A program blocked on a page fault that
//! needs I/O (a swap-in, a fault behind its memory's fault-around graft) is handed off the same
//! way: the pager, which sees the faulting OS thread's id, marks its worker ([`fault_waits`],
//! [`fault_served`]) and the ticker replaces it if the wait lasts.
//!
//! The policy ([`share`]) is proportional share with per-user currencies and donation; the
//! graftpoints ([`points`]) let a privileged graft choose among all runnable threads and a
//! process choose among its own. Whatever a graft decides, a thread that has waited longer than
//! the starvation cap runs next, so no graft can starve one.

pub mod points;
pub mod shadow;
pub mod share;

pub use points::{GIFTS_MAX, PickArgs, PickNext, PickThread, ThreadEnv, Timer, TimerArgs};
pub use share::{Candidate, DEFAULT_TICKETS, How, MAX_TICKETS, Pick, Pid, ShareError, State, Tid, Uid};

use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;
use shadow::SchedTry;
use share::Shares;
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use vino_clock::SharedClock;
use vino_graft::{Access, GraftSlot, Runtime};

/// How the scheduler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedConfig {
    /// Workers running threads at once; 0: one per core.
    pub workers: usize,
    /// Period of the ticker (preemption checks, timers, hand-offs).
    pub tick: Duration,
    /// A thread's time slice, in ticks.
    pub slice_ticks: u64,
    /// A runnable thread that has waited this long runs next, whatever the policy says.
    pub starvation_cap: Duration,
    /// Most extra workers started in place of ones blocked in the kernel.
    pub max_blocked: usize,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            workers: 0,
            tick: Duration::from_millis(1),
            slice_ticks: 5,
            starvation_cap: Duration::from_secs(1),
            max_blocked: 64,
        }
    }
}

/// The scheduler's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SchedStats {
    /// Threads given a worker.
    pub switches: u64,
    /// Of those, turns a donor gave its receiver.
    pub donated: u64,
    /// Turns decided by a graft on `sched.pick_next` against the default.
    pub graft_picks: u64,
    /// Threads run because they had waited past the starvation cap.
    pub starved: u64,
    /// Workers replaced while blocked in the kernel.
    pub handoffs: u64,
    pub spawned: u64,
    pub exited: u64,
    /// Ticket gifts of `sched.pick_thread` grafts made (`vino_tickets_give`), and refused when
    /// due (the receiver gone or another user's, the giver short of tickets).
    pub tickets_given: u64,
    pub gifts_refused: u64,
}

/// One thread, as `vino ps` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ThreadInfo {
    pub tid: Tid,
    pub pid: Pid,
    pub state: State,
    pub cpu_ns: u64,
}

/// Why a thread could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnError {
    NoSuchProcess(Pid),
    ShuttingDown,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::NoSuchProcess(p) => write!(f, "process {p} is not known to the scheduler"),
            SpawnError::ShuttingDown => f.write_str("the scheduler is shutting down"),
        }
    }
}

impl std::error::Error for SpawnError {}

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type TickHook = Arc<dyn Fn() + Send + Sync>;

struct Entry {
    /// The thread's future and its waker; `None` while a worker polls it (the worker holds
    /// both, so a switch clones nothing).
    future: Option<(BoxFuture, Waker)>,
    /// Woken while running: runnable again when its poll returns.
    notified: bool,
    /// Who pays for its current turn.
    charge: Pid,
    done: Arc<Done>,
}

struct TimerEntry {
    /// On the scheduler's clock.
    at: Duration,
    seq: u64,
}

impl PartialEq for TimerEntry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

struct SchedState {
    shares: Shares,
    entries: FxHashMap<Tid, Entry>,
    pick_thread: FxHashMap<Pid, Arc<GraftSlot<PickThread>>>,
    /// Candidates in shadow (`vino graft try`): at `sched.pick_next`, and at processes'
    /// `sched.pick_thread`.
    next_try: Option<Arc<SchedTry>>,
    thread_tries: FxHashMap<Pid, Arc<SchedTry>>,
    next_tid: Tid,
    /// Workers inside a poll (not counting ones handed off in the kernel).
    polling: usize,
    /// Worker threads started, and how many of them wait for work.
    started: usize,
    idle: usize,
    timers: BinaryHeap<Reverse<TimerEntry>>,
    timer_wakers: FxHashMap<u64, Waker>,
    next_timer: u64,
    ticker: bool,
    shutdown: bool,
    stats: SchedStats,
}

/// What the ticker and the workers share with the threads' wakers.
struct Inner {
    config: SchedConfig,
    /// Workers polling at once.
    target: usize,
    state: Mutex<SchedState>,
    /// Idle workers wait here.
    work: Condvar,
    /// The ticker waits here while there is no thread.
    threads_exist: Condvar,
    pick_next: Arc<GraftSlot<PickNext>>,
    runtime: Runtime,
    ticks: Arc<AtomicU64>,
    tick_hooks: Mutex<Vec<(&'static str, TickHook)>>,
    workers: Mutex<Vec<Arc<WorkerSlot>>>,
    /// Where CPU time, sleeps and ticks are measured: the machine's clock, or a manual one
    /// that a test moves (a thread's CPU is then the clock's time its turns took).
    clock: SharedClock,
}

/// The CPU scheduler of one kernel.
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl Scheduler {
    pub fn new(runtime: &Runtime, config: SchedConfig) -> Scheduler {
        Scheduler::with_clock(runtime, config, SharedClock::default())
    }

    /// A scheduler whose time (CPU charged, sleeps, ticks) is `clock`'s.
    pub fn with_clock(runtime: &Runtime, config: SchedConfig, clock: SharedClock) -> Scheduler {
        let target = if config.workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            config.workers
        };
        Scheduler {
            inner: Arc::new(Inner {
                config,
                target,
                state: Mutex::new(SchedState {
                    shares: Shares::new(),
                    entries: FxHashMap::default(),
                    pick_thread: FxHashMap::default(),
                    next_try: None,
                    thread_tries: FxHashMap::default(),
                    next_tid: 1,
                    polling: 0,
                    started: 0,
                    idle: 0,
                    timers: BinaryHeap::new(),
                    timer_wakers: FxHashMap::default(),
                    next_timer: 0,
                    ticker: false,
                    shutdown: false,
                    stats: SchedStats::default(),
                }),
                work: Condvar::new(),
                threads_exist: Condvar::new(),
                pick_next: Arc::new(GraftSlot::new(runtime, Arc::new(()), Access::Privileged, None)),
                runtime: runtime.clone(),
                ticks: Arc::new(AtomicU64::new(0)),
                tick_hooks: Mutex::new(Vec::new()),
                workers: Mutex::new(Vec::new()),
                clock,
            }),
        }
    }

    pub fn config(&self) -> &SchedConfig {
        &self.inner.config
    }

    /// Workers that poll at once.
    pub fn workers(&self) -> usize {
        self.inner.target
    }

    /// The global graftpoint `sched.pick_next`, for the kernel to register.
    pub fn pick_next_slot(&self) -> &Arc<GraftSlot<PickNext>> {
        &self.inner.pick_next
    }

    /// Makes `pid` (of user `uid`) known; returns its `sched.pick_thread` graftpoint, for the
    /// kernel to register in the process's namespace.
    pub fn add_process(&self, pid: Pid, uid: Uid) -> Arc<GraftSlot<PickThread>> {
        let mut st = self.inner.state.lock();
        st.shares.add_process(pid, uid);
        st.pick_thread
            .entry(pid)
            .or_insert_with(|| {
                Arc::new(GraftSlot::new(
                    &self.inner.runtime,
                    Arc::new(ThreadEnv::new(pid)),
                    Access::Process(pid),
                    None,
                ))
            })
            .clone()
    }

    /// Forgets a process once its threads have ended (the caller joins them first).
    pub fn remove_process(&self, pid: Pid) {
        let mut st = self.inner.state.lock();
        let live = st.entries.keys().any(|&t| pid_of(&st, t) == Some(pid));
        if !live {
            st.shares.remove_process(pid);
            st.pick_thread.remove(&pid);
            if let Some(t) = st.thread_tries.remove(&pid) {
                drop(st);
                t.stop();
            }
        }
    }

    /// Starts `wasm` in shadow beside the live policy at `sched.pick_thread` of process `pid`,
    /// or at `sched.pick_next` if `None`, offered 1 in `sample` decisions (the kernel chooses if
    /// `None`; see [`shadow`]); it replaces a shadow already there. The caller checks that
    /// `owner` may try here.
    pub fn try_start(
        &self,
        pid: Option<Pid>,
        wasm: &[u8],
        owner: vino_graft::Owner,
        sample: Option<u32>,
        queue: usize,
    ) -> Result<Arc<SchedTry>, vino_graft::LoadError> {
        let shadow = match pid {
            None => SchedTry::start(&self.inner.pick_next, wasm, owner, sample, queue)?,
            Some(pid) => {
                let slot = self.inner.state.lock().pick_thread.get(&pid).cloned();
                let slot = slot.ok_or_else(|| vino_graft::LoadError::Start(format!("no process {pid}")))?;
                SchedTry::start(&slot, wasm, owner, sample, queue)?
            }
        };
        let old = {
            let mut st = self.inner.state.lock();
            match pid {
                None => st.next_try.replace(shadow.clone()),
                Some(pid) => st.thread_tries.insert(pid, shadow.clone()),
            }
        };
        if let Some(old) = old {
            old.stop();
        }
        Ok(shadow)
    }

    /// Stops the shadow [`Scheduler::try_start`] started there, once it has drained what it
    /// was offered: what it found.
    pub fn try_stop(&self, pid: Option<Pid>) -> Option<shadow::SchedTryReport> {
        let shadow = self.try_take(pid)?;
        Some(shadow.stop())
    }

    /// The shadow there, if one runs.
    pub fn try_handle(&self, pid: Option<Pid>) -> Option<Arc<SchedTry>> {
        let st = self.inner.state.lock();
        match pid {
            None => st.next_try.clone(),
            Some(pid) => st.thread_tries.get(&pid).cloned(),
        }
    }

    fn try_take(&self, pid: Option<Pid>) -> Option<Arc<SchedTry>> {
        let mut st = self.inner.state.lock();
        match pid {
            None => st.next_try.take(),
            Some(pid) => st.thread_tries.remove(&pid),
        }
    }

    /// Starts a thread of `pid` running the future `make` returns; it is runnable at once.
    pub fn spawn<F, Fut>(&self, pid: Pid, make: F) -> Result<JoinHandle, SpawnError>
    where
        F: FnOnce(ThreadCtx) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let inner = &self.inner;
        let tid = {
            let mut st = inner.state.lock();
            if st.shutdown {
                return Err(SpawnError::ShuttingDown);
            }
            if !st.shares.has_process(pid) {
                return Err(SpawnError::NoSuchProcess(pid));
            }
            let tid = st.next_tid;
            st.next_tid += 1;
            tid
        };
        let ctx = ThreadCtx {
            tid,
            inner: Arc::downgrade(inner),
            ticks: inner.ticks.clone(),
            resumed: Arc::new(AtomicU64::new(0)),
            slice_ticks: inner.config.slice_ticks,
        };
        let resumed = ctx.resumed.clone();
        let ticks = inner.ticks.clone();
        let future = make(ctx);
        // The worker stamps the thread's resumption before each poll (the slice is counted
        // from there).
        let future: BoxFuture = Box::pin(Stamped {
            inner: future,
            resumed,
            ticks,
        });
        let done = Arc::new(Done::default());
        let waker = Waker::from(Arc::new(ThreadWaker {
            tid,
            inner: Arc::downgrade(inner),
        }));
        let mut st = inner.state.lock();
        if st.shutdown {
            return Err(SpawnError::ShuttingDown);
        }
        if !st.shares.has_process(pid) {
            return Err(SpawnError::NoSuchProcess(pid));
        }
        st.entries.insert(
            tid,
            Entry {
                future: Some((future, waker)),
                notified: false,
                charge: pid,
                done: done.clone(),
            },
        );
        let now = inner.now_ns();
        st.shares.add_thread(tid, pid, now);
        st.stats.spawned += 1;
        self.start_workers(&mut st);
        drop(st);
        inner.work.notify_one();
        inner.threads_exist.notify_all();
        Ok(JoinHandle { tid, done })
    }

    /// Starts the workers and the ticker the first time a thread exists.
    fn start_workers(&self, st: &mut SchedState) {
        if !st.ticker {
            st.ticker = true;
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name("vino-ticker".into())
                .spawn(move || inner.ticker())
                .expect("starting the scheduler's ticker");
        }
        while st.started < self.inner.target {
            self.inner.start_worker(st);
        }
    }

    /// Calls `hook` on every tick (a program engine's epoch counter, which preempts programs),
    /// once per `key`: a second hook under the same key is ignored.
    pub fn on_tick(&self, key: &'static str, hook: TickHook) {
        let mut hooks = self.inner.tick_hooks.lock();
        if !hooks.iter().any(|(k, _)| *k == key) {
            hooks.push((key, hook));
        }
    }

    /// Wakes a blocked thread (or notes that a running one was woken).
    pub fn wake(&self, tid: Tid) {
        self.inner.wake(tid);
    }

    pub fn set_user_tickets(&self, uid: Uid, tickets: u32) -> Result<(), ShareError> {
        self.inner.state.lock().shares.set_user_tickets(uid, tickets)
    }

    pub fn user_tickets(&self, uid: Uid) -> u32 {
        self.inner.state.lock().shares.user_tickets(uid)
    }

    pub fn set_process_tickets(&self, pid: Pid, tickets: u32) -> Result<(), ShareError> {
        self.inner.state.lock().shares.set_process_tickets(pid, tickets)
    }

    pub fn process_tickets(&self, pid: Pid) -> Option<u32> {
        self.inner.state.lock().shares.process_tickets(pid)
    }

    /// Charges `pid` for `used` of CPU the kernel spent on its behalf outside its threads (its
    /// event grafts on the kernel's event threads): its share pays for it as for its own turns.
    pub fn charge(&self, pid: Pid, used: Duration) {
        self.inner
            .state
            .lock()
            .shares
            .charge(NO_THREAD, pid, used.as_nanos().min(u64::MAX as u128) as u64);
    }

    /// `from` gives its turns to `to` while it has nothing runnable (`None` ends it).
    pub fn donate(&self, from: Pid, to: Option<Pid>) -> Result<(), ShareError> {
        let r = self.inner.state.lock().shares.donate(from, to);
        self.inner.work.notify_all();
        r
    }

    /// CPU the threads of `pid` used, and others on its donated turns.
    pub fn process_cpu(&self, pid: Pid) -> Option<Duration> {
        self.inner
            .state
            .lock()
            .shares
            .process_cpu_ns(pid)
            .map(Duration::from_nanos)
    }

    /// The live threads of `pid`.
    pub fn threads_of(&self, pid: Pid) -> Vec<ThreadInfo> {
        let st = self.inner.state.lock();
        let mut v: Vec<ThreadInfo> = st
            .entries
            .keys()
            .filter(|&&tid| pid_of(&st, tid) == Some(pid))
            .map(|&tid| ThreadInfo {
                tid,
                pid,
                state: st.shares.state(tid).expect("a live thread"),
                cpu_ns: st.shares.thread_cpu_ns(tid).unwrap_or(0),
            })
            .collect();
        v.sort_by_key(|t| t.tid);
        v
    }

    pub fn stats(&self) -> SchedStats {
        self.inner.state.lock().stats
    }

    /// Ticks since the scheduler started.
    pub fn ticks(&self) -> u64 {
        self.inner.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        st.shutdown = true;
        // Threads still here are dropped with their futures (their processes are gone).
        let entries: Vec<Entry> = st.entries.drain().map(|(_, e)| e).collect();
        drop(st);
        for e in &entries {
            e.done.finish();
        }
        drop(entries);
        self.inner.work.notify_all();
        self.inner.threads_exist.notify_all();
    }
}

fn pid_of(st: &SchedState, tid: Tid) -> Option<Pid> {
    st.shares.pid_of(tid)
}

impl Inner {
    fn now_ns(&self) -> u64 {
        ns(self.clock.monotonic())
    }

    fn start_worker(self: &Arc<Self>, st: &mut SchedState) {
        st.started += 1;
        let slot = Arc::new(WorkerSlot {
            call: AtomicU8::new(IDLE),
            since: AtomicU64::new(0),
            ticks: self.ticks.clone(),
            inner: Arc::downgrade(self),
        });
        self.workers.lock().push(slot.clone());
        let inner = self.clone();
        let spawned = std::thread::Builder::new()
            .name("vino-worker".into())
            .spawn(move || inner.worker(slot));
        if spawned.is_err() {
            st.started -= 1;
        }
    }

    fn wake(&self, tid: Tid) {
        let mut st = self.state.lock();
        let Some(e) = st.entries.get_mut(&tid) else { return };
        if e.future.is_none() {
            // Running (or being polled): runnable again when the poll returns.
            e.notified = true;
            return;
        }
        let now = self.now_ns();
        if st.shares.wake(tid, now) {
            drop(st);
            self.work.notify_one();
        }
    }

    /// The next thread to run at `now`, taken out of the queues; `None` if nothing is runnable.
    fn pick(&self, st: &mut SchedState, now: u64) -> Option<Pick> {
        let cap = self.config.starvation_cap.as_nanos() as u64;
        // The processes whose graft ran: the tickets their committed calls gave are moved once
        // the choice is made.
        let mut asked: Vec<Pid> = Vec::new();
        let pick = if let Some(tid) = st.shares.starving(now, cap) {
            st.stats.starved += 1;
            Pick {
                tid,
                charge: st.shares.pid_of(tid).expect("a runnable thread"),
                how: How::Starved,
            }
        } else {
            let SchedState {
                shares,
                pick_thread,
                thread_tries,
                next_try,
                ..
            } = &*st;
            // A process's own graft, if it has one, sees its runnable threads (gathered only
            // then, or for a candidate in shadow there).
            let mut own = |pid: Pid, _runnable: usize| {
                let slot = pick_thread.get(&pid)?;
                let bound = slot.consulted();
                let tried = thread_tries.get(&pid).filter(|t| t.take());
                if !bound && tried.is_none() {
                    return None;
                }
                let candidates = shares.queue_of(pid, now);
                let args = PickArgs {
                    candidates: &candidates,
                    default: 0,
                };
                let chosen = bound.then(|| slot.invoke(&args));
                asked.extend(bound.then_some(pid));
                if let Some(t) = tried {
                    t.offer(&candidates, 0, chosen.unwrap_or(0));
                }
                chosen
            };
            let default = shares.choose(&mut own)?;
            let mut pick = default;
            let bound = self.pick_next.consulted();
            let tried = next_try.as_ref().filter(|t| t.take());
            if bound || tried.is_some() {
                let cands = shares.candidates(now, points::PICK_MAX);
                if let Some(d) = cands.iter().position(|c| c.tid == default.tid) {
                    let args = PickArgs {
                        candidates: &cands,
                        default: d,
                    };
                    let i = if bound { self.pick_next.invoke(&args) } else { d };
                    if let Some(t) = tried {
                        t.offer(&cands, d, i);
                    }
                    if i != d {
                        st.stats.graft_picks += 1;
                        pick = Pick {
                            tid: cands[i].tid,
                            charge: cands[i].pid,
                            how: How::Graft,
                        };
                    }
                }
            }
            pick
        };
        for pid in asked {
            let gifts = st.pick_thread.get(&pid).map(|slot| slot.env().take_gifts());
            for (to, n) in gifts.into_iter().flatten() {
                let given = st.shares.give_tickets(pid, to, n).is_ok();
                st.stats.tickets_given += u64::from(given);
                st.stats.gifts_refused += u64::from(!given);
            }
        }
        if pick.how == How::Donated {
            st.stats.donated += 1;
        }
        st.stats.switches += 1;
        st.shares.take(pick);
        Some(pick)
    }

    fn worker(self: Arc<Self>, slot: Arc<WorkerSlot>) {
        WORKER.with(|w| *w.borrow_mut() = Some(slot.clone()));
        let _known = FaultingWorker::register(&slot);
        let mut st = self.state.lock();
        // The time read at the end of the last poll, while nothing has waited since: one clock
        // read serves the end of one turn, the choice of the next and its start.
        let mut clock: Option<Duration> = None;
        loop {
            if st.shutdown {
                st.started -= 1;
                return;
            }
            let started = clock.take().unwrap_or_else(|| self.clock.monotonic());
            let picked = if st.polling < self.target {
                self.pick(&mut st, ns(started))
            } else {
                None
            };
            let Some(pick) = picked else {
                st.idle += 1;
                self.work.wait(&mut st);
                st.idle -= 1;
                continue;
            };
            st.polling += 1;
            let e = st.entries.get_mut(&pick.tid).expect("a picked thread has an entry");
            e.charge = pick.charge;
            e.notified = false;
            let (mut future, waker) = e.future.take().expect("a runnable thread's future is here");
            drop(st);

            POLLING.with(|p| p.set((Arc::as_ptr(&self) as usize, pick.tid)));
            slot.call.store(NOT_IN_CALL, Ordering::Release);
            let result = future.as_mut().poll(&mut Context::from_waker(&waker));
            // Replaced during the poll (in a call, or while a fault held it): not counted.
            let replaced = matches!(slot.call.swap(IDLE, Ordering::AcqRel), HANDED_OFF | EXTRA);
            POLLING.with(|p| p.set((0, NO_THREAD)));
            let yielded = YIELDED.with(|y| y.replace(false));
            let ended = self.clock.monotonic();
            let used = ns(ended.saturating_sub(started));

            st = self.state.lock();
            if !replaced {
                st.polling = st.polling.checked_sub(1).expect("a worker counted as polling");
            }
            st.shares.charge(pick.tid, pick.charge, used);
            let now = ns(ended);
            clock = Some(ended);
            match result {
                Poll::Ready(()) => {
                    let e = st.entries.remove(&pick.tid);
                    st.shares.remove_thread(pick.tid);
                    st.stats.exited += 1;
                    // Joiners are woken and the future dropped outside the lock (a waker
                    // and a destructor may call in).
                    drop(st);
                    drop(future);
                    if let Some(e) = e {
                        e.done.finish();
                    }
                    st = self.state.lock();
                }
                Poll::Pending => {
                    let Some(e) = st.entries.get_mut(&pick.tid) else {
                        continue; // dropped by a shutdown meanwhile
                    };
                    e.future = Some((future, waker));
                    if std::mem::take(&mut e.notified) || yielded {
                        st.shares.requeue(pick.tid, now);
                    } else {
                        st.shares.block(pick.tid);
                    }
                }
            }
        }
    }

    fn ticker(self: Arc<Self>) {
        let mut next = self.clock.deadline_in(self.config.tick);
        loop {
            {
                let mut st = self.state.lock();
                if st.shutdown {
                    return;
                }
                if st.entries.is_empty() && st.timers.is_empty() {
                    self.threads_exist.wait(&mut st);
                    next = self.clock.deadline_in(self.config.tick);
                    continue;
                }
            }
            self.clock.sleep_until(next);
            next += self.config.tick;
            if self.clock.passed(next) {
                next = self.clock.deadline_in(self.config.tick);
            }
            let tick = self.ticks.fetch_add(1, Ordering::Relaxed) + 1;
            let hooks: Vec<TickHook> = self.tick_hooks.lock().iter().map(|(_, h)| h.clone()).collect();
            for h in hooks {
                h();
            }
            self.fire_timers();
            self.hand_off_blocked(tick);
        }
    }

    fn fire_timers(&self) {
        let now = self.clock.monotonic();
        let mut due = Vec::new();
        {
            let mut st = self.state.lock();
            while st.timers.peek().is_some_and(|Reverse(t)| t.at <= now) {
                let Reverse(t) = st.timers.pop().expect("peeked");
                if let Some(w) = st.timer_wakers.remove(&t.seq) {
                    due.push(w);
                }
            }
        }
        for w in due {
            w.wake();
        }
    }

    /// Workers in the kernel (or blocked on a queued fault) for two ticks or more give their
    /// place to another.
    fn hand_off_blocked(self: &Arc<Self>, tick: u64) {
        let slots: Vec<Arc<WorkerSlot>> = self.workers.lock().clone();
        for slot in slots {
            let call = slot.call.load(Ordering::Acquire);
            if !matches!(call, IN_CALL | IN_FAULT)
                || tick.saturating_sub(slot.since.load(Ordering::Relaxed)) < 2
                || slot
                    .call
                    .compare_exchange(call, HANDED_OFF, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            self.replace_worker();
        }
    }

    /// A worker blocked in the kernel gives its place: it no longer counts as polling, and an
    /// idle worker (or a new one, up to `max_blocked` more) runs the next thread.
    fn replace_worker(self: &Arc<Self>) {
        let mut st = self.state.lock();
        st.polling = st.polling.checked_sub(1).expect("a worker counted as polling");
        st.stats.handoffs += 1;
        if st.idle == 0 && st.started < self.target + self.config.max_blocked && !st.shutdown {
            self.start_worker(&mut st);
        }
        drop(st);
        self.work.notify_one();
    }

    fn add_timer(&self, at: Duration, waker: Waker) {
        let mut st = self.state.lock();
        let seq = st.next_timer;
        st.next_timer += 1;
        st.timers.push(Reverse(TimerEntry { at, seq }));
        st.timer_wakers.insert(seq, waker);
        drop(st);
        self.threads_exist.notify_all();
    }
}

/// No thread (work charged to a process but done by the kernel): thread ids start at 1.
const NO_THREAD: Tid = 0;

// What a worker is doing, as its slot shows it. Each move into `HANDED_OFF` (by the ticker or
// `blocking`) replaces the worker once; the worker itself moves out of it, to `EXTRA`, and is
// not counted again until its poll ends, so a worker is replaced at most once per poll.
/// Polling, counted among the polling workers.
const NOT_IN_CALL: u8 = 0;
/// In a system call ([`in_kernel`]): the ticker hands it off after two ticks.
const IN_CALL: u8 = 1;
/// Blocked in a call or a fault, and its place given to another worker.
const HANDED_OFF: u8 = 2;
/// Blocked on a page fault that waits on I/O (the pager marked it): handed off as a call is.
const IN_FAULT: u8 = 3;
/// Replaced earlier in this poll and running again: an extra worker until its poll ends.
const EXTRA: u8 = 4;
/// Not polling (a fault reported late finds nothing to hand off).
const IDLE: u8 = 5;

/// What a worker shows the ticker (and the pager) of itself.
struct WorkerSlot {
    call: AtomicU8,
    /// The tick it entered the kernel (or its fault) at.
    since: AtomicU64,
    ticks: Arc<AtomicU64>,
    inner: Weak<Inner>,
}

impl WorkerSlot {
    /// The running worker enters `to` (a call, or a wait handed off at once); false if it is
    /// an extra worker already: replaced in this poll, perhaps while a fault held it.
    fn enter(&self, to: u8) -> bool {
        self.since.store(self.ticks.load(Ordering::Relaxed), Ordering::Relaxed);
        loop {
            match self.call.load(Ordering::Acquire) {
                EXTRA => return false,
                HANDED_OFF => {
                    // Handed off while a fault held it; it runs again.
                    self.call.store(EXTRA, Ordering::Release);
                    return false;
                }
                // Running, or a fault's mark the pager has not cleared yet (the fault is over).
                now => {
                    if self
                        .call
                        .compare_exchange(now, to, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return true;
                    }
                }
            }
        }
    }

    /// The running worker leaves the call it entered: an extra worker if it was handed off.
    fn leave_call(&self) {
        if self
            .call
            .compare_exchange(IN_CALL, NOT_IN_CALL, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.call.store(EXTRA, Ordering::Release);
        }
    }
}

/// Workers by OS thread id, for the pager, which knows a fault by the thread that took it.
static BY_OS_THREAD: LazyLock<parking_lot::RwLock<FxHashMap<u32, Weak<WorkerSlot>>>> = LazyLock::new(Default::default);

/// A worker's entry in [`BY_OS_THREAD`] while its OS thread lives.
struct FaultingWorker(u32);

impl FaultingWorker {
    fn register(slot: &Arc<WorkerSlot>) -> FaultingWorker {
        let tid = os_thread_id();
        BY_OS_THREAD.write().insert(tid, Arc::downgrade(slot));
        FaultingWorker(tid)
    }
}

impl Drop for FaultingWorker {
    fn drop(&mut self) {
        BY_OS_THREAD.write().remove(&self.0);
    }
}

fn os_thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn worker_on(os_tid: u32) -> Option<Arc<WorkerSlot>> {
    BY_OS_THREAD.read().get(&os_tid)?.upgrade()
}

/// The pager queued a page fault of OS thread `os_tid` that waits on I/O (a swap-in, or its
/// turn behind a fault-around graft): if that thread is a worker polling a thread outside any
/// call, it counts as in the kernel from now, and the ticker gives its place to another
/// worker if the wait lasts two ticks. Call it before the fault can be served; any other
/// thread is ignored.
pub fn fault_waits(os_tid: u32) {
    let Some(slot) = worker_on(os_tid) else { return };
    if slot.call.load(Ordering::Acquire) == NOT_IN_CALL {
        slot.since.store(slot.ticks.load(Ordering::Relaxed), Ordering::Relaxed);
        let _ = slot
            .call
            .compare_exchange(NOT_IN_CALL, IN_FAULT, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// The fault [`fault_waits`] marked is served (its thread is woken): its worker counts as
/// running again, or, if it was handed off meanwhile, as an extra worker until its poll ends
/// (as after a call handed off in [`in_kernel`]; the worker sees it itself).
pub fn fault_served(os_tid: u32) {
    if let Some(slot) = worker_on(os_tid) {
        let _ = slot
            .call
            .compare_exchange(IN_FAULT, NOT_IN_CALL, Ordering::AcqRel, Ordering::Relaxed);
    }
}

thread_local! {
    static WORKER: RefCell<Option<Arc<WorkerSlot>>> = const { RefCell::new(None) };
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The thread a worker is polling woke itself (a yield): runnable again when the poll
    /// returns, without the wake's trip through the scheduler's lock on every switch.
    static YIELDED: Cell<bool> = const { Cell::new(false) };
    /// The scheduler and thread this OS thread (a worker) is polling now; (0, 0) if none.
    static POLLING: Cell<(usize, Tid)> = const { Cell::new((0, NO_THREAD)) };
}

/// Runs `f`, a system call that may block (on the disk, a lock, a stream), marking the worker as
/// in the kernel: if it stays there two ticks, another worker takes its place. Off a worker,
/// it just runs `f`.
pub fn in_kernel<R>(f: impl FnOnce() -> R) -> R {
    let slot = WORKER.with(|w| w.borrow().clone());
    let Some(slot) = slot else { return f() };
    if DEPTH.with(Cell::get) > 0 {
        DEPTH.with(|d| d.set(d.get() + 1));
        let r = f();
        DEPTH.with(|d| d.set(d.get() - 1));
        return r;
    }
    // A worker already replaced during this poll is not counted among the polling ones: there
    // is nothing more to hand off.
    if !slot.enter(IN_CALL) {
        return f();
    }
    DEPTH.with(|d| d.set(1));
    let r = f();
    slot.leave_call();
    DEPTH.with(|d| d.set(0));
    r
}

/// Runs `f`, a wait of no known length (input from a client, output to one that may not read,
/// a lock another holds), giving the worker's place to another at once rather than after two
/// ticks as [`in_kernel`] does (which suits waits for the disk: most end within a tick, and a
/// hand-off costs a thread's wake-up). Off a worker, it just runs `f`.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let slot = WORKER.with(|w| w.borrow().clone());
    let Some(slot) = slot else { return f() };
    let replace = || {
        if let Some(inner) = slot.inner.upgrade() {
            inner.replace_worker();
        }
    };
    if DEPTH.with(Cell::get) > 0 {
        // Inside `in_kernel`: the call stays marked handed off (so the ticker does not replace
        // it again), and `in_kernel` makes it an extra worker when it returns.
        if slot.call.swap(HANDED_OFF, Ordering::AcqRel) == IN_CALL {
            replace();
        }
        return f();
    }
    if !slot.enter(HANDED_OFF) {
        return f(); // replaced already in this poll
    }
    replace();
    let r = f();
    // An extra worker until its poll ends.
    slot.call.store(EXTRA, Ordering::Release);
    r
}

/// What a thread's future knows of its thread.
#[derive(Clone)]
pub struct ThreadCtx {
    tid: Tid,
    inner: Weak<Inner>,
    ticks: Arc<AtomicU64>,
    resumed: Arc<AtomicU64>,
    slice_ticks: u64,
}

impl ThreadCtx {
    pub fn tid(&self) -> Tid {
        self.tid
    }

    /// True once the thread has run its slice since it last got a worker: it should yield.
    pub fn slice_over(&self) -> bool {
        self.ticks.load(Ordering::Relaxed) - self.resumed.load(Ordering::Relaxed) >= self.slice_ticks
    }

    /// Gives the worker back; the thread is runnable at once.
    pub fn yield_now(&self) -> YieldNow {
        yield_now()
    }

    /// Gives the worker back until `at` (the ticker's resolution: one tick): as long as from
    /// now to `at`, on the scheduler's clock.
    pub fn sleep_until(&self, at: Instant) -> Sleep {
        self.sleep_for(at.saturating_duration_since(Instant::now()))
    }

    /// Gives the worker back for `d` of the scheduler's clock (one tick's resolution).
    pub fn sleep_for(&self, d: Duration) -> Sleep {
        let at = self.inner.upgrade().map_or(Duration::ZERO, |i| i.clock.deadline_in(d));
        Sleep {
            at,
            inner: self.inner.clone(),
        }
    }

    /// Wakes this thread if it sleeps (a kill, a signal).
    pub fn waker(&self) -> ThreadWakeHandle {
        ThreadWakeHandle {
            tid: self.tid,
            inner: self.inner.clone(),
        }
    }
}

/// Wakes one thread from outside it.
#[derive(Clone)]
pub struct ThreadWakeHandle {
    tid: Tid,
    inner: Weak<Inner>,
}

impl ThreadWakeHandle {
    pub fn wake(&self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.wake(self.tid);
        }
    }
}

/// Gives the worker back; the thread is runnable again at once (its turn comes by its
/// share). The same as [`ThreadCtx::yield_now`], for a caller that holds no context.
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// [`yield_now`].
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// [`ThreadCtx::sleep_until`].
pub struct Sleep {
    at: Duration,
    inner: Weak<Inner>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.inner.upgrade() {
            Some(inner) if !inner.clock.passed(self.at) => inner.add_timer(self.at, cx.waker().clone()),
            _ => return Poll::Ready(()),
        }
        Poll::Pending
    }
}

/// Nanoseconds of a clock reading, as the shares count them.
fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Stamps the tick a thread resumed at before each poll of its future.
struct Stamped<F> {
    inner: F,
    resumed: Arc<AtomicU64>,
    ticks: Arc<AtomicU64>,
}

impl<F: Future<Output = ()>> Future for Stamped<F> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: `inner` is structurally pinned: it is never moved out of `Stamped`.
        let this = unsafe { self.get_unchecked_mut() };
        this.resumed
            .store(this.ticks.load(Ordering::Relaxed), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx)
    }
}

struct ThreadWaker {
    tid: Tid,
    inner: Weak<Inner>,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if POLLING.with(Cell::get) == (Weak::as_ptr(&self.inner) as usize, self.tid) {
            YIELDED.with(|y| y.set(true));
        } else if let Some(inner) = self.inner.upgrade() {
            inner.wake(self.tid);
        }
    }
}

/// Set when a thread ends.
#[derive(Default)]
struct Done {
    done: Mutex<bool>,
    cv: Condvar,
    wakers: Mutex<Vec<Waker>>,
}

impl Done {
    fn finish(&self) {
        *self.done.lock() = true;
        self.cv.notify_all();
        for w in self.wakers.lock().drain(..) {
            w.wake();
        }
    }
}

/// A started thread: wait for it from an OS thread ([`JoinHandle::join`]) or from another VINO
/// thread (it is a future).
pub struct JoinHandle {
    tid: Tid,
    done: Arc<Done>,
}

impl JoinHandle {
    pub fn tid(&self) -> Tid {
        self.tid
    }

    pub fn is_finished(&self) -> bool {
        *self.done.done.lock()
    }

    /// Blocks the calling OS thread (never a worker's) until the thread ends.
    pub fn join(&self) {
        let mut done = self.done.done.lock();
        while !*done {
            self.done.cv.wait(&mut done);
        }
    }
}

impl Future for JoinHandle {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_finished() {
            return Poll::Ready(());
        }
        self.done.wakers.lock().push(cx.waker().clone());
        if self.is_finished() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
