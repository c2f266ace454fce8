//! Signals: what a process was sent, what it blocks, and what it does with each (POSIX's
//! rules, Linux's numbers). The kernel decides what a signal's arrival means; a program's
//! runner carries it out at the program's next safe point: it asks [`Process::next_signal`]
//! what to do (run a handler through the program's trampoline, end, stop) and waits on
//! [`Process::poll_signal`] beside whatever else it waits for, so a blocked call returns
//! `EINTR` (or resumes, for `SA_RESTART`) when a handled signal comes.
//!
//! Standard signals do not queue: one pending bit each, so what a sender can make the kernel
//! hold for a process is bounded by design (64 bits).

use crate::error::{Errno, SysError, SysResult};
use crate::process::Process;
use parking_lot::Mutex;
use std::task::{Context, Poll, Waker};

pub const SIGHUP: u8 = 1;
pub const SIGINT: u8 = 2;
pub const SIGQUIT: u8 = 3;
pub const SIGABRT: u8 = 6;
pub const SIGKILL: u8 = 9;
pub const SIGUSR1: u8 = 10;
pub const SIGUSR2: u8 = 12;
pub const SIGPIPE: u8 = 13;
pub const SIGALRM: u8 = 14;
pub const SIGTERM: u8 = 15;
pub const SIGCHLD: u8 = 17;
pub const SIGCONT: u8 = 18;
pub const SIGSTOP: u8 = 19;
pub const SIGTSTP: u8 = 20;
pub const SIGTTIN: u8 = 21;
pub const SIGTTOU: u8 = 22;
pub const SIGURG: u8 = 23;
pub const SIGWINCH: u8 = 28;
/// Highest signal number (Linux's real-time signals included, handled as standard ones).
pub const SIGMAX: u8 = 64;

/// A set of signals: bit `sig - 1` for `sig`.
pub type SigSet = u64;

pub fn bit(sig: u8) -> SigSet {
    1u64 << (sig - 1)
}

/// Signals no process may catch, ignore or block.
const UNBLOCKABLE: SigSet = (1 << (SIGKILL - 1)) | (1 << (SIGSTOP - 1));

/// What a process does with a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Disposition {
    #[default]
    Default,
    Ignore,
    /// Its program's handler runs; `restart`: a blocking call it interrupts resumes.
    Handle {
        restart: bool,
    },
}

/// What a signal does to a process that takes the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultAction {
    Terminate,
    Ignore,
    Stop,
    Continue,
}

pub fn default_action(sig: u8) -> DefaultAction {
    match sig {
        SIGCHLD | SIGURG | SIGWINCH => DefaultAction::Ignore,
        SIGCONT => DefaultAction::Continue,
        SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU => DefaultAction::Stop,
        _ => DefaultAction::Terminate,
    }
}

/// What a runner is to do for a signal now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Run the program's handler for `sig` (with `sig` blocked while it runs).
    Handle { sig: u8, restart: bool },
    /// End the process: it dies of `sig`.
    Terminate(u8),
    /// Stop until a `SIGCONT` (or a kill).
    Stop,
}

/// How `sigprocmask` changes the mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskHow {
    Block,
    Unblock,
    Set,
}

/// A process's signal state.
#[derive(Default)]
pub(crate) struct Signals {
    state: Mutex<SigState>,
    /// Whether anything is pending, kept with `state.pending`: read without the lock on the
    /// way out of every I/O call, where nothing is pending almost always.
    any_pending: std::sync::atomic::AtomicBool,
}

struct SigState {
    pending: SigSet,
    mask: SigSet,
    actions: [Disposition; SIGMAX as usize],
    stopped: bool,
    /// Waiting for a signal to deliver (a blocked call) or for a `SIGCONT`.
    waiting: Vec<Waker>,
}

impl Default for SigState {
    fn default() -> SigState {
        SigState {
            pending: 0,
            mask: 0,
            actions: [Disposition::Default; SIGMAX as usize],
            stopped: false,
            waiting: Vec::new(),
        }
    }
}

impl SigState {
    fn action(&self, sig: u8) -> Disposition {
        self.actions[sig as usize - 1]
    }

