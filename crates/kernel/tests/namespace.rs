//! The POSIX namespace and permission rules through the kernel's `*at` system calls, with two
//! users and root: search permission on every component, directory descriptors, the sticky bit,
//! supplementary groups, set-ID bits, times, symbolic links, special files, extended attributes,
//! byte names, hard links, files referenced after their last name goes, and renames racing opens.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vino_kernel::{
    At, Attrs, Credentials, Errno, EventKind, FallocMode, FileType, Kernel, OpenFlags, Process, RenameFlags, SetTime,
};

fn boot() -> Arc<Kernel> {
    let k = common::small_kernel(8192, Default::default());
    // Everyone may make names at the top.
    let root = k.spawn(Credentials::root());
    root.chmod("/", 0o777).unwrap();
    k.exit(root.pid());
    k
}

fn write_file(p: &Process, path: &str, data: &[u8], mode: u16) {
    let fd = p.open(path, OpenFlags::create()).unwrap();
    p.write(fd, data).unwrap();
    p.close(fd).unwrap();
    p.chmod(path, mode).unwrap();
}

fn read_file(p: &Process, path: &str) -> Result<Vec<u8>, Errno> {
    let fd = p.open(path, OpenFlags::read_only()).map_err(|e| e.errno)?;
    let mut buf = vec![0u8; 4096];
    let n = p.read(fd, &mut buf).unwrap();
    p.close(fd).unwrap();
    buf.truncate(n);
    Ok(buf)
}

fn errno<T: std::fmt::Debug>(r: Result<T, vino_kernel::SysError>) -> Errno {
    r.expect_err("the call should fail").errno
}

#[test]
fn search_permission_is_checked_on_every_component() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    root.mkdir("/x", 0o755).unwrap();
    root.mkdir("/x/y", 0o777).unwrap();
    write_file(&root, "/x/y/f", b"secret", 0o644);
    root.chmod("/x", 0o700).unwrap();
    assert_eq!(errno(user.open("/x/y/f", OpenFlags::read_only())), Errno::Acces);
    assert_eq!(errno(user.stat("/x/y/f")), Errno::Acces);
    assert_eq!(errno(user.open("/x/y/g", OpenFlags::create())), Errno::Acces);
    assert_eq!(errno(user.unlink("/x/y/f")), Errno::Acces);
    assert_eq!(errno(user.chmod("/x/y/f", 0o777)), Errno::Acces);
    // Relative to a directory the user has open, the walk is checked from there.
    root.chmod("/x", 0o755).unwrap();
    let dir = user.open("/x/y", OpenFlags::directory()).unwrap();
    root.chmod("/x", 0o700).unwrap();
    assert_eq!(user.stat_at(At::Fd(dir), "f", true).unwrap().size, 6);
    assert_eq!(errno(user.stat_at(At::Fd(dir), "../y/f", true)), Errno::Acces);
    // The owner of a file in a directory it cannot search cannot chmod it either.
    root.mkdir("/z", 0o777).unwrap();
    write_file(&user, "/z/mine", b"", 0o644);
    root.chmod("/z", 0o644).unwrap();
    assert_eq!(errno(user.chmod("/z/mine", 0o600)), Errno::Acces);
    assert_eq!(read_file(&root, "/x/y/f").unwrap(), b"secret");
}

#[test]
fn sticky_directories_keep_other_users_names() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(1001, 1001));
    root.mkdir("/tmp", 0o1777).unwrap();
    write_file(&alice, "/tmp/a", b"alice", 0o666);
    alice.mkdir("/tmp/ad", 0o777).unwrap();
    assert_eq!(errno(bob.unlink("/tmp/a")), Errno::Perm);
    assert_eq!(errno(bob.rmdir("/tmp/ad")), Errno::Perm);
    assert_eq!(errno(bob.rename("/tmp/a", "/tmp/b")), Errno::Perm);
    write_file(&bob, "/tmp/b", b"bob", 0o666);
    assert_eq!(
        errno(bob.rename("/tmp/b", "/tmp/a")),
        Errno::Perm,
        "replacing alice's file"
    );
    // The file's owner and the directory's owner may.
    alice.rename("/tmp/a", "/tmp/a2").unwrap();
    root.unlink("/tmp/b").unwrap();
    alice.unlink("/tmp/a2").unwrap();
    alice.rmdir("/tmp/ad").unwrap();
}

