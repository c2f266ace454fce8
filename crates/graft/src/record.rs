//! Recording a bound graft's inputs, so that its run can be replayed offline ([`crate::replay`]).
//!
//! A graft's calls are deterministic given what reaches it from outside its sandbox: under fuel
//! the same module, started from the same memory, given the same arguments and the same answers
//! from the kernel functions it calls, computes the same decisions and traps at the same call.
//! A recording keeps exactly that and no more:
//!
//! * the graft's memory and mutable globals when recording starts (the [`Image`]);
//! * for every invocation, the entry call's parameters and the argument area's bytes as the
//!   kernel wrote them (a paged call's every page too), every graft-callable function it called
//!   with its arguments and answer, and what the call returned: its results, what it changed
//!   in the argument area (the rest of its answer, for graftpoints that answer there), and
//!   whether the invocation failed;
//! * what the owner did to the graft between calls: writes into its memory, control calls;
//! * outcomes that are not the graft's deterministic doing (an abort for a lock deadline or a
//!   lost conflict, a nested call undone because its enclosing transaction aborted) as events
//!   replay imposes rather than computes;
//! * where the graftpoint's ghost model needs them ([`Observations`]), what the kernel saw that
//!   the graft's calls do not carry: for `vas.pick_victim`, the process's page accesses, in
//!   order with the rest, so that another module can be replayed on a ghost of the pages.
//!
//! Events are encoded as they happen (postcard, integers as varints) into a buffer that has a
//! limit and is charged to the graft's owner as graft memory: a recording that reaches its limit
//! stops (the kernel never waits for it) and says so. The argument area is kept as the changes
//! from the area of the call before, so a graftpoint whose arguments repeat costs little.
//!
//! Observations are made on the kernel's own paths, which must not wait for the graft's
//! instance (a cache miss evicts on the same thread), so they go to a tape of their own beside
//! the graft's: each is stamped with the number of the graft's events before it, the two share
//! one limit and one charge, and the finished recording has them merged in order.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use vino_account::{Account, Growing, Resource};

/// The version of the recording format; a recording of another version is refused.
pub const VERSION: u32 = 3;
/// The bytes a recording may hold unless its owner asks for fewer; what a process asks for more
/// is cut to this (a recording must fit one answer of the daemon's protocol, and is charged to
/// the graft's owner as graft memory besides).
pub const DEFAULT_LIMIT: usize = 16 << 20;
/// The largest memory a recording's graft may have, for replay (the runtime's cap is 16 MiB).
pub const REPLAY_MEMORY_MAX: u64 = 1 << 30;
/// The largest budget a recorded call may have, in fuel units (about ten seconds of work).
pub const REPLAY_UNITS_MAX: u64 = 4_000_000_000;
/// Memory is kept in chunks of this size; chunks of zeros are left out.
const CHUNK: usize = 4096;
/// A run of equal bytes shorter than this does not split a changed range of the area.
const MERGE_GAP: usize = 8;

/// The state of a graft's sandbox: its memory, as the chunks that are not zero, and its mutable
/// globals (their bits, by index).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Size of the memory in bytes.
    pub memory_bytes: u64,
    pub chunks: Vec<(u32, Vec<u8>)>,
    pub globals: Vec<(u32, u128)>,
}

impl Image {
    /// The image of `memory` and `globals`.
    pub fn of(memory: &[u8], globals: Vec<(u32, u128)>) -> Image {
        let chunks = memory
            .chunks(CHUNK)
            .enumerate()
            .filter(|(_, c)| c.iter().any(|&b| b != 0))
            .map(|(i, c)| ((i * CHUNK) as u32, c.to_vec()))
            .collect();
        Image {
            memory_bytes: memory.len() as u64,
            chunks,
            globals,
        }
    }

    /// The `len` bytes at `at` of the memory the image holds.
    pub fn slice(&self, at: u32, len: u32) -> Vec<u8> {
        let (at, end) = (u64::from(at), u64::from(at) + u64::from(len));
        let mut out = vec![0u8; len as usize];
        for (start, bytes) in &self.chunks {
            let (s, e) = (u64::from(*start), u64::from(*start) + bytes.len() as u64);
            let (from, to) = (s.max(at), e.min(end));
            if from < to {
                out[(from - at) as usize..(to - at) as usize]
                    .copy_from_slice(&bytes[(from - s) as usize..(to - s) as usize]);
            }
        }
        out
    }

