//! A timing model of a disk of the 1990s, wrapped around any device.
//!
//! The model keeps the head's position and the platter's angle and charges each request what
//! such a disk would take to serve it, one request at a time:
//!
//! * **command overhead**, per request;
//! * **seek**: zero on the same cylinder, a head switch to another track of the same cylinder,
//!   otherwise `a + b·√d` for short seeks of `d` cylinders and a straight line up to the full
//!   stroke for long ones (the shape Ruemmler and Wilkes measured on disks of the period). `b`
//!   is fitted so that the average over uniformly random pairs of cylinders is the average seek
//!   the parameters give; `a` makes a one-cylinder seek the track-to-track time;
//! * **rotation**: the platter turns continuously on the model's clock, so the wait for the
//!   first sector depends on when the head arrives; consecutive tracks are skewed by the
//!   head-switch (or track-to-track) time, so a long transfer crosses tracks without losing a
//!   revolution;
//! * **transfer** at the media rate (sectors per track × revolutions per second), overlapped
//!   with the bus, whichever is slower;
//! * a **track buffer** with read-ahead: after a read the drive goes on reading the following
//!   sectors, across tracks, into its buffer of `track_buffer_kb`. A later read of sectors it
//!   holds (the ones just read and up to a buffer's worth behind the host's last request, or
//!   ahead of it as far as the buffer reaches) costs the overhead and the bus transfer, or waits
//!   until the head has passed them, with no seek and no rotational delay: reads of the track
//!   just read are fast, and a host reading sequentially streams at the media rate. The drive
//!   pauses read-ahead when the buffer is full and resumes as the host reads, which the model
//!   takes as costless (the buffer holds more than a revolution). Any other request ends the
//!   read-ahead where the head then is; a write discards the buffer. Writes are not cached
//!   (write-through, as most SCSI disks then shipped).
//!
//! The clock is either real time divided by a scale, and the model sleeps until each request's
//! modeled completion ([`Timing::Sleep`]), or purely virtual: requests run back to back and the
//! clock only advances by modeled time ([`Timing::Virtual`]; deterministic, for tests and
//! simulations).

use crate::{BLOCK_SIZE, BlockDevice, DeviceCounters, IoOp, check_transfer};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::time::{Duration, Instant};

/// The parameters of a modeled disk. Every field has the [`DiskParams::st32272n`] value by
/// default, so a configuration file need only name what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskParams {
    pub name: String,
    /// Spindle speed.
    pub rpm: f64,
    /// Bytes per sector; must divide [`BLOCK_SIZE`].
    pub sector_bytes: u32,
    pub sectors_per_track: u32,
    /// Recording surfaces: tracks per cylinder.
    pub heads: u32,
    pub cylinders: u32,
    /// Seek of one cylinder.
    pub track_to_track_ms: f64,
    /// Average seek over uniformly random pairs of cylinders.
    pub average_seek_ms: f64,
    /// Seek across all cylinders.
    pub full_stroke_ms: f64,
    /// Where short seeks (`a + b·√d`) end and long (linear) ones begin, as a fraction of the
    /// cylinders.
    pub short_seek_fraction: f64,
    /// Switching to another head of the same cylinder.
    pub head_switch_ms: f64,
    /// Controller and drive overhead of each command.
    pub command_overhead_ms: f64,
    /// Host bus rate, in 10^6 bytes per second.
    pub bus_mb_per_s: f64,
    /// The drive's read-ahead buffer, in KiB (0: none, every read goes to the platter).
    pub track_buffer_kb: u32,
}

impl Default for DiskParams {
    fn default() -> Self {
        DiskParams::st32272n()
    }
}

