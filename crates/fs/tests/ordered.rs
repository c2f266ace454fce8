//! Ordered mode: whatever makes the running transaction commit, the data hook is asked first
//! for the files that got blocks or a new size, so a crash never shows a file another file's
//! old bytes.

mod common;
use common::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::*;

/// Stands for the kernel's page cache: data written to it waits in memory until the file
/// system's data hook asks for its file, then goes to the device (not flushed: the commit
/// flushes before it writes the journal).
/// Writes waiting in the stand-in cache, by inode: (offset, bytes).
type Pending = HashMap<u64, Vec<(u64, Vec<u8>)>>;

struct Cache {
    dev: Arc<MemDevice>,
    pending: Mutex<Pending>,
    asked: Mutex<Vec<u64>>,
}

impl Cache {
    fn new(dev: &Arc<MemDevice>) -> Arc<Cache> {
        Arc::new(Cache {
            dev: dev.clone(),
            pending: Mutex::default(),
            asked: Mutex::default(),
        })
    }

    fn write(&self, ino: u64, block: u64, data: &[u8]) {
        self.pending.lock().entry(ino).or_default().push((block, data.to_vec()));
    }

    fn hook(self: &Arc<Self>) -> DataHook {
        let cache = self.clone();
        Arc::new(move |inos: &[u64]| {
            for ino in inos {
                cache.asked.lock().push(*ino);
                for (block, data) in cache.pending.lock().remove(ino).unwrap_or_default() {
                    cache.dev.write_blocks(block, &data)?;
                }
            }
            Ok(())
        })
    }
}

fn no_space<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r.map_err(|e| e.kind()), Err(FsErrorKind::NoSpace))
}

/// Mounts `dev` (of `blocks` blocks) with no commit by size, and leaves every free block
/// holding another file's bytes (0xAB): a file written over the whole disk, synced, removed,
/// synced again (its blocks are free once the removal is checkpointed).
fn mount_over_stale_blocks(dev: &Arc<MemDevice>, blocks: usize) -> Arc<FileSystem> {
    let fs = mount_with(
        dev,
        &MountOptions {
            commit_blocks: Some(usize::MAX),
            ..Default::default()
        },
    );
    let old = fs.create(fs.root(), "old", &NewFile::by(1)).unwrap();
    let n = fs.write_at(old, 0, &vec![0xAB; blocks * BS]).unwrap();
    assert!(n > 0 && no_space(fs.write_at(old, n as u64, &[0xAB; BS])));
    fs.sync().unwrap();
    fs.unlink(fs.root(), "old").unwrap();
    fs.sync().unwrap();
    fs
}

#[test]
fn a_commit_forced_by_a_full_disk_writes_the_cached_data_first() {
    let dev = fresh(
        600,
        &MkfsOptions {
            blocks_per_group: 1024,
            inodes_per_group: Some(32),
            ..Default::default()
        },
    );
    // No commit by size: the only commit below is the one the full disk forces.
    let fs = mount_over_stale_blocks(&dev, 600);
    let who = NewFile::by(1);
    // g has a block, committed: removing it later frees a block that waits for a checkpoint.
    let g = fs.create(fs.root(), "g", &who).unwrap();
    fs.write_at(g, 0, &[1; BS]).unwrap();
    fs.sync().unwrap();

    let cache = Cache::new(&dev);
    fs.set_data_hook(Some(cache.hook()));
    // c is written through the "cache": a block, its data in memory only, the new size.
    let c = fs.create(fs.root(), "c", &who).unwrap();
    let a = fs.allocate_block(c, 0).unwrap();
    assert!(a.fresh);
    let data = pattern(7, BS);
    cache.write(c, a.block, &data);
    fs.extend_size(c, BS as u64).unwrap();
    // A filler takes every block left.
    let filler = fs.create(fs.root(), "filler", &who).unwrap();
    let n = fs.write_at(filler, 0, &vec![2; 600 * BS]).unwrap();
    assert_eq!(n % BS, 0);
    let next = (n / BS) as u64;
    assert!(no_space(fs.allocate(filler, next)), "the disk is full");
    // Removing g frees a block, but only for after a checkpoint: the next allocation finds no
    // free block, commits and checkpoints inside the operation, and takes g's.
    fs.unlink(fs.root(), "g").unwrap();
    let commits = fs.stats().meta.commits;
    fs.allocate(filler, next).unwrap();
    assert_eq!(fs.stats().meta.commits, commits + 1, "the allocation committed");
    assert!(
        cache.asked.lock().contains(&c),
        "the commit made c's block and size durable without asking the cache for c's data"
    );

    // A power cut now: only what was flushed survives.
    let after = Arc::new(MemDevice::from_image(dev.durable_image()).unwrap());
    let fs = mount(&after);
    let c = fs.resolve("/c").unwrap();
    assert_eq!(fs.stat(c).unwrap().size, BS as u64, "c's size was committed");
    let back = read_all(&fs, c);
    assert!(back != vec![0xAB; BS], "c shows the removed file's bytes");
    assert_eq!(back, data);
}

