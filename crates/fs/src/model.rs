//! A reference model of a file tree, with the same error rules as the file system, and the
//! operations the model-based and crash tests (and the kernel's simulator) run on both; and
//! what a workload has promised about durability at a power cut. For tests only (feature
//! `model`).

use crate::FsErrorKind;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File(Vec<u8>),
    Dir,
    Symlink(Vec<u8>),
    Fifo,
}

/// The tree: absolute path (no trailing slash) → node. The root is implicit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub nodes: BTreeMap<String, Node>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create(String),
    Mkdir(String),
    Write {
        path: String,
        offset: u64,
        len: usize,
        seed: u64,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Unlink(String),
    /// Unlink, the inode kept on the orphan list (as for a file still open).
    UnlinkKeep(String),
    Rmdir(String),
    /// A symlink to `t<seed>` repeated `len` times.
    Symlink {
        path: String,
        seed: u8,
        len: usize,
    },
    Mknod(String),
    Fallocate {
        path: String,
        offset: u64,
        len: u64,
        keep_size: bool,
    },
    /// fallocate's `FALLOC_FL_PUNCH_HOLE` (with `KEEP_SIZE`).
    PunchHole {
        path: String,
        offset: u64,
        len: u64,
    },
    /// fallocate's `FALLOC_FL_ZERO_RANGE`.
    ZeroRange {
        path: String,
        offset: u64,
        len: u64,
        keep_size: bool,
    },
    /// Sets an xattr (`user.<seed % 4>`) on anything; the model does not keep them.
    SetXattr {
        path: String,
        seed: u64,
    },
    Rename(String, String),
    Fsync(String),
    Sync,
    Remount,
}

pub type R<T = ()> = Result<T, FsErrorKind>;

/// A path's directory and last name.
pub fn parent(path: &str) -> (&str, &str) {
    let cut = path.rfind('/').expect("absolute");
    (if cut == 0 { "/" } else { &path[..cut] }, &path[cut + 1..])
}

/// A symlink target: `t<seed>` repeated to at least `len` bytes (at most 4095).
pub fn target(seed: u8, len: usize) -> Vec<u8> {
    let unit = format!("t{seed}");
    let mut t = unit.repeat(len.max(1).div_ceil(unit.len()));
    t.truncate(len.clamp(1, 4095));
    t.into_bytes()
}

/// File contents: deterministic bytes of `seed`.
pub fn data(seed: u64, len: usize) -> Vec<u8> {
    pattern(seed, len)
}

/// Deterministic bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

impl Model {
    pub fn kind(&self, path: &str) -> Option<&Node> {
        if path == "/" {
            Some(&Node::Dir)
        } else {
            self.nodes.get(path)
        }
    }

    /// Walks a path as the file system does: every component but the last must be a directory.
    pub fn resolve(&self, path: &str) -> R<&Node> {
        let mut cur = String::new();
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut node = &Node::Dir;
        for c in comps {
            if *node != Node::Dir {
                return Err(FsErrorKind::NotADirectory);
            }
            cur.push('/');
            cur.push_str(c);
            node = self.nodes.get(&cur).ok_or(FsErrorKind::NotFound)?;
        }
        Ok(node)
    }

    fn parent_dir(&self, path: &str) -> R<String> {
        let (p, _) = parent(path);
        match self.resolve(p)? {
            Node::Dir => Ok(p.to_string()),
            _ => Err(FsErrorKind::NotADirectory),
        }
    }

