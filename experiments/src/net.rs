//! `vino bench net`: VINO's TCP/IP stack against Linux's own over a link between them, with the
//! floors measured in the same run (docs/network.md, "Measured").
//!
//! The bed, made fresh for each run (root only): a network namespace whose Linux stack is the
//! peer; VINO's stack (`vino-net`, as the kernel's processes use it) with its host link, a TUN
//! device moved into that namespace (10.78.0.2 VINO, 10.78.0.1 Linux, MTU 1500); and for the
//! comparison, two more namespaces joined by a veth pair with the same MTU (Linux to Linux).
//!
//! * **Raw pump**, the floor for any user-space stack on this link: UDP packets of the MTU
//!   written through the same batched writer (`vino_hostlink::batch`) to a Linux socket, and the
//!   other way read through the same batched reader. No protocol work on VINO's side.
//! * **Bulk TCP**, both ways, one and eight connections: bytes received by the far end over the
//!   time from the first send to the last end of stream. VINO to Linux and Linux to VINO against
//!   Linux to Linux over the veth.
//! * **Round trips** of 64-byte messages on one connection (p50, p99): VINO as the client of a
//!   Linux echo server, and Linux to Linux.
//! * **Loss**: bulk and round trips again with 1% of packets lost each way by VINO's link layer
//!   (its seeded faults), against smoltcp's congestion control.
//! * **A victim under a flood**: a Linux client's round trips to one VINO user's echo server,
//!   alone and while eight Linux connections send as fast as they can to another VINO user's
//!   port: the ratio of the victim's p50 and p99 under the flood to alone. Its floor: the same
//!   flood and round trips with Linux's own stack serving both ports over the veth.
//!
//! Each figure is the median of the rounds; the ratios are taken within a round.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::Serialize;
use vino_hostlink::netns::{Netns, ip};
use vino_hostlink::{Tun, batch};
use vino_measure::report::{Table, bar_chart, fmt_ratio};
use vino_net::{Faults, HostConfig, Net, NetConfig, Owner, Wait};

use crate::e6_layout::median_of;

const MTU: usize = 1500;
const VINO: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const PUMP_VINO: Ipv4Addr = Ipv4Addr::new(10, 80, 0, 2);
const PUMP_PEER: Ipv4Addr = Ipv4Addr::new(10, 80, 0, 1);
const VETH_A: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 1);
const VETH_B: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);
const PATIENCE: Wait = Wait::For(Duration::from_secs(30));
const MESSAGE: usize = 64;

#[derive(Clone, Debug)]
pub struct NetOptions {
    pub quick: bool,
    /// How long each bulk transfer sends.
    pub seconds: f64,
    pub rounds: usize,
    /// Round trips per latency measurement.
    pub round_trips: usize,
}

impl NetOptions {
    pub fn new(quick: bool) -> NetOptions {
        NetOptions {
            quick,
            seconds: if quick { 0.4 } else { 2.0 },
            rounds: if quick { 1 } else { 3 },
            round_trips: if quick { 1000 } else { 10_000 },
        }
    }
}

/// One measured figure: a path (raw pump, VINO and Linux, Linux and Linux), a case and its
/// medians over the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub case: String,
    pub path: String,
    /// Bulk transfers: megabits a second; round trips: none.
    pub mbit_s: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct NetReport {
    pub mtu: usize,
    pub seconds: f64,
    pub rounds: usize,
    pub round_trips: usize,
    /// Whether the host link moved packets through io_uring (else a call per packet).
    pub batched_io: bool,
    pub rows: Vec<Row>,
    /// The ratios the goals are stated in, each the median of the rounds' own.
    pub goals: Vec<Goal>,
}

/// A ratio within a round, its goal and whether it was met (`None`: reported, no goal).
#[derive(Debug, Serialize)]
pub struct Goal {
    pub what: String,
    pub measured: f64,
    pub goal: String,
    pub met: Option<bool>,
}

/// The namespaces and the links between them; all gone when dropped.
struct Bed {
    peer: Netns,
    a: Netns,
    b: Netns,
}

