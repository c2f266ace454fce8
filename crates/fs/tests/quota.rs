//! Disk quotas per uid and root's reserve: usage follows writes, truncation, unlink, chown,
//! fallocate, punched holes, zeroed ranges, xattrs and symlinks; limits fail with EDQUOT; the
//! reserve gives ENOSPC to users while root can still write; a remount recounts the same usage;
//! and random operations keep the usage equal to a count from the inode table.

mod common;

use common::*;
use proptest::prelude::*;
use std::sync::Arc;
use vino_blockdev::MemDevice;
use vino_fs::{
    BS, FileSystem, FsError, FsErrorKind, MountOptions, NewFile, Quota, QuotaUsage, SetAttr, UNLIMITED, XattrSet,
};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

fn owned(uid: u32) -> NewFile {
    NewFile {
        uid,
        gid: uid,
        ..NewFile::by(1)
    }
}

/// A small file system with no per-user quotas, only root's reserve of `percent`.
fn reserve_only(percent: u8) -> (Arc<MemDevice>, Arc<FileSystem>) {
    let dev = fresh(4096, &small_opts(1024));
    let quota = Quota {
        user_blocks: Some(UNLIMITED),
        user_inodes: Some(UNLIMITED),
        root_reserve_percent: percent,
        user_links: Some(UNLIMITED),
    };
    let fs = mount_with(&dev, &with_quota(quota));
    (dev, fs)
}

fn with_quota(quota: Quota) -> MountOptions {
    MountOptions {
        quota,
        ..MountOptions::default()
    }
}

fn blocks_of(fs: &FileSystem, uid: u32) -> u64 {
    fs.quota_usage(uid).blocks
}

/// Writes `len` bytes at 0 in one call; returns what the file system answered.
fn write(fs: &FileSystem, ino: u64, offset: u64, len: usize) -> vino_fs::Result<usize> {
    fs.write_at(ino, offset, &pattern(ino ^ offset, len))
}

#[test]
fn usage_follows_writes_truncation_unlink_and_chown() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount_with(&dev, &with_quota(Quota::none()));
    assert_eq!(
        fs.quota_usage(ALICE),
        QuotaUsage {
            blocks: 0,
            inodes: 0,
            block_limit: UNLIMITED,
            inode_limit: UNLIMITED,
            links: 0,
            link_limit: UNLIMITED,
        }
    );
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    assert_eq!(fs.quota_usage(ALICE).inodes, 1);
    // 20 blocks: 12 direct, 8 through the indirect block.
    write(&fs, a, 0, 20 * BS).unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 21);
    assert_eq!(fs.stat(a).unwrap().blocks, 21);
    fs.verify_quota().unwrap();
    fs.truncate(a, 5 * BS as u64).unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 5);
    fs.verify_quota().unwrap();

    let attrs = SetAttr {
        uid: Some(BOB),
        ..SetAttr::default()
    };
    fs.set_attr(a, &attrs).unwrap();
    assert_eq!(
        fs.quota_usage(ALICE),
        QuotaUsage {
            blocks: 0,
            inodes: 0,
            ..fs.quota_usage(ALICE)
        }
    );
    assert_eq!((blocks_of(&fs, BOB), fs.quota_usage(BOB).inodes), (5, 1));
    fs.verify_quota().unwrap();

    // Hard links share one charge; the last unlink releases it.
    fs.link(a, fs.root(), "a2").unwrap();
    fs.unlink(fs.root(), "a").unwrap();
    assert_eq!(fs.quota_usage(BOB).inodes, 1);
    fs.unlink(fs.root(), "a2").unwrap();
    assert_eq!(
        fs.quota_usage(BOB),
        QuotaUsage {
            blocks: 0,
            inodes: 0,
            ..fs.quota_usage(BOB)
        }
    );
    fs.verify_quota().unwrap();
}

