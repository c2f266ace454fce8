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
