//! Two stacks on a wire and one manual clock, A's way out rated, for `net.pick_packet`'s tests
//! and its benchmark: users on A send bulk to sinks on B over as many connections as each
//! likes, one of them pings, and what each got is counted in simulated time.

use crate::congestion::StackShare;
use crate::egress::{PickPacket, Sharing, SharingHandle, UserPick};
use crate::{HostConfig, NetConfig, NetError, Owner, Shaping, SocketId, Wait, settle, wire};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;
use vino_clock::{Clock, ManualClock};
use vino_graft::{Access, GraftSlot, Runtime};

pub use super::{A, B};
/// Bytes a second A's way out carries.
pub const RATE: u64 = 2_000_000;
pub const BULK: u16 = 7000;
pub const PING: u16 = 7001;
pub const BULKY: u32 = 1000;
pub const OTHER: u32 = 2000;

/// The kernel's side, as a test sets it: weights, and the grafts bound.
pub struct Users {
    pub weights: Mutex<HashMap<u32, u32>>,
    pub picks: Mutex<HashMap<u32, UserPick>>,
    pub link: Arc<GraftSlot<PickPacket>>,
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
    pub fn new(rt: &Runtime) -> Arc<Users> {
        Arc::new(Users {
            weights: Mutex::default(),
            picks: Mutex::default(),
            link: Arc::new(GraftSlot::new(rt, Arc::new(()), Access::Privileged, None)),
        })
    }

    /// `uid`'s own slot, with its share of the stack's thread.
    pub fn pick(&self, rt: &Runtime, uid: u32) -> UserPick {
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
pub struct Seen {
    /// Bytes each user's bulk connections delivered after the first second.
    pub bytes: HashMap<u32, usize>,
    /// The ping's one-way delays, in microseconds.
    pub pings: Vec<u64>,
    /// Bytes of the flood that arrived after the first second, by its user.
    pub flooded: HashMap<u32, usize>,
}

impl Seen {
    pub fn share(&self, uid: u32) -> f64 {
        self.bytes.get(&uid).copied().unwrap_or(0) as f64
    }

    pub fn median_ping(&self) -> u64 {
        self.ping_at(0.5)
    }

    /// The ping's delay at quantile `q` (0.5: the median), in microseconds.
    pub fn ping_at(&self, q: f64) -> u64 {
        let mut p = self.pings.clone();
        p.sort_unstable();
        assert!(p.len() > 20, "pings arrived: {}", p.len());
        p[((p.len() - 1) as f64 * q).round() as usize]
    }
}

/// Runs `seconds` of simulated time: each user in `bulk` (uid, connections) sends as fast as
/// its connections take to a sink on B; if `ping`, user [`BULKY`] also sends a 64-byte UDP
/// datagram every 10 ms from port [`PING`]. Every byte of the bulk is checked.
pub fn run(users: &Arc<Users>, bulk: &[(u32, usize)], ping: bool, seconds: u64) -> Seen {
    run_load(
        users,
        &Load {
            bulk,
            ping,
            flood: None,
            seconds,
        },
    )
}

/// What the users on A do for a run.
pub struct Load<'a> {
    /// Users and their bulk connections.
    pub bulk: &'a [(u32, usize)],
    /// User [`BULKY`] pings too.
    pub ping: bool,
    /// This user sends datagrams of 1400 bytes as fast as its socket takes them.
    pub flood: Option<u32>,
    pub seconds: u64,
}

/// The port the flood goes to (B drains it).
pub const FLOOD: u16 = 7900;

/// Runs `load` (see [`run`]).
pub fn run_load(users: &Arc<Users>, load: &Load<'_>) -> Seen {
    let &Load {
        bulk,
        ping,
        flood,
        seconds,
    } = load;
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
    let (ea, eb) = wire();
    let stack = |end, me, seed: u64, shaping| {
        let host = |h: &mut HostConfig| {
            h.egress = vec![(Ipv4Addr::new(10, 9, 0, 0), 24)];
            h.shaping = shaping;
        };
        let config = NetConfig {
            seed: Some(seed),
            sharing: Some(SharingHandle(users.clone())),
            ..NetConfig::default()
        };
        super::wired(&clock, end, me, host, config)
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
    let flooder = flood.map(|uid| (uid, a.udp_bind(&owner(uid), 0).unwrap()));
    let flood_sink = b.udp_bind(&sink, FLOOD).unwrap();
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
        if let Some((uid, f)) = flooder {
            let datagram = [0u8; 1400];
            while a
                .send_to(&owner(uid), f, &datagram, SocketAddrV4::new(B, FLOOD), Wait::No)
                .is_ok()
            {}
        }
        while let Ok((n, _)) = b.recv_from(&sink, flood_sink, &mut buf, Wait::No) {
            if counting {
                *seen.flooded.entry(flood.unwrap_or(0)).or_default() += n;
            }
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
