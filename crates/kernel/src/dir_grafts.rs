//! Grafts over names (Small 1998, 4.2: access control and name redirection).
//!
//! - `dir.access` ([`DirAccess`]): a directory's owner binds it to the directory, and it is
//!   asked about every lookup, open and change of a name in the tree under it, by anyone. It may
//!   refuse (`EACCES`); it never grants, because the kernel asks it only after the permission
//!   bits said yes. It fails closed: a graft that traps, loops or runs past its budget refuses
//!   that call, since otherwise whoever can make the owner's graft run long (long names, deep
//!   paths) would walk past it. A graft that keeps failing is unloaded by its slot, as every
//!   graft is, and its owner told ([`crate::Process::graft_events`] of the binding process, and
//!   [`crate::Process::dir_access_list`]): from then on POSIX alone decides there.
//! - `dir.lookup` ([`DirLookup`]): a process's own graft over its own lookups. For each name a
//!   walk looks up it may answer another path (a private `/tmp`, a version of a directory
//!   picked by date); the walk then goes on through that path, with the process's own
//!   credentials and every check on the way, so a redirect reaches only what the process could
//!   reach by naming it. A redirect's names are not redirected again, and one walk takes at
//!   most [`MAX_REDIRECTS`] redirects.
//!
//! Bound directories are kept in memory, by inode and generation, until their owner unbinds
//! them, the directory is removed, or the kernel stops. Nested bindings all apply, the
//! outermost first: the owner of a subdirectory cannot widen what the owner of the tree
//! allows. A walk carries the bindings in force over the directory it is in ([`Governors`]),
//! so a step costs one map probe when it enters a directory; a walk that starts elsewhere than
//! the root (a descriptor, the mount's inode) finds them by going up through `..`. With nothing
//! bound anywhere, walks take none of this path.

use crate::error::{Errno, SysError, SysResult};
use crate::namei::Found;
use crate::{Account, Pid, Resource};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use vino_fs::{FileSystem, ROOT_INO};
use vino_graft::account::Charge;
use vino_graft::{GraftInfo, GraftPoint, GraftSlot, GraftStats, Invalid, Owner};

/// What a `dir.access` graft is asked about (its first argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum AccessOp {
    /// A walk looks `name` up in `dir` (every step of every path).
    Lookup = 0,
    /// `name` in `dir` is opened; `flags` are [`open_bits`].
    Open = 1,
    /// `name` is made in `dir` (create, mkdir, mknod, symlink, link, a rename's new name);
    /// `flags` is the file type's `S_IFMT` bits.
    Create = 2,
    /// `name` is removed from `dir` (unlink, rmdir, a rename's old name).
    Remove = 3,
    /// The attributes of `name` in `dir` change (mode, owner, times, size, extended
    /// attributes); `flags` are [`SETATTR_MODE`] and the others.
    SetAttr = 4,
}

/// Bits of an [`AccessOp::Open`]'s flags.
pub const OPEN_READ: i32 = 1;
pub const OPEN_WRITE: i32 = 2;
pub const OPEN_CREATE: i32 = 4;
pub const OPEN_TRUNCATE: i32 = 8;
pub const OPEN_APPEND: i32 = 16;
/// Bits of an [`AccessOp::SetAttr`]'s flags.
pub const SETATTR_MODE: i32 = 1;
pub const SETATTR_OWNER: i32 = 2;
pub const SETATTR_SIZE: i32 = 4;
pub const SETATTR_TIMES: i32 = 8;
pub const SETATTR_XATTR: i32 = 16;

/// The open flags as a `dir.access` graft sees them.
pub fn open_bits(f: &crate::OpenFlags) -> i32 {
    let bit = |on: bool, b: i32| if on { b } else { 0 };
    bit(f.read, OPEN_READ)
        | bit(f.write, OPEN_WRITE)
        | bit(f.create, OPEN_CREATE)
        | bit(f.truncate, OPEN_TRUNCATE)
        | bit(f.append, OPEN_APPEND)
}

