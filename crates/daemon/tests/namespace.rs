//! The POSIX namespace and permission rules through the socket, with clients of two real uids
//! (child processes of this binary, run as root's children with another uid, gid and
//! supplementary groups, which the daemon reads with `SO_PEERGROUPS`): search permission on
//! every component, the sticky bit, groups, set-ID bits, symbolic links, special files,
//! extended attributes, byte names and fallocate; and client processes renaming over a file
//! that others open, read and fstat.

mod common;

use common::TestDaemon;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use vino_client::{Client, FileKind, OpenFlags, SetAttrs, XattrHow, errno};

const TEST: &str = "child_role";
const ALICE: u32 = 1000;
const BOB: u32 = 1001;
const STAFF: u32 = 65532;

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let result = match role.as_str() {
        "alice" => alice(),
        "writer" => writer(),
        "reader" => reader(),
        other => Err(format!("unknown role {other}")),
    };
    if let Err(e) = result {
        println!("FAILED: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// A child of this binary in `role`, as `uid` (group `uid`) with supplementary `groups`.
fn spawn(d: &TestDaemon, role: &str, uid: u32, groups: &[u32], env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([TEST, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env("VINO_TEST_ROLE", role)
        .env("VINO_SOCKET", d.socket())
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let groups: Vec<libc::gid_t> = groups.to_vec();
    // Groups first, then the gid, then the uid: once the uid is not root, neither may change.
    // SAFETY: between fork and exec only setgroups, setgid and setuid run, which allocate
    // nothing and touch only `groups`, a vector made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0 || libc::setgid(uid) != 0 || libc::setuid(uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the child failed: {stdout}");
    stdout
}

fn expect_errno<T: std::fmt::Debug>(r: vino_client::Result<T>, want: i32, what: &str) -> Result<(), String> {
    match r {
        Err(e) if e.errno == want => Ok(()),
        other => Err(format!("{what}: expected errno {want}, got {other:?}")),
    }
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what.to_string()) }
}

fn write_file(c: &mut Client, path: &str, data: &[u8], mode: u16) {
    let fd = c.open(path, OpenFlags::create()).unwrap();
    c.write(fd, data).unwrap();
    c.close(fd).unwrap();
    c.chmod(path, mode).unwrap();
}

/// Uid 1000, group 1000, supplementary group 65532, against the tree root made.
fn alice() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    let e = |r: vino_client::Result<()>| r.map_err(|e| e.to_string());
    // Search permission on every component: x is 0700 root's.
    expect_errno(c.stat("/x/y/f"), errno::EACCES, "stat through a closed directory")?;
    expect_errno(
        c.open("/x/y/f", OpenFlags::read_only()),
        errno::EACCES,
        "open through it",
    )?;
    expect_errno(
        c.open("/x/y/new", OpenFlags::create()),
        errno::EACCES,
        "create through it",
    )?;
    // The sticky bit: bob's file in /tmp.
    expect_errno(
        c.unlink("/tmp/bob"),
        errno::EPERM,
        "unlink another's file in a sticky directory",
    )?;
    expect_errno(c.rename("/tmp/bob", "/tmp/mine"), errno::EPERM, "rename it")?;
    // Groups: /g is 0640 of group 65532, which alice has as a supplementary group.
    let fd = c
        .open("/g", OpenFlags::read_only())
        .map_err(|e| format!("a group member reads /g: {e}"))?;
    e(c.close(fd))?;
    write_file(&mut c, "/pub/mine", b"", 0o644);
    let st = c.chown("/pub/mine", None, Some(STAFF)).map_err(|e| e.to_string())?;
    check(st.gid == STAFF, "chgrp to a supplementary group")?;
    expect_errno(
        c.chown("/pub/mine", None, Some(7)),
        errno::EPERM,
        "chgrp to another group",
    )?;
    expect_errno(c.chown("/pub/mine", Some(0), None), errno::EPERM, "giving a file away")?;
    // Set-ID bits go when a non-owner writes.
    let fd = c.open("/s", OpenFlags::read_write()).map_err(|e| e.to_string())?;
    c.write(fd, b"y").map_err(|e| e.to_string())?;
    e(c.close(fd))?;
    check(
        c.stat("/s").map_err(|e| e.to_string())?.mode & 0o7777 == 0o777,
        "set-ID dropped on write",
    )?;
    // Special files: a FIFO yes, a device no.
    let st = c
        .mknod_at(None, "/pub/fifo", FileKind::Fifo, 0o644, 0)
        .map_err(|e| e.to_string())?;
    check(st.kind == FileKind::Fifo, "a FIFO")?;
    expect_errno(
        c.mknod_at(None, "/pub/null", FileKind::CharDevice, 0o666, 0x103),
        errno::EPERM,
        "a device node",
    )?;
    expect_errno(
        c.open("/pub/fifo", OpenFlags::read_only()),
        errno::ENXIO,
        "opening a FIFO through VINO",
    )?;
    // Symbolic links.
    c.symlink_at("mine", None, "/pub/link").map_err(|e| e.to_string())?;
    check(
        c.readlink_at(None, "/pub/link").map_err(|e| e.to_string())? == b"mine",
        "readlink",
    )?;
    c.symlink_at("/pub/loop", None, "/pub/loop")
        .map_err(|e| e.to_string())?;
    expect_errno(c.stat("/pub/loop"), errno::ELOOP, "a loop")?;
    let nofollow = OpenFlags {
        nofollow: true,
        ..OpenFlags::read_only()
    };
    expect_errno(c.open_at(None, "/pub/link", nofollow), errno::ELOOP, "O_NOFOLLOW")?;
    // Extended attributes.
    c.setxattr_at(None, "/pub/mine", true, "user.a", b"1", XattrHow::Any)
        .map_err(|e| e.to_string())?;
    check(
        c.getxattr_at(None, "/pub/mine", true, "user.a")
            .map_err(|e| e.to_string())?
            == b"1",
        "getxattr",
    )?;
    expect_errno(
        c.setxattr_at(None, "/pub/mine", true, "trusted.a", b"1", XattrHow::Any),
        errno::EOPNOTSUPP,
        "trusted. attributes",
    )?;
    expect_errno(
        c.setxattr_at(None, "/g", true, "user.a", b"1", XattrHow::Any),
        errno::EACCES,
        "an attribute on a file it may not write",
    )?;
    // Byte names, relative to a directory descriptor.
    let dir = c
        .open_at(None, "/pub", OpenFlags::directory())
        .map_err(|e| e.to_string())?;
    let name: &[u8] = b"caf\xe9\xff";
    let fd = c
        .open_at(Some(dir), name, OpenFlags::create())
        .map_err(|e| e.to_string())?;
    e(c.close(fd))?;
    let names: Vec<Vec<u8>> = c
        .readdir_fd(dir)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|e| e.name)
        .collect();
    check(names.iter().any(|n| n == name), "a byte name listed")?;
    // fallocate.
    let fd = c
        .open_at(Some(dir), "big", OpenFlags::create())
        .map_err(|e| e.to_string())?;
    c.fallocate(fd, false, 0, 1 << 20).map_err(|e| e.to_string())?;
    check(
        c.fstat(fd).map_err(|e| e.to_string())?.size == 1 << 20,
        "fallocate grows the file",
    )?;
    let truncate = SetAttrs {
        size: Some(0),
        ..SetAttrs::default()
    };
    expect_errno(
        c.setattr_at(None, "/g", true, truncate),
        errno::EACCES,
        "truncating a file it may not write",
    )?;
    println!("alice done");
    Ok(())
}