impl DiskParams {
    /// The Seagate ST32272N of the thesis' test machine (Small 1998, section 7.2).
    ///
    /// From the thesis: 7200 RPM, 2.2 GB, 9.4 ms average access time (7.2); cylinders of about
    /// 360 KB (7.3.4); and its reading of the access time as a 4.2 ms half revolution plus a
    /// 5.2 ms average seek (7.3.4). Hence 368,640-byte (720-sector) cylinders and
    /// 2.2·10^9 / 368,640 = 5968 cylinders, and an average seek of 9.4 ms less half a
    /// revolution (4.17 ms): 5.23 ms.
    ///
    /// Assumed, as typical of 7200-RPM SCSI disks of 1995-96 (the thesis does not give them):
    /// the 720 sectors of a cylinder as 6 surfaces of 120 sectors (a media rate of 7.4 MB/s),
    /// a 1.0 ms track-to-track seek, an 11 ms full stroke (about twice the average), short
    /// seeks up to a fifth of the cylinders, a 0.8 ms head switch, 0.2 ms command overhead, a
    /// 10 MB/s Fast SCSI-2 bus, and a 256 KiB read-ahead buffer.
    pub fn st32272n() -> DiskParams {
        let rev_ms = 60_000.0 / 7200.0;
        DiskParams {
            name: "ST32272N".into(),
            rpm: 7200.0,
            sector_bytes: 512,
            sectors_per_track: 120,
            heads: 6,
            cylinders: 5968,
            track_to_track_ms: 1.0,
            average_seek_ms: 9.4 - rev_ms / 2.0,
            full_stroke_ms: 11.0,
            short_seek_fraction: 0.2,
            head_switch_ms: 0.8,
            command_overhead_ms: 0.2,
            bus_mb_per_s: 10.0,
            track_buffer_kb: 256,
        }
    }

    /// A named preset: `"st32272n"` (any case).
    pub fn preset(name: &str) -> Option<DiskParams> {
        match name.to_ascii_lowercase().as_str() {
            "st32272n" => Some(DiskParams::st32272n()),
            _ => None,
        }
    }

    /// Parameters from TOML; missing fields keep the ST32272N values.
    pub fn from_toml(text: &str) -> Result<DiskParams, ModelError> {
        let p: DiskParams = toml::from_str(text).map_err(|e| ModelError::Parse(format!("TOML: {e}")))?;
        p.validate()?;
        Ok(p)
    }

    /// Parameters from JSON; missing fields keep the ST32272N values.
    pub fn from_json(text: &str) -> Result<DiskParams, ModelError> {
        let p: DiskParams = serde_json::from_str(text).map_err(|e| ModelError::Parse(format!("JSON: {e}")))?;
        p.validate()?;
        Ok(p)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("disk parameters serialize")
    }

    /// Time of one revolution.
    pub fn revolution_ms(&self) -> f64 {
        60_000.0 / self.rpm
    }

    /// Media rate in bytes per second.
    pub fn media_rate(&self) -> f64 {
        self.sectors_per_track as f64 * self.sector_bytes as f64 * self.rpm / 60.0
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.cylinders as u64 * self.heads as u64 * self.sectors_per_track as u64 * self.sector_bytes as u64
    }

    /// Checks the parameters make a disk.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |why: String| Err(ModelError::Invalid(format!("{}: {why}", self.name)));
        let positive = [
            ("rpm", self.rpm),
            ("track_to_track_ms", self.track_to_track_ms),
            ("average_seek_ms", self.average_seek_ms),
            ("full_stroke_ms", self.full_stroke_ms),
            ("bus_mb_per_s", self.bus_mb_per_s),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{field} must be positive (is {v})"));
            }
        }
        for (field, v) in [
            ("head_switch_ms", self.head_switch_ms),
            ("command_overhead_ms", self.command_overhead_ms),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("{field} must not be negative (is {v})"));
            }
        }
        if self.sector_bytes == 0 || !BLOCK_SIZE.is_multiple_of(self.sector_bytes as usize) {
            return bad(format!(
                "sector_bytes ({}) must divide the block size {BLOCK_SIZE}",
                self.sector_bytes
            ));
        }
        if self.sectors_per_track == 0 || self.heads == 0 || self.cylinders < 3 {
            return bad("needs sectors, heads and at least 3 cylinders".into());
        }
        if !(self.short_seek_fraction > 0.0 && self.short_seek_fraction < 1.0) {
            return bad(format!(
                "short_seek_fraction must be in (0, 1) (is {})",
                self.short_seek_fraction
            ));
        }
        if !(self.track_to_track_ms <= self.average_seek_ms && self.average_seek_ms <= self.full_stroke_ms) {
            return bad("seek times must grow: track_to_track_ms <= average_seek_ms <= full_stroke_ms".into());
        }
        let skew =
            self.head_switch_ms.max(self.track_to_track_ms) / self.revolution_ms() * self.sectors_per_track as f64;
        if skew.ceil() >= self.sectors_per_track as f64 {
            return bad("a head switch or track-to-track seek takes a whole revolution".into());
        }
        SeekCurve::fit(self).map(|_| ())
    }
}