#[test]
fn xattr_symlink_and_directory_blocks_are_charged() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount_with(&dev, &with_quota(Quota::none()));
    let d = fs.mkdir(fs.root(), "d", &owned(ALICE)).unwrap();
    assert_eq!((blocks_of(&fs, ALICE), fs.quota_usage(ALICE).inodes), (1, 1));
    let long = vec![b'x'; 300];
    fs.symlink(d, "l", &long, &owned(ALICE)).unwrap();
    assert_eq!((blocks_of(&fs, ALICE), fs.quota_usage(ALICE).inodes), (2, 2));
    fs.set_xattr(d, b"user.a", b"v", XattrSet::Any).unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 3);
    fs.remove_xattr(d, b"user.a").unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 2);
    fs.verify_quota().unwrap();
    fs.unlink(d, "l").unwrap();
    fs.rmdir(fs.root(), "d").unwrap();
    assert_eq!((blocks_of(&fs, ALICE), fs.quota_usage(ALICE).inodes), (0, 0));
}

#[test]
fn an_unlinked_open_file_stays_charged_until_released() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount_with(&dev, &with_quota(Quota::none()));
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    write(&fs, a, 0, 3 * BS).unwrap();
    fs.unlink_keep(fs.root(), "a").unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 3);
    fs.release_orphan(a).unwrap();
    assert_eq!((blocks_of(&fs, ALICE), fs.quota_usage(ALICE).inodes), (0, 0));
    fs.verify_quota().unwrap();
}

#[test]
fn a_remount_recounts_the_same_usage() {
    let dev = fresh(4096, &small_opts(1024));
    let opts = with_quota(Quota::none());
    let fs = mount_with(&dev, &opts);
    for (n, uid) in [(1, ALICE), (2, BOB), (3, ALICE), (4, 0)] {
        let f = fs.create(fs.root(), format!("f{n}"), &owned(uid)).unwrap();
        write(&fs, f, 0, n * 5 * BS).unwrap();
    }
    let kept = fs.create(fs.root(), "orphan", &owned(BOB)).unwrap();
    write(&fs, kept, 0, 2 * BS).unwrap();
    fs.unlink_keep(fs.root(), "orphan").unwrap();
    let before = fs.quota_report();
    fs.unmount().unwrap();
    let fs = mount_with(&dev, &opts);
    // The orphan is freed at mount: BOB loses it.
    let mut want = before.clone();
    for (uid, u) in &mut want {
        if *uid == BOB {
            u.blocks -= 2;
            u.inodes -= 1;
        }
    }
    assert_eq!(fs.quota_report(), want);
    fs.verify_quota().unwrap();
    // A crash (no unmount) after a commit recounts the same too.
    let f = fs.create(fs.root(), "late", &owned(ALICE)).unwrap();
    write(&fs, f, 0, 7 * BS).unwrap();
    fs.commit().unwrap();
    let report = fs.quota_report();
    drop(fs);
    let fs = mount_with(&dev, &opts);
    assert_eq!(fs.quota_report(), report);
    assert_clean(&*dev, "after the remounts");
}

#[test]
fn a_user_over_its_block_quota_gets_edquot_and_a_short_write() {
    let dev = fresh(4096, &small_opts(1024));
    let quota = Quota {
        user_blocks: Some(10),
        user_inodes: Some(3),
        root_reserve_percent: 0,
        user_links: None,
    };
    let fs = mount_with(&dev, &with_quota(quota));
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    // 10 blocks: 10 direct ones fit, the rest is cut short.
    assert_eq!(write(&fs, a, 0, 16 * BS).unwrap(), 10 * BS);
    let e = write(&fs, a, 10 * BS as u64, BS).unwrap_err();
    assert_eq!(e.kind(), FsErrorKind::QuotaExceeded);
    assert_eq!(e.errno(), 122);
    assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::QuotaExceeded);
    assert_eq!(fs.stat(a).unwrap().size, 10 * BS as u64);
    assert_eq!(blocks_of(&fs, ALICE), 10);
    // Another user, and root, still write.
    let b = fs.create(fs.root(), "b", &owned(BOB)).unwrap();
    assert_eq!(write(&fs, b, 0, 4 * BS).unwrap(), 4 * BS);
    let r = fs.create(fs.root(), "r", &owned(0)).unwrap();
    assert_eq!(write(&fs, r, 0, 40 * BS).unwrap(), 40 * BS);
    // Freeing makes room again.
    fs.truncate(a, 0).unwrap();
    assert_eq!(write(&fs, a, 0, BS).unwrap(), BS);
    // Inodes: 3 each.
    fs.create(fs.root(), "a2", &owned(ALICE)).unwrap();
    fs.mkdir(fs.root(), "a3", &owned(ALICE)).unwrap();
    let e = fs.create(fs.root(), "a4", &owned(ALICE)).unwrap_err();
    assert!(matches!(e, FsError::QuotaExceeded), "{e}");
    assert!(matches!(fs.lookup(fs.root(), "a4"), Err(FsError::NotFound(_))));
    fs.verify_quota().unwrap();
    assert_clean(&*dev, "after the quota errors");
}

