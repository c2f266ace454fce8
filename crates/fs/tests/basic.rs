//! Namespace operations, the uncached data path, remount, and fsck on the results.

mod common;
use common::*;
use vino_fs::*;

#[test]
fn fresh_file_system_is_clean_and_has_lost_found() {
    let dev = fresh(4096, &small_opts(1024));
    assert_clean(&*dev, "after mkfs");
    let fs = mount(&dev);
    let names: Vec<String> = fs.readdir(fs.root()).unwrap().iter().map(|e| e.name_lossy()).collect();
    assert_eq!(names, ["lost+found"]);
    assert_eq!(fs.stat(fs.root()).unwrap().nlink, 3);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after unmount");
}

#[test]
fn files_directories_and_contents_survive_remount() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let who = NewFile::by(7);
    let d = fs.mkdir_path("/docs", &who).unwrap();
    let sub = fs.mkdir(d, "sub", &who).unwrap();
    let f = fs.create(sub, "big", &who).unwrap();
    let data = pattern(1, 5_000_000);
    assert_eq!(fs.write_at(f, 0, &data).unwrap(), data.len());
    let small = fs.create_path("/docs/small", &who).unwrap();
    fs.write_at(small, 10, b"hello").unwrap();
    assert_eq!(fs.stat(small).unwrap().size, 15);
    let mut buf = [9u8; 15];
    fs.read_at(small, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"\0\0\0\0\0\0\0\0\0\0hello");
    assert_eq!(fs.stat(d).unwrap().nlink, 3);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after unmount");

    let fs = mount(&dev);
    let f2 = fs.resolve("/docs/sub/big").unwrap();
    assert_eq!(f2, f);
    assert_eq!(read_all(&fs, f), data);
    let st = fs.stat(f).unwrap();
    assert_eq!(st.creator, 7);
    assert_eq!(
        st.blocks,
        5_000_000u64.div_ceil(4096) + 3,
        "data + indirect + double indirect + one second-level"
    );
    fs.truncate(f, 100_000).unwrap();
    assert_eq!(read_all(&fs, f), data[..100_000]);
    fs.truncate(f, 200_000).unwrap();
    let back = read_all(&fs, f);
    assert_eq!(back[..100_000], data[..100_000]);
    assert!(back[100_000..].iter().all(|&b| b == 0), "growing shows zeros");
    fs.sync().unwrap();
    assert_clean(&*dev, "after truncates and sync (while mounted)");
    fs.unmount().unwrap();
    assert_clean(&*dev, "after second unmount");
}

