//! Parents, children, sessions and exit statuses: the process tree a spawning program needs.
//!
//! A process spawned by another ([`Kernel::spawn_child`]) is its child: same credentials,
//! the parent's session, the parent's signal mask, and one of its user's program slots
//! (`Resource::Programs`, `EAGAIN` at the limit), held until its parent has waited for it. A
//! child that ends becomes a zombie in its parent's record, with its status, until the parent
//! waits ([`Process::wait_child`]); its parent gets `SIGCHLD`. A parent that ignores
//! `SIGCHLD` leaves no zombies (POSIX's `SA_NOCLDWAIT` behaviour, which Linux gives
//! `SIG_IGN`). A parent that ends first hands its living children to its session's leader
//! (the process `vino run` started), and its zombies are freed. When the leader ends, its
//! runner ends the session ([`Kernel::end_session`]): what still runs in it is killed, as a
//! terminal's hangup would.

use crate::error::{Errno, SysError, SysResult};
use crate::process::Process;
use crate::signal::{self, Disposition, SIGCHLD, SIGKILL};
use crate::{Credentials, Kernel, Pid, Resource, account::Charge};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code (its low 8 bits).
    Exited(u8),
    /// A signal ended it.
    Signaled(u8),
}

impl ExitStatus {
    /// The status as Linux's `wait` reports it.
    pub fn wait_status(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => i32::from(code) << 8,
            ExitStatus::Signaled(sig) => i32::from(sig & 0x7f),
        }
    }

    /// The status a shell shows: the code, or 128 plus the signal.
    pub fn shell_status(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => i32::from(code),
            ExitStatus::Signaled(sig) => 128 + i32::from(sig),
        }
    }
}

/// A process's place in the tree.
#[derive(Default)]
pub(crate) struct Family {
    /// Its parent, while it lives (0: none).
    pub parent: Pid,
    /// Its session: the pid of the process its runner started (itself, for that one).
    pub session: Pid,
    /// Children that still run.
    pub children: Vec<Pid>,
    /// Children that ended and are not yet waited for, with the slot each still holds.
    pub zombies: Vec<Zombie>,
    /// Waiting in `wait`.
    pub waiting: Vec<Waker>,
    /// The program slot a child holds while it runs (moved to its zombie when it ends).
    pub slot: Option<Charge>,
}

pub(crate) struct Zombie {
    pid: Pid,
    status: ExitStatus,
    _slot: Option<Charge>,
}

impl Family {
    fn wake(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }
}

impl Kernel {
    /// A new process, child of `parent`: its credentials, session and signal mask, and one of
    /// its user's program slots (`EAGAIN` when the user has none left).
    pub fn spawn_child(self: &Arc<Self>, parent: &Arc<Process>) -> SysResult<Arc<Process>> {
        let slot = parent.account().charge(Resource::Programs, 1)?;
        let child = self.spawn_with(parent.credentials().clone(), Some(parent));
        {
            let mut f = child.family.lock();
            f.slot = Some(slot);
        }
        // Registered as a child only now: an exit of the parent meanwhile found nothing to hand
        // on, so the child is checked against a parent that has gone.
        let mut pf = parent.family.lock();
        if !self.is_live(parent.pid()) {
            drop(pf);
            self.exit(child.pid());
            return Err(SysError::new(Errno::Srch, "the parent has ended"));
        }
        pf.children.push(child.pid());
        Ok(child)
    }

    fn is_live(&self, pid: Pid) -> bool {
        self.processes.lock().contains_key(&pid)
    }

    /// Sends `sig` (0: checks only) to process `pid` on behalf of `from`: `ESRCH` if there is
    /// none, `EPERM` if it is another user's and `from` is not privileged.
    pub fn signal(&self, from: &Credentials, pid: Pid, sig: u8) -> SysResult<()> {
        if sig > signal::SIGMAX {
            return Err(SysError::new(Errno::Inval, format!("no signal {sig}")));
        }
        let Some(target) = self.process(pid) else {
            return Err(SysError::new(Errno::Srch, format!("no process {pid}")));
        };
        if from.uid != target.credentials().uid && !from.privileged {
            return Err(SysError::new(Errno::Perm, format!("process {pid} is another user's")));
        }
        if sig != 0 {
            target.raise(sig);
        }
        Ok(())
    }