#[test]
fn fallocate_over_the_quota_is_refused_whole() {
    let dev = fresh(4096, &small_opts(1024));
    let quota = Quota {
        user_blocks: Some(30),
        ..Quota::none()
    };
    let fs = mount_with(&dev, &with_quota(quota));
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    let e = fs.fallocate(a, 0, 40 * BS as u64, false).unwrap_err();
    assert!(matches!(e, FsError::QuotaExceeded), "{e}");
    assert_eq!((blocks_of(&fs, ALICE), fs.stat(a).unwrap().size), (0, 0));
    fs.fallocate(a, 0, 20 * BS as u64, false).unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 21);
    fs.verify_quota().unwrap();
}

#[test]
fn chown_charges_the_new_owner_and_may_fail_with_edquot() {
    let dev = fresh(4096, &small_opts(1024));
    let quota = Quota {
        user_blocks: Some(10),
        ..Quota::none()
    };
    let fs = mount_with(&dev, &with_quota(quota));
    let r = fs.create(fs.root(), "r", &owned(0)).unwrap();
    write(&fs, r, 0, 12 * BS).unwrap();
    let to_alice = SetAttr {
        uid: Some(ALICE),
        mode: Some(0o600),
        ..SetAttr::default()
    };
    let e = fs.set_attr(r, &to_alice).unwrap_err();
    assert!(matches!(e, FsError::QuotaExceeded), "{e}");
    let st = fs.stat(r).unwrap();
    assert_eq!((st.uid, st.mode & 0o777), (0, 0o644), "a refused chown changes nothing");
    assert_eq!(blocks_of(&fs, ALICE), 0);
    // A privileged caller may put a user over its quota; the user then cannot allocate.
    let forced = SetAttr {
        ignore_quota: true,
        ..to_alice
    };
    fs.set_attr(r, &forced).unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 12);
    let e = write(&fs, r, 12 * BS as u64, 1).unwrap_err();
    assert!(matches!(e, FsError::QuotaExceeded), "{e}");
    // Giving it back to root needs no room.
    let to_root = SetAttr {
        uid: Some(0),
        ..SetAttr::default()
    };
    fs.set_attr(r, &to_root).unwrap();
    assert_eq!(blocks_of(&fs, ALICE), 0);
    fs.verify_quota().unwrap();
}

/// Writes to `ino` block by block until the file system refuses; returns the error.
fn fill(fs: &FileSystem, ino: u64) -> FsError {
    let mut off = fs.stat(ino).unwrap().size;
    loop {
        match write(fs, ino, off, 64 * BS) {
            Ok(n) => off += n as u64,
            Err(e) => return e,
        }
    }
}

#[test]
fn the_reserve_leaves_users_enospc_while_root_still_writes() {
    let (dev, fs) = reserve_only(10);
    let stats = fs.stats();
    assert!(stats.reserved_blocks > 0);
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    let e = fill(&fs, a);
    assert_eq!(e.kind(), FsErrorKind::NoSpace, "{e}");
    assert_eq!(e.errno(), 28);
    let free = fs.stats().free_blocks;
    assert!(
        free >= stats.reserved_blocks,
        "{free} free, {} reserved",
        stats.reserved_blocks
    );
    assert!(
        free <= stats.reserved_blocks + 2,
        "{free} free, {} reserved",
        stats.reserved_blocks
    );
    let b = fs.create(fs.root(), "b", &owned(BOB)).unwrap();
    assert_eq!(write(&fs, b, 0, BS).unwrap_err().kind(), FsErrorKind::NoSpace);
    // Root writes into the reserve, to the last block.
    let r = fs.create(fs.root(), "r", &owned(0)).unwrap();
    assert_eq!(write(&fs, r, 0, 4 * BS).unwrap(), 4 * BS);
    assert_eq!(fill(&fs, r).kind(), FsErrorKind::NoSpace);
    fs.sync().unwrap();
    assert_eq!(fs.stats().free_blocks, 0);
    fs.verify_quota().unwrap();
    assert_clean(&*dev, "after filling the disk");
}

