//! Stream layers on sockets: the protocol objects of Small 1998 (3.5, 4.2) that a connection's
//! owner pushes onto it and pops off again, each a stream graft (`file.stream`, the contract of
//! `vino-stream`): a compressor, an encryptor, an integrity tag, a tunnel's framing.
//!
//! A layer cuts what passes down through it into frames of at most [`CHUNK`] plain bytes, each
//! encoded by its graft with a fresh nonce, and decodes the frames its peer's layer made:
//!
//! | bytes | what |
//! | --- | --- |
//! | `[0, 4)` | the encoded length, `u32` little-endian; the top bit: the frame is raw |
//! | `[4, 8)` | the plain length, `u32` |
//! | `[8, 32)` | the nonce the encoder was given |
//! | `[32, ...)` | the encoded bytes |
//!
//! The chunk index a graft sees is the frame's number in its direction since the layer was
//! pushed, with the top bit set for the direction from the higher endpoint (address, then
//! port): an encryptor that binds the index, as `chacha20poly1305_stream.c` does, refuses a
//! frame replayed, dropped, moved or reflected back to its sender.
//!
//! The bytes come from another machine, so every length in a header is checked before anything
//! is kept (`EPROTO`, and the connection's layers stay broken), a raw frame is the graft's to
//! accept ([`vino_stream::RAW_INPUT`]), and a frame a layer refuses breaks them too (`EIO`);
//! `EACCES` while a layer has no key leaves the frame to be decoded once it has one. A stream
//! that ends inside a frame is `EPROTO`, not an end: a truncation is no clean close.
//!
//! Push and pop act at the point each direction has reached: what was sent before a push went
//! without the layer, what the reader had not yet taken when it pushed (bytes its layers had
//! decoded) is delivered as it was, and every byte after is the new layer's. Both ends push at
//! the same point of the stream, as STARTTLS does. A pop waits for no frame: with half of one
//! received it fails (`EBUSY`).
//!
//! # Who pays, who waits
//!
//! Each layer is a graft loaded for the socket's owner, charged to its account as any graft
//! (and so limited in number by the owner's grafts), its buffers ([`LAYER_BYTES`]) as socket
//! bytes, its CPU on each frame as the owner's. Frames are encoded and decoded on the calling
//! thread, never on the stack's: a slow layer delays its own process only. A socket has at most
//! [`MAX_LAYERS`].

use crate::error::{Errno, SysError};
use crate::{Process, SysResult};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use vino_graft::account::{Charge, Resource};
use vino_net::{SocketId, Wait};
use vino_stream::{CHUNK, Codec, Encoded, MAX_ENCODED, MAX_GROWTH, NONCE_BYTES, StreamError, fresh_nonce};

/// Bytes of a frame's header.
pub const FRAME_HEADER: usize = 8 + NONCE_BYTES;
/// The longest frame.
pub const MAX_FRAME: usize = FRAME_HEADER + MAX_ENCODED;
/// Layers a socket may have at once.
pub const MAX_LAYERS: usize = 4;
/// What one layer may buffer (a frame arriving, one decoded, one above it), charged as socket
/// bytes while the layer is on.
pub const LAYER_BYTES: u64 = (2 * MAX_FRAME + CHUNK) as u64;
/// The encoded length's flag for a raw frame.
const RAW_FRAME: u32 = 1 << 31;
/// The chunk index's flag for the direction from the higher endpoint.
const FROM_HIGHER: u64 = 1 << 63;

/// A frame's header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FrameHeader {
    coded_len: usize,
    plain_len: usize,
    raw: bool,
    nonce: [u8; NONCE_BYTES],
}

impl FrameHeader {
    fn put(&self, out: &mut Vec<u8>) {
        let flag = if self.raw { RAW_FRAME } else { 0 };
        out.extend_from_slice(&(self.coded_len as u32 | flag).to_le_bytes());
        out.extend_from_slice(&(self.plain_len as u32).to_le_bytes());
        out.extend_from_slice(&self.nonce);
    }

