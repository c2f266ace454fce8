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
//! The links ([`link`]): the loopback over which VINO processes talk to each other, and the link
//! to the host that root attaches (a TUN device, or a simulation's wire to another stack), each
//! with seeded faults of VINO's own. Packets from the host are sorted by principal before any
//! protocol work is done on them ([`demux`]). A process may control its own connections'
//! congestion with a graft ([`congestion`]). The map of the whole network is docs/network.md.

#![forbid(unsafe_code)]

pub mod congestion;
pub mod demux;
pub mod egress;
mod error;
pub mod link;
pub mod ports;
pub mod stack;
pub mod testbed;
pub mod udp;

pub use congestion::{Congestion, CongestionConfig};
pub use demux::DemuxStats;
pub use egress::{EgressStats, PickPacket, Shaping};
pub use error::NetError;
pub use link::{Faults, HostConfig, HostStats, LinkDevice, LinkStats, WireEnd, settle, wire};
pub use stack::{Interest, LOOPBACK, Net, NetConfig, NetStats, Owner, SocketId, SocketInfo, Wait};
pub use udp::MAX_DATAGRAM;
