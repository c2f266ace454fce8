//! The on-disk format: superblock, cylinder groups, inodes, directory blocks, indirect blocks.
//!
//! Every structure is little-endian and is checked when it is read: a decoder returns a reason
//! instead of a value when the bytes cannot be what the file system wrote (bad magic, bad
//! checksum, a field out of range). Nothing here panics on bad input.
//!
//! ```text
//! block 0            superblock
//! block 1            backup superblock
//! blocks 2, 3        journal headers (two slots, written alternately)
//! blocks 4 ..        journal log (journal_blocks - 2 blocks)
//! group g            [g * blocks_per_group, min((g + 1) * blocks_per_group, block_count)):
//!                      group header, inode bitmap, block bitmap, inode table, data blocks
//!                    (group 0's header comes right after the journal)
//! ```

use vino_blockdev::BLOCK_SIZE;

/// Block size of the file system (the device's block size).
pub const BS: usize = BLOCK_SIZE;
/// One block, as an array.
pub type Block = [u8; BS];

pub const MAGIC: [u8; 8] = *b"VINOFS\x00\x01";
/// On-disk format version. Version 2 added file types besides regular files and directories,
/// symlinks, device numbers, extended attributes and the orphan list: fields that are zero in
/// every version-1 record, so a version-1 image becomes a version-2 one by its superblock alone
/// ([`crate::upgrade`]). Version 3 added stream files (a codec's module named in the inode, the
/// file's data in encoded chunks found through chunk map blocks, [`ChunkMap`]): also absent from
/// every version-2 record, so the upgrade is again the superblock's alone.
pub const VERSION: u32 = 3;
pub const INODE_SIZE: usize = 256;
pub const INODES_PER_BLOCK: u64 = (BS / INODE_SIZE) as u64;
/// Direct block pointers in an inode.
pub const NDIRECT: u64 = 12;
/// Block pointers in an indirect block (32-bit pointers).
pub const NINDIRECT: u64 = (BS / 4) as u64;
/// Most blocks a file can have: direct, single indirect, double indirect.
pub const MAX_FILE_BLOCKS: u64 = NDIRECT + NINDIRECT + NINDIRECT * NINDIRECT;
pub const MAX_FILE_SIZE: u64 = MAX_FILE_BLOCKS * BS as u64;
/// Longest name in a directory, in bytes.
pub const MAX_NAME: usize = 255;
pub const ROOT_INO: u64 = 1;
pub const SB_PRIMARY: u64 = 0;
pub const SB_BACKUP: u64 = 1;
pub const JOURNAL_START: u64 = 2;
/// Blocks of a journal besides its log: the two header slots.
pub const JOURNAL_HEADERS: u64 = 2;
/// Smallest and largest cylinder group (one bitmap block maps at most `8 * BS` blocks).
pub const MIN_BLOCKS_PER_GROUP: u32 = 64;
pub const MAX_BLOCKS_PER_GROUP: u32 = (BS * 8) as u32;
pub const MAX_INODES_PER_GROUP: u32 = (BS * 8) as u32;
/// Smallest journal (headers included) for a file system of `groups` groups: the largest single
/// operation (two blocks per group and a few more) must fit on top of the commit threshold
/// (half the log).
pub fn min_journal_blocks(groups: u32) -> u64 {
    4 * u64::from(groups) + 64 + JOURNAL_HEADERS
}

pub const STATE_CLEAN: u32 = 1;
pub const STATE_MOUNTED: u32 = 2;

pub const S_IFMT: u16 = 0o170000;
pub const S_IFSOCK: u16 = 0o140000;
pub const S_IFLNK: u16 = 0o120000;
pub const S_IFREG: u16 = 0o100000;
pub const S_IFBLK: u16 = 0o060000;
pub const S_IFDIR: u16 = 0o040000;
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFIFO: u16 = 0o010000;

/// Type codes in directory entries (as ext2's, Linux's on-disk codes).
pub const FT_REG: u8 = 1;
pub const FT_DIR: u8 = 2;
pub const FT_CHR: u8 = 3;
pub const FT_BLK: u8 = 4;
pub const FT_FIFO: u8 = 5;
pub const FT_SOCK: u8 = 6;
pub const FT_LNK: u8 = 7;

/// Longest symlink target, in bytes (POSIX's PATH_MAX less the NUL).
pub const MAX_SYMLINK: usize = 4095;
/// Symlink targets up to this long live in the inode record (a fast symlink); longer ones in
/// one data block (`direct[0]`), zero-padded.
pub const INLINE_SYMLINK: usize = INODE_INLINE_END - INODE_INLINE;
/// Where the inode record keeps a fast symlink's target.
pub const INODE_INLINE: usize = 136;
/// Where a stream file's module hash lies, after [`STREAM_MAGIC`] at [`INODE_INLINE`].
pub const INODE_STREAM: usize = INODE_INLINE + 4;
/// Marks the inline area of a regular file or directory as holding a stream codec.
pub const STREAM_MAGIC: u32 = 0x4d52_5453; // "STRM"
/// A stream codec module's identity: the SHA-256 of its bytes.
pub type ModuleId = [u8; 32];
pub const INODE_INLINE_END: usize = INODE_SIZE - 4;

pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// CRC-32 of `bytes`, seeded (an inode or directory number, so that a record written to the
/// wrong place does not check).
pub fn crc(seed: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    h.update(bytes);
    h.finalize()
}

/// Checksum stored in the last 4 bytes of a block, over the rest.
fn seal_block(b: &mut [u8], seed: u32) {
    let c = crc(seed, &b[..BS - 4]);
    put_u32(b, BS - 4, c);
}

fn block_sealed(b: &[u8], seed: u32) -> bool {
    b.len() == BS && get_u32(b, BS - 4) == crc(seed, &b[..BS - 4])
}

// ---------------------------------------------------------------------------------------------
// Superblock and geometry
// ---------------------------------------------------------------------------------------------

/// The superblock: the file system's geometry and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub block_count: u64,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub groups: u32,
    /// Journal size, its two header blocks included.
    pub journal_blocks: u32,
    /// FFS's maxbpg: blocks a file takes from one group before the default placement moves it
    /// to another.
    pub maxbpg: u32,
    /// Random identity, also stamped on every journal record.
    pub fs_id: u64,
    pub state: u32,
    pub mount_count: u32,
    pub created_ns: u64,
    pub mounted_ns: u64,
}

impl Superblock {
    pub fn encode(&self) -> Box<Block> {
        self.encode_as(VERSION)
    }

