//! Who is at the other end of a connection: SO_PEERCRED and SO_PEERGROUPS, both as the kernel
//! recorded them when the client connected.
//!
//! The supplementary groups come with the socket too (`SO_PEERGROUPS`, Linux 4.13 and later), so
//! they are the groups the client had at `connect`, not whatever its pid holds later: a client
//! that drops a group after connecting, or a pid reused by another program, changes nothing.
//! Only a kernel that refuses the option (`ENOPROTOOPT`) makes the daemon read
//! `/proc/<pid>/status` instead, which is racy in exactly those ways.

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// The identity of a connected process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Peer {
    /// The credentials the kernel gave the socket's peer when it connected.
    pub fn of(stream: &UnixStream) -> io::Result<Peer> {
        let cred = getsockopt(stream, PeerCredentials)?;
        let pid = cred.pid().max(0) as u32;
        let groups = match peer_groups(stream.as_fd()) {
            Ok(g) => g,
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => groups_of(pid),
            Err(e) => return Err(e),
        };
        Ok(Peer {
            pid,
            uid: cred.uid(),
            gid: cred.gid(),
            groups,
        })
    }

    /// True if the peer is root or in group `gid`.
    pub fn privileged(&self, gid: Option<u32>) -> bool {
        self.uid == 0 || gid.is_some_and(|g| self.gid == g || self.groups.contains(&g))
    }
}

/// The supplementary groups the socket's peer had when it connected (`SO_PEERGROUPS`). The
/// buffer grows as the kernel asks (`ERANGE` with the size needed).
fn peer_groups(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    peer_groups_with(fd, 64)
}

/// [`peer_groups`], first asking with room for `room` groups.
fn peer_groups_with(fd: BorrowedFd<'_>, room: usize) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; room];
    loop {
        let mut len = (groups.len() * size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a buffer of `len` writable bytes (aligned for gid_t) that lives
        // through the call, `len` is a valid socklen_t the kernel may write, and the descriptor
        // is borrowed, so open, for as long.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let got = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(got);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        // The kernel says how much it needs; ask for at least one more group, so the loop ends
        // even if it did not.
        if e.raw_os_error() == Some(libc::ERANGE) && groups.len() < 1 << 16 {
            groups.resize(got.max(groups.len() + 1).max(groups.len() * 2).min(1 << 16), 0);
            continue;
        }
        return Err(e);
    }
}

/// The supplementary groups of process `pid` (the `Groups:` line of its status), for kernels
/// without `SO_PEERGROUPS`; empty if /proc cannot tell.
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

    /// This process's supplementary groups, as `getgroups` gives them.
    fn my_groups() -> Vec<u32> {
        let mut groups = nix::unistd::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect::<Vec<_>>();
        groups.sort_unstable();
        groups
    }

    #[test]
    fn a_socket_pair_sees_this_process_and_its_groups() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = Peer::of(&a).unwrap();
        assert_eq!(p.pid, std::process::id());
        assert_eq!(p.uid, nix::unistd::getuid().as_raw());
        assert_eq!(p.gid, nix::unistd::getgid().as_raw());
        let mut groups = p.groups.clone();
        groups.sort_unstable();
        assert_eq!(groups, my_groups());
        // The socket's own answer, not /proc's.
        for room in [0, 1, 64] {
            let mut direct = peer_groups_with(a.as_fd(), room).unwrap();
            direct.sort_unstable();
            assert_eq!(direct, my_groups(), "first asking with room for {room}");
        }
    }

    /// Credentials are per thread in Linux: a thread that takes other groups (with the raw
    /// system call, which glibc would apply to every thread) and makes a socket pair is seen
    /// with its groups, while /proc shows the process's. The daemon goes by the socket.
    #[test]
    fn the_groups_are_the_connecting_threads_not_what_proc_shows() {
        // SAFETY: geteuid takes no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to take other groups");
            return;
        }
        let (a, _b) = std::thread::spawn(|| {
            let groups: [libc::gid_t; 2] = [4242, 4243];
            // SAFETY: setgroups reads `groups.len()` gids from the array, which lives through
            // the call; the raw system call changes this thread's credentials only, and the
            // thread ends right after.
            let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
            assert_eq!(rc, 0, "setgroups: {}", io::Error::last_os_error());
            UnixStream::pair().unwrap()
        })
        .join()
        .unwrap();
        let mut seen = Peer::of(&a).unwrap().groups;
        seen.sort_unstable();
        assert_eq!(seen, vec![4242, 4243]);
        let mut proc = groups_of(std::process::id());
        proc.sort_unstable();
        assert_eq!(proc, my_groups(), "/proc shows the process's groups");
    }
}
