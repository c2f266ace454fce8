//! VINO processes talking TCP over the loopback link: whole streams, ports that belong to a user,
//! sockets charged to their owner, and nothing left when a process goes.

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vino_account::{Accounts, LimitsConfig, Resource, Table};
use vino_net::{LOOPBACK, Net, NetConfig, NetError, NetStats, Owner, Wait};

const PATIENCE: Wait = Wait::For(Duration::from_secs(20));

fn owner(accounts: &Accounts, pid: u64, uid: u32) -> Owner {
    Owner {
        pid,
        uid,
        account: Some(accounts.process(uid, format!("pid {pid}"))),
        congestion: None,
    }
}

fn at(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(LOOPBACK, port)
}

/// Waits (a bounded while) until the stack holds nothing: every closing connection has ended.
fn settled(net: &Net) -> NetStats {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let s = net.stats();
        if s.stack_sockets == 0 || Instant::now() > until {
            return s;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn pattern(i: usize) -> u8 {
    (i * 7 + i / 251) as u8
}

#[test]
fn two_users_processes_exchange_a_stream_byte_for_byte_and_leave_nothing() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Arc::new(Net::new(NetConfig::default()));
    let server = owner(&accounts, 1, 1000);
    let client = owner(&accounts, 2, 1001);
    let listener = net.tcp_listen(&server, 7000, 4).unwrap();
    // The server echoes everything back until the client closes its side.
    let echo = thread::spawn({
        let (net, server) = (net.clone(), server.clone());
        move || {
            let (conn, peer) = net.accept(&server, listener, PATIENCE).unwrap();
            assert_eq!(*peer.ip(), LOOPBACK);
            let mut buf = vec![0u8; 10_000];
            let mut echoed = 0;
            loop {
                let n = net.recv(&server, conn, &mut buf, PATIENCE).unwrap();
                if n == 0 {
                    break;
                }
                let mut off = 0;
                while off < n {
                    off += net.send(&server, conn, &buf[off..n], PATIENCE).unwrap();
                }
                echoed += n;
            }
            net.close(&server, conn).unwrap();
            echoed
        }
    });
    let conn = net.tcp_connect(&client, at(7000), PATIENCE).unwrap();
    let (local, remote) = net.endpoints(&client, conn).unwrap();
    assert_eq!(remote, at(7000));
    assert!(local.port() >= vino_net::ports::EPHEMERAL_FIRST);
    let total = 1 << 20;
    let data: Vec<u8> = (0..total).map(pattern).collect();
    let reader = thread::spawn({
        let (net, client) = (net.clone(), client.clone());
        move || net.recv_to_end(&client, conn, PATIENCE).unwrap()
    });
    let mut off = 0;
    while off < total {
        off += net
            .send(&client, conn, &data[off..(off + 30_000).min(total)], PATIENCE)
            .unwrap();
    }
    net.shutdown_write(&client, conn).unwrap();
    assert_eq!(echo.join().unwrap(), total);
    let back = reader.join().unwrap();
    assert!(back == data, "the stream came back changed ({} bytes)", back.len());
    net.close(&client, conn).unwrap();
    net.close(&server, listener).unwrap();
    let s = settled(&net);
    assert_eq!(s, NetStats::default(), "the stack holds nothing afterwards");
    for uid in [1000, 1001] {
        let user = accounts.user(uid);
        assert_eq!(user.used(Resource::Sockets), 0, "uid {uid}");
        assert_eq!(user.used(Resource::SocketBytes), 0, "uid {uid}");
    }
}

#[test]
fn a_port_is_one_users_and_the_low_ones_need_privilege() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Net::new(NetConfig::default());
    let alice = owner(&accounts, 1, 1000);
    let bob = owner(&accounts, 2, 1001);
    let root = owner(&accounts, 3, 0);
    assert_eq!(net.tcp_listen(&alice, 80, 1), Err(NetError::Privileged(80)));
    assert_eq!(NetError::Privileged(80).errno(), 13);
    let web = net.tcp_listen(&root, 80, 1).unwrap();
    let mine = net.tcp_listen(&alice, 8080, 1).unwrap();
    assert_eq!(net.tcp_listen(&bob, 8080, 1), Err(NetError::AddrInUse(8080)));
    // Another's socket is as good as absent.
    assert_eq!(net.close(&bob, mine), Err(NetError::BadSocket));
    assert_eq!(net.accept(&bob, mine, Wait::No), Err(NetError::BadSocket));
    assert_eq!(net.accept(&alice, mine, Wait::No), Err(NetError::WouldBlock));
    net.close(&alice, mine).unwrap();
    let theirs = net.tcp_listen(&bob, 8080, 1).unwrap();
    net.close(&bob, theirs).unwrap();
    net.close(&root, web).unwrap();
    assert_eq!(settled(&net), NetStats::default());
}

