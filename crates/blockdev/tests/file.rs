//! File devices: O_DIRECT and its fallback, alignment, persistence, errors.

mod common;

use common::pattern;
use std::io;
use std::path::Path;
use vino_blockdev::{AlignedBuf, BLOCK_SIZE, BlockDevice, Direct, FileDevice, FileOptions};

/// True if `dir` is on tmpfs (which refuses O_DIRECT).
#[allow(clippy::unnecessary_cast)] // the types differ between targets
fn on_tmpfs(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `statfs` is a C struct of integers and padding, for which all-zero bytes are valid.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path that outlives the call, and a `statfs` for the kernel to fill.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut s) };
    r == 0 && s.f_type as i64 == libc::TMPFS_MAGIC as i64
}

#[test]
fn create_write_flush_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.img");
    let dev = FileDevice::create(&path, 64 * BLOCK_SIZE as u64).unwrap();
    assert_eq!(dev.block_count(), 64);
    assert!(!dev.is_block_device());
    if !dev.direct() {
        println!(
            "note: {} refuses O_DIRECT; buffered I/O tested instead",
            dir.path().display()
        );
    }
    let mut data = Vec::new();
    for b in 10..14 {
        data.extend(pattern(b, 1));
    }
    dev.write_blocks(10, &data).unwrap();
    dev.flush().unwrap();
    let mut zero = vec![1u8; BLOCK_SIZE];
    dev.read_blocks(0, &mut zero).unwrap();
    assert!(zero.iter().all(|&b| b == 0), "a new image reads as zeros");
    drop(dev);
    let dev = FileDevice::open(&path).unwrap();
    let mut back = vec![0u8; data.len()];
    dev.read_blocks(10, &mut back).unwrap();
    assert!(back == data);
    let s = dev.stats();
    assert_eq!((s.reads, s.blocks_read, s.bytes_read), (1, 4, 4 * BLOCK_SIZE as u64));
}

#[test]
fn direct_io_takes_unaligned_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    FileDevice::create(&path, 16 * BLOCK_SIZE as u64).unwrap();
    let dev = match FileDevice::open_with(
        &path,
        FileOptions {
            direct: Direct::Require,
            read_only: false,
        },
    ) {
        Ok(d) => d,
        Err(e) => {
            println!("note: O_DIRECT refused here ({e}); alignment not exercised");
            assert!(e.to_string().contains("refuses O_DIRECT"), "{e}");
            return;
        }
    };
    assert!(dev.direct());
    // A buffer one byte off alignment.
    let mut backing = AlignedBuf::new(3);
    let buf = &mut backing[1..1 + 2 * BLOCK_SIZE];
    assert!(!(buf.as_ptr() as usize).is_multiple_of(BLOCK_SIZE));
    buf[..BLOCK_SIZE].copy_from_slice(&pattern(4, 2));
    buf[BLOCK_SIZE..].copy_from_slice(&pattern(5, 2));
    dev.write_blocks(4, buf).unwrap();
    buf.fill(0);
    dev.read_blocks(4, buf).unwrap();
    assert!(buf[..BLOCK_SIZE] == pattern(4, 2)[..]);
    assert!(buf[BLOCK_SIZE..] == pattern(5, 2)[..]);
    // And aligned ones go straight through.
    let mut aligned = AlignedBuf::new(2);
    dev.read_blocks(4, &mut aligned).unwrap();
    assert!(aligned[..BLOCK_SIZE] == pattern(4, 2)[..]);
}

