//! Byte-range locks and file-system events between client processes of one daemon: POSIX
//! conflicts, blocking waits, deadlock detection, a waiter that hangs up, and events delivered
//! once each.

mod common;

use common::{TestDaemon, is_root, spawn_child, wait_line};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use vino_client::{Client, EventKind, LockKind, OpenFlags, errno};
use vino_proto::{MAX_FRAME, Request, Response};

/// Waits until `ino` has `n` lock waiters.
fn wait_waiters(d: &TestDaemon, ino: u64, n: usize) {
    let until = Instant::now() + Duration::from_secs(10);
    while d.handle().kernel().locks_on(ino).1.len() != n {
        assert!(
            Instant::now() < until,
            "waiters on {ino}: {:?}",
            d.handle().kernel().locks_on(ino).1
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn locks_conflict_wait_and_detect_deadlock_across_clients() {
    let d = TestDaemon::start();
    let (mut a, mut b) = (d.client(), d.client());
    let fa = a.open("/shared", OpenFlags::create()).unwrap();
    let fb = b.open("/shared", OpenFlags::read_write()).unwrap();
    let ino = a.fstat(fa).unwrap().ino;

    a.lock(fa, LockKind::Write, 0, 1, false).unwrap();
    let e = b.lock(fb, LockKind::Read, 0, 1, false).unwrap_err();
    assert_eq!(e.errno, errno::EAGAIN, "{e}");
    let held = b.getlk(fb, LockKind::Read, 0, 10).unwrap().expect("a's lock blocks b");
    assert_eq!(
        (held.pid, held.kind, held.start, held.len),
        (a.pid(), LockKind::Write, 0, 1)
    );
    assert!(
        a.getlk(fa, LockKind::Write, 0, 1).unwrap().is_none(),
        "a's own lock never blocks a"
    );

    // b waits for byte 0 while holding byte 1; a asking for byte 1 would close a cycle.
    b.lock(fb, LockKind::Write, 1, 1, false).unwrap();
    let waiter = std::thread::spawn(move || {
        b.lock(fb, LockKind::Write, 0, 1, true).unwrap();
        b
    });
    wait_waiters(&d, ino, 1);
    let e = a.lock(fa, LockKind::Write, 1, 1, true).unwrap_err();
    assert_eq!(e.errno, errno::EDEADLK, "{e}");
    a.lock(fa, LockKind::Unlock, 0, 0, false).unwrap();
    let mut b = waiter.join().unwrap();
    let held = a
        .getlk(fa, LockKind::Read, 0, 0)
        .unwrap()
        .expect("b holds bytes 0 and 1");
    assert_eq!(held.pid, b.pid());
    b.close(fb).unwrap();
    assert!(
        a.getlk(fa, LockKind::Write, 0, 0).unwrap().is_none(),
        "closing the file dropped b's locks"
    );
}

fn raw(stream: &mut UnixStream, req: &Request) -> Response {
    vino_proto::write_frame(stream, req).unwrap();
    let mut buf = Vec::new();
    vino_proto::read_frame(stream, &mut buf, MAX_FRAME).unwrap();
    vino_proto::decode(&buf).unwrap()
}

#[test]
fn a_client_that_hangs_up_while_waiting_leaves_the_lock_queue() {
    let d = TestDaemon::start();
    let mut a = d.client();
    let fa = a.open("/q", OpenFlags::create()).unwrap();
    let ino = a.fstat(fa).unwrap().ino;
    a.lock(fa, LockKind::Write, 0, 0, false).unwrap();

    let mut s = UnixStream::connect(d.socket()).unwrap();
    let hello = Request::Hello {
        version: vino_proto::VERSION,
        client: "waiter".into(),
        shm_len: 0,
    };
    assert!(matches!(raw(&mut s, &hello), Response::Hello { .. }));
    let Response::Fd(fd) = raw(
        &mut s,
        &Request::Open {
            path: "/q".into(),
            flags: OpenFlags::read_write(),
        },
    ) else {
        panic!("open failed")
    };
    let lock = Request::Lock {
        fd,
        kind: LockKind::Write,
        start: 0,
        len: 0,
        wait: true,
    };
    vino_proto::write_frame(&mut s, &lock).unwrap();
    wait_waiters(&d, ino, 1);
    drop(s);
    wait_waiters(&d, ino, 0);
    d.wait_processes(1);
    // a still holds its lock, and nothing of the waiter is left to be granted it.
    let kernel = d.handle().kernel();
    assert_eq!(kernel.locks_on(ino).0.len(), 1);
    a.lock(fa, LockKind::Unlock, 0, 0, false).unwrap();
    assert!(kernel.locks_on(ino).0.is_empty());
}

#[test]
fn events_reach_a_subscribed_client_once_each_through_its_filter() {
    let d = TestDaemon::start();
    let (mut watcher, mut actor) = (d.client(), d.client());
    watcher.event_subscribe(EventKind::Unlink).unwrap();
    watcher
        .event_filter(EventKind::Unlink, &[], &["watched".to_string()])
        .unwrap();
    for name in ["/watched", "/other"] {
        let fd = actor.open(name, OpenFlags::create()).unwrap();
        actor.close(fd).unwrap();
        actor.unlink(name).unwrap();
    }
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got.is_empty() && Instant::now() < until {
        got.extend(watcher.event_wait(1000).unwrap());
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].kind, got[0].name.as_str(), got[0].pid),
        (EventKind::Unlink, "watched", actor.pid())
    );
    assert!(watcher.event_wait(200).unwrap().is_empty(), "each event comes once");
}

#[test]
fn a_backlog_is_held_to_the_bound_drained_over_several_waits_and_ends_in_one_overflow_marker() {
    use vino_kernel::{At, Credentials, EVENT_QUEUE_MAX, OpenFlags as KFlags};
    // Create-and-unlink pairs of names of 255 bytes that are not UTF-8, so each event carries
    // 3 bytes per byte of the name; far more events than the queue holds.
    const PAIRS: usize = 12_000;
    let d = TestDaemon::start();
    let mut watcher = d.client();
    watcher.event_subscribe(EventKind::Create).unwrap();
    watcher.event_subscribe(EventKind::Unlink).unwrap();
    let actor = d.handle().kernel().spawn(Credentials::root());
    let name = |i: usize| {
        let mut n = format!("f{i}-").into_bytes();
        n.resize(255, 0xff);
        n
    };
    for i in 0..PAIRS {
        let fd = actor.open_at(At::Root, name(i), KFlags::create()).unwrap();
        actor.close(fd).unwrap();
        actor.unlink_at(At::Root, name(i)).unwrap();
    }

    let mut got = Vec::new();
    let mut waits = 0;
    while got.len() < EVENT_QUEUE_MAX + 1 {
        let answer = watcher.event_wait(1000).unwrap();
        assert!(!answer.is_empty(), "events stopped after {}", got.len());
        assert!(
            answer.len() <= vino_daemon::EVENTS_PER_WAIT,
            "{} events in one answer",
            answer.len()
        );
        waits += 1;
        got.extend(answer);
    }
    assert!(waits >= EVENT_QUEUE_MAX / vino_daemon::EVENTS_PER_WAIT, "{waits} waits");
    assert_eq!(got.len(), EVENT_QUEUE_MAX + 1, "the bound and one marker");
    // The oldest events, in order, each once; then the marker.
    for (j, e) in got[..EVENT_QUEUE_MAX].iter().enumerate() {
        let want = if j % 2 == 0 {
            EventKind::Create
        } else {
            EventKind::Unlink
        };
        let lossy = String::from_utf8_lossy(&name(0)).len();
        assert!(e.name.len() >= lossy - 3 * 5, "the name came whole: {}", e.name.len());
        let i: usize = e.name[1..].split('-').next().unwrap().parse().unwrap();
        assert_eq!((e.kind, i), (want, j / 2));
    }
    let marker = &got[EVENT_QUEUE_MAX];
    assert_eq!(
        (marker.kind, marker.ino, marker.dir, marker.pid, marker.name.as_str()),
        (EventKind::Overflow, 0, 0, 0, "")
    );
    let stats = d.handle().kernel().event_stats();
    let dropped = stats.of(vino_kernel::EventKind::Create).dropped + stats.of(vino_kernel::EventKind::Unlink).dropped;
    assert_eq!(dropped as usize, 2 * PAIRS - EVENT_QUEUE_MAX);
    assert_eq!(stats.overflows, 1);

    // Drained: nothing more, the connection is still in step, and new events come again.
    assert!(watcher.event_wait(100).unwrap().is_empty());
    let fd = watcher.open("/after", OpenFlags::create()).unwrap();
    assert_eq!(watcher.fstat(fd).unwrap().size, 0);
    watcher.close(fd).unwrap();
    let after = watcher.event_wait(1000).unwrap();
    assert_eq!(
        after.iter().map(|e| (e.kind, e.name.as_str())).collect::<Vec<_>>(),
        [(EventKind::Create, "after")]
    );
}

#[test]
fn overflow_cannot_be_subscribed_to_through_the_socket() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let err = c.event_subscribe(EventKind::Overflow).unwrap_err();
    assert_eq!(err.errno, errno::EINVAL, "{err}");
    let err = c.event_filter(EventKind::Overflow, &[], &[]).unwrap_err();
    assert_eq!(err.errno, errno::EINVAL, "{err}");
}

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    // "fill": locks separate bytes of its own file until refused and says how many and why,
    // unlocks them all, takes as many again, and holds them until killed.
    assert_eq!(role, "fill");
    let mut c = Client::connect(std::env::var("VINO_SOCKET").unwrap()).unwrap();
    let fd = c.open("/shared/mine", OpenFlags::create()).unwrap();
    let fill = |c: &mut Client| {
        let mut n = 0;
        loop {
            match c.lock(fd, LockKind::Write, n * 2, 1, false) {
                Ok(()) => n += 1,
                Err(e) => return (n, e.errno),
            }
        }
    };
    let (n, errno) = fill(&mut c);
    println!("REFUSED {n} {errno}");
    c.lock(fd, LockKind::Unlock, 0, 0, false).unwrap();
    let (n, errno) = fill(&mut c);
    println!("REFUSED {n} {errno}");
    println!("HELD");
    let parent = nix::unistd::getppid();
    let until = Instant::now() + Duration::from_secs(60);
    while nix::unistd::getppid() == parent && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::process::exit(0);
}

