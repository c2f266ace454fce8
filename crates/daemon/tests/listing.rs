//! Directories listed in pages: a listing of a directory far bigger than a page comes whole in
//! answers that each stay under the page budget, a cookie stays valid while another user
//! creates, renames and unlinks names in the directory (every entry present throughout is given
//! exactly once), and the permission to list is checked for every page.
//!
//! The other user's churn runs as a child process of this binary (`child_role`) that takes uid
//! 1001 before it connects, and as a kernel process of that uid between pages; the tests are
//! skipped unless they run as root.

mod common;

use common::{TestDaemon, is_root, raw, spawn_child, wait_line};
use std::collections::BTreeMap;
use std::sync::Arc;
use vino_client::{Client, OpenFlags};
use vino_kernel::{At, Credentials, Errno, Process};
use vino_proto::{MAX_FRAME, PAGE_BYTES, Request, Response};

const TEST: &str = "child_role";
const BOB: u32 = 1001;
const SHARED: &str = "/shared";

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    match role.as_str() {
        "churn" => role_churn(),
        other => panic!("unknown role {other}"),
    }
}

/// Churns names of its own in the shared directory until killed.
fn role_churn() {
    let mut c = Client::connect_default().unwrap();
    println!("READY");
    let mut i = 0;
    loop {
        churn_step(&mut c, "b", i);
        i += 1;
    }
}

/// One step of churn through the socket: a name created and renamed, an older one unlinked.
fn churn_step(c: &mut Client, tag: &str, i: usize) {
    let (made, renamed) = churn_names(tag, i);
    let fd = c.open(&made, OpenFlags::create()).unwrap();
    c.close(fd).unwrap();
    c.rename(&made, &renamed).unwrap();
    if i >= KEPT {
        c.unlink(&churn_names(tag, i - KEPT).1).unwrap();
    }
}

/// Churned names a step keeps before unlinking them.
const KEPT: usize = 30;

/// The names step `i` of churn `tag` creates and renames to; of varied lengths, so that freed
/// records and new entries land anywhere in the directory's blocks.
fn churn_names(tag: &str, i: usize) -> (String, String) {
    let pad = "y".repeat(i * 37 % 200);
    (format!("{SHARED}/{tag}c{i}-{pad}"), format!("{SHARED}/{tag}r{i}-{pad}"))
}

/// As [`churn_step`], by a kernel process.
fn kernel_churn_step(p: &Process, i: usize) {
    let (made, renamed) = churn_names("k", i);
    let fd = p.open(&made, vino_kernel::OpenFlags::create()).unwrap();
    p.close(fd).unwrap();
    p.rename(&made, &renamed).unwrap();
    if i >= KEPT {
        p.unlink(&churn_names("k", i - KEPT).1).unwrap();
    }
}

/// `n` names of `len` bytes (at least 6).
fn long_names(n: usize, len: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:05}-{}", "x".repeat(len - 6))).collect()
}

/// A daemon with a shared directory (`/shared`, sticky, open to all) holding `names`.
fn shared_with(names: &[String]) -> (TestDaemon, Arc<Process>) {
    let d = TestDaemon::start();
    let root = d.handle().kernel().spawn(Credentials::root());
    root.mkdir(SHARED, 0o1777).unwrap();
    root.setattr_at(At::Root, SHARED, true, &mode(0o1777)).unwrap();
    for n in names {
        let fd = root
            .open(&format!("{SHARED}/{n}"), vino_kernel::OpenFlags::create())
            .unwrap();
        root.close(fd).unwrap();
    }
    (d, root)
}

fn mode(m: u16) -> vino_kernel::Attrs {
    vino_kernel::Attrs {
        mode: Some(m),
        ..Default::default()
    }
}

/// Every name of `lasting` is listed exactly once, and no name twice (churned names are never
/// reused).
fn assert_each_once(listed: &[Vec<u8>], lasting: &[String]) {
    let mut count: BTreeMap<&[u8], usize> = BTreeMap::new();
    for n in listed {
        *count.entry(n).or_default() += 1;
    }
    let twice: Vec<_> = count
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(n, _)| String::from_utf8_lossy(n))
        .collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    let missing = lasting.iter().filter(|n| !count.contains_key(n.as_bytes())).count();
    assert_eq!(missing, 0, "{missing} of {} lasting entries not listed", lasting.len());
}