    /// Encodes the superblock saying format `version` (an older one only to make test images).
    pub fn encode_as(&self, version: u32) -> Box<Block> {
        let mut b = Box::new([0u8; BS]);
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b[..], 8, version);
        put_u32(&mut b[..], 12, BS as u32);
        put_u64(&mut b[..], 16, self.block_count);
        put_u32(&mut b[..], 24, self.blocks_per_group);
        put_u32(&mut b[..], 28, self.inodes_per_group);
        put_u32(&mut b[..], 32, self.groups);
        put_u32(&mut b[..], 36, INODE_SIZE as u32);
        put_u64(&mut b[..], 40, JOURNAL_START);
        put_u32(&mut b[..], 48, self.journal_blocks);
        put_u32(&mut b[..], 52, ROOT_INO as u32);
        put_u32(&mut b[..], 56, self.maxbpg);
        put_u32(&mut b[..], 60, self.state);
        put_u32(&mut b[..], 64, self.mount_count);
        put_u64(&mut b[..], 72, self.fs_id);
        put_u64(&mut b[..], 80, self.created_ns);
        put_u64(&mut b[..], 88, self.mounted_ns);
        seal_block(&mut b[..], 0);
        b
    }

    /// Decodes and checks a superblock of this format version.
    pub fn decode(b: &[u8]) -> Result<Superblock, String> {
        Self::decode_any(b).and_then(|(sb, version)| match version_problem(version) {
            Some(why) => Err(why),
            None => Ok(sb),
        })
    }

    /// The format version a superblock says, if it is a sealed VINO superblock.
    pub fn version_of(b: &[u8]) -> Option<u32> {
        (b.len() == BS && b[0..8] == MAGIC && block_sealed(b, 0)).then(|| get_u32(b, 8))
    }

    /// Decodes and checks a superblock of any known version (1..=[`VERSION`]); returns it and
    /// its version. [`Superblock::encode`] writes the current version.
    pub fn decode_any(b: &[u8]) -> Result<(Superblock, u32), String> {
        if b.len() != BS || b[0..8] != MAGIC {
            return Err("bad magic number (not a VINO file system)".into());
        }
        if !block_sealed(b, 0) {
            return Err("checksum mismatch".into());
        }
        let version = get_u32(b, 8);
        if version == 0 || version > VERSION {
            return Err(version_problem(version).unwrap_or_default());
        }
        if get_u32(b, 12) as usize != BS || get_u32(b, 36) as usize != INODE_SIZE {
            return Err("unsupported block or inode size".into());
        }
        if get_u64(b, 40) != JOURNAL_START || get_u32(b, 52) as u64 != ROOT_INO {
            return Err("unsupported journal location or root inode".into());
        }
        let sb = Superblock {
            block_count: get_u64(b, 16),
            blocks_per_group: get_u32(b, 24),
            inodes_per_group: get_u32(b, 28),
            groups: get_u32(b, 32),
            journal_blocks: get_u32(b, 48),
            maxbpg: get_u32(b, 56),
            state: get_u32(b, 60),
            mount_count: get_u32(b, 64),
            fs_id: get_u64(b, 72),
            created_ns: get_u64(b, 80),
            mounted_ns: get_u64(b, 88),
        };
        Geometry::new(&sb)?;
        if sb.state != STATE_CLEAN && sb.state != STATE_MOUNTED {
            return Err(format!("unknown state {}", sb.state));
        }
        Ok((sb, version))
    }
}

/// Why a file system of format `version` cannot be mounted by this VINO, if it cannot.
pub fn version_problem(version: u32) -> Option<String> {
    if version == VERSION {
        None
    } else if version == 0 {
        Some("format version 0 is not a VINO format".into())
    } else if version < VERSION {
        Some(format!(
            "format version {version} is older than this VINO ({VERSION}): run `vino fsck --upgrade IMAGE`"
        ))
    } else {
        Some(format!(
            "format version {version} was made by a newer VINO (this one knows {VERSION})"
        ))
    }
}

/// Where everything is, derived from a checked superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    pub block_count: u64,
    pub bpg: u64,
    pub ipg: u64,
    pub groups: u32,
    pub journal_blocks: u64,
    pub itable_blocks: u64,
    pub maxbpg: u64,
}

impl Geometry {
    /// Checks the geometry a superblock describes: every group has room for its metadata and
    /// at least one data block, every number fits its on-disk field.
    pub fn new(sb: &Superblock) -> Result<Geometry, String> {
        let bpg = sb.blocks_per_group;
        if !(MIN_BLOCKS_PER_GROUP..=MAX_BLOCKS_PER_GROUP).contains(&bpg) || !bpg.is_multiple_of(8) {
            return Err(format!("bad blocks per group {bpg}"));
        }
        let ipg = sb.inodes_per_group;
        if !(16..=MAX_INODES_PER_GROUP).contains(&ipg) || !ipg.is_multiple_of(INODES_PER_BLOCK as u32) {
            return Err(format!("bad inodes per group {ipg}"));
        }
        if sb.block_count == 0 || sb.block_count > u64::from(u32::MAX) {
            return Err(format!("bad block count {}", sb.block_count));
        }
        let groups = sb.block_count.div_ceil(u64::from(bpg));
        if groups != u64::from(sb.groups) {
            return Err(format!(
                "{} groups do not match {} blocks of {} per group",
                sb.groups, sb.block_count, bpg
            ));
        }
        if u64::from(sb.groups) * u64::from(ipg) >= u64::from(u32::MAX) {
            return Err("too many inodes".into());
        }
        if u64::from(sb.journal_blocks) < min_journal_blocks(sb.groups) {
            return Err(format!(
                "journal of {} blocks is too small for {} groups",
                sb.journal_blocks, sb.groups
            ));
        }
        if sb.maxbpg == 0 {
            return Err("maxbpg is 0".into());
        }
        let g = Geometry {
            block_count: sb.block_count,
            bpg: u64::from(bpg),
            ipg: u64::from(ipg),
            groups: sb.groups,
            journal_blocks: u64::from(sb.journal_blocks),
            itable_blocks: u64::from(ipg) / INODES_PER_BLOCK,
            maxbpg: u64::from(sb.maxbpg),
        };
        // Group 0 holds the journal: it must fit before the group's own metadata.
        for grp in [0, g.groups - 1] {
            if g.data_start(grp) >= g.group_end(grp) {
                return Err(format!("group {grp} has no room for data"));
            }
        }
        Ok(g)
    }

    pub fn group_start(&self, g: u32) -> u64 {
        u64::from(g) * self.bpg
    }
    pub fn group_end(&self, g: u32) -> u64 {
        (self.group_start(g) + self.bpg).min(self.block_count)
    }
    pub fn header(&self, g: u32) -> u64 {
        if g == 0 {
            JOURNAL_START + self.journal_blocks
        } else {
            self.group_start(g)
        }
    }
    pub fn inode_bitmap(&self, g: u32) -> u64 {
        self.header(g) + 1
    }
    pub fn block_bitmap(&self, g: u32) -> u64 {
        self.header(g) + 2
    }
    pub fn itable(&self, g: u32) -> u64 {
        self.header(g) + 3
    }
    pub fn data_start(&self, g: u32) -> u64 {
        self.itable(g) + self.itable_blocks
    }
    /// Blocks of group `g` that can hold data.
    pub fn data_blocks(&self, g: u32) -> u64 {
        self.group_end(g) - self.data_start(g)
    }
    /// The group of device block `b` (callers check `b < block_count`).
    pub fn group_of(&self, b: u64) -> u32 {
        (b / self.bpg) as u32
    }
    /// True if `b` is a block of some group's data area.
    pub fn is_data_block(&self, b: u64) -> bool {
        b < self.block_count && b >= self.data_start(self.group_of(b))
    }
    pub fn inode_count(&self) -> u64 {
        u64::from(self.groups) * self.ipg
    }
    pub fn valid_ino(&self, ino: u64) -> bool {
        ino >= 1 && ino <= self.inode_count()
    }
    pub fn ino_group(&self, ino: u64) -> u32 {
        ((ino - 1) / self.ipg) as u32
    }
    /// The inode table block holding `ino`, and the record's offset in it.
    pub fn inode_location(&self, ino: u64) -> (u64, usize) {
        let g = self.ino_group(ino);
        let idx = (ino - 1) % self.ipg;
        (
            self.itable(g) + idx / INODES_PER_BLOCK,
            (idx % INODES_PER_BLOCK) as usize * INODE_SIZE,
        )
    }
    pub fn first_ino(&self, g: u32) -> u64 {
        u64::from(g) * self.ipg + 1
    }
    pub fn log_start(&self) -> u64 {
        JOURNAL_START + JOURNAL_HEADERS
    }
    pub fn log_len(&self) -> u64 {
        self.journal_blocks - JOURNAL_HEADERS
    }
    /// True for blocks a journal transaction may name as home: anything past the journal.
    pub fn is_journalable(&self, b: u64) -> bool {
        b >= JOURNAL_START + self.journal_blocks && b < self.block_count
    }
    /// Blocks of the group's bitmap that stand for no block (past the end of a short last
    /// group): always marked used.
    pub fn group_len(&self, g: u32) -> u64 {
        self.group_end(g) - self.group_start(g)
    }
}

