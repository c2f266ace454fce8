//! The background committer: work nobody fsynced becomes durable within the commit interval,
//! and an operation that passes the commit threshold leaves the commit to the committer's
//! thread instead of making it itself.

mod common;
use common::*;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_blockdev::MemDevice;
use vino_fs::*;

/// Waits (at most 10 s) until `fs` has made more than `than` commits.
fn await_commit(fs: &FileSystem, than: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.stats().meta.commits <= than {
        assert!(Instant::now() < deadline, "no commit came");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn work_nobody_fsynced_is_durable_within_the_interval() {
    let dev = fresh(4096, &small_opts(1024));
    let opts = MountOptions {
        commit_interval: Some(Duration::from_millis(50)),
        ..MountOptions::default()
    };
    let fs = mount_with(&dev, &opts);
    let before = fs.stats().meta.commits;
    let a = fs.create(fs.root(), "a", &NewFile::by(1)).unwrap();
    let data = pattern(7, 3 * BS + 100);
    fs.write_at(a, 0, &data).unwrap();
    await_commit(&fs, before);

    // A power cut now: only what was flushed survives, and that is the file and its data.
    let after = Arc::new(MemDevice::from_image(dev.durable_image()).unwrap());
    assert_clean(&*after, "after the timed commit");
    let fs2 = mount(&after);
    let a2 = fs2.resolve("/a").expect("the file survived the cut");
    assert_eq!(read_all(&fs2, a2), data);

    // Nothing more to commit: the timer makes no empty commits.
    let settled = fs.stats().meta.commits;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fs.stats().meta.commits, settled, "a commit of nothing");
    fs.unmount().unwrap();
    assert_clean(&*dev, "after unmount");
}

/// Mounts with a data hook that notes which thread asked it for data (the thread that
/// commits), then makes operations until the transaction passes a small threshold.
fn who_commits(interval: Option<Duration>) -> Vec<String> {
    let dev = fresh(4096, &small_opts(1024));
    let opts = MountOptions {
        commit_blocks: Some(4),
        commit_interval: interval,
        ..MountOptions::default()
    };
    let fs = mount_with(&dev, &opts);
    let threads = Arc::new(Mutex::new(Vec::new()));
    let seen = threads.clone();
    fs.set_data_hook(Some(Arc::new(move |_: &[u64]| {
        let me = std::thread::current();
        seen.lock().push(me.name().unwrap_or("?").to_string());
        Ok(())
    })));
    let before = fs.stats().meta.commits;
    for i in 0..8 {
        let f = fs.create(fs.root(), format!("f{i}"), &NewFile::by(1)).unwrap();
        fs.write_at(f, 0, &pattern(i, BS)).unwrap();
    }
    await_commit(&fs, before);
    fs.unmount().unwrap();
    assert_clean(&*dev, "after unmount");
    threads.lock().clone()
}

#[test]
fn an_operation_past_the_threshold_leaves_the_commit_to_the_committer() {
    // An hour's interval: only the threshold can have woken the committer.
    let names = who_commits(Some(Duration::from_secs(3600)));
    let here = std::thread::current().name().unwrap().to_string();
    assert!(
        names.iter().any(|n| n == "vino-fs-commit"),
        "the committer made no commit: {names:?}"
    );
    // Only unmount's final sync runs on the test's thread.
    let inline = names.iter().filter(|n| **n == here).count();
    assert!(inline <= 1, "operations committed inline {inline} times: {names:?}");
}

#[test]
fn without_a_committer_the_operation_commits_itself() {
    let names = who_commits(None);
    let here = std::thread::current().name().unwrap().to_string();
    assert!(names.len() >= 2, "{names:?}");
    assert!(names.iter().all(|n| *n == here), "{names:?}");
}

/// Writers appending to their own files while the committer commits every millisecond, and
/// power cuts taken at random moments: every cut mounts, is clean, and shows each file as a
/// prefix of what its writer wrote, never a removed file's bytes (the data gate keeps every
/// commit from catching a block allocated but not yet written).
#[test]
fn power_cuts_among_writers_and_the_committer_never_show_stale_bytes() {
    const WRITERS: u64 = 3;
    const BYTES: usize = 160 * BS;
    let dev = fresh(4096, &small_opts(1024));
    {
        // Every free block holds a removed file's bytes.
        let fs = mount(&dev);
        let old = fs.create(fs.root(), "old", &NewFile::by(1)).unwrap();
        let _ = fs.write_at(old, 0, &vec![0xAB; 4096 * BS]);
        fs.sync().unwrap();
        fs.unlink(fs.root(), "old").unwrap();
        fs.unmount().unwrap();
    }
    let opts = MountOptions {
        commit_blocks: Some(8),
        commit_interval: Some(Duration::from_millis(1)),
        ..MountOptions::default()
    };
    let fs = mount_with(&dev, &opts);
    let expected: Vec<Vec<u8>> = (0..WRITERS).map(|w| pattern(w + 1, BYTES)).collect();
    let mut cuts = std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (fs, data) = (&fs, &expected[w as usize]);
            s.spawn(move || {
                let f = fs.create(fs.root(), format!("w{w}"), &NewFile::by(1)).unwrap();
                let mut at = 0;
                let mut step = 1 + w as usize;
                while at < data.len() {
                    // Pieces of 1-3 blocks and a bit, so that writes end inside blocks.
                    let n = (step % 3 * BS + BS + 100).min(data.len() - at);
                    assert_eq!(fs.write_at(f, at as u64, &data[at..at + n]).unwrap(), n);
                    at += n;
                    step += 1;
                }
            });
        }
        let mut cuts = Vec::new();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(3));
            cuts.push(dev.durable_image());
        }
        cuts
    });
    fs.unmount().unwrap();
    cuts.push(dev.durable_image());
    for (i, image) in cuts.into_iter().enumerate() {
        let after = Arc::new(MemDevice::from_image(image).unwrap());
        let fs = mount(&after);
        for w in 0..WRITERS {
            let Ok(f) = fs.resolve(format!("/w{w}")) else { continue };
            let back = read_all(&fs, f);
            assert!(
                back[..] == expected[w as usize][..back.len()],
                "cut {i}: w{w} ({} bytes) is not what its writer wrote",
                back.len()
            );
        }
        fs.unmount().unwrap();
        assert_clean(&*after, &format!("cut {i}"));
    }
}