#[test]
fn nothing_listening_refuses_and_the_socket_goes() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Net::new(NetConfig::default());
    let client = owner(&accounts, 2, 1001);
    assert_eq!(net.tcp_connect(&client, at(7001), PATIENCE), Err(NetError::Refused));
    assert_eq!(settled(&net), NetStats::default());
    assert_eq!(accounts.user(1001).used(Resource::Sockets), 0);
}

#[test]
fn a_listener_accepts_more_connections_than_its_backlog_as_it_refills() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Arc::new(Net::new(NetConfig::default()));
    let server = owner(&accounts, 1, 1000);
    let listener = net.tcp_listen(&server, 7002, 2).unwrap();
    let clients: Vec<_> = (0..6u64)
        .map(|i| {
            let net = net.clone();
            let client = owner(&accounts, 10 + i, 1001);
            thread::spawn(move || {
                // Two may wait at once; a connection that finds the pool taken is refused,
                // and tries again, as a client of a full backlog would.
                let conn = loop {
                    match net.tcp_connect(&client, at(7002), PATIENCE) {
                        Ok(c) => break c,
                        Err(NetError::Refused) => thread::sleep(Duration::from_millis(2)),
                        Err(e) => panic!("connect: {e}"),
                    }
                };
                net.send(&client, conn, &[i as u8], PATIENCE).unwrap();
                let mut b = [0u8; 1];
                assert_eq!(net.recv(&client, conn, &mut b, PATIENCE).unwrap(), 1);
                assert_eq!(b[0], i as u8 + 100);
                net.close(&client, conn).unwrap();
            })
        })
        .collect();
    for _ in 0..6 {
        let (conn, _) = net.accept(&server, listener, PATIENCE).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(net.recv(&server, conn, &mut b, PATIENCE).unwrap(), 1);
        net.send(&server, conn, &[b[0] + 100], PATIENCE).unwrap();
        net.close(&server, conn).unwrap();
    }
    for c in clients {
        c.join().unwrap();
    }
    net.close(&server, listener).unwrap();
    assert_eq!(settled(&net), NetStats::default());
}

#[test]
fn sockets_are_charged_to_their_owner_and_refused_past_its_limit() {
    let limits = LimitsConfig {
        user: Table::UNLIMITED.with(Resource::Sockets, 3),
        ..LimitsConfig::unlimited()
    };
    let accounts = Accounts::new(limits);
    let net = Net::new(NetConfig::default());
    let alice = owner(&accounts, 1, 1000);
    // A pool of four would pass the limit: refused whole, the port given back.
    let too_many = net.tcp_listen(&alice, 7003, 4).unwrap_err();
    assert!(matches!(too_many, NetError::Limit(_)), "{too_many}");
    assert_eq!(too_many.errno(), 105, "ENOBUFS");
    assert_eq!(accounts.user(1000).used(Resource::Sockets), 0);
    let listener = net.tcp_listen(&alice, 7003, 2).unwrap();
    assert_eq!(accounts.user(1000).used(Resource::Sockets), 2);
    assert_eq!(
        accounts.user(1000).used(Resource::SocketBytes),
        2 * 2 * NetConfig::default().buffer_bytes as u64
    );
    let one = net.tcp_connect(&alice, at(7003), PATIENCE).unwrap();
    assert!(matches!(
        net.tcp_connect(&alice, at(7003), PATIENCE),
        Err(NetError::Limit(_))
    ));
    // Another user's limit is their own.
    let bob = owner(&accounts, 2, 1001);
    let theirs = net.tcp_connect(&bob, at(7003), PATIENCE).unwrap();
    net.close(&bob, theirs).unwrap();
    net.close(&alice, one).unwrap();
    net.close(&alice, listener).unwrap();
    assert_eq!(settled(&net), NetStats::default());
    assert_eq!(accounts.user(1000).used(Resource::Sockets), 0);
}