impl Bed {
    fn new() -> Result<Bed> {
        use std::os::unix::fs::MetadataExt;
        ensure!(
            std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0),
            "vino bench net needs root: it makes network namespaces, a TUN device and a veth pair"
        );
        let tag = std::process::id() % 10_000;
        let peer = Netns::new(&format!("vino-bench-peer{tag}"))?;
        let a = Netns::new(&format!("vino-bench-a{tag}"))?;
        let b = Netns::new(&format!("vino-bench-b{tag}"))?;
        let (va, vb) = (format!("vba{tag}"), format!("vbb{tag}"));
        ip(&[
            "link", "add", &va, "mtu", "1500", "type", "veth", "peer", "name", &vb, "mtu", "1500",
        ])?;
        a.adopt(&va, &format!("{VETH_A}/24"))?;
        b.adopt(&vb, &format!("{VETH_B}/24"))?;
        Ok(Bed { peer, a, b })
    }

    /// VINO's stack with its host link in the peer's namespace, losing `loss` of packets each way.
    fn vino(&self, loss: f64) -> Result<Net> {
        let device = format!("vbn{}", std::process::id() % 10_000);
        let net = Net::start(NetConfig {
            host: Some(HostConfig {
                egress: vec![(PEER, 32)],
                mtu: MTU,
                faults: Faults {
                    seed: 1,
                    loss,
                    ..Faults::default()
                },
                ..HostConfig::new(&device, VINO, 24)
            }),
            ..NetConfig::default()
        })
        .map_err(|e| anyhow!("{e}"))?;
        self.peer.adopt(&device, &format!("{PEER}/24"))?;
        Ok(net)
    }
}

fn owner(pid: u64, uid: u32) -> Owner {
    Owner {
        pid,
        uid,
        account: None,
        congestion: None,
    }
}

fn mbit(bytes: u64, d: Duration) -> f64 {
    bytes as f64 * 8.0 / d.as_secs_f64() / 1e6
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}

/// Runs `f` in namespace `ns` and waits for it.
fn in_ns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    join(ns.spawn(f)?)
}

fn join<T>(h: JoinHandle<std::io::Result<T>>) -> Result<T> {
    Ok(h.join().map_err(|_| anyhow!("a measuring thread panicked"))??)
}

// ---- Linux's side: std sockets in a namespace ----

/// A thread in a namespace: whether it entered, then what it did.
type InNs<T> = JoinHandle<std::io::Result<std::io::Result<T>>>;

/// A Linux TCP sink in `ns` taking `conns` connections on `at` and counting their bytes to
/// their ends; the count and when the last ended. Ready once its listener is bound.
fn linux_sink(ns: &Netns, at: SocketAddrV4, conns: usize) -> Result<InNs<(u64, Instant)>> {
    let (ready, bound) = mpsc::channel();
    let h = ns.spawn(move || -> std::io::Result<(u64, Instant)> {
        let l = TcpListener::bind(at)?;
        let _ = ready.send(());
        let readers: Vec<_> = (0..conns)
            .map(|_| {
                let (mut c, _) = l.accept()?;
                Ok(thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    let mut n = 0u64;
                    while let Ok(k) = c.read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        n += k as u64;
                    }
                    (n, Instant::now())
                }))
            })
            .collect::<std::io::Result<_>>()?;
        let mut total = 0;
        let mut last = Instant::now();
        for r in readers {
            let (n, at) = r.join().map_err(|_| std::io::Error::other("a reader panicked"))?;
            total += n;
            last = last.max(at);
        }
        Ok((total, last))
    })?;
    bound
        .recv_timeout(Duration::from_secs(10))
        .context("the Linux sink never listened")?;
    Ok(h)
}

/// Linux clients in `ns` sending to `to` for `secs` on `conns` connections.
fn linux_senders(ns: &Netns, to: SocketAddrV4, conns: usize, secs: f64) -> Result<InNs<()>> {
    Ok(ns.spawn(move || -> std::io::Result<()> {
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let senders: Vec<_> = (0..conns)
            .map(|_| {
                let mut c = TcpStream::connect(to)?;
                Ok(thread::spawn(move || -> std::io::Result<()> {
                    let buf = vec![7u8; 1 << 16];
                    while Instant::now() < until {
                        c.write_all(&buf)?;
                    }
                    c.shutdown(Shutdown::Write)
                }))
            })
            .collect::<std::io::Result<_>>()?;
        for s in senders {
            s.join().map_err(|_| std::io::Error::other("a sender panicked"))??;
        }
        Ok(())
    })?)
}

