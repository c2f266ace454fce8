//! POSIX file types, symlinks, extended attributes, fallocate, the orphan list, rename flags,
//! timestamps and the format version.

mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::layout::{BS, INLINE_SYMLINK, SB_BACKUP, SB_PRIMARY, Superblock};
use vino_fs::{
    FileSystem, FileType, FsError, FsErrorKind, MountOptions, NewFile, RenameFlags, SetAttr, XattrSet, fsck, upgrade,
};

fn nf() -> NewFile {
    NewFile::by(7)
}

fn kind<T: std::fmt::Debug>(r: vino_fs::Result<T>) -> FsErrorKind {
    r.expect_err("an error").kind()
}

fn errno<T: std::fmt::Debug>(r: vino_fs::Result<T>) -> i32 {
    r.expect_err("an error").errno()
}

fn mount_err(dev: &Arc<MemDevice>) -> FsError {
    let d: Arc<dyn BlockDevice> = dev.clone();
    match FileSystem::mount(d, runtime(), &MountOptions::default()) {
        Ok(_) => panic!("mounted"),
        Err(e) => e,
    }
}

fn tick() {
    std::thread::sleep(Duration::from_millis(2));
}

fn dev() -> Arc<MemDevice> {
    fresh(4096, &small_opts(1024))
}

fn free(fs: &FileSystem) -> (u64, u64) {
    let s = fs.stats();
    (s.free_blocks, s.free_inodes)
}

#[test]
fn symlinks_fast_and_slow() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let before = free(&fs);
    let short = b"../some/where";
    let s = fs.symlink(root, "s", short, &nf()).unwrap();
    assert_eq!(fs.readlink(s).unwrap(), short);
    let st = fs.stat(s).unwrap();
    assert_eq!(st.kind, FileType::Symlink);
    assert_eq!(st.mode, 0o120777);
    assert_eq!(st.size, short.len() as u64);
    assert_eq!(st.blocks, 0, "a short target lives in the inode");
    let edge = vec![b'e'; INLINE_SYMLINK];
    let e = fs.symlink(root, "edge", &edge, &nf()).unwrap();
    assert_eq!(fs.readlink(e).unwrap(), edge);
    let long: Vec<u8> = (0..4095).map(|i| b'a' + (i % 26) as u8).collect();
    let l = fs.symlink(root, "long", &long, &nf()).unwrap();
    assert_eq!(fs.readlink(l).unwrap(), long);
    assert_eq!(fs.stat(l).unwrap().blocks, 1);
    let over = vec![b'x'; INLINE_SYMLINK + 1];
    let o = fs.symlink(root, "over", &over, &nf()).unwrap();
    assert_eq!(fs.readlink(o).unwrap(), over);
    let kinds: Vec<_> = fs
        .readdir(root)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(kinds.contains(&(b"long".to_vec(), FileType::Symlink)));

    assert_eq!(errno(fs.symlink(root, "bad", b"", &nf())), 22);
    assert_eq!(errno(fs.symlink(root, "bad", b"a\0b", &nf())), 22);
    assert_eq!(errno(fs.symlink(root, "bad", &vec![b'a'; 4096], &nf())), 36);
    assert_eq!(kind(fs.symlink(root, "s", b"x", &nf())), FsErrorKind::Exists);
    let f = fs.create(root, "f", &nf()).unwrap();
    assert_eq!(errno(fs.readlink(f)), 22);
    assert_eq!(errno(fs.readlink(root)), 22);
    assert_eq!(errno(fs.write_at(l, 0, b"x")), 22);
    assert_eq!(errno(fs.set_size(l, 0)), 22);
    assert_eq!(errno(fs.read_at(l, 0, &mut [0u8; 8])), 22);
    // set_attr on a symlink changes nothing of its mode's type.
    fs.set_attr(
        l,
        &SetAttr {
            uid: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.stat(l).unwrap().uid, 5);
    assert_eq!(fs.stat(l).unwrap().kind, FileType::Symlink);
    fs.sync().unwrap();
    assert_clean(&*dev, "with symlinks");
    for n in ["s", "edge", "long", "over", "f"] {
        fs.unlink(root, n).unwrap();
    }
    assert_eq!(free(&fs), before);
    fs.unmount().unwrap();
    assert_clean(&*dev, "symlinks removed");
    // Targets survive a remount.
    let fs = mount(&dev);
    let l = fs.symlink(root, "long", &long, &nf()).unwrap();
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(fs.readlink(l).unwrap(), long);
}

