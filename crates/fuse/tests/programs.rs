//! Real programs on a FUSE mount of the VINO kernel: cp, tar, gzip, grep, sqlite3 and git, a
//! second user refused by the kernel's permission check, and a file unlinked while open. Each
//! test makes an image, boots a kernel on it, mounts it, runs the programs, unmounts, shuts the
//! kernel down and checks the image with fsck. Needs root and /dev/fuse, and the programs
//! installed (Debian: coreutils tar gzip grep sqlite3 git).

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use vino_blockdev::BlockDevice;
use vino_fuse::MountConfig;
use vino_kernel::storage::{MkfsOptions, fsck, mkfs};
use vino_kernel::{Kernel, KernelConfig};

mod common;
use common::Mounted;

/// Runs a program and fails the test, saying why, unless it succeeds.
fn run(cmd: &mut Command) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}): is it installed?"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Bytes that do not compress to nothing and differ at every offset.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 3 == 0 {
                b'a' + (x % 26) as u8
            } else {
                (x >> 24) as u8
            }
        })
        .collect()
}

/// Makes a tree of directories and files of several sizes under `root`.
fn make_tree(root: &Path) {
    for (i, dir) in ["a", "a/b", "a/b/c", "d", "e/f"].iter().enumerate() {
        fs::create_dir_all(root.join(dir)).unwrap();
        for (j, size) in [0usize, 1, 4095, 4096, 70_000, 300_001].iter().enumerate() {
            fs::write(
                root.join(dir).join(format!("f{j}.bin")),
                data(*size, (i * 10 + j) as u64),
            )
            .unwrap();
        }
    }
    fs::set_permissions(root.join("d/f1.bin"), fs::Permissions::from_mode(0o600)).unwrap();
}

/// Fails unless the trees hold the same names, kinds, modes and bytes.
fn assert_same_tree(a: &Path, b: &Path) {
    let names = |p: &Path| {
        let mut v: Vec<_> = fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    let (na, nb) = (names(a), names(b));
    assert_eq!(na, nb, "{} and {} list different names", a.display(), b.display());
    for name in na {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let (ma, mb) = (fs::metadata(&pa).unwrap(), fs::metadata(&pb).unwrap());
        assert_eq!(ma.is_dir(), mb.is_dir(), "{}", pb.display());
        assert_eq!(
            ma.permissions().mode() & 0o7777,
            mb.permissions().mode() & 0o7777,
            "mode of {}",
            pb.display()
        );
        if ma.is_dir() {
            assert_same_tree(&pa, &pb);
        } else {
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "{} differs",
                pb.display()
            );
        }
    }
}

#[test]
fn cp_copies_a_multi_megabyte_file_in_and_out() {
    let m = Mounted::new();
    let host = m.host("in");
    let big = data(5 << 20, 7);
    fs::write(host.join("big"), &big).unwrap();
    run(Command::new("cp").arg(host.join("big")).arg(m.mnt().join("big")));
    assert!(
        fs::read(m.mnt().join("big")).unwrap() == big,
        "the copy on the mount differs"
    );
    assert_eq!(fs::metadata(m.mnt().join("big")).unwrap().len(), big.len() as u64);
    assert_eq!(
        m.kernel_stat("/big").size,
        big.len() as u64,
        "the file is in the VINO file system"
    );
    run(Command::new("cp")
        .arg("-p")
        .arg(m.mnt().join("big"))
        .arg(m.mnt().join("big2")));
    run(Command::new("cp").arg(m.mnt().join("big2")).arg(host.join("back")));
    assert!(fs::read(host.join("back")).unwrap() == big, "the copy back differs");
    let (a, b) = (
        fs::metadata(m.mnt().join("big")).unwrap(),
        fs::metadata(m.mnt().join("big2")).unwrap(),
    );
    assert_eq!(
        a.modified().unwrap(),
        b.modified().unwrap(),
        "cp -p keeps the modification time"
    );
    m.finish();
}

