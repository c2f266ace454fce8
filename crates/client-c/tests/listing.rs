//! Listings through the C and Python libraries, which read a directory page by page: a
//! directory of many pages lists whole, and while another user (uid 1001, a kernel process of
//! the daemon) creates, renames and unlinks names in it, every entry present throughout is
//! listed exactly once.

mod common;

use common::{TestDaemon, compile_c, crate_dir, lib_dir, run_ok, workspace_dir};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use vino_kernel::{At, Attrs, Credentials, OpenFlags, Process};

const SHARED: &str = "/shared";
const ROUNDS: usize = 3;

/// Names of 200 bytes: a page holds some 250 of them.
fn lasting() -> Vec<String> {
    (0..2000).map(|i| format!("{i:05}-{}", "x".repeat(194))).collect()
}

/// A daemon with `/shared` open to all, holding the lasting names.
fn shared() -> (TestDaemon, Vec<String>) {
    let d = TestDaemon::start();
    let root = kernel_process(&d, Credentials::root());
    root.mkdir(SHARED, 0o1777).unwrap();
    let mode = Attrs {
        mode: Some(0o1777),
        ..Default::default()
    };
    root.setattr_at(At::Root, SHARED, true, &mode).unwrap();
    let names = lasting();
    for n in &names {
        root.close(root.open(&format!("{SHARED}/{n}"), OpenFlags::create()).unwrap())
            .unwrap();
    }
    (d, names)
}

fn kernel_process(d: &TestDaemon, cred: Credentials) -> Arc<Process> {
    d.handle.as_ref().unwrap().kernel().spawn(cred)
}

/// Another user churning names of its own in `/shared` until `stop`; counts its steps.
struct Churn {
    stop: Arc<AtomicBool>,
    steps: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Churn {
    fn start(d: &TestDaemon) -> Churn {
        let bob = kernel_process(d, Credentials::user(1001, 1001));
        let (stop, steps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (s, n) = (stop.clone(), steps.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                churn_step(&bob, n.fetch_add(1, Ordering::Relaxed));
            }
        });
        Churn { stop, steps, thread }
    }

    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.steps.load(Ordering::Relaxed)
    }
}

/// A name created and renamed, one made 30 steps before unlinked; of varied lengths, so that
/// freed records and new entries land anywhere in the directory.
fn churn_step(p: &Process, i: usize) {
    let names = |i: usize| {
        let pad = "y".repeat(i * 37 % 200);
        (format!("{SHARED}/c{i}-{pad}"), format!("{SHARED}/r{i}-{pad}"))
    };
    let (made, renamed) = names(i);
    p.close(p.open(&made, OpenFlags::create()).unwrap()).unwrap();
    p.rename(&made, &renamed).unwrap();
    if i >= 30 {
        p.unlink(&names(i - 30).1).unwrap();
    }
}

/// Checks each listing a program printed (names, then `end`): every lasting name once, no
/// name twice.
fn check_listings(stdout: &[u8], lasting: &[String]) {
    let text = String::from_utf8_lossy(stdout);
    let listings: Vec<&str> = text.split_terminator("end\n").collect();
    assert_eq!(listings.len(), ROUNDS, "{text}");
    for l in listings {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for n in l.lines() {
            *count.entry(n).or_default() += 1;
        }
        let twice: Vec<_> = count.iter().filter(|(_, c)| **c > 1).collect();
        assert!(twice.is_empty(), "listed more than once: {twice:?}");
        let missing = lasting.iter().filter(|n| !count.contains_key(n.as_str())).count();
        assert_eq!(missing, 0, "{missing} lasting names not listed");
    }
}

/// Runs `cmd` (which lists `/shared` ROUNDS times) under churn; its output checked.
fn list_under_churn(d: &TestDaemon, lasting: &[String], cmd: &mut Command) {
    let churn = Churn::start(d);
    let out = run_ok(cmd, &d.socket());
    let steps = churn.stop();
    assert!(steps > 0, "the directory changed during the listings");
    check_listings(&out.stdout, lasting);
}

#[test]
fn the_c_library_lists_a_directory_of_many_pages_under_churn() {
    let (d, lasting) = shared();
    let exe = d.dir.path().join("list");
    compile_c(&[&crate_dir().join("tests/c/list.c")], &exe);
    list_under_churn(&d, &lasting, Command::new(&exe).args([SHARED, &ROUNDS.to_string()]));
    d.stop();
}

#[test]
fn the_python_library_lists_a_directory_of_many_pages_under_churn() {
    let (d, lasting) = shared();
    let script = format!(
        "import vino\nc = vino.Client()\nfor _ in range({ROUNDS}):\n    \
         for e in c.readdir('{SHARED}'):\n        print(e.name)\n    print('end')\n"
    );
    let mut cmd = Command::new("python3");
    cmd.current_dir(d.dir.path())
        .env("VINO_LIB", lib_dir().join("libvino.so"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONPATH", workspace_dir().join("python"))
        .args(["-c", &script]);
    list_under_churn(&d, &lasting, &mut cmd);
    d.stop();
}
