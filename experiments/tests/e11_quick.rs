//! E11 at CI size: every part runs and says what the scheduler did. Shares and donation are
//! behaviour (who got the CPU), checked loosely; timings are not checked.

use vino_experiments::e11_sched::{SchedOptions, run};

#[test]
fn e11_shares_donation_and_costs_in_one_run() {
    let opts = SchedOptions {
        share_secs: 0.6,
        donation_secs: 0.4,
        switches: 2_000,
    };
    let r = run(&opts, &mut |_| {}).unwrap();
    assert_eq!(r.shares.len(), 6, "three users on one and on two workers");
    for s in &r.shares {
        assert!(
            s.error < 0.25,
            "tickets {} on {} worker(s): share {}",
            s.tickets,
            s.workers,
            s.share
        );
    }
    assert_eq!(r.donation.len(), 2);
    assert!(r.donation.iter().all(|d| d.requests_per_s > 0.0));
    assert!(
        r.donation_gain > 1.1,
        "a client's turns given to its server: gain {}",
        r.donation_gain
    );
    assert!(
        r.costs.len() >= 6 && r.costs.iter().all(|c| c.ns > 0.0),
        "{:?}",
        r.costs
    );
    let tables = r.tables();
    assert_eq!(r.multimedia.len(), 2);
    assert!(r.multimedia.iter().all(|m| m.audio_periods > 0));
    assert_eq!(tables.len(), 4);
}
