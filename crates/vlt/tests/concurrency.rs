//! Concurrent transactions: a money-moving workload that must conserve the total and stay
//! isolated, a lock hog that must be told to abort, and wait-for cycles that must be broken.
//!
//! Timing is never asserted tightly: only that things happen, within generous bounds.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use vino_vlt::{LockMode, Txn, Vlt, VltConfig, VltError};

/// xorshift64*: a small deterministic generator (seeded per thread).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Short back-off after a failed attempt, so that the same pair does not collide again at once.
fn back_off(rng: &mut Rng) {
    for _ in 0..rng.below(4) {
        thread::yield_now();
    }
    if rng.chance(30) {
        thread::sleep(Duration::from_micros(50 + rng.below(500)));
    }
}

const ACCOUNTS: usize = 8;
const START: i64 = 1_000;
const TOTAL: i64 = START * ACCOUNTS as i64;
const BANK: u64 = 0x5000;

struct Bank {
    cells: Mutex<Vec<i64>>,
    /// Id of the transaction that holds an account exclusively, 0 for none: set right after
    /// the lock is granted and cleared by the transaction's last log record (which runs before
    /// the lock is released), so two owners at once means the lock table broke isolation.
    owner: Vec<AtomicU64>,
}

impl Bank {
    fn new() -> Arc<Bank> {
        Arc::new(Bank {
            cells: Mutex::new(vec![START; ACCOUNTS]),
            owner: (0..ACCOUNTS).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn add(self: &Arc<Bank>, txn: &mut Txn, acct: usize, delta: i64) {
        self.cells.lock().unwrap()[acct] += delta;
        let me = self.clone();
        txn.on_abort(move || me.cells.lock().unwrap()[acct] -= delta);
    }

    fn total(&self) -> i64 {
        self.cells.lock().unwrap().iter().sum()
    }
}

#[derive(Default)]
struct Tally {
    committed: AtomicUsize,
    voluntary_aborts: AtomicUsize,
    deadlocks: AtomicUsize,
    deadlines: AtomicUsize,
    timeouts: AtomicUsize,
    reads: AtomicUsize,
}

impl Tally {
    fn failed(&self, e: VltError) {
        match e {
            VltError::Deadlock(_) => &self.deadlocks,
            VltError::DeadlinePassed => &self.deadlines,
            VltError::LockTimeout(_) => &self.timeouts,
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

/// One transfer attempt: locks 2 or 3 accounts exclusively in random order, moves money from the
/// first to the others (partly inside a nested transaction that may abort), and commits or
/// aborts at random. Returns the error that made it abort, if any.
fn transfer(vlt: &Vlt, bank: &Arc<Bank>, rng: &mut Rng, tally: &Tally) -> Result<(), VltError> {
    let mut txn = vlt.begin();
    let id = txn.id();
    let n = 2 + rng.below(2) as usize;
    let mut accts: Vec<usize> = Vec::with_capacity(n);
    while accts.len() < n {
        let a = rng.below(ACCOUNTS as u64) as usize;
        if !accts.contains(&a) {
            accts.push(a);
        }
    }
    for &a in &accts {
        txn.lock(BANK + a as u64, LockMode::Exclusive)?; // on error `txn` drops: abort
        let prev = bank.owner[a].swap(id, Ordering::SeqCst);
        assert_eq!(prev, 0, "account {a} held exclusively by two transactions");
        let (b1, b2) = (bank.clone(), bank.clone());
        txn.on_abort(move || assert_eq!(b1.owner[a].swap(0, Ordering::SeqCst), id));
        txn.on_commit(move || assert_eq!(b2.owner[a].swap(0, Ordering::SeqCst), id));
        if rng.chance(20) {
            thread::yield_now();
        }
    }
    let from = accts[0];
    for &to in &accts[1..] {
        let amount = rng.below(50) as i64 + 1;
        let nested = rng.chance(40);
        if nested {
            txn.begin_nested();
        }
        bank.add(&mut txn, from, -amount);
        bank.add(&mut txn, to, amount);
        if nested {
            if rng.chance(40) {
                txn.abort_nested()
            } else {
                txn.commit_nested()
            }
        }
    }
    if rng.chance(15) {
        thread::yield_now();
    }
    // A transaction that overstayed the time it was given once others waited must not commit.
    txn.check()?;
    if rng.chance(10) {
        tally.voluntary_aborts.fetch_add(1, Ordering::Relaxed);
        txn.abort();
    } else {
        txn.commit();
        tally.committed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Takes shared locks on every account (in random order) and checks that it sees a consistent
/// state: the total is conserved and nobody holds an account exclusively.
fn audit(vlt: &Vlt, bank: &Bank, rng: &mut Rng) -> Result<(), VltError> {
    let mut txn = vlt.begin();
    let mut order: Vec<usize> = (0..ACCOUNTS).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for a in order {
        txn.lock(BANK + a as u64, LockMode::Shared)?;
    }
    for a in 0..ACCOUNTS {
        assert_eq!(
            bank.owner[a].load(Ordering::SeqCst),
            0,
            "account {a} written under a shared lock"
        );
    }
    assert_eq!(bank.total(), TOTAL, "audit saw money created or lost");
    txn.commit();
    Ok(())
}

#[test]
fn transfers_conserve_money_under_contention() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 1500;
    let vlt = Vlt::new(VltConfig {
        hold_limit: Duration::from_millis(20),
        wait_limit: Duration::from_millis(200),
    });
    let bank = Bank::new();
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let give_up = Duration::from_secs(40);
    let writers_done = Arc::new(AtomicUsize::new(0));

    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (vlt, bank, tally, done) = (vlt.clone(), bank.clone(), tally.clone(), writers_done.clone());
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(t as u64 + 1);
            let mut finished = 0;
            while finished < PER_THREAD {
                assert!(
                    start.elapsed() < give_up,
                    "writer {t} made no progress ({finished} done)"
                );
                match transfer(&vlt, &bank, &mut rng, &tally) {
                    Ok(()) => finished += 1,
                    Err(e) => {
                        tally.failed(e);
                        back_off(&mut rng);
                    }
                }
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let auditor = {
        let (vlt, bank, tally, done) = (vlt.clone(), bank.clone(), tally.clone(), writers_done.clone());
        thread::spawn(move || {
            let mut rng = Rng::new(99);
            // Audit while the writers run, and a few times after they finish.
            let mut after = 0;
            while after < 5 {
                assert!(start.elapsed() < give_up, "auditor made no progress");
                let quiet = done.load(Ordering::SeqCst) == THREADS;
                match audit(&vlt, &bank, &mut rng) {
                    Ok(()) => {
                        tally.reads.fetch_add(1, Ordering::Relaxed);
                        if quiet {
                            after += 1;
                        }
                    }
                    Err(e) => {
                        assert!(!quiet, "an audit failed with nobody else running: {e}");
                        tally.failed(e);
                        back_off(&mut rng);
                    }
                }
                thread::sleep(Duration::from_micros(200));
            }
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    auditor.join().unwrap();

    assert_eq!(bank.total(), TOTAL);
    assert_eq!(vlt.locked_objects(), 0, "a lock leaked");
    for a in 0..ACCOUNTS {
        assert_eq!(bank.owner[a].load(Ordering::SeqCst), 0);
    }
    let cells = bank.cells.lock().unwrap().clone();
    assert_ne!(cells, vec![START; ACCOUNTS], "no money moved at all");
    let c = tally.committed.load(Ordering::Relaxed);
    let v = tally.voluntary_aborts.load(Ordering::Relaxed);
    assert_eq!(c + v, THREADS * PER_THREAD);
    assert!(c > 0 && v > 0);
    assert!(tally.reads.load(Ordering::Relaxed) >= 5);
    let s = vlt.stats();
    // Every abort is counted: voluntary ones, failed attempts, nested aborts and failed audits.
    let failures = tally.deadlocks.load(Ordering::Relaxed)
        + tally.deadlines.load(Ordering::Relaxed)
        + tally.timeouts.load(Ordering::Relaxed);
    assert!(s.aborts as usize >= v + failures);
    eprintln!(
        "transfers: committed {c}, voluntary aborts {v}, deadlocks {}, deadlines {}, timeouts {}, audits {}; {:?}; {:?}",
        tally.deadlocks.load(Ordering::Relaxed),
        tally.deadlines.load(Ordering::Relaxed),
        tally.timeouts.load(Ordering::Relaxed),
        tally.reads.load(Ordering::Relaxed),
        s,
        start.elapsed()
    );
}

#[test]
fn a_lock_hog_is_told_to_abort() {
    const X: u64 = 0x77;
    // The waiter is patient; the hog's time starts only once somebody waits.
    let vlt = Vlt::new(VltConfig {
        hold_limit: Duration::from_millis(20),
        wait_limit: Duration::from_secs(10),
    });
    let barrier = Arc::new(Barrier::new(2));
    let hog_released = Arc::new(AtomicBool::new(false));

    let hog = {
        let (vlt, barrier, released) = (vlt.clone(), barrier.clone(), hog_released.clone());
        thread::spawn(move || {
            let mut txn = vlt.begin();
            txn.lock(X, LockMode::Exclusive).unwrap();
            // Nobody waits yet: the hog may go on as long as it likes.
            for _ in 0..20 {
                txn.check().unwrap();
                thread::sleep(Duration::from_millis(1));
            }
            barrier.wait();
            let t0 = Instant::now();
            let err = loop {
                if let Err(e) = txn.check() {
                    break e;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(5),
                    "the hog was never given a deadline"
                );
                std::hint::spin_loop();
                thread::yield_now();
            };
            released.store(true, Ordering::SeqCst);
            txn.abort();
            err
        })
    };
    barrier.wait();
    let t0 = Instant::now();
    let mut waiter = vlt.begin();
    let got = waiter.lock(X, LockMode::Exclusive);
    let waited = t0.elapsed();
    assert_eq!(got, Ok(()));
    assert!(
        hog_released.load(Ordering::SeqCst),
        "the waiter got the lock while the hog still held it"
    );
    assert_eq!(hog.join().unwrap(), VltError::DeadlinePassed);
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    waiter.check().unwrap();
    waiter.commit();
    assert_eq!(vlt.locked_objects(), 0);
    let s = vlt.stats();
    assert!(s.deadlines_set >= 1);
    assert_eq!(s.lock_waits, 1);
    assert_eq!(s.lock_timeouts, 0);
}

#[test]
fn a_holder_that_is_itself_waiting_gets_its_deadline() {
    // A holds X and waits for Y (held by C, which never gives it up while A waits). B asks for
    // X: A, blocked, must notice its new deadline in its wait, give up, and let B in.
    const X: u64 = 0x81;
    const Y: u64 = 0x82;
    let vlt = Vlt::new(VltConfig {
        hold_limit: Duration::from_millis(20),
        wait_limit: Duration::from_secs(10),
    });
    let mut c = vlt.begin();
    c.lock(Y, LockMode::Exclusive).unwrap();

    let a_has_x = Arc::new(Barrier::new(2));
    let a = {
        let (vlt, bar) = (vlt.clone(), a_has_x.clone());
        thread::spawn(move || {
            let mut a = vlt.begin();
            a.lock(X, LockMode::Exclusive).unwrap();
            bar.wait();
            let t0 = Instant::now();
            let r = a.lock(Y, LockMode::Exclusive);
            let took = t0.elapsed();
            a.abort();
            (r, took)
        })
    };
    a_has_x.wait();
    let mut b = vlt.begin();
    let t0 = Instant::now();
    assert_eq!(b.lock(X, LockMode::Exclusive), Ok(()));
    assert!(t0.elapsed() < Duration::from_secs(5));
    let (ra, took) = a.join().unwrap();
    assert_eq!(ra, Err(VltError::DeadlinePassed));
    assert!(took < Duration::from_secs(5));
    b.commit();
    assert!(vlt.stats().deadlines_set >= 1);
    c.abort();
    assert_eq!(vlt.locked_objects(), 0);
}

/// Runs `n` threads in a ring: thread i locks object i, waits for all, then locks object i+1.
/// Every first attempt closes a cycle; failed attempts are retried until all have committed.
/// Returns the errors of the attempts that failed.
fn ring(vlt: &Vlt, n: usize, base: u64) -> Vec<VltError> {
    let barrier = Arc::new(Barrier::new(n));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (vlt, barrier, errors) = (vlt.clone(), barrier.clone(), errors.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(base + i as u64);
                let (first, second) = (base + i as u64, base + ((i + 1) % n) as u64);
                let t0 = Instant::now();
                let mut attempt = 0;
                loop {
                    assert!(t0.elapsed() < Duration::from_secs(20), "ring member {i} never finished");
                    let mut txn = vlt.begin();
                    let r = txn.lock(first, LockMode::Exclusive);
                    if attempt == 0 {
                        r.unwrap(); // nobody else wants `first` before the barrier
                        barrier.wait();
                    }
                    attempt += 1;
                    match r
                        .and_then(|()| txn.lock(second, LockMode::Exclusive))
                        .and_then(|()| txn.check())
                    {
                        Ok(()) => {
                            txn.commit();
                            return;
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(e);
                            txn.abort();
                            back_off(&mut rng);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(vlt.locked_objects(), 0);
    Arc::try_unwrap(errors).unwrap().into_inner().unwrap()
}

#[test]
fn two_party_deadlock_is_broken_and_both_complete() {
    let vlt = Vlt::default();
    for round in 0..20u64 {
        let errors = ring(&vlt, 2, 0x1000 * (round + 1));
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, VltError::Deadlock(_) | VltError::DeadlinePassed)),
            "round {round}: the cycle was never broken by deadlock detection or a deadline: {errors:?}"
        );
    }
    assert!(vlt.stats().deadlocks >= 1);
}

#[test]
fn ring_of_four_deadlock_is_broken_and_all_complete() {
    let vlt = Vlt::default();
    for round in 0..10u64 {
        let errors = ring(&vlt, 4, 0x10_0000 * (round + 1));
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, VltError::Deadlock(_) | VltError::DeadlinePassed)),
            "round {round}: {errors:?}"
        );
    }
}
