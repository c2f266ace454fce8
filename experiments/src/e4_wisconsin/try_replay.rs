//! `vino bench try`: trying a graft and replaying one, on E4's query (the Wisconsin selection).
//!
//! * **Try.** The look-ahead eviction graft runs in shadow beside LRU (`vino graft try`): the
//!   application feeds the candidate its scan and cursor as it would a bound graft, through the
//!   shadow's queue. Its would-be misses are set against the misses it has when then bound for
//!   real on the same query (goal: within 2%), and the query's time with the shadow running
//!   against LRU alone (goal: at most 10% more).
//! * **Record and replay.** The bound look-ahead graft is recorded for the whole query and the
//!   recording replayed offline: bytes per invocation, invocations replayed per second, and a
//!   bit-exact check that the replay gives every recorded answer.
//! * **Replay on the ghost.** The same recording holds the query's page accesses, so modules
//!   can be replayed on `graft try`'s ghost of the process's pages: the look-ahead module
//!   (its would-be misses against its misses bound, the model's error on its own recording) and
//!   an LRU module (against LRU's misses measured live: what replay says of another policy).
//!
//! The runs are on the plain device (an image read with `O_DIRECT`), each from a cold cache,
//! the four kinds interleaved round by round so that the machine's noise falls on all alike;
//! times are medians.

use super::*;
use vino_graft::replay::{ReplayOptions, replay};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ns, fmt_ratio};

/// One kind of run: its median time, every time, and its process's misses (the first run's).
#[derive(Debug, Clone, Serialize)]
pub struct Timed {
    pub what: String,
    pub wall_ns: u64,
    pub walls_ns: Vec<u64>,
    pub misses: u64,
    /// The shadow's would-be misses (the run with the shadow only).
    pub would_be_misses: Option<u64>,
}

/// The recording of the bound graft over one query, and its replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayRun {
    pub invocations: u64,
    pub bytes: usize,
    pub bytes_per_invocation: f64,
    /// The image of the graft's memory when recording began (its share of `bytes`).
    pub image_bytes: usize,
    pub events: usize,
    pub control_calls: u64,
    pub replay_ns: u64,
    /// Invocations replayed per second, offline.
    pub rate: f64,
    /// Every recorded answer came again.
    pub exact: bool,
    pub matched: u64,
    pub truncated: bool,
    /// Page accesses in the recording (for the ghost).
    pub accesses: u64,
    /// The look-ahead module and an LRU module replayed on the ghost of the recorded accesses:
    /// their would-be misses, and the time each replay took.
    pub ghost_lookahead_misses: u64,
    pub ghost_lru_misses: u64,
    pub ghost_ns: u64,
}

/// LRU as a graft: the oldest page offered goes.
const LRU_WAT: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param i32) (result i32) (i32.const 0)))"#;

#[derive(Debug, Clone, Serialize)]
pub struct TryReplayReport {
    pub tuples: usize,
    pub cache_frames: usize,
    pub selected: usize,
    /// Records the look-ahead graft looks ahead.
    pub lookahead: u64,
    pub rounds: usize,
    /// LRU; LRU with the look-ahead graft in shadow beside it; the look-ahead graft bound; the
    /// look-ahead graft bound and recorded.
    pub runs: Vec<Timed>,
    /// The shadow's report (the first round's).
    pub tried: vino_cache::VictimTryReport,
    /// (would-be misses - misses when bound) / misses when bound.
    pub would_be_error: f64,
    /// The query's time with the shadow against LRU alone.
    pub shadow_time_ratio: f64,
    /// The query's time with the bound graft recorded against bound alone.
    pub record_time_ratio: f64,
    pub replay: ReplayRun,
    /// The ghost replay's would-be misses against the misses measured: the look-ahead module's
    /// against it bound, the LRU module's against LRU.
    pub ghost_error: f64,
    pub ghost_lru_error: f64,
}