#[test]
fn special_files() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let mut a = nf();
    a.mode = 0o640;
    let fifo = fs.mknod(root, "fifo", FileType::Fifo, 99, &a).unwrap();
    let sock = fs.mknod(root, "sock", FileType::Socket, 0, &a).unwrap();
    let chr = fs.mknod(root, "null", FileType::CharDevice, (1 << 8) | 3, &a).unwrap();
    let blk = fs.mknod(root, "sda", FileType::BlockDevice, (8 << 8) | 1, &a).unwrap();
    let reg = fs.mknod(root, "reg", FileType::Regular, 0, &a).unwrap();
    assert_eq!(errno(fs.mknod(root, "d", FileType::Directory, 0, &a)), 22);
    assert_eq!(errno(fs.mknod(root, "l", FileType::Symlink, 0, &a)), 22);
    assert_eq!(errno(fs.mknod(root, "fifo", FileType::Fifo, 0, &a)), 17);
    for (ino, k, mode, rdev) in [
        (fifo, FileType::Fifo, 0o010640, 0),
        (sock, FileType::Socket, 0o140640, 0),
        (chr, FileType::CharDevice, 0o020640, 0x103),
        (blk, FileType::BlockDevice, 0o060640, 0x801),
        (reg, FileType::Regular, 0o100640, 0),
    ] {
        let st = fs.stat(ino).unwrap();
        assert_eq!((st.kind, st.mode, st.rdev, st.size, st.nlink), (k, mode, rdev, 0, 1));
    }
    let kinds: Vec<_> = fs.readdir(root).unwrap().into_iter().map(|e| e.kind).collect();
    for k in [
        FileType::Fifo,
        FileType::Socket,
        FileType::CharDevice,
        FileType::BlockDevice,
        FileType::Regular,
    ] {
        assert!(kinds.contains(&k), "{k:?} in readdir");
    }
    assert_eq!(errno(fs.write_at(fifo, 0, b"x")), 22);
    assert_eq!(errno(fs.read_at(chr, 0, &mut [0u8; 4])), 22);
    assert_eq!(errno(fs.fallocate(sock, 0, 10, false)), 22);
    // Hard links of every non-directory type.
    let sub = fs.mkdir(root, "sub", &nf()).unwrap();
    for (ino, n) in [(fifo, "f2"), (sock, "s2"), (chr, "c2"), (blk, "b2")] {
        fs.link(ino, sub, n).unwrap();
        assert_eq!(fs.stat(ino).unwrap().nlink, 2);
    }
    let s = fs.symlink(root, "sym", b"target", &nf()).unwrap();
    fs.link(s, sub, "sym2").unwrap();
    assert_eq!(fs.readlink(fs.lookup(sub, "sym2").unwrap()).unwrap(), b"target");
    assert_eq!(kind(fs.link(sub, root, "dirlink")), FsErrorKind::IsADirectory);
    let kinds: Vec<_> = fs.readdir(sub).unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
    assert!(kinds.contains(&(b"c2".to_vec(), FileType::CharDevice)));
    assert!(kinds.contains(&(b"sym2".to_vec(), FileType::Symlink)));
    fs.unlink(root, "fifo").unwrap();
    assert_eq!(fs.stat(fifo).unwrap().nlink, 1);
    fs.unlink(sub, "f2").unwrap();
    assert_eq!(kind(fs.stat(fifo)), FsErrorKind::NotFound);
    fs.set_attr(
        chr,
        &SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.stat(chr).unwrap().mode, 0o020600);
    fs.unmount().unwrap();
    assert_clean(&*dev, "special files");
    let fs = mount(&dev);
    assert_eq!(fs.stat(blk).unwrap().rdev, 0x801);
}

#[test]
fn extended_attributes() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let before = free(&fs);
    let f = fs.create(root, "f", &nf()).unwrap();
    assert_eq!(fs.list_xattr(f).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(errno(fs.get_xattr(f, b"user.a")), 61);
    assert_eq!(errno(fs.remove_xattr(f, b"user.a")), 61);
    assert_eq!(errno(fs.set_xattr(f, b"user.a", b"1", XattrSet::Replace)), 61);
    let c0 = fs.stat(f).unwrap().ctime_ns;
    tick();
    fs.set_xattr(f, b"user.b", b"two", XattrSet::Create).unwrap();
    assert!(fs.stat(f).unwrap().ctime_ns > c0, "set changes ctime");
    fs.set_xattr(f, b"user.a", b"", XattrSet::Any).unwrap();
    fs.set_xattr(f, b"trusted.x", &[0, 1, 2], XattrSet::Any).unwrap();
    assert_eq!(fs.stat(f).unwrap().blocks, 1, "the xattr block counts");
    assert_eq!(errno(fs.set_xattr(f, b"user.b", b"x", XattrSet::Create)), 17);
    fs.set_xattr(f, b"user.b", b"three", XattrSet::Replace).unwrap();
    assert_eq!(fs.get_xattr(f, b"user.b").unwrap(), b"three");
    assert_eq!(fs.get_xattr(f, b"user.a").unwrap(), b"");
    assert_eq!(
        fs.list_xattr(f).unwrap(),
        vec![b"trusted.x".to_vec(), b"user.a".to_vec(), b"user.b".to_vec()]
    );
    assert_eq!(errno(fs.set_xattr(f, b"", b"x", XattrSet::Any)), 34);
    assert_eq!(errno(fs.set_xattr(f, &[b'n'; 256], b"x", XattrSet::Any)), 34);
    fs.set_xattr(f, &[b'n'; 255], b"x", XattrSet::Any).unwrap();
    assert_eq!(errno(fs.get_xattr(f, &[b'n'; 256])), 34);
    // One block: a value that does not fit is ENOSPC and changes nothing.
    assert_eq!(errno(fs.set_xattr(f, b"user.big", &[7u8; BS], XattrSet::Any)), 28);
    assert_eq!(errno(fs.get_xattr(f, b"user.big")), 61);
    let mut n = 0;
    loop {
        match fs.set_xattr(f, format!("user.fill{n}").as_bytes(), &[1u8; 100], XattrSet::Any) {
            Ok(()) => n += 1,
            Err(e) => {
                assert_eq!(e.errno(), 28);
                break;
            }
        }
    }
    assert!(n > 30, "{n} attributes of 100 bytes in a block");
    fs.remove_xattr(f, b"user.a").unwrap();
    assert_eq!(errno(fs.get_xattr(f, b"user.a")), 61);
    // Attributes of directories, symlinks and fifos.
    let d = fs.mkdir(root, "d", &nf()).unwrap();
    let s = fs.symlink(root, "s", b"f", &nf()).unwrap();
    let p = fs.mknod(root, "p", FileType::Fifo, 0, &nf()).unwrap();
    for ino in [d, s, p] {
        fs.set_xattr(ino, b"security.selinux", b"ctx", XattrSet::Any).unwrap();
        assert_eq!(fs.get_xattr(ino, b"security.selinux").unwrap(), b"ctx");
    }
    fs.sync().unwrap();
    assert_clean(&*dev, "with xattrs");
    // Removing the last attribute frees the block.
    fs.remove_xattr(p, b"security.selinux").unwrap();
    assert_eq!(fs.stat(p).unwrap().blocks, 0);
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(fs.get_xattr(f, b"user.b").unwrap(), b"three");
    // Freed with the inode.
    for n in ["f", "s", "p"] {
        fs.unlink(root, n).unwrap();
    }
    fs.rmdir(root, "d").unwrap();
    assert_eq!(free(&fs), before);
    fs.unmount().unwrap();
    assert_clean(&*dev, "xattrs freed");
}

