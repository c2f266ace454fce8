//! The example stream grafts through [`Codec`], and the hostile ones. Needs the system clang.

use std::sync::{Arc, OnceLock};
use vino_graft::{LoadError, Runtime, check_module};
use vino_sdk::BuildOptions;
use vino_stream::{CHUNK, Codec, Encoded, FileStream, MAX_GROWTH, NONCE_BYTES, StreamError, fresh_nonce};

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(Runtime::default)
}

fn build_with(name: &str, opts: &BuildOptions) -> Vec<u8> {
    vino_sdk::build_example(name, opts).unwrap_or_else(|e| panic!("building {name}: {e}"))
}

fn codec(name: &str) -> Codec {
    Codec::load(runtime(), 1000, &build_with(name, &BuildOptions::default()))
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// A chunk of this crate's sources, repeated to `len` bytes.
fn text(len: usize) -> Vec<u8> {
    let src = include_str!("../src/lib.rs").as_bytes();
    src.iter().copied().cycle().take(len).collect()
}

/// `len` bytes no compressor shrinks (xorshift).
fn random(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

fn coded(e: Encoded) -> Vec<u8> {
    match e {
        Encoded::Coded(bytes) => bytes,
        Encoded::Raw => panic!("stored raw"),
    }
}

fn failed(r: Result<impl std::fmt::Debug, StreamError>) -> String {
    match r {
        Err(StreamError::Failed(why)) => why,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Round trip of `plain` as chunk `chunk`; returns what was stored.
fn round_trip(c: &Codec, chunk: u64, plain: &[u8]) -> Encoded {
    let nonce = fresh_nonce();
    let stored = c.encode(chunk, plain, &nonce).unwrap();
    let back = match &stored {
        Encoded::Coded(bytes) => c.decode(chunk, bytes, &nonce, plain.len()).unwrap(),
        Encoded::Raw => plain.to_vec(),
    };
    assert_eq!(back, plain);
    stored
}

#[test]
fn lz4_compresses_text_and_stores_random_data_raw() {
    let c = codec("lz4_stream");
    let t = text(CHUNK);
    let stored = coded(round_trip(&c, 0, &t));
    assert!(stored.len() < t.len() / 2, "{} bytes from {}", stored.len(), t.len());
    assert_eq!(round_trip(&c, 1, &random(CHUNK)), Encoded::Raw);
    assert_eq!(round_trip(&c, 2, &[]), Encoded::Raw);
    round_trip(&c, 3, &text(1000));
    // A corrupt block is refused, not decoded to garbage of the right length.
    let mut bad = stored.clone();
    bad.truncate(bad.len() / 2);
    failed(c.decode(0, &bad, &[0; NONCE_BYTES], CHUNK));
    // Decoding to another length than the chunk's fails.
    failed(c.decode(0, &stored, &[0; NONCE_BYTES], CHUNK - 1));
}

/// A codec of the ChaCha20-Poly1305 graft `opts` builds, keyed with `key`.
fn chacha(opts: &BuildOptions, key: &[u8; 32]) -> Codec {
    let c = Codec::load(runtime(), 1000, &build_with("chacha20poly1305_stream", opts)).unwrap();
    set_key(&c, key);
    c
}

fn set_key(c: &Codec, key: &[u8; 32]) {
    for (word, bytes) in key.chunks(8).enumerate() {
        let value = i64::from_le_bytes(bytes.try_into().unwrap());
        assert_eq!(c.slot().call_control("set_key", &[word as i64, value]).unwrap(), 0);
    }
}

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// RFC 8439, 2.8.2, through the graft built to take the 12 bytes of associated data from the
/// nonce's tail (the test vector's AD is not a chunk index).
#[test]
fn chacha_matches_the_rfc_8439_aead_test_vector() {
    let opts = BuildOptions {
        defines: vec![("CHACHA_AD_FROM_NONCE".into(), None)],
        ..BuildOptions::default()
    };
    let key: [u8; 32] = std::array::from_fn(|i| 0x80 + i as u8);
    let c = chacha(&opts, &key);
    let nonce: [u8; NONCE_BYTES] = unhex("07000000 4041424344454647 50515253c0c1c2c3c4c5c6c7")
        .try_into()
        .unwrap();
    let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
    let want = unhex(
        "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b
         1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc
         3ff4def08e4b7a9de576d26586cec64b6116 1ae10b594f09e26a7e902ecbd0600691",
    );
    let sealed = coded(c.encode(7, plain, &nonce).unwrap());
    assert_eq!(sealed, want);
    assert_eq!(c.decode(7, &sealed, &nonce, plain.len()).unwrap(), plain);
}

#[test]
fn chacha_seals_chunks_to_their_index_and_refuses_tampering() {
    let key = [0x42; 32];
    let c = chacha(&BuildOptions::default(), &key);
    let plain = text(CHUNK);
    let nonce = fresh_nonce();
    let sealed = coded(c.encode(5, &plain, &nonce).unwrap());
    assert_eq!(sealed.len(), CHUNK + 16);
    assert_ne!(&sealed[..CHUNK], &plain[..]);
    assert_eq!(c.decode(5, &sealed, &nonce, CHUNK).unwrap(), plain);
    round_trip(&c, 6, &random(1234));
    round_trip(&c, 7, &[]);
    // A fresh nonce gives other bytes for the same chunk.
    assert_ne!(coded(c.encode(5, &plain, &fresh_nonce()).unwrap()), sealed);
    for at in [0, CHUNK / 2, CHUNK + 3] {
        let mut tampered = sealed.clone();
        tampered[at] ^= 1;
        failed(c.decode(5, &tampered, &nonce, CHUNK));
    }
    failed(c.decode(6, &sealed, &nonce, CHUNK));
    let mut other_nonce = nonce;
    other_nonce[0] ^= 1;
    failed(c.decode(5, &sealed, &other_nonce, CHUNK));
    // Another key cannot open it; the refusals did not unload the graft.
    let other = chacha(&BuildOptions::default(), &[0x43; 32]);
    failed(other.decode(5, &sealed, &nonce, CHUNK));
    assert_eq!(c.decode(5, &sealed, &nonce, CHUNK).unwrap(), plain);
}

#[test]
fn chacha_without_its_key_answers_need_key() {
    let c = codec("chacha20poly1305_stream");
    let nonce = fresh_nonce();
    // Many times: not having a key is not a failure that unloads the graft.
    for _ in 0..20 {
        assert_eq!(c.encode(0, b"secret", &nonce), Err(StreamError::NeedKey));
        assert_eq!(c.decode(0, &[0; 22], &nonce, 6), Err(StreamError::NeedKey));
    }
    // Three of the four words are not a key.
    c.slot().call_control("set_key", &[0, 1]).unwrap();
    c.slot().call_control("set_key", &[1, 2]).unwrap();
    c.slot().call_control("set_key", &[2, 3]).unwrap();
    assert_eq!(c.encode(0, b"secret", &nonce), Err(StreamError::NeedKey));
    assert_eq!(c.slot().call_control("set_key", &[4, 0]).unwrap(), -1);
    c.slot().call_control("set_key", &[3, 4]).unwrap();
    let sealed = coded(c.encode(0, b"secret", &nonce).unwrap());
    assert_eq!(c.decode(0, &sealed, &nonce, 6).unwrap(), b"secret");
    c.slot().call_control("forget_key", &[]).unwrap();
    assert_eq!(c.decode(0, &sealed, &nonce, 6), Err(StreamError::NeedKey));
}

#[test]
fn crc32c_turns_corruption_into_a_failure() {
    let c = codec("crc32c_stream");
    let plain = text(CHUNK);
    let nonce = fresh_nonce();
    let stored = coded(c.encode(9, &plain, &nonce).unwrap());
    assert_eq!(stored.len(), CHUNK + 4);
    assert_eq!(&stored[..CHUNK], &plain[..]);
    assert_eq!(c.decode(9, &stored, &nonce, CHUNK).unwrap(), plain);
    round_trip(&c, 10, &random(CHUNK));
    round_trip(&c, 11, &random(17));
    round_trip(&c, 12, &[]);
    for at in [0, 4097, CHUNK + 2] {
        let mut flipped = stored.clone();
        flipped[at] ^= 0x10;
        failed(c.decode(9, &flipped, &nonce, CHUNK));
    }
    failed(c.decode(8, &stored, &nonce, CHUNK));
    failed(c.decode(9, &stored[..CHUNK], &nonce, CHUNK - 4));
    // The tag is CRC-32C (Castagnoli) of the index's 8 bytes and the chunk.
    let covered: Vec<u8> = 9u64.to_le_bytes().iter().chain(&plain).copied().collect();
    assert_eq!(stored[CHUNK..], crc32c(&covered).to_le_bytes());
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
}

/// CRC-32C bit by bit.
fn crc32c(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &b| {
        (0..8).fold(crc ^ u32::from(b), |c, _| {
            (c >> 1) ^ (0x82f6_3b78 & (c & 1).wrapping_neg())
        })
    })
}

#[test]
fn the_examples_check_at_file_stream_and_other_grafts_do_not() {
    for name in ["lz4_stream", "chacha20poly1305_stream", "crc32c_stream"] {
        let wasm = build_with(name, &BuildOptions::default());
        let summary = check_module::<FileStream>(runtime(), &wasm).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            summary.uses_arg_area && summary.imports.is_empty(),
            "{name}: {summary:?}"
        );
    }
    let null = build_with("null", &BuildOptions::default());
    assert!(matches!(
        check_module::<FileStream>(runtime(), &null),
        Err(LoadError::MissingEntry { .. })
    ));
}

#[test]
fn a_stream_graft_gets_no_clock() {
    let wasm = build_with("stream_clock", &BuildOptions::default());
    for err in [
        check_module::<FileStream>(runtime(), &wasm).unwrap_err(),
        Codec::load(runtime(), 1000, &wasm).err().unwrap(),
    ] {
        assert!(
            matches!(&err, LoadError::ForbiddenImport { name, point, .. } if name == "vino_now_ns" && point == "file.stream"),
            "{err}"
        );
        assert!(!err.to_string().contains("allowed: vino.vino_now_ns"), "{err}");
    }
}

#[test]
fn an_argument_area_smaller_than_two_chunks_is_refused() {
    let entry = r#"(func (export "file_stream") (param i32 i64 i32) (result i32) i32.const 0)"#;
    // Inside a memory of one page: the load sees it does not fit.
    let small =
        format!(r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024)) {entry})"#);
    let err = Codec::load(runtime(), 1000, small.as_bytes()).err().unwrap();
    assert!(err.to_string().contains(&vino_stream::ARG_BYTES.to_string()), "{err}");
    // A memory that may never grow that large: the check alone sees it.
    let capped =
        format!(r#"(module (memory (export "memory") 1 2) (global (export "vino_args") i32 (i32.const 0)) {entry})"#);
    let err = check_module::<FileStream>(runtime(), capped.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("139328 bytes"), "{err}");
    // Three pages hold it.
    let fits =
        format!(r#"(module (memory (export "memory") 3) (global (export "vino_args") i32 (i32.const 0)) {entry})"#);
    Codec::load(runtime(), 1000, fits.as_bytes()).unwrap();
}

#[test]
fn output_past_the_growth_bound_is_refused() {
    let c = codec("stream_overflow");
    let why = failed(c.encode(0, &text(100), &fresh_nonce()));
    assert!(why.contains(&format!("{}", 100 + MAX_GROWTH + 1)), "{why}");
    failed(c.encode(0, &[], &fresh_nonce()));
}

#[test]
fn a_looping_graft_fails_the_chunk_and_the_next_goes_through() {
    let c = codec("stream_loop");
    let why = failed(c.encode(0, b"Loop", &fresh_nonce()));
    assert!(why.contains("budget"), "{why}");
    assert_eq!(coded(c.encode(1, b"fine", &fresh_nonce()).unwrap()), b"fine");
}

#[test]
fn a_graft_trapping_after_part_of_its_output_returns_nothing() {
    let c = codec("stream_partial_trap");
    let mut plain = text(CHUNK);
    plain[0] = b'T';
    failed(c.encode(0, &plain, &fresh_nonce()));
    failed(c.decode(0, &plain, &fresh_nonce(), CHUNK));
    plain[0] = b'x';
    assert_eq!(coded(c.encode(1, &plain, &fresh_nonce()).unwrap()), plain);
}

#[test]
fn a_decode_to_another_length_fails() {
    let c = codec("stream_wrong_length");
    let nonce = fresh_nonce();
    let stored = coded(c.encode(0, &text(500), &nonce).unwrap());
    let why = failed(c.decode(0, &stored, &nonce, 500));
    assert!(why.contains("499"), "{why}");
}

#[test]
fn a_graft_that_keeps_failing_is_unloaded_and_nothing_falls_back() {
    let c = codec("stream_partial_trap");
    let mut plain = text(64);
    plain[0] = b'T';
    for _ in 0..runtime().config().max_consecutive_failures {
        failed(c.encode(0, &plain, &fresh_nonce()));
    }
    assert_eq!(c.slot().policy_kind(), vino_graft::PolicyKind::Default);
    plain[0] = b'x';
    assert_eq!(failed(c.encode(0, &plain, &fresh_nonce())), "no codec");
}

#[test]
fn chunks_out_of_bounds_never_reach_the_graft() {
    let c = codec("crc32c_stream");
    failed(c.encode(0, &vec![0; CHUNK + 1], &fresh_nonce()));
    failed(c.decode(0, &vec![0; vino_stream::MAX_ENCODED + 1], &fresh_nonce(), CHUNK));
    failed(c.decode(0, &[0; 8], &fresh_nonce(), CHUNK + 1));
    assert_eq!(c.slot().stats().unwrap().invocations, 0);
}

#[test]
fn many_threads_share_one_codec() {
    let c = Arc::new(codec("crc32c_stream"));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..16 {
                    let plain = random(4096 + (t * 16 + i) as usize);
                    round_trip(&c, t * 100 + i, &plain);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
