//! An in-memory model of a file tree, with the same error rules as the file system, and the
//! operations the model-based and crash tests run on both.
#![allow(dead_code)]

use std::collections::BTreeMap;
use vino_fs::{FileSystem, FileType, FsErrorKind, NewFile, XattrSet};

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

type R<T = ()> = Result<T, FsErrorKind>;

fn parent(path: &str) -> (&str, &str) {
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

pub fn data(seed: u64, len: usize) -> Vec<u8> {
    super::pattern(seed, len)
}

impl Model {
    fn kind(&self, path: &str) -> Option<&Node> {
        if path == "/" {
            Some(&Node::Dir)
        } else {
            self.nodes.get(path)
        }
    }

    /// Walks a path as the file system does: every component but the last must be a directory.
    fn resolve(&self, path: &str) -> R<&Node> {
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

    fn children<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
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
        self.resolve(fp)?;
        self.resolve(tp)?;
        if self.kind(fp) != Some(&Node::Dir) || self.kind(tp) != Some(&Node::Dir) {
            return Err(FsErrorKind::NotADirectory);
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

/// Runs one operation on the file system (uncached path), returning its outcome as a kind.
pub fn run_fs(fs: &FileSystem, op: &Op) -> R {
    let who = NewFile::by(42);
    let k = |e: vino_fs::FsError| e.kind();
    match op {
        Op::Create(p) => fs.create_path(p, &who).map(|_| ()).map_err(k),
        Op::Mkdir(p) => fs.mkdir_path(p, &NewFile { mode: 0o755, ..who }).map(|_| ()).map_err(k),
        Op::Write {
            path,
            offset,
            len,
            seed,
        } => {
            let ino = fs.resolve(path).map_err(k)?;
            let bytes = data(*seed, *len);
            let n = fs.write_at(ino, *offset, &bytes).map_err(k)?;
            assert!(n == bytes.len() || bytes.is_empty(), "short write without a full disk");
            Ok(())
        }
        Op::Truncate { path, size } => {
            let ino = fs.resolve(path).map_err(k)?;
            fs.truncate(ino, *size).map_err(k)
        }
        Op::Unlink(p) => fs.unlink_path(p).map_err(k),
        Op::UnlinkKeep(p) => {
            let (d, name) = parent(p);
            let dir = fs.resolve(d).map_err(k)?;
            fs.unlink_keep(dir, name).map_err(k)
        }
        Op::Symlink { path, seed, len } => {
            let (d, name) = parent(path);
            let dir = fs.resolve(d).map_err(k)?;
            fs.symlink(dir, name, &target(*seed, *len), &who).map(|_| ()).map_err(k)
        }
        Op::Mknod(p) => {
            let (d, name) = parent(p);
            let dir = fs.resolve(d).map_err(k)?;
            fs.mknod(dir, name, FileType::Fifo, 0, &who).map(|_| ()).map_err(k)
        }
        Op::Fallocate {
            path,
            offset,
            len,
            keep_size,
        } => {
            let ino = fs.resolve(path).map_err(k)?;
            fs.fallocate(ino, *offset, *len, *keep_size).map_err(k)
        }
        Op::SetXattr { path, seed } => {
            let ino = fs.resolve(path).map_err(k)?;
            let name = format!("user.{}", seed % 4);
            fs.set_xattr(
                ino,
                name.as_bytes(),
                &data(*seed, (*seed % 300) as usize),
                XattrSet::Any,
            )
            .map_err(k)
        }
        Op::Rmdir(p) => fs.rmdir_path(p).map_err(k),
        Op::Rename(a, b) => fs.rename_path(a, b).map_err(k),
        Op::Fsync(p) => {
            let ino = fs.resolve(p).map_err(k)?;
            fs.fsync(ino).map_err(k)
        }
        Op::Sync => fs.sync().map_err(k),
        Op::Remount => Ok(()),
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
        Op::SetXattr { path, .. } => m.resolve(path).map(|_| ()),
        Op::Rmdir(p) => m.rmdir(p),
        Op::Rename(a, b) => m.rename(a, b),
        Op::Fsync(p) => m.resolve(p).map(|_| ()),
        Op::Sync | Op::Remount => Ok(()),
    }
}

/// Checks that the file system holds exactly the model: every path, kind, size, content, link
/// count and directory listing.
pub fn check_equal(fs: &FileSystem, m: &Model, context: &str) {
    let mut dirs = vec!["/".to_string()];
    dirs.extend(m.nodes.iter().filter(|(_, n)| **n == Node::Dir).map(|(p, _)| p.clone()));
    for d in &dirs {
        let mut got: Vec<String> = fs
            .readdir_path(d)
            .unwrap_or_else(|e| panic!("{context}: readdir {d}: {e}"))
            .iter()
            .map(|e| e.name_lossy())
            .filter(|n| !(d == "/" && n == "lost+found"))
            .collect();
        got.sort();
        let want: Vec<String> = m.children(d).map(|(p, _)| parent(p).1.to_string()).collect();
        assert_eq!(got, want, "{context}: listing of {d}");
        let subdirs = m.children(d).filter(|(_, n)| **n == Node::Dir).count() as u32 + u32::from(d == "/");
        let st = fs.stat_path(d).unwrap_or_else(|e| panic!("{context}: stat {d}: {e}"));
        assert_eq!(st.kind, FileType::Directory, "{context}: {d}");
        assert_eq!(st.nlink, 2 + subdirs, "{context}: link count of {d}");
    }
    for (p, n) in &m.nodes {
        if let Node::Symlink(want) = n {
            let ino = fs.resolve(p).unwrap_or_else(|e| panic!("{context}: resolve {p}: {e}"));
            let st = fs.stat(ino).unwrap();
            assert_eq!(
                (st.kind, st.nlink, st.size),
                (FileType::Symlink, 1, want.len() as u64),
                "{context}: {p}"
            );
            assert_eq!(fs.readlink(ino).unwrap(), *want, "{context}: target of {p}");
        }
        if *n == Node::Fifo {
            let ino = fs.resolve(p).unwrap_or_else(|e| panic!("{context}: resolve {p}: {e}"));
            let st = fs.stat(ino).unwrap();
            assert_eq!((st.kind, st.nlink, st.size), (FileType::Fifo, 1, 0), "{context}: {p}");
        }
        if let Node::File(want) = n {
            let ino = fs.resolve(p).unwrap_or_else(|e| panic!("{context}: resolve {p}: {e}"));
            let st = fs.stat(ino).unwrap();
            assert_eq!(st.kind, FileType::Regular, "{context}: {p}");
            assert_eq!(st.nlink, 1, "{context}: {p}");
            assert_eq!(st.size, want.len() as u64, "{context}: size of {p}");
            let got = super::read_all(fs, ino);
            assert!(got == *want, "{context}: contents of {p} differ");
        }
    }
}