    /// Reads and checks a header from the peer: a frame it announces fits the bounds an encode
    /// keeps to, or the stream is malformed.
    fn parse(bytes: &[u8]) -> SysResult<FrameHeader> {
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let (first, plain_len) = (word(0), word(4) as usize);
        let header = FrameHeader {
            coded_len: (first & !RAW_FRAME) as usize,
            plain_len,
            raw: first & RAW_FRAME != 0,
            nonce: bytes[8..FRAME_HEADER].try_into().expect("the nonce's bytes"),
        };
        let fits = header.plain_len <= CHUNK
            && header.coded_len <= MAX_ENCODED
            && if header.raw {
                header.coded_len == header.plain_len
            } else {
                header.coded_len <= header.plain_len + MAX_GROWTH
            };
        if !fits {
            return Err(SysError::new(
                Errno::Proto,
                format!(
                    "a malformed frame from the peer: {} bytes for {} plain{}",
                    header.coded_len,
                    header.plain_len,
                    if header.raw { ", raw" } else { "" }
                ),
            ));
        }
        Ok(header)
    }
}

/// The most bytes `plain` bytes (at most [`CHUNK`]) become on the wire under `layers` layers.
pub fn wire_bound(plain: usize, layers: usize) -> usize {
    (0..layers).fold(plain, |size, _| {
        let frames = size.div_ceil(CHUNK).max(1);
        size + frames * (FRAME_HEADER + MAX_GROWTH)
    })
}

/// A stream graft's error as the system call's.
fn stream_error(e: StreamError) -> SysError {
    match e {
        StreamError::NeedKey => SysError::new(Errno::Acces, format!("a socket layer: {e}")),
        StreamError::Failed(_) => SysError::new(Errno::Io, format!("a socket layer: {e}")),
    }
}

/// One layer's codec and what identifies it.
struct Codecs {
    codec: Arc<Codec>,
    /// Its name in the owner's graft namespace, for control calls (`net.stream/<socket>/<n>`).
    name: String,
}

/// A layer's sending side: frames sent.
struct SendLayer {
    codec: Arc<Codec>,
    frames: u64,
}

/// A layer's receiving side.
struct RecvLayer {
    codec: Arc<Codec>,
    frames: u64,
    /// Bytes of frames not yet decoded (from the wire, or from the layer below).
    wire: Vec<u8>,
    /// Decoded bytes the reader has not taken (the top layer's only; a lower layer's go into
    /// the `wire` of the one above).
    plain: Vec<u8>,
    taken: usize,
}

impl RecvLayer {
    fn pending(&self) -> usize {
        self.plain.len() - self.taken
    }

    /// Wire bytes this layer needs to finish its current frame (the header's first).
    fn need(&self) -> SysResult<usize> {
        if self.wire.len() < FRAME_HEADER {
            return Ok(FRAME_HEADER - self.wire.len());
        }
        let h = FrameHeader::parse(&self.wire[..FRAME_HEADER])?;
        Ok((FRAME_HEADER + h.coded_len).saturating_sub(self.wire.len()))
    }

    /// Decodes the first frame of `wire` if it is whole.
    fn decode_one(&mut self, index_flag: u64) -> SysResult<Option<Vec<u8>>> {
        if self.need()? > 0 {
            return Ok(None);
        }
        let h = FrameHeader::parse(&self.wire[..FRAME_HEADER])?;
        let body = &self.wire[FRAME_HEADER..FRAME_HEADER + h.coded_len];
        let index = self.frames | index_flag;
        let plain = if h.raw {
            self.codec.decode_raw(index, body, &h.nonce)
        } else {
            self.codec.decode(index, body, &h.nonce, h.plain_len)
        }
        .map_err(stream_error)?;
        self.wire.drain(..FRAME_HEADER + h.coded_len);
        self.frames += 1;
        Ok(Some(plain))
    }
}

/// The receiving side of a socket's layers, bottom first.
struct RecvSide {
    layers: Vec<RecvLayer>,
    /// Decoded bytes from before the last push or pop, delivered first.
    early: Vec<u8>,
    /// The flag of the peer's direction in chunk indexes.
    index_flag: u64,
    /// The error that broke the stream (a malformed or refused frame): every later receive's.
    broken: Option<SysError>,
    /// The socket gave its end.
    ended: bool,
}

