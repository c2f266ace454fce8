//! The namespace through the socket, with real users: each connection a kernel process with its
//! client's uid, gid and supplementary groups (as the socket reports them), walking names with
//! the `*at` requests. Search permission on every directory passed, the sticky bit, groups,
//! set-ID bits, symbolic links, device nodes, extended attributes, byte names, fallocate, and
//! renames that replace a file while other processes open and read it.
//!
//! The tests with other users run them as child processes of this binary (`child_role`) that
//! drop root's credentials for a user's, supplementary groups included, before they connect;
//! they are skipped unless the tests run as root (as in CI).

mod common;

use common::{TestDaemon, is_root, spawn_child};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use vino_client::{Client, ClientError, FileKind, OpenFlags, SetAttrs, SetTime, XattrHow, errno};

const TEST: &str = "child_role";

const ALICE: u32 = 1000;
const BOB: u32 = 1001;
/// A group Alice is given as a supplementary group.
const STAFF: u32 = 2000;

type R = Result<(), String>;

fn e(err: ClientError) -> String {
    format!("errno {}: {}", err.errno, err.message)
}

/// Fails unless `r` failed with `want`.
fn expect_errno<T: std::fmt::Debug>(what: &str, r: Result<T, ClientError>, want: i32) -> R {
    match r {
        Err(err) if err.errno == want => Ok(()),
        Err(err) => Err(format!(
            "{what}: {} ({}), expected {}",
            errno::name(err.errno).unwrap_or("?"),
            e(err),
            errno::name(want).unwrap_or("?")
        )),
        Ok(v) => Err(format!("{what} was allowed ({v:?})")),
    }
}

fn check(cond: bool, what: impl Into<String>) -> R {
    if cond { Ok(()) } else { Err(what.into()) }
}

fn create_flags(mode: u16) -> OpenFlags {
    OpenFlags {
        read: true,
        write: true,
        create: true,
        exclusive: true,
        mode,
        ..Default::default()
    }
}

fn write_only() -> OpenFlags {
    OpenFlags {
        write: true,
        ..Default::default()
    }
}

/// Makes `path` holding `body`, then gives it `mode`, `uid` and `gid` (as root).
fn make_file(c: &mut Client, path: &str, body: &[u8], mode: u16, uid: u32, gid: u32) {
    let fd = c.open_at(None, path, create_flags(0o600)).unwrap();
    c.write(fd, body).unwrap();
    c.close(fd).unwrap();
    let attrs = SetAttrs {
        mode: Some(mode),
        uid: Some(uid),
        gid: Some(gid),
        ..SetAttrs::default()
    };
    let st = c.setattr_at(None, path, true, attrs).unwrap();
    assert_eq!((st.mode & 0o7777, st.uid, st.gid), (mode as u32, uid, gid));
}

/// Makes directory `path` with `mode`, owned by `uid`:`gid` (as root).
fn make_dir(c: &mut Client, path: &str, mode: u16, uid: u32, gid: u32) {
    c.mkdir_at(None, path, 0o700).unwrap();
    let attrs = SetAttrs {
        mode: Some(mode),
        uid: Some(uid),
        gid: Some(gid),
        ..SetAttrs::default()
    };
    c.setattr_at(None, path, true, attrs).unwrap();
}

