//! `vino bench vm-join`'s join at CI size as a VINO process, with the default policy and with the
//! look-ahead graft: the join's result is right both ways (every record checked by the program,
//! the pairs against the relations `wisconsin.rs` generates), pages came back from swap, and the
//! pager took the graft's answers (evictions chosen by the graft, none refused) and none without
//! it. Speed is not checked.

use vino_experiments::vm_join::{VinoSide, VmJoinOptions, expected_checksum};

#[test]
fn the_join_in_program_memory_is_right_and_the_graft_chooses_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let opts = VmJoinOptions::new(true);
    let vino = VinoSide::new(dir.path(), opts.limit_bytes, opts.swap_bytes).unwrap();
    let expected = expected_checksum(opts.tuples);
    for lookahead in [0, opts.lookahead] {
        let run = vino.run(opts.tuples, lookahead).unwrap();
        assert_eq!(run.matches, u64::from(opts.tuples), "{run:?}");
        assert_eq!(run.checksum, expected, "{run:?}");
        let Some(by_graft) = run.evicted_by_graft else {
            eprintln!("programs' memory is not paged here (no userfaultfd): the graft is not exercised");
            return;
        };
        assert!(
            run.major_faults > 0 && run.swap_ins > Some(0),
            "nothing came back from swap: {run:?}"
        );
        if lookahead == 0 {
            assert_eq!(by_graft, 0, "{run:?}");
        } else {
            assert!(by_graft > 0, "the graft chose no eviction: {run:?}");
            assert_eq!(run.graft_refused, Some(0), "{run:?}");
        }
    }
}
