//! Trying a `lock.grant` graft before binding it (`vino graft try`): the candidate is offered
//! the grant decisions the live policy makes for one object, on the same waiters and locks
//! held, and judged by agreement and a stated model.
//!
//! The model judges each decision alone, by the waiters each policy would grant now: how many,
//! and how long they had waited (what the decision ends). What a different grant would have
//! changed later (who waits behind whom next) is not modelled: the waiters the candidate sees
//! are the live ones.

use crate::grant::{GRANT_MAX, GrantArgs, GrantEnv, LockGrant, WaitInfo, check_grant, frp};
use crate::range::Lock;
use serde::Serialize;
use std::sync::Arc;
use vino_graft::shadow::{Agreed, Agreement, Drain, Fed, Sampler, ShadowCounts};
use vino_graft::{GraftSlot, LoadError, Owner};

/// Most locks held a decision carries to the shadow: all a call's argument area can show.
const HELD_MAX: usize = vino_graft::ARG_BYTES / crate::grant::ENTRY_BYTES;

/// One live decision: the waiters, the locks held, the live grant mask.
/// (Its fields are the lock manager's to fill.)
pub struct Decision {
    waiters: Vec<WaitInfo>,
    held: Vec<Lock>,
    live: u64,
}

/// What a lock-grant shadow found, by the model above.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LockTryReport {
    pub point: String,
    /// Decisions followed and alike, the sampling rate, the shadow's counts.
    #[serde(flatten)]
    pub agreement: Agreement,
    /// Waiters each would grant, in all, and their mean wait until then.
    pub live_granted: u64,
    pub candidate_granted: u64,
    pub live_granted_waited_ns: f64,
    pub candidate_granted_waited_ns: f64,
}

impl Agreed for LockTryReport {
    fn agreement(&mut self) -> &mut Agreement {
        &mut self.agreement
    }
}

/// A candidate `lock.grant` graft in shadow beside one object's live policy.
pub struct LockTry {
    fed: Fed<Decision, LockTryReport>,
}

impl LockTry {
    pub(crate) fn start(
        slot: &GraftSlot<LockGrant>,
        wasm: &[u8],
        owner: Owner,
        sample: Option<u32>,
        queue: usize,
    ) -> Result<Arc<LockTry>, LoadError> {
        let account = owner.account.clone();
        let mut shadow = slot.shadow(wasm, owner, Arc::new(GrantEnv::new(slot.env().object)))?;
        let report = LockTryReport {
            point: slot.name().to_string(),
            agreement: Agreement::sampled(sample),
            ..LockTryReport::default()
        };
        let fed = Fed::start(
            "vino-try-lock".into(),
            queue,
            std::mem::size_of::<vino_graft::shadow::Item<Decision>>()
                + GRANT_MAX * std::mem::size_of::<WaitInfo>()
                + HELD_MAX * std::mem::size_of::<Lock>(),
            account.as_ref(),
            Sampler::new(sample),
            report,
            move |drain: Drain<Decision>, shared| {
                let (mut granted, mut waited) = ([0u64; 2], [0u128; 2]);
                for item in drain {
                    let Some(d) = item.live(&shadow) else { continue };
                    let args = GrantArgs {
                        waiters: &d.waiters,
                        held: &d.held,
                    };
                    // An answer the kernel would refuse, or a failed call, is the default's.
                    let candidate = shadow
                        .decide(&args)
                        .ok()
                        .filter(|&m| check_grant(&args, m).is_ok())
                        .unwrap_or_else(|| frp(&args));
                    // Its requeues ask the kernel for nothing: the shadow's environment keeps them.
                    drop(shadow.env().take_requeues());
                    for (k, mask) in [d.live, candidate].into_iter().enumerate() {
                        for (i, w) in d.waiters.iter().enumerate().take(GRANT_MAX) {
                            if mask & (1 << i) != 0 {
                                granted[k] += 1;
                                waited[k] += u128::from(w.age_ns);
                            }
                        }
                    }
                    let mut r = shared.lock();
                    r.agreement.follow(candidate == d.live);
                    r.live_granted = granted[0];
                    r.candidate_granted = granted[1];
                    r.live_granted_waited_ns = waited[0] as f64 / granted[0].max(1) as f64;
                    r.candidate_granted_waited_ns = waited[1] as f64 / granted[1].max(1) as f64;
                    r.agreement.shadow = ShadowCounts::of(&shadow);
                }
            },
        )?;
        Ok(Arc::new(LockTry { fed }))
    }

    /// Offers one live decision (those the sampler takes; never waits).
    pub(crate) fn offer(&self, waiters: &[WaitInfo], held: &[Lock], live: u64) {
        if waiters.is_empty() || !self.fed.take() {
            return;
        }
        self.fed.offer(Decision {
            waiters: waiters[..waiters.len().min(GRANT_MAX)].to_vec(),
            held: held[..held.len().min(HELD_MAX)].to_vec(),
            live,
        });
    }
}

/// Its queue: [`Fed::running`], [`Fed::owner`], [`Fed::report`], [`Fed::stop`].
impl std::ops::Deref for LockTry {
    type Target = Fed<Decision, LockTryReport>;
    fn deref(&self) -> &Self::Target {
        &self.fed
    }
}
