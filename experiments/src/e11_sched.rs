//! E11: VINO's CPU scheduler. (a) CPU-bound VINO processes (programs) whose users hold tickets
//! 3:2:1 get CPU in those ratios; (b) a client blocked on a server donates its turns to it and
//! the pair's throughput rises accordingly; (d) what a thread switch and a `sched.pick_next`
//! decision (default, native, protected graft) cost, against a Linux thread switch measured in
//! the same run; (c) the multimedia case: two periodic audio threads and a video thread in one
//! process, another user computing, under the default and under the process's own
//! rate-monotonic graft (`sdk/grafts/multimedia.c`): how many audio periods miss their deadline.

use anyhow::Result;
use parking_lot::Mutex;
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};
use vino_graft::{NativePolicy, Owner, Runtime};
use vino_kernel::{CpuSchedConfig, Credentials, Kernel, KernelConfig};
use vino_measure::report::{ChartOptions, Table, bar_chart_with};
use vino_sched::{Candidate, PickArgs, PickNext, ThreadCtx, ThreadWakeHandle};
use vino_wasi::{Exit, Program, ProgramLimits, Setup, Stdio};

/// How long and how much.
pub struct SchedOptions {
    /// How long the shares run.
    pub share_secs: f64,
    /// How long each donation phase runs.
    pub donation_secs: f64,
    /// Thread switches timed.
    pub switches: u64,
}

impl SchedOptions {
    pub fn new(quick: bool) -> SchedOptions {
        if quick {
            SchedOptions {
                share_secs: 1.0,
                donation_secs: 0.5,
                switches: 20_000,
            }
        } else {
            SchedOptions {
                share_secs: 10.0,
                donation_secs: 3.0,
                switches: 400_000,
            }
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ShareRow {
    pub workers: usize,
    pub tickets: u32,
    pub cpu_s: f64,
    /// Its part of the CPU the three got.
    pub share: f64,
    /// The part its tickets entitle it to.
    pub entitled: f64,
    /// |share - entitled| / entitled.
    pub error: f64,
}

#[derive(Debug, Serialize)]
pub struct DonationRow {
    pub donation: bool,
    pub requests_per_s: f64,
    /// The server's CPU per second of the run.
    pub server_cpu: f64,
    pub competitor_cpu: f64,
}

#[derive(Debug, Serialize)]
pub struct MultimediaRow {
    /// `default` or `multimedia graft`.
    pub policy: String,
    pub audio_periods: u64,
    /// Periods whose work ended after the period's end.
    pub audio_misses: u64,
    pub miss_percent: f64,
    /// The video thread's CPU per second.
    pub video_cpu: f64,
    /// The other user's CPU per second.
    pub other_cpu: f64,
}

#[derive(Debug, Serialize)]
pub struct CostRow {
    pub what: String,
    pub ns: f64,
    pub goal_ns: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct SchedReport {
    pub shares: Vec<ShareRow>,
    pub donation: Vec<DonationRow>,
    /// Throughput with donation over without.
    pub donation_gain: f64,
    pub multimedia: Vec<MultimediaRow>,
    pub costs: Vec<CostRow>,
}

fn boot(workers: usize) -> Result<Arc<Kernel>> {
    crate::mem_kernel(
        4096,
        &KernelConfig {
            cache_frames: 256,
            writeback_every: None,
            cpu: CpuSchedConfig {
                workers,
                ..CpuSchedConfig::default()
            },
            ..KernelConfig::default()
        },
    )
}

fn quiet() -> Stdio {
    Stdio {
        stdin: Box::new(std::io::empty()),
        stdout: Box::new(std::io::sink()),
        stderr: Box::new(std::io::sink()),
        tty: [false; 3],
    }
}

/// (a) Three users (tickets 3:2:1) each running a program that computes forever.
fn shares(workers: usize, secs: f64) -> Result<Vec<ShareRow>> {
    let kernel = boot(workers)?;
    let spin = Program::compile(
        br#"(module (memory (export "memory") 1) (func (export "_start") (loop (br 0))))"#,
        ProgramLimits::default(),
    )?;
    let admin = kernel.spawn(Credentials::root());
    let tickets = [300u32, 200, 100];
    let procs: Vec<_> = tickets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let uid = 2000 + i as u32;
            admin.set_user_tickets(uid, t).expect("valid tickets");
            kernel.spawn(Credentials::user(uid, uid))
        })
        .collect();
    kernel.exit(admin.pid());
    let kills: Vec<_> = procs.iter().map(|_| spin.kill_switch()).collect();
    let cpu = std::thread::scope(|s| -> Result<Vec<f64>> {
        let runs: Vec<_> = procs
            .iter()
            .zip(&kills)
            .map(|(p, kill)| {
                let (spin, p) = (&spin, p.clone());
                s.spawn(move || spin.run_in(p, Setup::new(vec![b"spin".to_vec()], vec![]), quiet(), kill))
            })
            .collect();
        // Measured from the first second on, when all three run.
        std::thread::sleep(Duration::from_millis(500));
        let cpu_of = |p: &Arc<vino_kernel::Process>| p.cpu_time().unwrap_or_default().as_secs_f64();
        let before: Vec<f64> = procs.iter().map(cpu_of).collect();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let after: Vec<f64> = procs.iter().map(cpu_of).collect();
        for k in &kills {
            k.kill();
        }
        for r in runs {
            let exit = r.join().expect("a program's runner")?;
            anyhow::ensure!(exit == Exit::Killed, "a spinning program ended as {exit:?}");
        }
        Ok(after.iter().zip(&before).map(|(a, b)| a - b).collect())
    })?;
    for p in &procs {
        kernel.exit(p.pid());
    }
    let total: f64 = cpu.iter().sum();
    let all: u32 = tickets.iter().sum();
    Ok(tickets
        .iter()
        .zip(&cpu)
        .map(|(&t, &c)| {
            let (share, entitled) = (c / total, t as f64 / all as f64);
            ShareRow {
                workers,
                tickets: t,
                cpu_s: c,
                share,
                entitled,
                error: (share - entitled).abs() / entitled,
            }
        })
        .collect())
}

/// A flag one thread sets and another waits for, giving its worker back meanwhile.
#[derive(Default)]
struct Signal {
    set: AtomicBool,
    waiter: Mutex<Option<ThreadWakeHandle>>,
}

impl Signal {
    fn raise(&self) {
        self.set.store(true, Ordering::Release);
        if let Some(w) = self.waiter.lock().as_ref() {
            w.wake();
        }
    }

    fn wait<'a>(&'a self, ctx: &ThreadCtx) -> WaitFor<'a> {
        *self.waiter.lock() = Some(ctx.waker());
        WaitFor(self)
    }
}

