//! The stack's links: the loopback that always exists, and the link to the host's network
//! that root may attach ([`HostConfig`]: a TUN device, `vino-hostlink`, or in a simulation a
//! [`WireEnd`] to another stack in the same process). One smoltcp interface runs over both
//! ([`Links`]): a packet sent goes to the loopback if it is for VINO itself, else to the host.
//!
//! Each way of each link has faults of VINO's own: this kernel has no `sch_netem`, so the link
//! layer loses, duplicates, reorders and delays packets itself, by seeded odds ([`Faults`]),
//! the same seed giving the same faults for the same traffic. Packets from outside the stack
//! (a fuzzer's) enter here too ([`crate::Net::inject`]).

use crate::demux::{Demux, Principal};
use crate::egress::{Egress, EgressStats};
use parking_lot::Mutex;
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, IpProtocol};
use std::collections::VecDeque;
use std::hash::Hasher;
use std::net::Ipv4Addr;
use std::sync::Arc;
use vino_clock::SplitMix64;
use vino_hostlink::batch::{Moved, Writer};

/// The faults the link injects, each frame drawn on its own: lost with odds `loss`, sent
/// twice with odds `duplicate`, put before the frame queued ahead of it with odds `reorder`,
/// and held `delay` before it may be received. All zero (the default): a perfect link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    pub seed: u64,
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub delay: std::time::Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            seed: 0,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            delay: std::time::Duration::ZERO,
        }
    }
}

impl Faults {
    fn any(&self) -> bool {
        self.loss > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0 || !self.delay.is_zero()
    }
}

/// What the link did to the frames it carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    /// Frames from outside the stack ([`crate::Net::inject`]).
    pub injected: u64,
}

/// Most frames the link holds: past it a frame is dropped, as a full queue drops it.
pub const LINK_QUEUE: usize = 4096;

/// A queue of frames with faults: every frame put in comes out, in order, unless the faults
/// say otherwise. The loopback is one; the host link has one each way.
pub(crate) struct Link {
    /// Frames and the time each may be received at.
    queue: VecDeque<(Instant, Vec<u8>)>,
    faults: Faults,
    rng: SplitMix64,
    pub(crate) stats: LinkStats,
}

impl Link {
    pub(crate) fn new(faults: Faults) -> Link {
        Link {
            queue: VecDeque::new(),
            faults,
            rng: SplitMix64::new(faults.seed),
            stats: LinkStats::default(),
        }
    }

    /// When the first held frame may be received, if one is held for later than `now`.
    pub(crate) fn next_due(&self, now: Instant) -> Option<Instant> {
        self.queue.iter().map(|(at, _)| *at).filter(|at| *at > now).min()
    }

    /// Puts a frame from outside on the link, to be received next.
    pub(crate) fn inject(&mut self, frame: &[u8], now: Instant) {
        if self.queue.len() < LINK_QUEUE {
            self.stats.injected += 1;
            self.queue.push_back((now, frame.to_vec()));
        }
    }

    /// The first frame that is due (a delayed frame holds back none behind it that is due).
    fn take_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        let i = self.queue.iter().position(|(at, _)| *at <= now)?;
        self.queue.remove(i).map(|(_, f)| f)
    }

    fn has_due(&self, now: Instant) -> bool {
        self.queue.iter().any(|(at, _)| *at <= now)
    }

    /// A frame put on the link, through the faults.
    pub(crate) fn carry(&mut self, frame: Vec<u8>, now: Instant) {
        self.stats.sent += 1;
        if !self.faults.any() {
            if self.queue.len() < LINK_QUEUE {
                self.queue.push_back((now, frame));
            }
            return;
        }
        if self.rng.chance(self.faults.loss) {
            self.stats.lost += 1;
            return;
        }
        let at = now + Duration::from_micros(self.faults.delay.as_micros() as u64);
        let copies = if self.rng.chance(self.faults.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if self.queue.len() >= LINK_QUEUE {
                return;
            }
            if !self.queue.is_empty() && self.rng.chance(self.faults.reorder) {
                self.stats.reordered += 1;
                // Ahead of the last frame queued (and due when it is, so it goes first).
                let last_at = self.queue.back().map_or(at, |(t, _)| *t);
                let i = self.queue.len() - 1;
                self.queue.insert(i, (last_at.min(at), frame.clone()));
            } else {
                self.queue.push_back((at, frame.clone()));
            }
        }
    }
}