#[test]
fn namespace_errors() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let who = NewFile::by(1);
    let r = fs.root();
    let a = fs.create(r, "a", &who).unwrap();
    let d = fs.mkdir(r, "d", &who).unwrap();
    fs.create(d, "inner", &who).unwrap();
    let k = |e: FsError| e.kind();
    assert_eq!(fs.create(r, "a", &who).map_err(k), Err(FsErrorKind::Exists));
    assert_eq!(fs.mkdir(r, "a", &who).map_err(k), Err(FsErrorKind::Exists));
    assert_eq!(fs.lookup(r, "zz").map_err(k), Err(FsErrorKind::NotFound));
    assert_eq!(fs.create(a, "x", &who).map_err(k), Err(FsErrorKind::NotADirectory));
    assert_eq!(fs.unlink(r, "d").map_err(k), Err(FsErrorKind::IsADirectory));
    assert_eq!(fs.rmdir(r, "a").map_err(k), Err(FsErrorKind::NotADirectory));
    assert_eq!(fs.rmdir(r, "d").map_err(k), Err(FsErrorKind::NotEmpty));
    assert_eq!(
        fs.create(r, "x".repeat(256), &who).map_err(k),
        Err(FsErrorKind::NameTooLong)
    );
    fs.create(r, "x".repeat(255), &who).unwrap();
    assert_eq!(fs.create(r, "a/b", &who).map_err(k), Err(FsErrorKind::InvalidArgument));
    assert_eq!(fs.create(r, "", &who).map_err(k), Err(FsErrorKind::InvalidArgument));
    assert_eq!(fs.create(r, "..", &who).map_err(k), Err(FsErrorKind::InvalidArgument));
    assert_eq!(
        fs.rename(r, "d", d, "moved").map_err(k),
        Err(FsErrorKind::InvalidArgument),
        "into itself"
    );
    let deep = fs.mkdir(d, "deep", &who).unwrap();
    assert_eq!(
        fs.rename(r, "d", deep, "moved").map_err(k),
        Err(FsErrorKind::InvalidArgument),
        "into its subtree"
    );
    assert_eq!(fs.rename(r, "a", r, "d").map_err(k), Err(FsErrorKind::IsADirectory));
    assert_eq!(fs.rename(d, "deep", r, "a").map_err(k), Err(FsErrorKind::NotADirectory));
    let e = fs.mkdir(r, "e", &who).unwrap();
    assert_eq!(fs.rename(r, "e", r, "d").map_err(k), Err(FsErrorKind::NotEmpty));
    assert_eq!(fs.read_at(d, 0, &mut [0; 4]).map_err(k), Err(FsErrorKind::IsADirectory));
    assert_eq!(
        fs.write_at(a, MAX_FILE_SIZE, b"x").map_err(k),
        Err(FsErrorKind::FileTooLarge)
    );
    assert_eq!(fs.resolve("relative").map_err(k), Err(FsErrorKind::InvalidArgument));
    assert_eq!(fs.stat(999_999).map_err(k), Err(FsErrorKind::NotFound));
    // Renames that work: over a file, a directory over an empty one, across directories.
    let b = fs.create(r, "b", &who).unwrap();
    fs.write_at(b, 0, b"bbbb").unwrap();
    fs.rename(r, "b", r, "a").unwrap();
    assert_eq!(fs.lookup(r, "a").unwrap(), b);
    assert_eq!(
        fs.stat(a).map_err(k),
        Err(FsErrorKind::NotFound),
        "the replaced file is gone"
    );
    fs.rmdir(d, "deep").unwrap();
    let f = fs.mkdir(r, "f", &who).unwrap();
    fs.rename(r, "e", r, "f").unwrap();
    assert_eq!(fs.lookup(r, "f").unwrap(), e);
    assert_eq!(fs.stat(f).map_err(k), Err(FsErrorKind::NotFound));
    fs.rename(r, "f", d, "e2").unwrap();
    assert_eq!(fs.resolve("/d/e2/..").unwrap(), d);
    assert_eq!(fs.stat(d).unwrap().nlink, 3);
    assert_eq!(fs.stat(r).unwrap().nlink, 4, "lost+found and d");
    fs.rename_path("/a", "/d/e2/a").unwrap();
    assert_eq!(fs.resolve("/d/e2/a").unwrap(), b);
    // Hard links.
    fs.link(b, r, "hard").unwrap();
    assert_eq!(fs.stat(b).unwrap().nlink, 2);
    fs.unlink_path("/d/e2/a").unwrap();
    assert_eq!(fs.stat(b).unwrap().nlink, 1);
    assert_eq!(read_all(&fs, b), b"bbbb");
    fs.sync().unwrap();
    assert_clean(&**fs.device(), "after the error cases");
}

#[test]
fn large_directories_grow_and_shrink_back_to_clean() {
    let dev = fresh(
        8192,
        &MkfsOptions {
            blocks_per_group: 2048,
            inodes_per_group: Some(1024),
            ..Default::default()
        },
    );
    let fs = mount(&dev);
    let who = NewFile::by(1);
    let d = fs.mkdir(fs.root(), "many", &who).unwrap();
    for i in 0..2000 {
        fs.create(d, format!("file-with-a-longish-name-{i:05}"), &who).unwrap();
    }
    assert!(fs.stat(d).unwrap().size > 12 * 4096, "past the direct blocks");
    assert_eq!(fs.readdir(d).unwrap().len(), 2000);
    fs.sync().unwrap();
    assert_clean(&*dev, "big directory");
    for i in (0..2000).step_by(2) {
        fs.unlink(d, format!("file-with-a-longish-name-{i:05}")).unwrap();
    }
    assert_eq!(fs.readdir(d).unwrap().len(), 1000);
    assert_eq!(
        fs.lookup(d, "file-with-a-longish-name-01999")
            .map(|_| ())
            .map_err(|e| e.kind()),
        Ok(())
    );
    for i in (1..2000).step_by(2) {
        fs.unlink(d, format!("file-with-a-longish-name-{i:05}")).unwrap();
    }
    fs.rmdir(fs.root(), "many").unwrap();
    fs.unmount().unwrap();
    assert_clean(&*dev, "after emptying");
    let fs = mount(&dev);
    let st = fs.stats();
    assert_eq!(st.free_inodes, st.inodes - 2);
}

