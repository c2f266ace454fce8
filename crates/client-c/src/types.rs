//! The C structures of `vino.h` and their conversions from the protocol's types.

use crate::{Res, inval};
use ::vino_client::{DirEntry, Event, EventKind, FileKind, GraftInfo, LockInfo, LockKind, SetAttrs, SetTime, Stat};
use std::ffi::{CString, c_char, c_int};

/// `VINO_NAME_MAX`: the longest file name.
pub const NAME_MAX: usize = 255;

/// `VINO_KIND_*` to the protocol's kind.
pub fn kind_of(code: c_int) -> Res<FileKind> {
    Ok(match code {
        1 => FileKind::Regular,
        2 => FileKind::Directory,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::CharDevice,
        7 => FileKind::BlockDevice,
        _ => return Err(inval(&format!("unknown file kind {code}"))),
    })
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
    /// Added in protocol 2, at the end: the fields before keep their offsets.
    pub rdev: u64,
    pub generation: u32,
    pub _pad2: u32,
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
            generation: s.generation,
            _pad2: 0,
        }
    }
}

/// `vino_setattr.valid` bits, as in `vino.h`.
pub const VINO_SET_MODE: u32 = 0x01;
pub const VINO_SET_UID: u32 = 0x02;
pub const VINO_SET_GID: u32 = 0x04;
pub const VINO_SET_SIZE: u32 = 0x08;
pub const VINO_SET_ATIME: u32 = 0x10;
pub const VINO_SET_MTIME: u32 = 0x20;
pub const VINO_SET_ATIME_NOW: u32 = 0x40;
pub const VINO_SET_MTIME_NOW: u32 = 0x80;
const VINO_SET_ALL: u32 = 0xff;

/// `struct vino_setattr`: what to change (`valid`) and to what.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vino_setattr {
    pub valid: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
}

impl vino_setattr {
    /// The protocol's attributes; `EINVAL` for unknown bits, a mode past `07777`, or a time
    /// given both as a value and as now.
    pub fn attrs(&self) -> Res<SetAttrs> {
        let v = self.valid;
        if v & !VINO_SET_ALL != 0 {
            return Err(inval(&format!("unknown setattr bits {:#x}", v & !VINO_SET_ALL)));
        }
        let has = |bit: u32| v & bit != 0;
        let time = |at: u32, now: u32, ns: u64| -> Res<SetTime> {
            match (has(at), has(now)) {
                (true, true) => Err(inval("a time both given and now")),
                (true, false) => Ok(SetTime::At(ns)),
                (false, true) => Ok(SetTime::Now),
                (false, false) => Ok(SetTime::Omit),
            }
        };
        let mode = if has(VINO_SET_MODE) {
            if self.mode > 0o7777 {
                return Err(inval(&format!("mode {:#o} has bits past 07777", self.mode)));
            }
            Some(self.mode as u16)
        } else {
            None
        };
        Ok(SetAttrs {
            mode,
            uid: has(VINO_SET_UID).then_some(self.uid),
            gid: has(VINO_SET_GID).then_some(self.gid),
            size: has(VINO_SET_SIZE).then_some(self.size),
            atime: time(VINO_SET_ATIME, VINO_SET_ATIME_NOW, self.atime_ns)?,
            mtime: time(VINO_SET_MTIME, VINO_SET_MTIME_NOW, self.mtime_ns)?,
        })
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
        // Passed on so the daemon refuses it as it refuses any client (EINVAL).
        6 => EventKind::Overflow,
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
        EventKind::Overflow => 6,
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
        assert_eq!(std::mem::size_of::<vino_stat>(), 88);
        assert_eq!(std::mem::offset_of!(vino_stat, ctime_ns), 64);
        assert_eq!(std::mem::offset_of!(vino_stat, rdev), 72);
        assert_eq!(std::mem::offset_of!(vino_stat, generation), 80);
        assert_eq!(std::mem::size_of::<vino_setattr>(), 40);
        assert_eq!(std::mem::offset_of!(vino_setattr, size), 16);
        assert_eq!(std::mem::size_of::<vino_dirent>(), 24);
        assert_eq!(std::mem::size_of::<vino_graft_info>(), 104);
        assert_eq!(std::mem::offset_of!(vino_graft_info, size), 72);
        assert_eq!(std::mem::size_of::<vino_lock>(), 32);
        assert_eq!(std::mem::offset_of!(vino_event, name), 32);
        assert_eq!(std::mem::size_of::<vino_event>(), 288);
    }

    #[test]
    fn every_event_kind_round_trips_through_its_c_code() {
        // VINO_EVENT_OPEN .. VINO_EVENT_OVERFLOW in vino.h.
        for code in 1..=6 {
            assert_eq!(event_code(event_kind(code).unwrap()), code as u32);
        }
        assert_eq!(event_code(EventKind::Overflow), 6);
        assert!(event_kind(7).is_err());
    }

    #[test]
    fn setattr_bits_map_to_attributes() {
        let a = vino_setattr {
            valid: VINO_SET_MODE | VINO_SET_GID | VINO_SET_ATIME_NOW | VINO_SET_MTIME,
            mode: 0o4755,
            gid: 7,
            mtime_ns: 9,
            ..Default::default()
        };
        let got = a.attrs().unwrap();
        assert_eq!(
            (got.mode, got.uid, got.gid, got.size),
            (Some(0o4755), None, Some(7), None)
        );
        assert_eq!((got.atime, got.mtime), (SetTime::Now, SetTime::At(9)));
        let both = vino_setattr {
            valid: VINO_SET_ATIME | VINO_SET_ATIME_NOW,
            ..Default::default()
        };
        assert!(both.attrs().is_err());
        assert!(
            vino_setattr {
                valid: 0x100,
                ..Default::default()
            }
            .attrs()
            .is_err()
        );
        assert!(
            vino_setattr {
                valid: VINO_SET_MODE,
                mode: 0o10000,
                ..Default::default()
            }
            .attrs()
            .is_err()
        );
        for code in 1..=7 {
            assert_eq!(kind_code(kind_of(code).unwrap()) as c_int, code);
        }
        assert!(kind_of(0).is_err() && kind_of(8).is_err());
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
