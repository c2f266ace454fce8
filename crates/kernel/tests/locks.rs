//! Byte-range locks through processes: fcntl semantics, close and exit release, and who may graft
//! `lock.grant`.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vino_kernel::{Credentials, Errno, Kernel, LockKind, LockRequest, OpenFlags, Process};

fn boot() -> Arc<Kernel> {
    boot_with(vino_kernel::account::LimitsConfig::default())
}

fn boot_with(limits: vino_kernel::account::LimitsConfig) -> Arc<Kernel> {
    common::small_kernel(4096, limits)
}

/// Root makes /shared (world-writable) and two users open /shared/db read-write.
fn setup() -> (Arc<Kernel>, Arc<Process>, Arc<Process>) {
    setup_in(boot())
}

fn setup_in(k: Arc<Kernel>) -> (Arc<Kernel>, Arc<Process>, Arc<Process>) {
    let root = k.spawn(Credentials::root());
    root.mkdir("/shared", 0o777).unwrap();
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(1001, 1001));
    let fd = alice
        .open(
            "/shared/db",
            OpenFlags {
                mode: 0o666,
                ..OpenFlags::create()
            },
        )
        .unwrap();
    alice.close(fd).unwrap();
    (k, alice, bob)
}

/// Runs `f` in a thread and returns once the kernel shows one more waiter on `ino`.
fn blocked<F>(k: &Kernel, ino: u64, f: F) -> thread::JoinHandle<Result<(), Errno>>
where
    F: FnOnce() -> Result<(), Errno> + Send + 'static,
{
    let before = k.locks().waiting(ino).len();
    let h = thread::spawn(f);
    let t = Instant::now();
    while k.locks().waiting(ino).len() == before && !h.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(10), "never waited");
        thread::sleep(Duration::from_millis(1));
    }
    h
}

#[test]
fn fcntl_semantics_through_processes() {
    let (k, alice, bob) = setup();
    let a = alice.open("/shared/db", OpenFlags::read_write()).unwrap();
    let b = bob.open("/shared/db", OpenFlags::read_write()).unwrap();
    let ino = alice.inode(a).unwrap();
    alice.lock(a, LockRequest::write(0, 10), false).unwrap();
    assert_eq!(
        bob.lock(b, LockRequest::read(5, 1), false).unwrap_err().errno,
        Errno::Again
    );
    let l = bob.getlk(b, LockRequest::read(5, 1)).unwrap().expect("alice's lock");
    assert_eq!(
        (l.owner, l.kind, l.range.start, l.range.len()),
        (alice.pid(), LockKind::Write, 0, 10)
    );
    assert_eq!(
        alice.getlk(a, LockRequest::write(0, 0)).unwrap(),
        None,
        "one's own locks never conflict"
    );
    bob.lock(b, LockRequest::read(10, 0), false).unwrap();
    // Deadlock: bob waits for alice, then alice asks for bob's range.
    let bob2 = bob.clone();
    let h = blocked(&k, ino, move || {
        bob2.lock(b, LockRequest::write(0, 1), true).map_err(|e| e.errno)
    });
    assert_eq!(
        alice.lock(a, LockRequest::write(10, 1), true).unwrap_err().errno,
        Errno::Deadlk
    );
    alice.lock(a, LockRequest::unlock(0, 0), false).unwrap();
    assert_eq!(h.join().unwrap(), Ok(()));
    // A read-only descriptor cannot take a write lock.
    let ro = alice.open("/shared/db", OpenFlags::read_only()).unwrap();
    assert_eq!(
        alice.lock(ro, LockRequest::write(100, 1), false).unwrap_err().errno,
        Errno::BadF
    );
    assert_eq!(
        alice.lock(ro, LockRequest::read(u64::MAX, 2), false).unwrap_err().errno,
        Errno::Inval
    );
}

#[test]
fn closing_any_descriptor_of_the_file_releases_its_locks() {
    let (k, alice, bob) = setup();
    let a1 = alice.open("/shared/db", OpenFlags::read_write()).unwrap();
    let a2 = alice.open("/shared/db", OpenFlags::read_only()).unwrap();
    let b = bob.open("/shared/db", OpenFlags::read_write()).unwrap();
    let ino = alice.inode(a1).unwrap();
    alice.lock(a1, LockRequest::write(0, 1), false).unwrap();
    let bob2 = bob.clone();
    let h = blocked(&k, ino, move || {
        bob2.lock(b, LockRequest::write(0, 1), true).map_err(|e| e.errno)
    });
    alice.close(a2).unwrap();
    assert_eq!(
        h.join().unwrap(),
        Ok(()),
        "POSIX: the other descriptor's close drops the lock"
    );
    assert_eq!(
        k.locks().held(ino).iter().map(|l| l.owner).collect::<Vec<_>>(),
        vec![bob.pid()]
    );
}

