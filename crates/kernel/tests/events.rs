//! File-system events: who hears what, exactly once; filters; event grafts and their deferred
//! writes; user-level queues; clean-up at exit; concurrent raisers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::{
    Credentials, EventFilter, EventKind, FsEvent, Kernel, KernelConfig, OpenFlags, Process, UnlinkRecord,
};
use vino_sdk::BuildOptions;

fn device(blocks: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(blocks));
    mkfs(
        &*dev,
        &MkfsOptions {
            blocks_per_group: 2048,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    dev
}

fn boot(dev: &Arc<MemDevice>) -> Arc<Kernel> {
    let config = KernelConfig {
        cache_frames: 128,
        writeback_every: None,
        ..KernelConfig::default()
    };
    Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap()
}

fn example(name: &str) -> Vec<u8> {
    vino_sdk::build_example(name, &BuildOptions::default()).unwrap()
}

fn graft(src: &str) -> Vec<u8> {
    vino_sdk::build_c_str("event_graft.c", src, &BuildOptions::default()).unwrap()
}

fn quiesce(k: &Kernel) {
    assert!(k.events_quiesce_for(Duration::from_secs(30)), "event deliveries finish");
}

/// Opens `/log-<pid>` for the graft at `event.fs.unlink` and tells the graft its descriptor.
fn log_for(p: &Process) -> u32 {
    let fd = p.open(&format!("/log-{}", p.pid()), OpenFlags::create()).unwrap();
    p.graft_call("event.fs.unlink", "log_set_fd", &[i64::from(fd)]).unwrap();
    fd
}

fn read_all(p: &Process, fd: u32) -> Vec<u8> {
    let size = p.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(p.pread(fd, &mut buf, 0).unwrap(), size);
    buf
}

fn records(p: &Process, fd: u32) -> Vec<UnlinkRecord> {
    UnlinkRecord::parse_all(&read_all(p, fd))
}

fn touch(p: &Process, path: &str, mode: u16) -> u64 {
    let fd = p
        .open(
            path,
            OpenFlags {
                mode,
                ..OpenFlags::create()
            },
        )
        .unwrap();
    let ino = p.inode(fd).unwrap();
    p.close(fd).unwrap();
    ino
}

fn names(events: &[FsEvent]) -> Vec<String> {
    events.iter().map(|e| e.name.clone().unwrap_or_default()).collect()
}

#[test]
fn each_unlink_is_delivered_once_to_a_graft_and_to_a_user_level_queue() {
    let dev = device(8192);
    let k = boot(&dev);
    let owner = k.spawn(Credentials::root());
    owner.graft_load("event.fs.unlink", &example("unlink_log")).unwrap();
    let log = log_for(&owner);
    let watcher = k.spawn(Credentials::root());
    watcher.event_subscribe(EventKind::Unlink).unwrap();
    let actor = k.spawn(Credentials::root());
    actor.mkdir("/d", 0o755).unwrap();
    let dir = actor.stat("/d").unwrap().ino;
    let mut inodes = Vec::new();
    for i in 0..20 {
        inodes.push(touch(&actor, &format!("/d/f{i}"), 0o644));
    }
    for i in 0..20 {
        actor.unlink(&format!("/d/f{i}")).unwrap();
    }
    quiesce(&k);
    let recs = records(&owner, log);
    assert_eq!(recs.len(), 20, "one record per unlink");
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(
            (r.inode, r.parent, r.pid, r.name.as_str()),
            (inodes[i], dir, actor.pid(), format!("f{i}").as_str())
        );
    }
    let heard = watcher.event_wait(Duration::from_secs(5));
    assert_eq!(names(&heard), (0..20).map(|i| format!("f{i}")).collect::<Vec<_>>());
    assert!(
        heard
            .iter()
            .all(|e| e.kind == EventKind::Unlink && e.pid == actor.pid())
    );
    let seqs: BTreeSet<u64> = heard.iter().map(|e| e.seq).collect();
    assert_eq!(seqs.len(), 20);
    assert!(
        watcher.event_wait(Duration::from_millis(20)).is_empty(),
        "nothing twice"
    );
    let s = k.event_stats().of(EventKind::Unlink);
    assert_eq!(
        (s.raised, s.delivered_graft, s.delivered_user, s.graft_aborts),
        (20, 20, 20, 0)
    );
    // The graft's own appends are modify events nobody listens to.
    assert_eq!(k.event_stats().of(EventKind::Modify).delivered_user, 0);
}

#[test]
fn every_kind_is_raised_by_its_system_calls() {
    let dev = device(8192);
    let k = boot(&dev);
    let w = k.spawn(Credentials::root());
    for kind in EventKind::ALL {
        w.event_subscribe(kind).unwrap();
    }
    let p = k.spawn(Credentials::root());
    let fd = p.open("/a", OpenFlags::create()).unwrap();
    let ino = p.inode(fd).unwrap();
    p.write(fd, b"hello").unwrap();
    p.pwrite(fd, b"!", 5).unwrap();
    p.ftruncate(fd, 2).unwrap();
    p.close(fd).unwrap();
    touch(&p, "/b", 0o644);
    p.rename("/b", "/a").unwrap(); // replaces /a: an unlink of it
    p.unlink("/a").unwrap();
    let kinds: Vec<(EventKind, u64)> = w
        .event_wait(Duration::from_secs(1))
        .iter()
        .filter(|e| e.inode == ino)
        .map(|e| (e.kind, e.parent))
        .collect();
    use EventKind::*;
    let root = p.stat("/").unwrap().ino;
    assert_eq!(
        kinds,
        [
            (Create, root),
            (Open, root),
            (Modify, 0),
            (Modify, 0),
            (Modify, 0),
            (Close, 0),
            (Unlink, root)
        ]
    );
    let all = w.event_wait(Duration::from_millis(10));
    assert!(all.is_empty());
}