    /// Writes the image over `memory` (zeros where it kept no chunk). False if it does not fit.
    pub fn restore(&self, memory: &mut [u8]) -> bool {
        if memory.len() < self.memory_bytes as usize {
            return false;
        }
        memory.fill(0);
        for (at, bytes) in &self.chunks {
            let at = *at as usize;
            match memory.get_mut(at..at + bytes.len()) {
                Some(to) => to.copy_from_slice(bytes),
                None => return false,
            }
        }
        true
    }
}

/// Ranges of bytes that changed, as (offset, new bytes).
pub type Changes = Vec<(u32, Vec<u8>)>;

/// Why a recorded invocation (or control call) failed, as far as replay must know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It returned and the kernel took its answer.
    Decided,
    /// It failed by its own doing (a trap, its budget, memory, a refused call, an answer out of
    /// range): replay must fail the same way. The text is the failure as the kernel told it.
    Failed(String),
    /// It was stopped for a reason outside the graft (a lock deadline, a lost conflict): replay
    /// aborts it where the recording ends, whatever the graft does.
    Imposed(String),
}

/// One thing that happened to a recorded graft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// An invocation begins: its entry call's parameters, and the argument area's changes from
    /// the last area the kernel wrote.
    Invoke { params: Vec<i64>, area: Changes },
    /// The next page of a paged invocation (its parameters and area, likewise), after the
    /// entry call before it returned `asked` (its request for more).
    Page {
        asked: Vec<i64>,
        params: Vec<i64>,
        area: Changes,
    },
    /// The graft called a graft-callable function: its index in [`Recording::functions`], its
    /// arguments, and its answer (`Err`: it refused, and the graft's call aborted).
    Call {
        function: u16,
        args: Vec<i64>,
        answer: Result<Option<i64>, String>,
    },
    /// The invocation ended: the last entry call's results (none if it failed before
    /// returning), what it changed in the argument area the kernel wrote for that call, and
    /// how it ended.
    Return {
        results: Vec<i64>,
        left: Changes,
        outcome: Outcome,
    },
    /// The owner wrote into the graft's memory.
    Write { offset: u32, bytes: Vec<u8> },
    /// The owner called a control function.
    Control { name: String, args: Vec<i64> },
    /// The control call ended.
    ControlReturn { result: Option<i64>, outcome: Outcome },
    /// The graft's state was set from outside (a committed nested call undone because the
    /// transaction around it aborted): memory and globals become exactly this.
    Reset(Image),
    /// The process whose `vas.pick_victim` is recorded used a page: its identity, whether the
    /// cache held it, and how many pages the process had resident then (its allocation). Replay
    /// of the recorded module passes over these; another module's runs them through the ghost.
    Access { page: u64, hit: bool, resident: u32 },
}

/// What a recording is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub version: u32,
    /// The slot's name (`vas.pick_victim/12`).
    pub slot: String,
    /// The graftpoint (`vas.pick_victim`).
    pub point: String,
    /// The entry point's export name.
    pub entry: String,
    /// SHA-256 of the recorded module, hex.
    pub module_sha256: String,
    /// Where the argument area is in the recorded graft's memory, and its size.
    pub arg_area: Option<(u32, u32)>,
    /// The budget of one invocation, of one more page, of one control call, in fuel units.
    pub invocation_units: u64,
    pub page_units: u64,
    pub control_units: u64,
    /// The recorded kernel ran grafts under fuel: budgets are reproduced exactly.
    pub fuel: bool,
    pub memory_cap: u64,
    /// The graft-callable functions calls name, by index.
    pub functions: Vec<String>,
    /// The recorded module's exported data symbols and their addresses, by address: an owner's
    /// write inside one is replayed into the same symbol of another module.
    pub symbols: Vec<(String, u32)>,
}

/// A finished recording: its header, the graft's state when it began, its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    pub header: Header,
    pub image: Image,
    pub events: Vec<Event>,
    /// Invocations recorded.
    pub invocations: u64,
    /// The recording reached its limit and stopped there: events after it are missing.
    pub truncated: bool,
    /// Why the recording ended other than by its owner's asking (the graft was unloaded).
    pub ended: Option<String>,
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not a VINO graft recording: {0}")]
    Malformed(String),
    #[error("recording format version {0}; this VINO reads version {VERSION}")]
    Version(u32),
}