#[test]
fn exit_releases_locks_and_cancels_waits() {
    let (k, alice, bob) = setup();
    let a = alice.open("/shared/db", OpenFlags::read_write()).unwrap();
    let b = bob.open("/shared/db", OpenFlags::read_write()).unwrap();
    let ino = alice.inode(a).unwrap();
    alice.lock(a, LockRequest::read(0, 0), false).unwrap();
    let bob2 = bob.clone();
    let h = blocked(&k, ino, move || {
        bob2.lock(b, LockRequest::write(0, 1), true).map_err(|e| e.errno)
    });
    k.exit(alice.pid());
    assert_eq!(h.join().unwrap(), Ok(()), "the exiting process's locks go");
    let carol = k.spawn(Credentials::user(1002, 1002));
    let c = carol.open("/shared/db", OpenFlags::read_write()).unwrap();
    let carol2 = carol.clone();
    let h = blocked(&k, ino, move || {
        carol2.lock(c, LockRequest::read(0, 1), true).map_err(|e| e.errno)
    });
    k.exit(carol.pid());
    assert_eq!(
        h.join().unwrap(),
        Err(Errno::Intr),
        "a process that exits stops waiting"
    );
    k.exit(bob.pid());
    assert!(k.locks().held(ino).is_empty() && k.locks().waiting(ino).is_empty());
}

#[test]
fn only_the_creator_or_a_privileged_process_may_graft_lock_grant() {
    let (k, alice, bob) = setup();
    let fifo = vino_sdk::build_example("lock_fifo", &Default::default()).expect("building lock_fifo.c");
    let a = alice.open("/shared/db", OpenFlags::read_write()).unwrap();
    let b = bob.open("/shared/db", OpenFlags::read_write()).unwrap();
    assert_eq!(
        bob.graft_load(&format!("lock.grant/{b}"), &fifo).unwrap_err().errno,
        Errno::Perm
    );
    alice.graft_load(&format!("lock.grant/{a}"), &fifo).unwrap();
    // One graftpoint per file, seen through every descriptor; another user's graft without
    // its details.
    let info = bob.graft_stats(&format!("lock.grant/{b}")).unwrap();
    assert!(info.policy == vino_graft::PolicyKind::Wasm && info.graft.is_none());
    let root = k.spawn(Credentials::root());
    let r = root.open("/shared/db", OpenFlags::read_write()).unwrap();
    root.graft_unload(&format!("lock.grant/{r}")).unwrap();
    assert!(alice.graft_stats(&format!("lock.grant/{a}")).unwrap().graft.is_none());
    // The graft decides for everyone's locks on the file: strict FIFO keeps a reader behind a
    // waiting writer.
    alice.graft_load(&format!("lock.grant/{a}"), &fifo).unwrap();
    let ino = alice.inode(a).unwrap();
    alice.lock(a, LockRequest::read(0, 1), false).unwrap();
    let bob2 = bob.clone();
    let h = blocked(&k, ino, move || {
        bob2.lock(b, LockRequest::write(0, 1), true).map_err(|e| e.errno)
    });
    assert_eq!(
        root.lock(r, LockRequest::read(0, 1), false).unwrap_err().errno,
        Errno::Again
    );
    alice.close(a).unwrap();
    assert_eq!(h.join().unwrap(), Ok(()));
    let stats = root.graft_stats(&format!("lock.grant/{r}")).unwrap().stats.unwrap();
    assert!(stats.invocations >= 2 && stats.failures == 0, "{stats:?}");
}

#[test]
fn lock_records_are_charged_to_their_user_up_to_enolck_and_refunded() {
    use vino_kernel::Resource::LockRecords;
    let mut limits = vino_kernel::account::LimitsConfig::default();
    limits.user.set(LockRecords, 8);
    let (k, alice, bob) = setup_in(boot_with(limits));
    let alice2 = k.spawn(Credentials::user(1000, 1000));
    let a = alice.open("/shared/db", OpenFlags::read_write()).unwrap();
    let a2 = alice2.open("/shared/db", OpenFlags::read_write()).unwrap();
    let b = bob.open("/shared/db", OpenFlags::read_write()).unwrap();
    // Two processes of one user share its limit; every record is one, wherever it is.
    for i in 0..4 {
        alice.lock(a, LockRequest::write(i * 2, 1), false).unwrap();
        alice2.lock(a2, LockRequest::read(100 + i * 2, 1), false).unwrap();
    }
    let e = alice.lock(a, LockRequest::write(50, 1), false).unwrap_err();
    assert_eq!(e.errno, Errno::NoLck, "{e}");
    assert!(e.message.contains("uid 1000"), "{e}");
    // Merging frees one; splitting a record by unlocking its middle needs one more.
    alice.lock(a, LockRequest::write(0, 3), false).unwrap();
    alice.lock(a, LockRequest::write(50, 1), false).unwrap();
    let e = alice.lock(a, LockRequest::unlock(1, 1), false).unwrap_err();
    assert_eq!(e.errno, Errno::NoLck, "{e}");
    // The other user is not held back by alice's records.
    for i in 0..8 {
        bob.lock(b, LockRequest::read(200 + i * 2, 1), false).unwrap();
    }
    let accounts = k.accounts();
    assert_eq!(accounts.user(1000).used(LockRecords), 8);
    assert_eq!(accounts.user(1001).used(LockRecords), 8);
    // Unlock, close and exit each give them back.
    alice.lock(a, LockRequest::unlock(0, 0), false).unwrap();
    assert_eq!(accounts.user(1000).used(LockRecords), 4);
    alice2.close(a2).unwrap();
    assert_eq!(accounts.user(1000).used(LockRecords), 0);
    k.exit(bob.pid());
    assert_eq!(accounts.total().used(LockRecords), 0);
    k.locks().check_invariants();
}
