//! The stack: one smoltcp interface and its sockets under one lock, a kernel thread that runs
//! its timers, and the table of VINO's sockets over smoltcp's.
//!
//! A VINO socket is owned by a process (its pid) and charged to it: one [`Resource::Sockets`]
//! and both buffers' bytes in [`Resource::SocketBytes`] per smoltcp socket. smoltcp has no
//! listen backlog (a listening socket becomes the connection), so a listener is a pool of
//! listening smoltcp sockets, one per connection that may be pending, charged to the listener's
//! owner and refilled as connections are accepted. A closed connection stays in the stack until
//! its close handshake ends (or it stalls for [`NetConfig::linger`]), still charged to its owner: a
//! user cannot make the kernel hold closing connections beyond its limit either.
//!
//! Calls that change a socket run the interface at once, on the caller's thread, so a loopback
//! exchange needs no thread switch; the stack's thread runs what is due later (retransmits,
//! delayed acknowledgements, closing connections' timers). A call that must wait is woken by its
//! own socket's wakers (smoltcp's, through [`Waiters`]), never by every run. A simulation runs
//! the stack with no thread of its own ([`NetConfig::stepped`]): it calls [`Net::step`] and moves
//! the stack's clock ([`NetConfig::clock`]) itself, and one seed then gives the same packets.

use crate::NetError;
use crate::link::{Faults, HostConfig, HostLink, HostStats, Link, LinkDevice, LinkStats, Links, Outlet};
use crate::ports::{PortHold, Ports};
use parking_lot::{Condvar, Mutex, MutexGuard};
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use vino_account::{Account, Charge, Resource};
use vino_clock::SharedClock;

/// The stack's settings.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Bytes of each socket's receive buffer, and of its send buffer.
    pub buffer_bytes: usize,
    /// Most connections a listener may have pending (its pool of listening sockets).
    pub max_backlog: usize,
    /// Longest a closed connection may go without progress (its send queue draining, its state
    /// moving) before it is reset; however it trickles, it is reset after 12 times this in all.
    /// A closed connection's response still flowing to a slow reader is not cut short; one
    /// whose peer stopped reading or answering does not hold its charges for long.
    pub linger: Duration,
    /// Longest a listener's pool slot may stay half open (a SYN answered, its ACK awaited)
    /// before it listens again: a SYN from a forged address holds a slot this long at most.
    pub half_open: Duration,
    /// Longest the stack's thread sleeps when no timer is due sooner.
    pub tick: Duration,
    /// Faults the loopback link injects (none by default).
    pub faults: Faults,
    /// Largest IP packet the loopback link carries (65535, as Linux's loopback; a smaller one
    /// makes more, smaller segments, as a real link would).
    pub mtu: usize,
    /// The link to the host's network, if root attaches one.
    pub host: Option<HostConfig>,
    /// The time every timer of the stack reads (retransmits, lingering closes, half-open
    /// slots, waits with deadlines): the kernel's clock.
    pub clock: SharedClock,
    /// Seeds TCP's initial sequence numbers (`None`: drawn at random, as a host must).
    pub seed: Option<u64>,
    /// No thread of the stack's own: whoever owns it runs what is due with [`Net::step`] (a
    /// simulation, which then decides every packet's order). A TUN device still gets its
    /// reader's thread.
    pub stepped: bool,
    /// Users' weights and `net.pick_packet` grafts for the host link's way out, when it has a
    /// rate (`None`: every user the same weight, first in first out within each).
    pub sharing: Option<crate::egress::SharingHandle>,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            // A window of 256 KiB keeps a connection over a link of 100 µs round trips at
            // several Gbit/s (`vino bench net`: 64 KiB held it to under half the raw pump).
            buffer_bytes: 256 << 10,
            max_backlog: 128,
            linger: Duration::from_secs(10),
            half_open: Duration::from_secs(5),
            tick: Duration::from_millis(10),
            faults: Faults::default(),
            mtu: 65535,
            host: None,
            clock: SharedClock::default(),
            seed: None,
            stepped: false,
            sharing: None,
        }
    }
}

/// Who a socket call is for: the process that will own the socket, its user (for ports), and
/// the account its sockets are charged to.
#[derive(Clone, Default)]
pub struct Owner {
    pub pid: u64,
    pub uid: u32,
    pub account: Option<Arc<Account>>,
    /// Its connections' congestion control (`net.congestion`); `None`: the stack's own.
    pub congestion: Option<crate::CongestionConfig>,
}

/// A socket's name in the stack (its owner's calls name it; nobody else's can).
pub type SocketId = u64;

/// How long a call may wait for the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Not at all: [`NetError::WouldBlock`] instead.
    No,
    /// Up to this long: then [`NetError::TimedOut`].
    For(Duration),
}

/// What a waiter waits for on a socket ([`Net::poll_ready`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// A receive (or accept) would not block: data, a connection, the peer's end, an error.
    Read,
    /// A send would not block: room, or an error.
    Write,
}

/// One socket as a listing shows it (`vino ps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketInfo {
    pub id: SocketId,
    /// `tcp` or `udp`.
    pub proto: &'static str,
    pub local: SocketAddrV4,
    /// A connection's peer.
    pub remote: Option<SocketAddrV4>,
    /// `bound`, `listen` (with its pending connections in `pending`), a TCP state
    /// (`established`, `close-wait`...), or `bound` for UDP.
    pub state: String,
    pub pending: usize,
}

/// Counts of what the stack holds, for listings and leak checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// smoltcp sockets in the stack (pool slots, connections, closing connections).
    pub stack_sockets: usize,
    pub listeners: usize,
    pub connections: usize,
    /// Connections closed by their owner, finishing their close handshake.
    pub closing: usize,
    /// UDP sockets.
    pub datagrams: usize,
    /// TCP and UDP ports bound or held by connections.
    pub ports_in_use: usize,
}

/// One smoltcp socket and what it is charged.
pub(crate) struct Slot {
    pub(crate) handle: SocketHandle,
    /// Held until the slot goes (the socket's charge first).
    pub(crate) charges: Vec<Charge>,
}

pub(crate) enum Kind {
    /// A TCP socket bound to `port`, neither listening nor connected yet (charged one socket,
    /// no buffers: it has none until it listens or connects).
    /// `peer`: the port is shared with connections to other peers, held for a connection to
    /// this one (see `ports`).
    Bound {
        port: u16,
        charges: Vec<Charge>,
        peer: Option<SocketAddrV4>,
    },
    /// Listening on `port`: `pool` holds a listening socket per connection that may be pending.
    Listener { port: u16, pool: Vec<Slot> },
    /// A connection; `ephemeral` if it holds its local port (one it connected from). Once its
    /// TIME-WAIT ends, what its owner had not read stays readable, then its end (the vendored
    /// smoltcp keeps them).
    Stream { slot: Slot, ephemeral: Option<PortHold> },
    /// A UDP socket bound to `port` (see `udp.rs`).
    Datagram { slot: Slot, port: u16 },
}

