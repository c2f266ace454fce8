//! The kernel boundary: the rules that protect one user from another hold at the kernel's own
//! calls (what a process sees of others' grafts, whose CPU tickets it sets, how many blocking
//! lock waits and connections a user holds), and the front ends reach the kernel only through
//! those calls.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vino_kernel::account::LimitsConfig;
use vino_kernel::{Credentials, Errno, Kernel, LockRequest, OpenFlags, Process, Resource};

fn boot(limits: LimitsConfig) -> Arc<Kernel> {
    common::small_kernel(4096, limits)
}

fn alice_cred() -> Credentials {
    Credentials::user(1000, 1000)
}

fn bob_cred() -> Credentials {
    Credentials::user(1001, 1001)
}

/// A file everyone may read and write.
fn shared_file(root: &Process, path: &str) {
    let fd = root
        .open(
            path,
            OpenFlags {
                mode: 0o666,
                ..OpenFlags::create()
            },
        )
        .unwrap();
    root.close(fd).unwrap();
}

#[test]
fn another_users_graft_details_are_hidden_by_the_kernel() {
    let k = boot(LimitsConfig::default());
    let root = k.spawn(Credentials::root());
    root.mkdir("/home", 0o777).unwrap();
    shared_file(&root, "/data");
    let elevator = vino_sdk::build_example("elevator", &Default::default()).unwrap();
    let ra = vino_sdk::build_example("sequential_ra", &Default::default()).unwrap();
    root.graft_load("disk.pick_request", &elevator).unwrap();
    root.graft_load_file("/data", "file.compute_ra", &ra).unwrap();
    let alice = k.spawn(alice_cred());
    let mine = alice.open("/home/a", OpenFlags::create()).unwrap();
    alice.graft_load(&format!("file.compute_ra/{mine}"), &ra).unwrap();
    let data = alice.open("/data", OpenFlags::read_only()).unwrap();

    let list = alice.graft_list();
    let slot = |point: &str| list.iter().find(|s| s.point == point).cloned().unwrap();
    let hidden = |s: &vino_graft::SlotInfo| s.graft.is_none() && s.stats.is_none();
    let global = slot("disk.pick_request");
    assert!(hidden(&global), "root's global graft shown: {global:?}");
    let foreign = slot(&format!("file.compute_ra/{data}"));
    assert!(hidden(&foreign), "root's file-wide graft shown: {foreign:?}");
    let own = slot(&format!("file.compute_ra/{mine}"));
    assert!(own.graft.is_some_and(|g| g.owner == alice.pid() && !g.hash.is_empty()));
    assert!(hidden(&alice.graft_stats("disk.pick_request").unwrap()));
    assert!(hidden(&alice.graft_stats(&format!("file.compute_ra/{data}")).unwrap()));
    let own = alice.graft_stats(&format!("file.compute_ra/{mine}")).unwrap();
    assert!(own.graft.is_some() && own.stats.is_some());
    // Root sees everything; so does another process of the loader's uid.
    let seen = root.graft_stats("disk.pick_request").unwrap();
    assert!(seen.graft.is_some_and(|g| g.owner == root.pid()));
    assert!(k.sees(&alice_cred(), alice.pid()) && !k.sees(&bob_cred(), alice.pid()));
}

#[test]
fn a_user_sees_only_its_own_account_and_root_sees_every_one() {
    let k = boot(LimitsConfig::default());
    let (alice, bob) = (k.spawn(alice_cred()), k.spawn(bob_cred()));
    let uids = |viewer: &Credentials| k.user_accounts(viewer).iter().map(|a| a.uid).collect::<Vec<_>>();
    assert_eq!(uids(alice.credentials()), vec![1000]);
    assert_eq!(uids(bob.credentials()), vec![1001]);
    let all = uids(&Credentials::root());
    assert!(all.contains(&1000) && all.contains(&1001), "{all:?}");
    let mine = &k.user_accounts(alice.credentials())[0];
    assert_eq!(mine.held.len(), Resource::ALL.len(), "{mine:?}");
}

#[test]
fn tickets_of_another_users_process_or_of_a_user_are_refused() {
    let k = boot(LimitsConfig::default());
    let alice = k.spawn(alice_cred());
    let alice2 = k.spawn(alice_cred());
    let bob = k.spawn(bob_cred());
    let root = k.spawn(Credentials::root());
    alice.set_tickets_of(alice2.pid(), 300).unwrap();
    assert_eq!(k.cpu().process_tickets(alice2.pid()), Some(300));
    // Bob's process is not there for Alice; a user's share is the privileged's to set.
    assert_eq!(alice.set_tickets_of(bob.pid(), 5).unwrap_err().errno, Errno::Srch);
    assert_eq!(alice.set_user_tickets(1001, 5).unwrap_err().errno, Errno::Perm);
    assert_eq!(alice.set_user_tickets(1000, 5).unwrap_err().errno, Errno::Perm);
    assert_ne!(k.cpu().process_tickets(bob.pid()), Some(5));
    root.set_tickets_of(bob.pid(), 7).unwrap();
    root.set_user_tickets(1001, 50).unwrap();
    assert_eq!(k.cpu().user_tickets(1001), 50);
    assert_eq!(alice.set_tickets_of(alice.pid(), 0).unwrap_err().errno, Errno::Inval);
}

