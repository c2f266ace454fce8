//! Who holds which port: a port is one user's while bound, ports below 1024 are root's to give,
//! and connections get ephemeral ports from the top of the range.
//!
//! A connection made without a bind shares its ephemeral port with connections to other peers
//! (Linux's `connect` does the same): a connection is told apart by its four addresses, so the
//! range of 16384 ports runs out only for connections to one peer. Users together cannot use
//! it up for each other: one user's connections to a server leave every port free for another
//! user's connections to any other.

use crate::NetError;
use std::collections::HashMap;
use std::net::SocketAddrV4;

/// How a socket holds its local port, to be let go when it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortHold {
    /// Alone: bound, listening, or connected from a port it bound.
    Alone(u16),
    /// Shared with connections to other peers: connected to `peer` without a bind.
    Shared(u16, SocketAddrV4),
}

impl PortHold {
    /// A bound socket's hold: alone, or shared for a connection to `peer`.
    pub(crate) fn of(port: u16, peer: Option<SocketAddrV4>) -> PortHold {
        match peer {
            Some(p) => PortHold::Shared(port, p),
            None => PortHold::Alone(port),
        }
    }

    pub(crate) fn port(self) -> u16 {
        match self {
            PortHold::Alone(p) | PortHold::Shared(p, _) => p,
        }
    }
}

/// The first ephemeral port (IANA's dynamic range, as Linux's default starts higher but ends
/// at the same place).
pub const EPHEMERAL_FIRST: u16 = 49152;
/// Ports below this need privilege (uid 0) to bind.
pub const PRIVILEGED_BELOW: u16 = 1024;

/// The TCP ports in use.
#[derive(Debug, Default)]
pub(crate) struct Ports {
    /// The user holding each port bound alone.
    held: HashMap<u16, u32>,
    /// Ports shared by connections made without a bind: by peer, the user of each.
    shared: HashMap<u16, HashMap<SocketAddrV4, u32>>,
    /// Where the search for the next ephemeral port starts (round robin, so a port just
    /// released is not handed out again at once).
    next: u16,
}

impl Ports {
    /// Binds `port` for `uid`: refused below 1024 without privilege, and if anyone holds it.
    pub(crate) fn bind(&mut self, uid: u32, port: u16) -> Result<(), NetError> {
        if port < PRIVILEGED_BELOW && uid != 0 {
            return Err(NetError::Privileged(port));
        }
        if port == 0 || self.held.contains_key(&port) || self.shared.contains_key(&port) {
            return Err(NetError::AddrInUse(port));
        }
        self.held.insert(port, uid);
        Ok(())
    }

    /// Binds `port` for `uid` as [`Ports::bind`] does, or for 0 a free ephemeral port: the
    /// port now held.
    pub(crate) fn take(&mut self, uid: u32, port: u16) -> Result<u16, NetError> {
        match port {
            0 => self.ephemeral(uid),
            p => self.bind(uid, p).map(|()| p),
        }
    }

    /// A free ephemeral port, now held by `uid` alone.
    pub(crate) fn ephemeral(&mut self, uid: u32) -> Result<u16, NetError> {
        let port = self.next_free(|ports, p| !ports.held.contains_key(&p) && !ports.shared.contains_key(&p))?;
        self.held.insert(port, uid);
        Ok(port)
    }

    /// An ephemeral port for `uid`'s connection to `peer`, shared with connections to others:
    /// any port not bound alone and not used for a connection to `peer` already.
    pub(crate) fn for_peer(&mut self, uid: u32, peer: SocketAddrV4) -> Result<u16, NetError> {
        let port = self.next_free(|ports, p| {
            !ports.held.contains_key(&p) && !ports.shared.get(&p).is_some_and(|peers| peers.contains_key(&peer))
        })?;
        self.shared.entry(port).or_default().insert(peer, uid);
        Ok(port)
    }

    /// The first ephemeral port from where the last search ended that `free` takes.
    fn next_free(&mut self, free: impl Fn(&Ports, u16) -> bool) -> Result<u16, NetError> {
        let span = u32::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        let start = self.next.max(EPHEMERAL_FIRST);
        for i in 0..span {
            let port = EPHEMERAL_FIRST + ((u32::from(start - EPHEMERAL_FIRST) + i) % span) as u16;
            if free(self, port) {
                self.next = port.checked_add(1).unwrap_or(EPHEMERAL_FIRST);
                return Ok(port);
            }
        }
        Err(NetError::NoPorts)
    }

