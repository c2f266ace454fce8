//! Shared by the daemon tests: a daemon in a temporary directory, child processes that run a
//! role of this test binary, and the example grafts.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use vino_daemon::{Config, Handle};
use vino_proto::{MAX_FRAME, Request, Response};

pub struct TestDaemon {
    // Dropped first: the daemon stops before its directory goes.
    pub handle: Option<Handle>,
    pub dir: tempfile::TempDir,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        Self::with(|_| {})
    }

    /// A daemon whose test configuration `tune` changes first (limits, timeouts).
    pub fn with(tune: impl FnOnce(&mut Config)) -> TestDaemon {
        let dir = tempfile::tempdir().unwrap();
        // Children running as another user must reach the socket.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut config = Config {
            socket: dir.path().join("vinod.sock"),
            image: dir.path().join("disk.img"),
            image_size: "64M".into(),
            cache_frames: 256,
            ..Config::default()
        };
        tune(&mut config);
        let handle = vino_daemon::start(config).unwrap();
        TestDaemon {
            handle: Some(handle),
            dir,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("vinod.sock")
    }

    pub fn handle(&self) -> &Handle {
        self.handle.as_ref().unwrap()
    }

    pub fn client(&self) -> vino_client::Client {
        vino_client::Client::connect(self.socket()).unwrap()
    }

    /// Waits until the kernel has exactly `n` processes (connections end asynchronously).
    pub fn wait_processes(&self, n: usize) {
        let kernel = self.handle().kernel();
        let until = Instant::now() + Duration::from_secs(10);
        while kernel.processes().len() != n {
            assert!(
                Instant::now() < until,
                "{} processes, expected {n}",
                kernel.processes().len()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A child process running `role` of this test binary (see `child_role` in each test file).
pub fn spawn_child(test: &str, role: &str, socket: &Path, env: &[(&str, &str)], uid: Option<u32>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env("VINO_TEST_ROLE", role)
        .env("VINO_SOCKET", socket)
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(uid) = uid {
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, uid);
    }
    cmd.spawn().unwrap()
}

/// Reads the child's stdout until a line that starts with `want`; all lines read.
pub fn wait_line(child: &mut Child, want: &str) -> Vec<String> {
    let out = child.stdout.as_mut().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        let done = line.trim().starts_with(want);
        lines.push(line);
        if done {
            return lines;
        }
    }
    panic!("the child ended without printing {want}: {lines:?}");
}

pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// An example graft built from C (once per test binary), and a file holding it for children.
pub fn graft(name: &str) -> (Vec<u8>, PathBuf) {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    });
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap();
    let path = dir.path().join(format!("{name}.wasm"));
    if !path.exists() {
        let wasm = vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).unwrap();
        std::fs::write(&path, &wasm).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    (std::fs::read(&path).unwrap(), path)
}

/// The daemon's next answer on a raw connection, if one comes.
pub fn answer(s: &mut UnixStream) -> Option<Response> {
    let mut buf = Vec::new();
    vino_proto::read_frame(s, &mut buf, MAX_FRAME).ok()?;
    vino_proto::decode(&buf).ok()
}

/// A raw connection that has said Hello.
pub fn raw(socket: &Path) -> UnixStream {
    let mut s = UnixStream::connect(socket).unwrap();
    let hello = Request::Hello {
        version: vino_proto::VERSION,
        client: "raw".into(),
        shm_len: 0,
    };
    vino_proto::write_frame(&mut s, &hello).unwrap();
    assert!(matches!(answer(&mut s), Some(Response::Hello { .. })));
    s
}

/// Waits until nothing of `r` is charged to anyone (a process's files close just after it
/// leaves the kernel's table).
pub fn all_refunded(d: &TestDaemon, r: vino_kernel::Resource) {
    let total = d.handle().kernel().accounts().total().clone();
    let until = Instant::now() + Duration::from_secs(10);
    while total.used(r) != 0 {
        assert!(Instant::now() < until, "{} of {r:?} still charged", total.used(r));
        std::thread::sleep(Duration::from_millis(10));
    }
}
