//! File-system events between users through the daemon: activity on a file behind another
//! user's 0700 directory reaches no other user (user-level delivery or event graft, filtered
//! or not), its owner still hears it, and event filters are charged to their user by bytes.
//!
//! The other users are child processes of this binary (`child_role`) running as uids 1000 and
//! 1001; skipped unless the tests run as root (as in CI).

mod common;

use common::{TestDaemon, is_root, spawn_child, wait_line};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};
use vino_client::{Client, ClientError, EventKind, OpenFlags, errno};
use vino_kernel::{Credentials, Resource};

const TEST: &str = "child_role";
const OWNER: u32 = 1000;
const SPY: u32 = 1001;
const KINDS: [(EventKind, &str); 5] = [
    (EventKind::Open, "open"),
    (EventKind::Close, "close"),
    (EventKind::Create, "create"),
    (EventKind::Unlink, "unlink"),
    (EventKind::Modify, "modify"),
];

type R = Result<(), String>;

fn e(err: ClientError) -> String {
    format!("errno {}: {}", err.errno, err.message)
}

fn check(cond: bool, what: impl Into<String>) -> R {
    if cond { Ok(()) } else { Err(what.into()) }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for the child"))
}

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let result = match role.as_str() {
        "spy" => role_spy(),
        "owner" => role_owner(),
        "hoarder" => role_hoarder(),
        other => Err(format!("unknown role {other}")),
    };
    match result {
        Ok(()) => println!("ok"),
        Err(why) => println!("FAILED: {why}"),
    }
    std::process::exit(0);
}

