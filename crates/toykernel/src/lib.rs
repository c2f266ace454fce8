//! The toy kernel: a table of integer cells guarded by VLT locks, with three graftpoints.
//!
//! It is the smallest kernel object that has what the graft runtime must get right: state a
//! graft can change through graft-callable functions (so aborts must undo), locks others can
//! wait on (so lock hogs must be stopped), and bulk arguments in both directions. Its
//! graftpoints are named `toy.*` so that nothing mistakes them for the kernel's:
//! `toy.apply`, and `toy.pick_victim` and `toy.compute_ra`, which take and return exactly what
//! the page cache's `vas.pick_victim` and `file.compute_ra` do (same signature, same argument
//! area) but may also call the toy's functions. A graft written in C for one of those two real
//! graftpoints is built for the toy one with [`build_options`].
//!
//! The toy's graftpoints set no budget of their own ([`GraftPoint::BUDGET`] is unbounded): the
//! runtime's invocation budget alone bounds them, so a test can raise it.

#![forbid(unsafe_code)]

pub mod hostile;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use vino_graft::abi::{self, Extent, Extents};
use vino_graft::{CallError, Callables, GraftPoint, GraftSlot, Invalid};
use vino_vlt::{LockMode, current};

/// Lock ids of the toy kernel's cells: a fixed tag in the high bits keeps them apart from other
/// kernel objects sharing the lock table.
const CELL_TAG: u64 = 0x70_0000_0000;

/// A table of cells. Cheap to clone (a shared handle), so undo records can hold it.
#[derive(Clone)]
pub struct ToyKernel {
    cells: Arc<[AtomicI64]>,
    id: u64,
    /// A second graftpoint that `vino_toy_call_inner` invokes: a graft reached from a graft.
    inner: Arc<OnceLock<Arc<GraftSlot<ToyApply>>>>,
}

static KERNELS: AtomicU64 = AtomicU64::new(0);

impl ToyKernel {
    pub fn new(cells: usize) -> ToyKernel {
        let id = KERNELS.fetch_add(1, Ordering::Relaxed);
        ToyKernel {
            cells: (0..cells).map(|_| AtomicI64::new(0)).collect(),
            id,
            inner: Arc::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The lock object of cell `key`.
    pub fn object(&self, key: usize) -> u64 {
        CELL_TAG | (self.id << 20) | key as u64
    }

    fn index(&self, function: &'static str, key: i64) -> Result<usize, CallError> {
        usize::try_from(key)
            .ok()
            .filter(|&k| k < self.cells.len())
            .ok_or_else(|| CallError::bad_argument(function, format!("no cell {key} (there are {})", self.cells.len())))
    }

    /// Reads a cell; inside a transaction, under a shared lock.
    pub fn get(&self, key: i64) -> Result<i64, CallError> {
        let k = self.index("vino_toy_get", key)?;
        if let Some(r) = current::with(|t| t.lock(self.object(k), LockMode::Shared)) {
            r?;
        }
        Ok(self.cells[k].load(Ordering::Acquire))
    }

    /// Writes a cell; inside a transaction, under an exclusive lock and with an undo record.
    pub fn set(&self, key: i64, value: i64) -> Result<(), CallError> {
        let k = self.index("vino_toy_set", key)?;
        if let Some(r) = current::with(|t| t.lock(self.object(k), LockMode::Exclusive)) {
            r?;
        }
        let old = self.cells[k].swap(value, Ordering::AcqRel);
        let cells = self.cells.clone();
        current::on_abort(move || cells[k].store(old, Ordering::Release));
        Ok(())
    }

    /// Sets the graftpoint `vino_toy_call_inner` invokes (once).
    pub fn set_inner(&self, slot: Arc<GraftSlot<ToyApply>>) {
        assert!(self.inner.set(slot).is_ok(), "inner graftpoint set twice");
    }

    /// Invokes the inner graftpoint: from inside a graft, its graft runs in a nested transaction.
    pub fn call_inner(&self, arg: i64) -> Result<i64, CallError> {
        let slot = self
            .inner
            .get()
            .ok_or_else(|| CallError::Forbidden("no inner graftpoint".into()))?;
        Ok(slot.invoke(&arg))
    }

    /// All cells, read without locks (for tests and display).
    pub fn snapshot(&self) -> Vec<i64> {
        self.cells.iter().map(|c| c.load(Ordering::Acquire)).collect()
    }

    fn define_callables(c: &mut Callables<ToyKernel>) {
        c.func1("vino_toy_get", |k: &ToyKernel, key: i32| k.get(key.into()));
        c.func2("vino_toy_set", |k: &ToyKernel, key: i32, value: i64| {
            k.set(key.into(), value)
        });
        c.func1("vino_toy_call_inner", |k: &ToyKernel, arg: i64| k.call_inner(arg));
    }
}

const TOY_CALLABLE: &[&str] = &["vino_toy_get", "vino_toy_set", "vino_toy_call_inner"];

/// Build options that turn a C graft written for `vas.pick_victim` or `file.compute_ra` into one
/// for `toy.pick_victim` or `toy.compute_ra`: `VINO_TOY` makes `vino_graft.h` rename the entry
/// points (`vas_pick_victim` → `toy_pick_victim`, `file_compute_ra` → `toy_compute_ra`).
pub fn build_options() -> vino_sdk::BuildOptions {
    vino_sdk::BuildOptions {
        defines: vec![("VINO_TOY".into(), None)],
        ..vino_sdk::BuildOptions::default()
    }
}

/// `toy.apply(arg) -> i64`: a generic decision; any result ≥ 0 is valid. Default: `arg`.
pub struct ToyApply;

impl GraftPoint for ToyApply {
    const NAME: &'static str = "toy.apply";
    const CALLABLE: &'static [&'static str] = TOY_CALLABLE;
    const BUDGET: Duration = Duration::MAX;
    type Env = ToyKernel;
    type Args<'a> = i64;
    type Output = i64;
    type Params = (i64,);
    type Results = i64;

    fn default_policy(_: &ToyKernel, arg: &i64) -> i64 {
        *arg
    }
    fn encode(_: &ToyKernel, arg: &i64, _: &mut [u8]) -> (i64,) {
        (*arg,)
    }
    fn decode(_: &ToyKernel, _: &i64, result: i64, _: &[u8]) -> Result<i64, Invalid> {
        if result >= 0 {
            Ok(result)
        } else {
            Err(Invalid(format!("negative result {result}")))
        }
    }
    fn callables(c: &mut Callables<ToyKernel>) {
        ToyKernel::define_callables(c)
    }
}

/// `toy.pick_victim`: choose which of the LRU-ordered candidate pages to evict, as the page
/// cache's `vas.pick_victim` does.
pub struct ToyPickVictim;

impl GraftPoint for ToyPickVictim {
    const NAME: &'static str = "toy.pick_victim";
    const CALLABLE: &'static [&'static str] = TOY_CALLABLE;
    const BUDGET: Duration = Duration::MAX;
    const USES_ARG_AREA: bool = true;
    type Env = ToyKernel;
    type Args<'a> = &'a [u64];
    type Output = usize;
    type Params = (i32,);
    type Results = i32;

