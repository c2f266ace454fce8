//! What the safe-extension core costs: VINO lightweight transactions (E1, thesis table 10), a
//! null graft invoked every way the kernel can (native function pointer, native policy through
//! the graftpoint, Wasm graft without and with its transaction, epoch or fuel interruption), and
//! loading a graft (compile, or cache hit).

use serde::Serialize;
use std::sync::Arc;
use vino_graft::{Access, GraftSlot, Interrupt, Owner, Runtime, RuntimeConfig};
use vino_measure::report::{Table, fmt_ns};
use vino_measure::{Budget, Stats, bench, black_box, cycles};
use vino_toykernel::{ToyApply, ToyKernel};
use vino_vlt::{LockMode, Vlt};

/// One measured operation.
#[derive(Debug, Clone, Serialize)]
pub struct Op {
    pub group: &'static str,
    pub name: String,
    pub stats: Stats,
    /// The original VINO's figure (100 MHz Pentium, Small 1998 table 10), where there is one.
    pub seed_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    pub what: &'static str,
    pub target_ns: f64,
    pub measured_ns: f64,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GraftCostReport {
    pub ops: Vec<Op>,
    pub goals: Vec<Goal>,
    /// Cost of one more undo record at abort (slope over the record counts measured).
    pub abort_ns_per_record: f64,
}

const BATCH: usize = 1000;

fn op(group: &'static str, name: impl Into<String>, stats: Stats, seed_us: Option<f64>) -> Op {
    Op {
        group,
        name: name.into(),
        stats,
        seed_us,
    }
}

/// Times `timed` on state made fresh (untimed) by `setup` each round, per item of a batch: for
/// operations that consume what another operation made (commit needs begun transactions).
fn bench_batch<S>(rounds: usize, mut setup: impl FnMut() -> S, mut timed: impl FnMut(S)) -> Stats {
    let (mut ns, mut cyc) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let state = setup();
        let (c0, t0) = (cycles(), std::time::Instant::now());
        timed(state);
        let (elapsed, c1) = (t0.elapsed(), cycles());
        if round > 0 {
            ns.push(elapsed.as_nanos() as f64 / BATCH as f64);
            if let (Some(a), Some(b)) = (c0, c1) {
                cyc.push(b.wrapping_sub(a) as f64 / BATCH as f64);
            }
        }
    }
    Stats::from_samples(&ns, (cyc.len() == ns.len()).then_some(&cyc[..]), BATCH as u64)
}

/// Times begin and commit apart: each round opens and commits `batches` groups of a few
/// transactions, reading the cycle counter between the halves.
fn begin_then_commit(vlt: &Vlt, rounds: usize, batches: usize) -> (Stats, Stats) {
    const GROUP: usize = 4;
    let (mut b_ns, mut c_ns, mut b_cy, mut c_cy) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let (mut b, mut c) = (0u64, 0u64);
        for _ in 0..batches {
            let t0 = cycles().unwrap_or(0);
            let open: [vino_vlt::Txn; GROUP] = std::array::from_fn(|_| vlt.begin());
            let t1 = cycles().unwrap_or(0);
            for t in black_box(open) {
                t.commit();
            }
            let t2 = cycles().unwrap_or(0);
            b += t1.wrapping_sub(t0);
            c += t2.wrapping_sub(t1);
        }
        if round > 0 {
            let n = (batches * GROUP) as f64;
            b_cy.push(b as f64 / n);
            c_cy.push(c as f64 / n);
            b_ns.push(vino_graft::ticks_to_ns(b) as f64 / n);
            c_ns.push(vino_graft::ticks_to_ns(c) as f64 / n);
        }
    }
    let total = (batches * GROUP) as u64;
    (
        Stats::from_samples(&b_ns, Some(&b_cy), total),
        Stats::from_samples(&c_ns, Some(&c_cy), total),
    )
}