#[test]
fn the_data_hook_runs_before_a_commit_with_the_files_that_got_blocks() {
    use std::sync::{Arc, Mutex};
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let seen: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
    let s = seen.clone();
    fs.set_data_hook(Some(Arc::new(move |inos: &[u64]| {
        s.lock().unwrap().push(inos.to_vec());
        Ok(())
    })));
    let who = NewFile::by(1);
    let a = fs.create(fs.root(), "a", &who).unwrap();
    let b = fs.create(fs.root(), "b", &who).unwrap();
    fs.allocate(a, 0).unwrap();
    let first = fs.allocate_block(b, 3).unwrap();
    assert!(first.fresh);
    assert_eq!(
        fs.allocate_block(b, 3).unwrap(),
        Allocation {
            block: first.block,
            fresh: false
        }
    );
    assert_eq!(fs.locate(b, 3).unwrap(), Some(first.block));
    assert_eq!(fs.locate(b, 2).unwrap(), None);
    fs.extend_size(b, 4 * 4096).unwrap();
    fs.fsync(b).unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![vec![a, b]]);
    // A hook that fails stops the commit; nothing is lost in memory.
    fs.set_data_hook(Some(Arc::new(|_: &[u64]| Err(std::io::Error::other("cache says no")))));
    fs.allocate(a, 1).unwrap();
    assert_eq!(fs.commit().map_err(|e| e.kind()), Err(FsErrorKind::Io));
    fs.set_data_hook(None);
    fs.commit().unwrap();
    // What a page cache above asks: the size, and where blocks are.
    assert_eq!(fs.stat(b).unwrap().size, 4 * 4096);
    assert_eq!(fs.locate(b, 3).unwrap(), Some(first.block));
    assert_eq!(fs.locate(b, 0).unwrap(), None);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after allocations through the cache interface");
}

#[test]
fn commits_and_checkpoints_are_counted_and_lazy() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let who = NewFile::by(1);
    for i in 0..5 {
        let f = fs.create(fs.root(), format!("f{i}"), &who).unwrap();
        fs.write_at(f, 0, b"x").unwrap();
        fs.fsync(f).unwrap();
    }
    let s = fs.stats();
    assert_eq!(s.meta.commits, 5);
    assert_eq!(s.meta.checkpoints, 0, "the journal had room: nothing written home yet");
    fs.sync().unwrap();
    let s = fs.stats();
    assert_eq!(s.meta.checkpoints, 1);
    assert!(s.meta.checkpointed_blocks > 0);
    fs.fsync(fs.resolve("/f0").unwrap()).unwrap();
    assert_eq!(fs.stats().meta.commits, 5, "nothing to commit");
    // Without unmount, mount replays the five transactions... none: they were checkpointed.
    drop(fs);
    let fs = mount(&dev);
    assert_eq!(fs.stats().replayed_transactions, 0);
    let f = fs.create(fs.root(), "g", &who).unwrap();
    fs.fsync(f).unwrap();
    drop(fs);
    let fs = mount(&dev);
    assert_eq!(fs.stats().replayed_transactions, 1);
    assert!(fs.resolve("/g").is_ok());
}

