//! The file system against the reference model (`vino_fs::model`): running the model's
//! operations on the uncached path, and checking a file system holds exactly a model.
#![allow(dead_code)]

pub use vino_fs::model::*;
use vino_fs::{FileSystem, FileType, NewFile, XattrSet};

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
        Op::PunchHole { path, offset, len } => {
            let ino = fs.resolve(path).map_err(k)?;
            fs.punch_hole(ino, *offset, *len).map_err(k)
        }
        Op::ZeroRange {
            path,
            offset,
            len,
            keep_size,
        } => {
            let ino = fs.resolve(path).map_err(k)?;
            fs.zero_range(ino, *offset, *len, *keep_size).map_err(k)
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
