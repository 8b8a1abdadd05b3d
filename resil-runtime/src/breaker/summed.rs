//! [`SummedWindow`]: the time window of a shared failure-rate or slow-call breaker, summed
//! over every instance (feature `shared`). This instance's calls go to the store in batches, at
//! most one round trip per [`SEND_EVERY`] and none while idle, and the breaker judges the
//! store's sums plus the calls it has not sent yet, so that `breaker_min_calls` counts the
//! service's calls, not one instance's.
//!
//! Each call is counted once: it waits in `unsent`, leaves it for `in_flight` when its batch
//! is sent, and leaves that when the store's answer, which includes it, arrives. A batch whose
//! round trip fails is dropped, not sent again: the store may have counted it (a timeout does
//! not say), and a batch counted twice would open the breaker on failures that never were.
//! Calls made while the store is known to be down are not sent later either. Both were
//! counted in the local window, which judges alone while the store does not answer, and
//! from a batch that fails until one is answered (a store saying it is usable while its
//! batches fail or hang would otherwise leave the breaker judging nothing).
//!
//! The batches are sent by a task that lives only while there is something to send: the
//! first call after a quiet spell starts it, it sends what has gathered every [`SEND_EVERY`],
//! and ends when a round trip finds nothing new. No timer runs while the breaker is idle.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::time_window::buckets;
use super::word::CLOSED;
use super::{Breaker, BreakerKind, BreakerState, Transition};
use crate::seams::WindowBatch;
use crate::sync::{lock, lock_std};

/// The shortest time between two batches of one breaker.
pub(crate) const SEND_EVERY: Duration = Duration::from_millis(100);

/// Calls and bad calls: a batch of this instance's, or the sums over every instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowCounts {
    pub(crate) calls: u64,
    pub(crate) bad: u64,
}

impl WindowCounts {
    fn plus(self, other: WindowCounts) -> WindowCounts {
        WindowCounts {
            calls: self.calls.saturating_add(other.calls),
            bad: self.bad.saturating_add(other.bad),
        }
    }

    /// Whether these sums, a store's answer to `batch`, can be: no more bad calls than calls,
    /// the batch's calls and bad calls among them (the store adds it before it sums), and
    /// no more calls than a store counts exactly (Lua's doubles, 2^53).
    fn can_be(self, batch: WindowCounts) -> bool {
        self.bad <= self.calls
            && self.bad >= batch.bad
            && self.calls - self.bad >= batch.calls.saturating_sub(batch.bad)
            && self.calls <= 1 << 53
    }

    /// Whether at least `percent` % of the calls were bad, with at least `min_calls` counted.
    pub(crate) fn trips(self, percent: u8, min_calls: u32) -> bool {
        super::config::trips(self.calls, self.bad, percent, min_calls)
    }
}

/// A shared breaker's time window as the store keeps it: its span and buckets (the local
/// window's), and what this instance knows of the sums.
pub(crate) struct SummedWindow {
    /// How many buckets it has, and how long each lasts (see `time_window::buckets`).
    pub(crate) buckets: u64,
    pub(crate) width: Duration,
    breaker: Weak<Breaker>,
    sums: Mutex<Sums>,
}

impl std::fmt::Debug for SummedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummedWindow")
            .field("buckets", &self.buckets)
            .field("width", &self.width)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Sums {
    unsent: WindowCounts,
    in_flight: WindowCounts,
    /// The store's sums at its last answer, and when it came.
    store: Option<(WindowCounts, Instant)>,
    last_sent: Option<Instant>,
    /// Whether the task that sends the batches runs.
    sending: bool,
    /// The store keeps no windows (its `add_to_window` says so): each instance judges its own.
    unsummed: bool,
    /// The last batch failed or went unanswered though the store says it is usable: this
    /// instance judges its own window until a batch is answered.
    failed: bool,
    /// The breaker's generation when the batch in flight left: an answer about another
    /// generation's calls counts for nothing.
    generation: u32,
}

/// How to judge the window now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judged {
    /// By this instance's window alone: the store is down, keeps no windows, or failed the
    /// last batch.
    Local,
    /// By the sums over every instance.
    Sum(WindowCounts),
    /// Not now: the store's sums are older than a bucket, and the answer to the batch on its
    /// way judges.
    Later,
}