#[test]
fn a_process_that_goes_leaves_no_socket_port_or_charge() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Net::new(NetConfig::default());
    let server = owner(&accounts, 1, 1000);
    let client = owner(&accounts, 2, 1001);
    let listener = net.tcp_listen(&server, 7004, 3).unwrap();
    let conns: Vec<_> = (0..3)
        .map(|_| net.tcp_connect(&client, at(7004), PATIENCE).unwrap())
        .collect();
    let accepted: Vec<_> = (0..3)
        .map(|_| net.accept(&server, listener, PATIENCE).unwrap().0)
        .collect();
    // Unread data both ways, then both processes exit without closing anything.
    for &c in &conns {
        net.send(&client, c, b"left unread", PATIENCE).unwrap();
    }
    net.send(&server, accepted[0], b"also unread", PATIENCE).unwrap();
    net.close_all(1);
    net.close_all(2);
    assert_eq!(net.accept(&server, listener, Wait::No), Err(NetError::BadSocket));
    let s = settled(&net);
    assert_eq!(s, NetStats::default());
    for uid in [1000, 1001] {
        assert_eq!(accounts.user(uid).used(Resource::Sockets), 0);
    }
    // The port is free again, for anyone.
    let other = owner(&accounts, 3, 1002);
    net.tcp_listen(&other, 7004, 1).unwrap();
}

#[test]
fn a_call_that_may_not_wait_says_so_and_a_wait_ends_in_time() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Net::new(NetConfig::default());
    let server = owner(&accounts, 1, 1000);
    let client = owner(&accounts, 2, 1001);
    let listener = net.tcp_listen(&server, 7005, 1).unwrap();
    let conn = net.tcp_connect(&client, at(7005), PATIENCE).unwrap();
    let mut b = [0u8; 8];
    assert_eq!(net.recv(&client, conn, &mut b, Wait::No), Err(NetError::WouldBlock));
    assert_eq!(
        net.recv(&client, conn, &mut b, Wait::For(Duration::from_millis(20))),
        Err(NetError::TimedOut)
    );
    assert_eq!(
        net.recv(&server, listener, &mut b, Wait::No),
        Err(NetError::WrongKind("a listening socket has no connection"))
    );
    // A receiver that never reads: the sender fills both buffers, then is told to wait.
    let (accepted, _) = net.accept(&server, listener, PATIENCE).unwrap();
    let chunk = vec![1u8; 16 << 10];
    let mut sent = 0;
    loop {
        match net.send(&client, conn, &chunk, Wait::No) {
            Ok(n) => sent += n,
            Err(NetError::WouldBlock) => break,
            Err(e) => panic!("send: {e}"),
        }
        assert!(
            sent <= 4 * NetConfig::default().buffer_bytes,
            "sent {sent} into a receiver that never reads"
        );
    }
    assert!(sent >= NetConfig::default().buffer_bytes);
    net.close_all(1);
    net.close_all(2);
    let _ = accepted;
    assert_eq!(settled(&net), NetStats::default());
}

