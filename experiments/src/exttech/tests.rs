//! Behavioural tests: every technology computes the same answers, and the
//! answers are right.

use super::interp::{Wasmi, WasmiModules};
use super::native::Native;
use super::process::{UpcallMode, UpcallServer};
use super::wasm::{EpochTicker, Interruption, WasmModules, Wasmtime};
use super::workloads::*;

/// An independent MD5 (RFC 1321) for checking the C one.
fn md5_reference(msg: &[u8]) -> [u8; 16] {
    let s: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14,
        20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6,
        10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4294967296.0) as u32)
        .collect();
    let mut st = [0x67452301u32, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut m = msg.to_vec();
    m.push(0x80);
    while m.len() % 64 != 56 {
        m.push(0);
    }
    m.extend_from_slice(&((msg.len() as u64).wrapping_mul(8)).to_le_bytes());
    for block in m.chunks_exact(64) {
        let x: Vec<u32> = block
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        let [mut a, mut b, mut c, mut d] = st;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let t = d;
            d = c;
            c = b;
            b = b.wrapping_add(
                a.wrapping_add(f)
                    .wrapping_add(k[i])
                    .wrapping_add(x[g])
                    .rotate_left(s[i]),
            );
            a = t;
        }
        st = [
            st[0].wrapping_add(a),
            st[1].wrapping_add(b),
            st[2].wrapping_add(c),
            st[3].wrapping_add(d),
        ];
    }
    let mut out = [0u8; 16];
    for (i, w) in st.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

fn md5_of<E: Extension + ?Sized>(e: &mut E, data: &[u8]) -> String {
    e.md5_load(data).unwrap();
    hex(&md5_run(e, data.len()).unwrap())
}

/// Runs `check` on every technology.
fn on_every_variant(mut check: impl FnMut(&str, &mut dyn Extension)) {
    let mut server = UpcallServer::spawn().expect("fork the upcall server");
    server.set_mode(UpcallMode::FutexSameCore).unwrap();
    check("process (futex)", &mut server);
    if server.supports(UpcallMode::Spin) {
        server.set_mode(UpcallMode::Spin).unwrap();
        check("process (spin)", &mut server);
        server.set_mode(UpcallMode::FutexSameCore).unwrap();
    }
    drop(server);

    check("native", &mut Native::new());

    let m = WasmModules::compile(Interruption::Epoch).unwrap();
    let ticker = EpochTicker::start(&m.engine);
    check("wasm", &mut Wasmtime::instantiate(&m).unwrap());
    drop(ticker);
    let m = WasmModules::compile(Interruption::Fuel).unwrap();
    check("wasm+fuel", &mut Wasmtime::instantiate(&m).unwrap());
    let m = WasmiModules::compile().unwrap();
    check("wasmi", &mut Wasmi::instantiate(&m).unwrap());
}

#[test]
fn reference_md5_is_right() {
    assert_eq!(hex(&md5_reference(b"abc")), MD5_ABC);
    assert_eq!(hex(&md5_reference(b"")), "d41d8cd98f00b204e9800998ecf8427e");
}

#[test]
fn md5_is_right_everywhere() {
    let vectors: [(&[u8], &str); 5] = [
        (b"", "d41d8cd98f00b204e9800998ecf8427e"),
        (b"abc", MD5_ABC),
        (b"message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
        (b"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"),
        (
            b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
            "57edf4a22be3c955ac49da2e2107b67a",
        ),
    ];
    let input = md5_input();
    let expected = hex(&md5_reference(&input));
    // A length that is not a multiple of the 8 KB invocation size or of 64.
    let odd = &input[..100_003];
    let expected_odd = hex(&md5_reference(odd));
    let mut seen = Vec::new();
    on_every_variant(|name, e| {
        for (msg, digest) in vectors {
            assert_eq!(
                md5_of(e, msg),
                digest,
                "{name}: MD5 of {:?}",
                String::from_utf8_lossy(msg)
            );
        }
        assert_eq!(md5_of(e, &input), expected, "{name}: MD5 of the 1 MB input");
        assert_eq!(md5_of(e, odd), expected_odd, "{name}: MD5 of 100,003 bytes");
        seen.push(name.to_string());
    });
    assert!(seen.len() >= 5, "variants checked: {seen:?}");
}

#[test]
fn hot_list_answers_agree() {
    let lists = candidate_lists();
    let mut answers = Vec::new();
    on_every_variant(|name, e| {
        hot_setup(e).unwrap();
        let hot: Vec<u32> = (0..HOT_LIST_LEN).map(|i| e.hl_page(i).unwrap()).collect();
        let mut distinct = hot.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), HOT_LIST_LEN as usize, "{name}: hot pages are distinct");
        assert!(
            hot.iter().all(|p| *p < HOT_MAX_PAGE),
            "{name}: hot pages are database pages"
        );
        let cold = (0..HOT_MAX_PAGE).find(|p| !hot.contains(p)).unwrap();
        // The graft skips hot candidates and accepts the first cold one.
        assert_eq!(e.hl_pick(&[cold, hot[0]]).unwrap(), 0, "{name}");
        assert_eq!(e.hl_pick(&[hot[5], hot[63], cold]).unwrap(), 2, "{name}");
        assert_eq!(e.hl_pick(&[hot[1], hot[2]]).unwrap(), 2, "{name}: every candidate hot");
        assert_eq!(e.hl_pick(&[]).unwrap(), 0, "{name}: no candidates");
        answers.push((name.to_string(), hot, hot_answer(e, &lists).unwrap()));
    });
    for (name, hot, a) in &answers[1..] {
        assert_eq!(hot, &answers[0].1, "{name} built a different hot list");
        assert_eq!(a, &answers[0].2, "{name} chose different victims");
    }
}

