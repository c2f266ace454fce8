//! A stop (what SIGTERM runs) ends within the daemon's `shutdown_grace` and a moment, whatever
//! its users do: a detached program that spins is killed, connections that never say Hello
//! are closed, and a mount that a shell's working directory or an open file keeps busy is cut
//! off after the grace (its users then get `ENOTCONN`).
//!
//! The users are other uids (children of this binary, or `setpriv`), so the tests that need
//! them are skipped unless they run as root. The bound on each stop is generous: the test is
//! that it ends, not how fast.

mod common;

use common::{TestDaemon, is_root, spawn_child, wait_line};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TEST: &str = "child_role";

/// The tests' (scaled-down) grace.
const GRACE: Duration = Duration::from_secs(1);

/// What a stop may take beyond its grace here, on a loaded machine.
const SLACK: Duration = Duration::from_secs(5);

/// A program that loops forever without a system call.
const SPIN: &str = r#"(module (memory (export "memory") 1) (func (export "_start") (loop (br 0))))"#;

/// Stops the daemon on another thread and returns how long it took, or `None` if it had not
/// ended within `GRACE + SLACK`.
fn stop(d: &mut TestDaemon) -> Option<Duration> {
    let handle = d.handle.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        handle.shutdown().unwrap();
        let _ = tx.send(started.elapsed());
    });
    rx.recv_timeout(GRACE + SLACK).ok()
}

#[test]
fn a_detached_spinning_program_does_not_hold_the_stop() {
    let mut d = TestDaemon::with(|c| c.shutdown_grace = GRACE);
    let uid = is_root().then_some(1000);
    let mut child = spawn_child(TEST, "spin", &d.socket(), &[], uid);
    let lines = wait_line(&mut child, "PID");
    assert!(child.wait().unwrap().success());
    let pid: u64 = lines.last().unwrap().trim()["PID ".len()..].parse().unwrap();
    // It spins on without its client: the CPU scheduler charges it time.
    let kernel = d.handle().kernel().clone();
    let until = Instant::now() + Duration::from_secs(10);
    while kernel
        .process(pid)
        .and_then(|p| p.cpu_time())
        .is_none_or(|t| t.is_zero())
    {
        assert!(Instant::now() < until, "the program does not run");
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = stop(&mut d).expect("the stop ends although the program spins");
    assert!(took < GRACE + SLACK, "{took:?}");
    assert!(kernel.processes().is_empty());
}

#[test]
fn connections_that_never_say_hello_do_not_hold_the_stop() {
    let mut d = TestDaemon::with(|c| c.shutdown_grace = GRACE);
    let mut silent: Vec<UnixStream> = (0..3).map(|_| UnixStream::connect(d.socket()).unwrap()).collect();
    // Accepted in order: once a later client is served, the silent ones have their threads.
    d.client().stat("/").unwrap();
    let took = stop(&mut d).expect("the stop ends");
    // Well within the 10 s a connection has to say Hello.
    assert!(took < GRACE + SLACK, "{took:?}");
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(s.read(&mut [0u8; 16]).unwrap(), 0, "closed by the stop");
    }
}

/// Python as `uid` (under `setpriv`, in directory `cwd`) that opens `path` (`.` for none) and
/// prints READY, then at a line on its stdin lists its working directory and writes to the
/// file, printing the errno of each (0 if it worked).
fn holder(uid: u32, cwd: &std::path::Path, path: &str) -> Child {
    let script = format!(
        "import os, sys\nfd = os.open('{path}', os.O_WRONLY) if '{path}' != '.' else None\nprint('READY', flush=True)\nsys.stdin.readline()\ndef errno(f):\n    try:\n        f()\n        return 0\n    except OSError as e:\n        return e.errno\nprint('LIST', errno(lambda: os.listdir('.')), 'WRITE', errno(lambda: fd is None or os.write(fd, b'x')), flush=True)\n"
    );
    Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ])
        .args(["/usr/bin/python3", "-c", &script])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("setpriv and python3 run programs as other users")
}

/// The next line `child` prints.
fn next_line(child: &mut Child) -> String {
    let mut l = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut l)
        .unwrap();
    l.trim().to_string()
}

#[test]
fn users_in_the_mount_are_cut_off_after_the_grace() {
    users_are_cut_off(vino_fuse::Transport::DevFuse);
}

#[test]
fn users_in_a_mount_served_over_io_uring_are_cut_off_after_the_grace() {
    // Where Linux offers no ring, the mount (and the test) is served through /dev/fuse.
    users_are_cut_off(vino_fuse::Transport::Auto);
}

/// A shell of uid 1000 whose working directory is in the mount and a process of uid 1001
/// holding a file open there keep it busy through the stop's grace; the stop then ends, and
/// each of them gets `ENOTCONN` at its next access.
fn users_are_cut_off(transport: vino_fuse::Transport) {
    if !is_root() || !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and /dev/fuse to mount and to act as other users");
        return;
    }
    let mut d = TestDaemon::with(|c| c.shutdown_grace = GRACE);
    let mnt = d.dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    d.handle().daemon().mount_with(&mnt, transport, true).unwrap();
    // A directory for a shell of uid 1000, a file uid 1001 may write.
    let home = mnt.join("home1000");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(1000), Some(1000)).unwrap();
    let file = mnt.join("shared");
    std::fs::write(&file, b"").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut children = [
        holder(1000, &home, "."),
        holder(1001, d.dir.path(), file.to_str().unwrap()),
    ];
    for c in &mut children {
        assert_eq!(next_line(c), "READY");
    }
    let took = stop(&mut d);
    for c in &mut children {
        let _ = c.stdin.as_mut().unwrap().write_all(b"go\n");
    }
    let answers: Vec<String> = children.iter_mut().map(next_line).collect();
    for c in &mut children {
        let _ = c.kill();
        c.wait().unwrap();
    }
    let took = took.expect("the stop ends although users stay in the mount");
    assert!(took >= GRACE && took < GRACE + SLACK, "{took:?}");
    // ENOTCONN for a connection aborted; EIO would do as well.
    let cut = |e: &str| e == "107" || e == "5";
    let words: Vec<Vec<&str>> = answers.iter().map(|a| a.split(' ').collect()).collect();
    assert!(
        words[0].len() == 4 && cut(words[0][1]),
        "the shell's directory: {answers:?}"
    );
    assert!(words[1].len() == 4 && cut(words[1][3]), "the open file: {answers:?}");
}

/// Roles run in a child process (see `spawn_child`).
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    assert_eq!(role, "spin");
    let socket = std::env::var("VINO_SOCKET").unwrap();
    let setup = vino_client::ProgramSetup::new(vec![b"spin".to_vec()], Vec::new());
    let pid = vino_client::Client::connect(&socket)
        .unwrap()
        .run_detached(SPIN.as_bytes(), &setup)
        .unwrap();
    println!("PID {pid}");
}
