//! Trying a `disk.pick_request` graft before binding it (`vino graft try`): the candidate is
//! offered the decisions the live policy makes, on the same requests, and judged by agreement
//! and a stated model.
//!
//! The model judges each decision alone, by the request each policy would send next: its
//! distance from the head in blocks (the seek it costs) and how long it had waited (what the
//! choice adds to that request's latency). What a different choice would have changed later
//! (which requests wait behind it, where the head goes next) is not modelled: the queue the
//! candidate sees is the live one.

use crate::{Candidate, PickArgs, PickEnv, PickRequest};
use serde::Serialize;
use std::sync::Arc;
use vino_graft::shadow::{Agreed, Agreement, Drain, Fed, Sampler, ShadowCounts};
use vino_graft::{GraftPoint, GraftSlot, LoadError, Owner};

/// One live decision: the requests offered, the head, the live choice.
/// (Its fields are the scheduler's to fill.)
pub struct Decision {
    pending: Vec<Candidate>,
    head: u64,
    live: usize,
}

/// What a disk shadow found, by the model above.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DiskTryReport {
    pub point: String,
    /// Decisions followed and alike, the sampling rate, the shadow's counts.
    #[serde(flatten)]
    pub agreement: Agreement,
    /// Mean distance from the head, in blocks, of the request each would send next.
    pub live_seek_blocks: f64,
    pub candidate_seek_blocks: f64,
    /// Mean time the request each would send next had waited.
    pub live_waited_ns: f64,
    pub candidate_waited_ns: f64,
}

impl Agreed for DiskTryReport {
    fn agreement(&mut self) -> &mut Agreement {
        &mut self.agreement
    }
}

/// A candidate `disk.pick_request` graft in shadow beside the scheduler's live policy.
pub struct DiskTry {
    fed: Fed<Decision, DiskTryReport>,
}

impl DiskTry {
    pub(crate) fn start(
        slot: &GraftSlot<PickRequest>,
        wasm: &[u8],
        owner: Owner,
        sample: Option<u32>,
        queue: usize,
    ) -> Result<Arc<DiskTry>, LoadError> {
        let env = Arc::new(PickEnv {
            age_cap_ns: slot.env().age_cap_ns,
        });
        let account = owner.account.clone();
        let mut shadow = slot.shadow(wasm, owner, env)?;
        let report = DiskTryReport {
            point: slot.name().to_string(),
            agreement: Agreement::sampled(sample),
            ..DiskTryReport::default()
        };
        let fed = Fed::start(
            "vino-try-disk".into(),
            queue,
            std::mem::size_of::<vino_graft::shadow::Item<Decision>>()
                + crate::PICK_MAX * std::mem::size_of::<Candidate>(),
            account.as_ref(),
            Sampler::new(sample),
            report,
            move |drain: Drain<Decision>, shared| {
                let (mut seek, mut waited) = ([0u128; 2], [0u128; 2]);
                for item in drain {
                    let Some(d) = item.live(&shadow) else { continue };
                    let args = PickArgs {
                        pending: &d.pending,
                        head: d.head,
                    };
                    // A failed call takes the default's decision, as it would bound.
                    let candidate = shadow
                        .decide(&args)
                        .unwrap_or_else(|_| PickRequest::default_policy(shadow.env(), &args))
                        .min(d.pending.len() - 1);
                    for (k, chosen) in [d.live, candidate].into_iter().enumerate() {
                        let c = &d.pending[chosen];
                        seek[k] += u128::from(c.block.abs_diff(d.head));
                        waited[k] += u128::from(c.age_ns);
                    }
                    let mut r = shared.lock();
                    r.agreement.follow(candidate == d.live);
                    let n = r.agreement.followed as f64;
                    r.live_seek_blocks = seek[0] as f64 / n;
                    r.candidate_seek_blocks = seek[1] as f64 / n;
                    r.live_waited_ns = waited[0] as f64 / n;
                    r.candidate_waited_ns = waited[1] as f64 / n;
                    r.agreement.shadow = ShadowCounts::of(&shadow);
                }
            },
        )?;
        Ok(Arc::new(DiskTry { fed }))
    }

    /// Offers one live decision (those the sampler takes; never waits).
    pub(crate) fn offer(&self, pending: &[Candidate], head: u64, live: usize) {
        if pending.is_empty() || !self.fed.take() {
            return;
        }
        self.fed.offer(Decision {
            pending: pending[..pending.len().min(crate::PICK_MAX)].to_vec(),
            head,
            live,
        });
    }
}

/// Its queue: [`Fed::running`], [`Fed::owner`], [`Fed::report`], [`Fed::stop`].
impl std::ops::Deref for DiskTry {
    type Target = Fed<Decision, DiskTryReport>;
    fn deref(&self) -> &Self::Target {
        &self.fed
    }
}