// ---------------------------------------------------------------------------------------------
// Group header
// ---------------------------------------------------------------------------------------------

const GROUP_MAGIC: u32 = 0x4843_4756; // "VGCH"

/// A cylinder group's summary: free counts, directories, checksums of its bitmaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupHeader {
    pub group: u32,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub dirs: u32,
    pub inode_bitmap_crc: u32,
    pub block_bitmap_crc: u32,
    /// Group 0 only: the first inode of the orphan list (inodes with no name left that are
    /// still in use, freed at the next mount), 0 if empty. Journaled with the group header.
    pub orphan_head: u32,
}

impl GroupHeader {
    /// Encodes the header into its block, sealed with its checksum.
    pub fn encode_into(&self, b: &mut [u8]) {
        self.encode_unsealed(b);
        seal_block(b, self.group);
    }

    /// Encodes the header's fields without the checksum: for a block in memory that is sealed
    /// before it is written (the file system seals the headers a transaction changed when it
    /// commits, not once per block allocated).
    pub fn encode_unsealed(&self, b: &mut [u8]) {
        b.fill(0);
        put_u32(b, 0, GROUP_MAGIC);
        put_u32(b, 4, self.group);
        put_u32(b, 8, self.free_blocks);
        put_u32(b, 12, self.free_inodes);
        put_u32(b, 16, self.dirs);
        put_u32(b, 20, self.inode_bitmap_crc);
        put_u32(b, 24, self.block_bitmap_crc);
        put_u32(b, 28, self.orphan_head);
    }

    /// Decodes a header read from the device: its checksum and fields are checked.
    pub fn decode(b: &[u8], group: u32, geo: &Geometry) -> Result<GroupHeader, String> {
        if b.len() == BS && get_u32(b, 0) == GROUP_MAGIC && !block_sealed(b, group) {
            return Err(format!("group {group}: header checksum mismatch"));
        }
        GroupHeader::decode_unsealed(b, group, geo)
    }

    /// Decodes a header already checked when it was read, or written since by the file system
    /// (perhaps not sealed yet): its fields are checked, not its checksum.
    pub fn decode_unsealed(b: &[u8], group: u32, geo: &Geometry) -> Result<GroupHeader, String> {
        if b.len() != BS || get_u32(b, 0) != GROUP_MAGIC {
            return Err(format!("group {group}: bad header magic"));
        }
        let h = GroupHeader {
            group: get_u32(b, 4),
            free_blocks: get_u32(b, 8),
            free_inodes: get_u32(b, 12),
            dirs: get_u32(b, 16),
            inode_bitmap_crc: get_u32(b, 20),
            block_bitmap_crc: get_u32(b, 24),
            orphan_head: get_u32(b, 28),
        };
        if h.group != group {
            return Err(format!("group {group}: header says group {}", h.group));
        }
        if (group != 0 && h.orphan_head != 0) || u64::from(h.orphan_head) > geo.inode_count() {
            return Err(format!("group {group}: bad orphan list head {}", h.orphan_head));
        }
        if u64::from(h.free_blocks) > geo.data_blocks(group)
            || u64::from(h.free_inodes) > geo.ipg
            || u64::from(h.dirs) > geo.ipg
        {
            return Err(format!("group {group}: header counts out of range"));
        }
        Ok(h)
    }
}

/// Checksum of a bitmap block, as the group header records it.
pub fn bitmap_crc(group: u32, b: &[u8]) -> u32 {
    crc(group ^ 0x5a5a_5a5a, b)
}

pub fn bit(b: &[u8], i: u64) -> bool {
    b[(i / 8) as usize] & (1 << (i % 8)) != 0
}
pub fn set_bit(b: &mut [u8], i: u64, v: bool) {
    let byte = &mut b[(i / 8) as usize];
    if v {
        *byte |= 1 << (i % 8);
    } else {
        *byte &= !(1 << (i % 8));
    }
}

/// The block bitmap of an empty group: its metadata blocks and the bits past its end are used.
pub fn initial_block_bitmap(geo: &Geometry, g: u32) -> Box<Block> {
    let mut b = Box::new([0u8; BS]);
    let start = geo.group_start(g);
    for i in 0..geo.data_start(g) - start {
        set_bit(&mut b[..], i, true);
    }
    for i in geo.group_len(g)..(BS * 8) as u64 {
        set_bit(&mut b[..], i, true);
    }
    b
}

/// The inode bitmap of an empty group: only the bits past the group's inodes are used.
pub fn initial_inode_bitmap(geo: &Geometry) -> Box<Block> {
    let mut b = Box::new([0u8; BS]);
    for i in geo.ipg..(BS * 8) as u64 {
        set_bit(&mut b[..], i, true);
    }
    b
}

// ---------------------------------------------------------------------------------------------
// Inodes
// ---------------------------------------------------------------------------------------------

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileType {
    pub const ALL: [FileType; 7] = [
        FileType::Regular,
        FileType::Directory,
        FileType::Symlink,
        FileType::Fifo,
        FileType::Socket,
        FileType::CharDevice,
        FileType::BlockDevice,
    ];

    /// The type code of a directory entry on disk (ext2's).
    pub fn dirent_code(self) -> u8 {
        match self {
            FileType::Regular => FT_REG,
            FileType::Directory => FT_DIR,
            FileType::Symlink => FT_LNK,
            FileType::Fifo => FT_FIFO,
            FileType::Socket => FT_SOCK,
            FileType::CharDevice => FT_CHR,
            FileType::BlockDevice => FT_BLK,
        }
    }
    pub fn from_dirent_code(c: u8) -> Option<FileType> {
        FileType::ALL.into_iter().find(|t| t.dirent_code() == c)
    }
    /// The `d_type` of Linux's `getdents` (`DT_REG` and so on).
    pub fn dt_type(self) -> u8 {
        match self {
            FileType::Fifo => 1,
            FileType::CharDevice => 2,
            FileType::Directory => 4,
            FileType::BlockDevice => 6,
            FileType::Regular => 8,
            FileType::Symlink => 10,
            FileType::Socket => 12,
        }
    }
    /// The `S_IF*` bits of `st_mode`.
    pub fn mode_bits(self) -> u16 {
        match self {
            FileType::Regular => S_IFREG,
            FileType::Directory => S_IFDIR,
            FileType::Symlink => S_IFLNK,
            FileType::Fifo => S_IFIFO,
            FileType::Socket => S_IFSOCK,
            FileType::CharDevice => S_IFCHR,
            FileType::BlockDevice => S_IFBLK,
        }
    }
    pub fn from_mode(mode: u16) -> Option<FileType> {
        FileType::ALL.into_iter().find(|t| t.mode_bits() == mode & S_IFMT)
    }
    /// A character or block device: the inode holds a device number.
    pub fn is_device(self) -> bool {
        matches!(self, FileType::CharDevice | FileType::BlockDevice)
    }
}

