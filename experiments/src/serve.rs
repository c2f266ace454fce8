//! `vino bench serve`: a server in the kernel (`event.net.packet`, `sdk/grafts/http_server.c`)
//! against the same server as a VINO process (`programs/httpd.c`, the sockets of part 1), in one
//! run (Small 1998, 3.5 and 4.2: the thesis' server graft).
//!
//! A kernel on an in-memory disk holds `/www/4k` and `/www/1m`, owned by one user, whose
//! process serves them on two ports: one with the graft, one with `httpd` running as a VINO
//! process. Clients of another user (Rust threads making the kernel's socket calls, over the
//! kernel's loopback) each keep one connection alive and ask for the same file again and again,
//! reading every response whole, for a fixed time per measurement. The servers take turns in
//! each repetition; figures are medians of the repetitions. Linux's nginx is not measured here:
//! it needs the clients in another network namespace, over the host link (`vino bench net`'s
//! bed), which is the next step.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use serde::Serialize;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig, LOOPBACK, OpenFlags, Process, SocketWait};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ratio};

use crate::e6_layout::median_of;

/// The goal: the graft server's requests per second at least this many times the process's.
pub const GOAL: f64 = 2.0;
const OWNER: u32 = 1000;
const CLIENT: u32 = 2000;
const GRAFT_PORT: u16 = 8081;
const PROCESS_PORT: u16 = 8082;
const WAIT: SocketWait = SocketWait::For(Duration::from_secs(30));
const FILES: [(&str, usize); 2] = [("4k", 4096), ("1m", 1 << 20)];

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

fn boot(httpd: &[u8]) -> Result<Arc<Kernel>> {
    let dev = Arc::new(MemDevice::new(16384));
    mkfs(&*dev, &MkfsOptions::default()).context("mkfs")?;
    let config = KernelConfig {
        cache_frames: 4096,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let kernel = Kernel::boot(dev as Arc<dyn BlockDevice>, &config)?;
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
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        write_file(&owner, &format!("/www/{name}"), &data).map_err(|e| anyhow!("writing /www/{name}: {e}"))?;
    }
    kernel.exit(owner.pid());
    Ok(kernel)
}

fn write_file(p: &Process, path: &str, data: &[u8]) -> vino_kernel::SysResult<()> {
    let fd = p.open(path, OpenFlags::create())?;
    let mut done = 0;
    while done < data.len() {
        done += p.write(fd, &data[done..])?;
    }
    p.close(fd)
}

/// `clients` keep-alive clients ask `port` for `/www/<file>` for `secs`.
fn load(kernel: &Arc<Kernel>, port: u16, file: &str, len: usize, opts: &ServeOptions) -> Result<Figures> {
    let request = format!("GET /{file} HTTP/1.1\r\nHost: vino\r\n\r\n").into_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..opts.clients)
        .map(|_| {
            let (kernel, request, stop) = (kernel.clone(), request.clone(), stop.clone());
            std::thread::spawn(move || -> Result<Vec<Duration>> {
                let p = kernel.spawn(Credentials::user(CLIENT, CLIENT));
                let result = client(&p, port, &request, len, &stop);
                kernel.exit(p.pid());
                result
            })
        })
        .collect();
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

/// One keep-alive connection asking again and again; each response's time.
fn client(p: &Process, port: u16, request: &[u8], len: usize, stop: &AtomicBool) -> Result<Vec<Duration>> {
    let at = std::net::SocketAddrV4::new(LOOPBACK, port);
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
        // The head, then `len` bytes of body, and nothing more.
        let mut head: Vec<u8> = Vec::new();
        let mut left: Option<usize> = None;
        while left != Some(0) {
            let n = p.socket_recv(conn, &mut buf, WAIT).map_err(|e| anyhow!("recv: {e}"))?;
            ensure!(n > 0, "port {port} closed the connection");
            match left {
                Some(l) => {
                    ensure!(n <= l, "port {port}: more than one response");
                    left = Some(l - n);
                }
                None => {
                    head.extend_from_slice(&buf[..n]);
                    if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        ensure!(head.starts_with(b"HTTP/1.1 200"), "port {port}: not a 200");
                        let body = head.len() - (i + 4);
                        left = Some(
                            len.checked_sub(body)
                                .ok_or_else(|| anyhow!("port {port}: too much body"))?,
                        );
                    }
                }
            }
        }
        times.push(t.elapsed());
    }
    let _ = p.socket_close(conn);
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
    let kernel = boot(&httpd)?;

    // The graft server.
    let owner = kernel.spawn(Credentials::user(OWNER, OWNER));
    owner.net_serve(GRAFT_PORT, 64, &graft)?;
    // The same server as a VINO process of the same user.
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
    let measured = measure(&kernel, opts, p);
    kill.kill();
    let _ = server.join();
    kernel.exit(owner.pid());
    let rows = measured?;
    Ok(ServeReport {
        reps: opts.reps,
        clients: opts.clients,
        secs: opts.secs,
        goal: GOAL,
        rows,
        notes: vec![
            "nginx on Linux is not measured here: it needs the clients in another network namespace over the host link"
                .to_string(),
        ],
    })
}

fn measure(kernel: &Arc<Kernel>, opts: &ServeOptions, p: &mut dyn FnMut(&str)) -> Result<Vec<Row>> {
    // The process server listens once its program has started.
    let probe = kernel.spawn(Credentials::user(CLIENT, CLIENT));
    let up = Instant::now();
    while probe
        .tcp_connect(std::net::SocketAddrV4::new(LOOPBACK, PROCESS_PORT), WAIT)
        .map(|c| probe.socket_close(c))
        .is_err()
    {
        ensure!(up.elapsed() < Duration::from_secs(30), "httpd did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    kernel.exit(probe.pid());
    let mut rows = Vec::new();
    for (file, len) in FILES {
        let (mut graft, mut process) = (Vec::new(), Vec::new());
        for rep in 0..opts.reps {
            p(&format!("/www/{file}: repetition {} of {}", rep + 1, opts.reps));
            graft.push(load(kernel, GRAFT_PORT, file, len, opts)?);
            process.push(load(kernel, PROCESS_PORT, file, len, opts)?);
        }
        let med = |v: &[Figures], f: fn(&Figures) -> f64| median_of(v.iter().map(f));
        let base = med(&process, |f| f.rps);
        for (server, figures) in [("graft", &graft), ("process", &process)] {
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
            "{} keep-alive clients of another user over the kernel's loopback, {} s per measurement; medians of {} \
             repetitions, the servers taking turns",
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
