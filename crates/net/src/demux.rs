//! Packets from the host, sorted by whom they are for before any protocol work is done on
//! them (lazy receiver processing, as Resource Containers and Escort charge a packet's work
//! to its receiver): each principal, the user holding the destination port, has a bounded
//! queue of its own, and the stack takes packets from the queues in turn, a bounded number
//! per run. A flood at one user's port fills that user's queue and is dropped there, at the
//! cost of a header read; another user's packets wait behind at most one packet of the
//! flood's per turn, not behind the flood. A socket call runs the stack for its caller's
//! packets only, so a principal's threads do its own packets' work, on their own time (their
//! CPU shares); the host link's and the timers' threads serve every principal in turn.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Whom a packet is for: the user holding its destination port, or nobody's (no port held,
/// or not TCP or UDP: ICMP, a stray reset), which has a queue of its own too.
pub(crate) type Principal = Option<u32>;

/// Most packets one principal's queue holds; past it, that principal's packets are dropped.
pub const DEMUX_QUEUE: usize = 256;
/// Most packets from the host one run of the stack takes (the others wait their turn).
pub const RUN_BUDGET: usize = 64;

/// What the demultiplexer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DemuxStats {
    /// Packets queued, and dropped because their principal's queue was full.
    pub queued: u64,
    pub dropped: u64,
    /// Principals with packets waiting now, and the packets.
    pub principals: usize,
    pub waiting: usize,
}

#[derive(Default)]
pub(crate) struct Demux {
    queues: HashMap<Principal, VecDeque<Vec<u8>>>,
    /// Principals with packets waiting, in the order of their next turn.
    turns: VecDeque<Principal>,
    budget: usize,
    /// Whose packets this run takes: everyone's in turn (`None`), or one principal's (a run
    /// on that principal's own thread, so its packets' work is done on its time).
    serving: Option<Principal>,
    pub(crate) queued: u64,
    pub(crate) dropped: u64,
}

impl Demux {
    /// Queues `packet` for `who`, or drops it if `who`'s queue is full.
    pub(crate) fn push(&mut self, who: Principal, packet: Vec<u8>) {
        let q = self.queues.entry(who).or_default();
        if q.len() >= DEMUX_QUEUE {
            self.dropped += 1;
            return;
        }
        if q.is_empty() {
            self.turns.push_back(who);
        }
        q.push_back(packet);
        self.queued += 1;
    }

    /// A new run of the stack: its budget of packets, and whose they are (`None`: everyone's
    /// in turn).
    pub(crate) fn new_run(&mut self, serving: Option<Principal>) {
        self.budget = RUN_BUDGET;
        self.serving = serving;
    }

    /// The next packet, from the principal whose turn it is (or the one served), while the
    /// run's budget lasts.
    pub(crate) fn pop(&mut self) -> Option<Vec<u8>> {
        if self.budget == 0 {
            return None;
        }
        if let Some(who) = self.serving {
            let q = self.queues.get_mut(&who)?;
            let packet = q.pop_front().expect("a principal's queue is never left empty");
            if q.is_empty() {
                self.queues.remove(&who);
                self.turns.retain(|w| *w != who);
            }
            self.budget -= 1;
            return Some(packet);
        }
        let who = self.turns.pop_front()?;
        let q = self.queues.get_mut(&who).expect("a principal with a turn has a queue");
        let packet = q.pop_front().expect("a principal with a turn has a packet");
        if q.is_empty() {
            self.queues.remove(&who);
        } else {
            self.turns.push_back(who);
        }
        self.budget -= 1;
        Some(packet)
    }

    /// Whether packets wait (for the run after this one, if the budget is spent).
    pub(crate) fn waiting(&self) -> bool {
        !self.turns.is_empty()
    }

    /// Whether this run took any packet.
    pub(crate) fn took(&self) -> bool {
        self.budget < RUN_BUDGET
    }

    pub(crate) fn has_ready(&self) -> bool {
        self.budget > 0
            && match self.serving {
                None => self.waiting(),
                Some(who) => self.queues.contains_key(&who),
            }
    }

    pub(crate) fn stats(&self) -> DemuxStats {
        DemuxStats {
            queued: self.queued,
            dropped: self.dropped,
            principals: self.turns.len(),
            waiting: self.queues.values().map(VecDeque::len).sum(),
        }
    }
}

/// Where a TCP or UDP packet goes, and whom from (a connection is told by both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Destination {
    pub(crate) proto: u8,
    pub(crate) port: u16,
    pub(crate) from: SocketAddrV4,
}

