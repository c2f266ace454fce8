//! `exec.verify` on the routes a program starts by: a run by the runner (`Program::run`, as
//! `vino run` on an image does) and a spawn from inside a program, the second spawn of a module
//! coming from its user's cache of compiled programs. A listed module runs by both; an unlisted
//! one by neither, the spawn failing with EACCES.

mod common;

use std::path::Path;
use std::sync::Arc;
use vino_kernel::{Credentials, Errno, Kernel, OpenFlags};
use vino_wasi::{Program, ProgramLimits, RunError, Setup};

fn build(name: &str) -> Vec<u8> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.wasm"));
    vino_sdk::build_program(&[src], &out, &Default::default()).unwrap();
    std::fs::read(out).unwrap()
}

fn install(k: &Arc<Kernel>, path: &str, wasm: &[u8]) {
    let root = k.spawn(Credentials::root());
    let _ = root.mkdir("/bin", 0o755);
    let fd = root.open(path, OpenFlags::create()).unwrap();
    let mut done = 0;
    while done < wasm.len() {
        done += root.write(fd, &wasm[done..]).unwrap();
    }
    root.close(fd).unwrap();
    root.chmod(path, 0o755).unwrap();
    k.exit(root.pid());
}

/// The words `vino_ctl_allow` takes for `wasm`'s SHA-256.
fn words(wasm: &[u8]) -> Vec<i64> {
    use sha2::Digest;
    let d: [u8; 32] = sha2::Sha256::digest(wasm).into();
    d.chunks(8).map(|w| i64::from_le_bytes(w.try_into().unwrap())).collect()
}

#[test]
fn an_unlisted_module_runs_by_no_route_and_a_listed_one_by_every_route() {
    let (_dev, k) = common::boot();
    let listed = build("execspawn");
    // The same program with a custom section more: other bytes, another digest.
    let mut unlisted = listed.clone();
    unlisted.extend_from_slice(&[0, 5, 4, b'p', b'a', b'd', b'x']);
    install(&k, "/bin/a", &listed);
    install(&k, "/bin/b", &unlisted);
    // The global verifier, held by a privileged process for the whole test.
    let root = k.spawn(Credentials::root());
    let graft = vino_sdk::build_example("sha256_allow", &Default::default()).unwrap();
    root.graft_load("exec.verify", &graft).unwrap();
    root.graft_call("exec.verify", "allow", &words(&listed)).unwrap();

    let user = Credentials::user(1000, 1000);
    let run = |wasm: &[u8], args: &[&str]| {
        let p = Program::compile(wasm, ProgramLimits::default()).unwrap();
        let (stdio, out, err) = common::stdio(Vec::new());
        let setup = Setup::new(args.iter().map(|a| a.as_bytes().to_vec()).collect(), Vec::new());
        let exit = p.run(&k, user.clone(), setup, stdio, &p.kill_switch());
        (exit, out.text(), err.text())
    };
    // The runner's route.
    match run(&unlisted, &["/bin/b"]).0 {
        Err(RunError::Refused(e)) => {
            assert_eq!(e.errno, Errno::Acces);
            assert!(e.message.contains("denied program /bin/b"), "{}", e.message);
        }
        other => panic!("an unlisted module ran: {other:?}"),
    }
    // Spawns, each module twice (the second from the cache).
    let (exit, out, err) = run(&listed, &["/bin/a", "/bin/a", "/bin/b"]);
    assert_eq!(exit.unwrap(), vino_wasi::Exit::Code(0), "{err}");
    // EACCES is 2 in wasi-libc.
    assert_eq!(
        out, "/bin/a ok 0\n/bin/a ok 0\n/bin/b errno 2\n/bin/b errno 2\n",
        "{err}"
    );
    // The verifier gone, the unlisted module spawns too.
    root.graft_unload("exec.verify").unwrap();
    let (_, out, _) = run(&listed, &["/bin/a", "/bin/b"]);
    assert_eq!(out, "/bin/b ok 0\n/bin/b ok 0\n");
}
