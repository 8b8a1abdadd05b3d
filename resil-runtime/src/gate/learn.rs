//! A gate that learns the provider's limit from what its answers say (`rate = "auto"`, or a
//! declared rate with `learn = true`).
//!
//! An answer says "`remaining` units left until `reset`". The gate spreads what is left
//! evenly over what is left of that time, after the slots it has already promised:
//! `interval = (reset instant − end of the schedule) / (remaining − units reserved after the
//! answered call)`. Spread rather than spent at once, because the provider may count over a
//! fixed window (all of it back at the reset) or a token bucket (back a little at a time):
//! spreading never exceeds either, and runs at the provider's capacity instead of 20 % under
//! it. Nothing left (`remaining` used up by the calls already scheduled) holds the gate until
//! the reset, as a 429 would, but before it. Units reserved after the answered call are
//! counted as spent, whether or not the provider had seen them: an answer never lets the gate
//! send what the calls in flight will take. An answer to a call older than the latest one
//! applied is stale and is ignored.
//!
//! A gate that knows nothing yet (`rate = "auto"` before its first answer) sends one call
//! and holds the others until that call's answer says something: 40 callers at once do not
//! find the limit by collecting 30 × 429. A probe not answered within [`PROBE_LOST`] lets
//! another go. An answer that says nothing leaves an auto gate open (there is no figure to
//! keep), holding only for 429s; a declared gate keeps its declared rate.
//!
//! Hostile answers are bounded: a declared rate is a ceiling the gate never runs above, and a
//! reset is cut to `retry_after_max` (the same bound a `Retry-After` has).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{nanos, RateGate, Slot};
use crate::deadline::NEVER;
use crate::{Quota, Rejected};

/// The longest a probe's answer is waited for before another caller probes instead.
pub(crate) const PROBE_LOST: Duration = Duration::from_secs(1);

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
    /// The count of the latest answered call applied; older answers are stale.
    heard: AtomicU64,
    /// When the probe in flight started (offset + 1; 0: none).
    probe: AtomicU64,
    /// 0: an auto gate that knows nothing yet; 1: it heard an answer (with figures or not).
    told: AtomicU64,
    /// The key whose gate this is, for a gate per key: what its gauge and events name.
    key: Option<Box<str>>,
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
            heard: AtomicU64::new(0),
            probe: AtomicU64::new(0),
            told: AtomicU64::new(u64::from(told)),
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
}

impl RateGate {
    /// The interval a learning gate runs at: what it learnt, never faster than declared.
    #[inline]
    pub(super) fn learnt_interval(&self, learning: &Learning) -> u64 {
        learning.learnt.load(Ordering::Acquire).max(self.interval)
    }

    /// Counts `cost` units reserved by a learning gate; the count after them marks the slot.
    pub(super) fn count_reserved(&self, cost: u64) -> u64 {
        self.learning.as_ref().map_or(0, |learning| {
            learning
                .reserved
                .fetch_add(cost, Ordering::AcqRel)
                .saturating_add(cost)
        })
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
            let mark = self.count_reserved(1);
            return Some(Ok((Duration::ZERO, Slot::probe(mark, self.epoch()))));
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
        if let (Some(learning), true) = (&self.learning, slot.probe) {
            learning.probe.store(0, Ordering::Release);
        }
    }

    /// What the answer to a call through this gate said (`None`: nothing), for the call whose
    /// slot `slot` was: the gate now spreads what is left until the reset over the time left,
    /// or holds until the reset when nothing is, at most `max_wait`. Returns the change of
    /// rate, when there was one.
    pub(crate) fn learn(
        &self,
        quota: Option<Quota>,
        slot: Slot,
        max_wait: Duration,
    ) -> Option<Learnt> {
        let learning = self.learning.as_ref()?;
        if slot.probe {
            learning.told.store(1, Ordering::Release);
            learning.probe.store(0, Ordering::Release);
        }
        let quota = quota?;
        // Stale: a later call's answer was applied already.
        if learning.heard.fetch_max(slot.mark, Ordering::AcqRel) > slot.mark {
            return None;
        }
        let before = match learning.learnt.load(Ordering::Acquire) {
            0 => 0.0,
            _ => per_second(self.learnt_interval(learning)),
        };
        let reset = quota.reset.min(max_wait);
        let now = self.offset(Instant::now());
        let until = now.saturating_add(nanos(reset));
        // The units reserved after the answered call that start before the reset: the
        // schedule runs on from its slot at the current pace.
        let after = learning
            .reserved
            .load(Ordering::Acquire)
            .saturating_sub(slot.mark);
        let pace = self.learnt_interval(learning).max(1);
        let promised = after.min(until.saturating_sub(slot.end.get()).div_ceil(pace));
        if quota.remaining == 0 || quota.remaining < promised {
            // Nothing left, or less than already promised: no slot before the reset.
            if !reset.is_zero() {
                self.hold_here(reset);
            }
            return None;
        }
        let left = quota.remaining - promised;
        if left == 0 {
            return None;
        }
        let from = self.tat.load(Ordering::Acquire).max(now);
        // A reset already behind the schedule says nothing about the pace.
        let spread = until.checked_sub(from).filter(|spread| *spread > 0)?;
        let interval = (spread / left).max(1);
        learning.learnt.store(interval, Ordering::Release);
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
