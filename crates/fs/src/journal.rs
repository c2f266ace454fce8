//! The metadata journal: write-ahead, physical (whole block images), redo-only, circular.
//!
//! ```text
//! header slot 0, header slot 1     which transaction to replay first, and where it starts
//! log: ... [desc][img]..[desc][img]..[commit] [desc][img]..[commit] ...
//! ```
//!
//! A transaction is one or more descriptor blocks, each followed by the images it lists (up to
//! [`PER_DESC`] home block numbers), then a commit block. Every descriptor and commit carries the
//! file system's identity and the transaction's sequence number; the commit carries a CRC-32 of
//! all the descriptor and image blocks and one of itself. A transaction counts only if its
//! commit block is whole and both checksums match, so one flush after writing the whole
//! transaction is enough: a transaction torn by a power cut fails its checksum and is ignored,
//! and so is anything after it.
//!
//! The header is written in two slots alternately, each with a generation number and a
//! checksum: a torn header write leaves the other slot, which still describes a log that has
//! not been overwritten (the log is reused only after the header that frees it is durable).

use crate::layout::{BS, Block, Geometry, crc, get_u32, get_u64, put_u32, put_u64};
use std::io;

const HEADER_MAGIC: u32 = 0x4448_4A56; // "VJHD"
const DESC_MAGIC: u32 = 0x5344_4A56; // "VJDS"
const COMMIT_MAGIC: u32 = 0x4D43_4A56; // "VJCM"

/// Home block numbers one descriptor block lists.
pub const PER_DESC: usize = (BS - 32) / 8;

/// A journal header slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHeader {
    pub fs_id: u64,
    /// Increases with every header write; the valid slot with the higher one wins.
    pub generation: u64,
    /// Log position of the first transaction to replay.
    pub tail: u64,
    /// Its sequence number.
    pub seq: u64,
}

impl JournalHeader {
    pub fn encode(&self) -> Box<Block> {
        let mut b = Box::new([0u8; BS]);
        put_u32(&mut b[..], 0, HEADER_MAGIC);
        put_u64(&mut b[..], 8, self.fs_id);
        put_u64(&mut b[..], 16, self.generation);
        put_u64(&mut b[..], 24, self.tail);
        put_u64(&mut b[..], 32, self.seq);
        let c = crc(0, &b[..BS - 4]);
        put_u32(&mut b[..], BS - 4, c);
        b
    }

    pub fn decode(b: &[u8], fs_id: u64, log_len: u64) -> Option<JournalHeader> {
        if get_u32(b, 0) != HEADER_MAGIC || get_u32(b, BS - 4) != crc(0, &b[..BS - 4]) {
            return None;
        }
        let h = JournalHeader {
            fs_id: get_u64(b, 8),
            generation: get_u64(b, 16),
            tail: get_u64(b, 24),
            seq: get_u64(b, 32),
        };
        (h.fs_id == fs_id && h.tail < log_len).then_some(h)
    }

    /// Which device block this header is written to.
    pub fn slot(&self) -> u64 {
        crate::layout::JOURNAL_START + self.generation % 2
    }
}