pub(crate) struct Entry {
    pub(crate) pid: u64,
    pub(crate) kind: Kind,
    /// `TCP_NODELAY`: Nagle's rule off for its connection, or for a listener's connections.
    nodelay: bool,
    /// The tasks waiting on this socket ([`Net::poll_ready`]).
    waiters: Arc<Waiters>,
}

/// The tasks waiting on one socket. smoltcp keeps one waker per socket and direction; this
/// one, registered there, wakes every task that waits (a process's threads may wait on the
/// same socket, or `poll_oneoff` on one while a read waits on it).
#[derive(Default)]
struct Waiters(Mutex<Vec<Waker>>);

impl Waiters {
    fn add(&self, waker: &Waker) {
        let mut list = self.0.lock();
        if !list.iter().any(|w| w.will_wake(waker)) {
            list.push(waker.clone());
        }
    }

    fn forget(&self, waker: &Waker) {
        self.0.lock().retain(|w| !w.will_wake(waker));
    }
}

impl Wake for Waiters {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        for w in std::mem::take(&mut *self.0.lock()) {
            w.wake();
        }
    }
}

/// A connection its owner closed, finishing its close handshake.
struct Closing {
    slot: Slot,
    ephemeral: Option<PortHold>,
    /// When its owner closed it, and when it last made progress (the stack's monotonic time).
    since: Duration,
    moved: Duration,
    /// Its state and send queue when last looked at: a change is progress.
    seen: (tcp::State, usize),
}

impl Closing {
    fn new(slot: Slot, ephemeral: Option<PortHold>, now: Duration) -> Closing {
        Closing {
            slot,
            ephemeral,
            since: now,
            moved: now,
            seen: (tcp::State::Closed, usize::MAX),
        }
    }
}

/// A closing connection still making progress is reset after this many linger times in all.
const LINGER_MOST: u32 = 12;

pub(crate) struct State {
    iface: Interface,
    links: Links,
    pub(crate) sockets: SocketSet<'static>,
    entries: HashMap<SocketId, Entry>,
    closing: Vec<Closing>,
    /// TCP's ports.
    ports: Ports,
    /// UDP's ports (a namespace of their own, as in every stack).
    pub(crate) udp_ports: Ports,
    next_id: SocketId,
    /// When each pool slot seen half open was first seen so.
    half_open: HashMap<SocketHandle, Duration>,
    pub(crate) config: NetConfig,
}

struct Inner {
    state: Mutex<State>,
    /// Wakes the stack's thread early (a socket changed, or the stack stops).
    kick: Condvar,
    stop: AtomicBool,
}

/// The kernel's network stack. Dropping it stops its threads; sockets still open are dropped
/// with it, their charges returned, and a host link's device closed (and so gone).
pub struct Net {
    inner: Arc<Inner>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// The loopback address every VINO process reaches the others at.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

impl Net {
    /// A stack with its loopback link only, and its thread started.
    ///
    /// # Panics
    /// If `config` attaches a host link: [`Net::start`] says why that fails.
    pub fn new(config: NetConfig) -> Net {
        assert!(
            config.host.is_none(),
            "Net::new is for a loopback-only stack; use Net::start"
        );
        Net::start(config).expect("a loopback-only stack always starts")
    }