#[test]
fn a_user_past_its_lock_records_gets_enolck_and_they_come_back_when_it_goes() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    let d = TestDaemon::with(|c| c.limits.lock_records_per_user = Some(8));
    d.client().mkdir("/shared", 0o777).unwrap();
    let mut child = spawn_child("child_role", "fill", &d.socket(), &[], Some(1000));
    let lines = wait_line(&mut child, "HELD");
    let refused: Vec<&String> = lines.iter().filter(|l| l.starts_with("REFUSED")).collect();
    let want = format!("REFUSED 8 {}", errno::ENOLCK);
    assert_eq!(refused, [&want, &want], "unlocking gave all 8 back: {lines:?}");
    let accounts = d.handle().kernel().accounts();
    assert_eq!(accounts.user(1000).used(vino_kernel::Resource::LockRecords), 8);
    // Root, on the same daemon, is not held back.
    let mut root = d.client();
    let fd = root.open("/shared/mine", OpenFlags::read_write()).unwrap();
    root.lock(fd, LockKind::Read, 1, 1, false).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(10);
    while accounts.user(1000).used(vino_kernel::Resource::LockRecords) != 0 {
        assert!(Instant::now() < until, "the child's records were never refunded");
        std::thread::sleep(Duration::from_millis(5));
    }
    d.handle().kernel().check_lock_table();
}
