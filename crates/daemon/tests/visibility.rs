//! What one user may see of another through the daemon: `top`, the graft list and a slot's
//! statistics show an ordinary user its own processes and the grafts they loaded; global
//! graftpoints and grafts of others that reach its files are listed without their details. A
//! privileged client sees everything.
//!
//! The ordinary user is a child process of this binary (`child_role`) running as another uid;
//! skipped unless the tests run as root (as in CI).

mod common;

use common::{TestDaemon, graft, is_root, spawn_child, wait_line};
use std::time::{Duration, Instant};
use vino_client::{Client, ClientError, OpenFlags};
use vino_kernel::Credentials;

const TEST: &str = "child_role";
const ALICE: u32 = 1000;
const BOB: u32 = 1001;

type R = Result<(), String>;

fn e(err: ClientError) -> String {
    format!("errno {}: {}", err.errno, err.message)
}

fn check(cond: bool, what: impl Into<String>) -> R {
    if cond { Ok(()) } else { Err(what.into()) }
}

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let result = match role.as_str() {
        "alice" => role_alice(),
        other => Err(format!("unknown role {other}")),
    };
    if let Err(why) = result {
        println!("FAILED: {why}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Alice, with two connections and a graft of her own, looks at what the daemon shows her.
fn role_alice() -> R {
    let ra = std::fs::read(std::env::var("VINO_TEST_RA").unwrap()).map_err(|e| e.to_string())?;
    let mut a = Client::connect_default().map_err(e)?;
    let b = Client::connect_default().map_err(e)?;
    check(!a.privileged(), "an ordinary user was made privileged")?;
    let mine = [a.pid(), b.pid()];
    let fd = a.open("/home/alice", OpenFlags::create()).map_err(e)?;
    a.graft_load(&format!("file.compute_ra/{fd}"), &ra).map_err(e)?;
    // Root's file-wide graft reaches Alice's descriptor of /data.
    let data = a.open("/data", OpenFlags::read_only()).map_err(e)?;

    let top = a.top().map_err(e)?;
    let pids: Vec<u64> = top.processes.iter().map(|p| p.pid).collect();
    check(
        top.processes.iter().all(|p| p.uid == ALICE),
        format!("top shows other users' processes: {:?}", top.processes),
    )?;
    check(
        mine.iter().all(|p| pids.contains(p)),
        format!("top leaves out Alice's own processes {mine:?}: {pids:?}"),
    )?;
    check(
        top.grafts.iter().all(|g| mine.contains(&g.owner)),
        format!("top shows others' grafts: {:?}", top.grafts),
    )?;
    check(
        top.grafts.iter().all(|g| !g.scope.contains("/data")),
        "top names the file of root's graft",
    )?;
    check(
        top.grafts
            .iter()
            .any(|g| g.owner == a.pid() && g.scope == format!("process {}", a.pid())),
        format!("top leaves out Alice's own graft: {:?}", top.grafts),
    )?;

    let list = a.graft_list().map_err(e)?;
    let slot = |point: &str| list.iter().find(|s| s.point == point).cloned();
    let global = slot("disk.pick_request").ok_or("the global graftpoint is not listed")?;
    check(
        global.policy == "wasm" && global.graft.is_none() && global.stats.is_none(),
        format!("the global graft's details are shown: {global:?}"),
    )?;
    let own = slot(&format!("file.compute_ra/{fd}")).ok_or("Alice's own graftpoint is not listed")?;
    check(
        own.graft
            .as_ref()
            .is_some_and(|g| g.owner == a.pid() && !g.hash.is_empty()),
        format!("Alice's own graft lacks its details: {own:?}"),
    )?;
    let foreign = slot(&format!("file.compute_ra/{data}")).ok_or("the descriptor's graftpoint is not listed")?;
    check(
        foreign.policy == "wasm" && foreign.graft.is_none() && foreign.stats.is_none(),
        format!("root's file graft's details are shown: {foreign:?}"),
    )?;
    let stats = a.graft_stats("disk.pick_request").map_err(e)?;
    check(
        stats.graft.is_none() && stats.stats.is_none(),
        format!("the global graft's statistics are shown: {stats:?}"),
    )?;
    let stats = a.graft_stats(&format!("file.compute_ra/{data}")).map_err(e)?;
    check(
        stats.graft.is_none() && stats.stats.is_none(),
        format!("root's file graft's statistics are shown: {stats:?}"),
    )?;
    let stats = a.graft_stats(&format!("file.compute_ra/{fd}")).map_err(e)?;
    check(
        stats.graft.as_ref().is_some_and(|g| g.owner == a.pid()),
        format!("Alice's own statistics lack the graft: {stats:?}"),
    )?;

    // Stay connected while root looks, until told to go.
    println!("ready {} {}", a.pid(), b.pid());
    let until = Instant::now() + Duration::from_secs(30);
    while a.stat("/home/done").is_err() {
        check(Instant::now() < until, "never told to go")?;
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(b);
    Ok(())
}

#[test]
fn an_ordinary_user_sees_only_its_own_processes_and_grafts() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    let d = TestDaemon::start();
    let (fifo, _) = graft("fifo");
    let (ra, ra_path) = graft("sequential_ra");
    let mut root = d.client();
    assert!(root.privileged());
    root.graft_load("disk.pick_request", &fifo).unwrap();
    let fd = root.open("/data", OpenFlags::create()).unwrap();
    root.write(fd, &[7u8; 64 << 10]).unwrap();
    root.close(fd).unwrap();
    root.chmod("/data", 0o644).unwrap();
    root.graft_load_file("/data", "file.compute_ra", &ra).unwrap();
    root.mkdir("/home", 0o777).unwrap();
    root.chmod("/home", 0o777).unwrap();
    // Bob: a process of another user, with no connection of its own.
    let bob = d.handle().kernel().spawn(Credentials::user(BOB, BOB));

    let ra_path = ra_path.to_str().unwrap();
    let mut child = spawn_child(TEST, "alice", &d.socket(), &[("VINO_TEST_RA", ra_path)], Some(ALICE));
    let lines = wait_line(&mut child, "ready");
    let ready = lines.last().unwrap();
    let alice: Vec<u64> = ready.split_whitespace().skip(1).map(|p| p.parse().unwrap()).collect();

    // Root sees everyone and every graft, with its details.
    let top = root.top().unwrap();
    let uid_of = |pid: u64| top.processes.iter().find(|p| p.pid == pid).map(|p| p.uid);
    assert_eq!(uid_of(alice[0]), Some(ALICE));
    assert_eq!(uid_of(alice[1]), Some(ALICE));
    assert_eq!(uid_of(bob.pid()), Some(BOB));
    assert_eq!(uid_of(root.pid()), Some(0));
    for (scope, owner) in [
        ("global".to_string(), root.pid()),
        ("file /data".to_string(), root.pid()),
        (format!("process {}", alice[0]), alice[0]),
    ] {
        assert!(
            top.grafts.iter().any(|g| g.scope == scope && g.owner == owner),
            "{scope}: {:?}",
            top.grafts
        );
    }
    let global = root.graft_stats("disk.pick_request").unwrap();
    assert_eq!(global.graft.unwrap().owner, root.pid());

    let f = root.open("/home/done", OpenFlags::create()).unwrap();
    root.close(f).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// What a mount served counts every user's requests: only a privileged viewer sees it; others
/// see the mount itself (as the host's mount table shows it) without the counts.
#[test]
fn only_a_privileged_viewer_sees_what_a_mount_served() {
    if !is_root() || !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and /dev/fuse to mount");
        return;
    }
    let d = TestDaemon::start();
    let daemon = d.handle().daemon();
    let at = tempfile::tempdir().unwrap();
    daemon.mount(at.path()).unwrap();
    std::fs::write(at.path().join("f"), b"served").unwrap();
    assert_eq!(std::fs::read(at.path().join("f")).unwrap(), b"served");

    let root = daemon.top_for(&Credentials::root());
    let requests = &root.mounts[0].requests;
    assert!(
        requests.iter().any(|r| r.op == "create" && r.count >= 1 && r.ns > 0),
        "{requests:?}"
    );
    let alice = daemon.top_for(&Credentials::user(ALICE, ALICE));
    assert_eq!(alice.mounts.len(), 1);
    assert_eq!(alice.mounts[0].path, root.mounts[0].path);
    assert!(alice.mounts[0].requests.is_empty(), "{:?}", alice.mounts[0].requests);
    daemon.unmount(at.path()).unwrap();
}
