//! Credentials and the Unix permission rules: mode bits with supplementary groups, the sticky
//! bit, who may change modes and owners, and when set-ID bits are dropped. Every rule is a small
//! pure function, so the kernel's system calls and the tests below share one statement of it.

use vino_fs::{FileType, Stat};

/// Who a process is. `privileged` (root, or a member of the configured group) may graft global
/// graftpoints and passes every permission check on files, as root does on Linux.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    pub privileged: bool,
}

impl Credentials {
    pub fn root() -> Self {
        Credentials {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            privileged: true,
        }
    }

    pub fn user(uid: u32, gid: u32) -> Self {
        Credentials {
            uid,
            gid,
            groups: Vec::new(),
            privileged: false,
        }
    }

    /// The same user with these supplementary groups.
    pub fn with_groups(mut self, groups: Vec<u32>) -> Self {
        self.groups = groups;
        self
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// True if this process owns `st` or is privileged (chmod, utimes with explicit times).
    pub fn owns(&self, st: &Stat) -> bool {
        self.privileged || self.uid == st.uid
    }
}

pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

pub const S_ISUID: u16 = 0o4000;
pub const S_ISGID: u16 = 0o2000;
pub const S_ISVTX: u16 = 0o1000;
const S_IXGRP: u16 = 0o010;
const S_IXANY: u32 = 0o111;

/// True if `cred` may access a file with `stat` for `want` (a mask of READ, WRITE, EXEC; 0 asks
/// only whether the file exists). A privileged process may read and write anything, and search
/// any directory, but execute only a file with some execute bit set (as root on Linux).
pub fn may(cred: &Credentials, stat: &Stat, want: u32) -> bool {
    if cred.privileged {
        return want & EXEC == 0 || stat.kind == FileType::Directory || stat.mode & S_IXANY != 0;
    }
    let bits = if cred.uid == stat.uid {
        (stat.mode >> 6) & 7
    } else if cred.in_group(stat.gid) {
        (stat.mode >> 3) & 7
    } else {
        stat.mode & 7
    };
    bits & want == want
}

/// The sticky bit: in a directory with `S_ISVTX`, a name may be removed or replaced only by the
/// owner of the file, the owner of the directory, or a privileged process.
pub fn may_remove_from(cred: &Credentials, dir: &Stat, victim: &Stat) -> bool {
    dir.mode as u16 & S_ISVTX == 0 || cred.privileged || cred.uid == dir.uid || cred.uid == victim.uid
}

/// Linux's `fs.protected_*` rules against the classic attacks on shared directories (`/tmp`),
/// as `fs/namei.c` states them. Each may be turned off (0); the defaults are Debian's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protected {
    /// Only the owner, or a process that may read and write a plain regular file, may give a
    /// file another name (else a user pins another's file and its blocks): `EPERM`.
    pub hardlinks: bool,
    /// A symbolic link in a sticky world-writable directory is followed only by its owner or
    /// when the directory's owner owns it (else a planted link redirects another's open):
    /// `EACCES`.
    pub symlinks: bool,
    /// `O_CREAT` opening an existing FIFO in a sticky directory that neither the opener nor the
    /// directory's owner owns: refused (`EACCES`) if the directory is world-writable (1), or
    /// group-writable too (2).
    pub fifos: u8,
    /// The same for regular files.
    pub regular: u8,
}

impl Default for Protected {
    fn default() -> Self {
        Protected {
            hardlinks: true,
            symlinks: true,
            // As Debian sets them (systemd's sysctl defaults).
            fifos: 1,
            regular: 1,
        }
    }
}

impl Protected {
    /// Every rule off, as Linux's own default.
    pub fn off() -> Protected {
        Protected {
            hardlinks: false,
            symlinks: false,
            fifos: 0,
            regular: 0,
        }
    }

    /// May `cred` give `src` another name? (`may_linkat`: the owner, a privileged process as
    /// with CAP_FOWNER, or one that may read and write a regular file that is not set-ID.)
    pub fn may_link(&self, cred: &Credentials, src: &Stat) -> bool {
        if !self.hardlinks || cred.owns(src) {
            return true;
        }
        let mode = src.mode as u16;
        let set_id = mode & S_ISUID != 0 || (mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP);
        src.kind == FileType::Regular && !set_id && may(cred, src, READ | WRITE)
    }

    /// May `cred` follow the symbolic link `link` found in `dir`? (`may_follow_link`; root is
    /// not exempt: it is the victim the rule is for.)
    pub fn may_follow(&self, cred: &Credentials, dir: &Stat, link: &Stat) -> bool {
        const STICKY_OPEN: u32 = S_ISVTX as u32 | 0o002;
        !self.symlinks || cred.uid == link.uid || dir.mode & STICKY_OPEN != STICKY_OPEN || dir.uid == link.uid
    }

