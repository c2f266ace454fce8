//! What a socket call can fail with, and its errno.

/// Why a socket call failed. Each has the errno POSIX gives for it ([`NetError::errno`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// A port below 1024 asked for without privilege (EACCES).
    #[error("permission denied: port {0} is below 1024 and needs privilege")]
    Privileged(u16),
    /// The port is bound already, by this user or another (EADDRINUSE).
    #[error("port {0} is in use")]
    AddrInUse(u16),
    /// No ephemeral port is free for a connection (EADDRNOTAVAIL).
    #[error("no free local port for a connection")]
    NoPorts,
    /// Nothing listens at the address connected to (ECONNREFUSED).
    #[error("connection refused")]
    Refused,
    /// The peer reset the connection (ECONNRESET).
    #[error("connection reset by the peer")]
    Reset,
    /// The socket is connected already (EISCONN).
    #[error("the socket is connected already")]
    IsConnected,
    /// The socket is not connected, or no longer (ENOTCONN).
    #[error("the socket is not connected")]
    NotConnected,
    /// No socket of the caller's has this id (EBADF): another's are as good as absent.
    #[error("no such socket")]
    BadSocket,
    /// The call needs a listening socket, or a connection, and got the other (EINVAL).
    #[error("wrong kind of socket for this call: {0}")]
    WrongKind(&'static str),
    /// The call would wait, and was asked not to (EAGAIN).
    #[error("the call would block")]
    WouldBlock,
    /// The wait the call was given ran out (ETIMEDOUT).
    #[error("timed out")]
    TimedOut,
    /// The sending side was shut (EPIPE).
    #[error("the connection's sending side is shut")]
    Pipe,
    /// A datagram larger than a socket's buffer or than UDP allows (EMSGSIZE).
    #[error("a datagram of {0} bytes is too large")]
    TooBig(usize),
    /// No link reaches the address (ENETUNREACH).
    #[error("network unreachable: {0}")]
    Unreachable(String),
    /// Root's egress policy for the host link does not let this user reach the address (EPERM,
    /// as a firewall's refusal is on Linux).
    #[error("the host link's egress policy does not let this user reach {0}")]
    Forbidden(std::net::Ipv4Addr),
    /// The host link could not be attached (ENETDOWN).
    #[error("{0}")]
    Link(String),
    /// A limit of the caller's account: sockets or their buffers (ENOBUFS).
    #[error(transparent)]
    Limit(#[from] vino_account::Exceeded),
}

impl NetError {
    pub fn errno(&self) -> i32 {
        match self {
            NetError::Privileged(_) => 13,
            NetError::AddrInUse(_) => 98,
            NetError::NoPorts => 99,
            NetError::Refused => 111,
            NetError::Reset => 104,
            NetError::IsConnected => 106,
            NetError::NotConnected => 107,
            NetError::BadSocket => 9,
            NetError::WrongKind(_) => 22,
            NetError::WouldBlock => 11,
            NetError::TimedOut => 110,
            NetError::Pipe => 32,
            NetError::TooBig(_) => 90,
            NetError::Unreachable(_) => 101,
            NetError::Forbidden(_) => 1,
            NetError::Link(_) => 100,
            NetError::Limit(e) => e.errno(),
        }
    }
}
