//! The kernel through its system calls: files through the cache and the file system, processes,
//! permissions, grafts, crashes.

use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Errno, Kernel, KernelConfig, OpenFlags};

fn device(blocks: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(blocks));
    mkfs(
        &*dev,
        &MkfsOptions {
            blocks_per_group: 2048,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    dev
}

fn boot(dev: &Arc<MemDevice>) -> Arc<Kernel> {
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: None,
        ..KernelConfig::default()
    };
    Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn files_written_through_the_cache_read_back_and_survive_a_reboot() {
    let dev = device(8192);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    p.mkdir("/data", 0o755).unwrap();
    let fd = p.open("/data/a", OpenFlags::create()).unwrap();
    let data = pattern(300_000, 1);
    assert_eq!(p.write(fd, &data[..1000]).unwrap(), 1000);
    assert_eq!(p.write(fd, &data[1000..]).unwrap(), data.len() - 1000);
    p.pwrite(fd, b"patch", 70_000).unwrap();
    let mut expect = data.clone();
    expect[70_000..70_005].copy_from_slice(b"patch");
    let mut back = vec![0u8; expect.len() + 10];
    assert_eq!(p.pread(fd, &mut back, 0).unwrap(), expect.len());
    assert_eq!(&back[..expect.len()], &expect[..]);
    assert_eq!(p.fstat(fd).unwrap().size, expect.len() as u64);
    p.close(fd).unwrap();
    k.shutdown().unwrap();
    drop(k);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/data/a", OpenFlags::read_only()).unwrap();
    let mut back = vec![0u8; expect.len()];
    assert_eq!(p.read(fd, &mut back).unwrap(), expect.len());
    assert_eq!(back, expect);
    let names: Vec<String> = p.readdir("/data").unwrap().iter().map(|e| e.name_lossy()).collect();
    assert!(names.contains(&"a".to_string()));
}

#[test]
fn partial_writes_into_new_blocks_read_zeros_around_them() {
    let dev = device(4096);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/sparse", OpenFlags::create()).unwrap();
    p.pwrite(fd, b"xyz", 50_000).unwrap();
    let mut back = vec![1u8; 50_003];
    assert_eq!(p.pread(fd, &mut back, 0).unwrap(), 50_003);
    assert!(back[..50_000].iter().all(|&b| b == 0));
    assert_eq!(&back[50_000..], b"xyz");
    // Shrinking then growing shows zeros, not the old bytes.
    p.pwrite(fd, &[7u8; 100], 0).unwrap();
    p.ftruncate(fd, 10).unwrap();
    p.ftruncate(fd, 100).unwrap();
    let mut back = vec![1u8; 100];
    p.pread(fd, &mut back, 0).unwrap();
    assert!(
        back[..10].iter().all(|&b| b == 7) && back[10..].iter().all(|&b| b == 0),
        "{back:?}"
    );
    // The same when the file grows by a write past its end instead of ftruncate.
    p.pwrite(fd, &[7u8; 100], 0).unwrap();
    p.fsync(fd).unwrap();
    p.ftruncate(fd, 10).unwrap();
    k.cache().drop_clean().unwrap();
    p.pwrite(fd, b"!", 200).unwrap();
    let mut back = vec![1u8; 201];
    p.pread(fd, &mut back, 0).unwrap();
    assert!(
        back[..10].iter().all(|&b| b == 7) && back[10..200].iter().all(|&b| b == 0) && back[200] == b'!',
        "{back:?}"
    );
}

#[test]
fn fsynced_data_survives_a_power_cut() {
    let dev = device(4096);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/log", OpenFlags::create()).unwrap();
    let kept = pattern(20_000, 9);
    p.write(fd, &kept).unwrap();
    p.fsync(fd).unwrap();
    p.write(fd, &pattern(20_000, 3)).unwrap(); // not synced: may or may not survive
    for seed in 0..5 {
        let crashed = Arc::new(dev.crashed(seed));
        let k2 = boot(&crashed);
        let q = k2.spawn(Credentials::root());
        let fd = q.open("/log", OpenFlags::read_only()).unwrap();
        let mut back = vec![0u8; kept.len()];
        assert_eq!(q.read(fd, &mut back).unwrap(), kept.len());
        assert_eq!(back, kept, "seed {seed}");
        let report = vino_fs::fsck(&*crashed, false).unwrap();
        assert!(report.is_clean(), "seed {seed}: {report:?}");
    }
}

#[test]
fn permissions_are_checked() {
    let dev = device(4096);
    let k = boot(&dev);
    let root = k.spawn(Credentials::root());
    root.mkdir("/home", 0o777).unwrap();
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(1001, 1001));
    let fd = alice
        .open(
            "/home/secret",
            vino_kernel::OpenFlags {
                mode: 0o600,
                ..OpenFlags::create()
            },
        )
        .unwrap();
    alice.write(fd, b"mine").unwrap();
    let err = bob.open("/home/secret", OpenFlags::read_only()).unwrap_err();
    assert_eq!(err.errno, Errno::Acces);
    assert!(root.open("/home/secret", OpenFlags::read_only()).is_ok(), "root may");
    let err = bob.mkdir("/forbidden", 0o755).unwrap_err();
    assert_eq!(err.errno, Errno::Acces, "/ belongs to root");
    let ro = alice.open("/home/secret", OpenFlags::read_only()).unwrap();
    assert_eq!(alice.write(ro, b"x").unwrap_err().errno, Errno::BadF);
    assert_eq!(alice.read(99, &mut [0u8; 1]).unwrap_err().errno, Errno::BadF);
    // A process has no working directory: a relative path starts at the root.
    assert_eq!(
        alice.open("relative", OpenFlags::read_only()).unwrap_err().errno,
        Errno::NoEnt
    );
}