impl Recording {
    /// The recording as bytes (for a file).
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("a recording always encodes")
    }

    /// Reads a recording written by [`Recording::to_bytes`], and checks that replaying it is
    /// bounded (a recording file may come from anyone).
    pub fn from_bytes(bytes: &[u8]) -> Result<Recording, FormatError> {
        let r: Recording = postcard::from_bytes(bytes).map_err(|e| {
            // The version leads: a recording of another version is named as such rather than
            // found malformed (a version far from this one is taken for what it likely is).
            match postcard::take_from_bytes::<u32>(bytes) {
                Ok((v, _)) if v != VERSION && (1..=VERSION + 16).contains(&v) => FormatError::Version(v),
                _ => FormatError::Malformed(e.to_string()),
            }
        })?;
        if r.header.version != VERSION {
            return Err(FormatError::Version(r.header.version));
        }
        r.check().map_err(FormatError::Malformed)?;
        Ok(r)
    }

    /// What replay relies on: a memory no larger than [`REPLAY_MEMORY_MAX`], every chunk and
    /// the argument area inside it, budgets within [`REPLAY_UNITS_MAX`].
    pub fn check(&self) -> Result<(), String> {
        let h = &self.header;
        let cap = h.memory_cap.min(REPLAY_MEMORY_MAX);
        if self.image.memory_bytes > cap {
            return Err(format!("a memory of {} bytes (at most {cap})", self.image.memory_bytes));
        }
        let inside = |at: u32, len: usize| u64::from(at) + len as u64 <= cap;
        if let Some((at, len)) = h.arg_area
            && !inside(at, len as usize)
        {
            return Err(format!("an argument area of {len} bytes at {at}"));
        }
        if let Some((at, _)) = self.image.chunks.iter().find(|(at, c)| !inside(*at, c.len())) {
            return Err(format!("a chunk of the image at {at}, outside its memory"));
        }
        for units in [h.invocation_units, h.page_units, h.control_units] {
            if units > REPLAY_UNITS_MAX {
                return Err(format!("a budget of {units} fuel units (at most {REPLAY_UNITS_MAX})"));
            }
        }
        Ok(())
    }
}

/// What a recording may hold, shared by its graft's tape and its observations: one limit, one
/// charge to the owner, and the count of the graft's events (the place of an observation).
struct Budget {
    limit: usize,
    used: AtomicUsize,
    full: AtomicBool,
    /// The graft's events kept so far.
    events: AtomicU64,
    /// The charge, taken when the recording is finished, and the bytes charged so far: it grows
    /// in steps, so an event takes the lock only when it passes a step (never without a charge).
    charge: Mutex<Option<Growing>>,
    charged: AtomicUsize,
}

/// Steps in which a recording's charge grows.
const CHARGE_STEP: usize = 64 << 10;

impl Budget {
    /// Takes `bytes` more; false (and full from now on) if the limit or the owner's quota is
    /// reached.
    fn take(&self, bytes: usize) -> bool {
        if self.full.load(Ordering::Relaxed) {
            return false;
        }
        let used = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let mut fits = used <= self.limit;
        if fits && used > self.charged.load(Ordering::Relaxed) {
            let mut growing = self.charge.lock();
            let charged = self.charged.load(Ordering::Relaxed);
            if used > charged
                && let Some(g) = growing.as_mut()
            {
                let step = (used - charged).div_ceil(CHARGE_STEP) * CHARGE_STEP;
                fits = g.grow(step as u64).is_ok();
                if fits {
                    self.charged.store(charged + step, Ordering::Relaxed);
                }
            }
        }
        if !fits {
            self.full.store(true, Ordering::Relaxed);
        }
        fits
    }
}

/// What the kernel saw for a recording besides its graft's calls ([`Event::Access`]), kept on
/// the kernel's path without the graft's instance: the kernel holds it while the recording runs
/// and offers each observation; the recording merges them when it is finished.
pub struct Observations {
    budget: Arc<Budget>,
    /// (graft events before it, the event), postcard-encoded.
    tape: Mutex<Vec<u8>>,
    closed: AtomicBool,
}

