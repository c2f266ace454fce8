//! Path walking (`namei`): from a starting directory, one component at a time, with the search
//! permission checked on every directory passed and symbolic links followed (at most
//! [`MAX_SYMLINKS`] per walk). Every system call that takes a name comes through here, so the
//! permission rules hold whatever the entry point (socket, mount, or a program in the kernel).
//!
//! Callers hold the kernel's namespace lock for the whole walk and the operation that follows,
//! so what the walk found is still there when the operation acts on it.

use crate::error::{Errno, SysError, SysResult};
use crate::files::Fd;
use crate::perm::{self, EXEC};
use crate::process::Process;
use std::collections::VecDeque;
use vino_fs::{FileType, ROOT_INO, Stat};

/// Symbolic links one walk follows before it gives up with `ELOOP` (Linux's limit).
pub const MAX_SYMLINKS: usize = 40;
/// The longest path accepted, in bytes, without its terminating NUL (`PATH_MAX - 1`).
pub const PATH_MAX: usize = 4095;
/// The longest name accepted, in bytes.
pub const NAME_MAX: usize = 255;

/// Where a relative path starts, as the `dirfd` of the `*at` system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The root directory (VINO processes have no working directory of their own).
    Root,
    /// A directory this process has open.
    Fd(Fd),
    /// A directory this process has open, which the walk may not leave: `..` above it, an
    /// absolute path or an absolute symbolic link is `EXDEV` (Linux's `RESOLVE_BENEATH`, and
    /// WASI's rule for preopened directories). Beneath the root directory is everywhere.
    Beneath(Fd),
    /// An inode the caller holds (the mount's nodes): the generation must still match, else
    /// `ESTALE` (the inode was freed and its number reused).
    Inode { ino: u64, generation: u32 },
}

/// What a walk found.
#[derive(Debug, Clone)]
pub struct Found {
    pub ino: u64,
    pub stat: Stat,
}

/// The directory a name is to be made in or removed from, and the name.
#[derive(Debug, Clone)]
pub struct Parent {
    pub dir: u64,
    pub dir_stat: Stat,
    /// The last component: may be `.` or `..`, or empty for the root itself.
    pub name: Vec<u8>,
    /// The path ended in `/`: the name must be (or become) a directory.
    pub trailing_slash: bool,
}

fn err(errno: Errno, what: impl Into<String>) -> SysError {
    SysError::new(errno, what)
}

