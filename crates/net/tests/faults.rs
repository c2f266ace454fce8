//! TCP over a link that loses, duplicates, reorders and delays frames (VINO's own faults, by
//! seed): every stream still arrives whole, in order, once, and the stack is left empty; the
//! same seed makes the same faults. A fuzzer's raw frames do not upset it either.

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vino_net::{Faults, LOOPBACK, Net, NetConfig, Owner, Wait};

const PATIENCE: Wait = Wait::For(Duration::from_secs(30));

fn owner(pid: u64, uid: u32) -> Owner {
    Owner {
        pid,
        uid,
        account: None,
        congestion: None,
    }
}

fn pattern(seed: u64, i: usize) -> u8 {
    (i as u64 * 7 + i as u64 / 251 + seed) as u8
}

/// A client sends `total` bytes through an echo server and reads them back; both must be the
/// bytes sent, in order.
fn echo_through(net: &Arc<Net>, port: u16, total: usize, seed: u64) {
    let (server, client) = (owner(1, 1000), owner(2, 1001));
    let listener = net.tcp_listen(&server, port, 2).unwrap();
    let echo = thread::spawn({
        let net = net.clone();
        move || {
            let (conn, _) = net.accept(&server, listener, PATIENCE).unwrap();
            let mut buf = vec![0u8; 8192];
            loop {
                let n = net.recv(&server, conn, &mut buf, PATIENCE).unwrap();
                if n == 0 {
                    break;
                }
                net.send_all(&server, conn, &buf[..n], PATIENCE).unwrap();
            }
            net.close(&server, conn).unwrap();
            net.close(&server, listener).unwrap();
        }
    });
    let conn = net
        .tcp_connect(&client, SocketAddrV4::new(LOOPBACK, port), PATIENCE)
        .unwrap();
    let data: Vec<u8> = (0..total).map(|i| pattern(seed, i)).collect();
    let reader = thread::spawn({
        let (net, client) = (net.clone(), client.clone());
        move || net.recv_to_end(&client, conn, PATIENCE).unwrap()
    });
    net.send_all(&client, conn, &data, PATIENCE).unwrap();
    net.shutdown_write(&client, conn).unwrap();
    let back = reader.join().unwrap();
    echo.join().unwrap();
    net.close(&client, conn).unwrap();
    assert_eq!(back.len(), total, "seed {seed}: bytes lost or added");
    assert!(
        back == data,
        "seed {seed}: the stream came back changed or out of order"
    );
}

/// Waits until the stack holds nothing.
fn settled(net: &Net) {
    let until = Instant::now() + Duration::from_secs(20);
    while net.stats().stack_sockets != 0 {
        assert!(Instant::now() < until, "the stack still holds {:?}", net.stats());
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn streams_arrive_whole_in_order_and_once_over_a_faulty_link() {
    for seed in 1..=3u64 {
        let faults = Faults {
            seed,
            loss: 0.02,
            duplicate: 0.02,
            reorder: 0.05,
            delay: Duration::from_micros(200),
        };
        let net = Arc::new(Net::new(NetConfig {
            faults,
            mtu: 1500,
            ..NetConfig::default()
        }));
        echo_through(&net, 7000, 256 << 10, seed);
        let s = net.link_stats();
        assert!(s.lost > 0 && s.duplicated > 0 && s.reordered > 0, "seed {seed}: {s:?}");
        settled(&net);
    }
}

#[test]
fn raw_frames_from_outside_leave_the_stack_working() {
    let net = Arc::new(Net::new(NetConfig::default()));
    let root = owner(3, 0);
    net.tcp_listen(&root, 80, 4).unwrap();
    // A SYN to port 80 from 10.0.0.1 (not on this link: the answer goes nowhere), a truncated
    // header, a bad version, an empty frame, and noise.
    let mut syn = vec![
        0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 127, 0, 0, 1, // IPv4
        0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0, // TCP SYN
    ];
    net.inject(&syn);
    syn[0] = 0x65;
    net.inject(&syn);
    net.inject(&syn[..7]);
    net.inject(&[]);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200 {
        let len = (x % 120) as usize;
        let frame: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        net.inject(&frame);
    }
    assert_eq!(net.link_stats().injected, 204);
    // The stack still carries a stream.
    echo_through(&net, 7001, 64 << 10, 9);
    net.close_all(3);
    settled(&net);
}

/// A TCP SYN from `from` to 127.0.0.1:`port` (checksums are not checked on the loopback).
fn syn(from: SocketAddrV4, port: u16) -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 0, 0, 0, 0, 127, 0, 0, 1, // IPv4
        0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0, // TCP SYN
    ];
    p[12..16].copy_from_slice(&from.ip().octets());
    p[20..22].copy_from_slice(&from.port().to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p
}

#[test]
fn syns_from_forged_addresses_hold_a_listeners_slots_only_for_a_while() {
    // On a clock the test moves, with no thread of the stack's own: how long the slots stay
    // half open is the stack's time, whatever the machine's load.
    let clock = Arc::new(vino_clock::ManualClock::new(Duration::from_secs(1_700_000_000)));
    let half_open = Duration::from_secs(5);
    let net = Net::new(NetConfig {
        half_open,
        clock: vino_clock::SharedClock::new(clock.clone()),
        stepped: true,
        ..NetConfig::default()
    });
    let (server, client) = (owner(1, 1000), owner(2, 1001));
    let listener = net.tcp_listen(&server, 7600, 2).unwrap();
    // Two SYNs from an address off the link: the answers go nowhere, the slots stay half open.
    for i in 0..2 {
        net.inject(&syn(
            SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 1), 40000 + i),
            7600,
        ));
    }
    let pending: usize = net.sockets_of(1).iter().map(|s| s.pending).sum();
    assert_eq!(pending, 2, "both slots half open");
    let to = SocketAddrV4::new(LOOPBACK, 7600);
    let refused = net.tcp_connect(&client, to, Wait::No).unwrap();
    net.step();
    assert!(
        matches!(net.connected(&client, refused), Err(vino_net::NetError::Refused)),
        "a real client is refused while the pool is half open"
    );
    let _ = net.close(&client, refused);
    // Just before the limit the slots still wait; past it they listen again.
    clock.advance(half_open - Duration::from_millis(1));
    net.step();
    assert_eq!(net.sockets_of(1).iter().map(|s| s.pending).sum::<usize>(), 2);
    clock.advance(Duration::from_millis(1));
    net.step();
    let c = net.tcp_connect(&client, to, Wait::No).unwrap();
    net.step();
    assert_eq!(
        net.connected(&client, c),
        Ok(true),
        "served once the slots listen again"
    );
    let (s, _) = net.accept(&server, listener, Wait::No).unwrap();
    net.send_all(&client, c, b"ok", Wait::No).unwrap();
    net.step();
    let mut buf = [0u8; 2];
    assert_eq!(net.recv(&server, s, &mut buf, Wait::No).unwrap(), 2);
    net.close_all(1);
    net.close_all(2);
    clock.advance(Duration::from_secs(20));
    net.step();
    assert_eq!(net.stats().stack_sockets, 0, "{:?}", net.stats());
}