/// A file type as an [`AccessOp::Create`]'s flags: its `S_IFMT` bits.
pub fn type_bits(kind: vino_fs::FileType) -> i32 {
    use vino_fs::FileType::*;
    match kind {
        Fifo => 0o010000,
        CharDevice => 0o020000,
        Directory => 0o040000,
        BlockDevice => 0o060000,
        Regular => 0o100000,
        Symlink => 0o120000,
        Socket => 0o140000,
    }
}

/// One question to a `dir.access` graft.
#[derive(Debug, Clone, Copy)]
pub struct AccessQuery<'a> {
    pub op: AccessOp,
    pub uid: u32,
    pub gid: u32,
    pub flags: i32,
    /// The directory the name is in.
    pub dir: u64,
    pub name: &'a [u8],
    /// The time of day: wall-clock seconds since the epoch.
    pub now_s: i64,
}

/// `dir.access`: may this caller do `op` on `name` in `dir`? The name is in `vino_args` (not
/// NUL-terminated; `name_len` bytes), and `now_s` is the wall clock in seconds (for rules by
/// time of day); the graft answers 0 to allow, anything else to refuse.
pub struct DirAccess;

impl GraftPoint for DirAccess {
    const NAME: &'static str = "dir.access";
    const USES_ARG_AREA: bool = true;
    /// A check on every step of other users' walks: small, and bounded again per walk
    /// ([`WALK_ACCESS_CALLS`]).
    const BUDGET: Duration = Duration::from_micros(20);
    /// Every question must reach the graft (an answer by default would be a yes): concurrent
    /// walks in the tree take turns in its instance, each turn at most the budget.
    const WAIT_WHEN_BUSY: bool = true;
    type Env = ();
    type Args<'a> = AccessQuery<'a>;
    /// True: allowed.
    type Output = bool;
    type Params = (i32, i32, i32, i32, i64, i32, i64);
    type Results = i32;

    fn default_policy(_: &(), _: &AccessQuery<'_>) -> bool {
        true
    }

    fn encode(_: &(), q: &AccessQuery<'_>, area: &mut [u8]) -> Self::Params {
        let n = q.name.len().min(area.len());
        area[..n].copy_from_slice(&q.name[..n]);
        (
            q.op as i32,
            q.uid as i32,
            q.gid as i32,
            q.flags,
            q.dir as i64,
            n as i32,
            q.now_s,
        )
    }

    fn decode(_: &(), _: &AccessQuery<'_>, r: i32, _: &[u8]) -> Result<bool, Invalid> {
        Ok(r == 0)
    }
}

/// `dir.lookup`: the process's answer for `name` in `dir` (in `vino_args`, `name_len` bytes):
/// 0 to look the name up as it is, or `n` in `1..=PATH_MAX` to look up instead the path the
/// graft wrote in the first `n` bytes of `vino_args` (absolute, or relative to `dir`).
pub struct DirLookup;

/// A redirect answered by a `dir.lookup` graft.
pub type Redirect = Option<Vec<u8>>;

impl GraftPoint for DirLookup {
    const NAME: &'static str = "dir.lookup";
    const USES_ARG_AREA: bool = true;
    const BUDGET: Duration = Duration::from_micros(20);
    /// The process's own threads take turns; its lookups must each reach the graft.
    const WAIT_WHEN_BUSY: bool = true;
    type Env = ();
    type Args<'a> = (u64, &'a [u8]);
    type Output = Redirect;
    type Params = (i64, i32);
    type Results = i32;

    fn default_policy(_: &(), _: &(u64, &[u8])) -> Redirect {
        None
    }

    fn encode(_: &(), &(dir, name): &(u64, &[u8]), area: &mut [u8]) -> (i64, i32) {
        let n = name.len().min(area.len());
        area[..n].copy_from_slice(&name[..n]);
        (dir as i64, n as i32)
    }

    fn decode(_: &(), _: &(u64, &[u8]), r: i32, area: &[u8]) -> Result<Redirect, Invalid> {
        match r {
            0 => Ok(None),
            n if n > 0 && n as usize <= crate::PATH_MAX.min(area.len()) => {
                let path = &area[..n as usize];
                if path.contains(&0) {
                    return Err(Invalid::new("a redirect must not contain NUL"));
                }
                Ok(Some(path.to_vec()))
            }
            n => Err(Invalid(format!("dir.lookup answered {n}: not 0 or a path's length"))),
        }
    }
}

