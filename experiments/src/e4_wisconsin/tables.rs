//! E4's tables (ours beside the thesis' numbers), notes and plot.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::{DeviceKind, DeviceRuns, DiskOrder, E4Report, FULL_TUPLES, Policy, Protection, RunResult};
use vino_measure::report::{Table, fmt_count, fmt_ns};

/// Table 12: the LRU run.
pub const THESIS_LRU_FAULTS: u64 = 7724;
pub const THESIS_LRU_SECONDS: f64 = 104.2;

/// One look-ahead row of tables 12 and 13: records of look-ahead, page faults, run time (s),
/// graft failures, time in the graft (s).
#[derive(Clone, Copy, Debug)]
pub struct ThesisLookAhead {
    pub lookahead: u64,
    pub faults: u64,
    pub seconds: f64,
    pub failures: u64,
    pub graft_seconds: f64,
}

const fn la(lookahead: u64, faults: u64, seconds: f64, failures: u64, graft_seconds: f64) -> ThesisLookAhead {
    ThesisLookAhead {
        lookahead,
        faults,
        seconds,
        failures,
        graft_seconds,
    }
}

/// Tables 12 and 13, MiSFIT and VLT protection.
pub const THESIS_LOOKAHEAD_PROTECTED: [ThesisLookAhead; 8] = [
    la(0, 7817, 105.0, 0, 0.01),
    la(128, 7738, 104.3, 0, 0.15),
    la(256, 7580, 102.4, 0, 0.27),
    la(512, 7322, 99.6, 0, 0.43),
    la(1024, 6904, 94.3, 0, 0.76),
    la(2048, 6301, 88.7, 0, 1.47),
    la(4096, 5513, 81.0, 0, 4.27),
    la(8192, 6229, 899.3, 1474, 775.32),
];

/// Tables 12 and 13, no protection.
pub const THESIS_LOOKAHEAD_UNPROTECTED: [ThesisLookAhead; 8] = [
    la(0, 7758, 105.0, 0, 0.01),
    la(128, 7677, 102.5, 0, 0.15),
    la(256, 7522, 101.7, 0, 0.28),
    la(512, 7269, 99.2, 0, 0.43),
    la(1024, 6852, 94.0, 0, 0.72),
    la(2048, 6268, 88.3, 0, 1.39),
    la(4096, 5486, 80.3, 0, 3.86),
    la(8192, 6124, 849.0, 1433, 727.96),
];

/// Table 15: blocks of read-ahead and run time (s), protected and unprotected; the default (no
/// read-ahead) took [`THESIS_LRU_SECONDS`].
pub const THESIS_READAHEAD_PROTECTED: [(u64, f64); 7] = [
    (0, 105.5),
    (20, 83.2),
    (40, 79.0),
    (60, 76.9),
    (80, 75.7),
    (100, 74.1),
    (120, 74.3),
];
pub const THESIS_READAHEAD_UNPROTECTED: [(u64, f64); 7] = [
    (0, 104.6),
    (20, 82.5),
    (40, 78.2),
    (60, 76.1),
    (80, 74.7),
    (100, 73.5),
    (120, 73.3),
];

/// Table 14: the cache (blocks) a look-ahead needs never to fail.
pub const THESIS_CACHE_NEEDED: [(u64, u64); 7] = [
    (128, 9),
    (256, 14),
    (512, 38),
    (1024, 114),
    (2048, 356),
    (4096, 1009),
    (8192, 2441),
];

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", x * 100.0)
    } else {
        "-".into()
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { f64::NAN } else { a as f64 / b as f64 }
}

fn secs(s: f64) -> String {
    format!("{s:.1} s")
}

/// The thesis row matching `n` records of look-ahead on a relation of `tuples` (values scaled
/// with the relation).
fn thesis_lookahead(protection: Protection, n: u64, tuples: usize) -> Option<ThesisLookAhead> {
    let equivalent = n as f64 * FULL_TUPLES as f64 / tuples as f64;
    let rows = match protection {
        Protection::Protected => &THESIS_LOOKAHEAD_PROTECTED,
        Protection::Unprotected => &THESIS_LOOKAHEAD_UNPROTECTED,
        Protection::None => return None,
    };
    rows.iter()
        .copied()
        .find(|r| (r.lookahead as f64 - equivalent).abs() <= (0.03 * r.lookahead as f64).max(0.5))
}

