//! Two stacks joined by a simulated wire, on one manual clock, with no thread of their own:
//! the test moves the time and runs each stack in turn, as the simulator does. Over a wire that
//! loses, duplicates, reorders and delays packets, streams arrive whole, in order and once;
//! the same seed puts the same packets on the wire; the host link's rules (egress, martians)
//! hold on a wire as on a TUN device, with no root needed.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;
use vino_clock::{Clock, ManualClock, SharedClock};
use vino_net::{
    Faults, HostConfig, LinkDevice, Net, NetConfig, NetError, Owner, SocketId, Wait, WireEnd, settle, wire,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const PORT: u16 = 7000;

fn owner(pid: u64, uid: u32) -> Owner {
    Owner {
        pid,
        uid,
        account: None,
        congestion: None,
    }
}

/// Two hosts on one wire and one clock.
struct Hosts {
    clock: Arc<ManualClock>,
    a: Net,
    b: Net,
    ends: (WireEnd, WireEnd),
}

fn hosts(faults: Faults, egress: Vec<(Ipv4Addr, u8)>) -> Hosts {
    hosts_with(faults, egress, NetConfig::default().linger)
}

fn hosts_with(faults: Faults, egress: Vec<(Ipv4Addr, u8)>, linger: Duration) -> Hosts {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
    let (ea, eb) = wire();
    let stack = |end: &WireEnd, me: Ipv4Addr, seed: u64| {
        let mut host = HostConfig::on(LinkDevice::Wire(end.clone()), me, 24);
        host.faults = Faults { seed, ..faults };
        host.egress = egress.clone();
        Net::start(NetConfig {
            host: Some(host),
            clock: SharedClock::new(clock.clone()),
            seed: Some(seed ^ 0x5eed),
            stepped: true,
            linger,
            ..NetConfig::default()
        })
        .expect("a wired stack starts")
    };
    let a = stack(&ea, A, faults.seed);
    let b = stack(&eb, B, faults.seed.wrapping_add(1));
    Hosts {
        clock,
        a,
        b,
        ends: (ea, eb),
    }
}

impl Hosts {
    /// Runs both stacks and moves the clock to whatever is due next, until `done` or a
    /// simulated minute has passed; true if `done`.
    fn until(&self, mut done: impl FnMut(&Hosts) -> bool) -> bool {
        let start = self.clock.monotonic();
        while self.clock.monotonic() - start < Duration::from_secs(60) {
            if done(self) {
                return true;
            }
            let due = settle(&mut [&mut || self.a.step(), &mut || self.b.step()]);
            self.clock
                .advance(due.unwrap_or(Duration::from_millis(10)).max(Duration::from_micros(50)));
        }
        done(self)
    }
}

fn pattern(seed: u64, i: usize) -> u8 {
    (i as u64 * 13 + i as u64 / 241 + seed) as u8
}

/// A client on A sends `total` bytes to an echo server on B and reads them back; every byte
/// either way is checked where it arrives. Returns both ends' wire traces.
fn echo_over_the_wire(faults: Faults, total: usize) -> (u64, u64) {
    let h = hosts(faults, vec![(B, 32)]);
    let (server, client) = (owner(1, 1000), owner(2, 1000));
    let listener = h.b.tcp_listen(&server, PORT, 4).unwrap();
    let conn = h.a.tcp_connect(&client, SocketAddrV4::new(B, PORT), Wait::No).unwrap();
    let mut accepted: Option<SocketId> = None;
    let (mut sent, mut echoed_in, mut echoed_out, mut back) = (0usize, 0usize, 0usize, 0usize);
    let mut pending = Vec::new();
    let mut shut = false;
    let mut buf = vec![0u8; 16 << 10];
    let done = h.until(|h| {
        if accepted.is_none() {
            accepted = h.b.accept(&server, listener, Wait::No).ok().map(|(c, _)| c);
        }
        if sent < total {
            let chunk: Vec<u8> = (sent..total.min(sent + 8192))
                .map(|i| pattern(faults.seed, i))
                .collect();
            match h.a.send(&client, conn, &chunk, Wait::No) {
                Ok(n) => sent += n,
                Err(NetError::WouldBlock | NetError::NotConnected) => {}
                Err(e) => panic!("send: {e}"),
            }
        } else if !shut {
            shut = h.a.shutdown_write(&client, conn).is_ok();
        }
        if let Some(c) = accepted {
            if pending.is_empty() {
                match h.b.recv(&server, c, &mut buf, Wait::No) {
                    Ok(n) => {
                        for (k, byte) in buf[..n].iter().enumerate() {
                            assert_eq!(
                                *byte,
                                pattern(faults.seed, echoed_in + k),
                                "byte {} at B",
                                echoed_in + k
                            );
                        }
                        echoed_in += n;
                        pending.extend_from_slice(&buf[..n]);
                    }
                    Err(NetError::WouldBlock) => {}
                    Err(e) => panic!("recv at B: {e}"),
                }
            }
            if !pending.is_empty() {
                match h.b.send(&server, c, &pending, Wait::No) {
                    Ok(n) => {
                        pending.drain(..n);
                        echoed_out += n;
                    }
                    Err(NetError::WouldBlock) => {}
                    Err(e) => panic!("echo at B: {e}"),
                }
            }
        }
        match h.a.recv(&client, conn, &mut buf, Wait::No) {
            Ok(n) => {
                for (k, byte) in buf[..n].iter().enumerate() {
                    assert_eq!(*byte, pattern(faults.seed, back + k), "byte {} back at A", back + k);
                }
                back += n;
            }
            Err(NetError::WouldBlock | NetError::NotConnected) => {}
            Err(e) => panic!("recv at A: {e}"),
        }
        back == total
    });
    assert!(
        done,
        "{faults:?}: {back} of {total} bytes back in a simulated minute (sent {sent}, B took {echoed_in}, echoed {echoed_out}); A {:?} {:?} {:?} {:?}; B {:?} {:?} {:?} {:?}",
        h.a.host_stats(),
        h.a.demux_stats(),
        h.a.sockets_of(2),
        h.a.step(),
        h.b.host_stats(),
        h.b.demux_stats(),
        h.b.sockets_of(1),
        h.b.step(),
    );
    let (fa, fb) = (h.a.host_stats().unwrap().faults, h.b.host_stats().unwrap().faults);
    if faults.loss > 0.0 {
        for n in [
            fa.lost,
            fa.duplicated,
            fa.reordered,
            fb.lost,
            fb.duplicated,
            fb.reordered,
        ] {
            assert!(n > 0, "{faults:?}: the wire's faults did nothing: {fa:?} {fb:?}");
        }
    }
    // Both sides close; the stacks end empty once their close handshakes (or linger) end.
    h.a.close(&client, conn).unwrap();
    h.b.close(&server, accepted.unwrap()).unwrap();
    h.b.close(&server, listener).unwrap();
    let empty = h.until(|h| h.a.stats().stack_sockets == 0 && h.b.stats().stack_sockets == 0);
    assert!(empty, "left behind: {:?} and {:?}", h.a.stats(), h.b.stats());
    (h.ends.0.trace(), h.ends.1.trace())
}

fn faulty(seed: u64) -> Faults {
    Faults {
        seed,
        loss: 0.03,
        duplicate: 0.03,
        reorder: 0.05,
        delay: Duration::from_millis(2),
    }
}

#[test]
fn streams_cross_a_faulty_wire_whole_in_order_and_once() {
    for seed in 1..=3 {
        echo_over_the_wire(faulty(seed), 200_000);
    }
    echo_over_the_wire(Faults::default(), 200_000);
}

#[test]
fn the_same_seed_puts_the_same_packets_on_the_wire() {
    let first = echo_over_the_wire(faulty(11), 60_000);
    assert_eq!(first, echo_over_the_wire(faulty(11), 60_000));
    assert_ne!(
        first,
        echo_over_the_wire(faulty(12), 60_000),
        "another seed, other faults"
    );
}

#[test]
fn users_reach_only_what_egress_allows_and_root_reaches_all() {
    let h = hosts(Faults::default(), vec![(Ipv4Addr::new(10, 9, 0, 200), 32)]);
    let listener = h.b.tcp_listen(&owner(1, 1000), PORT, 4).unwrap();
    let to_b = SocketAddrV4::new(B, PORT);
    match h.a.tcp_connect(&owner(2, 1000), to_b, Wait::No) {
        Err(NetError::Forbidden(a)) => assert_eq!(a, B),
        other => panic!("a user past egress: {other:?}"),
    }
    let root = owner(3, 0);
    let conn = h.a.tcp_connect(&root, to_b, Wait::No).unwrap();
    assert!(
        h.until(|h| h.a.connected(&root, conn).unwrap_or(false)),
        "root connects"
    );
    // Beyond the wire's network with no gateway: unreachable, for root too.
    let far = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), PORT);
    assert!(matches!(
        h.a.tcp_connect(&root, far, Wait::No),
        Err(NetError::Unreachable(_))
    ));
    h.a.close(&root, conn).unwrap();
    h.b.close(&owner(1, 1000), listener).unwrap();
}

