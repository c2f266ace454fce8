//! The POSIX namespace and permissions through the mount, as real programs of two real users
//! see them (run as root; the users' programs run under `setpriv` with their own uid, gid and
//! supplementary groups): search permission on every component, the sticky bit, groups, set-ID
//! bits, symbolic links, FIFOs, device nodes, fallocate (punched holes and zeroed ranges too),
//! extended attributes, byte names, hard links, files unlinked while open, locks shared with the
//! kernel's other clients, invalidation of what Linux caches, and many processes renaming over a
//! file others open.

mod common;

use common::Mounted;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};
use vino_kernel::{Credentials, LockRequest, OpenFlags};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;
/// A group neither user has as its primary group.
const STAFF: u32 = 65532;

/// Runs `script` with `sh` as `uid` (group `uid`, with `groups` as supplementary groups).
fn sh_as(uid: u32, groups: &[u32], script: &str) -> Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        format!(
            "--groups={}",
            groups.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        )
    };
    Command::new("setpriv")
        .args([format!("--reuid={uid}"), format!("--regid={uid}"), groups])
        .args(["sh", "-c", script])
        .output()
        .expect("setpriv (util-linux) runs programs as other users")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(out: Output, why: &str) {
    assert!(!out.status.success(), "should fail with {why}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "expected `{why}`: {err}");
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn search_permission_is_checked_on_every_component() {
    let m = Mounted::new();
    let mnt = m.mnt();
    fs::create_dir_all(mnt.join("x/y")).unwrap();
    fs::set_permissions(mnt.join("x/y"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(mnt.join("x/y/f"), "secret\n").unwrap();
    fs::set_permissions(mnt.join("x/y/f"), fs::Permissions::from_mode(0o644)).unwrap();
    // First as allowed, so that Linux caches the entries; then the top closes.
    assert_eq!(
        ok(sh_as(ALICE, &[], &format!("cat {}/x/y/f", mnt.display()))),
        "secret\n"
    );
    fs::set_permissions(mnt.join("x"), fs::Permissions::from_mode(0o700)).unwrap();
    let x = mnt.join("x");
    refused(
        sh_as(ALICE, &[], &format!("cat {}/y/f", x.display())),
        "Permission denied",
    );
    refused(
        sh_as(ALICE, &[], &format!("stat {}/y/f", x.display())),
        "Permission denied",
    );
    refused(
        sh_as(ALICE, &[], &format!("touch {}/y/new", x.display())),
        "Permission denied",
    );
    refused(
        sh_as(ALICE, &[], &format!("rm -f {}/y/f", x.display())),
        "Permission denied",
    );
    assert!(mnt.join("x/y/f").exists());
    // And through the kernel's own calls (the socket's path), the same answer.
    let alice = m.kernel.spawn(Credentials::user(ALICE, ALICE));
    assert_eq!(alice.stat("/x/y/f").unwrap_err().errno, vino_kernel::Errno::Acces);
    m.kernel.exit(alice.pid());
    drop(alice);
    m.finish();
}

#[test]
fn the_sticky_bit_keeps_other_users_files() {
    let m = Mounted::new();
    let tmp = m.mnt().join("tmp");
    fs::create_dir(&tmp).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
    ok(sh_as(
        ALICE,
        &[],
        &format!("echo a > {0}/a && mkdir {0}/ad && chmod 666 {0}/a", tmp.display()),
    ));
    refused(
        sh_as(BOB, &[], &format!("rm -f {}/a", tmp.display())),
        "Operation not permitted",
    );
    refused(
        sh_as(BOB, &[], &format!("rmdir {}/ad", tmp.display())),
        "Operation not permitted",
    );
    refused(
        sh_as(BOB, &[], &format!("mv {0}/a {0}/b", tmp.display())),
        "Operation not permitted",
    );
    // Writing the file is another matter: its mode allows it.
    ok(sh_as(BOB, &[], &format!("echo bob >> {}/a", tmp.display())));
    ok(sh_as(ALICE, &[], &format!("rm {0}/a && rmdir {0}/ad", tmp.display())));
    m.finish();
}

#[test]
fn supplementary_groups_count() {
    let m = Mounted::new();
    let g = m.mnt().join("g");
    fs::write(&g, "group\n").unwrap();
    std::os::unix::fs::chown(&g, Some(0), Some(STAFF)).unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o640)).unwrap();
    refused(sh_as(ALICE, &[], &format!("cat {}", g.display())), "Permission denied");
    assert_eq!(ok(sh_as(ALICE, &[STAFF], &format!("cat {}", g.display()))), "group\n");
    let pub_dir = m.mnt().join("pub");
    fs::create_dir(&pub_dir).unwrap();
    fs::set_permissions(&pub_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let mine = pub_dir.join("mine");
    ok(sh_as(
        ALICE,
        &[STAFF],
        &format!("touch {0} && chgrp {STAFF} {0}", mine.display()),
    ));
    assert_eq!(fs::metadata(&mine).unwrap().gid(), STAFF);
    refused(
        sh_as(ALICE, &[STAFF], &format!("chgrp 7 {}", mine.display())),
        "Operation not permitted",
    );
    m.finish();
}

#[test]
fn set_id_bits_drop_when_others_write_and_on_chown() {
    let m = Mounted::new();
    let f = m.mnt().join("s");
    fs::write(&f, "x").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
    ok(sh_as(ALICE, &[], &format!("echo y >> {}", f.display())));
    assert_eq!(mode(&f), 0o777);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(&f, Some(ALICE), None).unwrap();
    assert_eq!(mode(&f), 0o755);
    // A non-member's chmod cannot set the set-group-ID bit.
    ok(sh_as(ALICE, &[], &format!("chmod 2755 {}", f.display())));
    assert_eq!(mode(&f), 0o755);
    m.finish();
}

#[test]
fn symbolic_links_and_their_limits() {
    let m = Mounted::new();
    let mnt = m.mnt();
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/t"), "target\n").unwrap();
    std::os::unix::fs::symlink("d/t", mnt.join("rel")).unwrap();
    std::os::unix::fs::symlink(mnt.join("d"), mnt.join("abs")).unwrap();
    assert_eq!(fs::read_to_string(mnt.join("rel")).unwrap(), "target\n");
    assert_eq!(fs::read_to_string(mnt.join("abs/t")).unwrap(), "target\n");
    assert_eq!(fs::read_link(mnt.join("rel")).unwrap(), Path::new("d/t"));
    assert!(fs::symlink_metadata(mnt.join("rel")).unwrap().file_type().is_symlink());
    std::os::unix::fs::symlink("loop2", mnt.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", mnt.join("loop2")).unwrap();
    let e = fs::read(mnt.join("loop1")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    let e = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(mnt.join("rel"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    assert_eq!(m.kernel_stat("/d/t").size, 7);
    fs::remove_file(mnt.join("rel")).unwrap();
    assert!(mnt.join("d/t").exists(), "removing a link keeps its target");
    m.finish();
}

#[test]
fn fifos_pass_data_and_device_nodes_need_root_and_a_dev_mount() {
    let m = Mounted::new();
    let mnt = m.mnt();
    let pub_dir = mnt.join("pub");
    fs::create_dir(&pub_dir).unwrap();
    fs::set_permissions(&pub_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let script = format!(
        "mkfifo {0}/p && (cat {0}/p > {0}/got &) && echo through > {0}/p && sleep 0.2 && cat {0}/got",
        pub_dir.display()
    );
    assert_eq!(ok(sh_as(ALICE, &[], &script)), "through\n");
    assert!(fs::symlink_metadata(pub_dir.join("p")).unwrap().file_type().is_fifo());
    refused(
        sh_as(ALICE, &[], &format!("mknod {}/null c 1 3", pub_dir.display())),
        "Operation not permitted",
    );
    ok(Command::new("mknod")
        .arg(mnt.join("null"))
        .args(["c", "1", "3"])
        .output()
        .unwrap());
    let st = fs::symlink_metadata(mnt.join("null")).unwrap();
    assert!(st.file_type().is_char_device());
    assert_eq!(st.rdev(), libc::makedev(1, 3));
    // The mount is nodev: the node is stored, not usable.
    assert!(fs::read(mnt.join("null")).is_err());
    m.finish();
}

/// fallocate(2) on the mount in Linux's other modes: a punched hole frees its blocks and reads
/// as zeros, its edges zeroed, the size kept; a zeroed range reads as zeros, keeping or growing
/// the size; collapse, insert and a punch that would change the size are refused.
#[test]
fn punched_holes_and_zeroed_ranges() {
    use std::os::fd::AsRawFd;
    const B: i64 = 4096;
    let m = Mounted::new();
    let f = m.mnt().join("holes");
    let mut want: Vec<u8> = (0..64 * B).map(|i| (i % 251) as u8 + 1).collect();
    fs::write(&f, &want).unwrap();
    let file = fs::OpenOptions::new().read(true).write(true).open(&f).unwrap();
    let fallocate = |mode: i32, offset: i64, len: i64| {
        // SAFETY: a descriptor this test holds open; no memory is passed.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        }
    };
    let before = fs::metadata(&f).unwrap().blocks();
    let (off, len) = (3 * B + 100, 20 * B);
    fallocate(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off, len).unwrap();
    want[off as usize..(off + len) as usize].fill(0);
    let st = fs::metadata(&f).unwrap();
    assert_eq!(st.len(), 64 * B as u64, "the size stays");
    assert_eq!(before - st.blocks(), 19 * 8, "blocks 4..23 are freed");
    assert!(
        fs::read(&f).unwrap() == want,
        "the hole reads as zeros, the rest as it was"
    );
    fallocate(
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        40 * B + 5,
        2 * B,
    )
    .unwrap();
    want[(40 * B + 5) as usize..(42 * B + 5) as usize].fill(0);
    assert!(fs::read(&f).unwrap() == want, "the zeroed range reads as zeros");
    fallocate(libc::FALLOC_FL_ZERO_RANGE, 63 * B, 3 * B).unwrap();
    want.resize(66 * B as usize, 0);
    want[63 * B as usize..].fill(0);
    assert!(
        fs::read(&f).unwrap() == want,
        "a zeroed range past the end grows the file"
    );
    assert_eq!(fallocate(libc::FALLOC_FL_PUNCH_HOLE, 0, B), Err(libc::EOPNOTSUPP));
    assert_eq!(fallocate(libc::FALLOC_FL_COLLAPSE_RANGE, 0, B), Err(libc::EOPNOTSUPP));
    assert_eq!(fallocate(libc::FALLOC_FL_INSERT_RANGE, 0, B), Err(libc::EOPNOTSUPP));
    drop(file);
    m.finish();
}

#[test]
fn fallocate_xattrs_and_byte_names() {
    let m = Mounted::new();
    let mnt = m.mnt();
    let f = mnt.join("big");
    ok(Command::new("fallocate").args(["-l", "1MiB"]).arg(&f).output().unwrap());
    let st = fs::metadata(&f).unwrap();
    assert_eq!(st.len(), 1 << 20);
    assert!(st.blocks() >= 2048, "the blocks are allocated: {}", st.blocks());
    ok(Command::new("fallocate")
        .args(["-n", "-o", "1MiB", "-l", "1MiB"])
        .arg(&f)
        .output()
        .unwrap());
    assert_eq!(fs::metadata(&f).unwrap().len(), 1 << 20, "--keep-size keeps the size");
    assert!(fs::read(&f).unwrap().iter().all(|&b| b == 0));
    let py = |code: &str| Command::new("/usr/bin/python3").arg("-c").arg(code).output().unwrap();
    let code = format!(
        "import os; p={:?}; os.setxattr(p, 'user.colour', b'blue'); print(os.getxattr(p, 'user.colour').decode(), os.listxattr(p))",
        f.display().to_string()
    );
    assert_eq!(ok(py(&code)), "blue ['user.colour']\n");
    let code = format!(
        "import os\ntry:\n    os.setxattr({:?}, 'trusted.x', b'1')\nexcept OSError as e:\n    print(e.errno)",
        f.display().to_string()
    );
    assert_eq!(ok(py(&code)).trim(), libc::EOPNOTSUPP.to_string());
    let name = OsStr::from_bytes(b"caf\xe9-\xff");
    fs::write(mnt.join(name), "bytes").unwrap();
    let names: Vec<_> = fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().any(|n| n == name), "{names:?}");
    assert_eq!(fs::read_to_string(mnt.join(name)).unwrap(), "bytes");
    m.finish();
}

#[test]
fn hard_links_and_files_unlinked_while_open() {
    let m = Mounted::new();
    let mnt = m.mnt();
    let script = format!("cd {} && echo two > a && ln a b && rm b && cat a", mnt.display());
    assert_eq!(ok(Command::new("sh").arg("-c").arg(&script).output().unwrap()), "two\n");
    let free = m.kernel.fs_stats().free_inodes;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(mnt.join("gone"))
        .unwrap();
    fs::remove_file(mnt.join("gone")).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0, "fstat of an open, unlinked file");
    assert_eq!(m.kernel.parked_files().len(), 1);
    drop(f);
    // Linux forgets the node soon after the last close; the file goes with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !m.kernel.parked_files().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        m.kernel.parked_files().is_empty(),
        "the file is freed after its last close"
    );
    assert_eq!(m.kernel.fs_stats().free_inodes, free);
    m.finish();
}

#[test]
fn locks_on_the_mount_meet_the_kernels_other_clients() {
    let m = Mounted::new();
    let f = m.mnt().join("locked");
    fs::write(&f, "data").unwrap();
    // Another client of the kernel (as the socket's would) write-locks the whole file.
    let other = m.kernel.spawn(Credentials::root());
    let fd = other.open("/locked", OpenFlags::read_write()).unwrap();
    other.lock(fd, LockRequest::write(0, 0), false).unwrap();
    let try_lock = |how: &str| {
        let code = format!(
            "import fcntl, errno\nf = open({:?}, 'r+')\ntry:\n    fcntl.{how}(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('locked')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])",
            f.display().to_string()
        );
        ok(Command::new("/usr/bin/python3").arg("-c").arg(code).output().unwrap())
    };
    assert_eq!(try_lock("lockf").trim(), "EAGAIN");
    assert_eq!(try_lock("flock").trim(), "EAGAIN");
    other.lock(fd, LockRequest::unlock(0, 0), false).unwrap();
    assert_eq!(try_lock("lockf").trim(), "locked");
    assert_eq!(try_lock("flock").trim(), "locked");
    // The mount's locks went with the programs that took them: fcntl locks at their close (FUSE's
    // flush), a flock when Linux releases the file, which it does a moment after the close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while other.lock(fd, LockRequest::write(0, 0), false).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the mount's flock was never released"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    other.close(fd).unwrap();
    m.kernel.exit(other.pid());
    drop(other);
    m.finish();
}

#[test]
fn changes_by_other_clients_reach_linux_at_once() {
    // Linux may keep names and attributes for a minute: only the notices make it look again.
    let m = Mounted::with_config(vino_fuse::MountConfig {
        allow_other: true,
        attr_ttl: std::time::Duration::from_secs(60),
        ..vino_fuse::MountConfig::default()
    });
    let f = m.mnt().join("f");
    fs::write(&f, "x").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(mode(&f), 0o644);
    let other = m.kernel.spawn(Credentials::root());
    other.chmod("/f", 0o600).unwrap();
    // The notice goes out from the mount's own thread: a moment later, not with the call.
    let soon = |done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        done()
    };
    assert!(
        soon(&|| mode(&f) == 0o600),
        "Linux's cached attributes were invalidated"
    );
    // Linux keeps directory listings too (and readdirplus gives it the entries' attributes):
    // a change by another client must reach a listing Linux has cached.
    let listing = || {
        let mut names: Vec<String> = fs::read_dir(m.mnt())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    assert!(listing().contains(&"f".to_string()));
    assert!(listing().contains(&"f".to_string()), "listed twice, from Linux's cache");
    other.rename("/f", "/g").unwrap();
    assert!(soon(&|| !f.exists()), "Linux's cached entry was invalidated");
    assert!(m.mnt().join("g").exists());
    assert!(
        soon(&|| {
            let l = listing();
            l.contains(&"g".to_string()) && !l.contains(&"f".to_string())
        }),
        "Linux's cached listing was invalidated: {:?}",
        listing()
    );
    // A name that is not there is cached as such; made by another client, it appears.
    let n = m.mnt().join("n");
    assert!(!n.exists() && !n.exists());
    other.mkdir("/n", 0o755).unwrap();
    assert!(soon(&|| n.exists()), "Linux's negative entry was invalidated");
    other.mkdir("/d", 0o755).unwrap();
    assert!(
        soon(&|| listing().contains(&"d".to_string())),
        "a directory made by another client is listed: {:?}",
        listing()
    );
    // Every entry's attributes as readdirplus gave them agree with the kernel's.
    for e in fs::read_dir(m.mnt()).unwrap() {
        let e = e.unwrap();
        let meta = fs::symlink_metadata(e.path()).unwrap();
        let st = other.stat(&format!("/{}", e.file_name().to_str().unwrap())).unwrap();
        assert_eq!((meta.ino(), meta.mode() & 0o7777), (st.ino, st.mode & 0o7777));
    }
    m.kernel.exit(other.pid());
    drop(other);
    m.finish();
}

#[test]
fn a_file_another_client_makes_private_is_refused_though_linux_holds_its_pages() {
    let m = Mounted::new();
    let f = m.mnt().join("shared");
    fs::write(&f, "contents").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    let cat = format!("cat {}", f.display());
    // Alice reads it twice: the second time from Linux's page cache.
    assert_eq!(ok(sh_as(ALICE, &[], &cat)), "contents");
    assert_eq!(ok(sh_as(ALICE, &[], &cat)), "contents");
    let other = m.kernel.spawn(Credentials::root());
    other.chmod("/shared", 0o600).unwrap();
    // The notice goes out a moment after the chmod; from then on Alice's opens are refused.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let out = sh_as(ALICE, &[], &cat);
        if !out.status.success() {
            refused(out, "Permission denied");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Alice still reads a file made private by another client"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    m.kernel.exit(other.pid());
    drop(other);
    m.finish();
}

/// Two processes replace `f` by create-and-rename while two others open, fstat and read it:
/// every open finds a file, and reads the file fstat describes (each file holds its inode
/// number). Then nothing is left referenced or parked.
#[test]
fn processes_renaming_over_a_file_never_break_its_readers() {
    let m = Mounted::new();
    let mnt = m.mnt();
    let before = m.kernel.fs_stats().free_inodes;
    fs::write(mnt.join("f"), "0").unwrap();
    let writer = format!(
        "import os, sys, time\nd = {:?}\nend = time.time() + 3\nn = 0\nwhile time.time() < end:\n    t = os.path.join(d, 'tmp' + sys.argv[1])\n    fd = os.open(t, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)\n    os.write(fd, str(os.fstat(fd).st_ino).encode())\n    os.close(fd)\n    os.rename(t, os.path.join(d, 'f'))\n    n += 1\nprint(n)",
        mnt.display().to_string()
    );
    let reader = format!(
        "import os, time\np = os.path.join({:?}, 'f')\nend = time.time() + 3\nn = bad = 0\nwhile time.time() < end:\n    fd = os.open(p, os.O_RDONLY)\n    st = os.fstat(fd)\n    data = os.read(fd, 64).decode()\n    os.close(fd)\n    if data not in ('0', str(st.st_ino)):\n        bad += 1\n    n += 1\nprint(n, bad)",
        mnt.display().to_string()
    );
    let spawn = |code: &str, arg: &str| {
        Command::new("/usr/bin/python3")
            .args(["-c", code, arg])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children = vec![
        spawn(&writer, "0"),
        spawn(&writer, "1"),
        spawn(&reader, ""),
        spawn(&reader, ""),
    ];
    let outs: Vec<String> = children
        .into_iter()
        .map(|c| ok(c.wait_with_output().unwrap()))
        .collect();
    let renames: u64 = outs[..2].iter().map(|o| o.trim().parse::<u64>().unwrap()).sum();
    for o in &outs[2..] {
        let v: Vec<u64> = o.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert!(v[0] > 50, "a reader got few opens: {o}");
        assert_eq!(v[1], 0, "opens bound to another file than fstat reported: {o}");
    }
    assert!(renames > 50, "{renames} renames");
    fs::remove_file(mnt.join("f")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while (!m.kernel.parked_files().is_empty() || m.kernel.fs_stats().free_inodes != before)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        m.kernel.parked_files().is_empty(),
        "{:?} still parked",
        m.kernel.parked_files()
    );
    assert_eq!(m.kernel.fs_stats().free_inodes, before, "no inode leaked");
    m.finish();
}

/// Directories are listed by position, without a handle per open directory: a listing read
/// in many parts while other processes add and remove names gives every name there
/// throughout exactly once; a user without read permission still cannot list, and one with it
/// can, the listing cached by Linux or not.
#[test]
fn listings_read_while_other_processes_change_the_directory_give_each_lasting_name_once() {
    let m = Mounted::new();
    let d = m.mnt().join("big");
    fs::create_dir(&d).unwrap();
    let lasting: Vec<String> = (0..3000).map(|i| format!("lasting-entry-{i:05}")).collect();
    for n in &lasting {
        fs::write(d.join(n), "").unwrap();
    }
    // Two processes make and remove names of their own the whole time.
    let churn = format!(
        "import os, sys, time\nd = {:?}\nend = time.time() + 2\ni = 0\nwhile time.time() < end:\n    p = os.path.join(d, 'churn-%s-%d' % (sys.argv[1], i % 50))\n    if os.path.exists(p):\n        os.unlink(p)\n    else:\n        open(p, 'w').close()\n    i += 1\nprint(i)",
        d.display().to_string()
    );
    let children: Vec<_> = ["a", "b"]
        .iter()
        .map(|who| {
            Command::new("/usr/bin/python3")
                .args(["-c", &churn, who])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let end = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    let mut listings = 0;
    while std::time::Instant::now() < end {
        let mut counts = std::collections::HashMap::<String, usize>::new();
        for e in fs::read_dir(&d).unwrap() {
            *counts.entry(e.unwrap().file_name().into_string().unwrap()).or_default() += 1;
        }
        for n in &lasting {
            assert_eq!(counts.get(n), Some(&1), "{n} in listing {listings}");
        }
        assert!(counts.values().all(|&c| c == 1), "a name listed twice");
        listings += 1;
    }
    for c in children {
        assert!(ok(c.wait_with_output().unwrap()).trim().parse::<u64>().unwrap() > 10);
    }
    assert!(listings > 2, "{listings} listings");
    // Read permission is still needed, and enough.
    let private = m.mnt().join("private");
    fs::create_dir(&private).unwrap();
    fs::write(private.join("secret-name"), "").unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o711)).unwrap();
    refused(
        sh_as(ALICE, &[], &format!("ls {}", private.display())),
        "Permission denied",
    );
    fs::set_permissions(&private, fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        ok(sh_as(ALICE, &[], &format!("ls {}", private.display()))).trim(),
        "secret-name"
    );
    m.finish();
}
