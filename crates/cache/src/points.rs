//! The cache's graftpoints and their default policies.

use crate::Pid;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use vino_blockdev::BLOCK_SIZE;
use vino_graft::abi::{self, Extent, Extents};
use vino_graft::{Access, CallError, Callables, Deferred, GraftPoint, GraftSlot, Invalid, Runtime};

/// The id a graft sees for a page: the file's object id in the high 32 bits, the block index in
/// the low 32 (an application computes it the same way for its hot list).
pub fn page_id(object: u64, index: u64) -> u64 {
    (object << 32) | (index & 0xffff_ffff)
}

/// `vas.pick_victim`: which of its own pages a process gives up (Small 1998, 7.7.1). The
/// candidates are the process's pages in LRU order, as page ids; the first is the kernel's choice.
/// They come a page (at most [`abi::VICTIM_MAX`]) at a time: a graft that returns [`abi::VICTIM_MORE`]
/// is called again with the next page, and once more with none when all were offered, so a
/// graft that finds its victim among the oldest pays for those only. Its answer is an index
/// among all the candidates offered so far.
pub struct PickVictim;

/// Fetches the next page of candidates: appends up to [`abi::VICTIM_MAX`] page ids, none when
/// every candidate was offered.
pub type MoreCandidates<'a> = &'a dyn Fn(&mut Vec<u64>);

/// The candidates of one `vas.pick_victim` invocation, offered a page at a time and fetched
/// only as the policy asks for them.
pub struct Candidates<'a> {
    ids: RefCell<Vec<u64>>,
    /// How many of `ids` were offered so far.
    offered: Cell<usize>,
    more: Option<MoreCandidates<'a>>,
    /// The policy was told there are no more (an empty page).
    ended: Cell<bool>,
}

impl<'a> Candidates<'a> {
    /// Candidates known in full.
    pub fn fixed(ids: Vec<u64>) -> Self {
        Candidates {
            offered: Cell::new(ids.len().min(abi::VICTIM_MAX)),
            ids: RefCell::new(ids),
            more: None,
            ended: Cell::new(false),
        }
    }

    /// The first page, and where the rest come from.
    pub fn paged(first: Vec<u64>, more: MoreCandidates<'a>) -> Self {
        Candidates {
            more: Some(more),
            ..Candidates::fixed(first)
        }
    }