#[test]
fn tar_creates_and_extracts_a_tree() {
    let m = Mounted::new();
    let src = m.host("src");
    make_tree(&src.join("tree"));
    let archive = m.mnt().join("tree.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg("tree"));
    fs::create_dir(m.mnt().join("out")).unwrap();
    run(Command::new("tar")
        .arg("-xpf")
        .arg(&archive)
        .arg("-C")
        .arg(m.mnt().join("out")));
    assert_same_tree(&src.join("tree"), &m.mnt().join("out/tree"));
    // And back: an archive of the tree on the mount, extracted outside it.
    let back = m.host("back");
    run(Command::new("tar")
        .arg("-cf")
        .arg(back.join("t.tar"))
        .arg("-C")
        .arg(m.mnt().join("out"))
        .arg("tree"));
    run(Command::new("tar")
        .arg("-xpf")
        .arg(back.join("t.tar"))
        .arg("-C")
        .arg(&back));
    assert_same_tree(&src.join("tree"), &back.join("tree"));
    // A tree renamed and removed through the mount.
    fs::rename(m.mnt().join("out/tree"), m.mnt().join("moved")).unwrap();
    assert_same_tree(&src.join("tree"), &m.mnt().join("moved"));
    run(Command::new("rm").arg("-r").arg(m.mnt().join("moved")));
    assert!(!m.mnt().join("moved").exists());
    m.finish();
}

#[test]
fn gzip_and_gunzip_round_trip_and_grep_finds_lines() {
    let m = Mounted::new();
    let text: String = (0..20_000)
        .map(|i| format!("line {i} {}\n", if i % 7 == 0 { "needle" } else { "hay" }))
        .collect();
    let file = m.mnt().join("text.txt");
    fs::write(&file, &text).unwrap();
    let count = stdout(&run(Command::new("grep").arg("-c").arg("needle").arg(&file)));
    assert_eq!(count.trim(), (0..20_000).filter(|i| i % 7 == 0).count().to_string());
    run(Command::new("gzip").arg(&file));
    assert!(
        !file.exists() && m.mnt().join("text.txt.gz").exists(),
        "gzip replaces the file"
    );
    run(Command::new("gunzip").arg(m.mnt().join("text.txt.gz")));
    assert_eq!(fs::read_to_string(&file).unwrap(), text);
    fs::create_dir_all(m.mnt().join("d/e")).unwrap();
    fs::write(m.mnt().join("d/e/x"), "one needle\n").unwrap();
    let found = stdout(&run(Command::new("grep").arg("-rl").arg("one needle").arg(m.mnt())));
    assert_eq!(found.trim(), m.mnt().join("d/e/x").display().to_string());
    m.finish();
}

#[test]
fn sqlite_commits_a_transaction_and_queries_it() {
    let m = Mounted::new();
    let db = m.mnt().join("db.sqlite");
    let script = "create table t(id integer primary key, name text, n integer);\n\
                  begin;\n\
                  with recursive k(i) as (select 1 union all select i + 1 from k where i < 5000)\n\
                  insert into t(name, n) select 'row' || i, i * 3 from k;\n\
                  commit;\n";
    run(Command::new("sqlite3").arg(&db).arg(script));
    run(Command::new("sqlite3")
        .arg(&db)
        .arg("begin; update t set n = n + 1 where id <= 10; commit;"));
    let out = stdout(&run(Command::new("sqlite3")
        .arg(&db)
        .arg("select count(*), sum(n) from t; pragma integrity_check;")));
    let sum: u64 = (1..=5000u64).map(|i| i * 3).sum::<u64>() + 10;
    assert_eq!(out, format!("5000|{sum}\nok\n"));
    m.finish();
}

#[test]
fn git_init_add_commit_log_status() {
    let m = Mounted::new();
    let home = m.host("home");
    let repo = m.mnt().join("repo");
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(&repo)
            .args(args)
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1");
        c.env("GIT_AUTHOR_NAME", "V").env("GIT_AUTHOR_EMAIL", "v@example.org");
        c.env("GIT_COMMITTER_NAME", "V")
            .env("GIT_COMMITTER_EMAIL", "v@example.org");
        stdout(&run(&mut c))
    };
    fs::create_dir(&repo).unwrap();
    git(&["init", "-q"]);
    make_tree(&repo.join("src"));
    fs::write(repo.join("README"), "hello\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "first commit"]);
    fs::write(repo.join("README"), "hello again\n").unwrap();
    assert_eq!(git(&["status", "--porcelain"]), " M README\n");
    git(&["commit", "-q", "-a", "-m", "second commit"]);
    let log = git(&["log", "--format=%s"]);
    assert_eq!(log, "second commit\nfirst commit\n");
    assert_eq!(git(&["status", "--porcelain"]), "");
    git(&["fsck", "--strict"]);
    m.finish();
}

#[test]
fn another_user_is_refused_a_private_file_of_root() {
    let m = Mounted::new();
    let secret = m.mnt().join("secret");
    let public = m.mnt().join("public");
    fs::write(&secret, "root only\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(&public, "for all\n").unwrap();
    fs::set_permissions(&public, fs::Permissions::from_mode(0o644)).unwrap();
    let as_user = |args: &[&Path]| Command::new("cat").args(args).uid(1000).gid(1000).output().unwrap();
    let refused = as_user(&[&secret]);
    assert!(!refused.status.success(), "uid 1000 read a 0600 file of root");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Permission denied"),
        "{refused:?}"
    );
    let allowed = as_user(&[&public]);
    assert_eq!(stdout(&allowed), "for all\n", "{allowed:?}");
    let write = Command::new("sh")
        .arg("-c")
        .arg(format!("echo x > {}", public.display()))
        .uid(1000)
        .gid(1000)
        .output();
    assert!(!write.unwrap().status.success(), "uid 1000 wrote a 0644 file of root");
    let users: Vec<u32> = m
        .mount
        .as_ref()
        .unwrap()
        .processes()
        .iter()
        .map(|p| p.credentials().uid)
        .collect();
    assert!(
        users.contains(&1000) && users.contains(&0),
        "one kernel process per caller: {users:?}"
    );
    m.finish();
}

#[test]
fn a_file_unlinked_while_open_stays_readable_until_closed() {
    let m = Mounted::new();
    let path = m.mnt().join("doomed");
    let body = data(200_000, 3);
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.write_all(&body).unwrap();
    fs::remove_file(&path).unwrap();
    assert!(!path.exists(), "the name is gone");
    let mut back = vec![0u8; body.len()];
    file.read_exact_at(&mut back, 0).unwrap();
    assert!(back == body, "the open file still reads what was written");
    file.write_all_at(b"more", body.len() as u64).unwrap();
    assert_eq!(file.metadata().unwrap().len(), body.len() as u64 + 4);
    let mut tail = String::new();
    let mut reopened = file.try_clone().unwrap();
    std::io::Seek::seek(&mut reopened, std::io::SeekFrom::Start(body.len() as u64)).unwrap();
    reopened.read_to_string(&mut tail).unwrap();
    assert_eq!(tail, "more");
    drop((file, reopened));
    m.finish();
}

#[test]
fn coreutils_change_sizes_modes_times_and_links() {
    let m = Mounted::new();
    let f = m.mnt().join("f");
    fs::write(&f, data(50_000, 9)).unwrap();
    run(Command::new("truncate").arg("-s").arg("10000").arg(&f));
    assert!(
        fs::read(&f).unwrap() == data(50_000, 9)[..10_000],
        "truncate keeps the head"
    );
    run(Command::new("truncate").arg("-s").arg("20000").arg(&f));
    assert!(
        fs::read(&f).unwrap()[10_000..].iter().all(|&b| b == 0),
        "growing reads zeros"
    );
    let sparse = m.mnt().join("sparse");
    run(Command::new("truncate").arg("-s").arg("10000").arg(&sparse));
    run(Command::new("sh")
        .arg("-c")
        .arg(format!("printf end >> {}", sparse.display())));
    let back = fs::read(&sparse).unwrap();
    assert!(back.len() == 10_003 && back[..10_000].iter().all(|&b| b == 0) && &back[10_000..] == b"end");
    run(Command::new("chmod").arg("640").arg(&f));
    assert_eq!(fs::metadata(&f).unwrap().permissions().mode() & 0o7777, 0o640);
    run(Command::new("chown").arg("1000:1000").arg(&f));
    assert_eq!(m.kernel_stat("/f").uid, 1000);
    run(Command::new("touch").arg("-m").arg("-d").arg("@981173106").arg(&f));
    let mtime = fs::metadata(&f).unwrap().modified().unwrap();
    assert_eq!(
        mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
        981_173_106
    );
    run(Command::new("ln").arg(&f).arg(m.mnt().join("g")));
    assert_eq!(m.kernel_stat("/f").nlink, 2);
    run(Command::new("mv").arg(m.mnt().join("g")).arg(m.mnt().join("h")));
    assert!(fs::read(m.mnt().join("h")).unwrap() == fs::read(&f).unwrap());
    let listing = stdout(&run(Command::new("ls").arg("-la").arg(m.mnt())));
    assert!(listing.contains(" h\n") && listing.contains(" f\n"), "{listing}");
    let df = stdout(&run(Command::new("df").arg("-k").arg(m.mnt())));
    assert!(df.contains("vino"), "{df}");
    m.finish();
}

#[test]
fn another_user_creates_files_of_its_own_in_a_shared_directory() {
    let m = Mounted::new();
    let shared = m.mnt().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    // The file is created 0444 yet opened for writing, as POSIX allows its creator.
    let script = format!(
        "umask 0222 && echo mine > {0}/f && mkdir {0}/d && cat {0}/f",
        shared.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .uid(1000)
        .gid(1000)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "mine\n");
    let st = m.kernel_stat("/shared/f");
    assert_eq!((st.uid, st.gid, st.mode & 0o7777), (1000, 1000, 0o444));
    assert_eq!(m.kernel_stat("/shared/d").uid, 1000);
    m.finish();
}

#[test]
fn a_large_directory_lists_whole_across_readdir_calls() {
    let m = Mounted::new();
    let dir = m.mnt().join("many");
    fs::create_dir(&dir).unwrap();
    let names: Vec<String> = (0..1500)
        .map(|i| format!("a-rather-long-file-name-to-fill-replies-{i:05}"))
        .collect();
    for n in &names {
        fs::write(dir.join(n), n).unwrap();
    }
    let listed = stdout(&run(Command::new("ls").arg("-1").arg(&dir)));
    assert_eq!(listed.lines().collect::<Vec<_>>(), names);
    let found = stdout(&run(Command::new("find").arg(&dir).arg("-type").arg("f")));
    assert_eq!(found.lines().count(), names.len());
    run(Command::new("rm").arg("-rf").arg(&dir));
    assert!(!dir.exists());
    m.finish();
}

/// A name created and renamed, one made 30 steps before unlinked; of varied lengths, so that
/// freed records and new entries land anywhere in the directory.
fn churn_step(p: &vino_kernel::Process, dir: &str, i: usize) {
    let names = |i: usize| {
        let pad = "y".repeat(i * 37 % 200);
        (format!("{dir}/c{i}-{pad}"), format!("{dir}/r{i}-{pad}"))
    };
    let (made, renamed) = names(i);
    p.close(p.open(&made, vino_kernel::OpenFlags::create()).unwrap())
        .unwrap();
    p.rename(&made, &renamed).unwrap();
    if i >= 30 {
        p.unlink(&names(i - 30).1).unwrap();
    }
}

#[test]
fn a_listing_under_another_users_churn_gives_every_lasting_entry_once() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let m = Mounted::new();
    let root = m.kernel.spawn(vino_kernel::Credentials::root());
    root.mkdir("/shared", 0o777).unwrap();
    fs::set_permissions(m.mnt().join("shared"), fs::Permissions::from_mode(0o1777)).unwrap();
    let lasting: Vec<String> = (0..2000).map(|i| format!("{i:05}-{}", "x".repeat(194))).collect();
    for n in &lasting {
        root.close(
            root.open(&format!("/shared/{n}"), vino_kernel::OpenFlags::create())
                .unwrap(),
        )
        .unwrap();
    }
    // Another user churns names of its own in the directory while it is listed.
    let bob = m.kernel.spawn(vino_kernel::Credentials::user(1001, 1001));
    let (stop, steps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let churn = {
        let (stop, steps) = (stop.clone(), steps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                churn_step(&bob, "/shared", steps.fetch_add(1, Ordering::Relaxed));
            }
            bob.kernel().exit(bob.pid());
        })
    };
    for _ in 0..3 {
        let mut count = std::collections::BTreeMap::<String, usize>::new();
        for e in fs::read_dir(m.mnt().join("shared")).unwrap() {
            *count.entry(e.unwrap().file_name().into_string().unwrap()).or_default() += 1;
        }
        let twice: Vec<_> = count.iter().filter(|(_, c)| **c > 1).collect();
        assert!(twice.is_empty(), "listed more than once: {twice:?}");
        let missing = lasting.iter().filter(|n| !count.contains_key(*n)).count();
        assert_eq!(missing, 0, "{missing} lasting names not listed");
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert!(
        steps.load(Ordering::Relaxed) > 0,
        "the directory changed during the listings"
    );
    m.kernel.exit(root.pid());
    drop(root);
    m.finish();
}

