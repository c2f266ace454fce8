//! The wire protocol target: a daemon on a fresh in-memory kernel serves one connection whose
//! client says a proper Hello and then sends the input's bytes as they are (frames, or
//! anything). The seeds are real request sequences (see `seeds`), so mutations reach deep
//! into dispatch, not only into the decoder.
//!
//! Whatever the bytes, the daemon must answer or hang up without panicking, and once the
//! connection has ended the kernel must hold nothing for it: no process, no charge, no open
//! inode; the image must then unmount and check clean.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, mpsc};
use std::time::Duration;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_daemon::{Config, Daemon, Peer};
use vino_fs::fsck;
use vino_kernel::{Credentials, Kernel, OpenFlags, Resource};
use vino_proto::{Request, Response, VERSION};

/// Blocks of the in-memory disk (8 MiB).
const DISK_BLOCKS: u64 = 2048;

/// The users a fuzzed client may be (byte 0 of the input picks one): 1000 owns the files the
/// daemon starts with, 1001 owns none of them.
const USERS: [u32; 2] = [1000, 1001];

/// Runs one input (see the module documentation); panics if the daemon or kernel misbehaved.
pub fn run(data: &[u8]) {
    answers(data);
}

/// Runs one input and returns the daemon's answers, decoded (the Hello's first).
pub fn answers(data: &[u8]) -> Vec<Response> {
    crate::ignore_sigpipe();
    let (uid, bytes) = match data.split_first() {
        Some((b, rest)) => (USERS[(*b & 1) as usize], rest),
        None => (USERS[0], data),
    };
    let (daemon, dev) = boot();
    let answers = converse(&daemon, uid, bytes);
    check_released(daemon.kernel(), LASTING);
    assert_eq!(daemon.connections(), 0, "a connection outlived its client");
    daemon.kernel().shutdown().expect("unmount after the connection");
    // What lasts is let go when the kernel stops.
    check_released(daemon.kernel(), &[]);
    let report = fsck(&*dev, false).expect("fsck after the connection");
    assert!(report.is_clean(), "the image after the connection:\n{report}");
    decode_all(&answers)
}

/// The answers, decoded, up to the first that is not one.
fn decode_all(payloads: &[Vec<u8>]) -> Vec<Response> {
    payloads.iter().map_while(|p| vino_proto::decode(p).ok()).collect()
}

/// The frame of the Hello every input is sent after.
pub fn hello() -> Vec<u8> {
    vino_proto::encode(&Request::Hello {
        version: VERSION,
        client: "fuzz".into(),
        shm_len: 0,
    })
}

/// An input made of these requests, sent as user `uid_index` (0 or 1 of [`USERS`]).
pub fn input(uid_index: u8, requests: &[Request]) -> Vec<u8> {
    let mut out = vec![uid_index];
    for r in requests {
        out.extend(vino_proto::encode(r));
    }
    out
}

/// A fresh kernel on an in-memory disk, with a few files to find (user 1000's `/a`, `/d/f`
/// and a private `/p`; the root directory open to all), under a daemon without a socket, with
/// no thread of the kernel's own.
fn boot() -> (Arc<Daemon>, Arc<MemDevice>) {
    let dev = crate::small_disk(DISK_BLOCKS, 1);
    let config = Config {
        cache_frames: 64,
        ..Config::default()
    };
    let kconfig = crate::stepped(Daemon::kernel_config(&config).expect("the default configuration"));
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &kconfig).expect("boot");
    populate(&kernel);
    (Daemon::in_process(kernel, config).expect("daemon"), dev)
}

fn populate(kernel: &Arc<Kernel>) {
    let root = kernel.spawn(Credentials::root());
    root.chmod("/", 0o777).expect("chmod /");
    kernel.exit(root.pid());
    let owner = kernel.spawn(Credentials::user(USERS[0], USERS[0]));
    let write = |path: &str, mode: u16, bytes: &[u8]| {
        let flags = OpenFlags {
            mode,
            ..OpenFlags::create()
        };
        let fd = owner.open(path, flags).expect("create");
        owner.pwrite(fd, bytes, 0).expect("write");
        owner.close(fd).expect("close");
    };
    write("/a", 0o644, &[b'a'; 5000]);
    owner.mkdir("/d", 0o755).expect("mkdir");
    write("/d/f", 0o666, b"f");
    write("/p", 0o600, b"private");
    kernel.exit(owner.pid());
}

/// How long the client waits for each answer before it goes away (an `EventWait` with nothing
/// to wait for, say, would otherwise last as long as the input asks).
const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// One connection: Hello, then `bytes`. The client stays until it has an answer to every
/// whole frame it sent (or the daemon hangs up, or an answer is [`ANSWER_WAIT`] late), since a
/// client that leaves early has its pending loads abandoned; then it shuts its end, which ends
/// a frame left unfinished. Answers are read on another thread, so neither side blocks the
/// other. Returns the answers' payloads.
fn converse(daemon: &Arc<Daemon>, uid: u32, bytes: &[u8]) -> Vec<Vec<u8>> {
    let (mut client, server) = UnixStream::pair().expect("socketpair");
    let d = daemon.clone();
    let peer = Peer {
        pid: 1,
        uid,
        gid: uid,
        groups: Vec::new(),
    };
    let serving = std::thread::spawn(move || d.serve(server, peer));
    let mut incoming = client.try_clone().expect("clone the client socket");
    let (tx, rx) = mpsc::channel();
    let reading = std::thread::spawn(move || {
        let mut buf = Vec::new();
        while vino_proto::read_frame(&mut incoming, &mut buf, vino_proto::MAX_FRAME).is_ok() {
            if tx.send(std::mem::take(&mut buf)).is_err() {
                break;
            }
        }
    });
    // The daemon may hang up at any point (a bad frame): later writes fail, which is fine.
    let _ = client.write_all(&hello()).and_then(|_| client.write_all(bytes));
    let mut answers = Vec::new();
    while answers.len() < 1 + whole_frames(bytes) {
        match rx.recv_timeout(ANSWER_WAIT) {
            Ok(a) => answers.push(a),
            Err(_) => break,
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Write);
    serving.join().expect("the connection's thread panicked");
    drop(client);
    answers.extend(rx.iter());
    reading.join().expect("the reading thread panicked");
    answers
}

/// How many whole frames `bytes` holds, as the daemon would read them.
fn whole_frames(mut bytes: &[u8]) -> usize {
    let mut n = 0;
    while bytes.len() >= 4 {
        let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
        match bytes.get(4..).filter(|rest| rest.len() >= len) {
            Some(rest) => bytes = &rest[len..],
            None => break,
        }
        n += 1;
    }
    n
}

/// What a client may leave charged on purpose once it has gone: a directory's `dir.access`
/// graft stays bound, charged to the directory's owner, until unbound, the directory is removed
/// or the kernel stops.
const LASTING: &[Resource] = &[
    Resource::Bindings,
    Resource::Grafts,
    Resource::GraftMemory,
    Resource::GraftCode,
];

/// Nothing of the connection is left in the kernel but what `lasting` names.
fn check_released(kernel: &Kernel, lasting: &[Resource]) {
    assert!(kernel.processes().is_empty(), "a process outlived its connection");
    assert_eq!(kernel.referenced_inodes(), 0, "inodes still referenced");
    assert!(kernel.parked_files().is_empty(), "files still parked");
    let total = kernel.accounts().total();
    for r in Resource::ALL.into_iter().filter(|r| !lasting.contains(r)) {
        assert_eq!(total.used(r), 0, "{r:?} still charged after the connection ended");
    }
}
