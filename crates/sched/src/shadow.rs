//! Trying a `sched.pick_next` or `sched.pick_thread` graft before binding it (`vino graft
//! try`): the candidate is offered the decisions the live policy makes, on the same runnable
//! threads, and judged by agreement and a stated model.
//!
//! The model judges each decision alone, by the thread each policy would run next: how long it
//! had waited for a worker (what the choice ends), whether it was the one that had waited
//! longest, and (for `sched.pick_next`, which sees every user's threads) whether it is another
//! user's than the live choice, a turn that would move between users. What a different choice
//! would have changed later (who waits behind it, how the shares move) is not modelled: the
//! threads the candidate sees are the live ones.

use crate::points::{PICK_MAX, PickArgs, PickNext, PickThread, ThreadEnv};
use crate::share::Candidate;
use serde::Serialize;
use std::sync::Arc;
use vino_graft::shadow::{Agreed, Agreement, Fed, Sampler, ShadowCounts};
use vino_graft::{GraftPoint, GraftSlot, LoadError, Owner};

/// One live decision: the runnable threads offered, the default's choice, the live choice.
/// (Its fields are the scheduler's to fill.)
pub struct Decision {
    candidates: Vec<Candidate>,
    default: usize,
    live: usize,
}

/// What a scheduler shadow found, by the model above.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedTryReport {
    pub point: String,
    /// Decisions followed and alike, the sampling rate, the shadow's counts.
    #[serde(flatten)]
    pub agreement: Agreement,
    /// Mean time the thread each would run next had waited for a worker.
    pub live_waited_ns: f64,
    pub candidate_waited_ns: f64,
    /// Decisions in which each chose the thread that had waited longest.
    pub live_oldest: u64,
    pub candidate_oldest: u64,
    /// Decisions in which the candidate's thread is another user's than the live one's.
    pub other_user: u64,
}

impl Agreed for SchedTryReport {
    fn agreement(&mut self) -> &mut Agreement {
        &mut self.agreement
    }
}

/// A scheduler graftpoint a candidate can be tried at.
pub trait PickPoint: GraftPoint<Output = usize> + for<'a> GraftPoint<Args<'a> = PickArgs<'a>> {
    /// The candidate's own environment, beside the live one's.
    fn shadow_env(live: &Self::Env) -> Self::Env;
    /// Forgets what the candidate's committed call asked of the kernel.
    fn forget(env: &Self::Env) {
        let _ = env;
    }
}

impl PickPoint for PickNext {
    fn shadow_env(_: &()) {}
}

impl PickPoint for PickThread {
    fn shadow_env(live: &ThreadEnv) -> ThreadEnv {
        ThreadEnv::new(live.pid())
    }
    /// Its ticket gifts are kept by the shadow's environment and never made.
    fn forget(env: &ThreadEnv) {
        drop(env.take_gifts());
    }
}

/// A candidate scheduler graft in shadow beside the live policy.
pub struct SchedTry {
    fed: Fed<Decision, SchedTryReport>,
}

/// The thread each would run, by index; counted into `sums`.
#[derive(Default)]
struct Sums {
    waited: [u128; 2],
    oldest: [u64; 2],
}

impl SchedTry {
    pub(crate) fn start<G: PickPoint>(
        slot: &GraftSlot<G>,
        wasm: &[u8],
        owner: Owner,
        sample: Option<u32>,
        queue: usize,
    ) -> Result<Arc<SchedTry>, LoadError> {
        let account = owner.account.clone();
        let mut shadow = slot.shadow(wasm, owner, Arc::new(G::shadow_env(slot.env())))?;
        let report = SchedTryReport {
            point: slot.name().to_string(),
            agreement: Agreement::sampled(sample),
            ..SchedTryReport::default()
        };
        let fed = Fed::start(
            "vino-try-sched".into(),
            queue,
            std::mem::size_of::<vino_graft::shadow::Item<Decision>>() + PICK_MAX * std::mem::size_of::<Candidate>(),
            account.as_ref(),
            Sampler::new(sample),
            report,
            move |drain: vino_graft::shadow::Drain<Decision>, shared| {
                let mut sums = Sums::default();
                for item in drain {
                    let Some(d) = item.live(&shadow) else { continue };
                    let args = PickArgs {
                        candidates: &d.candidates,
                        default: d.default,
                    };
                    // A failed call takes the default's choice, as it would bound.
                    let candidate = shadow.decide(&args).unwrap_or(d.default).min(d.candidates.len() - 1);
                    G::forget(shadow.env());
                    let longest = d.candidates.iter().map(|c| c.waited_ns).max().unwrap_or(0);
                    for (k, chosen) in [d.live, candidate].into_iter().enumerate() {
                        let c = &d.candidates[chosen];
                        sums.waited[k] += u128::from(c.waited_ns);
                        sums.oldest[k] += u64::from(c.waited_ns == longest);
                    }
                    let mut r = shared.lock();
                    r.agreement.follow(candidate == d.live);
                    r.other_user += u64::from(d.candidates[candidate].uid != d.candidates[d.live].uid);
                    let n = r.agreement.followed as f64;
                    r.live_waited_ns = sums.waited[0] as f64 / n;
                    r.candidate_waited_ns = sums.waited[1] as f64 / n;
                    [r.live_oldest, r.candidate_oldest] = sums.oldest;
                    r.agreement.shadow = ShadowCounts::of(&shadow);
                }
            },
        )?;
        Ok(Arc::new(SchedTry { fed }))
    }

    /// Offers one live decision, which the caller took from [`Fed::take`] (never waits).
    pub(crate) fn offer(&self, candidates: &[Candidate], default: usize, live: usize) {
        let n = candidates.len().min(PICK_MAX);
        if default >= n || live >= n {
            return;
        }
        self.fed.offer(Decision {
            candidates: candidates[..n].to_vec(),
            default,
            live,
        });
    }
}

/// Its queue: [`Fed::take`], [`Fed::running`], [`Fed::owner`], [`Fed::report`], [`Fed::stop`].
impl std::ops::Deref for SchedTry {
    type Target = Fed<Decision, SchedTryReport>;
    fn deref(&self) -> &Self::Target {
        &self.fed
    }
}