#[test]
fn fallocate_reserves_zeroed_blocks() {
    let dev = fresh(1024, &small_opts(1024));
    let fs = mount(&dev);
    let root = fs.root();
    // Stale bytes on the free blocks: preallocated blocks must read as zeros anyway.
    let junk = fs.create(root, "junk", &nf()).unwrap();
    fs.write_at(junk, 0, &vec![0xAB; 64 * BS]).unwrap();
    fs.sync().unwrap();
    fs.unlink(root, "junk").unwrap();
    fs.sync().unwrap();

    let f = fs.create(root, "f", &nf()).unwrap();
    fs.write_at(f, 0, b"hello").unwrap();
    let m0 = fs.stat(f).unwrap().mtime_ns;
    tick();
    fs.fallocate(f, 0, 40 * BS as u64, true).unwrap();
    let st = fs.stat(f).unwrap();
    assert_eq!(st.size, 5, "keep_size");
    assert!(st.blocks >= 40);
    assert_eq!(st.mtime_ns, m0, "no size change, no mtime change");
    tick();
    fs.fallocate(f, 10, 50 * BS as u64, false).unwrap();
    let st = fs.stat(f).unwrap();
    assert_eq!(st.size, 10 + 50 * BS as u64);
    assert!(st.mtime_ns > m0 && st.ctime_ns > m0);
    let mut buf = vec![0xFFu8; st.size as usize];
    fs.read_at(f, 0, &mut buf).unwrap();
    assert_eq!(&buf[..5], b"hello");
    assert!(buf[5..].iter().all(|&b| b == 0), "preallocated bytes read as zeros");
    // A range already allocated changes nothing.
    let blocks = fs.stat(f).unwrap().blocks;
    fs.fallocate(f, 0, BS as u64, false).unwrap();
    assert_eq!(fs.stat(f).unwrap().blocks, blocks);
    // Errors.
    assert_eq!(errno(fs.fallocate(f, 0, 0, false)), 22);
    assert_eq!(errno(fs.fallocate(f, vino_fs::MAX_FILE_SIZE, 1, false)), 27);
    assert_eq!(errno(fs.fallocate(f, u64::MAX - 1, 10, false)), 27);
    assert_eq!(errno(fs.fallocate(root, 0, 10, false)), 21);
    // ENOSPC: the file is as it was.
    let g = fs.create(root, "g", &nf()).unwrap();
    fs.write_at(g, 0, b"abc").unwrap();
    let (fb, _) = free(&fs);
    let before = fs.stat(g).unwrap();
    assert_eq!(errno(fs.fallocate(g, 0, (fb + 10) * BS as u64, false)), 28);
    let after = fs.stat(g).unwrap();
    assert_eq!((after.size, after.blocks), (before.size, before.blocks));
    assert_eq!(free(&fs).0, fb);
    // Preallocated space is kept for its file: fill the disk, then write in the range.
    let h = fs.create(root, "h", &nf()).unwrap();
    fs.fallocate(h, 0, 8 * BS as u64, true).unwrap();
    let filler = fs.create(root, "filler", &nf()).unwrap();
    let mut off = 0u64;
    while let Ok(n) = fs.write_at(filler, off, &[1u8; BS]) {
        off += n as u64;
    }
    assert_eq!(fs.write_at(h, 0, &vec![9u8; 8 * BS]).unwrap(), 8 * BS);
    fs.sync().unwrap();
    assert_clean(&*dev, "after fallocate");
    fs.unmount().unwrap();
    assert_clean(&*dev, "after fallocate, unmounted");
}

/// Many orphans taken off the list in an order of their own (as Linux forgets what `rm -rf`
/// unlinked): after each release the list holds exactly the others, in order, and at the end
/// every block and inode is free again and the image is clean.
#[test]
fn orphans_released_in_any_order_leave_the_list_whole() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let before = free(&fs);
    let mut list = Vec::new();
    for i in 0..120u64 {
        let name = format!("o{i}");
        let ino = fs.create(root, &name, &nf()).unwrap();
        fs.write_at(ino, 0, &pattern(i, BS)).unwrap();
        fs.unlink_keep(root, &name).unwrap();
        list.insert(0, ino);
    }
    assert_eq!(fs.orphans().unwrap(), list);
    // Oldest first for a while (the end of the list), then a seeded scramble.
    let mut order: Vec<u64> = list.iter().rev().copied().collect();
    let mut x = 0x9e37_79b9_u64;
    for i in (40..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = 40 + (x as usize) % (i - 39);
        order.swap(i, j);
    }
    for (n, ino) in order.iter().enumerate() {
        fs.release_orphan(*ino).unwrap();
        list.retain(|o| o != ino);
        if n % 7 == 0 || list.len() < 5 {
            assert_eq!(fs.orphans().unwrap(), list, "after releasing {ino}");
        }
        assert_eq!(errno(fs.release_orphan(*ino)), 22, "released twice");
    }
    assert_eq!(free(&fs), before);
    fs.sync().unwrap();
    assert_clean(&*dev, "orphans released in any order");
}