#[test]
fn a_commit_without_a_hook_forgets_the_files_it_committed() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let who = NewFile::by(1);
    let a = fs.create(fs.root(), "a", &who).unwrap();
    fs.write_at(a, 0, &pattern(1, 3 * BS)).unwrap();
    fs.commit().unwrap();
    // A hook set later hears only of files written since.
    let cache = Cache::new(&dev);
    fs.set_data_hook(Some(cache.hook()));
    let b = fs.create(fs.root(), "b", &who).unwrap();
    fs.write_at(b, 0, b"b").unwrap();
    fs.commit().unwrap();
    assert_eq!(*cache.asked.lock(), vec![b]);
}

/// Puts pieces into the stand-in cache; the first put waits for a go (a write between
/// allocating its blocks and handing over their data).
struct SlowTarget {
    cache: Arc<Cache>,
    ino: u64,
    entered: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
    first: bool,
}

impl write::WriteTarget for SlowTarget {
    fn put(&mut self, piece: &write::BlockWrite<'_>) -> std::io::Result<()> {
        if std::mem::take(&mut self.first) {
            self.entered.send(()).unwrap();
            self.go.recv().unwrap();
        }
        let mut b = [0u8; BS];
        piece.apply(&mut b);
        self.cache.write(self.ino, piece.block, &b);
        Ok(())
    }

    fn forget(&mut self, _from: u64) {}
}

#[test]
fn a_commit_waits_for_a_write_between_allocating_and_handing_over_its_data() {
    let dev = fresh(2048, &small_opts(1024));
    let fs = mount_over_stale_blocks(&dev, 2048);
    let who = NewFile::by(1);

    let cache = Cache::new(&dev);
    fs.set_data_hook(Some(cache.hook()));
    let c = fs.create(fs.root(), "c", &who).unwrap();
    let data = pattern(9, 3 * BS);
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let commits = fs.stats().meta.commits;
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut target = SlowTarget {
                cache: cache.clone(),
                ino: c,
                entered: entered_tx,
                go: go_rx,
                first: true,
            };
            fs.write_with(c, 0, &data, &mut target).unwrap()
        });
        // The writer's blocks are allocated; their data is not in the cache yet.
        entered.recv().unwrap();
        let committer = s.spawn(|| fs.commit().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(
            fs.stats().meta.commits,
            commits,
            "a commit made the writer's allocations durable before their data"
        );
        go.send(()).unwrap();
        assert_eq!(writer.join().unwrap(), data.len());
        committer.join().unwrap();
    });
    assert!(fs.stats().meta.commits > commits);
    assert!(cache.asked.lock().contains(&c));

    // A power cut now: c's blocks hold c's bytes, never the removed file's, whatever size the
    // commit caught.
    let after = Arc::new(MemDevice::from_image(dev.durable_image()).unwrap());
    let fs2 = mount(&after);
    let c2 = fs2.resolve("/c").unwrap();
    let back = read_all(&fs2, c2);
    assert!(
        back.chunks(BS).all(|b| b != [0xAB; BS]),
        "c shows the removed file's bytes"
    );
    assert_eq!(back, data[..back.len()]);
}
