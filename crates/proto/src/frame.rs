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

/// Decodes a frame's payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    postcard::from_bytes(payload).map_err(|e| FrameError::Decode(e.to_string()))
}

/// Writes `msg` as one frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    w.write_all(&encode(msg))
}

/// Reads one frame's payload into `buf` (replacing its contents). A length over `max` is
/// refused before `buf` grows.
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

/// Like [`read_frame`], for a caller that already read the 4-byte header.
pub fn read_frame_after_header(
    header: [u8; 4],
    r: &mut impl Read,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<(), FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len: len as u64, max });
    }
    buf.clear();
    buf.resize(len, 0);
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MAX_FRAME, OpenFlags, Payload, Request, Response};

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
        ];
        for r in &reqs {
            assert_eq!(&round_trip(r), r);
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
    }
}
