//! The loopback link, with faults of VINO's own: this kernel has no `sch_netem`, so the link
//! layer loses, duplicates, reorders and delays frames itself, by seeded odds ([`Faults`]),
//! the same seed giving the same faults for the same traffic. Frames from outside the stack
//! (a fuzzer's) enter here too ([`crate::Net::inject`]).

use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::time::{Duration, Instant};
use std::collections::VecDeque;
use vino_clock::SplitMix64;

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

/// A loopback device: every frame sent is received, in order unless the faults say otherwise.
pub(crate) struct Link {
    /// Frames and the time each may be received at.
    queue: VecDeque<(Instant, Vec<u8>)>,
    faults: Faults,
    rng: SplitMix64,
    mtu: usize,
    pub(crate) stats: LinkStats,
}

impl Link {
    pub(crate) fn new(faults: Faults, mtu: usize) -> Link {
        Link {
            queue: VecDeque::new(),
            faults,
            rng: SplitMix64::new(faults.seed),
            mtu,
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

    /// A frame the stack sent, through the faults.
    fn carry(&mut self, frame: Vec<u8>, now: Instant) {
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

impl Device for Link {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.max_transmission_unit = self.mtu;
        caps.medium = Medium::Ip;
        // A frame on this link is never corrupted (only lost, copied or moved): no checksums
        // to compute or check. Frames injected from outside are taken as they come, which lets
        // a fuzzer's frames reach the protocols' state machines.
        caps.checksum = ChecksumCapabilities::ignored();
        caps
    }

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // The first frame that is due (a delayed frame holds back none behind it that is due).
        let i = self.queue.iter().position(|(at, _)| *at <= now)?;
        let (_, frame) = self.queue.remove(i)?;
        Some((RxToken { frame }, TxToken { link: self, now }))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        Some(TxToken { link: self, now })
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
    link: &'a mut Link,
    now: Instant,
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = vec![0; len];
        let r = f(&mut frame);
        self.link.carry(frame, self.now);
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
            let mut link = Link::new(faults, 65535);
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
        let mut link = Link::new(faults, 65535);
        link.carry(vec![1], Instant::from_millis(0));
        assert!(link.receive(Instant::from_millis(4)).is_none());
        assert_eq!(link.next_due(Instant::from_millis(4)), Some(Instant::from_millis(5)));
        assert!(link.receive(Instant::from_millis(5)).is_some());
    }
}
