//! The C structures of `vino.h` and their conversions from the protocol's types.

use crate::{Res, inval};
use ::vino_client::{DirEntry, Event, EventKind, FileKind, GraftInfo, LockInfo, LockKind, Stat};
use std::ffi::{CString, c_char, c_int};

/// `VINO_NAME_MAX`: the longest file name.
pub const NAME_MAX: usize = 255;

/// The kind of a `VINO_KIND_*` code.
pub fn kind_of_code(code: u32) -> Option<FileKind> {
    [
        FileKind::Regular,
        FileKind::Directory,
        FileKind::Symlink,
        FileKind::Fifo,
        FileKind::Socket,
        FileKind::CharDevice,
        FileKind::BlockDevice,
    ]
    .into_iter()
    .find(|&k| kind_code(k) == code)
}

fn kind_code(k: FileKind) -> u32 {
    match k {
        FileKind::Regular => 1,
        FileKind::Directory => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::Socket => 5,
        FileKind::CharDevice => 6,
        FileKind::BlockDevice => 7,
    }
}

/// `struct vino_stat`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vino_stat {
    pub ino: u64,
    pub kind: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub _pad: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub rdev: u64,
}

impl From<&Stat> for vino_stat {
    fn from(s: &Stat) -> Self {
        vino_stat {
            ino: s.ino,
            kind: kind_code(s.kind),
            mode: s.mode,
            nlink: s.nlink,
            uid: s.uid,
            gid: s.gid,
            _pad: 0,
            size: s.size,
            blocks: s.blocks,
            atime_ns: s.atime_ns,
            mtime_ns: s.mtime_ns,
            ctime_ns: s.ctime_ns,
            rdev: s.rdev,
        }
    }
}

/// `struct vino_dirent`.
#[repr(C)]
#[derive(Debug)]
pub struct vino_dirent {
    pub name: *mut c_char,
    pub ino: u64,
    pub kind: u32,
    pub _pad: u32,
}

/// A C array of entries (freed by [`dirents_free`]); null if there are none.
pub fn dirents_into_raw(list: &[DirEntry]) -> *mut vino_dirent {
    if list.is_empty() {
        return std::ptr::null_mut();
    }
    let v: Box<[vino_dirent]> = list
        .iter()
        .map(|e| vino_dirent {
            // File systems refuse NULs in names; cut at one should it ever come.
            name: CString::new(e.name.split(|&b| b == 0).next().unwrap_or_default())
                .expect("cut at the first NUL")
                .into_raw(),
            ino: e.ino,
            kind: kind_code(e.kind),
            _pad: 0,
        })
        .collect();
    Box::into_raw(v).cast()
}

/// Frees an array from [`dirents_into_raw`] of `count` entries.
///
/// # Safety
///
/// `entries` is NULL or a pointer returned by [`dirents_into_raw`] for a list of `count`
/// entries, whose entries are unchanged, not freed before and not used after.
pub unsafe fn dirents_free(entries: *mut vino_dirent, count: usize) {
    if entries.is_null() {
        return;
    }
    // SAFETY: a non-null `entries` is the `Box<[vino_dirent]>` of `count` entries leaked by
    // `dirents_into_raw`, by this function's contract, so the slice pointer rebuilds that box
    // with its layout; it is freed here, once.
    let v = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(entries, count)) };
    for e in v.iter() {
        if !e.name.is_null() {
            // SAFETY: each name came from `CString::into_raw` in `dirents_into_raw` and is
            // unchanged (this function's contract); it is freed here, once.
            drop(unsafe { CString::from_raw(e.name) });
        }
    }
}

/// `struct vino_graft_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vino_graft_info {
    pub hash: [c_char; 65],
    pub cached: u8,
    pub _pad: [u8; 6],
    pub size: u64,
    pub owner: u64,
    pub compile_ns: u64,
    pub load_ns: u64,
}

