//! `net.pick_packet` and the rated way out, on two stacks joined by a wire and one manual clock:
//! A's host link carries 2 MB a second. Users share it by weight whatever number of connections
//! each opens; a user's own graft sends its interactive packets before its own bulk; the link's
//! graft is the privileged one's order; hostile grafts leave the default in charge and the other
//! users untouched.

use vino_graft::{Access, PolicyKind, Runtime};
use vino_net::testbed::shared_link::{BULKY, Load, OTHER, PING, RATE, Users, run, run_load};

fn example(name: &str) -> Vec<u8> {
    vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).expect("the example builds")
}

#[test]
fn users_share_the_rated_link_by_weight_whatever_connections_each_opens() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    let even = run(&users, &[(BULKY, 4), (OTHER, 1)], false, 4);
    let ratio = even.share(BULKY) / even.share(OTHER);
    assert!(
        (0.8..1.25).contains(&ratio),
        "four connections against one, even weights: {even:?}"
    );
    let total = even.share(BULKY) + even.share(OTHER);
    assert!(
        total > 0.8 * 3.0 * RATE as f64 && total < 3.0 * RATE as f64,
        "the link is used and its rate holds: {total} bytes in 3 s"
    );
    users.weights.lock().insert(OTHER, 300);
    let weighted = run(&users, &[(BULKY, 4), (OTHER, 1)], false, 4);
    let ratio = weighted.share(OTHER) / weighted.share(BULKY);
    assert!((2.4..3.75).contains(&ratio), "tickets 300 against 100: {weighted:?}");
}

#[test]
fn a_users_graft_sends_its_interactive_packets_before_its_own_bulk() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    // Eight bulk connections keep the user's queue full; the ping waits behind all of them.
    let load = [(BULKY, 8), (OTHER, 1)];
    let fifo = run(&users, &load, true, 3).median_ping();
    let pick = users.pick(&rt, BULKY);
    pick.slot
        .load(&example("port_priority"), vino_graft::Owner::process(u64::from(BULKY)))
        .unwrap();
    assert_eq!(pick.slot.call_control("set_port", &[i64::from(PING), 1]).unwrap(), 0);
    let seen = run(&users, &load, true, 3);
    let graft = seen.median_ping();
    assert!(
        graft * 4 < fifo,
        "the ping's median wait: {graft} µs with the graft, {fifo} µs first in first out"
    );
    let stats = pick.slot.stats().unwrap();
    assert!(stats.invocations > 100 && stats.failures == 0, "{stats:?}");
    let ratio = seen.share(BULKY) / seen.share(OTHER);
    assert!(
        (0.8..1.25).contains(&ratio),
        "the graft took no more of the link: {seen:?}"
    );
}

/// Answers an index past the candidates.
const OUT_OF_RANGE: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param i32 i32) (result i32) (i32.const 99)))"#;

const LOOP: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param i32 i32) (result i32) (loop (br 0)) (i32.const 0)))"#;

/// Writes into its own memory, then traps.
const TRAP: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param i32 i32) (result i32)
    (i32.store (i32.const 0) (i32.const -1))
    unreachable))"#;

#[test]
fn a_failing_graft_leaves_the_default_in_charge_and_other_users_their_share() {
    let rt = Runtime::default();
    for (name, wat) in [("out of range", OUT_OF_RANGE), ("loop", LOOP), ("trap", TRAP)] {
        let users = Users::new(&rt);
        let pick = users.pick(&rt, BULKY);
        pick.slot
            .load(
                &wat::parse_str(wat).unwrap(),
                vino_graft::Owner::process(u64::from(BULKY)),
            )
            .unwrap();
        let seen = run(&users, &[(BULKY, 2), (OTHER, 1)], true, 3);
        let ratio = seen.share(BULKY) / seen.share(OTHER);
        assert!((0.8..1.25).contains(&ratio), "{name}: {seen:?}");
        assert!(
            seen.pings.len() > 150,
            "{name}: the pings went on: {}",
            seen.pings.len()
        );
        assert_eq!(
            pick.slot.policy_kind(),
            PolicyKind::Default,
            "{name}: unloaded after failing"
        );
        let stats = pick.slot.stats();
        assert!(stats.is_none(), "{name}: nothing bound: {stats:?}");
    }
}

/// The link's order as a privileged owner may set it: user 2000's packet whenever it has one.
const PREFER_OTHER: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "net_pick_packet") (param $n i32) (param i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.eq (i32.load (i32.add (i32.const 1040) (i32.mul (local.get $i) (i32.const 24))))
                    (i32.const 2000))
          (then (return (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0)))"#;

#[test]
fn the_links_graft_orders_users_as_its_privileged_owner_says() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    assert_eq!(users.link.access(), Access::Privileged);
    users
        .link
        .load(&wat::parse_str(PREFER_OTHER).unwrap(), vino_graft::Owner::process(1))
        .unwrap();
    let seen = run(&users, &[(BULKY, 4), (OTHER, 1)], false, 3);
    assert!(
        seen.share(OTHER) > 4.0 * seen.share(BULKY),
        "the link's graft, not the users' weights, decides: {seen:?}"
    );
    let stats = users.link.stats().unwrap();
    assert!(stats.invocations > 100 && stats.failures == 0, "{stats:?}");
}

#[test]
fn a_datagram_flood_takes_its_users_share_and_no_more() {
    let rt = Runtime::default();
    let users = Users::new(&rt);
    let load = Load {
        bulk: &[(OTHER, 1)],
        ping: false,
        flood: Some(BULKY),
        seconds: 3,
    };
    let seen = run_load(&users, &load);
    let flooded = seen.flooded.get(&BULKY).copied().unwrap_or(0) as f64;
    let ratio = seen.share(OTHER) / flooded;
    assert!(
        (0.8..1.25).contains(&ratio),
        "the flood got half the link, the connection the other half: {seen:?}"
    );
    let total = seen.share(OTHER) + flooded;
    assert!(
        total > 0.8 * 2.0 * RATE as f64,
        "the link was used: {total} bytes in 2 s"
    );
}