#[test]
fn supplementary_groups_grant_group_rights_and_chgrp() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    write_file(&root, "/g", b"group data", 0o640);
    root.chown("/g", Some(0), Some(65532)).unwrap();
    let outsider = k.spawn(Credentials::user(1000, 1000));
    let member = k.spawn(Credentials::user(1000, 1000).with_groups(vec![65532]));
    assert_eq!(read_file(&outsider, "/g"), Err(Errno::Acces));
    assert_eq!(read_file(&member, "/g").unwrap(), b"group data");
    write_file(&member, "/mine", b"", 0o644);
    assert_eq!(member.chown("/mine", None, Some(65532)).unwrap().gid, 65532);
    assert_eq!(errno(member.chown("/mine", None, Some(7))), Errno::Perm);
    assert_eq!(errno(member.chown("/mine", Some(0), None)), Errno::Perm);
}

#[test]
fn set_id_bits_drop_on_writes_by_others_and_on_chown() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    write_file(&root, "/s", b"x", 0o6777);
    let fd = user.open("/s", OpenFlags::read_write()).unwrap();
    user.write(fd, b"y").unwrap();
    user.close(fd).unwrap();
    assert_eq!(root.stat("/s").unwrap().mode & 0o7777, 0o777);
    // Root's write keeps them.
    root.chmod("/s", 0o6755).unwrap();
    let fd = root.open("/s", OpenFlags::read_write()).unwrap();
    root.write(fd, b"z").unwrap();
    root.close(fd).unwrap();
    assert_eq!(root.stat("/s").unwrap().mode & 0o7777, 0o6755);
    // A chown drops them, even root's.
    root.chown("/s", Some(1000), None).unwrap();
    assert_eq!(root.stat("/s").unwrap().mode & 0o7777, 0o755);
    // A non-member cannot set S_ISGID: it is dropped silently.
    user.chmod("/s", 0o2755).unwrap();
    assert_eq!(root.stat("/s").unwrap().mode & 0o7777, 0o755);
    // A set-group-ID directory passes its group on.
    root.mkdir("/sg", 0o2777).unwrap();
    root.chown("/sg", None, Some(50)).unwrap();
    write_file(&user, "/sg/f", b"", 0o644);
    assert_eq!(root.stat("/sg/f").unwrap().gid, 50);
    user.mkdir("/sg/d", 0o755).unwrap();
    let d = root.stat("/sg/d").unwrap();
    assert_eq!((d.gid, d.mode & 0o7777), (50, 0o2755));
}

#[test]
fn times_follow_the_ownership_rules() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    write_file(&root, "/t", b"", 0o666);
    write_file(&root, "/ro", b"", 0o644);
    assert_eq!(errno(user.utimes("/t", SetTime::At(5), SetTime::At(5))), Errno::Perm);
    user.utimes("/t", SetTime::Now, SetTime::Now).unwrap();
    assert_eq!(errno(user.utimes("/ro", SetTime::Now, SetTime::Now)), Errno::Acces);
    let st = root.utimes("/t", SetTime::At(1_000_000_000), SetTime::Omit).unwrap();
    assert_eq!(st.atime_ns, 1_000_000_000);
    let truncate = Attrs {
        size: Some(0),
        ..Attrs::default()
    };
    assert_eq!(errno(user.setattr_at(At::Root, "/ro", true, &truncate)), Errno::Acces);
}