fn read_all(c: &mut Client, dirfd: Option<u32>, path: impl AsRef<[u8]>) -> Result<Vec<u8>, ClientError> {
    let fd = c.open_at(dirfd, path, OpenFlags::read_only())?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = c.read(fd, &mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    c.close(fd)?;
    Ok(out)
}

// ---- children -----------------------------------------------------------------------------------

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    if let Ok(cred) = std::env::var("VINO_TEST_CRED") {
        become_user(&cred);
    }
    let result = match role.as_str() {
        "search" => role_search(),
        "sticky_owner" => role_sticky_owner(),
        "sticky_other" => role_sticky_other(),
        "sticky_owner_removes" => role_sticky_owner_removes(),
        "group_outsider" => role_group_outsider(),
        "group_member" => role_group_member(),
        "setid_writer" => role_setid_writer(),
        "nodes" => role_nodes(),
        "xattrs" => role_xattrs(),
        "renamer" => role_renamer(),
        "reader" => role_reader(),
        "protected_victim" => role_protected_victim(),
        "protected_attacker" => role_protected_attacker(),
        "link_fill" => role_link_fill(),
        "after_fill" => role_after_fill(),
        other => Err(format!("unknown role {other}")),
    };
    if let Err(why) = result {
        println!("FAILED: {why}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Takes the credentials `uid:gid:group,group,...` (root only): groups first, then the gid, the
/// uid last, each for every thread of the process.
fn become_user(cred: &str) {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    let parts: Vec<&str> = cred.split(':').collect();
    let [uid, gid, groups] = parts[..] else {
        panic!("VINO_TEST_CRED is uid:gid:groups, not {cred}");
    };
    let groups: Vec<Gid> = groups
        .split(',')
        .filter(|g| !g.is_empty())
        .map(|g| Gid::from_raw(g.parse().unwrap()))
        .collect();
    setgroups(&groups).expect("setgroups");
    setgid(Gid::from_raw(gid.parse().unwrap())).expect("setgid");
    setuid(Uid::from_raw(uid.parse().unwrap())).expect("setuid");
}

fn connect() -> Result<Client, String> {
    Client::connect_default().map_err(e)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// Runs `role` as `uid`:`gid` with supplementary `groups`; panics with its output if it fails.
fn run_as(d: &TestDaemon, role: &str, uid: u32, gid: u32, groups: &[u32], env: &[(&str, &str)]) -> String {
    let child = spawn_as(d, role, uid, gid, groups, env);
    finish(role, child)
}

fn spawn_as(
    d: &TestDaemon,
    role: &str,
    uid: u32,
    gid: u32,
    groups: &[u32],
    env: &[(&str, &str)],
) -> std::process::Child {
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    let cred = format!("{uid}:{gid}:{}", groups.join(","));
    let mut all = vec![("VINO_TEST_CRED", cred.as_str())];
    all.extend_from_slice(env);
    spawn_child(TEST, role, &d.socket(), &all, None)
}

fn finish(role: &str, child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "role {role} failed ({}):\n{stdout}", out.status);
    stdout
}

fn needs_root() -> bool {
    if !is_root() {
        eprintln!("skipped: needs root to run children as other users");
    }
    is_root()
}

// ---- search permission ----------------------------------------------------------------------------

fn role_search() -> R {
    let mut c = connect()?;
    check(!c.privileged(), "an ordinary user was made privileged")?;
    let phase = env("VINO_TEST_PHASE");
    if phase == "closed" {
        // /x is root's, 0700: nothing under it can be reached, whatever its own mode.
        expect_errno("stat /x/y/f", c.stat_at(None, "/x/y/f", true), errno::EACCES)?;
        expect_errno(
            "open /x/y/f",
            c.open_at(None, "/x/y/f", OpenFlags::read_only()),
            errno::EACCES,
        )?;
        expect_errno("stat /x/y", c.stat_at(None, "/x/y", true), errno::EACCES)?;
        expect_errno("access /x/y/f", c.access_at(None, "/x/y/f", 0, true), errno::EACCES)?;
        expect_errno("the old stat", c.stat("/x/y/f"), errno::EACCES)?;
        expect_errno("the old open", c.open("/x/y/f", OpenFlags::read_only()), errno::EACCES)?;
        expect_errno("readdir /x", c.readdir_at(None, "/x"), errno::EACCES)?;
        expect_errno(
            "create in /x/y",
            c.open_at(None, "/x/y/new", create_flags(0o644)),
            errno::EACCES,
        )?;
        // /x itself only needs search permission on the root.
        c.stat_at(None, "/x", true).map_err(e)?;
    } else {
        // /x is 0711 now: search, but not read.
        check(
            read_all(&mut c, None, "/x/y/f").map_err(e)? == b"hello",
            "the content of /x/y/f",
        )?;
        c.stat_at(None, "/x/y/f", true).map_err(e)?;
        expect_errno("readdir /x", c.readdir_at(None, "/x"), errno::EACCES)?;
        expect_errno(
            "write into /x/y",
            c.open_at(None, "/x/y/f", write_only()),
            errno::EACCES,
        )?;
    }

    // A directory this user holds open is a starting point even after the way to it closes, as
    // with openat(2): the descriptor, not the path, is what was checked.
    let home = format!("/home-{}", nix::unistd::getuid());
    c.mkdir_at(None, format!("{home}/{phase}"), 0o755).map_err(e)?;
    c.mkdir_at(None, format!("{home}/{phase}/inner"), 0o755).map_err(e)?;
    let fd = c
        .open_at(None, format!("{home}/{phase}/inner/f"), create_flags(0o644))
        .map_err(e)?;
    c.write(fd, b"mine").map_err(e)?;
    c.close(fd).map_err(e)?;
    let inner = c
        .open_at(None, format!("{home}/{phase}/inner"), OpenFlags::directory())
        .map_err(e)?;
    c.chmod(format!("{home}/{phase}"), 0o000).map_err(e)?;
    expect_errno(
        "the path through a closed directory",
        c.stat_at(None, format!("{home}/{phase}/inner/f"), true),
        errno::EACCES,
    )?;
    check(
        read_all(&mut c, Some(inner), "f").map_err(e)? == b"mine",
        "a read from the descriptor",
    )?;
    // `..` from the descriptor walks back into the closed directory: refused there.
    expect_errno("inner/..", c.stat_at(Some(inner), "../inner/f", true), errno::EACCES)?;
    c.chmod(format!("{home}/{phase}"), 0o755).map_err(e)?;
    c.stat_at(Some(inner), "../inner/f", true).map_err(e)?;
    println!("SEARCH OK");
    Ok(())
}

#[test]
fn search_permission_is_checked_on_every_directory_of_a_path() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    make_dir(&mut root, "/x", 0o700, 0, 0);
    make_dir(&mut root, "/x/y", 0o755, 0, 0);
    make_file(&mut root, "/x/y/f", b"hello", 0o644, 0, 0);
    make_dir(&mut root, &format!("/home-{ALICE}"), 0o755, ALICE, ALICE);
    run_as(&d, "search", ALICE, ALICE, &[], &[("VINO_TEST_PHASE", "closed")]);
    root.chmod("/x", 0o711).unwrap();
    run_as(&d, "search", ALICE, ALICE, &[], &[("VINO_TEST_PHASE", "open")]);
}

// ---- the sticky bit -------------------------------------------------------------------------------

fn role_sticky_owner() -> R {
    let mut c = connect()?;
    for name in ["/tmp/a", "/tmp/a2"] {
        let fd = c.open_at(None, name, create_flags(0o666)).map_err(e)?;
        c.write(fd, b"alice's").map_err(e)?;
        c.close(fd).map_err(e)?;
        // The mode asked for, whatever the umask: VINO has none.
        c.chmod(name, 0o666).map_err(e)?;
    }
    c.mkdir_at(None, "/tmp/adir", 0o777).map_err(e)?;
    println!("MADE");
    Ok(())
}

fn role_sticky_other() -> R {
    let mut c = connect()?;
    expect_errno("unlink alice's file", c.unlink_at(None, "/tmp/a"), errno::EPERM)?;
    expect_errno("the old unlink", c.unlink("/tmp/a"), errno::EPERM)?;
    expect_errno(
        "rename alice's file",
        c.rename_at(None, "/tmp/a", None, "/tmp/bobs", false),
        errno::EPERM,
    )?;
    expect_errno("rmdir alice's directory", c.rmdir_at(None, "/tmp/adir"), errno::EPERM)?;
    let fd = c.open_at(None, "/tmp/b", create_flags(0o644)).map_err(e)?;
    c.close(fd).map_err(e)?;
    expect_errno(
        "rename over alice's file",
        c.rename_at(None, "/tmp/b", None, "/tmp/a2", false),
        errno::EPERM,
    )?;
    // Alice's file is writable by all: its bytes are Bob's to change, its name is not.
    let fd = c.open_at(None, "/tmp/a", write_only()).map_err(e)?;
    c.pwrite(fd, b"bob", 0).map_err(e)?;
    c.close(fd).map_err(e)?;
    // His own names are his.
    c.rename_at(None, "/tmp/b", None, "/tmp/b2", true).map_err(e)?;
    c.unlink_at(None, "/tmp/b2").map_err(e)?;
    println!("REFUSED");
    Ok(())
}

fn role_sticky_owner_removes() -> R {
    let mut c = connect()?;
    c.rename_at(None, "/tmp/a2", None, "/tmp/a3", false).map_err(e)?;
    c.unlink_at(None, "/tmp/a").map_err(e)?;
    c.unlink_at(None, "/tmp/a3").map_err(e)?;
    c.rmdir_at(None, "/tmp/adir").map_err(e)?;
    println!("REMOVED");
    Ok(())
}

#[test]
fn a_sticky_directory_keeps_each_users_names_to_that_user() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    make_dir(&mut root, "/tmp", 0o1777, 0, 0);
    run_as(&d, "sticky_owner", ALICE, ALICE, &[], &[]);
    run_as(&d, "sticky_other", BOB, BOB, &[], &[]);
    assert_eq!(
        read_all(&mut root, None, "/tmp/a").unwrap(),
        b"bobce's",
        "bob wrote over alice's bytes"
    );
    run_as(&d, "sticky_owner_removes", ALICE, ALICE, &[], &[]);
    let names: Vec<Vec<u8>> = root
        .readdir_at(None, "/tmp")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.is_empty(), "left in /tmp: {names:?}");
}

