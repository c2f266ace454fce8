//! The kernel's invariants: how its table of inode references, the processes' descriptor
//! tables, the file system's orphan list, the accounts and the process tree must agree.
//!
//! * inode references: no inode's count is below the descriptors on it, and with no system call
//!   running the counts add up to the descriptors plus the mount's nodes;
//! * parked files: an inode is parked exactly when it is referenced, in use, not a directory and
//!   has no link left;
//! * the orphan list: it holds every inode in use with no link, and (no call running) only
//!   parked ones;
//! * descriptor tables: a table's per-inode counts (which the events ask) match its
//!   descriptors, and a descriptor's file is linked or parked (a directory removed while open is
//!   freed: its descriptor refers to nothing);
//! * accounts: a process is charged one descriptor per descriptor (at least that while calls
//!   run), a user what its processes are, the total what its users are, for every resource;
//!   the file system's blocks and inodes per user are what its inode table holds;
//! * the process tree: a live process's children are live and name it their parent, and a live
//!   process with a parent is among its children.
//!
//! [`Kernel::check_invariants`] checks them all, for a kernel with no system call running (the
//! simulator runs it after every step). [`Kernel::check_touched`] checks the part that holds
//! while other calls run, for what one call changed: debug builds run it after each call that
//! changes references (open, close, unlink, rename, the mount's holds).

use crate::files::{FdTable, RefsView};
use crate::process::Process;
use crate::{Fd, Kernel, Pid, Resource};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use vino_fs::FileType;

/// Which relation an [`InvariantError`] found broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    InodeReferences,
    ParkedFiles,
    OrphanList,
    DescriptorTables,
    Accounts,
    ProcessTree,
    ProgramMemory,
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Relation::InodeReferences => "inode references",
            Relation::ParkedFiles => "parked files",
            Relation::OrphanList => "the orphan list",
            Relation::DescriptorTables => "descriptor tables",
            Relation::Accounts => "accounts",
            Relation::ProcessTree => "the process tree",
            Relation::ProgramMemory => "program memory",
        })
    }
}

/// A broken invariant: the relation, and the objects that break it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvariantError {
    pub relation: Relation,
    pub detail: String,
}

impl fmt::Display for InvariantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.relation, self.detail)
    }
}

impl std::error::Error for InvariantError {}

type Checked = Result<(), InvariantError>;

fn broken(relation: Relation, detail: impl Into<String>) -> InvariantError {
    InvariantError {
        relation,
        detail: detail.into(),
    }
}

/// One process's descriptors at one instant.
struct Table {
    pid: Pid,
    /// Descriptor, inode, generation, kind.
    files: Vec<(Fd, u64, u32, FileType)>,
    per_inode: HashMap<u64, u32>,
}

impl Table {
    fn of(pid: Pid, t: &FdTable) -> Table {
        Table {
            pid,
            files: t.entries().map(|(fd, f)| (fd, f.ino, f.generation, f.kind)).collect(),
            per_inode: t.per_inode().clone(),
        }
    }

    /// The table's own per-inode counts against its descriptors.
    fn check_counts(&self) -> Checked {
        let mut counted: HashMap<u64, u32> = HashMap::new();
        for &(_, ino, _, _) in &self.files {
            *counted.entry(ino).or_default() += 1;
        }
        if counted == self.per_inode {
            return Ok(());
        }
        let inos: BTreeSet<u64> = counted.keys().chain(self.per_inode.keys()).copied().collect();
        let bad: Vec<String> = inos
            .into_iter()
            .filter(|i| counted.get(i) != self.per_inode.get(i))
            .map(|i| {
                let (held, kept) = (counted.get(&i).unwrap_or(&0), self.per_inode.get(&i).unwrap_or(&0));
                format!("ino {i}: {held} descriptors, counted {kept}")
            })
            .collect();
        Err(broken(
            Relation::DescriptorTables,
            format!("descriptor table of pid {} miscounts {}", self.pid, bad.join(", ")),
        ))
    }
}

