//! `net.congestion`: a process's own TCP congestion control, as a graft.
//!
//! Linux lets only root replace congestion control (BPF `struct_ops` for `tcp_congestion_ops`
//! needs CAP_BPF and CAP_NET_ADMIN). Here any process may, for its own connections: every TCP
//! socket it creates (or accepts) runs its congestion events through the process's
//! `net.congestion` slot. The shape is `tcp_congestion_ops`': the kernel keeps a small block of
//! the graft's state per connection (Linux's `inet_csk_ca`), hands it to the graft with each
//! event and keeps what the graft leaves there only when the call succeeds, so one graft serves
//! all of a process's connections and a failed call changes none of them.
//!
//! Every connection also runs the built-in controller beside the graft, on the same events:
//! it is the default that decides when a call fails (a trap, its budget, a window of zero or
//! past [`MAX_WINDOW`]), and the whole controller once a failing graft is unloaded. So no
//! graft can stall a connection or flood a link beyond what its window allows, and taking a
//! graft away leaves each connection with a window that followed its traffic all along.
//!
//! Calls are few: new data acknowledged, a duplicate ACK, a loss, a timeout, the segment size
//! set, and the start and end of idleness. ACKs that acknowledge nothing reach the graft only
//! when they change whether anything is in flight, and a transmission only when it ends an idle
//! spell (Linux's `CA_EVENT_TX_START`): the per-segment paths never leave the kernel.
//!
//! The calls run on the stack's thread, which every user's packets need. Each is bounded (its
//! budget), and so is each user's total: its grafts' work there is charged to its
//! [`StackShare`], at most [`SHARE`] of every [`SHARE_WINDOW`] of the stack's clock; past it,
//! the built-in decides that user's events until the next window. A graft that answers validly
//! but slowly, on many busy connections, cannot make the other users' packets wait behind it.

use parking_lot::Mutex;
/// The stack's built-in controllers, one of which runs beside every graft.
pub use smoltcp::socket::tcp::CongestionControl;
use smoltcp::socket::tcp::{BuiltinController, CongestionHook};
use smoltcp::time::Instant;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI64, AtomicU64};
use vino_graft::{GraftPoint, GraftSlot, Invalid};

/// Words of graft state the kernel keeps per connection (Linux keeps 104 bytes).
pub const STATE_WORDS: usize = 16;

/// The largest window a graft may answer: 1 GiB, TCP's largest with window scaling.
pub const MAX_WINDOW: u64 = 1 << 30;

/// The smallest window a connection runs on: TCP's default segment (RFC 1122). A graft's answer
/// below it is raised to it, so no answer stalls a connection; the built-ins never go below it
/// on a link whose segments are at least that large.
pub const MIN_WINDOW: u64 = 536;

/// How much of the stack's thread one user's congestion and packet-order grafts may take:
/// [`SHARE`] of work in every [`SHARE_WINDOW`] of the stack's clock (5%). Reno and CUBIC as grafts take about 140
/// ns a call, so a user must make tens of thousands of calls a second to reach it.
pub const SHARE: std::time::Duration = std::time::Duration::from_millis(5);
pub const SHARE_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// One user's share of the stack's thread for its grafts there, congestion and packet order
/// (see [`SHARE`]): the work its calls did in the current window, measured as the graft
/// runtime measures budgets (fuel by default, so a simulation's runs agree), and how many
/// calls the default decided because the share was spent.
#[derive(Debug)]
pub struct StackShare {
    /// The work allowed in each window.
    limit: std::time::Duration,
    /// The current window's start (µs on the stack's clock) and the work done in it (ns).
    /// Atomics, not a lock: every call comes under the stack's lock already.
    start_us: AtomicI64,
    spent_ns: AtomicU64,
    skipped: AtomicU64,
}

impl Default for StackShare {
    fn default() -> Self {
        StackShare::with_limit(SHARE)
    }
}