/// What carries the host link's packets.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkDevice {
    /// A Linux TUN device of this name: made if absent, and gone when VINO closes it.
    Tun(String),
    /// One end of a wire to another stack in this process: a simulation's hosts, on one clock,
    /// with no device or thread between them.
    Wire(WireEnd),
}

impl std::fmt::Display for LinkDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkDevice::Tun(name) => f.write_str(name),
            LinkDevice::Wire(_) => f.write_str("a simulated wire"),
        }
    }
}

/// One end of a simulated wire ([`wire`]): what one stack's host link sends, the other's
/// receives, through the same path as a TUN device's packets (the link's faults, the martian
/// checks, the sorting by principal). Each way holds at most [`LINK_QUEUE`] packets, as a
/// device's queue would; past it a packet is refused.
#[derive(Clone)]
pub struct WireEnd {
    to_peer: Arc<Mutex<WireWay>>,
    from_peer: Arc<Mutex<WireWay>>,
}

#[derive(Default)]
struct WireWay {
    packets: VecDeque<Vec<u8>>,
    /// A hash of every packet put on this way, in order: a simulation compares two runs of a
    /// seed by it.
    trace: u64,
}

/// A wire with two ends, nothing on it.
pub fn wire() -> (WireEnd, WireEnd) {
    let (a, b) = (Arc::<Mutex<WireWay>>::default(), Arc::<Mutex<WireWay>>::default());
    (
        WireEnd {
            to_peer: a.clone(),
            from_peer: b.clone(),
        },
        WireEnd {
            to_peer: b,
            from_peer: a,
        },
    )
}

impl WireEnd {
    /// Puts `batch` on the wire (emptying it); how many packets went and how many were refused.
    fn send(&self, batch: &mut Vec<Vec<u8>>) -> Moved {
        let mut way = self.to_peer.lock();
        let room = LINK_QUEUE.saturating_sub(way.packets.len());
        let refused = batch.len().saturating_sub(room);
        let mut moved = 0;
        for p in batch.drain(..).take(room) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            h.write_u64(way.trace);
            h.write(&p);
            way.trace = h.finish();
            way.packets.push_back(p);
            moved += 1;
        }
        Moved {
            packets: moved,
            refused,
        }
    }

    /// Everything the peer has put on the wire since the last call.
    fn take(&self) -> Vec<Vec<u8>> {
        self.from_peer.lock().packets.drain(..).collect()
    }

    /// Whether the peer has put packets on the wire that this end has not taken.
    fn has_arrivals(&self) -> bool {
        !self.from_peer.lock().packets.is_empty()
    }

    /// A hash of every packet this end has sent, in order.
    pub fn trace(&self) -> u64 {
        self.to_peer.lock().trace
    }
}

/// Runs stacks joined by wires (each `step` a stack's [`crate::Net::step`]), in turn, until
/// none has anything due now: what one sends the next takes in the same call. The answer is
/// how soon, on their clock, one of them has something due (`None`: nothing is pending). A
/// simulation then moves the clock that far. Gives up after `ROUNDS` rounds (stacks that
/// always have work now are a bug the caller sees as a due of zero).
pub fn settle(steps: &mut [&mut dyn FnMut() -> Option<std::time::Duration>]) -> Option<std::time::Duration> {
    const ROUNDS: usize = 1000;
    let mut dues = vec![Some(std::time::Duration::ZERO); steps.len()];
    for _ in 0..ROUNDS {
        for (step, due) in steps.iter_mut().zip(dues.iter_mut()) {
            *due = step();
        }
        // A stack stepped before another sent may have packets now: one more look at each.
        let quiet = steps.iter_mut().zip(dues.iter_mut()).all(|(step, due)| {
            *due = step();
            *due != Some(std::time::Duration::ZERO)
        });
        if quiet {
            break;
        }
    }
    dues.into_iter().flatten().min()
}

impl std::fmt::Debug for WireEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireEnd").finish_non_exhaustive()
    }
}

impl PartialEq for WireEnd {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.to_peer, &other.to_peer)
    }
}

