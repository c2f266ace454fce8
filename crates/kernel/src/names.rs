//! System calls on names, `*at` style: mkdir, mknod, symlink, readlink, link, unlink, rmdir,
//! rename, readdir and stat, each from a starting directory ([`At`]) and a path of bytes.
//!
//! Each runs whole under the kernel's namespace lock (write for a change, read for a lookup):
//! the walk, the permission checks and the file system operation see one state, so a rename is
//! atomic against every open, lookup and other rename, and what was checked is what is changed.
//! The order of the checks is Linux's, so that callers see the same errno: the walk (`ENOENT`,
//! `ENOTDIR`, `EACCES` for search, `ELOOP`), then existence, then write permission on the
//! directory, then the sticky bit.

use crate::Change;
use crate::dir_grafts::AccessOp;
use crate::error::{Errno, SysError, SysResult};
use crate::namei::{At, Found, Parent};
use crate::perm::{self, READ, WRITE};
use crate::process::Process;
use vino_fs::{DirEntry, FileType, NewFile, ROOT_INO, Stat};

/// Entries the file system gives per step while a page of a listing fills.
const PAGE_STEP: usize = 256;
/// The budget [`Process::readdir`] reads its pages with.
const PAGE_BUDGET: usize = 64 << 10;

/// One page of a directory listing: entries with their positions (an entry's cookie is its
/// position plus one), and the cookie that continues the listing, `None` at its end. Positions
/// never move while an entry exists, so a listing resumed at a cookie gives every entry present
/// throughout exactly once, however the directory changes between pages.
#[derive(Debug, Clone)]
pub struct DirPage {
    pub entries: Vec<(u64, DirEntry)>,
    pub next: Option<u64>,
}

impl DirPage {
    /// What an entry costs of a page's budget: its name and a record header (WASI's is 24
    /// bytes, more than the protocol's encoding of the rest).
    pub fn cost(e: &DirEntry) -> usize {
        24 + e.name.len()
    }
}

/// How a rename may treat an existing destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with `EEXIST` rather than replace (`RENAME_NOREPLACE`).
    pub no_replace: bool,
}