#[test]
fn a_refusal_for_the_reserve_does_not_force_a_checkpoint() {
    let (_dev, fs) = reserve_only(10);
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    assert_eq!(fill(&fs, a).kind(), FsErrorKind::NoSpace);
    // Root takes a block of the reserve and frees it: it waits for a checkpoint, counted free.
    let r = fs.create(fs.root(), "r", &owned(0)).unwrap();
    write(&fs, r, 0, BS).unwrap();
    fs.commit().unwrap();
    fs.unlink(fs.root(), "r").unwrap();
    let before = fs.stats().meta;
    let end = fs.stat(a).unwrap().size;
    assert_eq!(end % BS as u64, 0);
    for _ in 0..5 {
        assert_eq!(write(&fs, a, end, BS).unwrap_err().kind(), FsErrorKind::NoSpace);
    }
    let after = fs.stats().meta;
    assert_eq!((after.commits, after.checkpoints), (before.commits, before.checkpoints));
}

#[test]
fn the_inode_reserve_is_roots() {
    let (_dev, fs) = reserve_only(25);
    let reserve = fs.stats().reserved_inodes;
    let mut n = 0;
    let e = loop {
        match fs.create(fs.root(), format!("f{n}"), &owned(ALICE)) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(e, FsError::NoInodes), "{e}");
    assert_eq!(fs.stats().free_inodes, reserve);
    fs.create(fs.root(), "root", &owned(0)).unwrap();
    assert_eq!(fs.quota_usage(ALICE).inodes, n);
}

#[test]
fn default_limits_are_half_of_the_unreserved_space() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount_with(&dev, &MountOptions::default());
    let s = fs.stats();
    // Metadata is what is neither free nor charged on a fresh file system.
    let metadata = s.block_count - s.free_blocks - fs.quota_usage(0).blocks;
    let data = s.block_count - metadata;
    assert_eq!(s.reserved_blocks, data * 5 / 100);
    assert_eq!(s.user_block_limit, (data - s.reserved_blocks) / 2);
    assert_eq!(s.reserved_inodes, s.inodes * 5 / 100);
    assert_eq!(s.user_inode_limit, (s.inodes - s.reserved_inodes) / 2);
    // One user cannot take more than its half.
    let a = fs.create(fs.root(), "a", &owned(ALICE)).unwrap();
    assert_eq!(fill(&fs, a).kind(), FsErrorKind::QuotaExceeded);
    assert_eq!(blocks_of(&fs, ALICE), s.user_block_limit);
    let b = fs.create(fs.root(), "b", &owned(BOB)).unwrap();
    assert_eq!(write(&fs, b, 0, 8 * BS).unwrap(), 8 * BS);
}

#[test]
fn a_reserve_over_half_is_refused_at_mount() {
    let dev = fresh(4096, &small_opts(1024));
    let quota = Quota {
        root_reserve_percent: 60,
        ..Quota::default()
    };
    let d: Arc<dyn vino_blockdev::BlockDevice> = dev.clone();
    let e = FileSystem::mount(d, runtime(), &with_quota(quota))
        .err()
        .expect("refused");
    assert_eq!(e.kind(), FsErrorKind::InvalidArgument);
}

// ---- random operations against a recount -------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Create(u8, u32),
    Mkdir(u8, u32),
    Write(u8, u64, usize),
    Truncate(u8, u64),
    Fallocate(u8, u64, u64),
    /// A punched hole (true) or a zeroed range growing the file (false).
    Clear(u8, u64, u64, bool),
    Unlink(u8),
    UnlinkKeep(u8),
    Chown(u8, u32),
    Xattr(u8, bool),
    Symlink(u8, u32),
    Link(u8, u8),
    Rename(u8, u8),
    Remount,
}