#[test]
fn orphans_live_until_released_or_remount() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let before = free(&fs);
    let a = fs.create(root, "a", &nf()).unwrap();
    fs.write_at(a, 0, &pattern(1, 5 * BS)).unwrap();
    fs.set_xattr(a, b"user.x", b"y", XattrSet::Any).unwrap();
    let b = fs.create(root, "b", &nf()).unwrap();
    fs.write_at(b, 0, &pattern(2, 20 * BS)).unwrap();
    fs.link(b, root, "b2").unwrap();
    fs.unlink_keep(root, "b").unwrap();
    assert_eq!(fs.stat(b).unwrap().nlink, 1, "a name left: not an orphan");
    assert_eq!(fs.orphans().unwrap(), Vec::<u64>::new());
    let c0 = fs.stat(a).unwrap().ctime_ns;
    tick();
    fs.unlink_keep(root, "a").unwrap();
    let st = fs.stat(a).unwrap();
    assert_eq!(st.nlink, 0);
    assert!(st.ctime_ns > c0);
    assert_eq!(read_all(&fs, a), pattern(1, 5 * BS), "an orphan keeps its data");
    fs.write_at(a, 5 * BS as u64, b"more").unwrap();
    assert_eq!(kind(fs.lookup(root, "a")), FsErrorKind::NotFound);
    assert_eq!(kind(fs.link(a, root, "again")), FsErrorKind::NotFound);
    fs.unlink_keep(root, "b2").unwrap();
    assert_eq!(fs.orphans().unwrap(), vec![b, a]);
    fs.sync().unwrap();
    assert_clean(&*dev, "with orphans");
    // Released from the middle, the end, the head.
    let c = fs.create(root, "c", &nf()).unwrap();
    fs.unlink_keep(root, "c").unwrap();
    assert_eq!(fs.orphans().unwrap(), vec![c, b, a]);
    fs.release_orphan(b).unwrap();
    assert_eq!(fs.orphans().unwrap(), vec![c, a]);
    assert_eq!(errno(fs.release_orphan(b)), 22);
    let d = fs.create(root, "d", &nf()).unwrap();
    assert_eq!(errno(fs.release_orphan(d)), 22);
    fs.unlink(root, "d").unwrap();
    fs.release_orphan(a).unwrap();
    fs.release_orphan(c).unwrap();
    assert_eq!(fs.orphans().unwrap(), Vec::<u64>::new());
    assert_eq!(free(&fs), before);
    fs.sync().unwrap();
    assert_clean(&*dev, "orphans released");

    // A crash with orphans: the next mount frees them.
    let e = fs.create(root, "e", &nf()).unwrap();
    fs.write_at(e, 0, &pattern(3, 30 * BS)).unwrap();
    fs.set_xattr(e, b"user.k", b"v", XattrSet::Any).unwrap();
    let l = fs.symlink(root, "l", &[b'z'; 300], &nf()).unwrap();
    fs.unlink_keep(root, "e").unwrap();
    fs.unlink_keep(root, "l").unwrap();
    fs.commit().unwrap();
    drop(fs);
    let crashed = Arc::new(MemDevice::from_image(dev.crash_image(5)).unwrap());
    let r = fsck(&*crashed, false).unwrap();
    assert!(r.is_clean(), "orphans are not problems:\n{r}");
    assert_eq!(r.orphans, 2);
    let fs = mount(&crashed);
    assert_eq!(fs.stats().orphans_freed_at_mount, 2);
    assert_eq!(fs.orphans().unwrap(), Vec::<u64>::new());
    assert_eq!(kind(fs.stat(e)), FsErrorKind::NotFound);
    assert_eq!(kind(fs.stat(l)), FsErrorKind::NotFound);
    assert_eq!(free(&fs), before);
    fs.unmount().unwrap();
    assert_clean(&*crashed, "after the mount freed the orphans");

    // fsck --repair frees them as a mount would.
    let fs = mount(&dev);
    let _ = fs.orphans().unwrap();
    let g = fs.create(root, "g", &nf()).unwrap();
    fs.write_at(g, 0, &pattern(4, 3 * BS)).unwrap();
    fs.unlink_keep(root, "g").unwrap();
    fs.sync().unwrap();
    drop(fs);
    let r = fsck(&*dev, true).unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.orphans, 1);
    let r = fsck(&*dev, false).unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.orphans, 0);
    let fs = mount(&dev);
    assert_eq!(fs.stats().orphans_freed_at_mount, 0);
    assert_eq!(free(&fs), before);
}

#[test]
fn fsck_finds_a_broken_orphan_list_and_unlisted_unlinked_inodes() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let a = fs.create(root, "a", &nf()).unwrap();
    fs.write_at(a, 0, b"data").unwrap();
    fs.unlink_keep(root, "a").unwrap();
    fs.unmount().unwrap();
    // Take it off the list behind the file system's back: nlink 0, on no list.
    let geo = {
        let mut b = [0u8; BS];
        dev.read_blocks(SB_PRIMARY, &mut b).unwrap();
        vino_fs::layout::Geometry::new(&Superblock::decode(&b).unwrap()).unwrap()
    };
    let mut h = [0u8; BS];
    dev.read_blocks(geo.header(0), &mut h).unwrap();
    let mut gh = vino_fs::layout::GroupHeader::decode(&h, 0, &geo).unwrap();
    assert_eq!(u64::from(gh.orphan_head), a);
    gh.orphan_head = 0;
    gh.encode_into(&mut h);
    dev.write_blocks(geo.header(0), &h).unwrap();
    let r = fsck(&*dev, false).unwrap();
    assert!(r.count(vino_fs::fsck::ProblemKind::Orphan) >= 1, "{r}");
    fsck(&*dev, true).unwrap();
    assert_clean(&*dev, "repaired");
    // A list that loops.
    let fs = mount(&dev);
    let b = fs.create(root, "b", &nf()).unwrap();
    fs.unlink_keep(root, "b").unwrap();
    fs.unmount().unwrap();
    let (blk, off) = geo.inode_location(b);
    let mut t = [0u8; BS];
    dev.read_blocks(blk, &mut t).unwrap();
    let mut i = vino_fs::layout::Inode::decode(b, &t[off..off + 256]).unwrap();
    i.next_orphan = b as u32;
    i.encode_into(b, &mut t[off..off + 256]);
    dev.write_blocks(blk, &t).unwrap();
    let e = mount_err(&dev);
    assert_eq!(e.kind(), FsErrorKind::Corrupt);
    let r = fsck(&*dev, true).unwrap();
    assert!(r.count(vino_fs::fsck::ProblemKind::OrphanList) >= 1, "{r}");
    assert_clean(&*dev, "loop repaired");
    let fs = mount(&dev);
    assert_eq!(fs.orphans().unwrap(), Vec::<u64>::new());
}

