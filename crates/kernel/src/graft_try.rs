//! `vino graft try`: a candidate graft in shadow beside a graftpoint's live policy, on a ghost
//! model that follows its answers (`vino_cache::shadow`). Two graftpoints have ghosts:
//! `vas.pick_victim` (a ghost of the process's resident pages) and `file.compute_ra/<fd>`
//! (ghost caches of the file). `disk.pick_request` (privileged) is judged by agreement with the
//! live decisions and a stated model (`vino_iosched::shadow`); record and replay serve the
//! others.
//!
//! Who may: a process on its own graftpoints, and on those of another process of its user (or
//! any, if privileged), as it may signal one: a shadow changes nothing the target does and
//! sees only the target's own page identities. The shadow is the caller's: charged to it as a
//! graft (its code, memory, CPU; one of its grafts, so a user's shadows are bounded by its
//! graft limit), and stopped when the caller exits.

use crate::error::{Errno, SysError, SysResult};
use crate::process::Process;
use std::sync::Arc;
use vino_cache::{ComputeRa, OwnerCall, PickVictim, RaTry, RaTryReport, TRY_QUEUE, VictimTry, VictimTryReport};
use vino_graft::GraftPoint;
use vino_graft::shadow::DECISION_QUEUE;

/// Appended to a graftpoint's name, names the caller's candidate in shadow there, for the
/// calls an owner makes to its graft (`graft_write_memory`, `graft_call`, `graft_symbol`):
/// `vas.pick_victim#try`.
pub const TRY_SUFFIX: &str = "#try";

/// What a shadow found, by its ghost model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum TryReport {
    /// `vas.pick_victim`: misses live and would-be.
    Victim(VictimTryReport),
    /// `file.compute_ra`: the live read-ahead's ghost and the candidate's.
    ReadAhead(RaTryReport),
    /// `disk.pick_request`: agreement, and the next request's seek and wait.
    Disk(vino_iosched::shadow::DiskTryReport),
    /// `lock.grant/<fd>`: agreement, and the waiters granted and their wait.
    Lock(vino_locks::shadow::LockTryReport),
}

/// A shadow a process started, kept to stop it when the process exits.
pub(crate) enum Tried {
    Victim(Arc<VictimTry>),
    ReadAhead(Arc<RaTry>),
    Disk(Arc<vino_iosched::shadow::DiskTry>),
    Lock(Arc<vino_locks::shadow::LockTry>),
}

impl Tried {
    fn stop(&self) -> TryReport {
        match self {
            Tried::Victim(t) => TryReport::Victim(t.stop()),
            Tried::ReadAhead(t) => TryReport::ReadAhead(t.stop()),
            Tried::Disk(t) => TryReport::Disk(t.stop()),
            Tried::Lock(t) => TryReport::Lock(t.stop()),
        }
    }

    /// The shadow's address, to tell it from others.
    fn ptr(&self) -> *const () {
        match self {
            Tried::Victim(t) => Arc::as_ptr(t).cast(),
            Tried::ReadAhead(t) => Arc::as_ptr(t).cast(),
            Tried::Disk(t) => Arc::as_ptr(t).cast(),
            Tried::Lock(t) => Arc::as_ptr(t).cast(),
        }
    }

    fn running(&self) -> bool {
        match self {
            Tried::Victim(t) => t.running(),
            Tried::ReadAhead(t) => t.running(),
            Tried::Disk(t) => t.running(),
            Tried::Lock(t) => t.running(),
        }
    }
}

/// Options of a try.
#[derive(Debug, Clone, Copy)]
pub struct TryOptions {
    /// Follow 1 in `sample` pages (`vas.pick_victim`; 1: all, exact).
    pub sample: u32,
}

impl Default for TryOptions {
    fn default() -> Self {
        TryOptions { sample: 1 }
    }
}

const UNSUPPORTED: &str = "graft try follows vas.pick_victim, file.compute_ra/<fd>, disk.pick_request and lock.grant/<fd>; record and replay (vino graft record) serve the others";

impl Process {
    /// The process whose graftpoint a try or its stop names: this one, or `pid` of this user
    /// (any, if privileged).
    fn try_target(&self, pid: Option<u64>) -> SysResult<Arc<Process>> {
        let pid = pid.unwrap_or(self.pid());
        let target = self.kernel().process(pid);
        match target {
            Some(t) if t.pid() == self.pid() || self.cred.privileged || t.cred.uid == self.cred.uid => Ok(t),
            _ => Err(SysError::new(Errno::Srch, format!("no process {pid} of yours"))),
        }
    }

    /// Starts `wasm` in shadow beside the live policy at `point` of process `pid` (this one if
    /// `None`); it replaces a shadow already there.
    pub fn graft_try_start(&self, pid: Option<u64>, point: &str, wasm: &[u8], options: TryOptions) -> SysResult<()> {
        let target = self.try_target(pid)?;
        let owner = self.graft_owner();
        let cache = &self.kernel().cache;
        let tried = match ghost_of(point)? {
            Ghost::Victim => Tried::Victim(
                cache
                    .try_victim(target.pid(), wasm, owner, options.sample, TRY_QUEUE)
                    .map_err(vino_graft::GraftError::from)?,
            ),
            Ghost::ReadAhead(fd) => {
                let frames = cache.config().frames;
                let ra = &target.file(fd)?.ra;
                Tried::ReadAhead(
                    ra.try_start(wasm, owner, frames, DECISION_QUEUE)
                        .map_err(vino_graft::GraftError::from)?,
                )
            }
            Ghost::Lock(_) if target.pid() != self.pid() => {
                return Err(SysError::new(
                    Errno::Inval,
                    "lock.grant is tried on the caller's own descriptor",
                ));
            }
            Ghost::Lock(fd) => {
                // Only who may graft the file's lock.grant (its creator, or privileged).
                let slot = self.lock_grant_authorized(fd, point)?;
                let ino = self.fstat(fd)?.ino;
                Tried::Lock(
                    self.kernel()
                        .locks
                        .manager
                        .try_start(ino, &slot, wasm, owner, options.sample, DECISION_QUEUE)
                        .map_err(vino_graft::GraftError::from)?,
                )
            }
            Ghost::Disk => {
                self.may_try_global(point)?;
                Tried::Disk(
                    self.kernel()
                        .sched
                        .try_start(wasm, owner, options.sample, DECISION_QUEUE)
                        .map_err(vino_graft::GraftError::from)?,
                )
            }
        };
        let mut tries = self.tries.lock();
        // Those stopped since (by their stop, or replaced) go.
        tries.retain(Tried::running);
        tries.push(tried);
        Ok(())
    }