#[test]
fn symbolic_links_are_followed_where_posix_says() {
    let k = boot();
    let p = k.spawn(Credentials::root());
    p.mkdir("/d", 0o755).unwrap();
    write_file(&p, "/d/target", b"through the link", 0o644);
    p.symlink("d/target", "/rel").unwrap();
    p.symlink("/d", "/abs").unwrap();
    p.symlink("nowhere", "/dangling").unwrap();
    assert_eq!(read_file(&p, "/rel").unwrap(), b"through the link");
    assert_eq!(read_file(&p, "/abs/target").unwrap(), b"through the link");
    assert_eq!(p.readlink("/rel").unwrap(), b"d/target");
    assert_eq!(p.lstat("/rel").unwrap().kind, FileType::Symlink);
    assert_eq!(p.stat("/rel").unwrap().kind, FileType::Regular);
    assert_eq!(errno(p.stat("/dangling")), Errno::NoEnt);
    // O_CREAT through a dangling link makes what it names (O_EXCL refuses the link itself).
    let exclusive = OpenFlags {
        exclusive: true,
        ..OpenFlags::create()
    };
    assert_eq!(errno(p.open("/dangling", exclusive)), Errno::Exist);
    let fd = p.open("/dangling", OpenFlags::create()).unwrap();
    p.close(fd).unwrap();
    assert_eq!(p.stat("/nowhere").unwrap().kind, FileType::Regular);
    p.unlink("/nowhere").unwrap();
    assert_eq!(errno(p.readlink("/d/target")), Errno::Inval);
    let nofollow = OpenFlags {
        nofollow: true,
        ..OpenFlags::read_only()
    };
    assert_eq!(errno(p.open("/rel", nofollow)), Errno::Loop);
    p.symlink("/loop2", "/loop1").unwrap();
    p.symlink("/loop1", "/loop2").unwrap();
    assert_eq!(errno(p.stat("/loop1")), Errno::Loop);
    assert_eq!(errno(p.stat("/rel/")), Errno::NotDir);
    // Unlink and rename act on the link, not its target.
    p.rename("/rel", "/rel2").unwrap();
    p.unlink("/rel2").unwrap();
    assert_eq!(read_file(&p, "/d/target").unwrap(), b"through the link");
    // Only root may follow into root's 0700 directory: links do not bypass search rights.
    p.chmod("/d", 0o700).unwrap();
    let user = k.spawn(Credentials::user(1000, 1000));
    assert_eq!(errno(user.stat("/abs/target")), Errno::Acces);
}

#[test]
fn a_walk_beneath_a_directory_never_leaves_it() {
    let k = boot();
    let p = k.spawn(Credentials::root());
    p.mkdir("/jail", 0o755).unwrap();
    p.mkdir("/jail/sub", 0o755).unwrap();
    write_file(&p, "/jail/sub/inside", b"in", 0o644);
    write_file(&p, "/secret", b"out", 0o644);
    p.symlink("/secret", "/jail/abs").unwrap();
    p.symlink("../secret", "/jail/up").unwrap();
    p.symlink("sub/../sub/inside", "/jail/round").unwrap();
    p.symlink("../../secret", "/jail/sub/up2").unwrap();
    let jail = p.open("/jail", OpenFlags::directory()).unwrap();
    let at = At::Beneath(jail);
    let stat = |path: &str| p.stat_at(at, path, true).map(|s| s.size);
    // Down and back within: fine, by names and by a link that stays inside.
    assert_eq!(stat("sub/../sub/inside").unwrap(), 2);
    assert_eq!(stat("./sub/./inside").unwrap(), 2);
    assert_eq!(stat("round").unwrap(), 2);
    assert_eq!(stat("").unwrap(), stat(".").unwrap());
    // Every way out is EXDEV: `..` above it, an absolute path, links absolute or climbing.
    for escape in ["..", "../secret", "sub/../../secret", "/secret", "abs", "up", "sub/up2"] {
        assert_eq!(stat(escape).map_err(|e| e.errno), Err(Errno::XDev), "{escape}");
    }
    // The link itself may be looked at (not followed); making and removing names goes by the
    // same walk.
    assert!(p.stat_at(at, "abs", false).is_ok());
    assert_eq!(errno(p.open_at(at, "../made", OpenFlags::create())), Errno::XDev);
    assert_eq!(errno(p.mkdir_at(at, "sub/../../made", 0o755)), Errno::XDev);
    assert_eq!(errno(p.unlink_at(at, "../secret")), Errno::XDev);
    assert_eq!(
        errno(p.rename_at(at, "sub/inside", At::Beneath(jail), "../stolen", RenameFlags::default())),
        Errno::XDev
    );
    assert_eq!(errno(p.link_at(at, "up", at, "copy", true)), Errno::XDev);
    assert_eq!(read_file(&p, "/secret").unwrap(), b"out");
    assert!(p.stat("/made").is_err() && p.stat("/stolen").is_err());
    // Beneath the root is the whole file system, where `..` stays at the top as ever.
    let root = p.open("/", OpenFlags::directory()).unwrap();
    assert_eq!(p.stat_at(At::Beneath(root), "../jail/abs", true).unwrap().size, 3);
    p.close(jail).unwrap();
    p.close(root).unwrap();
}