struct WaitFor<'a>(&'a Signal);

impl Future for WaitFor<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<()> {
        // A raise between this check and the return wakes the running thread: the scheduler
        // puts it back in the queue, so nothing is lost.
        if self.0.set.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// (b) On one worker: a client (user 1) sends requests to a server (user 2), each 200 µs of
/// the server's CPU, and waits for the answer; a third user computes all the time.
fn donation(donate: bool, secs: f64) -> Result<DonationRow> {
    let kernel = boot(1)?;
    let client = kernel.spawn(Credentials::user(3001, 3001));
    let server = kernel.spawn(Credentials::user(3002, 3002));
    let other = kernel.spawn(Credentials::user(3003, 3003));
    if donate {
        client.donate(Some(server.pid()))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let (request, reply) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
    let (s2, rq, rp, n) = (stop.clone(), request.clone(), reply.clone(), served.clone());
    let server_thread = server.spawn_thread(move |ctx| async move {
        while !s2.load(Ordering::Relaxed) {
            rq.wait(&ctx).await;
            spin_for(Duration::from_micros(200));
            n.fetch_add(1, Ordering::Relaxed);
            rp.raise();
        }
    })?;
    let (s3, rq, rp) = (stop.clone(), request.clone(), reply.clone());
    let client_thread = client.spawn_thread(move |ctx| async move {
        while !s3.load(Ordering::Relaxed) {
            let answer = rp.wait(&ctx);
            rq.raise();
            answer.await;
        }
    })?;
    let s4 = stop.clone();
    let other_thread = other.spawn_thread(move |ctx| async move {
        while !s4.load(Ordering::Relaxed) {
            spin_for(Duration::from_micros(20));
            if ctx.slice_over() {
                ctx.yield_now().await;
            }
        }
    })?;
    // The CPU each thread used (the server's on the client's turns included).
    let cpu = |p: &Arc<vino_kernel::Process>| -> f64 { p.threads().iter().map(|t| t.cpu_ns as f64 / 1e9).sum() };
    std::thread::sleep(Duration::from_millis(200));
    let (n0, s0, o0) = (served.load(Ordering::Relaxed), cpu(&server), cpu(&other));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let el = t0.elapsed().as_secs_f64();
    let (n1, s1, o1) = (served.load(Ordering::Relaxed), cpu(&server), cpu(&other));
    stop.store(true, Ordering::Relaxed);
    // Each of the pair may wait for the other's last signal: raise both until they end.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(server_thread.is_finished() && client_thread.is_finished() && other_thread.is_finished()) {
        anyhow::ensure!(Instant::now() < deadline, "the client and server did not stop");
        request.raise();
        reply.raise();
        std::thread::sleep(Duration::from_millis(2));
    }
    for p in [&client, &server, &other] {
        kernel.exit(p.pid());
    }
    Ok(DonationRow {
        donation: donate,
        requests_per_s: (n1 - n0) as f64 / el,
        server_cpu: (s1 - s0) / el,
        competitor_cpu: (o1 - o0) / el,
    })
}

/// The audio threads: (period, CPU each period).
const AUDIO: [(Duration, Duration); 2] = [
    (Duration::from_millis(10), Duration::from_micros(1000)),
    (Duration::from_millis(20), Duration::from_micros(2000)),
];

/// (c) On one worker: a player (one user) with two periodic audio threads and a video thread
/// that computes all the time; another user computing all the time.
fn multimedia(graft: bool, secs: f64) -> Result<MultimediaRow> {
    let kernel = boot(1)?;
    let player = kernel.spawn(Credentials::user(4001, 4001));
    let other = kernel.spawn(Credentials::user(4002, 4002));
    let stop = Arc::new(AtomicBool::new(false));
    let periods = Arc::new(AtomicU64::new(0));
    let misses = Arc::new(AtomicU64::new(0));
    let mut audio = Vec::new();
    for (period, work) in AUDIO {
        let (stop, periods, misses) = (stop.clone(), periods.clone(), misses.clone());
        audio.push(player.spawn_thread(move |ctx| async move {
            let mut start = Instant::now() + period;
            while !stop.load(Ordering::Relaxed) {
                ctx.sleep_until(start).await;
                spin_for(work);
                let deadline = start + period;
                periods.fetch_add(1, Ordering::Relaxed);
                if Instant::now() > deadline {
                    misses.fetch_add(1, Ordering::Relaxed);
                }
                start = deadline;
                // Periods already over are lost, not worked off.
                while start + period < Instant::now() {
                    start += period;
                    periods.fetch_add(1, Ordering::Relaxed);
                    misses.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?);
    }
    let burn = |p: &Arc<vino_kernel::Process>| {
        let stop = stop.clone();
        p.spawn_thread(move |ctx| async move {
            while !stop.load(Ordering::Relaxed) {
                spin_for(Duration::from_micros(20));
                if ctx.slice_over() {
                    ctx.yield_now().await;
                }
            }
        })
    };
    let video = burn(&player)?;
    let competitor = burn(&other)?;
    if graft {
        let wasm = vino_sdk::build_example("multimedia", &Default::default())?;
        player.graft_load("sched.pick_thread", &wasm)?;
        for (h, (period, _)) in audio.iter().zip(AUDIO) {
            player.graft_call(
                "sched.pick_thread",
                "set_period",
                &[h.tid() as i64, period.as_nanos() as i64],
            )?;
        }
    }
    let cpu = |p: &Arc<vino_kernel::Process>, tid: u64| -> f64 {
        p.threads()
            .iter()
            .find(|t| t.tid == tid)
            .map_or(0.0, |t| t.cpu_ns as f64 / 1e9)
    };
    std::thread::sleep(Duration::from_millis(300));
    let (p0, m0) = (periods.load(Ordering::Relaxed), misses.load(Ordering::Relaxed));
    let (v0, o0) = (cpu(&player, video.tid()), cpu(&other, competitor.tid()));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let el = t0.elapsed().as_secs_f64();
    let (p1, m1) = (periods.load(Ordering::Relaxed), misses.load(Ordering::Relaxed));
    let (v1, o1) = (cpu(&player, video.tid()), cpu(&other, competitor.tid()));
    stop.store(true, Ordering::Relaxed);
    for h in audio.iter().chain([&video, &competitor]) {
        h.join();
    }
    for p in [&player, &other] {
        kernel.exit(p.pid());
    }
    let (n, missed) = (p1 - p0, m1 - m0);
    Ok(MultimediaRow {
        policy: if graft { "multimedia graft" } else { "default" }.into(),
        audio_periods: n,
        audio_misses: missed,
        miss_percent: 100.0 * missed as f64 / n.max(1) as f64,
        video_cpu: (v1 - v0) / el,
        other_cpu: (o1 - o0) / el,
    })
}

/// Rounds of each switch measurement: the median is reported (a shared machine's neighbours
/// land on some rounds, not on all).
const SWITCH_ROUNDS: usize = 5;

/// The median of `rounds` runs of `measure`.
fn median_of(rounds: usize, mut measure: impl FnMut() -> Result<f64>) -> Result<f64> {
    let all = (0..rounds).map(|_| measure()).collect::<Result<Vec<f64>>>()?;
    Ok(vino_measure::Stats::from_samples(&all, None, 1).median_ns)
}

/// Two threads of one process on one worker yielding to each other: ns per switch.
fn switch_rust(n: u64) -> Result<f64> {
    let kernel = boot(1)?;
    let p = kernel.spawn(Credentials::root());
    let start = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            p.spawn_thread(move |ctx| async move {
                for _ in 0..n {
                    ctx.yield_now().await;
                }
            })
        })
        .collect::<Result<_, _>>()?;
    for h in &hs {
        h.join();
    }
    let ns = start.elapsed().as_nanos() as f64 / (2 * n) as f64;
    kernel.exit(p.pid());
    Ok(ns)
}

/// Two programs on one worker, each calling `sched_yield` `n` times: ns per switch, with the
/// programs' start and exit taken out (a run of one yield each is timed and subtracted).
fn switch_programs(n: u64) -> Result<f64> {
    let one = programs_yielding(1)?;
    let all = programs_yielding(n)?;
    Ok(all.saturating_sub(one).as_nanos() as f64 / (2 * (n - 1)) as f64)
}

/// How long two programs on one worker take to start, call `sched_yield` `n` times each and
/// end.
fn programs_yielding(n: u64) -> Result<Duration> {
    let kernel = boot(1)?;
    let wat = format!(
        r#"(module
            (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
            (memory (export "memory") 1)
            (func (export "_start") (local $i i32)
                (loop $l
                    (drop (call $yield))
                    (local.set $i (i32.add (local.get $i) (i32.const 1)))
                    (br_if $l (i32.lt_u (local.get $i) (i32.const {n}))))))"#
    );
    let program = Program::compile(wat.as_bytes(), ProgramLimits::default())?;
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let (program, kernel) = (&program, &kernel);
                s.spawn(move || {
                    program.run(
                        kernel,
                        Credentials::root(),
                        Setup::default(),
                        quiet(),
                        &program.kill_switch(),
                    )
                })
            })
            .collect();
        for r in runs {
            let exit = r.join().expect("a runner")?;
            anyhow::ensure!(exit == Exit::Code(0), "the yielding program ended as {exit:?}");
        }
        Ok(())
    })?;
    Ok(start.elapsed())
}

