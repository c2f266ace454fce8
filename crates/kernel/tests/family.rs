//! The process tree, signals between processes, and pipes, as the kernel keeps them: children
//! and their statuses, zombies and who frees them, sessions, the user's process limit, who may
//! signal whom, and what a pipe charges.

mod common;

use std::sync::Arc;
use vino_kernel::account::{LimitsConfig, Resource};
use vino_kernel::signal::{self, Delivery, Disposition, MaskHow};
use vino_kernel::{Credentials, Errno, ExitStatus, Kernel, PIPE_CAPACITY, Waited};

fn kernel() -> Arc<Kernel> {
    common::small_kernel(4096, LimitsConfig::default())
}

#[test]
fn a_parent_waits_for_its_children_and_gets_their_statuses() {
    let k = kernel();
    let parent = k.spawn(Credentials::user(1000, 1000));
    let a = k.spawn_child(&parent).unwrap();
    let b = k.spawn_child(&parent).unwrap();
    assert_eq!(a.ppid(), parent.pid());
    assert_eq!(a.session(), parent.pid());
    assert_eq!(parent.wait_child(None).unwrap(), Waited::Running);
    k.exit_with(b.pid(), ExitStatus::Exited(3));
    k.exit_with(a.pid(), ExitStatus::Signaled(signal::SIGTERM));
    assert_eq!(parent.zombies(), 2);
    assert_eq!(
        parent.wait_child(Some(a.pid())).unwrap(),
        Waited::Child(a.pid(), ExitStatus::Signaled(15))
    );
    assert_eq!(
        parent.wait_child(None).unwrap(),
        Waited::Child(b.pid(), ExitStatus::Exited(3))
    );
    assert_eq!(parent.wait_child(None).unwrap_err().errno, Errno::Child);
    assert_eq!(ExitStatus::Exited(3).wait_status(), 3 << 8);
    assert_eq!(ExitStatus::Signaled(15).shell_status(), 143);
}

#[test]
fn children_hold_program_slots_until_reaped_so_a_spawn_loop_meets_eagain() {
    let limits = LimitsConfig {
        user: LimitsConfig::default().user.with(Resource::Programs, 3),
        ..LimitsConfig::default()
    };
    let k = common::small_kernel(4096, limits);
    let parent = k.spawn(Credentials::user(1000, 1000));
    let kids: Vec<_> = (0..3).map(|_| k.spawn_child(&parent).unwrap()).collect();
    let refused = k.spawn_child(&parent).err().expect("the fourth passes the limit");
    assert_eq!(refused.errno, Errno::Again);
    // An ended child not yet waited for still holds its slot (a zombie).
    k.exit(kids[0].pid());
    assert_eq!(k.spawn_child(&parent).err().map(|e| e.errno), Some(Errno::Again));
    parent.wait_child(Some(kids[0].pid())).unwrap();
    let again = k.spawn_child(&parent).expect("reaping gives the slot back");
    // Another user is not held up by this one's children.
    let other = k.spawn(Credentials::user(2000, 2000));
    k.spawn_child(&other).expect("another user's slots are its own");
    k.exit(again.pid());
}

#[test]
fn a_parent_ignoring_sigchld_leaves_no_zombies() {
    let k = kernel();
    let parent = k.spawn(Credentials::user(1000, 1000));
    parent.signal_action(signal::SIGCHLD, Disposition::Ignore).unwrap();
    let c = k.spawn_child(&parent).unwrap();
    k.exit(c.pid());
    assert_eq!(parent.zombies(), 0);
    assert_eq!(parent.wait_child(None).unwrap_err().errno, Errno::Child);
}

#[test]
fn orphans_go_to_the_session_leader_and_die_with_the_session() {
    let k = kernel();
    let leader = k.spawn(Credentials::user(1000, 1000));
    let middle = k.spawn_child(&leader).unwrap();
    let grandchild = k.spawn_child(&middle).unwrap();
    k.exit(middle.pid());
    assert_eq!(grandchild.ppid(), leader.pid());
    assert!(leader.children().contains(&grandchild.pid()));
    k.end_session(leader.pid());
    assert!(grandchild.killed());
    assert_eq!(grandchild.killed_by(), Some(signal::SIGKILL));
    // Another session is untouched.
    let other = k.spawn(Credentials::user(1000, 1000));
    k.end_session(leader.pid());
    assert!(!other.killed());
}

