//! UDP sockets: bound to a port of the user's (UDP's ports are a namespace of their own),
//! charged as a TCP socket is, datagrams whole or not at all.

use crate::stack::{Kind, Slot};
use crate::{Interest, Net, NetError, Owner, SocketId, Wait};
use smoltcp::socket::udp;
use smoltcp::wire::IpEndpoint;
use std::net::SocketAddrV4;

/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// Datagrams a socket's buffer holds each way, whatever their size.
const DATAGRAMS_QUEUED: usize = 64;

impl Net {
    /// A UDP socket bound to `port` (0: an ephemeral port).
    pub fn udp_bind(&self, owner: &Owner, port: u16) -> Result<SocketId, NetError> {
        let mut st = self.lock();
        let port = st.udp_ports.take(owner.uid, port)?;
        let charges = match st.charge(owner, &mut None) {
            Ok(c) => c,
            Err(e) => {
                st.udp_ports.release(port);
                return Err(e);
            }
        };
        let bytes = st.config.buffer_bytes;
        let buffer = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; DATAGRAMS_QUEUED], vec![0u8; bytes]);
        let mut socket = udp::Socket::new(buffer(), buffer());
        socket.bind(port).expect("a new socket binds a nonzero port");
        let handle = st.sockets.add(socket);
        Ok(st.insert(
            owner.pid,
            Kind::Datagram {
                slot: Slot { handle, charges },
                port,
            },
        ))
    }

    /// The port a UDP socket is bound to.
    pub fn udp_port(&self, owner: &Owner, id: SocketId) -> Result<u16, NetError> {
        match &self.lock().owned(owner.pid, id)?.kind {
            Kind::Datagram { port, .. } => Ok(*port),
            _ => Err(NetError::WrongKind("not a UDP socket")),
        }
    }

    /// Sends `data` as one datagram to `to`, waiting for room in the send buffer as `wait`
    /// allows. A datagram larger than the buffer or than UDP allows is `EMSGSIZE`.
    pub fn send_to(
        &self,
        owner: &Owner,
        id: SocketId,
        data: &[u8],
        to: SocketAddrV4,
        wait: Wait,
    ) -> Result<(), NetError> {
        let room = self.lock().config.buffer_bytes.min(MAX_DATAGRAM);
        if data.len() > room {
            return Err(NetError::TooBig(data.len()));
        }
        self.wait(owner, (id, Interest::Write), wait, |st| {
            st.may_reach(owner, *to.ip())?;
            let socket = datagram(st, owner.pid, id)?;
            match socket.send_slice(data, IpEndpoint::from(to)) {
                Ok(()) => Ok(Some(())),
                Err(udp::SendError::BufferFull) => Ok(None),
                Err(udp::SendError::Unaddressable) => Err(NetError::Unreachable(to.to_string())),
            }
        })?;
        Ok(())
    }

    /// Receives one datagram into `buf`, with its sender: its length, or `buf`'s if it was
    /// longer (the rest is dropped, as POSIX has it).
    pub fn recv_from(
        &self,
        owner: &Owner,
        id: SocketId,
        buf: &mut [u8],
        wait: Wait,
    ) -> Result<(usize, SocketAddrV4), NetError> {
        self.wait(owner, (id, Interest::Read), wait, |st| {
            let socket = datagram(st, owner.pid, id)?;
            let Ok((payload, meta)) = socket.recv() else {
                return Ok(None);
            };
            let n = payload.len().min(buf.len());
            buf[..n].copy_from_slice(&payload[..n]);
            Ok(Some((n, crate::stack::v4(meta.endpoint))))
        })
    }
}

/// The smoltcp socket of UDP socket `id`, if `pid` owns it.
fn datagram(st: &mut crate::stack::State, pid: u64, id: SocketId) -> Result<&mut udp::Socket<'static>, NetError> {
    let handle = match &st.owned(pid, id)?.kind {
        Kind::Datagram { slot, .. } => slot.handle,
        _ => return Err(NetError::WrongKind("not a UDP socket")),
    };
    Ok(st.sockets.get_mut::<udp::Socket>(handle))
}