/// Two Linux threads pinned to one CPU, each calling `sched_yield` `n` times: ns per switch.
fn switch_linux(n: u64) -> f64 {
    // SAFETY: sched_getcpu has no arguments.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    let go = Arc::new(std::sync::Barrier::new(2));
    let start = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let go = go.clone();
            std::thread::spawn(move || {
                // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                go.wait();
                for _ in 0..n {
                    // SAFETY: no arguments.
                    unsafe { libc::sched_yield() };
                }
            })
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
    start.elapsed().as_nanos() as f64 / (2 * n) as f64
}

/// One `sched.pick_next` decision among 8 runnable threads: nothing bound, a native policy,
/// and a protected graft making the same choice.
fn pick_costs() -> Result<Vec<(String, f64)>> {
    let rt = Runtime::default();
    let slot = vino_graft::GraftSlot::<PickNext>::new(&rt, Arc::new(()), vino_graft::Access::Privileged, None);
    let cands: Vec<Candidate> = (0..8)
        .map(|i| Candidate {
            tid: i,
            pid: i,
            uid: i as u32,
            tickets: 100,
            waited_ns: 1000 * i,
            cpu_ns: 0,
        })
        .collect();
    let args = PickArgs {
        candidates: &cands,
        default: 3,
    };
    let time = |slot: &vino_graft::GraftSlot<PickNext>| {
        let s = vino_measure::bench_for(7, Duration::from_millis(60), || {
            std::hint::black_box(slot.invoke(&args))
        });
        s.median_ns
    };
    let mut out = vec![("pick_next, nothing bound".to_string(), time(&slot))];
    let native: Arc<dyn NativePolicy<PickNext>> = Arc::new(|_: &(), a: &PickArgs<'_>| Ok(a.default));
    slot.bind_native(native, false);
    out.push(("pick_next, native policy".into(), time(&slot)));
    slot.load(
        br#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
              (func (export "sched_pick_next") (param i32 i32) (result i32) (local.get 1)))"#,
        Owner::process(0),
    )?;
    out.push(("pick_next, protected graft".into(), time(&slot)));
    Ok(out)
}