    pub fn children<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        self.nodes
            .iter()
            .filter(move |(p, _)| p.starts_with(&prefix) && !p[prefix.len()..].contains('/'))
    }

    pub fn create(&mut self, path: &str, dir: bool) -> R {
        self.make(path, if dir { Node::Dir } else { Node::File(Vec::new()) })
    }

    pub fn make(&mut self, path: &str, node: Node) -> R {
        self.parent_dir(path)?;
        if self.nodes.contains_key(path) {
            return Err(FsErrorKind::Exists);
        }
        self.nodes.insert(path.to_string(), node);
        Ok(())
    }

    fn file_mut(&mut self, path: &str) -> R<&mut Vec<u8>> {
        match self.resolve(path)? {
            Node::Dir => Err(FsErrorKind::IsADirectory),
            Node::Symlink(_) | Node::Fifo => Err(FsErrorKind::InvalidArgument),
            Node::File(_) => match self.nodes.get_mut(path) {
                Some(Node::File(d)) => Ok(d),
                _ => unreachable!(),
            },
        }
    }

    pub fn write(&mut self, path: &str, offset: u64, bytes: &[u8]) -> R {
        let f = self.file_mut(path)?;
        if bytes.is_empty() {
            return Ok(());
        }
        let end = offset as usize + bytes.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(bytes);
        Ok(())
    }

    pub fn fallocate(&mut self, path: &str, offset: u64, len: u64, keep_size: bool) -> R {
        let f = self.file_mut(path)?;
        if len == 0 {
            return Err(FsErrorKind::InvalidArgument);
        }
        let end = (offset + len) as usize;
        if !keep_size && f.len() < end {
            f.resize(end, 0);
        }
        Ok(())
    }

    /// Punches a hole: the bytes of the range inside the file become zeros; the size stays.
    pub fn punch_hole(&mut self, path: &str, offset: u64, len: u64) -> R {
        self.zero_range(path, offset, len, true)
    }

    /// Zeroes a range: its bytes inside the file become zeros; the size grows to cover it
    /// unless `keep_size`.
    pub fn zero_range(&mut self, path: &str, offset: u64, len: u64, keep_size: bool) -> R {
        self.fallocate(path, offset, len, keep_size)?;
        let f = self.file_mut(path)?;
        let end = ((offset + len) as usize).min(f.len());
        if let Some(range) = f.get_mut(offset as usize..end) {
            range.fill(0);
        }
        Ok(())
    }

    pub fn truncate(&mut self, path: &str, size: u64) -> R {
        self.file_mut(path)?.resize(size as usize, 0);
        Ok(())
    }

    pub fn unlink(&mut self, path: &str) -> R {
        self.parent_dir(path)?;
        match self.nodes.get(path) {
            None => Err(FsErrorKind::NotFound),
            Some(Node::Dir) => Err(FsErrorKind::IsADirectory),
            Some(_) => {
                self.nodes.remove(path);
                Ok(())
            }
        }
    }

    pub fn rmdir(&mut self, path: &str) -> R {
        self.parent_dir(path)?;
        match self.nodes.get(path) {
            None => Err(FsErrorKind::NotFound),
            Some(Node::File(_) | Node::Symlink(_) | Node::Fifo) => Err(FsErrorKind::NotADirectory),
            Some(Node::Dir) => {
                if self.children(path).next().is_some() {
                    return Err(FsErrorKind::NotEmpty);
                }
                self.nodes.remove(path);
                Ok(())
            }
        }
    }

    pub fn rename(&mut self, from: &str, to: &str) -> R {
        let (fp, _) = parent(from);
        let (tp, _) = parent(to);
        // The source's directory first, then the destination's (as Linux walks them).
        for dir in [fp, tp] {
            if *self.resolve(dir)? != Node::Dir {
                return Err(FsErrorKind::NotADirectory);
            }
        }
        let src = self.nodes.get(from).cloned().ok_or(FsErrorKind::NotFound)?;
        if from == to {
            return Ok(());
        }
        if src == Node::Dir && (tp == from || tp.starts_with(&format!("{from}/"))) {
            return Err(FsErrorKind::InvalidArgument);
        }
        match (self.nodes.get(to), &src) {
            (Some(n), Node::Dir) if *n != Node::Dir => return Err(FsErrorKind::NotADirectory),
            (Some(Node::Dir), n) if *n != Node::Dir => return Err(FsErrorKind::IsADirectory),
            (Some(Node::Dir), Node::Dir) if self.children(to).next().is_some() => return Err(FsErrorKind::NotEmpty),
            _ => {}
        }
        self.nodes.remove(to);
        let moved: Vec<(String, Node)> = self
            .nodes
            .iter()
            .filter(|(p, _)| *p == from || p.starts_with(&format!("{from}/")))
            .map(|(p, n)| (p.clone(), n.clone()))
            .collect();
        for (p, n) in moved {
            self.nodes.remove(&p);
            self.nodes.insert(format!("{to}{}", &p[from.len()..]), n);
        }
        Ok(())
    }

    /// Paths and kinds only.
    pub fn shape(&self) -> BTreeMap<String, bool> {
        self.nodes.iter().map(|(p, n)| (p.clone(), *n == Node::Dir)).collect()
    }
}

