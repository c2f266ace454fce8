//! `vino demo`: the safe-extension core on the toy kernel, from a fresh checkout.
//!
//! 1. builds the example grafts from C with the SDK;
//! 2. loads the null graft and the thesis' hot-list eviction graft and shows them deciding;
//! 3. runs the hostile suite: each graft refused or aborted, state restored, no lock held;
//! 4. the storage kernel on a disk image: a sequential read with read-ahead off and on, then an
//!    index-order read where the default read-ahead sees random reads and a graft that knows the
//!    order wins;
//! 5. the same image served by vinod to client processes: a lock conflict, an event, top;
//! 6. measures the core costs (quick sizes) with the experiment program `vino-bench-core`, if built.

use crate::table::{Table, fmt_ns};
use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::Instant;
use vino_graft::{Access, GraftSlot, Owner, Runtime};
use vino_kernel::graftpoints::{Candidates, PickVictim, VictimEnv};
use vino_toykernel::{ToyApply, ToyKernel, hostile};

pub fn run(with_bench: bool, image: &std::path::Path) -> Result<()> {
    let rt = Runtime::default();
    let opts = vino_sdk::BuildOptions::default();
    let toolchain = vino_sdk::find_toolchain(&opts)?;
    println!(
        "VINO demo: grafts built with {} ({})\n",
        toolchain.clang.display(),
        toolchain.version.lines().next().unwrap_or("")
    );

    good_grafts(&rt, &opts)?;
    hostile_suite(&rt)?;
    storage(image, &opts)?;
    processes(image)?;
    if with_bench {
        core_costs()?;
    }
    Ok(())
}

