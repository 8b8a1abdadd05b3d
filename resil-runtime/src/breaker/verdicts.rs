//! How a call's verdict moves a breaker: counted in its generation, judged by its kind,
//! and for a probe, closing or re-opening it.

use std::time::Duration;

#[cfg(feature = "shared")]
use tokio::time::Instant;

use super::window::Window;
use super::word::{Word, CLOSED, HALF_OPEN};
use super::{Breaker, BreakerKind, BreakerState, Ticket, Transition, Verdict};
use crate::sync::{lock, Mutex, Ordering};

impl Breaker {
    /// Records how an admitted call ended. A verdict from another generation than the one that
    /// admitted the call counts for nothing.
    pub(crate) fn record(&self, ticket: Ticket, verdict: Verdict) -> Option<Transition> {
        self.record_timed(ticket, verdict, None)
    }

    /// [`Breaker::record`], with how long the call took when it was timed (a slow-call
    /// breaker judges by it; a call not timed counts as fast).
    pub(crate) fn record_timed(
        &self,
        ticket: Ticket,
        verdict: Verdict,
        took: Option<Duration>,
    ) -> Option<Transition> {
        let verdict = match self.config.kind() {
            // Slowness is the failure a slow-call breaker counts; a probe that answers too
            // slowly has not shown the provider is back.
            BreakerKind::SlowCall { slower_than, .. } if verdict != Verdict::Neutral => {
                if took.is_some_and(|took| took >= slower_than) {
                    Verdict::Failure
                } else {
                    Verdict::Success
                }
            }
            _ => verdict,
        };
        if ticket.probe {
            return self.record_probe(ticket, verdict);
        }
        if verdict == Verdict::Neutral {
            return None;
        }
        if let Some(window) = &self.window {
            return self.judge(window, ticket, verdict);
        }
        let mut word = self.load();
        loop {
            // Under load most successes find the count at zero: a load, no write.
            if verdict == Verdict::Success && word.failures() == 0 {
                return None;
            }
            if word.generation() != ticket.generation || word.state() != CLOSED {
                return None;
            }
            let counted = match verdict {
                Verdict::Neutral => return None,
                Verdict::Success => word.with_failures(0),
                Verdict::Failure => {
                    let failures = word.failures().saturating_add(1);
                    if failures >= self.config.threshold() {
                        let transition = lock(&self.probing);
                        if self.load() != word {
                            word = self.load();
                            continue;
                        }
                        self.open(word);
                        drop(transition);
                        self.announce(BreakerState::Open);
                        return Some(Transition {
                            from: BreakerState::Closed,
                            to: BreakerState::Open,
                        });
                    }
                    word.with_failures(failures)
                }
            };
            match self.word.compare_exchange_weak(
                word.0,
                counted.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return None,
                Err(actual) => word = Word(actual),
            }
        }
    }

