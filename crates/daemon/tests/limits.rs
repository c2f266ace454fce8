//! What a connection may hold: a request that has begun must arrive within `frame_timeout` (an
//! idle connection between requests is fine), the Hello within 10 s, and connections are limited per uid, with a
//! reserve that only root may use.
//!
//! The tests with other users run them as child processes of this binary (`child_role`) that
//! take a user's credentials before they connect; they are skipped unless the tests run as root.

mod common;

use common::{TestDaemon, answer, is_root, raw, spawn_child, wait_line};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use vino_client::{Client, OpenFlags};
use vino_daemon::Config;
use vino_proto::{Request, Response};

const TEST: &str = "child_role";

fn daemon(tune: impl FnOnce(&mut Config)) -> TestDaemon {
    TestDaemon::with(tune)
}

/// How long until the daemon closes `s` (at most `limit`; `None` if it did not).
fn closes_within(s: &mut UnixStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Some(start.elapsed()),
        }
    }
}

#[test]
fn a_hello_larger_than_a_hello_can_be_is_refused_at_once() {
    let d = daemon(|_| {});
    let mut s = UnixStream::connect(d.socket()).unwrap();
    s.write_all(&(16u32 << 20).to_le_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match answer(&mut s) {
        Some(Response::Error(e)) => assert_eq!(e.errno, vino_proto::errno::EMSGSIZE, "{}", e.message),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stalled_or_dribbled_frame_ends_its_connection_and_an_idle_one_lives() {
    let timeout = Duration::from_millis(600);
    let d = daemon(|c| c.frame_timeout = timeout);
    let socket = d.socket();
    let mut good = Client::connect(&socket).unwrap();
    let fd = good.open("/good", OpenFlags::create()).unwrap();

    // A header announcing 1 MiB and 3 bytes of it, then nothing.
    let mut stalled = raw(&socket);
    stalled.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
    stalled.write_all(&[1, 2, 3]).unwrap();

    // A frame that keeps coming, a byte at a time, never fast enough to finish.
    let mut dribbled = raw(&socket);
    let dribbler = {
        let mut s = dribbled.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = s.write_all(&(1u32 << 20).to_le_bytes());
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(&[0]).is_err() {
                    return true;
                }
            }
            false
        })
    };

    // A Hello dribbled a byte every 2 s (each byte well within a read's patience), never whole.
    let mut slow_hello = UnixStream::connect(&socket).unwrap();
    let hello_dribbler = {
        let mut s = slow_hello.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = s.write_all(&4000u32.to_le_bytes());
            for _ in 0..15 {
                std::thread::sleep(Duration::from_secs(2));
                if s.write_all(&[0]).is_err() {
                    return true;
                }
            }
            false
        })
    };

    // A connection that says nothing for longer than the timeout between requests.
    let mut idle = raw(&socket);

    let limit = timeout + Duration::from_secs(5);
    let took = closes_within(&mut stalled, limit).expect("a stalled frame ends its connection");
    assert!(took >= timeout / 2, "closed after {took:?}, before its time");
    closes_within(&mut dribbled, limit).expect("a dribbled frame ends its connection");
    assert!(dribbler.join().unwrap(), "the dribbler was cut off");

    // The good client saw nothing of it.
    for i in 0..100u64 {
        good.pwrite(fd, &i.to_le_bytes(), 0).unwrap();
    }
    let mut buf = [0u8; 8];
    good.pread(fd, &mut buf, 0).unwrap();
    assert_eq!(u64::from_le_bytes(buf), 99);

    // The idle connection lives, and a request whose bytes arrive in pieces within the time is
    // served.
    std::thread::sleep(timeout);
    let frame = vino_proto::encode(&Request::Null);
    idle.write_all(&frame[..2]).unwrap();
    std::thread::sleep(timeout / 4);
    idle.write_all(&frame[2..]).unwrap();
    assert!(
        matches!(answer(&mut idle), Some(Response::Ok)),
        "the idle connection was served"
    );
    drop((idle, good));

    // The Hello has 10 s, in all.
    let took = closes_within(&mut slow_hello, Duration::from_secs(20)).expect("a dribbled Hello ends");
    assert!(took >= Duration::from_secs(5), "closed after {took:?}, before its time");
    assert!(hello_dribbler.join().unwrap(), "the Hello dribbler was cut off");
    d.wait_processes(0);
}

// ---- connections per user ----------------------------------------------------------------------

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

