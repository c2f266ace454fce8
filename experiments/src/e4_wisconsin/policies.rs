//! The two policies of E4 as native Rust (the "unprotected" variants), decision for decision the
//! same as the C grafts `sdk/grafts/lookahead_evict.c` and `sdk/grafts/wisc_readahead.c`, and the
//! application side of both: how the scan's plan and cursor reach a Wasm graft (through the
//! graft system calls) or a native policy (through shared memory).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use parking_lot::Mutex;
use vino_blockdev::BLOCK_SIZE;
use vino_cache::{ComputeRa, PickVictim};
use vino_graft::abi::{Extent, Extents, RA_MAX_BYTES, RA_MAX_EXTENTS};
use vino_graft::{GraftPoint, Invalid, NativePolicy};
use vino_kernel::Process;

/// Records a plan may hold (`LA_MAX_RECORDS`, `WRA_MAX_RECORDS` in the grafts).
pub const MAX_RECORDS: usize = 65536;
/// Pages (blocks) of the file the grafts track (`LA_MAX_PAGES`, `WRA_MAX_BLOCKS`).
pub const MAX_PAGES: usize = 65536;
/// Records entering or leaving the window per eviction (`LA_SLIDE_MAX`).
const SLIDE_MAX: u64 = 256;
/// No second page (`LA_NONE`).
pub const NONE: u32 = u32::MAX;
/// How far ahead of its cursor the read-ahead graft recognises a read (`WRA_SKIP_LIMIT`).
const SKIP_LIMIT: u64 = 64;
const BS: u64 = BLOCK_SIZE as u64;

/// The pages (block indexes in the file) each record of a scan touches: the first and, if the
/// record straddles a block boundary, the second.
pub fn page_plan(offsets: &[u64], record_bytes: u64) -> Vec<[u32; 2]> {
    offsets
        .iter()
        .map(|&off| {
            let (first, last) = (off / BS, (off + record_bytes - 1) / BS);
            [first as u32, if last != first { last as u32 } else { NONE }]
        })
        .collect()
}

// ---- look-ahead eviction --------------------------------------------------------------------

#[derive(Default)]
struct LaState {
    started: bool,
    object: u64,
    lookahead: u64,
    plan: Vec<[u32; 2]>,
    need: Vec<u32>,
    lo: u64,
    hi: u64,
}

impl LaState {
    fn count_record(&mut self, r: u64, delta: u32) {
        for p in self.plan[r as usize] {
            if (p as usize) < MAX_PAGES {
                self.need[p as usize] = self.need[p as usize].wrapping_add(delta);
            }
        }
    }

    /// The graft's `catch_up(moves)`, move for move.
    fn catch_up(&mut self, cursor: u64, mut moves: u64) {
        let count = self.plan.len().min(MAX_RECORDS) as u64;
        let cur = cursor.min(count);
        let target = cur + self.lookahead.min(count - cur);
        if cur < self.lo {
            self.need.fill(0);
            self.lo = cur;
            self.hi = cur;
        }
        if self.hi < cur {
            while self.lo < self.hi && moves > 0 {
                self.count_record(self.lo, u32::MAX);
                self.lo += 1;
                moves -= 1;
            }
            if self.lo < self.hi {
                return;
            }
            self.lo = cur;
            self.hi = cur;
        }
        while self.hi < target && moves > 0 {
            self.count_record(self.hi, 1);
            self.hi += 1;
            moves -= 1;
        }
        while self.lo < cur && moves > 0 {
            self.count_record(self.lo, u32::MAX);
            self.lo += 1;
            moves -= 1;
        }
    }

    fn needed(&self, page: u64) -> bool {
        let index = (page & 0xffff_ffff) as usize;
        page >> 32 == self.object && index < MAX_PAGES && self.need[index] != 0
    }
}

/// Look-ahead eviction in native code: spares the pages the next `lookahead` records touch.
pub struct LookAheadNative {
    state: Mutex<LaState>,
    cursor: Arc<AtomicU64>,
}

