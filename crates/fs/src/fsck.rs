//! Checking and repairing a file system that is not mounted.
//!
//! fsck first replays the journal, as a mount would, then checks everything against everything
//! else:
//!
//! * the superblock and its backup;
//! * the journal header;
//! * every inode record (checksum, type), every block pointer (in a data area, claimed once),
//!   each inode's block count, each directory's size against its blocks;
//! * every directory block (checksum, record chain, names, types), `.` and `..`, duplicate
//!   names, entries naming free inodes, directories linked twice;
//! * reachability from the root: unreachable files and directories go to `lost+found` (named
//!   `#<inode>`); unreachable empty files are freed;
//! * link counts against the entries that name each inode;
//! * the file types: a symlink's target (1..=4095 bytes, its length the size, in the record if
//!   short, else in one block, no NUL), a device's number (only devices have one), fifos,
//!   sockets and devices have no blocks and size 0;
//! * every xattr block (claimed once, checksum, sorted records);
//! * the orphan list (its head in group 0's header): the chain has no cycle and names inodes in
//!   use, not directories, with no link and no entry naming them. Such inodes are not
//!   "unreachable"; with `repair` they are freed, as a mount would. An inode with no link that
//!   is neither named nor on the list is freed;
//! * both bitmaps of every group against the inodes in use and the blocks they claim, and the
//!   group headers' counts and bitmap checksums against the bitmaps.
//!
//! Every fix is made on an in-memory overlay of the device; with `repair` the overlay is written
//! back at the end, without it nothing is written (a replayed journal included), so the report of
//! a read-only check says exactly what a repair would fix. A clean file system has no problem.

use crate::error::{FsError, Result, corrupt};
use crate::journal::{self, JournalHeader, ScanError};
use crate::layout::*;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io;
use vino_blockdev::BlockDevice;

/// What kind of problem fsck found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ProblemKind {
    Superblock,
    Journal,
    GroupHeader,
    InodeBitmap,
    BlockBitmap,
    Inode,
    BlockPointer,
    DuplicateBlock,
    Directory,
    DirectoryEntry,
    LinkCount,
    Orphan,
    /// A symlink, device or other special file that is not what its type says.
    FileType,
    Xattr,
    /// The orphan list's chain.
    OrphanList,
    /// A stream file's chunk map: a map block or a chunk entry.
    ChunkMap,
}

/// One problem, and whether it was fixed on the device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    pub detail: String,
    pub fixed: bool,
}

/// What fsck found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FsckReport {
    pub problems: Vec<Problem>,
    /// Journal transactions replayed (into the device with `repair`, in memory without).
    pub replayed: u64,
    /// The superblock said the file system was mounted (not cleanly unmounted).
    pub was_mounted: bool,
    pub repaired: bool,
    pub files: u64,
    pub directories: u64,
    pub used_blocks: u64,
    pub free_blocks: u64,
    pub used_inodes: u64,
    /// Inodes on the orphan list (freed with `repair`, as a mount would).
    pub orphans: u64,
}

impl FsckReport {
    /// True if nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems of one kind.
    pub fn count(&self, kind: ProblemKind) -> usize {
        self.problems.iter().filter(|p| p.kind == kind).count()
    }
}

impl std::fmt::Display for FsckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} files, {} directories, {} blocks used, {} free; {} journal transactions replayed{}",
            self.files,
            self.directories,
            self.used_blocks,
            self.free_blocks,
            self.replayed,
            if self.was_mounted {
                "; was not cleanly unmounted"
            } else {
                ""
            }
        )?;
        if self.problems.is_empty() {
            return writeln!(f, "clean");
        }
        for p in &self.problems {
            writeln!(f, "{:?}: {}{}", p.kind, p.detail, if p.fixed { " (fixed)" } else { "" })?;
        }
        writeln!(
            f,
            "{} problems{}",
            self.problems.len(),
            if self.repaired { ", repaired" } else { "" }
        )
    }
}

/// The device seen through an overlay of changed blocks.
struct Image<'a> {
    dev: &'a dyn BlockDevice,
    blocks: HashMap<u64, Box<Block>>,
    written: BTreeSet<u64>,
}

impl<'a> Image<'a> {
    fn get(&mut self, b: u64) -> io::Result<&Block> {
        if !self.blocks.contains_key(&b) {
            let mut buf = Box::new([0u8; BS]);
            self.dev.read_blocks(b, &mut buf[..])?;
            self.blocks.insert(b, buf);
        }
        Ok(self.blocks.get(&b).expect("just read"))
    }

    fn get_mut(&mut self, b: u64) -> io::Result<&mut Block> {
        self.get(b)?;
        self.written.insert(b);
        Ok(self.blocks.get_mut(&b).expect("just read"))
    }

    fn put(&mut self, b: u64, data: &Block) {
        self.blocks.insert(b, Box::new(*data));
        self.written.insert(b);
    }

    fn forget(&mut self, b: u64) {
        if !self.written.contains(&b) {
            self.blocks.remove(&b);
        }
    }
}

/// Where a block pointer lives (to clear it).
#[derive(Debug, Clone, Copy)]
enum Loc {
    Direct(usize),
    Entry(u64, usize),
}

const STATIC: u32 = u32::MAX;

/// A directory entry being checked: name, inode, type code.
type Named = (Vec<u8>, u64, u8);

/// A directory block being checked: its device block, its entries, and whether it must be
/// written again.
type DirBlock = (u64, Vec<Named>, bool);

/// What the check of one directory has seen so far.
struct DirScan {
    d: u64,
    parent: u64,
    names: HashSet<Vec<u8>>,
    adopted: Vec<u64>,
    has_dot: bool,
    has_dotdot: bool,
}

struct Checker<'a> {
    img: Image<'a>,
    geo: Geometry,
    problems: Vec<Problem>,
    repair: bool,
    inodes: Vec<Inode>,
    in_use: Vec<bool>,
    dirty_inodes: BTreeSet<u64>,
    owner: Vec<u32>,
    parent: HashMap<u64, u64>,
    subdirs: HashMap<u64, u32>,
    refs: HashMap<u64, u32>,
    lost_found: Option<u64>,
    /// The orphan list as found (its bad links cut).
    orphan_list: Vec<u64>,
    /// Blocks and inodes of the orphans a repair frees: the on-disk bitmaps are compared with
    /// them freed, since freeing them is not a problem.
    released_blocks: HashSet<u64>,
    released_inodes: HashSet<u64>,
}

/// Checks the file system on `dev`, repairing what it can if `repair` (see the module
/// documentation). Fails only if no superblock can be found or the device fails.
pub fn fsck(dev: &dyn BlockDevice, repair: bool) -> Result<FsckReport> {
    let mut img = Image {
        dev,
        blocks: HashMap::new(),
        written: BTreeSet::new(),
    };
    let mut problems = Vec::new();
    let mut report = FsckReport::default();
    let mut sb = superblock(&mut img, &mut problems, repair)?;
    let geo = Geometry::new(&sb).map_err(FsError::Corrupt)?;
    report.was_mounted = sb.state == STATE_MOUNTED;
    report.replayed = replay_journal(&mut img, &geo, &sb, &mut problems, repair)?;

    let mut c = Checker::new(img, geo, problems, repair);
    c.check_all(&mut report)?;
    c.tally(&mut report);
    if repair && (!c.img.written.is_empty() || report.was_mounted) {
        c.write_back(dev, &mut sb)?;
        report.repaired = true;
    }
    Ok(report)
}