/// An event graft on `event.fs.<kind>` that counts events on the inode set by `set_target`
/// (`hits`) and all others (`others`), built into `dir` for the children to read.
fn counting_graft(dir: &Path, kind: &str) {
    let src = format!(
        r#"
        #include "vino_graft.h"
        static int64_t target = -1, hits, others;
        VINO_CONTROL(set_target) int64_t set_target(int64_t ino) {{ target = ino; return 0; }}
        VINO_CONTROL(hits) int64_t get_hits(void) {{ return hits; }}
        VINO_CONTROL(others) int64_t get_others(void) {{ return others; }}
        VINO_GRAFT(event_fs_{kind})
        int32_t event_fs_{kind}(int32_t k, int64_t inode, int64_t parent, int64_t pid, int64_t t, int32_t n) {{
            if (inode == target) hits++; else others++;
            return 0;
        }}
    "#
    );
    let wasm = vino_sdk::build_c_str("count.c", &src, &vino_sdk::BuildOptions::default()).unwrap();
    let path = dir.join(format!("{kind}.wasm"));
    std::fs::write(&path, wasm).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Waits for events until none has come for a while.
fn drain(c: &mut Client) -> Result<Vec<vino_client::Event>, String> {
    let mut all = Vec::new();
    loop {
        let got = c.event_wait(300).map_err(e)?;
        if got.is_empty() {
            return Ok(all);
        }
        all.extend(got);
    }
}

fn wait_for(c: &mut Client, path: &str) -> R {
    let until = Instant::now() + Duration::from_secs(60);
    while c.stat(path).is_err() {
        check(Instant::now() < until, format!("{path} never came"))?;
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn subscribe_all(c: &mut Client) -> R {
    KINDS.iter().try_for_each(|(k, _)| c.event_subscribe(*k).map_err(e))
}

/// The spy: one connection unfiltered with a counting graft on every kind, one filtered by the
/// file's name; neither may hear of the file behind the owner's 0700 directory.
fn role_spy() -> R {
    let ino: i64 = env("VINO_TEST_INO").parse().unwrap();
    let grafts = env("VINO_TEST_GRAFTS");
    let mut a = Client::connect_default().map_err(e)?;
    subscribe_all(&mut a)?;
    for (_, kind) in KINDS {
        let point = format!("event.fs.{kind}");
        let wasm = std::fs::read(Path::new(&grafts).join(format!("{kind}.wasm"))).map_err(|x| x.to_string())?;
        a.graft_load(&point, &wasm).map_err(e)?;
        a.graft_call(&point, "set_target", &[ino]).map_err(e)?;
    }
    let mut b = Client::connect_default().map_err(e)?;
    subscribe_all(&mut b)?;
    for (kind, _) in KINDS {
        b.event_filter(kind, &[], &["f".to_string()]).map_err(e)?;
    }
    // An inode filter needs the file open, which the directory forbids.
    let refused = b.event_filter(EventKind::Modify, &[ino as u64], &[]);
    check(
        refused.as_ref().is_err_and(|x| x.errno == errno::EACCES),
        format!("an inode filter for the unreachable file: {refused:?}"),
    )?;
    println!("ready");
    wait_for(&mut a, "/tmp/done")?;
    let (heard_a, heard_b) = (drain(&mut a)?, drain(&mut b)?);
    let leaked: Vec<_> = heard_a.iter().chain(&heard_b).filter(|v| v.ino == ino as u64).collect();
    check(leaked.is_empty(), format!("the spy heard of the file: {leaked:?}"))?;
    // It does hear the owner's public file: the subscriptions work.
    check(
        heard_a.iter().any(|v| v.kind == EventKind::Create && v.name == "pub"),
        format!("the spy heard nothing of /tmp/pub: {heard_a:?}"),
    )?;
    let (mut hits, mut others) = (0, 0);
    for (_, kind) in KINDS {
        let point = format!("event.fs.{kind}");
        hits += a.graft_call(&point, "hits", &[]).map_err(e)?;
        others += a.graft_call(&point, "others", &[]).map_err(e)?;
    }
    check(hits == 0, format!("the spy's grafts heard of the file {hits} times"))?;
    check(others > 0, "the spy's grafts heard nothing at all")
}

/// The owner: holds the file open and hears all its activity.
fn role_owner() -> R {
    let ino: u64 = env("VINO_TEST_INO").parse().unwrap();
    let mut c = Client::connect_default().map_err(e)?;
    let _fd = c.open("/tmp/v/f", OpenFlags::read_only()).map_err(e)?;
    subscribe_all(&mut c)?;
    println!("ready");
    wait_for(&mut c, "/tmp/done")?;
    let kinds: Vec<EventKind> = drain(&mut c)?
        .iter()
        .filter(|v| v.ino == ino && v.pid != c.pid())
        .map(|v| v.kind)
        .collect();
    use EventKind::*;
    check(
        kinds == [Open, Modify, Modify, Close],
        format!("the owner heard {kinds:?}"),
    )
}

/// Names of one hoarder's filter, and their length.
const HOARD_NAMES: usize = 16;
const HOARD_NAME_LEN: u64 = 4005;

/// Sets filters of 4 KB names on every kind, connection after connection, until refused, and
/// holds them until told.
fn role_hoarder() -> R {
    let name = "x".repeat(4000);
    let mut held = Vec::new();
    let mut refused = None;
    'fill: for i in 0..8 {
        let mut c = Client::connect_default().map_err(e)?;
        for (kind, _) in KINDS {
            let names: Vec<String> = (0..HOARD_NAMES).map(|j| format!("{i}-{j:02}-{name}")).collect();
            if let Err(x) = c.event_filter(kind, &[], &names) {
                refused = Some(x);
                held.push(c);
                break 'fill;
            }
        }
        held.push(c);
    }
    let refused = refused.ok_or("never refused")?;
    check(refused.errno == errno::EDQUOT, format!("refused with {}", e(refused)))?;
    // An empty filter gives its connection's share back.
    for (kind, _) in KINDS {
        held[0].event_filter(kind, &[], &[]).map_err(e)?;
    }
    println!("full");
    wait_for(&mut held[0], "/tmp/done")?;
    Ok(())
}

fn spawn_as(d: &TestDaemon, role: &str, uid: u32, env: &[(&str, &str)]) -> std::process::Child {
    let mut child = spawn_child(TEST, role, &d.socket(), env, Some(uid));
    let lines = wait_line(&mut child, "ready");
    assert!(lines.last().unwrap().starts_with("ready"), "{role}: {lines:?}");
    child
}

fn finish(role: &str, mut child: std::process::Child) {
    let lines = wait_line(&mut child, "ok");
    let _ = child.wait();
    assert_eq!(lines.last().map(String::as_str), Some("ok"), "{role}: {lines:?}");
}

/// The owner's 0644 file in its 0700 directory under a shared /tmp.
fn victim_file(d: &TestDaemon) -> (std::sync::Arc<vino_kernel::Process>, u64) {
    let k = d.handle().kernel();
    let root = k.spawn(Credentials::root());
    root.mkdir("/tmp", 0o777).unwrap();
    let owner = k.spawn(Credentials::user(OWNER, OWNER));
    owner.mkdir("/tmp/v", 0o700).unwrap();
    let fd = owner.open("/tmp/v/f", vino_kernel::OpenFlags::create()).unwrap();
    let ino = owner.inode(fd).unwrap();
    owner.close(fd).unwrap();
    (owner, ino)
}

fn done(d: &TestDaemon) {
    let root = d.handle().kernel().spawn(Credentials::root());
    let fd = root.open("/tmp/done", vino_kernel::OpenFlags::create()).unwrap();
    root.close(fd).unwrap();
}

#[test]
fn events_behind_a_closed_directory_reach_its_owner_and_no_other_user() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    let d = TestDaemon::start();
    let (victim, ino) = victim_file(&d);
    let ino_s = ino.to_string();
    let grafts = tempfile::tempdir().unwrap();
    std::fs::set_permissions(grafts.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (_, kind) in KINDS {
        counting_graft(grafts.path(), kind);
    }
    let dir = grafts.path().to_str().unwrap();
    let vars = [("VINO_TEST_INO", ino_s.as_str()), ("VINO_TEST_GRAFTS", dir)];
    let spy = spawn_as(&d, "spy", SPY, &vars);
    let owner = spawn_as(&d, "owner", OWNER, &vars);
    // The victim works on its file: open, write, truncate, close; and on a public one.
    let fd = victim.open("/tmp/v/f", vino_kernel::OpenFlags::read_write()).unwrap();
    victim.write(fd, b"secret").unwrap();
    victim.ftruncate(fd, 1).unwrap();
    victim.close(fd).unwrap();
    let fd = victim.open("/tmp/pub", vino_kernel::OpenFlags::create()).unwrap();
    victim.write(fd, b"public").unwrap();
    victim.close(fd).unwrap();
    assert!(d.handle().kernel().events_quiesce_for(Duration::from_secs(30)));
    done(&d);
    finish("spy", spy);
    finish("owner", owner);
    assert!(
        d.handle()
            .kernel()
            .event_stats()
            .of(vino_kernel::EventKind::Modify)
            .denied
            >= 2
    );
}

#[test]
fn event_filters_past_the_byte_limit_are_refused_and_given_back_at_disconnect() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    const LIMIT: u64 = 1 << 20;
    const FILTER: u64 = HOARD_NAMES as u64 * (HOARD_NAME_LEN + vino_kernel::FILTER_ENTRY_BYTES);
    let d = TestDaemon::with(|c| c.limits.event_filter_bytes_per_user = Some("1M".into()));
    victim_file(&d);
    let accounts = d.handle().kernel().accounts();
    let mut child = spawn_child(TEST, "hoarder", &d.socket(), &[], Some(SPY));
    let lines = wait_line(&mut child, "full");
    assert_eq!(lines.last().map(String::as_str), Some("full"), "{lines:?}");
    let used = accounts.user(SPY).used(Resource::EventFilterBytes);
    // Filled to within one filter of the limit; then one connection gave its five back.
    assert_eq!(used % FILTER, 0, "{used} bytes held");
    assert!(
        used <= LIMIT - 5 * FILTER && used + 6 * FILTER > LIMIT,
        "{used} bytes held"
    );
    done(&d);
    finish("hoarder", child);
    // The connections end asynchronously: their filters go with them.
    let until = Instant::now() + Duration::from_secs(10);
    while accounts.user(SPY).used(Resource::EventFilterBytes) != 0 {
        assert!(Instant::now() < until, "filters left after the hoarder went");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(accounts.total().used(Resource::EventFilterBytes), 0);
}