#[test]
fn serve_foreground_runs_until_unmounted() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Arc::new(vino_blockdev::MemDevice::new(8192));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &KernelConfig::default()).unwrap();
    let mnt = dir.path().to_path_buf();
    let served = {
        let (kernel, mnt) = (kernel.clone(), mnt.clone());
        std::thread::spawn(move || vino_fuse::serve_foreground(kernel, &mnt, &MountConfig::default()))
    };
    let mounted = || {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!(" {} ", mnt.display()))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !mounted() {
        assert!(std::time::Instant::now() < deadline, "the mount did not appear");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    fs::write(mnt.join("hello"), "world").unwrap();
    let target = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).unwrap();
    // A child another test forks may hold the written file's descriptor until it execs (the
    // descriptor is close-on-exec): the mount is busy for that moment.
    let umount = || {
        // SAFETY: `target` is a NUL-terminated path that lives through the call.
        let r = unsafe { libc::umount(target.as_ptr()) };
        (r, std::io::Error::last_os_error())
    };
    let mut result = umount();
    while result.0 != 0 && result.1.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        result = umount();
    }
    assert_eq!(result.0, 0, "umount: {}", result.1);
    served.join().unwrap().unwrap();
    assert!(kernel.processes().is_empty(), "the mount's processes end with it");
    let p = kernel.spawn(vino_kernel::Credentials::root());
    assert_eq!(p.stat("/hello").unwrap().size, 5);
    kernel.exit(p.pid());
    kernel.shutdown().unwrap();
    assert!(fsck(&*dev, false).unwrap().is_clean());
}