/// The core costs at quick sizes, measured by the experiment program `vino-bench-core` (which
/// `vino` does not contain): its tables, or how to build it.
fn core_costs() -> Result<()> {
    let program = match crate::bench::program("core") {
        Ok(p) => p,
        Err(e) => {
            println!("Core costs not measured: {e:#}; `vino demo --no-bench` skips this part.");
            return Ok(());
        }
    };
    let status = std::process::Command::new(&program)
        .args(["--quick", "--part", "costs", "--no-files"])
        .status()
        .with_context(|| format!("running {}", program.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", program.display());
    }
    println!("(quick sizes; `vino bench core` runs the full study and writes plots)");
    Ok(())
}

fn good_grafts(rt: &Runtime, opts: &vino_sdk::BuildOptions) -> Result<()> {
    let kernel = ToyKernel::new(4);
    let apply: GraftSlot<ToyApply> = GraftSlot::new(rt, Arc::new(kernel.clone()), Access::Process(1), None);
    let null = vino_sdk::build_example("null", opts)?;
    let counter = vino_sdk::build_example("toy_counter", opts)?;
    let first = apply.load(&null, Owner::process(1))?;
    let again = apply.load(&null, Owner::process(1))?;
    let mut t = Table::new(
        "Well-behaved grafts",
        &["graft", "graftpoint", "call", "answer", "note"],
    );
    t.row([
        "(none)".into(),
        "toy.apply".into(),
        "apply(7)".to_string(),
        "7".into(),
        "default policy".to_string(),
    ]);
    t.row([
        "null.c".into(),
        "toy.apply".into(),
        "apply(7)".into(),
        apply.invoke(&7).to_string(),
        format!(
            "loaded in {} (compiled), {} (cached)",
            fmt_ns(first.load_ns as f64),
            fmt_ns(again.load_ns as f64)
        ),
    ]);
    apply.load(&counter, Owner::process(1))?;
    let a = apply.invoke(&5);
    let b = apply.invoke(&5);
    t.row([
        "toy_counter.c".into(),
        "toy.apply".into(),
        "apply(5) twice".into(),
        format!("{a}, {b}"),
        format!("cells now {:?}", kernel.snapshot()),
    ]);
    let c = apply.invoke(&-100);
    t.row([
        "toy_counter.c".into(),
        "toy.apply".into(),
        "apply(-100)".into(),
        c.to_string(),
        format!(
            "invalid (negative): aborted, default answered, cells still {:?}",
            kernel.snapshot()
        ),
    ]);

    // The page cache's own graftpoint, as process 1 has it.
    let victim: GraftSlot<PickVictim> = GraftSlot::new(rt, Arc::new(VictimEnv::new(1)), Access::Process(1), None);
    victim.load(&vino_sdk::build_example("hotlist_evict", opts)?, Owner::process(1))?;
    let lru: &[u64] = &[100, 101, 102, 103];
    victim.call_control("hot_add", &[100])?;
    victim.call_control("hot_add", &[101])?;
    let pick = victim.invoke(&Candidates::fixed(lru.to_vec()));
    t.row([
        "hotlist_evict.c".into(),
        "vas.pick_victim".into(),
        format!("candidates {lru:?}"),
        format!("evict page {}", lru[pick]),
        "pages 100 and 101 are on the hot list (thesis 7.7.1)".into(),
    ]);
    t.print();
    Ok(())
}

fn hostile_suite(rt: &Runtime) -> Result<()> {
    let patient = Runtime::new(vino_graft::RuntimeConfig {
        invocation_budget: std::time::Duration::from_secs(20),
        ..vino_graft::RuntimeConfig::default()
    });
    let mut t = Table::new(
        "Hostile grafts",
        &[
            "case",
            "what it does",
            "stopped by",
            "default",
            "state",
            "its memory",
            "locks",
            "next graft",
            "time",
        ],
    );
    let mut all_ok = true;
    let started = Instant::now();
    for case in hostile::CASES {
        // The contended lock hog gets a long budget, so it is the lock deadline that stops it.
        let runtime = if case.name.contains("contended") { &patient } else { rt };
        let o = hostile::run_case(runtime, case).map_err(anyhow::Error::msg)?;
        all_ok &= o.passed();
        let yes = |b: bool| if b { "ok" } else { "FAILED" }.to_string();
        t.row([
            case.name.to_string(),
            case.what.to_string(),
            shorten(&o.failure, 60),
            yes(o.default_decided),
            if o.state_restored {
                "restored".into()
            } else {
                "CHANGED".into()
            },
            if o.memory_restored {
                "restored".into()
            } else {
                "CHANGED".into()
            },
            if o.no_lock_held {
                "none held".into()
            } else {
                "LEAKED".into()
            },
            yes(o.next_graft_works),
            fmt_ns(o.elapsed.as_nanos() as f64),
        ]);
    }
    t.note(format!(
        "{} cases in {:.1} s",
        hostile::CASES.len(),
        started.elapsed().as_secs_f64()
    ));
    t.print();
    if !all_ok {
        bail!("a hostile graft was not contained (see the table)");
    }
    Ok(())
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// The storage kernel on a disk image: a file written through the page cache and read back
/// sequentially with read-ahead off and the kernel's default, then in two ways the default gets
/// wrong, against grafts that get them right (see [`misread`]).
fn storage(image: &std::path::Path, opts: &vino_sdk::BuildOptions) -> Result<()> {
    use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags};
    const MB: usize = 1 << 20;
    if let Some(dir) = image.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(image);
    crate::storage::run_mkfs(image, Some(64 << 20), None, false)?;
    let dev: Arc<dyn vino_blockdev::BlockDevice> = Arc::new(vino_blockdev::FileDevice::open(image)?);
    let direct = dev.direct();
    let kernel = Kernel::boot(dev, &KernelConfig::default())?;
    let p = kernel.spawn(Credentials::root());
    p.mkdir("/demo", 0o755)?;
    let fd = p.open("/demo/data", OpenFlags::create())?;
    let chunk: Vec<u8> = (0..MB).map(|i| (i % 251) as u8).collect();
    for _ in 0..16 {
        p.write(fd, &chunk)?;
    }
    p.fsync(fd)?;
    p.close(fd)?;
    let mut t = Table::new(
        format!(
            "Storage kernel: 16 MB read sequentially, 32 KB at a time ({}, O_DIRECT {})",
            image.display(),
            if direct { "on" } else { "off" }
        ),
        &["read-ahead", "time", "misses", "prefetched", "used", "MB/s"],
    );
    for (name, off) in [("off", true), ("kernel default", false)] {
        kernel.drop_clean_pages()?;
        let before = p.cache_counters();
        let fd = p.open("/demo/data", OpenFlags::read_only())?;
        if off {
            p.set_read_ahead(fd, vino_kernel::RaMode::Off)?;
        }
        let started = Instant::now();
        let mut buf = vec![0u8; 32 << 10];
        let mut total = 0;
        loop {
            let n = p.read(fd, &mut buf)?;
            if n == 0 {
                break;
            }
            if buf[..n]
                .iter()
                .enumerate()
                .any(|(i, &b)| b != ((total + i) % MB % 251) as u8)
            {
                bail!("read back wrong data at offset {total}");
            }
            total += n;
        }
        let elapsed = started.elapsed();
        p.close(fd)?;
        let c = p.cache_counters();
        t.row([
            name.to_string(),
            fmt_ns(elapsed.as_nanos() as f64),
            (c.misses - before.misses).to_string(),
            (c.prefetched - before.prefetched).to_string(),
            (c.prefetch_used - before.prefetch_used).to_string(),
            format!("{:.0}", total as f64 / MB as f64 / elapsed.as_secs_f64()),
        ]);
    }
    // sequential_ra.c re-implements this default as a graft: on this read it can only tie.
    t.note("a sequential read is what the default read-ahead is for; no graft beats it here");
    t.print();
    let mut t = misread(&kernel, &p, opts, direct)?;
    kernel.shutdown()?;
    // The kernel holds the image (and its lock) until it is gone.
    drop((p, kernel));
    let report = vino_fs::fsck(&vino_blockdev::FileDevice::open(image)?, false)?;
    t.note(format!(
        "fsck after unmount: {}",
        if report.is_clean() { "clean" } else { "PROBLEMS" }
    ));
    t.print();
    if !report.is_clean() {
        bail!("fsck found problems on {}", image.display());
    }
    Ok(())
}

/// Megabytes of /demo/data.
const DATA_MB: u64 = 16;

/// /demo/data read where the default read-ahead is wrong, against a graft that knows better, in
/// the same run. Backwards, 32 KB at a time: the default looks for reads that continue forwards
/// and prefetches nothing, so each read waits for the device in a request of its own size;
/// reverse_ra.c keeps a window before the reader in flight, in large requests. In index order
/// (4 KB blocks at random, what a database scanning through an index reads): the default sees
/// random reads; index_readahead.c, the thesis' graft, is told the order and keeps the next
/// reads' blocks in flight.
fn misread(
    kernel: &Arc<vino_kernel::Kernel>,
    p: &Arc<vino_kernel::Process>,
    opts: &vino_sdk::BuildOptions,
    direct: bool,
) -> Result<Table> {
    const CHUNK: u64 = 32 << 10;
    const BLOCK: u64 = 4 << 10;
    const RECORDS: usize = 1024;
    let backwards: Vec<u64> = (0..DATA_MB << 20 >> 15).rev().map(|i| i * CHUNK).collect();
    let index: Vec<u64> = shuffled(DATA_MB << 20 >> 12, 0x5eed)[..RECORDS]
        .iter()
        .map(|b| b * BLOCK)
        .collect();
    let reverse = vino_sdk::build_example("reverse_ra", opts)?;
    let indexed = vino_sdk::build_example("index_readahead", opts)?;
    let mut t = Table::new(
        format!(
            "Storage kernel: where the default read-ahead is wrong (O_DIRECT {})",
            if direct { "on" } else { "off" }
        ),
        &["read", "read-ahead", "time", "misses", "prefetched", "used", "MB/s"],
    );
    let back = "16 MB backwards, 32 KB reads";
    measure(kernel, p, &mut t, [back, "kernel default"], &backwards, CHUNK, |_| {
        Ok(())
    })?;
    measure(
        kernel,
        p,
        &mut t,
        [back, "reverse_ra.c graft"],
        &backwards,
        CHUNK,
        |point| {
            p.graft_load(point, &reverse)?;
            p.graft_call(point, "rev_set_blocks", &[256])?;
            Ok(())
        },
    )?;
    let by_index = "4 MB in index order, 4 KB reads";
    measure(kernel, p, &mut t, [by_index, "kernel default"], &index, BLOCK, |_| {
        Ok(())
    })?;
    measure(
        kernel,
        p,
        &mut t,
        [by_index, "index_readahead.c graft"],
        &index,
        BLOCK,
        |point| {
            p.graft_load(point, &indexed)?;
            p.graft_call(point, "ra_set_record_size", &[BLOCK as i64])?;
            p.graft_call(point, "ra_set_depth", &[16])?;
            for &at in &index {
                p.graft_call(point, "ra_push", &[at as i64])?;
            }
            Ok(())
        },
    )?;
    Ok(t)
}

/// One row of [`misread`]: from a cold cache, /demo/data opened, `setup` given the descriptor's
/// read-ahead graftpoint, then `len` bytes read (and checked) at each offset of `order`.
fn measure(
    kernel: &Arc<vino_kernel::Kernel>,
    p: &Arc<vino_kernel::Process>,
    t: &mut Table,
    names: [&str; 2],
    order: &[u64],
    len: u64,
    setup: impl FnOnce(&str) -> vino_kernel::SysResult<()>,
) -> Result<()> {
    kernel.drop_clean_pages()?;
    let before = p.cache_counters();
    let fd = p.open("/demo/data", vino_kernel::OpenFlags::read_only())?;
    setup(&format!("file.compute_ra/{fd}"))?;
    let started = Instant::now();
    let mut buf = vec![0u8; len as usize];
    for &at in order {
        let n = p.pread(fd, &mut buf, at)?;
        let wrong = |(i, &x): (usize, &u8)| x != ((at as usize + i) % (1 << 20) % 251) as u8;
        if n != buf.len() || buf.iter().enumerate().any(wrong) {
            bail!("read back wrong data at offset {at}");
        }
    }
    let elapsed = started.elapsed();
    p.close(fd)?;
    let c = p.cache_counters();
    t.row([
        names[0].to_string(),
        names[1].to_string(),
        fmt_ns(elapsed.as_nanos() as f64),
        (c.misses - before.misses).to_string(),
        (c.prefetched - before.prefetched).to_string(),
        (c.prefetch_used - before.prefetch_used).to_string(),
        format!(
            "{:.0}",
            (order.len() as u64 * len) as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
        ),
    ]);
    Ok(())
}

/// `0..n` in a fixed pseudo-random order (Fisher-Yates driven by SplitMix64).
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = (s ^ (s >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut v: Vec<u64> = (0..n).collect();
    for i in (1..v.len()).rev() {
        v.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    v
}

/// The image served by a daemon in this program to two clients over its socket, as separate
/// programs would use it: a byte-range lock conflict, an unlink event through a filter, `top`.
fn processes(image: &std::path::Path) -> Result<()> {
    use vino_client::{Client, EventKind, LockKind, OpenFlags};
    let dir = tempfile::tempdir()?;
    let config = vino_daemon::Config {
        socket: dir.path().join("vinod.sock"),
        image: image.to_path_buf(),
        ..Default::default()
    };
    let daemon = vino_daemon::start(config)?;
    let (mut a, mut b) = (Client::connect(daemon.socket())?, Client::connect(daemon.socket())?);
    let mut t = Table::new(
        format!(
            "Processes: vinod serving {} on {}",
            image.display(),
            daemon.socket().display()
        ),
        &["step", "what happened"],
    );
    let fa = a.open("/demo/shared", OpenFlags::create())?;
    let fb = b.open("/demo/shared", OpenFlags::read_write())?;
    a.lock(fa, LockKind::Write, 0, 1, false)?;
    let refused = b.lock(fb, LockKind::Write, 0, 1, false).expect_err("a holds the lock");
    t.row([
        "b asks for a's write lock",
        &format!("refused: errno {} ({})", refused.errno, refused.message),
    ]);
    a.lock(fa, LockKind::Unlock, 0, 1, false)?;
    b.lock(fb, LockKind::Write, 0, 1, false)?;
    t.row(["a unlocks, b asks again", "granted"]);
    b.event_subscribe(EventKind::Unlink)?;
    b.event_filter(EventKind::Unlink, &[], &["scratch".to_string()])?;
    for name in ["/demo/scratch", "/demo/other"] {
        let fd = a.open(name, OpenFlags::create())?;
        a.close(fd)?;
        a.unlink(name)?;
    }
    let events = b.event_wait(2000)?;
    let seen: Vec<String> = events
        .iter()
        .map(|e| format!("{:?} {} by pid {}", e.kind, e.name, e.pid))
        .collect();
    t.row(["a unlinks scratch and other; b watches \"scratch\"", &seen.join(", ")]);
    if events.len() != 1 || events[0].name != "scratch" {
        bail!("expected one unlink event for scratch, got {seen:?}");
    }
    let top = a.top()?;
    t.row([
        "top",
        &format!(
            "{} processes, {} system calls",
            top.processes.len(),
            top.processes.iter().map(|p| p.syscalls).sum::<u64>()
        ),
    ]);
    drop((a, b));
    daemon.shutdown()?;
    let report = vino_fs::fsck(&vino_blockdev::FileDevice::open(image)?, false)?;
    t.note(format!(
        "clients gone, daemon stopped; fsck: {}",
        if report.is_clean() { "clean" } else { "PROBLEMS" }
    ));
    t.print();
    if !report.is_clean() {
        bail!("fsck found problems on {}", image.display());
    }
    Ok(())
}