#[test]
fn signals_cross_users_only_for_the_privileged() {
    let k = kernel();
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(2000, 2000));
    let bob_cred = bob.credentials().clone();
    assert_eq!(
        k.signal(&bob_cred, alice.pid(), signal::SIGTERM).unwrap_err().errno,
        Errno::Perm
    );
    assert!(!alice.killed());
    assert_eq!(k.signal(&bob_cred, 999_999, 0).unwrap_err().errno, Errno::Srch);
    k.signal(&Credentials::root(), alice.pid(), signal::SIGTERM).unwrap();
    assert_eq!(alice.killed_by(), Some(signal::SIGTERM), "SIGTERM's default ends it");
}

#[test]
fn a_handled_signal_waits_for_its_runner_and_a_blocked_one_for_the_mask() {
    let k = kernel();
    let p = k.spawn(Credentials::user(1000, 1000));
    let cred = p.credentials().clone();
    p.signal_action(signal::SIGTERM, Disposition::Handle { restart: false })
        .unwrap();
    p.signal_mask(MaskHow::Block, signal::bit(signal::SIGUSR1));
    k.signal(&cred, p.pid(), signal::SIGUSR1).unwrap();
    assert!(!p.killed(), "blocked: pending");
    assert!(!p.interrupted());
    k.signal(&cred, p.pid(), signal::SIGTERM).unwrap();
    assert!(p.interrupted());
    assert_eq!(
        p.next_signal(),
        Some(Delivery::Handle {
            sig: signal::SIGTERM,
            restart: false
        })
    );
    p.signal_mask(MaskHow::Unblock, signal::bit(signal::SIGUSR1));
    assert_eq!(p.killed_by(), Some(signal::SIGUSR1), "unblocked, its default ends it");
}

#[test]
fn a_child_ending_sends_sigchld_to_a_parent_that_handles_it() {
    let k = kernel();
    let parent = k.spawn(Credentials::user(1000, 1000));
    parent
        .signal_action(signal::SIGCHLD, Disposition::Handle { restart: true })
        .unwrap();
    let c = k.spawn_child(&parent).unwrap();
    assert_eq!(c.blocked_signals(), 0);
    k.exit(c.pid());
    assert_eq!(
        parent.next_signal(),
        Some(Delivery::Handle {
            sig: signal::SIGCHLD,
            restart: true
        })
    );
}

#[test]
fn pipes_are_charged_to_their_maker_and_fifos_join_their_openers() {
    let limits = LimitsConfig {
        user: LimitsConfig::default()
            .user
            .with(Resource::PipeBytes, PIPE_CAPACITY as u64),
        ..LimitsConfig::default()
    };
    let k = common::small_kernel(4096, limits);
    let p = k.spawn(Credentials::user(1000, 1000));
    let (r, w) = p.pipe().unwrap();
    assert_eq!(p.pipe().err().map(|e| e.errno), Some(Errno::NFile));
    drop((r, w));
    let root = k.spawn(Credentials::root());
    root.mkdir_at(vino_kernel::At::Root, "/tmp", 0o1777).unwrap();
    drop(root);
    p.mknod_at(
        vino_kernel::At::Root,
        "/tmp/fifo",
        vino_kernel::FileType::Fifo,
        0o600,
        0,
    )
    .unwrap();
    let reader = p
        .open_fifo_at(vino_kernel::At::Root, "/tmp/fifo", vino_kernel::Side::Read)
        .unwrap();
    let writer = p
        .open_fifo_at(vino_kernel::At::Root, "/tmp/fifo", vino_kernel::Side::Write)
        .unwrap();
    assert!(Arc::ptr_eq(reader.pipe(), writer.pipe()));
    writer.write(b"through the fifo").unwrap();
    let mut buf = [0u8; 32];
    assert_eq!(reader.read(&mut buf).unwrap(), 16);
    let other = k.spawn(Credentials::user(2000, 2000));
    assert_eq!(
        other
            .open_fifo_at(vino_kernel::At::Root, "/tmp/fifo", vino_kernel::Side::Read)
            .err()
            .map(|e| e.errno),
        Some(Errno::Acces)
    );
}
