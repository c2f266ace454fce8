//! The VINO file system.
//!
//! An FFS-like layout on a [`vino_blockdev::BlockDevice`] of 4 KiB blocks: cylinder groups, each
//! with a header, an inode bitmap, a block bitmap, an inode table and data blocks; inodes with
//! 12 direct pointers, one indirect and one double indirect; directories of variable-length
//! entries. Every metadata change goes through a write-ahead journal (physical block images,
//! redo only), so a crash at any instant leaves an image that mounts (replaying the journal) to
//! a consistent state; file data is not journaled, and a commit flushes it first (ordered mode).
//! See `layout` for the format, `journal` for the log, `meta` for transactions.
//!
//! Block placement is a graftpoint, `file.block_buddy` ([`placement`]): per file, graftable by
//! the file's creator; the default is FFS's, including its switch to another cylinder group at
//! the first indirect block, which the NoSwitch graft of the thesis removes.
//!
//! Besides regular files and directories it has the other POSIX file types (symlinks, fifos,
//! sockets, character and block devices), extended attributes (one block per inode),
//! preallocation ([`FileSystem::fallocate`]), punched holes and zeroed ranges ([`holes`]) and an on-disk orphan list (ext4's): an inode whose
//! last name goes while the kernel still has it open ([`FileSystem::unlink_keep`]) stays until
//! [`FileSystem::release_orphan`] or the next mount frees it. See `posix` for how they are kept.
//! Blocks and inodes are charged to their owner's uid: quotas per user and a reserve only root
//! may use ([`quota`], set by [`MountOptions::quota`]), kept in memory and recounted at mount.
//! The on-disk format is version [`VERSION`]; an image of an older version is refused until
//! [`upgrade`] (`vino fsck --upgrade`) brings it over.
//!
//! [`mkfs`] makes a file system, [`FileSystem::mount`] mounts one, [`fsck`](fn@fsck) checks and repairs
//! one. In the kernel, file data goes through the page cache, which this crate does not know:
//! the kernel finds a file's blocks with [`FileSystem::locate`], writes and resizes files with
//! [`FileSystem::write_with`] and [`FileSystem::set_size_with`], and registers a [`DataHook`]
//! so that a commit writes the cache's data first. In a write the file system decides which
//! blocks to allocate, which bytes become zeros and what a full disk does ([`write`](mod@write)); the
//! cache, as a [`WriteTarget`], only holds the bytes. Tests and tools use the uncached
//! [`FileSystem::read_at`] / [`FileSystem::write_at`], which follow the same rules straight to
//! the device.

#![forbid(unsafe_code)]

mod committer;
mod dirindex;
mod error;
mod filesystem;
pub mod fsck;
pub mod holes;
mod inspect;
pub mod journal;
pub mod layout;
pub mod meta;
mod mkfs;
#[cfg(feature = "model")]
pub mod model;
pub mod placement;
mod posix;
pub mod quota;
mod state;
mod streams;
pub mod write;

pub use error::{FsError, FsErrorKind, Result};
pub use filesystem::{Allocation, DataHook, FileSystem, FsStats, MountOptions, upgrade};
pub use fsck::{FsckReport, Problem, fsck};
pub use layout::{
    BS, CHUNK_BYTES, ChunkEntry, FileType, MAX_CODED, MAX_FILE_SIZE, MAX_NAME, MAX_SYMLINK, MAX_XATTR_NAME, ModuleId,
    NONCE_BYTES, ROOT_INO, VERSION,
};
pub use meta::MetaCounters;
pub use mkfs::{MkfsOptions, MkfsReport, mkfs};
pub use placement::{BlockBuddy, BuddyArgs, NoSwitch, Placement, ffs_policy, no_switch_policy};
pub use quota::{Actor, Quota, QuotaUsage, UNLIMITED, acting};
pub use state::{AllocCounters, DirEntry, FREE_SLICE, NewFile, RenameFlags, SetAttr, Stat, XattrSet};
pub use streams::{NewChunk, StoredChunk, StreamInode};
pub use write::{BlockWrite, WriteTarget};

/// True if this build checks the journal writer's invariants after every operation (debug builds, and
/// release builds with the `invariants` feature, which `cargo test` of the workspace turns on
/// for every binary it builds): correct, but too slow to measure.
pub const CHECKS_INVARIANTS: bool = cfg!(any(debug_assertions, feature = "invariants"));

// The crate's tests run with its invariant checks on, in release builds too: the dev-dependency
// on itself enables the `invariants` feature.
#[cfg(all(test, not(any(debug_assertions, feature = "invariants"))))]
compile_error!("the tests must be built with the `invariants` feature");