#[test]
fn special_files_are_stored_and_devices_need_privilege() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    root.mkdir("/dev", 0o777).unwrap();
    let fifo = user.mknod_at(At::Root, "/dev/fifo", FileType::Fifo, 0o644, 0).unwrap();
    assert_eq!(fifo.kind, FileType::Fifo);
    user.mknod_at(At::Root, "/dev/sock", FileType::Socket, 0o644, 0)
        .unwrap();
    assert_eq!(
        errno(user.mknod_at(At::Root, "/dev/null", FileType::CharDevice, 0o666, 0x103)),
        Errno::Perm
    );
    let null = root
        .mknod_at(At::Root, "/dev/null", FileType::CharDevice, 0o666, 0x103)
        .unwrap();
    assert_eq!((null.kind, null.rdev), (FileType::CharDevice, 0x103));
    assert_eq!(errno(root.open("/dev/fifo", OpenFlags::read_only())), Errno::NxIo);
    let names: Vec<_> = root
        .readdir("/dev")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(names.contains(&(b"fifo".to_vec(), FileType::Fifo)), "{names:?}");
    user.unlink("/dev/fifo").unwrap();
}

#[test]
fn extended_attributes_in_the_user_namespace() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    write_file(&user, "/x", b"", 0o644);
    let set = |p: &Process, name: &[u8], v: &[u8], how| p.setxattr_at(At::Root, "/x", true, name, v, how);
    set(&user, b"user.colour", b"blue", vino_fs::XattrSet::Any).unwrap();
    assert_eq!(user.getxattr_at(At::Root, "/x", true, b"user.colour").unwrap(), b"blue");
    assert_eq!(
        errno(set(&user, b"user.colour", b"red", vino_fs::XattrSet::Create)),
        Errno::Exist
    );
    assert_eq!(
        errno(set(&user, b"user.size", b"1", vino_fs::XattrSet::Replace)),
        Errno::NoData
    );
    assert_eq!(
        errno(set(&user, b"trusted.x", b"1", vino_fs::XattrSet::Any)),
        Errno::NotSup
    );
    assert_eq!(
        errno(set(&root, &[b'u'; 300], b"1", vino_fs::XattrSet::Any)),
        Errno::Range
    );
    let other = k.spawn(Credentials::user(1001, 1001));
    assert_eq!(
        errno(set(&other, b"user.colour", b"x", vino_fs::XattrSet::Any)),
        Errno::Acces
    );
    assert_eq!(
        user.listxattr_at(At::Root, "/x", true).unwrap(),
        vec![b"user.colour".to_vec()]
    );
    user.removexattr_at(At::Root, "/x", true, b"user.colour").unwrap();
    assert_eq!(
        errno(user.getxattr_at(At::Root, "/x", true, b"user.colour")),
        Errno::NoData
    );
}