/// Lookups of `ino` in VINO's cache so far: hits and misses.
fn cache_lookups(m: &Mounted, ino: u64) -> u64 {
    let c = m.kernel.file_cache_counters(ino);
    c.hits + c.misses
}

#[test]
fn with_the_page_cache_off_every_read_is_served_by_the_vino_cache() {
    let m = Mounted::with_config(MountConfig {
        page_cache: false,
        ..MountConfig::default()
    });
    let path = m.mnt().join("hot");
    fs::write(&path, data(64 << 10, 5)).unwrap();
    let ino = m.kernel_stat("/hot").ino;
    let mut seen = cache_lookups(&m, ino);
    for _ in 0..3 {
        assert!(fs::read(&path).unwrap() == data(64 << 10, 5));
        let now = cache_lookups(&m, ino);
        assert!(
            now >= seen + 16,
            "a read of 16 pages went around VINO's cache ({seen} -> {now})"
        );
        seen = now;
    }
    m.finish();
}

#[test]
fn linux_keeps_what_it_read_from_one_open_to_the_next() {
    let m = Mounted::new();
    let path = m.mnt().join("warm");
    fs::write(&path, data(64 << 10, 6)).unwrap();
    let ino = m.kernel_stat("/warm").ino;
    assert!(fs::read(&path).unwrap() == data(64 << 10, 6));
    let seen = cache_lookups(&m, ino);
    for _ in 0..3 {
        assert!(fs::read(&path).unwrap() == data(64 << 10, 6));
    }
    assert_eq!(
        cache_lookups(&m, ino),
        seen,
        "reads of pages Linux holds asked the kernel again"
    );
    m.finish();
}

