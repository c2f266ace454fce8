//! TCP and UDP sockets of kernel processes, over the kernel's network stack (`vino-net`).
//!
//! A socket belongs to the process that made or accepted it and is charged to its account;
//! ports belong to its user (below 1024 only root's). The stack starts with the first socket
//! call. When the process exits, its sockets are closed (`Kernel::exit_with`).

use crate::{Kernel, Process, SysResult};
use std::net::SocketAddrV4;
use std::task::{Context, Poll};
use vino_net::{Interest, Net, NetConfig, Owner, SocketId, Wait};

impl Kernel {
    /// The network stack, started on first use (one with a host link started at boot).
    pub(crate) fn net(&self) -> &Net {
        self.net.get_or_init(|| {
            Net::new(NetConfig {
                host: None,
                ..self.net_config.clone()
            })
        })
    }

    /// The sockets process `pid` owns (none before the first socket call).
    pub fn sockets_of(&self, pid: u64) -> Vec<vino_net::SocketInfo> {
        self.net.get().map_or_else(Vec::new, |n| n.sockets_of(pid))
    }

    /// Whether `ip` is one of VINO's own addresses: the loopback network's, or its address on
    /// the host link.
    pub fn is_local_address(&self, ip: std::net::Ipv4Addr) -> bool {
        ip.is_loopback() || self.net_config.host.as_ref().is_some_and(|h| h.address == ip)
    }

    /// What the loopback link's faults did (`None` before the first socket call).
    pub fn loopback_stats(&self) -> Option<vino_net::LinkStats> {
        self.net.get().map(Net::link_stats)
    }

    /// What the host link moved (`None` without one).
    pub fn host_link_stats(&self) -> Option<vino_net::HostStats> {
        self.net.get().and_then(Net::host_stats)
    }

    /// Runs what is due in a stack with no thread of its own (`NetConfig::stepped`, a
    /// simulation's); how far ahead on the kernel's clock something is due next. Starts the
    /// stack if no socket call has.
    pub fn net_step(&self) -> Option<std::time::Duration> {
        self.net().step()
    }

    /// What the stack holds now (`None` before the first socket call).
    pub fn net_stats(&self) -> Option<vino_net::NetStats> {
        self.net.get().map(Net::stats)
    }
}

impl Process {
    /// Whom this process's sockets belong to and are charged to.
    pub(crate) fn socket_owner(&self) -> Owner {
        Owner {
            pid: self.pid(),
            uid: self.credentials().uid,
            account: Some(self.account().clone()),
            congestion: Some(vino_net::CongestionConfig::new(
                self.congestion_slot.clone(),
                self.net_share
                    .get_or_init(|| self.kernel().net_sharing.share(self.credentials().uid))
                    .clone(),
            )),
        }
    }

    /// Listens for TCP connections on `port`, with up to `backlog` pending.
    pub fn tcp_listen(&self, port: u16, backlog: usize) -> SysResult<SocketId> {
        Ok(self.kernel().net().tcp_listen(&self.socket_owner(), port, backlog)?)
    }

    /// A TCP socket bound to `port` (0: an ephemeral one), to listen or connect from.
    pub fn tcp_bind(&self, port: u16) -> SysResult<SocketId> {
        Ok(self.kernel().net().tcp_bind(&self.socket_owner(), port)?)
    }

    /// Makes a bound TCP socket listen, with up to `backlog` connections pending.
    pub fn socket_listen(&self, socket: SocketId, backlog: usize) -> SysResult<()> {
        Ok(self.kernel().net().listen(&self.socket_owner(), socket, backlog)?)
    }

    /// Connects a bound TCP socket to `to`; a connect that fails closes the socket.
    pub fn socket_connect(&self, socket: SocketId, to: SocketAddrV4, wait: Wait) -> SysResult<()> {
        Ok(self.kernel().net().connect(&self.socket_owner(), socket, to, wait)?)
    }

    /// Whether a connection is made (`false`: still being made), or why it failed.
    pub fn socket_connected(&self, socket: SocketId) -> SysResult<bool> {
        Ok(self.kernel().net().connected(&self.socket_owner(), socket)?)
    }