impl Kernel {
    /// Checks every invariant (see the module documentation) of a kernel in which no system
    /// call runs; the first broken relation is returned, naming what breaks it. Reads every
    /// descriptor table, every referenced inode and the inode bitmaps: for the simulator and
    /// tests, not a kernel serving calls.
    pub fn check_invariants(&self) -> Checked {
        let _ns = self.ns.read();
        let procs = self.processes();
        let tables: Vec<Table> = procs
            .iter()
            .map(|p| Table::of(p.pid(), &p.open_files().lock()))
            .collect();
        let refs = self.files.view();
        for t in &tables {
            t.check_counts()?;
            self.check_descriptors(t, &refs)?;
        }
        check_references(&tables, &refs)?;
        self.check_parked(&refs)?;
        self.check_orphans(&refs)?;
        self.check_accounts(&procs, &tables)?;
        self.check_pager().map_err(|e| broken(Relation::ProgramMemory, e))?;
        check_tree(&procs)
    }

    /// Each descriptor's file is linked or parked.
    fn check_descriptors(&self, t: &Table, refs: &RefsView) -> Checked {
        for &(fd, ino, generation, kind) in &t.files {
            self.linked_or_parked(t.pid, fd, ino, generation, kind, refs.parked.contains(&ino))?;
        }
        Ok(())
    }

    fn linked_or_parked(&self, pid: Pid, fd: Fd, ino: u64, generation: u32, kind: FileType, parked: bool) -> Checked {
        let Some(st) = self.stat_if_known(ino) else {
            return Ok(());
        };
        let ok = match st {
            Some(st) if st.generation == generation => st.nlink > 0 || parked,
            // A directory removed while open is freed at once.
            _ => kind == FileType::Directory,
        };
        if ok {
            return Ok(());
        }
        Err(broken(
            Relation::DescriptorTables,
            format!("descriptor table of pid {pid} holds ino {ino} (fd {fd}) which is neither linked nor parked"),
        ))
    }

    /// Parked inodes against the references and the file system: parked exactly when
    /// referenced, in use, not a directory, with no link.
    fn check_parked(&self, refs: &RefsView) -> Checked {
        let mut inos: BTreeSet<u64> = refs.count.keys().copied().collect();
        inos.extend(&refs.parked);
        for ino in inos {
            let n = refs.count.get(&ino).copied().unwrap_or(0);
            self.check_parked_one(ino, n, refs.parked.contains(&ino))?;
        }
        Ok(())
    }

    /// The inode's attributes, `Some(None)` if it is free, `None` if the file system cannot
    /// say (a failing device: nothing is judged on it).
    fn stat_if_known(&self, ino: u64) -> Option<Option<vino_fs::Stat>> {
        match self.fs.stat(ino) {
            Ok(st) => Some(Some(st)),
            Err(e) if e.errno() == crate::Errno::NoEnt as i32 => Some(None),
            Err(_) => None,
        }
    }

    fn check_parked_one(&self, ino: u64, refs: usize, parked: bool) -> Checked {
        let Some(st) = self.stat_if_known(ino) else {
            return Ok(());
        };
        let nameless = st
            .as_ref()
            .is_some_and(|st| st.nlink == 0 && st.kind != FileType::Directory);
        match (parked, refs > 0, nameless) {
            (true, false, _) => Err(broken(
                Relation::ParkedFiles,
                format!("ino {ino} is parked but nothing references it"),
            )),
            (true, true, false) => Err(broken(
                Relation::ParkedFiles,
                match st {
                    Some(st) => format!("ino {ino} is parked but has {} links ({:?})", st.nlink, st.kind),
                    None => format!("ino {ino} is parked but free"),
                },
            )),
            (false, true, true) => Err(broken(
                Relation::ParkedFiles,
                format!("ino {ino} has {refs} references and no link but is not parked"),
            )),
            _ => Ok(()),
        }
    }

