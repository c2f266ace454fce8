//! Proportional share with currencies: who runs next when nothing is grafted.
//!
//! Stride scheduling (Waldspurger and Weihl's deterministic sibling of lottery scheduling) in two
//! levels, which is what their currencies mean: each user holds tickets in the base currency and
//! funds its own processes, whose tickets are in the user's currency. The kernel picks the user
//! with the smallest pass among those with work, then that user's process with the smallest
//! pass; each advances by `time used / tickets`. A user that starts more processes divides its
//! share among them and wins nothing more.
//!
//! A process may give its share to another while it waits for it (Small 1998, 4.2.1: a client
//! blocked on a server): while the donor has no runnable thread of its own, its turns run the
//! receiver's threads, charged to the donor. A thread that wakes after sleeping starts at the
//! current pass of its level, so sleeping banks no credit.
//!
//! Pure state, no clock and no threads: the caller passes the time and runs what is picked, so
//! the rules are tested deterministically here and the executor stays a thin loop.

use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};

pub type Tid = u64;
pub type Pid = u64;
pub type Uid = u32;

/// Tickets a user or a process holds unless set.
pub const DEFAULT_TICKETS: u32 = 100;
/// Most tickets one holder may have (keeps passes' arithmetic far from overflow).
pub const MAX_TICKETS: u32 = 1 << 20;
/// Longest chain of donations followed (a donor's receiver donating on).
pub const DONATION_DEPTH: usize = 8;
/// Scale of a pass: one nanosecond on one ticket.
const STRIDE1: u128 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for a worker.
    Runnable,
    /// On a worker.
    Running,
    /// Waiting for a timer or a wake-up.
    Blocked,
}

/// Why a thread was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Its process's (and user's) turn.
    Share,
    /// A donor's turn, given to its receiver.
    Donated,
    /// It had waited past the starvation cap: taken whatever the policy says.
    Starved,
    /// A graft on `sched.pick_next` chose it.
    Graft,
}

/// A decision: run `tid`, charging the time to `charge` (a process: its own, or the donor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub tid: Tid,
    pub charge: Pid,
    pub how: How,
}

/// Why a change of tickets or donation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareError {
    NoSuchProcess(Pid),
    /// Zero tickets, or more than [`MAX_TICKETS`].
    BadTickets(u32),
    /// The donation would make a cycle or a chain longer than [`DONATION_DEPTH`].
    Loop,
}

impl std::fmt::Display for ShareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShareError::NoSuchProcess(p) => write!(f, "no process {p}"),
            ShareError::BadTickets(t) => write!(f, "{t} tickets: a share is 1 to {MAX_TICKETS}"),
            ShareError::Loop => write!(f, "the donation would close a loop of donations"),
        }
    }
}

impl std::error::Error for ShareError {}

struct User {
    tickets: u32,
    pass: u128,
    /// The pass of the process last picked among this user's (where a waking process starts).
    vtime: u128,
    /// Threads runnable or running.
    active: usize,
}

struct Proc {
    uid: Uid,
    /// Its user's place in `Shares::users`.
    user: usize,
    tickets: u32,
    pass: u128,
    queue: VecDeque<Tid>,
    active: usize,
    threads: usize,
    donate_to: Option<Pid>,
    cpu_ns: u64,
    /// Its place in `Shares::ready` while it has runnable threads.
    ready_at: Option<usize>,
}

struct Thread {
    pid: Pid,
    state: State,
    /// When it last became runnable (the caller's clock, ns).
    queued_at: u64,
    cpu_ns: u64,
}

/// One runnable thread, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub tid: Tid,
    pub pid: Pid,
    pub uid: Uid,
    /// The process's tickets (in its user's currency).
    pub tickets: u32,
    /// How long it has waited for a worker, ns.
    pub waited_ns: u64,
    pub cpu_ns: u64,
}

