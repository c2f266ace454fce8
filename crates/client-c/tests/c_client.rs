//! The C library as a C program uses it: `hello.c` and `tests/c/api.c` compiled with the system
//! `cc` against `vino.h` and `libvino.so`, run as real processes against a daemon.

mod common;

use common::{TestDaemon, build_graft, compile_c, crate_dir, run_ok};
use std::process::Command;

#[test]
fn the_hello_example_writes_a_file_the_rust_client_reads() {
    let d = TestDaemon::start();
    let exe = d.dir.path().join("hello");
    compile_c(&[&crate_dir().join("examples/hello.c")], &exe);

    let out = run_ok(Command::new(&exe).arg("/greeting.txt"), &d.socket());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = "hello from C through vinod\n";
    assert!(stdout.starts_with(text), "unexpected output:\n{stdout}");
    assert!(
        stdout.contains(&format!("/greeting.txt: {} bytes", text.len())),
        "{stdout}"
    );

    let mut c = d.client();
    let st = c.stat("/greeting.txt").expect("the file exists");
    assert_eq!(st.size, text.len() as u64);
    let fd = c
        .open("/greeting.txt", vino_client::OpenFlags::read_only())
        .expect("open");
    let mut buf = [0u8; 64];
    let n = c.read(fd, &mut buf).expect("read");
    assert_eq!(&buf[..n], text.as_bytes());
    drop(c);
    d.stop();
}

#[test]
fn hello_without_a_daemon_fails_with_a_message() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = dir.path().join("hello");
    compile_c(&[&crate_dir().join("examples/hello.c")], &exe);
    let out = Command::new(&exe)
        .env("VINO_SOCKET", dir.path().join("nobody.sock"))
        .output()
        .expect("hello runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nobody.sock"), "the error names the socket: {stderr}");
}

#[test]
fn every_call_of_the_header_works_from_c() {
    let d = TestDaemon::start();
    let exe = d.dir.path().join("api");
    compile_c(&[&crate_dir().join("tests/c/api.c")], &exe);
    let graft = build_graft(d.dir.path());

    let out = run_ok(Command::new(&exe).arg(&graft), &d.socket());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("all ok\n"), "{stdout}");

    // What the program left behind, seen through the Rust client.
    let mut c = d.client();
    assert_eq!(c.stat("/api.txt").expect("api.txt").size, 5);
    assert_eq!(c.stat("/big").expect("big").size, 64 << 10);
    assert!(c.stat("/d").is_err(), "the directory was removed");
    drop(c);
    d.stop();
}
