//! The C library as a C program uses it: `hello.c` and `tests/c/api.c` compiled with the system
//! `cc` against `vino.h` and `libvino.so`, run as real processes against a daemon.

mod common;

use common::{TestDaemon, build_example, build_graft, compile_c, crate_dir, run_ok};
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
    let codec = build_example(d.dir.path(), "chacha20poly1305_stream");

    let out = run_ok(Command::new(&exe).arg(&graft).arg(&codec), &d.socket());
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

/// An integer as C or Rust source writes it: `0x40`, `-100`, `(-100)`, `1`.
fn parse_int(text: &str) -> Option<i64> {
    let t = text.trim().trim_start_matches('(').trim_end_matches(')').trim();
    let (neg, t) = t.strip_prefix('-').map_or((false, t), |rest| (true, rest));
    let v = match t.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None => t.parse().ok()?,
    };
    Some(if neg { -v } else { v })
}

/// The functions `vino.h` declares and the Rust side exports are the same set, and every
/// `VINO_*` constant both define has the same value in both: a call added on one side only, or
/// a flag renumbered on one side only, fails here before a C program misbehaves.
#[test]
fn the_header_and_the_library_agree_on_functions_and_constants() {
    let header = std::fs::read_to_string(crate_dir().join("include/vino.h")).expect("vino.h");
    let mut rust = String::new();
    for entry in std::fs::read_dir(crate_dir().join("src")).expect("src") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            rust.push_str(&std::fs::read_to_string(&path).expect("a source file"));
        }
    }
    // Declarations: `... vino_name(` at the start of a line's declaration, comments left out.
    let mut declared = std::collections::BTreeSet::new();
    for line in header.lines() {
        let code = line.split("/*").next().unwrap_or_default();
        if code.trim_start().starts_with('#') {
            continue;
        }
        if let Some(open) = code.find('(') {
            let before = &code[..open];
            if let Some(name) = before.split(|c: char| !c.is_alphanumeric() && c != '_').next_back()
                && name.starts_with("vino_")
            {
                declared.insert(name.to_string());
            }
        }
    }
    let exported: std::collections::BTreeSet<String> = rust
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub unsafe extern \"C\" fn "))
        .map(|rest| rest.split('(').next().expect("a name").to_string())
        .collect();
    assert!(declared.len() > 40, "too few declarations found: {declared:?}");
    assert_eq!(declared, exported, "vino.h and the library's exports differ");

    let defines: std::collections::BTreeMap<&str, i64> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|rest| {
            let (name, value) = rest.split_once(char::is_whitespace)?;
            let value = value.split("/*").next()?;
            Some((name, parse_int(value)?))
        })
        .collect();
    let mut compared = 0;
    for line in rust.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const VINO_") else {
            continue;
        };
        let (name, value) = rest.split_once(':').expect("a typed constant");
        let name = format!("VINO_{name}");
        let value = parse_int(value.split('=').nth(1).expect("a value").trim_end_matches(';')).expect("an integer");
        match defines.get(name.as_str()) {
            Some(&v) => assert_eq!(v, value, "{name}: {v} in vino.h, {value} in the library"),
            None if name == "VINO_O_ALL" => {}
            None => panic!("{name} is not in vino.h"),
        }
        compared += 1;
    }
    assert!(compared >= 20, "only {compared} constants compared");
}