/// The proportional-share state of every user, process and thread.
#[derive(Default)]
pub struct Shares {
    /// Users in the order they appeared (never removed, so a process keeps its user's place
    /// and reaches it without a lookup on every decision), and each uid's place.
    users: Vec<User>,
    user_at: FxHashMap<Uid, usize>,
    /// (A hash map: a decision iterates the ordered sets below, never this.)
    procs: FxHashMap<Pid, Proc>,
    threads: FxHashMap<Tid, Thread>,
    /// Runnable threads in the order they became runnable (entries go stale when a thread
    /// leaves the state; they are skipped): the starvation check's and the candidates' order.
    fifo: VecDeque<(Tid, u64)>,
    /// The pass of the user last picked (where a waking user starts).
    vtime: u128,
    /// Processes with a runnable thread, and processes giving their turns to another: the
    /// only ones a decision looks at (a daemon holds a process per client, most of them idle).
    /// (A vector, each member's place kept in its `Proc`: entering and leaving it is a push
    /// and a swap with no lookup, where a B-tree would allocate and rebalance on every switch
    /// between two processes. Its order is not the decision's: `choose` compares processes by
    /// pass and pid, whatever order it meets them in.)
    ready: Vec<Pid>,
    donors: BTreeSet<Pid>,
}

/// A user as a decision orders them: its pass, then its uid.
type UserKey = (u128, Uid);
/// A process as a decision orders a user's: its pass; then the process paying and the one whose
/// thread runs (itself, or the receiver of its donation).
type ProcKey = (u128, Pid, Pid);

/// `ns` of CPU in passes at `tickets` (a u64 division unless the product needs 128 bits).
fn stride(ns: u64, tickets: u32) -> u128 {
    let num = ns as u128 * STRIDE1;
    match u64::try_from(num) {
        Ok(n) => u128::from(n / u64::from(tickets)),
        Err(_) => num / u128::from(tickets),
    }
}

impl Shares {
    pub fn new() -> Shares {
        Shares::default()
    }

    /// Adds a process of user `uid` (the user gets [`DEFAULT_TICKETS`] the first time).
    pub fn add_process(&mut self, pid: Pid, uid: Uid) {
        let user = self.user(uid, DEFAULT_TICKETS);
        self.procs.entry(pid).or_insert(Proc {
            uid,
            user,
            tickets: DEFAULT_TICKETS,
            pass: 0,
            queue: VecDeque::new(),
            active: 0,
            threads: 0,
            donate_to: None,
            cpu_ns: 0,
            ready_at: None,
        });
    }

    /// Forgets a process whose threads have all ended; donations to it end.
    pub fn remove_process(&mut self, pid: Pid) {
        if let Some(p) = self.procs.get(&pid) {
            assert_eq!(p.threads, 0, "process {pid} removed with threads");
            self.leave_ready(pid);
            self.procs.remove(&pid);
        }
        self.donors.remove(&pid);
        let Shares { procs, donors, .. } = self;
        donors.retain(|d| {
            let p = procs.get_mut(d).expect("a donor is a process");
            if p.donate_to == Some(pid) {
                p.donate_to = None;
            }
            p.donate_to.is_some()
        });
    }

    pub fn has_process(&self, pid: Pid) -> bool {
        self.procs.contains_key(&pid)
    }

    /// A new thread of `pid`, runnable at once.
    pub fn add_thread(&mut self, tid: Tid, pid: Pid, now: u64) {
        let p = self.procs.get_mut(&pid).expect("a thread of an unknown process");
        p.threads += 1;
        self.threads.insert(
            tid,
            Thread {
                pid,
                state: State::Blocked,
                queued_at: now,
                cpu_ns: 0,
            },
        );
        self.wake(tid, now);
    }

    /// A running thread has ended.
    pub fn remove_thread(&mut self, tid: Tid) {
        let t = self.threads.remove(&tid).expect("an unknown thread ended");
        assert_eq!(t.state, State::Running, "thread {tid} ended while not running");
        let p = self.procs.get_mut(&t.pid).expect("its process");
        p.threads -= 1;
        self.deactivate(t.pid);
    }

    pub fn state(&self, tid: Tid) -> Option<State> {
        self.threads.get(&tid).map(|t| t.state)
    }

    pub fn pid_of(&self, tid: Tid) -> Option<Pid> {
        self.threads.get(&tid).map(|t| t.pid)
    }

    pub fn thread_cpu_ns(&self, tid: Tid) -> Option<u64> {
        self.threads.get(&tid).map(|t| t.cpu_ns)
    }

    /// CPU used by the threads of `pid` (and by others on its donated turns).
    pub fn process_cpu_ns(&self, pid: Pid) -> Option<u64> {
        self.procs.get(&pid).map(|p| p.cpu_ns)
    }