#[test]
fn names_are_bytes() {
    let k = boot();
    let p = k.spawn(Credentials::root());
    let name: &[u8] = b"/caf\xe9-\xff\xfe";
    let fd = p.open_at(At::Root, name, OpenFlags::create()).unwrap();
    p.close(fd).unwrap();
    let listed: Vec<Vec<u8>> = p.readdir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert!(listed.contains(&name[1..].to_vec()));
    p.unlink_at(At::Root, name).unwrap();
    assert_eq!(
        errno(p.open_at(At::Root, &[b'a'; 256][..], OpenFlags::create())),
        Errno::NameTooLong
    );
}

#[test]
fn hard_links_and_files_without_names() {
    let k = boot();
    let p = k.spawn(Credentials::root());
    write_file(&p, "/a", b"two", 0o644);
    p.link("/a", "/b").unwrap();
    assert_eq!(p.stat("/a").unwrap().nlink, 2);
    p.unlink("/b").unwrap();
    assert_eq!(read_file(&p, "/a").unwrap(), b"two");
    assert_eq!(p.stat("/a").unwrap().nlink, 1);
    let free = k.fs().stats().free_inodes;
    let fd = p.open("/a", OpenFlags::read_only()).unwrap();
    p.unlink("/a").unwrap();
    assert_eq!(p.fstat(fd).unwrap().nlink, 0, "an open, unlinked file has no links");
    assert_eq!(k.parked_files().len(), 1);
    let mut buf = [0u8; 3];
    assert_eq!(p.pread(fd, &mut buf, 0).unwrap(), 3);
    p.close(fd).unwrap();
    assert!(k.parked_files().is_empty());
    assert_eq!(k.fs().stats().free_inodes, free + 1);
    // The mount's kind of reference: a hold keeps a file alive the same way.
    write_file(&p, "/h", b"held", 0o644);
    let st = p.stat("/h").unwrap();
    k.hold_inode(st.ino, st.generation).unwrap();
    p.unlink("/h").unwrap();
    let at = At::Inode {
        ino: st.ino,
        generation: st.generation,
    };
    assert_eq!(p.stat_at(at, "", false).unwrap().nlink, 0);
    k.release_inode(st.ino).unwrap();
    assert_eq!(errno(p.stat_at(at, "", false)), Errno::Stale);
    assert!(k.parked_files().is_empty());
    assert_eq!(k.referenced_inodes(), 0);
    assert_eq!(errno(k.hold_inode(st.ino, st.generation)), Errno::Stale);
}

#[test]
fn rename_rules() {
    let k = boot();
    let p = k.spawn(Credentials::root());
    p.mkdir("/d", 0o755).unwrap();
    p.mkdir("/d/sub", 0o755).unwrap();
    p.mkdir("/e", 0o755).unwrap();
    write_file(&p, "/f", b"f", 0o644);
    write_file(&p, "/g", b"g", 0o644);
    let no_replace = RenameFlags { no_replace: true };
    assert_eq!(
        errno(p.rename_at(At::Root, "/f", At::Root, "/g", no_replace)),
        Errno::Exist
    );
    assert_eq!(errno(p.rename("/d", "/d/sub/x")), Errno::Inval);
    assert_eq!(errno(p.rename("/f", "/d")), Errno::IsDir);
    assert_eq!(errno(p.rename("/e", "/f")), Errno::NotDir);
    assert_eq!(errno(p.rename("/e", "/d")), Errno::NotEmpty);
    p.link("/f", "/f2").unwrap();
    p.rename("/f", "/f2").unwrap();
    assert_eq!(p.stat("/f").unwrap().nlink, 2, "two names of one file: nothing happens");
    p.rename("/f", "/g").unwrap();
    assert_eq!(read_file(&p, "/g").unwrap(), b"f");
    // A directory moved to another parent needs write permission on itself (its `..`).
    let user = k.spawn(Credentials::user(1000, 1000));
    p.mkdir("/u", 0o777).unwrap();
    p.mkdir("/u/ro", 0o555).unwrap();
    p.chown("/u/ro", Some(1000), Some(1000)).unwrap();
    p.mkdir("/u/to", 0o777).unwrap();
    assert_eq!(errno(user.rename("/u/ro", "/u/to/ro")), Errno::Acces);
    user.rename("/u/ro", "/u/ro2").unwrap();
}