/// The link to the host's network, as root configures it (the daemon's `[net]` section).
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// What carries the packets: a TUN device, or a simulation's wire.
    pub device: LinkDevice,
    /// VINO's address on the link, and the length of the prefix it reaches directly.
    pub address: Ipv4Addr,
    pub prefix: u8,
    /// The host's own address on the device, set by VINO when given (`None`: root sets it).
    pub host_address: Option<Ipv4Addr>,
    /// Where packets for beyond the prefix go (`None`: nowhere, ENETUNREACH).
    pub gateway: Option<Ipv4Addr>,
    /// Which destinations users other than root may send to: prefixes (address, length). Empty:
    /// none; root's packets are not held to it.
    pub egress: Vec<(Ipv4Addr, u8)>,
    /// Largest packet on the link (the device's MTU). The one interface takes the smaller of
    /// this and the loopback's, so loopback traffic then uses it too.
    pub mtu: usize,
    /// Faults of VINO's link layer, each way.
    pub faults: Faults,
    /// The way out's rate and queues (`None`: packets go out as they are sent; see `egress`).
    pub shaping: Option<crate::egress::Shaping>,
}

impl HostConfig {
    /// TUN device `device` with VINO at `address/prefix`: MTU 1500, no host address set, no
    /// gateway, users may reach nowhere, no faults.
    pub fn new(device: &str, address: Ipv4Addr, prefix: u8) -> HostConfig {
        HostConfig::on(LinkDevice::Tun(device.to_owned()), address, prefix)
    }

    /// The same over any device.
    pub fn on(device: LinkDevice, address: Ipv4Addr, prefix: u8) -> HostConfig {
        HostConfig {
            device,
            address,
            prefix,
            host_address: None,
            gateway: None,
            egress: Vec::new(),
            mtu: 1500,
            faults: Faults::default(),
            shaping: None,
        }
    }

    /// A prefix written `a.b.c.d/len` (a bare address is its own /32).
    pub fn parse_prefix(text: &str) -> Result<(Ipv4Addr, u8), String> {
        let (addr, len) = text.split_once('/').unwrap_or((text, "32"));
        let addr: Ipv4Addr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not an IPv4 address or prefix"))?;
        match len.trim().parse::<u8>() {
            Ok(len) if len <= 32 => Ok((addr, len)),
            _ => Err(format!("{text:?}: a prefix length is 0 to 32")),
        }
    }

    /// Whether `a` is in the prefix `(net, len)`.
    pub fn contains((net, len): (Ipv4Addr, u8), a: Ipv4Addr) -> bool {
        let mask = u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0);
        u32::from(net) & mask == u32::from(a) & mask
    }

    pub(crate) fn on_link(&self, a: Ipv4Addr) -> bool {
        HostConfig::contains((self.address, self.prefix), a)
    }
}

/// What the host link moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Packets handed to the host, and those it refused (its side down, no memory).
    pub sent: u64,
    pub refused: u64,
    /// Packets from the host taken in, and those dropped before the stack: addressed to or
    /// from the loopback network or VINO's own address (no host may reach VINO's loopback), or
    /// not IPv4.
    pub received: u64,
    pub martians: u64,
    /// What VINO's own faults did to the packets, both ways together.
    pub faults: LinkStats,
    /// What the way out's queues did, with a rate.
    pub shaped: Option<EgressStats>,
}

/// Where the host link's packets go.
pub(crate) enum Outlet {
    /// A TUN device, written in batches (boxed: its ring is large, and there is one).
    Tun(Box<Writer>),
    /// A simulation's wire.
    Wire(WireEnd),
}

/// The host link's state inside the stack: its queues (with their faults) and its outlet.
/// A TUN device's packets are read on a thread of their own (`stack::run_host`); a wire's are
/// taken when the stack runs ([`HostLink::pull`]).
pub(crate) struct HostLink {
    pub(crate) config: HostConfig,
    out: Link,
    inbound: Link,
    /// What came in, sorted by whom it is for, waiting for the stack.
    pub(crate) demux: Demux,
    /// With a rate: the way out's queues.
    pub(crate) egress: Option<Egress>,
    batch: Vec<Vec<u8>>,
    outlet: Outlet,
    pub(crate) stats: HostStats,
}

