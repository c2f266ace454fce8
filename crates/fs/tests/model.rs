//! Model-based tests: random sequences of namespace and data operations on the file system and
//! on an in-memory model; every outcome, the whole tree and every byte must agree, and fsck must
//! find nothing wrong, also after unmount and mount.

mod common;
#[path = "common/model.rs"]
mod model;

use common::*;
use model::*;
use proptest::prelude::*;
use vino_fs::MountOptions;

fn path() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec!["a", "b", "c", "d"]);
    prop::collection::vec(name, 1..=3).prop_map(|v| format!("/{}", v.join("/")))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => path().prop_map(Op::Create),
        2 => path().prop_map(Op::Mkdir),
        5 => (path(), 0u64..90_000, 0usize..30_000, any::<u64>())
            .prop_map(|(path, offset, len, seed)| Op::Write { path, offset, len, seed }),
        2 => (path(), 0u64..100_000).prop_map(|(path, size)| Op::Truncate { path, size }),
        2 => path().prop_map(Op::Unlink),
        1 => path().prop_map(Op::UnlinkKeep),
        1 => (path(), any::<u8>(), prop_oneof![1usize..140, 1usize..4096])
            .prop_map(|(path, seed, len)| Op::Symlink { path, seed, len }),
        1 => path().prop_map(Op::Mknod),
        1 => (path(), 0u64..90_000, 0u64..40_000, any::<bool>())
            .prop_map(|(path, offset, len, keep_size)| Op::Fallocate { path, offset, len, keep_size }),
        1 => (path(), 0u64..90_000, 0u64..40_000).prop_map(|(path, offset, len)| Op::PunchHole { path, offset, len }),
        1 => (path(), 0u64..90_000, 0u64..40_000, any::<bool>())
            .prop_map(|(path, offset, len, keep_size)| Op::ZeroRange { path, offset, len, keep_size }),
        1 => (path(), any::<u64>()).prop_map(|(path, seed)| Op::SetXattr { path, seed }),
        2 => path().prop_map(Op::Rmdir),
        3 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => path().prop_map(Op::Fsync),
        1 => Just(Op::Sync),
        1 => Just(Op::Remount),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn file_system_matches_the_model(ops in prop::collection::vec(op(), 1..60), small_commits in any::<bool>()) {
        let dev = fresh(4096, &small_opts(512));
        let opts = MountOptions { commit_blocks: small_commits.then_some(4), ..MountOptions::default() };
        let mut fs = mount_with(&dev, &opts);
        let mut m = Model::default();
        for (i, op) in ops.iter().enumerate() {
            if *op == Op::Remount {
                fs.unmount().unwrap();
                assert_clean(&*dev, &format!("after op {i} (unmount)"));
                fs = mount_with(&dev, &opts);
                continue;
            }
            let want = run_model(&mut m, op);
            let got = run_fs(&fs, op);
            prop_assert_eq!(got, want, "op {} {:?}", i, op);
            fs.verify_quota().unwrap();
        }
        check_equal(&fs, &m, "end of sequence");
        fs.sync().unwrap();
        assert_clean(&*dev, "end of sequence (synced, mounted)");
        fs.unmount().unwrap();
        assert_clean(&*dev, "after unmount");
        let fs = mount_with(&dev, &opts);
        check_equal(&fs, &m, "after remount");
    }
}