    /// May `cred` open the existing `file` in `dir` with `O_CREAT`? (`may_create_in_sticky`,
    /// for regular files and FIFOs.)
    pub fn may_create_over(&self, cred: &Credentials, dir: &Stat, file: &Stat) -> bool {
        let level = match file.kind {
            FileType::Regular => self.regular,
            FileType::Fifo => self.fifos,
            _ => 0,
        };
        if level == 0 || dir.mode as u16 & S_ISVTX == 0 || file.uid == dir.uid || file.uid == cred.uid {
            return true;
        }
        dir.mode & 0o002 == 0 && (level < 2 || dir.mode & 0o020 == 0)
    }
}

/// The mode a chmod by `cred` sets on `st` when asked for `mode`: an unprivileged caller outside
/// the file's group cannot set `S_ISGID` (it is silently dropped, as Linux does).
pub fn chmod_mode(cred: &Credentials, st: &Stat, mode: u16) -> u16 {
    let mode = mode & 0o7777;
    if cred.privileged || cred.in_group(st.gid) {
        mode
    } else {
        mode & !S_ISGID
    }
}

/// True if `cred` may set the owner to `uid` and the group to `gid` (`None`: unchanged): a
/// privileged process may do anything; the owner may only set the group to one of its own.
pub fn may_chown(cred: &Credentials, st: &Stat, uid: Option<u32>, gid: Option<u32>) -> bool {
    if cred.privileged {
        return true;
    }
    let uid_ok = uid.is_none_or(|u| u == st.uid);
    let gid_ok = gid.is_none_or(|g| g == st.gid || cred.in_group(g));
    uid_ok && gid_ok && (cred.uid == st.uid || (uid.is_none() && gid.is_none()))
}

/// The mode bits left after a chown of a non-directory: `S_ISUID` goes, and `S_ISGID` when the
/// group may execute (without group execute it marks mandatory locking and stays). `None`:
/// nothing to drop.
pub fn after_chown(st: &Stat) -> Option<u16> {
    if st.kind == FileType::Directory {
        return None;
    }
    drop_set_id(st.mode as u16)
}

/// The mode bits left after a write (or truncate) by an unprivileged process: as after a chown.
/// `None`: nothing to drop.
pub fn after_write(cred: &Credentials, st: &Stat) -> Option<u16> {
    if cred.privileged || st.kind != FileType::Regular {
        return None;
    }
    drop_set_id(st.mode as u16)
}

fn drop_set_id(mode: u16) -> Option<u16> {
    let mut kill = S_ISUID;
    if mode & S_IXGRP != 0 {
        kill |= S_ISGID;
    }
    let perm = mode & 0o7777;
    (perm & kill != 0).then_some(perm & !kill)
}

