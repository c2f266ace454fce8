//! Frames: a `u32` little-endian length, then a postcard payload.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{self, Read, Write};

/// Why a frame could not be read or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("connection closed")]
    Closed,
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("a frame of {len} bytes is over the limit of {max}")]
    TooLarge { len: u64, max: usize },
    #[error("undecodable message: {0}")]
    Decode(String),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Encodes `msg` as a whole frame, header included.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut out = postcard::to_extend(msg, std::mem::take(&mut out)).expect("encoding into a Vec cannot fail");
    let len = u32::try_from(out.len() - 4).expect("a message under 4 GiB");
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

/// Encodes `msg` as a whole frame at the end of `out` (for a writer that sends several at once).
pub fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    *out = postcard::to_extend(msg, std::mem::take(out)).expect("encoding into a Vec cannot fail");
    let len = u32::try_from(out.len() - start - 4).expect("a message under 4 GiB");
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// The start of the frame of `empty` with `len` bytes in its last field, a byte string (as
/// [`crate::Request::Input`] and [`crate::Response::Output`] have): the frame is this, then the
/// bytes, so a writer sends them from where they are instead of copying them into a message.
pub fn bytes_frame_head<T: Serialize>(empty: &T, len: usize) -> Vec<u8> {
    let mut head = encode(empty);
    // The empty byte string is its length, a varint 0, last: it becomes `len`'s.
    assert_eq!(head.pop(), Some(0), "the message ends with an empty byte string");
    let mut n = len;
    while n >= 0x80 {
        head.push(n as u8 | 0x80);
        n >>= 7;
    }
    head.push(n as u8);
    let payload = u32::try_from(head.len() - 4 + len).expect("a message under 4 GiB");
    head[..4].copy_from_slice(&payload.to_le_bytes());
    head
}

/// Decodes a frame's payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    postcard::from_bytes(payload).map_err(|e| FrameError::Decode(e.to_string()))
}

/// Writes `msg` as one frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    w.write_all(&encode(msg))
}

/// Reads one frame's payload into `buf` (replacing its contents). A length over `max` is
/// refused before `buf` grows, and `buf` grows only as the payload arrives (to about twice what
/// has arrived, 64 KiB at least, and never past the announced length).
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>, max: usize) -> Result<(), FrameError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    read_frame_after_header(header, r, buf, max)
}

/// How much of a frame is read at a time: the buffer grows as the payload arrives, so that a
/// header announcing a large frame costs the reader no more memory than the bytes that follow it.
const READ_CHUNK: usize = 64 << 10;

/// Like [`read_frame`], for a caller that already read the 4-byte header.
pub fn read_frame_after_header(
    header: [u8; 4],
    r: &mut impl Read,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<(), FrameError> {
    read_frame_watching(header, r, buf, max, &mut |_| true).map(|_| ())
}

/// Like [`read_frame_after_header`], showing `watch` what has arrived after each read, so that
/// a frame can be judged (and refused) before all of it is read. Returns false if `watch` said
/// stop: the rest of the frame is left unread.
pub fn read_frame_watching(
    header: [u8; 4],
    r: &mut impl Read,
    buf: &mut Vec<u8>,
    max: usize,
    watch: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<bool, FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len: len as u64, max });
    }
    buf.clear();
    while buf.len() < len {
        let start = buf.len();
        let want = (len - start).min(READ_CHUNK);
        if buf.capacity() < start + want {
            // Doubling as the bytes arrive, never past the frame's length.
            let target = (2 * buf.capacity()).clamp(start + want, len);
            buf.reserve_exact(target - start);
        }
        buf.resize(start + want, 0);
        let got = r.read(&mut buf[start..]);
        buf.truncate(start + *got.as_ref().unwrap_or(&0));
        match got {
            Ok(0) => return Err(FrameError::Truncated),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Truncated),
            Err(e) => return Err(e.into()),
        }
        if !watch(buf) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Who a module carried in a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleFor {
    /// A graft ([`Request::GraftLoad`], [`Request::GraftLoadFile`], [`Request::GraftStage`],
    /// [`Request::StreamBind`]).
    Graft,
    /// A program ([`Request::Run`]).
    Program,
}

/// The start of the module a request carries, as far as a frame's first bytes show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleHead<'a> {
    pub kind: ModuleFor,
    /// The module's size as the request declares it.
    pub size: usize,
    /// The module's bytes that have arrived.
    pub head: &'a [u8],
}