impl StackShare {
    /// A share of `limit` of work in each [`SHARE_WINDOW`] (tests use a small one).
    pub fn with_limit(limit: std::time::Duration) -> StackShare {
        StackShare {
            limit,
            start_us: AtomicI64::new(i64::MIN),
            spent_ns: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Whether a call at `now` fits in the share.
    pub(crate) fn admit(&self, now: Instant) -> bool {
        let now = now.total_micros();
        let start = self.start_us.load(Relaxed);
        if now.saturating_sub(start) >= SHARE_WINDOW.as_micros() as i64 || now < start {
            self.start_us.store(now, Relaxed);
            self.spent_ns.store(0, Relaxed);
        }
        let fits = self.spent_ns.load(Relaxed) < self.limit.as_nanos() as u64;
        if !fits {
            self.skipped.fetch_add(1, Relaxed);
        }
        fits
    }

    pub(crate) fn charge(&self, work: std::time::Duration) {
        self.spent_ns.fetch_add(work.as_nanos() as u64, Relaxed);
    }

    /// Calls the default decided because the share was spent.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Relaxed)
    }
}

/// Where the state block starts in the argument area (after the fixed fields).
const STATE_AT: usize = 48;

/// The built-in controllers start from this segment size and this remote window until the
/// connection says otherwise (smoltcp's defaults; a graft sees the same numbers).
const DEFAULT_MSS: usize = 1024;
const DEFAULT_RWND: usize = 64 * DEFAULT_MSS;

/// What happened on the connection (the entry point's first argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum CcEvent {
    /// The graft meets the connection: its state is all zero. `len` is 0.
    Init = 0,
    /// `len` new bytes were acknowledged (0: an ACK of nothing that changed idleness).
    Ack = 1,
    /// A duplicate ACK of `len` bytes' worth.
    DupAck = 2,
    /// Three duplicate ACKs inferred a loss.
    Loss = 3,
    /// The retransmission timer fired.
    Rto = 4,
    /// The segment size changed (it is in the argument area).
    Mss = 5,
    /// The connection transmits after an idle spell.
    TxStart = 6,
}

/// One call's arguments.
#[derive(Debug, Clone, Copy)]
pub struct CcArgs {
    pub event: CcEvent,
    pub now_us: u64,
    pub len: u64,
    pub in_flight: u64,
    /// The window in force before the event.
    pub cwnd: u64,
    pub mss: u64,
    /// The largest window the peer advertised, at least 64 KiB.
    pub rwnd: u64,
    /// Smoothed round-trip time, 0 before the first measurement.
    pub srtt_us: u64,
    /// The built-in controller's window after the same event: the default's answer.
    pub builtin: u64,
    pub state: [u64; STATE_WORDS],
}

/// A call's answer: the window and the state to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcAnswer {
    pub cwnd: u64,
    pub state: [u64; STATE_WORDS],
}

/// The graftpoint (`net_congestion(event, now_us, len, in_flight) -> window`).
///
/// The argument area holds, little-endian: `cwnd`, `mss`, `rwnd`, `srtt_us` (u64 each, at 0,
/// 8, 16, 24), 16 bytes reserved, then the connection's state, [`STATE_WORDS`] u64 at 48.
/// The answer is the new window in bytes, in `1..=MAX_WINDOW` (one below [`MIN_WINDOW`] counts
/// as that); the state the graft leaves in the area is kept for the connection's next call.
pub struct Congestion;

impl GraftPoint for Congestion {
    const NAME: &'static str = "net.congestion";
    /// On the stack's thread, with its lock held: every connection waits on it.
    const BUDGET: std::time::Duration = std::time::Duration::from_micros(20);
    const USES_ARG_AREA: bool = true;
    /// Each user's calls are charged to its share of the stack's thread ([`StackShare`]).
    const MEASURE_WORK: bool = true;
    type Env = ();
    type Args<'a> = CcArgs;
    type Output = CcAnswer;
    type Params = (i32, i64, i64, i64);
    type Results = i64;

    fn default_policy(_: &(), a: &CcArgs) -> CcAnswer {
        CcAnswer {
            cwnd: a.builtin,
            state: a.state,
        }
    }