impl HostLink {
    pub(crate) fn new(config: HostConfig, outlet: Outlet) -> HostLink {
        let mut back = config.faults;
        back.seed = back.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        HostLink {
            out: Link::new(config.faults),
            inbound: Link::new(back),
            demux: Demux::default(),
            egress: None,
            config,
            batch: Vec::new(),
            outlet,
            stats: HostStats::default(),
        }
    }

    /// Packets the host sent VINO, through the faults of the way in.
    pub(crate) fn arrived(&mut self, packets: Vec<Vec<u8>>, now: Instant) {
        for p in packets {
            let ok = ipv4_addrs(&p).is_some_and(|(src, dst)| {
                !src.is_loopback() && !dst.is_loopback() && src != self.config.address && dst == self.config.address
            });
            if ok {
                self.stats.received += 1;
                self.inbound.carry(p, now);
            } else {
                self.stats.martians += 1;
            }
        }
    }

    /// What it moved, with both ways' faults.
    pub(crate) fn stats(&self) -> HostStats {
        let (o, i) = (self.out.stats, self.inbound.stats);
        HostStats {
            faults: LinkStats {
                sent: o.sent + i.sent,
                lost: o.lost + i.lost,
                duplicated: o.duplicated + i.duplicated,
                reordered: o.reordered + i.reordered,
                injected: o.injected + i.injected,
            },
            shaped: self.egress.as_ref().map(Egress::stats),
            ..self.stats
        }
    }

    /// Takes what the peer put on a wire (a TUN device's packets come from its reader).
    pub(crate) fn pull(&mut self, now: Instant) {
        if let Outlet::Wire(end) = &self.outlet {
            let packets = end.take();
            self.arrived(packets, now);
        }
    }

    /// Sorts the packets that have come in (past the faults of the way in) by whom they are
    /// for: `owner` says who holds a protocol's port.
    pub(crate) fn sort(&mut self, now: Instant, owner: impl Fn(crate::demux::Destination) -> Principal) {
        while let Some(p) = self.inbound.take_due(now) {
            let who = crate::demux::destination(&p).and_then(&owner);
            self.demux.push(who, p);
        }
    }

    /// Writes what is due of the way out to the host, in one batch. With a rate, what the
    /// stack sent is queued first by whom it is from (`owner`, as for [`HostLink::sort`]), and
    /// what the rate allows goes on.
    pub(crate) fn flush(&mut self, now: Instant, owner: impl Fn(crate::demux::Destination) -> Principal) {
        if let Some(egress) = &mut self.egress {
            egress.sort(now, owner);
            let out = &mut self.out;
            egress.release(now, &mut |p| out.carry(p, now));
        }
        while let Some(p) = self.out.take_due(now) {
            self.batch.push(p);
        }
        if !self.batch.is_empty() {
            let Moved { packets, refused } = match &mut self.outlet {
                Outlet::Tun(writer) => writer.write(&mut self.batch),
                Outlet::Wire(end) => end.send(&mut self.batch),
            };
            self.stats.sent += packets as u64;
            self.stats.refused += refused as u64;
        }
    }

    /// A packet the stack sent to the host: on the way out, or queued for it with a rate.
    fn send(&mut self, frame: Vec<u8>, now: Instant) {
        match &mut self.egress {
            Some(egress) => egress.stage(frame),
            None => self.out.carry(frame, now),
        }
    }
}

/// The source and destination of an IPv4 packet.
fn ipv4_addrs(p: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let a = |i: usize| Ipv4Addr::new(p[i], p[i + 1], p[i + 2], p[i + 3]);
    Some((a(12), a(16)))
}

/// The device the interface runs over: the loopback, and the host link if one is attached.
pub(crate) struct Links {
    pub(crate) loopback: Link,
    pub(crate) host: Option<HostLink>,
    /// Which link the last packet received came from: the next turn is the other's.
    host_turn: bool,
    mtu: usize,
}

impl Links {
    pub(crate) fn new(loopback: Link, host: Option<HostLink>, mtu: usize) -> Links {
        Links {
            loopback,
            host,
            host_turn: false,
            mtu,
        }
    }

    /// When the first held packet may be received, if one is held for later than `now`.
    pub(crate) fn next_due(&self, now: Instant) -> Option<Instant> {
        let host = self.host.as_ref().and_then(|h| {
            let arrived = matches!(&h.outlet, Outlet::Wire(end) if end.has_arrivals());
            let waiting = (h.demux.waiting() || arrived).then_some(now);
            let queued = h.egress.as_ref().and_then(|e| e.next_due(now));
            [h.inbound.next_due(now), h.out.next_due(now), waiting, queued]
                .into_iter()
                .flatten()
                .min()
        });
        [self.loopback.next_due(now), host].into_iter().flatten().min()
    }