// ---- names in shared directories: protected_* and the link quota ----------------------------------

fn create_open() -> OpenFlags {
    OpenFlags {
        write: true,
        create: true,
        mode: 0o666,
        ..Default::default()
    }
}

fn role_protected_victim() -> R {
    let mut c = connect()?;
    for (path, mode) in [
        ("/home-1000/secret", 0o600),
        ("/home-1000/f", 0o644),
        ("/tmp/afile", 0o666),
    ] {
        let fd = c.open_at(None, path, create_flags(mode)).map_err(e)?;
        c.close(fd).map_err(e)?;
        c.chmod(path, mode).map_err(e)?;
    }
    c.symlink_at("/home-1000/f", None, "/tmp/alink").map_err(e)?;
    println!("MADE");
    Ok(())
}

/// Bob against Alice's names; `VINO_TEST_PHASE` says whether the rules are on.
fn role_protected_attacker() -> R {
    let mut c = connect()?;
    let on = env("VINO_TEST_PHASE") == "on";
    let link = c.link_at(None, "/home-1000/secret", None, "/tmp/pin", false);
    let follow = c.stat_at(None, "/tmp/alink", true);
    let creat = c.open_at(None, "/tmp/afile", create_open());
    if on {
        expect_errno("link alice's 0600 file", link, errno::EPERM)?;
        expect_errno("follow alice's link in /tmp", follow, errno::EACCES)?;
        expect_errno("O_CREAT alice's file in /tmp", creat, errno::EACCES)?;
    } else {
        link.map_err(e)?;
        follow.map_err(e)?;
        creat.map_err(e)?;
    }
    println!("PROTECTED {on}");
    Ok(())
}

#[test]
fn protected_names_hold_through_the_socket_and_each_rule_can_be_turned_off() {
    if !needs_root() {
        return;
    }
    for on in [true, false] {
        let d = TestDaemon::with(|c| {
            if !on {
                (c.protected_hardlinks, c.protected_symlinks, c.protected_regular) = (0, 0, 0);
            }
        });
        let mut root = d.client();
        make_dir(&mut root, "/tmp", 0o1777, 0, 0);
        make_dir(&mut root, "/home-1000", 0o755, ALICE, ALICE);
        run_as(&d, "protected_victim", ALICE, ALICE, &[], &[]);
        let phase = if on { "on" } else { "off" };
        run_as(&d, "protected_attacker", BOB, BOB, &[], &[("VINO_TEST_PHASE", phase)]);
    }
}

/// Bob links one empty file into root's /tmp under long names until refused.
fn role_link_fill() -> R {
    let mut c = connect()?;
    let fd = c.open_at(None, "/tmp/seed", create_flags(0o600)).map_err(e)?;
    c.close(fd).map_err(e)?;
    let mut n = 0u64;
    let refused = loop {
        match c.link_at(None, "/tmp/seed", None, format!("/tmp/{n:0>250}"), false) {
            Ok(_) => n += 1,
            Err(err) => break err,
        }
    };
    check(refused.errno == errno::EDQUOT, format!("refused with {}", e(refused)))?;
    println!("FILLED {n}");
    Ok(())
}

/// Alice still makes and writes a file in /tmp after Bob's fill.
fn role_after_fill() -> R {
    let mut c = connect()?;
    let fd = c.open_at(None, "/tmp/alice", create_flags(0o644)).map_err(e)?;
    c.write(fd, &vec![7u8; 64 << 10]).map_err(e)?;
    c.close(fd).map_err(e)?;
    println!("STILL");
    Ok(())
}

#[test]
fn a_link_fill_into_roots_tmp_stops_at_the_attackers_link_quota() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::with(|c| {
        c.user_link_quota = Some(vino_daemon::config::Amount::Count(500));
        c.user_block_quota = Some(vino_daemon::config::Amount::Text("4M".into()));
    });
    let mut root = d.client();
    make_dir(&mut root, "/tmp", 0o1777, 0, 0);
    let out = run_as(&d, "link_fill", BOB, BOB, &[], &[]);
    assert!(out.contains("FILLED 500"), "{out}");
    run_as(&d, "after_fill", ALICE, ALICE, &[], &[]);
    make_file(&mut root, "/tmp/root", b"root's", 0o644, 0, 0);
    // The directory holds Bob's 500 names in a few dozen blocks, not the disk.
    let st = root.stat_at(None, "/tmp", true).unwrap();
    assert!(st.blocks <= 40, "/tmp has {} blocks", st.blocks);
    let kernel = d.handle().kernel();
    kernel.verify_quota().unwrap();
    assert_eq!(kernel.quota_usage(BOB).links, 500);
}