/// Whether the daemon takes a connection: `Ok` if it answers Hello, else its error message.
fn probe(socket: &Path) -> Result<UnixStream, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Request::Hello {
        version: vino_proto::VERSION,
        client: "probe".into(),
        shm_len: 0,
    };
    // A refused connection may be closed already; its answer is still there to read.
    let _ = vino_proto::write_frame(&mut s, &hello);
    match answer(&mut s) {
        Some(Response::Hello { .. }) => Ok(s),
        Some(Response::Error(e)) if e.errno == vino_proto::errno::EUSERS => Err(e.message),
        other => panic!("neither welcome nor EUSERS: {other:?}"),
    }
}

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let socket = std::path::PathBuf::from(std::env::var("VINO_SOCKET").unwrap());
    // "hold": takes VINO_TEST_HOLD connections (waiting for places freed by others' ends), then
    // says whether one more is refused, and holds them until killed.
    assert_eq!(role, "hold");
    let n: usize = std::env::var("VINO_TEST_HOLD").unwrap().parse().unwrap();
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < n {
        match probe(&socket) {
            Ok(s) => held.push(s),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(why) => {
                println!("FAILED: connection {} refused: {why}", held.len());
                std::process::exit(1);
            }
        }
    }
    match probe(&socket) {
        Ok(_) => println!("ACCEPTED"),
        Err(why) => println!("REFUSED: {why}"),
    }
    println!("HELD");
    // Until killed, or orphaned (a test that failed), a minute at most.
    let parent = nix::unistd::getppid();
    let until = Instant::now() + Duration::from_secs(60);
    while nix::unistd::getppid() == parent && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::process::exit(0);
}

/// A child holding connections, killed when dropped (a failing test included).
struct Holder(std::process::Child);

impl Holder {
    /// Kills the child and waits for it (its connections close).
    fn end(self) {}
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child holding `n` connections as `uid`; returns it and what became of one more.
fn hold(d: &TestDaemon, uid: u32, n: usize) -> (Holder, String) {
    let n = n.to_string();
    let mut child = Holder(spawn_child(
        TEST,
        "hold",
        &d.socket(),
        &[("VINO_TEST_HOLD", &n)],
        Some(uid),
    ));
    let lines = wait_line(&mut child.0, "HELD");
    let extra = lines
        .iter()
        .find(|l| l.starts_with("ACCEPTED") || l.starts_with("REFUSED"))
        .unwrap_or_else(|| panic!("no verdict: {lines:?}"))
        .clone();
    (child, extra)
}

#[test]
fn each_user_has_its_own_limit_and_root_a_reserve() {
    if !is_root() {
        eprintln!("skipped: needs root to run children as other users");
        return;
    }
    let d = daemon(|c| {
        c.max_connections = 7;
        c.root_reserved_connections = 2;
        c.max_connections_per_user = 3;
    });
    let socket = d.socket();

    // Alice fills her own limit.
    let (alice, extra) = hold(&d, ALICE, 3);
    assert_eq!(extra, format!("REFUSED: too many connections for uid {ALICE} (3)"));

    // Bob still connects, up to the users' share (5 of 7).
    let (bob, extra) = hold(&d, BOB, 2);
    assert_eq!(
        extra,
        "REFUSED: too many connections for users other than root (5; 2 kept for root)"
    );

    // Root has the reserve, and no more.
    let mut root = vec![Client::connect(&socket).unwrap(), Client::connect(&socket).unwrap()];
    for c in &mut root {
        c.null().unwrap();
    }
    assert_eq!(probe(&socket).unwrap_err(), "too many connections (7)");
    drop(root);

    // Once Alice's connections close, she connects again (and fills her limit again).
    alice.end();
    let (again, extra) = hold(&d, ALICE, 3);
    assert_eq!(extra, format!("REFUSED: too many connections for uid {ALICE} (3)"));
    again.end();
    bob.end();
    d.wait_processes(0);
    // Every place is given back: root and the users fill them all again.
    let (alice, _) = hold(&d, ALICE, 3);
    let (bob, extra) = hold(&d, BOB, 2);
    assert!(
        extra.starts_with("REFUSED: too many connections for users other than root"),
        "{extra}"
    );
    let root = [probe(&socket).unwrap(), probe(&socket).unwrap()];
    assert_eq!(probe(&socket).unwrap_err(), "too many connections (7)");
    drop(root);
    alice.end();
    bob.end();
    d.wait_processes(0);
}