fn err(errno: Errno, what: impl Into<String>) -> SysError {
    SysError::new(errno, what)
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// True for the names a directory always has, or none (the root's own path, `/`).
fn special(name: &[u8]) -> bool {
    name.is_empty() || name == b"." || name == b".."
}

impl Process {
    /// Write and search permission on the directory a name is made in or removed from, then
    /// the directory's `dir.access` grafts on `op` (`flags`: the new file's type for a create).
    fn may_change(&self, p: &Parent, op: AccessOp, flags: i32) -> SysResult<()> {
        if !perm::may(self.credentials(), &p.dir_stat, WRITE | perm::EXEC) {
            return Err(err(
                Errno::Acces,
                format!("no write permission on the directory of {}", show(&p.name)),
            ));
        }
        self.parent_allows(p, op, flags)
    }

    /// The `dir.access` grafts over `p.dir` on `op` of `p.name`.
    pub(crate) fn parent_allows(&self, p: &Parent, op: AccessOp, flags: i32) -> SysResult<()> {
        if p.governors.is_empty() {
            return Ok(());
        }
        let q = self.access_query_at(op, p.dir, &p.name, flags, p.now_s);
        p.governors.check(&q, &mut 0)
    }

    /// The name `p.name` in `p.dir`, if there is one (a lookup, which the directory's
    /// `dir.access` grafts may refuse).
    pub(crate) fn existing(&self, p: &Parent) -> SysResult<Option<Found>> {
        if !special(&p.name) {
            self.parent_allows(p, AccessOp::Lookup, 0)?;
        }
        self.lookup_in(p)
    }

    /// The name `p.name` in `p.dir`, if there is one, the grafts already asked.
    pub(crate) fn lookup_in(&self, p: &Parent) -> SysResult<Option<Found>> {
        match self.kernel().fs().lookup_stat(p.dir, &p.name) {
            Ok((ino, stat)) => Ok(Some(Found::new(ino, stat))),
            Err(e) if e.errno() == Errno::NoEnt as i32 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks that `p.name` may be made (a file of `kind`): a new name, in a directory this
    /// process may write.
    fn new_name(&self, p: &Parent, kind: FileType) -> SysResult<()> {
        self.absent(p)?;
        self.may_change(p, AccessOp::Create, crate::dir_grafts::type_bits(kind))
    }

    fn absent(&self, p: &Parent) -> SysResult<()> {
        if special(&p.name) || self.existing(p)?.is_some() {
            return Err(err(Errno::Exist, format!("file exists: {}", show(&p.name))));
        }
        Ok(())
    }

    /// Runs a file system operation that may allocate, with root's reserve judged by this
    /// process's privilege rather than by the owner of what grows (a name in root's `/tmp`).
    pub(crate) fn acting<T>(&self, f: impl FnOnce() -> T) -> T {
        let actor = vino_fs::Actor {
            privileged: self.credentials().privileged,
        };
        vino_fs::acting(actor, f)
    }

    /// What a file made by this process in `p.dir` is given.
    fn new_file(&self, p: &Parent, mode: u16, kind: FileType) -> NewFile {
        let (gid, mode) = perm::new_file_owner(self.credentials(), &p.dir_stat, mode, kind);
        NewFile {
            mode,
            uid: self.credentials().uid,
            gid,
            creator: self.pid(),
        }
    }

    /// Tells the change hooks that `name` in `dir` changed, and the inodes' attributes.
    pub(crate) fn tell_changes(&self, dir: u64, name: &[u8], inodes: &[u64]) {
        let kernel = self.kernel();
        if !kernel.changes.wanted() {
            return;
        }
        let mut changes = vec![Change::Entry {
            dir,
            name: name.to_vec(),
        }];
        changes.extend(inodes.iter().map(|&ino| Change::Attr { ino }));
        kernel.changes.tell(self.pid(), &changes);
    }

    /// Makes a directory.
    pub fn mkdir_at(&self, at: At, path: impl AsRef<[u8]>, mode: u16) -> SysResult<Stat> {
        let path = path.as_ref();
        let st = {
            let _ns = self.kernel().ns.write();
            let p = self.walk_parent(at, path)?;
            self.new_name(&p, FileType::Directory)?;
            let attrs = self.new_file(&p, mode, FileType::Directory);
            let ino = self.acting(|| self.kernel().fs().mkdir(p.dir, &p.name, &attrs))?;
            self.tell_changes(p.dir, &p.name, &[p.dir]);
            self.kernel().events.created(self, p.dir, &show(&p.name), ino);
            self.kernel().fs().stat(ino)?
        };
        Ok(st)
    }

    /// Makes a regular file, FIFO, socket or device node. Device nodes only by a privileged
    /// process (`EPERM`); what a FIFO, socket or device does is the host's business (through the
    /// mount): VINO stores the node.
    pub fn mknod_at(&self, at: At, path: impl AsRef<[u8]>, kind: FileType, mode: u16, rdev: u64) -> SysResult<Stat> {
        match kind {
            FileType::CharDevice | FileType::BlockDevice if !self.credentials().privileged => {
                return Err(err(Errno::Perm, "only a privileged process may make device nodes"));
            }
            FileType::Directory | FileType::Symlink => {
                return Err(err(Errno::Inval, "mknod makes files, FIFOs, sockets and devices only"));
            }
            _ => {}
        }
        let path = path.as_ref();
        let _ns = self.kernel().ns.write();
        let p = self.walk_parent(at, path)?;
        self.new_name(&p, kind)?;
        let attrs = self.new_file(&p, mode, kind);
        let fs = self.kernel().fs();
        let ino = self.acting(|| fs.mknod(p.dir, &p.name, kind, rdev, &attrs))?;
        self.tell_changes(p.dir, &p.name, &[p.dir]);
        self.kernel().events.created(self, p.dir, &show(&p.name), ino);
        Ok(fs.stat(ino)?)
    }

    /// Makes a symbolic link at `path` holding `target` (not checked: it may dangle).
    pub fn symlink_at(&self, target: impl AsRef<[u8]>, at: At, path: impl AsRef<[u8]>) -> SysResult<Stat> {
        let target = target.as_ref();
        if target.is_empty() {
            return Err(err(Errno::NoEnt, "a symbolic link needs a target"));
        }
        if target.len() > crate::namei::PATH_MAX {
            return Err(err(Errno::NameTooLong, format!("target of {} bytes", target.len())));
        }
        let _ns = self.kernel().ns.write();
        let p = self.walk_parent(at, path.as_ref())?;
        self.new_name(&p, FileType::Symlink)?;
        let attrs = self.new_file(&p, 0o777, FileType::Symlink);
        let fs = self.kernel().fs();
        let ino = self.acting(|| fs.symlink(p.dir, &p.name, target, &attrs))?;
        self.tell_changes(p.dir, &p.name, &[p.dir]);
        self.kernel().events.created(self, p.dir, &show(&p.name), ino);
        Ok(fs.stat(ino)?)
    }

    /// The target of the symbolic link at `path` (`EINVAL` if it is not one).
    pub fn readlink_at(&self, at: At, path: impl AsRef<[u8]>) -> SysResult<Vec<u8>> {
        let _ns = self.kernel().ns.read();
        let f = self.walk(at, path.as_ref(), false)?;
        if f.stat.kind != FileType::Symlink {
            return Err(err(Errno::Inval, "not a symbolic link"));
        }
        Ok(self.kernel().fs().readlink(f.ino)?)
    }

    /// What `path` names; a last component that is a symbolic link is followed if `follow`.
    pub fn stat_at(&self, at: At, path: impl AsRef<[u8]>, follow: bool) -> SysResult<Stat> {
        let _ns = self.kernel().ns.read();
        Ok(self.walk(at, path.as_ref(), follow)?.stat)
    }

    /// A page of the directory at `path` from `cookie` on (0: the start; `.` and `..`
    /// included), entries worth at most `budget` bytes as [`DirPage`] counts them. Needs search
    /// permission on the path and read permission on the directory, checked for every page.
    pub fn readdir_page_at(&self, at: At, path: impl AsRef<[u8]>, cookie: u64, budget: usize) -> SysResult<DirPage> {
        let _ns = self.kernel().ns.read();
        let dir = self.listable(at, path.as_ref())?;
        self.page(dir, cookie, budget)
    }

    /// As [`Process::readdir_page_at`], for the directory open as `fd`.
    pub fn readdir_page_fd(&self, fd: crate::Fd, cookie: u64, budget: usize) -> SysResult<DirPage> {
        let _ns = self.kernel().ns.read();
        let f = self.walk(At::Fd(fd), b"", true)?;
        if f.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("descriptor {fd} is not a directory")));
        }
        if !perm::may(self.credentials(), &f.stat, READ) {
            return Err(err(Errno::Acces, "no read permission on the directory"));
        }
        self.page(f.ino, cookie, budget)
    }

    /// Fills a page from the file system a step at a time, so that it costs O(page) whatever
    /// the directory's size. The first entry is given even if over budget: a listing always
    /// moves on. Called under the namespace lock.
    fn page(&self, dir: u64, cookie: u64, budget: usize) -> SysResult<DirPage> {
        let fs = self.kernel().fs();
        let (mut entries, mut used, mut from) = (Vec::new(), 0, cookie);
        loop {
            let step = fs.readdir_from(dir, from, PAGE_STEP)?;
            let more = step.len() == PAGE_STEP;
            for (pos, e) in step {
                used += DirPage::cost(&e);
                if used > budget && !entries.is_empty() {
                    return Ok(DirPage {
                        entries,
                        next: Some(pos),
                    });
                }
                entries.push((pos, e));
                from = pos + 1;
            }
            if !more {
                return Ok(DirPage { entries, next: None });
            }
        }
    }

    /// The directory at `path`, if the caller may list it (read permission). Called under the
    /// namespace lock.
    fn listable(&self, at: At, path: &[u8]) -> SysResult<u64> {
        let f = self.walk(at, path, true)?;
        if f.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, "not a directory"));
        }
        if !perm::may(self.credentials(), &f.stat, READ) {
            return Err(err(Errno::Acces, "no read permission on the directory"));
        }
        Ok(f.ino)
    }

    /// Up to `max` entries of the directory at `path` from position `from` on, `.` and `..`
    /// included, each with its position (the entry's offset in the directory; resume at the
    /// last one given plus one: an entry present throughout is listed exactly once). Needs read
    /// permission. Serves a listing read in parts without an open descriptor (the mount's).
    pub fn readdir_from_at(
        &self,
        at: At,
        path: impl AsRef<[u8]>,
        from: u64,
        max: usize,
    ) -> SysResult<Vec<(u64, DirEntry)>> {
        let _ns = self.kernel().ns.read();
        let dir = self.listable(at, path.as_ref())?;
        Ok(self.kernel().fs().readdir_from(dir, from, max)?)
    }

    /// Gives the file at `from` (not a directory) a second name, `to`. With `follow`, a symbolic
    /// link at `from` is followed (`AT_SYMLINK_FOLLOW`); without, the link itself is linked.
    pub fn link_at(
        &self,
        from_at: At,
        from: impl AsRef<[u8]>,
        to_at: At,
        to: impl AsRef<[u8]>,
        follow: bool,
    ) -> SysResult<Stat> {
        let _ns = self.kernel().ns.write();
        let src = self.walk(from_at, from.as_ref(), follow)?;
        if src.stat.kind == FileType::Directory {
            return Err(err(Errno::Perm, "cannot link a directory"));
        }
        if src.stat.nlink == 0 {
            return Err(err(Errno::NoEnt, "the file has no name left to link to"));
        }
        let p = self.walk_parent(to_at, to.as_ref())?;
        if p.trailing_slash {
            return Err(err(Errno::NotDir, format!("{}/: not a directory", show(&p.name))));
        }
        // Linux's order: the name exists, then protected_hardlinks, then write permission.
        self.absent(&p)?;
        if !self.kernel().protect.may_link(self.credentials(), &src.stat) {
            return Err(err(
                Errno::Perm,
                "protected_hardlinks: only the owner, or who may read and write it, links a file",
            ));
        }
        self.may_change(&p, AccessOp::Create, crate::dir_grafts::type_bits(src.stat.kind))?;
        let fs = self.kernel().fs();
        self.acting(|| fs.link(src.ino, p.dir, &p.name))?;
        self.tell_changes(p.dir, &p.name, &[p.dir, src.ino]);
        self.debug_check_locked(&[src.ino]);
        Ok(fs.stat(src.ino)?)
    }

    /// Removes a name of a file that is not a directory. A file whose last name goes while it
    /// is open (or held by the mount) lives on, nameless, until its last reference goes.
    pub fn unlink_at(&self, at: At, path: impl AsRef<[u8]>) -> SysResult<()> {
        let _ns = self.kernel().ns.write();
        let p = self.walk_parent(at, path.as_ref())?;
        if special(&p.name) {
            return Err(err(Errno::IsDir, format!("cannot unlink `{}`", show(&p.name))));
        }
        let victim = self
            .existing(&p)?
            .ok_or_else(|| err(Errno::NoEnt, format!("no such file: {}", show(&p.name))))?;
        if victim.stat.kind == FileType::Directory {
            return Err(err(Errno::IsDir, format!("is a directory: {}", show(&p.name))));
        }
        if p.trailing_slash {
            return Err(err(Errno::NotDir, format!("not a directory: {}", show(&p.name))));
        }
        self.may_change(&p, AccessOp::Remove, 0)?;
        self.sticky_check(&p, &victim.stat)?;
        let fs = self.kernel().fs();
        self.drop_name(&victim.stat, |keep| {
            if keep {
                fs.unlink_keep(p.dir, &p.name)
            } else {
                fs.unlink(p.dir, &p.name)
            }
        })?;
        self.tell_changes(p.dir, &p.name, &[p.dir, victim.ino]);
        self.kernel()
            .events
            .unlinked(self, p.dir, &show(&p.name), victim.ino, &victim.stat);
        self.debug_check_locked(&[victim.ino]);
        Ok(())
    }

    fn sticky_check(&self, p: &Parent, victim: &Stat) -> SysResult<()> {
        if perm::may_remove_from(self.credentials(), &p.dir_stat, victim) {
            Ok(())
        } else {
            Err(err(
                Errno::Perm,
                format!(
                    "{}: the directory is sticky and the file is another user's",
                    show(&p.name)
                ),
            ))
        }
    }

    /// Runs `remove`, which takes a name from the non-directory `victim`. If that is its last
    /// name and something references the file, `remove` is told to keep the inode (the file
    /// system's orphan list) and the last reference frees it; if nothing does, the file goes
    /// now, its cached pages first (a stale dirty page must not be written to a reused block).
    fn drop_name(&self, victim: &Stat, remove: impl FnOnce(bool) -> vino_fs::Result<()>) -> SysResult<()> {
        let kernel = self.kernel();
        if victim.nlink > 1 {
            return Ok(remove(false)?);
        }
        let parked = kernel.files.park_if_referenced(victim.ino);
        if let Err(e) = remove(true) {
            if parked {
                kernel.files.unpark(victim.ino);
            }
            return Err(e.into());
        }
        if !parked {
            kernel.cache().invalidate(victim.ino, 0);
            kernel.streams.forget(kernel.cache(), victim.ino);
            kernel.fs().release_orphan(victim.ino)?;
        }
        // A parked file with a link left would never be freed, and one freed while referenced
        // would hand its blocks to another file under an open descriptor.
        // (A device that fails the read proves nothing either way.)
        debug_assert!(
            !parked
                || match kernel.fs().stat(victim.ino) {
                    Ok(st) => st.nlink == 0,
                    Err(e) => e.errno() != Errno::NoEnt as i32,
                },
            "parked inode {} has a link left or is gone",
            victim.ino
        );
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir_at(&self, at: At, path: impl AsRef<[u8]>) -> SysResult<()> {
        let _ns = self.kernel().ns.write();
        let p = self.walk_parent(at, path.as_ref())?;
        match p.name.as_slice() {
            b"." => return Err(err(Errno::Inval, "cannot remove `.`")),
            b".." => return Err(err(Errno::NotEmpty, "cannot remove `..`")),
            b"" => return Err(err(Errno::Busy, "cannot remove the root")),
            _ => {}
        }
        let victim = self
            .existing(&p)?
            .ok_or_else(|| err(Errno::NoEnt, format!("no such directory: {}", show(&p.name))))?;
        if victim.stat.kind != FileType::Directory {
            return Err(err(Errno::NotDir, format!("not a directory: {}", show(&p.name))));
        }
        self.may_change(&p, AccessOp::Remove, 0)?;
        self.sticky_check(&p, &victim.stat)?;
        self.kernel().fs().rmdir(p.dir, &p.name)?;
        self.kernel().dir_grafts.unbind(victim.ino);
        self.tell_changes(p.dir, &p.name, &[p.dir, victim.ino]);
        self.kernel()
            .events
            .unlinked(self, p.dir, &show(&p.name), victim.ino, &victim.stat);
        self.debug_check_locked(&[victim.ino]);
        Ok(())
    }

    /// Renames `from` to `to`, atomically: `to` names either the old file or the moved one at
    /// every instant, for every other system call. A replaced file goes as an unlinked one does.
    pub fn rename_at(
        &self,
        from_at: At,
        from: impl AsRef<[u8]>,
        to_at: At,
        to: impl AsRef<[u8]>,
        flags: RenameFlags,
    ) -> SysResult<()> {
        let _ns = self.kernel().ns.write();
        let sp = self.walk_parent(from_at, from.as_ref())?;
        let dp = self.walk_parent(to_at, to.as_ref())?;
        if special(&sp.name) {
            return Err(err(Errno::Busy, format!("cannot rename `{}`", show(&sp.name))));
        }
        if special(&dp.name) {
            let errno = if flags.no_replace { Errno::Exist } else { Errno::Busy };
            return Err(err(errno, format!("cannot rename onto `{}`", show(&dp.name))));
        }
        let src = self
            .existing(&sp)?
            .ok_or_else(|| err(Errno::NoEnt, format!("no such file: {}", show(&sp.name))))?;
        let is_dir = src.stat.kind == FileType::Directory;
        if (sp.trailing_slash || dp.trailing_slash) && !is_dir {
            return Err(err(Errno::NotDir, format!("not a directory: {}", show(&sp.name))));
        }
        let dst = self.existing(&dp)?;
        if flags.no_replace && dst.is_some() {
            return Err(err(Errno::Exist, format!("file exists: {}", show(&dp.name))));
        }
        // Before the destination's kind and the permissions, as Linux checks.
        if is_dir && self.kernel().fs().is_within(dp.dir, src.ino)? {
            return Err(err(
                Errno::Inval,
                format!("cannot move directory {} into its own subtree", show(&sp.name)),
            ));
        }
        self.may_change(&sp, AccessOp::Remove, 0)?;
        self.may_change(&dp, AccessOp::Create, crate::dir_grafts::type_bits(src.stat.kind))?;
        self.sticky_check(&sp, &src.stat)?;
        if let Some(dst) = &dst {
            if dst.ino == src.ino {
                // Two names of one file: POSIX says do nothing.
                return Ok(());
            }
            self.sticky_check(&dp, &dst.stat)?;
            match (is_dir, dst.stat.kind == FileType::Directory) {
                (true, false) => return Err(err(Errno::NotDir, format!("not a directory: {}", show(&dp.name)))),
                (false, true) => return Err(err(Errno::IsDir, format!("is a directory: {}", show(&dp.name)))),
                _ => {}
            }
        }
        // A directory that moves rewrites its `..`: that needs write permission on it.
        if is_dir && sp.dir != dp.dir && !perm::may(self.credentials(), &src.stat, WRITE) {
            return Err(err(Errno::Acces, format!("no write permission on {}", show(&sp.name))));
        }
        if is_dir && src.ino == ROOT_INO {
            return Err(err(Errno::Busy, "cannot rename the root"));
        }
        let fs = self.kernel().fs();
        let rename = |keep| {
            let f = vino_fs::RenameFlags {
                no_replace: flags.no_replace,
                keep_replaced: keep,
            };
            self.acting(|| fs.rename_with(sp.dir, &sp.name, dp.dir, &dp.name, f))
        };
        match &dst {
            Some(dst) if dst.stat.kind != FileType::Directory => self.drop_name(&dst.stat, rename)?,
            _ => rename(false)?,
        }
        // A directory that became its own ancestor would be cut off from the root with all
        // below it, and every walk up from it would loop.
        debug_assert!(
            !is_dir || !matches!(fs.is_within(dp.dir, src.ino), Ok(true)),
            "rename left directory {} its own ancestor",
            src.ino
        );
        let kernel = self.kernel();
        if let Some(dst) = &dst
            && dst.stat.kind == FileType::Directory
        {
            kernel.dir_grafts.unbind(dst.ino);
        }
        if kernel.changes.wanted() {
            let mut changes = vec![
                Change::Entry {
                    dir: sp.dir,
                    name: sp.name.clone(),
                },
                Change::Entry {
                    dir: dp.dir,
                    name: dp.name.clone(),
                },
                Change::Attr { ino: sp.dir },
                Change::Attr { ino: dp.dir },
                Change::Attr { ino: src.ino },
            ];
            changes.extend(dst.as_ref().map(|d| Change::Attr { ino: d.ino }));
            kernel.changes.tell(self.pid(), &changes);
        }
        if let Some(dst) = &dst {
            kernel
                .events
                .unlinked(self, dp.dir, &show(&dp.name), dst.ino, &dst.stat);
        }
        self.debug_check_locked(&[src.ino, dst.as_ref().map_or(src.ino, |d| d.ino)]);
        Ok(())
    }

    // ---- the path calls, as wrappers ---------------------------------------------------------

    pub fn stat(&self, path: &str) -> SysResult<Stat> {
        self.stat_at(At::Root, path, true)
    }

    pub fn lstat(&self, path: &str) -> SysResult<Stat> {
        self.stat_at(At::Root, path, false)
    }

    pub fn mkdir(&self, path: &str, mode: u16) -> SysResult<()> {
        self.mkdir_at(At::Root, path, mode).map(drop)
    }

    pub fn rmdir(&self, path: &str) -> SysResult<()> {
        self.rmdir_at(At::Root, path)
    }

    /// The entries of the directory at `path`, `.` and `..` left out, read page by page into
    /// the caller's memory: for tools and tests on directories they made, never for a front end
    /// answering another principal.
    pub fn readdir(&self, path: &str) -> SysResult<Vec<DirEntry>> {
        let (mut out, mut cookie) = (Vec::new(), 0);
        loop {
            let page = self.readdir_page_at(At::Root, path, cookie, PAGE_BUDGET)?;
            let dots = |e: &DirEntry| e.name == b"." || e.name == b"..";
            out.extend(page.entries.into_iter().map(|(_, e)| e).filter(|e| !dots(e)));
            match page.next {
                Some(next) => cookie = next,
                None => return Ok(out),
            }
        }
    }

    pub fn unlink(&self, path: &str) -> SysResult<()> {
        self.unlink_at(At::Root, path)
    }

    pub fn rename(&self, from: &str, to: &str) -> SysResult<()> {
        self.rename_at(At::Root, from, At::Root, to, RenameFlags::default())
    }

    pub fn link(&self, from: &str, to: &str) -> SysResult<()> {
        self.link_at(At::Root, from, At::Root, to, false).map(drop)
    }

    pub fn symlink(&self, target: &str, path: &str) -> SysResult<()> {
        self.symlink_at(target, At::Root, path).map(drop)
    }

    pub fn readlink(&self, path: &str) -> SysResult<Vec<u8>> {
        self.readlink_at(At::Root, path)
    }
}
