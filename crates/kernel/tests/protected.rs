//! Names in shared directories, through the kernel's system calls (what the socket and VINO
//! processes reach): Linux's `protected_hardlinks`, `protected_symlinks`, `protected_fifos` and
//! `protected_regular`, each on by default and each allowed again when configured off; and a
//! user who hard-links one file into root's sticky `/tmp` under long names stops at its link
//! quota with EDQUOT, leaving the disk to others and root's reserve to root.

use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, MountOptions, Quota, fsck, mkfs};
use vino_kernel::{Credentials, Errno, FileType, Kernel, KernelConfig, OpenFlags, Process, Protected};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

fn boot_on(dev: &Arc<MemDevice>, protect: Protected, quota: Quota) -> Arc<Kernel> {
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: None,
        protect,
        mount: MountOptions {
            quota,
            ..MountOptions::default()
        },
        ..KernelConfig::default()
    };
    Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap()
}

fn device(blocks: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(blocks));
    let opts = MkfsOptions {
        blocks_per_group: 2048,
        ..MkfsOptions::default()
    };
    mkfs(&*dev, &opts).unwrap();
    dev
}

/// A kernel with `/tmp` (root's, 1777) and a home for Alice and Bob each.
fn boot(protect: Protected) -> Arc<Kernel> {
    let k = boot_on(&device(8192), protect, Quota::none());
    let root = k.spawn(Credentials::root());
    root.mkdir("/tmp", 0o1777).unwrap();
    for uid in [ALICE, BOB] {
        let home = format!("/home-{uid}");
        root.mkdir(&home, 0o755).unwrap();
        root.chown(&home, Some(uid), Some(uid)).unwrap();
    }
    k.exit(root.pid());
    k
}

fn user(k: &Arc<Kernel>, uid: u32) -> Arc<Process> {
    k.spawn(Credentials::user(uid, uid))
}

fn make(p: &Process, path: &str, mode: u16) {
    let fd = p.open(path, OpenFlags::create()).unwrap();
    p.close(fd).unwrap();
    p.chmod(path, mode).unwrap();
}

fn errno<T: std::fmt::Debug>(r: Result<T, vino_kernel::SysError>) -> Errno {
    r.expect_err("the call should fail").errno
}

#[test]
fn protected_hardlinks_keep_users_from_pinning_others_files() {
    let k = boot(Protected::default());
    let (alice, bob) = (user(&k, ALICE), user(&k, BOB));
    make(&alice, "/home-1000/secret", 0o600);
    make(&alice, "/home-1000/shared", 0o666);
    assert_eq!(errno(bob.link("/home-1000/secret", "/home-1001/pin")), Errno::Perm);
    assert_eq!(errno(bob.link("/home-1000/secret", "/tmp/pin")), Errno::Perm);
    // A name that exists is EEXIST first, as on Linux.
    make(&bob, "/home-1001/mine", 0o600);
    assert_eq!(errno(bob.link("/home-1000/secret", "/home-1001/mine")), Errno::Exist);
    // What Bob may read and write he may link; his own files, and root anything.
    bob.link("/home-1000/shared", "/home-1001/shared").unwrap();
    bob.link("/home-1001/mine", "/tmp/mine").unwrap();
    let root = k.spawn(Credentials::root());
    root.link("/home-1000/secret", "/root-link").unwrap();
    // Off, as Linux's own default.
    let k = boot(Protected::off());
    let (alice, bob) = (user(&k, ALICE), user(&k, BOB));
    make(&alice, "/home-1000/secret", 0o600);
    bob.link("/home-1000/secret", "/home-1001/pin").unwrap();
}

