//! Crash tests: a random workload with fsyncs runs on an in-memory device that loses power at a
//! random write (unflushed writes survive whole, torn or not at all). The image left behind must
//! mount (replaying the journal), fsck must find nothing wrong, every file that was durable and
//! not touched since must hold exactly its bytes, and the tree must be one the workload passed
//! through since its last durable point.

mod common;
#[path = "common/model.rs"]
mod model;

use common::*;
use model::*;
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{BlockDevice, CrashOptions, DeviceCounters, MemDevice};
use vino_fs::{FileSystem, MkfsOptions, MountOptions, fsck};

/// A device that loses power at its `trip`-th write (counting from when `writes` was last reset): the image a power cut would leave at that
/// moment is kept, and from then on every operation fails.
struct Tripwire {
    inner: Arc<MemDevice>,
    writes: AtomicU64,
    armed: std::sync::atomic::AtomicBool,
    trip: u64,
    seed: u64,
    options: CrashOptions,
    image: Mutex<Option<Vec<u8>>>,
}

impl Tripwire {
    fn new(inner: Arc<MemDevice>, trip: u64, seed: u64, options: CrashOptions) -> Tripwire {
        Tripwire {
            inner,
            writes: AtomicU64::new(0),
            armed: true.into(),
            trip,
            seed,
            options,
            image: Mutex::new(None),
        }
    }

    /// The image after the power cut (cutting it now if it has not happened yet).
    fn crashed(&self) -> Vec<u8> {
        let mut img = self.image.lock();
        if img.is_none() {
            *img = Some(self.inner.crash_image_with(self.seed, &self.options));
            self.inner.set_dead(true);
        }
        img.clone().unwrap()
    }

    fn tripped(&self) -> bool {
        self.image.lock().is_some()
    }
}