#[test]
fn a_process_hears_only_of_files_it_may_read() {
    let dev = device(8192);
    let k = boot(&dev);
    let root = k.spawn(Credentials::root());
    root.mkdir("/tmp", 0o777).unwrap();
    let spy = k.spawn(Credentials::user(1000, 100));
    spy.event_subscribe(EventKind::Unlink).unwrap();
    spy.event_subscribe(EventKind::Create).unwrap();
    let other = k.spawn(Credentials::user(2000, 200));
    touch(&other, "/tmp/secret", 0o600);
    touch(&other, "/tmp/public", 0o644);
    other.unlink("/tmp/secret").unwrap();
    other.unlink("/tmp/public").unwrap();
    let heard = spy.event_wait(Duration::from_secs(1));
    assert_eq!(names(&heard), ["public", "public"], "{heard:?}");
    let s = k.event_stats();
    assert_eq!(s.of(EventKind::Unlink).denied, 1);
    assert_eq!(s.of(EventKind::Create).denied, 1);
    // The owner itself hears of its own 0600 file.
    other.event_subscribe(EventKind::Unlink).unwrap();
    touch(&other, "/tmp/secret2", 0o600);
    other.unlink("/tmp/secret2").unwrap();
    assert_eq!(names(&other.event_wait(Duration::from_secs(1))), ["secret2"]);
    assert!(spy.event_wait(Duration::from_millis(10)).is_empty());
}

#[test]
fn filters_select_by_inode_and_by_name() {
    let dev = device(8192);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    let a = touch(&p, "/a", 0o644);
    touch(&p, "/b", 0o644);
    touch(&p, "/c", 0o644);
    let w = k.spawn(Credentials::root());
    w.event_subscribe(EventKind::Unlink).unwrap();
    w.event_subscribe(EventKind::Create).unwrap();
    w.event_filter(
        EventKind::Unlink,
        EventFilter {
            inodes: vec![a, 999_999],
            names: vec!["c".into()],
        },
    )
    .unwrap();
    w.event_filter(
        EventKind::Create,
        EventFilter {
            inodes: vec![],
            names: vec!["wanted".into()],
        },
    )
    .unwrap();
    for n in ["a", "b", "c"] {
        p.unlink(&format!("/{n}")).unwrap();
    }
    touch(&p, "/unwanted", 0o644);
    touch(&p, "/wanted", 0o644);
    let heard = w.event_wait(Duration::from_secs(1));
    let got: Vec<(EventKind, String)> = heard.iter().map(|e| (e.kind, e.name.clone().unwrap())).collect();
    assert_eq!(
        got,
        [
            (EventKind::Unlink, "a".into()),
            (EventKind::Unlink, "c".into()),
            (EventKind::Create, "wanted".into())
        ]
    );
    assert_eq!(k.event_stats().of(EventKind::Unlink).filtered_out, 1);
    // An empty filter takes everything again.
    w.event_filter(EventKind::Unlink, EventFilter::default()).unwrap();
    p.unlink("/wanted").unwrap();
    assert_eq!(names(&w.event_wait(Duration::from_secs(1))), ["wanted"]);
}

const WRITE_THEN: &str = r#"
    #include "vino_graft.h"
    static int32_t log_fd = -1;
    VINO_CONTROL(log_set_fd) int32_t log_set_fd(int32_t fd) { log_fd = fd; return 0; }
    VINO_GRAFT(event_fs_unlink)
    int32_t event_fs_unlink(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t t, int32_t n) {
        char c = vino_event_name()[0];
        int32_t r = vino_file_write(log_fd, -1, &c, 1);
        if (c == 't')
            VINO_TRAP();                       /* wrote, then fails: nothing may reach the file */
        if (c == 'n')
            return -1;                         /* an invalid result aborts as well */
        if (c == 'b') {                        /* bad arguments come back as -errno */
            int32_t e[5] = {vino_file_write(77, -1, &c, 1), vino_file_write(log_fd, -1, (void *)0x7ffffff0, 64),
                            vino_file_write(log_fd, -5, &c, 1), vino_file_fsync(-3),
                            vino_file_write(log_fd, 0x7ffffffffffffff0LL, &c, 1)};
            return vino_file_write(log_fd, -1, e, sizeof e) < 0 ? -1 : 0;
        }
        return r == 1 ? 0 : -1;
    }
"#;

