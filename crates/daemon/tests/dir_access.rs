//! `dir.access` through the daemon's socket: a client binds its directory's access graft on a
//! descriptor of the directory (`dir.access/<fd>`), its refusals reach the client as `EACCES`,
//! the binding is listed with the client's grafts and outlives the connection that made it, and
//! an unload gives POSIX alone the say again.

mod common;

use common::TestDaemon;
use vino_client::OpenFlags;

/// Refuses every operation on the name `x`.
const REFUSE_X: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (func (export "dir_access") (param i32 i32 i32 i32 i64 i32 i64) (result i32)
    (i32.and (i32.eq (local.get 5) (i32.const 1)) (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 120)))))"#;

#[test]
fn a_client_binds_its_directory_s_access_graft_over_the_socket() {
    let d = TestDaemon::start();
    let mut c = d.client();
    c.mkdir("/d", 0o755).unwrap();
    let fd = c.open("/d", OpenFlags::directory()).unwrap();
    c.graft_load(&format!("dir.access/{fd}"), REFUSE_X.as_bytes()).unwrap();
    let listed = c.graft_list().unwrap();
    assert!(
        listed
            .iter()
            .any(|s| s.point.starts_with("dir.access/inode") && s.graft.is_some()),
        "{listed:?}"
    );
    assert_eq!(c.open("/d/x", OpenFlags::create()).unwrap_err().errno, libc::EACCES);
    let y = c.open("/d/y", OpenFlags::create()).unwrap();
    c.close(y).unwrap();
    // The binding is the directory's, not the connection's: another connection meets it too.
    drop(c);
    let mut other = d.client();
    assert_eq!(other.stat("/d/x").unwrap_err().errno, libc::EACCES);
    assert!(other.stat("/d/y").is_ok());
    let fd = other.open("/d", OpenFlags::directory()).unwrap();
    other.graft_unload(&format!("dir.access/{fd}")).unwrap();
    assert_eq!(other.stat("/d/x").unwrap_err().errno, libc::ENOENT);
    // A descriptor of a file is no directory to bind to.
    let file = other.open("/d/y", OpenFlags::read_only()).unwrap();
    assert_eq!(
        other
            .graft_load(&format!("dir.access/{file}"), REFUSE_X.as_bytes())
            .unwrap_err()
            .errno,
        libc::ENOTDIR
    );
}

/// A client that binds and goes away is let go: the binding keeps nothing of its connection,
/// so the daemon closes the connection's socket and the client reads its end.
#[test]
fn a_binding_does_not_hold_the_connection_that_made_it_open() {
    use std::io::Read;
    use vino_proto::{Request, Response};
    let d = TestDaemon::start();
    let mut s = common::raw(&d.socket());
    let mut ask = |r: Request| {
        vino_proto::write_frame(&mut s, &r).unwrap();
        common::answer(&mut s).expect("an answer")
    };
    assert!(matches!(
        ask(Request::Mkdir {
            path: "/b".into(),
            mode: 0o755
        }),
        Response::Ok
    ));
    let fd = match ask(Request::Open {
        path: "/b".into(),
        flags: OpenFlags::directory(),
    }) {
        Response::Fd(fd) => fd,
        other => panic!("{other:?}"),
    };
    let bound = ask(Request::GraftLoad {
        point: format!("dir.access/{fd}"),
        wasm: REFUSE_X.as_bytes().to_vec(),
    });
    assert!(matches!(bound, Response::Graft(_)), "{bound:?}");
    s.shutdown(std::net::Shutdown::Write).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("the daemon closes the connection");
    assert!(rest.is_empty());
    // The binding itself stays.
    assert_eq!(d.client().stat("/b/x").unwrap_err().errno, libc::EACCES);
}