/// An inode record (256 bytes on disk): mode (0), links (4), uid (8), gid (12), size (16),
/// atime, mtime, ctime (24, 32, 40), generation (48), blocks (52), creator (56), direct pointers
/// (64..112), indirect (112), double indirect (116); since version 2: xattr block (120), next
/// orphan (124), device number (128), a fast symlink's target ([`INODE_INLINE`]..252, NUL
/// padded); the checksum (252) covers bytes 0..252, seeded with the inode number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inode {
    /// Type and permission bits; 0 for a free inode.
    pub mode: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    /// Bumped each time the inode number is reused.
    pub generation: u32,
    /// Blocks allocated to the file, indirect blocks included.
    pub blocks: u32,
    /// The process that created the file: the only one that may graft its placement policy.
    pub creator: u64,
    pub direct: [u32; NDIRECT as usize],
    pub indirect: u32,
    pub dindirect: u32,
    /// The block of the inode's extended attributes (0: none); counted in `blocks`.
    pub xattr: u32,
    /// The next inode on the orphan list (0: the last), for an inode on it.
    pub next_orphan: u32,
    /// Device number of a character or block device.
    pub rdev: u64,
    /// A fast symlink's target (at most [`INLINE_SYMLINK`] bytes); empty otherwise.
    pub inline: Vec<u8>,
    /// Since version 3, a regular file's or directory's stream codec (the module's content
    /// hash): the file's data is kept in encoded chunks ([`ChunkMap`]); a directory hands its
    /// codec to the files and directories made in it. Kept where a symlink keeps its target.
    pub stream: Option<ModuleId>,
}

impl Inode {
    pub fn is_free(&self) -> bool {
        self.mode == 0
    }

    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }

    pub fn is_regular(&self) -> bool {
        self.file_type() == Some(FileType::Regular)
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == Some(FileType::Symlink)
    }

    /// A symlink whose target is in the record.
    pub fn is_fast_symlink(&self) -> bool {
        self.is_symlink() && self.size as usize <= INLINE_SYMLINK
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == Some(FileType::Directory)
    }

    pub fn encode_into(&self, ino: u64, b: &mut [u8]) {
        let b = &mut b[..INODE_SIZE];
        b.fill(0);
        put_u16(b, 0, self.mode);
        put_u32(b, 4, self.nlink);
        put_u32(b, 8, self.uid);
        put_u32(b, 12, self.gid);
        put_u64(b, 16, self.size);
        put_u64(b, 24, self.atime_ns);
        put_u64(b, 32, self.mtime_ns);
        put_u64(b, 40, self.ctime_ns);
        put_u32(b, 48, self.generation);
        put_u32(b, 52, self.blocks);
        put_u64(b, 56, self.creator);
        for (i, p) in self.direct.iter().enumerate() {
            put_u32(b, 64 + 4 * i, *p);
        }
        put_u32(b, 112, self.indirect);
        put_u32(b, 116, self.dindirect);
        // Version 2: zero in every version-1 record.
        put_u32(b, 120, self.xattr);
        put_u32(b, 124, self.next_orphan);
        put_u64(b, 128, self.rdev);
        let n = self.inline.len().min(INLINE_SYMLINK);
        b[INODE_INLINE..INODE_INLINE + n].copy_from_slice(&self.inline[..n]);
        if let Some(module) = &self.stream
            && !self.is_symlink()
        {
            put_u32(b, INODE_INLINE, STREAM_MAGIC);
            b[INODE_STREAM..INODE_STREAM + 32].copy_from_slice(module);
        }
        let c = crc(ino as u32, &b[..INODE_SIZE - 4]);
        put_u32(b, INODE_SIZE - 4, c);
    }

    /// Decodes an inode record: a never-used (all zero) record is a free inode; anything else
    /// must carry a good checksum and a known type.
    pub fn decode(ino: u64, b: &[u8]) -> Result<Inode, String> {
        let b = &b[..INODE_SIZE];
        if b.iter().all(|&x| x == 0) {
            return Ok(Inode::default());
        }
        if get_u32(b, INODE_SIZE - 4) != crc(ino as u32, &b[..INODE_SIZE - 4]) {
            return Err(format!("inode {ino}: checksum mismatch"));
        }
        let mut direct = [0u32; NDIRECT as usize];
        for (i, p) in direct.iter_mut().enumerate() {
            *p = get_u32(b, 64 + 4 * i);
        }
        let inode = Inode {
            mode: get_u16(b, 0),
            nlink: get_u32(b, 4),
            uid: get_u32(b, 8),
            gid: get_u32(b, 12),
            size: get_u64(b, 16),
            atime_ns: get_u64(b, 24),
            mtime_ns: get_u64(b, 32),
            ctime_ns: get_u64(b, 40),
            generation: get_u32(b, 48),
            blocks: get_u32(b, 52),
            creator: get_u64(b, 56),
            direct,
            indirect: get_u32(b, 112),
            dindirect: get_u32(b, 116),
            xattr: get_u32(b, 120),
            next_orphan: get_u32(b, 124),
            rdev: get_u64(b, 128),
            inline: {
                let area = &b[INODE_INLINE..INODE_INLINE_END];
                let n = area.iter().position(|&c| c == 0).unwrap_or(area.len());
                area[..n].to_vec()
            },
            stream: None,
        };
        let mut inode = inode;
        if !inode.is_symlink() && get_u32(b, INODE_INLINE) == STREAM_MAGIC {
            if !matches!(inode.file_type(), Some(FileType::Regular | FileType::Directory)) {
                return Err(format!(
                    "inode {ino}: a stream codec on a file that is neither regular nor a directory"
                ));
            }
            let mut module = [0u8; 32];
            module.copy_from_slice(&b[INODE_STREAM..INODE_STREAM + 32]);
            inode.stream = Some(module);
            inode.inline.clear();
        }
        if !inode.is_free() && inode.file_type().is_none() {
            return Err(format!("inode {ino}: unknown file type (mode {:o})", inode.mode));
        }
        if inode.size > MAX_FILE_SIZE {
            return Err(format!("inode {ino}: size {} is past the largest file", inode.size));
        }
        Ok(inode)
    }
}

/// Where file block `fb` is found: in the inode, in the single indirect block, or in the double
/// indirect tree (index in the top block, index in the second-level block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockPath {
    Direct(usize),
    Single(usize),
    Double(usize, usize),
}

pub fn block_path(fb: u64) -> Option<BlockPath> {
    if fb < NDIRECT {
        Some(BlockPath::Direct(fb as usize))
    } else if fb < NDIRECT + NINDIRECT {
        Some(BlockPath::Single((fb - NDIRECT) as usize))
    } else if fb < MAX_FILE_BLOCKS {
        let r = fb - NDIRECT - NINDIRECT;
        Some(BlockPath::Double((r / NINDIRECT) as usize, (r % NINDIRECT) as usize))
    } else {
        None
    }
}

/// Pointer `i` of an indirect block.
pub fn ind_get(b: &[u8], i: usize) -> u32 {
    get_u32(b, 4 * i)
}
pub fn ind_set(b: &mut [u8], i: usize, v: u32) {
    put_u32(b, 4 * i, v)
}

// ---------------------------------------------------------------------------------------------
// Extended attribute blocks
// ---------------------------------------------------------------------------------------------

const XATTR_MAGIC: u32 = 0x5441_5856; // "VXAT"
/// Header of an xattr block: magic (4), record count (2), reserved (2).
const XATTR_HEADER: usize = 8;
/// Fixed part of an xattr record: name length (1), value length (2).
const XATTR_REC: usize = 3;
/// Longest xattr name.
pub const MAX_XATTR_NAME: usize = 255;

