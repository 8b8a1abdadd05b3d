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

/// What a route told its execution about the current attempt. All false without a route.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Routing {
    /// The operation is routed: after a failure the route chooses the next target, then
    /// waits and draws the retry (see [`super::Route::target`]).
    pub(super) routed: bool,
    /// Another target may serve what this one refused for good ([`crate::Transient::moves_on`]).
    pub(super) other: bool,
    /// The attempt's target refused it before its call (its breaker opened, its gate closed,
    /// since the route chose it): the route chooses again, that attempt unmade.
    pub(super) refused: bool,
}

impl<'p> Progress<'p> {
    /// A transient failure (whose error asked to wait `asked`, if it did): the wait before
    /// the next attempt, with the retry drawn, or why there is none. A routed operation only
    /// checks that retries remain here: its route chooses the target, then waits and draws.
    pub(super) fn plan_retry(&mut self, asked: Option<Duration>) -> Result<Duration, GiveUp> {
        let tuning = &*self.tuning;
        if tuning.retry == 0 {
            return Err(GiveUp::NoRetries);
        }
        if self.tries.attempt >= tuning.retry {
            return Err(GiveUp::RetriesExhausted);
        }
        if self.tries.routing.routed {
            return Ok(Duration::ZERO);
        }
        if let Some(breaker) = self.breaker() {
            // Opened meanwhile (by this failure or another caller's) and not yet cooled down.
            if breaker.state() == BreakerState::Open && !breaker.retry_in(Instant::now()).is_zero()
            {
                return Err(GiveUp::BreakerOpen);
            }
        }
        let attempt = self.tries.attempt;
        let wait = self.backoff(attempt, asked)?;
        self.draw_retry(attempt, wait, asked)?;
        Ok(wait)
    }

    /// The backoff after attempt `attempt` failed, no shorter than `asked`; refused when
    /// `asked` is too long or the wait would not end, with time for the call, before the
    /// deadline.
    pub(super) fn backoff(
        &self,
        attempt: u32,
        asked: Option<Duration>,
    ) -> Result<Duration, GiveUp> {
        let (settings, tuning) = (self.settings, &*self.tuning);
        if asked.is_some_and(|asked| asked > tuning.retry_after_max) {
            return Err(GiveUp::RetryAfterTooLong);
        }
        let previous =
            (self.tries.last_wait > 0).then(|| Duration::from_nanos(self.tries.last_wait));
        let wait = settings.wait(&tuning.backoff, attempt, previous, asked);
        if let Some(deadline) = self.deadline {
            // No wait is started that cannot end, with time for the call, before the deadline.
            if later(Instant::now(), wait) >= deadline {
                return Err(GiveUp::DeadlineTooClose);
            }
        }
        Ok(wait)
    }

    /// The wait before an attempt whose backoff was waited already (for an attempt refused
    /// before its call): what the target's errors still ask, if that ends before the deadline.
    pub(super) fn backoff_served(&self, asked: Option<Duration>) -> Result<Duration, GiveUp> {
        if asked.is_some_and(|asked| asked > self.tuning.retry_after_max) {
            return Err(GiveUp::RetryAfterTooLong);
        }
        let wait = asked.unwrap_or_default();
        if let Some(deadline) = self.deadline {
            if later(Instant::now(), wait) >= deadline {
                return Err(GiveUp::DeadlineTooClose);
            }
        }
        Ok(wait)
    }

    /// Draws the attempt after attempt `attempt` from the operation's allowance and the retry
    /// budget, and tells the listeners of the `wait` before it (`asked` by the last error, if
    /// it did).
    pub(super) fn draw_retry(
        &mut self,
        attempt: u32,
        wait: Duration,
        #[cfg_attr(not(feature = "tracing"), allow(unused_variables))] asked: Option<Duration>,
    ) -> Result<(), GiveUp> {
        let settings = self.settings;
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
        Ok(())
    }

    /// Draws a hedge, an attempt beside the one in flight, from the operation's allowance
    /// and the retry budget: whether both allow it.
    pub(super) fn draw_hedge(&mut self) -> bool {
        if operation::allowance() == Some(0) {
            return false;
        }
        if let Some(budget) = &self.settings.budget {
            if self.tries.called && !budget.try_withdraw() {
                return false;
            }
        }
        operation::draw();
        self.tries.attempt += 1;
        #[cfg(feature = "metrics")]
        self.settings.meters.retry();
        true
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