fn uid() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0, ALICE, BOB])
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0u8..6;
    prop_oneof![
        3 => (n.clone(), uid()).prop_map(|(n, u)| Op::Create(n, u)),
        1 => (n.clone(), uid()).prop_map(|(n, u)| Op::Mkdir(n, u)),
        6 => (n.clone(), 0u64..400, 1usize..60).prop_map(|(n, b, l)| Op::Write(n, b, l)),
        2 => (n.clone(), 0u64..300).prop_map(|(n, b)| Op::Truncate(n, b)),
        1 => (n.clone(), 0u64..300, 1u64..40).prop_map(|(n, b, l)| Op::Fallocate(n, b, l)),
        1 => (n.clone(), 0u64..300, 1u64..300, any::<bool>()).prop_map(|(n, b, l, p)| Op::Clear(n, b, l, p)),
        2 => n.clone().prop_map(Op::Unlink),
        1 => n.clone().prop_map(Op::UnlinkKeep),
        2 => (n.clone(), uid()).prop_map(|(n, u)| Op::Chown(n, u)),
        1 => (n.clone(), any::<bool>()).prop_map(|(n, s)| Op::Xattr(n, s)),
        1 => (n.clone(), uid()).prop_map(|(n, u)| Op::Symlink(n, u)),
        2 => (n.clone(), n.clone()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (n.clone(), n.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => Just(Op::Remount),
    ]
}

/// Runs one operation; errors (full, over quota, wrong type, missing) are answers, not
/// failures: what matters is the accounting afterwards.
fn run(fs: &FileSystem, op: &Op) {
    let root = fs.root();
    let name = |n: &u8| format!("n{n}");
    let ino = |n: &u8| fs.lookup(root, name(n)).ok();
    let _ = match op {
        Op::Create(n, u) => fs.create(root, name(n), &owned(*u)).map(drop),
        Op::Mkdir(n, u) => fs.mkdir(root, name(n), &owned(*u)).map(drop),
        Op::Symlink(n, u) => fs.symlink(root, name(n), &[b'y'; 200], &owned(*u)).map(drop),
        Op::Write(n, b, l) => match ino(n) {
            Some(i) => fs.write_at(i, b * BS as u64, &vec![7u8; l * BS]).map(drop),
            None => Ok(()),
        },
        Op::Truncate(n, b) => ino(n).map_or(Ok(()), |i| fs.truncate(i, b * BS as u64)),
        Op::Fallocate(n, b, l) => ino(n).map_or(Ok(()), |i| fs.fallocate(i, b * BS as u64, l * BS as u64, false)),
        Op::Clear(n, b, l, punch) => ino(n).map_or(Ok(()), |i| {
            let (offset, len) = (b * BS as u64 + 100, l * BS as u64);
            if *punch {
                fs.punch_hole(i, offset, len)
            } else {
                fs.zero_range(i, offset, len, false)
            }
        }),
        Op::Unlink(n) => fs.unlink(root, name(n)).or_else(|_| fs.rmdir(root, name(n))),
        Op::UnlinkKeep(n) => match ino(n) {
            // The kernel would release it on close: here at once, or never (until a mount).
            Some(i) => fs
                .unlink_keep(root, name(n))
                .and_then(|()| if i % 2 == 0 { fs.release_orphan(i) } else { Ok(()) }),
            None => Ok(()),
        },
        Op::Chown(n, u) => ino(n).map_or(Ok(()), |i| {
            let a = SetAttr {
                uid: Some(*u),
                ..SetAttr::default()
            };
            fs.set_attr(i, &a).map(drop)
        }),
        Op::Xattr(n, set) => ino(n).map_or(Ok(()), |i| {
            if *set {
                fs.set_xattr(i, b"user.q", &[1; 100], XattrSet::Any)
            } else {
                fs.remove_xattr(i, b"user.q")
            }
        }),
        Op::Link(a, b) => ino(a).map_or(Ok(()), |i| fs.link(i, root, name(b))),
        Op::Rename(a, b) => fs.rename(root, name(a), root, name(b)),
        Op::Remount => unreachable!("handled by the caller"),
    };
}

fn check_limits(fs: &FileSystem) {
    for (uid, u) in fs.quota_report() {
        if uid != 0 {
            assert!(u.blocks <= u.block_limit, "uid {uid}: {u:?}");
            assert!(u.inodes <= u.inode_limit, "uid {uid}: {u:?}");
            assert!(u.links <= u.link_limit, "uid {uid}: {u:?}");
        }
    }
}

fn remount(dev: &Arc<MemDevice>, fs: Arc<FileSystem>, opts: &MountOptions) -> Arc<FileSystem> {
    let orphans = fs.orphans().unwrap();
    let mut want = fs.quota_report();
    for ino in orphans {
        let st = fs.stat(ino).unwrap();
        let (_, u) = want.iter_mut().find(|(u, _)| *u == st.uid).unwrap();
        u.blocks -= st.blocks;
        u.inodes -= 1;
    }
    want.retain(|(_, u)| u.blocks + u.inodes > 0);
    fs.unmount().unwrap();
    let fs = mount_with(dev, opts);
    assert_eq!(fs.quota_report(), want, "the remount recounts what was kept");
    fs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, max_shrink_iters: 500, ..ProptestConfig::default() })]

    #[test]
    fn usage_matches_a_recount_after_random_operations(ops in prop::collection::vec(op(), 1..50)) {
        let dev = fresh(2048, &small_opts(512));
        let opts = with_quota(Quota { user_blocks: Some(300), user_inodes: Some(4), root_reserve_percent: 20, user_links: Some(3) });
        let mut fs = mount_with(&dev, &opts);
        for op in &ops {
            if matches!(op, Op::Remount) {
                fs = remount(&dev, fs, &opts);
                continue;
            }
            run(&fs, op);
            fs.verify_quota().unwrap();
            check_limits(&fs);
        }
        fs.unmount().unwrap();
        assert_clean(&*dev, "after the random operations");
    }
}

