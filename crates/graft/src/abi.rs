//! Argument-area layouts of `vas.pick_victim` and `file.compute_ra` (`docs/graft-abi.md`), shared
//! by the page cache (`vino-cache`) and the toy kernel's `toy.pick_victim` and `toy.compute_ra`,
//! which take and return the same.

use crate::point::Invalid;

/// Most candidates passed to `vas.pick_victim` in one page (one call of the entry point).
pub const VICTIM_MAX: usize = 256;
/// What a `vas.pick_victim` graft returns to see the next page of candidates.
pub const VICTIM_MORE: i32 = -2;
/// Where in the argument area the index of a page's first candidate lies (`uint64_t`), after
/// the largest page of candidates.
pub const VICTIM_FIRST_AT: usize = VICTIM_MAX * 8;
/// Most extents `file.compute_ra` may return per call.
pub const RA_MAX_EXTENTS: usize = 16;
/// Most bytes `file.compute_ra` may ask for per call.
pub const RA_MAX_BYTES: u64 = 1 << 20;

/// Copies the eviction candidates (LRU order) into the argument area; returns how many fit.
pub fn encode_candidates(pages: &[u64], area: &mut [u8]) -> i32 {
    let n = pages.len().min(VICTIM_MAX).min(area.len() / 8);
    for (slot, page) in area.chunks_exact_mut(8).zip(&pages[..n]) {
        slot.copy_from_slice(&page.to_le_bytes());
    }
    n as i32
}

/// Copies one page of candidates into the argument area, with `first`, the index of its first
/// candidate among all those offered so far; returns how many fit.
pub fn encode_candidate_page(pages: &[u64], first: usize, area: &mut [u8]) -> i32 {
    if let Some(slot) = area.get_mut(VICTIM_FIRST_AT..VICTIM_FIRST_AT + 8) {
        slot.copy_from_slice(&(first as u64).to_le_bytes());
    }
    encode_candidates(pages, area)
}

/// Checks the index a `vas.pick_victim` graft chose among `n` candidates.
pub fn decode_victim(choice: i32, n: usize) -> Result<usize, Invalid> {
    if choice >= 0 && (choice as usize) < n {
        Ok(choice as usize)
    } else {
        Err(Invalid(format!(
            "victim index {choice} is not one of the {n} candidates"
        )))
    }
}

/// A byte range of a file to read ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extent {
    pub off: u64,
    pub len: u64,
}

/// Up to [`RA_MAX_EXTENTS`] extents, without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extents {
    len: usize,
    items: [Extent; RA_MAX_EXTENTS],
}

impl Extents {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an extent; false if full.
    pub fn push(&mut self, e: Extent) -> bool {
        if self.len == RA_MAX_EXTENTS {
            return false;
        }
        self.items[self.len] = e;
        self.len += 1;
        true
    }

    pub fn as_slice(&self) -> &[Extent] {
        &self.items[..self.len]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn total_bytes(&self) -> u64 {
        self.as_slice().iter().map(|e| e.len).sum()
    }
}

/// Reads and checks the extents a `file.compute_ra` graft wrote: count in range, no empty
/// extent, nothing past the end of the file, at most [`RA_MAX_BYTES`] in all.
pub fn decode_extents(count: i32, area: &[u8], file_size: u64) -> Result<Extents, Invalid> {
    if count < 0 || count as usize > RA_MAX_EXTENTS {
        return Err(Invalid(format!("{count} extents (0..={RA_MAX_EXTENTS} allowed)")));
    }
    let mut out = Extents::new();
    let mut total = 0u64;
    for raw in area.chunks_exact(16).take(count as usize) {
        let off = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(raw[8..].try_into().expect("8 bytes"));
        let end = off.checked_add(len).filter(|&end| end <= file_size);
        if len == 0 || end.is_none() {
            return Err(Invalid(format!(
                "extent {off}+{len} is empty or past the end of the file ({file_size})"
            )));
        }
        total += len;
        if total > RA_MAX_BYTES {
            return Err(Invalid(format!(
                "more than {RA_MAX_BYTES} bytes of read-ahead in one call"
            )));
        }
        out.push(Extent { off, len });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_round_trip_and_cap() {
        let pages: Vec<u64> = (0..300).collect();
        let mut area = vec![0u8; 4096];
        assert_eq!(encode_candidates(&pages, &mut area), VICTIM_MAX as i32);
        assert_eq!(u64::from_le_bytes(area[8 * 7..8 * 8].try_into().unwrap()), 7);
        assert_eq!(decode_victim(3, 4), Ok(3));
        assert!(decode_victim(4, 4).is_err());
        assert!(decode_victim(-1, 4).is_err());
        assert_eq!(encode_candidate_page(&pages[..3], 512, &mut area), 3);
        assert_eq!(
            u64::from_le_bytes(area[VICTIM_FIRST_AT..VICTIM_FIRST_AT + 8].try_into().unwrap()),
            512
        );
    }

    #[test]
    fn extents_are_checked() {
        let mut area = vec![0u8; 4096];
        let put = |area: &mut [u8], i: usize, off: u64, len: u64| {
            area[i * 16..i * 16 + 8].copy_from_slice(&off.to_le_bytes());
            area[i * 16 + 8..i * 16 + 16].copy_from_slice(&len.to_le_bytes());
        };
        put(&mut area, 0, 0, 4096);
        put(&mut area, 1, 8192, 4096);
        let e = decode_extents(2, &area, 1 << 20).unwrap();
        assert_eq!(
            e.as_slice(),
            &[Extent { off: 0, len: 4096 }, Extent { off: 8192, len: 4096 }]
        );
        assert!(decode_extents(2, &area, 10_000).is_err(), "past end of file");
        assert!(decode_extents(17, &area, 1 << 20).is_err());
        assert!(decode_extents(-1, &area, 1 << 20).is_err());
        put(&mut area, 0, 0, 0);
        assert!(decode_extents(1, &area, 1 << 20).is_err(), "empty extent");
        put(&mut area, 0, u64::MAX - 1, 4096);
        assert!(decode_extents(1, &area, u64::MAX).is_err(), "overflow");
    }
}