fn thesis_readahead(protection: Protection, n: u64) -> Option<f64> {
    let rows = match protection {
        Protection::Protected => &THESIS_READAHEAD_PROTECTED,
        Protection::Unprotected => &THESIS_READAHEAD_UNPROTECTED,
        Protection::None => return None,
    };
    rows.iter().find(|(b, _)| *b == n).map(|(_, s)| *s)
}

fn graft_cells(r: &RunResult) -> (String, String) {
    match &r.graft {
        Some(g) => {
            let failures = if g.failures > 0 {
                format!(
                    "{} of {}{}",
                    fmt_count(g.failures as f64),
                    fmt_count(g.invocations as f64),
                    if g.unloaded { ", unloaded" } else { "" }
                )
            } else {
                "0".into()
            };
            (failures, fmt_ns(g.time_ns as f64))
        }
        None => ("-".into(), "-".into()),
    }
}

fn time_cell(d: &DeviceRuns, r: &RunResult) -> String {
    let t = fmt_ns(r.time_ns as f64);
    match d.kind {
        DeviceKind::Plain if r.repeats > 1 => format!(
            "{t} ({}-{})",
            fmt_ns(r.wall_min_ns as f64),
            fmt_ns(r.wall_max_ns as f64)
        ),
        DeviceKind::Plain => t,
        DeviceKind::Model => format!("{t} (elapsed {})", fmt_ns(r.elapsed_ns as f64)),
    }
}

fn lookahead_table(rep: &E4Report, d: &DeviceRuns) -> Table {
    let mut t = Table::new(
        format!("E4: look-ahead page eviction, {} (thesis tables 12-13)", d.kind.label()),
        &[
            "policy",
            "look-ahead",
            "misses",
            "% LRU",
            "time",
            "% LRU time",
            "graft failures",
            "graft time",
            "thesis faults",
            "% LRU",
            "thesis time",
            "% LRU time",
            "thesis failures, graft time",
        ],
    );
    let Some(lru) = d.lru() else { return t };
    t.row([
        "LRU".to_string(),
        "-".into(),
        fmt_count(lru.cache.misses as f64),
        "-".into(),
        time_cell(d, lru),
        "-".into(),
        "-".into(),
        "-".into(),
        fmt_count(THESIS_LRU_FAULTS as f64),
        "-".into(),
        secs(THESIS_LRU_SECONDS),
        "-".into(),
        "-".into(),
    ]);
    for protection in [Protection::Protected, Protection::Unprotected] {
        for r in d.series(Policy::LookAhead, protection) {
            let n = r.param.unwrap_or(0);
            let (failures, graft_time) = graft_cells(r);
            let thesis = thesis_lookahead(protection, n, rep.config.tuples);
            let th = |f: &dyn Fn(&ThesisLookAhead) -> String| thesis.as_ref().map_or("-".to_string(), f);
            t.row([
                format!("look-ahead, {}", protection.label()),
                n.to_string(),
                fmt_count(r.cache.misses as f64),
                pct(ratio(r.cache.misses, lru.cache.misses)),
                time_cell(d, r),
                pct(ratio(r.time_ns, lru.time_ns)),
                failures,
                graft_time,
                th(&|x| fmt_count(x.faults as f64)),
                th(&|x| pct(x.faults as f64 / THESIS_LRU_FAULTS as f64)),
                th(&|x| secs(x.seconds)),
                th(&|x| pct(x.seconds / THESIS_LRU_SECONDS)),
                th(&|x| format!("{}, {}", x.failures, fmt_ns(x.graft_seconds * 1e9))),
            ]);
        }
    }
    if rep.config.tuples != FULL_TUPLES {
        t.note(format!(
            "{} tuples and {} frames: look-ahead values are the thesis' scaled by {}/{}; the thesis columns show the row of the equivalent value",
            rep.config.tuples, rep.config.cache_frames, rep.config.tuples, FULL_TUPLES
        ));
    }
    t
}