#[test]
fn grafts_are_checked_against_who_owns_what() {
    let dev = device(4096);
    let k = boot(&dev);
    let root = k.spawn(Credentials::root());
    root.mkdir("/home", 0o777).unwrap();
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(1001, 1001));
    let noswitch = vino_sdk::build_c_bytes(&vino_sdk::example_path("noswitch"), &Default::default());
    let elevator = vino_sdk::build_example("elevator", &Default::default()).unwrap();
    // Global graftpoints: privileged only.
    let err = alice.graft_load("disk.pick_request", &elevator).unwrap_err();
    assert_eq!(err.errno, Errno::Perm);
    root.graft_load("disk.pick_request", &elevator).unwrap();
    // Per-file placement: only the file's creator.
    let fd = alice
        .open(
            "/home/f",
            vino_kernel::OpenFlags {
                mode: 0o666,
                ..OpenFlags::create()
            },
        )
        .unwrap();
    let bfd = bob.open("/home/f", OpenFlags::read_write()).unwrap();
    if let Ok(noswitch) = noswitch {
        alice.graft_load(&format!("file.block_buddy/{fd}"), &noswitch).unwrap();
        let err = bob
            .graft_load(&format!("file.block_buddy/{bfd}"), &noswitch)
            .unwrap_err();
        assert_eq!(err.errno, Errno::Perm);
    }
    // Per-process and per-open-file graftpoints are not even visible to others.
    let ra = vino_sdk::build_example("sequential_ra", &Default::default()).unwrap();
    alice.graft_load(&format!("file.compute_ra/{fd}"), &ra).unwrap();
    assert!(bob.graft_stats(&format!("file.compute_ra/{fd}")).is_err() || bfd == fd);
    let hot = vino_sdk::build_example("hotlist_evict", &Default::default()).unwrap();
    alice.graft_load("vas.pick_victim", &hot).unwrap();
    assert_eq!(alice.graft_call("vas.pick_victim", "hot_add", &[42]).unwrap(), 1);
    let listed: Vec<String> = alice.graft_list().into_iter().map(|s| s.point).collect();
    assert!(listed.contains(&"vas.pick_victim".to_string()) && listed.contains(&"disk.pick_request".to_string()));
    // A process that exits takes its grafts and files with it.
    let alice_pid = alice.pid();
    drop(alice);
    k.exit(alice_pid);
    assert!(k.process(alice_pid).is_none());
    let still = root.graft_stats("disk.pick_request").unwrap();
    assert!(still.graft.is_some(), "root's graft stays");
    k.exit(root.pid());
    assert!(
        k.global_graftpoints().list().iter().all(|s| s.graft.is_none()),
        "root's graft went with it"
    );
}