    /// How many candidates were offered so far.
    pub fn len(&self) -> usize {
        self.offered.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`th candidate offered so far.
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < self.len()).then(|| self.ids.borrow()[i])
    }

    /// Offers the next page; returns where its candidates are (empty when none are left).
    pub fn next_page(&self) -> Range<usize> {
        let start = self.len();
        let mut ids = self.ids.borrow_mut();
        if ids.len() == start
            && let Some(more) = self.more
        {
            more(&mut ids);
        }
        let end = ids.len().min(start + abi::VICTIM_MAX);
        self.offered.set(end);
        start..end
    }

    /// Every candidate in LRU order, offering pages as the iteration reaches them (for native
    /// policies).
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let mut i = 0;
        std::iter::from_fn(move || {
            if i == self.len() && self.next_page().is_empty() {
                return None;
            }
            i += 1;
            self.get(i - 1)
        })
    }

    /// The candidates offered so far.
    fn offered(&self) -> std::cell::Ref<'_, [u64]> {
        std::cell::Ref::map(self.ids.borrow(), |ids| &ids[..self.len()])
    }
}

/// What a `vas.pick_victim` graft may say of one of its pages with `vino_page_hint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageHint {
    /// As if the owner had just used it: to the young end of the owner's list.
    Keep,
    /// To the cold end, the owner's list's and the cache's: the next eviction takes it first.
    Cold,
    /// Give its frame back now, if it is clean and not in use (else as [`PageHint::Cold`]).
    Drop,
}

/// Most hints one `vas.pick_victim` call may give.
pub const HINTS_MAX: usize = 64;
/// Most committed hints waiting for the cache to apply them (calls made for the process's
/// program memory leave theirs to the next eviction from the cache).
const HINTS_WAITING: usize = 4 * HINTS_MAX;

/// What a `vas.pick_victim` policy sees: the process whose pages are offered, and the hints its
/// graft's committed calls gave, waiting for the cache to apply them.
pub struct VictimEnv {
    pid: Pid,
    hints: Deferred<(u64, PageHint)>,
}

impl VictimEnv {
    pub fn new(pid: Pid) -> Self {
        VictimEnv {
            pid,
            hints: Deferred::new(HINTS_MAX, HINTS_WAITING),
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The committed hints not applied yet, by page id, oldest first.
    pub fn take_hints(&self) -> Vec<(u64, PageHint)> {
        self.hints.take()
    }
}

/// `vino_page_hint(page, hint) -> 0 | -errno`: `hint` 0 keep, 1 cold, 2 drop ([`PageHint`]) for
/// the page `page` (an id as the candidates give them). Checked now (`-EINVAL`: an unknown
/// hint, a page of program memory; `-ENOSPC`: more than [`HINTS_MAX`] in this call) and applied
/// by the cache when the call's transaction commits, to the page if it is still the owner's and
/// resident (anything else is ignored: a hint cannot reach another process's pages, nor tell
/// whether they exist). A call that fails afterwards has its hints dropped unapplied. Nothing
/// another transaction can see changes before then, so it takes no lock.
fn page_hint(env: &VictimEnv, page: i64, hint: i32) -> Result<i32, CallError> {
    const EINVAL: i32 = -22;
    const ENOSPC: i32 = -28;
    let hint = match hint {
        0 => PageHint::Keep,
        1 => PageHint::Cold,
        2 => PageHint::Drop,
        _ => return Ok(EINVAL),
    };
    let page = page as u64;
    if page >> 32 == u64::from(u32::MAX) {
        return Ok(EINVAL);
    }
    Ok(if env.hints.ask((page, hint)) { 0 } else { ENOSPC })
}

impl GraftPoint for PickVictim {
    const NAME: &'static str = "vas.pick_victim";
    const CALLABLE: &'static [&'static str] = &["vino_page_hint"];
    const USES_ARG_AREA: bool = true;
    const PAGED: bool = true;
    /// Room to walk every page of a process of a thousand frames (four pages of candidates
    /// at 5 us each, and the graft's look at each candidate), as the thesis' look-ahead graft
    /// walked the whole list; the bound on what an owner's graft adds to a miss.
    const BUDGET: std::time::Duration = std::time::Duration::from_micros(200);
    const RECORDS_DEFAULT: bool = true;
    type Env = VictimEnv;
    type Args<'a> = Candidates<'a>;
    type Output = usize;
    type Params = (i32,);
    type Results = i32;

    fn default_policy(_: &VictimEnv, _: &Candidates<'_>) -> usize {
        0
    }
    fn encode(env: &VictimEnv, candidates: &Candidates<'_>, area: &mut [u8]) -> (i32,) {
        env.hints.begin_call();
        (abi::encode_candidate_page(&candidates.offered(), 0, area),)
    }
    fn next_page(_: &VictimEnv, candidates: &Candidates<'_>, choice: &i32, area: &mut [u8]) -> Option<(i32,)> {
        if *choice != abi::VICTIM_MORE || candidates.ended.get() {
            return None;
        }
        let page = candidates.next_page();
        candidates.ended.set(page.is_empty());
        let offered = candidates.offered();
        Some((abi::encode_candidate_page(&offered[page.clone()], page.start, area),))
    }
    /// The default's choice is an index of the first page (the cache's least recently used).
    fn answer(_: &VictimEnv, _: &Candidates<'_>, choice: &usize, _: &mut [u8]) -> Option<i32> {
        (*choice < abi::VICTIM_MAX).then_some(*choice as i32)
    }
    fn decode(_: &VictimEnv, candidates: &Candidates<'_>, choice: i32, _: &[u8]) -> Result<usize, Invalid> {
        if choice == abi::VICTIM_MORE {
            return Err(Invalid::new("asked for more candidates after the last"));
        }
        abi::decode_victim(choice, candidates.len())
    }
    fn callables(c: &mut Callables<VictimEnv>) {
        c.func2("vino_page_hint", page_hint);
    }
}

/// Read-ahead setting of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum RaMode {
    /// The kernel's sequential detection (or the graft, if one is loaded).
    Default,
    /// No read-ahead at all (like `posix_fadvise(RANDOM)`).
    Off,
}

/// Smallest and largest read-ahead window of the default policy, in blocks: it starts at
/// `MIN_CLUSTER` on the second sequential read and doubles up to `MAX_CLUSTER` (BSD's clustering
/// grows the same way up to its largest transfer). The largest is 1 MiB, the largest request
/// the I/O scheduler merges: with 128 KiB windows a streaming reader kept one small request
/// in flight and ran at the device's one-request pace.
pub const MIN_CLUSTER: u64 = 4;
pub const MAX_CLUSTER: u64 = 256;

/// What the read-ahead policy of one open file sees: the file's size and the default's state.
pub struct RaFile {
    pub(crate) size: AtomicU64,
    last_end: AtomicU64,
    window: AtomicU64,
    /// Where the read-ahead already asked for ends (0: none since the last jump).
    ahead_end: AtomicU64,
    mode: AtomicU8,
    /// What the graft's `vino_prefetch` calls asked for, issued once their calls committed.
    pub(crate) prefetched: Deferred<Extent>,
    /// Bytes the running call's `vino_prefetch` calls asked for.
    prefetch_bytes: AtomicU64,
}

impl RaFile {
    pub(crate) fn new() -> Self {
        RaFile {
            size: AtomicU64::new(0),
            last_end: AtomicU64::new(u64::MAX),
            window: AtomicU64::new(0),
            ahead_end: AtomicU64::new(0),
            mode: AtomicU8::new(0),
            prefetched: Deferred::new(abi::RA_MAX_EXTENTS, abi::RA_MAX_EXTENTS),
            prefetch_bytes: AtomicU64::new(0),
        }
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    pub fn mode(&self) -> RaMode {
        if self.mode.load(Ordering::Relaxed) == 1 {
            RaMode::Off
        } else {
            RaMode::Default
        }
    }

    /// BSD-style sequential detection: a read that starts where the last one ended grows the
    /// window; any other read resets it. The window is kept ahead of the reader as Linux's
    /// asynchronous read-ahead does: while at least half of it is already asked for, nothing
    /// more is; otherwise only the part not yet asked for, so a streaming reader neither
    /// checks the same pages again on every read nor sends requests of a few blocks.
    fn sequential(&self, read: &Read) -> Extents {
        let end = read.offset + u64::from(read.len);
        let sequential = self.last_end.swap(end, Ordering::Relaxed) == read.offset;
        let window = if sequential {
            (self.window.load(Ordering::Relaxed) * 2).clamp(MIN_CLUSTER, MAX_CLUSTER)
        } else {
            0
        };
        self.window.store(window, Ordering::Relaxed);
        let mut out = Extents::new();
        let bs = BLOCK_SIZE as u64;
        let start = end.div_ceil(bs) * bs;
        let target = (start + window * bs).min(self.size());
        let asked = if sequential {
            self.ahead_end.load(Ordering::Relaxed)
        } else {
            0
        };
        if window == 0 || start >= target || asked >= start + window * bs / 2 {
            if window == 0 {
                self.ahead_end.store(0, Ordering::Relaxed);
            }
            return out;
        }
        let from = asked.clamp(start, target);
        if from < target {
            out.push(Extent {
                off: from,
                len: target - from,
            });
        }
        self.ahead_end.store(target, Ordering::Relaxed);
        out
    }
}

/// One read that just happened, as `file.compute_ra` sees it.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    pub offset: u64,
    pub len: u32,
}

/// `file.compute_ra`: what to prefetch after a read (Small 1998, 7.7.2; TR 4.3). A graft
/// returns extents, or asks for them as it goes with `vino_prefetch` (or both).
pub struct ComputeRa;

/// `vino_prefetch(offset, length) -> 0 | -errno`: asks for `length` bytes at `offset` of the
/// file to be read ahead. The request is checked now (within the file, within the call's
/// allowance of [`abi::RA_MAX_EXTENTS`] requests and [`abi::RA_MAX_BYTES`]) and issued when the
/// call's transaction commits: a call that then fails (a trap, its budget, a nonsense answer)
/// has its requests dropped with it, so none of its reads reach the device. It changes nothing
/// another transaction can see before then, so it takes no lock.
fn prefetch(file: &RaFile, offset: i64, length: i64) -> Result<i32, CallError> {
    const EINVAL: i32 = -22;
    const ENOSPC: i32 = -28;
    let (Ok(off), Ok(len)) = (u64::try_from(offset), u64::try_from(length)) else {
        return Ok(EINVAL);
    };
    if len == 0 || off.checked_add(len).is_none_or(|end| end > file.size()) {
        return Ok(EINVAL);
    }
    // The instance runs one call at a time: the byte count is this call's alone.
    let bytes = file.prefetch_bytes.load(Ordering::Relaxed) + len;
    if bytes > abi::RA_MAX_BYTES || !file.prefetched.ask(Extent { off, len }) {
        return Ok(ENOSPC);
    }
    file.prefetch_bytes.store(bytes, Ordering::Relaxed);
    Ok(0)
}

impl GraftPoint for ComputeRa {
    const NAME: &'static str = "file.compute_ra";
    const CALLABLE: &'static [&'static str] = &["vino_prefetch"];
    const USES_ARG_AREA: bool = true;
    const RECORDS_DEFAULT: bool = true;
    type Env = RaFile;
    type Args<'a> = Read;
    type Output = Extents;
    type Params = (i64, i32, i64);
    type Results = i32;

    fn default_policy(file: &RaFile, read: &Read) -> Extents {
        match file.mode() {
            RaMode::Off => Extents::new(),
            RaMode::Default => file.sequential(read),
        }
    }
    fn encode(file: &RaFile, read: &Read, _: &mut [u8]) -> (i64, i32, i64) {
        file.prefetched.begin_call();
        file.prefetch_bytes.store(0, Ordering::Relaxed);
        (read.offset as i64, read.len as i32, file.size() as i64)
    }
    fn decode(file: &RaFile, _: &Read, count: i32, area: &[u8]) -> Result<Extents, Invalid> {
        abi::decode_extents(count, area, file.size())
    }
    /// The extents in the area, (offset, length) little-endian, as a graft writes them.
    fn answer(_: &RaFile, _: &Read, extents: &Extents, area: &mut [u8]) -> Option<i32> {
        let extents = extents.as_slice();
        let room = area.get_mut(..extents.len() * 16)?;
        for (slot, e) in room.chunks_exact_mut(16).zip(extents) {
            slot[..8].copy_from_slice(&e.off.to_le_bytes());
            slot[8..].copy_from_slice(&e.len.to_le_bytes());
        }
        Some(extents.len() as i32)
    }
    fn callables(c: &mut Callables<RaFile>) {
        c.func2("vino_prefetch", prefetch);
    }
}

/// What the read-ahead policy wants after one read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    /// The extents the policy returned.
    pub decided: Extents,
    /// What its committed `vino_prefetch` calls asked for.
    pub prefetched: Extents,
}

