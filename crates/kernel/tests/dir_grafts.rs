//! Grafts over names: `dir.access` (a directory's owner narrows who may use the tree under it)
//! and `dir.lookup` (a process redirects its own lookups). Neither can widen what the permission
//! bits allow, an access graft fails closed, and a redirect is walked again with the process's
//! own credentials.

mod common;

use std::sync::Arc;
use vino_graft::GraftEvent;
use vino_kernel::account::{LimitsConfig, Resource};
use vino_kernel::{At, Credentials, Errno, Kernel, OpenFlags, Process};
use vino_sdk::{BuildOptions, build_example};

const OWNER: u32 = 1000;
const OTHER: u32 = 1001;
const BANNED: u32 = 1002;

fn kernel() -> Arc<Kernel> {
    common::small_kernel(8192, LimitsConfig::default())
}

fn user(k: &Arc<Kernel>, uid: u32) -> Arc<Process> {
    k.spawn(Credentials::user(uid, uid))
}

fn example(name: &str) -> Vec<u8> {
    build_example(name, &BuildOptions::default()).unwrap()
}

fn errno<T: std::fmt::Debug>(r: vino_kernel::SysResult<T>) -> Errno {
    r.expect_err("refused").errno
}

/// `/shared` (0777, OWNER's) with a file `f` (0644), a hidden `.h`, a subdirectory `sub`
/// holding `g`, and a file `mine` (0600) only its owner reads.
fn shared_tree(k: &Arc<Kernel>) -> Arc<Process> {
    let root = k.spawn(Credentials::root());
    root.mkdir("/shared", 0o777).unwrap();
    root.chown("/shared", Some(OWNER), Some(OWNER)).unwrap();
    let owner = user(k, OWNER);
    for f in ["/shared/f", "/shared/.h", "/shared/mine"] {
        let fd = owner.open(f, OpenFlags::create()).unwrap();
        owner.write(fd, b"data").unwrap();
        owner.close(fd).unwrap();
    }
    owner.chmod("/shared/mine", 0o600).unwrap();
    owner.mkdir("/shared/sub", 0o777).unwrap();
    owner
        .close(owner.open("/shared/sub/g", OpenFlags::create()).unwrap())
        .unwrap();
    owner
}

/// Binds `wasm` to `dir` as `p`'s `dir.access` graft, through `dir.access/<fd>`.
fn bind(p: &Process, dir: &str, wasm: &[u8]) -> vino_kernel::SysResult<()> {
    let fd = p.open(dir, OpenFlags::directory())?;
    let r = p.graft_load(&format!("dir.access/{fd}"), wasm).map(drop);
    p.close(fd)?;
    r
}

fn unbind(p: &Process, dir: &str) -> vino_kernel::SysResult<()> {
    let fd = p.open(dir, OpenFlags::directory())?;
    let r = p.graft_unload(&format!("dir.access/{fd}"));
    p.close(fd)?;
    r
}

/// `p`'s control call on the graft bound to `dir`.
fn control(p: &Process, dir: &str, name: &str, args: &[i64]) -> i64 {
    let fd = p.open(dir, OpenFlags::directory()).unwrap();
    let r = p.graft_call(&format!("dir.access/{fd}"), name, args).unwrap();
    p.close(fd).unwrap();
    r
}

