//! Two stacks on a simulated wire and one manual clock, for congestion control's tests and its
//! benchmark: one process on A sends to a sink on B over connections run by a `net.congestion`
//! slot, every byte checked, the window changes recorded; and ([`shared_link`]) users sharing
//! a rated way out, for `net.pick_packet`.

pub mod shared_link;

use crate::congestion::{CongestionControl, StackShare, TraceEntry};
use crate::{Congestion, CongestionConfig, Faults, HostConfig, LinkDevice, Net, NetConfig, NetError, Owner, Wait};
use crate::{settle, wire};
use parking_lot::Mutex;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;
use vino_clock::{Clock, ManualClock, SharedClock};
use vino_graft::GraftSlot;

/// The two stacks' addresses on the wire.
pub const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
pub const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const PORT: u16 = 7000;

/// A stepped stack at `me` on `end` of a wire, on `clock`: `host` finishes its link (faults, a
/// rate, where it may send), `config` gives the rest of its settings.
pub(crate) fn wired(
    clock: &Arc<ManualClock>,
    end: crate::WireEnd,
    me: Ipv4Addr,
    host: impl FnOnce(&mut HostConfig),
    config: NetConfig,
) -> Net {
    let mut link = HostConfig::on(LinkDevice::Wire(end), me, 24);
    host(&mut link);
    Net::start(NetConfig {
        host: Some(link),
        clock: SharedClock::new(clock.clone()),
        stepped: true,
        ..config
    })
    .expect("a wired stack starts")
}

/// What one run of [`transfers`] showed.
pub struct Run {
    /// The sending connections' window changes, in order.
    pub trace: Vec<TraceEntry>,
    /// Simulated time the whole transfer took.
    pub took: Duration,
    /// Events the built-in decided because the client's share of the stack was spent.
    pub skipped: u64,
}

/// `conns` connections of one client process on A each send `each` bytes to a sink on B at
/// once, the client's grafts charged to `share` (`None`: a share of the kernel's size);
/// `between` runs after every step of the stacks. Panics if a byte arrives wrong or the
/// transfer takes more than ten simulated minutes.
pub fn transfers(
    faults: Faults,
    builtin: CongestionControl,
    slot: &Arc<GraftSlot<Congestion>>,
    (conns, each): (usize, usize),
    share: Option<Arc<StackShare>>,
    between: &mut dyn FnMut(),
) -> Run {
    let share = share.unwrap_or_default();
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
    let (ea, eb) = wire();
    let stack = |end, me, seed: u64| {
        let host = |h: &mut HostConfig| {
            h.faults = Faults { seed, ..faults };
            h.egress = vec![(B, 32)];
        };
        let config = NetConfig {
            seed: Some(seed ^ 0x5eed),
            ..NetConfig::default()
        };
        wired(&clock, end, me, host, config)
    };
    let (a, b) = (stack(ea, A, faults.seed), stack(eb, B, faults.seed + 1));
    let trace = Arc::new(Mutex::new(Vec::new()));
    let client = Owner {
        pid: 2,
        uid: 1000,
        account: None,
        congestion: Some(CongestionConfig {
            slot: slot.clone(),
            builtin,
            trace: Some(trace.clone()),
            share: share.clone(),
        }),
    };
    let server = Owner {
        pid: 1,
        uid: 1000,
        ..Owner::default()
    };
    let listener = b.tcp_listen(&server, PORT, conns + 1).unwrap();
    let to = SocketAddrV4::new(B, PORT);
    let out: Vec<_> = (0..conns)
        .map(|_| a.tcp_connect(&client, to, Wait::No).unwrap())
        .collect();
    let mut sent = vec![0usize; conns];
    // Each accepted connection and its bytes so far; which client it is shows in its bytes.
    let mut sinks: Vec<(u64, usize)> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let start = clock.monotonic();
    while sinks.len() < conns || sinks.iter().any(|s| s.1 < each) {
        assert!(
            clock.monotonic() - start < Duration::from_secs(600),
            "{builtin:?}: {sinks:?} of {conns} x {each} bytes in ten simulated minutes; {:?}",
            slot.stats()
        );
        if let Ok((c, _)) = b.accept(&server, listener, Wait::No) {
            sinks.push((c, 0));
        }
        for (i, &conn) in out.iter().enumerate() {
            if sent[i] < each {
                let chunk: Vec<u8> = (sent[i]..each.min(sent[i] + 16384)).map(|k| k as u8).collect();
                match a.send(&client, conn, &chunk, Wait::No) {
                    Ok(n) => sent[i] += n,
                    Err(NetError::WouldBlock | NetError::NotConnected) => {}
                    Err(e) => panic!("send: {e}"),
                }
            }
        }
        for (c, got) in sinks.iter_mut() {
            match b.recv(&server, *c, &mut buf, Wait::No) {
                Ok(n) => {
                    for (k, byte) in buf[..n].iter().enumerate() {
                        assert_eq!(*byte, (*got + k) as u8, "byte {}", *got + k);
                    }
                    *got += n;
                }
                Err(NetError::WouldBlock) => {}
                Err(e) => panic!("recv: {e}"),
            }
        }
        let due = settle(&mut [&mut || a.step(), &mut || b.step()]);
        clock.advance(due.unwrap_or(Duration::from_millis(10)).max(Duration::from_micros(50)));
        between();
    }
    let took = clock.monotonic() - start;
    let trace = trace.lock().clone();
    Run {
        trace,
        took,
        skipped: share.skipped(),
    }
}
