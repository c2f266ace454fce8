//! `vino stream` as a user runs it, on a mounted image: a codec bound to a file of the mount by
//! its host path, its status (text and JSON), a key, a control call, the errors on stderr; and
//! the mount's `user.vino.stream` attribute, which reports a file's codec and binds a stored one
//! to another file with an ordinary setxattr.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn vino(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(args)
        .output()
        .expect("vino runs")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn failed(o: &Output) -> String {
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mounted(at: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().any(|l| l.split(' ').nth(4) == Some(at.to_str().unwrap()))
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

const XATTR: &str = "user.vino.stream";

fn get_stream_xattr(p: &Path) -> Result<String, i32> {
    let name = CString::new(XATTR).unwrap();
    let mut buf = [0u8; 128];
    // SAFETY: both names are NUL-terminated and `buf` is writable for its length.
    let n = unsafe { libc::getxattr(c_path(p).as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    Ok(String::from_utf8(buf[..n as usize].to_vec()).unwrap())
}

fn set_stream_xattr(p: &Path, value: Option<&str>) -> Result<(), i32> {
    let name = CString::new(XATTR).unwrap();
    let path = c_path(p);
    // SAFETY: both names are NUL-terminated and `value` is readable for its length.
    let r = unsafe {
        match value {
            Some(v) => libc::setxattr(path.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0),
            None => libc::removexattr(path.as_ptr(), name.as_ptr()),
        }
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    Ok(())
}

fn sigterm(child: &mut Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn stream_commands_and_the_mounts_attribute_bind_codecs() {
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        panic!("this test needs root and /dev/fuse (FUSE mounts are part of the tests)");
    }
    let dir = tempfile::tempdir().unwrap();
    let (image, socket, mnt) = (
        dir.path().join("disk.img"),
        dir.path().join("s.sock"),
        dir.path().join("mnt"),
    );
    std::fs::create_dir(&mnt).unwrap();
    let module = |name: &str| {
        let path = dir.path().join(format!("{name}.wasm"));
        let wasm = vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).unwrap();
        std::fs::write(&path, wasm).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (lz4, chacha) = (module("lz4_stream"), module("chacha20poly1305_stream"));
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(["mount", image.to_str().unwrap(), mnt.to_str().unwrap(), "--socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !mounted(&mnt) {
        assert!(Instant::now() < until, "the mount did not come");
        std::thread::sleep(Duration::from_millis(20));
    }
    let on_mount = |name: &str| {
        let p = mnt.join(name);
        std::fs::write(&p, b"").unwrap();
        p
    };
    let (a, b, c) = (on_mount("a"), on_mount("b"), on_mount("c"));
    let s = |p: &Path| p.to_str().unwrap().to_owned();

    // Bound by the host path of a file on the mount (the mount names its daemon): quiet.
    assert_eq!(ok(&vino(&["stream", "bind", &s(&a), &lz4])), "");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 & 0x3f).collect();
    let mut f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
    std::io::Write::write_all(&mut f, &data).unwrap();
    // Synced: written back through the codec, which is loaded since.
    f.sync_all().unwrap();
    drop(f);
    assert!(std::fs::read(&a).unwrap() == data, "read back");
    let status: serde_json::Value = serde_json::from_str(&ok(&vino(&["stream", "status", &s(&a), "--json"]))).unwrap();
    let hash = status["module"].as_str().unwrap().to_owned();
    assert_eq!(hash.len(), 64, "{status}");
    assert_eq!(status["loaded"], true, "{status}");
    let text = ok(&vino(&["stream", "status", &s(&a)]));
    assert!(text.contains(&hash) && text.contains("(loaded)"), "{text}");
    assert!(ok(&vino(&["stream", "status", &s(&b)])).contains("no stream codec"));
    assert_eq!(ok(&vino(&["stream", "status", &s(&b), "--json"])).trim(), "null");

    // The attribute: the codec's hash; set on another empty file, it binds the same codec.
    assert_eq!(get_stream_xattr(&a), Ok(hash.clone()));
    assert_eq!(get_stream_xattr(&b), Err(libc::ENODATA));
    set_stream_xattr(&b, Some(&format!("{hash}\n"))).unwrap();
    assert_eq!(get_stream_xattr(&b), Ok(hash.clone()));
    std::fs::write(&b, &data).unwrap();
    assert!(std::fs::read(&b).unwrap() == data, "the codec bound by its hash serves");
    assert_eq!(set_stream_xattr(&c, Some("not a hash")), Err(libc::EINVAL));
    assert_eq!(
        set_stream_xattr(&c, Some(&"0".repeat(64))),
        Err(libc::ENOENT),
        "not stored"
    );
    set_stream_xattr(&c, Some(&hash)).unwrap();
    set_stream_xattr(&c, None).unwrap();
    assert_eq!(get_stream_xattr(&c), Err(libc::ENODATA), "unbound");

    // A key, and a control call's answer; a bad key or a file with data refused on stderr.
    ok(&vino(&["stream", "bind", &s(&c), &chacha]));
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    assert_eq!(ok(&vino(&["stream", "key", &s(&c), key])), "");
    assert_eq!(ok(&vino(&["stream", "ctl", &s(&c), "set_key", "4", "-1"])).trim(), "-1");
    std::fs::write(&c, b"secret").unwrap();
    assert_eq!(std::fs::read(&c).unwrap(), b"secret");
    assert!(failed(&vino(&["stream", "key", &s(&c), "abc"])).contains("64 hex digits"));
    assert!(failed(&vino(&["stream", "bind", &s(&a), &chacha])).contains("binding"));
    // Unbound by its path in the file system (the socket named), while it is empty only.
    let sock = socket.to_str().unwrap();
    on_mount("d");
    ok(&vino(&["stream", "bind", "/d", &lz4, "--socket", sock]));
    assert_eq!(ok(&vino(&["stream", "unbind", "/d", "--socket", sock])), "");
    assert!(ok(&vino(&["stream", "status", "/d", "--socket", sock])).contains("no stream codec"));
    assert!(failed(&vino(&["stream", "unbind", "/c", "--socket", sock])).contains("holds data"));

    sigterm(&mut daemon);
    let out = daemon.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
