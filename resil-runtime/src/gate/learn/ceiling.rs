//! A learning gate's declared ceiling, checked over the starts themselves (see
//! [`RateGate::start_within_ceiling`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::deadline::later;
use crate::gate::{nanos, RateGate, Slot, SLOT_MISSED};

/// How early a start may come against the declared schedule of the units that started
/// ([`RateGate::start_within_ceiling`]): tokio's timers fire on the millisecond, so a start
/// late by less than one makes the next, on time by the gate's schedule, look early by as
/// much; held to the nanosecond, a gate with burst 1 would lose a little of its rate at every
/// start.
const TIMER_SLACK: u64 = 1_000_000;

impl RateGate {
    /// Starts `cost` units of `slot` now if the declared ceiling allows it, counted over the
    /// units that started (a GCRA at the declared interval and burst): `Ok` with the schedule
    /// before and after them (for [`RateGate::unstart`]), or `Err` with the earliest instant
    /// they may. Always `Ok` but for a learning gate with a declared figure.
    ///
    /// The slots an answer placed again, those given back and re-placed, and those booked
    /// before a hold are each kept within the ceiling by the schedule's floor, but their
    /// interleavings are many (the simulator found six per hundred thousand worlds that
    /// started one more than the ceiling in a period); this check on the starts makes the
    /// promise hold whatever the schedule did. A start counts from when its slot was due,
    /// not from when its caller woke, so a busy runtime's late wakeups do not add up; and up
    /// to [`TIMER_SLACK`] early passes; a start later than [`SLOT_MISSED`] counts from that
    /// long ago (less the slack, which the next start may take). A schedule within the
    /// ceiling is then not delayed.
    pub(crate) fn start_within_ceiling(
        &self,
        slot: Slot,
        cost: u64,
    ) -> Result<(u64, u64), Instant> {
        let Some(learning) = self.learning.as_ref().filter(|_| !self.auto) else {
            return Ok((0, 0));
        };
        let now = self.offset(Instant::now());
        // Later than its slot by more than a late wakeup (another gate held it, or an answer
        // placed its slot sooner meanwhile), it counts from a moment ago, not from its slot.
        let missed = nanos(SLOT_MISSED).saturating_sub(TIMER_SLACK);
        let due = (self.start_of(slot).min(now)).max(now.saturating_sub(missed));
        loop {
            let before = learning.started.load(Ordering::Acquire);
            let allowed = (self.allowed(before.max(now), cost)).saturating_sub(TIMER_SLACK);
            if allowed > now {
                return Err(later(self.origin, Duration::from_nanos(allowed)));
            }
            let after = before
                .max(due)
                .saturating_add(self.interval.saturating_mul(cost));
            if (learning.started)
                .compare_exchange_weak(before, after, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok((before, after));
            }
        }
    }

    /// Takes back a start [`RateGate::start_within_ceiling`] allowed, when another gate of
    /// the call refused its own (if no other start came after it).
    pub(crate) fn unstart(&self, (before, after): (u64, u64)) {
        if let Some(learning) = &self.learning {
            let _ = (learning.started).compare_exchange(
                after,
                before,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check on the starts: a burst at once, then one per declared interval, a start up
    /// to a timer's millisecond early let through; an auto gate has no figure to keep.
    #[tokio::test(start_paused = true)]
    async fn starts_are_held_to_the_declared_ceiling() {
        let gate = RateGate::new(2, Duration::from_secs(1), 2)
            .unwrap()
            .learning();
        let now = Instant::now();
        let slot = |gate: &RateGate| gate.reserve_slot(1, None).unwrap().1;
        assert!(gate.start_within_ceiling(slot(&gate), 1).is_ok());
        assert!(gate.start_within_ceiling(slot(&gate), 1).is_ok());
        let third = gate.start_within_ceiling(slot(&gate), 1).unwrap_err();
        assert_eq!(third - now, Duration::from_millis(499));
        tokio::time::advance(Duration::from_millis(499)).await;
        let started = gate.start_within_ceiling(slot(&gate), 1).unwrap();
        // Taken back, it lets the next go as if it had not started.
        gate.unstart(started);
        assert!(gate.start_within_ceiling(slot(&gate), 1).is_ok());
        assert!(gate.start_within_ceiling(slot(&gate), 1).is_err());
        let auto = RateGate::auto();
        for _ in 0..10 {
            assert!(auto.start_within_ceiling(slot(&gate), 1).is_ok());
        }
    }
}