/// Redirects one walk takes before it fails with `ELOOP`.
pub const MAX_REDIRECTS: usize = 40;
/// `dir.access` calls one walk makes before it is refused (`EACCES`): a path of 2048 names in
/// a tree under several bindings would otherwise hold others' turns in those grafts for long.
pub const WALK_ACCESS_CALLS: usize = 1024;
/// Directories [`DirGrafts::governors`] goes up through from a walk's start before it gives up
/// (`ELOOP`): deeper than any path can name.
const MAX_DEPTH: usize = 1 << 16;

/// A `dir.access` graft bound to a directory.
pub struct AccessBinding {
    pub ino: u64,
    pub generation: u32,
    /// The directory's owner, who bound it.
    pub uid: u32,
    /// The process that bound it (told if it is unloaded).
    pub binder: Pid,
    pub(crate) slot: GraftSlot<DirAccess>,
    _charge: Charge,
}

impl AccessBinding {
    /// Asks the graft; a failure refuses (fails closed).
    fn allows(&self, q: &AccessQuery<'_>) -> SysResult<()> {
        let refused = |why: String| {
            SysError::new(
                Errno::Acces,
                format!(
                    "dir.access of directory {} (uid {}) refused {:?} of {}{why}",
                    self.ino,
                    self.uid,
                    q.op,
                    String::from_utf8_lossy(q.name)
                ),
            )
        };
        match self.slot.try_invoke(q) {
            Ok(true) => Ok(()),
            Ok(false) => Err(refused(String::new())),
            Err(failure) => Err(refused(format!(": the graft failed ({failure})"))),
        }
    }
}

/// The `dir.access` bindings in force over one directory, outermost first; `None` for none.
#[derive(Clone, Default)]
pub(crate) struct Governors(Option<Arc<[Arc<AccessBinding>]>>);

impl std::fmt::Debug for Governors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dirs: Vec<u64> = self.0.as_deref().unwrap_or_default().iter().map(|b| b.ino).collect();
        f.debug_tuple("Governors").field(&dirs).finish()
    }
}

impl Governors {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// These and `b` (a binding on a directory under them).
    fn with(&self, b: Arc<AccessBinding>) -> Governors {
        let mut v: Vec<_> = self.0.as_deref().unwrap_or_default().to_vec();
        v.push(b);
        Governors(Some(v.into()))
    }

    /// Asks each binding in turn (outermost first), counting the calls in `calls`.
    pub(crate) fn check(&self, q: &AccessQuery<'_>, calls: &mut usize) -> SysResult<()> {
        for b in self.0.as_deref().unwrap_or_default() {
            *calls += 1;
            if *calls > WALK_ACCESS_CALLS {
                return Err(SysError::new(
                    Errno::Acces,
                    format!("more than {WALK_ACCESS_CALLS} dir.access checks in one walk"),
                ));
            }
            b.allows(q)?;
        }
        Ok(())
    }
}

/// Where a walk found an entry, when `dir.access` grafts govern it: for the checks on what is
/// then done with it (open, attributes).
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub dir: u64,
    pub name: Box<[u8]>,
    pub governors: Governors,
}

/// A binding, for listings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DirAccessInfo {
    pub ino: u64,
    pub uid: u32,
    pub binder: Pid,
    /// The graft, if it is still loaded (it is unloaded if it keeps failing).
    pub graft: Option<GraftInfo>,
    pub stats: Option<GraftStats>,
}

/// A bound directory in [`DirGrafts`]: its binding, and the governors of a directory under it
/// and under no other binding (made once, not on every walk that enters it).
#[derive(Clone)]
struct Entry {
    binding: Arc<AccessBinding>,
    alone: Governors,
}

