//! A gate that learns the provider's limit from what its answers say (`rate = "auto"`, or a
//! declared rate with `learn = true`).
//!
//! An answer says "`remaining` units left until `reset`, out of `limit`". Two things follow:
//!
//! - **Before the reset**, at most `remaining` more units, less those the gate already
//!   promised before it (units reserved after the answered call, whether or not the provider
//!   had seen them: an answer never lets the gate send what the calls in flight will take).
//!   An auto gate hands what is left out at once, to whoever asks first, as the provider
//!   would; nothing left (or less than already promised) holds the gate until the reset, as
//!   a 429 would, but before it.
//! - **After it**, a steady pace of `limit` units per window, the window being the longest
//!   reset an answer stated (or the IETF `w`): paced rather than a burst at the reset, because
//!   the provider may count in fixed windows (all back at the reset) or as a token bucket
//!   (back a little at a time, so that a burst at the reset would exceed it). A provider that
//!   lowers its limit is followed at the next answer: the pace is the new limit's.
//!
//! An answer to a call older than the latest one applied is stale and is ignored.
//!
//! A gate that knows nothing yet (`rate = "auto"` before its first answer) sends one call
//! and holds the others until that call's answer says something: 40 callers at once do not
//! find the limit by collecting 30 × 429. A probe not answered within [`PROBE_LOST`] lets
//! another go. An answer that says nothing leaves an auto gate open (there is no figure to
//! keep), holding only for 429s; a declared gate keeps its declared rate.
//!
//! Hostile answers are bounded: a declared rate is a ceiling the gate never runs above (a
//! declared gate takes no burst from an answer, only its pace and its holds), and a reset is
//! cut to `retry_after_max` (the bound a `Retry-After` has).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{nanos, RateGate, Slot};
use crate::deadline::NEVER;
use crate::sync::lock_std;
use crate::{Quota, Rejected};

/// The longest a probe's answer is waited for before another caller probes instead.
const PROBE_LOST: Duration = Duration::from_secs(1);

/// The most slots a learning gate keeps booked, and how long: answers to calls that old
/// count nothing more, and a provider that never answers with figures must not make the
/// book grow with every call.
const BOOKED_AT_MOST: usize = 4096;
const BOOKED_FOR: Duration = Duration::from_secs(600);

/// How often callers held by a probe look again: soon after the probe's answer, without a
/// wakeup per answer.
const PROBE_RECHECK: Duration = Duration::from_millis(20);

/// What a learning gate knows.
#[derive(Debug)]
pub(crate) struct Learning {
    /// Nanoseconds per unit the answers say (0: nothing learnt yet).
    learnt: AtomicU64,
    /// Units reserved so far: the answered call's count tells which came after it.
    reserved: AtomicU64,
    /// The slots reserved and not known to be stale: when each starts, its count, its units.
    booked: Mutex<VecDeque<Booked>>,
    /// The count of the latest answered call applied; older answers are stale.
    heard: AtomicU64,
    /// When the probe in flight started (offset + 1; 0: none).
    probe: AtomicU64,
    /// 0: an auto gate that knows nothing yet; 1: it heard an answer (with figures or not).
    told: AtomicU64,
    /// The units per window the latest answer stated (0: none said).
    limit: AtomicU64,
    /// The window, in nanoseconds: the longest reset (or IETF window) an answer stated.
    window: AtomicU64,
    /// For an auto gate: the units it may still hand out at once before the reset.
    spare: Mutex<Spare>,
    /// The key whose gate this is, for a gate per key: what its gauge and events name.
    key: Option<Box<str>>,
}

/// A slot a learning gate reserved: when it starts (nanoseconds since the origin), the count
/// of units reserved up to it, and its units.
#[derive(Debug, Clone, Copy)]
struct Booked {
    start: u64,
    mark: u64,
    units: u64,
}

/// Units an auto gate may hand out at once, until the provider's reset.
#[derive(Debug, Default, Clone, Copy)]
struct Spare {
    units: u64,
    /// The reset, in nanoseconds since the gate's origin.
    until: u64,
}

/// A learning gate's rate changed by more than a tenth: the units per second before (0:
/// nothing learnt yet) and after.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Learnt {
    pub(crate) from: f64,
    pub(crate) to: f64,
}

impl Learning {
    pub(crate) fn new(told: bool) -> Self {
        Learning {
            learnt: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            booked: Mutex::new(VecDeque::new()),
            heard: AtomicU64::new(0),
            probe: AtomicU64::new(0),
            told: AtomicU64::new(u64::from(told)),
            limit: AtomicU64::new(0),
            window: AtomicU64::new(0),
            spare: Mutex::new(Spare::default()),
            key: None,
        }
    }