#[test]
fn a_deferred_write_happens_on_commit_and_not_on_abort() {
    let dev = device(8192);
    let k = boot(&dev);
    let owner = k.spawn(Credentials::root());
    owner.graft_load("event.fs.unlink", &graft(WRITE_THEN)).unwrap();
    let log = log_for(&owner);
    for name in ["ok", "trap", "no", "yes"] {
        touch(&owner, &format!("/{name}"), 0o644);
        owner.unlink(&format!("/{name}")).unwrap();
    }
    quiesce(&k);
    assert_eq!(read_all(&owner, log), b"oy", "only the committed invocations wrote");
    let s = k.event_stats().of(EventKind::Unlink);
    assert_eq!((s.delivered_graft, s.graft_aborts), (2, 2));
    // Bad descriptor, buffer outside memory, bad offset, bad fsync descriptor, past the
    // largest file (refused at the call, not dropped at commit).
    touch(&owner, "/bad", 0o644);
    owner.unlink("/bad").unwrap();
    quiesce(&k);
    let bytes = read_all(&owner, log);
    assert_eq!(&bytes[..3], b"oyb");
    assert_eq!(bytes.len(), 3 + 20);
    let e: Vec<i32> = bytes[3..]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(e, [-9, -14, -22, -9, -27]);
    // A write to a descriptor open only for reading is refused too.
    let ro = owner
        .open(&format!("/log-{}", owner.pid()), OpenFlags::read_only())
        .unwrap();
    owner
        .graft_call("event.fs.unlink", "log_set_fd", &[i64::from(ro)])
        .unwrap();
    touch(&owner, "/yes", 0o644);
    owner.unlink("/yes").unwrap();
    quiesce(&k);
    assert_eq!(read_all(&owner, log).len(), 3 + 20);
    assert_eq!(k.event_stats().of(EventKind::Unlink).graft_aborts, 3);
}

#[test]
fn a_graft_that_never_returns_is_stopped_and_unloaded() {
    let dev = device(8192);
    let k = boot(&dev);
    let owner = k.spawn(Credentials::root());
    let spin = r#"
        #include "vino_graft.h"
        static volatile uint64_t spins;
        VINO_GRAFT(event_fs_unlink)
        int32_t event_fs_unlink(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t t, int32_t n) {
            for (;;)
                spins += (uint64_t)inode;
        }
    "#;
    owner.graft_load("event.fs.unlink", &graft(spin)).unwrap();
    owner.event_subscribe(EventKind::Unlink).unwrap();
    for i in 0..10 {
        touch(&owner, &format!("/f{i}"), 0o644);
        owner.unlink(&format!("/f{i}")).unwrap();
    }
    quiesce(&k);
    let s = k.event_stats().of(EventKind::Unlink);
    assert_eq!(s.graft_aborts, 8, "aborted until unloaded after 8 failures in a row");
    // The kernel's event threads ran them, but the owner's CPU share pays for the eight spins
    // (each stopped at its budget, counted in fuel).
    let charged = k.cpu().process_cpu(owner.pid()).unwrap();
    assert!(
        charged >= Duration::from_millis(1),
        "charged {charged:?} for 8 spinning grafts"
    );
    assert!(!owner.graft_events().is_empty(), "the owner is told");
    assert_eq!(
        owner.event_wait(Duration::from_secs(1)).len(),
        10,
        "user-level delivery goes on"
    );
    // The kernel is fine: the next unlink is heard at user level only.
    touch(&owner, "/g", 0o644);
    owner.unlink("/g").unwrap();
    quiesce(&k);
    assert_eq!(k.event_stats().of(EventKind::Unlink).graft_aborts, 8);
    assert_eq!(names(&owner.event_wait(Duration::from_secs(1))), ["g"]);
}

#[test]
fn the_synchronous_graft_makes_its_record_durable() {
    let dev = device(8192);
    let k = boot(&dev);
    let owner = k.spawn(Credentials::root());
    owner
        .graft_load("event.fs.unlink", &example("unlink_log_sync"))
        .unwrap();
    let log = log_for(&owner);
    owner.fsync(log).unwrap(); // the log file itself exists on the device
    let ino = touch(&owner, "/doomed", 0o644);
    owner.unlink("/doomed").unwrap();
    quiesce(&k);
    assert_eq!(records(&owner, log).len(), 1);
    // Power fails now: what the device holds must have the record.
    let crashed = Arc::new(dev.crashed(7));
    let k2 = boot(&crashed);
    let p = k2.spawn(Credentials::root());
    let fd = p
        .open(&format!("/log-{}", owner.pid()), OpenFlags::read_only())
        .unwrap();
    let recs = records(&p, fd);
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].inode, recs[0].name.as_str()), (ino, "doomed"));
}

#[test]
fn an_exiting_process_leaves_nothing_behind() {
    let dev = device(8192);
    let k = boot(&dev);
    let owner = k.spawn(Credentials::root());
    owner.graft_load("event.fs.unlink", &example("unlink_log")).unwrap();
    log_for(&owner);
    owner.event_subscribe(EventKind::Unlink).unwrap();
    owner
        .event_filter(
            EventKind::Unlink,
            EventFilter {
                inodes: vec![],
                names: vec!["x".into()],
            },
        )
        .unwrap();
    let actor = k.spawn(Credentials::root());
    touch(&actor, "/x", 0o644);
    k.exit(owner.pid());
    actor.unlink("/x").unwrap();
    quiesce(&k);
    let s = k.event_stats().of(EventKind::Unlink);
    assert_eq!(
        (s.raised, s.filtered_out, s.delivered_graft, s.delivered_user),
        (1, 0, 0, 0)
    );
    assert!(owner.event_wait(Duration::from_millis(10)).is_empty());
    assert!(
        owner.event_subscribe(EventKind::Unlink).is_err(),
        "an exited process has no event state"
    );
    assert!(
        !actor
            .graft_list()
            .iter()
            .any(|s| s.point.starts_with("event.fs") && s.graft.is_some())
    );
}

