//! Both transports of the mount: FUSE over io_uring (turned on for the host here, as `vino mount`
//! run as root does) and `/dev/fuse`. Each serves the same programs, and the ring bounds the lock
//! waits that hold its entries. Needs root and /dev/fuse; the ring needs Linux 6.14 or later
//! (skipped, saying so, where the kernel lacks it).

use std::fs;
use vino_fuse::{MountConfig, Transport};

mod common;
use common::{Mounted, line, lock_waiters, locked_file, python_as, ring_available};

const ALICE: u32 = 3101;
const BOB: u32 = 3102;

fn mounted(transport: Transport, ring_depth: usize) -> Mounted {
    Mounted::with_config(MountConfig {
        allow_other: true,
        transport,
        ring_depth,
        ..MountConfig::default()
    })
}

/// Files made, written, read back, listed, renamed and removed by programs on the mount.
fn work(m: &Mounted) {
    let mnt = m.mnt();
    m.sh("mkdir -p a/b && for i in $(seq 1 50); do echo line $i > a/b/f$i; done");
    m.sh("dd if=/dev/urandom of=big bs=1M count=3 status=none && cp big a/big.copy && cmp big a/big.copy");
    assert_eq!(m.sh("ls a/b | wc -l").trim(), "50");
    m.sh("tar cf t.tar a && mkdir x && tar xf t.tar -C x && diff -r a x/a");
    m.sh("mv a/b/f1 a/moved && cat a/moved | grep -q 'line 1' && rm -rf x t.tar");
    // fsync and fsyncdir (answered off the queue's thread over the ring).
    m.sh(
        "python3 -c \"import os\nfd = os.open('a/synced', os.O_RDWR | os.O_CREAT, 0o644)\nos.write(fd, b'y')\nos.fsync(fd)\nd = os.open('a', os.O_RDONLY)\nos.fsync(d)\"",
    );
    // Reads of every shape (over the ring answered in the entry's own buffer): unaligned,
    // across pages, a whole request's worth, the tail, and past the end.
    let reads = r#"import os
fd = os.open('big', os.O_RDONLY)
want = open('a/big.copy', 'rb').read()
for off, n in [(0, 1), (1, 4095), (4095, 4097), (12345, 1 << 20), ((3 << 20) - 10, 100), ((3 << 20) + 5, 10)]:
    got = os.pread(fd, n, off)
    assert got == want[off:off + n], (off, n, len(got))
"#;
    m.sh(&format!("python3 -c \"{reads}\""));
    let big = fs::read(mnt.join("big")).unwrap();
    assert_eq!(big.len(), 3 << 20);
    assert!(fs::read(mnt.join("a/big.copy")).unwrap() == big, "the copy differs");
}

/// The mount counts what `work` made it serve, under FUSE's names, with the time on each kind;
/// returns the count of all.
fn counted(m: &Mounted) -> u64 {
    let served = m.mount.as_ref().unwrap().served();
    let count = |op: &str| served.iter().find(|s| s.op == op).map_or(0, |s| s.count);
    assert!(count("create") >= 50, "{served:?}");
    assert!(count("mkdir") >= 3, "{served:?}");
    for op in [
        "lookup", "write", "read", "fsync", "fsyncdir", "unlink", "rmdir", "release",
    ] {
        assert!(count(op) >= 1, "no {op} counted: {served:?}");
    }
    // mv renames with renameat2, which Linux sends as rename2.
    assert!(count("rename") + count("rename2") >= 1, "{served:?}");
    assert!(served.iter().all(|s| s.count > 0 && !s.time.is_zero()), "{served:?}");
    assert!(
        served.windows(2).all(|w| w[0].count >= w[1].count),
        "most served first: {served:?}"
    );
    served.iter().map(|s| s.count).sum()
}

