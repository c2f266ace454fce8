//! Who holds which port: a port is one user's while bound, ports below 1024 are root's to give,
//! and connections get ephemeral ports from the top of the range.

use crate::NetError;
use std::collections::HashMap;

/// The first ephemeral port (IANA's dynamic range, as Linux's default starts higher but ends
/// at the same place).
pub const EPHEMERAL_FIRST: u16 = 49152;
/// Ports below this need privilege (uid 0) to bind.
pub const PRIVILEGED_BELOW: u16 = 1024;

/// The TCP ports in use.
#[derive(Debug, Default)]
pub(crate) struct Ports {
    /// The user holding each port in use.
    held: HashMap<u16, u32>,
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
        if port == 0 || self.held.contains_key(&port) {
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

    /// A free ephemeral port, now held by `uid`.
    pub(crate) fn ephemeral(&mut self, uid: u32) -> Result<u16, NetError> {
        let span = u32::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        let start = self.next.max(EPHEMERAL_FIRST);
        for i in 0..span {
            let port = EPHEMERAL_FIRST + ((u32::from(start - EPHEMERAL_FIRST) + i) % span) as u16;
            if let std::collections::hash_map::Entry::Vacant(e) = self.held.entry(port) {
                e.insert(uid);
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

    /// The user holding `port`, if anyone does.
    pub(crate) fn holder(&self, port: u16) -> Option<u32> {
        self.held.get(&port).copied()
    }

    pub(crate) fn in_use(&self) -> usize {
        self.held.len()
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