    pub fn runnable(&self) -> usize {
        self.procs.values().map(|p| p.queue.len()).sum()
    }

    /// Makes a blocked thread runnable; false if it was not blocked.
    pub fn wake(&mut self, tid: Tid, now: u64) -> bool {
        let Some(t) = self.threads.get_mut(&tid) else {
            return false;
        };
        if t.state != State::Blocked {
            return false;
        }
        t.state = State::Runnable;
        t.queued_at = now;
        let pid = t.pid;
        let p = self.procs.get_mut(&pid).expect("its process");
        let u = &mut self.users[p.user];
        // Waking from sleep banks no credit: start at the level's current pass.
        if u.active == 0 {
            u.pass = u.pass.max(self.vtime);
        }
        if p.active == 0 {
            p.pass = p.pass.max(u.vtime);
        }
        u.active += 1;
        p.active += 1;
        p.queue.push_back(tid);
        Shares::enter_ready(&mut self.ready, p, pid);
        self.arrived(tid, now);
        true
    }

    /// Notes that `tid` became runnable at `now`. Entries of threads that ran since go stale
    /// and are dropped from the front as the starvation check passes them; a thread that
    /// yields over and over behind one that waits long would pile them up, so the queue is
    /// compacted once it holds many more entries than threads.
    fn arrived(&mut self, tid: Tid, now: u64) {
        self.fifo.push_back((tid, now));
        if self.fifo.len() > 2 * self.threads.len() + 64 {
            let threads = &self.threads;
            self.fifo.retain(|&(t, at)| {
                threads
                    .get(&t)
                    .is_some_and(|x| x.state == State::Runnable && x.queued_at == at)
            });
        }
    }

    /// A running thread gave its worker back but can go on (its slice ended, or it yielded).
    pub fn requeue(&mut self, tid: Tid, now: u64) {
        let t = self.threads.get_mut(&tid).expect("an unknown thread");
        assert_eq!(t.state, State::Running);
        t.state = State::Runnable;
        t.queued_at = now;
        let pid = t.pid;
        let p = self.procs.get_mut(&pid).expect("its process");
        p.queue.push_back(tid);
        Shares::enter_ready(&mut self.ready, p, pid);
        self.arrived(tid, now);
    }

    /// `p` (process `pid`) has a runnable thread: a decision looks at it.
    fn enter_ready(ready: &mut Vec<Pid>, p: &mut Proc, pid: Pid) {
        if p.ready_at.is_none() {
            p.ready_at = Some(ready.len());
            ready.push(pid);
        }
    }

    /// `pid` has no runnable thread left.
    fn leave_ready(&mut self, pid: Pid) {
        let Some(at) = self.procs.get_mut(&pid).and_then(|p| p.ready_at.take()) else {
            return;
        };
        self.ready.swap_remove(at);
        if let Some(&moved) = self.ready.get(at) {
            self.procs.get_mut(&moved).expect("a ready process").ready_at = Some(at);
        }
    }

    /// A running thread waits (a timer, a wake-up).
    pub fn block(&mut self, tid: Tid) {
        let t = self.threads.get_mut(&tid).expect("an unknown thread");
        assert_eq!(t.state, State::Running);
        t.state = State::Blocked;
        let pid = t.pid;
        self.deactivate(pid);
    }

    fn deactivate(&mut self, pid: Pid) {
        let p = self.procs.get_mut(&pid).expect("its process");
        p.active -= 1;
        let u = &mut self.users[p.user];
        u.active -= 1;
    }