/// B sends `total` bytes and closes at once; A reads `per_read` bytes every 50 ms of the
/// clock until it has `stop_at`. What A got, and how it ended.
fn slow_reader(total: usize, per_read: usize, stop_at: usize) -> (Hosts, usize, Result<usize, NetError>) {
    let h = hosts_with(Faults::default(), vec![(B, 32)], Duration::from_secs(1));
    let (server, client) = (owner(1, 1000), owner(2, 1000));
    let listener = h.b.tcp_listen(&server, PORT, 4).unwrap();
    let conn = h.a.tcp_connect(&client, SocketAddrV4::new(B, PORT), Wait::No).unwrap();
    let mut served = None;
    assert!(h.until(|h| {
        served = served.or_else(|| h.b.accept(&server, listener, Wait::No).ok().map(|(c, _)| c));
        served.is_some()
    }));
    let data: Vec<u8> = (0..total).map(|i| pattern(9, i)).collect();
    let mut sent = 0;
    assert!(
        h.until(|h| {
            sent += h.b.send(&server, served.unwrap(), &data[sent..], Wait::No).unwrap_or(0);
            sent == total
        }),
        "B's send buffer takes it all"
    );
    h.b.close(&server, served.unwrap()).unwrap();
    h.b.close(&server, listener).unwrap();
    let mut got = 0;
    let mut buf = vec![0u8; per_read];
    let mut end = Ok(0);
    let start = h.clock.monotonic();
    while h.clock.monotonic() - start < Duration::from_secs(120) {
        if got < stop_at {
            match h.a.recv(&client, conn, &mut buf, Wait::No) {
                Ok(0) => break,
                Ok(n) => {
                    assert!(buf[..n].iter().enumerate().all(|(k, b)| *b == pattern(9, got + k)));
                    got += n;
                }
                Err(NetError::WouldBlock) => {}
                Err(e) => {
                    end = Err(e);
                    break;
                }
            }
        }
        settle(&mut [&mut || h.a.step(), &mut || h.b.step()]);
        h.clock.advance(Duration::from_millis(50));
        if got >= stop_at && h.b.stats().stack_sockets == 0 {
            break;
        }
    }
    if end.is_ok() {
        end = Ok(got);
    }
    (h, got, end)
}