/// The group and permission bits of a file `cred` creates in `dir` asking for `mode`: in a
/// set-group-ID directory the file takes the directory's group (and a new directory keeps the
/// bit); elsewhere the creator's group. An unprivileged creator outside the resulting group
/// cannot make the file set-group-ID.
pub fn new_file_owner(cred: &Credentials, dir: &Stat, mode: u16, kind: FileType) -> (u32, u16) {
    let mut mode = mode & 0o7777;
    let inherit = dir.mode as u16 & S_ISGID != 0;
    let gid = if inherit { dir.gid } else { cred.gid };
    if inherit && kind == FileType::Directory {
        mode |= S_ISGID;
    } else if !cred.privileged && !cred.in_group(gid) {
        mode &= !S_ISGID;
    }
    (gid, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(kind: FileType, mode: u32, uid: u32, gid: u32) -> Stat {
        Stat {
            ino: 5,
            kind,
            mode,
            nlink: 1,
            uid,
            gid,
            size: 0,
            blocks: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            generation: 1,
            creator: 0,
            rdev: 0,
            stream: None,
        }
    }

    #[test]
    fn supplementary_groups_count_as_the_group() {
        let f = stat(FileType::Regular, 0o640, 1, 65532);
        let user = Credentials::user(1000, 1000);
        assert!(!may(&user, &f, READ));
        assert!(may(&user.clone().with_groups(vec![65532]), &f, READ));
        assert!(!may(&user.with_groups(vec![65532]), &f, WRITE));
    }

    #[test]
    fn root_executes_only_what_someone_may_execute() {
        let root = Credentials::root();
        assert!(!may(&root, &stat(FileType::Regular, 0o644, 1, 1), EXEC));
        assert!(may(&root, &stat(FileType::Regular, 0o100, 1, 1), EXEC));
        assert!(may(&root, &stat(FileType::Directory, 0o000, 1, 1), EXEC | READ | WRITE));
    }

    #[test]
    fn sticky_directories_protect_other_users_names() {
        let dir = stat(FileType::Directory, 0o1777, 0, 0);
        let theirs = stat(FileType::Regular, 0o666, 2000, 2000);
        let user = Credentials::user(1000, 1000);
        assert!(!may_remove_from(&user, &dir, &theirs));
        assert!(may_remove_from(&user, &dir, &stat(FileType::Regular, 0o600, 1000, 1)));
        assert!(may_remove_from(&user, &stat(FileType::Directory, 0o777, 0, 0), &theirs));
        assert!(may_remove_from(
            &user,
            &stat(FileType::Directory, 0o1777, 1000, 0),
            &theirs
        ));
    }

    #[test]
    fn protected_rules_follow_linux() {
        let p = Protected::default();
        let user = Credentials::user(1000, 1000);
        let tmp = stat(FileType::Directory, 0o1777, 0, 0);
        // Hard links: another's 0600 file no, a 0666 one yes, a set-ID one no; root yes.
        assert!(!p.may_link(&user, &stat(FileType::Regular, 0o600, 2000, 2000)));
        assert!(p.may_link(&user, &stat(FileType::Regular, 0o666, 2000, 2000)));
        assert!(!p.may_link(&user, &stat(FileType::Regular, 0o4666, 2000, 2000)));
        assert!(!p.may_link(&user, &stat(FileType::Fifo, 0o666, 2000, 2000)));
        assert!(p.may_link(&Credentials::root(), &stat(FileType::Regular, 0o600, 2000, 2000)));
        assert!(Protected::off().may_link(&user, &stat(FileType::Regular, 0o600, 2000, 2000)));
        // Symlinks: another's in /tmp no (root neither), one's own or the directory owner's yes.
        let theirs = stat(FileType::Symlink, 0o777, 2000, 2000);
        assert!(!p.may_follow(&user, &tmp, &theirs));
        assert!(!p.may_follow(&Credentials::root(), &tmp, &theirs));
        assert!(p.may_follow(&user, &tmp, &stat(FileType::Symlink, 0o777, 1000, 1)));
        assert!(p.may_follow(&user, &tmp, &stat(FileType::Symlink, 0o777, 0, 0)));
        assert!(p.may_follow(&user, &stat(FileType::Directory, 0o777, 0, 0), &theirs));
        // O_CREAT over another's file or FIFO in /tmp; level 2 covers group-writable ones too.
        let file = stat(FileType::Regular, 0o666, 2000, 2000);
        let fifo = stat(FileType::Fifo, 0o666, 2000, 2000);
        assert!(!p.may_create_over(&user, &tmp, &file));
        assert!(!p.may_create_over(&user, &tmp, &fifo));
        let group = stat(FileType::Directory, 0o1770, 0, 0);
        assert!(p.may_create_over(&user, &group, &file));
        assert!(p.may_create_over(&user, &group, &fifo));
        let level2 = Protected { regular: 2, ..p };
        assert!(!level2.may_create_over(&user, &group, &file));
        assert!(Protected::off().may_create_over(&user, &tmp, &file));
    }

    #[test]
    fn set_id_bits_drop_as_linux_drops_them() {
        let user = Credentials::user(1000, 1000);
        let f = stat(FileType::Regular, 0o6755, 1000, 1000);
        assert_eq!(after_write(&user, &f), Some(0o0755));
        assert_eq!(after_write(&Credentials::root(), &f), None);
        // Set-group-ID without group execute stays (mandatory locking).
        assert_eq!(after_write(&user, &stat(FileType::Regular, 0o2644, 1, 1)), None);
        assert_eq!(after_chown(&f), Some(0o0755));
        assert_eq!(after_chown(&stat(FileType::Directory, 0o6755, 1, 1)), None);
        // A non-member's chmod cannot set S_ISGID.
        assert_eq!(
            chmod_mode(&user, &stat(FileType::Regular, 0o644, 1000, 5), 0o2755),
            0o755
        );
        assert_eq!(chmod_mode(&user, &f, 0o2755), 0o2755);
    }

    #[test]
    fn owners_give_files_only_to_their_own_groups() {
        let user = Credentials::user(1000, 1000).with_groups(vec![7]);
        let f = stat(FileType::Regular, 0o644, 1000, 1000);
        assert!(may_chown(&user, &f, None, Some(7)));
        assert!(may_chown(&user, &f, Some(1000), Some(1000)));
        assert!(!may_chown(&user, &f, None, Some(8)));
        assert!(!may_chown(&user, &f, Some(0), None));
        assert!(!may_chown(&user, &stat(FileType::Regular, 0o644, 2, 7), None, Some(7)));
    }

    #[test]
    fn set_group_id_directories_pass_their_group_on() {
        let user = Credentials::user(1000, 1000);
        let dir = stat(FileType::Directory, 0o2777, 0, 50);
        assert_eq!(new_file_owner(&user, &dir, 0o755, FileType::Directory), (50, 0o2755));
        assert_eq!(new_file_owner(&user, &dir, 0o2755, FileType::Regular), (50, 0o755));
        let plain = stat(FileType::Directory, 0o777, 0, 50);
        assert_eq!(new_file_owner(&user, &plain, 0o2755, FileType::Regular), (1000, 0o2755));
    }
}
