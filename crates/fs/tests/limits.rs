//! Full disks, exhausted inodes, failing devices and concurrent callers.

mod common;
use common::*;
use std::sync::Arc;
use vino_blockdev::{CrashOptions, MemDevice};
use vino_fs::*;

fn kind<T>(r: Result<T, FsError>) -> Result<T, FsErrorKind> {
    r.map_err(|e| e.kind())
}

#[test]
fn a_full_disk_refuses_new_blocks_and_loses_nothing() {
    let dev = fresh(
        600,
        &MkfsOptions {
            blocks_per_group: 1024,
            inodes_per_group: Some(32),
            ..Default::default()
        },
    );
    let fs = mount(&dev);
    let who = NewFile::by(1);
    let a = fs.create(fs.root(), "a", &who).unwrap();
    let keep = pattern(1, 200 * 4096);
    fs.write_at(a, 0, &keep).unwrap();
    fs.fsync(a).unwrap();
    // b takes what is left: a short write, then NoSpace.
    let b = fs.create(fs.root(), "b", &who).unwrap();
    let big = pattern(2, 1000 * 4096);
    let n = fs.write_at(b, 0, &big).unwrap();
    assert!(n > 0 && n < big.len(), "short write of {n}");
    assert_eq!(n % 4096, 0);
    assert_eq!(kind(fs.write_at(b, n as u64, &big[..4096])), Err(FsErrorKind::NoSpace));
    assert_eq!(fs.stat(b).unwrap().size, n as u64);
    assert_eq!(read_all(&fs, b), big[..n]);
    // A new directory needs a block too; a new empty file does not. The failed mkdir is undone
    // whole: its parent's attributes are as they were (not as the undone op left them).
    let root_before = fs.stat(fs.root()).unwrap();
    assert_eq!(kind(fs.mkdir(fs.root(), "d", &who)), Err(FsErrorKind::NoSpace));
    assert_eq!(fs.stat(fs.root()).unwrap(), root_before);
    assert!(
        fs.lookup(fs.root(), "d").is_err(),
        "the failed mkdir left nothing behind"
    );
    fs.create(fs.root(), "empty", &who).unwrap();
    assert_eq!(read_all(&fs, a), keep);
    fs.sync().unwrap();
    assert_clean(&*dev, "full disk");
    // Freeing b makes room at once (its blocks wait for a checkpoint, which the allocator forces).
    fs.unlink(fs.root(), "b").unwrap();
    let c = fs.create(fs.root(), "c", &who).unwrap();
    assert_eq!(fs.write_at(c, 0, &big[..n]).unwrap(), n);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after reuse");
    let fs = mount(&dev);
    assert_eq!(read_all(&fs, a), keep);
    assert_eq!(read_all(&fs, fs.resolve("/c").unwrap()), big[..n]);
}

#[test]
fn running_out_of_inodes() {
    let dev = fresh(
        1024,
        &MkfsOptions {
            blocks_per_group: 1024,
            inodes_per_group: Some(16),
            ..Default::default()
        },
    );
    let fs = mount(&dev);
    let who = NewFile::by(1);
    let mut made = Vec::new();
    loop {
        match fs.create(fs.root(), format!("f{}", made.len()), &who) {
            Ok(ino) => {
                fs.write_at(ino, 0, format!("file {}", made.len()).as_bytes()).unwrap();
                made.push(ino);
            }
            Err(e) => {
                assert_eq!(e.kind(), FsErrorKind::NoInodes);
                assert_eq!(e.errno(), 28);
                break;
            }
        }
    }
    assert_eq!(made.len(), 14, "16 inodes, root and lost+found taken");
    assert_eq!(kind(fs.mkdir(fs.root(), "d", &who)), Err(FsErrorKind::NoInodes));
    for (i, &ino) in made.iter().enumerate() {
        assert_eq!(read_all(&fs, ino), format!("file {i}").as_bytes());
    }
    fs.unlink(fs.root(), "f3").unwrap();
    fs.mkdir(fs.root(), "d", &who).unwrap();
    fs.unmount().unwrap();
    assert_clean(&*dev, "inodes exhausted");
}