#[test]
fn event_wait_blocks_until_an_event_comes() {
    let dev = device(8192);
    let k = boot(&dev);
    let w = k.spawn(Credentials::root());
    w.event_subscribe(EventKind::Create).unwrap();
    assert!(
        w.event_wait(Duration::from_millis(20)).is_empty(),
        "timeout with nothing"
    );
    let p = k.spawn(Credentials::root());
    let waiter = std::thread::spawn(move || w.event_wait(Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(50));
    touch(&p, "/late", 0o644);
    assert_eq!(names(&waiter.join().unwrap()), ["late"]);
}

#[test]
fn no_event_is_lost_under_concurrent_raisers() {
    const THREADS: usize = 4;
    const FILES: usize = 60;
    let dev = device(16384);
    let k = boot(&dev);
    let owner = k.spawn(Credentials::root());
    owner.graft_load("event.fs.unlink", &example("unlink_log")).unwrap();
    let log = log_for(&owner);
    let watcher = k.spawn(Credentials::root());
    watcher.event_subscribe(EventKind::Unlink).unwrap();
    let raisers: Vec<_> = (0..THREADS)
        .map(|t| {
            let p = k.spawn(Credentials::root());
            std::thread::spawn(move || {
                p.mkdir(&format!("/t{t}"), 0o755).unwrap();
                for i in 0..FILES {
                    let path = format!("/t{t}/f{i}");
                    touch(&p, &path, 0o644);
                    p.unlink(&path).unwrap();
                }
            })
        })
        .collect();
    let mut heard = Vec::new();
    while heard.len() < THREADS * FILES {
        let got = watcher.event_wait(Duration::from_secs(10));
        assert!(!got.is_empty(), "events stopped coming after {}", heard.len());
        heard.extend(got);
    }
    raisers.into_iter().for_each(|r| r.join().unwrap());
    quiesce(&k);
    let user: BTreeSet<(u64, String)> = heard.iter().map(|e| (e.parent, e.name.clone().unwrap())).collect();
    assert_eq!(user.len(), THREADS * FILES, "each event once at user level");
    let logged: BTreeSet<(u64, String)> = records(&owner, log).into_iter().map(|r| (r.parent, r.name)).collect();
    assert_eq!(
        records(&owner, log).len(),
        THREADS * FILES,
        "each event once in the graft's log"
    );
    assert_eq!(logged, user);
    let s = k.event_stats().of(EventKind::Unlink);
    assert_eq!(
        (s.delivered_graft, s.delivered_user),
        ((THREADS * FILES) as u64, (THREADS * FILES) as u64)
    );
}

#[test]
fn a_process_hears_only_of_names_in_directories_it_may_list() {
    let dev = device(8192);
    let k = boot(&dev);
    let root = k.spawn(Credentials::root());
    // Root's directories: closed (0700), searchable but not listable (0711), open (0755), one
    // open to a group (0750), and an open one under a closed one (the walk up must pass).
    for (dir, mode) in [
        ("/closed", 0o700),
        ("/search", 0o711),
        ("/open", 0o755),
        ("/open/deep", 0o755),
        ("/open/deep/deeper", 0o755),
        ("/staff", 0o750),
        ("/closed/inside", 0o777),
    ] {
        root.mkdir(dir, mode).unwrap();
    }
    root.chown("/staff", None, Some(50)).unwrap();
    let spy = k.spawn(Credentials::user(1000, 100));
    let member = k.spawn(Credentials::user(1001, 100).with_groups(vec![50]));
    let admin = k.spawn(Credentials::root());
    for p in [&spy, &member, &admin] {
        for kind in [EventKind::Create, EventKind::Open, EventKind::Unlink] {
            p.event_subscribe(kind).unwrap();
        }
    }
    let dirs = [
        "/closed",
        "/search",
        "/open",
        "/open/deep/deeper",
        "/staff",
        "/closed/inside",
    ];
    for dir in dirs {
        touch(&root, &format!("{dir}/f"), 0o644);
        root.unlink(&format!("{dir}/f")).unwrap();
    }
    let heard = |p: &Process| -> Vec<(EventKind, String)> {
        let ev = p.event_wait(Duration::from_secs(1));
        let dirs: Vec<(u64, &str)> = dirs.iter().map(|d| (root.stat(d).unwrap().ino, *d)).collect();
        ev.iter()
            .map(|e| {
                let dir = dirs.iter().find(|(ino, _)| *ino == e.parent).unwrap().1;
                (e.kind, format!("{dir}/{}", e.name.as_deref().unwrap()))
            })
            .collect()
    };
    use EventKind::{Create, Open, Unlink};
    let both = |paths: &[&str]| -> Vec<(EventKind, String)> {
        paths
            .iter()
            .flat_map(|p| [Create, Open, Unlink].map(|kind| (kind, format!("{p}/f"))))
            .collect()
    };
    assert_eq!(heard(&spy), both(&["/open", "/open/deep/deeper"]));
    assert_eq!(heard(&member), both(&["/open", "/open/deep/deeper", "/staff"]));
    assert_eq!(heard(&admin), both(&dirs));
    let s = k.event_stats();
    // The spy was refused 4 directories, the member 3, each for a create, an open (by name)
    // and an unlink.
    assert_eq!((s.of(Create).denied, s.of(Open).denied, s.of(Unlink).denied), (7, 7, 7));

    // A directory opened to the spy later is heard from then on; closing an ancestor stops it.
    root.chmod("/search", 0o755).unwrap();
    touch(&root, "/search/g", 0o644);
    root.chmod("/open", 0o700).unwrap();
    touch(&root, "/open/deep/deeper/g", 0o644);
    let ev = spy.event_wait(Duration::from_secs(1));
    assert_eq!(names(&ev), ["g", "g"]);
    assert!(ev.iter().all(|e| e.parent == root.stat("/search").unwrap().ino));
}

#[test]
fn a_bounded_wait_takes_the_oldest_and_leaves_the_rest_queued() {
    let dev = device(8192);
    let k = boot(&dev);
    let w = k.spawn(Credentials::root());
    w.event_subscribe(EventKind::Create).unwrap();
    let p = k.spawn(Credentials::root());
    for i in 0..10 {
        touch(&p, &format!("/f{i}"), 0o644);
    }
    let mut heard = Vec::new();
    for want in [3, 3, 3, 1] {
        let got = w.event_wait_at_most(Duration::from_secs(1), 3);
        assert_eq!(got.len(), want);
        heard.extend(got);
    }
    assert_eq!(names(&heard), (0..10).map(|i| format!("f{i}")).collect::<Vec<_>>());
    assert!(w.event_wait_at_most(Duration::from_millis(10), 3).is_empty());
}

// ---- bounded queues and fair service -------------------------------------------------------------

fn boot_with(dev: &Arc<MemDevice>, config: KernelConfig) -> Arc<Kernel> {
    Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap()
}

fn small_queues(dev: &Arc<MemDevice>, bound: usize) -> Arc<Kernel> {
    boot_with(
        dev,
        KernelConfig {
            cache_frames: 128,
            writeback_every: None,
            event_queue_max: bound,
            ..KernelConfig::default()
        },
    )
}

/// Raises `n` create events on `ino` (a file anyone may read), as `actor`'s system calls would.
fn raise_creates(k: &Kernel, actor: &Process, ino: u64, n: usize) {
    for _ in 0..n {
        k.event_raise(EventKind::Create, actor, ino, 0, None);
    }
}

#[test]
fn a_subscriber_that_never_waits_is_held_to_the_bound_with_one_overflow_marker() {
    const BOUND: usize = 64;
    let dev = device(8192);
    let k = small_queues(&dev, BOUND);
    let actor = k.spawn(Credentials::root());
    let ino = touch(&actor, "/watched", 0o644);
    let w = k.spawn(Credentials::user(1000, 1000));
    // Events raised by inode alone reach only who holds the file.
    w.open("/watched", OpenFlags::read_only()).unwrap();
    w.event_subscribe(EventKind::Create).unwrap();
    let before = k.event_stats().of(EventKind::Create);
    raise_creates(&k, &actor, ino, 200);
    assert_eq!(w.events_queued(), BOUND + 1, "the bound and one marker");
    let s = k.event_stats();
    let c = s.of(EventKind::Create);
    assert_eq!(c.delivered_user - before.delivered_user, BOUND as u64);
    assert_eq!(c.dropped - before.dropped, (200 - BOUND) as u64);
    assert_eq!(s.overflows, 1);

    let got = w.event_wait(Duration::from_secs(1));
    assert_eq!(got.len(), BOUND + 1);
    assert!(
        got[..BOUND]
            .iter()
            .all(|e| e.kind == EventKind::Create && e.inode == ino)
    );
    let marker = &got[BOUND];
    assert_eq!(
        (
            marker.kind,
            marker.inode,
            marker.parent,
            marker.pid,
            marker.name.as_deref()
        ),
        (EventKind::Overflow, 0, 0, 0, None)
    );
    assert_eq!(
        marker.seq,
        got[BOUND - 1].seq + 1,
        "the marker names the first event lost"
    );
    assert_eq!(w.events_queued(), 0);

    // Drained: events arrive again.
    raise_creates(&k, &actor, ino, 1);
    let got = w.event_wait(Duration::from_secs(1));
    assert_eq!((got.len(), got[0].kind), (1, EventKind::Create));

    // Full again: a new marker; a reader that takes one event leaves the queue at the bound, so
    // the overflow goes on with no second marker; below the bound, the next overflow has one.
    raise_creates(&k, &actor, ino, BOUND + 10);
    assert_eq!(k.event_stats().overflows, 2);
    assert_eq!(w.event_wait_at_most(Duration::ZERO, 1).len(), 1);
    raise_creates(&k, &actor, ino, 5);
    assert_eq!((w.events_queued(), k.event_stats().overflows), (BOUND, 2));
    assert_eq!(w.event_wait_at_most(Duration::ZERO, 2).len(), 2);
    raise_creates(&k, &actor, ino, 5);
    assert_eq!((w.events_queued(), k.event_stats().overflows), (BOUND + 1, 3));
    let kinds: Vec<EventKind> = w.event_wait(Duration::ZERO).iter().map(|e| e.kind).collect();
    assert_eq!(kinds.iter().filter(|&&k| k == EventKind::Overflow).count(), 2);
    assert_eq!(kinds.last(), Some(&EventKind::Overflow));
}

#[test]
fn overflow_cannot_be_asked_for() {
    let dev = device(8192);
    let k = boot(&dev);
    let p = k.spawn(Credentials::root());
    assert_eq!(EventKind::Overflow.point(), None);
    assert!(EventKind::ALL.iter().all(|k| k.point().is_some()));
    for r in [
        p.event_subscribe(EventKind::Overflow),
        p.event_unsubscribe(EventKind::Overflow),
        p.event_filter(EventKind::Overflow, EventFilter::default()),
        p.event_unbind(EventKind::Overflow),
    ] {
        assert_eq!(r.unwrap_err().errno, vino_kernel::Errno::Inval);
    }
    k.event_raise(EventKind::Overflow, &p, 1, 0, None);
    assert_eq!(k.event_stats().kinds.len(), EventKind::ALL.len());
}

#[test]
fn fifty_subscribers_that_never_wait_hold_at_most_their_bounds() {
    const BOUND: usize = 1024;
    const LISTENERS: usize = 50;
    const EVENTS: usize = 100_000;
    let dev = device(8192);
    let k = small_queues(&dev, BOUND);
    let actor = k.spawn(Credentials::root());
    let ino = touch(&actor, "/hot", 0o644);
    let subs: Vec<Arc<Process>> = (0..LISTENERS)
        .map(|i| {
            let p = k.spawn(Credentials::user(1000 + i as u32, 1000));
            p.open("/hot", OpenFlags::read_only()).unwrap();
            p.event_subscribe(EventKind::Create).unwrap();
            p
        })
        .collect();
    raise_creates(&k, &actor, ino, EVENTS);
    let queued: usize = subs.iter().map(|p| p.events_queued()).sum();
    assert!(queued <= LISTENERS * (BOUND + 1), "{queued} events held");
    assert!(subs.iter().all(|p| p.events_queued() == BOUND + 1));
    let s = k.event_stats();
    assert_eq!(s.of(EventKind::Create).dropped, (LISTENERS * (EVENTS - BOUND)) as u64);
    assert_eq!(s.overflows, LISTENERS as u64);
}

#[test]
fn a_graft_queue_that_overflows_counts_its_drops_and_quiesces() {
    const BOUND: usize = 16;
    let dev = device(8192);
    let k = small_queues(&dev, BOUND);
    let owner = k.spawn(Credentials::root());
    let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (count, gate) = (heard.clone(), Arc::new(std::sync::Mutex::new(())));
    let held = gate.lock().unwrap();
    let g = gate.clone();
    let policy = move |_: &vino_kernel::EventEnv, _: &FsEvent| -> Result<bool, vino_graft::Invalid> {
        drop(g.lock().unwrap());
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    };
    owner.event_bind_native::<2>(Arc::new(policy), false).unwrap();
    let ino = touch(&owner, "/f", 0o644);
    // The graft is held at its first event: the rest wait in its bounded queue.
    raise_creates(&k, &owner, ino, 100);
    assert!(owner.events_queued() <= BOUND, "{} queued", owner.events_queued());
    drop(held);
    quiesce(&k);
    let s = k.event_stats().of(EventKind::Create);
    let ran = heard.load(std::sync::atomic::Ordering::Relaxed);
    // `touch` raised one create too.
    assert_eq!(ran + s.dropped, 101);
    assert!(ran <= BOUND as u64 + 1 + EVENT_BATCH_SLACK, "{ran} ran");
    assert_eq!(s.delivered_graft, ran);
    assert_eq!(k.event_stats().overflows, 0, "no marker for a graft queue");
}

/// Jobs an event thread may have taken off a queue (one batch) before the queue filled.
const EVENT_BATCH_SLACK: u64 = vino_kernel::EVENT_BATCH as u64;

#[test]
fn a_graft_that_spins_to_its_budget_does_not_delay_another_listener() {
    const FLOOD: usize = 2000;
    const VICTIM: u64 = 100;
    let dev = device(8192);
    let mut config = KernelConfig {
        cache_frames: 128,
        writeback_every: None,
        ..KernelConfig::default()
    };
    // The attackers' grafts stay loaded however often they fail, each invocation spending its
    // whole (short) budget.
    config.runtime.invocation_budget = Duration::from_millis(2);
    config.runtime.max_consecutive_failures = u32::MAX;
    config.runtime.failure_rate_min = u32::MAX;
    let k = boot_with(&dev, config);
    let spin = r#"
        #include "vino_graft.h"
        static volatile uint64_t spins;
        VINO_GRAFT(event_fs_create)
        int32_t event_fs_create(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t t, int32_t n) {
            for (;;)
                spins += (uint64_t)inode;
        }
    "#;
    let wasm = graft(spin);
    // One attacker per event thread, so the old pid-hashed queues had no free thread.
    let attackers: Vec<Arc<Process>> = (0..vino_kernel::EVENT_THREADS)
        .map(|_| {
            let a = k.spawn(Credentials::root());
            a.graft_load("event.fs.create", &wasm).unwrap();
            a
        })
        .collect();
    let actor = k.spawn(Credentials::root());
    let ino = touch(&actor, "/f", 0o644);
    raise_creates(&k, &actor, ino, FLOOD);
    // The attackers are spinning on the event threads before the victim's events come.
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while k.event_stats().of(EventKind::Create).graft_aborts < attackers.len() as u64 {
        assert!(std::time::Instant::now() < until, "the attackers' grafts do not run");
        std::thread::sleep(Duration::from_millis(1));
    }

    let victim = k.spawn(Credentials::root());
    let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = heard.clone();
    let policy = move |_: &vino_kernel::EventEnv, _: &FsEvent| -> Result<bool, vino_graft::Invalid> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    };
    victim.event_bind_native::<2>(Arc::new(policy), false).unwrap();
    raise_creates(&k, &actor, ino, VICTIM as usize);

    let until = std::time::Instant::now() + Duration::from_secs(120);
    while heard.load(std::sync::atomic::Ordering::Relaxed) < VICTIM {
        assert!(std::time::Instant::now() < until, "the victim's events are stuck");
        std::thread::sleep(Duration::from_millis(5));
    }
    for a in &attackers {
        assert!(
            a.events_queued() > 1000,
            "the victim waited for the attacker: {} left",
            a.events_queued()
        );
    }
    // Their backlog goes with them.
    for a in &attackers {
        k.exit(a.pid());
    }
    quiesce(&k);
}