/// A 64 KiB file `name` written through the mount and read once through a descriptor kept
/// open (so Linux holds its pages): its path, its bytes and the descriptor.
fn cached_file(m: &Mounted, name: &str, seed: u64) -> (std::path::PathBuf, Vec<u8>, fs::File) {
    let path = m.mnt().join(name);
    let want = data(64 << 10, seed);
    fs::write(&path, &want).unwrap();
    let reader = fs::File::open(&path).unwrap();
    let mut buf = vec![0; want.len()];
    reader.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == want);
    (path, want, reader)
}

#[test]
fn writes_through_the_mount_reach_descriptors_that_read_through_linuxs_cache() {
    let m = Mounted::new();
    let (path, mut want, reader) = cached_file(&m, "mixed", 10);
    let mut buf = vec![0; want.len()];
    // Another descriptor writes (directly: it is open for writing) into pages Linux holds.
    let writer = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let patch = data(6000, 11);
    writer.write_all_at(&patch, 1000).unwrap();
    want[1000..7000].copy_from_slice(&patch);
    reader.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == want, "a reader saw old data after the write returned");
    let mut again = vec![0; want.len()];
    writer.read_exact_at(&mut again, 0).unwrap();
    assert!(again == want);
    assert!(fs::read(&path).unwrap() == want);
    // Appending through a new descriptor, then reading to the end.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"tail")
        .unwrap();
    want.extend_from_slice(b"tail");
    let mut all = Vec::new();
    fs::File::open(&path).unwrap().read_to_end(&mut all).unwrap();
    assert!(all == want, "an append was not seen");
    drop((reader, writer));
    m.finish();
}