#[test]
fn udp_datagrams_go_whole_between_users_and_ports_are_udps_own() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Net::new(NetConfig::default());
    let alice = owner(&accounts, 1, 1000);
    let bob = owner(&accounts, 2, 1001);
    // UDP's ports are not TCP's: the same number is free for another user.
    let tcp = net.tcp_listen(&bob, 5353, 1).unwrap();
    let server = net.udp_bind(&alice, 5353).unwrap();
    assert_eq!(net.udp_bind(&bob, 5353), Err(NetError::AddrInUse(5353)));
    assert_eq!(net.udp_bind(&bob, 53), Err(NetError::Privileged(53)));
    let client = net.udp_bind(&bob, 0).unwrap();
    let from_port = net.udp_port(&bob, client).unwrap();
    assert!(from_port >= vino_net::ports::EPHEMERAL_FIRST);
    for i in 0..10u8 {
        net.send_to(&bob, client, &[i; 100], at(5353), PATIENCE).unwrap();
    }
    let mut buf = [0u8; 200];
    for i in 0..10u8 {
        let (n, from) = net.recv_from(&alice, server, &mut buf, PATIENCE).unwrap();
        assert_eq!((n, from), (100, at(from_port)));
        assert!(buf[..n].iter().all(|&b| b == i), "datagram {i} in order and whole");
    }
    // A reply; a short buffer takes what fits and the rest of that datagram is dropped.
    net.send_to(&alice, server, b"0123456789", at(from_port), PATIENCE)
        .unwrap();
    net.send_to(&alice, server, b"next", at(from_port), PATIENCE).unwrap();
    let mut short = [0u8; 4];
    assert_eq!(net.recv_from(&bob, client, &mut short, PATIENCE).unwrap().0, 4);
    assert_eq!(&short, b"0123");
    assert_eq!(net.recv_from(&bob, client, &mut buf, PATIENCE).unwrap().0, 4);
    assert_eq!(&buf[..4], b"next");
    assert_eq!(
        net.recv_from(&bob, client, &mut buf, Wait::No),
        Err(NetError::WouldBlock)
    );
    let huge = vec![0u8; NetConfig::default().buffer_bytes + 1];
    let too_big = net.send_to(&bob, client, &huge, at(5353), PATIENCE).unwrap_err();
    assert_eq!(too_big.errno(), 90, "EMSGSIZE");
    // Another user's socket is absent to it; a UDP socket has no stream.
    assert_eq!(
        net.recv_from(&alice, client, &mut buf, Wait::No),
        Err(NetError::BadSocket)
    );
    assert!(matches!(
        net.recv(&alice, server, &mut buf, Wait::No),
        Err(NetError::WrongKind(_))
    ));
    assert_eq!(accounts.user(1000).used(Resource::Sockets), 1);
    net.close_all(1);
    net.close_all(2);
    let _ = tcp;
    assert_eq!(settled(&net), NetStats::default());
    assert_eq!(accounts.user(1001).used(Resource::Sockets), 0);
}

#[test]
fn a_processs_sockets_are_listed_with_their_addresses_and_states() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Net::new(NetConfig::default());
    let (server, client) = (owner(&accounts, 1, 1000), owner(&accounts, 2, 1001));
    let listener = net.tcp_listen(&server, 7400, 4).unwrap();
    let conn = net.tcp_connect(&client, at(7400), PATIENCE).unwrap();
    let listed = net.sockets_of(1);
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].state.as_str(), listed[0].pending), ("listen", 1));
    let (accepted, _) = net.accept(&server, listener, PATIENCE).unwrap();
    let udp = net.udp_bind(&server, 7401).unwrap();
    let listed = net.sockets_of(1);
    let states: Vec<(&str, &str)> = listed.iter().map(|s| (s.proto, s.state.as_str())).collect();
    assert_eq!(states, [("tcp", "listen"), ("tcp", "established"), ("udp", "bound")]);
    let (local, _) = net.endpoints(&client, conn).unwrap();
    assert_eq!(listed[1].local, at(7400));
    assert_eq!(listed[1].remote, Some(local));
    assert!(net.sockets_of(3).is_empty(), "another process's are not its");
    for id in [accepted, udp, listener] {
        net.close(&server, id).unwrap();
    }
    net.close(&client, conn).unwrap();
    settled(&net);
}

