//! `vino bench serve`: a server in the kernel (`event.net.packet`, `sdk/grafts/http_server.c`)
//! against the same server as a VINO process (`programs/httpd.c`, the sockets of part 1), in one
//! run (Small 1998, 3.5 and 4.2: the thesis' server graft).
//!
//! A kernel on an in-memory disk holds `/www/4k` and `/www/1m`, owned by one user, whose
//! process serves them on two ports: one with the graft, one with `httpd` running as a VINO
//! process. Clients each keep one connection alive and ask for the same file again and again,
//! reading every response whole, for a fixed time per measurement.
//!
//! As root, the clients are Linux's: threads in a network namespace at the far end of the
//! kernel's host link (a TUN device, as `vino bench net` makes it), and nginx (Debian's package,
//! if installed) serves the same files from the host's file system in a namespace of its own,
//! to clients in another over a veth pair with the same MTU. Without root, the clients are
//! another user's threads making the kernel's socket calls over its loopback, and nginx is not
//! measured. The servers take turns in each repetition; figures are medians of the
//! repetitions.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use serde::Serialize;
use vino_hostlink::netns::{Netns, ip};
use vino_kernel::{Credentials, Kernel, KernelConfig, LOOPBACK, OpenFlags, Process, SocketWait};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ratio};
use vino_net::{HostConfig, NetConfig};

use crate::e6_layout::median_of;

/// The goal: the graft server's requests per second at least this many times the process's.
pub const GOAL: f64 = 2.0;
const OWNER: u32 = 1000;
const CLIENT: u32 = 2000;
const GRAFT_PORT: u16 = 8081;
const PROCESS_PORT: u16 = 8082;
const WAIT: SocketWait = SocketWait::For(Duration::from_secs(30));
const NGINX_PORT: u16 = 8083;
const FILES: [(&str, usize); 2] = [("4k", 4096), ("1m", 1 << 20)];
const MTU: usize = 1500;
const VINO: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 1);
const VETH_A: Ipv4Addr = Ipv4Addr::new(10, 83, 0, 1);
const VETH_B: Ipv4Addr = Ipv4Addr::new(10, 83, 0, 2);

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub quick: bool,
    pub scratch: PathBuf,
    pub reps: usize,
    pub clients: usize,
    pub secs: f64,
}

impl ServeOptions {
    pub fn new(quick: bool) -> ServeOptions {
        ServeOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            reps: if quick { 1 } else { 5 },
            clients: 8,
            secs: if quick { 0.3 } else { 2.0 },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `graft` or `process`.
    pub server: String,
    pub file: String,
    pub requests_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Over the process server's requests per second, for the same file.
    pub vs_process: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ServeReport {
    pub reps: usize,
    pub clients: usize,
    pub secs: f64,
    pub goal: f64,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

/// One measurement: requests per second and latency percentiles, µs.
struct Figures {
    rps: f64,
    p50: f64,
    p99: f64,
}

fn boot(httpd: &[u8], net: NetConfig) -> Result<Arc<Kernel>> {
    let kernel = crate::mem_kernel(
        16384,
        &KernelConfig {
            cache_frames: 4096,
            writeback_every: None,
            net,
            ..KernelConfig::default()
        },
    )?;
    let root = kernel.spawn(Credentials::root());
    let made = (|| -> vino_kernel::SysResult<()> {
        root.mkdir("/www", 0o777)?;
        root.mkdir("/bin", 0o755)?;
        write_file(&root, "/bin/httpd", httpd)?;
        root.chmod("/bin/httpd", 0o755)?;
        Ok(())
    })();
    kernel.exit(root.pid());
    made.map_err(|e| anyhow!("installing httpd: {e}"))?;
    let owner = kernel.spawn(Credentials::user(OWNER, OWNER));
    for (name, len) in FILES {
        write_file(&owner, &format!("/www/{name}"), &content(len)).map_err(|e| anyhow!("writing /www/{name}: {e}"))?;
    }
    kernel.exit(owner.pid());
    Ok(kernel)
}

fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn write_file(p: &Process, path: &str, data: &[u8]) -> vino_kernel::SysResult<()> {
    let fd = p.open(path, OpenFlags::create())?;
    let mut done = 0;
    while done < data.len() {
        done += p.write(fd, &data[done..])?;
    }
    p.close(fd)
}

/// As root: the namespaces, the host link's device and nginx; all gone when dropped.
struct Bed {
    /// Linux's clients of VINO, at the far end of the host link.
    peer: Netns,
    /// Linux's clients of nginx, and nginx's namespace, joined by a veth pair.
    a: Netns,
    b: Netns,
    nginx: Option<std::process::Child>,
    device: String,
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut n) = self.nginx.take() {
            // nginx's master and its worker, a process group of their own: killing the master
            // alone would leave the worker running.
            let group = format!("-{}", n.id());
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &group])
                .status();
            let _ = n.kill();
            let _ = n.wait();
        }
    }
}

