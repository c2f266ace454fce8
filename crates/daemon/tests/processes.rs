//! Real OS processes sharing one daemon: each connection a kernel process with the client's
//! credentials; permissions enforced; everything of a client released when it is killed.

mod common;

use common::{TestDaemon, graft, is_root, spawn_child, wait_line};
use std::time::{Duration, Instant};
use vino_client::{Client, OpenFlags, errno};

const TEST: &str = "child_role";

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let result = match role.as_str() {
        "writer" => writer(),
        "refused" => refused(),
        "worker" => worker(),
        other => Err(format!("unknown role {other}")),
    };
    if let Err(e) = result {
        println!("FAILED: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// Writes its own file and reads it back.
fn writer() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    let path = format!("/w{}", env("VINO_TEST_N"));
    let body = format!("written by {}\n", std::process::id()).repeat(100);
    let fd = c.open(&path, OpenFlags::create()).map_err(|e| e.to_string())?;
    c.write(fd, body.as_bytes()).map_err(|e| e.to_string())?;
    let mut back = vec![0u8; body.len()];
    let n = c.pread(fd, &mut back, 0).map_err(|e| e.to_string())?;
    if back[..n] != *body.as_bytes() {
        return Err("read back something else".into());
    }
    c.close(fd).map_err(|e| e.to_string())
}

/// Run as an ordinary user: expects every privileged or foreign thing refused.
fn refused() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    if c.privileged() {
        return Err("an ordinary user was made privileged".into());
    }
    let expect = |what: &str, r: Result<(), vino_client::ClientError>, want: i32| match r {
        Err(e) if e.errno == want => Ok(()),
        Err(e) => Err(format!("{what}: errno {} ({e}), expected {want}", e.errno)),
        Ok(()) => Err(format!("{what} was allowed")),
    };
    expect(
        "opening root's 0600 file",
        c.open("/secret", OpenFlags::read_only()).map(|_| ()),
        errno::EACCES,
    )?;
    let wasm = std::fs::read(env("VINO_TEST_FIFO")).map_err(|e| e.to_string())?;
    expect(
        "loading disk.pick_request",
        c.graft_load("disk.pick_request", &wasm).map(|_| ()),
        errno::EPERM,
    )?;
    let ra = std::fs::read(env("VINO_TEST_RA")).map_err(|e| e.to_string())?;
    let bind = c.graft_load_file("/secret", "file.compute_ra", &ra).map(|_| ());
    expect("binding a graft to root's file", bind, errno::EPERM)?;
    println!("REFUSED");
    Ok(())
}

/// Opens files, loads a graft, says READY and keeps working until killed.
fn worker() -> Result<(), String> {
    let mut c = Client::connect_default().map_err(|e| e.to_string())?;
    let ra = std::fs::read(env("VINO_TEST_RA")).map_err(|e| e.to_string())?;
    let fd = c.open("/worker", OpenFlags::create()).map_err(|e| e.to_string())?;
    let _second = c.open("/worker2", OpenFlags::create()).map_err(|e| e.to_string())?;
    c.graft_load(&format!("file.compute_ra/{fd}"), &ra)
        .map_err(|e| e.to_string())?;
    println!("READY {}", c.pid());
    let block = [7u8; 4096];
    let mut buf = [0u8; 4096];
    loop {
        c.write(fd, &block).map_err(|e| e.to_string())?;
        c.pread(fd, &mut buf, 0).map_err(|e| e.to_string())?;
    }
}

#[test]
fn several_processes_share_one_daemon() {
    let d = TestDaemon::start();
    let mut children: Vec<_> = (0..6)
        .map(|n| spawn_child(TEST, "writer", &d.socket(), &[("VINO_TEST_N", &n.to_string())], None))
        .collect();
    for c in &mut children {
        assert!(c.wait().unwrap().success(), "a writer failed");
    }
    let mut c = d.client();
    for n in 0..6 {
        let st = c.stat(&format!("/w{n}")).unwrap();
        assert!(st.size > 0);
        // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
        assert_eq!(st.uid, unsafe { libc::geteuid() });
    }
    drop(c);
    d.wait_processes(0);
}

#[test]
fn an_ordinary_user_is_refused_what_is_not_theirs() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    let d = TestDaemon::start();
    let mut root = d.client();
    assert!(root.privileged());
    let fd = root
        .open(
            "/secret",
            OpenFlags {
                mode: 0o600,
                ..OpenFlags::create()
            },
        )
        .unwrap();
    root.write(fd, b"root only").unwrap();
    root.close(fd).unwrap();
    let (_, fifo) = graft("fifo");
    let (_, ra) = graft("sequential_ra");
    let env = [
        ("VINO_TEST_FIFO", fifo.to_str().unwrap()),
        ("VINO_TEST_RA", ra.to_str().unwrap()),
    ];
    let mut child = spawn_child(TEST, "refused", &d.socket(), &env, Some(1000));
    wait_line(&mut child, "REFUSED");
    assert!(child.wait().unwrap().success());
    // Root may do what the user was refused.
    root.graft_load("disk.pick_request", &graft("fifo").0).unwrap();
    root.graft_unload("disk.pick_request").unwrap();
}