#[test]
fn device_errors_stop_the_file_system_and_lose_nothing_durable() {
    for nth in 1..60u64 {
        let mem = fresh(2048, &small_opts(512));
        let fs = mount(&mem);
        let who = NewFile::by(1);
        let a = fs.create(fs.root(), "durable", &who).unwrap();
        let keep = pattern(nth, 30_000);
        fs.write_at(a, 0, &keep).unwrap();
        fs.fsync(a).unwrap();
        mem.fail_write(nth);
        let mut failed = false;
        for i in 0..40 {
            let r = (|| -> Result<(), FsError> {
                let f = fs.create(fs.root(), format!("f{i}"), &who)?;
                fs.write_at(f, 0, &pattern(i, 20_000))?;
                if i % 5 == 4 {
                    fs.fsync(f)?;
                }
                Ok(())
            })();
            if let Err(e) = r {
                assert_eq!(e.kind(), FsErrorKind::Io, "write #{nth}: {e}");
                failed = true;
                break;
            }
        }
        assert!(failed, "write #{nth} failed somewhere");
        drop(fs);
        mem.power_cut(nth, &CrashOptions::default());
        let fs = mount(&mem);
        assert_eq!(read_all(&fs, fs.resolve("/durable").unwrap()), keep, "write #{nth}");
        fs.unmount().unwrap();
        assert_clean(&*mem, &format!("after write #{nth} failed"));
    }
    // A failed commit stops the file system: later calls say so.
    let mem = fresh(2048, &small_opts(512));
    let fs = mount(&mem);
    fs.create(fs.root(), "x", &NewFile::by(1)).unwrap();
    mem.fail_flush(1);
    assert_eq!(kind(fs.commit()), Err(FsErrorKind::Io));
    let e = fs.create(fs.root(), "y", &NewFile::by(1)).unwrap_err();
    assert!(e.to_string().contains("stopped after an I/O error"), "{e}");
    assert!(fs.unmount().is_err());
}

#[test]
fn many_threads_at_once() {
    let dev = fresh(
        16384,
        &MkfsOptions {
            blocks_per_group: 4096,
            inodes_per_group: Some(256),
            ..Default::default()
        },
    );
    let fs = mount(&dev);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let fs = fs.clone();
            s.spawn(move || {
                let who = NewFile::by(t);
                let d = fs.mkdir(fs.root(), format!("t{t}"), &who).unwrap();
                for i in 0..40u64 {
                    let f = fs.create(d, format!("f{i}"), &who).unwrap();
                    fs.write_at(f, 0, &pattern(t * 1000 + i, (i as usize % 7) * 9000 + 100))
                        .unwrap();
                    if i % 3 == 0 && i > 0 {
                        fs.unlink(d, format!("f{}", i / 2)).ok();
                    }
                    if i % 10 == 0 {
                        fs.fsync(f).unwrap();
                    }
                }
                fs.rename(fs.root(), format!("t{t}"), fs.root(), format!("done{t}"))
                    .unwrap();
            });
        }
    });
    for t in 0..4u64 {
        for e in fs.readdir_path(format!("/done{t}")).unwrap() {
            let i: u64 = e.name_lossy()[1..].parse().unwrap();
            assert_eq!(
                read_all(&fs, e.ino),
                pattern(t * 1000 + i, (i as usize % 7) * 9000 + 100)
            );
        }
    }
    fs.unmount().unwrap();
    assert_clean(&*dev, "after the threads");
}

#[test]
fn mount_refuses_a_device_smaller_than_the_file_system() {
    let dev = fresh(2048, &small_opts(512));
    let image = dev.image();
    let small = Arc::new(MemDevice::from_image(image[..1024 * 4096].to_vec()).unwrap());
    let d: Arc<dyn vino_blockdev::BlockDevice> = small;
    let e = FileSystem::mount(d, runtime(), &MountOptions::default())
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), FsErrorKind::Corrupt);
    assert!(e.to_string().contains("2048 blocks"), "{e}");
}

/// Writers on a disk whose free blocks all wait for a checkpoint: each one that finds no space
/// makes room (commit, checkpoint) or finds that another has made it meanwhile, and none is
/// refused while most of the disk is reusable.
#[test]
fn writers_racing_for_room_on_a_full_disk_are_never_refused() {
    let dev = fresh(
        1024,
        &MkfsOptions {
            blocks_per_group: 1024,
            inodes_per_group: Some(64),
            ..Default::default()
        },
    );
    let fs = mount(&dev);
    let data = pattern(7, 32 * 4096);
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let (fs, data) = (fs.clone(), &data);
            s.spawn(move || {
                let who = NewFile::by(t);
                for i in 0..400 {
                    let name = format!("w{t}");
                    let f = fs.create(fs.root(), &name, &who).unwrap();
                    let n = fs.write_at(f, 0, data);
                    assert_eq!(kind(n), Ok(data.len()), "writer {t}, file {i}");
                    fs.unlink(fs.root(), &name).unwrap();
                }
            });
        }
    });
    assert!(fs.stats().meta.commits >= 10, "the disk filled again and again");
    fs.unmount().unwrap();
    assert_clean(&*dev, "after the writers");
}
