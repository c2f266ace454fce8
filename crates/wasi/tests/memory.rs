//! Programs' memory paged by the kernel: a program whose memory is larger than its resident
//! limit keeps every byte (its pages go to swap on VINO's file system and come back), its
//! `vas.pick_victim` and `vm.fault_around` grafts decide within their bounds and a hostile one
//! changes nothing but its own speed, a program out of swap ends alone with that reason, and
//! nothing is held once programs end.

mod common;

use std::path::Path;
use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_kernel::account::{LimitsConfig, Resource};
use vino_kernel::storage::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, GraftCall, Kernel, KernelConfig};
use vino_wasi::{Exit, Program, ProgramLimits, Setup};

const MIB: u64 = 1 << 20;

fn build(name: &str) -> Vec<u8> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.wasm"));
    vino_sdk::build_program(&[src], &out, &Default::default()).unwrap_or_else(|e| panic!("building {name}.c: {e}"));
    std::fs::read(out).unwrap()
}

/// A kernel on a 256 MiB in-memory disk whose processes keep `resident` bytes in frames and
/// whose users have `swap` bytes of swap each.
fn boot(resident: u64, swap: u64) -> (Arc<MemDevice>, Arc<Kernel>) {
    let dev = Arc::new(MemDevice::new(65536));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let mut limits = LimitsConfig::default();
    limits.process.set(Resource::ResidentBytes, resident);
    limits.user.set(Resource::SwapBytes, swap);
    let config = KernelConfig {
        cache_frames: 2048,
        limits,
        ..KernelConfig::default()
    };
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    (dev, kernel)
}

/// Runs the memory program with `args` as `uid`, with `graft` (point, module) loaded first.
fn run(k: &Arc<Kernel>, program: &Program, uid: u32, args: &[&str], grafts: &[(&str, &str)]) -> (Exit, String) {
    let cred = if uid == 0 {
        Credentials::root()
    } else {
        Credentials::user(uid, uid)
    };
    let process = k.spawn(cred);
    for (point, wat) in grafts {
        process
            .graft(
                point,
                GraftCall::Load {
                    wasm: wat.as_bytes().to_vec(),
                },
            )
            .unwrap_or_else(|e| panic!("loading the {point} graft: {e}"));
    }
    let pid = process.pid();
    let mut argv = vec![b"memory".to_vec()];
    argv.extend(args.iter().map(|a| a.as_bytes().to_vec()));
    let (stdio, out, _err) = common::stdio(Vec::new());
    let exit = program
        .run_in(process, Setup::new(argv, Vec::new()), stdio, &program.kill_switch())
        .unwrap();
    k.exit(pid);
    (exit, out.text())
}

fn paged(k: &Kernel) -> bool {
    let paged = k.pager_stats().is_some();
    if !paged {
        eprintln!("skipped: programs' memory is not paged here (no userfaultfd)");
    }
    paged
}

/// Nothing held by the pager, the swap charged to none of `uids`, the image clean.
fn nothing_held(dev: &MemDevice, k: &Arc<Kernel>, uids: &[u32]) {
    let s = k.pager_stats().unwrap();
    assert_eq!((s.memories, s.frames, s.staged, s.swap_in_use), (0, 0, 0, 0), "{s:?}");
    for &uid in uids {
        let probe = k.spawn(Credentials::user(uid, uid));
        let user = probe.account().parent().unwrap().clone();
        k.exit(probe.pid());
        assert_eq!(user.used(Resource::SwapBytes), 0, "swap still charged to uid {uid}");
    }
    common::fsck(dev, k);
}

#[test]
fn a_program_larger_than_its_resident_limit_keeps_every_byte() {
    let (dev, k) = boot(4 * MIB, 256 * MIB);
    let program = Program::compile(&build("memory"), ProgramLimits::default()).unwrap();
    let (exit, out) = run(&k, &program, 1000, &["24", "2"], &[]);
    if !paged(&k) {
        return;
    }
    assert_eq!(exit, Exit::Code(0), "{out}");
    assert!(out.contains("memory ok 24 MiB"), "{out}");
    let s = k.pager_stats().unwrap();
    assert!(s.swap_outs > 4000 && s.swap_ins > 4000, "24 MiB through 4: {s:?}");
    nothing_held(&dev, &k, &[1000]);
}

/// `vas.pick_victim` over the program's pages: the newest candidate (a valid, if poor, choice).
const NEWEST: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
    (func (export "vas_pick_victim") (param i32) (result i32)
      (if (result i32) (i32.gt_s (local.get 0) (i32.const 0))
        (then (i32.sub (local.get 0) (i32.const 1))) (else (i32.const 0)))))"#;