#[test]
fn clients_of_two_users_meet_the_posix_rules() {
    if !common::is_root() {
        eprintln!("skipped: needs root to run clients as other users");
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    root.chmod("/", 0o755).unwrap();
    root.mkdir("/x", 0o755).unwrap();
    root.mkdir("/x/y", 0o777).unwrap();
    write_file(&mut root, "/x/y/f", b"secret", 0o644);
    root.chmod("/x", 0o700).unwrap();
    root.mkdir("/tmp", 0o1777).unwrap();
    write_file(&mut root, "/tmp/bob", b"bob's", 0o666);
    root.chown("/tmp/bob", Some(BOB), Some(BOB)).unwrap();
    write_file(&mut root, "/g", b"group", 0o640);
    root.chown("/g", None, Some(STAFF)).unwrap();
    write_file(&mut root, "/s", b"x", 0o6777);
    root.mkdir("/pub", 0o777).unwrap();
    let out = finish(spawn(&d, "alice", ALICE, &[STAFF], &[]));
    assert!(out.contains("alice done"), "{out}");
    assert_eq!(root.stat("/tmp/bob").unwrap().uid, BOB, "bob's file is still there");
    assert_eq!(root.stat("/x/y/f").unwrap().size, 6);
}

/// Replaces `/f` by create-and-rename for `VINO_TEST_SECS` seconds; each file holds its inode.
fn writer() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    let me = std::process::id();
    let tmp = format!("/tmp{me}");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut n = 0;
    while std::time::Instant::now() < end {
        let fd = c.open(&tmp, OpenFlags::create()).map_err(|e| format!("create: {e}"))?;
        let ino = c.fstat(fd).map_err(|e| format!("fstat: {e}"))?.ino;
        c.write(fd, ino.to_string().as_bytes()).map_err(|e| e.to_string())?;
        c.close(fd).map_err(|e| e.to_string())?;
        c.rename(&tmp, "/f").map_err(|e| format!("rename: {e}"))?;
        n += 1;
    }
    println!("renames {n}");
    Ok(())
}