// ---- names in others' directories ----------------------------------------------------------

#[test]
fn links_beyond_the_limit_get_edquot_and_are_counted_again_at_mount() {
    let dev = fresh(4096, &small_opts(1024));
    let opts = with_quota(Quota {
        user_links: Some(20),
        ..Quota::none()
    });
    let fs = mount_with(&dev, &opts);
    let tmp = fs
        .mkdir(
            fs.root(),
            "tmp",
            &NewFile {
                mode: 0o1777,
                ..owned(0)
            },
        )
        .unwrap();
    let f = fs.create(tmp, "f", &owned(ALICE)).unwrap();
    let long = |k: usize| format!("{k:0>250}");
    for k in 0..20 {
        fs.link(f, tmp, long(k)).unwrap();
    }
    let e = fs.link(f, tmp, long(20)).unwrap_err();
    assert!(matches!(e, FsError::QuotaExceeded), "{e}");
    assert_eq!(fs.quota_usage(ALICE).links, 20);
    // Root's links are not limited; a freed name is room for another.
    let r = fs.create(tmp, "r", &owned(0)).unwrap();
    fs.link(r, tmp, long(99)).unwrap();
    fs.unlink(tmp, long(3)).unwrap();
    fs.link(f, tmp, long(3)).unwrap();
    fs.verify_quota().unwrap();
    // A chown moves the names with the file.
    fs.set_attr(
        f,
        &SetAttr {
            uid: Some(BOB),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!((fs.quota_usage(ALICE).links, fs.quota_usage(BOB).links), (0, 20));
    fs.verify_quota().unwrap();
    fs.unmount().unwrap();
    let fs = mount_with(&dev, &opts);
    assert_eq!(fs.quota_usage(BOB).links, 20);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after the links");
}

#[test]
fn a_user_growing_roots_directory_is_held_to_the_reserve() {
    let (dev, fs) = reserve_only(20);
    let tmp = fs
        .mkdir(
            fs.root(),
            "tmp",
            &NewFile {
                mode: 0o1777,
                ..owned(0)
            },
        )
        .unwrap();
    let f = fs.create(tmp, "f", &owned(ALICE)).unwrap();
    let user = vino_fs::Actor { privileged: false };
    let mut k = 0;
    let e = loop {
        match vino_fs::acting(user, || fs.link(f, tmp, format!("{k:0>250}"))) {
            Ok(()) => k += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(e, FsError::NoSpace), "{e}");
    assert!(k > 100, "only {k} names");
    // The reserve is left: root still makes names and writes there.
    fs.link(f, tmp, format!("{k:0>250}")).unwrap();
    let r = fs.create(tmp, "r", &owned(0)).unwrap();
    assert_eq!(write(&fs, r, 0, 8 * BS).unwrap(), 8 * BS);
    fs.verify_quota().unwrap();
    fs.unmount().unwrap();
    assert_clean(&*dev, "after the reserve");
}