/// A Linux echo server in `ns` on `at` (one connection at a time, until `stop`).
fn linux_echo(ns: &Netns, at: SocketAddrV4) -> Result<()> {
    let (ready, bound) = mpsc::channel();
    ns.spawn(move || -> std::io::Result<()> {
        let l = TcpListener::bind(at)?;
        let _ = ready.send(());
        for c in l.incoming() {
            let mut c = c?;
            c.set_nodelay(true)?;
            thread::spawn(move || {
                let mut buf = [0u8; MESSAGE];
                while c.read_exact(&mut buf).is_ok() && c.write_all(&buf).is_ok() {}
            });
        }
        Ok(())
    })?;
    bound
        .recv_timeout(Duration::from_secs(10))
        .context("the Linux echo server never listened")?;
    Ok(())
}

/// Round trips from a Linux client in `ns` to `to`.
fn linux_round_trips(ns: &Netns, to: SocketAddrV4, n: usize) -> Result<Vec<Duration>> {
    in_ns(ns, move || -> std::io::Result<Vec<Duration>> {
        let mut c = TcpStream::connect(to)?;
        c.set_nodelay(true)?;
        let mut buf = [5u8; MESSAGE];
        (0..n)
            .map(|_| {
                let t = Instant::now();
                c.write_all(&buf)?;
                c.read_exact(&mut buf)?;
                Ok(t.elapsed())
            })
            .collect()
    })?
    .map_err(Into::into)
}

// ---- VINO's side ----

/// VINO sending to `to` for `secs` on `conns` connections of user 1000.
fn vino_senders(net: &Arc<Net>, to: SocketAddrV4, conns: usize, secs: f64) -> Result<Vec<JoinHandle<Result<()>>>> {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    (0..conns)
        .map(|i| {
            let user = owner(10 + i as u64, 1000);
            let c = net
                .tcp_connect(&user, to, PATIENCE)
                .map_err(|e| anyhow!("connecting to {to}: {e}"))?;
            let net = net.clone();
            Ok(thread::spawn(move || -> Result<()> {
                let buf = vec![7u8; 1 << 16];
                while Instant::now() < until {
                    net.send_all(&user, c, &buf, PATIENCE)?;
                }
                net.shutdown_write(&user, c)?;
                // Until the far end has it all: the close waits in the stack, charged.
                net.close(&user, c)?;
                Ok(())
            }))
        })
        .collect()
}

/// A VINO sink of user `uid` on `port` taking `conns` connections; bytes and the last end.
fn vino_sink(net: &Arc<Net>, uid: u32, port: u16, conns: usize) -> Result<JoinHandle<Result<(u64, Instant)>>> {
    let user = owner(100 + u64::from(uid), uid);
    let l = net.tcp_listen(&user, port, conns.max(8)).map_err(|e| anyhow!("{e}"))?;
    let net = net.clone();
    Ok(thread::spawn(move || -> Result<(u64, Instant)> {
        let readers: Vec<_> = (0..conns)
            .map(|_| {
                let (c, _) = net.accept(&user, l, PATIENCE)?;
                let (net, user) = (net.clone(), user.clone());
                Ok(thread::spawn(move || -> Result<(u64, Instant)> {
                    let mut buf = vec![0u8; 1 << 16];
                    let mut n = 0u64;
                    loop {
                        let k = net.recv(&user, c, &mut buf, PATIENCE)?;
                        if k == 0 {
                            break;
                        }
                        n += k as u64;
                    }
                    net.close(&user, c)?;
                    Ok((n, Instant::now()))
                }))
            })
            .collect::<Result<_>>()?;
        let mut total = 0;
        let mut last = Instant::now();
        for r in readers {
            let (n, at) = r.join().map_err(|_| anyhow!("a reader panicked"))??;
            total += n;
            last = last.max(at);
        }
        net.close(&user, l)?;
        Ok((total, last))
    }))
}

