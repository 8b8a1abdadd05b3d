//! The breaker's say before each call: admitted, refused, or waiting for a probe's verdict
//! (for a shared breaker, Redis is asked first whether a peer probes already).

use tokio::time::Instant;

use super::Admitted;
use super::{admit, AttemptProjection, ProbeWait, Wait};
use crate::breaker::{Admit, Breaker};
use crate::execution::address;
use crate::operation;
use crate::Rejected;
#[cfg(feature = "shared")]
use {
    crate::breaker::{Ticket, Verdict},
    crate::policy::BreakerRef,
};

/// The breaker's say, right before the call: the call is admitted (or waits for a probe's
/// verdict), or refused.
pub(super) fn through_breaker<F, E>(
    this: &mut AttemptProjection<'_, '_, '_, F, E>,
) -> Result<(), Rejected> {
    let progress = &this.execution.progress;
    let Some(breaker) = progress.breaker_ref() else {
        admit(this, None, None);
        return Ok(());
    };
    // An enclosing call of this operation holds the breaker: this call is part of it, and must
    // not wait for a verdict that depends on itself.
    if progress.nested && operation::held_by_ancestor(address(breaker.get())) {
        admit(this, None, None);
        return Ok(());
    }
    let admitted = match breaker.get().try_admit(Instant::now) {
        #[cfg(feature = "shared")]
        Admit::Pass(admission) if admission.is_probe() && breaker.get().shared_link().is_some() => {
            // A shared breaker's probe first asks Redis whether a peer probes already.
            let admitted = admission.detach();
            let breaker = breaker.clone_ref();
            let now = Instant::now();
            let left = |deadline: Instant| deadline.saturating_duration_since(now);
            let limit = [this.limits.timeout, this.limits.deadline.map(left)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(breaker.get().config().cooldown());
            this.limits.started = Some(now);
            let wait: ProbeWait<'_> = Box::pin(shared_probe(breaker, admitted, limit));
            *this.wait = Some(Wait::Probe(wait, false));
            return Ok(());
        }
        Admit::Pass(admission) => Some(admission.detach()),
        Admit::Reject(rejected) => return Err(rejected),
        Admit::Wait => None,
    };
    match admitted {
        Some((ticket, transition)) => admit(this, Some(ticket), transition),
        None => {
            // Waiting for the probe's verdict counts toward this attempt's own limits. Rare,
            // so the wait is boxed to keep every attempt small.
            this.limits.started = Some(Instant::now());
            if let Some(breaker) = this.execution.progress.breaker_ref() {
                let breaker = breaker.clone_ref();
                let wait: ProbeWait<'_> =
                    Box::pin(async move { probe_verdict(breaker.get()).await });
                *this.wait = Some(Wait::Probe(wait, true));
            }
        }
    }
    Ok(())
}

async fn probe_verdict(breaker: &Breaker) -> Result<Admitted, Rejected> {
    breaker.admit().await.map(|admission| admission.detach())
}

/// This instance's probe of a shared breaker, if Redis agrees (or does not answer and the
/// policy fails open); if a peer probes, this instance stays open until its verdict comes.
/// Dropped before the answer, the probe slot is freed.
#[cfg(feature = "shared")]
async fn shared_probe(
    breaker: BreakerRef<'_>,
    (ticket, transition): Admitted,
    limit: std::time::Duration,
) -> Result<Admitted, Rejected> {
    use crate::seams::ProbeAnswer;

    /// Frees the probe slot unless taken back.
    struct Slot<'b>(&'b Breaker, Option<Ticket>);
    impl Drop for Slot<'_> {
        fn drop(&mut self) {
            if let Some(ticket) = self.1.take() {
                self.0.record(ticket, Verdict::Neutral);
            }
        }
    }

    let breaker = breaker.get();
    let mut slot = Slot(breaker, Some(ticket));
    let Some(link) = breaker.shared_link() else {
        return Err(Rejected::SharedUnavailable);
    };
    let answer = link.acquire_probe(limit).await;
    match answer {
        ProbeAnswer::Granted => {}
        ProbeAnswer::Unavailable if !link.fail_closed() => {}
        ProbeAnswer::Unavailable => return Err(Rejected::SharedUnavailable),
        ProbeAnswer::Peer(retry_in) => {
            if let Some(ticket) = slot.1.take() {
                breaker.yield_probe(ticket, retry_in);
            }
            return Err(breaker.rejection(retry_in));
        }
    }
    match slot.1.take() {
        Some(ticket) if breaker.probes_with(&ticket) => Ok((ticket, transition)),
        // A peer's opening (or closing) heard while the store was asked ended the generation
        // this probe was of: the breaker decides again, and an open one makes no call.
        Some(_) => match breaker.try_admit_closed() {
            Admit::Pass(admission) => Ok(admission.detach()),
            _ => Err(breaker.rejection(breaker.retry_in(Instant::now()))),
        },
        None => Err(Rejected::SharedUnavailable),
    }
}