#[test]
fn a_file_unlinked_while_open_lives_until_closed() {
    let dev = device(4096);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/tmpfile", OpenFlags::create()).unwrap();
    p.write(fd, b"still here").unwrap();
    p.unlink("/tmpfile").unwrap();
    assert_eq!(p.stat("/tmpfile").unwrap_err().errno, Errno::NoEnt);
    let mut back = [0u8; 10];
    assert_eq!(p.pread(fd, &mut back, 0).unwrap(), 10);
    assert_eq!(&back, b"still here");
    let free_before = k.fs().stats().free_inodes;
    p.close(fd).unwrap();
    assert_eq!(k.fs().stats().free_inodes, free_before + 1, "freed at the last close");
}

#[test]
fn a_full_disk_gives_a_short_write_then_an_error_and_loses_nothing() {
    let dev = device(600);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/big", OpenFlags::create()).unwrap();
    let chunk = pattern(64 * 1024, 5);
    let mut written = 0usize;
    let err = loop {
        match p.write(fd, &chunk) {
            Ok(n) if n == chunk.len() => written += n,
            Ok(n) => {
                written += n;
                break p.write(fd, &chunk).unwrap_err();
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno, Errno::NoSpc);
    p.fsync(fd).unwrap();
    let mut back = vec![0u8; written];
    assert_eq!(p.pread(fd, &mut back, 0).unwrap(), written);
    for (i, c) in back.chunks(chunk.len()).enumerate() {
        assert_eq!(c, &chunk[..c.len()], "chunk {i}");
    }
}

/// Files unlinked while open, waiting for their last close.
fn orphans(k: &Arc<Kernel>) -> Vec<String> {
    k.parked_files().iter().map(u64::to_string).collect()
}

#[test]
fn an_unlink_racing_the_last_close_frees_the_file() {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let dev = device(8192);
    let k = boot(&dev);
    let a = k.spawn(Credentials::root());
    let b = k.spawn(Credentials::root());
    let fd = a.open("/seed", OpenFlags::create()).unwrap();
    b.unlink("/seed").unwrap();
    a.close(fd).unwrap();
    let before = k.fs().stats();
    let go = Arc::new(Barrier::new(2));
    let (fd, done) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicBool::new(false)));
    let closer = {
        let (a, go, fd, done) = (a.clone(), go.clone(), fd.clone(), done.clone());
        std::thread::spawn(move || {
            loop {
                go.wait();
                if done.load(Ordering::Relaxed) {
                    return;
                }
                a.close(fd.load(Ordering::Relaxed)).unwrap();
                go.wait();
            }
        })
    };
    for _ in 0..5000 {
        let w = b.open("/f", OpenFlags::create()).unwrap();
        b.write(w, &[7u8; 5000]).unwrap();
        b.close(w).unwrap();
        fd.store(a.open("/f", OpenFlags::read_only()).unwrap(), Ordering::Relaxed);
        // a's last close and b's unlink at once.
        go.wait();
        b.unlink("/f").unwrap();
        go.wait();
    }
    done.store(true, Ordering::Relaxed);
    go.wait();
    closer.join().unwrap();
    assert_eq!(
        orphans(&k),
        Vec::<String>::new(),
        "files left waiting for a close that came already"
    );
    let after = k.fs().stats();
    assert_eq!(after.free_inodes, before.free_inodes);
    assert_eq!(after.free_blocks, before.free_blocks);
}

