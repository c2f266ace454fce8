//! The calls front ends and benchmarks use instead of reaching into the subsystems: what they
//! may read of the cache, the I/O scheduler and the lock manager, the few privileged calls of
//! the kernel's owner, and the rules on what one user may see and change of another's.

use crate::error::{Errno, SysError, SysResult};
use crate::files::Fd;
use crate::process::Process;
use crate::{Credentials, Kernel, Pid, Resource, Stat};
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::Backend;
use vino_cache::{CacheCounters, CacheStats, PickVictim};
use vino_fs::{BlockBuddy, FsStats, QuotaUsage};
use vino_graft::account::Charge;
use vino_graft::{GraftSlot, SlotInfo};
use vino_iosched::SchedStats;
use vino_locks::{Lock, LockStats};
use vino_sched::{SchedStats as CpuStats, ThreadInfo as CpuThread};

impl Kernel {
    /// The inode `ino` as the file system has it, with no permission check: the mount's own
    /// look at the nodes it holds (the root's generation, a file's size to pick a transport).
    /// The mount stays privileged in this one way because it serves Linux's own permission
    /// checks: Linux asks about a node only after checking the caller's right to reach it, and
    /// every request the mount serves for a caller goes through that caller's [`Process`].
    pub fn node_stat(&self, ino: u64) -> SysResult<Stat> {
        Ok(self.fs.stat(ino)?)
    }

    /// True if `viewer` may see what the process `owner` is and has (its accounts, its grafts
    /// and their details): it is privileged, or `owner` is a live process of the same uid.
    pub fn sees(&self, viewer: &Credentials, owner: Pid) -> bool {
        viewer.privileged || self.process(owner).is_some_and(|p| p.credentials().uid == viewer.uid)
    }

    /// A graftpoint as `viewer` may see it: a graft loaded by a process it may not see keeps
    /// its point and policy but loses its details (owner, hash, statistics, log).
    pub(crate) fn visible_slot(&self, viewer: &Credentials, mut s: SlotInfo) -> SlotInfo {
        if s.graft.as_ref().is_some_and(|g| !self.sees(viewer, g.owner)) {
            s.graft = None;
            s.stats = None;
        }
        s
    }

    /// Takes a connection's place for user `uid` (its socket's peer), held until the [`Charge`]
    /// drops: root may use every place of the total, the other users together all but
    /// root's reserve ([`LimitsConfig::root_reserved`]), each at most its own limit. `EUSERS`
    /// says which limit refuses it.
    ///
    /// [`LimitsConfig::root_reserved`]: crate::account::LimitsConfig::root_reserved
    pub fn connect(&self, uid: u32) -> SysResult<Charge> {
        let r = Resource::Connections;
        self.accounts.user(uid).charge(r, 1).map_err(|e| {
            let total = self.accounts.config().total.get(r);
            let why = if e.account != self.accounts.total().label() {
                format!("too many connections for uid {uid} ({})", e.limit)
            } else if e.limit < total {
                let kept = total - e.limit;
                format!(
                    "too many connections for users other than root ({}; {kept} kept for root)",
                    e.limit
                )
            } else {
                format!("too many connections ({total})")
            };
            SysError::new(Errno::Users, why)
        })
    }

    /// User `uid`'s tickets (its share of the CPU against other users').
    pub fn user_tickets(&self, uid: u32) -> u32 {
        self.cpu.user_tickets(uid)
    }

    /// The CPU scheduler's counters.
    pub fn cpu_stats(&self) -> CpuStats {
        self.cpu.stats()
    }

    /// Calls `hook` at every tick of the CPU scheduler (a runtime's epoch, for preemption).
    pub fn on_cpu_tick(&self, key: &'static str, hook: Arc<dyn Fn() + Send + Sync>) {
        self.cpu.on_tick(key, hook);
    }

    /// The page cache's totals (frames, resident, dirty, hits and misses of everyone).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The page cache's hits and misses on inode `ino`'s pages, whoever caused them.
    pub fn file_cache_counters(&self, ino: u64) -> CacheCounters {
        self.cache.object_counters(ino)
    }

    /// Sizes and free space of the file system (as any process's `statfs`).
    pub fn fs_stats(&self) -> FsStats {
        self.fs.stats()
    }

    /// What user `uid` holds of its disk quota.
    pub fn quota_usage(&self, uid: u32) -> QuotaUsage {
        self.fs.quota_usage(uid)
    }

    /// Recounts every user's quota from the inodes and compares (`EIO` if they differ).
    pub fn verify_quota(&self) -> SysResult<()> {
        Ok(self.fs.verify_quota()?)
    }

    /// Writes every dirty page and drops every clean one: a cold cache for a measurement. The
    /// kernel's owner only (no process may make the others' pages cold).
    pub fn drop_clean_pages(&self) -> SysResult<()> {
        Ok(self.cache.drop_clean()?)
    }

    /// The I/O scheduler's counters.
    pub fn io_stats(&self) -> SchedStats {
        self.sched.stats()
    }