/// A VINO echo server of user `uid` on `port`, until `stop`.
fn vino_echo(net: &Arc<Net>, uid: u32, port: u16, stop: Arc<AtomicBool>) -> Result<JoinHandle<()>> {
    let user = owner(100 + u64::from(uid), uid);
    let l = net.tcp_listen(&user, port, 8).map_err(|e| anyhow!("{e}"))?;
    let net = net.clone();
    Ok(thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((c, _)) = net.accept(&user, l, Wait::For(Duration::from_millis(100))) else {
                continue;
            };
            let (net, user, stop) = (net.clone(), user.clone(), stop.clone());
            thread::spawn(move || {
                let mut buf = [0u8; MESSAGE];
                while !stop.load(Ordering::Relaxed) {
                    let mut got = 0;
                    while got < MESSAGE {
                        match net.recv(&user, c, &mut buf[got..], Wait::For(Duration::from_millis(100))) {
                            Ok(0) => return,
                            Ok(k) => got += k,
                            Err(vino_net::NetError::TimedOut) if !stop.load(Ordering::Relaxed) => {}
                            Err(_) => return,
                        }
                    }
                    if net.send_all(&user, c, &buf, PATIENCE).is_err() {
                        return;
                    }
                }
                let _ = net.close(&user, c);
            });
        }
    }))
}

/// Round trips from a VINO client (user 1000) to `to`.
fn vino_round_trips(net: &Net, to: SocketAddrV4, n: usize) -> Result<Vec<Duration>> {
    let user = owner(9, 1000);
    let c = net.tcp_connect(&user, to, PATIENCE).map_err(|e| anyhow!("{e}"))?;
    let mut buf = [5u8; MESSAGE];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        net.send_all(&user, c, &buf, PATIENCE)?;
        let mut got = 0;
        while got < MESSAGE {
            let k = net.recv(&user, c, &mut buf[got..], PATIENCE)?;
            ensure!(k > 0, "the echo server closed");
            got += k;
        }
        times.push(t.elapsed());
    }
    net.close(&user, c)?;
    Ok(times)
}

// ---- the raw pump ----