/// Records a problem found before the checker exists.
fn early_problem(problems: &mut Vec<Problem>, repair: bool, kind: ProblemKind, detail: String) {
    problems.push(Problem {
        kind,
        detail,
        fixed: repair,
    })
}

/// The superblock: the primary, else the backup; a damaged or different copy is put right.
/// Another format version is refused, not repaired.
fn superblock(img: &mut Image, problems: &mut Vec<Problem>, repair: bool) -> Result<Superblock> {
    crate::filesystem::check_version(img.get(SB_PRIMARY)?)?;
    let primary = Superblock::decode(img.get(SB_PRIMARY)?);
    let backup = Superblock::decode(img.get(SB_BACKUP)?);
    let sb = match (primary, backup) {
        (Ok(p), b) => {
            let same = b.as_ref().is_ok_and(|b| same_geometry(b, &p));
            if !same {
                let why = b.err().unwrap_or_else(|| "describes another geometry".into());
                early_problem(
                    problems,
                    repair,
                    ProblemKind::Superblock,
                    format!("backup superblock damaged: {why}"),
                );
                img.put(SB_BACKUP, &p.encode());
            }
            p
        }
        (Err(why), Ok(b)) => {
            early_problem(
                problems,
                repair,
                ProblemKind::Superblock,
                format!("primary superblock damaged ({why}); using the backup"),
            );
            img.put(SB_PRIMARY, &b.encode());
            b
        }
        (Err(p), Err(b)) => return Err(corrupt(format!("no valid superblock (primary: {p}; backup: {b})"))),
    };
    if img.dev.block_count() < sb.block_count {
        return Err(corrupt(format!(
            "the file system has {} blocks, the device only {}",
            sb.block_count,
            img.dev.block_count()
        )));
    }
    Ok(sb)
}

/// Whether two superblocks describe the same file system.
fn same_geometry(b: &Superblock, p: &Superblock) -> bool {
    (
        b.block_count,
        b.blocks_per_group,
        b.inodes_per_group,
        b.journal_blocks,
        b.maxbpg,
        b.fs_id,
    ) == (
        p.block_count,
        p.blocks_per_group,
        p.inodes_per_group,
        p.journal_blocks,
        p.maxbpg,
        p.fs_id,
    )
}

/// Replays what the journal has committed, as a mount would; a damaged journal is reset.
/// Returns the transactions replayed.
fn replay_journal(
    img: &mut Image,
    geo: &Geometry,
    sb: &Superblock,
    problems: &mut Vec<Problem>,
    repair: bool,
) -> Result<u64> {
    let slot0 = *img.get(JOURNAL_START)?;
    let header = journal::pick_header(&slot0, img.get(JOURNAL_START + 1)?, sb.fs_id, geo.log_len());
    let Some(h) = header else {
        early_problem(
            problems,
            repair,
            ProblemKind::Journal,
            "journal header damaged (both copies): journal reset".into(),
        );
        img.put(geo.log_start(), &[0u8; BS]);
        reset_journal(img, geo, sb.fs_id, 2, 0, 1)?;
        img.put(JOURNAL_START + 1, &[0u8; BS]);
        return Ok(0);
    };
    let mut read = |b: u64| -> io::Result<Box<Block>> { Ok(Box::new(*img.get(b)?)) };
    match journal::scan(geo, &h, &mut read) {
        Ok(scan) => {
            if !scan.transactions.is_empty() {
                for t in &scan.transactions {
                    for (home, data) in &t.images {
                        img.put(*home, data);
                    }
                }
                reset_journal(img, geo, sb.fs_id, h.generation + 1, scan.end, scan.next_seq)?;
            }
            Ok(scan.transactions.len() as u64)
        }
        Err(ScanError::Io(e)) => Err(FsError::Io(e)),
        Err(ScanError::Corrupt(why)) => {
            early_problem(problems, repair, ProblemKind::Journal, format!("{why}: journal reset"));
            img.put(geo.log_start() + h.tail, &[0u8; BS]);
            reset_journal(img, geo, sb.fs_id, h.generation + 1, h.tail, h.seq + 1)?;
            Ok(0)
        }
    }
}

/// Writes a reset journal header, which numbers the writer's next transaction past any left in
/// the log.
fn reset_journal(img: &mut Image, geo: &Geometry, fs_id: u64, generation: u64, tail: u64, seq: u64) -> io::Result<()> {
    let mut read = |b: u64| -> io::Result<Box<Block>> { Ok(Box::new(*img.get(b)?)) };
    let seq = journal::fresh_seq(geo, fs_id, seq, &mut read)?;
    let h = JournalHeader {
        fs_id,
        generation,
        tail,
        seq,
    };
    img.put(h.slot(), &h.encode());
    Ok(())
}

impl<'a> Checker<'a> {
    fn new(img: Image<'a>, geo: Geometry, problems: Vec<Problem>, repair: bool) -> Checker<'a> {
        let n_inodes = geo.inode_count() as usize;
        Checker {
            img,
            geo: geo.clone(),
            problems,
            repair,
            inodes: vec![Inode::default(); n_inodes + 1],
            in_use: vec![false; n_inodes + 1],
            dirty_inodes: BTreeSet::new(),
            owner: vec![0; geo.block_count as usize],
            parent: HashMap::new(),
            subdirs: HashMap::new(),
            refs: HashMap::new(),
            lost_found: None,
            orphan_list: Vec::new(),
            released_blocks: HashSet::new(),
            released_inodes: HashSet::new(),
        }
    }

    /// Every check, in order: each relies on what the ones before it settled.
    fn check_all(&mut self, report: &mut FsckReport) -> Result<()> {
        self.scan_inodes()?;
        self.check_types()?;
        self.orphan_chain()?;
        self.claim_all()?;
        self.traverse()?;
        report.orphans = self.orphan_list.len() as u64;
        self.settle_orphans();
        self.orphans()?;
        self.link_counts();
        self.write_inodes()?;
        self.bitmaps(report)
    }

    /// The counts of files and directories, and the problems, into the report.
    fn tally(&mut self, report: &mut FsckReport) {
        let n_inodes = self.geo.inode_count() as usize;
        let in_use = |want_dir: bool| {
            (1..=n_inodes)
                .filter(|&i| self.in_use[i] && self.inodes[i].is_dir() == want_dir)
                .count() as u64
        };
        report.files = in_use(false);
        report.directories = in_use(true);
        report.used_inodes = report.files + report.directories;
        report.problems = std::mem::take(&mut self.problems);
    }

    /// Writes the repaired blocks, then marks the file system clean: the superblocks last,
    /// each after a flush.
    fn write_back(&mut self, dev: &dyn BlockDevice, sb: &mut Superblock) -> Result<()> {
        sb.state = STATE_CLEAN;
        let enc = sb.encode();
        self.img.put(SB_PRIMARY, &enc);
        self.img.put(SB_BACKUP, &enc);
        for b in self
            .img
            .written
            .iter()
            .copied()
            .filter(|&b| b != SB_PRIMARY && b != SB_BACKUP)
        {
            dev.write_blocks(b, &self.img.blocks[&b][..])?;
        }
        dev.flush()?;
        dev.write_blocks(SB_PRIMARY, &enc[..])?;
        dev.flush()?;
        dev.write_blocks(SB_BACKUP, &enc[..])?;
        dev.flush()?;
        Ok(())
    }
}

/// The used records of a directory block that can be read, as far as its record chain holds.
fn salvage(b: &[u8]) -> Vec<Named> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + DIRENT_HEADER <= DIR_USABLE {
        let ino = get_u32(b, off);
        let rec_len = usize::from(get_u16(b, off + 4));
        let name_len = usize::from(b[off + 6]);
        if rec_len < DIRENT_HEADER || !rec_len.is_multiple_of(4) || off + rec_len > DIR_USABLE {
            break;
        }
        if ino != 0 && dirent_size(name_len) <= rec_len {
            let name = b[off + DIRENT_HEADER..off + DIRENT_HEADER + name_len].to_vec();
            if name_ok(&name) {
                out.push((name, u64::from(ino), b[off + 7]));
            }
        }
        off += rec_len;
    }
    out
}