    /// What the gate of the key `key` knows when it is made: nothing yet, for an auto gate.
    pub(crate) fn fresh(&self, auto: bool, key: &str) -> Self {
        Learning {
            key: Some(key.into()),
            ..Learning::new(!auto)
        }
    }

    fn told(&self) -> bool {
        self.told.load(Ordering::Acquire) != 0
    }
}

impl RateGate {
    /// Whether this is an auto gate that knows nothing yet: it sends one call at a time.
    #[cfg(feature = "redis")]
    pub(crate) fn probing(&self) -> bool {
        self.learning
            .as_ref()
            .is_some_and(|learning| !learning.told())
    }

    /// The interval a learning gate runs at: what it learnt, never faster than declared.
    #[inline]
    pub(super) fn learnt_interval(&self, learning: &Learning) -> u64 {
        learning.learnt.load(Ordering::Acquire).max(self.interval)
    }

    /// Books `cost` units reserved by a learning gate to start at `start`; the count after
    /// them marks the slot. Nothing for another gate.
    pub(super) fn book(&self, cost: u64, start: u64) -> u64 {
        let Some(learning) = &self.learning else {
            return 0;
        };
        let mut booked = lock_std(&learning.booked);
        let stale = start.saturating_sub(nanos(BOOKED_FOR));
        while booked.len() >= BOOKED_AT_MOST
            || booked.front().is_some_and(|oldest| oldest.start < stale)
        {
            booked.pop_front();
        }
        let mark = learning
            .reserved
            .fetch_add(cost, Ordering::AcqRel)
            .saturating_add(cost);
        booked.push_back(Booked {
            start,
            mark,
            units: cost,
        });
        mark
    }

    /// `slot` went back unused: it is no longer booked.
    pub(super) fn unbook(&self, slot: Slot) {
        if let Some(learning) = &self.learning {
            lock_std(&learning.booked).retain(|booked| booked.mark != slot.mark());
        }
    }

    /// A hold revoked every slot that starts after `now`: they are booked again after it.
    pub(super) fn unbook_after(&self, now: u64) {
        if let Some(learning) = &self.learning {
            lock_std(&learning.booked).retain(|booked| booked.start <= now);
        }
    }