#[test]
fn subscriptions_are_charged_to_their_user_and_refunded() {
    let mut limits = vino_kernel::account::LimitsConfig::default();
    limits.user.set(vino_kernel::Resource::Subscriptions, 3);
    let config = KernelConfig {
        cache_frames: 128,
        writeback_every: None,
        limits,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(device(4096) as Arc<dyn BlockDevice>, &config).unwrap();
    let a = k.spawn(Credentials::user(1000, 100));
    let b = k.spawn(Credentials::user(1000, 100));
    let other = k.spawn(Credentials::user(2000, 200));
    a.event_subscribe(EventKind::Create).unwrap();
    a.event_subscribe(EventKind::Create).unwrap(); // the same subscription again: no new charge
    a.event_subscribe(EventKind::Unlink).unwrap();
    b.event_subscribe(EventKind::Create).unwrap();
    let e = b.event_subscribe(EventKind::Unlink).unwrap_err();
    assert_eq!(e.errno, vino_kernel::Errno::DQuot, "{e}");
    assert!(e.message.contains("uid 1000"), "{e}");
    // Another user has its own share.
    for kind in [EventKind::Create, EventKind::Unlink, EventKind::Open] {
        other.event_subscribe(kind).unwrap();
    }
    // Unsubscribing and exiting give subscriptions back.
    a.event_unsubscribe(EventKind::Unlink).unwrap();
    b.event_subscribe(EventKind::Unlink).unwrap();
    let accounts = k.accounts();
    assert_eq!(accounts.user(1000).used(vino_kernel::Resource::Subscriptions), 3);
    for p in [&a, &b, &other] {
        k.exit(p.pid());
    }
    assert_eq!(accounts.total().used(vino_kernel::Resource::Subscriptions), 0);
}

#[test]
fn without_event_threads_graft_jobs_wait_for_whoever_runs_them() {
    let dev = device(8192);
    let config = KernelConfig {
        cache_frames: 128,
        writeback_every: None,
        event_dispatch: vino_kernel::Dispatch::Caller,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    let owner = k.spawn(Credentials::root());
    owner.graft_load("event.fs.unlink", &example("unlink_log")).unwrap();
    let log = log_for(&owner);
    for i in 0..3 {
        touch(&owner, &format!("/f{i}"), 0o644);
        owner.unlink(&format!("/f{i}")).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let s = k.event_stats().of(EventKind::Unlink);
    assert_eq!((s.raised, s.delivered_graft), (3, 0), "no thread ran the jobs");
    assert_eq!(k.run_events(), 1, "one listener's turn");
    assert_eq!(k.event_stats().of(EventKind::Unlink).delivered_graft, 3);
    assert_eq!(records(&owner, log).len(), 3);
    assert_eq!(k.run_events(), 0, "nothing left");
    // A quiesce (and so a shutdown) runs what is queued itself rather than wait for threads.
    touch(&owner, "/g", 0o644);
    owner.unlink("/g").unwrap();
    quiesce(&k);
    assert_eq!(k.event_stats().of(EventKind::Unlink).delivered_graft, 4);
    k.shutdown().unwrap();
}

// ---- who reached the file; what a filter costs ---------------------------------------------------

/// Counts the events a native policy bound on `event.fs.<K>` of `p` runs for.
fn count_graft<const K: usize>(p: &Process) -> Arc<std::sync::atomic::AtomicU64> {
    let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = heard.clone();
    let policy = move |_: &vino_kernel::EventEnv, _: &FsEvent| -> Result<bool, vino_graft::Invalid> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    };
    p.event_bind_native::<K>(Arc::new(policy), false).unwrap();
    heard
}

fn subscribe_all(p: &Process) {
    for kind in EventKind::ALL {
        p.event_subscribe(kind).unwrap();
    }
}

/// The victim's activity on `/tmp/v/f` (a 0644 file in its 0700 directory): every kind.
fn victim_works(victim: &Process) -> u64 {
    let fd = victim.open("/tmp/v/f", OpenFlags::create()).unwrap();
    let ino = victim.inode(fd).unwrap();
    victim.write(fd, b"secret work").unwrap();
    victim.ftruncate(fd, 3).unwrap();
    victim.close(fd).unwrap();
    let fd = victim.open("/tmp/v/f", OpenFlags::read_only()).unwrap();
    victim.close(fd).unwrap();
    ino
}

#[test]
fn no_event_of_a_file_behind_a_closed_directory_reaches_another_user() {
    let dev = device(8192);
    let k = boot(&dev);
    let root = k.spawn(Credentials::root());
    root.mkdir("/tmp", 0o777).unwrap();
    let victim = k.spawn(Credentials::user(1000, 100));
    victim.mkdir("/tmp/v", 0o700).unwrap();
    touch(&victim, "/tmp/v/f", 0o644);
    // The attacker: unfiltered at user level and with grafts on close and modify; a second one
    // filtered by the file's name.
    let spy = k.spawn(Credentials::user(2000, 200));
    subscribe_all(&spy);
    let (closes, modifies) = (count_graft::<1>(&spy), count_graft::<4>(&spy));
    let named = k.spawn(Credentials::user(2000, 200));
    subscribe_all(&named);
    for kind in EventKind::ALL {
        named
            .event_filter(
                kind,
                EventFilter {
                    inodes: vec![],
                    names: vec!["f".into()],
                },
            )
            .unwrap();
    }
    // Another process of the owner, holding the file open: it reached it.
    let owner = k.spawn(Credentials::user(1000, 100));
    let held = owner.open("/tmp/v/f", OpenFlags::read_only()).unwrap();
    subscribe_all(&owner);

    let ino = victim_works(&victim);
    quiesce(&k);
    assert!(spy.event_wait(Duration::from_millis(50)).is_empty());
    assert!(named.event_wait(Duration::from_millis(10)).is_empty());
    let ran = |c: &Arc<std::sync::atomic::AtomicU64>| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!((ran(&closes), ran(&modifies)), (0, 0), "the spy's grafts heard nothing");
    use EventKind::*;
    let kinds: Vec<EventKind> = owner
        .event_wait(Duration::from_secs(1))
        .iter()
        .filter(|e| e.inode == ino)
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, [Open, Modify, Modify, Close, Open, Close]);

    // An inode filter is taken only for a file the process holds open.
    let e = spy
        .event_filter(
            Modify,
            EventFilter {
                inodes: vec![ino],
                names: vec![],
            },
        )
        .unwrap_err();
    assert_eq!(e.errno, vino_kernel::Errno::Acces, "{e}");
    owner.close(held).unwrap();
    let e = owner
        .event_filter(
            Modify,
            EventFilter {
                inodes: vec![ino],
                names: vec![],
            },
        )
        .unwrap_err();
    assert_eq!(e.errno, vino_kernel::Errno::Acces, "not held any more: {e}");
    let fd = owner.open("/tmp/v/f", OpenFlags::read_only()).unwrap();
    for kind in [Modify, Close] {
        let filter = EventFilter {
            inodes: vec![ino],
            names: vec![],
        };
        owner.event_filter(kind, filter).unwrap();
    }
    owner.close(fd).unwrap();
    owner.event_wait(Duration::from_millis(10));
    // The filter, like a watch, outlives the descriptor it was set through.
    victim_works(&victim);
    quiesce(&k);
    let kinds: Vec<EventKind> = owner
        .event_wait(Duration::from_secs(1))
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, [Open, Modify, Modify, Close, Open, Close]);
    assert!(spy.event_wait(Duration::from_millis(10)).is_empty());
    assert_eq!((ran(&closes), ran(&modifies)), (0, 0));
    assert!(k.event_stats().of(Modify).denied >= 4);
}

