//! The SDK's example grafts, built from C with the system clang, running on the toy kernel. The
//! eviction and read-ahead grafts are written for the page cache's graftpoints and built for the
//! toy's (`vino_toykernel::build_options`).

use std::sync::Arc;
use vino_graft::abi::Extent;
use vino_graft::{Access, GraftSlot, Owner};
use vino_sdk::build_example;
use vino_toykernel::{Read, ToyApply, ToyComputeRa, ToyFile, ToyKernel, ToyPickVictim};

fn build(name: &str) -> Vec<u8> {
    build_example(name, &vino_toykernel::build_options()).unwrap_or_else(|e| panic!("building {name}: {e}"))
}

#[test]
fn null_graft_returns_its_argument() {
    let rt = vino_graft::Runtime::default();
    let slot: GraftSlot<ToyApply> = GraftSlot::new(&rt, Arc::new(ToyKernel::new(1)), Access::Process(1), None);
    slot.load(&build("null"), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&12345), 12345);
    assert_eq!(slot.stats().unwrap().invocations, 1);
}

#[test]
fn counter_graft_changes_state_and_an_invalid_result_rolls_it_back() {
    let rt = vino_graft::Runtime::default();
    let k = ToyKernel::new(1);
    let slot: GraftSlot<ToyApply> = GraftSlot::new(&rt, Arc::new(k.clone()), Access::Process(1), None);
    slot.load(&build("toy_counter"), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&5), 5);
    assert_eq!(slot.invoke(&5), 10);
    assert_eq!(
        slot.invoke(&-100),
        -100,
        "negative total is invalid: the default answers"
    );
    assert_eq!(k.snapshot(), vec![10], "and the write of -90 was undone");
}

#[test]
fn hot_list_graft_spares_hot_pages() {
    let rt = vino_graft::Runtime::default();
    let slot: GraftSlot<ToyPickVictim> = GraftSlot::new(&rt, Arc::new(ToyKernel::new(1)), Access::Process(1), None);
    slot.load(&build("hotlist_evict"), Owner::process(1)).unwrap();
    let lru: &[u64] = &[10, 11, 12, 13];
    assert_eq!(slot.invoke(&lru), 0, "nothing hot: the LRU page goes");
    slot.call_control("hot_add", &[10]).unwrap();
    slot.call_control("hot_add", &[11]).unwrap();
    assert_eq!(slot.invoke(&lru), 2, "first page not on the hot list");
    // The owner may also write the list straight into the graft's memory.
    let at = slot.symbol_address("hot_list").unwrap();
    let mut list = 4u64.to_le_bytes().to_vec();
    for p in [10u64, 11, 12, 13] {
        list.extend_from_slice(&p.to_le_bytes());
    }
    slot.write_memory(at, &list).unwrap();
    assert_eq!(
        slot.invoke(&lru),
        0,
        "everything hot: invalid, the default (LRU) decides"
    );
    assert_eq!(slot.stats().unwrap().failures, 1);
    slot.call_control("hot_clear", &[]).unwrap();
    assert_eq!(slot.invoke(&lru), 0);
}

#[test]
fn index_read_ahead_follows_the_application_index() {
    let rt = vino_graft::Runtime::default();
    let file = Arc::new(ToyFile::new(100 * 4096));
    let slot: GraftSlot<ToyComputeRa> = GraftSlot::new(&rt, file, Access::Process(1), Some("4"));
    slot.load(&build("index_readahead"), Owner::process(1)).unwrap();
    slot.call_control("ra_set_depth", &[2]).unwrap();
    // The application will read records at these offsets (208 bytes each), in this order.
    for off in [50 * 4096 + 16, 7 * 4096, 90 * 4096 + 4000, 3 * 4096] {
        slot.call_control("ra_push", &[off]).unwrap();
    }
    let after_first = slot.invoke(&Read {
        offset: 50 * 4096 + 16,
        len: 208,
    });
    assert_eq!(
        after_first.as_slice(),
        &[
            Extent {
                off: 7 * 4096,
                len: 4096
            },
            Extent {
                off: 90 * 4096,
                len: 4096
            }
        ]
    );
    let after_second = slot.invoke(&Read {
        offset: 7 * 4096,
        len: 208,
    });
    // Record three straddles two blocks: both are fetched (depth 2).
    assert_eq!(
        after_second.as_slice(),
        &[
            Extent {
                off: 90 * 4096,
                len: 4096
            },
            Extent {
                off: 91 * 4096,
                len: 4096
            }
        ]
    );
    assert_eq!(slot.stats().unwrap().failures, 0);
}

