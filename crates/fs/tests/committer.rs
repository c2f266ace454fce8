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