    fn encode(_: &(), a: &CcArgs, area: &mut [u8]) -> (i32, i64, i64, i64) {
        let fixed = [a.cwnd, a.mss, a.rwnd, a.srtt_us, 0, 0];
        for (i, word) in fixed.iter().chain(a.state.iter()).enumerate() {
            area[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        (a.event as i32, a.now_us as i64, a.len as i64, a.in_flight as i64)
    }

    fn decode(_: &(), a: &CcArgs, window: i64, area: &[u8]) -> Result<CcAnswer, Invalid> {
        if !(1..=MAX_WINDOW as i64).contains(&window) {
            return Err(Invalid(format!(
                "congestion window {window} after {:?} is not in 1..={MAX_WINDOW}",
                a.event
            )));
        }
        let mut state = [0u64; STATE_WORDS];
        for (i, word) in state.iter_mut().enumerate() {
            let at = STATE_AT + i * 8;
            *word = u64::from_le_bytes(area[at..at + 8].try_into().expect("8 bytes"));
        }
        Ok(CcAnswer {
            cwnd: (window as u64).max(MIN_WINDOW),
            state,
        })
    }
}

/// One window change of a connection: when, after what, and the window.
pub type TraceEntry = (u64, CcEvent, u64);

/// How a process's connections are controlled: its slot, the built-in beside it, and (for
/// tests and measurements) a record of every window change.
#[derive(Clone)]
pub struct CongestionConfig {
    pub slot: Arc<GraftSlot<Congestion>>,
    pub builtin: CongestionControl,
    pub trace: Option<Arc<Mutex<Vec<TraceEntry>>>>,
    /// The user's share of the stack's thread (one for all of a user's processes).
    pub share: Arc<StackShare>,
}

impl CongestionConfig {
    /// The slot's graft beside CUBIC, the stack's own choice, its calls charged to `share`.
    pub fn new(slot: Arc<GraftSlot<Congestion>>, share: Arc<StackShare>) -> Self {
        CongestionConfig {
            slot,
            builtin: CongestionControl::Cubic,
            trace: None,
            share,
        }
    }

    /// The controller of one new connection.
    pub(crate) fn controller(&self) -> Box<dyn CongestionHook> {
        Box::new(GraftedController {
            config: self.clone(),
            builtin: BuiltinController::new(self.builtin),
            serial: 0,
            cwnd: 0,
            state: [0; STATE_WORDS],
            mss: DEFAULT_MSS,
            rwnd: DEFAULT_RWND,
            srtt_us: 0,
            idle: false,
            traced: 0,
        })
    }
}

/// A connection's congestion controller: the process's graft, with the built-in beside it.
struct GraftedController {
    config: CongestionConfig,
    builtin: BuiltinController,
    /// The binding `state` belongs to (0: none; the built-in controls).
    serial: u64,
    /// The window in force while a graft controls.
    cwnd: u64,
    state: [u64; STATE_WORDS],
    mss: usize,
    rwnd: usize,
    srtt_us: u64,
    /// The graft was last told nothing is in flight.
    idle: bool,
    /// The last window recorded in the trace.
    traced: u64,
}

impl std::fmt::Debug for GraftedController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraftedController")
            .field("slot", &self.config.slot.name())
            .field("serial", &self.serial)
            .field("cwnd", &self.cwnd)
            .finish_non_exhaustive()
    }
}

impl GraftedController {
    /// Runs `event` through the graft, meeting it first if it is new to this connection. With
    /// nothing bound, the built-in's window stands.
    fn call(&mut self, event: CcEvent, now: Instant, len: usize, in_flight: usize) {
        let serial = self.config.slot.binding_serial();
        if serial != self.serial {
            self.serial = serial;
            self.state = [0; STATE_WORDS];
            self.idle = false;
            self.cwnd = self.builtin.window() as u64;
            if serial != 0 {
                self.ask(CcEvent::Init, now, 0, in_flight);
            }
        }
        if serial != 0 {
            self.ask(event, now, len, in_flight);
        }
        self.record(now, event);
    }

    fn ask(&mut self, event: CcEvent, now: Instant, len: usize, in_flight: usize) {
        let args = CcArgs {
            event,
            now_us: now.total_micros().max(0) as u64,
            len: len as u64,
            in_flight: in_flight as u64,
            cwnd: self.cwnd,
            mss: self.mss as u64,
            rwnd: self.rwnd as u64,
            srtt_us: self.srtt_us,
            builtin: self.builtin.window() as u64,
            state: self.state,
        };
        if !self.config.share.admit(now) {
            // The user's share is spent: the built-in decides, the graft's state waits.
            self.cwnd = self.builtin.window() as u64;
            return;
        }
        let answer = self.config.slot.invoke(&args);
        self.config.share.charge(vino_graft::take_last_call_time());
        self.cwnd = answer.cwnd;
        self.state = answer.state;
    }