#[test]
fn rename_flags_and_rules() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let f = fs.create(root, "f", &nf()).unwrap();
    let g = fs.create(root, "g", &nf()).unwrap();
    fs.write_at(g, 0, b"gg").unwrap();
    let no = RenameFlags {
        no_replace: true,
        ..Default::default()
    };
    assert_eq!(errno(fs.rename_with(root, "f", root, "g", no)), 17);
    fs.rename_with(root, "f", root, "h", no).unwrap();
    assert_eq!(fs.lookup(root, "h").unwrap(), f);
    // keep_replaced: the replaced file goes on the orphan list.
    let keep = RenameFlags {
        keep_replaced: true,
        ..Default::default()
    };
    fs.rename_with(root, "h", root, "g", keep).unwrap();
    assert_eq!(fs.lookup(root, "g").unwrap(), f);
    assert_eq!(fs.stat(g).unwrap().nlink, 0);
    assert_eq!(fs.orphans().unwrap(), vec![g]);
    assert_eq!(read_all(&fs, g), b"gg");
    fs.release_orphan(g).unwrap();
    // Without it, freed.
    let x = fs.create(root, "x", &nf()).unwrap();
    fs.rename(root, "x", root, "g").unwrap();
    assert_eq!(kind(fs.stat(f)), FsErrorKind::NotFound);
    assert_eq!(fs.lookup(root, "g").unwrap(), x);
    // Two names of one inode: a no-op.
    fs.link(x, root, "x2").unwrap();
    fs.rename(root, "g", root, "x2").unwrap();
    assert_eq!(fs.lookup(root, "g").unwrap(), x);
    assert_eq!(fs.stat(x).unwrap().nlink, 2);
    // Directories.
    let d = fs.mkdir(root, "d", &nf()).unwrap();
    let e = fs.mkdir(root, "e", &nf()).unwrap();
    let sub = fs.mkdir(d, "sub", &nf()).unwrap();
    fs.create(e, "inside", &nf()).unwrap();
    assert_eq!(errno(fs.rename(root, "d", root, "e")), 39);
    assert_eq!(errno(fs.rename(root, "d", root, "g")), 20);
    assert_eq!(errno(fs.rename(root, "g", root, "d")), 21);
    assert_eq!(errno(fs.rename(root, "d", sub, "x")), 22);
    assert_eq!(errno(fs.rename(root, "d", d, "x")), 22);
    let root_links = fs.stat(root).unwrap().nlink;
    fs.rename(d, "sub", e, "moved").unwrap();
    assert_eq!(fs.lookup(e, "moved").unwrap(), sub);
    assert_eq!(fs.lookup(sub, "..").unwrap(), e);
    assert_eq!(fs.stat(d).unwrap().nlink, 2);
    assert_eq!(fs.stat(e).unwrap().nlink, 3);
    // A directory over an empty one.
    fs.rename(root, "d", e, "moved").unwrap();
    assert_eq!(fs.lookup(e, "moved").unwrap(), d);
    assert_eq!(kind(fs.stat(sub)), FsErrorKind::NotFound);
    assert_eq!(fs.stat(root).unwrap().nlink, root_links - 1);
    assert_eq!(fs.stat(e).unwrap().nlink, 3);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after renames");
}

#[test]
fn timestamps_follow_posix() {
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let d = fs.mkdir(root, "d", &nf()).unwrap();
    let stamp = |ino: u64| {
        let s = fs.stat(ino).unwrap();
        (s.atime_ns, s.mtime_ns, s.ctime_ns)
    };
    for make in 0..4 {
        let (_, m0, c0) = stamp(d);
        tick();
        let ino = match make {
            0 => fs.create(d, "n0", &nf()).unwrap(),
            1 => fs.mknod(d, "n1", FileType::Fifo, 0, &nf()).unwrap(),
            2 => fs.symlink(d, "n2", b"t", &nf()).unwrap(),
            _ => fs.mkdir(d, "n3", &nf()).unwrap(),
        };
        let (a, m, c) = stamp(ino);
        assert!(a == m && m == c && a > c0, "new inode {make}");
        let (_, pm, pc) = stamp(d);
        assert!(pm > m0 && pc > c0, "parent of new inode {make}");
    }
    let f = fs.lookup(d, "n0").unwrap();
    // link: target ctime, new parent mtime and ctime.
    let (_, fm, fc) = stamp(f);
    let (_, rm, rc) = stamp(root);
    tick();
    fs.link(f, root, "l").unwrap();
    assert!(stamp(f).2 > fc && stamp(f).1 == fm);
    assert!(stamp(root).1 > rm && stamp(root).2 > rc);
    // unlink: parent mtime and ctime, the surviving target's ctime.
    let (_, _, fc) = stamp(f);
    let (_, rm, rc) = stamp(root);
    tick();
    fs.unlink(root, "l").unwrap();
    assert!(stamp(f).2 > fc);
    assert!(stamp(root).1 > rm && stamp(root).2 > rc);
    // rename: both parents and the moved inode's ctime.
    let (_, dm, dc) = stamp(d);
    let (_, rm, rc) = stamp(root);
    let (_, _, fc) = stamp(f);
    tick();
    fs.rename(d, "n0", root, "moved").unwrap();
    assert!(stamp(d).1 > dm && stamp(d).2 > dc);
    assert!(stamp(root).1 > rm && stamp(root).2 > rc);
    assert!(stamp(f).2 > fc);
    // rmdir: parent.
    let (_, dm, dc) = stamp(d);
    tick();
    fs.rmdir(d, "n3").unwrap();
    assert!(stamp(d).1 > dm && stamp(d).2 > dc);
    // set_attr: ctime always.
    let (_, _, fc) = stamp(f);
    tick();
    fs.set_attr(f, &SetAttr::default()).unwrap();
    assert!(stamp(f).2 > fc);
    // write and truncate: mtime and ctime.
    let (_, fm, fc) = stamp(f);
    tick();
    fs.write_at(f, 0, b"abc").unwrap();
    assert!(stamp(f).1 > fm && stamp(f).2 > fc);
    let (_, fm, fc) = stamp(f);
    tick();
    fs.truncate(f, 1).unwrap();
    assert!(stamp(f).1 > fm && stamp(f).2 > fc);
    // xattrs: ctime only.
    let (_, fm, fc) = stamp(f);
    tick();
    fs.set_xattr(f, b"user.a", b"b", XattrSet::Any).unwrap();
    assert!(stamp(f).2 > fc && stamp(f).1 == fm);
    let (_, _, fc) = stamp(f);
    tick();
    fs.remove_xattr(f, b"user.a").unwrap();
    assert!(stamp(f).2 > fc && stamp(f).1 == fm);
}