/// Why a model could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// The parameters do not make a disk.
    Invalid(String),
    /// A configuration could not be read.
    Parse(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Invalid(why) => write!(f, "invalid disk model: {why}"),
            ModelError::Parse(why) => write!(f, "cannot read disk parameters: {why}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<ModelError> for io::Error {
    fn from(e: ModelError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
    }
}

/// Seek time against distance: `a + b·√d` up to `boundary` cylinders, then linear.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeekCurve {
    pub a_ns: f64,
    pub b_ns: f64,
    pub boundary: u64,
    /// Slope of the linear part, ns per cylinder.
    pub slope_ns: f64,
}

impl SeekCurve {
    /// Fits the curve to the parameters' track-to-track, average and full-stroke times.
    pub fn fit(p: &DiskParams) -> Result<SeekCurve, ModelError> {
        let n = p.cylinders as u64;
        let ms = 1e6;
        let boundary = ((p.cylinders as f64 * p.short_seek_fraction).round() as u64).clamp(1, n - 2);
        let (t1, full) = (p.track_to_track_ms * ms, p.full_stroke_ms * ms);
        let curve = |b: f64| {
            let a = t1 - b;
            let at_boundary = a + b * (boundary as f64).sqrt();
            SeekCurve {
                a_ns: a,
                b_ns: b,
                boundary,
                slope_ns: (full - at_boundary) / (n - 1 - boundary) as f64,
            }
        };
        // The average is linear in b: solve from two points.
        let (m0, m1) = (curve(0.0).average_ns(n), curve(1.0).average_ns(n));
        let b = (p.average_seek_ms * ms - m0) / (m1 - m0);
        let fitted = curve(b);
        if !(b >= 0.0 && b <= t1 && fitted.slope_ns >= 0.0) {
            return Err(ModelError::Invalid(format!(
                "{}: no seek curve of this shape has track-to-track {} ms, average {} ms and full stroke {} ms",
                p.name, p.track_to_track_ms, p.average_seek_ms, p.full_stroke_ms
            )));
        }
        Ok(fitted)
    }

    /// Seek time over `d` cylinders, in ns (zero for zero).
    pub fn time_ns(&self, d: u64) -> f64 {
        if d == 0 {
            0.0
        } else if d <= self.boundary {
            self.a_ns + self.b_ns * (d as f64).sqrt()
        } else {
            self.a_ns + self.b_ns * (self.boundary as f64).sqrt() + self.slope_ns * (d - self.boundary) as f64
        }
    }

    /// Average seek over uniformly random pairs of `n` cylinders.
    pub fn average_ns(&self, n: u64) -> f64 {
        let total: f64 = (1..n).map(|d| 2.0 * (n - d) as f64 * self.time_ns(d)).sum();
        total / (n as f64 * n as f64)
    }
}

/// The layout the model derived from its parameters and its device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    pub sector_bytes: u64,
    pub sectors_per_track: u64,
    pub heads: u64,
    /// The parameters' cylinders, or more if the device is larger than the modeled disk (the
    /// extra cylinders have the same layout, and the seek curve goes on linearly).
    pub cylinders: u64,
    /// Sectors by which each track's first sector lags the previous track's.
    pub track_skew: u64,
    pub revolution_ns: f64,
    pub sector_ns: f64,
}

impl Geometry {
    pub fn sectors_per_block(&self) -> u64 {
        BLOCK_SIZE as u64 / self.sector_bytes
    }

    pub fn capacity_blocks(&self) -> u64 {
        self.cylinders * self.heads * self.sectors_per_track / self.sectors_per_block()
    }