    /// A slot from an auto gate that knows nothing yet: the probe's, at once, when none is in
    /// flight; otherwise a provisional one, a short look later (always revoked, so its caller
    /// reserves again). `None`: the gate knows enough to reserve as usual.
    pub(super) fn probe_slot(
        &self,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<Result<(Duration, Slot), Rejected>> {
        let learning = self.learning.as_ref()?;
        if learning.told() {
            return None;
        }
        let at = self.offset(now);
        let probe = learning.probe.load(Ordering::Acquire);
        let lost = probe != 0 && at.saturating_sub(probe - 1) >= nanos(PROBE_LOST);
        if (probe == 0 || lost)
            && learning
                .probe
                .compare_exchange(
                    probe,
                    at.saturating_add(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            let mark = self.book(1, at);
            return Some(Ok((Duration::ZERO, Slot::off_schedule(mark, self.epoch()))));
        }
        let left = deadline.map_or(NEVER, |deadline| deadline.saturating_duration_since(now));
        let wait = PROBE_RECHECK.min(left);
        if wait.is_zero() {
            return Some(Err(Rejected::RateLimited {
                retry_in: PROBE_RECHECK,
            }));
        }
        Some(Ok((wait, Slot::provisional())))
    }

    /// The probe's call ended without an answer to learn from (cancelled, or refused before
    /// calling): another caller probes.
    pub(crate) fn probe_ended(&self, slot: Slot) {
        if let (Some(learning), true) = (&self.learning, slot.is_off_schedule()) {
            learning.probe.store(0, Ordering::Release);
        }
    }

    /// A slot from what an auto gate may hand out at once before the provider's reset, if
    /// it may.
    pub(super) fn spare_slot(&self, now: Instant, cost: u64) -> Option<Slot> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        let at = self.offset(now);
        let mut spare = lock_std(&learning.spare);
        if at >= spare.until || spare.units < cost {
            return None;
        }
        spare.units -= cost;
        drop(spare);
        Some(Slot::off_schedule(self.book(cost, at), self.epoch()))
    }

    /// What the answer to a call through this gate said (`None`: nothing), for the call whose
    /// slot `slot` was (see the [module docs](self)): the pace after the reset, what may go
    /// before it, or a hold until it (at most `max_wait`). Returns the change of rate, when
    /// it was more than a tenth.
    pub(crate) fn learn(
        &self,
        quota: Option<Quota>,
        at: Instant,
        slot: Slot,
        max_wait: Duration,
    ) -> Option<Learnt> {
        let learning = self.learning.as_ref()?;
        // A slot apart from the schedule may be the probe: an answer, whatever it says,
        // ends the probing (a spare's, in a gate no longer probing, changes nothing).
        if slot.is_off_schedule() {
            learning.told.store(1, Ordering::Release);
            learning.probe.store(0, Ordering::Release);
        }
        let quota = quota?;
        // Stale: a later call's answer was applied already.
        if learning.heard.fetch_max(slot.mark(), Ordering::AcqRel) > slot.mark() {
            return None;
        }
        let old = learning.learnt.load(Ordering::Acquire);
        let reset = quota.reset.min(max_wait);
        let until = self.offset(at).saturating_add(nanos(reset));
        if let Some(limit) = quota.limit {
            learning.limit.store(limit, Ordering::Release);
        }
        let window = quota.window.map_or(reset, |window| window.min(max_wait));
        let window = learning
            .window
            .fetch_max(nanos(window), Ordering::AcqRel)
            .max(nanos(window));
        // With no limit stated, the provider allows at least what is left and this call.
        let limit = match learning.limit.load(Ordering::Acquire) {
            0 => quota.remaining.saturating_add(1),
            limit => limit,
        };
        let pace = (window / limit.max(1)).max(1);
        learning.learnt.store(pace, Ordering::Release);
        // Units reserved after the answered call that start before the reset. Those reserved
        // up to it count for no later answer: they are forgotten.
        let promised = {
            let mut booked = lock_std(&learning.booked);
            booked.retain(|booked| booked.mark > slot.mark());
            booked
                .iter()
                .filter(|booked| booked.start < until)
                .map(|booked| booked.units)
                .sum::<u64>()
        };
        if quota.remaining == 0 {
            // Nothing left: no slot before the reset.
            *lock_std(&learning.spare) = Spare::default();
            let left = until.saturating_sub(self.offset(Instant::now()));
            if left > 0 {
                self.hold_here(Duration::from_nanos(left));
            }
        } else if quota.remaining <= promised {
            // The schedule already holds what is left (or a little more, the pace being
            // an estimate: the answer that says nothing is left holds the rest).
            *lock_std(&learning.spare) = Spare::default();
        } else if self.auto {
            let units = quota.remaining - promised;
            *lock_std(&learning.spare) = Spare { units, until };
            // The schedule resumes at the reset: what goes before it is the spare.
            self.tat.fetch_max(until, Ordering::AcqRel);
        }
        let before = match old {
            0 => 0.0,
            old => per_second(old.max(self.interval)),
        };
        let to = per_second(self.learnt_interval(learning));
        // A tenth either way is news; less is the pace breathing.
        let changed = before == 0.0 || (to - before).abs() > before / 10.0;
        changed.then_some(Learnt { from: before, to })
    }

    /// The key a learning gate per key belongs to.
    pub(crate) fn learnt_key(&self) -> Option<&str> {
        self.learning.as_ref()?.key.as_deref()
    }

    /// The units per second a learning gate runs at now (`None`: not a learning gate, or
    /// nothing learnt yet).
    pub fn learnt_rate(&self) -> Option<f64> {
        let learning = self.learning.as_ref()?;
        (learning.learnt.load(Ordering::Acquire) != 0)
            .then(|| per_second(self.learnt_interval(learning)))
    }
}

/// Units per second at `interval` nanoseconds per unit.
fn per_second(interval: u64) -> f64 {
    1e9 / interval.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider that never states its limits must not make the book grow with every call.
    #[tokio::test(start_paused = true)]
    async fn the_book_stays_bounded_when_no_answer_comes() {
        let gate = RateGate::new(1_000_000, Duration::from_secs(1), 1)
            .unwrap()
            .learning();
        for _ in 0..(BOOKED_AT_MOST * 3) {
            gate.reserve(1, None).unwrap();
        }
        let learning = gate.learning.as_ref().unwrap();
        assert_eq!(lock_std(&learning.booked).len(), BOOKED_AT_MOST);
        tokio::time::advance(BOOKED_FOR * 2).await;
        gate.reserve(1, None).unwrap();
        assert_eq!(lock_std(&learning.booked).len(), 1, "the old ones aged out");
    }
}