    /// Pending and not blocked.
    fn deliverable(&self) -> SigSet {
        self.pending & !self.mask
    }

    fn wake(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }
}

fn check(sig: u8) -> SysResult<()> {
    if sig == 0 || sig > SIGMAX {
        return Err(SysError::new(Errno::Inval, format!("no signal {sig}")));
    }
    Ok(())
}

impl Signals {
    /// A child's state at spawn (POSIX exec): the mask kept, handled signals back to their
    /// default (the handler is in the parent's memory, not the child's), ignored ones ignored.
    pub(crate) fn inherit(&self) -> Signals {
        let s = self.state.lock();
        let mut actions = s.actions;
        for a in &mut actions {
            if matches!(a, Disposition::Handle { .. }) {
                *a = Disposition::Default;
            }
        }
        Signals {
            state: Mutex::new(SigState {
                mask: s.mask,
                actions,
                ..SigState::default()
            }),
            any_pending: Default::default(),
        }
    }

    /// `sig` arrives. Returns whether the process must end now (an unblocked signal whose
    /// default is to terminate): the caller kills it.
    pub(crate) fn post(&self, sig: u8) -> Option<u8> {
        let mut s = self.state.lock();
        if sig == SIGCONT {
            // Continues a stopped process whatever it does with the signal.
            s.stopped = false;
            s.pending &= !(bit(SIGSTOP) | bit(SIGTSTP) | bit(SIGTTIN) | bit(SIGTTOU));
        }
        if default_action(sig) == DefaultAction::Stop {
            s.pending &= !bit(SIGCONT);
        }
        let ignored = match s.action(sig) {
            Disposition::Ignore => true,
            Disposition::Default => matches!(default_action(sig), DefaultAction::Ignore | DefaultAction::Continue),
            Disposition::Handle { .. } => false,
        };
        if ignored {
            s.wake();
            return None;
        }
        s.pending |= bit(sig);
        self.any_pending.store(true, std::sync::atomic::Ordering::Release);
        if s.mask & bit(sig) != 0 {
            return None;
        }
        s.wake();
        (s.action(sig) == Disposition::Default && default_action(sig) == DefaultAction::Terminate).then_some(sig)
    }

    pub(crate) fn set_action(&self, sig: u8, action: Disposition) -> SysResult<Disposition> {
        check(sig)?;
        if bit(sig) & UNBLOCKABLE != 0 {
            return Err(SysError::new(
                Errno::Inval,
                "SIGKILL and SIGSTOP cannot be caught or ignored",
            ));
        }
        let mut s = self.state.lock();
        let old = std::mem::replace(&mut s.actions[sig as usize - 1], action);
        if action == Disposition::Ignore
            || (action == Disposition::Default && default_action(sig) == DefaultAction::Ignore)
        {
            // POSIX: a pending signal set to be ignored is discarded.
            s.pending &= !bit(sig);
        }
        Ok(old)
    }

    pub(crate) fn action(&self, sig: u8) -> Disposition {
        if check(sig).is_err() {
            return Disposition::Default;
        }
        self.state.lock().action(sig)
    }

    /// Changes the mask; returns the old one. What it unblocks may end the process (returned
    /// as for [`Signals::post`]).
    pub(crate) fn set_mask(&self, how: MaskHow, set: SigSet) -> (SigSet, Option<u8>) {
        let mut s = self.state.lock();
        let old = s.mask;
        let set = set & !UNBLOCKABLE;
        s.mask = match how {
            MaskHow::Block => old | set,
            MaskHow::Unblock => old & !set,
            MaskHow::Set => set,
        };
        if s.deliverable() != 0 {
            s.wake();
        }
        (old, s.terminating())
    }

    pub(crate) fn mask(&self) -> SigSet {
        self.state.lock().mask
    }

    pub(crate) fn pending(&self) -> SigSet {
        self.state.lock().pending
    }