    /// Whether a call for `interest` would proceed now; if not, `cx`'s task is woken when that
    /// may have changed.
    pub fn socket_poll(&self, socket: SocketId, interest: Interest, cx: &Context<'_>) -> Poll<SysResult<()>> {
        if interest == Interest::Read && self.layers_readable(socket) {
            return Poll::Ready(Ok(()));
        }
        let net = self.kernel().net();
        let ready = net.poll_ready(&self.socket_owner(), socket, interest, cx);
        // Layers send whole frames: some room is not enough (the wakers stay registered, so
        // the room an acknowledgement makes wakes the task).
        if let (Interest::Write, Poll::Ready(Ok(())), Some(need)) = (interest, &ready, self.layers_send_need(socket))
            && let Err(vino_net::NetError::WouldBlock) = net.send_room(&self.socket_owner(), socket, need, Wait::No)
        {
            return Poll::Pending;
        }
        ready.map_err(Into::into)
    }

    /// The socket's own address.
    pub fn socket_local_addr(&self, socket: SocketId) -> SysResult<SocketAddrV4> {
        Ok(self.kernel().net().local_addr(&self.socket_owner(), socket)?)
    }

    /// The address of a connection's peer.
    pub fn socket_peer_addr(&self, socket: SocketId) -> SysResult<SocketAddrV4> {
        Ok(self.kernel().net().endpoints(&self.socket_owner(), socket)?.1)
    }

    /// Takes a connection that arrived at `listener`, and its peer's address.
    pub fn tcp_accept(&self, listener: SocketId, wait: Wait) -> SysResult<(SocketId, SocketAddrV4)> {
        Ok(self.kernel().net().accept(&self.socket_owner(), listener, wait)?)
    }

    /// Connects to `to` (on the loopback link: 127.0.0.1).
    pub fn tcp_connect(&self, to: SocketAddrV4, wait: Wait) -> SysResult<SocketId> {
        Ok(self.kernel().net().tcp_connect(&self.socket_owner(), to, wait)?)
    }

    /// Sends what fits of `data` (through the socket's stream layers, if it has any).
    pub fn socket_send(&self, socket: SocketId, data: &[u8], wait: Wait) -> SysResult<usize> {
        if let Some(sent) = self.layered_send(socket, data, wait) {
            return sent;
        }
        Ok(self.kernel().net().send(&self.socket_owner(), socket, data, wait)?)
    }

    /// Receives into `buf`; 0 once the peer closed its side and all was read.
    pub fn socket_recv(&self, socket: SocketId, buf: &mut [u8], wait: Wait) -> SysResult<usize> {
        if let Some(got) = self.layered_recv(socket, buf, wait) {
            return got;
        }
        Ok(self.kernel().net().recv(&self.socket_owner(), socket, buf, wait)?)
    }

    /// `TCP_NODELAY` on a TCP socket (kept for one not connected yet; a listener's connections
    /// inherit it).
    pub fn socket_set_nodelay(&self, socket: SocketId, on: bool) -> SysResult<()> {
        Ok(self.kernel().net().set_nodelay(&self.socket_owner(), socket, on)?)
    }

    pub fn socket_shutdown_write(&self, socket: SocketId) -> SysResult<()> {
        Ok(self.kernel().net().shutdown_write(&self.socket_owner(), socket)?)
    }

    pub fn socket_close(&self, socket: SocketId) -> SysResult<()> {
        self.drop_layers(socket);
        Ok(self.kernel().net().close(&self.socket_owner(), socket)?)
    }

    /// A UDP socket bound to `port` (0: an ephemeral one; `Net::udp_port` says which).
    pub fn udp_bind(&self, port: u16) -> SysResult<SocketId> {
        Ok(self.kernel().net().udp_bind(&self.socket_owner(), port)?)
    }

    /// Sends one datagram to `to`.
    pub fn socket_send_to(&self, socket: SocketId, data: &[u8], to: SocketAddrV4, wait: Wait) -> SysResult<()> {
        Ok(self
            .kernel()
            .net()
            .send_to(&self.socket_owner(), socket, data, to, wait)?)
    }

    /// Receives one datagram, and its sender.
    pub fn socket_recv_from(&self, socket: SocketId, buf: &mut [u8], wait: Wait) -> SysResult<(usize, SocketAddrV4)> {
        Ok(self.kernel().net().recv_from(&self.socket_owner(), socket, buf, wait)?)
    }
}