impl RecvSide {
    /// Copies what is decoded into `buf`.
    fn take(&mut self, buf: &mut [u8]) -> usize {
        if !self.early.is_empty() {
            let n = buf.len().min(self.early.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            return n;
        }
        let Some(top) = self.layers.last_mut() else { return 0 };
        let n = buf.len().min(top.pending());
        buf[..n].copy_from_slice(&top.plain[top.taken..top.taken + n]);
        top.taken += n;
        if top.pending() == 0 {
            top.plain.clear();
            top.taken = 0;
        }
        n
    }

    fn readable(&self) -> bool {
        !self.early.is_empty() || self.layers.last().is_some_and(|t| t.pending() > 0)
    }

    /// Decodes whole frames upwards while the layer above has room: whether any was.
    fn pump(&mut self) -> SysResult<bool> {
        let mut moved = false;
        for i in 0..self.layers.len() {
            loop {
                let above_full = match self.layers.get(i + 1) {
                    Some(above) => above.wire.len() >= MAX_FRAME,
                    None => self.layers[i].pending() > 0,
                };
                if above_full {
                    break;
                }
                let Some(plain) = self.layers[i].decode_one(self.index_flag)? else {
                    break;
                };
                moved = true;
                match self.layers.get_mut(i + 1) {
                    Some(above) => above.wire.extend_from_slice(&plain),
                    None => self.layers[i].plain.extend_from_slice(&plain),
                }
            }
        }
        Ok(moved)
    }

    /// Records an error that breaks the stream (not a missing key: that frame waits).
    fn fail(&mut self, e: SysError) -> SysError {
        if e.errno != Errno::Acces {
            self.broken = Some(e.clone());
        }
        e
    }
}

/// A socket's layers.
pub(crate) struct SocketLayers {
    codecs: Mutex<Vec<Codecs>>,
    send: Mutex<(Vec<SendLayer>, u64)>,
    recv: Mutex<RecvSide>,
    /// The layers' buffers, charged as socket bytes.
    charges: Mutex<Vec<Charge>>,
}

/// Takes a lock as a socket call waits: not at all for [`Wait::No`] (`EAGAIN`).
fn lock_as<'a, T>(m: &'a Mutex<T>, wait: Wait) -> SysResult<parking_lot::MutexGuard<'a, T>> {
    let got = match wait {
        Wait::No => m.try_lock(),
        Wait::For(d) => m.try_lock_for(d),
    };
    got.ok_or_else(|| match wait {
        Wait::No => SysError::new(Errno::Again, "another call on the socket's layers is under way"),
        Wait::For(_) => SysError::new(Errno::TimedOut, "another call on the socket's layers is under way"),
    })
}

/// Takes a lock for a push or a pop, which waits for no send or receive (`EBUSY`).
fn lock_now<T>(m: &Mutex<T>) -> SysResult<parking_lot::MutexGuard<'_, T>> {
    m.try_lock_for(Duration::from_millis(10))
        .ok_or_else(|| SysError::new(Errno::Busy, "a send or a receive on the socket is under way"))
}

impl SocketLayers {
    /// Encodes `plain` down through the layers, top first; on a failure no layer has counted
    /// a frame (nothing was sent).
    fn encode(layers: &mut [SendLayer], index_flag: u64, plain: &[u8]) -> SysResult<Vec<u8>> {
        let before: Vec<u64> = layers.iter().map(|l| l.frames).collect();
        let result = (|| {
            let mut data = plain.to_vec();
            for layer in layers.iter_mut().rev() {
                let mut out = Vec::with_capacity(wire_bound(data.len(), 1));
                for piece in data.chunks(CHUNK) {
                    let nonce = fresh_nonce();
                    let encoded = layer
                        .codec
                        .encode(layer.frames | index_flag, piece, &nonce)
                        .map_err(stream_error)?;
                    let (raw, body) = match &encoded {
                        Encoded::Coded(bytes) => (false, bytes.as_slice()),
                        Encoded::Raw => (true, piece),
                    };
                    let header = FrameHeader {
                        coded_len: body.len(),
                        plain_len: piece.len(),
                        raw,
                        nonce,
                    };
                    header.put(&mut out);
                    out.extend_from_slice(body);
                    layer.frames += 1;
                }
                data = out;
            }
            Ok(data)
        })();
        if result.is_err() {
            for (layer, frames) in layers.iter_mut().zip(before) {
                layer.frames = frames;
            }
        }
        result
    }
}