/// E1: the transaction system's component costs.
fn transactions(budget: Budget, ops: &mut Vec<Op>) -> f64 {
    let vlt = Vlt::default();
    let rounds = budget.rounds(15, 60);
    let iters = budget.pick(20_000, 200_000);

    // Begin and commit separately, as the thesis reports them: open a few transactions (as
    // many as a thread keeps ready), then commit them, timing each half.
    let (begin, commit) = begin_then_commit(&vlt, rounds, budget.pick(2_000, 20_000));
    ops.push(op("transaction", "begin", begin, Some(7.3)));
    ops.push(op("transaction", "commit (no locks, no records)", commit, Some(8.4)));
    ops.push(op(
        "transaction",
        "begin + commit",
        bench(rounds, iters, || vlt.begin().commit()),
        None,
    ));
    ops.push(op(
        "transaction",
        "begin + abort (no records)",
        bench(rounds, iters, || vlt.begin().abort()),
        None,
    ));
    let mut parent = vlt.begin();
    let nested = bench(rounds, iters, || {
        parent.begin_nested();
        parent.commit_nested();
    });
    parent.commit();
    ops.push(op("transaction", "nested begin + commit", nested, None));

    // Abort with N undo records: the slope is the cost of running one record.
    let mut per_n = Vec::new();
    for n in [1usize, 10, 100] {
        let iters_n = (iters / n as u64).max(100);
        let s = bench(rounds, iters_n, || {
            let mut t = vlt.begin();
            for i in 0..n {
                t.on_abort(move || {
                    black_box(i);
                });
            }
            t.abort();
        });
        per_n.push((n as f64, s.median_ns));
        ops.push(op("transaction", format!("begin + {n} undo records + abort"), s, None));
    }
    let slope = (per_n[2].1 - per_n[0].1) / (per_n[2].0 - per_n[0].0);

    // Locks: acquire (the lock object is created on first use, as in the thesis) and release at
    // commit, each timed over a batch of distinct objects in one transaction.
    let mut next = 0u64;
    let mut fresh = move || {
        next += BATCH as u64;
        next - BATCH as u64..next
    };
    let acquire = bench_batch(
        rounds,
        || (vlt.begin(), fresh()),
        |(mut t, objects)| {
            for o in objects {
                t.lock(o, LockMode::Exclusive).expect("uncontended");
            }
            t.commit();
        },
    );
    let release = bench_batch(
        rounds,
        || {
            let mut t = vlt.begin();
            for o in fresh() {
                t.lock(o, LockMode::Exclusive).expect("uncontended");
            }
            t
        },
        |t| t.commit(),
    );
    // The acquire batch also paid for releasing at its commit: take that out.
    let acquire_only = Stats {
        median_ns: (acquire.median_ns - release.median_ns).max(0.0),
        min_ns: (acquire.min_ns - release.min_ns).max(0.0),
        p90_ns: (acquire.p90_ns - release.median_ns).max(0.0),
        mean_ns: (acquire.mean_ns - release.mean_ns).max(0.0),
        median_cycles: acquire
            .median_cycles
            .zip(release.median_cycles)
            .map(|(a, r)| (a - r).max(0.0)),
        ..acquire
    };
    ops.push(op(
        "lock",
        "acquire (uncontended, new lock object)",
        acquire_only,
        Some(8.8),
    ));
    ops.push(op("lock", "release at commit", release, Some(4.8)));
    ops.push(op(
        "lock",
        "begin + acquire + commit",
        bench(rounds, iters, || {
            let mut t = vlt.begin();
            t.lock(42, LockMode::Exclusive).expect("uncontended");
            t.commit();
        }),
        None,
    ));
    let m = parking_lot::Mutex::new(0u64);
    ops.push(op(
        "mutex",
        "parking_lot mutex acquire + release",
        bench(rounds, iters, || *m.lock() += 1),
        Some(1.4 + 0.7),
    ));
    let sm = std::sync::Mutex::new(0u64);
    ops.push(op(
        "mutex",
        "std mutex acquire + release",
        bench(rounds, iters, || *sm.lock().expect("not poisoned") += 1),
        None,
    ));
    assert_eq!(vlt.locked_objects(), 0, "the benchmark leaked a lock");
    slope
}

