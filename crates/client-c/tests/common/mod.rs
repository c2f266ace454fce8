//! What the client-library tests share: a daemon on a temporary socket, the built library, and
//! running a program with the socket in its environment.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A daemon served from this test process, on a disk image and socket in a temporary directory.
pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub handle: Option<vino_daemon::Handle>,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = vino_daemon::Config {
            socket: dir.path().join("vinod.sock"),
            image: dir.path().join("disk.img"),
            image_size: "64M".into(),
            cache_frames: 256,
            ..Default::default()
        };
        let handle = vino_daemon::start(config).expect("the daemon starts");
        TestDaemon {
            dir,
            handle: Some(handle),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("vinod.sock")
    }

    /// A connection through the Rust client, to check what a C or Python program did.
    pub fn client(&self) -> vino_client::Client {
        vino_client::Client::connect(self.socket()).expect("the Rust client connects")
    }

    /// Stops the daemon cleanly (clients gone, everything written back).
    pub fn stop(mut self) {
        self.handle
            .take()
            .expect("running")
            .shutdown()
            .expect("the daemon stops cleanly");
    }
}

/// The directory holding `libvino.so` built with this test: `deps/`, where the test executable
/// is, before its parent (where `cargo build` copies it, possibly from an older build).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the executable is in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join("libvino.so").is_file() {
            return dir.to_path_buf();
        }
    }
    panic!("libvino.so is neither in {} nor its parent", deps.display());
}

/// The crate's directory (`crates/client-c`).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's root.
pub fn workspace_dir() -> PathBuf {
    crate_dir().join("../..").canonicalize().expect("the workspace exists")
}

/// Compiles C `sources` against `vino.h` and `libvino.so` into `out` with the system `cc`.
pub fn compile_c(sources: &[&Path], out: &Path) {
    let lib = lib_dir();
    let output = Command::new("cc")
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .args(sources)
        .arg("-o")
        .arg(out)
        .arg("-L")
        .arg(&lib)
        .arg("-lvino")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        // An RPATH, not a RUNPATH: it wins over LD_LIBRARY_PATH, which cargo points at the
        // target directory too, where an older libvino.so may lie.
        .arg("-Wl,--disable-new-dtags")
        .output()
        .expect("the system cc runs");
    assert!(output.status.success(), "cc failed:\n{}", text(&output));
}

/// Runs `cmd` with `VINO_SOCKET` naming the daemon; fails with its output if it fails.
pub fn run_ok(cmd: &mut Command, socket: &Path) -> Output {
    let output = cmd.env("VINO_SOCKET", socket).output().expect("the program starts");
    assert!(
        output.status.success(),
        "{cmd:?} failed ({}):\n{}",
        output.status,
        text(&output)
    );
    output
}

/// A program's stdout and stderr, for failure messages.
pub fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds the hot-list eviction graft (clang, wasm32) into `dir`; returns its path.
pub fn build_graft(dir: &Path) -> PathBuf {
    build_example(dir, "hotlist_evict")
}

/// The SDK's example graft `name` built into `dir`.
pub fn build_example(dir: &Path, name: &str) -> PathBuf {
    let wasm =
        vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).expect("clang builds the example graft");
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, wasm).expect("writing the graft");
    path
}