fn readahead_table(d: &DeviceRuns) -> Table {
    let mut t = Table::new(
        format!("E4: random-access read-ahead, {} (thesis table 15)", d.kind.label()),
        &[
            "policy",
            "read-ahead (blocks)",
            "misses",
            "device reads",
            "prefetched",
            "used",
            "wasted",
            "time",
            "% LRU time",
            "graft time",
            "thesis time",
            "% default",
        ],
    );
    let Some(lru) = d.lru() else { return t };
    t.row([
        "none (LRU, no read-ahead)".to_string(),
        "-".into(),
        fmt_count(lru.cache.misses as f64),
        fmt_count(lru.device_reads as f64),
        "0".into(),
        "-".into(),
        "-".into(),
        time_cell(d, lru),
        "-".into(),
        "-".into(),
        secs(THESIS_LRU_SECONDS),
        "-".into(),
    ]);
    for policy in [Policy::ReadAhead, Policy::Both] {
        for protection in [Protection::Protected, Protection::Unprotected] {
            for r in d.series(policy, protection) {
                let n = r.param.unwrap_or(0);
                let (label, thesis) = match policy {
                    Policy::Both => (
                        format!(
                            "+ look-ahead {} records, {}",
                            r.lookahead.unwrap_or(0),
                            protection.label()
                        ),
                        None,
                    ),
                    _ => (
                        format!("read-ahead, {}", protection.label()),
                        thesis_readahead(protection, n),
                    ),
                };
                t.row([
                    label,
                    n.to_string(),
                    fmt_count(r.cache.misses as f64),
                    fmt_count(r.device_reads as f64),
                    fmt_count(r.cache.prefetched as f64),
                    fmt_count(r.cache.prefetch_used as f64),
                    fmt_count(r.cache.prefetch_wasted as f64),
                    time_cell(d, r),
                    pct(ratio(r.time_ns, lru.time_ns)),
                    graft_cells(r).1,
                    thesis.map_or("-".into(), secs),
                    thesis.map_or("-".into(), |s| pct(s / THESIS_LRU_SECONDS)),
                ]);
            }
        }
    }
    t.note("misses: reads that found their page neither cached nor on its way in; a read that waits for a page being read ahead counts as a use of the prefetch");
    t.note("+ look-ahead: the read-ahead graft and the look-ahead eviction graft together (graft time: both)");
    t.note("thesis (7.3.4): 100 blocks of read-ahead ran in 71.1% of the default's time, about 29% better");
    t
}

fn order_table(rep: &E4Report) -> Option<Table> {
    let mut t = Table::new(
        "E4: the disk scheduler's ordering under read-ahead",
        &[
            "device",
            "run",
            "disk order",
            "time",
            "% LRU time",
            "decisions",
            "reorderings",
            "head travel (blocks)",
            "seeks",
            "cylinders/seek",
        ],
    );
    let mut any = false;
    for d in &rep.devices {
        let Some(fifo) = d.runs.iter().find(|r| r.order == DiskOrder::Fifo) else {
            continue;
        };
        let Some(lru) = d.lru() else { continue };
        let n = fifo.param.unwrap_or(0);
        let elevator = d.find(Policy::ReadAhead, Protection::Protected, n);
        for (name, r) in [
            ("LRU, no read-ahead", Some(lru)),
            ("read-ahead", elevator),
            ("read-ahead", Some(fifo)),
        ] {
            let Some(r) = r else { continue };
            any = true;
            let (seeks, per) = match r.model {
                Some(m) => (
                    fmt_count(m.seeks as f64),
                    format!("{:.1}", m.seek_cylinders as f64 / m.seeks.max(1) as f64),
                ),
                None => ("-".into(), "-".into()),
            };
            t.row([
                d.kind.label().to_string(),
                if r.policy == Policy::ReadAhead {
                    format!("{name} {n} blocks")
                } else {
                    name.to_string()
                },
                match r.order {
                    DiskOrder::Elevator => "elevator",
                    DiskOrder::Fifo => "FIFO",
                }
                .to_string(),
                time_cell(d, r),
                pct(ratio(r.time_ns, lru.time_ns)),
                fmt_count(r.sched_decisions as f64),
                fmt_count(r.sched_reorderings as f64),
                fmt_count(r.head_travel_blocks as f64),
                seeks,
                per,
            ]);
        }
    }
    t.note("without read-ahead at most one request waits at a time and the order cannot matter; with it, the elevator sorts the outstanding requests into sweeps (thesis 7.3.4, table 16)");
    any.then_some(t)
}

