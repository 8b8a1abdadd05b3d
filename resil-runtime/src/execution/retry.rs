//! After a transient failure: the wait before the next attempt, or why there is none.

use std::time::Duration;

use tokio::time::Instant;

use super::{Next, Outcome, Progress};
use crate::breaker::BreakerState;
use crate::deadline::later;
use crate::events::{Event, GiveUp};
use crate::operation;
use crate::Rejected;

/// The attempts an operation made so far.
#[derive(Debug, Default)]
pub(super) struct Tries {
    /// 0 during the first attempt, 1 during the first retry, ...
    pub(super) attempt: u32,
    /// The last wait in nanoseconds (saturating), 0 before the first: decorrelated jitter,
    /// the only reader, never waits less than its positive base. Eight bytes rather than an
    /// `Option<Duration>`'s sixteen keep the execution within a cheap move.
    pub(super) last_wait: u64,
    /// Whether an attempt has called the provider (the retry budget counts calls).
    pub(super) called: bool,
    /// Where a routed operation may go after the current attempt.
    pub(super) routing: Routing,
}

/// Where a routed operation may go if the current attempt fails, as its route saw the other
/// targets before the attempt. All false without a route.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Routing {
    /// The operation is routed: a breaker that opened on this target ends nothing.
    pub(super) routed: bool,
    /// A target not yet tried admits: a failure moves there at once.
    pub(super) fresh: bool,
    /// Another target admits now: a throttle moves there at once.
    pub(super) now: bool,
    /// Another target may serve what this one refused for good ([`crate::Transient::moves_on`]).
    pub(super) other: bool,
}

impl<'p> Progress<'p> {
    /// A transient failure (whose error asked to wait `asked`, if it did; a throttle, or an
    /// error that `moves_on`): the wait before the next attempt, with the retry drawn, or why
    /// there is none. A route moving to a target that has not failed yet does not wait.
    pub(super) fn plan_retry(
        &mut self,
        asked: Option<Duration>,
        throttle: bool,
        moves_on: bool,
    ) -> Result<Duration, GiveUp> {
        let (settings, tuning) = (self.settings, &*self.tuning);
        if tuning.retry == 0 {
            return Err(GiveUp::NoRetries);
        }
        if self.tries.attempt >= tuning.retry {
            return Err(GiveUp::RetriesExhausted);
        }
        let routing = self.tries.routing;
        let at_once = routing.fresh || moves_on || (throttle && routing.now);
        if let Some(breaker) = self.breaker().filter(|_| !routing.routed) {
            // Opened meanwhile (by this failure or another caller's) and not yet cooled down.
            if breaker.state() == BreakerState::Open && !breaker.retry_in(Instant::now()).is_zero()
            {
                return Err(GiveUp::BreakerOpen);
            }
        }
        if !at_once && asked.is_some_and(|asked| asked > tuning.retry_after_max) {
            return Err(GiveUp::RetryAfterTooLong);
        }
        let previous =
            (self.tries.last_wait > 0).then(|| Duration::from_nanos(self.tries.last_wait));
        let wait = if at_once {
            Duration::ZERO
        } else {
            settings.wait(&tuning.backoff, self.tries.attempt, previous, asked)
        };
        if let Some(deadline) = self.deadline {
            // No wait is started that cannot end, with time for the call, before the deadline.
            if later(Instant::now(), wait) >= deadline {
                return Err(GiveUp::DeadlineTooClose);
            }
        }
        if operation::allowance() == Some(0) {
            return Err(GiveUp::AllowanceSpent);
        }
        if let Some(budget) = &settings.budget {
            // An operation that has not called yet (its first attempt waited for a probe and
            // timed out) withdraws nothing: its next call is its first.
            if self.tries.called && !budget.try_withdraw() {
                return Err(GiveUp::BudgetExhausted);
            }
        }
        operation::draw();
        let attempt = self.tries.attempt;
        #[cfg(feature = "metrics")]
        settings.meters.retry();
        #[cfg(feature = "tracing")]
        tracing::debug!(
            wait_ms = wait.as_millis() as u64,
            reason = if asked.is_some() {
                "retry_after"
            } else {
                "backoff"
            },
            "waiting before the next attempt"
        );
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::Waiting {
                site,
                operation,
                attempt,
                wait,
            })
        });
        self.tries.last_wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        Ok(wait)
    }

    /// Ends the operation with the provider's `error` (`outcome`: `error` or `timeout`), which
    /// asked to wait `asked` if it did.
    pub(super) fn give_up<T, E>(
        &mut self,
        error: E,
        reason: GiveUp,
        outcome: &'static str,
        asked: Option<Duration>,
    ) -> Next<T, E> {
        self.outcome(outcome);
        let attempt = self.tries.attempt;
        // The error itself does not say why it was not retried: a wait refused is logged.
        #[cfg(feature = "tracing")]
        if let (GiveUp::RetryAfterTooLong | GiveUp::DeadlineTooClose, Some(asked)) = (reason, asked)
        {
            tracing::warn!(
                asked_ms = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX),
                reason = reason.as_str(),
                "not retried: the error asked to wait {asked:?}"
            );
        }
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::GaveUp {
                site,
                operation,
                attempt,
                reason,
                asked,
            })
        });
        Next::Done(Outcome::Failed(error))
    }

    pub(super) fn reject<T, E: From<Rejected>>(&mut self, rejected: Rejected) -> Next<T, E> {
        self.outcome(match &rejected {
            Rejected::OverBurst { .. } => "rate_limited",
            Rejected::Idle { .. } | Rejected::Incomplete | Rejected::Uncommitted { .. } => "error",
            other => other.kind(),
        });
        #[cfg(feature = "tracing")]
        tracing::info!(kind = rejected.kind(), "{rejected}");
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::Rejected {
                site,
                operation,
                rejected: &rejected,
            })
        });
        Next::Done(Outcome::Failed(E::from(rejected)))
    }
}