/// Rewrites both superblocks to say format `version`.
fn set_version(dev: &dyn BlockDevice, version: u32) {
    let mut b = [0u8; BS];
    dev.read_blocks(SB_PRIMARY, &mut b).unwrap();
    let (sb, _) = Superblock::decode_any(&b).unwrap();
    let enc = sb.encode_as(version);
    dev.write_blocks(SB_PRIMARY, &enc[..]).unwrap();
    dev.write_blocks(SB_BACKUP, &enc[..]).unwrap();
    dev.flush().unwrap();
}

#[test]
fn format_versions() {
    let dev = dev();
    let fs = mount(&dev);
    let f = fs.create(fs.root(), "f", &nf()).unwrap();
    fs.write_at(f, 0, b"kept").unwrap();
    fs.unmount().unwrap();
    assert_eq!(upgrade(&*dev).unwrap(), vino_fs::VERSION);
    set_version(&*dev, 1);
    let e = mount_err(&dev);
    assert_eq!(e.kind(), FsErrorKind::Version);
    assert_eq!(e.errno(), 22);
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "format version 1 is older than this VINO ({}): run `vino fsck --upgrade IMAGE`",
            vino_fs::VERSION
        )),
        "{msg}"
    );
    assert_eq!(
        fsck(&*dev, false).expect_err("fsck refuses too").kind(),
        FsErrorKind::Version
    );
    assert_eq!(upgrade(&*dev).unwrap(), 1);
    assert_clean(&*dev, "upgraded");
    let fs = mount(&dev);
    assert_eq!(read_all(&fs, f), b"kept");
    fs.symlink(fs.root(), "s", b"f", &nf()).unwrap();
    fs.unmount().unwrap();
    // Version 2 (before stream files) upgrades the same way.
    set_version(&*dev, 2);
    assert_eq!(mount_err(&dev).kind(), FsErrorKind::Version);
    assert_eq!(upgrade(&*dev).unwrap(), 2);
    assert_clean(&*dev, "upgraded from 2");
    // Newer.
    set_version(&*dev, vino_fs::VERSION + 1);
    let e = mount_err(&dev);
    assert_eq!(e.kind(), FsErrorKind::Version);
    assert!(e.to_string().contains("newer VINO"), "{e}");
    assert_eq!(upgrade(&*dev).expect_err("no downgrade").kind(), FsErrorKind::Version);
    // A primary superblock of a newer version is never taken for damage: the backup is not used.
    assert_eq!(fsck(&*dev, true).expect_err("refused").kind(), FsErrorKind::Version);
}

/// Builds a tree with every type, xattrs, preallocation and orphans.
fn every_kind(fs: &FileSystem, seed: u64) -> Vec<u64> {
    let root = fs.root();
    let d = fs.mkdir(root, format!("d{seed}"), &nf()).unwrap();
    let f = fs.create(d, "file", &nf()).unwrap();
    fs.write_at(f, 0, &pattern(seed, 3 * BS + 7)).unwrap();
    fs.set_xattr(f, b"user.k", &pattern(seed, 40), XattrSet::Any).unwrap();
    fs.symlink(d, "short", b"file", &nf()).unwrap();
    fs.symlink(d, "long", &vec![b'q'; 1000], &nf()).unwrap();
    fs.mknod(d, "fifo", FileType::Fifo, 0, &nf()).unwrap();
    fs.mknod(d, "sock", FileType::Socket, 0, &nf()).unwrap();
    let c = fs.mknod(d, "chr", FileType::CharDevice, 0x501, &nf()).unwrap();
    fs.mknod(d, "blk", FileType::BlockDevice, 0x802, &nf()).unwrap();
    fs.link(c, root, format!("chr{seed}")).unwrap();
    let p = fs.create(d, "pre", &nf()).unwrap();
    fs.fallocate(p, 0, 20 * BS as u64, seed.is_multiple_of(2)).unwrap();
    fs.set_xattr(d, b"user.dir", b"x", XattrSet::Any).unwrap();
    let o = fs.create(d, "open", &nf()).unwrap();
    fs.write_at(o, 0, &pattern(seed + 1, 2 * BS)).unwrap();
    fs.unlink_keep(d, "open").unwrap();
    let r = fs.create(d, "replaced", &nf()).unwrap();
    fs.rename_with(
        d,
        "file",
        d,
        "replaced",
        RenameFlags {
            keep_replaced: true,
            ..Default::default()
        },
    )
    .unwrap();
    vec![o, r]
}