impl Judged {
    /// Whether the window trips, `local` being what this instance's own window says.
    pub(crate) fn trips(self, local: bool, percent: u8, min_calls: u32) -> bool {
        match self {
            Judged::Local => local,
            Judged::Sum(sums) => sums.trips(percent, min_calls),
            Judged::Later => false,
        }
    }
}

/// What the sending task does next.
enum Next {
    Done,
    Wait(Duration),
    Send(WindowCounts, u32),
}

impl SummedWindow {
    /// The summed window of `breaker`, if it is a failure-rate or slow-call breaker with a
    /// window in time.
    pub(crate) fn of(breaker: &Arc<Breaker>) -> Option<Box<Self>> {
        let (BreakerKind::FailureRate { window, .. } | BreakerKind::SlowCall { window, .. }) =
            breaker.config().kind()
        else {
            return None;
        };
        let resil_spec::WindowSize::Time(span) = window else {
            return None;
        };
        let (buckets, width) = buckets(span);
        Some(Box::new(SummedWindow {
            buckets,
            width,
            breaker: Arc::downgrade(breaker),
            sums: Mutex::default(),
        }))
    }

    /// Counts one call (`usable`: whether the store answers now), under the breaker's
    /// transition lock. Says how to judge the window, and whether to start the sending task.
    pub(crate) fn record(&self, bad: bool, usable: bool, now: Instant) -> (Judged, bool) {
        let mut sums = lock_std(&self.sums);
        if sums.unsummed {
            return (Judged::Local, false);
        }
        if !usable {
            sums.unsent = WindowCounts::default();
            sums.store = None;
            return (Judged::Local, false);
        }
        sums.unsent = sums.unsent.plus(WindowCounts {
            calls: 1,
            bad: u64::from(bad),
        });
        let judged = match sums.store {
            Some((store, at)) if now.saturating_duration_since(at) <= self.width => {
                Judged::Sum(store.plus(sums.in_flight).plus(sums.unsent))
            }
            _ if sums.failed => Judged::Local,
            _ => Judged::Later,
        };
        let start = !sums.sending;
        sums.sending = true;
        (judged, start)
    }

    /// The breaker opened or closed: the calls counted so far count for nothing.
    pub(crate) fn forget(&self) {
        let mut sums = lock_std(&self.sums);
        sums.unsent = WindowCounts::default();
        sums.in_flight = WindowCounts::default();
        sums.store = None;
    }

    /// Starts the task that sends this instance's batches (after [`SummedWindow::record`]
    /// said to): none without a tokio runtime, where the local window judges alone.
    pub(crate) fn start_sending(&self) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let sending = Sending {
                    breaker: Weak::clone(&self.breaker),
                    ended: false,
                };
                runtime.spawn(send(sending));
            }
            Err(_) => lock_std(&self.sums).sending = false,
        }
    }

    fn next(&self, now: Instant, generation: u32, usable: bool) -> Next {
        let mut sums = lock_std(&self.sums);
        if !usable {
            sums.unsent = WindowCounts::default();
        }
        if sums.unsummed || sums.unsent == WindowCounts::default() {
            sums.sending = false;
            return Next::Done;
        }
        if let Some(wait) = (sums.last_sent)
            .map(|at| (at + SEND_EVERY).saturating_duration_since(now))
            .filter(|wait| !wait.is_zero())
        {
            return Next::Wait(wait);
        }
        let batch = std::mem::take(&mut sums.unsent);
        sums.in_flight = batch;
        sums.last_sent = Some(now);
        sums.generation = generation;
        Next::Send(batch, generation)
    }

    /// The store answered a batch (`None`: it did not answer in time, and the batch is
    /// dropped): the sums over every instance, plus what gathered meanwhile, when the breaker
    /// is closed in the generation the batch was sent in.
    fn answered(
        &self,
        answer: Option<WindowCounts>,
        now: Instant,
        current: bool,
    ) -> Option<WindowCounts> {
        let mut sums = lock_std(&self.sums);
        sums.in_flight = WindowCounts::default();
        sums.failed = answer.is_none();
        match answer {
            Some(store) if current => {
                sums.store = Some((store, now));
                Some(store.plus(sums.unsent))
            }
            _ => {
                sums.store = None;
                None
            }
        }
    }

    /// The sending task is gone before it ended (its runtime shut down, or the store
    /// panicked): the next call starts another, and the batch it had sent is unanswered.
    fn lost(&self) {
        let mut sums = lock_std(&self.sums);
        sums.sending = false;
        sums.in_flight = WindowCounts::default();
        sums.failed = true;
    }

    fn unsummed(&self) {
        let mut sums = lock_std(&self.sums);
        sums.unsummed = true;
        sums.sending = false;
    }
}