/// Picks the newer valid header of the two slots.
pub fn pick_header(slot0: &[u8], slot1: &[u8], fs_id: u64, log_len: u64) -> Option<JournalHeader> {
    let a = JournalHeader::decode(slot0, fs_id, log_len);
    let b = JournalHeader::decode(slot1, fs_id, log_len);
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.generation > a.generation { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The blocks of one transaction, in log order: descriptors, images, commit.
pub fn encode_transaction(fs_id: u64, seq: u64, images: &[(u64, &Block)]) -> Vec<u8> {
    let chunks: Vec<_> = images.chunks(PER_DESC).collect();
    let total = chunks.len() + images.len() + 1;
    let mut out = vec![0u8; total * BS];
    let mut at = 0usize;
    let mut hasher = crc32fast::Hasher::new();
    for (ci, chunk) in chunks.iter().enumerate() {
        let d = &mut out[at..at + BS];
        put_u32(d, 0, DESC_MAGIC);
        put_u32(d, 4, chunk.len() as u32);
        put_u64(d, 8, fs_id);
        put_u64(d, 16, seq);
        put_u32(d, 24, u32::from(ci + 1 == chunks.len()));
        for (i, (home, _)) in chunk.iter().enumerate() {
            put_u64(d, 32 + 8 * i, *home);
        }
        hasher.update(d);
        at += BS;
        for (_, img) in chunk.iter() {
            out[at..at + BS].copy_from_slice(&img[..]);
            hasher.update(&img[..]);
            at += BS;
        }
    }
    let data_crc = hasher.finalize();
    let c = &mut out[at..at + BS];
    put_u32(c, 0, COMMIT_MAGIC);
    put_u32(c, 4, images.len() as u32);
    put_u64(c, 8, fs_id);
    put_u64(c, 16, seq);
    put_u32(c, 24, data_crc);
    put_u32(c, 28, chunks.len() as u32);
    let own = crc(0, &c[..BS - 4]);
    put_u32(c, BS - 4, own);
    out
}

/// Blocks a transaction of `n` images takes in the log.
pub fn transaction_len(n: usize) -> u64 {
    (n.div_ceil(PER_DESC) + n + 1) as u64
}

/// A committed transaction found in the log.
pub struct Found {
    pub seq: u64,
    pub images: Vec<(u64, Box<Block>)>,
    /// Log blocks it takes.
    pub len: u64,
}

/// What a scan of the log found: the committed transactions from the header's tail on, and
/// where the next transaction goes.
pub struct Scan {
    pub transactions: Vec<Found>,
    pub end: u64,
    pub next_seq: u64,
}

/// Reads the log from the header's tail and returns every committed transaction, stopping at
/// the first one that is missing, torn or not committed. `read` reads a device block. A
/// transaction that checks but names a home block outside the file system is corruption.
pub fn scan(
    geo: &Geometry,
    header: &JournalHeader,
    read: &mut dyn FnMut(u64) -> io::Result<Box<Block>>,
) -> Result<Scan, ScanError> {
    let log_len = geo.log_len();
    let mut pos = header.tail;
    let mut seq = header.seq;
    let mut used = 0u64;
    let mut out = Vec::new();
    let at = |p: u64| geo.log_start() + p % log_len;
    'txns: loop {
        let mut hasher = crc32fast::Hasher::new();
        let mut images = Vec::new();
        let mut len = 0u64;
        let mut descs = 0u32;
        loop {
            if used + len + 1 > log_len {
                break 'txns;
            }
            let d = read(at(pos + len))?;
            if get_u32(&d[..], 0) != DESC_MAGIC || get_u64(&d[..], 8) != header.fs_id || get_u64(&d[..], 16) != seq {
                break 'txns;
            }
            let count = get_u32(&d[..], 4) as usize;
            if count == 0 || count > PER_DESC || used + len + 1 + count as u64 > log_len {
                break 'txns;
            }
            hasher.update(&d[..]);
            len += 1;
            descs += 1;
            for i in 0..count {
                let home = get_u64(&d[..], 32 + 8 * i);
                let img = read(at(pos + len))?;
                hasher.update(&img[..]);
                images.push((home, img));
                len += 1;
            }
            if get_u32(&d[..], 24) == 1 {
                break;
            }
        }
        if used + len + 1 > log_len {
            break;
        }
        let c = read(at(pos + len))?;
        len += 1;
        let committed = get_u32(&c[..], 0) == COMMIT_MAGIC
            && get_u32(&c[..], BS - 4) == crc(0, &c[..BS - 4])
            && get_u64(&c[..], 8) == header.fs_id
            && get_u64(&c[..], 16) == seq
            && get_u32(&c[..], 4) as usize == images.len()
            && get_u32(&c[..], 28) == descs
            && get_u32(&c[..], 24) == hasher.finalize();
        if !committed {
            break;
        }
        if let Some((home, _)) = images.iter().find(|(h, _)| !geo.is_journalable(*h)) {
            return Err(ScanError::Corrupt(format!(
                "journal transaction {seq} names block {home}, which is not a metadata block"
            )));
        }
        out.push(Found { seq, images, len });
        pos = (pos + len) % log_len;
        used += len;
        seq += 1;
    }
    Ok(Scan {
        transactions: out,
        end: pos,
        next_seq: seq,
    })
}

/// The first sequence number a writer may use after a scan that expected `next` next: past
/// every committed transaction anywhere in the log. A scan stops at the first transaction that
/// is damaged, but older writes may have left whole transactions after it with the numbers
/// that follow; were the writer to number its own from `next`, a later scan could run from a
/// new transaction into one of those and replay stale blocks. Only commit blocks that check
/// (magic, identity, their own checksum) count.
pub fn fresh_seq(
    geo: &Geometry,
    fs_id: u64,
    next: u64,
    read: &mut dyn FnMut(u64) -> io::Result<Box<Block>>,
) -> io::Result<u64> {
    let mut fresh = next;
    for p in 0..geo.log_len() {
        let c = read(geo.log_start() + p)?;
        if get_u32(&c[..], 0) == COMMIT_MAGIC
            && get_u64(&c[..], 8) == fs_id
            && get_u32(&c[..], BS - 4) == crc(0, &c[..BS - 4])
        {
            fresh = fresh.max(get_u64(&c[..], 16).saturating_add(1));
        }
    }
    Ok(fresh)
}

#[derive(Debug)]
pub enum ScanError {
    Io(io::Error),
    Corrupt(String),
}

impl From<io::Error> for ScanError {
    fn from(e: io::Error) -> Self {
        ScanError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{STATE_CLEAN, Superblock};
    use std::collections::HashMap;

    fn geo() -> Geometry {
        Geometry::new(&Superblock {
            block_count: 2048,
            blocks_per_group: 1024,
            inodes_per_group: 64,
            groups: 2,
            journal_blocks: 96,
            maxbpg: 256,
            fs_id: 1,
            state: STATE_CLEAN,
            mount_count: 0,
            created_ns: 0,
            mounted_ns: 0,
        })
        .unwrap()
    }

    fn img(v: u8) -> Box<Block> {
        Box::new([v; BS])
    }

    /// Writes transactions into a map standing for the device, as the file system does.
    fn write_log(
        disk: &mut HashMap<u64, Box<Block>>,
        geo: &Geometry,
        pos: u64,
        seq: u64,
        images: &[(u64, Box<Block>)],
    ) -> u64 {
        let refs: Vec<(u64, &Block)> = images.iter().map(|(h, b)| (*h, &**b)).collect();
        let bytes = encode_transaction(9, seq, &refs);
        for (i, chunk) in bytes.chunks(BS).enumerate() {
            let p = (pos + i as u64) % geo.log_len();
            disk.insert(geo.log_start() + p, Box::new(chunk.try_into().unwrap()));
        }
        (pos + (bytes.len() / BS) as u64) % geo.log_len()
    }

    fn reader(disk: &HashMap<u64, Box<Block>>) -> impl FnMut(u64) -> io::Result<Box<Block>> + '_ {
        |b| Ok(disk.get(&b).cloned().unwrap_or_else(|| Box::new([0; BS])))
    }

    #[test]
    fn header_slots() {
        let h = JournalHeader {
            fs_id: 9,
            generation: 5,
            tail: 3,
            seq: 10,
        };
        let older = JournalHeader { generation: 4, ..h };
        let e = h.encode();
        assert_eq!(JournalHeader::decode(&e[..], 9, 62), Some(h));
        assert_eq!(JournalHeader::decode(&e[..], 8, 62), None, "other file system");
        assert_eq!(pick_header(&older.encode()[..], &e[..], 9, 62), Some(h));
        let mut torn = e.clone();
        torn[100] = 1;
        assert_eq!(pick_header(&older.encode()[..], &torn[..], 9, 62), Some(older));
    }

    #[test]
    fn scan_finds_committed_transactions_and_stops_at_a_torn_one() {
        let g = geo();
        let mut disk = HashMap::new();
        let t1 = vec![(100, img(1)), (200, img(2))];
        let t2 = vec![(300, img(3))];
        let p = write_log(&mut disk, &g, 55, 7, &t1); // wraps around the end of the log
        let p2 = write_log(&mut disk, &g, p, 8, &t2);
        let h = JournalHeader {
            fs_id: 9,
            generation: 1,
            tail: 55,
            seq: 7,
        };
        let s = scan(&g, &h, &mut reader(&disk)).unwrap();
        assert_eq!(s.transactions.len(), 2);
        assert_eq!(s.end, p2);
        assert_eq!(s.next_seq, 9);
        assert_eq!(s.transactions[0].images[1].0, 200);
        // Tear the second transaction's image: only the first counts.
        let at = g.log_start() + (p + 1) % g.log_len();
        disk.get_mut(&at).unwrap()[7] ^= 1;
        let s = scan(&g, &h, &mut reader(&disk)).unwrap();
        assert_eq!(s.transactions.len(), 1);
        assert_eq!(s.end, p);
        // A header expecting another sequence number finds nothing.
        let s = scan(&g, &JournalHeader { seq: 8, ..h }, &mut reader(&disk)).unwrap();
        assert_eq!(s.transactions.len(), 0);
    }

    #[test]
    fn a_writer_after_a_damaged_transaction_numbers_past_the_whole_ones_behind_it() {
        let g = geo();
        let mut disk = HashMap::new();
        let p1 = write_log(&mut disk, &g, 0, 7, &[(100, img(1))]);
        let p2 = write_log(&mut disk, &g, p1, 8, &[(200, img(2))]);
        write_log(&mut disk, &g, p2, 9, &[(300, img(3))]);
        // Transaction 8 damaged: the scan stops before it, and 9 lies whole behind it.
        disk.get_mut(&(g.log_start() + p1 + 1)).unwrap()[0] ^= 1;
        let h = JournalHeader {
            fs_id: 9,
            generation: 1,
            tail: 0,
            seq: 7,
        };
        let s = scan(&g, &h, &mut reader(&disk)).unwrap();
        assert_eq!((s.transactions.len(), s.next_seq), (1, 8));
        let fresh = fresh_seq(&g, 9, s.next_seq, &mut reader(&disk)).unwrap();
        assert_eq!(fresh, 10);
        // Were the writer to number from 8, a new transaction 8 as long as the damaged one
        // would lead a later scan into the stale 9; numbered from 10 it cannot.
        let mut reused = disk.clone();
        assert_eq!(write_log(&mut reused, &g, p1, 8, &[(200, img(4))]), p2, "as long");
        let s = scan(&g, &JournalHeader { tail: p1, seq: 8, ..h }, &mut reader(&reused)).unwrap();
        assert_eq!(s.transactions.len(), 2, "the stale transaction 9 is replayed");
        write_log(&mut disk, &g, p1, fresh, &[(200, img(4))]);
        let s = scan(
            &g,
            &JournalHeader {
                tail: p1,
                seq: fresh,
                ..h
            },
            &mut reader(&disk),
        )
        .unwrap();
        assert_eq!(s.transactions.len(), 1);
    }

    #[test]
    fn big_transactions_use_several_descriptors() {
        let g = Geometry::new(&Superblock {
            block_count: 8192,
            blocks_per_group: 8192,
            inodes_per_group: 64,
            groups: 1,
            journal_blocks: 2048,
            maxbpg: 256,
            fs_id: 1,
            state: STATE_CLEAN,
            mount_count: 0,
            created_ns: 0,
            mounted_ns: 0,
        })
        .unwrap();
        let t: Vec<_> = (0..1200u64).map(|i| (3000 + i, img(i as u8))).collect();
        let mut disk = HashMap::new();
        write_log(&mut disk, &g, 0, 1, &t);
        assert_eq!(transaction_len(1200), 3 + 1200 + 1);
        let h = JournalHeader {
            fs_id: 9,
            generation: 1,
            tail: 0,
            seq: 1,
        };
        let s = scan(&g, &h, &mut reader(&disk)).unwrap();
        assert_eq!(s.transactions.len(), 1);
        assert_eq!(s.transactions[0].images.len(), 1200);
        assert_eq!(s.transactions[0].images[1199].1[0], (1199u64 % 256) as u8);
        // A committed transaction naming the superblock as home is corruption.
        let mut disk = HashMap::new();
        write_log(&mut disk, &g, 0, 1, &[(0, img(1))]);
        assert!(matches!(scan(&g, &h, &mut reader(&disk)), Err(ScanError::Corrupt(_))));
    }
}