impl LookAheadNative {
    pub fn new() -> Arc<LookAheadNative> {
        Arc::new(LookAheadNative {
            state: Mutex::new(LaState::default()),
            cursor: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The graft's `la_start` after the plan was written.
    pub fn start(&self, object: u64, lookahead: u64, plan: Vec<[u32; 2]>) {
        let mut s = self.state.lock();
        *s = LaState {
            started: true,
            object,
            lookahead,
            plan,
            need: vec![0; MAX_PAGES],
            lo: 0,
            hi: 0,
        };
        s.catch_up(0, u64::MAX);
        self.cursor.store(0, Ordering::Relaxed);
    }

    pub fn cursor(&self) -> &Arc<AtomicU64> {
        &self.cursor
    }
}

impl NativePolicy<PickVictim> for LookAheadNative {
    fn decide(
        &self,
        _: &<PickVictim as GraftPoint>::Env,
        candidates: &<PickVictim as GraftPoint>::Args<'_>,
    ) -> Result<usize, Invalid> {
        if candidates.is_empty() {
            return Err(Invalid::new("no candidates"));
        }
        let mut s = self.state.lock();
        if !s.started {
            return Ok(0);
        }
        s.catch_up(self.cursor.load(Ordering::Relaxed), SLIDE_MAX);
        // The graft's walk: page after page until a candidate no upcoming record needs.
        candidates
            .iter()
            .position(|p| !s.needed(p))
            .ok_or_else(|| Invalid::new("every candidate is needed by an upcoming record"))
    }
}

// ---- random-access read-ahead ---------------------------------------------------------------

#[derive(Default)]
struct RaState {
    started: bool,
    window: u64,
    record_bytes: u64,
    plan: Vec<u64>,
    cur: u64,
    issued: u64,
    ahead: u64,
    stamp: Vec<u32>,
    charged: Vec<u8>,
}

impl RaState {
    fn advance(&mut self, to: u64) {
        while self.cur < to {
            if self.cur < self.issued {
                let c = u64::from(self.charged[self.cur as usize]);
                self.ahead -= c.min(self.ahead);
            }
            self.cur += 1;
        }
    }

    fn compute(&mut self, offset: u64, file_size: u64) -> Extents {
        let mut out = Extents::new();
        let count = self.plan.len().min(MAX_RECORDS) as u64;
        let rs = self.record_bytes;
        if !self.started || file_size == 0 || rs == 0 || rs > BS {
            return out;
        }
        let limit = (self.cur + SKIP_LIMIT).min(count);
        if let Some(i) = (self.cur..limit).find(|&i| self.plan[i as usize] == offset) {
            self.advance(i + 1);
        }
        self.issued = self.issued.max(self.cur);
        let mut ext: Vec<Extent> = Vec::with_capacity(RA_MAX_EXTENTS);
        let mut bytes = 0u64;
        while self.issued < count
            && self.ahead < self.window
            && ext.len() + 2 <= RA_MAX_EXTENTS
            && bytes + 2 * BS <= RA_MAX_BYTES
        {
            let r = self.issued;
            self.issued += 1;
            let a = self.plan[r as usize];
            self.charged[r as usize] = 0;
            if a >= file_size {
                continue;
            }
            let e = (a + rs).min(file_size);
            let mut b = a / BS;
            while b * BS < e {
                if b as usize >= MAX_PAGES {
                    break;
                }
                if u64::from(self.stamp[b as usize]) > self.cur {
                    b += 1;
                    continue;
                }
                self.stamp[b as usize] = (r + 1) as u32;
                self.charged[r as usize] += 1;
                self.ahead += 1;
                let (off, blen) = (b * BS, BS.min(file_size - b * BS));
                bytes += blen;
                match ext.last_mut() {
                    Some(last) if last.off + last.len == off => last.len += blen,
                    _ => ext.push(Extent { off, len: blen }),
                }
                b += 1;
            }
        }
        for e in ext {
            out.push(e);
        }
        out
    }
}

/// Random-access read-ahead in native code: keeps the blocks of the upcoming records requested,
/// at most `window` blocks for records not read yet.
pub struct ReadAheadNative {
    state: Mutex<RaState>,
}

impl ReadAheadNative {
    pub fn new() -> Arc<ReadAheadNative> {
        Arc::new(ReadAheadNative {
            state: Mutex::new(RaState::default()),
        })
    }

    /// The graft's `wra_start` after the plan was written.
    pub fn start(&self, window: u64, record_bytes: u64, plan: Vec<u64>) {
        let mut s = self.state.lock();
        *s = RaState {
            started: true,
            window,
            record_bytes,
            plan,
            stamp: vec![0; MAX_PAGES],
            charged: vec![0; MAX_RECORDS],
            ..RaState::default()
        };
    }
}

impl NativePolicy<ComputeRa> for ReadAheadNative {
    fn decide(
        &self,
        file: &<ComputeRa as GraftPoint>::Env,
        read: &<ComputeRa as GraftPoint>::Args<'_>,
    ) -> Result<Extents, Invalid> {
        Ok(self.state.lock().compute(read.offset, file.size()))
    }
}

// ---- the application side -------------------------------------------------------------------

/// How the application moves the look-ahead graft's cursor before each record.
pub enum Cursor {
    /// Nothing to tell (LRU, read-ahead: that graft follows the reads by itself).
    None,
    /// A Wasm graft: 8 bytes written into `la_ctl.cursor` with the `graft_write_memory` call.
    Graft {
        process: Arc<Process>,
        point: String,
        address: u32,
    },
    /// A native policy: a store into memory it shares with the application.
    Native(Arc<AtomicU64>),
}

impl Cursor {
    pub fn set(&self, record: u64) -> Result<()> {
        match self {
            Cursor::None => Ok(()),
            Cursor::Graft {
                process,
                point,
                address,
            } => process
                .graft_write_memory(point, *address, &record.to_le_bytes())
                .map_err(|e| anyhow::anyhow!("moving the look-ahead cursor: {e}")),
            Cursor::Native(c) => {
                c.store(record, Ordering::Relaxed);
                Ok(())
            }
        }
    }
}

fn put_u64s(out: &mut Vec<u8>, values: &[u64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn sys<T>(r: vino_kernel::SysResult<T>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{what}: {e}"))
}

/// Hands the scan to a loaded `lookahead_evict` graft (plan, then `la_ctl`, then `la_start`) and
/// returns the cursor to move.
pub fn start_lookahead_graft(process: &Arc<Process>, object: u64, lookahead: u64, plan: &[[u32; 2]]) -> Result<Cursor> {
    start_lookahead_graft_at(process, "vas.pick_victim", object, lookahead, plan)
}

/// [`start_lookahead_graft`] for the graft at `point` (`vas.pick_victim#try`: the candidate
/// in shadow).
pub fn start_lookahead_graft_at(
    process: &Arc<Process>,
    point: &str,
    object: u64,
    lookahead: u64,
    plan: &[[u32; 2]],
) -> Result<Cursor> {
    let plan_at = sys(process.graft_symbol(point, "la_plan"), "finding la_plan")?;
    let ctl_at = sys(process.graft_symbol(point, "la_ctl"), "finding la_ctl")?;
    let mut bytes = Vec::with_capacity(plan.len() * 8);
    for [a, b] in plan {
        bytes.extend_from_slice(&a.to_le_bytes());
        bytes.extend_from_slice(&b.to_le_bytes());
    }
    sys(process.graft_write_memory(point, plan_at, &bytes), "writing the plan")?;
    let mut ctl = Vec::with_capacity(32);
    put_u64s(&mut ctl, &[object, lookahead, plan.len() as u64, 0]);
    sys(process.graft_write_memory(point, ctl_at, &ctl), "writing la_ctl")?;
    let n = sys(process.graft_call(point, "la_start", &[]), "la_start")?;
    anyhow::ensure!(
        n as usize == plan.len(),
        "la_start accepted {n} of {} records",
        plan.len()
    );
    Ok(Cursor::Graft {
        process: process.clone(),
        point: point.to_string(),
        address: ctl_at + 24,
    })
}

/// Hands the scan to a loaded `wisc_readahead` graft on `point` (`file.compute_ra/<fd>`).
pub fn start_readahead_graft(
    process: &Arc<Process>,
    point: &str,
    window: u64,
    record_bytes: u64,
    offsets: &[u64],
) -> Result<()> {
    let plan_at = sys(process.graft_symbol(point, "wra_plan"), "finding wra_plan")?;
    let ctl_at = sys(process.graft_symbol(point, "wra_ctl"), "finding wra_ctl")?;
    let mut bytes = Vec::with_capacity(offsets.len() * 8);
    put_u64s(&mut bytes, offsets);
    sys(process.graft_write_memory(point, plan_at, &bytes), "writing the plan")?;
    let mut ctl = Vec::with_capacity(24);
    put_u64s(&mut ctl, &[window, offsets.len() as u64, record_bytes]);
    sys(process.graft_write_memory(point, ctl_at, &ctl), "writing wra_ctl")?;
    let n = sys(process.graft_call(point, "wra_start", &[]), "wra_start").context("starting the read-ahead graft")?;
    anyhow::ensure!(
        n as usize == offsets.len(),
        "wra_start accepted {n} of {} records",
        offsets.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_marks_straddling_records() {
        let plan = page_plan(&[0, 4000, 8192], 208);
        assert_eq!(plan, vec![[0, NONE], [0, 1], [2, NONE]]);
    }

    #[test]
    fn look_ahead_spares_upcoming_pages() {
        let la = LookAheadNative::new();
        let object = 7u64;
        // Records on pages 1, 2, 3, 4.
        la.start(object, 2, vec![[1, NONE], [2, NONE], [3, NONE], [4, NONE]]);
        let id = |p: u64| vino_cache::page_id(object, p);
        let pick = |c: &[u64]| {
            la.decide(
                &vino_cache::VictimEnv::new(0),
                &vino_cache::Candidates::fixed(c.to_vec()),
            )
        };
        // Window [0, 2): pages 1 and 2 are needed.
        assert_eq!(pick(&[id(1), id(2), id(9)]), Ok(2));
        la.cursor().store(2, Ordering::Relaxed);
        // Window [2, 4): pages 3 and 4.
        assert_eq!(pick(&[id(1), id(3)]), Ok(0));
        assert!(pick(&[id(3), id(4)]).is_err(), "all needed: invalid");
        // Another file's pages are never needed.
        assert_eq!(pick(&[vino_cache::page_id(8, 3)]), Ok(0));
    }

    #[test]
    fn read_ahead_keeps_a_window_of_blocks() {
        let mut s = RaState::default();
        let offsets: Vec<u64> = (0..40u64).map(|i| i * 3 * BS + 100).collect();
        s.started = true;
        s.window = 5;
        s.record_bytes = 208;
        s.plan = offsets.clone();
        s.stamp = vec![0; MAX_PAGES];
        s.charged = vec![0; MAX_RECORDS];
        let size = 200 * BS;
        let e = s.compute(offsets[0], size);
        // After record 0: records 1..=5, one block each.
        assert_eq!(e.len(), 5);
        assert_eq!(e.as_slice()[0], Extent { off: 3 * BS, len: BS });
        // After record 1: one more.
        let e = s.compute(offsets[1], size);
        assert_eq!(e.as_slice(), &[Extent { off: 18 * BS, len: BS }]);
        // A read off the plan changes nothing.
        assert!(s.compute(12345, size).is_empty());
    }
}