#[test]
fn logical_disk_answers_agree_with_the_model() {
    let expected = ld_reference_checksum(LD_WRITES, LD_SEED);
    let small = ld_reference_checksum(1000, 7);
    on_every_variant(|name, e| {
        assert_eq!(ld_run(e, false).unwrap(), expected, "{name}: one call");
        let live = e.ld_live_total().unwrap();
        assert!(live > 0 && live <= LD_WRITES, "{name}: {live} live blocks");
        assert_eq!(ld_run(e, true).unwrap(), expected, "{name}: one call per write");
        // The disk is full after 262,144 writes: the next one fails.
        assert_eq!(e.ld_write_next(1).unwrap(), u32::MAX, "{name}: disk full");
        e.ld_reset(7).unwrap();
        e.ld_write_next(1000).unwrap();
        assert_eq!(e.ld_checksum().unwrap(), small, "{name}: 1000 writes");
        assert_eq!(
            e.ld_live_total().unwrap() as usize,
            distinct_blocks(1000, 7),
            "{name}: live blocks"
        );
    });
}

/// Distinct logical blocks among the first `n` writes of the stream.
fn distinct_blocks(n: u32, seed: u32) -> usize {
    let mut rng = seed;
    let below = |r: &mut u32, b: u32| ((xorshift32(r) as u64 * b as u64) >> 32) as u32;
    let mut set = std::collections::HashSet::new();
    for _ in 0..n {
        let idx = if below(&mut rng, 10) < 8 {
            below(&mut rng, 262_144 / 5)
        } else {
            262_144 / 5 + below(&mut rng, 262_144 - 262_144 / 5)
        };
        set.insert(idx.wrapping_mul(0x9e37_79b1) & (262_144 - 1));
    }
    set.len()
}

#[test]
fn write_stream_is_skewed() {
    // 80% of the writes go to the hot fifth of the blocks.
    const BLOCKS: u32 = 262_144;
    const HOT: u32 = BLOCKS / 5;
    let mut rng = LD_SEED;
    let below = |r: &mut u32, b: u32| ((xorshift32(r) as u64 * b as u64) >> 32) as u32;
    let n = 100_000;
    let mut hot = 0;
    for _ in 0..n {
        let idx = if below(&mut rng, 10) < 8 {
            below(&mut rng, HOT)
        } else {
            HOT + below(&mut rng, BLOCKS - HOT)
        };
        if idx < HOT {
            hot += 1;
        }
    }
    let share = hot as f64 / n as f64;
    assert!((share - 0.8).abs() < 0.01, "hot share {share}");
}

#[test]
fn upcall_server_exits_and_reports_errors() {
    let mut s = UpcallServer::spawn().unwrap();
    s.set_mode(UpcallMode::FutexSameCore).unwrap();
    assert_eq!(s.nop(41).unwrap(), 41);
    // A feed outside the shared buffer is refused, not run.
    assert!(s.md5_feed(u32::MAX - 10, 100).is_err());
    assert_eq!(s.nop(42).unwrap(), 42);
    s.shutdown();
    assert!(s.nop(1).is_err(), "no server after shutdown");
}

#[test]
fn fuel_budget_is_armed_per_call() {
    let m = WasmModules::compile(Interruption::Fuel).unwrap();
    let mut w = Wasmtime::instantiate(&m).unwrap();
    // Many calls in a row never run out: the budget is re-armed each time.
    for i in 0..10_000 {
        assert_eq!(w.nop(i).unwrap(), i);
    }
}

#[test]
fn sandbox_stops_a_runaway_graft() {
    use super::wasm::{on_tick, sandbox_engine, sandbox_engine_with};
    let engine = sandbox_engine();
    let ticker = EpochTicker::start(&engine);
    let spin = wasmtime::Module::new(&engine, r#"(module (func (export "spin") (loop (br 0))))"#).unwrap();
    let mut store = wasmtime::Store::new(&engine, 5u64);
    store.epoch_deadline_callback(on_tick);
    store.set_epoch_deadline(1);
    let f = wasmtime::Instance::new(&mut store, &spin, &[])
        .unwrap()
        .get_typed_func::<(), ()>(&mut store, "spin")
        .unwrap();
    assert!(f.call(&mut store, ()).is_err(), "epoch budget interrupts the loop");
    drop(ticker);

    let engine = sandbox_engine_with(Interruption::Fuel);
    let spin = wasmtime::Module::new(&engine, r#"(module (func (export "spin") (loop (br 0))))"#).unwrap();
    let mut store = wasmtime::Store::new(&engine, 0u64);
    store.set_fuel(1_000_000).unwrap();
    store.set_epoch_deadline(1 << 60);
    let f = wasmtime::Instance::new(&mut store, &spin, &[])
        .unwrap()
        .get_typed_func::<(), ()>(&mut store, "spin")
        .unwrap();
    assert!(f.call(&mut store, ()).is_err(), "fuel runs out");
}