    /// A packet the stack sent: to the loopback if it is for VINO itself, else to the host.
    /// A packet from a loopback address never leaves.
    fn send(&mut self, frame: Vec<u8>, now: Instant) {
        let host = match (&mut self.host, ipv4_addrs(&frame)) {
            (Some(h), Some((src, dst))) if !dst.is_loopback() && dst != h.config.address => {
                if src.is_loopback() {
                    h.stats.martians += 1;
                    return;
                }
                h
            }
            _ => return self.loopback.carry(frame, now),
        };
        host.send(frame, now);
    }
}

impl Device for Links {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.max_transmission_unit = self.mtu;
        caps.medium = Medium::Ip;
        // A frame on the loopback is never corrupted (only lost, copied or moved): no
        // checksums to check. Frames injected from outside are taken as they come, which lets
        // a fuzzer's frames reach the protocols' state machines. Packets to and from the host
        // carry checksums both ways: the host checks them.
        caps.checksum = if self.host.is_some() {
            ChecksumCapabilities::default()
        } else {
            ChecksumCapabilities::ignored()
        };
        caps
    }

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let host_ready = self.host.as_ref().is_some_and(|h| h.demux.has_ready());
        let from_host = host_ready && (self.host_turn || !self.loopback.has_due(now));
        let frame = match &mut self.host {
            Some(h) if from_host => h.demux.pop(),
            _ => self.loopback.take_due(now),
        }?;
        self.host_turn = !from_host;
        Some((RxToken { frame }, TxToken { links: self, now }))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        Some(TxToken { links: self, now })
    }

    /// A sender to the host is held back while its packets fill its share of the way out's
    /// queue (see `egress`); to the loopback, never.
    fn may_send(&mut self, protocol: IpProtocol, src: u16, dst: Option<IpEndpoint>) -> bool {
        let Some(egress) = self.host.as_mut().and_then(|h| h.egress.as_mut()) else {
            return true;
        };
        let dst = match dst.map(|d| (d.addr, d.port)) {
            Some((IpAddress::Ipv4(a), _)) if a.is_loopback() => return true,
            Some((IpAddress::Ipv4(a), port)) => Some(std::net::SocketAddrV4::new(a, port)),
            _ => None,
        };
        egress.may_send(u8::from(protocol), src, dst)
    }
}

pub(crate) struct RxToken {
    frame: Vec<u8>,
}

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.frame)
    }
}

pub(crate) struct TxToken<'a> {
    links: &'a mut Links,
    now: Instant,
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = vec![0; len];
        let r = f(&mut frame);
        self.links.send(frame, self.now);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let faults = Faults {
            seed: 7,
            loss: 0.2,
            duplicate: 0.2,
            reorder: 0.2,
            delay: std::time::Duration::ZERO,
        };
        let run = || {
            let mut link = Link::new(faults);
            for i in 0..1000u32 {
                link.carry(i.to_le_bytes().to_vec(), Instant::from_micros(0));
            }
            let order: Vec<Vec<u8>> = link.queue.iter().map(|(_, f)| f.clone()).collect();
            (link.stats, order)
        };
        let (a, b) = (run(), run());
        assert_eq!(a, b);
        let s = a.0;
        assert_eq!(s.sent, 1000);
        for n in [s.lost, s.duplicated, s.reordered] {
            assert!((100..300).contains(&n), "{s:?}");
        }
        assert_eq!(a.1.len() as u64, 1000 - s.lost + s.duplicated);
    }

    #[test]
    fn a_delayed_frame_is_received_when_due() {
        let faults = Faults {
            delay: std::time::Duration::from_millis(5),
            ..Faults::default()
        };
        let mut link = Link::new(faults);
        link.carry(vec![1], Instant::from_millis(0));
        assert!(link.take_due(Instant::from_millis(4)).is_none());
        assert_eq!(link.next_due(Instant::from_millis(4)), Some(Instant::from_millis(5)));
        assert!(link.take_due(Instant::from_millis(5)).is_some());
    }
}
