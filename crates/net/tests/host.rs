//! VINO's stack talking to Linux's over the host link: a TUN device whose far end is Linux's
//! own stack in a network namespace of the test's. TCP both ways (VINO connecting out, Linux
//! connecting in), UDP both ways, root's egress policy, the loopback still VINO's own, and no
//! device left when the stack goes. Needs root and /dev/net/tun (CI has both); without them
//! the tests say so on stderr and pass.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use vino_account::{Accounts, LimitsConfig};
use vino_hostlink::netns::Netns;
use vino_net::{HostConfig, LOOPBACK, Net, NetConfig, NetError, Owner, Wait};

const PATIENCE: Wait = Wait::For(Duration::from_secs(20));
const VINO: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
const LINUX: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);

fn owner(accounts: &Accounts, pid: u64, uid: u32) -> Owner {
    Owner {
        pid,
        uid,
        account: Some(accounts.process(uid, format!("pid {pid}"))),
        congestion: None,
    }
}

fn pattern(i: usize) -> u8 {
    (i * 7 + i / 251) as u8
}

/// A stack whose host link's far end is Linux in a namespace of its own; `None` (said on
/// stderr) where this process may not make one.
fn attached(tag: &str, egress: Vec<(Ipv4Addr, u8)>) -> Option<(Net, Netns, String)> {
    if !nix_is_root() || !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("host link tests skipped: they need root and /dev/net/tun (a TUN device and a network namespace)");
        return None;
    }
    let device = format!("vt{tag}{}", std::process::id() % 100_000);
    let ns = Netns::new(&format!("vino-test-{device}")).expect("making a network namespace");
    let net = Net::start(NetConfig {
        host: Some(HostConfig {
            egress,
            ..HostConfig::new(&device, VINO, 24)
        }),
        ..NetConfig::default()
    })
    .expect("attaching the host link");
    ns.adopt(&device, &format!("{LINUX}/24"))
        .expect("configuring Linux's end");
    Some((net, ns, device))
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn vino_and_linux_exchange_streams_both_ways() {
    let Some((net, ns, _device)) = attached("s", vec![(LINUX, 32)]) else {
        return;
    };
    let net = Arc::new(net);
    let accounts = Accounts::new(LimitsConfig::default());
    let user = owner(&accounts, 1, 1000);

    // Linux serves an echo; a VINO user connects out to it and sends 1 MiB.
    let server = ns
        .spawn(|| {
            let l = TcpListener::bind((LINUX, 7100)).unwrap();
            let (mut c, peer) = l.accept().unwrap();
            let mut buf = vec![0u8; 65536];
            loop {
                let n = c.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                c.write_all(&buf[..n]).unwrap();
            }
            peer
        })
        .unwrap();
    let data: Vec<u8> = (0..1 << 20).map(pattern).collect();
    let conn = connect_retrying(&net, &user, SocketAddrV4::new(LINUX, 7100));
    let reader = thread::spawn({
        let (net, user) = (net.clone(), user.clone());
        move || net.recv_to_end(&user, conn, PATIENCE).unwrap()
    });
    net.send_all(&user, conn, &data, PATIENCE).unwrap();
    net.shutdown_write(&user, conn).unwrap();
    let back = reader.join().unwrap();
    assert!(
        back == data,
        "the echo differs: {} bytes back of {}",
        back.len(),
        data.len()
    );
    let peer = server.join().unwrap().unwrap();
    assert_eq!(peer.ip(), std::net::IpAddr::V4(VINO));
    net.close(&user, conn).unwrap();

    // Linux connects in to a VINO user's listener.
    let listener = net.tcp_listen(&user, 7200, 4).unwrap();
    let client = ns
        .spawn(move || {
            let mut c = TcpStream::connect((VINO, 7200)).unwrap();
            let data: Vec<u8> = (0..300_000).map(pattern).collect();
            c.write_all(&data).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).unwrap();
            back == data
        })
        .unwrap();
    let (c, peer) = net.accept(&user, listener, PATIENCE).unwrap();
    assert_eq!(*peer.ip(), LINUX);
    let got = net.recv_to_end(&user, c, PATIENCE).unwrap();
    net.send_all(&user, c, &got, PATIENCE).unwrap();
    net.close(&user, c).unwrap();
    assert!(
        client.join().unwrap().unwrap(),
        "Linux got back other bytes than it sent"
    );
    net.close_all(1);
    let stats = net.host_stats().unwrap();
    assert!(stats.sent > 700 && stats.received > 700, "{stats:?}");
    assert_eq!(stats.refused, 0, "{stats:?}");
    // Every packet that came in was sorted by whom it was for before the stack's work on it.
    let demux = net.demux_stats().unwrap();
    assert_eq!(demux.queued + demux.dropped, stats.received, "{demux:?}");
    assert_eq!(demux.waiting, 0, "{demux:?}");
}