/// The read-ahead state of one open file: its `file.compute_ra` graftpoint.
pub struct ReadAhead {
    slot: Arc<GraftSlot<ComputeRa>>,
    /// A candidate in shadow beside the live policy (`vino graft try`), and whether there is one
    /// (read without the lock on every read).
    shadow: parking_lot::Mutex<Option<Arc<crate::shadow::RaTry>>>,
    trying: std::sync::atomic::AtomicBool,
}

impl ReadAhead {
    /// Read-ahead for a file opened by `opener`; the graftpoint is named
    /// `file.compute_ra/<suffix>` (the descriptor number) and only the opener may graft it.
    pub fn new(runtime: &Runtime, opener: Pid, suffix: &str) -> Self {
        let slot = GraftSlot::new(runtime, Arc::new(RaFile::new()), Access::Process(opener), Some(suffix));
        ReadAhead {
            slot: Arc::new(slot),
            shadow: parking_lot::Mutex::new(None),
            trying: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn slot(&self) -> &Arc<GraftSlot<ComputeRa>> {
        &self.slot
    }

    pub fn set_mode(&self, mode: RaMode) {
        self.slot
            .env()
            .mode
            .store(u8::from(mode == RaMode::Off), Ordering::Relaxed);
    }

    /// Asks the policy what to prefetch after a read of `len` bytes at `offset` in a file of
    /// `size` bytes.
    pub fn advise(&self, offset: u64, len: usize, size: u64) -> Advice {
        let file = self.slot.env();
        file.size.store(size, Ordering::Relaxed);
        if file.mode() == RaMode::Off {
            return Advice::default();
        }
        let decided = self.slot.invoke(&Read {
            offset,
            len: len.min(u32::MAX as usize) as u32,
        });
        let mut prefetched = Extents::new();
        for extent in file.prefetched.take() {
            prefetched.push(extent);
        }
        let advice = Advice { decided, prefetched };
        if self.trying.load(Ordering::Relaxed)
            && let Some(shadow) = &*self.shadow.lock()
        {
            shadow.offer(offset, len.min(u32::MAX as usize) as u32, size, &advice);
        }
        advice
    }

    /// Starts `wasm`, a `file.compute_ra` graft, in shadow beside this file's live read-ahead,
    /// with ghost caches of `frames` pages (see [`crate::shadow`]); it replaces a shadow already
    /// there. The caller checks that `owner` may graft this file's graftpoint.
    pub fn try_start(
        &self,
        wasm: &[u8],
        owner: vino_graft::Owner,
        frames: usize,
        queue: usize,
    ) -> Result<Arc<crate::shadow::RaTry>, vino_graft::LoadError> {
        let shadow = crate::shadow::RaTry::start(&self.slot, wasm, owner, frames, queue)?;
        let old = self.shadow.lock().replace(shadow.clone());
        self.trying.store(true, Ordering::Relaxed);
        if let Some(old) = old {
            old.stop();
        }
        Ok(shadow)
    }

    /// Stops the shadow, once it has drained what the live path offered it: what it found.
    pub fn try_stop(&self) -> Option<crate::shadow::RaTryReport> {
        let shadow = self.shadow.lock().take()?;
        self.trying.store(false, Ordering::Relaxed);
        Some(shadow.stop())
    }

    /// The shadow, if one runs.
    pub fn try_handle(&self) -> Option<Arc<crate::shadow::RaTry>> {
        self.shadow.lock().clone()
    }
}

/// A file closed with a candidate in shadow beside its read-ahead ends the shadow: nothing
/// more will be offered, and its thread and charges go once it has drained.
impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(shadow) = self.shadow.get_mut().take() {
            shadow.close();
        }
    }
}