/// Reads `path` on the mount until it holds `want` (another client's change reaches Linux as
/// a notice, sent by a thread of the mount a moment after the change).
fn until_read_gives(path: &Path, want: &[u8]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = fs::read(path).unwrap();
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: a reader on the mount still sees {} bytes of old data",
            path.display(),
            got.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn another_clients_writes_and_truncates_reach_readers_on_the_mount() {
    let m = Mounted::new();
    // A descriptor on the mount, open throughout, and its pages in Linux's cache.
    let (path, mut want, kept) = cached_file(&m, "shared", 7);
    let mut buf = vec![0; want.len()];

    let other = m.kernel.spawn(vino_kernel::Credentials::root());
    let fd = other.open("/shared", vino_kernel::OpenFlags::read_write()).unwrap();
    let patch = data(5000, 8);
    other.pwrite(fd, &patch, 4000).unwrap();
    want[4000..9000].copy_from_slice(&patch);
    until_read_gives(&path, &want);
    kept.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == want, "the descriptor open before the write reads old data");

    other.ftruncate(fd, 10_000).unwrap();
    want.truncate(10_000);
    until_read_gives(&path, &want);
    let grown = data(3000, 9);
    other.pwrite(fd, &grown, 20_000).unwrap();
    want.resize(20_000, 0);
    want.extend_from_slice(&grown);
    until_read_gives(&path, &want);
    other.close(fd).unwrap();
    m.kernel.exit(other.pid());
    drop((other, kept));
    m.finish();
}