impl Observations {
    /// Keeps an access of the process whose `vas.pick_victim` is recorded. False once the
    /// recording is finished or full: the kernel then lets it go.
    pub fn access(&self, page: u64, hit: bool, resident: usize) -> bool {
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let resident = u32::try_from(resident).unwrap_or(u32::MAX);
        let mut tape = self.tape.lock();
        let before = tape.len();
        let at = self.budget.events.load(Ordering::Relaxed);
        let event = Event::Access { page, hit, resident };
        let encoded = postcard::to_extend(&(at, event), std::mem::take(&mut *tape)).map(|v| *tape = v);
        if encoded.is_err() || !self.budget.take(tape.len() - before) {
            tape.truncate(before);
            return false;
        }
        true
    }

    fn close(&self) -> Vec<u8> {
        self.closed.store(true, Ordering::Relaxed);
        std::mem::take(&mut *self.tape.lock())
    }

    /// Whether the recording no longer takes observations.
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

/// A recording in progress, kept in the graft's store: events are encoded as they happen.
pub(crate) struct Tape {
    header: Header,
    image: Image,
    /// The events so far, each postcard-encoded.
    events: Vec<u8>,
    /// The argument area as the kernel last wrote it (the base of the next call's changes).
    area: Vec<u8>,
    invocations: u64,
    truncated: bool,
    budget: Arc<Budget>,
    /// What the kernel observes for it, if the graftpoint's ghost needs that.
    observations: Option<Arc<Observations>>,
}

impl Tape {
    pub(crate) fn new(
        header: Header,
        image: Image,
        area: Vec<u8>,
        limit: usize,
        account: Option<&std::sync::Arc<Account>>,
    ) -> Tape {
        let budget = Budget {
            limit,
            used: AtomicUsize::new(0),
            full: AtomicBool::new(false),
            events: AtomicU64::new(0),
            charge: Mutex::new(account.map(|a| Growing::new(a.clone(), Resource::GraftMemory))),
            charged: AtomicUsize::new(if account.is_some() { 0 } else { usize::MAX }),
        };
        Tape {
            header,
            image,
            events: Vec::new(),
            area,
            invocations: 0,
            truncated: false,
            budget: Arc::new(budget),
            observations: None,
        }
    }

    /// Observations the kernel is to make for this recording, under its limit and charge.
    pub(crate) fn observe(&mut self) -> Arc<Observations> {
        let observations = Arc::new(Observations {
            budget: self.budget.clone(),
            tape: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        });
        self.observations = Some(observations.clone());
        observations
    }

    /// Adds `event`; false if the recording is (now) full and it was not kept.
    fn push(&mut self, event: &Event) -> bool {
        if self.truncated {
            return false;
        }
        let before = self.events.len();
        let fits = postcard::to_extend(event, std::mem::take(&mut self.events)).map(|v| self.events = v);
        if fits.is_err() || !self.budget.take(self.events.len() - before) {
            // The event that did not fit goes, and so does everything after it: a recording
            // with a gap could not be replayed.
            self.events.truncate(before);
            self.truncated = true;
        } else {
            self.budget.events.fetch_add(1, Ordering::Relaxed);
        }
        !self.truncated
    }

    /// An invocation begins with `params` and the argument area `area`; or its next page, if
    /// `asked` holds the results of the call that asked for it.
    pub(crate) fn enter(&mut self, asked: Option<Vec<i64>>, params: Vec<i64>, area: &[u8]) {
        let area = changes(&mut self.area, area);
        match asked {
            None => {
                let kept = self.push(&Event::Invoke { params, area });
                self.invocations += u64::from(kept);
            }
            Some(asked) => {
                self.push(&Event::Page { asked, params, area });
            }
        }
    }

    pub(crate) fn call(&mut self, name: &str, args: Vec<i64>, answer: Result<Option<i64>, String>) {
        let function = match self.header.functions.iter().position(|f| f == name) {
            Some(i) => i,
            None => {
                self.header.functions.push(name.to_string());
                self.header.functions.len() - 1
            }
        };
        self.push(&Event::Call {
            function: function as u16,
            args,
            answer,
        });
    }

    pub(crate) fn ret(&mut self, results: Vec<i64>, area: &[u8], outcome: Outcome) {
        let left = diff(&self.area, area);
        self.push(&Event::Return { results, left, outcome });
    }

    /// The recording reached its limit: nothing more is kept.
    pub(crate) fn full(&self) -> bool {
        self.truncated || self.budget.full.load(Ordering::Relaxed)
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.push(&event);
    }