/// Copies `text` into `out`, cut to fit, NUL-terminated.
fn copy_c(out: &mut [c_char], text: &str) {
    let n = text.len().min(out.len() - 1);
    for (o, &b) in out.iter_mut().zip(&text.as_bytes()[..n]) {
        *o = b as c_char;
    }
    out[n..].fill(0);
}

impl From<&GraftInfo> for vino_graft_info {
    fn from(g: &GraftInfo) -> Self {
        let mut hash = [0; 65];
        copy_c(&mut hash, &g.hash);
        vino_graft_info {
            hash,
            cached: g.cached as u8,
            _pad: [0; 6],
            size: g.size,
            owner: g.owner,
            compile_ns: g.compile_ns,
            load_ns: g.load_ns,
        }
    }
}

/// `struct vino_lock`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vino_lock {
    pub kind: u32,
    pub _pad: u32,
    pub start: u64,
    pub len: u64,
    pub pid: u64,
}

impl From<&LockInfo> for vino_lock {
    fn from(l: &LockInfo) -> Self {
        let kind = match l.kind {
            LockKind::Unlock => 0,
            LockKind::Read => 1,
            LockKind::Write => 2,
        };
        vino_lock {
            kind,
            _pad: 0,
            start: l.start,
            len: l.len,
            pid: l.pid,
        }
    }
}

/// `VINO_EVENT_*` to the protocol's kind.
pub fn event_kind(kind: c_int) -> Res<EventKind> {
    Ok(match kind {
        1 => EventKind::Open,
        2 => EventKind::Close,
        3 => EventKind::Create,
        4 => EventKind::Unlink,
        5 => EventKind::Modify,
        _ => return Err(inval(&format!("unknown event kind {kind}"))),
    })
}

fn event_code(kind: EventKind) -> u32 {
    match kind {
        EventKind::Open => 1,
        EventKind::Close => 2,
        EventKind::Create => 3,
        EventKind::Unlink => 4,
        EventKind::Modify => 5,
    }
}

/// `struct vino_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vino_event {
    pub kind: u32,
    pub _pad: u32,
    pub ino: u64,
    pub dir: u64,
    pub pid: u64,
    pub name: [c_char; NAME_MAX + 1],
}

impl From<&Event> for vino_event {
    fn from(e: &Event) -> Self {
        let mut name = [0; NAME_MAX + 1];
        copy_c(&mut name, &e.name);
        vino_event {
            kind: event_code(e.kind),
            _pad: 0,
            ino: e.ino,
            dir: e.dir,
            pid: e.pid,
            name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_header() {
        // Offsets as a C compiler lays out the structs of vino.h on LP64.
        assert_eq!(std::mem::size_of::<vino_stat>(), 80);
        assert_eq!(std::mem::offset_of!(vino_stat, rdev), 72);
        assert_eq!(std::mem::size_of::<vino_dirent>(), 24);
        assert_eq!(std::mem::size_of::<vino_graft_info>(), 104);
        assert_eq!(std::mem::offset_of!(vino_graft_info, size), 72);
        assert_eq!(std::mem::size_of::<vino_lock>(), 32);
        assert_eq!(std::mem::offset_of!(vino_event, name), 32);
        assert_eq!(std::mem::size_of::<vino_event>(), 288);
    }

    #[test]
    fn names_are_cut_and_terminated() {
        let mut out = [1 as c_char; 4];
        copy_c(&mut out, "abcdef");
        assert_eq!(out, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
        let list = vec![DirEntry {
            name: b"x\0y".to_vec(),
            ino: 7,
            kind: FileKind::Directory,
        }];
        let raw = dirents_into_raw(&list);
        // SAFETY: a list of one entry gives a non-null array of one initialised entry.
        let e = unsafe { &*raw };
        // SAFETY: the entry's name is a NUL-terminated string made by `CString::into_raw`.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(e.name) }.to_bytes(), b"x");
        assert_eq!((e.ino, e.kind), (7, 2));
        // SAFETY: the array of the list of one entry above, unchanged and freed once; `e` is not
        // used after.
        unsafe { dirents_free(raw, 1) };
        assert!(dirents_into_raw(&[]).is_null());
    }
}