/// One extended attribute: name and value.
pub type Xattr = (Vec<u8>, Vec<u8>);

/// Bytes the records of `attrs` take in an xattr block.
pub fn xattr_bytes(attrs: &[Xattr]) -> usize {
    attrs.iter().map(|(n, v)| XATTR_REC + n.len() + v.len()).sum()
}

/// True if `attrs` fit one xattr block.
pub fn xattr_fits(attrs: &[Xattr]) -> bool {
    xattr_bytes(attrs) <= BS - XATTR_HEADER - 4
}

/// Encodes an inode's extended attributes (sorted by name, as given) into its xattr block,
/// sealed with a checksum seeded with the inode number. The caller checks [`xattr_fits`].
pub fn xattr_encode(b: &mut [u8], ino: u64, attrs: &[Xattr]) {
    b.fill(0);
    put_u32(b, 0, XATTR_MAGIC);
    put_u16(b, 4, attrs.len() as u16);
    let mut off = XATTR_HEADER;
    for (n, v) in attrs {
        b[off] = n.len() as u8;
        put_u16(b, off + 1, v.len() as u16);
        off += XATTR_REC;
        b[off..off + n.len()].copy_from_slice(n);
        off += n.len();
        b[off..off + v.len()].copy_from_slice(v);
        off += v.len();
    }
    seal_block(b, ino as u32);
}

/// Parses and checks an xattr block: magic, checksum, records within the block, names
/// 1..=255 bytes, sorted and unique, zeros after the last record.
pub fn xattr_parse(b: &[u8], ino: u64) -> Result<Vec<Xattr>, String> {
    if b.len() != BS || get_u32(b, 0) != XATTR_MAGIC || !block_sealed(b, ino as u32) {
        return Err(format!("inode {ino}: xattr block checksum mismatch"));
    }
    let count = usize::from(get_u16(b, 4));
    let end = BS - 4;
    let mut off = XATTR_HEADER;
    let mut out: Vec<Xattr> = Vec::with_capacity(count);
    for _ in 0..count {
        if off + XATTR_REC > end {
            return Err(format!("inode {ino}: xattr record at {off} runs past the block"));
        }
        let nl = usize::from(b[off]);
        let vl = usize::from(get_u16(b, off + 1));
        off += XATTR_REC;
        if nl == 0 || off + nl + vl > end {
            return Err(format!("inode {ino}: bad xattr record at {off}"));
        }
        let name = b[off..off + nl].to_vec();
        let value = b[off + nl..off + nl + vl].to_vec();
        off += nl + vl;
        if out.last().is_some_and(|(last, _)| *last >= name) {
            return Err(format!("inode {ino}: xattr names not sorted"));
        }
        out.push((name, value));
    }
    if b[off..end].iter().any(|&c| c != 0) {
        return Err(format!("inode {ino}: bytes after the last xattr record"));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Directory blocks
// ---------------------------------------------------------------------------------------------

/// Bytes at the end of a directory block that hold its tail (magic and checksum).
pub const DIR_TAIL: usize = 8;
/// Bytes of a directory block that hold entries.
pub const DIR_USABLE: usize = BS - DIR_TAIL;
const DIR_TAIL_MAGIC: u32 = 0x5444_5256; // "VRDT"
/// Fixed part of a directory entry: inode (4), record length (2), name length (1), type (1).
pub const DIRENT_HEADER: usize = 8;

/// Bytes an entry with a name of `name_len` bytes needs.
pub fn dirent_size(name_len: usize) -> usize {
    (DIRENT_HEADER + name_len).div_ceil(4) * 4
}

/// One record of a directory block, its name left in the block ([`DirRecord::name`]): parsing
/// a block for a lookup, a create or an unlink copies no names (a block holds up to a few
/// hundred, and copying each was a third of an unlink's time in the daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRecord {
    /// Offset of the record in the block.
    pub off: usize,
    /// 0 for an unused record.
    pub ino: u32,
    pub rec_len: usize,
    pub ftype: u8,
    /// Length of the name (0 for an unused record).
    pub name_len: usize,
}

impl DirRecord {
    /// The record's name in `b`, the block it was parsed from (as it was then).
    pub fn name<'a>(&self, b: &'a [u8]) -> &'a [u8] {
        &b[self.off + DIRENT_HEADER..self.off + DIRENT_HEADER + self.name_len]
    }

    /// Bytes the record could give to a new entry: all of an unused one, what its name leaves
    /// of a used one.
    pub fn room(&self) -> usize {
        if self.ino == 0 {
            self.rec_len
        } else {
            self.rec_len - dirent_size(self.name_len)
        }
    }
}

/// One entry of a directory block, as parsed, with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// Offset of the entry in the block.
    pub off: usize,
    /// 0 for an unused record.
    pub ino: u32,
    pub rec_len: usize,
    pub ftype: u8,
    pub name: Vec<u8>,
}

/// A name a directory may hold: 1..=255 bytes, no `/`, no NUL.
pub fn name_ok(name: &[u8]) -> bool {
    // memchr's search runs a word at a time: every parse of a block checks each of its names.
    !name.is_empty() && name.len() <= MAX_NAME && memchr::memchr2(b'/', 0, name).is_none()
}

/// Checks a directory block's tail: the magic, and the checksum seeded with the directory's
/// inode number.
fn dir_check_seal(b: &[u8], dir_ino: u64) -> Result<(), String> {
    if get_u32(b, DIR_USABLE) != DIR_TAIL_MAGIC || !block_sealed(b, dir_ino as u32) {
        return Err(format!("directory {dir_ino}: block checksum mismatch"));
    }
    Ok(())
}

/// Parses and checks a directory block: the records chain from offset 0 to exactly
/// [`DIR_USABLE`], each long enough for its name, used records have good names; the tail
/// checksum matches (seeded with the directory's inode number).
pub fn dir_parse(b: &[u8], dir_ino: u64) -> Result<Vec<RawEntry>, String> {
    Ok(with_names(b, dir_records_checked(b, dir_ino)?))
}

/// [`dir_parse`] without copying the names.
pub fn dir_records_checked(b: &[u8], dir_ino: u64) -> Result<Vec<DirRecord>, String> {
    dir_check_seal(b, dir_ino)?;
    dir_records(b).map_err(|why| format!("directory {dir_ino}: {why}"))
}

fn with_names(b: &[u8], records: Vec<DirRecord>) -> Vec<RawEntry> {
    records
        .into_iter()
        .map(|r| RawEntry {
            off: r.off,
            ino: r.ino,
            rec_len: r.rec_len,
            ftype: r.ftype,
            name: r.name(b).to_vec(),
        })
        .collect()
}

/// Parses the records of a directory block without looking at the checksum (names left in
/// the block).
pub fn dir_records(b: &[u8]) -> Result<Vec<DirRecord>, String> {
    let mut out = Vec::with_capacity(64);
    let mut off = 0usize;
    while off < DIR_USABLE {
        if off + DIRENT_HEADER > DIR_USABLE {
            return Err(format!("record at {off} runs past the block"));
        }
        let ino = get_u32(b, off);
        let rec_len = usize::from(get_u16(b, off + 4));
        let name_len = usize::from(b[off + 6]);
        let ftype = b[off + 7];
        if rec_len < DIRENT_HEADER || !rec_len.is_multiple_of(4) || off + rec_len > DIR_USABLE {
            return Err(format!("record at {off} has bad length {rec_len}"));
        }
        let name_len = if ino != 0 {
            if dirent_size(name_len) > rec_len {
                return Err(format!(
                    "record at {off}: name of {name_len} bytes does not fit {rec_len}"
                ));
            }
            if !name_ok(&b[off + DIRENT_HEADER..off + DIRENT_HEADER + name_len]) {
                return Err(format!("record at {off}: bad name"));
            }
            if FileType::from_dirent_code(ftype).is_none() {
                return Err(format!("record at {off}: unknown type {ftype}"));
            }
            name_len
        } else {
            0
        };
        out.push(DirRecord {
            off,
            ino,
            rec_len,
            ftype,
            name_len,
        });
        off += rec_len;
    }
    Ok(out)
}

