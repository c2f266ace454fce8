//! The network in the simulation. The kernel's stack runs with no thread of its own, on the
//! simulation's clock, and its host link is a wire (`vino_net::wire`) to a second simulated
//! host: a bare stack with an echo server, on the same clock. Both ways of the wire and the
//! kernel's loopback lose, duplicate, reorder and delay packets by odds the seed draws (the
//! link layer's own fault model, the one `vino bench net` and the tests use).
//!
//! The workload's processes open TCP streams to the peer's echo server over the wire and to
//! each other's over the loopback, send bytes the seed decides, and read them back. Every byte
//! is checked where it comes out of a socket, at the server and back at the client: none lost,
//! duplicated, reordered or changed, and a stream ends (its end of file) exactly after its last
//! byte. A process may also abandon a stream half way (its close resets the connection). A
//! third of the streams between two processes go through a stream layer that both ends push
//! (the simulation's codec, which keys each frame by its index, so a frame decoded out of place
//! comes out changed). Now and then a process serves a port with a graft in the kernel (an
//! echo, or a generic graft that answers nothing, closes, fails or spins) and another sends it
//! bytes (`Network::in_kernel_server`). Half the seeds give the kernel's way out a rate, so its packets queue by
//! user and go in the order the bound `net.pick_packet` grafts choose. The
//! stacks run only in the network's own steps; the rest of the workload moves the clock too,
//! so connections see long pauses, retransmissions and backoff. At the end every stream still
//! open must finish within a bounded simulated time, every socket is closed, and both stacks
//! must end up empty (the simulator then checks that no socket or buffer byte stays charged).
//!
//! Nothing here reads the host's time and every call is non-blocking: one seed gives the same
//! packets on the wire in every run, which the report's `net_trace` shows.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{Clock, ManualClock, SharedClock};
use vino_kernel::{Kernel, Process, SocketId, SocketWait as Wait};
use vino_net::{Faults, HostConfig, LinkDevice, Net, NetConfig, Owner, WireEnd};

/// The kernel's address on the wire, and the peer's.
pub const KERNEL_ADDR: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
pub const PEER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
/// The peer's echo server.
const ECHO_PORT: u16 = 7;
/// Process `i` of the simulation listens on the loopback at this port plus `i`.
const LOOPBACK_PORT: u16 = 5000;
/// Streams open at once, and the longest one.
const STREAMS_MAX: usize = 4;
const STREAM_MAX_BYTES: u64 = 96 << 10;
/// The longest exchange with a server in the kernel, and its ports (plus the server's index).
const SERVE_MAX_BYTES: u64 = 48 << 10;
const SERVE_PORT: u16 = 6100;
/// Host time a server in the kernel may take to show a sign of life (its thread is a real one).
const SERVE_STUCK: std::time::Duration = std::time::Duration::from_secs(60);
/// Simulated time a client waits for a server that answers nothing before it hangs up.
const SERVE_SILENCE: Duration = Duration::from_millis(100);

/// Bytes a client offers in one call.
const CHUNK: usize = 8 << 10;
/// The most simulated time one pump step moves the clock.
const PUMP_MAX: Duration = Duration::from_millis(400);
/// Simulated time in which every stream still open at the end must finish, and in which both
/// stacks must then empty (closing handshakes, or the linger time that resets them).
const FINISH_WITHIN: Duration = Duration::from_secs(900);

// errnos the calls answer with, as numbers (the peer's calls give `NetError::errno`).
const EAGAIN: i32 = 11;

/// A limit of the user's: its socket memory (`ENOBUFS`) or its grafts (`EDQUOT`).
fn limited(errno: i32) -> bool {
    errno == 105 || errno == 122
}
const ENOTCONN: i32 = 107;
const ECONNRESET: i32 = 104;
const EPIPE: i32 = 32;

/// The byte at `offset` of a stream drawn from `seed`.
fn byte(seed: u64, offset: usize) -> u8 {
    let x = seed ^ (offset as u64 / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> (8 * (offset % 8))) as u8
}