/// The module in a request frame's `payload` (or its first bytes), if the request carries one
/// and enough has arrived to find where it starts: read from the encoding itself, so that a
/// module too costly to compile can be refused before the rest of its frame is read.
pub fn module_head(payload: &[u8]) -> Option<ModuleHead<'_>> {
    let (tag, mut at) = varint(payload)?;
    let shape = request_shapes().iter().find(|s| s.tag == tag)?;
    // The strings before the module: each a length and its bytes.
    for _ in 0..shape.strings {
        // A string may say it is longer than what has arrived: the next is then not here yet.
        let (n, len) = varint(payload.get(at..)?)?;
        at = at.checked_add(len)?.checked_add(usize::try_from(n).ok()?)?;
    }
    if shape.optional {
        // An `Option`'s tag: 1 if the module follows.
        if *payload.get(at)? != 1 {
            return None;
        }
        at += 1;
    }
    let (size, len) = varint(payload.get(at..)?)?;
    let size = usize::try_from(size).ok()?;
    let start = at + len;
    let end = payload.len().min(start.saturating_add(size));
    Some(ModuleHead {
        kind: shape.kind,
        size,
        head: payload.get(start..end)?,
    })
}

/// A request that carries a module, as its encoding lays it out.
struct Shape {
    tag: u64,
    kind: ModuleFor,
    /// Strings before the module.
    strings: usize,
    /// The module is an `Option` (a tag byte first).
    optional: bool,
}

/// Each request that carries a module.
fn request_shapes() -> &'static [Shape] {
    static SHAPES: std::sync::OnceLock<Vec<Shape>> = std::sync::OnceLock::new();
    SHAPES.get_or_init(|| {
        let tag = |r: &crate::Request| varint(&postcard::to_allocvec(r).expect("encodes")).expect("a tag").0;
        let shape = |r: crate::Request, kind, strings, optional| Shape {
            tag: tag(&r),
            kind,
            strings,
            optional,
        };
        let wasm = Vec::new;
        let s = String::new;
        use crate::Request::*;
        vec![
            shape(
                GraftLoad {
                    point: s(),
                    wasm: wasm(),
                },
                ModuleFor::Graft,
                1,
                false,
            ),
            shape(
                GraftLoadFile {
                    path: s(),
                    point: s(),
                    wasm: wasm(),
                },
                ModuleFor::Graft,
                2,
                false,
            ),
            shape(GraftStage { wasm: wasm() }, ModuleFor::Graft, 0, false),
            shape(
                Run {
                    wasm: wasm(),
                    setup: Default::default(),
                    detach: false,
                    then: Vec::new(),
                },
                ModuleFor::Program,
                0,
                false,
            ),
            shape(StreamBind { path: s(), wasm: None }, ModuleFor::Graft, 1, true),
        ]
    })
}