/// Writes the tail (magic and checksum) of a directory block after a change.
pub fn dir_seal(b: &mut [u8], dir_ino: u64) {
    put_u32(b, DIR_USABLE, DIR_TAIL_MAGIC);
    seal_block(b, dir_ino as u32);
}

fn put_entry(b: &mut [u8], off: usize, ino: u32, rec_len: usize, name: &[u8], ftype: u8) {
    put_u32(b, off, ino);
    put_u16(b, off + 4, rec_len as u16);
    b[off + 6] = name.len() as u8;
    b[off + 7] = ftype;
    b[off + DIRENT_HEADER..off + DIRENT_HEADER + name.len()].copy_from_slice(name);
    // Clear what is left of the record's name area so that stale bytes do not linger.
    let used = DIRENT_HEADER + name.len();
    b[off + used..off + dirent_size(name.len()).min(rec_len)].fill(0);
}

/// An empty directory block: one unused record spanning it.
pub fn dir_empty_block(b: &mut [u8], dir_ino: u64) {
    b.fill(0);
    put_entry(b, 0, 0, DIR_USABLE, &[], 0);
    dir_seal(b, dir_ino);
}

/// The first block of a new directory: `.` and `..`.
pub fn dir_first_block(b: &mut [u8], dir_ino: u64, parent: u64) {
    b.fill(0);
    let dot = dirent_size(1);
    put_entry(b, 0, dir_ino as u32, dot, b".", FT_DIR);
    put_entry(b, dot, parent as u32, DIR_USABLE - dot, b"..", FT_DIR);
    dir_seal(b, dir_ino);
}

/// Adds an entry to a parsed block if there is room; returns true if it did. `entries` is the
/// block's parse ([`dir_records`]) and stays so: the caller learns the block's room from it
/// without parsing the block again (a parse checks every name in it, and was half of a create's
/// time in the file system).
pub fn dir_add(b: &mut [u8], entries: &mut Vec<DirRecord>, dir_ino: u64, name: &[u8], ino: u64, ftype: u8) -> bool {
    let need = dirent_size(name.len());
    for i in 0..entries.len() {
        let e = entries[i];
        if e.ino == 0 && e.rec_len >= need {
            put_entry(b, e.off, ino as u32, e.rec_len, name, ftype);
            entries[i] = DirRecord {
                ino: ino as u32,
                ftype,
                name_len: name.len(),
                ..e
            };
            dir_seal(b, dir_ino);
            return true;
        }
        if e.ino != 0 {
            let used = dirent_size(e.name_len);
            if e.rec_len - used >= need {
                put_u16(b, e.off + 4, used as u16);
                put_entry(b, e.off + used, ino as u32, e.rec_len - used, name, ftype);
                entries[i].rec_len = used;
                let added = DirRecord {
                    off: e.off + used,
                    ino: ino as u32,
                    rec_len: e.rec_len - used,
                    ftype,
                    name_len: name.len(),
                };
                entries.insert(i + 1, added);
                dir_seal(b, dir_ino);
                return true;
            }
        }
    }
    false
}

/// Removes the entry at index `i` of a parsed block: merged into the previous record, or
/// marked unused if it is the first. `entries` stays the block's parse, as in [`dir_add`].
pub fn dir_remove(b: &mut [u8], entries: &mut Vec<DirRecord>, i: usize, dir_ino: u64) {
    let e = entries[i];
    if i == 0 {
        put_u32(b, e.off, 0);
        b[e.off + 6] = 0;
        b[e.off + 7] = 0;
        let end = (e.off + e.rec_len).min(DIR_USABLE);
        b[e.off + DIRENT_HEADER..end].fill(0);
        entries[0] = DirRecord {
            ino: 0,
            ftype: 0,
            name_len: 0,
            ..e
        };
    } else {
        let p = entries[i - 1];
        put_u16(b, p.off + 4, (p.rec_len + e.rec_len) as u16);
        b[e.off..e.off + e.rec_len].fill(0);
        entries[i - 1].rec_len += e.rec_len;
        entries.remove(i);
    }
    dir_seal(b, dir_ino);
}

/// Points an existing entry at another inode (rename over a name, a moved directory's `..`).
pub fn dir_retarget(b: &mut [u8], e: &DirRecord, dir_ino: u64, ino: u64, ftype: u8) {
    put_u32(b, e.off, ino as u32);
    b[e.off + 7] = ftype;
    dir_seal(b, dir_ino);
}

/// Rebuilds a directory block from a list of entries (fsck's salvage). Entries that do not fit
/// are returned.
pub fn dir_rebuild(b: &mut [u8], dir_ino: u64, entries: &[(Vec<u8>, u64, u8)]) -> Vec<(Vec<u8>, u64, u8)> {
    dir_empty_block(b, dir_ino);
    let mut parsed = dir_records(b).expect("a block this module built");
    let mut left = Vec::new();
    for (name, ino, ft) in entries {
        if !dir_add(b, &mut parsed, dir_ino, name, *ino, *ft) {
            left.push((name.clone(), *ino, *ft));
        }
    }
    left
}

// ---------------------------------------------------------------------------------------------
// Chunk maps (version 3): where a stream file's encoded chunks lie
// ---------------------------------------------------------------------------------------------

/// Plain bytes in one chunk of a stream file: the unit a codec encodes.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// File blocks (pages) in one chunk.
pub const CHUNK_BLOCKS: u64 = (CHUNK_BYTES / BS) as u64;
/// Most bytes an encoded chunk may take: its plain length plus a tag (a MAC, a checksum) of up
/// to one block. A codec that would need more fails.
pub const MAX_CODED: usize = CHUNK_BYTES + BS;
/// Most device blocks one chunk's encoded bytes take.
pub const CHUNK_PTRS: usize = MAX_CODED.div_ceil(BS);
/// Bytes of the nonce kept with each chunk (drawn fresh by the kernel for every write of it).
pub const NONCE_BYTES: usize = 24;
/// Chunk entries in one chunk map block.
pub const CHUNKS_PER_MAP: u64 = 31;
const CHUNK_MAP_MAGIC: u32 = 0x4d4b_4843; // "CHKM"
const CHUNK_MAP_HEADER: usize = 64;
const CHUNK_ENTRY: usize = 128;

/// The chunk is stored as the plain bytes, not encoded (a compressor that could not shrink it
/// asked for this); it is read without the codec.
pub const CHUNK_RAW: u32 = 1;

/// Where one chunk of a stream file lies and how to read it back: an entry of a chunk map
/// block (128 bytes: coded length (0), plain length (4), valid length (8), flags (12), nonce
/// (16..40), block pointers (40..108), zeros).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Bytes stored (encoded); 0: no chunk here (a hole, reads as zeros).
    pub coded_len: u32,
    /// The plain length the codec was given, and must give back when decoding.
    pub plain_len: u32,
    /// How many of those plain bytes are still the file's (a shrinking truncate cuts this; the
    /// rest read as zeros).
    pub valid_len: u32,
    pub flags: u32,
    pub nonce: [u8; NONCE_BYTES],
    /// The device blocks of the encoded bytes, in order (`coded_len.div_ceil(BS)` of them).
    pub blocks: Vec<u64>,
}