#[test]
fn fsck_is_clean_after_a_mix_of_every_type() {
    let dev = dev();
    let fs = mount(&dev);
    let before = free(&fs);
    let orphans = every_kind(&fs, 1);
    every_kind(&fs, 2);
    fs.sync().unwrap();
    assert_clean(&*dev, "mounted, synced");
    for o in orphans {
        fs.release_orphan(o).unwrap();
    }
    fs.unmount().unwrap();
    assert_clean(&*dev, "unmounted");
    let fs = mount(&dev);
    assert_eq!(fs.stats().orphans_freed_at_mount, 2, "the second tree's");
    for seed in [1, 2] {
        let d = fs.lookup(fs.root(), format!("d{seed}")).unwrap();
        for e in fs.readdir(d).unwrap() {
            match e.kind {
                FileType::Symlink => {
                    fs.readlink(e.ino).unwrap();
                }
                FileType::Regular => {
                    read_all(&fs, e.ino);
                }
                _ => {}
            }
            fs.unlink(d, &e.name).unwrap();
        }
        fs.rmdir(fs.root(), format!("d{seed}")).unwrap();
        fs.unlink(fs.root(), format!("chr{seed}")).unwrap();
    }
    assert_eq!(free(&fs), before);
    fs.unmount().unwrap();
    assert_clean(&*dev, "all removed");
}

/// Power cuts (unflushed writes survive whole, torn or not at all) after every step of a
/// workload of every type: each image must be clean, before and after a mount.
#[test]
fn power_cuts_with_every_type_leave_clean_images() {
    let dev = Arc::new(MemDevice::new(4096));
    vino_fs::mkfs(&*dev, &small_opts(1024)).unwrap();
    let fs = mount_with(
        &dev,
        &MountOptions {
            commit_blocks: Some(8),
            ..Default::default()
        },
    );
    let root = fs.root();
    let mut step = 0u64;
    let cut = |step: u64| {
        for seed in 0..3 {
            let img = Arc::new(MemDevice::from_image(dev.crash_image(step * 7 + seed)).unwrap());
            assert_clean(&*img, &format!("step {step}, cut {seed}"));
            let fs = mount(&img);
            assert!(fs.orphans().unwrap().is_empty());
            fs.unmount().unwrap();
            assert_clean(&*img, &format!("step {step}, cut {seed}, after a mount"));
        }
    };
    for round in 0..4u64 {
        let d = fs.mkdir(root, format!("r{round}"), &nf()).unwrap();
        let ops: Vec<Box<dyn Fn() -> vino_fs::Result<()>>> = vec![
            Box::new(|| fs.symlink(d, "s", b"short", &nf()).map(drop)),
            Box::new(|| fs.symlink(d, "l", &[b'l'; 500], &nf()).map(drop)),
            Box::new(|| fs.mknod(d, "p", FileType::Fifo, 0, &nf()).map(drop)),
            Box::new(|| fs.mknod(d, "c", FileType::CharDevice, 7, &nf()).map(drop)),
            Box::new(|| {
                let f = fs.create(d, "f", &nf())?;
                fs.write_at(f, 0, &pattern(round, 2 * BS))?;
                fs.set_xattr(f, b"user.a", b"1", XattrSet::Any)
            }),
            Box::new(|| {
                let f = fs.lookup(d, "f")?;
                fs.fallocate(f, 0, 16 * BS as u64, false)
            }),
            Box::new(|| {
                let f = fs.lookup(d, "f")?;
                fs.link(f, root, format!("f{round}"))
            }),
            Box::new(|| fs.unlink_keep(root, format!("f{round}"))),
            Box::new(|| fs.unlink_keep(d, "f")),
            Box::new(|| {
                let l = fs.lookup(d, "l")?;
                fs.set_xattr(l, b"user.b", &[3; 200], XattrSet::Any)
            }),
            Box::new(|| {
                fs.create(d, "g", &nf())?;
                fs.rename_with(
                    d,
                    "s",
                    d,
                    "g",
                    RenameFlags {
                        keep_replaced: true,
                        ..Default::default()
                    },
                )
            }),
            Box::new(|| fs.commit()),
            Box::new(|| {
                for o in fs.orphans()?.into_iter().take(1) {
                    fs.release_orphan(o)?;
                }
                Ok(())
            }),
            Box::new(|| fs.unlink(d, "l")),
            Box::new(|| fs.fsync(root)),
        ];
        for op in &ops {
            op().unwrap();
            step += 1;
            cut(step);
        }
    }
    fs.sync().unwrap();
    cut(step + 1);
}

/// Reads inode `ino`'s record, lets `f` change it, writes it back sealed.
fn patch_inode(dev: &MemDevice, ino: u64, f: impl FnOnce(&mut vino_fs::layout::Inode)) {
    let geo = geometry(dev);
    let (blk, off) = geo.inode_location(ino);
    let mut t = [0u8; BS];
    dev.read_blocks(blk, &mut t).unwrap();
    let mut i = vino_fs::layout::Inode::decode(ino, &t[off..off + 256]).unwrap();
    f(&mut i);
    i.encode_into(ino, &mut t[off..off + 256]);
    dev.write_blocks(blk, &t).unwrap();
}

fn geometry(dev: &MemDevice) -> vino_fs::layout::Geometry {
    let mut b = [0u8; BS];
    dev.read_blocks(SB_PRIMARY, &mut b).unwrap();
    vino_fs::layout::Geometry::new(&Superblock::decode(&b).unwrap()).unwrap()
}

