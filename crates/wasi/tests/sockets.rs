//! Sockets from C: a server and its clients built with the SDK (socket, bind, listen, accept,
//! connect, poll, read, write, send, recv, shutdown) talk TCP over VINO's loopback as separate
//! VINO processes of other users; UDP; a socket the runner opens (`vino run --listen`); each
//! misuse's errno and the user's socket limit; a process killed while blocked in `accept`.
//! After each, nothing of the stack is left held.

mod common;

use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use vino_kernel::{Credentials, Kernel, LOOPBACK, SocketWait};
use vino_wasi::{Exit, Program, ProgramLimits, Setup, SocketProto, SocketSpec};

/// `tests/programs/net.c`, built once with the SDK.
fn net() -> &'static Program {
    static NET: OnceLock<Program> = OnceLock::new();
    NET.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/net.c");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("net.wasm");
        if let Err(e) = vino_sdk::build_program(&[src], &out, &Default::default()) {
            panic!("building net.c (needs Debian's wasi-libc and libclang-rt-dev-wasm32): {e}");
        }
        Program::compile(&std::fs::read(out).unwrap(), ProgramLimits::default()).unwrap()
    })
}

/// Runs `net ARGS...` as `uid` with `sockets` opened for it: exit, stdout, stderr.
fn run(k: &Arc<Kernel>, uid: u32, args: &[&str], sockets: Vec<SocketSpec>) -> (Exit, String, String) {
    run_with(k, uid, args, sockets, Vec::new())
}

/// [`run`], with `stdin` for its standard input.
fn run_with(
    k: &Arc<Kernel>,
    uid: u32,
    args: &[&str],
    sockets: Vec<SocketSpec>,
    stdin: Vec<u8>,
) -> (Exit, String, String) {
    let (stdio, out, err) = common::stdio(stdin);
    let mut argv = vec![b"net".to_vec()];
    argv.extend(args.iter().map(|a| a.as_bytes().to_vec()));
    let setup = Setup {
        sockets,
        ..Setup::new(argv, Vec::new())
    };
    let p = net();
    let exit = p
        .run(k, Credentials::user(uid, uid), setup, stdio, &p.kill_switch())
        .unwrap();
    (exit, out.text(), err.text())
}