#[test]
fn tmpfs_falls_back_to_buffered_io_where_it_refuses_o_direct() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || !on_tmpfs(shm) {
        println!("note: no tmpfs at /dev/shm; the O_DIRECT fallback is not exercised");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let path = dir.path().join("t.img");
    let dev = FileDevice::create(&path, 8 * BLOCK_SIZE as u64).unwrap();
    if dev.direct() {
        // tmpfs accepts O_DIRECT since Linux 6.6; the fallback is unit-tested in the crate.
        println!("note: this kernel's tmpfs accepts O_DIRECT; the fallback is not exercised here");
        return;
    }
    dev.write_blocks(1, &pattern(1, 5)).unwrap();
    let mut back = vec![0u8; BLOCK_SIZE];
    dev.read_blocks(1, &mut back).unwrap();
    assert!(back == pattern(1, 5));
    let e = FileDevice::open_with(
        &path,
        FileOptions {
            direct: Direct::Require,
            read_only: false,
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("refuses O_DIRECT") && e.to_string().contains("t.img"),
        "{e}"
    );
    let buffered = FileDevice::open_with(
        &path,
        FileOptions {
            direct: Direct::Never,
            read_only: true,
        },
    )
    .unwrap();
    assert!(!buffered.direct());
}

#[test]
fn errors_name_the_file_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.img");
    let e = FileDevice::open(&missing).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("missing.img"), "{e}");

    let e = FileDevice::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");

    let e = FileDevice::create(dir.path().join("odd.img"), 1000).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(
        e.to_string().contains("odd.img") && e.to_string().contains("multiple of 4096"),
        "{e}"
    );
    assert!(FileDevice::create(dir.path().join("empty.img"), 0).is_err());

    let path = dir.path().join("e.img");
    let dev = FileDevice::create(&path, 8 * BLOCK_SIZE as u64).unwrap();
    let mut buf = vec![0u8; 2 * BLOCK_SIZE];
    let e = dev.read_blocks(7, &mut buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(
        e.to_string().contains("e.img") && e.to_string().contains("blocks 7..9 are past the end"),
        "{e}"
    );
    let e = dev.write_blocks(u64::MAX, &buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = dev.read_blocks(0, &mut buf[..100]).unwrap_err();
    assert!(e.to_string().contains("not a whole number"), "{e}");
    let e = dev.write_blocks(0, &buf[..BLOCK_SIZE + 1]).unwrap_err();
    assert!(e.to_string().contains("not a whole number"), "{e}");
    assert_eq!(dev.stats().errors, 4);
    dev.read_blocks(0, &mut []).unwrap();
    assert_eq!(dev.stats().reads, 0, "an empty read does nothing");
    drop(dev);

    let ro = FileDevice::open_with(
        &path,
        FileOptions {
            read_only: true,
            ..FileOptions::default()
        },
    )
    .unwrap();
    let e = ro.write_blocks(0, &buf[..BLOCK_SIZE]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("read-only"), "{e}");
    assert!(
        ro.uring_fd().is_none(),
        "a read-only device keeps its requests on the checked path"
    );
}

#[test]
fn a_trailing_partial_block_is_not_part_of_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.img");
    std::fs::write(&path, vec![7u8; 3 * BLOCK_SIZE + 100]).unwrap();
    let dev = FileDevice::open(&path).unwrap();
    assert_eq!(dev.block_count(), 3);
    let mut buf = vec![0u8; BLOCK_SIZE];
    dev.read_blocks(2, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    assert!(dev.read_blocks(3, &mut buf).is_err());
}

#[test]
fn block_devices_report_their_size() {
    // A loop device node reports its size through BLKGETSIZE64 (0 when nothing is attached).
    for node in ["/dev/loop0", "/dev/loop1"] {
        match FileDevice::open_with(
            node,
            FileOptions {
                direct: Direct::Never,
                read_only: true,
            },
        ) {
            Ok(dev) => {
                assert!(dev.is_block_device());
                println!("{node}: {} blocks", dev.block_count());
                return;
            }
            Err(e) => println!("note: cannot open {node} ({e})"),
        }
    }
    println!("note: no block device to open; BLKGETSIZE64 not exercised");
}

#[test]
fn one_writer_per_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.img");
    let ro = FileOptions {
        read_only: true,
        ..FileOptions::default()
    };
    let first = FileDevice::create(&path, 16 * BLOCK_SIZE as u64).unwrap();
    for second in [FileDevice::open(&path), FileDevice::open_with(&path, ro)] {
        let e = second.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(
            e.to_string()
                .contains("locked.img: in use by another VINO (the daemon, a mount or fsck): stop it first"),
            "{e}"
        );
    }
    drop(first);
    let writer = FileDevice::open(&path).unwrap();
    drop(writer);
    // Readers share the image, and keep writers out.
    let r1 = FileDevice::open_with(&path, ro).unwrap();
    let r2 = FileDevice::open_with(&path, ro).unwrap();
    assert_eq!(FileDevice::open(&path).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    drop((r1, r2));
    FileDevice::open(&path).unwrap();
}