impl Process {
    /// The layers of `socket`, if it has any.
    fn layers_of(&self, socket: SocketId) -> Option<Arc<SocketLayers>> {
        // Every send, receive and poll asks: a process that never pushed a layer pays a load.
        if !self.socket_layers_used.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.socket_layers.lock().get(&socket).cloned()
    }

    /// Pushes the stream graft `wasm` onto the connection `socket` as its new top layer: from
    /// now on what this process sends is encoded by it and what it receives decoded (the peer
    /// pushes the same at the same point). Returns the layer's name in this process's graft
    /// namespace (`net.stream/<socket>/<depth>`), for its control calls (an encryptor's key).
    /// Errors: `ENOTCONN` for a socket not connected, `EINVAL` for a listener or a UDP socket,
    /// `ENOBUFS` past [`MAX_LAYERS`]
    /// or the owner's socket bytes, `EBUSY` during a send or a receive, the
    /// graft's load errors (`EINVAL` for a module that is no stream graft).
    pub fn socket_push(&self, socket: SocketId, wasm: &[u8]) -> SysResult<String> {
        let net = self.kernel().net();
        let (local, peer) = net.endpoints(&self.socket_owner(), socket)?;
        let layers = {
            let mut all = self.socket_layers.lock();
            self.socket_layers_used
                .store(true, std::sync::atomic::Ordering::Release);
            all.entry(socket)
                .or_insert_with(|| {
                    let from_higher = (local.ip(), local.port()) > (peer.ip(), peer.port());
                    let send_flag = if from_higher { FROM_HIGHER } else { 0 };
                    Arc::new(SocketLayers {
                        codecs: Mutex::default(),
                        send: Mutex::new((Vec::new(), send_flag)),
                        recv: Mutex::new(RecvSide {
                            layers: Vec::new(),
                            early: Vec::new(),
                            index_flag: send_flag ^ FROM_HIGHER,
                            broken: None,
                            ended: false,
                        }),
                        charges: Mutex::default(),
                    })
                })
                .clone()
        };
        let mut codecs = layers.codecs.lock();
        let depth = codecs.len();
        if depth == MAX_LAYERS {
            return Err(SysError::new(
                Errno::NoBufs,
                format!("socket {socket} has {MAX_LAYERS} layers, the most a socket may have"),
            ));
        }
        if wire_bound(CHUNK, depth + 1) - CHUNK >= self.kernel().net_config.buffer_bytes {
            return Err(SysError::new(
                Errno::NoBufs,
                "the socket's send buffer cannot hold the frames of another layer",
            ));
        }
        let (mut send, mut recv) = (lock_now(&layers.send)?, lock_now(&layers.recv)?);
        let charge = self.account().charge(Resource::SocketBytes, LAYER_BYTES)?;
        let codec = Arc::new(Codec::load_for(&self.kernel().runtime, self.graft_owner(), wasm)?);
        let name = format!("net.stream/{socket}/{depth}");
        self.namespace.register_as(&name, codec.slot().clone());
        // What the reader has not taken predates the layer.
        let RecvSide {
            layers: below, early, ..
        } = &mut *recv;
        if let Some(top) = below.last_mut() {
            early.extend_from_slice(&top.plain[top.taken..]);
            top.plain.clear();
            top.taken = 0;
        }
        send.0.push(SendLayer {
            codec: codec.clone(),
            frames: 0,
        });
        recv.layers.push(RecvLayer {
            codec: codec.clone(),
            frames: 0,
            wire: Vec::new(),
            plain: Vec::new(),
            taken: 0,
        });
        codecs.push(Codecs {
            codec,
            name: name.clone(),
        });
        layers.charges.lock().push(charge);
        Ok(name)
    }