/// The protocol, destination port and source of an IPv4 packet, if it is TCP or UDP.
pub(crate) fn destination(p: &[u8]) -> Option<Destination> {
    let (proto, src, dst) = endpoints(p)?;
    Some(Destination {
        proto,
        port: dst.port(),
        from: src,
    })
}

/// Whom a packet VINO sends is from, told as [`destination`] tells a packet coming in: the
/// protocol, the source port, and the peer it goes to (who holds the port for that peer sent it).
pub(crate) fn source(p: &[u8]) -> Option<Destination> {
    let (proto, src, dst) = endpoints(p)?;
    Some(Destination {
        proto,
        port: src.port(),
        from: dst,
    })
}

/// The protocol and both ends of an IPv4 packet, if it is TCP or UDP and carries its ports.
fn endpoints(p: &[u8]) -> Option<(u8, SocketAddrV4, SocketAddrV4)> {
    let header = usize::from(p.first()? & 0x0f) * 4;
    let proto = *p.get(9)?;
    if !(proto == 6 || proto == 17) || header < 20 {
        return None;
    }
    // A fragment other than the first has no ports.
    let fragment_offset = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]) & 0x1fff;
    if fragment_offset != 0 {
        return None;
    }
    let ports = p.get(header..header + 4)?;
    let addr = |at: usize| p.get(at..at + 4).map(|a| Ipv4Addr::new(a[0], a[1], a[2], a[3]));
    Some((
        proto,
        SocketAddrV4::new(addr(12)?, u16::from_be_bytes([ports[0], ports[1]])),
        SocketAddrV4::new(addr(16)?, u16::from_be_bytes([ports[2], ports[3]])),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_take_turns_and_a_full_queue_drops_only_its_own() {
        let mut d = Demux::default();
        for i in 0..DEMUX_QUEUE + 10 {
            d.push(Some(1), vec![1, i as u8]);
        }
        d.push(Some(2), vec![2]);
        d.push(None, vec![0]);
        assert_eq!(d.dropped, 10);
        d.new_run(None);
        let firsts: Vec<u8> = (0..3).map(|_| d.pop().unwrap()[0]).collect();
        assert_eq!(
            firsts,
            [1, 2, 0],
            "each principal has a turn before the first has another"
        );
        let mut taken = 3;
        while d.pop().is_some() {
            taken += 1;
        }
        assert_eq!(taken, RUN_BUDGET, "a run takes its budget, no more");
        assert!(d.waiting() && !d.has_ready());
        d.new_run(None);
        assert!(d.has_ready());
        assert_eq!(d.stats().waiting, DEMUX_QUEUE - (RUN_BUDGET - 2));
    }

    #[test]
    fn a_run_on_a_principals_thread_takes_only_its_packets() {
        let mut d = Demux::default();
        for i in 0..3 {
            d.push(Some(1), vec![1, i]);
            d.push(Some(2), vec![2, i]);
        }
        d.new_run(Some(Some(2)));
        let taken: Vec<Vec<u8>> = std::iter::from_fn(|| d.pop()).collect();
        assert_eq!(taken, [vec![2, 0], vec![2, 1], vec![2, 2]]);
        assert!(!d.has_ready(), "nothing of principal 2 is left");
        // The others' turns are as they were.
        d.new_run(None);
        let rest: Vec<Vec<u8>> = std::iter::from_fn(|| d.pop()).collect();
        assert_eq!(rest, [vec![1, 0], vec![1, 1], vec![1, 2]]);
        assert!(!d.waiting());
    }

    #[test]
    fn the_destination_and_source_are_read_from_the_header() {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[20..22].copy_from_slice(&5000u16.to_be_bytes());
        p[22..24].copy_from_slice(&8080u16.to_be_bytes());
        let to = destination(&p).unwrap();
        assert_eq!(
            (to.proto, to.port, to.from),
            (6, 8080, "10.0.0.1:5000".parse().unwrap())
        );
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let from = source(&p).unwrap();
        assert_eq!((from.port, from.from), (5000, "10.0.0.2:8080".parse().unwrap()));
        p[9] = 1;
        assert_eq!(destination(&p), None);
        p[9] = 17;
        p[6] = 0x00;
        p[7] = 0x10;
        assert_eq!(destination(&p), None, "a later fragment");
        assert_eq!(destination(&p[..21]), None);
    }
}
