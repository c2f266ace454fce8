//! Programs' linear memories come from the kernel: wasmtime's `MemoryCreator` hands each one to
//! the kernel's pager ([`vino_kernel::Process::create_memory`]), which reserves it with the
//! guard region wasmtime asks for (so bounds checks stay elided) and pages it within the
//! process's resident limit.
//!
//! wasmtime does not tell a creator which store a memory is for. The store's resource limiter
//! is asked first, with the store's data at hand, right before the creator on the same thread
//! and with no await between: it leaves the process in a thread-local slot that the creator
//! takes. A memory asked for with nothing in the slot (never, for a program) is refused.

use std::cell::RefCell;
use std::sync::Arc;
use vino_kernel::memory::{Memory, PAGE_SIZE};
use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

thread_local! {
    /// The process whose memory this thread's next `new_memory` makes.
    static PENDING: RefCell<Option<Arc<vino_kernel::Process>>> = const { RefCell::new(None) };
}

/// Leaves `process` for the memory about to be made on this thread.
pub(crate) fn memory_for(process: &Arc<vino_kernel::Process>) {
    PENDING.with(|p| *p.borrow_mut() = Some(process.clone()));
}

/// The creator of every program's memory.
pub(crate) struct KernelMemories;

// SAFETY: each memory is a fresh reservation of `reserved + guard` bytes, zero-filled (pages
// come in as zeros on first touch), never moved, with the guard never made accessible.
unsafe impl MemoryCreator for KernelMemories {
    fn new_memory(
        &self,
        _ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved: Option<usize>,
        guard: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        let process = PENDING
            .with(|p| p.borrow_mut().take())
            .ok_or_else(|| "a program memory asked for outside a VINO process".to_string())?;
        let reserved = reserved
            .unwrap_or_else(|| maximum.unwrap_or(minimum).max(minimum))
            .next_multiple_of(PAGE_SIZE);
        process
            .create_memory(minimum, reserved, guard.next_multiple_of(PAGE_SIZE))
            .map(|m| Box::new(ProgramMemory(m)) as Box<dyn LinearMemory>)
            .map_err(|e| e.to_string())
    }
}

struct ProgramMemory(Memory);

// SAFETY: the base never moves (growth stays within the reservation), and the bytes up to
// `byte_size` are mapped read-write.
unsafe impl LinearMemory for ProgramMemory {
    fn byte_size(&self) -> usize {
        self.0.size()
    }

    fn byte_capacity(&self) -> usize {
        self.0.capacity()
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        Ok(self.0.grow_to(new_size)?)
    }

    fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
}
