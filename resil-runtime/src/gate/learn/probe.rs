//! What an auto gate hands out apart from its schedule: the probe's slot while it knows
//! nothing yet, and what an answer said is left before the reset (see the
//! [module docs](super)).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{Learning, PROBE_LOST, PROBE_RECHECK};
use crate::deadline::NEVER;
use crate::gate::{nanos, RateGate, Slot};
use crate::sync::lock_std;
use crate::Rejected;

impl RateGate {
    /// A slot from an auto gate that knows nothing yet: the probe's, at once, when none is in
    /// flight; otherwise a provisional one, a short look later (always revoked, so its caller
    /// reserves again). `None`: the gate knows enough to reserve as usual.
    pub(in crate::gate) fn probe_slot(
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
            let mark = self.book(&mut lock_std(&learning.state), 1, (at, at, at), 1);
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

    /// The wait an auto gate that knows nothing yet asks of a caller: a look again soon.
    pub(in crate::gate) fn probe_wait(&self) -> Option<Duration> {
        self.probing().then_some(PROBE_RECHECK)
    }

    /// The probe's call ended without an answer to learn from (cancelled, cut by its timeout,
    /// or failed before the provider answered): another caller probes. A wait for the probe's
    /// answer ([`Slot::provisional`]) is no probe.
    pub(crate) fn probe_ended(&self, slot: Slot) {
        let probe = slot.is_off_schedule() && !slot.is_provisional();
        if let (Some(learning), true) = (&self.learning, probe) {
            if !learning.told() {
                learning.probe.store(0, Ordering::Release);
            }
        }
    }

    /// Whether an auto gate may hand out `cost` units at once now, before the provider's
    /// reset, and no hold is in force.
    fn spare_covers(&self, learning: &Learning, at: u64, cost: u64) -> bool {
        let spare = lock_std(&learning.state).spare;
        at < spare.until && spare.units >= cost && self.held_until.load(Ordering::Acquire) <= at
    }

    /// The wait before `cost` units could pass through an auto gate's spare (zero), if they
    /// could.
    pub(in crate::gate) fn spare_wait(&self, at: u64, cost: u64) -> Option<Duration> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        self.spare_covers(learning, at, cost)
            .then_some(Duration::ZERO)
    }

    /// Whether an auto gate may hand out `cost` units at once now.
    pub(in crate::gate) fn spare_covers_now(&self, cost: u64) -> bool {
        self.spare_wait(self.offset(Instant::now()), cost).is_some()
    }

    /// A slot from what an auto gate may hand out at once before the provider's reset, if
    /// it may: the room's next (`in_turn`) first; a caller that needs no wait only while
    /// nobody waits in the gate's room, or what is left is too little for its next.
    pub(in crate::gate) fn spare_slot(
        &self,
        now: Instant,
        cost: u64,
        in_turn: bool,
    ) -> Option<Slot> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        // Read before the state's lock: the room's is never taken under it.
        let next = (!in_turn).then(|| self.next_waits_for()).flatten();
        let at = self.offset(now);
        if self.held_until.load(Ordering::Acquire) > at {
            return None;
        }
        let mut state = lock_std(&learning.state);
        if at >= state.spare.until || state.spare.units < cost {
            return None;
        }
        if next.is_some_and(|units| units.is_none_or(|units| units <= state.spare.units)) {
            return None;
        }
        state.spare.units -= cost;
        let mark = self.book(&mut state, cost, (at, at, at), 1);
        drop(state);
        Some(Slot::off_schedule(mark, self.epoch()))
    }
}