#[test]
fn renames_over_a_file_never_bind_an_open_to_the_wrong_file() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    write_file(&root, "/f", b"0", 0o644);
    let stop = Arc::new(AtomicBool::new(false));
    let opens = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for w in 0..2u64 {
        let (k, stop) = (k.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let p = k.spawn(Credentials::root());
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let tmp = format!("/tmp{w}");
                let fd = p.open(&tmp, OpenFlags::create()).unwrap();
                let ino = p.fstat(fd).unwrap().ino;
                p.write(fd, ino.to_string().as_bytes()).unwrap();
                p.close(fd).unwrap();
                p.rename(&tmp, "/f").unwrap();
                n += 1;
            }
            n
        }));
    }
    for _ in 0..2 {
        let (k, stop, opens) = (k.clone(), stop.clone(), opens.clone());
        threads.push(std::thread::spawn(move || {
            let p = k.spawn(Credentials::root());
            while !stop.load(Ordering::Relaxed) {
                let fd = p.open("/f", OpenFlags::read_only()).expect("f always exists");
                let st = p.fstat(fd).expect("an open file has attributes");
                let mut buf = [0u8; 32];
                let n = p.pread(fd, &mut buf, 0).unwrap();
                let content = std::str::from_utf8(&buf[..n]).unwrap();
                if content != "0" {
                    assert_eq!(
                        content,
                        st.ino.to_string(),
                        "the open is bound to the file fstat describes"
                    );
                }
                p.close(fd).unwrap();
                opens.fetch_add(1, Ordering::Relaxed);
            }
            0
        }));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let renames: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(renames > 100 && opens.load(Ordering::Relaxed) > 100);
    assert!(k.parked_files().is_empty(), "nothing open: nothing parked");
    assert_eq!(k.referenced_inodes(), 0);
}

#[test]
fn fallocate_reserves_blocks_that_read_as_zeros() {
    let k = boot();
    let p = k.spawn(Credentials::root());
    let fd = p.open("/big", OpenFlags::create()).unwrap();
    let free = k.fs().stats().free_blocks;
    p.fallocate(fd, false, 0, 1 << 20).unwrap();
    let st = p.fstat(fd).unwrap();
    assert_eq!(st.size, 1 << 20);
    assert!(k.fs().stats().free_blocks + 256 <= free, "the blocks are taken");
    let mut buf = vec![1u8; 8192];
    assert_eq!(p.pread(fd, &mut buf, 4096).unwrap(), 8192);
    assert!(buf.iter().all(|&b| b == 0));
    p.fallocate(fd, true, 1 << 20, 1 << 20).unwrap();
    assert_eq!(p.fstat(fd).unwrap().size, 1 << 20, "KEEP_SIZE keeps the size");
    let ro = p.open("/big", OpenFlags::read_only()).unwrap();
    assert_eq!(errno(p.fallocate(ro, false, 0, 10)), Errno::BadF);
    assert_eq!(errno(p.fallocate(fd, false, 0, 0)), Errno::Inval);
}

