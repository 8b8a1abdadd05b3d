//! A gate's batch share (`rate = "500/min, batch 80%"`): while calls of other classes come,
//! batch calls take at most the share of the gate's capacity, so the rest is free for the
//! others when they arrive (they start at once rather than behind a full schedule); when
//! none came for a period, batch calls take all of it.
//!
//! The share is a gate of its own, at the share of the count and the burst, that a batch
//! call held back passes before it takes its slot in the gate: it waits in the gate's waiting
//! room and takes its place in the share when it is next, one place at a time, then books its
//! slot, a slot of the moment: no slot of the gate is held idle while it waits, and when the
//! others leave, the next batch call is no longer held back. (A shared gate's batch call books
//! its place at once and waits for it before it asks the store: the waiting room serves a gate
//! only while its store is down.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{nanos, RateGate, Slot};
use crate::priority::Priority;
use crate::{ConfigError, Rejected};

/// The share of a gate's capacity its batch calls may take while others come.
#[derive(Debug)]
pub(crate) struct BatchShare {
    /// The batch calls' own pace: the share of the gate's count, counted over a hundred
    /// periods (so that 1 % of 10/s is 1 per 10 s, not 1 per second), and of its burst.
    gate: RateGate,
    /// The gate's period, over which calls of other classes hold batch calls back.
    period: Duration,
    /// When a call of another class last came, in nanoseconds since the share's gate's
    /// origin, plus one: 0 when none ever did.
    others: AtomicU64,
}

impl RateGate {
    /// Batch calls take at most `percent` of the gate's capacity while calls of other classes
    /// come (see [`BatchShare`]).
    pub(crate) fn batch_share(mut self, percent: u8) -> Result<Self, ConfigError> {
        resil_spec::rules::batch_share(percent)?;
        // A learning gate's capacity is the provider's, which the declared figure only bounds.
        if self.learning.is_some() {
            return Err(ConfigError::BatchShareWithoutRate);
        }
        let count = self.count.saturating_mul(u64::from(percent));
        let burst = (u128::from(self.burst) * u128::from(percent) / 100).max(1);
        let burst = u64::try_from(burst).unwrap_or(u64::MAX);
        let periods = self
            .period
            .checked_mul(100)
            .unwrap_or(crate::deadline::NEVER);
        let gate = RateGate::for_key("rate", count, periods, burst)?;
        self.batch = Some(Box::new(BatchShare {
            gate,
            period: self.period,
            others: AtomicU64::new(0),
        }));
        Ok(self)
    }

    /// The batch share, if the gate keeps one.
    #[inline]
    pub(crate) fn batch(&self) -> Option<&BatchShare> {
        self.batch.as_deref()
    }
}

impl BatchShare {
    /// A call of `class` comes to the gate: whether the share holds it back. One of another
    /// class is noted (and never is); a batch call is while others came within the gate's
    /// period.
    pub(crate) fn holds_back(&self, class: Priority) -> bool {
        let now = self.gate.offset(Instant::now()).saturating_add(1);
        if class != Priority::Batch {
            self.others.fetch_max(now, Ordering::Relaxed);
            return false;
        }
        let others = self.others.load(Ordering::Relaxed);
        others != 0 && now.saturating_sub(others) < nanos(self.period)
    }

    /// Until when the calls of other classes that came hold batch calls back (`None`: none
    /// came).
    pub(crate) fn held_until(&self) -> Option<Instant> {
        let others = self.others.load(Ordering::Relaxed).checked_sub(1)?;
        let until = Duration::from_nanos(others.saturating_add(nanos(self.period)));
        Some(crate::deadline::later(self.gate.origin, until))
    }

    /// A batch call's place in the share, of `cost` units (a token gate's call's; 1 at a rate
    /// gate): the wait until then, and the slot to give back if it never calls; refused, with
    /// nothing reserved, when it would come after `deadline`. A call that costs more than the
    /// share's burst (which the gate itself lets through) waits the longer for it, so that
    /// batch calls keep to the share's pace whatever each costs.
    pub(crate) fn reserve(
        &self,
        cost: u64,
        deadline: Option<Instant>,
    ) -> Result<(Duration, Slot), Rejected> {
        self.gate.reserve_units(cost, deadline)
    }

    /// The wait until a batch call's place in the share, after the places of `before` batch
    /// calls.
    pub(crate) fn wait_after(&self, before: u64) -> Duration {
        let first = self.gate.wait_for(1).unwrap_or(crate::deadline::NEVER);
        let rest = self.gate.interval.saturating_mul(before);
        first.saturating_add(Duration::from_nanos(rest))
    }

    /// A place taken in the share and not used goes back.
    pub(crate) fn refund(&self, slot: Slot) {
        self.gate.refund(slot);
    }
}
