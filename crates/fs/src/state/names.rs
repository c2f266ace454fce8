//! Names: directory entries, lookup, create, link, unlink, rename and path resolution.

use super::*;

fn bad_name(name: &[u8]) -> Option<FsError> {
    if name.len() > MAX_NAME {
        return Some(FsError::NameTooLong(name.len()));
    }
    if !name_ok(name) {
        return Some(FsError::InvalidArgument(format!(
            "bad name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    None
}

pub(crate) fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// Checks a name for a new entry (not `.` or `..`).
pub(crate) fn check_new_name(name: &[u8]) -> Result<()> {
    if let Some(e) = bad_name(name) {
        return Err(e);
    }
    if name == b"." || name == b".." {
        return Err(FsError::InvalidArgument(format!(
            "`{}` cannot be created or replaced",
            show(name)
        )));
    }
    Ok(())
}

impl FsState {
    /// A directory inode, or NotADirectory.
    pub fn dir(&mut self, ino: u64) -> Result<Inode> {
        let i = self.live(ino)?;
        if !i.is_dir() {
            return Err(FsError::NotADirectory(format!("inode {ino}")));
        }
        if !i.size.is_multiple_of(BS as u64) {
            return Err(corrupt(format!("directory {ino}: size {} is not whole blocks", i.size)));
        }
        Ok(i)
    }

    fn dir_block(&mut self, ino: u64, inode: &Inode, fb: u64) -> Result<u64> {
        self.bmap(ino, inode, fb)?
            .ok_or_else(|| corrupt(format!("directory {ino}: block {fb} is a hole")))
    }

    fn dir_entries(&mut self, ino: u64, b: u64) -> Result<Vec<RawEntry>> {
        dir_parse(self.meta.get(b)?, ino).map_err(FsError::Corrupt)
    }

    /// The records of directory `ino`'s block `b`, checked, with the block.
    fn dir_block_records(&mut self, ino: u64, b: u64) -> Result<(&Block, Vec<DirRecord>)> {
        let blk = self.meta.get(b)?;
        let records = dir_records_checked(blk, ino).map_err(FsError::Corrupt)?;
        Ok((blk, records))
    }

    /// The index of directory `dir` (see [`crate::dirindex`]), built from its blocks if needed.
    fn dir_index(&mut self, dir: u64, inode: &Inode) -> Result<&DirIdx> {
        if self.dirs.get(dir).is_none() {
            let mut idx = DirIdx::default();
            for fb in 0..inode.size / BS as u64 {
                let block = self.dir_block(dir, inode, fb)?;
                let (blk, records) = self.dir_block_records(dir, block)?;
                idx.add_block(fb, blk, &records);
            }
            self.dirs.insert(dir, idx);
        }
        Ok(self.dirs.get(dir).expect("just indexed"))
    }

    /// Checks the index of `dir` against its blocks, in builds that check invariants, for
    /// directories small enough that doing so after every change stays cheap.
    fn check_dir_index(&mut self, dir: u64) -> Result<()> {
        if !crate::CHECKS_INVARIANTS {
            return Ok(());
        }
        let inode = self.dir(dir)?;
        if inode.size / BS as u64 > 16 {
            return Ok(());
        }
        let mut fresh = DirIdx::default();
        for fb in 0..inode.size / BS as u64 {
            let block = self.dir_block(dir, &inode, fb)?;
            let (blk, records) = self.dir_block_records(dir, block)?;
            fresh.add_block(fb, blk, &records);
        }
        if let Some(idx) = self.dirs.get(dir) {
            assert_eq!(
                idx.blocks(),
                fresh.blocks(),
                "directory {dir}: the index's block count is off"
            );
            assert!(
                idx.same_as(&fresh),
                "directory {dir}: the index does not match the blocks"
            );
        }
        self.dirs.check();
        Ok(())
    }

    /// Finds `name` in directory `dir`: its index says which block, that block is parsed.
    pub fn dir_find(&mut self, dir: u64, inode: &Inode, name: &[u8]) -> Result<Option<Found>> {
        let Some(slot) = self.dir_index(dir, inode)?.get(name) else {
            return Ok(None);
        };
        let block = self.dir_block(dir, inode, slot.fb)?;
        let (blk, entries) = self.dir_block_records(dir, block)?;
        let Some(index) = entries.iter().position(|e| e.ino != 0 && e.name(blk) == name) else {
            self.dirs.forget(dir);
            return Err(corrupt(format!(
                "directory {dir}: `{}` is not in block {} where its index says",
                show(name),
                slot.fb
            )));
        };
        Ok(Some(Found {
            fb: slot.fb,
            block,
            entries,
            index,
            name: name.to_vec(),
        }))
    }

    pub fn lookup(&mut self, dir: u64, name: &[u8]) -> Result<u64> {
        if let Some(e) = bad_name(name) {
            return Err(e);
        }
        let d = self.dir(dir)?;
        match self.dir_index(dir, &d)?.get(name) {
            Some(slot) => Ok(u64::from(slot.ino)),
            None => Err(FsError::NotFound(show(name))),
        }
    }

    pub fn readdir(&mut self, dir: u64) -> Result<Vec<DirEntry>> {
        let d = self.dir(dir)?;
        let mut out = Vec::new();
        for fb in 0..d.size / BS as u64 {
            let b = self.dir_block(dir, &d, fb)?;
            for e in self.dir_entries(dir, b)? {
                if e.ino == 0 || e.name == b"." || e.name == b".." {
                    continue;
                }
                let kind = FileType::from_dirent_code(e.ftype).expect("parse checked the type");
                out.push(DirEntry {
                    name: e.name,
                    ino: u64::from(e.ino),
                    kind,
                });
            }
        }
        Ok(out)
    }

    /// Up to `max` entries of `dir` (`.` and `..` included, as stored) from position `from`
    /// on, each with its position: the entry's byte offset in the directory. An entry never
    /// moves while it exists (a new one fills a free record, a removed one is merged into the
    /// record before it), so a listing resumed at the position after the last entry it gave
    /// returns every entry present throughout exactly once, as ext2's telldir cookies do.
    pub fn readdir_from(&mut self, dir: u64, from: u64, max: usize) -> Result<Vec<(u64, DirEntry)>> {
        let d = self.dir(dir)?;
        let mut out = Vec::new();
        for fb in from / BS as u64..d.size / BS as u64 {
            let b = self.dir_block(dir, &d, fb)?;
            for e in self.dir_entries(dir, b)? {
                let pos = fb * BS as u64 + e.off as u64;
                if e.ino == 0 || pos < from {
                    continue;
                }
                if out.len() == max {
                    return Ok(out);
                }
                let kind = FileType::from_dirent_code(e.ftype).expect("parse checked the type");
                out.push((
                    pos,
                    DirEntry {
                        name: e.name,
                        ino: u64::from(e.ino),
                        kind,
                    },
                ));
            }
        }
        Ok(out)
    }

    fn dir_is_empty(&mut self, dir: u64, inode: &Inode) -> Result<bool> {
        Ok(self.dir_index(dir, inode)?.is_empty())
    }

    pub(crate) fn dir_add_entry(&mut self, dir: u64, name: &[u8], ino: u64, ftype: u8) -> Result<()> {
        self.check_inode_taken(ino);
        let d = self.dir(dir)?;
        let need = dirent_size(name.len());
        let (fb, b) = match self.dir_index(dir, &d)?.block_with_room(need) {
            Some(fb) => (fb, self.dir_block(dir, &d, fb)?),
            None => {
                // No room: a new block at the end of the directory.
                let fb = d.size / BS as u64;
                let (b, _) = self.ensure_block(dir, fb)?;
                dir_empty_block(self.meta.create(b)?, dir);
                self.modify(dir, |i| i.size = (fb + 1) * BS as u64)?;
                (fb, b)
            }
        };
        let (_, mut entries) = self.dir_block_records(dir, b)?;
        let blk = self.meta.get_mut(b)?;
        if !dir_add(blk, &mut entries, dir, name, ino, ftype) {
            self.dirs.forget(dir);
            return Err(corrupt(format!(
                "directory {dir}: block {fb} has less room than its index says"
            )));
        }
        check_records(blk, &entries);
        let room = room_of(&entries);
        let slot = Slot { fb, ino: ino as u32 };
        self.dirs.added(dir, name, slot, room);
        self.check_dir_index(dir)
    }

    /// Removes the entry `f` found in `dir` (`f`'s records then describe the block as changed).
    pub(crate) fn dir_drop_entry(&mut self, dir: u64, f: &mut Found) -> Result<()> {
        let blk = self.meta.get_mut(f.block)?;
        dir_remove(blk, &mut f.entries, f.index, dir);
        check_records(blk, &f.entries);
        let room = room_of(&f.entries);
        self.dirs.removed(dir, &f.name, f.fb, room);
        self.check_dir_index(dir)
    }

    /// Points the entry `f` of `dir` at another inode.
    fn dir_retarget_entry(&mut self, dir: u64, f: &Found, ino: u64, ftype: u8) -> Result<()> {
        let blk = self.meta.get_mut(f.block)?;
        dir_retarget(blk, &f.entries[f.index], dir, ino, ftype);
        self.dirs.retargeted(dir, &f.name, ino as u32);
        self.check_dir_index(dir)
    }

    pub(crate) fn touch_dir(&mut self, dir: u64, nlink_delta: i32) -> Result<()> {
        let now = self.now_ns();
        self.modify(dir, |i| {
            i.mtime_ns = now;
            i.ctime_ns = now;
            i.nlink = i.nlink.saturating_add_signed(nlink_delta);
        })?;
        Ok(())
    }

    /// Frees an inode and all its blocks (its xattr block included).
    pub(crate) fn release(&mut self, ino: u64, mut inode: Inode) -> Result<()> {
        if inode.is_dir() {
            // The number may come back as another directory.
            self.dirs.forget(ino);
        }
        self.free_from(ino, &mut inode, 0)?;
        if inode.xattr != 0 {
            let x = self.ptr(ino, inode.xattr)?;
            self.free_block(inode.uid, x)?;
        }
        self.free_inode(ino, inode.is_dir(), inode.generation, inode.uid)
    }

    /// Creates a file or directory `name` in `dir`.
    pub fn create(&mut self, dir: u64, name: &[u8], kind: FileType, attrs: &NewFile) -> Result<u64> {
        self.create_node(dir, name, kind, 0, None, attrs)
    }

    /// Creates an inode of any type: `rdev` for a device, `target` for a symlink (checked by
    /// the caller).
    pub(crate) fn create_node(
        &mut self,
        dir: u64,
        name: &[u8],
        kind: FileType,
        rdev: u64,
        target: Option<&[u8]>,
        attrs: &NewFile,
    ) -> Result<u64> {
        check_new_name(name)?;
        if kind != FileType::Symlink && attrs.mode & !0o7777 != 0 {
            return Err(FsError::InvalidArgument("mode has bits outside 0o7777".into()));
        }
        let d = self.dir(dir)?;
        if self.dir_find(dir, &d, name)?.is_some() {
            return Err(FsError::Exists(show(name)));
        }
        let is_dir = kind == FileType::Directory;
        let ino = self.alloc_inode(self.geo.ino_group(dir), is_dir, attrs.uid)?;
        let old = self.read_inode(ino).unwrap_or_default();
        if !old.is_free() {
            return Err(corrupt(format!("inode {ino} is free in its bitmap but in use")));
        }
        let now = self.now_ns();
        let symlink = kind == FileType::Symlink;
        let target = target.unwrap_or_default();
        let inode = Inode {
            mode: kind.mode_bits() | if symlink { 0o777 } else { attrs.mode },
            nlink: if is_dir { 2 } else { 1 },
            uid: attrs.uid,
            gid: attrs.gid,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            generation: old.generation.wrapping_add(1),
            creator: attrs.creator,
            rdev: if kind.is_device() { rdev } else { 0 },
            size: if symlink { target.len() as u64 } else { 0 },
            inline: if symlink && target.len() <= INLINE_SYMLINK {
                target.to_vec()
            } else {
                Vec::new()
            },
            // A directory's codec goes to the regular files and directories made in it.
            stream: if matches!(kind, FileType::Regular | FileType::Directory) {
                d.stream
            } else {
                None
            },
            ..Inode::default()
        };
        self.write_inode(ino, &inode)?;
        if symlink && target.len() > INLINE_SYMLINK {
            // A slow symlink: the target in one block, journaled like a directory block.
            let (b, _) = self.ensure_block(ino, 0)?;
            let blk = self.meta.create(b)?;
            blk.fill(0);
            blk[..target.len()].copy_from_slice(target);
        }
        if is_dir {
            let (b, _) = self.ensure_block(ino, 0)?;
            let blk = self.meta.create(b)?;
            dir_first_block(blk, ino, dir);
            self.modify(ino, |i| i.size = BS as u64)?;
        }
        self.dir_add_entry(dir, name, ino, kind.dirent_code())?;
        self.touch_dir(dir, i32::from(is_dir))?;
        Ok(ino)
    }

    /// A new name for an existing file.
    pub fn link(&mut self, ino: u64, dir: u64, name: &[u8]) -> Result<()> {
        check_new_name(name)?;
        let i = self.live(ino)?;
        if i.is_dir() {
            return Err(FsError::IsADirectory(format!(
                "inode {ino}: directories cannot be linked"
            )));
        }
        if i.nlink == 0 {
            return Err(FsError::NotFound(format!("inode {ino} has no name left")));
        }
        let d = self.dir(dir)?;
        if self.dir_find(dir, &d, name)?.is_some() {
            return Err(FsError::Exists(show(name)));
        }
        // A second name is charged to the file's owner (see `crate::quota`).
        self.quota.check_links(i.uid, 1)?;
        self.quota.charge_links(i.uid, 1);
        let ftype = i.file_type().expect("live inode has a type").dirent_code();
        self.dir_add_entry(dir, name, ino, ftype)?;
        let now = self.now_ns();
        self.modify(ino, |i| {
            i.nlink += 1;
            i.ctime_ns = now;
        })?;
        self.touch_dir(dir, 0)
    }

    pub fn unlink(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        self.unlink_with(dir, name, false)
    }

    /// Removes a name of a non-directory; if it was the last, the inode is freed, or with
    /// `keep` put on the orphan list.
    pub(crate) fn unlink_with(&mut self, dir: u64, name: &[u8], keep: bool) -> Result<()> {
        if let Some(e) = bad_name(name) {
            return Err(e);
        }
        let d = self.dir(dir)?;
        let mut f = self
            .dir_find(dir, &d, name)?
            .ok_or_else(|| FsError::NotFound(show(name)))?;
        let ino = f.ino();
        let target = self.linked(ino)?;
        if target.is_dir() {
            return Err(FsError::IsADirectory(show(name)));
        }
        self.dir_drop_entry(dir, &mut f)?;
        self.drop_link(ino, target, keep)?;
        self.touch_dir(dir, 0)
    }

    /// A non-directory loses a name: freed if it was the last (or, with `keep`, put on the
    /// orphan list), else its ctime changes.
    fn drop_link(&mut self, ino: u64, mut target: Inode, keep: bool) -> Result<()> {
        if target.nlink > 1 {
            self.quota.charge_links(target.uid, -1);
        }
        target.nlink = target.nlink.saturating_sub(1);
        if target.nlink == 0 && !keep {
            return self.release(ino, target);
        }
        target.ctime_ns = self.now_ns();
        self.write_inode(ino, &target)?;
        if target.nlink == 0 {
            self.push_orphan(ino)?;
        }
        Ok(())
    }

    pub fn rmdir(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        if let Some(e) = bad_name(name) {
            return Err(e);
        }
        if name == b"." {
            return Err(FsError::InvalidArgument("cannot remove `.`".into()));
        }
        if name == b".." {
            return Err(FsError::NotEmpty("..".into()));
        }
        let d = self.dir(dir)?;
        let mut f = self
            .dir_find(dir, &d, name)?
            .ok_or_else(|| FsError::NotFound(show(name)))?;
        let ino = f.ino();
        let target = self.linked(ino)?;
        if !target.is_dir() {
            return Err(FsError::NotADirectory(show(name)));
        }
        if !self.dir_is_empty(ino, &target)? {
            return Err(FsError::NotEmpty(show(name)));
        }
        self.dir_drop_entry(dir, &mut f)?;
        self.release(ino, target)?;
        self.touch_dir(dir, -1)
    }

    /// The parent of a directory (its `..`).
    fn parent_of(&mut self, dir: u64) -> Result<u64> {
        let d = self.dir(dir)?;
        match self.dir_find(dir, &d, b"..")? {
            Some(f) => Ok(f.ino()),
            None => Err(corrupt(format!("directory {dir} has no `..`"))),
        }
    }

    /// True if directory `dir` is `ancestor` or lies below it.
    pub fn within(&mut self, dir: u64, ancestor: u64) -> Result<bool> {
        let mut cur = dir;
        let mut steps = 0u64;
        loop {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            cur = self.parent_of(cur)?;
            steps += 1;
            if steps > self.geo.inode_count() {
                return Err(corrupt("directory tree has a cycle"));
            }
        }
    }

    pub fn rename(&mut self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8]) -> Result<()> {
        self.rename_with(sdir, sname, ddir, dname, RenameFlags::default())
    }

    pub fn rename_with(&mut self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], flags: RenameFlags) -> Result<()> {
        check_new_name(sname)?;
        check_new_name(dname)?;
        let sd = self.dir(sdir)?;
        let dd = self.dir(ddir)?;
        let src = self
            .dir_find(sdir, &sd, sname)?
            .ok_or_else(|| FsError::NotFound(show(sname)))?;
        let s_ino = src.ino();
        let s = self.linked(s_ino)?;
        let s_is_dir = s.is_dir();
        let dst = self.dir_find(ddir, &dd, dname)?;
        if flags.no_replace && dst.is_some() {
            return Err(FsError::Exists(show(dname)));
        }
        if let Some(d) = &dst
            && d.ino() == s_ino
        {
            return Ok(());
        }
        // Refuse to move a directory into its own subtree.
        if s_is_dir && self.within(ddir, s_ino)? {
            return Err(FsError::InvalidArgument(format!(
                "cannot move directory `{}` into its own subtree",
                show(sname)
            )));
        }
        let ftype = s.file_type().expect("live inode has a type").dirent_code();
        match dst {
            Some(d) => {
                let d_ino = d.ino();
                let target = self.linked(d_ino)?;
                match (s_is_dir, target.is_dir()) {
                    (true, false) => return Err(FsError::NotADirectory(show(dname))),
                    (false, true) => return Err(FsError::IsADirectory(show(dname))),
                    (true, true) if !self.dir_is_empty(d_ino, &target)? => return Err(FsError::NotEmpty(show(dname))),
                    _ => {}
                }
                self.dir_retarget_entry(ddir, &d, s_ino, ftype)?;
                if target.is_dir() {
                    self.release(d_ino, target)?;
                    self.touch_dir(ddir, -1)?;
                } else {
                    self.drop_link(d_ino, target, flags.keep_replaced)?;
                }
            }
            None => self.dir_add_entry(ddir, dname, s_ino, ftype)?,
        }
        // The source entry may have moved if the destination is the same directory: find it again.
        let sd = self.dir(sdir)?;
        let mut src = self
            .dir_find(sdir, &sd, sname)?
            .ok_or_else(|| corrupt("rename source vanished"))?;
        self.dir_drop_entry(sdir, &mut src)?;
        if s_is_dir && sdir != ddir {
            let s_inode = self.dir(s_ino)?;
            let dotdot = self
                .dir_find(s_ino, &s_inode, b"..")?
                .ok_or_else(|| corrupt(format!("directory {s_ino} has no `..`")))?;
            self.dir_retarget_entry(s_ino, &dotdot, ddir, FT_DIR)?;
            self.touch_dir(sdir, -1)?;
            self.touch_dir(ddir, 1)?;
        } else {
            self.touch_dir(sdir, 0)?;
            if sdir != ddir {
                self.touch_dir(ddir, 0)?;
            }
        }
        let now = self.now_ns();
        self.modify(s_ino, |i| i.ctime_ns = now)?;
        Ok(())
    }

    /// Resolves an absolute path.
    pub fn resolve(&mut self, path: &[u8]) -> Result<u64> {
        if path.first() != Some(&b'/') {
            return Err(FsError::InvalidArgument(format!(
                "path `{}` is not absolute",
                show(path)
            )));
        }
        let mut cur = ROOT_INO;
        for comp in path.split(|&c| c == b'/').filter(|c| !c.is_empty()) {
            cur = self.lookup(cur, comp)?;
        }
        Ok(cur)
    }

    /// Resolves the directory of an absolute path and returns it with the last component
    /// (NotADirectory if it is something else).
    pub fn resolve_parent<'p>(&mut self, path: &'p [u8]) -> Result<(u64, &'p [u8])> {
        if path.first() != Some(&b'/') {
            return Err(FsError::InvalidArgument(format!(
                "path `{}` is not absolute",
                show(path)
            )));
        }
        let trimmed = {
            let mut end = path.len();
            while end > 1 && path[end - 1] == b'/' {
                end -= 1;
            }
            &path[..end]
        };
        let cut = trimmed.iter().rposition(|&c| c == b'/').expect("starts with /");
        let (dir, name) = (&trimmed[..cut.max(1)], &trimmed[cut + 1..]);
        if name.is_empty() {
            return Err(FsError::InvalidArgument("the root has no parent".into()));
        }
        // The directory must be one (ENOTDIR) before any later path of the same call is
        // looked at, as a POSIX path walk stops there.
        let ino = self.resolve(dir)?;
        self.dir(ino)?;
        Ok((ino, name))
    }
}

/// In builds that check invariants: the records a change of a directory block kept (see
/// [`dir_add`]) are the block's parse.
fn check_records(block: &Block, records: &[DirRecord]) {
    if crate::CHECKS_INVARIANTS {
        assert_eq!(
            dir_records(block).as_deref(),
            Ok(records),
            "the records kept after a directory change are not the block's"
        );
    }
}