// ---- supplementary groups -----------------------------------------------------------------------

fn role_group_outsider() -> R {
    let mut c = connect()?;
    expect_errno(
        "read the group's file",
        c.open_at(None, "/g/f", OpenFlags::read_only()),
        errno::EACCES,
    )?;
    expect_errno("access R", c.access_at(None, "/g/f", 4, true), errno::EACCES)?;
    expect_errno(
        "chgrp to a group not its own",
        c.chown("/g/mine2", None, Some(STAFF)),
        errno::EPERM,
    )?;
    println!("OUTSIDE");
    Ok(())
}

fn role_group_member() -> R {
    let mut c = connect()?;
    check(
        read_all(&mut c, None, "/g/f").map_err(e)? == b"group secret",
        "the group's file reads back",
    )?;
    c.access_at(None, "/g/f", 4, true).map_err(e)?;
    expect_errno("access W", c.access_at(None, "/g/f", 2, true), errno::EACCES)?;
    expect_errno(
        "write the group's file",
        c.open_at(None, "/g/f", write_only()),
        errno::EACCES,
    )?;
    // chgrp to a supplementary group: allowed, and the set-ID bits go.
    let st = c.chown("/g/mine", None, Some(STAFF)).map_err(e)?;
    check(st.gid == STAFF, format!("gid {} after chgrp", st.gid))?;
    check(
        st.mode & 0o6000 == 0,
        format!("mode {:o}: set-ID bits survived a chown", st.mode),
    )?;
    expect_errno(
        "chgrp to a group not its own",
        c.chown("/g/mine2", None, Some(3000)),
        errno::EPERM,
    )?;
    expect_errno("give the file away", c.chown("/g/mine2", Some(BOB), None), errno::EPERM)?;
    // A file it creates in a set-group-ID directory of its group keeps the group and the bit.
    let st = c.mkdir_at(None, "/g/shared/sub", 0o755).map_err(e)?;
    check(
        st.gid == STAFF && st.mode & 0o2000 != 0,
        format!(
            "a directory in a set-group-ID directory: gid {} mode {:o}",
            st.gid, st.mode
        ),
    )?;
    println!("MEMBER");
    Ok(())
}

#[test]
fn supplementary_groups_from_the_socket_grant_group_rights_and_chgrp() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    make_dir(&mut root, "/g", 0o755, 0, 0);
    make_file(&mut root, "/g/f", b"group secret", 0o640, 0, STAFF);
    make_file(&mut root, "/g/mine", b"#!", 0o6755, ALICE, ALICE);
    make_file(&mut root, "/g/mine2", b"", 0o644, ALICE, ALICE);
    make_dir(&mut root, "/g/shared", 0o2775, 0, STAFF);
    run_as(&d, "group_outsider", ALICE, ALICE, &[], &[]);
    run_as(&d, "group_member", ALICE, ALICE, &[4242, STAFF], &[]);
    // The daemon's kernel process had the groups the socket gave.
    let st = root.stat_at(None, "/g/mine", true).unwrap();
    assert_eq!((st.gid, st.mode & 0o7777), (STAFF, 0o755));
}

// ---- set-ID bits --------------------------------------------------------------------------------

fn role_setid_writer() -> R {
    let mut c = connect()?;
    let fd = c.open_at(None, "/s/f", write_only()).map_err(e)?;
    c.write(fd, b"x").map_err(e)?;
    let st = c.fstat(fd).map_err(e)?;
    check(
        st.mode & 0o7777 == 0o777,
        format!("mode {:o} after a write by another user", st.mode),
    )?;
    c.close(fd).map_err(e)?;
    // Set-group-ID without group execute is no privilege (it marked mandatory locking): kept.
    let fd = c.open_at(None, "/s/g", write_only()).map_err(e)?;
    c.write(fd, b"x").map_err(e)?;
    let st = c.fstat(fd).map_err(e)?;
    check(st.mode & 0o7777 == 0o2666, format!("mode {:o}", st.mode))?;
    c.close(fd).map_err(e)?;
    // A truncate drops them too.
    let st = c.truncate("/s/t", 0).map_err(e)?;
    check(
        st.mode & 0o7777 == 0o777,
        format!("mode {:o} after a truncate", st.mode),
    )?;
    println!("DROPPED");
    Ok(())
}

#[test]
fn set_id_bits_drop_on_a_write_by_another_user_and_on_chown() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    make_dir(&mut root, "/s", 0o777, 0, 0);
    make_file(&mut root, "/s/f", b"", 0o6777, 0, 0);
    make_file(&mut root, "/s/g", b"", 0o2666, 0, 0);
    make_file(&mut root, "/s/t", b"1234", 0o6777, 0, 0);
    make_file(&mut root, "/s/root", b"", 0o6777, 0, 0);
    run_as(&d, "setid_writer", BOB, BOB, &[], &[]);
    // A privileged writer keeps them (CAP_FSETID); a chown, even root's, drops them.
    let fd = root.open_at(None, "/s/root", write_only()).unwrap();
    root.write(fd, b"x").unwrap();
    assert_eq!(root.fstat(fd).unwrap().mode & 0o7777, 0o6777);
    root.close(fd).unwrap();
    let st = root.chown("/s/root", Some(BOB), None).unwrap();
    assert_eq!((st.uid, st.mode & 0o7777), (BOB, 0o777));
}

// ---- device nodes, FIFOs, sockets -------------------------------------------------------------

