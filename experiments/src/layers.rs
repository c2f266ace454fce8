//! `vino bench layers`: what stream layers on a socket cost (`Process::socket_push`).
//!
//! Two users' kernel processes over the loopback, one sending 16 MiB (4 MiB with `--quick`) to
//! the other, in the clear and through layers both ends pushed: LZ4 (`lz4_stream.c`),
//! ChaCha20-Poly1305 (`chacha20poly1305_stream.c`) and the two stacked. The data is half text
//! that compresses and half bytes that do not, in alternating 4 KiB runs. Throughput is from
//! the first send to the last byte read, medians of the repetitions, each case beside the plain
//! connection in the same run.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use serde::Serialize;
use vino_kernel::{Credentials, Kernel, KernelConfig, LOOPBACK, Process, SocketId, SocketWait};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ratio};

use crate::e6_layout::median_of;

const PATIENCE: SocketWait = SocketWait::For(Duration::from_secs(60));

#[derive(Clone, Debug)]
pub struct LayersOptions {
    pub quick: bool,
    pub reps: usize,
    pub bytes: usize,
}

impl LayersOptions {
    pub fn new(quick: bool) -> LayersOptions {
        LayersOptions {
            quick,
            reps: if quick { 2 } else { 5 },
            bytes: if quick { 4 << 20 } else { 16 << 20 },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The layers, top first (`plain`: none).
    pub layers: String,
    /// MB/s, median of the repetitions, and the slowest and fastest.
    pub mb_s: f64,
    pub mb_s_min: f64,
    pub mb_s_max: f64,
    /// This case's throughput over the plain connection's.
    pub ratio: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LayersReport {
    pub reps: usize,
    pub bytes: usize,
    pub rows: Vec<Row>,
}

/// Half text that compresses, half bytes that do not, in 4 KiB runs.
fn data(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32;
    (0..n)
        .map(|i| {
            if (i / 4096) % 2 == 0 {
                b"the quick brown fox "[i % 20]
            } else {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            }
        })
        .collect()
}

fn boot() -> Result<Arc<Kernel>> {
    crate::mem_kernel(
        4096,
        &KernelConfig {
            cache_frames: 1024,
            writeback_every: None,
            ..KernelConfig::default()
        },
    )
}

/// A layer: its name and its module.
type Layer<'a> = (&'a str, Arc<[u8]>);

/// Pushes `layers` (bottom first) onto `sock`, giving each encryptor its key.
fn push(p: &Process, sock: SocketId, layers: &[Layer<'_>]) -> Result<()> {
    for (name, wasm) in layers {
        let point = p.socket_push(sock, wasm).map_err(|e| anyhow!("pushing {name}: {e}"))?;
        if name.starts_with("chacha") {
            for word in 0..4 {
                p.graft_call(&point, "set_key", &[word, 0x0123_4567_89ab_cdef ^ word])
                    .map_err(|e| anyhow!("{name}'s key: {e}"))?;
            }
        }
    }
    Ok(())
}

/// One transfer of `payload` from one user's process to another's through `layers`: its time.
fn transfer(k: &Arc<Kernel>, port: u16, layers: &[Layer<'_>], payload: &Arc<Vec<u8>>) -> Result<Duration> {
    let (server, client) = (
        k.spawn(Credentials::user(1000, 1000)),
        k.spawn(Credentials::user(2000, 2000)),
    );
    let done = (|| -> Result<Duration> {
        let listener = server.tcp_listen(port, 1).map_err(|e| anyhow!("listen: {e}"))?;
        let conn = client
            .tcp_connect(std::net::SocketAddrV4::new(LOOPBACK, port), PATIENCE)
            .map_err(|e| anyhow!("connect: {e}"))?;
        let (accepted, _) = server
            .tcp_accept(listener, PATIENCE)
            .map_err(|e| anyhow!("accept: {e}"))?;
        push(&server, accepted, layers)?;
        push(&client, conn, layers)?;
        let started = Instant::now();
        let sender = std::thread::spawn({
            let (client, payload) = (client.clone(), payload.clone());
            move || -> Result<()> {
                let mut at = 0;
                while at < payload.len() {
                    at += client
                        .socket_send(conn, &payload[at..], PATIENCE)
                        .map_err(|e| anyhow!("send: {e}"))?;
                }
                Ok(())
            }
        });
        let (mut got, mut buf) = (0usize, vec![0u8; 256 << 10]);
        while got < payload.len() {
            let n = server
                .socket_recv(accepted, &mut buf, PATIENCE)
                .map_err(|e| anyhow!("recv: {e}"))?;
            ensure!(n > 0, "the stream ended after {got} bytes");
            ensure!(buf[..n] == payload[got..got + n], "bytes changed at {got}");
            got += n;
        }
        let took = started.elapsed();
        sender.join().map_err(|_| anyhow!("the sender panicked"))??;
        Ok(took)
    })();
    k.exit(client.pid());
    k.exit(server.pid());
    done
}

pub fn run(opts: &LayersOptions, p: &mut dyn FnMut(&str)) -> Result<LayersReport> {
    let build = |name: &str| -> Result<Arc<[u8]>> {
        Ok(vino_sdk::build_example(name, &vino_sdk::BuildOptions::default())
            .with_context(|| format!("building {name}.c"))?
            .into())
    };
    let (lz4, chacha) = (build("lz4_stream")?, build("chacha20poly1305_stream")?);
    let cases: Vec<(&str, Vec<Layer<'_>>)> = vec![
        ("plain", vec![]),
        ("lz4", vec![("lz4", lz4.clone())]),
        ("chacha20poly1305", vec![("chacha20poly1305", chacha.clone())]),
        (
            "chacha20poly1305 over lz4",
            vec![("lz4", lz4), ("chacha20poly1305", chacha)],
        ),
    ];
    let k = boot()?;
    let payload = Arc::new(data(opts.bytes));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut port = 7600;
    for rep in 0..opts.reps {
        // Cases interleaved within each repetition, so the machine's noise falls on all alike.
        for (i, (name, layers)) in cases.iter().enumerate() {
            p(&format!("repetition {} of {}: {name}", rep + 1, opts.reps));
            port += 1;
            times[i].push(transfer(&k, port, layers, &payload)?.as_secs_f64());
        }
    }
    let mb = opts.bytes as f64 / 1e6;
    let plain = mb / median_of(times[0].iter().copied());
    let rows = cases
        .iter()
        .zip(&times)
        .map(|((name, _), t)| {
            let mb_s = mb / median_of(t.iter().copied());
            Row {
                layers: name.to_string(),
                mb_s,
                mb_s_min: mb / t.iter().copied().fold(0.0, f64::max),
                mb_s_max: mb / t.iter().copied().fold(f64::INFINITY, f64::min),
                ratio: mb_s / plain,
            }
        })
        .collect();
    Ok(LayersReport {
        reps: opts.reps,
        bytes: opts.bytes,
        rows,
    })
}

impl LayersReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Stream layers on a loopback connection between two users' processes",
            &["layers (top first)", "MB/s", "min", "max", "over plain"],
        );
        for r in &self.rows {
            t.row([
                r.layers.clone(),
                format!("{:.0}", r.mb_s),
                format!("{:.0}", r.mb_s_min),
                format!("{:.0}", r.mb_s_max),
                fmt_ratio(r.ratio),
            ]);
        }
        t.note(format!(
            "{} MiB from one process to another, half compressible text and half random bytes in 4 KiB runs; from the \
             first send to the last byte read; medians of {} repetitions, the cases interleaved",
            self.bytes >> 20,
            self.reps
        ));
        vec![t]
    }

    /// Throughput of each case (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .map(|r| (r.layers.clone(), vec![("MB/s".to_string(), r.mb_s)]))
            .collect();
        bar_chart_with(
            path,
            "Stream layers on a socket: throughput over the loopback",
            "MB/s",
            &groups,
            &ChartOptions {
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}