fn null_graft() -> Vec<u8> {
    // The SDK's null graft, built from C as a user would; the text form is the fallback when no
    // C toolchain is installed.
    vino_sdk::build_example("null", &vino_sdk::BuildOptions::default())
        .unwrap_or_else(|_| br#"(module (func (export "toy_apply") (param i64) (result i64) local.get 0))"#.to_vec())
}

#[inline(never)]
fn identity(x: i64) -> i64 {
    x
}

/// A null graft called every way the kernel can call a policy.
fn invocation(budget: Budget, ops: &mut Vec<Op>) {
    let rounds = budget.rounds(15, 60);
    let iters = budget.pick(20_000, 200_000);
    let wasm = null_graft();
    let kernel = Arc::new(ToyKernel::new(1));

    let f: fn(i64) -> i64 = black_box(identity);
    ops.push(op(
        "null graft",
        "native function pointer",
        bench(rounds, iters, || f(black_box(7))),
        None,
    ));

    let rt = Runtime::new(RuntimeConfig::default());
    let slot: GraftSlot<ToyApply> = GraftSlot::new(&rt, kernel.clone(), Access::Process(1), None);
    ops.push(op(
        "null graft",
        "default policy through the graftpoint",
        bench(rounds, iters, || slot.invoke(&black_box(7))),
        None,
    ));
    slot.bind_native(Arc::new(|_: &ToyKernel, a: &i64| Ok(*a)), false);
    ops.push(op(
        "null graft",
        "native policy (unprotected)",
        bench(rounds, iters, || slot.invoke(&black_box(7))),
        None,
    ));
    slot.bind_native(Arc::new(|_: &ToyKernel, a: &i64| Ok(*a)), true);
    ops.push(op(
        "null graft",
        "native policy in a transaction",
        bench(rounds, iters, || slot.invoke(&black_box(7))),
        None,
    ));
    slot.load(&wasm, Owner::process(1)).expect("null graft loads");
    ops.push(op(
        "null graft",
        "Wasm graft, no transaction",
        bench(rounds, iters, || slot.invoke_untransacted(&black_box(7))),
        None,
    ));
    assert_eq!(
        slot.runs_in_transaction(),
        Some(false),
        "a graft that imports no kernel function runs without a transaction"
    );
    ops.push(op(
        "null graft",
        "Wasm graft as the kernel calls it (protected: it calls no kernel function, so no transaction)",
        bench(rounds, iters, || slot.invoke(&black_box(7))),
        None,
    ));
    ops.push(op(
        "null graft",
        "Wasm graft + transaction (protected, as a graft that calls the kernel)",
        bench(rounds, iters, || slot.invoke_transacted(&black_box(7))),
        None,
    ));

    // The runtime meters fuel; the other way, an epoch ticker, for comparison.
    let epochs = Runtime::new(RuntimeConfig {
        interrupt: Interrupt::Epoch,
        ..RuntimeConfig::default()
    });
    let eslot: GraftSlot<ToyApply> = GraftSlot::new(&epochs, kernel, Access::Process(1), None);
    eslot.load(&wasm, Owner::process(1)).expect("null graft loads");
    ops.push(op(
        "null graft",
        "Wasm graft + transaction, epoch ticker instead of fuel",
        bench(rounds, iters, || eslot.invoke_transacted(&black_box(7))),
        None,
    ));
}

/// The page cache's hit path: a read of a record and of a whole page that is already cached.
fn cache_hits(budget: Budget, ops: &mut Vec<Op>) {
    struct Contiguous;
    impl vino_cache::Backing for Contiguous {
        fn locate(&self, index: u64) -> std::io::Result<Option<u64>> {
            Ok(Some(index))
        }
        fn size(&self) -> std::io::Result<u64> {
            Ok(16 * 4096)
        }
    }
    let rounds = budget.rounds(15, 60);
    let iters = budget.pick(20_000, 200_000);
    let device = Arc::new(vino_blockdev::MemDevice::new(16));
    let queue = vino_blockdev::IoQueue::new(device, 4).expect("a queue on memory");
    let rt = Runtime::new(RuntimeConfig::default());
    let config = vino_cache::CacheConfig {
        frames: 16,
        writeback_every: None,
        ..vino_cache::CacheConfig::default()
    };
    let cache = vino_cache::PageCache::new(config, Arc::new(vino_kernel::QueueIo(queue)), &rt);
    let ctx = vino_cache::IoCtx::new(1);
    let mut record = [0u8; 208];
    let mut page = vec![0u8; 4096];
    cache.read(&ctx, 1, &Contiguous, 0, &mut page).expect("warm");
    ops.push(op(
        "cache",
        "hit: read 208 bytes",
        bench(rounds, iters, || cache.read(&ctx, 1, &Contiguous, 100, &mut record)),
        None,
    ));
    ops.push(op(
        "cache",
        "hit: read 4 KB",
        bench(rounds, iters, || cache.read(&ctx, 1, &Contiguous, 0, &mut page)),
        None,
    ));
}

/// Loading a graft: compiling a new module, and binding one the cache already holds.
fn loading(budget: Budget, ops: &mut Vec<Op>) {
    let rt = Runtime::new(RuntimeConfig::default());
    let slot: GraftSlot<ToyApply> = GraftSlot::new(&rt, Arc::new(ToyKernel::new(1)), Access::Process(1), None);
    let wasm = null_graft();
    let n = budget.pick(10, 40);
    // A custom section with a counter makes each module new to the cache but the same code.
    let mut fresh = 0u32;
    let cold = bench(n, 1, || {
        fresh += 1;
        let mut m = wasm.clone();
        m.extend_from_slice(&custom_section(fresh));
        slot.load(&m, Owner::process(1)).expect("loads")
    });
    slot.load(&wasm, Owner::process(1)).expect("loads");
    let warm = bench(n * 10, 1, || slot.load(&wasm, Owner::process(1)).expect("loads"));
    ops.push(op("load", "null graft, compiled (cold)", cold, None));
    ops.push(op("load", "null graft, from the module cache", warm, None));
    let hot = vino_sdk::build_example("hotlist_evict", &vino_sdk::BuildOptions::default());
    if let Ok(hot) = hot {
        let vslot: GraftSlot<vino_cache::PickVictim> =
            GraftSlot::new(&rt, Arc::new(vino_cache::VictimEnv::new(1)), Access::Process(1), None);
        let mut fresh = 0u32;
        let cold = bench(n, 1, || {
            fresh += 1;
            let mut m = hot.clone();
            m.extend_from_slice(&custom_section(fresh));
            vslot.load(&m, Owner::process(1)).expect("loads")
        });
        vslot.load(&hot, Owner::process(1)).expect("loads");
        let warm = bench(n * 10, 1, || vslot.load(&hot, Owner::process(1)).expect("loads"));
        ops.push(op("load", "hot-list graft, compiled (cold)", cold, Some(120_000.0)));
        ops.push(op("load", "hot-list graft, from the module cache", warm, None));
    }
}

/// A custom section named "vino-bench" holding `n`: changes the hash, not the code.
fn custom_section(n: u32) -> Vec<u8> {
    let name = b"vino-bench";
    let payload_len = 1 + name.len() + 4;
    let mut s = vec![0u8, payload_len as u8, name.len() as u8];
    s.extend_from_slice(name);
    s.extend_from_slice(&n.to_le_bytes());
    s
}

fn find<'a>(ops: &'a [Op], name: &str) -> &'a Op {
    ops.iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no measurement {name}"))
}

