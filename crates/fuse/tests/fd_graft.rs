//! A program on the mount grafts its own open file: the module is staged through the kernel
//! (a client connection, in the daemon) and an ioctl on the descriptor binds it by its token.
//! Refused: another user's token, a file's graftpoint that is not the caller's, a token used
//! twice or never issued, a graftpoint the ioctl does not serve, a malformed argument, a bad
//! module. (Run as root; the users' programs run under `setpriv`.)

mod common;

use common::{Mounted, python_as};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use vino_kernel::Credentials;

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

/// Opens `path` read-only as `uid`, sends `VINO_IOC_GRAFT` with each `(token, point)` in turn,
/// then an ioctl the mount does not know, and reads the file sequentially. Returns the errno of
/// each ioctl (0 for success) once the program has read, and the program, which keeps its
/// descriptor open until its input closes.
fn ioctl_as(uid: u32, path: &str, calls: &[(u64, &str)]) -> (Vec<i32>, std::process::Child) {
    let calls: Vec<String> = calls.iter().map(|(t, p)| format!("({t}, b'{p}')")).collect();
    let script = format!(
        r#"
import fcntl, os, struct, sys
fd = os.open('{path}', os.O_RDONLY)
out = []
for token, point in [{calls}]:
    try:
        fcntl.ioctl(fd, {cmd:#x}, struct.pack('=Q56s', token, point))
        out.append(0)
    except OSError as e:
        out.append(e.errno)
try:
    fcntl.ioctl(fd, 0x40405602, bytes(64))
except OSError as e:
    out.append(e.errno)
while os.read(fd, 65536):
    pass
print(' '.join(map(str, out)), flush=True)
sys.stdin.read()
"#,
        calls = calls.join(", "),
        cmd = vino_proto::ioctl::GRAFT,
    );
    let (line, child) = python_waiting(uid, &script);
    let got = line.split_whitespace().map(|w| w.parse().unwrap()).collect();
    (got, child)
}

/// Runs `script` as `uid` until it prints its first line; the line, and the program, which
/// waits for its input to close.
fn python_waiting(uid: u32, script: &str) -> (String, std::process::Child) {
    let mut child = python_as(uid, script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv and python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    (line, child)
}

/// Lets a program of [`ioctl_as`] close its descriptor and end.
fn finish(mut child: std::process::Child) {
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// A module staged by a kernel process of `uid` (as the daemon does for a client of `uid`).
fn stage(m: &Mounted, uid: u32, wasm: &[u8]) -> (std::sync::Arc<vino_kernel::Process>, u64) {
    let p = m.kernel.spawn(Credentials::user(uid, uid));
    let token = p.graft_stage(wasm).unwrap();
    (p, token)
}

/// Grafts bound at `point/<fd>` in the mount's processes of `uid`, with their invocations.
fn bound(m: &Mounted, uid: u32, point: &str) -> Vec<u64> {
    m.kernel
        .processes()
        .iter()
        .filter(|p| p.credentials().uid == uid)
        .flat_map(|p| p.graft_list())
        .filter(|s| s.point.starts_with(&format!("{point}/")) && s.graft.is_some())
        .map(|s| s.stats.map_or(0, |st| st.invocations))
        .collect()
}

#[test]
fn a_program_grafts_its_own_descriptor_and_no_one_elses() {
    grafts_of_own_descriptors(&Mounted::new());
}

/// The same over FUSE over io_uring, where the ioctl (a compile) is served off the queue's
/// thread.
#[test]
fn the_ioctl_grafts_over_the_ring_too() {
    if !common::ring_available() {
        return;
    }
    grafts_of_own_descriptors(&Mounted::with_config(vino_fuse::MountConfig {
        allow_other: true,
        transport: vino_fuse::Transport::Uring,
        ..vino_fuse::MountConfig::default()
    }));
}

fn grafts_of_own_descriptors(m: &Mounted) {
    let mnt = m.mnt();
    let data = mnt.join("data");
    fs::write(&data, vec![7u8; 256 << 10]).unwrap();
    std::os::unix::fs::chown(&data, Some(ALICE), Some(ALICE)).unwrap();
    fs::set_permissions(&data, fs::Permissions::from_mode(0o644)).unwrap();
    let path = data.display().to_string();
    let ra = vino_sdk::build_example("sequential_ra", &vino_sdk::BuildOptions::default()).unwrap();

    let (_alice, a1) = stage(m, ALICE, &ra);
    let (_bob, b1) = stage(m, BOB, &ra);
    let (_bob2, b2) = stage(m, BOB, &ra);
    let (eperm, enoent, einval, enotty) = (libc::EPERM, libc::ENOENT, libc::EINVAL, libc::ENOTTY);

    // Bob cannot use Alice's token, nor graft the file's placement (Alice created it), but
    // may graft the read-ahead of his own descriptor of a file he can read.
    let (got, bob) = ioctl_as(
        BOB,
        &path,
        &[
            (a1, "file.compute_ra"),
            (b1, "file.block_buddy"),
            (b2, "file.compute_ra"),
        ],
    );
    assert_eq!(got, [eperm, eperm, 0, enotty]);
    // Linux held the file's pages (written through the mount): binding dropped them, so the
    // reads reached VINO's cache and the graft.
    let runs = bound(m, BOB, "file.compute_ra");
    assert!(runs.len() == 1 && runs[0] > 0, "Bob's graft ran on his reads: {runs:?}");
    // Alice's token survived Bob's try; used once it is gone; unknown tokens and graftpoints
    // the ioctl does not serve are refused.
    let (_alice2, a2) = stage(m, ALICE, &ra);
    let (got, alice) = ioctl_as(
        ALICE,
        &path,
        &[
            (a1, "file.compute_ra"),
            (a1, "file.compute_ra"),
            (12345, "file.compute_ra"),
            (a2, "disk.pick_request"),
        ],
    );
    assert_eq!(got, [0, enoent, enoent, einval, enotty]);
    let runs = bound(m, ALICE, "file.compute_ra");
    assert!(
        runs.len() == 1 && runs[0] > 0,
        "Alice's graft ran on her reads: {runs:?}"
    );
    // The grafts go when the programs' descriptors close.
    finish(bob);
    finish(alice);
    for uid in [ALICE, BOB] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !bound(m, uid, "file.compute_ra").is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            bound(m, uid, "file.compute_ra").is_empty(),
            "uid {uid}: unbound at close"
        );
    }
}

#[test]
fn a_bad_module_binds_nothing() {
    let m = Mounted::new();
    let data = m.mnt().join("data");
    fs::write(&data, b"hello").unwrap();
    std::os::unix::fs::chown(&data, Some(ALICE), Some(ALICE)).unwrap();
    // Not a module: refused when staged (it is compiled then), before any ioctl.
    let p = m.kernel.spawn(Credentials::user(ALICE, ALICE));
    assert_eq!(
        p.graft_stage(b"\0asm garbage").unwrap_err().errno,
        vino_kernel::Errno::Inval
    );
    // A module for another graftpoint: refused when bound.
    let (_alice, wrong_point) = stage(
        &m,
        ALICE,
        &vino_sdk::build_example("null", &vino_sdk::BuildOptions::default()).unwrap(),
    );
    let (got, alice) = ioctl_as(ALICE, &data.display().to_string(), &[(wrong_point, "file.compute_ra")]);
    assert_eq!(got, [libc::EINVAL, libc::ENOTTY]);
    assert!(bound(&m, ALICE, "file.compute_ra").is_empty());
    finish(alice);
}

#[test]
fn a_process_stages_only_so_many_modules_and_they_go_with_it() {
    let m = Mounted::new();
    let p = m.kernel.spawn(Credentials::user(ALICE, ALICE));
    for _ in 0..vino_kernel::STAGED_PER_PROCESS {
        p.graft_stage(b"\0asm\x01\0\0\0").unwrap();
    }
    let e = p.graft_stage(b"\0asm\x01\0\0\0").unwrap_err();
    assert_eq!(e.errno, vino_kernel::Errno::Again, "{e}");
    let token = {
        let q = m.kernel.spawn(Credentials::user(ALICE, ALICE));
        let t = q.graft_stage(b"\0asm\x01\0\0\0").unwrap();
        m.kernel.exit(q.pid());
        t
    };
    let r = m.kernel.spawn(Credentials::user(ALICE, ALICE));
    let e = r.graft_load_staged("vas.pick_victim", token).unwrap_err();
    assert_eq!(
        e.errno,
        vino_kernel::Errno::NoEnt,
        "staged modules go with their process: {e}"
    );
}

/// A `dir.access` graft that refuses every operation on the name `x`.
const REFUSE_X: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (func (export "dir_access") (param i32 i32 i32 i32 i64 i32 i64) (result i32)
    (i32.and (i32.eq (local.get 5) (i32.const 1)) (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 120)))))"#;

