//! What other instances make of a shared breaker (see `crate::seams`).

use std::time::Duration;

use tokio::time::Instant;

use super::word::{CLOSED, HALF_OPEN, OPEN};
use super::{Breaker, BreakerState, Ticket, Transition};
use crate::sync::{lock, Ordering};

/// What other instances make of a shared breaker (see `crate::seams`).
#[cfg(feature = "shared")]
impl Breaker {
    /// Ties the breaker to a shared store: the link, unless it was tied already.
    pub(crate) fn share(
        &self,
        link: crate::seams::BreakerLink,
    ) -> Option<&crate::seams::BreakerLink> {
        self.shared.set(link).ok().and(self.shared.get())
    }

    /// Its place in the shared store, for a shared breaker.
    pub(crate) fn shared_link(&self) -> Option<&crate::seams::BreakerLink> {
        self.shared.get()
    }

    /// Opened elsewhere, with `retry_in` left of its cooldown (at most this breaker's own
    /// cooldown): open here too. A call admitted before counts for nothing after (a new
    /// generation); callers waiting for a probe here are refused. No call of this instance
    /// hears of the transition: the caller reports it.
    pub(crate) fn remote_open(&self, retry_in: Duration) -> Option<Transition> {
        let transition = {
            let mut probing = lock(&self.probing);
            if self.forced.load(Ordering::Acquire) {
                return None;
            }
            self.opened_for(retry_in);
            let word = self.load();
            (word.state() != OPEN).then(|| {
                *probing = false;
                self.word.store(word.next(OPEN).0, Ordering::Release);
                Transition {
                    from: BreakerState::from_bits(word.state()),
                    to: BreakerState::Open,
                }
            })
        };
        self.verdict.notify_waiters();
        transition
    }

    /// Closed elsewhere by a successful probe: close here too, forgetting what was counted.
    /// The caller reports the transition.
    pub(crate) fn remote_closed(&self) -> Option<Transition> {
        let transition = {
            let mut probing = lock(&self.probing);
            let word = self.load();
            if self.forced.load(Ordering::Acquire) || word.state() == CLOSED {
                return None;
            }
            *probing = false;
            self.word.store(word.next(CLOSED).0, Ordering::Release);
            self.forget_calls();
            Transition {
                from: BreakerState::from_bits(word.state()),
                to: BreakerState::Closed,
            }
        };
        self.verdict.notify_waiters();
        Some(transition)
    }

    /// This instance was to probe, but a peer's probe (or opening) is in force for
    /// `retry_in`: back to open for that long, with no transition to tell (the half-open
    /// state was never shown).
    pub(crate) fn yield_probe(&self, ticket: Ticket, retry_in: Duration) {
        {
            let mut probing = lock(&self.probing);
            let word = self.load();
            if word.generation() != ticket.generation || word.state() != HALF_OPEN {
                return;
            }
            *probing = false;
            self.opened_for(retry_in);
            self.word.store(word.next(OPEN).0, Ordering::Release);
        }
        self.verdict.notify_waiters();
    }

    /// Dates the opening so that `retry_in` (at most a cooldown) is left of it.
    fn opened_for(&self, retry_in: Duration) {
        let passed = self.config.cooldown().saturating_sub(retry_in);
        let now = self.since_created(Instant::now());
        let passed = i64::try_from(passed.as_nanos()).unwrap_or(i64::MAX);
        self.opened_at
            .store(now.saturating_sub(passed) as u64, Ordering::Release);
    }
}
