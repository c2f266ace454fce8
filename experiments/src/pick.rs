//! `vino bench net`'s packet-order part: a rated way out shared between users, and
//! `net.pick_packet` grafts ordering it.
//!
//! Two stacks on a simulated wire and one manual clock ([`vino_net::testbed::shared_link`]), A's
//! way out at 2 MB/s. Delays and shares are in simulated time, so they depend only on the
//! order the levels chose: a user's ping behind its own eight bulk connections, first in first
//! out and with `port_priority.c` naming the ping's port; the shares of two users whatever
//! connections each opens, with even and uneven tickets, and against a datagram flood. What a
//! call costs is measured on the machine, from the graft's slot.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use vino_graft::{Owner, Runtime};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ns, fmt_ratio};
use vino_net::testbed::shared_link::{BULKY, Load, OTHER, PING, Users, run_load};

use crate::e6_layout::median_of;

#[derive(Clone, Debug)]
pub struct PickOptions {
    /// Simulated seconds a run lasts (the first is not counted).
    pub seconds: u64,
    /// Repetitions of the graft's run, for its machine time.
    pub reps: usize,
}

impl PickOptions {
    pub fn new(quick: bool) -> PickOptions {
        PickOptions {
            seconds: if quick { 3 } else { 6 },
            reps: if quick { 1 } else { 3 },
        }
    }
}

/// The ping's delays, first in first out and with the graft.
#[derive(Clone, Debug, Serialize)]
pub struct PingRow {
    pub policy: String,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The other user's share of the link over the pinging user's (1: even).
    pub other_share: f64,
}