#[test]
fn an_access_graft_narrows_the_tree_and_never_widens_it() {
    let k = kernel();
    let owner = shared_tree(&k);
    let other = user(&k, OTHER);
    let banned = user(&k, BANNED);
    // Only the directory's owner binds (root is not its owner either).
    assert_eq!(errno(bind(&other, "/shared", &example("count_access"))), Errno::Perm);
    assert_eq!(
        errno(bind(&k.spawn(Credentials::root()), "/shared", &example("count_access"))),
        Errno::Perm
    );
    bind(&owner, "/shared", &example("dir_hours")).unwrap();
    control(&owner, "/shared", "set_owner", &[OWNER as i64]);
    control(&owner, "/shared", "ban", &[BANNED as i64]);

    // Others read what the bits let them, but see no hidden name.
    assert!(other.stat("/shared/f").is_ok());
    assert_eq!(errno(other.stat("/shared/.h")), Errno::Acces);
    assert_eq!(errno(other.open("/shared/.h", OpenFlags::read_only())), Errno::Acces);
    assert!(owner.stat("/shared/.h").is_ok(), "the owner's calls pass");
    // The banned user cannot even look a name up, by any route.
    assert_eq!(errno(banned.stat("/shared/f")), Errno::Acces);
    assert_eq!(errno(banned.readdir("/shared/sub")), Errno::Acces);
    // Outside the hours (none), others change nothing; reading still works.
    control(&owner, "/shared", "set_hours", &[0, 0]);
    assert_eq!(errno(other.open("/shared/new", OpenFlags::create())), Errno::Acces);
    assert_eq!(errno(other.open("/shared/f", OpenFlags::read_write())), Errno::Acces);
    assert_eq!(errno(other.unlink("/shared/f")), Errno::Acces);
    assert_eq!(errno(other.mkdir("/shared/sub/d", 0o755)), Errno::Acces);
    assert_eq!(errno(other.rename("/shared/sub/g", "/shared/g2")), Errno::Acces);
    assert_eq!(errno(other.symlink("f", "/shared/l")), Errno::Acces);
    assert!(other.open("/shared/f", OpenFlags::read_only()).is_ok());
    assert!(
        owner.open("/shared/new", OpenFlags::create()).is_ok(),
        "the owner's changes pass"
    );
    control(&owner, "/shared", "set_hours", &[0, 24]);
    assert!(other.mkdir("/shared/sub/d", 0o755).is_ok());

    // A permissive graft grants nothing the bits refuse.
    bind(&owner, "/shared", &example("count_access")).unwrap();
    assert_eq!(errno(other.open("/shared/mine", OpenFlags::read_only())), Errno::Acces);
    assert!(banned.stat("/shared/f").is_ok(), "the replaced graft is gone");

    // An open's last name is one question (the open, standing for its lookup), a walk step one.
    let asked = || {
        let list = owner.dir_access_list();
        list[0].stats.as_ref().expect("loaded").invocations
    };
    let before = asked();
    other
        .close(other.open("/shared/f", OpenFlags::read_only()).unwrap())
        .unwrap();
    assert_eq!(asked() - before, 1, "an open of a name under the binding");
    let before = asked();
    other
        .close(other.open("/shared/fresh", OpenFlags::create()).unwrap())
        .unwrap();
    assert_eq!(asked() - before, 1, "a create");
    let before = asked();
    other.stat("/shared/sub/g").unwrap();
    assert_eq!(asked() - before, 2, "a stat two names below it");
}

#[test]
fn nested_bindings_all_apply_and_an_inner_owner_cannot_widen() {
    let k = kernel();
    let owner = shared_tree(&k);
    let other = user(&k, OTHER);
    let banned = user(&k, BANNED);
    other.mkdir("/shared/others", 0o777).unwrap();
    other
        .close(other.open("/shared/others/x", OpenFlags::create()).unwrap())
        .unwrap();
    bind(&owner, "/shared", &example("dir_hours")).unwrap();
    control(&owner, "/shared", "ban", &[BANNED as i64]);
    // The inner directory's owner binds an allow-everything graft: the outer ban still holds.
    bind(&other, "/shared/others", &example("count_access")).unwrap();
    assert_eq!(errno(banned.stat("/shared/others/x")), Errno::Acces);
    // From a descriptor inside the tree, the outer binding still governs.
    let root = k.spawn(Credentials::root());
    let fd = root.open("/shared/others", OpenFlags::directory()).unwrap();
    let inherited = banned.kernel().spawn(Credentials::user(BANNED, BANNED));
    let kfd = root.inherit_fd(fd, &inherited).unwrap();
    assert_eq!(errno(inherited.stat_at(At::Fd(kfd), "x", true)), Errno::Acces);
    assert!(other.stat_at(At::Root, "/shared/others/x", true).is_ok());
    // Removing the bound directory drops its binding (and its charge).
    other.unlink("/shared/others/x").unwrap();
    let before = k.accounts().user(OTHER).used(Resource::Bindings);
    assert_eq!(before, 1);
    other.rmdir("/shared/others").unwrap();
    assert_eq!(k.accounts().user(OTHER).used(Resource::Bindings), 0);
}

