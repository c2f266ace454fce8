//! Who is at the other end of a connection: `SO_PEERCRED` and `SO_PEERGROUPS`, both taken by
//! the kernel when the peer connected, so a process cannot change its groups between connecting
//! and being asked. (`/proc` is read only where the kernel has no `SO_PEERGROUPS`.)

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::os::fd::AsRawFd;
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
            groups: match peer_groups(stream) {
                Ok(groups) => groups,
                Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => groups_of(pid),
                Err(e) => return Err(e),
            },
        })
    }

    /// True if the peer is root or in group `gid`.
    pub fn privileged(&self, gid: Option<u32>) -> bool {
        self.uid == 0 || gid.is_some_and(|g| self.gid == g || self.groups.contains(&g))
    }
}

/// The peer's supplementary groups as they were when it connected (`SO_PEERGROUPS`).
fn peer_groups(stream: &UnixStream) -> std::io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: the buffer is `len` bytes of gid_t that live through the call; the kernel
        // writes at most `len` bytes and says how many in `len`.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        // ERANGE: the buffer was too small; `len` says how much is needed.
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() {
            return Err(e);
        }
        groups.resize(n, 0);
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
        let mut ours: Vec<u32> = nix::unistd::getgroups().unwrap().iter().map(|g| g.as_raw()).collect();
        let mut theirs = p.groups.clone();
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(theirs, ours, "SO_PEERGROUPS gives the peer's supplementary groups");
    }
}