#[test]
fn the_ring_serves_programs_on_the_mount() {
    if !ring_available() {
        return;
    }
    let m = mounted(Transport::Uring, 32);
    let mount = m.mount.as_ref().unwrap();
    assert!(mount.transport().starts_with("io_uring"), "{}", mount.transport());
    let free = m.kernel.fs_stats().free_inodes;
    work(&m);
    assert!(
        mount.ring_served() > 100,
        "only {} requests came through the ring",
        mount.ring_served()
    );
    // Forgets come through /dev/fuse, gathered into batches while the ring serves: every file
    // removed is freed once Linux forgets it.
    m.sh("rm -rf a big && for i in $(seq 1 300); do echo $i > f$i; done && rm f*");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while m.kernel.fs_stats().free_inodes != free && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(m.kernel.fs_stats().free_inodes, free, "removed files not freed");
    assert!(
        m.kernel.parked_files().is_empty(),
        "{:?} parked",
        m.kernel.parked_files()
    );
    m.finish();
}

/// A ring that cannot start (here: too deep for the machine's memory, 64 GiB of buffers per
/// queue) leaves the mount on `/dev/fuse`, saying why, and programs are served as before.
#[test]
fn a_ring_that_cannot_start_leaves_the_mount_on_dev_fuse() {
    if !ring_available() {
        return;
    }
    let m = mounted(Transport::Auto, u16::MAX as usize - 1);
    let mount = m.mount.as_ref().unwrap();
    let transport = mount.transport();
    if transport.starts_with("io_uring") {
        eprintln!("skipped: this machine has the memory for 64 GiB of ring buffers per CPU");
        return m.finish();
    }
    assert!(
        transport.starts_with("/dev/fuse (io_uring did not start")
            || transport.starts_with("/dev/fuse (io_uring refused"),
        "{transport}"
    );
    // The idle pollers the mount started by default for its ring went with it (a refusal is
    // told from the queue's thread a moment after it is recorded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while mount.idle_poll().ends_with(" pollers") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(mount.idle_poll().starts_with("off ("), "{}", mount.idle_poll());
    work(&m);
    assert_eq!(mount.ring_served(), 0);
    m.finish();
}

#[test]
fn dev_fuse_serves_when_asked_to() {
    let m = mounted(Transport::DevFuse, 32);
    let mount = m.mount.as_ref().unwrap();
    assert_eq!(mount.transport(), "/dev/fuse");
    work(&m);
    assert_eq!(mount.ring_served(), 0);
    counted(&m);
    m.finish();
}

#[test]
fn lock_waits_cannot_take_a_queues_entries_from_other_users() {
    if !ring_available() {
        return;
    }
    // 16 entries per queue: 4 kept for requests that do not wait, 4 waits per user.
    let m = mounted(Transport::Uring, 16);
    let (holder, fd, path) = locked_file(&m);
    // Alice's six waits on one CPU: four hold entries, two are refused at once.
    let mut alice = lock_waiters(ALICE, &path, 6, 2, true);
    assert_eq!(line(&mut alice), "REFUSED 2");
    // Bob's waits on the same queue have places of their own, and his other requests on that
    // CPU are served while everyone waits.
    let mut bob = lock_waiters(BOB, &path, 3, 0, true);
    assert_eq!(line(&mut bob), "REFUSED 0");
    let out = python_as(
        BOB,
        &format!("import os\nos.sched_setaffinity(0, {{0}})\nfor i in range(200):\n    os.stat('{path}')\nprint('ok')"),
    )
    .output()
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    holder.lock(fd, vino_kernel::LockRequest::unlock(0, 0), false).unwrap();
    assert_eq!(line(&mut alice), "GRANTED 4");
    assert_eq!(line(&mut bob), "GRANTED 3");
    alice.wait().unwrap();
    bob.wait().unwrap();
    m.kernel.exit(holder.pid());
    drop(holder);
    m.finish();
}

#[test]
fn a_ring_too_shallow_to_bound_waits_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dev: std::sync::Arc<dyn vino_blockdev::BlockDevice> = std::sync::Arc::new(vino_blockdev::MemDevice::new(4096));
    vino_kernel::storage::mkfs(&*dev, &vino_kernel::storage::MkfsOptions::default()).unwrap();
    let kernel = vino_kernel::Kernel::boot(dev, &vino_kernel::KernelConfig::default()).unwrap();
    let config = MountConfig {
        transport: Transport::Auto,
        ring_depth: vino_fuse::MIN_RING_DEPTH - 1,
        ..MountConfig::default()
    };
    let err = vino_fuse::mount(kernel.clone(), dir.path(), &config)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    kernel.shutdown().unwrap();
}