#[test]
fn sequential_graft_reads_ahead_only_on_sequential_reads() {
    let rt = vino_graft::Runtime::default();
    let file = Arc::new(ToyFile::new(64 * 4096));
    let slot: GraftSlot<ToyComputeRa> = GraftSlot::new(&rt, file, Access::Process(1), None);
    slot.load(&build("sequential_ra"), Owner::process(1)).unwrap();
    slot.call_control("seq_set_blocks", &[4]).unwrap();
    assert!(
        slot.invoke(&Read {
            offset: 8192,
            len: 4096
        })
        .is_empty(),
        "first read: not yet sequential"
    );
    let ra = slot.invoke(&Read {
        offset: 12288,
        len: 4096,
    });
    assert_eq!(
        ra.as_slice(),
        &[Extent {
            off: 16384,
            len: 4 * 4096
        }]
    );
    assert!(
        slot.invoke(&Read {
            offset: 40960,
            len: 4096
        })
        .is_empty(),
        "a jump is not sequential"
    );
    // Near the end of the file the window is clipped, never past EOF.
    slot.invoke(&Read {
        offset: 61 * 4096,
        len: 4096,
    });
    let tail = slot.invoke(&Read {
        offset: 62 * 4096,
        len: 4096,
    });
    assert_eq!(
        tail.as_slice(),
        &[Extent {
            off: 63 * 4096,
            len: 4096
        }]
    );
}

/// The random-read tool's sequence (SplitMix64 seeded with 7), as block offsets in a file of
/// `pages` blocks: what randread_ra.c expects.
fn randread_sequence(pages: u64, n: usize) -> Vec<u64> {
    let mut s: u64 = 7;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % pages * 4096
        })
        .collect()
}

#[test]
fn random_read_graft_prefetches_the_sequence_and_finds_it_again_after_skipped_reads() {
    let pages = 1024;
    let rt = vino_graft::Runtime::default();
    let file = Arc::new(ToyFile::new(pages * 4096));
    let slot: GraftSlot<ToyComputeRa> = GraftSlot::new(&rt, file, Access::Process(1), None);
    slot.load(&build("randread_ra"), Owner::process(1)).unwrap();
    let seq = randread_sequence(pages, 200);
    let read = |offset| slot.invoke(&Read { offset, len: 4096 });
    let ahead = |from: usize| -> Vec<Extent> {
        seq[from..from + 16]
            .iter()
            .map(|&off| Extent { off, len: 4096 })
            .collect()
    };
    assert_eq!(
        read(seq[0]).as_slice(),
        ahead(1).as_slice(),
        "the first read of the sequence"
    );
    // Reads 1-4 were served by Linux's cache and never came: read 5 is found 5 steps on.
    assert_eq!(
        read(seq[5]).as_slice(),
        ahead(6).as_slice(),
        "found again after skipped reads"
    );
    // Far ahead (past the graft's search) or off the sequence: nothing, and the place is kept.
    assert!(read(seq[150]).is_empty(), "150 steps on is not searched for");
    let off_sequence = (0..pages * 4096).step_by(4096).find(|o| !seq.contains(o)).unwrap();
    assert!(read(off_sequence).is_empty());
    assert_eq!(read(seq[6]).as_slice(), ahead(7).as_slice(), "the place was kept");
    assert_eq!(slot.stats().unwrap().failures, 0);
}