fn goals(ops: &[Op]) -> Vec<Goal> {
    let g = |what, target_ns: f64, measured_ns: f64| Goal {
        what,
        target_ns,
        measured_ns,
        met: measured_ns <= target_ns,
    };
    let mut out = vec![
        g(
            "null Wasm graft with VLT begin/commit",
            100.0,
            find(
                ops,
                "Wasm graft + transaction (protected, as a graft that calls the kernel)",
            )
            .stats
            .median_ns,
        ),
        g(
            "protected null graft, as the kernel calls it",
            40.0,
            find(
                ops,
                "Wasm graft as the kernel calls it (protected: it calls no kernel function, so no transaction)",
            )
            .stats
            .median_ns,
        ),
        g(
            "VLT begin + commit, no locks",
            50.0,
            find(ops, "begin + commit").stats.median_ns,
        ),
    ];
    let lock_pair = find(ops, "begin + acquire + commit").stats.median_ns - find(ops, "begin + commit").stats.median_ns;
    out.push(g(
        "uncontended lock acquire + release in a transaction",
        100.0,
        lock_pair,
    ));
    out.push(g(
        "page-cache hit (a 4 KB read)",
        200.0,
        find(ops, "hit: read 4 KB").stats.median_ns,
    ));
    if let Some(o) = ops.iter().find(|o| o.name == "hot-list graft, from the module cache") {
        out.push(g("cached graft load and bind", 1_000_000.0, o.stats.median_ns));
    }
    out
}