    /// The on-disk orphan list against the parked files and the inodes with no link.
    fn check_orphans(&self, refs: &RefsView) -> Checked {
        let fs_err = |e: vino_fs::FsError| broken(Relation::OrphanList, format!("the file system: {e}"));
        let mut orphans: BTreeSet<u64> = self.fs.orphans().map_err(fs_err)?.into_iter().collect();
        // The swap area is an orphan the pager holds, not a parked file.
        if let Some(swap) = self.memory.swap_inode() {
            orphans.remove(&swap);
        }
        if let Some(ino) = orphans.iter().find(|i| !refs.parked.contains(i)) {
            return Err(broken(
                Relation::OrphanList,
                format!("the orphan list holds ino {ino}, which is not parked"),
            ));
        }
        if let Some(ino) = refs.parked.iter().find(|i| !orphans.contains(i)) {
            return Err(broken(
                Relation::OrphanList,
                format!("ino {ino} is parked but not on the orphan list"),
            ));
        }
        let unlinked = self.fs.unlinked_inodes().map_err(fs_err)?;
        let swap = self.memory.swap_inode();
        match unlinked.into_iter().find(|i| !orphans.contains(i) && Some(*i) != swap) {
            Some(ino) => Err(broken(
                Relation::OrphanList,
                format!("ino {ino} is in use with no link but not on the orphan list"),
            )),
            None => Ok(()),
        }
    }