    /// Pops the top layer of `socket`: from now on this process's bytes go without it (the
    /// peer pops at the same point). `EBUSY` with half a frame of it received, or during a
    /// send or a receive; `EINVAL` without layers.
    pub fn socket_pop(&self, socket: SocketId) -> SysResult<()> {
        let none = || SysError::new(Errno::Inval, format!("socket {socket} has no stream layer"));
        let layers = self.layers_of(socket).ok_or_else(none)?;
        let mut codecs = layers.codecs.lock();
        if codecs.is_empty() {
            return Err(none());
        }
        let (mut send, mut recv) = (lock_now(&layers.send)?, lock_now(&layers.recv)?);
        let top = recv.layers.last().expect("a layer per codec");
        if !top.wire.is_empty() {
            return Err(SysError::new(
                Errno::Busy,
                "part of a frame of the top layer is received: pop it at a frame's end",
            ));
        }
        let top = recv.layers.pop().expect("a layer per codec");
        recv.early.extend_from_slice(&top.plain[top.taken..]);
        send.0.pop();
        let gone = codecs.pop().expect("checked above");
        layers.charges.lock().pop();
        drop((send, recv, codecs));
        self.namespace.forget(&gone.name);
        gone.codec.slot().unload();
        Ok(())
    }

    /// How many layers `socket` has.
    pub fn socket_layer_count(&self, socket: SocketId) -> usize {
        self.layers_of(socket).map_or(0, |l| l.codecs.lock().len())
    }

    /// Bytes `socket`'s layers hold for the reader: of frames not yet whole, and decoded ones
    /// not yet taken.
    pub fn socket_layer_bytes(&self, socket: SocketId) -> usize {
        self.layers_of(socket).map_or(0, |l| {
            let r = l.recv.lock();
            r.early.len() + r.layers.iter().map(|x| x.wire.len() + x.pending()).sum::<usize>()
        })
    }

    /// A send through `socket`'s layers, if it has any: whole frames of at most [`CHUNK`]
    /// plain bytes, sent once the send buffer has room for all of them, so that a frame never
    /// goes out in part.
    pub(crate) fn layered_send(&self, socket: SocketId, data: &[u8], wait: Wait) -> Option<SysResult<usize>> {
        let layers = self.layers_of(socket)?;
        Some((|| {
            let mut send = lock_as(&layers.send, wait)?;
            let (stack, index_flag) = &mut *send;
            let (net, owner) = (self.kernel().net(), self.socket_owner());
            if stack.is_empty() || data.is_empty() {
                return net.send(&owner, socket, data, wait).map_err(Into::into);
            }
            let overhead = wire_bound(CHUNK, stack.len()) - CHUNK;
            let room = net.send_room(&owner, socket, overhead + 1, wait)?;
            let n = data.len().min(CHUNK).min(room.saturating_sub(overhead));
            if n == 0 {
                return Err(SysError::new(Errno::NoBufs, "the send buffer cannot hold one frame"));
            }
            let wire = SocketLayers::encode(stack, *index_flag, &data[..n])?;
            debug_assert!(wire.len() <= room, "{} wire bytes for {room} of room", wire.len());
            net.send_all(&owner, socket, &wire, Wait::No)?;
            Ok(n)
        })())
    }