/// The kernel's network settings for a seed, and the peer on the other end of its wire.
pub fn setup(seed: u64, clock: &Arc<ManualClock>) -> (NetConfig, Peer) {
    let mut rng = SplitMix64::new(seed ^ 0x6e65_7477_6f72_6b00);
    let shared = SharedClock::new(clock.clone());
    let (ours, theirs) = vino_net::wire();
    let ends = (ours.clone(), theirs.clone());
    let host = |end: WireEnd, me: Ipv4Addr, egress: Vec<(Ipv4Addr, u8)>, rng: &mut SplitMix64| HostConfig {
        egress,
        faults: faults(rng),
        mtu: [576, 1500, 9000][rng.below(3) as usize],
        ..HostConfig::on(LinkDevice::Wire(end), me, 24)
    };
    let mut kernel_host = host(ours, KERNEL_ADDR, vec![(PEER_ADDR, 32)], &mut rng);
    // Half the seeds give the way out a rate (125 KB/s to 6 MB/s): packets then queue by user,
    // share the link, and go in the order of whatever `net.pick_packet` grafts are bound.
    if rng.chance(0.5) {
        kernel_host.shaping = Some(vino_net::Shaping::rate(125_000 * (1 + rng.below(48))));
    }
    let kernel = NetConfig {
        // Small windows too, so zero windows and their probes happen.
        buffer_bytes: 2048 << rng.below(6),
        max_backlog: 8,
        faults: faults(&mut rng),
        host: Some(kernel_host),
        clock: shared.clone(),
        seed: Some(rng.next_u64()),
        stepped: true,
        ..NetConfig::default()
    };
    let peer = Net::start(NetConfig {
        host: Some(host(theirs, PEER_ADDR, Vec::new(), &mut rng)),
        clock: shared,
        seed: Some(rng.next_u64()),
        stepped: true,
        ..NetConfig::default()
    })
    .expect("a stack on a wire starts");
    let owner = Owner {
        pid: 1,
        uid: 0,
        account: None,
        congestion: None,
    };
    let listener = peer
        .tcp_listen(&owner, ECHO_PORT, 8)
        .expect("the peer's echo server listens");
    let peer = Peer {
        net: peer,
        owner,
        listener,
        ends,
    };
    (kernel, peer)
}

/// A link's faults: none for a third of the seeds, else odds up to 5% loss, 3% copies, 10%
/// reordering and up to 5 ms of delay.
fn faults(rng: &mut SplitMix64) -> Faults {
    if rng.chance(0.3) {
        return Faults::default();
    }
    Faults {
        seed: rng.next_u64(),
        loss: rng.next_f64() * 0.05,
        duplicate: rng.next_f64() * 0.03,
        reorder: rng.next_f64() * 0.1,
        delay: Duration::from_micros(rng.below(5000)),
    }
}

/// The second host: a bare stack (no kernel) whose root runs an echo server.
pub struct Peer {
    net: Net,
    owner: Owner,
    listener: SocketId,
    /// The wire's ends: the kernel's, the peer's.
    ends: (WireEnd, WireEnd),
}

/// A step of the network workload; stream numbers are taken modulo the streams open.
#[derive(Debug, Clone)]
pub enum NetStep {
    /// Process `who` opens a stream of `len` bytes drawn from `seed`: to the peer, or to
    /// process `to` over the loopback.
    Connect {
        who: usize,
        to: Option<usize>,
        len: usize,
        seed: u64,
    },
    /// The stacks run and the clock moves, `rounds` times (each stream's calls in between).
    Pump(usize),
    /// A stream's client closes it half way.
    Abandon(usize),
    /// Process `server` serves a port with a graft in the kernel (an echo, or one of the
    /// generic grafts behaving as `behaviour`), and process `client` sends it `len` bytes
    /// drawn from `seed` over the loopback (see [`Network::in_kernel_server`]).
    Serve {
        server: usize,
        client: usize,
        behaviour: Option<crate::grafts::Behaviour>,
        len: usize,
        seed: u64,
    },
}

impl NetStep {
    pub fn random(rng: &mut SplitMix64, who: usize, procs: usize) -> NetStep {
        match rng.below(10) {
            0..=2 => NetStep::Connect {
                who,
                to: rng.chance(0.5).then(|| rng.below(procs as u64) as usize),
                len: rng.below(STREAM_MAX_BYTES) as usize,
                seed: rng.next_u64(),
            },
            3 => NetStep::Abandon(rng.below(64) as usize),
            4 if rng.chance(0.3) => {
                let behaviours = crate::grafts::BEHAVIOURS;
                NetStep::Serve {
                    server: who,
                    client: rng.below(procs as u64) as usize,
                    behaviour: rng
                        .chance(0.5)
                        .then(|| behaviours[rng.below(behaviours.len() as u64) as usize]),
                    len: 1 + rng.below(SERVE_MAX_BYTES) as usize,
                    seed: rng.next_u64(),
                }
            }
            _ => NetStep::Pump(1 + rng.below(40) as usize),
        }
    }
}