    /// Charges `ns` of CPU used by `tid` on a turn that `charge` paid for.
    pub fn charge(&mut self, tid: Tid, charge: Pid, ns: u64) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.cpu_ns += ns;
        }
        let Some(p) = self.procs.get_mut(&charge) else {
            return;
        };
        p.cpu_ns += ns;
        p.pass += stride(ns, p.tickets);
        let u = &mut self.users[p.user];
        u.pass += stride(ns, u.tickets);
    }

    /// The place of user `uid`, added with `tickets` if new.
    fn user(&mut self, uid: Uid, tickets: u32) -> usize {
        if let Some(&at) = self.user_at.get(&uid) {
            return at;
        }
        self.users.push(User {
            tickets,
            pass: self.vtime,
            vtime: 0,
            active: 0,
        });
        self.user_at.insert(uid, self.users.len() - 1);
        self.users.len() - 1
    }

    pub fn set_user_tickets(&mut self, uid: Uid, tickets: u32) -> Result<(), ShareError> {
        check_tickets(tickets)?;
        let at = self.user(uid, tickets);
        self.users[at].tickets = tickets;
        Ok(())
    }

    pub fn user_tickets(&self, uid: Uid) -> u32 {
        self.user_at
            .get(&uid)
            .map_or(DEFAULT_TICKETS, |&at| self.users[at].tickets)
    }

    pub fn set_process_tickets(&mut self, pid: Pid, tickets: u32) -> Result<(), ShareError> {
        check_tickets(tickets)?;
        self.procs.get_mut(&pid).ok_or(ShareError::NoSuchProcess(pid))?.tickets = tickets;
        Ok(())
    }

    /// Moves `n` of `from`'s tickets to `to`, both processes of one user: they are in that
    /// user's currency, so its share against other users does not move. `from` keeps at least
    /// one ticket, and `to` stays within [`MAX_TICKETS`].
    pub fn give_tickets(&mut self, from: Pid, to: Pid, n: u32) -> Result<(), ShareError> {
        let (Some(giver), Some(taker)) = (self.procs.get(&from), self.procs.get(&to)) else {
            let missing = if self.procs.contains_key(&from) { to } else { from };
            return Err(ShareError::NoSuchProcess(missing));
        };
        if giver.uid != taker.uid {
            return Err(ShareError::NoSuchProcess(to));
        }
        if from == to || n == 0 || n >= giver.tickets {
            return Err(ShareError::BadTickets(n));
        }
        check_tickets(taker.tickets.saturating_add(n))?;
        self.procs.get_mut(&from).expect("checked").tickets -= n;
        self.procs.get_mut(&to).expect("checked").tickets += n;
        Ok(())
    }

    pub fn process_tickets(&self, pid: Pid) -> Option<u32> {
        self.procs.get(&pid).map(|p| p.tickets)
    }

    /// `from` gives its turns to `to` while it has no runnable thread (`None` ends it).
    pub fn donate(&mut self, from: Pid, to: Option<Pid>) -> Result<(), ShareError> {
        if !self.procs.contains_key(&from) {
            return Err(ShareError::NoSuchProcess(from));
        }
        if let Some(to) = to {
            if !self.procs.contains_key(&to) {
                return Err(ShareError::NoSuchProcess(to));
            }
            // The chain from `to` must not come back to `from`, and stays short.
            let mut at = Some(to);
            for _ in 0..DONATION_DEPTH {
                match at {
                    None => break,
                    Some(p) if p == from => return Err(ShareError::Loop),
                    Some(p) => at = self.procs[&p].donate_to,
                }
            }
            if at.is_some() {
                return Err(ShareError::Loop);
            }
            // A donor that was idle starts its donated turns at the current pass.
            let p = &self.procs[&from];
            let u = &self.users[p.user];
            let (upass, ppass) = (u.pass.max(self.vtime), p.pass.max(u.vtime));
            if u.active == 0 {
                self.users[p.user].pass = upass;
            }
            let p = self.procs.get_mut(&from).expect("checked");
            if p.active == 0 {
                p.pass = ppass;
            }
        }
        self.procs.get_mut(&from).expect("checked").donate_to = to;
        if to.is_some() {
            self.donors.insert(from);
        } else {
            self.donors.remove(&from);
        }
        Ok(())
    }

    /// The process whose runnable threads a turn of `pid` runs: its own, else along its
    /// donations; `None` if neither has any.
    fn source(&self, pid: Pid) -> Option<Pid> {
        let mut at = pid;
        for _ in 0..=DONATION_DEPTH {
            let p = &self.procs[&at];
            if !p.queue.is_empty() {
                return Some(at);
            }
            at = p.donate_to?;
        }
        None
    }

    /// The thread that has waited longest, if it has waited `cap` ns or more by `now`.
    pub fn starving(&mut self, now: u64, cap: u64) -> Option<Tid> {
        while let Some(&(tid, at)) = self.fifo.front() {
            match self.threads.get(&tid) {
                Some(t) if t.state == State::Runnable && t.queued_at == at => {
                    return (now.saturating_sub(at) >= cap).then_some(tid);
                }
                _ => {
                    self.fifo.pop_front();
                }
            }
        }
        None
    }

    /// The default decision: the user with the smallest pass, its process with the smallest
    /// pass, and in that process (or the one it donates to) the thread `pick_thread` chooses
    /// among its runnable ones in order of arrival (called with the process and how many it
    /// has runnable, when more than one; it reads them with [`Shares::queue_of`] only if it has
    /// a policy of its own; `None` or an index past them: the first).
    pub fn choose(&self, pick_thread: &mut dyn FnMut(Pid, usize) -> Option<usize>) -> Option<Pick> {
        // The processes whose turn could run something: those with runnable threads, and
        // donors (whose turns run their receivers'). The user with the smallest pass, and its
        // process with the smallest, in one pass: the best process is only kept for the best
        // user found so far.
        let mut best: Option<(UserKey, ProcKey)> = None;
        // A donor with runnable threads of its own is among the ready already.
        let donors = self.donors.iter().filter(|d| self.procs[d].ready_at.is_none());
        for &pid in self.ready.iter().chain(donors) {
            let p = &self.procs[&pid];
            let src = if p.queue.is_empty() {
                let Some(src) = self.source(pid) else { continue };
                src
            } else {
                pid
            };
            let user = (self.users[p.user].pass, p.uid);
            match &mut best {
                Some((u, _)) if user > *u => {}
                Some((u, proc)) if user == *u => {
                    if (p.pass, pid) < (proc.0, proc.1) {
                        *proc = (p.pass, pid, src);
                    }
                }
                _ => best = Some((user, (p.pass, pid, src))),
            }
        }
        let (_, (_, charge, src)) = best?;
        let queue = &self.procs[&src].queue;
        let index = if queue.len() > 1 {
            pick_thread(src, queue.len()).filter(|&i| i < queue.len()).unwrap_or(0)
        } else {
            0
        };
        Some(Pick {
            tid: queue[index],
            charge,
            how: if src == charge { How::Share } else { How::Donated },
        })
    }

    fn candidate(&self, tid: Tid, now: u64) -> Candidate {
        let t = &self.threads[&tid];
        let p = &self.procs[&t.pid];
        Candidate {
            tid,
            pid: t.pid,
            uid: p.uid,
            tickets: p.tickets,
            waited_ns: now.saturating_sub(t.queued_at),
            cpu_ns: t.cpu_ns,
        }
    }

    /// Up to `max` runnable threads in the order they became runnable (for `sched.pick_next`).
    pub fn candidates(&self, now: u64, max: usize) -> Vec<Candidate> {
        self.fifo
            .iter()
            .filter(|&&(tid, at)| {
                self.threads
                    .get(&tid)
                    .is_some_and(|t| t.state == State::Runnable && t.queued_at == at)
            })
            .take(max)
            .map(|&(tid, _)| self.candidate(tid, now))
            .collect()
    }

    /// The threads of a process's run queue, for its `sched.pick_thread`.
    pub fn queue_of(&self, pid: Pid, now: u64) -> Vec<Candidate> {
        self.procs
            .get(&pid)
            .map(|p| p.queue.iter().map(|&t| self.candidate(t, now)).collect())
            .unwrap_or_default()
    }

    /// Carries out a decision: the thread leaves its run queue and runs.
    pub fn take(&mut self, pick: Pick) {
        let t = self.threads.get_mut(&pick.tid).expect("an unknown thread picked");
        assert_eq!(
            t.state,
            State::Runnable,
            "thread {} picked while not runnable",
            pick.tid
        );
        t.state = State::Running;
        let pid = t.pid;
        let p = self.procs.get_mut(&pid).expect("its process");
        let at = p
            .queue
            .iter()
            .position(|&x| x == pick.tid)
            .expect("a runnable thread is queued");
        p.queue.remove(at);
        if p.queue.is_empty() {
            self.leave_ready(pid);
        }
        if let Some(c) = self.procs.get(&pick.charge) {
            let u = &mut self.users[c.user];
            self.vtime = self.vtime.max(u.pass);
            u.vtime = u.vtime.max(c.pass);
        }
    }
}

