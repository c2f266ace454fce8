//! File-wide grafts: a graft bound to a file rather than to one descriptor.
//!
//! `file.compute_ra` is a graftpoint of each open file (thesis 3.4: `open_file_o`), so a graft
//! loaded on a descriptor helps only that descriptor. A file-wide graft is kept with the file:
//! every later open of it, by any process (the FUSE mount included), gets the graft on its new
//! descriptor, still owned (and charged to) the process that bound it. Only the file's owner
//! or a privileged process may bind one; it goes away when the binding process exits or
//! unbinds it, and is then unloaded from every descriptor it reached.

use crate::error::{Errno, SysError, SysResult};
use crate::{Account, Kernel, Pid, Process, Resource};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use vino_cache::{ComputeRa, ReadAhead};
use vino_graft::account::Charge;
use vino_graft::{GraftInfo, GraftPoint, GraftSlot, GraftStats, Owner};

/// The graftpoints a file-wide graft may name.
pub const FILE_WIDE_POINTS: &[&str] = &[ComputeRa::NAME];

struct Binding {
    id: u64,
    ino: u64,
    path: String,
    point: String,
    wasm: Arc<[u8]>,
    hash: String,
    loader: Pid,
    /// The descriptors' slots it was loaded into (they go away with their descriptors).
    slots: Vec<Weak<GraftSlot<ComputeRa>>>,
    /// What it did on descriptors closed since (their slots' counters die with them).
    retired: GraftStats,
    /// The binder's account: the binding counts against its bindings, and every copy loaded on
    /// a descriptor (whoever opened it) against its grafts and graft memory.
    account: Arc<Account>,
    _charge: Charge,
}

fn add(total: &mut GraftStats, s: &GraftStats) {
    total.invocations += s.invocations;
    total.failures += s.failures;
    total.time_ns += s.time_ns;
}

/// The file-wide grafts of a kernel.
#[derive(Default)]
pub(crate) struct FileGrafts {
    bound: Mutex<Vec<Binding>>,
    next_id: Mutex<u64>,
}

/// A file-wide graft, for listings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileGraftInfo {
    pub ino: u64,
    /// The path it was bound through.
    pub path: String,
    pub point: String,
    /// The process that bound it.
    pub owner: Pid,
    pub hash: String,
    /// Open descriptors that run it now.
    pub descriptors: usize,
    /// Its counters summed over every descriptor it ran on (closed ones included).
    pub stats: GraftStats,
}

/// True if `slot` runs the graft `hash` loaded by `loader`.
fn runs(slot: &GraftSlot<ComputeRa>, loader: Pid, hash: &str) -> bool {
    slot.info().graft.is_some_and(|g| g.owner == loader && g.hash == hash)
}

impl FileGrafts {
    /// Loads the file-wide grafts of `ino` into a descriptor's read-ahead slot (a new open).
    pub(crate) fn on_open(&self, ino: u64, ra: &ReadAhead) {
        /// A binding's id, module, binder and the binder's account.
        type Wanted = (u64, Arc<[u8]>, Pid, Arc<Account>);
        let wanted: Vec<Wanted> = {
            let bound = self.bound.lock();
            bound
                .iter()
                .filter(|b| b.ino == ino)
                .map(|b| (b.id, b.wasm.clone(), b.loader, b.account.clone()))
                .collect()
        };
        for (id, wasm, loader, account) in wanted {
            // The module was checked when it was bound; a failure here (the binder's account
            // full) leaves the default: the opener's open goes on either way.
            let owner = Owner {
                account: Some(account),
                ..Owner::process(loader)
            };
            if ra.slot().load(&wasm, owner).is_err() {
                continue;
            }
            let mut bound = self.bound.lock();
            match bound.iter_mut().find(|b| b.id == id) {
                Some(b) => {
                    b.slots.retain(|w| w.strong_count() > 0);
                    b.slots.push(Arc::downgrade(ra.slot()));
                }
                // Unbound while it was loading.
                None => {
                    ra.slot().unload();
                }
            }
        }
    }

    /// A descriptor of `ino` closes: what the file-wide graft did on it is kept with the binding.
    pub(crate) fn on_close(&self, ino: u64, ra: &ReadAhead) {
        let mut bound = self.bound.lock();
        for b in bound.iter_mut().filter(|b| b.ino == ino) {
            let Some(i) = b
                .slots
                .iter()
                .position(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(ra.slot())))
            else {
                continue;
            };
            b.slots.swap_remove(i);
            if runs(ra.slot(), b.loader, &b.hash)
                && let Some(s) = ra.slot().stats()
            {
                add(&mut b.retired, &s);
            }
        }
    }

    /// Drops the bindings of a process that exited, and unloads them everywhere.
    pub(crate) fn release(&self, pid: Pid) {
        let gone: Vec<Binding> = {
            let mut bound = self.bound.lock();
            let (gone, kept) = std::mem::take(&mut *bound).into_iter().partition(|b| b.loader == pid);
            *bound = kept;
            gone
        };
        gone.iter().for_each(unload_everywhere);
    }

    fn next_id(&self) -> u64 {
        let mut n = self.next_id.lock();
        *n += 1;
        *n
    }
}