impl BlockDevice for Tripwire {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.trip && self.armed.load(Ordering::Relaxed) {
            self.crashed();
        }
        self.inner.write_blocks(first, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn name(&self) -> &str {
        "tripwire"
    }
    fn counters(&self) -> &DeviceCounters {
        self.inner.counters()
    }
}

fn random_path(rng: &mut SplitMix64) -> String {
    let names = ["a", "b", "c"];
    let depth = 1 + rng.below(2) as usize;
    (0..depth)
        .map(|_| format!("/{}", names[rng.below(3) as usize]))
        .collect()
}

fn random_op(rng: &mut SplitMix64) -> Op {
    match rng.below(20) {
        0..=2 => Op::Create(random_path(rng)),
        3..=4 => Op::Mkdir(random_path(rng)),
        5..=10 => Op::Write {
            path: random_path(rng),
            offset: rng.below(80_000),
            len: rng.below(40_000) as usize,
            seed: rng.next_u64(),
        },
        11 => Op::Truncate {
            path: random_path(rng),
            size: rng.below(90_000),
        },
        12 => match rng.next_u64() % 8 {
            6 => Op::PunchHole {
                path: random_path(rng),
                offset: rng.next_u64() % 60_000,
                len: 1 + rng.next_u64() % 40_000,
            },
            7 => Op::ZeroRange {
                path: random_path(rng),
                offset: rng.next_u64() % 60_000,
                len: 1 + rng.next_u64() % 40_000,
                keep_size: rng.next_u64().is_multiple_of(2),
            },
            4 => Op::Fallocate {
                path: random_path(rng),
                offset: rng.next_u64() % 60_000,
                len: 1 + rng.next_u64() % 40_000,
                keep_size: rng.next_u64().is_multiple_of(2),
            },
            5 => Op::SetXattr {
                path: random_path(rng),
                seed: rng.next_u64(),
            },
            0 => Op::UnlinkKeep(random_path(rng)),
            1 => Op::Symlink {
                path: random_path(rng),
                seed: rng.next_u64() as u8,
                len: 1 + (rng.next_u64() % 300) as usize,
            },
            2 => Op::Mknod(random_path(rng)),
            _ => Op::Unlink(random_path(rng)),
        },
        13 => Op::Rmdir(random_path(rng)),
        14..=15 => Op::Rename(random_path(rng), random_path(rng)),
        16..=18 => Op::Fsync(random_path(rng)),
        _ => Op::Sync,
    }
}

/// One run: returns whether the power cut happened during the workload. The power is cut at a
/// write chosen among those the same workload makes when nothing goes wrong (`trip` 0: none,
/// and the number of writes is returned instead).
fn crash_run(seed: u64, ops: usize, commit_blocks: Option<usize>) -> bool {
    let writes = workload_writes(seed, ops, commit_blocks);
    let trip = 1 + SplitMix64::new(seed ^ 0x5eed).below(writes.max(1));
    run_with_trip(seed, ops, commit_blocks, trip).0
}

fn workload_writes(seed: u64, ops: usize, commit_blocks: Option<usize>) -> u64 {
    run_with_trip(seed, ops, commit_blocks, u64::MAX).1
}

fn run_with_trip(seed: u64, ops: usize, commit_blocks: Option<usize>, trip: u64) -> (bool, u64) {
    let mut rng = SplitMix64::new(seed);
    let mem = Arc::new(MemDevice::new(1536));
    vino_fs::mkfs(
        &*mem,
        &MkfsOptions {
            blocks_per_group: 512,
            inodes_per_group: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    let options = CrashOptions {
        survive: rng.next_f64() * 0.8,
        tear: rng.next_f64() * 0.3,
        sector_bytes: 512,
    };
    let dev = Arc::new(Tripwire::new(mem.clone(), trip, rng.next_u64(), options));
    dev.armed.store(false, Ordering::Relaxed);
    let d: Arc<dyn BlockDevice> = dev.clone();
    let fs = FileSystem::mount(
        d,
        runtime(),
        &MountOptions {
            commit_blocks,
            ..MountOptions::default()
        },
    )
    .unwrap();
    // Count the workload's writes only.
    dev.writes.store(0, Ordering::Relaxed);
    dev.armed.store(true, Ordering::Relaxed);
    let mut m = Model::default();
    let mut p = Promises::new();
    for _ in 0..ops {
        let op = random_op(&mut rng);
        let mut trial = m.clone();
        let want = run_model(&mut trial, &op);
        let got = run_fs(&fs, &op);
        if dev.tripped() {
            // The operation may or may not have reached the running transaction; either tree is
            // possible, as are the paths it touches.
            p.touch_op(&op);
            if want.is_ok() {
                p.shapes.push(trial.shape());
            }
            break;
        }
        assert_eq!(got, want, "seed {seed}: {op:?}");
        m = trial;
        p.touch_op(&op);
        if matches!(op, Op::Sync) || (matches!(op, Op::Fsync(_)) && got.is_ok()) {
            p.durable_point(&m);
        } else {
            p.shapes.push(m.shape());
        }
    }
    let tripped = dev.tripped();
    let writes = dev.writes.load(Ordering::Relaxed);
    if trip == u64::MAX {
        return (false, writes);
    }
    let image = dev.crashed();
    drop(fs);

    // The image as left by the power cut: fsck (which replays in memory) must be happy.
    let crashed = Arc::new(MemDevice::from_image(image).unwrap());
    let report = fsck(&*crashed, false).unwrap();
    assert!(report.is_clean(), "seed {seed}: fsck of the crash image:\n{report}");

    // Mount replays the journal; the tree must be one the workload went through.
    let fs = mount(&crashed);
    let mut after = Model::default();
    collect(&fs, "/", &mut after);
    if let Err(e) = p.check(&after) {
        panic!("seed {seed}: {e}");
    }
    fs.unmount().unwrap();
    assert_clean(&*crashed, &format!("seed {seed}: after recovery and unmount"));
    (tripped, writes)
}

/// Reads the whole tree into a model.
fn collect(fs: &FileSystem, dir: &str, m: &mut Model) {
    for e in fs.readdir_path(dir).unwrap() {
        let name = e.name_lossy();
        if dir == "/" && name == "lost+found" {
            continue;
        }
        let path = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        match e.kind {
            vino_fs::FileType::Directory => {
                m.nodes.insert(path.clone(), Node::Dir);
                collect(fs, &path, m);
            }
            vino_fs::FileType::Symlink => {
                m.nodes.insert(path, Node::Symlink(fs.readlink(e.ino).unwrap()));
            }
            vino_fs::FileType::Fifo => {
                m.nodes.insert(path, Node::Fifo);
            }
            _ => {
                m.nodes.insert(path, Node::File(read_all(fs, e.ino)));
            }
        }
    }
}

#[test]
fn crash_at_any_write_leaves_a_clean_image_with_every_durable_byte() {
    let mut tripped = 0;
    let runs = 150;
    for seed in 0..runs {
        let commit = if seed % 3 == 0 { Some(3) } else { None };
        if crash_run(seed, 40, commit) {
            tripped += 1;
        }
    }
    assert!(
        tripped > runs * 9 / 10,
        "almost all runs should crash mid-workload ({tripped} of {runs})"
    );
}

#[test]
fn crash_during_recovery_is_recovered_from() {
    for seed in 0..30u64 {
        let mut rng = SplitMix64::new(1000 + seed);
        let mem = Arc::new(MemDevice::new(1536));
        vino_fs::mkfs(
            &*mem,
            &MkfsOptions {
                blocks_per_group: 512,
                inodes_per_group: Some(64),
                ..Default::default()
            },
        )
        .unwrap();
        // Commit a lot without checkpointing, then cut the power.
        let fs = mount(&mem);
        let mut m = Model::default();
        for _ in 0..30 {
            let op = random_op(&mut rng);
            let want = run_model(&mut m, &op);
            assert_eq!(run_fs(&fs, &op), want);
        }
        fs.commit().unwrap();
        drop(fs);
        // Power cut during the replay, at a random write; then recover properly.
        let trip = 1 + rng.below(20);
        let dev = Arc::new(Tripwire::new(
            mem.clone(),
            trip,
            rng.next_u64(),
            CrashOptions::default(),
        ));
        let d: Arc<dyn BlockDevice> = dev.clone();
        let _ = FileSystem::mount(d, runtime(), &MountOptions::default());
        let crashed = Arc::new(MemDevice::from_image(dev.crashed()).unwrap());
        let fs = mount(&crashed);
        check_equal(&fs, &m, &format!("seed {seed}: after a crash during recovery"));
        fs.unmount().unwrap();
        assert_clean(&*crashed, "after recovery");
    }
}

/// A power cut while a mount frees the orphan list: the next mount frees what is left, and the
/// free counts come back to what they were before the files were made.
#[test]
fn crash_while_a_mount_frees_orphans_is_recovered_from() {
    for trip in 1..40u64 {
        let mem = Arc::new(MemDevice::new(2048));
        vino_fs::mkfs(
            &*mem,
            &MkfsOptions {
                blocks_per_group: 512,
                inodes_per_group: Some(64),
                ..Default::default()
            },
        )
        .unwrap();
        let fs = mount(&mem);
        let before = (fs.stats().free_blocks, fs.stats().free_inodes);
        let root = fs.root();
        for i in 0..12u64 {
            let name = format!("o{i}");
            let f = fs.create(root, &name, &vino_fs::NewFile::by(1)).unwrap();
            fs.write_at(f, 0, &pattern(i, (i as usize + 1) * 3000)).unwrap();
            if i % 3 == 0 {
                fs.set_xattr(f, b"user.x", b"y", vino_fs::XattrSet::Any).unwrap();
            }
            fs.unlink_keep(root, &name).unwrap();
        }
        fs.commit().unwrap();
        drop(fs);
        let dev = Arc::new(Tripwire::new(mem.clone(), trip, trip * 31, CrashOptions::default()));
        let d: Arc<dyn BlockDevice> = dev.clone();
        let _ = FileSystem::mount(d, runtime(), &MountOptions::default());
        let crashed = Arc::new(MemDevice::from_image(dev.crashed()).unwrap());
        assert_clean(&*crashed, &format!("trip {trip}: the cut image"));
        let fs = mount(&crashed);
        assert!(fs.orphans().unwrap().is_empty());
        assert_eq!((fs.stats().free_blocks, fs.stats().free_inodes), before, "trip {trip}");
        fs.unmount().unwrap();
        assert_clean(&*crashed, &format!("trip {trip}: after recovery"));
    }
}

/// Blocks a truncate frees must not be reused before the truncate commits: a crash would bring
/// the old file back pointing at another file's data.
#[test]
fn freed_blocks_are_not_reused_before_the_free_commits() {
    for seed in 0..8u64 {
        let mem = Arc::new(MemDevice::new(1024));
        vino_fs::mkfs(
            &*mem,
            &MkfsOptions {
                blocks_per_group: 1024,
                inodes_per_group: Some(64),
                ..Default::default()
            },
        )
        .unwrap();
        let fs = mount(&mem);
        let who = vino_fs::NewFile::by(1);
        let a = fs.create(fs.root(), "a", &who).unwrap();
        let old = pattern(seed, 40 * 4096);
        fs.write_at(a, 0, &old).unwrap();
        fs.fsync(a).unwrap();
        fs.truncate(a, 0).unwrap();
        let b = fs.create(fs.root(), "b", &who).unwrap();
        fs.write_at(b, 0, &pattern(seed + 100, 40 * 4096)).unwrap();
        // Power cut before any commit: every unflushed write (b's data) reaches the disk.
        let image = mem.crash_image_with(
            seed,
            &CrashOptions {
                survive: 1.0,
                tear: 0.0,
                sector_bytes: 512,
            },
        );
        drop(fs);
        let crashed = Arc::new(MemDevice::from_image(image).unwrap());
        let fs = mount(&crashed);
        let a = fs.resolve("/a").unwrap();
        assert!(
            read_all(&fs, a) == old,
            "seed {seed}: the truncate did not commit, so a keeps its bytes"
        );
        assert!(fs.resolve("/b").is_err());
        assert_clean(&*crashed, "after recovery");
    }
}

/// A metadata block (here an indirect block) that is freed must not become file data while a
/// journal transaction holding its old image can still be replayed over it.
#[test]
fn freed_metadata_blocks_are_not_reused_while_the_journal_holds_them() {
    let mem = Arc::new(MemDevice::new(1024));
    vino_fs::mkfs(
        &*mem,
        &MkfsOptions {
            blocks_per_group: 1024,
            inodes_per_group: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    let fs = mount(&mem);
    let who = vino_fs::NewFile::by(1);
    let x = fs.create(fs.root(), "x", &who).unwrap();
    fs.write_at(x, 0, &pattern(1, 20 * 4096)).unwrap();
    fs.commit().unwrap(); // the indirect block's image is now in the journal
    let x_blocks = fs.block_map(x).unwrap();
    fs.truncate(x, 0).unwrap();
    fs.commit().unwrap();
    let y = fs.create(fs.root(), "y", &who).unwrap();
    let want = pattern(2, 40 * 4096);
    fs.write_at(y, 0, &want).unwrap();
    fs.fsync(y).unwrap();
    let y_blocks = fs.block_map(y).unwrap();
    assert!(
        x_blocks.iter().all(|b| !y_blocks.contains(b)),
        "y reused x's blocks before a checkpoint"
    );
    let image = mem.crash_image(7);
    drop(fs);
    let crashed = Arc::new(MemDevice::from_image(image).unwrap());
    let fs = mount(&crashed);
    assert!(fs.stats().replayed_transactions >= 3);
    assert!(read_all(&fs, fs.resolve("/y").unwrap()) == want);
    // After a sync (checkpoint) the freed blocks are reusable again.
    fs.sync().unwrap();
    let z = fs.create(fs.root(), "z", &who).unwrap();
    fs.write_at(z, 0, &pattern(3, 4096)).unwrap();
    assert_eq!(
        fs.block_map(z).unwrap()[0],
        x_blocks[0],
        "the first free block of the group again"
    );
    fs.unmount().unwrap();
    assert_clean(&*crashed, "after recovery");
}
