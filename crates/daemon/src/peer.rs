//! Who is at the other end of a connection: SO_PEERCRED, and the groups from /proc.

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::os::unix::net::UnixStream;

/// The identity of a connected process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (empty if /proc could not tell).
    pub groups: Vec<u32>,
}

impl Peer {
    /// The credentials the kernel gave the socket's peer when it connected.
    pub fn of(stream: &UnixStream) -> std::io::Result<Peer> {
        let cred = getsockopt(stream, PeerCredentials)?;
        let pid = cred.pid().max(0) as u32;
        Ok(Peer {
            pid,
            uid: cred.uid(),
            gid: cred.gid(),
            groups: groups_of(pid),
        })
    }

    /// True if the peer is root or in group `gid`.
    pub fn privileged(&self, gid: Option<u32>) -> bool {
        self.uid == 0 || gid.is_some_and(|g| self.gid == g || self.groups.contains(&g))
    }
}

/// The supplementary groups of process `pid` (the `Groups:` line of its status).
fn groups_of(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    parse_groups(&status)
}

fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_come_from_the_status_line() {
        assert_eq!(
            parse_groups("Name:\tx\nGroups:\t4 24 1000 \nNgid:\t0\n"),
            vec![4, 24, 1000]
        );
        assert_eq!(parse_groups("Groups:\n"), Vec::<u32>::new());
        let p = Peer {
            pid: 1,
            uid: 1000,
            gid: 1000,
            groups: vec![27],
        };
        assert!(p.privileged(Some(27)) && !p.privileged(Some(28)) && !p.privileged(None));
    }

    #[test]
    fn a_socket_pair_sees_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = Peer::of(&a).unwrap();
        assert_eq!(p.pid, std::process::id());
        assert_eq!(p.uid, nix::unistd::getuid().as_raw());
    }
}
