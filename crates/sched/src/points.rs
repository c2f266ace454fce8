//! The scheduler's graftpoints.
//!
//! `sched.pick_next` (global, privileged): which runnable thread a worker runs next.
//! `sched.pick_thread` (one per process, its own): which of the process's runnable threads runs
//! on the process's turn. The kernel picks the process by its share, so a graft on it can only
//! reorder its own work, never take more CPU than the share (as Cao's rule lets a process pick
//! only among its own pages).
//!
//! Both see the candidates in their argument area, 32 bytes each in the order they became
//! runnable: `tid` (u64), `pid` (u64), `uid` (u32), `tickets` (u32), `waited_ns` (u64); the
//! entry point gets their number and the default's choice, and returns an index. Anything else
//! is invalid and the default decides.

use crate::share::{Candidate, MAX_TICKETS, Pid};
use std::time::Duration;
use vino_graft::{CallError, Callables, Deferred, GraftPoint, Invalid};

/// Most candidates one decision sees.
pub const PICK_MAX: usize = 64;
/// Bytes of one candidate in the argument area.
pub const ENTRY_BYTES: usize = 32;
/// The CPU budget of one decision: a worker waits for it, and every user's threads with it.
pub const PICK_BUDGET: Duration = Duration::from_micros(20);

/// What a decision is asked about.
pub struct PickArgs<'a> {
    pub candidates: &'a [Candidate],
    /// The index the kernel's own policy would choose.
    pub default: usize,
}

fn encode(args: &PickArgs<'_>, area: &mut [u8]) -> (i32, i32) {
    let n = args.candidates.len().min(PICK_MAX).min(area.len() / ENTRY_BYTES);
    for (slot, c) in area.chunks_exact_mut(ENTRY_BYTES).zip(&args.candidates[..n]) {
        slot[0..8].copy_from_slice(&c.tid.to_le_bytes());
        slot[8..16].copy_from_slice(&c.pid.to_le_bytes());
        slot[16..20].copy_from_slice(&c.uid.to_le_bytes());
        slot[20..24].copy_from_slice(&c.tickets.to_le_bytes());
        slot[24..32].copy_from_slice(&c.waited_ns.to_le_bytes());
    }
    (n as i32, args.default.min(n.saturating_sub(1)) as i32)
}

fn decode(args: &PickArgs<'_>, choice: i32) -> Result<usize, Invalid> {
    let n = args.candidates.len().min(PICK_MAX);
    usize::try_from(choice)
        .ok()
        .filter(|&i| i < n)
        .ok_or_else(|| Invalid(format!("thread index {choice} is not one of the {n} runnable")))
}

/// The graftpoint `sched.pick_next`.
pub struct PickNext;

impl GraftPoint for PickNext {
    const NAME: &'static str = "sched.pick_next";
    const USES_ARG_AREA: bool = true;
    const RECORDS_DEFAULT: bool = true;
    const BUDGET: Duration = PICK_BUDGET;
    type Env = ();
    type Args<'a> = PickArgs<'a>;
    type Output = usize;
    type Params = (i32, i32);
    type Results = i32;

    fn default_policy(_: &(), args: &PickArgs<'_>) -> usize {
        args.default
    }

    fn encode(_: &(), args: &PickArgs<'_>, area: &mut [u8]) -> (i32, i32) {
        encode(args, area)
    }

    fn decode(_: &(), args: &PickArgs<'_>, choice: i32, _: &[u8]) -> Result<usize, Invalid> {
        decode(args, choice)
    }

    fn answer(_: &(), _: &PickArgs<'_>, choice: &usize, _: &mut [u8]) -> Option<i32> {
        (*choice < PICK_MAX).then_some(*choice as i32)
    }
}

/// The graftpoint `sched.pick_thread` of one process.
pub struct PickThread;

/// Most `vino_tickets_give` calls one `sched.pick_thread` call may make.
pub const GIFTS_MAX: usize = 8;

/// What a `sched.pick_thread` policy sees: its process, and the tickets its graft's committed
/// calls gave away, waiting for the scheduler to move them.
#[derive(Debug)]
pub struct ThreadEnv {
    pid: Pid,
    gifts: Deferred<(Pid, u32)>,
}