/// A device whose flushes wait while its gate is closed, counting the flushes begun.
struct HeldFlush {
    inner: Arc<MemDevice>,
    closed: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    begun: std::sync::atomic::AtomicU64,
}

impl HeldFlush {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }
}

impl vino_blockdev::BlockDevice for HeldFlush {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_blocks(first, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.begun.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
        drop(closed);
        self.inner.flush()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn name(&self) -> &str {
        "held-flush"
    }
    fn counters(&self) -> &vino_blockdev::DeviceCounters {
        self.inner.counters()
    }
}

impl HeldFlush {
    /// A file system on a fresh device whose flushes can be held.
    fn mounted() -> (Arc<MemDevice>, Arc<HeldFlush>, Arc<FileSystem>) {
        let mem = fresh(4096, &small_opts(1024));
        let dev = Arc::new(HeldFlush {
            inner: mem.clone(),
            closed: std::sync::Mutex::new(false),
            opened: std::sync::Condvar::new(),
            begun: std::sync::atomic::AtomicU64::new(0),
        });
        let fs = FileSystem::mount(dev.clone(), runtime(), &MountOptions::default()).unwrap();
        (mem, dev, fs)
    }

    /// Holds the next flushes, runs `f` on a thread of its own, and returns once `f` is inside
    /// a flush.
    fn run_into_flush<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
        use std::sync::atomic::Ordering::SeqCst;
        self.set_closed(true);
        let flushes = self.begun.load(SeqCst);
        let t = std::thread::spawn(f);
        while self.begun.load(SeqCst) == flushes {
            std::thread::sleep(Duration::from_millis(1));
        }
        t
    }