/// Options: E4's sizes (`quick` for CI), rounds (default 5; 3 quick).
pub fn run(opts: &E4Options, rounds: Option<usize>, progress: &mut dyn FnMut(&str)) -> Result<TryReplayReport> {
    let tuples = opts.tuples.unwrap_or(if opts.quick { 20_000 } else { FULL_TUPLES });
    let frames = opts
        .cache_frames
        .unwrap_or_else(|| ((FULL_FRAMES as f64 * tuples as f64 / FULL_TUPLES as f64).round() as usize).max(16));
    let rounds = rounds.unwrap_or(if opts.quick { 3 } else { 5 }).max(1);
    let relation = Relation::generate(tuples, opts.seed);
    let selection = relation.query6(opts.lo);
    let lo = relation.unique1[selection[0] as usize];
    std::fs::create_dir_all(&opts.scratch_dir).with_context(|| format!("creating {}", opts.scratch_dir.display()))?;
    let image = opts
        .scratch_dir
        .join(format!("e4-try-{}-{}.img", std::process::id(), tuples));
    let _scratch = Scratch(image.clone());
    progress(&format!("try: writing the relation ({tuples} tuples) and its index"));
    write_image(&image, &relation)?;
    progress("try: building the look-ahead graft");
    let build = vino_sdk::BuildOptions::default();
    let lookahead =
        vino_sdk::build_c_str("lookahead_evict.c", LOOKAHEAD_C, &build).context("building lookahead_evict.c")?;
    let grafts = Grafts {
        lookahead,
        readahead: Vec::new(),
        fifo: None,
    };
    let q = Query {
        lo,
        count: selection.len(),
    };
    let n = scaled_lookaheads(tuples)[6];
    let booted = boot(&image, DeviceKind::Plain, frames, 1.0, 60)?;
    let spec = |policy, protection| Spec {
        policy,
        protection,
        param: Some(n),
        lookahead: None,
        order: DiskOrder::Elevator,
    };
    let kinds = [
        ("LRU", spec(Policy::Lru, Protection::None), Extra::default()),
        (
            "LRU, look-ahead in shadow",
            spec(Policy::Lru, Protection::None),
            Extra {
                shadow: Some(n),
                record: false,
            },
        ),
        (
            "look-ahead bound",
            spec(Policy::LookAhead, Protection::Protected),
            Extra::default(),
        ),
        (
            "look-ahead bound, recorded",
            spec(Policy::LookAhead, Protection::Protected),
            Extra {
                shadow: None,
                record: true,
            },
        ),
    ];
    let mut walls: Vec<Vec<u64>> = vec![Vec::new(); kinds.len()];
    let mut misses = vec![0u64; kinds.len()];
    let (mut tried, mut recording) = (None, None);
    for round in 0..rounds {
        for (k, (what, spec, extra)) in kinds.iter().enumerate() {
            booted.kernel.drop_clean_pages().context("dropping the cache")?;
            let p: Arc<Process> = booted.kernel.spawn(Credentials::user(1000, 1000));
            let done = query_with(&booted, &grafts, &q, spec, &p, extra);
            booted.kernel.exit(p.pid());
            let (r, out) = done.with_context(|| what.to_string())?;
            walls[k].push(r.wall_ns);
            if round == 0 {
                misses[k] = r.cache.misses;
                tried = tried.or(out.tried);
                recording = recording.or(out.recording);
            }
            progress(&format!(
                "try [{}/{rounds}] {what}: {} misses, {}",
                round + 1,
                r.cache.misses,
                fmt_ns(r.wall_ns as f64)
            ));
        }
    }
    sys(booted.kernel.shutdown(), || "shutting the kernel down".into())?;
    let timed: Vec<Timed> = kinds
        .iter()
        .zip(walls)
        .zip(&misses)
        .map(|(((what, ..), mut w), &m)| {
            let all = w.clone();
            w.sort_unstable();
            Timed {
                what: what.to_string(),
                wall_ns: w[w.len() / 2],
                walls_ns: all,
                misses: m,
                would_be_misses: None,
            }
        })
        .collect();
    let tried = tried.context("the shadow gave no report")?;
    let recording = recording.context("the recording was not taken")?;
    progress(&format!("try: replaying {} invocations offline", recording.invocations));
    let bytes = recording.to_bytes().len();
    let image_bytes: usize = recording.image.chunks.iter().map(|(_, c)| c.len()).sum();
    let replayed = replay(&recording, &grafts.lookahead, ReplayOptions::default())?;
    progress("try: replaying the look-ahead and LRU modules on the ghost of the recorded accesses");
    let ghost_started = Instant::now();
    let ghost_lookahead = vino_cache::victim_replayed(&recording, &grafts.lookahead).map_err(anyhow::Error::msg)?;
    let ghost_lru = vino_cache::victim_replayed(&recording, LRU_WAT.as_bytes()).map_err(anyhow::Error::msg)?;
    let ghost_ns = ghost_started.elapsed().as_nanos() as u64 / 2;
    let replay = ReplayRun {
        invocations: recording.invocations,
        bytes,
        bytes_per_invocation: bytes as f64 / recording.invocations.max(1) as f64,
        image_bytes,
        events: recording.events.len(),
        control_calls: replayed.control_calls,
        replay_ns: replayed.elapsed_ns,
        rate: replayed.rate,
        exact: replayed.exact(),
        matched: replayed.matched,
        truncated: recording.truncated,
        accesses: ghost_lru.accesses,
        ghost_lookahead_misses: ghost_lookahead.would_be_misses,
        ghost_lru_misses: ghost_lru.would_be_misses,
        ghost_ns,
    };
    let mut timed = timed;
    timed[1].would_be_misses = Some(tried.would_be_misses);
    let (lru, shadowed, bound, recorded) = (&timed[0], &timed[1], &timed[2], &timed[3]);
    Ok(TryReplayReport {
        tuples,
        cache_frames: frames,
        selected: selection.len(),
        lookahead: n,
        rounds,
        would_be_error: (tried.would_be_misses as f64 - bound.misses as f64) / bound.misses.max(1) as f64,
        shadow_time_ratio: shadowed.wall_ns as f64 / lru.wall_ns.max(1) as f64,
        record_time_ratio: recorded.wall_ns as f64 / bound.wall_ns.max(1) as f64,
        ghost_error: (replay.ghost_lookahead_misses as f64 - bound.misses as f64) / bound.misses.max(1) as f64,
        ghost_lru_error: (replay.ghost_lru_misses as f64 - lru.misses as f64) / lru.misses.max(1) as f64,
        runs: timed.clone(),
        tried,
        replay,
    })
}

