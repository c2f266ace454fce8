//! Ordered mode for stream files: a commit must not make a stream file's new size durable
//! before the chunks that hold its bytes, as it does not for a plain file's (its data is written
//! first). After a power cut an appended file is then shorter, never longer with zeros.

use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags};
use vino_sdk::{BuildOptions, build_example};

fn boot(dev: &Arc<MemDevice>) -> Arc<Kernel> {
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: None,
        ..KernelConfig::default()
    };
    Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap()
}

#[test]
fn another_files_fsync_then_a_power_cut_leaves_no_zeros_in_an_appended_stream_file() {
    let dev = Arc::new(MemDevice::new(16384));
    mkfs(
        &*dev,
        &MkfsOptions {
            blocks_per_group: 4096,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
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
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the writes finished");
}
