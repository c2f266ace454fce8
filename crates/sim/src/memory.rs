//! Processes' memory under pressure, in the simulation: each simulated process may hold a
//! program memory (made by the kernel's pager, as wasmtime's would be) far larger than its
//! resident limit, touches pages of it and reads them back against a model of what it wrote,
//! while the workload's hostile grafts sit on its `vas.pick_victim` and `vm.fault_around`. At
//! the end every memory is dropped and nothing may stay held: frames, staging slots, swap
//! slots, swap charges.
//!
//! The pager serves faults on threads of its own; the simulation settles it after every touch
//! (`Kernel::settle_memory`). Its swap is kept in memory (`KernelConfig::swap_on_disk` off):
//! which page goes depends on when Linux lets a page move, so swap writes on the simulated disk
//! would make its sequence of writes vary from run to run. The swap file on a real file system,
//! crashes included, is tested in `crates/wasi/tests/memory.rs`.

use std::sync::Arc;
use vino_blockdev::rng::SplitMix64;
use vino_kernel::memory::{Memory, PAGE_SIZE};
use vino_kernel::{Kernel, Process, Resource};

/// Pages of each simulated memory, and its reservation.
pub const PAGES: usize = 32;
const RESERVED: usize = 64 * PAGE_SIZE;
const GUARD: usize = 16 * PAGE_SIZE;

/// The simulation's limits: the defaults, with memories held to a quarter of their pages each
/// and to half of one memory all together, and a swap area of 512 KiB.
pub fn limits() -> vino_kernel::account::LimitsConfig {
    let mut l = vino_kernel::account::LimitsConfig::default();
    l.process.set(Resource::ResidentBytes, (PAGES / 4 * PAGE_SIZE) as u64);
    l.total.set(Resource::ResidentBytes, (PAGES / 2 * PAGE_SIZE) as u64);
    l.total.set(Resource::SwapBytes, 512 << 10);
    l
}

/// A step of the memory workload, on process `who`'s memory.
#[derive(Debug, Clone)]
pub enum MemoryStep {
    /// Makes the memory (if it has none).
    Make(usize),
    /// Writes `salt` into `count` pages from `first`, each at an offset of its own.
    Touch {
        who: usize,
        first: usize,
        count: usize,
        salt: u8,
    },
    /// Reads every page back against the model.
    Check(usize),
    /// Drops the memory.
    Drop(usize),
}

impl MemoryStep {
    pub fn random(rng: &mut SplitMix64, who: usize) -> MemoryStep {
        match rng.below(10) {
            0 => MemoryStep::Make(who),
            1..=5 => MemoryStep::Touch {
                who,
                first: rng.below(PAGES as u64) as usize,
                count: 1 + rng.below(PAGES as u64) as usize,
                salt: rng.next_u64() as u8,
            },
            6..=8 => MemoryStep::Check(who),
            _ => MemoryStep::Drop(who),
        }
    }
}

struct Held {
    memory: Memory,
    /// What each page's marked byte holds (0 until written).
    model: Vec<u8>,
}

/// Where page `p`'s marked byte is.
fn offset(p: usize) -> usize {
    p * PAGE_SIZE + (p * 97) % PAGE_SIZE
}

/// The memories of the simulated processes.
#[derive(Default)]
pub struct Memories {
    held: Vec<Option<Held>>,
    pub touched: u64,
}

impl Memories {
    pub fn apply(&mut self, kernel: &Kernel, procs: &[Arc<Process>], step: &MemoryStep) -> Result<(), String> {
        if self.held.len() < procs.len() {
            self.held.resize_with(procs.len(), || None);
        }
        match *step {
            MemoryStep::Make(who) => {
                if self.held[who].is_none() {
                    let memory = procs[who]
                        .create_memory(PAGES * PAGE_SIZE, RESERVED, GUARD)
                        .map_err(|e| format!("making a memory: {e}"))?;
                    self.held[who] = Some(Held {
                        memory,
                        model: vec![0; PAGES],
                    });
                }
            }
            MemoryStep::Touch {
                who,
                first,
                count,
                salt,
            } => {
                let Some(h) = self.held[who].as_mut() else {
                    return Ok(());
                };
                for p in (first..first + count).map(|p| p % PAGES) {
                    if !h.memory.write_byte(offset(p), salt) {
                        return Err(format!("page {p} of process {who}'s memory is not usable"));
                    }
                    h.model[p] = salt;
                    self.touched += 1;
                    kernel.settle_memory();
                }
            }
            MemoryStep::Check(who) => {
                let Some(h) = self.held[who].as_ref() else {
                    return Ok(());
                };
                for p in 0..PAGES {
                    let got = h.memory.read_byte(offset(p));
                    kernel.settle_memory();
                    if got != Some(h.model[p]) {
                        return Err(format!("process {who}'s page {p} holds {got:?}, not {}", h.model[p]));
                    }
                }
            }
            MemoryStep::Drop(who) => {
                self.held[who] = None;
                kernel.settle_memory();
            }
        }
        Ok(())
    }

    /// Drops every memory: nothing may stay held or charged.
    pub fn finish(&mut self, kernel: &Kernel, procs: &[Arc<Process>]) -> Result<(), String> {
        self.held.clear();
        kernel.settle_memory();
        if let Some(s) = kernel.pager_stats()
            && (s.memories, s.frames, s.staged, s.swap_in_use) != (0, 0, 0, 0)
        {
            return Err(format!("the pager holds {s:?} with no memory left"));
        }
        for p in procs {
            let charged = p.account().used(Resource::SwapBytes);
            if charged != 0 {
                return Err(format!("process {} is still charged {charged} bytes of swap", p.pid()));
            }
        }
        Ok(())
    }
}
