//! `vino bench names`: what grafts over names add to a lookup and an open (Small 1998, 4.2).
//!
//! A kernel on a fresh image (in the scratch directory) holds a tree `/t/d1/.../d8/f`. A process
//! of another user (so the owner's `dir.access` graft is asked, not skipped) times, in one run:
//!
//! * a `stat` of the deep path (nine walk steps under `/t`) and an open and close of `/t/f`,
//!   with nothing bound;
//! * the same with `count_access.c` (allows everything, reading each name) bound on `/t`: every
//!   step below `/t` is one call of it, and an open of `/t/f` one (the open, standing for the
//!   lookup of `f`);
//! * the same with the process's own `dir.lookup` graft (`private_tmp.c`, which redirects only
//!   `/tmp`: every step is one call of it that redirects nothing).
//!
//! The cost per walk step is the difference of the deep stats over the graft's calls in one (nine
//! for the access graft, ten for the lookup graft, which is asked about `t` too); the cost per
//! open the difference of the opens. The three cases take many short turns (a few thousand
//! calls each, the order rotating), and each difference is taken within a turn, against the
//! ungrafted case measured just before or after it: the machines these runs share change speed
//! over seconds, by more than the effect measured, so a difference between loops a second apart
//! says more about the neighbours than about the graft. Reported: the median over the turns.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use vino_blockdev::{BlockDevice, FileDevice};
use vino_kernel::storage::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags, Process};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ns, fmt_ratio};

use crate::e6_layout::median_of;

/// The goal for what a bound graft adds to a walk step or an open, ns.
pub const GOAL_NS: f64 = 100.0;
/// Directories below `/t` on the deep path.
const DEPTH: usize = 8;
const OWNER: u32 = 1000;
const CALLER: u32 = 1001;

#[derive(Clone, Debug)]
pub struct NamesOptions {
    pub quick: bool,
    pub scratch: PathBuf,
    /// Turns: in each, every case runs [`NamesOptions::calls`] of each kind.
    pub reps: usize,
}

impl NamesOptions {
    pub fn new(quick: bool) -> NamesOptions {
        NamesOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            reps: if quick { 20 } else { 200 },
        }
    }

    /// Calls of each kind in each case's part of a turn.
    fn calls(&self) -> u64 {
        if self.quick { 2_000 } else { 5_000 }
    }
}

/// What is bound while a row is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Nothing,
    Access,
    Lookup,
}

impl Bound {
    const ALL: [Bound; 3] = [Bound::Nothing, Bound::Access, Bound::Lookup];