fn role_nodes() -> R {
    let mut c = connect()?;
    let dev = (1 << 8) | 3;
    expect_errno(
        "a character device",
        c.mknod_at(None, "/n/null", FileKind::CharDevice, 0o666, dev),
        errno::EPERM,
    )?;
    expect_errno(
        "a block device",
        c.mknod_at(None, "/n/sda", FileKind::BlockDevice, 0o660, 8 << 8),
        errno::EPERM,
    )?;
    let st = c.mknod_at(None, "/n/fifo", FileKind::Fifo, 0o644, 0).map_err(e)?;
    check(
        st.kind == FileKind::Fifo && st.mode & 0o170000 == 0o010000,
        format!("a FIFO: {st:?}"),
    )?;
    let st = c.mknod_at(None, "/n/sock", FileKind::Socket, 0o644, 0).map_err(e)?;
    check(
        st.kind == FileKind::Socket && st.uid == ALICE,
        format!("a socket: {st:?}"),
    )?;
    let st = c.mknod_at(None, "/n/plain", FileKind::Regular, 0o600, 0).map_err(e)?;
    check(
        st.kind == FileKind::Regular && st.size == 0,
        format!("a regular file: {st:?}"),
    )?;
    expect_errno(
        "mknod of a directory",
        c.mknod_at(None, "/n/d", FileKind::Directory, 0o755, 0),
        errno::EINVAL,
    )?;
    // VINO stores these nodes; their I/O is the host's.
    expect_errno(
        "open a FIFO",
        c.open_at(None, "/n/fifo", OpenFlags::read_only()),
        errno::ENXIO,
    )?;
    // Root's device node can be looked at, not opened.
    let st = c.stat_at(None, "/n/root-null", true).map_err(e)?;
    check(
        st.kind == FileKind::CharDevice && st.rdev == dev,
        format!("root's node: {st:?}"),
    )?;
    expect_errno(
        "open a device",
        c.open_at(None, "/n/root-null", OpenFlags::read_write()),
        errno::ENXIO,
    )?;
    println!("NODES");
    Ok(())
}

#[test]
fn only_a_privileged_process_makes_device_nodes() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    make_dir(&mut root, "/n", 0o777, 0, 0);
    let st = root
        .mknod_at(None, "/n/root-null", FileKind::CharDevice, 0o666, (1 << 8) | 3)
        .unwrap();
    assert_eq!(
        (st.kind, st.rdev, st.mode & 0o170000),
        (FileKind::CharDevice, (1 << 8) | 3, 0o020000)
    );
    let st = root
        .mknod_at(None, "/n/root-sda", FileKind::BlockDevice, 0o660, 8 << 8)
        .unwrap();
    assert_eq!((st.kind, st.rdev), (FileKind::BlockDevice, 8 << 8));
    run_as(&d, "nodes", ALICE, ALICE, &[], &[]);
    let kinds: BTreeSet<(Vec<u8>, String)> = root
        .readdir_at(None, "/n")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, format!("{:?}", e.kind)))
        .collect();
    for (name, kind) in [
        ("fifo", "Fifo"),
        ("sock", "Socket"),
        ("plain", "Regular"),
        ("root-null", "CharDevice"),
        ("root-sda", "BlockDevice"),
    ] {
        assert!(
            kinds.contains(&(name.as_bytes().to_vec(), kind.to_string())),
            "{name} {kind}: {kinds:?}"
        );
    }
}

// ---- extended attributes ----------------------------------------------------------------------

fn role_xattrs() -> R {
    let mut c = connect()?;
    let mine = "/xa/mine";
    let fd = c.open_at(None, mine, create_flags(0o644)).map_err(e)?;
    c.close(fd).map_err(e)?;
    c.setxattr(None, mine, true, "user.color", b"blue", XattrHow::Any)
        .map_err(e)?;
    check(
        c.getxattr(None, mine, true, "user.color").map_err(e)? == b"blue",
        "user.color",
    )?;
    expect_errno(
        "XATTR_CREATE of one that exists",
        c.setxattr(None, mine, true, "user.color", b"red", XattrHow::Create),
        errno::EEXIST,
    )?;
    expect_errno(
        "XATTR_REPLACE of one that does not",
        c.setxattr(None, mine, true, "user.none", b"x", XattrHow::Replace),
        errno::ENODATA,
    )?;
    c.setxattr(None, mine, true, "user.color", b"red", XattrHow::Replace)
        .map_err(e)?;
    let every: Vec<u8> = (0..=255).collect();
    c.setxattr(None, mine, true, b"user.bytes\xff", &every, XattrHow::Create)
        .map_err(e)?;
    check(
        c.getxattr(None, mine, true, b"user.bytes\xff").map_err(e)? == every,
        "a value of every byte, under a name that is not UTF-8",
    )?;
    let names: BTreeSet<Vec<u8>> = c.listxattr(None, mine, true).map_err(e)?.into_iter().collect();
    let want: BTreeSet<Vec<u8>> = [b"user.color".to_vec(), b"user.bytes\xff".to_vec()].into();
    check(names == want, format!("listxattr: {names:?}"))?;
    c.removexattr(None, mine, true, "user.color").map_err(e)?;
    expect_errno(
        "a removed attribute",
        c.getxattr(None, mine, true, "user.color"),
        errno::ENODATA,
    )?;
    expect_errno(
        "remove it again",
        c.removexattr(None, mine, true, "user.color"),
        errno::ENODATA,
    )?;
    for ns in ["trusted.x", "security.x", "system.x"] {
        expect_errno(
            &format!("set {ns}"),
            c.setxattr(None, mine, true, ns, b"1", XattrHow::Any),
            errno::EOPNOTSUPP,
        )?;
        expect_errno(
            &format!("get {ns}"),
            c.getxattr(None, mine, true, ns),
            errno::EOPNOTSUPP,
        )?;
    }
    // Root's file, 0644: readable, not writable.
    check(
        c.getxattr(None, "/xa/theirs", true, "user.tag").map_err(e)? == b"root's",
        "root's tag",
    )?;
    expect_errno(
        "set on root's file",
        c.setxattr(None, "/xa/theirs", true, "user.tag", b"mine", XattrHow::Any),
        errno::EACCES,
    )?;
    expect_errno(
        "remove on root's file",
        c.removexattr(None, "/xa/theirs", true, "user.tag"),
        errno::EACCES,
    )?;
    // Through a symbolic link: the target's, or (not followed) refused on the link itself.
    c.symlink_at("mine", None, "/xa/link").map_err(e)?;
    check(
        c.getxattr(None, "/xa/link", true, b"user.bytes\xff").map_err(e)? == every,
        "through the link",
    )?;
    expect_errno(
        "user. attributes on a link",
        c.setxattr(None, "/xa/link", false, "user.x", b"1", XattrHow::Any),
        errno::EPERM,
    )?;
    println!("XATTRS");
    Ok(())
}