    /// Descriptor charges against the tables, each account against those below it, and the
    /// file system's blocks and inodes per user against its inode table.
    fn check_accounts(&self, procs: &[Arc<Process>], tables: &[Table]) -> Checked {
        self.fs
            .verify_quota()
            .map_err(|e| broken(Relation::Accounts, format!("the file system's usage: {e}")))?;
        let mut by_user: BTreeMap<u32, u64> = BTreeMap::new();
        for (p, t) in procs.iter().zip(tables) {
            let charged = p.account().used(Resource::Descriptors);
            if charged != t.files.len() as u64 {
                return Err(broken(
                    Relation::Accounts,
                    format!(
                        "pid {} is charged {charged} descriptors and holds {}",
                        t.pid,
                        t.files.len()
                    ),
                ));
            }
            *by_user.entry(p.credentials().uid).or_default() += charged;
        }
        let users = self.accounts.users();
        for (uid, usage) in &users {
            let charged = used(&usage.used, Resource::Descriptors);
            let held = by_user.get(uid).copied().unwrap_or(0);
            if charged != held {
                return Err(broken(
                    Relation::Accounts,
                    format!("uid {uid} is charged {charged} descriptors, its processes {held}"),
                ));
            }
        }
        let total = self.accounts.total();
        for r in Resource::ALL {
            let sum: u64 = users.iter().map(|(_, u)| used(&u.used, r)).sum();
            if total.used(r) != sum {
                return Err(broken(
                    Relation::Accounts,
                    format!(
                        "the total is charged {} {}, its users {sum}",
                        total.used(r),
                        r.describe()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The part of the invariants that holds while other system calls run, for `process`'s
    /// descriptor table (if given) and the inodes `inos` a call changed: the table's counts and
    /// charge, its references, and whether each of `inos` is parked as it should be. The
    /// caller holds the namespace lock. Costs a pass over the process's descriptors (bounded by
    /// its descriptor limit) and one inode read per inode of `inos`; nothing else is read.
    pub fn check_touched(&self, process: Option<&Process>, inos: &[u64]) -> Checked {
        debug_assert!(self.ns.is_locked(), "the namespace lock is held");
        if let Some(p) = process {
            self.check_table_touched(p, inos)?;
        }
        for &ino in inos {
            let (n, parked) = self.files.refs_of(ino);
            let verdict = self.check_parked_one(ino, n, parked);
            // A parked file's last reference may go, and the file with it, while this runs (the
            // free takes no namespace lock): it is judged only if it is parked still.
            if verdict.is_err() && parked && !self.files.refs_of(ino).1 {
                continue;
            }
            verdict?;
        }
        Ok(())
    }

    /// Under the table's lock, so that none of its descriptors closes meanwhile: each still
    /// holds its reference, its charge, and its file.
    fn check_table_touched(&self, p: &Process, inos: &[u64]) -> Checked {
        let files = p.open_files().lock();
        let t = Table::of(p.pid(), &files);
        t.check_counts()?;
        for (&ino, &fds) in &t.per_inode {
            let (n, _) = self.files.refs_of(ino);
            if n < fds as usize {
                return Err(too_few(ino, n, fds as usize));
            }
        }
        let charged = p.account().used(Resource::Descriptors);
        if charged < t.files.len() as u64 {
            return Err(broken(
                Relation::Accounts,
                format!(
                    "pid {} is charged {charged} descriptors and holds {}",
                    t.pid,
                    t.files.len()
                ),
            ));
        }
        for &(fd, ino, generation, kind) in t.files.iter().filter(|f| inos.contains(&f.1)) {
            let (_, parked) = self.files.refs_of(ino);
            self.linked_or_parked(t.pid, fd, ino, generation, kind, parked)?;
        }
        Ok(())
    }

    /// Breaks an invariant on purpose, for tests of the checks.
    #[cfg(any(test, feature = "internals"))]
    pub fn corrupt_for_test(&self, c: Corruption) {
        match c {
            Corruption::LeakRef(ino) => self.files.corrupt(ino, 1, None),
            Corruption::DropRef(ino) => self.files.corrupt(ino, -1, None),
            Corruption::Park(ino) => self.files.corrupt(ino, 0, Some(true)),
            Corruption::Unpark(ino) => self.files.corrupt(ino, 0, Some(false)),
            Corruption::CountFd(pid, ino) => {
                let p = self.process(pid).expect("a live process");
                p.open_files().lock().corrupt_count(ino);
            }
            Corruption::DropLink(ino) => self.fs.set_nlink_for_test(ino, 0).unwrap(),
            Corruption::Orphan { dir, name } => self.fs.unlink_keep(dir, name).unwrap(),
            Corruption::Charge(pid) => {
                let p = self.process(pid).expect("a live process");
                std::mem::forget(p.account().charge(Resource::Descriptors, 1).unwrap());
            }
            Corruption::ChargeTotal(r) => std::mem::forget(self.accounts.total().charge(r, 1).unwrap()),
            Corruption::QuotaInode(uid) => self.fs.skew_quota_for_test(uid).unwrap(),
            Corruption::Disown(pid) => {
                let p = self.process(pid).expect("a live process");
                p.family.lock().parent = 0;
            }
        }
    }
}

/// Parents and children agree: a live process's children are live and name it their parent, and
/// a live process with a parent is among that parent's children (the parent live: an ended
/// parent hands its children on).
fn check_tree(procs: &[Arc<Process>]) -> Checked {
    let by_pid: HashMap<Pid, &Arc<Process>> = procs.iter().map(|p| (p.pid(), p)).collect();
    for p in procs {
        for c in p.children() {
            if by_pid.get(&c).is_none_or(|c| c.ppid() != p.pid()) {
                return Err(broken(
                    Relation::ProcessTree,
                    format!("pid {} lists child {c}, which is gone or has another parent", p.pid()),
                ));
            }
        }
        let ppid = p.ppid();
        if ppid != 0 && by_pid.get(&ppid).is_none_or(|q| !q.children().contains(&p.pid())) {
            return Err(broken(
                Relation::ProcessTree,
                format!("pid {} names parent {ppid}, which does not list it", p.pid()),
            ));
        }
    }
    Ok(())
}

/// Every inode's count is at least its descriptors; all counts add up to the descriptors and
/// the mount's nodes (no call running holds one of its own).
fn check_references(tables: &[Table], refs: &RefsView) -> Checked {
    let mut fds: HashMap<u64, usize> = HashMap::new();
    for t in tables {
        for (&ino, &n) in &t.per_inode {
            *fds.entry(ino).or_default() += n as usize;
        }
    }
    let mut inos: Vec<(&u64, &usize)> = fds.iter().collect();
    inos.sort_unstable();
    for (&ino, &held) in inos {
        let n = refs.count.get(&ino).copied().unwrap_or(0);
        if n < held {
            return Err(too_few(ino, n, held));
        }
    }
    if let Some((&ino, _)) = refs.count.iter().find(|&(_, &n)| n == 0) {
        return Err(broken(
            Relation::InodeReferences,
            format!("ino {ino} is left in the table with no reference"),
        ));
    }
    let counted: usize = refs.count.values().sum();
    let held = fds.values().sum::<usize>() + refs.mount_holds + refs.map_holds;
    if counted == held {
        return Ok(());
    }
    let mut surplus: Vec<u64> = refs
        .count
        .iter()
        .filter(|&(ino, &n)| n > fds.get(ino).copied().unwrap_or(0))
        .map(|(&ino, _)| ino)
        .collect();
    surplus.sort_unstable();
    Err(broken(
        Relation::InodeReferences,
        format!(
            "{counted} references, but descriptors and the mount's {} nodes hold {held} (inodes referenced beyond their descriptors: {surplus:?})",
            refs.mount_holds
        ),
    ))
}

fn too_few(ino: u64, refs: usize, fds: usize) -> InvariantError {
    broken(
        Relation::InodeReferences,
        format!("ino {ino} has {refs} references but {fds} descriptors"),
    )
}

fn used(all: &[(Resource, u64)], r: Resource) -> u64 {
    all.iter().find(|(x, _)| *x == r).map_or(0, |&(_, n)| n)
}

/// A way to break an invariant, for [`Kernel::corrupt_for_test`].
#[cfg(any(test, feature = "internals"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// One reference to the inode more than anything holds.
    LeakRef(u64),
    /// One reference to the inode fewer than its holders hold.
    DropRef(u64),
    /// The inode marked parked.
    Park(u64),
    /// The inode's parked mark taken away.
    Unpark(u64),
    /// The process's table counts one descriptor of the inode more than it holds.
    CountFd(Pid, u64),
    /// The inode's links set to 0 by the file system alone: no name goes, no orphan list.
    DropLink(u64),
    /// A name's file put on the orphan list by the file system alone: nothing parks it.
    Orphan { dir: u64, name: Vec<u8> },
    /// The process forgets its parent, which still lists it.
    Disown(Pid),
    /// The process charged a descriptor it does not hold.
    Charge(Pid),
    /// The total charged one of a resource that no user holds.
    ChargeTotal(Resource),
    /// The file system's usage of the user counts an inode it does not hold.
    QuotaInode(u32),
}

impl Process {
    /// Debug builds: checks what a system call of this process changed (the inodes `inos`),
    /// taking the namespace lock for reading; a broken invariant panics, naming it. Release
    /// builds do nothing. See [`Kernel::check_touched`] for the cost.
    #[inline]
    pub(crate) fn debug_check(&self, inos: &[u64]) {
        if cfg!(debug_assertions) {
            let _ns = self.kernel().ns.read();
            self.debug_check_locked(inos);
        }
    }

    /// [`Process::debug_check`] for a caller that holds the namespace lock.
    #[inline]
    pub(crate) fn debug_check_locked(&self, inos: &[u64]) {
        self.kernel().debug_check_locked(Some(self), inos);
    }
}

impl Kernel {
    /// [`Process::debug_check_locked`], for a call of `process` or of the mount (`None`).
    #[inline]
    pub(crate) fn debug_check_locked(&self, process: Option<&Process>, inos: &[u64]) {
        if cfg!(debug_assertions) {
            self.check_touched_or_panic(process, inos);
        }
    }

    /// [`Kernel::check_touched`], panicking with the broken relation.
    fn check_touched_or_panic(&self, process: Option<&Process>, inos: &[u64]) {
        if let Err(e) = self.check_touched(process, inos) {
            let who = process.map_or("the mount".to_string(), |p| format!("pid {}", p.pid()));
            panic!("after a system call of {who}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Credentials, Errno, KernelConfig, OpenFlags};
    use vino_blockdev::{BlockDevice, MemDevice};
    use vino_fs::{MkfsOptions, ROOT_INO, mkfs};

    fn kernel() -> Arc<Kernel> {
        let dev = Arc::new(MemDevice::new(2048));
        mkfs(&*dev, &MkfsOptions::default()).unwrap();
        let config = KernelConfig {
            writeback_every: None,
            ..Default::default()
        };
        Kernel::boot(dev as Arc<dyn BlockDevice>, &config).unwrap()
    }

    /// A kernel with `/open` open in a user's process (returned) and `/named` closed.
    fn with_files() -> (Arc<Kernel>, Arc<Process>, u64, u64) {
        let k = kernel();
        let root = k.spawn(Credentials::root());
        root.chmod("/", 0o777).unwrap();
        let p = k.spawn(Credentials::user(1000, 1000));
        p.open("/open", OpenFlags::create()).unwrap();
        let fd = p.open("/named", OpenFlags::create()).unwrap();
        p.close(fd).unwrap();
        let (open, named) = (p.stat("/open").unwrap().ino, p.stat("/named").unwrap().ino);
        (k, p, open, named)
    }

    /// The full check and the touched one for `p` and `ino` both name `relation`.
    fn caught(k: &Kernel, relation: Relation) -> String {
        let e = k.check_invariants().expect_err("the corruption is caught");
        assert_eq!(e.relation, relation, "{e}");
        e.to_string()
    }

    fn caught_touched(k: &Kernel, p: &Process, ino: u64, relation: Relation) {
        let _ns = k.ns.read();
        let e = k
            .check_touched(Some(p), &[ino])
            .expect_err("the touched check catches it");
        assert_eq!(e.relation, relation, "{e}");
    }

    #[test]
    fn a_sound_kernel_passes_through_opens_unlinks_holds_and_exits() {
        let (k, p, open, named) = with_files();
        k.check_invariants().unwrap();
        // Unlinked while open and while the mount holds it: parked, on the orphan list.
        let st = k.hold_inode(named, p.stat("/named").unwrap().generation).unwrap();
        p.unlink("/open").unwrap();
        p.unlink("/named").unwrap();
        assert_eq!(k.parked_files(), vec![open.min(named), open.max(named)]);
        k.check_invariants().unwrap();
        {
            let _ns = k.ns.read();
            k.check_touched(Some(&p), &[open, named]).unwrap();
        }
        k.release_inode(st.ino).unwrap();
        k.exit(p.pid());
        k.check_invariants().unwrap();
        assert!(k.parked_files().is_empty() && k.fs.orphans().unwrap().is_empty());
    }

    #[test]
    fn an_open_that_ends_after_its_process_exited_leaves_no_descriptor_or_reference() {
        let (k, p, _, named) = with_files();
        k.exit(p.pid());
        // What a thread of a killed process still inside `open` meets at its end.
        let e = p.open("/named", OpenFlags::read_only()).unwrap_err();
        assert_eq!(e.errno, Errno::Srch);
        assert_eq!(k.files.refs_of(named).0, 0);
        assert!(p.fds().is_empty());
        k.check_invariants().unwrap();
    }

    #[test]
    fn a_leaked_reference_is_named() {
        let (k, _p, _, named) = with_files();
        k.corrupt_for_test(Corruption::LeakRef(named));
        let e = caught(&k, Relation::InodeReferences);
        assert!(e.contains(&format!("[{named}]")), "{e}");
    }

    #[test]
    fn a_reference_fewer_than_the_descriptors_is_named_by_both_checks() {
        let (k, p, open, _) = with_files();
        k.corrupt_for_test(Corruption::DropRef(open));
        let e = caught(&k, Relation::InodeReferences);
        assert!(
            e.contains(&format!("ino {open} has 0 references but 1 descriptors")),
            "{e}"
        );
        caught_touched(&k, &p, open, Relation::InodeReferences);
    }

    #[test]
    fn a_parked_file_with_a_name_is_named_by_both_checks() {
        let (k, p, open, _) = with_files();
        k.corrupt_for_test(Corruption::Park(open));
        let e = caught(&k, Relation::ParkedFiles);
        assert!(e.contains(&format!("ino {open} is parked but has 1 links")), "{e}");
        caught_touched(&k, &p, open, Relation::ParkedFiles);
    }

    #[test]
    fn a_referenced_nameless_file_not_parked_is_named() {
        let (k, p, _, named) = with_files();
        let st = k.hold_inode(named, p.stat("/named").unwrap().generation).unwrap();
        p.unlink("/named").unwrap();
        k.corrupt_for_test(Corruption::Unpark(st.ino));
        let e = caught(&k, Relation::ParkedFiles);
        assert!(e.contains("no link but is not parked"), "{e}");
        caught_touched(&k, &p, named, Relation::ParkedFiles);
    }

    #[test]
    fn an_orphan_nothing_parked_is_named() {
        let (k, _p, _, named) = with_files();
        k.corrupt_for_test(Corruption::Orphan {
            dir: ROOT_INO,
            name: b"named".to_vec(),
        });
        let e = caught(&k, Relation::OrphanList);
        assert!(e.contains(&format!("holds ino {named}, which is not parked")), "{e}");
    }

    #[test]
    fn a_nameless_inode_off_the_orphan_list_is_named() {
        let (k, _p, _, named) = with_files();
        k.corrupt_for_test(Corruption::DropLink(named));
        let e = caught(&k, Relation::OrphanList);
        assert!(
            e.contains(&format!(
                "ino {named} is in use with no link but not on the orphan list"
            )),
            "{e}"
        );
    }

    #[test]
    fn a_descriptor_of_a_file_neither_linked_nor_parked_is_named_by_both_checks() {
        let (k, p, open, _) = with_files();
        k.corrupt_for_test(Corruption::DropLink(open));
        let e = caught(&k, Relation::DescriptorTables);
        let want = format!(
            "descriptor table of pid {} holds ino {open} (fd 0) which is neither linked nor parked",
            p.pid()
        );
        assert!(e.contains(&want), "{e}");
        caught_touched(&k, &p, open, Relation::DescriptorTables);
    }

    #[test]
    fn a_miscounted_descriptor_table_is_named_by_both_checks() {
        let (k, p, open, _) = with_files();
        k.corrupt_for_test(Corruption::CountFd(p.pid(), open));
        let e = caught(&k, Relation::DescriptorTables);
        assert!(e.contains(&format!("ino {open}: 1 descriptors, counted 2")), "{e}");
        caught_touched(&k, &p, open, Relation::DescriptorTables);
    }

    #[test]
    fn a_descriptor_charge_without_a_descriptor_is_named() {
        let (k, p, _, _) = with_files();
        k.corrupt_for_test(Corruption::Charge(p.pid()));
        let e = caught(&k, Relation::Accounts);
        assert!(
            e.contains(&format!("pid {} is charged 2 descriptors and holds 1", p.pid())),
            "{e}"
        );
    }

    #[test]
    fn a_child_its_parent_lists_but_that_names_no_parent_is_named() {
        let (k, p, _, _) = with_files();
        let c = k.spawn_child(&p).unwrap();
        k.check_invariants().unwrap();
        k.corrupt_for_test(Corruption::Disown(c.pid()));
        let e = caught(&k, Relation::ProcessTree);
        assert!(e.contains(&format!("lists child {}", c.pid())), "{e}");
    }

    #[test]
    fn a_total_charge_no_user_holds_is_named() {
        let (k, _p, _, _) = with_files();
        k.corrupt_for_test(Corruption::ChargeTotal(Resource::Grafts));
        let e = caught(&k, Relation::Accounts);
        assert!(e.contains("the total is charged 1"), "{e}");
    }

    #[test]
    fn a_user_charged_an_inode_it_does_not_hold_is_named() {
        let (k, _p, _, _) = with_files();
        k.corrupt_for_test(Corruption::QuotaInode(1000));
        let e = caught(&k, Relation::Accounts);
        assert!(e.contains("the file system's usage") && e.contains("uid 1000"), "{e}");
    }

    /// The check debug builds run after each call panics naming the relation; release builds
    /// skip it.
    #[test]
    fn the_debug_hook_panics_naming_the_relation() {
        let (k, p, open, _) = with_files();
        p.debug_check(&[open]);
        k.corrupt_for_test(Corruption::Park(open));
        let check = || {
            let _ns = k.ns.read();
            k.check_touched_or_panic(Some(&p), &[open]);
        };
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
        let msg = *panicked
            .expect_err("a broken relation panics")
            .downcast::<String>()
            .unwrap();
        let want = format!("after a system call of pid {}: parked files: ino {open}", p.pid());
        assert!(msg.starts_with(&want), "{msg}");
        let hook = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.debug_check(&[open])));
        assert_eq!(hook.is_err(), cfg!(debug_assertions), "debug builds only");
    }
}