/// A postcard varint at the start of `bytes` and its length; `None` if incomplete.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileKind, MAX_FRAME, OpenFlags, Payload, Request, Response, SetAttrs, SetTime, Stat, XattrHow};

    #[test]
    fn a_bytes_frame_head_then_the_bytes_is_the_messages_frame() {
        for len in [0, 1, 127, 128, 300, 16_383, 16_384, 65_536, crate::MAX_DATA] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut frame = super::bytes_frame_head(&Request::Input { data: Vec::new() }, len);
            frame.extend_from_slice(&data);
            assert_eq!(frame, encode(&Request::Input { data: data.clone() }), "{len}");
            let empty = Response::Output {
                stream: 2,
                data: Vec::new(),
            };
            let mut frame = super::bytes_frame_head(&empty, len);
            frame.extend_from_slice(&data);
            assert_eq!(frame, encode(&Response::Output { stream: 2, data }), "{len}");
        }
    }

    fn round_trip(req: &Request) -> Request {
        let bytes = encode(req);
        let mut buf = Vec::new();
        read_frame(&mut &bytes[..], &mut buf, MAX_FRAME).unwrap();
        decode(&buf).unwrap()
    }

    #[test]
    fn requests_survive_the_wire() {
        let reqs = [
            Request::Hello {
                version: 1,
                client: "t".into(),
                shm_len: 0,
            },
            Request::Open {
                path: "/a".into(),
                flags: OpenFlags::create(),
            },
            Request::Write {
                fd: 3,
                data: Payload::Inline(vec![1, 2, 3]),
                offset: Some(9),
            },
            Request::Write {
                fd: 3,
                data: Payload::Shm { offset: 0, len: 65536 },
                offset: None,
            },
            Request::GraftCall {
                point: "p".into(),
                control: "c".into(),
                args: vec![-1, i64::MAX],
            },
            Request::Top,
            Request::OpenAt {
                dirfd: Some(4),
                path: b"d/\xff\xfe-not-utf8".to_vec(),
                flags: OpenFlags {
                    nofollow: true,
                    directory: true,
                    ..OpenFlags::read_only()
                },
            },
            Request::MknodAt {
                dirfd: None,
                path: b"/dev-null".to_vec(),
                kind: FileKind::CharDevice,
                mode: 0o666,
                rdev: (1 << 8) | 3,
            },
            Request::RenameAt {
                from_dirfd: None,
                from: b"a".to_vec(),
                to_dirfd: Some(0),
                to: b"b".to_vec(),
                no_replace: true,
            },
            Request::SetattrAt {
                dirfd: None,
                path: b"/f".to_vec(),
                follow: false,
                attrs: SetAttrs {
                    mode: Some(0o4755),
                    gid: Some(100),
                    atime: SetTime::Now,
                    mtime: SetTime::At(1_700_000_000_000_000_000),
                    ..SetAttrs::default()
                },
            },
            Request::SetXattr {
                dirfd: Some(1),
                path: Vec::new(),
                follow: true,
                name: b"user.x".to_vec(),
                value: vec![0, 1, 2, 255],
                how: XattrHow::Create,
            },
            Request::Fallocate {
                fd: 3,
                keep_size: true,
                offset: 4096,
                len: 1 << 20,
            },
            Request::FallocateMode {
                fd: 3,
                mode: 0x03,
                offset: 4096,
                len: 1 << 20,
            },
            Request::StreamBind {
                path: "/s".into(),
                wasm: Some(vec![0, 97, 115, 109]),
            },
            Request::StreamBind {
                path: "/s".into(),
                wasm: None,
            },
            Request::StreamStatus { path: "/s".into() },
            Request::StreamControl {
                path: "/s".into(),
                name: "vino_ctl_set_key".into(),
                args: vec![0, -1],
            },
        ];
        for r in &reqs {
            assert_eq!(&round_trip(r), r);
        }
    }

    #[test]
    fn responses_survive_the_wire() {
        let resps = [
            Response::Stat(Stat {
                ino: 12,
                kind: FileKind::BlockDevice,
                mode: 0o060_660,
                nlink: 1,
                uid: 0,
                gid: 6,
                size: 0,
                blocks: 0,
                atime_ns: 1,
                mtime_ns: 2,
                ctime_ns: 3,
                rdev: (8 << 8) | 1,
                generation: 7,
            }),
            Response::Names(vec![b"user.a".to_vec(), b"user.\xff".to_vec()]),
            Response::Data(b"target/of/a/link".to_vec()),
            Response::Stream(Some(crate::StreamInfo {
                module: "ab".repeat(32),
                loaded: true,
            })),
            Response::Stream(None),
        ];
        for r in &resps {
            let bytes = encode(r);
            let mut buf = Vec::new();
            read_frame(&mut &bytes[..], &mut buf, MAX_FRAME).unwrap();
            assert_eq!(&decode::<Response>(&buf).unwrap(), r);
        }
    }

    #[test]
    fn an_oversized_header_is_refused_before_reading_on() {
        let mut bytes = (u32::MAX).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 16]);
        let mut buf = Vec::new();
        let err = read_frame(&mut &bytes[..], &mut buf, MAX_FRAME).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
        assert_eq!(buf.capacity(), 0, "nothing allocated for a refused frame");
    }

    #[test]
    fn truncation_and_clean_close_differ() {
        let mut buf = Vec::new();
        assert!(matches!(
            read_frame(&mut &[][..], &mut buf, 64),
            Err(FrameError::Closed)
        ));
        assert!(matches!(
            read_frame(&mut &[5, 0][..], &mut buf, 64),
            Err(FrameError::Truncated)
        ));
        assert!(matches!(
            read_frame(&mut &[5, 0, 0, 0, 1][..], &mut buf, 64),
            Err(FrameError::Truncated)
        ));
    }

    /// Announces `len` bytes, delivers `body`, then reports the end of the stream.
    struct Liar {
        header: Option<[u8; 4]>,
        body: Vec<u8>,
        at: usize,
    }

    impl Read for Liar {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if let Some(h) = self.header.take() {
                out[..4].copy_from_slice(&h);
                return Ok(4);
            }
            let n = out.len().min(self.body.len() - self.at);
            out[..n].copy_from_slice(&self.body[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_large_announced_frame_costs_only_the_bytes_that_arrive() {
        let mut r = Liar {
            header: Some(((16 << 20) as u32).to_le_bytes()),
            body: vec![7; 10],
            at: 0,
        };
        let mut buf = Vec::new();
        let err = read_frame(&mut r, &mut buf, MAX_FRAME).unwrap_err();
        assert!(matches!(err, FrameError::Truncated), "{err}");
        assert!(
            buf.capacity() < 1 << 20,
            "{} bytes held for 10 received",
            buf.capacity()
        );

        // A whole large frame still arrives whole, in a buffer no larger than the frame.
        let body: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        let mut r = Liar {
            header: Some((body.len() as u32).to_le_bytes()),
            body: body.clone(),
            at: 0,
        };
        read_frame(&mut r, &mut buf, MAX_FRAME).unwrap();
        assert_eq!(buf, body);
        assert!(buf.capacity() <= body.len());
        // And a small frame after it reuses the buffer.
        read_frame(&mut &encode(&Request::Top)[..], &mut buf, MAX_FRAME).unwrap();
        assert_eq!(decode::<Request>(&buf).unwrap(), Request::Top);
    }

    #[test]
    fn garbage_does_not_decode_into_a_panic() {
        let mut seed = 7u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 56) as u8
                })
                .collect();
            let _ = decode::<Request>(&bytes);
            let _ = decode::<Response>(&bytes);
        }
    }

    #[test]
    fn limits_are_checked() {
        let big = Request::Write {
            fd: 0,
            data: Payload::Inline(vec![0; crate::MAX_DATA + 1]),
            offset: None,
        };
        assert!(big.check().is_err());
        assert!(
            Request::Read {
                fd: 0,
                len: u32::MAX,
                offset: None,
                to_shm: None
            }
            .check()
            .is_err()
        );
        assert!(
            Request::Read {
                fd: 0,
                len: 4096,
                offset: None,
                to_shm: None
            }
            .check()
            .is_ok()
        );
        assert_eq!(Request::Top.name(), "Top");
        let long = vec![b'a'; crate::MAX_PATH + 1];
        let at = |path: Vec<u8>| Request::StatAt {
            dirfd: None,
            path,
            follow: true,
        };
        assert!(at(long.clone()).check().is_err());
        assert!(at(b"/ok".to_vec()).check().is_ok());
        let rename = Request::RenameAt {
            from_dirfd: None,
            from: b"a".to_vec(),
            to_dirfd: None,
            to: long,
            no_replace: false,
        };
        assert!(rename.check().is_err());
        let xattr = |n: usize| Request::SetXattr {
            dirfd: None,
            path: b"/f".to_vec(),
            follow: true,
            name: b"user.big".to_vec(),
            value: vec![0; n],
            how: XattrHow::Any,
        };
        assert!(xattr(crate::MAX_XATTR).check().is_ok());
        assert!(xattr(crate::MAX_XATTR + 1).check().is_err());
        assert_eq!(crate::errno::name(crate::errno::ELOOP), Some("ELOOP"));
    }

    #[test]
    fn a_module_is_found_in_the_first_bytes_of_its_frame() {
        let module: Vec<u8> = (0..200u8).collect();
        let cases = [
            (
                Request::GraftLoadFile {
                    path: "/a/b".into(),
                    point: "lock.grant".into(),
                    wasm: module.clone(),
                },
                ModuleFor::Graft,
            ),
            (
                Request::Run {
                    wasm: module.clone(),
                    setup: Default::default(),
                    detach: true,
                    then: Vec::new(),
                },
                ModuleFor::Program,
            ),
            (
                Request::StreamBind {
                    path: "/s".into(),
                    wasm: Some(module.clone()),
                },
                ModuleFor::Graft,
            ),
        ];
        for (req, kind) in cases {
            let frame = encode(&req);
            let payload = &frame[4..];
            let whole = module_head(payload).unwrap();
            assert_eq!((whole.kind, whole.size, whole.head), (kind, 200, &module[..]));
            // A prefix shows the module's start; one that ends before it shows nothing.
            let at = payload.windows(module.len()).position(|w| w == &module[..]).unwrap();
            assert_eq!(module_head(&payload[..at + 10]).unwrap().head, &module[..10]);
            assert_eq!(module_head(&payload[..1]), None);
        }
        assert_eq!(module_head(&encode(&Request::Top)[4..]), None);
        // A first string longer than the frame so far: its second string has not arrived.
        let file = encode(&Request::GraftLoadFile {
            path: "p".repeat(300),
            point: "x".into(),
            wasm: vec![0; 8],
        });
        assert_eq!(module_head(&file[4..40]), None);
        let unbind = encode(&Request::StreamBind {
            path: "/s".into(),
            wasm: None,
        });
        assert_eq!(module_head(&unbind[4..]), None, "an unbind carries no module");
    }
}