/// An IPv4/UDP packet of `len` bytes from `src` to `dst` (UDP checksum 0: none, as IPv4 allows).
fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, port: u16, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let sum: u32 = p[..20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let check = !((folded & 0xffff) + (folded >> 16)) as u16;
    p[10..12].copy_from_slice(&check.to_be_bytes());
    p[20..22].copy_from_slice(&port.to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    p
}

/// Megabits a second of MTU-sized packets through a TUN device of its own, each way: written
/// by the batched writer to a Linux socket, and sent by Linux to the batched reader.
fn raw_pump(bed: &Bed, secs: f64) -> Result<(f64, f64, bool)> {
    let device = format!("vbp{}", std::process::id() % 10_000);
    let tun = Arc::new(Tun::open(&device)?);
    tun.configure(MTU, None)?;
    bed.peer.adopt(&device, &format!("{PUMP_PEER}/24"))?;
    let batched = batch::Writer::new(tun.clone()).batched();

    // Out: VINO writes a batch at a time; a packet counts once the device took it (the write
    // returns after Linux's receive path has run on it).
    let (ready, bound) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let rx = bed.peer.spawn({
        let stop = stop.clone();
        move || -> std::io::Result<()> {
            let s = UdpSocket::bind((PUMP_PEER, 9000))?;
            s.set_read_timeout(Some(Duration::from_millis(50)))?;
            let _ = ready.send(());
            let mut buf = vec![0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                let _ = s.recv(&mut buf);
            }
            Ok(())
        }
    })?;
    bound.recv_timeout(Duration::from_secs(10))?;
    let mut writer = batch::Writer::new(tun.clone());
    let packet = udp_packet(PUMP_VINO, PUMP_PEER, 9000, MTU);
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    let mut batch_out = Vec::new();
    let mut written = 0u64;
    while Instant::now() < until {
        batch_out.extend((0..64).map(|_| packet.clone()));
        written += writer.write(&mut batch_out).packets as u64;
    }
    let out = mbit(written * MTU as u64, start.elapsed());
    stop.store(true, Ordering::Relaxed);
    join(rx)??;

    // In: Linux sends, VINO's reader counts.
    let stop_in = Arc::new(AtomicBool::new(false));
    let tx = bed.peer.spawn({
        let stop = stop_in.clone();
        move || -> std::io::Result<()> {
            let s = UdpSocket::bind((PUMP_PEER, 0))?;
            s.connect((PUMP_VINO, 9001))?;
            let payload = vec![1u8; MTU - 28];
            while !stop.load(Ordering::Relaxed) {
                send_many(&s, &payload, 64);
            }
            Ok(())
        }
    })?;
    let mut reader = batch::Reader::new(tun, MTU)?;
    let mut got = Vec::new();
    // Settle, then count.
    let warm = Instant::now() + Duration::from_millis(100);
    while Instant::now() < warm {
        got.clear();
        reader.read(Duration::from_millis(10), &mut got)?;
    }
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    let mut bytes = 0u64;
    while Instant::now() < until {
        got.clear();
        reader.read(Duration::from_millis(10), &mut got)?;
        bytes += got.iter().map(|p| p.len() as u64).sum::<u64>();
    }
    let inbound = mbit(bytes, start.elapsed());
    stop_in.store(true, Ordering::Relaxed);
    join(tx)??;
    Ok((out, inbound, batched))
}

/// Sends `payload` `n` times on connected socket `s` with one sendmmsg: Linux's side of the
/// pump must not be held back by a system call per packet either.
fn send_many(s: &UdpSocket, payload: &[u8], n: usize) {
    use std::os::fd::AsRawFd;
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut msgs: Vec<libc::mmsghdr> = (0..n)
        .map(|_| {
            // SAFETY: mmsghdr is plain data, valid all zero.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: every header points at `iov`, which points at `payload`; all outlive the call,
    // and the kernel only reads them (a connected socket needs no addresses).
    unsafe { libc::sendmmsg(s.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
}

// ---- the cases ----

fn vino_to_linux(bed: &Bed, net: &Arc<Net>, conns: usize, secs: f64, port: u16) -> Result<f64> {
    let sink = linux_sink(&bed.peer, SocketAddrV4::new(PEER, port), conns)?;
    let start = Instant::now();
    for s in vino_senders(net, SocketAddrV4::new(PEER, port), conns, secs)? {
        s.join().map_err(|_| anyhow!("a sender panicked"))??;
    }
    let (bytes, last) = join(sink)??;
    Ok(mbit(bytes, last - start))
}

fn linux_to_vino(bed: &Bed, net: &Arc<Net>, conns: usize, secs: f64, port: u16) -> Result<f64> {
    let sink = vino_sink(net, 1000, port, conns)?;
    let start = Instant::now();
    join(linux_senders(&bed.peer, SocketAddrV4::new(VINO, port), conns, secs)?)??;
    let (bytes, last) = sink.join().map_err(|_| anyhow!("the sink panicked"))??;
    Ok(mbit(bytes, last - start))
}

fn linux_to_linux(bed: &Bed, conns: usize, secs: f64, port: u16) -> Result<f64> {
    let sink = linux_sink(&bed.b, SocketAddrV4::new(VETH_B, port), conns)?;
    let start = Instant::now();
    join(linux_senders(&bed.a, SocketAddrV4::new(VETH_B, port), conns, secs)?)??;
    let (bytes, last) = join(sink)??;
    Ok(mbit(bytes, last - start))
}

/// How long a flood sends: long enough to outlast the victim's round trips under it.
fn flood_secs(secs: f64) -> f64 {
    secs.max(0.5) * 4.0
}

/// One figure: megabits a second, p50 and p99 in microseconds (each where it applies).
type Figure = (Option<f64>, Option<f64>, Option<f64>);

/// Figures of one round, by (case, path).
type Figures = Vec<((String, String), Figure)>;

fn round(bed: &Bed, opts: &NetOptions, r: usize, p: &mut dyn FnMut(&str)) -> Result<(Figures, bool)> {
    let secs = opts.seconds;
    let mut f: Figures = Vec::new();
    let mut put = |case: &str, path: &str, v: Figure| f.push(((case.to_owned(), path.to_owned()), v));
    let base = 20_000 + (r as u16) * 100;
    p(&format!("round {}: raw pump", r + 1));
    let (out, inbound, batched) = raw_pump(bed, secs)?;
    put("to Linux", "raw pump", (Some(out), None, None));
    put("from Linux", "raw pump", (Some(inbound), None, None));

    for (loss, tag) in [(0.0, ""), (0.01, ", 1% loss")] {
        p(&format!("round {}: VINO and Linux{tag}", r + 1));
        let net = Arc::new(bed.vino(loss)?);
        let port = base + if loss > 0.0 { 50 } else { 0 };
        for conns in [1, 8] {
            if loss > 0.0 && conns == 8 {
                continue;
            }
            let c = if conns == 1 { "1 connection" } else { "8 connections" };
            let v = vino_to_linux(bed, &net, conns, secs, port + conns as u16)?;
            put(&format!("to Linux, {c}{tag}"), "VINO", (Some(v), None, None));
            let v = linux_to_vino(bed, &net, conns, secs, port + 10 + conns as u16)?;
            put(&format!("from Linux, {c}{tag}"), "VINO", (Some(v), None, None));
        }
        linux_echo(&bed.peer, SocketAddrV4::new(PEER, port + 20))?;
        let (p50, p99) = percentiles(vino_round_trips(
            &net,
            SocketAddrV4::new(PEER, port + 20),
            opts.round_trips,
        )?);
        put(&format!("round trip{tag}"), "VINO", (None, Some(p50), Some(p99)));

        if loss == 0.0 {
            p(&format!("round {}: a victim under a flood", r + 1));
            let stop = Arc::new(AtomicBool::new(false));
            let echo = vino_echo(&net, 1002, port + 30, stop.clone())?;
            let victim = SocketAddrV4::new(VINO, port + 30);
            let alone = percentiles(linux_round_trips(&bed.peer, victim, opts.round_trips)?);
            let sink = vino_sink(&net, 1001, port + 31, 8)?;
            let flood = linux_senders(&bed.peer, SocketAddrV4::new(VINO, port + 31), 8, flood_secs(secs))?;
            thread::sleep(Duration::from_millis(100));
            let before = net.demux_stats().unwrap_or_default();
            let under = percentiles(linux_round_trips(&bed.peer, victim, opts.round_trips)?);
            let after = net.demux_stats().unwrap_or_default();
            let dropped = (after.dropped - before.dropped) as f64;
            let queued = (after.queued - before.queued) as f64;
            join(flood)??;
            sink.join().map_err(|_| anyhow!("the flood's sink panicked"))??;
            stop.store(true, Ordering::Relaxed);
            let _ = echo.join();
            put("victim round trip, alone", "VINO", (None, Some(alone.0), Some(alone.1)));
            // Counts, not figures of a path: only the goals' table shows them.
            put("flood: dropped", "VINO", (Some(dropped), None, None));
            put("flood: sorted", "VINO", (Some(dropped + queued), None, None));
            put(
                "victim round trip, another user flooded",
                "VINO",
                (None, Some(under.0), Some(under.1)),
            );
        }
        net.close_all(9);
        drop(net);
    }

    p(&format!("round {}: Linux and Linux", r + 1));
    for conns in [1, 8] {
        let c = if conns == 1 { "1 connection" } else { "8 connections" };
        let v = linux_to_linux(bed, conns, secs, base + 60 + conns as u16)?;
        put(
            &format!("to Linux, {c}"),
            "Linux to Linux (veth)",
            (Some(v), None, None),
        );
    }
    linux_echo(&bed.b, SocketAddrV4::new(VETH_B, base + 70))?;
    let (p50, p99) = percentiles(linux_round_trips(
        &bed.a,
        SocketAddrV4::new(VETH_B, base + 70),
        opts.round_trips,
    )?);
    put("round trip", "Linux to Linux (veth)", (None, Some(p50), Some(p99)));

    // The victim's floor: the same flood and the same round trips with Linux's stack serving
    // both ports (over the veth), its sink's and echo server's threads as many as VINO's. On a
    // machine where the flood's own senders run beside the servers, this is what the machine's
    // CPUs leave any stack's victim.
    p(&format!("round {}: a Linux victim under a flood", r + 1));
    let victim = SocketAddrV4::new(VETH_B, base + 80);
    linux_echo(&bed.b, victim)?;
    let alone = percentiles(linux_round_trips(&bed.a, victim, opts.round_trips)?);
    let sink = linux_sink(&bed.b, SocketAddrV4::new(VETH_B, base + 81), 8)?;
    let flood = linux_senders(&bed.a, SocketAddrV4::new(VETH_B, base + 81), 8, flood_secs(secs))?;
    thread::sleep(Duration::from_millis(100));
    let under = percentiles(linux_round_trips(&bed.a, victim, opts.round_trips)?);
    join(flood)??;
    join(sink)??;
    put(
        "victim round trip, alone",
        "Linux to Linux (veth)",
        (None, Some(alone.0), Some(alone.1)),
    );
    put(
        "victim round trip, another user flooded",
        "Linux to Linux (veth)",
        (None, Some(under.0), Some(under.1)),
    );
    Ok((f, batched))
}

pub fn run(opts: &NetOptions, p: &mut dyn FnMut(&str)) -> Result<NetReport> {
    let bed = Bed::new()?;
    let mut rounds = Vec::new();
    let mut batched = false;
    for r in 0..opts.rounds {
        let (f, b) = round(&bed, opts, r, p)?;
        batched = b;
        rounds.push(f);
    }
    let keys: Vec<(String, String)> = rounds[0].iter().map(|(k, _)| k.clone()).collect();
    let median = |k: &(String, String), pick: fn(&Figure) -> Option<f64>| {
        let vals: Vec<f64> = rounds
            .iter()
            .filter_map(|f| f.iter().find(|(kk, _)| kk == k).and_then(|(_, v)| pick(v)))
            .collect();
        (!vals.is_empty()).then(|| median_of(vals))
    };
    let rows: Vec<Row> = keys
        .iter()
        .filter(|k| !k.0.starts_with("flood: "))
        .map(|k| Row {
            case: k.0.clone(),
            path: k.1.clone(),
            mbit_s: median(k, |v| v.0),
            p50_us: median(k, |v| v.1),
            p99_us: median(k, |v| v.2),
        })
        .collect();
    // Ratios within each round, then their median.
    let ratio = |num: (&str, &str), den: (&str, &str), pick: fn(&Figure) -> Option<f64>| {
        let get =
            |f: &Figures, (c, p): (&str, &str)| f.iter().find(|(k, _)| k.0 == c && k.1 == p).and_then(|(_, v)| pick(v));
        let vals: Vec<f64> = rounds
            .iter()
            .filter_map(|f| Some(get(f, num)? / get(f, den)?))
            .collect();
        if vals.is_empty() { f64::NAN } else { median_of(vals) }
    };
    let at_least_half = |what: &str, measured: f64| Goal {
        what: what.into(),
        measured,
        goal: "at least 0.5 (within 2x)".into(),
        met: Some(measured >= 0.5),
    };
    let reported = |what: &str, measured: f64| Goal {
        what: what.into(),
        measured,
        goal: "reported".into(),
        met: None,
    };
    let victim = ("victim round trip, another user flooded", "VINO");
    let alone = ("victim round trip, alone", "VINO");
    let linux_victim = ("victim round trip, another user flooded", "Linux to Linux (veth)");
    let linux_alone = ("victim round trip, alone", "Linux to Linux (veth)");
    let mut goals = vec![
        at_least_half(
            "VINO to Linux, 1 connection / raw pump out",
            ratio(("to Linux, 1 connection", "VINO"), ("to Linux", "raw pump"), |v| v.0),
        ),
        at_least_half(
            "Linux to VINO, 1 connection / raw pump in",
            ratio(("from Linux, 1 connection", "VINO"), ("from Linux", "raw pump"), |v| {
                v.0
            }),
        ),
        reported(
            "VINO to Linux / Linux to Linux (veth), 1 connection",
            ratio(
                ("to Linux, 1 connection", "VINO"),
                ("to Linux, 1 connection", "Linux to Linux (veth)"),
                |v| v.0,
            ),
        ),
        reported(
            "VINO to Linux, 1 connection: 1% loss / none",
            ratio(
                ("to Linux, 1 connection, 1% loss", "VINO"),
                ("to Linux, 1 connection", "VINO"),
                |v| v.0,
            ),
        ),
    ];
    // The victim's round trips under the flood over alone, VINO's and its floor's.
    let pick_p50: fn(&Figure) -> Option<f64> = |v| v.1;
    let pick_p99: fn(&Figure) -> Option<f64> = |v| v.2;
    for (who, flooded, alone) in [
        ("victim", victim, alone),
        ("Linux's victim (veth)", linux_victim, linux_alone),
    ] {
        for (p, pick) in [("p50", pick_p50), ("p99", pick_p99)] {
            let what = format!("{who} {p}: another user flooded / alone");
            goals.push(reported(&what, ratio(flooded, alone, pick)));
        }
    }
    goals.push(reported(
        "victim p99 under the flood: VINO / Linux (veth)",
        ratio(victim, linux_victim, pick_p99),
    ));
    goals.push(reported(
        "the flood's packets dropped at its target's queue / sorted",
        ratio(("flood: dropped", "VINO"), ("flood: sorted", "VINO"), |v| v.0),
    ));
    let report = NetReport {
        mtu: MTU,
        seconds: opts.seconds,
        rounds: opts.rounds,
        round_trips: opts.round_trips,
        batched_io: batched,
        rows,
        goals,
    };
    if report
        .rows
        .iter()
        .any(|r| r.mbit_s.is_some_and(|v| !v.is_finite() || v <= 0.0))
    {
        bail!("a transfer moved nothing");
    }
    Ok(report)
}

impl NetReport {
    pub fn tables(&self) -> Vec<Table> {
        let fmt = |v: Option<f64>, digits: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"));
        let mut t = Table::new(
            "VINO's TCP/IP stack and Linux's over a link (medians of the rounds)",
            &["case", "path", "Mbit/s", "p50 µs", "p99 µs"],
        );
        for r in &self.rows {
            t.row([
                r.case.clone(),
                r.path.clone(),
                fmt(r.mbit_s, 0),
                fmt(r.p50_us, 1),
                fmt(r.p99_us, 1),
            ]);
        }
        t.note(format!(
            "MTU {}, {} s a transfer, {} round(s), {} round trips of {MESSAGE} bytes; the host link's I/O {}",
            self.mtu,
            self.seconds,
            self.rounds,
            self.round_trips,
            if self.batched_io {
                "in io_uring batches"
            } else {
                "a call per packet (no io_uring)"
            }
        ));
        let mut g = Table::new(
            "The goals, as ratios within a round (medians of the rounds)",
            &["ratio", "measured", "goal", "met"],
        );
        for goal in &self.goals {
            let met = goal.met.map_or("-", |m| if m { "yes" } else { "no" });
            g.row([
                goal.what.clone(),
                fmt_ratio(goal.measured),
                goal.goal.clone(),
                met.to_owned(),
            ]);
        }
        vec![t, g]
    }

    pub fn plot(&self, path: &std::path::Path) -> Result<()> {
        let mut groups: Vec<(String, Vec<(String, f64)>)> = Vec::new();
        for r in self.rows.iter().filter(|r| r.mbit_s.is_some()) {
            let case = r.case.clone();
            let bar = (r.path.clone(), r.mbit_s.unwrap_or(0.0) / 1000.0);
            match groups.iter_mut().find(|(c, _)| *c == case) {
                Some((_, bars)) => bars.push(bar),
                None => groups.push((case, vec![bar])),
            }
        }
        bar_chart(path, "Bulk TCP over the link (MTU 1500)", "Gbit/s", &groups)
    }
}