impl Entry {
    fn new(binding: AccessBinding) -> Entry {
        let binding = Arc::new(binding);
        let alone = Governors(Some(Arc::from([binding.clone()])));
        Entry { binding, alone }
    }
}

/// The bindings one walk sees ([`DirGrafts::snapshot`]).
pub(crate) struct Snapshot(arc_swap::Guard<Arc<FxHashMap<u64, Entry>>>);

impl Snapshot {
    /// The binding of directory `ino` of `generation`, if it has one.
    fn binding(&self, ino: u64, generation: u32) -> Option<&Entry> {
        self.0.get(&ino).filter(|e| e.binding.generation == generation)
    }

    /// The governors of `child`, a directory entered from one governed by `gov`, if they are
    /// not `gov`'s (`child` is bound).
    pub(crate) fn descend(&self, gov: &Governors, child: &Found) -> Option<Governors> {
        let e = self.binding(child.ino, child.stat.generation)?;
        Some(if gov.is_empty() {
            e.alone.clone()
        } else {
            gov.with(e.binding.clone())
        })
    }

    /// The governors of directory `dir`, found by going up through `..` to the root. Empty for
    /// a file that is no directory (it has no `..`; a walk from it goes nowhere).
    pub(crate) fn governors(&self, fs: &FileSystem, dir: &Found) -> SysResult<Governors> {
        if dir.stat.kind != vino_fs::FileType::Directory {
            return Ok(Governors::default());
        }
        let mut chain = Vec::new();
        let (mut ino, mut generation) = (dir.ino, dir.stat.generation);
        for _ in 0..MAX_DEPTH {
            if let Some(e) = self.binding(ino, generation) {
                chain.push(e.binding.clone());
            }
            if ino == ROOT_INO {
                chain.reverse();
                return Ok(if chain.is_empty() {
                    Governors::default()
                } else {
                    Governors(Some(chain.into()))
                });
            }
            let (up, stat) = fs.lookup_stat(ino, b"..")?;
            (ino, generation) = (up, stat.generation);
        }
        Err(SysError::new(Errno::Loop, "directory deeper than any walk goes"))
    }
}

/// The kernel's `dir.access` bindings.
#[derive(Default)]
pub(crate) struct DirGrafts {
    /// Read on every step of a governed walk, changed only by a bind or unbind: a snapshot each
    /// reader loads without a lock, replaced whole by a writer (under `writer`).
    bound: ArcSwap<FxHashMap<u64, Entry>>,
    writer: Mutex<()>,
    /// How many there are: walks look at nothing else while it is 0.
    count: AtomicUsize,
    /// The governed directory each file was last found in by a walk, for the checks on a file
    /// opened by inode (the mount opens what its lookup found; a file has no `..`).
    found_in: Mutex<FxHashMap<u64, u64>>,
}

