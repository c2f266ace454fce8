//! The Python package `vino` (python/) against a daemon: its pytest suite (or the same file as a
//! plain script, if pytest is missing) and its hello example, run by `python3` with
//! `VINO_SOCKET` and `VINO_LIB` set.

mod common;

use common::{TestDaemon, build_example, build_graft, lib_dir, run_ok, workspace_dir};
use std::path::Path;
use std::process::Command;

/// `python3` with the daemon's socket, the library just built, and nothing written to the tree.
fn python(d: &TestDaemon) -> Command {
    let mut cmd = Command::new("python3");
    cmd.current_dir(d.dir.path())
        .env("VINO_LIB", lib_dir().join("libvino.so"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH");
    cmd
}

fn has_pytest(d: &TestDaemon) -> bool {
    python(d)
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the test file with `runner` arguments before it; checks that every test passed.
fn run_suite(d: &TestDaemon, (graft, codec): (&Path, &Path), runner: &[&str], file: &Path) {
    let mut cmd = python(d);
    cmd.env("VINO_TEST_GRAFT", graft)
        .env("VINO_TEST_CODEC", codec)
        .args(runner)
        .arg(file);
    let out = run_ok(&mut cmd, &d.socket());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(" passed"), "no test ran:\n{stdout}");
    assert!(!stdout.contains("skipped"), "no test may be skipped here:\n{stdout}");
}

#[test]
fn the_python_test_suite_passes_under_pytest_and_as_a_script() {
    let d = TestDaemon::start();
    let graft = build_graft(d.dir.path());
    let codec = build_example(d.dir.path(), "chacha20poly1305_stream");
    let grafts = (graft.as_path(), codec.as_path());
    let file = workspace_dir().join("python/tests/test_client.py");
    if has_pytest(&d) {
        let rootdir = format!("--rootdir={}", d.dir.path().display());
        run_suite(
            &d,
            grafts,
            &["-m", "pytest", "-q", "-p", "no:cacheprovider", &rootdir],
            &file,
        );
    } else {
        eprintln!("pytest is not installed: the suite runs as a plain script only");
    }
    run_suite(&d, grafts, &[], &file);
    d.stop();
}

#[test]
fn the_python_hello_example_writes_a_file_the_rust_client_reads() {
    let d = TestDaemon::start();
    let example = workspace_dir().join("python/examples/hello.py");
    let out = run_ok(python(&d).arg(&example).arg("/from-python.txt"), &d.socket());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = "hello from Python through vinod\n";
    assert!(stdout.starts_with(text), "unexpected output:\n{stdout}");

    let mut c = d.client();
    assert_eq!(
        c.stat("/from-python.txt").expect("the file exists").size,
        text.len() as u64
    );
    let fd = c
        .open("/from-python.txt", vino_client::OpenFlags::read_only())
        .expect("open");
    let mut buf = [0u8; 64];
    let n = c.read(fd, &mut buf).expect("read");
    assert_eq!(&buf[..n], text.as_bytes());
    drop(c);
    d.stop();
}

#[test]
fn the_python_package_imports_without_a_daemon() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new("python3")
        .current_dir(dir.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONPATH", workspace_dir().join("python"))
        .env("VINO_LIB", lib_dir())
        .env("VINO_SOCKET", Path::new(dir.path()).join("nobody.sock"))
        .args([
            "-c",
            "import vino\ntry:\n    vino.Client()\nexcept OSError as e:\n    print(e.errno, e.strerror)",
        ])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{}", common::text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("nobody.sock"), "{stdout}");
}