    pub(crate) fn release(&mut self, port: u16) {
        let held = self.held.remove(&port);
        debug_assert!(held.is_some(), "released port {port}, which nobody held");
    }

    /// Lets go of a socket's hold on its port.
    pub(crate) fn let_go(&mut self, hold: PortHold) {
        match hold {
            PortHold::Alone(port) => self.release(port),
            PortHold::Shared(port, peer) => {
                let peers = self.shared.get_mut(&port);
                let held = peers.and_then(|peers| {
                    let held = peers.remove(&peer);
                    (held.is_some() && peers.is_empty()).then_some(())
                });
                if held.is_some() {
                    self.shared.remove(&port);
                }
            }
        }
    }

    /// The user a packet from `peer` to `port` is for, if anyone holds the port for it.
    pub(crate) fn holder_for(&self, port: u16, peer: SocketAddrV4) -> Option<u32> {
        self.held
            .get(&port)
            .or_else(|| self.shared.get(&port).and_then(|peers| peers.get(&peer)))
            .copied()
    }

    /// The user holding `port`, if anyone does.
    pub(crate) fn holder(&self, port: u16) -> Option<u32> {
        self.held.get(&port).copied()
    }

    /// Holds in use: ports bound alone, and connections on shared ports.
    pub(crate) fn in_use(&self) -> usize {
        self.held.len() + self.shared.values().map(HashMap::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_one_users_and_the_low_ones_roots() {
        let mut p = Ports::default();
        assert_eq!(p.bind(1000, 80), Err(NetError::Privileged(80)));
        p.bind(0, 80).unwrap();
        p.bind(1000, 8080).unwrap();
        assert_eq!(p.bind(1001, 8080), Err(NetError::AddrInUse(8080)));
        assert_eq!(p.bind(1000, 8080), Err(NetError::AddrInUse(8080)));
        p.release(8080);
        p.bind(1001, 8080).unwrap();
        let a = p.ephemeral(1000).unwrap();
        let b = p.ephemeral(1000).unwrap();
        assert!(a >= EPHEMERAL_FIRST && b != a);
        assert_eq!(p.in_use(), 4);
    }

    #[test]
    fn connections_share_ephemeral_ports_across_peers_and_binds_keep_out() {
        let mut p = Ports::default();
        let server = |port| SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 1), port);
        // One user uses every port for connections to one server...
        for _ in EPHEMERAL_FIRST..=u16::MAX {
            p.for_peer(1000, server(80)).unwrap();
        }
        assert_eq!(p.for_peer(1000, server(80)), Err(NetError::NoPorts));
        // ...and another user still connects anywhere else, from ports the first one uses.
        let port = p.for_peer(1001, server(443)).unwrap();
        assert_eq!(p.holder_for(port, server(80)), Some(1000));
        assert_eq!(p.holder_for(port, server(443)), Some(1001));
        assert_eq!(p.holder_for(port, server(22)), None);
        // A port in use by connections cannot be bound alone, nor handed out alone.
        assert_eq!(p.bind(1002, port), Err(NetError::AddrInUse(port)));
        assert_eq!(p.ephemeral(1002), Err(NetError::NoPorts));
        p.let_go(PortHold::Shared(port, server(80)));
        p.let_go(PortHold::Shared(port, server(443)));
        assert_eq!(p.ephemeral(1002), Ok(port));
        assert_eq!(p.for_peer(1001, server(80)).ok(), None, "the bound port is not shared");
        p.let_go(PortHold::Alone(port));
        assert_eq!(p.for_peer(1001, server(80)), Ok(port));
        assert_eq!(p.in_use(), 16384);
    }

    #[test]
    fn ephemeral_ports_run_out_with_a_clear_error() {
        let mut p = Ports::default();
        for _ in EPHEMERAL_FIRST..=u16::MAX {
            p.ephemeral(1).unwrap();
        }
        assert_eq!(p.ephemeral(1), Err(NetError::NoPorts));
        p.release(50000);
        assert_eq!(p.ephemeral(1), Ok(50000));
    }
}