fn setup_table(rep: &E4Report) -> Table {
    let c = &rep.config;
    let mut t = Table::new("E4: setup", &["what", "value"]);
    t.row([
        "relation".to_string(),
        format!(
            "{} tuples of {} bytes, {:.1} MB, {} pages",
            fmt_count(c.tuples as f64),
            c.tuple_bytes,
            c.relation_bytes as f64 / 1e6,
            fmt_count(c.relation_pages as f64)
        ),
    ]);
    t.row([
        "query 6".to_string(),
        format!(
            "{} records (unique1 {}..{}) through the nonclustered index, in key order",
            fmt_count(c.selected as f64),
            c.lo,
            c.lo as usize + c.selected - 1
        ),
    ]);
    t.row([
        "cache".to_string(),
        format!(
            "{} frames of 4 KB ({:.1} MB, {:.0}% of the relation), cold at every run",
            c.cache_frames,
            c.cache_frames as f64 * 4096.0 / 1e6,
            c.cache_frames as f64 * 100.0 / c.relation_pages as f64
        ),
    ]);
    for d in &rep.devices {
        t.row([d.kind.label().to_string(), d.description.clone()]);
    }
    t.row([
        "repetitions".to_string(),
        format!(
            "{} per run on the plain device (median time, min-max in brackets); 1 on the model",
            c.plain_repeats
        ),
    ]);
    for n in &rep.notes {
        t.note(n.clone());
    }
    t
}

impl E4Report {
    pub fn tables(&self) -> Vec<Table> {
        let mut out = vec![setup_table(self)];
        for d in &self.devices {
            out.push(lookahead_table(self, d));
        }
        for d in &self.devices {
            out.push(readahead_table(d));
        }
        if let Some(t) = order_table(self) {
            out.push(t);
        }
        out
    }

    /// Two panels: misses and time (% of LRU) against look-ahead, and against read-ahead, per
    /// device, protected grafts; LRU is the 100% line.
    pub fn plot(&self, path: &Path) -> Result<()> {
        let mut left: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut right: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for d in &self.devices {
            let Some(lru) = d.lru() else { continue };
            for (policy, panel) in [(Policy::LookAhead, &mut left), (Policy::ReadAhead, &mut right)] {
                let runs = d.series(policy, Protection::Protected);
                if runs.is_empty() {
                    continue;
                }
                let pts = |f: &dyn Fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
                    runs.iter()
                        .map(|r| (r.param.unwrap_or(0) as f64, 100.0 * f(r)))
                        .collect()
                };
                panel.push((
                    format!("{}: misses", d.kind.label()),
                    pts(&|r| ratio(r.cache.misses, lru.cache.misses)),
                ));
                panel.push((
                    format!("{}: time", d.kind.label()),
                    pts(&|r| ratio(r.time_ns, lru.time_ns)),
                ));
            }
        }
        if left.is_empty() && right.is_empty() {
            return Err(anyhow!("E4 plot: no look-ahead or read-ahead runs"));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let root = SVGBackend::new(path, (1400, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let root = root
            .titled(
                "E4: Wisconsin query 6, % of LRU (protected grafts; LRU = 100%)",
                ("sans-serif", 22),
            )
            .map_err(plot_err)?;
        let (a, b) = root.split_horizontally(700);
        panel(&a, "look-ahead page eviction", "look-ahead (records)", &left)?;
        panel(&b, "random-access read-ahead", "read-ahead (blocks)", &right)?;
        root.present().map_err(plot_err)?;
        Ok(())
    }
}

fn plot_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e}")
}

