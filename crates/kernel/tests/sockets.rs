//! Kernel processes' sockets: two users' processes talk TCP and UDP over loopback, the errors are
//! the POSIX ones, and a process that exits leaves no socket, port or charge.

mod common;

use common::small_kernel;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};
use vino_kernel::account::{LimitsConfig, Resource};
use vino_kernel::{Credentials, Errno, LOOPBACK, NetStats, SocketWait};

const PATIENCE: SocketWait = SocketWait::For(Duration::from_secs(20));

#[test]
fn two_users_processes_talk_and_their_exits_leave_nothing() {
    let k = small_kernel(4096, LimitsConfig::default());
    assert_eq!(k.net_stats(), None, "no socket call yet, no stack");
    let server = k.spawn(Credentials::user(1000, 1000));
    let client = k.spawn(Credentials::user(2000, 2000));
    assert_eq!(server.tcp_listen(80, 1).unwrap_err().errno, Errno::Acces);
    let listener = server.tcp_listen(7100, 2).unwrap();
    assert_eq!(client.tcp_listen(7100, 1).unwrap_err().errno, Errno::AddrInUse);
    assert_eq!(
        client.socket_close(listener).unwrap_err().errno,
        Errno::BadF,
        "another process's socket is not there for it"
    );
    let at = SocketAddrV4::new(LOOPBACK, 7100);
    let conn = client.tcp_connect(at, PATIENCE).unwrap();
    let (accepted, _) = server.tcp_accept(listener, PATIENCE).unwrap();
    assert_eq!(client.socket_send(conn, b"ping", PATIENCE).unwrap(), 4);
    let mut buf = [0u8; 16];
    let n = server.socket_recv(accepted, &mut buf, PATIENCE).unwrap();
    assert_eq!(&buf[..n], b"ping");
    assert!(client.account().used(Resource::Sockets) > 0);
    // A datagram each way between the same two processes.
    let (dgram_server, dgram_client) = (server.udp_bind(7100).unwrap(), client.udp_bind(0).unwrap());
    client
        .socket_send_to(dgram_client, b"hello", SocketAddrV4::new(LOOPBACK, 7100), PATIENCE)
        .unwrap();
    let (n, from) = server.socket_recv_from(dgram_server, &mut buf, PATIENCE).unwrap();
    assert_eq!(&buf[..n], b"hello");
    server.socket_send_to(dgram_server, b"back", from, PATIENCE).unwrap();
    assert_eq!(client.socket_recv_from(dgram_client, &mut buf, PATIENCE).unwrap().0, 4);
    // The client exits without closing: the server reads the end of the stream.
    k.exit(client.pid());
    assert_eq!(server.socket_recv(accepted, &mut buf, PATIENCE).unwrap(), 0);
    k.exit(server.pid());
    let until = Instant::now() + Duration::from_secs(20);
    while k.net_stats().unwrap().stack_sockets > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(k.net_stats().unwrap(), NetStats::default());
    let users = k.accounts();
    for uid in [1000, 2000] {
        assert_eq!(users.user(uid).used(Resource::Sockets), 0, "uid {uid}");
    }
    // Nothing listens now: refused.
    let again = k.spawn(Credentials::user(2000, 2000));
    assert_eq!(again.tcp_connect(at, PATIENCE).unwrap_err().errno, Errno::ConnRefused);
}

/// Any user's process may control its own connections' congestion with a graft: the process's
/// `net.congestion` slot runs for the connections it makes and accepts, and for no one else's.
#[test]
fn a_process_grafts_congestion_control_for_its_own_connections() {
    let k = small_kernel(4096, LimitsConfig::default());
    let server = k.spawn(Credentials::user(1000, 1000));
    let client = k.spawn(Credentials::user(2000, 2000));
    let cubic = vino_sdk::build_example("cubic_cc", &vino_sdk::BuildOptions::default()).unwrap();
    client.graft_load("net.congestion", &cubic).unwrap();
    let listener = server.tcp_listen(7101, 2).unwrap();
    let conn = client.tcp_connect(SocketAddrV4::new(LOOPBACK, 7101), PATIENCE).unwrap();
    let (accepted, _) = server.tcp_accept(listener, PATIENCE).unwrap();
    let data: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let sender = std::thread::spawn({
        let client = client.clone();
        let data = data.clone();
        move || {
            let mut sent = 0;
            while sent < data.len() {
                sent += client.socket_send(conn, &data[sent..], PATIENCE).unwrap();
            }
            client.socket_close(conn).unwrap();
        }
    });
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = server.socket_recv(accepted, &mut buf, PATIENCE).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    sender.join().unwrap();
    assert!(got == data, "{} of {} bytes, in order", got.len(), data.len());
    let slots = client.graft_list();
    let slot = slots.iter().find(|s| s.point == "net.congestion").unwrap();
    let stats = slot.stats.as_ref().unwrap();
    // At least its meeting, the segment size and an ACK (loopback segments are large).
    assert!(stats.invocations >= 3, "{stats:?}");
    assert_eq!(stats.failures, 0, "{stats:?}");
    // The server's connection ran the built-in: its own slot is empty.
    let theirs = server.graft_list();
    assert!(
        theirs
            .iter()
            .find(|s| s.point == "net.congestion")
            .unwrap()
            .stats
            .is_none()
    );
}

/// `net.pick_packet`: the link's order is a privileged process's to set; each user's own
/// (`net.pick_packet/user`) is any of its processes' to bind, reaches no other user, stays
/// bound (charged to the user) after the process that bound it exits, and is given back when
/// unbound.
#[test]
fn the_links_packet_order_is_privileged_and_a_users_own_is_the_users() {
    let k = small_kernel(4096, LimitsConfig::default());
    let root = k.spawn(Credentials::root());
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(1001, 1001));
    let example = |name| vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).unwrap();
    let (small_first, port_priority) = (example("small_first"), example("port_priority"));
    assert_eq!(
        alice.graft_load("net.pick_packet", &small_first).unwrap_err().errno,
        Errno::Perm
    );
    root.graft_load("net.pick_packet", &small_first).unwrap();
    let users = k.accounts().user(1000);
    alice.graft_load("net.pick_packet/user", &port_priority).unwrap();
    assert_eq!(users.used(Resource::Grafts), 1, "charged to the user");
    assert_eq!(
        alice.graft_call("net.pick_packet/user", "set_port", &[22, 1]).unwrap(),
        0
    );
    assert!(
        bob.graft_call("net.pick_packet/user", "set_port", &[22, 1]).is_err(),
        "bob's slot is his own, and empty"
    );
    k.exit(alice.pid());
    let again = k.spawn(Credentials::user(1000, 1000));
    assert_eq!(
        again.graft_call("net.pick_packet/user", "set_port", &[80, 2]).unwrap(),
        0,
        "the user's order outlives the process that bound it"
    );
    again.graft_unload("net.pick_packet/user").unwrap();
    for r in [Resource::Grafts, Resource::GraftCode, Resource::GraftMemory] {
        assert_eq!(users.used(r), 0, "{r:?} given back");
    }
    root.graft_unload("net.pick_packet").unwrap();
}