impl Bed {
    fn new() -> Result<Bed> {
        let tag = std::process::id() % 10_000;
        let peer = Netns::new(&format!("vino-serve-peer{tag}"))?;
        let a = Netns::new(&format!("vino-serve-a{tag}"))?;
        let b = Netns::new(&format!("vino-serve-b{tag}"))?;
        let (va, vb) = (format!("vsa{tag}"), format!("vsb{tag}"));
        let mtu = MTU.to_string();
        ip(&[
            "link", "add", &va, "mtu", &mtu, "type", "veth", "peer", "name", &vb, "mtu", &mtu,
        ])?;
        a.adopt(&va, &format!("{VETH_A}/24"))?;
        b.adopt(&vb, &format!("{VETH_B}/24"))?;
        Ok(Bed {
            peer,
            a,
            b,
            nginx: None,
            device: format!("vsn{tag}"),
        })
    }

    /// The kernel's network: its host link a TUN device, moved into the peer's namespace once
    /// the kernel made it.
    fn net(&self) -> NetConfig {
        NetConfig {
            host: Some(HostConfig {
                egress: vec![(PEER, 32)],
                mtu: MTU,
                ..HostConfig::new(&self.device, VINO, 24)
            }),
            ..NetConfig::default()
        }
    }

    /// Starts nginx in namespace b serving `root`, if nginx is installed; why not otherwise.
    fn start_nginx(&mut self, scratch: &Path) -> std::result::Result<(), String> {
        let which = std::process::Command::new("sh")
            .args(["-c", "command -v nginx"])
            .output();
        let Some(out) = which.ok().filter(|o| o.status.success()) else {
            return Err("nginx is not installed (Debian's package: apt-get install nginx-light)".into());
        };
        let nginx = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let dir = scratch.join("nginx");
        let www = dir.join("www");
        std::fs::create_dir_all(&www).map_err(|e| e.to_string())?;
        for (name, len) in FILES {
            std::fs::write(www.join(name), content(len)).map_err(|e| e.to_string())?;
        }
        let dir = std::fs::canonicalize(&dir).map_err(|e| e.to_string())?;
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000000;\n\
                 client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
                 server {{ listen {VETH_B}:{NGINX_PORT}; root {d}/www; }} }}\n",
                d = dir.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", self.b.name(), &nginx, "-c"])
            .arg(&conf)
            .arg("-p")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting nginx: {e}"))?;
        self.nginx = Some(child);
        Ok(())
    }
}

/// Who asks.
enum Clients<'a> {
    /// Another user's threads on the kernel's loopback.
    Loopback(&'a Arc<Kernel>),
    /// Linux's threads in namespace `ns`, to `addr`.
    Linux(&'a Netns, Ipv4Addr),
}

/// `clients` keep-alive clients ask `port` for `/www/<file>` (`/<file>` of nginx) for `secs`.
fn load(who: &Clients<'_>, port: u16, file: &str, len: usize, opts: &ServeOptions) -> Result<Figures> {
    let request = format!("GET /{file} HTTP/1.1\r\nHost: vino\r\n\r\n").into_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut threads = Vec::new();
    for _ in 0..opts.clients {
        let (request, stop) = (request.clone(), stop.clone());
        threads.push(match who {
            Clients::Loopback(kernel) => {
                let kernel = (*kernel).clone();
                std::thread::spawn(move || -> Result<Vec<Duration>> {
                    let p = kernel.spawn(Credentials::user(CLIENT, CLIENT));
                    let result = vino_client(&p, port, &request, len, &stop);
                    kernel.exit(p.pid());
                    result
                })
            }
            Clients::Linux(ns, addr) => {
                let at = SocketAddrV4::new(*addr, port);
                let h = ns.spawn(move || linux_client(at, &request, len, &stop))?;
                std::thread::spawn(move || -> Result<Vec<Duration>> {
                    h.join().map_err(|_| anyhow!("a client panicked"))??
                })
            }
        });
    }
    std::thread::sleep(Duration::from_secs_f64(opts.secs));
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().map_err(|_| anyhow!("a client panicked"))??);
    }
    let took = started.elapsed().as_secs_f64();
    ensure!(!all.is_empty(), "no request was answered on port {port}");
    all.sort();
    let at = |q: f64| all[((all.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    Ok(Figures {
        rps: all.len() as f64 / took,
        p50: at(0.5),
        p99: at(0.99),
    })
}

/// Reads one response to its end: the head, then `len` bytes of body and nothing more.
fn read_response(mut recv: impl FnMut(&mut [u8]) -> Result<usize>, buf: &mut [u8], len: usize) -> Result<()> {
    let mut head: Vec<u8> = Vec::new();
    let mut left: Option<usize> = None;
    while left != Some(0) {
        let n = recv(buf)?;
        ensure!(n > 0, "the server closed the connection");
        match left {
            Some(l) => {
                ensure!(n <= l, "more than one response");
                left = Some(l - n);
            }
            None => {
                head.extend_from_slice(&buf[..n]);
                if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    ensure!(
                        head.starts_with(b"HTTP/1.1 200"),
                        "not a 200: {:?}",
                        String::from_utf8_lossy(&head)
                    );
                    let body = head.len() - (i + 4);
                    left = Some(len.checked_sub(body).ok_or_else(|| anyhow!("too much body"))?);
                }
            }
        }
    }
    Ok(())
}

/// One keep-alive connection of a VINO process asking again and again; each response's time.
fn vino_client(p: &Process, port: u16, request: &[u8], len: usize, stop: &AtomicBool) -> Result<Vec<Duration>> {
    let at = SocketAddrV4::new(LOOPBACK, port);
    let conn = p.tcp_connect(at, WAIT).map_err(|e| anyhow!("connect to {port}: {e}"))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut times = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let mut sent = 0;
        while sent < request.len() {
            sent += p
                .socket_send(conn, &request[sent..], WAIT)
                .map_err(|e| anyhow!("send: {e}"))?;
        }
        read_response(
            |b| p.socket_recv(conn, b, WAIT).map_err(|e| anyhow!("recv: {e}")),
            &mut buf,
            len,
        )?;
        times.push(t.elapsed());
    }
    let _ = p.socket_close(conn);
    Ok(times)
}

