//! `vino graft try`: a candidate graft in shadow beside a graftpoint's live policy, on a ghost
//! model that follows its answers (`vino_cache::shadow`). Two graftpoints have ghosts:
//! `vas.pick_victim` (a ghost of the process's resident pages) and `file.compute_ra/<fd>`
//! (ghost caches of the file). `disk.pick_request` (privileged), `lock.grant/<fd>`,
//! `sched.pick_next` (privileged) and `sched.pick_thread` are judged by agreement with the live
//! decisions and a stated model (`vino_iosched::shadow`, `vino_locks::shadow`,
//! `vino_sched::shadow`); record and replay serve the others.
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
    /// `sched.pick_next`, `sched.pick_thread`: agreement, and the chosen thread's wait.
    Sched(vino_sched::shadow::SchedTryReport),
}

/// A shadow a process started, kept for its owner's calls and to stop it when the process
/// exits.
pub(crate) struct Tried {
    /// The graftpoint as the try named it.
    point: String,
    shadow: Shadowed,
}

#[derive(Clone)]
enum Shadowed {
    Victim(Arc<VictimTry>),
    ReadAhead(Arc<RaTry>),
    Disk(Arc<vino_iosched::shadow::DiskTry>),
    Lock(Arc<vino_locks::shadow::LockTry>),
    Sched(Arc<vino_sched::shadow::SchedTry>),
}

/// `$body` with `$t` the shadow, whichever kind it is (each derefs to its queue, a `Fed`).
macro_rules! each {
    ($shadowed:expr, $t:ident => $body:expr) => {
        match $shadowed {
            Shadowed::Victim($t) => $body,
            Shadowed::ReadAhead($t) => $body,
            Shadowed::Disk($t) => $body,
            Shadowed::Lock($t) => $body,
            Shadowed::Sched($t) => $body,
        }
    };
}

impl Tried {
    fn stop(&self) -> TryReport {
        match &self.shadow {
            Shadowed::Victim(t) => TryReport::Victim(t.stop()),
            Shadowed::ReadAhead(t) => TryReport::ReadAhead(t.stop()),
            Shadowed::Disk(t) => TryReport::Disk(t.stop()),
            Shadowed::Lock(t) => TryReport::Lock(t.stop()),
            Shadowed::Sched(t) => TryReport::Sched(t.stop()),
        }
    }

    fn running(&self) -> bool {
        each!(&self.shadow, t => t.running())
    }

    fn owner(&self, call: OwnerCall) -> Result<i64, vino_graft::GraftError> {
        each!(&self.shadow, t => t.owner(call))
    }
}

/// Options of a try.
#[derive(Debug, Clone, Copy, Default)]
pub struct TryOptions {
    /// `vas.pick_victim`: follow 1 in `sample` pages (none or 1: all, exact). Graftpoints
    /// judged by agreement: offer 1 in `sample` decisions; none: the kernel chooses, to hold
    /// the shadow under its share of a core (`vino_graft::shadow::Sampler`).
    pub sample: Option<u32>,
}

