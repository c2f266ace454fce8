//! Stream files through the kernel: a codec bound by a file's owner, every byte through it
//! (written back a chunk at a time, decoded on a miss), the module kept by the kernel across a
//! reboot, corruption turned into EIO by an integrity codec, and an encryptor without its key
//! refusing to store anything.

use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Errno, Kernel, KernelConfig, OpenFlags};
use vino_sdk::{BuildOptions, build_example};

fn boot(dev: &Arc<MemDevice>) -> Arc<Kernel> {
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: None,
        ..KernelConfig::default()
    };
    Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap()
}

fn fresh() -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(16384));
    mkfs(
        &*dev,
        &MkfsOptions {
            blocks_per_group: 4096,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    dev
}

fn codec(name: &str) -> Vec<u8> {
    build_example(name, &BuildOptions::default()).unwrap()
}

/// Text-like bytes that compress, different in every chunk.
fn text(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b"the quick brown fox jumps over the lazy dog "[(i * 7 + i / 4096) % 44])
        .collect()
}

#[test]
fn a_compressed_file_reads_back_after_a_reboot_and_costs_fewer_blocks() {
    let dev = fresh();
    let k = boot(&dev);
    let user = k.spawn(Credentials::user(1000, 1000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/u", 0o777).unwrap();
    let fd = user.open("/u/z", OpenFlags::create()).unwrap();
    // Only the owner binds; the module is checked as a stream graft.
    assert_eq!(
        root.stream_bind("/u/z", Some(&codec("lz4_stream"))).unwrap_err().errno,
        Errno::Perm
    );
    assert_eq!(
        user.stream_bind("/u/z", Some(&codec("sequential_ra")))
            .unwrap_err()
            .errno,
        Errno::Inval
    );
    user.stream_bind("/u/z", Some(&codec("lz4_stream"))).unwrap();
    let data = text(300_000);
    assert_eq!(user.pwrite(fd, &data, 0).unwrap(), data.len());
    // A small write into a chunk already written back.
    user.fsync(fd).unwrap();
    user.pwrite(fd, b"HELLO", 70_000).unwrap();
    user.fsync(fd).unwrap();
    let mut want = data.clone();
    want[70_000..70_005].copy_from_slice(b"HELLO");
    let st = user.fstat(fd).unwrap();
    assert_eq!(st.size, data.len() as u64);
    assert!(
        st.blocks * 4096 < data.len() as u64 / 2,
        "{} blocks for {} bytes",
        st.blocks,
        data.len()
    );
    k.drop_clean_pages().unwrap();
    let mut got = vec![0u8; data.len() + 10];
    assert_eq!(
        root.pread(root.open("/u/z", OpenFlags::read_only()).unwrap(), &mut got, 0)
            .unwrap(),
        data.len()
    );
    assert_eq!(&got[..data.len()], &want[..]);
    // A cut in the middle of a chunk, then growth: zeros past the cut.
    user.ftruncate(fd, 100_000).unwrap();
    user.ftruncate(fd, 140_000).unwrap();
    user.fsync(fd).unwrap();
    k.drop_clean_pages().unwrap();
    let mut got = vec![0u8; 140_000];
    user.pread(fd, &mut got, 0).unwrap();
    assert_eq!(&got[..100_000], &want[..100_000]);
    assert!(got[100_000..].iter().all(|&b| b == 0));
    user.close(fd).unwrap();
    k.shutdown().unwrap();
    drop((user, root, k));
    // After a reboot the module is loaded again from the kernel's store.
    assert!(vino_fs::fsck(&*dev, false).unwrap().problems.is_empty());
    let k = boot(&dev);
    let other = k.spawn(Credentials::user(2000, 2000));
    let fd = other.open("/u/z", OpenFlags::read_only()).unwrap();
    let mut again = vec![0u8; 140_000];
    assert_eq!(other.pread(fd, &mut again, 0).unwrap(), 140_000);
    assert_eq!(again, got);
    assert_eq!(other.stream_status("/u/z").unwrap().unwrap().module.len(), 64);

    // Listing stream files scans every inode: a user may have it done once a second (root
    // without limit), and sees only its own files.
    let asked = std::time::Instant::now();
    assert!(other.stream_dependencies().unwrap().is_empty());
    let again = other.stream_dependencies();
    if asked.elapsed() < vino_kernel::STREAM_SCAN_EVERY {
        assert_eq!(again.unwrap_err().errno, Errno::Again);
    }
    let root = k.spawn(Credentials::root());
    for _ in 0..2 {
        let files = root.stream_dependencies().unwrap();
        assert_eq!(files.iter().map(|f| f.uid).collect::<Vec<_>>(), vec![1000]);
    }

    // The owner's codec, loaded for the other user's read, is in the graft list of the owner's
    // processes and root's, with its calls; not in the reader's.
    let module = other.stream_status("/u/z").unwrap().unwrap().module;
    let point = format!("file.stream/uid1000/{module}");
    let codecs = |p: &vino_kernel::Process| -> Vec<vino_graft::SlotInfo> {
        p.graft_list()
            .into_iter()
            .filter(|s| s.point.starts_with("file.stream"))
            .collect()
    };
    assert!(codecs(&other).is_empty());
    let owner = k.spawn(Credentials::user(1000, 1000));
    for viewer in [&owner, &root] {
        let listed = codecs(viewer);
        assert_eq!(
            listed.iter().map(|s| s.point.as_str()).collect::<Vec<_>>(),
            [point.as_str()]
        );
        assert!(listed[0].stats.as_ref().unwrap().invocations > 0, "{listed:?}");
    }
}

/// A read that goes on through a stream file fetches the next chunks with the one it needs:
/// written in order, they lie in order, and a cold sequential read costs far fewer device
/// requests than one per chunk.
#[test]
fn a_sequential_read_fetches_chunks_together() {
    let dev = fresh();
    let config = KernelConfig {
        cache_frames: 1024,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    let user = k.spawn(Credentials::user(1000, 1000));
    k.spawn(Credentials::root()).mkdir("/u", 0o777).unwrap();
    let fd = user.open("/u/z", OpenFlags::create()).unwrap();
    user.stream_bind("/u/z", Some(&codec("lz4_stream"))).unwrap();
    let chunks = 32;
    let data = text(chunks * 65536);
    assert_eq!(user.pwrite(fd, &data, 0).unwrap(), data.len());
    user.fsync(fd).unwrap();
    k.drop_clean_pages().unwrap();
    let before = dev.stats().reads;
    let mut got = vec![0u8; data.len()];
    let mut at = 0;
    while at < got.len() {
        let n = user
            .pread(fd, &mut got[at..(at + (1 << 20)).min(data.len())], at as u64)
            .unwrap();
        assert!(n > 0);
        at += n;
    }
    let reads = dev.stats().reads - before;
    assert!(got == data, "read back");
    assert!(reads <= chunks as u64 / 2, "{reads} device reads for {chunks} chunks");
}

#[test]
fn an_integrity_codec_turns_corruption_into_eio_on_that_file_only() {
    let dev = fresh();
    let k = boot(&dev);
    let user = k.spawn(Credentials::user(1000, 1000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/u", 0o777).unwrap();
    let fd = user.open("/u/c", OpenFlags::create()).unwrap();
    user.stream_bind("/u/c", Some(&codec("crc32c_stream"))).unwrap();
    let data = vec![0x5au8; 65_536];
    user.pwrite(fd, &data, 0).unwrap();
    user.fsync(fd).unwrap();
    let plain = user.open("/u/p", OpenFlags::create()).unwrap();
    user.pwrite(plain, b"plain", 0).unwrap();
    user.fsync(plain).unwrap();
    k.drop_clean_pages().unwrap();
    // Flip one byte of the chunk on the device (the only block full of 0x5a).
    let mut buf = vec![0u8; 4096];
    let block = (0..dev.block_count())
        .rev()
        .find(|&b| {
            dev.read_blocks(b, &mut buf).unwrap();
            buf.iter().all(|&x| x == 0x5a)
        })
        .expect("the chunk's block");
    buf[17] ^= 1;
    dev.write_blocks(block, &buf).unwrap();
    let mut got = vec![0u8; 4096];
    assert_eq!(user.pread(fd, &mut got, 0).unwrap_err().errno, Errno::Io);
    let mut p = [0u8; 5];
    user.pread(plain, &mut p, 0).unwrap();
    assert_eq!(&p, b"plain");
}

#[test]
fn an_encryptor_without_its_key_stores_nothing_and_reads_need_it_again_after_a_reboot() {
    let dev = fresh();
    let k = boot(&dev);
    let user = k.spawn(Credentials::user(1000, 1000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/u", 0o777).unwrap();
    let fd = user.open("/u/s", OpenFlags::create()).unwrap();
    user.stream_bind("/u/s", Some(&codec("chacha20poly1305_stream")))
        .unwrap();
    let secret = b"attack at dawn, bring the blue flag".repeat(100);
    user.pwrite(fd, &secret, 0).unwrap();
    // No key: write-back fails, nothing is stored, the data stays.
    assert_eq!(user.fsync(fd).unwrap_err().errno, Errno::Acces);
    assert_eq!(user.fstat(fd).unwrap().blocks, 0);
    // Only the owner gives the key.
    assert_eq!(
        root.stream_control("/u/s", "set_key", &[0, 1]).unwrap_err().errno,
        Errno::Perm
    );
    for word in 0..4 {
        user.stream_control("/u/s", "set_key", &[word, 0x0123_4567_89ab_cdef ^ word])
            .unwrap();
    }
    user.fsync(fd).unwrap();
    user.close(fd).unwrap();
    // The plaintext is nowhere on the device.
    let image = dev.image();
    assert!(!image.windows(14).any(|w| w == b"attack at dawn"));
    k.shutdown().unwrap();
    drop((user, root, k));
    let k = boot(&dev);
    let user = k.spawn(Credentials::user(1000, 1000));
    let fd = user.open("/u/s", OpenFlags::read_only()).unwrap();
    let mut got = vec![0u8; secret.len()];
    assert_eq!(user.pread(fd, &mut got, 0).unwrap_err().errno, Errno::Acces);
    for word in 0..4 {
        user.stream_control("/u/s", "set_key", &[word, 0x0123_4567_89ab_cdef ^ word])
            .unwrap();
    }
    assert_eq!(user.pread(fd, &mut got, 0).unwrap(), secret.len());
    assert_eq!(got, secret);
}

#[test]
fn another_users_failing_codec_never_fails_a_read_that_needs_a_frame() {
    let dev = fresh();
    // With a write-back thread, as vinod runs: its stream chunks go to their owners' writers.
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: Some(std::time::Duration::from_millis(50)),
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    let hostile = k.spawn(Credentials::user(1000, 1000));
    let victim = k.spawn(Credentials::user(2000, 2000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/u", 0o777).unwrap();
    // The victim's file first, on the device.
    let plain = victim.open("/u/plain", OpenFlags::create()).unwrap();
    let data = text(400_000);
    victim.pwrite(plain, &data, 0).unwrap();
    victim.fsync(plain).unwrap();
    k.drop_clean_pages().unwrap();
    // A codec that traps on every chunk starting with 'T': its owner's dirty pages never go.
    let trap =
        vino_sdk::build_c_bytes(&vino_sdk::hostile_path("stream_partial_trap"), &BuildOptions::default()).unwrap();
    let fd = hostile.open("/u/t", OpenFlags::create()).unwrap();
    hostile.stream_bind("/u/t", Some(&trap)).unwrap();
    hostile.pwrite(fd, &vec![b'T'; 63 * 4096], 0).unwrap();
    // The victim reads a file bigger than the cache, nearly all of which is the hostile user's
    // dirty pages: its reads never fail for them (an eviction passes them over; their owner's
    // writer fails on them).
    let mut got = vec![0u8; data.len()];
    for _ in 0..3 {
        assert_eq!(victim.pread(plain, &mut got, 0).unwrap(), data.len());
        assert_eq!(got, data);
    }
    assert_eq!(hostile.fsync(fd).unwrap_err().errno, Errno::Io);
}

#[test]
fn writers_of_one_compressed_file_at_once_lose_nothing() {
    let dev = fresh();
    // A small cache and a busy write-back thread: chunks go out while the writers write, by
    // the owners' background writers and by evictions.
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: Some(std::time::Duration::from_millis(5)),
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    let owner = k.spawn(Credentials::user(1000, 1000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/u", 0o777).unwrap();
    let fd = owner.open("/u/shared", OpenFlags::create()).unwrap();
    owner.stream_bind("/u/shared", Some(&codec("lz4_stream"))).unwrap();
    owner.close(fd).unwrap();
    const REGION: usize = 90_000; // not a multiple of a chunk: neighbours share chunks
    let writers: Vec<_> = (0..4u8)
        .map(|w| {
            let p = k.spawn(Credentials::user(1000, 1000));
            std::thread::spawn(move || {
                let fd = p.open("/u/shared", OpenFlags::read_write()).unwrap();
                // Small writes, out of order, each region its own byte pattern.
                let region: Vec<u8> = (0..REGION)
                    .map(|i| w.wrapping_mul(31).wrapping_add((i / 7) as u8))
                    .collect();
                for piece in (0..REGION / 1000).rev() {
                    let at = piece * 1000;
                    p.pwrite(fd, &region[at..at + 1000], (w as usize * REGION + at) as u64)
                        .unwrap();
                }
                p.fsync(fd).unwrap();
                p.close(fd).unwrap();
                region
            })
        })
        .collect();
    let want: Vec<u8> = writers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    k.drop_clean_pages().unwrap();
    let fd = root.open("/u/shared", OpenFlags::read_only()).unwrap();
    let mut got = vec![0u8; want.len()];
    assert_eq!(root.pread(fd, &mut got, 0).unwrap(), want.len());
    assert!(got == want, "the regions differ after concurrent writes");
    root.close(fd).unwrap();
    k.shutdown().unwrap();
    assert!(vino_fs::fsck(&*dev, false).unwrap().problems.is_empty());
}

fn hostile(name: &str) -> Vec<u8> {
    vino_sdk::build_c_bytes(&vino_sdk::hostile_path(name), &BuildOptions::default()).unwrap()
}

#[test]
fn hostile_codecs_fail_their_own_file_and_store_nothing_half_done() {
    let dev = fresh();
    let k = boot(&dev);
    let user = k.spawn(Credentials::user(1000, 1000));
    let root = k.spawn(Credentials::root());
    root.mkdir("/u", 0o777).unwrap();
    // A codec that reads the clock is refused at bind, naming the import.
    let fd = user.open("/u/clock", OpenFlags::create()).unwrap();
    let e = user
        .stream_bind("/u/clock", Some(&hostile("stream_clock")))
        .unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.to_string().contains("vino_now_ns"), "{e}");
    user.close(fd).unwrap();
    // Encoding past the bound, or looping past the budget: write-back fails, nothing is
    // stored, the data stays readable from the cache, and the other chunks go through.
    for (name, bad, recovers) in [("stream_overflow", b'O', false), ("stream_loop", b'L', true)] {
        let path = format!("/u/{name}");
        let fd = user.open(&path, OpenFlags::create()).unwrap();
        user.stream_bind(&path, Some(&hostile(name))).unwrap();
        let mut data = vec![b'g'; 2 * 65_536];
        data[0] = bad;
        user.pwrite(fd, &data, 0).unwrap();
        assert_eq!(user.fsync(fd).unwrap_err().errno, Errno::Io, "{name}");
        let mut got = vec![0u8; data.len()];
        assert_eq!(user.pread(fd, &mut got, 0).unwrap(), data.len());
        assert_eq!(got, data, "{name}: the dirty data stays");
        // Nothing of the failing chunk is stored (the loop codec copies its other chunk: 16
        // blocks and the map's).
        let stored = if recovers { 17 } else { 0 };
        assert_eq!(
            user.fstat(fd).unwrap().blocks,
            stored,
            "{name}: only whole good chunks stored"
        );
        if !recovers {
            // It fails every chunk: its owner's file stays dirty until it goes.
            user.close(fd).unwrap();
            user.unlink(&path).unwrap();
            continue;
        }
        // Once the bad byte is gone the file is stored whole.
        user.pwrite(fd, b"g", 0).unwrap();
        user.fsync(fd).unwrap();
        k.drop_clean_pages().unwrap();
        user.pread(fd, &mut got, 0).unwrap();
        assert!(got.iter().all(|&b| b == b'g'), "{name}");
        user.close(fd).unwrap();
    }
    // Decoding to another length: EIO on that file only, never wrong bytes.
    let fd = user.open("/u/short", OpenFlags::create()).unwrap();
    user.stream_bind("/u/short", Some(&hostile("stream_wrong_length")))
        .unwrap();
    user.pwrite(fd, &[7u8; 10_000], 0).unwrap();
    user.fsync(fd).unwrap();
    k.drop_clean_pages().unwrap();
    let mut got = vec![0u8; 10_000];
    assert_eq!(user.pread(fd, &mut got, 0).unwrap_err().errno, Errno::Io);
    k.shutdown().unwrap();
    assert!(vino_fs::fsck(&*dev, false).unwrap().problems.is_empty());
}

// Ordered mode for stream files: a commit must not make a stream file's new size durable before
// the chunks that hold its bytes, as it does not for a plain file's (its data is written first).
// After a power cut an appended file is then shorter, never longer with zeros.

#[test]
fn another_files_fsync_then_a_power_cut_leaves_no_zeros_in_an_appended_stream_file() {
    let dev = fresh();
    let k = boot(&dev);
    let user = k.spawn(Credentials::user(1000, 1000));
    k.spawn(Credentials::root()).mkdir("/u", 0o777).unwrap();
    let stream = user.open("/u/z", OpenFlags::create()).unwrap();
    let codec = build_example("crc32c_stream", &BuildOptions::default()).unwrap();
    user.stream_bind("/u/z", Some(&codec)).unwrap();
    let data: Vec<u8> = (0..40_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    user.pwrite(stream, &data, 0).unwrap();
    // Another file's fsync commits the journal, which holds the append's new size.
    let plain = user.open("/u/p", OpenFlags::create()).unwrap();
    user.pwrite(plain, b"plain", 0).unwrap();
    user.fsync(plain).unwrap();
    // The power goes: what was flushed is what the next mount finds.
    let after = Arc::new(MemDevice::from_image(dev.durable_image()).unwrap());
    let k = boot(&after);
    let root = k.spawn(Credentials::root());
    let fd = root.open("/u/z", OpenFlags::read_only()).unwrap();
    let size = root.fstat(fd).unwrap().size as usize;
    let mut got = vec![0u8; size];
    assert_eq!(root.pread(fd, &mut got, 0).unwrap(), size);
    let zeros = got.iter().filter(|&&b| b == 0).count();
    assert!(
        got == data[..size],
        "{size} bytes after the power cut, {zeros} of them zeros, not the {size} written first"
    );
}

#[test]
fn a_write_into_a_chunk_larger_than_the_cache_finishes() {
    let dev = Arc::new(MemDevice::new(16384));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    // Fewer frames than a chunk has pages: loading one evicts the others, dirty ones first
    // written back.
    let config = KernelConfig {
        cache_frames: 8,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    let root = k.spawn(Credentials::root());
    let fd = root.open("/z", OpenFlags::create()).unwrap();
    let codec = build_example("crc32c_stream", &BuildOptions::default()).unwrap();
    root.stream_bind("/z", Some(&codec)).unwrap();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let data = vec![7u8; 100_000];
        root.pwrite(fd, &data, 0).unwrap();
        root.fsync(fd).unwrap();
        k.drop_clean_pages().unwrap();
        for at in [5_000, 40_000, 70_000, 20_000] {
            root.pwrite(fd, b"into a stored chunk", at).unwrap();
        }
        root.fsync(fd).unwrap();
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the writes finished");
}
