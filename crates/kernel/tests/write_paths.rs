//! The two data paths, the file system's uncached one (`FileSystem::write_at`, `set_size`) and
//! the kernel's through its page cache (`write`, `ftruncate`), follow the same rules: the same
//! sequence of writes and truncates, on the same disk, gives the same answers and the same
//! bytes, and both match a plain model of the file. The disk starts out full of stale bytes
//! (never zeros), so that any byte a path forgets to zero shows.

use proptest::prelude::*;
use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{FileSystem, FsErrorKind, MAX_FILE_SIZE, MkfsOptions, MountOptions, NewFile, mkfs};
use vino_graft::Runtime;
use vino_kernel::{Credentials, Errno, Fd, Kernel, KernelConfig, OpenFlags, Process};

const BS: u64 = 4096;
const STALE: u8 = 0xAB;

/// A small disk (a few hundred free blocks, so that writes fill it), every block stale.
fn disk() -> Arc<MemDevice> {
    let blocks = 700;
    let dev = Arc::new(MemDevice::new(blocks));
    for b in 0..blocks {
        dev.write_blocks(b, &[STALE; BS as usize]).unwrap();
    }
    mkfs(
        &*dev,
        &MkfsOptions {
            blocks_per_group: 1024,
            inodes_per_group: Some(32),
            ..Default::default()
        },
    )
    .unwrap();
    dev
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Never the stale byte, never zero: both would hide a mistake.
            (x >> 24) as u8 % 200 + 1
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        offset: u64,
        len: usize,
        seed: u64,
    },
    Truncate(u64),
    /// A block given to the file past its end, as a write that failed after allocating leaves
    /// (nothing if the block is not past the end).
    Allocate(u64),
    /// Everything to the device, and the cache's pages dropped.
    Sync,
}

/// What an operation answered: bytes written, or the error's kind.
type Answer = Result<usize, &'static str>;

/// The uncached path.
struct Uncached {
    fs: Arc<FileSystem>,
    ino: u64,
}

/// The kernel's path, through its page cache.
struct Cached {
    k: Arc<Kernel>,
    p: Arc<Process>,
    fd: Fd,
    ino: u64,
}

fn fs_kind(k: FsErrorKind) -> &'static str {
    match k {
        FsErrorKind::NoSpace => "no space",
        FsErrorKind::FileTooLarge => "too large",
        _ => "other",
    }
}

fn errno_kind(e: Errno) -> &'static str {
    match e {
        Errno::NoSpc => "no space",
        Errno::FBig => "too large",
        _ => "other",
    }
}

impl Uncached {
    fn new(dev: &Arc<MemDevice>) -> Self {
        let fs = FileSystem::mount(
            dev.clone() as Arc<dyn BlockDevice>,
            &Runtime::default(),
            &MountOptions::default(),
        )
        .unwrap();
        let ino = fs.create(fs.root(), "f", &NewFile::by(1)).unwrap();
        Uncached { fs, ino }
    }

    fn run(&self, op: &Op) -> Answer {
        match *op {
            Op::Write { offset, len, seed } => self
                .fs
                .write_at(self.ino, offset, &bytes(seed, len))
                .map_err(|e| fs_kind(e.kind())),
            Op::Truncate(size) => self
                .fs
                .set_size(self.ino, size)
                .map(|()| 0)
                .map_err(|e| fs_kind(e.kind())),
            Op::Allocate(index) if index < self.size().div_ceil(BS) => Ok(0),
            Op::Allocate(index) => self
                .fs
                .allocate(self.ino, index)
                .map(|_| 0)
                .map_err(|e| fs_kind(e.kind())),
            Op::Sync => self.fs.sync().map(|()| 0).map_err(|e| fs_kind(e.kind())),
        }
    }

    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        let n = self.fs.read_at(self.ino, offset, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn size(&self) -> u64 {
        self.fs.stat(self.ino).unwrap().size
    }
}

impl Cached {
    fn new(dev: &Arc<MemDevice>) -> Self {
        let config = KernelConfig {
            cache_frames: 32,
            writeback_every: None,
            ..KernelConfig::default()
        };
        let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
        let p = k.spawn(Credentials::root());
        let fd = p.open("/f", OpenFlags::create()).unwrap();
        let ino = p.inode(fd).unwrap();
        Cached { k, p, fd, ino }
    }

    fn run(&self, op: &Op) -> Answer {
        match *op {
            Op::Write { offset, len, seed } => self
                .p
                .pwrite(self.fd, &bytes(seed, len), offset)
                .map_err(|e| errno_kind(e.errno)),
            Op::Truncate(size) => self
                .p
                .ftruncate(self.fd, size)
                .map(|()| 0)
                .map_err(|e| errno_kind(e.errno)),
            Op::Allocate(index) if index < self.size().div_ceil(BS) => Ok(0),
            Op::Allocate(index) => self
                .k
                .fs()
                .allocate(self.ino, index)
                .map(|_| 0)
                .map_err(|e| fs_kind(e.kind())),
            Op::Sync => {
                self.k.sync().unwrap();
                self.k.cache().drop_clean().unwrap();
                Ok(0)
            }
        }
    }

    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        let n = self.p.pread(self.fd, &mut buf, offset).unwrap();
        buf.truncate(n);
        buf
    }