#[test]
fn failed_opens_leave_the_open_count_as_it_was() {
    let dev = device(4096);
    let k = boot(&dev);
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    root.mkdir("/d", 0o755).unwrap();
    let fd = root.open("/d/secret", OpenFlags::create()).unwrap();
    root.write(fd, &[1u8; 10_000]).unwrap();
    root.close(fd).unwrap();
    root.chmod("/d/secret", 0o600).unwrap();
    let free = k.fs().stats();
    // Opens that fail after the file was found: not allowed, a directory, exclusive.
    let denied = user.open("/d/secret", OpenFlags::read_only()).unwrap_err();
    assert_eq!(denied.errno, Errno::Acces);
    assert_eq!(
        root.open("/d", OpenFlags::read_write()).unwrap_err().errno,
        Errno::IsDir
    );
    let exclusive = OpenFlags {
        exclusive: true,
        ..OpenFlags::create()
    };
    assert_eq!(root.open("/d/secret", exclusive).unwrap_err().errno, Errno::Exist);
    // Nobody has the file open: the unlink frees it at once.
    root.unlink("/d/secret").unwrap();
    assert_eq!(orphans(&k), Vec::<String>::new());
    let after = k.fs().stats();
    assert_eq!(after.free_inodes, free.free_inodes + 1);
    assert!(after.free_blocks > free.free_blocks, "its blocks are free");
    // A file open twice, one open failed, unlinked: freed at the last real close.
    let fd = root.open("/d/f", OpenFlags::create()).unwrap();
    root.write(fd, &[2u8; 10_000]).unwrap();
    root.chmod("/d/f", 0o600).unwrap();
    assert_eq!(
        user.open("/d/f", OpenFlags::read_only()).unwrap_err().errno,
        Errno::Acces
    );
    root.unlink("/d/f").unwrap();
    assert_eq!(orphans(&k).len(), 1, "open: parked until closed");
    let free = k.fs().stats();
    root.close(fd).unwrap();
    assert_eq!(orphans(&k), Vec::<String>::new());
    let after = k.fs().stats();
    assert_eq!(after.free_inodes, free.free_inodes + 1);
    assert!(after.free_blocks > free.free_blocks, "its blocks are free");
}

#[test]
fn opens_racing_unlinks_leave_no_file_behind() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dev = device(8192);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/seed", OpenFlags::create()).unwrap();
    p.unlink("/seed").unwrap();
    p.close(fd).unwrap();
    let before = k.fs().stats();
    let done = Arc::new(AtomicBool::new(false));
    let opener = {
        let (k, done) = (k.clone(), done.clone());
        std::thread::spawn(move || {
            let a = k.spawn(Credentials::root());
            let mut opened = 0u64;
            while !done.load(Ordering::Relaxed) {
                // Fails (ENOENT, or the file went half way through) as often as not.
                if let Ok(fd) = a.open("/f", OpenFlags::read_only()) {
                    opened += 1;
                    a.close(fd).unwrap();
                }
            }
            opened
        })
    };
    let b = k.spawn(Credentials::root());
    for _ in 0..3000 {
        let _ = b.unlink("/f");
        let fd = b.open("/f", OpenFlags::create()).unwrap();
        b.write(fd, &[7u8; 5000]).unwrap();
        b.close(fd).unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let opened = opener.join().unwrap();
    assert!(opened > 0, "the opener never got the file");
    b.unlink("/f").unwrap();
    // Nothing is open: every file unlinked is gone for good.
    assert_eq!(
        orphans(&k),
        Vec::<String>::new(),
        "files left waiting for a close that never comes"
    );
    let after = k.fs().stats();
    assert_eq!(after.free_inodes, before.free_inodes);
    assert_eq!(after.free_blocks, before.free_blocks);
}