/// The sending task's mark on its window (`Sums::sending`): a task dropped before it ended
/// by itself clears it, so that a task lost with its runtime or to a panicking store never
/// leaves the window waiting for batches no task sends.
struct Sending {
    breaker: Weak<Breaker>,
    /// The task ended by itself, having cleared the mark under the window's lock (a later
    /// call may have set it again for a task of its own).
    ended: bool,
}

impl Drop for Sending {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let Some(breaker) = self.breaker.upgrade() else {
            return;
        };
        if let Some(summed) = breaker.summed_window() {
            summed.lost();
        }
    }
}

/// The sending task: a batch every [`SEND_EVERY`] at most, while there is one to send.
async fn send(mut sending: Sending) {
    loop {
        let Some(breaker) = sending.breaker.upgrade() else {
            return;
        };
        let Some(link) = breaker.shared_link() else {
            return;
        };
        let Some(summed) = breaker.summed_window() else {
            return;
        };
        let usable = link.sharing.store.usable();
        let (batch, generation) = match summed.next(Instant::now(), breaker.generation(), usable) {
            Next::Done => {
                sending.ended = true;
                return;
            }
            Next::Wait(wait) => {
                drop(breaker);
                tokio::time::sleep(wait).await;
                continue;
            }
            Next::Send(batch, generation) => (batch, generation),
        };
        let (transition, done) =
            match (link.sharing.store).add_to_window(link, WindowBatch::new(summed, batch)) {
                Some(answer) => {
                    // Sums that cannot be are no answer: taken as they are, they would open the
                    // breaker on calls that never failed, or drown its failures for good.
                    let answer = (link.sharing.bounded(answer).await)
                        .map(WindowCounts::from)
                        .filter(|sums| sums.can_be(batch));
                    let judged = breaker.judge_sums(summed, answer, generation);
                    // Unanswered, the calls judged meanwhile waited for nothing: the local window
                    // judges them, as it judges the next ones until a batch is answered.
                    let judged = judged.or_else(|| {
                        answer
                            .is_none()
                            .then(|| breaker.judge_alone(generation))
                            .flatten()
                    });
                    (judged, false)
                }
                None => {
                    summed.unsummed();
                    // The calls judged meanwhile waited for this answer: the local window judges.
                    (breaker.judge_alone(generation), true)
                }
            };
        if let Some(transition) = transition {
            breaker.announce(BreakerState::Open);
            (link.sharing.heard)(&*breaker, transition);
        }
        if done {
            sending.ended = true;
            return;
        }
    }
}

impl Breaker {
    /// The store's answer to a batch: opens the breaker if the service's calls trip it.
    fn judge_sums(
        &self,
        summed: &SummedWindow,
        answer: Option<WindowCounts>,
        generation: u32,
    ) -> Option<Transition> {
        let (percent, min_calls) = self.rate_limits()?;
        let _transition = lock(&self.probing);
        let word = self.load();
        let current = word.generation() == generation && word.state() == CLOSED;
        let sums = summed.answered(answer, Instant::now(), current)?;
        if !sums.trips(percent, min_calls) {
            return None;
        }
        Some(self.trip(word))
    }

    /// The store keeps no windows: opens the breaker if this instance's own window trips it.
    fn judge_alone(&self, generation: u32) -> Option<Transition> {
        let (percent, min_calls) = self.rate_limits()?;
        let window = self.window.as_deref()?;
        let _transition = lock(&self.probing);
        let word = self.load();
        if word.generation() != generation
            || word.state() != CLOSED
            || !lock(window).trips(percent, min_calls)
        {
            return None;
        }
        Some(self.trip(word))
    }
}