    /// Bytes per second of a long sequential transfer: the media rate less the track skew.
    pub fn sustained_rate(&self) -> f64 {
        let track_bytes = (self.sectors_per_track * self.sector_bytes) as f64;
        track_bytes / ((self.sectors_per_track + self.track_skew) as f64 * self.sector_ns) * 1e9
    }

    /// (cylinder, head, sector) of a block's first sector.
    pub fn locate(&self, block: u64) -> (u64, u64, u64) {
        let lba = block * self.sectors_per_block();
        let track = lba / self.sectors_per_track;
        (track / self.heads, track % self.heads, lba % self.sectors_per_track)
    }
}

/// How the model's clock runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Timing {
    /// Real time: the model's clock is the time since it was built divided by `scale`, and each
    /// request returns when its modeled completion comes (`scale` 1.0 is a real 1990s disk,
    /// 0.01 one a hundred times faster in every respect).
    Sleep { scale: f64 },
    /// Virtual time: nothing sleeps, requests run back to back, the clock advances by modeled
    /// service time only (and by [`DiskModel::advance`]).
    Virtual,
}

/// What the model counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelStats {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Requests that moved the arm to another cylinder.
    pub seeks: u64,
    /// Total arm travel, in cylinders.
    pub seek_cylinders: u64,
    pub head_switches: u64,
    pub track_buffer_hits: u64,
    pub overhead_ns: u64,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    /// Time transferring, including waiting for the read-ahead to reach a buffered sector.
    pub transfer_ns: u64,
    /// Modeled busy time: the sum of the above.
    pub service_ns: u64,
    /// The model's clock at the end of the last request.
    pub clock_ns: u64,
}

impl ModelStats {
    /// Average modeled service time per request.
    pub fn mean_service(&self) -> Duration {
        Duration::from_nanos(self.service_ns.checked_div(self.requests).unwrap_or(0))
    }
}

/// How the head moved to serve a request from the platter.
#[derive(Clone, Copy)]
enum Moved {
    Seek(u64),
    HeadSwitch,
    Stay,
}

/// A request served from the platter, as [`DiskModel::platter`] computes it.
struct Platter {
    charge: Charge,
    begin: f64,
    done: f64,
    moved: Moved,
}

/// The read-ahead stream the drive started with its last read that missed the buffer: the head
/// read `first` from `start_ns` on and went on sector after sector (skewing across tracks).
#[derive(Debug, Clone, Copy)]
struct Stream {
    first: u64,
    start_ns: f64,
    /// One past the last sector the host has been served from this stream.
    host_end: u64,
    /// When the stream was cut short (another request went to the platter), or infinity.
    stop_ns: f64,
}

struct State {
    /// Modeled time at which the disk is free.
    free_at_ns: f64,
    /// The sector under the head when no stream runs.
    head_lba: u64,
    stream: Option<Stream>,
    stats: ModelStats,
}

/// A device that takes as long as a modeled disk (see the module documentation).
pub struct DiskModel<D: BlockDevice> {
    inner: D,
    params: DiskParams,
    geometry: Geometry,
    seek: SeekCurve,
    timing: Timing,
    name: String,
    epoch: Instant,
    state: Mutex<State>,
    counters: DeviceCounters,
    /// The read-ahead buffer, in sectors.
    buffer_sectors: u64,
}

/// One request's modeled times, ns.
#[derive(Debug, Clone, Copy, Default)]
struct Charge {
    overhead: f64,
    seek: f64,
    rotation: f64,
    transfer: f64,
}