impl ChunkEntry {
    pub fn is_hole(&self) -> bool {
        self.coded_len == 0
    }

    pub fn is_raw(&self) -> bool {
        self.flags & CHUNK_RAW != 0
    }

    fn encode_into(&self, b: &mut [u8]) {
        b.fill(0);
        if self.is_hole() {
            return;
        }
        put_u32(b, 0, self.coded_len);
        put_u32(b, 4, self.plain_len);
        put_u32(b, 8, self.valid_len);
        put_u32(b, 12, self.flags);
        b[16..40].copy_from_slice(&self.nonce);
        for (i, &p) in self.blocks.iter().enumerate() {
            put_u32(b, 40 + 4 * i, p as u32);
        }
    }

    fn decode(b: &[u8], what: &str) -> Result<ChunkEntry, String> {
        let coded_len = get_u32(b, 0);
        if coded_len == 0 {
            return if b.iter().all(|&x| x == 0) {
                Ok(ChunkEntry::default())
            } else {
                Err(format!("{what}: an empty chunk entry holds bytes"))
            };
        }
        let e = ChunkEntry {
            coded_len,
            plain_len: get_u32(b, 4),
            valid_len: get_u32(b, 8),
            flags: get_u32(b, 12),
            nonce: b[16..40].try_into().expect("24 bytes"),
            blocks: (0..CHUNK_PTRS).map(|i| u64::from(get_u32(b, 40 + 4 * i))).collect(),
        };
        let n = (coded_len as usize).div_ceil(BS);
        let bad = if coded_len as usize > MAX_CODED {
            Some(format!("coded length {coded_len} is past {MAX_CODED}"))
        } else if e.plain_len as usize > CHUNK_BYTES || e.plain_len == 0 {
            Some(format!("plain length {} is not in 1..={CHUNK_BYTES}", e.plain_len))
        } else if e.valid_len > e.plain_len {
            Some(format!(
                "valid length {} is past the plain length {}",
                e.valid_len, e.plain_len
            ))
        } else if e.flags & !CHUNK_RAW != 0 {
            Some(format!("unknown flags {:#x}", e.flags))
        } else if e.is_raw() && coded_len != e.plain_len {
            Some("a raw chunk's coded and plain lengths differ".into())
        } else if e.blocks[..n].contains(&0) || e.blocks[n..].iter().any(|&p| p != 0) {
            Some(format!("block pointers do not match {n} blocks"))
        } else if b[108..].iter().any(|&x| x != 0) {
            Some("reserved bytes are not zero".into())
        } else {
            None
        };
        match bad {
            Some(why) => Err(format!("{what}: {why}")),
            None => Ok(ChunkEntry {
                blocks: e.blocks[..n].to_vec(),
                ..e
            }),
        }
    }
}

/// One chunk map block of a stream file: [`CHUNKS_PER_MAP`] entries. Map block `m` of the file
/// (its file block `m` in the inode's block tree) holds chunks `m * CHUNKS_PER_MAP ..`. Header:
/// magic (0), map index (4); entries from byte 64; sealed with a checksum seeded with the inode
/// number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkMap {
    pub entries: Vec<ChunkEntry>,
}

impl ChunkMap {
    pub fn empty() -> ChunkMap {
        ChunkMap {
            entries: vec![ChunkEntry::default(); CHUNKS_PER_MAP as usize],
        }
    }

    pub fn encode(&self, b: &mut [u8], ino: u64, index: u64) {
        b.fill(0);
        put_u32(b, 0, CHUNK_MAP_MAGIC);
        put_u32(b, 4, index as u32);
        for (i, e) in self.entries.iter().enumerate() {
            let at = CHUNK_MAP_HEADER + i * CHUNK_ENTRY;
            e.encode_into(&mut b[at..at + CHUNK_ENTRY]);
        }
        seal_block(b, ino as u32);
    }