/// Runs all three groups.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> GraftCostReport {
    let budget = Budget::new(quick);
    let mut ops = Vec::new();
    progress("transactions (E1)");
    let abort_ns_per_record = transactions(budget, &mut ops);
    progress("null-graft invocation");
    invocation(budget, &mut ops);
    progress("page-cache hits");
    cache_hits(budget, &mut ops);
    progress("graft loading");
    loading(budget, &mut ops);
    let goals = goals(&ops);
    GraftCostReport {
        ops,
        goals,
        abort_ns_per_record,
    }
}

impl GraftCostReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut e1 = Table::new(
            "E1: VINO lightweight transactions (thesis table 10)",
            &["operation", "median", "cycles", "p90", "VINO 1998"],
        );
        let mut inv = Table::new(
            "Null-graft invocation",
            &["how the policy is called", "median", "cycles", "p90", "vs native call"],
        );
        let mut load = Table::new("Graft load", &["what", "median", "p90", "VINO 1998"]);
        let mut cache = Table::new("Page cache hit path", &["operation", "median", "cycles", "p90"]);
        let native = find(&self.ops, "native function pointer").stats.median_ns;
        for o in &self.ops {
            let cycles = o.stats.median_cycles.map_or("-".into(), |c| format!("{c:.0}"));
            let seed = o.seed_us.map_or("-".into(), |us| fmt_ns(us * 1000.0));
            match o.group {
                "null graft" => {
                    inv.row([
                        o.name.clone(),
                        fmt_ns(o.stats.median_ns),
                        cycles,
                        fmt_ns(o.stats.p90_ns),
                        format!("{:.1}x", o.stats.median_ns / native),
                    ]);
                }
                "load" => {
                    load.row([o.name.clone(), fmt_ns(o.stats.median_ns), fmt_ns(o.stats.p90_ns), seed]);
                }
                "cache" => {
                    cache.row([
                        o.name.clone(),
                        fmt_ns(o.stats.median_ns),
                        cycles,
                        fmt_ns(o.stats.p90_ns),
                    ]);
                }
                _ => {
                    e1.row([
                        o.name.clone(),
                        fmt_ns(o.stats.median_ns),
                        cycles,
                        fmt_ns(o.stats.p90_ns),
                        seed,
                    ]);
                }
            }
        }
        e1.note(format!(
            "abort costs {} per undo record (slope from 1 to 100 records)",
            fmt_ns(self.abort_ns_per_record)
        ));
        e1.note("VINO 1998: 100 MHz Pentium, mean of 100 cold-cache runs; the 'parking_lot mutex' row compares with its mutex acquire + release");
        load.note("cold: validate + compile with Cranelift + check + instantiate + bind; cached: the same module again (content hash hit)");
        load.note("VINO 1998: about 120 ms to load a graft (thesis 7.5)");
        let mut goals = Table::new("Goals", &["goal", "target", "measured", "met"]);
        for g in &self.goals {
            goals.row([
                g.what.to_string(),
                fmt_ns(g.target_ns),
                fmt_ns(g.measured_ns),
                if g.met { "yes" } else { "NO" }.to_string(),
            ]);
        }
        vec![e1, inv, load, cache, goals]
    }

    /// Bars of the invocation costs and the transaction operations, in ns.
    pub fn plot(&self, path: &std::path::Path) -> anyhow::Result<()> {
        let group = |g: &[&str]| -> Vec<(String, f64)> {
            self.ops
                .iter()
                .filter(|o| g.contains(&o.group))
                .map(|o| (o.name.clone(), o.stats.median_ns))
                .collect()
        };
        let groups = vec![
            ("null-graft invocation".to_string(), group(&["null graft"])),
            (
                "transactions and locks".to_string(),
                group(&["transaction", "lock", "mutex"]),
            ),
        ];
        vino_measure::report::bar_chart_with(
            path,
            "VINO core costs (median ns, log scale)",
            "ns",
            &groups,
            &vino_measure::report::ChartOptions {
                log_scale: Some(true),
                value_labels: true,
                size: Some((1400, 700)),
                ..Default::default()
            },
        )
    }
}
