//! What other instances make of a shared breaker (see `crate::seams`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::summed::SummedWindow;
use super::word::{CLOSED, HALF_OPEN, OPEN};
use super::{Breaker, BreakerState, Ticket, Transition};
use crate::seams::{BreakerLink, BreakerNews, Linked, Sharing};
use crate::sync::{lock, Ordering};

/// A shared breaker's tie to its store.
pub(crate) struct Shared {
    /// What the store sees of it.
    link: BreakerLink,
    /// For a failure-rate or slow-call breaker with a window in time: the window summed over
    /// every instance (`{id}:window` in Redis).
    window: Option<Box<SummedWindow>>,
}

/// What other instances make of a shared breaker (see `crate::seams`).
#[cfg(feature = "shared")]
impl Breaker {
    /// Ties the breaker (named `name` in the store) to a shared store and listens to its
    /// news, unless it is tied already (a named breaker used by several shared policies keeps
    /// its first tie).
    pub(crate) fn share(self: &Arc<Self>, sharing: &Arc<Sharing>, name: &str) {
        let link = BreakerLink::new(sharing, name);
        let id = Arc::clone(&link.id);
        let window = SummedWindow::of(self);
        if self.shared.set(Shared { link, window }).is_ok() {
            let breaker: Weak<dyn Linked> = Arc::downgrade(self) as Weak<Breaker>;
            sharing.store.listen_breaker(BreakerNews::new(id, breaker));
        }
    }

    /// Its place in the shared store, for a shared breaker.
    pub(crate) fn shared_link(&self) -> Option<&BreakerLink> {
        self.shared.get().map(|shared| &shared.link)
    }

    /// Its window summed over every instance, for a shared breaker that has one.
    pub(crate) fn summed_window(&self) -> Option<&SummedWindow> {
        self.shared.get()?.window.as_deref()
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

    /// Whether `ticket` is still the probe of this half-open breaker: no opening or closing
    /// (heard from a peer) ended its generation since it was taken.
    pub(crate) fn probes_with(&self, ticket: &Ticket) -> bool {
        let word = self.load();
        ticket.probe && word.generation() == ticket.generation && word.state() == HALF_OPEN
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

#[cfg(feature = "shared")]
impl Linked for Breaker {
    fn link(&self) -> Option<&BreakerLink> {
        self.shared_link()
    }

    fn state_now(&self) -> BreakerState {
        self.state()
    }

    fn cooldown_left(&self) -> Duration {
        self.retry_in(Instant::now())
    }

    fn open_as_peer(&self, left: Duration) -> Option<Transition> {
        self.remote_open(left)
    }

    fn close_as_peer(&self) -> Option<Transition> {
        self.remote_closed()
    }

    fn names(&self) -> (&str, &str, Option<&str>) {
        (self.name(), self.label(), self.key())
    }
}