    /// The next thing to do: the lowest deliverable signal's handler, death or stop.
    pub(crate) fn next(&self) -> Option<Delivery> {
        let mut s = self.state.lock();
        loop {
            let ready = s.deliverable();
            if ready == 0 {
                // Cleared only here, under the lock: a stale `true` costs a look, never a miss.
                self.any_pending
                    .store(s.pending != 0, std::sync::atomic::Ordering::Release);
                return None;
            }
            let sig = ready.trailing_zeros() as u8 + 1;
            s.pending &= !bit(sig);
            match s.action(sig) {
                Disposition::Handle { restart } => return Some(Delivery::Handle { sig, restart }),
                Disposition::Ignore => {}
                Disposition::Default => match default_action(sig) {
                    DefaultAction::Terminate => return Some(Delivery::Terminate(sig)),
                    DefaultAction::Stop => {
                        s.stopped = true;
                        return Some(Delivery::Stop);
                    }
                    DefaultAction::Ignore | DefaultAction::Continue => {}
                },
            }
        }
    }

    /// Ready when something is deliverable; a waiter registers to be woken when it is.
    pub(crate) fn poll(&self, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.state.lock();
        if s.deliverable() != 0 {
            return Poll::Ready(());
        }
        if !s.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            s.waiting.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Takes a deliverable stop (a signal whose default stops, taken by default): the process
    /// is stopped from now on. What the engine checks at each tick, so that a program that
    /// makes no calls stops too.
    pub(crate) fn take_stop(&self) -> bool {
        let mut s = self.state.lock();
        let stops = bit(SIGSTOP) | bit(SIGTSTP) | bit(SIGTTIN) | bit(SIGTTOU);
        let ready = s.deliverable() & stops;
        if ready == 0 {
            return false;
        }
        let taken: SigSet = [SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU]
            .into_iter()
            .filter(|&sig| ready & bit(sig) != 0 && s.action(sig) == Disposition::Default)
            .map(bit)
            .fold(0, |a, b| a | b);
        if taken == 0 {
            return false;
        }
        s.pending &= !taken;
        s.stopped = true;
        true
    }

    pub(crate) fn stopped(&self) -> bool {
        self.state.lock().stopped
    }

    /// Ready once the process is no longer stopped.
    pub(crate) fn poll_continued(&self, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.state.lock();
        if !s.stopped {
            return Poll::Ready(());
        }
        s.waiting.push(cx.waker().clone());
        Poll::Pending
    }

    /// Wakes every waiter (a kill: they look again and find the process ending).
    pub(crate) fn wake_all(&self) {
        self.state.lock().wake();
    }
}

impl SigState {
    fn terminating(&self) -> Option<u8> {
        let ready = self.deliverable();
        (1..=SIGMAX).find(|&sig| {
            ready & bit(sig) != 0
                && self.action(sig) == Disposition::Default
                && default_action(sig) == DefaultAction::Terminate
        })
    }
}

impl Process {
    /// Sets what this process does with `sig`; returns what it did. `EINVAL` for SIGKILL,
    /// SIGSTOP or no such signal.
    pub fn signal_action(&self, sig: u8, action: Disposition) -> SysResult<Disposition> {
        self.signals.set_action(sig, action)
    }

    /// What this process does with `sig` now.
    pub fn signal_disposition(&self, sig: u8) -> Disposition {
        self.signals.action(sig)
    }

    /// Changes the signals this process blocks; returns the old mask. A signal it unblocks
    /// whose default ends it ends it now.
    pub fn signal_mask(&self, how: MaskHow, set: SigSet) -> SigSet {
        let (old, terminate) = self.signals.set_mask(how, set);
        if let Some(sig) = terminate {
            self.kill_by(sig);
        }
        old
    }

    /// The signals blocked now.
    pub fn blocked_signals(&self) -> SigSet {
        self.signals.mask()
    }

    /// Signals sent and not yet delivered.
    pub fn pending_signals(&self) -> SigSet {
        self.signals.pending()
    }

    /// What the runner is to do now for a signal (its handler, its death, a stop); `None` if
    /// nothing is deliverable.
    pub fn next_signal(&self) -> Option<Delivery> {
        self.signals.next()
    }

    /// Ready when a signal is deliverable (or the process was killed): a blocked call's cue to
    /// return `EINTR`.
    pub fn poll_signal(&self, cx: &Context<'_>) -> Poll<()> {
        if self.killed() {
            return Poll::Ready(());
        }
        self.signals.poll(cx)
    }

