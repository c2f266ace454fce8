//! The three thesis workloads as seen from the host ("the kernel"): the
//! interface every extension technology implements, the inputs, and the
//! drivers that invoke the extension at graft granularity.

use anyhow::{Result, bail};

/// Hot-list length searched per call (the model application averages 64).
pub const HOT_LIST_LEN: u32 = 64;
/// Leaf pages of the model TPC-B database; page numbers are drawn below this.
pub const HOT_MAX_PAGE: u32 = 50_000;
/// Seed of the hot list (shared by every variant).
pub const HOT_SEED: u32 = 0x5eed_0001;
/// LRU candidates handed to the graft per call.
pub const CANDIDATES_PER_CALL: usize = 8;
/// Number of distinct candidate lists the benchmark cycles through.
pub const CANDIDATE_LISTS: usize = 1024;
/// Invocations per saved fault in the model application (50,000 / 64).
pub const MODEL_CALLS_PER_SAVED_FAULT: f64 = 781.0;

/// Bytes fingerprinted by the MD5 workload.
pub const MD5_BYTES: usize = 1 << 20;
/// One graft invocation per 8 KB read, as the thesis assumed for upcalls.
pub const MD5_CHUNK: usize = 8 << 10;
/// RFC 1321 test vector.
pub const MD5_ABC: &str = "900150983cd24fb0d6963f7d28e17f72";

/// Block writes of the logical-disk run (a 1 GB disk of 4 KB blocks).
pub const LD_WRITES: u32 = 262_144;
/// Seed of the logical-disk write stream.
pub const LD_SEED: u32 = 0x1d15_c0de;

/// What the host needs from an extension technology.  Every method is one
/// invocation of the extension (a call, a sandboxed call, or an upcall).
pub trait Extension {
    /// A call that does no work: the cost of crossing into the extension.
    fn nop(&mut self, x: u32) -> Result<u32>;

    /// Builds the hot list; returns its length.
    fn hl_setup(&mut self, n: u32, max_page: u32, seed: u32) -> Result<u32>;
    /// Page number of the i-th hot-list entry.
    fn hl_page(&mut self, i: u32) -> Result<u32>;
    /// Copies the LRU candidates into the extension's argument area and
    /// asks for a victim: the index of the first candidate not on the hot
    /// list, or `cand.len()`.
    fn hl_pick(&mut self, cand: &[u32]) -> Result<u32>;

    /// Places the data to fingerprint where the extension reads it (not
    /// timed: a stream graft finds its data in its argument area).
    fn md5_load(&mut self, data: &[u8]) -> Result<()>;
    fn md5_begin(&mut self) -> Result<()>;
    /// Feeds `len` bytes starting at `offset` of the loaded data.
    fn md5_feed(&mut self, offset: u32, len: u32) -> Result<()>;
    fn md5_end(&mut self) -> Result<[u8; 16]>;

    /// Empties the logical disk and restarts the write stream.
    fn ld_reset(&mut self, seed: u32) -> Result<()>;
    /// Performs the next `n` writes; returns the last physical block or
    /// `u32::MAX` when the disk is full.
    fn ld_write_next(&mut self, n: u32) -> Result<u32>;
    /// FNV-1a checksum of the map, the live counts and the write position.
    fn ld_checksum(&mut self) -> Result<u64>;
    /// Sum of the per-segment live counts.
    fn ld_live_total(&mut self) -> Result<u32>;
}

/// xorshift32, the same generator the C workloads use.
pub fn xorshift32(state: &mut u32) -> u32 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    x
}

fn below(state: &mut u32, bound: u32) -> u32 {
    ((xorshift32(state) as u64 * bound as u64) >> 32) as u32
}

/// The LRU candidate lists the benchmark cycles through: page numbers drawn
/// uniformly from the database, so the first candidate is hot about once in
/// 781 calls, as in the thesis' model.
pub fn candidate_lists() -> Vec<[u32; CANDIDATES_PER_CALL]> {
    let mut rng = 0xca9d_1da7u32;
    (0..CANDIDATE_LISTS)
        .map(|_| {
            let mut l = [0u32; CANDIDATES_PER_CALL];
            for c in &mut l {
                *c = below(&mut rng, HOT_MAX_PAGE);
            }
            l
        })
        .collect()
}