    fn default_policy(_: &ToyKernel, _: &&[u64]) -> usize {
        0
    }
    fn encode(_: &ToyKernel, candidates: &&[u64], area: &mut [u8]) -> (i32,) {
        (abi::encode_candidates(candidates, area),)
    }
    fn decode(_: &ToyKernel, candidates: &&[u64], choice: i32, _: &[u8]) -> Result<usize, Invalid> {
        abi::decode_victim(choice, candidates.len().min(abi::VICTIM_MAX))
    }
    fn callables(c: &mut Callables<ToyKernel>) {
        ToyKernel::define_callables(c)
    }
}

/// A file as `toy.compute_ra` sees it: its size and where the last read ended.
pub struct ToyFile {
    pub size: u64,
    last_end: AtomicU64,
}

impl ToyFile {
    pub fn new(size: u64) -> ToyFile {
        ToyFile {
            size,
            last_end: AtomicU64::new(u64::MAX),
        }
    }
}

/// One read that just happened.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    pub offset: u64,
    pub len: u32,
}

/// A `toy.compute_ra` graft in text form: one block read ahead after each read, its calls
/// counted in its memory (tests of recording and replay use it).
pub const NEXT_BLOCK_RA: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "toy_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
    (i32.store (i32.const 16) (i32.add (i32.load (i32.const 16)) (i32.const 1)))
    (i64.store (i32.const 1024) (i64.add (local.get $off) (i64.extend_i32_u (local.get $len))))
    (i64.store (i32.const 1032) (i64.const 4096))
    (if (result i32) (i64.le_u (i64.add (i64.load (i32.const 1024)) (i64.const 4096)) (local.get $size))
      (then (i32.const 1)) (else (i32.const 0)))))"#;

/// Blocks of read-ahead the default issues after a sequential read.
pub const DEFAULT_CLUSTER_BLOCKS: u64 = 8;
pub const BLOCK: u64 = 4096;

/// `toy.compute_ra` on a toy file: which extents to prefetch after a read, as a file's
/// `file.compute_ra` does.
pub struct ToyComputeRa;

impl GraftPoint for ToyComputeRa {
    const NAME: &'static str = "toy.compute_ra";
    const USES_ARG_AREA: bool = true;
    const BUDGET: Duration = Duration::MAX;
    type Env = ToyFile;
    type Args<'a> = Read;
    type Output = Extents;
    type Params = (i64, i32, i64);
    type Results = i32;

    /// Sequential detection as in BSD: if this read starts where the last ended, read ahead a
    /// cluster after it.
    fn default_policy(file: &ToyFile, read: &Read) -> Extents {
        let end = read.offset + u64::from(read.len);
        let sequential = file.last_end.swap(end, Ordering::Relaxed) == read.offset;
        let mut out = Extents::new();
        if sequential && end < file.size {
            let len = (DEFAULT_CLUSTER_BLOCKS * BLOCK).min(file.size - end);
            out.push(Extent { off: end, len });
        }
        out
    }
    fn encode(file: &ToyFile, read: &Read, _: &mut [u8]) -> (i64, i32, i64) {
        (read.offset as i64, read.len as i32, file.size as i64)
    }
    fn decode(file: &ToyFile, _: &Read, count: i32, area: &[u8]) -> Result<Extents, Invalid> {
        abi::decode_extents(count, area, file.size)
    }
}
