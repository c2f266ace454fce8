//! The `file.block_buddy` graftpoint: FFS's default placement with its switch at the first
//! indirect block, NoSwitch as a native policy and as a C graft, bad grafts, who may graft.

mod common;
use common::*;
use std::sync::Arc;
use vino_fs::*;
use vino_graft::{Access, Namespace, Owner, PolicyKind, Principal};

const CREATOR: u64 = 77;

/// A 256 KB file (64 blocks) written on a fresh file system of four 1024-block groups, with
/// `bind` choosing its placement policy first. Returns the device blocks of its file blocks, the
/// file system, and the blocks per group.
fn layout(bind: impl FnOnce(&FileSystem, u64)) -> (Vec<u64>, Arc<FileSystem>) {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let ino = fs.create(fs.root(), "f", &NewFile::by(CREATOR)).unwrap();
    bind(&fs, ino);
    fs.write_at(ino, 0, &pattern(5, 256 * 1024)).unwrap();
    fs.fsync(ino).unwrap();
    assert_eq!(read_all(&fs, ino), pattern(5, 256 * 1024));
    assert_clean(&**fs.device(), "after the write");
    (fs.block_map(ino).unwrap(), fs)
}

fn contiguous(blocks: &[u64]) -> bool {
    blocks.windows(2).all(|w| w[1] == w[0] + 1)
}

fn noswitch_graft() -> Vec<u8> {
    let path = vino_sdk::example_path("noswitch");
    vino_sdk::build_c_bytes(&path, &vino_sdk::BuildOptions::default())
        .unwrap_or_else(|e| panic!("building {}: {e}", path.display()))
}

#[test]
fn default_placement_switches_group_at_the_first_indirect_block() {
    let (map, fs) = layout(|_, _| {});
    let geo = fs.geometry();
    let g = |b: u64| geo.group_of(b);
    assert!(contiguous(&map[..12]), "direct blocks together: {:?}", &map[..12]);
    assert!(contiguous(&map[12..]), "the rest together: {:?}", &map[12..]);
    assert_ne!(g(map[11]), g(map[12]), "block 12 goes to another group: {map:?}");
    assert_eq!(
        map[12],
        geo.data_start(g(map[12])) + 1,
        "after its indirect block, at the group's start"
    );
    let st = fs.stats();
    assert_eq!(st.alloc.placements_default, 64);
    assert_eq!(st.alloc.placements_grafted, 0);
}

#[test]
fn native_noswitch_keeps_the_file_contiguous() {
    let (map, fs) = layout(|fs, ino| fs.block_buddy(ino).unwrap().bind_native(Arc::new(NoSwitch), false));
    assert!(contiguous(&map[..12]) && contiguous(&map[12..]), "{map:?}");
    assert_eq!(map[12], map[11] + 2, "only the indirect block between blocks 11 and 12");
    assert_eq!(fs.geometry().group_of(map[0]), fs.geometry().group_of(map[63]));
    assert_eq!(fs.stats().alloc.placements_grafted, 64);
}

#[test]
fn c_graft_places_exactly_as_the_native_noswitch() {
    let wasm = noswitch_graft();
    let (native, _) = layout(|fs, ino| fs.block_buddy(ino).unwrap().bind_native(Arc::new(NoSwitch), false));
    let (grafted, fs) = layout(|fs, ino| {
        let slot = fs.block_buddy(ino).unwrap();
        slot.load(&wasm, Owner::process(CREATOR)).unwrap();
        assert_eq!(slot.policy_kind(), PolicyKind::Wasm);
    });
    assert_eq!(grafted, native);
    let slot = fs.block_buddy(fs.resolve("/f").unwrap()).unwrap();
    let stats = slot.stats().unwrap();
    assert_eq!(stats.invocations, 64);
    assert_eq!(stats.failures, 0);
    let (default, _) = layout(|_, _| {});
    assert_ne!(grafted, default);
    assert_eq!(
        grafted[..12],
        default[..12],
        "the graft changes nothing before block 12"
    );
}