/// Connects, trying again while Linux's listener is not up yet.
fn connect_retrying(net: &Net, user: &Owner, to: SocketAddrV4) -> vino_net::SocketId {
    for _ in 0..100 {
        match net.tcp_connect(user, to, PATIENCE) {
            Ok(c) => return c,
            Err(NetError::Refused) => thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("connecting to {to}: {e}"),
        }
    }
    panic!("{to} never listened");
}

#[test]
fn datagrams_cross_both_ways_and_the_egress_policy_holds() {
    let Some((net, ns, _device)) = attached("u", vec![(LINUX, 32)]) else {
        return;
    };
    let accounts = Accounts::new(LimitsConfig::default());
    let user = owner(&accounts, 1, 1000);
    let root = owner(&accounts, 2, 0);
    let sock = net.udp_bind(&user, 7300).unwrap();
    let linux = ns
        .spawn(|| {
            let s = UdpSocket::bind((LINUX, 7301)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut buf = [0u8; 2048];
            let (n, from) = s.recv_from(&mut buf).unwrap();
            s.send_to(&buf[..n].repeat(2), from).unwrap();
            (buf[..n].to_vec(), from)
        })
        .unwrap();
    // The first datagram may arrive before Linux's socket is bound: send until answered.
    let mut buf = [0u8; 2048];
    let mut answer = None;
    for _ in 0..200 {
        net.send_to(&user, sock, b"ping", SocketAddrV4::new(LINUX, 7301), PATIENCE)
            .unwrap();
        match net.recv_from(&user, sock, &mut buf, Wait::For(Duration::from_millis(50))) {
            Ok((n, from)) => {
                answer = Some((buf[..n].to_vec(), from));
                break;
            }
            Err(NetError::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let (got, from) = answer.expect("Linux never answered");
    assert_eq!(got, b"pingping");
    assert_eq!(from, SocketAddrV4::new(LINUX, 7301));
    let (sent, seen_from) = linux.join().unwrap().unwrap();
    assert_eq!(sent, b"ping");
    assert_eq!(seen_from, std::net::SocketAddr::V4(SocketAddrV4::new(VINO, 7300)));

    // Root's policy lets users reach 10.201.0.1 only; root reaches the rest of the link.
    let other = SocketAddrV4::new(Ipv4Addr::new(10, 201, 0, 9), 80);
    assert!(matches!(
        net.send_to(&user, sock, b"x", other, Wait::No),
        Err(NetError::Forbidden(_))
    ));
    let e = net.tcp_connect(&user, other, Wait::No).unwrap_err();
    assert_eq!((e.errno(), matches!(e, NetError::Forbidden(_))), (1, true));
    let c = net.tcp_connect(&root, other, Wait::No).unwrap();
    net.close(&root, c).unwrap();
    // Beyond the link, with no gateway: unreachable for everyone.
    let far = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 80);
    assert!(matches!(
        net.tcp_connect(&root, far, Wait::No),
        Err(NetError::Unreachable(_))
    ));
    net.close_all(1);
    net.close_all(2);
}

#[test]
fn the_loopback_stays_vinos_own_and_the_device_goes_with_the_stack() {
    let Some((net, ns, device)) = attached("l", vec![(LINUX, 32)]) else {
        return;
    };
    let accounts = Accounts::new(LimitsConfig::default());
    let a = owner(&accounts, 1, 1000);
    let b = owner(&accounts, 2, 1001);
    // VINO processes still reach each other over the loopback, and at VINO's own address.
    let l = net.tcp_listen(&a, 7400, 2).unwrap();
    for to in [LOOPBACK, VINO] {
        let c = net.tcp_connect(&b, SocketAddrV4::new(to, 7400), PATIENCE).unwrap();
        let (s, _) = net.accept(&a, l, PATIENCE).unwrap();
        net.send_all(&b, c, b"hello", PATIENCE).unwrap();
        let mut buf = [0u8; 5];
        assert_eq!(net.recv(&a, s, &mut buf, PATIENCE).unwrap(), 5);
        net.close(&b, c).unwrap();
        net.close(&a, s).unwrap();
    }
    let before = net.host_stats().unwrap();
    assert_eq!(before.sent, 0, "loopback traffic went out to the host: {before:?}");
    // Linux cannot reach VINO's loopback through the link: its 127.0.0.1 is its own.
    let reached = ns
        .spawn(|| TcpStream::connect_timeout(&"127.0.0.1:7400".parse().unwrap(), Duration::from_millis(500)).is_ok())
        .unwrap();
    assert!(!reached.join().unwrap().unwrap());
    net.close_all(1);
    net.close_all(2);
    // The device is VINO's only while it holds it.
    drop(net);
    let gone = ns.ip(&["link", "show", &device]);
    assert!(gone.is_err(), "the TUN device outlived the stack");
}

#[test]
fn a_flood_of_connections_fills_only_its_targets_pool() {
    let Some((net, ns, _device)) = attached("f", vec![(LINUX, 32)]) else {
        return;
    };
    let net = Arc::new(net);
    let accounts = Accounts::new(LimitsConfig::default());
    let target = owner(&accounts, 1, 1000);
    let other = owner(&accounts, 2, 1001);
    let flooded = net.tcp_listen(&target, 7500, 8).unwrap();
    let open = net.tcp_listen(&other, 7501, 2).unwrap();
    // Linux opens 300 connections to the target's port and holds them, idle; its listener
    // never accepts.
    let flood = ns
        .spawn(|| {
            let held: Vec<TcpStream> = (0..300)
                .filter_map(|_| {
                    TcpStream::connect_timeout(&SocketAddrV4::new(VINO, 7500).into(), Duration::from_secs(10)).ok()
                })
                .collect();
            held
        })
        .unwrap();
    let held = flood.join().unwrap().unwrap();
    assert_eq!(held.len(), 8, "connections beyond the pool are refused, not queued");
    let listed = net.sockets_of(1);
    assert_eq!(listed.iter().map(|s| s.pending).sum::<usize>(), 8, "{listed:?}");
    // The other user's listener takes a connection and answers at once.
    let client = ns
        .spawn(|| {
            let mut c = TcpStream::connect((VINO, 7501)).unwrap();
            c.write_all(b"hi").unwrap();
            let mut back = [0u8; 2];
            c.read_exact(&mut back).unwrap();
            back
        })
        .unwrap();
    let (c, _) = net.accept(&other, open, PATIENCE).unwrap();
    let mut buf = [0u8; 2];
    let n = net.recv(&other, c, &mut buf, PATIENCE).unwrap();
    net.send_all(&other, c, &buf[..n], PATIENCE).unwrap();
    assert_eq!(&client.join().unwrap().unwrap(), b"hi");
    // What the flood holds is the target's: its pool, charged to it, and nothing more.
    let stats = net.stats();
    assert_eq!(stats.stack_sockets, 8 + 2 + 1, "{stats:?}");
    drop(held);
    net.close(&other, c).unwrap();
    let _ = flooded;
    net.close_all(1);
    net.close_all(2);
}