impl DirGrafts {
    /// True if any directory has a `dir.access` graft.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// The bindings as they are now, for one walk (`None` with none anywhere): the walk probes
    /// them at each step without touching what others share.
    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        // A guard, not a counted reference: two atomic operations where a clone takes four.
        self.active().then(|| Snapshot(self.bound.load()))
    }

    /// The governors of directory `dir`, found by going up through `..` to the root.
    pub(crate) fn governors(&self, fs: &FileSystem, dir: &Found) -> SysResult<Governors> {
        match self.snapshot() {
            Some(s) => s.governors(fs, dir),
            None => Ok(Governors::default()),
        }
    }

    /// Changes the bindings (a copy of them, then put in place), under the writers' lock.
    fn change<T>(&self, f: impl FnOnce(&mut FxHashMap<u64, Entry>) -> T) -> T {
        let _writer = self.writer.lock();
        let mut map = FxHashMap::clone(&self.bound.load());
        let out = f(&mut map);
        self.bound.store(Arc::new(map));
        out
    }

    /// Remembers that a walk found file `ino` in governed directory `dir`. One entry per file
    /// at most, so bounded by the file system's inodes; not dropped when full, since a file the
    /// mount opens by inode without an entry would be checked against no directory.
    pub(crate) fn found(&self, ino: u64, dir: u64) {
        self.found_in.lock().insert(ino, dir);
    }

    /// Where file `ino` was last found by a walk in a governed directory.
    pub(crate) fn last_found_in(&self, ino: u64) -> Option<u64> {
        self.found_in.lock().get(&ino).copied()
    }

    /// Loads `wasm` as the `dir.access` graft of directory `dir` for `owner` (the directory's
    /// owner), charged to `account` (one binding, and the graft as any graft's load); not bound
    /// until [`DirGrafts::install`].
    pub(crate) fn load(
        runtime: &vino_graft::Runtime,
        dir: &Found,
        binder: Pid,
        account: &Arc<Account>,
        owner: Owner,
        wasm: &[u8],
    ) -> SysResult<(AccessBinding, GraftInfo)> {
        let charge = account.charge(Resource::Bindings, 1)?;
        let slot = GraftSlot::new(
            runtime,
            Arc::new(()),
            vino_graft::Access::Process(binder),
            Some(&format!("inode{}", dir.ino)),
        );
        let info = slot.load(wasm, owner).map_err(vino_graft::GraftError::from)?;
        let binding = AccessBinding {
            ino: dir.ino,
            generation: dir.stat.generation,
            uid: dir.stat.uid,
            binder,
            slot,
            _charge: charge,
        };
        Ok((binding, info))
    }

    /// Binds a loaded graft to its directory, replacing what was bound there. The caller holds
    /// the namespace lock for writing.
    pub(crate) fn install(&self, binding: AccessBinding) {
        let ino = binding.ino;
        let old = self.change(|map| map.insert(ino, Entry::new(binding)));
        match old {
            None => {
                self.count.fetch_add(1, Ordering::AcqRel);
            }
            Some(old) => {
                old.binding.slot.unload();
            }
        }
    }

    /// Unbinds directory `ino`'s graft; false if it had none.
    pub(crate) fn unbind(&self, ino: u64) -> bool {
        let Some(old) = self.change(|map| map.remove(&ino)) else {
            return false;
        };
        old.binding.slot.unload();
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.found_in.lock().clear();
        }
        true
    }

    /// The binding of directory `ino`, whatever its generation.
    pub(crate) fn bound_at(&self, ino: u64) -> Option<Arc<AccessBinding>> {
        self.bound.load().get(&ino).map(|e| e.binding.clone())
    }

    /// Every binding, for listings.
    pub(crate) fn list(&self) -> Vec<DirAccessInfo> {
        let mut out: Vec<_> = self
            .bound
            .load()
            .values()
            .map(|e| {
                let b = &e.binding;
                let info = b.slot.info();
                DirAccessInfo {
                    ino: b.ino,
                    uid: b.uid,
                    binder: b.binder,
                    graft: info.graft,
                    stats: info.stats,
                }
            })
            .collect();
        out.sort_by_key(|i| i.ino);
        out
    }

    /// Drops every binding (the kernel stops).
    pub(crate) fn clear(&self) {
        let all = self.change(std::mem::take);
        for (_, e) in all {
            e.binding.slot.unload();
        }
        self.count.store(0, Ordering::Release);
        self.found_in.lock().clear();
    }
}

/// The graftpoint name a process binds a directory's `dir.access` graft through:
/// `dir.access/<fd>`, `fd` a descriptor of the directory.
pub(crate) fn bound_fd(point: &str) -> Option<SysResult<crate::Fd>> {
    let fd = point.strip_prefix("dir.access/")?;
    Some(
        fd.parse()
            .map_err(|_| SysError::new(Errno::Inval, format!("{point}: dir.access/<fd of a directory>"))),
    )
}

impl crate::Process {
    /// True if this process's `dir.lookup` slot has a policy bound.
    #[inline]
    pub(crate) fn redirects_lookups(&self) -> bool {
        self.lookup_slot.policy_kind() != vino_graft::PolicyKind::Default
    }