#[test]
fn later_switches_stay_with_noswitch() {
    // maxbpg is a quarter of a group (256 blocks): FFS switches again at block 12 + 256, and so
    // does NoSwitch, which only removes the switch at block 12.
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let ino = fs.create(fs.root(), "f", &NewFile::by(CREATOR)).unwrap();
    fs.block_buddy(ino).unwrap().bind_native(Arc::new(NoSwitch), false);
    fs.write_at(ino, 0, &pattern(9, (12 + 300) * 4096)).unwrap();
    let map = fs.block_map(ino).unwrap();
    let geo = fs.geometry();
    assert_eq!(geo.group_of(map[11]), geo.group_of(map[12]));
    assert!(contiguous(&map[12..12 + 256]));
    assert_ne!(
        geo.group_of(map[12 + 255]),
        geo.group_of(map[12 + 256]),
        "switch at maxbpg"
    );
}

#[test]
fn invalid_graft_answers_fall_back_to_the_default() {
    let (default, _) = layout(|_, _| {});
    for answer in ["-5", "4096", "9223372036854775807"] {
        let wat = format!(
            r#"(module (memory (export "memory") 1)
                 (func (export "file_block_buddy") (param i64 i64 i64 i32 i32 i64) (result i64)
                   i64.const {answer}))"#
        );
        let (map, fs) = layout(|fs, ino| {
            fs.block_buddy(ino)
                .unwrap()
                .load(wat.as_bytes(), Owner::process(CREATOR))
                .unwrap();
        });
        assert_eq!(map, default, "answer {answer}");
        let slot = fs.block_buddy(fs.resolve("/f").unwrap()).unwrap();
        // The graft kept failing, so the runtime unloaded it after its failure limit.
        assert_eq!(slot.policy_kind(), PolicyKind::Default, "answer {answer}");
    }
    // A trapping graft too.
    let wat = r#"(module (memory (export "memory") 1)
                 (func (export "file_block_buddy") (param i64 i64 i64 i32 i32 i64) (result i64) unreachable))"#;
    let (map, _) = layout(|fs, ino| {
        fs.block_buddy(ino)
            .unwrap()
            .load(wat.as_bytes(), Owner::process(CREATOR))
            .unwrap();
    });
    assert_eq!(map, default);
}

#[test]
fn only_the_creator_may_graft_and_the_graftpoint_goes_with_the_file() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let ino = fs.create(fs.root(), "f", &NewFile::by(CREATOR)).unwrap();
    let slot = fs.block_buddy(ino).unwrap();
    assert_eq!(slot.access(), Access::Process(CREATOR));
    assert_eq!(slot.name(), format!("file.block_buddy/{ino}"));
    let ns = Namespace::new();
    ns.register(slot.clone());
    let wasm = noswitch_graft();
    let name = slot.name().to_string();
    let stranger = Principal {
        process: CREATOR + 1,
        privileged: true,
    };
    assert!(ns.load(stranger, &name, &wasm, Owner::process(CREATOR + 1)).is_err());
    ns.load(
        Principal {
            process: CREATOR,
            privileged: false,
        },
        &name,
        &wasm,
        Owner::process(CREATOR),
    )
    .unwrap();
    assert!(Arc::ptr_eq(&fs.block_buddy(ino).unwrap(), &slot), "one slot per file");
    // The creator is on disk: the same rule after a remount.
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(fs.block_buddy(ino).unwrap().access(), Access::Process(CREATOR));
    fs.unlink(fs.root(), "f").unwrap();
    assert_eq!(
        fs.block_buddy(ino).map(|_| ()).map_err(|e| e.kind()),
        Err(FsErrorKind::NotFound)
    );
    assert_eq!(
        fs.block_buddy(fs.root()).map(|_| ()).map_err(|e| e.kind()),
        Err(FsErrorKind::IsADirectory)
    );
}
