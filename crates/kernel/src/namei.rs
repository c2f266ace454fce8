//! Path walking (`namei`): from a starting directory, one component at a time, with the search
//! permission checked on every directory passed and symbolic links followed (at most
//! [`MAX_SYMLINKS`] per walk). Every system call that takes a name comes through here, so the
//! permission rules hold whatever the entry point (socket, mount, or a program in the kernel).
//!
//! Callers hold the kernel's namespace lock for the whole walk and the operation that follows,
//! so what the walk found is still there when the operation acts on it.

use crate::dir_grafts::{AccessOp, AccessQuery, Governors, MAX_REDIRECTS, Place};
use crate::error::{Errno, SysError, SysResult};
use crate::files::Fd;
use crate::perm::{self, EXEC};
use crate::process::Process;
use std::collections::VecDeque;
use std::sync::Arc;
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

/// The `dir.access` checks of one walk: how many it made (at most
/// [`crate::WALK_ACCESS_CALLS`]), and the time they all see (the clock is read once a walk).
#[derive(Default)]
struct Checks {
    calls: usize,
    now_s: Option<i64>,
}

/// What a walk found.
#[derive(Debug, Clone)]
pub struct Found {
    pub ino: u64,
    pub stat: Stat,
    /// Where a walk found it, if `dir.access` grafts govern that directory.
    pub(crate) place: Option<Arc<Place>>,
}

