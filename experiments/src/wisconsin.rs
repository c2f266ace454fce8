//! The Wisconsin benchmark relation and its query 6 (Small 1998, 7.3; DeWitt's benchmark).
//!
//! A tuple is thirteen 4-byte integers and three 52-byte strings: 208 bytes. Tuples are stored
//! in `unique2` order (the clustered attribute); `unique1` is a random permutation, indexed by a
//! nonclustered index, so query 6 (a 10% range selection on `unique1` through that index) reads
//! records scattered all over the file. Everything is generated from a seed, so every run and
//! every policy reads the same records in the same order.
//!
//! The file is made of 4 KB pages of [`TUPLES_PER_PAGE`] whole tuples each (the rest of a page is
//! zero), as a database stores a relation: no tuple is split across two pages, so reading a
//! record touches one page. Packed end to end instead, one record in twenty straddled two pages
//! and LRU missed about 5% more than this layout does.

pub const TUPLE_BYTES: usize = 208;
/// Bytes of a page of the relation file.
pub const PAGE_BYTES: usize = 4096;
/// Whole tuples in a page: 19.
pub const TUPLES_PER_PAGE: usize = PAGE_BYTES / TUPLE_BYTES;

/// Where the tuple at position `p` starts in the relation file.
pub fn offset_of(p: u64) -> u64 {
    let per_page = TUPLES_PER_PAGE as u64;
    (p / per_page) * PAGE_BYTES as u64 + (p % per_page) * TUPLE_BYTES as u64
}

/// A deterministic generator (SplitMix64), so the relation (and other workloads) need no
/// external crate.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The relation: `unique1[p]` is the `unique1` of the tuple stored at position `p` (whose
/// `unique2` is `p`).
pub struct Relation {
    pub unique1: Vec<u32>,
}

impl Relation {
    pub fn generate(tuples: usize, seed: u64) -> Relation {
        let mut unique1: Vec<u32> = (0..tuples as u32).collect();
        let mut rng = Rng(seed);
        for i in (1..tuples).rev() {
            unique1.swap(i, rng.below(i as u64 + 1) as usize);
        }
        Relation { unique1 }
    }

    pub fn tuples(&self) -> usize {
        self.unique1.len()
    }

    /// Bytes of the relation file: whole pages.
    pub fn bytes(&self) -> u64 {
        (self.tuples().div_ceil(TUPLES_PER_PAGE) * PAGE_BYTES) as u64
    }

    /// The tuple at position `p`, as stored.
    pub fn tuple(&self, p: usize) -> [u8; TUPLE_BYTES] {
        let (u1, u2) = (self.unique1[p], p as u32);
        let ints = [
            u1,
            u2,
            u1 % 2,
            u1 % 4,
            u1 % 10,
            u1 % 20,
            u1 % 100,
            u1 % 1000,
            u1 % 5000,
            u1 % 50000,
            u1,
            (u1 % 100) * 2,
            (u1 % 100) * 2 + 1,
        ];
        let mut t = [0u8; TUPLE_BYTES];
        for (slot, v) in t.chunks_exact_mut(4).zip(ints) {
            slot.copy_from_slice(&v.to_le_bytes());
        }
        t[52..104].copy_from_slice(&wisconsin_string(u1));
        t[104..156].copy_from_slice(&wisconsin_string(u2));
        t[156..208].copy_from_slice(&[b"AAAA", b"HHHH", b"OOOO", b"VVVV"][p % 4].repeat(13));
        t
    }

    /// The whole relation file: each tuple at its [`offset_of`], in pages of whole tuples.
    pub fn file(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes() as usize];
        for p in 0..self.tuples() {
            let at = offset_of(p as u64) as usize;
            out[at..at + TUPLE_BYTES].copy_from_slice(&self.tuple(p));
        }
        out
    }

    /// The nonclustered index on `unique1`: for each key in order, the position of its tuple.
    pub fn index(&self) -> Vec<u32> {
        let mut by_key = vec![0u32; self.tuples()];
        for (p, &k) in self.unique1.iter().enumerate() {
            by_key[k as usize] = p as u32;
        }
        by_key
    }

    /// Query 6: the positions of the tuples with `unique1` in `[lo, lo + n/10)`, in index order.
    pub fn query6(&self, lo: u32) -> Vec<u32> {
        let n = self.tuples() as u32;
        let count = n / 10;
        let lo = lo.min(n - count);
        self.index()[lo as usize..(lo + count) as usize].to_vec()
    }
}

/// The benchmark's string attribute: seven significant letters from the value, then 'x' padding.
fn wisconsin_string(v: u32) -> [u8; 52] {
    let mut s = [b'x'; 52];
    let mut v = v;
    for c in s[..7].iter_mut().rev() {
        *c = b'A' + (v % 26) as u8;
        v /= 26;
    }
    s
}

/// Reads a tuple's `unique1` back (to check that a query read the right record).
pub fn unique1_of(tuple: &[u8]) -> u32 {
    u32::from_le_bytes(tuple[..4].try_into().expect("a tuple has 4 bytes of unique1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relation_is_a_permutation_and_query6_selects_ten_percent() {
        let r = Relation::generate(1000, 7);
        let mut keys = r.unique1.clone();
        keys.sort();
        assert_eq!(keys, (0..1000).collect::<Vec<_>>());
        let q = r.query6(100);
        assert_eq!(q.len(), 100);
        for (i, &p) in q.iter().enumerate() {
            assert_eq!(unique1_of(&r.tuple(p as usize)), 100 + i as u32);
        }
        let file = r.file();
        assert_eq!(file.len(), 1000_usize.div_ceil(19) * 4096);
        for p in [0, 18, 19, 500, 999] {
            let at = offset_of(p) as usize;
            assert_eq!(&file[at..at + TUPLE_BYTES], &r.tuple(p as usize)[..], "tuple {p}");
            assert_eq!(at / 4096, (at + TUPLE_BYTES - 1) / 4096, "tuple {p} lies in one page");
        }
        assert_eq!(Relation::generate(1000, 7).unique1, r.unique1, "deterministic");
    }

    #[test]
    fn full_size_relation_is_about_21_mb() {
        let r = Relation::generate(100_000, 1);
        // 5,264 pages of 19 tuples: 21.6 MB, the thesis' "21 MB".
        assert_eq!(r.bytes(), 5_264 * 4096);
        assert_eq!(&r.tuple(5)[156..160], b"HHHH");
    }
}
