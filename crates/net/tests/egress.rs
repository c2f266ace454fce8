//! `net.pick_packet` and the rated way out, on two stacks joined by a wire and one manual clock:
//! A's host link carries 2 MB a second. Users share it by weight whatever number of connections
//! each opens; a user's own graft sends its interactive packets before its own bulk; the link's
//! graft is the privileged one's order; hostile grafts leave the default in charge and the other
//! users untouched.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;
use vino_clock::{Clock, ManualClock, SharedClock};
use vino_graft::{Access, GraftSlot, PolicyKind, Runtime};
use vino_net::congestion::StackShare;
use vino_net::egress::{PickPacket, Sharing, SharingHandle, UserPick};
use vino_net::{HostConfig, LinkDevice, Net, NetConfig, NetError, Owner, Shaping, SocketId, Wait, settle, wire};

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
/// Bytes a second A's way out carries.
const RATE: u64 = 2_000_000;
const BULK: u16 = 7000;
const PING: u16 = 7001;
const BULKY: u32 = 1000;
const OTHER: u32 = 2000;

/// The kernel's side, as a test sets it: weights, and the grafts bound.
struct Users {
    weights: Mutex<HashMap<u32, u32>>,
    picks: Mutex<HashMap<u32, UserPick>>,
    link: Arc<GraftSlot<PickPacket>>,
}

impl Sharing for Users {
    fn weight(&self, uid: u32) -> u32 {
        self.weights.lock().get(&uid).copied().unwrap_or(100)
    }
    fn user_pick(&self, uid: u32) -> Option<UserPick> {
        self.picks.lock().get(&uid).cloned()
    }
    fn link_pick(&self) -> Option<Arc<GraftSlot<PickPacket>>> {
        Some(self.link.clone())
    }
}

impl Users {
    fn new(rt: &Runtime) -> Arc<Users> {
        Arc::new(Users {
            weights: Mutex::default(),
            picks: Mutex::default(),
            link: Arc::new(GraftSlot::new(rt, Arc::new(()), Access::Privileged, None)),
        })
    }

    /// `uid`'s own slot, with its share of the stack's thread.
    fn pick(&self, rt: &Runtime, uid: u32) -> UserPick {
        let pick = UserPick {
            slot: Arc::new(GraftSlot::new(rt, Arc::new(()), Access::Process(u64::from(uid)), None)),
            share: Arc::new(StackShare::default()),
        };
        self.picks.lock().insert(uid, pick.clone());
        pick
    }
}

/// What a run measured.
#[derive(Debug, Default)]
struct Seen {
    /// Bytes each user's bulk connections delivered after the first second.
    bytes: HashMap<u32, usize>,
    /// The ping's one-way delays, in microseconds.
    pings: Vec<u64>,
}

impl Seen {
    fn share(&self, uid: u32) -> f64 {
        self.bytes.get(&uid).copied().unwrap_or(0) as f64
    }

    fn median_ping(&self) -> u64 {
        let mut p = self.pings.clone();
        p.sort_unstable();
        assert!(p.len() > 20, "pings arrived: {}", p.len());
        p[p.len() / 2]
    }
}