/// Waits until the stack holds nothing: every socket closed, every closing connection done.
fn stack_empty(k: &Kernel) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let stats = k.net_stats().unwrap_or_default();
        if stats == Default::default() {
            return;
        }
        assert!(Instant::now() < deadline, "the stack still holds {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_c_server_serves_c_clients_of_other_users_at_once_over_loopback() {
    let (_dev, k) = common::boot();
    let server = {
        let k = k.clone();
        std::thread::spawn(move || run(&k, 1000, &["server", "8080", "3"], Vec::new()))
    };
    let clients: Vec<_> = (0..3)
        .map(|i| {
            let k = k.clone();
            std::thread::spawn(move || {
                let text = format!("hello from client {i}\n").repeat(200 * (i + 1));
                let (exit, out, err) = run(&k, 2000 + i as u32, &["client", "8080", &text], Vec::new());
                assert_eq!(exit, Exit::Code(0), "client {i}\n{out}\n{err}");
                let reply = out.lines().find_map(|l| l.strip_prefix("reply ")).map(str::to_owned);
                let want = format!("HELLO FROM CLIENT {i}");
                assert!(reply.is_some_and(|r| r.starts_with(&want)), "client {i}: {out}");
                assert_eq!(
                    out.matches(&want).count(),
                    200 * (i + 1),
                    "client {i}: every line came back"
                );
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let (exit, out, err) = server.join().unwrap();
    assert_eq!(exit, Exit::Code(0), "server\n{out}\n{err}");
    assert!(out.contains("served 3"), "{out}");
    stack_empty(&k);
}

#[test]
fn udp_datagrams_and_each_misuse_has_its_errno() {
    let (_dev, k) = common::boot();
    let (exit, out, err) = run(&k, 1000, &["udp"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{out}\n{err}");
    let (exit, out, err) = run(&k, 1000, &["errors"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{out}\n{err}");
    for line in [
        "ok no IPv6: EAFNOSUPPORT",
        "ok port 80 needs root: EACCES",
        "ok 7003 again: EADDRINUSE",
        "ok nobody on 7004: ECONNREFUSED",
        "ok poll: connected",
        "ok poll: readable",
        "ok listeners until ENOBUFS",
        "ok listen again after closing",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    stack_empty(&k);
}

#[test]
fn a_program_accepts_on_the_socket_its_runner_opened() {
    let (_dev, k) = common::boot();
    let spec = SocketSpec::parse("tcp:9090", true).unwrap();
    assert_eq!(
        spec,
        SocketSpec::Listen {
            proto: SocketProto::Tcp,
            port: 9090
        }
    );
    let server = {
        let k = k.clone();
        std::thread::spawn(move || run(&k, 1000, &["preopened"], vec![spec]))
    };
    // A kernel process of another user talks to it.
    let peer = k.spawn(Credentials::user(2000, 2000));
    let to = SocketAddrV4::new(LOOPBACK, 9090);
    let deadline = Instant::now() + Duration::from_secs(10);
    let conn = loop {
        match peer.tcp_connect(to, SocketWait::For(Duration::from_secs(5))) {
            Ok(c) => break c,
            // Refused until the program has started.
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("connecting: {e:?}"),
        }
    };
    let wait = SocketWait::For(Duration::from_secs(10));
    assert_eq!(peer.socket_send(conn, b"echo me", wait).unwrap(), 7);
    peer.socket_shutdown_write(conn).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let n = peer.socket_recv(conn, &mut buf, wait).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"echo me");
    let (exit, out, err) = server.join().unwrap();
    assert_eq!(exit, Exit::Code(0), "{out}\n{err}");
    peer.socket_close(conn).unwrap();
    k.exit(peer.pid());
    // A port another holds cannot be given: the run is refused, with the reason.
    let holder = k.spawn(Credentials::user(3000, 3000));
    let held = holder.tcp_listen(9191, 1).unwrap();
    let (stdio, _, _) = common::stdio(Vec::new());
    let setup = Setup {
        sockets: vec![SocketSpec::parse("tcp:9191", true).unwrap()],
        ..Setup::new(vec![b"net".to_vec(), b"preopened".to_vec()], Vec::new())
    };
    let p = net();
    let refused = p
        .run(&k, Credentials::user(1000, 1000), setup, stdio, &p.kill_switch())
        .unwrap_err();
    assert_eq!(refused.errno(), 98, "{refused}");
    holder.socket_close(held).unwrap();
    k.exit(holder.pid());
    stack_empty(&k);
}

#[test]
fn a_process_killed_while_it_waits_in_accept_leaves_nothing_behind() {
    let (_dev, k) = common::boot();
    let p = net();
    let kill = p.kill_switch();
    let runner = {
        let (k, kill) = (k.clone(), kill.clone());
        std::thread::spawn(move || {
            let (stdio, _, _) = common::stdio(Vec::new());
            let setup = Setup::new(vec![b"net".to_vec(), b"block".to_vec(), b"7500".to_vec()], Vec::new());
            p.run(&k, Credentials::user(1000, 1000), setup, stdio, &kill).unwrap()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.net_stats().is_none_or(|s| s.listeners == 0) {
        assert!(Instant::now() < deadline, "the program never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill.kill();
    assert_eq!(runner.join().unwrap(), Exit::Killed);
    stack_empty(&k);
}

/// A C program pushes a stream graft (ChaCha20-Poly1305) onto its connection after a line in
/// the clear and gives it its key through `net.stream/<fd>/0`; a kernel process of another
/// user on the other end does the same, and the sealed lines go both ways.
#[test]
fn a_c_program_seals_its_connection_with_a_stream_layer() {
    let (_dev, k) = common::boot();
    let chacha = vino_sdk::build_example("chacha20poly1305_stream", &Default::default()).unwrap();
    let server = k.spawn(Credentials::user(1000, 1000));
    let listener = server.tcp_listen(7400, 1).unwrap();
    let program = std::thread::spawn({
        let (k, chacha) = (k.clone(), chacha.clone());
        move || run_with(&k, 2000, &["sealed", "7400"], Vec::new(), chacha)
    });
    let wait = SocketWait::For(Duration::from_secs(20));
    let (conn, _) = server.tcp_accept(listener, wait).unwrap();
    let mut buf = [0u8; 64];
    let mut have = 0;
    while have < 7 {
        have += server.socket_recv(conn, &mut buf[have..7], wait).unwrap();
    }
    assert_eq!(&buf[..7], b"LAYERS\n");
    let layer = server.socket_push(conn, &chacha).unwrap();
    for word in 0..4 {
        server
            .graft_call(&layer, "set_key", &[word, 0x0123_4567_89ab_cdef ^ word])
            .unwrap();
    }
    let line = b"sealed hello from C";
    have = 0;
    while have < line.len() {
        have += server.socket_recv(conn, &mut buf[have..line.len()], wait).unwrap();
    }
    assert_eq!(&buf[..have], line);
    assert_eq!(server.socket_send(conn, b"sealed reply", wait).unwrap(), 12);
    let (exit, out, err) = program.join().unwrap();
    assert_eq!(exit, Exit::Code(0), "{out}{err}");
    assert!(out.ends_with("ok vino_socket_pop\nsealed sealed reply\n"), "{out}");
    server.socket_close(conn).unwrap();
    k.exit(server.pid());
    stack_empty(&k);
}