    /// Whether a signal is deliverable or the process was killed (a blocked call gives up).
    pub fn interrupted(&self) -> bool {
        self.killed()
            || (self.signals.any_pending.load(std::sync::atomic::Ordering::Acquire)
                && self.signals.state.lock().deliverable() != 0)
    }

    /// Takes a pending stop if there is one (see `Signals::take_stop`): true if the process
    /// is to stop now.
    pub fn take_stop(&self) -> bool {
        self.signals.take_stop()
    }

    /// Whether the process is stopped (a `SIGSTOP` taken, no `SIGCONT` since).
    pub fn stopped(&self) -> bool {
        self.signals.stopped()
    }

    /// Ready once the process continues (or was killed).
    pub fn poll_continued(&self, cx: &Context<'_>) -> Poll<()> {
        if self.killed() {
            return Poll::Ready(());
        }
        self.signals.poll_continued(cx)
    }

    /// Sends `sig` to this process, from the kernel itself (SIGPIPE to a writer, SIGCHLD to a
    /// parent): no permission applies.
    pub fn raise(&self, sig: u8) {
        if check(sig).is_err() {
            return;
        }
        if sig == SIGKILL {
            self.kill_by(SIGKILL);
            return;
        }
        if let Some(sig) = self.signals.post(sig) {
            self.kill_by(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handled_signals_wait_for_the_mask_and_come_lowest_first() {
        let s = Signals::default();
        s.set_action(SIGUSR1, Disposition::Handle { restart: false }).unwrap();
        s.set_action(SIGTERM, Disposition::Handle { restart: true }).unwrap();
        s.set_mask(MaskHow::Block, bit(SIGUSR1));
        assert_eq!(s.post(SIGTERM), None);
        assert_eq!(s.post(SIGUSR1), None);
        assert_eq!(
            s.next(),
            Some(Delivery::Handle {
                sig: SIGTERM,
                restart: true
            })
        );
        assert_eq!(s.next(), None, "SIGUSR1 is blocked");
        s.set_mask(MaskHow::Unblock, bit(SIGUSR1));
        assert_eq!(
            s.next(),
            Some(Delivery::Handle {
                sig: SIGUSR1,
                restart: false
            })
        );
    }

    #[test]
    fn defaults_terminate_ignore_or_stop_as_posix_says() {
        let s = Signals::default();
        assert_eq!(s.post(SIGCHLD), None);
        assert_eq!(s.pending(), 0, "SIGCHLD's default is to ignore it");
        assert_eq!(s.post(SIGTERM), Some(SIGTERM));
        let s = Signals::default();
        s.set_mask(MaskHow::Block, bit(SIGTERM));
        assert_eq!(s.post(SIGTERM), None, "blocked: it waits");
        let (_, now) = s.set_mask(MaskHow::Unblock, bit(SIGTERM));
        assert_eq!(now, Some(SIGTERM), "unblocked, its default ends the process");
        let s = Signals::default();
        assert_eq!(s.post(SIGTSTP), None);
        assert_eq!(s.next(), Some(Delivery::Stop));
        assert!(s.stopped());
        s.post(SIGCONT);
        assert!(!s.stopped());
    }

    #[test]
    fn kill_and_stop_cannot_be_caught_or_blocked() {
        let s = Signals::default();
        assert!(s.set_action(SIGKILL, Disposition::Ignore).is_err());
        assert!(s.set_action(SIGSTOP, Disposition::Handle { restart: false }).is_err());
        s.set_mask(MaskHow::Set, u64::MAX);
        assert_eq!(s.mask() & UNBLOCKABLE, 0);
    }

    #[test]
    fn a_child_keeps_the_mask_and_ignored_signals_but_not_handlers() {
        let s = Signals::default();
        s.set_action(SIGTERM, Disposition::Handle { restart: false }).unwrap();
        s.set_action(SIGINT, Disposition::Ignore).unwrap();
        s.set_mask(MaskHow::Block, bit(SIGUSR1));
        let c = s.inherit();
        assert_eq!(c.action(SIGTERM), Disposition::Default);
        assert_eq!(c.action(SIGINT), Disposition::Ignore);
        assert_eq!(c.mask(), bit(SIGUSR1));
    }
}