impl Found {
    pub(crate) fn new(ino: u64, stat: Stat) -> Found {
        Found { ino, stat, place: None }
    }
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
    /// The `dir.access` grafts over names in `dir`.
    pub(crate) governors: Governors,
    /// The time they are asked at (read once a call; 0 with none to ask).
    pub(crate) now_s: i64,
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

/// Puts the names of `target` (a symbolic link's, or a redirect's) at the front of a walk's
/// queue, in place of the name that led to it (the path's `last` one, if `last`): how many.
fn splice(comps: &mut VecDeque<Vec<u8>>, target: &[u8], last: bool, must_be_dir: &mut bool) -> SysResult<usize> {
    let (more, slash) = components(target)?;
    *must_be_dir |= last && slash;
    let n = more.len();
    for c in more.into_iter().rev() {
        comps.push_front(c);
    }
    Ok(n)
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
                    return Ok(Found::new(f.ino, stat));
                }
                At::Inode { ino, generation } => return self.handle(ino, generation),
            }
        };
        Ok(Found::new(ino, fs.stat(ino)?))
    }

    /// The inode `ino` if it still holds the file of `generation`.
    pub(crate) fn handle(&self, ino: u64, generation: u32) -> SysResult<Found> {
        match self.kernel().fs().stat(ino) {
            Ok(stat) if stat.generation == generation => Ok(Found::new(ino, stat)),
            _ => Err(err(
                Errno::Stale,
                format!("inode {ino} (generation {generation}) is gone"),
            )),
        }
    }

    /// Looks `name` up in the directory `dir`, which must be searchable and whose `dir.access`
    /// grafts (`gov`) must allow it.
    fn step(&self, dir: &Found, name: &[u8], gov: &Governors, checks: &mut Checks) -> SysResult<Found> {
        if dir.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("not a directory (inode {})", dir.ino)));
        }
        if !perm::may(self.credentials(), &dir.stat, EXEC) {
            return Err(err(Errno::Acces, format!("no search permission on inode {}", dir.ino)));
        }
        if !gov.is_empty() {
            let now_s = *checks.now_s.get_or_insert_with(|| self.now_s());
            let q = self.access_query_at(AccessOp::Lookup, dir.ino, name, 0, now_s);
            gov.check(&q, &mut checks.calls)?;
        }
        if name == b"." {
            return Ok(Found::new(dir.ino, dir.stat.clone()));
        }
        let (ino, stat) = self.kernel().fs().lookup_stat(dir.ino, name)?;
        Ok(Found::new(ino, stat))
    }

    /// A question to `dir.access` grafts about this process doing `op` on `name` in `dir`, asked
    /// now (a walk reads the clock once: see [`Checks`]).
    pub(crate) fn access_query<'a>(&self, op: AccessOp, dir: u64, name: &'a [u8], flags: i32) -> AccessQuery<'a> {
        self.access_query_at(op, dir, name, flags, self.now_s())
    }

    /// [`Process::access_query`] asked at `now_s`.
    pub(crate) fn access_query_at<'a>(
        &self,
        op: AccessOp,
        dir: u64,
        name: &'a [u8],
        flags: i32,
        now_s: i64,
    ) -> AccessQuery<'a> {
        let cred = self.credentials();
        AccessQuery {
            op,
            uid: cred.uid,
            gid: cred.gid,
            flags,
            dir,
            name,
            now_s,
        }
    }

    /// The wall clock in seconds, as `dir.access` grafts see it.
    fn now_s(&self) -> i64 {
        self.kernel().clock.wall_s()
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
        Ok(self.walk_governed(at, path, follow, true, false)?.0)
    }

    /// [`Process::walk`] for a call that then acts on what it found (open, attributes): the
    /// result says where it was found if `dir.access` grafts govern that directory.
    pub(crate) fn walk_placed(&self, at: At, path: &[u8], follow: bool) -> SysResult<Found> {
        Ok(self.walk_governed(at, path, follow, true, true)?.0)
    }

    /// [`Process::walk`], also giving the `dir.access` grafts over the names in what it found
    /// (if a directory; else over its directory). With `redirect`, the process's `dir.lookup`
    /// graft is asked about each name of `path` (not about the names of a redirect).
    fn walk_governed(
        &self,
        at: At,
        path: &[u8],
        follow: bool,
        redirect: bool,
        placed: bool,
    ) -> SysResult<(Found, Governors)> {
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
        let kernel = self.kernel();
        let snapshot = kernel.dir_grafts.snapshot();
        let guarded = snapshot.is_some();
        let redirecting = redirect && self.redirects_lookups();
        let mut cur = self.start(at, path)?;
        let mut gov = match &snapshot {
            Some(s) => s.governors(kernel.fs(), &cur)?,
            None => Governors::default(),
        };
        let (mut links, mut redirects, mut checks) = (0, 0, Checks::default());
        // The first `redirected` components came from a redirect: they are not redirected again.
        let mut redirected = 0usize;
        while let Some(name) = comps.pop_front() {
            let from_redirect = redirected > 0;
            redirected = redirected.saturating_sub(1);
            let last = comps.is_empty();
            if redirecting
                && !from_redirect
                && let Some(to) = self.lookup_redirect(&cur, &name)?
            {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(err(
                        Errno::Loop,
                        format!("too many dir.lookup redirects in {}", show(path)),
                    ));
                }
                redirected += splice(&mut comps, &to, last, &mut must_be_dir)?;
                if to.starts_with(b"/") {
                    (cur, gov) = self.restart_at_root(path, depth.is_some(), guarded)?;
                }
                continue;
            }
            let next = self.step(&cur, &name, &gov, &mut checks)?;
            if next.stat.kind == FileType::Symlink && (!last || follow || must_be_dir) {
                self.may_follow(&cur.stat, &next.stat)?;
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(err(Errno::Loop, format!("too many symbolic links in {}", show(path))));
                }
                let target = kernel.fs().readlink(next.ino)?;
                let spliced = splice(&mut comps, &target, last, &mut must_be_dir)?;
                if from_redirect {
                    redirected += spliced;
                }
                if target.starts_with(b"/") {
                    (cur, gov) = self.restart_at_root(path, depth.is_some(), guarded)?;
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
            let mut next = next;
            if let Some(snapshot) = &snapshot {
                if comps.is_empty() && !gov.is_empty() {
                    // The mount opens (and changes) by inode what its lookup found: where.
                    if matches!(at, At::Inode { .. }) && next.stat.kind != FileType::Directory {
                        kernel.dir_grafts.found(next.ino, cur.ino);
                    }
                    if placed {
                        next.place = Some(Arc::new(Place {
                            dir: cur.ino,
                            name: name.clone().into_boxed_slice(),
                            governors: gov.clone(),
                        }));
                    }
                }
                gov = match name.as_slice() {
                    b"." => gov,
                    b".." => snapshot.governors(kernel.fs(), &next)?,
                    _ if next.stat.kind == FileType::Directory => snapshot.descend(&gov, &next).unwrap_or(gov),
                    _ => gov,
                };
            }
            cur = next;
        }
        if must_be_dir && cur.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("not a directory: {}", show(path))));
        }
        Ok((cur, gov))
    }

    /// A walk's jump to the root (an absolute symbolic link or redirect): `EXDEV` for a walk
    /// beneath a directory.
    fn restart_at_root(&self, path: &[u8], beneath: bool, guarded: bool) -> SysResult<(Found, Governors)> {
        if beneath {
            return Err(escape(path));
        }
        let root = self.start(At::Root, b"/")?;
        let kernel = self.kernel();
        let gov = if guarded {
            kernel.dir_grafts.governors(kernel.fs(), &root)?
        } else {
            Governors::default()
        };
        Ok((root, gov))
    }

    /// Walks to the directory that holds the last component of `path` (following symbolic
    /// links on the way, and checking search permission on that directory too), and returns it
    /// with the last name. A trailing symbolic link is not followed: the name is the link's.
    /// The process's `dir.lookup` graft is asked about the last name too: a redirect of it
    /// walks again to the redirect's directory and name, which are not redirected again.
    pub(crate) fn walk_parent(&self, at: At, path: &[u8]) -> SysResult<Parent> {
        let p = self.walk_parent_via(at, path, true)?;
        if !self.redirects_lookups() || matches!(p.name.as_slice(), b"" | b"." | b"..") {
            return Ok(p);
        }
        let dir = Found::new(p.dir, p.dir_stat.clone());
        match self.lookup_redirect(&dir, &p.name)? {
            None => Ok(p),
            Some(mut to) => {
                if p.trailing_slash && !to.ends_with(b"/") {
                    to.push(b'/');
                }
                let from = At::Inode {
                    ino: p.dir,
                    generation: p.dir_stat.generation,
                };
                let beneath = matches!(at, At::Beneath(_)) && self.start(at, b"")?.ino != ROOT_INO;
                if beneath && to.starts_with(b"/") {
                    return Err(escape(path));
                }
                self.walk_parent_via(from, &to, false)
            }
        }
    }

    fn walk_parent_via(&self, at: At, path: &[u8], redirect: bool) -> SysResult<Parent> {
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
        let (dir, governors) = if dir_path.is_empty() {
            let dir = self.start(at, b"")?;
            let kernel = self.kernel();
            let gov = kernel.dir_grafts.governors(kernel.fs(), &dir)?;
            (dir, gov)
        } else {
            self.walk_governed(at, &dir_path, true, redirect, false)?
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
        let now_s = if governors.is_empty() { 0 } else { self.now_s() };
        Ok(Parent {
            dir: dir.ino,
            dir_stat: dir.stat,
            name,
            trailing_slash,
            governors,
            now_s,
        })
    }
}