    /// Sends `sig` to every process of `session` (Ctrl-C at `vino run`); no such signal
    /// sends nothing (a client names it).
    pub fn signal_session(&self, session: Pid, sig: u8) {
        if !(1..=signal::SIGMAX).contains(&sig) {
            return;
        }
        for p in self.processes() {
            if p.session() == session {
                p.raise(sig);
            }
        }
    }

    /// The end of a session: what still runs in it is killed.
    pub fn end_session(&self, session: Pid) {
        for p in self.processes() {
            if p.session() == session {
                p.kill_by(SIGKILL);
            }
        }
    }

    /// The family side of an exit: children go to the session's leader, zombies are freed,
    /// the parent learns the status (or, if it ignores SIGCHLD, nobody keeps it).
    pub(crate) fn leave_family(&self, p: &Arc<Process>, status: ExitStatus) {
        let (parent, session, children, slot) = {
            let mut f = p.family.lock();
            f.zombies.clear();
            f.wake();
            (f.parent, f.session, std::mem::take(&mut f.children), f.slot.take())
        };
        let heir = self.process(session).filter(|s| s.pid() != p.pid());
        for c in children.iter().filter_map(|&c| self.process(c)) {
            c.family.lock().parent = heir.as_ref().map_or(0, |h| h.pid());
        }
        if let Some(h) = &heir {
            h.family.lock().children.extend(children);
        }
        let Some(parent) = (parent != 0).then(|| self.process(parent)).flatten() else {
            return;
        };
        let ignores = parent.signals.action(SIGCHLD) == Disposition::Ignore;
        {
            let mut pf = parent.family.lock();
            pf.children.retain(|&c| c != p.pid());
            if !ignores {
                pf.zombies.push(Zombie {
                    pid: p.pid(),
                    status,
                    _slot: slot,
                });
            }
            pf.wake();
        }
        parent.raise(SIGCHLD);
    }
}

/// What `wait` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// This child ended so.
    Child(Pid, ExitStatus),
    /// A matching child still runs (`WNOHANG`'s 0).
    Running,
}

impl Process {
    /// Its parent's pid, 0 if it has none (or it has gone).
    pub fn ppid(&self) -> Pid {
        self.family.lock().parent
    }

    /// Its session: the pid of the process its runner started.
    pub fn session(&self) -> Pid {
        self.family.lock().session
    }

    /// Children that still run.
    pub fn children(&self) -> Vec<Pid> {
        self.family.lock().children.clone()
    }

    /// Reaps a child that ended (`pid`, or any with `None`) without waiting: `ECHILD` if it has
    /// no such child.
    pub fn wait_child(&self, pid: Option<Pid>) -> SysResult<Waited> {
        let mut f = self.family.lock();
        let matches = |c: Pid| pid.is_none_or(|p| p == c);
        if let Some(i) = f.zombies.iter().position(|z| matches(z.pid)) {
            let z = f.zombies.remove(i);
            return Ok(Waited::Child(z.pid, z.status));
        }
        if f.children.iter().any(|&c| matches(c)) {
            return Ok(Waited::Running);
        }
        Err(SysError::new(Errno::Child, "no such child"))
    }

    /// Ready when [`Process::wait_child`] would not answer [`Waited::Running`] (a child
    /// ended, or none is left); it reaps nothing itself.
    pub fn poll_child(&self, pid: Option<Pid>, cx: &Context<'_>) -> Poll<()> {
        let mut f = self.family.lock();
        let matches = |c: Pid| pid.is_none_or(|p| p == c);
        if f.zombies.iter().any(|z| matches(z.pid)) || !f.children.iter().any(|&c| matches(c)) {
            return Poll::Ready(());
        }
        f.waiting.push(cx.waker().clone());
        Poll::Pending
    }

    /// Zombies waiting for this process to reap them.
    pub fn zombies(&self) -> usize {
        self.family.lock().zombies.len()
    }
}