/// One sharing case: the two users' bytes, and their ratio.
#[derive(Clone, Debug, Serialize)]
pub struct ShareRow {
    pub case: String,
    pub first: String,
    pub second: String,
    pub first_mb: f64,
    pub second_mb: f64,
    /// Second over first.
    pub ratio: f64,
    /// What the tickets say the ratio should be.
    pub expected: f64,
    pub met: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct PickReport {
    pub rate_bytes_per_sec: u64,
    pub seconds: u64,
    pub reps: usize,
    pub pings: Vec<PingRow>,
    pub shares: Vec<ShareRow>,
    /// First in first out's p50 over the graft's.
    pub ping_speedup: f64,
    /// The user's graft's calls in one run, and the time in it per call (machine).
    pub calls: u64,
    pub per_call_ns: f64,
    /// Machine time of one run, without and with the graft (medians).
    pub fifo_ms: f64,
    pub graft_ms: f64,
}

/// A share is fair within this factor of what the tickets say.
const FAIR: (f64, f64) = (0.8, 1.25);

pub fn run(opts: &PickOptions, p: &mut dyn FnMut(&str)) -> Result<PickReport> {
    let rt = Runtime::default();
    let load = |bulk, flood: Option<u32>| Load {
        bulk,
        ping: flood.is_none(),
        flood,
        seconds: opts.seconds,
    };
    let counted = (opts.seconds - 1) as f64;
    let mb = |bytes: f64| bytes / 1e6 / counted;

    let behind = [(BULKY, 8), (OTHER, 1)];
    p("a ping behind its user's own bulk: first in first out");
    let fifo_users = Users::new(&rt);
    let mut fifo_ms = Vec::new();
    let mut fifo = None;
    for _ in 0..opts.reps {
        let started = Instant::now();
        fifo = Some(run_load(&fifo_users, &load(&behind, None)));
        fifo_ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let fifo = fifo.expect("at least one repetition");
    p("a ping behind its user's own bulk: port_priority.c");
    let users = Users::new(&rt);
    let pick = users.pick(&rt, BULKY);
    let wasm = vino_sdk::build_example("port_priority", &vino_sdk::BuildOptions::default())
        .context("building port_priority.c")?;
    pick.slot
        .load(&wasm, Owner::process(u64::from(BULKY)))
        .context("loading port_priority.c")?;
    pick.slot.call_control("set_port", &[i64::from(PING), 1])?;
    let mut graft_ms = Vec::new();
    let mut with = None;
    let mut per_call = Vec::new();
    let mut calls = 0;
    for _ in 0..opts.reps {
        let before = pick.slot.stats().map_or((0, 0), |s| (s.invocations, s.time_ns));
        let started = Instant::now();
        with = Some(run_load(&users, &load(&behind, None)));
        graft_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let after = pick.slot.stats().map_or((0, 0), |s| (s.invocations, s.time_ns));
        calls = after.0 - before.0;
        per_call.push((after.1 - before.1) as f64 / calls.max(1) as f64);
    }
    let with = with.expect("at least one repetition");
    let failures = pick.slot.stats().map_or(0, |s| s.failures);
    ensure!(failures == 0, "port_priority.c failed {failures} calls");
    let ping = |policy: &str, s: &vino_net::testbed::shared_link::Seen| PingRow {
        policy: policy.into(),
        p50_us: s.ping_at(0.5) as f64,
        p99_us: s.ping_at(0.99) as f64,
        other_share: s.share(OTHER) / s.share(BULKY),
    };
    let pings = vec![
        ping("first in first out", &fifo),
        ping("port_priority.c (the ping's port first)", &with),
    ];
    let ping_speedup = pings[0].p50_us / pings[1].p50_us.max(1.0);

    let mut shares = Vec::new();
    let mut share = |case: &str, first: &str, second: &str, (a, b): (f64, f64), expected: f64| {
        let ratio = b / a;
        shares.push(ShareRow {
            case: case.into(),
            first: first.into(),
            second: second.into(),
            first_mb: mb(a),
            second_mb: mb(b),
            ratio,
            expected,
            met: (FAIR.0..FAIR.1).contains(&(ratio / expected)),
        });
    };
    p("shares: four connections against one");
    let even = run_load(&Users::new(&rt), &load(&[(BULKY, 4), (OTHER, 1)], None));
    share(
        "4 connections against 1, even tickets",
        "user of 4",
        "user of 1",
        (even.share(BULKY), even.share(OTHER)),
        1.0,
    );
    p("shares: tickets 300 against 100");
    let weighted_users = Users::new(&rt);
    weighted_users.weights.lock().insert(OTHER, 300);
    let weighted = run_load(&weighted_users, &load(&[(BULKY, 4), (OTHER, 1)], None));
    share(
        "4 connections (100 tickets) against 1 (300 tickets)",
        "user of 4",
        "user of 1",
        (weighted.share(BULKY), weighted.share(OTHER)),
        3.0,
    );
    p("shares: a datagram flood against a connection");
    let flooded = run_load(&Users::new(&rt), &load(&[(OTHER, 1)], Some(BULKY)));
    share(
        "a datagram flood against 1 connection",
        "flooding user",
        "user of 1",
        (
            flooded.flooded.get(&BULKY).copied().unwrap_or(0) as f64,
            flooded.share(OTHER),
        ),
        1.0,
    );
    Ok(PickReport {
        rate_bytes_per_sec: vino_net::testbed::shared_link::RATE,
        seconds: opts.seconds,
        reps: opts.reps,
        pings,
        shares,
        ping_speedup,
        calls,
        per_call_ns: median_of(per_call),
        fifo_ms: median_of(fifo_ms),
        graft_ms: median_of(graft_ms),
    })
}

impl PickReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "A user's ping behind its own eight bulk connections, on a link shared with another user",
            &[
                "order within the user's share",
                "p50",
                "p99",
                "other user / pinging user",
            ],
        );
        for r in &self.pings {
            t.row([
                r.policy.clone(),
                format!("{:.2} ms", r.p50_us / 1e3),
                format!("{:.2} ms", r.p99_us / 1e3),
                fmt_ratio(r.other_share),
            ]);
        }
        t.note(format!(
            "one-way delay in simulated time; A's way out at {} MB/s; the graft's p50 {} times shorter; its {} calls \
             took {} each (machine time, its transaction included); a run took {:.0} ms first in first out, {:.0} ms \
             with the graft (machine, medians of {})",
            self.rate_bytes_per_sec as f64 / 1e6,
            fmt_ratio(self.ping_speedup),
            self.calls,
            fmt_ns(self.per_call_ns),
            self.fifo_ms,
            self.graft_ms,
            self.reps
        ));
        let mut s = Table::new(
            "Two users sharing the rated link",
            &["case", "first", "second", "second / first", "tickets say", "fair"],
        );
        for r in &self.shares {
            s.row([
                r.case.clone(),
                format!("{}: {:.2} MB/s", r.first, r.first_mb),
                format!("{}: {:.2} MB/s", r.second, r.second_mb),
                fmt_ratio(r.ratio),
                fmt_ratio(r.expected),
                if r.met { "yes" } else { "no" }.to_string(),
            ]);
        }
        s.note(format!(
            "bytes delivered after the first of {} simulated seconds; fair: within {}x to {}x of what the tickets say",
            self.seconds, FAIR.0, FAIR.1
        ));
        vec![t, s]
    }

    /// The ping's delays (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .pings
            .iter()
            .map(|r| {
                (
                    r.policy.clone(),
                    vec![("p50".to_string(), r.p50_us / 1e3), ("p99".to_string(), r.p99_us / 1e3)],
                )
            })
            .collect();
        bar_chart_with(
            path,
            "A ping behind its user's own bulk (simulated time)",
            "ms",
            &groups,
            &ChartOptions {
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}