pub fn run(opts: &SchedOptions, progress: &mut dyn FnMut(&str)) -> Result<SchedReport> {
    let mut shares_rows = Vec::new();
    for workers in [1, 2] {
        progress(&format!(
            "(a) shares 3:2:1 on {workers} worker(s), {} s",
            opts.share_secs
        ));
        shares_rows.extend(shares(workers, opts.share_secs)?);
    }
    let mut donation_rows = Vec::new();
    for donate in [false, true] {
        progress(&format!("(b) client and server, donation {donate}"));
        donation_rows.push(donation(donate, opts.donation_secs)?);
    }
    let donation_gain = donation_rows[1].requests_per_s / donation_rows[0].requests_per_s.max(1e-9);
    let mut multimedia_rows = Vec::new();
    for graft in [false, true] {
        progress(&format!("(c) multimedia, graft {graft}"));
        multimedia_rows.push(multimedia(graft, opts.donation_secs)?);
    }
    progress("(d) thread switches and decisions");
    let n = opts.switches;
    let mut costs = vec![
        CostRow {
            what: "VINO thread switch (kernel threads yielding)".into(),
            ns: median_of(SWITCH_ROUNDS, || switch_rust(n))?,
            goal_ns: Some(300.0),
        },
        CostRow {
            what: "VINO thread switch (programs calling sched_yield)".into(),
            ns: median_of(SWITCH_ROUNDS, || switch_programs(n))?,
            goal_ns: Some(300.0),
        },
        CostRow {
            what: "Linux thread switch (sched_yield, one CPU)".into(),
            ns: median_of(SWITCH_ROUNDS, || Ok(switch_linux(n)))?,
            goal_ns: None,
        },
    ];
    for (what, ns) in pick_costs()? {
        let goal_ns = what.contains("protected").then_some(200.0);
        costs.push(CostRow { what, ns, goal_ns });
    }
    Ok(SchedReport {
        shares: shares_rows,
        donation: donation_rows,
        donation_gain,
        multimedia: multimedia_rows,
        costs,
    })
}