    /// The recording so far, its observations merged in; its charge is given back.
    pub(crate) fn finish(mut self) -> Recording {
        let observed = self.end();
        let mut graft = Vec::new();
        let mut rest = &self.events[..];
        while !rest.is_empty() {
            let (e, tail) = postcard::take_from_bytes::<Event>(rest).expect("the tape holds whole events");
            graft.push(e);
            rest = tail;
        }
        let truncated = self.truncated || self.budget.full.load(Ordering::Relaxed);
        let mut invocations = self.invocations;
        if truncated {
            // An invocation or control call cut short cannot be replayed: it goes.
            let whole = graft
                .iter()
                .rposition(|e| {
                    !matches!(
                        e,
                        Event::Invoke { .. } | Event::Page { .. } | Event::Call { .. } | Event::Control { .. }
                    )
                })
                .map_or(0, |i| i + 1);
            invocations -= graft[whole..]
                .iter()
                .filter(|e| matches!(e, Event::Invoke { .. }))
                .count() as u64;
            graft.truncate(whole);
        }
        // Each observation goes after the graft's events it was stamped with; those after the
        // cut go with it. Both tapes hold what came before the recording filled, in order.
        let cut = graft.len() as u64;
        let mut events = Vec::with_capacity(graft.len());
        let mut graft = graft.into_iter();
        let mut placed = 0u64;
        let mut seen = &observed[..];
        while let Ok(((at, e), tail)) = postcard::take_from_bytes::<(u64, Event)>(seen) {
            seen = tail;
            if at > cut {
                break;
            }
            events.extend(graft.by_ref().take((at - placed) as usize));
            placed = at;
            events.push(e);
        }
        events.extend(graft);
        Recording {
            header: std::mem::take(&mut self.header),
            image: std::mem::take(&mut self.image),
            events,
            invocations,
            truncated,
            ended: None,
        }
    }

    /// Takes no more observations (the graft was unbound; the recording waits to be taken).
    pub(crate) fn stop_observing(&self) {
        if let Some(o) = &self.observations {
            o.closed.store(true, Ordering::Relaxed);
        }
    }