/// A `dir.access` graft that never returns.
const LOOPING: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (func (export "dir_access") (param i32 i32 i32 i32 i64 i32 i64) (result i32) (loop (br 0)) (i32.const 0)))"#;
/// One that traps on every call.
const TRAPPING: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (func (export "dir_access") (param i32 i32 i32 i32 i64 i32 i64) (result i32) unreachable))"#;

#[test]
fn a_failing_access_graft_refuses_then_is_unloaded_and_its_owner_told() {
    for hostile in [LOOPING, TRAPPING] {
        let k = kernel();
        let owner = shared_tree(&k);
        let other = user(&k, OTHER);
        let user_account = k.accounts().user(OWNER);
        bind(&owner, "/shared", hostile.as_bytes()).unwrap();
        assert_eq!(user_account.used(Resource::Grafts), 1);
        // Fails closed: a graft that fails refuses, never lets the call through by default.
        assert_eq!(errno(other.stat("/shared/f")), Errno::Acces);
        assert_eq!(errno(owner.open("/shared/f", OpenFlags::read_only())), Errno::Acces);
        // It keeps failing: its slot unloads it and tells the binder; POSIX alone decides.
        let mut refused = 2;
        while other.stat("/shared/f").is_err() {
            refused += 1;
            assert!(refused < 1000, "the failing graft was never unloaded");
        }
        let events = owner.graft_events();
        assert!(
            events
                .iter()
                .any(|e| matches!(e, GraftEvent::Unloaded { point, .. } if point.starts_with("dir.access"))),
            "{events:?}"
        );
        let listed = owner.dir_access_list();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].graft.is_none(), "listed as unloaded");
        assert_eq!(user_account.used(Resource::Grafts), 0, "the graft's charge is back");
        unbind(&owner, "/shared").unwrap();
        assert_eq!(user_account.used(Resource::Bindings), 0);
    }
}

#[test]
fn the_mount_s_routes_are_governed_too() {
    let k = kernel();
    let owner = shared_tree(&k);
    bind(&owner, "/shared", &example("dir_hours")).unwrap();
    control(&owner, "/shared", "ban", &[BANNED as i64]);
    control(&owner, "/shared", "set_hours", &[0, 0]);
    let banned = user(&k, BANNED);
    let other = user(&k, OTHER);
    // The mount looks names up one at a time from an inode it holds, then opens by inode.
    let shared = owner.stat("/shared").unwrap();
    let at = At::Inode {
        ino: shared.ino,
        generation: shared.generation,
    };
    assert_eq!(errno(banned.stat_at(at, "f", true)), Errno::Acces);
    let f = other.stat_at(at, "f", true).unwrap();
    assert!(other.open_inode(f.ino, f.generation, OpenFlags::read_only()).is_ok());
    assert_eq!(
        errno(other.open_inode(f.ino, f.generation, OpenFlags::read_write())),
        Errno::Acces,
        "an open by inode is checked where the file was found"
    );
    let sub = other.stat("/shared/sub").unwrap();
    assert_eq!(
        errno(other.setattr_at(
            At::Inode {
                ino: sub.ino,
                generation: sub.generation
            },
            "",
            true,
            &vino_kernel::Attrs {
                atime: vino_kernel::SetTime::Now,
                mtime: vino_kernel::SetTime::Now,
                ..Default::default()
            }
        )),
        Errno::Acces
    );
}

