//! Graftpoint registries: the names a process can graft, and who may graft each (Small 1998, 3.4).
//!
//! The kernel keeps one global namespace (graftpoints on global objects, privileged processes
//! only) and one per process (graftpoints on the objects it owns). Both map a name to a slot;
//! the graft system calls go through [`Namespace`], which checks permission first.

use crate::error::{GraftError, LoadError, describe_access};
use crate::point::{Access, GraftPoint};
use crate::record::Recording;
use crate::slot::{GraftInfo, GraftSlot, Owner, SlotInfo};
use crate::stats::GraftStats;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The process asking: its identity and whether it is privileged (root, or a configured group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Principal {
    pub process: u64,
    pub privileged: bool,
}

/// A slot seen through its name, whatever its graftpoint type.
pub trait ManagedSlot: Send + Sync {
    fn name(&self) -> &str;
    fn access(&self) -> Access;
    fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError>;
    fn unload(&self) -> bool;
    fn info(&self) -> SlotInfo;
    fn stats(&self) -> Option<GraftStats>;
    fn write_memory(&self, offset: u32, bytes: &[u8]) -> Result<(), GraftError>;
    fn read_memory(&self, offset: u32, len: usize) -> Result<Vec<u8>, GraftError>;
    fn symbol_address(&self, name: &str) -> Result<u32, GraftError>;
    fn call_control(&self, name: &str, args: &[i64]) -> Result<i64, GraftError>;
    /// Starts recording the bound graft's inputs ([`crate::record`]).
    fn record_start(&self, limit: usize) -> Result<(), GraftError>;
    /// Starts recording the default's decisions, charged to `owner`
    /// ([`GraftSlot::record_default_start`]).
    fn record_default_start(&self, limit: usize, owner: &Owner) -> Result<(), GraftError>;
    /// Drops a recording of the default `process` started (it exited).
    fn record_default_drop(&self, process: u64);
    /// Stops the recording and gives it.
    fn record_stop(&self) -> Result<Recording, GraftError>;
}

impl<G: GraftPoint> ManagedSlot for GraftSlot<G> {
    fn name(&self) -> &str {
        GraftSlot::name(self)
    }
    fn access(&self) -> Access {
        GraftSlot::access(self)
    }
    fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError> {
        GraftSlot::load(self, wasm, owner)
    }
    fn unload(&self) -> bool {
        GraftSlot::unload(self)
    }
    fn info(&self) -> SlotInfo {
        GraftSlot::info(self)
    }
    fn stats(&self) -> Option<GraftStats> {
        GraftSlot::stats(self)
    }
    fn write_memory(&self, offset: u32, bytes: &[u8]) -> Result<(), GraftError> {
        GraftSlot::write_memory(self, offset, bytes)
    }
    fn read_memory(&self, offset: u32, len: usize) -> Result<Vec<u8>, GraftError> {
        GraftSlot::read_memory(self, offset, len)
    }
    fn symbol_address(&self, name: &str) -> Result<u32, GraftError> {
        GraftSlot::symbol_address(self, name)
    }
    fn call_control(&self, name: &str, args: &[i64]) -> Result<i64, GraftError> {
        GraftSlot::call_control(self, name, args)
    }
    fn record_start(&self, limit: usize) -> Result<(), GraftError> {
        GraftSlot::record_start(self, limit)
    }
    fn record_default_start(&self, limit: usize, owner: &Owner) -> Result<(), GraftError> {
        GraftSlot::record_default_start(self, limit, owner)
    }
    fn record_default_drop(&self, process: u64) {
        GraftSlot::record_default_drop(self, process)
    }
    fn record_stop(&self) -> Result<Recording, GraftError> {
        GraftSlot::record_stop(self)
    }
}

/// A graftpoint seen through a wrapper that changes part of what it does (who may graft it, what
/// follows a load); every other call goes to the wrapped slot.
pub trait SlotWrapper: Send + Sync {
    fn inner(&self) -> &dyn ManagedSlot;
    fn access(&self) -> Access {
        self.inner().access()
    }
    fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError> {
        self.inner().load(wasm, owner)
    }
    fn unload(&self) -> bool {
        self.inner().unload()
    }
}

impl<W: SlotWrapper> ManagedSlot for W {
    fn name(&self) -> &str {
        self.inner().name()
    }
    fn access(&self) -> Access {
        SlotWrapper::access(self)
    }
    fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError> {
        SlotWrapper::load(self, wasm, owner)
    }
    fn unload(&self) -> bool {
        SlotWrapper::unload(self)
    }
    fn info(&self) -> SlotInfo {
        self.inner().info()
    }
    fn stats(&self) -> Option<GraftStats> {
        self.inner().stats()
    }
    fn write_memory(&self, offset: u32, bytes: &[u8]) -> Result<(), GraftError> {
        self.inner().write_memory(offset, bytes)
    }
    fn read_memory(&self, offset: u32, len: usize) -> Result<Vec<u8>, GraftError> {
        self.inner().read_memory(offset, len)
    }
    fn symbol_address(&self, name: &str) -> Result<u32, GraftError> {
        self.inner().symbol_address(name)
    }
    fn call_control(&self, name: &str, args: &[i64]) -> Result<i64, GraftError> {
        self.inner().call_control(name, args)
    }
    fn record_start(&self, limit: usize) -> Result<(), GraftError> {
        self.inner().record_start(limit)
    }
    fn record_default_start(&self, limit: usize, owner: &Owner) -> Result<(), GraftError> {
        self.inner().record_default_start(limit, owner)
    }
    fn record_default_drop(&self, process: u64) {
        self.inner().record_default_drop(process)
    }
    fn record_stop(&self) -> Result<Recording, GraftError> {
        self.inner().record_stop()
    }
}

/// Graftpoints a [`Namespace`] finds elsewhere when they are named, rather than holding them: a
/// process's per-descriptor points (`file.compute_ra/<fd>`), which its open-file table already
/// holds. Registering each descriptor's names at every open and forgetting them at every close
/// cost an open and close of a file about a third of their time.
pub trait PointSource: Send + Sync {
    /// The slot named `name`, if this source has one by that name.
    fn find(&self, name: &str) -> Option<Arc<dyn ManagedSlot>>;
    /// Every slot it has now, with its name.
    fn all(&self) -> Vec<(String, Arc<dyn ManagedSlot>)>;
}

/// Named graftpoints, with permission checks on every graft system call.
#[derive(Default)]
pub struct Namespace {
    slots: RwLock<BTreeMap<String, Arc<dyn ManagedSlot>>>,
    /// Where names the map does not hold are looked for next.
    source: std::sync::OnceLock<Box<dyn PointSource>>,
}

impl Namespace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a slot under its own name (replacing a slot of that name).
    pub fn register(&self, slot: Arc<dyn ManagedSlot>) {
        self.slots.write().insert(slot.name().to_string(), slot);
    }

    /// Adds a slot under another name (a per-file graftpoint seen through a descriptor:
    /// `file.block_buddy/<fd>`).
    pub fn register_as(&self, name: &str, slot: Arc<dyn ManagedSlot>) {
        self.slots.write().insert(name.to_string(), slot);
    }

    /// Forgets a name without touching the slot's graft (another name may still reach it).
    pub fn forget(&self, name: &str) -> Option<Arc<dyn ManagedSlot>> {
        self.slots.write().remove(name)
    }

    /// Removes a graftpoint (its object went away); its graft is unloaded.
    pub fn remove(&self, name: &str) -> Option<Arc<dyn ManagedSlot>> {
        let slot = self.slots.write().remove(name);
        if let Some(s) = &slot {
            s.unload();
        }
        slot
    }

    /// Names the map does not hold are looked for in `source` from now on (set once).
    pub fn set_source(&self, source: Box<dyn PointSource>) {
        assert!(self.source.set(source).is_ok(), "a namespace has one source");
    }

    pub fn lookup(&self, name: &str) -> Result<Arc<dyn ManagedSlot>, GraftError> {
        let held = self.slots.read().get(name).cloned();
        held.or_else(|| self.source.get()?.find(name))
            .ok_or_else(|| GraftError::UnknownGraftpoint(name.to_string()))
    }

    /// Every slot, by name (in the order of names).
    fn entries(&self) -> Vec<(String, Arc<dyn ManagedSlot>)> {
        let mut all: Vec<_> = self.slots.read().iter().map(|(n, s)| (n.clone(), s.clone())).collect();
        if let Some(source) = self.source.get() {
            all.extend(source.all());
            all.sort_by(|a, b| a.0.cmp(&b.0));
        }
        all
    }

    /// The slot named `name`, if `who` may graft it.
    pub fn authorized(&self, who: Principal, name: &str) -> Result<Arc<dyn ManagedSlot>, GraftError> {
        let slot = self.lookup(name)?;
        let allowed = match slot.access() {
            Access::Privileged => who.privileged,
            Access::Process(owner) => owner == who.process,
        };
        if !allowed {
            return Err(GraftError::PermissionDenied {
                point: name.to_string(),
                who: describe_access(slot.access()),
            });
        }
        Ok(slot)
    }

    pub fn load(&self, who: Principal, name: &str, wasm: &[u8], owner: Owner) -> Result<GraftInfo, GraftError> {
        Ok(self.authorized(who, name)?.load(wasm, owner)?)
    }

    pub fn unload(&self, who: Principal, name: &str) -> Result<(), GraftError> {
        if self.authorized(who, name)?.unload() {
            Ok(())
        } else {
            Err(GraftError::NotLoaded(name.to_string()))
        }
    }

    pub fn write_memory(&self, who: Principal, name: &str, offset: u32, bytes: &[u8]) -> Result<(), GraftError> {
        self.authorized(who, name)?.write_memory(offset, bytes)
    }

    pub fn call_control(&self, who: Principal, name: &str, control: &str, args: &[i64]) -> Result<i64, GraftError> {
        self.authorized(who, name)?.call_control(control, args)
    }

    /// Starts recording the graft at `name`: only a principal that may bind there may (its
    /// inputs are what the graftpoint shows a graft, which may be other users' I/O at a global
    /// one).
    pub fn record_start(&self, who: Principal, name: &str, limit: usize) -> Result<(), GraftError> {
        self.authorized(who, name)?.record_start(limit)
    }

    /// Starts recording the default's decisions at `name` (nothing bound there), charged to
    /// `owner`: as [`Namespace::record_start`], only a principal that may bind there may.
    pub fn record_default_start(
        &self,
        who: Principal,
        name: &str,
        limit: usize,
        owner: &Owner,
    ) -> Result<(), GraftError> {
        self.authorized(who, name)?.record_default_start(limit, owner)
    }

    pub fn record_stop(&self, who: Principal, name: &str) -> Result<Recording, GraftError> {
        self.authorized(who, name)?.record_stop()
    }

    /// Every graftpoint and what is bound to it.
    pub fn list(&self) -> Vec<SlotInfo> {
        self.entries()
            .into_iter()
            .map(|(name, s)| SlotInfo {
                point: name,
                ..s.info()
            })
            .collect()
    }

    /// Unloads every graft owned by `process` (it exited), and drops the recordings of
    /// defaults it started.
    pub fn unload_owned_by(&self, process: u64) -> usize {
        let slots: Vec<_> = self.entries().into_iter().map(|(_, s)| s).collect();
        for s in &slots {
            s.record_default_drop(process);
        }
        slots
            .iter()
            .filter(|s| s.info().graft.is_some_and(|g| g.owner == process))
            .filter(|s| s.unload())
            .count()
    }
}