impl SchedReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut a = Table::new(
            "E11 (a): three users' programs computing, tickets 3:2:1",
            &["workers", "tickets", "CPU", "share", "entitled", "error"],
        );
        for r in &self.shares {
            a.row([
                r.workers.to_string(),
                r.tickets.to_string(),
                format!("{:.2} s", r.cpu_s),
                format!("{:.3}", r.share),
                format!("{:.3}", r.entitled),
                format!("{:.1}%", r.error * 100.0),
            ]);
        }
        a.note("goal: within 5% of the tickets' ratios");
        let mut b = Table::new(
            "E11 (b): a client waiting on a server, a third user computing (one worker)",
            &["donation", "requests/s", "server CPU", "competitor CPU"],
        );
        for r in &self.donation {
            b.row([
                if r.donation { "client gives its turns" } else { "none" }.to_string(),
                format!("{:.0}", r.requests_per_s),
                format!("{:.2}", r.server_cpu),
                format!("{:.2}", r.competitor_cpu),
            ]);
        }
        b.note(format!(
            "throughput with donation / without: {:.2} (two of three turns instead of one of two: 1.33)",
            self.donation_gain
        ));
        let mut c = Table::new(
            "E11 (c): audio threads (10 ms / 1 ms, 20 ms / 2 ms) and video in one process, another user computing (one worker)",
            &[
                "policy",
                "audio periods",
                "missed",
                "missed %",
                "video CPU",
                "other user's CPU",
            ],
        );
        for r in &self.multimedia {
            c.row([
                r.policy.clone(),
                r.audio_periods.to_string(),
                r.audio_misses.to_string(),
                format!("{:.1}%", r.miss_percent),
                format!("{:.2}", r.video_cpu),
                format!("{:.2}", r.other_cpu),
            ]);
        }
        c.note("a period is missed when its work ends after the period's end");
        let mut d = Table::new("E11 (d): costs", &["what", "time", "goal"]);
        for c in &self.costs {
            d.row([
                c.what.clone(),
                format!("{:.0} ns", c.ns),
                c.goal_ns.map_or(String::new(), |g| format!("< {g:.0} ns")),
            ]);
        }
        vec![a, b, c, d]
    }

    pub fn plot(&self, path: &std::path::Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .shares
            .iter()
            .map(|r| {
                (
                    format!("{} tickets, {} worker(s)", r.tickets, r.workers),
                    vec![("share".to_string(), r.share), ("entitled".to_string(), r.entitled)],
                )
            })
            .collect();
        bar_chart_with(
            path,
            "E11: CPU shares of three users' programs, tickets 3:2:1",
            "part of the CPU",
            &groups,
            &ChartOptions {
                value_labels: true,
                log_scale: Some(false),
                ..ChartOptions::default()
            },
        )
    }
}
