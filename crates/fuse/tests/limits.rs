//! Limits per principal through the mount: programs of one user that hold many files open get
//! `EMFILE` at their limit (the kernel process of their credentials is charged), while another
//! user's programs open files as before, and what the first held is given back when its
//! programs end. (Run as root; the users' programs run under `setpriv`.)

mod common;

use common::{Mounted, line, lock_waiters, locked_file, python_as};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::{Duration, Instant};
use vino_kernel::KernelConfig;
use vino_kernel::account::{LimitsConfig, Resource};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

/// Opens files in `dir` as `uid` until refused; prints how many and the error.
fn open_until_refused(uid: u32, dir: &str) -> Output {
    let script = format!(
        "import os\nfds = []\ntry:\n    while len(fds) < 5000:\n        fds.append(os.open('{dir}/f%d' % len(fds), os.O_CREAT | os.O_RDWR, 0o644))\nexcept OSError as e:\n    print(len(fds), e.errno)\n"
    );
    python_as(uid, &script)
        .output()
        .expect("setpriv and python3 run programs as other users")
}

/// A mount open to every user, of a kernel with the default limits as `tune` changes them.
fn mounted_with(tune: impl FnOnce(&mut LimitsConfig)) -> Mounted {
    let mut limits = LimitsConfig::default();
    tune(&mut limits);
    let kernel = KernelConfig {
        limits,
        ..KernelConfig::default()
    };
    Mounted::for_all(&kernel)
}

#[test]
fn a_users_open_files_through_the_mount_are_limited_and_anothers_are_not() {
    let m = mounted_with(|limits| {
        limits.process.set(Resource::Descriptors, 64);
    });
    let mnt = m.mnt();
    for uid in [ALICE, BOB] {
        let home = mnt.join(format!("home{uid}"));
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(uid)).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let emfile = libc::EMFILE.to_string();
    for uid in [ALICE, BOB] {
        let out = open_until_refused(uid, &mnt.join(format!("home{uid}")).display().to_string());
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words, ["64", emfile.as_str()], "uid {uid}: {out:?}");
    }
    // Everything the programs held is given back once Linux releases their files.
    refunded(&m, Resource::Descriptors);
    m.finish();
}

/// Waits until nothing of `r` is charged (the mount gives things back a moment after the
/// programs see their answers).
fn refunded(m: &Mounted, r: Resource) {
    let total = m.kernel.accounts().total().clone();
    let until = Instant::now() + Duration::from_secs(10);
    while total.used(r) != 0 {
        assert!(Instant::now() < until, "{} of {r:?} still charged", total.used(r));
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn one_users_blocked_locks_through_the_mount_cannot_take_anothers_wait_threads() {
    let m = mounted_with(|limits| {
        limits.user.set(Resource::LockWaits, 4);
    });
    // Root holds the file's lock through the socket's side of the kernel.
    let (holder, fd, path) = locked_file(&m);
    // Alice starts eight waits: four wait (her share of threads), four get ENOLCK at once.
    let mut alice = lock_waiters(ALICE, &path, 8, 4, false);
    assert_eq!(line(&mut alice), "REFUSED 4");
    // Bob's waits have threads of their own.
    let mut bob = lock_waiters(BOB, &path, 2, 0, false);
    assert_eq!(line(&mut bob), "REFUSED 0");
    holder.lock(fd, vino_kernel::LockRequest::unlock(0, 0), false).unwrap();
    assert_eq!(line(&mut alice), "GRANTED 4");
    assert_eq!(line(&mut bob), "GRANTED 2");
    alice.wait().unwrap();
    bob.wait().unwrap();
    m.kernel.exit(holder.pid());
    drop(holder);
    refunded(&m, Resource::LockWaits);
    m.finish();
}