#[test]
fn event_filters_are_charged_by_their_bytes_and_refunded() {
    const LIMIT: u64 = 64 * 1024;
    let mut limits = vino_kernel::account::LimitsConfig::default();
    limits.user.set(vino_kernel::Resource::EventFilterBytes, LIMIT);
    let config = KernelConfig {
        cache_frames: 128,
        writeback_every: None,
        limits,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(device(4096) as Arc<dyn BlockDevice>, &config).unwrap();
    let used = || k.accounts().user(1000).used(vino_kernel::Resource::EventFilterBytes);
    let big = |n: usize| EventFilter {
        inodes: vec![],
        names: (0..n).map(|i| format!("{i:04}").repeat(1000)).collect(),
    };
    let a = k.spawn(Credentials::user(1000, 100));
    let b = k.spawn(Credentials::user(1000, 100));
    a.event_subscribe(EventKind::Create).unwrap();
    a.event_filter(EventKind::Create, big(10)).unwrap();
    let ten = big(10).bytes();
    assert_eq!(ten, 10 * (4000 + vino_kernel::FILTER_ENTRY_BYTES));
    assert_eq!(used(), ten);
    // The same user's other process, past the limit: refused, nothing kept.
    let e = b.event_filter(EventKind::Unlink, big(10)).unwrap_err();
    assert_eq!(e.errno, vino_kernel::Errno::DQuot, "{e}");
    assert!(e.message.contains("uid 1000"), "{e}");
    assert_eq!(used(), ten);
    // Another user has its own share.
    let other = k.spawn(Credentials::user(2000, 200));
    other.event_filter(EventKind::Create, big(10)).unwrap();
    // Replacing gives the old one back; an inode entry costs its fixed bytes.
    let fd = a.open("/", OpenFlags::directory()).unwrap();
    let root = a.inode(fd).unwrap();
    let one = EventFilter {
        inodes: vec![root],
        names: vec![],
    };
    a.event_filter(EventKind::Create, one).unwrap();
    assert_eq!(used(), vino_kernel::FILTER_ENTRY_BYTES);
    b.event_filter(EventKind::Unlink, big(10)).unwrap();
    assert_eq!(used(), ten + vino_kernel::FILTER_ENTRY_BYTES);
    // Unsubscribing gives back the filter of a kind no longer heard; exiting gives back all.
    a.event_unsubscribe(EventKind::Create).unwrap();
    assert_eq!(used(), ten);
    k.exit(b.pid());
    assert_eq!(used(), 0);
    k.exit(other.pid());
    k.exit(a.pid());
    assert_eq!(k.accounts().total().used(vino_kernel::Resource::EventFilterBytes), 0);
}
