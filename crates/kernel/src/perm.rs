//! Credentials and Unix permission checks.

use vino_fs::Stat;

/// Who a process is. `privileged` (root, or a member of the configured group) may graft global
/// graftpoints and passes every permission check on files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
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

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

/// True if `cred` may access a file with `stat` for `want` (a mask of READ, WRITE, EXEC).
pub fn may(cred: &Credentials, stat: &Stat, want: u32) -> bool {
    if cred.privileged {
        return true;
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