/// A burst of changes by another client to more files than the mount's queue of notices holds
/// (here two), and then a change to each of several files Linux has cached, whose notices the
/// full queue drops: readers on the mount still end with each file's new bytes.
#[test]
fn readers_on_the_mount_see_changes_made_while_the_notices_overflowed() {
    let m = Mounted::with_config(MountConfig {
        notice_queue: 2,
        ..MountConfig::default()
    });
    let names: Vec<String> = (0..8).map(|i| format!("cached{i}")).collect();
    let floods: Vec<String> = (0..32).map(|i| format!("flood{i}")).collect();
    for n in names.iter().chain(&floods) {
        fs::write(m.mnt().join(n), vec![0u8; 8192]).unwrap();
        assert_eq!(fs::read(m.mnt().join(n)).unwrap(), vec![0u8; 8192]);
    }
    let other = m.kernel.spawn(vino_kernel::Credentials::root());
    let rw = vino_kernel::OpenFlags::read_write();
    // Writes to one file would take one place (a notice already waiting is not queued
    // again): the flood goes round distinct files.
    let flood: Vec<_> = floods
        .iter()
        .map(|n| other.open(&format!("/{n}"), rw).unwrap())
        .collect();
    for round in 0..100_000u32 {
        other
            .pwrite(flood[round as usize % flood.len()], &round.to_le_bytes(), 0)
            .unwrap();
    }
    for n in &names {
        let fd = other.open(&format!("/{n}"), rw).unwrap();
        other.pwrite(fd, b"new", 4096).unwrap();
        other.close(fd).unwrap();
    }
    let mut want = vec![0u8; 8192];
    want[4096..4099].copy_from_slice(b"new");
    for n in &names {
        until_read_gives(&m.mnt().join(n), &want);
    }
    for fd in flood {
        other.close(fd).unwrap();
    }
    m.kernel.exit(other.pid());
    drop(other);
    m.finish();
}

/// `copy_file_range(2)` on the mount: a copy is one request per MiB instead of a read and a
/// write, at the offsets asked, ending at the source's end; Linux's cached pages of the
/// destination are replaced; a copy into a file opened for appending is refused.
#[test]
fn copy_file_range_copies_inside_the_mount() {
    let m = Mounted::new();
    let src_path = m.mnt().join("src");
    let want = data((3 << 20) + 12345, 21);
    fs::write(&src_path, &want).unwrap();
    let (dst_path, mut dst_want, kept) = cached_file(&m, "dst", 22);
    let src = fs::File::open(&src_path).unwrap();
    let dst = fs::OpenOptions::new().write(true).open(&dst_path).unwrap();
    let copy = |from: &fs::File, at: i64, to: &fs::File, to_at: i64, len: usize| {
        use std::os::fd::AsRawFd;
        let (mut a, mut b) = (at, to_at);
        // SAFETY: both descriptors are open; the offsets are locals the call updates.
        let n = unsafe { libc::copy_file_range(from.as_raw_fd(), &mut a, to.as_raw_fd(), &mut b, len, 0) };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    };
    // A part inside the destination's cached pages, from an offset of the source.
    assert_eq!(copy(&src, 100, &dst, 500, 20_000).unwrap(), 20_000);
    dst_want[500..20_500].copy_from_slice(&want[100..20_100]);
    let mut buf = vec![0; dst_want.len()];
    kept.read_exact_at(&mut buf, 0).unwrap();
    assert!(
        buf == dst_want,
        "a descriptor that had the pages cached reads the old data"
    );
    // The whole source past the destination's end, a MiB per request: the caller loops.
    let mut done = 0;
    loop {
        let n = copy(&src, done as i64, &dst, (dst_want.len() + done) as i64, usize::MAX >> 2).unwrap();
        if n == 0 {
            break;
        }
        // A MiB per request shows the daemon served it (Linux's own fallback, a splice through
        // reads and writes, copies everything asked in one call).
        assert_eq!(n, (want.len() - done).min(1 << 20), "one request copies a MiB");
        done += n;
    }
    assert_eq!(done, want.len(), "the copy ends at the source's end");
    dst_want.extend_from_slice(&want);
    assert!(fs::read(&dst_path).unwrap() == dst_want);
    // Appending: refused (before any request, by Linux).
    let app = fs::OpenOptions::new().append(true).open(&dst_path).unwrap();
    assert_eq!(
        copy(&src, 0, &app, 0, 10).unwrap_err().raw_os_error(),
        Some(libc::EBADF)
    );
    drop((src, dst, app, kept));
    m.finish();
}