fn show(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// A walk beneath a directory that would leave it.
fn escape(path: &[u8]) -> SysError {
    err(
        Errno::XDev,
        format!("{} leads out of the directory it is looked up beneath", show(path)),
    )
}

/// The components of `path`, empty ones (`//`) left out; and whether it ends in `/`.
fn components(path: &[u8]) -> SysResult<(VecDeque<Vec<u8>>, bool)> {
    if path.len() > PATH_MAX {
        return Err(err(Errno::NameTooLong, format!("path of {} bytes", path.len())));
    }
    if path.contains(&0) {
        return Err(err(Errno::Inval, "a path must not contain NUL"));
    }
    let comps: VecDeque<Vec<u8>> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if let Some(long) = comps.iter().find(|c| c.len() > NAME_MAX) {
        return Err(err(Errno::NameTooLong, format!("name of {} bytes", long.len())));
    }
    Ok((comps, path.len() > 1 && path.ends_with(b"/")))
}

impl Process {
    /// The directory a walk starts from: `at`, or the root for an absolute path.
    fn start(&self, at: At, path: &[u8]) -> SysResult<Found> {
        let fs = self.kernel().fs();
        let ino = if path.starts_with(b"/") {
            ROOT_INO
        } else {
            match at {
                At::Root => ROOT_INO,
                At::Fd(fd) | At::Beneath(fd) => {
                    let f = self.file(fd)?;
                    let stat = fs.stat(f.ino).ok().filter(|s| s.generation == f.generation);
                    let stat =
                        stat.ok_or_else(|| err(Errno::NoEnt, format!("descriptor {fd}: its file was removed")))?;
                    return Ok(Found { ino: f.ino, stat });
                }
                At::Inode { ino, generation } => return self.handle(ino, generation),
            }
        };
        Ok(Found {
            ino,
            stat: fs.stat(ino)?,
        })
    }

    /// The inode `ino` if it still holds the file of `generation`.
    pub(crate) fn handle(&self, ino: u64, generation: u32) -> SysResult<Found> {
        match self.kernel().fs().stat(ino) {
            Ok(stat) if stat.generation == generation => Ok(Found { ino, stat }),
            _ => Err(err(
                Errno::Stale,
                format!("inode {ino} (generation {generation}) is gone"),
            )),
        }
    }

    /// Looks `name` up in the directory `dir`, which must be searchable.
    fn step(&self, dir: &Found, name: &[u8]) -> SysResult<Found> {
        if dir.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("not a directory (inode {})", dir.ino)));
        }
        if !perm::may(self.credentials(), &dir.stat, EXEC) {
            return Err(err(Errno::Acces, format!("no search permission on inode {}", dir.ino)));
        }
        if name == b"." {
            return Ok(dir.clone());
        }
        let (ino, stat) = self.kernel().fs().lookup_stat(dir.ino, name)?;
        Ok(Found { ino, stat })
    }

    /// protected_symlinks: may this process follow `link`, found in the directory `dir`?
    pub(crate) fn may_follow(&self, dir: &Stat, link: &Stat) -> SysResult<()> {
        if self.kernel().protect.may_follow(self.credentials(), dir, link) {
            return Ok(());
        }
        Err(err(
            Errno::Acces,
            format!(
                "protected_symlinks: inode {} is another user's link in a sticky world-writable directory",
                link.ino
            ),
        ))
    }

    /// Walks `path` from `at`. The last component is followed if it is a symbolic link and
    /// `follow` says so. An empty path names `at` itself (`AT_EMPTY_PATH`), except from the
    /// root, where it is `ENOENT` as POSIX asks.
    pub(crate) fn walk(&self, at: At, path: &[u8], follow: bool) -> SysResult<Found> {
        if path.is_empty() && at == At::Root {
            return Err(err(Errno::NoEnt, "empty path"));
        }
        let (mut comps, mut must_be_dir) = components(path)?;
        // Beneath a directory (not the root): how deep below it the walk is. Directories have
        // one parent and the walk holds the namespace lock, so `..` goes back the way it came.
        let mut depth = match at {
            At::Beneath(_) if self.start(at, b"")?.ino != ROOT_INO => {
                if path.starts_with(b"/") {
                    return Err(escape(path));
                }
                Some(0usize)
            }
            _ => None,
        };
        let mut cur = self.start(at, path)?;
        let mut links = 0;
        while let Some(name) = comps.pop_front() {
            let next = self.step(&cur, &name)?;
            let last = comps.is_empty();
            if next.stat.kind == FileType::Symlink && (!last || follow || must_be_dir) {
                self.may_follow(&cur.stat, &next.stat)?;
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(err(Errno::Loop, format!("too many symbolic links in {}", show(path))));
                }
                let target = self.kernel().fs().readlink(next.ino)?;
                let (more, slash) = components(&target)?;
                must_be_dir |= last && slash;
                for c in more.into_iter().rev() {
                    comps.push_front(c);
                }
                if target.starts_with(b"/") {
                    if depth.is_some() {
                        return Err(escape(path));
                    }
                    cur = self.start(At::Root, b"/")?;
                }
                continue;
            }
            if let Some(d) = &mut depth {
                match name.as_slice() {
                    b"." => {}
                    b".." => *d = d.checked_sub(1).ok_or_else(|| escape(path))?,
                    _ => *d += 1,
                }
            }
            cur = next;
        }
        if must_be_dir && cur.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("not a directory: {}", show(path))));
        }
        Ok(cur)
    }

    /// Walks to the directory that holds the last component of `path` (following symbolic
    /// links on the way, and checking search permission on that directory too), and returns it
    /// with the last name. A trailing symbolic link is not followed: the name is the link's.
    pub(crate) fn walk_parent(&self, at: At, path: &[u8]) -> SysResult<Parent> {
        if path.is_empty() {
            return Err(err(Errno::NoEnt, "empty path"));
        }
        let (mut comps, trailing_slash) = components(path)?;
        let name = comps.pop_back().unwrap_or_default();
        let mut dir_path = Vec::new();
        if path.starts_with(b"/") {
            dir_path.push(b'/');
        }
        for c in &comps {
            dir_path.extend_from_slice(c);
            dir_path.push(b'/');
        }
        let dir = if dir_path.is_empty() {
            self.start(at, b"")?
        } else {
            self.walk(at, &dir_path, true)?
        };
        if dir.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("not a directory: {}", show(&dir_path))));
        }
        if !perm::may(self.credentials(), &dir.stat, EXEC) {
            return Err(err(
                Errno::Acces,
                format!("no search permission on {}", show(&dir_path)),
            ));
        }
        Ok(Parent {
            dir: dir.ino,
            dir_stat: dir.stat,
            name,
            trailing_slash,
        })
    }
}