    /// Ends the observations (the kernel lets them go at its next one) and gives back the
    /// charge: what was observed.
    fn end(&mut self) -> Vec<u8> {
        self.budget.charge.lock().take();
        self.observations.take().map(|o| o.close()).unwrap_or_default()
    }
}

impl Drop for Tape {
    fn drop(&mut self) {
        self.end();
    }
}

/// The ranges where `now` differs from `base`, merged across short equal runs; `base` becomes
/// `now`.
pub(crate) fn changes(base: &mut Vec<u8>, now: &[u8]) -> Changes {
    if base.len() != now.len() {
        *base = vec![0; now.len()];
    }
    let out = diff(base, now);
    base.copy_from_slice(now);
    out
}

/// The ranges where `now` differs from `base` (zeros where `base` is shorter), merged across
/// short equal runs.
pub fn diff(base: &[u8], now: &[u8]) -> Changes {
    let at = |i: usize| base.get(i).copied().unwrap_or(0);
    let mut out: Changes = Vec::new();
    let mut i = 0;
    while i < now.len() {
        if at(i) == now[i] {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        let mut j = end;
        while j < now.len() && j < end + MERGE_GAP {
            if at(j) != now[j] {
                end = j + 1;
            }
            j += 1;
        }
        out.push((start as u32, now[start..end].to_vec()));
        i = end;
    }
    out
}

/// Applies `changes` to `area`. False if one falls outside it.
pub fn apply(area: &mut [u8], changes: &Changes) -> bool {
    changes.iter().all(|(at, bytes)| {
        let at = *at as usize;
        match area.get_mut(at..at + bytes.len()) {
            Some(to) => {
                to.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_rebuild_the_area_and_skip_what_is_equal() {
        let mut base = vec![0u8; 64];
        let mut a = vec![0u8; 64];
        a[3] = 1;
        a[5] = 2;
        a[40] = 9;
        let c = changes(&mut base, &a);
        assert_eq!(c, vec![(3, vec![1, 0, 2]), (40, vec![9])]);
        assert_eq!(base, a);
        assert!(changes(&mut base, &a).is_empty());
        let mut rebuilt = vec![0u8; 64];
        assert!(apply(&mut rebuilt, &c));
        assert_eq!(rebuilt, a);
    }

    #[test]
    fn an_image_keeps_only_chunks_that_are_not_zero() {
        let mut memory = vec![0u8; 5 * CHUNK];
        memory[CHUNK + 7] = 3;
        let image = Image::of(&memory, vec![(0, 42)]);
        assert_eq!(image.chunks.len(), 1);
        let mut back = vec![1u8; 5 * CHUNK];
        assert!(image.restore(&mut back));
        assert_eq!(back, memory);
    }

    fn header() -> Header {
        Header {
            version: VERSION,
            slot: "t".into(),
            point: "t".into(),
            entry: "t".into(),
            invocation_units: 1,
            page_units: 1,
            control_units: 1,
            fuel: true,
            ..Header::default()
        }
    }

    #[test]
    fn a_tape_stops_whole_at_its_limit() {
        let mut tape = Tape::new(header(), Image::default(), Vec::new(), 100, None);
        for i in 0..100 {
            tape.enter(None, vec![i], &[]);
            tape.ret(vec![i], &[], Outcome::Decided);
        }
        let r = tape.finish();
        assert!(r.truncated);
        // Whole events only, and the count matches the invocations whose start was kept.
        let invokes = r.events.iter().filter(|e| matches!(e, Event::Invoke { .. })).count() as u64;
        assert_eq!(invokes, r.invocations);
        let bytes = r.to_bytes();
        assert_eq!(Recording::from_bytes(&bytes).unwrap(), r);
    }

    fn access(page: u64) -> Event {
        Event::Access {
            page,
            hit: false,
            resident: 1,
        }
    }

    #[test]
    fn observations_are_merged_where_they_were_made_and_end_with_the_recording() {
        let mut tape = Tape::new(header(), Image::default(), Vec::new(), 1 << 20, None);
        let seen = tape.observe();
        assert!(seen.access(1, false, 1));
        tape.enter(None, vec![0], &[]);
        // Made while the invocation ran (on another thread): it stays inside it.
        assert!(seen.access(2, false, 1));
        tape.ret(vec![0], &[], Outcome::Decided);
        assert!(seen.access(3, false, 1));
        let r = tape.finish();
        assert!(
            seen.closed() && !seen.access(4, false, 1),
            "the finished recording takes no more"
        );
        assert!(matches!(
            &r.events[..],
            [a, Event::Invoke { .. }, b, Event::Return { .. }, c] if *a == access(1) && *b == access(2) && *c == access(3)
        ));
        assert_eq!(r.invocations, 1);
        assert!(!r.truncated);
    }

    #[test]
    fn observations_share_the_limit_and_the_charge_and_are_cut_with_the_graft_s_events() {
        let account = Account::standalone("owner", vino_account::Table::UNLIMITED);
        let mut tape = Tape::new(header(), Image::default(), Vec::new(), 200, Some(&account));
        let seen = tape.observe();
        tape.enter(None, vec![0], &[]);
        tape.ret(vec![0], &[], Outcome::Decided);
        assert!(account.used(Resource::GraftMemory) > 0, "charged as it grows");
        tape.enter(None, vec![1], &[]);
        // Observations fill the recording while the second invocation runs.
        let mut kept = 0;
        while seen.access(kept, false, 1) {
            kept += 1;
        }
        assert!(kept > 0 && !seen.access(0, false, 1));
        tape.ret(vec![1], &[], Outcome::Decided);
        let r = tape.finish();
        assert_eq!(account.used(Resource::GraftMemory), 0, "given back with the recording");
        assert!(r.truncated);
        // The cut invocation goes, and the observations made inside it with it.
        assert_eq!(r.invocations, 1);
        assert!(
            matches!(&r.events[..], [Event::Invoke { .. }, Event::Return { .. }]),
            "{:?}",
            r.events
        );
        // A recording dropped unfinished (its starter went) ends its observations too.
        let mut tape = Tape::new(header(), Image::default(), Vec::new(), 1 << 20, Some(&account));
        let seen = tape.observe();
        assert!(seen.access(1, false, 1));
        assert!(account.used(Resource::GraftMemory) > 0);
        drop(tape);
        assert!(!seen.access(2, false, 1));
        assert_eq!(account.used(Resource::GraftMemory), 0);
    }

    #[test]
    fn a_recording_of_another_version_is_named_as_such() {
        let mut r = Tape::new(header(), Image::default(), Vec::new(), 1 << 20, None).finish();
        r.header.version = VERSION - 1;
        assert!(matches!(Recording::from_bytes(&r.to_bytes()), Err(FormatError::Version(v)) if v == VERSION - 1));
    }
}