    fn label(self) -> &'static str {
        match self {
            Bound::Nothing => "no graft",
            Bound::Access => "dir.access (count_access.c on /t)",
            Bound::Lookup => "dir.lookup (private_tmp.c, the caller's)",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bound: Bound,
    pub label: String,
    /// ns per deep stat (nine walk steps under /t, eleven in all).
    pub stat_ns: f64,
    /// ns per open and close of /t/f.
    pub open_ns: f64,
    /// What the graft adds per walk step it is asked about, ns.
    pub per_step_ns: f64,
    /// What the graft adds to an open, ns.
    pub per_open_ns: f64,
    /// Both additions under the goal (`None` for the row with nothing bound).
    pub meets_goal: Option<bool>,
    /// Calls of the graft in one deep stat and in one open, counted by the graft's statistics
    /// (0 with nothing bound): the access graft is asked about the nine names under `/t`, the
    /// lookup graft about every name of the path, `t` included.
    pub calls_per_stat: u64,
    pub calls_per_open: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct NamesReport {
    pub reps: usize,
    pub calls: u64,
    pub steps: usize,
    pub rows: Vec<Row>,
    pub goal_ns: f64,
}

/// The deep path and its governed steps (every name below `/t`).
fn deep_path() -> (String, usize) {
    let mut path = String::from("/t");
    for i in 1..=DEPTH {
        path.push_str(&format!("/d{i}"));
    }
    path.push_str("/f");
    (path, DEPTH + 1)
}

pub fn run(opts: &NamesOptions, progress: &mut dyn FnMut(&str)) -> Result<NamesReport> {
    std::fs::create_dir_all(&opts.scratch)?;
    let image = opts.scratch.join("names.img");
    let dev = FileDevice::create(&image, 64 << 20).context("making the image")?;
    mkfs(&dev, &MkfsOptions::default())?;
    let kernel = Kernel::boot(Arc::new(dev) as Arc<dyn BlockDevice>, &KernelConfig::default())?;
    let root = kernel.spawn(Credentials::root());
    root.mkdir("/t", 0o755)?;
    root.chown("/t", Some(OWNER), Some(OWNER))?;
    let owner = kernel.spawn(Credentials::user(OWNER, OWNER));
    let (deep, steps) = deep_path();
    let mut dir = String::from("/t");
    for i in 1..=DEPTH {
        dir.push_str(&format!("/d{i}"));
        owner.mkdir(&dir, 0o755)?;
    }
    for f in [deep.as_str(), "/t/f"] {
        owner.close(owner.open(f, OpenFlags::create())?)?;
    }
    let caller = kernel.spawn(Credentials::user(CALLER, CALLER));
    let build = |name| vino_sdk::build_example(name, &vino_sdk::BuildOptions::default());
    let (access, lookup) = (build("count_access")?, build("private_tmp")?);
    let tfd = owner.open("/t", OpenFlags::directory())?;
    let t_ino = owner.stat("/t")?.ino;

    // Short turns, each case in each, in an order that rotates from turn to turn (see the
    // module's comment).
    let access_point = format!("dir.access/{tfd}");
    let bind = |bound: Bound| -> Result<()> {
        match bound {
            Bound::Nothing => {}
            Bound::Access => owner.graft_load(&access_point, &access).map(drop)?,
            Bound::Lookup => caller.graft_load("dir.lookup", &lookup).map(drop)?,
        }
        Ok(())
    };
    let unbind = |bound: Bound| -> Result<()> {
        match bound {
            Bound::Nothing => {}
            Bound::Access => owner.graft_unload(&access_point)?,
            Bound::Lookup => caller.graft_unload("dir.lookup")?,
        }
        Ok(())
    };
    // How many graft calls a deep stat and an open make, by the graft's own count.
    let invocations = |bound: Bound| -> u64 {
        let (p, point) = match bound {
            Bound::Nothing => return 0,
            Bound::Access => (&owner, format!("dir.access/inode{t_ino}")),
            Bound::Lookup => (&caller, "dir.lookup".to_string()),
        };
        let slots = p.graft_list();
        let slot = slots.iter().find(|s| s.point == point);
        slot.and_then(|s| s.stats.as_ref()).map_or(0, |s| s.invocations)
    };
    let mut calls = [(0u64, 0u64); Bound::ALL.len()];
    for (i, bound) in Bound::ALL.into_iter().enumerate() {
        bind(bound)?;
        let before = invocations(bound);
        caller.stat(&deep)?;
        let after_stat = invocations(bound);
        open_close(&caller, "/t/f");
        calls[i] = (after_stat - before, invocations(bound) - after_stat);
        unbind(bound)?;
    }
    // [case][turn]: (ns per deep stat, ns per open+close).
    let mut times = vec![Vec::with_capacity(opts.reps); Bound::ALL.len()];
    for turn in 0..opts.reps {
        if turn % 20 == 0 {
            progress(&format!("turn {} of {}", turn + 1, opts.reps));
        }
        for k in 0..Bound::ALL.len() {
            let i = (turn + k) % Bound::ALL.len();
            let bound = Bound::ALL[i];
            bind(bound)?;
            let stat = time(opts.calls(), || {
                caller.stat(&deep).expect("stat");
            });
            let open = time(opts.calls(), || open_close(&caller, "/t/f"));
            times[i].push((stat, open));
            unbind(bound)?;
        }
    }
    let base = &times[0];
    let mut rows: Vec<Row> = Bound::ALL
        .into_iter()
        .zip(&times)
        .zip(calls)
        .map(|((bound, turns), (calls_per_stat, calls_per_open))| Row {
            calls_per_stat,
            calls_per_open,
            bound,
            label: bound.label().to_string(),
            meets_goal: None,
            stat_ns: median_of(turns.iter().map(|t| t.0)),
            open_ns: median_of(turns.iter().map(|t| t.1)),
            per_step_ns: f64::NAN,
            per_open_ns: f64::NAN,
        })
        .collect();
    for (r, turns) in rows.iter_mut().zip(&times).skip(1) {
        // Each turn's difference against the ungrafted case of the same turn.
        anyhow::ensure!(
            r.calls_per_stat > 0,
            "{:?}: the graft was not asked during a stat",
            r.bound
        );
        let asked = r.calls_per_stat as f64;
        r.per_step_ns = median_of(turns.iter().zip(base).map(|(t, b)| (t.0 - b.0) / asked));
        r.per_open_ns = median_of(turns.iter().zip(base).map(|(t, b)| t.1 - b.1));
        r.meets_goal = Some(r.per_step_ns < GOAL_NS && r.per_open_ns < GOAL_NS);
    }
    kernel.shutdown()?;
    let _ = std::fs::remove_file(&image);
    Ok(NamesReport {
        reps: opts.reps,
        calls: opts.calls(),
        steps,
        rows,
        goal_ns: GOAL_NS,
    })
}

fn open_close(p: &Process, path: &str) {
    let fd = p.open(path, OpenFlags::read_only()).expect("open");
    p.close(fd).expect("close");
}

/// ns per call of `f`, over `calls` calls after a tenth as many to warm up.
fn time(calls: u64, mut f: impl FnMut()) -> f64 {
    for _ in 0..calls / 10 {
        f();
    }
    let started = Instant::now();
    for _ in 0..calls {
        f();
    }
    started.elapsed().as_nanos() as f64 / calls as f64
}

impl NamesReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Grafts over names: what a bound graft adds to a walk step and to an open",
            &[
                "bound",
                "deep stat",
                "open+close",
                "added per step",
                "added per open",
                "stat vs none",
                "goal met",
            ],
        );
        let base = self.rows[0].stat_ns;
        for r in &self.rows {
            let met = match r.meets_goal {
                None => "-",
                Some(true) => "yes",
                Some(false) => "no",
            };
            t.row([
                r.bound.label().to_string(),
                fmt_ns(r.stat_ns),
                fmt_ns(r.open_ns),
                fmt_ns(r.per_step_ns),
                fmt_ns(r.per_open_ns),
                fmt_ratio(r.stat_ns / base),
                met.to_string(),
            ]);
        }
        t.note(format!(
            "ns per call, by a process of another user than the tree's owner; {} turns, each case {} calls of each \
             kind in each (order rotating); medians over the turns, the additions of each turn's difference against \
             the ungrafted case of the same turn",
            self.reps, self.calls
        ));
        t.note(format!(
            "deep stat: /t/d1/.../d8/f, {} steps under /t; open+close: /t/f; per step: the difference over the \
             graft's calls in one stat ({}); per open: the whole difference ({} calls: {})",
            self.steps,
            self.rows[1..]
                .iter()
                .map(|r| format!("{:?} {}", r.bound, r.calls_per_stat).to_lowercase())
                .collect::<Vec<_>>()
                .join(", "),
            self.rows[1..]
                .iter()
                .map(|r| format!("{:?} {}", r.bound, r.calls_per_open).to_lowercase())
                .collect::<Vec<_>>()
                .join(", "),
            "the access graft is asked once, about the open, which stands for the lookup of f; the lookup graft \
             about t and f"
        ));
        t.note(format!(
            "goal: under {} over the ungrafted path, per step and per open",
            fmt_ns(self.goal_ns)
        ));
        vec![t]
    }

    /// ns per deep stat and per open, by what is bound (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = [("deep stat", true), ("open+close", false)]
            .into_iter()
            .map(|(name, stat)| {
                let bars = self
                    .rows
                    .iter()
                    .map(|r| (r.bound.label().to_string(), if stat { r.stat_ns } else { r.open_ns }))
                    .collect();
                (name.to_string(), bars)
            })
            .collect();
        bar_chart_with(
            path,
            "Grafts over names: ns per call",
            "ns per call",
            &groups,
            &ChartOptions {
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}