#[test]
fn a_closed_connection_still_sending_is_not_cut_short_by_its_linger_time() {
    // 480 KB (near two windows: send buffer and receive buffer) at 8 KB per 50 ms takes 3 s:
    // past the linger time (1 s),
    // moving all along.
    let (h, got, end) = slow_reader(480_000, 8 << 10, usize::MAX);
    assert_eq!(end, Ok(480_000), "the whole response, then its end");
    assert_eq!(got, 480_000);
    assert!(h.until(|h| h.b.stats().stack_sockets == 0), "B lets it go once done");
}

#[test]
fn a_closed_connection_whose_peer_stops_reading_is_reset_after_its_linger_time() {
    let (h, got, _) = slow_reader(400_000, 4096, 8192);
    assert!(got >= 8192);
    let stats = h.b.stats();
    assert_eq!(
        stats.stack_sockets, 0,
        "B holds nothing a second after its peer stalled: {stats:?}"
    );
}

#[test]
fn a_reader_that_comes_back_after_time_wait_gets_the_last_bytes_and_the_end() {
    let h = hosts(Faults::default(), vec![(B, 32)]);
    let (server, client) = (owner(1, 1000), owner(2, 1000));
    let listener = h.b.tcp_listen(&server, PORT, 4).unwrap();
    let conn = h.a.tcp_connect(&client, SocketAddrV4::new(B, PORT), Wait::No).unwrap();
    let mut served = None;
    assert!(h.until(|h| {
        served = served.or_else(|| h.b.accept(&server, listener, Wait::No).ok().map(|(c, _)| c));
        served.is_some() && h.a.connected(&client, conn).unwrap_or(false)
    }));
    let served = served.unwrap();
    // The client ends its side first (so its end of the connection goes through TIME-WAIT);
    // the server answers, ends its own, and the client reads nothing for a minute.
    h.a.shutdown_write(&client, conn).unwrap();
    let reply: Vec<u8> = (0..3000).map(|i| pattern(5, i)).collect();
    h.b.send_all(&server, served, &reply, Wait::No).unwrap();
    h.b.shutdown_write(&server, served).unwrap();
    h.until(|_| false);
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match h.a.recv(&client, conn, &mut buf, Wait::No) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("after {} bytes: {e}", got.len()),
        }
    }
    assert!(got == reply, "{} bytes of {} read back", got.len(), reply.len());
    h.a.close(&client, conn).unwrap();
    h.b.close(&server, served).unwrap();
    h.b.close(&server, listener).unwrap();
}