    /// Counts a verdict in the window of a failure-rate or slow-call breaker, and opens it if
    /// the share of bad calls reached its limit.
    fn judge(
        &self,
        window: &Mutex<Window>,
        ticket: Ticket,
        verdict: Verdict,
    ) -> Option<Transition> {
        // The match written out, not `rate_limits()`: calling it here moves the code of every
        // call enough to cost the metrics build's pending call 16 instructions (layout alone).
        let (percent, min_calls) = match self.config.kind() {
            BreakerKind::FailureRate {
                percent, min_calls, ..
            }
            | BreakerKind::SlowCall {
                percent, min_calls, ..
            } => (percent, min_calls),
            BreakerKind::Consecutive => return None,
        };
        let bad = verdict == Verdict::Failure;
        #[cfg(feature = "shared")]
        let mut send = None;
        let opened = 'judged: {
            let _transition = lock(&self.probing);
            let word = self.load();
            if word.generation() != ticket.generation || word.state() != CLOSED {
                return None;
            }
            let local = lock(window).push_trips(bad, percent, min_calls);
            #[cfg(feature = "shared")]
            let trips = match self.summed() {
                Some((usable, summed)) => {
                    let (judged, start) = summed.record(bad, usable, Instant::now());
                    send = start.then_some(summed);
                    judged.trips(local, percent, min_calls)
                }
                None => local,
            };
            #[cfg(not(feature = "shared"))]
            let trips = local;
            if !trips {
                break 'judged None;
            }
            Some(self.trip(word))
        };
        // Out of the locks: the task takes them to count what the store answers.
        #[cfg(feature = "shared")]
        if let Some(summed) = send {
            summed.start_sending();
        }
        let opened = opened?;
        self.announce(BreakerState::Open);
        Some(opened)
    }

    /// A failure-rate or slow-call breaker's percent and minimum of calls (for the shared
    /// window's judgements).
    #[cfg(feature = "shared")]
    pub(super) fn rate_limits(&self) -> Option<(u8, u32)> {
        match self.config.kind() {
            BreakerKind::FailureRate {
                percent, min_calls, ..
            }
            | BreakerKind::SlowCall {
                percent, min_calls, ..
            } => Some((percent, min_calls)),
            BreakerKind::Consecutive => None,
        }
    }

    /// Its window tripped a closed breaker (`word`, its state, read under the transition
    /// lock, which is held): it opens and judges afresh. The caller announces it.
    pub(super) fn trip(&self, word: Word) -> Transition {
        self.forget_calls();
        self.open(word);
        Transition {
            from: BreakerState::Closed,
            to: BreakerState::Open,
        }
    }

    /// For a shared breaker whose window is summed over instances: whether its store answers
    /// now, and the window.
    #[cfg(feature = "shared")]
    fn summed(&self) -> Option<(bool, &super::summed::SummedWindow)> {
        let summed = self.summed_window()?;
        Some((self.shared_link()?.sharing.store.usable(), summed))
    }

    /// A breaker judges afresh: the calls of before it opened or closed are forgotten (here,
    /// and in what this instance knows of a shared window). Called with the transition lock
    /// held.
    pub(super) fn forget_calls(&self) {
        if let Some(window) = &self.window {
            lock(window).clear();
        }
        #[cfg(feature = "shared")]
        if let Some(summed) = self.summed_window() {
            summed.forget();
        }
    }

    /// A failure of a call admitted earlier that has since committed (a stream failing after
    /// its first item): counted against the breaker as it is now, if it is closed.
    pub(crate) fn record_failure(&self) -> Option<Transition> {
        self.record(Ticket::new(false, self.load()), Verdict::Failure)
    }

    /// Tells the other instances of a state this breaker reached by its own calls. Never
    /// with the transition lock held: a store may deliver news to a breaker (this one, or a
    /// peer's that is announcing too) before it returns.
    pub(super) fn announce(&self, to: BreakerState) {
        #[cfg(feature = "shared")]
        if let Some(link) = self.shared_link() {
            link.announce(self, to);
        }
        #[cfg(not(feature = "shared"))]
        let _ = to;
    }

    pub(super) fn record_probe(&self, ticket: Ticket, verdict: Verdict) -> Option<Transition> {
        let mut released = false;
        let transition = {
            let mut probing = lock(&self.probing);
            let word = self.load();
            if word.generation() != ticket.generation || word.state() != HALF_OPEN {
                return None;
            }
            *probing = false;
            match verdict {
                Verdict::Success => {
                    self.word.store(word.next(CLOSED).0, Ordering::Release);
                    self.forget_calls();
                    Some(BreakerState::Closed)
                }
                Verdict::Failure => {
                    self.open(word);
                    Some(BreakerState::Open)
                }
                Verdict::Neutral => {
                    released = true;
                    None
                }
            }
        };
        #[cfg(feature = "shared")]
        if let Some(link) = self.shared_link().filter(|_| released) {
            link.release_probe();
        }
        #[cfg(not(feature = "shared"))]
        let _ = released;
        if let Some(to) = transition {
            self.announce(to);
        }
        self.verdict.notify_waiters();
        transition.map(|to| Transition {
            from: BreakerState::HalfOpen,
            to,
        })
    }
}