    /// What this process's `dir.lookup` graft answers for `name` in `dir`. A graft that fails
    /// redirects nothing: the name is looked up as it is, with every check.
    pub(crate) fn lookup_redirect(&self, dir: &Found, name: &[u8]) -> SysResult<Redirect> {
        if dir.stat.kind != vino_fs::FileType::Directory {
            return Ok(None);
        }
        Ok(self.lookup_slot.invoke(&(dir.ino, name)))
    }

    /// The `dir.access` grafts on an open of `f` as `flags` ask: of its name in `p` (the
    /// directory an open by path found it in), else of where the walk found it, else (an open
    /// by inode or descriptor) of where it was last found.
    pub(crate) fn open_allowed(
        &self,
        f: &Found,
        p: Option<&crate::namei::Parent>,
        flags: crate::OpenFlags,
    ) -> SysResult<()> {
        let bits = open_bits(&flags);
        match p.filter(|p| !matches!(p.name.as_slice(), b"" | b"." | b"..")) {
            Some(p) => self.parent_allows(p, AccessOp::Open, bits),
            None => self.found_allows(f, AccessOp::Open, bits),
        }
    }

    /// The `dir.access` grafts on `op` of `f`: where its walk found it, or where it was last
    /// found (for a file reached by inode or descriptor).
    pub(crate) fn found_allows(&self, f: &Found, op: AccessOp, flags: i32) -> SysResult<()> {
        let place = match &f.place {
            Some(p) => Some((**p).clone()),
            None => self.place_by_handle(f)?,
        };
        match place {
            Some(p) => p.governors.check(&self.access_query(op, p.dir, &p.name, flags), &mut 0),
            None => Ok(()),
        }
    }

    /// Where `f`, reached without a walk through its name, is: a directory's parent (its
    /// `..`), or the governed directory a walk last found a file in. `None` if no `dir.access`
    /// graft governs it.
    fn place_by_handle(&self, f: &Found) -> SysResult<Option<Place>> {
        let kernel = self.kernel();
        let grafts = &kernel.dir_grafts;
        if !grafts.active() || f.ino == ROOT_INO {
            return Ok(None);
        }
        let fs = kernel.fs();
        let dir = if f.stat.kind == vino_fs::FileType::Directory {
            fs.lookup_stat(f.ino, b"..")?
        } else {
            match grafts.last_found_in(f.ino) {
                Some(d) => match fs.stat(d) {
                    Ok(st) => (d, st),
                    Err(_) => return Ok(None),
                },
                None => return Ok(None),
            }
        };
        let governors = grafts.governors(fs, &Found::new(dir.0, dir.1))?;
        Ok((!governors.is_empty()).then(|| Place {
            dir: dir.0,
            name: Box::default(),
            governors,
        }))
    }

    /// Binds `wasm` as the `dir.access` graft of the directory at `path` (from `at`), or
    /// unbinds it (`None`). Only the directory's owner may (`EPERM`); the graft is checked as
    /// the owner's and charged to the owner's user (one binding, and the graft), and stays
    /// until unbound, the directory is removed or the kernel stops.
    pub fn dir_access_bind_at(&self, at: crate::At, path: &[u8], wasm: Option<&[u8]>) -> SysResult<Option<GraftInfo>> {
        let kernel = self.kernel();
        let owned_dir = || -> SysResult<Found> {
            let dir = self.walk(at, path, true)?;
            if dir.stat.kind != vino_fs::FileType::Directory {
                return Err(SysError::new(Errno::NotDir, "dir.access binds to a directory"));
            }
            if dir.stat.uid != self.credentials().uid {
                return Err(SysError::new(
                    Errno::Perm,
                    "only the directory's owner binds its dir.access graft",
                ));
            }
            Ok(dir)
        };
        let Some(wasm) = wasm else {
            let _ns = kernel.ns.write();
            if !kernel.dir_grafts.unbind(owned_dir()?.ino) {
                return Err(SysError::new(Errno::NoEnt, "the directory has no dir.access graft"));
            }
            return Ok(None);
        };
        // Compiled outside the namespace lock (a compile takes milliseconds, and every walk
        // waits for a writer), then bound if the directory is still the one checked.
        let dir = {
            let _ns = kernel.ns.read();
            owned_dir()?
        };
        let user = kernel.accounts.user(dir.stat.uid);
        let owner = Owner {
            account: Some(user.clone()),
            ..self.graft_owner()
        };
        let (binding, info) = DirGrafts::load(&kernel.runtime, &dir, self.pid(), &user, owner, wasm)?;
        let _ns = kernel.ns.write();
        let now = owned_dir()?;
        if (now.ino, now.stat.generation) != (dir.ino, dir.stat.generation) {
            return Err(SysError::new(
                Errno::Again,
                "the directory changed while its graft loaded",
            ));
        }
        kernel.dir_grafts.install(binding);
        Ok(Some(info))
    }

