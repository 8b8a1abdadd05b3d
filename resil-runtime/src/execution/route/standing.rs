//! How a target would take an attempt now: skipped (what it would answer), later (after a
//! wait for a slot or a place) or at once, judged by its own breaker, bulkhead and gates, as
//! the attempt will judge it.

use tokio::time::Instant;

use super::Target;
use crate::deadline::later;
use crate::execution::Progress;
use crate::key::Key;
use crate::policy::{Scope, Settings};
use crate::Rejected;

/// How a target would take an attempt now.
pub(super) enum Standing {
    /// It would make no call: what it would answer.
    Skip(Rejected),
    /// It calls after a wait (a rate slot, a place in its bulkhead's queue).
    Later,
    /// It calls at once.
    Now,
}

/// How target `i` would take an attempt of `progress` at `now`. A policy switched off skips
/// nothing; one without state per key judges every target alike, by its own breaker and gates.
pub(super) fn standing_at<Q, K: Key + ?Sized>(
    key: fn(&Q) -> &K,
    targets: &[Target<Q>],
    progress: &Progress<'_>,
    current: usize,
    i: usize,
    now: Instant,
) -> Standing {
    let settings = progress.settings;
    let Some(admission) = &progress.admission else {
        return Standing::Now;
    };
    let (deadline, cost) = (progress.deadline, admission.cost);
    let Some(keys) = settings.keys.as_deref() else {
        return standing(settings, None, deadline, cost, false, now);
    };
    // The current target's state is the operation's own, and so is its bulkhead place.
    match admission.scope.as_ref().filter(|_| i == current) {
        Some(scope) => standing(
            settings,
            Some(scope),
            deadline,
            cost,
            admission.permit.is_some(),
            now,
        ),
        None => {
            let scope = keys.held(key(&targets[i].value));
            standing(settings, Some(&scope), deadline, cost, false, now)
        }
    }
}

/// How a call on `scope` (none: the policy's own state only) would be taken at `now`, costing
/// `cost` tokens, under `deadline`; `placed`: the operation holds a place in its bulkhead
/// already.
fn standing(
    settings: &Settings,
    scope: Option<&Scope>,
    deadline: Option<Instant>,
    cost: u64,
    placed: bool,
    now: Instant,
) -> Standing {
    let breaker = scope.and_then(|scope| scope.breaker.as_deref());
    let breaker = breaker.or(settings.breaker.as_deref());
    if let Some(rejected) = breaker.and_then(|breaker| breaker.turns_away(now)) {
        return Standing::Skip(rejected);
    }
    let mut at_once = true;
    let bulkhead = scope.and_then(|scope| scope.bulkhead.as_ref());
    if let Some(bulkhead) = bulkhead.filter(|_| !placed) {
        if !bulkhead.has_room() {
            return Standing::Skip(Rejected::BulkheadFull {
                limit: bulkhead.limit(),
            });
        }
        at_once = bulkhead.in_flight() < bulkhead.limit();
    }
    let gates = [
        (
            scope.and_then(|scope| scope.rate.as_ref()),
            &settings.rate,
            1,
        ),
        (
            scope.and_then(|scope| scope.token_rate.as_ref()),
            &settings.token_rate,
            cost,
        ),
    ];
    for (own, policy, cost) in gates {
        let Some(gate) = own.or(policy.as_ref()) else {
            continue;
        };
        let Some(wait) = gate.wait_for(cost) else {
            return Standing::Skip(Rejected::OverBurst {
                cost,
                burst: gate.burst(),
            });
        };
        // Judged as the attempt's gates will judge it (`Progress::start_by`): a wait ends a
        // millisecond before the deadline; a slot free now always fits.
        let ends = later(now, wait.saturating_add(crate::execution::LAST_START));
        if !wait.is_zero() && deadline.is_some_and(|deadline| ends > deadline) {
            return Standing::Skip(Rejected::RateLimited { retry_in: wait });
        }
        at_once &= wait.is_zero();
    }
    if at_once {
        Standing::Now
    } else {
        Standing::Later
    }
}