    /// Runs `f` on another thread and returns its result, or fails the test (letting the
    /// flushes go first) if it does not finish within 20 s: it waited for the held flush.
    fn finishes_meanwhile<T: Send + 'static>(&self, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || tx.send(f()).unwrap());
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(v) => {
                t.join().unwrap();
                v
            }
            Err(_) => {
                self.set_closed(false);
                panic!("{what} waited for another user's I/O to reach the device");
            }
        }
    }
}

/// A commit writes its transaction without the file system's lock: while one user's fsync waits
/// for the device, other operations go on (into the next transaction), and a second fsync waits
/// for the first's write and then commits what is left.
#[test]
fn operations_go_on_while_a_commit_waits_for_the_device() {
    let (mem, dev, fs) = HeldFlush::mounted();
    let a = fs.create(fs.root(), "a", &NewFile::by(1)).unwrap();
    fs.write_at(a, 0, b"first").unwrap();
    let commits = fs.stats().meta.commits;
    let first = dev.run_into_flush({
        let fs = fs.clone();
        move || fs.fsync(a)
    });
    let b = dev.finishes_meanwhile("an operation", {
        let fs = fs.clone();
        move || {
            let b = fs.create(fs.root(), "b", &NewFile::by(2)).unwrap();
            fs.write_at(b, 0, b"second").unwrap();
            assert_eq!(fs.lookup(fs.root(), "a").unwrap(), a);
            b
        }
    });
    // A second fsync cannot end before the first's transaction is in the journal.
    let second = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.fsync(b))
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!second.is_finished() && !first.is_finished());
    dev.set_closed(false);
    first.join().unwrap().unwrap();
    second.join().unwrap().unwrap();
    assert_eq!(fs.stats().meta.commits, commits + 2, "one commit each");
    // Both are durable: a power cut now loses neither.
    drop(fs);
    let fs = mount(&mem);
    assert_eq!(read_all(&fs, fs.resolve("/a").unwrap()), b"first");
    assert_eq!(read_all(&fs, fs.resolve("/b").unwrap()), b"second");
    fs.unmount().unwrap();
    assert_clean(&*mem, "after both commits");
}

/// A checkpoint writes the journal's blocks home without the file system's lock: operations go
/// on, reading what was committed, and a power cut during it or after loses nothing.
#[test]
fn operations_go_on_while_a_checkpoint_waits_for_the_device() {
    let (mem, dev, fs) = HeldFlush::mounted();
    let d = fs.mkdir(fs.root(), "d", &NewFile::by(1)).unwrap();
    let a = fs.create(d, "a", &NewFile::by(1)).unwrap();
    fs.write_at(a, 0, b"committed").unwrap();
    fs.fsync(a).unwrap();
    let before = fs.stats().meta;
    // Nothing to commit: the sync goes straight to its checkpoint, and waits in its flush.
    let sync = dev.run_into_flush({
        let fs = fs.clone();
        move || fs.sync()
    });
    dev.finishes_meanwhile("an operation", {
        let fs = fs.clone();
        move || {
            assert_eq!(fs.resolve("/d/a").unwrap(), a);
            assert_eq!(read_all(&fs, a), b"committed");
            fs.create(d, "b", &NewFile::by(2)).unwrap();
        }
    });
    dev.set_closed(false);
    sync.join().unwrap().unwrap();
    let after = fs.stats().meta;
    assert_eq!(after.checkpoints, before.checkpoints + 1);
    assert!(
        after.checkpointed_blocks > before.checkpointed_blocks,
        "blocks went home"
    );
    fs.fsync(a).unwrap();
    drop(fs);
    let fs = mount(&mem);
    assert_eq!(read_all(&fs, fs.resolve("/d/a").unwrap()), b"committed");
    assert!(fs.resolve("/d/b").is_ok());
    fs.unmount().unwrap();
    assert_clean(&*mem, "after the checkpoint");
}