const UNSUPPORTED: &str = "graft try follows vas.pick_victim, file.compute_ra/<fd>, disk.pick_request, lock.grant/<fd>, sched.pick_next and sched.pick_thread; record and replay (vino graft record) serve the others";

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
        let cpu = &self.kernel().cpu;
        let shadow = match ghost_of(point)? {
            Ghost::Victim => Shadowed::Victim(
                cache
                    .try_victim(target.pid(), wasm, owner, options.sample.unwrap_or(1), TRY_QUEUE)
                    .map_err(vino_graft::GraftError::from)?,
            ),
            Ghost::ReadAhead(fd) => {
                let frames = cache.config().frames;
                let ra = &target.file(fd)?.ra;
                Shadowed::ReadAhead(
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
                Shadowed::Lock(
                    self.kernel()
                        .locks
                        .manager
                        .try_start(ino, &slot, wasm, owner, options.sample, DECISION_QUEUE)
                        .map_err(vino_graft::GraftError::from)?,
                )
            }
            Ghost::Disk => {
                self.may_try_global(point)?;
                Shadowed::Disk(
                    self.kernel()
                        .sched
                        .try_start(wasm, owner, options.sample, DECISION_QUEUE)
                        .map_err(vino_graft::GraftError::from)?,
                )
            }
            Ghost::PickNext => {
                self.may_try_global(point)?;
                Shadowed::Sched(
                    cpu.try_start(None, wasm, owner, options.sample, DECISION_QUEUE)
                        .map_err(vino_graft::GraftError::from)?,
                )
            }
            Ghost::PickThread => Shadowed::Sched(
                cpu.try_start(Some(target.pid()), wasm, owner, options.sample, DECISION_QUEUE)
                    .map_err(vino_graft::GraftError::from)?,
            ),
        };
        let mut tries = self.tries.lock();
        // Those stopped since (by their stop, or replaced) go.
        tries.retain(Tried::running);
        tries.push(Tried {
            point: point.to_string(),
            shadow,
        });
        Ok(())
    }

    /// Starts the module staged under `token` (by a client of this process's user) in shadow at
    /// `point` of this process ([`Process::graft_try_start`]): the mount's `VINO_IOC_TRY`.
    pub fn graft_try_start_staged(&self, point: &str, token: u64, options: TryOptions) -> SysResult<()> {
        let wasm = self.kernel().staged.take(token, self.cred.uid)?;
        self.graft_try_start(None, point, &wasm, options)
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
            Ghost::PickNext => {
                self.may_try_global(point)?;
                TryReport::Sched(self.kernel().cpu.try_stop(None).ok_or_else(none)?)
            }
            Ghost::PickThread => TryReport::Sched(self.kernel().cpu.try_stop(Some(target.pid())).ok_or_else(none)?),
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
    /// Only the process that started a shadow talks to it (another, the tried process or
    /// another of the user's, would spend the starter's charges); of its shadows at one
    /// graftpoint name (on several processes), the newest.
    pub(crate) fn try_owner_call(&self, point: &str, call: OwnerCall) -> Option<SysResult<i64>> {
        let base = point.strip_suffix(TRY_SUFFIX)?;
        // The answer is waited for without the list held.
        let found = self
            .tries
            .lock()
            .iter()
            .rev()
            .find(|t| t.point == base && t.running())
            .map(|t| Tried {
                point: t.point.clone(),
                shadow: t.shadow.clone(),
            });
        let Some(tried) = found else {
            return Some(Err(SysError::new(Errno::NoEnt, format!("no graft is tried at {base}"))));
        };
        Some(tried.owner(call).map_err(SysError::from))
    }

    /// Stops the shadows this process started (it exits).
    pub(crate) fn stop_tries(&self) {
        let tries = std::mem::take(&mut *self.tries.lock());
        for t in tries {
            t.stop();
        }
    }
}

/// What another module, `wasm`, would have done on `recording`, on the ghost model `graft try`
/// uses at the recording's graftpoint, against what the recorded graft did. At
/// `file.compute_ra`, ghost caches of `frames` pages fed the recorded reads, the candidate's
/// side following `replay` (its decisions kept); at `vas.pick_victim`, a ghost of the process's
/// pages fed the recorded accesses, whose evictions `wasm` chooses as it runs. `None` if the
/// graftpoint has no ghost (the others are judged by agreement, which the replay gives).
pub fn replayed_ghost(
    recording: &vino_graft::record::Recording,
    replay: &vino_graft::replay::ReplayReport,
    wasm: &[u8],
    frames: usize,
) -> Option<Result<TryReport, String>> {
    match recording.header.point.as_str() {
        ComputeRa::NAME => Some(vino_cache::ra_replayed(recording, replay, frames).map(TryReport::ReadAhead)),
        PickVictim::NAME => Some(vino_cache::victim_replayed(recording, wasm).map(TryReport::Victim)),
        _ => None,
    }
}

/// Whether `vino graft try` has a model for graftpoint `point` (its base name, without an
/// object suffix).
pub fn has_model(point: &str) -> bool {
    let base = point.split_once('/').map_or(point, |(b, _)| b);
    let named = match base {
        "file.compute_ra" | "lock.grant" => format!("{base}/0"),
        _ => base.to_string(),
    };
    ghost_of(&named).is_ok()
}

/// The ghost model of a graftpoint a try names.
enum Ghost {
    Victim,
    ReadAhead(crate::Fd),
    Disk,
    Lock(crate::Fd),
    PickNext,
    PickThread,
}

fn ghost_of(point: &str) -> SysResult<Ghost> {
    match point.split_once('/') {
        None if point == PickVictim::NAME => Ok(Ghost::Victim),
        None if point == vino_iosched::PickRequest::NAME => Ok(Ghost::Disk),
        None if point == vino_sched::PickNext::NAME => Ok(Ghost::PickNext),
        None if point == vino_sched::PickThread::NAME => Ok(Ghost::PickThread),
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
