//! Idle polling of the mount: while programs make requests, one thread per CPU at idle
//! priority keeps the CPUs running; once they stop, the pollers sleep and spend nothing; they
//! end with the mount; a zero window turns them off. Over both transports. One test in its own
//! binary, so that no other test's mount has pollers running beside these. Needs root and
//! /dev/fuse.

use std::time::Duration;
use vino_fuse::{MountConfig, Transport};
use vino_idlepoll::Placement;

mod common;
use common::{Mounted, ring_available};

/// This process's idle pollers: (thread count, CPU time they have had in nanoseconds).
fn pollers() -> (usize, u64) {
    let mut n = 0;
    let mut ns = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("vino-idle-poll") {
            continue;
        }
        n += 1;
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        ns += stat.split(' ').next().and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    }
    (n, ns)
}

fn busy(m: &Mounted) {
    m.sh("mkdir -p d && for i in $(seq 1 300); do echo $i > d/f$i; cat d/f$i > /dev/null; done && rm -r d");
}

fn mounted(transport: Transport, idle_poll: Duration, placement: Placement) -> Mounted {
    Mounted::with_config(MountConfig {
        transport,
        idle_poll,
        idle_poll_placement: placement,
        ..MountConfig::default()
    })
}

/// Pollers run while requests come, sleep when they stop, and end with the mount.
fn polls_while_busy(transport: Transport, placement: Placement) {
    let m = mounted(transport, vino_fuse::IDLE_POLL, placement);
    let said = m.mount.as_ref().unwrap().idle_poll();
    let cpus = vino_idlepoll::allowed_cpus().len();
    if !said.ends_with("pollers") {
        assert!(said.starts_with("off ("), "{said}");
        eprintln!("skipped: idle polling is {said} here");
        return m.finish();
    }
    assert_eq!(said, format!("{cpus} pollers"));
    let (n, before) = pollers();
    assert_eq!(n, cpus, "one poller per CPU");
    busy(&m);
    let (_, during) = pollers();
    assert!(during > before, "the pollers ran while requests came");
    // Quiet: within the window (200 µs) every poller is asleep, and stays so.
    std::thread::sleep(Duration::from_millis(100));
    let (_, quiet) = pollers();
    std::thread::sleep(Duration::from_millis(500));
    let (_, later) = pollers();
    assert!(
        later - quiet < 5_000_000,
        "pollers spent {} µs of CPU in half a second with no request",
        (later - quiet) / 1000
    );
    m.finish();
    assert_eq!(pollers().0, 0, "the pollers end with the mount");
}

#[test]
fn idle_pollers_run_only_while_the_mount_is_busy() {
    // Over /dev/fuse only when asked for (they bring no gain there), over the ring by default.
    polls_while_busy(Transport::DevFuse, Placement::AnyGroup);
    if ring_available() {
        polls_while_busy(Transport::Uring, Placement::IdleGroup);
    }
    let m = mounted(Transport::DevFuse, vino_fuse::IDLE_POLL, Placement::IdleGroup);
    assert_eq!(m.mount.as_ref().unwrap().idle_poll(), "off (no gain over /dev/fuse)");
    assert_eq!(pollers().0, 0);
    m.finish();
    // Turned off: no pollers, and the mount serves as before.
    let m = mounted(Transport::Auto, Duration::ZERO, Placement::AnyGroup);
    assert_eq!(m.mount.as_ref().unwrap().idle_poll(), "off");
    busy(&m);
    assert_eq!(pollers().0, 0);
    m.finish();
}