    /// A stack with its loopback link and, if `config` has one, its link to the host (a TUN
    /// device opened, configured and read by a thread of its own, or a simulation's wire).
    pub fn start(config: NetConfig) -> Result<Net, NetError> {
        let host = config.host.as_ref().map(open_host).transpose()?;
        let (host_link, reader) = match host {
            Some((mut link, reader)) => {
                link.egress = link.config.shaping.map(|shaping| {
                    let sharing = config.sharing.as_ref().map(|h| h.0.clone());
                    crate::egress::Egress::new(shaping, link.config.mtu, sharing)
                });
                (Some(link), reader)
            }
            None => (None, None),
        };
        let mtu = config.host.as_ref().map_or(config.mtu, |h| h.mtu.min(config.mtu));
        let mut links = Links::new(Link::new(config.faults), host_link, mtu);
        let mut iface_config = Config::new(HardwareAddress::Ip);
        iface_config.random_seed = config
            .seed
            .unwrap_or_else(|| std::collections::hash_map::RandomState::new().build_hasher().finish());
        let mut iface = Interface::new(iface_config, &mut links, stack_time(&config.clock));
        iface.update_ip_addrs(|addrs| {
            // The host link's address first: a packet for beyond both networks takes it as its
            // source (smoltcp falls back to the first address).
            if let Some(h) = &config.host {
                addrs
                    .push(IpCidr::new(IpAddress::Ipv4(h.address), h.prefix))
                    .expect("two addresses fit");
            }
            addrs
                .push(IpCidr::new(IpAddress::Ipv4(LOOPBACK), 8))
                .expect("two addresses fit");
        });
        if let Some(gateway) = config.host.as_ref().and_then(|h| h.gateway) {
            iface
                .routes_mut()
                .add_default_ipv4_route(gateway)
                .map_err(|_| NetError::Link("no room for the default route".into()))?;
        }
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                iface,
                links,
                sockets: SocketSet::new(Vec::new()),
                entries: HashMap::new(),
                closing: Vec::new(),
                ports: Ports::default(),
                udp_ports: Ports::default(),
                next_id: 1,
                half_open: HashMap::new(),
                config,
            }),
            kick: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(body)
                .map_err(|e| NetError::Link(format!("spawning {name}: {e}")))
        };
        let mut threads = Vec::new();
        if !inner.state.lock().config.stepped {
            threads.push(spawn("vino-net", {
                let inner = inner.clone();
                Box::new(move || run_timers(&inner))
            })?);
        }
        if let Some(reader) = reader {
            let inner2 = inner.clone();
            match spawn("vino-net-host", Box::new(move || run_host(&inner2, reader))) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    drop(Net { inner, threads });
                    return Err(e);
                }
            }
        }
        Ok(Net { inner, threads })
    }

    /// Listens for TCP connections on `port` of every address, with up to `backlog`
    /// connections pending (at least one, at most [`NetConfig::max_backlog`]).
    pub fn tcp_listen(&self, owner: &Owner, port: u16, backlog: usize) -> Result<SocketId, NetError> {
        if port == 0 {
            return Err(NetError::AddrInUse(0));
        }
        let id = self.tcp_bind(owner, port)?;
        self.listen(owner, id, backlog).inspect_err(|_| {
            let _ = self.close(owner, id);
        })?;
        Ok(id)
    }

    /// A TCP socket bound to `port` (0: an ephemeral one), to listen or connect from.
    pub fn tcp_bind(&self, owner: &Owner, port: u16) -> Result<SocketId, NetError> {
        let mut st = self.lock();
        let port = st.ports.take(owner.uid, port)?;
        st.insert_bound(owner, port, None)
    }

    /// A TCP socket holding an ephemeral port for a connection to `to`, shared with
    /// connections to other peers.
    fn bind_for(&self, owner: &Owner, to: SocketAddrV4) -> Result<SocketId, NetError> {
        let mut st = self.lock();
        st.may_reach(owner, *to.ip())?;
        let port = st.ports.for_peer(owner.uid, to)?;
        st.insert_bound(owner, port, Some(to))
    }

    /// Makes bound socket `id` listen, with up to `backlog` connections pending. A socket
    /// listening already keeps its pool.
    pub fn listen(&self, owner: &Owner, id: SocketId, backlog: usize) -> Result<(), NetError> {
        let mut st = self.lock();
        let backlog = backlog.clamp(1, st.config.max_backlog);
        let entry = st.owned(owner.pid, id)?;
        let nodelay = entry.nodelay;
        let (port, mut prepaid) = match &mut entry.kind {
            Kind::Bound {
                port,
                charges,
                peer: None,
            } => (*port, charges.pop()),
            Kind::Listener { .. } => return Ok(()),
            _ => return Err(NetError::WrongKind("listen needs a bound TCP socket")),
        };
        // The pool's first socket takes on the bound socket's charge.
        let mut pool = Vec::with_capacity(backlog);
        let mut failed = None;
        for _ in 0..backlog {
            match st.listening_slot(owner, port, &mut prepaid, nodelay) {
                Ok(slot) => pool.push(slot),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let kind = match failed {
            None => Kind::Listener { port, pool },
            Some(_) => {
                // Still bound, with its charge back.
                if let Some(first) = pool.first_mut()
                    && !first.charges.is_empty()
                {
                    prepaid = Some(first.charges.remove(0));
                }
                for slot in pool {
                    st.sockets.remove(slot.handle);
                }
                Kind::Bound {
                    port,
                    charges: prepaid.into_iter().collect(),
                    peer: None,
                }
            }
        };
        st.owned(owner.pid, id)?.kind = kind;
        failed.map_or(Ok(()), Err)
    }

    /// Takes a connection that arrived at `listener`, with its peer's address.
    pub fn accept(&self, owner: &Owner, listener: SocketId, wait: Wait) -> Result<(SocketId, SocketAddrV4), NetError> {
        self.wait(owner, (listener, Interest::Read), wait, |st| {
            let at = st.ready_connection(owner.pid, listener)?;
            at.map(|i| st.take_connection(owner, listener, i)).transpose()
        })
    }

    /// Connects to `to` from an ephemeral port; waits for the connection to be made unless
    /// `wait` is [`Wait::No`], when the socket is returned at once and sends wait until it is
    /// made.
    pub fn tcp_connect(&self, owner: &Owner, to: SocketAddrV4, wait: Wait) -> Result<SocketId, NetError> {
        let id = self.bind_for(owner, to)?;
        self.connect(owner, id, to, wait)?;
        Ok(id)
    }

    /// Connects bound socket `id` to `to`, from its port; waits as [`Net::tcp_connect`]. A
    /// connect that fails closes the socket.
    pub fn connect(&self, owner: &Owner, id: SocketId, to: SocketAddrV4, wait: Wait) -> Result<(), NetError> {
        let started = self.start_connect(owner, id, to);
        if started.is_err() {
            let _ = self.abort(owner, id);
        }
        started?;
        if wait == Wait::No {
            return Ok(());
        }
        let made = self.wait(owner, (id, Interest::Write), wait, |st| {
            let socket = st.stream(owner.pid, id)?;
            connect_state(socket)
        });
        if made.is_err() {
            // The socket goes with the failed connect, whatever state it reached.
            let _ = self.abort(owner, id);
        }
        made
    }

    fn start_connect(&self, owner: &Owner, id: SocketId, to: SocketAddrV4) -> Result<(), NetError> {
        let mut st = self.lock();
        st.may_reach(owner, *to.ip())?;
        let entry = st.owned(owner.pid, id)?;
        let nodelay = entry.nodelay;
        let (hold, mut prepaid) = match &mut entry.kind {
            Kind::Bound { port, charges, peer } => match *peer {
                None => (PortHold::Alone(*port), charges.pop()),
                Some(p) if p == to => (PortHold::Shared(*port, p), charges.pop()),
                Some(_) => return Err(NetError::WrongKind("the socket's port is held for another peer")),
            },
            Kind::Stream { .. } => return Err(NetError::IsConnected),
            _ => return Err(NetError::WrongKind("connect needs a bound TCP socket")),
        };
        // On failure the caller closes the socket: its charge may go with it.
        let slot = st.new_socket(owner, &mut prepaid, nodelay)?;
        let State { iface, sockets, .. } = &mut *st;
        let socket = sockets.get_mut::<tcp::Socket>(slot.handle);
        if let Err(e) = socket.connect(iface.context(), IpEndpoint::from(to), hold.port()) {
            sockets.remove(slot.handle);
            return Err(NetError::Unreachable(format!("{to}: {e}")));
        }
        // The port goes with the connection now (released when it has closed).
        st.owned(owner.pid, id)?.kind = Kind::Stream {
            slot,
            ephemeral: Some(hold),
        };
        st.run();
        Ok(())
    }

    /// `TCP_NODELAY` on TCP socket `id`: with `on`, its segments go out as soon as its window
    /// allows instead of waiting, by Nagle's rule, for the acknowledgement of what is in flight
    /// when they are small. Kept for a socket not connected yet, and for a listener's
    /// connections to inherit, as on Linux.
    pub fn set_nodelay(&self, owner: &Owner, id: SocketId, on: bool) -> Result<(), NetError> {
        let mut st = self.lock();
        let entry = st.owned(owner.pid, id)?;
        let handles: Vec<SocketHandle> = match &entry.kind {
            Kind::Stream { slot, .. } => vec![slot.handle],
            Kind::Listener { pool, .. } => pool.iter().map(|s| s.handle).collect(),
            Kind::Bound { .. } => Vec::new(),
            Kind::Datagram { .. } => return Err(NetError::WrongKind("TCP_NODELAY is a TCP socket's option")),
        };
        entry.nodelay = on;
        for h in handles {
            st.sockets.get_mut::<tcp::Socket>(h).set_nagle_enabled(!on);
        }
        Ok(())
    }

    /// Whether `TCP_NODELAY` is on for socket `id`.
    pub fn nodelay(&self, owner: &Owner, id: SocketId) -> Result<bool, NetError> {
        Ok(self.lock().owned(owner.pid, id)?.nodelay)
    }

    /// Whether connection `id` is made: `Ok(true)` made, `Ok(false)` still being made, or why
    /// it failed.
    pub fn connected(&self, owner: &Owner, id: SocketId) -> Result<bool, NetError> {
        let mut st = self.lock();
        connect_state(st.stream(owner.pid, id)?).map(|made| made.is_some())
    }

    /// Whether a call for `interest` on socket `id` would proceed now; if not, the task of `cx`
    /// is woken when that may have changed.
    pub fn poll_ready(
        &self,
        owner: &Owner,
        id: SocketId,
        interest: Interest,
        cx: &Context<'_>,
    ) -> Poll<Result<(), NetError>> {
        match self.lock().watch(owner.pid, id, interest, cx.waker()) {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// The local address of socket `id` (unspecified for a socket bound but not connected).
    pub fn local_addr(&self, owner: &Owner, id: SocketId) -> Result<SocketAddrV4, NetError> {
        let mut st = self.lock();
        let port = match &st.owned(owner.pid, id)?.kind {
            Kind::Bound { port, .. } | Kind::Listener { port, .. } | Kind::Datagram { port, .. } => *port,
            Kind::Stream { slot, .. } => {
                let handle = slot.handle;
                let socket = st.sockets.get_mut::<tcp::Socket>(handle);
                return socket.local_endpoint().map(v4).ok_or(NetError::NotConnected);
            }
        };
        Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
    }

    /// Sends what fits of `data` (at least one byte, waiting for room as `wait` allows).
    pub fn send(&self, owner: &Owner, id: SocketId, data: &[u8], wait: Wait) -> Result<usize, NetError> {
        if data.is_empty() {
            self.lock().stream(owner.pid, id)?;
            return Ok(0);
        }
        let sent = self.wait(owner, (id, Interest::Write), wait, |st| {
            let socket = st.stream(owner.pid, id)?;
            if socket.can_send() {
                let n = socket.send_slice(data).map_err(|_| NetError::NotConnected)?;
                return Ok((n > 0).then_some(n));
            }
            match socket.state() {
                tcp::State::SynSent | tcp::State::SynReceived => Ok(None),
                tcp::State::Closed => Err(NetError::Reset),
                _ if !socket.may_send() => Err(NetError::Pipe),
                _ => Ok(None),
            }
        })?;
        Ok(sent)
    }

    /// Waits (as `wait` allows) until the send buffer has room for `need` bytes, and says how
    /// much it has: a sender that must put a whole frame in at once (a socket's stream layers)
    /// asks first, then sends without waiting. The room only grows until that sender sends.
    pub fn send_room(&self, owner: &Owner, id: SocketId, need: usize, wait: Wait) -> Result<usize, NetError> {
        self.wait(owner, (id, Interest::Write), wait, |st| {
            let socket = st.stream(owner.pid, id)?;
            let room = socket.send_capacity() - socket.send_queue();
            if socket.may_send() && room >= need.min(socket.send_capacity()) {
                return Ok(Some(room));
            }
            match socket.state() {
                tcp::State::Closed => Err(NetError::Reset),
                tcp::State::SynSent | tcp::State::SynReceived => Ok(None),
                _ if !socket.may_send() => Err(NetError::Pipe),
                _ => Ok(None),
            }
        })
    }

    /// Receives into `buf`: at least one byte, or 0 once the peer closed its side and
    /// everything it sent was read.
    pub fn recv(&self, owner: &Owner, id: SocketId, buf: &mut [u8], wait: Wait) -> Result<usize, NetError> {
        self.wait(owner, (id, Interest::Read), wait, |st| {
            let socket = st.stream(owner.pid, id)?;
            if buf.is_empty() {
                return Ok(Some(0));
            }
            match socket.recv_slice(buf) {
                Ok(0) => {}
                Ok(n) => return Ok(Some(n)),
                Err(tcp::RecvError::Finished) => return Ok(Some(0)),
                Err(tcp::RecvError::InvalidState) => {}
            }
            match socket.state() {
                tcp::State::Closed | tcp::State::TimeWait if !socket.may_recv() => Err(NetError::Reset),
                tcp::State::Listen => Err(NetError::NotConnected),
                _ => Ok(None),
            }
        })
    }

    /// Sends all of `data`, waiting for room as `wait` allows each time.
    pub fn send_all(&self, owner: &Owner, id: SocketId, data: &[u8], wait: Wait) -> Result<(), NetError> {
        let mut off = 0;
        while off < data.len() {
            off += self.send(owner, id, &data[off..], wait)?;
        }
        Ok(())
    }

    /// Receives until the peer closes its side: all it sent from now on.
    pub fn recv_to_end(&self, owner: &Owner, id: SocketId, wait: Wait) -> Result<Vec<u8>, NetError> {
        let (mut all, mut buf) = (Vec::new(), vec![0u8; 16 << 10]);
        loop {
            match self.recv(owner, id, &mut buf, wait)? {
                0 => return Ok(all),
                n => all.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Shuts the sending side: the peer reads to its end, then gets 0. Receiving goes on.
    pub fn shutdown_write(&self, owner: &Owner, id: SocketId) -> Result<(), NetError> {
        let mut st = self.lock();
        st.stream(owner.pid, id)?.close();
        st.run();
        drop(st);
        Ok(())
    }

    /// Closes a socket: a connection finishes its close handshake in the stack (still charged
    /// to its owner), a listener resets the connections it had pending.
    pub fn close(&self, owner: &Owner, id: SocketId) -> Result<(), NetError> {
        self.close_owned(owner, id, false)
    }

    /// Closes a socket at once, resetting its connection.
    fn abort(&self, owner: &Owner, id: SocketId) -> Result<(), NetError> {
        self.close_owned(owner, id, true)
    }

    fn close_owned(&self, owner: &Owner, id: SocketId, reset: bool) -> Result<(), NetError> {
        let mut st = self.lock();
        st.owned(owner.pid, id)?;
        st.close(id, reset);
        drop(st);
        Ok(())
    }

    /// Closes every socket of process `pid` (it exited). Its connections finish closing as
    /// [`Net::close`] has them.
    pub fn close_all(&self, pid: u64) {
        let mut st = self.lock();
        let ids: Vec<SocketId> = st
            .entries
            .iter()
            .filter(|(_, e)| e.pid == pid)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            st.close(id, false);
        }
        drop(st);
    }

    /// The local and remote addresses of a connection.
    pub fn endpoints(&self, owner: &Owner, id: SocketId) -> Result<(SocketAddrV4, SocketAddrV4), NetError> {
        let mut st = self.lock();
        let socket = st.stream(owner.pid, id)?;
        let v4 = |e: Option<IpEndpoint>| e.map(v4).ok_or(NetError::NotConnected);
        Ok((v4(socket.local_endpoint())?, v4(socket.remote_endpoint())?))
    }

    /// Runs what is due now, as the stack's thread would: packets come in (a wire's too), timers
    /// fire, closing connections and half-open slots end, waiters look again. For a stack with
    /// no thread of its own ([`NetConfig::stepped`]), whose owner moves its clock: the answer is
    /// how far ahead on that clock something is due next (`None`: nothing is pending).
    pub fn step(&self) -> Option<Duration> {
        self.lock().run_due()
    }

    /// Puts a raw IPv4 packet on the loopback link, as if it had arrived there, and runs the
    /// stack (for fuzzing the protocols with frames no socket call makes).
    pub fn inject(&self, frame: &[u8]) {
        let mut st = self.lock();
        let now = st.now();
        st.links.loopback.inject(frame, now);
        st.run();
        drop(st);
    }

    /// The sockets process `pid` owns, in the order it made them.
    pub fn sockets_of(&self, pid: u64) -> Vec<SocketInfo> {
        let mut st = self.lock();
        let mut ids: Vec<SocketId> = st
            .entries
            .iter()
            .filter(|(_, e)| e.pid == pid)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        let any = |port| SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
        ids.into_iter()
            .map(|id| {
                let State { entries, sockets, .. } = &mut *st;
                let (proto, local, remote, state, pending) = match &entries[&id].kind {
                    Kind::Bound { port, .. } => ("tcp", any(*port), None, "bound".to_owned(), 0),
                    Kind::Listener { port, pool } => {
                        let pending = pool
                            .iter()
                            .filter(|s| {
                                let state = sockets.get::<tcp::Socket>(s.handle).state();
                                !matches!(state, tcp::State::Listen | tcp::State::Closed)
                            })
                            .count();
                        ("tcp", any(*port), None, "listen".to_owned(), pending)
                    }
                    Kind::Stream { slot, .. } => {
                        let s = sockets.get::<tcp::Socket>(slot.handle);
                        let local = s.local_endpoint().map_or(any(0), v4);
                        let state = s.state().to_string().to_lowercase().replace('_', "-");
                        ("tcp", local, s.remote_endpoint().map(v4), state, 0)
                    }
                    Kind::Datagram { port, .. } => ("udp", any(*port), None, "bound".to_owned(), 0),
                };
                SocketInfo {
                    id,
                    proto,
                    local,
                    remote,
                    state,
                    pending,
                }
            })
            .collect()
    }

    /// What the loopback link did to the frames it carried.
    pub fn link_stats(&self) -> LinkStats {
        self.lock().links.loopback.stats
    }

    /// What the host link moved, if one is attached.
    pub fn host_stats(&self) -> Option<HostStats> {
        self.lock().links.host.as_ref().map(HostLink::stats)
    }

    /// What the host link's demultiplexer did, if one is attached.
    pub fn demux_stats(&self) -> Option<crate::demux::DemuxStats> {
        self.lock().links.host.as_ref().map(|h| h.demux.stats())
    }

    pub fn stats(&self) -> NetStats {
        let st = self.lock();
        let count = |f: fn(&Kind) -> bool| st.entries.values().filter(|e| f(&e.kind)).count();
        NetStats {
            stack_sockets: st.sockets.iter().count(),
            listeners: count(|k| matches!(k, Kind::Listener { .. })),
            connections: count(|k| matches!(k, Kind::Stream { .. })),
            closing: st.closing.len(),
            datagrams: count(|k| matches!(k, Kind::Datagram { .. })),
            ports_in_use: st.ports.in_use() + st.udp_ports.in_use(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock()
    }

    /// Runs `step` until it has an answer, running the stack after each try and waiting in
    /// between, as `wait` allows, for socket `on` to become ready for its interest (or to go).
    /// The stack runs as `owner`'s: of the packets from the host, it takes its user's.
    ///
    /// The wait is the caller's own, woken by that socket's wakers alone: a condition every run
    /// of the stack notified woke every blocked caller on each batch of packets (a flood's
    /// readers, and beside them every other user's), each to take the stack's lock and sleep
    /// again.
    pub(crate) fn wait<T>(
        &self,
        owner: &Owner,
        on: (SocketId, Interest),
        wait: Wait,
        mut step: impl FnMut(&mut State) -> Result<Option<T>, NetError>,
    ) -> Result<T, NetError> {
        let mut st = self.lock();
        let clock = st.config.clock.clone();
        let deadline = match wait {
            Wait::No => None,
            Wait::For(d) => Some(clock.deadline_in(d)),
        };
        // Made only when the call must wait: most calls (every call of a VINO process, which
        // waits through `poll_ready`) never do.
        let mut parked: Option<(Arc<Parker>, Waker)> = None;
        // Tries again at once after a run that took the caller's packets (they may be what it
        // waits for), a few times before it waits for others.
        let mut again = 4;
        let result = loop {
            let answer = step(&mut st);
            let took = st.run_as(owner);
            match answer {
                Err(e) => break Err(e),
                Ok(Some(done)) => break Ok(done),
                Ok(None) if took && again > 0 => again -= 1,
                Ok(None) => match deadline {
                    None => break Err(NetError::WouldBlock),
                    Some(at) => {
                        let (parker, waker) = parked.get_or_insert_with(|| {
                            let parker = Arc::new(Parker::default());
                            let waker = Waker::from(parker.clone());
                            (parker, waker)
                        });
                        if let Err(e) = st.watch(owner.pid, on.0, on.1, waker) {
                            break Err(e);
                        }
                        // A wake missed would cost at most one recheck's time.
                        let nap = at.min(clock.deadline_in(RECHECK));
                        if !parker.woken.swap(false, Ordering::AcqRel) {
                            clock.wait_until(&parker.ready, &mut st, nap);
                            parker.woken.store(false, Ordering::Release);
                        }
                        if clock.passed(at) {
                            break Err(NetError::TimedOut);
                        }
                    }
                },
            }
        };
        // Not left in the socket's list for its next wake: a caller timing out again and
        // again on a quiet socket would otherwise grow it by one each time.
        if let Some((_, waker)) = &parked
            && let Some(entry) = st.entries.get(&on.0)
        {
            entry.waiters.forget(waker);
        }
        // Handed to the next in line: a reader of a flood calls again at once and would
        // otherwise take the lock back before the others it woke (another user's among them).
        MutexGuard::unlock_fair(st);
        result
    }
}

/// How long a blocked socket call sleeps at most before it looks again, woken or not.
const RECHECK: Duration = Duration::from_millis(50);

/// A thread blocked in a socket call ([`Net::wait`]), woken through its socket's wakers. They
/// are woken under the stack's lock, which the thread holds from its registration until it
/// waits; the flag keeps a wake from elsewhere from being lost all the same.
#[derive(Default)]
struct Parker {
    ready: Condvar,
    woken: AtomicBool,
}

impl Wake for Parker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.ready.notify_one();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.kick.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Where a connection being made stands: made (`Some`), not yet (`None`), or refused.
fn connect_state(socket: &tcp::Socket<'_>) -> Result<Option<()>, NetError> {
    match socket.state() {
        tcp::State::SynSent | tcp::State::SynReceived => Ok(None),
        tcp::State::Closed => Err(NetError::Refused),
        _ => Ok(Some(())),
    }
}

/// Whether a receive or a send on a connection would proceed now (with data, room, its end,
/// or an error).
fn stream_ready(s: &tcp::Socket<'_>, interest: Interest) -> bool {
    let connecting = matches!(s.state(), tcp::State::SynSent | tcp::State::SynReceived);
    match interest {
        Interest::Read => s.can_recv() || (!s.may_recv() && !connecting),
        Interest::Write => s.can_send() || (!s.may_send() && !connecting),
    }
}

/// An endpoint as a socket address (the stack speaks IPv4 only).
pub(crate) fn v4(endpoint: IpEndpoint) -> SocketAddrV4 {
    match endpoint.addr {
        IpAddress::Ipv4(a) => SocketAddrV4::new(a, endpoint.port),
    }
}

/// The stack's thread: runs what is due, ends closing connections, wakes waiters.
fn run_timers(inner: &Inner) {
    let mut st = inner.state.lock();
    let clock = st.config.clock.clone();
    while !inner.stop.load(Ordering::Acquire) {
        let due = st.run_due().unwrap_or(st.config.tick);
        let nap = due.min(st.config.tick).max(Duration::from_micros(100));
        let until = clock.deadline_in(nap);
        clock.wait_until(&inner.kick, &mut st, until);
    }
}

/// The stack's time, in smoltcp's terms.
fn stack_time(clock: &SharedClock) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(i64::try_from(clock.monotonic().as_micros()).unwrap_or(i64::MAX))
}

/// Opens the host link's device, configures it and makes its reader (a wire has none).
fn open_host(config: &HostConfig) -> Result<(HostLink, Option<vino_hostlink::batch::Reader>), NetError> {
    let device = match &config.device {
        LinkDevice::Tun(name) => name,
        LinkDevice::Wire(end) => return Ok((HostLink::new(config.clone(), Outlet::Wire(end.clone())), None)),
    };
    let failed = |e: std::io::Error| NetError::Link(format!("host link {device}: {e}"));
    let tun = Arc::new(vino_hostlink::Tun::open(device).map_err(failed)?);
    let host = config.host_address.map(|a| (a, config.prefix));
    tun.configure(config.mtu, host).map_err(failed)?;
    let reader = vino_hostlink::batch::Reader::new(tun.clone(), config.mtu).map_err(failed)?;
    let writer = vino_hostlink::batch::Writer::new(tun);
    Ok((
        HostLink::new(config.clone(), Outlet::Tun(Box::new(writer))),
        Some(reader),
    ))
}

/// The host link's thread: takes the packets the host sent, in batches, and runs the stack on
/// them. A device that fails (deleted under VINO) is retried at a slow pace, not spun on.
fn run_host(inner: &Inner, mut reader: vino_hostlink::batch::Reader) {
    let mut packets = Vec::new();
    let mut waiting = false;
    while !inner.stop.load(Ordering::Acquire) {
        // Everything the device holds is read before the stack's work on it, a batch being
        // cheap next to the protocol work: the device's own queue stays short, and what is
        // dropped for a full queue is dropped by principal (`demux`), not in arrival order.
        let wait = if waiting {
            Duration::ZERO
        } else {
            Duration::from_millis(50)
        };
        if reader.read(wait, &mut packets).is_err() {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        loop {
            let before = packets.len();
            let full = before >= 4 * crate::demux::DEMUX_QUEUE;
            if full || reader.read(Duration::ZERO, &mut packets).is_err() || packets.len() == before {
                break;
            }
        }
        if packets.is_empty() && !waiting {
            continue;
        }
        let mut st = inner.state.lock();
        let now = st.now();
        if let Some(host) = &mut st.links.host {
            host.arrived(std::mem::take(&mut packets), now);
        }
        st.run();
        waiting = st.links.host.as_ref().is_some_and(|h| h.demux.waiting());
        // Handed to a socket call waiting for it, if one is: this thread takes the lock
        // again at once while packets wait, and would otherwise keep it from them for as
        // long as a flood lasts (parking_lot lets a thread that unlocks take it back first).
        MutexGuard::unlock_fair(st);
    }
}

impl State {
    /// Has `waker` woken when a call for `interest` on socket `id` of `pid` may proceed (its
    /// smoltcp sockets' wakers, a listener's whole pool), or when the socket goes; whether it
    /// may proceed now. Registered under the stack's lock, where every run wakes its wakers:
    /// no change falls between the look and the registration.
    fn watch(&mut self, pid: u64, id: SocketId, interest: Interest, waker: &Waker) -> Result<bool, NetError> {
        let entry = self.owned(pid, id)?;
        let waiters = entry.waiters.clone();
        waiters.add(waker);
        let waker = Waker::from(waiters);
        let handles: Vec<SocketHandle> = match &entry.kind {
            // Nothing will happen to it until the owner listens or connects.
            Kind::Bound { .. } => return Ok(true),
            Kind::Listener { pool, .. } => pool.iter().map(|s| s.handle).collect(),
            Kind::Stream { slot, .. } | Kind::Datagram { slot, .. } => vec![slot.handle],
        };
        let listening = matches!(entry.kind, Kind::Listener { .. });
        let mut ready = false;
        for handle in handles {
            ready |= match self.sockets.get_mut::<smoltcp::socket::Socket>(handle) {
                smoltcp::socket::Socket::Tcp(s) => {
                    match interest {
                        Interest::Read => s.register_recv_waker(&waker),
                        Interest::Write => s.register_send_waker(&waker),
                    }
                    if listening {
                        !matches!(
                            s.state(),
                            tcp::State::Listen | tcp::State::SynReceived | tcp::State::Closed
                        )
                    } else {
                        stream_ready(s, interest)
                    }
                }
                smoltcp::socket::Socket::Udp(s) => match interest {
                    Interest::Read => {
                        s.register_recv_waker(&waker);
                        s.can_recv()
                    }
                    Interest::Write => {
                        s.register_send_waker(&waker);
                        s.can_send()
                    }
                },
            };
        }
        Ok(ready)
    }

    fn now(&self) -> smoltcp::time::Instant {
        stack_time(&self.config.clock)
    }

    /// Runs what is due (see [`run_timers`]); how soon something is due next, if anything is.
    fn run_due(&mut self) -> Option<Duration> {
        self.run();
        self.reap();
        self.expire_half_open();
        let now = self.now();
        let link_due = self.links.next_due(now).map(|at| at - now);
        let mut sockets_due = self.iface.poll_delay(now, &self.sockets);
        // A sender the way out held back is due when the link next takes a packet, not now.
        if let Some(egress) = self
            .links
            .host
            .as_ref()
            .and_then(|h| h.egress.as_ref())
            .filter(|e| e.held)
            && let Some(room) = egress.next_due(now)
        {
            sockets_due = sockets_due.map(|d| d.max(room - now));
        }
        let due = match (sockets_due, link_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        due.map(|d| Duration::from_micros(d.total_micros()))
    }

    /// Runs the interface until it has nothing more to do now (on loopback, a packet sent is
    /// received on the next round), at most a bounded number of rounds.
    pub(crate) fn run(&mut self) {
        self.run_for(None);
    }

    /// Runs the stack on a socket call of `owner`'s: of the packets from the host, only its
    /// user's are taken (their work done on its thread).
    /// Whether it took any: the caller's packets may have changed its sockets.
    pub(crate) fn run_as(&mut self, owner: &Owner) -> bool {
        self.run_for(Some(Some(owner.uid)))
    }

    /// Runs the interface (see [`State::run`]), taking from the host the packets of `serving`
    /// (`None`: every principal's in turn).
    /// Whether it took any packet from the host.
    fn run_for(&mut self, serving: Option<crate::demux::Principal>) -> bool {
        let now = self.now();
        let State {
            iface,
            links,
            sockets,
            ports,
            udp_ports,
            ..
        } = self;
        // Who holds a port for a peer: whom a packet from the host is for, and whom one to
        // the host is from.
        let holder = |to: crate::demux::Destination| match to.proto {
            6 => ports.holder_for(to.port, to.from),
            _ => udp_ports.holder(to.port),
        };
        if let Some(host) = &mut links.host {
            host.pull(now);
            host.sort(now, holder);
            host.demux.new_run(serving);
            if let Some(egress) = &mut host.egress {
                egress.held = false;
            }
        }
        for _ in 0..64 {
            if iface.poll(now, links, sockets) == PollResult::None {
                break;
            }
        }
        match &mut links.host {
            Some(host) => {
                host.flush(now, holder);
                host.demux.took()
            }
            None => false,
        }
    }

    /// Whether `owner` may send to `to`: the loopback network and VINO's own addresses always;
    /// the host link's network, or beyond it through its gateway, if root's egress policy lets
    /// this user reach it (root is not held to it).
    pub(crate) fn may_reach(&self, owner: &Owner, to: Ipv4Addr) -> Result<(), NetError> {
        if to.is_loopback() {
            return Ok(());
        }
        let Some(host) = self.config.host.as_ref() else {
            return Err(NetError::Unreachable(format!(
                "{to}: no link reaches it (only the loopback is attached)"
            )));
        };
        if to == host.address {
            return Ok(());
        }
        if !host.on_link(to) && host.gateway.is_none() {
            return Err(NetError::Unreachable(format!(
                "{to}: not on the host link and no gateway is set"
            )));
        }
        if owner.uid == 0 || host.egress.iter().any(|&prefix| HostConfig::contains(prefix, to)) {
            Ok(())
        } else {
            Err(NetError::Forbidden(to))
        }
    }

    /// A bound socket on `port` (held already, alone or for `peer`), charged one socket; on
    /// failure the port is let go.
    fn insert_bound(&mut self, owner: &Owner, port: u16, peer: Option<SocketAddrV4>) -> Result<SocketId, NetError> {
        let charges = match &owner.account {
            Some(account) => account.charge(Resource::Sockets, 1).map(|c| vec![c]),
            None => Ok(Vec::new()),
        };
        match charges {
            Ok(charges) => Ok(self.insert(owner.pid, Kind::Bound { port, charges, peer })),
            Err(e) => {
                self.ports.let_go(PortHold::of(port, peer));
                Err(e.into())
            }
        }
    }

    pub(crate) fn insert(&mut self, pid: u64, kind: Kind) -> SocketId {
        let id = self.next_id;
        self.next_id += 1;
        let waiters = Arc::default();
        self.entries.insert(
            id,
            Entry {
                pid,
                kind,
                waiters,
                nodelay: false,
            },
        );
        id
    }

    /// What one more socket costs `owner`: a socket and both its buffers. The socket itself
    /// may be paid for already (`prepaid`: a bound socket's charge, which it takes on); on
    /// failure that charge stays where it was.
    pub(crate) fn charge(&self, owner: &Owner, prepaid: &mut Option<Charge>) -> Result<Vec<Charge>, NetError> {
        let Some(account) = &owner.account else {
            return Ok(Vec::new());
        };
        let bytes = account.charge(Resource::SocketBytes, 2 * self.config.buffer_bytes as u64)?;
        let socket = match prepaid.take() {
            Some(c) => c,
            None => account.charge(Resource::Sockets, 1)?,
        };
        // The socket's charge first: `listen` takes it back from there when it fails.
        Ok(vec![socket, bytes])
    }

    /// A new smoltcp TCP socket, charged to `owner`, Nagle's rule off with `nodelay`.
    fn new_socket(&mut self, owner: &Owner, prepaid: &mut Option<Charge>, nodelay: bool) -> Result<Slot, NetError> {
        let bytes = self.config.buffer_bytes;
        let charges = self.charge(owner, prepaid)?;
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; bytes]),
            tcp::SocketBuffer::new(vec![0; bytes]),
        );
        socket.set_nagle_enabled(!nodelay);
        if let Some(congestion) = &owner.congestion {
            socket.set_congestion_hook(congestion.controller());
        }
        Ok(Slot {
            handle: self.sockets.add(socket),
            charges,
        })
    }

    /// A socket listening on `port`, charged to `owner`.
    fn listening_slot(
        &mut self,
        owner: &Owner,
        port: u16,
        prepaid: &mut Option<Charge>,
        nodelay: bool,
    ) -> Result<Slot, NetError> {
        let slot = self.new_socket(owner, prepaid, nodelay)?;
        self.sockets
            .get_mut::<tcp::Socket>(slot.handle)
            .listen(port)
            .expect("a new socket listens on a nonzero port");
        Ok(slot)
    }

    /// The entry `id`, if `pid` owns it.
    pub(crate) fn owned(&mut self, pid: u64, id: SocketId) -> Result<&mut Entry, NetError> {
        self.entries
            .get_mut(&id)
            .filter(|e| e.pid == pid)
            .ok_or(NetError::BadSocket)
    }

    /// The smoltcp socket of connection `id`, if `pid` owns it.
    fn stream(&mut self, pid: u64, id: SocketId) -> Result<&mut tcp::Socket<'static>, NetError> {
        let handle = match &self.owned(pid, id)?.kind {
            Kind::Stream { slot, .. } => slot.handle,
            Kind::Bound { .. } => return Err(NetError::NotConnected),
            Kind::Listener { .. } => return Err(NetError::WrongKind("a listening socket has no connection")),
            Kind::Datagram { .. } => return Err(NetError::WrongKind("a UDP socket has no connection")),
        };
        Ok(self.sockets.get_mut::<tcp::Socket>(handle))
    }

    /// The index in `listener`'s pool of a connection ready to accept. Slots whose handshake
    /// failed listen again.
    fn ready_connection(&mut self, pid: u64, listener: SocketId) -> Result<Option<usize>, NetError> {
        let Kind::Listener { port, pool } = &self.owned(pid, listener)?.kind else {
            return Err(NetError::WrongKind("accept needs a listening socket"));
        };
        let port = *port;
        let handles: Vec<SocketHandle> = pool.iter().map(|s| s.handle).collect();
        let mut ready = None;
        for (i, handle) in handles.into_iter().enumerate() {
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            match socket.state() {
                tcp::State::Listen | tcp::State::SynReceived => {}
                tcp::State::Closed => socket.listen(port).expect("a closed socket listens again"),
                _ if ready.is_none() => ready = Some(i),
                _ => {}
            }
        }
        Ok(ready)
    }

    /// Takes pool slot `at` of `listener` as a new connection owned by `owner`, and puts a
    /// fresh listening socket in its place (none if the owner's account is full: the pool
    /// shrinks until accepted connections close).
    fn take_connection(
        &mut self,
        owner: &Owner,
        listener: SocketId,
        at: usize,
    ) -> Result<(SocketId, SocketAddrV4), NetError> {
        let (port, nodelay) = match &self.owned(owner.pid, listener)? {
            Entry {
                kind: Kind::Listener { port, .. },
                nodelay,
                ..
            } => (*port, *nodelay),
            _ => unreachable!("checked by ready_connection"),
        };
        let fresh = self.listening_slot(owner, port, &mut None, nodelay).ok();
        let Some(Entry {
            kind: Kind::Listener { pool, .. },
            waiters,
            ..
        }) = self.entries.get_mut(&listener)
        else {
            unreachable!("checked above");
        };
        let slot = match fresh {
            Some(f) => std::mem::replace(&mut pool[at], f),
            None => pool.swap_remove(at),
        };
        // Other callers waiting to accept watch the pool as it was: they look again, and
        // watch the fresh slot too.
        waiters.wake_by_ref();
        let peer = self
            .sockets
            .get_mut::<tcp::Socket>(slot.handle)
            .remote_endpoint()
            .map_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), v4);
        let id = self.insert(owner.pid, Kind::Stream { slot, ephemeral: None });
        // A connection inherits its listener's option, as on Linux.
        self.owned(owner.pid, id)?.nodelay = nodelay;
        Ok((id, peer))
    }

    /// Closes entry `id`: with `reset`, or for a listener's pool, at once; otherwise a
    /// connection sends its FIN and finishes closing in the stack.
    fn close(&mut self, id: SocketId, reset: bool) {
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        // Whoever waits on it looks again, and finds it gone.
        entry.waiters.wake_by_ref();
        match entry.kind {
            Kind::Bound { port, peer, .. } => self.ports.let_go(PortHold::of(port, peer)),
            Kind::Listener { port, pool } => {
                for slot in pool {
                    self.sockets.get_mut::<tcp::Socket>(slot.handle).abort();
                    self.closing
                        .push(Closing::new(slot, None, self.config.clock.monotonic()));
                }
                self.ports.release(port);
            }
            Kind::Datagram { slot, port } => {
                // Nothing to finish: what was queued goes with it.
                self.sockets.remove(slot.handle);
                self.udp_ports.release(port);
            }
            Kind::Stream { slot, ephemeral } => {
                let socket = self.sockets.get_mut::<tcp::Socket>(slot.handle);
                // Data received and never read makes a close a reset, as on Linux (RFC 2525,
                // 2.17): the peer learns at once that it was not taken, and the connection
                // does not linger on a send queue its peer may never drain.
                if reset || socket.recv_queue() > 0 {
                    socket.abort();
                } else {
                    socket.close();
                }
                self.closing
                    .push(Closing::new(slot, ephemeral, self.config.clock.monotonic()));
            }
        }
        self.run();
        self.reap();
    }

    /// Puts back to listening the pool slots half open for longer than
    /// [`NetConfig::half_open`]: smoltcp has no SYN cookies, so this bounds what a flood of
    /// SYNs from forged addresses takes from a listener (its own pool, for that long).
    fn expire_half_open(&mut self) {
        let limit = self.config.half_open;
        let now = self.config.clock.monotonic();
        let mut seen = HashMap::with_capacity(self.half_open.len());
        for entry in self.entries.values() {
            let Kind::Listener { port, pool } = &entry.kind else {
                continue;
            };
            for slot in pool {
                let socket = self.sockets.get_mut::<tcp::Socket>(slot.handle);
                if socket.state() != tcp::State::SynReceived {
                    continue;
                }
                let since = self.half_open.get(&slot.handle).copied().unwrap_or(now);
                if now.saturating_sub(since) < limit {
                    seen.insert(slot.handle, since);
                    continue;
                }
                socket.abort();
                // An aborted socket is closed at once, and a closed one may listen again.
                let _ = socket.listen(*port);
            }
        }
        self.half_open = seen;
    }

    /// Removes the closing connections that are done (their charges go back), resetting
    /// those that made no progress for the linger time, or lingered too long in all.
    fn reap(&mut self) {
        let linger = self.config.linger;
        let now = self.config.clock.monotonic();
        let mut i = 0;
        while i < self.closing.len() {
            let c = &mut self.closing[i];
            let socket = self.sockets.get_mut::<tcp::Socket>(c.slot.handle);
            let done = matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait);
            let seen = (socket.state(), socket.send_queue());
            if seen != c.seen {
                c.seen = seen;
                c.moved = now;
            }
            let stuck = now.saturating_sub(c.moved) >= linger;
            let too_long = now.saturating_sub(c.since) >= linger.saturating_mul(LINGER_MOST);
            if !done && !stuck && !too_long {
                i += 1;
                continue;
            }
            if !done {
                socket.abort();
                self.run();
            }
            let c = self.closing.swap_remove(i);
            self.sockets.remove(c.slot.handle);
            if let Some(hold) = c.ephemeral {
                self.ports.let_go(hold);
            }
        }
    }
}