/// The 1 MB input of the MD5 workload.
pub fn md5_input() -> Vec<u8> {
    let mut rng = 0x4d44_3521u32;
    let mut v = Vec::with_capacity(MD5_BYTES);
    while v.len() < MD5_BYTES {
        v.extend_from_slice(&xorshift32(&mut rng).to_le_bytes());
    }
    v.truncate(MD5_BYTES);
    v
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sets up the hot list and checks its length.
pub fn hot_setup<E: Extension + ?Sized>(e: &mut E) -> Result<()> {
    let n = e.hl_setup(HOT_LIST_LEN, HOT_MAX_PAGE, HOT_SEED)?;
    if n != HOT_LIST_LEN {
        bail!("hot list has {n} entries, expected {HOT_LIST_LEN}");
    }
    Ok(())
}

/// One pass over every candidate list: a digest of the victims chosen (the
/// workload's answer, compared across technologies).
pub fn hot_answer<E: Extension + ?Sized>(e: &mut E, lists: &[[u32; CANDIDATES_PER_CALL]]) -> Result<String> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut hot_first = 0;
    for l in lists {
        let v = e.hl_pick(l)?;
        if v > 0 {
            hot_first += 1;
        }
        h = (h ^ v as u64).wrapping_mul(0x100_0000_01b3);
    }
    Ok(format!(
        "{h:016x} ({hot_first} of {} calls skipped a hot candidate)",
        lists.len()
    ))
}

/// MD5 of the first `len` bytes of the loaded data, one invocation per
/// 8 KB chunk.
pub fn md5_run<E: Extension + ?Sized>(e: &mut E, len: usize) -> Result<[u8; 16]> {
    e.md5_begin()?;
    let mut off = 0;
    while off < len {
        let n = (len - off).min(MD5_CHUNK);
        e.md5_feed(off as u32, n as u32)?;
        off += n;
    }
    e.md5_end()
}

/// The whole logical-disk run: `LD_WRITES` writes, one invocation per write
/// (`per_write`) or a single invocation for the run.  Returns the checksum.
pub fn ld_run<E: Extension + ?Sized>(e: &mut E, per_write: bool) -> Result<u64> {
    e.ld_reset(LD_SEED)?;
    ld_writes(e, per_write)?;
    e.ld_checksum()
}

/// The timed part of the logical-disk run (after a reset).
pub fn ld_writes<E: Extension + ?Sized>(e: &mut E, per_write: bool) -> Result<u32> {
    let last = if per_write {
        let mut last = 0;
        for _ in 0..LD_WRITES {
            last = e.ld_write_next(1)?;
        }
        last
    } else {
        e.ld_write_next(LD_WRITES)?
    };
    if last == u32::MAX {
        bail!("logical disk filled up before {LD_WRITES} writes");
    }
    Ok(last)
}

/// A Rust model of the C logical disk, used to check the checksum the
/// extensions report.
pub fn ld_reference_checksum(writes: u32, seed: u32) -> u64 {
    const BLOCKS: u32 = 262_144;
    const SEG: u32 = 16;
    const HOT: u32 = BLOCKS / 5;
    let mut map = vec![u32::MAX; BLOCKS as usize];
    let mut live = vec![0u32; (BLOCKS / SEG) as usize];
    let mut rng = if seed == 0 { 1 } else { seed };
    let (mut seg, mut fill, mut next_free) = (u32::MAX, SEG, 0u32);
    for _ in 0..writes {
        let idx = if below(&mut rng, 10) < 8 {
            below(&mut rng, HOT)
        } else {
            HOT + below(&mut rng, BLOCKS - HOT)
        };
        let lb = idx.wrapping_mul(0x9e37_79b1) & (BLOCKS - 1);
        if fill == SEG {
            if next_free == BLOCKS / SEG {
                break;
            }
            seg = next_free;
            next_free += 1;
            fill = 0;
        }
        let old = map[lb as usize];
        if old != u32::MAX {
            live[(old / SEG) as usize] -= 1;
        }
        map[lb as usize] = seg * SEG + fill;
        fill += 1;
        live[seg as usize] += 1;
    }
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in map.iter().chain(live.iter()).chain([&seg, &fill]) {
        h = (h ^ *v as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}