/// A `dir.lookup` graft that sends every name to `loop`.
const REDIRECT_ALL: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (data (i32.const 0) "loop")
  (func (export "dir_lookup") (param i64 i32) (result i32)
    (i32.store (i32.const 1024) (i32.load (i32.const 0))) (i32.const 4)))"#;
/// One that sends every name to `/loop`.
const REDIRECT_ABSOLUTE: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (data (i32.const 0) "/loop")
  (func (export "dir_lookup") (param i64 i32) (result i32)
    (i32.store (i32.const 1024) (i32.load (i32.const 0)))
    (i32.store8 (i32.const 1028) (i32.load8_u (i32.const 4))) (i32.const 5)))"#;
/// One that traps.
const REDIRECT_TRAP: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (func (export "dir_lookup") (param i64 i32) (result i32) unreachable))"#;

/// `p` redirects `/tmp` to `private`.
fn private_tmp(p: &Process, private: &str) {
    p.graft_load("dir.lookup", &example("private_tmp")).unwrap();
    let at = p.graft_symbol("dir.lookup", "private_tmp").unwrap();
    let mut path = private.as_bytes().to_vec();
    path.push(0);
    p.graft_write_memory("dir.lookup", at, &path).unwrap();
}

#[test]
fn a_redirect_is_walked_again_with_the_process_s_own_rights() {
    let k = kernel();
    let root = k.spawn(Credentials::root());
    root.mkdir("/tmp", 0o1777).unwrap();
    root.mkdir("/home", 0o755).unwrap();
    root.mkdir("/home/b", 0o755).unwrap();
    root.chown("/home/b", Some(OTHER), Some(OTHER)).unwrap();
    root.mkdir("/secret", 0o700).unwrap();
    root.mkdir("/secret/tmp", 0o777).unwrap();
    let b = user(&k, OTHER);
    b.mkdir("/home/b/tmp", 0o700).unwrap();
    private_tmp(&b, "/home/b/tmp");
    // Its /tmp is its own directory; everyone else's is the shared one.
    b.close(b.open("/tmp/x", OpenFlags::create()).unwrap()).unwrap();
    assert!(root.stat("/home/b/tmp/x").is_ok());
    assert_eq!(errno(root.stat("/tmp/x")), Errno::NoEnt);
    assert!(b.stat("/tmp/x").is_ok());
    b.rename("/tmp/x", "/tmp/y").unwrap();
    assert!(root.stat("/home/b/tmp/y").is_ok());
    // The last name of a path is redirected too (a create of /tmp itself is the private one).
    assert_eq!(b.stat("/tmp").unwrap().ino, root.stat("/home/b/tmp").unwrap().ino);
    // A redirect to where the process may not go is refused as the name itself would be.
    private_tmp(&b, "/secret/tmp");
    assert_eq!(errno(b.stat("/tmp/y")), Errno::Acces);
    assert_eq!(errno(b.open("/tmp/z", OpenFlags::create())), Errno::Acces);
    // ... and a directory's dir.access graft governs the redirect's names as any others.
    let owner = shared_tree(&k);
    bind(&owner, "/shared", &example("dir_hours")).unwrap();
    control(&owner, "/shared", "ban", &[OTHER as i64]);
    private_tmp(&b, "/shared/sub");
    assert_eq!(errno(b.stat("/tmp/g")), Errno::Acces);
    private_tmp(&b, "/home/b/tmp");
    let fd_root = b.open("/", OpenFlags::directory()).unwrap();
    assert!(
        b.stat_at(At::Beneath(fd_root), "tmp/y", true).is_ok(),
        "beneath the root is everywhere"
    );
    b.graft_unload("dir.lookup").unwrap();
    assert_eq!(errno(b.stat("/tmp/y")), Errno::NoEnt, "unloaded: the shared /tmp again");
}