#[test]
fn protected_symlinks_are_not_followed_in_sticky_world_writable_directories() {
    for on in [true, false] {
        let protect = Protected {
            symlinks: on,
            ..Protected::default()
        };
        let k = boot(protect);
        let (alice, bob) = (user(&k, ALICE), user(&k, BOB));
        make(&alice, "/home-1000/f", 0o644);
        bob.symlink("/home-1000/f", "/tmp/trap").unwrap();
        let root = k.spawn(Credentials::root());
        for p in [&alice, &root] {
            let r = p.stat("/tmp/trap");
            if on {
                assert_eq!(errno(r), Errno::Acces);
                assert_eq!(errno(p.open("/tmp/trap", OpenFlags::read_only())), Errno::Acces);
            } else {
                assert_eq!(r.unwrap().kind, FileType::Regular);
            }
            // The link itself is still seen.
            assert_eq!(p.lstat("/tmp/trap").unwrap().kind, FileType::Symlink);
        }
        // Its owner follows it; so does everyone in a directory that is not sticky.
        assert_eq!(bob.stat("/tmp/trap").unwrap().kind, FileType::Regular);
        bob.symlink("/home-1000/f", "/home-1001/link").unwrap();
        assert_eq!(alice.stat("/home-1001/link").unwrap().kind, FileType::Regular);
        // A dangling planted link does not make O_CREAT create where it points.
        bob.symlink("/home-1000/made", "/tmp/dangling").unwrap();
        let r = alice.open("/tmp/dangling", OpenFlags::create());
        if on {
            assert_eq!(errno(r), Errno::Acces);
            assert_eq!(errno(alice.stat("/home-1000/made")), Errno::NoEnt);
        } else {
            r.unwrap();
        }
    }
}

#[test]
fn protected_fifos_and_regular_refuse_o_creat_of_others_files_in_sticky_directories() {
    for on in [true, false] {
        let protect = if on { Protected::default() } else { Protected::off() };
        let k = boot(protect);
        let (alice, bob) = (user(&k, ALICE), user(&k, BOB));
        make(&bob, "/tmp/file", 0o666);
        bob.mknod_at(vino_kernel::At::Root, "/tmp/fifo", FileType::Fifo, 0o666, 0)
            .unwrap();
        let r = alice.open("/tmp/file", OpenFlags::create());
        let f = alice.open("/tmp/fifo", OpenFlags::create());
        if on {
            assert_eq!(errno(r), Errno::Acces);
            assert_eq!(errno(f), Errno::Acces);
        } else {
            r.unwrap();
            // Past the rule: VINO does not open FIFOs itself.
            assert_eq!(errno(f), Errno::NxIo);
        }
        // Without O_CREAT, and for the owner, it opens as before.
        let rw = OpenFlags {
            write: true,
            ..OpenFlags::read_only()
        };
        alice.open("/tmp/file", rw).unwrap();
        bob.open("/tmp/file", OpenFlags::create()).unwrap();
    }
    // Level 2 of protected_regular covers a sticky group-writable directory; level 1 does not.
    for (level, refused) in [(2, true), (1, false)] {
        let k = boot(Protected {
            regular: level,
            ..Protected::default()
        });
        let root = k.spawn(Credentials::root());
        root.mkdir("/shared", 0o1770).unwrap();
        root.chown("/shared", None, Some(50)).unwrap();
        let cred = |uid| Credentials::user(uid, uid).with_groups(vec![50]);
        let (alice, bob) = (k.spawn(cred(ALICE)), k.spawn(cred(BOB)));
        make(&bob, "/shared/file", 0o666);
        let r = alice.open("/shared/file", OpenFlags::create());
        assert_eq!(r.is_err(), refused, "protected_regular = {level}");
    }
}

#[test]
fn link_fill_into_roots_tmp_stops_at_the_users_link_quota() {
    let dev = device(4096);
    let quota = Quota {
        user_blocks: Some(400),
        user_links: Some(300),
        root_reserve_percent: 10,
        ..Quota::default()
    };
    let k = boot_on(&dev, Protected::default(), quota);
    let root = k.spawn(Credentials::root());
    root.mkdir("/tmp", 0o1777).unwrap();
    let (alice, bob) = (user(&k, ALICE), user(&k, BOB));
    make(&alice, "/tmp/seed", 0o600);
    let mut n = 0;
    let e = loop {
        match alice.link("/tmp/seed", &format!("/tmp/{n:0>250}")) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!((e.errno, n), (Errno::DQuot, 300));
    // Bob (to his quota) and root still make files; the directory took a few blocks only.
    let fd = bob.open("/tmp/bob", OpenFlags::create()).unwrap();
    assert_eq!(bob.write(fd, &vec![1u8; 256 << 10]).unwrap(), 256 << 10);
    make(&root, "/tmp/root", 0o644);
    assert!(root.stat("/tmp").unwrap().blocks <= 24);
    k.fs().verify_quota().unwrap();
    // After removing the names Alice links again.
    alice.unlink(&format!("/tmp/{:0>250}", 0)).unwrap();
    alice.link("/tmp/seed", "/tmp/again").unwrap();
    k.shutdown().unwrap();
    drop(k);
    let report = fsck(&*dev, false).unwrap();
    assert!(report.is_clean(), "{report}");
}