fn unload_everywhere(b: &Binding) {
    for slot in b.slots.iter().filter_map(Weak::upgrade) {
        if runs(&slot, b.loader, &b.hash) {
            slot.unload();
        }
    }
}

impl Process {
    /// The inode of `path` if this process may bind file-wide grafts to it (owner or privileged).
    fn file_graft_target(&self, path: &str, point: &str) -> SysResult<u64> {
        if !FILE_WIDE_POINTS.contains(&point) {
            let known = FILE_WIDE_POINTS.join(", ");
            return Err(SysError::new(
                Errno::Inval,
                format!("`{point}` cannot be bound to a file (only {known})"),
            ));
        }
        let st = self.stat(path)?;
        if st.kind == vino_fs::FileType::Directory {
            return Err(SysError::new(Errno::IsDir, format!("is a directory: {path}")));
        }
        let cred = self.credentials();
        if !cred.privileged && cred.uid != st.uid {
            return Err(SysError::new(
                Errno::Perm,
                format!("only the owner of {path} may bind grafts to it"),
            ));
        }
        Ok(st.ino)
    }

    /// Binds a graft to the file at `path`, so that every later open of it by any process runs
    /// it at `point` (`file.compute_ra`). Replaces an earlier binding of that file and point.
    pub fn graft_load_file(&self, path: &str, point: &str, wasm: &[u8]) -> SysResult<GraftInfo> {
        let ino = self.file_graft_target(path, point)?;
        let charge = self.account().charge(Resource::Bindings, 1)?;
        // Check the module where it will run: a descriptor's slot of the same graftpoint.
        let probe = ReadAhead::new(&self.kernel().runtime, self.pid(), "file");
        let info = probe.slot().load(wasm, self.graft_owner())?;
        let fg = &self.kernel().file_grafts;
        let binding = Binding {
            id: fg.next_id(),
            ino,
            path: path.to_string(),
            point: point.to_string(),
            wasm: Arc::from(wasm),
            hash: info.hash.clone(),
            loader: self.pid(),
            slots: Vec::new(),
            retired: GraftStats::default(),
            account: self.account().clone(),
            _charge: charge,
        };
        let replaced = {
            let mut bound = fg.bound.lock();
            let old = bound
                .iter()
                .position(|b| b.ino == ino && b.point == point)
                .map(|i| bound.remove(i));
            bound.push(binding);
            old
        };
        if let Some(old) = replaced {
            unload_everywhere(&old);
        }
        if self.kernel().changes.wanted() {
            self.kernel()
                .changes
                .tell(self.pid(), &[crate::Change::Grafted { ino }]);
        }
        Ok(info)
    }

    /// Removes the file-wide graft of `path` at `point` (its binder or a privileged process).
    pub fn graft_unload_file(&self, path: &str, point: &str) -> SysResult<()> {
        let st = self.stat(path)?;
        let fg = &self.kernel().file_grafts;
        let removed = {
            let mut bound = fg.bound.lock();
            let Some(i) = bound.iter().position(|b| b.ino == st.ino && b.point == point) else {
                return Err(SysError::new(
                    Errno::NoEnt,
                    format!("no graft bound to {path} at {point}"),
                ));
            };
            if bound[i].loader != self.pid() && !self.credentials().privileged {
                return Err(SysError::new(
                    Errno::Perm,
                    format!("the graft on {path} was bound by another process"),
                ));
            }
            bound.remove(i)
        };
        unload_everywhere(&removed);
        Ok(())
    }
}

impl Kernel {
    /// Every file-wide graft, with the descriptors that run it.
    pub fn file_grafts(&self) -> Vec<FileGraftInfo> {
        let bound = self.file_grafts.bound.lock();
        bound
            .iter()
            .map(|b| {
                let live: Vec<_> = b
                    .slots
                    .iter()
                    .filter_map(Weak::upgrade)
                    .filter(|s| runs(s, b.loader, &b.hash))
                    .collect();
                let mut stats = b.retired.clone();
                for s in live.iter().filter_map(|s| s.stats()) {
                    add(&mut stats, &s);
                }
                FileGraftInfo {
                    ino: b.ino,
                    path: b.path.clone(),
                    point: b.point.clone(),
                    owner: b.loader,
                    hash: b.hash.clone(),
                    descriptors: live.len(),
                    stats,
                }
            })
            .collect()
    }
}