/// An index far past the candidates.
const OUT_OF_RANGE: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
    (func (export "vas_pick_victim") (param i32) (result i32) (i32.const 100000)))"#;
/// Never answers.
const LOOPS: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
    (func (export "vas_pick_victim") (param i32) (result i32) (loop (br 0)) (i32.const 0)))"#;
/// Eight pages from the faulting one, clipped at the end of memory.
const AROUND_8: &str = r#"(module (memory (export "memory") 1)
    (func (export "vm_fault_around") (param i64 i64) (result i64)
      (local $n i64)
      (local.set $n (i64.sub (local.get 1) (local.get 0)))
      (if (i64.gt_u (local.get $n) (i64.const 8)) (then (local.set $n (i64.const 8))))
      (i64.or (i64.shl (local.get 0) (i64.const 32)) (local.get $n))))"#;
/// Everything: the whole memory from page 0.
const AROUND_ALL: &str = r#"(module (memory (export "memory") 1)
    (func (export "vm_fault_around") (param i64 i64) (result i64) (local.get 1)))"#;

#[test]
fn grafts_on_program_pages_decide_within_bounds_and_hostile_ones_change_nothing_but_speed() {
    let (dev, k) = boot(2 * MIB, 256 * MIB);
    let program = Program::compile(&build("memory"), ProgramLimits::default()).unwrap();
    let cases: [(&str, &[(&str, &str)]); 5] = [
        ("newest-first eviction", &[("vas.pick_victim", NEWEST)]),
        ("an out-of-range victim", &[("vas.pick_victim", OUT_OF_RANGE)]),
        ("a victim graft that loops", &[("vas.pick_victim", LOOPS)]),
        ("fault-around of 8", &[("vm.fault_around", AROUND_8)]),
        ("fault-around of everything", &[("vm.fault_around", AROUND_ALL)]),
    ];
    for (what, grafts) in cases {
        let before = k.pager_stats();
        let (exit, out) = run(&k, &program, 1000, &["6", "2"], grafts);
        if !paged(&k) {
            return;
        }
        assert_eq!(exit, Exit::Code(0), "{what}: {out}");
        let after = k.pager_stats().unwrap();
        assert!(after.swap_outs > before.map_or(0, |b| b.swap_outs), "{what}: paged");
    }
    nothing_held(&dev, &k, &[1000]);
}

/// The page alone.
const AROUND_1: &str = r#"(module (memory (export "memory") 1)
    (func (export "vm_fault_around") (param i64 i64) (result i64)
      (i64.or (i64.shl (local.get 0) (i64.const 32)) (i64.const 1))))"#;

#[test]
fn fault_around_saves_faults() {
    let (_dev, k) = boot(64 * MIB, 256 * MIB);
    let program = Program::compile(&build("memory"), ProgramLimits::default()).unwrap();
    let faults = |grafts: &[(&str, &str)]| {
        let before = k.pager_stats().map_or(0, |s| s.faults);
        let (exit, _) = run(&k, &program, 1000, &["8", "1"], grafts);
        assert_eq!(exit, Exit::Code(0));
        k.pager_stats().map(|s| s.faults - before)
    };
    let Some(alone) = faults(&[("vm.fault_around", AROUND_1)]) else {
        paged(&k);
        return;
    };
    let around = faults(&[("vm.fault_around", AROUND_8)]).unwrap();
    let default = faults(&[]).unwrap();
    assert!(
        around * 3 < alone,
        "fault-around of 8: {around} faults against {alone} alone"
    );
    assert!(
        default * 3 < alone,
        "the default's cluster: {default} faults against {alone} alone"
    );
}

#[test]
fn a_program_out_of_swap_ends_alone_with_that_reason() {
    let (dev, k) = boot(2 * MIB, 2 * MIB);
    let program = Program::compile(&build("memory"), ProgramLimits::default()).unwrap();
    let hog = {
        let (k, program) = (k.clone(), program.clone());
        std::thread::spawn(move || run(&k, &program, 1000, &["32", "1"], &[]))
    };
    let (exit, out) = run(&k, &program, 1001, &["3", "2"], &[]);
    let (hog_exit, _) = hog.join().unwrap();
    if !paged(&k) {
        return;
    }
    assert_eq!(exit, Exit::Code(0), "the other user's program: {out}");
    assert_eq!(hog_exit, Exit::OutOfSwap);
    assert!(hog_exit.reason().unwrap().contains("out of swap"));
    nothing_held(&dev, &k, &[1000, 1001]);
}