const COLORS: [RGBColor; 4] = [
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0xdd, 0x84, 0x52),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0xc4, 0x4e, 0x52),
];

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if pts.is_empty() {
        return Ok(());
    }
    let x1 = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let y1 = pts.iter().map(|p| p.1).fold(110.0, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..x1 * 1.02, 0f64..y1)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("% of LRU")
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 100.0), (x1 * 1.02, 100.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?
        .label("LRU")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(1)));
    for (i, (name, p)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let p: Vec<(f64, f64)> = p.iter().copied().filter(|(_, y)| y.is_finite()).collect();
        chart
            .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2)));
        chart
            .draw_series(p.into_iter().map(|xy| Circle::new(xy, 3, c.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

/// The report's notes: how to read the numbers, and what the runs showed that a table hides.
pub fn notes(rep: &E4Report) -> Vec<String> {
    let mut n = vec![
        "misses: the process's page-cache misses (the thesis' page faults), the index file's pages included; every run starts cold and checks the unique1 of each record it reads".to_string(),
        "protected: the C graft compiled to Wasm, loaded with graft_load, every call in a transaction (always_transact, as the thesis measured); unprotected: the same policy in native Rust bound to the same graftpoint (bind_native, no transaction)".to_string(),
        "the look-ahead graft keeps a count per page of the accesses in its window and slides the window as the cursor moves, so a candidate costs one lookup: unlike the thesis' graft (a search of the keep list per candidate, 13 minutes at 8192 records) its time stays small at every look-ahead".to_string(),
        "the kernel offers a vas.pick_victim graft every evictable page of the process in LRU order, a page of candidates at a time (32, then 256 each); the graft asks for the next page while all it has seen are needed, so it sees the whole list as the thesis' graft did. When all of them are needed the graft answers -1, the kernel's LRU choice stands and the call counts as a failure, as in the thesis' 8192-record run. The kernel's limits on failures (in a row, and half of the calls in a minute) are raised for E4 so the graft stays loaded; with the defaults it would be unloaded and LRU would finish the query".to_string(),
        "la_start counts the first window's records in the control call; each eviction then slides the window by the records read since the last one, well within the graftpoint's budget".to_string(),
    ];
    if rep.devices.iter().any(|d| d.kind == DeviceKind::Model) {
        n.push(format!(
            "disk model: Timing::Sleep with scale {} so that read-ahead requests really queue for the elevator (virtual time would serve each the moment it is submitted); time on the model is the disk's modeled busy time during the query (the query is I/O-bound, as in the thesis: 13.5 ms per fault); 'elapsed' is wall time / scale, which also stretches this host's thread hand-offs and pauses by 1/scale",
            rep.config.model_scale
        ));
        n.push(format!(
            "disk model: read-ahead buffer of {} KB (one track, the thesis' 'track buffer') instead of the preset's 256 KB",
            rep.config.model_track_buffer_kb
        ));
    }
    let needed = THESIS_CACHE_NEEDED
        .iter()
        .map(|(n, b)| format!("{n}: {b}"))
        .collect::<Vec<_>>()
        .join(", ");
    n.push(format!(
        "thesis table 14, cache blocks a look-ahead needs never to fail: {needed} (the thesis' cache had 1024)"
    ));
    for d in &rep.devices {
        let failing: Vec<String> = d
            .series(Policy::LookAhead, Protection::Protected)
            .iter()
            .filter_map(|r| {
                r.graft
                    .as_ref()
                    .filter(|g| g.failures > 0)
                    .map(|g| format!("{}: {} of {} calls", r.param.unwrap_or(0), g.failures, g.invocations))
            })
            .collect();
        if !failing.is_empty() {
            n.push(format!(
                "{}: look-ahead graft failures (every candidate needed) at {}",
                d.kind.label(),
                failing.join("; ")
            ));
        }
        let mismatched: Vec<String> = d
            .series(Policy::LookAhead, Protection::Protected)
            .iter()
            .filter_map(|r| {
                let u = d.find(Policy::LookAhead, Protection::Unprotected, r.param?)?;
                (u.cache.misses != r.cache.misses)
                    .then(|| format!("{}: {} vs {}", r.param.unwrap_or(0), r.cache.misses, u.cache.misses))
            })
            .collect();
        if !mismatched.is_empty() {
            n.push(format!(
                "{}: protected and unprotected look-ahead differ in misses at {}",
                d.kind.label(),
                mismatched.join("; ")
            ));
        }
        let thrashing: Vec<String> = d
            .runs
            .iter()
            .filter(|r| r.policy == Policy::ReadAhead && r.cache.prefetch_wasted > r.cache.prefetch_used)
            .map(|r| r.param.unwrap_or(0).to_string())
            .collect();
        if !thrashing.is_empty() {
            n.push(format!(
                "{}: read-ahead of {} blocks: most prefetched pages were evicted unused -- a window over about half the cache ({} frames) lets LRU evict a prefetched page before its record comes",
                d.kind.label(),
                thrashing.join(", "),
                rep.config.cache_frames
            ));
        }
        if d.kind == DeviceKind::Plain {
            n.push(format!(
                "plain device: {}; read-ahead pays here by keeping many requests in flight at once, not by shortening seeks",
                if d.direct { "O_DIRECT, so the host's page cache plays no part" } else { "O_DIRECT refused, so the host's page cache may serve misses" }
            ));
        }
    }
    n
}