/// One keep-alive connection of Linux's asking again and again; each response's time.
fn linux_client(at: SocketAddrV4, request: &[u8], len: usize, stop: &AtomicBool) -> Result<Vec<Duration>> {
    let mut c =
        TcpStream::connect_timeout(&at.into(), Duration::from_secs(10)).with_context(|| format!("connect to {at}"))?;
    c.set_nodelay(true)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut times = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        c.write_all(request)?;
        read_response(|b| Ok(c.read(b)?), &mut buf, len)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

pub fn run(opts: &ServeOptions, p: &mut dyn FnMut(&str)) -> Result<ServeReport> {
    std::fs::create_dir_all(&opts.scratch)?;
    p("building http_server.c and httpd.c");
    let graft = vino_sdk::build_example("http_server", &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow!("building http_server.c: {e}"))?;
    let httpd_path = opts.scratch.join("httpd.wasm");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/httpd.c");
    vino_sdk::build_program(&[source], &httpd_path, &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow!("building httpd.c for wasm32-wasi: {e}"))?;
    let httpd = std::fs::read(&httpd_path)?;
    let mut notes = Vec::new();
    let root = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    };
    let mut bed = if root { Some(Bed::new()?) } else { None };
    let kernel = boot(&httpd, bed.as_ref().map_or_else(NetConfig::default, Bed::net))?;
    if let Some(bed) = &mut bed {
        // The kernel made its TUN device at boot: it goes to the peer's namespace.
        bed.peer.adopt(&bed.device, &format!("{PEER}/24"))?;
        if let Err(why) = bed.start_nginx(&opts.scratch) {
            notes.push(format!("nginx not measured: {why}"));
        }
        notes.push(format!(
            "clients: Linux's, in a network namespace at the far end of the kernel's host link (TUN, MTU {MTU}); nginx's \
             in another namespace over a veth pair with the same MTU, serving the same files from the host's file system"
        ));
    } else {
        notes.push(
            "clients: another user's threads over the kernel's loopback (not root: no namespaces, no nginx)".into(),
        );
    }

    // The graft server, and the same server as a VINO process of the same user.
    let owner = kernel.spawn(Credentials::user(OWNER, OWNER));
    owner.net_serve(GRAFT_PORT, 64, &graft)?;
    let program = vino_wasi::Program::compile(&httpd, vino_wasi::ProgramLimits::default())?;
    let kill = program.kill_switch();
    let server = {
        let (kernel, program, kill) = (kernel.clone(), program.clone(), kill.clone());
        std::thread::spawn(move || {
            let argv = ["/bin/httpd", &PROCESS_PORT.to_string(), "/www"]
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect();
            program.run(
                &kernel,
                Credentials::user(OWNER, OWNER),
                vino_wasi::Setup::new(argv, Vec::new()),
                vino_wasi::Stdio {
                    stdin: Box::new(std::io::empty()),
                    stdout: Box::new(std::io::sink()),
                    stderr: Box::new(std::io::sink()),
                    tty: [false; 3],
                },
                &kill,
            )
        })
    };
    let measured = measure(&kernel, bed.as_ref(), opts, p);
    kill.kill();
    let _ = server.join();
    kernel.exit(owner.pid());
    drop(bed);
    let rows = measured?;
    Ok(ServeReport {
        reps: opts.reps,
        clients: opts.clients,
        secs: opts.secs,
        goal: GOAL,
        rows,
        notes,
    })
}