/// Starts a blocking write lock of `p` on `path` in a thread and returns once it waits (or
/// ended at once, refused).
fn wait_for_lock(k: &Kernel, p: Arc<Process>, path: &str, ino: u64) -> thread::JoinHandle<Result<(), Errno>> {
    let fd = p.open(path, OpenFlags::read_write()).unwrap();
    let before = k.locks_on(ino).1.len();
    let h = thread::spawn(move || p.lock(fd, LockRequest::write(0, 0), true).map_err(|e| e.errno));
    let t = Instant::now();
    while k.locks_on(ino).1.len() == before && !h.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(10), "never waited");
        thread::sleep(Duration::from_millis(1));
    }
    h
}

#[test]
fn blocking_lock_waits_are_charged_by_the_kernel_for_every_entry_point() {
    let mut limits = LimitsConfig::default();
    limits.user.set(Resource::LockWaits, 2);
    let k = boot(limits);
    let root = k.spawn(Credentials::root());
    shared_file(&root, "/db");
    let fd = root.open("/db", OpenFlags::read_write()).unwrap();
    let ino = root.inode(fd).unwrap();
    root.lock(fd, LockRequest::write(0, 0), false).unwrap();
    // Alice's two waits take her share; a third is refused at once, Bob's still waits.
    let alices: Vec<_> = (0..2)
        .map(|_| wait_for_lock(&k, k.spawn(alice_cred()), "/db", ino))
        .collect();
    let third = wait_for_lock(&k, k.spawn(alice_cred()), "/db", ino);
    assert_eq!(third.join().unwrap(), Err(Errno::NoLck));
    let bobs = wait_for_lock(&k, k.spawn(bob_cred()), "/db", ino);
    assert_eq!(k.locks_on(ino).1.len(), 3);
    assert_eq!(k.accounts().user(1000).used(Resource::LockWaits), 2);
    // Each granted lock is dropped by its process's exit so the next wait gets its turn.
    root.lock(fd, LockRequest::unlock(0, 0), false).unwrap();
    for h in alices.into_iter().chain([bobs]) {
        while !h.is_finished() {
            for p in k.processes().into_iter().filter(|p| p.pid() != root.pid()) {
                if k.locks_on(ino).0.iter().any(|l| l.owner == p.pid()) {
                    k.exit(p.pid());
                }
            }
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(h.join().unwrap(), Ok(()));
    }
    assert_eq!(k.accounts().total().used(Resource::LockWaits), 0);
}

#[test]
fn connections_are_charged_to_their_user_with_a_reserve_for_root() {
    let mut limits = LimitsConfig::default();
    limits.total.set(Resource::Connections, 7);
    limits.user.set(Resource::Connections, 3);
    limits.root_reserved.set(Resource::Connections, 2);
    let k = boot(limits);
    let refused = |uid: u32| {
        let e = k.connect(uid).unwrap_err();
        assert_eq!(e.errno, Errno::Users);
        e.message
    };
    let alice: Vec<_> = (0..3).map(|_| k.connect(1000).unwrap()).collect();
    assert_eq!(refused(1000), "too many connections for uid 1000 (3)");
    let bob: Vec<_> = (0..2).map(|_| k.connect(1001).unwrap()).collect();
    assert_eq!(
        refused(1001),
        "too many connections for users other than root (5; 2 kept for root)"
    );
    let root: Vec<_> = (0..2).map(|_| k.connect(0).unwrap()).collect();
    assert_eq!(refused(0), "too many connections (7)");
    assert_eq!(k.accounts().user(1000).used(Resource::Connections), 3);
    // A connection that ends gives its place back.
    drop(alice);
    drop(bob);
    drop(root);
    assert_eq!(k.accounts().total().used(Resource::Connections), 0);
    let again: Vec<_> = (0..3).map(|_| k.connect(1000).unwrap()).collect();
    assert_eq!(again.len(), 3);
}

/// The crate's root: the workspace's crates beside it.
fn crates_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn front_ends_reach_the_kernel_only_through_its_calls() {
    let root = crates_dir();
    let internals = [
        ".fs()",
        ".cache()",
        ".locks()",
        ".scheduler()",
        ".runtime()",
        ".global_graftpoints()",
        "kernel.cpu()",
        "kernel().cpu()",
    ];
    for front in ["daemon", "fuse", "wasi", "cli"] {
        let manifest = std::fs::read_to_string(root.join(front).join("Cargo.toml")).unwrap();
        // The CLI is a tool on images too (mkfs, fsck, upgrade): it may use the file system.
        if front != "cli" {
            assert!(!manifest.contains("vino-fs"), "crates/{front} depends on vino-fs");
        }
        assert!(
            !manifest.contains("internals"),
            "crates/{front} turns on the kernel's internals"
        );
        let mut files = Vec::new();
        rust_files(&root.join(front), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for call in internals {
                assert!(!text.contains(call), "{} reaches into the kernel: {call}", f.display());
            }
        }
    }
    // Of the workspace, only the simulator turns the feature on.
    for entry in std::fs::read_dir(root).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        let Ok(manifest) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        if !["kernel", "sim"].contains(&name.as_str()) {
            assert!(
                !manifest.contains("\"internals\""),
                "crates/{name} turns on the kernel's internals"
            );
        }
    }
    for other in ["experiments/Cargo.toml", "fuzz/Cargo.toml"] {
        let manifest = std::fs::read_to_string(root.parent().unwrap().join(other)).unwrap();
        assert!(
            !manifest.contains("\"internals\""),
            "{other} turns on the kernel's internals"
        );
    }
}