impl<D: BlockDevice> DiskModel<D> {
    pub fn new(inner: D, params: DiskParams, timing: Timing) -> Result<DiskModel<D>, ModelError> {
        params.validate()?;
        if let Timing::Sleep { scale } = timing
            && !(scale.is_finite() && scale > 0.0)
        {
            return Err(ModelError::Invalid(format!("time scale must be positive (is {scale})")));
        }
        let seek = SeekCurve::fit(&params)?;
        let revolution_ns = params.revolution_ms() * 1e6;
        let sector_ns = revolution_ns / params.sectors_per_track as f64;
        let spt = params.sectors_per_track as u64;
        let switch_ns = (params.head_switch_ms * 1e6).max(seek.time_ns(1));
        let sectors_per_block = BLOCK_SIZE as u64 / params.sector_bytes as u64;
        let per_cylinder = params.heads as u64 * spt;
        let needed = inner.block_count() * sectors_per_block;
        let geometry = Geometry {
            sector_bytes: params.sector_bytes as u64,
            sectors_per_track: spt,
            heads: params.heads as u64,
            cylinders: (params.cylinders as u64).max(needed.div_ceil(per_cylinder)),
            track_skew: (switch_ns / sector_ns).ceil() as u64,
            revolution_ns,
            sector_ns,
        };
        let name = format!("{} model of {}", params.name, inner.name());
        Ok(DiskModel {
            inner,
            buffer_sectors: params.track_buffer_kb as u64 * 1024 / params.sector_bytes as u64,
            params,
            geometry,
            seek,
            timing,
            name,
            epoch: Instant::now(),
            state: Mutex::new(State {
                free_at_ns: 0.0,
                head_lba: 0,
                stream: None,
                stats: ModelStats::default(),
            }),
            counters: DeviceCounters::new(),
        })
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn params(&self) -> &DiskParams {
        &self.params
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn seek_curve(&self) -> SeekCurve {
        self.seek
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    pub fn model_stats(&self) -> ModelStats {
        self.state.lock().stats
    }

    /// Modeled busy time so far.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.state.lock().stats.service_ns)
    }

    /// The model's clock now.
    pub fn clock(&self) -> Duration {
        let s = self.state.lock();
        Duration::from_nanos(self.now_ns(&s) as u64)
    }

    /// Lets modeled time pass with the disk idle (virtual timing; the platter keeps turning).
    /// Under [`Timing::Sleep`] real time does this by itself, and this does nothing.
    pub fn advance(&self, idle: Duration) {
        if self.timing == Timing::Virtual {
            self.state.lock().free_at_ns += idle.as_nanos() as f64;
        }
    }

    /// Runs a request through the model only: no data moves, nothing sleeps, but the head, the
    /// buffer, the clock and the counters advance as if it had been served. Returns its service
    /// time. Blocks may lie anywhere on the modeled disk, even past the device.
    pub fn simulate(&self, op: IoOp, first: u64, blocks: u64) -> Duration {
        let mut s = self.state.lock();
        let start = self.start_ns(&s);
        let done = self.serve(&mut s, op, first, blocks, start);
        Duration::from_nanos((done - start) as u64)
    }

    fn now_ns(&self, s: &State) -> f64 {
        match self.timing {
            Timing::Virtual => s.free_at_ns,
            Timing::Sleep { scale } => (self.epoch.elapsed().as_nanos() as f64 / scale).max(s.free_at_ns),
        }
    }

    fn start_ns(&self, s: &State) -> f64 {
        self.now_ns(s)
    }

    /// When a request that arrived at `arrived` (real time, before it waited for the model's
    /// lock) starts: as soon as it arrived and the drive was free. Under [`Timing::Sleep`] the
    /// time a queued request's thread takes to be woken and take the lock after the one before
    /// it completed is the host's, not the drive's: a drive starts its next queued command at
    /// once.
    fn start_after(&self, s: &State, arrived: Instant) -> f64 {
        match self.timing {
            Timing::Virtual => s.free_at_ns,
            Timing::Sleep { scale } => {
                (arrived.saturating_duration_since(self.epoch).as_nanos() as f64 / scale).max(s.free_at_ns)
            }
        }
    }

    /// Serves one request from `start`: updates the state and returns the modeled completion.
    fn serve(&self, s: &mut State, op: IoOp, first: u64, blocks: u64, start: f64) -> f64 {
        let g = &self.geometry;
        let mut c = Charge {
            overhead: self.params.command_overhead_ms * 1e6,
            ..Charge::default()
        };
        let bus_ns = |sectors: u64| (sectors * g.sector_bytes) as f64 / (self.params.bus_mb_per_s * 1e6) * 1e9;
        let done = match op {
            IoOp::Flush => start + c.overhead,
            IoOp::Read | IoOp::Write if blocks == 0 => start + c.overhead,
            IoOp::Read | IoOp::Write => {
                let lo = first * g.sectors_per_block();
                let sectors = blocks * g.sectors_per_block();
                let hi = lo + sectors - 1;
                let hit = match (op, s.stream) {
                    (IoOp::Read, Some(st)) => self.buffered(&st, lo, hi),
                    _ => None,
                };
                let from_buffer = hit.map(|ready| (start + c.overhead + bus_ns(sectors)).max(ready));
                // A read ahead of the stream waits for it, unless going to the platter (which
                // stops the stream) is sooner, as when the stream would first cross tracks.
                let platter = self.platter(s, lo, hi, start, c.overhead);
                match from_buffer {
                    Some(done) if done <= platter.done => {
                        s.stats.track_buffer_hits += 1;
                        c.transfer = done - start - c.overhead;
                        if let Some(st) = &mut s.stream {
                            st.host_end = st.host_end.max(hi + 1);
                        }
                        done
                    }
                    _ => {
                        if let Some(st) = &mut s.stream {
                            st.stop_ns = st.stop_ns.min(start);
                        }
                        match platter.moved {
                            Moved::Seek(d) => {
                                s.stats.seeks += 1;
                                s.stats.seek_cylinders += d;
                            }
                            Moved::HeadSwitch => s.stats.head_switches += 1,
                            Moved::Stay => {}
                        }
                        c = platter.charge;
                        s.head_lba = hi;
                        s.stream = (op == IoOp::Read && self.buffer_sectors > 0).then_some(Stream {
                            first: lo,
                            start_ns: platter.begin,
                            host_end: hi + 1,
                            stop_ns: f64::INFINITY,
                        });
                        platter.done
                    }
                }
            }
        };
        let st = &mut s.stats;
        st.requests += 1;
        match op {
            IoOp::Read => st.reads += 1,
            IoOp::Write => st.writes += 1,
            IoOp::Flush => st.flushes += 1,
        }
        st.overhead_ns += c.overhead as u64;
        st.seek_ns += c.seek as u64;
        st.rotation_ns += c.rotation as u64;
        st.transfer_ns += c.transfer as u64;
        st.service_ns += (done - start) as u64;
        st.clock_ns = done as u64;
        s.free_at_ns = done;
        done
    }

    /// Serving sectors `lo..=hi` from the platter, starting at `start` (the read-ahead stream,
    /// if any, stops then): the charge, when the media transfer begins and ends, and how the head
    /// moved. Changes nothing.
    fn platter(&self, s: &State, lo: u64, hi: u64, start: f64, overhead: f64) -> Platter {
        let g = &self.geometry;
        let mut c = Charge {
            overhead,
            ..Charge::default()
        };
        let head_lba = match &s.stream {
            Some(st) => self.stream_position(
                &Stream {
                    stop_ns: st.stop_ns.min(start),
                    ..*st
                },
                start,
            ),
            None => s.head_lba,
        };
        let sectors = hi - lo + 1;
        let spt = g.sectors_per_track;
        let (track0, s0) = (lo / spt, lo % spt);
        let track_last = hi / spt;
        let here = head_lba / spt;
        let (cyl, head) = (track0 / g.heads, track0 % g.heads);
        let (here_cyl, here_head) = (here / g.heads, here % g.heads);
        let moved = if cyl != here_cyl {
            let d = cyl.abs_diff(here_cyl);
            c.seek = self.seek.time_ns(d);
            Moved::Seek(d)
        } else if head != here_head {
            c.seek = self.params.head_switch_ms * 1e6;
            Moved::HeadSwitch
        } else {
            Moved::Stay
        };
        let arrive = start + c.overhead + c.seek;
        // Sector `s0` of track `track0` passes under the head at this angle (in sectors); the
        // platter's angle is the clock modulo a revolution.
        let target = ((track0 * g.track_skew + s0) % spt) as f64;
        let angle = (arrive % g.revolution_ns) / g.sector_ns;
        c.rotation = (target - angle).rem_euclid(spt as f64) * g.sector_ns;
        let begin = arrive + c.rotation;
        let media = (sectors + (track_last - track0) * g.track_skew) as f64 * g.sector_ns;
        let bus = (sectors * g.sector_bytes) as f64 / (self.params.bus_mb_per_s * 1e6) * 1e9;
        let done = (begin + media).max(begin + bus);
        c.transfer = done - begin;
        Platter {
            charge: c,
            begin,
            done,
            moved,
        }
    }

    /// When sector `x` (at or after the stream's first) has been read by the stream.
    fn stream_ready(&self, st: &Stream, x: u64) -> f64 {
        let g = &self.geometry;
        let crossings = x / g.sectors_per_track - st.first / g.sectors_per_track;
        st.start_ns + ((x - st.first + 1) + crossings * g.track_skew) as f64 * g.sector_ns
    }

    /// How far the stream may read: a buffer's worth past the host, and not past the disk.
    fn stream_limit(&self, st: &Stream) -> u64 {
        let g = &self.geometry;
        let end = g.cylinders * g.heads * g.sectors_per_track;
        (st.host_end + self.buffer_sectors).min(end)
    }

    /// If sectors `lo..=hi` are (or will be, as the read-ahead goes on) in the buffer: when the
    /// last of them is there.
    fn buffered(&self, st: &Stream, lo: u64, hi: u64) -> Option<f64> {
        let behind = st.host_end.saturating_sub(self.buffer_sectors);
        if lo < st.first || lo < behind || hi >= self.stream_limit(st) {
            return None;
        }
        let ready = self.stream_ready(st, hi);
        (ready <= st.stop_ns).then_some(ready)
    }

    /// The sector under the head at time `t` while (or after) the stream ran.
    fn stream_position(&self, st: &Stream, t: f64) -> u64 {
        let g = &self.geometry;
        let limit = self.stream_limit(st);
        let t = t.min(st.stop_ns);
        if t <= st.start_ns {
            return st.first;
        }
        // Read sectors up to `t`, a track at a time (a crossing costs the skew).
        let (mut x, mut at) = (st.first, st.start_ns);
        while x < limit {
            let track_end = ((x / g.sectors_per_track + 1) * g.sectors_per_track).min(limit);
            let span = (track_end - x) as f64 * g.sector_ns;
            if at + span > t {
                return x + ((t - at) / g.sector_ns) as u64;
            }
            at += span + g.track_skew as f64 * g.sector_ns;
            x = track_end;
        }
        limit - 1
    }

    /// Serves a request on the real device under the model: the state stays locked (one
    /// request at a time) until the modeled completion.
    fn run<T>(&self, op: IoOp, first: u64, blocks: u64, io: impl FnOnce(&D) -> io::Result<T>) -> io::Result<T> {
        let arrived = Instant::now();
        let mut s = self.state.lock();
        let start = self.start_after(&s, arrived);
        let done = self.serve(&mut s, op, first, blocks, start);
        let result = io(&self.inner);
        if let Timing::Sleep { scale } = self.timing {
            let due = self.epoch + Duration::from_nanos((done * scale) as u64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        drop(s);
        self.counters.add_busy_ns((done - start) as u64);
        self.counters.record(op, blocks, result.is_ok());
        result
    }
}

impl<D: BlockDevice> BlockDevice for DiskModel<D> {
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let blocks = check_transfer(&self.name, self.inner.block_count(), first, buf.len())
            .inspect_err(|_| self.counters.refused())?;
        self.run(IoOp::Read, first, blocks, |d| d.read_blocks(first, buf))
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let blocks = check_transfer(&self.name, self.inner.block_count(), first, buf.len())
            .inspect_err(|_| self.counters.refused())?;
        self.run(IoOp::Write, first, blocks, |d| d.write_blocks(first, buf))
    }

    fn flush(&self) -> io::Result<()> {
        self.run(IoOp::Flush, 0, 0, |d| d.flush())
    }

    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn counters(&self) -> &DeviceCounters {
        &self.counters
    }

    fn direct(&self) -> bool {
        self.inner.direct()
    }
}