impl Checker<'_> {
    fn problem(&mut self, kind: ProblemKind, detail: String) {
        self.problems.push(Problem {
            kind,
            detail,
            fixed: self.repair,
        });
    }

    fn unfixed(&mut self, kind: ProblemKind, detail: String) {
        self.problems.push(Problem {
            kind,
            detail,
            fixed: false,
        });
    }

    /// Reads every inode record; damaged ones are cleared.
    fn scan_inodes(&mut self) -> Result<()> {
        for g in 0..self.geo.groups {
            for blk in 0..self.geo.itable_blocks {
                let b = self.geo.itable(g) + blk;
                let data = *self.img.get(b)?;
                for k in 0..INODES_PER_BLOCK {
                    let ino = self.geo.first_ino(g) + blk * INODES_PER_BLOCK + k;
                    let off = k as usize * INODE_SIZE;
                    match Inode::decode(ino, &data[off..off + INODE_SIZE]) {
                        Ok(i) => {
                            self.in_use[ino as usize] = !i.is_free();
                            self.inodes[ino as usize] = i;
                        }
                        Err(why) => {
                            self.problem(ProblemKind::Inode, format!("{why}: inode cleared"));
                            self.inodes[ino as usize] = Inode::default();
                            self.dirty_inodes.insert(ino);
                        }
                    }
                }
                self.img.forget(b);
            }
        }
        Ok(())
    }

    fn claim(&mut self, ino: u64, p: u32, what: &str) -> Option<bool> {
        if p == 0 {
            return None;
        }
        let b = u64::from(p);
        if !self.geo.is_data_block(b) {
            self.problem(
                ProblemKind::BlockPointer,
                format!("inode {ino}: {what} points to block {b}, not a data block: cleared"),
            );
            return Some(false);
        }
        match self.owner[b as usize] {
            0 => {
                self.owner[b as usize] = ino as u32;
                Some(true)
            }
            STATIC => {
                self.problem(
                    ProblemKind::BlockPointer,
                    format!("inode {ino}: {what} points to metadata block {b}: cleared"),
                );
                Some(false)
            }
            other => {
                self.problem(
                    ProblemKind::DuplicateBlock,
                    format!("inode {ino}: {what} claims block {b}, already inode {other}'s: cleared"),
                );
                Some(false)
            }
        }
    }

    /// Claims the pointers of an indirect block (`depth` 1: data blocks, 2: indirect blocks);
    /// clears bad ones. Returns the blocks claimed and the data blocks found with their file
    /// block numbers and where their pointers are.
    fn claim_tree(
        &mut self,
        ino: u64,
        blk: u64,
        depth: u32,
        first_fb: u64,
        data: &mut Vec<(u64, u64, Loc)>,
    ) -> Result<u32> {
        let ptrs: Vec<u32> = {
            let b = self.img.get(blk)?;
            (0..NINDIRECT as usize).map(|i| ind_get(b, i)).collect()
        };
        let mut count = 0;
        let span = if depth == 2 { NINDIRECT } else { 1 };
        for (i, p) in ptrs.into_iter().enumerate() {
            let what = if depth == 2 {
                "an indirect pointer"
            } else {
                "a block pointer"
            };
            match self.claim(ino, p, what) {
                None => {}
                Some(false) => ind_set(self.img.get_mut(blk)?, i, 0),
                Some(true) => {
                    count += 1;
                    let fb = first_fb + i as u64 * span;
                    if depth == 2 {
                        count += self.claim_tree(ino, u64::from(p), 1, fb, data)?;
                    } else {
                        data.push((fb, u64::from(p), Loc::Entry(blk, i)));
                    }
                }
            }
        }
        Ok(count)
    }

    /// Claims every block of every inode in use: out-of-range and doubly claimed pointers are
    /// cleared, block counts and directory sizes checked.
    fn claim_all(&mut self) -> Result<()> {
        for g in 0..self.geo.groups {
            for b in self.geo.group_start(g)..self.geo.data_start(g) {
                self.owner[b as usize] = STATIC;
            }
        }
        for ino in 1..=self.geo.inode_count() {
            if !self.in_use[ino as usize] {
                continue;
            }
            let mut inode = self.inodes[ino as usize].clone();
            let mut count = 0u32;
            let mut data: Vec<(u64, u64, Loc)> = Vec::new();
            for i in 0..NDIRECT as usize {
                match self.claim(ino, inode.direct[i], "a block pointer") {
                    None => {}
                    Some(false) => inode.direct[i] = 0,
                    Some(true) => {
                        count += 1;
                        data.push((i as u64, u64::from(inode.direct[i]), Loc::Direct(i)));
                    }
                }
            }
            match self.claim(ino, inode.indirect, "the indirect pointer") {
                None => {}
                Some(false) => inode.indirect = 0,
                Some(true) => count += 1 + self.claim_tree(ino, u64::from(inode.indirect), 1, NDIRECT, &mut data)?,
            }
            match self.claim(ino, inode.dindirect, "the double indirect pointer") {
                None => {}
                Some(false) => inode.dindirect = 0,
                Some(true) => {
                    count += 1 + self.claim_tree(ino, u64::from(inode.dindirect), 2, NDIRECT + NINDIRECT, &mut data)?
                }
            }
            match self.claim(ino, inode.xattr, "the xattr pointer") {
                None => {}
                Some(false) => inode.xattr = 0,
                Some(true) => {
                    let b = u64::from(inode.xattr);
                    match xattr_parse(self.img.get(b)?, ino) {
                        Ok(_) => count += 1,
                        Err(why) => {
                            self.problem(ProblemKind::Xattr, format!("{why}: attributes dropped"));
                            self.owner[b as usize] = 0;
                            inode.xattr = 0;
                        }
                    }
                }
            }
            if inode.stream.is_some() && inode.is_regular() {
                count += self.claim_chunks(ino, &mut inode, &data)?;
            }
            if inode.is_dir() {
                data.sort_by_key(|d| d.0);
                let leading = data.iter().enumerate().take_while(|(i, d)| d.0 == *i as u64).count() as u64;
                for &(fb, b, loc) in data.iter().skip(leading as usize) {
                    self.problem(
                        ProblemKind::Directory,
                        format!("directory {ino}: block {fb} follows a hole: freed"),
                    );
                    self.owner[b as usize] = 0;
                    count -= 1;
                    match loc {
                        Loc::Direct(i) => inode.direct[i] = 0,
                        Loc::Entry(blk, i) => ind_set(self.img.get_mut(blk)?, i, 0),
                    }
                }
                if inode.size != leading * BS as u64 {
                    self.problem(
                        ProblemKind::Directory,
                        format!("directory {ino}: size {} but {leading} blocks: size set", inode.size),
                    );
                    inode.size = leading * BS as u64;
                }
            }
            if inode.is_symlink() && !inode.is_fast_symlink() && inode.direct[0] == 0 {
                // Its target block went (claimed twice, out of range): nothing left to point to.
                self.problem(
                    ProblemKind::FileType,
                    format!("symlink {ino}: its target block is gone: inode cleared"),
                );
                self.inodes[ino as usize] = inode;
                self.free_inode(ino);
                continue;
            }
            if inode.blocks != count {
                self.problem(
                    ProblemKind::Inode,
                    format!("inode {ino}: block count {} but {count} blocks: fixed", inode.blocks),
                );
                inode.blocks = count;
            }
            if inode != self.inodes[ino as usize] {
                self.inodes[ino as usize] = inode;
                self.dirty_inodes.insert(ino);
            }
        }
        Ok(())
    }

    /// Claims the blocks of the chunks a stream file's map blocks (`maps`: file block, device
    /// block, where its pointer is) name; returns how many. A map block that does not decode
    /// is dropped with its chunks (they read as holes); an entry past the end of the file, or
    /// one with a bad pointer, is dropped (its blocks are freed).
    fn claim_chunks(&mut self, ino: u64, inode: &mut Inode, maps: &[(u64, u64, Loc)]) -> Result<u32> {
        let mut count = 0;
        for &(m, b, loc) in maps {
            let mut map = match ChunkMap::decode(self.img.get(b)?, ino, m) {
                Ok(map) => map,
                Err(why) => {
                    self.problem(ProblemKind::ChunkMap, format!("{why}: its chunks are dropped"));
                    self.owner[b as usize] = 0;
                    count -= 1;
                    match loc {
                        Loc::Direct(i) => inode.direct[i] = 0,
                        Loc::Entry(blk, i) => ind_set(self.img.get_mut(blk)?, i, 0),
                    }
                    continue;
                }
            };
            let mut changed = false;
            for (slot, e) in map.entries.iter_mut().enumerate() {
                if e.is_hole() {
                    continue;
                }
                let chunk = m * CHUNKS_PER_MAP + slot as u64;
                let start = chunk * CHUNK_BYTES as u64;
                let mut claimed = Vec::new();
                let mut bad = (start >= inode.size).then(|| "lies past the end of the file".to_string());
                for &p in &e.blocks {
                    if bad.is_some() {
                        break;
                    }
                    match self.claim(ino, p as u32, "a chunk's block pointer") {
                        Some(true) => claimed.push(p),
                        _ => bad = Some(format!("names block {p}, which it may not")),
                    }
                }
                match bad {
                    None => count += claimed.len() as u32,
                    Some(why) => {
                        self.problem(
                            ProblemKind::ChunkMap,
                            format!("inode {ino}: chunk {chunk} {why}: dropped"),
                        );
                        for p in claimed {
                            self.owner[p as usize] = 0;
                        }
                        *e = ChunkEntry::default();
                        changed = true;
                    }
                }
            }
            if changed {
                map.encode(self.img.get_mut(b)?, ino, m);
            }
        }
        Ok(count)
    }

    fn map(&mut self, ino: u64, fb: u64) -> Result<Option<u64>> {
        let inode = self.inodes[ino as usize].clone();
        let ok = |p: u32| (p != 0).then_some(u64::from(p));
        Ok(match block_path(fb) {
            None => None,
            Some(BlockPath::Direct(i)) => ok(inode.direct[i]),
            Some(BlockPath::Single(i)) => match ok(inode.indirect) {
                None => None,
                Some(b) => ok(ind_get(self.img.get(b)?, i)),
            },
            Some(BlockPath::Double(i, j)) => match ok(inode.dindirect) {
                None => None,
                Some(d) => match ok(ind_get(self.img.get(d)?, i)) {
                    None => None,
                    Some(l1) => ok(ind_get(self.img.get(l1)?, j)),
                },
            },
        })
    }

    fn free_data_block(&mut self) -> Option<u64> {
        let b = (0..self.geo.block_count).find(|&b| self.owner[b as usize] == 0)?;
        Some(b)
    }

    /// Gives directory `dir` a new block at file block `fb` (direct blocks only).
    fn grow_dir(&mut self, dir: u64, parent: u64) -> Result<Option<u64>> {
        let fb = self.inodes[dir as usize].size / BS as u64;
        if fb >= NDIRECT {
            return Ok(None);
        }
        let Some(b) = self.free_data_block() else {
            return Ok(None);
        };
        self.owner[b as usize] = dir as u32;
        let mut blk = [0u8; BS];
        if fb == 0 {
            dir_first_block(&mut blk, dir, parent);
        } else {
            dir_empty_block(&mut blk, dir);
        }
        self.img.put(b, &blk);
        let i = &mut self.inodes[dir as usize];
        i.direct[fb as usize] = b as u32;
        i.size = (fb + 1) * BS as u64;
        i.blocks += 1;
        self.dirty_inodes.insert(dir);
        Ok(Some(b))
    }

    /// Adds an entry to a directory, growing it if needed. False if there is no room.
    fn add_entry(&mut self, dir: u64, name: &[u8], ino: u64, ft: u8) -> Result<bool> {
        let blocks = self.inodes[dir as usize].size / BS as u64;
        for fb in 0..blocks {
            let Some(b) = self.map(dir, fb)? else { continue };
            let mut entries = dir_records(self.img.get(b)?).unwrap_or_default();
            if entries.is_empty() {
                continue;
            }
            if dir_add(self.img.get_mut(b)?, &mut entries, dir, name, ino, ft) {
                return Ok(true);
            }
        }
        let parent = self.parent.get(&dir).copied().unwrap_or(ROOT_INO);
        match self.grow_dir(dir, parent)? {
            None => Ok(false),
            Some(b) => {
                let mut entries = dir_records(self.img.get(b)?).expect("fresh block");
                Ok(dir_add(self.img.get_mut(b)?, &mut entries, dir, name, ino, ft))
            }
        }
    }

    /// Walks the tree from the root.
    fn traverse(&mut self) -> Result<()> {
        if !self.in_use[ROOT_INO as usize] || !self.inodes[ROOT_INO as usize].is_dir() {
            self.problem(
                ProblemKind::Directory,
                "the root directory is missing: a new, empty one made".into(),
            );
            if self.in_use[ROOT_INO as usize] {
                // Whatever inode 1 was, its blocks are no longer its.
                for o in self.owner.iter_mut().filter(|o| **o == ROOT_INO as u32) {
                    *o = 0;
                }
            }
            let now = crate::state::now_ns();
            self.inodes[ROOT_INO as usize] = Inode {
                mode: S_IFDIR | 0o755,
                nlink: 2,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                generation: self.inodes[ROOT_INO as usize].generation.wrapping_add(1),
                ..Default::default()
            };
            self.in_use[ROOT_INO as usize] = true;
            self.dirty_inodes.insert(ROOT_INO);
        }
        self.parent.insert(ROOT_INO, ROOT_INO);
        self.walk_from(ROOT_INO)
    }

    fn walk_from(&mut self, start: u64) -> Result<()> {
        let mut queue = VecDeque::from([start]);
        while let Some(d) = queue.pop_front() {
            for sub in self.check_dir(d)? {
                queue.push_back(sub);
            }
        }
        Ok(())
    }

    /// Checks one directory's blocks and entries; returns the subdirectories it adopts.
    fn check_dir(&mut self, d: u64) -> Result<Vec<u64>> {
        let parent = self.parent[&d];
        if self.inodes[d as usize].size == 0 && !self.remake_empty_dir(d, parent)? {
            return Ok(Vec::new());
        }
        let blocks = self.read_dir_blocks(d)?;
        let mut scan = DirScan {
            d,
            parent,
            names: HashSet::new(),
            adopted: Vec::new(),
            has_dot: false,
            has_dotdot: false,
        };
        let mut finals: Vec<DirBlock> = Vec::new();
        for (b, entries, mut changed) in blocks {
            let mut keep = Vec::new();
            for (name, ino, ft) in entries {
                keep.extend(self.check_entry(&mut scan, name, ino, ft, &mut changed));
            }
            finals.push((b, keep, changed));
        }
        if finals.is_empty() {
            return Ok(scan.adopted);
        }
        if !scan.has_dot || !scan.has_dotdot {
            self.add_dots(&mut finals[0], d, parent);
        }
        for (b, keep, changed) in finals {
            if changed {
                self.rewrite_dir_block(d, b, keep, &mut scan.adopted);
            }
        }
        Ok(scan.adopted)
    }

    /// A directory with no blocks gets one with `.` and `..`; false if no block is free.
    fn remake_empty_dir(&mut self, d: u64, parent: u64) -> Result<bool> {
        self.problem(
            ProblemKind::Directory,
            format!("directory {d} has no blocks: `.` and `..` made"),
        );
        if self.grow_dir(d, parent)?.is_none() {
            self.unfixed(
                ProblemKind::Directory,
                format!("directory {d}: no free block to repair it"),
            );
            return Ok(false);
        }
        Ok(true)
    }

    /// A directory's blocks, each with the entries that can be read from it and whether it was
    /// damaged; stops at the first block missing from the directory's map.
    fn read_dir_blocks(&mut self, d: u64) -> Result<Vec<DirBlock>> {
        let nblocks = self.inodes[d as usize].size / BS as u64;
        let mut blocks = Vec::new();
        for fb in 0..nblocks {
            let Some(b) = self.map(d, fb)? else {
                self.unfixed(ProblemKind::Directory, format!("directory {d}: block {fb} is missing"));
                break;
            };
            let raw = *self.img.get(b)?;
            let (entries, damaged) = match dir_parse(&raw, d) {
                Ok(e) => (
                    e.into_iter()
                        .filter(|e| e.ino != 0)
                        .map(|e| (e.name, u64::from(e.ino), e.ftype))
                        .collect(),
                    None,
                ),
                Err(why) => (salvage(&raw), Some(why)),
            };
            if let Some(why) = &damaged {
                self.problem(
                    ProblemKind::Directory,
                    format!("{why} (block {fb}): readable entries kept"),
                );
            }
            blocks.push((b, entries, damaged.is_some()));
        }
        Ok(blocks)
    }

    /// Checks one entry of the directory `scan` is checking: the entry to keep, fixed, or
    /// None to drop it. Sets `changed` when its block must be written again.
    fn check_entry(
        &mut self,
        scan: &mut DirScan,
        name: Vec<u8>,
        ino: u64,
        ft: u8,
        changed: &mut bool,
    ) -> Option<Named> {
        if name == b"." || name == b".." {
            return self.check_dot(scan, name, ino, ft, changed);
        }
        let d = scan.d;
        if !scan.names.insert(name.clone()) {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!("directory {d}: `{}` twice: second removed", show(&name)),
            );
            *changed = true;
            return None;
        }
        let valid = self.geo.valid_ino(ino) && self.in_use[ino as usize];
        if !valid {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!(
                    "directory {d}: `{}` names inode {ino}, which is not in use: removed",
                    show(&name)
                ),
            );
            scan.names.remove(&name);
            *changed = true;
            return None;
        }
        let kind = self.inodes[ino as usize].file_type().expect("in use");
        let mut ft = ft;
        if ft != kind.dirent_code() {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!("directory {d}: `{}` has the wrong type: fixed", show(&name)),
            );
            ft = kind.dirent_code();
            *changed = true;
        }
        if kind == FileType::Directory {
            if !self.adopt_dir(scan, &name, ino) {
                scan.names.remove(&name);
                *changed = true;
                return None;
            }
        } else {
            *self.refs.entry(ino).or_default() += 1;
        }
        Some((name, ino, ft))
    }

    /// Checks a `.` or `..` entry: one of each, naming the directory and its parent.
    fn check_dot(&mut self, scan: &mut DirScan, name: Vec<u8>, ino: u64, ft: u8, changed: &mut bool) -> Option<Named> {
        let d = scan.d;
        let (want, seen) = if name == b"." {
            (d, &mut scan.has_dot)
        } else {
            (scan.parent, &mut scan.has_dotdot)
        };
        if *seen {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!("directory {d}: second `{}`: removed", show(&name)),
            );
            *changed = true;
            return None;
        }
        *seen = true;
        if ino != want || ft != FT_DIR {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!(
                    "directory {d}: `{}` is inode {ino}, should be {want}: fixed",
                    show(&name)
                ),
            );
            *changed = true;
        }
        Some((name, want, FT_DIR))
    }

    /// Makes directory `ino` a child of the directory `scan` is checking, unless another entry
    /// already did (a second link to a directory, reported): whether it did.
    fn adopt_dir(&mut self, scan: &mut DirScan, name: &[u8], ino: u64) -> bool {
        let d = scan.d;
        if self.parent.contains_key(&ino) {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!(
                    "directory {d}: `{}` is a second link to directory {ino}: removed",
                    show(name)
                ),
            );
            return false;
        }
        self.parent.insert(ino, d);
        *self.subdirs.entry(d).or_default() += 1;
        scan.adopted.push(ino);
        if d == ROOT_INO && name == b"lost+found" {
            self.lost_found = Some(ino);
        }
        true
    }

    /// Puts `.` and `..` at the start of a directory's first block.
    fn add_dots(&mut self, first: &mut DirBlock, d: u64, parent: u64) {
        self.problem(
            ProblemKind::DirectoryEntry,
            format!("directory {d}: `.` or `..` missing: added"),
        );
        first.1.retain(|(n, _, _)| n != b"." && n != b"..");
        first.1.insert(0, (b"..".to_vec(), parent, FT_DIR));
        first.1.insert(0, (b".".to_vec(), d, FT_DIR));
        first.2 = true;
    }

    /// Writes directory block `b` again with the entries kept. An entry that no longer fits
    /// is dropped, and its target's link from `d` undone: the target becomes an orphan.
    fn rewrite_dir_block(&mut self, d: u64, b: u64, mut keep: Vec<Named>, adopted: &mut Vec<u64>) {
        // `.` and `..` first, as a new directory has them.
        keep.sort_by_key(|(n, _, _)| match n.as_slice() {
            b"." => 0,
            b".." => 1,
            _ => 2,
        });
        let mut blk = [0u8; BS];
        let left = dir_rebuild(&mut blk, d, &keep);
        self.img.put(b, &blk);
        for (name, ino, ft) in left {
            self.problem(
                ProblemKind::DirectoryEntry,
                format!("directory {d}: no room for `{}`: dropped", show(&name)),
            );
            if ft == FT_DIR && self.parent.get(&ino) == Some(&d) {
                self.parent.remove(&ino);
                adopted.retain(|&a| a != ino);
                if let Some(s) = self.subdirs.get_mut(&d) {
                    *s -= 1;
                }
            } else if let Some(r) = self.refs.get_mut(&ino) {
                *r -= 1;
            }
        }
    }

    /// Finds or makes `/lost+found`.
    fn lost_found(&mut self) -> Result<Option<u64>> {
        if let Some(lf) = self.lost_found {
            return Ok(Some(lf));
        }
        let Some(ino) = (1..=self.geo.inode_count()).find(|&i| !self.in_use[i as usize]) else {
            return Ok(None);
        };
        let now = crate::state::now_ns();
        self.inodes[ino as usize] = Inode {
            mode: S_IFDIR | 0o700,
            nlink: 2,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            generation: self.inodes[ino as usize].generation.wrapping_add(1),
            ..Default::default()
        };
        self.in_use[ino as usize] = true;
        self.dirty_inodes.insert(ino);
        if self.grow_dir(ino, ROOT_INO)?.is_none() || !self.add_entry(ROOT_INO, b"lost+found", ino, FT_DIR)? {
            self.in_use[ino as usize] = false;
            self.inodes[ino as usize] = Inode::default();
            for o in self.owner.iter_mut().filter(|o| **o == ino as u32) {
                *o = 0;
            }
            return Ok(None);
        }
        self.problem(ProblemKind::Directory, "no /lost+found: made".into());
        self.parent.insert(ino, ROOT_INO);
        *self.subdirs.entry(ROOT_INO).or_default() += 1;
        self.lost_found = Some(ino);
        Ok(Some(ino))
    }

    fn unreached_dir(&self, ino: u64) -> bool {
        self.geo.valid_ino(ino)
            && self.in_use[ino as usize]
            && self.inodes[ino as usize].is_dir()
            && !self.parent.contains_key(&ino)
    }

    /// Follows `..` from an unreached directory up while it leads to unreached directories.
    fn top_orphan(&mut self, start: u64) -> Result<u64> {
        let mut cur = start;
        let mut seen = HashSet::from([start]);
        loop {
            let Some(b) = self.map(cur, 0)? else { return Ok(cur) };
            let up = salvage(self.img.get(b)?)
                .into_iter()
                .find(|(n, _, _)| n == b"..")
                .map(|(_, i, _)| i);
            match up {
                Some(p) if self.unreached_dir(p) && seen.insert(p) => cur = p,
                _ => return Ok(cur),
            }
        }
    }

    /// Reconnects what the walk did not reach.
    fn orphans(&mut self) -> Result<()> {
        let n = self.geo.inode_count();
        // Directories first, each from the top of its unreachable subtree: it brings the
        // subtree back.
        for start in 1..=n {
            if !self.unreached_dir(start) {
                continue;
            }
            let ino = self.top_orphan(start)?;
            let name = format!("#{ino}");
            let lf = self.lost_found()?;
            let linked = match lf {
                Some(lf) => self.add_entry(lf, name.as_bytes(), ino, FT_DIR)?,
                None => false,
            };
            if !linked {
                self.unfixed(
                    ProblemKind::Orphan,
                    format!("directory {ino} is unreachable and lost+found has no room"),
                );
                continue;
            }
            let lf = lf.expect("linked");
            self.problem(
                ProblemKind::Orphan,
                format!("directory {ino} is unreachable: moved to /lost+found/{name}"),
            );
            self.parent.insert(ino, lf);
            *self.subdirs.entry(lf).or_default() += 1;
            self.walk_from(ino)?;
        }
        for ino in 1..=n {
            if !self.in_use[ino as usize] || self.inodes[ino as usize].is_dir() || self.refs.contains_key(&ino) {
                continue;
            }
            if self.orphan_list.contains(&ino) {
                continue;
            }
            let (size, blocks, generation, nlink) = {
                let i = &self.inodes[ino as usize];
                (i.size, i.blocks, i.generation, i.nlink)
            };
            let ft = self.inodes[ino as usize].file_type().expect("in use").dirent_code();
            if nlink == 0 {
                self.problem(
                    ProblemKind::Orphan,
                    format!("inode {ino} has no link, no name and is not on the orphan list: freed"),
                );
                self.free_inode(ino);
                continue;
            }
            if size == 0 && blocks == 0 {
                self.problem(
                    ProblemKind::Orphan,
                    format!("file {ino} is unreachable and empty: freed"),
                );
                self.in_use[ino as usize] = false;
                self.inodes[ino as usize] = Inode {
                    generation,
                    ..Default::default()
                };
                self.dirty_inodes.insert(ino);
                continue;
            }
            let name = format!("#{ino}");
            let lf = self.lost_found()?;
            let linked = match lf {
                Some(lf) => self.add_entry(lf, name.as_bytes(), ino, ft)?,
                None => false,
            };
            if linked {
                self.problem(
                    ProblemKind::Orphan,
                    format!("file {ino} is unreachable: moved to /lost+found/{name}"),
                );
                self.refs.insert(ino, 1);
            } else {
                self.unfixed(
                    ProblemKind::Orphan,
                    format!("file {ino} is unreachable and lost+found has no room"),
                );
            }
        }
        Ok(())
    }

    fn link_counts(&mut self) {
        for ino in 1..=self.geo.inode_count() {
            if !self.in_use[ino as usize] {
                continue;
            }
            let i = &self.inodes[ino as usize];
            let want = if i.is_dir() {
                if !self.parent.contains_key(&ino) {
                    continue;
                }
                2 + self.subdirs.get(&ino).copied().unwrap_or(0)
            } else {
                match self.refs.get(&ino) {
                    Some(&r) => r,
                    None => continue,
                }
            };
            if i.nlink != want {
                let had = i.nlink;
                self.problem(
                    ProblemKind::LinkCount,
                    format!("inode {ino}: link count {had}, should be {want}: fixed"),
                );
                self.inodes[ino as usize].nlink = want;
                self.dirty_inodes.insert(ino);
            }
        }
    }

    fn write_inodes(&mut self) -> Result<()> {
        for ino in std::mem::take(&mut self.dirty_inodes) {
            let (b, off) = self.geo.inode_location(ino);
            let inode = self.inodes[ino as usize].clone();
            let blk = self.img.get_mut(b)?;
            inode.encode_into(ino, &mut blk[off..off + INODE_SIZE]);
        }
        Ok(())
    }

    /// Compares the bitmaps and group headers with what the inodes and blocks say.
    fn bitmaps(&mut self, report: &mut FsckReport) -> Result<()> {
        let geo = self.geo.clone();
        for g in 0..geo.groups {
            let mut ib = initial_inode_bitmap(&geo);
            let mut free_inodes = 0u32;
            let mut dirs = 0u32;
            for k in 0..geo.ipg {
                let ino = geo.first_ino(g) + k;
                if self.in_use[ino as usize] {
                    set_bit(&mut ib[..], k, true);
                    if self.inodes[ino as usize].is_dir() {
                        dirs += 1;
                    }
                } else {
                    free_inodes += 1;
                }
            }
            let mut bb = initial_block_bitmap(&geo, g);
            let mut free_blocks = 0u32;
            for b in geo.data_start(g)..geo.group_end(g) {
                if self.owner[b as usize] != 0 {
                    set_bit(&mut bb[..], b - geo.group_start(g), true);
                } else {
                    free_blocks += 1;
                }
            }
            report.free_blocks += u64::from(free_blocks);
            report.used_blocks += geo.data_blocks(g) - u64::from(free_blocks);
            let on_disk_ib = *self.img.get(geo.inode_bitmap(g))?;
            let on_disk_bb = *self.img.get(geo.block_bitmap(g))?;
            // What the bitmaps would be once the orphans a repair frees are freed.
            let mut freed_ib = on_disk_ib;
            let mut freed_inodes = 0u32;
            for k in 0..geo.ipg {
                if self.released_inodes.contains(&(geo.first_ino(g) + k)) && bit(&freed_ib, k) {
                    set_bit(&mut freed_ib, k, false);
                    freed_inodes += 1;
                }
            }
            let mut freed_bb = on_disk_bb;
            let mut freed_blocks = 0u32;
            for b in geo.data_start(g)..geo.group_end(g) {
                let k = b - geo.group_start(g);
                if self.released_blocks.contains(&b) && bit(&freed_bb, k) {
                    set_bit(&mut freed_bb, k, false);
                    freed_blocks += 1;
                }
            }
            let diff = |a: &Block, b: &Block| a.iter().zip(b.iter()).map(|(x, y)| (x ^ y).count_ones()).sum::<u32>();
            let d = diff(&ib, &freed_ib);
            if d > 0 {
                self.problem(
                    ProblemKind::InodeBitmap,
                    format!("group {g}: inode bitmap wrong in {d} places: rewritten"),
                );
            }
            if *ib != on_disk_ib {
                self.img.put(geo.inode_bitmap(g), &ib);
            }
            let d = diff(&bb, &freed_bb);
            if d > 0 {
                self.problem(
                    ProblemKind::BlockBitmap,
                    format!("group {g}: block bitmap wrong in {d} places: rewritten"),
                );
            }
            if *bb != on_disk_bb {
                self.img.put(geo.block_bitmap(g), &bb);
            }
            let want = GroupHeader {
                group: g,
                free_blocks,
                free_inodes,
                dirs,
                inode_bitmap_crc: bitmap_crc(g, &ib[..]),
                block_bitmap_crc: bitmap_crc(g, &bb[..]),
                orphan_head: if g == 0 { self.orphan_head() } else { 0 },
            };
            let hb = geo.header(g);
            match GroupHeader::decode(self.img.get(hb)?, g, &geo) {
                Ok(h) if h == want => {}
                Ok(h)
                    if GroupHeader {
                        free_blocks: h.free_blocks + freed_blocks,
                        free_inodes: h.free_inodes + freed_inodes,
                        inode_bitmap_crc: if h.inode_bitmap_crc == bitmap_crc(g, &on_disk_ib[..]) {
                            want.inode_bitmap_crc
                        } else {
                            h.inode_bitmap_crc
                        },
                        block_bitmap_crc: if h.block_bitmap_crc == bitmap_crc(g, &on_disk_bb[..]) {
                            want.block_bitmap_crc
                        } else {
                            h.block_bitmap_crc
                        },
                        // The orphan list's problems are reported with the list.
                        orphan_head: want.orphan_head,
                        ..h
                    } == want =>
                {
                    let mut blk = [0u8; BS];
                    want.encode_into(&mut blk);
                    self.img.put(hb, &blk);
                }
                Ok(h) => {
                    let mut what = Vec::new();
                    if h.free_blocks != want.free_blocks {
                        what.push(format!("{} free blocks, counted {}", h.free_blocks, want.free_blocks));
                    }
                    if h.free_inodes != want.free_inodes {
                        what.push(format!("{} free inodes, counted {}", h.free_inodes, want.free_inodes));
                    }
                    if h.dirs != want.dirs {
                        what.push(format!("{} directories, counted {}", h.dirs, want.dirs));
                    }
                    if h.inode_bitmap_crc != want.inode_bitmap_crc || h.block_bitmap_crc != want.block_bitmap_crc {
                        what.push("bitmap checksums do not match".into());
                    }
                    self.problem(
                        ProblemKind::GroupHeader,
                        format!("group {g}: header says {}: rewritten", what.join(", ")),
                    );
                    let mut blk = [0u8; BS];
                    want.encode_into(&mut blk);
                    self.img.put(hb, &blk);
                }
                Err(why) => {
                    self.problem(ProblemKind::GroupHeader, format!("{why}: rewritten"));
                    let mut blk = [0u8; BS];
                    want.encode_into(&mut blk);
                    self.img.put(hb, &blk);
                }
            }
        }
        Ok(())
    }
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