#[test]
fn a_listing_under_another_users_churn_gives_every_lasting_entry_once() {
    if !is_root() {
        eprintln!("skipped: needs root to run the churn as another user");
        return;
    }
    let lasting = long_names(2000, 120);
    let (d, _root) = shared_with(&lasting);
    let mut churner = spawn_child(TEST, "churn", &d.socket(), &[], Some(BOB));
    wait_line(&mut churner, "READY");
    let bob = d.handle().kernel().spawn(Credentials::user(BOB, BOB));
    let mut c = d.client();
    let mut step = 0;
    for _ in 0..3 {
        // Page by page, the other user's kernel process churning between pages too.
        let (mut listed, mut cookie, mut pages) = (Vec::new(), 0, 0);
        loop {
            let (entries, next) = c.readdir_page(SHARED, cookie).unwrap();
            listed.extend(entries.into_iter().map(|e| e.name));
            pages += 1;
            for _ in 0..5 {
                kernel_churn_step(&bob, step);
                step += 1;
            }
            match next {
                Some(n) => cookie = n,
                None => break,
            }
        }
        assert!(pages > 3, "the directory spans pages ({pages})");
        assert_each_once(&listed, &lasting);
        // And whole, as the client iterates.
        let names: Vec<Vec<u8>> = c.readdir(SHARED).unwrap().into_iter().map(|e| e.name).collect();
        assert_each_once(&names, &lasting);
    }
    churner.kill().unwrap();
    churner.wait().unwrap();
}

#[test]
fn a_directory_of_many_pages_lists_whole_in_frames_under_the_page_budget() {
    let names = long_names(3000, 255);
    let (d, _root) = shared_with(&names);
    // Raw, to see each frame the daemon sends.
    let mut s = raw(&d.socket());
    let (mut listed, mut cookie, mut pages) = (Vec::new(), 0, 0);
    loop {
        let req = Request::Readdir {
            path: SHARED.into(),
            cookie,
        };
        vino_proto::write_frame(&mut s, &req).unwrap();
        let mut buf = Vec::new();
        vino_proto::read_frame(&mut s, &mut buf, MAX_FRAME).unwrap();
        assert!(buf.len() <= PAGE_BYTES, "a frame of {} bytes", buf.len());
        let Response::Entries { entries, next } = vino_proto::decode(&buf).unwrap() else {
            panic!("not a page");
        };
        listed.extend(entries.into_iter().map(|e| e.name));
        pages += 1;
        match next {
            Some(n) => cookie = n,
            None => break,
        }
    }
    assert!(pages >= 3000 * 255 / PAGE_BYTES, "{pages} pages");
    assert_each_once(&listed, &names);
    assert_eq!(listed.len(), names.len());
    // Every way the client lists it iterates its pages.
    let mut c = d.client();
    assert_eq!(c.readdir(SHARED).unwrap().len(), names.len());
    assert_eq!(c.readdir_at(None, SHARED).unwrap().len(), names.len());
    let dir = c.open(SHARED, OpenFlags::read_only()).unwrap();
    assert_eq!(c.readdir_fd(dir).unwrap().len(), names.len());
    // A cookie past the end is an empty last page.
    assert_eq!(c.readdir_page(SHARED, u64::MAX).unwrap(), (vec![], None));
}

#[test]
fn the_permission_to_list_is_checked_for_every_page() {
    let names = long_names(1000, 200);
    let (d, root) = shared_with(&names);
    let alice = d.handle().kernel().spawn(Credentials::user(1000, 1000));
    let first = alice.readdir_page_at(At::Root, SHARED, 0, PAGE_BYTES).unwrap();
    let next = first.next.expect("more than a page");
    root.setattr_at(At::Root, SHARED, true, &mode(0o1770)).unwrap();
    let refused = alice.readdir_page_at(At::Root, SHARED, next, PAGE_BYTES).unwrap_err();
    assert_eq!(refused.errno, Errno::Acces);
    // Through a descriptor opened while it could, too.
    root.setattr_at(At::Root, SHARED, true, &mode(0o1777)).unwrap();
    let fd = alice.open(SHARED, vino_kernel::OpenFlags::read_only()).unwrap();
    let first = alice.readdir_page_fd(fd, 0, PAGE_BYTES).unwrap();
    root.setattr_at(At::Root, SHARED, true, &mode(0o1770)).unwrap();
    let refused = alice.readdir_page_fd(fd, first.next.unwrap(), PAGE_BYTES).unwrap_err();
    assert_eq!(refused.errno, Errno::Acces);
    alice.close(fd).unwrap();
}