#[test]
fn a_power_cut_with_pages_in_swap_loses_nothing_fsynced_and_frees_the_swap() {
    let (dev, k) = boot(2 * MIB, 256 * MIB);
    let root = k.spawn(Credentials::root());
    let fd = root.open("/kept", vino_kernel::OpenFlags::create()).unwrap();
    root.write(fd, b"durable before the cut").unwrap();
    root.fsync(fd).unwrap();
    root.close(fd).unwrap();
    k.exit(root.pid());
    let program = Program::compile(&build("memory"), ProgramLimits::default()).unwrap();
    // Its pages go to swap; the kernel is then cut off with the swap area still on the disk.
    let (exit, out) = run(&k, &program, 1000, &["16", "1"], &[]);
    if !paged(&k) {
        return;
    }
    assert_eq!(exit, Exit::Code(0), "{out}");
    assert!(k.pager_stats().unwrap().swap_outs > 0);
    // The swap area (a file with no name, on the orphan list) is durable, then the power goes.
    k.sync().unwrap();
    let cut = Arc::new(MemDevice::from_image(dev.durable_image()).unwrap());
    drop(k);
    let again = Kernel::boot(cut.clone() as Arc<dyn BlockDevice>, &KernelConfig::default()).unwrap();
    let reader = again.spawn(Credentials::root());
    let fd = reader.open("/kept", vino_kernel::OpenFlags::read_only()).unwrap();
    let mut buf = [0u8; 64];
    let n = reader.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"durable before the cut");
    reader.close(fd).unwrap();
    let names: Vec<String> = reader
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with(".vino-swap")), "{names:?}");
    again.exit(reader.pid());
    assert!(
        again.fs_stats().orphans_freed_at_mount >= 1,
        "the swap area was freed at mount"
    );
    common::fsck(&cut, &again);
}

/// Runs the mapping program in `mode` over `file` as root.
fn map_run(k: &Arc<Kernel>, program: &Program, mode: &str, file: &str, pages: &str) -> (Exit, String) {
    run(k, program, 0, &[mode, file, pages], &[])
}

#[test]
fn mapped_files_read_write_and_stay_coherent_with_read_and_write() {
    let (dev, k) = boot(MIB, 256 * MIB);
    let program = Program::compile(&build("mmap"), ProgramLimits::default()).unwrap();
    for (mode, pages) in [
        ("coherent", "3"),
        ("private", "3"),
        ("readinto", "1"),
        ("unlinked", "2"),
        // 2 MiB through a 1 MiB resident limit: clean pages dropped and read again, changed
        // ones written back as they go.
        ("big", "512"),
        ("shared", "512"),
    ] {
        let (exit, out) = map_run(&k, &program, mode, &format!("/{mode}"), pages);
        if !paged(&k) {
            return;
        }
        assert_eq!(exit, Exit::Code(0), "{mode}: {out}");
        assert!(out.contains(&format!("{mode} done")), "{mode}: {out}");
    }
    let s = k.pager_stats().unwrap();
    // The 512-page files went through the 256-frame limit: read in more than once, and the
    // shared one's changes written back while it ran.
    assert!(s.file_faults > 1024 + 256, "{s:?}");
    assert!(s.written_back >= 512, "{s:?}");
    nothing_held(&dev, &k, &[0]);
}

#[test]
fn touching_a_mapping_where_it_may_not_traps_that_program_alone() {
    let (dev, k) = boot(4 * MIB, 256 * MIB);
    let program = Program::compile(&build("mmap"), ProgramLimits::default()).unwrap();
    let (exit, out) = map_run(&k, &program, "truncate", "/t", "3");
    if !paged(&k) {
        return;
    }
    assert!(
        matches!(exit, Exit::Trap(_)),
        "a touch past the end of a truncated file: {exit:?} {out}"
    );
    assert!(
        out.contains("ok a system call over the lost page: EFAULT") && !out.contains("survived"),
        "{out}"
    );
    let (exit, out) = map_run(&k, &program, "rostore", "/r", "1");
    assert!(
        matches!(exit, Exit::Trap(_)),
        "a store into a read-only mapping: {exit:?} {out}"
    );
    assert!(!out.contains("survived"), "{out}");
    // The kernel goes on: another program maps and reads.
    let (exit, out) = map_run(&k, &program, "coherent", "/c", "3");
    assert_eq!(exit, Exit::Code(0), "{out}");
    nothing_held(&dev, &k, &[0]);
}