impl Shares {
    /// Asserts that the sets a decision reads agree with the processes: `ready` holds exactly
    /// those with a runnable thread, `donors` exactly those giving their turns away.
    pub fn check(&self) {
        for (pid, p) in &self.procs {
            assert_eq!(p.ready_at.is_some(), !p.queue.is_empty(), "ready set, process {pid}");
            if let Some(at) = p.ready_at {
                assert_eq!(self.ready.get(at), Some(pid), "ready set, place of process {pid}");
            }
            assert_eq!(
                self.donors.contains(pid),
                p.donate_to.is_some(),
                "donors, process {pid}"
            );
        }
        assert!(self.donors.iter().all(|p| self.procs.contains_key(p)));
        assert_eq!(
            self.ready.len(),
            self.procs.values().filter(|p| p.ready_at.is_some()).count(),
            "ready set holds a process twice or one gone"
        );
    }
}

fn check_tickets(tickets: u32) -> Result<(), ShareError> {
    if tickets == 0 || tickets > MAX_TICKETS {
        return Err(ShareError::BadTickets(tickets));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Runs CPU-bound threads for `slices` turns of `slice` ns on one worker; returns each
    /// process's CPU.
    fn run(s: &mut Shares, slices: u64, slice: u64) -> BTreeMap<Pid, u64> {
        let mut now = 0;
        for _ in 0..slices {
            let pick = s.choose(&mut |_, _| None).expect("something runnable");
            s.take(pick);
            now += slice;
            s.charge(pick.tid, pick.charge, slice);
            s.requeue(pick.tid, now);
            s.check();
        }
        s.procs.iter().map(|(&p, x)| (p, x.cpu_ns)).collect()
    }

    /// Runs turns of 1,000 ns until `tid` is picked; leaves it running.
    fn run_until(s: &mut Shares, tid: Tid) -> Pick {
        loop {
            let p = s.choose(&mut |_, _| None).unwrap();
            s.take(p);
            s.check();
            if p.tid == tid {
                return p;
            }
            s.charge(p.tid, p.charge, 1000);
            s.requeue(p.tid, 0);
        }
    }

    #[test]
    fn processes_share_by_tickets() {
        let mut s = Shares::new();
        for (pid, tickets) in [(1, 300), (2, 200), (3, 100)] {
            // Each its own user, with the user's tickets in proportion.
            s.set_user_tickets(pid as Uid, tickets).unwrap();
            s.add_process(pid, pid as Uid);
            s.add_thread(pid * 10, pid, 0);
        }
        let cpu = run(&mut s, 6000, 1000);
        let total: u64 = cpu.values().sum();
        for (pid, want) in [(1, 3.0 / 6.0), (2, 2.0 / 6.0), (3, 1.0 / 6.0)] {
            let got = cpu[&pid] as f64 / total as f64;
            assert!(
                (got - want).abs() / want < 0.01,
                "process {pid}: {got} of the CPU, wanted {want}"
            );
        }
    }

    #[test]
    fn more_processes_win_a_user_nothing() {
        let mut s = Shares::new();
        // User 1 runs four processes, user 2 one: the users still split the CPU evenly.
        for pid in 1..=4 {
            s.add_process(pid, 1);
            s.add_thread(pid, pid, 0);
        }
        s.add_process(9, 2);
        s.add_thread(9, 9, 0);
        let cpu = run(&mut s, 8000, 1000);
        let user1: u64 = (1..=4).map(|p| cpu[&p]).sum();
        assert!((user1 as f64 / cpu[&9] as f64 - 1.0).abs() < 0.01, "{cpu:?}");
        // And within user 1, its processes split its half evenly.
        for pid in 1..=4 {
            assert!((cpu[&pid] as f64 / (user1 as f64 / 4.0) - 1.0).abs() < 0.02, "{cpu:?}");
        }
    }

    #[test]
    fn a_blocked_donor_gives_its_turns_to_the_receiver() {
        let mut s = Shares::new();
        // Three users; the client (user 1) waits on the server (user 2): the server gets two
        // of the three turns.
        for (pid, uid) in [(1, 1), (2, 2), (3, 3)] {
            s.add_process(pid, uid);
            s.add_thread(pid, pid, 0);
        }
        // The client blocks.
        let pick = run_until(&mut s, 1);
        s.block(pick.tid);
        s.donate(1, Some(2)).unwrap();
        let thread = |s: &Shares, t| s.thread_cpu_ns(t).unwrap() as f64;
        let (ran2, ran3) = (thread(&s, 2), thread(&s, 3));
        let charged = run(&mut s, 3000, 1000);
        let (got2, got3) = (thread(&s, 2) - ran2, thread(&s, 3) - ran3);
        assert!((got2 / got3 - 2.0).abs() < 0.02, "server {got2} ns, other {got3} ns");
        // The donor pays for its turns.
        assert!(
            (charged[&1] as f64 / charged[&3] as f64 - 1.0).abs() < 0.05,
            "{charged:?}"
        );
        // Ended: the server is back to its own share.
        s.donate(1, None).unwrap();
        let (ran2, ran3) = (thread(&s, 2), thread(&s, 3));
        let after = run(&mut s, 2000, 1000);
        assert_eq!(after[&1], charged[&1]);
        assert!(((thread(&s, 2) - ran2) / (thread(&s, 3) - ran3) - 1.0).abs() < 0.02);
    }

    #[test]
    fn donation_loops_are_refused() {
        let mut s = Shares::new();
        for pid in 1..=3 {
            s.add_process(pid, 1);
        }
        s.donate(1, Some(2)).unwrap();
        s.donate(2, Some(3)).unwrap();
        assert_eq!(s.donate(3, Some(1)), Err(ShareError::Loop));
        assert_eq!(s.donate(3, Some(3)), Err(ShareError::Loop));
        assert_eq!(s.donate(3, Some(7)), Err(ShareError::NoSuchProcess(7)));
        assert_eq!(s.set_process_tickets(1, 0), Err(ShareError::BadTickets(0)));
        s.check();
        // A receiver that goes ends the donations to it, and no other.
        s.remove_process(3);
        s.check();
        assert_eq!(s.donors.iter().copied().collect::<Vec<_>>(), [1]);
        s.remove_process(2);
        s.check();
        assert!(s.donors.is_empty());
    }

    #[test]
    fn a_sleeper_banks_no_credit() {
        let mut s = Shares::new();
        s.add_process(1, 1);
        s.add_process(2, 2);
        s.add_thread(1, 1, 0);
        s.add_thread(2, 2, 0);
        // Thread 2 sleeps while 1 runs alone for a long time.
        let p = run_until(&mut s, 2);
        s.block(p.tid);
        run(&mut s, 1000, 1000);
        s.wake(2, 0);
        // Afterwards they alternate instead of 2 taking the next thousand turns.
        let cpu = run(&mut s, 100, 1000);
        assert!(cpu[&2] <= 51 * 1000, "{cpu:?}");
    }

    #[test]
    fn a_thread_yielding_behind_a_long_waiter_piles_up_no_entries() {
        let mut s = Shares::new();
        s.add_process(1, 1);
        s.add_process(2, 1);
        s.set_process_tickets(2, MAX_TICKETS).unwrap();
        s.set_process_tickets(1, 1).unwrap();
        s.add_thread(1, 1, 0);
        s.add_thread(2, 2, 0);
        // Thread 1 waits (one ticket against a million) while thread 2 yields again and again.
        for now in 1..100_000 {
            let p = Pick {
                tid: 2,
                charge: 2,
                how: How::Share,
            };
            s.take(p);
            s.charge(2, 2, 1);
            s.requeue(2, now);
            assert_eq!(s.starving(now, u64::MAX), None);
        }
        assert!(s.fifo.len() <= 2 * s.threads.len() + 65, "{} entries", s.fifo.len());
        assert_eq!(
            s.candidates(100_000, 8).iter().map(|c| c.tid).collect::<Vec<_>>(),
            [1, 2]
        );
    }

    #[test]
    fn starvation_is_seen_in_arrival_order() {
        let mut s = Shares::new();
        s.add_process(1, 1);
        s.add_thread(1, 1, 0);
        s.add_thread(2, 1, 5);
        assert_eq!(s.starving(10, 100), None);
        assert_eq!(s.starving(100, 100), Some(1));
        s.take(Pick {
            tid: 1,
            charge: 1,
            how: How::Starved,
        });
        assert_eq!(s.starving(105, 100), Some(2));
        assert_eq!(s.candidates(105, 8).len(), 1);
    }
}