/// `TCP_NODELAY`: with Nagle's rule a second small segment waits for the acknowledgement of the
/// first, which the peer delays; with the option it goes at once. Set on a listener, its
/// connections inherit it; set on a socket before it connects, the connection has it.
#[test]
fn nodelay_sends_a_small_segment_without_waiting_for_the_acknowledgement() {
    use vino_clock::{ManualClock, SharedClock};
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
    let net = Net::new(NetConfig {
        clock: SharedClock::new(clock.clone()),
        stepped: true,
        ..NetConfig::default()
    });
    let accounts = Accounts::new(LimitsConfig::default());
    let (server, client) = (owner(&accounts, 1, 1000), owner(&accounts, 2, 1001));
    // Two small writes of the server's; what the client has read before the clock moves.
    let exchange = |port: u16, listener_nodelay: bool, client_nodelay: bool| -> (Vec<u8>, bool) {
        let listener = net.tcp_listen(&server, port, 2).unwrap();
        net.set_nodelay(&server, listener, listener_nodelay).unwrap();
        let c = net.tcp_bind(&client, 0).unwrap();
        net.set_nodelay(&client, c, client_nodelay).unwrap();
        net.connect(&client, c, at(port), Wait::No).unwrap();
        assert_eq!(
            net.nodelay(&client, c).unwrap(),
            client_nodelay,
            "kept through the connect"
        );
        while net.step() == Some(Duration::ZERO) {}
        let (conn, _) = net.accept(&server, listener, Wait::No).unwrap();
        let inherited = net.nodelay(&server, conn).unwrap();
        // Let the handshake's acknowledgements settle, so nothing is in flight.
        clock.advance(Duration::from_millis(50));
        while net.step() == Some(Duration::ZERO) {}
        net.send(&server, conn, b"a", Wait::No).unwrap();
        net.send(&server, conn, b"b", Wait::No).unwrap();
        while net.step() == Some(Duration::ZERO) {}
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while let Ok(n) = net.recv(&client, c, &mut buf, Wait::No) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        for id in [conn, c, listener] {
            let _ = net.close(if id == c { &client } else { &server }, id);
        }
        (got, inherited)
    };
    let (nagle, inherited) = exchange(7300, false, false);
    assert_eq!(
        (nagle.as_slice(), inherited),
        (&b"a"[..], false),
        "Nagle holds the second byte"
    );
    let (nodelay, inherited) = exchange(7301, true, true);
    assert_eq!(
        (nodelay.as_slice(), inherited),
        (&b"ab"[..], true),
        "the accepted connection inherits it"
    );
    let udp = net.udp_bind(&client, 0).unwrap();
    assert!(
        net.set_nodelay(&client, udp, true).is_err(),
        "a UDP socket has no such option"
    );
}

/// Blocked calls are woken by their own socket: two callers blocked in accept on one listener
/// both get a connection, a reader blocked on each gets what was sent on it, and a reader
/// timing out again and again on a quiet connection sees nothing of the other's traffic.
#[test]
fn blocked_calls_are_woken_by_their_own_sockets() {
    let accounts = Accounts::new(LimitsConfig::default());
    let net = Arc::new(Net::new(NetConfig::default()));
    let server = owner(&accounts, 1, 1000);
    let client = owner(&accounts, 2, 1001);
    let l = net.tcp_listen(&server, 7300, 2).unwrap();
    let acceptors: Vec<_> = (0..2)
        .map(|_| {
            let (net, server) = (net.clone(), server.clone());
            thread::spawn(move || {
                let (c, _) = net.accept(&server, l, PATIENCE).unwrap();
                let mut buf = [0u8; 16];
                let n = net.recv(&server, c, &mut buf, PATIENCE).unwrap();
                buf[..n].to_vec()
            })
        })
        .collect();
    let quiet = net.tcp_connect(&client, at(7300), PATIENCE).unwrap();
    let busy = net.tcp_connect(&client, at(7300), PATIENCE).unwrap();
    net.send_all(&client, busy, b"busy", PATIENCE).unwrap();
    // The reader of the quiet connection times out while the other one is served.
    for _ in 0..20 {
        let mut buf = [0u8; 4];
        match net.recv(&client, quiet, &mut buf, Wait::For(Duration::from_millis(2))) {
            Err(NetError::TimedOut) => {}
            other => panic!("a quiet connection's read gave {other:?}"),
        }
    }
    net.send_all(&client, quiet, b"quiet", PATIENCE).unwrap();
    let mut got: Vec<Vec<u8>> = acceptors.into_iter().map(|a| a.join().unwrap()).collect();
    got.sort();
    assert_eq!(got, vec![b"busy".to_vec(), b"quiet".to_vec()]);
}
