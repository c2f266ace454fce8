//! VINO's network: a TCP/IP stack in the kernel, and sockets owned and charged per principal.
//!
//! The stack is smoltcp (a well-kept user-space TCP/IP stack), run on the kernel's own thread
//! ([`stack`]). What VINO adds is its own idea: sockets belong to a process and are charged to
//! its account ([`vino_account`]: sockets and buffer bytes, `ENOBUFS` at the limit), ports
//! belong to a user ([`ports`]: below 1024 only root's, one user's while bound), and a listener's
//! pending connections are a pool of listening sockets charged to the listener, because smoltcp
//! has no backlog. Nothing a process opened outlives it ([`Net::close_all`]), and a closed
//! connection stays charged until the stack lets it go.
//!
//! This is the first part of the network (docs/network.md): the loopback link over which VINO
//! processes talk to each other, TCP ([`stack`]) and UDP ([`udp`]). Links to Linux, the WASI
//! socket calls, and the charging of protocol work to the receiving principal before it is done
//! are the next parts.

#![forbid(unsafe_code)]

pub mod demux;
mod error;
pub mod link;
pub mod ports;
pub mod stack;
pub mod udp;

pub use demux::DemuxStats;
pub use error::NetError;
pub use link::{Faults, HostConfig, HostStats, LinkStats};
pub use stack::{Interest, LOOPBACK, Net, NetConfig, NetStats, Owner, SocketId, SocketInfo, Wait};
pub use udp::MAX_DATAGRAM;