    fn record(&mut self, now: Instant, event: CcEvent) {
        if let Some(trace) = &self.config.trace {
            let window = self.window() as u64;
            if window != self.traced {
                self.traced = window;
                trace.lock().push((now.total_micros().max(0) as u64, event, window));
            }
        }
    }
}

impl CongestionHook for GraftedController {
    fn window(&self) -> usize {
        if self.serial == 0 {
            self.builtin.window()
        } else {
            self.cwnd as usize
        }
    }

    fn set_remote_window(&mut self, remote_window: usize) {
        self.builtin.set_remote_window(remote_window);
        self.rwnd = self.rwnd.max(remote_window);
    }

    fn on_ack(&mut self, now: Instant, len: usize, in_flight: usize, srtt_ms: u32) {
        self.builtin.on_ack(now, len, in_flight, srtt_ms);
        self.srtt_us = u64::from(srtt_ms) * 1000;
        // An ACK of nothing matters to a controller only where idleness begins or ends.
        if len > 0 || (in_flight == 0) != self.idle {
            self.call(CcEvent::Ack, now, len, in_flight);
            self.idle = in_flight == 0;
        }
    }

    fn on_dup_ack(&mut self, now: Instant, len: usize, in_flight: usize) {
        self.builtin.on_dup_ack(now, len, in_flight);
        self.call(CcEvent::DupAck, now, len, in_flight);
    }

    fn on_rto(&mut self, now: Instant, in_flight: usize) {
        self.builtin.on_rto(now, in_flight);
        self.call(CcEvent::Rto, now, 0, in_flight);
        self.idle = false;
    }

    fn on_loss(&mut self, now: Instant, in_flight: usize) {
        self.builtin.on_loss(now, in_flight);
        self.call(CcEvent::Loss, now, 0, in_flight);
        self.idle = false;
    }

    fn pre_transmit(&mut self, now: Instant) {
        self.builtin.pre_transmit(now);
    }

    fn post_transmit(&mut self, now: Instant, len: usize) {
        self.builtin.post_transmit(now, len);
        if self.idle {
            self.idle = false;
            self.call(CcEvent::TxStart, now, len, 0);
        }
    }

    fn set_mss(&mut self, mss: usize) {
        self.builtin.set_mss(mss);
        self.mss = mss;
        // No clock here: the segment size is set while a handshake segment is processed, and
        // a graft that needs the time has it at the next event.
        self.call(CcEvent::Mss, Instant::from_micros(0), mss, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(event: CcEvent) -> CcArgs {
        CcArgs {
            event,
            now_us: 5,
            len: 1000,
            in_flight: 2000,
            cwnd: 4096,
            mss: 1024,
            rwnd: 65536,
            srtt_us: 3000,
            builtin: 3072,
            state: [7; STATE_WORDS],
        }
    }

    #[test]
    fn windows_are_checked_and_state_comes_back() {
        let a = args(CcEvent::Ack);
        let mut area = vec![0u8; 4096];
        assert_eq!(Congestion::encode(&(), &a, &mut area), (1, 5, 1000, 2000));
        assert_eq!(u64::from_le_bytes(area[16..24].try_into().unwrap()), 65536);
        area[STATE_AT..STATE_AT + 8].copy_from_slice(&9u64.to_le_bytes());
        let answer = Congestion::decode(&(), &a, 8192, &area).unwrap();
        assert_eq!(answer.cwnd, 8192);
        assert_eq!(answer.state[0], 9);
        assert_eq!(answer.state[1], 7);
        assert_eq!(
            Congestion::decode(&(), &a, 1, &area).unwrap().cwnd,
            MIN_WINDOW,
            "raised to the smallest window"
        );
        for bad in [0, -1, MAX_WINDOW as i64 + 1, i64::MIN] {
            assert!(Congestion::decode(&(), &a, bad, &area).is_err(), "{bad}");
        }
        let default = Congestion::default_policy(&(), &a);
        assert_eq!((default.cwnd, default.state), (3072, a.state));
    }
}