/// Runs `seconds` of simulated time: each user in `bulk` (uid, connections) sends as fast as
/// its connections take to a sink on B; if `ping`, user [`BULKY`] also sends a 64-byte UDP
/// datagram every 10 ms from port [`PING`]. Every byte of the bulk is checked.
fn run(users: &Arc<Users>, bulk: &[(u32, usize)], ping: bool, seconds: u64) -> Seen {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
    let (ea, eb) = wire();
    let stack = |end, me, seed: u64, shaping| {
        let mut host = HostConfig::on(LinkDevice::Wire(end), me, 24);
        host.egress = vec![(Ipv4Addr::new(10, 9, 0, 0), 24)];
        host.shaping = shaping;
        Net::start(NetConfig {
            host: Some(host),
            clock: SharedClock::new(clock.clone()),
            seed: Some(seed),
            stepped: true,
            sharing: Some(SharingHandle(users.clone())),
            ..NetConfig::default()
        })
        .expect("a wired stack starts")
    };
    let (a, b) = (stack(ea, A, 1, Some(Shaping::rate(RATE))), stack(eb, B, 2, None));
    let sink = Owner {
        pid: 1,
        uid: 1,
        ..Owner::default()
    };
    let owner = |uid: u32| Owner {
        pid: u64::from(uid),
        uid,
        ..Owner::default()
    };
    // Each user's connections go to a listener of its own on B, so B knows whose bytes came.
    let mut listeners = Vec::new();
    let mut out: Vec<(u32, SocketId, usize)> = Vec::new();
    for (i, &(uid, conns)) in bulk.iter().enumerate() {
        let port = BULK + 100 * (i as u16 + 1);
        listeners.push((uid, b.tcp_listen(&sink, port, conns + 1).unwrap()));
        for _ in 0..conns {
            let c = a
                .tcp_connect(&owner(uid), SocketAddrV4::new(B, port), Wait::No)
                .unwrap();
            out.push((uid, c, 0));
        }
    }
    let pinger = ping.then(|| a.udp_bind(&owner(BULKY), PING).unwrap());
    let ping_sink = b.udp_bind(&sink, PING).unwrap();
    let mut sinks: Vec<(u32, SocketId, usize)> = Vec::new();
    let mut seen = Seen::default();
    let mut buf = vec![0u8; 64 << 10];
    let start = clock.monotonic();
    let mut next_ping = Duration::ZERO;
    let chunk: Vec<u8> = (0..16384).map(|k| k as u8).collect();
    loop {
        let now = clock.monotonic() - start;
        if now >= Duration::from_secs(seconds) {
            break;
        }
        let counting = now >= Duration::from_secs(1);
        for &(uid, l) in &listeners {
            while let Ok((c, _)) = b.accept(&sink, l, Wait::No) {
                sinks.push((uid, c, 0));
            }
        }
        for (uid, c, sent) in out.iter_mut() {
            let from = *sent % 256;
            match a.send(&owner(*uid), *c, &chunk[from..from + 8192], Wait::No) {
                Ok(n) => *sent += n,
                Err(NetError::WouldBlock | NetError::NotConnected) => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        if let Some(p) = pinger
            && now >= next_ping
        {
            next_ping = now + Duration::from_millis(10);
            let stamp = (now.as_micros() as u64).to_le_bytes();
            let mut datagram = [0u8; 64];
            datagram[..8].copy_from_slice(&stamp);
            a.send_to(&owner(BULKY), p, &datagram, SocketAddrV4::new(B, PING), Wait::No)
                .unwrap();
        }
        for (uid, c, got) in sinks.iter_mut() {
            while let Ok(n) = b.recv(&sink, *c, &mut buf, Wait::No) {
                if n == 0 {
                    break;
                }
                for (k, byte) in buf[..n].iter().enumerate() {
                    assert_eq!(*byte, ((*got + k) % 256) as u8, "user {uid}'s byte {}", *got + k);
                }
                *got += n;
                if counting {
                    *seen.bytes.entry(*uid).or_default() += n;
                }
            }
        }
        while let Ok((n, _)) = b.recv_from(&sink, ping_sink, &mut buf, Wait::No) {
            assert_eq!(n, 64);
            let stamp = u64::from_le_bytes(buf[..8].try_into().unwrap());
            if counting {
                seen.pings.push(now.as_micros() as u64 - stamp);
            }
        }
        let due = settle(&mut [&mut || a.step(), &mut || b.step()]);
        let step = due
            .unwrap_or(Duration::from_millis(1))
            .clamp(Duration::from_micros(100), Duration::from_millis(1));
        clock.advance(step);
    }
    let shaped = a.host_stats().unwrap().shaped.unwrap();
    assert!(shaped.sent > 0, "{shaped:?}");
    seen
}

fn example(name: &str) -> Vec<u8> {
    vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).expect("the example builds")
}

#[test]
fn users_share_the_rated_link_by_weight_whatever_connections_each_opens() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    let even = run(&users, &[(BULKY, 4), (OTHER, 1)], false, 4);
    let ratio = even.share(BULKY) / even.share(OTHER);
    assert!(
        (0.8..1.25).contains(&ratio),
        "four connections against one, even weights: {even:?}"
    );
    let total = even.share(BULKY) + even.share(OTHER);
    assert!(
        total > 0.8 * 3.0 * RATE as f64 && total < 3.0 * RATE as f64,
        "the link is used and its rate holds: {total} bytes in 3 s"
    );
    users.weights.lock().insert(OTHER, 300);
    let weighted = run(&users, &[(BULKY, 4), (OTHER, 1)], false, 4);
    let ratio = weighted.share(OTHER) / weighted.share(BULKY);
    assert!((2.4..3.75).contains(&ratio), "tickets 300 against 100: {weighted:?}");
}