/// Opens, fstats and reads `/f` for as long; every open must succeed and read the file fstat
/// names.
fn reader() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut n = 0;
    while std::time::Instant::now() < end {
        let fd = c
            .open("/f", OpenFlags::read_only())
            .map_err(|e| format!("open /f: {e}"))?;
        let st = c.fstat(fd).map_err(|e| format!("fstat: {e}"))?;
        let mut buf = [0u8; 32];
        let got = c.pread(fd, &mut buf, 0).map_err(|e| format!("read: {e}"))?;
        c.close(fd).map_err(|e| format!("close: {e}"))?;
        let text = String::from_utf8_lossy(&buf[..got]);
        if text != "0" && text != st.ino.to_string() {
            return Err(format!("opened inode {} but read {text:?}", st.ino));
        }
        n += 1;
    }
    println!("opens {n}");
    Ok(())
}

#[test]
fn clients_renaming_over_a_file_never_break_its_readers() {
    let d = TestDaemon::start();
    let mut root = d.client();
    root.chmod("/", 0o777).unwrap();
    write_file(&mut root, "/f", b"0", 0o644);
    let free = d.handle().kernel().fs().stats().free_inodes;
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let (other, groups): (u32, &[u32]) = if uid == 0 { (ALICE, &[]) } else { (uid, &[]) };
    // Writers of two users, readers of two users.
    let children = vec![
        spawn(&d, "writer", uid, groups, &[]),
        spawn(&d, "writer", other, groups, &[]),
        spawn(&d, "reader", uid, groups, &[]),
        spawn(&d, "reader", other, groups, &[]),
    ];
    let outs: Vec<String> = children.into_iter().map(finish).collect();
    let count = |o: &str, what: &str| -> u64 {
        o.lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{what}` in {o}"))
    };
    assert!(
        count(&outs[0], "renames") + count(&outs[1], "renames") > 100,
        "{outs:?}"
    );
    assert!(
        count(&outs[2], "opens") > 100 && count(&outs[3], "opens") > 100,
        "{outs:?}"
    );
    d.wait_processes(1);
    root.unlink("/f").unwrap();
    let k = d.handle().kernel();
    assert!(k.parked_files().is_empty(), "nothing open: nothing parked");
    assert_eq!(k.fs().stats().free_inodes, free + 1, "no inode leaked");
}