#[test]
fn a_killed_client_leaves_nothing_behind() {
    let d = TestDaemon::start();
    let (_, ra) = graft("sequential_ra");
    let mut child = spawn_child(
        TEST,
        "worker",
        &d.socket(),
        &[("VINO_TEST_RA", ra.to_str().unwrap())],
        None,
    );
    let lines = wait_line(&mut child, "READY");
    let pid: u64 = lines
        .last()
        .unwrap()
        .trim()
        .trim_start_matches("READY ")
        .parse()
        .unwrap();
    let mut c = d.client();
    let top = c.top().unwrap();
    let row = top
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .expect("the worker is in top");
    assert_eq!(row.open_files, 2);
    assert_eq!(row.grafts, 1);
    assert_eq!(row.host_pid, child.id());
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let top = c.top().unwrap();
        if top.processes.iter().all(|p| p.pid != pid) {
            assert!(
                top.grafts.iter().all(|g| g.owner != pid),
                "a graft of the dead process is bound"
            );
            break;
        }
        assert!(Instant::now() < until, "the killed process is still in top");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(d.handle().kernel().process(pid).is_none());
    // Its files are closed: unlinking frees them at once (no open file keeps them).
    c.unlink("/worker").unwrap();
    assert!(!d.handle().kernel().processes().iter().any(|p| p.pid() == pid));
}

#[test]
fn a_file_wide_graft_reaches_every_later_open_and_goes_with_its_binder() {
    let d = TestDaemon::start();
    let (ra, _) = graft("sequential_ra");
    let mut owner = d.client();
    let fd = owner.open("/data", OpenFlags::create()).unwrap();
    owner.write(fd, &vec![1u8; 256 << 10]).unwrap();
    owner.close(fd).unwrap();
    owner.graft_load_file("/data", "file.compute_ra", &ra).unwrap();
    assert_eq!(
        owner
            .graft_load_file("/data", "disk.pick_request", &ra)
            .unwrap_err()
            .errno,
        errno::EINVAL,
        "only per-file graftpoints can be bound to a file"
    );
    let mut reader = d.client();
    let rfd = reader.open("/data", OpenFlags::read_only()).unwrap();
    let slot = reader.graft_stats(&format!("file.compute_ra/{rfd}")).unwrap();
    assert_eq!(slot.policy, "wasm");
    assert_eq!(slot.graft.as_ref().unwrap().owner, owner.pid());
    let mut buf = vec![0u8; 4096];
    for i in 0..16 {
        reader.pread(rfd, &mut buf, i * 4096).unwrap();
    }
    let top = reader.top().unwrap();
    let row = top
        .grafts
        .iter()
        .find(|g| g.scope == "file /data")
        .expect("the file graft is listed");
    assert!(row.invocations > 0, "the reader's reads ran the file's graft");
    let owner_row = top.processes.iter().find(|p| p.pid == owner.pid()).unwrap();
    assert_eq!(owner_row.grafts, 1);
    assert!(
        owner_row.graft_invocations > 0,
        "the graft's work is charged to its binder"
    );
    // The binder leaves: the graft is unloaded from the reader's descriptor, later opens get none.
    drop(owner);
    let until = Instant::now() + Duration::from_secs(10);
    while !d.handle().kernel().file_grafts().is_empty() {
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        reader.graft_stats(&format!("file.compute_ra/{rfd}")).unwrap().policy,
        "default"
    );
    let again = reader.open("/data", OpenFlags::read_only()).unwrap();
    assert_eq!(
        reader.graft_stats(&format!("file.compute_ra/{again}")).unwrap().policy,
        "default"
    );
}

#[test]
fn a_grafts_changes_to_kernel_state_are_counted_over_the_protocol() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let fd = c.open("/data", OpenFlags::create()).unwrap();
    c.write(fd, &vec![1u8; 64 << 10]).unwrap();
    let point = format!("file.compute_ra/{fd}");
    c.graft_load(&point, &vino_sdk::change_then_fail("file.compute_ra").unwrap())
        .unwrap();
    // Each read asks for the file's last block to be read ahead; the failing call's request is
    // dropped, the committed one's made.
    c.graft_call(&point, "set", &[60 << 10, 4096]).unwrap();
    let mut buf = vec![0u8; 4096];
    c.graft_call(&point, "fail", &[1]).unwrap();
    c.pread(fd, &mut buf, 0).unwrap();
    c.graft_call(&point, "fail", &[0]).unwrap();
    c.pread(fd, &mut buf, 8192).unwrap();
    let stats = c.graft_stats(&point).unwrap().stats.unwrap();
    assert_eq!((stats.invocations, stats.aborts, stats.changes), (2, 1, 1));
}