#[test]
fn a_size_the_file_system_cannot_read_is_an_error_not_an_empty_file() {
    use vino_cache::{Backing, IoCtx};
    use vino_kernel::FileBacking;
    let dev = device(4096);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    // Enough files that the last one's inode is in an inode block beyond those read with the
    // root's (16 blocks of 16 inodes are read together).
    const FILES: usize = 300;
    for i in 0..FILES {
        let fd = p.open(&format!("/f{i}"), OpenFlags::create()).unwrap();
        p.write(fd, &pattern(4096, i as u8)).unwrap();
        p.close(fd).unwrap();
    }
    let ino = k.fs().resolve(format!("/f{}", FILES - 1)).unwrap();
    k.shutdown().unwrap();
    drop((p, k));
    // After a reboot the file system has not read that inode yet: getting the file's size
    // reads the device, and the device fails.
    let k = boot(&dev);
    dev.set_dead(true);
    let backing = FileBacking::new(k.fs().clone(), ino);
    let mut buf = vec![0u8; 4096];
    assert!(backing.size().is_err());
    let got = k.cache().read(&IoCtx::new(1), ino, &backing, 0, &mut buf);
    assert!(
        got.is_err(),
        "a size that could not be read read as an empty file: {got:?}"
    );
    dev.set_dead(false);
    assert_eq!(
        k.cache().read(&IoCtx::new(1), ino, &backing, 0, &mut buf).unwrap(),
        4096
    );
    assert_eq!(buf, pattern(4096, (FILES - 1) as u8));
}

#[test]
fn a_read_after_the_file_system_stopped_is_an_io_error() {
    let dev = device(4096);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/f", OpenFlags::create()).unwrap();
    p.write(fd, &pattern(10_000, 1)).unwrap();
    p.fsync(fd).unwrap();
    let mut back = vec![0u8; 10_000];
    assert_eq!(p.pread(fd, &mut back, 0).unwrap(), 10_000);
    // A commit whose flush fails stops the file system; the file's pages are still cached.
    p.chmod("/f", 0o600).unwrap();
    dev.fail_flush(1);
    assert!(k.fs().commit().is_err());
    assert!(k.fs().stat(k.fs().root()).is_err(), "the file system stopped");
    assert_eq!(p.pread(fd, &mut back, 0).unwrap_err().errno, Errno::Io);
    assert_eq!(p.read(fd, &mut back).unwrap_err().errno, Errno::Io);
}

/// Any user may sync: with nothing written since, a sync or fsync costs the device no flush (the
/// scheduler sends none after the last), and one after a write still makes it durable.
#[test]
fn syncs_with_nothing_written_since_send_the_device_no_flush() {
    let dev = device(8192);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let fd = p.open("/f", OpenFlags::create()).unwrap();
    p.write(fd, b"durable").unwrap();
    k.sync().unwrap();
    assert_eq!(dev.unflushed_writes(), 0);
    let flushes = dev.stats().flushes;
    for _ in 0..10 {
        k.sync().unwrap();
        p.fsync(fd).unwrap();
    }
    assert_eq!(dev.stats().flushes, flushes, "nothing written: no flush");
    p.pwrite(fd, b"again", 0).unwrap();
    p.fsync(fd).unwrap();
    assert!(dev.stats().flushes > flushes);
    assert_eq!(dev.unflushed_writes(), 0, "the write is durable");
    assert!(k.scheduler().stats().flushes_elided > 0);
}

#[test]
fn the_file_systems_own_reads_and_writes_wait_in_the_schedulers_queue() {
    let dev = device(8192);
    let before = dev.stats();
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    // Metadata only: directories and empty files, then a commit (journal writes and flushes)
    // and a checkpoint (the blocks written home).
    for i in 0..40 {
        p.mkdir(&format!("/d{i}"), 0o755).unwrap();
        let fd = p.open(&format!("/d{i}/f"), OpenFlags::create()).unwrap();
        p.close(fd).unwrap();
    }
    k.sync().unwrap();
    k.shutdown().unwrap();
    let s = k.scheduler().stats();
    let d = dev.stats();
    let device_ops = (
        d.reads - before.reads,
        d.writes - before.writes,
        d.flushes - before.flushes,
    );
    assert!(
        s.writes > 0 && s.flushes > 0,
        "the commit went through the scheduler: {s:?}"
    );
    assert_eq!(
        (s.reads, s.writes, s.flushes),
        device_ops,
        "every device operation since boot (the mount's reads included) was a scheduler request"
    );
}

