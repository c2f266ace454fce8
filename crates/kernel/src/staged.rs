//! Graft modules staged to be bound elsewhere. A program on the FUSE mount binds a graft to
//! one of its descriptors with an ioctl, and FUSE passes only ioctls of a fixed size of at most
//! a few KiB: the module goes to the kernel first, over a client connection
//! ([`crate::Process::graft_stage`]), and the ioctl carries the token that came back
//! ([`crate::Process::graft_load_staged`]).
//!
//! A token is good once, for the user who staged it, for [`STAGED_TTL`]; a process holds at
//! most [`STAGED_PER_PROCESS`] modules at a time, their bytes charged to it as graft code, and
//! they go when it exits.

use crate::{Errno, Pid, SysError, SysResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vino_graft::account::{Account, Charge, Resource};

/// How long a staged module waits to be bound.
pub const STAGED_TTL: Duration = Duration::from_secs(60);
/// Modules one process may have staged at a time.
pub const STAGED_PER_PROCESS: usize = 4;

struct Entry {
    uid: u32,
    pid: Pid,
    wasm: Vec<u8>,
    staged: Instant,
    _charge: Charge,
}

#[derive(Default)]
pub(crate) struct Staged {
    entries: Mutex<HashMap<u64, Entry>>,
    /// Makes tokens no one can predict from the ones they got.
    keys: std::collections::hash_map::RandomState,
    counter: AtomicU64,
}

impl Staged {
    /// Keeps `wasm` for `uid`'s process `pid`; returns its token.
    pub(crate) fn stage(&self, uid: u32, pid: Pid, account: &Arc<Account>, wasm: &[u8]) -> SysResult<u64> {
        let charge = account.charge(Resource::GraftCode, wasm.len() as u64)?;
        let mut entries = self.entries.lock();
        entries.retain(|_, e| e.staged.elapsed() < STAGED_TTL);
        if entries.values().filter(|e| e.pid == pid).count() >= STAGED_PER_PROCESS {
            return Err(SysError::new(
                Errno::Again,
                format!("{STAGED_PER_PROCESS} modules are staged already; bind or let them expire"),
            ));
        }
        let token = loop {
            let token = self.keys.hash_one(self.counter.fetch_add(1, Ordering::Relaxed));
            if token != 0 && !entries.contains_key(&token) {
                break token;
            }
        };
        entries.insert(
            token,
            Entry {
                uid,
                pid,
                wasm: wasm.to_vec(),
                staged: Instant::now(),
                _charge: charge,
            },
        );
        Ok(token)
    }

    /// The module staged under `token`, taken for `uid`.
    pub(crate) fn take(&self, token: u64, uid: u32) -> SysResult<Vec<u8>> {
        let mut entries = self.entries.lock();
        let gone = || SysError::new(Errno::NoEnt, "no module is staged under this token (expired or used)");
        let entry = entries.get(&token).ok_or_else(gone)?;
        if entry.staged.elapsed() >= STAGED_TTL {
            entries.remove(&token);
            return Err(gone());
        }
        if entry.uid != uid {
            return Err(SysError::new(Errno::Perm, "the module was staged by another user"));
        }
        Ok(entries.remove(&token).map(|e| e.wasm).expect("found above"))
    }

    /// Drops what `pid` staged (it exited).
    pub(crate) fn release(&self, pid: Pid) {
        self.entries.lock().retain(|_, e| e.pid != pid);
    }
}