/// Runs `script` (Python, with `os` imported) as `uid`; its printed line.
fn python_line(uid: u32, script: &str) -> String {
    let out = python_as(uid, &format!("import fcntl, os, struct\n{script}"))
        .output()
        .expect("setpriv and python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_ioctl_on_a_directory_binds_its_access_graft_for_its_owner_only() {
    let m = Mounted::new();
    let dir = m.mnt().join("a");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(ALICE), Some(ALICE)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(dir.join("y"), b"y").unwrap();
    let ioctl = |uid: u32, token: u64| {
        python_line(
            uid,
            &format!(
                "fd = os.open('{}', os.O_RDONLY | os.O_DIRECTORY)\n\
                 try:\n    fcntl.ioctl(fd, {:#x}, struct.pack('=Q56s', {token}, b'dir.access'))\n    print(0)\n\
                 except OSError as e:\n    print(e.errno)",
                dir.display(),
                vino_proto::ioctl::GRAFT
            ),
        )
    };
    // Another user's directory: refused (EPERM), and its token is spent.
    let (bob, token) = stage(&m, BOB, REFUSE_X.as_bytes());
    assert_eq!(ioctl(BOB, token), "1");
    let (alice, token) = stage(&m, ALICE, REFUSE_X.as_bytes());
    assert_eq!(ioctl(ALICE, token), "0");
    for p in [bob, alice] {
        m.kernel.exit(p.pid());
    }
    // Every user, the owner too, is refused the name `x` in the tree; other names are as POSIX says.
    let touch = |uid: u32, name: &str| {
        python_line(
            uid,
            &format!(
                "try:\n    os.close(os.open('{}', os.O_CREAT | os.O_WRONLY))\n    print(0)\n\
                 except OSError as e:\n    print(e.errno)",
                dir.join(name).display()
            ),
        )
    };
    assert_eq!(touch(BOB, "x"), "13");
    assert_eq!(touch(ALICE, "x"), "13");
    assert_eq!(touch(BOB, "z"), "0");
    m.finish();
}

/// `VINO_IOC_TRY`: a program on the mount starts a candidate in shadow beside its own
/// descriptor's read-ahead, reads, and its user's client stops it where the answer says and
/// gets what the candidate would have read ahead. Another user's token is refused.
#[test]
fn a_program_tries_a_candidate_on_its_own_descriptor() {
    let m = Mounted::new();
    let data = m.mnt().join("tried");
    fs::write(&data, vec![3u8; 256 << 10]).unwrap();
    fs::set_permissions(&data, fs::Permissions::from_mode(0o644)).unwrap();
    let ra = vino_sdk::build_example("sequential_ra", &vino_sdk::BuildOptions::default()).unwrap();
    let (alice, token) = stage(&m, ALICE, &ra);
    let (_bob, bobs) = stage(&m, BOB, &ra);
    let script = format!(
        r#"
import fcntl, os, struct, sys
fd = os.open('{path}', os.O_RDONLY)
try:
    fcntl.ioctl(fd, {cmd:#x}, struct.pack('=Q56s', {bobs}, b'file.compute_ra'))
    theirs = 0
except OSError as e:
    theirs = e.errno
out = fcntl.ioctl(fd, {cmd:#x}, struct.pack('=Q56s', {token}, b'file.compute_ra'))
pid, point = struct.unpack('=Q56s', out)
while os.read(fd, 4096):
    pass
print(theirs, pid, point.rstrip(b'\0').decode(), flush=True)
sys.stdin.read()
"#,
        path = data.display(),
        cmd = vino_proto::ioctl::TRY,
    );
    let (line, child) = python_waiting(ALICE, &script);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{line}");
    assert_ne!(words[0], "0", "Bob's token is not Alice's to use");
    let (pid, point) = (words[1].parse::<u64>().unwrap(), words[2]);
    assert!(point.starts_with("file.compute_ra/"), "{point}");
    // Alice's client stops it while the program still holds the descriptor.
    let report = alice.graft_try_stop(Some(pid), point).unwrap();
    let vino_kernel::graft_try::TryReport::ReadAhead(r) = report else {
        panic!("not a read-ahead report: {report:?}");
    };
    assert!(r.reads > 0 && r.candidate.prefetched > 0, "{r:?}");
    finish(child);
}