#[test]
fn a_large_read_of_an_uncached_file_reaches_the_device_as_large_requests() {
    // 16 MiB read cold in 1, 4 and 8 MiB reads: the device sees about one request per MiB
    // each time (the file's indirect blocks add a few: 24-30), never one per 4 KiB page (once
    // 3082 in 4 MiB reads: the read-ahead cap of 256 pages capped the read itself).
    let dev = device(16384);
    let k = Kernel::boot(
        dev.clone() as Arc<dyn BlockDevice>,
        &KernelConfig {
            cache_frames: 8192,
            writeback_every: None,
            ..KernelConfig::default()
        },
    )
    .unwrap();
    let p = k.spawn(Credentials::root());
    let data = pattern(16 << 20, 7);
    let fd = p.open("/big", OpenFlags::create()).unwrap();
    assert_eq!(p.write(fd, &data).unwrap(), data.len());
    p.fsync(fd).unwrap();
    for mib in [1usize, 4, 8] {
        k.drop_clean_pages().unwrap();
        let before = k.io_stats().reads;
        let mut buf = vec![0u8; mib << 20];
        for (i, chunk) in data.chunks(mib << 20).enumerate() {
            assert_eq!(p.pread(fd, &mut buf, (i * chunk.len()) as u64).unwrap(), chunk.len());
            assert!(buf == chunk, "{mib} MiB read {i}");
        }
        let requests = k.io_stats().reads - before;
        assert!(requests <= 32, "{mib} MiB reads of 16 MiB: {requests} device reads");
    }
}

#[test]
fn a_descriptors_graftpoints_live_as_long_as_the_descriptor() {
    let dev = device(8192);
    let k = boot(&dev);
    let alice = k.spawn(Credentials::user(1000, 1000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/home", 0o777).unwrap();
    let fd = alice.open("/home/f", OpenFlags::create()).unwrap();
    alice.mkdir("/home/d", 0o755).unwrap();
    let dfd = alice.open("/home/d", OpenFlags::directory()).unwrap();
    let points = |p: &vino_kernel::Process| -> Vec<String> {
        p.graft_list()
            .into_iter()
            .map(|s| s.point)
            .filter(|n| n.starts_with("file.") || n.starts_with("lock.grant/"))
            .collect()
    };
    // A regular file has all three; a directory only its locks'.
    let listed = points(&alice);
    for point in [
        format!("file.compute_ra/{fd}"),
        format!("file.block_buddy/{fd}"),
        format!("lock.grant/{fd}"),
        format!("lock.grant/{dfd}"),
    ] {
        assert!(listed.contains(&point), "{point} in {listed:?}");
    }
    for point in [format!("file.compute_ra/{dfd}"), format!("file.block_buddy/{dfd}")] {
        assert!(!listed.contains(&point), "{point} in {listed:?}");
        assert_eq!(alice.graft_stats(&point).unwrap_err().errno, Errno::NoEnt, "{point}");
    }
    // A read-ahead graft is the descriptor's: it goes when the descriptor closes, and the name
    // with it; the same number opened again is a new file's, with nothing bound.
    let ra = vino_sdk::build_example("sequential_ra", &Default::default()).unwrap();
    alice.graft_load(&format!("file.compute_ra/{fd}"), &ra).unwrap();
    let slot = alice.read_ahead(fd).unwrap();
    assert!(slot.info().graft.is_some());
    alice.close(fd).unwrap();
    assert!(slot.info().graft.is_none(), "unloaded at close");
    for point in [format!("file.compute_ra/{fd}"), format!("lock.grant/{fd}")] {
        assert_eq!(
            alice.graft_stats(&point).unwrap_err().errno,
            Errno::NoEnt,
            "{point} after close"
        );
        assert!(!points(&alice).contains(&point));
    }
    let again = alice.open("/home/f", OpenFlags::read_only()).unwrap();
    assert_eq!(again, fd);
    assert!(
        alice
            .graft_stats(&format!("file.compute_ra/{fd}"))
            .unwrap()
            .graft
            .is_none()
    );
    // Another user's process sees its own descriptors only.
    let bob = k.spawn(Credentials::user(1001, 1001));
    assert!(points(&bob).is_empty(), "{:?}", points(&bob));
}