#[test]
fn user_extended_attributes_follow_file_permissions_and_others_are_unsupported() {
    if !needs_root() {
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    make_dir(&mut root, "/xa", 0o777, 0, 0);
    make_file(&mut root, "/xa/theirs", b"", 0o644, 0, 0);
    root.setxattr(None, "/xa/theirs", true, "user.tag", b"root's", XattrHow::Create)
        .unwrap();
    run_as(&d, "xattrs", ALICE, ALICE, &[], &[]);
    let names = root.listxattr(None, "/xa/mine", true).unwrap();
    assert_eq!(names, vec![b"user.bytes\xff".to_vec()]);
}

// ---- symbolic links (one user is enough) ----------------------------------------------------------

#[test]
fn symbolic_links_are_followed_up_to_a_limit_and_o_nofollow_refuses_them() {
    let d = TestDaemon::start();
    let mut c = d.client();
    c.mkdir_at(None, "/l", 0o755).unwrap();
    make_file(&mut c, "/l/target", b"T", 0o644, 0, 0);
    let target = c.stat_at(None, "/l/target", true).unwrap();
    let st = c.symlink_at("target", None, "/l/rel").unwrap();
    assert_eq!((st.kind, st.size, st.mode & 0o170000), (FileKind::Symlink, 6, 0o120000));
    c.symlink_at("/l/target", None, "/l/abs").unwrap();
    for link in ["/l/rel", "/l/abs"] {
        assert_eq!(c.stat_at(None, link, true).unwrap().ino, target.ino, "{link}");
        assert_eq!(c.lstat(link).unwrap().kind, FileKind::Symlink, "{link}");
        assert_eq!(read_all(&mut c, None, link).unwrap(), b"T");
        let nofollow = OpenFlags {
            nofollow: true,
            ..OpenFlags::read_only()
        };
        assert_eq!(
            c.open_at(None, link, nofollow).unwrap_err().errno,
            errno::ELOOP,
            "{link}"
        );
    }
    assert_eq!(c.readlink_at(None, "/l/rel").unwrap(), b"target");
    assert_eq!(c.readlink_at(None, "/l/target").unwrap_err().errno, errno::EINVAL);
    // The old path calls follow links too.
    assert_eq!(c.stat("/l/rel").unwrap().ino, target.ino);

    // Two links naming each other, and chains of 40 and 41 links (Linux's limit is 40).
    c.symlink_at("b", None, "/l/a").unwrap();
    c.symlink_at("a", None, "/l/b").unwrap();
    assert_eq!(c.stat_at(None, "/l/a", true).unwrap_err().errno, errno::ELOOP);
    assert_eq!(
        c.open_at(None, "/l/a", OpenFlags::read_only()).unwrap_err().errno,
        errno::ELOOP
    );
    assert_eq!(c.lstat("/l/a").unwrap().kind, FileKind::Symlink);
    c.symlink_at("target", None, "/l/c0").unwrap();
    for i in 1..=40 {
        c.symlink_at(format!("c{}", i - 1), None, format!("/l/c{i}")).unwrap();
    }
    assert_eq!(c.stat_at(None, "/l/c39", true).unwrap().ino, target.ino, "40 links");
    assert_eq!(
        c.stat_at(None, "/l/c40", true).unwrap_err().errno,
        errno::ELOOP,
        "41 links"
    );

    // A link in the middle of a path, a dangling one, and a link to a directory with a `/`.
    c.symlink_at("/l", None, "/l/self").unwrap();
    assert_eq!(c.stat_at(None, "/l/self/self/target", true).unwrap().ino, target.ino);
    c.symlink_at("nowhere", None, "/l/dangling").unwrap();
    assert_eq!(c.stat_at(None, "/l/dangling", true).unwrap_err().errno, errno::ENOENT);
    assert_eq!(c.lstat("/l/dangling").unwrap().kind, FileKind::Symlink);
    assert_eq!(c.stat_at(None, "/l/self/", false).unwrap().kind, FileKind::Directory);
    assert_eq!(c.stat_at(None, "/l/rel/", true).unwrap_err().errno, errno::ENOTDIR);
    let dir = OpenFlags::directory();
    assert_eq!(c.open_at(None, "/l/rel", dir).unwrap_err().errno, errno::ENOTDIR);

    // link(2) of a link: the link itself, or with AT_SYMLINK_FOLLOW its target.
    let st = c.link_at(None, "/l/rel", None, "/l/hard-to-link", false).unwrap();
    assert_eq!((st.kind, st.nlink), (FileKind::Symlink, 2));
    let st = c.link_at(None, "/l/rel", None, "/l/hard-to-target", true).unwrap();
    assert_eq!((st.ino, st.nlink), (target.ino, 2));
    // Removing a link leaves its target.
    c.unlink_at(None, "/l/rel").unwrap();
    assert_eq!(c.readlink_at(None, "/l/hard-to-link").unwrap(), b"target");
    assert_eq!(c.stat_at(None, "/l/target", true).unwrap().nlink, 2);
}

// ---- names that are bytes --------------------------------------------------------------------------

#[test]
fn names_are_bytes_and_round_trip_whatever_their_encoding() {
    let d = TestDaemon::start();
    let mut c = d.client();
    c.mkdir_at(None, "/b", 0o755).unwrap();
    let dir = c.open_at(None, "/b", OpenFlags::directory()).unwrap();
    let names: [&[u8]; 5] = [
        b"caf\xe9",
        b"\xff\xfe\x80",
        b"new\nline",
        b"tab\tand space",
        "ünï".as_bytes(),
    ];
    for name in names {
        let fd = c.open_at(Some(dir), name, create_flags(0o644)).unwrap();
        c.write(fd, name).unwrap();
        c.close(fd).unwrap();
    }
    let listed =
        |c: &mut Client| -> BTreeSet<Vec<u8>> { c.readdir_fd(dir).unwrap().into_iter().map(|e| e.name).collect() };
    let want: BTreeSet<Vec<u8>> = names.iter().map(|n| n.to_vec()).collect();
    assert_eq!(listed(&mut c), want);
    // The old path request lists the same bytes.
    let old: BTreeSet<Vec<u8>> = c.readdir("/b").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(old, want);
    for name in names {
        assert_eq!(read_all(&mut c, Some(dir), name).unwrap(), name);
        let mut full = b"/b/".to_vec();
        full.extend_from_slice(name);
        assert_eq!(
            read_all(&mut c, None, &full).unwrap(),
            name,
            "an absolute path ignores dirfd"
        );
        let mut renamed = name.to_vec();
        renamed.push(0x81);
        c.rename_at(Some(dir), name, Some(dir), &renamed, true).unwrap();
        assert_eq!(c.stat_at(Some(dir), name, true).unwrap_err().errno, errno::ENOENT);
        assert_eq!(read_all(&mut c, Some(dir), &renamed).unwrap(), name);
        c.symlink_at(&renamed, Some(dir), name).unwrap();
        assert_eq!(c.readlink_at(Some(dir), name).unwrap(), renamed);
    }
    for name in names {
        let mut renamed = name.to_vec();
        renamed.push(0x81);
        c.unlink_at(Some(dir), name).unwrap();
        c.unlink_at(Some(dir), &renamed).unwrap();
    }
    assert!(listed(&mut c).is_empty());
    // What a name may not be.
    assert_eq!(
        c.open_at(Some(dir), b"nul\0", create_flags(0o644)).unwrap_err().errno,
        errno::EINVAL
    );
    let long = vec![b'n'; 256];
    assert_eq!(
        c.open_at(Some(dir), &long, create_flags(0o644)).unwrap_err().errno,
        errno::ENAMETOOLONG
    );
    let made = c.open_at(Some(dir), &long[..255], create_flags(0o644)).unwrap();
    c.close(made).unwrap();
    // A descriptor that is not a directory is no starting point; one that is not open neither.
    let f = c.open_at(Some(dir), &long[..255], OpenFlags::read_only()).unwrap();
    assert_eq!(c.stat_at(Some(f), "x", true).unwrap_err().errno, errno::ENOTDIR);
    assert_eq!(c.stat_at(Some(999), "x", true).unwrap_err().errno, errno::EBADF);
    assert_eq!(c.readdir_fd(f).unwrap_err().errno, errno::ENOTDIR);
    // An empty path names the descriptor's own file; from the root it names nothing.
    assert_eq!(c.stat_at(Some(dir), "", true).unwrap().kind, FileKind::Directory);
    assert_eq!(c.stat_at(None, "", true).unwrap_err().errno, errno::ENOENT);
}

// ---- attributes, access and fallocate ----------------------------------------------------------------

#[test]
fn setattr_access_and_fallocate_through_the_socket() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let fd = c.open_at(None, "/fa", create_flags(0o644)).unwrap();
    c.fallocate(fd, false, 0, 1 << 20).unwrap();
    let st = c.fstat(fd).unwrap();
    assert_eq!(st.size, 1 << 20);
    assert!(st.blocks >= 256, "{} blocks for 1 MiB", st.blocks);
    let mut back = vec![1u8; 8192];
    assert_eq!(c.pread(fd, &mut back, 500_000).unwrap(), 8192);
    assert!(back.iter().all(|&b| b == 0), "allocated bytes read as zeros");
    c.fallocate(fd, true, 1 << 20, 1 << 20).unwrap();
    let st2 = c.fstat(fd).unwrap();
    assert_eq!(st2.size, 1 << 20, "FALLOC_FL_KEEP_SIZE keeps the size");
    assert!(
        st2.blocks >= st.blocks + 256,
        "{} blocks then {}",
        st.blocks,
        st2.blocks
    );
    assert_eq!(c.fallocate(fd, false, 0, 0).unwrap_err().errno, errno::EINVAL);
    let ro = c.open_at(None, "/fa", OpenFlags::read_only()).unwrap();
    assert_eq!(c.fallocate(ro, false, 0, 4096).unwrap_err().errno, errno::EBADF);
    // Linux's other modes: a punched hole (PUNCH_HOLE | KEEP_SIZE) gives the preallocation
    // back, a zeroed range (ZERO_RANGE | KEEP_SIZE) reads as zeros; no collapse, no punch that
    // would change the size.
    c.fallocate_mode(fd, 0x03, 1 << 20, 1 << 20).unwrap();
    assert_eq!(c.fstat(fd).unwrap().blocks, st.blocks, "the hole's blocks are freed");
    c.pwrite(fd, &[7u8; 8192], 0).unwrap();
    c.fallocate_mode(fd, 0x11, 100, 200).unwrap();
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), 8192);
    let mut want = [7u8; 8192];
    want[100..300].fill(0);
    assert!(back == want, "a zeroed range through the socket");
    assert_eq!(
        c.fallocate_mode(fd, 0x08, 0, 4096).unwrap_err().errno,
        errno::EOPNOTSUPP
    );
    assert_eq!(
        c.fallocate_mode(fd, 0x02, 0, 4096).unwrap_err().errno,
        errno::EOPNOTSUPP
    );
    assert_eq!(c.fallocate_mode(ro, 0x03, 0, 4096).unwrap_err().errno, errno::EBADF);

    // setattr: size, mode and times at once; on a descriptor too.
    let attrs = SetAttrs {
        mode: Some(0o600),
        size: Some(10),
        atime: SetTime::At(1_000_000_000),
        mtime: SetTime::At(2_000_000_000),
        ..SetAttrs::default()
    };
    let st = c.setattr_at(None, "/fa", true, attrs).unwrap();
    assert_eq!(
        (st.size, st.mode & 0o7777, st.atime_ns, st.mtime_ns),
        (10, 0o600, 1_000_000_000, 2_000_000_000)
    );
    let st = c
        .fsetattr(
            fd,
            SetAttrs {
                size: Some(3),
                ..SetAttrs::default()
            },
        )
        .unwrap();
    assert_eq!(st.size, 3);
    assert!(st.mtime_ns > 2_000_000_000, "a size change marks the file modified");
    let before = st;
    let err = c
        .fsetattr(
            ro,
            SetAttrs {
                size: Some(1),
                ..SetAttrs::default()
            },
        )
        .unwrap_err();
    assert_eq!(err.errno, errno::EINVAL, "a size change through a read-only descriptor");
    let st = c.utimes("/fa", SetTime::Now, SetTime::Omit).unwrap();
    assert!(
        st.atime_ns > 1_000_000_000 && st.mtime_ns == before.mtime_ns,
        "{before:?} then {st:?}"
    );
    assert_eq!(c.truncate("/fa", 7).unwrap().size, 7);
    assert_eq!(c.chmod("/fa", 0o640).unwrap().mode & 0o7777, 0o640);
    c.access_at(None, "/fa", 0, true).unwrap();
    c.access_at(None, "/fa", 6, true).unwrap();
    assert_eq!(c.access_at(None, "/fa", 8, true).unwrap_err().errno, errno::EINVAL);
    assert_eq!(c.access_at(None, "/missing", 0, true).unwrap_err().errno, errno::ENOENT);
    c.close(ro).unwrap();
    c.close(fd).unwrap();
}