    /// [`crate::Process::dir_access_bind_at`] with the module this user staged under `token`
    /// (the mount's ioctl on a directory, which carries a token, not a module).
    pub fn dir_access_bind_staged_at(&self, at: crate::At, token: u64) -> SysResult<GraftInfo> {
        let wasm = self.kernel().staged.take(token, self.credentials().uid)?;
        let bound = self.dir_access_bind_at(at, b"", Some(&wasm))?;
        Ok(bound.expect("a load gives its graft"))
    }

    /// The `dir.access` bindings this process's user made (every one, for a privileged
    /// process), with whether each graft is still loaded.
    pub fn dir_access_list(&self) -> Vec<DirAccessInfo> {
        let cred = self.credentials();
        self.kernel()
            .dir_grafts
            .list()
            .into_iter()
            .filter(|b| cred.privileged || b.uid == cred.uid)
            .collect()
    }

    /// The `dir.access` bindings of this process's user (all, for a privileged process), as
    /// slots for [`crate::Process::graft_list`]: `dir.access/inode<N>`.
    pub(crate) fn dir_access_slots(&self) -> Vec<vino_graft::SlotInfo> {
        let cred = self.credentials();
        self.kernel()
            .dir_grafts
            .bound
            .load()
            .values()
            .filter(|e| cred.privileged || e.binding.uid == cred.uid)
            .map(|e| e.binding.slot.info())
            .collect()
    }

    /// A graft call on `dir.access/<fd>`, if `point` names one: load or unload, or the
    /// binding's owner writing its memory or calling its controls.
    pub(crate) fn dir_access_call(&self, point: &str, call: &crate::GraftCall) -> Option<SysResult<i64>> {
        let fd = match bound_fd(point)? {
            Ok(fd) => fd,
            Err(e) => return Some(Err(e)),
        };
        let at = crate::At::Fd(fd);
        Some(match call {
            crate::GraftCall::Load { wasm } => self.dir_access_bind_at(at, b"", Some(wasm)).map(|_| 0),
            crate::GraftCall::Unload => self.dir_access_bind_at(at, b"", None).map(|_| 0),
            crate::GraftCall::WriteMemory { offset, bytes } => self
                .owned_binding(at)
                .and_then(|b| Ok(b.slot.write_memory(*offset, bytes).map(|_| 0)?)),
            crate::GraftCall::Call { control, args } => self
                .owned_binding(at)
                .and_then(|b| Ok(b.slot.call_control(control, args)?)),
        })
    }

    /// The binding of the directory `at` names, if this process's user owns it.
    fn owned_binding(&self, at: crate::At) -> SysResult<Arc<AccessBinding>> {
        let dir = {
            let _ns = self.kernel().ns.read();
            self.walk(at, b"", true)?
        };
        let b = self
            .kernel()
            .dir_grafts
            .bound_at(dir.ino)
            .filter(|b| b.generation == dir.stat.generation)
            .ok_or_else(|| SysError::new(Errno::NoEnt, "the directory has no dir.access graft"))?;
        if b.uid != self.credentials().uid {
            return Err(SysError::new(Errno::Perm, "the dir.access graft is another user's"));
        }
        Ok(b)
    }
}