impl TryReplayReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "E4's query with the look-ahead graft tried in shadow beside LRU, then bound",
            &["run", "misses", "would-be misses", "time (median)"],
        );
        for r in &self.runs {
            let would_be = r.would_be_misses.map_or("–".into(), |n| n.to_string());
            t.row([r.what.clone(), r.misses.to_string(), would_be, fmt_ns(r.wall_ns as f64)]);
        }
        t.note(format!(
            "{} tuples, {} selected, a cache of {} frames, look-ahead {} records, medians of {} rounds on the plain \
             device; would-be misses {:+.2}% of the misses when bound (goal: within 2%); the query with the shadow \
             took {} of LRU's time (goal: at most 1.10); the candidate decided {} evictions at {} each, off the \
             live path, {} accesses dropped",
            self.tuples,
            self.selected,
            self.cache_frames,
            self.lookahead,
            self.rounds,
            100.0 * self.would_be_error,
            fmt_ratio(self.shadow_time_ratio),
            self.tried.shadow.decisions,
            fmt_ns(self.tried.shadow.candidate_ns_per_decision),
            self.tried.shadow.queue_drops
        ));
        let r = &self.replay;
        let mut u = Table::new(
            "The bound look-ahead graft recorded over the whole query and replayed offline",
            &[
                "invocations",
                "bytes",
                "bytes per invocation",
                "of which the image",
                "replayed per second",
                "every answer again",
            ],
        );
        u.row([
            r.invocations.to_string(),
            r.bytes.to_string(),
            format!("{:.1}", r.bytes_per_invocation),
            r.image_bytes.to_string(),
            format!("{:.0}", r.rate),
            if r.exact {
                "yes".into()
            } else {
                format!("no ({} of {})", r.matched, r.invocations)
            },
        ]);
        u.note(format!(
            "{} events, {} control calls; the query recorded took {} of its time unrecorded",
            r.events,
            r.control_calls,
            fmt_ratio(self.record_time_ratio)
        ));
        let mut g = Table::new(
            "Modules replayed on the ghost of the recording's page accesses, against the misses measured live",
            &["module", "would-be misses (replay)", "misses (live)", "difference"],
        );
        let (lru, bound) = (&self.runs[0], &self.runs[2]);
        g.row([
            "look-ahead (the recorded one)".to_string(),
            r.ghost_lookahead_misses.to_string(),
            format!("{} (bound)", bound.misses),
            format!("{:+.2}%", 100.0 * self.ghost_error),
        ]);
        g.row([
            "LRU".to_string(),
            r.ghost_lru_misses.to_string(),
            format!("{} (LRU)", lru.misses),
            format!("{:+.2}%", 100.0 * self.ghost_lru_error),
        ]);
        g.note(format!(
            "{} accesses recorded; each replay took {} offline (under fuel, the same answer every run); the \
             LRU module's replay follows the accesses the look-ahead graft's run made, with its allocation",
            r.accesses,
            fmt_ns(r.ghost_ns as f64)
        ));
        vec![t, u, g]
    }

    pub fn plot(&self, path: &Path) -> Result<()> {
        let (lru, shadowed, bound) = (&self.runs[0], &self.runs[1], &self.runs[2]);
        let groups = vec![
            (
                "misses".to_string(),
                vec![
                    ("LRU".to_string(), lru.misses as f64),
                    ("would-be (shadow)".to_string(), self.tried.would_be_misses as f64),
                    ("look-ahead bound".to_string(), bound.misses as f64),
                ],
            ),
            (
                "time, ms".to_string(),
                vec![
                    ("LRU".to_string(), lru.wall_ns as f64 / 1e6),
                    ("LRU + shadow".to_string(), shadowed.wall_ns as f64 / 1e6),
                    ("look-ahead bound".to_string(), bound.wall_ns as f64 / 1e6),
                ],
            ),
        ];
        bar_chart_with(
            path,
            "E4: the look-ahead graft tried in shadow, then bound",
            "",
            &groups,
            &ChartOptions {
                value_labels: true,
                log_scale: Some(false),
                ..ChartOptions::default()
            },
        )
    }
}