// ---- renames that replace a file while others read it -------------------------------------------

/// What every version of `/race/f` holds: its own inode number and generation, over 3 pages.
fn race_body(ino: u64, generation: u32) -> Vec<u8> {
    format!("inode {ino} generation {generation}\n")
        .repeat(400)
        .into_bytes()
}

fn race_until() -> Instant {
    Instant::now() + Duration::from_millis(env("VINO_TEST_MS").parse().unwrap())
}

fn role_renamer() -> R {
    let mut c = connect()?;
    let id = env("VINO_TEST_N");
    let until = race_until();
    let mut n = 0u64;
    while Instant::now() < until {
        let tmp = format!("/race/tmp-{id}-{n}");
        let fd = c.open_at(None, &tmp, create_flags(0o644)).map_err(e)?;
        let st = c.fstat(fd).map_err(e)?;
        let body = race_body(st.ino, st.generation);
        check(c.write(fd, &body).map_err(e)? == body.len(), "a short write")?;
        c.close(fd).map_err(e)?;
        c.rename_at(None, &tmp, None, "/race/f", false)
            .map_err(|err| format!("rename {n}: {}", e(err)))?;
        n += 1;
    }
    println!("RENAMES {n}");
    Ok(())
}

fn role_reader() -> R {
    let mut c = connect()?;
    let until = race_until();
    let (mut n, mut inodes) = (0u64, BTreeSet::new());
    let mut buf = vec![0u8; 64 << 10];
    while Instant::now() < until {
        let fd = c
            .open_at(None, "/race/f", OpenFlags::read_only())
            .map_err(|err| format!("open {n}: {}", e(err)))?;
        let st = c.fstat(fd).map_err(|err| format!("fstat {n}: {}", e(err)))?;
        let want = race_body(st.ino, st.generation);
        check(
            st.size == want.len() as u64,
            format!("size {} of inode {}", st.size, st.ino),
        )?;
        let got = c
            .pread(fd, &mut buf, 0)
            .map_err(|err| format!("read {n}: {}", e(err)))?;
        if buf[..got] != want[..] {
            let first = String::from_utf8_lossy(&buf[..got.min(40)]).into_owned();
            return Err(format!(
                "inode {} (generation {}) holds {first:?}",
                st.ino, st.generation
            ));
        }
        let again = c.fstat(fd).map_err(e)?;
        check(again.ino == st.ino, "the open file changed under its descriptor")?;
        c.close(fd).map_err(e)?;
        inodes.insert(st.ino);
        n += 1;
    }
    println!("READS {n} INODES {}", inodes.len());
    Ok(())
}