/// Waits until something accepts connections at `port` (the process server once its program
/// runs, nginx once it started).
fn wait_listening(who: &Clients<'_>, port: u16) -> Result<()> {
    let up = Instant::now();
    loop {
        let ok = match who {
            Clients::Loopback(kernel) => {
                let probe = kernel.spawn(Credentials::user(CLIENT, CLIENT));
                let ok = probe
                    .tcp_connect(SocketAddrV4::new(LOOPBACK, port), WAIT)
                    .map(|c| probe.socket_close(c))
                    .is_ok();
                kernel.exit(probe.pid());
                ok
            }
            Clients::Linux(ns, addr) => {
                let at = SocketAddrV4::new(*addr, port);
                ns.spawn(move || TcpStream::connect_timeout(&at.into(), Duration::from_secs(1)).is_ok())?
                    .join()
                    .map_err(|_| anyhow!("a probe panicked"))??
            }
        };
        if ok {
            return Ok(());
        }
        ensure!(up.elapsed() < Duration::from_secs(30), "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn measure(kernel: &Arc<Kernel>, bed: Option<&Bed>, opts: &ServeOptions, p: &mut dyn FnMut(&str)) -> Result<Vec<Row>> {
    let vino = match bed {
        Some(b) => Clients::Linux(&b.peer, VINO),
        None => Clients::Loopback(kernel),
    };
    let nginx = bed.filter(|b| b.nginx.is_some()).map(|b| Clients::Linux(&b.a, VETH_B));
    wait_listening(&vino, PROCESS_PORT)?;
    if let Some(n) = &nginx {
        wait_listening(n, NGINX_PORT)?;
    }
    let mut rows = Vec::new();
    for (file, len) in FILES {
        let (mut graft, mut process, mut linux) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..opts.reps {
            p(&format!("/www/{file}: repetition {} of {}", rep + 1, opts.reps));
            graft.push(load(&vino, GRAFT_PORT, file, len, opts)?);
            process.push(load(&vino, PROCESS_PORT, file, len, opts)?);
            if let Some(n) = &nginx {
                linux.push(load(n, NGINX_PORT, file, len, opts)?);
            }
        }
        let med = |v: &[Figures], f: fn(&Figures) -> f64| median_of(v.iter().map(f));
        let base = med(&process, |f| f.rps);
        for (server, figures) in [("graft", &graft), ("process", &process), ("nginx", &linux)] {
            if figures.is_empty() {
                continue;
            }
            let rps = med(figures, |f| f.rps);
            rows.push(Row {
                server: server.to_string(),
                file: file.to_string(),
                requests_per_sec: rps,
                p50_us: med(figures, |f| f.p50),
                p99_us: med(figures, |f| f.p99),
                vs_process: rps / base,
            });
        }
    }
    Ok(rows)
}

impl ServeReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "A server in the kernel (graft) against the same server as a VINO process",
            &["server", "file", "requests/s", "p50", "p99", "vs process"],
        );
        for r in &self.rows {
            t.row([
                r.server.clone(),
                r.file.clone(),
                format!("{:.0}", r.requests_per_sec),
                format!("{:.0} µs", r.p50_us),
                format!("{:.0} µs", r.p99_us),
                fmt_ratio(r.vs_process),
            ]);
        }
        t.note(format!(
            "{} keep-alive clients, {} s per measurement; medians of {} repetitions, the servers taking turns",
            self.clients, self.secs, self.reps
        ));
        t.note(format!(
            "goal: the graft at least {}x the process's requests per second",
            self.goal
        ));
        for n in &self.notes {
            t.note(n.clone());
        }
        vec![t]
    }

    /// Requests per second by server and file (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = FILES
            .iter()
            .map(|(file, _)| {
                let bars = self
                    .rows
                    .iter()
                    .filter(|r| r.file == *file)
                    .map(|r| (r.server.clone(), r.requests_per_sec))
                    .collect();
                (format!("/www/{file}"), bars)
            })
            .collect();
        bar_chart_with(
            path,
            "A server in the kernel against the same server as a VINO process",
            "requests per second",
            &groups,
            &ChartOptions {
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}