#[test]
fn a_redirect_is_not_redirected_again_and_a_failing_graft_redirects_nothing() {
    let k = kernel();
    let root = k.spawn(Credentials::root());
    root.mkdir("/loop", 0o755).unwrap();
    root.mkdir("/a", 0o755).unwrap();
    let p = user(&k, OTHER);
    p.graft_load("dir.lookup", REDIRECT_ALL.as_bytes()).unwrap();
    // Every name leads to `loop` once: `/a` is `/loop`; `/a/b` is `/loop/loop` (absent), and no
    // redirect of `loop` goes round again.
    assert_eq!(p.stat("/a").unwrap().ino, root.stat("/loop").unwrap().ino);
    assert_eq!(errno(p.stat("/a/b")), Errno::NoEnt);
    // Beneath a directory, a redirect out of it is refused (EXDEV), as an absolute link is.
    let a = p.open("/a", OpenFlags::directory()).unwrap();
    p.graft_load("dir.lookup", REDIRECT_ABSOLUTE.as_bytes()).unwrap();
    assert_eq!(errno(p.stat_at(At::Beneath(a), "x", true)), Errno::XDev);
    assert_eq!(errno(p.mkdir_at(At::Beneath(a), "x", 0o755)), Errno::XDev);
    assert_eq!(p.stat("/anything").unwrap().ino, root.stat("/loop").unwrap().ino);
    p.graft_load("dir.lookup", REDIRECT_TRAP.as_bytes()).unwrap();
    assert_eq!(p.stat("/a").unwrap().ino, root.stat("/a").unwrap().ino);
}

#[test]
fn a_rename_into_or_out_of_a_governed_tree_opens_no_window() {
    let k = kernel();
    let owner = shared_tree(&k);
    let root = k.spawn(Credentials::root());
    root.mkdir("/out", 0o777).unwrap();
    root.chown("/out", Some(OWNER), Some(OWNER)).unwrap();
    bind(&owner, "/shared", &example("dir_hours")).unwrap();
    control(&owner, "/shared", "ban", &[BANNED as i64]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The owner moves `sub` in and out of the governed tree while others walk to it.
    let mover = {
        let (owner, stop) = (owner.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                owner.rename("/shared/sub", "/out/sub").unwrap();
                owner.rename("/out/sub", "/shared/sub").unwrap();
            }
        })
    };
    let walkers: Vec<_> = (0..3)
        .map(|i| {
            let k = k.clone();
            std::thread::spawn(move || {
                let banned = user(&k, BANNED);
                let other = user(&k, OTHER);
                let (mut inside, mut outside) = (0, 0);
                // Until it has seen both places (however the threads are scheduled), and a
                // while more.
                let mut rounds = 0u32;
                while rounds < 500 || ((inside == 0 || outside == 0) && rounds < 2_000_000) {
                    rounds += 1;
                    // Under the governed tree the banned user is always refused; outside it,
                    // it finds the file or (mid-move) nothing.
                    let r = banned.stat("/shared/sub/g");
                    assert!(matches!(&r, Err(e) if e.errno == Errno::Acces), "walker {i}: {r:?}");
                    match banned.stat("/out/sub/g") {
                        Ok(_) => outside += 1,
                        Err(e) => assert_eq!(e.errno, Errno::NoEnt, "walker {i}"),
                    }
                    match other.stat("/shared/sub/g") {
                        Ok(_) => inside += 1,
                        Err(e) => assert_eq!(e.errno, Errno::NoEnt, "walker {i}"),
                    }
                }
                (inside, outside)
            })
        })
        .collect();
    let seen: Vec<(u32, u32)> = walkers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    mover.join().unwrap();
    assert!(
        seen.iter().all(|&(i, o)| i > 0 && o > 0),
        "the walks saw both places: {seen:?}"
    );
}