#[test]
fn fsck_checks_symlinks_devices_and_xattr_blocks() {
    use vino_fs::fsck::ProblemKind;
    let dev = dev();
    let fs = mount(&dev);
    let root = fs.root();
    let short = fs.symlink(root, "short", b"abc", &nf()).unwrap();
    let long = fs.symlink(root, "long", &[b'L'; 700], &nf()).unwrap();
    let fifo = fs.mknod(root, "fifo", FileType::Fifo, 0, &nf()).unwrap();
    let f = fs.create(root, "f", &nf()).unwrap();
    fs.set_xattr(f, b"user.a", b"b", XattrSet::Any).unwrap();
    let xblock = {
        fs.unmount().unwrap();
        let geo = geometry(&dev);
        let (blk, off) = geo.inode_location(f);
        let mut t = [0u8; BS];
        dev.read_blocks(blk, &mut t).unwrap();
        u64::from(vino_fs::layout::Inode::decode(f, &t[off..off + 256]).unwrap().xattr)
    };
    assert_clean(&*dev, "healthy");
    // A fast symlink whose size says more than its target.
    patch_inode(&dev, short, |i| i.size = 10);
    // A slow symlink whose block holds a shorter target.
    let lb = {
        let geo = geometry(&dev);
        let (blk, off) = geo.inode_location(long);
        let mut t = [0u8; BS];
        dev.read_blocks(blk, &mut t).unwrap();
        u64::from(vino_fs::layout::Inode::decode(long, &t[off..off + 256]).unwrap().direct[0])
    };
    let mut b = [0u8; BS];
    dev.read_blocks(lb, &mut b).unwrap();
    b[100] = 0;
    dev.write_blocks(lb, &b).unwrap();
    // A fifo with a device number, a regular file with a symlink target.
    patch_inode(&dev, fifo, |i| i.rdev = 5);
    // A damaged xattr block.
    dev.read_blocks(xblock, &mut b).unwrap();
    b[9] ^= 0xff;
    dev.write_blocks(xblock, &b).unwrap();
    let r = fsck(&*dev, false).unwrap();
    assert_eq!(r.count(ProblemKind::FileType), 3, "{r}");
    assert_eq!(r.count(ProblemKind::Xattr), 1, "{r}");
    let r = fsck(&*dev, true).unwrap();
    assert!(r.repaired, "{r}");
    assert_clean(&*dev, "repaired");
    let fs = mount(&dev);
    assert_eq!(kind(fs.lookup(root, "short")), FsErrorKind::NotFound);
    assert_eq!(kind(fs.lookup(root, "long")), FsErrorKind::NotFound);
    assert_eq!(fs.stat(fifo).unwrap().rdev, 0);
    assert_eq!(fs.list_xattr(f).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(fs.stat(f).unwrap().blocks, 0);
}

#[test]
fn fallocate_takes_exactly_what_is_free_or_nothing() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let f = fs.create(fs.root(), "big", &nf()).unwrap();
    let (free_blocks, _) = free(&fs);
    let overhead = |n: u64| {
        let mut o = u64::from(n > 12);
        if n > 12 + 1024 {
            o += 1 + (n - 12 - 1024).div_ceil(1024);
        }
        o
    };
    let n = (1..=free_blocks)
        .rev()
        .find(|&n| n + overhead(n) <= free_blocks)
        .unwrap();
    assert!(n > 1036, "into the double indirect tree ({n} blocks)");
    assert_eq!(errno(fs.fallocate(f, 0, (n + 1) * BS as u64, false)), 28);
    assert_eq!(free(&fs).0, free_blocks, "nothing taken");
    assert_eq!(fs.stat(f).unwrap().blocks, 0);
    fs.fallocate(f, 0, n * BS as u64, false).unwrap();
    assert_eq!(free(&fs).0, free_blocks - n - overhead(n));
    let st = fs.stat(f).unwrap();
    assert_eq!((st.size, st.blocks), (n * BS as u64, n + overhead(n)));
    let mut buf = vec![1u8; st.size as usize];
    assert_eq!(fs.read_at(f, 0, &mut buf).unwrap(), buf.len());
    assert!(buf.iter().all(|&b| b == 0));
    fs.unmount().unwrap();
    assert_clean(&*dev, "full of preallocated blocks");
}

/// A big file's blocks are freed a slice at a time, each slice an operation of its own (others
/// take the file system's lock in between): releasing an orphan and shrinking a file by
/// truncation both end with every block back, the data before the new end intact, and a clean
/// image; what a slice leaves past the end is not read, and a file growing over it reads zeros.
#[test]
fn big_files_are_freed_a_slice_at_a_time() {
    let dev = fresh(16_384, &small_opts(1024));
    let fs = mount(&dev);
    let root = fs.root();
    let before = free(&fs);
    let blocks = 3 * vino_fs::FREE_SLICE as usize + 100;
    let ops = |fs: &FileSystem| fs.stats().meta.ops;

    let a = fs.create(root, "a", &nf()).unwrap();
    fs.write_at(a, 0, &pattern(1, blocks * BS)).unwrap();
    fs.unlink_keep(root, "a").unwrap();
    let o = ops(&fs);
    fs.release_orphan(a).unwrap();
    assert!(ops(&fs) - o >= 3, "released in {} operations", ops(&fs) - o);
    assert_eq!(fs.orphans().unwrap(), Vec::<u64>::new());
    assert_eq!(free(&fs), before, "every block of the orphan back");
    assert_eq!(errno(fs.release_orphan(a)), 22, "released twice");

    let b = fs.create(root, "b", &nf()).unwrap();
    let data = pattern(2, blocks * BS);
    fs.write_at(b, 0, &data).unwrap();
    let o = ops(&fs);
    fs.set_size(b, 10 * BS as u64 + 7).unwrap();
    assert!(ops(&fs) - o >= 4, "truncated in {} operations", ops(&fs) - o);
    assert_eq!(read_all(&fs, b), data[..10 * BS + 7]);
    fs.set_size(b, 20 * BS as u64).unwrap();
    let mut want = data[..10 * BS + 7].to_vec();
    want.resize(20 * BS, 0);
    assert_eq!(read_all(&fs, b), want, "grown over what was freed: zeros");
    fs.unlink(root, "b").unwrap();
    assert_eq!(free(&fs), before, "every block of the truncated file back");
    fs.sync().unwrap();
    assert_clean(&*dev, "big files freed in slices");
}