/// A dirty page offered to `cache.writeback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritebackArgs {
    pub object: u64,
    pub index: u64,
    /// How long the page has been dirty.
    pub age_ns: u64,
}

/// Most dirty pages offered to `cache.writeback` per call.
pub const WRITEBACK_MAX: usize = 128;
/// The default writes pages dirty for longer than this (the 30-second update of Unix).
pub const DIRTY_AGE_NS: u64 = 30_000_000_000;

/// `cache.writeback` (privileged): which of the dirty pages offered (oldest first) to write now.
/// The argument area holds `n` entries `{u64 object; u64 index; u64 age_ns; u32 write; u32 pad}`;
/// the graft sets `write` on the ones to write and returns how many it set.
pub struct Writeback;

impl GraftPoint for Writeback {
    const NAME: &'static str = "cache.writeback";
    const USES_ARG_AREA: bool = true;
    type Env = ();
    type Args<'a> = &'a [WritebackArgs];
    type Output = Vec<usize>;
    type Params = (i32, i64);
    type Results = i32;

    fn default_policy(_: &(), pages: &&[WritebackArgs]) -> Vec<usize> {
        pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.age_ns >= DIRTY_AGE_NS)
            .map(|(i, _)| i)
            .collect()
    }
    fn encode(_: &(), pages: &&[WritebackArgs], area: &mut [u8]) -> (i32, i64) {
        let n = pages.len().min(WRITEBACK_MAX).min(area.len() / 32);
        for (slot, p) in area.chunks_exact_mut(32).zip(&pages[..n]) {
            slot[..8].copy_from_slice(&p.object.to_le_bytes());
            slot[8..16].copy_from_slice(&p.index.to_le_bytes());
            slot[16..24].copy_from_slice(&p.age_ns.to_le_bytes());
            slot[24..32].fill(0);
        }
        (n as i32, vino_vlt::now_ns() as i64)
    }
    fn decode(_: &(), pages: &&[WritebackArgs], count: i32, area: &[u8]) -> Result<Vec<usize>, Invalid> {
        let n = pages.len().min(WRITEBACK_MAX);
        let chosen: Vec<usize> = (0..n)
            .filter(|i| u32::from_le_bytes(area[i * 32 + 24..i * 32 + 28].try_into().expect("4 bytes")) != 0)
            .collect();
        if count < 0 || count as usize != chosen.len() {
            return Err(Invalid(format!("returned {count} but marked {} pages", chosen.len())));
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u64 = BLOCK_SIZE as u64;

    fn file(size: u64) -> RaFile {
        let f = RaFile::new();
        f.size.store(size, Ordering::Relaxed);
        f
    }

    /// What the default policy asks for after a read, as (offset, length) in blocks.
    fn after(f: &RaFile, block: u64, blocks: u32) -> Vec<(u64, u64)> {
        let read = Read {
            offset: block * BS,
            len: blocks * BLOCK_SIZE as u32,
        };
        f.sequential(&read)
            .as_slice()
            .iter()
            .map(|e| (e.off / BS, e.len / BS))
            .collect()
    }

    #[test]
    fn a_streaming_reader_keeps_the_window_ahead_without_asking_twice() {
        let f = file(1 << 30);
        assert!(after(&f, 0, 32).is_empty(), "one read is not a stream");
        assert_eq!(after(&f, 32, 32), [(64, MIN_CLUSTER)]);
        assert_eq!(after(&f, 64, 32), [(96, 2 * MIN_CLUSTER)]);
        let mut asked: Vec<(u64, u64)> = Vec::new();
        let mut at = 96;
        while at < 20_000 {
            asked.extend(after(&f, at, 32));
            at += 32;
        }
        // Nothing is asked for twice; once the window is whole the requests follow each other
        // and each is at least half of it.
        for pair in asked.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "overlap: {asked:?}");
        }
        let late: Vec<_> = asked.iter().filter(|(off, _)| *off > 4 * MAX_CLUSTER).collect();
        assert!(late.len() > 10);
        for pair in late.windows(2) {
            assert_eq!(pair[0].0 + pair[0].1, pair[1].0, "a gap: {late:?}");
        }
        assert!(late.iter().all(|(_, len)| *len >= MAX_CLUSTER / 2), "{late:?}");
        // The window reaches past the reader by at most its size.
        let (off, len) = *asked.last().unwrap();
        assert!(off + len <= at + MAX_CLUSTER);
        assert!(off + len >= at);
    }

    #[test]
    fn a_jump_resets_the_window_and_the_end_of_the_file_bounds_it() {
        let f = file(1 << 30);
        for b in 0..20 {
            after(&f, b * 64, 64);
        }
        assert!(after(&f, 100_000, 1).is_empty(), "a jump is not a stream");
        assert_eq!(after(&f, 100_001, 1), [(100_002, MIN_CLUSTER)]);

        let f = file(10 * BS + 100);
        after(&f, 0, 1);
        assert_eq!(after(&f, 1, 1), [(2, MIN_CLUSTER)]);
        let read = Read { offset: 2 * BS, len: 1 };
        let tail: Vec<_> = f.sequential(&read).as_slice().iter().map(|e| (e.off, e.len)).collect();
        assert_eq!(tail, [(6 * BS, 4 * BS + 100)], "up to the end of the file, not past it");
        assert!(after(&f, 3, 1).is_empty(), "everything to the end is asked for already");
    }
}