    /// Stops the shadow at `point` of process `pid` (this one if `None`): what it found.
    pub fn graft_try_stop(&self, pid: Option<u64>, point: &str) -> SysResult<TryReport> {
        let target = self.try_target(pid)?;
        let none = || SysError::new(Errno::NoEnt, format!("no graft is tried at {point}"));
        Ok(match ghost_of(point)? {
            Ghost::Victim => TryReport::Victim(self.kernel().cache.try_victim_stop(target.pid()).ok_or_else(none)?),
            Ghost::ReadAhead(fd) => TryReport::ReadAhead(target.file(fd)?.ra.try_stop().ok_or_else(none)?),
            Ghost::Disk => {
                self.may_try_global(point)?;
                TryReport::Disk(self.kernel().sched.try_stop().ok_or_else(none)?)
            }
            Ghost::Lock(fd) => {
                self.lock_grant_authorized(fd, point)?;
                let ino = self.fstat(fd)?.ino;
                TryReport::Lock(self.kernel().locks.manager.try_stop(ino).ok_or_else(none)?)
            }
        })
    }

    /// The file's `lock.grant` slot, if this process may graft it at `point`
    /// (`lock.grant/<fd>`).
    fn lock_grant_authorized(
        &self,
        fd: crate::Fd,
        point: &str,
    ) -> SysResult<Arc<vino_graft::GraftSlot<vino_locks::LockGrant>>> {
        self.namespace.authorized(self.principal(), point)?;
        self.lock_grant(fd)
    }

    /// A global graftpoint is tried only by a process that may graft it (privileged).
    fn may_try_global(&self, point: &str) -> SysResult<()> {
        self.kernel().global.authorized(self.principal(), point)?;
        Ok(())
    }

    /// The owner's call to its own candidate at `point` (a graftpoint name followed by
    /// [`TRY_SUFFIX`]): its memory written, a control function called, a symbol looked up, in
    /// order with what the live path offered it. `None` if `point` does not name a shadow.
    pub(crate) fn try_owner_call(&self, point: &str, call: OwnerCall) -> Option<SysResult<i64>> {
        let base = point.strip_suffix(TRY_SUFFIX)?;
        let none = || SysError::new(Errno::NoEnt, format!("no graft is tried at {base}"));
        // Only the process that started a shadow talks to it: another (the tried process, or
        // another of the user's) would spend the starter's charges.
        let mine = |shadow: *const ()| {
            let started = self.tries.lock().iter().any(|t| t.ptr() == shadow);
            started.then_some(()).ok_or_else(none)
        };
        let done = ghost_of(base).and_then(|ghost| match ghost {
            Ghost::Victim => {
                let shadow = self.kernel().cache.victim_try(self.pid()).ok_or_else(none)?;
                mine(Arc::as_ptr(&shadow).cast())?;
                Ok(shadow.owner(call)?)
            }
            Ghost::ReadAhead(fd) => {
                let shadow = self.file(fd)?.ra.try_handle().ok_or_else(none)?;
                mine(Arc::as_ptr(&shadow).cast())?;
                Ok(shadow.owner(call)?)
            }
            Ghost::Disk => {
                let shadow = self.kernel().sched.try_handle().ok_or_else(none)?;
                mine(Arc::as_ptr(&shadow).cast())?;
                Ok(shadow.owner(call)?)
            }
            Ghost::Lock(fd) => {
                let ino = self.fstat(fd)?.ino;
                let shadow = self.kernel().locks.manager.try_handle(ino).ok_or_else(none)?;
                mine(Arc::as_ptr(&shadow).cast())?;
                Ok(shadow.owner(call)?)
            }
        });
        Some(done)
    }

    /// Stops the shadows this process started (it exits).
    pub(crate) fn stop_tries(&self) {
        let tries = std::mem::take(&mut *self.tries.lock());
        for t in tries {
            t.stop();
        }
    }
}

/// The ghost model of a graftpoint a try names.
enum Ghost {
    Victim,
    ReadAhead(crate::Fd),
    Disk,
    Lock(crate::Fd),
}

fn ghost_of(point: &str) -> SysResult<Ghost> {
    match point.split_once('/') {
        None if point == PickVictim::NAME => Ok(Ghost::Victim),
        None if point == vino_iosched::PickRequest::NAME => Ok(Ghost::Disk),
        Some((base, fd)) if base == ComputeRa::NAME => fd
            .parse()
            .map(Ghost::ReadAhead)
            .map_err(|_| SysError::new(Errno::Inval, format!("{point}: not a descriptor"))),
        Some((base, fd)) if base == vino_locks::LockGrant::NAME => fd
            .parse()
            .map(Ghost::Lock)
            .map_err(|_| SysError::new(Errno::Inval, format!("{point}: not a descriptor"))),
        _ => Err(SysError::new(Errno::NotSup, format!("{point}: {UNSUPPORTED}"))),
    }
}