impl Checker<'_> {
    /// Frees an inode in use and the blocks it claims.
    fn free_inode(&mut self, ino: u64) {
        self.clear_inode(ino);
        for o in self.owner.iter_mut().filter(|o| **o == ino as u32) {
            *o = 0;
        }
    }

    /// Marks an inode free (its blocks are the caller's).
    fn clear_inode(&mut self, ino: u64) {
        let generation = self.inodes[ino as usize].generation;
        self.in_use[ino as usize] = false;
        self.inodes[ino as usize] = Inode {
            generation,
            ..Default::default()
        };
        self.dirty_inodes.insert(ino);
    }

    /// Checks what each inode's type says it holds (before its blocks are claimed).
    fn check_types(&mut self) -> Result<()> {
        for ino in 1..=self.geo.inode_count() {
            if !self.in_use[ino as usize] {
                continue;
            }
            let mut i = self.inodes[ino as usize].clone();
            let kind = i.file_type().expect("in use");
            let mut bad: Vec<String> = Vec::new();
            if kind != FileType::Symlink && !i.inline.is_empty() {
                bad.push("a symlink target in a record that is not a symlink: cleared".into());
                i.inline.clear();
            }
            if !kind.is_device() && i.rdev != 0 {
                bad.push(format!("a device number but type {kind:?}: cleared"));
                i.rdev = 0;
            }
            let no_pointers = |i: &Inode| i.direct.iter().all(|&p| p == 0) && i.indirect == 0 && i.dindirect == 0;
            let mut clear = None;
            match kind {
                FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {
                    if i.size != 0 || !no_pointers(&i) {
                        bad.push(format!("a {kind:?} with size {} or block pointers: cleared", i.size));
                        i.size = 0;
                        i.direct = [0; NDIRECT as usize];
                        i.indirect = 0;
                        i.dindirect = 0;
                    }
                }
                FileType::Symlink => {
                    let len = i.size as usize;
                    if len == 0 || len > MAX_SYMLINK {
                        clear = Some(format!("symlink {ino}: target of {len} bytes"));
                    } else if len <= INLINE_SYMLINK {
                        if i.inline.len() != len || !no_pointers(&i) {
                            clear = Some(format!(
                                "symlink {ino}: size {len} but {} bytes of target in the record",
                                i.inline.len()
                            ));
                        }
                    } else {
                        let p = u64::from(i.direct[0]);
                        let mut only = i.clone();
                        only.direct[0] = 0;
                        if !i.inline.is_empty() || !no_pointers(&only) || !self.geo.is_data_block(p) {
                            clear = Some(format!("symlink {ino}: its target block is not where it should be"));
                        } else if self.img.get(p)?[..len].contains(&0) {
                            clear = Some(format!("symlink {ino}: target shorter than its size {len}"));
                        }
                    }
                }
                FileType::Regular | FileType::Directory => {}
            }
            if let Some(why) = clear {
                self.problem(ProblemKind::FileType, format!("{why}: inode cleared"));
                let generation = i.generation;
                self.in_use[ino as usize] = false;
                self.inodes[ino as usize] = Inode {
                    generation,
                    ..Default::default()
                };
                self.dirty_inodes.insert(ino);
                continue;
            }
            for why in bad {
                self.problem(ProblemKind::FileType, format!("inode {ino}: {why}"));
            }
            if i != self.inodes[ino as usize] {
                self.inodes[ino as usize] = i;
                self.dirty_inodes.insert(ino);
            }
        }
        Ok(())
    }

    /// The orphan list's head as the repaired image has it.
    fn orphan_head(&self) -> u32 {
        self.orphan_list.first().map_or(0, |&o| o as u32)
    }

    /// Follows the orphan list from group 0's header: cut where it names an inode that cannot
    /// be an orphan (free, a directory, linked) or loops; `next_orphan` cleared elsewhere.
    fn orphan_chain(&mut self) -> Result<()> {
        let head = match GroupHeader::decode(self.img.get(self.geo.header(0))?, 0, &self.geo) {
            Ok(h) => u64::from(h.orphan_head),
            Err(_) => 0,
        };
        let mut list = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = head;
        while cur != 0 {
            let why = if !self.geo.valid_ino(cur) || !self.in_use[cur as usize] {
                Some("which is not in use")
            } else if self.inodes[cur as usize].is_dir() {
                Some("a directory")
            } else if self.inodes[cur as usize].nlink != 0 {
                Some("which has links")
            } else if !seen.insert(cur) {
                Some("a second time (a cycle)")
            } else {
                None
            };
            if let Some(why) = why {
                self.problem(
                    ProblemKind::OrphanList,
                    format!("the orphan list names inode {cur}, {why}: list cut there"),
                );
                break;
            }
            list.push(cur);
            cur = u64::from(self.inodes[cur as usize].next_orphan);
        }
        let on: HashSet<u64> = list.iter().copied().collect();
        for ino in 1..=self.geo.inode_count() {
            if self.in_use[ino as usize] && self.inodes[ino as usize].next_orphan != 0 && !on.contains(&ino) {
                self.problem(
                    ProblemKind::OrphanList,
                    format!("inode {ino} is not on the orphan list but links into it: cleared"),
                );
                self.inodes[ino as usize].next_orphan = 0;
                self.dirty_inodes.insert(ino);
            }
        }
        self.orphan_list = list;
        self.relink_orphans();
        Ok(())
    }

    /// Makes the orphans' `next_orphan` fields chain `orphan_list`.
    fn relink_orphans(&mut self) {
        let list = self.orphan_list.clone();
        for (k, &ino) in list.iter().enumerate() {
            let next = list.get(k + 1).map_or(0, |&n| n as u32);
            if self.inodes[ino as usize].next_orphan != next {
                self.inodes[ino as usize].next_orphan = next;
                self.dirty_inodes.insert(ino);
            }
        }
    }

    /// After the walk: an orphan some entry names leaves the list; with `repair` the others are
    /// freed, as a mount would.
    fn settle_orphans(&mut self) {
        let named: Vec<u64> = self
            .orphan_list
            .iter()
            .copied()
            .filter(|o| self.refs.contains_key(o))
            .collect();
        if !named.is_empty() {
            for &ino in &named {
                self.problem(
                    ProblemKind::OrphanList,
                    format!("inode {ino} is on the orphan list but has a name: taken off"),
                );
            }
            self.orphan_list.retain(|o| !named.contains(o));
            for ino in named {
                self.inodes[ino as usize].next_orphan = 0;
                self.dirty_inodes.insert(ino);
            }
            self.relink_orphans();
        }
        if self.repair && !self.orphan_list.is_empty() {
            let list: HashSet<u32> = std::mem::take(&mut self.orphan_list)
                .into_iter()
                .map(|o| o as u32)
                .collect();
            for (b, o) in self.owner.iter_mut().enumerate() {
                if list.contains(o) {
                    self.released_blocks.insert(b as u64);
                    *o = 0;
                }
            }
            for ino in list {
                self.released_inodes.insert(u64::from(ino));
                self.clear_inode(u64::from(ino));
            }
        }
    }
}
