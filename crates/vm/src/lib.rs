//! Virtual memory for VINO processes: each program's linear memory is reserved, registered with
//! userfaultfd and paged by the kernel (Small 1998, 2.2 and 4.2.1: the kernel decides how many
//! frames a process holds, the process may decide which of its pages go).
//!
//! * [`Pager`]: one per kernel. It hands out [`Memory`] regions (the program engine wraps each in
//!   wasmtime's `LinearMemory`, keeping wasmtime's guard region so bounds checks stay elided),
//!   serves their faults on threads of its own (queued per user), keeps each memory within its
//!   resident limit and all of them within a total, and writes evicted pages to [`swap`].
//! * [`table`]: where each page is, and the default policy's two lists (clock as an active and
//!   an inactive list; a page is tested for use by taking it out of the program's memory with
//!   `UFFDIO_MOVE` and seeing whether it is touched before it is evicted).
//! * [`uffd`]: the userfaultfd ioctls.
//! * [`maps`]: files mapped into program memory (`vino_mmap`), kept coherent with `write(2)`.
//! * [`Owner`]: what the kernel tells the pager about a memory's process: its user, its grafts
//!   (`vas.pick_victim` over its memory pages, `vm.fault_around`), its swap charge.

pub mod maps;
pub mod pager;
pub mod points;
pub mod swap;
pub mod table;
pub mod uffd;

pub use maps::{MAX_MAPPINGS, MapMode, MapSource};
pub use pager::{
    FAULT_AROUND_MAX, HostPin, MEMORY_OBJECT, MapError, Memory, MemoryHandle, MemoryStats, Owner, Pager, PagerConfig,
    PagerStats, VICTIM_CANDIDATES, memory_page_id,
};
pub use points::{FaultArgs, FaultAround};
pub use swap::{MemSwap, PAGE, SwapStore};
