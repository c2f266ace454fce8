//! Stream files through the socket: a codec bound to a file by its owner (`StreamBind`), the
//! file's bytes written and read back through it, its status, an encrypting codec's key given
//! by control calls (`StreamControl`), and the refusals: another user, a module that is no
//! codec, a file that is not empty.

mod common;

use common::{TestDaemon, graft, is_root, spawn_child};
use vino_client::{Client, ClientError, OpenFlags, errno};

const TEST: &str = "child_role";
const BOB: u32 = 1001;

/// Bytes an LZ4 codec shrinks: a few distinct lines, repeated.
fn body(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b"stream files, Small 1998\n"[i % 25] ^ (i / 4096) as u8)
        .collect()
}

fn write_file(c: &mut Client, path: &str, data: &[u8]) -> Result<(), ClientError> {
    let fd = c.open(path, OpenFlags::read_write())?;
    c.pwrite(fd, data, 0)?;
    let synced = c.fsync(fd);
    c.close(fd)?;
    synced
}

fn read_file(c: &mut Client, path: &str, len: usize) -> Vec<u8> {
    let fd = c.open(path, OpenFlags::read_only()).unwrap();
    let mut back = vec![0u8; len + 1];
    let n = c.pread(fd, &mut back, 0).unwrap();
    c.close(fd).unwrap();
    back.truncate(n);
    back
}

fn create_empty(c: &mut Client, path: &str) {
    let fd = c.open(path, OpenFlags::create()).unwrap();
    c.close(fd).unwrap();
}

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let result = match role.as_str() {
        "intruder" => role_intruder(),
        other => Err(format!("unknown role {other}")),
    };
    if let Err(why) = result {
        println!("FAILED: {why}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Another user may see that root's files are stream files, but neither bind nor key them.
fn role_intruder() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    let wasm = std::fs::read(std::env::var("LZ4").unwrap()).unwrap();
    let errno_of = |r: Result<(), ClientError>| r.err().map(|e| e.errno);
    let bind = errno_of(c.stream_bind("/empty", &wasm));
    let unbind = errno_of(c.stream_unbind("/lz4"));
    let key = errno_of(c.stream_set_key("/chacha", &[7; 32]));
    let eperm = Some(errno::EPERM);
    if (bind, unbind, key) != (eperm, eperm, eperm) {
        return Err(format!("bind {bind:?}, unbind {unbind:?}, key {key:?}: expected EPERM"));
    }
    match c.stream_status("/lz4") {
        Ok(Some(_)) => {}
        other => return Err(format!("status of /lz4: {other:?}")),
    }
    // Another user's stream files are not its to enumerate, nor the store its to collect.
    match (c.stream_files(), c.stream_collect()) {
        (Ok(files), Err(e)) if files.is_empty() && e.errno == errno::EPERM => Ok(()),
        other => Err(format!("stream files and collect: {other:?}")),
    }
}

#[test]
fn an_owner_binds_a_codec_and_keys_it_through_the_socket() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let (lz4, lz4_path) = graft("lz4_stream");
    let (chacha, _) = graft("chacha20poly1305_stream");

    // LZ4: bound to an empty file, its bytes written and read back through the codec.
    create_empty(&mut c, "/lz4");
    assert_eq!(c.stream_status("/lz4").unwrap(), None);
    c.stream_bind("/lz4", &lz4).unwrap();
    let data = body(200_000);
    write_file(&mut c, "/lz4", &data).unwrap();
    assert!(read_file(&mut c, "/lz4", data.len()) == data, "lz4 read back");
    let status = c.stream_status("/lz4").unwrap().expect("a stream file");
    assert_eq!(status.module, vino_kernel::module_name(&vino_kernel::module_id(&lz4)));
    assert!(status.loaded, "its codec ran, so it is loaded");
    // Only an empty file takes a codec; only a codec binds.
    create_empty(&mut c, "/plain");
    write_file(&mut c, "/plain", b"not empty").unwrap();
    assert_eq!(c.stream_bind("/plain", &lz4).unwrap_err().errno, errno::EINVAL);
    create_empty(&mut c, "/empty");
    let not_a_codec = wat::parse_str("(module)").unwrap();
    assert_eq!(c.stream_bind("/empty", &not_a_codec).unwrap_err().errno, errno::EINVAL);
    assert_eq!(c.stream_bind("/missing", &lz4).unwrap_err().errno, errno::ENOENT);
    // Unbound again, the file is a plain one.
    c.stream_bind("/empty", &lz4).unwrap();
    assert!(c.stream_status("/empty").unwrap().is_some());
    c.stream_unbind("/empty").unwrap();
    assert_eq!(c.stream_status("/empty").unwrap(), None);

    // ChaCha20-Poly1305: its key in four control calls, then written, synced and read back.
    create_empty(&mut c, "/chacha");
    c.stream_bind("/chacha", &chacha).unwrap();
    let key: [u8; 32] = std::array::from_fn(|i| i as u8 * 7 + 1);
    c.stream_set_key("/chacha", &key).unwrap();
    assert_eq!(
        c.stream_control("/chacha", "set_key", &[4, 0]).unwrap(),
        -1,
        "a word out of range is the codec's own answer"
    );
    assert_eq!(
        c.stream_control("/lz4", "no_such_control", &[]).unwrap_err().errno,
        errno::EINVAL
    );
    assert_eq!(
        c.stream_control("/plain", "set_key", &[0, 0]).unwrap_err().errno,
        errno::EINVAL,
        "a plain file has no codec to call"
    );
    let secret = body(100_000);
    write_file(&mut c, "/chacha", &secret).unwrap();
    assert!(read_file(&mut c, "/chacha", secret.len()) == secret, "chacha read back");

    // Which files depend on which module; the unbound module's store entry is kept while
    // a file names it, then collected.
    let files = c.stream_files().unwrap();
    let names: Vec<_> = files.iter().map(|f| (f.kind.as_str(), f.module.clone())).collect();
    assert_eq!(files.len(), 2, "{names:?}");
    assert!(files.iter().all(|f| f.kind == "regular" && f.loaded));
    assert_eq!(c.stream_collect().unwrap(), 0, "both modules are named");
    let (crc, _) = graft("crc32c_stream");
    c.stream_bind("/empty", &crc).unwrap();
    c.stream_unbind("/empty").unwrap();
    assert_eq!(c.stream_collect().unwrap(), 1, "the unbound module goes");
    assert!(read_file(&mut c, "/lz4", data.len()) == data, "the others stay");

    if !is_root() {
        eprintln!("skipped the other user: needs root");
        return;
    }
    let lz4_path = lz4_path.to_str().unwrap();
    let out = spawn_child(TEST, "intruder", &d.socket(), &[("LZ4", lz4_path)], Some(BOB))
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_module_over_the_limit_is_refused_before_it_is_sent() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let huge = vec![0u8; vino_proto::MAX_MODULE + 1];
    assert_eq!(c.stream_bind("/x", &huge).unwrap_err().errno, errno::E2BIG);
}