    fn size(&self) -> u64 {
        self.p.fstat(self.fd).unwrap().size
    }
}

/// The file as it should read.
#[derive(Default)]
struct Model {
    data: Vec<u8>,
}

impl Model {
    fn apply(&mut self, op: &Op, answer: Answer) {
        match (op, answer) {
            (Op::Write { offset, len, seed }, Ok(n)) if n > 0 => {
                assert!(n <= *len);
                if n < *len {
                    assert_eq!((offset + n as u64) % BS, 0, "a short write ends at a block boundary");
                }
                let (offset, data) = (*offset as usize, bytes(*seed, *len));
                if self.data.len() < offset + n {
                    self.data.resize(offset + n, 0);
                }
                self.data[offset..offset + n].copy_from_slice(&data[..n]);
            }
            (Op::Truncate(size), Ok(_)) => self.data.resize(*size as usize, 0),
            _ => {}
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    // Offsets around a few blocks (partial blocks, past the end, holes) and far (indirect
    // blocks, and writes that fill the disk).
    let offset = prop_oneof![0u64..5 * BS, 0u64..400 * BS];
    prop_oneof![
        6 => (offset, prop_oneof![0usize..3 * BS as usize, 0usize..200 * BS as usize], any::<u64>())
            .prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
        3 => prop_oneof![0u64..5 * BS, 0u64..400 * BS].prop_map(Op::Truncate),
        2 => (0u64..40).prop_map(Op::Allocate),
        1 => Just(Op::Sync),
    ]
}

fn check(u: &Uncached, c: &Cached, m: &Model, context: &str) {
    assert_eq!(u.size(), m.data.len() as u64, "{context}: uncached size");
    assert_eq!(c.size(), m.data.len() as u64, "{context}: cached size");
    let len = m.data.len() + 10;
    let (ub, cb) = (u.read(0, len), c.read(0, len));
    let first_wrong = |b: &[u8]| b.iter().zip(&m.data).position(|(x, y)| x != y);
    assert_eq!(
        first_wrong(&ub),
        None,
        "{context}: uncached bytes differ from the model"
    );
    assert_eq!(first_wrong(&cb), None, "{context}: cached bytes differ from the model");
    assert_eq!(ub.len(), m.data.len());
    assert_eq!(cb.len(), m.data.len());
}

/// Runs `ops` on both paths and the model, checking after each; returns the answers.
fn run(ops: &[Op]) -> Vec<Answer> {
    let (du, dc) = (disk(), disk());
    let (u, c) = (Uncached::new(&du), Cached::new(&dc));
    let mut m = Model::default();
    let mut answers = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (a, b) = (u.run(op), c.run(op));
        assert_eq!(
            a, b,
            "op {i} {op:?}: the uncached and the cached path answer differently"
        );
        m.apply(op, a);
        check(&u, &c, &m, &format!("after op {i} {op:?}"));
        answers.push(a);
    }
    answers
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 500, ..ProptestConfig::default() })]

    #[test]
    fn both_paths_follow_the_same_rules(ops in prop::collection::vec(op(), 1..16)) {
        run(&ops);
    }
}

#[test]
fn a_write_into_a_block_allocated_past_the_end_reads_zeros_around_it() {
    run(&[
        Op::Write {
            offset: 0,
            len: 100,
            seed: 1,
        },
        Op::Allocate(2),
        Op::Write {
            offset: 2 * BS + 1000,
            len: 10,
            seed: 2,
        },
    ]);
}

#[test]
fn a_file_grown_over_a_block_allocated_past_its_end_shows_a_hole() {
    let write = Op::Write {
        offset: BS,
        len: 1,
        seed: 3,
    };
    run(&[Op::Allocate(0), write]);
    run(&[Op::Allocate(0), Op::Sync, Op::Truncate(2 * BS)]);
    run(&[
        Op::Truncate(100),
        Op::Allocate(3),
        Op::Allocate(5),
        Op::Truncate(6 * BS + 1),
    ]);
}

#[test]
fn a_write_past_the_largest_size_is_refused_whole() {
    let answers = run(&[Op::Write {
        offset: MAX_FILE_SIZE - 100,
        len: 200,
        seed: 3,
    }]);
    assert_eq!(answers, vec![Err("too large")]);
}

#[test]
fn a_write_that_fills_the_disk_is_short_then_no_space() {
    let answers = run(&[
        Op::Write {
            offset: 100,
            len: 1000 * BS as usize,
            seed: 4,
        },
        Op::Write {
            offset: 10,
            len: 100,
            seed: 5,
        },
        Op::Write {
            offset: 2000 * BS,
            len: 100,
            seed: 5,
        },
        Op::Truncate(3 * BS + 7),
        Op::Write {
            offset: 5 * BS,
            len: 2 * BS as usize,
            seed: 6,
        },
    ]);
    let Ok(short) = answers[0] else { panic!("{answers:?}") };
    assert!(short > 0 && short < 1000 * BS as usize, "{answers:?}");
    assert_eq!(answers[1..], [Ok(100), Err("no space"), Ok(0), Ok(2 * BS as usize)]);
}