/// What a client of a server in the kernel must see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Every byte back, in order.
    Echo,
    /// Nothing back, the connection open.
    Silence,
    /// The connection closed (by the graft, or by the kernel's default after a failed call).
    Closed,
    /// Whatever it answers (a fuzzer's module).
    Anything,
}

/// Where a stream's server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Peer,
    Process(usize),
}

/// One stream and what each end has seen of it.
struct Stream {
    client: usize,
    conn: Option<SocketId>,
    /// The client's address, as the server's accept names it.
    from: SocketAddrV4,
    server: Server,
    served: Option<SocketId>,
    seed: u64,
    len: usize,
    sent: usize,
    /// The next bytes to send, made from the seed.
    outbox: Vec<u8>,
    shut: bool,
    /// Bytes the server took, and those it holds to echo.
    took: usize,
    echo: Vec<u8>,
    /// The server saw the client's end, and ended its own side after the echo.
    server_eof: bool,
    server_shut: bool,
    back: usize,
    abandoned: bool,
    /// Both ends pushed the stream layer.
    layered: bool,
}

impl Stream {
    /// Checks `bytes`, which came out of a socket at offset `at` of stream `i` (`side`: where):
    /// each must be the stream's byte there, and none past its end.
    fn check(&self, i: usize, at: usize, bytes: &[u8], side: &str) -> Result<(), String> {
        if let Some(k) = (0..bytes.len()).find(|&k| bytes[k] != byte(self.seed, at + k)) {
            return Err(format!(
                "stream {i} ({}): byte {} came out changed {side}",
                self.describe(),
                at + k
            ));
        }
        if at + bytes.len() > self.len {
            return Err(format!(
                "stream {i} ({}): {} bytes came out {side}",
                self.describe(),
                at + bytes.len()
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "{:?} from {}: sent {} of {}, server took {}, back {}{}{}",
            self.server,
            self.from,
            self.sent,
            self.len,
            self.took,
            self.back,
            if self.served.is_some() { ", accepted" } else { "" },
            if self.abandoned { ", abandoned" } else { "" }
        )
    }
}

/// The network workload's state.
pub struct Network {
    peer: Peer,
    clock: Arc<ManualClock>,
    streams: Vec<Stream>,
    /// Each process's loopback listener.
    listeners: BTreeMap<usize, SocketId>,
    pub streams_done: u64,
    /// Of those, the streams that went through a stream layer.
    pub layered_done: u64,
    /// Exchanges with servers in the kernel that ended as their grafts' behaviour says.
    pub served: u64,
    custom_server: Option<Arc<Vec<u8>>>,
    pub bytes_checked: u64,
    buf: Vec<u8>,
    /// The stream layer's module.
    layer: Vec<u8>,
}

/// The calls of a stream's server.
fn server_end<'a>(peer: &'a Peer, procs: &'a [Arc<Process>], server: Server) -> End<'a> {
    match server {
        Server::Peer => End::Peer(peer),
        Server::Process(j) => End::Process(&procs[j]),
    }
}

/// A socket call's answer, its error as an errno.
type Answer<T> = Result<T, i32>;

/// The calls of either end: a kernel process's, or the peer's root's.
enum End<'a> {
    Process(&'a Process),
    Peer(&'a Peer),
}

impl End<'_> {
    fn send(&self, id: SocketId, data: &[u8]) -> Answer<usize> {
        match self {
            End::Process(p) => p.socket_send(id, data, Wait::No).map_err(|e| e.errno as i32),
            End::Peer(peer) => peer.net.send(&peer.owner, id, data, Wait::No).map_err(|e| e.errno()),
        }
    }

    fn recv(&self, id: SocketId, buf: &mut [u8]) -> Answer<usize> {
        match self {
            End::Process(p) => p.socket_recv(id, buf, Wait::No).map_err(|e| e.errno as i32),
            End::Peer(peer) => peer.net.recv(&peer.owner, id, buf, Wait::No).map_err(|e| e.errno()),
        }
    }

    fn accept(&self, listener: SocketId) -> Answer<(SocketId, SocketAddrV4)> {
        match self {
            End::Process(p) => p.tcp_accept(listener, Wait::No).map_err(|e| e.errno as i32),
            End::Peer(peer) => peer.net.accept(&peer.owner, listener, Wait::No).map_err(|e| e.errno()),
        }
    }

    fn shutdown(&self, id: SocketId) -> Answer<()> {
        match self {
            End::Process(p) => p.socket_shutdown_write(id).map_err(|e| e.errno as i32),
            End::Peer(peer) => peer.net.shutdown_write(&peer.owner, id).map_err(|e| e.errno()),
        }
    }

    fn close(&self, id: SocketId) -> Answer<()> {
        match self {
            End::Process(p) => p.socket_close(id).map_err(|e| e.errno as i32),
            End::Peer(peer) => peer.net.close(&peer.owner, id).map_err(|e| e.errno()),
        }
    }
}

impl Network {
    /// `custom_server`: a fuzzer's `event.net.packet` module, which then serves in place of
    /// the simulator's own grafts.
    pub fn new(peer: Peer, clock: Arc<ManualClock>, custom_server: Option<Arc<Vec<u8>>>) -> Network {
        Network {
            custom_server,
            peer,
            clock,
            streams: Vec::new(),
            listeners: BTreeMap::new(),
            streams_done: 0,
            layered_done: 0,
            served: 0,
            bytes_checked: 0,
            buf: Vec::new(),
            layer: crate::grafts::stream_codec(),
        }
    }

    /// A hash of every packet both ends put on the wire, in order.
    pub fn trace(&self) -> u64 {
        self.peer.ends.0.trace() ^ self.peer.ends.1.trace().rotate_left(1)
    }

    /// Decisions `net.pick_packet` grafts made on the kernel's way out (a failed call counts:
    /// the default then decided).
    pub fn picks(&self, kernel: &Kernel) -> u64 {
        kernel
            .host_link_stats()
            .and_then(|s| s.shaped)
            .map_or(0, |e| e.user_picks + e.link_picks)
    }

    /// Faults the wire and the loopback injected so far (lost, copied, reordered packets).
    pub fn faults(&self, kernel: &Kernel) -> u64 {
        let f = |s: vino_net::LinkStats| s.lost + s.duplicated + s.reordered;
        let peer = self.peer.net.host_stats().map_or(0, |s| f(s.faults));
        let ours = kernel.host_link_stats().map_or(0, |s| f(s.faults));
        peer + ours + kernel.loopback_stats().map_or(0, f)
    }

    pub fn apply(&mut self, kernel: &Kernel, procs: &[Arc<Process>], step: &NetStep) -> Result<(), String> {
        match *step {
            NetStep::Connect { who, to, len, seed } => self.connect(procs, who, to, len, seed),
            NetStep::Pump(rounds) => {
                for _ in 0..rounds {
                    self.turn(procs)?;
                    self.run_stacks(kernel, PUMP_MAX);
                }
                Ok(())
            }
            NetStep::Serve {
                server,
                client,
                behaviour,
                len,
                seed,
            } => self.in_kernel_server(kernel, (&procs[server], &procs[client]), server, behaviour, (len, seed)),
            NetStep::Abandon(k) => {
                if self.streams.is_empty() {
                    return Ok(());
                }
                let k = k % self.streams.len();
                let s = &mut self.streams[k];
                if let Some(conn) = s.conn.take() {
                    s.abandoned = true;
                    procs[s.client]
                        .socket_close(conn)
                        .map_err(|e| format!("closing a stream half way: {e}"))?;
                }
                Ok(())
            }
        }
    }

    fn connect(
        &mut self,
        procs: &[Arc<Process>],
        who: usize,
        to: Option<usize>,
        len: usize,
        seed: u64,
    ) -> Result<(), String> {
        if self.streams.len() >= STREAMS_MAX {
            return Ok(());
        }
        let p = &procs[who];
        let (server, addr) = match to {
            None => (Server::Peer, SocketAddrV4::new(PEER_ADDR, ECHO_PORT)),
            Some(j) => {
                let port = LOOPBACK_PORT + j as u16;
                if let std::collections::btree_map::Entry::Vacant(e) = self.listeners.entry(j) {
                    let l = procs[j]
                        .tcp_listen(port, 4)
                        .map_err(|e| format!("process {j} listening on the loopback: {e}"))?;
                    e.insert(l);
                }
                (Server::Process(j), SocketAddrV4::new(vino_kernel::LOOPBACK, port))
            }
        };
        let conn = match p.tcp_connect(addr, Wait::No) {
            Ok(c) => c,
            // The user's socket limit, or its ports: refused with a clear errno, nothing held.
            Err(e) if e.errno as i32 == 105 || e.errno as i32 == 99 => return Ok(()),
            Err(e) => return Err(format!("process {who} connecting to {addr}: {e}")),
        };
        let from = p
            .socket_local_addr(conn)
            .map_err(|e| format!("a new connection's address: {e}"))?;
        let layered = matches!(server, Server::Process(_))
            && seed.is_multiple_of(3)
            && match p.socket_push(conn, &self.layer) {
                Ok(_) => true,
                // The user's grafts or socket memory at its limit: the stream goes plain.
                Err(e) if limited(e.errno as i32) => false,
                Err(e) => return Err(format!("process {who} pushing a layer on its connection: {e}")),
            };
        let from = match server {
            // The peer sees the kernel's address on the wire; the loopback's is 127.0.0.1.
            Server::Peer => SocketAddrV4::new(KERNEL_ADDR, from.port()),
            Server::Process(_) => SocketAddrV4::new(vino_kernel::LOOPBACK, from.port()),
        };
        self.streams.push(Stream {
            client: who,
            conn: Some(conn),
            from,
            server,
            served: None,
            seed,
            len,
            sent: 0,
            outbox: Vec::new(),
            shut: false,
            took: 0,
            echo: Vec::new(),
            server_eof: false,
            server_shut: false,
            back: 0,
            abandoned: false,
            layered,
        });
        Ok(())
    }

    /// A server in the kernel: `server` serves its port with an echo graft (`behaviour` `None`)
    /// or a generic one, `client` connects over the loopback and sends `len` bytes drawn from
    /// `seed`. The echo must send every byte back in order; a graft that answers nothing
    /// (`Zero`) must send nothing; any other fails or closes, and the kernel's default then
    /// closes the connection, which the client must see. The server is unbound at the end, so
    /// nothing it held stays charged (the simulator's final count). The server's thread is a
    /// real one: the client spins (yielding) on host time, bounded.
    fn in_kernel_server(
        &mut self,
        kernel: &Kernel,
        (server, client): (&Arc<Process>, &Arc<Process>),
        index: usize,
        behaviour: Option<crate::grafts::Behaviour>,
        (len, seed): (usize, u64),
    ) -> Result<(), String> {
        use crate::grafts::Behaviour;
        let port = SERVE_PORT + index as u16;
        let g = vino_kernel::graftpoints::find("event.net.packet").expect("a graftpoint");
        let (wasm, expect) = match (&self.custom_server, behaviour) {
            // A fuzzer's module: anything it answers goes, as long as the kernel holds.
            (Some(custom), _) => (custom.to_vec(), Expect::Anything),
            (None, None) => (crate::grafts::echo_server(), Expect::Echo),
            (None, Some(Behaviour::Zero)) => (crate::grafts::module(g, Behaviour::Zero), Expect::Silence),
            (None, Some(b)) => (crate::grafts::module(g, b), Expect::Closed),
        };
        // Refusals (the user's threads or grafts at their limits) are part of the game.
        if server.net_serve(port, 4, &wasm).is_err() {
            return Ok(());
        }
        // The server's thread is a real one: before each step of the client and of the clock,
        // it is let finish everything it can do (every thread of its process blocked again),
        // so what it did depends on the sockets alone, and a seed is the same run twice.
        let started = std::time::Instant::now();
        let settled = || -> Result<(), String> {
            while server
                .threads()
                .iter()
                .any(|t| t.state != vino_kernel::ThreadState::Blocked)
            {
                if started.elapsed() > SERVE_STUCK {
                    return Err(format!(
                        "a server in the kernel ({behaviour:?}) never settled in {SERVE_STUCK:?}"
                    ));
                }
                std::thread::yield_now();
            }
            Ok(())
        };
        let point = format!("event.net.packet/{port}");
        let calls = || {
            server
                .graft_list()
                .into_iter()
                .find(|s| s.point == point)
                .and_then(|s| s.stats)
                .map_or(0, |s| s.invocations)
        };
        let outcome = (|| {
            let conn = match client.tcp_connect(SocketAddrV4::new(vino_kernel::LOOPBACK, port), Wait::No) {
                Ok(c) => c,
                Err(e) if limited(e.errno as i32) => return Ok(()),
                Err(e) => return Err(format!("connecting to a server in the kernel: {e}")),
            };
            let data: Vec<u8> = (0..len).map(|i| byte(seed, i)).collect();
            let (mut sent, mut back, mut closed) = (0, Vec::new(), false);
            let mut buf = vec![0u8; 16 << 10];
            let mut silent_since = None;
            loop {
                settled()?;
                if started.elapsed() > SERVE_STUCK {
                    return Err(format!(
                        "a server in the kernel ({behaviour:?}): {sent} of {len} bytes sent, {} back, closed {closed}, {} calls, in {SERVE_STUCK:?} of host time",
                        back.len(),
                        calls()
                    ));
                }
                if sent < len {
                    match client.socket_send(conn, &data[sent..], Wait::No) {
                        Ok(n) => sent += n,
                        Err(e) if e.errno as i32 == EAGAIN || e.errno as i32 == ENOTCONN => {}
                        Err(_) => closed = true,
                    }
                }
                match client.socket_recv(conn, &mut buf, Wait::No) {
                    Ok(0) => closed = true,
                    Ok(n) => back.extend_from_slice(&buf[..n]),
                    Err(e) if e.errno as i32 == EAGAIN || e.errno as i32 == ENOTCONN => {}
                    Err(_) => closed = true,
                }
                // Every byte reached the graft (its calls: the connection and data), then a
                // while of silence.
                let mut quiet = || {
                    sent == len && calls() >= 2 && {
                        let since = *silent_since.get_or_insert(self.clock.monotonic());
                        self.clock.monotonic() - since >= SERVE_SILENCE
                    }
                };
                let done = match expect {
                    Expect::Echo => back.len() >= len,
                    Expect::Silence => quiet(),
                    Expect::Closed => closed,
                    Expect::Anything => closed || back.len() >= len || quiet(),
                };
                if done {
                    break;
                }
                settled()?;
                self.run_stacks(kernel, Duration::from_millis(1));
            }
            let _ = client.socket_close(conn);
            match expect {
                Expect::Echo if back != data => Err(format!(
                    "a server in the kernel echoed {} bytes that differ from the {len} sent",
                    back.len()
                )),
                Expect::Silence if !back.is_empty() || closed => Err(format!(
                    "a server in the kernel that answers nothing sent {} bytes back (closed: {closed})",
                    back.len()
                )),
                _ => {
                    self.served += 1;
                    Ok(())
                }
            }
        })();
        server
            .net_unserve(port)
            .map_err(|e| format!("unserving port {port}: {e}"))?;
        outcome
    }

    /// Time passes (the workload's pauses): the stacks run all along, as the stack's thread
    /// would, while no process calls.
    pub fn pass(&self, kernel: &Kernel, time: Duration) {
        let until = self.clock.monotonic() + time;
        while self.clock.monotonic() < until {
            self.run_stacks(kernel, until - self.clock.monotonic());
        }
    }

    /// Runs both stacks until neither has anything to do now, then moves the clock to what is
    /// due next (at most `most`, at least a little, so a stack that keeps finding work now
    /// cannot hold the simulation).
    fn run_stacks(&self, kernel: &Kernel, most: Duration) {
        let due = vino_net::settle(&mut [&mut || kernel.net_step(), &mut || self.peer.net.step()]);
        self.clock
            .advance(due.unwrap_or(most).clamp(Duration::from_micros(100).min(most), most));
    }

    /// One round of every stream's calls: the client sends, the servers accept, take and echo,
    /// the client reads back. Every byte is checked where it comes out.
    fn turn(&mut self, procs: &[Arc<Process>]) -> Result<(), String> {
        self.accept_all(procs)?;
        // One buffer for every read, kept between turns.
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(16 << 10, 0);
        let done = (0..self.streams.len()).try_for_each(|i| {
            self.serve(procs, i, &mut buf)
                .and_then(|()| self.client_turn(procs, i, &mut buf))
        });
        self.buf = buf;
        done?;
        // A stream goes when neither end holds it (an abandoned one whose server never got
        // it too: a late accept of it is closed).
        self.streams.retain(|s| s.conn.is_some() || s.served.is_some());
        Ok(())
    }

    /// Accepts every pending connection of every server, each to its stream.
    fn accept_all(&mut self, procs: &[Arc<Process>]) -> Result<(), String> {
        let mut servers: Vec<(Server, End<'_>, SocketId)> =
            vec![(Server::Peer, End::Peer(&self.peer), self.peer.listener)];
        for (&j, &l) in &self.listeners {
            servers.push((Server::Process(j), End::Process(&procs[j]), l));
        }
        for (server, end, listener) in servers {
            loop {
                let (conn, from) = match end.accept(listener) {
                    Ok(c) => c,
                    Err(EAGAIN) => break,
                    Err(e) => return Err(format!("{server:?} accepting: errno {e}")),
                };
                match self
                    .streams
                    .iter_mut()
                    .find(|s| s.server == server && s.from == from && s.served.is_none() && s.took == 0)
                {
                    Some(s) if s.layered => {
                        let End::Process(p) = end else {
                            unreachable!("only processes' streams are layered")
                        };
                        match p.socket_push(conn, &self.layer) {
                            Ok(_) => s.served = Some(conn),
                            // The server's user at its limit: the stream cannot go on.
                            Err(e) if limited(e.errno as i32) => {
                                let _ = end.close(conn);
                                if let Some(c) = s.conn.take() {
                                    s.abandoned = true;
                                    procs[s.client]
                                        .socket_close(c)
                                        .map_err(|e| format!("closing a stream its server could not layer: {e}"))?;
                                }
                            }
                            Err(e) => return Err(format!("{server:?} pushing a layer on its connection: {e}")),
                        }
                    }
                    Some(s) => s.served = Some(conn),
                    None => {
                        // A connection no stream waits for: its client closed it already.
                        let _ = end.close(conn);
                    }
                }
            }
        }
        Ok(())
    }

    /// The server's side of stream `i`: take bytes (checking each) and echo them; at the
    /// client's end, end its own side once the echo is out, and close when the client has
    /// closed. (A server that closed at once would leave its echo to the linger rule, which
    /// resets a connection whose reader stalls: the workload's clients stall for long.) An
    /// abandoned stream's echo is dropped and its connection closed at its reset or end.
    fn serve(&mut self, procs: &[Arc<Process>], i: usize, buf: &mut [u8]) -> Result<(), String> {
        let Network {
            peer,
            streams,
            bytes_checked,
            ..
        } = self;
        let s = &mut streams[i];
        let Some(conn) = s.served else {
            return Ok(());
        };
        let end = server_end(peer, procs, s.server);
        let gone = |e: i32| matches!(e, ECONNRESET | ENOTCONN | EPIPE);
        let close = |s: &mut Stream| {
            s.served = None;
            s.echo.clear();
            end.close(conn).map_err(|e| {
                format!(
                    "stream {i} ({}): its server's close failed with errno {e}",
                    s.describe()
                )
            })
        };
        if s.abandoned {
            s.echo.clear();
        }
        if s.server_shut {
            return if s.conn.is_none() { close(s) } else { Ok(()) };
        }
        if s.echo.is_empty() && !s.server_eof {
            match end.recv(conn, buf) {
                Ok(0) => s.server_eof = true,
                Ok(n) => {
                    s.check(i, s.took, &buf[..n], "at the server")?;
                    s.took += n;
                    *bytes_checked += n as u64;
                    s.echo.extend_from_slice(&buf[..n]);
                }
                Err(EAGAIN) => {}
                Err(e) if s.abandoned && gone(e) => return close(s),
                Err(e) => {
                    return Err(format!(
                        "stream {i} ({}): its server's receive failed with errno {e}",
                        s.describe()
                    ));
                }
            }
        }
        if s.server_eof && s.abandoned {
            return close(s);
        }
        if s.server_eof && s.took != s.len {
            return Err(format!(
                "stream {i}: the server saw its end after {} bytes of {}",
                s.took, s.len
            ));
        }
        if !s.echo.is_empty() {
            match end.send(conn, &s.echo) {
                Ok(n) => {
                    s.echo.drain(..n);
                }
                Err(EAGAIN) => {}
                Err(e) if s.abandoned && gone(e) => return close(s),
                Err(e) => {
                    return Err(format!(
                        "stream {i} ({}): its server's echo failed with errno {e}",
                        s.describe()
                    ));
                }
            }
        }
        if s.server_eof && s.echo.is_empty() {
            end.shutdown(conn).map_err(|e| {
                format!(
                    "stream {i} ({}): its server's shutdown failed with errno {e}",
                    s.describe()
                )
            })?;
            s.server_shut = true;
        }
        Ok(())
    }

    /// The client's side of stream `i`: send, end its side when all is sent, read back.
    fn client_turn(&mut self, procs: &[Arc<Process>], i: usize, buf: &mut [u8]) -> Result<(), String> {
        let Network {
            streams,
            bytes_checked,
            streams_done,
            layered_done,
            ..
        } = self;
        let s = &mut streams[i];
        let Some(conn) = s.conn else {
            return Ok(());
        };
        let p = &procs[s.client];
        if s.sent < s.len {
            if s.outbox.is_empty() {
                // Made once per chunk, not per try: most tries find the window shut.
                let from = s.sent;
                s.outbox = (from..s.len.min(from + CHUNK)).map(|o| byte(s.seed, o)).collect();
            }
            match p.socket_send(conn, &s.outbox, Wait::No) {
                Ok(n) => {
                    s.sent += n;
                    s.outbox.drain(..n);
                }
                Err(e) if matches!(e.errno as i32, EAGAIN | ENOTCONN) => {}
                Err(e) => return Err(format!("stream {i} ({}): its client's send failed: {e}", s.describe())),
            }
        } else if !s.shut {
            match p.socket_shutdown_write(conn) {
                Ok(()) => s.shut = true,
                Err(e) if e.errno as i32 == ENOTCONN => {}
                Err(e) => {
                    return Err(format!(
                        "stream {i} ({}): its client's shutdown failed: {e}",
                        s.describe()
                    ));
                }
            }
        }
        match p.socket_recv(conn, buf, Wait::No) {
            Ok(0) => {
                if s.back != s.len {
                    return Err(format!(
                        "stream {i} ({}): its echo ended after {} bytes of {}",
                        s.describe(),
                        s.back,
                        s.len
                    ));
                }
                p.socket_close(conn)
                    .map_err(|e| format!("stream {i} ({}): its client's close failed: {e}", s.describe()))?;
                s.conn = None;
                *streams_done += 1;
                *layered_done += u64::from(s.layered);
            }
            Ok(n) => {
                s.check(i, s.back, &buf[..n], "back at the client")?;
                s.back += n;
                *bytes_checked += n as u64;
            }
            Err(e) if matches!(e.errno as i32, EAGAIN | ENOTCONN) => {}
            Err(e) => {
                return Err(format!(
                    "stream {i} ({}): its client's receive failed: {e}",
                    s.describe()
                ));
            }
        }
        Ok(())
    }

    /// End of the first pass: every stream still open finishes, checked to its last byte;
    /// every socket closes and both stacks end up holding nothing.
    pub fn finish(&mut self, kernel: &Kernel, procs: &[Arc<Process>]) -> Result<(), String> {
        // A server gives up on a stream its client abandoned: the reset may have been lost,
        // and with nothing to send it would wait for the client forever.
        let peer = &self.peer;
        for s in self.streams.iter_mut().filter(|s| s.abandoned) {
            if let Some(conn) = s.served.take() {
                let _ = server_end(peer, procs, s.server).close(conn);
            }
        }
        let start = self.clock.monotonic();
        while !self.streams.is_empty() {
            if self.clock.monotonic() - start > FINISH_WITHIN {
                let open: Vec<String> = self.streams.iter().map(Stream::describe).collect();
                let sockets: Vec<_> = procs
                    .iter()
                    .flat_map(|p| kernel.sockets_of(p.pid()))
                    .map(|s| (s.local, s.remote, s.state))
                    .collect();
                return Err(format!(
                    "streams not finished in {FINISH_WITHIN:?} of simulated time: {open:?}; the kernel's sockets {sockets:?}, the peer's {:?}",
                    self.peer
                        .net
                        .sockets_of(self.peer.owner.pid)
                        .into_iter()
                        .map(|s| (s.local, s.remote, s.state))
                        .collect::<Vec<_>>()
                ));
            }
            self.turn(procs)?;
            self.run_stacks(kernel, PUMP_MAX);
        }
        for (j, l) in std::mem::take(&mut self.listeners) {
            procs[j]
                .socket_close(l)
                .map_err(|e| format!("closing process {j}'s listener: {e}"))?;
        }
        let start = self.clock.monotonic();
        loop {
            let ours = kernel.net_stats().map_or(0, |s| s.stack_sockets);
            // The peer's listener stays: its pool is all it may hold.
            let theirs = self.peer.net.stats();
            if ours == 0 && theirs.stack_sockets == 8 && theirs.connections == 0 && theirs.closing == 0 {
                return Ok(());
            }
            if self.clock.monotonic() - start > FINISH_WITHIN {
                return Err(format!(
                    "every socket closed, yet after {FINISH_WITHIN:?} the kernel's stack holds {:?} and the peer's {theirs:?}",
                    kernel.net_stats()
                ));
            }
            self.run_stacks(kernel, Duration::from_secs(1));
        }
    }
}