    /// A receive through `socket`'s layers, if it has any.
    pub(crate) fn layered_recv(&self, socket: SocketId, buf: &mut [u8], wait: Wait) -> Option<SysResult<usize>> {
        let layers = self.layers_of(socket)?;
        Some((|| {
            let mut recv = lock_as(&layers.recv, wait)?;
            if let Some(e) = &recv.broken {
                return Err(e.clone());
            }
            // The whole call waits at most `wait`, however the peer trickles a frame's bytes.
            let clock = &self.kernel().net_config.clock;
            let (net, owner) = (self.kernel().net(), self.socket_owner());
            let deadline = match wait {
                Wait::No => None,
                Wait::For(d) => Some(clock.deadline_in(d)),
            };
            let mut wire = vec![0u8; 0];
            loop {
                let n = recv.take(buf);
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                if recv.layers.is_empty() {
                    return net.recv(&owner, socket, buf, wait).map_err(Into::into);
                }
                match recv.pump() {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => return Err(recv.fail(e)),
                }
                let need = match recv.layers[0].need() {
                    Ok(n) => n,
                    Err(e) => return Err(recv.fail(e)),
                };
                if recv.ended {
                    let partial = recv.layers.iter().any(|l| !l.wire.is_empty());
                    return if partial {
                        Err(recv.fail(SysError::new(Errno::Proto, "the stream ended inside a frame")))
                    } else {
                        Ok(0)
                    };
                }
                wire.resize(need.max(1), 0);
                let left = match deadline {
                    None => Wait::No,
                    Some(at) => match at.checked_sub(clock.monotonic()) {
                        Some(left) if !left.is_zero() => Wait::For(left),
                        _ => return Err(SysError::new(Errno::TimedOut, "no whole frame came in time")),
                    },
                };
                match net.recv(&owner, socket, &mut wire, left)? {
                    0 => recv.ended = true,
                    got => recv.layers[0].wire.extend_from_slice(&wire[..got]),
                }
            }
        })())
    }

    /// The room a send through `socket`'s layers waits for, if it has any.
    pub(crate) fn layers_send_need(&self, socket: SocketId) -> Option<usize> {
        let layers = self.layers_of(socket)?;
        let depth = layers.codecs.try_lock()?.len();
        (depth > 0).then(|| wire_bound(CHUNK, depth) - CHUNK + 1)
    }

    /// Whether a receive through the layers has decoded bytes waiting (a poll is ready).
    pub(crate) fn layers_readable(&self, socket: SocketId) -> bool {
        self.layers_of(socket)
            .is_some_and(|l| l.recv.try_lock().is_some_and(|r| r.readable() || r.broken.is_some()))
    }

    /// Takes `socket`'s layers off (it closed): their grafts are unloaded, their charges given
    /// back.
    pub(crate) fn drop_layers(&self, socket: SocketId) {
        let Some(layers) = self.socket_layers.lock().remove(&socket) else {
            return;
        };
        for c in layers.codecs.lock().drain(..) {
            self.namespace.forget(&c.name);
            c.codec.slot().unload();
        }
        layers.charges.lock().clear();
    }

    /// Takes every socket's layers off (at exit).
    pub(crate) fn drop_all_layers(&self) {
        let sockets: Vec<SocketId> = self.socket_layers.lock().keys().copied().collect();
        for s in sockets {
            self.drop_layers(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_and_bounds_hold() {
        let h = FrameHeader {
            coded_len: 100,
            plain_len: 90,
            raw: false,
            nonce: [7; NONCE_BYTES],
        };
        let mut out = Vec::new();
        h.put(&mut out);
        assert_eq!(out.len(), FRAME_HEADER);
        assert_eq!(FrameHeader::parse(&out).unwrap(), h);
        for (coded, plain, raw) in [
            (CHUNK + MAX_GROWTH + 1, CHUNK, false),
            (10, CHUNK + 1, false),
            (10, 11, true),
            (MAX_ENCODED + 1, CHUNK, false),
        ] {
            let mut out = Vec::new();
            FrameHeader {
                coded_len: coded,
                plain_len: plain,
                raw,
                nonce: [0; NONCE_BYTES],
            }
            .put(&mut out);
            assert_eq!(
                FrameHeader::parse(&out).unwrap_err().errno,
                Errno::Proto,
                "{coded} {plain} {raw}"
            );
        }
    }

    #[test]
    fn the_wire_bound_grows_with_the_plain_bytes_and_the_layers() {
        assert_eq!(wire_bound(10, 0), 10);
        assert_eq!(wire_bound(10, 1), 10 + FRAME_HEADER + MAX_GROWTH);
        // A full chunk with its growth is two frames for the layer below.
        assert_eq!(wire_bound(CHUNK, 2), CHUNK + 3 * (FRAME_HEADER + MAX_GROWTH));
        for layers in 0..=MAX_LAYERS {
            let overhead = wire_bound(CHUNK, layers) - CHUNK;
            for n in [0, 1, 4096, CHUNK - 1, CHUNK] {
                assert!(wire_bound(n, layers) <= n + overhead);
            }
        }
    }
}
