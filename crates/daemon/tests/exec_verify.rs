//! `exec.verify` in the daemon: a module the verifier does not list is refused (EACCES) before
//! it runs, the second time from the daemon's cache of compiled programs too; a listed one runs
//! each time, and `vino ps` (the top answer `ps --json` prints) shows its digest, which is
//! `sha256sum`'s of the module file.

mod common;

use common::TestDaemon;
use std::path::Path;
use std::time::{Duration, Instant};
use vino_client::{ProgramEvent, ProgramSetup, RunningProgram};

fn copy_program() -> (Vec<u8>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.wasm");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wasi/tests/programs/copy.c");
    vino_sdk::build_program(&[src], &out, &Default::default()).unwrap();
    (std::fs::read(&out).unwrap(), dir)
}

fn setup(a: &[&str]) -> ProgramSetup {
    ProgramSetup::new(a.iter().map(|s| s.as_bytes().to_vec()).collect(), Vec::new())
}

fn status(mut p: RunningProgram) -> i32 {
    loop {
        if let ProgramEvent::Exited { code, .. } = p.next_event().unwrap() {
            return code;
        }
    }
}

fn sha256sum(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

#[test]
fn the_daemon_runs_listed_modules_only_and_shows_their_digest() {
    let d = TestDaemon::start();
    let (listed, dir) = copy_program();
    let digest = sha256sum(&dir.path().join("copy.wasm"));
    let mut unlisted = listed.clone();
    unlisted.extend_from_slice(&[0, 5, 4, b'p', b'a', b'd', b'x']);
    // The verifier, held by this connection's process (privileged: the tests run as root).
    let mut admin = d.client();
    let graft = vino_sdk::build_example("sha256_allow", &Default::default()).unwrap();
    if let Err(e) = admin.graft_load("exec.verify", &graft) {
        assert!(!common::is_root(), "{e}");
        return;
    }
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&digest[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let words: Vec<i64> = bytes
        .chunks(8)
        .map(|w| i64::from_le_bytes(w.try_into().unwrap()))
        .collect();
    admin.graft_call("exec.verify", "allow", &words).unwrap();

    for round in 0..2 {
        let e = d
            .client()
            .run_program(&unlisted, &setup(&["unlisted"]))
            .err()
            .unwrap_or_else(|| panic!("round {round}: an unlisted module ran"));
        let text = format!("{e:#}");
        assert!(
            text.contains("exec.verify (global policy) denied program unlisted"),
            "round {round}: {text}"
        );
        let p = d
            .client()
            .run_program(&listed, &setup(&["copy", "--sleep", "1"]))
            .unwrap();
        // While it runs, `ps` shows its digest.
        let deadline = Instant::now() + Duration::from_secs(10);
        let shown = loop {
            let top = d.client().top().unwrap();
            // Named as it starts, its digest shown once its module is verified.
            let row = top.processes.iter().find(|r| r.program.as_deref() == Some("copy"));
            if let Some(digest) = row.and_then(|r| r.digest.clone()) {
                break Some(digest);
            }
            assert!(Instant::now() < deadline, "the program never showed in ps");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(shown.as_deref(), Some(digest.as_str()));
        assert_eq!(status(p), 0, "round {round}");
    }
    assert_eq!(d.handle().daemon().programs_compiled(), 2, "each module compiled once");
    drop(admin);
    d.wait_processes(0);
}