/// Runs one operation on the model.
pub fn run_model(m: &mut Model, op: &Op) -> R {
    match op {
        Op::Create(p) => m.create(p, false),
        Op::Mkdir(p) => m.create(p, true),
        Op::Write {
            path,
            offset,
            len,
            seed,
        } => m.write(path, *offset, &data(*seed, *len)),
        Op::Truncate { path, size } => m.truncate(path, *size),
        Op::Unlink(p) | Op::UnlinkKeep(p) => m.unlink(p),
        Op::Symlink { path, seed, len } => m.make(path, Node::Symlink(target(*seed, *len))),
        Op::Mknod(p) => m.make(p, Node::Fifo),
        Op::Fallocate {
            path,
            offset,
            len,
            keep_size,
        } => m.fallocate(path, *offset, *len, *keep_size),
        Op::PunchHole { path, offset, len } => m.punch_hole(path, *offset, *len),
        Op::ZeroRange {
            path,
            offset,
            len,
            keep_size,
        } => m.zero_range(path, *offset, *len, *keep_size),
        Op::SetXattr { path, .. } => m.resolve(path).map(|_| ()),
        Op::Rmdir(p) => m.rmdir(p),
        Op::Rename(a, b) => m.rename(a, b),
        Op::Fsync(p) => m.resolve(p).map(|_| ()),
        Op::Sync | Op::Remount => Ok(()),
    }
}

/// What a workload promised at a power cut: the tree at its last durable point (a sync, or an
/// fsync: the journal is one, so an fsync makes every earlier change to names durable too), the
/// paths changed since, and every shape the tree took since then.
#[derive(Debug, Clone, Default)]
pub struct Promises {
    pub durable: BTreeMap<String, Node>,
    pub touched: BTreeSet<String>,
    pub shapes: Vec<BTreeMap<String, bool>>,
}

impl Promises {
    /// Promises of a workload that starts on an empty tree.
    pub fn new() -> Promises {
        Promises {
            shapes: vec![BTreeMap::new()],
            ..Default::default()
        }
    }

    pub fn durable_point(&mut self, m: &Model) {
        self.durable_point_but(m, &[]);
    }

    /// A durable point that does not reach the files `pending` (stream files whose chunks only
    /// their own fsync or a sync stores): they keep their earlier promise and stay changed.
    pub fn durable_point_but(&mut self, m: &Model, pending: &[String]) {
        let mut durable = m.nodes.clone();
        for p in pending {
            match self.durable.get(p) {
                Some(n) => durable.insert(p.clone(), n.clone()),
                None => durable.remove(p),
            };
        }
        self.durable = durable;
        self.touched = pending.iter().cloned().collect();
        self.shapes = vec![m.shape()];
    }

    pub fn touch(&mut self, p: &str) {
        self.touched.insert(p.to_string());
    }

    /// Marks what `op` changes (its paths' contents or existence).
    pub fn touch_op(&mut self, op: &Op) {
        match op {
            Op::Write { path, .. }
            | Op::Truncate { path, .. }
            | Op::Unlink(path)
            | Op::UnlinkKeep(path)
            | Op::Fallocate { path, .. }
            | Op::PunchHole { path, .. }
            | Op::ZeroRange { path, .. }
            | Op::Rmdir(path) => self.touch(path),
            Op::Rename(a, b) => {
                self.touch(a);
                self.touch(b);
            }
            _ => {}
        }
    }

    /// True if `p` (or a directory above it) was changed since the durable point.
    pub fn changed(&self, p: &str) -> bool {
        self.touched
            .iter()
            .any(|t| p == t || p.starts_with(&format!("{t}/")) || t.starts_with(&format!("{p}/")))
    }

    /// Checks a tree read after the power cut against the promises: its shape is one the
    /// workload passed through since the durable point, and every node durable then and not
    /// changed since is there, files with exactly their bytes. The error says what broke.
    pub fn check(&self, after: &Model) -> Result<(), String> {
        let shape = after.shape();
        if !self.shapes.contains(&shape) {
            return Err(format!(
                "the tree after the crash {shape:?} is none of the {} since the last durable point",
                self.shapes.len()
            ));
        }
        for (path, node) in &self.durable {
            if self.changed(path) {
                continue;
            }
            match (node, after.nodes.get(path)) {
                (Node::File(want), Some(Node::File(got))) => {
                    if want != got {
                        let first = want.iter().zip(got).position(|(a, b)| a != b);
                        return Err(format!(
                            "{path} lost bytes ({} durable, {} after; first difference at {first:?})",
                            want.len(),
                            got.len()
                        ));
                    }
                }
                (Node::Dir, Some(Node::Dir)) | (Node::Fifo, Some(Node::Fifo)) => {}
                (Node::Symlink(want), Some(Node::Symlink(got))) if want == got => {}
                (_, got) => return Err(format!("durable {path} is {got:?} after the crash")),
            }
        }
        Ok(())
    }
}