#[test]
fn renames_over_a_file_never_show_a_reader_anything_but_one_whole_file() {
    let d = TestDaemon::start();
    let mut c = d.client();
    c.mkdir_at(None, "/race", 0o755).unwrap();
    let fd = c.open_at(None, "/race/f", create_flags(0o644)).unwrap();
    let st = c.fstat(fd).unwrap();
    c.write(fd, &race_body(st.ino, st.generation)).unwrap();
    c.close(fd).unwrap();
    let ms = "3000";
    let mut children = Vec::new();
    for (role, n) in [("renamer", "1"), ("renamer", "2"), ("reader", "1"), ("reader", "2")] {
        let env = [("VINO_TEST_N", n), ("VINO_TEST_MS", ms)];
        let child = if is_root() {
            spawn_as(&d, role, 0, 0, &[], &env)
        } else {
            spawn_child(TEST, role, &d.socket(), &env, None)
        };
        children.push((role, child));
    }
    let mut report = Vec::new();
    for (role, child) in children {
        report.push(finish(role, child));
    }
    let count = |prefix: &str| -> Vec<u64> {
        report
            .iter()
            .filter_map(|out| out.lines().find_map(|l| l.strip_prefix(prefix)))
            .map(|rest| rest.split_whitespace().next().unwrap().parse().unwrap())
            .collect()
    };
    let (renames, reads) = (count("RENAMES "), count("READS "));
    eprintln!("renames {renames:?}, reads {reads:?}");
    assert!(
        renames.len() == 2 && renames.iter().all(|&n| n > 10),
        "renames {renames:?}"
    );
    assert!(reads.len() == 2 && reads.iter().all(|&n| n > 10), "reads {reads:?}");
    // Every replaced file was freed once its readers closed it.
    drop(c);
    d.wait_processes(0);
    let kernel = d.handle().kernel();
    assert!(kernel.parked_files().is_empty(), "parked: {:?}", kernel.parked_files());
    let mut c = d.client();
    let names: Vec<Vec<u8>> = c
        .readdir_at(None, "/race")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![b"f".to_vec()]);
}
