//! Raw IPv4 packets put on the loopback link of a fresh network stack, as if they had arrived
//! there, while it holds a listener, an established connection and a UDP socket. The stack
//! must not panic, and afterwards it must still accept and carry a connection, and give
//! everything back when its processes go.
//!
//! An input is a list of packets, each two bytes of length (little-endian) then its bytes.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};
use vino_net::{LOOPBACK, Net, NetConfig, Owner, Wait};

/// The listener's port, the UDP socket's, and the connection's peer port used in the seeds.
pub const TCP_PORT: u16 = 80;
pub const UDP_PORT: u16 = 53;

const PATIENCE: Wait = Wait::For(Duration::from_secs(5));

fn owner(pid: u64) -> Owner {
    Owner {
        pid,
        uid: 0,
        account: None,
        congestion: None,
    }
}

/// The packets of an input.
pub fn packets(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let body = &rest[2..];
        let take = len.min(body.len());
        out.push(&body[..take]);
        rest = &body[take..];
    }
    out
}

/// An input made of `packets`.
pub fn input(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        out.extend_from_slice(&(p.len() as u16).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

pub fn run(data: &[u8]) {
    let net = Net::new(NetConfig::default());
    let (server, client) = (owner(1), owner(2));
    let listener = net.tcp_listen(&server, TCP_PORT, 4).expect("listening");
    net.udp_bind(&server, UDP_PORT).expect("binding UDP");
    let conn = net
        .tcp_connect(&client, SocketAddrV4::new(LOOPBACK, TCP_PORT), PATIENCE)
        .expect("connecting");
    let (accepted, _) = net.accept(&server, listener, PATIENCE).expect("accepting");
    for p in packets(data) {
        net.inject(p);
    }
    // Whatever became of the first connection, a new one is accepted and carries bytes.
    let again = net
        .tcp_connect(&client, SocketAddrV4::new(LOOPBACK, TCP_PORT), PATIENCE)
        .expect("connecting after the packets");
    let (served, _) = net
        .accept(&server, listener, PATIENCE)
        .expect("accepting after the packets");
    assert_eq!(net.send(&client, again, b"still here", PATIENCE), Ok(10));
    let mut buf = [0u8; 16];
    let mut got = 0;
    while got < 10 {
        got += net.recv(&server, served, &mut buf[got..], PATIENCE).expect("receiving");
    }
    assert_eq!(&buf[..10], b"still here");
    let _ = (conn, accepted);
    net.close_all(1);
    net.close_all(2);
    let deadline = Instant::now() + Duration::from_secs(15);
    while net.stats().stack_sockets != 0 {
        assert!(Instant::now() < deadline, "the stack kept {:?}", net.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(net.stats().ports_in_use, 0, "a port stayed held");
}