#[test]
fn a_users_graft_sends_its_interactive_packets_before_its_own_bulk() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    // Eight bulk connections keep the user's queue full; the ping waits behind all of them.
    let load = [(BULKY, 8), (OTHER, 1)];
    let fifo = run(&users, &load, true, 3).median_ping();
    let pick = users.pick(&rt, BULKY);
    pick.slot
        .load(&example("port_priority"), vino_graft::Owner::process(u64::from(BULKY)))
        .unwrap();
    assert_eq!(pick.slot.call_control("set_port", &[i64::from(PING), 1]).unwrap(), 0);
    let seen = run(&users, &load, true, 3);
    let graft = seen.median_ping();
    assert!(
        graft * 4 < fifo,
        "the ping's median wait: {graft} µs with the graft, {fifo} µs first in first out"
    );
    let stats = pick.slot.stats().unwrap();
    assert!(stats.invocations > 100 && stats.failures == 0, "{stats:?}");
    let ratio = seen.share(BULKY) / seen.share(OTHER);
    assert!(
        (0.8..1.25).contains(&ratio),
        "the graft took no more of the link: {seen:?}"
    );
}

/// Answers an index past the candidates.
const OUT_OF_RANGE: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param i32 i32) (result i32) (i32.const 99)))"#;

const LOOP: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param i32 i32) (result i32) (loop (br 0)) (i32.const 0)))"#;

/// Writes into its own memory, then traps.
const TRAP: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param i32 i32) (result i32)
    (i32.store (i32.const 0) (i32.const -1))
    unreachable))"#;

#[test]
fn a_failing_graft_leaves_the_default_in_charge_and_other_users_their_share() {
    let rt = Runtime::default();
    for (name, wat) in [("out of range", OUT_OF_RANGE), ("loop", LOOP), ("trap", TRAP)] {
        let users = Users::new(&rt);
        let pick = users.pick(&rt, BULKY);
        pick.slot
            .load(
                &wat::parse_str(wat).unwrap(),
                vino_graft::Owner::process(u64::from(BULKY)),
            )
            .unwrap();
        let seen = run(&users, &[(BULKY, 2), (OTHER, 1)], true, 3);
        let ratio = seen.share(BULKY) / seen.share(OTHER);
        assert!((0.8..1.25).contains(&ratio), "{name}: {seen:?}");
        assert!(
            seen.pings.len() > 150,
            "{name}: the pings went on: {}",
            seen.pings.len()
        );
        assert_eq!(
            pick.slot.policy_kind(),
            PolicyKind::Default,
            "{name}: unloaded after failing"
        );
        let stats = pick.slot.stats();
        assert!(stats.is_none(), "{name}: nothing bound: {stats:?}");
    }
}

/// The link's order as a privileged owner may set it: user 2000's packet whenever it has one.
const PREFER_OTHER: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param $n i32) (param i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.eq (i32.load (i32.add (i32.const 1040) (i32.mul (local.get $i) (i32.const 24))))
                    (i32.const 2000))
          (then (return (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0)))"#;

#[test]
fn the_links_graft_orders_users_as_its_privileged_owner_says() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    assert_eq!(users.link.access(), Access::Privileged);
    users
        .link
        .load(&wat::parse_str(PREFER_OTHER).unwrap(), vino_graft::Owner::process(1))
        .unwrap();
    let seen = run(&users, &[(BULKY, 4), (OTHER, 1)], false, 3);
    assert!(
        seen.share(OTHER) > 4.0 * seen.share(BULKY),
        "the link's graft, not the users' weights, decides: {seen:?}"
    );
    let stats = users.link.stats().unwrap();
    assert!(stats.invocations > 100 && stats.failures == 0, "{stats:?}");
}