/// A punched hole and a zeroed range through the page cache: dirty pages in the range are
/// dropped (never written back over freed blocks), the partial edges zeroed in the cache, and
/// what reaches the device after a sync is the same as what reads through the cache.
#[test]
fn punched_holes_and_zeroed_ranges_go_through_the_cache() {
    const B: u64 = 4096;
    let k = boot();
    let p = k.spawn(Credentials::root());
    let fd = p.open("/holes", OpenFlags::create()).unwrap();
    let ino = p.fstat(fd).unwrap().ino;
    let mut want: Vec<u8> = (0..16 * B).map(|i| (i % 251) as u8 + 1).collect();
    assert_eq!(p.pwrite(fd, &want, 0).unwrap(), want.len());
    let held = p.fstat(fd).unwrap().blocks;
    let modified = k.event_stats().of(EventKind::Modify).raised;
    // Dirty pages, not yet written back: blocks 4..9 go, blocks 3 and 9 keep their outer bytes.
    let (off, len) = (3 * B + 100, 6 * B);
    p.fallocate_mode(fd, FallocMode::PunchHole, off, len).unwrap();
    want[off as usize..(off + len) as usize].fill(0);
    let st = p.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (16 * B, held - 5));
    assert_eq!(
        k.event_stats().of(EventKind::Modify).raised,
        modified + 1,
        "a modify event"
    );
    let mut got = vec![0u8; want.len()];
    assert_eq!(p.pread(fd, &mut got, 0).unwrap(), want.len());
    assert!(got == want, "through the cache after the punch");
    // A zeroed range keeps its blocks.
    p.fallocate_mode(fd, FallocMode::ZeroRange { keep_size: true }, 10 * B + 7, 3 * B)
        .unwrap();
    want[(10 * B + 7) as usize..(13 * B + 7) as usize].fill(0);
    assert_eq!(p.fstat(fd).unwrap().blocks, held - 5);
    assert_eq!(p.pread(fd, &mut got, 0).unwrap(), want.len());
    assert!(got == want, "through the cache after the zeroing");
    k.sync().unwrap();
    assert_eq!(p.pread(fd, &mut got, 0).unwrap(), want.len());
    assert!(got == want, "through the cache after a sync");
    let mut on_disk = vec![0u8; want.len()];
    k.fs().read_at(ino, 0, &mut on_disk).unwrap();
    assert!(on_disk == want, "on the device after a sync");
    // Modes as Linux takes them; a descriptor not open for writing.
    assert_eq!(FallocMode::from_linux(0x03).unwrap(), FallocMode::PunchHole);
    assert_eq!(
        FallocMode::from_linux(0x10).unwrap(),
        FallocMode::ZeroRange { keep_size: false }
    );
    assert_eq!(
        errno(FallocMode::from_linux(0x02)),
        Errno::NotSup,
        "a punch must keep the size"
    );
    assert_eq!(errno(FallocMode::from_linux(0x08)), Errno::NotSup, "no collapse");
    assert_eq!(errno(FallocMode::from_linux(0x20)), Errno::NotSup, "no insert");
    assert_eq!(errno(FallocMode::from_linux(0x09)), Errno::Inval);
    assert_eq!(errno(FallocMode::from_linux(0x13)), Errno::NotSup);
    let ro = p.open("/holes", OpenFlags::read_only()).unwrap();
    assert_eq!(errno(p.fallocate_mode(ro, FallocMode::PunchHole, 0, 10)), Errno::BadF);
}

#[test]
fn renames_report_errors_in_the_order_linux_checks_them() {
    let k = boot();
    let p = k.spawn(Credentials::user(1000, 1000));
    p.mkdir("/d", 0o755).unwrap();
    write_file(&p, "/d/f", b"x", 0o644);
    // A directory into its own subtree is EINVAL, even onto a file there (before the kinds).
    assert_eq!(errno(p.rename("/d", "/d/f")), Errno::Inval);
    assert_eq!(errno(p.rename("/d", "/d/new")), Errno::Inval);
    // The source's directory is walked first: a file there is ENOTDIR though the
    // destination's directory is missing.
    assert_eq!(errno(p.rename("/d/f/x", "/missing/y")), Errno::NotDir);
    assert_eq!(errno(p.rename("/missing/x", "/d/f/y")), Errno::NoEnt);
    p.rename("/d", "/e").unwrap();
    assert_eq!(read_file(&p, "/e/f").unwrap(), b"x");
}