impl ThreadEnv {
    pub fn new(pid: Pid) -> Self {
        ThreadEnv {
            pid,
            // The scheduler takes them after each pick: only picks racing past it wait longer.
            gifts: Deferred::new(GIFTS_MAX, 4 * GIFTS_MAX),
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The committed gifts not made yet: (receiver, tickets), oldest first.
    pub fn take_gifts(&self) -> Vec<(Pid, u32)> {
        self.gifts.take()
    }
}

/// `vino_tickets_give(pid, tickets) -> 0 | -errno`: gives `tickets` of the process's tickets to
/// process `pid` of the same user (lottery scheduling's ticket transfer, in the user's currency:
/// the user's share against others does not move). Checked now (`-EINVAL`: no tickets, more than
/// any process may hold, the process itself; `-ENOSPC`: more than [`GIFTS_MAX`] in this call);
/// made by the scheduler after the call commits, if `pid` is then a live process of the same
/// user and the giver keeps at least one ticket, else dropped. A call that fails afterwards has
/// its gifts dropped.
fn tickets_give(env: &ThreadEnv, to: i64, tickets: i32) -> Result<i32, CallError> {
    const EINVAL: i32 = -22;
    const ENOSPC: i32 = -28;
    let (Ok(to), Ok(n)) = (u64::try_from(to), u32::try_from(tickets)) else {
        return Ok(EINVAL);
    };
    if to == env.pid || n == 0 || n > MAX_TICKETS {
        return Ok(EINVAL);
    }
    Ok(if env.gifts.ask((to, n)) { 0 } else { ENOSPC })
}

impl GraftPoint for PickThread {
    const NAME: &'static str = "sched.pick_thread";
    const CALLABLE: &'static [&'static str] = &["vino_tickets_give"];
    const USES_ARG_AREA: bool = true;
    const RECORDS_DEFAULT: bool = true;
    const BUDGET: Duration = PICK_BUDGET;
    type Env = ThreadEnv;
    type Args<'a> = PickArgs<'a>;
    type Output = usize;
    type Params = (i32, i32);
    type Results = i32;

    fn default_policy(_: &ThreadEnv, args: &PickArgs<'_>) -> usize {
        args.default
    }

    fn encode(env: &ThreadEnv, args: &PickArgs<'_>, area: &mut [u8]) -> (i32, i32) {
        env.gifts.begin_call();
        encode(args, area)
    }

    fn decode(_: &ThreadEnv, args: &PickArgs<'_>, choice: i32, _: &[u8]) -> Result<usize, Invalid> {
        decode(args, choice)
    }

    fn answer(_: &ThreadEnv, _: &PickArgs<'_>, choice: &usize, _: &mut [u8]) -> Option<i32> {
        (*choice < PICK_MAX).then_some(*choice as i32)
    }

    fn callables(c: &mut Callables<ThreadEnv>) {
        c.func2("vino_tickets_give", tickets_give);
    }
}

/// What a timer's firing tells its graft.
pub struct TimerArgs {
    /// Firings so far, this one included.
    pub count: u64,
    /// How late this firing is against its period's start, ns.
    pub late_ns: u64,
}

/// The graftpoint `event.timer` of one process (its environment is the process's id): called
/// every period of the process's timer, on a thread of the process, so its CPU is the
/// process's. `event_timer(count: i64, late_ns: i64) -> i32`; a negative result is invalid
/// (the invocation aborts). Default: nothing.
pub struct Timer;

impl GraftPoint for Timer {
    const NAME: &'static str = "event.timer";
    type Env = u64;
    type Args<'a> = TimerArgs;
    type Output = ();
    type Params = (i64, i64);
    type Results = i32;

    fn default_policy(_: &u64, _: &TimerArgs) {}

    fn encode(_: &u64, args: &TimerArgs, _: &mut [u8]) -> (i64, i64) {
        (args.count as i64, args.late_ns.min(i64::MAX as u64) as i64)
    }

    fn decode(_: &u64, _: &TimerArgs, result: i32, _: &[u8]) -> Result<(), Invalid> {
        if result < 0 {
            return Err(Invalid(format!("a timer graft returned {result}")));
        }
        Ok(())
    }
}