    /// Parses and checks map block `index` of inode `ino`.
    pub fn decode(b: &[u8], ino: u64, index: u64) -> Result<ChunkMap, String> {
        if b.len() != BS || get_u32(b, 0) != CHUNK_MAP_MAGIC || !block_sealed(b, ino as u32) {
            return Err(format!("inode {ino}: chunk map block {index}: checksum mismatch"));
        }
        if u64::from(get_u32(b, 4)) != index {
            return Err(format!(
                "inode {ino}: chunk map block {index} says it is block {}",
                get_u32(b, 4)
            ));
        }
        let entries = (0..CHUNKS_PER_MAP as usize)
            .map(|i| {
                let at = CHUNK_MAP_HEADER + i * CHUNK_ENTRY;
                let what = format!("inode {ino}: chunk {}", index * CHUNKS_PER_MAP + i as u64);
                ChunkEntry::decode(&b[at..at + CHUNK_ENTRY], &what)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ChunkMap { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            block_count: 4096,
            blocks_per_group: 1024,
            inodes_per_group: 256,
            groups: 4,
            journal_blocks: 128,
            maxbpg: 256,
            fs_id: 7,
            state: STATE_CLEAN,
            mount_count: 3,
            created_ns: 11,
            mounted_ns: 12,
        }
    }

    #[test]
    fn superblock_round_trips_and_detects_damage() {
        let s = sb();
        let b = s.encode();
        assert_eq!(Superblock::decode(&b[..]).unwrap(), s);
        let mut bad = b.clone();
        bad[20] ^= 1;
        assert!(Superblock::decode(&bad[..]).unwrap_err().contains("checksum"));
        let mut bad = b.clone();
        bad[0] = b'X';
        assert!(Superblock::decode(&bad[..]).unwrap_err().contains("magic"));
        let mut s2 = sb();
        s2.groups = 5;
        assert!(
            Superblock::decode(&s2.encode()[..]).is_err(),
            "groups must match the block count"
        );
        let mut s3 = sb();
        s3.journal_blocks = 1020;
        assert!(
            Superblock::decode(&s3.encode()[..]).is_err(),
            "the journal must leave group 0 room"
        );
    }

    #[test]
    fn geometry_places_groups() {
        let g = Geometry::new(&sb()).unwrap();
        assert_eq!(g.header(0), 2 + 128);
        assert_eq!(g.header(1), 1024);
        assert_eq!(g.itable_blocks, 16);
        assert_eq!(g.data_start(1), 1024 + 3 + 16);
        assert!(g.is_data_block(g.data_start(2)));
        assert!(!g.is_data_block(g.data_start(2) - 1));
        assert!(!g.is_data_block(4096));
        assert_eq!(g.inode_location(1), (g.itable(0), 0));
        assert_eq!(g.inode_location(17), (g.itable(0) + 1, 0));
        assert_eq!(g.inode_location(257), (g.itable(1), 0));
        assert_eq!(g.ino_group(256), 0);
        assert_eq!(g.ino_group(257), 1);
    }

    #[test]
    fn group_header_round_trips() {
        let g = Geometry::new(&sb()).unwrap();
        let h = GroupHeader {
            group: 2,
            free_blocks: 900,
            free_inodes: 200,
            dirs: 3,
            inode_bitmap_crc: 5,
            block_bitmap_crc: 6,
            orphan_head: 0,
        };
        let mut b = [0u8; BS];
        h.encode_into(&mut b);
        assert_eq!(GroupHeader::decode(&b, 2, &g).unwrap(), h);
        assert!(GroupHeader::decode(&b, 1, &g).is_err(), "wrong group");
        b[9] ^= 0x40;
        assert!(GroupHeader::decode(&b, 2, &g).is_err());
    }

    #[test]
    fn inode_round_trips_and_detects_damage() {
        let mut i = Inode {
            mode: S_IFREG | 0o644,
            nlink: 1,
            size: 12345,
            creator: 99,
            generation: 4,
            ..Default::default()
        };
        i.direct[3] = 777;
        i.dindirect = 888;
        let mut b = [0u8; INODE_SIZE];
        i.encode_into(42, &mut b);
        assert_eq!(Inode::decode(42, &b).unwrap(), i);
        assert!(
            Inode::decode(43, &b).is_err(),
            "checksum is seeded with the inode number"
        );
        b[30] ^= 1;
        assert!(Inode::decode(42, &b).is_err());
        assert!(Inode::decode(5, &[0u8; INODE_SIZE]).unwrap().is_free());
    }

    #[test]
    fn new_inode_fields_round_trip_and_v1_records_read_as_v2() {
        let mut i = Inode {
            mode: S_IFLNK | 0o777,
            nlink: 1,
            size: 5,
            xattr: 99,
            next_orphan: 7,
            rdev: 0x1234_5678_9abc,
            inline: b"abcde".to_vec(),
            ..Default::default()
        };
        let mut b = [0u8; INODE_SIZE];
        i.encode_into(9, &mut b);
        assert_eq!(Inode::decode(9, &b).unwrap(), i);
        i.inline = vec![b'x'; INLINE_SYMLINK];
        i.size = INLINE_SYMLINK as u64;
        i.encode_into(9, &mut b);
        assert_eq!(Inode::decode(9, &b).unwrap(), i);
        // A version-1 record: the new fields are zero, and the checksum covers the same bytes.
        let v1 = Inode {
            mode: S_IFREG | 0o600,
            nlink: 1,
            ..Default::default()
        };
        v1.encode_into(3, &mut b);
        assert!(b[120..INODE_SIZE - 4].iter().all(|&c| c == 0));
        assert_eq!(get_u32(&b, INODE_SIZE - 4), crc(3, &b[..INODE_SIZE - 4]));
        for t in FileType::ALL {
            assert_eq!(FileType::from_mode(t.mode_bits() | 0o644), Some(t));
            assert_eq!(FileType::from_dirent_code(t.dirent_code()), Some(t));
        }
    }

    #[test]
    fn xattr_blocks() {
        let attrs = vec![(b"a".to_vec(), b"1".to_vec()), (b"user.b".to_vec(), vec![])];
        let mut b = [0u8; BS];
        xattr_encode(&mut b, 4, &attrs);
        assert_eq!(xattr_parse(&b, 4).unwrap(), attrs);
        assert!(xattr_parse(&b, 5).is_err());
        b[10] ^= 1;
        assert!(xattr_parse(&b, 4).is_err());
        assert!(xattr_fits(&[(b"n".to_vec(), vec![0; BS - 16])]));
        assert!(!xattr_fits(&[(b"n".to_vec(), vec![0; BS - 15])]));
    }

    #[test]
    fn superblock_versions() {
        let b = sb().encode();
        assert_eq!(Superblock::version_of(&b[..]), Some(VERSION));
        let mut old = b.clone();
        put_u32(&mut old[..], 8, 1);
        seal_block(&mut old[..], 0);
        assert!(Superblock::decode(&old[..]).unwrap_err().contains("older"));
        assert_eq!(Superblock::decode_any(&old[..]).unwrap().1, 1);
        put_u32(&mut old[..], 8, VERSION + 1);
        seal_block(&mut old[..], 0);
        assert!(Superblock::decode(&old[..]).unwrap_err().contains("newer"));
        assert!(Superblock::decode_any(&old[..]).is_err());
    }

    #[test]
    fn block_paths() {
        assert_eq!(block_path(0), Some(BlockPath::Direct(0)));
        assert_eq!(block_path(12), Some(BlockPath::Single(0)));
        assert_eq!(block_path(12 + 1023), Some(BlockPath::Single(1023)));
        assert_eq!(block_path(12 + 1024), Some(BlockPath::Double(0, 0)));
        assert_eq!(block_path(12 + 1024 + 1025), Some(BlockPath::Double(1, 1)));
        assert_eq!(block_path(MAX_FILE_BLOCKS), None);
    }

    #[test]
    fn directory_blocks() {
        let mut b = [0u8; BS];
        dir_first_block(&mut b, 5, 1);
        let e = dir_parse(&b, 5).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].name.as_slice(), e[0].ino), (&b"."[..], 5));
        assert_eq!((e[1].name.as_slice(), e[1].ino), (&b".."[..], 1));
        assert!(dir_parse(&b, 6).is_err(), "checksum seeded with the directory");
        assert!(
            dir_records_checked(&b, 6).is_err(),
            "checksum seeded with the directory"
        );
        let mut n = 0;
        let mut kept = dir_records_checked(&b, 5).unwrap();
        loop {
            let name = format!("file-{n:04}");
            if !dir_add(&mut b, &mut kept, 5, name.as_bytes(), 100 + n, FT_REG) {
                break;
            }
            // The records an add keeps are the block's parse.
            assert_eq!(kept, dir_records_checked(&b, 5).unwrap());
            n += 1;
        }
        assert_eq!(n as usize, (DIR_USABLE - 12 - 12) / dirent_size(9));
        // The records without their names are the entries with them.
        let named = dir_parse(&b, 5).unwrap();
        let e = dir_records_checked(&b, 5).unwrap();
        assert_eq!(named.len(), e.len());
        for (r, n) in e.iter().zip(&named) {
            assert_eq!((r.off, r.ino, r.rec_len, r.ftype), (n.off, n.ino, n.rec_len, n.ftype));
            assert_eq!(r.name(&b), &n.name[..]);
        }
        assert_eq!(e.iter().map(DirRecord::room).max(), Some(e.last().unwrap().room()));
        let mut e2 = e.clone();
        dir_remove(&mut b, &mut e2, 5, 5);
        assert_eq!(e2, dir_records_checked(&b, 5).unwrap());
        assert_eq!(e2.len(), e.len() - 1);
        assert!(dir_add(&mut b, &mut e2, 5, b"x", 9, FT_REG));
        assert_eq!(e2, dir_records_checked(&b, 5).unwrap());
        // Removing the first entry marks it unused.
        let mut c = [0u8; BS];
        dir_empty_block(&mut c, 8);
        let mut e = dir_records(&c).unwrap();
        assert!(dir_add(&mut c, &mut e, 8, b"a", 3, FT_REG));
        assert_eq!(e, dir_records(&c).unwrap());
        dir_remove(&mut c, &mut e, 0, 8);
        assert_eq!(e, dir_records(&c).unwrap());
        let e = dir_parse(&c, 8).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].ino, 0);
    }

    #[test]
    fn directory_parse_rejects_garbage() {
        let mut b = [0u8; BS];
        dir_empty_block(&mut b, 3);
        put_u16(&mut b, 4, 6);
        dir_seal(&mut b, 3);
        assert!(dir_parse(&b, 3).is_err());
        for seed in 0..200u32 {
            let mut g = [0u8; BS];
            let mut x = seed.wrapping_mul(2654435761) | 1;
            for v in g.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            let _ = dir_records(&g);
            let _ = dir_parse(&g, 1);
        }
    }
}