#[test]
fn mkfs_checks_its_options() {
    use vino_blockdev::MemDevice;
    let tiny = MemDevice::new(64);
    assert_eq!(
        mkfs(&tiny, &MkfsOptions::default()).map_err(|e| e.kind()).unwrap_err(),
        FsErrorKind::InvalidArgument
    );
    let dev = MemDevice::new(4096);
    let e = mkfs(
        &dev,
        &MkfsOptions {
            journal_blocks: Some(40),
            blocks_per_group: 256,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("too small"), "{e}");
    let e = mkfs(
        &dev,
        &MkfsOptions {
            journal_blocks: Some(5000),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    // A device smaller than one group gets one group; a short last group is dropped.
    let r = mkfs(&dev, &MkfsOptions::default()).unwrap();
    assert_eq!((r.groups, r.block_count), (1, 4096));
    let r = mkfs(&MemDevice::new(1024 + 10), &small_opts(512)).unwrap();
    assert_eq!((r.groups, r.block_count), (2, 1024));
    let r = mkfs(&dev, &small_opts(1024)).unwrap();
    assert_eq!(r.maxbpg, 256);
    assert_eq!(r.inodes, 4 * 64);
    assert_eq!(r.free_blocks, r.data_blocks - 2);
}

#[test]
fn a_large_image_file_with_default_geometry() {
    use std::sync::Arc;
    use vino_blockdev::{BlockDevice, FileDevice};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fs.img");
    let dev = Arc::new(FileDevice::create(&path, 4 << 30).unwrap());
    let r = mkfs(&*dev, &MkfsOptions::default()).unwrap();
    assert_eq!((r.groups, r.blocks_per_group, r.journal_blocks), (32, 32768, 8192));
    let d: Arc<dyn BlockDevice> = dev.clone();
    let fs = FileSystem::mount(d, runtime(), &MountOptions::default()).unwrap();
    let who = NewFile::by(1);
    let f = fs.create_path("/far", &who).unwrap();
    // A sparse file reaching into the double indirect blocks.
    let at = 3u64 << 30;
    fs.write_at(f, at, b"the end").unwrap();
    let mut buf = [1u8; 7];
    fs.read_at(f, at, &mut buf).unwrap();
    assert_eq!(&buf, b"the end");
    fs.read_at(f, 12345, &mut buf).unwrap();
    assert_eq!(buf, [0; 7]);
    assert_eq!(
        fs.stat(f).unwrap().blocks,
        3,
        "one data block, its indirect and double indirect"
    );
    fs.unmount().unwrap();
    let report = fsck(&*dev, false).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.files, 1);
}

/// A stat of one file of a directory reads the inode table blocks after it too, so stats of
/// its neighbours read nothing more; and read-ahead never takes the device's copy of a block
/// whose newer contents are only in the journal (committed, not yet written home), even once
/// the small metadata cache has dropped it.
#[test]
fn inode_table_blocks_are_read_ahead_without_shadowing_committed_ones() {
    let dev = fresh(
        16384,
        &MkfsOptions {
            blocks_per_group: 8192,
            inodes_per_group: Some(2048),
            ..Default::default()
        },
    );
    let opts = vino_fs::MountOptions {
        meta_cache_blocks: 64,
        ..Default::default()
    };
    let fs = mount_with(&dev, &opts);
    let who = NewFile::by(1);
    let d = fs.mkdir(fs.root(), "d", &who).unwrap();
    let files: Vec<u64> = (0..1000)
        .map(|i| fs.create(d, format!("f{i}"), &who).unwrap())
        .collect();
    fs.sync().unwrap();
    // Files whose inodes sit in every other table block get a size, committed but not
    // checkpointed: those blocks' home copies still say size 0, and each lies just after a
    // block with nothing committed, which a stat reads from the device with read-ahead.
    let size = |ino: u64| if (ino - 1) / 16 % 2 == 1 { ino % 50 + 1 } else { 0 };
    for &ino in &files {
        if size(ino) > 0 {
            fs.write_at(ino, 0, &vec![7u8; size(ino) as usize]).unwrap();
        }
    }
    fs.commit().unwrap();
    // More work elsewhere makes the 64-block metadata cache drop most clean blocks, the
    // committed ones too; every stat must still see the committed size.
    let e = fs.mkdir(fs.root(), "e", &who).unwrap();
    for i in 0..300 {
        let f = fs.create(e, format!("g{i}"), &who).unwrap();
        fs.write_at(f, 0, b"x").unwrap();
    }
    for &ino in &files {
        assert_eq!(fs.stat(ino).unwrap().size, size(ino), "inode {ino}");
    }
    drop(fs);
    // Mounted again (the journal replayed), a walk of the inodes reads each table block once
    // at most, 16 at a time.
    let fs = mount(&dev);
    let before = fs.stats().meta.metadata_reads;
    for &ino in &files {
        assert_eq!(fs.stat(ino).unwrap().size, size(ino), "inode {ino} after mount");
    }
    let reads = fs.stats().meta.metadata_reads - before;
    let table_blocks = 1000 / 16 + 1;
    assert!(
        reads <= table_blocks / 16 + 2,
        "{reads} metadata reads for {table_blocks} inode table blocks"
    );
    drop(fs);
    // A walk that only reads keeps a small metadata cache within its bound.
    let fs = mount_with(&dev, &opts);
    for &ino in &files {
        assert_eq!(fs.stat(ino).unwrap().size, size(ino), "inode {ino}, small cache");
        assert!(
            fs.stats().meta_cached_blocks <= 64,
            "{} metadata blocks cached",
            fs.stats().meta_cached_blocks
        );
    }
    assert_clean(&*dev, "after the walk");
}