    /// The device queue's backend and depth.
    pub fn io_queue(&self) -> (Backend, usize) {
        (self.sched.backend(), self.sched.depth())
    }

    /// The lock manager's counters.
    pub fn lock_stats(&self) -> LockStats {
        self.locks.manager.stats()
    }

    /// The locks held on inode `ino`, and those waiting for it.
    pub fn locks_on(&self, ino: u64) -> (Vec<Lock>, Vec<Lock>) {
        (self.locks.manager.held(ino), self.locks.manager.waiting(ino))
    }

    /// Panics if the lock table breaks one of its rules (tests).
    pub fn check_lock_table(&self) {
        self.locks.manager.check_invariants();
    }

    /// Cancels the blocking lock waits of process `pid` (`EINTR` to each): its client hung up.
    pub fn cancel_lock_waits(&self, pid: Pid) {
        self.locks.manager.cancel_waits(pid);
    }

    /// The blocks of inode `ino`'s file, in order (0 for a hole): where a layout landed.
    pub fn block_map(&self, ino: u64) -> SysResult<Vec<u64>> {
        Ok(self.fs.block_map(ino)?)
    }

    /// The cylinder group of block `b`.
    pub fn block_group(&self, b: u64) -> u32 {
        self.fs.geometry().group_of(b)
    }

    /// The accounts of the users `viewer` may see: its own, or every user's if it is
    /// privileged (what one user holds says what it does, so it is not another's to read).
    pub fn user_accounts(&self, viewer: &Credentials) -> Vec<UserAccount> {
        let accounts = self.accounts();
        accounts
            .users()
            .into_iter()
            .filter(|(uid, _)| viewer.privileged || *uid == viewer.uid)
            .map(|(uid, usage)| {
                let account = accounts.user(uid);
                UserAccount {
                    uid,
                    held: Resource::ALL
                        .iter()
                        .map(|&r| (r, account.used(r), account.limit(r)))
                        .collect(),
                    cpu_ns: usage.cpu_ns,
                    work_ns: account.cpu_work_ns(),
                }
            })
            .collect()
    }
}

/// One user's account as [`Kernel::user_accounts`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserAccount {
    pub uid: u32,
    /// Each resource: what the user holds and its limit.
    pub held: Vec<(Resource, u64, u64)>,
    /// CPU spent in the user's grafts, control calls and compiles.
    pub cpu_ns: u64,
    /// CPU the kernel's threads spent serving the user.
    pub work_ns: u64,
}

impl Process {
    /// This process's page-cache hits and misses.
    pub fn cache_counters(&self) -> CacheCounters {
        self.kernel().cache.process_counters(self.pid())
    }

    /// Pages this process keeps in the cache.
    pub fn cache_resident(&self) -> usize {
        self.kernel().cache.resident_pages(self.pid())
    }

    /// This process's `vas.pick_victim` graftpoint, for kernel-side code (benchmarks bind
    /// native policies to it; processes use the graft calls).
    pub fn pick_victim(&self) -> Arc<GraftSlot<PickVictim>> {
        self.kernel().cache.register_process(self.pid())
    }

    /// The `file.block_buddy` graftpoint of an open file, for kernel-side code as
    /// [`Process::pick_victim`].
    pub fn block_buddy(&self, fd: Fd) -> SysResult<Arc<GraftSlot<BlockBuddy>>> {
        let ino = self.inode(fd)?;
        Ok(self.kernel().fs.block_buddy(ino)?)
    }

    /// This process's tickets in its user's currency (`None` once it exited).
    pub fn tickets(&self) -> Option<u32> {
        self.kernel().cpu.process_tickets(self.pid())
    }

    /// CPU time this process's threads used, as the CPU scheduler charged it.
    pub fn cpu_time(&self) -> Option<Duration> {
        self.kernel().cpu.process_cpu(self.pid())
    }

    /// This process's threads and what each used.
    pub fn threads(&self) -> Vec<CpuThread> {
        self.kernel().cpu.threads_of(self.pid())
    }

    /// Sets the tickets of process `pid` in its user's currency: this process's own, another of
    /// its uid's, or any if privileged (`ESRCH` otherwise, as if it did not exist).
    pub fn set_tickets_of(&self, pid: Pid, tickets: u32) -> SysResult<()> {
        if !self.kernel().sees(self.credentials(), pid) {
            return Err(SysError::new(Errno::Srch, format!("no process {pid} of yours")));
        }
        self.kernel()
            .cpu
            .set_process_tickets(pid, tickets)
            .map_err(|e| SysError::new(Errno::Inval, e.to_string()))
    }

    /// Sets user `uid`'s tickets: privileged processes only (`EPERM`).
    pub fn set_user_tickets(&self, uid: u32, tickets: u32) -> SysResult<()> {
        if !self.credentials().privileged {
            return Err(SysError::new(
                Errno::Perm,
                "only a privileged user sets a user's tickets",
            ));
        }
        self.kernel()
            .cpu
            .set_user_tickets(uid, tickets)
            .map_err(|e| SysError::new(Errno::Inval, e.to_string()))
    }
}
